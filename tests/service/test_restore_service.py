"""The daemon's rollback service finishes a restore to a savepoint that a crashed process left pending."""

from __future__ import annotations

from pathlib import Path

import pytest

from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.action.savepoint import create_savepoint
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, State
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.locks import InProcessLockProvider
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.protocol import ServiceSettings
from tableservice.service.rollback import FailedWritesSettings
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import Storage
from tests.support.oracle import assert_same_rows, hudi_read
from tests.support.restore_helpers import restore_killed_midway
from tests.support.trip_tables import create_trip_table

ST = Storage()


@pytest.mark.oracle
def test_a_pass_finishes_a_pending_restore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "t")
    create_trip_table(path, 9, TableType.MERGE_ON_READ)
    client = WriteClient(ST, path, options=WriteOptions(max_file_records=30))
    steps = list(Workload(90, 5, 0.5, 0.0, partitions=2, seed=4).steps())
    for step in steps[:2]:
        client.apply(step)
    t = list(HudiTable.open(ST, path).reload().completed_writes())[-1].requested_time
    create_savepoint(HudiTable.open(ST, path), t)
    at_savepoint = hudi_read(path)
    for step in steps[2:]:
        client.apply(step)
    pending = restore_killed_midway(path, t, monkeypatch)

    settings = TableSettings(
        uri=path,
        name="t",
        compaction=ServiceSettings(CompactionPolicy(), schedule=False, execute=False),
        failed_writes=ServiceSettings(FailedWritesSettings(), schedule=False),
    )
    worker = TableWorker(settings, ST, InProcessLockProvider(), SparkExecutor(SparkSettings()))
    worker.poll()
    assert worker.pending("rollback") == [pending]
    result = worker.run_pass()

    assert not result.failed
    timeline = HudiTable.open(ST, path).reload()
    done = timeline.get(pending.requested_time, Action.RESTORE)
    assert done is not None and done.state is State.COMPLETED
    assert [i.requested_time for i in timeline if i.requested_time > t] == [done.requested_time]
    assert_same_rows(hudi_read(path), at_savepoint, "after the daemon finished the restore")
