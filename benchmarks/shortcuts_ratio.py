"""Wall time with the exact shortcuts (`benchmark/shortcuts.py`) against the plain path,
and how far apart their outputs are, on the toy world. Prints a table; asserts nothing.

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/shortcuts_ratio.py [--methods pfedmma promptfl] [--repeats 3]

Per method (the toy preset's hyperparameters, its schedule with 1 round):
  client-round   the simulator's time per client-round (Lightning included), shortcuts on / off
  evaluation     one evaluation of every client (Local, Base, Novel) from a cold cache
                 (the image prefix is computed during it), on / off
  max rel diff   max |on - off| / max |off| of the logits of 64 toy test images over the
                 base classes, with the method's parameters moved off their initial values
The on and off runs alternate within this one process, `--repeats` times each; the
figures are medians. The machine's load average is printed with them: on a shared
machine only the ratios mean much. The toy CLIP's context is 32 tokens (77 on real CLIP),
so the text-tower saving here is smaller than on ViT-B/16.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from benchmark import shortcuts
from benchmark.config import build_config
from benchmark.evaluation import Evaluator
from benchmark.features import FeatureCache
from benchmark.presets import load_preset
from benchmark.protocols import get_protocol
from benchmark.registry import build_method
from benchmark.runner import autocast_context, evaluate_clients, load_run_dataset, run_experiment
from benchmark.backbone import load_backbone


def preset_methods() -> dict[str, dict]:
    preset = load_preset("toy")
    return {v.method: dict(v.method_args) for v in preset.methods}


def config_for(method: str, method_args: dict, enabled: bool):
    preset = load_preset("toy")
    run = {**preset.run, "method": method, "rounds": 1, "wandb": "disabled", "shortcuts": enabled}
    return build_config(run, {"method_args": method_args})


def client_round_seconds(config) -> tuple[float, dict]:
    result = run_experiment(config, write=False, progress=False)
    rounds = result.federation.rounds
    count = sum(len(r.clients) for r in rounds)
    return (sum(r.total_seconds for r in rounds) / count if count else float("nan")), result


def evaluation_seconds(config, result) -> float:
    backbone = load_backbone(config.backbone, config.pretrained)
    method = build_method(config.method, backbone, config.method_args)
    dataset = load_run_dataset(config, backbone)
    protocol = get_protocol(config.protocol)
    partition = protocol.partition(dataset, config)
    evaluator = Evaluator(method, dataset.test, FeatureCache(progress=False), config.eval_batch_size)
    with shortcuts.use(config.shortcuts), autocast_context("cpu", "32-true"):
        started = time.perf_counter()
        evaluate_clients(evaluator, protocol, dataset, partition, result.federation.client_states, progress=False)
        return time.perf_counter() - started


def max_relative_difference(method_name: str, method_args: dict, backbone, images, names) -> float:
    torch.manual_seed(0)
    method = build_method(method_name, backbone, method_args)
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
    method.eval()
    outputs = []
    for enabled in (True, False):
        with shortcuts.use(enabled), torch.no_grad():
            outputs.append(method.logits(images, names))
    fast, plain = outputs
    assert torch.equal(fast.argmax(-1), plain.argmax(-1)), f"{method_name}: predictions differ"
    return float((fast - plain).abs().max() / plain.abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="*", help="methods of the toy preset (default: all of them)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    methods = preset_methods()
    chosen = args.methods or list(methods)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs, "
          f"torch threads {torch.get_num_threads()}")
    first = config_for(chosen[0], methods[chosen[0]], True)
    import data.toy  # noqa: F401  (registers the toy CLIP's weights)
    from benchmark.backbone import PRETRAINED_CACHED

    if PRETRAINED_CACHED[first.pretrained]() is None:
        raise SystemExit(f"the {first.pretrained!r} CLIP is not built yet; `fedbench demo` builds it")
    backbone = load_backbone(first.backbone, first.pretrained)
    test = load_run_dataset(first, backbone).test
    base = test.class_names[: (len(test.class_names) + 1) // 2]
    images = torch.stack([test[i][0] for i in range(0, len(test), max(1, len(test) // 64))][:64])
    rows = []
    for name in chosen:
        times = {True: [], False: []}
        evals = {True: [], False: []}
        for _ in range(args.repeats):
            for enabled in (True, False):  # interleaved: the load drifts over both alike
                config = config_for(name, methods[name], enabled)
                seconds, result = client_round_seconds(config)
                times[enabled].append(seconds)
                evals[enabled].append(evaluation_seconds(config, result))
        difference = max_relative_difference(name, methods[name], backbone, images, list(base))
        median = {k: statistics.median(v) for k, v in times.items()}
        eval_median = {k: statistics.median(v) for k, v in evals.items()}
        rows.append((name, median, eval_median, difference))
        print(f"{name:<13} client-round {1000 * median[True]:7.1f} / {1000 * median[False]:7.1f} ms "
              f"= {median[True] / median[False]:.2f}   evaluation {eval_median[True]:6.2f} / "
              f"{eval_median[False]:6.2f} s = {eval_median[True] / eval_median[False]:.2f}   "
              f"max rel diff {difference:.1e}", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\n| method | client-round on / off (ms) | ratio | evaluation on / off (s) | ratio | max rel diff |")
    print("|---|---|---|---|---|---|")
    for name, median, eval_median, difference in rows:
        print(f"| {name} | {1000 * median[True]:.1f} / {1000 * median[False]:.1f} | {median[True] / median[False]:.2f} "
              f"| {eval_median[True]:.2f} / {eval_median[False]:.2f} | {eval_median[True] / eval_median[False]:.2f} "
              f"| {difference:.1e} |")


if __name__ == "__main__":
    main()
