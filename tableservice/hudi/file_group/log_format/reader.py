"""Streaming, block-by-block reading of Hudi log files with Hudi's corrupt-block rules.

`iter_log_blocks` reads block framing and headers only; content is kept for small blocks and delete blocks
and otherwise read on demand (`read_block_content`, or by passing storage to `decode_data_block`). Corrupt
regions come out as `CorruptBlock`s and reading goes on at the next `#HUDI#` magic, so no byte sequence makes
it raise (storage failures aside).

A block is corrupt (as in Hudi's HoodieLogFileReader) when: the magic is missing; the file ends inside the
block size; the block size runs past the end of the file; the trailing totalBlockLength is not blockSize + 6;
or the 6 bytes after the block are neither the next magic nor the end of the file. The CorruptBlock then covers
everything up to the next magic (or the end of the file). Beyond Hudi, a block whose framing is intact but whose
log format version is not 1, whose block type or a header key is unknown (or type CORRUPT), or whose lengths
do not add up is also returned as a CorruptBlock covering exactly that block (Hudi's Java reader throws there),
and so are 1-5 trailing bytes that cannot hold a magic (Hudi's reader stops silently there).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from tableservice.errors import (
    CorruptFileError,
    PermanentError,
    StorageError,
    TableServiceError,
    UnsupportedTableError,
)
from tableservice.hudi.file_group.log_format.avro_decode import decode_avro_records
from tableservice.hudi.file_group.log_format.blocks import (
    FIXED_PREFIX,
    LOG_FORMAT_VERSION,
    MAGIC,
    BlockType,
    CorruptBlock,
    HeaderKey,
    LogBlock,
    MetadataError,
    decode_metadata,
)
from tableservice.hudi.file_group.log_format.deletes import decode_delete_content
from tableservice.hudi.table.schema import avro_schema_from_json, parse_avro
from tableservice.storage import Storage

#: Content up to this size is kept in the LogBlock; larger content is read when decoded.
DEFAULT_EAGER_CONTENT_LIMIT = 1 << 20
_WINDOW = 1 << 20
_SCAN_CHUNK = 1 << 20
_MIN_BLOCK_SIZE = 4 + 4 + 4 + 8 + 4 + 8  # version, type, empty header, content length, empty footer, total

_I64 = struct.Struct(">q")


class _Source:
    """Random reads with a small read-ahead window (few requests on object stores)."""

    def __init__(self, f: pa.NativeFile, size: int, location: str) -> None:
        self.f = f
        self.size = size
        self.location = location
        self._start = 0
        self._data = b""

    def read(self, offset: int, n: int) -> bytes:
        """Up to `n` bytes at `offset` (fewer at the end of the file)."""
        if offset < 0 or n <= 0 or offset >= self.size:
            return b""
        n = min(n, self.size - offset)
        if self._start <= offset and offset + n <= self._start + len(self._data):
            rel = offset - self._start
            return self._data[rel : rel + n]
        if n > _WINDOW:
            return self._fetch(offset, n)
        self._start = offset
        self._data = self._fetch(offset, min(_WINDOW, self.size - offset))
        return self._data[:n]

    def _fetch(self, offset: int, n: int) -> bytes:
        try:
            data = bytes(self.f.read_at(n, offset))
        except OSError as e:
            raise StorageError(f"read of {n} bytes at offset {offset} failed: {e}", path=self.location) from e
        if len(data) != n:
            # Only bytes below the size taken at open are asked for: a short read means the file shrank meanwhile
            # (scanning on from there would never reach the size it had).
            raise StorageError(
                f"file shrank while read: {len(data)} of {n} bytes at offset {offset} (size was {self.size})",
                path=self.location,
            )
        return data

    def find_magic(self, start: int) -> int:
        """Offset of the next magic at or after `start`, or the file size when there is none."""
        pos = start
        while pos < self.size:
            chunk = self.read(pos, _SCAN_CHUNK)
            i = chunk.find(MAGIC)
            if i >= 0:
                return pos + i
            if pos + len(chunk) >= self.size:
                break
            pos += len(chunk) - (len(MAGIC) - 1)
        return self.size


class _Corrupt(Exception):
    def __init__(self, reason: str, end: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.end = end  # known end of an intact-but-unreadable block; None means scan for the next magic


def iter_log_blocks(
    storage: Storage,
    location: str,
    *,
    table: str | None = None,
    eager_content_limit: int = DEFAULT_EAGER_CONTENT_LIMIT,
) -> Iterator[LogBlock | CorruptBlock]:
    """Yield the blocks of one log file in order: LogBlock for readable blocks, CorruptBlock for skipped bytes."""
    try:
        f = storage.open_input_file(location)
    except TableServiceError as e:
        raise e.with_context(table=table, path=location) from e
    try:
        try:
            size = f.size()
        except OSError as e:
            raise StorageError(f"cannot stat log file: {e}", table=table, path=location) from e
        src = _Source(f, size, location)
        pos = 0
        while pos < size:
            try:
                block = _read_block(src, pos, location, eager_content_limit)
            except _Corrupt as c:
                end = c.end if c.end is not None else src.find_magic(pos + 1)
                yield CorruptBlock(location=location, offset=pos, length=end - pos, reason=c.reason)
                pos = end
                continue
            except TableServiceError as e:
                raise e.with_context(table=table, path=location) from e
            yield block
            pos = block.offset + block.size
    finally:
        f.close()


def _read_block(src: _Source, pos: int, location: str, eager_limit: int) -> LogBlock:
    size = src.size
    if src.read(pos, len(MAGIC)) != MAGIC:
        raise _Corrupt("no magic where a block should start" if size - pos >= 6 else "file ends inside a magic")
    raw = src.read(pos + 6, 8)
    if len(raw) < 8:
        raise _Corrupt("file ends inside the block size")
    (block_size,) = _I64.unpack(raw)
    if block_size < _MIN_BLOCK_SIZE:
        raise _Corrupt(f"invalid block size {block_size}")
    end = pos + 14 + block_size
    if end > size:
        raise _Corrupt(f"block size {block_size} runs past end of file")
    (total,) = _I64.unpack(src.read(end - 8, 8))
    if total != block_size + len(MAGIC):
        raise _Corrupt(f"totalBlockLength {total} does not match block size {block_size}")
    after = src.read(end, len(MAGIC))
    if len(after) == len(MAGIC) and after != MAGIC:
        raise _Corrupt("no magic after the block")

    version, type_code = struct.unpack(">ii", src.read(pos + 14, 8))
    if version != LOG_FORMAT_VERSION:
        raise _Corrupt(f"unsupported log format version {version}", end)
    try:
        block_type = BlockType(type_code)
    except ValueError:
        raise _Corrupt(f"unknown block type {type_code}", end) from None
    if block_type == BlockType.CORRUPT:
        raise _Corrupt("block type CORRUPT on disk", end)

    header, p = _read_metadata(src, pos + FIXED_PREFIX, end - 8, end)
    if p + 8 > end - 8:
        raise _Corrupt("content length runs past the block", end)
    (content_length,) = _I64.unpack(src.read(p, 8))
    content_offset = p + 8
    content_end = content_offset + content_length
    if content_length < 0 or content_end + 4 > end - 8:
        raise _Corrupt(f"content length {content_length} does not fit the block", end)
    footer, p = _read_metadata(src, content_end, end - 8, end)
    if p != end - 8:
        raise _Corrupt("block parts do not add up to the block size", end)
    # Delete blocks are always kept: decode_delete_block(block) needs no storage.
    eager = content_length <= eager_limit or block_type == BlockType.DELETE
    content = src.read(content_offset, content_length) if eager else None
    return LogBlock(
        block_type=block_type,
        header=header,
        footer=footer,
        location=location,
        offset=pos,
        size=end - pos,
        content_offset=content_offset,
        content_length=content_length,
        content=content,
        format_version=version,
    )


def _read_metadata(src: _Source, start: int, limit: int, block_end: int) -> tuple[dict[HeaderKey, str], int]:
    chunk = 64 * 1024
    while True:
        n = min(chunk, limit - start)
        buf = src.read(start, n)
        try:
            meta, used = decode_metadata(buf, 0, len(buf))
            return meta, start + used
        except MetadataError as e:
            if n >= limit - start:
                raise _Corrupt(f"header or footer does not decode: {e}", block_end) from None
            chunk *= 4


def read_block_content(block: LogBlock, storage: Storage) -> bytes:
    """The content bytes of a block (from the block when kept, else read from its file)."""
    if block.content is not None:
        return block.content
    if block.content_length == 0:
        return b""
    try:
        f = storage.open_input_file(block.location)
    except TableServiceError as e:
        raise e.with_context(path=block.location) from e
    try:
        data = bytes(f.read_at(block.content_length, block.content_offset))
    except OSError as e:
        raise StorageError(f"content read failed: {e}", path=block.location) from e
    finally:
        f.close()
    if len(data) != block.content_length:
        raise StorageError(
            f"file shrank: expected {block.content_length} content bytes at {block.content_offset}, got {len(data)}",
            path=block.location,
        )
    return data


# --- decoding ----------------------------------------------------------------------------------


def decode_data_block(block: LogBlock, storage: Storage | None = None, *, table: str | None = None) -> pa.Table:
    """The records of an AVRO_DATA, CDC_DATA or PARQUET_DATA block as an Arrow table.

    Avro blocks decode with the writer schema of their SCHEMA header (Arrow types as in
    `tableservice.hudi.table.schema`); Parquet blocks are read as the Parquet file they contain.
    HFILE_DATA blocks (metadata table only) raise UnsupportedTableError.
    `storage` is needed only when the block's content was not kept by the reader.
    """
    try:
        if block.block_type in (BlockType.AVRO_DATA, BlockType.CDC_DATA):
            text = block.schema
            if text is None:
                raise CorruptFileError(f"{block.block_type.name} block at offset {block.offset} has no SCHEMA header")
            node = parse_avro(avro_schema_from_json(text))
            return decode_avro_records(_content(block, storage), node)
        if block.block_type == BlockType.PARQUET_DATA:
            return _read_parquet(_content(block, storage), block)
        if block.block_type == BlockType.HFILE_DATA:
            raise UnsupportedTableError(f"HFile data block at offset {block.offset} cannot be decoded")
        raise PermanentError(f"{block.block_type.name} block at offset {block.offset} is not a data block")
    except TableServiceError as e:
        raise e.with_context(table=table, path=block.location) from e


def decode_delete_block(block: LogBlock, storage: Storage | None = None, *, table: str | None = None) -> pa.Table:
    """The deleted keys of a DELETE block: record_key, partition_path, ordering_value, ordering_value_kind.

    See `tableservice.hudi.file_group.log_format.deletes` for the ordering value representation.
    """
    if block.block_type != BlockType.DELETE:
        raise PermanentError(
            f"{block.block_type.name} block at offset {block.offset} is not a delete block",
            table=table,
            path=block.location,
        )
    try:
        return decode_delete_content(_content(block, storage))
    except TableServiceError as e:
        raise e.with_context(table=table, path=block.location) from e


def iter_log_records(storage: Storage, location: str, *, table: str | None = None) -> Iterator[tuple[bool, pa.Table]]:
    """(is_delete, rows) of each data block (AVRO / PARQUET) and delete block of a log file, in file order; other
    blocks and corrupt bytes are passed over. No instant filtering: every block the file holds."""
    for block in iter_log_blocks(storage, location, table=table):
        if not isinstance(block, LogBlock):
            continue
        if block.block_type is BlockType.DELETE:
            yield True, decode_delete_block(block, storage, table=table)
        elif block.block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA):
            yield False, decode_data_block(block, storage, table=table)


def _content(block: LogBlock, storage: Storage | None) -> bytes:
    if block.content is not None:
        return block.content
    if storage is None:
        raise PermanentError(f"block at offset {block.offset} was read lazily: pass storage to decode it")
    return read_block_content(block, storage)


def _read_parquet(content: bytes, block: LogBlock) -> pa.Table:
    try:
        # ParquetFile, not read_table: the same table without the dataset layer (whose import alone, pandas
        # included, costs a fresh Spark worker about 0.3 CPU s) and its per-call set-up.
        table = pq.ParquetFile(pa.BufferReader(content)).read(use_threads=False)
        check_decoded_table(table)
        return table
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CorruptFileError(f"Parquet data block at offset {block.offset} does not decode: {e}") from e


def check_decoded_table(table: pa.Table) -> None:
    """Parquet readers trust the file: names and strings are not checked as UTF-8, so damage would surface later,
    far from the file. Raises ValueError (UnicodeDecodeError or ArrowInvalid) for a name or value that is not."""
    for f in table.schema:
        _check_field_names(f)
    table.validate(full=True)


def _check_field_names(f: pa.Field) -> None:
    _ = f.name  # decodes the name as UTF-8
    t = f.type
    if isinstance(t, pa.MapType):
        _check_field_names(t.key_field)
        _check_field_names(t.item_field)
    elif isinstance(t, (pa.ListType, pa.LargeListType, pa.FixedSizeListType)):
        _check_field_names(t.value_field)
    elif isinstance(t, pa.StructType):
        for i in range(t.num_fields):
            _check_field_names(t.field(i))
