"""Reading what a table's metadata table holds, for comparisons in tests."""

from __future__ import annotations

from typing import Any

from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.records import live_files
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.storage import Storage


def open_metadata_table(path: str) -> MetadataTable:
    table = HudiTable.open(Storage(), path)
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None, f"{path} has no metadata table"
    return mdt


def partition_records(path: str, partition: str) -> dict[str, Any]:
    """The live merged records of one metadata partition, by key."""
    return open_metadata_table(path).read_partition(partition)


def metadata_contents(path: str) -> dict[str, dict[str, Any]]:
    """Every readable partition: `files` as name -> size of live entries, the others as records without the
    `_hoodie_file_name` meta field (Hudi fills it in some base files and not in others)."""
    mdt = open_metadata_table(path)
    out: dict[str, dict[str, Any]] = {}
    for partition in mdt.partitions:
        records = mdt.read_partition(partition)
        if partition == "files":
            out[partition] = {k: live_files(v) for k, v in records.items()}
        else:
            out[partition] = {k: {f: v for f, v in r.items() if f != "_hoodie_file_name"} for k, r in records.items()}
    return out
