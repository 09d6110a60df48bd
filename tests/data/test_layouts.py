"""Every place a reference code base leaves a dataset is found as it is (issue 35, item 1).

Fixtures are built as pFedMMA, FedOTP, DomainBed and FedMVP leave their folders
(`fake_layouts.DOMAINBED_RELEASE`, `FEDMVP_FOLDERS`, `CIFAR_FEDOTP`, each fact with its source).
"""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import TINY
from fake_layouts import DOMAINBED_RELEASE, FEDMVP_FOLDERS, make_fake_dataset

from data.base import DatasetError
from data.catalog import dataset_info, load_dataset
from data.transforms import clip_transforms

TRANSFORMS = clip_transforms(32, augment=False)


def _status(name, root):
    from benchmark.cli.commands.datasets import dataset_status

    return dataset_status(name, root)


@pytest.mark.parametrize(
    "name, layout, folder",
    [
        ("cifar10", "pFedMMA", "cifar-10/cifar-10-batches-py"),
        ("cifar100", "pFedMMA", "cifar-100/cifar-100-python"),
        ("sun397", "pFedMMA", "SUN397"),
        *((name, "DomainBed", DOMAINBED_RELEASE[name][0]) for name in DOMAINBED_RELEASE),
        *((name, "FedMVP", FEDMVP_FOLDERS[name][0]) for name in FEDMVP_FOLDERS),
    ],
)
def test_a_reference_code_base_layout_is_found_and_read(tmp_path, name, layout, folder):
    fake = make_fake_dataset(name, tmp_path, layout=layout)
    assert fake.folder == tmp_path / folder
    assert dataset_info(name).path(tmp_path) == fake.folder
    row = _status(name, tmp_path)
    assert row["status"] == "found", row
    assert (row["train"], row["test"]) == (fake.num_train, fake.num_test)
    assert f"{folder} (" in row["folder / note"]  # says which placement it found, and whose layout
    splits = load_dataset(name, tmp_path, TRANSFORMS)
    assert splits.class_names == fake.class_names


def test_fedmvp_split_files_are_read_with_their_own_relative_paths(tmp_path):
    fake = make_fake_dataset("pacs", tmp_path, layout="FedMVP")
    split = json.loads((fake.folder / "art_painting" / "split_pacs_artpainting.json").read_text())
    assert split["train"][0][0] == "dog/pic_001.jpg"  # relative to pacs/art_painting, as FedMVP reads it
    splits = load_dataset("pacs", tmp_path, TRANSFORMS)
    assert fake.folder / "art_painting" / "dog" / "pic_001.jpg" in splits.train.paths
    assert not list(fake.folder.glob("split_*.json"))  # the suite made no split of its own
    assert any("FedMVP's split files" in note for note in splits.extra["notes"])
    # VLCS: the split file beside <D>/full/, paths relative to <D>/full/
    fake = make_fake_dataset("vlcs", tmp_path, layout="FedMVP")
    assert (fake.folder / "CALTECH" / "split_VLCS_CALTECH.json").is_file()
    assert (
        fake.folder / "CALTECH" / "full" / "bird" / "pic_001.jpg"
        in load_dataset("vlcs", tmp_path, TRANSFORMS).train.paths
    )


def test_a_domain_with_split_files_in_both_places_is_an_error_naming_both(tmp_path):
    fake = make_fake_dataset("pacs", tmp_path, layout="FedMVP")
    shutil.copy(fake.folder / "sketch" / "split_pacs_sketch.json", fake.folder / "split_pacs_sketch.json")
    with pytest.raises(DatasetError) as error:
        load_dataset("pacs", tmp_path, TRANSFORMS)
    message = str(error.value)
    assert "sketch/split_pacs_sketch.json" in message and str(fake.folder / "split_pacs_sketch.json") in message


@pytest.mark.parametrize(
    "name, first, second",
    [("sun397", None, "pFedMMA"), ("cifar10", None, "pFedMMA"), ("pacs", "FedMVP", "DomainBed")],
)
def test_two_layouts_at_once_is_an_error_naming_both(fedbench, tmp_path, name, first, second):
    one = make_fake_dataset(name, tmp_path / "a", layout=first)
    other = make_fake_dataset(name, tmp_path / "b", layout=second)
    target = tmp_path / "a" / other.folder.relative_to(tmp_path / "b")
    target.parent.mkdir(parents=True, exist_ok=True)
    other.folder.rename(target)
    if target.samefile(one.folder):  # a case-insensitive file system: one folder, two names
        pytest.skip("case-insensitive file system: the two names are one folder")
    with pytest.raises(DatasetError) as error:
        dataset_info(name).path(tmp_path / "a")
    assert str(one.folder) in str(error.value) and str(target) in str(error.value)
    assert _status(name, tmp_path / "a")["status"] == "incomplete"
    done = fedbench(
        "run", "--method", "zeroshot", "--dataset", name, "--backbone", TINY, "--pretrained", "none",
        "--data-root", tmp_path / "a", "--out", tmp_path / "runs", "--wandb", "disabled",
    )  # fmt: skip
    assert done.returncode == 2 and "two places at once" in done.stderr and "Traceback" not in done.stderr


