"""A Hudi write client: insert, upsert, delete and insert-overwrite on copy-on-write and merge-on-read tables.

It leaves a table the way a Spark writer of the table's version does: requested → inflight → completed instant
files in the table's layout, markers while writing, a heartbeat while the write runs, base files with Hudi's
footers, log files with Avro or Parquet data blocks and delete blocks, and commit metadata with write stats.
It serves the tests, the benchmarks and the demo; the daemon itself never ingests data.

Concurrency: the table lock (any context-manager factory, e.g. the daemon's lock providers) is held only to
generate the instant time and write the requested file, and to check for conflicts and write the completed file.
Records are routed with a simple index: the record keys of the latest base files of the touched partitions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tableservice.errors import ConflictError, PermanentError
from tableservice.hudi.action.commit import Change, ChangeKind, update_metadata_table
from tableservice.hudi.action.conflicts import check_write
from tableservice.hudi.action.rollback import rollback
from tableservice.hudi.file_group.filenames import make_write_token, new_file_id
from tableservice.hudi.file_group.merge import DeltaRecords, MergeMode, merge_base_batch, merge_config_from_properties
from tableservice.hudi.file_group.reader import BlockFilter, FileGroupReader
from tableservice.hudi.models import (
    HoodieCommitMetadata,
    HoodieReplaceCommitMetadata,
    HoodieRequestedReplaceMetadata,
    HoodieWriteStat,
    encode_commit_metadata,
    encode_requested_replace_metadata,
)
from tableservice.hudi.table.fs_view import FileSlice, FileSystemView
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.schema import add_meta_fields, arrow_schema_from_avro, avro_schema_to_json
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write import handles
from tableservice.hudi.write.key_index import file_groups_of, key_index, lookup_file_ids
from tableservice.hudi.write.markers import Heartbeat, MarkerType, delete_markers, list_marked_files
from tableservice.hudi.write.records import (
    FILE_NAME,
    PARTITION_PATH,
    RECORD_KEY,
    deduplicate,
    partition_paths,
    record_keys,
    with_meta_fields,
)
from tableservice.hudi.write.workload import Operation, WorkloadStep
from tableservice.storage import Storage

LockFactory = Callable[[], AbstractContextManager[object]]


@dataclass(frozen=True)
class WriteOptions:
    log_block_format: str = "avro"  # "avro" or "parquet"
    max_file_records: int = 500_000  # inserts per new base file
    compression: str = "gzip"
    heartbeat_interval_ms: int = 60_000
    stage_id: int = 1
    # Hudi's `hoodie.clustering.updates.strategy`: False is SparkRejectUpdateStrategy (the default: updates to file
    # groups under pending clustering are refused, and a write fails at commit when a clustering of its file groups
    # was scheduled after it started); True is SparkAllowUpdateStrategy (the clustering is the one to give way).
    allow_updates_under_clustering: bool = False


@dataclass(frozen=True)
class WriteResult:
    instant_time: str
    action: Action
    stats: tuple[HoodieWriteStat, ...]
    replaced: dict[str, tuple[str, ...]]


def _no_lock() -> AbstractContextManager[object]:
    return contextlib.nullcontext()


class WriteClient:
    """Writes to one existing table. One write at a time per client."""

    def __init__(
        self, storage: Storage, base_path: str, *, lock: LockFactory | None = None, options: WriteOptions | None = None
    ) -> None:
        self.storage = storage
        self.base_path = base_path.rstrip("/")
        self.lock = lock if lock is not None else _no_lock
        self.options = options if options is not None else WriteOptions()
        self._seq = 0

    # --- public operations -------------------------------------------------------------------------

    def insert(self, records: pa.Table) -> WriteResult:
        return self._write("INSERT", records, None, overwrite=False)

    def upsert(self, records: pa.Table, deletes: pa.Table | None = None) -> WriteResult:
        return self._write("UPSERT", records, deletes, overwrite=False)

    def delete(self, keys: pa.Table) -> WriteResult:
        """`keys` holds the record key, partition and (for event-time ordering) ordering fields."""
        return self._write("DELETE", None, keys, overwrite=False)

    def insert_overwrite(self, records: pa.Table) -> WriteResult:
        """Replace every file group of the partitions `records` touch with new file groups holding them."""
        return self._write("INSERT_OVERWRITE", records, None, overwrite=True)

    def apply(self, step: WorkloadStep) -> WriteResult:
        if step.operation is Operation.INSERT:
            return self.insert(step.records)
        if step.operation is Operation.DELETE:
            return self.delete(step.records if step.deletes is None else step.deletes)
        if step.operation is Operation.INSERT_OVERWRITE:
            return self.insert_overwrite(step.records)
        return self.upsert(step.records, step.deletes)

    # --- the write ---------------------------------------------------------------------------------

    def _write(
        self, operation: str, records: pa.Table | None, deletes: pa.Table | None, *, overwrite: bool
    ) -> WriteResult:
        table = HudiTable.open(self.storage, self.base_path)
        config = table.config
        data_schema = table.latest_schema()
        if data_schema is None:
            raise PermanentError("the table has no schema", table=config.name)
        avro_schema = add_meta_fields(data_schema)
        arrow_schema = arrow_schema_from_avro(avro_schema)
        if overwrite:
            action = Action.REPLACE_COMMIT
        elif config.is_mor:
            action = Action.DELTA_COMMIT
        else:
            action = Action.COMMIT
        with self.lock():
            timeline = table.reload()
            pending_at_start = frozenset(i.requested_time for i in timeline.pending())
            instant_time = table.active.new_instant_time(timeline)
            requested = b""
            if action is Action.REPLACE_COMMIT:
                requested = encode_requested_replace_metadata(
                    HoodieRequestedReplaceMetadata(
                        operation_type=None, clustering_plan=None, extra_metadata=None, version=None
                    ),
                    table_version=config.version,
                )
            instant = table.active.create_requested(instant_time, action, requested)
        heartbeat = Heartbeat(self.storage, self.base_path, instant_time, self.options.heartbeat_interval_ms).start()
        try:
            inflight_md = HoodieCommitMetadata(
                partition_to_write_stats={}, compacted=False, extra_metadata={}, operation_type=operation
            )
            instant = table.active.transition_to_inflight(
                instant, encode_commit_metadata(inflight_md, table_version=config.version)
            )
            ctx = handles.WriteContext(
                storage=self.storage,
                base_path=self.base_path,
                instant_time=instant_time,
                table_version=config.version,
                avro_schema=avro_schema,
                write_token=make_write_token(0, self.options.stage_id, 1),
                log_block_format=self.options.log_block_format,
                compression=self.options.compression,
            )
            view = table.file_system_view(timeline=timeline)
            try:
                stats, replaced = self._write_files(
                    table, ctx, view, timeline, arrow_schema, records, deletes, overwrite
                )
            except ConflictError:
                # Refused before writing anything (e.g. updates to file groups under pending clustering): the
                # attempt leaves no trace, so the caller can simply retry later.
                if not list_marked_files(self.storage, self.base_path, instant_time):
                    table.active.delete_pending(instant)
                    delete_markers(self.storage, self.base_path, instant_time)
                raise
            metadata = self._commit_metadata(operation, stats, replaced, data_schema, overwrite)
            try:
                with self.lock():
                    latest = table.reload()
                    ours = {(s.partition_path or "", s.file_id or "") for s in stats}
                    ours |= {(p, f) for p, fids in replaced.items() for f in fids}
                    check_write(
                        table,
                        latest,
                        instant,
                        ours,
                        pending_at_start=pending_at_start,
                        allow_updates_under_clustering=self.options.allow_updates_under_clustering,
                    )
                    # the metadata table first (Hudi's writers do the same), then the data instant
                    update_metadata_table(table, latest, Change(ChangeKind.COMPLETE, instant, metadata=metadata))
                    table.active.transition_to_completed(
                        instant, encode_commit_metadata(metadata, table_version=config.version), timeline=latest
                    )
            except ConflictError:
                # Lost the race at commit: this attempt is undone at once (as the EAGER failed-writes policy
                # would), so the caller can retry with a new instant.
                rollback(table, instant, lock=self.lock)
                raise
            delete_markers(self.storage, self.base_path, instant_time)
        finally:
            heartbeat.stop()
        return WriteResult(instant_time, action, tuple(stats), replaced)

    def _commit_metadata(
        self,
        operation: str,
        stats: list[HoodieWriteStat],
        replaced: dict[str, tuple[str, ...]],
        data_schema: dict[str, Any],
        overwrite: bool,
    ) -> HoodieCommitMetadata:
        by_partition: dict[str, list[HoodieWriteStat]] = {}
        for s in stats:
            by_partition.setdefault(s.partition_path or "", []).append(s)
        common: dict[str, Any] = {
            "partition_to_write_stats": {p: tuple(v) for p, v in by_partition.items()},
            "compacted": False,
            "extra_metadata": {"schema": avro_schema_to_json(data_schema)},
            "operation_type": operation,
        }
        if overwrite:
            return HoodieReplaceCommitMetadata(**common, partition_to_replace_file_ids=replaced)
        return HoodieCommitMetadata(**common)

    # --- routing records to files ------------------------------------------------------------------

    def _write_files(
        self,
        table: HudiTable,
        ctx: handles.WriteContext,
        view: FileSystemView,
        timeline: Timeline,
        arrow_schema: pa.Schema,
        records: pa.Table | None,
        deletes: pa.Table | None,
        overwrite: bool,
    ) -> tuple[list[HoodieWriteStat], dict[str, tuple[str, ...]]]:
        config = table.config
        merge_config = merge_config_from_properties(config.properties, config.version)
        event_time = merge_config.mode is MergeMode.EVENT_TIME_ORDERING
        stats: list[HoodieWriteStat] = []
        replaced: dict[str, tuple[str, ...]] = {}
        upd = self._prepare(table, records, merge_config.ordering_fields, event_time)
        dels = self._prepare(table, deletes, merge_config.ordering_fields, event_time)
        touched = set(upd.column(PARTITION_PATH).to_pylist()) | set(dels.column(PARTITION_PATH).to_pylist())
        if overwrite:
            for partition in sorted(touched):
                fids = tuple(g.file_id for g in view.file_groups(partition))
                if fids:
                    replaced[partition] = fids
            stats.extend(self._insert_new(ctx, upd, arrow_schema))
            return stats, replaced
        index = key_index(self.storage, view, touched)
        upd_fid = lookup_file_ids(index, upd)
        del_fid = lookup_file_ids(index, dels)
        clustering = (
            {} if self.options.allow_updates_under_clustering else table.view_inputs(timeline).pending_clustering
        )
        for fg in {*file_groups_of(upd, upd_fid), *file_groups_of(dels, del_fid)}:
            if fg in clustering:
                raise ConflictError(
                    f"file group {fg[1]} in {fg[0]!r} is under pending clustering {clustering[fg]}: "
                    "updates are rejected until it completes",
                    table=config.name,
                )
        inserts = upd.filter(pc.is_null(upd_fid))
        stats.extend(self._insert_new(ctx, inserts, arrow_schema))
        updates = upd.filter(pc.is_valid(upd_fid))
        up_fids = upd_fid.filter(pc.is_valid(upd_fid))
        del_rows = dels.filter(pc.is_valid(del_fid))
        del_fids = del_fid.filter(pc.is_valid(del_fid))
        slices = {s.file_group_id: s for s in view.latest_slices()}
        groups = sorted(set(file_groups_of(updates, up_fids)) | set(file_groups_of(del_rows, del_fids)))
        for partition, fid in groups:
            u = updates.filter(pc.and_(pc.equal(updates.column(PARTITION_PATH), partition), pc.equal(up_fids, fid)))
            d = del_rows.filter(pc.and_(pc.equal(del_rows.column(PARTITION_PATH), partition), pc.equal(del_fids, fid)))
            slice_ = slices[(partition, fid)]
            if config.is_mor:
                stats.append(self._append_log(ctx, view, slice_, u, d, merge_config.ordering_fields))
            else:
                stats.append(self._merge_base(table, ctx, timeline, arrow_schema, slice_, u, d, merge_config))
        return stats, replaced

    def _prepare(
        self, table: HudiTable, records: pa.Table | None, ordering: tuple[str, ...], event_time: bool
    ) -> pa.Table:
        """Records with record key and partition path columns, pre-combined."""
        config = table.config
        if records is None or records.num_rows == 0:
            return pa.table({RECORD_KEY: pa.array([], pa.string()), PARTITION_PATH: pa.array([], pa.string())})
        if event_time:
            missing = [f for f in ordering if f not in records.column_names]
            if missing:
                raise PermanentError(f"records lack ordering fields {missing}", table=config.name)
        keys = record_keys(config, records)
        parts = partition_paths(config, records)
        keep = deduplicate(records, keys, parts, ordering, event_time)
        idx = pa.array(keep)
        data = records.take(idx)
        data = data.drop_columns([c for c in (RECORD_KEY, PARTITION_PATH) if c in data.column_names])
        return data.append_column(RECORD_KEY, keys.take(idx)).append_column(PARTITION_PATH, parts.take(idx))

    # --- file writers ------------------------------------------------------------------------------

    def _next_seq(self, n: int) -> int:
        start = self._seq
        self._seq += n
        return start

    def _insert_new(self, ctx: handles.WriteContext, rows: pa.Table, schema: pa.Schema) -> list[HoodieWriteStat]:
        out: list[HoodieWriteStat] = []
        if rows.num_rows == 0:
            return out
        for partition in sorted(set(rows.column(PARTITION_PATH).to_pylist())):
            part = rows.filter(pc.equal(rows.column(PARTITION_PATH), partition))
            chunk = max(1, self.options.max_file_records)
            for i, start in enumerate(range(0, part.num_rows, chunk)):
                piece = part.slice(start, chunk)
                fid = new_file_id(0)
                name = f"{fid}_{ctx.write_token}_{ctx.instant_time}.parquet"
                data = self._with_meta(ctx, piece, name, schema, task=i)
                out.append(handles.write_new_base_file(ctx, partition, fid, data, num_inserts=piece.num_rows))
        return out

    def _with_meta(
        self, ctx: handles.WriteContext, rows: pa.Table, file_name: str, schema: pa.Schema, task: int = 0
    ) -> pa.Table:
        keys = rows.column(RECORD_KEY).combine_chunks()
        parts = rows.column(PARTITION_PATH).combine_chunks()
        data = rows.drop_columns([RECORD_KEY, PARTITION_PATH])
        out = with_meta_fields(data, ctx.instant_time, keys, parts, file_name, task, self._next_seq(rows.num_rows))
        return _conform(out, schema)

    def _delete_rows(self, d: pa.Table, ordering: tuple[str, ...]) -> pa.Table:
        ordering_value = d.column(ordering[0]) if ordering and ordering[0] in d.column_names else None
        cols: dict[str, Any] = {"record_key": d.column(RECORD_KEY), "partition_path": d.column(PARTITION_PATH)}
        if ordering_value is not None:
            cols["ordering_value"] = ordering_value
        return pa.table(cols)

    def _append_log(
        self,
        ctx: handles.WriteContext,
        view: FileSystemView,
        slice_: FileSlice,
        u: pa.Table,
        d: pa.Table,
        ordering: tuple[str, ...],
    ) -> HoodieWriteStat:
        group = next(g for g in view.all_file_groups(slice_.partition_path) if g.file_id == slice_.file_id)
        existing = [lf.name for s in group.slices for lf in s.log_files]
        pending = view.inputs.pending_compaction.get(slice_.file_group_id)
        base_instant = pending if pending is not None else slice_.base_instant_time
        log_name = handles.next_log_file_name(ctx, slice_, slice_.file_id, base_instant, existing)
        updates = (
            self._with_meta(ctx, u, slice_.file_id, arrow_schema_from_avro(ctx.avro_schema)) if u.num_rows else None
        )
        deletes = self._delete_rows(d, ordering) if d.num_rows else None
        base_name = slice_.base_file.file_name if slice_.base_file else None
        return handles.write_log_file(
            ctx,
            slice_.partition_path,
            log_name,
            prev_commit=slice_.base_instant_time,
            base_file=base_name,
            updates=updates,
            deletes=deletes,
        )

    def _merge_base(
        self,
        table: HudiTable,
        ctx: handles.WriteContext,
        timeline: Timeline,
        schema: pa.Schema,
        slice_: FileSlice,
        u: pa.Table,
        d: pa.Table,
        merge_config: Any,
    ) -> HoodieWriteStat:
        """Copy-on-write: the slice's base file merged with the updates and deletes, as a new base file."""
        name = f"{slice_.file_id}_{ctx.write_token}_{ctx.instant_time}.parquet"
        delta = DeltaRecords(merge_config, schema=schema)
        if u.num_rows:
            delta.add_data(self._with_meta(ctx, u, name, schema))
        if d.num_rows:
            ordering = merge_config.ordering_fields
            values = d.column(ordering[0]) if ordering and ordering[0] in d.column_names else None
            delta.add_deletes(d.column(RECORD_KEY), values)
        reader = FileGroupReader(
            self.storage,
            table_name=table.name,
            merge_config=merge_config,
            schema=schema,
            block_filter=BlockFilter.for_timeline(table.config.version, timeline),
        )
        matched = delta.new_match_mask()
        before = 0
        merged_parts = []
        if slice_.base_file is not None:
            for batch in reader.iter_base(slice_.base_file):
                before += batch.num_rows
                merged_parts.append(merge_base_batch(batch, delta, schema=schema, matched=matched))
        merged = pa.concat_tables(merged_parts) if merged_parts else schema.empty_table()
        n_updates = int(np.count_nonzero(matched))
        return handles.write_new_base_file(
            ctx,
            slice_.partition_path,
            slice_.file_id,
            merged,
            num_inserts=0,
            num_updates=n_updates,
            num_deletes=max(0, before - merged.num_rows),
            prev_commit=slice_.base_instant_time,
            marker=MarkerType.MERGE,
        )


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Order and cast columns to the table schema; absent nullable columns become nulls."""
    arrays = []
    for f in schema:
        if f.name in table.column_names:
            col = table.column(f.name)
            arrays.append(col if col.type == f.type else col.cast(f.type))
        else:
            arrays.append(pa.nulls(table.num_rows, f.type))
    unknown = [c for c in table.column_names if c not in schema.names and c != FILE_NAME]
    if unknown:
        raise PermanentError(f"records carry columns the table schema lacks: {unknown}")
    return pa.Table.from_arrays(arrays, schema=schema)
