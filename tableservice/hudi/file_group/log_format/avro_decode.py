"""Vectorised decoding of Hudi Avro data block content into Arrow.

Content: int32 version, int32 record count, then per record an int32 length and the Avro binary datum.
Record starts come from the length prefixes; then every field is decoded for all records at once with numpy
("lockstep": one position per record advances field by field), so the Python cost is per field, not per value.
Arrays and maps advance item by item across all records that still have items; when that would take too many
rounds (very long arrays), the block is decoded record by record with fastavro instead.
"""

from __future__ import annotations

import io
import struct
from typing import Any

import fastavro
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tableservice.errors import CorruptFileError, UnsupportedTableError
from tableservice.hudi.table.schema import AvroType, arrow_schema_from_avro, arrow_type
from tableservice.hudi.table.schema_guard import zero_width_array

I64 = npt.NDArray[np.int64]
_TS_LOGICAL = frozenset(
    {
        "timestamp-millis",
        "timestamp-micros",
        "timestamp-nanos",
        "local-timestamp-millis",
        "local-timestamp-micros",
        "local-timestamp-nanos",
    }
)
_MAX_ROUNDS = 2048
_PAD = 16


class _TooSequential(Exception):
    """Arrays too long for item-by-item rounds: fall back to per-record decoding."""


def _bad(problem: str) -> CorruptFileError:
    return CorruptFileError(f"Avro data block: {problem}")


def record_starts(content: bytes, count: int, offset: int = 8) -> tuple[I64, I64]:
    """Start and end offsets of the `count` length-prefixed records that follow `offset`."""
    if count < 0:
        raise _bad(f"negative record count {count}")
    size = len(content)
    if count > (size - offset) // 4:
        raise _bad(f"record count {count} does not fit in {size} bytes")
    unpack = struct.Struct(">i").unpack_from
    # The walk checks nothing per record (a negative length or one past the end is found below, on all records at
    # once); a length prefix past the end raises struct.error, and a negative offset (after a negative length) is
    # refused before `unpack_from` reads from the end of the content.
    nexts = [0] * (count + 1)
    nexts[0] = p = offset
    walked = count
    try:
        for i in range(1, count + 1):
            if p < 0:
                break
            p += 4 + unpack(content, p)[0]
            nexts[i] = p
    except struct.error:
        walked = i - 1
    bounds = np.array(nexts[: walked + 1], dtype=np.int64)
    starts = bounds[:-1] + 4
    ends = bounds[1:]
    bad = np.flatnonzero((ends < starts) | (ends > size))
    if bad.size:
        i = int(bad[0])
        raise _bad(f"record {i} length {int(ends[i] - starts[i])} runs past the content")
    if walked < count:
        raise _bad(f"record {walked} length prefix runs past the content")
    return starts, ends


