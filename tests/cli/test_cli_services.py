"""Operator commands: clean schedule/run (dry run by default), savepoint create/list/delete, cluster schedule."""

from __future__ import annotations

from pathlib import Path

import pytest

from tableservice.cli import main
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table
from tests.support.oracle import assert_same_rows, hudi_read


def _data_files(path: str) -> set[str]:
    return {p.name for p in Path(path).rglob("*") if p.is_file() and ".hoodie" not in p.parts}


@pytest.mark.oracle
def test_clean_dry_run_then_execute(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tableservice.hudi.table.config import TableType
    from tableservice.hudi.write.client import WriteClient, WriteOptions
    from tableservice.hudi.write.workload import Workload
    from tests.support.trip_tables import create_trip_table

    path = str(tmp_path / "cow")
    create_trip_table(path, 9, TableType.COPY_ON_WRITE, name="cow")
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=100))
    for step in Workload(200, 5, 0.5, 0.0, partitions=1).steps():
        client.apply(step)
    before = hudi_read(path)
    files = _data_files(path)
    assert main(["clean", "schedule", path, "-o", "hoodie.cleaner.commits.retained=1"]) == 0
    assert "scheduled clean" in capsys.readouterr().out
    assert main(["clean", "run", path]) == 0
    out = capsys.readouterr().out
    assert "would delete" in out
    assert _data_files(path) == files  # a dry run deletes nothing
    listed = {line.strip().rsplit("/", 1)[-1] for line in out.splitlines() if line.startswith("  ")}
    assert listed and listed < files
    assert main(["clean", "run", path, "--execute"]) == 0
    assert "completed clean" in capsys.readouterr().out
    assert _data_files(path) == files - listed
    assert_same_rows(hudi_read(path), before, "after clean")


@pytest.mark.oracle
def test_savepoint_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mor_table(tmp_path / "t", records=100, commits=3)
    commits = [i.requested_time for i in HudiTable.open(Storage(), path).timeline().completed_writes()]
    assert main(["savepoint", "create", path, "--instant", commits[-1], "--user", "ops", "--comments", "drill"]) == 0
    assert main(["savepoint", "list", path]) == 0
    out = capsys.readouterr().out
    assert f"{commits[-1]} COMPLETED user='ops' comments='drill'" in out
    table = HudiTable.open(Storage(), path)
    assert [i.requested_time for i in table.timeline().savepoints()] == [commits[-1]]
    assert main(["savepoint", "create", path, "--instant", "20000101000000000"]) == 1
    assert "20000101000000000" in capsys.readouterr().err
    assert main(["savepoint", "delete", path, "--instant", commits[-1]]) == 0
    assert "deleted" in capsys.readouterr().out
    assert not HudiTable.open(Storage(), path).timeline().savepoints()
    assert hudi_read(path).num_rows > 0


def test_cluster_schedule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mor_table(tmp_path / "t", records=200, commits=2, max_file_records=30)
    assert main(["cluster", "schedule", path, "-o", "hoodie.clustering.plan.strategy.sort.columns=fare"]) == 0
    assert "scheduled clustering" in capsys.readouterr().out
    pending = HudiTable.open(Storage(), path).timeline().pending().instants
    assert [i.action for i in pending] == [Action.CLUSTERING]
