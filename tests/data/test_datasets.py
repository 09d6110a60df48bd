"""Every on-disk layout, exercised for real on tiny fake instances (tests/fake_layouts.py)."""

from __future__ import annotations

import pickle
import shutil

import pytest
import torch
from fake_layouts import DOMAINBED, FAKE_NAMES, IMAGENET_NAMES, decode_marker, make_fake_dataset

from data.base import DatasetError
from data.catalog import dataset_info, load_dataset
from data.fewshot import few_shot_subset
from data.transforms import clip_transforms

TRANSFORMS = clip_transforms(32, augment=False)
# DomainBed loads make their split files and say so; the tests that check the warning catch it.
pytestmark = pytest.mark.filterwarnings("ignore:.*no published split:UserWarning")
PROTOCOL = {
    "cifar10": "dirichlet",
    "cifar100": "dirichlet",
    "domainnet": "domains",
    "office_caltech10": "domains",
    **{name: "imagenet" for name in IMAGENET_NAMES},
    **{name: "domains" for name in DOMAINBED},
}
FILE_DATASETS = [n for n in FAKE_NAMES if not n.startswith("cifar")]


@pytest.mark.parametrize("name", FAKE_NAMES)
def test_layout_loads_with_true_labels(tmp_path, name):
    fake = make_fake_dataset(name, tmp_path, num_classes=3, per_class=4)
    splits = load_dataset(name, tmp_path, TRANSFORMS)
    assert dataset_info(name).protocol == PROTOCOL.get(name, "base2novel")
    assert splits.class_names == fake.class_names and len(splits.class_names) == 3
    assert (len(splits.train), len(splits.test)) == (fake.num_train, fake.num_test)
    assert splits.domain_names == fake.domain_names
    for key, value in fake.extra.items():
        assert splits.extra[key] == value
    test_only = dataset_info(name).test_only
    assert test_only == (fake.num_train == 0)
    for split in (splits.test,) if test_only else (splits.train, splits.test):
        assert sorted(set(split.labels)) == [0, 1, 2]
        for i in range(len(split)):
            image, label = split[i]
            assert image.shape == (3, 32, 32) and image.dtype == torch.float32
            true_class, true_domain = decode_marker(image)
            assert label == true_class, f"{split.name}[{i}] carries label {label}, its image says {true_class}"
            if fake.domain_names:
                assert split.domains[i] == fake.domain_names[true_domain]
            else:
                assert split.domains is None


@pytest.mark.parametrize("name", FAKE_NAMES)
def test_missing_folder_names_folder_and_layout(tmp_path, name):
    with pytest.raises(DatasetError) as err:
        load_dataset(name, tmp_path, TRANSFORMS)
    message = str(err.value)
    assert name in message and str(dataset_info(name).path(tmp_path)) in message
    assert "Expected layout" in message and dataset_info(name).layout in message


@pytest.mark.parametrize("name", FAKE_NAMES)
def test_removed_file_names_dataset_file_and_layout(tmp_path, name):
    fake = make_fake_dataset(name, tmp_path)
    removed = fake.must_exist[1]
    shutil.rmtree(removed) if removed.is_dir() else removed.unlink()
    with pytest.raises(DatasetError) as err:
        load_dataset(name, tmp_path, TRANSFORMS)
    message = str(err.value)
    assert name in message and str(removed) in message and "Expected layout" in message


@pytest.mark.parametrize("name", FILE_DATASETS)
def test_corrupt_image_is_a_dataset_error(tmp_path, name):
    fake = make_fake_dataset(name, tmp_path)
    splits = load_dataset(name, tmp_path, TRANSFORMS)
    split = splits.test if dataset_info(name).test_only else splits.train
    bad = split.paths[0]
    bad.write_bytes(b"\xff\xd8\xff this is not a jpeg")
    with pytest.raises(DatasetError) as err:
        split[0]
    assert name in str(err.value) and str(bad) in str(err.value)
    assert fake.folder in bad.parents