class _Decoder:
    def __init__(self, content: bytes) -> None:
        padded = content + b"\0" * _PAD
        self.buf = np.frombuffer(padded, dtype=np.uint8)
        self.arrow_buf = pa.py_buffer(padded)
        self.rounds = 0

    # --- scalars -------------------------------------------------------------------------------

    def varint(self, pos: I64, lim: I64) -> tuple[npt.NDArray[np.uint64], I64]:
        buf = self.buf
        b = buf[pos]
        val = (b & 0x7F).astype(np.uint64)
        nbytes = np.ones(len(pos), dtype=np.int64)
        idx = np.nonzero(b & 0x80)[0]
        j = 1
        while idx.size:
            if j >= 10:
                raise _bad("varint longer than 10 bytes")
            bb = buf[pos[idx] + j]
            val[idx] |= (bb & 0x7F).astype(np.uint64) << np.uint64(7 * j)
            nbytes[idx] += 1
            idx = idx[(bb & 0x80) != 0]
            j += 1
        new = pos + nbytes
        if new.size and bool((new > lim).any()):
            raise _bad("varint runs past its record")
        return val, new

    def long(self, pos: I64, lim: I64) -> tuple[I64, I64]:
        u, new = self.varint(pos, lim)
        v = (u >> np.uint64(1)).astype(np.int64) ^ -(u & np.uint64(1)).astype(np.int64)
        return v, new

    def fixed_bytes(self, pos: I64, lim: I64, n: int) -> tuple[npt.NDArray[np.uint8], I64]:
        if not pos.size:  # no value to read (a union branch no record takes): allocate nothing, whatever n says
            return np.zeros((0, min(n, len(self.buf))), dtype=np.uint8), pos.copy()
        if n > len(self.buf):
            raise _bad(f"{n}-byte value is longer than the block")
        new = pos + n
        if bool((new > lim).any()):
            raise _bad(f"{n}-byte value runs past its record")
        mat = self.buf[pos[:, None] + np.arange(n, dtype=np.int64)]
        return np.ascontiguousarray(mat), new

    def var_bytes(self, pos: I64, lim: I64) -> tuple[I64, I64, npt.NDArray[np.uint8], I64]:
        """Length-prefixed values: (offsets, starts, data, new positions)."""
        n, p = self.long(pos, lim)
        # `n > lim - p`, not `p + n > lim`: a length near 2^63 would wrap the sum around to a small number
        if n.size and (bool((n < 0).any()) or bool((n > lim - p).any())):
            raise _bad("string or bytes length runs past its record")
        offsets = np.zeros(len(n) + 1, dtype=np.int64)
        np.cumsum(n, out=offsets[1:])
        total = int(offsets[-1])
        if total:
            idx = np.repeat(p - offsets[:-1], n) + np.arange(total, dtype=np.int64)
            data = self.buf[idx]
        else:
            data = np.zeros(0, dtype=np.uint8)
        return offsets, p, data, p + n

    def binary_values(self, pos: I64, lim: I64, t: pa.DataType) -> tuple[pa.Array, I64]:
        """Length-prefixed values as an Arrow string or binary array, the bytes copied once, by Arrow: the values
        and the gaps between them are the items of one binary array over the block's bytes (offsets value start,
        value end, next value start, ...: increasing, as the records follow one another), from which `take`
        keeps every other item. A string array is checked to be UTF-8 by the cast from binary."""
        n, p = self.long(pos, lim)
        k = len(n)
        if n.size and (bool((n < 0).any()) or bool((n > lim - p).any())):
            raise _bad("string or bytes length runs past its record")
        if k == 0:
            return pa.array([], type=t), p
        if int(n.sum()) >= 2**31:
            raise UnsupportedTableError("a column of one log block holds more than 2 GiB of strings")
        large = len(self.buf) >= 2**31
        bounds = np.empty(2 * k, dtype=np.int64 if large else np.int32)
        bounds[0::2] = p
        bounds[1::2] = p + n
        pieces = pa.Array.from_buffers(
            pa.large_binary() if large else pa.binary(), 2 * k - 1, [None, pa.py_buffer(bounds), self.arrow_buf]
        )
        values = pieces.take(pa.array(np.arange(0, 2 * k, 2, dtype=np.int64)))
        try:
            return values.cast(t), p + n
        except pa.ArrowInvalid as e:
            raise _bad(f"string is not valid UTF-8: {e}") from e

    # --- dispatch ------------------------------------------------------------------------------

    def decode(self, node: AvroType, pos: I64, lim: I64) -> tuple[pa.Array, I64]:
        k = node.kind
        if k == "union":
            return self._union(node, pos, lim)
        if k == "record":
            children = []
            for f in node.fields:
                arr, pos = self.decode(f.type, pos, lim)
                children.append(arr)
            t, _ = arrow_type(node)
            return pa.StructArray.from_arrays(children, fields=list(t)), pos
        if k in ("array", "map"):
            return self._repeated(node, pos, lim)
        return self._scalar(node, pos, lim)

    def _union(self, node: AvroType, pos: I64, lim: I64) -> tuple[pa.Array, I64]:
        branch, pos = self.long(pos, lim)
        nb = node.nullable_branch
        if nb is None:
            t, _ = arrow_type(node)  # raises for unions of several types
            if len(node.branches) == 1:
                if branch.size and bool((branch != 0).any()):
                    raise _bad("union branch index out of range")
                return self.decode(node.branches[0], pos, lim)
            if branch.size and bool(((branch < 0) | (branch >= len(node.branches))).any()):
                raise _bad("union branch index out of range")
            return pa.nulls(len(pos), type=t), pos
        idx, inner = nb
        if branch.size and bool(((branch != 0) & (branch != 1)).any()):
            raise _bad("union branch index out of range")
        mask = branch == idx
        if bool(mask.all()):
            return self.decode(inner, pos, lim)
        sub, new_sub = self.decode(inner, pos[mask], lim[mask])
        pos = pos.copy()
        pos[mask] = new_sub
        take = np.cumsum(mask, dtype=np.int64) - 1
        indices = pa.array(take, type=pa.int64(), mask=~mask)
        return sub.take(indices), pos

    def _scalar(self, node: AvroType, pos: I64, lim: I64) -> tuple[pa.Array, I64]:
        k, logical = node.kind, node.logical
        n = len(pos)
        t, _ = arrow_type(node)
        if k == "null":
            return pa.nulls(n), pos
        if k == "boolean":
            mat, pos = self.fixed_bytes(pos, lim, 1)
            return pa.array(mat.reshape(n) != 0, type=pa.bool_()), pos
        if k in ("int", "long", "enum"):
            v, pos = self.long(pos, lim)
            if k == "enum":
                if n and bool(((v < 0) | (v >= len(node.symbols))).any()):
                    raise _bad("enum index out of range")
                return pa.array(node.symbols, type=pa.string()).take(pa.array(v)), pos
            if k == "int":
                if n and bool(((v < -(2**31)) | (v >= 2**31)).any()):
                    raise _bad("int value out of range")
                return pa.array(v.astype(np.int32), type=pa.int32()).view(t), pos
            return pa.array(v, type=pa.int64()).view(t), pos
        if k in ("float", "double"):
            width = 4 if k == "float" else 8
            mat, pos = self.fixed_bytes(pos, lim, width)
            vals = mat.view("<f4" if width == 4 else "<f8").reshape(n)
            return pa.array(vals, type=t), pos
        if k == "fixed":
            mat, pos = self.fixed_bytes(pos, lim, node.size)
            if logical == "decimal":
                return _decimal_from_matrix(mat, t), pos
            offsets = np.arange(n + 1, dtype=np.int64) * node.size
            return _binary_array(pa.binary(), n, offsets, mat.reshape(-1)), pos
        if k in ("string", "bytes"):
            if logical == "decimal":
                offsets, _, data, pos = self.var_bytes(pos, lim)
                return _decimal_from_var(offsets, data, t), pos
            return self.binary_values(pos, lim, pa.string() if k == "string" else pa.binary())
        raise UnsupportedTableError(f"unsupported Avro type {k!r}")

    def _repeated(self, node: AvroType, pos: I64, lim: I64) -> tuple[pa.Array, I64]:
        assert node.items is not None
        is_map = node.kind == "map"
        n = len(pos)
        pos = pos.copy()
        counts = np.zeros(n, dtype=np.int64)
        keys: list[pa.Array] = []
        values: list[pa.Array] = []
        owners: list[I64] = []
        ordinals: list[I64] = []
        active = np.arange(n, dtype=np.int64)
        while active.size:
            c, p = self.long(pos[active], lim[active])
            neg = c < 0
            if bool(neg.any()):
                _, p2 = self.long(p[neg], lim[active][neg])
                p[neg] = p2
                c = np.abs(c)
            pos[active] = p
            go = c > 0
            blk, rem = active[go], c[go]
            if blk.size and bool((rem > (lim[blk] - pos[blk]) + 1024).any()):
                raise _bad("array or map block count larger than its record")
            while blk.size:
                self.rounds += 1
                if self.rounds > _MAX_ROUNDS:
                    raise _TooSequential()
                if is_map:
                    karr, kp = self.binary_values(pos[blk], lim[blk], pa.string())
                    keys.append(karr)
                    varr, vp = self.decode(node.items, kp, lim[blk])
                else:
                    varr, vp = self.decode(node.items, pos[blk], lim[blk])
                pos[blk] = vp
                values.append(varr)
                owners.append(blk)
                ordinals.append(counts[blk].copy())
                counts[blk] += 1
                rem = rem - 1
                keep = rem > 0
                blk, rem = blk[keep], rem[keep]
            active = active[go]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        t, _ = arrow_type(node)
        item_type = t.item_type if is_map else t.value_type
        if values:
            slot = offsets[np.concatenate(owners)] + np.concatenate(ordinals)
            order = pa.array(np.argsort(slot, kind="stable"))
            vals = pa.concat_arrays(values).take(order)
            ks = pa.concat_arrays(keys).take(order) if is_map else None
        else:
            vals = pa.array([], type=item_type)
            ks = pa.array([], type=pa.string()) if is_map else None
        off32 = pa.array(offsets.astype(np.int32), type=pa.int32())
        if is_map:
            return pa.MapArray.from_arrays(off32, ks, vals, type=t), pos
        return pa.ListArray.from_arrays(off32, vals, type=t), pos


