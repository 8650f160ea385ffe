"""What one pass costs in storage calls, what the table holds after a commit, and `hoodie.properties` being read
again while the daemon runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.locks import InProcessLockProvider
from tableservice.metrics import new_metrics
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.compaction import execute_compaction
from tableservice.service.protocol import ServiceSettings
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import FileInfo, Storage
from tests.support.daemon_helpers import mor_table, with_pending_compaction
from tests.support.oracle import assert_same_rows, hudi_read


class CountingStorage(Storage):
    """Storage that records listings and reads."""

    def __init__(self) -> None:
        super().__init__()
        self.lists: list[str] = []
        self.reads: list[str] = []

    def list(self, location: str, *, recursive: bool = False, temp_files: bool = False) -> list[FileInfo]:
        self.lists.append(location)
        return super().list(location, recursive=recursive, temp_files=temp_files)

    def read_bytes(self, location: str) -> bytes:
        self.reads.append(location)
        return super().read_bytes(location)


def _settings(path: str) -> TableSettings:
    return TableSettings(
        uri=path,
        name="t",
        compaction=ServiceSettings(CompactionPolicy(), schedule=False),
        clean=ServiceSettings(CleanPolicy.from_mapping({"hoodie.cleaner.commits.retained": 50})),
        archival=ServiceSettings(ArchivalPolicy(min_commits=40, max_commits=50)),
    )


@pytest.mark.spark
def test_one_compaction_then_clean_and_archival_lists_the_timeline_four_times(
    tmp_path: Path, spark_executor: Any
) -> None:
    path, _, scheduled = with_pending_compaction(tmp_path / "t", spark_executor, records=200, commits=3)
    storage = CountingStorage()
    worker = TableWorker(_settings(path), storage, InProcessLockProvider(), spark_executor)  # type: ignore[arg-type]
    worker.poll()  # as the daemon does: poll, ask whether a pass is needed, run it on the polled timeline
    assert worker.needs_pass()
    result = worker.run_pass(reload=False)
    assert [c.instant.requested_time for c in result.completed] == [scheduled.requested_time]
    assert result.failed == [] and result.cleaned == [] and result.archived == []
    timeline_folder = str(Path(path) / ".hoodie" / "timeline")
    # The poll; the plan's fresh view before it runs; the re-read under the lock at commit; the clean the new commit
    # made due, planned on the timeline re-read under the lock (it finds nothing to delete: 50 commits retained).
    # Archival is asked on the timeline the commit left (not due), and the status after the pass lists nothing.
    assert storage.lists.count(timeline_folder) == 4, storage.lists
    # The timeline the table holds after the commit is the one on storage.
    fresh = HudiTable.open(Storage(), path).timeline()
    assert worker.table is not None
    assert worker.table.timeline().instants == fresh.instants
    assert fresh.get(scheduled.requested_time, Action.COMPACTION) is not None
    assert fresh.get(scheduled.requested_time, Action.COMPACTION).is_completed  # type: ignore[union-attr]


def test_idle_polls_list_once_and_leave_hoodie_properties_alone(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t", records=100, commits=2)
    storage = CountingStorage()
    worker = TableWorker(_settings(path), storage, InProcessLockProvider(), None)  # type: ignore[arg-type]
    first = worker.run_pass()  # a clean is due on a table never cleaned: planned once, nothing to delete
    assert first.scheduled == [] and first.failed == []
    storage.lists.clear()
    storage.reads.clear()
    for _ in range(3):
        worker.poll()
        assert not worker.needs_pass()
    assert storage.lists == [str(Path(path) / ".hoodie" / "timeline")] * 3
    assert not [r for r in storage.reads if r.endswith("hoodie.properties")], storage.reads


def _enable_metadata_table(path: str) -> None:
    """What a writer with `hoodie.metadata.enable=true` does to a table without one: build the `files` partition."""
    initialize_metadata_table(HudiTable.open(Storage(), path), ["files"])


def test_a_writer_enabling_the_metadata_table_is_noticed_without_a_restart(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t", records=100, commits=2)
    metrics = new_metrics()
    worker = TableWorker(_settings(path), Storage(), InProcessLockProvider(), None, metrics)  # type: ignore[arg-type]
    worker.poll()
    assert worker.table is not None and not worker.table.config.has_metadata_table
    # A writer commits and enables the metadata table beside it.
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    client.apply(next(iter(Workload(20, 1, 0.0, 0.0, partitions=2, seed=3).steps())))
    _enable_metadata_table(path)
    worker.poll()
    assert worker.table.config.metadata_partitions == ("files",)
    assert not worker.status.health.startswith("unsupported")  # kept in step from now on
    assert "metadata" in [svc.name for svc in worker.services() if svc.applies(worker.table.snapshot())]


@pytest.mark.spark
@pytest.mark.oracle
def test_a_metadata_table_enabled_while_a_compaction_runs_is_kept_in_step(tmp_path: Path, spark_executor: Any) -> None:
    path, ctx, scheduled = with_pending_compaction(tmp_path / "t", spark_executor, records=200, commits=3)
    # While the plan waits, a writer commits and enables the metadata table beside it.
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    client.apply(next(iter(Workload(20, 1, 0.0, 0.0, partitions=2, seed=5).steps())))
    after_write = hudi_read(path)
    _enable_metadata_table(path)
    # The commit path reads hoodie.properties again under the lock: the compaction's files reach the new metadata
    # table before the compaction completes.
    execute_compaction(ctx, scheduled.requested_time)
    table = HudiTable.open(Storage(), path)
    done = table.timeline().get(scheduled.requested_time, Action.COMPACTION)
    assert done is not None and done.is_completed
    assert verify_metadata_table(table) == []
    assert_same_rows(
        hudi_read(path).drop_columns(["_hoodie_file_name"]), after_write.drop_columns(["_hoodie_file_name"])
    )
