"""The record index and secondary indexes of an indexing action, built on Spark.

`spark_partition_writer`: one task per file slice (as of the index's `upto` instant) reads the slice merged, as a
query reads it, keeping the record key (and, for a secondary index, the indexed column), and routes each entry to
its metadata file group; Spark shuffles the entries by file group and sorts them by key; one task per shuffle
partition writes the base HFile of each of its file groups straight to storage and returns its write stat. The
driver writes the partition's initial log files and the entries' values (one per file slice for the record index,
one for a secondary index). Other partitions (`files`, stats, bloom filters) are built from file listings and
footers on the driver. `read_keys` returns the keys themselves (benchmarks, checks).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tableservice.errors import TableServiceError
from tableservice.executors.spark import SparkExecutor, spark_job
from tableservice.executors.worker import encode_task_error
from tableservice.hudi.action.compact import CompactionTask, slice_at, task_reader
from tableservice.hudi.action.indexing import PartitionWriter, records_writer
from tableservice.hudi.action.tasks import CompactionInput, compaction_tasks
from tableservice.hudi.file_group.base_file_reader import read_base_file_footer
from tableservice.hudi.metadata.hfile_write import hfile_layout
from tableservice.hudi.metadata.initialize import (
    TableSource,
    file_group_count,
    index_version,
    start_partition,
    write_base_hfile,
)
from tableservice.hudi.metadata.keys import (
    MetadataPartition,
    file_group_indexes,
    is_secondary_index,
    routes_by_value,
    secondary_index_key,
)
from tableservice.hudi.metadata.record_index import location, secondary_texts
from tableservice.hudi.metadata.records import record_index_record, secondary_index_record
from tableservice.hudi.metadata.schema import metadata_record_schema_json
from tableservice.hudi.metadata.secondary_index import secondary_column
from tableservice.hudi.models import HoodieWriteStat
from tableservice.hudi.table.fs_view import FileSlice
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import instant_epoch_ms
from tableservice.storage import Storage, StorageOptions

KEYS_SCHEMA = "key string, slice int, value string"
KEY_FIELD = "_hoodie_record_key"
RECORD_INDEX = MetadataPartition.RECORD_INDEX.value


def _key_worker(
    payload: Sequence[str], column: str | None
) -> Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]:
    def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        return _read_keys(batches, payload, column)

    return run


def _read_keys(
    batches: Iterable[pa.RecordBatch], payload: Sequence[str], column: str | None
) -> Iterable[pa.RecordBatch]:
    """Executor side: task indexes in, the keys of each task's slice out."""
    storages: dict[str, Storage] = {}
    columns = [KEY_FIELD] + ([column] if column is not None and column != KEY_FIELD else [])
    for batch in batches:
        for index in batch.column(0).to_pylist():
            task = CompactionTask.from_json(payload[index])
            opts = task.extra.get("storage_options", "{}")
            storage = storages.get(opts)
            if storage is None:
                storage = storages[opts] = Storage(StorageOptions(**json.loads(opts)) if opts != "{}" else None)
            try:
                reader = task_reader(storage, task)
                file_slice = slice_at(
                    storage, task.partition_path, task.file_id, task.base_instant_time, task.base_file, task.log_files
                )
                for part in reader.read_slice(file_slice, columns):
                    n = part.num_rows
                    if not n:
                        continue
                    values = part.column(column) if column is not None else None
                    texts = secondary_texts(values) if values is not None else [None] * n
                    yield pa.RecordBatch.from_pydict(
                        {
                            "key": part.column(KEY_FIELD).cast(pa.string()).combine_chunks(),
                            "slice": pa.array(np.full(n, index, dtype=np.int32)),
                            "value": pa.array(texts, pa.string()),
                        }
                    )
            except TableServiceError as e:  # travels to the driver inside Spark's error text
                raise RuntimeError(encode_task_error(e, task.table_name)) from e


