"""Clustering throughput: tableservice's Spark clustering job (local[2]) against delta-rs's optimize z-order on the
same rows, in one run.

Usage: python bench/clustering.py [--files 500] [--rows-per-file 4000] [--groups 4]

The data: `--files` small files (about 2M rows in all) of the trips schema, as a Hudi copy-on-write table (table
version 9) and as a Delta table. Hudi: the files are clustered in `--groups` groups, each sorted by `fare` and
written as target-size files. delta-rs: `optimize.z_order(["fare"])` (one column: a sort) with the same target
size. Nothing is committed on the Hudi side (new files are deleted afterwards). Snappy on both sides.
Aim: tableservice at least 1.3x delta-rs's throughput.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa

from bench.common import bench_dir
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.action.cluster import ClusteringTask
from tableservice.hudi.action.tasks import ClusteringInput, ClusteringLayout, clustering_tasks
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.schema import avro_schema_from_arrow
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.create import TableSpec, create_table
from tableservice.hudi.write.workload import ORDERING_FIELD, RECORD_KEY, TRIP_SCHEMA, Workload
from tableservice.storage import Storage

TARGET = 64 * 1024 * 1024
INSTANT = "29991231235959999"


def make_tables(root: Path, files: int, rows_per_file: int) -> tuple[Path, Path, pa.Table]:
    hudi_path, delta_path = root / "hudi", root / "delta"
    marker = root / ".complete"
    rows = next(iter(Workload(files * rows_per_file, 1, partitions=0, seed=5).steps())).records
    if marker.exists():
        return hudi_path, delta_path, rows
    shutil.rmtree(root, ignore_errors=True)
    storage = Storage()
    create_table(
        storage,
        str(hudi_path),
        TableSpec(
            name="bench_cluster",
            table_type=TableType.COPY_ON_WRITE,
            version=9,
            schema=avro_schema_from_arrow(TRIP_SCHEMA, "bench_cluster_record", "hoodie.bench_cluster"),
            record_key_fields=(RECORD_KEY,),
            partition_fields=(),
            ordering_fields=(ORDERING_FIELD,),
        ),
    )
    WriteClient(
        storage, str(hudi_path), options=WriteOptions(max_file_records=rows_per_file, compression="snappy")
    ).insert(rows)
    from deltalake import write_deltalake

    for i in range(files):
        write_deltalake(str(delta_path), rows.slice(i * rows_per_file, rows_per_file), mode="append")
    marker.touch()
    return hudi_path, delta_path, rows


def hudi_tasks(path: Path, groups: int) -> list[ClusteringTask]:
    table = HudiTable.open(Storage(), str(path))
    timeline = table.timeline()
    slices = sorted(table.file_system_view(timeline=timeline).latest_slices(), key=lambda s: s.file_id)
    per = -(-len(slices) // groups)
    inputs = []
    for g in range(groups):
        chunk = slices[g * per : (g + 1) * per]
        size = sum(s.total_size for s in chunk)
        inputs.append(ClusteringInput.of(g, "", chunk, output_groups=max(1, -(-size // TARGET))))
    layout = ClusteringLayout(TARGET, sort_columns=("fare",))
    return clustering_tasks(table, timeline, INSTANT, inputs, layout, compression="snappy")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--rows-per-file", type=int, default=4000)
    parser.add_argument("--groups", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    root = bench_dir(f"clustering-{args.files}-{args.rows_per_file}")
    hudi_path, delta_path, rows = make_tables(root, args.files, args.rows_per_file)
    n = rows.num_rows
    print(f"{args.files} small files, {n:,} rows; Hudi table {hudi_path}, Delta table {delta_path}", flush=True)

    executor = SparkExecutor(SparkSettings(master="local[2]", conf={"spark.ui.enabled": "false"}))
    executor.start()
    executor.warm_up()
    try:
        tasks = hudi_tasks(hudi_path, args.groups)
        started = time.perf_counter()
        stats = executor.run_tasks(tasks, tag="bench-clustering", description="bench clustering").stats
        ours = time.perf_counter() - started
    finally:
        executor.stop()
    written = sum(s.num_writes or 0 for s in stats)
    for f in hudi_path.glob(f"*_{INSTANT}.parquet"):
        f.unlink()
    shutil.rmtree(hudi_path / ".hoodie" / ".temp" / INSTANT, ignore_errors=True)
    print(
        f"tableservice clustering local[2] {written:>10,d} rows {ours:7.2f} s {written / ours:>12,.0f} rows/s "
        f"({len(stats)} files)",
        flush=True,
    )

    from deltalake import DeltaTable

    scratch = root / "delta-run"
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(delta_path, scratch)
    dt = DeltaTable(str(scratch))
    started = time.perf_counter()
    metrics = dt.optimize.z_order(["fare"], target_size=TARGET)
    theirs = time.perf_counter() - started
    shutil.rmtree(scratch, ignore_errors=True)
    print(
        f"delta-rs optimize z-order        {n:>10,d} rows {theirs:7.2f} s {n / theirs:>12,.0f} rows/s "
        f"({metrics.get('numFilesAdded')} files)",
        flush=True,
    )
    print(f"throughput tableservice / delta-rs: {theirs / ours:.2f} (aim >= 1.3)")
    print(f"rows agree: {written == n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
