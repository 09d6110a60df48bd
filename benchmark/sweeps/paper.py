"""The papers' reference numbers (benchmark/reference/paper_tables.csv): the pFedMMA paper's
tables, the FedMVP paper's (base-to-new over 9 datasets, DomainBed multi-source
single-target, ImageNet to its variants) and FedTPG's released cross-dataset log."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

REFERENCE_CSV = Path(__file__).resolve().parents[1] / "reference" / "paper_tables.csv"

# Registry names -> the names the paper's tables use.
PAPER_METHOD_NAMES = {
    "zeroshot": "CLIP",
    "promptfl": "PromptFL",
    "fedotp": "FedOTP",
    "fedpgp": "FedPGP",
    "pfedmoap": "pFedMoAP",
    "clip_adapter": "CLIP-Adapter",
    "lora": "LoRA",
    "pfedmma": "pFedMMA",
    "fedtpg": "FedTPG",
    "fedmvp": "FedMVP",
    "fedmaple": "FedMaPLe",
    "fedclip": "FedCLIP",
    "fedcocoop": "FedCoCoOp",
    "fedvpt": "FedVPT",
}
# Other names the papers give our methods.
PAPER_ALIASES = {"ZS-CLIP": "zeroshot"}

# Which of our (dataset, metric) cells a paper row compares with, per paper table.
# base2novel: the paper gives 7-dataset averages; featureshift: per-dataset domain averages.
PAPER_DATASETS = {"DomainNet": "domainnet", "Office-Caltech10": "office_caltech10"}
PAPER_METRICS = {"Acc": "Avg"}

# Tables whose columns are datasets: paper column -> (our table section, our metric).
# The FedMVP DomainBed table: one section per dataset, Acc = its target (or the mean over
# targets); ImageNet to its variants and cross-dataset: one run, a metric per test dataset.
PAPER_COLUMNS = {
    "fedmvp_msst": {
        "PACS": ("pacs", "Acc"),
        "OfficeHome": ("office_home", "Acc"),
        "VLCS": ("vlcs", "Acc"),
        "TerraInc": ("terra_incognita", "Acc"),
        "DomainNet": ("domainnet_full", "Acc"),
        "Avg": ("Average", "Acc"),
    },
    "fedmvp_imagenet": {
        "IN": ("Average", "imagenet"),
        "IN-V2": ("Average", "imagenet_v2"),
        "IN-S": ("Average", "imagenet_sketch"),
        "IN-A": ("Average", "imagenet_a"),
        "IN-R": ("Average", "imagenet_r"),
        "Avg": ("Average", "Avg"),
    },
    "fedtpg_crossdata_log": {"Avg10": ("Average", "Avg"), "Local_imagenet": ("Average", "Local")},
}


def reference_numbers(table: str) -> pd.DataFrame:
    """Rows of the paper's table `table` as (method, dataset, metric, paper): `method` in
    registry names, `dataset` 'Average' or one of ours, `metric` in our metric names."""
    frame = pd.read_csv(REFERENCE_CSV)
    frame = frame[frame["table"] == table]
    to_registry = {v: k for k, v in PAPER_METHOD_NAMES.items()} | PAPER_ALIASES
    columns = PAPER_COLUMNS.get(table, {})
    rows = []
    for row in frame.itertuples():
        dataset = next((ours for paper, ours in PAPER_DATASETS.items() if row.setting.startswith(paper)), "Average")
        metric = PAPER_METRICS.get(row.metric, row.metric)
        if table in PAPER_COLUMNS:
            dataset, metric = columns.get(row.metric, ("Average", row.metric))
        rows.append(
            {
                "method": to_registry.get(row.method, row.method),
                "dataset": dataset,
                "metric": metric,
                "paper": float(row.value),
                "source": row.source,
            }
        )
    return pd.DataFrame(rows, columns=["method", "dataset", "metric", "paper", "source"])
