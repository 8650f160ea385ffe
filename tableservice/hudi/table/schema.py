"""Avro <-> Arrow schema conversion for Hudi table schemas.

Hudi keeps table schemas as Avro JSON (`hoodie.table.create.schema`, commit `extraMetadata.schema`, the SCHEMA
header of log blocks). The Arrow types chosen here are the ones pyarrow.parquet reads from base files written
by Spark for the same table, so decoded log records and base records concatenate:

| Avro                                   | Arrow                                    |
|----------------------------------------|------------------------------------------|
| boolean / int / long / float / double  | bool / int32 / int64 / float32 / float64 |
| string (also uuid), enum               | string                                   |
| bytes, fixed                           | binary                                   |
| bytes or fixed with logicalType decimal | decimal128(p, s) (decimal256 if p > 38) |
| int date                               | date32                                   |
| int time-millis / long time-micros     | time32[ms] / time64[us]                  |
| long timestamp-millis / -micros / -nanos | timestamp[ms/us/ns, tz=UTC]            |
| long local-timestamp-millis / -micros / -nanos | timestamp[ms/us/ns] (no zone)    |
| array                                  | list<element: T>                         |
| map                                    | map<string, T>                           |
| record                                 | struct                                   |
| ["null", T] or [T, "null"]             | T, nullable                              |

Other unions (several non-null branches) raise UnsupportedTableError: Spark never writes them for Hudi tables.

Public API:
- `HOODIE_META_FIELDS`: the five `_hoodie_*` column names in order.
- `avro_schema_from_json(text) -> dict`
- `arrow_schema_from_avro(avro_schema) -> pa.Schema`
- `avro_schema_from_arrow(schema, record_name, namespace) -> dict` (nullable fields as ["null", T] with default
  null, nested records named after their field in the namespace `<parent namespace>.<parent name>`, decimals as
  `fixed` named "fixed", `_hoodie_*` string fields with `"doc": ""`, as Spark-written Hudi schemas look).
- `add_meta_fields(avro_schema) -> dict`
- `parse_avro(avro_schema) -> AvroType`: the resolved type tree (named references expanded), used by the log codec.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tableservice.errors import CorruptFileError, UnsupportedTableError

HOODIE_META_FIELDS: tuple[str, ...] = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)

_MAX_DECIMAL_PRECISION = 76  # decimal256
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_TS_UNITS = {
    "timestamp-millis": ("ms", "UTC"),
    "timestamp-micros": ("us", "UTC"),
    "timestamp-nanos": ("ns", "UTC"),
    "local-timestamp-millis": ("ms", None),
    "local-timestamp-micros": ("us", None),
    "local-timestamp-nanos": ("ns", None),
}


@dataclass(frozen=True)
class AvroField:
    """One field of a record."""

    name: str
    type: AvroType
    default: Any = None
    has_default: bool = False


@dataclass(frozen=True)
class AvroType:
    """A resolved Avro type. `kind` is a primitive name or fixed/enum/array/map/record/union.

    `logical` is kept only where Avro allows it (invalid logical types fall back to the underlying type).
    """

    kind: str
    logical: str | None = None
    precision: int = 0
    scale: int = 0
    size: int = 0
    name: str | None = None
    symbols: tuple[str, ...] = ()
    items: AvroType | None = None
    fields: tuple[AvroField, ...] = ()
    branches: tuple[AvroType, ...] = field(default=())

    @property
    def nullable_branch(self) -> tuple[int, AvroType] | None:
        """For a union of null and one other type: (index of the non-null branch, that type)."""
        if self.kind != "union" or len(self.branches) != 2:
            return None
        kinds = [b.kind for b in self.branches]
        if kinds == ["null", "null"] or "null" not in kinds:
            return None
        idx = 1 if kinds[0] == "null" else 0
        return idx, self.branches[idx]


def avro_schema_from_json(text: str) -> dict[str, Any]:
    """Parse Avro schema JSON text; the top level must be a record."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError, RecursionError) as e:
        raise CorruptFileError(f"schema is not valid JSON: {e}") from e
    if not isinstance(value, dict) or value.get("type") != "record":
        raise CorruptFileError(f"schema is not an Avro record: {str(text)[:80]!r}")
    parse_avro(value)  # validates names, types and references
    return value


