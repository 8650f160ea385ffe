"""Column stats payloads: recomputed for every data file of the Spark-written fixtures and compared with what
Hudi stored in their metadata tables, then the value encodings the fixtures do not show."""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tableservice.errors import UnsupportedTableError
from tableservice.hudi.metadata.column_stats import (
    ALWAYS_INDEXED_META_COLUMNS,
    MAX_COLUMNS_TO_INDEX,
    V1,
    V2,
    ColumnStatsIndex,
    ValueType,
    column_stats_index,
    default_columns,
    index_from_definitions,
    parquet_file_stats,
    records_stats,
    tombstone,
)
from tableservice.hudi.metadata.keys import column_stats_key
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.records import combine_stats
from tableservice.hudi.metadata.update import NewFile, file_stats, stats_records
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.storage import Storage
from tests.support.fixtures import fixture_table_readonly

NS = "org.apache.hudi.avro.model."
V8_TRIPS = "quickstart_trips_table/mor/avro/v8_trips_8i3u1d"
V9_META = "sample_table/mor/avro/v9_txns_simple_meta"
V9_ROLLBACK = "sample_table/mor/avro/v9_nonpartitioned_rollback"
TXN_COLUMNS = (
    *ALWAYS_INDEXED_META_COLUMNS,
    "txn_id",
    "account_id",
    "txn_ts",
    "txn_datetime",
    "txn_date",
    "amount",
    "currency",
    "txn_type",
    "merchant_name",
    "is_international",
    "fee_amount",
    "txn_metadata",
)


