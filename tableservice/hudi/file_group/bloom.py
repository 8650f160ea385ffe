"""Hudi's record-key bloom filters, bit-for-bit compatible with Apache Hudi (Java).

Hudi writes one bloom filter per base file into the Parquet footer under `org.apache.hudi.bloomfilter`
(type in `hoodie_bloom_filter_type_code`; absent means SIMPLE; very old files use the key
`com.uber.hoodie.bloomfilter`). The value is the standard (padded, single-line) base64 of the bytes that
Java's `DataOutput` produces, all integers big-endian:

```
filter header   int32 -1 (version; a positive value is the old format: it is nbHash, hash = Jenkins)
                int32 nbHash, int8 hashType (0 Jenkins, 1 Murmur), int32 vectorSize
SIMPLE          header, then ceil(vectorSize / 8) bytes; bit i is bit (i % 8) of byte i // 8 (LSB first)
DYNAMIC_V0      header, int32 nr (= numEntries), int32 currentNbRecord, int32 rows, then each row as a
                SIMPLE filter (header + bytes)
```

Sizing (`BloomFilterUtils`): `vectorSize = ceil(numEntries * -ln(fpp) / ln(2)^2)`,
`nbHash = ceil(ln(2) * vectorSize / numEntries)`. Writers always use Murmur (`BloomFilterFactory`).
Defaults (`HoodieIndexConfig`): num_entries 60000, fpp 1e-9, type DYNAMIC_V0, dynamic max entries 100000.

A key is its UTF-8 bytes; the empty key is rejected (as Java's `HashFunction` does). Its positions are
`h_0 = hash(key, 0)`, `h_i = hash(key, h_{i-1})`, position `|h_i % vectorSize|` with Java's signed `%`.
Murmur is Hadoop's MurmurHash 2 port, whose tail bytes are *sign-extended* Java bytes.

DYNAMIC_V0 starts with one row; the first `nr` keys go to row 0, then a row is added each time the
current one holds `nr` keys while `rows * nr < maxEntries`; once that bound is reached, the key that hits
it goes to row 0 and later keys go round-robin over the rows starting at row 0. So the bytes depend on
the order in which keys were added (the order of the records in the file). `maxEntries`, the
"bound reached" flag and the round-robin index are not serialized: a deserialized filter that is added to
behaves as Java's does (bound 0).

Adding many keys hashes them in chunks of one byte length: in a compiled kernel (`bloom_kernel`, about 55 ms
for 500k keys into Hudi's default filter) or, without it, vectorised in numpy (about four times as long).
"""

from __future__ import annotations

import base64
import binascii
import enum
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from tableservice.errors import CorruptFileError
from tableservice.hudi.file_group.bloom_hash import (
    JENKINS_HASH,
    MURMUR_HASH,
    KeyInput,
    Packed,
    Pos,
    jenkins_hash,
    key_bytes,
    key_positions,
    key_slices,
    murmur_hash,
    positions_many,
    set_bits,
)

__all__ = [
    "BLOOM_FILTER_FOOTER_KEY",
    "BLOOM_FILTER_TYPE_CODE_FOOTER_KEY",
    "JENKINS_HASH",
    "MURMUR_HASH",
    "OLD_BLOOM_FILTER_FOOTER_KEY",
    "BloomFilter",
    "BloomFilterSettings",
    "BloomFilterTypeCode",
    "DynamicBloomFilter",
    "SimpleBloomFilter",
    "bit_size",
    "bloom_filter_from_string",
    "build_bloom_filter",
    "create_bloom_filter",
    "jenkins_hash",
    "key_positions",
    "murmur_hash",
    "num_hashes",
    "positions_many",
]

BLOOM_FILTER_FOOTER_KEY = "org.apache.hudi.bloomfilter"
OLD_BLOOM_FILTER_FOOTER_KEY = "com.uber.hoodie.bloomfilter"
BLOOM_FILTER_TYPE_CODE_FOOTER_KEY = "hoodie_bloom_filter_type_code"

DEFAULT_NUM_ENTRIES = 60000
DEFAULT_FPP = 0.000000001
DEFAULT_DYNAMIC_MAX_ENTRIES = 100000

_VERSION = -1

BoolArr = npt.NDArray[np.bool_]


class BloomFilterTypeCode(enum.Enum):
    """`BloomFilterTypeCode` in Hudi; the name is what the footer stores."""

    SIMPLE = "SIMPLE"
    DYNAMIC_V0 = "DYNAMIC_V0"

    @classmethod
    def parse(cls, name: str) -> BloomFilterTypeCode:
        """Case-insensitive, as Hudi's factory compares names."""
        for code in cls:
            if code.value.lower() == name.strip().lower():
                return code
        raise ValueError(f"bloom filter type code not recognizable: {name!r}")


