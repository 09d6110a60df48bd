"""Write methods/hyperparameters.json: the built-in methods' hyperparameters (types,
defaults, ranges, help) as their classes say, for `fedbench run` to check flags against
before torch loads. Run it after changing a method in methods/; `tests/test_method_manifest.py`
fails until you do. Usage: python scripts/write_method_manifest.py"""

from __future__ import annotations

import json

from benchmark.hyperparameters import MANIFEST
from benchmark.registry import hyperparameter_manifest

if __name__ == "__main__":
    MANIFEST.write_text(json.dumps(hyperparameter_manifest(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {MANIFEST}")
