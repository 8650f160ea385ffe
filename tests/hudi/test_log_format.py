"""Hudi log format: real log files, the hudi-rs oracle, corrupt-block rules, round trips and fuzzing."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import random
import struct
import tempfile
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tableservice.errors import AlreadyExistsError, PermanentError, TableServiceError, UnsupportedTableError
from tableservice.hudi.file_group.log_format import (
    BlockType,
    CorruptBlock,
    DeleteRecord,
    HeaderKey,
    LogBlock,
    append_log_blocks,
    decode_data_block,
    decode_delete_block,
    encode_avro_data_block,
    encode_command_block,
    encode_delete_block,
    encode_parquet_data_block,
    iter_log_blocks,
    rollback_header,
)
from tableservice.hudi.file_group.log_format.blocks import frame_block
from tableservice.hudi.table.schema import avro_schema_from_arrow
from tableservice.storage import Storage
from tests.support.fixtures import fixture_table, fixture_table_readonly

STORAGE = Storage()
MOR_TABLES = [
    "quickstart_trips_table/mor/avro/v6_trips_8i1u",
    "quickstart_trips_table/mor/avro/v6_trips_8i3d",
    "quickstart_trips_table/mor/avro/v8_trips_8i3u1d",
    "sample_table/mor/avro/v9_txns_nonpart_nometa",
    "sample_table/mor/avro/v9_txns_simple_meta",
    "sample_table/mor/parquet/v6_complexkeygen_hivestyle",
    "sample_table/mor/parquet/v6_nonpartitioned_rollback",
]


def _logs(table: Path) -> list[Path]:
    return sorted(p for p in table.rglob(".*.log.*") if "metadata" not in p.relative_to(table).parts[:2])


def _blocks(path: Path | str) -> list[LogBlock | CorruptBlock]:
    return list(iter_log_blocks(STORAGE, str(path)))


# --- real files --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MOR_TABLES)
def test_every_fixture_log_file_decodes(name: str) -> None:
    table = fixture_table_readonly(name)
    logs = _logs(table)
    assert logs
    for log in logs:
        blocks = [b for b in _blocks(log) if isinstance(b, LogBlock)]
        assert blocks and len(blocks) == len(_blocks(log))
        assert sum(b.size for b in blocks) == log.stat().st_size
        for b in blocks:
            assert b.format_version == 1 and b.footer == {}
            assert b.instant_time is not None and len(b.instant_time) == 17
            if b.block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA):
                t = decode_data_block(b)
                assert t.num_rows >= 1
                assert t.column_names[:5] == [
                    "_hoodie_commit_time",
                    "_hoodie_commit_seqno",
                    "_hoodie_record_key",
                    "_hoodie_partition_path",
                    "_hoodie_file_name",
                ]
                assert set(t.column("_hoodie_commit_time").to_pylist()) == {b.instant_time}
            elif b.block_type == BlockType.DELETE:
                d = decode_delete_block(b)
                assert d.num_rows >= 1
                # Spark SQL deletes carry Hudi's "no ordering value": IntWrapper(0)
                assert d.column("ordering_value_kind").to_pylist() == ["int"] * d.num_rows
                assert d.column("ordering_value").to_pylist() == [0] * d.num_rows
            else:
                assert b.block_type == BlockType.COMMAND and b.is_rollback_command


def test_known_values_of_fixture_blocks() -> None:
    table = fixture_table_readonly("quickstart_trips_table/mor/avro/v6_trips_8i1u")
    (block,) = _blocks(_logs(table)[0])
    assert isinstance(block, LogBlock)
    assert block.block_type == BlockType.AVRO_DATA and block.instant_time == "20250331030645735"
    row = decode_data_block(block).to_pylist()[0]
    assert row["_hoodie_record_key"] == "9909a8b1-2d15-4d3d-8ec9-efc48c536a00"
    assert row["_hoodie_commit_seqno"] == "20250331030645735_0_1"
    assert (row["rider"], row["driver"], row["fare"], row["city"]) == ("rider-D", "driver-L", 25.0, "san_francisco")

    table = fixture_table_readonly("quickstart_trips_table/mor/avro/v6_trips_8i3d")
    (block,) = _blocks(_logs(table)[0])
    assert isinstance(block, LogBlock)
    deletes = decode_delete_block(block)
    assert deletes.column("record_key").to_pylist() == [
        "e96c4396-3fad-413a-a942-4cb36106d721",
        "9909a8b1-2d15-4d3d-8ec9-efc48c536a00",
        "334e26e9-8355-45cc-97c6-c31daf0df330",
    ]
    assert set(deletes.column("partition_path").to_pylist()) == {"city=san_francisco"}

    table = fixture_table_readonly("sample_table/mor/parquet/v6_nonpartitioned_rollback")
    cmd = [b for log in _logs(table) for b in _blocks(log) if isinstance(b, LogBlock) and b.is_rollback_command]
    assert len(cmd) == 1 and cmd[0].target_instant_time == "20250126040826878"
    # our encoder writes the same block as Hudi (header entries in key order; Hudi's order is a HashMap's)
    (mine,) = _blocks_of(encode_command_block(rollback_header("20250126040936578", "20250126040826878")))
    assert isinstance(mine, LogBlock)
    assert (mine.size, mine.header, mine.content_length) == (cmd[0].size, cmd[0].header, 0)


def _blocks_of(data: bytes, tmp: Path | None = None) -> list[LogBlock | CorruptBlock]:
    path = (tmp or Path(tempfile.gettempdir())) / f".probe-{random.getrandbits(40)}.log.1_0-0-0"
    path.write_bytes(data)
    try:
        return _blocks(path)
    finally:
        path.unlink()


def test_avro_and_delete_content_bytes_equal_hudi_java() -> None:
    """Re-encoding decoded fixture blocks reproduces Hudi's content bytes exactly."""
    for name in MOR_TABLES[:5]:
        for log in _logs(fixture_table_readonly(name)):
            for b in _blocks(log):
                assert isinstance(b, LogBlock)
                if b.block_type == BlockType.AVRO_DATA:
                    again = encode_avro_data_block(decode_data_block(b), b.avro_schema or {}, b.header)
                elif b.block_type == BlockType.DELETE:
                    again = encode_delete_block(decode_delete_block(b), b.header)
                else:
                    continue
                (nb,) = _blocks_of(again)
                assert isinstance(nb, LogBlock) and nb.content == b.content and nb.size == b.size


