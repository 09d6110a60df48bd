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


def images_per_class(labels: Sequence[int], class_ids: Iterable[int]) -> dict[int, int]:
    """How many of `labels` each class of `class_ids` has (0 for a class with none): the most
    images a few-shot sample can take of it."""
    counts: dict[int, int] = defaultdict(int)
    for label in labels:
        counts[label] += 1
    return {c: counts.get(c, 0) for c in sorted(set(class_ids))}
