"""Session fixtures for the toy world (import them into conftest.py).

The test recipe's small CLIP ships with the package (data/toy/checkpoints): nothing is
pretrained; only a recipe without a shipped file would be built into `$FEDBENCH_CACHE`.

    toy_test_checkpoint  Path of the test recipe's checkpoint (the shipped file)
    toy_test_backbone    benchmark.backbone.Backbone "fedbench-toy-vit" @ "fedbench-toy-test"
    toy_transforms       data.transforms.ImageTransforms for that backbone (no augmentation)
    toy_splits           DatasetSplits of the `toy` dataset under toy_transforms
"""

from __future__ import annotations

import pytest

TEST_BACKBONE = "fedbench-toy-vit"
TEST_PRETRAINED = "fedbench-toy-test"


@pytest.fixture(scope="session")
def toy_test_checkpoint():
    from data.toy.pretrain import TEST_RECIPE, ensure_checkpoint

    return ensure_checkpoint(TEST_RECIPE, progress=False)


@pytest.fixture(scope="session")
def toy_test_backbone(toy_test_checkpoint):
    from benchmark.backbone import load_backbone

    return load_backbone(TEST_BACKBONE, TEST_PRETRAINED)


@pytest.fixture(scope="session")
def toy_transforms(toy_test_backbone):
    from data.transforms import clip_transforms

    b = toy_test_backbone
    return clip_transforms(b.image_size, b.image_mean, b.image_std, augment=False)


@pytest.fixture(scope="session")
def toy_splits(toy_transforms):
    from data.toy.datasets import load_toy

    return load_toy("toy", toy_transforms)