# --- hudi-rs oracle ----------------------------------------------------------------------------


def _hudi_rows(path: Path) -> list[dict[str, Any]]:
    from hudi import HudiTableBuilder

    table = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read())
    return sorted(table.to_pylist(), key=lambda r: (r["_hoodie_record_key"], r["_hoodie_commit_time"]))


def _rewrite_logs(table: Path, *, as_avro: bool = False, change: dict[str, Any] | None = None) -> int:
    """Rewrite every log file of a table copy with our encoder from the records we decoded."""
    written = 0
    for log in _logs(table):
        out = []
        for b in _blocks(log):
            assert isinstance(b, LogBlock)
            if b.block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA):
                t = decode_data_block(b)
                for col, value in (change or {}).items():
                    t = t.set_column(
                        t.schema.get_field_index(col), col, pa.array([value] * t.num_rows, t.schema.field(col).type)
                    )
                if b.block_type == BlockType.AVRO_DATA or as_avro:
                    out.append(encode_avro_data_block(t, b.avro_schema or {}, b.header))
                else:
                    out.append(encode_parquet_data_block(t, b.header))
            elif b.block_type == BlockType.DELETE:
                out.append(encode_delete_block(decode_delete_block(b), b.header))
            else:
                out.append(encode_command_block(b.header))
            written += 1
        log.unlink()
        append_log_blocks(STORAGE, str(log), out)
    return written


