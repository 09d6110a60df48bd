"""Tiny, real-format instances of every on-disk dataset layout, for tests.

`make_fake_dataset(name, root)` writes dataset `name` under `root` exactly as the real
release lays it out (split_zhou JSON, CIFAR pickles, FedBN split pickles, Flowers'
imagelabels.mat and cat_to_name.json), with a few classes and a few small images.
Each image is a solid colour that encodes its class (red channel) and, for the
feature-shift datasets, its domain (green channel): `decode_marker` reads them back from
a transformed tensor, so a test can check that every image carries its true label.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from data.transforms import OPENAI_MEAN, OPENAI_STD

STEP = 16  # colour step between classes; JPEG and resizing stay well within +-STEP/2


def marker_colour(class_index: int, domain_index: int = 0) -> tuple[int, int, int]:
    if not 0 <= class_index < 16 or not 0 <= domain_index < 16:
        raise ValueError("fake datasets encode at most 16 classes and 16 domains")
    return (8 + STEP * class_index, 8 + STEP * domain_index, 128)


def decode_marker(image: torch.Tensor, mean=OPENAI_MEAN, std=OPENAI_STD) -> tuple[int, int]:
    """(class index, domain index) from a normalized [3, H, W] tensor of a fake image."""
    rgb = image.mean(dim=(1, 2)) * torch.tensor(std) + torch.tensor(mean)
    red, green = (rgb[:2] * 255).tolist()
    return round((red - 8) / STEP), round((green - 8) / STEP)


@dataclass
class FakeDataset:
    name: str
    folder: Path  # the dataset folder under root
    class_names: list[str]  # as the loader should report them (underscores -> spaces)
    num_train: int
    num_test: int
    domain_names: list[str] | None = None
    files: list[Path] = field(default_factory=list)  # every image file written
    # Files or folders the loader needs (removing one is a DatasetError naming it);
    # `files` when empty. Layouts without split lists need their class folders, not each image.
    required: list[Path] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # what the loader should put in DatasetSplits.extra

    @property
    def must_exist(self) -> list[Path]:
        return self.required or self.files


def _save_image(path: Path, colour: tuple[int, int, int], size: int = 12) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (size, size), colour).save(path, quality=95)


# Class folders (or file-name stems) in each real release's style, and the class names CoOp's
# split files give them. Each fact from CoOp's datasets/<name>.py (KaiyangZhou/CoOp):
# - caltech101.py: classes are the sorted folders of 101_ObjectCategories (capitalised ones
#   sort first), BACKGROUND_Google and Faces_easy ignored, and NEW_CNAMES renames airplanes ->
#   airplane, Faces -> face, Leopards -> leopard, Motorbikes -> motorbike in the split file.
# - oxford_pets.py: one flat images/ folder, files named <Breed>_<n>.jpg with the breed's
#   capitalisation (cats capitalised, dogs not); the split file's class is the breed lowercased.
# - sun397.py: images under SUN397/<letter>/<class>/, some classes one level deeper
#   (a/apartment_building/outdoor); the split's class drops the letter and reverses the rest
#   ("outdoor apartment_building"), in ClassName.txt's order.
_COOP_CLASSES = {
    "caltech101": ["Faces", "Leopards", "Motorbikes", "accordion", "airplanes", "anchor"],
    "oxford_pets": ["Abyssinian", "american_bulldog", "american_pit_bull_terrier", "basset_hound", "beagle", "Bengal"],
    "oxford_flowers": [
        "pink primrose",
        "hard-leaved pocket orchid",
        "canterbury bells",
        "sweet pea",
        "english marigold",
        "tiger lily",
    ],
    "food101": ["apple_pie", "baby_back_ribs", "baklava", "beef_carpaccio", "beef_tartare", "beet_salad"],
    "dtd": ["banded", "blotchy", "braided", "bubbly", "bumpy", "chequered"],
    "sun397": [
        "a/abbey",
        "a/airplane_cabin",
        "a/airport_terminal",
        "a/alley",
        "a/amphitheater",
        "a/apartment_building/outdoor",
    ],
    "ucf101": ["Apply_Eye_Makeup", "Apply_Lipstick", "Archery", "Baby_Crawling", "Balance_Beam", "Band_Marching"],
    "stanford_cars": [
        "2000 AM General Hummer SUV",
        "2012 Acura RL Sedan",
        "2012 Acura TL Sedan",
        "2008 Acura TL Type-S",
        "2012 Acura TSX Sedan",
        "2001 Acura Integra Type R",
    ],
    # CoOp's EuroSAT split names the classes in words; the image folders keep the short names.
    "eurosat": [
        "Annual Crop Land",
        "Forest",
        "Herbaceous Vegetation Land",
        "Highway or Road",
        "Industrial Buildings",
        "Pasture Land",
    ],
}
CALTECH_NEW_CNAMES = {"airplanes": "airplane", "Faces": "face", "Leopards": "leopard", "Motorbikes": "motorbike"}


def split_class_name(name: str, folder: str) -> str:
    """The class name CoOp's split file gives the class in `folder` (see _COOP_CLASSES)."""
    if name == "caltech101":
        return CALTECH_NEW_CNAMES.get(folder, folder)
    if name == "oxford_pets":
        return folder.lower()
    if name == "sun397":
        return " ".join(folder.split("/")[1:][::-1])
    return folder


