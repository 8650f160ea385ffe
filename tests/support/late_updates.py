"""A merge-on-read trips table whose log holds the cases a compaction's merge must get right: late updates (the base
wins), ordering-field ties (the later record wins), several versions of a key, delete blocks with and without a
winning ordering value, deletes undone by later inserts, inserts of new keys. Shared by the bounded-memory
(spill) and whole-file-lookup tests."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa

from tableservice.hudi.action.compact import CompactionTask
from tableservice.hudi.action.tasks import CompactionInput, compaction_tasks
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.fs_view import FileSlice
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import TRIP_SCHEMA
from tableservice.storage import Storage
from tests.support.trip_tables import create_trip_table


def trip_rows(keys: list[str], ts: list[int], tag: str) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "uuid": pa.array(keys, pa.string()),
            "ts": pa.array(ts, pa.int64()),
            "rider": pa.array([f"{tag}-{k}" for k in keys], pa.string()),
            "driver": pa.array([f"d{i % 7}" for i in range(n)], pa.string()),
            "fare": pa.array(np.arange(n, dtype=np.float64) + 0.5),
            "tip": pa.array([None if i % 5 == 0 else Decimal("1.25") for i in range(n)], pa.decimal128(10, 2)),
            "passengers": pa.array(np.full(n, 2), pa.int32()),
            "trip_date": pa.array(np.full(n, 19000), pa.int32()).cast(pa.date32()),
            "is_paid": pa.array([i % 2 == 0 for i in range(n)], pa.bool_()),
            "city": pa.array(["sf"] * n, pa.string()),
        },
        schema=TRIP_SCHEMA,
    )


def key_rows(keys: list[str], ts: list[int]) -> pa.Table:
    return pa.table({"uuid": keys, "ts": pa.array(ts, pa.int64()), "city": ["sf"] * len(keys)})


def late_update_table(path: Path, version: int, log_block: str) -> str:
    """One file group: 400 base rows, then log records with late updates (the base wins), ordering-field ties
    (the later record wins), several versions of a key in the log, delete blocks (with and without a winning
    ordering value), deletes undone by a later insert, and inserts of new keys."""
    base = create_trip_table(str(path), version, TableType.MERGE_ON_READ)
    client = WriteClient(Storage(), base, options=WriteOptions(log_block_format=log_block, compression="snappy"))
    keys = [f"k{i:04d}" for i in range(400)]
    client.insert(trip_rows(keys, [1000 + i for i in range(400)], "base"))
    client.upsert(trip_rows(keys[:150] + [f"n{i:03d}" for i in range(60)], [2000] * 75 + [500] * 75 + [10] * 60, "u1"))
    client.upsert(trip_rows(keys[100:250], [1000 + i for i in range(100, 250)], "tie"))  # equal to the base
    client.delete(key_rows(keys[300:340], [5000] * 20 + [1] * 20))  # half lose to the base's ordering value
    client.upsert(trip_rows(keys[300:310] + [f"n{i:03d}" for i in range(30)], [9000] * 40, "u3"))
    client.upsert(trip_rows([f"n{i:03d}" for i in range(20, 50)], [10] * 30, "tie2"), key_rows(keys[390:], [7000] * 10))
    return base


def merged_slices(base: str) -> list[FileSlice]:
    """The table's latest slices (one file group of updated keys, one of the new keys), and each slice's log
    files alone (a log-only slice: every surviving record is an insert)."""
    table = HudiTable.open(Storage(), base)
    slices = table.file_system_view(timeline=table.reload()).latest_merged_slices()
    assert len(slices) == 2 and all(s.base_file is not None and len(s.log_files) >= 2 for s in slices)
    return [*slices, *(replace(s, base_file=None) for s in slices)]


def compaction_task(base: str, file_slice: FileSlice, budget: int | None, token: str) -> CompactionTask:
    table = HudiTable.open(Storage(), base)
    timeline = table.reload()
    instant = table.active.new_instant_time(timeline)
    (task,) = compaction_tasks(
        table, timeline, instant, [CompactionInput.of(file_slice)], write_token=token, memory_budget=budget
    )
    return task
