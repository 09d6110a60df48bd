"""Class attribute files: lookup, validation errors, the toy world's generated file, download."""

from __future__ import annotations

import json
from urllib.error import URLError

import pytest

from data.attributes import AttributeFileError, load_class_attributes
from data.toy import world
from data.toy.datasets import toy_attributes

CLASSES = ["texture_a", "texture_b", "Alarm_Clock"]


def write(folder, name, table):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(table))


def test_file_under_the_data_root_is_read_in_class_order(tmp_path):
    table = {
        "Alarm Clock": ["round face", "has hands"],
        "texture b": ["b1", "b2"],
        "texture a": ["a1", "a2"],
        "unused": ["x", "y"],
    }
    write(tmp_path / "attributes", "dtd", table)
    attributes = load_class_attributes("dtd", CLASSES, tmp_path)
    assert list(attributes.descriptors) == CLASSES  # the dataset's order, not the file's
    assert attributes.of(["Alarm_Clock", "texture_a"]) == [("round face", "has hands"), ("a1", "a2")]
    assert attributes.per_class == 2 and attributes.frame.suffix == "a type of texture, "
    assert attributes.source == str(tmp_path / "attributes" / "dtd.json") and len(attributes.sha256) == 64


def test_attributes_folder_option_wins_over_the_data_root(tmp_path):
    write(tmp_path / "mine", "dtd", {c.replace("_", " "): ["p", "q", "r"] for c in CLASSES})
    attributes = load_class_attributes("dtd", CLASSES, tmp_path / "root", tmp_path / "mine")
    assert attributes.per_class == 3 and attributes.source.startswith(str(tmp_path / "mine"))


def test_missing_file_names_the_dataset_the_place_and_both_ways_to_provide_one(tmp_path):
    with pytest.raises(AttributeFileError) as info:
        load_class_attributes("dtd", CLASSES, tmp_path)
    message = str(info.value)
    assert "'dtd'" in message and str(tmp_path / "attributes" / "dtd.json") in message
    assert "fedbench data download attributes" in message and "--attributes DIR" in message


def test_missing_classes_are_named_with_the_keys_that_match_nothing(tmp_path):
    write(tmp_path / "attributes", "dtd", {"texture a": ["a"], "Alarm clock": ["c"]})
    with pytest.raises(AttributeFileError) as info:
        load_class_attributes("dtd", CLASSES, tmp_path)
    message = str(info.value)
    assert "2 of its 3 classes have no key: 'texture b', 'Alarm Clock'" in message
    assert "match no class: 'Alarm clock'" in message and "'dtd'" in message


@pytest.mark.parametrize(
    "content, expected",
    [
        ("[1, 2]", "must hold a non-empty JSON object"),
        ("{not json", "is not valid UTF-8 JSON"),
        (json.dumps({"texture a": "one string"}), "must be a non-empty list of non-empty strings"),
        (
            json.dumps({"texture a": ["x"], "texture b": ["x", "y"], "Alarm Clock": ["z"]}),
            "needs the same number of descriptors",
        ),
    ],
)
def test_malformed_files_are_refused(tmp_path, content, expected):
    (tmp_path / "attributes").mkdir()
    (tmp_path / "attributes" / "dtd.json").write_text(content)
    with pytest.raises(AttributeFileError, match=expected):
        load_class_attributes("dtd", CLASSES, tmp_path)


def test_toy_world_writes_its_own_file_from_the_generator(tmp_path):
    spec = world.toy_specs()["toy"]
    attributes = load_class_attributes("toy", spec.class_names, tmp_path)
    written = json.loads((tmp_path / "attributes" / "toy.json").read_text())
    assert written == toy_attributes("toy")
    for cls in spec.classes:  # each phrase is the class's own attribute value, or says it varies
        colour, pattern, shape, size = attributes.descriptors[cls.name]
        assert colour == f"{world.COLOUR_NAMES[cls.attr('colour')]} colour"
        assert pattern == f"{world.PATTERNS[cls.attr('pattern')]} pattern"
        assert (shape, size) == ("varied shape", "varied size")  # toy classes are colour x pattern
        assert not any(cls.name in phrase for phrase in attributes.descriptors[cls.name])
    shapes = world.toy_specs()["toy_shapes"]
    first = load_class_attributes("toy_shapes", shapes.class_names, tmp_path).descriptors[shapes.class_names[0]]
    assert first[2].endswith(" shape") and first[2] != "varied shape"
    # An edited file is put back: the generator is the definition of the toy world's attributes.
    (tmp_path / "attributes" / "toy.json").write_text("{}")
    load_class_attributes("toy", spec.class_names, tmp_path)
    assert json.loads((tmp_path / "attributes" / "toy.json").read_text()) == toy_attributes("toy")


def test_download_without_network_prints_the_manual_step(tmp_path, capsys):
    from benchmark.cli.commands.datasets import download_attributes

    calls = []

    def offline(url):  # what urllib raises when no route to GitHub exists
        calls.append(url)
        raise URLError("no network")

    assert download_attributes(tmp_path, fetch=offline) == 1
    out = capsys.readouterr().out
    assert len(calls) == 1  # stops at the first network failure instead of timing out 16 times
    assert "16 attribute file(s) could not be fetched" in out
    assert "https://github.com/mainaksingha01/FedMVP" in out and str(tmp_path / "attributes") in out
    assert "--attributes DIR" in out


def test_download_writes_valid_files_and_keeps_existing_ones(tmp_path, capsys):
    from benchmark.cli.commands.datasets import download_attributes

    (tmp_path / "attributes").mkdir()
    (tmp_path / "attributes" / "dtd.json").write_text('{"mine": ["kept"]}')
    served = json.dumps({"some class": ["a descriptor"]}).encode()
    assert download_attributes(tmp_path, fetch=lambda url: served) == 0
    assert (tmp_path / "attributes" / "dtd.json").read_text() == '{"mine": ["kept"]}'
    assert json.loads((tmp_path / "attributes" / "caltech101.json").read_text()) == {"some class": ["a descriptor"]}


