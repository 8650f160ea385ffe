"""Compaction throughput: the Spark compaction job (local[1] and local[2]) against a bare pyarrow pipeline and
against hudi-rs's merged read plus a pyarrow write, on the same file slices, in one run.

Usage: python bench/compaction.py [--records 2000000] [--file-groups 16] [--commits 6]

The table: non-partitioned MOR (table version 9), Parquet log blocks (so that the bare pipeline can read them
with pyarrow alone), `--records` rows in `--file-groups` base files, five delta commits of 20% updates.
Nothing is committed: every variant writes its own new base files, which are deleted afterwards. Each Spark
session (started and warmed up outside the measurement, as the daemon's is) runs the job `--repeats` times, and the
bare pipeline runs just before each job, so both see the same machine; the ratios compare medians, and the first
job of each session is printed as well.
Aims: local[1] at least 0.85x the bare pipeline's throughput; local[2] at least 1.9x local[1].
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.common import bench_dir, standard_mor_table
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.action.compact import CompactionTask
from tableservice.hudi.action.tasks import CompactionInput, compaction_tasks
from tableservice.hudi.file_group.log_format import BlockType, LogBlock, iter_log_blocks, read_block_content
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.storage import Storage

RECORD_KEY = "_hoodie_record_key"


def tasks_for(table: HudiTable, instant: str, token: str) -> list[CompactionTask]:
    """Every slice with log files, compacted at `instant` (the tasks a plan naming all of them would give)."""
    timeline = table.timeline()
    view = table.file_system_view(timeline=timeline)
    slices = [CompactionInput.of(s) for s in view.latest_slices() if s.log_files]
    return compaction_tasks(table, timeline, instant, slices, compression="snappy", write_token=token)


def cleanup(path: Path, instant: str) -> None:
    for f in path.glob(f"*_{instant}.parquet"):
        f.unlink()
    temp = path / ".hoodie" / ".temp" / instant
    if temp.exists():
        import shutil

        shutil.rmtree(temp)


def spark_runs(
    path: Path, master: str, instant: str, repeats: int, between: Callable[[], None]
) -> tuple[list[float], int, int]:
    """The compaction job `repeats` times in one warm session (as the daemon's session is), with `between` run
    before each job (the bare pipeline, so that both sides see the same machine load); the seconds of each job."""
    executor = SparkExecutor(
        SparkSettings(master=master, conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "16"})
    )
    executor.start()
    times: list[float] = []
    rows = 0
    try:
        executor.warm_up()  # JVM and Python workers started, outside the measurement (the daemon's are warm)
        table = HudiTable.open(Storage(), str(path))
        for _ in range(repeats):
            between()
            tasks = tasks_for(table, instant, "0-0-0")
            started = time.perf_counter()
            stats = executor.run_tasks(tasks, tag=f"bench-{master}", description="bench").stats
            times.append(time.perf_counter() - started)
            rows = sum(s.num_writes or 0 for s in stats)
            cleanup(path, instant)
        return times, rows, executor.last_peak_rss_kb
    finally:
        executor.stop()
        cleanup(path, instant)


def _log_tables(storage: Storage, locations: list[str]) -> list[pa.Table]:
    out = []
    for loc in locations:
        for block in iter_log_blocks(storage, loc):
            if isinstance(block, LogBlock) and block.block_type is BlockType.PARQUET_DATA:
                out.append(pq.read_table(pa.BufferReader(read_block_content(block, storage)), use_threads=False))
    return out


def bare_run(path: Path, instant: str) -> tuple[float, int]:
    """Read base, merge logs (latest write per key wins), write: pyarrow only, no Hudi footers."""
    storage = Storage()
    table = HudiTable.open(storage, str(path))
    tasks = tasks_for(table, instant, "9-9-9")
    started = time.perf_counter()
    rows = 0
    for t in tasks:
        base = pq.read_table(t.base_file, use_threads=False) if t.base_file else None
        logs = _log_tables(storage, list(t.log_files))
        delta = pa.concat_tables(logs, promote_options="default") if logs else None
        if delta is not None and delta.num_rows:
            delta = delta.append_column("__i", pa.array(range(delta.num_rows), pa.int64()))
            last = delta.group_by(RECORD_KEY).aggregate([("__i", "max")]).column("__i_max")
            delta = delta.take(last).drop_columns(["__i"])
            if base is not None:
                keep = pc.invert(pc.is_in(base.column(RECORD_KEY), value_set=delta.column(RECORD_KEY)))
                base = pa.concat_tables([base.filter(keep), delta.select(base.column_names).cast(base.schema)])
            else:
                base = delta
        assert base is not None
        pq.write_table(base, str(path / f"{t.file_id}_9-9-9_{instant}.parquet"), compression="snappy")
        rows += base.num_rows
    seconds = time.perf_counter() - started
    cleanup(path, instant)
    return seconds, rows


def hudi_rs_run(path: Path, instant: str) -> tuple[float, int]:
    from hudi import HudiFileGroupReader

    table = HudiTable.open(Storage(), str(path))
    tasks = tasks_for(table, instant, "8-8-8")
    reader = HudiFileGroupReader(str(path))
    started = time.perf_counter()
    rows = 0
    for t in tasks:
        base_rel = os.path.relpath(t.base_file, path) if t.base_file else ""
        logs_rel = [os.path.relpath(lf, path) for lf in t.log_files]
        merged = pa.Table.from_batches([reader.read_file_slice_from_paths(base_rel, logs_rel)])
        pq.write_table(merged, str(path / f"{t.file_id}_8-8-8_{instant}.parquet"), compression="snappy")
        rows += merged.num_rows
    seconds = time.perf_counter() - started
    cleanup(path, instant)
    return seconds, rows


def _line(name: str, rows: int, seconds: list[float]) -> str:
    each = " ".join(f"{x:.2f}" for x in seconds)
    mid = statistics.median(seconds)
    return f"{name:32s} {rows:>10,d} rows  median {mid:6.2f} s {rows / mid:>10,.0f} rows/s  (runs: {each})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--file-groups", type=int, default=16)
    parser.add_argument("--commits", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3, help="jobs per Spark session (medians are compared)")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    path = bench_dir(f"compaction-{args.records}-{args.file_groups}-{args.commits}")
    print(f"table: {path}; load average {os.getloadavg()[0]:.1f}", flush=True)
    standard_mor_table(
        path,
        records=args.records,
        file_groups=args.file_groups,
        commits=args.commits,
        update_fraction=0.2,
        log_block="parquet",
    )
    instant = "29991231235959999"
    rs_seconds, rs_rows = hudi_rs_run(path, instant)
    print(_line("hudi-rs read + pyarrow write", rs_rows, [rs_seconds]), flush=True)
    bare: list[float] = []
    bare_rows: set[int] = set()

    def one_bare() -> None:
        seconds, n = bare_run(path, instant)
        bare.append(seconds)
        bare_rows.add(n)

    spark: dict[str, tuple[list[float], int]] = {}
    for master in ("local[1]", "local[2]"):
        times, rows, peak = spark_runs(path, master, instant, args.repeats, one_bare)
        spark[master] = (times, rows)
        print(
            _line(f"tableservice spark {master}", rows, times) + f"  peak python worker RSS {peak / 1024:.0f} MiB",
            flush=True,
        )
    print(_line("bare pyarrow pipeline", next(iter(bare_rows)), bare), flush=True)
    one = statistics.median(spark["local[1]"][0])
    two = statistics.median(spark["local[2]"][0])
    print(f"throughput local[1] / bare pipeline (medians): {statistics.median(bare) / one:.2f} (aim >= 0.85)")
    print(f"throughput local[2] / local[1] (medians): {one / two:.2f} (aim >= 1.9)")
    print(f"throughput local[1] / hudi-rs read + write: {rs_seconds / one:.2f}")
    print(
        f"first jobs of their sessions: local[1] / bare {bare[0] / spark['local[1]'][0][0]:.2f}, "
        f"local[2] / local[1] {spark['local[1]'][0][0] / spark['local[2]'][0][0]:.2f}"
    )
    print(f"peak RSS of the driver process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    counts = bare_rows | {rs_rows} | {rows for _, rows in spark.values()}
    print(f"row counts agree: {len(counts) == 1} ({sorted(counts)})")
    print(f"load average at the end {os.getloadavg()[0]:.1f} (2 cores: above 2 the figures are not comparable)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