def _binary_array(t: pa.DataType, n: int, offsets: I64, data: npt.NDArray[np.uint8]) -> pa.Array:
    if offsets[-1] >= 2**31:
        raise UnsupportedTableError("a column of one log block holds more than 2 GiB of strings")
    return pa.Array.from_buffers(
        t, n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(np.ascontiguousarray(data))]
    )


def _decimal_width(t: pa.DataType) -> int:
    return 32 if isinstance(t, pa.Decimal256Type) else 16


def _decimal_from_matrix(mat: npt.NDArray[np.uint8], t: pa.DataType) -> pa.Array:
    """Big-endian two's complement rows (k, n) -> decimal array."""
    k, n = mat.shape
    width = _decimal_width(t)
    if n > width:
        head, mat = mat[:, : n - width], mat[:, n - width :]
        fill = np.where(mat[:, :1] >= 0x80, 0xFF, 0).astype(np.uint8)
        if bool((head != fill).any()):
            raise _bad("decimal value does not fit its precision")
    out = np.empty((k, width), dtype=np.uint8)
    if n:
        out[:] = np.where(mat[:, :1] >= 0x80, 0xFF, 0).astype(np.uint8)
        out[:, width - mat.shape[1] :] = mat
    else:
        out[:] = 0
    le = np.ascontiguousarray(out[:, ::-1])
    arr = pa.Array.from_buffers(t, k, [None, pa.py_buffer(le)])
    try:
        arr.validate(full=True)  # Avro does not bound the digits on disk; an Arrow decimal must hold its precision
    except pa.ArrowInvalid as e:
        raise _bad(f"decimal value does not fit its precision: {e}") from e
    return arr


