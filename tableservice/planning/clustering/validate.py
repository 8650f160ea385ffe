"""Checking a clustering plan (ours or a Hudi writer's) before executing it, and resolving its files.

Clustering plans name files by absolute path, written by whichever process made the plan (`file:/...`,
`s3a://...`). Before anything is read or written:

- the plan has input groups; every group has slices, all of one partition, and `numOutputFileGroups` >= 0;
- every slice names a file id, its file group once in the whole plan, a base file and/or log files, and no
  bootstrap file;
- every path resolves inside the table (`plan_paths.resolve_absolute`; a plan written before the table moved
  keeps working) and into the slice's partition folder; the names parse as base / log files of the slice's
  file id, written by instants older than the clustering instant;
- the file group exists in the view, is not replaced, is not under pending compaction or log compaction, and
  is not under another pending clustering;
- every named file is in the listing, all in one slice of the file group (whose key becomes the slice's
  `base_instant_time`).

Problems raise InvalidPlanError naming the plan file and the offending value; a named file that does not
exist raises FileMissingError.
"""

from __future__ import annotations

from dataclasses import dataclass

from tableservice.errors import FileMissingError, InvalidPlanError
from tableservice.hudi.action.cluster import SliceInput
from tableservice.hudi.action.plan_paths import relative_to_table
from tableservice.hudi.file_group.filenames import check_relative_path, parse_base_file_name, parse_log_file_name
from tableservice.hudi.models import HoodieClusteringGroup, HoodieClusteringPlan, HoodieSliceInfo
from tableservice.hudi.table.fs_view import FileGroup, FileGroupId, FileSlice, FileSystemView
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Instant


@dataclass(frozen=True)
class ClusteringGroupInput:
    """One group of a plan with its slices resolved to locations of this table (log files in log order)."""

    index: int
    partition: str
    slices: tuple[SliceInput, ...]
    num_output_file_groups: int
    metrics: dict[str, float]
    input_bytes: int  # base + log bytes of the named files (for balancing tasks)
    group: HoodieClusteringGroup
    log_bytes: int = 0  # of which log files

    @property
    def file_group_ids(self) -> list[FileGroupId]:
        return [(self.partition, s.file_id) for s in self.slices]


