"""Keeping the metadata table in step with one completed data action (HUDI-MDT-NOTES §6).

Called by the commit path under the table lock, after the action's files are written and before its instant
completes. The metadata table gets, at the data instant's own time:
- compaction and clustering (and other commits that write files): a delta commit listing the new files in
  `files`, their column stats and their partitions' stats, bloom filters of new base files, and for clustering
  every moved key re-pointed in the record index;
- clean: a delta commit with tombstones for the deleted files (`files`, column stats, bloom filters);
- rollback of `x`: the metadata table's own rollback of `x` when it holds `x` (a writer that crashed between its
  metadata commit and its data commit), nothing otherwise. In table version 6 the rollback at `r` first writes a
  delta commit at `r` listing the log files the rollback leaves in data partitions (its command-block files and
  the failed attempt's own log files, which stay), then the metadata rollback runs at `<r>006`.
Only partitions listed in `hoodie.table.metadata.partitions` or `...partitions.inflight` receive records.
"""

from __future__ import annotations

import logging
import posixpath
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from tableservice.errors import TableServiceError, UnsupportedTableError
from tableservice.hudi.file_group.base_file_reader import read_base_file_footer
from tableservice.hudi.file_group.filenames import parse_base_file_name
from tableservice.hudi.file_group.log_format import iter_log_records
from tableservice.hudi.metadata import column_stats as cs
from tableservice.hudi.metadata.delta_commit import MetadataRecord, write_delta_commit
from tableservice.hudi.metadata.instants import metadata_rollback_instant, uses_suffixes
from tableservice.hudi.metadata.keys import (
    ALL_PARTITIONS_KEY,
    EXPRESSION_INDEX_PREFIX,
    MetadataPartition,
    bloom_filter_key,
    column_stats_key,
    is_secondary_index,
    partition_key,
    partition_stats_key,
)
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.record_index import IndexUpdate, clustering_updates, replaced_keys, write_updates
from tableservice.hudi.metadata.records import (
    bloom_filter_record,
    column_stats_record,
    combine_stats,
    files_record,
)
from tableservice.hudi.metadata.rollback import rollback_metadata_instant
from tableservice.hudi.metadata.secondary_index import secondary_updates
from tableservice.hudi.models import (
    HoodieCleanMetadata,
    HoodieCommitMetadata,
    HoodieReplaceCommitMetadata,
    HoodieRollbackMetadata,
    HoodieWriteStat,
    TimelineContent,
    decode_clean_metadata,
)
from tableservice.hudi.table.fs_view import partition_location
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import read_schema
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import WRITE_ACTIONS, Action, Instant, instant_epoch_ms
from tableservice.storage import join
from tableservice.storage.requests import carry_context

log = logging.getLogger(__name__)

FILES = MetadataPartition.FILES.value
COLUMN_STATS = MetadataPartition.COLUMN_STATS.value
PARTITION_STATS = MetadataPartition.PARTITION_STATS.value
BLOOM_FILTERS = MetadataPartition.BLOOM_FILTERS.value
RECORD_INDEX = MetadataPartition.RECORD_INDEX.value
STATS_THREADS = 8


@dataclass(frozen=True)
class NewFile:
    partition: str
    name: str
    size: int

    @property
    def is_base_file(self) -> bool:
        return not self.name.startswith(".")


def sync_metadata_table(
    table: HudiTable, timeline: Timeline, instant: Instant, content: TimelineContent | None
) -> Instant | None:
    """Bring the metadata table in step with `instant`, which is about to complete with `content`; returns the
    metadata table's completed instant (None when nothing was written)."""
    mdt = MetadataTable.open(table, timeline)
    if mdt is None:
        if table.config.metadata_partitions_inflight:
            raise UnsupportedTableError(
                "metadata partitions are being built but none is complete; nothing can be committed beside it",
                table=table.label,
            )
        return None
    t = instant.requested_time
    _check_supported_partitions(mdt, instant, content)
    if isinstance(content, HoodieRollbackMetadata):
        version = mdt.mdt.config.version
        last = None
        if uses_suffixes(version):
            last = write_delta_commit(mdt, t, rollback_records(content))
            mdt = MetadataTable.open(table, timeline) or mdt
        for target in content.commits_rollback:
            last = rollback_metadata_instant(mdt, target, metadata_rollback_instant(version, t)) or last
        return last
    if isinstance(content, HoodieCleanMetadata):
        records = clean_records(mdt, content)
    elif isinstance(content, HoodieCommitMetadata):
        records = commit_records(mdt, instant, content)
    else:
        return None  # savepoints and the like change no file
    return write_delta_commit(mdt, t, records)