def test_corrupt_image_in_a_dataloader_worker_is_a_dataset_error(tmp_path):
    make_fake_dataset("dtd", tmp_path)
    splits = load_dataset("dtd", tmp_path, TRANSFORMS)
    splits.train.paths[0].write_bytes(b"garbage")
    batches = iter(torch.utils.data.DataLoader(splits.train, batch_size=4, num_workers=1))
    try:
        with pytest.raises(DatasetError) as err:
            next(batches)
        message = str(err.value)
    finally:
        batches._shutdown_workers()  # now, not at a later garbage collection (a 5 s join)
    assert str(splits.train.paths[0]) in message
    assert "PIL" not in message.split("cannot be decoded")[0]  # no PIL frame before our message
    assert "During handling of the above exception" not in message


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_corrupt_cifar_pickle(tmp_path, name):
    fake = make_fake_dataset(name, tmp_path)
    fake.files[0].write_bytes(b"not a pickle")
    with pytest.raises(DatasetError, match="corrupt") as err:
        load_dataset(name, tmp_path, TRANSFORMS)
    assert str(fake.files[0]) in str(err.value)


def test_split_file_listing_absent_image(tmp_path):
    fake = make_fake_dataset("oxford_pets", tmp_path)
    split_file = fake.folder / "split_zhou_OxfordPets.json"
    text = split_file.read_text().replace("Abyssinian_1.jpg", "Abyssinian_999.jpg")
    split_file.write_text(text)
    with pytest.raises(DatasetError, match="Abyssinian_999.jpg.*does not exist.*Expected layout"):
        load_dataset("oxford_pets", tmp_path, TRANSFORMS)


def test_flowers_without_split_file_is_a_clear_error(tmp_path):
    fake = make_fake_dataset("oxford_flowers", tmp_path)
    (fake.folder / "split_zhou_OxfordFlowers.json").unlink()
    with pytest.raises(DatasetError, match="imagelabels.mat.*split_zhou_OxfordFlowers.json"):
        load_dataset("oxford_flowers", tmp_path, TRANSFORMS)


def test_flowers_split_disagreeing_with_imagelabels(tmp_path):
    import numpy as np
    from scipy.io import savemat

    fake = make_fake_dataset("oxford_flowers", tmp_path, num_classes=2, per_class=2)
    savemat(fake.folder / "imagelabels.mat", {"labels": np.full((1, 8), 2, dtype=np.uint8)})
    with pytest.raises(DatasetError, match="imagelabels.mat"):
        load_dataset("oxford_flowers", tmp_path, TRANSFORMS)


@pytest.mark.parametrize("name", ["domainnet", "office_caltech10"])
def test_integer_pkl_labels_are_checked_not_trusted(tmp_path, name):
    fake = make_fake_dataset(name, tmp_path, label_format="int")  # ints in reverse class order
    splits = load_dataset(name, tmp_path, TRANSFORMS)
    assert splits.class_names == fake.class_names
    for i in range(0, len(splits.test), 5):
        image, label = splits.test[i]
        assert decode_marker(image)[0] == label
    # one integer used for two class folders: the split does not match the images
    domain = fake.domain_names[0]
    pkl = fake.folder / f"{domain}_train.pkl"
    paths, labels = pickle.loads(pkl.read_bytes())
    labels[:] = 0
    pkl.write_bytes(pickle.dumps((paths, labels)))
    with pytest.raises(DatasetError, match=f"{domain}_train.pkl.*class folder"):
        load_dataset(name, tmp_path, TRANSFORMS)


def test_text_pkl_label_must_match_class_folder(tmp_path):
    fake = make_fake_dataset("domainnet", tmp_path)
    pkl = fake.folder / "sketch_test.pkl"
    paths, labels = pickle.loads(pkl.read_bytes())
    labels = list(labels)
    labels[0] = "zebra" if labels[0] != "zebra" else "bird"
    pkl.write_bytes(pickle.dumps((list(paths), labels)))
    with pytest.raises(DatasetError, match="sketch_test.pkl"):
        load_dataset("domainnet", tmp_path, TRANSFORMS)


def test_domain_pkl_paths_from_another_machine_and_split_subfolder(tmp_path):
    fake = make_fake_dataset("office_caltech10", tmp_path)
    (fake.folder / "split").mkdir()
    for pkl in fake.folder.glob("*.pkl"):
        paths, labels = pickle.loads(pkl.read_bytes())
        paths = [f"/home/someone/data/{p}" for p in paths]  # absolute paths of the authors' machine
        (fake.folder / "split" / pkl.name).write_bytes(pickle.dumps((paths, list(labels))))
        pkl.unlink()
    splits = load_dataset("office_caltech10", tmp_path, TRANSFORMS)
    assert len(splits.train) == fake.num_train
    assert all(p.is_relative_to(fake.folder) for p in splits.train.paths)


