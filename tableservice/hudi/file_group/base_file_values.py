"""Values a base file's writer checks and orders: the min/max record keys under Java's `String.compareTo`, and the
null array elements Hudi's Parquet layout cannot hold."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tableservice.errors import UnsupportedTableError


def java_string_min_max(keys: pa.Array) -> tuple[str, str] | None:
    """Min and max of non-null strings under Java's `String.compareTo` (UTF-16 code units)."""
    if len(keys) == 0:
        return None
    if keys.null_count:
        raise ValueError("a record key is null")
    arr = keys.cast(pa.large_string())
    data = arr.buffers()[2]
    # UTF-8 byte order equals UTF-16 order unless a key holds a supplementary character (4-byte UTF-8).
    if data is None or not np.any(np.frombuffer(data, dtype=np.uint8) >= 0xF0):
        mm = pc.min_max(arr)
        return str(mm["min"].as_py()), str(mm["max"].as_py())
    values = arr.to_pylist()
    return min(values, key=utf16), max(values, key=utf16)


def utf16(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def check_no_null_elements(arr: pa.Array, name: str) -> None:
    """parquet-avro's old list layout cannot hold null array elements; refuse them as Hudi does."""
    typ = arr.type
    if isinstance(arr, pa.ChunkedArray):
        for chunk in arr.chunks:
            check_no_null_elements(chunk, name)
        return
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        values = arr.flatten()
        if values.null_count:
            raise UnsupportedTableError(f"array column {name!r} holds a null element; Hudi's Parquet layout forbids it")
        check_no_null_elements(values, name)
    elif pa.types.is_map(typ):
        offsets = arr.offsets
        first, last = offsets[0].as_py(), offsets[-1].as_py()
        check_no_null_elements(arr.items.slice(first, last - first), name)
    elif pa.types.is_struct(typ):
        for i in range(typ.num_fields):
            check_no_null_elements(arr.field(i), f"{name}.{typ.field(i).name}")
