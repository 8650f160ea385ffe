"""Writing HFile version 3 in either of the two layouts Hudi's readers meet (see `hfile` for the structure).

- `hbase`: what HBase's writer produces for Hudi 0.14 - 1.0 (table versions 6 and 8): minor version 3, CRC32C
  checksums, data blocks chained by their previous-block offsets, full KeyValue keys in the root index and in
  `hfile.LASTKEY`, file info sorted by name, the total uncompressed size in the trailer. Hudi 0.14/0.15 read it
  with HBase's reader, which verifies the checksums.
- `hudi`: what Hudi 1.1's own writer produces (table version 9): minor version 0, no checksums, previous-block
  offsets -1, `int16 len | row` as index key and last key, no total uncompressed size.

Both compress every block with GZ as one gzip member with a fixed header (no name, mtime 0) at level 6, so the
same cells give the same bytes on every run.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tableservice.hudi.metadata.hfile import (
    CHECKSUM_CRC32C,
    CHECKSUM_NONE,
    CODEC_GZ,
    COMPARATOR,
    DATA_MAGIC,
    FILE_INFO_MAGIC,
    HEADER_SIZE,
    KV_TIMESTAMP_LATEST,
    KV_TYPE_PUT,
    META_MAGIC,
    NO_OFFSET,
    PBUF_MAGIC,
    ROOT_INDEX_MAGIC,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    checksum_chunks,
)

BYTES_PER_CHECKSUM = 16384
BLOCK_SIZE = 1024 * 1024  # Hudi's HFile block size for the metadata table
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x00"
LAYOUTS = ("hbase", "hudi")


def hfile_layout(table_version: int) -> str:
    """The layout the table's own writers use: HBase's up to table version 8, Hudi's own from version 9."""
    return "hudi" if table_version >= 9 else "hbase"


KV_KEY_OVERHEAD = 2 + 1 + 8 + 1  # row length, family length, timestamp, type


def kv_key(row: bytes) -> bytes:
    """HBase's KeyValue key of a metadata cell: no family, no qualifier, latest timestamp, type Put."""
    return struct.pack(">H", len(row)) + row + b"\x00" + struct.pack(">qb", KV_TIMESTAMP_LATEST, KV_TYPE_PUT)


def short_key(row: bytes) -> bytes:
    return struct.pack(">H", len(row)) + row


def gzip_member(payload: bytes) -> bytes:
    deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(payload) + deflate.flush()
    return GZIP_HEADER + body + struct.pack("<II", zlib.crc32(payload), len(payload) & 0xFFFFFFFF)


def write_hfile(
    cells: Sequence[tuple[bytes, bytes]],
    *,
    file_info: Iterable[tuple[bytes, bytes]] = (),
    meta_blocks: Mapping[bytes, bytes] | None = None,
    layout: str = "hbase",
    create_time_ms: int = 0,
    block_size: int = BLOCK_SIZE,
) -> bytes:
    """The bytes of an HFile holding `cells` (row, value), which must be strictly sorted by row.

    `file_info` holds the caller's entries (`schema`, `bloomFilterTypeCode`, `minRecordKey`, ...); the writer adds
    `KEY_VALUE_VERSION`, `MAX_MEMSTORE_TS_KEY` and the `hfile.*` entries itself. `meta_blocks` are written in the
    given order (Hudi's base files: `bloomFilter`).
    """
    rows = pa.array([row for row, _ in cells], pa.binary())
    values = pa.array([value for _, value in cells], pa.binary())
    return write_hfile_arrays(
        rows,
        values,
        file_info=file_info,
        meta_blocks=meta_blocks,
        layout=layout,
        create_time_ms=create_time_ms,
        block_size=block_size,
    )


