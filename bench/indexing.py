"""Record-index build throughput: the indexing action with record keys read on Spark (local[1] and local[2])
against reading the same record keys with bare pyarrow (the limit), in one run.

Usage: python -m bench.indexing [--records 2000000] [--file-groups 16]

The table: non-partitioned MOR (table version 9), `--records` rows in `--file-groups` base files, one commit.
Each variant schedules, executes and drops an indexing of `record_index` three times in one Spark session (the
`files` partition is built first, once, outside the measurement); the first run (Python workers and JIT cold) and
the best of the other two are printed. Printed per variant: the whole action (key reads, records,
HFiles, publishing) and its Spark key-read job alone, as records per second, and the ratios to the bare read.
Aim: the build at least 0.5x the bare key-read throughput per core. Also printed: the same build in this process
without Spark (read, route, sort, HFiles), the floor any engine adds its overhead to, and the action against it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.common import bench_dir, standard_mor_table
from tableservice.executors.indexing import read_keys, spark_partition_writer
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.action.indexing import drop_index, execute_indexing, schedule_indexing
from tableservice.hudi.action.tasks import CompactionInput, compaction_tasks
from tableservice.hudi.metadata.hfile_write import hfile_layout, write_hfile_arrays
from tableservice.hudi.metadata.initialize import file_group_count, initialize_metadata_table
from tableservice.hudi.metadata.keys import file_group_indexes
from tableservice.hudi.metadata.schema import metadata_record_schema_json
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


def in_process_build(path: Path) -> tuple[float, dict[str, float], int]:
    """The record index's work without Spark, in this process, one core: read the keys, route them to file groups
    (Java's string hash), sort, write each group's HFile (GZ blocks) to memory. What a build costs before any
    engine overhead; (seconds, seconds per step, bytes of HFiles)."""
    steps: dict[str, float] = {}
    started = time.perf_counter()
    files = sorted(path.glob("*.parquet"))
    parts = [pq.read_table(f, columns=[KEY], use_threads=False).column(0).combine_chunks() for f in files]
    keys = pa.concat_arrays(parts)
    slices = pa.array(np.repeat(np.arange(len(parts), dtype=np.int32), [len(p) for p in parts]))
    steps["read"] = time.perf_counter() - started
    mark = time.perf_counter()
    groups = file_group_count("record_index", len(keys))
    routes = pa.array(file_group_indexes(keys, groups))
    steps["route"] = time.perf_counter() - mark
    mark = time.perf_counter()
    ordered = pa.table({"group": routes, "key": keys.cast(pa.binary()), "slice": slices}).sort_by(
        [("group", "ascending"), ("key", "ascending")]
    )
    steps["sort"] = time.perf_counter() - mark
    mark = time.perf_counter()
    values = pa.array([f"location-of-slice-{i:04d}".encode() for i in range(len(parts))], pa.binary())
    schema = metadata_record_schema_json(9).encode()
    written = 0
    for group in range(groups):
        part = ordered.filter(pc.equal(ordered.column("group"), group))
        written += len(
            write_hfile_arrays(
                part.column("key").combine_chunks(),
                values.take(part.column("slice").combine_chunks()),
                file_info=[(b"schema", schema)],
                layout=hfile_layout(9),
            )
        )
    steps["hfiles"] = time.perf_counter() - mark
    return time.perf_counter() - started, steps, written


def spark_variant(path: Path, master: str) -> tuple[float, float, float, int]:
    """(seconds of the first indexing action in a fresh session, of the best of two more, of the key-read job
    alone, records indexed). Each action is scheduled, executed and dropped again."""
    executor = SparkExecutor(
        SparkSettings(
            master=master,
            conf={
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "16",
                "spark.ui.showConsoleProgress": "false",
            },
        )
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
        runs: list[float] = []
        records = 0
        for _ in range(3):
            instant = schedule_indexing(HudiTable.open(Storage(), str(path)), ["record_index"])
            assert instant is not None
            started = time.perf_counter()
            try:
                result = execute_indexing(
                    HudiTable.open(Storage(), str(path)),
                    instant,
                    writer=spark_partition_writer(executor, table.name, instant.requested_time),
                )
                runs.append(time.perf_counter() - started)
            finally:
                drop_index(HudiTable.open(Storage(), str(path)), "record_index")
            assert result.records == keys.num_rows, (result.records, keys.num_rows)
            records = result.records
        return runs[0], min(runs[1:]), read_seconds, records
    finally:
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
    floor_s, steps, written = in_process_build(path)
    floor_rate = rows / floor_s
    detail = ", ".join(f"{k} {v:.2f} s" for k, v in steps.items())
    print(
        f"in-process build, no Spark: {floor_s:.2f} s = {floor_rate:,.0f} records/s "
        f"({floor_rate / bare_rate:.2f}x bare; {detail}; {written:,} bytes of HFiles)"
    )
    for master, cores in (("local[1]", 1), ("local[2]", 2)):
        first, seconds, read_seconds, records = spark_variant(path, master)
        rate, read_rate = records / seconds, records / read_seconds
        print(
            f"{master}: indexing action {seconds:.2f} s (best of two after the first, which took {first:.2f} s) = "
            f"{rate:,.0f} records/s ({rate / cores / bare_rate:.2f}x bare per core, aim 0.5x; "
            f"{rate / cores / floor_rate:.2f}x the in-process build per core); Spark key read alone "
            f"{read_seconds:.2f} s = {read_rate:,.0f} keys/s ({read_rate / cores / bare_rate:.2f}x bare per core)"
        )


if __name__ == "__main__":
    main()
