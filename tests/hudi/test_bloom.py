"""Hudi bloom filters: hashing, sizing, dynamic rows, serialization, and byte equality with real footers."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tableservice.errors import CorruptFileError
from tableservice.hudi.file_group import bloom_hash, bloom_kernel
from tableservice.hudi.file_group.bloom import (
    BLOOM_FILTER_FOOTER_KEY,
    BLOOM_FILTER_TYPE_CODE_FOOTER_KEY,
    JENKINS_HASH,
    MURMUR_HASH,
    BloomFilterTypeCode,
    DynamicBloomFilter,
    SimpleBloomFilter,
    bit_size,
    bloom_filter_from_string,
    build_bloom_filter,
    create_bloom_filter,
    jenkins_hash,
    key_positions,
    num_hashes,
    positions_many,
)
from tests.support.fixtures import fixture_names, fixture_table_readonly, in_ci

VECTOR = 2587966  # Hudi's default filter: 60000 entries at fpp 1e-9


@pytest.fixture(params=["compiled", "numpy"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test that takes it runs twice: with the compiled Murmur kernel, and with the numpy path alone (as on a
    machine whose build had no C compiler). The compiled one must be there in CI; elsewhere its absence skips."""
    if request.param == "numpy":
        monkeypatch.setattr(bloom_kernel, "_LIB", None)
    elif not bloom_kernel.available():
        if in_ci():
            pytest.fail(f"the compiled bloom kernel must be built in CI: {bloom_kernel.status()}")
        pytest.skip(f"no compiled bloom kernel: {bloom_kernel.status()}")
    return str(request.param)


# First five and last of the 30 positions, computed by a Java program running Hudi's MurmurHash and
# HashFunction code verbatim (UTF-8 keys; exercises the sign-extended tail bytes).
JAVA_POSITIONS = {
    "é": ([1021365, 1225260, 586514, 1189253, 2525069], 2057616),
    "ab\u00ff": ([2095350, 1025362, 1538881, 1447251, 1374562], 1386872),
    "日本語": ([2075486, 1679163, 1039219, 991876, 529662], 2410899),
    "x\u00e9\u00e9": ([1083442, 1306585, 1964455, 219614, 1803431], 1616216),
    "key-\U0001f600": ([1965646, 1200462, 17790, 1189813, 997221], 1440866),
    "\u00ff\u00fe\u00fd\u00fc\u00fb": ([1356247, 2576908, 1644196, 2011583, 1003790], 235298),
    "plain-ascii-key": ([2432482, 1688414, 1029985, 2286507, 793282], 756024),
}


def test_sizing_matches_hudi_defaults() -> None:
    assert bit_size(60000, 0.000000001) == VECTOR
    assert num_hashes(VECTOR, 60000) == 30
    bf = create_bloom_filter()
    assert isinstance(bf, DynamicBloomFilter)
    assert (bf.vector_size, bf.nb_hash, bf.nr, bf.max_entries) == (VECTOR, 30, 60000, 100000)
    raw = base64.b64decode(bf.serialize())
    assert struct.unpack(">iibiiii", raw[:25]) == (-1, 30, MURMUR_HASH, VECTOR, 60000, 0, 1)
    assert len(raw) == 25 + 13 + (VECTOR + 7) // 8


@pytest.mark.parametrize("key", sorted(JAVA_POSITIONS))
def test_positions_match_java(key: str) -> None:
    head, last = JAVA_POSITIONS[key]
    scalar = key_positions(key.encode("utf-8"), 30, VECTOR)
    vector = positions_many(pa.array([key, "padding-key", key]), 30, VECTOR)
    assert scalar[:5] == head and scalar[-1] == last
    assert vector[0].tolist() == scalar and vector[2].tolist() == scalar


def test_jenkins_matches_lookup3_vectors() -> None:
    assert jenkins_hash(b"", 0) & 0xFFFFFFFF == 0xDEADBEEF
    assert jenkins_hash(b"Four score and seven years ago", 0) & 0xFFFFFFFF == 0x17770551
    assert jenkins_hash(b"Four score and seven years ago", 1) & 0xFFFFFFFF == 0xCD628161


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=60))
def test_vectorised_positions_equal_scalar(keys: list[bytes]) -> None:
    got = positions_many(pa.array(keys, pa.binary()), 7, 1000003)
    for key, row in zip(keys, got, strict=True):
        assert row.tolist() == key_positions(key, 7, 1000003)


def test_rejects_empty_and_null_keys() -> None:
    bf = create_bloom_filter()
    with pytest.raises(ValueError, match="empty"):
        bf.add("")
    with pytest.raises(ValueError, match="empty"):
        bf.add_many(["a", ""])
    with pytest.raises(ValueError, match="null"):
        bf.add_many(pa.array(["a", None]))


