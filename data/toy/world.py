"""The toy world: a procedural, compositional image generator (vectorized, deterministic).

An object has a shape, a colour, a pattern (texture), a size and a position; the image
has a background and effects set by its rendering *style* (domain). A class is a
combination of attributes and its English name is built from them ("striped triangle",
"red circle"), so text can name classes that were never trained on. Every attribute
value also has a rarer synonym ("crimson", "banded") that pretraining captions use at a
per-value rate (12 % down to 1.5 %). A base-to-novel dataset names its base classes with
one half of each vocabulary and its novel classes with the other, so a prompt learned on
base names has no word to carry over.

Two world versions live side by side; a dataset belongs to one (`ToySpec.world`) and is
measured on that version's CLIP (`WORLD_PRETRAINED`, `pretrained_mismatch`):

- **Version 6** (`toy_specs()`: toy, toy_shapes, toy_patterns, toy_domains, toy10; CLIP
  `fedbench-toy`; the shipped tables). Styles (`STYLES`) are sets of effects; the toy CLIP
  is pretrained on four of them (clean, noisy, blurred, checkerboard) and on every attribute
  combination, and every dataset is rendered in a style it never saw -- warm light, fading,
  occluding bars, patterned distractors and their combinations. That style gap is the room
  adaptation has: `toy` (style "pale", close-ups, halves `HALVES`) has zero-shot Base and
  Novel ~60 %, and a CoOp prompt gains on Base and loses a little on Novel. Issue 57 found
  that this gap is shared by every class, so a method that adapts the image tower on base
  classes undoes it for novel classes too (results/toy/calibration.md, per family).
- **Version 7** (`toy7_specs()`: toy7, toy7_shapes, toy7_patterns; CLIP `fedbench-toy7`;
  opt-in by name). Its CLIP also sees the downstream styles (`V7_RARE_DOMAINS`, one
  pretraining image in ten), so the zero-shot gap must come from the classes: large objects in
  clutter, each colour shown in a shade of its own in `toy7` and `toy7_shapes` (`V7_HUE_SHIFT`,
  `shaded_colours`), each shape in a proportion of its own in `toy7_patterns`
  (`V7_SHAPE_STRETCH`, `stretch_factors`), halves chosen per dataset (`V7_DATASET_HALVES`).
  A run's seed draws its held-out images (data/toy/datasets.py).
  docs/toy-world.md, World version 7, has its design and measurements.

Version 6's images, names and CLIP recipe are unchanged by version 7 (tests/data/toy/
test_world7.py hashes them against the code before version 7).

`render(attrs, domain, image_size, seed)` turns a batch of attribute indices into uint8
images [N, H, W, 3]; the same inputs give the same pixels. An object's geometry and
colour are drawn before any style effect, and an effect draws random numbers only when a
chunk contains an image that has it (the pretraining styles render exactly as in world
version 2). Rendering is done in torch at 2x resolution and average-pooled (anti-aliasing).
"""

from __future__ import annotations

import colorsys
import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# -- the attribute vocabulary (order is part of the world; changing it changes WORLD_VERSION)
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 50),
    "blue": (40, 70, 235),
    "yellow": (240, 225, 40),
    "purple": (150, 50, 200),
    "orange": (250, 130, 20),
    "pink": (255, 120, 200),
    "cyan": (40, 220, 230),
}
SHAPES = ["circle", "square", "triangle", "diamond", "cross", "star", "ring", "heart"]
PATTERNS = ["plain", "striped", "dotted", "checkered", "diagonal", "gridded", "wavy", "concentric"]
SIZES = ["small", "large"]
# Rendering styles (domains), each a set of effects and a pixel-noise level. The first four
# are the toy CLIP's pretraining styles; the others are downstream styles it never saw (the
# datasets' gap to pretraining, as a benchmark's photos differ from web images):
#   checker  a checkerboard background          blob     a distractor disc of another colour
#   blur     a 5x5 binomial blur                 crowd    three patterned distractor objects
#   bars     two grey bars occluding the object  scatter  two patterned distractor objects
#   tint     warm light (blue, green dimmed; a veil)        glow  0.7 of tint's cast
#   fade     contrast and saturation cut, brighter          warm  0.4 of tint's cast
STYLES: dict[str, tuple[frozenset[str], float]] = {
    "clean": (frozenset(), 0.02),
    "noisy": (frozenset(), 0.12),
    "blurred": (frozenset({"blur"}), 0.0),
    "checkerboard": (frozenset({"checker"}), 0.0),
    "cluttered": (frozenset({"checker", "blob"}), 0.07),
    "tinted": (frozenset({"tint"}), 0.05),
    "faded": (frozenset({"fade"}), 0.05),
    "pale": (frozenset({"fade"}), 0.04),  # faded, finer grain: toy's style (results/toy/style_search.md, section 9)
    "occluded": (frozenset({"bars"}), 0.04),
    "crowded": (frozenset({"crowd"}), 0.05),
    "dusk": (frozenset({"tint", "fade"}), 0.05),
    "twilight": (frozenset({"glow", "fade", "scatter"}), 0.05),
    "lamplit": (frozenset({"warm", "crowd"}), 0.05),
    "obstructed": (frozenset({"bars", "checker", "blob"}), 0.05),
}
EFFECTS = frozenset({"checker", "blob", "blur", "crowd", "bars", "scatter", "tint", "glow", "fade", "warm"})
DOWNSTREAM_NOISE = 0.05  # pixel noise of a style given as effects ("glow+fade+scatter")
PRETRAIN_DOMAINS = ["clean", "noisy", "blurred", "checkerboard"]
DOMAINS = list(STYLES)
# World version 7: its CLIP also sees these downstream styles, one pretraining image in ten
# (`pretrain.V7_RECIPE`), so a version 7 dataset's style is one pretraining covers and its
# zero-shot gap comes from the classes (docs/toy-world.md, World version 7).
V7_RARE_DOMAINS = ("pale", "crowded", "lamplit", "cluttered", "occluded", "tinted", "twilight", "dusk")


