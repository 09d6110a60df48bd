"""K-shot sampling of a training split, seeded by the run seed."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Iterable, Sequence


def few_shot_indices(labels: Sequence[int], shots: int, seed: int, class_ids: Iterable[int] | None = None) -> list[int]:
    """`shots` indices per class (all of a class's images when it has fewer), sorted.

    Sampling is per class in label order with one `random.Random(seed)`, so the sample
    depends only on the labels, the shot count and the seed. `shots <= 0` keeps everything.
    """
    by_class: dict[int, list[int]] = defaultdict(list)
    for index, label in enumerate(labels):
        by_class[label].append(index)
    wanted = sorted(by_class) if class_ids is None else sorted(set(class_ids))
    rng = random.Random(seed)
    chosen: list[int] = []
    for label in wanted:
        pool = by_class.get(label, [])
        chosen.extend(pool if shots <= 0 or len(pool) <= shots else rng.sample(pool, shots))
    return sorted(chosen)


def few_shot_subset(labels: Sequence[int], pool: Iterable[int], shots: int, seed: int) -> list[int]:
    """`shots` indices per class drawn from `pool` (indices into `labels`), sorted.

    Used for few-shot sampling inside one client's share; the same rules as
    `few_shot_indices` (all of a class when it has fewer; `shots <= 0` keeps the pool).
    """
    pool = sorted(set(pool))
    chosen = few_shot_indices([labels[i] for i in pool], shots, seed)
    return [pool[p] for p in chosen]


def cached_few_shot_indices(labels: Sequence[int], shots: int, seed: int, cache_dir, tag: str = "") -> list[int]:
    """`few_shot_indices`, cached as JSON in `cache_dir` (next to the split) so reruns read
    the identical sample. The file name carries a hash of the labels, so a changed split
    never reuses a stale sample."""
    import hashlib
    import json
    from pathlib import Path

    digest = hashlib.sha256(json.dumps([int(y) for y in labels]).encode()).hexdigest()[:12]
    path = Path(cache_dir) / f"fewshot{('_' + tag) if tag else ''}_k{shots}_s{seed}_{digest}.json"
    if path.is_file():
        try:
            return [int(i) for i in json.loads(path.read_text())]
        except (ValueError, TypeError):
            pass  # a damaged cache file is recomputed
    indices = few_shot_indices(labels, shots, seed)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(indices))
        tmp.replace(path)
    except OSError:
        pass  # a read-only data root only loses the cache
    return indices
