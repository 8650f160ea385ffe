"""Record-index build throughput: the indexing action with record keys read on Spark (local[1] and local[2])
against reading the same record keys with bare pyarrow (the limit), in one run.

Usage: python -m bench.indexing [--records 2000000] [--file-groups 16]

The table: non-partitioned MOR (table version 9), `--records` rows in `--file-groups` base files, one commit.
Each variant schedules and executes an indexing of `record_index` (the `files` partition is built first, once,
outside the measurement) and drops it afterwards. Printed per variant: the whole action (key reads, records,
HFiles, publishing) and its Spark key-read job alone, as records per second, and the ratios to the bare read.
Aim: the build at least 0.5x the bare key-read throughput per core.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pyarrow.parquet as pq

from bench.common import bench_dir, standard_mor_table
from tableservice.executors.indexing import read_keys, spark_partition_writer
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.action.indexing import drop_index, execute_indexing, schedule_indexing
from tableservice.hudi.action.tasks import CompactionInput, compaction_tasks
from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.storage import Storage

KEY = "_hoodie_record_key"


def bare_key_read(path: Path) -> tuple[float, int]:
    """Every base file's record-key column with pyarrow, one thread; the best of three runs (warm cache)."""
    best, rows = float("inf"), 0
    for _ in range(3):
        started = time.perf_counter()
        rows = sum(pq.read_table(f, columns=[KEY], use_threads=False).num_rows for f in sorted(path.glob("*.parquet")))
        best = min(best, time.perf_counter() - started)
    return best, rows


def spark_variant(path: Path, master: str) -> tuple[float, float, int]:
    """(seconds of the whole indexing action, seconds of its key-read job alone, records indexed)."""
    executor = SparkExecutor(
        SparkSettings(master=master, conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "16"})
    )
    executor.start()
    try:
        executor.warm_up()
        table = HudiTable.open(Storage(), str(path))
        timeline = table.timeline()
        view = table.file_system_view(timeline=timeline)
        last = timeline.completed().last()
        assert last is not None
        slices = [CompactionInput.of(s) for s in view.latest_merged_slices()]
        tasks = compaction_tasks(table, timeline, last.requested_time, slices)
        started = time.perf_counter()
        keys = read_keys(executor, tasks, column=None, tag=f"bench-keys-{master}")
        read_seconds = time.perf_counter() - started

        instant = schedule_indexing(table, ["record_index"])
        assert instant is not None
        started = time.perf_counter()
        result = execute_indexing(
            HudiTable.open(Storage(), str(path)),
            instant,
            writer=spark_partition_writer(executor, table.name, instant.requested_time),
        )
        seconds = time.perf_counter() - started
        assert result.records == keys.num_rows, (result.records, keys.num_rows)
        return seconds, read_seconds, result.records
    finally:
        drop_index(HudiTable.open(Storage(), str(path)), "record_index")
        executor.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--file-groups", type=int, default=16)
    args = parser.parse_args()
    path = bench_dir(f"indexing-{args.records}-{args.file_groups}")
    standard_mor_table(path, records=args.records, file_groups=args.file_groups, commits=1, update_fraction=0.0)
    table = HudiTable.open(Storage(), str(path))
    if "files" not in table.config.metadata_partitions:
        initialize_metadata_table(table, ("files",))
    bare_s, rows = bare_key_read(path)
    bare_rate = rows / bare_s
    print(f"bare pyarrow key read: {rows} keys in {bare_s:.2f} s = {bare_rate:,.0f} keys/s (one core)")
    for master, cores in (("local[1]", 1), ("local[2]", 2)):
        seconds, read_seconds, records = spark_variant(path, master)
        rate, read_rate = records / seconds, records / read_seconds
        print(
            f"{master}: indexing action {seconds:.2f} s = {rate:,.0f} records/s "
            f"({rate / cores / bare_rate:.2f}x bare per core); Spark key read alone {read_seconds:.2f} s = "
            f"{read_rate:,.0f} keys/s ({read_rate / cores / bare_rate:.2f}x bare per core)"
        )


if __name__ == "__main__":
    main()
