"""A restore killed after its first rollback: the restore instant is left pending with work remaining."""

from __future__ import annotations

import pytest

from tableservice.hudi.action import restore as restore_module
from tableservice.hudi.models import HoodieRollbackMetadata
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, Instant
from tableservice.storage import FileInfo, Storage


def restore_killed_midway(path: str, savepoint: str, monkeypatch: pytest.MonkeyPatch) -> Instant:
    """Restore the table at `path` to `savepoint`, failing (as a crash would) at the second instant to roll back;
    returns the restore instant left pending (the only one)."""
    real = restore_module._rollback_instant
    calls = {"n": 0}

    def dies_on_second(table: HudiTable, target: Instant, listing: dict[str, list[FileInfo]]) -> HoodieRollbackMetadata:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("killed mid-restore (injected)")
        return real(table, target, listing)

    monkeypatch.setattr(restore_module, "_rollback_instant", dies_on_second)
    with pytest.raises(OSError, match="injected"):
        restore_module.restore(HudiTable.open(Storage(), path), savepoint)
    monkeypatch.undo()
    (pending,) = HudiTable.open(Storage(), path).reload().pending_of(Action.RESTORE).instants
    return pending