def bit_size(num_entries: int, fpp: float) -> int:
    """Number of bits Hudi gives a filter for `num_entries` keys at false-positive rate `fpp`."""
    return math.ceil(num_entries * (-math.log(fpp) / (math.log(2) * math.log(2))))


def num_hashes(bits: int, num_entries: int) -> int:
    """Number of hash functions Hudi uses for a filter of `bits` bits sized for `num_entries` keys."""
    return math.ceil(math.log(2) * bits / num_entries)


# --- filters -----------------------------------------------------------------------------------------


class _Row:
    """One standard bloom filter (Hudi's `InternalBloomFilter`, Hadoop's `BloomFilter`); its bits packed as Hudi
    serializes them (bit p is bit p % 8 of byte p // 8)."""

    def __init__(self, vector_size: int, nb_hash: int, hash_type: int, bits: Packed | None = None) -> None:
        if vector_size <= 0 or nb_hash <= 0:
            raise ValueError(f"bloom filter needs vector size > 0 and hash count > 0, got {vector_size}, {nb_hash}")
        if hash_type not in (JENKINS_HASH, MURMUR_HASH):
            raise ValueError(f"unknown bloom filter hash type {hash_type}")
        self.vector_size = vector_size
        self.nb_hash = nb_hash
        self.hash_type = hash_type
        self.bits = bits if bits is not None else np.zeros((vector_size + 7) // 8, dtype=np.uint8)

    def bit(self, positions: Pos) -> BoolArr:
        """Whether each of `positions` (any shape) is set."""
        shifted: npt.NDArray[np.uint8] = self.bits[positions >> 3] >> (positions & 7).astype(np.uint8)
        return (shifted & 1).astype(np.bool_)

    def set_positions(self, positions: Pos) -> None:
        flat = positions.reshape(-1)
        np.bitwise_or.at(self.bits, flat >> 3, np.left_shift(1, flat & 7).astype(np.uint8))

    def test_positions(self, positions: Pos) -> BoolArr:
        return np.asarray(self.bit(positions).all(axis=1), dtype=np.bool_)

    def write(self, out: bytearray) -> None:
        out += _header(self.vector_size, self.nb_hash, self.hash_type)
        out += self.bits.tobytes()

    @classmethod
    def read(cls, buf: memoryview, pos: int) -> tuple[_Row, int]:
        vector_size, nb_hash, hash_type, pos = _read_header(buf, pos)
        nbytes = (vector_size + 7) // 8
        if pos + nbytes > len(buf):
            raise ValueError(f"bloom filter bit vector truncated: needs {nbytes} bytes, has {len(buf) - pos}")
        bits = np.frombuffer(buf[pos : pos + nbytes], dtype=np.uint8).copy()
        if vector_size % 8:
            bits[-1] &= (1 << (vector_size % 8)) - 1  # bits past the vector are not the filter's: none when written
        return cls(vector_size, nb_hash, hash_type, bits), pos + nbytes


def _header(vector_size: int, nb_hash: int, hash_type: int) -> bytes:
    return struct.pack(">iibi", _VERSION, nb_hash, hash_type, vector_size)


def _read_header(buf: memoryview, pos: int) -> tuple[int, int, int, int]:
    (ver,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    if ver > 0:
        nb_hash, hash_type = ver, JENKINS_HASH
    elif ver == _VERSION:
        nb_hash, hash_type = struct.unpack_from(">ib", buf, pos)
        pos += 5
    else:
        raise ValueError(f"unsupported bloom filter version {ver}")
    (vector_size,) = struct.unpack_from(">i", buf, pos)
    return vector_size, nb_hash, hash_type, pos + 4


class BloomFilter(Protocol):
    """What both filter kinds offer (Hudi's `BloomFilter` interface)."""

    @property
    def type_code(self) -> BloomFilterTypeCode: ...

    def add(self, key: str | bytes) -> None: ...

    def add_many(self, keys: KeyInput) -> None: ...

    def might_contain(self, key: str | bytes) -> bool: ...

    def might_contain_many(self, keys: KeyInput) -> BoolArr: ...

    def serialize(self) -> str: ...


def _utf8(key: str | bytes) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


class SimpleBloomFilter:
    """Hudi's SIMPLE filter: one bit vector."""

    type_code = BloomFilterTypeCode.SIMPLE

    def __init__(self, num_entries: int, fpp: float, hash_type: int = MURMUR_HASH) -> None:
        if num_entries <= 0 or not 0.0 < fpp < 1.0:
            raise ValueError(f"bloom filter needs num_entries > 0 and 0 < fpp < 1, got {num_entries}, {fpp}")
        bits = bit_size(num_entries, fpp)
        self._row = _Row(bits, num_hashes(bits, num_entries), hash_type)

    @classmethod
    def _from_row(cls, row: _Row) -> SimpleBloomFilter:
        self = cls.__new__(cls)
        self._row = row
        return self

    @property
    def vector_size(self) -> int:
        return self._row.vector_size

    @property
    def nb_hash(self) -> int:
        return self._row.nb_hash

    def add(self, key: str | bytes) -> None:
        r = self._row
        r.set_positions(np.array(key_positions(_utf8(key), r.nb_hash, r.vector_size, r.hash_type), np.uint32))

    def add_many(self, keys: KeyInput) -> None:
        r = self._row
        set_bits(*key_bytes(keys), r.nb_hash, r.vector_size, r.hash_type, [r.bits])

    def might_contain(self, key: str | bytes) -> bool:
        r = self._row
        pos = np.array(key_positions(_utf8(key), r.nb_hash, r.vector_size, r.hash_type), np.uint32)
        return bool(r.bit(pos).all())

    def might_contain_many(self, keys: KeyInput) -> BoolArr:
        r = self._row
        parts = [r.test_positions(positions_many(p, r.nb_hash, r.vector_size, r.hash_type)) for p in key_slices(keys)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.bool_)

    def serialize_bytes(self) -> bytes:
        out = bytearray()
        self._row.write(out)
        return bytes(out)

    def serialize(self) -> str:
        return base64.b64encode(self.serialize_bytes()).decode("ascii")


class DynamicBloomFilter:
    """Hudi's DYNAMIC_V0 filter (`HoodieDynamicBoundedBloomFilter`): rows of standard filters."""

    type_code = BloomFilterTypeCode.DYNAMIC_V0

    def __init__(self, num_entries: int, fpp: float, max_entries: int, hash_type: int = MURMUR_HASH) -> None:
        if num_entries <= 0 or not 0.0 < fpp < 1.0:
            raise ValueError(f"bloom filter needs num_entries > 0 and 0 < fpp < 1, got {num_entries}, {fpp}")
        bits = bit_size(num_entries, fpp)
        self.vector_size = bits
        self.nb_hash = num_hashes(bits, num_entries)
        self.hash_type = hash_type
        self.nr = num_entries
        self.max_entries = max_entries
        self.current_nb_record = 0
        self.rows = [_Row(self.vector_size, self.nb_hash, hash_type)]
        self._reached_max = False
        self._cur_index = 0

    def _new_row(self) -> _Row:
        return _Row(self.vector_size, self.nb_hash, self.hash_type)

    def _assign(self, n: int) -> npt.NDArray[np.int64]:
        """The row each of the next `n` keys goes to, advancing the state as Java's `add` does."""
        rows = np.empty(n, dtype=np.int64)
        i = 0
        while i < n:
            if self._reached_max:
                count = len(self.rows)
                rows[i:] = (self._cur_index + np.arange(n - i, dtype=np.int64)) % count
                self._cur_index += n - i
                self.current_nb_record += n - i
                break
            if self.current_nb_record >= self.nr:
                if len(self.rows) * self.nr < self.max_entries:
                    self.rows.append(self._new_row())
                    self.current_nb_record = 0
                else:
                    self._reached_max = True
                    rows[i] = 0
                    self.current_nb_record += 1
                    i += 1
                continue
            take = min(n - i, self.nr - self.current_nb_record)
            rows[i : i + take] = len(self.rows) - 1
            self.current_nb_record += take
            i += take
        return rows

    def add(self, key: str | bytes) -> None:
        pos = np.array([key_positions(_utf8(key), self.nb_hash, self.vector_size, self.hash_type)], np.uint32)
        self.rows[int(self._assign(1)[0])].set_positions(pos)

    def add_many(self, keys: KeyInput) -> None:
        data, offsets = key_bytes(keys)  # checks the keys before the rows' state advances
        targets = self._assign(len(offsets) - 1)
        set_bits(data, offsets, self.nb_hash, self.vector_size, self.hash_type, [r.bits for r in self.rows], targets)

    def might_contain(self, key: str | bytes) -> bool:
        pos = np.array(key_positions(_utf8(key), self.nb_hash, self.vector_size, self.hash_type), np.uint32)
        return any(bool(row.bit(pos).all()) for row in self.rows)

    def might_contain_many(self, keys: KeyInput) -> BoolArr:
        parts = []
        for part in key_slices(keys):
            positions = positions_many(part, self.nb_hash, self.vector_size, self.hash_type)
            found = np.zeros(positions.shape[0], dtype=np.bool_)
            for row in self.rows:
                found |= row.test_positions(positions)
            parts.append(found)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.bool_)

    def serialize_bytes(self) -> bytes:
        out = bytearray(_header(self.vector_size, self.nb_hash, self.hash_type))
        out += struct.pack(">iii", self.nr, self.current_nb_record, len(self.rows))
        for row in self.rows:
            row.write(out)
        return bytes(out)

    def serialize(self) -> str:
        return base64.b64encode(self.serialize_bytes()).decode("ascii")

    @classmethod
    def _read(cls, buf: memoryview) -> DynamicBloomFilter:
        self = cls.__new__(cls)
        self.vector_size, self.nb_hash, self.hash_type, pos = _read_header(buf, 0)
        self.nr, self.current_nb_record, count = struct.unpack_from(">iii", buf, pos)
        pos += 12
        if count < 0:
            raise ValueError(f"negative bloom filter row count {count}")
        self.rows = []
        for _ in range(count):
            row, pos = _Row.read(buf, pos)
            self.rows.append(row)
        self.max_entries = 0
        self._reached_max = False
        self._cur_index = 0
        return self


@dataclass(frozen=True)
class BloomFilterSettings:
    """Hudi's bloom filter configuration (`hoodie.index.bloom.num_entries`, `hoodie.index.bloom.fpp`,
    `hoodie.bloom.index.filter.type`, `hoodie.bloom.index.filter.dynamic.max.entries`) with its defaults."""

    num_entries: int = DEFAULT_NUM_ENTRIES
    fpp: float = DEFAULT_FPP
    type_code: BloomFilterTypeCode = BloomFilterTypeCode.DYNAMIC_V0
    dynamic_max_entries: int = DEFAULT_DYNAMIC_MAX_ENTRIES

    def to_fields(self) -> dict[str, Any]:
        """The settings as JSON-able fields (what a task carries)."""
        return {
            "num_entries": self.num_entries,
            "fpp": self.fpp,
            "type_code": self.type_code.value,
            "dynamic_max_entries": self.dynamic_max_entries,
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any] | None) -> BloomFilterSettings | None:
        """The settings `to_fields` gave; None (no bloom filter) for None."""
        if fields is None:
            return None
        return cls(
            num_entries=int(fields["num_entries"]),
            fpp=float(fields["fpp"]),
            type_code=BloomFilterTypeCode.parse(str(fields["type_code"])),
            dynamic_max_entries=int(fields["dynamic_max_entries"]),
        )


