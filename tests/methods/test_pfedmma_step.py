"""How far one SGD step moves pFedMMA's adapters, which the toy preset's lr comment relies on.

With the gradient scaling, SGD on the adapter parameters theta of block b takes the step
-lr * J^T g, where J = d y / d theta (y: the block's unscaled adapter output over the batch's
tokens) and g = dL / d(block output). The block output then moves by
alpha * J (-lr J^T g) = -alpha * lr * J J^T g, and the loss by -alpha * lr * |J^T g|^2 to
first order. So the step's size in units of g is alpha * lr * |J^T g|^2 / |g|^2: alpha * lr
alone says little without the gain |J^T g|^2 / |g|^2, which this measures per block.

`PYTHONPATH=. python tests/methods/test_pfedmma_step.py` prints the gains on the toy CLIP (the toy
preset's model and settings, one client's batch of 8) and on ViT-B/16 with random weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmark.backbone import Backbone
from methods.pfedmma import PFedMMA


def step_gains(method: PFedMMA, images: torch.Tensor, labels: torch.Tensor, class_names) -> dict[str, list[float]]:
    """|J^T g|^2 / |g|^2 per adapted block and tower, for the cross-entropy of the batch."""
    outputs: dict[tuple[str, int], torch.Tensor] = {}
    adapter = method.adapter

    def recording_adapter(tower: str, block: int, h: torch.Tensor) -> torch.Tensor:
        y = adapter(tower, block, h)
        outputs[(tower, block)] = y
        return y

    method.adapter = recording_adapter  # instance attribute: the class's method is untouched
    try:
        block_outputs: dict[tuple[str, int], torch.Tensor] = {}
        adapted_block = method.adapted_block

        def recording_block(tower, block_number, block, x, attn_mask):
            out = adapted_block(tower, block_number, block, x, attn_mask)
            block_outputs[(tower, block_number)] = out
            return out

        method.adapted_block = recording_block
        loss = F.cross_entropy(method.logits(images, class_names), labels)
    finally:
        del method.adapter, method.adapted_block
    keys = list(block_outputs)
    grads = torch.autograd.grad(loss, [block_outputs[k] for k in keys], retain_graph=True)
    gains: dict[str, list[float]] = {"text": [], "vision": []}
    for (tower, block), g in zip(keys, grads):
        key = str(block)
        params = [
            *getattr(method, f"{tower}_down")[key].parameters(),
            *getattr(method, f"{tower}_up")[key].parameters(),
            *method.shared[key].parameters(),
        ]
        jtg = torch.autograd.grad(outputs[(tower, block)], params, grad_outputs=g, retain_graph=True)
        gains[tower].append(float(sum(t.pow(2).sum() for t in jtg) / g.pow(2).sum()))
    return gains


def test_one_step_moves_the_adapters_by_far_more_than_alpha_times_lr(tiny_backbone: Backbone):
    torch.manual_seed(0)
    method = PFedMMA(tiny_backbone, first_block=2)
    images = torch.randn(4, 3, tiny_backbone.image_size, tiny_backbone.image_size)
    names = ["a red circle", "a blue square", "a green star"]
    gains = step_gains(method, images, torch.tensor([0, 1, 2, 0]), names)
    assert [len(v) for v in gains.values()] == [3, 3]
    # Every gain > 1: a step moves the adapters by more than alpha * lr * |g| (measured 8 to
    # 1e2 here, random weights; the toy CLIP and ViT-B/16: see the module docstring).
    assert min(min(v) for v in gains.values()) > 1


if __name__ == "__main__":
    import data.toy.pretrain  # noqa: F401  (registers the toy CLIP's weights)
    from benchmark.backbone import load_backbone
    from benchmark.config import build_config
    from benchmark.protocol_registry import get_protocol
    from benchmark.runs.preparation import build_seeded_method, load_run_dataset

    config = build_config(
        {"dataset": "toy", "method": "pfedmma", "backbone": "fedbench-toy-vit", "pretrained": "fedbench-toy"},
        {"method_args": {"first_block": 2}},
    )
    backbone = load_backbone(config.backbone, config.pretrained)
    method = build_seeded_method(config, backbone)
    dataset = load_run_dataset(config, backbone)
    partition = get_protocol(config.protocol).partition(dataset, config)
    client = partition.clients[0]
    names = [dataset.class_names[c] for c in client.train_classes]
    indices = list(client.train_indices)[:8]
    images = torch.stack([dataset.train.load(i) for i in indices])
    labels = torch.tensor([list(client.train_classes).index(dataset.train.labels[i]) for i in indices])
    print(
        "toy CLIP (blocks 2-4):",
        {t: [f"{g:.3g}" for g in v] for t, v in step_gains(method, images, labels, names).items()},
    )

    vit = load_backbone("ViT-B-16", None)
    torch.manual_seed(0)
    method = PFedMMA(vit)
    images = torch.randn(4, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    names = [f"class {k}" for k in range(10)]
    gains = step_gains(method, images, torch.tensor([0, 1, 2, 3]), names)
    print("ViT-B/16, random weights (blocks 5-12):", {t: [f"{g:.3g}" for g in v] for t, v in gains.items()})
