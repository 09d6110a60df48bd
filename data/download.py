"""`fedbench data download NAME`: torchvision downloads arranged into the suite's layout,
and the exact manual steps for what torchvision cannot fetch (the CoOp split JSONs,
UCF101 mid-frames, Stanford Cars, ImageNet and its variants, the FedBN DomainNet /
Office-Caltech10 releases, the DomainBed datasets).

Never called by the tests except through `manual_steps` (no network in tests).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from data.catalog import dataset_info
from data.loaders.domainbed import DUPLICATES_URL
from data.loaders.split_zhou import SPLIT_ZHOU_LINKS

_COOP_DATASETS_MD = "https://github.com/KaiyangZhou/CoOp/blob/main/DATASETS.md"

# Other files CoOp's DATASETS.md links (the split files: data.loaders.split_zhou.SPLIT_ZHOU_LINKS).
FLOWERS_CAT_TO_NAME = "https://drive.google.com/file/d/1AkcxCXeK_RCGCEC_GvmWxjcjaNhu-at0/view?usp=sharing"
UCF101_MIDFRAMES = "https://drive.google.com/file/d/10Jqome3vtUA2keJkNanAiFpgbyC9Hc2O/view?usp=sharing"
# FedBN's release moved to Hugging Face in November 2025 (med-air/FedBN README, 2025-11-13).
_FEDBN_HF = "https://huggingface.co/datasets/Jemary/FedBN_Dataset/blob/main"
FEDBN_DOMAINNET_SPLIT = f"{_FEDBN_HF}/domainnet_dataset.zip"
FEDBN_OFFICE = f"{_FEDBN_HF}/office_caltech_10_dataset.zip"
_VISDA = "http://csr.bu.edu/ftp/visda/2019/multi-source"
_DOMAINNET_DOMAINS = ("clipart", "infograph", "painting", "quickdraw", "real", "sketch")
# DomainNet's archives as DomainBed's download.py fetches them (clipart and painting
# from groundtruth/), for the full 345-class dataset ...
DOMAINNET_ZIPS = {
    d: f"{_VISDA}/groundtruth/{d}.zip" if d in ("clipart", "painting") else f"{_VISDA}/{d}.zip"
    for d in _DOMAINNET_DOMAINS
}
# ... and as FedBN's README links them (all six from multi-source/), for its 10-class split.
FEDBN_DOMAINNET_ZIPS = {d: f"{_VISDA}/{d}.zip" for d in _DOMAINNET_DOMAINS}

# Datasets torchvision can fetch: name -> (torchvision class, kwargs, moves from the
# staging folder into the dataset folder: (source relative to staging, target relative to folder)).
TORCHVISION = {
    "cifar10": ("CIFAR10", {}, []),
    "cifar100": ("CIFAR100", {}, []),
    "caltech101": (
        "Caltech101",
        {"target_type": "category"},
        [("caltech101/101_ObjectCategories", "101_ObjectCategories")],
    ),
    "oxford_pets": (
        "OxfordIIITPet",
        {},
        [("oxford-iiit-pet/images", "images"), ("oxford-iiit-pet/annotations", "annotations")],
    ),
    "oxford_flowers": (
        "Flowers102",
        {},
        [
            ("flowers-102/jpg", "jpg"),
            ("flowers-102/imagelabels.mat", "imagelabels.mat"),
            ("flowers-102/setid.mat", "setid.mat"),
        ],
    ),
    "food101": ("Food101", {}, [("food-101/images", "images"), ("food-101/meta", "meta")]),
    "dtd": ("DTD", {}, [("dtd/dtd/images", "images"), ("dtd/dtd/labels", "labels"), ("dtd/dtd/imdb", "imdb")]),
    "sun397": ("SUN397", {}, [("SUN397", "SUN397")]),
    "eurosat": ("EuroSAT", {}, [("eurosat/2750", "2750")]),
    "fgvc_aircraft": (
        "FGVCAircraft",
        {},
        [
            (f"fgvc-aircraft-2013b/data/{part}", part)
            for part in (
                "images",
                "variants.txt",
                "images_variant_train.txt",
                "images_variant_val.txt",
                "images_variant_test.txt",
            )
        ],
    ),
}
# The files torchvision fetches for each of them (from torchvision's dataset classes), and the
# folder each archive's content goes to: what a user downloads by hand when torchvision cannot.
_VGG = "https://www.robots.ox.ac.uk/~vgg/data"
TORCHVISION_FILES = {
    "cifar10": ["https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"],
    "cifar100": ["https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"],
    "caltech101": ["https://data.caltech.edu/records/mzrjq-6wc02/files/caltech-101.zip"],
    "oxford_pets": [f"{_VGG}/pets/data/images.tar.gz", f"{_VGG}/pets/data/annotations.tar.gz"],
    "oxford_flowers": [f"{_VGG}/flowers/102/{f}" for f in ("102flowers.tgz", "imagelabels.mat", "setid.mat")],
    "food101": ["http://data.vision.ee.ethz.ch/cvl/food-101.tar.gz"],
    "dtd": [f"{_VGG}/dtd/download/dtd-r1.0.1.tar.gz"],
    "sun397": ["http://vision.princeton.edu/projects/2010/SUN/SUN397.tar.gz"],
    "eurosat": [
        "https://huggingface.co/datasets/torchgeo/eurosat/resolve/c877bcd43f099cd0196738f714544e355477f3fd/EuroSAT.zip"
    ],
    "fgvc_aircraft": [f"{_VGG}/fgvc-aircraft/archives/fgvc-aircraft-2013b.tar.gz"],
}
# The Stanford Cars archives (torchvision can no longer fetch them; CoOp's DATASETS.md names these files).
STANFORD_CARS_FILES = ("cars_train.tgz", "cars_test.tgz", "car_devkit.tgz", "cars_test_annos_withlabels.mat")
STANFORD_CARS_MIRROR = "https://www.kaggle.com/datasets/jessicali9530/stanford-cars-dataset"
DOMAINBED_DOWNLOAD = "https://github.com/facebookresearch/DomainBed/blob/main/domainbed/scripts/download.py"
# TerraIncognita's sources as DomainBed's download.py fetches them since its June 2024 fix.
_LILA = "https://storage.googleapis.com/public-datasets-lila/caltechcameratraps"
TERRA_IMAGES = f"{_LILA}/eccv_18_all_images_sm.tar.gz"
TERRA_ANNOTATIONS = f"{_LILA}/eccv_18_annotations.tar.gz"
IMAGENET_VARIANT_STEPS = {
    "imagenet_v2": (
        "https://huggingface.co/datasets/vaishaal/ImageNetV2/resolve/main/imagenetv2-matched-frequency.tar.gz",
        "imagenetv2-matched-frequency-format-val/<0..999>/",
    ),
    "imagenet_a": ("https://people.eecs.berkeley.edu/~hendrycks/imagenet-a.tar", "imagenet-a/<wnid>/"),
    "imagenet_r": ("https://people.eecs.berkeley.edu/~hendrycks/imagenet-r.tar", "imagenet-r/<wnid>/"),
}


def manual_steps(name: str, root: Path) -> list[str]:
    """The steps a user must do by hand to complete dataset `name` under `root`."""
    info = dataset_info(name)
    folder = info.path(Path(root))
    steps = [
        *_archive_steps(name, folder),
        *_domain_steps(name, root, folder),
        *_split_file_steps(name, folder),
        *_fedbn_steps(name, root, folder),
    ]
    if not steps and name not in TORCHVISION:  # a dataset the suite knows no steps for (a plugin's): its own word
        steps.append(f"{info.how_to_get} Expected layout: {info.layout} (under {folder}).")
    return steps


def _archive_steps(name: str, folder: Path) -> list[str]:
    """Steps of the datasets whose images come as archives to fetch by hand (UCF101's mid-frames,
    Stanford Cars, ImageNet and its variants)."""
    steps: list[str] = []
    if name == "ucf101":
        steps.append(
            f"Download UCF-101-midframes.zip from {UCF101_MIDFRAMES} and extract it into {folder}/ "
            f"(giving {folder}/UCF-101-midframes/<class>/*.jpg)."
        )
    if name == "stanford_cars":
        steps.append(
            f"Download {', '.join(STANFORD_CARS_FILES)} (the original Stanford links are gone; a mirror: "
            f"{STANFORD_CARS_MIRROR}) and extract them into {folder}/, giving {folder}/cars_train/, "
            f"{folder}/cars_test/, {folder}/devkit/ and {folder}/cars_test_annos_withlabels.mat."
        )
    if name == "imagenet":
        steps.append(
            "Download ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar from https://image-net.org (needs an "
            f"account); extract the train archive into {folder}/train/<wnid>/ (one inner tar per class) and the "
            f"validation images into {folder}/val/<wnid>/ (sort them by class, e.g. with the usual valprep.sh)."
        )
    if name.startswith("imagenet"):
        from data.loaders.imagenet import CLASSNAMES_LINK

        steps.append(
            f"Download classnames.txt from {CLASSNAMES_LINK} (CoOp's DATASETS.md) and save it as "
            f"{folder / 'classnames.txt'}."
        )
    if name in IMAGENET_VARIANT_STEPS:
        url, inside = IMAGENET_VARIANT_STEPS[name]
        steps.append(f"Download {url} and extract it into {folder}/, giving {folder}/{inside}.")
    if name == "imagenet_sketch":
        steps.append(
            "Download ImageNet-Sketch.zip (links at https://github.com/HaohanWang/ImageNet-Sketch), extract it into "
            f"{folder}/ and rename its folder 'sketch' to 'images', giving {folder}/images/<wnid>/."
        )
    return steps


def _domain_steps(name: str, root: Path, folder: Path) -> list[str]:
    """Steps of the multi-domain datasets DomainBed fetches (PACS, Office-Home, VLCS,
    TerraIncognita, DomainNet), and where their splits come from."""
    steps: list[str] = []
    if name == "pacs":
        steps.append(
            "Download PACS.zip from https://drive.google.com/uc?id=1JFr8f805nMUelQWWmfnJR3y4_SYoN5Pd (the copy "
            f"DomainBed's {DOMAINBED_DOWNLOAD} fetches), unzip it in {Path(root)}/ and rename its folder 'kfold' to "
            f"'{folder.name}', giving {folder}/{{art_painting,cartoon,photo,sketch}}/<class>/."
        )
    if name == "office_home":
        steps.append(
            "Download office_home.zip from https://drive.google.com/uc?id=1uY0pj7oFsjMxRwaD3Sxy0jgel0fsYXLC (or the "
            f"official https://www.hemanthdv.org/officeHomeDataset.html), unzip it in {Path(root)}/ and rename "
            f"'OfficeHomeDataset_10072016' to '{folder.name}', giving {folder}/{{Art,Clipart,Product,Real World}}/<class>/ "
            "(lower-case art, clipart, product, realworld work too)."
        )
    if name == "vlcs":
        steps.append(
            "Download VLCS.tar.gz from https://drive.google.com/uc?id=1skwblH1_okBwxWxmRsp9_qi15hyPpxg8 and extract "
            f"it in {Path(root)}/, giving {folder}/{{Caltech101,LabelMe,VOC2007,SUN09}}/<class>/ "
            "(the layout CALTECH/full, LABELME/full, PASCAL/full, SUN/full works too)."
        )
    if name == "terra_incognita":
        steps.append(
            "Build it as DomainBed's download_terra_incognita does since its June 2024 fix "
            f"({DOMAINBED_DOWNLOAD}): download {TERRA_IMAGES} and {TERRA_ANNOTATIONS} (the ECCV'18 annotation files: "
            "train, cis_val, cis_test, trans_val, trans_test), and copy each image of locations 38, 43, 46 and 100 "
            f"into {folder}/location_<n>/<category>/ for the categories bird, bobcat, cat, coyote, dog, empty, "
            "opossum, rabbit, raccoon, squirrel. Or run DomainBed's script: it leaves exactly that folder."
        )
    if name == "domainnet_full":
        for domain, url in DOMAINNET_ZIPS.items():
            steps.append(f"Download {url} into {folder}/ and unzip it there (giving {folder}/{domain}/<class>/*.jpg).")
        steps.append(
            f"Download DomainBed's list of duplicate images, {DUPLICATES_URL}, into {folder}/: the suite leaves "
            "them out of every split (DomainBed's download.py deletes them)."
        )
    if name in ("pacs", "office_home", "vlcs", "terra_incognita", "domainnet_full"):
        steps.append(
            "No split files are published for this dataset: FedMVP's, placed inside each domain folder "
            "(<domain>/split_<tag>_<domain>.json), are read as they are; for a domain without one the suite "
            "makes one on its first load (seeded, 50/20/30 % train/val/test per class) and writes it into "
            f"{folder}/ (the folder must be writable)."
        )
    return steps


def _split_file_steps(name: str, folder: Path) -> list[str]:
    """Steps for the files beside the images: CoOp's split file (Zhou et al.), Flowers' class names."""
    steps: list[str] = []
    if name in SPLIT_ZHOU_LINKS:
        from data.loaders.coop import COOP_DATASETS

        split_name = COOP_DATASETS[name][2]
        steps.append(
            f"Download {split_name} from {SPLIT_ZHOU_LINKS[name]} (CoOp's DATASETS.md, {_COOP_DATASETS_MD}) "
            f"and save it as {folder / split_name}."
        )
    if name == "oxford_flowers":
        steps.append(
            f"Optional: download cat_to_name.json from {FLOWERS_CAT_TO_NAME} into {folder}/ "
            "(class names are read from the split file)."
        )
    return steps


def _fedbn_steps(name: str, root: Path, folder: Path) -> list[str]:
    """Steps of the datasets in FedBN's splits (its DomainNet subset, Office-Caltech-10)."""
    steps: list[str] = []
    if name == "domainnet":
        steps.append(
            f"Download FedBN's DomainNet split (domainnet_dataset.zip) from {FEDBN_DOMAINNET_SPLIT} into "
            f"{Path(root)}/ and unzip it there, giving {folder}/<domain>_train.pkl and <domain>_test.pkl."
        )
        for domain, url in FEDBN_DOMAINNET_ZIPS.items():
            steps.append(f"Download {url} into {folder}/ and unzip it there (giving {folder}/{domain}/<class>/*.jpg).")
    if name == "office_caltech10":
        steps.append(
            f"Download FedBN's office_caltech_10_dataset.zip from {FEDBN_OFFICE} into {Path(root)}/ and unzip it "
            f"there, giving {folder}/<domain>/<class>/* and {folder}/<domain>_{{train,test}}.pkl "
            "for amazon, caltech, dslr, webcam."
        )
    return steps


