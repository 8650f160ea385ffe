"""Preparing incoming records: record keys, partition paths, de-duplication and Hudi meta fields."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tableservice.errors import PermanentError
from tableservice.hudi.file_group.filenames import DEFAULT_PARTITION_PATH, escape_partition_value
from tableservice.hudi.table.config import TableConfig

RECORD_KEY = "_hoodie_record_key"
PARTITION_PATH = "_hoodie_partition_path"
COMMIT_TIME = "_hoodie_commit_time"
COMMIT_SEQNO = "_hoodie_commit_seqno"
FILE_NAME = "_hoodie_file_name"
META_FIELDS = (COMMIT_TIME, COMMIT_SEQNO, RECORD_KEY, PARTITION_PATH, FILE_NAME)
NULL_KEY = "__null__"
EMPTY_KEY = "__empty__"


def _as_text(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    return column if pa.types.is_string(column.type) else column.cast(pa.string())


def record_keys(config: TableConfig, records: pa.Table) -> pa.Array:
    """Record keys as Hudi's key generators build them: the value for one key field, `f1:v1,f2:v2` for several
    (complex key generator), with `__null__` / `__empty__` for missing values of complex keys."""
    fields = config.record_key_fields
    missing = [f for f in fields if f not in records.column_names]
    if missing:
        raise PermanentError(f"records lack record key fields {missing}", table=config.name)
    complex_keys = len(fields) > 1 or (config.get("hoodie.table.keygenerator.type") == "COMPLEX")
    if not complex_keys:
        keys = _as_text(records.column(fields[0]))
        if keys.null_count:
            raise PermanentError(
                f"record key field {fields[0]!r} is null in {keys.null_count} records", table=config.name
            )
        return keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    parts: list[pa.Array | pa.ChunkedArray] = []
    for i, name in enumerate(fields):
        text = _as_text(records.column(name))
        text = pc.if_else(pc.equal(text, ""), EMPTY_KEY, text)
        text = pc.fill_null(text, NULL_KEY)
        prefix = ("," if i else "") + f"{name}:"
        parts.append(pc.binary_join_element_wise(prefix, text, ""))
    joined = pc.binary_join_element_wise(*parts, "")
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def partition_paths(config: TableConfig, records: pa.Table) -> pa.Array:
    """Partition paths of records (`""` for non-partitioned tables)."""
    fields = config.partition_fields
    n = records.num_rows
    if not fields:
        return pa.array([""] * n, pa.string())
    pieces: list[pa.Array] = []
    for i, name in enumerate(fields):
        if name not in records.column_names:
            raise PermanentError(f"records lack partition field {name!r}", table=config.name)
        text = _as_text(records.column(name))
        values = np.asarray(pc.fill_null(text, "").to_numpy(zero_copy_only=False), dtype=object)
        values[values == ""] = DEFAULT_PARTITION_PATH
        if config.url_encode_partitions:
            values = np.array([escape_partition_value(v) for v in values], dtype=object)
        if config.hive_style_partitioning:
            values = np.char.add(f"{name}=", values.astype(str)).astype(object)
        if i:
            values = np.char.add("/", values.astype(str)).astype(object)
        pieces.append(pa.array(values, pa.string()))
    if len(pieces) == 1:
        return pieces[0]
    joined = pc.binary_join_element_wise(*pieces, "")
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def deduplicate(
    records: pa.Table, keys: pa.Array, partitions: pa.Array, ordering: tuple[str, ...], event_time: bool
) -> np.ndarray:
    """Row indices that survive pre-combining: one row per (partition, key); under event-time ordering the
    largest ordering value wins (ties: the later row), otherwise the later row."""
    n = records.num_rows
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order_cols: list[tuple[str, str, str]] = []
    helper = pa.table({"p": partitions, "k": keys, "i": pa.array(np.arange(n, dtype=np.int64))})
    order_cols += [("p", "ascending", "at_start"), ("k", "ascending", "at_start")]
    if event_time:
        for j, name in enumerate(ordering):
            helper = helper.append_column(f"o{j}", records.column(name))
            order_cols.append((f"o{j}", "ascending", "at_start"))
    order_cols.append(("i", "ascending", "at_start"))
    sorted_idx = pc.sort_indices(helper, sort_keys=order_cols).to_numpy()
    p = np.asarray(partitions.to_numpy(zero_copy_only=False), dtype=object)[sorted_idx]
    k = np.asarray(keys.to_numpy(zero_copy_only=False), dtype=object)[sorted_idx]
    last = np.ones(n, dtype=bool)
    last[:-1] = (p[1:] != p[:-1]) | (k[1:] != k[:-1])
    return np.sort(sorted_idx[last])


def with_meta_fields(
    records: pa.Table,
    instant_time: str,
    keys: pa.Array,
    partitions: pa.Array,
    file_name: str,
    task_partition: int,
    seq_start: int = 0,
) -> pa.Table:
    """Records with the five meta columns first, as Hudi writes them into base files and log blocks."""
    n = records.num_rows
    seq = np.char.add(f"{instant_time}_{task_partition}_", np.arange(seq_start, seq_start + n).astype(str))
    meta = {
        COMMIT_TIME: pa.array([instant_time] * n, pa.string()),
        COMMIT_SEQNO: pa.array(seq.astype(object), pa.string()),
        RECORD_KEY: keys,
        PARTITION_PATH: partitions,
        FILE_NAME: pa.array([file_name] * n, pa.string()),
    }
    data = records.drop_columns([c for c in META_FIELDS if c in records.column_names])
    return pa.Table.from_arrays([*meta.values(), *data.columns], names=[*meta.keys(), *data.column_names])
