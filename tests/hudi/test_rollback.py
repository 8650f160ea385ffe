"""Rolling back failed writes (from markers, and from the files alone) leaves the table as it was before."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from tableservice.hudi.action.rollback import resume_pending_rollbacks, rollback
from tableservice.hudi.file_group.log_format import BlockType, LogBlock, iter_log_blocks
from tableservice.hudi.models import decode_rollback_metadata
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import read
from tableservice.hudi.timeline.instant import Action, State
from tableservice.hudi.write import handles
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.markers import marker_folder
from tableservice.hudi.write.workload import TRIP_SCHEMA, Workload
from tableservice.storage import Storage
from tests.support.oracle import assert_same_rows, hudi_read
from tests.support.trip_tables import create_trip_table


def _failed_write(
    tmp_path: Path,
    version: int,
    table_type: TableType,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Storage, str, pa.Table, str]:
    storage = Storage()
    path = str(tmp_path / "t")
    create_trip_table(path, version, table_type, storage=storage)
    steps = list(Workload(150, 3, 0.5, 0.05, partitions=2).steps())
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=30))
    client.apply(steps[0])
    client.apply(steps[1])
    before = read(HudiTable.open(storage, path))
    # The third write dies after writing some of its files.
    target = "write_log_file" if table_type is TableType.MERGE_ON_READ else "write_new_base_file"
    real = getattr(handles, target)
    calls = {"n": 0}

    def failing(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("killed (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(handles, target, failing)
    with pytest.raises(OSError, match="injected"):
        client.apply(steps[2])
    monkeypatch.undo()
    pending = HudiTable.open(storage, path).timeline().pending().instants
    assert len(pending) == 1
    return storage, path, before, pending[0].requested_time


def _data_files(path: str) -> set[str]:
    return {
        str(p.relative_to(path))
        for p in Path(path).rglob("*")
        if p.is_file() and ".hoodie" not in p.parts and not p.name.startswith(".hoodie_partition")
    }


@pytest.mark.oracle
@pytest.mark.parametrize("use_markers", [True, False], ids=["markers", "listing"])
@pytest.mark.parametrize(
    ("version", "table_type"),
    [
        (6, TableType.MERGE_ON_READ),
        (8, TableType.MERGE_ON_READ),
        (9, TableType.COPY_ON_WRITE),
        (6, TableType.COPY_ON_WRITE),
    ],
)
def test_failed_write_rolls_back(
    tmp_path: Path, version: int, table_type: TableType, use_markers: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, path, before, failed = _failed_write(tmp_path, version, table_type, monkeypatch)
    files_with_failure = _data_files(path)
    if not use_markers:
        shutil.rmtree(marker_folder(path, failed))
    table = HudiTable.open(storage, path)
    target = table.timeline().get(failed)
    assert target is not None
    done = rollback(table, target)
    table = HudiTable.open(storage, path)
    assert table.timeline().get(failed) is None
    assert done.is_completed and done.action is Action.ROLLBACK
    assert not Path(marker_folder(path, failed)).exists()
    md = decode_rollback_metadata(storage.read_bytes(table.active.path_of(done)), path="rollback")
    assert md.commits_rollback == (failed,)
    after_files = _data_files(path)
    removed = files_with_failure - after_files
    added = after_files - files_with_failure
    deleted_in_md = {Path(f).name for pm in md.partition_metadata.values() for f in pm.success_delete_files}
    assert {Path(f).name for f in removed} == deleted_in_md
    if version < 8 and table_type is TableType.MERGE_ON_READ:
        # Appended log blocks are rolled back with command blocks in new log files of the same slices.
        assert added and all(".log." in f and f.endswith("_1-0-1") for f in added)
        for f in added:
            blocks = [b for b in iter_log_blocks(storage, str(Path(path) / f)) if isinstance(b, LogBlock)]
            assert [(b.block_type, b.target_instant_time) for b in blocks] == [(BlockType.COMMAND, failed)]
    else:
        assert not added
        assert all(failed not in f for f in after_files)
    assert_same_rows(read(table), before, "ours after rollback")
    assert_same_rows(hudi_read(path), before, "hudi-rs after rollback")
    # The table takes new writes afterwards.
    WriteClient(storage, path).upsert(before.select(TRIP_SCHEMA.names).slice(0, 5))


def test_interrupted_rollback_is_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage, path, before, failed = _failed_write(tmp_path, 9, TableType.MERGE_ON_READ, monkeypatch)
    table = HudiTable.open(storage, path)
    target = table.timeline().get(failed)
    assert target is not None
    import tableservice.hudi.action.rollback as rb

    def crash(*args: object, **kwargs: object) -> object:
        raise OSError("crash during rollback (injected)")

    monkeypatch.setattr(rb, "_execute", crash)
    with pytest.raises(OSError, match="injected"):
        rollback(table, target)
    monkeypatch.undo()
    pending = HudiTable.open(storage, path).timeline().pending_of(Action.ROLLBACK).instants
    assert len(pending) == 1 and pending[0].state is State.INFLIGHT
    done = resume_pending_rollbacks(HudiTable.open(storage, path))
    assert [d.requested_time for d in done] == [pending[0].requested_time]
    table = HudiTable.open(storage, path)
    assert table.timeline().get(failed) is None
    assert not table.timeline().pending()
    assert_same_rows(read(table), before, "after resumed rollback")
