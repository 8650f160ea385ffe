"""The column-wise Avro block decoder (strings copied by Arrow over the block's bytes, record bounds checked in
bulk) against the per-record fastavro decoder it falls back to, and the merge's ordering keys against ranks."""

from __future__ import annotations

import decimal
import io
import json
import struct
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tableservice.errors import CorruptFileError
from tableservice.hudi.file_group.log_format import BlockType, LogBlock, iter_log_blocks, read_block_content
from tableservice.hudi.file_group.log_format.avro_decode import (
    _decode_with_fastavro,
    decode_avro_records,
    record_starts,
)
from tableservice.hudi.file_group.merge_config import MergeMode
from tableservice.hudi.file_group.merge_core import KeyGroups, dense_rank, order_keys, winners
from tableservice.hudi.table.schema import arrow_schema_from_avro, avro_schema_from_json, parse_avro
from tableservice.storage import Storage
from tests.support.fixtures import fixture_table_readonly

STORAGE = Storage()
AVRO_TABLES = [
    "quickstart_trips_table/mor/avro/v6_trips_8i1u",
    "quickstart_trips_table/mor/avro/v6_trips_8i3d",
    "quickstart_trips_table/mor/avro/v8_trips_8i3u1d",
    "sample_table/mor/avro/v9_txns_nonpart_nometa",
    "sample_table/mor/avro/v9_txns_simple_meta",
]


def _per_record(content: bytes, schema: dict[str, Any]) -> pa.Table:
    """The reference: every record decoded on its own by fastavro."""
    node = parse_avro(avro_schema_from_json(json.dumps(schema)))
    (count,) = struct.unpack_from(">i", content, 4)
    starts, ends = record_starts(content, count)
    return _decode_with_fastavro(content, starts, ends, node, arrow_schema_from_avro(node))


def _bulk(content: bytes, schema: dict[str, Any]) -> pa.Table:
    return decode_avro_records(content, parse_avro(avro_schema_from_json(json.dumps(schema))))


def _content(schema: dict[str, Any], rows: list[dict[str, Any]]) -> bytes:
    parsed = fastavro.parse_schema(schema)
    out = bytearray(struct.pack(">ii", 3, len(rows)))
    for row in rows:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, row)
        out += struct.pack(">i", len(buf.getvalue())) + buf.getvalue()
    return bytes(out)


def test_fixture_avro_blocks_decode_as_record_by_record() -> None:
    logs = []
    for name in AVRO_TABLES:
        table = fixture_table_readonly(name)
        logs += sorted(p for p in table.rglob(".*.log.*") if "metadata" not in p.relative_to(table).parts[:2])
    decoded = 0
    for log in logs:
        for block in iter_log_blocks(STORAGE, str(log)):
            if isinstance(block, LogBlock) and block.block_type is BlockType.AVRO_DATA:
                assert block.schema is not None
                content = read_block_content(block, STORAGE)
                schema = json.loads(block.schema)
                bulk, reference = _bulk(content, schema), _per_record(content, schema)
                assert bulk.num_rows >= 1
                assert bulk.equals(reference), f"{log.name} at {block.offset}"
                decoded += 1
    assert decoded


