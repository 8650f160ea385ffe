"""The effect counters move by what the action did: files and bytes a clean deleted (compared with storage before
and after), instants archived (compared with the timelines), failed writes rolled back; each committed action
stamps its last-success time."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tableservice.cli.status_cmd import with_archived_compactions
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.failed_writes import FailedWritesPolicy
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.markers import heartbeat_path
from tableservice.hudi.write.workload import Workload
from tableservice.locks import InProcessLockProvider
from tableservice.metrics import Metrics
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.protocol import ServiceSettings
from tableservice.service.rollback import FailedWritesSettings
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import Storage
from tests.service.test_failed_writes import _failed_write as failed_write
from tests.support.daemon_helpers import mor_table
from tests.support.trip_tables import create_trip_table

NAME = "metered"


def _data_files(path: str) -> dict[str, int]:
    root = Path(path)
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in root.rglob("*")
        if p.is_file() and ".hoodie" not in p.relative_to(root).parts and not p.name.startswith(".hoodie_partition")
    }


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"table": NAME, **labels})


def _worker(path: str, metrics: Metrics, **services: Any) -> TableWorker:
    settings = TableSettings(
        uri=path,
        name=NAME,
        compaction=ServiceSettings(CompactionPolicy(), schedule=False, execute=False),
        clean=services.get("clean", ServiceSettings(CleanPolicy(), schedule=False, execute=False)),
        archival=services.get("archival", ServiceSettings(ArchivalPolicy(), schedule=False, execute=False)),
        failed_writes=services.get(
            "failed_writes", ServiceSettings(FailedWritesSettings(FailedWritesPolicy.NEVER, 60_000, 2), schedule=False)
        ),
    )
    return TableWorker(settings, Storage(), InProcessLockProvider(), SparkExecutor(SparkSettings()), metrics)


def test_clean_and_archival_counters_equal_what_changed_on_storage(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    create_trip_table(path, 9, TableType.COPY_ON_WRITE, name=NAME)
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=20))
    for step in Workload(60, 36, 0.3, 0.0, partitions=2, seed=3).steps():
        client.apply(step)
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    worker = _worker(
        path,
        metrics,
        clean=ServiceSettings(CleanPolicy.from_mapping({"hoodie.cleaner.commits.retained": "3"})),
        archival=ServiceSettings(ArchivalPolicy()),
    )
    files_before = _data_files(path)
    active_before = {i.requested_time for i in HudiTable.open(Storage(), path).timeline()}
    started = time.time()
    result = worker.run_pass()
    assert not result.failed and result.cleaned and result.archived
    gone = {f: size for f, size in files_before.items() if f not in _data_files(path)}
    assert gone, "the clean deleted nothing: the test would prove nothing"
    assert _value(registry, "tableservice_cleaned_files_total") == len(gone)
    assert _value(registry, "tableservice_cleaned_bytes_total") == sum(gone.values())
    active_after = {i.requested_time for i in HudiTable.open(Storage(), path).timeline()}
    archived = active_before - active_after
    assert set(result.archived) <= archived and result.archived
    assert _value(registry, "tableservice_archived_instants_total") == len(result.archived)
    for action in ("clean", "archival"):
        stamp = _value(registry, "tableservice_last_success_timestamp_seconds", action=action)
        assert stamp is not None and started <= stamp <= time.time()
    assert _value(registry, "tableservice_failed_writes_rolled_back_total") is None  # nothing rolled back


def test_a_rolled_back_failed_write_is_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = mor_table(tmp_path / "t", records=300, commits=4, max_file_records=60, name=NAME)
    failed = failed_write(path, monkeypatch)
    beat = Path(heartbeat_path(path, failed))
    beat.parent.mkdir(parents=True, exist_ok=True)
    beat.touch()
    os.utime(beat, (time.time() - 10, time.time() - 10))
    registry = CollectorRegistry()
    worker = _worker(
        path,
        Metrics(registry),
        failed_writes=ServiceSettings(FailedWritesSettings(FailedWritesPolicy.LAZY, 200, 2), schedule=False),
    )
    time.sleep(0.5)
    result = worker.run_pass()
    assert result.rolled_back == [failed] and not result.failed
    assert _value(registry, "tableservice_failed_writes_rolled_back_total") == 1
    assert _value(registry, "tableservice_last_success_timestamp_seconds", action="rollback") is not None


def test_last_compaction_is_found_in_the_archive(tmp_path: Path) -> None:
    """Once its compaction is archived, `tableservice status` still names it, read from the newest archive file by
    the command (a poll never reads the archive)."""
    from tableservice.hudi.action.archival import archive
    from tableservice.hudi.table.read import ReadOptions, read
    from tableservice.hudi.write.workload import FollowUp
    from tests.support.clean_helpers import complete_compaction, schedule_compaction

    path = mor_table(tmp_path / "t", records=60, commits=2, name=NAME)
    compaction = schedule_compaction(path)
    complete_compaction(path, compaction)
    live = read(HudiTable.open(Storage(), path), ReadOptions(columns=("uuid", "ts", "city")))
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    for step in FollowUp(34, 0.1, seed=3).steps(live):
        client.apply(step)
    limits = {"hoodie.keep.min.commits": "5", "hoodie.keep.max.commits": "10", "hoodie.cleaner.commits.retained": "3"}
    archived = archive(HudiTable.open(Storage(), path), ArchivalPolicy.from_mapping(limits))
    assert compaction.requested_time in {i.requested_time for i in archived}
    assert HudiTable.open(Storage(), path).timeline().get(compaction.requested_time) is None
    worker = _worker(path, Metrics(CollectorRegistry()))
    worker.poll()
    worker = _worker(path, Metrics(CollectorRegistry()))
    worker.poll()
    assert worker.status.last_compaction is None  # a poll never reads the archive
    document = with_archived_compactions(Storage(), {"tables": [worker.status.to_json()]})
    assert document["tables"][0]["last_compaction"] == compaction.requested_time
    assert document["tables"][0]["last_compaction_archived"] is True
