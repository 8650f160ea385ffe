"""Reading HFile version 3, the base-file format of the metadata table and the content of its HFile log blocks.

Layout: `[data blocks (and inline index blocks)][meta blocks][root data index][meta index][file info][trailer]`,
integers big-endian. Every block is a 33-byte header, its payload (one gzip member with codec GZ) and one 4-byte
checksum per `bytes_per_checksum` chunk of header + payload. Data blocks hold cells: `int32 keyLen | int32
valueLen | key | value | vlong memstoreTS`, the key being HBase's KeyValue key (`int16 rowLen | row | int8
familyLen | family | qualifier | int64 timestamp | int8 type`). The row is the metadata record's key, the value
its Avro bytes.

Cells are read by walking the data blocks from the first to the last data block offset named in the trailer,
skipping inline blocks of a multi-level index, so files of any index depth read the same way. Checksums are
verified when the file has them (HBase's writer: CRC32C; Hudi's own writer writes type 0 and none).
"""

from __future__ import annotations

import itertools
import struct
import zlib
from dataclasses import dataclass, field

import crc32c

from tableservice.errors import CorruptFileError, UnsupportedTableError

HEADER_SIZE = 33
TRAILER_SIZE = 4096
TRAILER_MAGIC = b'TRABLK"$'
DATA_MAGIC = b"DATABLK*"
META_MAGIC = b"METABLKc"
ROOT_INDEX_MAGIC = b"IDXROOT2"
FILE_INFO_MAGIC = b"FILEINF2"
# Blocks that a multi-level index or a compound bloom filter writes between data blocks.
INLINE_MAGICS = (b"IDXLEAF2", b"IDXINTE2", b"BLMFBLK2", b"BLMFMET2")
PBUF_MAGIC = b"PBUF"
NO_OFFSET = (1 << 64) - 1

CHECKSUM_NONE, CHECKSUM_CRC32, CHECKSUM_CRC32C = 0, 1, 2
CODEC_LZO, CODEC_GZ, CODEC_NONE = 0, 1, 2
COMPARATOR = "org.apache.hudi.io.storage.HoodieHBaseKVComparator"

KV_TIMESTAMP_LATEST = (1 << 63) - 1
KV_TYPE_PUT = 4


class HFileFormatError(ValueError):
    """A structural problem inside an HFile; the reader turns it into CorruptFileError with the path."""


@dataclass(frozen=True)
class BlockHeader:
    magic: bytes
    on_disk_size_without_header: int
    uncompressed_size: int
    prev_block_offset: int
    checksum_type: int
    bytes_per_checksum: int
    on_disk_data_size_with_header: int

    @property
    def total_size(self) -> int:
        return HEADER_SIZE + self.on_disk_size_without_header


@dataclass(frozen=True)
class Trailer:
    file_info_offset: int = 0
    load_on_open_offset: int = 0
    uncompressed_data_index_size: int = 0
    total_uncompressed_bytes: int | None = None
    data_index_count: int = 0
    meta_index_count: int = 0
    entry_count: int = 0
    num_data_index_levels: int = 1
    first_data_block_offset: int = NO_OFFSET
    last_data_block_offset: int = NO_OFFSET
    comparator: str = COMPARATOR
    codec: int = CODEC_GZ
    minor_version: int = 3
    major_version: int = 3


@dataclass(frozen=True)
class IndexEntry:
    offset: int
    on_disk_size: int
    key: bytes


@dataclass(frozen=True)
class HFile:
    """The decoded content of one HFile: cells (row, value) in file order, file info, meta blocks, trailer."""

    cells: list[tuple[bytes, bytes]]
    file_info: dict[bytes, bytes]
    meta_blocks: dict[bytes, bytes]
    trailer: Trailer
    data_index: list[IndexEntry] = field(default_factory=list)
    # The header of each data block (checksum type, chained offsets, sizes).
    data_blocks: list[BlockHeader] = field(default_factory=list)

    @property
    def layout(self) -> str:
        """`hbase` (HBase's writer: minor version 3, KeyValue index keys) or `hudi` (Hudi 1.1's writer)."""
        return "hbase" if self.trailer.minor_version >= 3 else "hudi"