_EUROSAT_FOLDERS = ["AnnualCrop", "Forest", "HerbaceousVegetation", "Highway", "Industrial", "Pasture"]
_COOP_FILES = {
    "caltech101": ("caltech-101", "101_ObjectCategories", "split_zhou_Caltech101.json"),
    "oxford_pets": ("oxford_pets", "images", "split_zhou_OxfordPets.json"),
    "oxford_flowers": ("oxford_flowers", "jpg", "split_zhou_OxfordFlowers.json"),
    "food101": ("food-101", "images", "split_zhou_Food101.json"),
    "dtd": ("dtd", "images", "split_zhou_DescribableTextures.json"),
    "sun397": ("sun397", "SUN397", "split_zhou_SUN397.json"),
    "ucf101": ("ucf101", "UCF-101-midframes", "split_zhou_UCF101.json"),
    "stanford_cars": ("stanford_cars", "", "split_zhou_StanfordCars.json"),
    "eurosat": ("eurosat", "2750", "split_zhou_EuroSAT.json"),
}
DOMAINS = {
    "domainnet": (
        "DomainNet",
        ["clipart", "infograph", "painting", "quickdraw", "real", "sketch"],
        ["bird", "feather", "headphones", "ice_cream", "teapot", "tiger", "whale", "windmill", "wine_glass", "zebra"],
    ),
    "office_caltech10": (
        "office_caltech_10",
        ["amazon", "caltech", "dslr", "webcam"],
        [
            "back_pack",
            "bike",
            "calculator",
            "headphones",
            "keyboard",
            "laptop_computer",
            "monitor",
            "mouse",
            "mug",
            "projector",
        ],
    ),
}
IMAGENET_NAMES = ["imagenet", "imagenet_v2", "imagenet_sketch", "imagenet_a", "imagenet_r"]


def _coop_relpath(name: str, cls: str, c: int, k: int, number: int, split: str) -> str:
    """An image path relative to the image folder, in the real release's style."""
    if name == "stanford_cars":  # flat folders per official split, labels in the devkit
        return f"cars_{'test' if split == 'test' else 'train'}/{number:05d}.jpg"
    if name == "eurosat":
        return f"{_EUROSAT_FOLDERS[c]}/{_EUROSAT_FOLDERS[c]}_{k + 1}.jpg"
    if name == "oxford_pets":
        return f"{cls}_{k + 1}.jpg"  # flat folder, class in the file name
    if name == "oxford_flowers":
        return f"image_{number:05d}.jpg"  # flat folder, labels in imagelabels.mat
    if name == "sun397":
        return f"{cls}/sun_{c:02d}{k:04d}.jpg"  # cls is <letter>/<class>[/<indoor|outdoor>]
    if name == "ucf101":
        return f"{cls}/v_{cls.replace('_', '')}_g{k + 1:02d}_c01.jpg"
    return f"{cls}/image_{k + 1:04d}.jpg"