def _java_rows(n: int, nr: int, max_nr: int) -> tuple[list[int], int]:
    """Row of each added key, following InternalDynamicBloomFilter.getActiveStandardBF line by line."""
    rows, current, length, reached, cur = [], 0, 1, False, 0
    for _ in range(n):
        if reached:
            row = cur % length
            cur += 1
        elif current >= nr and length * nr < max_nr:
            length += 1
            current = 0
            row = length - 1
        elif current >= nr:
            reached = True
            row = 0
        else:
            row = length - 1
        rows.append(row)
        current += 1
    return rows, current


@pytest.mark.parametrize(("nr", "max_nr", "n"), [(10, 25, 57), (10, 10, 23), (7, 100, 40), (5, 11, 5)])
def test_dynamic_rows_fill_like_java(nr: int, max_nr: int, n: int, kernel: str) -> None:
    keys = [f"key-{i}" for i in range(n)]
    batched = DynamicBloomFilter(nr, 0.01, max_nr)
    for start in range(0, n, 6):
        batched.add_many(keys[start : start + 6])
    single = DynamicBloomFilter(nr, 0.01, max_nr)
    for k in keys:
        single.add(k)
    assert batched.serialize() == single.serialize()
    expected, current = _java_rows(n, nr, max_nr)
    assert len(batched.rows) == max(expected) + 1
    # every key's bits are in the row Java would have put it in
    for key, row in zip(keys, expected, strict=True):
        pos = key_positions(key.encode(), batched.nb_hash, batched.vector_size)
        assert batched.rows[row].bit(np.array(pos, np.uint32)).all()
    assert batched.current_nb_record == current
    assert batched.might_contain_many(keys).all()


