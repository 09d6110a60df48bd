"""The toy world: deterministic generation, named compositional classes, rendering markers,
downstream styles apart from the pretraining styles, rare synonyms in the captions, the
shipped toy CLIP loading through load_backbone, and zero-shot above chance."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from data.toy import world
from data.toy.datasets import generate_split, load_toy, split_labels, toy_dataset_names
from data.toy.pretrain import TEST_RECIPE, Recipe, checkpoint_name, checkpoint_path, shipped_checkpoint


def _attrs(n, colour=0, shape=0, pattern=0, size=1):
    full = lambda v: torch.full((n,), v, dtype=torch.long)  # noqa: E731
    return world.Attrs(full(colour), full(shape), full(pattern), full(size))


# -- generation -----------------------------------------------------------------------
def test_render_is_deterministic_from_seed():
    g = torch.Generator().manual_seed(3)
    attrs = world.random_attrs(300, g)
    a = world.render(attrs, "cluttered", 32, seed=7)
    b = world.render(attrs, "cluttered", 32, seed=7)
    c = world.render(attrs, "cluttered", 32, seed=8)
    assert a.dtype == torch.uint8 and a.shape == (300, 32, 32, 3)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_dataset_splits_are_deterministic_and_large_enough():
    generate_split.cache_clear()
    x1, y1, d1, _ = generate_split("toy", "train")
    generate_split.cache_clear()
    x2, y2, d2, _ = generate_split("toy", "train")
    assert torch.equal(x1, x2) and y1 == y2 and d1 == d2
    assert (y1, d1) == split_labels(world.all_toy_specs()["toy"], "train")  # the labels the images have
    # every dataset's sizes from its labels alone: rendering all of them took ~10 s a test run
    for name in toy_dataset_names():
        spec = world.all_toy_specs()[name]
        ytr, _ = split_labels(spec, "train")
        yte, _ = split_labels(spec, "test")
        assert min(ytr.count(k) for k in range(len(spec.classes))) >= 16
        assert min(yte.count(k) for k in range(len(spec.classes))) >= 20


# -- classes --------------------------------------------------------------------------
def test_class_names_are_attribute_names():
    words = {w for vocab in world.VOCAB.values() for w in vocab} | {"object"}  # shape left unnamed
    rare = {w for vocab in world.SYNONYMS.values() for w in vocab}
    assert not words & rare
    for name, spec in world.toy_specs().items():
        names = spec.class_names
        assert len(set(names)) == len(names), name
        for cls in spec.classes:
            assert cls.name == world.object_name(**dict(cls.fixed), synonyms=spec.synonyms)
            assert set(cls.name.split()) <= words | rare, cls.name
    assert "red plain object" in world.toy_specs()["toy"].class_names
    assert "red circle" in world.toy_specs()["toy_shapes"].class_names
    assert "dotted triangle" in world.toy_specs()["toy_patterns"].class_names
    assert "orange concentric object" in world.toy_specs()["toy"].class_names
    assert world.object_name(colour=0, pattern=1, synonyms={"colour", "pattern"}) == "crimson banded object"


def test_captions_use_each_synonym_at_its_rate():
    from data.toy.pretrain import captions

    n = 40000
    g = torch.Generator().manual_seed(0)
    attrs = world.random_attrs(n, g)
    texts, mentioned = captions(attrs, g)
    assert any(t.startswith("a photo of a ") for t in texts)  # the zero-shot template is a caption template
    for attribute in ("colour", "pattern"):
        for index, rate in enumerate(world.SYNONYM_RATE[attribute]):
            rows = ((attrs.get(attribute) == index) & mentioned[attribute]).nonzero().flatten().tolist()
            rare = world.SYNONYMS[attribute][index]
            used = sum(rare in texts[i].split() or f"{rare}." in texts[i].split() for i in rows) / len(rows)
            sd = math.sqrt(rate * (1 - rate) / len(rows))
            assert abs(used - rate) < 5 * sd + 1e-3, (attribute, index, used, rate)


def test_datasets_are_rendered_in_styles_pretraining_never_saw():
    assert list(Recipe().domains) == world.PRETRAIN_DOMAINS == list(TEST_RECIPE.domains)
    for name, spec in world.toy_specs().items():
        assert set(spec.domains) <= set(world.DOMAINS), name
        assert not set(spec.domains) & set(world.PRETRAIN_DOMAINS), name
    # the recipe hash (the checkpoint's name) covers the pretraining styles, not the downstream ones
    identity = json.dumps(Recipe().identity(), default=list)
    assert Recipe().identity()["world"]["pretrain_domains"] == world.PRETRAIN_DOMAINS
    assert not any(f'"{d}"' in identity for d in set(world.DOMAINS) - set(world.PRETRAIN_DOMAINS))


def _base2novel_specs():
    return {n: s for n, s in world.toy_specs().items() if s.protocol == "base2novel"}


def test_base_and_novel_classes_share_no_attribute_word():
    """A real dataset's novel classes have names of their own: no word that names a base class
    of a base-to-novel toy dataset names a novel one, so a context learned on base names
    cannot lean on shared words."""
    specs = _base2novel_specs()
    assert {"toy", "toy_shapes", "toy_patterns"} <= set(specs)
    for name, spec in specs.items():
        n_base = math.ceil(len(spec.classes) / 2)
        assert spec.novel_from == n_base and n_base >= 16 and len(spec.classes) - n_base >= 16, name
        base, novel = spec.classes[:n_base], spec.classes[n_base:]
        assert world.class_words(base) and world.class_words(novel)
        assert not world.class_words(base) & world.class_words(novel), name
    assert world.class_words([world.ToyClass("red striped object", ())]) == {"red", "striped"}


def test_every_toy_class_is_seen_in_pretraining_as_often_as_any_other():
    """Pretraining draws every attribute combination (no class is held out): the toy CLIP
    knows novel classes as well as base ones, as web pretraining knows a benchmark's novel
    classes. Each class's defining combination occurs at its uniform rate."""
    from data.toy.pretrain import pretrain_attrs

    n = 32000
    a = pretrain_attrs(n, torch.Generator().manual_seed(0))
    for name, spec in world.toy_specs().items():
        for cls in spec.classes:
            hit = torch.ones(n, dtype=torch.bool)
            for attribute, index in cls.fixed:
                hit &= a.get(attribute) == index
            expected = n / math.prod(len(world.VOCAB[attribute]) for attribute, _ in cls.fixed)
            assert 0.7 * expected <= int(hit.sum()) <= 1.3 * expected, (name, cls.name, int(hit.sum()), expected)


