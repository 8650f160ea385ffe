"""Vectorised encoding of Arrow tables into Hudi Avro data block content.

The table is first conformed to the Arrow types of the Avro schema (columns matched by name, missing nullable
columns filled with nulls, types cast). Each field then computes the encoded size of every value with numpy,
record sizes are summed, and every field scatters its bytes into one output buffer at its per-record position.
"""

from __future__ import annotations

import struct
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tableservice.errors import PermanentError, UnsupportedTableError
from tableservice.hudi.file_group.log_format.blocks import BLOCK_CONTENT_VERSION
from tableservice.hudi.table.schema import AvroType, arrow_schema_from_avro

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]


class _Enc(Protocol):
    sizes: I64

    def write(self, out: U8, pos: I64) -> None: ...


def _ints(arr: pa.Array) -> I64:
    if arr.type == pa.int64():
        return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.asarray(arr.to_numpy(zero_copy_only=False)).astype(np.int64)


class _Long:
    def __init__(self, values: I64) -> None:
        v = values.astype(np.int64)
        self.zz = ((v << np.int64(1)) ^ (v >> np.int64(63))).view(np.uint64)
        nb = np.ones(len(v), dtype=np.int64)
        for j in range(1, 10):
            nb += self.zz >= np.uint64(1 << (7 * j))
        self.sizes = nb

    def write(self, out: U8, pos: I64) -> None:
        if not len(pos):
            return
        maxn = int(self.sizes.max())
        for j in range(maxn):
            m = self.sizes > j
            byte = ((self.zz >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
            byte |= np.where(self.sizes > j + 1, 0x80, 0).astype(np.uint8)
            if j == 0:
                out[pos] = byte
            else:
                out[pos[m] + j] = byte[m]


class _Fixed:
    """Values of a fixed width given as an (n, width) byte matrix."""

    def __init__(self, mat: U8) -> None:
        self.mat = np.ascontiguousarray(mat)
        self.sizes = np.full(len(mat), mat.shape[1], dtype=np.int64)

    def write(self, out: U8, pos: I64) -> None:
        if self.mat.size:
            out[pos[:, None] + np.arange(self.mat.shape[1], dtype=np.int64)] = self.mat


class _Bytes:
    """Length-prefixed bytes from Arrow offsets and data."""

    def __init__(self, offsets: I64, data: U8) -> None:
        self.offsets = offsets
        self.data = data
        self.lens = np.diff(offsets)
        self.head = _Long(self.lens)
        self.sizes = self.head.sizes + self.lens

    def write(self, out: U8, pos: I64) -> None:
        self.head.write(out, pos)
        o0, o1 = int(self.offsets[0]), int(self.offsets[-1])
        if o1 > o0:
            dst = np.repeat(pos + self.head.sizes - self.offsets[:-1], self.lens) + np.arange(o0, o1, dtype=np.int64)
            out[dst] = self.data[o0:o1]


class _Seq:
    """Several encoders written one after the other for each value (records, map entries)."""

    def __init__(self, parts: list[_Enc], n: int) -> None:
        self.parts = parts
        self.sizes = np.zeros(n, dtype=np.int64)
        for p in parts:
            self.sizes = self.sizes + p.sizes

    def write(self, out: U8, pos: I64) -> None:
        for p in self.parts:
            p.write(out, pos)
            pos = pos + p.sizes


class _Nullable:
    def __init__(self, node: AvroType, arr: pa.Array) -> None:
        nb = node.nullable_branch
        assert nb is not None
        idx, inner = nb
        self.valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        self.byte_valid, self.byte_null = 2 * idx, 2 * (1 - idx)
        sub = arr.filter(pa.array(self.valid)) if not self.valid.all() else arr
        self.inner = _make(inner, sub)
        self.sizes = np.ones(len(arr), dtype=np.int64)
        self.sizes[self.valid] += self.inner.sizes

    def write(self, out: U8, pos: I64) -> None:
        out[pos] = np.where(self.valid, self.byte_valid, self.byte_null).astype(np.uint8)
        self.inner.write(out, pos[self.valid] + 1)


class _Prefixed:
    """A constant prefix byte sequence (single-branch unions) before an inner encoder."""

    def __init__(self, prefix: bytes, inner: _Enc) -> None:
        self.prefix = np.frombuffer(prefix, dtype=np.uint8)
        self.inner = inner
        self.sizes = inner.sizes + len(prefix)

    def write(self, out: U8, pos: I64) -> None:
        for j, b in enumerate(self.prefix):
            out[pos + j] = b
        self.inner.write(out, pos + len(self.prefix))


class _Repeated:
    """Avro array or map: [count, items..., 0] per value (just 0 when empty)."""

    def __init__(self, node: AvroType, arr: pa.Array) -> None:
        assert node.items is not None
        offs = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        base, end = int(offs[0]), int(offs[-1])
        entries = arr.values.slice(base, end - base)
        offs = offs - base
        self.counts = np.diff(offs)
        n = len(self.counts)
        if node.kind == "map":
            keys, items = entries.flatten()
            self.items: _Enc = _Seq([_make(AvroType("string"), keys), _make(node.items, items)], end - base)
        else:
            self.items = _make(node.items, entries)
        nonempty = self.counts > 0
        self.head = _Long(self.counts[nonempty])
        self.head_sizes = np.zeros(n, dtype=np.int64)
        self.head_sizes[nonempty] = self.head.sizes
        self.nonempty = nonempty
        self.cs = np.zeros(end - base + 1, dtype=np.int64)
        np.cumsum(self.items.sizes, out=self.cs[1:])
        self.offs = offs
        self.sizes = self.head_sizes + (self.cs[offs[1:]] - self.cs[offs[:-1]]) + 1

    def write(self, out: U8, pos: I64) -> None:
        self.head.write(out, pos[self.nonempty])
        total = int(self.offs[-1])
        if total:
            owner = np.repeat(np.arange(len(self.counts), dtype=np.int64), self.counts)
            item_pos = (pos + self.head_sizes - self.cs[self.offs[:-1]])[owner] + self.cs[:-1]
            self.items.write(out, item_pos)
        out[pos + self.sizes - 1] = 0


def _make(node: AvroType, arr: pa.Array) -> _Enc:
    k = node.kind
    if k == "union":
        if node.nullable_branch is not None:
            return _Nullable(node, arr)
        if len(node.branches) == 1:
            return _Prefixed(b"\x00", _make(node.branches[0], arr))
        if all(b.kind == "null" for b in node.branches):
            return _Prefixed(b"\x00", _make(node.branches[0], arr))
        raise UnsupportedTableError(f"Avro union of several types is not supported: {[b.kind for b in node.branches]}")
    if arr.null_count and k != "null":
        raise PermanentError(f"{arr.null_count} null value(s) for the non-nullable Avro type {k!r}")
    n = len(arr)
    if k == "null":
        return _Fixed(np.zeros((n, 0), dtype=np.uint8))
    if k == "boolean":
        vals = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.uint8)
        return _Fixed(vals.reshape(n, 1))
    if k in ("int", "long"):
        storage = pa.int32() if k == "int" else pa.int64()
        return _Long(_ints(arr.view(storage) if arr.type != storage else arr))
    if k == "enum":
        idx = pc.index_in(arr, value_set=pa.array(node.symbols, type=pa.string()))
        if idx.null_count:
            raise PermanentError(f"value not among the symbols of Avro enum {node.name!r}")
        return _Long(_ints(idx))
    if k in ("float", "double"):
        dt = "<f4" if k == "float" else "<f8"
        vals = np.asarray(arr.to_numpy(zero_copy_only=False)).astype(dt)
        return _Fixed(vals.view(np.uint8).reshape(n, 4 if k == "float" else 8))
    if node.logical == "decimal":
        return _decimal(node, arr)
    if k == "fixed":
        offsets, data = _buffers(arr)
        if n and bool((np.diff(offsets) != node.size).any()):
            raise PermanentError(f"value of the wrong length for Avro fixed {node.name!r} of size {node.size}")
        return _Fixed(data[offsets[0] : offsets[-1]].reshape(n, node.size))
    if k in ("string", "bytes"):
        offsets, data = _buffers(arr)
        return _Bytes(offsets, data)
    if k == "record":
        children = arr.flatten()
        return _Seq([_make(f.type, c) for f, c in zip(node.fields, children, strict=True)], n)
    if k in ("array", "map"):
        return _Repeated(node, arr)
    raise UnsupportedTableError(f"unsupported Avro type {k!r}")


def _buffers(arr: pa.Array) -> tuple[I64, U8]:
    if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type):
        odt: type[np.int64] | type[np.int32] = np.int64
    else:
        arr = arr.cast(pa.binary()) if not (pa.types.is_string(arr.type) or pa.types.is_binary(arr.type)) else arr
        odt = np.int32
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=odt)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, dtype=np.uint8)
    return offsets, data


