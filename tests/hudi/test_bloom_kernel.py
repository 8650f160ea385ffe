"""The compiled Murmur bloom kernel: the same bits as the scalar reference (itself checked against Java's), every key
length (longer keys handed back to numpy), vector sizes up to Hudi's bound, its refusals, and how it is turned off."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tableservice.hudi.file_group import bloom_hash, bloom_kernel
from tableservice.hudi.file_group.bloom import MURMUR_HASH, key_positions, murmur_hash
from tests.support.fixtures import in_ci


@pytest.fixture(autouse=True)
def compiled() -> None:
    if not bloom_kernel.available():
        if in_ci():
            pytest.fail(f"the compiled bloom kernel must be built in CI: {bloom_kernel.status()}")
        pytest.skip(f"no compiled bloom kernel: {bloom_kernel.status()}")


def _reference(keys: list[bytes], nb_hash: int, vector: int, targets: list[int], rows: int) -> list[np.ndarray]:
    """Packed rows holding each key's scalar positions (`key_positions`, Hadoop's code ported line by line)."""
    bits = [np.zeros(vector, dtype=np.bool_) for _ in range(rows)]
    for key, row in zip(keys, targets, strict=True):
        bits[row][key_positions(key, nb_hash, vector)] = True
    return [np.packbits(b, bitorder="little") for b in bits]


def _set(keys: list[bytes], nb_hash: int, vector: int, targets: list[int] | None, rows: int) -> list[np.ndarray]:
    packed = [np.zeros((vector + 7) // 8, dtype=np.uint8) for _ in range(rows)]
    data, offsets = bloom_hash.key_bytes(pa.array(keys, pa.binary()))
    which = None if targets is None else np.array(targets, dtype=np.int64)
    bloom_hash.set_bits(data, offsets, nb_hash, vector, MURMUR_HASH, packed, which)
    return packed


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=150),
    st.integers(1, 40),
    st.sampled_from([1, 2, 7, 8, 9, 1000, 65_537, 2_587_966, 2_875_518]),
    st.integers(1, 3),
    st.randoms(use_true_random=False),
)
def test_bits_equal_the_scalar_reference(
    keys: list[bytes], nb_hash: int, vector: int, rows: int, rnd: random.Random
) -> None:
    """Any bytes (tail bytes >= 0x80 included: Java's signed bytes), any length (over 256 bytes: the numpy path
    sets those), keys of several lengths at once, keys dealt over rows in any order."""
    targets = [rnd.randrange(rows) for _ in keys]
    assert [a.tolist() for a in _set(keys, nb_hash, vector, targets, rows)] == [
        a.tolist() for a in _reference(keys, nb_hash, vector, targets, rows)
    ]


@pytest.mark.parametrize("vector", [(1 << 30) - 1, 1 << 30, (1 << 29) + 12345])
def test_remainders_are_exact_up_to_hudis_bound(vector: int) -> None:
    """The remainder comes from a double-precision quotient corrected once: exact for vectors up to 2^30 bits (the
    bound a filter is held to), where hash magnitudes reach 2^31 (2 vectors' worth)."""
    keys = [f"key-{i}".encode() for i in range(3000)] + [bytes([0x80 + i % 128]) * (i % 9 + 1) for i in range(300)]
    got = _set(keys, 30, vector, None, 1)[0]
    touched = np.flatnonzero(got)  # the set bits, read off the few non-zero bytes of a 128 MiB vector
    bits = np.unpackbits(got[touched][:, None], axis=1, bitorder="little").astype(bool)
    positions = (touched[:, None] * 8 + np.arange(8))[bits]
    want = sorted({p for key in keys for p in key_positions(key, 30, vector)})
    assert positions.tolist() == want


@pytest.mark.parametrize(("key", "vector"), [(b"key-2", 7_705_793), (b"key-2", 841), (b"key-4", 889_236_244)])
def test_a_multiple_of_the_vector_size_lands_on_bit_zero(key: bytes, vector: int) -> None:
    """The key's first hash magnitude is a multiple of the vector size, and its double-precision quotient falls just
    short of the integer: the kernel's correction must give remainder 0, not `vector`."""
    magnitude = abs(murmur_hash(key, 0))
    assert magnitude % vector == 0 and int(magnitude * (1.0 / vector)) == magnitude // vector - 1  # the premise
    got = _set([key], 3, vector, None, 1)[0]
    assert got[0] & 1 == 1
    assert got.tolist() == _reference([key], 3, vector, [0], 1)[0].tolist()


def _starts(n: int, length: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64) * length


def test_long_keys_are_handed_back_and_nothing_is_set() -> None:
    vector = 1009
    row = np.zeros((vector + 7) // 8, dtype=np.uint8)
    data = np.frombuffer(b"x" * 260 * 3, dtype=np.uint8)
    assert bloom_kernel.murmur_set(data, _starts(3, 260), 260, 5, vector, [row], None) is False
    assert not row.any()
    # 64 blocks and a tail: taken
    assert bloom_kernel.murmur_set(data, _starts(3, 259), 259, 5, vector, [row], None) is True
    assert np.array_equal(row, _reference([b"x" * 259] * 3, 5, vector, [0, 0, 0], 1)[0])


def test_refusals_write_nothing() -> None:
    vector = 1009
    rows = [np.zeros((vector + 7) // 8, dtype=np.uint8) for _ in range(2)]
    data = np.frombuffer(b"abcdefgh" * 4, dtype=np.uint8)
    starts = _starts(4, 8)
    with pytest.raises(ValueError, match=r"code -3.*2 rows"):
        bloom_kernel.murmur_set(data, starts, 8, 5, vector, rows, np.array([0, 1, 2, 0], dtype=np.int64))
    with pytest.raises(ValueError, match=r"code -3"):
        bloom_kernel.murmur_set(data, starts, 8, 5, vector, rows, np.array([0, -1, 1, 0], dtype=np.int64))
    with pytest.raises(ValueError, match=r"code -1.*4 keys of 8 bytes in 32 bytes"):
        bloom_kernel.murmur_set(data, starts + 1, 8, 5, vector, rows, None)  # the last key would read past the data
    with pytest.raises(ValueError, match=r"code -1"):
        bloom_kernel.murmur_set(data, starts - 1, 8, 5, vector, rows, None)
    assert not any(r.any() for r in rows)
    with pytest.raises(ValueError, match=r"code -1.*1073741825 bits"):
        bloom_kernel.murmur_set(data, starts, 8, 5, (1 << 30) + 1, [np.zeros((1 << 27) + 1, dtype=np.uint8)], None)
    with pytest.raises(ValueError, match="must be 127 writable contiguous bytes"):
        bloom_kernel.murmur_set(data, starts, 8, 5, vector, [np.zeros(126, dtype=np.uint8)], None)
    with pytest.raises(ValueError, match="4 keys need 4 row indexes"):
        bloom_kernel.murmur_set(data, starts, 8, 5, vector, rows, np.array([0, 1], dtype=np.int64))


def test_turned_off_by_the_environment_with_the_same_bits() -> None:
    """`TABLESERVICE_BLOOM_KERNEL=numpy` turns the kernel off (say, to rule it out on a machine): numpy sets the
    bits, the same ones, and `status()` says why."""
    script = (
        "import pyarrow as pa\n"
        "from tableservice.hudi.file_group import bloom_kernel\n"
        "from tableservice.hudi.file_group.bloom import create_bloom_filter\n"
        "f = create_bloom_filter(100, 0.01, 150)\n"
        "f.add_many(pa.array([f'key-{i}' for i in range(400)]))\n"
        "print(bloom_kernel.available()); print(bloom_kernel.status()); print(f.serialize())\n"
    )
    env = {**os.environ, bloom_kernel.ENV_VAR: "numpy"}
    off = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    env.pop(bloom_kernel.ENV_VAR)
    on = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    off_available, off_status, off_filter = off.stdout.splitlines()
    on_available, on_status, on_filter = on.stdout.splitlines()
    assert (off_available, on_available) == ("False", "True")
    assert off_status == f"numpy (the compiled kernel is turned off by {bloom_kernel.ENV_VAR}=numpy)"
    assert on_status.startswith("compiled (_bloom_murmur")
    assert "bloom filters are built in numpy (the compiled kernel is turned off" in off.stderr
    assert off_filter == on_filter


def test_a_library_of_another_calling_convention_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library left by an older build (the editable install compiles it once) answers another convention number:
    it is not called, and the numpy path takes over."""
    monkeypatch.setattr(bloom_kernel, "_ABI", 2)
    lib, status = bloom_kernel._load()
    assert lib is None
    assert status.startswith("numpy (the compiled kernel ") and status.endswith(
        "of calling convention 1, not 2: a stale build)"
    )
