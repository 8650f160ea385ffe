"""Avro schema -> Parquet/Arrow layout as parquet-avro writes it for Hudi base files.

Hudi's Avro writer (`HoodieAvroParquetWriter` -> `HoodieAvroWriteSupport` -> parquet-avro's
`AvroWriteSupport`) converts the table's Avro schema with parquet-avro's `AvroSchemaConverter` using
parquet's defaults; real files (Hudi 0.14-1.1, parquet-mr 1.12/1.13) show:

- root message named by the record's full name (`hoodie.<table>.<table>_record`), no repetition;
- `["null", T]` -> optional T, a non-union T -> required T; other unions are not supported here;
- string -> BINARY (STRING), enum -> BINARY (ENUM) (pyarrow reads it back as binary), bytes -> BINARY,
  fixed(n) -> FIXED_LEN_BYTE_ARRAY(n), decimal on fixed -> FIXED_LEN_BYTE_ARRAY DECIMAL(p, s),
  int/long/float/double/boolean as is, date -> INT32 DATE, time-millis/-micros -> TIME(isAdjustedToUTC=true),
  timestamp-millis/-micros -> INT64 TIMESTAMP(isAdjustedToUTC=true), local-timestamp-* -> isAdjustedToUTC=false;
- arrays in the *old* 2-level layout (`parquet.avro.write-old-list-structure` defaults to true):
  `optional group f (LIST) { repeated <item> array; }`; the item's own nullability is dropped, so an
  array may not hold nulls (parquet-avro refuses them too);
- maps: `optional group f (MAP) { repeated group key_value (MAP_KEY_VALUE) { required binary key (STRING);
  <value> value; } }`; records as groups, fields in schema order.

Arrow cannot write the 2-level list, the MAP_KEY_VALUE annotation, the ENUM annotation or the root name.
It writes 3-level lists whose element is `required`; those have the same definition and repetition levels
as the 2-level layout, so the data pages are identical and only the footer differs.
`patch_footer` rewrites the footer's schema (and every column chunk's `path_in_schema`) into the
parquet-avro form, adds row-group ordinals and sets the key/value metadata, leaving every data byte as is.

`avro_to_arrow_schema` gives the Arrow schema pyarrow reads from such a file (list items named `array`,
not null; timestamps with tz "UTC" when adjusted to UTC; decimals as decimal128/256; enums as strings).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tableservice.errors import UnsupportedTableError
from tableservice.hudi.file_group.thrift_compact import T_BINARY, T_I16, T_I32, T_LIST, T_STRUCT, T_TRUE, TList, TStruct

_PRIMITIVES = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_REPEATED = 2
_CONVERTED_MAP_KEY_VALUE = 2
_CONVERTED_ENUM = 4
_CONVERTED_TIME_MILLIS = 7
_CONVERTED_TIME_MICROS = 8
_LOGICAL_TIME = 7
_LOGICAL_ENUM = 4


def parse_avro_schema(schema: Mapping[str, Any] | str) -> tuple[dict[str, Any], str]:
    """The schema as a dict and as the compact JSON text parquet-avro stores (`parquet.avro.schema`).

    A string is kept verbatim (it is what Java's `Schema.toString()` produced); a dict is dumped compactly
    in its own key order, non-ASCII characters unescaped as Avro's Jackson writer does.
    """
    if isinstance(schema, str):
        parsed = json.loads(schema)
        text = schema
    else:
        parsed = dict(schema)
        text = json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise UnsupportedTableError(f"a base file schema must be an Avro record, got {str(parsed)[:200]!r}")
    return parsed, text


def record_full_name(schema: Mapping[str, Any]) -> str:
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


@dataclass
class _Names:
    """Named Avro types seen so far, for references by name."""

    types: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    stack: list[str] = field(default_factory=list)

    def full(self, schema: Mapping[str, Any], namespace: str | None) -> str:
        name = str(schema["name"])
        if "." in name:
            return name
        ns = schema.get("namespace", namespace)
        return f"{ns}.{name}" if ns else name

    def lookup(self, ref: str, namespace: str | None) -> Mapping[str, Any]:
        for key in (ref, f"{namespace}.{ref}" if namespace else ref):
            if key in self.types:
                if key in self.stack:
                    raise UnsupportedTableError(f"recursive Avro type {key!r} cannot be stored in Parquet")
                return self.types[key]
        raise UnsupportedTableError(f"unknown Avro type {ref!r}")


def _unwrap(schema: Any) -> tuple[Any, bool]:
    """The non-null branch of a union and whether the field is optional."""
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise UnsupportedTableError(f"Avro union {json.dumps(schema)[:200]} is not [null, T]; not supported")
        return branches[0], len(branches) != len(schema)
    return schema, False


def _min_bytes_for_precision(precision: int) -> int:
    n = 1
    while 2 ** (8 * n - 1) < 10**precision:
        n += 1
    return n


class _Converter:
    def __init__(self) -> None:
        self.names = _Names()

    def resolve(self, schema: Any, namespace: str | None) -> tuple[Any, str | None]:
        """Resolve a name reference; register named types. Returns the schema and its namespace."""
        if isinstance(schema, str):
            if schema in _PRIMITIVES or schema == "null":
                return {"type": schema}, namespace
            return self.names.lookup(schema, namespace), namespace
        if isinstance(schema, Mapping) and isinstance(schema.get("type"), dict | list):
            return self.resolve(schema["type"], namespace)
        if isinstance(schema, Mapping) and schema.get("type") in ("record", "enum", "fixed", "error"):
            full = self.names.full(schema, namespace)
            self.names.types.setdefault(full, schema)
            return schema, full.rpartition(".")[0] or None
        return schema, namespace

    def arrow_type(self, schema: Any, namespace: str | None) -> pa.DataType:
        schema, ns = self.resolve(schema, namespace)
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if kind in ("record", "error"):
            full = self.names.full(schema, namespace)
            self.names.stack.append(full)
            try:
                return pa.struct([self.arrow_field(f, ns) for f in schema["fields"]])
            finally:
                self.names.stack.pop()
        if kind == "array":
            item, _ = _unwrap(schema["items"])
            return pa.list_(pa.field("array", self.arrow_type(item, ns), nullable=False))
        if kind == "map":
            value, optional = _unwrap(schema["values"])
            return pa.map_(
                pa.field("key", pa.string(), nullable=False), pa.field("value", self.arrow_type(value, ns), optional)
            )
        if kind == "enum":
            return pa.binary()  # pyarrow reads parquet-avro's ENUM-annotated BINARY as binary
        if kind == "fixed":
            if logical == "decimal":
                precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
                if int(schema["size"]) != _min_bytes_for_precision(precision):
                    raise UnsupportedTableError(
                        f"decimal({precision},{scale}) stored in fixed({schema['size']}) is not the minimal size "
                        f"{_min_bytes_for_precision(precision)}; Arrow cannot write that layout"
                    )
                return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
            return pa.binary(int(schema["size"]))
        if kind == "null":
            raise UnsupportedTableError("an Avro field of type null cannot be stored in Parquet")
        if kind == "bytes" and logical == "decimal":
            raise UnsupportedTableError("decimal on Avro bytes is not supported (parquet-avro writes BINARY DECIMAL)")
        if kind == "int" and logical == "date":
            return pa.date32()
        if kind == "int" and logical == "time-millis":
            return pa.time32("ms")
        if kind == "long" and logical == "time-micros":
            return pa.time64("us")
        if kind == "long" and logical in ("timestamp-millis", "timestamp-micros"):
            return pa.timestamp("ms" if logical.endswith("millis") else "us", tz="UTC")
        if kind == "long" and logical in ("local-timestamp-millis", "local-timestamp-micros"):
            return pa.timestamp("ms" if logical.endswith("millis") else "us")
        if kind == "long" and logical in ("timestamp-nanos", "local-timestamp-nanos"):
            raise UnsupportedTableError(f"Avro {logical} is not supported")
        if kind in _PRIMITIVES:
            return _PRIMITIVES[kind]
        raise UnsupportedTableError(f"unsupported Avro type {json.dumps(schema)[:200]}")

    def arrow_field(self, avro_field: Mapping[str, Any], namespace: str | None) -> pa.Field:
        inner, optional = _unwrap(avro_field["type"])
        return pa.field(str(avro_field["name"]), self.arrow_type(inner, namespace), nullable=optional)


def avro_to_arrow_schema(schema: Mapping[str, Any] | str) -> pa.Schema:
    """The Arrow schema pyarrow reads from a base file that parquet-avro wrote with this Avro schema."""
    parsed, _ = parse_avro_schema(schema)
    conv = _Converter()
    root, ns = conv.resolve(parsed, None)
    return pa.schema([conv.arrow_field(f, ns) for f in root["fields"]])


# --- footer patching ---------------------------------------------------------------------------------


class _SchemaPatcher:
    """Walks Arrow's schema elements alongside the Avro schema and emits parquet-avro's elements."""

    def __init__(self, elements: list[TStruct]) -> None:
        self.elements = elements
        self.i = 0
        self.out: list[TStruct] = []
        self.conv = _Converter()

    def take(self) -> TStruct:
        if self.i >= len(self.elements):
            raise UnsupportedTableError("Parquet schema has fewer elements than the Avro schema needs")
        el = _copied(self.elements[self.i])  # only its own fields change
        self.i += 1
        return el

    def node(self, avro: Any, namespace: str | None, *, rename: bytes | None = None, repeated: bool = False) -> None:
        el = self.take()
        if rename is not None:
            el.set(4, T_BINARY, rename)
        if repeated:
            el.set(3, T_I32, _REPEATED)
        schema, ns = self.conv.resolve(_unwrap(avro)[0], namespace)
        kind = schema.get("type")
        self.out.append(el)
        if kind in ("record", "error"):
            for f in schema["fields"]:
                self.node(f["type"], ns)
        elif kind == "array":
            self.take()  # Arrow's `repeated group list`: the 2-level layout has no such level
            self.node(schema["items"], ns, rename=b"array", repeated=True)
        elif kind == "map":
            key_value = self.take()
            key_value.set(6, T_I32, _CONVERTED_MAP_KEY_VALUE)
            self.out.append(key_value)
            self.node("string", ns)
            self.node(schema["values"], ns)
        elif kind == "enum":
            el.set(6, T_I32, _CONVERTED_ENUM)
            el.set(10, T_STRUCT, TStruct([(_LOGICAL_ENUM, T_STRUCT, TStruct())]))
        elif schema.get("logicalType") in ("time-millis", "time-micros"):
            # parquet-avro: TIME(unit, isAdjustedToUTC=true) with converted type TIME_*; Arrow writes false.
            millis = schema["logicalType"] == "time-millis"
            unit = TStruct([(1 if millis else 2, T_STRUCT, TStruct())])
            time = TStruct([(1, T_TRUE, True), (2, T_STRUCT, unit)])
            el.set(6, T_I32, _CONVERTED_TIME_MILLIS if millis else _CONVERTED_TIME_MICROS)
            el.set(10, T_STRUCT, TStruct([(_LOGICAL_TIME, T_STRUCT, time)]))


def _leaf_paths(elements: list[TStruct]) -> list[list[bytes]]:
    paths: list[list[bytes]] = []

    def walk(i: int, prefix: list[bytes]) -> int:
        el = elements[i]
        path = [*prefix, el.get(4)]
        children = el.get(5) or 0
        i += 1
        if not children:
            paths.append(path)
            return i
        for _ in range(children):
            i = walk(i, path)
        return i

    root = elements[0]
    i = 1
    for _ in range(root.get(5) or 0):
        i = walk(i, [])
    return paths


def _copied(struct: TStruct) -> TStruct:
    """A copy whose own fields can be set without touching `struct` (values are shared)."""
    return TStruct(list(struct.fields))


def patch_footer(footer: TStruct, avro_schema: Mapping[str, Any], key_value: list[tuple[str, str]]) -> TStruct:
    """parquet-avro's form of the FileMetaData Arrow wrote for `avro_schema` (see the module docstring)."""
    out = _copied(footer)
    elements: list[TStruct] = list(footer.get(2).items)
    patcher = _SchemaPatcher(elements)
    root = patcher.take()
    root.remove(3)
    root.set(4, T_BINARY, record_full_name(avro_schema).encode("utf-8"))
    patcher.out.append(root)
    schema, ns = patcher.conv.resolve(avro_schema, None)
    for f in schema["fields"]:
        patcher.node(f["type"], ns)
    if patcher.i != len(elements):
        raise UnsupportedTableError(f"Parquet schema has {len(elements)} elements, the Avro schema used {patcher.i}")
    new_elements = patcher.out
    out.set(2, T_LIST, TList(T_STRUCT, new_elements))
    paths = _leaf_paths(new_elements)
    row_groups = footer.get(4)
    if row_groups is not None:
        new_groups = []
        for ordinal, rg in enumerate(row_groups.items):
            # Copies of what changes only (row group, its chunks, their metadata), not of the statistics below.
            rg = _copied(rg)
            chunks = [_copied(c) for c in rg.get(1).items]
            if len(chunks) != len(paths):
                raise UnsupportedTableError(f"row group has {len(chunks)} column chunks for {len(paths)} leaves")
            for chunk, path in zip(chunks, paths, strict=True):
                meta = chunk.get(3)
                if meta is not None:
                    meta = _copied(meta)
                    meta.set(3, T_LIST, TList(T_BINARY, list(path)))
                    chunk.set(3, T_STRUCT, meta)
            rg.set(1, T_LIST, TList(T_STRUCT, chunks))
            if rg.get(7) is None:
                rg.set(7, T_I16, ordinal)
            new_groups.append(rg)
        out.set(4, T_LIST, TList(T_STRUCT, new_groups))
    if key_value:
        items = [TStruct([(1, T_BINARY, k.encode("utf-8")), (2, T_BINARY, v.encode("utf-8"))]) for k, v in key_value]
        out.set(5, T_LIST, TList(T_STRUCT, items))
    else:
        out.remove(5)
    return out