def strict(x: Any) -> Any:
    """A form of a payload whose equality also tells -0.0 from 0.0, NaN from NaN-less, 1 from True, int from float."""
    if isinstance(x, dict):
        return {k: strict(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return (type(x).__name__, [strict(v) for v in x])
    if isinstance(x, float):
        return ("float", "nan" if math.isnan(x) else x, math.copysign(1.0, x))
    return (type(x).__name__, x)


@dataclass
class Recomputed:
    stored: dict[str, dict[str, Any]]  # key -> stored ColumnStatsMetadata
    computed: dict[str, dict[str, Any]]  # key -> recomputed payload
    base_records: int
    log_records: int
    schema: dict[str, Any]


def recompute(name: str) -> Recomputed:
    """Every file the `files` partition lists, recomputed: Parquet base files from their bytes, log files from the
    data records of their blocks."""
    path = str(fixture_table_readonly(name))
    storage = Storage()
    table = HudiTable.open(storage, path)
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    stored_records = mdt.read_partition("column_stats")
    index = column_stats_index(storage, path, table.config.version)
    assert index is not None
    # the write path's own functions: stats of each listed file, then its column_stats records
    files = [NewFile(p, name, size) for p, names in mdt.file_listing().items() for name, size in names.items()]
    payloads = file_stats(table, files, index)
    base = sum(len(x) for f, x in zip(files, payloads, strict=True) if f.is_base_file)
    log = sum(len(x) for f, x in zip(files, payloads, strict=True) if not f.is_base_file)
    computed: dict[str, dict[str, Any]] = {}
    for r in stats_records(("column_stats",), files, payloads):
        assert r.partition == "column_stats" and r.value is not None and r.value["type"] == 3
        assert r.key not in computed
        computed[r.key] = r.value["ColumnStatsMetadata"]
    for record in stored_records.values():
        assert record["type"] == 3
    schema = json.loads(mdt.writer_schema() or "{}")
    stored = {k: v["ColumnStatsMetadata"] for k, v in stored_records.items()}
    return Recomputed(stored, computed, base, log, schema)


@pytest.mark.parametrize(
    ("name", "base_records", "log_records"),
    [(V8_TRIPS, 54, 45), (V9_META, 224, 80), (V9_ROLLBACK, 30, 0)],
)
def test_every_fixture_record_is_recomputed_exactly(name: str, base_records: int, log_records: int) -> None:
    """Every stored column_stats record equals, whole and strictly, the one recomputed for its file, and every
    recomputed record is stored under the same key. Log files hold one data block (inserts/updates, counts and
    bounds of that block) or one delete block (valueCount 0, null bounds; V2 valueType NULL): each stored log
    record is a single write's record, none a merge of several."""
    r = recompute(name)
    assert (r.base_records, r.log_records) == (base_records, log_records)
    assert set(r.computed) == set(r.stored)
    for key, payload in r.computed.items():
        assert strict(payload) == strict(r.stored[key]), key


def test_v8_delete_only_log_file_is_empty_v1() -> None:
    r = recompute(V8_TRIPS)
    empty = [p for p in r.computed.values() if p["valueCount"] == 0]
    delete_only = {  # the log files of the table's delete commit
        ".6e1d5cc4-c487-487d-abbe-fe9b30b1c0cc-0_20251220210128625.log.1_0-1097-3150",
        ".8aa68f7e-afd6-4c94-b86c-8a886552e08d-0_20251220210125441.log.1_0-1047-3000",
    }
    columns = [*ALWAYS_INDEXED_META_COLUMNS, "city", "driver", "fare", "rider", "ts", "uuid"]
    assert sorted((p["fileName"], p["columnName"]) for p in empty) == sorted(
        (f, c) for f in delete_only for c in columns
    )
    for p in empty:
        assert p["minValue"] is None and p["maxValue"] is None and p["nullCount"] == 0 and p["totalSize"] == 0
        assert "valueType" not in p


def test_v9_value_types_of_the_fixture() -> None:
    r = recompute(V9_META)
    seen = {
        (p["columnName"], p["valueType"]["typeOrdinal"], p["valueType"]["additionalInfo"]) for p in r.computed.values()
    }
    assert ("amount", 10, "15,2") in seen
    assert ("fee_amount", 10, "10,2") in seen
    assert ("txn_datetime", 16, None) in seen
    assert ("txn_date", 12, None) in seen
    assert ("is_international", 2, None) in seen
    assert ("txn_ts", 4, None) in seen
    assert ("region", 7, None) in seen
    assert ("region", 1, None) in seen  # delete-only log files


@pytest.mark.parametrize("name", [V8_TRIPS, V9_META])
def test_payloads_and_tombstones_round_trip_through_the_fixture_schema(name: str) -> None:
    """What we build is what fastavro writes with the table's own `HoodieMetadataRecord` schema and reads back."""
    r = recompute(name)
    parsed = fastavro.parse_schema(r.schema)
    version = V2 if name == V9_META else V1
    payloads = [*r.computed.values(), tombstone("f.parquet", "c", version)]
    for key, record in _records("p", payloads):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, record)
        buf.seek(0)
        back = fastavro.schemaless_reader(buf, parsed, None, return_record_name=True, return_record_name_override=True)
        assert isinstance(back, dict)
        if version == V1:
            back["ColumnStatsMetadata"].pop("valueType", None)
        assert strict(back) == strict(record), key


def _records(partition: str, payloads: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(key, record) of column-stats payloads, as the write path builds them."""
    files = [NewFile(partition, str(p["fileName"]), 0) for p in payloads]
    out = stats_records(("column_stats",), files, [[p] for p in payloads])
    return [(r.key, r.value) for r in out if r.value is not None]


# ---- which columns


def test_index_from_the_fixture_definitions() -> None:
    storage = Storage()
    v8 = column_stats_index(storage, str(fixture_table_readonly(V8_TRIPS)), 8)
    assert v8 == ColumnStatsIndex((*ALWAYS_INDEXED_META_COLUMNS, "ts", "uuid", "rider", "driver", "fare", "city"), V1)
    v9 = column_stats_index(storage, str(fixture_table_readonly(V9_ROLLBACK)), 9)
    assert v9 == ColumnStatsIndex(TXN_COLUMNS, V2)


def test_index_definitions_without_column_stats_or_version() -> None:
    assert index_from_definitions({"record_index": {"sourceFields": []}}, 9) is None
    defs = {"column_stats": {"sourceFields": ["a", "b"]}}
    assert index_from_definitions(defs, 8) == ColumnStatsIndex(("a", "b"), V1)
    assert index_from_definitions(defs, 9) == ColumnStatsIndex(("a", "b"), V2)
    with pytest.raises(UnsupportedTableError):
        index_from_definitions({"column_stats": {"sourceFields": ["a"], "version": "V3"}}, 9)


def test_fallback_without_index_definitions(tmp_path: Path) -> None:
    fields = [pa.field(n, pa.string()) for n in ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key")]
    fields += [pa.field("_hoodie_partition_path", pa.string()), pa.field("_hoodie_file_name", pa.string())]
    fields += [pa.field("nested", pa.struct([pa.field("x", pa.int32())])), pa.field("tags", pa.list_(pa.string()))]
    fields += [pa.field("wide", pa.decimal128(38, 2)), pa.field("ok", pa.decimal128(30, 15))]
    fields += [pa.field(f"c{i}", pa.int64()) for i in range(40)]
    schema = pa.schema(fields)
    expected = (*ALWAYS_INDEXED_META_COLUMNS, "ok", *(f"c{i}" for i in range(MAX_COLUMNS_TO_INDEX - 1)))
    assert default_columns(schema) == expected
    assert column_stats_index(Storage(), str(tmp_path), 6, schema) == ColumnStatsIndex(expected, V1)
    assert column_stats_index(Storage(), str(tmp_path), 6) is None
    assert default_columns(pa.schema([pa.field("a", pa.int32())])) == ("a",)


# ---- value encodings the fixtures do not show


def w(wrapper: str, value: Any) -> tuple[str, dict[str, Any]]:
    return (NS + wrapper, {"value": value})


def _one(payloads: list[dict[str, Any]], column: str) -> dict[str, Any]:
    (found,) = [p for p in payloads if p["columnName"] == column]
    return found


def _bounds(p: dict[str, Any]) -> tuple[Any, Any]:
    return p["minValue"], p["maxValue"]


TYPED = pa.table(
    {
        "i32": pa.array([3, None, -7], pa.int32()),
        "i16": pa.array([1, 2, 3], pa.int16()),
        "f32": pa.array([1.5, -2.25, None], pa.float32()),
        "bin": pa.array([b"\xff", b"\x01", None], pa.binary()),
        "fix": pa.array([b"ab", b"aa", b"zz"], pa.binary(2)),
        "dec": pa.array([Decimal("-1.28"), Decimal("1.28"), Decimal("0.00")], pa.decimal128(5, 2)),
        "day": pa.array([date(2024, 1, 2), date(1969, 12, 31), None], pa.date32()),
        "ts_ms": pa.array([5, 1, 3], pa.timestamp("ms", tz="UTC")),
        "ts_ns": pa.array([5, 1, 3], pa.timestamp("ns")),
        "ts_us": pa.array([datetime(2024, 1, 1, tzinfo=UTC), None, None], pa.timestamp("us")),
        "tm_ms": pa.array([time(1), time(0, 0, 1), None], pa.time32("ms")),
        "tm_us": pa.array([time(2), time(0, 0, 0, 5), None], pa.time64("us")),
        "none": pa.array([None, None, None], pa.string()),
        "txt": pa.array(["é", "z", "ä"], pa.string()),
    }
)
ALL = ColumnStatsIndex(tuple(TYPED.column_names), V2)


def test_v2_types_and_wrappers() -> None:
    got = records_stats(TYPED, "f.log", ALL)
    kinds = {p["columnName"]: (p["valueType"]["typeOrdinal"], p["minValue"] and p["minValue"][0]) for p in got}
    assert kinds == {
        "i32": (ValueType.INT, NS + "IntWrapper"),
        "i16": (ValueType.INT, NS + "IntWrapper"),
        "f32": (ValueType.FLOAT, NS + "FloatWrapper"),
        "bin": (ValueType.BYTES, NS + "BytesWrapper"),
        "fix": (ValueType.FIXED, NS + "BytesWrapper"),
        "dec": (ValueType.DECIMAL, NS + "BytesWrapper"),
        "day": (ValueType.DATE, NS + "IntWrapper"),
        "ts_ms": (ValueType.TIMESTAMP_MILLIS, NS + "LongWrapper"),
        "ts_ns": (ValueType.LOCAL_TIMESTAMP_NANOS, NS + "LongWrapper"),
        "ts_us": (ValueType.LOCAL_TIMESTAMP_MICROS, NS + "LongWrapper"),
        "tm_ms": (ValueType.TIME_MILLIS, NS + "IntWrapper"),
        "tm_us": (ValueType.TIME_MICROS, NS + "LongWrapper"),
        "none": (ValueType.STRING, None),
        "txt": (ValueType.STRING, NS + "StringWrapper"),
    }
    assert _bounds(_one(got, "i32")) == (w("IntWrapper", -7), w("IntWrapper", 3))
    assert _bounds(_one(got, "bin")) == (
        w("BytesWrapper", b"\x01"),
        w("BytesWrapper", b"\xff"),
    )
    # decimals: the unscaled value at the column's scale, Java BigInteger bytes (-128 -> 80, 128 -> 00 80)
    dec = _one(got, "dec")
    assert _bounds(dec) == (w("BytesWrapper", b"\x80"), w("BytesWrapper", b"\x00\x80"))
    assert dec["valueType"] == {"typeOrdinal": 10, "additionalInfo": "5,2"}
    assert _bounds(_one(got, "day")) == (w("IntWrapper", -1), w("IntWrapper", 19724))
    assert _bounds(_one(got, "ts_ms"))[1] == w("LongWrapper", 5)
    assert _bounds(_one(got, "ts_us"))[0] == w("LongWrapper", 1704067200000000)
    assert _bounds(_one(got, "tm_ms")) == (
        w("IntWrapper", 1000),
        w("IntWrapper", 3600000),
    )
    assert _bounds(_one(got, "tm_us"))[0] == w("LongWrapper", 5)
    # text by code point (= UTF-8 bytes): "z" < "ä" < "é"
    assert _bounds(_one(got, "txt")) == (w("StringWrapper", "z"), w("StringWrapper", "é"))
    none = _one(got, "none")
    assert (none["minValue"], none["valueCount"], none["nullCount"]) == (None, 3, 3)
    assert _one(got, "i32")["nullCount"] == 1 and _one(got, "i32")["totalSize"] == 0


def test_v1_wrappers() -> None:
    got = records_stats(TYPED, "f.log", ColumnStatsIndex(ALL.columns, V1))
    assert all("valueType" not in p for p in got)
    assert _bounds(_one(got, "day")) == (w("DateWrapper", -1), w("DateWrapper", 19724))
    dec = _bounds(_one(got, "dec"))
    assert dec[0][0] == NS + "DecimalWrapper" and dec[0][1]["value"].as_tuple().exponent == -15
    assert dec == (
        w("DecimalWrapper", Decimal("-1.28")),
        w("DecimalWrapper", Decimal("1.28")),
    )
    assert _bounds(_one(got, "ts_ms"))[0] == w("LongWrapper", 1)
    assert _bounds(_one(got, "fix"))[0] == w("BytesWrapper", b"aa")
    assert _bounds(_one(got, "i16"))[1] == w("IntWrapper", 3)


def test_parquet_file_sums_row_groups_and_reads_footer_sizes() -> None:
    table = pa.table({"k": pa.array([f"k{i:03d}" for i in range(100)]), "v": pa.array([*range(99), None], pa.int64())})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=30)
    data = buf.getvalue()
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert meta.num_row_groups == 4
    got = parquet_file_stats(data, "f.parquet", ColumnStatsIndex(("v", "k", "missing"), V2))
    assert [p["columnName"] for p in got] == ["v", "k"]
    v = got[0]
    assert (v["valueCount"], v["nullCount"]) == (100, 1)
    assert _bounds(v) == (w("LongWrapper", 0), w("LongWrapper", 98))
    groups = [meta.row_group(g).column(1) for g in range(4)]
    assert v["totalSize"] == sum(c.total_compressed_size for c in groups)
    assert v["totalUncompressedSize"] == sum(c.total_uncompressed_size for c in groups)
    empty = io.BytesIO()
    pq.write_table(table.slice(0, 0), empty)
    assert parquet_file_stats(empty.getvalue(), "e.parquet", ColumnStatsIndex(("v",), V2)) == []


def test_float_zeros_and_nan() -> None:
    """Base files as Hudi reads Parquet footers: NaN ignored, a zero minimum -0.0, a zero maximum +0.0 (seen in
    v8_trips: a file of fares {0.0, ...} stores min -0.0). Log records as Java's Double.compareTo orders them."""
    values = pa.table({"d": pa.array([0.0, math.nan, 2.0])})
    index = ColumnStatsIndex(("d",), V2)
    buf = io.BytesIO()
    pq.write_table(values, buf)
    base = parquet_file_stats(buf.getvalue(), "f.parquet", index)[0]
    assert strict(_bounds(base)) == strict((w("DoubleWrapper", -0.0), w("DoubleWrapper", 2.0)))
    log = records_stats(values, "f.log", index)[0]
    assert strict(_bounds(log)) == strict((w("DoubleWrapper", 0.0), w("DoubleWrapper", math.nan)))
    zeros = records_stats(pa.table({"d": pa.array([0.0, -0.0])}), "f.log", index)[0]
    assert strict(_bounds(zeros)) == strict((w("DoubleWrapper", -0.0), w("DoubleWrapper", 0.0)))


def test_empty_log_file_and_tombstones() -> None:
    index = ColumnStatsIndex(("a", "b"), V2)
    empty = records_stats(pa.table({}), "x.log", index)
    assert [p["columnName"] for p in empty] == ["a", "b"]
    assert empty[0] == {
        "fileName": "x.log",
        "columnName": "a",
        "minValue": None,
        "maxValue": None,
        "valueCount": 0,
        "nullCount": 0,
        "totalSize": 0,
        "totalUncompressedSize": 0,
        "isDeleted": False,
        "isTightBound": False,
        "valueType": {"typeOrdinal": 1, "additionalInfo": None},
    }
    gone = tombstone("f.parquet", "a", V2)
    assert (gone["isDeleted"], gone["valueCount"], gone["nullCount"], gone["totalSize"]) == (True, -1, -1, -1)
    assert gone["valueType"] == {"typeOrdinal": 1, "additionalInfo": None}
    assert "valueType" not in tombstone("f.parquet", "a", V1)
    ((key, record),) = _records("p=1", [gone])
    assert key == column_stats_key("a", "p=1", "f.parquet")
    assert record["type"] == 3 and record["ColumnStatsMetadata"] is not gone


def test_struct_children_and_unsupported_types() -> None:
    table = pa.table({"s": pa.array([{"x": 1}, None, {"x": None}], pa.struct([pa.field("x", pa.int32())]))})
    (p,) = records_stats(table, "f.log", ColumnStatsIndex(("s.x",), V2))
    assert (p["valueCount"], p["nullCount"], p["minValue"]) == (3, 2, w("IntWrapper", 1))
    with pytest.raises(UnsupportedTableError):
        records_stats(table, "f.log", ColumnStatsIndex(("s",), V2))
    with pytest.raises(UnsupportedTableError):
        records_stats(pa.table({"u": pa.array([1], pa.uint64())}), "f.log", ColumnStatsIndex(("u",), V2))


def test_partition_stats_of_v2_decimals_widen_by_value_not_by_bytes() -> None:
    """V2 stores decimals as the unscaled two's-complement bytes: -1 is b'\\xff', 100 is b'd'; as bytes -1 would sort
    above 100."""

    def payload(unscaled: int, count: int) -> dict[str, Any]:
        raw = unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)  # minimal, as Java's
        value = ("org.apache.hudi.avro.model.BytesWrapper", {"value": raw})
        return {
            "minValue": value,
            "maxValue": value,
            "valueCount": count,
            "nullCount": 0,
            "totalSize": 1,
            "totalUncompressedSize": 1,
            "valueType": {"typeOrdinal": 10, "additionalInfo": "10,2"},
        }

    merged = combine_stats(payload(-1, 2), payload(100, 3))
    assert merged["minValue"][1]["value"] == b"\xff" and merged["maxValue"][1]["value"] == b"d"
    assert merged["valueCount"] == 5
    merged = combine_stats(payload(100, 3), payload(-1, 2))
    assert merged["minValue"][1]["value"] == b"\xff" and merged["maxValue"][1]["value"] == b"d"
