"""The metadata-table reader on the real tables that have one: listing through `files` equals the storage
listing (ours and hudi-rs's), every record sits in the file group its key routes to, stats keys recompute."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tableservice.hudi.metadata.keys import (
    column_stats_key,
    file_group_id,
    file_group_index,
    file_group_indexes,
    java_string_hash,
    partition_stats_key,
    routes_by_value,
    secondary_index_key,
)
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.table.fs_view import FileSlice
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.storage import Storage
from tests.support.fixtures import fixture_table_readonly, metadata_fixture_names
from tests.support.oracle import hudi_slices, listing_view

NAMES = metadata_fixture_names() or ["none"]
STATS_NAMES = metadata_fixture_names("column_stats") or ["none"]


def _table(name: str) -> tuple[str, HudiTable]:
    if name == "none":
        pytest.skip("no fixtures with a metadata table")
    path = str(fixture_table_readonly(name))
    return path, HudiTable.open(Storage(), path)


def _slices(slices: list[FileSlice]) -> list[tuple[str, str, str, tuple[tuple[str, int], ...], int]]:
    return sorted(
        (
            s.partition_path,
            s.file_id,
            s.base_file.file_name if s.base_file else "",
            tuple((lf.file_name, lf.size) for lf in s.log_files),
            s.base_file.size if s.base_file else 0,
        )
        for s in slices
    )


@pytest.mark.parametrize("name", NAMES)
def test_listing_through_files_partition_equals_storage_listing(name: str) -> None:
    _, table = _table(name)
    timeline = table.timeline()
    through_mdt = table.file_system_view(timeline=timeline)
    from_storage = table.file_system_view(timeline=timeline, listing=table.list_storage_files())
    assert table.list_data_files(timeline).keys() == table.list_storage_files().keys()
    assert _slices(through_mdt.latest_slices()) == _slices(from_storage.latest_slices())
    for instant in timeline.completed_writes().instants:
        t = instant.requested_time
        a = table.file_system_view(timeline=timeline, as_of=t)
        b = table.file_system_view(timeline=timeline, as_of=t, listing=table.list_storage_files())
        assert _slices(a.latest_slices()) == _slices(b.latest_slices()), t


@pytest.mark.oracle
@pytest.mark.parametrize("name", NAMES)
def test_hudi_rs_listing_storage_agrees_with_our_metadata_listing(name: str, tmp_path: Path) -> None:
    path, table = _table(name)
    ours = {
        (
            s.partition_path,
            s.file_id,
            s.base_file.file_name if s.base_file else "",
            tuple(sorted(f.file_name for f in s.log_files)),
        )
        for s in table.file_system_view().latest_slices()
    }
    view = listing_view(path, tmp_path / "view")
    assert ours == hudi_slices(str(view)) == hudi_slices(path)


@pytest.mark.parametrize("name", NAMES)
def test_every_record_is_in_the_file_group_its_key_routes_to(name: str) -> None:
    path, table = _table(name)
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    defs_file = Path(path) / ".hoodie" / ".index_defs" / "index.json"  # table version 8+
    index_defs = json.loads(defs_file.read_text()) if defs_file.exists() else {}
    definitions = index_defs.get("indexDefinitions", {})
    seen = 0
    for partition in mdt.partitions:
        slices = mdt.file_slices(partition)
        assert [s.file_id for s in slices] == [file_group_id(partition, i) for i in range(len(slices))]
        v2 = routes_by_value(partition, definitions.get(partition, {}).get("version"))
        for i, file_slice in enumerate(slices):
            for key, _ in mdt.slice_records(file_slice):
                assert file_group_index(key, len(slices), secondary_v2=v2) == i, (partition, key)
                seen += 1
    assert seen > 0


@pytest.mark.parametrize("name", STATS_NAMES)
def test_stats_keys_recompute_from_their_records(name: str) -> None:
    _, table = _table(name)
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    partition_of = {f: p for p, files in mdt.file_listing().items() for f in files}
    stats = mdt.read_partition("column_stats")
    assert stats
    for key, record in stats.items():
        cs = record["ColumnStatsMetadata"]
        assert key == column_stats_key(cs["columnName"], partition_of[cs["fileName"]], cs["fileName"])
    if "partition_stats" in mdt.partitions:
        for key, record in mdt.read_partition("partition_stats").items():
            cs = record["ColumnStatsMetadata"]
            assert key == partition_stats_key(cs["columnName"], cs["fileName"])


def test_java_string_hash_and_routing_edges() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # Math.abs keeps it negative in Java
    assert file_group_index("polygenelubricants", 10) == 2**31 % 10
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # a surrogate pair: two UTF-16 code units
    assert secondary_index_key(None, "TXN-003") == "\x00$TXN-003"
    assert secondary_index_key("a$b\\c", "k$") == "a\\$b\\\\c$k\\$"
    # V2 routes by the value part only, so one value's entries share a file group
    assert file_group_index("a\\$b$k1", 7, secondary_v2=True) == file_group_index("a\\$b$k2", 7, secondary_v2=True)


def test_column_wise_routing_equals_key_by_key() -> None:
    """The vectorised hash (keys right-aligned in a matrix) against Java's hash key by key: lengths 0 to 40,
    an Arrow slice with an offset, the key whose hash is Integer.MIN_VALUE, equal and unequal lengths."""
    import pyarrow as pa

    keys = ["", "a", "polygenelubricants", "hello", "x" * 40] + [f"key-{i * 7919 % 100003}" for i in range(300)]
    for array in (pa.array(["pad", *keys]).slice(1), pa.array([f"{i:08d}" for i in range(200)])):
        for groups in (1, 7, 10, 64):
            expected = [file_group_index(k, groups) for k in array.to_pylist()]
            assert file_group_indexes(array, groups).tolist() == expected, groups
    assert file_group_indexes(pa.array(["polygenelubricants"]), 10).tolist() == [2**31 % 10]
