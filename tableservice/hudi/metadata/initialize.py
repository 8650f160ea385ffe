"""Creating a metadata table, or a partition of it, from the table as it is (HUDI-MDT-NOTES §8.1).

Per partition, in order (`files` first): the initialisation instant (`instants.init_instant`: the first unused
of `00000000000000000`, `...001`, ... from table version 8; the latest completed data instant + `010`, `011`, ...
in version 6); every file group gets its empty initial log file (a delete block with no keys); the records built
from the table's committed files go, routed and sorted, into one base HFile per file group that receives any;
the metadata delta commit completes; then the partition is added to `hoodie.table.metadata.partitions`. Call
under the table lock, with no write pending (its files would be left out). Table version 6 metadata tables
have no `partition_stats` partition.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tableservice.errors import InvalidTableConfigError
from tableservice.hudi.file_group.filenames import parse_base_file_name
from tableservice.hudi.file_group.log_format import HeaderKey
from tableservice.hudi.file_group.log_format.writer import append_log_blocks, encode_delete_block
from tableservice.hudi.metadata import column_stats as cs
from tableservice.hudi.metadata.column_stats import read_index_definitions
from tableservice.hudi.metadata.compaction import ensure_partition_metadata
from tableservice.hudi.metadata.delta_commit import MetadataRecord
from tableservice.hudi.metadata.hfile_write import hfile_layout, write_hfile_arrays
from tableservice.hudi.metadata.instants import init_instant
from tableservice.hudi.metadata.keys import (
    ALL_PARTITIONS_KEY,
    MetadataPartition,
    bloom_filter_key,
    file_group_id,
    file_group_indexes,
    is_secondary_index,
    partition_key,
    routes_by_value,
    secondary_index_key,
)
from tableservice.hudi.metadata.listing import committed_files
from tableservice.hudi.metadata.reader import metadata_table_path
from tableservice.hudi.metadata.record_index import key_locations, key_values
from tableservice.hudi.metadata.record_index import location as record_location
from tableservice.hudi.metadata.records import (
    bloom_filter_record,
    files_record,
    record_index_record,
    secondary_index_record,
)
from tableservice.hudi.metadata.schema import metadata_record_schema_json
from tableservice.hudi.metadata.secondary_index import secondary_column
from tableservice.hudi.metadata.update import NewFile, base_file_bloom_filter, file_stats, stats_records
from tableservice.hudi.models import HoodieCommitMetadata, HoodieWriteStat, encode_commit_metadata
from tableservice.hudi.table import config as tc
from tableservice.hudi.table.config import TableConfig, store_table_config
from tableservice.hudi.table.fs_view import partition_location
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import read_schema
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, instant_epoch_ms
from tableservice.storage import Storage, join

log = logging.getLogger(__name__)

FILES = MetadataPartition.FILES.value
COLUMN_STATS = MetadataPartition.COLUMN_STATS.value
PARTITION_STATS = MetadataPartition.PARTITION_STATS.value
RECORD_INDEX = MetadataPartition.RECORD_INDEX.value
BLOOM_FILTERS = MetadataPartition.BLOOM_FILTERS.value
SUPPORTED = (FILES, COLUMN_STATS, PARTITION_STATS, BLOOM_FILTERS, RECORD_INDEX)
FILE_GROUPS = {FILES: 1, COLUMN_STATS: 2, PARTITION_STATS: 1, BLOOM_FILTERS: 4}
RECORD_INDEX_MIN_GROUPS, RECORD_INDEX_MAX_GROUPS = 10, 10000
RECORDS_PER_RECORD_INDEX_GROUP = 1_000_000
WRITE_TOKEN = "0-0-0"


def initialize_metadata_table(table: HudiTable, partitions: Sequence[str]) -> tuple[str, ...]:
    """Create the metadata table (when absent) and build `partitions` not built yet; returns the partitions now
    listed in `hoodie.table.metadata.partitions`."""
    config = table.config
    check_supported(table, [p for p in partitions if not is_secondary_index(p)])
    if any(is_secondary_index(p) for p in partitions):
        raise InvalidTableConfigError("secondary indexes are built by the indexing action", table=table.label)
    timeline = table.reload()
    if timeline.pending_of(Action.DELTA_COMMIT) or timeline.pending_of(Action.COMMIT):
        raise InvalidTableConfigError("a write is pending: build the metadata table once it ends", table=table.label)
    built = list(config.metadata_partitions)
    todo = [p for p in SUPPORTED if p in partitions and p not in built]
    if FILES not in built and FILES not in todo and todo:
        todo.insert(0, FILES)
    if not todo:
        return tuple(built)
    mdt = open_or_create_metadata_table(table, fresh=not built)
    source = TableSource(table, timeline)
    for partition in todo:
        instant = init_instant(config.version, timeline, mdt.timeline())
        records = source.records(partition)
        groups = file_group_count(partition, len(records))
        stats = write_partition_files(table, mdt, partition, instant, groups, records)
        complete_initialization(table, mdt, partition, instant, stats)
        built.append(partition)
        store_table_config(
            table.storage,
            table.base_path,
            table.config.with_updates({tc.METADATA_PARTITIONS: ",".join(sorted(built))}),
        )
        table.reload()
        log.info(
            "metadata table: built %s (%d records in %d file groups)",
            partition,
            len(records),
            groups,
            extra={"table": table.label, "instant": instant},
        )
    return tuple(sorted(built))


def check_supported(table: HudiTable, partitions: Sequence[str]) -> None:
    """Refuse partitions the table's version has no place for, or that the daemon cannot build."""
    version = table.config.version
    supported = SUPPORTED if version >= 8 else tuple(p for p in SUPPORTED if p != PARTITION_STATS)
    unknown = [p for p in partitions if p not in supported and not (version >= 8 and is_secondary_index(p))]
    if unknown:
        raise InvalidTableConfigError(
            f"cannot build metadata partitions {unknown} in a table of version {version}: supported are "
            f"{', '.join(supported)}{' and secondary indexes' if version >= 8 else ''}",
            table=table.label,
        )