def style(domain: str) -> tuple[frozenset[str], float]:
    """(effects, pixel noise) of a named style, or of effects joined by '+' ("glow+fade+scatter":
    a candidate style for a calibration search, at the downstream styles' noise, or at the noise
    given after '@': "tint+fade+blob@0.02")."""
    if domain in STYLES:
        return STYLES[domain]
    effects_text, at, noise_text = domain.partition("@")
    effects = frozenset(effects_text.split("+"))
    noise = DOWNSTREAM_NOISE
    if at:
        try:
            noise = float(noise_text)
        except ValueError:
            noise = -1.0
        if not 0.0 <= noise <= 1.0:
            raise ValueError(
                f"toy domain {domain!r}: the pixel noise after '@' must be a number in [0, 1], got {noise_text!r}"
            )
    if effects <= EFFECTS:
        return effects, noise
    raise ValueError(
        f"unknown toy domain {domain!r}: expected a style ({', '.join(DOMAINS)}) or effects joined by '+' "
        f"({', '.join(sorted(EFFECTS))}), optionally with its pixel noise after '@' (tint+fade@0.02)"
    )


COLOUR_NAMES = list(COLOURS)
ATTRIBUTES = ("colour", "shape", "pattern", "size")
VOCAB = {"colour": COLOUR_NAMES, "shape": SHAPES, "pattern": PATTERNS, "size": SIZES}
# A rarer word for every attribute value. Pretraining captions use it instead of the common
# word at the value's rate (a spectrum from 12 % down to 1.5 %), so the toy CLIP knows some
# synonyms well and others barely -- as web captions rarely use a dataset's fine-grained
# class names. Downstream datasets may name classes with them (`ToySpec.synonyms`).
SYNONYMS = {
    "colour": ["crimson", "emerald", "azure", "golden", "violet", "amber", "rose", "teal"],
    "shape": ["disc", "block", "wedge", "rhombus", "plus", "pentagram", "hoop", "valentine"],
    "pattern": ["solid", "banded", "spotted", "tiled", "slanted", "latticed", "rippled", "bullseye"],
    "size": ["tiny", "big"],
}
_RATES = (0.12, 0.06, 0.03, 0.015)
SYNONYM_RATE = {a: [_RATES[i % len(_RATES)] for i in range(len(VOCAB[a]))] for a in ATTRIBUTES}
# WORLD_VERSION: everything generated (datasets' images and names; feature caches key on it).
# PRETRAIN_VERSION: what the toy CLIP's pretraining sees (its recipe hash covers this, the
# vocabulary, synonyms, hold-outs and pretraining styles, not the downstream styles).
WORLD_VERSION = 6
PRETRAIN_VERSION = 4


@dataclass(frozen=True)
class Attrs:
    """A batch of objects as attribute indices (LongTensors of equal length)."""

    colour: torch.Tensor
    shape: torch.Tensor
    pattern: torch.Tensor
    size: torch.Tensor

    def __len__(self) -> int:
        return len(self.shape)

    def get(self, attribute: str) -> torch.Tensor:
        return getattr(self, attribute)


def word(attribute: str, index: int, synonym: bool = False) -> str:
    """The word for value `index` of `attribute`: the common one or its rarer synonym."""
    return (SYNONYMS if synonym else VOCAB)[attribute][index]


def object_name(
    colour: int | None = None,
    shape: int | None = None,
    pattern: int | None = None,
    size: int | None = None,
    synonyms: frozenset[str] | set[str] | tuple = (),
) -> str:
    """English name of an attribute combination, e.g. 'small red striped triangle'; the
    attributes in `synonyms` are named by their rarer word ('crimson banded triangle').

    Missing shape reads 'object'; the 'plain' pattern is named (it is a class attribute)."""
    words = []
    for attribute, index in (("size", size), ("colour", colour), ("pattern", pattern)):
        if index is not None:
            words.append(word(attribute, index, attribute in synonyms))
    words.append(word("shape", shape, "shape" in synonyms) if shape is not None else "object")
    return " ".join(words)