_EVERY_TYPE: dict[str, Any] = {
    "type": "record",
    "name": "every",
    "namespace": "ns",
    "fields": [
        {"name": "s", "type": ["null", "string"]},
        {"name": "s_req", "type": "string"},
        {"name": "b", "type": ["null", "bytes"]},
        {"name": "i", "type": ["null", "int"]},
        {"name": "l", "type": "long"},
        {"name": "f", "type": ["null", "float"]},
        {"name": "d", "type": "double"},
        {"name": "flag", "type": ["null", "boolean"]},
        {"name": "dec", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}]},
        {
            "name": "dec_fx",
            "type": {"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 16, "scale": 3},
        },
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "en", "type": ["null", {"type": "enum", "name": "E", "symbols": ["X", "Y"]}]},
        {
            "name": "nested",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "inner",
                    "fields": [
                        {"name": "name", "type": ["null", "string"]},
                        {"name": "tags", "type": {"type": "array", "items": "string"}},
                    ],
                },
            ],
        },
        {"name": "strs", "type": ["null", {"type": "array", "items": ["null", "string"]}]},
        {"name": "props", "type": ["null", {"type": "map", "values": ["null", "string"]}]},
    ],
}
_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=20)
_EVERY_ROWS = st.fixed_dictionaries(
    {
        "s": st.one_of(st.none(), _TEXT),
        "s_req": _TEXT,
        "b": st.one_of(st.none(), st.binary(max_size=20)),
        "i": st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
        "l": st.integers(-(2**63), 2**63 - 1),
        "f": st.one_of(st.none(), st.floats(width=32, allow_nan=False)),
        "d": st.floats(allow_nan=False),
        "flag": st.one_of(st.none(), st.booleans()),
        "dec": st.one_of(st.none(), st.decimals(-(10**9) + 1, 10**9 - 1, places=2, allow_nan=False)),
        "dec_fx": st.decimals(-(10**12) + 1, 10**12 - 1, places=3, allow_nan=False),
        "day": st.one_of(st.none(), st.dates()),
        "at": st.integers(-(2**50), 2**50),
        "en": st.one_of(st.none(), st.sampled_from(["X", "Y"])),
        "nested": st.one_of(
            st.none(), st.fixed_dictionaries({"name": st.one_of(st.none(), _TEXT), "tags": st.lists(_TEXT, max_size=4)})
        ),
        "strs": st.one_of(st.none(), st.lists(st.one_of(st.none(), _TEXT), max_size=5)),
        "props": st.one_of(st.none(), st.dictionaries(_TEXT, st.one_of(st.none(), _TEXT), max_size=4)),
    }
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_EVERY_ROWS, max_size=25))
def test_generated_blocks_of_every_type_decode_as_record_by_record(rows: list[dict[str, Any]]) -> None:
    content = _content(_EVERY_TYPE, rows)
    bulk = _bulk(content, _EVERY_TYPE)
    assert bulk.equals(_per_record(content, _EVERY_TYPE))
    assert bulk.column("s_req").to_pylist() == [r["s_req"] for r in rows]
    assert bulk.column("b").to_pylist() == [r["b"] for r in rows]


def test_known_strings_and_bytes() -> None:
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "s", "type": ["null", "string"]},
            {"name": "b", "type": "bytes"},
            {"name": "m", "type": {"type": "map", "values": "long"}},
        ],
    }
    rows: list[dict[str, Any]] = [
        {"s": "", "b": b"", "m": {}},
        {"s": None, "b": b"\x00\xff", "m": {"k\u00e9y": 1, "": -2}},
        {"s": "na\u00efve \u2603 " * 5, "b": b"x" * 40, "m": {"a": 3}},
    ]
    t = _bulk(_content(schema, rows), schema)
    assert t.column("s").to_pylist() == ["", None, "na\u00efve \u2603 " * 5]
    assert t.column("b").to_pylist() == [b"", b"\x00\xff", b"x" * 40]
    assert t.column("m").to_pylist() == [[], [("k\u00e9y", 1), ("", -2)], [("a", 3)]]
    assert t.column("s").type == pa.string() and t.column("b").type == pa.binary()


def _one_string_schema() -> dict[str, Any]:
    return {"type": "record", "name": "r", "fields": [{"name": "s", "type": "string"}, {"name": "n", "type": "int"}]}


def test_string_that_is_not_utf8_is_corrupt() -> None:
    schema = _one_string_schema()
    content = bytearray(_content(schema, [{"s": "ab", "n": 1}, {"s": "cd", "n": 2}]))
    at = content.index(b"cd")
    content[at] = 0xFF
    with pytest.raises(CorruptFileError, match="not valid UTF-8"):
        _bulk(bytes(content), schema)


def test_string_length_past_its_record_is_corrupt() -> None:
    schema = _one_string_schema()
    content = bytearray(_content(schema, [{"s": "ab", "n": 1}, {"s": "cd", "n": 2}]))
    content[12] = 2 * 9  # zigzag 9: longer than the record
    with pytest.raises(CorruptFileError, match="runs past its record"):
        _bulk(bytes(content), schema)