def torchvision_manual_steps(name: str, root: Path) -> list[str]:
    """The files torchvision would fetch for `name`, and where their content goes, to do by hand."""
    root = Path(root)
    folder = dataset_info(name).path(root)
    urls = TORCHVISION_FILES[name]
    _, _, moves = TORCHVISION[name]
    if not moves:  # CIFAR: torchvision's own folder is the suite's
        return [f"Download {urls[0]} and extract it into {root}/, giving {folder}/."]
    layout = ", ".join(f"{folder / target}" for _, target in moves)
    files = " and ".join(urls)
    return [f"Download {files}, extract the archives and move their content so that these exist: {layout}."]


def torchvision_download(name: str, root: Path, log: Callable[[str], None] = print) -> None:
    """Fetch `name` with torchvision and move its files into the suite's layout under `root`.
    A failed download (no network) removes every folder it created, so the data root is
    left as it was."""
    if name not in TORCHVISION:
        raise ValueError(f"torchvision cannot download {name!r}; see `manual_steps`")
    root = Path(root)
    created = [p for p in (root, root / ".downloads", root / ".downloads" / name) if not p.exists()]
    try:
        _torchvision_download(name, root, log)
    except BaseException:
        for path in created:  # the outermost first: what it holds was created by this call
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
                break
        raise


def _torchvision_download(name: str, root: Path, log: Callable[[str], None]) -> None:
    import torchvision.datasets as tvd

    class_name, kwargs, moves = TORCHVISION[name]
    folder = dataset_info(name).path(root)
    if not moves:  # CIFAR: torchvision's own folder is the suite's folder
        log(f"downloading {name} with torchvision.datasets.{class_name} into {root} ...")
        getattr(tvd, class_name)(root=str(root), download=True, **kwargs)
        return
    staging = root / ".downloads" / name
    log(f"downloading {name} with torchvision.datasets.{class_name} into {staging} ...")
    getattr(tvd, class_name)(root=str(staging), download=True, **kwargs)
    folder.mkdir(parents=True, exist_ok=True)
    for source, target in moves:
        src, dst = staging / source, folder / target
        if dst.exists():
            log(f"kept existing {dst}")
        elif src.exists():
            shutil.move(str(src), str(dst))
            log(f"moved {src} -> {dst}")
    log(f"the downloaded archives stay in {staging}; delete that folder to free space.")