def _check_supported_partitions(mdt: MetadataTable, instant: Instant, content: TimelineContent | None) -> None:
    """Expression indexes get records from every action that writes files: they are not built yet, so such a
    commit is refused rather than leaving the partition out of step."""
    writes_files = isinstance(content, HoodieCommitMetadata)
    for partition in mdt.written_partitions:
        if partition.startswith(EXPRESSION_INDEX_PREFIX) and writes_files:
            raise UnsupportedTableError(
                f"metadata partition {partition} cannot be kept in step with {instant} yet; nothing is committed",
                table=mdt.data.name,
            )


def records_for(mdt: MetadataTable, instant: Instant, partitions: Collection[str]) -> list[MetadataRecord]:
    """What a completed data instant sends to `partitions` (an indexing action catching up with it)."""
    data = mdt.data
    if instant.action in WRITE_ACTIONS:
        return commit_records(mdt, instant, data.commit_metadata(instant), partitions)
    if instant.action is Action.CLEAN:
        path = data.active.path_of(instant)
        clean = decode_clean_metadata(data.storage.read_bytes(path), path=path)
        return clean_records(mdt, clean, partitions)
    if instant.action is Action.ROLLBACK and FILES in partitions and uses_suffixes(mdt.mdt.config.version):
        return rollback_records(data.rollback_metadata(instant))
    return []


def rollback_records(md: HoodieRollbackMetadata) -> list[MetadataRecord]:
    """Table version 6: the log files a data rollback leaves, per data partition that got command blocks (the
    command-block files and the failed attempt's log files, sizes merged by max, as Hudi 0.15 records them).
    Deleted base files need no record: the metadata rollback of the target removes what added them."""
    out = []
    for p, pm in sorted((md.partition_metadata or {}).items()):
        if not pm.rollback_log_files:
            continue
        sizes: dict[str, int] = {}
        for location, size in (*pm.rollback_log_files.items(), *(pm.log_files_from_failed_commit or {}).items()):
            name = posixpath.basename(location)
            sizes[name] = max(sizes.get(name, 0), int(size))
        partition = pm.partition_path if pm.partition_path is not None else p
        value = files_record({n: (size, False) for n, size in sizes.items()})
        out.append(MetadataRecord(FILES, partition_key(partition), value))
    return out


def _new_files(stats: Iterable[HoodieWriteStat]) -> list[NewFile]:
    out = []
    for s in stats:
        if not s.path:
            continue
        folder, name = posixpath.split(s.path)
        partition = s.partition_path if s.partition_path is not None else folder
        out.append(NewFile(partition, name, int(s.file_size_in_bytes or s.total_write_bytes or 0)))
    return out


