"""A small generic codec for the Thrift compact protocol, enough to edit Parquet footers.

A struct decodes to a `TStruct`: its fields in file order, each `(field id, compact type, value)`. Values
are ints, floats, bytes, bools, nested `TStruct`s, `TList`s or `TMap`s. Encoding a decoded value gives back
the same bytes (field order and element types are kept), so a footer can be edited field by field and
written again without knowing the whole Parquet Thrift IDL.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

# compact-protocol type ids
T_STOP = 0
T_TRUE = 1
T_FALSE = 2
T_BYTE = 3
T_I16 = 4
T_I32 = 5
T_I64 = 6
T_DOUBLE = 7
T_BINARY = 8
T_LIST = 9
T_SET = 10
T_MAP = 11
T_STRUCT = 12


class ThriftError(ValueError):
    """The bytes are not valid Thrift compact protocol."""


@dataclass
class TList:
    elem_type: int
    items: list[Any] = field(default_factory=list)


@dataclass
class TMap:
    key_type: int
    value_type: int
    items: list[tuple[Any, Any]] = field(default_factory=list)


@dataclass
class TStruct:
    fields: list[tuple[int, int, Any]] = field(default_factory=list)

    def get(self, fid: int, default: Any = None) -> Any:
        for f, _, v in self.fields:
            if f == fid:
                return v
        return default

    def set(self, fid: int, ftype: int, value: Any) -> None:
        """Replace field `fid` (keeping its place) or insert it in field-id order."""
        for i, (f, _, _) in enumerate(self.fields):
            if f == fid:
                self.fields[i] = (fid, ftype, value)
                return
        pos = len(self.fields)
        for i, (f, _, _) in enumerate(self.fields):
            if f > fid:
                pos = i
                break
        self.fields.insert(pos, (fid, ftype, value))

    def remove(self, fid: int) -> None:
        self.fields = [x for x in self.fields if x[0] != fid]


class _Reader:
    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.data = memoryview(data)
        self.pos = pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ThriftError("unexpected end of data")
        b = self.data[self.pos]
        self.pos += 1
        return int(b)

    def varint(self) -> int:
        shift = 0
        out = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 70:
                raise ThriftError("varint too long")

    def zigzag(self) -> int:
        v = self.varint()
        return (v >> 1) ^ -(v & 1)

    def binary(self) -> bytes:
        n = self.varint()
        if self.pos + n > len(self.data):
            raise ThriftError("binary runs past the end of data")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def value(self, ttype: int) -> Any:
        if ttype in (T_TRUE, T_FALSE):  # only inside lists/maps: one byte
            return self.byte() == T_TRUE
        if ttype == T_BYTE:
            b = self.byte()
            return b - 256 if b >= 128 else b
        if ttype in (T_I16, T_I32, T_I64):
            return self.zigzag()
        if ttype == T_DOUBLE:
            if self.pos + 8 > len(self.data):
                raise ThriftError("double runs past the end of data")
            (d,) = struct.unpack_from("<d", self.data, self.pos)
            self.pos += 8
            return d
        if ttype == T_BINARY:
            return self.binary()
        if ttype in (T_LIST, T_SET):
            head = self.byte()
            size = head >> 4
            etype = head & 0x0F
            if size == 15:
                size = self.varint()
            return TList(etype, [self.value(etype) for _ in range(size)])
        if ttype == T_MAP:
            size = self.varint()
            if size == 0:
                return TMap(0, 0, [])
            kv = self.byte()
            kt, vt = kv >> 4, kv & 0x0F
            return TMap(kt, vt, [(self.value(kt), self.value(vt)) for _ in range(size)])
        if ttype == T_STRUCT:
            return self.struct()
        raise ThriftError(f"unknown compact type {ttype}")

    def struct(self) -> TStruct:
        out = TStruct()
        last = 0
        while True:
            head = self.byte()
            if head == T_STOP:
                return out
            ftype = head & 0x0F
            delta = head >> 4
            fid = last + delta if delta else self.zigzag()
            if ftype in (T_TRUE, T_FALSE):
                out.fields.append((fid, ftype, ftype == T_TRUE))
            else:
                out.fields.append((fid, ftype, self.value(ftype)))
            last = fid


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, v: int) -> None:
        while True:
            if v < 0x80:
                self.out.append(v)
                return
            self.out.append((v & 0x7F) | 0x80)
            v >>= 7

    def zigzag(self, v: int, bits: int) -> None:
        self.varint(((v << 1) ^ (v >> (bits - 1))) & ((1 << bits) - 1))

    def value(self, ttype: int, v: Any) -> None:
        if ttype in (T_TRUE, T_FALSE):
            self.out.append(T_TRUE if v else T_FALSE)
        elif ttype == T_BYTE:
            self.out.append(v & 0xFF)
        elif ttype == T_I16:
            self.zigzag(v, 16)
        elif ttype == T_I32:
            self.zigzag(v, 32)
        elif ttype == T_I64:
            self.zigzag(v, 64)
        elif ttype == T_DOUBLE:
            self.out += struct.pack("<d", v)
        elif ttype == T_BINARY:
            data = v.encode("utf-8") if isinstance(v, str) else bytes(v)
            self.varint(len(data))
            self.out += data
        elif ttype in (T_LIST, T_SET):
            n = len(v.items)
            if n < 15:
                self.out.append((n << 4) | v.elem_type)
            else:
                self.out.append(0xF0 | v.elem_type)
                self.varint(n)
            for item in v.items:
                self.value(v.elem_type, item)
        elif ttype == T_MAP:
            self.varint(len(v.items))
            if v.items:
                self.out.append((v.key_type << 4) | v.value_type)
                for k, val in v.items:
                    self.value(v.key_type, k)
                    self.value(v.value_type, val)
        elif ttype == T_STRUCT:
            self.struct(v)
        else:
            raise ThriftError(f"unknown compact type {ttype}")

    def struct(self, s: TStruct) -> None:
        last = 0
        for fid, ftype, v in s.fields:
            wire = (T_TRUE if v else T_FALSE) if ftype in (T_TRUE, T_FALSE) else ftype
            if 0 < fid - last <= 15:
                self.out.append(((fid - last) << 4) | wire)
            else:
                self.out.append(wire)
                self.zigzag(fid, 16)
            if ftype not in (T_TRUE, T_FALSE):
                self.value(ftype, v)
            last = fid
        self.out.append(T_STOP)


def decode_struct(data: bytes | memoryview) -> tuple[TStruct, int]:
    """Decode one struct from the start of `data`; returns it and the number of bytes it used."""
    r = _Reader(data)
    try:
        s = r.struct()
    except (IndexError, struct.error) as e:
        raise ThriftError(str(e)) from e
    return s, r.pos


def encode_struct(s: TStruct) -> bytes:
    w = _Writer()
    w.struct(s)
    return bytes(w.out)