# -- rendering markers ----------------------------------------------------------------
def _near(images, rgb, tol=45):
    ref = torch.tensor(rgb, dtype=torch.float32)
    return ((images.float() - ref).abs().amax(-1) <= tol).flatten(1).sum(1)


@pytest.mark.parametrize("colour", range(len(world.COLOURS)))
def test_rendered_colour_appears_in_the_image(colour):
    imgs = world.render(_attrs(8, colour=colour), "clean", 32, seed=1)
    rgb = list(world.COLOURS.values())[colour]
    assert (_near(imgs, rgb) >= 40).all()
    others = [c for i, c in enumerate(world.COLOURS.values()) if i != colour]
    for other in others:  # the object is not painted in another colour
        assert _near(imgs, other, tol=20).sum() < _near(imgs, rgb, tol=20).sum()


def test_shape_size_and_pattern_markers():
    def area(**kw):  # same seed: same position, jitter and background for every call
        imgs = world.render(_attrs(16, colour=0, **kw), "clean", 32, seed=5)
        return _near(imgs, world.COLOURS["red"]).float().mean()

    s = world.SHAPES.index
    assert area(shape=s("ring")) < 0.8 * area(shape=s("circle"))  # a ring has a hole
    assert area(shape=s("square")) > 1.15 * area(shape=s("diamond"))
    assert area(size=0) < 0.6 * area(size=1)
    plain = area(pattern=world.PATTERNS.index("plain"))
    for p in world.PATTERNS[1:]:  # every pattern but plain darkens part of the object
        assert area(pattern=world.PATTERNS.index(p)) < 0.9 * plain, p
    # and no two patterns mark the same pixels (same seed: same object, only the pattern differs)
    marks = [world.render(_attrs(4, colour=0, shape=s("square"), pattern=k), "clean", 32, seed=5) for k in range(8)]
    for i in range(len(marks)):
        for j in range(i + 1, len(marks)):
            assert (marks[i].float() - marks[j].float()).abs().mean() > 3.0, (world.PATTERNS[i], world.PATTERNS[j])
    stripes = world.render(_attrs(4, colour=0, shape=s("square"), pattern=1), "clean", 32, seed=5)
    dark = tuple(int(0.35 * v) for v in world.COLOURS["red"])
    assert (_near(stripes, dark, tol=30) >= 20).all()  # the darker shade of the same colour