def _make_coop(name: str, root: Path, num_classes: int, per_class: int) -> FakeDataset:
    folder_name, image_dir, split_name = _COOP_FILES[name]
    folder = root / folder_name
    classes = _COOP_CLASSES[name][:num_classes]
    n_test, n_val = max(1, per_class // 2), 1
    splits: dict[str, list] = {"train": [], "val": [], "test": []}
    files, flower_labels, number = [], [], 0
    for c, cls in enumerate(classes):
        for k in range(per_class + n_val + n_test):
            number += 1
            split = "train" if k < per_class else "val" if k < per_class + n_val else "test"
            rel = _coop_relpath(name, cls, c, k, number, split)
            path = folder / image_dir / rel
            _save_image(path, marker_colour(c))
            files.append(path)
            flower_labels.append(c + 1)
            splits[split].append([rel, c, split_class_name(name, cls)])
    (folder / split_name).write_text(json.dumps(splits))
    if name == "oxford_flowers":
        from scipy.io import savemat

        savemat(folder / "imagelabels.mat", {"labels": np.array([flower_labels], dtype=np.uint8)})
        (folder / "cat_to_name.json").write_text(json.dumps({str(c + 1): cls for c, cls in enumerate(classes)}))
    if name == "caltech101":  # in the archive, in no split (CoOp's IGNORED)
        _save_image(folder / image_dir / "BACKGROUND_Google" / "image_0001.jpg", (0, 0, 0))
    if name == "oxford_pets":
        (folder / "annotations").mkdir(parents=True, exist_ok=True)
        (folder / "annotations" / "trainval.txt").write_text("")
    class_names = [split_class_name(name, c).replace("_", " ") for c in classes]
    return FakeDataset(name, folder, class_names, per_class * num_classes, n_test * num_classes, files=files)


def _cifar_batch(labels: list[int], label_key: str) -> dict:
    data = np.stack([np.repeat(np.array(marker_colour(y), dtype=np.uint8), 32 * 32) for y in labels])
    return {
        "batch_label": "fake",
        "data": data,
        label_key: labels,
        "filenames": [f"{i}.png" for i in range(len(labels))],
    }


def _make_cifar(name: str, root: Path, num_classes: int, per_class: int) -> FakeDataset:
    n_test = max(1, per_class // 2)
    train = [c for c in range(num_classes) for _ in range(per_class)]
    test = [c for c in range(num_classes) for _ in range(n_test)]
    rng = np.random.default_rng(0)
    rng.shuffle(train)  # interleaved classes, as in the real batches
    classes = [f"class_{c}_{'ab'[c % 2]}" for c in range(num_classes)]
    files = []
    if name == "cifar10":
        folder = root / "cifar-10-batches-py"
        folder.mkdir(parents=True, exist_ok=True)
        chunks = np.array_split(np.array(train), 5)
        for i, chunk in enumerate(chunks, start=1):
            files.append(folder / f"data_batch_{i}")
            files[-1].write_bytes(pickle.dumps(_cifar_batch([int(y) for y in chunk], "labels")))
        (folder / "test_batch").write_bytes(pickle.dumps(_cifar_batch(test, "labels")))
        (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": classes, "num_vis": 3072}))
        files.append(folder / "test_batch")
    else:
        folder = root / "cifar-100-python"
        folder.mkdir(parents=True, exist_ok=True)
        for split, labels in (("train", train), ("test", test)):
            batch = _cifar_batch(labels, "fine_labels")
            batch["coarse_labels"] = [0] * len(labels)
            (folder / split).write_bytes(pickle.dumps(batch))
            files.append(folder / split)
        (folder / "meta").write_bytes(pickle.dumps({"fine_label_names": classes, "coarse_label_names": ["all"]}))
    return FakeDataset(name, folder, [c.replace("_", " ") for c in classes], len(train), len(test), files=files)


def _make_domains(name: str, root: Path, num_classes: int, per_class: int, label_format: str) -> FakeDataset:
    folder_name, domains, all_classes = DOMAINS[name]
    folder = root / folder_name
    classes = all_classes[:num_classes]
    n_test = max(1, per_class // 2)
    files = []
    for d, domain in enumerate(domains):
        pairs: dict[str, tuple[list, list]] = {"train": ([], []), "test": ([], [])}
        for c, cls in enumerate(classes):
            for k in range(per_class + n_test):
                path = folder / domain / cls / f"{domain}_{c:03d}_{k:06d}.jpg"
                _save_image(path, marker_colour(c, d))
                files.append(path)
                paths, labels = pairs["train" if k < per_class else "test"]
                paths.append(f"{folder_name}/{domain}/{cls}/{path.name}")  # relative to the data root
                # integer labels deliberately in reverse order: the loader must not trust them
                labels.append(cls if label_format == "text" else num_classes - 1 - c)
        for split, (paths, labels) in pairs.items():
            order = np.random.default_rng(d).permutation(len(paths))  # classes interleaved
            payload = (np.array(paths)[order], np.array(labels)[order])
            (folder / f"{domain}_{split}.pkl").write_bytes(pickle.dumps(payload))
    return FakeDataset(
        name,
        folder,
        [c.replace("_", " ") for c in classes],
        per_class * num_classes * len(domains),
        n_test * num_classes * len(domains),
        domain_names=list(domains),
        files=files,
    )


AIRCRAFT_VARIANTS = ["707-320", "A300B4", "F-16A/B", "Falcon 2000", "DHC-1", "Tu-154"]


def _make_aircraft(root: Path, num_classes: int, per_class: int) -> FakeDataset:
    """fgvc_aircraft/: images/<id>.jpg, variants.txt (label = line), images_variant_*.txt."""
    folder = root / "fgvc_aircraft"
    variants = AIRCRAFT_VARIANTS[:num_classes]
    n_test = max(1, per_class // 2)
    lists: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    files, number = [], 1000000
    for k in range(per_class + 1 + n_test):  # interleaved classes, as in the real lists
        for c, variant in enumerate(variants):
            number += 7
            split = "train" if k < per_class else "val" if k == per_class else "test"
            path = folder / "images" / f"{number:07d}.jpg"
            _save_image(path, marker_colour(c))
            files.append(path)
            lists[split].append(f"{number:07d} {variant}")
    (folder / "variants.txt").write_text("\n".join(variants) + "\n")
    for split, lines in lists.items():
        (folder / f"images_variant_{split}.txt").write_text("\n".join(lines) + "\n")
    return FakeDataset(
        "fgvc_aircraft", folder, list(variants), per_class * num_classes, n_test * num_classes, files=files
    )


IMAGENET_CLASSES = {  # wnid -> name, in sorted wnid order as in ImageNet's classnames.txt
    "n01440764": "tench",
    "n01443537": "goldfish",
    "n01484850": "great white shark",
    "n01491361": "tiger shark",
    "n01494475": "hammerhead shark",
    "n01496331": "electric ray",
}
_VARIANT_DIRS = {
    "imagenet_v2": ("imagenetv2", "imagenetv2-matched-frequency-format-val"),
    "imagenet_sketch": ("imagenet-sketch", "images"),
    "imagenet_a": ("imagenet-adversarial", "imagenet-a"),
    "imagenet_r": ("imagenet-rendition", "imagenet-r"),
}


def _write_classnames(folder: Path, wnids: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "classnames.txt"
    path.write_text("".join(f"{w} {IMAGENET_CLASSES[w]}\n" for w in wnids))
    return path


def _make_imagenet(name: str, root: Path, num_classes: int, per_class: int) -> FakeDataset:
    """ImageNet: {train,val}/<wnid>/; V2: <label index>/; Sketch: images/<wnid>/; A and R:
    a subset of the classes of their classnames.txt (every other class, as A/R hold 200 of
    ImageNet's 1000), so their labels differ from ImageNet's."""
    all_wnids = list(IMAGENET_CLASSES)
    n_test = max(1, per_class // 2)
    files: list[Path] = []
    if name == "imagenet":
        wnids = all_wnids[:num_classes]
        folder = root / "imagenet"
        classnames = _write_classnames(folder, wnids)
        for c, wnid in enumerate(wnids):
            for k in range(per_class):
                files.append(folder / "train" / wnid / f"{wnid}_{k + 1}.JPEG")
                _save_image(files[-1], marker_colour(c))
            for k in range(n_test):
                files.append(folder / "val" / wnid / f"ILSVRC2012_val_{c * 100 + k + 1:08d}.JPEG")
                _save_image(files[-1], marker_colour(c))
        return FakeDataset(
            name,
            folder,
            [IMAGENET_CLASSES[w] for w in wnids],
            per_class * num_classes,
            n_test * num_classes,
            files=files,
            required=[classnames, folder / "val" / wnids[-1]],
            extra={"wnids": wnids, "imagenet_class_ids": list(range(num_classes))},
        )
    folder_name, image_dir = _VARIANT_DIRS[name]
    folder = root / folder_name
    if name in ("imagenet_a", "imagenet_r"):
        if num_classes > len(all_wnids) // 2:
            raise ValueError(f"fake {name} supports 1..{len(all_wnids) // 2} classes")
        class_ids = [2 * c + 1 for c in range(num_classes)]
        listed = all_wnids[: 2 * num_classes]
    else:
        class_ids = list(range(num_classes))
        listed = all_wnids[:num_classes]
    classnames = _write_classnames(folder, listed)
    for c, class_id in enumerate(class_ids):
        sub = str(class_id) if name == "imagenet_v2" else all_wnids[class_id]
        for k in range(per_class):
            files.append(folder / image_dir / sub / f"{'%032x' % (class_id * 1000 + k)}.jpeg")
            _save_image(files[-1], marker_colour(c))
    return FakeDataset(
        name,
        folder,
        [IMAGENET_CLASSES[all_wnids[i]] for i in class_ids],
        0,
        per_class * num_classes,
        files=files,
        required=[folder / image_dir, classnames],
        extra={"wnids": [all_wnids[i] for i in class_ids], "imagenet_class_ids": class_ids},
    )


# DomainBed releases: (folder, [(domain name, image folder, file suffix)], classes). OfficeHome
# uses the DomainBed release's folder names, the others the spec's, so both are exercised.
DOMAINBED = {
    "pacs": (
        "pacs",
        [
            ("art_painting", "art_painting", ".jpg"),
            ("cartoon", "cartoon", ".jpg"),
            ("photo", "photo", ".jpg"),
            ("sketch", "sketch", ".png"),
        ],
        ["dog", "elephant", "giraffe", "guitar", "horse", "house"],
    ),
    "office_home": (
        "officehome",
        [
            ("art", "Art", ".jpg"),
            ("clipart", "Clipart", ".jpg"),
            ("product", "Product", ".jpg"),
            ("realworld", "Real World", ".jpg"),
        ],
        ["Alarm_Clock", "Backpack", "Batteries", "Bed", "Bike", "Bottle"],
    ),
    "vlcs": (
        "VLCS",
        [
            ("caltech", "CALTECH/full", ".jpg"),
            ("labelme", "LABELME/full", ".jpg"),
            ("pascal", "PASCAL/full", ".jpg"),
            ("sun", "SUN/full", ".jpg"),
        ],
        ["bird", "car", "chair", "dog", "person"],
    ),
    "terra_incognita": (
        "terra_incognita",
        [(f"L{n}", f"location_{n}", ".jpg") for n in (38, 43, 46, 100)],
        ["bird", "bobcat", "cat", "coyote", "dog", "empty"],
    ),
    "domainnet_full": (
        "domainnet",
        [(d, d, ".jpg") for d in ("clipart", "infograph", "painting", "quickdraw", "real", "sketch")],
        ["aircraft_carrier", "airplane", "alarm_clock", "ambulance", "angel", "animal_migration"],
    ),
}
DOMAINBED_PER_CLASS = 10  # images per (domain, class): the suite's split makes 5 / 2 / 3 of them

# Where the reference code bases leave each dataset, each fact from the code named:
# - DomainBed, domainbed/scripts/download.py (2024-12): `PACS/` (the archive's `kfold/`
#   renamed), `office_home/` (`OfficeHomeDataset_10072016/` renamed: Art, Clipart, Product,
#   Real World), `VLCS/` (Caltech101, LabelMe, SUN09, VOC2007), `domain_net/` (the six
#   archives unzipped, then the files of misc/domain_net_duplicates.txt deleted) and
#   `terra_incognita/location_<n>/<category>/`.
# - FedMVP, dataloader/fed_datasets.py: `pacs/`, `officehome/` (art, clipart, product,
#   realworld), `VLCS/<D>/full/`, `domainnet/`, `terra_incognita/`; each domain's split file
#   inside its domain folder (`pacs/art_painting/split_pacs_artpainting.json`,
#   `VLCS/CALTECH/split_VLCS_CALTECH.json`), paths relative to the domain's image folder.
# - pFedMMA / FedOTP / FedPGP, datasets/cifar10.py and cifar100.py: dataset_dir "cifar-10"
#   ("cifar-100") handed to torchvision as its root, so `cifar-10/cifar-10-batches-py/`;
#   pFedMMA datasets/sun397.py: dataset_dir 'SUN397' (images in `SUN397/SUN397/`).
DOMAINBED_RELEASE = {  # name -> (DomainBed's folder, its domain folders, in the spec's domain order)
    "pacs": ("PACS", ["art_painting", "cartoon", "photo", "sketch"]),
    "office_home": ("office_home", ["Art", "Clipart", "Product", "Real World"]),
    "vlcs": ("VLCS", ["Caltech101", "LabelMe", "VOC2007", "SUN09"]),
    "terra_incognita": ("terra_incognita", [f"location_{n}" for n in (38, 43, 46, 100)]),
    "domainnet_full": ("domain_net", ["clipart", "infograph", "painting", "quickdraw", "real", "sketch"]),
}
FEDMVP_FOLDERS = {  # name -> (FedMVP's folder, its image folders, its split tag per domain)
    "pacs": ("pacs", ["art_painting", "cartoon", "photo", "sketch"], ["artpainting", "cartoon", "photo", "sketch"]),
    "office_home": (
        "officehome",
        ["art", "clipart", "product", "realworld"],
        ["art", "clipart", "product", "realworld"],
    ),
    "vlcs": (
        "VLCS",
        ["CALTECH/full", "LABELME/full", "PASCAL/full", "SUN/full"],
        ["CALTECH", "LABELME", "PASCAL", "SUN"],
    ),
    "terra_incognita": (
        "terra_incognita",
        [f"location_{n}" for n in (38, 43, 46, 100)],
        [f"location{n}" for n in (38, 43, 46, 100)],
    ),
    "domainnet_full": (
        "domainnet",
        list(DOMAINBED_RELEASE["domainnet_full"][1]),
        list(DOMAINBED_RELEASE["domainnet_full"][1]),
    ),
}
SPLIT_TAGS = {
    "pacs": "pacs",
    "office_home": "officehome",
    "vlcs": "VLCS",
    "terra_incognita": "terraincognita",
    "domainnet_full": "domainnet",
}
CIFAR_FEDOTP = {"cifar10": "cifar-10", "cifar100": "cifar-100"}  # pFedMMA/FedOTP/FedPGP's torchvision root


def _make_domainbed(name: str, root: Path, num_classes: int, layout: str | None = None) -> FakeDataset:
    """<folder>/<domain>/<class>/* with no split files, as the releases come. `layout`
    "DomainBed": the folder and domain names its download.py leaves; "FedMVP": FedMVP's
    names, with its split file in each domain folder (the first half of each class's images
    train, one val, the rest test). None: the spec's folder with mixed domain names."""
    folder_name, domains, all_classes = DOMAINBED[name]
    if layout == "DomainBed":
        folder_name, image_dirs = DOMAINBED_RELEASE[name]
        domains = [(d, image_dir, suffix) for (d, _, suffix), image_dir in zip(domains, image_dirs)]
    elif layout == "FedMVP":
        folder_name, image_dirs, _ = FEDMVP_FOLDERS[name]
        domains = [(d, image_dir, suffix) for (d, _, suffix), image_dir in zip(domains, image_dirs)]
    folder = root / folder_name
    classes = all_classes[:num_classes]
    files = []
    for d, (_, image_dir, suffix) in enumerate(domains):
        for c, cls in enumerate(classes):
            for k in range(DOMAINBED_PER_CLASS):
                files.append(folder / image_dir / cls / f"pic_{k + 1:03d}{suffix}")
                _save_image(files[-1], marker_colour(c, d))
    if name == "domainnet_full":  # DomainBed's duplicate list; download.py has deleted what it names
        (folder / "domain_net_duplicates.txt").write_text(f"clipart/{classes[0]}/deleted_duplicate.jpg\n")
    cells = num_classes * len(domains)
    train, test = 5 * cells, 3 * cells
    if layout == "FedMVP":
        train, test = _write_fedmvp_splits(name, folder, domains, classes)
    return FakeDataset(
        name,
        folder,
        [c.replace("_", " ") for c in classes],
        train,
        test,
        domain_names=[d for d, _, _ in domains],
        files=files,
        required=[folder / image_dir for _, image_dir, _ in domains],
    )


def _write_fedmvp_splits(name: str, folder: Path, domains: list, classes: list[str]) -> tuple[int, int]:
    """FedMVP's split file in each domain folder; (train, test) image counts."""
    _, image_dirs, tags = FEDMVP_FOLDERS[name]
    counts = [0, 0]
    for image_dir, tag in zip(image_dirs, tags):
        split: dict[str, list] = {"train": [], "val": [], "test": []}
        for c, cls in enumerate(classes):
            for k in range(DOMAINBED_PER_CLASS):
                part = "train" if k < DOMAINBED_PER_CLASS // 2 else "val" if k == DOMAINBED_PER_CLASS // 2 else "test"
                suffix = next((folder / image_dir / cls).glob(f"pic_{k + 1:03d}.*")).suffix
                split[part].append([f"{cls}/pic_{k + 1:03d}{suffix}", c, cls])
        counts[0] += len(split["train"])
        counts[1] += len(split["test"])
        (folder / image_dir.split("/")[0] / f"split_{SPLIT_TAGS[name]}_{tag}.json").write_text(json.dumps(split))
    return counts[0], counts[1]


def place_as_fedotp(fake: FakeDataset, root: Path) -> FakeDataset:
    """Move a fake CIFAR folder where pFedMMA, FedOTP and FedPGP leave it (`cifar-10/cifar-10-batches-py`)."""
    target = Path(root) / CIFAR_FEDOTP[fake.name] / fake.folder.name
    target.parent.mkdir(parents=True, exist_ok=True)
    fake.folder.rename(target)
    fake.files = [target / f.relative_to(fake.folder) for f in fake.files]
    fake.folder = target
    return fake


def rename_folder(fake: FakeDataset, name: str) -> FakeDataset:
    """Rename a fake dataset's folder (pFedMMA's `SUN397` for CoOp's `sun397`)."""
    target = fake.folder.with_name(name)
    fake.folder.rename(target)
    fake.files = [target / f.relative_to(fake.folder) for f in fake.files]
    fake.required = [target / f.relative_to(fake.folder) for f in fake.required]
    fake.folder = target
    return fake


FAKE_NAMES = [*_COOP_FILES, "fgvc_aircraft", *IMAGENET_NAMES, "cifar10", "cifar100", *DOMAINS, *DOMAINBED]


def make_fake_dataset(
    name: str,
    root: Path | str,
    num_classes: int = 3,
    per_class: int = 4,
    label_format: str = "text",
    layout: str | None = None,
) -> FakeDataset:
    """Write a tiny instance of dataset `name` under `root`, in its real on-disk format.

    DomainBed datasets get 10 images per (domain, class) and no split files (unpublished).
    Otherwise `per_class` train images per class (per domain for the feature-shift datasets) and
    max(1, per_class // 2) test images (CoOp datasets and Aircraft: one more per class in
    `val`); the test-only ImageNet variants get `per_class` test images and no train split.
    `label_format` ("text" or "int") picks the label type in the DomainNet/Office pkls.
    `layout` places it as another code base does: "pFedMMA" (CIFAR one folder down, SUN397
    as `SUN397`), "DomainBed" or "FedMVP" (the DomainBed datasets, see `DOMAINBED_RELEASE`).
    """
    root = Path(root)
    if not 1 <= num_classes <= 6 and name in _COOP_FILES:
        raise ValueError(f"fake {name} supports 1..6 classes, got {num_classes}")
    if name in _COOP_FILES:
        fake = _make_coop(name, root, num_classes, per_class)
        return rename_folder(fake, "SUN397") if layout == "pFedMMA" and name == "sun397" else fake
    if name == "fgvc_aircraft":
        return _make_aircraft(root, num_classes, per_class)
    if name in IMAGENET_NAMES:
        return _make_imagenet(name, root, num_classes, per_class)
    if name in ("cifar10", "cifar100"):
        fake = _make_cifar(name, root, num_classes, per_class)
        return place_as_fedotp(fake, root) if layout == "pFedMMA" else fake
    if name in DOMAINS:
        return _make_domains(name, root, num_classes, per_class, label_format)
    if name in DOMAINBED:
        return _make_domainbed(name, root, num_classes, layout)
    raise ValueError(f"no fake layout for {name!r}; known: {', '.join(FAKE_NAMES)}")
