"""The indexing action without Spark: writers committing while it builds are caught up, a crashed attempt is
discarded and run again, a plan is aborted cleanly, a built index is dropped, and a plan written by Hudi (the real
v8 table's) is executed to the records Hudi wrote."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tableservice.errors import DamagedInputError, InvalidTableConfigError
from tableservice.hudi.action.indexing import (
    abort_indexing,
    drop_index,
    execute_indexing,
    read_plan,
    schedule_indexing,
)
from tableservice.hudi.metadata.initialize import Records, TableSource, initialize_metadata_table
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.models import decode_index_commit_metadata
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.storage import Storage
from tests.support.fixtures import fixture_table, metadata_fixture_names
from tests.support.metadata_table import partition_records
from tests.support.oracle import hudi_read
from tests.support.trip_tables import create_trip_table

pytestmark = pytest.mark.oracle
V8 = "quickstart_trips_table/mor/avro/v8_trips_8i3u1d"


def _diffs(path: str) -> list[str]:
    return [str(d) for d in verify_metadata_table(HudiTable.open(Storage(), path))]


def _table(tmp_path: Path, version: int, steps: list[Any], *, files: bool) -> tuple[str, WriteClient]:
    path = str(tmp_path / "t")
    create_trip_table(path, version, TableType.MERGE_ON_READ)
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    for step in steps:
        client.apply(step)
    if files:
        initialize_metadata_table(HudiTable.open(Storage(), path), ("files",))
    return path, client


@pytest.mark.parametrize("version", [6, 9])
def test_commits_made_while_the_index_builds_are_caught_up(version: int, tmp_path: Path) -> None:
    steps = list(Workload(300, 8, 0.3, 0.1, partitions=2, seed=9).steps())
    path, client = _table(tmp_path, version, steps[:3], files=True)
    instant = schedule_indexing(HudiTable.open(Storage(), path), ["record_index", "column_stats"])
    assert instant is not None
    during: list[str] = []

    def build(source: TableSource, partition: str) -> Records:
        records = source.records(partition)
        if partition == "record_index":  # writers commit (inserts, updates, deletes) while the index is built
            for step in steps[3:7]:
                during.append(client.apply(step).instant_time)
        return records

    result = execute_indexing(HudiTable.open(Storage(), path), instant, build=build)
    assert result.upto == during[-1]  # caught up to the last commit
    table = HudiTable.open(Storage(), path)
    assert sorted(table.config.metadata_partitions) == ["column_stats", "files", "record_index"]
    done = table.timeline().get(instant.requested_time, Action.INDEXING)
    assert done is not None and done.is_completed
    commit = decode_index_commit_metadata(
        (Path(table.active.path_of(done))).read_bytes(), path=table.active.path_of(done)
    )
    assert {i.metadata_partition_path: i.index_upto_instant for i in commit.index_partition_infos or ()} == {
        "record_index": during[-1],
        "column_stats": during[-1],
    }
    assert _diffs(path) == []
    rows = hudi_read(path)
    assert sorted(partition_records(path, "record_index")) == sorted(rows.column("_hoodie_record_key").to_pylist())
    # later commits keep the new partitions in step
    client.apply(steps[7])
    assert _diffs(path) == []


def test_a_crashed_attempt_is_discarded_and_run_again(tmp_path: Path) -> None:
    steps = list(Workload(200, 4, 0.3, 0.05, partitions=2, seed=10).steps())
    path, client = _table(tmp_path, 9, steps[:3], files=True)
    instant = schedule_indexing(HudiTable.open(Storage(), path), ["record_index"])
    assert instant is not None

    def crash(source: TableSource, partition: str) -> Records:
        raise KeyboardInterrupt("killed while building")

    with pytest.raises(KeyboardInterrupt):
        execute_indexing(HudiTable.open(Storage(), path), instant, build=crash)
    table = HudiTable.open(Storage(), path)
    pending = table.timeline().get(instant.requested_time, Action.INDEXING)
    assert pending is not None and pending.is_inflight
    assert table.config.metadata_partitions == ("files",)
    client.apply(steps[3])  # writers go on: the unpublished partition is nobody's business
    assert _diffs(path) == []
    execute_indexing(HudiTable.open(Storage(), path), instant)
    table = HudiTable.open(Storage(), path)
    assert sorted(table.config.metadata_partitions) == ["files", "record_index"]
    assert _diffs(path) == []


def test_abort_removes_the_plan_and_what_it_built(tmp_path: Path) -> None:
    steps = list(Workload(200, 3, 0.3, 0.05, partitions=2, seed=11).steps())
    path, _ = _table(tmp_path, 8, steps, files=True)
    before = sorted(p.name for p in (Path(path) / ".hoodie" / "metadata").iterdir())
    instant = schedule_indexing(HudiTable.open(Storage(), path), ["record_index"])
    assert instant is not None

    def crash(source: TableSource, partition: str) -> Records:
        source.records(partition)
        raise KeyboardInterrupt("killed after building")

    with pytest.raises(KeyboardInterrupt):
        execute_indexing(HudiTable.open(Storage(), path), instant, build=crash)
    abort_indexing(HudiTable.open(Storage(), path), instant)
    table = HudiTable.open(Storage(), path)
    assert table.timeline().get(instant.requested_time) is None
    assert table.config.metadata_partitions == ("files",) and table.config.metadata_partitions_inflight == ()
    assert sorted(p.name for p in (Path(path) / ".hoodie" / "metadata").iterdir()) == before
    assert _diffs(path) == []


def test_drop_removes_an_index_and_the_table_stays_readable(tmp_path: Path) -> None:
    steps = list(Workload(200, 3, 0.3, 0.05, partitions=2, seed=12).steps())
    path, client = _table(tmp_path, 9, steps, files=False)
    initialize_metadata_table(HudiTable.open(Storage(), path), ("files", "record_index", "column_stats"))
    rows = hudi_read(path)
    assert drop_index(HudiTable.open(Storage(), path), "record_index")
    table = HudiTable.open(Storage(), path)
    assert sorted(table.config.metadata_partitions) == ["column_stats", "files"]
    assert not (Path(path) / ".hoodie" / "metadata" / "record_index").exists()
    assert not drop_index(table, "record_index")
    client.apply(next(iter(Workload(50, 1, 0.0, 0.0, partitions=2, seed=13).steps())))
    assert _diffs(path) == []
    assert drop_index(HudiTable.open(Storage(), path), "files")  # the whole metadata table
    table = HudiTable.open(Storage(), path)
    assert table.config.metadata_partitions == () and not (Path(path) / ".hoodie" / "metadata").exists()
    assert hudi_read(path).num_rows == rows.num_rows + 50


def test_a_version_6_table_refuses_partition_stats_and_secondary_indexes(tmp_path: Path) -> None:
    steps = list(Workload(50, 1, 0.0, 0.0, partitions=1, seed=14).steps())
    path, _ = _table(tmp_path, 6, steps, files=False)
    for partition in ("partition_stats", "secondary_index_rider"):
        with pytest.raises(InvalidTableConfigError, match="version 6"):
            schedule_indexing(HudiTable.open(Storage(), path), [partition])


def test_a_plan_written_by_hudi_is_executed_to_what_hudi_built(tmp_path: Path) -> None:
    if V8 not in metadata_fixture_names():
        pytest.skip(f"the fixture {V8} is absent")
    path = str(fixture_table(V8, tmp_path))
    meta = Path(path) / ".hoodie"
    partition = "secondary_index_rider_idx"
    hudis = {k: v["SecondaryIndexMetadata"] for k, v in partition_records(path, partition).items()}
    assert hudis
    definitions = (meta / ".index_defs" / "index.json").read_text()
    requested = next((meta / "timeline").glob("*.indexing.requested"))
    table = HudiTable.open(Storage(), path)
    original = read_plan(table, next(i for i in table.timeline() if i.action is Action.INDEXING))
    assert [i.metadata_partition_path for i in original.index_partition_infos or ()] == [partition]
    assert drop_index(table, partition)
    (meta / ".index_defs" / "index.json").write_text(definitions)  # a Hudi writer records it when it plans
    # the same plan bytes Hudi wrote, as a new pending instant
    table = HudiTable.open(Storage(), path)
    t = table.active.new_instant_time(table.timeline())
    pending = table.active.create_requested(t, Action.INDEXING, requested.read_bytes())
    execute_indexing(HudiTable.open(Storage(), path), pending)
    ours = {k: v["SecondaryIndexMetadata"] for k, v in partition_records(path, partition).items()}
    assert ours == hudis
    assert partition in HudiTable.open(Storage(), path).config.metadata_partitions
    assert _diffs(path) == []
    assert json.loads((meta / ".index_defs" / "index.json").read_text()) == json.loads(definitions)
    shutil.rmtree(Path(path) / ".hoodie" / "metadata" / partition)  # the index's files are what readers use
    assert partition_records(path, partition) == {}


@pytest.mark.parametrize("version", [6, 9])
def test_an_index_is_not_built_over_damaged_committed_data(version: int, tmp_path: Path) -> None:
    """A committed log file cut short: the indexing stops before anything is written (no metadata table, the plan
    still requested), naming the file; repaired, the same plan runs and verifies."""
    steps = list(Workload(200, 3, 0.3, 0.1, partitions=2, seed=4).steps())
    path, _ = _table(tmp_path, version, steps, files=False)
    instant = schedule_indexing(HudiTable.open(Storage(), path), ["record_index"])
    assert instant is not None
    log_file = sorted(Path(path).rglob(".*.log.*"))[-1]
    original = log_file.read_bytes()
    log_file.write_bytes(original[: len(original) // 2])
    hoodie_before = sorted(str(p) for p in Path(path, ".hoodie").rglob("*"))
    with pytest.raises(DamagedInputError) as info:
        execute_indexing(HudiTable.open(Storage(), path), instant)
    assert info.value.path is not None and info.value.path.endswith(log_file.name)
    assert sorted(str(p) for p in Path(path, ".hoodie").rglob("*")) == hoodie_before
    state = HudiTable.open(Storage(), path).timeline().get(instant.requested_time, Action.INDEXING)
    assert state is not None and state.is_requested
    log_file.write_bytes(original)
    execute_indexing(HudiTable.open(Storage(), path), instant)
    assert _diffs(path) == []
    assert "record_index" in HudiTable.open(Storage(), path).config.metadata_partitions
