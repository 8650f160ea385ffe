"""First action latency through Spark Connect: `tableservice compact run --remote sc://...` against a running
local Spark Connect server, against the same command with a local master (which starts its own JVM).

Starts a Spark Connect server (pyspark's `spark-submit --class ...SparkConnectServer`, local[2], loopback), builds
a small merge-on-read table, schedules a compaction and runs it with the CLI as a separate process, twice against
the server (its first job starts the server's Python workers) and once with `--master local[2]`. Prints each run's
wall time and the processes the CLI started (aim: none with `--remote`: a Spark Connect client only), and checks
the compacted table with hudi-rs.

    python -m bench.connect [--records 20000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from bench.common import bench_dir, standard_mor_table
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.locks import InProcessLockProvider
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.actions import TableContext
from tableservice.service.compaction import schedule_compaction
from tableservice.storage import Storage
from tests.support.oracle import assert_same_rows, hudi_read
from tests.support.servers import run_watching_children, spark_connect_server

FILE_NAME = "_hoodie_file_name"


def _scheduled_copy(source: Path, target: Path) -> str:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    table = HudiTable.open(Storage(), str(target))
    ctx = TableContext(table=table, lock=InProcessLockProvider().table_lock(table.name, str(target)), executor=None)  # type: ignore[arg-type]
    instant = schedule_compaction(ctx, CompactionPolicy(), force=True)
    assert instant is not None
    return instant.requested_time


def _run(path: Path, instant: str, spark: list[str]) -> tuple[float, set[str]]:
    before = hudi_read(str(path))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    started = time.perf_counter()
    code, out, err, children = run_watching_children(
        [sys.executable, "-m", "tableservice", "compact", "run", str(path), *spark], env=env, timeout=1200
    )
    took = time.perf_counter() - started
    if code != 0 or f"completed compaction {instant}" not in out:
        raise SystemExit(f"compact run {' '.join(spark)} failed ({code}): {err[-2000:]}")
    table = HudiTable.open(Storage(), str(path))
    assert table.timeline().is_completed(instant)
    assert all(not s.log_files for s in table.file_system_view().latest_slices())
    assert_same_rows(hudi_read(str(path)).drop_columns([FILE_NAME]), before.drop_columns([FILE_NAME]), "compacted")
    return took, children


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20000)
    args = parser.parse_args()
    root = bench_dir("connect")
    source = standard_mor_table(root / "source", records=args.records, file_groups=4, commits=3, update_fraction=0.2)
    rows: list[tuple[str, float, set[str]]] = []
    started = time.perf_counter()
    with spark_connect_server() as url:
        server_s = time.perf_counter() - started
        for run in ("first", "second"):
            target = root / f"remote_{run}"
            instant = _scheduled_copy(source, target)
            took, children = _run(target, instant, ["--remote", url])
            rows.append((f"--remote ({run} job on the server)", took, children))
    target = root / "local"
    instant = _scheduled_copy(source, target)
    took, children = _run(target, instant, ["--master", "local[2]"])
    rows.append(("--master local[2] (own JVM)", took, children))
    print(f"Spark Connect server (local[2]) up in {server_s:.1f}s; {args.records} records, 4 file groups")
    print(f"{'compact run':<38}{'wall':>8}  processes the CLI started")
    for name, took, children in rows:
        print(f"{name:<38}{took:>7.1f}s  {', '.join(sorted(children)) or 'none'}")
    remote = rows[1][1]
    local = rows[2][1]
    print(
        f"--remote (warm server) {remote:.1f}s against a local master {local:.1f}s ({local / remote:.2f}x); "
        f"local JVMs started by --remote runs: {sum('java' in c for _, _, cs in rows[:2] for c in cs)} (aim: 0); "
        "hudi-rs reads the same rows after every run"
    )
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
