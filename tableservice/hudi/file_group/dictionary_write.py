"""Which columns a base file writes dictionary-encoded: the test Hudi's own Parquet writer applies.

parquet-mr (the writer inside Hudi's Spark and Flink jobs) starts every column chunk with a dictionary and judges
it once, when the chunk's first page is complete (pages end at `hoodie.parquet.page.size`, counted in the values'
plain bytes): when the dictionary's indices plus its entries take no fewer bytes than the page's values written
plain, the chunk falls back to PLAIN (that first page is re-encoded, no dictionary page is written). Arrow's writer
has no such test: it hashes every value into the dictionary until the dictionary outgrows its page limit, then
writes the rest plain behind a dictionary page. For a column of mostly distinct values (record keys, sequence
numbers, UUIDs, event times) that is a page limit's worth of hashing, a dictionary page nobody needs, and a larger
file.

`plain_columns` applies parquet-mr's test to the first page of each top-level column of the first rows a writer
writes, and the writer leaves the columns that fail it out of dictionary encoding for the whole file (parquet-mr
judges each row group's chunk again; a writer here makes one choice per file). The page's distinct values are
counted by linear counting: each value's bytes hashed once (Murmur, the bloom filter's kernel) into a bit vector
of twice the page's values, the distinct count read from the share of bits left clear. That is within a few
percent of the exact count, enough to decide, and several times cheaper than hashing the values into a table
(which is the cost being avoided). Near the boundary (dictionary and plain within a few percent of each other) the
two encodings cost about the same, whichever is chosen.

Columns never judged (they keep the writer's dictionary setting): Arrow dictionary columns (chosen as low
cardinality, written from their dictionary), booleans (Parquet does not dictionary-encode them), nested columns,
and types without a fixed plain width other than strings and binaries.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tableservice.hudi.file_group.bloom_hash import MURMUR_HASH, set_bits

_MIN_BITS = 1 << 10
SAMPLE_VALUES = 1 << 16  # values judged at most: a page of short values holds more


def plain_width(type_: pa.DataType) -> int | None:
    """Bytes a value of this type takes written PLAIN (Parquet's physical type as Arrow's writer maps it: small
    integers widen to INT32, decimals are FIXED_LEN_BYTE_ARRAY of the fewest bytes their precision needs); None
    for types this module does not judge. Strings and binaries: 0 (their width varies)."""
    if pa.types.is_string(type_) or pa.types.is_binary(type_):
        return 0
    if pa.types.is_large_string(type_) or pa.types.is_large_binary(type_):
        return 0
    if pa.types.is_decimal(type_):
        digits: int = 10 ** int(type_.precision) - 1
        return max(1, math.ceil((digits.bit_length() + 1) / 8))
    if pa.types.is_fixed_size_binary(type_):
        return int(type_.byte_width)
    if pa.types.is_uint32(type_):
        return 8  # INT64 in Parquet format 1.0
    if pa.types.is_integer(type_) or pa.types.is_date32(type_) or pa.types.is_time32(type_):
        return max(4, int(type_.bit_width) // 8)
    if pa.types.is_float32(type_):
        return 4
    if (
        pa.types.is_float64(type_)
        or pa.types.is_timestamp(type_)
        or pa.types.is_date64(type_)
        or pa.types.is_time64(type_)
        or pa.types.is_duration(type_)
    ):
        return 8
    return None


def _variable_values(values: pa.Array) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """A string or binary array's values (no nulls) as bytes and offsets."""
    large = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64 if large else np.int32)
    offsets = offsets[values.offset : values.offset + len(values) + 1]
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return data, offsets.astype(np.int64)


_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0xBF58476D1CE4E5B9)


def _word_hashes(values: pa.Array) -> npt.NDArray[np.uint64] | None:
    """64-bit hashes of a fixed-width array's values (no nulls) whose width is 1, 2, 4 or a multiple of 8 bytes
    (the words of a wider value folded together), mixed so that their top bits are uniform; else None."""
    width = values.type.byte_width
    raw = values.buffers()[1]
    if width in _WORDS:
        words = np.frombuffer(raw, dtype=_WORDS[width])[values.offset : values.offset + len(values)]
        h = words.astype(np.uint64)
    elif width % 8 == 0:
        per = width // 8
        words = np.frombuffer(raw, dtype=np.uint64)[values.offset * per : (values.offset + len(values)) * per]
        words = words.reshape(len(values), per)
        h = words[:, 0].copy()
        for i in range(1, per):
            h = (h * _GOLDEN) ^ words[:, i]
    else:
        return None
    h = h * _GOLDEN
    h ^= h >> np.uint64(29)
    h *= _MIX
    h ^= h >> np.uint64(32)
    return h


def _bits_for(n: int) -> int:
    """Bit vector size for linear counting of n values: a power of two from n/2 to n (at least `_MIN_BITS`): at a
    load of 1-2 values a bit the estimate's standard error is under 1% for a page's values, and the vector stays
    small enough for the cache."""
    return max(_MIN_BITS, 1 << max(0, (n - 1).bit_length() - 1))


def _linear_count(bits: int, clear: int, n: int) -> float:
    return float(n) if clear == 0 else min(float(n), -bits * math.log(clear / bits))