@pytest.mark.parametrize("length", [-5, 1_000_000])
def test_record_length_out_of_bounds_is_corrupt(length: int) -> None:
    schema = _one_string_schema()
    content = bytearray(_content(schema, [{"s": "ab", "n": 1}, {"s": "cd", "n": 2}, {"s": "ef", "n": 3}]))
    first = struct.unpack_from(">i", content, 8)[0]
    struct.pack_into(">i", content, 8 + 4 + first, length)
    with pytest.raises(CorruptFileError, match="record 1"):
        _bulk(bytes(content), schema)


def test_record_bounds_match_the_length_prefixes() -> None:
    schema = _one_string_schema()
    rows: list[dict[str, Any]] = [{"s": "x" * i, "n": i} for i in range(50)]
    content = _content(schema, rows)
    starts, ends = record_starts(content, len(rows))
    pos, expected = 8, []
    for _ in rows:
        (n,) = struct.unpack_from(">i", content, pos)
        expected.append((pos + 4, pos + 4 + n))
        pos += 4 + n
    assert list(zip(starts.tolist(), ends.tolist(), strict=True)) == expected
    assert pos == len(content)


# --- ordering keys ---------------------------------------------------------------------------------

_INT64_MIN = -(2**63)


@pytest.mark.parametrize(
    "column",
    [
        pa.array([5, None, -3, 5, 2**62, None, 0], pa.int64()),
        pa.array([1, 1, None, -7], pa.int8()),
        pa.array([3, 0, 2**32 - 1], pa.uint32()),
        pa.array([10, None, -4, 10], pa.date32()),
        pa.array([1_700_000_000_000, None, 1_600_000_000_000], pa.timestamp("ms")),
        pa.array([4, None, _INT64_MIN, 4], pa.int64()),  # the minimum itself: falls back to ranks
        pa.array([1.5, None, -0.5], pa.float64()),  # not integer-like: ranks
        pa.chunked_array([[3, None], [1, 3]], pa.int32()),
    ],
)
def test_order_keys_order_rows_as_ranks_do(column: pa.Array | pa.ChunkedArray) -> None:
    keys, ranks = order_keys([column]), dense_rank([column])
    assert np.array_equal(keys[:, None] < keys[None, :], ranks[:, None] < ranks[None, :])
    assert np.array_equal(keys[:, None] == keys[None, :], ranks[:, None] == ranks[None, :])


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.one_of(st.none(), st.integers(-(2**63) + 1, 2**63 - 1)), st.integers(0, 7)),
        min_size=1,
        max_size=60,
    )
)
def test_winners_with_order_keys_equal_winners_with_ranks(rows: list[tuple[int, int | None, int]]) -> None:
    keys = pa.array([f"k{k}" for k, _, _ in rows])
    ordering = pa.array([v for _, v, _ in rows], pa.int64())
    flags = np.array([f for _, _, f in rows], dtype=np.int8)
    groups = KeyGroups(keys)
    by_keys = winners(groups, flags, order_keys([ordering]), MergeMode.EVENT_TIME_ORDERING)
    by_ranks = winners(groups, flags, dense_rank([ordering]), MergeMode.EVENT_TIME_ORDERING)
    assert by_keys.tolist() == by_ranks.tolist()


def test_decimal_values_of_a_generated_block() -> None:
    """Decimal values through the bulk path equal the values written (bytes and fixed)."""
    rows = [
        {
            "s": "a",
            "s_req": "b",
            "b": None,
            "i": None,
            "l": 1,
            "f": None,
            "d": 0.5,
            "flag": None,
            "dec": decimal.Decimal("-12.34"),
            "dec_fx": decimal.Decimal("123456.789"),
            "day": None,
            "at": 7,
            "en": "Y",
            "nested": None,
            "strs": None,
            "props": None,
        }
    ]
    t = _bulk(_content(_EVERY_TYPE, rows), _EVERY_TYPE)
    assert t.column("dec").to_pylist() == [decimal.Decimal("-12.34")]
    assert t.column("dec_fx").to_pylist() == [decimal.Decimal("123456.789")]
    assert t.column("en").to_pylist() == ["Y"]
