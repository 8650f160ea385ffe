"""Merged reads: a file slice (base file + log files) into Arrow tables, and whole-table reads on top.

`FileGroupReader.read_slice` streams the base file by row group and merges each batch with the slice's log
records (`merge.DeltaRecords`). Memory bound per slice: the log records of the slice (all columns; when they
hold more than two versions per record key, the surviving version of each key only) plus one base row group and its
merged copy. Base files are never loaded whole.

Which log blocks count as data (Hudi's rules):
- Corrupt blocks are skipped (the log reader already resynchronised on the next magic).
- A rollback command block drops the blocks of its target instant read before it (in log order); blocks a
  later attempt of the same instant wrote after it count (Hudi's log scanner).
- Table version 6 checks each block: its instant must be completed on the active timeline or older than the
  timeline's first instant (archived). Versions 8 and 9 check per log file (in the file-system view).
- Blocks written after the read's instant (time travel) are skipped.
- A block carrying COMPACTED_BLOCK_TIMES (log compaction) replaces the blocks of those instants.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tableservice.errors import CorruptFileError, TableServiceError, UnsupportedTableError
from tableservice.hudi.file_group.dictionary_read import DictionaryColumns
from tableservice.hudi.file_group.log_format import (
    BlockType,
    CorruptBlock,
    HeaderKey,
    LogBlock,
    decode_data_block,
    decode_delete_block,
    iter_log_blocks,
)
from tableservice.hudi.file_group.merge import (
    DeltaRecords,
    MergeConfig,
    base_positions,
    merge_base_batch,
    remaining_inserts,
)
from tableservice.hudi.file_group.merge_core import IntArray
from tableservice.hudi.file_group.records_read import note_records_read
from tableservice.hudi.file_group.spill import SpillStats
from tableservice.hudi.table.fs_view import BaseFile, FileSlice, FileSystemView
from tableservice.hudi.timeline.active import Timeline
from tableservice.storage import Storage

RECORD_KEY = "_hoodie_record_key"
COMMIT_TIME = "_hoodie_commit_time"
DEFAULT_BATCH_ROWS = 131_072
WHOLE_FILE_LOOKUP_ROWS = 2_000_000
"""The most rows of a base file whose record keys a merge looks up among the log's at once (`iter_base_merging`):
the key column and its positions are held while the file is merged (about 40 MB at 20-byte keys)."""


ORDERING = "ordering_value"  # the column of a decoded delete block holding each deleted key's ordering value


@dataclass
class DecodedBlock:
    """One visible log block decoded: data rows, or the deleted keys (`RECORD_KEY`) with their ordering values
    (`ORDERING`); its size in the log file."""

    table: pa.Table
    deletes: bool
    partial: bool
    size: int
    seq: int = 0  # log position of its first row (the bounded-memory merge numbers them)

    def add_to(self, delta: DeltaRecords) -> None:
        if self.deletes:
            delta.add_deletes(self.table.column(RECORD_KEY), self.table.column(ORDERING))
        else:
            delta.add_data(self.table, partial=self.partial)


@dataclass
class ScanStats:
    """What a slice's log scan met (reported in write stats and metrics)."""

    log_files: int = 0
    log_blocks: int = 0
    corrupt_blocks: int = 0
    rollback_blocks: int = 0
    skipped_blocks: int = 0
    log_records: int = 0
    log_bytes: int = 0


@dataclass(frozen=True)
class BlockFilter:
    """Decides which data blocks of a log scan are visible."""

    table_version: int
    completed: frozenset[str]
    timeline_start: str | None
    as_of: str | None = None
    pending: frozenset[str] = frozenset()  # instants still pending on the active timeline are never archived

    @classmethod
    def for_timeline(cls, table_version: int, timeline: Timeline, as_of: str | None = None) -> BlockFilter:
        return cls(
            table_version,
            frozenset(i.requested_time for i in timeline.completed()),
            timeline.commits_start(),
            as_of,
            frozenset(i.requested_time for i in timeline.pending()),
        )

    def visible(self, instant: str | None) -> bool:
        if instant is None:
            return False
        if self.as_of is not None and instant > self.as_of:
            return False
        if self.table_version >= 8:
            return True
        return instant in self.completed or (
            self.timeline_start is not None and instant < self.timeline_start and instant not in self.pending
        )


