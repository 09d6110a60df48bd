"""The torchmetrics metrics a request is scored with: top-1 accuracy exactly as the suite
divided it before, and the extra metrics a run names with --metrics (RunConfig.metrics)."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
import torch
from conftest import run_tiny_cell
from test_accuracy import CLASSES, LABELS, IndexImages, picks  # noqa: F401  (picks: a fixture)

from benchmark.config import RunConfig
from benchmark.errors import ConfigError
from benchmark.evaluation.accuracy import measure
from benchmark.evaluation.metrics import ACCURACY, TopOneAccuracy, extra_metrics


def test_top1_accuracy_is_the_float_the_suite_always_divided():
    rng = random.Random(0)
    for _ in range(500):
        seen = rng.randint(1, 5000)
        correct = rng.randint(0, seen)
        metric = TopOneAccuracy()
        target = torch.zeros(seen, dtype=torch.long)
        logits = torch.zeros(seen, 2)
        logits[correct:, 1] = 1.0  # the first `correct` pick class 0, the rest class 1
        for start in range(0, seen, 997):  # in batches, as evaluation updates it
            metric.update(logits[start : start + 997], target[start : start + 997])
        assert metric.compute().item() == 100.0 * correct / seen  # to the last bit


def test_an_extra_metric_is_scored_beside_the_accuracy_by_hand(picks):  # noqa: F811
    split = IndexImages("hand/test", LABELS, CLASSES)
    # Images 0, 1, 2, 4: cat, dog, fox, dog, picked cat, fox, fox, dog. Micro: 3 / 4; per class
    # recall cat 1, dog 1/2, fox 1: macro 5/6.
    scored = measure(picks, split, [0, 1, 2, 4], (0, 1, 2), batch_size=3, extra=extra_metrics("macro_accuracy"))
    assert scored[ACCURACY] == 75.0
    assert scored["macro_accuracy"] == pytest.approx(5 / 6)
    nothing = measure(picks, split, [], (0, 1), extra=extra_metrics("macro_accuracy"))
    assert all(v != v for v in nothing.values())  # NaN each: no image, no score


def test_metrics_names_a_known_metric_or_a_torchmetrics_class():
    found = extra_metrics("macro_accuracy, torchmetrics.classification.MulticlassF1Score")
    assert list(found) == ["macro_accuracy", "multiclassf1score"]
    assert type(found["multiclassf1score"](4)).__name__ == "MulticlassF1Score"
    with pytest.raises(ConfigError, match="'top5' is no metric; name one of macro_accuracy, calibration_error"):
        extra_metrics("top5")
    with pytest.raises(ConfigError, match="cannot be imported"):
        extra_metrics("torchmetrics.classification.NoSuchMetric")
    with pytest.raises(ConfigError, match="each once"):
        RunConfig(metrics="macro_accuracy,macro_accuracy")


def test_metrics_is_in_the_identity_only_when_set():
    assert "metrics" not in RunConfig().result_key()  # every earlier cell keeps its identity
    assert RunConfig(metrics="macro_accuracy").result_key()["metrics"] == "macro_accuracy"


def test_a_run_with_an_extra_metric_reports_it_and_moves_no_number(fedbench, fake_data_root, tmp_path):
    plain = run_tiny_cell(fedbench, "promptfl", fake_data_root, tmp_path / "plain")
    extra = run_tiny_cell(fedbench, "promptfl", fake_data_root, tmp_path / "extra", "--metrics", "macro_accuracy")
    for name, value in plain["metrics"].items():
        assert extra["metrics"][name] == value  # Local, Base, Novel, HM to the last bit
    for request in ("Local", "Base", "Novel"):
        assert 0.0 <= extra["metrics"][f"{request}/macro_accuracy"] <= 1.0
    assert list(extra["metrics"])[: len(plain["metrics"])] == list(plain["metrics"])  # the protocol's first
    assert extra["config_hash"] != plain["config_hash"]  # a run that records more is another cell
    assert extra.get("spread", {}).keys() == plain.get("spread", {}).keys()  # spread: the protocol's metrics
    rows = list(csv.DictReader(next(Path(tmp_path / "extra").rglob("metrics.csv")).open()))
    per_client = {r["client"] for r in rows if r["metric"] == "Local/macro_accuracy"}
    assert len(per_client) == 3  # two clients and their mean
    config = next(Path(tmp_path / "extra").rglob("config.yaml")).read_text()
    assert "metrics: macro_accuracy" in config
    assert json.loads(json.dumps(extra))  # summary.json stays plain JSON
