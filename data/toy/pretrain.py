"""The toy world's small CLIP: contrastive pretraining on generated image-caption pairs.

The package ships the checkpoints of the two recipes the suite uses, `DEFAULT_RECIPE`
(provider `fedbench-toy`) and `TEST_RECIPE` (`fedbench-toy-test`), as fp16 state dicts in
`data/toy/checkpoints/` with a manifest (recipe hash -> file, sha256, bytes). The
providers hand out the shipped file when its recipe hash matches, so every machine loads
the same bytes and a run's identity (which names the weights by the checkpoint's sha256)
is the same everywhere. Only a recipe without a shipped file is built, once, into the
cache dir (`$FEDBENCH_CACHE`, default `~/.cache/fedbench`) as
`toy-clip-<model>-<recipe hash>.pt`. The hash covers what pretraining sees (the
vocabulary and its synonyms, pretraining styles, `world.PRETRAIN_VERSION`),
the model config, the training hyperparameters and `CODE_VERSION`.

A build trains at exactly 1 torch thread (set inside, restored after: the float
reduction order, hence the bits, no longer depend on the machine) and saves through a
buffer (torch.save then writes the same bytes for the same tensors). Rebuild and print
the sha256 with

    python -m data.toy.pretrain --recipe default|test --out FILE [--ship]

(`--ship` also copies the file into data/toy/checkpoints and updates the manifest). The
default recipe takes ~6-8 min of one CPU core, the test recipe ~1 min.

Captions name a random subset of the object's attributes with varied templates (always
including the zero-shot template "a photo of a {}."), each named attribute by its common
word or, at the value's `world.SYNONYM_RATE`, its rarer synonym. The loss is
multi-positive InfoNCE: a caption is a positive for every image in the batch it truly
describes ("a photo of a circle." fits all circles), so partial captions never push true
matches apart, and full captions make the other images that share a colour but not a
shape hard negatives. Objects draw every attribute at random (`pretrain_attrs`), so every
class of every toy dataset occurs in pretraining, the novel classes as often as the base
ones (as web pretraining knows a benchmark's novel classes as well as its base ones); what
pretraining never shows is a downstream style (only `world.PRETRAIN_DOMAINS` are rendered).
World version 7's recipe (`V7_RECIPE`, provider `fedbench-toy7`) shows them too: one image in
ten in one of `world.V7_RARE_DOMAINS`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmark.backbone_weights import CONFIG_DIR, register_pretrained
from benchmark.files import atomic_write, file_lock
from data.toy import world

CODE_VERSION = 3  # bump when the training code changes what a recipe produces

TEMPLATES = (
    "a photo of a {}.",
    "a photo of a {}.",
    "a {}.",
    "an image of a {}.",
    "a picture of a {}.",
    "a rendering of a {}.",
    "this is a {}.",
    "there is a {} in the image.",
)
# Probability that a caption names each attribute (shape otherwise reads "object").
# Pattern is named most: the toy classes are colour x pattern, and colour is learned from
# far fewer mentions. Shape stays a weak attribute: a ViT this small, trained for minutes,
# barely learns it (measured: 14-19% single-attribute accuracy, chance 12.5%).
MENTION = {"size": 0.3, "colour": 0.7, "pattern": 0.9, "shape": 0.3}


@dataclass(frozen=True)
class Recipe:
    """Everything that determines the pretrained weights (hashed into the file name)."""

    model: str = "fedbench-toy-vit"
    steps: int = 1500
    batch_size: int = 128
    lr: float = 2e-3
    weight_decay: float = 0.1
    warmup: int = 50
    seed: int = 0
    # pretraining styles (world.PRETRAIN_DOMAINS); every dataset's styles are left out, a
    # rendering shift that leaves room for fine-tuning
    domains: tuple[str, ...] = ("clean", "noisy", "blurred", "checkerboard")
    group: int = 4  # batch items come in groups sharing a colour (hard negatives for pattern)
    image_size: int = 32
    # World version 7 (docs/toy-world.md): the downstream styles are seen too, each image at
    # `rare_rate` in one of `rare_domains` (the toy analogue of web data that holds some photos
    # like a benchmark's), and captions name attributes at `mention`'s rates where given.
    # At their defaults these fields stay out of the identity, so version 6's hashes hold.
    world_version: int = 6
    rare_domains: tuple[str, ...] = ()
    rare_rate: float = 0.0
    mention: tuple[tuple[str, float], ...] = ()  # (attribute, rate) overrides of MENTION
    # the attributes a batch group shares (() : colour, version 6's); a group sharing colour
    # and pattern differs mostly in shape, the hard negatives a shape needs to be learned
    group_on: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def mention_rates(self) -> dict[str, float]:
        return {**MENTION, **dict(self.mention)}

    def identity(self) -> dict:
        config = json.loads((CONFIG_DIR / f"{self.model}.json").read_text())
        recipe = {k: v for k, v in asdict(self).items() if k != "extra"}
        if self.world_version == 6:
            for key in _V7_FIELDS:
                recipe.pop(key)
        if not self.group_on:  # the fields added after a recipe was shipped: absent at their default
            recipe.pop("group_on")
        return {
            "recipe": recipe,
            "model_config": config,
            "world": {
                "version": world.PRETRAIN_VERSION,
                "vocab": world.VOCAB,
                "synonyms": world.SYNONYMS,
                "synonym_rate": world.SYNONYM_RATE,
                "colours": world.COLOURS,
                "pretrain_domains": world.PRETRAIN_DOMAINS,
            },
            "captions": {"templates": TEMPLATES, "mention": self.mention_rates},
            "code_version": CODE_VERSION,
        }

    @property
    def hash(self) -> str:
        payload = json.dumps(self.identity(), sort_keys=True, default=list).encode()
        return hashlib.sha256(payload).hexdigest()[:12]


_V7_FIELDS = ("world_version", "rare_domains", "rare_rate", "mention")
DEFAULT_RECIPE = Recipe()
# A much shorter run of the same model for the test suite (shipped the same way).
TEST_RECIPE = Recipe(steps=250, batch_size=96, warmup=20)
# World version 7's CLIP (provider `fedbench-toy7`): the same model; one image in ten rendered
# in a downstream style; and what a shape needs to be learned, which version 6's CLIP barely
# does: shape named in 90 % of captions, batch groups sharing colour and pattern (so shape
# tells them apart), and twice the steps (1500 steps named shape right on 43 % of clean large
# objects, 3000 on 81 %; docs/toy-world.md, World version 7).
V7_RECIPE = Recipe(
    steps=3000,
    world_version=7,
    rare_domains=world.V7_RARE_DOMAINS,
    rare_rate=0.1,
    mention=(("pattern", 0.8), ("shape", 0.9)),
    group_on=("colour", "pattern"),
)


CHECKPOINT_DIR = Path(__file__).parent / "checkpoints"  # shipped with the package
MANIFEST = CHECKPOINT_DIR / "manifest.json"
RECIPES = {"default": DEFAULT_RECIPE, "test": TEST_RECIPE, "v7": V7_RECIPE}


def cache_dir() -> Path:
    return Path(os.environ.get("FEDBENCH_CACHE", Path.home() / ".cache" / "fedbench"))


def checkpoint_name(recipe: Recipe) -> str:
    return f"toy-clip-{recipe.model}-{recipe.hash}.pt"


def checkpoint_path(recipe: Recipe = DEFAULT_RECIPE) -> Path:
    """Where `recipe`'s checkpoint is built when the package ships none for it (the cache)."""
    return cache_dir() / checkpoint_name(recipe)