@pytest.mark.oracle
@pytest.mark.parametrize("name", MOR_TABLES)
def test_rewritten_logs_read_the_same_in_hudi_rs(name: str, tmp_path: Path) -> None:
    original = _hudi_rows(fixture_table_readonly(name))
    copy = fixture_table(name, tmp_path)
    assert _rewrite_logs(copy) > 0
    assert _hudi_rows(copy) == original


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["sample_table/mor/parquet/v6_complexkeygen_hivestyle", MOR_TABLES[0]])
def test_avro_blocks_with_nested_types_read_in_hudi_rs(name: str, tmp_path: Path) -> None:
    """Parquet blocks rewritten as Avro blocks (structs, arrays, maps, decimals, dates, timestamps)."""
    original = _hudi_rows(fixture_table_readonly(name))
    copy = fixture_table(name, tmp_path)
    _rewrite_logs(copy, as_avro=True)
    assert _hudi_rows(copy) == original


@pytest.mark.oracle
def test_hudi_rs_sees_values_we_write(tmp_path: Path) -> None:
    """Negative control: a changed value in our re-encoded log block shows up in hudi-rs's snapshot."""
    name = MOR_TABLES[0]
    copy = fixture_table(name, tmp_path)
    _rewrite_logs(copy, change={"rider": "rider-ours", "fare": 99.5})
    rows = {r["_hoodie_record_key"]: r for r in _hudi_rows(copy)}
    updated = rows["9909a8b1-2d15-4d3d-8ec9-efc48c536a00"]
    assert (updated["rider"], updated["fare"]) == ("rider-ours", 99.5)


@pytest.mark.oracle
@pytest.mark.parametrize("name", MOR_TABLES)
def test_decoded_log_rows_equal_hudi_rs_rows(name: str) -> None:
    """Snapshot rows that come from a log record equal the record we decode; keys deleted last are gone."""
    table = fixture_table_readonly(name)
    ours: dict[tuple[str, str], dict[str, Any]] = {}
    last_event: dict[str, tuple[str, str]] = {}
    for log in _logs(table):
        for b in _blocks(log):
            assert isinstance(b, LogBlock) and b.instant_time is not None
            if b.block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA):
                for r in decode_data_block(b).to_pylist():
                    ours[(r["_hoodie_record_key"], r["_hoodie_commit_time"])] = r
                    last_event[r["_hoodie_record_key"]] = max(
                        last_event.get(r["_hoodie_record_key"], ("", "")), (b.instant_time, "data")
                    )
            elif b.block_type == BlockType.DELETE:
                for key in decode_delete_block(b).column("record_key").to_pylist():
                    last_event[key] = max(last_event.get(key, ("", "")), (b.instant_time, "delete"))
    rows = _hudi_rows(table)
    matched = 0
    for row in rows:
        mine = ours.get((row["_hoodie_record_key"], row["_hoodie_commit_time"]))
        if mine is not None:
            matched += 1
            # compaction keeps commit time and sequence number but names the new base file
            assert {k: mine[k] for k in row if k != "_hoodie_file_name"} == {
                k: v for k, v in row.items() if k != "_hoodie_file_name"
            }
    deleted = {k for k, (_, what) in last_event.items() if what == "delete"}
    assert deleted.isdisjoint(r["_hoodie_record_key"] for r in rows)
    assert matched + len(deleted) >= 1


# --- corrupt blocks ----------------------------------------------------------------------------


def _data_block(instant: str, n: int = 3) -> bytes:
    t = pa.table({"id": pa.array(range(n), pa.int64()), "name": [f"n{i}" for i in range(n)]})
    return encode_avro_data_block(t, avro_schema_from_arrow(t.schema, "r", "ns"), {HeaderKey.INSTANT_TIME: instant})


def _kinds(blocks: list[LogBlock | CorruptBlock]) -> list[str]:
    return [b.reason.split(" ")[0] if isinstance(b, CorruptBlock) else b.block_type.name for b in blocks]


def _assert_tiles(blocks: list[LogBlock | CorruptBlock], size: int) -> None:
    pos = 0
    for b in blocks:
        assert b.offset == pos
        pos += b.size if isinstance(b, LogBlock) else b.length
    assert pos == size


