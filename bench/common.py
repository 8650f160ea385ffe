"""Shared pieces of the benchmarks: generating the standard MOR table and timing helpers."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.schema import avro_schema_from_arrow
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.create import TableSpec, create_table
from tableservice.hudi.write.workload import ORDERING_FIELD, RECORD_KEY, TRIP_SCHEMA, Workload
from tableservice.storage import Storage

T = TypeVar("T")


def standard_mor_table(
    path: Path,
    *,
    records: int,
    file_groups: int,
    commits: int,
    update_fraction: float,
    version: int = 9,
    log_block: str = "avro",
    reuse: bool = True,
) -> Path:
    """A non-partitioned MOR table: `records` inserted into `file_groups` base files, then `commits - 1` delta
    commits each updating `update_fraction` of the records (late event times included)."""
    marker = path / ".bench-complete"
    if reuse and marker.exists():
        return path
    if path.exists():
        shutil.rmtree(path)
    storage = Storage()
    create_table(
        storage,
        str(path),
        TableSpec(
            name="bench_trips",
            table_type=TableType.MERGE_ON_READ,
            version=version,
            schema=avro_schema_from_arrow(TRIP_SCHEMA, "bench_trips_record", "hoodie.bench_trips"),
            record_key_fields=(RECORD_KEY,),
            partition_fields=(),
            ordering_fields=(ORDERING_FIELD,),
        ),
    )
    per_file = -(-records // file_groups)
    client = WriteClient(
        storage,
        str(path),
        options=WriteOptions(max_file_records=per_file, log_block_format=log_block, compression="snappy"),
    )
    for step in Workload(records, commits, update_fraction, 0.0, partitions=0, seed=3).steps():
        started = time.monotonic()
        result = client.apply(step)
        print(
            f"  generated {result.action.value} {result.instant_time} ({step.records.num_rows} rows) "
            f"in {time.monotonic() - started:.1f}s",
            flush=True,
        )
    marker.touch()
    return path


def timed(fn: Callable[[], T], repeat: int = 3) -> tuple[float, T]:
    """Best wall time of `repeat` runs, and the last result."""
    best = float("inf")
    result: T | None = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    assert result is not None
    return best, result


def vm_status_kb(field: str) -> int:
    """A `VmRSS`-like field of this process's /proc status, in KiB (0 when absent)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def peak_rss_mb() -> float:
    """This process's peak RSS since it started its program (`VmHWM`). Not `ru_maxrss`: a child started with
    `subprocess` keeps, across its exec, the high-water mark of the parent it was forked from (a benchmark's session
    process reported the 5 GB its parent took to generate the table)."""
    return vm_status_kb("VmHWM") / 1024


def bench_dir(name: str) -> Path:
    root = Path(os.environ.get("TABLESERVICE_BENCH_DIR", "/tmp/tableservice-bench"))
    root.mkdir(parents=True, exist_ok=True)
    return root / name
