"""Column statistics of data files as Hudi writers store them in the metadata table (HUDI-MDT-NOTES §3.1-3.3).

A `ColumnStatsMetadata` payload (the `HoodieMetadataColumnStats` Avro record, as a dict in the shape fastavro reads
and writes) describes one column of one data file:
- `valueCount` = rows (nulls included), `nullCount`, `minValue`/`maxValue` over the non-null values (null when
  there is none), `totalSize`/`totalUncompressedSize` = the sums of the column's Parquet column-chunk compressed /
  uncompressed sizes (0 for log files), `isDeleted=false`, `isTightBound=false`, `fileName` without folder.
- Bounds are wrapper records given as `(full name, {"value": v})` union branches.
- Index version V1 (table version 8): the wrapper follows the value (`IntWrapper`/`LongWrapper`, `DateWrapper` days,
  timestamps and times as their raw `LongWrapper`/`IntWrapper` number, decimals as `DecimalWrapper` rescaled to
  scale 15, binary as `BytesWrapper`); the payload has no `valueType`.
- V2 (table version 9) adds `valueType = {typeOrdinal, additionalInfo}` (Hudi's `ValueType` enum, see
  `ValueType` below) and stores every value in its primitive wrapper; decimals are `BytesWrapper` holding the
  unscaled value at the column's own scale as minimal big-endian two's complement, `additionalInfo` =
  `"precision,scale"`.
- Base files with no rows get no record; a log file gets the stats of the data records written in it, and one
  holding no data record (only deletes) gets `valueCount=0`, null bounds (V2: `typeOrdinal` NULL).
- A deleted file's record (clean) is a tombstone: `isDeleted=true`, null bounds, counts and sizes -1.

Bounds compare as Python compares the values (text by code point = UTF-8 bytes, as Parquet orders them; bytes
unsigned); floats as Hudi sees them (`_Accumulator`). Columns are top-level fields or dotted paths through structs;
a column a file lacks gets no record; types the index cannot hold raise `UnsupportedTableError`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Context, Decimal
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tableservice.errors import CorruptFileError, UnsupportedTableError
from tableservice.hudi.models.avsc_builders import NAMESPACE
from tableservice.storage import Storage, join

V1 = "V1"
V2 = "V2"
INDEX_DEFINITIONS_PATH = ".hoodie/.index_defs/index.json"
# `hoodie.metadata.index.column.stats.max.columns.to.index` (default 32): data columns indexed without a column list.
MAX_COLUMNS_TO_INDEX = 32
# Indexed ahead of the data columns whenever meta fields are populated (Hudi keeps them in a sorted map).
ALWAYS_INDEXED_META_COLUMNS = ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_record_key")
_META_COLUMNS = frozenset(
    (*ALWAYS_INDEXED_META_COLUMNS, "_hoodie_commit_seqno", "_hoodie_file_name", "_hoodie_operation")
)
_EXACT = Context(prec=200)  # decimal arithmetic without rounding


class ValueType(IntEnum):
    """`org.apache.hudi.stats.ValueType`: `valueType.typeOrdinal` of index version V2 is the ordinal."""

    V1 = 0
    NULL = 1
    BOOLEAN = 2
    INT = 3
    LONG = 4
    FLOAT = 5
    DOUBLE = 6
    STRING = 7
    BYTES = 8
    FIXED = 9
    DECIMAL = 10
    UUID = 11
    DATE = 12
    TIME_MILLIS = 13
    TIME_MICROS = 14
    TIMESTAMP_MILLIS = 15
    TIMESTAMP_MICROS = 16
    TIMESTAMP_NANOS = 17
    LOCAL_TIMESTAMP_MILLIS = 18
    LOCAL_TIMESTAMP_MICROS = 19
    LOCAL_TIMESTAMP_NANOS = 20


@dataclass(frozen=True)
class ColumnStatsIndex:
    """What the `column_stats` partition indexes: the columns (in index order) and the index version."""

    columns: tuple[str, ...]
    version: str  # V1 | V2

    def __post_init__(self) -> None:
        if self.version not in (V1, V2):
            raise UnsupportedTableError(f"column stats index version {self.version!r} is not supported")


def default_version(table_version: int) -> str:
    """The index version Hudi writes when the definition names none: V2 from table version 9 on."""
    return V2 if table_version >= 9 else V1


def index_from_definitions(
    definitions: Mapping[str, Any] | None, table_version: int, schema: pa.Schema | None = None
) -> ColumnStatsIndex | None:
    """The column stats index from the parsed `indexDefinitions` of `index.json`; None when the definitions exist
    but hold no `column_stats` entry. Without definitions (table version 6, or no `index.json`) the columns are
    guessed from `schema` (`default_columns`); None when there is no schema either."""
    if definitions is None:
        if schema is None:
            return None
        return ColumnStatsIndex(default_columns(schema), default_version(table_version))
    entry = definitions.get("column_stats")
    if not isinstance(entry, Mapping):
        return None
    fields = entry.get("sourceFields") or []
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise CorruptFileError(f"column_stats sourceFields is not a list of names: {fields!r}")
    version = entry.get("version")
    return ColumnStatsIndex(tuple(fields), version if isinstance(version, str) else default_version(table_version))


def read_index_definitions(storage: Storage, base_path: str) -> dict[str, dict[str, Any]] | None:
    """The `indexDefinitions` of `.hoodie/.index_defs/index.json` (table version 8+): index name -> definition;
    None when the table has no such file."""
    location = join(base_path, INDEX_DEFINITIONS_PATH)
    if not storage.exists(location):
        return None
    try:
        doc = json.loads(storage.read_bytes(location))
    except ValueError as e:
        raise CorruptFileError(f"index definitions are not JSON: {e}", path=location) from e
    found = doc.get("indexDefinitions") if isinstance(doc, dict) else None
    if not isinstance(found, dict):
        raise CorruptFileError("index definitions lack `indexDefinitions`", path=location)
    return {k: v for k, v in found.items() if isinstance(v, dict)}


def write_index_definitions(storage: Storage, base_path: str, definitions: Mapping[str, Mapping[str, Any]]) -> None:
    """Replace `.hoodie/.index_defs/index.json` with these definitions (index name -> definition)."""
    doc = {"indexDefinitions": {name: dict(d) for name, d in sorted(definitions.items())}}
    storage.write_bytes(join(base_path, INDEX_DEFINITIONS_PATH), json.dumps(doc, indent=2).encode("utf-8"))


def column_stats_index(
    storage: Storage, base_path: str, table_version: int, schema: pa.Schema | None = None
) -> ColumnStatsIndex | None:
    """The column stats index of the table at `base_path`, from `.hoodie/.index_defs/index.json` when present
    (table version 8+), else guessed from `schema` (see `index_from_definitions`)."""
    definitions = read_index_definitions(storage, base_path) if table_version >= 8 else None
    try:
        return index_from_definitions(definitions, table_version, schema)
    except CorruptFileError as e:
        raise e.with_context(path=join(base_path, INDEX_DEFINITIONS_PATH)) from e


def default_columns(schema: pa.Schema, max_columns: int = MAX_COLUMNS_TO_INDEX) -> tuple[str, ...]:
    """A guess at the columns Hudi indexes when no column list is configured (Hudi 1.x rule; no fixture shows it):
    the always-indexed meta columns the schema holds, then the first `max_columns` other top-level fields of a
    supported type (not struct, list or map; decimals only within decimal(30,15))."""
    names = set(schema.names)
    meta = [c for c in ALWAYS_INDEXED_META_COLUMNS if c in names]
    data = [f.name for f in schema if f.name not in _META_COLUMNS and _default_indexable(f.type)]
    return (*meta, *data[:max_columns])


def _default_indexable(t: pa.DataType) -> bool:
    if pa.types.is_nested(t):
        return False
    if pa.types.is_decimal(t):
        return bool(t.scale <= 15 and t.precision - t.scale <= 15)  # fits DecimalWrapper decimal(30,15)
    return True


# ---- the payloads


def parquet_file_stats(source: bytes | pa.NativeFile, file_name: str, index: ColumnStatsIndex) -> list[dict[str, Any]]:
    """The payloads of one Parquet base file, one per indexed column it holds; none when it has no rows."""
    reader = pq.ParquetFile(pa.BufferReader(source) if isinstance(source, bytes) else source)
    meta = reader.metadata
    if meta.num_rows == 0:
        return []
    arrow_schema = reader.schema_arrow
    columns = [c for c in index.columns if _field_type(arrow_schema, c) is not None]
    for leaf in (reader.schema.column(i) for i in range(len(reader.schema))):
        if leaf.path in columns and leaf.physical_type == "INT96":
            raise UnsupportedTableError(f"column {leaf.path}: Parquet INT96 timestamps cannot be indexed")
    sizes = {c: (0, 0) for c in columns}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for chunk in (group.column(i) for i in range(group.num_columns)):
            if chunk.path_in_schema in sizes:
                done = sizes[chunk.path_in_schema]
                sizes[chunk.path_in_schema] = (
                    done[0] + chunk.total_compressed_size,
                    done[1] + chunk.total_uncompressed_size,
                )
    accs = {c: _Accumulator(c, _field_type(arrow_schema, c), footer=True) for c in columns}
    tops = sorted({c.split(".", 1)[0] for c in columns})
    for g in range(meta.num_row_groups):
        batch = reader.read_row_group(g, columns=tops, use_threads=False)
        for c in columns:
            accs[c].add(_column(batch, c))
    return [accs[c].payload(file_name, index.version, sizes[c]) for c in columns]


def records_stats(table: pa.Table, file_name: str, index: ColumnStatsIndex) -> list[dict[str, Any]]:
    """The payloads of one log file from the data records written in it (all its data blocks, deletes left out);
    sizes are 0. Without data records every indexed column gets an empty payload (valueCount 0)."""
    if table.num_rows == 0:
        return [_payload(file_name, c, index.version, None, 0, 0, (0, 0)) for c in index.columns]
    out = []
    for c in index.columns:
        t = _field_type(table.schema, c)
        if t is None:
            continue
        acc = _Accumulator(c, t, footer=False)
        acc.add(_column(table, c))
        out.append(acc.payload(file_name, index.version, (0, 0)))
    return out


def tombstone(file_name: str, column: str, version: str) -> dict[str, Any]:
    """The payload Hudi writes for a column of a deleted file (clean): `isDeleted`, null bounds, counts -1."""
    return _payload(file_name, column, version, None, -1, -1, (-1, -1), deleted=True)


def _payload(
    file_name: str,
    column: str,
    version: str,
    bounds: tuple[Any, Any] | None,
    count: int,
    nulls: int,
    sizes: tuple[int, int],
    *,
    deleted: bool = False,
    value_type: tuple[ValueType, str | None] = (ValueType.NULL, None),
) -> dict[str, Any]:
    low, high = bounds or (None, None)
    out: dict[str, Any] = {
        "fileName": file_name,
        "columnName": column,
        "minValue": low,
        "maxValue": high,
        "valueCount": count,
        "nullCount": nulls,
        "totalSize": sizes[0],
        "totalUncompressedSize": sizes[1],
        "isDeleted": deleted,
        "isTightBound": False,
    }
    if version == V2:
        out["valueType"] = {"typeOrdinal": int(value_type[0]), "additionalInfo": value_type[1]}
    return out


# ---- columns and values


def _field_type(schema: pa.Schema, column: str) -> pa.DataType | None:
    """The type of a top-level field or dotted struct path; None when the schema lacks it."""
    if column in schema.names:
        return schema.field(column).type
    head, *rest = column.split(".")
    if not rest or head not in schema.names:
        return None
    t: pa.DataType = schema.field(head).type
    for part in rest:
        if not pa.types.is_struct(t) or t.get_field_index(part) < 0:
            return None
        t = t.field(part).type
    return t


def _column(table: pa.Table, column: str) -> pa.Array:
    """The values of a column, a struct child's nulls including its parents' nulls."""
    if column in table.column_names:
        return table.column(column).combine_chunks()
    head, *rest = column.split(".")
    arr = table.column(head).combine_chunks()
    for part in rest:
        arr = arr.flatten()[arr.type.get_field_index(part)]
    return arr


@dataclass(frozen=True)
class _Kind:
    """How a column's values are stored: V1 wrapper, V2 type and wrapper, and the cast before comparing."""

    v1_wrapper: str
    v2_type: ValueType
    v2_wrapper: str = ""  # the V1 wrapper when empty
    as_int: pa.DataType | None = None  # compare the raw numbers (dates, times, timestamps)


