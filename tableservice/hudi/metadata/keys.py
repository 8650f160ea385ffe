"""Metadata-table keys, file group ids and routing (HUDI-MDT-NOTES §2, §3.2).

Keys of the stats partitions are Base64 text of hashes: `X` = XXHash64 of the UTF-8 text with seed
0xFFFFFFFFDABADABA as 8 big-endian bytes, `MD5` of the file name, standard Base64 with padding. A record lives
in file group `|String.hashCode(key)| mod n` of its partition, file groups taken in file-id order.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from enum import StrEnum

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

XXHASH_SEED = 0xFFFFFFFFDABADABA
NON_PARTITIONED = "."
ALL_PARTITIONS_KEY = "__all_partitions__"


class MetadataPartition(StrEnum):
    """The metadata partitions the daemon writes and reads (secondary and expression indexes are prefixes)."""

    FILES = "files"
    COLUMN_STATS = "column_stats"
    BLOOM_FILTERS = "bloom_filters"
    RECORD_INDEX = "record_index"
    PARTITION_STATS = "partition_stats"


SECONDARY_INDEX_PREFIX = "secondary_index_"
EXPRESSION_INDEX_PREFIX = "expr_index_"

_FILE_ID_PREFIX = {
    MetadataPartition.FILES.value: "files-",
    MetadataPartition.COLUMN_STATS.value: "col-stats-",
    MetadataPartition.BLOOM_FILTERS.value: "bloom-filters-",
    MetadataPartition.RECORD_INDEX.value: "record-index-",
    MetadataPartition.PARTITION_STATS.value: "partition-stats-",
}


def file_id_prefix(partition: str) -> str:
    """`files-`, `col-stats-`, ..., `secondary-index-<name with - for _>-`."""
    if partition in _FILE_ID_PREFIX:
        return _FILE_ID_PREFIX[partition]
    for prefix in (SECONDARY_INDEX_PREFIX, EXPRESSION_INDEX_PREFIX):
        if partition.startswith(prefix):
            return partition.replace("_", "-") + "-"
    raise ValueError(f"unknown metadata partition {partition!r}")


def file_group_id(partition: str, index: int) -> str:
    """The file id of file group `index` of a metadata partition, e.g. `col-stats-0001-0`."""
    return f"{file_id_prefix(partition)}{index:04d}-0"


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode()`: over UTF-16 code units, 32-bit signed wrap-around."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def file_group_indexes(
    keys: Sequence[str] | pa.Array, file_groups: int, *, secondary_v2: bool = False
) -> npt.NDArray[np.int32]:
    """`file_group_index` of many keys at once: Java's hash computed column-wise over the keys' bytes when they are
    ASCII (one UTF-16 code unit per byte), key by key otherwise."""
    if file_groups <= 0:
        raise ValueError("a metadata partition has at least one file group")
    array = keys if isinstance(keys, pa.Array) else pa.array(keys, pa.string())
    if secondary_v2 or not len(array) or not pc.all(pc.string_is_ascii(array)).as_py():
        return np.array(
            [file_group_index(k, file_groups, secondary_v2=secondary_v2) for k in array.to_pylist()], dtype=np.int32
        )
    hashes = _java_hashes_ascii(array)
    return (np.abs(hashes.view(np.int32).astype(np.int64)) % file_groups).astype(np.int32)


def _java_hashes_ascii(array: pa.Array) -> npt.NDArray[np.uint32]:
    """Java's `String.hashCode` of ASCII strings as unsigned 32-bit values. The keys are right-aligned in a zero
    matrix: leading zeros leave Horner's sum at zero, so one pass over the columns hashes keys of any length."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array) + 1, offset=array.offset * 4)
    buffer = array.buffers()[2]
    data = np.frombuffer(buffer, dtype=np.uint8) if buffer is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets).astype(np.int64)
    width = int(lengths.max())
    n = len(array)
    if width == 0:
        return np.zeros(n, dtype=np.uint32)
    chars = data[offsets[0] : offsets[-1]]
    if int(lengths.min()) == width:
        matrix = chars.reshape(n, width)
    else:
        matrix = np.zeros((n, width), dtype=np.uint8)
        rows = np.repeat(np.arange(n), lengths)
        cols = np.arange(len(chars)) - np.repeat(offsets[:-1].astype(np.int64) - offsets[0], lengths)
        matrix[rows, cols + np.repeat(width - lengths, lengths)] = chars
    h = np.zeros(n, dtype=np.uint32)
    for column in range(width):
        h *= np.uint32(31)
        h += matrix[:, column]
    return h


def file_group_index(key: str, file_groups: int, *, secondary_v2: bool = False) -> int:
    """The file group (0..n-1) a key routes to; secondary index V2 hashes only `<escaped value>$`."""
    if file_groups <= 0:
        raise ValueError("a metadata partition has at least one file group")
    hashed = key
    if secondary_v2:
        end = _first_unescaped_separator(key)
        hashed = key if end < 0 else key[: end + 1]
    return abs(java_string_hash(hashed)) % file_groups


def routes_by_value(partition: str, index_version: str | None) -> bool:
    """True for secondary index partitions of version V2 (route by the secondary value only)."""
    return partition.startswith(SECONDARY_INDEX_PREFIX) and (index_version or "V1") != "V1"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _xx(text: str) -> bytes:
    return xxhash.xxh64_intdigest(text.encode("utf-8"), seed=XXHASH_SEED).to_bytes(8, "big")


def _md5(text: str) -> bytes:
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).digest()


def partition_key(partition: str) -> str:
    """The `files` key of a data partition (`.` for a non-partitioned table)."""
    return partition or NON_PARTITIONED


def column_stats_key(column: str, partition: str, file_name: str) -> str:
    return _b64(_xx(column)) + _b64(_xx(partition_key(partition))) + _b64(_md5(file_name))


def partition_stats_key(column: str, partition: str) -> str:
    return _b64(_xx(column)) + _b64(_xx(partition_key(partition)))


def bloom_filter_key(partition: str, file_name: str) -> str:
    return _b64(_xx(partition_key(partition))) + _b64(_md5(file_name))


_ESCAPED = ("\\", "$", "\x00")


def is_secondary_index(partition: str) -> bool:
    return partition.startswith(SECONDARY_INDEX_PREFIX)


def escape_secondary(text: str | None) -> str:
    """Escape a secondary-key part: a backslash before `\\`, `$` and NUL; a null value is NUL itself."""
    if text is None:
        return "\x00"
    return "".join("\\" + c if c in _ESCAPED else c for c in text)


def secondary_index_key(value: str | None, record_key: str) -> str:
    return f"{escape_secondary(value)}${escape_secondary(record_key)}"


def secondary_record_key(entry: str) -> str:
    """The record key of a secondary-index entry `<escaped value>$<escaped record key>`."""
    at = _first_unescaped_separator(entry)
    return _unescape(entry[at + 1 :] if at >= 0 else entry)


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            i += 1
        out.append(text[i])
        i += 1
    return "".join(out)


def _first_unescaped_separator(key: str) -> int:
    i = 0
    while i < len(key):
        if key[i] == "\\":
            i += 2
            continue
        if key[i] == "$":
            return i
        i += 1
    return -1