def _decimal_from_var(offsets: I64, data: npt.NDArray[np.uint8], t: pa.DataType) -> pa.Array:
    k = len(offsets) - 1
    lens = np.diff(offsets)
    width = _decimal_width(t)
    maxlen = int(lens.max()) if k else 0
    if maxlen > width:
        raise _bad(f"decimal value of {maxlen} bytes is longer than {width} bytes")
    cols = width
    mat = np.zeros((k, cols), dtype=np.uint8)
    nonempty = lens > 0
    first = np.zeros(k, dtype=np.uint8)
    first[nonempty] = data[offsets[:-1][nonempty]]
    mat[first >= 0x80] = 0xFF
    total = int(offsets[-1])
    if total:
        rows = np.repeat(np.arange(k, dtype=np.int64), lens)
        within = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1], lens)
        mat[rows, cols - np.repeat(lens, lens) + within] = data
    return _decimal_from_matrix(mat, t)


def decode_avro_records(content: bytes, schema: AvroType) -> pa.Table:
    """Decode Avro data block content (version, count, length-prefixed datums) with the writer schema."""
    if len(content) < 8:
        raise _bad(f"content of {len(content)} bytes is shorter than its 8-byte prefix")
    version, count = struct.unpack_from(">ii", content, 0)
    if version not in (1, 2, 3):
        raise _bad(f"unsupported data block content version {version}")
    arrow_schema = arrow_schema_from_avro(schema)
    starts, ends = record_starts(content, count)
    if count == 0:
        return arrow_schema.empty_table()
    try:
        dec = _Decoder(content)
        columns = []
        pos = starts
        for f in schema.fields:
            arr, pos = dec.decode(f.type, pos, ends)
            columns.append(arr)
        return pa.Table.from_arrays(columns, schema=arrow_schema)
    except _TooSequential:
        return _decode_with_fastavro(content, starts, ends, schema, arrow_schema)


