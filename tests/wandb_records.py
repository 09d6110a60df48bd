"""Read an offline W&B run back: the records of its `.wandb` transaction log.

wandb (>= 0.19) writes the log from its Go core and no longer ships a Python reader, so
this decodes the documented on-disk format: a 7-byte file header (":W&B", magic 0xBEE1,
version), then LevelDB-log blocks of 32 KiB made of chunks (crc32 4 bytes, length 2 bytes
little-endian, type 1 byte: FULL, FIRST, MIDDLE, LAST), whose payloads are serialized
`wandb_internal_pb2.Record` messages.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 32 * 1024
FILE_HEADER = 7
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path):
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    position, pending = FILE_HEADER, b""
    while position + CHUNK_HEADER <= len(data):
        left_in_block = BLOCK - position % BLOCK
        if left_in_block < CHUNK_HEADER:  # block trailer padding
            position += left_in_block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + CHUNK_HEADER])
        payload = data[position + CHUNK_HEADER : position + CHUNK_HEADER + length]
        position += CHUNK_HEADER + length
        if kind == 0 and length == 0:
            continue
        if kind in (FULL, FIRST):
            pending = payload
        else:
            pending += payload
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


@dataclass
class OfflineRun:
    config: dict = field(default_factory=dict)
    tags: list = field(default_factory=list)
    name: str = ""
    project: str = ""
    entity: str = ""
    group: str = ""
    job_type: str = ""
    history: list = field(default_factory=list)  # one dict per history row
    summary: dict = field(default_factory=dict)
    metric_definitions: list = field(default_factory=list)  # (name, step_metric) pairs
    exit_code: int | None = None
    artifacts: list = field(default_factory=list)  # (name, type)


def read_offline_run(folder: Path) -> OfflineRun:
    """Decode the `run-*.wandb` file of an offline run folder (…/wandb/offline-run-*)."""
    (log,) = Path(folder).glob("*.wandb")
    run = OfflineRun()
    for record in records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.name = record.run.display_name
            run.project, run.entity, run.group = record.run.project, record.run.entity, record.run.run_group
            run.job_type = record.run.job_type
            run.tags = list(record.run.tags)
            for item in record.run.config.update:
                run.config[item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                run.config[item.key] = json.loads(item.value_json)
        elif kind == "history":
            row = {}
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            run.history.append(row)
        elif kind == "summary":
            for item in record.summary.update:
                key = item.key or "/".join(item.nested_key)
                run.summary[key] = json.loads(item.value_json)
        elif kind == "metric":
            run.metric_definitions.append((record.metric.name or record.metric.glob_name, record.metric.step_metric))
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
        elif kind == "artifact":
            run.artifacts.append((record.artifact.name, record.artifact.type))
    return run
