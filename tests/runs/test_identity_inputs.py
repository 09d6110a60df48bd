"""Every input a cell's numbers pass through is part of its identity: an edit to any of them
makes new cells (so `reproduce` never files a result of old code or old data under a name
that stands for the new).

Code: the modules reached from the method's, the loader's, the protocol's and the run's
modules by their imports -- including helpers such as `data/loaders/split_zhou.py` (DTD's
split reader) or `data/loaders/image_folders.py` (which orders PACS's files and so decides
its split). The tests edit a copy of the project's packages, never the real files.
Data: every file a load reads besides the images (split files, class-name files) and the
class attribute file of a method that reads one."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import method_config, tiny_config
from fake_layouts import FAKE_NAMES, make_fake_dataset

import benchmark.runs.identity as identity
from benchmark.runs.identity import cell_hash, cell_identity

REAL_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project_copy(tmp_path, monkeypatch):
    """A copy of benchmark/, data/ and methods/ that the identity reads instead of the real
    files; `edit(path)` adds a statement to one of its modules, as a next process would see it."""
    copy = tmp_path / "project"
    for package in ("benchmark", "data", "methods"):
        shutil.copytree(
            REAL_ROOT / package,
            copy / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.pt", "checkpoints", "presets", "reference"),
        )
    monkeypatch.setattr(identity, "ROOT", copy)
    identity.forget_sources()

    def edit(relative: str) -> None:
        path = copy / relative
        path.write_text(path.read_text() + "\nEDITED_BY_THE_TEST = 1\n")
        identity.forget_sources()  # as the next process: it reads the edit

    yield edit
    identity.forget_sources()


@pytest.mark.parametrize(
    "dataset, helper",
    [
        ("dtd", "data/loaders/split_zhou.py"),  # imported by the loader module (coop.py)
        ("dtd", "data/loaders/coop.py"),  # the loader module itself
        ("pacs", "data/loaders/image_folders.py"),  # orders the files, so decides the split
        ("pacs", "data/loaders/domainbed.py"),
    ],
)
def test_editing_a_module_the_loader_imports_makes_new_cells(project_copy, tmp_path, fake_data_root, dataset, helper):
    config = tiny_config(
        fake_data_root, tmp_path, dataset=dataset, protocol="domains" if dataset == "pacs" else "base2novel"
    )
    before = cell_hash(config)
    project_copy(helper)
    assert cell_hash(config) != before, f"editing {helper} kept the {dataset} cell"


@pytest.mark.parametrize(
    "module",
    [
        "data/partition.py",  # the protocol's partitions
        "data/fewshot.py",  # the few-shot sample
        "benchmark/federation/simulator.py",  # the run's flow
        "benchmark/evaluation/accuracy.py",
        "benchmark/prompts.py",  # imported by the method
        "data/base.py",
    ],
)
def test_editing_a_module_on_the_run_path_makes_new_cells(project_copy, tmp_path, fake_data_root, module):
    config = tiny_config(fake_data_root, tmp_path, method="promptfl")
    before = cell_hash(config)
    project_copy(module)
    assert cell_hash(config) != before, f"editing {module} kept the cell"


def test_editing_a_module_no_run_reads_keeps_the_cells(project_copy, tmp_path, fake_data_root):
    """The identity follows the imports, not the whole tree: the table renderer and the
    other loaders are not on a DTD run's path."""
    config = tiny_config(fake_data_root, tmp_path, method="promptfl")
    before = cell_hash(config)
    for module in ("benchmark/sweeps/tables.py", "data/loaders/domainbed.py", "methods/fedotp.py"):
        project_copy(module)
        assert cell_hash(config) == before, f"editing {module} renamed a DTD PromptFL cell"


