"""File-system view: partitions → file groups → file slices, as of any instant.

Slicing rules (checked against hudi-rs and Hudi's Java view on real tables; see HUDI-FORMAT-NOTES.md):

- A committed base file makes the slice keyed by its instant.
- Table version 6: a log file joins the slice keyed by the instant in its name (the slice's base instant). A
  pending compaction at C adds an empty slice C; log files named with C land in it.
- Versions 8 and 9: after base files and pending-compaction slices, each log file whose delta commit
  completed at T joins the slice with the largest key ≤ T; with no such key, a new slice keyed by the delta
  commit's requested time. Log files of delta commits that are not completed are not data.
- "Committed" means completed on the active timeline, or older than its first instant (archived).
- File groups replaced by a completed replace commit (clustering, insert overwrite) are hidden.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from tableservice.hudi.file_group.filenames import (
    PARTITION_METADATA_FILE,
    BaseFileName,
    LogFileName,
    parse_base_file_name,
    parse_log_file_name,
)
from tableservice.hudi.timeline.active import Timeline
from tableservice.storage import FileInfo, join

FileGroupId = tuple[str, str]  # (partition path, file id)


@dataclass(frozen=True)
class BaseFile:
    location: str
    name: BaseFileName
    size: int

    @property
    def file_name(self) -> str:
        return self.name.name

    @property
    def instant_time(self) -> str:
        return self.name.instant_time


@dataclass(frozen=True)
class LogFile:
    location: str
    name: LogFileName
    size: int

    @property
    def file_name(self) -> str:
        return self.name.name

    @property
    def instant_time(self) -> str:
        return self.name.instant_time


@dataclass(frozen=True)
class FileSlice:
    partition_path: str
    file_id: str
    base_instant_time: str
    base_file: BaseFile | None = None
    log_files: tuple[LogFile, ...] = ()

    @property
    def file_group_id(self) -> FileGroupId:
        return (self.partition_path, self.file_id)

    @property
    def is_empty(self) -> bool:
        return self.base_file is None and not self.log_files

    @property
    def total_size(self) -> int:
        return (self.base_file.size if self.base_file else 0) + sum(lf.size for lf in self.log_files)

    @property
    def log_size(self) -> int:
        return sum(lf.size for lf in self.log_files)

    def files(self) -> list[str]:
        out = [self.base_file.location] if self.base_file else []
        out.extend(lf.location for lf in self.log_files)
        return out


@dataclass(frozen=True)
class FileGroup:
    partition_path: str
    file_id: str
    slices: tuple[FileSlice, ...]  # newest first

    @property
    def id(self) -> FileGroupId:
        return (self.partition_path, self.file_id)

    def latest_slice(self) -> FileSlice | None:
        return self.slices[0] if self.slices else None

    def slice_as_of(self, instant_time: str) -> FileSlice | None:
        for s in self.slices:
            if s.base_instant_time <= instant_time:
                return s
        return None


@dataclass(frozen=True)
class ViewInputs:
    """What the view needs from the timeline's metadata files, decoded by the caller."""

    # File groups replaced by completed replace commits → the replace commit's requested time.
    replaced: Mapping[FileGroupId, str] = field(default_factory=dict)
    # File groups in pending compaction plans → the compaction's instant time.
    pending_compaction: Mapping[FileGroupId, str] = field(default_factory=dict)
    # File groups in pending log-compaction plans → instant.
    pending_log_compaction: Mapping[FileGroupId, str] = field(default_factory=dict)
    # File groups in pending clustering plans → instant.
    pending_clustering: Mapping[FileGroupId, str] = field(default_factory=dict)

    def under_pending_services(self) -> set[FileGroupId]:
        """File groups no new compaction or clustering plan may take: under pending compaction, log compaction or
        clustering."""
        return set(self.pending_compaction) | set(self.pending_log_compaction) | set(self.pending_clustering)