def random_attrs(n: int, generator: torch.Generator) -> Attrs:
    def draw(k: int) -> torch.Tensor:
        return torch.randint(0, k, (n,), generator=generator)

    return Attrs(draw(len(COLOURS)), draw(len(SHAPES)), draw(len(PATTERNS)), draw(len(SIZES)))


# -- geometry -------------------------------------------------------------------------
def _shape_masks(u: torch.Tensor, v: torch.Tensor, shape: torch.Tensor) -> torch.Tensor:
    """Boolean mask [N, S, S] of each object's shape in its own normalized frame (radius 1)."""
    out = torch.zeros(u.shape, dtype=torch.bool)
    for k in range(len(SHAPES)):
        idx = (shape == k).nonzero().flatten()
        if len(idx):
            out[idx] = _one_shape(k, u[idx], v[idx])
    return out


def _one_shape(k: int, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    au, av = u.abs(), v.abs()
    name = SHAPES[k]
    if name == "circle":
        return u * u + v * v <= 1.0
    if name == "square":
        return torch.maximum(au, av) <= 0.82
    if name == "triangle":  # apex up
        return (v <= 0.75) & (au <= (v + 1.05) * 0.62)
    if name == "diamond":
        return au + av <= 1.05
    if name == "cross":
        return ((au <= 0.32) & (av <= 1.0)) | ((av <= 0.32) & (au <= 1.0))
    if name == "star":  # five points
        rho = torch.sqrt(u * u + v * v)
        phi = torch.atan2(v, u)
        return rho <= 0.42 + 0.6 * ((torch.cos(5 * (phi + math.pi / 2)) + 1) / 2) ** 2
    if name == "ring":
        r2 = u * u + v * v
        return (r2 <= 1.0) & (r2 >= 0.58**2)
    if name == "heart":
        return _heart(u, v)
    raise AssertionError(name)


def _heart(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    x = u * 1.25
    y = -v * 1.25 + 0.25
    return (x * x + y * y - 1) ** 3 - x * x * y**3 <= 0


def _pattern_masks(
    px: torch.Tensor, py: torch.Tensor, pattern: torch.Tensor, period: float, centre: float = 0.0
) -> torch.Tensor:
    """Boolean [N, S, S]: where the pattern darkens the object (pixel coords; the object's
    centre sits at (centre, centre), which only the concentric pattern uses)."""
    p = period
    out = torch.zeros(px.shape, dtype=torch.bool)
    for k, name in enumerate(PATTERNS):
        idx = (pattern == k).nonzero().flatten()
        if name == "plain" or not len(idx):
            continue
        x, y = px[idx], py[idx]
        if name == "striped":
            out[idx] = torch.remainder(y, p) < p / 2
        elif name == "dotted":
            dx = torch.remainder(x, p) - p / 2
            dy = torch.remainder(y, p) - p / 2
            out[idx] = dx * dx + dy * dy <= (p * 0.3) ** 2
        elif name == "checkered":
            out[idx] = (torch.floor(x / (p / 2)) + torch.floor(y / (p / 2))).remainder(2) == 0
        elif name == "diagonal":
            out[idx] = torch.remainder(x + y, p * 1.2) < p * 0.6
        elif name == "gridded":
            out[idx] = (torch.remainder(x, p) < p * 0.28) | (torch.remainder(y, p) < p * 0.28)
        elif name == "wavy":
            out[idx] = torch.remainder(y + 0.3 * p * torch.sin(2 * math.pi * x / (1.5 * p)), p) < p / 2
        elif name == "concentric":  # rings around the object's centre (x, y are offset by `centre`)
            rho = torch.sqrt((x - centre) ** 2 + (y - centre) ** 2)
            out[idx] = torch.remainder(rho, p) < p / 2
    return out


# -- rendering ------------------------------------------------------------------------
RENDER_CHUNK = 256  # images rendered per vectorized pass (part of the world: fixes the random stream)


def render(
    attrs: Attrs,
    domain: str | list[str],
    image_size: int = 32,
    seed: int = 0,
    colours: torch.Tensor | None = None,
    stretch: float = 0.0,
) -> torch.Tensor:
    """uint8 images [N, H, W, 3] of `attrs` in rendering style `domain` (one name or one per
    image). Nuisances (position, rotation, colour jitter, background, noise) are drawn from
    `seed`; same arguments, same pixels. `colours`: the RGB (0-255) of each colour value, as
    the dataset shows it (`shaded_colours`); None: `COLOURS`, the shades pretraining shows.
    `stretch`: each shape value drawn in a proportion of its own (`stretch_factors`); 0: as
    pretraining draws it."""
    n = len(attrs)
    domains = [domain] * n if isinstance(domain, str) else list(domain)
    if len(domains) != n:
        raise ValueError(f"{len(domains)} domains for {n} objects")
    g = torch.Generator().manual_seed(int(seed))
    chunks = []
    for start in range(0, n, RENDER_CHUNK):
        sl = slice(start, start + RENDER_CHUNK)
        part = Attrs(attrs.colour[sl], attrs.shape[sl], attrs.pattern[sl], attrs.size[sl])
        chunks.append(_render_chunk(part, domains[sl], image_size, g, colours, stretch))
    if not chunks:
        return torch.zeros(0, image_size, image_size, 3, dtype=torch.uint8)
    return torch.cat(chunks)


def _render_chunk(
    attrs: Attrs,
    domains: list[str],
    image_size: int,
    g: torch.Generator,
    colours: torch.Tensor | None = None,
    stretch: float = 0.0,
) -> torch.Tensor:
    n = len(attrs)
    styles = {d: style(d) for d in set(domains)}
    ss = 2  # supersampling factor
    S = image_size * ss
    unit = S / 32.0  # sizes below are in 32px units

    def rand(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=g)

    # object geometry: radius from size, position so the object stays in the frame
    small = attrs.size == 0
    radius = torch.where(small, 7.0 + 1.5 * rand(n), 11.0 + 2.0 * rand(n)) * unit
    margin = radius * 1.02
    cx = margin + rand(n) * (S - 2 * margin)
    cy = margin + rand(n) * (S - 2 * margin)
    theta = (rand(n) - 0.5) * 0.5  # small rotation, radians
    coords = torch.arange(S, dtype=torch.float32) + 0.5
    X = coords.view(1, 1, S).expand(n, S, S)
    Y = coords.view(1, S, 1).expand(n, S, S)
    dx = X - cx.view(n, 1, 1)
    dy = Y - cy.view(n, 1, 1)
    c, s = torch.cos(theta).view(n, 1, 1), torch.sin(theta).view(n, 1, 1)
    ru = c * dx + s * dy
    rv = -s * dx + c * dy
    r = radius.view(n, 1, 1)
    if stretch:  # a dataset's own proportions of its shapes (versions before never pass one)
        f = stretch_factors(stretch)[attrs.shape].view(n, 1, 1)
        inside = _shape_masks(ru / r / f, rv / r * f, attrs.shape)
    else:
        inside = _shape_masks(ru / r, rv / r, attrs.shape)
    period = 6.0 * unit
    marks = _pattern_masks(ru + 100 * period, rv + 100 * period, attrs.pattern, period, 100 * period) & inside

    # colours with jitter; the pattern is a darker (for light colours) shade of the same colour
    palette = (torch.tensor(list(COLOURS.values()), dtype=torch.float32) if colours is None else colours) / 255.0
    colour = palette[attrs.colour] * (0.88 + 0.12 * rand(n, 1)) + (rand(n, 3) - 0.5) * 0.06
    colour = colour.clamp(0, 1)
    shade = colour * 0.35

    # background by domain
    bg_level = 0.25 + 0.3 * rand(n)
    img = bg_level.view(n, 1, 1, 1).repeat(1, 3, S, S)

    def has(effect: str) -> torch.Tensor:
        return torch.tensor([effect in styles[d][0] for d in domains], dtype=torch.bool)

    checker = has("checker")
    if checker.any():
        per = (4 + torch.randint(0, 5, (n,), generator=g)).float() * unit
        ph = rand(n, 2) * per.view(n, 1)
        cb = (
            torch.floor((X + ph[:, 0].view(n, 1, 1)) / per.view(n, 1, 1))
            + torch.floor((Y + ph[:, 1].view(n, 1, 1)) / per.view(n, 1, 1))
        ).remainder(2)
        contrast = 0.18 + 0.12 * rand(n)
        alt = (bg_level + contrast).view(n, 1, 1) * cb + bg_level.view(n, 1, 1) * (1 - cb)
        img = torch.where(checker.view(n, 1, 1, 1), alt.unsqueeze(1), img)
    clutter = has("blob")
    if clutter.any():  # a distractor blob of another colour, partly hidden behind the object
        dcol = palette[torch.randint(0, len(COLOURS), (n,), generator=g)] * 0.8
        dr = (3.0 + 2.0 * rand(n)) * unit
        dcx, dcy = rand(n) * S, rand(n) * S
        blob = ((X - dcx.view(n, 1, 1)) ** 2 + (Y - dcy.view(n, 1, 1)) ** 2) <= dr.view(n, 1, 1) ** 2
        blob = blob & clutter.view(n, 1, 1)
        _paint(img, blob, dcol)

    crowd = has("crowd") | has("scatter")
    if crowd.any():  # three (crowd) or two (scatter) patterned distractor objects of random shapes
        count = torch.where(has("crowd"), 3, torch.where(has("scatter"), 2, 0))
        for k in range(3):
            d = random_attrs(n, g)
            dr = (4.0 + 3.0 * rand(n)) * unit
            dcx, dcy = rand(n) * S, rand(n) * S
            dmask = _shape_masks(
                (X - dcx.view(n, 1, 1)) / dr.view(n, 1, 1), (Y - dcy.view(n, 1, 1)) / dr.view(n, 1, 1), d.shape
            ) & (count > k).view(n, 1, 1)
            dmarks = _pattern_masks(X, Y, d.pattern, period) & dmask
            dcol = palette[d.colour] * (0.8 + 0.2 * rand(n, 1))
            _paint(img, dmask, dcol)
            _paint(img, dmarks, dcol * 0.35)

    _paint(img, inside, colour)
    _paint(img, marks, shade)
    occl = has("bars")
    if occl.any():  # two grey bars across the object, hiding part of its shape and pattern
        for _ in range(2):
            ang = rand(n) * math.pi
            off = (rand(n) - 0.5) * r.flatten() * 1.2
            width = (2.5 + 2.0 * rand(n)) * unit
            dist = (dx * torch.cos(ang).view(n, 1, 1) + dy * torch.sin(ang).view(n, 1, 1)) - off.view(n, 1, 1)
            bar = (dist.abs() <= width.view(n, 1, 1) / 2) & occl.view(n, 1, 1)
            grey = (0.35 + 0.3 * rand(n, 1)).expand(n, 3)
            _paint(img, bar, grey)
    img = F.avg_pool2d(img, ss)  # [N, 3, H, W]

    blur = has("blur")
    if blur.any():
        k = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0])
        k = (k[:, None] * k[None, :]) / 256.0
        blurred = F.conv2d(F.pad(img, (2, 2, 2, 2), mode="replicate"), k.expand(3, 1, 5, 5).contiguous(), groups=3)
        img = torch.where(blur.view(n, 1, 1, 1), blurred, img)
    tint, glow, warm = has("tint"), has("glow"), has("warm")
    lit = tint | glow | warm
    if lit.any():  # warm light: blue and green channels dimmed, a yellow-brown veil
        # "glow" is 0.7 of the cast of "tint", "warm" 0.4
        strength = torch.where(tint, 1.0, torch.where(glow, 0.7, 0.4)).view(n, 1)
        gain = 1 - strength * torch.tensor([0.0, 0.14, 0.34]).view(1, 3)
        gain = gain * (0.9 + 0.2 * rand(n, 1))
        veil = strength * torch.tensor([0.10, 0.06, 0.0]).view(1, 3) * rand(n, 1)
        tinted = img * gain.view(n, 3, 1, 1) + veil.view(n, 3, 1, 1)
        img = torch.where(lit.view(n, 1, 1, 1), tinted, img)
    fade = has("fade")
    if fade.any():  # washed out: contrast and saturation cut, brighter
        grey = img.mean(1, keepdim=True)
        washed = 0.7 * img + 0.3 * grey
        level = (0.5 + 0.1 * rand(n)).view(n, 1, 1, 1)
        faded = level + (washed - 0.45) * (0.55 + 0.1 * rand(n)).view(n, 1, 1, 1)
        img = torch.where(fade.view(n, 1, 1, 1), faded, img)
    sigma = torch.tensor([styles[d][1] for d in domains])
    noise = torch.randn(img.shape, generator=g) * sigma.view(n, 1, 1, 1)
    img = (img + noise).clamp(0, 1)
    return (img * 255).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def _paint(img: torch.Tensor, mask: torch.Tensor, colour: torch.Tensor) -> None:
    """In place: img[n, :, mask[n]] = colour[n]."""
    m = mask.unsqueeze(1).to(img.dtype)
    img.mul_(1 - m).add_(m * colour.view(-1, 3, 1, 1))