def read_keys(
    executor: SparkExecutor,
    tasks: Sequence[CompactionTask],
    *,
    column: str | None,
    tag: str,
    storage_options: StorageOptions | None = None,
) -> pa.Table:
    """Every record key of the slices the tasks name, as one Arrow table: `key`, `slice` (the index of its task in
    `tasks`) and `value` (`column` as the secondary index holds it)."""
    empty = pa.table(
        {"key": pa.array([], pa.string()), "slice": pa.array([], pa.int32()), "value": pa.array([], pa.string())}
    )
    if not tasks:
        return empty
    spark = executor.session
    payload, partitions = executor.spread(tasks, storage_options)
    with spark_job(spark, tag, tag):
        df = spark.range(0, len(payload), 1, partitions)
        table = df.mapInArrow(_key_worker(payload, column), KEYS_SCHEMA).toArrow()
    # the worker numbers slices by their place in the balanced payload: back to the place in `tasks`
    table = table.set_column(1, "slice", pa.array(_placed(tasks, payload), pa.int32()).take(table.column("slice")))
    return table if table.num_rows else empty


ENTRIES_SCHEMA = "group int, key binary, slice int"


def _entry_worker(
    payload: Sequence[str], placed: Sequence[int], column: str | None, groups: int, v2: bool
) -> Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]:
    """Executor side: the entries of each task's slice with their file group and the index of their value."""
    value_of = pa.array(placed, pa.int32())

    def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        for batch in _read_keys(batches, payload, column):
            keys = batch.column(0)
            if column is not None:  # secondary index entries: `<escaped value>$<escaped key>`
                texts = batch.column(2).to_pylist()
                keys = pa.array(
                    [secondary_index_key(v, k) for k, v in zip(keys.to_pylist(), texts, strict=True)], pa.string()
                )
            routes = pa.array(file_group_indexes(keys, groups, secondary_v2=v2), pa.int32())
            slices = value_of.take(batch.column(1))
            yield pa.RecordBatch.from_pydict({"group": routes, "key": keys.cast(pa.binary()), "slice": slices})

    return run


def _hfile_worker(context: str) -> Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]:
    def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        ctx = json.loads(context)
        opts = ctx["storage_options"]
        storage = Storage(StorageOptions(**opts) if opts else None)
        values = pa.array([base64.b64decode(v) for v in ctx["values"]], pa.binary())
        pending: list[pa.RecordBatch] = []

        def flush() -> Iterable[pa.RecordBatch]:
            if not pending:
                return
            table = pa.Table.from_batches(pending)
            pending.clear()
            for group in sorted(set(table.column("group").to_pylist())):
                part = table.filter(pc.equal(table.column("group"), group))
                rows = part.column("key").combine_chunks()
                slices = part.column("slice").combine_chunks()
                keep = _last_of_each(rows)
                if keep is not None:
                    rows, slices = rows.take(keep), slices.take(keep)
                try:
                    stat = write_base_hfile(
                        storage,
                        ctx["base_path"],
                        ctx["partition"],
                        group,
                        ctx["instant"],
                        rows,
                        values.take(slices),
                        ctx["schema"],
                        ctx["layout"],
                    )
                except TableServiceError as e:
                    raise RuntimeError(encode_task_error(e, ctx["table"])) from e
                yield pa.RecordBatch.from_pydict({"stat": pa.array([stat.model_dump_json(by_alias=True)], pa.string())})

        for batch in batches:
            pending.append(batch)
        yield from flush()

    return run


def _last_of_each(rows: pa.Array) -> pa.Array | None:
    """Indices keeping the last of equal neighbouring rows (a key read twice), or None when all are distinct."""
    if len(rows) < 2 or pc.all(pc.not_equal(rows[:-1], rows[1:])).as_py():
        return None
    distinct = pc.not_equal(rows[1:], rows[:-1]).to_numpy(zero_copy_only=False)
    last = np.append(distinct, True)
    return pa.array(np.nonzero(last)[0])


