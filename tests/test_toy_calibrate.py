"""The calibration command (`python -m data.toy.calibrate`) on the small test checkpoint with
a few CoOp steps: the table has its structure, every number is an accuracy, the run is
deterministic and names the checkpoint it measured. No expected metric is asserted."""

from __future__ import annotations

import re

from data.toy import world


def _numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"(?<![\w.])[-+]?\d+\.\d(?![\w])", line)]


def test_calibration_table_structure_and_range(tmp_path, toy_test_checkpoint):
    from data.toy.calibrate import main
    from data.toy.pretrain import file_sha256

    out = tmp_path / "calibration.md"
    args = ["--test", "--steps", "3", "--datasets", "toy", "toy_patterns", "toy_domains", "--out", str(out)]
    text = main(args)
    assert out.read_text() == text
    assert "python -m data.toy.calibrate --test --steps 3" in text
    assert file_sha256(toy_test_checkpoint) in text

    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| toy")}
    assert set(rows) == {"toy", "toy_patterns"}
    for line in rows.values():
        values = _numbers(line)
        assert len(values) == 7  # ZS Base, ZS Novel, probe, CoOp Base, CoOp Novel and two differences
        assert all(0.0 <= v <= 100.0 for v in values[:5])
        assert values[5] == round(values[3] - values[0], 1) or abs(values[5] - (values[3] - values[0])) < 0.11
    styles = world.toy_specs()["toy_domains"].domains
    style_rows = [line for line in text.splitlines() if line.startswith("| ") and line.split("|")[1].strip() in styles]
    assert [line.split("|")[1].strip() for line in style_rows] == list(styles)
    for line in style_rows:
        values = _numbers(line)
        assert len(values) == 3 and all(0.0 <= v <= 100.0 for v in values)

    again = main(args)
    assert again == text  # seeded, 1 thread: the same table