def test_missing_domain_split_file(tmp_path):
    fake = make_fake_dataset("domainnet", tmp_path, num_classes=2, per_class=2)
    (fake.folder / "quickdraw_test.pkl").unlink()
    with pytest.raises(DatasetError, match="quickdraw_test.pkl.*Expected layout"):
        load_dataset("domainnet", tmp_path, TRANSFORMS)


def test_few_shot_subset():
    labels = [i % 5 for i in range(100)]
    pool = [i for i in range(100) if labels[i] in (0, 2, 4)]
    picked = few_shot_subset(labels, pool, 3, seed=1)
    assert set(picked) <= set(pool) and len(picked) == 9
    assert sorted({labels[i] for i in picked}) == [0, 2, 4]
    assert picked == few_shot_subset(labels, pool, 3, seed=1) != few_shot_subset(labels, pool, 3, seed=2)


# --- the `fedbench datasets` / `fedbench data download` commands --------------------------


def _parse(argv):
    import argparse

    from benchmark.cli.commands import datasets as command

    parser = argparse.ArgumentParser(prog="fedbench")
    command.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_datasets_table_found_missing_incomplete(tmp_path, capsys):
    make_fake_dataset("dtd", tmp_path)
    make_fake_dataset("cifar10", tmp_path, num_classes=2, per_class=5)
    broken = make_fake_dataset("ucf101", tmp_path)
    (broken.folder / "split_zhou_UCF101.json").unlink()
    args = _parse(["datasets", "--data-root", str(tmp_path)])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "found" in lines["dtd"] and " 12 " in lines["dtd"] and " 3 " in lines["dtd"]
    assert "found" in lines["cifar10"] and " 10 " in lines["cifar10"]
    assert "incomplete" in lines["ucf101"] and "split_zhou_UCF101.json" in lines["ucf101"]
    assert "missing" in lines["sun397"] and "missing" in lines["domainnet"]


@pytest.mark.parametrize("name", ["ucf101", "domainnet", "office_caltech10"])
def test_download_prints_manual_steps(tmp_path, capsys, name):
    args = _parse(["data", "download", name, "--data-root", str(tmp_path)])
    assert args.func(args) == 1  # nothing downloaded, steps remain
    out = capsys.readouterr().out
    assert "do by hand" in out and str(dataset_info(name).path(tmp_path)) in out
    assert {
        "ucf101": "UCF-101-midframes.zip",
        "domainnet": "clipart.zip",
        "office_caltech10": "office_caltech_10_dataset.zip",
    }[name] in out


def test_download_of_present_dataset_does_nothing(tmp_path, capsys, monkeypatch):
    import data.download

    make_fake_dataset("cifar100", tmp_path)
    monkeypatch.setattr(data.download, "torchvision_download", lambda *a, **k: pytest.fail("must not download"))
    args = _parse(["data", "download", "cifar100", "--data-root", str(tmp_path)])
    assert args.func(args) == 0 and "already complete" in capsys.readouterr().out


def test_coop_split_step_after_images(tmp_path):
    from data.download import manual_steps

    steps = manual_steps("oxford_flowers", tmp_path)
    assert any(str(tmp_path / "oxford_flowers" / "split_zhou_OxfordFlowers.json") in s for s in steps)


def test_download_argument_errors(capsys):
    with pytest.raises(SystemExit) as err:
        _parse(["data", "download", "imagenet21k"])
    assert err.value.code == 2 and "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parse(["data", "download"])


def test_download_then_manual_split_step(tmp_path, capsys, monkeypatch):
    """After torchvision's images arrive, the CoOp split file is the printed manual step."""
    import data.download

    def fake_torchvision(name, root, log=print):
        fake = make_fake_dataset(name, root)
        (fake.folder / "split_zhou_DescribableTextures.json").unlink()

    monkeypatch.setattr(data.download, "torchvision_download", fake_torchvision)
    args = _parse(["data", "download", "dtd", "--data-root", str(tmp_path)])
    assert args.func(args) == 1
    out = capsys.readouterr().out
    assert str(tmp_path / "dtd" / "split_zhou_DescribableTextures.json") in out and "drive.google.com" in out