def shaded_colours(hue_shift: float) -> torch.Tensor:
    """RGB (0-255, float) of every colour value turned on the hue circle by `hue_shift` degrees,
    even-indexed values one way and odd-indexed ones the other (lightness and saturation kept):
    a dataset that shows each colour in a shade of its own, as a benchmark's photos show a
    class its own way. No one turn serves every value, so what a model learns of the base
    colours' shades does not tell it the novel colours' (docs/toy-world.md, World version 7)."""
    out = []
    for k, rgb in enumerate(COLOURS.values()):
        h, lightness, saturation = colorsys.rgb_to_hls(*(c / 255 for c in rgb))
        h = (h + (hue_shift if k % 2 == 0 else -hue_shift) / 360.0) % 1.0
        out.append([round(255 * c) for c in colorsys.hls_to_rgb(h, lightness, saturation)])
    return torch.tensor(out, dtype=torch.float32)


def stretch_factors(stretch: float) -> torch.Tensor:
    """[len(SHAPES)] width factor of each shape value: a dataset that draws each shape in a
    proportion of its own, even-indexed values widened by sqrt(1 + stretch) and heightened by
    its inverse, odd-indexed ones the other way (area kept): the shape counterpart of
    `shaded_colours`, for a family without colour (docs/toy-world.md, World version 7)."""
    f = math.sqrt(1.0 + stretch)
    return torch.tensor([f if k % 2 == 0 else 1.0 / f for k in range(len(SHAPES))], dtype=torch.float32)


