"""Time with the exact shortcuts (`benchmark/shortcuts.py`) against the plain path, and
how far apart their outputs are. Prints tables; asserts nothing.

    PYTHONPATH=. OMP_NUM_THREADS=1 python scripts/shortcuts_ratio.py \
        [--methods pfedmma promptfl] [--simulated pfedmma promptfl] [--repeats 5] [--no-vit-b16]

1. Toy world, every method of the toy preset (its hyperparameters):
   model round   8 training steps (a toy client-round: 2 epochs x 4 batches of 8) of
                 logits -> cross-entropy -> backward -> SGD step, on cached features where
                 the method caches them; wall and process-CPU time
   max rel diff  max |on - off| / max |off| of the logits of 64 toy test images over the
                 base classes, parameters moved off their initial values
2. Toy world, the `--simulated` methods through the real run (1 round, 8 clients):
   client-round  the simulator's wall time per client-round, Lightning included
   evaluation    one evaluation of every client (Local, Base, Novel), cold caches
3. ViT-B/16 (random weights, the architecture of the paper's tables): one PromptFL text
   step (16 context tokens, 10 class names, forward + backward), one pFedMMA text step,
   and pFedMMA's image tower on 8 images from the frozen 4-block prefix vs from pixels.
On and off alternate within this one process, `--repeats` times each; figures are
medians. The load average is printed: on a shared machine the CPU-time ratios are the
steadier ones. The toy CLIP's context is 32 tokens, ViT-B/16's 77.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from benchmark import shortcuts
from benchmark.backbone import load_backbone
from benchmark.config import build_config
from benchmark.evaluation.accuracy import Evaluator
from benchmark.evaluation.client_metrics import evaluate_clients
from benchmark.federation.features import FeatureCache
from benchmark.protocol_registry import get_protocol
from benchmark.registry import build_method
from benchmark.runs.preparation import autocast_context, load_run_dataset
from benchmark.runs.runner import run_experiment
from benchmark.sweeps.presets import load_preset

DTD_LIKE = [
    "banded",
    "blotchy",
    "braided",
    "bubbly",
    "bumpy",
    "chequered",
    "cobwebbed",
    "cracked",
    "crosshatched",
    "crystalline",
]


def timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def interleaved(fn_of_enabled, repeats: int) -> dict[bool, tuple[float, float]]:
    """Median (wall, cpu) seconds of fn(enabled) for enabled in (True, False), alternating."""
    samples = {True: [], False: []}
    for _ in range(repeats):
        for enabled in (True, False):
            with shortcuts.use(enabled):
                samples[enabled].append(timed(lambda: fn_of_enabled(enabled)))
    return {k: (statistics.median(s[0] for s in v), statistics.median(s[1] for s in v)) for k, v in samples.items()}


def ratio_text(m: dict[bool, tuple[float, float]], unit: float = 1000.0, name: str = "ms") -> str:
    on, off = m[True], m[False]
    return (
        f"wall {unit * on[0]:8.1f} / {unit * off[0]:8.1f} {name} = {on[0] / off[0]:.2f}   "
        f"cpu {unit * on[1]:8.1f} / {unit * off[1]:8.1f} {name} = {on[1] / off[1]:.2f}"
    )


# -- 1. toy model rounds -----------------------------------------------------------------------
def toy_method(name: str, args: dict, backbone, names):
    torch.manual_seed(0)
    method = build_method(name, backbone, args)
    if method.uses_class_attributes:
        from data.attributes import load_class_attributes
        from data.catalog import default_data_root

        method.set_class_attributes(load_class_attributes("toy", names, default_data_root()))
    if hasattr(method, "experts"):  # pFedMoAP: downloaded experts, so its expert path runs
        experts = torch.randn_like(method.experts) * 0.02
        method.load_client_state({"experts": experts, "expert_count": torch.tensor([len(experts)])})
    with torch.no_grad():
        for parameter in method.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.01)
    return method


def max_relative_difference(name: str, args: dict, backbone, images, names) -> float:
    """One fresh instance per pass: methods cache frozen text features of their own."""
    outputs = []
    for enabled in (True, False):
        method = toy_method(name, args, backbone, names).eval()
        with shortcuts.use(enabled), torch.no_grad():
            outputs.append(method.logits(images, names))
    fast, plain = outputs
    assert torch.equal(fast.argmax(-1), plain.argmax(-1)), f"{name}: predictions differ"
    return float((fast - plain).abs().max() / plain.abs().max())


def model_round(method, inputs, labels, names) -> None:
    """8 steps of 8 images: what a toy client-round computes, without the framework."""
    method.train()
    trainable = [p for p in method.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(trainable, lr=1e-6) if trainable else None
    for step in range(8):
        rows = slice(8 * (step % 4), 8 * (step % 4) + 8)
        logits = method.logits(inputs[rows], names)
        if optimizer is not None:
            optimizer.zero_grad()
            F.cross_entropy(logits, labels[rows]).backward()
            optimizer.step()


# -- 2. the simulator --------------------------------------------------------------------------
def config_for(method: str, method_args: dict, enabled: bool):
    run = {**load_preset("toy").run, "method": method, "rounds": 1, "wandb": "disabled", "shortcuts": enabled}
    return build_config(run, {"method_args": method_args})


def simulated(method: str, method_args: dict, enabled: bool) -> tuple[float, float]:
    config = config_for(method, method_args, enabled)
    result = run_experiment(config, write=False, progress=False)
    rounds = result.federation.rounds
    per_round = sum(r.total_seconds for r in rounds) / max(1, sum(len(r.clients) for r in rounds))
    backbone = load_backbone(config.backbone, config.pretrained)
    fresh = build_method(config.method, backbone, config.method_args)
    dataset = load_run_dataset(config, backbone)
    protocol = get_protocol(config.protocol)
    partition = protocol.partition(dataset, config)
    evaluator = Evaluator(fresh, dataset.test, FeatureCache(progress=False), config.eval_batch_size)
    with shortcuts.use(enabled), autocast_context("cpu", "32-true"):
        started = time.perf_counter()
        evaluate_clients(evaluator, protocol, dataset, partition, result.federation.client_states, progress=False)
        evaluation = time.perf_counter() - started
    return per_round, evaluation


# -- 3. ViT-B/16 -------------------------------------------------------------------------------
def vit_b16(repeats: int) -> None:
    backbone = load_backbone("ViT-B-16", None)
    print(f"\nViT-B/16 (random weights), medians of {repeats}:")
    torch.manual_seed(0)
    promptfl = build_method("promptfl", backbone)

    def promptfl_step(_):
        promptfl.zero_grad()
        promptfl.encode_classes(DTD_LIKE).sum().backward()

    tokens = promptfl.prompts.layout(DTD_LIKE).tokens
    with shortcuts.use(True):
        length = backbone.text_length(tokens)
    print(
        f"  PromptFL text step (16 ctx, 10 classes, fwd+bwd; {length} of 77 positions run): "
        + ratio_text(interleaved(promptfl_step, repeats))
    )
    pfedmma = build_method("pfedmma", backbone)

    def pfedmma_text_step(_):
        pfedmma.zero_grad()
        pfedmma.encode_classes(DTD_LIKE).sum().backward()

    print(
        "  pFedMMA text step (blocks 5-12 adapted, 10 classes, fwd+bwd): "
        + ratio_text(interleaved(pfedmma_text_step, repeats))
    )
    images = torch.randn(8, 3, 224, 224)
    prefix = backbone.image_prefix(images, pfedmma.frozen_image_blocks)
    with torch.no_grad():
        fast, plain = pfedmma.encode_images(prefix), pfedmma.encode_images(images)
    difference = float((fast - plain).abs().max() / plain.abs().max())

    def image_eval(enabled):
        with torch.no_grad():
            pfedmma.encode_images(prefix if enabled else images)

    print(
        f"  pFedMMA image tower, 8 images, evaluation (prefix of {pfedmma.frozen_image_blocks} blocks reused vs "
        f"from pixels; max rel diff {difference:.1e}): " + ratio_text(interleaved(image_eval, repeats))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="*", help="toy preset methods for part 1 (default: all)")
    parser.add_argument(
        "--simulated",
        nargs="*",
        default=["pfedmma", "promptfl", "pfedmoap", "lora"],
        help="toy preset methods run through the simulator (part 2)",
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-vit-b16", action="store_true", help="skip part 3")
    args = parser.parse_args()
    import data.toy  # noqa: F401  (registers the toy CLIP's weights)
    from benchmark.backbone_weights import PRETRAINED_CACHED

    preset = load_preset("toy")
    variants = {v.method: dict(v.method_args) for v in preset.methods}
    if PRETRAINED_CACHED[preset.run["pretrained"]]() is None:
        raise SystemExit(f"the {preset.run['pretrained']!r} CLIP is not built yet; `fedbench demo` builds it")
    print(
        f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs, "
        f"torch threads {torch.get_num_threads()}"
    )
    first = config_for(next(iter(variants)), {}, True)
    backbone = load_backbone(first.backbone, first.pretrained)
    test = load_run_dataset(first, backbone).test
    names = list(test.class_names[: (len(test.class_names) + 1) // 2])
    images = torch.stack([test[i][0] for i in range(0, len(test), max(1, len(test) // 64))][:64])
    labels = torch.arange(32) % len(names)

    print(f"\ntoy CLIP, model round of 8 steps, medians of {args.repeats}:")
    for name in args.methods or list(variants):
        difference = max_relative_difference(name, variants.get(name, {}), backbone, images, names)
        method = toy_method(name, variants.get(name, {}), backbone, names)
        with torch.no_grad():
            inputs = method.encode_images(images[:32]) if method.frozen_image_features else images[:32]
        timing = interleaved(lambda _: model_round(method, inputs, labels, names), args.repeats)
        print(f"  {name:<13} {ratio_text(timing)}   max rel diff {difference:.1e}", flush=True)

    if args.simulated:
        print(f"\ntoy world through the simulator (1 round, 8 clients), medians of {args.repeats}:")
    for name in args.simulated:
        samples = {True: [], False: []}
        for _ in range(args.repeats):
            for enabled in (True, False):
                samples[enabled].append(simulated(name, variants.get(name, {}), enabled))
        rnd = {k: statistics.median(s[0] for s in v) for k, v in samples.items()}
        ev = {k: statistics.median(s[1] for s in v) for k, v in samples.items()}
        print(
            f"  {name:<13} client-round {1000 * rnd[True]:7.1f} / {1000 * rnd[False]:7.1f} ms = "
            f"{rnd[True] / rnd[False]:.2f}   evaluation {ev[True]:6.2f} / {ev[False]:6.2f} s = "
            f"{ev[True] / ev[False]:.2f}",
            flush=True,
        )

    if not args.no_vit_b16:
        vit_b16(max(3, args.repeats // 2))
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
