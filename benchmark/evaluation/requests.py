"""What a protocol asks the evaluator for, without torch: a `Request` (test images, classes)
per metric of a client, and the helpers protocols build them with. The protocol registry
imports the protocols, and `fedbench --help` the registry, so none of this may load torch
(`benchmark.evaluation.accuracy` scores the requests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence


@dataclass(frozen=True)
class Request:
    """What one metric of a client needs: the top-1 accuracy (%) of its model on test images
    `indices`, classifying over classes `class_ids` (the images' labels among them)."""

    indices: tuple[int, ...]
    class_ids: tuple[int, ...]

    @classmethod
    def of(cls, indices: Sequence[int], class_ids: Sequence[int]) -> "Request":
        return cls(tuple(indices), tuple(class_ids))


Requests = Mapping[str, Request]  # a client's requests, by the name its score goes under


def harmonic_mean(*values: float) -> float:
    """HM = n / sum(1/v): the HM of Local, Base and Novel (docs/protocols.md; 0 if any is 0)."""
    if any(v <= 0 for v in values):
        return 0.0
    return len(values) / sum(1.0 / v for v in values)


def indices_of_classes(
    labels: Sequence[int], class_ids: Sequence[int], among: Sequence[int] | None = None
) -> list[int]:
    wanted = set(class_ids)
    pool = range(len(labels)) if among is None else among
    return [i for i in pool if labels[i] in wanted]
