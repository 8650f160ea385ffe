"""The data files one write creates: new base files, merged base files (copy-on-write) and log files.

Each function writes one file (with its marker first) and returns the write stat that goes into the commit
metadata, shaped as a Hudi writer fills it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from tableservice.errors import AlreadyExistsError
from tableservice.hudi.file_group.base_file import write_base_file
from tableservice.hudi.file_group.filenames import PARTITION_METADATA_FILE, BaseFileName, LogFileName
from tableservice.hudi.file_group.log_format import (
    HeaderKey,
    append_log_blocks,
    encode_avro_data_block,
    encode_delete_block,
    encode_parquet_data_block,
)
from tableservice.hudi.models import HoodieWriteStat
from tableservice.hudi.table.fs_view import FileSlice, partition_location
from tableservice.hudi.table.properties import format_properties
from tableservice.hudi.table.schema import avro_schema_to_json
from tableservice.hudi.write.markers import MarkerType, create_marker
from tableservice.storage import Storage, join


@dataclass(frozen=True)
class WriteContext:
    storage: Storage
    base_path: str
    instant_time: str
    table_version: int
    avro_schema: dict[str, Any]  # with meta fields
    write_token: str
    log_block_format: str = "avro"  # or "parquet"
    compression: str = "gzip"


def _relative(partition: str, name: str) -> str:
    return f"{partition}/{name}" if partition else name


def _stat(**kwargs: Any) -> HoodieWriteStat:
    base: dict[str, Any] = {
        "prev_commit": "null",
        "num_writes": 0,
        "num_deletes": 0,
        "num_update_writes": 0,
        "num_inserts": 0,
        "total_write_bytes": 0,
        "total_write_errors": 0,
        "total_log_records": 0,
        "total_log_files_compacted": 0,
        "total_log_size_compacted": 0,
        "total_updated_records_compacted": 0,
        "total_log_blocks": 0,
        "total_corrupt_log_block": 0,
        "total_rollback_blocks": 0,
        "file_size_in_bytes": 0,
    }
    base.update(kwargs)
    return HoodieWriteStat(**base)


def ensure_partition_metadata(ctx: WriteContext, partition: str) -> None:
    """Write `.hoodie_partition_metadata` (commitTime, partitionDepth) if the partition has none yet."""
    location = join(partition_location(ctx.base_path, partition), PARTITION_METADATA_FILE)
    if ctx.storage.exists(location):
        return
    depth = len([p for p in partition.split("/") if p]) if partition else 0
    stamp = datetime.now(UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
    text = format_properties(
        {"commitTime": ctx.instant_time, "partitionDepth": str(depth)}, ["partition metadata", stamp]
    )
    with contextlib.suppress(AlreadyExistsError):
        ctx.storage.create_if_absent(location, text.encode("latin-1"))


def write_new_base_file(
    ctx: WriteContext,
    partition: str,
    file_id: str,
    rows: pa.Table | Iterable[pa.RecordBatch],
    *,
    num_inserts: int,
    num_updates: int = 0,
    num_deletes: int = 0,
    prev_commit: str = "null",
    marker: MarkerType = MarkerType.CREATE,
) -> HoodieWriteStat:
    """Write `<fileId>_<token>_<instant>.parquet` in the partition (rows carry their meta fields)."""
    name = BaseFileName(file_id, ctx.write_token, ctx.instant_time, ".parquet").name
    ensure_partition_metadata(ctx, partition)
    create_marker(ctx.storage, ctx.base_path, ctx.instant_time, partition, name, marker)
    location = join(partition_location(ctx.base_path, partition), name)
    result = write_base_file(
        ctx.storage, location, rows, avro_schema=ctx.avro_schema, compression=ctx.compression, file_name=name
    )
    return _stat(
        file_id=file_id,
        path=_relative(partition, name),
        prev_commit=prev_commit,
        num_writes=result.num_rows,
        num_deletes=num_deletes,
        num_update_writes=num_updates,
        num_inserts=num_inserts,
        total_write_bytes=result.file_size,
        partition_path=partition,
        file_size_in_bytes=result.file_size,
    )


def next_log_file_name(
    ctx: WriteContext, slice_: FileSlice | None, file_id: str, base_instant: str, existing: Iterable[LogFileName]
) -> LogFileName:
    """The log file a delta write creates. v6: named with the slice's base instant, next version; v8+: named
    with the writing instant, version 1."""
    if ctx.table_version >= 8:
        return LogFileName(file_id, ctx.instant_time, 1, ctx.write_token)
    versions = [lf.version for lf in existing if lf.file_id == file_id and lf.instant_time == base_instant]
    return LogFileName(file_id, base_instant, max(versions, default=0) + 1, ctx.write_token)


def write_log_file(
    ctx: WriteContext,
    partition: str,
    log_name: LogFileName,
    *,
    prev_commit: str,
    base_file: str | None,
    updates: pa.Table | None,
    deletes: pa.Table | None,
    num_inserts: int = 0,
) -> HoodieWriteStat:
    """Create a new log file with a data block (updates) and/or a delete block.

    `deletes` has columns record_key, partition_path and ordering_value (may be null).
    """
    header = {HeaderKey.INSTANT_TIME: ctx.instant_time, HeaderKey.SCHEMA: avro_schema_to_json(ctx.avro_schema)}
    blocks: list[bytes] = []
    n_updates = updates.num_rows if updates is not None else 0
    n_deletes = deletes.num_rows if deletes is not None else 0
    if updates is not None and n_updates:
        if ctx.log_block_format == "parquet":
            blocks.append(
                encode_parquet_data_block(updates, header, compression=ctx.compression, avro_schema=ctx.avro_schema)
            )
        else:
            blocks.append(encode_avro_data_block(updates, ctx.avro_schema, header))
    if deletes is not None and n_deletes:
        blocks.append(encode_delete_block(deletes, header))
    name = log_name.name
    marker = MarkerType.APPEND if ctx.table_version < 8 else MarkerType.CREATE
    create_marker(ctx.storage, ctx.base_path, ctx.instant_time, partition, name, marker)
    location = join(partition_location(ctx.base_path, partition), name)
    append_log_blocks(ctx.storage, location, blocks, create_only=True)
    size = sum(len(b) for b in blocks)
    return _stat(
        file_id=log_name.file_id,
        path=_relative(partition, name),
        prev_commit=prev_commit,
        num_writes=n_updates,
        num_deletes=n_deletes,
        num_update_writes=n_updates - num_inserts,
        num_inserts=num_inserts,
        total_write_bytes=size,
        partition_path=partition,
        total_log_blocks=len(blocks),
        file_size_in_bytes=size,
        log_version=log_name.version,
        log_offset=0,
        base_file=base_file or "",
        log_files=(name,),
    )
