"""Every on-disk layout, exercised for real on tiny fake instances (tests/fake_layouts.py)."""

from __future__ import annotations

import pickle
import shutil

import pytest
import torch

from data.base import DatasetError
from data.catalog import dataset_info, load_dataset
from data.fewshot import cached_few_shot_indices, few_shot_indices, few_shot_subset
from data.transforms import clip_transforms
from fake_layouts import FAKE_NAMES, IMAGENET_NAMES, decode_marker, make_fake_dataset

TRANSFORMS = clip_transforms(32, augment=False)
PROTOCOL = {"cifar10": "dirichlet", "cifar100": "dirichlet", "domainnet": "domains", "office_caltech10": "domains",
            **{name: "imagenet" for name in IMAGENET_NAMES}}
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
    from scipy.io import savemat
    import numpy as np

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


def test_few_shot_subset_and_cache(tmp_path):
    labels = [i % 5 for i in range(100)]
    pool = [i for i in range(100) if labels[i] in (0, 2, 4)]
    picked = few_shot_subset(labels, pool, 3, seed=1)
    assert set(picked) <= set(pool) and len(picked) == 9
    assert sorted({labels[i] for i in picked}) == [0, 2, 4]
    assert picked == few_shot_subset(labels, pool, 3, seed=1) != few_shot_subset(labels, pool, 3, seed=2)
    first = cached_few_shot_indices(labels, 4, 7, tmp_path, tag="train")
    assert first == few_shot_indices(labels, 4, 7) and len(list(tmp_path.glob("fewshot_train_k4_s7_*.json"))) == 1
    assert cached_few_shot_indices(labels, 4, 7, tmp_path, tag="train") == first


# --- the `fedbench datasets` / `fedbench data download` commands --------------------------

def _parse(argv):
    import argparse

    from benchmark.commands import datasets as command

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
    assert {"ucf101": "UCF-101-midframes.zip", "domainnet": "clipart.zip", "office_caltech10": "office_caltech_10_dataset.zip"}[name] in out


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
    from benchmark.runner import load_run_dataset

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
    [("stanford_cars", "cars_test_annos_withlabels.mat"), ("stanford_cars", "split_zhou_StanfordCars.json"),
     ("imagenet", "ILSVRC2012_img_val.tar"), ("imagenet_sketch", "rename its folder 'sketch' to 'images'"),
     ("imagenet_a", "imagenet-a.tar"), ("imagenet_r", "classnames.txt")],
)
def test_download_steps_of_the_new_datasets(tmp_path, name, expected):
    from data.download import manual_steps

    steps = " ".join(manual_steps(name, tmp_path))
    assert expected in steps and str(dataset_info(name).path(tmp_path)) in steps
