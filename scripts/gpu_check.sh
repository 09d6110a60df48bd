#!/usr/bin/env bash
# Times every Table 1 method on ViT-B/16 (random weights: the real architecture, no download)
# on a CUDA GPU at three shapes (32, 80 and 320 images per client; 47, 100 and 397 classes),
# with batched evaluation and training against one by one, and writes results/gpu.md (the
# GPU, the date, the versions, every figure, the GPU share of a client-round and the Table 1
# GPU-hour estimate; the dry run's GPU-hour line then uses its rate). Then runs the tests
# that need CUDA (`pytest -m gpu`). Without a GPU it says so and exits 0.
#
#   bash scripts/gpu_check.sh            # uses ./.venv/bin/python if present, else python
#   bash scripts/gpu_check.sh --methods promptfl,pfedmma --shapes 47    # a part (flags: scripts/gpu_check.py --help)
#   PYTHON=/path/to/python bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}"

if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check: no CUDA GPU visible to torch on $(hostname); nothing to time (run this on a GPU machine)."
    exit 0
fi

PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" scripts/gpu_check.py "$@"
"$PYTHON" -m pytest -m gpu -q -p no:cacheprovider
