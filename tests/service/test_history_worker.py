"""A pass records each action it ran in the history with what it did: the files and bytes a clean deleted (compared
with storage before and after), the instants archival moved (compared with the timelines), a failed write rolled
back, and the error of an action held back; a history file that cannot be written never fails the action."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.models import decode_clean_metadata
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.failed_writes import FailedWritesPolicy
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.locks import InProcessLockProvider
from tableservice.metrics import Metrics
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.history import ActionHistory, ActionOutcome
from tableservice.service.protocol import ServiceSettings
from tableservice.service.rollback import FailedWritesSettings
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import Storage
from tests.support.trip_tables import create_trip_table

NAME = "recorded"
RETAIN_3 = {"hoodie.cleaner.commits.retained": "3"}
KEEP_4_TO_6 = {**RETAIN_3, "hoodie.keep.min.commits": "4", "hoodie.keep.max.commits": "6"}


def _data_files(path: str) -> dict[str, int]:
    root = Path(path)
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in root.rglob("*")
        if p.is_file() and ".hoodie" not in p.relative_to(root).parts and not p.name.startswith(".hoodie_partition")
    }


def _table(tmp_path: Path, commits: int = 8) -> str:
    path = str(tmp_path / "t")
    create_trip_table(path, 9, TableType.COPY_ON_WRITE, name=NAME)
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=20))
    for step in Workload(60, commits, 0.3, 0.0, partitions=2, seed=3).steps():
        client.apply(step)
    return path


def _worker(path: str, history: ActionHistory | None, metrics: Metrics | None = None, **services: Any) -> TableWorker:
    settings = TableSettings(
        uri=path,
        name=NAME,
        compaction=ServiceSettings(CompactionPolicy(), schedule=False, execute=False),
        clean=services.get("clean", ServiceSettings(CleanPolicy(), schedule=False, execute=False)),
        archival=services.get("archival", ServiceSettings(ArchivalPolicy(), schedule=False, execute=False)),
        failed_writes=ServiceSettings(FailedWritesSettings(FailedWritesPolicy.NEVER, 60_000, 2), schedule=False),
    )
    executor = SparkExecutor(SparkSettings())
    return TableWorker(settings, Storage(), InProcessLockProvider(), executor, metrics, history=history)


def test_a_pass_records_what_clean_and_archival_did(tmp_path: Path) -> None:
    path = _table(tmp_path, commits=14)
    history = ActionHistory(str(tmp_path / "state" / "history.sqlite"))
    worker = _worker(
        path,
        history,
        clean=ServiceSettings(CleanPolicy.from_mapping(RETAIN_3)),
        archival=ServiceSettings(ArchivalPolicy.from_mapping(KEEP_4_TO_6)),
    )
    files_before = _data_files(path)
    active_before = {i.requested_time for i in HudiTable.open(Storage(), path).timeline()}
    started = time.time()
    result = worker.run_pass()
    ended = time.time()
    assert not result.failed and result.cleaned and result.archived
    gone = {f: size for f, size in files_before.items() if f not in _data_files(path)}
    archived = active_before - {i.requested_time for i in HudiTable.open(Storage(), path).timeline()}
    assert gone and archived, "the pass deleted or archived nothing: the test would prove nothing"
    rows = history.query()
    by_action = {r.action: r for r in rows}
    assert [r.action for r in rows] == ["archival", "clean"]  # newest first: clean runs before archival
    clean, archival = by_action["clean"], by_action["archival"]
    assert (clean.table, clean.instant, clean.outcome, clean.error) == (
        NAME,
        result.cleaned[0],
        ActionOutcome.COMPLETED,
        None,
    )
    assert clean.files_deleted == len(gone)
    assert clean.bytes_deleted == sum(gone.values())
    assert clean.instants_archived == 0
    assert archival.outcome is ActionOutcome.COMPLETED
    assert archival.instants_archived == len(archived) == len(result.archived)
    assert archival.files_deleted == 0
    for row in rows:
        assert started <= row.started <= row.ended <= ended
    assert clean.ended <= archival.started


def test_a_held_back_action_is_recorded_with_its_error(tmp_path: Path) -> None:
    path = _table(tmp_path)
    history = ActionHistory(str(tmp_path / "history.sqlite"))
    clean = CleanPolicy.from_mapping(RETAIN_3)
    scheduled = _worker(path, history, clean=ServiceSettings(clean, execute=False)).run_pass().scheduled
    assert len(scheduled) == 1 and history.query() == []  # scheduling alone is not an action run
    (plan,) = Path(path, ".hoodie").rglob(f"{scheduled[0]}.clean.requested")
    plan.write_bytes(b"not an avro clean plan")
    files_before = _data_files(path)
    result = _worker(path, history, clean=ServiceSettings(clean, schedule=False)).run_pass()
    assert [f.instant for f in result.held_back] == scheduled
    assert _data_files(path) == files_before
    (row,) = history.query()
    assert (row.action, row.instant, row.outcome) == ("clean", scheduled[0], ActionOutcome.HELD_BACK)
    assert row.error == str(result.held_back[0].error) and row.error
    assert row.files_deleted == 0


def test_an_action_completes_when_its_history_cannot_be_written(tmp_path: Path) -> None:
    path = _table(tmp_path)
    broken = tmp_path / "history.sqlite"
    broken.write_bytes(b"garbage, not SQLite\n" * 100)
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    history = ActionHistory(str(broken), metrics=metrics)
    files_before = _data_files(path)
    result = _worker(path, history, metrics, clean=ServiceSettings(CleanPolicy.from_mapping(RETAIN_3))).run_pass()
    assert not result.failed and len(result.cleaned) == 1
    after = _data_files(path)
    gone = {f: size for f, size in files_before.items() if f not in after}
    table = HudiTable.open(Storage(), path)
    done = table.timeline().get(result.cleaned[0])
    assert done is not None
    md = decode_clean_metadata(table.storage.read_bytes(table.active.path_of(done)), path="clean")
    planned = {f"{p}/{f}" for p, m in md.partition_metadata.items() for f in m.success_delete_files}
    assert gone and set(gone) == planned  # the clean ran in full: exactly the files its metadata names are gone
    assert registry.get_sample_value("tableservice_history_write_failures_total") == 1
    assert registry.get_sample_value("tableservice_cleaned_files_total", {"table": NAME}) == len(planned)
    assert registry.get_sample_value("tableservice_cleaned_bytes_total", {"table": NAME}) == sum(gone.values())
