"""Per-client spread of a run's final metrics: a mean over clients hides the client a method
fails, so every metric that differs by client gets the standard deviation across clients
and its worst client (summary.json's `spread`, W&B, `fedbench runs --spread`, and
`spread.md` beside every table `fedbench reproduce` renders). Every per-client metric of
the protocols is an accuracy: the worst is the lowest.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np


def client_spread(per_client: Mapping[int, Mapping[str, float]]) -> dict[str, dict[str, float | int]]:
    """{metric: {"std": population std across clients, "worst_client": id, "worst": value}}
    for each metric whose value is not the same for every client (a metric a protocol
    scores once for all, or a run with one client, has no spread). Ties: the lowest id."""
    metrics = list(dict.fromkeys(m for values in per_client.values() for m in values))
    spread = {}
    for metric in metrics:
        scored = sorted((cid, float(v[metric])) for cid, v in per_client.items() if metric in v)
        values = np.array([v for _, v in scored], dtype=np.float64)
        if len(values) < 2 or not np.isfinite(values).all() or values.min() == values.max():
            continue
        worst_client, worst = min(scored, key=lambda item: (item[1], item[0]))
        spread[metric] = {"std": round(float(values.std()), 4), "worst_client": int(worst_client), "worst": worst}
    return spread
