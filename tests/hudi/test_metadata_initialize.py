"""Building a metadata table from a table as it is, and writing tables that have one.

Rebuilt from storage, the `files` and `column_stats` partitions of the real tables equal what Hudi wrote record for
record, and the record index points every key at the same file group. Generated tables of versions 8 and 9, COW
and MOR, with every partition, stay in step through many commits of the write client."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pytest

from tableservice.hudi.metadata.delta_commit import MetadataRecord, write_delta_commit
from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.records import live_files
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import parse_instant_time
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import TRIP_SCHEMA, Workload
from tableservice.storage import Storage
from tests.support.fixtures import fixture_table, metadata_fixture_names
from tests.support.metadata_table import partition_records
from tests.support.oracle import assert_same_rows, hudi_read, listing_view
from tests.support.trip_tables import create_trip_table

pytestmark = pytest.mark.oracle
NAMES = metadata_fixture_names() or ["none"]
ALL = ("files", "column_stats", "partition_stats", "bloom_filters", "record_index")


@pytest.mark.parametrize("name", NAMES)
def test_rebuilt_metadata_table_equals_hudis(name: str, tmp_path: Path) -> None:
    if name == "none":
        pytest.skip("no fixtures with a metadata table")
    path = str(fixture_table(name, tmp_path))
    rows = hudi_read(path)
    built = HudiTable.open(Storage(), path).config.metadata_partitions
    wanted = [p for p in ALL if p in built]
    files = {k: live_files(v) for k, v in partition_records(path, "files").items()}
    stats = {k: v["ColumnStatsMetadata"] for k, v in partition_records(path, "column_stats").items()}
    index = {k: v["recordIndexMetadata"] for k, v in partition_records(path, "record_index").items()}
    # as a writer with hoodie.metadata.enable=false leaves it, then rebuilt
    shutil.rmtree(Path(path) / ".hoodie" / "metadata")
    props = Path(path) / ".hoodie" / "hoodie.properties"
    props.write_text(re.sub(r"hoodie\.table\.metadata\.partitions=.*\n", "", props.read_text()))
    table = HudiTable.open(Storage(), path)
    assert initialize_metadata_table(table, wanted) == tuple(sorted(wanted))
    assert {k: live_files(v) for k, v in partition_records(path, "files").items()} == files
    assert {k: v["ColumnStatsMetadata"] for k, v in partition_records(path, "column_stats").items()} == stats
    rebuilt = {k: v["recordIndexMetadata"] for k, v in partition_records(path, "record_index").items()}
    assert rebuilt.keys() == index.keys()
    for key, value in rebuilt.items():  # same file group; the instant is read in this process's time zone
        assert {k: v for k, v in value.items() if k != "instantTime"} == {
            k: v for k, v in index[key].items() if k != "instantTime"
        }
    assert verify_metadata_table(HudiTable.open(Storage(), path)) == []
    assert_same_rows(hudi_read(path), rows)


@pytest.mark.parametrize(
    ("version", "table_type", "block"),
    [
        (8, TableType.MERGE_ON_READ, "avro"),
        (8, TableType.COPY_ON_WRITE, "avro"),
        (9, TableType.MERGE_ON_READ, "parquet"),
        (9, TableType.COPY_ON_WRITE, "avro"),
    ],
)
def test_write_client_keeps_the_metadata_table_in_step(
    version: int, table_type: TableType, block: str, tmp_path: Path
) -> None:
    storage = Storage()
    path = str(tmp_path / "t")
    create_trip_table(path, version, table_type, storage=storage)
    assert initialize_metadata_table(HudiTable.open(storage, path), ALL) == tuple(sorted(ALL))
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=60, log_block_format=block))
    for i, step in enumerate(Workload(400, 6, 0.3, 0.05, partitions=3, seed=11).steps()):
        result = client.apply(step)
        table = HudiTable.open(storage, path)
        assert [str(d) for d in verify_metadata_table(table)] == [], f"after commit {i}"
        mdt = MetadataTable.open(table, table.timeline())
        assert mdt is not None
        mdt_instant = mdt.mdt_timeline.get(result.instant_time)
        done = table.timeline().get(result.instant_time)
        assert mdt_instant is not None and done is not None
        assert mdt_instant.completion_time is not None and done.completion_time is not None
        assert mdt_instant.completion_time < done.completion_time
    rows = hudi_read(path)
    assert_same_rows(rows, hudi_read(str(listing_view(path, tmp_path / "view"))))
    # the record index points at the file group holding each key, at the instant of the slice's base file or later
    index = {k: v["recordIndexMetadata"] for k, v in partition_records(path, "record_index").items()}
    assert sorted(index) == sorted(rows.column("_hoodie_record_key").to_pylist())
    table = HudiTable.open(storage, path)
    first = table.timeline().completed().first()
    assert first is not None
    first_ms = int(parse_instant_time(first.requested_time, table.active.tz).timestamp() * 1000)
    assert all(v["instantTime"] >= first_ms for v in index.values())
    # verify compares each bloom filter record with the file's footer
    blooms = partition_records(path, "bloom_filters")
    assert len(blooms) == sum(1 for _ in Path(path).rglob("*.parquet"))  # every base file, the cleaned ones gone
    key, record = sorted(blooms.items())[0]
    wrong = {**record, "BloomFilterMetadata": {**record["BloomFilterMetadata"], "bloomFilter": b"not this one"}}
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    write_delta_commit(mdt, "20991231000000000", [MetadataRecord("bloom_filters", key, wrong)])
    diffs = [str(d) for d in verify_metadata_table(HudiTable.open(storage, path))]
    assert len(diffs) == 1 and diffs[0].startswith("[bloom_filters]") and "differs from the file's footer" in diffs[0]


@pytest.mark.parametrize("version", [6, 9])
def test_insert_overwrite_removes_the_replaced_keys_from_the_record_index(version: int, tmp_path: Path) -> None:
    storage = Storage()
    path = str(tmp_path / "t")
    create_trip_table(path, version, TableType.MERGE_ON_READ, storage=storage)
    initialize_metadata_table(HudiTable.open(storage, path), ("files", "record_index"))
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=40))
    for step in Workload(200, 3, 0.3, 0.05, partitions=2, seed=12).steps():
        client.apply(step)
    before = hudi_read(path)
    city = before.column("city")[0].as_py()
    in_city = before.filter(pc.equal(before.column("city"), city))
    kept = in_city.slice(0, 5).select(TRIP_SCHEMA.names)
    result = client.insert_overwrite(kept)
    assert [str(d) for d in verify_metadata_table(HudiTable.open(storage, path))] == []
    after = hudi_read(path)
    index = partition_records(path, "record_index")
    expected = set(before.column("_hoodie_record_key").to_pylist()) - set(
        in_city.column("_hoodie_record_key").to_pylist()
    )
    expected |= set(kept.column("uuid").to_pylist())
    assert set(index) == expected == set(after.column("_hoodie_record_key").to_pylist())
    table = HudiTable.open(storage, path)
    done = table.timeline().get(result.instant_time)
    assert done is not None and done.is_completed