def test_corrupt_block_rules(tmp_path: Path) -> None:
    a, b = _data_block("20250101000000001"), _data_block("20250101000000002")
    cases: dict[str, tuple[bytes, list[str]]] = {
        "garbage": (b"not a hudi log file at all", ["no"]),
        "empty": (b"", []),
        "truncated tail": (a + b[:40], ["AVRO_DATA", "block"]),
        "partial magic": (a + b"#HU", ["AVRO_DATA", "file"]),
        "short size": (a + b"#HUDI#\0\0", ["AVRO_DATA", "file"]),
        "block then garbage": (a + b"xyz" + b, ["no", "AVRO_DATA"]),  # Hudi: the block itself is corrupt
        "total mismatch": (a[:-1] + bytes([a[-1] ^ 1]) + b, ["totalBlockLength", "AVRO_DATA"]),
        "negative size": (b"#HUDI#" + struct.pack(">q", -5) + b"junk" + b, ["invalid", "AVRO_DATA"]),
        "version 2": (a[:14] + struct.pack(">i", 2) + a[18:] + b, ["unsupported", "AVRO_DATA"]),
        "type 9": (a[:18] + struct.pack(">i", 9) + a[22:] + b, ["unknown", "AVRO_DATA"]),
        "type CORRUPT": (a[:18] + struct.pack(">i", 2) + a[22:] + b, ["block", "AVRO_DATA"]),
        "header key 42": (a[:26] + struct.pack(">i", 42) + a[30:] + b, ["header", "AVRO_DATA"]),
    }
    for label, (data, expected) in cases.items():
        path = tmp_path / ".f_1.log.1_0-0-0"
        path.write_bytes(data)
        blocks = _blocks(path)
        assert _kinds(blocks) == expected, label
        _assert_tiles(blocks, len(data))
    # a corrupt region runs up to the next magic: the second block is still found at its offset
    path.write_bytes(a[:-1] + b"\x00" + b)
    blocks = _blocks(path)
    assert isinstance(blocks[0], CorruptBlock) and blocks[0].length == len(a)
    assert isinstance(blocks[1], LogBlock) and blocks[1].instant_time == "20250101000000002"


def test_lazy_content_needs_storage(tmp_path: Path) -> None:
    path = tmp_path / ".f_1.log.1_0-0-0"
    path.write_bytes(_data_block("20250101000000001", 50))
    (block,) = iter_log_blocks(STORAGE, str(path), eager_content_limit=0)
    assert isinstance(block, LogBlock) and block.content is None and block.content_length > 0
    with pytest.raises(PermanentError):
        decode_data_block(block)
    assert decode_data_block(block, STORAGE).column("id").to_pylist() == list(range(50))


def test_unsupported_blocks(tmp_path: Path) -> None:
    hfile = frame_block(BlockType.HFILE_DATA, {HeaderKey.INSTANT_TIME: "1"}, b"HFILEBLK")
    (block,) = _blocks_of(hfile, tmp_path)
    assert isinstance(block, LogBlock) and block.block_type == BlockType.HFILE_DATA
    with pytest.raises(UnsupportedTableError) as e:
        decode_data_block(block)
    assert e.value.path == block.location
    kryo = frame_block(BlockType.DELETE, {}, struct.pack(">ii", 2, 3) + b"abc")
    (block,) = _blocks_of(kryo, tmp_path)
    assert isinstance(block, LogBlock)
    with pytest.raises(UnsupportedTableError, match="version 2"):
        decode_delete_block(block)


# --- writing -----------------------------------------------------------------------------------


def test_append_and_create(tmp_path: Path) -> None:
    path = str(tmp_path / "p" / ".f_1.log.1_0-0-0")
    a, b = (
        _data_block("20250101000000001"),
        encode_command_block(rollback_header("20250101000000003", "20250101000000001")),
    )
    first = append_log_blocks(STORAGE, path, [a])
    assert (first.created, first.offset, first.size) == (True, 0, len(a))
    second = append_log_blocks(STORAGE, path, [b])
    assert (second.created, second.offset, second.size) == (False, len(a), len(a) + len(b))
    blocks = _blocks(path)
    assert [x.block_type for x in blocks if isinstance(x, LogBlock)] == [BlockType.AVRO_DATA, BlockType.COMMAND]
    assert isinstance(blocks[1], LogBlock) and blocks[1].is_rollback_command
    with pytest.raises(AlreadyExistsError):
        append_log_blocks(STORAGE, path, [a], create_only=True)
    with pytest.raises(PermanentError):
        append_log_blocks(STORAGE, path, [b"junk"])
    with pytest.raises(PermanentError):
        encode_command_block({HeaderKey.INSTANT_TIME: "1"})


