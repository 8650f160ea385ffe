"""Byte mutations for fuzzing the parsers of untrusted bytes, shared by `tests/fuzz` (driven by hypothesis) and
`bench/fuzz.py` (driven by a seeded `random.Random`, fast and reproducible).

A mutation is a list of `Op`s applied in order to a seed's bytes. Positions are taken modulo the current length,
so any integer is a valid position and hypothesis can shrink them freely.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence
from typing import NamedTuple

FLIP, SET, TRUNCATE, INSERT, DELETE, INT_FIELD, VARINT, SPLICE, REPLACE_ALL = range(9)
OP_KINDS = 9

#: Values written into length and count fields: signs, int32/int64 limits, just past them, and small ones.
INTERESTING_INTS: tuple[int, ...] = (
    0,
    1,
    -1,
    7,
    255,
    4096,
    2**31 - 1,
    -(2**31),
    2**31,
    2**32 - 1,
    2**32,
    2**62,
    2**63 - 1,
    -(2**63),
    -(2**62),
)


class Op(NamedTuple):
    """One edit: `kind` (one of the constants above), a position, a small integer argument and a payload."""

    kind: int
    pos: int
    arg: int = 0
    payload: bytes = b""


def _int_bytes(value: int, width: int, big_endian: bool) -> bytes:
    mask = (1 << (8 * width)) - 1
    return (value & mask).to_bytes(width, "big" if big_endian else "little")


def zigzag_varint(value: int) -> bytes:
    """Avro's zig-zag varint of a 64-bit value (wrapped to 64 bits)."""
    value &= (1 << 64) - 1
    signed = value - (1 << 64) if value >= 1 << 63 else value
    n = ((signed << 1) ^ (signed >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def apply_op(data: bytearray, op: Op, others: Sequence[bytes]) -> None:
    """Apply one edit to `data` in place."""
    n = len(data)
    kind = op.kind % OP_KINDS
    if kind == REPLACE_ALL:
        data[:] = op.payload
        return
    if kind == INSERT:
        at = op.pos % (n + 1)
        data[at:at] = op.payload
        return
    if kind == SPLICE:
        if not others:
            return
        other = others[op.arg % len(others)]
        if not other:
            return
        start = (op.pos // 7) % len(other)
        at = op.pos % (n + 1)
        data[at:at] = other[start : start + 1 + (op.arg % 256)]
        return
    if n == 0:
        return
    at = op.pos % n
    if kind == FLIP:
        data[at] ^= 1 << (op.arg % 8)
    elif kind == SET:
        data[at] = op.arg % 256
    elif kind == TRUNCATE:
        del data[at:]
    elif kind == DELETE:
        del data[at : at + 1 + op.arg % 64]
    elif kind == INT_FIELD:
        width = (4, 8, 2)[(op.arg // len(INTERESTING_INTS)) % 3]
        value = INTERESTING_INTS[op.arg % len(INTERESTING_INTS)]
        big_endian = (op.arg // (3 * len(INTERESTING_INTS))) % 2 == 0
        data[at : at + width] = _int_bytes(value, width, big_endian)
    elif kind == VARINT:
        value = INTERESTING_INTS[op.arg % len(INTERESTING_INTS)]
        old = 1
        while at + old - 1 < n and data[at + old - 1] & 0x80 and old < 10:
            old += 1
        data[at : at + old] = zigzag_varint(value)


def apply_ops(seed: bytes, ops: Sequence[Op], others: Sequence[bytes] = ()) -> bytes:
    data = bytearray(seed)
    for op in ops:
        apply_op(data, op, others)
    return bytes(data)


def random_ops(rng: random.Random, size: int) -> list[Op]:
    """One to four edits, weighted towards the ones that find bugs (length fields, truncation, flips)."""
    ops: list[Op] = []
    if rng.random() < 0.02:
        return [Op(REPLACE_ALL, 0, 0, rng.randbytes(rng.randrange(0, 512)))]
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        kind = rng.choices(
            (FLIP, SET, TRUNCATE, INSERT, DELETE, INT_FIELD, VARINT, SPLICE), weights=(5, 3, 2, 2, 2, 4, 3, 1)
        )[0]
        pos = rng.randrange(max(size, 1) + 1)
        if kind == INSERT:
            payload = rng.randbytes(rng.randrange(1, 40)) if rng.random() < 0.8 else b"\xff" * rng.randrange(1, 9)
            ops.append(Op(kind, pos, 0, payload))
        else:
            ops.append(Op(kind, pos, rng.randrange(1 << 16)))
    return ops


def truncation_points(size: int, count: int) -> list[int]:
    """About `count` cut offsets spread over [0, size): every few bytes, plus both ends."""
    step = max(1, size // max(count, 1))
    return sorted({0, 1, *range(0, size, step), max(size - 1, 0)})


def pack_i64(value: int) -> bytes:
    return struct.pack(">q", value)
