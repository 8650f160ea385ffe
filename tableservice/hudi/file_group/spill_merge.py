"""Merged read of a file slice within a memory budget (compaction with `hoodie.memory.compaction.*`).

The log blocks are decoded in log order and kept as they are while their Arrow size stays under a working share
of the budget (`budget / PEAK_FACTOR`: folding them into per-key versions takes a few times their size); the
slice is then merged in memory exactly as `FileGroupReader.read_slice` does. Past that share, a grace-hash merge
runs in a private spill folder (`spill.SpillSpace`):

1. The log rows (those held so far, then each decoded block) are split by a hash of the record key into
   `buckets` run files, sized so that one bucket's rows fit the working share. A bucket holds its rows in log
   order, each tagged with its position in the whole log; a key's every version lands in one bucket.
2. The base file is read row group by row group; its rows go to the same buckets, tagged with their position in
   the base file.
3. Bucket by bucket: the bucket's log rows fold into a `DeltaRecords` in log order, its base rows are merged with
   `merge_base_batch` and the keys no base row had give `remaining_inserts` (the merge functions of the
   in-memory path, so every merge rule is theirs). Merged rows are written to a result run sorted by base
   position; inserts follow, by the log position of their key's first record.
4. The result runs are merged by position into the output.

Rows are those of the in-memory path. Order: base rows keep the base file's order (the in-memory path moves the
replaced rows of each base batch after its kept ones), then the inserts in the in-memory path's order.
Peak memory ≈ the working share × PEAK_FACTOR + one base batch + one frame per bucket.
"""

from __future__ import annotations

import math
import resource
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tableservice.hudi.file_group.merge import DeltaRecords, merge_base_batch, remaining_inserts
from tableservice.hudi.file_group.merge_core import RECORD_KEY, to_numpy_int
from tableservice.hudi.file_group.reader import DecodedBlock, FileGroupReader, _align, scan_log_blocks
from tableservice.hudi.file_group.spill import SpillSpace, SpillStats, key_buckets, read_frames, write_frame
from tableservice.hudi.table.fs_view import FileSlice

PEAK_FACTOR = 4  # peak memory of folding log rows, as a multiple of their Arrow size
MAX_BUCKETS = 4096


