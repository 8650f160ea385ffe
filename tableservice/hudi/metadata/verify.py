"""Is the metadata table in step? Rebuild what it should hold from storage and compare (HUDI-MDT-NOTES §12).

- `files`: per partition, the files of completed instants found on storage (every slice of every file group, the
  replaced ones included until a clean deletes them) with their sizes, against the live entries of the `files`
  partition; `__all_partitions__` must name every partition holding committed files.
- `column_stats`: per listed Parquet base file and indexed column, the stored payload equals a recomputation from
  the file; no record for a file no longer listed. (Log files may have records; they are not recomputed.)
- `record_index`: exactly the keys of the latest slices of the live file groups (read from storage, not through
  the metadata table), each pointing at its file group.
- `partition_stats`: per partition and indexed column, a record whose range holds the range of the base files of
  the partition's latest file slices (what a query reads; Hudi recomputes or widens these stats on commits, so
  containment is required, not equality).
- secondary indexes: exactly one entry per record of the latest file slices (its value and key).
- `bloom_filters`: a live record per listed base file whose footer holds a bloom filter, with that filter.
Each problem is one `Difference` naming the metadata partition, the data partition, the key or file and what
differs. Table versions 6, 8 and 9.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tableservice.hudi.metadata.column_stats import ColumnStatsIndex
from tableservice.hudi.metadata.keys import (
    ALL_PARTITIONS_KEY,
    NON_PARTITIONED,
    MetadataPartition,
    bloom_filter_key,
    column_stats_key,
    is_secondary_index,
    partition_key,
    partition_stats_key,
    secondary_index_key,
)
from tableservice.hudi.metadata.listing import committed_files
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.record_index import key_locations, key_values
from tableservice.hudi.metadata.record_index import location as record_location
from tableservice.hudi.metadata.records import combine_stats, live_files
from tableservice.hudi.metadata.secondary_index import secondary_column
from tableservice.hudi.metadata.update import NewFile, base_file_bloom_filter, file_stats, stats_index
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline

FILES = MetadataPartition.FILES.value
COLUMN_STATS = MetadataPartition.COLUMN_STATS.value
RECORD_INDEX = MetadataPartition.RECORD_INDEX.value
PARTITION_STATS = MetadataPartition.PARTITION_STATS.value
BLOOM_FILTERS = MetadataPartition.BLOOM_FILTERS.value
LIMIT = 200  # differences reported per metadata partition


@dataclass(frozen=True)
class Difference:
    metadata_partition: str
    partition: str | None
    item: str
    problem: str

    def __str__(self) -> str:
        where = f"{self.partition or NON_PARTITIONED}: " if self.partition is not None else ""
        return f"[{self.metadata_partition}] {where}{self.item}: {self.problem}"


def verify_metadata_table(table: HudiTable, timeline: Timeline | None = None) -> list[Difference]:
    """Every difference between the metadata table and what storage says it should hold (empty: in step)."""
    tl = timeline if timeline is not None else table.timeline()
    mdt = MetadataTable.open(table, tl)
    if mdt is None:
        return []
    expected = committed_files(table, tl)
    out: list[Difference] = []
    if FILES in mdt.partitions:
        out += _limit(_files(mdt, expected))
    if COLUMN_STATS in mdt.partitions or PARTITION_STATS in mdt.partitions:
        index = stats_index(mdt)
        recomputed = _recompute(mdt, expected, index) if index is not None else []
        if COLUMN_STATS in mdt.partitions and index is not None:
            out += _limit(_column_stats(mdt, expected, index, recomputed))
        if PARTITION_STATS in mdt.partitions:
            view = table.file_system_view(timeline=tl, listing=table.list_storage_files())
            latest = {(s.partition_path, s.base_file.file_name) for s in view.latest_slices() if s.base_file}
            out += _limit(_partition_stats(mdt, [r for r in recomputed if (r[0].partition, r[0].name) in latest]))
    if BLOOM_FILTERS in mdt.partitions:
        out += _limit(_bloom_filters(mdt, expected))
    if RECORD_INDEX in mdt.partitions:
        out += _limit(_record_index(mdt, table))
    for partition in mdt.partitions:
        if is_secondary_index(partition):
            out += _limit(_secondary_index(mdt, table, partition))
    return out


def _secondary_index(mdt: MetadataTable, table: HudiTable, partition: str) -> Iterator[Difference]:
    """Exactly one entry per record of the latest file slices: `<escaped value>$<escaped key>`."""
    column = secondary_column(table, partition)
    wanted = {secondary_index_key(value, key) for key, value in key_values(table, column)}
    stored = set(mdt.read_partition(partition))
    for entry in sorted(wanted - stored):
        yield Difference(partition, None, entry, "no entry for this record")
    for entry in sorted(stored - wanted):
        yield Difference(partition, None, entry, "entry for no record of the table")


def _limit(diffs: Iterator[Difference]) -> list[Difference]:
    out: list[Difference] = []
    for d in diffs:
        if len(out) == LIMIT:
            out.append(Difference(d.metadata_partition, "", "...", f"more than {LIMIT} differences"))
            break
        out.append(d)
    return out


def _files(mdt: MetadataTable, expected: dict[str, dict[str, int]]) -> Iterator[Difference]:
    records = mdt.read_partition(FILES)
    listed_partitions = {"" if p == NON_PARTITIONED else p for p in live_files(records.get(ALL_PARTITIONS_KEY))}
    for partition in sorted(expected):
        if expected[partition] and partition not in listed_partitions:
            yield Difference(FILES, partition, ALL_PARTITIONS_KEY, "partition holds committed files but is not listed")
    for partition in sorted(set(expected) | listed_partitions):
        want = expected.get(partition, {})
        have = live_files(records.get(partition_key(partition)))
        for name in sorted(set(want) | set(have)):
            if name not in have:
                yield Difference(FILES, partition, name, f"committed file ({want[name]} bytes) is not listed")
            elif name not in want:
                yield Difference(FILES, partition, name, "listed, but not a committed file on storage")
            elif want[name] != have[name]:
                yield Difference(FILES, partition, name, f"listed with {have[name]} bytes, storage has {want[name]}")


Recomputed = list[tuple[NewFile, dict[str, dict[str, Any]]]]


def _recompute(mdt: MetadataTable, expected: dict[str, dict[str, int]], index: ColumnStatsIndex) -> Recomputed:
    """The column stats of every committed base file, recomputed from the file: (file, column -> payload)."""
    base_files = [
        NewFile(p, name, size)
        for p, files in sorted(expected.items())
        for name, size in sorted(files.items())
        if name.endswith(".parquet")
    ]
    payloads = file_stats(mdt.data, base_files, index)
    # none for a file without rows or without the column
    return [
        (f, {p["columnName"]: p for p in file_payloads}) for f, file_payloads in zip(base_files, payloads, strict=True)
    ]


def _column_stats(
    mdt: MetadataTable, expected: dict[str, dict[str, int]], index: ColumnStatsIndex, recomputed: Recomputed
) -> Iterator[Difference]:
    stored = mdt.read_partition(COLUMN_STATS)
    wanted_keys: set[str] = set()
    # a log file holding only deletes or rollback blocks may have records: their presence is not required
    wanted_keys.update(
        column_stats_key(c, p, name)
        for p, files in expected.items()
        for name in files
        if name.startswith(".")
        for c in index.columns
    )
    for f, by_column in recomputed:
        for column in index.columns:
            want = by_column.get(column)
            if want is None:
                continue
            key = column_stats_key(column, f.partition, f.name)
            wanted_keys.add(key)
            record = stored.get(key)
            have = record.get("ColumnStatsMetadata") if record else None
            if have is None:
                yield Difference(COLUMN_STATS, f.partition, f"{f.name} {column}", "no column stats record")
            elif _normal(have) != _normal(want):
                yield Difference(
                    COLUMN_STATS, f.partition, f"{f.name} {column}", f"stored {_short(have)}, recomputed {_short(want)}"
                )
    for key, record in sorted(stored.items()):
        if key not in wanted_keys:
            payload = record.get("ColumnStatsMetadata") or {}
            yield Difference(
                COLUMN_STATS,
                None,
                f"{payload.get('fileName')} {payload.get('columnName')}",
                "record for a file no longer listed",
            )


def _partition_stats(mdt: MetadataTable, recomputed: Recomputed) -> Iterator[Difference]:
    stored = mdt.read_partition(PARTITION_STATS)
    combined: dict[tuple[str, str], dict[str, Any]] = {}
    for f, by_column in recomputed:
        for column, payload in by_column.items():
            key = (f.partition, column)
            combined[key] = combine_stats(combined[key], payload) if key in combined else payload
    for (partition, column), want in sorted(combined.items()):
        record = stored.get(partition_stats_key(column, partition))
        have = record.get("ColumnStatsMetadata") if record else None
        if have is None:
            yield Difference(PARTITION_STATS, partition, column, "no partition stats record")
            continue
        widened = combine_stats(want, have)
        if (widened["minValue"], widened["maxValue"]) != (have["minValue"], have["maxValue"]):
            yield Difference(
                PARTITION_STATS,
                partition,
                column,
                f"stored range {have['minValue']!r}..{have['maxValue']!r} does not hold the files' "
                f"{want['minValue']!r}..{want['maxValue']!r}",
            )


def _normal(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k != "valueType" or v is not None}


def _short(payload: dict[str, Any]) -> str:
    keys = ("minValue", "maxValue", "valueCount", "nullCount", "totalSize", "totalUncompressedSize")
    return ", ".join(f"{k}={payload.get(k)!r}" for k in keys)


def _bloom_filters(mdt: MetadataTable, expected: dict[str, dict[str, int]]) -> Iterator[Difference]:
    stored = mdt.read_partition(BLOOM_FILTERS)
    wanted = set()
    for partition, files in sorted(expected.items()):
        for name in sorted(files):
            if name.startswith("."):
                continue
            footer = base_file_bloom_filter(mdt.data, NewFile(partition, name, files[name]))
            if footer is None:
                continue  # a file written without a bloom filter has no record
            key = bloom_filter_key(partition, name)
            wanted.add(key)
            if key not in stored:
                yield Difference(BLOOM_FILTERS, partition, name, "no bloom filter record")
                continue
            record = stored[key]["BloomFilterMetadata"]
            if (record["type"], record["bloomFilter"]) != footer:
                yield Difference(BLOOM_FILTERS, partition, name, "bloom filter differs from the file's footer")
    for key in sorted(set(stored) - wanted):
        yield Difference(BLOOM_FILTERS, None, key, "record for a file no longer listed")


def _record_index(mdt: MetadataTable, table: HudiTable) -> Iterator[Difference]:
    stored = mdt.read_partition(RECORD_INDEX)
    wanted = {key: (partition, file_id) for key, partition, file_id in key_locations(table)}
    for key in sorted(set(wanted) | set(stored)):
        record = stored.get(key)
        if record is None:
            yield Difference(RECORD_INDEX, wanted[key][0], key, "key of the table is not indexed")
            continue
        if key not in wanted:
            yield Difference(RECORD_INDEX, None, key, "indexed key is not in the table")
            continue
        partition, file_id = wanted[key]
        have = record.get("recordIndexMetadata") or {}
        want = record_location(partition, file_id, 0)
        got = {k: have.get(k) for k in ("partitionName", "fileIdHighBits", "fileIdLowBits", "fileIndex", "fileId")}
        if got != {k: want[k] for k in got}:
            yield Difference(RECORD_INDEX, partition, key, f"points at {got}, the record is in {file_id}")
