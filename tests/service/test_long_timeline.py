"""A long history costs a pass nothing: the poll, the decision whether a pass is due and the pass itself read the
active timeline only, never an archive file (v6 archive log, v9 LSM history); commands that ask for the newest
archived compaction or an archived completion time read the newest archive files only."""

from __future__ import annotations

from pathlib import Path

import pytest

from tableservice.cli.table_health import last_archived
from tableservice.errors import TableServiceError
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.failed_writes import FailedWritesPolicy
from tableservice.hudi.timeline.instant import Action
from tableservice.locks import InProcessLockProvider
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.protocol import ServiceSettings
from tableservice.service.rollback import FailedWritesSettings
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import Storage
from tests.support.counting_storage import CountingStorage
from tests.support.long_timeline import long_timeline_table

INSTANTS = 300
CHUNK = 100


def _archive_folder(path: str, version: int) -> str:
    return f"{path}/.hoodie/archived" if version == 6 else f"{path}/.hoodie/timeline/history"


def _data_files_read(storage: CountingStorage, path: str, version: int) -> list[str]:
    """Archive data files read or opened (v6 `.commits_.archive.*`, v9 `*.parquet`), not manifests or listings."""
    return sorted(
        {
            loc
            for op, loc in storage.touched(_archive_folder(path, version))
            if op in ("open", "read") and (".archive." in loc or loc.endswith(".parquet"))
        }
    )


def _worker(path: str, storage: Storage) -> TableWorker:
    """Clean and archival scheduled and executed as the daemon would; compaction neither (no Spark here)."""
    settings = TableSettings(
        uri=path,
        name="long",
        compaction=ServiceSettings(CompactionPolicy(), schedule=False, execute=False),
        clean=ServiceSettings(CleanPolicy.from_mapping({"hoodie.cleaner.commits.retained": "1"})),
        archival=ServiceSettings(ArchivalPolicy()),
        failed_writes=ServiceSettings(FailedWritesSettings(FailedWritesPolicy.NEVER, 60_000, 2), schedule=False),
    )
    return TableWorker(settings, storage, InProcessLockProvider(), SparkExecutor(SparkSettings()))


@pytest.fixture(scope="module", params=[6, 9])
def long_table(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    version = int(request.param)
    path = str(tmp_path_factory.mktemp(f"long{version}") / "t")
    return long_timeline_table(path, version, INSTANTS, chunk=CHUNK), version


def test_a_pass_reads_no_archive_file(long_table: tuple[str, int]) -> None:
    path, version = long_table
    archived = HudiTable.open(Storage(), path).archived_instants(completed_only=True)
    assert len(archived) >= INSTANTS - 30  # most of the history is archived
    storage = CountingStorage()
    worker = _worker(path, storage)
    worker.poll()
    worker.needs_pass()
    result = worker.run_pass(reload=False)
    worker.poll()
    assert not result.failed
    assert storage.touched(_archive_folder(path, version)) == []
    # What the poll reports comes from the active timeline alone.
    active = HudiTable.open(Storage(), path).timeline()
    assert worker.status.pending == []
    compactions = [i.requested_time for i in active.completed() if i.action is Action.COMPACTION]
    assert worker.status.last_compaction == (compactions[-1] if compactions else None)


def test_a_pass_works_with_the_archive_unreadable(long_table: tuple[str, int], tmp_path: Path) -> None:
    """Every archive file replaced by junk: the poll and a pass of clean and archival still succeed, while a
    command reading the archive sees the damage."""
    import shutil

    path, version = long_table
    copy = str(tmp_path / "t")
    shutil.copytree(path, copy)
    folder = Path(_archive_folder(copy, version))
    files = sorted(p for p in folder.iterdir() if p.is_file())
    assert files
    for p in files:
        p.write_bytes(b"not an archive file")
    worker = _worker(copy, Storage())
    result = worker.run_pass()
    assert not result.failed
    assert worker.status.last_poll is not None
    try:
        seen: list[object] | None = list(HudiTable.open(Storage(), copy).archived_instants())
    except TableServiceError:
        seen = None
    assert seen == ([] if version == 6 else None)  # v6 skips corrupt blocks as Hudi does; v9 refuses the file


def test_commands_read_only_the_newest_archive_files(long_table: tuple[str, int]) -> None:
    path, version = long_table
    full = HudiTable.open(Storage(), path).archived_instants(completed_only=True)
    storage = CountingStorage()
    table = HudiTable.open(storage, path)
    storage.calls.clear()
    newest_compaction = last_archived(table, Action.COMPACTION)
    expected = max(a.requested_time for a in full if a.action is Action.COMMIT)
    assert newest_compaction == expected
    data_files = _data_files_read(storage, path, version)
    assert len(data_files) == 1, data_files  # the newest file only, of INSTANTS // CHUNK
    assert data_files == [max(a.location for a in full if a.requested_time == expected)]
    if version == 6:
        return  # v6 log files carry their own instant times; completion times come from v8/v9 history
    newest = max(full, key=lambda a: a.requested_time)
    storage.calls.clear()
    assert table.archived_completion_time(newest.requested_time) == newest.completion_time
    assert _data_files_read(storage, path, version) == [newest.location]
