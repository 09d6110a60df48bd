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
