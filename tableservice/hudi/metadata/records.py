"""`HoodieMetadataRecord`s: building them, merging several records of one key, and what a live record says.

Records are the Avro dicts fastavro reads and writes, with union branches of several records given as
`(full name, value)` pairs (all wrappers have one field `value`, so the name is what tells an int from a date).
Merging follows HUDI-MDT-NOTES §3.4, oldest record first; `None` stands for a key removed by a delete block.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import IntEnum
from typing import Any

from tableservice.hudi.metadata.column_stats import ValueType
from tableservice.hudi.metadata.keys import ALL_PARTITIONS_KEY, MetadataPartition

RawRecord = dict[str, Any] | None
Merge = Callable[[RawRecord, RawRecord], RawRecord]


class RecordType(IntEnum):
    PARTITION_LIST = 1
    FILE_LIST = 2
    COLUMN_STATS = 3
    BLOOM_FILTER = 4
    RECORD_INDEX = 5
    PARTITION_STATS = 6
    SECONDARY_INDEX = 7


_PAYLOAD_FIELDS = (
    "filesystemMetadata",
    "BloomFilterMetadata",
    "ColumnStatsMetadata",
    "recordIndexMetadata",
    "SecondaryIndexMetadata",
)


def _record(record_type: RecordType, **payload: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "_hoodie_commit_time": None,
        "_hoodie_commit_seqno": None,
        "_hoodie_record_key": None,
        "_hoodie_partition_path": None,
        "_hoodie_file_name": None,
        "key": "",
        "type": int(record_type),
    }
    for name in _PAYLOAD_FIELDS:
        out[name] = payload.get(name)
    return out


def files_record(entries: Mapping[str, tuple[int, bool]], *, partition_list: bool = False) -> dict[str, Any]:
    """A `files` record: file (or partition) name -> (size, isDeleted)."""
    kind = RecordType.PARTITION_LIST if partition_list else RecordType.FILE_LIST
    fs = {name: {"size": size, "isDeleted": deleted} for name, (size, deleted) in sorted(entries.items())}
    return _record(kind, filesystemMetadata=fs)


def column_stats_record(stats: Mapping[str, Any], *, partition_stats: bool = False) -> dict[str, Any]:
    kind = RecordType.PARTITION_STATS if partition_stats else RecordType.COLUMN_STATS
    return _record(kind, ColumnStatsMetadata=dict(stats))


def bloom_filter_record(filter_type: str, instant: str, serialized: bytes, *, deleted: bool) -> dict[str, Any]:
    bloom = {"type": filter_type, "timestamp": instant, "bloomFilter": serialized, "isDeleted": deleted}
    return _record(RecordType.BLOOM_FILTER, BloomFilterMetadata=bloom)


def secondary_index_record(*, deleted: bool = False) -> dict[str, Any]:
    return _record(RecordType.SECONDARY_INDEX, SecondaryIndexMetadata={"isDeleted": deleted})


def record_index_record(location: Mapping[str, Any]) -> dict[str, Any]:
    return _record(RecordType.RECORD_INDEX, recordIndexMetadata=dict(location))


# ---- merging


def merge_files(older: RawRecord, newer: RawRecord) -> RawRecord:
    """Union of the file maps: a newer tombstone removes a present file, is kept when the file is absent."""
    if newer is None or older is None:
        return newer
    combined: dict[str, dict[str, Any]] = dict(older.get("filesystemMetadata") or {})
    for name, info in (newer.get("filesystemMetadata") or {}).items():
        if info["isDeleted"]:
            if name in combined and not combined[name]["isDeleted"]:
                del combined[name]
            else:
                combined[name] = info
        elif name in combined:
            combined[name] = {"size": max(combined[name]["size"], info["size"]), "isDeleted": False}
        else:
            combined[name] = info
    return {**newer, "filesystemMetadata": combined}


def merge_stats(older: RawRecord, newer: RawRecord) -> RawRecord:
    """Column and partition stats: a tombstone on either side lets the newer record win, else widen the range."""
    if newer is None or older is None:
        return newer
    a, b = older["ColumnStatsMetadata"], newer["ColumnStatsMetadata"]
    if a is None or b is None or a["isDeleted"] or b["isDeleted"]:
        return newer
    return {**newer, "ColumnStatsMetadata": combine_stats(a, b)}


def combine_stats(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two `ColumnStatsMetadata` payloads of one column as one: the wider range, counts and sizes added; the other
    fields from `b`."""
    merged = dict(b)
    order = _unscaled if ValueType.DECIMAL in (_type_ordinal(a), _type_ordinal(b)) else None
    merged["minValue"] = _bound(a["minValue"], b["minValue"], min, order)
    merged["maxValue"] = _bound(a["maxValue"], b["maxValue"], max, order)
    for count in ("valueCount", "nullCount", "totalSize", "totalUncompressedSize"):
        merged[count] = _add(a.get(count), b.get(count))
    return merged


def merge_latest(older: RawRecord, newer: RawRecord) -> RawRecord:
    """Bloom filters, record index, secondary index: the newest record wins."""
    return newer


def merge_for(partition: str) -> Merge:
    if partition == MetadataPartition.FILES.value:
        return merge_files
    if partition in (MetadataPartition.COLUMN_STATS.value, MetadataPartition.PARTITION_STATS.value):
        return merge_stats
    return merge_latest


def is_live(record: RawRecord) -> bool:
    """Whether a merged record is still present for readers (tombstones are not)."""
    if record is None:
        return False
    for name in ("BloomFilterMetadata", "ColumnStatsMetadata", "SecondaryIndexMetadata"):
        payload = record.get(name)
        if payload is not None and payload.get("isDeleted"):
            return False
    return True


def live_files(record: RawRecord) -> dict[str, int]:
    """The non-deleted entries of a `files` record: name -> size."""
    if record is None:
        return {}
    fs = record.get("filesystemMetadata") or {}
    return {name: info["size"] for name, info in fs.items() if not info["isDeleted"]}


def wrapped(value: Any) -> Any:
    """The plain value of a stats bound: `(name, {"value": v})` -> v."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return value[1]["value"]
    if isinstance(value, dict):
        return value.get("value")
    return value


def _type_ordinal(payload: Mapping[str, Any]) -> int | None:
    value_type = payload.get("valueType")
    return value_type.get("typeOrdinal") if isinstance(value_type, Mapping) else None


def _unscaled(value: Any) -> Any:
    """A decimal bound of index version V2 (a `BytesWrapper` of the unscaled two's-complement value) as an int."""
    return int.from_bytes(value, "big", signed=True) if isinstance(value, bytes) else value


def _bound(a: Any, b: Any, pick: Callable[[Any, Any], Any], order: Callable[[Any], Any] | None = None) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    va, vb = wrapped(a), wrapped(b)
    if order is not None:
        va, vb = order(va), order(vb)
    if va == vb:
        return b
    try:
        return a if pick(va, vb) == va else b
    except TypeError:  # bounds of different types: the newer record's bound stands
        return b


def _add(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


__all__ = [
    "ALL_PARTITIONS_KEY",
    "Merge",
    "RawRecord",
    "RecordType",
    "bloom_filter_record",
    "column_stats_record",
    "combine_stats",
    "files_record",
    "is_live",
    "live_files",
    "merge_files",
    "merge_for",
    "merge_latest",
    "merge_stats",
    "record_index_record",
    "wrapped",
]
