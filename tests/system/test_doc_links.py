"""Every relative link in README.md and docs/ points at a file that exists and, with an
anchor, at a heading of that file (`mkdocs build --strict` checks docs/ only, and not
README's links; a README link to a missing `#reliability` section went unnoticed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(path: Path) -> str:
    """The page without its fenced code blocks and inline code (links there are examples)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path: Path) -> set[str]:
    """The ids of a page's headings, as MkDocs and GitHub make them: lower case, punctuation
    dropped, spaces as hyphens."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*#*$", _prose(path), flags=re.M)
    return {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", h.lower())).strip("-") for h in headings}


def test_the_slug_rule_on_headings_of_this_repository():
    assert "a-cells-identity" in anchors(ROOT / "docs" / "run-folders.md")  # "## A cell's identity"
    assert "quickstart" in anchors(ROOT / "README.md")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_and_anchors_exist(page):
    broken = []
    for target in LINK.findall(_prose(page)):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading with the id {anchor!r} in {linked.relative_to(ROOT)}")
    assert broken == [], f"{page.relative_to(ROOT)} has broken links: {broken}"
