"""The FedTPG / FedMVP generalization protocols: class-chunk federations over several
datasets (classchunk), multi-source single-target domain generalization (msst) and
training on one dataset to test on others (transfer)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from protocol_fakes import _fake

from benchmark.config import ConfigError, build_config
from benchmark.runs.identity import cell_hash, run_name
from data.combined import combine, members_of
from data.partition import ChunkGroup, chunk_classes, chunk_count, class_chunk_partition

# ---------------------------------------------------------------------------------------
# Partitions: the client counts and class blocks of the authors' harness

NINE = {  # the base-to-new datasets in the authors' order, with their class counts
    "caltech101": 100,
    "oxford_flowers": 102,
    "fgvc_aircraft": 100,
    "ucf101": 101,
    "oxford_pets": 37,
    "food101": 101,
    "dtd": 47,
    "stanford_cars": 196,
    "sun397": 397,
}
NINE_BLOCKS = {
    "caltech101": [20, 30],
    "oxford_flowers": [20, 20, 11],
    "fgvc_aircraft": [20, 30],
    "ucf101": [20, 20, 11],
    "oxford_pets": [19],
    "food101": [20, 20, 11],
    "dtd": [24],
    "stanford_cars": [20, 20, 20, 20, 18],
    "sun397": [20] * 9 + [19],
}


def _labels(num_classes: int, per_class: int = 2) -> list[int]:
    return [c for c in range(num_classes) for _ in range(per_class)]


def test_nine_dataset_base_classes_make_30_clients_with_the_published_sizes():
    train_labels, groups, offset = [], [], 0
    for name, n in NINE.items():
        base = range(offset, offset + math.ceil(n / 2))
        groups.append(ChunkGroup(name, tuple(base)))
        train_labels += [offset + c for c in _labels(n)]
        offset += n
    partition = class_chunk_partition(train_labels, groups, 20, 8, seed=1, protocol="classchunk")
    assert len(partition.clients) == 30
    for name, sizes in NINE_BLOCKS.items():
        assert [len(c.class_ids) for c in partition.clients if c.domain == name] == sizes
    # contiguous blocks in label order, the last one taking the rest, nothing shared
    caltech = [c.class_ids for c in partition.clients if c.domain == "caltech101"]
    assert caltech == [tuple(range(20)), tuple(range(20, 50))]
    flat = [k for c in partition.clients for k in c.class_ids]
    assert len(flat) == len(set(flat)) == sum(math.ceil(n / 2) for n in NINE.values())
    # a client trains on its own classes only, every image of them (2 < 8 shots here)
    for client in partition.clients:
        assert {train_labels[i] for i in client.train_indices} == set(client.class_ids)
        assert client.train_classes == client.class_ids


@pytest.mark.parametrize(
    "num_classes, per_client, sizes",
    [
        (65, 20, [20, 20, 25]),  # OfficeHome, all classes, per source domain
        (345, 20, [20] * 16 + [25]),  # DomainNet, all classes, per source domain
        (7, 20, [7]),  # PACS
        (5, 20, [5]),  # VLCS
        (10, 20, [10]),  # TerraIncognita: 0.5 rounds to 0, at least one client
        (50, 20, [20, 30]),  # Caltech101 base: 2.5 rounds half to even -> 2
        (1000, 5, [5] * 200),  # ImageNet at 5 classes per client
        (1000, 20, [20] * 50),  # ImageNet at the default 20
    ],
)
def test_chunk_sizes_round_half_to_even(num_classes, per_client, sizes):
    assert [len(b) for b in chunk_classes(range(num_classes), per_client)] == sizes
    assert chunk_count(num_classes, per_client) == len(sizes)


def test_rounding_is_half_to_even_not_half_up():
    assert [chunk_count(m, 20) for m in (10, 30, 50, 70, 90)] == [1, 2, 2, 4, 4]  # 0.5 1.5 2.5 3.5 4.5


def test_domain_clients_draw_only_their_domain_images():
    # 3 domains x 65 classes x 10 images, every class in every domain (OfficeHome-like)
    labels = [c for _ in range(3) for c in range(65) for _ in range(10)]
    domains = [d for d in ("art", "clipart", "product") for _ in range(650)]
    groups = [
        ChunkGroup(d, tuple(range(65)), tuple(i for i, x in enumerate(domains) if x == d)) for d in ("art", "clipart")
    ]
    partition = class_chunk_partition(labels, groups, 20, 8, seed=3, protocol="msst", targets=("product",))
    assert [len(c.class_ids) for c in partition.clients] == [20, 20, 25, 20, 20, 25]
    for client in partition.clients:
        assert {domains[i] for i in client.train_indices} == {client.domain}
        assert len(client.train_indices) == 8 * len(client.class_ids)
    assert partition.targets == ("product",)
    again = class_chunk_partition(labels, groups, 20, 8, seed=3, protocol="msst", targets=("product",))
    assert again.hash == partition.hash
    other = class_chunk_partition(labels, groups, 20, 8, seed=4, protocol="msst", targets=("product",))
    assert other.hash != partition.hash  # the few-shot sample follows the run seed


def test_a_class_without_training_images_is_an_error():
    with pytest.raises(ValueError, match="class 3 has no training image in domain art"):
        class_chunk_partition([0, 1, 2, 4], [ChunkGroup("art", (0, 1, 2, 3, 4), (0, 1, 2, 3))], 20, 8, 1, "msst")


def test_partition_manifest_records_targets():
    partition = class_chunk_partition(
        _labels(12), [ChunkGroup("a", tuple(range(12)))], 5, 1, 1, "transfer", targets=("b", "c")
    )
    assert list(partition.manifest()["targets"]) == ["b", "c"]
    plain = class_chunk_partition(_labels(12), [ChunkGroup("a", tuple(range(12)))], 5, 1, 1, "classchunk")
    assert "targets" not in plain.manifest()  # protocols without targets keep their old hash


# ---------------------------------------------------------------------------------------
# Several datasets in one run


def test_combined_dataset_keeps_each_member_in_its_own_label_block():
    a, b, c = _fake("a", 4), _fake("b", 6), _fake("c", 3)
    combined = combine("a+b", [a, b], [c])
    members = members_of(combined)
    assert [(m.name, m.offset, m.num_classes, m.trains) for m in members] == [
        ("a", 0, 4, True),
        ("b", 4, 6, True),
        ("c", 10, 3, False),
    ]
    assert len(combined.train) == len(a.train) + len(b.train)  # c is tested only
    assert len(combined.test) == len(a.test) + len(b.test) + len(c.test)
    for member, part in zip(members, (a, b, c)):
        got = [combined.test.labels[i] - member.offset for i in member.test_indices]
        assert got == part.test.labels
        assert [combined.class_names[k] for k in member.class_ids] == part.class_names
    # an image is the one of its member
    i = members[1].test_start + 5
    assert torch.equal(combined.test[i][0], b.test[5][0]) and combined.test[i][1] == b.test.labels[5] + 4


def test_dataset_option_takes_a_list_or_a_plus_joined_string():
    from_list = build_config({"dataset": ["dtd", "caltech101"], "protocol": "classchunk"})
    from_text = build_config({"dataset": "dtd+caltech101", "protocol": "classchunk"})
    assert from_list.dataset == "dtd+caltech101" and from_list.datasets == ["dtd", "caltech101"]
    assert cell_hash(from_list) == cell_hash(from_text)
    assert cell_hash(build_config({"dataset": "caltech101+dtd", "protocol": "classchunk"})) != cell_hash(from_text)
    many = build_config({"dataset": "+".join(NINE), "protocol": "classchunk"})
    assert run_name(many).startswith("promptfl_caltech101+8more_classchunk_")
    for bad in ("dtd+", "dtd+dtd", "+dtd"):
        with pytest.raises(ConfigError, match="dataset names joined by"):
            build_config({"dataset": bad})


# ---------------------------------------------------------------------------------------
# End to end on the toy datasets (tiny untrained CLIP: the numbers are not the point here)


def _toy_run(tmp_path, **options):
    from conftest import TINY

    from benchmark.runs.runner import run_experiment

    base = dict(
        backbone=TINY,
        pretrained="none",
        out=str(tmp_path / "runs"),
        shots=2,
        rounds=1,
        local_epochs=1,
        batch_size=16,
        seed=1,
        wandb="disabled",
        method="promptfl",
    )
    return run_experiment(build_config({**base, **options}), progress=False)


@pytest.mark.slow  # ~2.5 min on the shared 2-core machine: renders 3 toy datasets
def test_classchunk_runs_over_three_toy_datasets(tmp_path):
    import json

    result = _toy_run(tmp_path, dataset="toy+toy_shapes+toy_patterns", protocol="classchunk", classes_per_client=8)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["clients"] == 2 + 2 + 2  # 16 base classes each in blocks of 8
    assert set(summary["metrics"]) == {"Local", "Base", "New", "HM"}
    assert set(summary["details"]) == {
        f"{d}/{m}" for d in ("toy", "toy_shapes", "toy_patterns") for m in ("Local", "Base", "New")
    }
    for metric in ("Local", "Base", "New"):
        per_dataset = [summary["details"][f"{d}/{metric}"] for d in ("toy", "toy_shapes", "toy_patterns")]
        assert summary["metrics"][metric] == pytest.approx(np.mean(per_dataset))
    assert len(result.federation.rounds[0].clients) == 6  # every client of every dataset trains


@pytest.mark.slow
def test_msst_and_transfer_run_on_the_toy_datasets(tmp_path):
    msst = _toy_run(tmp_path, dataset="toy_domains", protocol="msst", target="crowded", classes_per_client=5)
    assert msst.summary["clients"] == 3 * 2 and set(msst.summary["metrics"]) == {"Acc"}
    assert "_to-crowded_" in msst.run_dir.name
    transfer = _toy_run(
        tmp_path,
        dataset="toy",
        protocol="transfer",
        classes_per_client=8,
        eval_datasets="toy_shapes+toy_patterns",
        participation=0.5,
        rounds=2,
    )
    metrics = transfer.summary["metrics"]
    assert set(metrics) == {"Local", "toy_shapes", "toy_patterns", "Avg"} and transfer.summary["clients"] == 4
    assert metrics["Avg"] == pytest.approx((metrics["toy_shapes"] + metrics["toy_patterns"]) / 2)
    # the authors' sampling over the partition's 4 clients: all in round 1, then int(0.5 * 4)
    assert [len(r.clients) for r in transfer.federation.rounds] == [4, 2]


# ---------------------------------------------------------------------------------------
# Presets, leave-one-domain-out tables and the papers' numbers


def test_fedmvp_base2new_dry_run_lists_every_cell_and_the_missing_data(tmp_path, capsys):
    from benchmark.cli import main
    from benchmark.sweeps.presets import load_preset

    nodata = tmp_path / "nodata"
    assert (
        main(
            ["reproduce", "fedmvp_base2new", "--dry-run", "--cells", "--data-root", str(nodata), "--out", str(tmp_path)]
        )
        == 0
    )
    out = capsys.readouterr().out
    preset = load_preset("fedmvp_base2new")
    n_cells = len(preset.methods) * len(preset.seeds)
    assert n_cells >= 6 and f"{n_cells} cells: 0 done, {n_cells} to run" in out
    assert "client sampling: authors (all 30 clients every round)" in out  # counted from the catalog
    for name in NINE:  # each of the 9 datasets, with how to get it
        assert f"missing dataset {name}: " in out
    for dataset in ("caltech101", "dtd", "sun397"):
        assert f"missing dataset {dataset}: expected {nodata}" in out and "fedbench data download" in out
    for variant in preset.methods:
        for seed in preset.seeds:
            assert f"  {variant.label} | nine_datasets | - | - | seed {seed} | needs " in out
    config = preset.cells()[0].config
    assert config.datasets == list(NINE) and config.protocol == "classchunk" and config.shots == 8


def test_msst_presets_hold_out_the_fixed_target_or_every_domain():
    from benchmark.evaluation.protocols.msst import FIXED_TARGETS
    from benchmark.sweeps.presets import load_preset
    from data.catalog import dataset_info

    fixed = load_preset("fedmvp_msst").cells(seeds=[1], methods=["zeroshot"])
    assert [(c.dataset, c.part, c.config.protocol_args["target"]) for c in fixed] == [
        (d, FIXED_TARGETS[d], FIXED_TARGETS[d])
        for d in ("pacs", "office_home", "vlcs", "terra_incognita", "domainnet_full")
    ]
    from benchmark.protocol_registry import get_protocol

    planned = {c.dataset: get_protocol("msst").planned_clients(c.config) for c in fixed}
    assert planned == {"pacs": 3, "office_home": 9, "vlcs": 3, "terra_incognita": 3, "domainnet_full": 5 * 17}
    imagenet = load_preset("fedmvp_imagenet").cells(seeds=[1], methods=["zeroshot"])[0].config
    assert get_protocol("transfer").planned_clients(imagenet) == 200
    lodo = load_preset("fedmvp_msst_lodo").cells(seeds=[1], methods=["zeroshot"])
    domains = {d: dataset_info(d).domains for d in FIXED_TARGETS}
    assert all(FIXED_TARGETS[d] in domains[d] for d in FIXED_TARGETS)  # the fixed targets are real domains
    assert [(c.dataset, c.part) for c in lodo] == [
        (d, t) for d in FIXED_TARGETS if d != "toy_domains" for t in domains[d]
    ]
    assert len({run_name(c.config) for c in lodo}) == len(lodo) == 4 + 4 + 4 + 4 + 6


def _finish(cell, metrics: dict) -> None:
    """A finished run folder for `cell` holding `metrics` (tables only read summary.json)."""
    from benchmark.runs.results import write_run
    from benchmark.sweeps.tables import run_dir

    write_run(run_dir(cell), cell.config, [], {"metrics": metrics}, {})


def _toy_lodo_preset(tmp_path):
    from benchmark.sweeps.presets import load_preset

    path = tmp_path / "lodo.yaml"
    path.write_text(
        "title: toy LODO\ntargets: lodo\n"
        f"run: {{protocol: msst, classes_per_client: 5, out: {tmp_path / 'runs'}}}\n"
        "datasets: [toy_domains]\nmethods: [zeroshot]\nseeds: [1, 2]\n"
    )
    return load_preset(str(path))


def test_lodo_table_keeps_each_target_and_averages_them_unweighted(tmp_path):
    from benchmark.sweeps.table_stats import summarize
    from benchmark.sweeps.tables import collect

    cells = _toy_lodo_preset(tmp_path).cells()
    assert len(cells) == 2 * 4
    accuracy = {"dusk": 90.0, "tinted": 70.0, "crowded": 60.0, "obstructed": 20.0}
    for cell in cells:
        if not (cell.config.seed == 2 and cell.part == "obstructed"):  # one target still to run
            _finish(cell, {"Acc": accuracy[cell.part] + cell.config.seed})
    long = collect(cells)
    seed1 = long[long.seed == 1].set_index("metric")["value"]
    assert seed1["Acc"] == pytest.approx(np.mean([91, 71, 61, 21]))  # unweighted over targets
    assert seed1["tinted"] == 71.0 and len(seed1) == 5
    seed2 = long[long.seed == 2]
    assert "Acc" not in set(seed2.metric) and len(seed2) == 3  # incomplete: no mean shown
    stats = summarize(long).set_index(["dataset", "metric"])
    assert stats.loc[("toy_domains", "Acc"), "n"] == 1 and stats.loc[("toy_domains", "dusk"), "n"] == 2
    assert stats.loc[("Average", "Acc"), "mean"] == pytest.approx(61.0)


FAKE_METRICS = {
    "fedmvp_base2new": {"Local": 80.0, "Base": 70.0, "New": 75.0, "HM": 74.8},
    "fedmvp_msst": {"Acc": 50.0},
    "fedmvp_msst_lodo": {"Acc": 50.0},
    "fedmvp_imagenet": {
        "Local": 90.0,
        "imagenet": 70.0,
        "imagenet_v2": 60.0,
        "imagenet_sketch": 45.0,
        "imagenet_a": 50.0,
        "imagenet_r": 75.0,
        "Avg": 57.5,
    },
    "fedmvp_crossdata": {"Local": 90.0, **{d: 60.0 for d in (*NINE, "eurosat")}, "Avg": 60.0},
}


# The published numbers, typed from the papers (FedMVP, ICCV 2025: the base-to-new, DomainBed
# and ImageNet tables; FedTPG's released cross-data log for the cross-dataset preset), in the
# suite's names, so that the packaged reference file and its reader are checked, not trusted.
_B2N = {
    "zeroshot": (76.72, 70.51, 75.78, 74.24),
    "promptfl": (81.75, 74.47, 71.70, 75.74),
    "fedtpg": (80.75, 73.68, 76.02, 76.70),
    "fedmaple": (81.63, 74.44, 70.62, 75.29),
    "fedmvp": (81.89, 75.37, 77.82, 78.27),
}
_MSST_DATASETS = ("pacs", "office_home", "vlcs", "terra_incognita", "domainnet_full", "Average")
_MSST = {
    "zeroshot": (96.16, 81.49, 83.29, 33.98, 57.13, 70.41),
    "fedtpg": (90.99, 82.78, 69.77, 26.79, 56.82, 65.43),
    "fedclip": (96.29, 81.74, 82.70, 36.58, 57.85, 71.03),
    "fedmvp": (97.28, 84.15, 85.12, 37.36, 61.17, 73.02),
}
_IMAGENET_METRICS = ("imagenet", "imagenet_v2", "imagenet_sketch", "imagenet_a", "imagenet_r", "Avg")
_IMAGENET = {"fedtpg": (69.51, 62.90, 47.65, 49.97, 76.35, 59.22), "fedmvp": (70.87, 63.72, 50.93, 51.76, 77.23, 60.91)}
_CROSSDATA = {
    "Local": 93.056,
    "caltech101": 93.793,
    "oxford_flowers": 70.402,
    "fgvc_aircraft": 23.732,
    "ucf101": 66.825,
    "oxford_pets": 91.060,
    "food101": 86.145,
    "dtd": 45.449,
    "stanford_cars": 64.731,
    "sun397": 66.826,
    "eurosat": 44.778,
    "Avg": 65.374,
}
PUBLISHED = {  # preset -> {(method, dataset, metric): published value}
    "fedmvp_base2new": {
        (m, "Average", metric): v for m, row in _B2N.items() for metric, v in zip(("Local", "Base", "New", "HM"), row)
    },
    "fedmvp_msst": {(m, d, "Acc"): v for m, row in _MSST.items() for d, v in zip(_MSST_DATASETS, row)},
    "fedmvp_imagenet": {(m, "Average", k): v for m, row in _IMAGENET.items() for k, v in zip(_IMAGENET_METRICS, row)},
    "fedmvp_crossdata": {("fedtpg", "Average", k): v for k, v in _CROSSDATA.items()},
}
PUBLISHED["fedmvp_msst_lodo"] = PUBLISHED["fedmvp_msst"]  # the same published table


@pytest.mark.parametrize("name", sorted(FAKE_METRICS))
def test_paper_comparison_of_each_fedmvp_preset_carries_the_published_numbers(name, tmp_path):
    from benchmark.sweeps.presets import load_preset
    from benchmark.sweeps.sweep import plan_sweep, render_tables

    preset = load_preset(name)
    cells = preset.cells({"out": str(tmp_path / "runs")})
    for cell in cells:
        if cell.label == "zeroshot":
            _finish(cell, FAKE_METRICS[name])
    files = render_tables(plan_sweep(preset, cells), tmp_path / "results")
    comparison = pd.read_csv(files["paper"])
    published = PUBLISHED[name]
    keys = list(zip(comparison["method"], comparison["dataset"], comparison["metric"]))
    assert sorted(keys) == sorted(published)  # every published number, once, and nothing else
    for key, paper, ours in zip(keys, comparison["paper"], comparison["ours"]):
        assert paper == published[key], key
        method, _, metric = key  # ours beside it for the zero-shot runs, a gap for the rest
        if method == "zeroshot":
            assert ours == pytest.approx(FAKE_METRICS[name][metric]), key
        else:
            assert np.isnan(ours), key


# ---------------------------------------------------------------------------------------
# On the datasets' real on-disk layouts (tiny fakes written by tests/fake_layouts.py)


def test_training_on_a_test_only_variant_is_refused(tmp_path):
    from benchmark.runs.preparation import load_run_dataset

    config = build_config({"dataset": "imagenet+imagenet_a", "protocol": "classchunk", "data_root": str(tmp_path)})
    with pytest.raises(ConfigError, match="'imagenet_a' is a test set only"):
        load_run_dataset(config, None)


def test_attribute_methods_refuse_several_datasets_before_loading_any(tmp_path):
    from conftest import TINY

    from benchmark.runs.runner import run_experiment

    config = build_config(
        {
            "method": "fedmvp",
            "dataset": "toy+toy_shapes",
            "protocol": "classchunk",
            "backbone": TINY,
            "pretrained": "none",
            "wandb": "disabled",
            "out": str(tmp_path),
        }
    )
    with pytest.raises(ConfigError, match="fedmvp reads one dataset's class attribute file"):
        run_experiment(config, write=False, progress=False)
