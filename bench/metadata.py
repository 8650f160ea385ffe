"""Listing through the metadata table vs listing S3, and what keeping the metadata table in step costs a compaction.

Usage: python -m bench.metadata [--file-groups 2000] [--partitions 50] [--compact-groups 200]

The table: MOR, table version 9, on a moto S3 server (server mode, a separate process), `--file-groups` base files
of 10 records over `--partitions` partitions, a metadata table with `files` and `column_stats` kept in step by the
write client, then one delta commit updating records of `--compact-groups` file groups.

1. The file-system view built from a recursive S3 listing vs from the `files` partition: wall time (best of 3) and
   the number of S3 requests the moto server logged for each. Aim: >= 5x fewer requests through the metadata table.
2. A compaction of the updated file groups on Spark (local[2]): the time spent writing the metadata table's delta
   commit (files and column stats of the new base files) vs the whole compaction. Aim: <= 10%.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import numpy as np
import pyarrow as pa

from tableservice.hudi.action import commit as commit_path
from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.metadata.update import sync_metadata_table
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.schema import avro_schema_from_arrow
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.create import TableSpec, create_table
from tableservice.storage import Storage, StorageOptions

T = TypeVar("T")
SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("part", pa.string()), ("value", pa.float64())])
REQUEST = re.compile(rb'"(GET|PUT|POST|HEAD|DELETE) ')


class Moto:
    """moto in server mode on loopback; counts the requests it logs."""

    def __init__(self) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.log = Path(tempfile.mkstemp(prefix="moto-", suffix=".log")[1])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
            env=dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing"),
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def requests(self) -> int:
        return len(REQUEST.findall(self.log.read_bytes()))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def counted(moto: Moto, fn: Callable[[], T], repeat: int = 3) -> tuple[float, int, T]:
    """Best wall time of `repeat` runs, the S3 requests of one run, and the last result."""
    best, requests = float("inf"), 0
    result: T | None = None
    for _ in range(repeat):
        time.sleep(0.2)  # let the server flush its log
        before = moto.requests()
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
        time.sleep(0.2)
        requests = moto.requests() - before
    assert result is not None
    return best, requests, result


def rows(ids: np.ndarray, parts: int, ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([f"k{i:08d}" for i in ids]),
            "ts": pa.array(np.full(len(ids), ts, dtype=np.int64)),
            "part": pa.array([f"p{i % parts:02d}" for i in ids]),
            "value": pa.array(ids.astype(np.float64)),
        },
        schema=SCHEMA,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--file-groups", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--compact-groups", type=int, default=200)
    args = parser.parse_args()
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", SPARK_LOCAL_IP="127.0.0.1")
    moto = Moto()
    try:
        return run(moto, args)
    finally:
        moto.stop()


def run(moto: Moto, args: Any) -> int:
    import boto3

    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    options = StorageOptions(moto.endpoint, "us-east-1", "testing", "testing")
    storage = Storage(options)
    uri = f"s3://{bucket}/trips"
    spec = TableSpec(
        name="trips",
        table_type=TableType.MERGE_ON_READ,
        version=9,
        schema=avro_schema_from_arrow(SCHEMA, "trips_record", "hoodie.trips"),
        record_key_fields=("id",),
        partition_fields=("part",),
        ordering_fields=("ts",),
    )
    create_table(storage, uri, spec)
    initialize_metadata_table(HudiTable.open(storage, uri), ("files", "column_stats"))
    per_file = 10
    client = WriteClient(storage, uri, options=WriteOptions(max_file_records=per_file))
    started = time.monotonic()
    total = args.file_groups * per_file
    client.insert(rows(np.arange(total), args.partitions, 1))
    # records of `compact-groups` file groups: one record in each of the first groups of every partition
    per_partition_groups = args.file_groups // args.partitions
    chosen = [g * per_file * args.partitions + p for p in range(args.partitions) for g in range(per_partition_groups)]
    client.upsert(rows(np.array(chosen[: args.compact_groups]), args.partitions, 2))
    print(
        f"table: {uri}: {args.file_groups} file groups, {args.partitions} partitions, written in "
        f"{time.monotonic() - started:.0f}s",
        flush=True,
    )

    def by_listing() -> int:
        table = HudiTable.open(storage, uri)
        return len(table.file_system_view(listing=table.list_storage_files()).latest_slices())

    def per_partition() -> int:
        """What readers that list partition by partition do (Hudi's listing without a metadata table)."""
        table = HudiTable.open(storage, uri)
        folders = [fi.location for fi in storage.list(uri) if fi.is_dir and not fi.name.startswith(".")]
        listing = {f.rsplit("/", 1)[1]: [fi for fi in storage.list(f) if not fi.is_dir] for f in folders}
        return len(table.file_system_view(listing=listing).latest_slices())

    def through_metadata() -> int:
        table = HudiTable.open(storage, uri)
        return len(table.file_system_view().latest_slices())

    t_list, r_list, n_list = counted(moto, by_listing)
    t_part, r_part, n_part = counted(moto, per_partition)
    t_mdt, r_mdt, n_mdt = counted(moto, through_metadata)
    assert n_list == n_mdt == n_part, (n_list, n_part, n_mdt)
    print(f"file-system view of {n_list} slices (best of 3; S3 requests of one build, table open included):")
    print(f"  one recursive listing   {t_list:6.2f}s {r_list:5d} requests")
    print(f"  listing per partition   {t_part:6.2f}s {r_part:5d} requests")
    print(f"  files partition (MDT)   {t_mdt:6.2f}s {r_mdt:5d} requests")
    print(
        f"  requests per-partition/MDT {r_part / max(1, r_mdt):.1f}x, recursive/MDT {r_list / max(1, r_mdt):.1f}x "
        f"(aim >= 5x); time per-partition/MDT {t_part / t_mdt:.2f}x, recursive/MDT {t_list / t_mdt:.2f}x"
    )

    # compaction on Spark, timing the metadata table's part of the commit
    from tableservice.executors.spark import SparkExecutor, SparkSettings
    from tableservice.locks import InProcessLockProvider
    from tableservice.planning.compaction.policy import CompactionPolicy
    from tableservice.service.actions import TableContext
    from tableservice.service.compaction import execute_compaction, schedule_compaction

    spent: list[float] = []

    def timed_sync(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return sync_metadata_table(*a, **kw)
        finally:
            spent.append(time.perf_counter() - t0)

    executor = SparkExecutor(SparkSettings(master="local[2]"))
    try:
        table = HudiTable.open(storage, uri)
        ctx = TableContext(
            table=table,
            lock=InProcessLockProvider().table_lock("trips", uri),
            executor=executor,
            storage_options=options,
        )
        instant = schedule_compaction(ctx, CompactionPolicy(), force=True)
        assert instant is not None
        with mock.patch.object(commit_path, "sync_metadata_table", side_effect=timed_sync):
            started = time.perf_counter()
            result = execute_compaction(ctx, instant.requested_time)
            total_s = time.perf_counter() - started
    finally:
        executor.stop()
    update = sum(spent)
    print(
        f"compaction of {len(result.stats)} file groups: {total_s:.2f}s in all, metadata table update "
        f"{update:.2f}s = {100 * update / total_s:.1f}% (aim <= 10%)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