def test_parquet_block_round_trip(tmp_path: Path) -> None:
    t = pa.table({"k": ["a", "b"], "d": pa.array([decimal.Decimal("1.50"), None], pa.decimal128(10, 2))})
    avro = avro_schema_from_arrow(t.schema, "r", "ns")
    data = encode_parquet_data_block(t, {HeaderKey.INSTANT_TIME: "1"}, avro_schema=avro)
    (block,) = _blocks_of(data, tmp_path)
    assert isinstance(block, LogBlock) and block.avro_schema == avro
    assert decode_data_block(block).equals(t)
    with pytest.raises(PermanentError):
        encode_parquet_data_block(t, {HeaderKey.INSTANT_TIME: "1"})


# --- property tests: Avro data blocks ----------------------------------------------------------

_TYPES: list[tuple[pa.DataType, st.SearchStrategy[Any]]] = [
    (pa.bool_(), st.booleans()),
    (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    (pa.float32(), st.floats(width=32, allow_nan=False)),
    (pa.float64(), st.floats(allow_nan=False)),
    (pa.string(), st.text(max_size=20)),
    (pa.binary(), st.binary(max_size=20)),
    (pa.date32(), st.dates()),
    (pa.time32("ms"), st.integers(0, 86_399_999)),
    (pa.time64("us"), st.integers(0, 86_399_999_999)),
    (pa.timestamp("us", tz="UTC"), st.integers(-(2**50), 2**50)),
    (pa.timestamp("ms", tz="UTC"), st.integers(-(2**40), 2**40)),
    (pa.timestamp("us"), st.integers(-(2**50), 2**50)),
    (pa.decimal128(10, 2), st.decimals(-(10**8) + 1, 10**8 - 1, places=2, allow_nan=False, allow_infinity=False)),
    (pa.decimal128(38, 4), st.decimals(-(10**30), 10**30, places=4, allow_nan=False, allow_infinity=False)),
]


@st.composite
def _column(draw: st.DrawFn, depth: int = 0) -> tuple[pa.Field, st.SearchStrategy[Any]]:
    nullable = draw(st.booleans())
    kind = draw(st.sampled_from(["leaf"] * 4 + (["list", "map", "struct"] if depth < 2 else [])))
    if kind == "leaf":
        t, values = draw(st.sampled_from(_TYPES))
    elif kind in ("list", "map"):
        inner, inner_values = draw(_column(depth + 1))
        item = pa.field("element" if kind == "list" else "value", inner.type, nullable=inner.nullable)
        if kind == "list":
            t, values = pa.list_(item), st.lists(inner_values, max_size=4)
        else:
            t = pa.map_(pa.string(), item)
            values = st.dictionaries(st.text(max_size=5), inner_values, max_size=3).map(lambda d: list(d.items()))
    else:
        children = [draw(_column(depth + 1)) for _ in range(draw(st.integers(1, 3)))]
        names = [f"c{i}" for i in range(len(children))]
        t = pa.struct([pa.field(n, c.type, nullable=c.nullable) for n, (c, _) in zip(names, children, strict=True)])
        values = st.fixed_dictionaries({n: v for n, (_, v) in zip(names, children, strict=True)})
    if nullable:
        values = st.one_of(st.none(), values)
    return pa.field("x", t, nullable=nullable), values


@st.composite
def _tables(draw: st.DrawFn) -> pa.Table:
    columns = [draw(_column()) for _ in range(draw(st.integers(1, 5)))]
    n = draw(st.integers(0, 30))
    arrays, fields = [], []
    for i, (f, values) in enumerate(columns):
        rows = draw(st.lists(values, min_size=n, max_size=n))
        arrays.append(pa.array(rows, type=f.type))
        fields.append(f.with_name(f"col{i}"))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _for_fastavro(value: Any, t: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_map(t):
        return {k: _for_fastavro(v, t.item_type) for k, v in value}
    if pa.types.is_list(t):
        return [_for_fastavro(v, t.value_type) for v in value]
    if pa.types.is_struct(t):
        return {t.field(i).name: _for_fastavro(value[t.field(i).name], t.field(i).type) for i in range(t.num_fields)}
    return value


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_tables())
def test_avro_block_round_trip_and_bytes_equal_fastavro(table: pa.Table) -> None:
    avro = avro_schema_from_arrow(table.schema, "rec", "hoodie.t")
    data = encode_avro_data_block(table, avro, {HeaderKey.INSTANT_TIME: "20250101000000000"})
    (block,) = _blocks_of(data)
    assert isinstance(block, LogBlock) and block.content is not None
    decoded = decode_data_block(block)
    assert decoded.schema == table.schema
    assert decoded.equals(table)
    # every record is exactly what an independent Avro implementation writes for it
    parsed = fastavro.parse_schema(avro)
    content, pos = block.content, 8
    for row in table.to_pylist():
        (length,) = struct.unpack_from(">i", content, pos)
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {f.name: _for_fastavro(row[f.name], f.type) for f in table.schema})
        assert content[pos + 4 : pos + 4 + length] == buf.getvalue()
        pos += 4 + length
    assert pos == len(content)