@pytest.mark.parametrize("fixed_length", [True, False])
def test_chunked_add_many_equals_adding_one_by_one(
    fixed_length: bool, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    """Keys hashed in several chunks (one key length: slices of the input; mixed lengths: grouped by length),
    with rows of a dynamic filter switching inside chunks and then taking keys in turn."""
    monkeypatch.setattr(bloom_hash, "_CHUNK", 16)
    monkeypatch.setattr(bloom_hash, "_SCATTER_CHUNK", 16)
    keys = [f"k{i:05d}" if fixed_length else "k" + "x" * (i % 7) + str(i) for i in range(230)]
    for make in (lambda: DynamicBloomFilter(37, 0.01, 120), lambda: SimpleBloomFilter(100, 0.01)):
        together, single = make(), make()
        together.add_many(pa.array(keys))
        for k in keys:
            single.add(k)
        assert together.serialize() == single.serialize()
    assert len(DynamicBloomFilter(37, 0.01, 120).rows) == 1
    expected, _ = _java_rows(len(keys), 37, 120)
    assert max(expected) == 3 and expected[-1] != expected[-2]  # rows switch and are then taken in turn


@pytest.mark.parametrize("hash_type", [MURMUR_HASH, JENKINS_HASH])
@pytest.mark.parametrize("fixed_length", [True, False])
def test_set_bits_sets_each_keys_positions_in_its_row(
    hash_type: int, fixed_length: bool, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    """`set_bits` (bits set pass by pass, keys of a chunk reordered by row) sets exactly the positions
    `positions_many` gives, each key's in the row it is assigned to, rows interleaved inside chunks; the rows are
    packed as Hudi serializes them (bit p is bit p % 8 of byte p // 8)."""
    monkeypatch.setattr(bloom_hash, "_SCATTER_CHUNK", 32)
    monkeypatch.setattr(bloom_hash, "_CHUNK", 32)
    keys = pa.array([f"k{i:05d}" if fixed_length else "k" + "\u00e9" * (i % 5) + str(i) for i in range(300)])
    targets = np.random.default_rng(7).integers(0, 3, size=len(keys)).astype(np.int64)
    targets[:40] = 1  # one chunk inside a single row
    vector, nb_hash = 1009, 5
    rows = [np.zeros((vector + 7) // 8, dtype=np.uint8) for _ in range(3)]
    bloom_hash.set_bits(*bloom_hash.key_bytes(keys), nb_hash, vector, hash_type, rows, targets)
    expected = [np.zeros(vector, dtype=np.bool_) for _ in range(3)]
    for row, positions in zip(targets, positions_many(keys, nb_hash, vector, hash_type), strict=True):
        expected[int(row)][positions] = True
    for got, want in zip(rows, expected, strict=True):
        assert np.array_equal(got, np.packbits(want, bitorder="little"))
    single = np.zeros((vector + 7) // 8, dtype=np.uint8)
    bloom_hash.set_bits(*bloom_hash.key_bytes(keys), nb_hash, vector, hash_type, [single])
    assert np.array_equal(single, np.packbits(expected[0] | expected[1] | expected[2], bitorder="little"))


def test_dynamic_round_trip_and_growth(kernel: str) -> None:
    keys = pa.array([f"rk-{i:07d}" for i in range(130_001)])
    bf = build_bloom_filter([keys.slice(0, 70_000), keys.slice(70_000)])
    assert isinstance(bf, DynamicBloomFilter)
    assert len(bf.rows) == 2
    assert bf.current_nb_record == 130_001 - 60_000  # 60000 in row 1, then the bound is reached
    text = bf.serialize()
    back = bloom_filter_from_string(text, "dynamic_v0")
    assert isinstance(back, DynamicBloomFilter)
    assert back.serialize() == text
    assert back.might_contain_many(keys).all()
    assert back.might_contain("rk-0000042")
    misses = back.might_contain_many([f"absent-{i}" for i in range(20_000)])
    assert misses.sum() <= 2


def test_simple_round_trip() -> None:
    bf = create_bloom_filter(1000, 0.001, type_code=BloomFilterTypeCode.SIMPLE)
    assert isinstance(bf, SimpleBloomFilter)
    bf.add_many([f"k{i}" for i in range(500)])
    bf.add("extra")
    text = bf.serialize()
    back = bloom_filter_from_string(text)  # no type code: SIMPLE, as Hudi reads old footers
    assert isinstance(back, SimpleBloomFilter)
    assert back.serialize() == text
    assert back.might_contain("extra") and back.might_contain("k499")
    assert not back.might_contain_many([f"none{i}" for i in range(200)]).all()


def test_old_unversioned_format_uses_jenkins() -> None:
    vector, nb = 1024, 3
    bits = np.zeros(vector, dtype=np.bool_)
    for p in key_positions(b"old-key", nb, vector, JENKINS_HASH):
        bits[p] = True
    raw = struct.pack(">ii", nb, vector) + np.packbits(bits, bitorder="little").tobytes()
    bf = bloom_filter_from_string(base64.b64encode(raw).decode())
    assert bf.might_contain("old-key")
    assert bf.might_contain_many(["old-key"]).tolist() == [True]


def test_corrupt_serialization_is_reported() -> None:
    with pytest.raises(CorruptFileError, match="bloom filter"):
        bloom_filter_from_string("not base64 at all!", "DYNAMIC_V0", path="/x.parquet")
    with pytest.raises(CorruptFileError):
        bloom_filter_from_string(base64.b64encode(struct.pack(">iibi", -1, 3, 1, 800)).decode(), "SIMPLE")
    with pytest.raises(ValueError, match="not recognizable"):
        create_bloom_filter(type_code="BLOCKED")


def _base_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.parquet") if ".hoodie" not in p.parts)


@pytest.mark.parametrize("name", fixture_names())
def test_fixture_footers_byte_equal(name: str, kernel: str) -> None:
    files = _base_files(fixture_table_readonly(name))
    for path in files:
        pf = pq.ParquetFile(path)
        kv = pf.metadata.metadata
        text = kv[BLOOM_FILTER_FOOTER_KEY.encode()].decode()
        code = kv[BLOOM_FILTER_TYPE_CODE_FOOTER_KEY.encode()].decode()
        assert code == "DYNAMIC_V0"
        keys = pf.read(columns=["_hoodie_record_key"]).column(0)
        bf = bloom_filter_from_string(text, code)
        assert bf.might_contain_many(keys).all()
        assert all(bf.might_contain(k) for k in keys.to_pylist())
        assert bf.serialize() == text
        fresh = create_bloom_filter()
        fresh.add_many(keys)  # same keys, file order
        assert fresh.serialize() == text, path


@pytest.mark.parametrize("type_code", [BloomFilterTypeCode.SIMPLE, BloomFilterTypeCode.DYNAMIC_V0])
def test_bits_past_the_vector_in_a_footer_are_not_the_filters(type_code: BloomFilterTypeCode) -> None:
    """A vector of 4,314 bits ends 2 bits into its last byte. Java reads only the vector's bits, so the 6 bits
    after them in a footer (none when Hudi writes one) are not part of the filter: decoded, they are dropped, and
    the filter serializes back as it was written and answers the same."""
    bloom = create_bloom_filter(100, 1e-9, 200, type_code)
    assert bloom.vector_size % 8 == 2
    keys = [f"key-{i:05d}" for i in range(100)]
    bloom.add_many(keys)
    clean = bloom.serialize_bytes()
    assert clean[-1] >> 2 == 0  # the last row's pad bits, as written
    stray = clean[:-1] + bytes([clean[-1] | 0b1111_1100])
    read = bloom_filter_from_string(base64.b64encode(stray).decode("ascii"), type_code)
    assert read.serialize_bytes() == clean
    probes = keys + [f"other-{i:05d}" for i in range(2000)]
    assert read.might_contain_many(probes).tolist() == bloom.might_contain_many(probes).tolist()
