"""The record-key index the write client routes updates and deletes with: every key in the latest slices of the
touched partitions, with the file group holding it (read from base files and from the log blocks)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tableservice.hudi.file_group.log_format import iter_log_records
from tableservice.hudi.table.fs_view import FileGroupId, FileSystemView
from tableservice.hudi.write.records import PARTITION_PATH, RECORD_KEY
from tableservice.storage import Storage


def key_index(storage: Storage, view: FileSystemView, partitions: set[str]) -> pa.Table:
    """(partition, key, file id) of every record key found in the latest slices of the partitions: in the
    base file, and in any data or delete block of the slice's log files (a slice opened by a pending
    compaction counts with the one before it). A key seen anywhere in a file group is routed to that group,
    so that a key is never written into two file groups, even when updates land in a newer slice while a
    compaction is rewriting the older one."""
    parts: list[pa.Table] = []
    for partition in sorted(partitions):
        for slice_ in view.latest_merged_slices(partition):
            keys: list[pa.Array | pa.ChunkedArray] = []
            if slice_.base_file is not None:
                with storage.open_input_file(slice_.base_file.location) as f:
                    keys.append(pq.read_table(f, columns=[RECORD_KEY], use_threads=False).column(RECORD_KEY))
            for log in slice_.log_files:
                keys.extend(_log_keys(storage, log.location))
            if not keys:
                continue
            column = pa.chunked_array([k.cast(pa.string()) for k in keys], type=pa.string())
            unique = pc.unique(column)
            n = len(unique)
            parts.append(
                pa.table(
                    {
                        "p": pa.array([partition] * n, pa.string()),
                        "k": unique,
                        "fid": pa.array([slice_.file_id] * n, pa.string()),
                    }
                )
            )
    if not parts:
        return pa.table(
            {"p": pa.array([], pa.string()), "k": pa.array([], pa.string()), "fid": pa.array([], pa.string())}
        )
    return pa.concat_tables(parts)


def lookup_file_ids(index: pa.Table, rows: pa.Table) -> pa.Array:
    """The file id of each row's (partition, key) in `index`, null for keys the index lacks."""
    if rows.num_rows == 0:
        return pa.array([], pa.string())
    probe = pa.table(
        {
            "p": rows.column(PARTITION_PATH),
            "k": rows.column(RECORD_KEY),
            "i": pa.array(np.arange(rows.num_rows, dtype=np.int64)),
        }
    )
    joined = probe.join(index, keys=["p", "k"], join_type="left outer").sort_by("i")
    return joined.column("fid").combine_chunks()


def file_groups_of(rows: pa.Table, fids: pa.Array) -> list[FileGroupId]:
    """The distinct (partition, file id) pairs the rows were routed to."""
    if rows.num_rows == 0:
        return []
    pairs = pa.table({"p": rows.column(PARTITION_PATH), "f": fids}).filter(pc.is_valid(fids))
    return sorted(set(zip(pairs.column("p").to_pylist(), pairs.column("f").to_pylist(), strict=True)))


def _log_keys(storage: Storage, location: str) -> list[pa.Array | pa.ChunkedArray]:
    """Record keys of every data and delete block of a log file."""
    out: list[pa.Array | pa.ChunkedArray] = []
    for is_delete, rows in iter_log_records(storage, location):
        column = "record_key" if is_delete else RECORD_KEY
        if column in rows.column_names:
            out.append(rows.column(column))
    return out
