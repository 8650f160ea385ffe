"""The daemon with SLO priority on Spark: a group's quota holds while the global cap would allow more, and a table
whose lock waits rose runs its next action only after its back-off."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tableservice.config import load_config
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.locks import InProcessLockProvider
from tableservice.service.daemon import Daemon
from tableservice.service.history import ActionOutcome, ActionRecord
from tableservice.storage import Storage
from tests.support.daemon_helpers import config_text, run_until, with_pending_compaction
from tests.support.trip_tables import create_trip_table


def _config(tmp_path: Path, tables: list[str], service: str, **kwargs: Any) -> Path:
    text = config_text(tables, **kwargs).replace(
        "service:\n", f"service:\n  history: {{path: {tmp_path / 'history.sqlite'}}}\n{service}", 1
    )
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(text)
    return cfg


def _completed(daemon: Daemon, action: str) -> list[ActionRecord]:
    assert daemon.history is not None
    return [r for r in daemon.history.query() if r.action == action and r.outcome is ActionOutcome.COMPLETED]


@pytest.mark.spark
def test_tables_of_a_group_never_run_actions_at_the_same_time(tmp_path: Path, spark_executor: Any) -> None:
    paths = [
        with_pending_compaction(tmp_path / f"t{i}", spark_executor, records=120, commits=2, name=f"t{i}")[0]
        for i in range(3)
    ]
    groups = "  max_concurrent_actions: 3\n  groups:\n    g: {max_concurrent_actions: 1, tables: [table0, table1]}\n"
    cfg = _config(tmp_path, paths, groups, max_delta_commits=50, poll=0.2)
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
    run_until(daemon, lambda: daemon.history is not None and len(_completed(daemon, "compaction")) >= 3)
    done = {r.table: r for r in _completed(daemon, "compaction")}
    assert set(done) == {"table0", "table1", "table2"}
    assert daemon.history is not None
    records = daemon.history.query()
    grouped = [r for r in records if r.table in ("table0", "table1")]
    for a in grouped:
        for b in grouped:
            if a.table != b.table:
                assert a.ended <= b.started or b.ended <= a.started, f"{a} overlaps {b}"
    assert daemon.capacity.in_use == 0 and daemon.capacity.group_in_use("g") == 0


@pytest.mark.spark
def test_long_lock_waits_delay_the_tables_next_action(tmp_path: Path, spark_executor: Any) -> None:
    path = str(tmp_path / "t")
    create_trip_table(path, 9, TableType.MERGE_ON_READ, name="t")
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    steps = list(Workload(120, 3, 0.3, 0.0, partitions=2, seed=7).steps())
    for step in steps[:2]:
        client.apply(step)
    backoff = "  backoff: {lock_wait_seconds: 0.5, initial_delay_seconds: 4, max_delay_seconds: 60}\n"
    cfg = _config(tmp_path, [path], backoff, max_delta_commits=1, poll=0.2)
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
    # A writer holds the table lock when the daemon starts and keeps it 2 s after the first poll.
    lock = InProcessLockProvider().table_lock("t", HudiTable.open(Storage(), path).base_path)
    handle = lock.acquire(1.0)
    released = threading.Event()
    backoff_until: list[float] = []
    wrote = threading.Event()

    def progress() -> bool:
        task = next(iter(daemon.tables.values()), None)
        if task is None:
            return False
        status = task.worker.status
        if not released.is_set() and status.last_poll is not None:
            threading.Timer(2.0, lock.release, args=(handle,)).start()
            released.set()
        if status.backoff_until is not None and not backoff_until:
            backoff_until.append(status.backoff_until)
            client.apply(steps[2])  # compaction is due again at once; the back-off holds it
            wrote.set()
        return wrote.is_set() and len(_completed(daemon, "compaction")) >= 2

    run_until(daemon, progress, timeout=180)
    assert backoff_until, "the long lock wait did not back the table off"
    first, second = sorted(_completed(daemon, "compaction"), key=lambda r: r.started)[:2]
    until = backoff_until[0]
    assert first.ended <= until
    # Nothing of the table started between the end of the pass that waited and the end of its back-off.
    assert daemon.history is not None
    assert [r for r in daemon.history.query() if until - 4 < r.started < until] == []
    assert second.started >= until
