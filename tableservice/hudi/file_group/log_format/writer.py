"""Encoding log blocks and appending them to log files.

Every `encode_*` function returns the full bytes of one block (magic to trailing length), ready for
`append_log_blocks`. Headers map HeaderKey (or its int) to text; Hudi writes INSTANT_TIME and SCHEMA on data
and delete blocks, and INSTANT_TIME, TARGET_INSTANT_TIME and COMMAND_BLOCK_TYPE on rollback command blocks.

Appending: a local log file is appended to in place (Hudi v6 appends new blocks to the latest log file of a
file slice). Object stores cannot append: `append_log_blocks` then only creates new files and raises
AlreadyExistsError for an existing one, and `create_only=True` asks for that behaviour everywhere; callers roll
over to the next log version (`.log.<n+1>`) instead. `can_append(storage, location)` tells which applies.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tableservice.errors import AlreadyExistsError, PermanentError
from tableservice.hudi.file_group.log_format.avro_encode import encode_avro_records
from tableservice.hudi.file_group.log_format.blocks import (
    MAGIC,
    ROLLBACK_COMMAND,
    BlockType,
    HeaderKey,
    frame_block,
    normalise_header,
)
from tableservice.hudi.file_group.log_format.deletes import DeleteRecord, encode_delete_content
from tableservice.hudi.table.schema import avro_schema_to_json, parse_avro
from tableservice.storage import Storage, storage_error, to_uri

HeaderInput = Mapping[HeaderKey, str] | Mapping[int, str]


def encode_avro_data_block(table: pa.Table, avro_schema: dict[str, Any], header: HeaderInput) -> bytes:
    """An AVRO_DATA block holding the rows of `table` encoded with `avro_schema`.

    Columns are matched to the schema's fields by name and cast to the schema's types; missing nullable
    fields are written as null. The SCHEMA header is set to the schema when absent (and must describe the
    same schema when given).
    """
    head = _schema_header(header, avro_schema)
    content = encode_avro_records(table, parse_avro(avro_schema))
    return frame_block(BlockType.AVRO_DATA, head, content)


def encode_parquet_data_block(
    table: pa.Table,
    header: HeaderInput,
    compression: str = "gzip",
    avro_schema: dict[str, Any] | None = None,
) -> bytes:
    """A PARQUET_DATA block whose content is one Parquet file of `table` (Hudi's default codec is gzip).

    Nanosecond timestamps are stored as microseconds (what Hudi's Parquet readers expect). The SCHEMA
    header is required by Hudi readers: pass it in `header` or give `avro_schema`.
    """
    head = _schema_header(header, avro_schema) if avro_schema is not None else normalise_header(header)
    if HeaderKey.SCHEMA not in head:
        raise PermanentError("a Parquet data block needs a SCHEMA header")
    buf = io.BytesIO()
    coerce = "us" if any(pa.types.is_timestamp(f.type) and f.type.unit == "ns" for f in table.schema) else None
    pq.write_table(
        table,
        buf,
        compression=compression,
        coerce_timestamps=coerce,
        use_compliant_nested_type=True,
        store_decimal_as_integer=True,
    )
    return frame_block(BlockType.PARQUET_DATA, head, buf.getvalue())


def encode_delete_block(records: pa.Table | Iterable[DeleteRecord], header: HeaderInput) -> bytes:
    """A DELETE block (content version 3) for a delete table (columns record_key, partition_path and
    optionally ordering_value, ordering_value_kind) or DeleteRecord objects."""
    return frame_block(BlockType.DELETE, normalise_header(header), encode_delete_content(records))


def encode_command_block(header: HeaderInput) -> bytes:
    """A COMMAND block; COMMAND_BLOCK_TYPE defaults to "0" (rollback), which needs TARGET_INSTANT_TIME."""
    head = normalise_header(header)
    head.setdefault(HeaderKey.COMMAND_BLOCK_TYPE, ROLLBACK_COMMAND)
    if head[HeaderKey.COMMAND_BLOCK_TYPE] == ROLLBACK_COMMAND and HeaderKey.TARGET_INSTANT_TIME not in head:
        raise PermanentError("a rollback command block needs a TARGET_INSTANT_TIME header")
    return frame_block(BlockType.COMMAND, head, b"")


def rollback_header(instant_time: str, target_instant_time: str) -> dict[HeaderKey, str]:
    """The header Hudi writes on a rollback command block."""
    return {
        HeaderKey.INSTANT_TIME: instant_time,
        HeaderKey.TARGET_INSTANT_TIME: target_instant_time,
        HeaderKey.COMMAND_BLOCK_TYPE: ROLLBACK_COMMAND,
    }


def _schema_header(header: HeaderInput, avro_schema: dict[str, Any] | None) -> dict[HeaderKey, str]:
    head = normalise_header(header)
    if avro_schema is None:
        return head
    given = head.get(HeaderKey.SCHEMA)
    if given is None:
        head[HeaderKey.SCHEMA] = avro_schema_to_json(avro_schema)
    else:
        try:
            same = json.loads(given) == avro_schema
        except ValueError:
            same = False
        if not same:
            raise PermanentError("the SCHEMA header does not describe the schema the records are written with")
    return head


# --- appending ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AppendResult:
    """Where the blocks went: they start at `offset`; the file is `size` bytes long afterwards."""

    location: str
    offset: int
    size: int
    created: bool


def can_append(storage: Storage, location: str) -> bool:
    """Whether `append_log_blocks` can add to an existing file at this location (local storage only)."""
    return storage.is_local(location)


def append_log_blocks(
    storage: Storage, location: str, blocks: Sequence[bytes], *, create_only: bool = False
) -> AppendResult:
    """Append encoded blocks to a log file, creating it when absent.

    Creation is atomic and fails with AlreadyExistsError if another writer created the file first.
    An existing file is appended to in place on local storage; with `create_only=True`, or on object stores
    (no append), an existing file raises AlreadyExistsError: write the next log version instead.
    """
    for i, b in enumerate(blocks):
        if not bytes(b[:6]) == MAGIC:
            raise PermanentError(f"block {i} does not start with the log block magic")
    data = b"".join(blocks)
    if storage.info(location) is None:
        storage.create_if_absent(location, data)
        return AppendResult(location, 0, len(data), True)
    if create_only or not can_append(storage, location):
        raise AlreadyExistsError(
            "log file exists and cannot be appended to here; write a new log version", path=location
        )
    path = os.path.abspath(to_uri(location))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError as e:
        raise storage_error("append failed", location, e) from e
    try:
        offset = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            # A short append (ENOSPC) would leave a torn block at the end: cut the file back to what it held.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, offset)
            raise
        size = os.lseek(fd, 0, os.SEEK_END)
    except OSError as e:
        raise storage_error("append failed", location, e) from e
    finally:
        os.close(fd)
    return AppendResult(location, offset, size, False)
