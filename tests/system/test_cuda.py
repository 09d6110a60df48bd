"""What only a CUDA GPU can check (`pytest -m gpu`; scripts/gpu_check.sh runs them after its
timings). Without a GPU every test here is skipped with the reason (tests/conftest.py); CI never
selects them. Each one is the GPU side of a CPU test: bf16 keeps pFedMMA's adapters, a run
records its CUDA memory, batched training equals one by one, device augmentation is seeded
(and equals its CPU computation), and a toy run on CUDA lands within rounding of the CPU's."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
import torch
from conftest import tiny_config

pytestmark = pytest.mark.gpu

BF16 = torch.autocast("cuda", dtype=torch.bfloat16)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_bf16_keeps_pfedmmas_adapter_term_on_cuda():
    """tests/core/test_backbone.py's check on CUDA's bf16 kernels: the fp32 stream keeps
    alpha * y (5e-3 relative on CPU), a bf16 stream loses most of it."""
    from benchmark.backbone import load_backbone
    from methods.pfedmma import PFedMMA

    backbone = load_backbone("ViT-B-16", None, "cuda")
    torch.manual_seed(0)
    method = PFedMMA(backbone).eval().cuda()
    image = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1)).cuda()
    visual = backbone.model.visual
    with torch.no_grad():
        x = visual._embeds(image)
        for block in visual.transformer.resblocks[:11]:
            x = block(x)
    block = visual.transformer.resblocks[11]

    def contribution(stream, ctx):
        with torch.no_grad(), ctx:
            return method.adapted_block("vision", 12, block, stream, None).float() - block(stream).float()

    reference = contribution(x, contextlib.nullcontext())
    assert rel_err(contribution(x, BF16), reference) < 0.02
    assert rel_err(contribution(x.bfloat16(), BF16), reference) > 0.5


def test_a_cuda_run_records_its_memory(tmp_path, fake_data_root):
    from benchmark.runs.runner import run_experiment

    config = tiny_config(fake_data_root, tmp_path, method="promptfl", device="cuda", precision="auto")
    result = run_experiment(config, progress=False)
    timing = json.loads((result.run_dir / "timing.json").read_text())
    assert timing["memory"]["training"]["cuda_allocated_peak_mb"] > 0
    assert result.summary["precision"] == "bf16-mixed" and "_bf16_" in result.run_dir.name


@pytest.mark.parametrize("method", ["promptfl", "pfedmma"])
def test_batched_training_equals_one_by_one_on_cuda(tmp_path, fake_data_root, method):
    """The clients train together (the probe passes under the method's precision) and end
    where one-by-one training leaves them, within the precision's rounding."""
    import dataclasses
    import warnings

    from benchmark.federation.batched_training import probe_tolerances
    from benchmark.runs.runner import run_experiment

    config = tiny_config(fake_data_root, tmp_path, method=method, device="cuda", precision="auto", clients=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        together = run_experiment(dataclasses.replace(config, batched_training=True), write=False, progress=False)
    assert not [w for w in caught if "train one by one" in str(w.message)]
    alone = run_experiment(config, write=False, progress=False)
    loss_rtol, _ = probe_tolerances(together.summary["precision"])
    for a, b in zip(together.federation.rounds, alone.federation.rounds):
        for cid, loss in b.train_loss.items():
            assert abs(a.train_loss[cid] - loss) <= 4 * loss_rtol * abs(loss), (a.round, cid)


def test_device_augmentation_on_cuda_is_seeded_and_equals_the_cpus(tmp_path):
    from PIL import Image

    from data.base import FileImages
    from data.decoded import DeviceImages
    from data.transforms import OPENAI_MEAN, OPENAI_STD, clip_transforms

    rng = np.random.default_rng(0)
    paths = []
    for n, (h, w) in enumerate([(300, 400), (480, 640), (640, 427)]):
        paths.append(tmp_path / f"{n}.png")
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(paths[-1])
    split = FileImages("s/train", paths, [0, 0, 0], ["a"], clip_transforms(224).train, cache_key="s/train")
    views = [(epoch, k, k) for epoch in range(4) for k in range(3)]
    on_cuda = DeviceImages(split, range(3), "cuda", 224, OPENAI_MEAN, OPENAI_STD, cache=False)
    on_cpu = DeviceImages(split, range(3), "cpu", 224, OPENAI_MEAN, OPENAI_STD, cache=False)
    first = on_cuda.views(7, views)
    assert torch.equal(first, on_cuda.views(7, views)) and not torch.equal(first, on_cuda.views(8, views))
    # float64 sums of 8-bit pixels x 22-bit coefficients are exact on both devices
    assert torch.equal(first.cpu(), on_cpu.views(7, views))


def test_a_toy_run_on_cuda_is_within_rounding_of_the_cpus(tmp_path):
    """PromptFL on the toy world in 32-true on both (no TF32): the same metrics but for images
    at a tie (a few test images at most)."""
    from benchmark.config import build_config
    from benchmark.runs.runner import run_experiment

    base = dict(method="promptfl", dataset="toy", rounds=2, clients=4, precision="32-true", wandb="disabled", seed=1)
    cpu = run_experiment(build_config({**base, "device": "cpu"}), write=False, progress=False)
    cuda = run_experiment(build_config({**base, "device": "cuda"}), write=False, progress=False)
    for metric in ("Local", "Base", "Novel", "HM"):
        assert abs(cpu.summary["metrics"][metric] - cuda.summary["metrics"][metric]) < 1.0, metric