def test_a_layout_without_its_split_file_names_it_and_where_to_get_it(tmp_path):
    fake = make_fake_dataset("dtd", tmp_path)
    (fake.folder / "split_zhou_DescribableTextures.json").unlink()
    with pytest.raises(DatasetError) as err:
        load_dataset("dtd", tmp_path, TRANSFORMS)
    message = str(err.value)
    assert f"split file {fake.folder / 'split_zhou_DescribableTextures.json'} is missing" in message
    assert "from https://drive.google.com/file/d/1u3_QfB467jqHgNXC00UIzbLZRQCg2S7x" in message


@pytest.mark.parametrize("existing_root", [False, True])
def test_a_failed_download_prints_every_url_and_leaves_nothing(tmp_path, capsys, monkeypatch, existing_root):
    """Offline (the network call fails as it does without network): exit 1, the manual steps
    with the URL of every file, and no folder left behind."""
    import urllib.error
    import urllib.request

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    root = tmp_path / "data"
    if existing_root:
        root.mkdir()
    args = _parse(["data", "download", "dtd", "--data-root", str(root)])
    assert args.func(args) == 1
    out = capsys.readouterr().out
    assert "download of dtd failed: URLError" in out and "do by hand" in out
    assert "https://www.robots.ox.ac.uk/~vgg/data/dtd/download/dtd-r1.0.1.tar.gz" in out  # the images
    assert str(root / "dtd" / "images") in out and str(root / "dtd" / "labels") in out
    assert "split_zhou_DescribableTextures.json from https://drive.google.com/" in out  # the split file
    assert not root.exists() if not existing_root else not list(root.iterdir())


# --- FGVC-Aircraft, ImageNet and its variants ---------------------------------------------


def test_aircraft_list_naming_an_unknown_variant(tmp_path):
    fake = make_fake_dataset("fgvc_aircraft", tmp_path)
    listing = fake.folder / "images_variant_test.txt"
    listing.write_text(listing.read_text().replace("F-16A/B", "F-16C"))
    with pytest.raises(DatasetError, match=r"images_variant_test.txt line 3 .*F-16C.*not in variants.txt"):
        load_dataset("fgvc_aircraft", tmp_path, TRANSFORMS)


@pytest.mark.parametrize("name", ["imagenet_a", "imagenet_r"])
def test_imagenet_a_r_are_classified_over_their_own_classes(tmp_path, name):
    """A and R hold a subset of ImageNet's classes (200 of 1000): their candidate set is
    that subset, labels index into it, and each class maps back to ImageNet's label."""
    fake = make_fake_dataset(name, tmp_path, num_classes=3)
    imagenet_names = (fake.folder / "classnames.txt").read_text().splitlines()
    assert len(imagenet_names) == 6  # the class list names more classes than the set holds
    splits = load_dataset(name, tmp_path, TRANSFORMS)
    assert splits.class_names == ["goldfish", "tiger shark", "electric ray"] == fake.class_names
    assert splits.extra["imagenet_class_ids"] == [1, 3, 5]
    assert len(splits.train) == 0 and dataset_info(name).test_only and dataset_info(name).num_classes == 200
    for i in range(len(splits.test)):
        image, label = splits.test[i]
        assert label == decode_marker(image)[0]
        imagenet_label = splits.extra["imagenet_class_ids"][label]
        assert imagenet_names[imagenet_label].split(" ", 1)[1] == splits.class_names[label]


def test_imagenet_v2_folders_are_imagenet_label_indices(tmp_path):
    fake = make_fake_dataset("imagenet_v2", tmp_path, num_classes=3)
    (fake.folder / "imagenetv2-matched-frequency-format-val" / "7").mkdir()  # no 8th class in classnames.txt
    with pytest.raises(DatasetError, match="7 is not a class of classnames.txt"):
        load_dataset("imagenet_v2", tmp_path, TRANSFORMS)


def test_imagenet_validation_images_must_be_sorted_into_class_folders(tmp_path):
    fake = make_fake_dataset("imagenet", tmp_path)
    for path in list((fake.folder / "val").rglob("*.JPEG")):
        path.rename(fake.folder / "val" / path.name)
    for folder in (fake.folder / "val").iterdir():
        if folder.is_dir():
            folder.rmdir()
    with pytest.raises(DatasetError, match="holds images directly; sort them into one folder per wnid"):
        load_dataset("imagenet", tmp_path, TRANSFORMS)


