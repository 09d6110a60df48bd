"""Per-client spread of a run's final metrics: a mean over clients hides the client a method
fails, so every metric that differs by client gets the standard deviation across clients
and its worst client (summary.json's `spread`, W&B, `fedbench runs --spread`, and
`spread.md` beside every table `fedbench reproduce` renders). Every per-client metric of
the protocols is an accuracy: the worst is the lowest.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np


def client_spread(
    per_client: Mapping[int, Mapping[str, float]], personal: bool = False
) -> dict[str, dict[str, float | int]]:
    """{metric: {"std": population std across clients, "worst_client": id, "worst": value}}
    for each metric whose value is not the same for every client (a metric a protocol
    scores once for all, or a run with one client, has no spread). Ties: the lowest id.
    `personal`: the clients were scored with models of their own (`states_differ`), so every
    metric differs by client even where the values came out equal: its spread is 0, not
    absent (pFedMMA's Base after two rounds that moved its adapters too little to change a
    prediction read as a method without personal parts)."""
    metrics = list(dict.fromkeys(m for values in per_client.values() for m in values))
    spread = {}
    for metric in metrics:
        scored = sorted((cid, float(v[metric])) for cid, v in per_client.items() if metric in v)
        values = np.array([v for _, v in scored], dtype=np.float64)
        if len(values) < 2 or not np.isfinite(values).all() or (values.min() == values.max() and not personal):
            continue
        worst_client, worst = min(scored, key=lambda item: (item[1], item[0]))
        spread[metric] = {"std": round(float(values.std()), 4), "worst_client": int(worst_client), "worst": worst}
    return spread


def states_differ(states: Mapping[int, Mapping[str, object]]) -> bool:
    """Whether the clients' scored states are not all equal: personal parts (pFedMMA's adapters,
    FedOTP's local prompt) make every client's model its own."""
    import torch

    items = list(states.values())
    if len(items) < 2:
        return False
    first = items[0]
    for other in items[1:]:
        if other.keys() != first.keys():
            return True
        for key, value in first.items():
            if isinstance(value, torch.Tensor) and not torch.equal(value, other[key]):
                return True
    return False
