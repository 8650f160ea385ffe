"""Hudi's bloom filter hash functions (Hadoop's MurmurHash 2 and Jenkins lookup3 ports), scalar and vectorised.

A key is its UTF-8 bytes; the empty key is rejected (as Java's `HashFunction` does). Its bit positions are
`h_0 = hash(key, 0)`, `h_i = hash(key, h_{i-1})`, position `|h_i % vectorSize|` with Java's signed `%`.
Murmur's tail bytes are *sign-extended* Java bytes (this differs from the C reference for bytes >= 0x80).

`position_chunks_of` and `set_bits` hash many keys with numpy: keys of one byte length are hashed together
(keys of one length only, the common case of fixed-format keys, straight from the Arrow buffer; otherwise grouped
by length), the seed-independent block mixing is done once per key, and each group is processed in cache-sized
chunks, so that a filter sets the bits of a chunk while its positions are still in cache. Where the compiled
kernel (`bloom_kernel`) is in use, `set_bits` hands it each chunk of Murmur keys instead: the same bits, set about
four times faster.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tableservice.hudi.file_group import bloom_kernel

JENKINS_HASH = 0
MURMUR_HASH = 1

_M = np.uint32(0x5BD1E995)
_CHUNK = 1 << 14
_SCATTER_CHUNK = 1 << 15  # keys per chunk when bits are set pass by pass (`set_bits`): measured best of 16k-128k
SLICE = 1 << 18

KeyInput: TypeAlias = pa.Array | pa.ChunkedArray | Sequence[str] | Sequence[bytes]
I64 = npt.NDArray[np.int64]
Pos = npt.NDArray[np.uint32]
Index = npt.NDArray[np.intp]
Packed = npt.NDArray[np.uint8]


def _to_array(keys: KeyInput) -> pa.Array:
    if isinstance(keys, pa.ChunkedArray):
        arr: pa.Array = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    elif isinstance(keys, pa.Array):
        arr = keys
    else:
        seq = list(keys)
        typ = pa.large_binary() if seq and isinstance(seq[0], bytes | bytearray) else pa.large_string()
        arr = pa.array(seq, type=typ)
    return arr


def key_slices(keys: KeyInput) -> Iterator[pa.Array]:
    """The keys as arrow arrays of at most `SLICE` keys (bounds the memory of the position matrix)."""
    arr = _to_array(keys)
    for start in range(0, len(arr), SLICE):
        yield arr.slice(start, SLICE)


def key_bytes(keys: KeyInput) -> tuple[npt.NDArray[np.uint8], I64]:
    """UTF-8 bytes and int64 offsets of the keys; rejects null and empty keys."""
    arr = _to_array(keys)
    if arr.null_count:
        raise ValueError("a record key is null; bloom filters take non-null keys only")
    if not (pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)):
        arr = arr.cast(pa.large_string() if pa.types.is_string(arr.type) else pa.large_binary())
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    if len(arr) and int(np.min(np.diff(offsets))) == 0:
        raise ValueError("a record key is empty; bloom filters reject empty keys (key length must be > 0)")
    return data, offsets.astype(np.int64, copy=False)


def _murmur_passes(
    rows: npt.NDArray[np.uint8], length: int, nb_hash: int, vector_size: int, out: Pos | Index | None = None
) -> Iterator[Pos | Index]:
    """The positions of keys that all have `length` bytes (an (n, length) matrix), one hash pass at a time: pass i
    is `out[i]` when `out` (shape (nb_hash, n)) is given, else one reused buffer of numpy's index type, valid until
    the next pass."""
    n = rows.shape[0]
    len4 = length >> 2
    words = np.ascontiguousarray(rows[:, : len4 * 4]).view("<u4")
    with np.errstate(over="ignore"):
        # The block words do not depend on the seed: mix them once, one contiguous row per block.
        k = np.ascontiguousarray(words.T).astype(np.uint32)
        k *= _M
        k ^= k >> np.uint32(24)
        k *= _M
        tail = np.zeros(n, dtype=np.int32)
        left = length - len4 * 4
        signed = rows.view(np.int8)
        if left >= 3:
            tail ^= signed[:, length - 3].astype(np.int32) << np.int32(16)
        if left >= 2:
            tail ^= signed[:, length - 2].astype(np.int32) << np.int32(8)
        if left >= 1:
            tail ^= signed[:, length - 1].astype(np.int32)
        tail_u = tail.view(np.uint32)
        h = np.zeros(n, dtype=np.uint32)
        tmp = np.empty(n, dtype=np.uint32)
        magnitude = np.empty(n, dtype=np.uint32)
        buffer = np.empty(n, dtype=np.intp) if out is None else None
        size = np.uint32(vector_size)
        ulen = np.uint32(length)
        s13, s15 = np.uint32(13), np.uint32(15)
        for i in range(nb_hash):
            h ^= ulen
            for j in range(len4):
                h *= _M
                h ^= k[j]
            if left:
                h ^= tail_u
                h *= _M
            np.right_shift(h, s13, out=tmp)
            h ^= tmp
            h *= _M
            np.right_shift(h, s15, out=tmp)
            h ^= tmp
            # Java: Math.abs(h % size); |h| as unsigned is exact even for Integer.MIN_VALUE. The remainder as
            # a - (a // size) * size: numpy divides by a scalar with a precomputed multiplier (many times faster
            # than its `remainder`).
            np.abs(h.view(np.int32), out=magnitude.view(np.int32))
            np.floor_divide(magnitude, size, out=tmp)
            tmp *= size
            target = out[i] if out is not None else buffer
            assert target is not None
            np.subtract(magnitude, tmp, out=target)
            yield target


def _murmur_group(
    rows: npt.NDArray[np.uint8], length: int, nb_hash: int, vector_size: int, as_index: bool = False
) -> Pos | Index:
    """Positions, shape (nb_hash, n), of keys that all have `length` bytes, given as an (n, length) matrix;
    `as_index`: as numpy's index type (what setting bits takes without a conversion), else uint32."""
    out = np.empty((nb_hash, rows.shape[0]), dtype=np.intp if as_index else np.uint32)
    for _ in _murmur_passes(rows, length, nb_hash, vector_size, out):
        pass
    return out