def write_hfile_arrays(
    rows: pa.Array,
    values: pa.Array,
    *,
    file_info: Iterable[tuple[bytes, bytes]] = (),
    meta_blocks: Mapping[bytes, bytes] | None = None,
    layout: str = "hbase",
    create_time_ms: int = 0,
    block_size: int = BLOCK_SIZE,
) -> bytes:
    """`write_hfile` with the rows and values as two binary arrays (no Python object per cell)."""
    if layout not in LAYOUTS:
        raise ValueError(f"HFile layout {layout!r}: expected one of {LAYOUTS}")
    count = len(rows)
    buffer, ends, key_total, value_total = _cell_buffer(rows, values)
    w = _Writer(layout)
    # data blocks: cells appended until a block reaches `block_size` bytes
    index: list[tuple[int, int, bytes]] = []
    data_uncompressed = 0
    first = 0
    while first < count:
        start = int(ends[first - 1]) if first else 0
        last = min(int(np.searchsorted(ends, start + block_size, side="left")), count - 1)
        block = buffer[start : int(ends[last])].tobytes()
        data_uncompressed += len(block)
        index.append((*w.block(DATA_MAGIC, block, chain=True), rows[first].as_py()))
        first = last + 1
    first_data = index[0][0] if index else NO_OFFSET
    # Without data blocks HBase writes no offset for both; Hudi's writer leaves the last one at 0.
    last_data = index[-1][0] if index else (NO_OFFSET if layout == "hbase" else 0)
    # meta blocks
    meta_index: list[tuple[int, int, bytes]] = []
    for name, payload in (meta_blocks or {}).items():
        meta_index.append((*w.block(META_MAGIC, payload, chain=True), name))
    # load-on-open: root data index, meta index, file info
    hbase = layout == "hbase"
    root = b"".join(
        struct.pack(">qi", off, size) + _key_length(k, hbase) + k
        for off, size, k in ((o, s, kv_key(r) if hbase else short_key(r)) for o, s, r in index)
    )
    load_on_open, _ = w.block(ROOT_INDEX_MAGIC, root, chain=True, counted=False)
    meta = b"".join(struct.pack(">qi", o, s) + _key_length(n, hbase) + n for o, s, n in meta_index)
    w.block(ROOT_INDEX_MAGIC, meta, chain=True)
    last_row = rows[count - 1].as_py() if count else None
    info = _file_info_entries(count, last_row, key_total, value_total, list(file_info), layout, create_time_ms)
    file_info_offset, _ = w.block(FILE_INFO_MAGIC, _encode_file_info(info), chain=False)
    trailer: list[tuple[int, int | bytes]] = [
        (1, file_info_offset),
        (2, load_on_open),
        (3, len(root) if hbase else data_uncompressed),
    ]
    if hbase:
        trailer.append((4, w.uncompressed_total + TRAILER_SIZE))
    trailer += [
        (5, len(index)),
        (6, len(meta_index)),
        (7, count),
        (8, 1),
        (9, first_data),
        (10, last_data),
        (11, COMPARATOR.encode()),
        (12, CODEC_GZ),
    ]
    message = _proto(trailer)
    tail = TRAILER_MAGIC + _varint(len(message)) + message
    minor = 3 if hbase else 0
    tail = tail.ljust(TRAILER_SIZE - 4, b"\x00") + struct.pack(">I", (minor << 24) | 3)
    return bytes(w.out) + tail


class _Writer:
    def __init__(self, layout: str) -> None:
        self.hbase = layout == "hbase"
        self.out = bytearray()
        self.uncompressed_total = 0
        self._previous: dict[bytes, int] = {}

    def block(self, magic: bytes, payload: bytes, *, chain: bool, counted: bool = True) -> tuple[int, int]:
        """Append one block; returns its offset and on-disk size (header and checksums included)."""
        offset = len(self.out)
        compressed = gzip_member(payload)
        prev = self._previous.get(magic, -1) if (chain and self.hbase) else -1
        ctype = CHECKSUM_CRC32C if self.hbase else CHECKSUM_NONE
        with_header = HEADER_SIZE + len(compressed)
        checks = -(-with_header // BYTES_PER_CHECKSUM) * 4
        header = magic + struct.pack(
            ">iiqbii", len(compressed) + checks, len(payload), prev, ctype, BYTES_PER_CHECKSUM, with_header
        )
        body = header + compressed
        self.out += body + checksum_chunks(body, BYTES_PER_CHECKSUM, ctype)
        self._previous[magic] = offset
        if counted:
            self.uncompressed_total += HEADER_SIZE + len(payload)
        return offset, len(self.out) - offset


def _cell_buffer(row_array: pa.Array, value_array: pa.Array) -> tuple[npt.NDArray[np.uint8], Any, int, int]:
    """Every cell as HBase's KeyValue (`key length, value length, key, value, memstore timestamp 0`) in one buffer,
    built column-wise; (buffer, end offset of each cell, total key bytes, total value bytes). Rows must be strictly
    sorted."""
    if not len(row_array):
        return np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64), 0, 0
    if len(row_array) > 1 and not pc.all(pc.less(row_array[:-1], row_array[1:])).as_py():
        rows = row_array.to_pylist()
        bad = next(i for i in range(1, len(rows)) if rows[i - 1] >= rows[i])
        raise ValueError(f"HFile cells must be strictly sorted by row: {rows[bad - 1][:64]!r} then {rows[bad][:64]!r}")
    row_offsets, row_data = _binary_parts(row_array)
    value_offsets, value_data = _binary_parts(value_array)
    row_lengths, value_lengths = np.diff(row_offsets), np.diff(value_offsets)
    key_lengths = row_lengths + KV_KEY_OVERHEAD
    sizes = 8 + key_lengths + value_lengths + 1
    ends = np.cumsum(sizes)
    starts = ends - sizes
    out = np.zeros(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
    for offset, number, width in ((0, key_lengths, 4), (4, value_lengths, 4), (8, row_lengths, 2)):
        for byte in range(width):
            out[starts + offset + byte] = (number >> (8 * (width - 1 - byte))) & 0xFF
    tail = starts + 10 + row_lengths  # family length 0, timestamp, type
    for byte, value in enumerate(struct.pack(">qb", KV_TIMESTAMP_LATEST, KV_TYPE_PUT)):
        out[tail + 1 + byte] = value
    _scatter(out, starts + 10, row_offsets, row_lengths, row_data)
    _scatter(out, tail + 10, value_offsets, value_lengths, value_data)
    return out, ends, int(key_lengths.sum()), int(value_lengths.sum())


def _binary_parts(array: pa.Array) -> tuple[Any, npt.NDArray[np.uint8]]:
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32, count=len(array) + 1, offset=array.offset * 4).astype(np.int64)
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