def default_bloom() -> dict[str, Any]:
    """Hudi's default filter settings as a task carries them (`BloomFilterSettings.to_fields`)."""
    return BloomFilterSettings().to_fields()


def create_bloom_filter(
    num_entries: int = DEFAULT_NUM_ENTRIES,
    fpp: float = DEFAULT_FPP,
    max_entries: int = DEFAULT_DYNAMIC_MAX_ENTRIES,
    type_code: BloomFilterTypeCode | str = BloomFilterTypeCode.DYNAMIC_V0,
) -> SimpleBloomFilter | DynamicBloomFilter:
    """A new empty filter as Hudi's `BloomFilterFactory.createBloomFilter` makes it (Murmur hashing)."""
    code = type_code if isinstance(type_code, BloomFilterTypeCode) else BloomFilterTypeCode.parse(type_code)
    if code is BloomFilterTypeCode.SIMPLE:
        return SimpleBloomFilter(num_entries, fpp)
    return DynamicBloomFilter(num_entries, fpp, max_entries)


def bloom_filter_from_string(
    serialized: str, type_code: BloomFilterTypeCode | str | None = None, *, path: str | None = None
) -> SimpleBloomFilter | DynamicBloomFilter:
    """Decode a footer value; `type_code` None means SIMPLE (a footer without a type code)."""
    code = (
        BloomFilterTypeCode.SIMPLE
        if type_code is None
        else (type_code if isinstance(type_code, BloomFilterTypeCode) else BloomFilterTypeCode.parse(type_code))
    )
    try:
        raw = memoryview(base64.b64decode(serialized.encode("ascii"), validate=True))
        if code is BloomFilterTypeCode.SIMPLE:
            row, _ = _Row.read(raw, 0)
            result: SimpleBloomFilter | DynamicBloomFilter = SimpleBloomFilter._from_row(row)
        else:
            result = DynamicBloomFilter._read(raw)
    except (ValueError, struct.error, binascii.Error, UnicodeEncodeError) as e:
        raise CorruptFileError(f"cannot decode {code.value} bloom filter: {e}", path=path) from e
    return result


def build_bloom_filter(
    keys: Iterable[KeyInput],
    num_entries: int = DEFAULT_NUM_ENTRIES,
    fpp: float = DEFAULT_FPP,
    max_entries: int = DEFAULT_DYNAMIC_MAX_ENTRIES,
    type_code: BloomFilterTypeCode | str = BloomFilterTypeCode.DYNAMIC_V0,
) -> SimpleBloomFilter | DynamicBloomFilter:
    """A filter holding every key of every batch in `keys`, added in order."""
    bf = create_bloom_filter(num_entries, fpp, max_entries, type_code)
    for batch in keys:
        bf.add_many(batch)
    return bf