@dataclass
class LogScan:
    blocks: list[LogBlock] = field(default_factory=list)
    stats: ScanStats = field(default_factory=ScanStats)


class BlockVisibility(Protocol):
    def visible(self, instant: str | None) -> bool: ...


def scan_log_blocks(
    storage: Storage,
    log_locations: Sequence[str],
    block_filter: BlockVisibility,
    *,
    table: str | None = None,
    hfile_blocks: bool = False,
) -> LogScan:
    """The visible data and delete blocks of a slice's log files, in log order. HFile data blocks belong to the
    metadata table only: `hfile_blocks=True` keeps them, otherwise they are an error."""
    scan = LogScan()
    candidates: list[LogBlock] = []
    compacted: set[str] = set()
    for location in log_locations:
        scan.stats.log_files += 1
        for block in iter_log_blocks(storage, location, table=table):
            if isinstance(block, CorruptBlock):
                scan.stats.corrupt_blocks += 1
                continue
            scan.stats.log_blocks += 1
            if block.block_type is BlockType.COMMAND:
                if block.is_rollback_command and block.target_instant_time:
                    scan.stats.rollback_blocks += 1
                    kept = [b for b in candidates if b.instant_time != block.target_instant_time]
                    scan.stats.skipped_blocks += len(candidates) - len(kept)
                    candidates = kept
                continue
            if block.block_type is BlockType.HFILE_DATA and not hfile_blocks:
                raise UnsupportedTableError(
                    "HFile data blocks are not supported in data tables", table=table, path=location
                )
            if block.block_type is BlockType.CDC_DATA:
                continue
            if not block_filter.visible(block.instant_time):
                scan.stats.skipped_blocks += 1
                continue
            times = block.header.get(HeaderKey.COMPACTED_BLOCK_TIMES)
            if times:
                compacted.update(t.strip() for t in times.split(",") if t.strip())
            candidates.append(block)
    for block in candidates:
        t = block.instant_time
        if t in compacted and not block.header.get(HeaderKey.COMPACTED_BLOCK_TIMES):
            scan.stats.skipped_blocks += 1
            continue
        scan.blocks.append(block)
    return scan


def _ordering_values(deletes: pa.Table, target: pa.DataType | None) -> pa.Array | pa.ChunkedArray:
    values = deletes.column("ordering_value")
    kinds = deletes.column("ordering_value_kind")
    # Hudi writes int 0 when a delete has no ordering value: keep it as the "natural order" marker.
    natural = pc.and_(pc.equal(kinds, "int"), pc.equal(values.cast(pa.string()), "0"))
    if target is None or values.type == target:
        return values
    try:
        cast = values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return values
    return pc.if_else(natural, pa.scalar(None, target), cast)