def read_manifest() -> dict:
    """The shipped checkpoints: {recipe hash: {"recipe", "file", "sha256", "bytes"}}."""
    return json.loads(MANIFEST.read_text()) if MANIFEST.is_file() else {}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@functools.lru_cache(maxsize=8)
def _verified(path: str, size: int, mtime_ns: int, sha256: str) -> bool:
    return file_sha256(Path(path)) == sha256


def shipped_checkpoint(recipe: Recipe = DEFAULT_RECIPE) -> Path | None:
    """The checkpoint shipped with the package for `recipe` (its manifest entry names the
    recipe hash and the file's sha256), or None: no entry, or a file that does not match."""
    entry = read_manifest().get(recipe.hash)
    if entry is None:
        return None
    path = CHECKPOINT_DIR / entry["file"]
    if not path.is_file():
        return None
    stat = path.stat()
    if not _verified(str(path), stat.st_size, stat.st_mtime_ns, entry["sha256"]):
        warnings.warn(f"shipped toy checkpoint {path} does not match its manifest sha256; ignoring it")
        return None
    return path


def ensure_checkpoint(recipe: Recipe = DEFAULT_RECIPE, progress: bool = True) -> Path:
    """The checkpoint of `recipe`: the shipped file when the package has one for its recipe
    hash (loaded in place, never copied or rebuilt), else the cache's, pretraining it
    first if it is not cached yet.

    Concurrent processes (a sweep split over terminals, parallel test runs) take a file
    lock beside the cached checkpoint: the first builds it, the others wait and then load it."""
    shipped = shipped_checkpoint(recipe)
    if shipped is not None:
        return shipped
    path = checkpoint_path(recipe)
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)

    def waiting() -> None:
        print(f"fedbench: another process is pretraining the toy CLIP ({path.name}); waiting for it", flush=True)

    with file_lock(path.with_name(f"{path.name}.lock"), on_busy=waiting):
        if not path.is_file():  # else built by the process we waited for
            build_checkpoint(recipe, path, progress=progress)
    return path


