"""DomainNet as DomainBed leaves it (issue 50, item 9): `domain_net/` holds the six domains'
class folders and no duplicate list (download.py deleted the listed files). It is found as it
is; exact duplicates still on disk are found by content and left out of every split, and the
list is honoured when it is there."""

from __future__ import annotations

import shutil

import pytest
from fake_layouts import make_fake_dataset

from data.catalog import load_dataset
from data.transforms import clip_transforms

TRANSFORMS = clip_transforms(32, augment=False)
pytestmark = pytest.mark.filterwarnings("ignore:domainnet_full. no published split")  # the split it writes


def _paths(splits) -> list:
    return [p for part in (splits.train, splits.val, splits.test) if part is not None for p in part.paths]


def _status(name, root):
    from benchmark.cli.commands.datasets import dataset_status

    return dataset_status(name, root)


def test_domainbeds_domain_net_without_the_list_is_found(tmp_path):
    fake = make_fake_dataset("domainnet_full", tmp_path, num_classes=2, layout="DomainBed")
    (fake.folder / "domain_net_duplicates.txt").unlink()  # download.py keeps no list
    status = _status("domainnet_full", tmp_path)
    assert status["status"] == "found" and status["domains"] == 6, status
    splits = load_dataset("domainnet_full", tmp_path, TRANSFORMS)
    # The fake's images of one (domain, class) are equal bytes (one colour): all but the first go.
    paths = _paths(splits)
    assert len(paths) == len(set(paths)) == 6 * 2  # one image per (domain, class) kept
    assert all(p.name == "pic_001.jpg" for p in paths)


def test_a_copied_image_is_left_out_and_distinct_images_of_one_size_are_kept(tmp_path):
    fake = make_fake_dataset("domainnet_full", tmp_path, num_classes=2, layout="DomainBed")
    (fake.folder / "domain_net_duplicates.txt").unlink()
    classes = sorted(p.name for p in (fake.folder / "clipart").iterdir())
    # Keep one image per (domain, class) so that every other image is distinct, then copy one.
    for image in fake.folder.rglob("pic_*.jpg"):
        if image.name != "pic_001.jpg":
            image.unlink()
    original = fake.folder / "clipart" / classes[0] / "pic_001.jpg"
    copy = fake.folder / "real" / classes[1] / "pic_900.jpg"
    shutil.copyfile(original, copy)
    splits = load_dataset("domainnet_full", tmp_path, TRANSFORMS)
    paths = set(_paths(splits))
    assert copy not in paths and original in paths
    assert len(paths) == 12  # the 12 distinct images, several of one file size, all kept
    assert len({p.stat().st_size for p in paths}) < len(paths)


def test_the_list_is_honoured_when_it_is_there(tmp_path):
    fake = make_fake_dataset("domainnet_full", tmp_path, num_classes=2, layout="DomainBed")
    listed = sorted(fake.folder.glob("clipart/*/pic_002.jpg"))[0]
    (fake.folder / "domain_net_duplicates.txt").write_text(listed.relative_to(fake.folder).as_posix() + "\n")
    splits = load_dataset("domainnet_full", tmp_path, TRANSFORMS)
    paths = set(_paths(splits))
    assert listed not in paths and len(paths) == 6 * 2 * 10 - 1  # only the listed image left out
