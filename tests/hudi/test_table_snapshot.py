"""What one pass costs in storage calls, what the table holds after a commit, and `hoodie.properties` being read
again while the daemon runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tableservice.errors import InvalidTableConfigError
from tableservice.hudi.table.config import TableConfig, load_table_config, store_table_config
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

    def list(self, location: str, *, recursive: bool = False) -> list[FileInfo]:
        self.lists.append(location)
        return super().list(location, recursive=recursive)

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
    storage = Storage()
    config = load_table_config(storage, path)
    props = dict(config.properties)
    props["hoodie.table.metadata.partitions"] = "files"
    store_table_config(storage, path, TableConfig(props, path=config.path))


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
    assert worker.table.config.has_metadata_table
    assert worker.status.health.startswith("unsupported")
    assert not worker.needs_pass()
    text = metrics.render()[0].decode()
    assert 'tableservice_table_unsupported{reason="metadata_table",table="t"} 1.0' in text


@pytest.mark.spark
@pytest.mark.oracle
def test_a_metadata_table_enabled_while_a_compaction_runs_leaves_it_uncommitted(
    tmp_path: Path, spark_executor: Any
) -> None:
    path, ctx, scheduled = with_pending_compaction(tmp_path / "t", spark_executor, records=200, commits=3)
    # While the plan waits, a writer commits and enables the metadata table beside it.
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    client.apply(next(iter(Workload(20, 1, 0.0, 0.0, partitions=2, seed=5).steps())))
    after_write = hudi_read(path)
    _enable_metadata_table(path)
    # The properties now name a metadata table that does not exist: nothing may be committed.
    with pytest.raises(InvalidTableConfigError, match="metadata table is missing"):
        execute_compaction(ctx, scheduled.requested_time)
    fresh = HudiTable.open(Storage(), path).timeline()
    pending = fresh.get(scheduled.requested_time, Action.COMPACTION)
    assert pending is not None and not pending.is_completed
    assert_same_rows(hudi_read(path), after_write)
