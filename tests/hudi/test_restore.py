"""Restoring tables written by our write client to a savepoint: hudi-rs reads exactly the rows it read at the
savepoint, the timeline ends with the completed restore and holds nothing after the savepoint, the metadata table
is in step; a restore interrupted mid-way is finished by the next run; refusals name the table and the instant."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import fastavro
import pytest

from tableservice.hudi.action.restore import RestoreError, plan_restore, restore, resume_restore
from tableservice.hudi.action.savepoint import create_savepoint
from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.models import (
    HoodieInstantInfo,
    HoodieRestoreMetadata,
    HoodieRestorePlan,
    HoodieRollbackMetadata,
    HoodieRollbackPartitionMetadata,
    decode_instant_content,
    decode_restore_metadata,
    decode_restore_plan,
    encode_restore_metadata,
    encode_restore_plan,
)
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import read
from tableservice.hudi.timeline.instant import Action, State
from tableservice.hudi.write import handles
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload, WorkloadStep
from tableservice.storage import Storage
from tests.support.oracle import assert_same_rows, hudi_read
from tests.support.restore_helpers import restore_killed_midway
from tests.support.trip_tables import create_trip_table

ST = Storage()
MOR, COW = TableType.MERGE_ON_READ, TableType.COPY_ON_WRITE


def _fail_next_write(
    client: WriteClient, step: WorkloadStep, table_type: TableType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write dies after writing some of its files: a pending instant with files on storage."""
    target = "write_log_file" if table_type is MOR else "write_new_base_file"
    real = getattr(handles, target)
    calls = {"n": 0}

    def failing(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("killed (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(handles, target, failing)
    with pytest.raises(OSError, match="injected"):
        client.apply(step)
    monkeypatch.undo()


def _table(
    tmp_path: Path, version: int, table_type: TableType, mdt: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, list[WorkloadStep]]:
    """A table (with a metadata table when `mdt`) and its first three commits; the workload's six steps."""
    path = str(tmp_path / "t")
    create_trip_table(path, version, table_type, storage=ST)
    if mdt:
        wanted = ("files", "column_stats") if version == 6 else ("files", "column_stats", "record_index")
        initialize_metadata_table(HudiTable.open(ST, path), wanted)
    client = WriteClient(ST, path, options=WriteOptions(max_file_records=25))
    steps = list(Workload(80, 6, 0.5, 0.05, partitions=2, seed=11).steps())
    for step in steps[:3]:
        client.apply(step)
    return path, steps


@pytest.mark.oracle
@pytest.mark.parametrize(
    ("version", "table_type", "mdt"),
    [
        (6, MOR, False),
        (6, COW, True),
        (6, MOR, True),
        (8, COW, False),
        (8, MOR, True),
        (9, MOR, False),
        (9, COW, True),
    ],
    ids=["v6-mor", "v6-cow-mdt", "v6-mor-mdt", "v8-cow", "v8-mor-mdt", "v9-mor", "v9-cow-mdt"],
)
def test_restore_to_savepoint(
    version: int, table_type: TableType, mdt: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, steps = _table(tmp_path, version, table_type, mdt, monkeypatch)
    table = HudiTable.open(ST, path)
    t = list(table.timeline().completed_writes())[-1].requested_time
    create_savepoint(table, t)
    at_savepoint, ours_at_savepoint = hudi_read(path), read(HudiTable.open(ST, path))
    client = WriteClient(ST, path, options=WriteOptions(max_file_records=25))
    client.apply(steps[3])
    client.apply(steps[4])
    _fail_next_write(client, steps[5], table_type, monkeypatch)
    before = HudiTable.open(ST, path).reload()
    after_t = [i for i in before if i.requested_time > t and i.action is not Action.SAVEPOINT]
    assert len(after_t) == 3 and any(not i.is_completed for i in after_t)
    assert hudi_read(path).to_pylist() != at_savepoint.to_pylist()

    plan = plan_restore(table, t)
    assert [i.commit_time for i in plan.instants_to_rollback] == sorted(
        (i.requested_time for i in after_t), reverse=True
    )
    assert plan.savepoint_to_restore_timestamp == t

    result = restore(HudiTable.open(ST, path), t)

    restored = HudiTable.open(ST, path)
    timeline = restored.reload()
    assert [i.requested_time for i in timeline if i.requested_time > t] == [result.instant.requested_time]
    assert timeline.last() == result.instant and result.instant.action is Action.RESTORE
    assert result.instant.is_completed
    assert [i.requested_time for i in timeline.completed_writes()][-1] == t  # SavepointHelpers.validateSavepointRestore
    assert not list(timeline.of_actions(Action.ROLLBACK))
    names = set(os.listdir(restored.active.folder))
    r = result.instant.requested_time
    assert {f"{r}.restore.requested", f"{r}.restore.inflight"} <= names
    path_done = restored.active.path_of(result.instant)
    md = decode_instant_content(ST.read_bytes(path_done), action="restore", state=State.COMPLETED, path=path_done)
    assert isinstance(md, HoodieRestoreMetadata)
    assert md.instants_to_rollback == tuple(i.commit_time for i in plan.instants_to_rollback)
    assert set(md.hoodie_restore_metadata) == {i.requested_time for i in after_t}
    for instant_time, rollbacks in md.hoodie_restore_metadata.items():
        assert len(rollbacks) == 1 and rollbacks[0] is not None and rollbacks[0].commits_rollback == (instant_time,)
    requested = restored.active.path_of(result.instant.with_state(State.REQUESTED))
    assert decode_restore_plan(ST.read_bytes(requested), path=requested) == plan
    if version == 6:
        assert path_done.endswith(f"{r}.restore")
    else:
        assert path_done.endswith(f"{r}_{result.instant.completion_time}.restore")
    # The oracle reads what it read at the savepoint, row for row; so does our reader.
    assert_same_rows(hudi_read(path), at_savepoint, "hudi-rs after the restore")
    assert_same_rows(read(restored), ours_at_savepoint, "our reader after the restore")
    if mdt:
        assert result.metadata_partitions == tuple(sorted(restored.config.metadata_partitions))
        assert "files" in result.metadata_partitions
        assert [str(d) for d in verify_metadata_table(restored)] == []
    else:
        assert result.metadata_partitions == ()
    # Writing goes on after the restore: hudi-rs and our reader agree on the table with the next commit.
    WriteClient(ST, path, options=WriteOptions(max_file_records=25)).apply(steps[3])
    assert_same_rows(read(HudiTable.open(ST, path)), hudi_read(path), "a commit after the restore")
    if mdt:
        assert [str(d) for d in verify_metadata_table(HudiTable.open(ST, path))] == []


@pytest.mark.oracle
@pytest.mark.parametrize("version", [6, 9])
def test_interrupted_restore_is_finished_by_the_next_run(
    version: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, steps = _table(tmp_path, version, MOR, True, monkeypatch)
    table = HudiTable.open(ST, path)
    t = list(table.timeline().completed_writes())[-1].requested_time
    create_savepoint(table, t)
    at_savepoint = hudi_read(path)
    client = WriteClient(ST, path, options=WriteOptions(max_file_records=25))
    client.apply(steps[3])
    client.apply(steps[4])
    later = [i.requested_time for i in HudiTable.open(ST, path).reload().completed_writes() if i.requested_time > t]

    pending = restore_killed_midway(path, t, monkeypatch)
    assert pending.state is State.INFLIGHT
    # The newest instant is gone, the other one is still there.
    remaining = [i.requested_time for i in HudiTable.open(ST, path).reload().completed_writes()]
    assert max(later) not in remaining and min(later) in remaining

    result = resume_restore(HudiTable.open(ST, path))

    assert result is not None and result.instant.requested_time == pending.requested_time
    assert result.metadata.instants_to_rollback == (min(later),)  # what this run rolled back
    timeline = HudiTable.open(ST, path).reload()
    assert [i.requested_time for i in timeline if i.requested_time > t] == [result.instant.requested_time]
    assert_same_rows(hudi_read(path), at_savepoint, "hudi-rs after the finished restore")
    assert [str(d) for d in verify_metadata_table(HudiTable.open(ST, path))] == []
    assert resume_restore(HudiTable.open(ST, path)) is None


@pytest.mark.parametrize("version", [6, 8])
def test_refusals_name_the_table_and_the_instant(version: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = _table(tmp_path, version, COW, False, monkeypatch)
    table = HudiTable.open(ST, path)
    commits = [i.requested_time for i in table.timeline().completed_writes()]
    listing = sorted(os.listdir(table.active.folder))

    with pytest.raises(RestoreError, match=f"cannot restore to {commits[1]}: it is not a savepoint") as err:
        restore(table, commits[1])
    assert err.value.table == "t"
    archived = "20000101000000000"
    with pytest.raises(RestoreError, match=f"cannot restore to {archived}: it is older than the active timeline"):
        restore(table, archived)
    assert sorted(os.listdir(table.active.folder)) == listing  # nothing written


def _writer_schema(data: bytes) -> dict[str, Any]:
    schema = fastavro.reader(io.BytesIO(data)).writer_schema
    assert isinstance(schema, dict)
    return schema


def test_models_round_trip_against_the_avro_schemas() -> None:
    """No fixture table holds a restore: the plan and metadata round-trip through the writer schemas of every
    table version, and the containers carry Hudi's record names and fields."""
    plan = HoodieRestorePlan(
        instants_to_rollback=(
            HoodieInstantInfo(commit_time="20260101000000300", action="deltacommit"),
            HoodieInstantInfo(commit_time="20260101000000200", action="commit"),
        ),
        version=2,
        savepoint_to_restore_timestamp="20260101000000100",
    )
    rollback = HoodieRollbackMetadata(
        start_rollback_time="20260101000000401",
        time_taken_in_millis=3,
        total_files_deleted=1,
        commits_rollback=("20260101000000300",),
        partition_metadata={
            "p": HoodieRollbackPartitionMetadata(
                partition_path="p", success_delete_files=("a",), failed_delete_files=()
            )
        },
        version=1,
        instants_rollback=(HoodieInstantInfo(commit_time="20260101000000300", action="deltacommit"),),
    )
    for version in (6, 8, 9):
        data = encode_restore_plan(plan, table_version=version)
        assert decode_restore_plan(data, path="x.restore.requested") == plan
        assert _writer_schema(data)["name"] == "org.apache.hudi.avro.model.HoodieRestorePlan"
        md = HoodieRestoreMetadata(
            start_restore_time="20260101000000400",
            time_taken_in_millis=9,
            instants_to_rollback=("20260101000000300",),
            hoodie_restore_metadata={"20260101000000300": (rollback,)},
            version=1,
            restore_instant_info=(HoodieInstantInfo(commit_time="20260101000000300", action="deltacommit"),),
            extra_metadata={} if version >= 8 else None,
        )
        data = encode_restore_metadata(md, table_version=version)
        assert decode_restore_metadata(data, path="x.restore") == md
        fields = [f["name"] for f in _writer_schema(data)["fields"]]
        expected = ["startRestoreTime", "timeTakenInMillis", "instantsToRollback", "hoodieRestoreMetadata", "version"]
        assert fields[:5] == expected and fields[5] == "restoreInstantInfo"
        assert ("extraMetadata" in fields) == (version >= 8)
        assert md.rolled_back() == ("20260101000000300",)
