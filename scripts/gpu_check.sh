#!/usr/bin/env bash
# Times every Table 1 method on ViT-B/16 (random weights: the real architecture, no download)
# on a CUDA GPU on Table 1's workload: DTD's 47 classes dealt to 10 clients as Table 1 deals
# them, 470 px images, augmentation on; eager (base2novel.yaml's default path), compiled blocks
# and batched clients side by side, timed with CUDA events. Writes results/gpu.md (the GPU, the
# date, the versions, every figure, the data share, Table 1's projected GPU-hours per method
# and precision). Then runs the tests that need CUDA (`pytest -m gpu`). Without a GPU it says
# so and exits 0; `python scripts/gpu_check.py --device cpu --backbone fedbench-tiny-vit ...`
# checks the script on the CPU (tests/system/test_gpu_check.py).
#
#   bash scripts/gpu_check.sh            # uses ./.venv/bin/python if present, else python
#   bash scripts/gpu_check.sh --methods promptfl,pfedmma --no-batched    # a part (flags: scripts/gpu_check.py --help)
#   bash scripts/gpu_check.sh --shapes 47,100,397                         # Table 1's range of client sizes (longer)
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