_HAND_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "hand",
    "namespace": "ns",
    "fields": [
        {"name": "dec_b", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 3}]},
        {"name": "dec_wide", "type": {"type": "bytes", "logicalType": "decimal", "precision": 50, "scale": 5}},
        {"name": "en", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 4}},
        {"name": "lt", "type": [{"type": "long", "logicalType": "local-timestamp-millis"}, "null"]},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "single", "type": ["long"]},
        {"name": "arr", "type": {"type": "array", "items": {"type": "map", "values": ["null", "float"]}}},
        {"name": "again", "type": ["null", "E"]},
    ],
}
_HAND_ROWS = st.fixed_dictionaries(
    {
        "dec_b": st.one_of(st.none(), st.decimals(-(10**17) + 1, 10**17 - 1, places=3, allow_nan=False)),
        "dec_wide": st.decimals(-(10**44) + 1, 10**44 - 1, places=5, allow_nan=False),
        "en": st.sampled_from(["A", "B", "C"]),
        "fx": st.binary(min_size=4, max_size=4),
        "lt": st.one_of(st.none(), st.datetimes().map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))),
        "tm": st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)),
        "single": st.integers(-(2**63), 2**63 - 1),
        "arr": st.lists(
            st.dictionaries(st.text(max_size=4), st.one_of(st.none(), st.floats(width=32, allow_nan=False)))
        ),
        "again": st.one_of(st.none(), st.sampled_from(["A", "C"])),
    }
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_HAND_ROWS, max_size=15))
def test_avro_block_logical_types_against_fastavro(rows: list[dict[str, Any]]) -> None:
    """Bytes decimals (minimal two's complement), enums, fixed, local timestamps, [T, "null"] unions."""
    from tableservice.hudi.table.schema import arrow_schema_from_avro

    schema = arrow_schema_from_avro(_HAND_SCHEMA)
    arrow_rows = [{**r, "arr": [list(m.items()) for m in r["arr"]]} for r in rows]
    table = pa.Table.from_pylist(arrow_rows, schema=schema)
    (block,) = _blocks_of(encode_avro_data_block(table, _HAND_SCHEMA, {}))
    assert isinstance(block, LogBlock) and block.content is not None
    assert decode_data_block(block).equals(table)
    # fastavro reads our records back as written. (Bytes are not compared: for decimals we write Java's
    # minimal two's complement, e.g. -128 as one byte 0x80, where fastavro writes two.)
    parsed = fastavro.parse_schema(_HAND_SCHEMA)
    pos = 8
    for row in rows:
        (length,) = struct.unpack_from(">i", block.content, pos)
        back = fastavro.schemaless_reader(io.BytesIO(block.content[pos + 4 : pos + 4 + length]), parsed, None)
        assert back == row
        pos += 4 + length


