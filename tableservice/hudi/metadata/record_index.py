"""Record-index records of a commit (HUDI-MDT-NOTES §3.2, §6.2).

- Clustering: every key of the new base files re-pointed to its new file group, at the clustering instant.
- A writer's commit: keys of the base files it wrote and of the data blocks of the log files it wrote point at
  their file group (at the commit's instant; Hudi sends only inserted keys, so an updated key's instant differs
  from Hudi's, its location does not); keys of its delete blocks, and keys a rewritten base file no longer holds,
  are removed (a delete block in the metadata table).
- Compaction: nothing (keys stay in their file groups).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tableservice.errors import CorruptFileError
from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.hudi.file_group.log_format import BlockType, LogBlock
from tableservice.hudi.file_group.log_format.reader import decode_data_block, decode_delete_block, iter_log_blocks
from tableservice.hudi.metadata.keys import MetadataPartition
from tableservice.hudi.metadata.records import record_index_record
from tableservice.hudi.table.fs_view import partition_location
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.storage import join

RECORD_INDEX = MetadataPartition.RECORD_INDEX.value
KEY = "_hoodie_record_key"

# (key, value or None for a removed key)
IndexUpdate = tuple[str, dict[str, Any] | None]


def base_file_keys(table: HudiTable, partition: str, name: str) -> list[str]:
    location = join(partition_location(table.base_path, partition), name)
    try:
        keys = pq.read_table(table.storage.open_input_file(location), columns=[KEY])
    except (OSError, KeyError, pa.ArrowInvalid) as e:
        raise CorruptFileError(f"cannot read record keys: {e}", table=table.name, path=location) from e
    return [k for k in keys.column(0).to_pylist() if k is not None]


def log_file_records(table: HudiTable, location: str) -> Iterator[tuple[bool, pa.Table]]:
    """(is_delete, rows) per data or delete block of a log file, in order."""
    for block in iter_log_blocks(table.storage, location, table=table.name):
        if not isinstance(block, LogBlock):
            continue
        if block.block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.HFILE_DATA):
            yield False, decode_data_block(block, table.storage, table=table.name)
        elif block.block_type is BlockType.DELETE:
            yield True, decode_delete_block(block, table.storage, table=table.name)


def location(partition: str, file_id: str, instant_ms: int) -> dict[str, Any]:
    """A record-index value: encoding 0 (UUID halves and index) when the file id is `<uuid>-<n>`, else 1."""
    import uuid

    head, _, tail = file_id.rpartition("-")
    try:
        u: uuid.UUID | None = uuid.UUID(head)
        index = int(tail)
    except ValueError:
        u, index = None, -1
    if u is not None and index >= 0:
        high, low = u.int >> 64, u.int & ((1 << 64) - 1)
        return {
            "partitionName": partition,
            "fileIdHighBits": _signed(high),
            "fileIdLowBits": _signed(low),
            "fileIndex": index,
            "fileId": "",
            "instantTime": instant_ms,
            "fileIdEncoding": 0,
            "position": None,
        }
    return {
        "partitionName": partition,
        "fileIdHighBits": None,
        "fileIdLowBits": None,
        "fileIndex": None,
        "fileId": file_id,
        "instantTime": instant_ms,
        "fileIdEncoding": 1,
        "position": None,
    }


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def write_updates(
    table: HudiTable,
    written: Sequence[tuple[str, str, str | None]],
    listed: dict[str, dict[str, int]],
    instant_ms: int,
) -> list[IndexUpdate]:
    """The record-index updates of a writer's commit. `written`: (partition, file name, previous base instant of
    the slice it rewrote, if any); `listed`: the files the metadata table listed before the commit."""
    out: dict[str, dict[str, Any] | None] = {}
    for partition, name, previous in written:
        parsed = parse_log_file_name(name) if name.startswith(".") else parse_base_file_name(name)
        if parsed is None:
            continue
        value = record_index_record(location(partition, parsed.file_id, instant_ms))
        if not name.startswith("."):
            keys = base_file_keys(table, partition, name)
            out.update(dict.fromkeys(keys, value))
            old = _previous_base(listed.get(partition, {}), parsed.file_id, previous)
            if old is not None:
                kept = set(keys)
                for key in base_file_keys(table, partition, old):
                    if key not in kept:
                        out[key] = None
            continue
        for is_delete, rows in log_file_records(table, join(partition_location(table.base_path, partition), name)):
            column = "record_key" if is_delete else KEY
            if column not in rows.column_names:
                continue
            for key in rows.column(column).to_pylist():
                if key is not None:
                    out[key] = None if is_delete else value
    return list(out.items())


def _previous_base(files: dict[str, int], file_id: str, instant: str | None) -> str | None:
    if not instant or instant == "null":
        return None
    for name in files:
        parsed = parse_base_file_name(name) if not name.startswith(".") else None
        if parsed is not None and parsed.file_id == file_id and parsed.instant_time == instant:
            return name
    return None


def clustering_updates(
    table: HudiTable, new_base_files: Iterable[tuple[str, str]], instant_ms: int
) -> list[IndexUpdate]:
    """Every key of the base files a clustering wrote, pointing at its new file group."""
    out: list[IndexUpdate] = []
    for partition, name in new_base_files:
        parsed = parse_base_file_name(name)
        if parsed is None:
            continue
        value = record_index_record(location(partition, parsed.file_id, instant_ms))
        out.extend((key, value) for key in base_file_keys(table, partition, name))
    return out
