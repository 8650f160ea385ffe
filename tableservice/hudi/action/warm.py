"""A worker process's one-time costs, paid ahead of its first task: the format layer's imports and the first call
of each hot path (Parquet write with Hudi's footer and bloom filter, Parquet read, the sorts and gathers of
clustering), run on a few rows written to a temporary local file.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tableservice.hudi.action.cluster import sort_rows
from tableservice.hudi.file_group.base_file import write_base_file
from tableservice.hudi.table.schema import add_meta_fields, avro_schema_from_arrow
from tableservice.storage import Storage

_ROWS = 64


def _sample() -> tuple[pa.Table, dict[str, object]]:
    """A few rows of the common column types, with Hudi's meta fields."""
    n = _ROWS
    data = pa.table(
        {
            "key": pa.array([f"key-{i:04d}" for i in range(n)], pa.string()),
            "ts": pa.array(range(n), pa.int64()),
            "value": pa.array([float((i * 37) % n) for i in range(n)], pa.float64()),
            "amount": pa.array([i * 3 for i in range(n)], pa.decimal128(10, 2)),
            "count": pa.array([i % 5 for i in range(n)], pa.int32()),
            "day": pa.array(range(n), pa.date32()),
            "flag": pa.array([i % 2 == 0 for i in range(n)], pa.bool_()),
        }
    )
    avro = add_meta_fields(avro_schema_from_arrow(data.schema, "warm_record", "hoodie.warm"))
    meta = {
        "_hoodie_commit_time": pa.array(["00000000000000000"] * n, pa.string()),
        "_hoodie_commit_seqno": pa.array([f"00000000000000000_0_{i}" for i in range(n)], pa.string()),
        "_hoodie_record_key": data.column("key"),
        "_hoodie_partition_path": pa.array([""] * n, pa.string()),
        "_hoodie_file_name": pa.array(["warm.parquet"] * n, pa.string()),
    }
    for i, (name, column) in enumerate(meta.items()):
        data = data.add_column(i, name, column)
    return data, avro


_DICTIONARIES = ("_hoodie_commit_time", "_hoodie_partition_path")


def warm_kernels() -> None:
    """Write, read back, sort and gather a few rows as the tasks do (a temporary file, deleted)."""
    table, avro = _sample()
    storage = Storage()
    with tempfile.TemporaryDirectory(prefix="tableservice-warm-") as tmp:
        for codec in ("snappy", "gzip"):
            location = str(Path(tmp) / f"warm-{codec}.parquet")
            write_base_file(storage, location, table, avro_schema=avro, compression=codec, file_name="warm.parquet")
            with storage.open_input_file(location) as f:
                read = pa.Table.from_batches(list(pq.ParquetFile(f).iter_batches(use_threads=False)))
            chunked = pa.concat_tables([read.slice(0, _ROWS // 2), read.slice(_ROWS // 2)])
            # A clustering group's low-cardinality columns: read as dictionaries, gathered, written from them.
            with storage.open_input_file(location) as f:
                as_dict = pq.ParquetFile(f, read_dictionary=_DICTIONARIES).read(use_threads=False)
            gathered = pa.concat_tables([as_dict.slice(0, _ROWS // 2), as_dict.slice(_ROWS // 2)]).take(
                pa.array(range(_ROWS - 1, -1, -1))
            )
            write_base_file(
                storage,
                location,
                gathered,
                avro_schema=avro,
                compression=codec,
                file_name="warm.parquet",
                dictionary_columns=_DICTIONARIES,
            )
            sort_rows(chunked, ("value",), "linear")
            sort_rows(chunked, ("count",), "linear")  # few distinct values: the rank sort
            sort_rows(chunked, ("key",), "linear")
            sort_rows(chunked, ("value", "ts"), "z-order")
