"""Listing images in class folders, for the layouts that have no split list of their own."""

from __future__ import annotations

import os
from pathlib import Path

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp"})


def image_files(folder: Path) -> list[Path]:
    """The image files directly in `folder`, sorted by name (hidden files and other suffixes
    are skipped), so a listing never depends on the file system's order."""
    with os.scandir(folder) as entries:
        names = [
            e.name
            for e in entries
            if not e.name.startswith(".") and os.path.splitext(e.name)[1].lower() in IMAGE_SUFFIXES and e.is_file()
        ]
    return [folder / name for name in sorted(names)]


def subfolders(folder: Path) -> list[str]:
    """Names of the non-hidden subfolders of `folder`, sorted."""
    with os.scandir(folder) as entries:
        return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))
