"""Failed writes: a writer killed mid delta commit, its heartbeat expired, is rolled back by the daemon's pass;
its files are gone and the snapshot equals the one before that write. Live writers are left alone."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.failed_writes import FailedWritesPolicy, failed_writes
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write import handles
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.markers import heartbeat_path
from tableservice.hudi.write.workload import Workload
from tableservice.locks import InProcessLockProvider
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.protocol import ServiceSettings
from tableservice.service.rollback import FailedWritesSettings
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table
from tests.support.oracle import assert_same_rows, hudi_read


def _failed_write(path: str, monkeypatch: pytest.MonkeyPatch) -> str:
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    step = list(Workload(300, 5, 0.3, 0.03, partitions=2, seed=7).steps())[4]
    real = handles.write_log_file
    calls = {"n": 0}

    def dying(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("writer killed (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(handles, "write_log_file", dying)
    with pytest.raises(OSError, match="injected"):
        client.apply(step)
    monkeypatch.undo()
    pending = HudiTable.open(Storage(), path).timeline().pending().instants
    assert len(pending) == 1
    return pending[0].requested_time


def _worker(path: str, policy: FailedWritesPolicy) -> TableWorker:
    settings = TableSettings(
        uri=path,
        name="t",
        compaction=ServiceSettings(CompactionPolicy(), schedule=False, execute=False),
        failed_writes=ServiceSettings(FailedWritesSettings(policy, 200, 2), schedule=False),
    )
    return TableWorker(settings, Storage(), InProcessLockProvider(), SparkExecutor(SparkSettings()))


@pytest.mark.oracle
def test_expired_writer_is_rolled_back_by_a_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = mor_table(tmp_path / "t", records=300, commits=4, max_file_records=60)
    before = hudi_read(path)
    files_before = {p.name for p in Path(path).rglob("*") if p.is_file() and ".hoodie" not in p.parts}
    failed = _failed_write(path, monkeypatch)
    # A killed writer leaves its heartbeat file behind; it goes stale.
    Path(heartbeat_path(path, failed)).parent.mkdir(parents=True, exist_ok=True)
    Path(heartbeat_path(path, failed)).touch()
    old = time.time() - 10
    os.utime(heartbeat_path(path, failed), (old, old))
    time.sleep(0.5)  # older than the heartbeat window (200 ms x 2)
    worker = _worker(path, FailedWritesPolicy.LAZY)
    worker.poll()
    assert [i.requested_time for i in worker.pending("rollback")] == [failed]
    result = worker.run_pass()
    assert result.rolled_back == [failed] and not result.failed
    table = HudiTable.open(Storage(), path)
    assert table.timeline().get(failed) is None
    assert [i.action for i in table.timeline().completed() if i.action is Action.ROLLBACK] == [Action.ROLLBACK]
    files_after = {p.name for p in Path(path).rglob("*") if p.is_file() and ".hoodie" not in p.parts}
    assert files_after == files_before  # v9: the failed write's log files are deleted
    assert_same_rows(hudi_read(path), before, "after rolling back the failed write")


def test_live_writer_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = mor_table(tmp_path / "t", records=300, commits=4, max_file_records=60)
    failed = _failed_write(path, monkeypatch)
    table = HudiTable.open(Storage(), path)
    Path(heartbeat_path(path, failed)).touch()  # the writer is alive: fresh heartbeat
    now_ms = int(time.time() * 1000)
    # The instant itself is older than the heartbeat window, so only the heartbeat protects it.
    assert (
        failed_writes(
            table, FailedWritesPolicy.LAZY, heartbeat_interval_ms=200, tolerable_misses=2, now_ms=now_ms + 300
        )
        == []
    )
    assert failed_writes(table, FailedWritesPolicy.NEVER) == []
    assert [i.requested_time for i in failed_writes(table, FailedWritesPolicy.EAGER)] == [failed]
    # Without any heartbeat file, a young instant is still protected (writers without heartbeats).
    os.remove(heartbeat_path(path, failed))
    assert failed_writes(table, FailedWritesPolicy.LAZY, heartbeat_interval_ms=600_000, tolerable_misses=2) == []


def test_failed_write_is_rolled_back_by_one_replica(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = mor_table(tmp_path / "t", records=300, commits=4, max_file_records=60)
    failed = _failed_write(path, monkeypatch)
    time.sleep(0.5)
    worker = _worker(path, FailedWritesPolicy.LAZY)
    lease = worker.locks.lease("t", path, f"rollback-{failed}")
    held = lease.acquire(1.0)  # another replica is rolling it back
    skipped = worker.run_pass()
    assert skipped.rolled_back == [] and not skipped.failed
    assert HudiTable.open(Storage(), path).timeline().get(failed) is not None
    lease.release(held)
    assert worker.run_pass().rolled_back == [failed]
    assert HudiTable.open(Storage(), path).timeline().get(failed) is None


def test_v6_compaction_waits_for_an_earlier_pending_write_without_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Table version 6 cannot plan a compaction above a pending write; the pass defers it (no failure, so no
    back-off) and plans it once that write is gone."""
    path = mor_table(tmp_path / "t", version=6, records=300, commits=4, max_file_records=60)
    failed = _failed_write(path, monkeypatch)
    settings = TableSettings(
        uri=path,
        name="t",
        compaction=ServiceSettings(
            CompactionPolicy.from_mapping({"hoodie.compact.inline.max.delta.commits": 1}), execute=False
        ),
        failed_writes=ServiceSettings(FailedWritesSettings(FailedWritesPolicy.NEVER), schedule=False),
        clean=ServiceSettings(CleanPolicy(), schedule=False),
        archival=ServiceSettings(ArchivalPolicy(), schedule=False, execute=False),
    )
    worker = TableWorker(settings, Storage(), InProcessLockProvider(), SparkExecutor(SparkSettings()))
    result = worker.run_pass()
    assert result.failed == [] and result.scheduled == []
    timeline = HudiTable.open(Storage(), path).timeline()
    assert [i.requested_time for i in timeline.pending()] == [failed]
    worker.settings = dataclasses.replace(
        settings, failed_writes=ServiceSettings(FailedWritesSettings(FailedWritesPolicy.EAGER), schedule=False)
    )
    result = worker.run_pass()
    assert result.rolled_back == [failed] and len(result.scheduled) == 1 and result.failed == []
    timeline = HudiTable.open(Storage(), path).timeline()
    assert [i.action for i in timeline.pending()] == [Action.COMPACTION]
    assert result.scheduled == [i.requested_time for i in timeline.pending()]
