"""Compaction end to end on Spark (the shared local session): real fixture tables and generated tables of
versions 6, 8 and 9. After compaction hudi-rs reads the same snapshot, the read-optimized read equals it, the
latest slices have no log files, and time travel to earlier instants still returns the old rows."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import fastavro
import pyarrow.parquet as pq
import pytest

from tableservice.errors import InvalidTableConfigError
from tableservice.hudi.file_group.base_file_reader import read_base_file_footer
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.locks import InProcessLockProvider
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.planning.write import WritePolicy
from tableservice.service.actions import TableContext
from tableservice.service.compaction import execute_compaction, schedule_compaction
from tableservice.storage import Storage
from tests.support.fixtures import REFERENCE_AVSC, fixture_table
from tests.support.oracle import assert_same_rows, hudi_read
from tests.support.trip_tables import create_trip_table

pytestmark = [pytest.mark.spark, pytest.mark.oracle]
REFERENCE_PLAN_SCHEMA = REFERENCE_AVSC / "HoodieCompactionPlan__tv8-9.avsc"
FILE_NAME = "_hoodie_file_name"


def _ctx(path: str, executor: Any, write: WritePolicy | None = None) -> TableContext:
    storage = Storage()
    table = HudiTable.open(storage, path)
    lock = InProcessLockProvider().table_lock(table.name, path)
    return TableContext(table=table, lock=lock, executor=executor, write=write or WritePolicy())


def _compact_and_check(path: str, executor: Any, write: WritePolicy | None = None) -> list[str]:
    """Schedule and execute a compaction, check what readers see; the new base files."""
    ctx = _ctx(path, executor, write)
    before_instants = [i.requested_time for i in ctx.table.timeline().completed_writes()]
    before = hudi_read(path)
    as_of_before = {t: hudi_read(path, as_of=t) for t in before_instants}
    instant = schedule_compaction(ctx, CompactionPolicy(), force=True)
    assert instant is not None, "nothing to compact"
    plan_bytes = ctx.table.active.read_plan(instant)
    if ctx.table.config.version >= 8 and REFERENCE_PLAN_SCHEMA.exists():
        reader_schema = fastavro.parse_schema(json.loads(REFERENCE_PLAN_SCHEMA.read_text()))
        import io

        records: list[Any] = list(fastavro.reader(io.BytesIO(plan_bytes), reader_schema=reader_schema))
        assert len(records) == 1 and records[0]["operations"]
    result = execute_compaction(ctx, instant.requested_time)
    table = HudiTable.open(Storage(), path)
    done = table.timeline().get(instant.requested_time)
    assert done is not None and done.is_completed and done.action is Action.COMPACTION
    md = table.commit_metadata(done)
    assert md.compacted is True and md.operation_type == "COMPACT"
    assert {s.file_id for s in md.write_stats()} == {s.file_id for s in result.stats}
    after = hudi_read(path)
    assert_same_rows(after.drop_columns([FILE_NAME]), before.drop_columns([FILE_NAME]), "snapshot after compaction")
    assert_same_rows(hudi_read(path, read_optimized=True), after, "read-optimized equals snapshot")
    compacted = {(s.partition_path or "", s.file_id) for s in md.write_stats()}
    for s in table.file_system_view().latest_slices():
        if s.file_group_id in compacted:
            assert not s.log_files and s.base_file is not None
            assert s.base_instant_time == instant.requested_time
    for t, rows in as_of_before.items():
        assert_same_rows(hudi_read(path, as_of=t), rows, f"time travel to {t} after compaction")
    assert not (Path(path) / ".hoodie" / ".temp" / instant.requested_time).exists()
    return [str(Path(path) / (s.path or "")) for s in md.write_stats()]


@pytest.mark.parametrize(
    "name",
    [
        "quickstart_trips_table/mor/avro/v6_trips_8i1u",
        "quickstart_trips_table/mor/avro/v6_trips_8i3d",
        "sample_table/mor/parquet/v6_complexkeygen_hivestyle",
        "sample_table/mor/parquet/v6_nonpartitioned_rollback",
    ],
)
def test_compaction_of_fixture_tables(name: str, tmp_path: Path, spark_executor: Any) -> None:
    path = str(fixture_table(name, tmp_path))
    _compact_and_check(path, spark_executor)


@pytest.mark.parametrize(("version", "block"), [(6, "avro"), (8, "parquet"), (9, "avro")])
def test_compaction_of_generated_tables(version: int, block: str, tmp_path: Path, spark_executor: Any) -> None:
    storage = Storage()
    path = str(tmp_path / "t")
    create_trip_table(path, version, TableType.MERGE_ON_READ, storage=storage)
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=60, log_block_format=block))
    for step in Workload(240, 4, 0.3, 0.05, partitions=2, late_fraction=0.3).steps():
        client.apply(step)
    _compact_and_check(path, spark_executor)


def test_compaction_writes_as_the_tables_write_keys_say(tmp_path: Path, spark_executor: Any) -> None:
    """A table whose writers write no bloom filter and use zstd: the compacted files have neither filter nor key
    range, are zstd, and read the same in hudi-rs."""
    storage = Storage()
    path = str(tmp_path / "t")
    create_trip_table(path, 9, TableType.MERGE_ON_READ, storage=storage)
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=60))
    for step in Workload(120, 3, 0.3, 0.05, partitions=2).steps():
        client.apply(step)
    write = WritePolicy.from_mapping(
        {"hoodie.parquet.bloom.filter.enabled": "false", "hoodie.parquet.compression.codec": "zstd"}
    )
    written = _compact_and_check(path, spark_executor, write)
    assert written
    for location in written:
        footer = read_base_file_footer(storage, location)
        assert (footer.bloom_filter_serialized, footer.min_record_key, footer.max_record_key) == (None, None, None)
        meta = pq.ParquetFile(location).metadata
        assert {meta.row_group(0).column(c).compression for c in range(meta.num_columns)} == {"ZSTD"}


def test_generated_v6_table_with_rollback_blocks(
    tmp_path: Path, spark_executor: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed delta commit rolled back with command blocks, then compacted: its records never reappear."""
    from tableservice.hudi.action.rollback import rollback
    from tableservice.hudi.write import handles

    storage = Storage()
    path = str(tmp_path / "t")
    create_trip_table(path, 6, TableType.MERGE_ON_READ, storage=storage)
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=60))
    steps = list(Workload(240, 4, 0.4, 0.05, partitions=2).steps())
    client.apply(steps[0])
    client.apply(steps[1])
    real = handles.write_log_file
    calls = {"n": 0}

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("injected")
        return real(*args, **kwargs)

    monkeypatch.setattr(handles, "write_log_file", failing)
    with pytest.raises(OSError, match="injected"):
        client.apply(steps[2])
    monkeypatch.undo()
    table = HudiTable.open(storage, path)
    failed = table.timeline().pending().instants[0]
    rollback(table, failed)
    client.apply(steps[3])
    logs = [lf for s in HudiTable.open(storage, path).file_system_view().latest_slices() for lf in s.log_files]
    assert any(lf.name.write_token == "1-0-1" for lf in logs), "expected rollback command blocks"
    _compact_and_check(path, spark_executor)
    rows = hudi_read(path)
    assert failed.requested_time not in set(rows.column("_hoodie_commit_time").to_pylist())


def test_fixture_table_without_log_files_has_nothing_to_compact(tmp_path: Path, spark_executor: Any) -> None:
    path = fixture_table("sample_table/mor/avro/v9_txns_nonpart_nometa", tmp_path)
    before = _digest(path)
    ctx = _ctx(str(path), spark_executor)
    assert all(not s.log_files for s in ctx.table.file_system_view().latest_slices())
    assert schedule_compaction(ctx, CompactionPolicy(), force=True) is None
    assert _digest(path) == before


def _digest(path: Path) -> dict[str, str]:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def test_a_table_whose_metadata_table_is_missing_is_left_unchanged(tmp_path: Path, spark_executor: Any) -> None:
    path = fixture_table("quickstart_trips_table/mor/avro/v6_trips_8i1u", tmp_path)
    props = path / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text() + "hoodie.table.metadata.partitions=files\n")  # but no .hoodie/metadata
    before = _digest(path)
    with pytest.raises(InvalidTableConfigError, match="metadata table is missing") as info:
        schedule_compaction(_ctx(str(path), spark_executor), CompactionPolicy(), force=True)
    assert info.value.path == str(path / ".hoodie" / "metadata")
    assert _digest(path) == before