# -- the toy datasets' class definitions (pure data; data/toy/datasets.py registers them) --
@dataclass(frozen=True)
class ToyClass:
    """A class: the attributes that define it (others are nuisances drawn at random)."""

    name: str
    fixed: tuple[tuple[str, int], ...]  # (attribute, index) pairs

    def attr(self, attribute: str) -> int | None:
        return dict(self.fixed).get(attribute)


@dataclass(frozen=True)
class ToySpec:
    name: str
    classes: tuple[ToyClass, ...]
    novel_from: int  # classes[novel_from:] are the novel half, named with words of their own (== ceil(C/2) or C)
    domains: tuple[str, ...]  # one domain: plain dataset; several: feature shift
    train_per_class: int  # per domain
    test_per_class: int  # per domain
    protocol: str
    description: str
    synonyms: tuple[str, ...] = ()  # attributes the class names give by their rarer word
    object_size: int | None = None  # every object this size (a dataset of close-ups), else drawn per image
    world: int = 6  # the world version it belongs to (its CLIP: `world_pretrained`)
    hue_shift: float = 0.0  # version 7: each colour shown in a shade of its own (`shaded_colours`); 0: as pretraining
    shape_stretch: float = (
        0.0  # version 7: each shape in a proportion of its own (`stretch_factors`); 0: as pretraining
    )

    @property
    def colours(self) -> torch.Tensor | None:
        """The RGB of each colour value as the dataset shows it (`render`'s `colours`), or None: `COLOURS`."""
        return shaded_colours(self.hue_shift) if self.hue_shift else None

    @property
    def class_names(self) -> list[str]:
        return [c.name for c in self.classes]


