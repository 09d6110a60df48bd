"""Where a backbone's weights come from, checked before anything is built, and the open_clip
model built with them.

`--pretrained` names an open_clip tag (downloaded through the Hugging Face cache), a local
checkpoint file, or a provider the suite registers (`register_pretrained`: the toy world's
small CLIP). `check_backbone` and `check_weights_reachable` say before a run starts what
cannot work or is not on this machine yet; `build_clip` builds the model and turns open_clip's
many failures into one `BackboneError` that says what to do. `benchmark.backbone` wraps the
model into the frozen `Backbone` the methods use.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import urllib.parse
import warnings
from pathlib import Path
from typing import Callable

import open_clip
import torch

from benchmark.errors import SetupWarning, UserError

CONFIG_DIR = Path(__file__).parent / "model_configs"
open_clip.add_model_config(CONFIG_DIR)

# Named weight providers beyond open_clip's tags: name -> function returning a local file.
PRETRAINED_PROVIDERS: dict[str, Callable[[], Path]] = {}
# name -> function returning a string that changes whenever the provider's weights do,
# computed without building them (the cell identity, `benchmark/runs/identity.py`).
PRETRAINED_IDENTITIES: dict[str, Callable[[], str]] = {}
# name -> function returning the checkpoint path if it is already built, else None.
PRETRAINED_CACHED: dict[str, Callable[[], "Path | None"]] = {}
# name -> the backbone its weights are for, where the provider said (error messages list them).
PRETRAINED_BACKBONES: dict[str, str] = {}


class BackboneError(UserError, RuntimeError):
    """A backbone cannot be built or its weights cannot be loaded. The message says what to do."""


def register_pretrained(
    name: str,
    identity: Callable[[], str] | None = None,
    cached: Callable[[], "Path | None"] | None = None,
    backbone: str | None = None,
) -> Callable[[Callable[[], Path]], Callable[[], Path]]:
    """Register a provider so `--pretrained NAME` resolves to the checkpoint it returns.
    `identity` names the weights without building them; `cached` returns the checkpoint
    when it exists already (so a dry run can say what would be built); `backbone`: the
    backbone they are for (an unknown --pretrained then names them among its weights)."""

    def decorate(provider: Callable[[], Path]) -> Callable[[], Path]:
        PRETRAINED_PROVIDERS[name] = provider
        if backbone is not None:
            PRETRAINED_BACKBONES[name] = backbone
        PRETRAINED_IDENTITIES[name] = identity or (lambda: name)
        if cached is not None:
            PRETRAINED_CACHED[name] = cached
        return provider

    return decorate


def build_clip(name: str, pretrained: str | None, device: str) -> open_clip.CLIP:
    """The open_clip model `name` with weights `pretrained` (None: random weights, seeded, so
    that they are identical run to run) on `device`; any failure is a BackboneError naming
    its cause and the fix."""
    if name not in open_clip.list_models():
        raise BackboneError(_unknown_backbone(name))
    checkpoint = _resolve_checkpoint(name, pretrained)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # random-weight backbones are identical run to run
        try:
            if checkpoint is not None:
                model = open_clip.create_model(name, pretrained=str(checkpoint), device=device)
            elif pretrained is None:
                with _quiet_random_weights_warning():  # random weights are what was asked for
                    model = open_clip.create_model(name, device=device)
            else:
                with _quiet_download_logs():  # what went wrong is in our error, said once
                    model = open_clip.create_model(name, pretrained=pretrained, device=device)
        except Exception as exc:  # open_clip raises many kinds; all mean "could not load"
            raise BackboneError(_load_failure(name, pretrained, checkpoint, exc)) from exc
    return model


def check_backbone(name: str, pretrained: str | Path | None) -> str | None:
    """Check a backbone and its weights without building anything: raises BackboneError for
    what cannot work (unknown model, missing file, unknown tag); returns a note for weights
    that are not on this machine yet (None when they are), so a dry run can report them."""
    if name not in open_clip.list_models():
        raise BackboneError(_unknown_backbone(name))
    key = None if pretrained in (None, "", "none") else str(pretrained)
    if key is None:
        return None
    warn_activation_mismatch(name, key)
    if key in PRETRAINED_PROVIDERS:
        cached = PRETRAINED_CACHED.get(key)
        if cached is not None and cached() is None:
            return f"weights {key!r} are not built yet: the first run pretrains them (minutes), later runs load them"
        return None
    path = _checkpoint_file(name, key)
    if path is not None:
        return None
    if _hub_cached(name, key):
        return None
    return (
        f"weights {key!r} of {name!r} are not in the Hugging Face cache: a run downloads them (needs network), "
        "or pass a local checkpoint with --pretrained /path/to/weights.pt"
    )


_WARNED: set[tuple[str, str]] = set()


def warn_activation_mismatch(name: str, tag: str) -> None:
    """Warn, once per process, when an open_clip tag's weights were trained with another
    activation than model `name` uses: OpenAI's weights (`openai`) need QuickGELU, so
    `ViT-B-16` with them runs, with every activation slightly wrong and no error."""
    if (name, tag) in _WARNED or tag not in open_clip.list_pretrained_tags_by_model(name):
        return
    tag_quick = bool(open_clip.get_pretrained_cfg(name, tag).get("quick_gelu", False))
    model_quick = bool((open_clip.get_model_config(name) or {}).get("quick_gelu", False))
    if tag_quick == model_quick:
        return
    _WARNED.add((name, tag))
    fix = f"{name}-quickgelu" if tag_quick else name.removesuffix("-quickgelu")
    trained, uses = ("QuickGELU", "GELU") if tag_quick else ("GELU", "QuickGELU")
    warnings.warn(
        f"backbone {name!r} with --pretrained {tag}: these weights were trained with {trained}, but {name!r} uses "
        f"{uses}, so the model runs with every activation slightly wrong and its accuracy is off (no error). "
        f"Use --backbone {fix} for the weights as trained.",
        SetupWarning,
        stacklevel=2,
    )


def check_weights_reachable(name: str, pretrained: str | Path | None) -> None:
    """Fail now when an open_clip tag's weights are not on this machine and cannot be
    downloaded: HF_HUB_OFFLINE is set, or the download host does not answer within
    PROBE_SECONDS. Offline, the download itself retries for minutes, prints the Hugging Face
    client's warnings and then fails; this says at once how to pass a file instead."""
    key = None if pretrained in (None, "", "none") else str(pretrained)
    if key is None or key in PRETRAINED_PROVIDERS or _checkpoint_file(name, key) is not None:
        return
    if _hub_cached(name, key):
        return
    cfg = open_clip.get_pretrained_cfg(name, key)
    host = "huggingface.co" if cfg.get("hf_hub") else urllib.parse.urlparse(cfg.get("url", "")).hostname
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    why = "HF_HUB_OFFLINE is set" if offline and cfg.get("hf_hub") else _unreachable(host) if host else None
    if why:
        raise BackboneError(_not_on_this_machine(name, key, why))


