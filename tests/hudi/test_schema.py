"""Avro <-> Arrow schema conversion, checked against real Spark-written Hudi tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tableservice.errors import CorruptFileError, UnsupportedTableError
from tableservice.hudi.table.schema import (
    HOODIE_META_FIELDS,
    add_meta_fields,
    arrow_schema_from_avro,
    avro_schema_from_arrow,
    avro_schema_from_json,
    parse_avro,
)
from tests.support.fixtures import fixture_names, fixture_table_readonly


def _props(table: Path) -> dict[str, str]:
    out = {}
    for line in (table / ".hoodie" / "hoodie.properties").read_text().splitlines():
        if line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out[k] = v.replace("\\:", ":").replace("\\=", "=").replace("\\\\", "\\")
    return out


def _base_files(table: Path) -> list[Path]:
    return [p for p in table.rglob("*.parquet") if ".hoodie" not in p.parts]


@pytest.mark.parametrize("name", [n for n in fixture_names() if "/mor/" in n] or ["absent"])
def test_create_schema_matches_mor_base_files(name: str) -> None:
    """Log records decoded with the table schema must concatenate with base-file records: same Arrow types."""
    if name == "absent":
        fixture_table_readonly(name)  # skips (or fails in CI)
    table = fixture_table_readonly(name)
    schema = arrow_schema_from_avro(add_meta_fields(avro_schema_from_json(_props(table)["hoodie.table.create.schema"])))
    bases = _base_files(table)
    assert bases
    for base in bases:
        base_schema = pq.read_schema(base)
        assert base_schema.names == schema.names
        for f in schema:
            assert base_schema.field(f.name).type == f.type, (base.name, f.name)


def test_commit_schema_types_match_base_file_with_decimals_dates_timestamps() -> None:
    table = fixture_table_readonly("sample_table/mor/parquet/v6_complexkeygen_hivestyle")
    commits = sorted((table / ".hoodie").glob("*.deltacommit"))
    avro = avro_schema_from_json(json.loads(commits[-1].read_text())["extraMetadata"]["schema"])
    schema = arrow_schema_from_avro(add_meta_fields(avro))
    assert schema.field("decimalField").type == pa.decimal128(10, 5)
    assert schema.field("dateField").type == pa.date32()
    assert schema.field("timestampField").type == pa.timestamp("us", tz="UTC")
    assert schema.field("arrayField").type == pa.list_(
        pa.struct([("arr_struct_f1", pa.string()), ("arr_struct_f2", pa.int32())])
    )
    base = pq.read_schema(_base_files(table)[0])
    assert pa.schema(list(schema)) == pa.schema(list(base))  # field names, types and nullability, not metadata


def test_avro_from_arrow_reproduces_spark_written_commit_schema() -> None:
    """Nullable unions, nested record names/namespaces and decimal `fixed` as Spark writes them for Hudi."""
    table = fixture_table_readonly("sample_table/mor/parquet/v6_complexkeygen_hivestyle")
    commits = sorted((table / ".hoodie").glob("*.deltacommit"))
    written = json.loads(json.loads(commits[-1].read_text())["extraMetadata"]["schema"])
    regenerated = avro_schema_from_arrow(
        arrow_schema_from_avro(written), "v6_complexkeygen_hivestyle_record", "hoodie.v6_complexkeygen_hivestyle"
    )
    assert regenerated == written


def test_v9_create_schema_with_trailing_null_unions() -> None:
    table = fixture_table_readonly("sample_table/mor/avro/v9_txns_nonpart_nometa")
    schema = arrow_schema_from_avro(avro_schema_from_json(_props(table)["hoodie.table.create.schema"]))
    assert schema.field("amount").type == pa.decimal128(15, 2)
    assert schema.field("fee_amount").type == pa.decimal128(10, 2)
    assert schema.field("txn_datetime").type == pa.timestamp("us", tz="UTC")
    assert schema.field("txn_date").type == pa.date32()
    assert all(f.nullable for f in schema)


def _rec(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "r", "namespace": "ns", "fields": list(fields)}


@pytest.mark.parametrize(
    ("avro_type", "arrow_type", "nullable"),
    [
        ("boolean", pa.bool_(), False),
        ("int", pa.int32(), False),
        ("long", pa.int64(), False),
        ("float", pa.float32(), False),
        ("double", pa.float64(), False),
        ("string", pa.string(), False),
        ("bytes", pa.binary(), False),
        (["null", "long"], pa.int64(), True),
        (["long", "null"], pa.int64(), True),
        (["string"], pa.string(), False),
        ({"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4}, pa.decimal128(20, 4), False),
        (
            {"type": "fixed", "name": "f", "size": 16, "logicalType": "decimal", "precision": 38, "scale": 10},
            pa.decimal128(38, 10),
            False,
        ),
        ({"type": "bytes", "logicalType": "decimal", "precision": 50, "scale": 2}, pa.decimal256(50, 2), False),
        ({"type": "fixed", "name": "g", "size": 3}, pa.binary(), False),
        ({"type": "int", "logicalType": "date"}, pa.date32(), False),
        ({"type": "int", "logicalType": "time-millis"}, pa.time32("ms"), False),
        ({"type": "long", "logicalType": "time-micros"}, pa.time64("us"), False),
        ({"type": "long", "logicalType": "timestamp-millis"}, pa.timestamp("ms", tz="UTC"), False),
        ({"type": "long", "logicalType": "timestamp-micros"}, pa.timestamp("us", tz="UTC"), False),
        ({"type": "long", "logicalType": "local-timestamp-millis"}, pa.timestamp("ms"), False),
        ({"type": "long", "logicalType": "local-timestamp-micros"}, pa.timestamp("us"), False),
        ({"type": "string", "logicalType": "uuid"}, pa.string(), False),
        ({"type": "string", "logicalType": "date"}, pa.string(), False),  # invalid logical type: ignored
        ({"type": "enum", "name": "e", "symbols": ["A", "B"]}, pa.string(), False),
        ({"type": "array", "items": "int"}, pa.list_(pa.field("element", pa.int32(), nullable=False)), False),
        ({"type": "array", "items": ["null", "int"]}, pa.list_(pa.int32()), False),
        ({"type": "map", "values": ["null", "double"]}, pa.map_(pa.string(), pa.float64()), False),
        (
            {"type": "record", "name": "inner", "fields": [{"name": "x", "type": ["null", "int"]}]},
            pa.struct([("x", pa.int32())]),
            False,
        ),
    ],
)
def test_type_mapping(avro_type: Any, arrow_type: pa.DataType, nullable: bool) -> None:
    schema = arrow_schema_from_avro(_rec({"name": "c", "type": avro_type}))
    assert schema.field("c").type == arrow_type
    assert schema.field("c").nullable is nullable


def test_named_type_reference_and_namespaces() -> None:
    schema = _rec(
        {"name": "a", "type": {"type": "fixed", "name": "money", "size": 8, "logicalType": "decimal", "precision": 18}},
        {"name": "b", "type": ["null", "ns.money"]},
        {"name": "c", "type": "money"},
    )
    node = parse_avro(schema)
    assert node.name == "ns.r"
    assert node.fields[0].type.name == "ns.money"
    arrow = arrow_schema_from_avro(schema)
    assert arrow.types == [pa.decimal128(18, 0)] * 3


def test_schema_errors() -> None:
    with pytest.raises(CorruptFileError):
        avro_schema_from_json("{not json")
    with pytest.raises(CorruptFileError):
        avro_schema_from_json('"string"')
    with pytest.raises(CorruptFileError):
        avro_schema_from_json(json.dumps(_rec({"name": "x", "type": "nowhere.Type"})))
    with pytest.raises(UnsupportedTableError):
        arrow_schema_from_avro(_rec({"name": "x", "type": ["null", "int", "string"]}))
    recursive = _rec({"name": "x", "type": ["null", "r"]})
    with pytest.raises(UnsupportedTableError):
        parse_avro(recursive)


def test_add_meta_fields() -> None:
    base = _rec({"name": "id", "type": "long"})
    with_meta = add_meta_fields(base)
    names = [f["name"] for f in with_meta["fields"]]
    assert names == [*HOODIE_META_FIELDS, "id"]
    assert with_meta["fields"][0] == {
        "name": "_hoodie_commit_time",
        "type": ["null", "string"],
        "doc": "",
        "default": None,
    }
    assert add_meta_fields(with_meta) == with_meta
    assert base["fields"] == [{"name": "id", "type": "long"}]  # not modified in place


def test_avro_from_arrow_shapes() -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("local", pa.timestamp("ms")),
            pa.field("price", pa.decimal128(15, 2)),
            pa.field("tags", pa.list_(pa.string())),
        ]
    )
    avro = avro_schema_from_arrow(schema, "t_record", "hoodie.t")
    fields = {f["name"]: f for f in avro["fields"]}
    assert fields["id"] == {"name": "id", "type": "long"}
    assert fields["ts"] == {
        "name": "ts",
        "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
        "default": None,
    }
    assert fields["local"]["type"][1] == {"type": "long", "logicalType": "local-timestamp-millis"}
    assert fields["price"]["type"][1] == {
        "type": "fixed",
        "name": "fixed",
        "namespace": "hoodie.t.t_record.price",
        "size": 7,
        "logicalType": "decimal",
        "precision": 15,
        "scale": 2,
    }
    assert fields["tags"]["type"][1] == {"type": "array", "items": ["null", "string"]}


_LEAF = st.sampled_from(
    [
        pa.bool_(),
        pa.int32(),
        pa.int64(),
        pa.float32(),
        pa.float64(),
        pa.string(),
        pa.binary(),
        pa.date32(),
        pa.time32("ms"),
        pa.time64("us"),
        pa.timestamp("ms", tz="UTC"),
        pa.timestamp("us", tz="UTC"),
        pa.timestamp("ms"),
        pa.timestamp("us"),
        pa.decimal128(10, 2),
        pa.decimal128(38, 0),
    ]
)
_NAMES = st.text(alphabet="abcdefghij_", min_size=1, max_size=6)


def _fields(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[list[pa.Field]]:
    return st.lists(
        st.builds(pa.field, _NAMES, children, nullable=st.booleans()),
        min_size=1,
        max_size=4,
        unique_by=lambda f: f.name,
    )


_TYPES = st.recursive(
    _LEAF,
    lambda children: st.one_of(
        st.builds(lambda f: pa.list_(f), st.builds(pa.field, st.just("element"), children, nullable=st.booleans())),
        st.builds(
            lambda f: pa.map_(pa.string(), f), st.builds(pa.field, st.just("value"), children, nullable=st.booleans())
        ),
        _fields(children).map(pa.struct),
    ),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(_fields(_TYPES))
def test_arrow_avro_arrow_round_trip(fields: list[pa.Field]) -> None:
    schema = pa.schema(fields)
    avro = avro_schema_from_arrow(schema, "rec", "hoodie.tbl")
    again = arrow_schema_from_avro(avro_schema_from_json(json.dumps(avro)))
    assert again == schema


@pytest.mark.parametrize("name", [n for n in fixture_names() if "/mor/" in n] or ["absent"])
def test_avro_from_arrow_reproduces_log_block_schema_text(name: str) -> None:
    """The SCHEMA header of every fixture log block is regenerated byte for byte from its Arrow schema."""
    from tableservice.hudi.file_group.log_format import LogBlock, iter_log_blocks
    from tableservice.hudi.table.schema import avro_schema_to_json
    from tableservice.storage import Storage

    if name == "absent":
        fixture_table_readonly(name)
    table = fixture_table_readonly(name)
    checked = 0
    for log in table.rglob(".*.log.*"):
        if "metadata" in log.relative_to(table).parts[:2]:
            continue
        for block in iter_log_blocks(Storage(), str(log)):
            assert isinstance(block, LogBlock)
            if block.schema is None:  # rollback command blocks
                continue
            written = avro_schema_from_json(block.schema)
            regenerated = avro_schema_from_arrow(arrow_schema_from_avro(written), written["name"], written["namespace"])
            assert avro_schema_to_json(regenerated) == block.schema
            checked += 1
    logs = [p for p in table.rglob(".*.log.*") if "metadata" not in p.relative_to(table).parts[:2]]
    assert checked >= 1 or not logs
