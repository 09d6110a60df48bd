"""`fedbench methods --describe NAME --backbone ViT-B-16` prints the FedMVP papers' counts
(trainable = uploaded: every one of these methods federates all it trains)."""

from __future__ import annotations

import pytest

COUNTS = [
    ("fedtpg", [], 4_206_080),
    ("fedcocoop", [], 35_360),
    ("fedvpt", [], 73_728),
    ("fedmaple", [], 3_555_072),
    ("fedclip", [], 525_312),
    ("promptfl", ["--n-ctx", "4"], 2_048),
]


@pytest.mark.parametrize("name, flags, count", COUNTS, ids=[c[0] for c in COUNTS])
def test_describe_prints_the_papers_counts(fedbench, name, flags, count):
    done = fedbench("methods", "--describe", name, "--backbone", "ViT-B-16", *flags)
    assert done.returncode == 0, done.stderr
    assert f"{count:,} trainable parameters, {count:,} uploaded per client per round" in done.stdout
