"""The commit path checks the table lock again right before the write (the metadata-table update takes time), and a
lock lost only while being released, after the write, does not turn a written change into a failure."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tableservice.errors import LockLostError
from tableservice.hudi.action.commit import Change, ChangeKind, commit
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table


class _Lock:
    """A held lock that is lost on its `lost_at`-th check (0: never), or while being released (`lost_on_release`)."""

    def __init__(self, lost_at: int = 0, lost_on_release: bool = False) -> None:
        self.checks = 0
        self.lost_at = lost_at
        self.lost_on_release = lost_on_release

    def check(self) -> None:
        self.checks += 1
        if self.checks == self.lost_at:
            raise LockLostError("lock lost (injected)")

    @contextmanager
    def hold(self) -> Iterator[Any]:
        yield self
        if self.lost_on_release:
            raise LockLostError("lock lost while releasing (injected)")


def _write(marker: Path) -> Any:
    def write(latest: Timeline, change: Change) -> str:
        marker.write_text("written")
        return "done"

    return write


@pytest.fixture()
def table(tmp_path: Path) -> HudiTable:
    return HudiTable.open(Storage(), mor_table(tmp_path / "t", records=20, commits=1))


def test_a_lock_lost_before_the_write_writes_nothing(table: HudiTable, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    lock = _Lock(lost_at=2)  # the first check passes; the one right before the write finds it lost
    with pytest.raises(LockLostError):
        commit(table, Change(ChangeKind.ARCHIVE), _write(marker), lock=lock.hold)
    assert lock.checks == 2 and not marker.exists()


def test_a_lock_lost_while_releasing_after_the_write_is_logged(
    table: HudiTable, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = tmp_path / "marker"
    lock = _Lock(lost_on_release=True)
    with caplog.at_level(logging.WARNING):
        assert commit(table, Change(ChangeKind.ARCHIVE), _write(marker), lock=lock.hold) == "done"
    assert marker.read_text() == "written" and lock.checks == 2
    assert any("lost after the change was written" in r.getMessage() for r in caplog.records)


def test_a_held_lock_is_checked_twice(table: HudiTable, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    lock = _Lock()
    assert commit(table, Change(ChangeKind.ARCHIVE), _write(marker), lock=lock.hold) == "done"
    assert lock.checks == 2 and marker.read_text() == "written"


def test_a_metadata_compaction_stops_before_its_commit_when_the_lock_is_lost(tmp_path: Path) -> None:
    """The metadata service's last check runs right before the metadata compaction's completed instant: a lost lock
    leaves the compaction inflight (the next pass completes it), nothing completed."""
    from tableservice.hudi.metadata.compaction import compact_metadata_table
    from tableservice.hudi.metadata.initialize import initialize_metadata_table
    from tableservice.hudi.metadata.reader import MetadataTable

    path = mor_table(tmp_path / "m", records=40, commits=1)
    table = HudiTable.open(Storage(), path)
    initialize_metadata_table(table, ("files",))
    table = HudiTable.open(Storage(), path)  # hoodie.properties now lists the metadata table
    mdt = MetadataTable.open(table, table.reload())
    assert mdt is not None
    completed_before = {i.requested_time for i in mdt.mdt_timeline.completed()}

    def lost() -> None:
        raise LockLostError("lock lost (injected)")

    with pytest.raises(LockLostError):
        compact_metadata_table(mdt, max_delta_commits=0, before_commit=lost)
    timeline = HudiTable.open(Storage(), mdt.mdt.base_path).timeline()
    assert {i.requested_time for i in timeline.completed()} == completed_before
    (pending,) = timeline.pending_compactions().instants
    done = compact_metadata_table(MetadataTable.open(table, table.reload()), max_delta_commits=0)  # type: ignore[arg-type]
    assert done is not None and done.requested_time == pending.requested_time and done.is_completed