_UNITS = {"ms": "MILLIS", "us": "MICROS", "ns": "NANOS"}


def _kind(column: str, t: pa.DataType) -> _Kind:
    is_ = pa.types
    if is_.is_boolean(t):
        return _Kind("BooleanWrapper", ValueType.BOOLEAN)
    if is_.is_string(t) or is_.is_large_string(t):
        return _Kind("StringWrapper", ValueType.STRING)
    if is_.is_binary(t) or is_.is_large_binary(t):
        return _Kind("BytesWrapper", ValueType.BYTES)
    if is_.is_fixed_size_binary(t):
        return _Kind("BytesWrapper", ValueType.FIXED)
    if is_.is_float32(t):
        return _Kind("FloatWrapper", ValueType.FLOAT)
    if is_.is_float64(t):
        return _Kind("DoubleWrapper", ValueType.DOUBLE)
    if is_.is_int64(t) or is_.is_uint32(t):
        return _Kind("LongWrapper", ValueType.LONG)
    if is_.is_int8(t) or is_.is_int16(t) or is_.is_int32(t) or is_.is_uint8(t) or is_.is_uint16(t):
        return _Kind("IntWrapper", ValueType.INT)
    if is_.is_date32(t):
        return _Kind("DateWrapper", ValueType.DATE, "IntWrapper", pa.int32())
    if is_.is_timestamp(t) and t.unit in _UNITS:
        utc = "TIMESTAMP_" if t.tz is not None else "LOCAL_TIMESTAMP_"
        return _Kind("LongWrapper", ValueType[utc + _UNITS[t.unit]], as_int=pa.int64())
    if is_.is_time32(t) and t.unit == "ms":
        return _Kind("IntWrapper", ValueType.TIME_MILLIS, as_int=pa.int32())
    if is_.is_time64(t) and t.unit == "us":
        return _Kind("LongWrapper", ValueType.TIME_MICROS, as_int=pa.int64())
    if is_.is_decimal(t):
        return _Kind("DecimalWrapper", ValueType.DECIMAL, "BytesWrapper")
    raise UnsupportedTableError(f"column {column} of type {t} cannot be held by the column stats index")


