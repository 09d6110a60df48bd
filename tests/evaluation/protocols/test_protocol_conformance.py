"""What every registered protocol must do (moved from tests/data/test_combined.py)."""

from __future__ import annotations

import pytest

from benchmark.config import ConfigError, build_config
from benchmark.evaluation.protocols import get_protocol


@pytest.mark.parametrize(
    "options, message",
    [
        ({"dataset": "dtd+caltech101", "protocol": "base2novel"}, "runs on one dataset"),
        ({"dataset": "dtd", "protocol": "msst"}, "no fixed target domain is known"),
        ({"dataset": "imagenet", "protocol": "transfer"}, "needs datasets to test on"),
    ],
)
def test_protocol_settings_are_checked_before_loading(options, message):
    config = build_config(options)
    with pytest.raises(ConfigError, match=message):
        get_protocol(config.protocol).check(config)