def partitions_from_listing(base_path: str, files: Iterable[FileInfo]) -> dict[str, list[FileInfo]]:
    """Group a recursive listing of the table by partition (folders holding partition metadata).

    Files under `.hoodie` and other hidden top-level folders are ignored. Keys are partition paths relative
    to the base path ("" for a non-partitioned table).
    """
    prefix = base_path.rstrip("/") + "/"
    by_folder: dict[str, list[FileInfo]] = defaultdict(list)
    partitions: set[str] = set()
    for fi in files:
        if fi.is_dir or not fi.location.startswith(prefix):
            continue
        rel = fi.location[len(prefix) :]
        folder, _, name = rel.rpartition("/")
        if any(seg.startswith(".") for seg in folder.split("/") if seg):
            continue
        if name.startswith(PARTITION_METADATA_FILE):
            partitions.add(folder)
        by_folder[folder].append(fi)
    return {p: by_folder.get(p, []) for p in sorted(partitions)}


class FileSystemView:
    """File groups of a table as of an instant, built from one listing and the timeline."""

    def __init__(
        self,
        base_path: str,
        table_version: int,
        timeline: Timeline,
        partition_files: Mapping[str, list[FileInfo]],
        inputs: ViewInputs | None = None,
        *,
        as_of: str | None = None,
        completion_time: Callable[[str], str | None] | None = None,
    ) -> None:
        self.base_path = base_path
        self.table_version = table_version
        self.timeline = timeline
        self.inputs = inputs if inputs is not None else ViewInputs()
        self.as_of = as_of
        self._completion_time = completion_time
        completed = timeline.completed()
        self._completed_times = {i.requested_time: i.completion_time for i in completed}
        self._timeline_start = timeline.commits_start()
        self._pending_times = frozenset(i.requested_time for i in timeline.pending())
        self._groups: dict[str, list[FileGroup]] = {
            p: self._build_partition(p, files) for p, files in partition_files.items()
        }

    # --- committed checks --------------------------------------------------------------------------

    def _archived(self, t: str) -> bool:
        return self._timeline_start is not None and t < self._timeline_start and t not in self._pending_times

    def _within(self, t: str) -> bool:
        return self.as_of is None or t <= self.as_of

    def is_committed(self, t: str) -> bool:
        return (t in self._completed_times or self._archived(t)) and self._within(t)

    def completion_time_of(self, t: str) -> str | None:
        done = self._completed_times.get(t)
        if done is not None:
            return done
        if self._archived(t):
            if self._completion_time is not None:
                found = self._completion_time(t)
                if found is not None:
                    return found
            return t
        return None

    # --- building ----------------------------------------------------------------------------------

    def _build_partition(self, partition: str, files: list[FileInfo]) -> list[FileGroup]:
        bases: dict[str, list[BaseFile]] = defaultdict(list)
        logs: dict[str, list[LogFile]] = defaultdict(list)
        for fi in files:
            name = fi.name
            parsed_log = parse_log_file_name(name) if name.startswith(".") else None
            if parsed_log is not None:
                if not parsed_log.cdc and parsed_log.extension == "log":
                    logs[parsed_log.file_id].append(LogFile(fi.location, parsed_log, fi.size))
                continue
            parsed_base = parse_base_file_name(name)
            if parsed_base is not None and self.is_committed(parsed_base.instant_time):
                bases[parsed_base.file_id].append(BaseFile(fi.location, parsed_base, fi.size))
        groups = []
        for file_id in sorted(set(bases) | set(logs)):
            pending_c = self.inputs.pending_compaction.get((partition, file_id))
            group = self._build_group(partition, file_id, bases.get(file_id, []), logs.get(file_id, []), pending_c)
            if group.slices:
                groups.append(group)
        return groups

    def _build_group(
        self, partition: str, file_id: str, bases: list[BaseFile], logs: list[LogFile], pending_compaction: str | None
    ) -> FileGroup:
        slice_bases: dict[str, BaseFile | None] = {b.instant_time: b for b in bases}
        if pending_compaction is not None and self._within(pending_compaction):
            slice_bases.setdefault(pending_compaction, None)
        slice_logs: dict[str, list[LogFile]] = defaultdict(list)
        if self.table_version < 8:
            for lf in logs:
                t = lf.instant_time
                if not self._within(t):
                    continue
                if t not in slice_bases:
                    # A slice started by log files (no base yet): it exists once its instant committed.
                    if not self.is_committed(t):
                        continue
                    slice_bases[t] = None
                slice_logs[t].append(lf)
        else:
            keyed: list[tuple[str, LogFile]] = []
            for lf in logs:
                t = lf.instant_time
                if not self.is_committed(t):
                    continue
                done = self.completion_time_of(t)
                keyed.append((done if done is not None else t, lf))
            keyed.sort(key=lambda kv: kv[0])
            for done, lf in keyed:
                keys = sorted(slice_bases)
                idx = bisect.bisect_right(keys, done) - 1
                if idx >= 0:
                    slice_logs[keys[idx]].append(lf)
                else:
                    slice_bases[lf.instant_time] = None
                    slice_logs[lf.instant_time].append(lf)
        slices = []
        for key in sorted(slice_bases, reverse=True):
            slices.append(
                FileSlice(
                    partition_path=partition,
                    file_id=file_id,
                    base_instant_time=key,
                    base_file=slice_bases[key],
                    log_files=tuple(sorted(slice_logs.get(key, []), key=lambda lf: lf.name.sort_key)),
                )
            )
        return FileGroup(partition, file_id, tuple(slices))

    # --- queries -----------------------------------------------------------------------------------

    def partitions(self) -> list[str]:
        return sorted(self._groups)

    def is_replaced(self, fg: FileGroupId) -> bool:
        replaced_at = self.inputs.replaced.get(fg)
        return replaced_at is not None and self._within(replaced_at)

    def all_file_groups(self, partition: str | None = None) -> list[FileGroup]:
        """Every file group, replaced ones included (cleaning needs them)."""
        parts = [partition] if partition is not None else self.partitions()
        return [g for p in parts for g in self._groups.get(p, [])]

    def file_groups(self, partition: str | None = None) -> list[FileGroup]:
        """File groups visible to readers: replaced groups hidden."""
        return [g for g in self.all_file_groups(partition) if not self.is_replaced(g.id)]

    def latest_slices(self, partition: str | None = None) -> list[FileSlice]:
        """The newest slice of each visible file group (as of the view's instant)."""
        out = []
        for g in self.file_groups(partition):
            s = g.latest_slice()
            if s is not None:
                out.append(s)
        return out

    def latest_merged_slices(self, partition: str | None = None) -> list[FileSlice]:
        """Latest slices for reading: a slice opened by a pending compaction is merged with the one before it,
        so that the base file of the previous slice and the log files of both are read together."""
        out = []
        for g in self.file_groups(partition):
            s = merged_latest_slice(g, self.inputs.pending_compaction.get(g.id))
            if s is not None:
                out.append(s)
        return out

    def latest_base_files(self, partition: str | None = None) -> list[BaseFile]:
        """The read-optimized view: the newest committed base file of each visible file group."""
        out = []
        for g in self.file_groups(partition):
            for s in g.slices:
                if s.base_file is not None:
                    out.append(s.base_file)
                    break
        return out


def merged_latest_slice(group: FileGroup, pending_compaction: str | None) -> FileSlice | None:
    latest = group.latest_slice()
    if latest is None:
        return None
    if latest.base_file is not None or pending_compaction != latest.base_instant_time or len(group.slices) < 2:
        return latest
    previous = group.slices[1]
    return FileSlice(
        partition_path=previous.partition_path,
        file_id=previous.file_id,
        base_instant_time=previous.base_instant_time,
        base_file=previous.base_file,
        log_files=previous.log_files + latest.log_files,
    )


def partition_location(base_path: str, partition: str) -> str:
    return join(base_path, partition) if partition else base_path