class _Accumulator:
    """Counts and bounds of one column over the batches of one file. `footer=True` orders floats as Hudi sees them
    in a Parquet footer (NaN ignored, a zero minimum is -0.0 and a zero maximum +0.0); `footer=False` as Java's
    `Double.compareTo` orders the records of a log file (-0.0 below +0.0, NaN above everything)."""

    def __init__(self, column: str, t: pa.DataType | None, *, footer: bool) -> None:
        assert t is not None
        self.column = column
        self.type = t.value_type if pa.types.is_dictionary(t) else t
        self.kind = _kind(column, self.type)
        self.footer = footer
        self.count = 0
        self.nulls = 0
        self.low: Any = None
        self.high: Any = None
        self.saw_nan = False

    def add(self, values: pa.Array) -> None:
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        self.count += len(values)
        self.nulls += values.null_count
        if values.null_count == len(values):
            return
        if pa.types.is_floating(self.type):
            self._add_floats(values.drop_null().to_numpy(zero_copy_only=False))
            return
        if self.kind.as_int is not None:
            values = values.cast(self.kind.as_int)
        bounds = pc.min_max(values)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        self.low = low if self.low is None or low < self.low else self.low
        self.high = high if self.high is None or high > self.high else self.high

    def _add_floats(self, x: npt.NDArray[np.floating[Any]]) -> None:
        nan = np.isnan(x)
        self.saw_nan = self.saw_nan or bool(nan.any())
        x = x[~nan]
        if x.size == 0:
            return
        low, high = float(x.min()), float(x.max())
        zeros = np.signbit(x[x == 0])
        if low == 0:
            low = -0.0 if bool(zeros.any()) else 0.0
        if high == 0:
            high = 0.0 if bool((~zeros).any()) else -0.0
        self.low = low if self.low is None or _java_less(low, self.low) else self.low
        self.high = high if self.high is None or _java_less(self.high, high) else self.high

    def bounds(self) -> tuple[Any, Any]:
        if not pa.types.is_floating(self.type):
            return self.low, self.high
        if self.footer:
            if self.low is None:
                return None, None
            return (-0.0 if self.low == 0 else self.low), (0.0 if self.high == 0 else self.high)
        if self.saw_nan:
            return (math.nan if self.low is None else self.low), math.nan
        return self.low, self.high

    def payload(self, file_name: str, version: str, sizes: tuple[int, int]) -> dict[str, Any]:
        low, high = self.bounds()
        t = self.type
        info = f"{t.precision},{t.scale}" if self.kind.v2_type is ValueType.DECIMAL else None
        bounds = (self._wrap(low, version), self._wrap(high, version))
        value_type = (self.kind.v2_type, info)
        return _payload(file_name, self.column, version, bounds, self.count, self.nulls, sizes, value_type=value_type)

    def _wrap(self, value: Any, version: str) -> tuple[str, dict[str, Any]] | None:
        if value is None:
            return None
        if self.kind.v2_type is ValueType.DECIMAL:
            unscaled = _unscaled(value, self.type.scale)
            if version == V2:
                return _wrapper("BytesWrapper", _twos_complement(unscaled))
            return _wrapper("DecimalWrapper", _rescaled(unscaled, self.type.scale))
        return _wrapper((version == V2 and self.kind.v2_wrapper) or self.kind.v1_wrapper, value)


