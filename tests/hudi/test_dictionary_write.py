"""Which columns a base file writes dictionary-encoded: parquet-mr's first-page test, its distinct-count
estimate against exact counts, and the files the writer makes with it."""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tableservice.hudi.file_group.base_file import BaseFileWriter, write_base_file
from tableservice.hudi.file_group.dictionary_write import (
    SAMPLE_VALUES,
    dictionary_pays,
    dictionary_setting,
    distinct_estimate,
    leaf_paths,
    plain_columns,
    plain_width,
)
from tableservice.hudi.table.schema import avro_schema_from_arrow
from tableservice.storage import Storage

PAGE = 1 << 20
RNG = np.random.default_rng(7)


def _strings(draws: np.ndarray) -> pa.Array:
    return pa.array([f"key-{int(v):012d}" for v in draws], pa.string())


def _column(kind: str, draws: np.ndarray) -> pa.Array:
    if kind == "int32":
        return pa.array(draws.astype(np.int32))
    if kind == "int64":
        return pa.array(draws.astype(np.int64) * 1_000_003)
    if kind == "double":
        return pa.array(draws.astype(np.float64) / 7.0)
    if kind == "decimal(10,2)":  # 16-byte Arrow words, 5-byte Parquet values
        return pa.array([Decimal(int(v)) / 100 for v in draws], pa.decimal128(10, 2))
    if kind == "fixed(5)":  # a width hashed as byte strings
        return pa.array([int(v).to_bytes(5, "little") for v in draws], pa.binary(5))
    if kind == "string":
        return _strings(draws)
    raise AssertionError(kind)


KINDS = ["int32", "int64", "double", "decimal(10,2)", "fixed(5)", "string"]


@pytest.mark.parametrize(
    "type_",
    [
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.uint8(),
        pa.uint32(),
        pa.uint64(),
        pa.float32(),
        pa.float64(),
        pa.date32(),
        pa.timestamp("us"),
        pa.time64("us"),
        pa.decimal128(4, 1),
        pa.decimal128(10, 2),
        pa.decimal128(18, 3),
        pa.decimal128(38, 0),
        pa.binary(7),
        pa.string(),
        pa.binary(),
    ],
)
def test_plain_width_is_the_physical_width_arrows_writer_uses(type_: pa.DataType, tmp_path: Path) -> None:
    """The width each judged type is costed at equals the Parquet physical type pyarrow writes for it (format 1.0):
    INT32/FLOAT 4, INT64/DOUBLE 8, FIXED_LEN_BYTE_ARRAY its length, BYTE_ARRAY variable (0)."""
    path = tmp_path / "one.parquet"
    pq.write_table(pa.table({"c": pa.nulls(3, type_)}), path, version="1.0")
    column = pq.read_metadata(path).schema.column(0)
    physical = {"INT32": 4, "INT64": 8, "FLOAT": 4, "DOUBLE": 8, "BYTE_ARRAY": 0}
    expected = column.length if column.physical_type == "FIXED_LEN_BYTE_ARRAY" else physical[column.physical_type]
    assert plain_width(type_) == expected


@pytest.mark.parametrize("type_", [pa.bool_(), pa.list_(pa.int32()), pa.struct([("a", pa.int32())]), pa.null()])
def test_types_not_judged(type_: pa.DataType) -> None:
    assert plain_width(type_) is None
    assert dictionary_pays(pa.nulls(10, type_) if type_ != pa.bool_() else pa.array([True, False] * 5), PAGE)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("distinct", [1, 37, 5000, 40000, 1 << 20])
def test_distinct_estimate_is_within_three_percent(kind: str, distinct: int) -> None:
    draws = RNG.integers(0, distinct, 50_000)
    values = _column(kind, draws)
    exact = len(pc.unique(values))
    estimate = distinct_estimate(values)
    assert estimate <= len(values)
    assert abs(estimate - exact) <= max(2.0, 0.03 * exact), (kind, distinct, exact, estimate)


def test_distinct_estimate_counts_the_empty_string_once() -> None:
    values = pa.array(["", "a", "", "b", "a", ""])
    assert round(distinct_estimate(values)) == 3
    assert round(distinct_estimate(pa.array(["", ""]))) == 1
    assert distinct_estimate(pa.array([], pa.string())) == 0