def commit_records(
    mdt: MetadataTable, instant: Instant, md: HoodieCommitMetadata, partitions: Collection[str] | None = None
) -> list[MetadataRecord]:
    """Records for a commit that wrote files: compaction, clustering, or a writer's commit (for `partitions`, by
    default every partition commits write)."""
    written = set(mdt.written_partitions if partitions is None else partitions)
    stats = [s for group in (md.partition_to_write_stats or {}).values() for s in group if s.path]
    files = _new_files(stats)
    records: list[MetadataRecord] = []
    by_partition: dict[str, dict[str, tuple[int, bool]]] = defaultdict(dict)
    for f in files:
        by_partition[f.partition][f.name] = (f.size, False)
    if FILES in written:
        records.append(
            MetadataRecord(
                FILES,
                ALL_PARTITIONS_KEY,
                files_record({partition_key(p): (0, False) for p in by_partition}, partition_list=True),
            )
        )
        records.extend(MetadataRecord(FILES, partition_key(p), files_record(e)) for p, e in by_partition.items())
    if COLUMN_STATS in written or PARTITION_STATS in written:
        index = stats_index(mdt)
        if index is not None:
            records.extend(stats_records(written, files, file_stats(mdt.data, files, index)))
    base_files = [f for f in files if f.is_base_file]
    if BLOOM_FILTERS in written:
        for f in base_files:
            bloom = base_file_bloom_filter(mdt.data, f)
            if bloom is not None:
                kind, serialized = bloom
                records.append(
                    MetadataRecord(
                        BLOOM_FILTERS,
                        bloom_filter_key(f.partition, f.name),
                        bloom_filter_record(kind, instant.requested_time, serialized, deleted=False),
                    )
                )
    secondary = sorted(p for p in written if is_secondary_index(p))
    if RECORD_INDEX in written or secondary:
        updates = _index_updates(mdt, instant, md, stats, files)
        if RECORD_INDEX in written:
            records.extend(MetadataRecord(RECORD_INDEX, k, v) for k, v in updates)
        if secondary and not _moves_records_only(mdt, instant, md):
            written_files = [(f.partition, f.name) for f in files]
            records.extend(secondary_updates(mdt, secondary, updates, written_files))
    return records


def _moves_records_only(mdt: MetadataTable, instant: Instant, md: HoodieCommitMetadata) -> bool:
    """Compaction and clustering: records change files, not values (no secondary-index record)."""
    return instant.action is Action.COMPACTION or md.compacted or mdt.data.is_clustering(instant)


def _index_updates(
    mdt: MetadataTable,
    instant: Instant,
    md: HoodieCommitMetadata,
    stats: Sequence[HoodieWriteStat],
    files: Sequence[NewFile],
) -> list[IndexUpdate]:
    data = mdt.data
    if instant.action is Action.COMPACTION or md.compacted:
        return []
    millis = instant_epoch_ms(instant.requested_time, data.active.tz)
    if data.is_clustering(instant):
        return clustering_updates(data, [(f.partition, f.name) for f in files if f.is_base_file], millis)
    written = [(f.partition, f.name, s.prev_commit) for f, s in zip(files, stats, strict=True)]
    updates = write_updates(data, written, mdt.file_listing(), millis)
    if isinstance(md, HoodieReplaceCommitMetadata) and md.partition_to_replace_file_ids:
        kept = {key for key, value in updates if value is not None}
        gone = replaced_keys(data, mdt.data_timeline, md.partition_to_replace_file_ids) - kept
        updates += [(key, None) for key in sorted(gone)]
    return updates


def clean_records(
    mdt: MetadataTable, md: HoodieCleanMetadata, partitions: Collection[str] | None = None
) -> list[MetadataRecord]:
    """Tombstones for the files a clean deleted (and for partitions it deleted)."""
    written = set(mdt.written_partitions if partitions is None else partitions)
    records: list[MetadataRecord] = []
    deleted_partitions = []
    index = stats_index(mdt) if COLUMN_STATS in written else None
    for partition, pm in sorted(md.partition_metadata.items()):
        names = sorted({posixpath.basename(p) for p in pm.success_delete_files})
        if pm.is_partition_deleted:
            deleted_partitions.append(partition)
        if not names:
            continue
        if FILES in written:
            records.append(MetadataRecord(FILES, partition_key(partition), files_record({n: (0, True) for n in names})))
        if index is not None:
            for name in names:
                records.extend(
                    MetadataRecord(
                        COLUMN_STATS,
                        column_stats_key(c, partition, name),
                        column_stats_record(cs.tombstone(name, c, index.version)),
                    )
                    for c in index.columns
                )
        if BLOOM_FILTERS in written:
            for name in names:
                if parse_base_file_name(name) is not None:
                    records.append(
                        MetadataRecord(
                            BLOOM_FILTERS,
                            bloom_filter_key(partition, name),
                            bloom_filter_record("", md.start_clean_time, b"", deleted=True),
                        )
                    )
    if deleted_partitions and FILES in written:
        tombstones = {partition_key(p): (0, True) for p in deleted_partitions}
        records.append(MetadataRecord(FILES, ALL_PARTITIONS_KEY, files_record(tombstones, partition_list=True)))
    return records