def _decimal(node: AvroType, arr: pa.Array) -> _Enc:
    width = 32 if isinstance(arr.type, pa.Decimal256Type) else 16
    n = len(arr)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8)[arr.offset * width : (arr.offset + n) * width]
    be = np.ascontiguousarray(raw.reshape(n, width)[:, ::-1])
    if node.kind == "fixed":
        size = node.size
        if size >= width:
            fill = np.where(be[:, :1] >= 0x80, 0xFF, 0).astype(np.uint8)
            mat = np.concatenate([np.repeat(fill, size - width, axis=1), be], axis=1)
        else:
            head, mat = be[:, : width - size], be[:, width - size :]
            fill = np.where(mat[:, :1] >= 0x80, 0xFF, 0).astype(np.uint8)
            if n and bool((head != fill).any()):
                raise PermanentError(f"decimal value does not fit Avro fixed {node.name!r} of size {size}")
        return _Fixed(mat)
    # bytes: minimal two's complement, as Java's BigInteger.toByteArray
    redundant = ((be[:, :-1] == 0) & (be[:, 1:] < 0x80)) | ((be[:, :-1] == 0xFF) & (be[:, 1:] >= 0x80))
    lead = np.cumprod(redundant, axis=1).sum(axis=1).astype(np.int64) if n else np.zeros(0, dtype=np.int64)
    lens = width - lead
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    rows = np.repeat(np.arange(n, dtype=np.int64), lens)
    within = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1], lens)
    data = be[rows, np.repeat(lead, lens) + within]
    return _Bytes(offsets, np.ascontiguousarray(data, dtype=np.uint8))