class _Checker:
    def __init__(self, table: HudiTable, view: FileSystemView, instant: Instant, plan_file: str) -> None:
        self.table = table
        self.view = view
        self.instant = instant
        self.plan_file = plan_file
        self.groups: dict[FileGroupId, FileGroup] = {g.id: g for g in view.all_file_groups()}
        self.seen: set[FileGroupId] = set()

    def bad(self, problem: str) -> InvalidPlanError:
        return InvalidPlanError(problem, table=self.table.label, path=self.plan_file)

    def _name_in_partition(self, raw: str, partition: str, what: str) -> str:
        """The file name an absolute plan path names, checked to lie in the partition folder."""
        try:
            rel = relative_to_table(self.table.base_path, raw, plan_file=self.plan_file)
        except InvalidPlanError as e:
            raise e.with_context(table=self.table.label) from e
        folder, _, name = rel.rpartition("/")
        if folder != partition:
            raise self.bad(f"{what} {raw!r} is not in partition {partition!r}")
        return name

    def _check_state(self, fg: FileGroupId) -> FileGroup:
        partition, file_id = fg
        where = f"file group {file_id!r} in partition {partition!r}"
        if fg in self.seen:
            raise self.bad(f"{where} appears twice")
        self.seen.add(fg)
        inputs = self.view.inputs
        if fg in inputs.pending_compaction:
            raise self.bad(f"{where} is under pending compaction {inputs.pending_compaction[fg]}")
        if fg in inputs.pending_log_compaction:
            raise self.bad(f"{where} is under pending log compaction {inputs.pending_log_compaction[fg]}")
        other = inputs.pending_clustering.get(fg)
        if other is not None and other != self.instant.requested_time:
            raise self.bad(f"{where} is also under pending clustering {other}")
        group = self.groups.get(fg)
        if group is None:
            raise self.bad(f"{where} does not exist")
        if self.view.is_replaced(fg):
            raise self.bad(f"{where} was replaced at {inputs.replaced.get(fg)}")
        return group

    def _older(self, instant_time: str, raw: str) -> None:
        if instant_time >= self.instant.requested_time:
            raise self.bad(f"{raw!r} was written at {instant_time}, not before clustering {self.instant}")

    def resolve_slice(self, info: HoodieSliceInfo, partition: str) -> tuple[SliceInput, int, int]:
        """The slice's locations, its bytes (base and logs) and its log bytes."""
        file_id = info.file_id or ""
        if not file_id:
            raise self.bad(f"a slice in partition {partition!r} has no fileId")
        if info.bootstrap_file_path:
            raise self.bad(f"slice of file group {file_id!r} names a bootstrap file; bootstrap tables are unsupported")
        # Paths first: nothing outside the table is even looked up.
        base_name = None
        if info.data_file_path:
            base_name = self._name_in_partition(info.data_file_path, partition, "dataFilePath")
            parsed = parse_base_file_name(base_name)
            if parsed is None or parsed.file_id != file_id:
                raise self.bad(f"dataFilePath {info.data_file_path!r} is not a base file of file group {file_id!r}")
            self._older(parsed.instant_time, info.data_file_path)
        log_names = []
        for raw in info.delta_file_paths or ():
            name = self._name_in_partition(raw, partition, "deltaFilePath")
            parsed_log = parse_log_file_name(name)
            if parsed_log is None or parsed_log.file_id != file_id:
                raise self.bad(f"deltaFilePath {raw!r} is not a log file of file group {file_id!r}")
            self._older(parsed_log.instant_time, raw)
            log_names.append(name)
        if base_name is None and not log_names:
            raise self.bad(f"slice of file group {file_id!r} names no file")
        group = self._check_state((partition, file_id))
        slice_ = self._slice_holding(group, base_name, log_names)
        by_name = {lf.file_name: lf for lf in slice_.log_files}
        logs = sorted((by_name[n] for n in log_names), key=lambda lf: lf.name.sort_key)
        log_size = sum(lf.size for lf in logs)
        size = (slice_.base_file.size if base_name is not None and slice_.base_file else 0) + log_size
        base = slice_.base_file.location if base_name is not None and slice_.base_file is not None else None
        sizes = tuple((lf.location, lf.size) for lf in logs)
        if base is not None and slice_.base_file is not None:
            sizes = ((base, slice_.base_file.size), *sizes)
        found = SliceInput(file_id, slice_.base_instant_time, base, tuple(lf.location for lf in logs), sizes)
        return found, size, log_size

    def _slice_holding(self, group: FileGroup, base_name: str | None, log_names: list[str]) -> FileSlice:
        wanted = ([base_name] if base_name is not None else []) + log_names
        holder: FileSlice | None = None
        for name in wanted:
            found = next((s for s in group.slices if name in _names(s)), None)
            if found is None:
                raise FileMissingError(
                    f"file {name!r} of file group {group.file_id!r} named by the plan does not exist",
                    table=self.table.label,
                    path=self.plan_file,
                )
            if holder is not None and found.base_instant_time != holder.base_instant_time:
                raise self.bad(
                    f"files of file group {group.file_id!r} named by the plan belong to different file slices "
                    f"({holder.base_instant_time} and {found.base_instant_time})"
                )
            holder = found
        assert holder is not None
        return holder


def _names(s: FileSlice) -> set[str]:
    out = {lf.file_name for lf in s.log_files}
    if s.base_file is not None:
        out.add(s.base_file.file_name)
    return out


def validate_clustering_plan(
    table: HudiTable,
    instant: Instant,
    plan: HoodieClusteringPlan,
    *,
    plan_file: str,
    timeline: Timeline | None = None,
    view: FileSystemView | None = None,
) -> list[ClusteringGroupInput]:
    """The groups of `plan` (the plan of clustering `instant`) resolved against the table, in plan order.
    `timeline` / `view` default to the table's current ones."""
    tl = timeline if timeline is not None else table.timeline()
    fsv = view if view is not None else table.file_system_view(timeline=tl)
    checker = _Checker(table, fsv, instant, plan_file)
    if not plan.input_groups:
        raise checker.bad("the clustering plan has no input groups")
    out = []
    for index, group in enumerate(plan.input_groups):
        if not group.slices:
            raise checker.bad(f"input group {index} has no slices")
        partitions = {s.partition_path or "" for s in group.slices}
        if len(partitions) != 1:
            raise checker.bad(f"input group {index} mixes partitions {sorted(partitions)}")
        partition = partitions.pop()
        if partition:
            try:
                check_relative_path(partition, what="partition path", source=plan_file)
            except InvalidPlanError as e:
                raise e.with_context(table=table.label) from e
        outputs = group.num_output_file_groups if group.num_output_file_groups is not None else 1
        if outputs < 0:
            raise checker.bad(f"input group {index} has numOutputFileGroups {outputs}")
        resolved = [checker.resolve_slice(s, partition) for s in group.slices]
        out.append(
            ClusteringGroupInput(
                index=index,
                partition=partition,
                slices=tuple(s for s, _, _ in resolved),
                num_output_file_groups=outputs,
                metrics=dict(group.metrics or {}),
                input_bytes=sum(size for _, size, _ in resolved),
                log_bytes=sum(size for _, _, size in resolved),
                group=group,
            )
        )
    return out
