"""Compaction throughput: the Spark compaction job (local[1] and local[2]) against a bare pyarrow pipeline and
against hudi-rs's merged read plus a pyarrow write, on the same file slices, in one run.

Usage: python bench/compaction.py [--records 2000000] [--file-groups 16] [--commits 6] [--repeats 5]
                                  [--settle-jobs 200] [--no-bloom] [--worker-pool mimalloc]

The table: non-partitioned MOR (table version 9), Parquet log blocks (so that the bare pipeline can read them
with pyarrow alone), `--records` rows in `--file-groups` base files, five delta commits of 20% updates.
Nothing is committed: every variant writes its own new base files, which are deleted afterwards.

How it is measured: two Spark sessions, a `local[1]` and a `local[2]`, each in its own child process, are started
and warmed up outside the measurement (as the daemon's session is), and stay up for the whole run. Each then runs
`--settle-jobs` empty jobs of the compaction job's shape: a driver JVM compiles Spark's planning code a little more on
each of its first jobs (a trivial job's JVM CPU falls from about 200 ms to 70-80 ms over 150 jobs), and a
long-running daemon's JVM has run many; `--settle-jobs 0` measures a young JVM, as in a daemon's first jobs.
Then `--repeats` rounds, each running in turn: the bare pipeline in one process, the bare pipeline in two processes
at once (the file groups dealt between them: what this machine's two cores give for the same work without Spark),
the `local[1]` job and the `local[2]` job. The ratios are taken within each round (the runs of one round see the same
minutes of the machine: on a shared VM its speed drifts by 20% over minutes) and their medians printed, with the
first round's (the first measured job of each session) as well.
Aims: local[1] at least 0.85x the bare pipeline's throughput; local[2] at least 1.9x local[1]. `bench.machine` shows
what two processes at once give on the machine for CPU-bound and for memory-bound work.
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.pool
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.common import bench_dir, standard_mor_table, vm_status_kb
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.action.compact import CompactionTask
from tableservice.hudi.action.tasks import CompactionInput, compaction_tasks
from tableservice.hudi.file_group.bloom import BloomFilterSettings
from tableservice.hudi.file_group.log_format import BlockType, LogBlock, iter_log_blocks, read_block_content
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.storage import Storage

RECORD_KEY = "_hoodie_record_key"


def tasks_for(table: HudiTable, instant: str, token: str, bloom: bool = True) -> list[CompactionTask]:
    """Every slice with log files, compacted at `instant` (the tasks a plan naming all of them would give);
    `bloom`: the new files carry Hudi's default bloom filter (else none, as `hoodie.parquet.bloom.filter.enabled`
    false gives)."""
    timeline = table.timeline()
    view = table.file_system_view(timeline=timeline)
    slices = [CompactionInput.of(s) for s in view.latest_slices() if s.log_files]
    settings = BloomFilterSettings() if bloom else None
    return compaction_tasks(table, timeline, instant, slices, compression="snappy", bloom=settings, write_token=token)


def cleanup(path: Path, instant: str) -> None:
    for f in path.glob(f"*_{instant}.parquet"):
        f.unlink()
    temp = path / ".hoodie" / ".temp" / instant
    if temp.exists():
        import shutil

        shutil.rmtree(temp)


PROTOCOL = "@@bench "  # lines of a session process meant for the parent (the JVM may print on the same stdout)


def session_main(path: Path, master: str, instant: str, settle_jobs: int, bloom: bool, worker_pool: str) -> int:
    """A child process holding one warm Spark session: each `run` line on stdin runs the compaction job (new files
    deleted afterwards) and answers with its seconds, rows and peak RSS figures; any other line, or the end of
    stdin, ends it."""
    executor = SparkExecutor(
        SparkSettings(
            master=master,
            conf={
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "16",
                **({"spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": worker_pool} if worker_pool else {}),
            },
        )
    )
    executor.start()
    try:
        executor.warm_up()  # JVM and Python workers started, outside the measurement (the daemon's are warm)
        executor.empty_jobs(settle_jobs)  # the JVM's compiling of the job's shape settles
        table = HudiTable.open(Storage(), str(path))
        print(f"{PROTOCOL}ready", flush=True)
        for line in sys.stdin:
            if line.strip() != "run":
                break
            tasks = tasks_for(table, instant, "0-0-0", bloom)  # each Spark task writes with its own token
            started = time.perf_counter()
            try:
                stats = executor.run_tasks(tasks, tag=f"bench-{master}", description="bench").stats
                seconds = time.perf_counter() - started
            finally:
                cleanup(path, instant)
            rows = sum(s.num_writes or 0 for s in stats)
            peak = vm_status_kb("VmHWM")  # this process's own peak (KiB, as the workers report theirs)
            print(f"{PROTOCOL}{seconds} {rows} {executor.last_peak_rss_kb} {peak}", flush=True)
    finally:
        executor.stop()
        cleanup(path, instant)
    return 0


class Session:
    """The parent's handle on one session process."""

    def __init__(self, path: Path, master: str, instant: str, settle_jobs: int, bloom: bool, worker_pool: str) -> None:
        self.master = master
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "bench.compaction", "--session", master, "--path", str(path)),
                *("--instant", instant, "--settle-jobs", str(settle_jobs)),
                *(() if bloom else ("--no-bloom",)),
                *(("--worker-pool", worker_pool) if worker_pool else ()),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.worker_peak_kb = 0
        self.driver_peak_kb = 0
        self._answer()  # ready

    def _answer(self) -> list[str]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(PROTOCOL):
                return line[len(PROTOCOL) :].split()
        raise RuntimeError(f"the {self.master} session ended (exit code {self.proc.wait()})")

    def run(self) -> tuple[float, int]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        seconds, rows, worker_kb, driver_kb = self._answer()
        self.worker_peak_kb = max(self.worker_peak_kb, int(worker_kb))
        self.driver_peak_kb = max(self.driver_peak_kb, int(driver_kb))
        return float(seconds), int(rows)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _log_tables(storage: Storage, locations: list[str]) -> list[pa.Table]:
    out = []
    for loc in locations:
        for block in iter_log_blocks(storage, loc):
            if isinstance(block, LogBlock) and block.block_type is BlockType.PARQUET_DATA:
                out.append(pq.read_table(pa.BufferReader(read_block_content(block, storage)), use_threads=False))
    return out