def murmur_hash(data: bytes, seed: int) -> int:
    """Hudi's (Hadoop's) MurmurHash 2 of `data` with `seed`, as a signed 32-bit int."""
    mask = 0xFFFFFFFF
    m = 0x5BD1E995
    length = len(data)
    h = (seed ^ length) & mask
    len4 = length >> 2
    for i in range(len4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    left = length - len4 * 4
    if left:

        def sb(b: int) -> int:
            return b - 256 if b >= 128 else b

        if left >= 3:
            h ^= (sb(data[length - 3]) << 16) & mask
        if left >= 2:
            h ^= (sb(data[length - 2]) << 8) & mask
        h ^= sb(data[length - 1]) & mask
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


_JENKINS_MIX = ((0, 2, 1, 4), (1, 0, 2, 6), (2, 1, 0, 8), (0, 2, 1, 16), (1, 0, 2, 19), (2, 1, 0, 4))
_JENKINS_FINAL = ((2, 1, 14), (0, 2, 11), (1, 0, 25), (2, 1, 16), (0, 2, 4), (1, 0, 14), (2, 1, 24))


def jenkins_hash(data: bytes, seed: int) -> int:
    """Hudi's (Hadoop's) Jenkins lookup3 `hashlittle` of `data` with `seed`, as a signed 32-bit int."""
    mask = 0xFFFFFFFF

    def rot(v: int, p: int) -> int:
        return ((v << p) | (v >> (32 - p))) & mask

    length = len(data)
    s = [(0xDEADBEEF + length + seed) & mask] * 3
    off = 0
    while length > 12:
        for i in range(3):
            s[i] = (s[i] + int.from_bytes(data[off + 4 * i : off + 4 * i + 4], "little")) & mask
        for x, y, z, r in _JENKINS_MIX:  # a -= c; a ^= rot(c, 4); c += b; ...
            s[x] = ((s[x] - s[y]) & mask) ^ rot(s[y], r)
            s[y] = (s[y] + s[z]) & mask
        off += 12
        length -= 12
    if length:
        rest = data[off : off + length] + bytes(12 - length)
        for i in range(3):
            s[i] = (s[i] + int.from_bytes(rest[4 * i : 4 * i + 4], "little")) & mask
        for x, y, r in _JENKINS_FINAL:  # c ^= b; c -= rot(b, 14); ...
            s[x] = ((s[x] ^ s[y]) - rot(s[y], r)) & mask
    c = s[2]
    return c - (1 << 32) if c >= 1 << 31 else c


def key_positions(key: bytes, nb_hash: int, vector_size: int, hash_type: int = MURMUR_HASH) -> list[int]:
    """The bit positions of one key (Hudi's `HashFunction.hash`)."""
    if not key:
        raise ValueError("a record key is empty; bloom filters reject empty keys (key length must be > 0)")
    fn = murmur_hash if hash_type == MURMUR_HASH else jenkins_hash
    out = []
    seed = 0
    for _ in range(nb_hash):
        seed = fn(key, seed)
        out.append(abs(seed % vector_size if seed >= 0 else -((-seed) % vector_size)))
    return out


def position_chunks_of(
    data: npt.NDArray[np.uint8],
    offsets: I64,
    nb_hash: int,
    vector_size: int,
    hash_type: int = MURMUR_HASH,
    *,
    as_index: bool = False,
) -> Iterator[tuple[I64 | slice, Pos | Index]]:
    """Bit positions of many keys given as their bytes and offsets (`key_bytes`), chunk by chunk: (which keys,
    their positions of shape (nb_hash, m)); every key comes in exactly one chunk. `as_index`: positions as numpy's
    index type (setting bits with them is about twice as fast as with uint32 positions), else uint32."""
    n = len(offsets) - 1
    if n == 0:
        return
    if hash_type != MURMUR_HASH:
        for start in range(0, n, _CHUNK):
            stop = min(n, start + _CHUNK)
            out = np.empty((nb_hash, stop - start), dtype=np.intp if as_index else np.uint32)
            for i in range(start, stop):
                key = data[offsets[i] : offsets[i + 1]].tobytes()
                out[:, i - start] = key_positions(key, nb_hash, vector_size, hash_type)
            yield slice(start, stop), out
        return
    for which, matrix, length in _length_chunks(data, offsets, _CHUNK):
        yield which, _murmur_group(matrix, length, nb_hash, vector_size, as_index)


def _length_chunks(
    data: npt.NDArray[np.uint8], offsets: I64, chunk: int
) -> Iterator[tuple[I64 | slice, npt.NDArray[np.uint8], int]]:
    """The keys (at least one) in chunks of at most `chunk` keys of one byte length: (which keys, their bytes as an
    (m, length) matrix, length). Which keys: a slice of the input when all keys have one length (fixed-format keys:
    the bytes are already a matrix), else an index array (keys grouped by length)."""
    for which, length in _length_groups(offsets):
        yield from _group_chunks(data, offsets, which, length, chunk)


def _group_chunks(
    data: npt.NDArray[np.uint8], offsets: I64, which: I64 | slice, length: int, chunk: int
) -> Iterator[tuple[I64 | slice, npt.NDArray[np.uint8], int]]:
    """One group of `_length_groups` in chunks of at most `chunk` keys, as `_length_chunks` yields them."""
    if isinstance(which, slice):
        n = len(offsets) - 1
        matrix = data[int(offsets[0]) : int(offsets[-1])].reshape(n, length)
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            yield slice(start, stop), matrix[start:stop], length
        return
    span = np.arange(length, dtype=np.int64)[None, :]
    for start in range(0, len(which), chunk):
        idx = which[start : start + chunk]
        yield idx, data[offsets[idx][:, None] + span], length


def positions_many(keys: KeyInput, nb_hash: int, vector_size: int, hash_type: int = MURMUR_HASH) -> Pos:
    """Bit positions of many keys, shape (n, nb_hash), in key order."""
    data, offsets = key_bytes(keys)
    out = np.empty((nb_hash, len(offsets) - 1), dtype=np.uint32)
    for which, positions in position_chunks_of(data, offsets, nb_hash, vector_size, hash_type):
        out[:, which] = positions
    return out.T


def set_bits(
    data: npt.NDArray[np.uint8],
    offsets: I64,
    nb_hash: int,
    vector_size: int,
    hash_type: int,
    bit_rows: Sequence[Packed],
    targets: I64 | None = None,
) -> None:
    """Set the bits of many keys (given as `key_bytes`) in packed bit vectors (bit p is bit p % 8 of byte p // 8, as
    Hudi serializes them): key i's in `bit_rows[targets[i]]` (in `bit_rows[0]` without `targets`). The bits are
    those of `position_chunks_of`. Murmur bits are set by the compiled kernel (`bloom_kernel`) where it is in use;
    otherwise in numpy, one hash pass at a time while that pass's positions are still in cache, instead of from a
    whole position matrix (measured on 125k keys of 17 bytes: 19 ms instead of 27 ms, hashing included)."""
    n = len(offsets) - 1
    if n == 0:
        return
    if hash_type != MURMUR_HASH:
        with _unpacked(bit_rows, vector_size) as bools:
            for which, positions in position_chunks_of(data, offsets, nb_hash, vector_size, hash_type, as_index=True):
                _scatter(positions, bools, None if targets is None else targets[which])
        return
    groups = []  # those the compiled kernel does not take (not in use, or keys too long for it): set in numpy
    for which, length in _length_groups(offsets):
        rows = None if targets is None else targets[which]
        if not bloom_kernel.murmur_set(data, offsets[:-1][which], length, nb_hash, vector_size, bit_rows, rows):
            groups.append((which, length))
    if not groups:
        return
    with _unpacked(bit_rows, vector_size) as bools:
        for which, length in groups:
            for part, matrix, _ in _group_chunks(data, offsets, which, length, _SCATTER_CHUNK):
                rows = None if targets is None else targets[part]
                _scatter_passes(matrix, length, nb_hash, vector_size, bools, rows)


def _length_groups(offsets: I64) -> Iterator[tuple[I64 | slice, int]]:
    """The keys grouped by byte length: (which keys, their length); which keys is a slice of all of them when they
    have one length, else an index array in key order (the lengths sorted by a radix sort: they are small)."""
    lengths = np.diff(offsets)
    first = int(lengths[0])
    if int(lengths.min()) == first == int(lengths.max()):
        yield slice(0, len(lengths)), first
        return
    if int(lengths.max()) < 1 << 16:
        order = np.argsort(lengths.astype(np.uint16), kind="stable")
    else:
        order = np.argsort(lengths, kind="stable")
    bounds = np.flatnonzero(np.diff(lengths[order])) + 1
    for group in np.split(order, bounds):
        yield group, int(lengths[group[0]])


@contextmanager
def _unpacked(bit_rows: Sequence[Packed], vector_size: int) -> Iterator[list[npt.NDArray[np.bool_]]]:
    """The packed bit vectors as bool arrays (one byte a bit: what numpy sets bits in fastest), packed back into
    `bit_rows` when the block ends without an error."""
    bools = [np.unpackbits(row, count=vector_size, bitorder="little").view(np.bool_) for row in bit_rows]
    yield bools
    for row, bits in zip(bit_rows, bools, strict=True):
        row[:] = np.packbits(bits, bitorder="little")


def _runs(rows: I64 | None, n: int) -> tuple[Index | None, list[tuple[int, int, int]]]:
    """An order of `n` keys that makes the keys of each bit vector (`rows`) contiguous (None: already), and the
    runs as (row, start, stop) in that order."""
    if rows is None:
        return None, [(0, 0, n)]
    low, high = int(rows.min()), int(rows.max())
    if low == high:
        return None, [(low, 0, n)]
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    edges = [0, *(np.flatnonzero(np.diff(ordered)) + 1).tolist(), n]
    return order, [(int(ordered[edges[e]]), edges[e], edges[e + 1]) for e in range(len(edges) - 1)]


def _scatter_passes(
    matrix: npt.NDArray[np.uint8],
    length: int,
    nb_hash: int,
    vector_size: int,
    bit_rows: Sequence[npt.NDArray[np.bool_]],
    rows: I64 | None,
) -> None:
    order, runs = _runs(rows, matrix.shape[0])
    if order is not None:
        matrix = matrix[order]
    for positions in _murmur_passes(matrix, length, nb_hash, vector_size):
        for row, start, stop in runs:
            bit_rows[row][positions[start:stop]] = True


def _scatter(positions: Pos | Index, bit_rows: Sequence[npt.NDArray[np.bool_]], rows: I64 | None) -> None:
    order, runs = _runs(rows, positions.shape[1])
    if order is not None:
        positions = positions[:, order]
    for row, start, stop in runs:
        bit_rows[row][positions[:, start:stop].reshape(-1)] = True
