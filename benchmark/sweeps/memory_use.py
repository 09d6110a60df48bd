"""Peak memory of each method's training step and evaluation on a backbone's shapes (random
weights), for `fedbench bench`: what a GPU (or a CPU) must hold for one client's step at
the paper's batch size, measured with the same meter a run uses (`benchmark.memory`).

Per method and phase, in a process of its own: the backbone and the method are built, then
  training    one `training_step` and its backward on `batch_size` random images over
              `classes` classes (the client's label space: base2novel trains over every
              base class) -- the optimizer's state (a copy or two of the trainable
              parameters, small next to the activations) is not included;
  evaluation  `encode_classes` over `classes` classes and the image features and logits
              of `batch_size` images, without gradients.
A phase's peak RSS includes the process (torch, the backbone's weights); 'above start' is
the peak minus the resident set when the phase began, the phase's own share.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import warnings
from dataclasses import dataclass
from typing import Sequence

import torch

from benchmark.backbone import load_backbone
from benchmark.memory import MiB, PeakMemory, rss_bytes
from benchmark.method import ClientContext
from benchmark.registry import build_method

PHASES = ("training", "evaluation")


@dataclass
class MemoryReport:
    method: str
    peaks: dict[str, dict[str, float]]  # phase -> PeakMemory's peaks (MiB)
    above_start: dict[str, float]  # phase -> peak RSS minus the RSS when it began (MiB)


def method_memory(
    methods: Sequence[tuple[str, dict]],
    backbone_name: str,
    batch_size: int = 32,
    classes: int = 50,
    device: str = "cpu",
    progress: bool = False,
) -> list[MemoryReport]:
    """The peaks of each of `methods` ((label, {"method": name, "method_args": ...})), each
    phase of each method measured in a process of its own: in one process the allocator
    keeps what was freed before (an earlier method's, the training's), and a peak would
    depend on what ran first."""
    reports = []
    for label, args in methods:
        if progress:
            print(f"  memory of {label} on {backbone_name}, batch {batch_size}, {classes} classes ...", flush=True)
        peaks, above = {}, {}
        for phase in PHASES:
            request = json.dumps([label, args, backbone_name, batch_size, classes, device, phase])
            done = subprocess.run(
                [sys.executable, "-m", "benchmark.sweeps.memory_use", request],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"measuring the {phase} memory of {label} failed:\n{done.stderr[-2000:]}")
            measured, share = json.loads(done.stdout.strip().splitlines()[-1])
            peaks.update(measured)
            above.update(share)
        reports.append(MemoryReport(label, peaks, above))
    return reports


def measure_one(
    label: str, args: dict, backbone_name: str, batch_size: int, classes: int, device: str, phase: str
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """One method's (peaks, above start) of `phase` in this process (see the module doc);
    nothing for the training of a method that does not train."""
    backbone = load_backbone(backbone_name, None, device)
    size = backbone.image_size
    names = tuple(f"class{i:03d}" for i in range(classes))
    images = torch.rand(batch_size, 3, size, size, generator=torch.Generator().manual_seed(0)).to(device)
    labels = (torch.arange(batch_size) % classes).to(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        method = build_method(args.get("method", label), backbone, args.get("method_args", {})).to(device)
    meter = PeakMemory(cuda=str(device).startswith("cuda"))
    above = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log outside a Trainer
        if phase == "training" and method.trains:
            method.train()
            method.set_client(ClientContext(0, 1, names, batch_size, 1))
            start = rss_bytes()
            with meter.phase("training"):
                loss = method.training_step((images, labels), 0)
                loss = loss["loss"] if isinstance(loss, dict) else loss
                if loss is not None:
                    loss.backward()
            above["training"] = meter.peaks["training"]["cpu_rss_peak_mb"] - start / MiB
            method.set_client(None)
            method.zero_grad(set_to_none=True)
            del loss
        if phase == "evaluation":
            method.eval()
            gc.collect()
            start = rss_bytes()
            with meter.phase("evaluation"), torch.no_grad():
                text = method.encode_classes(list(names))
                method.classify(method.image_features(images), text)
            above["evaluation"] = meter.peaks["evaluation"]["cpu_rss_peak_mb"] - start / MiB
    return meter.peaks, {k: round(max(0.0, v), 1) for k, v in above.items()}


def format_memory(reports: Sequence[MemoryReport]) -> str:
    """A markdown table: per method and phase, the peak RSS, its share above the phase's start
    and, on CUDA, the peak allocated and reserved memory (MiB)."""
    cuda = any("cuda_allocated_peak_mb" in p for r in reports for p in r.peaks.values())
    head = "| method | phase | peak RSS | above start |" + (" CUDA allocated | CUDA reserved |" if cuda else "")
    rule = "|---|---|---:|---:|" + ("---:|---:|" if cuda else "")
    lines = [head, rule]
    for r in reports:
        for phase, peaks in r.peaks.items():
            line = f"| {r.method} | {phase} | {peaks['cpu_rss_peak_mb']:.0f} MiB | {r.above_start[phase]:.0f} MiB |"
            if cuda:
                line += f" {peaks['cuda_allocated_peak_mb']:.0f} MiB | {peaks['cuda_reserved_peak_mb']:.0f} MiB |"
            lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":  # one method's measurement, for `method_memory`: JSON in, JSON out
    print(json.dumps(measure_one(*json.loads(sys.argv[1]))))
