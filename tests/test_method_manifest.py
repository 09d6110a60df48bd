"""methods/hyperparameters.json: the built-in methods' hyperparameters as their classes say,
which the command line checks values against before torch loads."""

from __future__ import annotations

import json

import pytest

from benchmark import hyperparameters as manifest
from benchmark.cli.args import method_hyperparameters
from benchmark.hyperparameters import MethodError, check_values
from benchmark.registry import builtin_methods, hyperparameter_manifest, hyperparameters


def check_method_args(name: str, values: dict) -> dict:  # as `fedbench run` checks its flags
    return check_values(name, method_hyperparameters(name), values)


def test_the_manifest_says_what_the_classes_say():
    stale = "methods/hyperparameters.json is out of date: run `python scripts/write_method_manifest.py`"
    stored = json.loads(manifest.MANIFEST.read_text())
    assert stored == json.loads(json.dumps(hyperparameter_manifest())), stale  # as written: tuples as lists
    for name, cls in builtin_methods().items():
        assert manifest.builtin_hyperparameters(name) == hyperparameters(cls), f"{name}: {stale}"


def test_a_stale_manifest_is_not_used(monkeypatch, tmp_path):
    """After a method's source changes, the classes are read instead: a range loosened in
    the source but not in the manifest must not refuse a value the method now takes."""
    stored = json.loads(manifest.MANIFEST.read_text())
    lr = next(r for r in stored["methods"]["promptfl"] if r["name"] == "lr")
    lr["range"] = {"gt": 1.0}  # a manifest that would refuse lr 0.5
    stale = tmp_path / "hyperparameters.json"
    stale.write_text(json.dumps({**stored, "sources_sha256": "0" * 64}))
    monkeypatch.setattr(manifest, "MANIFEST", stale)
    assert manifest.builtin_hyperparameters("promptfl") is None
    assert check_method_args("promptfl", {"lr": 0.5}) == {"lr": 0.5}
    # With a current digest the (edited) manifest is what is checked against.
    stale.write_text(json.dumps({**stored, "sources_sha256": manifest.sources_digest()}))
    with pytest.raises(MethodError, match="'lr' must be > 1"):
        check_method_args("promptfl", {"lr": 0.5})


def test_methods_outside_the_manifest_are_read_from_their_classes(tmp_path):
    plugin = tmp_path / "scaled.py"
    plugin.write_text(
        "from benchmark.method import FederatedMethod, Range\n"
        "class Scaled(FederatedMethod):\n"
        "    ranges = {'scale': Range(gt=0)}\n"
        "    def __init__(self, backbone, scale: float = 1.0):\n"
        "        super().__init__(backbone)\n"
    )
    (h,) = method_hyperparameters(f"{plugin}:Scaled")
    assert (h.name, h.type, h.default, str(h.range)) == ("scale", float, 1.0, "> 0")
    with pytest.raises(MethodError, match="'scale' must be > 0"):
        check_method_args("scaled", {"scale": 0})
