"""`tableservice savepoint restore URI --instant T [--yes]`: a preview without `--yes` (nothing written, non-zero
exit), the restore with it (hudi-rs reads the savepoint's rows, `table verify` passes), exit 2 when refused, and a
clear message when another writer holds the table lock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tableservice.cli import main
from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.locks.inprocess import InProcessTableLock
from tableservice.storage import Storage
from tests.support.oracle import assert_same_rows, hudi_read
from tests.support.trip_tables import create_trip_table

ST = Storage()


def _table(tmp_path: Path, version: int) -> tuple[str, list[str], str]:
    """A MOR table with a metadata table and five commits, a savepoint at the third; (path, the commits after
    the savepoint, the savepoint's time)."""
    path = str(tmp_path / "t")
    create_trip_table(path, version, TableType.MERGE_ON_READ, storage=ST)
    initialize_metadata_table(HudiTable.open(ST, path), ("files",))
    client = WriteClient(ST, path, options=WriteOptions(max_file_records=30))
    steps = list(Workload(90, 5, 0.5, 0.0, partitions=2, seed=3).steps())
    for step in steps[:3]:
        client.apply(step)
    t = list(HudiTable.open(ST, path).reload().completed_writes())[-1].requested_time
    assert main(["savepoint", "create", path, "--instant", t]) == 0
    for step in steps[3:]:
        client.apply(step)
    later = [i.requested_time for i in HudiTable.open(ST, path).reload().completed_writes() if i.requested_time > t]
    return path, later, t


def _timeline_files(path: str) -> list[str]:
    return sorted(os.listdir(HudiTable.open(ST, path).active.folder))


@pytest.mark.oracle
@pytest.mark.parametrize("version", [6, 9])
def test_preview_then_restore(version: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, later, t = _table(tmp_path, version)
    at_savepoint = hudi_read(path, as_of=t)
    now = hudi_read(path)
    files = _timeline_files(path)
    capsys.readouterr()

    assert main(["savepoint", "restore", path, "--instant", t]) == 1
    out = capsys.readouterr().out
    assert f"to savepoint {t} would roll back {len(later)} instants" in out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert listed == sorted(later, reverse=True)
    assert "metadata table (files) would be rebuilt" in out and "--yes" in out
    assert _timeline_files(path) == files  # a preview writes nothing
    assert_same_rows(hudi_read(path), now, "after the preview")

    assert main(["savepoint", "restore", path, "--instant", t, "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"restored t to savepoint {t}" in out and f"rolled back {len(later)} instants" in out
    assert "metadata table rebuilt: files" in out
    assert_same_rows(hudi_read(path), at_savepoint, "hudi-rs after the restore")
    timeline = HudiTable.open(ST, path).reload()
    after = [i for i in timeline if i.requested_time > t]
    assert [i.action for i in after] == [Action.RESTORE] and after[0].is_completed
    assert main(["table", "verify", path]) == 0
    # Restored again to the same savepoint: nothing is left to roll back.
    assert main(["savepoint", "restore", path, "--instant", t, "--yes"]) == 0
    assert "rolled back 0 instants" in capsys.readouterr().out


def test_refused_and_locked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, later, t = _table(tmp_path, 8)
    files = _timeline_files(path)
    capsys.readouterr()

    assert main(["savepoint", "restore", path, "--instant", later[0], "--yes"]) == 2
    err = capsys.readouterr().err
    assert f"cannot restore to {later[0]}: it is not a savepoint" in err and "table=t" in err
    assert main(["savepoint", "restore", path, "--instant", "20000101000000000", "--yes"]) == 2
    assert "older than the active timeline (archived)" in capsys.readouterr().err

    writer = InProcessTableLock(path)  # another writer of this process holds the table lock
    handle = writer.acquire(0.0)
    try:
        assert main(["savepoint", "restore", path, "--instant", t, "--yes", "--lock-timeout", "0.2"]) == 1
    finally:
        writer.release(handle)
    err = capsys.readouterr().err
    assert "table t is locked by another writer (not acquired within 0.2s)" in err
    assert _timeline_files(path) == files  # nothing written by the refusals