PROBE_SECONDS = 5.0


@functools.lru_cache(maxsize=8)
def _unreachable(host: str) -> str | None:
    """Why `host` cannot be reached on port 443 (None when it answers), within PROBE_SECONDS:
    a name lookup without network can take minutes, so it runs in a thread not waited for."""
    import socket
    import threading

    outcome: list[str | None] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, 443), timeout=PROBE_SECONDS):
                outcome.append(None)
        except OSError as exc:
            outcome.append(f"{host} cannot be reached: {exc.strerror or exc.__class__.__name__}")

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(PROBE_SECONDS)
    return outcome[0] if outcome else f"{host} did not answer within {PROBE_SECONDS:g} s"


def _not_on_this_machine(name: str, tag: str, why: str) -> str:
    from huggingface_hub.constants import HF_HUB_CACHE

    return (
        f"weights {tag!r} of {name!r} are not on this machine (not in the Hugging Face cache {HF_HUB_CACHE}, "
        f"nor in {Path.home() / '.cache' / 'clip'}) and cannot be downloaded ({why}). Pass a local open_clip "
        f"checkpoint file instead: --pretrained /path/to/{name}-{tag}.pt (docs/running.md, 'Weights', makes one from "
        "the official weights on a machine with network), or copy a Hugging Face cache that holds them to "
        f"{HF_HUB_CACHE}."
    )


def _hub_cached(name: str, tag: str) -> bool:
    cfg = open_clip.get_pretrained_cfg(name, tag)
    hub = cfg.get("hf_hub", "")
    if hub:
        from huggingface_hub import try_to_load_from_cache

        repo, filename = os.path.split(hub)
        names = [filename] if filename else ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
        if any(isinstance(try_to_load_from_cache(repo, f), str) for f in names):
            return True
    url = cfg.get("url", "")
    return bool(url) and (Path.home() / ".cache" / "clip" / os.path.basename(url)).is_file()