def avro_schema_to_json(avro_schema: dict[str, Any]) -> str:
    """Compact JSON text of a schema, as Hudi writes it in headers and commit metadata."""
    return json.dumps(avro_schema, separators=(",", ":"))


# --- parsing -----------------------------------------------------------------------------------


def parse_avro(avro_schema: Any) -> AvroType:
    """Resolve an Avro schema (dict, list or type name) into an AvroType tree."""
    try:
        return _Parser().parse(avro_schema, None)
    except RecursionError as e:
        raise UnsupportedTableError("Avro schema is nested too deeply") from e


class _Parser:
    def __init__(self) -> None:
        self.named: dict[str, AvroType] = {}
        self.pending: set[str] = set()

    def _full_name(self, name: str, namespace: str | None) -> str:
        if "." in name or not namespace:
            return name
        return f"{namespace}.{name}"

    def parse(self, s: Any, namespace: str | None) -> AvroType:
        if isinstance(s, str):
            return self._by_name(s, namespace)
        if isinstance(s, list):
            return AvroType("union", branches=tuple(self.parse(b, namespace) for b in s))
        if not isinstance(s, dict):
            raise CorruptFileError(f"invalid Avro schema element: {s!r:.80}")
        t = s.get("type")
        if isinstance(t, (dict, list)):
            return self.parse(t, namespace)
        if not isinstance(t, str):
            raise CorruptFileError(f"Avro schema element without a type: {s!r:.80}")
        if t in _PRIMITIVES:
            return _with_logical(AvroType(t), s)
        if t in ("record", "error", "enum", "fixed"):
            return self._named(t, s, namespace)
        if t == "array":
            return AvroType("array", items=self.parse(s.get("items"), namespace))
        if t == "map":
            return AvroType("map", items=self.parse(s.get("values"), namespace))
        return self._by_name(t, namespace)

    def _by_name(self, name: str, namespace: str | None) -> AvroType:
        if name in _PRIMITIVES:
            return AvroType(name)
        for candidate in (self._full_name(name, namespace), name):
            if candidate in self.named:
                return self.named[candidate]
            if candidate in self.pending:
                raise UnsupportedTableError(f"recursive Avro type {candidate!r} is not supported")
        raise CorruptFileError(f"unknown Avro type name {name!r}")

    def _named(self, t: str, s: dict[str, Any], namespace: str | None) -> AvroType:
        name = s.get("name")
        if not isinstance(name, str) or not name:
            raise CorruptFileError(f"Avro {t} without a name: {s!r:.80}")
        ns = s.get("namespace", namespace)
        full = self._full_name(name, ns if isinstance(ns, str) else None)
        inner_ns = full.rpartition(".")[0] or None
        if t == "fixed":
            size = s.get("size")
            if not isinstance(size, int) or size < 0:
                raise CorruptFileError(f"Avro fixed {full!r} has an invalid size {size!r}")
            node = _with_logical(AvroType("fixed", size=size, name=full), s)
        elif t == "enum":
            symbols = s.get("symbols")
            if not isinstance(symbols, list) or not all(isinstance(x, str) for x in symbols):
                raise CorruptFileError(f"Avro enum {full!r} has invalid symbols")
            node = AvroType("enum", name=full, symbols=tuple(symbols))
        else:
            raw_fields = s.get("fields")
            if not isinstance(raw_fields, list):
                raise CorruptFileError(f"Avro record {full!r} has no field list")
            self.pending.add(full)
            fields = []
            for f in raw_fields:
                if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                    raise CorruptFileError(f"invalid field in Avro record {full!r}: {f!r:.80}")
                fields.append(
                    AvroField(f["name"], self.parse(f.get("type"), inner_ns), f.get("default"), "default" in f)
                )
            self.pending.discard(full)
            node = AvroType("record", name=full, fields=tuple(fields))
        self.named[full] = node
        return node


