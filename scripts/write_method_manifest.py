"""Write methods/hyperparameters.json: the built-in methods' hyperparameters (types,
defaults, ranges, help) as their classes say, and the sha256 of each file they were read
from, for `fedbench run` to check flags against before torch loads. Run it after changing a
method in methods/ (or adding one, to make its flags fast too); `tests/core/test_hyperparameters.py`
fails while a recorded file has changed. Usage: python scripts/write_method_manifest.py"""

from __future__ import annotations

import json
from pathlib import Path

from benchmark.files import atomic_write
from benchmark.hyperparameters import MANIFEST
from benchmark.registry import hyperparameter_manifest


def write_manifest(path: Path = MANIFEST) -> None:
    # Atomically: a `fedbench` command reading it meanwhile sees the old file or the new one.
    atomic_write(path, json.dumps(hyperparameter_manifest(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_manifest()
    print(f"wrote {MANIFEST}")
