"""The variance-sources command (`python -m data.toy.variance`): each source varied alone.
Zero-shot reads only the test images, so its spread comes from the test draw alone: exactly
0 under init, shots and order, and not 0 under a fresh test draw."""

from __future__ import annotations

import re

import pytest


def _rows(text: str) -> dict[tuple[str, str], list[str]]:
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in ("zero-shot", "CoOp") and not cells[1].startswith("("):
            out[cells[0], cells[1]] = cells[2:]
    return out


@pytest.mark.slow  # ~25 s on an idle core (110 s at load 8)
def test_each_source_alone_and_zero_shot_moves_only_with_the_test_draw(tmp_path):
    from data.toy.variance import main

    out = tmp_path / "variance.md"
    text = main(["--datasets", "toy", "--seeds", "2", "--steps", "3", "--out", str(out)])
    assert out.read_text() == text and "python -m data.toy.variance --datasets toy" in text
    rows = _rows(text)
    assert {s for _, s in rows} == {"init", "shots", "order", "test", "all"}
    for source in ("init", "shots", "order"):
        assert rows["zero-shot", source][:3] == ["0.00", "0.00", "0.00"]
        assert rows["zero-shot", source][3] == "0 %"
    assert float(rows["zero-shot", "test"][2]) > 0 and rows["zero-shot", "test"][3] == "100 %"
    assert float(rows["zero-shot", "all"][2]) > 0  # a rerun's seed draws the test images too
    shares = [int(re.match(r"(\d+) %", rows["CoOp", s][3]).group(1)) for s in ("init", "shots", "order", "test")]
    assert 98 <= sum(shares) <= 102  # rounded shares of one sum


def test_bad_arguments_say_what_was_expected():
    from data.toy.variance import main

    with pytest.raises(SystemExit, match="not base2novel toy datasets"):
        main(["--datasets", "toy_domains"])
    with pytest.raises(SystemExit, match="at least 2 seeds"):
        main(["--datasets", "toy", "--seeds", "1"])
