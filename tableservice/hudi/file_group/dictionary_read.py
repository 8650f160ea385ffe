"""Reading a group's low-cardinality string columns as Arrow dictionaries (a rewrite's fast path).

A rewrite that reads many base files and writes them again (clustering) spends much of its time on string
columns that hold a handful of values (`_hoodie_commit_time`, `_hoodie_partition_path`, a city, a status):
Parquet stores them dictionary-encoded, the reader expands every row into its string bytes, the gather copies
those bytes, and the writer hashes every string again to rebuild the dictionary. Read as Arrow dictionaries,
each stage handles small integer indices instead; Arrow's Parquet writer writes a dictionary array as a
dictionary-encoded chunk with statistics over the values the rows use. The files written hold the same values,
types (the Parquet schema of a dictionary column is its value type's) and statistics.

`DictionaryColumns` makes one choice per group, from the first base file read: the candidate columns whose
chunks are dictionary-encoded and take at most `LOW_CARDINALITY_BYTES_PER_ROW` uncompressed bytes per row
(a dictionary of a few values, indices of a few bits). Every later file of the group reads the same columns as
dictionaries, whatever its encoding (Arrow builds the dictionary then), so the group's tables share one schema.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

LOW_CARDINALITY_BYTES_PER_ROW = 1.0
DICTIONARY_INDEX = pa.int32()


def is_dictionary_candidate(field: pa.Field) -> bool:
    """A top-level string or binary column (what a Parquet dictionary of a few values pays off for)."""
    return bool(pa.types.is_string(field.type) or pa.types.is_binary(field.type))


def dictionary_type(value_type: pa.DataType) -> pa.DataType:
    return pa.dictionary(DICTIONARY_INDEX, value_type)


def with_dictionaries(schema: pa.Schema, columns: Collection[str]) -> pa.Schema:
    """The schema with `columns` (those it has, candidates only) as dictionaries of their value type."""
    if not columns:
        return schema
    fields = [
        f.with_type(dictionary_type(f.type)) if f.name in columns and is_dictionary_candidate(f) else f for f in schema
    ]
    return pa.schema(fields, metadata=schema.metadata)


def low_cardinality_columns(metadata: pq.FileMetaData, candidates: Iterable[str]) -> tuple[str, ...]:
    """The candidate columns a file stores dictionary-encoded in every row group, at most
    `LOW_CARDINALITY_BYTES_PER_ROW` uncompressed bytes per row (top-level leaves only)."""
    wanted = set(candidates)
    if metadata.num_rows <= 0 or not wanted:
        return ()
    schema = metadata.schema
    leaves = {schema.column(i).path: i for i in range(len(schema)) if schema.column(i).path in wanted}
    chosen = []
    for name, index in leaves.items():
        total = 0
        encoded = True
        for g in range(metadata.num_row_groups):
            chunk = metadata.row_group(g).column(index)
            encoded = encoded and chunk.has_dictionary_page
            total += chunk.total_uncompressed_size
        if encoded and total <= LOW_CARDINALITY_BYTES_PER_ROW * metadata.num_rows:
            chosen.append(name)
    return tuple(n for n in candidates if n in chosen)


class DictionaryColumns:
    """The columns one group reads as dictionaries: chosen from its first base file (`choose`), then fixed."""

    def __init__(self, candidates: Iterable[str]) -> None:
        self.candidates = tuple(candidates)
        self.chosen: tuple[str, ...] | None = None
        self._schemas: tuple[pa.Schema, pa.Schema] | None = None  # the last read schema and its version

    @property
    def names(self) -> tuple[str, ...]:
        """The chosen columns (none before the choice)."""
        return self.chosen or ()

    def choose(self, metadata: pq.FileMetaData) -> tuple[str, ...]:
        if self.chosen is None:
            self.chosen = low_cardinality_columns(metadata, self.candidates)
        return self.chosen

    def schema(self, schema: pa.Schema) -> pa.Schema:
        """`schema` with the chosen columns as dictionaries (unchanged before the choice)."""
        if self.chosen is None:
            return schema
        if self._schemas is None or self._schemas[0] is not schema:
            self._schemas = (schema, with_dictionaries(schema, self.chosen))
        return self._schemas[1]
