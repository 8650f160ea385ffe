"""Savepoints on tables written by our write client (layouts 1 and 2): created, listed, read by hudi-rs, deleted;
refused for pending, unknown, already savepointed and already cleanable instants."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tableservice.hudi.action.savepoint import (
    SavepointError,
    create_savepoint,
    delete_savepoint,
    earliest_commit_retained_by_cleaner,
    list_savepoints,
    savepoint_instants,
    savepointed_files,
)
from tableservice.hudi.models import (
    HoodieActionInstant,
    HoodieCleanerPlan,
    HoodieCleanMetadata,
    decode_savepoint_metadata,
    encode_clean_metadata,
    encode_cleaner_plan,
)
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import read
from tableservice.hudi.timeline.instant import Action, State
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.storage import Storage
from tests.support.oracle import assert_same_rows, hudi_read, hudi_slices
from tests.support.trip_tables import create_trip_table

ST = Storage()


def _table(tmp_path: Path, version: int, table_type: TableType = TableType.MERGE_ON_READ, commits: int = 6) -> str:
    path = str(tmp_path / "t")
    create_trip_table(path, version, table_type, storage=ST)
    client = WriteClient(ST, path, options=WriteOptions(max_file_records=20))
    for step in Workload(60, commits, 0.2, 0.0, partitions=2, seed=5).steps():
        client.apply(step)
    return path


def _clean(table: HudiTable, ectr: str, *, complete: bool = True) -> None:
    """A clean instant (deleting nothing) that retained commits from `ectr`."""
    tl = table.reload()
    t = table.active.new_instant_time(tl)
    v = table.config.version
    plan = HoodieCleanerPlan(
        earliest_instant_to_retain=HoodieActionInstant(timestamp=ectr, action="commit", state="COMPLETED"),
        policy="KEEP_LATEST_COMMITS",
        files_to_be_deleted_per_partition={},
        version=2,
        file_paths_to_be_deleted_per_partition={},
    )
    requested = table.active.create_requested(t, Action.CLEAN, encode_cleaner_plan(plan, table_version=v))
    if complete:
        inflight = table.active.transition_to_inflight(requested, encode_cleaner_plan(plan, table_version=v))
        md = HoodieCleanMetadata(
            start_clean_time=t,
            time_taken_in_millis=1,
            total_files_deleted=0,
            earliest_commit_to_retain=ectr,
            partition_metadata={},
            version=2,
        )
        table.active.transition_to_completed(inflight, encode_clean_metadata(md, table_version=v), timeline=tl)


@pytest.mark.oracle
@pytest.mark.parametrize(
    ("version", "table_type"),
    [(6, TableType.MERGE_ON_READ), (8, TableType.COPY_ON_WRITE), (9, TableType.MERGE_ON_READ)],
)
def test_savepoint_round_trip(version: int, table_type: TableType, tmp_path: Path) -> None:
    path = _table(tmp_path, version, table_type)
    table = HudiTable.open(ST, path)
    commits = list(table.timeline().completed_writes())
    t = commits[2].requested_time
    snapshot, as_of = hudi_read(path), hudi_read(path, as_of=t)
    ours = read(table)
    started = int(time.time() * 1000)

    info = create_savepoint(table, t, user="ops", comments="before backfill")

    names = set(os.listdir(table.active.folder))
    assert f"{t}.savepoint.inflight" in names
    if version == 6:
        assert f"{t}.savepoint" in names and info.completion_time is None
    else:
        last = commits[-1].completion_time
        assert info.completion_time is not None and last is not None and info.completion_time > last
        assert f"{t}_{info.completion_time}.savepoint" in names
    listed = list_savepoints(table)
    assert [(s.instant_time, s.state, s.completion_time) for s in listed] == [
        (t, State.COMPLETED, info.completion_time)
    ]
    sp = listed[0]
    assert (sp.savepointed_by, sp.comments) == ("ops", "before backfill")
    assert sp.savepointed_at_ms is not None and started <= sp.savepointed_at_ms <= int(time.time() * 1000)
    # The savepointed files are the latest slices as of t (base file and log files), as hudi-rs slices the table.
    expected = set()
    for partition, _fid, base, logs in hudi_slices(path, as_of=t):
        expected.add((partition, base))
        expected.update((partition, name) for name in logs)
    assert savepointed_files(table) == expected
    assert set(sp.files()) == {p for p, _ in expected}
    completed_path = table.active.path_of(savepoint_instants(table)[0])
    md = decode_savepoint_metadata(ST.read_bytes(completed_path), path=completed_path)
    assert {p: m.partition_path for p, m in md.partition_metadata.items()} == {p: p for p in sp.files()}
    # The commit and its savepoint share the requested time; both stay on the timeline and nothing reads differently.
    assert [i.action for i in table.reload() if i.requested_time == t] == [commits[2].action, Action.SAVEPOINT]
    assert_same_rows(hudi_read(path), snapshot, "hudi-rs with a savepoint")
    assert_same_rows(hudi_read(path, as_of=t), as_of, "hudi-rs as of the savepoint")
    assert_same_rows(read(HudiTable.open(ST, path)), ours, "our reader with a savepoint")

    assert delete_savepoint(table, t) is True
    assert not any(n.endswith((".savepoint", ".savepoint.inflight")) for n in os.listdir(table.active.folder))
    assert list_savepoints(table) == [] and savepointed_files(table) == set()
    assert delete_savepoint(table, t) is False


@pytest.mark.parametrize("version", [6, 9])
def test_savepoint_refusals_name_the_instant(version: int, tmp_path: Path) -> None:
    path = _table(tmp_path, version, commits=6)
    table = HudiTable.open(ST, path)
    commits = list(table.timeline().completed_writes())

    unknown = "20200101000000000"
    with pytest.raises(SavepointError, match=f"non-existing commit {unknown}") as err:
        create_savepoint(table, unknown)
    assert err.value.instant_time == unknown and err.value.table == "t"

    pending = table.active.create_requested(table.active.new_instant_time(table.reload()), Action.DELTA_COMMIT)
    with pytest.raises(SavepointError, match=f"{pending.requested_time}.*pending") as err:
        create_savepoint(table, pending.requested_time)
    assert err.value.instant_time == pending.requested_time

    create_savepoint(table, commits[4].requested_time)
    with pytest.raises(SavepointError, match=f"{commits[4].requested_time} is already savepointed"):
        create_savepoint(table, commits[4].requested_time)

    # A clean retained commits from commits[3]: commits[1] may already have lost files.
    _clean(table, commits[3].requested_time)
    assert earliest_commit_retained_by_cleaner(table, table.reload()) == commits[3].requested_time
    with pytest.raises(SavepointError, match=f"{commits[1].requested_time} as it is beyond the lookup window"):
        create_savepoint(table, commits[1].requested_time)
    create_savepoint(table, commits[3].requested_time)
    # A pending clean's plan moves the window too.
    _clean(table, commits[5].requested_time, complete=False)
    with pytest.raises(SavepointError, match="lookup window"):
        create_savepoint(table, commits[2].requested_time)
    assert [s.instant_time for s in list_savepoints(table)] == [commits[3].requested_time, commits[4].requested_time]


def test_inflight_savepoint_is_listed_and_deleted(tmp_path: Path) -> None:
    """A create that crashed between its two files leaves an inflight savepoint: listed, protecting nothing, and
    deleted like a completed one."""
    path = _table(tmp_path, 9, commits=3)
    table = HudiTable.open(ST, path)
    t = table.timeline().completed_writes().instants[1].requested_time
    table.active.create_inflight(t, Action.SAVEPOINT)
    assert [(s.instant_time, s.is_completed, s.metadata) for s in list_savepoints(table)] == [(t, False, None)]
    assert savepointed_files(table) == set()
    assert delete_savepoint(table, t) is True
    assert savepoint_instants(table) == []