def _unknown_backbone(name: str) -> str:
    return (
        f"unknown backbone {name!r}. open_clip knows e.g. ViT-B-16, ViT-B-32, ViT-L-14 "
        f"(and -quickgelu variants); the suite adds {', '.join(sorted(_suite_configs()))}. "
        "List them all with `python -c 'import open_clip; print(open_clip.list_models())'`."
    )


class _quiet_random_weights_warning(logging.Filter):
    """Drops open_clip's "No pretrained weights loaded ... initialized randomly" warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("No pretrained weights loaded")

    def __enter__(self):
        logging.getLogger().addFilter(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger().removeFilter(self)


class _DroppedLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to download")


@contextlib.contextmanager
def _quiet_download_logs():
    """Drops the Hugging Face client's retry warnings and open_clip's lines about a failed
    download or an activation mismatch while weights load: a failure becomes one BackboneError
    naming the cause, and the mismatch is `warn_activation_mismatch`'s warning."""
    hub, dropped = logging.getLogger("huggingface_hub"), _DroppedLines()
    level = hub.level
    hub.setLevel(logging.ERROR)
    logging.getLogger().addFilter(dropped)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="QuickGELU mismatch")
            yield
    finally:
        logging.getLogger().removeFilter(dropped)
        hub.setLevel(level)


def suite_backbones() -> list[str]:
    """The small CLIP configurations the suite ships (the toy world's, the tests')."""
    return _suite_configs()


def _suite_configs() -> list[str]:
    return [p.stem for p in CONFIG_DIR.glob("*.json")]


def _resolve_checkpoint(name: str, pretrained: str | None) -> Path | None:
    if pretrained is None:
        return None
    if pretrained in PRETRAINED_PROVIDERS:
        return PRETRAINED_PROVIDERS[pretrained]()
    return _checkpoint_file(name, pretrained)


def _checkpoint_file(name: str, pretrained: str) -> Path | None:
    """The local checkpoint `pretrained` names, or None for a valid open_clip tag."""
    path = Path(pretrained).expanduser()
    looks_like_path = path.suffix in {".pt", ".pth", ".bin", ".safetensors", ".ckpt"} or "/" in pretrained
    if looks_like_path:
        if not path.is_file():
            raise BackboneError(
                f"checkpoint file {path} for backbone {name!r} does not exist. Pass --pretrained "
                "with the path of a local open_clip checkpoint (a state_dict saved with torch.save), "
                "or an open_clip tag such as 'openai'."
            )
        return path
    tags = open_clip.list_pretrained_tags_by_model(name)
    if pretrained not in tags:
        raise BackboneError(
            f"backbone {name!r} has no pretrained weights {pretrained!r}. {_weights_of(name, tags)} "
            "Pass one of them, a local checkpoint path, or 'none' for random weights."
        )
    return None


def _weights_of(name: str, tags: list[str]) -> str:
    """The weights `--pretrained` may name for backbone `name`, in words: open_clip's tags
    and the suite's own weights (`register_pretrained`) made for it, or for a backbone
    their provider did not name."""
    own = [n for n in PRETRAINED_PROVIDERS if PRETRAINED_BACKBONES.get(n) == name]
    unsaid = [n for n in PRETRAINED_PROVIDERS if n not in PRETRAINED_BACKBONES]
    words = [f"open_clip's tags for it: {', '.join(tags)}" if tags else "open_clip has no tags for it"]
    if own:
        words.append(f"the suite's weights for it: {', '.join(own)}")
    if unsaid:
        words.append(f"the suite's weights {', '.join(unsaid)} (each for the backbone it was made for)")
    return "; ".join(words) + "."


def _load_failure(name: str, pretrained: str | None, checkpoint: Path | None, exc: Exception) -> str:
    cause = f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if checkpoint is not None:
        return (
            f"could not load checkpoint {checkpoint} into backbone {name!r} ({cause}). The file must be "
            f"a state_dict of the open_clip model {name!r}; OpenAI weights need the '-quickgelu' config "
            f"(e.g. ViT-B-16-quickgelu), or the activations are silently wrong."
        )
    cache = Path.home() / ".cache" / "huggingface" / "hub"
    return (
        f"could not load the pretrained weights {pretrained!r} for backbone {name!r} ({cause}). "
        f"open_clip looks in the Hugging Face cache ({cache}) and otherwise downloads them, which needs "
        "network access. Offline, download the checkpoint on a connected machine "
        f"(open_clip.create_model('{name}', pretrained='{pretrained}') caches it) and copy the cache, "
        "or pass the checkpoint file itself: --pretrained /path/to/weights.pt."
    )