def spark_partition_writer(
    executor: SparkExecutor, table_name: str, instant_time: str, storage_options: StorageOptions | None = None
) -> PartitionWriter:
    """Writes the record index and secondary indexes on Spark (module docstring); other partitions in this
    process."""
    fallback = records_writer()

    def write(source: TableSource, partition: str, mdt: HudiTable, instant: str) -> tuple[int, list[HoodieWriteStat]]:
        secondary = is_secondary_index(partition)
        if partition != RECORD_INDEX and not secondary:
            return fallback(source, partition, mdt, instant)
        table = source.table
        view = table.file_system_view(timeline=source.timeline, listing=table.list_storage_files())
        slices = view.latest_merged_slices()
        tasks = compaction_tasks(table, source.timeline, source.as_of or "", [CompactionInput.of(s) for s in slices])
        groups = file_group_count(partition, estimated_records(table, slices))
        start_partition(mdt, partition, instant, groups)
        if not tasks:
            return 0, []
        schema_json = metadata_record_schema_json(table.config.version)
        parsed = fastavro.parse_schema(json.loads(schema_json))
        tz = table.active.tz
        if secondary:
            column: str | None = secondary_column(table, partition)
            values = [_encode(parsed, secondary_index_record())]
            v2 = routes_by_value(partition, index_version(table, partition))
        else:
            column, v2 = None, False
            values = [
                _encode(
                    parsed,
                    record_index_record(
                        location(s.partition_path, s.file_id, instant_epoch_ms(s.base_instant_time, tz))
                    ),
                )
                for s in slices
            ]
        context = json.dumps(
            {
                "table": table_name,
                "base_path": mdt.base_path,
                "partition": partition,
                "instant": instant,
                "schema": schema_json,
                "layout": hfile_layout(table.config.version),
                "values": [base64.b64encode(v).decode() for v in values],
                "storage_options": storage_options.shareable() if storage_options is not None else {},
            }
        )
        spark = executor.session
        payload, read_partitions = executor.spread(tasks, storage_options)
        placed = [0] * len(payload) if secondary else _placed(tasks, payload)  # secondary: one value for all
        slots = executor.task_slots() or len(payload)
        tag = f"tableservice|{table_name}|indexing|{instant_time}|{partition}"
        with spark_job(spark, tag, tag):
            entries = spark.range(0, len(payload), 1, read_partitions).mapInArrow(
                _entry_worker(payload, placed, column, groups, v2), ENTRIES_SCHEMA
            )
            ordered = entries.repartition(min(groups, max(slots, 1) * 2), "group").sortWithinPartitions("group", "key")
            rows = ordered.mapInArrow(_hfile_worker(context), "stat string").collect()
        stats = [HoodieWriteStat.model_validate_json(r["stat"]) for r in rows]
        return sum(int(s.num_writes or 0) for s in stats), sorted(stats, key=lambda s: s.file_id or "")

    return write


def _placed(tasks: Sequence[CompactionTask], payload: Sequence[str]) -> list[int]:
    """For each task of a balanced payload, its index in `tasks`."""
    where = {(t.partition_path, t.file_id): i for i, t in enumerate(tasks)}
    return [where[(t.partition_path, t.file_id)] for t in map(CompactionTask.from_json, payload)]


def estimated_records(table: HudiTable, slices: Sequence[FileSlice]) -> int:
    """Records of the slices, from their base files' footers (log files counted at 100 bytes a record): what the
    file-group count of a record or secondary index is sized by."""
    total = 0
    for s in slices:
        if s.base_file is not None:
            total += read_base_file_footer(table.storage, s.base_file.location).num_rows
        total += sum(lf.size for lf in s.log_files) // 100
    return total


def _encode(parsed: Any, value: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, value)
    return buf.getvalue()
