"""Writing the metadata table without Spark, on copies of the real tables that have one: a failed write's
metadata instant is rolled back with it, a clean interrupted between the metadata commit and the data commit is
finished by the next attempt, and `verify` tells an out-of-step metadata table from one in step."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tableservice.hudi.action.archival import archive
from tableservice.hudi.action.clean import execute_clean, schedule_clean
from tableservice.hudi.action.rollback import rollback
from tableservice.hudi.file_group.log_format import BlockType, HeaderKey, LogBlock, iter_log_blocks
from tableservice.hudi.metadata.compaction import compact_metadata_table
from tableservice.hudi.metadata.delta_commit import MetadataRecord, write_delta_commit
from tableservice.hudi.metadata.instants import metadata_rollback_instant
from tableservice.hudi.metadata.keys import secondary_index_key
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.record_index import secondary_texts
from tableservice.hudi.metadata.records import files_record
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import ActiveTimeline
from tableservice.hudi.timeline.instant import Action, State, parse_instant_time
from tableservice.hudi.write.client import WriteClient
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.plan import CleanPlanner
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.storage import Storage
from tests.support.fixtures import fixture_table, metadata_fixture_names
from tests.support.metadata_table import metadata_contents, partition_records
from tests.support.oracle import assert_same_rows, hudi_read, listing_view

pytestmark = pytest.mark.oracle
NAMES = metadata_fixture_names()
V8 = "quickstart_trips_table/mor/avro/v8_trips_8i3u1d"


def _copy(name: str, tmp_path: Path) -> str:
    if name not in NAMES:
        pytest.skip(f"fixture {name} is absent")
    return str(fixture_table(name, tmp_path))


def _diffs(path: str) -> list[str]:
    return [str(d) for d in verify_metadata_table(HudiTable.open(Storage(), path))]


@pytest.mark.parametrize("name", NAMES or ["none"])
def test_failed_write_is_rolled_back_in_the_metadata_table_too(name: str, tmp_path: Path) -> None:
    path = _copy(name, tmp_path)
    rows = hudi_read(path)
    table = HudiTable.open(Storage(), path)
    timeline = table.timeline()
    # A writer crashed after its metadata delta commit and before its data commit: a new base file at `t`, the
    # data instant inflight, the metadata table's delta commit at `t` completed and listing the file.
    t = table.active.new_instant_time(timeline)
    action = Action.DELTA_COMMIT if table.config.table_type.value == "MERGE_ON_READ" else Action.COMMIT
    table.active.transition_to_inflight(table.active.create_requested(t, action))
    some_slice = table.file_system_view(timeline=timeline).latest_slices()[0]
    folder = Path(path) / some_slice.partition_path if some_slice.partition_path else Path(path)
    name = f"{some_slice.file_id}_0-1-1_{t}.parquet"
    assert some_slice.base_file is not None
    shutil.copyfile(some_slice.base_file.location, folder / name)
    mdt = MetadataTable.open(table, table.reload())
    assert mdt is not None
    size = (folder / name).stat().st_size
    key = some_slice.partition_path or "."
    write_delta_commit(mdt, t, [MetadataRecord("files", key, files_record({name: (size, False)}))])
    # The pending write's metadata is invalid to readers: nothing changes yet.
    assert _diffs(path) == []
    assert_same_rows(hudi_read(path), rows)

    target = HudiTable.open(Storage(), path).timeline().get(t)
    assert target is not None and not target.is_completed
    done = rollback(HudiTable.open(Storage(), path), target)

    assert not (folder / name).exists()
    after = HudiTable.open(Storage(), path)
    mdt_after = MetadataTable.open(after, after.timeline())
    assert mdt_after is not None
    assert mdt_after.mdt_timeline.get(t) is None, "the metadata instant of the failed write is gone"
    version = after.config.version
    mdt_rollback = mdt_after.mdt_timeline.get(metadata_rollback_instant(version, done.requested_time), Action.ROLLBACK)
    assert mdt_rollback is not None and mdt_rollback.is_completed
    files_folder = Path(path) / ".hoodie" / "metadata" / "files"
    if version >= 8:  # the metadata log file written at `t` is deleted, before the data rollback completes
        assert mdt_rollback.completion_time is not None and done.completion_time is not None
        assert mdt_rollback.completion_time < done.completion_time
        assert not list(files_folder.glob(f"*_{t}.log.*"))
    else:  # version 6: a rollback command block for `t` in a new log file of the slice that holds its block
        targets = [
            b.header.get(HeaderKey.TARGET_INSTANT_TIME)
            for f in sorted(files_folder.glob(".files-*.log.*_1-0-1"))
            for b in iter_log_blocks(Storage(), str(f))
            if isinstance(b, LogBlock) and b.block_type is BlockType.COMMAND
        ]
        assert targets == [t]
        assert mdt_after.mdt_timeline.get(done.requested_time, Action.DELTA_COMMIT) is not None
    assert _diffs(path) == []
    assert_same_rows(hudi_read(path), rows)


def test_a_clean_interrupted_after_its_metadata_commit_is_finished_by_the_next_attempt(
    tmp_path: Path, monkeypatch: Any
) -> None:
    path = _copy(V8, tmp_path)
    rows = hudi_read(path)
    policy = CleanPolicy.from_mapping(
        {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": "1"}
    )
    table = HudiTable.open(Storage(), path)
    clean = schedule_clean(table, CleanPlanner(policy), force=True)
    assert clean is not None
    real = ActiveTimeline.transition_to_completed

    def crash(self: ActiveTimeline, instant: Any, content: bytes, **kw: Any) -> Any:
        if instant.action is Action.CLEAN and ".hoodie/metadata" not in self.base_path:
            raise KeyboardInterrupt("killed between the metadata commit and the data commit")
        return real(self, instant, content, **kw)

    monkeypatch.setattr(ActiveTimeline, "transition_to_completed", crash)
    with pytest.raises(KeyboardInterrupt):
        execute_clean(table, clean)
    monkeypatch.undo()
    reopened = HudiTable.open(Storage(), path)
    pending = reopened.timeline().get(clean.requested_time)
    assert pending is not None and pending.state is State.INFLIGHT
    mdt = MetadataTable.open(reopened, reopened.timeline())
    assert mdt is not None
    mdt_instant = mdt.mdt_timeline.get(clean.requested_time)
    assert mdt_instant is not None and mdt_instant.is_completed
    # The clean deleted files but did not complete: its tombstones are invalid until it does, so the metadata
    # table still lists the deleted (old) files; the latest slices, which readers use, are untouched.
    assert _diffs(path)
    assert_same_rows(hudi_read(path), rows)

    execute_clean(HudiTable.open(Storage(), path), clean)
    assert _diffs(path) == []
    assert_same_rows(hudi_read(path), rows)
    view = listing_view(path, tmp_path / "view")
    assert_same_rows(hudi_read(str(view)), rows)
    finished = HudiTable.open(Storage(), path)
    mdt = MetadataTable.open(finished, finished.timeline())
    assert mdt is not None
    assert len([i for i in mdt.mdt_timeline if i.requested_time == clean.requested_time]) == 1


def test_verify_reports_what_is_out_of_step(tmp_path: Path) -> None:
    path = _copy(V8, tmp_path)
    table = HudiTable.open(Storage(), path)
    assert _diffs(path) == []
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    live = mdt.file_listing()
    partition = sorted(live)[0]
    name = sorted(live[partition])[-1]
    # a delta commit that is valid (not at a data instant) and drops a live file from the listing
    write_delta_commit(mdt, "20991231000000000", [MetadataRecord("files", partition, files_record({name: (0, True)}))])
    diffs = _diffs(path)
    assert f"[files] {partition}: {name}: committed file ({live[partition][name]} bytes) is not listed" in diffs


@pytest.mark.parametrize("name", NAMES or ["none"])
def test_metadata_compaction_keeps_every_record(name: str, tmp_path: Path) -> None:
    path = _copy(name, tmp_path)
    rows = hudi_read(path)
    before = metadata_contents(path)
    table = HudiTable.open(Storage(), path)
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    done = compact_metadata_table(mdt, max_delta_commits=0)  # now, whatever the count
    assert done is not None and done.is_completed and done.action is Action.COMPACTION
    assert metadata_contents(path) == before
    assert _diffs(path) == []
    assert_same_rows(hudi_read(path), rows)  # hudi-rs lists through our base HFiles
    after = HudiTable.open(Storage(), path)
    compacted = MetadataTable.open(after, after.timeline())
    assert compacted is not None
    for partition in compacted.partitions:
        for file_slice in compacted.file_slices(partition):
            assert file_slice.base_instant_time == done.requested_time
            assert file_slice.base_file is not None and not file_slice.log_files
    # nothing more is due right after
    assert compact_metadata_table(compacted, max_delta_commits=1) is None


def test_metadata_compaction_leaves_a_pending_write_in_the_logs(tmp_path: Path) -> None:
    path = _copy(V8, tmp_path)
    table = HudiTable.open(Storage(), path)
    t = table.active.new_instant_time(table.timeline())
    table.active.transition_to_inflight(table.active.create_requested(t, Action.DELTA_COMMIT))
    mdt = MetadataTable.open(table, table.reload())
    assert mdt is not None
    partition = sorted(mdt.file_listing())[0]
    write_delta_commit(mdt, t, [MetadataRecord("files", partition, files_record({".x-0_1.log.1_0-0-0": (5, False)}))])
    mdt = MetadataTable.open(table, table.reload())
    assert mdt is not None
    done = compact_metadata_table(mdt, max_delta_commits=1)
    assert done is not None
    tz = table.active.tz
    assert parse_instant_time(done.requested_time, tz) == parse_instant_time(t, tz) - timedelta(milliseconds=1)
    after = MetadataTable.open(table, table.reload())
    assert after is not None
    (files_slice,) = after.file_slices("files")
    assert [lf.instant_time for lf in files_slice.log_files] == [t]


def test_writer_commits_keep_hudis_secondary_index_in_step(tmp_path: Path) -> None:
    path = _copy(V8, tmp_path)
    partition = "secondary_index_rider_idx"
    assert partition in HudiTable.open(Storage(), path).config.metadata_partitions
    rows = hudi_read(path)
    data_columns = [c for c in rows.column_names if not c.startswith("_hoodie_")]
    client = WriteClient(Storage(), path)
    # new riders for two records (their old entries must go), one record deleted, one inserted
    changed = rows.slice(0, 2).select(data_columns)
    riders = pa.array([f"rider-new-{i}" for i in range(2)])
    changed = changed.set_column(changed.schema.get_field_index("rider"), "rider", riders)
    ts = changed.schema.get_field_index("ts")
    changed = changed.set_column(ts, "ts", pc.add(changed.column("ts"), 1_000_000))
    client.upsert(changed)
    gone = rows.slice(2, 1).select(data_columns)
    client.delete(gone)
    added = rows.slice(3, 1).select(data_columns)
    added = added.set_column(added.schema.get_field_index("uuid"), "uuid", pa.array(["an-added-key"]))
    client.upsert(added)
    assert _diffs(path) == []  # the secondary index is checked entry by entry
    after = hudi_read(path)
    entries = set(partition_records(path, partition))
    keys, values = after.column("_hoodie_record_key").to_pylist(), after.column("rider").to_pylist()
    assert entries == {secondary_index_key(v, k) for k, v in zip(keys, values, strict=True)}
    assert secondary_index_key("rider-new-0", rows.column("_hoodie_record_key")[0].as_py()) in entries
    assert not any(e.endswith("$" + rows.column("_hoodie_record_key")[2].as_py()) for e in entries)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (V8, ["20251220210108078"]),
        (
            "sample_table/mor/avro/v9_txns_simple_meta",
            # 20260307162612542 completed after the metadata table's compaction at 20260307162612567
            [
                "20260307162557587",
                "20260307162604102",
                "20260307162606034",
                "20260307162607806",
                "20260307162609526",
                "20260307162611195",
            ],
        ),
    ],
)
def test_data_archival_stops_at_the_metadata_tables_latest_compaction(
    name: str, expected: list[str], tmp_path: Path
) -> None:
    path = _copy(name, tmp_path)
    rows = hudi_read(path)
    table = HudiTable.open(Storage(), path)
    policy = ArchivalPolicy.from_mapping(
        {"hoodie.keep.min.commits": 1, "hoodie.keep.max.commits": 2, "hoodie.cleaner.commits.retained": 1}
    )
    selected = [i.requested_time for i in policy.instants_to_archive(table, table.timeline())]
    archived = [i.requested_time for i in archive(table, policy)]
    # only instants that completed before the metadata table's latest compaction go
    assert selected[: len(expected)] == expected and archived == expected
    assert _diffs(path) == []
    assert_same_rows(hudi_read(path), rows)


def test_secondary_index_values_are_held_as_java_prints_the_avro_value() -> None:
    days = pa.array([datetime(2024, 1, 15).date(), None], pa.date32())
    assert secondary_texts(days) == ["19737", None]  # as Hudi wrote for txn_date in the v9 fixture
    micros = pa.array([datetime(2024, 1, 15, 0, 0, 1, tzinfo=UTC)], pa.timestamp("us", tz="UTC"))
    assert secondary_texts(micros) == ["1705276801000000"]
    doubles = pa.array([1.0, 0.1, 1e7, 1.2345e-5, -2.5e10])
    assert secondary_texts(doubles) == ["1.0", "0.1", "1.0E7", "1.2345E-5", "-2.5E10"]
    assert secondary_texts(pa.array([True, False])) == ["true", "false"]
    assert secondary_texts(pa.array([7, -3], pa.int64())) == ["7", "-3"]
