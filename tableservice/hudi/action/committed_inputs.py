"""Committed data is complete before an action rewrites it.

Hudi's readers skip a corrupt log block, because a failed writer may leave a torn block at a log file's tail. An
action that rewrites data (compaction, clustering, indexing) must be stricter: what it does not read is gone once
the old files are cleaned. Before one runs, every input file slice is checked against what the completed write
instants of the active timeline recorded in their write stats:

- a base file a completed commit wrote has its recorded size (`fileSizeInBytes`);
- a file group whose latest committed base file (before the action's instant) is missing from the slice, while
  the slice still has an older one or none, is refused: its logs alone would drop the base file's rows;
- a log file holds at least every byte range its committed appends wrote (`logOffset` .. `logOffset` plus
  `fileSizeInBytes`, which Hudi's append handle sets to the bytes of the append), and no corrupt block starts or
  ends inside such a range (`full`: the block framing is read, content is not decoded).

Bytes beyond every committed range (a failed writer's torn tail, a pending instant's blocks) are fine, as in Hudi.
Files whose commits were archived are only required to exist. Any finding raises `DamagedInputError` naming the
table, the file and the instant that committed it; nothing has been written at that point.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tableservice.errors import DamagedInputError, TableServiceError
from tableservice.hudi.file_group.filenames import parse_base_file_name
from tableservice.hudi.file_group.log_format.blocks import CorruptBlock
from tableservice.hudi.file_group.log_format.reader import iter_log_blocks
from tableservice.hudi.table.fs_view import partition_location
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.storage import FileInfo, join
from tableservice.storage.sizes import known_sizes


class InputSlice(Protocol):
    """One file slice an action reads: its base file and log files as locations."""

    @property
    def file_id(self) -> str: ...
    @property
    def base_instant_time(self) -> str: ...
    @property
    def base_file(self) -> str | None: ...
    @property
    def log_files(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class CommittedRange:
    start: int
    end: int
    instant_time: str


@dataclass
class CommittedFiles:
    """What the completed write instants of a timeline recorded (paths relative to the table's base path)."""

    base_files: dict[str, tuple[int | None, str]] = field(default_factory=dict)  # path -> (size, instant)
    latest_base: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # (partition, id) -> (t, path)
    log_ranges: dict[str, list[CommittedRange]] = field(default_factory=dict)

    @classmethod
    def of(cls, table: HudiTable, timeline: Timeline, before: str | None = None) -> CommittedFiles:
        """From every completed write instant on `timeline`; with `before` (the action's instant), those requested
        and (table version 8+) completed before it: what the plan could see when it was made."""
        out = cls()
        for instant in timeline.completed_writes():
            t = instant.requested_time
            if before is not None and (t >= before or (instant.completion_time or "") > before):
                continue  # written from the action's instant on, or completed after the plan was made
            metadata = table.commit_metadata(instant)
            for partition, stats in (metadata.partition_to_write_stats or {}).items():
                for stat in stats:
                    path = stat.path
                    if not path or path == "null":
                        continue
                    name = posixpath.basename(path)
                    size = int(stat.file_size_in_bytes) if stat.file_size_in_bytes is not None else None
                    if name.startswith("."):  # a log file
                        if size is None:
                            continue
                        start = int(stat.log_offset or 0)
                        out.log_ranges.setdefault(path, []).append(CommittedRange(start, start + size, t))
                        continue
                    out.base_files[path] = (size, t)
                    parsed = parse_base_file_name(name)
                    if parsed is None:
                        continue
                    key = (partition, parsed.file_id)
                    if key not in out.latest_base or out.latest_base[key][0] < t:
                        out.latest_base[key] = (t, path)
        return out


def check_committed_inputs(
    table: HudiTable,
    timeline: Timeline,
    slices: Iterable[tuple[str, InputSlice]],
    *,
    before: str | None = None,
    full: bool = True,
    committed: CommittedFiles | None = None,
    listing: Mapping[str, Sequence[FileInfo]] | None = None,
) -> None:
    """Raise DamagedInputError when a (partition, slice) an action is about to rewrite misses committed data (module
    docstring). `before`: the action's instant (base files written from it on are not the slices' concern). With
    `full`, log files are also read block by block; without, only sizes from one listing per partition count.
    `listing`: a storage listing by partition the caller already made (sizes are taken from it, nothing listed)."""
    pairs = list(slices)
    if not pairs:
        return
    known = committed if committed is not None else CommittedFiles.of(table, timeline, before)
    sizes = _sizes(table, {p for p, _ in pairs}, listing)
    for partition, s in pairs:
        _check_slice(table, known, sizes, partition, s, full)


def _sizes(
    table: HudiTable, partitions: Iterable[str], listing: Mapping[str, Sequence[FileInfo]] | None
) -> dict[str, int]:
    """Sizes of the files in `partitions` (from `listing`, else one listing each), by path relative to the base
    path: what storage holds, never what the metadata table says it should."""
    out: dict[str, int] = {}
    for partition in partitions:
        files = (
            listing.get(partition, ())
            if listing is not None
            else table.storage.list(partition_location(table.base_path, partition))
        )
        for fi in files:
            if not fi.is_dir:
                out[f"{partition}/{fi.name}" if partition else fi.name] = fi.size
    return out


def _relative(table: HudiTable, location: str) -> str:
    base = table.base_path.rstrip("/") + "/"
    return location[len(base) :] if location.startswith(base) else location


def _check_slice(
    table: HudiTable, known: CommittedFiles, sizes: Mapping[str, int], partition: str, s: InputSlice, full: bool
) -> None:
    name = table.name
    latest = known.latest_base.get((partition, s.file_id))
    base_path = _relative(table, s.base_file) if s.base_file else None
    if latest is not None and (base_path is None or s.base_instant_time < latest[0]):
        t, path = latest
        raise DamagedInputError(
            f"base file {path} written by completed instant {t} is missing: file group {s.file_id} would be "
            "rewritten from older data",
            instant_time=t,
            table=name,
            path=join(table.base_path, path),
        )
    if base_path is not None:
        recorded = known.base_files.get(base_path)
        actual = sizes.get(base_path)
        instant = recorded[1] if recorded is not None else s.base_instant_time
        if actual is None:
            raise DamagedInputError(
                f"base file {base_path} of completed instant {instant} is missing",
                instant_time=instant,
                table=name,
                path=s.base_file,
            )
        if recorded is not None and recorded[0] is not None and recorded[0] != actual:
            raise DamagedInputError(
                f"base file {base_path} holds {actual} bytes, instant {instant} committed {recorded[0]}",
                instant_time=instant,
                table=name,
                path=s.base_file,
            )
    for location in s.log_files:
        _check_log_file(table, known, sizes, location, full)


def _check_log_file(
    table: HudiTable, known: CommittedFiles, sizes: Mapping[str, int], location: str, full: bool
) -> None:
    path = _relative(table, location)
    ranges = known.log_ranges.get(path, [])
    actual = sizes.get(path)
    if actual is None:
        t = max((r.instant_time for r in ranges), default="")
        raise DamagedInputError(
            f"log file {path} is missing" + (f" (written by completed instant {t})" if t else ""),
            instant_time=t,
            table=table.label,
            path=location,
        )
    if not ranges:
        return
    last = max(ranges, key=lambda r: r.end)
    if actual < last.end:
        raise DamagedInputError(
            f"log file {path} holds {actual} bytes, completed instant {last.instant_time} committed bytes "
            f"{last.start}..{last.end}",
            instant_time=last.instant_time,
            table=table.label,
            path=location,
        )
    if not full:
        return
    try:
        with known_sizes({location: actual}):  # the listing's size: no HEAD to open it
            blocks = list(iter_log_blocks(table.storage, location, table=table.label, eager_content_limit=0))
    except TableServiceError as e:
        raise e.with_context(table=table.label, path=location) from e
    for block in blocks:
        if not isinstance(block, CorruptBlock):
            continue
        start, end = block.offset, block.offset + block.length
        hit = next((r for r in ranges if start < r.end and r.start < end), None)
        if hit is not None:
            raise DamagedInputError(
                f"log file {path} has a corrupt block at bytes {start}..{end} ({block.reason}) inside the range "
                f"{hit.start}..{hit.end} completed instant {hit.instant_time} committed",
                instant_time=hit.instant_time,
                table=table.label,
                path=location,
            )