def test_styles_differ_and_their_effects_show():
    attrs = _attrs(32)
    clean = world.render(attrs, "clean", 32, seed=2).float()
    for d in world.DOMAINS:
        if d != "clean":
            other = world.render(attrs, d, 32, seed=2).float()
            assert (other - clean).abs().mean() > 1.0, d

    def grad(x):
        return (x[:, 1:] - x[:, :-1]).abs().mean()

    assert grad(world.render(attrs, "blurred", 32, seed=2).float()) < grad(clean)  # blur lowers local contrast
    faded = world.render(attrs, "faded", 32, seed=2).float()
    assert faded.std() < 0.7 * clean.std()  # fading cuts contrast

    def blue_over_red(x):
        return x[..., 2].float().mean() / x[..., 0].float().mean()

    # warm light dims blue against red: tinted against clean, lamplit against the same crowd unlit
    assert blue_over_red(world.render(attrs, "tinted", 32, seed=2)) < 0.9 * blue_over_red(clean)
    assert blue_over_red(world.render(attrs, "dusk", 32, seed=2)) < blue_over_red(faded)
    assert blue_over_red(world.render(attrs, "lamplit", 32, seed=2)) < 0.95 * blue_over_red(
        world.render(attrs, "crowded", 32, seed=2)
    )
    # the object's geometry is drawn before any style effect: same seed, same object, so
    # bars hide part of it and distractors add other saturated colours around it
    blue = world.COLOURS["blue"]
    plain = world.render(_attrs(32, colour=2), "clean", 32, seed=2)

    def other_colours(x):
        x = x.float()
        saturated = (x.amax(-1) - x.amin(-1)) > 80
        return (saturated & ((x - torch.tensor(blue, dtype=torch.float32)).abs().amax(-1) > 60)).sum()

    for bars in ("occluded", "obstructed"):
        x = world.render(_attrs(32, colour=2), bars, 32, seed=2)
        assert _near(x, blue).sum() < 0.9 * _near(plain, blue).sum(), bars
    for busy in ("crowded", "cluttered", "obstructed"):
        x = world.render(_attrs(32, colour=2), busy, 32, seed=2)
        assert other_colours(x) > other_colours(plain) + 32 * 5, busy
    with pytest.raises(ValueError, match="unknown toy domain"):
        world.render(attrs, "sepia", 32)


