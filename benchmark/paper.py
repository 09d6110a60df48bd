"""The paper's reference numbers (shared/reference/paper_tables.csv, copied into the package)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

REFERENCE_CSV = Path(__file__).parent / "reference" / "paper_tables.csv"

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
}

# Which of our (dataset, metric) cells a paper row compares with, per paper table.
# base2novel: the paper gives 7-dataset averages; featureshift: per-dataset domain averages.
PAPER_DATASETS = {"DomainNet": "domainnet", "Office-Caltech10": "office_caltech10"}
PAPER_METRICS = {"Acc": "Avg"}


def reference_numbers(table: str) -> pd.DataFrame:
    """Rows of the paper's table `table` as (method, dataset, metric, paper): `method` in
    registry names, `dataset` 'Average' or one of ours, `metric` in our metric names."""
    frame = pd.read_csv(REFERENCE_CSV)
    frame = frame[frame["table"] == table]
    to_registry = {v: k for k, v in PAPER_METHOD_NAMES.items()}
    rows = []
    for row in frame.itertuples():
        dataset = next((ours for paper, ours in PAPER_DATASETS.items() if row.setting.startswith(paper)), "Average")
        rows.append(
            {
                "method": to_registry.get(row.method, row.method),
                "dataset": dataset,
                "metric": PAPER_METRICS.get(row.metric, row.metric),
                "paper": float(row.value),
                "source": row.source,
            }
        )
    return pd.DataFrame(rows, columns=["method", "dataset", "metric", "paper", "source"])