def test_imagenet_empty_class_folder_and_stray_folder(tmp_path):
    fake = make_fake_dataset("imagenet", tmp_path)
    stray = fake.folder / "train" / "n99999999"
    stray.mkdir()
    with pytest.raises(DatasetError, match="n99999999 is not a class of classnames.txt"):
        load_dataset("imagenet", tmp_path, TRANSFORMS)
    stray.rmdir()
    for path in (fake.folder / "train" / "n01443537").iterdir():
        path.unlink()
    with pytest.raises(DatasetError, match="n01443537 holds no images"):
        load_dataset("imagenet", tmp_path, TRANSFORMS)


def test_imagenet_images_subfolder_layout(tmp_path):
    """CoOp's imagenet/images/{train,val} works as well as imagenet/{train,val}."""
    fake = make_fake_dataset("imagenet", tmp_path)
    (fake.folder / "images").mkdir()
    for sub in ("train", "val"):
        (fake.folder / sub).rename(fake.folder / "images" / sub)
    splits = load_dataset("imagenet", tmp_path, TRANSFORMS)
    assert (len(splits.train), len(splits.test)) == (fake.num_train, fake.num_test)


def test_damaged_classnames_file(tmp_path):
    fake = make_fake_dataset("imagenet_sketch", tmp_path)
    path = fake.folder / "classnames.txt"
    path.write_text(path.read_text() + "n01440764 tench again\n")
    with pytest.raises(DatasetError, match="classnames.txt line 4 .*damaged"):
        load_dataset("imagenet_sketch", tmp_path, TRANSFORMS)
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DatasetError, match="corrupt"):
        load_dataset("imagenet_sketch", tmp_path, TRANSFORMS)


def test_test_only_dataset_cannot_be_trained_on(tmp_path):
    from benchmark.config import ConfigError, build_config
    from benchmark.runs.preparation import load_run_dataset

    make_fake_dataset("imagenet_r", tmp_path)
    config = build_config({"dataset": "imagenet_r", "data_root": str(tmp_path)})
    with pytest.raises(ConfigError, match="imagenet_r.*test set only"):
        load_run_dataset(config, backbone=None)


def test_datasets_table_shows_test_only_and_partial_class_sets(tmp_path, capsys):
    make_fake_dataset("imagenet_a", tmp_path)
    make_fake_dataset("fgvc_aircraft", tmp_path)
    args = _parse(["datasets", "--data-root", str(tmp_path)])
    assert args.func(args) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert "found" in lines["imagenet_a"] and " - " in lines["imagenet_a"]
    assert "3 of the release's 200 classes" in lines["imagenet_a"]
    assert "3 of the release's 100 classes" in lines["fgvc_aircraft"]
    assert "missing" in lines["stanford_cars"] and "missing" in lines["imagenet"]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("stanford_cars", "cars_test_annos_withlabels.mat"),
        ("stanford_cars", "split_zhou_StanfordCars.json"),
        ("imagenet", "ILSVRC2012_img_val.tar"),
        ("imagenet_sketch", "rename its folder 'sketch' to 'images'"),
        ("imagenet_a", "imagenet-a.tar"),
        ("imagenet_r", "classnames.txt"),
    ],
)
def test_download_steps_of_the_new_datasets(tmp_path, name, expected):
    from data.download import manual_steps

    steps = " ".join(manual_steps(name, tmp_path))
    assert expected in steps and str(dataset_info(name).path(tmp_path)) in steps


# --- DomainBed: suite-made splits, domains ------------------------------------------------


def _load_quietly(name, root):
    with pytest.warns(UserWarning, match="no published split; the suite made one per domain"):
        return load_dataset(name, root, TRANSFORMS)