def test_one_folder_under_two_names_is_one_layout(tmp_path):
    """`sun397` and `SUN397` on a case-insensitive file system are one folder (a symlink stands in)."""
    fake = make_fake_dataset("sun397", tmp_path)
    (tmp_path / "SUN397").symlink_to(fake.folder, target_is_directory=True)
    assert dataset_info("sun397").path(tmp_path) == fake.folder


def test_domainnet_duplicates_are_left_out_of_every_split(tmp_path):
    fake = make_fake_dataset("domainnet_full", tmp_path, num_classes=2)
    listed = fake.folder / "clipart" / "airplane" / "pic_004.jpg"
    twin = fake.folder / "clipart" / "aircraft_carrier" / "pic_004.jpg"
    assert listed.is_file() and twin.is_file()
    (fake.folder / "domain_net_duplicates.txt").write_text("clipart/airplane/pic_004.jpg\n")
    # A split (FedMVP's or the suite's, made before the list) with the duplicate in train and its twin in test:
    split = {
        "train": [["clipart/airplane/pic_004.jpg", 1, "airplane"]],
        "val": [],
        "test": [["clipart/aircraft_carrier/pic_004.jpg", 0, "aircraft_carrier"]],
    }
    (fake.folder / "split_domainnet_clipart.json").write_text(json.dumps(split))
    splits = load_dataset("domainnet_full", tmp_path, TRANSFORMS)
    for part in (splits.train, splits.test, splits.val):
        assert listed not in (part.paths if part is not None else [])
    assert twin in splits.test.paths
    assert any("domain_net_duplicates.txt left out" in note for note in splits.extra["notes"])
    # The splits the suite makes leave it out from the start.
    for made in fake.folder.glob("split_*.json"):
        made.unlink()
    splits = load_dataset("domainnet_full", tmp_path, TRANSFORMS)
    assert listed not in [*splits.train.paths, *splits.test.paths, *splits.val.paths]
    assert "clipart/airplane/pic_004.jpg" not in (fake.folder / "split_domainnet_clipart.json").read_text()


# DomainNet without the duplicate list (DomainBed's download.py keeps none) is found as it is:
# tests/data/test_domainnet_duplicates.py (issue 50, item 9; it used to be an error).


@pytest.mark.parametrize(
    "name, layout, flags",
    [
        ("cifar10", "pFedMMA", ("--protocol", "dirichlet")),
        ("sun397", "pFedMMA", ()),
        ("pacs", "FedMVP", ("--protocol", "domains", "--clients", "4")),
    ],
)
def test_fedbench_run_reads_a_reference_layout(fedbench, tmp_path, name, layout, flags):
    make_fake_dataset(name, tmp_path / "data", layout=layout)
    done = fedbench(
        "run", "--method", "zeroshot", "--dataset", name, "--backbone", TINY, "--pretrained", "none",
        "--data-root", tmp_path / "data", "--out", tmp_path / "runs", "--wandb", "disabled",
        *(flags if "--clients" in flags else (*flags, "--clients", "2")),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(next((tmp_path / "runs").rglob("summary.json")).read_text())
    assert summary["dataset"] == name and summary["metrics"]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("caltech101", ["face", "leopard", "motorbike", "accordion", "airplane", "anchor"]),
        ("oxford_pets", ["abyssinian", "american bulldog"]),
        (
            "sun397",
            ["abbey", "airplane cabin", "airport terminal", "alley", "amphitheater", "outdoor apartment building"],
        ),
    ],
)
def test_class_names_are_the_split_files_not_the_folders(tmp_path, name, expected):
    """CoOp's split files rename classes (fake_layouts._COOP_CLASSES names the source of each form)."""
    make_fake_dataset(name, tmp_path, num_classes=len(expected))
    assert load_dataset(name, tmp_path, TRANSFORMS).class_names == expected


def test_download_steps_follow_each_reference(tmp_path):
    """FedBN's 10-class DomainNet: its README's archives (Hugging Face since 2025-11, all six
    domains from multi-source/); the full DomainNet: DomainBed's (clipart and painting from
    groundtruth/) and its duplicate list; TerraIncognita: DomainBed's 2024 sources."""
    from data.download import manual_steps

    fedbn = " ".join(manual_steps("domainnet", tmp_path))
    assert "huggingface.co/datasets/Jemary/FedBN_Dataset" in fedbn and "groundtruth" not in fedbn
    full = " ".join(manual_steps("domainnet_full", tmp_path))
    assert "multi-source/groundtruth/clipart.zip" in full and "domain_net_duplicates.txt" in full
    terra = " ".join(manual_steps("terra_incognita", tmp_path))
    assert "public-datasets-lila/caltechcameratraps/eccv_18_annotations.tar.gz" in terra
