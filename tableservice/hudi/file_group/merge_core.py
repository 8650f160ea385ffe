"""Vectorised kernels behind `merge` (this folder): schema alignment, key grouping, ordering ranks, winner
selection and the pairwise merge of aligned older / newer versions.

Rows being merged carry two internal columns beside the data columns:
- `FLAGS` (int8): `F_DELETE` the version is a delete; `F_BLOCK` it came from a delete block; `F_CTD` it is a
  "commit-time-ordering delete" (a delete whose ordering value is null or the `Integer` 0, Hudi's default
  ordering value) which wins whenever it is the later version, whatever the ordering values.
- `PRESENT` (int32): id of the set of columns the version carries (`PresentSets`); 0 = all columns. Only partial
  log blocks (`IS_PARTIAL` header) produce other ids.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tableservice.errors import UnsupportedTableError
from tableservice.hudi.file_group.merge_config import MergeConfig, MergeMode, PartialUpdateMode, RecordMerger

RECORD_KEY = "_hoodie_record_key"
IS_DELETED = "_hoodie_is_deleted"
OPERATION = "_hoodie_operation"
FLAGS = "__hudi_merge_flags"
PRESENT = "__hudi_merge_present"
INTERNAL = (FLAGS, PRESENT)
F_DELETE = 1
F_BLOCK = 2
F_CTD = 4

Column: TypeAlias = pa.Array | pa.ChunkedArray
IntArray: TypeAlias = npt.NDArray[np.int64]
BoolArray: TypeAlias = npt.NDArray[np.bool_]


def combined(column: Column) -> pa.Array:
    """One array of a column's chunks; strings and binaries with 64-bit offsets when their bytes pass 32-bit ones
    (more than 2 GiB of values: combining them as they are would fail)."""
    if not isinstance(column, pa.ChunkedArray):
        return column
    if column.nbytes >= 1 << 31:
        if pa.types.is_string(column.type):
            column = column.cast(pa.large_string())
        elif pa.types.is_binary(column.type):
            column = column.cast(pa.large_binary())
    return column.combine_chunks()


def to_table(data: pa.Table | pa.RecordBatch) -> pa.Table:
    return data if isinstance(data, pa.Table) else pa.Table.from_batches([data])


def to_numpy_bool(values: Column) -> BoolArray:
    """A boolean Arrow column as numpy, null counting as false."""
    filled = pc.fill_null(values, False)
    if isinstance(filled, pa.ChunkedArray):
        filled = filled.combine_chunks() if filled.num_chunks != 1 else filled.chunk(0)
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.bool_)


def to_numpy_int(values: Column, null: int = -1) -> IntArray:
    filled = pc.fill_null(values, null)
    if isinstance(filled, pa.ChunkedArray):
        filled = filled.combine_chunks() if filled.num_chunks != 1 else filled.chunk(0)
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.int64)


def nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in schema], metadata=schema.metadata)


def data_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` without the internal columns."""
    return pa.schema([f for f in schema if f.name not in INTERNAL], metadata=schema.metadata)


