"""A run says what kind it was, as tables label it (issue 50, items 5, 6 and 10): the header and
the printed table of `--federation local` read `promptfl (local)`, of `--finetune-epochs 1`
`promptfl (FT 1)`; `evaluate` and `flower` name their own command; a long method name keeps
the printed table's columns aligned."""

from __future__ import annotations

import pytest

from benchmark.cli.single_run import run_header
from benchmark.config import build_config
from benchmark.runs.reporting import config_label, format_summary


@pytest.mark.parametrize(
    "settings, label",
    [
        ({}, "promptfl"),
        ({"federation": "local"}, "promptfl (local)"),
        ({"federation": "central"}, "promptfl (central)"),
        ({"finetune_epochs": 1}, "promptfl (FT 1)"),
        ({"federation": "local", "finetune_epochs": 2}, "promptfl (local, FT 2)"),
        ({"evaluate_from": "/somewhere/promptfl_toy_run"}, "promptfl (evaluated)"),
    ],
)
def test_the_header_says_the_kind_of_run(settings, label):
    config = build_config({"method": "promptfl", "dataset": "toy", **settings})
    assert config_label(config) == label
    assert run_header(config).startswith(f"fedbench run: {label} on toy (base2novel, 16-shot, seed 1)")
    assert run_header(config, "fedbench flower").startswith(f"fedbench flower: {label} on toy")


SUMMARY = {
    "method": "half_prompt",
    "dataset": "toy",
    "protocol": "base2novel",
    "shots": 16,
    "seed": 1,
    "metrics": {"Local": 70.0, "Base": 60.0, "Novel": 50.0, "HM": 59.1},
    "trainable_params": 1024,
    "uploaded_params": 512,
    "bytes_up_total": 4096,
    "bytes_down_total": 4096,
}


@pytest.mark.parametrize("label", ["half_prompt", "promptfl (local, FT 2)", "lora"])
def test_the_printed_table_stays_aligned(label):
    lines = format_summary(SUMMARY, label=label).splitlines()
    assert lines[0].startswith(f"{label} on toy")
    header, row = lines[1], lines[2]
    assert [i for i, c in enumerate(header) if c == "|"] == [i for i, c in enumerate(row) if c == "|"]
    assert row.split("|")[1].strip() == label
    assert "uploaded 512 per client-round" in lines[3]


def test_an_evaluated_run_prints_no_upload_line():
    lines = format_summary({**SUMMARY, "evaluated_from": "half_prompt_toy_run"}, label="x (evaluated)").splitlines()
    assert lines[3] == "the saved clients of half_prompt_toy_run scored again; nothing trained or uploaded"
