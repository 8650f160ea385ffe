"""The metadata-table reader on a real table of version 6 (Hudi 0.14.x, from apache/hudi-rs; see
tests/data/v6_cow_partitioned_mdt.README.md): what the `files` partition lists equals the committed files on storage,
checked against the reader's own storage listing and against oracles that read the bytes without the library (the
commit files' write stats, the file system)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from tableservice.hudi.metadata.keys import ALL_PARTITIONS_KEY
from tableservice.hudi.metadata.listing import committed_files
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.records import live_files
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.storage import Storage

ARCHIVE = Path(__file__).resolve().parents[1] / "data" / "v6_cow_partitioned_mdt.zip"

FIRST = "20240402123035233"  # insert: five files in three partitions
SECOND = "20240402144910683"  # upsert: a new slice of file group 5a226868 in san_francisco
INIT = "00000000000000010"  # the metadata table's initialisation (fresh table: no data files yet)

FILES_AFTER_FIRST = {
    "chennai": {"68d3c349-f621-4cd8-9e8b-c6dd8eb20d08-0_4-12-0_20240402123035233.parquet": 435892},
    "san_francisco": {
        "780b8586-3ad0-48ef-a6a1-d2217845ce4a-0_0-8-0_20240402123035233.parquet": 435975,
        "d9082ffd-2eb1-4394-aefc-deb4a61ecc57-0_1-9-0_20240402123035233.parquet": 435975,
        "5a226868-2934-4f84-a16f-55124630c68d-0_2-10-0_20240402123035233.parquet": 435978,
    },
    "sao_paulo": {"ee915c68-d7f8-44f6-9759-e691add290d8-0_3-11-0_20240402123035233.parquet": 435918},
}
FILES_AFTER_SECOND = {
    **FILES_AFTER_FIRST,
    "san_francisco": {
        **FILES_AFTER_FIRST["san_francisco"],
        "5a226868-2934-4f84-a16f-55124630c68d-0_0-7-24_20240402144910683.parquet": 435965,
    },
}


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    """A private unpacked copy of the fixture table."""
    with zipfile.ZipFile(ARCHIVE) as zf:
        zf.extractall(tmp_path)
    return tmp_path / "trips_table"


def _open(root: Path) -> tuple[HudiTable, MetadataTable]:
    table = HudiTable.open(Storage(), str(root))
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    return table, mdt


def _storage_partitions(root: Path) -> set[str]:
    """The data partitions on the file system (top-level folders but `.hoodie`), without the library."""
    return {p.name for p in root.iterdir() if p.is_dir() and p.name != ".hoodie"}


def _storage_data_files(root: Path) -> dict[str, dict[str, int]]:
    """Every data file on the file system by partition, name -> size, without the library."""
    return {
        p: {f.name: f.stat().st_size for f in (root / p).iterdir() if f.is_file() and not f.name.startswith(".")}
        for p in _storage_partitions(root)
    }


def _written_by_completed_commits(root: Path) -> dict[str, dict[str, int]]:
    """The files the completed `.commit` files say were written, name -> `fileSizeInBytes`, without the library."""
    out: dict[str, dict[str, int]] = {}
    for commit in sorted((root / ".hoodie").glob("*.commit")):
        for partition, stats in json.loads(commit.read_text())["partitionToWriteStats"].items():
            for stat in stats:
                out.setdefault(partition, {})[Path(stat["path"]).name] = stat["fileSizeInBytes"]
    return out


def test_fixture_is_a_version_6_table_with_a_files_only_metadata_table(root: Path) -> None:
    table, mdt = _open(root)
    assert table.config.version == 6
    assert mdt.mdt.config.version == 6
    assert mdt.partitions == ("files",)
    assert mdt.storage_partitions() == ["files"]
    assert [(i.requested_time, i.action.value, i.is_completed) for i in table.timeline()] == [
        (FIRST, "commit", True),
        (SECOND, "commit", True),
    ]
    assert [(i.requested_time, i.action.value, i.is_completed) for i in mdt.mdt_timeline] == [
        (INIT, "deltacommit", True),
        (FIRST, "deltacommit", True),
        (SECOND, "deltacommit", True),
    ]
    assert mdt.valid_instants() == {INIT, FIRST, SECOND}
    [file_slice] = mdt.file_slices("files")
    assert (file_slice.file_id, file_slice.base_instant_time) == ("files-0000-0", INIT)
    assert file_slice.base_file is not None
    assert (file_slice.base_file.file_name, file_slice.base_file.size) == (
        "files-0000-0_0-6-5_00000000000000010.hfile",
        6807,
    )
    assert [(lf.file_name, lf.size) for lf in file_slice.log_files] == [
        (".files-0000-0_00000000000000010.log.1_0-0-0", 80),
        (".files-0000-0_00000000000000010.log.2_0-14-17", 13565),
        (".files-0000-0_00000000000000010.log.3_0-14-30", 13390),
    ]


def test_slice_records_apply_in_block_order(root: Path) -> None:
    """Base HFile (init: `__all_partitions__` with no partitions), the empty init delete block, then one HFile data
    block per data commit."""
    _, mdt = _open(root)
    [file_slice] = mdt.file_slices("files")
    records = list(mdt.slice_records(file_slice))
    assert [(key, live_files(record)) for key, record in records] == [
        (ALL_PARTITIONS_KEY, {}),
        (ALL_PARTITIONS_KEY, {"chennai": 0, "san_francisco": 0, "sao_paulo": 0}),
        ("chennai", FILES_AFTER_FIRST["chennai"]),
        ("san_francisco", FILES_AFTER_FIRST["san_francisco"]),
        ("sao_paulo", FILES_AFTER_FIRST["sao_paulo"]),
        (ALL_PARTITIONS_KEY, {"san_francisco": 0}),
        (
            "san_francisco",
            {"5a226868-2934-4f84-a16f-55124630c68d-0_0-7-24_20240402144910683.parquet": 435965},
        ),
    ]


def test_file_listing_equals_the_committed_files_on_storage(root: Path) -> None:
    table, mdt = _open(root)
    listing = mdt.file_listing()
    assert listing == committed_files(table, table.timeline())
    assert listing == _storage_data_files(root)
    assert listing == _written_by_completed_commits(root)
    assert listing == FILES_AFTER_SECOND


def test_all_partitions_record_lists_exactly_the_data_partitions_on_storage(root: Path) -> None:
    _, mdt = _open(root)
    record = mdt.read_partition("files")[ALL_PARTITIONS_KEY]
    assert set(live_files(record)) == _storage_partitions(root) == {"chennai", "san_francisco", "sao_paulo"}
    assert set(mdt.file_listing()) == _storage_partitions(root)


def test_verify_reports_no_differences(root: Path) -> None:
    table, _ = _open(root)
    assert verify_metadata_table(table, table.timeline()) == []
    assert verify_metadata_table(table) == []


def test_block_of_a_pending_data_commit_is_not_applied(root: Path) -> None:
    """A writer that stopped after the metadata delta commit of SECOND and before completing SECOND on the data
    timeline: SECOND stays inflight, its metadata block is not valid, and the listing is FIRST's."""
    (root / ".hoodie" / f"{SECOND}.commit").unlink()
    table, mdt = _open(root)
    assert [(i.requested_time, i.is_completed) for i in table.timeline()] == [(FIRST, True), (SECOND, False)]
    assert mdt.valid_instants() == {INIT, FIRST}
    listing = mdt.file_listing()
    assert listing == committed_files(table, table.timeline())
    assert listing == _written_by_completed_commits(root)
    assert listing == FILES_AFTER_FIRST
    # the uncommitted file is on storage but listed by neither side
    assert _storage_data_files(root) == FILES_AFTER_SECOND
    assert verify_metadata_table(table, table.timeline()) == []
