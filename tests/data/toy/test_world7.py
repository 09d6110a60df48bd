"""World version 7 is opt-in beside version 6: version 6's images, names and CLIP recipe are
what they were (hashes of the code before version 7 existed), and version 7 renders
deterministically, in styles its own CLIP's pretraining covers, with disjoint base and novel
words."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
import torch

from data.toy import world
from data.toy.datasets import generate_spec_split, generate_split, split_labels, toy_dataset_names
from data.toy.pretrain import DEFAULT_RECIPE, RECIPES, TEST_RECIPE, V7_RECIPE

# sha256 (first 16 hex digits) of every 7th test image, its label and domain, and the class
# names, per version 6 dataset: computed with the code of 0e4e220 (before version 7), on the
# AMD EPYC and the shipped torch wheel (rendering is float arithmetic rounded to uint8).
V6_TEST_SPLIT_SHA256 = {
    "toy": "bf54feefb0fa95ad",
    "toy_shapes": "62218ccdc7e1060c",
    "toy_patterns": "5dea1f0ee2b42ca0",
    "toy_domains": "75b1f392c3eaafbe",
    "toy10": "0fe948514cdbce8e",
}


def _split_sha256(name: str, split: str = "test") -> str:
    images, labels, domains, _ = generate_split(name, split)
    names = world.all_toy_specs()[name].class_names
    payload = images[::7].numpy().tobytes() + repr((labels[::7], domains[::7], names)).encode()
    return hashlib.sha256(payload).hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(V6_TEST_SPLIT_SHA256))
def test_version_6_datasets_render_as_before_version_7(name):
    assert _split_sha256(name) == V6_TEST_SPLIT_SHA256[name]


def test_version_6_recipes_keep_their_hashes_and_the_v7_recipe_has_its_own():
    # the shipped version 6 checkpoints are named by these hashes (data/toy/checkpoints)
    assert (DEFAULT_RECIPE.hash, TEST_RECIPE.hash) == ("5fe25b49f957", "9d16ffb081bd")
    assert "world_version" not in DEFAULT_RECIPE.identity()["recipe"]
    assert V7_RECIPE.hash not in {DEFAULT_RECIPE.hash, TEST_RECIPE.hash}
    assert RECIPES["v7"] is V7_RECIPE and V7_RECIPE.identity()["recipe"]["rare_rate"] > 0


def test_version_7_is_opt_in_by_dataset_name():
    v6, v7 = world.toy_specs(), world.toy7_specs()
    assert not set(v6) & set(v7) and len(v7) >= 3
    assert {s.world for s in v6.values()} == {6} and {s.world for s in v7.values()} == {7}
    assert toy_dataset_names() == list(v6) + list(v7)
    assert {world.world_pretrained(s) for s in v6.values()} == {"fedbench-toy"}
    assert {world.world_pretrained(s) for s in v7.values()} == {"fedbench-toy7"}


def test_version_7_datasets_are_in_styles_its_pretraining_covers_with_disjoint_words():
    covered = set(world.PRETRAIN_DOMAINS) | set(V7_RECIPE.rare_domains)
    families = set()
    for name, spec in world.toy7_specs().items():
        assert set(spec.domains) <= covered, name
        assert spec.protocol == "base2novel" and spec.novel_from == 16 and len(spec.classes) == 32, name
        base, novel = spec.classes[: spec.novel_from], spec.classes[spec.novel_from :]
        assert not world.class_words(base) & world.class_words(novel), name
        families.add(tuple(a for a, _ in spec.classes[0].fixed))
    assert len(families) >= 3  # different class families


@pytest.mark.parametrize("name", sorted(world.toy7_specs()))
def test_version_7_renders_deterministically(name):
    # two images a class (the generation code of a full split, at a fraction of its cost)
    spec = dataclasses.replace(world.toy7_specs()[name], train_per_class=2, test_per_class=2)
    first, labels, _, _ = generate_spec_split(spec, "train")
    again, _, _, _ = generate_spec_split(spec, "train")
    other, _, _, _ = generate_spec_split(spec, "train", seed=1)
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert first.shape == (64, 32, 32, 3) and labels == split_labels(spec, "train")[0]
    full, _ = split_labels(world.toy7_specs()[name], "test")
    assert min(full.count(k) for k in range(32)) == 30


def test_a_run_seed_draws_version_7_test_images_and_leaves_version_6_alone(tmp_path):
    from data.catalog import dataset_info, load_dataset
    from data.transforms import clip_transforms

    tf = clip_transforms(32, augment=False)
    assert dataset_info("toy7").draws_per_seed and not dataset_info("toy").draws_per_seed
    one, two = (load_dataset("toy7", tmp_path, tf, seed=s) for s in (1, 2))
    assert torch.equal(one.train.images, two.train.images)  # the pool the few-shot draw picks from
    assert not torch.equal(one.test.images, two.test.images)  # a fresh test draw per seed
    assert one.test.labels == two.test.labels and one.class_names == two.class_names
    assert one.test.cache_key != two.test.cache_key  # frozen features are cached per draw
    assert torch.equal(load_dataset("toy", tmp_path, tf, seed=1).test.images, generate_split("toy", "test")[0])


def test_a_toy_clip_of_another_world_version_is_refused_naming_both_and_the_fix():
    from benchmark.config import RunConfig
    from benchmark.errors import ConfigError
    from benchmark.runs.prechecks import validate_run

    for dataset, wrong, own in (
        ("toy7", "fedbench-toy", "fedbench-toy7"),
        ("toy7_shapes", "fedbench-toy-test", "fedbench-toy7"),  # the test CLIP is version 6's recipe
        ("toy", "fedbench-toy7", "fedbench-toy"),
    ):
        message = world.pretrained_mismatch(dataset, wrong)
        assert message and repr(dataset) in message and repr(wrong) in message
        assert f"--pretrained {own}" in message
        with pytest.raises(ConfigError, match=f"dataset '{dataset}' belongs to world version"):
            validate_run(RunConfig(method="zeroshot", dataset=dataset, pretrained=wrong, wandb="disabled"))
        assert world.pretrained_mismatch(dataset, own) is None
    # one run federating datasets of both versions cannot have one right CLIP
    with pytest.raises(ConfigError, match="'toy7' belongs to world version 7"):
        validate_run(RunConfig(method="zeroshot", dataset="toy+toy7", pretrained="fedbench-toy", wandb="disabled"))
    # weights that are not a toy CLIP, and datasets that are not toy datasets, are left alone
    assert world.pretrained_mismatch("toy7", "none") is None
    assert world.pretrained_mismatch("toy7", "/some/checkpoint.pt") is None
    assert world.pretrained_mismatch("caltech101", "fedbench-toy7") is None
    assert validate_run(RunConfig(method="zeroshot", dataset="toy7", pretrained="fedbench-toy7")) == []


def test_a_dataset_can_show_each_colour_in_a_shade_of_its_own():
    import colorsys

    from data.toy.datasets import _shade_key

    pretraining = torch.tensor(list(world.COLOURS.values()), dtype=torch.float32)
    assert torch.equal(world.shaded_colours(0.0), pretraining)
    turned = world.shaded_colours(24.0)
    for k, (old, new) in enumerate(zip(pretraining.tolist(), turned.tolist())):
        before = colorsys.rgb_to_hls(*(c / 255 for c in old))[0] * 360
        after = colorsys.rgb_to_hls(*(c / 255 for c in new))[0] * 360
        step = (after - before + 180) % 360 - 180
        assert abs(step - (24.0 if k % 2 == 0 else -24.0)) < 2.0, (k, step)  # neighbours turn opposite ways
    # version 6 shows pretraining's shades; a shaded dataset renders other pixels for the same objects
    assert all(s.colours is None for s in world.toy_specs().values())
    shaded = dataclasses.replace(world.toy7_specs()["toy7"], train_per_class=1, test_per_class=1)
    assert shaded.hue_shift > 0 and torch.equal(shaded.colours, world.shaded_colours(shaded.hue_shift))
    plain = dataclasses.replace(shaded, hue_shift=0.0)
    one, labels, _, attrs = generate_spec_split(shaded, "train")
    two, labels_two, _, attrs_two = generate_spec_split(plain, "train")
    assert labels == labels_two and torch.equal(attrs.colour, attrs_two.colour) and not torch.equal(one, two)
    assert _shade_key(shaded) != _shade_key(plain) == ""  # cached features name the shades


def test_a_dataset_can_draw_each_shape_in_a_proportion_of_its_own():
    from data.toy.datasets import _shade_key

    factors = world.stretch_factors(0.3)
    assert torch.equal(world.stretch_factors(0.0), torch.ones(len(world.SHAPES)))
    assert torch.allclose(factors[0::2] * factors[1::2], torch.ones(len(world.SHAPES) // 2))  # area kept
    assert bool((factors[0::2] > 1).all())  # neighbours stretched opposite ways
    stretched = dataclasses.replace(world.toy7_specs()["toy7_patterns"], train_per_class=1, test_per_class=1)
    assert stretched.shape_stretch > 0 and all(s.shape_stretch == 0 for s in world.toy_specs().values())
    plain = dataclasses.replace(stretched, shape_stretch=0.0)
    one, labels, _, attrs = generate_spec_split(stretched, "train")
    two, labels_two, _, attrs_two = generate_spec_split(plain, "train")
    assert labels == labels_two and torch.equal(attrs.shape, attrs_two.shape) and not torch.equal(one, two)
    assert _shade_key(stretched) != _shade_key(plain) == ""  # cached features name the proportions
