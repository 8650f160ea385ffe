"""Record-index records of a commit (HUDI-MDT-NOTES §3.2, §6.2).

- Clustering: every key of the new base files re-pointed to its new file group, at the clustering instant.
- A writer's commit: keys of the base files it wrote and of the data blocks of the log files it wrote point at
  their file group (at the commit's instant; Hudi sends only inserted keys, so an updated key's instant differs
  from Hudi's, its location does not); keys of its delete blocks, and keys a rewritten base file no longer holds,
  are removed (a delete block in the metadata table).
- Insert overwrite (a replace commit that is not a clustering): as a writer's commit, and every key the replaced
  file groups held that the new files do not hold is removed.
- Compaction: nothing (keys stay in their file groups).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tableservice.errors import TableServiceError
from tableservice.hudi.file_group.base_file_reader import iter_base_file
from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.hudi.file_group.log_format import iter_log_records
from tableservice.hudi.metadata.records import record_index_record
from tableservice.hudi.table.fs_view import partition_location
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import ReadOptions, iter_read, read_slices
from tableservice.hudi.timeline.active import Timeline
from tableservice.storage import join

KEY = "_hoodie_record_key"
PARTITION = "_hoodie_partition_path"
FILE_NAME = "_hoodie_file_name"

# (key, value or None for a removed key)
IndexUpdate = tuple[str, dict[str, Any] | None]


def base_file_keys(table: HudiTable, partition: str, name: str) -> list[str]:
    location = join(partition_location(table.base_path, partition), name)
    try:
        return [k for batch in iter_base_file(table.storage, location, [KEY]) for k in batch.column(0).to_pylist() if k]
    except TableServiceError as e:
        raise e.with_context(table=table.label) from e


def file_id_of(file_name: str) -> str:
    """The file id in a base or log file name (a log record's `_hoodie_file_name` may hold the file id itself)."""
    parsed = parse_log_file_name(file_name) if file_name.startswith(".") else parse_base_file_name(file_name)
    return parsed.file_id if parsed is not None else file_name


def key_locations(table: HudiTable, as_of: str | None = None) -> Iterator[tuple[str, str, str]]:
    """(record key, partition, file id) of every record of the latest file slices (as of `as_of`), read from
    storage (never through the metadata table: this is what the record index is checked and built against)."""
    options = ReadOptions(columns=(KEY, PARTITION, FILE_NAME), from_storage=True, as_of=as_of)
    file_ids: dict[str, str] = {}
    for batch in iter_read(table, options):
        columns = (batch.column(c).to_pylist() for c in (KEY, PARTITION, FILE_NAME))
        for key, partition, name in zip(*columns, strict=True):
            if key is not None:
                file_id = file_ids.get(name)
                if file_id is None:
                    file_id = file_ids[name] = file_id_of(str(name or ""))
                yield str(key), str(partition or ""), file_id


def key_values(table: HudiTable, column: str, as_of: str | None = None) -> Iterator[tuple[str, str | None]]:
    """(record key, the column's value as the secondary index holds it) of every record of the latest file slices
    (as of `as_of`)."""
    options = ReadOptions(columns=(KEY, column), from_storage=True, as_of=as_of)
    for batch in iter_read(table, options):
        texts = secondary_texts(batch.column(column))
        for key, text in zip(batch.column(KEY).to_pylist(), texts, strict=True):
            if key is not None:
                yield str(key), text


def secondary_texts(values: pa.Array | pa.ChunkedArray) -> list[str | None]:
    """Values of an indexed column as Hudi's secondary index holds them: the text of the Avro value (Java's
    `toString`): dates as days since the epoch, timestamps and times as their integer in the column's unit,
    booleans `true`/`false`, doubles as Java prints them, other values as text."""
    t = values.type
    if pa.types.is_date32(t):
        values = values.cast(pa.int32())
    elif pa.types.is_date64(t):
        values = pc.divide(values.cast(pa.int64()), 86_400_000)
    elif pa.types.is_timestamp(t) or pa.types.is_time(t) or pa.types.is_duration(t):
        values = values.cast(pa.int64())
    floating = pa.types.is_floating(t)
    out: list[str | None] = []
    for v in values.to_pylist():
        if v is None:
            out.append(None)
        elif isinstance(v, bool):
            out.append("true" if v else "false")
        elif floating:
            out.append(java_double_text(float(v)))
        else:
            out.append(str(v))
    return out


def java_double_text(x: float) -> str:
    """`Double.toString`: plain notation for 1e-3 <= |x| < 1e7, else `<mantissa>E<exponent>`, shortest digits."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        return repr(x) if "e" not in repr(x) else format(x, "f")
    mantissa, _, exponent = np.format_float_scientific(x, unique=True, trim="0").partition("e")
    return f"{mantissa}E{int(exponent)}"


def location(partition: str, file_id: str, instant_ms: int) -> dict[str, Any]:
    """A record-index value: encoding 0 (UUID halves and index) when the file id is `<uuid>-<n>`, else 1."""
    head, _, tail = file_id.rpartition("-")
    try:
        u: uuid.UUID | None = uuid.UUID(head)
        index = int(tail)
    except ValueError:
        u, index = None, -1
    if u is not None and index >= 0:
        return {
            "partitionName": partition,
            "fileIdHighBits": _signed(u.int >> 64),
            "fileIdLowBits": _signed(u.int & ((1 << 64) - 1)),
            "fileIndex": index,
            "fileId": "",
            "instantTime": instant_ms,
            "fileIdEncoding": 0,
            "position": None,
        }
    return {
        "partitionName": partition,
        "fileIdHighBits": None,
        "fileIdLowBits": None,
        "fileIndex": None,
        "fileId": file_id,
        "instantTime": instant_ms,
        "fileIdEncoding": 1,
        "position": None,
    }


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def write_updates(
    table: HudiTable,
    written: Sequence[tuple[str, str, str | None]],
    listed: dict[str, dict[str, int]],
    instant_ms: int,
) -> list[IndexUpdate]:
    """The record-index updates of a writer's commit. `written`: (partition, file name, previous base instant of
    the slice it rewrote, if any); `listed`: the files the metadata table listed before the commit."""
    out: dict[str, dict[str, Any] | None] = {}
    for partition, name, previous in written:
        value = record_index_record(location(partition, file_id_of(name), instant_ms))
        if not name.startswith("."):
            keys = base_file_keys(table, partition, name)
            out.update(dict.fromkeys(keys, value))
            old = _previous_base(listed.get(partition, {}), file_id_of(name), previous)
            if old is not None:
                kept = set(keys)
                out.update((key, None) for key in base_file_keys(table, partition, old) if key not in kept)
            continue
        log = join(partition_location(table.base_path, partition), name)
        for is_delete, rows in iter_log_records(table.storage, log, table=table.label):
            column = "record_key" if is_delete else KEY
            if column in rows.column_names:
                out.update((key, None if is_delete else value) for key in rows.column(column).to_pylist() if key)
    return list(out.items())


def replaced_keys(table: HudiTable, timeline: Timeline, replaced: Mapping[str, Sequence[str]]) -> set[str]:
    """The keys the latest slices of the replaced file groups hold as of `timeline` (before the replace), read
    from storage. `replaced`: partition -> file ids."""
    listing = {
        p: [fi for fi in table.storage.list(partition_location(table.base_path, p)) if not fi.is_dir] for p in replaced
    }
    view = table.file_system_view(timeline=timeline, listing=listing)
    slices = [s for p, ids in replaced.items() for s in view.latest_merged_slices(p) if s.file_id in set(ids)]
    keys: set[str] = set()
    for part in read_slices(table, timeline, slices, [KEY]):
        keys.update(k for k in part.column(KEY).to_pylist() if k)
    return keys


def _previous_base(files: dict[str, int], file_id: str, instant: str | None) -> str | None:
    if not instant or instant == "null":
        return None
    for name in files:
        parsed = parse_base_file_name(name) if not name.startswith(".") else None
        if parsed is not None and parsed.file_id == file_id and parsed.instant_time == instant:
            return name
    return None


def clustering_updates(
    table: HudiTable, new_base_files: Iterable[tuple[str, str]], instant_ms: int
) -> list[IndexUpdate]:
    """Every key of the base files a clustering wrote, pointing at its new file group."""
    out: list[IndexUpdate] = []
    for partition, name in new_base_files:
        value = record_index_record(location(partition, file_id_of(name), instant_ms))
        out.extend((key, value) for key in base_file_keys(table, partition, name))
    return out