def _decode_with_fastavro(content: bytes, starts: I64, ends: I64, schema: AvroType, target: pa.Schema) -> pa.Table:
    schema_json = _to_json(schema)
    unbounded = zero_width_array(schema_json)
    if unbounded is not None:
        raise _bad(f"writer schema has an {unbounded}")
    parsed = fastavro.parse_schema(schema_json)
    rows: list[Any] = []
    mv = memoryview(content)
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        try:
            rows.append(fastavro.schemaless_reader(io.BytesIO(mv[s:e]), parsed, None))
        except Exception as exc:  # fastavro raises many kinds of errors on bad bytes
            raise _bad(f"record at offset {s} does not decode: {exc}") from exc
    cols = [pa.array([_fix(r.get(f.name), f.type) for r in rows], type=target.field(f.name).type) for f in target]
    return pa.Table.from_arrays(cols, schema=target)


def _fix(value: Any, t: pa.DataType) -> Any:
    """fastavro values -> values pyarrow accepts (maps as key/value pairs)."""
    if value is None:
        return None
    if pa.types.is_map(t):
        return [(k, _fix(v, t.item_type)) for k, v in value.items()]
    if pa.types.is_list(t):
        return [_fix(v, t.value_type) for v in value]
    if pa.types.is_struct(t):
        return {t.field(i).name: _fix(value.get(t.field(i).name), t.field(i).type) for i in range(t.num_fields)}
    return value


def _to_json(node: AvroType) -> Any:
    """Back to an Avro JSON structure (named types defined once, then referenced by name)."""
    return _Jsonify().go(node)


class _Jsonify:
    def __init__(self) -> None:
        self.seen: set[str] = set()

    def go(self, n: AvroType) -> Any:
        if n.name is not None and n.name in self.seen:
            return n.name
        if n.name is not None:
            self.seen.add(n.name)
        k = n.kind
        if k == "union":
            return [self.go(b) for b in n.branches]
        if k == "record":
            return {
                "type": "record",
                "name": n.name,
                "fields": [{"name": f.name, "type": self.go(f.type)} for f in n.fields],
            }
        if k == "enum":
            return {"type": "enum", "name": n.name, "symbols": list(n.symbols)}
        if k == "array":
            assert n.items is not None
            return {"type": "array", "items": self.go(n.items)}
        if k == "map":
            assert n.items is not None
            return {"type": "map", "values": self.go(n.items)}
        out: dict[str, Any] = {"type": k}
        if k == "fixed":
            out.update(name=n.name, size=n.size)
        if n.logical is not None and n.logical != "uuid":
            out["logicalType"] = n.logical
            if n.logical == "decimal":
                out.update(precision=n.precision, scale=n.scale)
        return out