def bare_run(path: Path, instant: str, share: tuple[int, int] = (0, 1), clean: bool = True) -> tuple[float, int]:
    """Read base, merge logs (latest write per key wins), write: pyarrow only, no Hudi footers. `share` (i, n):
    only every n-th file slice from the i-th (for one of n processes)."""
    storage = Storage()
    table = HudiTable.open(storage, str(path))
    tasks = tasks_for(table, instant, f"9-9-{share[0]}")[share[0] :: share[1]]
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
        pq.write_table(base, str(path / f"{t.file_id}_9-9-{share[0]}_{instant}.parquet"), compression="snappy")
        rows += base.num_rows
    seconds = time.perf_counter() - started
    if clean:
        cleanup(path, instant)
    return seconds, rows


def _bare_share(args: tuple[Path, str, int]) -> tuple[float, int]:
    path, instant, i = args
    return bare_run(path, instant, (i, 2), clean=False)


def bare_two_processes(pool: multiprocessing.pool.Pool, path: Path, instant: str) -> tuple[float, int]:
    """The bare pipeline in two processes at once (`pool`'s two, kept for the whole run so that they are as warm
    as the Spark workers), each on half of the file slices: the wall time until both are done."""
    started = time.perf_counter()
    results = pool.map(_bare_share, [(path, instant, 0), (path, instant, 1)])
    seconds = time.perf_counter() - started
    cleanup(path, instant)
    return seconds, sum(rows for _, rows in results)


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
    return f"{name:34s} {rows:>10,d} rows  median {mid:6.2f} s {rows / mid:>10,.0f} rows/s  (runs: {each})"