def test_datasets_read_the_authors_file_names(tmp_path):
    write(tmp_path / "attributes", "officehome", {"Alarm Clock": ["round face"]})
    attributes = load_class_attributes("office_home", ["Alarm_Clock"], tmp_path)
    assert attributes.source.endswith("officehome.json") and attributes.frame.kv_source == "descriptors"
    with pytest.raises(AttributeFileError, match="terraincognita.json"):
        load_class_attributes("terra_incognita", ["bobcat"], tmp_path)


# -- the FedMVP code's per-domain sentence frames (descriptors.py, by data_name) ---------------
# (dataset, domain) -> (prefix, suffix), typed from the authors' table, not from data/attributes.py.
AUTHORS_FRAMES = {
    ("pacs", "art_painting"): ("an art painting of a", ""),
    ("pacs", "cartoon"): ("a cartoon of a", ""),
    ("pacs", "photo"): ("a photo of a", ""),
    ("pacs", "sketch"): ("a sketch of a", ""),
    ("office_home", "art"): ("an art of a", ""),
    ("office_home", "clipart"): ("a clipart of a", ""),
    ("office_home", "product"): ("a product image of a", ""),
    ("office_home", "realworld"): ("a realworld image of a", ""),
    ("vlcs", "caltech"): ("a high quality photo of a", "as a standalone object, "),
    ("vlcs", "labelme"): ("a realworld photo of the", ""),
    ("vlcs", "pascal"): ("a realworld photo of a", ""),
    ("vlcs", "sun"): ("a photo of a", "in diverse scenic environments, "),
    ("domainnet_full", "clipart"): ("a clipart of a", ""),
    ("domainnet_full", "infograph"): ("an infograph of a", ""),
    ("domainnet_full", "painting"): ("a painting of a", ""),
    ("domainnet_full", "quickdraw"): ("a quickdraw image of a", ""),
    ("domainnet_full", "real"): ("a real image of a", ""),
    ("domainnet_full", "sketch"): ("a sketch of a", ""),
}


@pytest.mark.parametrize("dataset", ["pacs", "office_home", "vlcs", "domainnet_full"])
def test_each_domain_of_the_four_domainbed_datasets_reads_in_the_authors_frame(tmp_path, dataset):
    from data.catalog import dataset_info
    from methods.fedmvp import attribute_sentence

    write(
        tmp_path / "attributes",
        {"office_home": "officehome", "domainnet_full": "domainnet"}.get(dataset, dataset),
        {"dog": ["four legs"]},
    )
    attributes = load_class_attributes(dataset, ["dog"], tmp_path)
    domains = dataset_info(dataset).domains
    assert sorted(domains) == sorted(d for ds, d in AUTHORS_FRAMES if ds == dataset)  # every domain has one
    for domain in domains:
        prefix, suffix = AUTHORS_FRAMES[dataset, domain]
        frame = attributes.frame_for(domain)
        assert (frame.prefix, frame.suffix) == (prefix, suffix), domain
        # The code attends over the bare descriptors for OfficeHome (every domain), over the sentences otherwise.
        assert frame.kv_source == ("descriptors" if dataset == "office_home" else "sentences")
        sentence = attribute_sentence(frame.prefix, "dog", frame.suffix, "four legs")
        assert sentence == f"{prefix} dog, {suffix}which has four legs"[:77]
    assert attributes.frame_for(None) == attributes.frame  # images of several domains: the dataset's frame
    assert attributes.frame_for("no such domain") == attributes.frame


def test_vlcs_sentences_as_the_authors_write_them(tmp_path):
    from methods.fedmvp import attribute_sentence

    write(tmp_path / "attributes", "vlcs", {"bird": ["feathers"]})
    attributes = load_class_attributes("vlcs", ["bird"], tmp_path)
    caltech, sun = attributes.frame_for("caltech"), attributes.frame_for("sun")
    assert (
        attribute_sentence(caltech.prefix, "bird", caltech.suffix, "feathers")
        == "a high quality photo of a bird, as a standalone object, which has feathers"
    )
    assert (
        attribute_sentence(sun.prefix, "bird", sun.suffix, "feathers")
        == "a photo of a bird, in diverse scenic environments, which has feathers"
    )


def test_the_run_config_records_the_frames_for_methods_that_read_attributes(tmp_path):
    import yaml

    from benchmark.config import build_config
    from benchmark.runs.identity import cell_identity, save_yaml

    config = build_config(dict(method="fedmvp", dataset="pacs", protocol="msst"), {})
    save_yaml(config, tmp_path / "config.yaml")
    frames = yaml.safe_load((tmp_path / "config.yaml").read_text())["identity"]["data"][0]["sentence_frames"]
    assert frames["dataset"] == {"prefix": "a photo of a", "suffix": "", "kv_source": "sentences"}
    assert frames["domains"]["sketch"]["prefix"] == "a sketch of a"
    assert frames["domains"]["art_painting"]["prefix"] == "an art painting of a"
    dtd = cell_identity(build_config(dict(method="fedmvp", dataset="dtd"), {}))["data"][0]["sentence_frames"]
    assert dtd == {"dataset": {"prefix": "a photo of a", "suffix": "a type of texture, ", "kv_source": "sentences"}}
    assert (
        "sentence_frames"
        not in cell_identity(build_config(dict(method="fedtpg", dataset="pacs", protocol="msst"), {}))["data"][0]
    )
