"""`tableservice plan cancel`: a requested compaction, clustering or clean plan is removed through the commit path
(the metadata table untouched, nothing else changed); inflight, completed and foreign instants are refused, and so
is a plan whose executor lease another process holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tableservice.cli import main
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.locks import InProcessLockProvider
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table
from tests.support.oracle import assert_same_rows, hudi_read


def folder_state(path: str) -> dict[str, bytes | None]:
    root = Path(path)
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def pending(path: str) -> list[Instant]:
    return list(HudiTable.open(Storage(), path).timeline().pending())


def generate(path: Path, version: int, metadata: str = "") -> str:
    argv = ["generate", str(path), "--table-version", str(version), "--records", "200", "--commits", "3"]
    argv += ["--partitions", "2", "--max-file-records", "50", "--update-fraction", "0.3"]
    assert main([*argv, "--metadata", metadata] if metadata else argv) == 0
    return str(path)


@pytest.mark.oracle
def test_cancel_requested_compaction_keeps_metadata_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = generate(tmp_path / "t", 9, metadata="files")
    rows = hudi_read(path)
    before = folder_state(path)
    assert main(["compact", "schedule", path]) == 0
    (instant,) = pending(path)
    assert instant.action is Action.COMPACTION and instant.state is State.REQUESTED
    plan_file = HudiTable.open(Storage(), path).active.path_of(instant)
    capsys.readouterr()
    assert main(["plan", "cancel", path, "--instant", instant.requested_time]) == 0
    assert capsys.readouterr().out.strip() == f"cancelled compaction {instant.requested_time}: {plan_file} removed"
    assert pending(path) == []
    assert folder_state(path) == before  # the plan file gone, nothing else changed (metadata table included)
    assert main(["table", "verify", path]) == 0
    assert_same_rows(hudi_read(path), rows, "after cancel")
    assert main(["compact", "schedule", path]) == 0  # a new plan can be made
    assert [i.action for i in pending(path)] == [Action.COMPACTION]


def test_cancel_requested_clustering_version_6(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mor_table(tmp_path / "t", version=6, records=200, commits=2, max_file_records=30)
    before = folder_state(path)
    assert main(["cluster", "schedule", path]) == 0
    (instant,) = pending(path)
    assert instant.action is Action.REPLACE_COMMIT  # version 6: clustering is a replace commit holding its plan
    capsys.readouterr()
    assert main(["plan", "cancel", path, "--instant", instant.requested_time]) == 0
    assert capsys.readouterr().out.startswith(f"cancelled clustering {instant.requested_time}")
    assert folder_state(path) == before


def test_cancel_refuses_inflight_completed_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mor_table(tmp_path / "t", records=120, commits=3)
    table = HudiTable.open(Storage(), path)
    last_commit = table.timeline().completed_writes().instants[-1].requested_time
    assert main(["compact", "schedule", path]) == 0
    (requested,) = pending(path)
    inflight = table.active.transition_to_inflight(requested)
    requested_commit = table.active.create_requested("29990101000000000", Action.DELTA_COMMIT)
    before = folder_state(path)
    capsys.readouterr()

    assert main(["plan", "cancel", path, "--instant", inflight.requested_time]) == 1
    err = capsys.readouterr().err
    assert f"compaction {inflight.requested_time} is inflight" in err and "roll it back instead" in err
    assert main(["plan", "cancel", path, "--instant", last_commit]) == 1
    assert "is completed: only a requested plan can be cancelled" in capsys.readouterr().err
    assert main(["plan", "cancel", path, "--instant", requested_commit.requested_time]) == 1
    assert "is not a compaction, clustering or clean plan" in capsys.readouterr().err
    assert main(["plan", "cancel", path, "--instant", "20000101000000000"]) == 1
    assert "no instant 20000101000000000 on the active timeline" in capsys.readouterr().err
    assert folder_state(path) == before


def test_cancel_refused_while_the_plan_is_leased(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mor_table(tmp_path / "t", records=120, commits=3)
    assert main(["compact", "schedule", path]) == 0
    (instant,) = pending(path)
    t = instant.requested_time
    lease = InProcessLockProvider().lease("t", path, f"compaction-{t}")  # a daemon executing it holds this
    handle = lease.acquire(0.0)
    try:
        capsys.readouterr()
        assert main(["plan", "cancel", path, "--instant", t]) == 1
        assert f"compaction {t}: another process holds its executor lease" in capsys.readouterr().err
        assert pending(path) == [instant]
    finally:
        lease.release(handle)
    assert main(["plan", "cancel", path, "--instant", t]) == 0
    assert pending(path) == []