def read_hfile(data: bytes, *, path: str) -> HFile:
    """Decode an HFile; a structural problem raises CorruptFileError naming `path`."""
    try:
        return _read(data)
    except UnsupportedTableError as e:
        raise e.with_context(path=path) from e
    except (HFileFormatError, struct.error, zlib.error, IndexError, ValueError) as e:
        raise CorruptFileError(f"HFile: {e}", path=path) from e


def _read(data: bytes) -> HFile:
    trailer = _read_trailer(data)
    if trailer.codec not in (CODEC_GZ, CODEC_NONE):
        raise UnsupportedTableError(f"HFile compression codec {trailer.codec} (only GZ and NONE are supported)")
    end = trailer.load_on_open_offset
    blocks: list[BlockHeader] = []
    cells: list[tuple[bytes, bytes]] = []
    if trailer.first_data_block_offset != NO_OFFSET:
        offset = trailer.first_data_block_offset
        while offset <= trailer.last_data_block_offset:
            header, payload = read_block(data, offset, trailer.codec)
            if header.magic == DATA_MAGIC:
                cells.extend((kv_row(key), value) for key, value in _cells(payload))
                blocks.append(header)
            elif header.magic not in INLINE_MAGICS:
                raise HFileFormatError(f"unexpected block {header.magic!r} at offset {offset} among data blocks")
            offset += header.total_size
    if len(cells) != trailer.entry_count:
        raise HFileFormatError(f"trailer counts {trailer.entry_count} cells, data blocks hold {len(cells)}")
    _check_sorted(cells)
    if end > len(data) - TRAILER_SIZE:
        raise HFileFormatError(f"load-on-open offset {end} beyond the trailer")
    header, payload = read_block(data, end, trailer.codec)
    if header.magic != ROOT_INDEX_MAGIC:
        raise HFileFormatError(f"expected the root data index at {end}, found {header.magic!r}")
    data_index = _index_entries(payload, trailer.data_index_count)
    offset = end + header.total_size
    meta_blocks: dict[bytes, bytes] = {}
    header, payload = read_block(data, offset, trailer.codec)
    if header.magic != ROOT_INDEX_MAGIC:
        raise HFileFormatError(f"expected the meta index at {offset}, found {header.magic!r}")
    for entry in _index_entries(payload, trailer.meta_index_count):
        meta_header, meta_payload = read_block(data, entry.offset, trailer.codec)
        if meta_header.magic != META_MAGIC:
            raise HFileFormatError(f"meta block {entry.key!r} at {entry.offset} is {meta_header.magic!r}")
        meta_blocks[entry.key] = meta_payload
    header, payload = read_block(data, trailer.file_info_offset, trailer.codec)
    if header.magic != FILE_INFO_MAGIC:
        raise HFileFormatError(f"expected file info at {trailer.file_info_offset}, found {header.magic!r}")
    file_info = _file_info(payload)
    return HFile(cells, file_info, meta_blocks, trailer, data_index, blocks)


def _read_trailer(data: bytes) -> Trailer:
    if len(data) < TRAILER_SIZE:
        raise HFileFormatError(f"{len(data)} bytes: shorter than the {TRAILER_SIZE}-byte trailer")
    start = len(data) - TRAILER_SIZE
    version = struct.unpack_from(">I", data, len(data) - 4)[0]
    major, minor = version & 0xFFFFFF, version >> 24
    if major != 3:
        raise HFileFormatError(f"HFile major version {major} (only version 3 is supported)")
    if data[start : start + 8] != TRAILER_MAGIC:
        raise HFileFormatError("trailer magic missing")
    length, pos = read_varint(data, start + 8)
    fields = _proto_fields(data[pos : pos + length])
    ints = {k: v for k, v in fields.items() if isinstance(v, int)}
    comparator = fields.get(11, COMPARATOR.encode())
    return Trailer(
        file_info_offset=ints.get(1, 0),
        load_on_open_offset=ints.get(2, 0),
        uncompressed_data_index_size=ints.get(3, 0),
        total_uncompressed_bytes=ints.get(4),
        data_index_count=ints.get(5, 0),
        meta_index_count=ints.get(6, 0),
        entry_count=ints.get(7, 0),
        num_data_index_levels=ints.get(8, 1),
        first_data_block_offset=ints.get(9, NO_OFFSET),
        last_data_block_offset=ints.get(10, NO_OFFSET),
        comparator=comparator.decode("utf-8") if isinstance(comparator, bytes) else COMPARATOR,
        codec=ints.get(12, CODEC_NONE),
        minor_version=minor,
        major_version=major,
    )