def _scatter(out: npt.NDArray[np.uint8], at: Any, offsets: Any, lengths: Any, data: npt.NDArray[np.uint8]) -> None:
    """Copy variable-length segments `data[offsets[i]:offsets[i+1]]` to `out[at[i]:...]`."""
    total = int(lengths.sum())
    if total:
        positions = np.repeat(at - offsets[:-1], lengths) + np.arange(offsets[0], offsets[0] + total)
        out[positions] = data[offsets[0] : offsets[0] + total]


def _file_info_entries(
    count: int,
    last_row: bytes | None,
    key_total: int,
    value_total: int,
    extra: list[tuple[bytes, bytes]],
    layout: str,
    create_time_ms: int,
) -> list[tuple[bytes, bytes]]:
    hbase = layout == "hbase"
    computed: dict[bytes, bytes] = {
        b"KEY_VALUE_VERSION": struct.pack(">i", 1),
        b"MAX_MEMSTORE_TS_KEY": struct.pack(">q", 0),
    }
    if count:
        keys = key_total if hbase else key_total - KV_KEY_OVERHEAD * count
        computed[b"hfile.AVG_KEY_LEN"] = struct.pack(">i", keys // count)
        computed[b"hfile.AVG_VALUE_LEN"] = struct.pack(">i", value_total // count)
    else:
        computed[b"hfile.AVG_KEY_LEN"] = struct.pack(">i", 0)
        computed[b"hfile.AVG_VALUE_LEN"] = struct.pack(">i", 0)
    computed[b"hfile.CREATE_TIME_TS"] = struct.pack(">q", create_time_ms)
    if last_row is not None:
        last = last_row
        computed[b"hfile.LASTKEY"] = kv_key(last) if hbase else short_key(last)
    elif not hbase:
        computed[b"hfile.LASTKEY"] = b""
    names = {name for name, _ in extra}
    entries = [(k, v) for k, v in computed.items() if k not in names] + extra
    if hbase:
        return sorted(entries)
    return entries


def _encode_file_info(entries: list[tuple[bytes, bytes]]) -> bytes:
    message = b"".join(_field_bytes(1, _proto([(1, k), (2, v)])) for k, v in entries)
    return PBUF_MAGIC + _varint(len(message)) + message


def _key_length(key: bytes, hadoop: bool) -> bytes:
    return _vlong(len(key)) if hadoop else _varint(len(key))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _vlong(value: int) -> bytes:
    """Hadoop's WritableUtils.writeVLong."""
    if -112 <= value <= 127:
        return struct.pack(">b", value)
    length = -112
    if value < 0:
        value ^= -1
        length = -120
    tmp = value
    while tmp:
        tmp >>= 8
        length -= 1
    size = -(length + 120) if length < -120 else -(length + 112)
    return struct.pack(">b", length) + value.to_bytes(size, "big")


def _field_bytes(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _proto(fields: Iterable[tuple[int, int | bytes]]) -> bytes:
    out = bytearray()
    for number, value in fields:
        if isinstance(value, bytes):
            out += _field_bytes(number, value)
        else:
            out += _varint(number << 3) + _varint(value)
    return bytes(out)
