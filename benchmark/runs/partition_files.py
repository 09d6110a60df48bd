"""A partition as a reader sees it: the clients x classes table of training-image counts, as
CSV (one row per client, one column per class) and as a figure (`fedbench partition --plot`,
and every run folder's partition.csv / partition.png)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Sequence

from benchmark.files import atomic_figure, atomic_write
from data.partition import Partition, class_counts


def partition_table(partition: Partition, train_labels: Sequence[int], class_names: Sequence[str]) -> dict:
    """{"classes": names, "counts": clients x classes training-image counts}."""
    return {"classes": list(class_names), "counts": class_counts(partition, train_labels, len(class_names))}


def write_partition_csv(table: dict, path: Path) -> None:
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(["client", *table["classes"]])
    for client, row in enumerate(table["counts"]):
        writer.writerow([client, *row])
    atomic_write(path, text.getvalue())


def plot_partition(table: dict, path: Path, title: str = "") -> None:
    """Clients (rows) x classes (columns), each cell's colour its training-image count."""
    import matplotlib  # lazy: a run imports matplotlib only when it writes its figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts, classes = table["counts"], table["classes"]
    width = min(16.0, 2.0 + 0.25 * len(classes))
    height = min(12.0, 1.5 + 0.3 * len(counts))
    figure, axes = plt.subplots(figsize=(width, height))
    image = axes.imshow(counts, aspect="auto", cmap="viridis", interpolation="nearest")
    axes.set_xlabel(f"class ({len(classes)})")
    axes.set_ylabel(f"client ({len(counts)})")
    if len(classes) <= 40:
        axes.set_xticks(range(len(classes)), classes, rotation=90, fontsize=7)
    if len(counts) <= 40:
        axes.set_yticks(range(len(counts)))
    figure.colorbar(image, ax=axes, label="training images")
    axes.set_title(title)
    figure.tight_layout()
    atomic_figure(figure, path, dpi=100)
    plt.close(figure)