def stats_records(
    written: Collection[str], files: Sequence[NewFile], payloads: Sequence[list[dict[str, Any]]]
) -> list[MetadataRecord]:
    """The column-stats records of `files` (their payloads in the same order), and one partition-stats record per
    touched partition and column: readers merge it into the partition's record, widening the range and adding
    the counts, as Hudi's writers do."""
    out: list[MetadataRecord] = []
    per_partition: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for f, file_payloads in zip(files, payloads, strict=True):
        for p in file_payloads:
            column = p["columnName"]
            if COLUMN_STATS in written:
                out.append(
                    MetadataRecord(COLUMN_STATS, column_stats_key(column, f.partition, f.name), column_stats_record(p))
                )
            merged = per_partition[f.partition]
            merged[column] = combine_stats(merged[column], p) if column in merged else dict(p)
    if PARTITION_STATS in written:
        for partition, columns in per_partition.items():
            for column, p in sorted(columns.items()):
                payload = {**p, "fileName": partition_key(partition), "isTightBound": True, "isDeleted": False}
                out.append(
                    MetadataRecord(
                        PARTITION_STATS,
                        partition_stats_key(column, partition),
                        column_stats_record(payload, partition_stats=True),
                    )
                )
    return out


def file_stats(table: HudiTable, files: Sequence[NewFile], index: cs.ColumnStatsIndex) -> list[list[dict[str, Any]]]:
    """The column stats of each file, read in parallel (object stores answer one file per request)."""

    def one(f: NewFile) -> list[dict[str, Any]]:
        location = join(partition_location(table.base_path, f.partition), f.name)
        if f.is_base_file:
            return cs.parquet_file_stats(table.storage.read_bytes(location), f.name, index)
        return cs.records_stats(log_data_records(table, location), f.name, index)

    if len(files) <= 1:
        return [one(f) for f in files]
    with ThreadPoolExecutor(max_workers=min(STATS_THREADS, len(files)), thread_name_prefix="mdt-stats") as pool:
        return list(pool.map(carry_context(one), files))


def log_data_records(table: HudiTable, location: str) -> pa.Table:
    """The data records a log file holds (its data blocks, in order; deletes left out)."""
    parts = [rows for is_delete, rows in iter_log_records(table.storage, location, table=table.label) if not is_delete]
    return pa.concat_tables(parts, promote_options="default") if parts else pa.table({})


def stats_index(mdt: MetadataTable) -> cs.ColumnStatsIndex | None:
    """The columns the table's column stats index, and its version (the table schema is read only when the table
    has no index definitions to name them)."""
    data = mdt.data
    definitions = mdt.index_definitions() if data.config.version >= 8 else None
    schema = read_schema(data, mdt.data_timeline) if definitions is None else None
    try:
        return cs.index_from_definitions(definitions, data.config.version, schema)
    except TableServiceError as e:
        raise e.with_context(table=data.name) from e


def base_file_bloom_filter(table: HudiTable, f: NewFile) -> tuple[str, bytes] | None:
    """The bloom filter Hudi's writer put in a base file's footer: (type code, serialized), or None."""
    location = join(partition_location(table.base_path, f.partition), f.name)
    try:
        footer = read_base_file_footer(table.storage, location)
    except TableServiceError as e:
        raise e.with_context(table=table.label) from e
    if footer.bloom_filter_serialized is None or footer.bloom_filter_type is None:
        return None
    return footer.bloom_filter_type.value, footer.bloom_filter_serialized.encode("utf-8")
