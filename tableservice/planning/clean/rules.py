"""Which files of one partition a clean deletes: Hudi's CleanPlanner rules over our file-system view.

Sources: `CleanPlanner.getFilesToCleanKeepingLatestCommits`, `getFilesToCleanKeepingLatestVersions`,
`getReplacedFilesEligibleToClean`, `isFileSliceNeededForPendingMajorOrMinorCompaction`,
`isFileSliceExistInSavepointedFiles`, `hasPendingFiles` and `noSubsequentReplaceCommit` (Hudi 1.x).

- A slice is protected when a savepoint names its base file or any of its log files, or when a pending compaction
  or log compaction of its file group needs it (its base instant ≥ the operation's base instant). We also protect
  slices whose files a pending clustering plan reads (Hudi relies on those being the latest slices).
- KEEP_LATEST_COMMITS / KEEP_LATEST_BY_HOURS (only once the table has more completed commits than are retained):
  every slice of a file group replaced by a completed replace commit requested before the earliest commit to
  retain (ECTR); in every other, non-replaced file group, each slice with base instant < ECTR, except the latest
  slice and the latest slice before ECTR. Groups replaced at or after ECTR keep everything.
- KEEP_LATEST_FILE_VERSIONS: every slice of every replaced file group; in the others, slices after the newest V
  (V − 1 when the group is under pending compaction, slices the compaction needs not counted).
- Both the base file and the log files of a deleted slice are deleted.
- Partition deletion: the partition has no file group left that is not replaced, no file of a pending write,
  and (commit-based policies) no file group replaced at or after ECTR. The non-partitioned table's base path
  is never deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tableservice.hudi.table.fs_view import FileGroup, FileGroupId, FileSlice, FileSystemView
from tableservice.planning.clean.policy import CleanerPolicyName


@dataclass(frozen=True)
class Retention:
    """What protects file slices from a clean, gathered from the timeline."""

    policy: CleanerPolicyName
    earliest_to_retain: str | None  # requested time of the ECTR (None: no ECTR)
    enough_commits: bool  # the table has more completed commits than the policy retains
    file_versions: int = 3
    savepointed_files: frozenset[str] = frozenset()
    # File group → base instant of the slice a pending compaction / log compaction operation reads.
    pending_compaction_base: Mapping[FileGroupId, str] = field(default_factory=dict)
    pending_log_compaction_base: Mapping[FileGroupId, str] = field(default_factory=dict)
    clustering_files: frozenset[str] = frozenset()  # file names read by pending clustering plans


@dataclass(frozen=True)
class PartitionClean:
    partition: str
    slices: tuple[FileSlice, ...]  # slices whose files are deleted, in Hudi's order
    delete_partition: bool

    def files(self) -> list[str]:
        return [loc for s in self.slices for loc in s.files()]


def _file_names(slice_: FileSlice) -> list[str]:
    names = [slice_.base_file.file_name] if slice_.base_file is not None else []
    names.extend(lf.file_name for lf in slice_.log_files)
    return names


def is_savepointed(slice_: FileSlice, retention: Retention) -> bool:
    return any(name in retention.savepointed_files for name in _file_names(slice_))


def needed_by_pending_service(slice_: FileSlice, retention: Retention) -> bool:
    fg = slice_.file_group_id
    for bases in (retention.pending_compaction_base, retention.pending_log_compaction_base):
        base = bases.get(fg)
        if base is not None and slice_.base_instant_time >= base:
            return True
    return any(name in retention.clustering_files for name in _file_names(slice_))


def _in_pending_compaction(group: FileGroup, retention: Retention) -> bool:
    return group.id in retention.pending_compaction_base or group.id in retention.pending_log_compaction_base


def _replaced_slices(
    view: FileSystemView, groups: list[FileGroup], retention: Retention, before: str | None
) -> list[FileSlice]:
    out: list[FileSlice] = []
    for group in groups:
        replaced_at = view.inputs.replaced.get(group.id)
        if replaced_at is None or (before is not None and not replaced_at < before):
            continue
        out.extend(s for s in group.slices if not s.is_empty and not is_savepointed(s, retention))
    return out


def _latest_before(group: FileGroup, instant_time: str) -> str | None:
    for s in group.slices:  # newest first
        if s.base_instant_time < instant_time:
            return s.base_instant_time
    return None


def _by_commits(view: FileSystemView, partition: str, retention: Retention) -> tuple[list[FileSlice], list[FileGroup]]:
    ectr = retention.earliest_to_retain
    assert ectr is not None
    groups = view.all_file_groups(partition)
    deleted = _replaced_slices(view, groups, retention, ectr)
    active = [g for g in groups if g.id not in view.inputs.replaced]
    for group in active:
        if not group.slices:
            continue
        latest = group.slices[0].base_instant_time
        latest_before = _latest_before(group, ectr)
        for s in group.slices:
            t = s.base_instant_time
            if is_savepointed(s, retention) or t in (latest, latest_before):
                continue
            if t < ectr and not needed_by_pending_service(s, retention) and not s.is_empty:
                deleted.append(s)
    return deleted, active


def _by_versions(view: FileSystemView, partition: str, retention: Retention) -> tuple[list[FileSlice], list[FileGroup]]:
    groups = view.all_file_groups(partition)
    deleted = _replaced_slices(view, groups, retention, None)
    active = [g for g in groups if g.id not in view.inputs.replaced]
    for group in active:
        keep = retention.file_versions - (1 if _in_pending_compaction(group, retention) else 0)
        candidates = [s for s in group.slices if not needed_by_pending_service(s, retention)]
        for s in candidates[max(keep, 0) :]:
            if not is_savepointed(s, retention) and not s.is_empty:
                deleted.append(s)
    return deleted, active


def _replaced_at_or_after(view: FileSystemView, partition: str, instant_time: str) -> bool:
    """Hudi's `getReplacedFileGroupsAfterOrOn`: a file group of the partition replaced at or after the instant."""
    for group in view.all_file_groups(partition):
        replaced_at = view.inputs.replaced.get(group.id)
        if replaced_at is not None and replaced_at >= instant_time:
            return True
    return False


def partition_clean(
    view: FileSystemView,
    partition: str,
    retention: Retention,
    has_pending_files: Callable[[str], bool],
) -> PartitionClean:
    """The slices of `partition` a clean deletes and whether the partition itself goes."""
    if retention.policy is CleanerPolicyName.KEEP_LATEST_FILE_VERSIONS:
        deleted, active = _by_versions(view, partition, retention)
        delete_partition = not active and not has_pending_files(partition)
    else:
        if not retention.enough_commits or retention.earliest_to_retain is None:
            return PartitionClean(partition, (), False)
        ectr = retention.earliest_to_retain
        deleted, active = _by_commits(view, partition, retention)
        delete_partition = (
            not active and not _replaced_at_or_after(view, partition, ectr) and not has_pending_files(partition)
        )
    return PartitionClean(partition, tuple(deleted), delete_partition and partition != "")
