"""A protocol is one file: the guide's example, written into a temporary package, runs
through `fedbench run` and `fedbench reproduce` with an option of its own; the protocol
options are declared once (flags, YAML, --protocol-help, checks) and no protocol name is
written into the framework outside its own file."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
from conftest import TINY, assert_guide_shows_example

from benchmark import protocol_registry as registry

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "round_robin_protocol.py"
GUIDE = ROOT / "docs" / "writing-a-protocol.md"


@pytest.fixture
def plugin_protocol(tmp_path, monkeypatch, isolated_registry):
    """The example copied as the one file of package `my_protocols` under tmp_path, named by
    FEDBENCH_PROTOCOLS, with a registry that loads again (and forgets it after the test)."""
    package = tmp_path / "site" / "my_protocols"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "round_robin.py").write_text(EXAMPLE.read_text())
    registry.available_protocols()  # the built-ins, before the registry is isolated
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.setenv("FEDBENCH_PROTOCOLS", "my_protocols.round_robin")
    isolated_registry(registry.PROTOCOLS)
    monkeypatch.delitem(sys.modules, "my_protocols.round_robin", raising=False)
    yield
    sys.modules.pop("my_protocols.round_robin", None)
    sys.modules.pop("my_protocols", None)


def test_the_guide_shows_exactly_the_tested_example():
    assert_guide_shows_example(GUIDE, EXAMPLE)


def test_a_protocol_file_runs_through_run_and_reproduce(plugin_protocol, fedbench, fake_data_root, tmp_path):
    assert "round_robin" in registry.available_protocols(), registry.PROTOCOLS.errors
    out = tmp_path / "runs"
    common = ["--backbone", TINY, "--pretrained", "none", "--data-root", fake_data_root, "--wandb", "disabled"]
    small = ["--shots", 2, "--batch-size", 8, "--rounds", 1, "--clients", 2]
    done = fedbench(
        "run", "--protocol", "round_robin", "--stride", 2, "--dataset", "dtd", "--out", out, *common, *small
    )
    assert done.returncode == 0, done.stderr
    folder = next(out.glob("promptfl_dtd_round_robin_*"))
    config = (folder / "config.yaml").read_text()
    assert "protocol_args:\n  stride: 2\n" in config
    assert set(json.loads((folder / "summary.json").read_text())["metrics"]) == {"Acc"}
    counts = (folder / "partition.csv").read_text().splitlines()
    assert len(counts) == 1 + 2 and (folder / "partition.png").stat().st_size > 0  # header + one row per client
    # Its option is checked against its declaration.
    bad = fedbench("run", "--protocol", "round_robin", "--stride", 0, "--dataset", "dtd", "--out", out, *common)
    assert bad.returncode == 2 and "stride = '0' is invalid: expected an integer >= 1" in bad.stderr

    preset = tmp_path / "table.yaml"
    preset.write_text(
        "title: round robin\n"
        "run: {protocol: round_robin, stride: 2, shots: 2, batch_size: 8, rounds: 1, clients: 2, "
        f"backbone: {TINY}, pretrained: none, wandb: disabled}}\n"
        "datasets: [dtd]\nmethods: [promptfl]\nseeds: [1]\n"
    )
    results = tmp_path / "results"
    args = ["reproduce", preset, "--out", out, "--results", results, "--data-root", fake_data_root]
    done = fedbench(*args)
    assert done.returncode == 0, done.stderr
    assert "1 done" in done.stdout or "reused" in done.stdout or "skip" in done.stdout.lower(), (
        done.stdout
    )  # the run above
    assert "Acc" in (results / "table.md").read_text()


def test_protocol_options_are_flags_yaml_keys_and_listed(fedbench, tmp_path):
    from benchmark.config import build_config

    flat = build_config({"protocol": "dirichlet", "beta": 0.3})
    nested = build_config({"protocol": "dirichlet", "protocol_args": {"beta": 0.3}})
    assert flat.protocol_args == nested.protocol_args == {"beta": 0.3, "min_client_size": 2}
    done = fedbench("run", "--protocol", "dirichlet", "--beta", "0.3", "--print-config")
    assert done.returncode == 0 and "protocol_args:\n  beta: 0.3\n  min_client_size: 2\n" in done.stdout
    listed = fedbench("run", "--protocol", "pathological", "--protocol-help")
    assert listed.returncode == 0 and "--classes-per-client INT" in listed.stdout and "default 2" in listed.stdout
    wrong = fedbench("run", "--beta", "0.3", "--print-config")  # base2novel has no beta
    assert wrong.returncode == 2 and "an option of protocol dirichlet, domains, not of base2novel" in wrong.stderr


def test_the_run_help_lists_every_protocol_and_option_from_the_registry(capsys):
    from benchmark.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    flat = " ".join(capsys.readouterr().out.split())
    for name, cls in registry.available_protocols().items():
        assert name in flat
        for option in cls.options:
            assert "--" + option.replace("_", "-") in flat


def _string_constants(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)}


def test_no_protocol_name_is_written_into_the_framework():
    """Outside its own file a protocol is reached through the registry: no code compares or
    passes its name (RunConfig's default protocol is the one named value)."""
    names = set(registry.available_protocols())
    own = ROOT / "benchmark" / "evaluation" / "protocols"
    found = {
        f"{path.relative_to(ROOT)}: {value!r}"
        for path in (ROOT / "benchmark").rglob("*.py")
        if own not in path.parents and path != ROOT / "benchmark" / "config.py"
        for value in _string_constants(path) & names
    }
    # `fedbench datasets`' column of a dataset's domains shares a word with the protocol, and
    # the paper's Table 1 preset, whose schedule `fedbench bench` costs, its name with base2novel.
    assert found == {"benchmark/cli/commands/datasets.py: 'domains'", "benchmark/sweeps/perf.py: 'base2novel'"}


def test_protocol_options_are_part_of_the_cell_identity():
    from benchmark.config import build_config
    from benchmark.runs.identity import cell_hash, run_name

    default = build_config({"protocol": "dirichlet"})
    assert cell_hash(default) == cell_hash(build_config({"protocol": "dirichlet", "beta": 0.5}))  # defaults resolved
    flat = build_config({"protocol": "dirichlet", "beta": 0.1})
    assert cell_hash(flat) == cell_hash(build_config({"protocol": "dirichlet", "protocol_args": {"beta": 0.1}}))
    assert cell_hash(flat) != cell_hash(default)
    msst = build_config({"protocol": "msst", "dataset": "toy_domains", "target": "dusk"})
    assert run_name(msst).startswith("promptfl_toy_domains_to-dusk_msst_")  # the protocol's run_name_part