def test_bytes_decimals_use_javas_minimal_twos_complement() -> None:
    schema = {
        "type": "record",
        "name": "r",
        "fields": [{"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 0}}],
    }
    values = [0, 127, 128, -128, -129, 255, -1]
    t = pa.table({"d": pa.array([decimal.Decimal(v) for v in values], pa.decimal128(9, 0))})
    (block,) = _blocks_of(encode_avro_data_block(t, schema, {}))
    assert isinstance(block, LogBlock) and block.content is not None
    datums, pos = [], 8
    for _ in values:
        (n,) = struct.unpack_from(">i", block.content, pos)
        datums.append(block.content[pos + 5 : pos + 4 + n])  # skip the length varint (one byte here)
        pos += 4 + n
    # java.math.BigInteger.valueOf(v).toByteArray()
    assert datums == [b"\x00", b"\x7f", b"\x00\x80", b"\x80", b"\xff\x7f", b"\x00\xff", b"\xff"]
    assert decode_data_block(block).column("d").to_pylist() == [decimal.Decimal(v) for v in values]


def test_long_arrays_fall_back_to_per_record_decoding() -> None:
    t = pa.table({"xs": pa.array([list(range(3000)), [], None, [1, 2]], pa.list_(pa.int64()))})
    data = encode_avro_data_block(t, avro_schema_from_arrow(t.schema, "r", "ns"), {})
    (block,) = _blocks_of(data)
    assert isinstance(block, LogBlock)
    assert decode_data_block(block).equals(t)


# --- property tests: delete blocks -------------------------------------------------------------

_ORDERING = st.one_of(
    st.tuples(st.just("int"), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just("long"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("double"), st.floats(allow_nan=False)),
    st.tuples(st.just("string"), st.text(max_size=10)),
    st.tuples(st.just("boolean"), st.booleans()),
    st.tuples(st.just("date"), st.dates()),
    st.tuples(st.just("timestamp_micros"), st.integers(-(2**50), 2**50)),
    st.tuples(st.just("decimal"), st.decimals(-(10**14), 10**14, places=15, allow_nan=False, allow_infinity=False)),
    st.tuples(st.just("null"), st.none()),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=12), st.one_of(st.none(), st.text(max_size=8)), _ORDERING), max_size=20))
def test_delete_block_round_trip(records: list[tuple[str, str | None, tuple[str, Any]]]) -> None:
    recs = [DeleteRecord(k, p, v, kind) for k, p, (kind, v) in records]
    data = encode_delete_block(recs, {HeaderKey.INSTANT_TIME: "20250101000000000"})
    (block,) = _blocks_of(data)
    assert isinstance(block, LogBlock)
    table = decode_delete_block(block)
    assert table.column("record_key").to_pylist() == [r.record_key for r in recs]
    assert table.column("partition_path").to_pylist() == [r.partition_path for r in recs]
    assert table.column("ordering_value_kind").to_pylist() == [r.ordering_kind for r in recs]
    # the decoded table encodes back to the same content
    (again,) = _blocks_of(encode_delete_block(table, block.header))
    assert isinstance(again, LogBlock) and again.content == block.content
    kinds = {r.ordering_kind for r in recs} - {"null"}
    if len(kinds) == 1 and kinds <= {"long", "string", "boolean", "double"}:
        assert table.column("ordering_value").to_pylist() == [r.ordering_value for r in recs]