# Each vocabulary in two halves: base classes are named with words of the first half only,
# novel classes with words of the second (a real dataset's novel classes have names of their
# own, so a context learned on base names cannot lean on shared words). Pretraining sees
# every combination, so the toy CLIP knows base and novel classes alike, as web pretraining
# knows a benchmark's novel classes as well as its base ones. The split of each vocabulary is
# the one whose zero-shot Base and Novel are closest on the shipped CLIP (results/toy/
# style_search.md, sections 2 and 8).
HALVES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "colour": ((0, 1, 6, 7), (2, 3, 4, 5)),  # red green pink cyan | blue yellow purple orange
    "pattern": ((0, 2, 4, 6), (1, 3, 5, 7)),  # plain dotted diagonal wavy | striped checkered gridded concentric
    "shape": ((0, 1, 2, 3), (4, 5, 6, 7)),  # circle square triangle diamond | cross star ring heart
}


def _pair_classes(first: str, second: str, half: int, halves=None) -> list[ToyClass]:
    """Every (first, second) combination within one half of both vocabularies, named in
    English ('red striped object', 'red circle', 'striped circle')."""
    halves = HALVES if halves is None else halves
    out = []
    for i in halves[first][half]:
        for j in halves[second][half]:
            fixed = ((first, i), (second, j))
            out.append(ToyClass(object_name(**dict(fixed)), fixed))
    return out


def named_with(spec: ToySpec, synonyms) -> ToySpec:
    """`spec` with its classes named by the rarer word of every attribute in `synonyms`
    ('crimson striped object' for colour): a calibration search's candidate naming. The images
    do not change; pretraining saw every synonym, some rarely (`SYNONYM_RATE`)."""
    unknown = sorted(set(synonyms) - set(ATTRIBUTES))
    if unknown:
        raise ValueError(f"synonyms {unknown}: expected attributes among {', '.join(ATTRIBUTES)}")
    wanted = set(synonyms)
    chosen = tuple(a for a in ATTRIBUTES if a in wanted)
    classes = tuple(ToyClass(object_name(**dict(c.fixed), synonyms=chosen), c.fixed) for c in spec.classes)
    return dataclasses.replace(spec, classes=classes, synonyms=chosen)


def split_classes(first: str, second: str, halves=None) -> tuple[list[ToyClass], list[ToyClass]]:
    """(base, novel): 16 classes named from the first halves, 16 from the second halves
    (of `HALVES`, or of the `halves` given)."""
    return _pair_classes(first, second, 0, halves), _pair_classes(first, second, 1, halves)


def class_words(classes) -> set[str]:
    """The attribute words that name `classes` (the filler 'object' aside)."""
    return {w for c in classes for w in c.name.split() if w != "object"}


TOY_DOMAIN = "pale"  # toy: washed out (results/toy/style_search.md, section 9)
DEFAULT_DOMAIN = "lamplit"  # toy_shapes, toy10: warm light on a crowd of distractors
SHAPES_DOMAIN = "lamplit"
SHIFT_DOMAINS = ("dusk", "tinted", "crowded", "obstructed")  # toy_domains, leave one out