def existing_checkpoint(recipe: Recipe) -> Path | None:
    """The shipped or cached checkpoint of `recipe`, or None if it would have to be built."""
    shipped = shipped_checkpoint(recipe)
    if shipped is not None:
        return shipped
    path = checkpoint_path(recipe)
    return path if path.is_file() else None


@register_pretrained(
    "fedbench-toy", identity=lambda: DEFAULT_RECIPE.hash, cached=lambda: existing_checkpoint(DEFAULT_RECIPE)
)
def toy_clip_checkpoint() -> Path:
    """Provider for `--pretrained fedbench-toy` (backbone fedbench-toy-vit)."""
    return ensure_checkpoint(DEFAULT_RECIPE)


@register_pretrained(
    "fedbench-toy-test", identity=lambda: TEST_RECIPE.hash, cached=lambda: existing_checkpoint(TEST_RECIPE)
)
def toy_clip_test_checkpoint() -> Path:
    """Provider for the test suite's briefly pretrained model (backbone fedbench-toy-vit)."""
    return ensure_checkpoint(TEST_RECIPE)


@register_pretrained("fedbench-toy7", identity=lambda: V7_RECIPE.hash, cached=lambda: existing_checkpoint(V7_RECIPE))
def toy7_clip_checkpoint() -> Path:
    """Provider for `--pretrained fedbench-toy7`: the toy CLIP of world version 7."""
    return ensure_checkpoint(V7_RECIPE)


@contextlib.contextmanager
def single_thread():
    """Run the block with exactly 1 torch intra-op thread (restored after): float
    reductions then happen in one order, so the same recipe gives the same bits whatever
    the machine's thread count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# -- pretraining data -----------------------------------------------------------------
def pretrain_attrs(n: int, g: torch.Generator) -> world.Attrs:
    """`n` random objects: every attribute combination (so every toy class) can occur, as
    web pretraining sees a benchmark's novel classes as often as its base ones."""
    return world.random_attrs(n, g)