def distinct_estimate(values: pa.Array) -> float:
    """About how many distinct values a null-free array of a judged type holds: linear counting of their hashes in
    a bit vector (`_bits_for`), never more than there are values."""
    n = len(values)
    if n == 0:
        return 0.0
    bits = _bits_for(n)
    extra = 0.0
    if plain_width(values.type) != 0:
        hashes = _word_hashes(values)
        if hashes is not None:
            seen = np.zeros(bits, dtype=np.bool_)
            seen[hashes >> np.uint64(64 - (bits.bit_length() - 1))] = True
            return _linear_count(bits, bits - int(np.count_nonzero(seen)), n)
        width = values.type.byte_width  # other fixed widths: hashed as byte strings
        data = np.frombuffer(values.buffers()[1], dtype=np.uint8)[values.offset * width : (values.offset + n) * width]
        offsets = np.arange(n + 1, dtype=np.int64) * width
    else:
        lengths = pc.binary_length(values)
        if pc.min(lengths).as_py() == 0:  # the hash takes no empty value: the empty value counts once
            extra = 1.0
            values = values.filter(pc.not_equal(lengths, 0))
            n = len(values)
            if n == 0:
                return extra
        data, offsets = _variable_values(values)
    row = np.zeros(bits // 8, dtype=np.uint8)
    set_bits(data, offsets, 1, bits, MURMUR_HASH, [row])
    return _linear_count(bits, bits - int(np.unpackbits(row).sum()), n) + extra


def _first_page(column: pa.Array | pa.ChunkedArray, width: int, page_bytes: int) -> tuple[pa.Array, int]:
    """The non-null values of the column's first page (values until their plain bytes reach `page_bytes`, at most
    `SAMPLE_VALUES` of them) and their plain bytes."""
    limit = SAMPLE_VALUES if not width else min(SAMPLE_VALUES, -(-page_bytes // width))
    rows = limit
    while True:
        head = column.slice(0, rows)
        if isinstance(head, pa.ChunkedArray):
            head = head.combine_chunks()
        values = head.drop_null() if head.null_count else head
        if len(values) >= limit or rows >= len(column):
            break
        rows *= 2  # nulls took some of the rows: look further
    values = values.slice(0, limit)
    if width:
        return values, len(values) * width
    _, offsets = _variable_values(values)
    plain = 4 * np.arange(1, len(values) + 1, dtype=np.int64) + (offsets[1:] - offsets[0])
    count = min(len(values), int(np.searchsorted(plain, page_bytes, side="left")) + 1)
    return values.slice(0, count), int(plain[count - 1]) if count else 0


def dictionary_pays(column: pa.Array | pa.ChunkedArray, page_bytes: int) -> bool:
    """parquet-mr's test on the column's first page: its dictionary's entries plus its values' bit-packed indices
    take fewer bytes than the values written plain. True for types this module does not judge."""
    width = plain_width(column.type)
    if width is None or len(column) == column.null_count:
        return True
    values, raw = _first_page(column, width, page_bytes)
    n = len(values)
    if n < 2 or raw <= 0:
        return True
    distinct = max(1.0, distinct_estimate(values))
    index_bits = max(1, math.ceil(math.log2(distinct)))
    dictionary_bytes = distinct * raw / n  # the entries, at the page's mean plain width
    return dictionary_bytes + n * index_bits / 8 < raw


def plain_columns(table: pa.Table | pa.RecordBatch, page_bytes: int, skip: Collection[str] = ()) -> tuple[str, ...]:
    """The top-level columns whose first page fails parquet-mr's dictionary test (in schema order); `skip`:
    columns not judged."""
    out = []
    for i, field in enumerate(table.schema):
        if field.name in skip or plain_width(field.type) is None:
            continue
        if not dictionary_pays(table.column(i), page_bytes):
            out.append(field.name)
    return tuple(out)


def _leaf_count(type_: pa.DataType) -> int:
    """Parquet leaf columns an Arrow type becomes."""
    if pa.types.is_struct(type_):
        return sum(_leaf_count(type_.field(i).type) for i in range(type_.num_fields))
    if pa.types.is_map(type_):
        return _leaf_count(type_.key_type) + _leaf_count(type_.item_type)
    if pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_fixed_size_list(type_):
        return _leaf_count(type_.value_type)
    if pa.types.is_dictionary(type_):
        return _leaf_count(type_.value_type)
    return 1


def dictionary_setting(schema: pa.Schema, leaf_paths: Sequence[str], plain: Sequence[str]) -> bool | list[str]:
    """pyarrow's `use_dictionary` for a file whose `plain` top-level columns are written without a dictionary:
    True when there are none, else the Parquet leaf paths (`leaf_paths`, in the file's column order) of every other
    column."""
    if not plain:
        return True
    skip = set(plain)
    paths = iter(leaf_paths)
    wanted = []
    for field in schema:
        leaves = [next(paths) for _ in range(_leaf_count(field.type))]
        if field.name not in skip:
            wanted.extend(leaves)
    return wanted


@functools.lru_cache(maxsize=64)
def leaf_paths(schema: pa.Schema) -> tuple[str, ...]:
    """The Parquet leaf column paths (dotted, as pyarrow's per-column settings name them) a schema is written as,
    in column order: the top-level names for a flat schema; for nested columns, what Arrow's writer makes of them
    (read from an empty file written with the base file writer's nesting convention)."""
    if all(_leaf_count(f.type) == 1 and not pa.types.is_nested(f.type) for f in schema):
        return tuple(schema.names)
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink, use_compliant_nested_type=True, store_schema=False)
    metadata = pq.read_metadata(pa.BufferReader(sink.getvalue()))
    return tuple(metadata.schema.column(i).path for i in range(metadata.num_columns))