def toy_specs() -> dict[str, ToySpec]:
    """Every toy dataset, by name. Class order: base then novel (the protocol's first half).

    Every style here is a downstream style the toy CLIP never saw in pretraining
    (`results/toy/calibration.md` measures what that leaves to adaptation)."""
    cp_base, cp_novel = split_classes("colour", "pattern")
    cs_base, cs_novel = split_classes("colour", "shape")
    ps_base, ps_novel = split_classes("pattern", "shape")
    ten = cp_base[::2] + cp_novel[::8]  # 10 colour-pattern classes for the label/feature-shift protocols

    def base2novel(name, base, novel, domain, what, object_size=None):
        return ToySpec(
            name,
            tuple(base + novel),
            len(base),
            (domain,),
            32,
            30,
            "base2novel",
            f"{what} ({len(base)} base + {len(novel)} novel classes, named with disjoint words), {domain}"
            + (", close-ups" if object_size is not None else ""),
            object_size=object_size,
        )

    return {
        # close-ups: pattern is what names the class, and a small object shows too little of it
        "toy": base2novel("toy", cp_base, cp_novel, TOY_DOMAIN, "colour x pattern", object_size=1),
        "toy_shapes": base2novel("toy_shapes", cs_base, cs_novel, SHAPES_DOMAIN, "colour x shape"),
        "toy_patterns": base2novel("toy_patterns", ps_base, ps_novel, "cluttered", "pattern x shape"),
        "toy_domains": ToySpec(
            "toy_domains",
            tuple(ten),
            len(ten),
            SHIFT_DOMAINS,
            40,
            20,
            "domains",
            "10 colour-pattern classes in 4 downstream rendering styles (feature shift)",
        ),
        "toy10": ToySpec(
            "toy10",
            tuple(ten),
            len(ten),
            (DEFAULT_DOMAIN,),
            300,
            60,
            "dirichlet",
            "10 colour-pattern classes, many images each (Dirichlet label shift), lamplit",
        ),
    }


def sample_class_attrs(spec: ToySpec, labels: torch.Tensor, g: torch.Generator) -> Attrs:
    """Attributes for images of the given class labels: class attributes fixed, the rest random."""
    free = random_attrs(len(labels), g)
    cols = {}
    for attribute in ATTRIBUTES:
        table = torch.tensor([-1 if c.attr(attribute) is None else c.attr(attribute) for c in spec.classes])
        fixed = table[labels]
        cols[attribute] = torch.where(fixed >= 0, fixed, free.get(attribute))
    if spec.object_size is not None:
        cols["size"] = torch.full_like(cols["size"], spec.object_size)
    return Attrs(**cols)


# -- world version 7 (opt-in: datasets toy7*, CLIP `fedbench-toy7`; docs/toy-world.md) ----
# Version 6's zero-shot gap came from one unseen style shared by every class, which any
# method that adapts the image tower on base classes undid for novel classes too. Version 7's
# CLIP sees every downstream style (`V7_RARE_DOMAINS`, one image in ten), and its datasets'
# gap comes from the classes: large objects in clutter, each dataset showing its classes its
# own way (its own shades of its colours, its own proportions of its shapes), with halves
# chosen by zero-shot balance on the version 7 CLIP (`V7_DATASET_HALVES`).
# (first attribute, second attribute, style, object size or None) of each version 7 dataset
V7_DATASETS: dict[str, tuple[str, str, str, int | None]] = {
    # large objects the pixels show clearly; its gap comes from its own shades (`V7_HUE_SHIFT`)
    "toy7": ("colour", "pattern", "cluttered", 1),
    "toy7_shapes": ("colour", "shape", "cluttered", 1),
    "toy7_patterns": ("pattern", "shape", "cluttered", 1),
}
# Datasets that show each colour in a shade of their own (`shaded_colours`, degrees). toy7's
# rendering was crowded small objects until the per-family calibration showed that no family
# could gain on Base there (every family within +2.1 of zero-shot, a linear probe on frozen
# features below zero-shot: the small objects among distractors, not the model's alignment,
# capped accuracy). The turn is chosen by zero-shot alone, on the version 7 CLIP of the recipe
# that learns shape: of 0, 15, 20, 24 and 30 degrees, mean zero-shot over the halvings 92.3, 81.9,
# 72.2, 66.3, 50.2; 20 is nearer 69.3 by 0.1 but its most balanced halves (each half holding
# both turns) sit 78.3 / 63.7, outside the zero-shot gap target; 24's sit 72.3 / 72.5.
V7_HUE_SHIFT: dict[str, float] = {"toy7": 24.0, "toy7_shapes": 15.0}
# Datasets that draw each shape in a proportion of its own (`stretch_factors`): the family
# without colour (pattern x shape) gets its gap from its own shapes, as the colour families do
# from their own shades; chosen by zero-shot alone, as the hue turns are.
V7_SHAPE_STRETCH: dict[str, float] = {"toy7_patterns": 0.3}
V7_DATASET_HALVES: dict[str, dict[str, tuple[tuple[int, ...], tuple[int, ...]]]] = {
    # The rendering of each family and its halves, chosen on the version 7 CLIP by zero-shot
    # alone (scripts/toy7_halves.py, 30 probe images of each of the 64 combinations; nothing
    # trained): the candidate rendering whose mean zero-shot over all 35 x 35 halvings is the
    # nearest to real CLIP's 69.3 and whose most balanced halves meet the zero-shot targets,
    # then those halves (docs/toy-world.md, World version 7).
    "toy7": {"colour": ((0, 1, 3, 6), (2, 4, 5, 7)), "pattern": ((0, 2, 5, 7), (1, 3, 4, 6))},  # 72.3 / 72.5
    "toy7_shapes": {"colour": ((0, 1, 2, 5), (3, 4, 6, 7)), "shape": ((0, 3, 5, 6), (1, 2, 4, 7))},  # 67.5 / 67.9
    "toy7_patterns": {"pattern": ((0, 1, 2, 6), (3, 4, 5, 7)), "shape": ((0, 1, 2, 7), (3, 4, 5, 6))},  # 64.8 / 64.8
}