def grouped_attrs(n: int, group: int, g: torch.Generator, group_on: tuple[str, ...] = ()) -> world.Attrs:
    """`n` pretraining objects in consecutive groups of `group` that share a colour (and so
    differ mostly in shape, pattern, size): every caption naming a shape then has
    same-colour hard negatives in its batch. `group_on` ("colour", "pattern"): groups share
    both where the pool allows, and so differ mostly in shape and size."""
    pool = pretrain_attrs(4 * n, g)
    if group <= 1:
        return world.Attrs(*(pool.get(a)[:n] for a in world.ATTRIBUTES))
    if group_on:
        key = torch.zeros(len(pool), dtype=torch.float64)
        for a in group_on:
            key = key * 16 + pool.get(a).double()
        jitter = 0.5  # below 1: objects of one key stay together, in random order
    else:
        key, jitter = pool.colour.double(), 1.0
    order = torch.argsort(key + jitter * torch.rand(len(pool), generator=g, dtype=torch.float64))
    starts = torch.randint(0, len(pool) - group + 1, (n // group + 1,), generator=g)
    idx = order[(starts.view(-1, 1) + torch.arange(group).view(1, -1)).flatten()][:n]
    return world.Attrs(*(pool.get(a)[idx] for a in world.ATTRIBUTES))


def captions(
    attrs: world.Attrs, g: torch.Generator, mention: dict[str, float] = MENTION
) -> tuple[list[str], dict[str, torch.Tensor]]:
    """A caption per object and, per attribute, whether the caption names it."""
    n = len(attrs)
    mentioned = {a: torch.rand(n, generator=g) < p for a, p in mention.items()}
    template = torch.randint(0, len(TEMPLATES), (n,), generator=g)
    rare = {a: torch.rand(n, generator=g) < torch.tensor(world.SYNONYM_RATE[a])[attrs.get(a)] for a in world.ATTRIBUTES}
    texts = []
    for i in range(n):
        kw = {a: int(attrs.get(a)[i]) if mentioned[a][i] else None for a in world.ATTRIBUTES}
        syn = {a for a in world.ATTRIBUTES if rare[a][i]}
        texts.append(TEMPLATES[int(template[i])].format(world.object_name(**kw, synonyms=syn)))
    return texts, mentioned


def multi_positive_targets(attrs: world.Attrs, mentioned: dict[str, torch.Tensor]) -> torch.Tensor:
    """[B images, B captions] bool: caption j is true of image i."""
    n = len(attrs)
    match = torch.ones(n, n, dtype=torch.bool)
    for a in world.ATTRIBUTES:
        v = attrs.get(a)
        match &= ~mentioned[a].view(1, n) | (v.view(n, 1) == v.view(1, n))
    return match


def normalize_images(images: torch.Tensor, mean, std) -> torch.Tensor:
    """uint8 [N, H, W, 3] -> normalized float [N, 3, H, W] (== ToTensor + Normalize)."""
    x = images.permute(0, 3, 1, 2).float() / 255.0
    m = torch.tensor(mean).view(1, 3, 1, 1)
    s = torch.tensor(std).view(1, 3, 1, 1)
    return (x - m) / s


def contrastive_loss(img: torch.Tensor, txt: torch.Tensor, scale: torch.Tensor, match: torch.Tensor) -> torch.Tensor:
    img = F.normalize(img, dim=-1)
    txt = F.normalize(txt, dim=-1)
    logits = scale * img @ txt.T
    t_i2t = match.float() / match.sum(1, keepdim=True)
    t_t2i = match.T.float() / match.T.sum(1, keepdim=True)
    l_i2t = -(t_i2t * F.log_softmax(logits, dim=1)).sum(1).mean()
    l_t2i = -(t_t2i * F.log_softmax(logits.T, dim=1)).sum(1).mean()
    return (l_i2t + l_t2i) / 2


# -- the build ------------------------------------------------------------------------
def train_model(recipe: Recipe, progress: bool = True):
    """Pretrain `recipe` from scratch at exactly 1 torch thread (the thread count and RNG
    state are restored after); returns (open_clip model in eval mode, log dict)."""
    with single_thread(), torch.random.fork_rng(devices=[]):
        return _train(recipe, progress)


def _optimizer(model, recipe: Recipe) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on biases, norms, embeddings, the scale)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        small = p.ndim < 2 or "embedding" in name or "logit_scale" in name
        (no_decay if small else decay).append(p)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=recipe.lr,
        betas=(0.9, 0.98),
        eps=1e-6,
    )


def _lr_at(recipe: Recipe, step: int) -> float:
    """Linear warm-up, then a cosine down to 0 at the last step."""
    if step < recipe.warmup:
        return recipe.lr * (step + 1) / recipe.warmup
    t = (step - recipe.warmup) / max(1, recipe.steps - recipe.warmup)
    return recipe.lr * 0.5 * (1 + math.cos(math.pi * t))


