"""Clustering throughput: tableservice's Spark clustering job (local[2]) against delta-rs's optimize z-order on the
same rows, run alternately in one process.

Usage: python bench/clustering.py [--files 500] [--rows-per-file 4000] [--groups 4] [--repeats 5] [--no-bloom]

The data: `--files` small files (about 2M rows in all) of the trips schema, as a Hudi copy-on-write table (table
version 9) and as a Delta table. Hudi: the files are clustered in `--groups` groups, each sorted by `fare` and
written as target-size files. delta-rs: `optimize.z_order(["fare"])` (one column: a sort) with the same target
size, on a fresh copy of the Delta table each time (copied outside the timing). Nothing is committed on the Hudi
side (new files are deleted after each run). Snappy on both sides. The Hudi files carry Hudi's default bloom filter
of their record keys, as a table's writers write it by default; `--no-bloom` leaves it out, as for a table with
`hoodie.parquet.bloom.filter.enabled=false` (delta-rs writes none).

What is measured: the Spark session starts and its Python workers are warmed up (imports, one run of the hot
kernels on a few rows) before the first job; then `--repeats` rounds, each one tableservice run (the clustering
tasks built from the table's timeline and file listing, about 0.02 s, then run as one Spark job) and one delta-rs
optimize, alternately (so that both sides see the machine's load of the same minutes). Each run prints its wall
time and CPU seconds: for tableservice those of this process and its children (the Spark JVM and its Python
workers, read from /proc), for delta-rs those of this process (it runs in it). The first tableservice job is the
one a daemon's first clustering after start-up would be; later jobs find the workers' memory still mapped (a
worker gives it back after 30 s idle). Printed: each round's throughput ratio, the first round's ratio, and the
median of the rounds' ratios. Aim: tableservice at least 1.3x delta-rs's throughput (wall time).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from bench.common import bench_dir
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.action.cluster import ClusteringTask
from tableservice.hudi.action.tasks import ClusteringInput, ClusteringLayout, clustering_tasks
from tableservice.hudi.file_group.bloom import BloomFilterSettings
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


def hudi_tasks(path: Path, groups: int, bloom: bool = True) -> list[ClusteringTask]:
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
    settings = BloomFilterSettings() if bloom else None
    return clustering_tasks(table, timeline, INSTANT, inputs, layout, compression="snappy", bloom=settings)


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's descendants, from /proc (0 where /proc is missing)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return 0.0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    mine: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier and p not in mine}
        mine |= frontier
    return sum(cpu[p] for p in mine)


def _measured(run: Callable[[], int], with_children: bool) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and the rows `run` reports."""
    cpu_before = time.process_time() + (_children_cpu() if with_children else 0.0)
    started = time.perf_counter()
    rows = run()
    wall = time.perf_counter() - started
    cpu = time.process_time() + (_children_cpu() if with_children else 0.0) - cpu_before
    return wall, cpu, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--rows-per-file", type=int, default=4000)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5, help="rounds of one run each side, alternately")
    parser.add_argument("--no-bloom", action="store_true", help="the Hudi files carry no bloom filter")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    root = bench_dir(f"clustering-{args.files}-{args.rows_per_file}")
    hudi_path, delta_path, rows = make_tables(root, args.files, args.rows_per_file)
    n = int(rows.num_rows)
    print(f"{args.files} small files, {n:,} rows; Hudi table {hudi_path}, Delta table {delta_path}", flush=True)
    print(
        "Hudi files: " + ("no bloom filter (--no-bloom)" if args.no_bloom else "Hudi's default bloom filter"),
        flush=True,
    )
    from deltalake import DeltaTable

    scratch = root / "delta-run"
    files_written: dict[str, int] = {}

    def ours() -> int:
        tasks = hudi_tasks(hudi_path, args.groups, not args.no_bloom)
        stats = executor.run_tasks(tasks, tag="bench-clustering", description="bench clustering").stats
        files_written["ours"] = len(stats)
        return int(sum(s.num_writes or 0 for s in stats))

    def theirs() -> int:
        metrics = DeltaTable(str(scratch)).optimize.z_order(["fare"], target_size=TARGET)
        files_written["theirs"] = int(metrics.get("numFilesAdded") or 0)
        return n

    def clean_hudi() -> None:
        for f in hudi_path.glob(f"*_{INSTANT}.parquet"):
            f.unlink()
        shutil.rmtree(hudi_path / ".hoodie" / ".temp" / INSTANT, ignore_errors=True)

    executor = SparkExecutor(SparkSettings(master="local[2]", conf={"spark.ui.enabled": "false"}))
    executor.start()
    executor.warm_up()
    ratios: list[float] = []
    agree = True
    try:
        for round_ in range(1, max(1, args.repeats) + 1):
            try:
                wall, cpu, written = _measured(ours, with_children=True)
            finally:
                clean_hudi()
            agree = agree and written == n
            print(
                f"round {round_} tableservice clustering local[2] {written:>10,d} rows {wall:6.2f} s "
                f"(CPU {cpu:5.2f} s) {written / wall:>10,.0f} rows/s ({files_written['ours']} files)",
                flush=True,
            )
            shutil.rmtree(scratch, ignore_errors=True)
            shutil.copytree(delta_path, scratch)
            try:
                their_wall, their_cpu, _ = _measured(theirs, with_children=False)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            print(
                f"round {round_} delta-rs optimize z-order        {n:>10,d} rows {their_wall:6.2f} s "
                f"(CPU {their_cpu:5.2f} s) {n / their_wall:>10,.0f} rows/s ({files_written['theirs']} files)",
                flush=True,
            )
            ratios.append(their_wall / wall)
            print(f"round {round_} throughput tableservice / delta-rs: {ratios[-1]:.2f}", flush=True)
    finally:
        executor.stop()
    print(f"first job (round 1) throughput tableservice / delta-rs: {ratios[0]:.2f} (aim >= 1.3)")
    print(
        f"median of {len(ratios)} rounds: {statistics.median(ratios):.2f} (aim >= 1.3); "
        f"rounds: {', '.join(f'{r:.2f}' for r in ratios)}; load average {os.getloadavg()[0]:.1f}"
    )
    print(f"rows agree: {agree}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