def toy7_specs() -> dict[str, ToySpec]:
    """The base-to-novel datasets of world version 7, by name (base classes then novel)."""
    out = {}
    for name, (first, second, domain, size) in V7_DATASETS.items():
        base, novel = split_classes(first, second, V7_DATASET_HALVES[name])
        what = f"{first} x {second} ({len(base)} base + {len(novel)} novel classes, named with disjoint words)"
        size_text = "" if size is None else f", {SIZES[size]} objects"
        if V7_HUE_SHIFT.get(name):
            size_text += f", its own shades of every colour (hue turned {V7_HUE_SHIFT[name]:g} degrees)"
        if V7_SHAPE_STRETCH.get(name):
            size_text += f", its own proportions of every shape (stretched {V7_SHAPE_STRETCH[name]:g})"
        out[name] = ToySpec(
            name,
            tuple(base + novel),
            len(base),
            (domain,),
            32,
            30,
            "base2novel",
            f"{what}, {domain}{size_text} (world version 7)",
            object_size=size,
            world=7,
            hue_shift=V7_HUE_SHIFT.get(name, 0.0),
            shape_stretch=V7_SHAPE_STRETCH.get(name, 0.0),
        )
    return out


def all_toy_specs() -> dict[str, ToySpec]:
    """Every toy dataset of every world version, by name (version 6's first)."""
    return {**toy_specs(), **toy7_specs()}


WORLD_PRETRAINED = {6: "fedbench-toy", 7: "fedbench-toy7"}  # each world version's CLIP
# The world version each toy CLIP was pretrained on: the test suite's small model is a
# shorter run of version 6's recipe (`pretrain.TEST_RECIPE`); version 7 has none.
PRETRAINED_WORLD = {"fedbench-toy": 6, "fedbench-toy-test": 6, "fedbench-toy7": 7}


def pretrained_mismatch(dataset: str, pretrained: str) -> str | None:
    """Why toy CLIP `pretrained` cannot be run on toy dataset `dataset`, or None when it can.

    A toy CLIP of another world version was pretrained on other captions and styles (version
    6's never saw version 7's styles), so its numbers on the dataset would measure that
    mismatch, not a method. Weights that are not a toy CLIP (a path, 'none', a real tag) and
    datasets that are not toy datasets are not this check's business."""
    spec = all_toy_specs().get(dataset)
    if spec is None or pretrained not in PRETRAINED_WORLD or PRETRAINED_WORLD[pretrained] == spec.world:
        return None
    own = WORLD_PRETRAINED[spec.world]
    return (
        f"pretrained = {pretrained!r} is the toy CLIP of world version {PRETRAINED_WORLD[pretrained]}, "
        f"but dataset {dataset!r} belongs to world version {spec.world}, whose CLIP is {own!r}: a CLIP "
        f"pretrained on another world's styles and captions measures the mismatch, not the method. "
        f"Pass --pretrained {own} (YAML: `pretrained: {own}`; a preset: --set pretrained={own}), or a "
        f"dataset of world version {PRETRAINED_WORLD[pretrained]} "
        f"({', '.join(n for n, s in all_toy_specs().items() if s.world == PRETRAINED_WORLD[pretrained])})."
    )


def measured_world(command: str, datasets, test: bool) -> tuple[int, str]:
    """The world version of `datasets` (toy datasets of one version; none: the current) and the
    pretrained toy CLIP a report measures them on: each version's own, or the test suite's small
    one (`test`, current version only). A mix or an impossible `test` exits naming `command`."""
    specs = all_toy_specs()
    versions = {specs[n].world for n in datasets or () if n in specs} or {WORLD_VERSION}
    if len(versions) > 1:
        raise SystemExit(f"{command}: --datasets mixes world versions {sorted(versions)}; calibrate one at a time")
    (version,) = versions
    if test and version != WORLD_VERSION:
        raise SystemExit(f"{command}: --test has no small model of world version {version}; leave --test out")
    return version, "fedbench-toy-test" if test else WORLD_PRETRAINED[version]


def world_pretrained(spec: ToySpec) -> str:
    """The pretrained toy CLIP that belongs to `spec`'s world version."""
    return WORLD_PRETRAINED[spec.world]
