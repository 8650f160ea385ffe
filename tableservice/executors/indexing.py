"""Reading every record key of a table on Spark, for the record index and secondary indexes of an indexing action.

One Spark task per file slice (as of the index's `upto` instant): the slice is read merged, as a query reads it,
keeping only the record key (and, for a secondary index, the indexed column), and returned as Arrow rows
(`key`, `partition`, `file_id`, `value`). The driver makes the metadata records from them. Other partitions
(`files`, stats, bloom filters) are built from file listings and footers on the driver.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tableservice.errors import SparkJobError, TableServiceError
from tableservice.executors.spark import (
    SparkExecutor,
    balanced,
    decode_task_error,
    encode_task_error,
    short_error,
    task_payload,
)
from tableservice.hudi.action.compact import CompactionTask, slice_at, task_reader
from tableservice.hudi.action.indexing import RecordBuilder
from tableservice.hudi.action.tasks import CompactionInput, compaction_tasks
from tableservice.hudi.metadata.delta_commit import MetadataRecord
from tableservice.hudi.metadata.initialize import Records, SharedValueRecords, TableSource, record_index_records
from tableservice.hudi.metadata.keys import MetadataPartition, is_secondary_index, secondary_index_key
from tableservice.hudi.metadata.record_index import location, secondary_texts
from tableservice.hudi.metadata.records import record_index_record, secondary_index_record
from tableservice.hudi.metadata.secondary_index import secondary_column
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
    payload = task_payload(tasks, storage_options)
    slots = executor.task_slots()
    partitions = max(1, min(slots if slots is not None else len(payload), len(payload)))
    payload = balanced(payload, [t.size_hint for t in tasks], partitions)
    spark.addTag(tag)
    try:
        df = spark.range(0, len(payload), 1, partitions)
        table = df.mapInArrow(_key_worker(payload, column), KEYS_SCHEMA).toArrow()
        # the worker numbers slices by their place in the balanced payload: back to the place in `tasks`
        where = {(t.partition_path, t.file_id): i for i, t in enumerate(tasks)}
        placed = [where[(t.partition_path, t.file_id)] for t in map(CompactionTask.from_json, payload)]
        table = table.set_column(1, "slice", pa.array(placed, pa.int32()).take(table.column("slice")))
    except Exception as e:
        typed = decode_task_error(str(e))
        if typed is not None:
            raise typed from e
        raise SparkJobError(f"job {tag} failed: {short_error(e)}") from e
    finally:
        spark.removeTag(tag)
    return table if table.num_rows else empty


def spark_record_builder(
    executor: SparkExecutor, table_name: str, instant_time: str, storage_options: StorageOptions | None = None
) -> RecordBuilder:
    """Records of the record index and secondary indexes from keys read on Spark; other partitions as usual."""

    def build(source: TableSource, partition: str) -> Records:
        secondary = is_secondary_index(partition)
        if partition != RECORD_INDEX and not secondary:
            return source.records(partition)
        table = source.table
        upto = source.as_of or ""
        view = table.file_system_view(timeline=source.timeline, listing=table.list_storage_files())
        slices = view.latest_merged_slices()
        tasks = compaction_tasks(table, source.timeline, upto, [CompactionInput.of(s) for s in slices])
        column = secondary_column(table, partition) if secondary else None
        tag = f"tableservice|{table_name}|indexing|{instant_time}|{partition}"
        rows = read_keys(executor, tasks, column=column, tag=tag, storage_options=storage_options)
        if secondary:
            value = secondary_index_record()
            keys, texts = rows.column("key").to_pylist(), rows.column("value").to_pylist()
            entries = {secondary_index_key(v, k): None for k, v in zip(keys, texts, strict=True)}
            return [MetadataRecord(partition, e, value) for e in entries]
        tz = table.active.tz
        locations = [
            record_index_record(location(s.partition_path, s.file_id, instant_epoch_ms(s.base_instant_time, tz)))
            for s in slices
        ]
        keys = rows.column("key").combine_chunks()
        if pc.count_distinct(keys).as_py() == len(keys):
            return SharedValueRecords(partition, keys, rows.column("slice").combine_chunks(), locations)
        millis = {(s.partition_path, s.file_id): instant_epoch_ms(s.base_instant_time, tz) for s in slices}
        where = [(s.partition_path, s.file_id) for s in slices]
        per_key = ((k, *where[i]) for k, i in zip(keys.to_pylist(), rows.column("slice").to_pylist(), strict=True))
        return record_index_records(per_key, millis)  # a key in two slices: the last one read wins

    return build
