#!/usr/bin/env bash
# Times one client-round of each Table 1 method on ViT-B/16 (random weights: the real
# architecture, no download) on a CUDA GPU, under the code's precision policy
# (`--precision auto`: each method's gpu_precision), and prints figures for the README.
# Without a GPU it says so and exits 0: nothing else depends on it.
#
#   bash scripts/gpu_check.sh            # uses ./.venv/bin/python if present, else python
#   PYTHON=/path/to/python bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}"

if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check: no CUDA GPU visible to torch on $(hostname); nothing to time (run this on a GPU machine)."
    exit 0
fi

PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" - "$@" <<'PY'
"""One round of 10 clients per method on a generated 47-class DTD-layout dataset (16 shots,
2 local epochs, batch 32, augmentation on, as Table 1), ViT-B/16 with random weights.
The first round warms up (cuDNN autotuning, allocator, first optimizers); the second is timed.
Steps are timed on the host: a GPU runs them asynchronously, so "model steps" is the time to
launch them and the per-client-round total (which waits for the state copy) is the figure."""
import os
import tempfile
import time
from pathlib import Path

import torch

import methods  # noqa: F401  (registers the methods)
from benchmark.cli.commands.bench import TABLE1_METHODS, describable_textures
from benchmark.runs.reporting import split_time
from benchmark.config import build_config
from benchmark.runs.runner import run_experiment

root = describable_textures(Path(tempfile.mkdtemp(prefix="fedbench-gpu-")), classes=47, train=16, test=4)
print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}; "
      f"{os.cpu_count()} CPUs")
print("| method | precision | per client-round | model steps | data loading | framework + configure_optimizers | training TFLOP/s (whole client-round) |")
print("|---|---|---:|---:|---:|---:|---:|")
for name in TABLE1_METHODS:
    config = build_config(dict(
        method=name, dataset="dtd", data_root=str(root), backbone="ViT-B-16", pretrained="none", shots=16,
        rounds=2, local_epochs=2, clients=10, class_dealing="authors", batch_size=32, augment=True,
        device="cuda", precision="auto", num_workers=4, wandb="disabled", seed=1, checkpoint_every=0,
    ))
    torch.cuda.synchronize()
    result = run_experiment(config, write=False, progress=False)
    timed = result.federation.rounds[1:] or result.federation.rounds
    client_rounds = sum(len(r.clients) for r in timed)
    if not client_rounds:
        print(f"| {name} | {result.summary['precision']} | trains nothing | – | – | – | – |")
        continue
    split = split_time(timed)
    total, model, data = split.total / client_rounds, split.model / client_rounds, split.data / client_rounds
    rest = total - model - data
    flops = sum(r.train_flops for r in timed)
    # Steps are timed on the host (the GPU runs them asynchronously): the rate is over whole client-rounds.
    rate = flops / sum(r.total_seconds for r in timed) / 1e12 if flops else float("nan")
    print(f"| {name} | {result.summary['precision']} | {1000 * total:.0f} ms | {1000 * model:.0f} ms | "
          f"{1000 * data:.0f} ms | {1000 * rest:.0f} ms ({100 * rest / total:.0f} %) | {rate:.1f} |")
print("(round 2 of 2 timed; model steps include the first step of each kind, which is FLOP-counted and slower)")

# Evaluation of 8 clients on ViT-B/16 with batched evaluation (--batched-evaluation true) and
# without, alternated; under --precision auto (bf16 for most methods: a prediction may flip).
from benchmark.cli.commands.bench import time_batched_evaluation

base = dict(dataset="dtd", data_root=str(root), backbone="ViT-B-16", pretrained="none", shots=16, clients=8,
            device="cuda", precision="auto", seed=1)
walls = time_batched_evaluation(base, [("pfedmma", "pfedmma", {}), ("promptfl", "promptfl", {}), ("lora", "lora", {})])
print()
print("| evaluation of 8 clients | test images | batched | one by one | one by one / batched | largest metric difference |")
print("|---|---:|---:|---:|---:|---:|")
for w in walls:
    print(f"| {w['name']} | {w['images']} | {w['batched']:.2f} s | {w['sequential']:.2f} s | "
          f"{w['sequential'] / w['batched']:.2f}x | {w['apart']:.2f} |")

# Training of 8 clients on ViT-B/16, 2 rounds, with a round's clients in one pass
# (--batched-training true) and one by one, alternated (LoRA trains one by one in both: dropout).
from benchmark.cli.commands.bench import time_batched_training

base = {**base, "rounds": 2, "batch_size": 32}
trained = time_batched_training(
    base, [("pfedmma", "pfedmma", {}), ("promptfl", "promptfl", {}), ("lora", "lora", {})], repeats=1
)
print()
print("| training of 8 clients, 2 rounds | batched | one by one | one by one / batched | largest metric difference |")
print("|---|---:|---:|---:|---:|")
for t in trained:
    ratio = f"{t['sequential'] / t['batched']:.2f}x" if t["together"] else f"one by one in both ({t['reason']})"
    print(f"| {t['name']} | {t['batched']:.2f} s | {t['sequential']:.2f} s | {ratio} | {t['apart']:.2f} |")
PY