def read_block(data: bytes, offset: int, codec: int) -> tuple[BlockHeader, bytes]:
    """The header and uncompressed payload of the block at `offset`, its checksums verified."""
    if offset < 0 or offset + HEADER_SIZE > len(data):
        raise HFileFormatError(f"block offset {offset} outside the file")
    magic = data[offset : offset + 8]
    on_disk, uncompressed, prev, ctype, per_checksum, with_header = struct.unpack_from(">iiqbii", data, offset + 8)
    header = BlockHeader(magic, on_disk, uncompressed, prev, ctype, per_checksum, with_header)
    end = offset + header.total_size
    if with_header < HEADER_SIZE or on_disk < with_header - HEADER_SIZE or end > len(data):
        raise HFileFormatError(f"block {magic!r} at {offset}: sizes {on_disk}/{with_header} do not fit the file")
    body = data[offset : offset + with_header]
    _verify_checksums(header, body, data[offset + with_header : end], offset)
    raw = body[HEADER_SIZE:]
    if uncompressed < 0:
        raise HFileFormatError(f"block {magic!r} at {offset}: negative uncompressed size {uncompressed}")
    payload = _decompress(raw, uncompressed) if codec == CODEC_GZ else raw
    if len(payload) != uncompressed:
        raise HFileFormatError(f"block {magic!r} at {offset}: {len(payload)} bytes, header says {uncompressed}")
    return header, payload


