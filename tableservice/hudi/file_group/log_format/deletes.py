"""Delete block content: the keys (and ordering values) of deleted records.

Content: int32 version, int32 length, then `length` bytes. Version 3 (all current Hudi releases) holds one Avro
datum of HoodieDeleteRecordList: `{deleteRecordList: array<{recordKey: ["null", string], partitionPath: ["null",
string], orderingVal: union}>}`. The orderingVal union is, in Hudi's Java schema, null followed by eleven
single-field wrapper records, in this order (the union index is what is on disk):

    1 boolean  2 int  3 long  4 float  5 double  6 bytes  7 string  8 date (int days)
    9 decimal (bytes, precision 30, scale 15)  10 time-micros (long)  11 timestamp-micros (plain long)

Versions 1 and 2 hold Java-serialised (Kryo) key arrays and are not supported (UnsupportedTableError).

Decoded deletes are an Arrow table with columns `record_key` (string), `partition_path` (string),
`ordering_value` and `ordering_value_kind` (string: null, boolean, int, long, float, double, bytes, string,
date, decimal, time_micros, timestamp_micros). `ordering_value` gets one Arrow type for the whole block:
int32 (only int), int64 (int and long), float32 (only float), float64 (any mix of numbers with a float or
double whose integers a double holds exactly), bool, string, binary, date32, decimal128(30, 15), time64[us]
or timestamp[us, tz=UTC] when all values have that kind; null when every value is null; and, for any other
mix, a string column holding each value's text (ints and floats in Python's str form, bytes in hex,
dates/times in ISO form, decimals as plain numbers).
Hudi writes `int 0` when a delete carries no ordering value ("natural order": the delete wins regardless of
ordering); recognise it with `ordering_value_kind == "int"` and a value of 0.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import pyarrow as pa

from tableservice.errors import CorruptFileError, PermanentError, UnsupportedTableError
from tableservice.hudi.file_group.log_format.blocks import BLOCK_CONTENT_VERSION

ORDERING_KINDS: tuple[str, ...] = (
    "null",
    "boolean",
    "int",
    "long",
    "float",
    "double",
    "bytes",
    "string",
    "date",
    "decimal",
    "time_micros",
    "timestamp_micros",
)
_NS = "org.apache.hudi.avro.model"
_WRAPPERS: dict[str, tuple[str, Any]] = {
    "boolean": ("BooleanWrapper", "boolean"),
    "int": ("IntWrapper", "int"),
    "long": ("LongWrapper", "long"),
    "float": ("FloatWrapper", "float"),
    "double": ("DoubleWrapper", "double"),
    "bytes": ("BytesWrapper", "bytes"),
    "string": ("StringWrapper", "string"),
    "date": ("DateWrapper", "int"),
    "decimal": ("DecimalWrapper", {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15}),
    "time_micros": ("TimeMicrosWrapper", {"type": "long", "logicalType": "time-micros"}),
    "timestamp_micros": ("TimestampMicrosWrapper", "long"),
}
_NAME_TO_KIND = {f"{_NS}.{name}": kind for kind, (name, _) in _WRAPPERS.items()}
_KIND_TO_NAME = {kind: f"{_NS}.{name}" for kind, (name, _) in _WRAPPERS.items()}

DELETE_RECORD_LIST_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieDeleteRecordList",
    "namespace": _NS,
    "fields": [
        {
            "name": "deleteRecordList",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "HoodieDeleteRecord",
                    "fields": [
                        {"name": "recordKey", "type": ["null", "string"], "default": None},
                        {"name": "partitionPath", "type": ["null", "string"], "default": None},
                        {
                            "name": "orderingVal",
                            "type": ["null"]
                            + [
                                {"type": "record", "name": name, "fields": [{"name": "value", "type": t}]}
                                for name, t in _WRAPPERS.values()
                            ],
                            "default": None,
                        },
                    ],
                },
            },
        }
    ],
}
_PARSED = fastavro.parse_schema(DELETE_RECORD_LIST_SCHEMA)
_Q15 = decimal.Decimal(1).scaleb(-15)
_DEC_CONTEXT = decimal.Context(prec=30, traps=[decimal.InvalidOperation])


@dataclass(frozen=True)
class DeleteRecord:
    """One deleted key. `ordering_kind` None infers the kind from the value: the default 0 becomes `int`
    (Hudi's "no ordering value"), other ints `long`, float `double`, str `string`, bytes `bytes`, bool
    `boolean`, Decimal `decimal`, datetime `timestamp_micros`, date `date`, time `time_micros`, None `null`."""

    record_key: str | None
    partition_path: str | None
    ordering_value: Any = 0
    ordering_kind: str | None = None

    @property
    def kind(self) -> str:
        return self.ordering_kind if self.ordering_kind is not None else _infer_kind(self.ordering_value)


def _infer_kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "int" if v == 0 else "long"
    if isinstance(v, float):
        return "double"
    if isinstance(v, str):
        return "string"
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(v, decimal.Decimal):
        return "decimal"
    if isinstance(v, dt.datetime):
        return "timestamp_micros"
    if isinstance(v, dt.date):
        return "date"
    if isinstance(v, dt.time):
        return "time_micros"
    raise PermanentError(f"no Hudi ordering value kind for {type(v).__name__} value {v!r}")


# --- decoding ----------------------------------------------------------------------------------


def decode_delete_content(content: bytes) -> pa.Table:
    """Decode delete block content into the delete table described in the module docstring."""
    if len(content) < 8:
        raise CorruptFileError(f"delete block content of {len(content)} bytes is shorter than its 8-byte prefix")
    version, length = struct.unpack_from(">ii", content, 0)
    if version in (1, 2):
        raise UnsupportedTableError(
            f"delete block content version {version} (Java-serialised keys, Hudi < 0.11) is not supported"
        )
    if version != BLOCK_CONTENT_VERSION:
        raise CorruptFileError(f"unknown delete block content version {version}")
    if length < 0 or 8 + length > len(content):
        raise CorruptFileError(f"delete block payload length {length} runs past {len(content)} content bytes")
    try:
        datum = fastavro.schemaless_reader(io.BytesIO(content[8 : 8 + length]), _PARSED, None, return_record_name=True)
    except Exception as e:  # fastavro raises many kinds of errors on bad bytes
        raise CorruptFileError(f"delete block payload does not decode: {e!r}") from e
    if not isinstance(datum, dict) or not isinstance(datum.get("deleteRecordList"), list):
        raise CorruptFileError("delete block payload is not a HoodieDeleteRecordList")
    keys: list[str | None] = []
    parts: list[str | None] = []
    values: list[Any] = []
    kinds: list[str] = []
    for rec in datum["deleteRecordList"]:
        keys.append(rec.get("recordKey"))
        parts.append(rec.get("partitionPath"))
        ov = rec.get("orderingVal")
        if ov is None:
            kinds.append("null")
            values.append(None)
        else:
            name, wrapper = ov
            kinds.append(_NAME_TO_KIND[name])
            values.append(wrapper["value"])
    try:
        return deletes_table(keys, parts, values, kinds)
    except (pa.ArrowException, OverflowError, ValueError) as e:
        raise CorruptFileError(f"delete block ordering values do not convert: {e}") from e


def deletes_table(
    keys: Sequence[str | None], parts: Sequence[str | None], values: Sequence[Any], kinds: Sequence[str]
) -> pa.Table:
    """Build the delete table from parallel lists (values as stored: dates as day numbers, timestamps as µs)."""
    present = {k for k in kinds if k != "null"}
    otype, converted = _unify(present, values, kinds)
    return pa.table(
        {
            "record_key": pa.array(keys, type=pa.string()),
            "partition_path": pa.array(parts, type=pa.string()),
            "ordering_value": pa.array(converted, type=otype),
            "ordering_value_kind": pa.array(kinds, type=pa.string()),
        }
    )


_SINGLE: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "float": pa.float32(),
    "bytes": pa.binary(),
    "string": pa.string(),
    "date": pa.date32(),
    "decimal": pa.decimal128(30, 15),
    "time_micros": pa.time64("us"),
    "timestamp_micros": pa.timestamp("us", tz="UTC"),
}


def _unify(present: set[str], values: Sequence[Any], kinds: Sequence[str]) -> tuple[pa.DataType, list[Any]]:
    vals = list(values)
    if not present:
        return pa.null(), vals
    if len(present) == 1 and next(iter(present)) in _SINGLE:
        kind = next(iter(present))
        if kind == "date":
            vals = [None if v is None else dt.date(1970, 1, 1) + dt.timedelta(days=v) for v in vals]
        return _SINGLE[kind], vals
    if present <= {"int", "long"}:
        return pa.int64(), vals
    exact = all(v is None or k not in ("int", "long") or abs(v) <= 2**53 for v, k in zip(vals, kinds, strict=True))
    if present <= {"int", "long", "float", "double"} and exact:
        return pa.float64(), [None if v is None else float(v) for v in vals]
    return pa.string(), [None if k == "null" else _text(v, k) for v, k in zip(vals, kinds, strict=True)]


def _text(v: Any, kind: str) -> str:
    if kind == "bytes":
        return bytes(v).hex()
    if kind == "date":
        return (dt.date(1970, 1, 1) + dt.timedelta(days=v)).isoformat()
    if kind == "timestamp_micros":
        return (dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=v)).isoformat()
    if kind in ("time_micros",):
        return v.isoformat() if isinstance(v, dt.time) else str(v)
    if kind == "decimal":
        return format(v, "f")
    if kind == "boolean":
        return "true" if v else "false"
    return str(v)


# --- encoding ----------------------------------------------------------------------------------


def encode_delete_content(records: pa.Table | Iterable[DeleteRecord]) -> bytes:
    """Delete block content (version 3) for a delete table or DeleteRecord objects."""
    items = [_item(r.record_key, r.partition_path, r.ordering_value, r.kind) for r in _records(records)]
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _PARSED, {"deleteRecordList": items})
    payload = buf.getvalue()
    return struct.pack(">ii", BLOCK_CONTENT_VERSION, len(payload)) + payload


def _records(records: pa.Table | Iterable[DeleteRecord]) -> Iterable[DeleteRecord]:
    if not isinstance(records, pa.Table):
        return records
    cols = set(records.column_names)
    if not {"record_key", "partition_path"} <= cols:
        raise PermanentError("a delete table needs the columns record_key and partition_path")
    n = records.num_rows
    keys = records.column("record_key").to_pylist()
    parts = records.column("partition_path").to_pylist()
    if "ordering_value" in cols:
        col = records.column("ordering_value")
        values = _python_values(col)
        if "ordering_value_kind" in cols:
            kinds = records.column("ordering_value_kind").to_pylist()
        else:
            k = _kind_of_type(col.type)
            kinds = ["null" if v is None else k for v in values]
    else:
        values, kinds = [0] * n, ["int"] * n
    return [DeleteRecord(k, p, v, kd) for k, p, v, kd in zip(keys, parts, values, kinds, strict=True)]


def _python_values(col: pa.ChunkedArray) -> list[Any]:
    t = col.type
    if pa.types.is_timestamp(t):
        col = col.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64())
    elif pa.types.is_date(t):
        col = col.cast(pa.date32()).cast(pa.int32())
    values: list[Any] = col.to_pylist()
    return values


def _kind_of_type(t: pa.DataType) -> str:
    checks = [
        (pa.types.is_boolean, "boolean"),
        (lambda x: pa.types.is_int8(x) or pa.types.is_int16(x) or pa.types.is_int32(x), "int"),
        (lambda x: pa.types.is_uint8(x) or pa.types.is_uint16(x), "int"),
        (pa.types.is_integer, "long"),
        (pa.types.is_float32, "float"),
        (pa.types.is_floating, "double"),
        (lambda x: pa.types.is_string(x) or pa.types.is_large_string(x), "string"),
        (lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x), "bytes"),
        (pa.types.is_date, "date"),
        (pa.types.is_decimal, "decimal"),
        (pa.types.is_time, "time_micros"),
        (pa.types.is_timestamp, "timestamp_micros"),
        (pa.types.is_null, "null"),
    ]
    for check, kind in checks:
        if check(t):
            return kind
    raise PermanentError(f"no Hudi ordering value kind for Arrow type {t}")


def _item(key: str | None, part: str | None, value: Any, kind: str) -> dict[str, Any]:
    return {"recordKey": key, "partitionPath": part, "orderingVal": _wrap(value, kind)}


def _wrap(value: Any, kind: str) -> Any:
    if kind == "null" or value is None:
        return None
    if kind not in _KIND_TO_NAME:
        raise PermanentError(f"unknown ordering value kind {kind!r}")
    v = _from_text(value, kind) if isinstance(value, str) and kind != "string" else value
    if kind == "date" and isinstance(v, dt.date):
        v = (v - dt.date(1970, 1, 1)).days
    elif kind == "timestamp_micros" and isinstance(v, dt.datetime):
        aware = v if v.tzinfo is not None else v.replace(tzinfo=dt.UTC)
        v = (aware - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    elif kind == "decimal":
        try:
            v = decimal.Decimal(v).quantize(_Q15, context=_DEC_CONTEXT)
        except decimal.InvalidOperation as e:
            raise PermanentError(f"ordering value {value!r} does not fit decimal(30, 15)") from e
    elif kind in ("float", "double"):
        v = float(v)
    elif kind in ("int", "long"):
        v = int(v)
    return (_KIND_TO_NAME[kind], {"value": v})


def _from_text(text: str, kind: str) -> Any:
    """Values of the string form of a mixed-kind ordering column, back to their kind."""
    try:
        if kind in ("int", "long"):
            return int(text)
        if kind in ("float", "double"):
            return float(text)
        if kind == "boolean":
            return text == "true"
        if kind == "bytes":
            return bytes.fromhex(text)
        if kind == "date":
            return dt.date.fromisoformat(text)
        if kind == "timestamp_micros":
            return dt.datetime.fromisoformat(text)
        if kind == "time_micros":
            return dt.time.fromisoformat(text)
        if kind == "decimal":
            return decimal.Decimal(text)
    except (ValueError, decimal.InvalidOperation) as e:
        raise PermanentError(f"ordering value {text!r} is not a {kind}") from e
    return text