# -- catalog --------------------------------------------------------------------------
def test_toy_datasets_are_in_the_catalog(tmp_path):
    from data.catalog import dataset_info, load_dataset
    from data.transforms import clip_transforms

    tf = clip_transforms(32, augment=False)
    protocols = {}
    for name in toy_dataset_names():
        info = dataset_info(name)
        assert info.generated and info.folder == "toy"
        protocols[name] = info.protocol
    assert set(protocols.values()) == {"base2novel", "domains", "dirichlet"}
    splits = load_dataset("toy_domains", tmp_path / "nothing-here", tf)
    assert splits.domain_names == list(world.SHIFT_DOMAINS)
    assert set(splits.train.domains) == set(splits.domain_names)
    x, y = splits.test[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and isinstance(y, int)
    plain = load_toy("toy", tf)
    assert plain.domain_names is None and plain.train.domains is None
    assert plain.class_names == world.toy_specs()["toy"].class_names


# -- the toy CLIP ---------------------------------------------------------------------
def test_default_model_has_vit_towers_the_methods_need():
    from benchmark.backbone import load_backbone

    b = load_backbone("fedbench-toy-vit", None)
    assert b.vision.blocks >= 4 and b.text.blocks >= 4
    patches = b.model.visual.positional_embedding.shape[0] - 1
    assert patches >= 16
    longest = max(world.object_name(c, s, p, z) for c in range(8) for s in range(8) for p in range(4) for z in range(2))
    n_tokens = int((b.tokenize([f"a photo of a {longest}."])[0] != 0).sum())
    assert n_tokens + 16 <= b.context_length


def test_recipe_hash_names_the_checkpoint():
    assert Recipe().hash == Recipe().hash
    assert Recipe(steps=401).hash != Recipe().hash
    assert Recipe(lr=0.5).hash != Recipe().hash
    assert TEST_RECIPE.hash in checkpoint_path(TEST_RECIPE).name
    assert shipped_checkpoint(TEST_RECIPE).name == checkpoint_name(TEST_RECIPE)


def test_checkpoint_loads_through_load_backbone(toy_test_checkpoint, toy_test_backbone):
    assert toy_test_checkpoint == shipped_checkpoint(TEST_RECIPE)  # the package's file, not a build
    saved = torch.load(toy_test_checkpoint, map_location="cpu", weights_only=True)
    loaded = toy_test_backbone.model.state_dict()
    assert set(saved) == set(loaded)
    assert all(torch.equal(saved[k].float(), loaded[k].float()) for k in saved)  # fp16 file, fp32 model
    assert toy_test_backbone.pretrained == "fedbench-toy-test"


def test_zero_shot_on_base_and_novel_classes_is_above_chance(toy_test_backbone):
    """The test suite's briefly pretrained CLIP (250 steps) already names `toy`'s classes
    better than chance, novel ones too (the shipped default CLIP: results/toy/calibration.md)."""
    from data.toy.evaluate_zero_shot import evaluate

    r = evaluate(toy_test_backbone, "toy")
    assert r["novel_classes"] >= 16
    assert r["novel"] >= 2 * r["chance_novel"], r
    assert r["base"] >= 2 * r["chance_base"], r


def test_toy_splits_fixture_matches_backbone(toy_splits, toy_test_backbone):
    x, _ = toy_splits.test[0]
    assert x.shape[-1] == toy_test_backbone.image_size


# -- behaviour that a shape-only test cannot show ---------------------------------------
def test_personalized_fine_tuning_lowers_loss_and_raises_local(toy_test_backbone, tmp_path):
    """On the toy world, pFedMMA trains (its loss falls over rounds) and its
    Local beats zero-shot CLIP's Local on the same partition."""
    import pandas as pd

    from benchmark.config import build_config
    from benchmark.runs.runner import run_experiment

    def run(method, **method_args):
        config = build_config(
            dict(
                method=method,
                dataset="toy",
                backbone="fedbench-toy-vit",
                pretrained="fedbench-toy-test",
                clients=8,
                shots=16,
                rounds=5,
                local_epochs=2,
                batch_size=8,
                seed=1,
                wandb="disabled",
                out=str(tmp_path),
            ),
            {"method_args": method_args},
        )
        return run_experiment(config, progress=False)

    zero_shot = run("zeroshot")
    tuned = run("pfedmma", first_block=2, lr=0.03)  # 30x the paper's lr, near what `fedbench tune toy` chose (0.026)
    assert tuned.summary["metrics"]["Local"] > zero_shot.summary["metrics"]["Local"]
    metrics = pd.read_csv(tuned.run_dir / "metrics.csv")
    loss = metrics[metrics.metric == "train_loss"].groupby("round")["value"].mean()
    assert loss.iloc[-1] < loss.iloc[0]


def test_concurrent_processes_build_the_toy_clip_once(tmp_path):
    """Two processes that need the same uncached checkpoint: one pretrains, the other waits."""
    import os
    import subprocess
    import sys

    from benchmark.files import file_lock

    script = (
        "from data.toy.pretrain import Recipe, ensure_checkpoint\n"
        "print(ensure_checkpoint(Recipe(steps=2, batch_size=8, warmup=1), progress=False), flush=True)\n"
    )
    env = {**os.environ, "FEDBENCH_CACHE": str(tmp_path)}
    lock_path = tmp_path / f"{checkpoint_path(Recipe(steps=2, batch_size=8, warmup=1)).name}.lock"
    with file_lock(lock_path):  # a build "in progress": both processes must wait for it
        processes = [
            subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        first_lines = [p.stdout.readline() for p in processes]
    outputs = [line + p.communicate(timeout=600)[0] for line, p in zip(first_lines, processes)]
    assert all(p.returncode == 0 for p in processes)
    assert all("waiting for it" in line for line in first_lines)
    assert sum(out.count("pretraining the toy world's small CLIP") for out in outputs) == 1
    paths = {out.strip().splitlines()[-1] for out in outputs}
    assert len(paths) == 1 and Path(paths.pop()).is_file()


def test_a_candidate_style_takes_its_pixel_noise_after_an_at_sign():
    """A style search (`calibrate --styles`, `scripts/toy_coop_optimizers.py --styles`) can vary a
    candidate's noise: 'tint+fade@0' renders the effects of 'tint+fade' without pixel noise."""
    assert world.style("tint+fade") == (frozenset({"tint", "fade"}), world.DOWNSTREAM_NOISE)
    assert world.style("tint+fade@0.02") == (frozenset({"tint", "fade"}), 0.02)
    attrs = _attrs(16)
    quiet = world.render(attrs, "tint+fade@0", 32, seed=3).float()
    noisy = world.render(attrs, "tint+fade@0.2", 32, seed=3).float()
    assert (noisy - quiet).abs().mean() > 5.0
    for bad in ("tint+fade@loud", "tint+fade@-0.1", "tint+fade@nan", "tint+fade@2"):
        with pytest.raises(ValueError, match=r"pixel noise after '@' must be a number in \[0, 1\]"):
            world.style(bad)
    with pytest.raises(ValueError, match="unknown toy domain 'tint\\+sepia@0.02'"):
        world.style("tint+sepia@0.02")


def test_a_candidate_naming_renames_the_classes_by_their_rarer_words():
    toy = world.toy_specs()["toy"]
    renamed = world.named_with(toy, ["pattern", "colour"])
    assert renamed.synonyms == ("colour", "pattern")  # in ATTRIBUTES order, whatever was given
    assert [c.fixed for c in renamed.classes] == [c.fixed for c in toy.classes]  # same classes, same images
    assert renamed.class_names[0] == world.object_name(**dict(toy.classes[0].fixed), synonyms={"colour", "pattern"})
    for cls in renamed.classes:
        assert cls.name == world.object_name(**dict(cls.fixed), synonyms=renamed.synonyms)
    common = set(" ".join(toy.class_names).split())
    assert not common & set(" ".join(renamed.class_names).split()) - {"object"}
    nb = renamed.novel_from
    assert not world.class_words(renamed.classes[:nb]) & world.class_words(renamed.classes[nb:])
    assert world.named_with(toy, ()) == toy
    with pytest.raises(ValueError, match=r"synonyms \['hue'\]: expected attributes among colour"):
        world.named_with(toy, ["colour", "hue"])
