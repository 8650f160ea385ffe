"""Base files: our rewrite of real Hudi base files against the originals, streaming, edge cases, hudi-rs."""

from __future__ import annotations

import datetime
import decimal
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tableservice.errors import UnsupportedTableError
from tableservice.hudi.file_group.avro_parquet import avro_to_arrow_schema
from tableservice.hudi.file_group.base_file import (
    BaseFileWriter,
    iter_base_file,
    java_string_min_max,
    read_base_file_footer,
    write_base_file,
)
from tableservice.hudi.file_group.bloom import BloomFilterSettings, BloomFilterTypeCode, SimpleBloomFilter
from tableservice.hudi.file_group.thrift_compact import TStruct, decode_struct, encode_struct
from tableservice.storage import Storage
from tests.support.fixtures import fixture_names, fixture_table, fixture_table_readonly

STORAGE = Storage()


def _footer(path: Path | str) -> TStruct:
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<i", data[-8:-4])
    footer, used = decode_struct(data[-8 - n : -8])
    assert used == n
    return footer


def _avro_base_files(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*.parquet")):
        if ".hoodie" in p.parts:
            continue
        if b"parquet.avro.schema" in (pq.ParquetFile(p).metadata.metadata or {}):
            out.append(p)
    return out


def _leaf_paths(footer: TStruct) -> list[list[bytes]]:
    return [list(c.get(3).get(3).items) for rg in footer.get(4).items for c in rg.get(1).items]


@pytest.mark.parametrize("name", fixture_names())
def test_thrift_codec_round_trips_real_footers(name: str) -> None:
    for p in sorted(fixture_table_readonly(name).rglob("*.parquet")):
        data = p.read_bytes()
        (n,) = struct.unpack("<i", data[-8:-4])
        raw = data[-8 - n : -8]
        assert encode_struct(decode_struct(raw)[0]) == raw


@pytest.mark.parametrize("name", fixture_names())
def test_rewrite_matches_real_base_files(name: str, tmp_path: Path) -> None:
    for src in _avro_base_files(fixture_table_readonly(name)):
        meta = pq.ParquetFile(src).metadata
        kv = meta.metadata
        avsc = kv[b"parquet.avro.schema"].decode()
        original = pq.read_table(src)
        # the Arrow schema we derive from the Avro schema is the one pyarrow reads from the real file
        assert avro_to_arrow_schema(avsc).equals(original.schema.remove_metadata())
        out = tmp_path / src.name
        res = write_base_file(STORAGE, str(out), original, avro_schema=avsc)
        ours, real = _footer(out), _footer(src)
        assert ours.get(2) == real.get(2)  # every Parquet schema element, root name, list/map layout
        assert ours.get(5) == real.get(5)  # key/value metadata: same keys, values and order (bloom too)
        assert _leaf_paths(ours) == _leaf_paths(real)
        assert [rg.get(7) for rg in ours.get(4).items] == [rg.get(7) for rg in real.get(4).items]
        assert pq.read_table(out).equals(original)
        assert res.num_rows == meta.num_rows
        assert res.file_size == os.path.getsize(out)
        assert res.min_record_key == kv[b"hoodie_min_record_key"].decode()
        assert res.max_record_key == kv[b"hoodie_max_record_key"].decode()
        assert res.bloom_filter_type is BloomFilterTypeCode.DYNAMIC_V0
        assert meta.created_by.startswith("parquet-mr") and pq.ParquetFile(out).metadata.created_by.startswith(
            "parquet-cpp-arrow"
        )


@pytest.mark.parametrize("name", fixture_names())
def test_footer_reader_on_real_files(name: str) -> None:
    for p in sorted(fixture_table_readonly(name).rglob("*.parquet")):
        if ".hoodie" in p.parts:
            continue
        footer = read_base_file_footer(STORAGE, str(p))
        keys = pq.read_table(p, columns=["_hoodie_record_key"]).column(0)
        assert footer.num_rows == len(keys) == sum(g.num_rows for g in footer.row_groups)
        assert (footer.min_record_key, footer.max_record_key) == java_string_min_max(keys.combine_chunks())
        bf = footer.bloom_filter()
        assert bf is not None and bf.might_contain_many(keys).all()
        assert footer.bloom_filter_type is BloomFilterTypeCode.DYNAMIC_V0
        if footer.avro_schema is not None:
            assert footer.avro_schema["type"] == "record"
            assert footer.arrow_schema.equals(avro_to_arrow_schema(footer.avro_schema_json or ""))
        batches = list(iter_base_file(STORAGE, str(p), batch_rows=2))
        assert all(b.num_rows <= 2 for b in batches)
        assert pa.Table.from_batches(batches).equals(pq.read_table(p).replace_schema_metadata(None))


def _snapshot(base: Path) -> pa.Table:
    from hudi import HudiTableBuilder

    batches = HudiTableBuilder.from_base_uri(str(base)).build().read()
    return pa.Table.from_batches(batches).sort_by("_hoodie_record_key")


ORACLE_TABLES = [
    "sample_table/cow/v6_nonpartitioned",
    "sample_table/cow/v6_simplekeygen_nonhivestyle_overwritetable",
    "sample_table/cow/v8_complexkeygen_hivestyle",
    "sample_table/cow/v9_txns_complex_nometa",
    "quickstart_trips_table/mor/avro/v6_trips_8i3d",
    "quickstart_trips_table/mor/avro/v8_trips_8i3u1d",
    "sample_table/mor/avro/v9_txns_simple_meta",
]


@pytest.mark.oracle
@pytest.mark.parametrize("name", ORACLE_TABLES)
def test_hudi_rs_reads_rewritten_table_identically(name: str, tmp_path: Path) -> None:
    table = fixture_table(name, tmp_path)
    before = _snapshot(table)
    replaced = 0
    for src in _avro_base_files(table):
        avsc = pq.ParquetFile(src).metadata.metadata[b"parquet.avro.schema"].decode()
        tmp = str(src) + ".rewrite"
        write_base_file(STORAGE, tmp, pq.read_table(src), avro_schema=avsc)
        os.replace(tmp, src)
        replaced += 1
    assert replaced > 0
    after = _snapshot(table)
    assert after.num_rows == before.num_rows > 0
    assert after.equals(before)


# --- synthetic schemas ---------------------------------------------------------------------------------


def _n(t: Any) -> list[Any]:
    return ["null", t]


RICH = {
    "type": "record",
    "name": "rich_record",
    "namespace": "hoodie.rich",
    "fields": [
        {"name": "_hoodie_record_key", "type": _n("string"), "default": None},
        {"name": "_hoodie_file_name", "type": _n("string"), "default": None},
        {"name": "req", "type": "long"},
        {"name": "color", "type": _n({"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}), "default": None},
        {"name": "color2", "type": _n("Color"), "default": None},
        {"name": "fx", "type": _n({"type": "fixed", "name": "F4", "size": 4}), "default": None},
        {"name": "tm", "type": _n({"type": "int", "logicalType": "time-millis"}), "default": None},
        {"name": "ts", "type": _n({"type": "long", "logicalType": "timestamp-millis"}), "default": None},
        {"name": "lts", "type": _n({"type": "long", "logicalType": "local-timestamp-micros"}), "default": None},
        {"name": "ints", "type": _n({"type": "array", "items": "int"}), "default": None},
        {"name": "nested", "type": _n({"type": "array", "items": {"type": "array", "items": _n("string")}})},
        {"name": "m", "type": _n({"type": "map", "values": _n("long")}), "default": None},
        {"name": "mreq", "type": {"type": "map", "values": {"type": "array", "items": "double"}}},
        {
            "name": "dec",
            "type": _n(
                {"type": "fixed", "name": "d", "size": 16, "logicalType": "decimal", "precision": 38, "scale": 4}
            ),
        },
    ],
}

RICH_PARQUET = """required group field_id=-1 hoodie.rich.rich_record {
  optional binary field_id=-1 _hoodie_record_key (String);
  optional binary field_id=-1 _hoodie_file_name (String);
  required int64 field_id=-1 req;
  optional binary field_id=-1 color (Enum);
  optional binary field_id=-1 color2 (Enum);
  optional fixed_len_byte_array(4) field_id=-1 fx;
  optional int32 field_id=-1 tm (Time(isAdjustedToUTC=true, timeUnit=milliseconds));
  optional int64 field_id=-1 ts (Timestamp(isAdjustedToUTC=true, timeUnit=milliseconds, """


def _rich_rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    utc = datetime.UTC
    rows = []
    for i in range(start, start + n):
        rows.append(
            {
                "_hoodie_record_key": f"key-{i:06d}",
                "req": i,
                "color": b"RED" if i % 2 else None,
                "fx": b"abcd",
                "tm": datetime.time(1, 2, 3),
                "ts": datetime.datetime(2024, 1, 1, tzinfo=utc) + datetime.timedelta(seconds=i),
                "lts": datetime.datetime(2024, 1, 1, 12),
                "ints": [i, i + 1],
                "nested": [["a", "b"], []],
                "m": [("x", i), ("y", None)],
                "mreq": [("k", [1.5, 2.5])],
                "dec": decimal.Decimal(i) / 10000,
            }
        )
    return rows


def test_rich_schema_layout_and_round_trip(tmp_path: Path) -> None:
    schema = avro_to_arrow_schema(RICH)
    rows = _rich_rows(50)
    table = pa.Table.from_pylist(rows, schema=schema)
    out = str(tmp_path / "rich.parquet")
    res = write_base_file(STORAGE, out, table, avro_schema=RICH, file_name="rich.parquet")
    pf = pq.ParquetFile(out)
    text = str(pf.schema).split("\n", 1)[1]
    assert text.startswith(RICH_PARQUET)
    for line in [
        "optional group field_id=-1 ints (List) {\n    repeated int32 field_id=-1 array;",
        "repeated group field_id=-1 array (List) {\n      repeated binary field_id=-1 array (String);",
        "repeated group field_id=-1 key_value (Map) {\n      required binary field_id=-1 key (String);\n"
        "      optional int64 field_id=-1 value;",
        "required group field_id=-1 value (List) {\n        repeated double field_id=-1 array;",
        "optional fixed_len_byte_array(16) field_id=-1 dec (Decimal(precision=38, scale=4));",
        "optional int64 field_id=-1 lts (Timestamp(isAdjustedToUTC=false, timeUnit=microseconds",
    ]:
        assert line in text
    back = pq.read_table(out)
    assert back.schema.remove_metadata().equals(schema)
    assert back.column("_hoodie_file_name").to_pylist() == ["rich.parquet"] * 50
    assert back.drop(["_hoodie_file_name"]).to_pylist() == table.drop(["_hoodie_file_name"]).to_pylist()
    assert (res.min_record_key, res.max_record_key) == ("key-000000", "key-000049")


def test_streaming_row_groups_and_reader(tmp_path: Path) -> None:
    schema = avro_to_arrow_schema(RICH)

    def batches() -> Iterator[pa.RecordBatch]:
        for start in range(0, 1000, 100):
            yield pa.RecordBatch.from_pylist(_rich_rows(100, start)[::-1], schema=schema)

    out = str(tmp_path / "stream.parquet")
    with BaseFileWriter(STORAGE, out, avro_schema=RICH, max_row_group_rows=250, compression="snappy") as w:
        for b in batches():
            w.write(b)
            assert w.num_rows % 100 == 0
        assert w.bytes_written > 0  # row groups reached the stream before close
    footer = read_base_file_footer(STORAGE, out)
    assert footer.num_rows == 1000
    assert [g.num_rows for g in footer.row_groups] == [250, 250, 250, 250]
    assert (footer.min_record_key, footer.max_record_key) == ("key-000000", "key-000999")
    batches_read = list(iter_base_file(STORAGE, out, columns=["_hoodie_record_key", "req"], batch_rows=100))
    assert [b.num_rows for b in batches_read] == [100, 100, 50] * 4
    keys = pa.Table.from_batches(batches_read).column("_hoodie_record_key").to_pylist()
    expected = [r["_hoodie_record_key"] for b in batches() for r in b.to_pylist()]
    assert keys == expected
    bf = footer.bloom_filter()
    assert bf is not None and bf.might_contain_many(keys).all()
    assert pq.ParquetFile(out).metadata.row_group(0).column(0).compression == "SNAPPY"


def test_bloom_of_rewrite_equals_original_order(tmp_path: Path) -> None:
    schema = avro_to_arrow_schema(RICH)
    rows = _rich_rows(30)[::-1]
    out = str(tmp_path / "order.parquet")
    write_base_file(STORAGE, out, pa.Table.from_pylist(rows, schema=schema), avro_schema=RICH)
    footer = read_base_file_footer(STORAGE, out)
    bf = footer.bloom_filter()
    from tableservice.hudi.file_group.bloom import create_bloom_filter

    fresh = create_bloom_filter()
    fresh.add_many([r["_hoodie_record_key"] for r in rows])
    assert bf is not None and bf.serialize() == fresh.serialize() == footer.bloom_filter_serialized


def test_java_string_order_for_min_max() -> None:
    keys = pa.array(["\uffff", "\U00010000", "a", "\ue000z"])
    # Java compares UTF-16 code units: U+10000 is D800 DC00, below U+E000 and U+FFFF
    assert java_string_min_max(keys) == ("a", "\uffff")
    keys2 = pa.array(["\U00010000", "\ue000"])
    assert java_string_min_max(keys2) == ("\U00010000", "\ue000")
    assert java_string_min_max(pa.array(["b", "a", "c"])) == ("a", "c")


def test_simple_bloom_and_no_bloom(tmp_path: Path) -> None:
    schema = avro_to_arrow_schema(RICH)
    table = pa.Table.from_pylist(_rich_rows(5), schema=schema)
    out = str(tmp_path / "simple.parquet")
    res = write_base_file(
        STORAGE, out, table, avro_schema=RICH, bloom=BloomFilterSettings(1000, 0.001, BloomFilterTypeCode.SIMPLE)
    )
    kv = pq.ParquetFile(out).metadata.metadata
    assert b"hoodie_bloom_filter_type_code" not in kv  # Hudi writes the type code for DYNAMIC only
    footer = read_base_file_footer(STORAGE, out)
    bf = footer.bloom_filter()
    assert isinstance(bf, SimpleBloomFilter) and bf.might_contain("key-000004")
    assert res.bloom_filter_type is BloomFilterTypeCode.SIMPLE
    out2 = str(tmp_path / "nobloom.parquet")
    res2 = write_base_file(STORAGE, out2, table, avro_schema=RICH, bloom=None)
    kv2 = pq.ParquetFile(out2).metadata.metadata
    assert set(kv2) == {b"parquet.avro.schema", b"writer.model.name"}
    assert res2.min_record_key is None


def test_empty_file(tmp_path: Path) -> None:
    out = str(tmp_path / "empty.parquet")
    res = write_base_file(STORAGE, out, iter([]), avro_schema=RICH)
    assert res.num_rows == 0 and res.num_row_groups == 0
    footer = read_base_file_footer(STORAGE, out)
    assert footer.num_rows == 0 and footer.min_record_key is None and footer.max_record_key is None
    assert footer.bloom_filter() is not None
    assert list(iter_base_file(STORAGE, out)) == []


def test_missing_nullable_column_is_null_and_errors(tmp_path: Path) -> None:
    schema = avro_to_arrow_schema(RICH)
    full = pa.Table.from_pylist(_rich_rows(3), schema=schema)
    partial = full.drop(["color", "m"])
    out = str(tmp_path / "partial.parquet")
    write_base_file(STORAGE, out, partial, avro_schema=RICH)
    back = pq.read_table(out)
    assert back.column("color").null_count == 3 and back.column("m").null_count == 3
    with pytest.raises(ValueError, match="not in the Avro schema"):
        write_base_file(
            STORAGE, str(tmp_path / "x.parquet"), full.append_column("extra", pa.array([1, 2, 3])), avro_schema=RICH
        )
    with pytest.raises(ValueError, match="required column"):
        write_base_file(STORAGE, str(tmp_path / "y.parquet"), full.drop(["req"]), avro_schema=RICH)
    assert not (tmp_path / "x.parquet").exists() and not (tmp_path / "y.parquet").exists()


def test_null_array_element_is_refused_and_file_removed(tmp_path: Path) -> None:
    schema = avro_to_arrow_schema(RICH)
    rows = _rich_rows(2)
    rows[1]["nested"] = [["a", None]]
    loose = schema.set(schema.get_field_index("nested"), pa.field("nested", pa.list_(pa.list_(pa.string()))))
    table = pa.Table.from_pylist(rows, schema=loose)
    out = tmp_path / "nulls.parquet"
    with pytest.raises(UnsupportedTableError, match="null element"):
        write_base_file(STORAGE, str(out), table, avro_schema=RICH)
    assert not out.exists()


@pytest.mark.parametrize(
    ("field_type", "message"),
    [
        (["null", "string", "long"], "not \\[null, T\\]"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 1}, "decimal on Avro bytes"),
        ({"type": "fixed", "name": "big", "size": 9, "logicalType": "decimal", "precision": 5, "scale": 1}, "minimal"),
    ],
)
def test_unsupported_schemas(field_type: Any, message: str) -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "f", "type": field_type}]}
    with pytest.raises(UnsupportedTableError, match=message):
        avro_to_arrow_schema(schema)


def test_a_file_name_column_that_is_not_a_string_is_refused(tmp_path: Path) -> None:
    """The writer fills `_hoodie_file_name` in as a string dictionary: another type is an error, not a column left
    as the rows had it."""
    avsc = (
        '{"type": "record", "name": "r", "fields": [{"name": "_hoodie_record_key", "type": "string"},'
        ' {"name": "_hoodie_file_name", "type": "long"}]}'
    )
    table = pa.table({"_hoodie_record_key": ["k1"], "_hoodie_file_name": pa.array([7], pa.int64())})
    with pytest.raises(ValueError, match="_hoodie_file_name is not a string column: int64"):
        write_base_file(STORAGE, str(tmp_path / "f.parquet"), table, avro_schema=avsc, file_name="f.parquet")
    # without a file name to fill in, the column is written as the rows have it
    write_base_file(STORAGE, str(tmp_path / "g.parquet"), table, avro_schema=avsc)
    assert pq.read_table(tmp_path / "g.parquet").column("_hoodie_file_name").to_pylist() == [7]
