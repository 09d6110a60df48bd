"""Write methods/hyperparameters.json: the built-in methods' hyperparameters (types,
defaults, ranges, help) as their classes say, and the sha256 of each file they were read
from, for `fedbench run` to check flags against before torch loads. Run it after changing a
method in methods/ (or adding one, to make its flags fast too); `tests/core/test_hyperparameters.py`
fails while a recorded file has changed. Usage: python scripts/write_method_manifest.py"""

from __future__ import annotations

import json
import os
import tempfile

from benchmark.hyperparameters import MANIFEST
from benchmark.registry import hyperparameter_manifest

if __name__ == "__main__":
    text = json.dumps(hyperparameter_manifest(), indent=1, sort_keys=True) + "\n"
    # Atomically: a `fedbench` command reading it meanwhile sees the old file or the new one.
    handle, tmp = tempfile.mkstemp(prefix=f".{MANIFEST.name}.", dir=MANIFEST.parent)
    with os.fdopen(handle, "w") as f:
        f.write(text)
    os.replace(tmp, MANIFEST)
    print(f"wrote {MANIFEST}")