def test_delete_ordering_value_types() -> None:
    def decoded(*recs: DeleteRecord) -> pa.Table:
        (block,) = _blocks_of(encode_delete_block(list(recs), {}))
        assert isinstance(block, LogBlock)
        return decode_delete_block(block)

    assert decoded(DeleteRecord("a", "p")).column("ordering_value").type == pa.int32()
    mixed = decoded(DeleteRecord("a", "p"), DeleteRecord("b", "p", 7))
    assert mixed.column("ordering_value").type == pa.int64()
    assert mixed.column("ordering_value_kind").to_pylist() == ["int", "long"]
    ts = decoded(DeleteRecord("a", "p", dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC)))
    assert ts.column("ordering_value").type == pa.timestamp("us", tz="UTC")
    assert ts.column("ordering_value").to_pylist()[0] == dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC)
    text = decoded(DeleteRecord("a", "p"), DeleteRecord("b", "p", "z"))
    assert text.column("ordering_value").to_pylist() == ["0", "z"]
    assert decoded(DeleteRecord("a", "p", decimal.Decimal("1.5"))).column("ordering_value").to_pylist() == [
        decimal.Decimal("1.500000000000000")
    ]


# --- fuzzing -----------------------------------------------------------------------------------


def _mutate(rng: random.Random, data: bytes, others: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        if not b:
            b += rng.randbytes(rng.randint(1, 30))
        i = rng.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.randrange(256)
        elif op == 2:
            del b[i:]
        elif op == 3:
            b[i:i] = rng.randbytes(rng.randint(1, 40))
        elif op == 4:
            j = rng.randrange(i, len(b) + 1)
            del b[i:j]
        else:
            other = rng.choice(others)
            k = rng.randrange(len(other))
            b[i:i] = other[k : k + rng.randint(1, 200)]
    return bytes(b)


def test_fuzzed_log_files_raise_only_typed_errors(tmp_path: Path) -> None:
    originals = [log.read_bytes() for name in MOR_TABLES for log in _logs(fixture_table_readonly(name))]
    originals.append(_data_block("20250101000000001", 20) + encode_delete_block([DeleteRecord("k", "p", 5)], {}))
    rng = random.Random(20250101)
    path = tmp_path / ".f_1.log.1_0-0-0"
    outcomes = {"block": 0, "corrupt": 0, "typed error": 0}
    for _ in range(400):
        data = _mutate(rng, rng.choice(originals), originals)
        path.write_bytes(data)
        blocks = _blocks(path)
        _assert_tiles(blocks, len(data))
        for b in blocks:
            if isinstance(b, CorruptBlock):
                outcomes["corrupt"] += 1
                continue
            outcomes["block"] += 1
            try:
                if b.block_type == BlockType.DELETE:
                    decode_delete_block(b)
                elif b.is_data_block:
                    decode_data_block(b)
            except TableServiceError as e:
                assert e.path == str(path)
                outcomes["typed error"] += 1
    assert all(v > 0 for v in outcomes.values()), outcomes


def test_fuzzed_block_content_raises_only_typed_errors() -> None:
    """Intact framing around damaged content: decoders fail with typed errors or decode."""
    blocks = [b for name in MOR_TABLES for log in _logs(fixture_table_readonly(name)) for b in _blocks(log)]
    nested = next(b for b in blocks if isinstance(b, LogBlock) and b.block_type == BlockType.PARQUET_DATA)
    (avro_nested,) = _blocks_of(
        encode_avro_data_block(decode_data_block(nested), nested.avro_schema or {}, nested.header)
    )
    candidates = [b for b in [*blocks, avro_nested] if isinstance(b, LogBlock) and b.content]
    rng = random.Random(7)
    outcomes = {"decoded": 0, "typed error": 0}
    for _ in range(300):
        block = rng.choice(candidates)
        content = bytearray(block.content or b"")
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(content))
            content[i] = rng.randrange(256) if rng.random() < 0.7 else content[i] ^ (1 << rng.randrange(8))
        (damaged,) = _blocks_of(frame_block(block.block_type, block.header, bytes(content)))
        assert isinstance(damaged, LogBlock)
        try:
            if damaged.block_type == BlockType.DELETE:
                decode_delete_block(damaged)
            else:
                decode_data_block(damaged)
            outcomes["decoded"] += 1
        except TableServiceError:
            outcomes["typed error"] += 1
    assert all(v > 0 for v in outcomes.values()), outcomes