def open_or_create_metadata_table(table: HudiTable, *, fresh: bool) -> HudiTable:
    """The metadata table, created (or, when `fresh`, re-created: no partition of it is listed) as needed."""
    path = metadata_table_path(table.base_path)
    storage = table.storage
    props = join(path, ".hoodie", tc.PROPERTIES_FILE)
    if storage.exists(props) and not fresh:
        return HudiTable.open(storage, path)
    if storage.exists(path):
        storage.delete_dir(path)  # a metadata table no reader uses (no partition listed): rebuilt from scratch
    name = f"{table.config.name}_metadata"
    version = str(table.config.version)
    properties = (
        _v6_properties(name)
        if table.config.version < 8
        else {
            tc.NAME: name,
            tc.TYPE: "MERGE_ON_READ",
            tc.VERSION: version,
            tc.INITIAL_VERSION: version,
            tc.LAYOUT_VERSION: "2",
            tc.TIMELINE_PATH: "timeline",
            tc.HISTORY_PATH: "history",
            tc.ARCHIVELOG_FOLDER: "history",
            tc.RECORD_KEY_FIELDS: "key",
            "hoodie.populate.meta.fields": "false",
            tc.KEYGEN_TYPE: "HOODIE_TABLE_METADATA",
            tc.PAYLOAD_CLASS: "org.apache.hudi.metadata.HoodieMetadataPayload",
            tc.MERGE_MODE: "CUSTOM",
            tc.MERGE_STRATEGY_ID: "00000000-0000-0000-0000-000000000000",
            tc.DROP_PARTITION_COLUMNS: "false",
            tc.BASE_FILE_FORMAT: "HFILE",
            tc.CHECKSUM: str(tc.table_checksum("", name)),
        }
    )
    config = TableConfig(properties, path=props)
    for folder in (config.timeline_folder, config.history_folder):
        storage.mkdirs(join(path, folder))
    store_table_config(storage, path, config)
    return HudiTable.open(storage, path)