def _with_logical(node: AvroType, s: dict[str, Any]) -> AvroType:
    logical = s.get("logicalType")
    if not isinstance(logical, str):
        return node
    k = node.kind
    if logical == "decimal" and k in ("bytes", "fixed"):
        p, sc = s.get("precision"), s.get("scale", 0)
        if isinstance(p, int) and isinstance(sc, int) and 0 < p <= _MAX_DECIMAL_PRECISION and 0 <= sc <= p:
            if k == "fixed" and p > _max_precision(node.size):
                return node
            return AvroType(k, "decimal", p, sc, node.size, node.name)
        return node
    valid = (
        (logical == "date" and k == "int")
        or (logical == "time-millis" and k == "int")
        or (logical == "time-micros" and k == "long")
        or (logical in _TS_UNITS and k == "long")
        or (logical == "uuid" and k in ("string", "fixed"))
    )
    return AvroType(k, logical, size=node.size, name=node.name) if valid else node


def _max_precision(size: int) -> int:
    if size <= 0:
        return 0
    if size > 32:  # more digits than any precision accepted; a damaged size of 2^40 must not build a 2^43-bit int
        return _MAX_DECIMAL_PRECISION + 1
    return len(str(2 ** (8 * size - 1) - 1))


def _min_bytes_for_precision(precision: int) -> int:
    n = 1
    while 2 ** (8 * n - 1) < 10**precision:
        n += 1
    return n


# --- Avro -> Arrow -----------------------------------------------------------------------------


def arrow_type(node: AvroType) -> tuple[pa.DataType, bool]:
    """The Arrow type of an Avro type and whether it is nullable."""
    k = node.kind
    if k == "union":
        nb = node.nullable_branch
        if nb is not None:
            return arrow_type(nb[1])[0], True
        if len(node.branches) == 1:
            return arrow_type(node.branches[0])
        if all(b.kind == "null" for b in node.branches):
            return pa.null(), True
        raise UnsupportedTableError(f"Avro union of several types is not supported: {[b.kind for b in node.branches]}")
    if node.logical == "decimal":
        t: pa.DataType = (
            pa.decimal128(node.precision, node.scale)
            if node.precision <= 38
            else pa.decimal256(node.precision, node.scale)
        )
        return t, False
    if node.logical == "date":
        return pa.date32(), False
    if node.logical == "time-millis":
        return pa.time32("ms"), False
    if node.logical == "time-micros":
        return pa.time64("us"), False
    if node.logical in _TS_UNITS:
        unit, tz = _TS_UNITS[node.logical]
        return pa.timestamp(unit, tz), False
    simple = {
        "null": pa.null(),
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "bytes": pa.binary(),
        "string": pa.string(),
        "fixed": pa.binary(),
        "enum": pa.string(),
    }
    if k in simple:
        return simple[k], k == "null"
    if k == "array":
        assert node.items is not None
        it, inull = arrow_type(node.items)
        return pa.list_(pa.field("element", it, nullable=inull)), False
    if k == "map":
        assert node.items is not None
        vt, vnull = arrow_type(node.items)
        return pa.map_(pa.string(), pa.field("value", vt, nullable=vnull)), False
    if k == "record":
        return pa.struct([_arrow_field(f) for f in node.fields]), False
    raise UnsupportedTableError(f"unsupported Avro type {k!r}")


def _arrow_field(f: AvroField) -> pa.Field:
    t, nullable = arrow_type(f.type)
    return pa.field(f.name, t, nullable=nullable)