class FileGroupReader:
    """Reads file slices of one table with one merge configuration and one read schema."""

    def __init__(
        self,
        storage: Storage,
        *,
        table_name: str,
        merge_config: MergeConfig,
        schema: pa.Schema,
        block_filter: BlockFilter,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        memory_budget: int | None = None,
        spill_directories: tuple[str, ...] = (),
    ) -> None:
        """`memory_budget`: bytes the log records of a slice may take before the merge spills to
        `spill_directories` (default: the executor's local dirs), see `spill_merge`; None: unbounded."""
        self.storage = storage
        self.table_name = table_name
        self.merge_config = merge_config
        self.schema = schema
        self.block_filter = block_filter
        self.batch_rows = batch_rows
        self.last_stats = ScanStats()
        self.memory_budget = memory_budget
        self.spill_directories = spill_directories
        self.last_spill = SpillStats()

    def delta_records(self, slice_: FileSlice) -> DeltaRecords:
        """The surviving log records of a slice."""
        scan = scan_log_blocks(
            self.storage, [lf.location for lf in slice_.log_files], self.block_filter, table=self.table_name
        )
        self.last_stats = scan.stats
        self.last_stats.log_bytes = slice_.log_size
        delta = DeltaRecords(self.merge_config, schema=self.schema)
        for block in self.decoded_blocks(scan.blocks):
            block.add_to(delta)
        return delta

    def decoded_blocks(self, blocks: Sequence[LogBlock]) -> Iterator[DecodedBlock]:
        """The visible blocks of a scan decoded, in log order (the in-memory and the bounded-memory merge both read
        the log through this); their records are counted in `last_stats` and as records read."""
        ordering = self.merge_config.ordering_fields
        ordering_type = (
            self.schema.field(ordering[0]).type if len(ordering) == 1 and ordering[0] in self.schema.names else None
        )
        for block in blocks:
            try:
                if block.block_type is BlockType.DELETE:
                    deletes = decode_delete_block(block, self.storage, table=self.table_name)
                    rows = pa.table(
                        {RECORD_KEY: deletes.column("record_key"), ORDERING: _ordering_values(deletes, ordering_type)}
                    )
                    decoded = DecodedBlock(rows, deletes=True, partial=False, size=block.size)
                else:
                    data = decode_data_block(block, self.storage, table=self.table_name)
                    partial = block.header.get(HeaderKey.IS_PARTIAL, "").lower() == "true"
                    decoded = DecodedBlock(data, deletes=False, partial=partial, size=block.size)
            except TableServiceError as e:
                raise e.with_context(table=self.table_name, path=block.location) from e
            self.last_stats.log_records += decoded.table.num_rows
            note_records_read(decoded.table.num_rows)
            yield decoded

    def iter_base(
        self, base: BaseFile, columns: Sequence[str] | None = None, dictionaries: DictionaryColumns | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The base file's rows, batch by batch; `dictionaries`: the columns to read as Arrow dictionaries."""
        for batch, _ in self._base_batches(base, columns, dictionaries, None):
            yield batch

    def iter_base_merging(
        self, base: BaseFile, delta: DeltaRecords
    ) -> Iterator[tuple[pa.RecordBatch, IntArray | None]]:
        """The base file's rows, batch by batch, each with where its record keys are among the log's
        (`merge_base_batch`'s `position`). A file of more than one batch and at most `WHOLE_FILE_LOOKUP_ROWS` rows
        has its key column read first and looked up at once (one ranged read more on an object store); otherwise
        None, and each batch's keys are looked up as it is merged."""
        yield from self._base_batches(base, None, None, delta)

    def _base_batches(
        self,
        base: BaseFile,
        columns: Sequence[str] | None,
        dictionaries: DictionaryColumns | None,
        delta: DeltaRecords | None,
    ) -> Iterator[tuple[pa.RecordBatch, IntArray | None]]:
        try:
            with self.storage.open_input_file(base.location) as f:
                pf = _open_base(f, dictionaries)
                wanted = None
                if columns is not None:
                    present = set(pf.schema_arrow.names)
                    wanted = [c for c in columns if c in present]
                positions = None
                rows = pf.metadata.num_rows
                if (
                    delta is not None
                    and len(delta)
                    and self.batch_rows < rows <= WHOLE_FILE_LOOKUP_ROWS
                    and RECORD_KEY in pf.schema_arrow.names
                ):
                    keys = pf.read(columns=[RECORD_KEY], use_threads=False).column(0)
                    positions = base_positions(keys, delta)
                start = 0
                for batch in pf.iter_batches(batch_size=self.batch_rows, columns=wanted, use_threads=False):
                    note_records_read(batch.num_rows)
                    yield batch, None if positions is None else positions[start : start + batch.num_rows]
                    start += batch.num_rows
        except TableServiceError as e:
            raise e.with_context(table=self.table_name, path=base.location) from e
        except (pa.ArrowException, OSError) as e:
            raise CorruptFileError(f"base file does not read: {e}", table=self.table_name, path=base.location) from e

    def read_slice(
        self, slice_: FileSlice, columns: Sequence[str] | None = None, dictionaries: DictionaryColumns | None = None
    ) -> Generator[pa.Table, None, None]:
        """Merged rows of one slice, as tables of at most about `batch_rows` rows, in the read schema.
        `dictionaries`: a slice without log files reads the columns it chooses as Arrow dictionaries (of the
        read schema's value types); a merged slice ignores it."""
        target = self.schema
        self.last_spill = SpillStats()  # set again by a bounded-memory merge that spills
        if not slice_.log_files:
            self.last_stats = ScanStats()
            if slice_.base_file is not None:
                for batch in self.iter_base(slice_.base_file, columns, dictionaries):
                    schema = dictionaries.schema(target) if dictionaries is not None else target
                    yield _align(pa.Table.from_batches([batch]), schema, columns)
            return
        if self.memory_budget is not None:
            from tableservice.hudi.file_group.spill_merge import read_slice_bounded

            yield from read_slice_bounded(self, slice_, columns, self.memory_budget)
            return
        delta = self.delta_records(slice_)
        matched = delta.new_match_mask()
        if slice_.base_file is not None:
            for batch, position in self.iter_base_merging(slice_.base_file, delta):
                merged = merge_base_batch(batch, delta, schema=target, matched=matched, position=position)
                yield _align(merged, target, columns)
        inserts = remaining_inserts(delta, matched, schema=target)
        if inserts.num_rows:
            yield _align(inserts, target, columns)


def _open_base(f: pa.NativeFile, dictionaries: DictionaryColumns | None) -> pq.ParquetFile:
    """A base file's reader, with the columns `dictionaries` chose (from this file when it is the first) read as
    dictionaries."""
    chosen = dictionaries.chosen if dictionaries is not None else None
    if chosen:
        try:
            return pq.ParquetFile(f, read_dictionary=chosen)
        except KeyError:  # the file lacks one of them (written before the column was added)
            pass
    pf = pq.ParquetFile(f)
    if dictionaries is not None:
        present = set(pf.schema_arrow.names)
        wanted = [c for c in dictionaries.choose(pf.metadata) if c in present]
        if wanted:  # the same file again, its footer already parsed
            pf = pq.ParquetFile(f, metadata=pf.metadata, read_dictionary=wanted)
    return pf


def _projection(schema: pa.Schema, names: tuple[str, ...]) -> pa.Schema | None:
    """The read schema's fields `names`, in that order (None if one is not in it)."""
    known = set(schema.names)
    return pa.schema([schema.field(n) for n in names]) if all(n in known for n in names) else None


def _align(table: pa.Table, schema: pa.Schema, columns: Sequence[str] | None) -> pa.Table:
    """Cast to the read schema (columns missing from old files become nulls) and project."""
    names = list(columns) if columns is not None else schema.names
    if table.column_names == names:
        target = _projection(schema, tuple(names))
        if target is not None and table.schema.equals(target):  # the common case: a base file in the read schema
            return pa.Table.from_arrays(table.columns, schema=target)  # without the file's footer metadata
    arrays = []
    fields = []
    for name in names:
        f = schema.field(name) if name in schema.names else None
        if name in table.column_names:
            col = table.column(name)
            if f is not None and col.type != f.type:
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise CorruptFileError(f"column {name!r} of type {col.type} does not read as {f.type}: {e}") from e
            arrays.append(col)
            fields.append(f if f is not None else pa.field(name, col.type))
        elif f is not None:
            arrays.append(pa.nulls(table.num_rows, f.type))
            fields.append(f)
        else:
            raise CorruptFileError(f"unknown column {name!r}")
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def slices_for_read(
    view: FileSystemView, *, read_optimized: bool, is_mor: bool, partition_filter: Callable[[str], bool] | None = None
) -> list[FileSlice]:
    """The slices a snapshot (or read-optimized) read covers."""
    out: list[FileSlice] = []
    for partition in view.partitions():
        if partition_filter is not None and not partition_filter(partition):
            continue
        if read_optimized or not is_mor:
            for base in view.latest_base_files(partition):
                out.append(FileSlice(partition, base.name.file_id, base.instant_time, base, ()))
        else:
            out.extend(view.latest_merged_slices(partition))
    return out