def _java_less(a: float, b: float) -> bool:
    """`Double.compare(a, b) < 0` for non-NaN values: -0.0 sorts below +0.0."""
    return a < b or (a == b == 0 and math.copysign(1.0, a) < math.copysign(1.0, b))


def _wrapper(name: str, value: Any) -> tuple[str, dict[str, Any]]:
    return (f"{NAMESPACE}.{name}", {"value": value})


def _unscaled(value: Decimal, scale: int) -> int:
    """The unscaled integer of a decimal at `scale` (exact: the value carries at most that scale)."""
    return int(value.scaleb(scale, context=_EXACT))


def _twos_complement(n: int) -> bytes:
    """Java's `BigInteger.toByteArray()`: minimal big-endian two's complement (0 is one zero byte)."""
    bits = n.bit_length() if n >= 0 else (~n).bit_length()
    return n.to_bytes(bits // 8 + 1, "big", signed=True)


def _rescaled(unscaled: int, scale: int) -> Decimal:
    """`unscaled * 10**-scale` at DecimalWrapper's scale 15, as Hudi upcasts before wrapping."""
    value = Decimal(unscaled).scaleb(-scale, context=_EXACT).quantize(Decimal(1).scaleb(-15), context=_EXACT)
    if scale > 15 or len(value.as_tuple().digits) > 30:
        raise UnsupportedTableError(f"decimal {value} does not fit DecimalWrapper's decimal(30,15)")
    return value