def _v6_properties(name: str) -> dict[str, str]:
    """`hoodie.properties` of a table version 6 metadata table, as Hudi 0.14/0.15 write it."""
    return {
        tc.NAME: name,
        tc.TYPE: "MERGE_ON_READ",
        tc.VERSION: "6",
        tc.LAYOUT_VERSION: "1",
        tc.ARCHIVELOG_FOLDER: "archived",
        tc.RECORD_KEY_FIELDS: "key",
        tc.POPULATE_META_FIELDS: "false",
        tc.KEYGEN_CLASS: "org.apache.hudi.metadata.HoodieTableMetadataKeyGenerator",
        tc.PAYLOAD_CLASS: "org.apache.hudi.metadata.HoodieMetadataPayload",
        "hoodie.compaction.record.merger.strategy": "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5",
        tc.DROP_PARTITION_COLUMNS: "false",
        tc.BASE_FILE_FORMAT: "HFILE",
        tc.CHECKSUM: str(tc.table_checksum("", name)),
    }


def file_group_count(partition: str, records: int) -> int:
    """Hudi's file-group counts: fixed per partition, estimated from the record count for record and secondary
    indexes."""
    if partition == RECORD_INDEX or is_secondary_index(partition):
        wanted = -(-records // RECORDS_PER_RECORD_INDEX_GROUP)
        return max(RECORD_INDEX_MIN_GROUPS, min(RECORD_INDEX_MAX_GROUPS, wanted))
    return FILE_GROUPS[partition]


class TableSource:
    """What metadata records are built from: the table as of `timeline` (committed files read once, their column
    stats read once for both stats partitions)."""

    def __init__(self, table: HudiTable, timeline: Timeline, as_of: str | None = None) -> None:
        self.table = table
        self.timeline = timeline
        self.as_of = as_of
        self.files = committed_files(table, timeline)
        self.new_files = [
            NewFile(p, n, size) for p, names in sorted(self.files.items()) for n, size in sorted(names.items())
        ]
        self._stats: list[list[dict[str, Any]]] | None = None

    def stats(self) -> list[list[dict[str, Any]]]:
        if self._stats is None:
            self._stats = file_stats(self.table, self.new_files, stats_index_of(self.table, self.timeline))
        return self._stats

    def records(self, partition: str) -> Records:
        """Every record of `partition` as of the source's timeline."""
        if partition == FILES:
            listed = files_record({partition_key(p): (0, False) for p in self.files}, partition_list=True)
            out = [MetadataRecord(FILES, ALL_PARTITIONS_KEY, listed)]
            out += [
                MetadataRecord(FILES, partition_key(p), files_record({n: (size, False) for n, size in f.items()}))
                for p, f in self.files.items()
            ]
            return out
        if partition == RECORD_INDEX:
            return _record_index(self.table, self.timeline, self.as_of)
        if partition == BLOOM_FILTERS:
            return _bloom_filters(self.table, self.new_files)
        if is_secondary_index(partition):
            return _secondary_index(self.table, partition, self.as_of)
        return stats_records((partition,), self.new_files, self.stats())


def _bloom_filters(table: HudiTable, new_files: list[NewFile]) -> list[MetadataRecord]:
    """One record per committed base file whose footer holds a bloom filter, at the file's own instant."""
    out = []
    for f in new_files:
        parsed = parse_base_file_name(f.name) if f.is_base_file else None
        bloom = base_file_bloom_filter(table, f) if parsed is not None else None
        if parsed is None or bloom is None:
            continue
        kind, serialized = bloom
        value = bloom_filter_record(kind, parsed.instant_time, serialized, deleted=False)
        out.append(MetadataRecord(BLOOM_FILTERS, bloom_filter_key(f.partition, f.name), value))
    return out


def stats_index_of(table: HudiTable, timeline: Timeline) -> cs.ColumnStatsIndex:
    index = cs.column_stats_index(table.storage, table.base_path, table.config.version, read_schema(table, timeline))
    if index is None:
        raise InvalidTableConfigError("no columns to index for column stats", table=table.label)
    return index


def _record_index(table: HudiTable, timeline: Timeline, as_of: str | None) -> SharedValueRecords:
    """Every key of the latest file slices, pointing at its file group, with the slice's base instant as the
    instant (as Hudi does when it builds a record index from an existing table)."""
    view = table.file_system_view(timeline=timeline, listing=table.list_storage_files())
    millis = {s.file_group_id: instant_epoch_ms(s.base_instant_time, table.active.tz) for s in view.latest_slices()}
    return record_index_records(
        ((key, partition, file_id) for key, partition, file_id in key_locations(table, as_of)), millis
    )


def record_index_records(
    locations: Iterable[tuple[str, str, str]], millis: Mapping[tuple[str, str], int]
) -> SharedValueRecords:
    """Record-index records of (key, partition, file id): one value per file group, shared by its keys (the last
    location of a key wins)."""
    groups: dict[tuple[str, str], int] = {}
    values: list[dict[str, Any]] = []
    of_key: dict[str, int] = {}
    for key, partition, file_id in locations:
        at = groups.get((partition, file_id))
        if at is None:
            at = groups[(partition, file_id)] = len(values)
            values.append(record_index_record(record_location(partition, file_id, millis.get((partition, file_id), 0))))
        of_key[key] = at
    return SharedValueRecords(RECORD_INDEX, list(of_key), list(of_key.values()), values)


def _secondary_index(table: HudiTable, partition: str, as_of: str | None) -> list[MetadataRecord]:
    """`<escaped value>$<escaped record key>` for every record of the latest file slices (the column named by the
    index's definition in `.hoodie/.index_defs/index.json`)."""
    column = secondary_column(table, partition)
    value = secondary_index_record()
    out = {}
    for key, secondary in key_values(table, column, as_of):
        entry = secondary_index_key(secondary, key)
        out[entry] = MetadataRecord(partition, entry, value)
    return list(out.values())


@dataclass(frozen=True)
class SharedValueRecords:
    """Records of one partition whose values many keys share (the record index: one value per file group), kept
    as columns: `keys[i]` has the value `values[value_index[i]]`. Keys are unique."""

    partition: str
    keys: list[str] | pa.Array
    value_index: list[int] | pa.Array
    values: list[dict[str, Any]]

    def __len__(self) -> int:
        return len(self.keys)


Records = Sequence[MetadataRecord] | SharedValueRecords


def _cells_by_group(records: Records, groups: int, v2: bool, parsed: Any) -> dict[int, tuple[pa.Array, pa.Array]]:
    """file group index -> (rows, Avro values) of its cells, sorted by row, as binary arrays."""

    def encode(value: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, value)
        return buf.getvalue()

    if isinstance(records, SharedValueRecords):
        keys = records.keys if isinstance(records.keys, pa.Array) else pa.array(records.keys, pa.string())
        encoded = pa.array([encode(v) for v in records.values], pa.binary())
        value_index = (
            records.value_index
            if isinstance(records.value_index, pa.Array)
            else pa.array(records.value_index, pa.int32())
        )
    else:
        unique: dict[int, int] = {}  # values shared by several records are encoded once
        encoded_list: list[bytes] = []
        positions: list[int] = []
        for r in records:
            at = unique.get(id(r.value))
            if at is None:
                at = unique[id(r.value)] = len(encoded_list)
                encoded_list.append(encode(r.value) if r.value is not None else b"")
            positions.append(at)
        keys = pa.array([r.key for r in records], pa.string())
        encoded = pa.array(encoded_list, pa.binary())
        value_index = pa.array(positions, pa.int32())
    rows = keys.cast(pa.binary())
    order = pc.sort_indices(rows)
    rows, value_index = rows.take(order), value_index.take(order)
    routes = np.asarray(file_group_indexes(rows.cast(pa.string()), groups, secondary_v2=v2))
    out: dict[int, tuple[pa.Array, pa.Array]] = {}
    for group in np.unique(routes):
        mask = pa.array(routes == group)
        out[int(group)] = (rows.filter(mask), encoded.take(value_index.filter(mask)))
    return out


def write_partition_files(
    table: HudiTable, mdt: HudiTable, partition: str, instant: str, groups: int, records: Records
) -> list[HoodieWriteStat]:
    """The files of a new partition at `instant` (`start_partition`), the records (routed, sorted) in one base
    HFile per file group that receives any. Returns the write stats of the base files."""
    start_partition(mdt, partition, instant, groups)
    schema_json = metadata_record_schema_json(table.config.version)
    parsed = fastavro.parse_schema(json.loads(schema_json))
    v2 = routes_by_value(partition, index_version(table, partition))
    by_group = _cells_by_group(records, groups, v2, parsed)
    layout = hfile_layout(table.config.version)
    return [
        write_base_hfile(mdt.storage, mdt.base_path, partition, group, instant, rows, values, schema_json, layout)
        for group, (rows, values) in sorted(by_group.items())
        if len(rows)
    ]


def start_partition(mdt: HudiTable, partition: str, instant: str, groups: int) -> None:
    """A new partition's folder at `instant`: whatever an earlier attempt left is removed, every file group gets its
    empty initial log file (a delete block without keys), and the folder its `.hoodie_partition_metadata`."""
    storage = mdt.storage
    folder = partition_location(mdt.base_path, partition)
    for name in [fi.location for fi in storage.list(folder)] if storage.exists(folder) else []:
        storage.delete(name)  # leftovers of an attempt that did not complete
    for i in range(groups):
        init_log = f".{file_group_id(partition, i)}_{instant}.log.1_{WRITE_TOKEN}"
        append_log_blocks(
            storage,
            join(folder, init_log),
            [encode_delete_block([], {HeaderKey.INSTANT_TIME: instant})],
            create_only=True,
        )
    ensure_partition_metadata(storage, folder, instant)


def write_base_hfile(
    storage: Storage,
    mdt_base_path: str,
    partition: str,
    group: int,
    instant: str,
    rows: pa.Array,
    values: pa.Array,
    schema_json: str,
    layout: str,
) -> HoodieWriteStat:
    """The base HFile of file group `group` of a new partition (rows strictly sorted); its write stat."""
    fid = file_group_id(partition, group)
    first, last = rows[0].as_py(), rows[len(rows) - 1].as_py()
    info = [(b"schema", schema_json.encode()), (b"minRecordKey", first), (b"maxRecordKey", last)]
    data = write_hfile_arrays(rows, values, file_info=info, layout=layout)
    name = f"{fid}_{WRITE_TOKEN}_{instant}.hfile"
    storage.write_bytes(join(partition_location(mdt_base_path, partition), name), data)
    return HoodieWriteStat(
        file_id=fid,
        path=f"{partition}/{name}",
        prev_commit="null",
        num_writes=len(rows),
        num_inserts=len(rows),
        num_deletes=0,
        num_update_writes=0,
        total_write_bytes=len(data),
        total_write_errors=0,
        partition_path=partition,
        file_size_in_bytes=len(data),
    )


def complete_initialization(
    table: HudiTable, mdt: HudiTable, partition: str, instant: str, stats: Sequence[HoodieWriteStat]
) -> None:
    """The metadata delta commit that makes a new partition's files part of the metadata table."""
    schema_json = metadata_record_schema_json(table.config.version)
    operation = "BULK_INSERT_PREPPED" if table.config.version >= 9 else "BULK_INSERT"
    metadata = HoodieCommitMetadata(
        partition_to_write_stats={partition: tuple(stats)},
        compacted=False,
        extra_metadata={"schema": schema_json},
        operation_type=operation,
    )
    timeline = mdt.reload()
    existing = timeline.get(instant)
    if existing is not None and not existing.is_completed:
        mdt.active.delete_pending(existing)  # an attempt that crashed before completing
    inflight = mdt.active.transition_to_inflight(mdt.active.create_requested(instant, Action.DELTA_COMMIT))
    mdt.active.transition_to_completed(
        inflight, encode_commit_metadata(metadata, table_version=table.config.version), timeline=mdt.reload()
    )


def index_version(table: HudiTable, partition: str) -> str | None:
    if table.config.version < 8:
        return None
    version = ((read_index_definitions(table.storage, table.base_path) or {}).get(partition) or {}).get("version")
    return version if isinstance(version, str) else None