def max_buckets() -> int:
    """At most MAX_BUCKETS, and a quarter of the process's open-file limit: a bucketed merge keeps one file per
    bucket open at once (1024 is a common executor limit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = soft if soft != resource.RLIM_INFINITY else MAX_BUCKETS * 4
    return max(2, min(MAX_BUCKETS, limit // 4))


SEQ = "__spill_seq"  # position of a log row in the slice's log
ORD = "__spill_ord"  # output position: base position, or base rows + first log position of an insert
_KIND = "tableservice.spill.kind"
_PARTIAL = "tableservice.spill.partial"


def read_slice_bounded(
    reader: FileGroupReader, slice_: FileSlice, columns: Sequence[str] | None, budget: int
) -> Iterator[pa.Table]:
    """`reader.read_slice` within `budget` bytes (see the module's description)."""
    scan = scan_log_blocks(
        reader.storage, [lf.location for lf in slice_.log_files], reader.block_filter, table=reader.table_name
    )
    reader.last_stats = scan.stats
    reader.last_stats.log_bytes = slice_.log_size
    reader.last_spill = SpillStats()
    working = max(1, budget // PEAK_FACTOR)
    total_block_bytes = sum(b.size for b in scan.blocks) or 1
    held: list[DecodedBlock] = []
    held_bytes = 0
    consumed = 0
    seq = 0
    chunks = reader.decoded_blocks(scan.blocks)
    for chunk in chunks:
        chunk.seq = seq
        seq += chunk.table.num_rows
        held.append(chunk)
        held_bytes += chunk.table.nbytes
        consumed += chunk.size
        if held_bytes > working:
            estimate = held_bytes * total_block_bytes / max(1, consumed)
            buckets = min(max_buckets(), 1 << max(1, math.ceil(math.log2(1.5 * estimate / working))))
            yield from _grace_merge(reader, slice_, columns, held, chunks, seq, buckets)
            return
    delta = DeltaRecords(reader.merge_config, schema=reader.schema)
    for chunk in held:
        chunk.add_to(delta)
    held.clear()
    matched = delta.new_match_mask()
    if slice_.base_file is not None:
        for batch in reader.iter_base(slice_.base_file):
            merged = merge_base_batch(batch, delta, schema=reader.schema, matched=matched)
            yield _align(merged, reader.schema, columns)
    inserts = remaining_inserts(delta, matched, schema=reader.schema)
    if inserts.num_rows:
        yield _align(inserts, reader.schema, columns)


def _grace_merge(
    reader: FileGroupReader,
    slice_: FileSlice,
    columns: Sequence[str] | None,
    held: list[DecodedBlock],
    rest: Iterator[DecodedBlock],
    seq: int,
    buckets: int,
) -> Iterator[pa.Table]:
    target = reader.schema
    spilled = 0
    with SpillSpace(reader.spill_directories) as space:
        log_runs = [space.create(f"log-{b}") for b in range(buckets)]
        for chunk in held:
            spilled += _split_log(chunk, buckets, log_runs)
        held.clear()
        for chunk in rest:
            chunk.seq = seq
            seq += chunk.table.num_rows
            spilled += _split_log(chunk, buckets, log_runs)
        for f in log_runs:
            f.close()
        base_rows = 0
        if slice_.base_file is not None:
            base_runs = [space.create(f"base-{b}") for b in range(buckets)]
            for batch in reader.iter_base(slice_.base_file):
                table = pa.Table.from_batches([batch])
                table = table.append_column(ORD, pa.array(np.arange(base_rows, base_rows + table.num_rows)))
                base_rows += table.num_rows
                spilled += _split(table, key_buckets(table.column(RECORD_KEY), buckets), base_runs, {})
            for f in base_runs:
                f.close()
        frame_rows = max(1024, reader.batch_rows // buckets)
        for b in range(buckets):
            with space.create(f"out-{b}") as out:
                for part in _merge_bucket(reader, space, b, slice_.base_file is not None, base_rows):
                    for lo in range(0, part.num_rows, frame_rows):
                        spilled += write_frame(out, part.slice(lo, frame_rows))
        reader.last_spill = SpillStats(buckets, spilled)
        runs = [read_frames(space.open(f"out-{b}")) for b in range(buckets)]
        for merged in _merge_runs(runs):
            yield _align(merged.drop_columns([ORD]), target, columns)


def _split_log(chunk: DecodedBlock, buckets: int, runs: list[BinaryIO]) -> int:
    table = chunk.table.append_column(SEQ, pa.array(np.arange(chunk.seq, chunk.seq + chunk.table.num_rows)))
    meta = {_KIND: "deletes" if chunk.deletes else "data", _PARTIAL: "true" if chunk.partial else "false"}
    return _split(table, key_buckets(table.column(RECORD_KEY), buckets), runs, meta)


def _split(table: pa.Table, bucket: npt.NDArray[np.int64], runs: list[BinaryIO], meta: dict[str, str]) -> int:
    """Write the rows of `table` to the run of their bucket (row order kept within a bucket)."""
    order = np.argsort(bucket, kind="stable")
    bounds = np.searchsorted(bucket[order], np.arange(len(runs) + 1))
    by_bucket = table.take(pa.array(order))  # one take (each take from several chunks concatenates them first)
    written = 0
    for b, run in enumerate(runs):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        if hi > lo:
            written += write_frame(run, by_bucket.slice(lo, hi - lo), meta)
    return written


def _merge_bucket(
    reader: FileGroupReader, space: SpillSpace, bucket: int, has_base: bool, base_rows: int
) -> Iterator[pa.Table]:
    """The merged rows of one bucket with their output positions (`ORD`), sorted by it."""
    target = reader.schema
    delta = DeltaRecords(reader.merge_config, schema=target)
    seen: list[tuple[pa.ChunkedArray, pa.ChunkedArray]] = []
    with space.open(f"log-{bucket}") as f:
        for frame in read_frames(f):
            meta = frame.schema.metadata or {}
            seen.append((frame.column(RECORD_KEY), frame.column(SEQ)))
            data = frame.drop_columns([SEQ]).replace_schema_metadata(
                {k: v for k, v in meta.items() if k not in (_KIND.encode(), _PARTIAL.encode())} or None
            )
            deletes, partial = meta.get(_KIND.encode()) == b"deletes", meta.get(_PARTIAL.encode()) == b"true"
            DecodedBlock(data, deletes=deletes, partial=partial, size=0).add_to(delta)
    matched = delta.new_match_mask()
    if has_base:
        with space.open(f"base-{bucket}") as f:
            for frame in _coalesced(read_frames(f), reader.batch_rows):
                positions = to_numpy_int(frame.column(ORD))
                data = frame.drop_columns([ORD])
                merged = merge_base_batch(data, delta, schema=target, matched=matched)
                where = to_numpy_int(
                    pc.index_in(_binary(merged.column(RECORD_KEY)), value_set=_binary(data.column(RECORD_KEY)))
                )
                out = positions[where]
                order = np.argsort(out, kind="stable")
                yield merged.append_column(ORD, pa.array(out)).take(pa.array(order))
    inserts = remaining_inserts(delta, matched, schema=target)
    if inserts.num_rows:
        yield _ordered_inserts(inserts, seen, base_rows)


def _binary(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    return array.cast(pa.binary())


def _ordered_inserts(
    inserts: pa.Table, seen: list[tuple[pa.ChunkedArray, pa.ChunkedArray]], base_rows: int
) -> pa.Table:
    """Inserts with their output position: after the base rows, by the log position of their key's first record
    (the order of the in-memory path's surviving versions)."""
    wanted = _binary(inserts.column(RECORD_KEY))
    firsts = np.full(len(wanted), np.iinfo(np.int64).max, dtype=np.int64)
    for keys, seqs in seen:
        where = to_numpy_int(pc.index_in(_binary(keys), value_set=wanted))
        hit = where >= 0
        np.minimum.at(firsts, where[hit], to_numpy_int(seqs)[hit])
    out = firsts + base_rows
    order = np.argsort(out, kind="stable")
    return inserts.append_column(ORD, pa.array(out)).take(pa.array(order))


def _coalesced(frames: Iterator[pa.Table], rows: int) -> Iterator[pa.Table]:
    pending: list[pa.Table] = []
    count = 0
    for frame in frames:
        pending.append(frame)
        count += frame.num_rows
        if count >= rows:
            yield pa.concat_tables(pending, promote_options="permissive")
            pending, count = [], 0
    if pending:
        yield pa.concat_tables(pending, promote_options="permissive")


def _merge_runs(runs: list[Iterator[pa.Table]]) -> Iterator[pa.Table]:
    """Runs sorted by `ORD` merged into one sequence sorted by it. Each step emits every row up to the smallest
    last position among the runs' current frames: later frames of any run only hold larger positions."""
    heads: list[pa.Table | None] = [_next_frame(r) for r in runs]
    while True:
        live = [i for i, h in enumerate(heads) if h is not None]
        if not live:
            return
        positions = {i: to_numpy_int(heads[i].column(ORD)) for i in live}  # type: ignore[union-attr]
        limit = min(int(p[-1]) for p in positions.values())
        parts: list[pa.Table] = []
        for i in live:
            head = heads[i]
            assert head is not None
            cut = int(np.searchsorted(positions[i], limit, side="right"))
            parts.append(head.slice(0, cut))
            rest = head.slice(cut)
            heads[i] = rest if rest.num_rows else _next_frame(runs[i])
        merged = pa.concat_tables(parts, promote_options="permissive")
        yield merged.take(pa.array(np.argsort(to_numpy_int(merged.column(ORD)), kind="stable")))


def _next_frame(run: Iterator[pa.Table]) -> pa.Table | None:
    for frame in run:
        if frame.num_rows:
            return frame
    return None