def _copy_root(fake_data_root: Path, tmp_path: Path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(fake_data_root, root)
    return root


def test_editing_the_split_file_makes_new_cells(tmp_path, fake_data_root):
    root = _copy_root(fake_data_root, tmp_path)
    config = tiny_config(root, tmp_path)
    before = cell_hash(config)
    split_file = root / "dtd" / "split_zhou_DescribableTextures.json"
    split = json.loads(split_file.read_text())
    split["train"], split["test"] = split["train"][:-1], split["test"] + split["train"][-1:]  # one image moved
    split_file.write_text(json.dumps(split))
    assert cell_hash(config) != before
    # the identity names the file's content, not its place: another data root with the same files is the same cell
    other = _copy_root(root, tmp_path / "elsewhere")
    assert cell_hash(tiny_config(other, tmp_path)) == cell_hash(config)


def test_editing_a_class_name_file_makes_new_cells(tmp_path):
    fake = make_fake_dataset("imagenet", tmp_path / "data", num_classes=2)
    config = tiny_config(tmp_path / "data", tmp_path, dataset="imagenet", protocol="base2novel")
    before = cell_hash(config)
    classnames = fake.folder / "classnames.txt"
    classnames.write_text(classnames.read_text().replace("goldfish", "carp"))  # the prompts' class name
    assert cell_hash(config) != before


def test_editing_the_attribute_file_makes_new_cells(tmp_path, fake_data_root):
    config = method_config("fedmvp", fake_data_root, tmp_path)
    other_place = tmp_path / "elsewhere"
    shutil.copytree(config.attributes, other_place)
    before = cell_hash(config)
    attribute_file = Path(config.attributes) / "dtd.json"
    table = json.loads(attribute_file.read_text())
    table["texture a"] = ["a brighter colour", "pattern 0"]
    attribute_file.write_text(json.dumps(table))
    assert cell_hash(config) != before
    # The folder's path is not a result (marked `identity: False`): the same file elsewhere is the same cell.
    assert cell_hash(method_config("fedmvp", fake_data_root, tmp_path, attributes=str(other_place))) == before


def test_editing_the_model_config_of_the_suites_architecture_makes_new_cells(tmp_path, fake_data_root, monkeypatch):
    """With --pretrained none the tiny CLIP is its config file (widths, depths) and a seed."""
    configs = tmp_path / "model_configs"
    shutil.copytree(REAL_ROOT / "benchmark" / "model_configs", configs)
    monkeypatch.setattr(identity, "CONFIG_DIR", configs)
    config = tiny_config(fake_data_root, tmp_path)
    before = cell_hash(config)
    tiny = configs / "fedbench-tiny-vit.json"
    spec = json.loads(tiny.read_text())
    spec["vision_cfg"]["layers"] += 1
    tiny.write_text(json.dumps(spec))
    assert cell_hash(config) != before


def test_a_method_that_reads_no_attributes_ignores_the_attribute_file(tmp_path, fake_data_root):
    folder = tmp_path / "attributes"
    folder.mkdir()
    (folder / "dtd.json").write_text('{"texture a": ["x"]}')
    config = tiny_config(fake_data_root, tmp_path, method="promptfl", attributes=str(folder))
    before = cell_hash(config)
    (folder / "dtd.json").write_text('{"texture a": ["y"]}')
    assert cell_hash(config) == before


def test_a_split_the_suite_makes_is_made_before_the_cell_is_named(tmp_path):
    """DomainBed has no published split: the suite writes one at the first load. The cell
    must be named by that file from the start, or its name would change once it ran."""
    from benchmark.runs.identity import prepare_data
    from data.catalog import load_dataset
    from data.transforms import clip_transforms

    make_fake_dataset("pacs", tmp_path / "data", num_classes=2)
    config = tiny_config(tmp_path / "data", tmp_path, dataset="pacs", protocol="domains")
    with pytest.warns(UserWarning, match="no published split"):
        prepare_data(config)
    named = cell_hash(config)
    load_dataset("pacs", tmp_path / "data", clip_transforms(32, (0.5,) * 3, (0.5,) * 3, False))
    assert cell_hash(config) == named
    assert all(isinstance(v, str) and v != "missing" for v in cell_identity(config)["data"][0]["files"].values())


# Every `open` the process makes, recorded while `_OPENED` is a list (audit hooks cannot be removed).
_OPENED: list | None = None


def _record(event: str, args: tuple) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, Path)):
        _OPENED.append(Path(args[0]))


sys.addaudithook(_record)


@pytest.mark.parametrize("name", FAKE_NAMES)
def test_every_file_a_load_reads_besides_images_is_in_the_identity(tmp_path, name):
    """The declared files (`DatasetInfo.data_files`) are checked against the files a real
    load opens, so a loader that starts reading another file cannot leave it out."""
    global _OPENED
    from data.catalog import dataset_info, load_dataset
    from data.transforms import clip_transforms

    fake = make_fake_dataset(name, tmp_path / "data", num_classes=2)
    info = dataset_info(name)
    if info.prepare is not None:
        with pytest.warns(UserWarning):
            info.prepare(fake.folder)
    _OPENED = []
    try:
        load_dataset(name, tmp_path / "data", clip_transforms(32, (0.5,) * 3, (0.5,) * 3, False))
        opened = {p.resolve() for p in _OPENED if p.resolve().is_relative_to(fake.folder.resolve())}
    finally:
        _OPENED = None
    images = {p.resolve() for p in fake.files}
    declared = {p.resolve() for p in (info.data_files(fake.folder) if info.data_files else ())}
    assert opened - images <= declared, (
        f"{name} reads files its identity leaves out: {sorted(opened - images - declared)}"
    )
    assert opened - images, f"{name}: the load opened no file besides images (the check would be empty)"