def checksum_chunks(body: bytes, bytes_per_checksum: int, checksum_type: int) -> bytes:
    """The checksum bytes HBase appends to a block: one big-endian int per chunk of header + payload."""
    chunks = max(1, -(-len(body) // bytes_per_checksum)) if bytes_per_checksum > 0 else 0
    out = bytearray()
    for i in range(chunks):
        chunk = body[i * bytes_per_checksum : (i + 1) * bytes_per_checksum]
        if checksum_type == CHECKSUM_CRC32C:
            value = crc32c.crc32c(chunk)
        elif checksum_type == CHECKSUM_CRC32:
            value = zlib.crc32(chunk)
        else:
            value = 0
        out += struct.pack(">I", value)
    return bytes(out)


def _verify_checksums(header: BlockHeader, body: bytes, stored: bytes, offset: int) -> None:
    if header.checksum_type not in (CHECKSUM_CRC32, CHECKSUM_CRC32C):
        return
    per = header.bytes_per_checksum
    chunks = max(1, -(-len(body) // per)) if per > 0 else 0
    if len(stored) != 4 * chunks:  # checked first: a tiny bytes_per_checksum must not cost a CRC per byte
        raise HFileFormatError(
            f"block {header.magic!r} at {offset}: {len(stored)} checksum bytes, expected {4 * chunks}"
        )
    expected = checksum_chunks(body, per, header.checksum_type)
    if stored != expected:
        raise HFileFormatError(f"block {header.magic!r} at {offset}: checksum mismatch")


def _decompress(raw: bytes, expected: int) -> bytes:
    """The gzip members of a block, inflated to at most `expected` bytes (the header's uncompressed size) plus one:
    a damaged block must not inflate without bound."""
    out = bytearray()
    while raw:
        d = zlib.decompressobj(zlib.MAX_WBITS | 16)
        out += d.decompress(raw, expected + 1 - len(out))
        if len(out) > expected:
            raise HFileFormatError(f"block inflates past its uncompressed size {expected}")
        if not d.eof:
            raise HFileFormatError("truncated gzip member in block")
        raw = d.unused_data
    return bytes(out)


def _cells(payload: bytes) -> list[tuple[bytes, bytes]]:
    out = []
    pos = 0
    while pos < len(payload):
        key_len, value_len = struct.unpack_from(">ii", payload, pos)
        pos += 8
        if key_len < 0 or value_len < 0 or pos + key_len + value_len > len(payload):
            raise HFileFormatError(f"cell at {pos - 8} runs past its block")
        key = payload[pos : pos + key_len]
        value = payload[pos + key_len : pos + key_len + value_len]
        pos += key_len + value_len
        _, pos = read_vlong(payload, pos)  # memstore timestamp (KEY_VALUE_VERSION 1)
        out.append((key, value))
    return out


def kv_row(key: bytes) -> bytes:
    """The row of a KeyValue key (`int16 rowLen | row | ...`)."""
    (row_len,) = struct.unpack_from(">H", key, 0)
    if 2 + row_len > len(key):
        raise HFileFormatError(f"cell key of {len(key)} bytes names a row of {row_len}")
    return key[2 : 2 + row_len]


def _check_sorted(cells: list[tuple[bytes, bytes]]) -> None:
    for (a, _), (b, _) in itertools.pairwise(cells):
        if a >= b:
            raise HFileFormatError(f"cells out of order or repeated: {a[:64]!r} then {b[:64]!r}")


def _index_entries(payload: bytes, count: int) -> list[IndexEntry]:
    out = []
    pos = 0
    for _ in range(count):
        offset, size = struct.unpack_from(">qi", payload, pos)
        key_len, pos = read_vlong(payload, pos + 12)
        out.append(IndexEntry(offset, size, payload[pos : pos + key_len]))
        pos += key_len
    return out


def _file_info(payload: bytes) -> dict[bytes, bytes]:
    if payload[:4] != PBUF_MAGIC:
        raise HFileFormatError("file info does not start with PBUF")
    length, pos = read_varint(payload, 4)
    out: dict[bytes, bytes] = {}
    message = payload[pos : pos + length]
    for number, value in _proto_pairs(message):
        if number == 1 and isinstance(value, bytes):
            pair = _proto_fields(value)
            first, second = pair.get(1, b""), pair.get(2, b"")
            if isinstance(first, bytes) and isinstance(second, bytes):
                out[first] = second
    return out


# ---- small codecs: protobuf varints and fields, Hadoop's variable-length longs


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise HFileFormatError("varint runs past the end")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise HFileFormatError("varint longer than 10 bytes")


def _proto_pairs(message: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(message):
        tag, pos = read_varint(message, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = read_varint(message, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = read_varint(message, pos)
            out.append((number, message[pos : pos + length]))
            pos += length
        elif wire == 1:
            out.append((number, struct.unpack_from("<Q", message, pos)[0]))
            pos += 8
        elif wire == 5:
            out.append((number, struct.unpack_from("<I", message, pos)[0]))
            pos += 4
        else:
            raise HFileFormatError(f"protobuf wire type {wire}")
    return out


def _proto_fields(message: bytes) -> dict[int, int | bytes]:
    return dict(_proto_pairs(message))


def read_vlong(data: bytes, pos: int) -> tuple[int, int]:
    """Hadoop's WritableUtils.readVLong."""
    first = struct.unpack_from(">b", data, pos)[0]
    if first >= -112:
        return first, pos + 1
    negative = first < -120
    size = (-119 - first) if negative else (-111 - first)
    if pos + size > len(data):
        raise HFileFormatError("vlong runs past the end")
    value = int.from_bytes(data[pos + 1 : pos + size], "big")
    return (~value if negative else value), pos + size
