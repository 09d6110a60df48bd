"""Top-1 accuracy and the base-to-novel summary against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from benchmark.evaluation.accuracy import accuracy
from benchmark.protocol_registry import get_protocol
from data.base import LabeledImages
from methods.zeroshot import ZeroShotCLIP

CLASSES = ["cat", "dog", "fox"]
LABELS = [0, 1, 2, 2, 1, 0]
PREDICTED = [0, 2, 2, 1, 1, 1]  # the class the stand-in method picks for image i


class IndexImages(LabeledImages):
    """Image i is the number i, so the stand-in method knows which image it scores."""

    def load(self, index: int) -> torch.Tensor:
        return torch.tensor([float(index)])


class Picks(ZeroShotCLIP):
    """Scores PREDICTED[i] highest for image i, among whichever classes it is given, in their order."""

    frozen_image_features = False

    def image_features(self, images):
        return images

    def encode_classes(self, class_names):
        return list(class_names)

    def classify(self, features, classes):
        picked = [CLASSES[PREDICTED[int(f)]] for f in features[:, 0]]
        return torch.tensor([[1.0 if name == pick else 0.0 for name in classes] for pick in picked])


@pytest.fixture
def picks(tiny_backbone):
    return Picks(tiny_backbone)


def test_top1_accuracy_by_hand(picks):
    split = IndexImages("hand/test", LABELS, CLASSES)
    # All six over all classes: images 0 (cat), 2 (fox) and 4 (dog) are right -> 3 / 6.
    assert accuracy(picks, split, range(6), (0, 1, 2), batch_size=4) == 50.0
    # Images 2, 3, 4 over fox and dog only, listed fox first (local index 0 = class 2):
    # labels fox, fox, dog; picks fox, dog, dog -> 2 / 3.
    assert accuracy(picks, split, [2, 3, 4], (2, 1), batch_size=2) == pytest.approx(200 / 3)
    assert accuracy(picks, split, [1], (1, 2)) == 0.0  # a dog taken for a fox
    assert math.isnan(accuracy(picks, split, [], (0, 1)))  # no image: no accuracy, not 0
    with pytest.raises(ValueError, match="label 2, not among the classes scored"):
        accuracy(picks, split, [2], (0, 1))


def test_base2novel_summary_by_hand():
    per_client = {0: {"Local": 80.0, "Base": 70.0, "Novel": 60.0}, 1: {"Local": 90.0, "Base": 50.0, "Novel": 40.0}}
    summary = get_protocol("base2novel").summarize(per_client, None)
    # Means over clients: Local 85, Base 60, Novel 50. HM = 3 / (1/85 + 1/60 + 1/50)
    # = 3 / (247 / 5100) = 15300 / 247.
    assert summary == pytest.approx({"Local": 85.0, "Base": 60.0, "Novel": 50.0, "HM": 15300 / 247})
    zero = get_protocol("base2novel").summarize({0: {"Local": 0.0, "Base": 70.0, "Novel": 60.0}}, None)
    assert zero["HM"] == 0.0  # one metric at 0: the harmonic mean is 0