def conform_table(table: pa.Table, target: pa.Schema) -> list[pa.Array]:
    """Columns of `table` in the order and types of `target` (missing nullable columns become nulls)."""
    cols: list[pa.Array] = []
    names = set(table.column_names)
    for f in target:
        if f.name in names:
            col = table.column(f.name)
            if col.type != f.type:
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                    raise PermanentError(
                        f"column {f.name!r} of type {col.type} cannot be written as {f.type}: {e}"
                    ) from e
            arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        elif f.nullable:
            arr = pa.nulls(table.num_rows, type=f.type)
        else:
            raise PermanentError(f"column {f.name!r} is missing and its Avro type is not nullable")
        cols.append(arr)
    return cols


def encode_avro_records(table: pa.Table, schema: AvroType) -> bytes:
    """Avro data block content: int32 version 3, int32 count, then int32 length + datum per record."""
    target = arrow_schema_from_avro(schema)
    cols = conform_table(table, target)
    n = table.num_rows
    encoders: list[_Enc] = []
    for f, arr in zip(schema.fields, cols, strict=True):
        try:
            encoders.append(_make(f.type, arr))
        except PermanentError as e:
            raise type(e)(f"field {f.name!r}: {e.problem}") from e
    sizes = np.zeros(n, dtype=np.int64)
    for enc in encoders:
        sizes += enc.sizes
    if n and int(sizes.max()) >= 2**31:
        raise UnsupportedTableError("a record larger than 2 GiB cannot be written to a log block")
    starts = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(sizes[:-1] + 4, out=starts[1:])
    starts += 8
    total = 8 + int(sizes.sum()) + 4 * n
    out = np.zeros(total, dtype=np.uint8)
    out[:8] = np.frombuffer(struct.pack(">ii", BLOCK_CONTENT_VERSION, n), dtype=np.uint8)
    if n:
        out[starts[:, None] + np.arange(4, dtype=np.int64)] = sizes.astype(">i4").view(np.uint8).reshape(n, 4)
    pos = starts + 4
    for enc in encoders:
        enc.write(out, pos)
        pos = pos + enc.sizes
    return out.tobytes()