def _ratios(name: str, measured: list[float], baseline: list[float], aim: str) -> str:
    """The throughput of the `measured` runs relative to the `baseline` runs of the same rounds (baseline seconds /
    measured seconds), round by round, and their median."""
    ratios = [b / m for m, b in zip(measured, baseline, strict=True)]
    each = " ".join(f"{x:.2f}" for x in ratios)
    return f"{name}: median {statistics.median(ratios):.2f}{aim} (rounds: {each}; first round {ratios[0]:.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--file-groups", type=int, default=16)
    parser.add_argument("--commits", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5, help="rounds (ratios are taken within a round)")
    parser.add_argument(
        "--settle-jobs",
        type=int,
        default=200,
        help="empty jobs each session runs before the first round (a long-running daemon's JVM has run many)",
    )
    parser.add_argument(
        "--no-bloom",
        action="store_true",
        help="the Spark job writes no bloom filter, as for a table with hoodie.parquet.bloom.filter.enabled=false "
        "(the bare pipeline never writes one)",
    )
    parser.add_argument(
        "--worker-pool",
        default="",
        choices=["", "system", "mimalloc", "jemalloc"],
        help="the Python workers' Arrow memory pool (ARROW_DEFAULT_MEMORY_POOL); default: the daemon's (system)",
    )
    parser.add_argument("--session", help=argparse.SUPPRESS)  # a child process holding one Spark session
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--instant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if args.session:
        return session_main(
            Path(args.path), args.session, args.instant, args.settle_jobs, not args.no_bloom, args.worker_pool
        )
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
    runs: dict[str, list[float]] = {"bare": [], "bare2": [], "local[1]": [], "local[2]": []}
    rows: dict[str, set[int]] = {name: set() for name in runs}
    # Every side warm before the first round: this process and the two bare processes run the pipeline once (their
    # first runs pay one-time costs), the sessions warm up their workers.
    bare_run(path, instant)
    pool = multiprocessing.get_context("fork").Pool(2)
    bare_two_processes(pool, path, instant)
    print(
        f"each session runs {args.settle_jobs} empty jobs of the compaction job's shape before the first round "
        "(--settle-jobs; 0: a young JVM, as in a daemon's first jobs)",
        flush=True,
    )
    print(
        "the Spark job writes no bloom filter (--no-bloom)"
        if args.no_bloom
        else "the Spark job writes Hudi's default bloom filter into each file (the bare pipeline writes none)",
        flush=True,
    )
    print(
        f"the workers' Arrow memory pool: {args.worker_pool} (--worker-pool)"
        if args.worker_pool
        else "the workers' Arrow memory pool: the daemon's (glibc's malloc: ARROW_DEFAULT_MEMORY_POOL=system)",
        flush=True,
    )
    sessions = {
        master: Session(path, master, instant, args.settle_jobs, not args.no_bloom, args.worker_pool)
        for master in ("local[1]", "local[2]")
    }
    try:
        for round_ in range(1, max(1, args.repeats) + 1):
            measured = {
                "bare": bare_run(path, instant),
                "bare2": bare_two_processes(pool, path, instant),
                **{master: session.run() for master, session in sessions.items()},
            }
            for name, (seconds, n) in measured.items():
                runs[name].append(seconds)
                rows[name].add(n)
            print(
                f"round {round_}: bare {runs['bare'][-1]:.2f} s, bare in two processes {runs['bare2'][-1]:.2f} s, "
                f"local[1] {runs['local[1]'][-1]:.2f} s, local[2] {runs['local[2]'][-1]:.2f} s",
                flush=True,
            )
    finally:
        pool.terminate()
        for session in sessions.values():
            session.close()
    n = next(iter(rows["bare"]))
    print(_line("bare pyarrow pipeline", n, runs["bare"]))
    print(_line("bare pipeline, two processes", n, runs["bare2"]))
    for master, session in sessions.items():
        print(
            _line(f"tableservice spark {master}", next(iter(rows[master])), runs[master])
            + f"  peak python worker RSS {session.worker_peak_kb / 1024:.0f} MiB",
        )
    print(_ratios("throughput local[1] / bare pipeline", runs["local[1]"], runs["bare"], " (aim >= 0.85)"))
    print(_ratios("throughput local[2] / local[1]", runs["local[2]"], runs["local[1]"], " (aim >= 1.9)"))
    print(
        _ratios(
            "this machine's two cores on the bare pipeline (two processes / one)",
            runs["bare2"],
            runs["bare"],
            " (no aim: the ceiling local[2] / local[1] is read against)",
        )
    )
    print(f"throughput local[1] / hudi-rs read + write: {rs_seconds / statistics.median(runs['local[1]']):.2f}")
    print(f"peak RSS of the local[2] session's driver process: {sessions['local[2]'].driver_peak_kb / 1024:.0f} MiB")
    counts = {rs_rows}.union(*rows.values())
    print(f"row counts agree: {len(counts) == 1} ({sorted(counts)})")
    print(f"load average at the end {os.getloadavg()[0]:.1f} (2 cores: above 2 the figures are not comparable)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
