"""Log block model and the byte framing shared by the reader and the writer.

One log file is a sequence of blocks, big-endian:

    "#HUDI#"            6 bytes magic
    blockSize           int64: bytes after this field up to and including the trailing int64
    logFormatVersion    int32 (1)
    blockType           int32 (BlockType)
    header              int32 count, then count x (int32 key, int32 length, UTF-8 bytes)
    contentLength       int64
    content             contentLength bytes
    footer              same encoding as the header
    totalBlockLength    int64 = blockSize + 6
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tableservice.errors import CorruptFileError

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1
#: Version written in the first int32 of Avro data and delete block content.
BLOCK_CONTENT_VERSION = 3
#: Bytes between the magic and the header: blockSize, logFormatVersion, blockType.
FIXED_PREFIX = 6 + 8 + 4 + 4

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class BlockType(enum.IntEnum):
    """Hudi's HoodieLogBlockType; serialised as the ordinal."""

    COMMAND = 0
    DELETE = 1
    CORRUPT = 2
    AVRO_DATA = 3
    HFILE_DATA = 4
    PARQUET_DATA = 5
    CDC_DATA = 6


class HeaderKey(enum.IntEnum):
    """Hudi's HeaderMetadataType; serialised as the ordinal."""

    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6
    IS_PARTIAL = 7
    BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS = 8


#: COMMAND_BLOCK_TYPE value of a rollback command block.
ROLLBACK_COMMAND = "0"

Header = Mapping[HeaderKey, str]


@dataclass(frozen=True)
class LogBlock:
    """One well-formed block of a log file.

    `content` holds the content bytes when the reader kept them (small blocks); otherwise it is None and
    `content_offset`/`content_length` locate them in the file (read with `read_block_content`).
    `offset` is where the block's magic starts; `size` counts every byte of the block, magic included.
    """

    block_type: BlockType
    header: dict[HeaderKey, str]
    footer: dict[HeaderKey, str]
    location: str
    offset: int
    size: int
    content_offset: int
    content_length: int
    content: bytes | None = field(default=None, repr=False)
    format_version: int = LOG_FORMAT_VERSION

    @property
    def instant_time(self) -> str | None:
        return self.header.get(HeaderKey.INSTANT_TIME)

    @property
    def target_instant_time(self) -> str | None:
        return self.header.get(HeaderKey.TARGET_INSTANT_TIME)

    @property
    def schema(self) -> str | None:
        """The SCHEMA header: Avro JSON text of the records' writer schema."""
        return self.header.get(HeaderKey.SCHEMA)

    @property
    def avro_schema(self) -> dict[str, Any] | None:
        text = self.schema
        if text is None:
            return None
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise CorruptFileError(
                f"SCHEMA header of the block at offset {self.offset} is not JSON: {e}", path=self.location
            ) from e
        return value if isinstance(value, dict) else None

    @property
    def is_rollback_command(self) -> bool:
        return (
            self.block_type == BlockType.COMMAND and self.header.get(HeaderKey.COMMAND_BLOCK_TYPE) == ROLLBACK_COMMAND
        )

    @property
    def is_data_block(self) -> bool:
        return self.block_type in (
            BlockType.AVRO_DATA,
            BlockType.HFILE_DATA,
            BlockType.PARQUET_DATA,
            BlockType.CDC_DATA,
        )


@dataclass(frozen=True)
class CorruptBlock:
    """A region of a log file that is not a readable block; readers skip it.

    It starts where a block (its magic) was expected and runs up to the next `#HUDI#` magic or the end of the
    file. `reason` says why, e.g. "block size runs past end of file" or "unknown block type 7".
    """

    location: str
    offset: int
    length: int
    reason: str = ""


# --- header encoding ---------------------------------------------------------------------------


def encode_metadata(meta: Header) -> bytes:
    """Header or footer bytes: int32 count, then (int32 key, int32 length, UTF-8 value) in key order."""
    parts = [_I32.pack(len(meta))]
    for key in sorted(meta):
        raw = meta[key].encode("utf-8")
        parts.append(_I32.pack(int(key)))
        parts.append(_I32.pack(len(raw)))
        parts.append(raw)
    return b"".join(parts)


class MetadataError(ValueError):
    """Header/footer bytes do not decode (internal: the reader turns it into a CorruptBlock)."""


def decode_metadata(buf: bytes, pos: int, end: int) -> tuple[dict[HeaderKey, str], int]:
    """Decode a header or footer from `buf[pos:end]`; returns it and the position after it."""
    if pos + 4 > end:
        raise MetadataError("header count runs past the block")
    (count,) = _I32.unpack_from(buf, pos)
    pos += 4
    if count < 0 or count > (end - pos) // 8:
        raise MetadataError(f"invalid header entry count {count}")
    out: dict[HeaderKey, str] = {}
    for _ in range(count):
        if pos + 8 > end:
            raise MetadataError("header entry runs past the block")
        key, length = struct.unpack_from(">ii", buf, pos)
        pos += 8
        if length < 0 or pos + length > end:
            raise MetadataError(f"header value length {length} runs past the block")
        try:
            hkey = HeaderKey(key)
        except ValueError as e:
            raise MetadataError(f"unknown header key {key}") from e
        # Java decodes with `new String(bytes)`: invalid UTF-8 becomes replacement characters.
        out[hkey] = bytes(buf[pos : pos + length]).decode("utf-8", errors="replace")
        pos += length
    return out, pos


def frame_block(block_type: BlockType, header: Header, content: bytes, footer: Header | None = None) -> bytes:
    """The full bytes of one block, magic included."""
    head = encode_metadata(header)
    foot = encode_metadata(footer or {})
    block_size = 4 + 4 + len(head) + 8 + len(content) + len(foot) + 8
    return b"".join(
        (
            MAGIC,
            _I64.pack(block_size),
            _I32.pack(LOG_FORMAT_VERSION),
            _I32.pack(int(block_type)),
            head,
            _I64.pack(len(content)),
            content,
            foot,
            _I64.pack(block_size + len(MAGIC)),
        )
    )


def normalise_header(header: Mapping[HeaderKey, str] | Mapping[int, str] | None) -> dict[HeaderKey, str]:
    """Header keys as HeaderKey and values as str."""
    out: dict[HeaderKey, str] = {}
    for k, v in (header or {}).items():
        out[HeaderKey(k)] = str(v)
    return out
