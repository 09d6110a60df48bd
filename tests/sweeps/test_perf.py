"""`fedbench bench` and the per-unit FLOP model behind results/perf.md."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch
from conftest import TINY

from benchmark import flops, shortcuts
from benchmark.method import ClientContext
from benchmark.registry import build_method
from benchmark.sweeps import perf


@pytest.mark.parametrize("method", ["promptfl", "fedotp", "pfedmoap"])
def test_the_bilinear_step_model_predicts_a_counted_step_it_was_not_fitted_on(tiny_backbone, method):
    model = build_method(method, tiny_backbone, {})
    with shortcuts.use(True):
        units = perf.measure(model, clients=4)
        names = perf._names(3)
        model.train()
        model.set_client(ClientContext(0, 2, tuple(names), 48, 50))
        perf._fresh_download(model, 4, 12345)
        images = torch.rand(3, 3, tiny_backbone.image_size, tiny_backbone.image_size)
        labels = torch.tensor([0, 1, 2])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.training_step((images, labels), 0).backward()  # the client-round's first step
            _, counted = flops.count_flops(lambda: model.training_step((images, labels), 0).backward())
    assert counted > 0
    assert perf._at(units.step, 3, 3) == pytest.approx(counted, rel=1e-9)


def test_the_schedule_charges_every_client_round(tiny_backbone):
    model = build_method("promptfl", tiny_backbone, {})
    units = perf.measure(model, clients=10)
    one = perf.schedule_cost(units, perf.Schedule.paper(datasets=("dtd",), seeds=1, rounds=10), minimum=False)
    two = perf.schedule_cost(units, perf.Schedule.paper(datasets=("dtd",), seeds=2, rounds=10), minimum=False)
    assert two.total == pytest.approx(2 * one.total)
    longer = perf.schedule_cost(units, perf.Schedule.paper(datasets=("dtd",), seeds=1, rounds=20), minimum=False)
    assert longer.parts["train_image"] == pytest.approx(2 * one.parts["train_image"])
    minimum = perf.schedule_cost(units, perf.Schedule.paper(datasets=("dtd",), seeds=1, rounds=10), minimum=True)
    assert minimum.total <= one.total


@pytest.mark.slow
def test_bench_quick_writes_the_report_and_its_exit_code_tells_the_verdict(fedbench, tmp_path):
    out = tmp_path / "perf.md"
    done = fedbench("bench", "--quick", "--out", out, "--methods", "promptfl", "pfedmoap")
    report = out.read_text()
    sections = ("FLOPs of the Table 1 schedule on " + TINY, "By source", "Framework share", "shortcuts on and off")
    for section in (*sections, "clients batched and one by one", "Peak memory per method on " + TINY):
        assert section in report
    assert "| promptfl |" in report and "| pfedmoap |" in report
    assert done.returncode == (1 if "NOT met" in report else 0)
    assert done.stdout.startswith(f"fedbench bench: seconds; writes {out} when it is done\n")
    assert "fedbench bench: 0/5 steps (0%)" in done.stderr and "fedbench bench: 5/5 steps (100%)" in done.stderr


def test_bench_says_what_it_rewrites_and_how_long_it_took_last_time(tmp_path):
    """Issue 38: `fedbench bench` ran for minutes and rewrote the tracked results/perf.md
    without a word; it now says so first, with the time the report it replaces took."""
    from benchmark.cli.commands.bench import announce

    shipped = Path(__file__).resolve().parents[2] / "results" / "perf.md"
    took = re.search(r"in (\d+) s\. Machine", shipped.read_text()).group(1)
    assert announce(shipped, quick=False) == (
        f"fedbench bench: {int(took) // 60 + 1} minutes or so (the report there took {took} s); rewrites {shipped}, "
        "this repository's report (--out FILE writes elsewhere) when it is done"
    )
    mine = tmp_path / "perf.md"
    assert (
        announce(mine, quick=False)
        == f"fedbench bench: 10 minutes or more on a laptop CPU; writes {mine} when it is done"
    )
    mine.write_text("Written by `fedbench bench` on 2026-12-02 08:35 UTC in 61 s. Machine: ...")
    assert announce(mine, quick=False) == (
        f"fedbench bench: 2 minutes or so (the report there took 61 s); writes {mine} over the report there when it is done"
    )


@pytest.mark.parametrize("local_epochs", [1, 2], ids=["cosine", "warm-up then cosine"])
def test_the_bare_loop_computes_the_simulators_client_rounds(fake_data_root, tmp_path, local_epochs):
    # The reference the framework share is measured against must train what the simulator trains.
    from conftest import tiny_config

    from benchmark.federation.bare_loop import run_bare
    from benchmark.runs.preparation import prepare_run

    config = tiny_config(fake_data_root, tmp_path, method="promptfl", rounds=2, local_epochs=local_epochs, batch_size=3)
    simulator = prepare_run(config, progress=False).simulator()
    simulator.run()
    bare = run_bare(prepare_run(config, progress=False).simulator())
    last = simulator.loop  # the clients' states as the last round left them (before any evaluation download)
    assert bare.client_states.keys() == last.states.keys()
    for cid, state in bare.client_states.items():
        for key, value in state.items():
            assert torch.equal(value, last.states[cid][key]), f"client {cid}: {key}"
    assert bare.client_rounds == sum(len(r.clients) for r in last.rounds)
    assert 0 < bare.model_seconds < bare.total_seconds and bare.rest_seconds > 0


def class_dealing_defaults(root: Path) -> dict[str, str]:
    """Every default a function argument or a field that takes a class dealing has in the
    project's code (`...dealing...` anywhere, `rule` in data/partition.py), by file and line."""
    import ast

    defaults = {}
    for folder in ("benchmark", "data", "methods"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                pairs = []
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    positional = node.args.posonlyargs + node.args.args
                    pairs = list(zip(positional[len(positional) - len(node.args.defaults) :], node.args.defaults))
                    pairs += [(a, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is not None]
                    pairs = [(a.arg, d) for a, d in pairs]
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                    pairs = [(node.target.id, node.value)]
                for name, value in pairs:
                    takes_dealing = "dealing" in name or (name == "rule" and path.name == "partition.py")
                    if takes_dealing and isinstance(value, ast.Constant):
                        defaults[f"{path.relative_to(root)}:{value.lineno} {name}"] = value.value
    return defaults


def test_no_class_dealing_default_differs_between_two_places():
    """base2novel declares the default class dealing (its `class_dealing` option): every other
    default of a dealing is that one, and the Table 1 schedule `fedbench bench` costs deals as
    its preset says (issue 49: perf.py defaulted to "authors" where the protocol says "balanced")."""
    from benchmark.evaluation.protocols.base2novel import Base2Novel
    from benchmark.sweeps.presets import load_preset

    declared = Base2Novel.options["class_dealing"].default
    defaults = class_dealing_defaults(Path(__file__).resolve().parents[2])
    assert len(defaults) >= 3, defaults  # deal_classes, valid_client_counts, base2novel_partition at least
    assert {where: value for where, value in defaults.items() if value != declared} == {}
    schedule = perf.Schedule.paper()
    assert schedule.config.protocol_args["class_dealing"] == load_preset(perf.PAPER_PRESET).run["class_dealing"]
    # the partition it costs is the protocol's: DTD's 24 base classes dealt as the authors did (2 x 9 + 6)
    assert [len(c.class_ids) for c in schedule.partition("dtd").clients] == [2] * 9 + [6]


def test_the_check_finds_a_dealing_default_that_differs(tmp_path):
    (tmp_path / "benchmark").mkdir()
    (tmp_path / "benchmark" / "costs.py").write_text(
        'from dataclasses import dataclass\n\n@dataclass\nclass S:\n    class_dealing: str = "authors"\n\n'
        'def deal(n, dealing="balanced"):\n    pass\n'
    )
    assert class_dealing_defaults(tmp_path) == {
        "benchmark/costs.py:5 class_dealing": "authors",
        "benchmark/costs.py:7 dealing": "balanced",
    }
