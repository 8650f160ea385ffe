"""Long timelines: what one poll of the daemon costs as a table's history grows.

Builds merge-on-read tables (v6 and v9) with 100, 1,000 and 10,000 completed instants, all but the last 20..30
archived by our archival (v6 archive log files, v9 LSM history: `tests/support/long_timeline.py`), then times
what the daemon does for an idle table on every poll: the worker's poll (one timeline listing, the status) and
the decision whether a pass is due. "cold" is a new worker (the daemon's first poll of the table), "warm" the
next polls (median). It also counts the archive files the poll read (the aim: none) and times what a command
(`table show`, `status`) reads of the archive on request: the newest archived compaction, against a full read of
the archived timeline. The aim: poll time flat in the number of instants (O(active timeline)).

    python -m bench.timeline [--instants 100,1000,10000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time

from bench.common import bench_dir
from tableservice.cli.table_health import last_archived
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.locks import InProcessLockProvider
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import Storage
from tests.support.counting_storage import CountingStorage
from tests.support.long_timeline import long_timeline_table


def _archive_folder(path: str, version: int) -> str:
    return f"{path}/.hoodie/archived" if version == 6 else f"{path}/.hoodie/timeline/history"


def _poll(path: str, storage: Storage, executor: SparkExecutor, worker: TableWorker | None = None) -> TableWorker:
    if worker is None:
        worker = TableWorker(TableSettings(uri=path, name="long"), storage, InProcessLockProvider(), executor)
    worker.poll()
    worker.needs_pass()
    return worker


def measure(path: str, version: int, repeat: int) -> dict[str, float]:
    executor = SparkExecutor(SparkSettings())  # never started: an idle poll runs no Spark job
    storage = CountingStorage()
    cold = []
    for _ in range(max(3, repeat // 4)):
        started = time.perf_counter()
        worker = _poll(path, storage, executor)
        cold.append(time.perf_counter() - started)
    warm = []
    for _ in range(repeat):
        started = time.perf_counter()
        _poll(path, storage, executor, worker)
        warm.append(time.perf_counter() - started)
    archive_reads = len(storage.touched(_archive_folder(path, version)))
    table = HudiTable.open(Storage(), path)
    started = time.perf_counter()
    newest = last_archived(table, Action.COMPACTION)
    newest_s = time.perf_counter() - started
    started = time.perf_counter()
    full = table.archived_instants(completed_only=True)
    full_s = time.perf_counter() - started
    assert newest == max(a.requested_time for a in full if a.action is Action.COMMIT)
    return {
        "active": len(table.timeline()),
        "archived": len(full),
        "cold_ms": statistics.median(cold) * 1000,
        "warm_ms": statistics.median(warm) * 1000,
        "archive_reads": archive_reads,
        "newest_ms": newest_s * 1000,
        "full_ms": full_s * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instants", default="100,1000,10000")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="keep the tables (built again otherwise)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.instants.split(",")]
    root = bench_dir("timeline")
    print(
        f"{'table':<6}{'instants':>9}{'active':>8}{'archived':>9}{'poll cold':>11}{'poll warm':>11}"
        f"{'archive reads':>15}{'newest compaction':>19}{'full archive':>14}{'build':>8}"
    )
    for version in (6, 9):
        rows = []
        for n in sizes:
            path = root / f"v{version}_{n}"
            marker = path / ".bench-complete"
            started = time.perf_counter()
            if not (args.keep and marker.exists()):
                if path.exists():
                    shutil.rmtree(path)
                long_timeline_table(str(path), version, n, chunk=max(100, n // 20))
                marker.touch()
            build_s = time.perf_counter() - started
            m = measure(str(path), version, args.repeat)
            rows.append((n, m))
            print(
                f"v{version:<5}{n:>9}{m['active']:>8.0f}{m['archived']:>9.0f}{m['cold_ms']:>9.1f}ms"
                f"{m['warm_ms']:>9.1f}ms{m['archive_reads']:>15.0f}{m['newest_ms']:>17.1f}ms{m['full_ms']:>12.1f}ms"
                f"{build_s:>7.0f}s"
            )
        (n0, first), (n1, last) = rows[0], rows[-1]
        print(
            f"  v{version}: {n1} vs {n0} instants: poll cold {last['cold_ms'] / first['cold_ms']:.2f}x, "
            f"warm {last['warm_ms'] / first['warm_ms']:.2f}x (aim: 1x, flat: O(active timeline)); archive "
            f"files read by polls: {sum(int(r[1]['archive_reads']) for r in rows)} (aim: 0); newest archived "
            f"compaction {last['newest_ms']:.0f} ms against a full archive read of {last['full_ms']:.0f} ms"
        )
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