def unify(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """The union of `schemas` by field name (first-seen order), types promoted where Arrow allows it."""
    try:
        return nullable(pa.unify_schemas(list(schemas), promote_options="permissive"))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise UnsupportedTableError(f"log and base schemas cannot be reconciled: {exc}") from exc


def align(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with exactly the columns of `schema`, in its order and types: missing columns null, extra dropped."""
    names = set(table.column_names)
    columns: list[Column] = []
    for field in schema:
        if field.name not in names:
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        if column.type != field.type:
            try:
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise UnsupportedTableError(
                    f"column {field.name!r} of type {column.type} cannot be read as {field.type}: {exc}"
                ) from exc
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def with_internal(table: pa.Table, flags: npt.NDArray[np.int8], present: npt.NDArray[np.int32]) -> pa.Table:
    return table.append_column(FLAGS, pa.array(flags, pa.int8())).append_column(PRESENT, pa.array(present, pa.int32()))


def flags_of(table: pa.Table) -> npt.NDArray[np.int8]:
    return np.asarray(to_numpy_int(table.column(FLAGS), 0), dtype=np.int8)


def present_of(table: pa.Table) -> npt.NDArray[np.int32]:
    return np.asarray(to_numpy_int(table.column(PRESENT), 0), dtype=np.int32)


def ordering_columns(table: pa.Table, fields: Sequence[str]) -> list[Column]:
    """The ordering columns of `table` (a missing field reads as all-null)."""
    names = set(table.column_names)
    return [table.column(f) if f in names else pa.nulls(table.num_rows, pa.null()) for f in fields]


_JAVA_INTEGER_TYPES = (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16())


def is_default_value(column: Column) -> BoolArray:
    """Values equal to Hudi's default ordering value: null, or 0 of a type Java reads as an `Integer` (Hudi
    compares with `Integer.valueOf(0).equals(value)`, so a `long` 0 is an ordinary value)."""
    if pa.types.is_null(column.type):
        return np.ones(len(column), dtype=np.bool_)
    default = ~to_numpy_bool(pc.is_valid(column))
    if column.type in _JAVA_INTEGER_TYPES:
        default |= to_numpy_bool(pc.equal(column, 0))
    return default


def commit_time_deletes(table: pa.Table, fields: Sequence[str]) -> BoolArray:
    """Rows of `table` that, if deletes, are commit-time-ordering deletes: no ordering field, or one ordering
    field holding the default value. (With several fields the ordering value is a tuple, never the default.)"""
    if not fields:
        return np.ones(table.num_rows, dtype=np.bool_)
    if len(fields) > 1:
        return np.zeros(table.num_rows, dtype=np.bool_)
    return is_default_value(ordering_columns(table, fields)[0])


def dense_rank(columns: Sequence[Column]) -> IntArray:
    """Dense rank of the rows' ordering tuples (lexicographic), nulls lowest (0), values from 1."""
    if not columns:
        return np.zeros(0, dtype=np.int64)
    ranks: list[IntArray] = []
    for column in columns:
        if pa.types.is_null(column.type):
            ranks.append(np.zeros(len(column), dtype=np.int64))
            continue
        array = combined(column)
        if pa.types.is_dictionary(array.type):
            array = array.cast(array.type.value_type)
        try:
            rank = np.asarray(pc.rank(array, sort_keys="ascending", tiebreaker="dense"), dtype=np.int64)
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise UnsupportedTableError(f"ordering values of type {array.type} cannot be compared") from exc
        valid = to_numpy_bool(pc.is_valid(array))
        ranks.append(np.where(valid, rank, 0))
    if len(ranks) == 1:
        return ranks[0]
    order = np.lexsort(tuple(reversed(ranks)))
    stacked = np.stack([r[order] for r in ranks])
    changed = np.any(stacked[:, 1:] != stacked[:, :-1], axis=0)
    dense = np.empty(len(order), dtype=np.int64)
    dense[order] = np.concatenate(([0], np.cumsum(changed)))
    return dense


_INT64_MIN = np.iinfo(np.int64).min


def _integer_keys(column: Column) -> IntArray | None:
    """The values of one integer-like column (integers but uint64, dates, times, timestamps, durations) as int64
    in their own order, nulls lowest; None for other types, or when a value is the int64 minimum (the null key)."""
    t = column.type
    if pa.types.is_integer(t) and t != pa.uint64():
        view: Column = column.cast(pa.int64())
    elif pa.types.is_date32(t) or pa.types.is_time32(t):
        view = column.view(pa.int32()).cast(pa.int64())
    elif pa.types.is_date64(t) or pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_duration(t):
        view = column.view(pa.int64())
    else:
        return None
    values = to_numpy_int(view, _INT64_MIN)
    if int(np.count_nonzero(values == _INT64_MIN)) != column.null_count:
        return None
    return values


def order_keys(columns: Sequence[Column]) -> IntArray:
    """int64 keys that order the rows as their ordering tuples do (nulls lowest); equal tuples get equal keys.
    Unlike `dense_rank`, keys are not consecutive: one integer-like column gives its own values, unsorted."""
    if len(columns) == 1:
        keys = _integer_keys(columns[0])
        if keys is not None:
            return keys
    return dense_rank(columns)


def joint_rank(a: pa.Table, b: pa.Table, fields: Sequence[str]) -> tuple[IntArray, IntArray]:
    """Comparable ordering keys (`order_keys`) of the rows of `a` and of `b` (same ordering field types)."""
    if not fields:
        return np.zeros(a.num_rows, dtype=np.int64), np.zeros(b.num_rows, dtype=np.int64)
    columns: list[Column] = []
    for ca, cb in zip(ordering_columns(a, fields), ordering_columns(b, fields), strict=True):
        if ca.type != cb.type:
            if pa.types.is_null(ca.type):
                ca = pa.nulls(len(ca), cb.type)
            elif pa.types.is_null(cb.type):
                cb = pa.nulls(len(cb), ca.type)
            else:
                cb = cb.cast(ca.type)
        columns.append(pa.chunked_array([*_chunks(ca), *_chunks(cb)], type=ca.type))
    rank = order_keys(columns)
    return rank[: a.num_rows], rank[a.num_rows :]


def _chunks(column: Column) -> list[pa.Array]:
    return list(column.chunks) if isinstance(column, pa.ChunkedArray) else [column]


class KeyGroups:
    """Rows grouped by record key, each group in row order: `order[starts[g]:ends[g]]` are group g's rows."""

    def __init__(self, keys: Column) -> None:
        array = combined(keys)
        if pa.types.is_string(array.type):
            array = array.cast(pa.binary())  # hashing binary skips UTF-8 handling: same groups, faster
        codes = pc.dictionary_encode(array).indices.to_numpy(zero_copy_only=False)
        # A stable sort of the codes (int32): Arrow's is a counting sort for a dense small range as these are.
        self.order: IntArray = np.asarray(pc.sort_indices(codes), dtype=np.int64)
        sorted_codes = codes[self.order]
        n = len(codes)
        boundary = np.ones(n, dtype=np.bool_)
        boundary[1:] = sorted_codes[1:] != sorted_codes[:-1]
        self.starts: IntArray = np.flatnonzero(boundary).astype(np.int64)
        self.ends: IntArray = np.append(self.starts[1:], n).astype(np.int64)
        self._n = n

    @functools.cached_property
    def group(self) -> IntArray:
        """The group of each position of `order`."""
        return np.repeat(np.arange(len(self.starts), dtype=np.int64), self.ends - self.starts)

    @functools.cached_property
    def occurrence(self) -> IntArray:
        """The rank of each position of `order` within its group (0 for the first row of a key)."""
        return np.arange(self._n, dtype=np.int64) - self.starts[self.group]


def winners(groups: KeyGroups, flags: npt.NDArray[np.int8], rank: IntArray, mode: MergeMode) -> IntArray:
    """Row index of the surviving version of each key group when the rows are folded in row order.

    COMMIT_TIME_ORDERING: the last row. EVENT_TIME_ORDERING (Hudi's `EventTimeRecordMerger.deltaMerge`): the
    last commit-time delete resets the fold; block deletes right after it are dropped (the buffered delete
    stays), and from the first data row after it (or from the start when there is none) the row with the
    highest ordering value wins, ties going to the later row.
    """
    o = groups.order
    if mode is MergeMode.COMMIT_TIME_ORDERING or len(o) == 0:
        return o[groups.ends - 1]
    n = len(o)
    pos = np.arange(n, dtype=np.int64)
    f = flags[o]
    ctd = (f & F_CTD) != 0
    block = ((f & F_BLOCK) != 0) & ~ctd
    last_ctd = np.maximum.reduceat(np.where(ctd, pos, -1), groups.starts)
    g = groups.group
    has_ctd = last_ctd >= 0
    first_data = np.minimum.reduceat(np.where((pos > last_ctd[g]) & ~block, pos, n), groups.starts)
    candidate = np.where(has_ctd[g], pos >= first_data[g], True)
    # The highest key among the candidates, then the last candidate holding it (keys need not be dense).
    keys = rank[o]
    top_key = np.maximum.reduceat(np.where(candidate, keys, _INT64_MIN), groups.starts)
    best = np.maximum.reduceat(np.where(candidate & (keys == top_key[g]), pos, -1), groups.starts)
    return o[np.where(best >= 0, best, last_ctd)]


class PresentSets:
    """Interned sets of column names carried by partial versions; id 0 means "all columns"."""

    def __init__(self) -> None:
        self._sets: list[frozenset[str] | None] = [None]
        self._ids: dict[frozenset[str], int] = {}

    def intern(self, names: frozenset[str] | None) -> int:
        if names is None:
            return 0
        if names not in self._ids:
            self._ids[names] = len(self._sets)
            self._sets.append(names)
        return self._ids[names]

    def union(self, a: npt.NDArray[np.int32], b: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
        result = np.zeros(len(a), dtype=np.int32)
        both = (a != 0) & (b != 0)
        if both.any():
            pairs = np.unique(np.stack([a[both], b[both]], axis=1), axis=0)
            for x, y in pairs:
                sx, sy = self._sets[int(x)], self._sets[int(y)]
                assert sx is not None and sy is not None
                result[both & (a == x) & (b == y)] = self.intern(sx | sy)
        return result

    def missing(self, ids: npt.NDArray[np.int32], column: str) -> BoolArray:
        """Rows whose version does not carry `column`."""
        lookup = np.array([s is not None and column not in s for s in self._sets], dtype=np.bool_)
        return lookup[ids]


def _pick(first: Column, second: Column, take_second: BoolArray) -> Column:
    """Row i of `second` where `take_second[i]`, else row i of `first` (any type)."""
    n = len(take_second)
    both = pa.concat_arrays([*_chunks(first), *_chunks(second)])
    return both.take(pa.array(np.where(take_second, np.arange(n) + n, np.arange(n))))


def pairwise(
    older: pa.Table,
    newer: pa.Table,
    config: MergeConfig,
    present_sets: PresentSets,
    merger: RecordMerger | None,
) -> pa.Table:
    """Merge row i of `newer` into row i of `older` (same key, same schema incl. internal columns)."""
    n = older.num_rows
    fo, fn = flags_of(older), flags_of(newer)
    po, pn = present_of(older), present_of(newer)
    if config.mode is MergeMode.CUSTOM:
        assert merger is not None
        return _custom(older, newer, config, present_sets, merger)
    if config.mode is MergeMode.COMMIT_TIME_ORDERING:
        newer_wins = np.ones(n, dtype=np.bool_)
    else:
        ro, rn = joint_rank(older, newer, config.ordering_fields)
        newer_wins = rn >= ro
        older_ctd = (fo & F_CTD) != 0
        newer_block = ((fn & F_BLOCK) != 0) & ((fn & F_CTD) == 0)
        newer_wins = np.where(older_ctd, ~newer_block, newer_wins)
        newer_wins |= (fn & F_CTD) != 0
    idx = np.where(newer_wins, np.arange(n), np.arange(n) + n)
    both = pa.concat_tables([newer, older]).combine_chunks()
    winner = both.take(pa.array(idx))
    no_fill = ((fo | fn) & F_DELETE) != 0
    winner_present = np.where(newer_wins, pn, po)
    needs_keep = bool((winner_present[~no_fill] != 0).any())
    if not needs_keep and config.partial_update_mode in (PartialUpdateMode.NONE, PartialUpdateMode.KEEP_VALUES):
        return winner
    loser = both.take(pa.array(np.where(newer_wins, np.arange(n) + n, np.arange(n))))
    columns: list[Column] = []
    for field in winner.schema:
        column = winner.column(field.name)
        if field.name in INTERNAL or field.name == RECORD_KEY:
            columns.append(column)
            continue
        fill = np.zeros(n, dtype=np.bool_)
        if needs_keep:
            fill |= present_sets.missing(winner_present, field.name)
        if not field.name.startswith("_hoodie_"):
            if config.partial_update_mode is PartialUpdateMode.IGNORE_DEFAULTS:
                fill |= ~to_numpy_bool(pc.is_valid(column))
            elif config.partial_update_mode is PartialUpdateMode.FILL_UNAVAILABLE and _is_text(field.type):
                fill |= to_numpy_bool(pc.equal(column, _marker(config.unavailable_marker or "", field.type)))
        fill &= ~no_fill
        columns.append(_pick(column, loser.column(field.name), fill) if fill.any() else column)
    merged = pa.Table.from_arrays(columns, schema=winner.schema)
    if needs_keep:
        merged = merged.set_column(
            merged.schema.get_field_index(PRESENT),
            PRESENT,
            pa.array(np.where(no_fill, winner_present, present_sets.union(po, pn)), pa.int32()),
        )
    return merged


def _is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _is_text(t: pa.DataType) -> bool:
    return _is_string(t) or bool(pa.types.is_binary(t) or pa.types.is_large_binary(t))


def _marker(marker: str, t: pa.DataType) -> pa.Scalar:
    return pa.scalar(marker if _is_string(t) else marker.encode(), t)


def _custom(
    older: pa.Table, newer: pa.Table, config: MergeConfig, present_sets: PresentSets, merger: RecordMerger
) -> pa.Table:
    fo, fn = flags_of(older), flags_of(newer)
    schema = data_schema(older.schema)
    merged, deleted = merger.merge(
        older.drop_columns(list(INTERNAL)),
        newer.drop_columns(list(INTERNAL)),
        (fo & F_DELETE) != 0,
        (fn & F_DELETE) != 0,
        config,
    )
    deleted = np.asarray(deleted, dtype=np.bool_)
    if merged.num_rows != older.num_rows or len(deleted) != older.num_rows:
        raise ValueError(
            f"custom merger {type(merger).__name__} returned {merged.num_rows} rows and {len(deleted)} delete flags "
            f"for {older.num_rows} input rows"
        )
    merged = align(merged, schema)
    flags = np.where(deleted, F_DELETE, 0).astype(np.int8)
    flags |= np.where(deleted & commit_time_deletes(merged, config.ordering_fields), F_CTD, 0).astype(np.int8)
    return with_internal(merged, flags, present_sets.union(present_of(older), present_of(newer)))


def lookup(probe: Column, keys: Column) -> IntArray:
    """For each probe key, the position of the same key in `keys` (unique) or -1. Hashes the smaller side."""
    if len(probe) == 0 or len(keys) == 0:
        return np.full(len(probe), -1, dtype=np.int64)
    # Hashing binary skips UTF-8 handling and is measurably faster than string.
    probe, keys = combined(probe), combined(keys)
    probe, keys = probe.cast(pa.binary()), keys.cast(pa.binary())
    if len(probe) <= len(keys):
        where_in_probe = to_numpy_int(pc.index_in(keys, value_set=probe))
        result = np.full(len(probe), -1, dtype=np.int64)
        hit = where_in_probe >= 0
        result[where_in_probe[hit]] = np.flatnonzero(hit)
        return result
    return to_numpy_int(pc.index_in(probe, value_set=keys))