def test_domainbed_split_is_made_once_written_beside_the_data_and_deterministic(tmp_path):
    import json

    from data.loaders.domainbed import DOMAINBED as SPECS

    fake = make_fake_dataset("pacs", tmp_path / "a", num_classes=2)
    with pytest.warns(UserWarning) as caught:
        first = load_dataset("pacs", tmp_path / "a", TRANSFORMS)
    assert len(caught) == 1
    written = sorted(fake.folder.glob("split_pacs_*.json"))
    assert [p.name for p in written] == [
        "split_pacs_artpainting.json",
        "split_pacs_cartoon.json",
        "split_pacs_photo.json",
        "split_pacs_sketch.json",
    ]
    assert all(str(p) in " ".join(str(w.message) for w in caught) for p in written)  # it says so, naming each file
    for path, domain in zip(written, ["art_painting", "cartoon", "photo", "sketch"]):
        split = json.loads(path.read_text())
        assert split["made_by"]["seed"] == 1
        parts = [{row[0] for row in split[part]} for part in ("train", "val", "test")]
        assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
        on_disk = {p.relative_to(fake.folder).as_posix() for p in fake.files if p.parts[-3] == domain}
        assert set().union(*parts) == on_disk
        for label in (0, 1):  # 10 images of a class -> 5 / 2 / 3
            assert [sum(row[1] == label for row in split[part]) for part in ("train", "val", "test")] == [5, 2, 3]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second load reads the files: no new split, no warning
        again = load_dataset("pacs", tmp_path / "a", TRANSFORMS)
    assert again.train.paths == first.train.paths and again.test.labels == first.test.labels
    make_fake_dataset("pacs", tmp_path / "b", num_classes=2)
    _load_quietly("pacs", tmp_path / "b")
    for path in written:  # same images elsewhere -> the identical split
        assert path.read_text() == (tmp_path / "b" / "pacs" / path.name).read_text()
    assert first.extra["notes"] == ["split made by the suite (seed 1) for art_painting, cartoon, photo, sketch"]
    assert dataset_info("pacs").domains == tuple(first.domain_names) == tuple(d.name for d in SPECS["pacs"].domains)


@pytest.mark.parametrize(
    "n, expected", [(1, (1, 0, 0)), (2, (1, 0, 1)), (3, (2, 0, 1)), (4, (2, 1, 1)), (10, (5, 2, 3))]
)
def test_domainbed_split_counts_keep_a_test_image(n, expected):
    from data.loaders.domainbed import split_counts

    assert split_counts(n) == expected and sum(expected) == n


def test_domainbed_domains_can_be_held_out(tmp_path):
    """Each image carries its domain, so a protocol can train on three domains and test on the fourth."""
    fake = make_fake_dataset("office_home", tmp_path, num_classes=3)  # DomainBed folder names: Art ... Real World
    splits = _load_quietly("office_home", tmp_path)
    assert (
        splits.domain_names == ["art", "clipart", "product", "realworld"] == list(dataset_info("office_home").domains)
    )
    target = "realworld"
    sources = [i for i, d in enumerate(splits.train.domains) if d != target]
    held_out = [i for i, d in enumerate(splits.test.domains) if d == target]
    assert len(sources) == 3 * 3 * 5 and len(held_out) == 3 * 3
    for i in held_out:
        _, domain_index = decode_marker(splits.test[i][0])
        assert fake.domain_names[domain_index] == target
    assert {p.parts[-3] for p in (splits.test.paths[i] for i in held_out)} == {"Real World"}


def test_domainbed_image_removed_after_the_split_was_made(tmp_path):
    fake = make_fake_dataset("vlcs", tmp_path, num_classes=2)
    _load_quietly("vlcs", tmp_path)
    gone = fake.files[3]
    gone.unlink()
    with pytest.raises(DatasetError) as err:
        load_dataset("vlcs", tmp_path, TRANSFORMS)
    message = str(err.value)
    assert "vlcs" in message and str(gone) in message and "delete the split files" in message


def test_domainbed_damaged_or_foreign_split_file(tmp_path):
    import json

    fake = make_fake_dataset("terra_incognita", tmp_path, num_classes=2)
    _load_quietly("terra_incognita", tmp_path)
    path = fake.folder / "split_terraincognita_location43.json"
    split = json.loads(path.read_text())
    split["test"][0][1] = 1 - split["test"][0][1]  # a label that contradicts the class folder
    path.write_text(json.dumps(split))
    with pytest.raises(DatasetError, match="split_terraincognita_location43.json labels .* does not match the images"):
        load_dataset("terra_incognita", tmp_path, TRANSFORMS)
    path.write_text('{"train": [')
    with pytest.raises(DatasetError, match="split_terraincognita_location43.json is not a split file"):
        load_dataset("terra_incognita", tmp_path, TRANSFORMS)