def _train(recipe: Recipe, progress: bool):
    import open_clip
    from tqdm.auto import tqdm

    torch.manual_seed(recipe.seed)
    g = torch.Generator().manual_seed(recipe.seed)
    model = open_clip.create_model(recipe.model)
    tokenizer = open_clip.get_tokenizer(recipe.model)
    mean = getattr(model.visual, "image_mean", None) or open_clip.OPENAI_DATASET_MEAN
    std = getattr(model.visual, "image_std", None) or open_clip.OPENAI_DATASET_STD
    opt = _optimizer(model, recipe)
    model.train()
    losses = []
    start = time.time()
    bar = tqdm(range(recipe.steps), desc=f"pretraining {recipe.model}", disable=not progress, mininterval=2.0)
    for step in bar:
        attrs = grouped_attrs(recipe.batch_size, recipe.group, g, recipe.group_on)
        doms = torch.randint(0, len(recipe.domains), (recipe.batch_size,), generator=g)
        names = [recipe.domains[int(d)] for d in doms]
        if recipe.rare_rate > 0:  # version 7: some images in a downstream style (draws only then)
            rare = torch.rand(recipe.batch_size, generator=g) < recipe.rare_rate
            pick = torch.randint(0, len(recipe.rare_domains), (recipe.batch_size,), generator=g)
            names = [recipe.rare_domains[int(k)] if r else d for d, r, k in zip(names, rare, pick)]
        images = world.render(
            attrs,
            names,
            recipe.image_size,
            seed=int(torch.randint(0, 2**31 - 1, (1,), generator=g)),
        )
        texts, mentioned = captions(attrs, g, recipe.mention_rates)
        match = multi_positive_targets(attrs, mentioned)
        for group in opt.param_groups:
            group["lr"] = _lr_at(recipe, step)
        img_f = model.encode_image(normalize_images(images, mean, std))
        txt_f = model.encode_text(tokenizer(texts))
        loss = contrastive_loss(img_f, txt_f, model.logit_scale.exp(), match)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        losses.append(loss.item())
        if step % 10 == 0:
            bar.set_postfix(loss=f"{sum(losses[-10:]) / len(losses[-10:]):.3f}")
    model.eval()
    return model, {"seconds": time.time() - start, "final_loss": sum(losses[-20:]) / len(losses[-20:])}


def state_dict_bytes(model) -> bytes:
    """The model's state_dict as torch.save bytes, floats in fp16: byte-deterministic (saved
    through a buffer, so the archive's inner folder name never depends on the file name)."""
    state = {
        k: (v.detach().half() if v.is_floating_point() else v.detach()).contiguous().clone()
        for k, v in model.state_dict().items()
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def build_checkpoint(recipe: Recipe = DEFAULT_RECIPE, path: Path | None = None, progress: bool = True) -> Path:
    """Pretrain `recipe` (at 1 torch thread) and save its fp16 state_dict atomically at
    `path`; returns the path. The same recipe gives the same bytes on any machine count of
    threads (tests/data/toy/test_pretrain.py)."""
    path = Path(path) if path is not None else checkpoint_path(recipe)
    path.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"fedbench: pretraining the toy world's small CLIP ({recipe.model}, {recipe.steps} steps x "
        f"{recipe.batch_size} generated image-caption pairs) -- done once, saved at {path}",
        flush=True,
    )
    model, log = train_model(recipe, progress=progress)
    atomic_write(path, state_dict_bytes(model))
    meta = {"identity": recipe.identity(), "hash": recipe.hash, "log": log, "sha256": file_sha256(path)}
    atomic_write(path.with_suffix(".json"), json.dumps(meta, indent=1, default=list))
    print(f"fedbench: toy CLIP pretrained in {log['seconds']:.0f} s (final loss {log['final_loss']:.3f})", flush=True)
    return path


def ship(recipe_name: str, path: Path) -> dict:
    """Record `path` (a build of RECIPES[recipe_name]) as the shipped checkpoint: copy it
    into CHECKPOINT_DIR under its recipe-hash name and update the manifest."""
    recipe = RECIPES[recipe_name]
    CHECKPOINT_DIR.mkdir(parents=True, exist_ok=True)
    target = CHECKPOINT_DIR / checkpoint_name(recipe)
    if Path(path).resolve() != target.resolve():
        atomic_write(target, Path(path).read_bytes())
    manifest = {h: e for h, e in read_manifest().items() if e["recipe"] != recipe_name}
    for old in {e["file"] for e in read_manifest().values()} - {e["file"] for e in manifest.values()} - {target.name}:
        (CHECKPOINT_DIR / old).unlink(missing_ok=True)
    manifest[recipe.hash] = {
        "recipe": recipe_name,
        "file": target.name,
        "sha256": file_sha256(target),
        "bytes": target.stat().st_size,
    }
    atomic_write(MANIFEST, json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return manifest[recipe.hash]


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Rebuild a toy CLIP checkpoint (1 torch thread, deterministic).")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="default")
    parser.add_argument("--out", type=Path, default=None, help="file to write (default: the cache path)")
    parser.add_argument("--ship", action="store_true", help="also copy it into data/toy/checkpoints and the manifest")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)
    recipe = RECIPES[args.recipe]
    path = build_checkpoint(recipe, args.out, progress=args.progress)
    print(f"recipe {args.recipe} hash {recipe.hash}: {path} sha256 {file_sha256(path)} ({path.stat().st_size} bytes)")
    if args.ship:
        print(f"shipped: {ship(args.recipe, path)}")


if __name__ == "__main__":
    main()