def arrow_schema_from_avro(avro_schema: dict[str, Any] | AvroType) -> pa.Schema:
    """The Arrow schema of a record schema (top-level fields become columns)."""
    node = avro_schema if isinstance(avro_schema, AvroType) else parse_avro(avro_schema)
    if node.kind != "record":
        raise CorruptFileError(f"top-level Avro schema must be a record, not {node.kind!r}")
    return pa.schema([_arrow_field(f) for f in node.fields])


# --- Arrow -> Avro -----------------------------------------------------------------------------


def avro_schema_from_arrow(schema: pa.Schema, record_name: str, namespace: str) -> dict[str, Any]:
    """An Avro record schema for an Arrow schema, shaped like the schemas Spark writes for Hudi tables."""
    return {
        "type": "record",
        "name": record_name,
        "namespace": namespace,
        "fields": [_avro_field(f, f"{namespace}.{record_name}", top=True) for f in schema],
    }


def _avro_field(f: pa.Field, parent_full: str, top: bool = False) -> dict[str, Any]:
    t = _avro_type(f.type, f.name, parent_full)
    if top and f.name in HOODIE_META_FIELDS and t == "string" and f.nullable:
        return {"name": f.name, "type": ["null", t], "doc": "", "default": None}
    if f.nullable:
        return {"name": f.name, "type": ["null", t], "default": None}
    return {"name": f.name, "type": t}


def _avro_type(t: pa.DataType, name: str, parent_full: str) -> Any:
    if pa.types.is_dictionary(t):
        return _avro_type(t.value_type, name, parent_full)
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "int"
    if pa.types.is_uint8(t) or pa.types.is_uint16(t):
        return "int"
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return "long"
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "bytes"
    if pa.types.is_binary_view(t):
        return "bytes"
    if pa.types.is_decimal(t):
        return {
            "type": "fixed",
            "name": "fixed",
            "namespace": f"{parent_full}.{name}",
            "size": _min_bytes_for_precision(t.precision),
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    if pa.types.is_date(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_time32(t):
        return {"type": "int", "logicalType": "time-millis"}
    if pa.types.is_time64(t):
        return {"type": "long", "logicalType": "time-micros"}
    if pa.types.is_timestamp(t):
        millis = t.unit in ("s", "ms")
        if t.tz is None:
            return {"type": "long", "logicalType": "local-timestamp-millis" if millis else "local-timestamp-micros"}
        return {"type": "long", "logicalType": "timestamp-millis" if millis else "timestamp-micros"}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        vf = t.value_field
        items = _avro_type(vf.type, name, parent_full)
        return {"type": "array", "items": ["null", items] if vf.nullable else items}
    if pa.types.is_map(t):
        if not (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)):
            raise UnsupportedTableError(f"Avro maps need string keys; column {name!r} has {t.key_type}")
        itf = t.item_field
        values = _avro_type(itf.type, name, parent_full)
        return {"type": "map", "values": ["null", values] if itf.nullable else values}
    if pa.types.is_struct(t):
        full = f"{parent_full}.{name}"
        return {
            "type": "record",
            "name": name,
            "namespace": parent_full,
            "fields": [_avro_field(t.field(i), full) for i in range(t.num_fields)],
        }
    if pa.types.is_null(t):
        return "null"
    raise UnsupportedTableError(f"no Avro type for Arrow type {t} (column {name!r})")


# --- meta fields -------------------------------------------------------------------------------


def add_meta_fields(avro_schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of a record schema with the five `_hoodie_*` fields first (kept as they are when present)."""
    fields = list(avro_schema.get("fields", []))
    present = {f.get("name") for f in fields if isinstance(f, dict)}
    if all(name in present for name in HOODIE_META_FIELDS):
        return dict(avro_schema)
    others = [f for f in fields if not (isinstance(f, dict) and f.get("name") in HOODIE_META_FIELDS)]
    meta = [{"name": n, "type": ["null", "string"], "doc": "", "default": None} for n in HOODIE_META_FIELDS]
    out = dict(avro_schema)
    out["fields"] = meta + others
    return out