def test_domainbed_split_that_cannot_be_written_is_a_clear_error(tmp_path):
    fake = make_fake_dataset("domainnet_full", tmp_path, num_classes=2)
    blocked = fake.folder / "split_domainnet_quickdraw.json"
    blocked.mkdir()  # not a file, and nothing can replace it (works even as root, unlike chmod)
    with pytest.raises(DatasetError, match="cannot write the one it makes there") as err:
        load_dataset("domainnet_full", tmp_path, TRANSFORMS)
    assert str(blocked) in str(err.value)
    assert not list(fake.folder.glob(".*.tmp*"))  # no half-written file left behind


def test_full_domainnet_beside_the_fedbn_subset(tmp_path):
    """domainnet (FedBN's 10 classes, pkl splits) and domainnet_full (all classes) are two datasets."""
    make_fake_dataset("domainnet", tmp_path, num_classes=2, per_class=2)
    make_fake_dataset("domainnet_full", tmp_path, num_classes=3)
    assert len(load_dataset("domainnet", tmp_path, TRANSFORMS).class_names) == 2
    full = _load_quietly("domainnet_full", tmp_path)
    assert full.class_names == ["aircraft carrier", "airplane", "alarm clock"]
    assert dataset_info("domainnet_full").num_classes == 345 and dataset_info("domainnet").num_classes == 10


@pytest.mark.parametrize(
    "name, expected",
    [
        ("pacs", "kfold"),
        ("office_home", "OfficeHomeDataset_10072016"),
        ("vlcs", "VLCS.tar.gz"),
        ("terra_incognita", "location_<n>/<category>"),
        ("domainnet_full", "quickdraw.zip"),
    ],
)
def test_download_steps_of_domainbed_datasets(tmp_path, name, expected):
    from data.download import manual_steps

    steps = " ".join(manual_steps(name, tmp_path))
    assert expected in steps and str(dataset_info(name).path(tmp_path)) in steps
    assert "the suite makes one" in steps and "FedMVP" in steps


@pytest.mark.parametrize("name", ["fgvc_aircraft", "eurosat"])
def test_torchvision_download_is_moved_into_the_suite_layout(tmp_path, monkeypatch, name):
    """torchvision's own archive layout (faked here: no network) ends up where the loader reads."""
    import torchvision.datasets as tvd

    from data.download import TORCHVISION, torchvision_download

    source = make_fake_dataset(name, tmp_path / "release")

    class FakeTorchvisionDataset:  # unpacks the release as torchvision does, under root
        def __init__(self, root, download=False, **kwargs):
            assert download
            inner = {"fgvc_aircraft": "fgvc-aircraft-2013b/data", "eurosat": "eurosat"}[name]
            shutil.copytree(source.folder, tmp_path / root / inner)

    monkeypatch.setattr(tvd, TORCHVISION[name][0], FakeTorchvisionDataset)
    data_root = tmp_path / "data"
    torchvision_download(name, data_root, log=lambda message: None)
    if name == "eurosat":  # torchvision has no CoOp split: that stays a manual step
        assert not (data_root / "eurosat" / "split_zhou_EuroSAT.json").exists()
        shutil.copy(source.folder / "split_zhou_EuroSAT.json", data_root / "eurosat")
    splits = load_dataset(name, data_root, TRANSFORMS)
    assert (len(splits.train), len(splits.test)) == (source.num_train, source.num_test)


def test_domainbed_domain_lacking_a_class(tmp_path):
    """Not every TerraIncognita location has every animal: the class list is the union of
    the domains' class folders, and labels stay those of the union."""
    fake = make_fake_dataset("terra_incognita", tmp_path, num_classes=3)
    shutil.rmtree(fake.folder / "location_46" / "bobcat")
    splits = _load_quietly("terra_incognita", tmp_path)
    assert splits.class_names == ["bird", "bobcat", "cat"]
    by_domain = {
        d: {y for y, dom in zip(splits.test.labels, splits.test.domains) if dom == d} for d in splits.domain_names
    }
    assert by_domain == {"L38": {0, 1, 2}, "L43": {0, 1, 2}, "L46": {0, 2}, "L100": {0, 1, 2}}
    for i in range(0, len(splits.test), 4):
        image, label = splits.test[i]
        assert decode_marker(image)[0] == label