def _exact_test(column: pa.Array) -> tuple[bool, float]:
    """parquet-mr's test with the exact distinct count of the judged page: (pays, margin relative to plain)."""
    width = plain_width(column.type)
    assert width is not None
    values = column.drop_null()
    if width:
        values = values.slice(0, min(SAMPLE_VALUES, -(-PAGE // width)))
        raw = len(values) * width
    else:
        lengths = np.asarray(pc.binary_length(values.slice(0, SAMPLE_VALUES)))
        plain = np.cumsum(lengths + 4)
        count = min(len(plain), int(np.searchsorted(plain, PAGE, side="left")) + 1)
        values = values.slice(0, count)
        raw = int(plain[count - 1])
    uniques = pc.unique(values)
    d = len(uniques)
    bits = max(1, math.ceil(math.log2(d))) if d > 1 else 1
    dictionary = d * width if width else int(pc.sum(pc.binary_length(uniques)).as_py() or 0) + 4 * d
    encoded = len(values) * bits / 8
    return dictionary + encoded < raw, (raw - dictionary - encoded) / raw


@pytest.mark.parametrize("kind", KINDS)
def test_decision_matches_the_exact_test_away_from_the_boundary(kind: str) -> None:
    """Within 5% of the boundary either encoding costs about the same and the estimate may choose either; away
    from it the estimate decides as the exact count does."""
    rows = 200_000
    checked = []
    for fraction in (0.001, 0.05, 0.3, 0.6, 0.95, 1.0):
        draws = RNG.integers(0, max(1, int(rows * fraction)), rows) if fraction < 1 else RNG.permutation(rows)
        column = _column(kind, draws)
        pays, margin = _exact_test(column)
        if abs(margin) >= 0.05:
            assert dictionary_pays(column, PAGE) == pays, (kind, fraction, margin)
            checked.append(pays)
    assert len(checked) >= 4 and True in checked and False in checked, checked


def test_mostly_distinct_columns_fail_and_repetitive_ones_pass() -> None:
    rows = 100_000
    table = pa.table(
        {
            "key": _strings(RNG.permutation(rows)),
            "ts": pa.array(RNG.permutation(rows).astype(np.int64) * 1000),
            "city": pa.array(RNG.choice(["sf", "nyc", "la"], rows)),
            "fare": pa.array(RNG.integers(0, 5000, rows) / 100.0),
            "paid": pa.array(RNG.integers(0, 2, rows).astype(bool)),
        }
    )
    assert plain_columns(table, PAGE) == ("key", "ts")
    assert plain_columns(table, PAGE, skip=("key",)) == ("ts",)


def test_only_the_first_page_is_judged() -> None:
    """As parquet-mr: a column repetitive on its first page keeps its dictionary however distinct later values are,
    and one distinct on its first page falls back however repetitive later values are."""
    rows = SAMPLE_VALUES * 4
    first_repetitive = np.concatenate([np.zeros(SAMPLE_VALUES), np.arange(rows - SAMPLE_VALUES)]).astype(np.int64)
    first_distinct = np.concatenate([np.arange(SAMPLE_VALUES), np.zeros(rows - SAMPLE_VALUES)]).astype(np.int64)
    assert dictionary_pays(pa.array(first_repetitive), PAGE)
    assert not dictionary_pays(pa.array(first_distinct), PAGE)


def test_nulls_do_not_count_and_chunks_are_read_across() -> None:
    distinct = pa.array(np.arange(300_000, dtype=np.int64))
    sparse = pa.array([None if i % 3 else v for i, v in enumerate(distinct.to_pylist())], pa.int64())
    assert not dictionary_pays(sparse, PAGE)
    chunked = pa.chunked_array([distinct.slice(i, 1000) for i in range(0, 100_000, 1000)])
    assert not dictionary_pays(chunked, PAGE)
    assert dictionary_pays(pa.nulls(1000, pa.int64()), PAGE)
    assert dictionary_pays(pa.array([5], pa.int64()), PAGE)


def test_dictionary_setting_names_the_leaves_of_the_other_columns() -> None:
    schema = pa.schema(
        [
            ("a", pa.string()),
            ("s", pa.struct([("x", pa.int64()), ("y", pa.list_(pa.string()))])),
            ("l", pa.list_(pa.int32())),
            ("m", pa.map_(pa.string(), pa.int64())),
            ("b", pa.int64()),
        ]
    )
    paths = leaf_paths(schema)
    assert paths == ("a", "s.x", "s.y.list.element", "l.list.element", "m.key_value.key", "m.key_value.value", "b")
    assert dictionary_setting(schema, paths, ()) is True
    assert dictionary_setting(schema, paths, ("a", "b")) == [
        "s.x",
        "s.y.list.element",
        "l.list.element",
        "m.key_value.key",
        "m.key_value.value",
    ]
    flat = pa.schema([("a", pa.string()), ("b", pa.int64())])
    assert leaf_paths(flat) == ("a", "b")
    assert dictionary_setting(flat, leaf_paths(flat), ("b",)) == ["a"]


def _chunks(path: Path) -> dict[str, tuple[bool, set[str]]]:
    metadata = pq.read_metadata(path)
    out = {}
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for i in range(group.num_columns):
            chunk = group.column(i)
            out[chunk.path_in_schema] = (chunk.has_dictionary_page, set(chunk.encodings))
    return out


def _chunk_bytes(path: Path, name: str) -> int:
    metadata = pq.read_metadata(path)
    index = [metadata.schema.column(i).path for i in range(metadata.num_columns)].index(name)
    return sum(metadata.row_group(g).column(index).total_compressed_size for g in range(metadata.num_row_groups))


def _trips(rows: int) -> pa.Table:
    return pa.table(
        {
            "_hoodie_record_key": _strings(RNG.permutation(rows)),
            "ts": pa.array(RNG.permutation(rows).astype(np.int64)),
            "city": pa.array(RNG.choice(["sf", "nyc", "la"], rows)),
            "fare": pa.array(RNG.integers(0, 300, rows).astype(np.float64)),
            "tags": pa.array([[f"t{i}", f"u{i}"] for i in RNG.permutation(rows)], pa.list_(pa.string())),
            "rider": pa.array([{"id": int(i), "tier": "gold"} for i in RNG.permutation(rows)]),
        }
    )


def test_writer_leaves_mostly_distinct_columns_plain(tmp_path: Path) -> None:
    table = _trips(60_000)
    schema = avro_schema_from_arrow(table.schema, "trip", "hoodie.trip")
    path = tmp_path / "f.parquet"
    write_base_file(Storage(), str(path), table, avro_schema=schema, compression="snappy")
    chunks = _chunks(path)
    for name in ("_hoodie_record_key", "ts"):
        has_dictionary, encodings = chunks[name]
        assert not has_dictionary and "PLAIN_DICTIONARY" not in encodings and "RLE_DICTIONARY" not in encodings
    # Judged and kept, or nested (never judged): dictionary-encoded. The file names a list's leaf as Hudi's
    # parquet-avro does (`tags.array`); pyarrow's own name for it, which `use_dictionary` takes, differs.
    for name in ("city", "fare", "tags.array", "rider.id", "rider.tier"):
        assert chunks[name][0], name
    back = pq.read_table(path)
    for name in table.column_names:
        assert back.column(name).to_pylist() == table.column(name).to_pylist(), name
    # Plain, those columns take fewer bytes than Arrow's dictionary-then-fallback makes of them.
    all_dictionary = tmp_path / "all.parquet"
    pq.write_table(table, all_dictionary, compression="snappy", version="1.0", use_dictionary=True)
    for name in ("_hoodie_record_key", "ts"):
        assert _chunk_bytes(path, name) < _chunk_bytes(all_dictionary, name), name


def test_writer_without_dictionary_and_empty_files(tmp_path: Path) -> None:
    table = _trips(2000)
    schema = avro_schema_from_arrow(table.schema, "trip", "hoodie.trip")
    path = tmp_path / "plain.parquet"
    write_base_file(Storage(), str(path), table, avro_schema=schema, compression="snappy", dictionary=False)
    assert not any(has for has, _ in _chunks(path).values())
    empty = tmp_path / "empty.parquet"
    result = write_base_file(Storage(), str(empty), table.slice(0, 0), avro_schema=schema, bloom=None)
    assert result.num_rows == 0 and pq.read_table(empty).num_rows == 0


def test_an_unknown_codec_is_refused_when_the_writer_is_made(tmp_path: Path) -> None:
    schema = avro_schema_from_arrow(_trips(1).schema, "trip", "hoodie.trip")
    with pytest.raises(ValueError, match="lzo"):
        BaseFileWriter(Storage(), str(tmp_path / "x.parquet"), avro_schema=schema, compression="lzo")


def test_a_failing_test_leaves_every_column_its_dictionary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The test only saves work: when it cannot judge a file's columns, the file is written as Arrow writes it."""
    import tableservice.hudi.file_group.base_file as base_file

    def broken(*_: object, **__: object) -> tuple[str, ...]:
        raise pa.ArrowInvalid("cannot judge")

    monkeypatch.setattr(base_file, "plain_columns", broken)
    table = _trips(3000)
    path = tmp_path / "f.parquet"
    schema = avro_schema_from_arrow(table.schema, "trip", "hoodie.trip")
    write_base_file(Storage(), str(path), table, avro_schema=schema)
    assert all(has for has, _ in _chunks(path).values())
    assert pq.read_table(path).column("ts").to_pylist() == table.column("ts").to_pylist()
    assert any("dictionary test failed" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)
