"""Clean planning: which file slices a clean at a new instant deletes, as Hudi would plan them.

`plan_clean` follows Hudi 1.x's CleanPlanActionExecutor + CleanPlanner + CleanerUtils (the per-partition rules
are in `clean_rules`):

1. Earliest commit to retain (ECTR, `CleanerUtils.getEarliestCommitToRetain`), over completed write instants
   (commit, deltacommit, replacecommit, compaction, log compaction, clustering) in requested-time order:
   KEEP_LATEST_COMMITS with more than N of them → the N-th newest, unless a write instant is pending before it:
   then the last completed one before the earliest pending write (none → no ECTR). KEEP_LATEST_BY_HOURS → the
   first completed one requested at or after now − H (in the table's timeline time zone).
   KEEP_LATEST_FILE_VERSIONS → none.
2. Partitions (`getPartitionPathsToClean`): KEEP_LATEST_FILE_VERSIONS → every partition. Commit-based policies:
   none without an ECTR; in incremental mode, when the last completed clean recorded an ECTR that is not before
   the start of the active timeline and no savepoint it recorded (`savepointed_timestamps`) is gone, only the
   partitions written (write stats, and replaced file ids of replace commits) by completed write instants
   requested in [previous ECTR, new ECTR), plus (our addition) the partitions where that clean failed to delete
   files; otherwise every partition.
3. Per partition: `clean_rules.partition_clean`.
4. Plan (`HoodieCleanerPlan`, version 2): `earliestInstantToRetain` = `{timestamp, action of the completed
   instant, "COMPLETED"}` or null, `lastCompletedCommitTimestamp` = requested time of the last completed commit
   (deltacommit, replacecommit...), `policy`, `filesToBeDeletedPerPartition` = {} (deprecated),
   `filePathsToBeDeletedPerPartition` = partitions with at least one file → `{filePath, isBootstrapBaseFile:
   false}`, absolute paths rendered as Hudi renders them (`file:/...` for local tables, the table's URI
   otherwise), `partitionsToBeDeleted`, `extraMetadata` = {} or `{"savepointed_timestamps": "t1,t2"}` (partitioned
   tables with savepoints). No plan (None) when it would delete nothing; Hudi's optional empty "checkpoint"
   cleans (`hoodie.clean.empty.commit.interval.hours`) are not written.

Savepoints share the requested time of the commit they protect (`<t>.savepoint.inflight`, `<t>.savepoint`);
`load_clean_timeline` returns the timeline without them and the completed savepoints beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, TypeVar, cast

from tableservice.errors import InvalidPlanError, InvalidTimelineError, TableServiceError
from tableservice.hudi.action.plan_paths import plan_location
from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.hudi.models import (
    HoodieActionInstant,
    HoodieCleanerPlan,
    HoodieCleanFileInfo,
    HoodieCleanMetadata,
    HoodieReplaceCommitMetadata,
    HoodieSavepointMetadata,
    decode_clean_metadata,
    decode_savepoint_metadata,
)
from tableservice.hudi.table.fs_view import FileGroupId, FileSystemView, partition_location
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import (
    Action,
    Instant,
    State,
    format_instant_time,
    timeline_timezone,
)
from tableservice.planning.clean.policy import CleanerPolicyName, CleanPolicy
from tableservice.planning.clean.rules import PartitionClean, Retention, partition_clean

PLAN_VERSION = 2
T = TypeVar("T")
SAVEPOINTED_TIMESTAMPS = "savepointed_timestamps"

__all__ = [
    "PLAN_VERSION",
    "SAVEPOINTED_TIMESTAMPS",
    "CleanPlanner",
    "CleanPolicy",
    "CleanTimeline",
    "CleanerPolicyName",
    "clean_due",
    "earliest_commit_to_retain",
    "hudi_location",
    "last_completed_clean",
    "load_clean_timeline",
    "partitions_to_clean",
    "plan_clean",
]


# --- timeline --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CleanTimeline:
    """The active timeline without savepoint files, and the completed savepoints (oldest first)."""

    timeline: Timeline
    savepoints: tuple[Instant, ...]


def load_clean_timeline(table: HudiTable) -> CleanTimeline:
    """A fresh load of the timeline (one listing), split into the timeline proper and the completed savepoints."""
    return _split(table.reload())


def _split(timeline: Timeline) -> CleanTimeline:
    return CleanTimeline(
        timeline.filter(lambda i: i.action is not Action.SAVEPOINT), tuple(timeline.savepoints().instants)
    )


def _clean_timeline(table: HudiTable, timeline: Timeline | None) -> CleanTimeline:
    return load_clean_timeline(table) if timeline is None else _split(timeline)


def last_completed_clean(table: HudiTable, timeline: Timeline) -> tuple[Instant, HoodieCleanMetadata] | None:
    """The newest completed clean and its metadata (None when there is none, or its file is empty)."""
    cleans = [i for i in timeline.completed() if i.action is Action.CLEAN]
    if not cleans:
        return None
    instant = cleans[-1]
    md = _completed_metadata(table, instant, _decode_clean)
    return (instant, md) if md is not None else None


_CACHE: dict[str, Any] = {}
_CACHE_SIZE = 1024


def _completed_metadata(table: HudiTable, instant: Instant, decode: Callable[[bytes, str], T]) -> T | None:
    """Decode a completed instant's file once (completed files never change); None for an empty file."""
    path = table.active.path_of(instant)
    key = f"{path}#{decode.__name__}"
    if key in _CACHE:
        return cast(T, _CACHE[key])
    data = table.storage.read_bytes(path)
    if not data:
        return None
    try:
        value = decode(data, path)
    except TableServiceError as e:
        raise e.with_context(table=table.label) from e
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = value
    return value


def _decode_clean(data: bytes, path: str) -> HoodieCleanMetadata:
    return decode_clean_metadata(data, path=path)


def _decode_savepoint(data: bytes, path: str) -> HoodieSavepointMetadata:
    return decode_savepoint_metadata(data, path=path)


# --- ECTR and trigger ------------------------------------------------------------------------------


def earliest_commit_to_retain(
    timeline: Timeline, policy: CleanPolicy, *, now: datetime | None = None, tz: tzinfo = UTC
) -> Instant | None:
    """Hudi's `CleanerUtils.getEarliestCommitToRetain` (see the module docstring)."""
    writes = timeline.write_instants()
    completed = writes.completed().instants
    if policy.policy is CleanerPolicyName.KEEP_LATEST_COMMITS:
        n = policy.commits_retained
        if len(completed) <= n:
            return None
        nth = completed[len(completed) - n]
        pending = writes.pending().first()
        if pending is not None and pending < nth:
            before = [i for i in completed if i.requested_time < pending.requested_time]
            return before[-1] if before else None
        return nth
    if policy.policy is CleanerPolicyName.KEEP_LATEST_BY_HOURS:
        moment = (now if now is not None else datetime.now(UTC)) - timedelta(hours=policy.hours_retained)
        cutoff = format_instant_time(moment, tz)
        return next((i for i in completed if i.requested_time >= cutoff), None)
    return None


def clean_due(table: HudiTable, timeline: Timeline | None, policy: CleanPolicy) -> tuple[bool, str]:
    """Hudi's NUM_COMMITS trigger (`CleanPlanActionExecutor.needsCleaning`): due once at least
    `hoodie.clean.max.commits` commits completed after the last clean's `lastCompletedCommitTimestamp` (every
    completed commit when there is no clean). Never due while another clean is pending (execute that first)."""
    if not policy.enabled:
        return False, "cleaning is disabled (tableservice.clean.enabled=false)"
    if timeline is None:
        tl = load_clean_timeline(table).timeline
    else:
        tl = timeline.filter(lambda i: i.action is not Action.SAVEPOINT)
    pending = tl.pending_of(Action.CLEAN).first()
    if pending is not None:
        return False, f"clean {pending.requested_time} is pending; it runs before a new one is planned"
    commits = tl.completed_writes()
    last = last_completed_clean(table, tl)
    if last is None:
        count, since = len(commits), "in the active timeline (no clean yet)"
    else:
        after = last[1].last_completed_commit_timestamp or ""
        count = sum(1 for i in commits if i.requested_time > after)
        since = f"after {after or 'the start'} (last clean {last[0].requested_time})"
    due = count >= policy.max_commits
    verdict = "due" if due else "not due"
    return due, f"{verdict}: {count} completed commits {since}, hoodie.clean.max.commits={policy.max_commits}"


# --- partitions ------------------------------------------------------------------------------------


def _partitions_of(table: HudiTable, instant: Instant) -> set[str]:
    md = table.commit_metadata(instant)
    parts = set((md.partition_to_write_stats or {}).keys())
    if isinstance(md, HoodieReplaceCommitMetadata):
        parts |= set((md.partition_to_replace_file_ids or {}).keys())
    return parts


def _savepoint_removed(md: HoodieCleanMetadata, savepoint_times: Iterable[str]) -> bool:
    recorded = (md.extra_metadata or {}).get(SAVEPOINTED_TIMESTAMPS, "")
    previous = {t for t in recorded.split(",") if t}
    return bool(previous - set(savepoint_times))


def partitions_to_clean(
    table: HudiTable,
    timeline: Timeline,
    policy: CleanPolicy,
    ectr: Instant | None,
    savepoint_times: Iterable[str],
    all_partitions: Iterable[str],
) -> list[str]:
    """The partitions a clean looks at (`CleanPlanner.getPartitionPathsToClean`), sorted."""
    every = sorted(all_partitions)
    if policy.policy is CleanerPolicyName.KEEP_LATEST_FILE_VERSIONS:
        return every
    if ectr is None:
        return []
    if not policy.incremental_mode:
        return every
    last = last_completed_clean(table, timeline)
    if last is None:
        return every
    md = last[1]
    previous = (md.earliest_commit_to_retain or "").strip()
    first = timeline.write_instants().first()
    if not previous or (first is not None and previous < first.requested_time):
        return every
    if _savepoint_removed(md, savepoint_times):
        return every
    # Files the last clean failed to delete stay eligible: look at their partitions again.
    touched = {p for p, pm in md.partition_metadata.items() if pm.failed_delete_files}
    for instant in timeline.completed_writes():
        if previous <= instant.requested_time < ectr.requested_time:
            touched |= _partitions_of(table, instant)
    return [p for p in every if p in touched]


# --- retention inputs ------------------------------------------------------------------------------


def _pending_bases(table: HudiTable, instants: Timeline) -> dict[FileGroupId, str]:
    out: dict[FileGroupId, str] = {}
    for instant in instants:
        for op in table.compaction_plan(instant).operations or ():
            fg = (op.partition_path or "", op.file_id or "")
            base = op.base_instant_time or ""
            out[fg] = min(base, out.get(fg, base))
    return out


def _clustering_files(table: HudiTable, timeline: Timeline) -> frozenset[str]:
    names: set[str] = set()
    for instant in table.pending_clustering(timeline):
        for group in table.clustering_plan(instant).input_groups or ():
            for s in group.slices or ():
                for path in (s.data_file_path, *(s.delta_file_paths or ())):
                    if path:
                        names.add(path.rstrip("/").rsplit("/", 1)[-1])
    return frozenset(names)


def _savepointed_files(table: HudiTable, savepoints: Iterable[Instant]) -> frozenset[str]:
    names: set[str] = set()
    for sp in savepoints:
        md = _completed_metadata(table, sp, _decode_savepoint)
        if md is None:
            raise InvalidPlanError("savepoint metadata is empty", table=table.label, path=table.active.path_of(sp))
        names |= md.savepointed_files()
    return frozenset(names)


class PendingFiles:
    """Hudi's `hasPendingFiles`: a partition holds a data file of a file group that is not replaced (the view
    built from completed instants has none there, so such a file belongs to a pending write)."""

    def __init__(self, table: HudiTable, view: FileSystemView) -> None:
        self.table = table
        self.view = view

    def __call__(self, partition: str) -> bool:
        folder = partition_location(self.table.base_path, partition)
        for fi in self.table.storage.list(folder):
            if fi.is_dir:
                continue
            parsed = parse_log_file_name(fi.name) if fi.name.startswith(".") else parse_base_file_name(fi.name)
            if parsed is not None and (partition, parsed.file_id) not in self.view.inputs.replaced:
                return True
        return False


def retention_for(
    table: HudiTable,
    timeline: Timeline,
    policy: CleanPolicy,
    ectr: Instant | None,
    savepoints: Iterable[Instant],
) -> Retention:
    completed = len(timeline.completed_writes())
    retained = policy.commits_retained if policy.policy is CleanerPolicyName.KEEP_LATEST_COMMITS else 0
    return Retention(
        policy=policy.policy,
        earliest_to_retain=ectr.requested_time if ectr is not None else None,
        enough_commits=completed > retained,
        file_versions=policy.file_versions_retained,
        savepointed_files=_savepointed_files(table, savepoints),
        pending_compaction_base=_pending_bases(table, timeline.pending_compactions()),
        pending_log_compaction_base=_pending_bases(table, timeline.pending_log_compactions()),
        clustering_files=_clustering_files(table, timeline),
    )


# --- the plan --------------------------------------------------------------------------------------


def hudi_location(table: HudiTable, location: str) -> str:
    """A location as Hudi renders absolute paths in plans (`file:/...` for local ones); one that is not absolute
    under the table's base path is refused (`plan_paths.plan_location`)."""
    return plan_location(table.base_path, location, table=table.name)


def _partition_cleans(
    table: HudiTable, policy: CleanPolicy, ct: CleanTimeline, view: FileSystemView | None, now: datetime | None
) -> tuple[Instant | None, list[PartitionClean]]:
    tl = ct.timeline
    tz = timeline_timezone(table.config.timezone_name)
    ectr = earliest_commit_to_retain(tl, policy, now=now, tz=tz)
    fsv = view if view is not None else table.file_system_view(timeline=tl)
    savepoint_times = [sp.requested_time for sp in ct.savepoints] if table.config.is_partitioned else []
    partitions = partitions_to_clean(table, tl, policy, ectr, savepoint_times, fsv.partitions())
    if not partitions:
        return ectr, []
    retention = retention_for(table, tl, policy, ectr, ct.savepoints)
    pending_files = PendingFiles(table, fsv)
    return ectr, [partition_clean(fsv, p, retention, pending_files) for p in partitions]


def plan_clean(
    table: HudiTable,
    instant_time: str,
    policy: CleanPolicy,
    *,
    timeline: Timeline | None = None,
    view: FileSystemView | None = None,
    now: datetime | None = None,
) -> HoodieCleanerPlan | None:
    """The clean plan for a new clean instant `instant_time`, or None when nothing is to be deleted.

    `timeline` defaults to the table's timeline as `load_clean_timeline` reads it (savepoints apart) and `view` to
    the file-system view built from it; `now` (for KEEP_LATEST_BY_HOURS) to the current time. Does not look at
    whether a clean is due (see `clean_due`) and writes nothing.
    """
    ct = _clean_timeline(table, timeline)
    newer = [i for i in ct.timeline if i.requested_time >= instant_time]
    if newer:
        raise InvalidTimelineError(
            f"clean instant {instant_time} is not newer than {newer[0]} on the timeline", table=table.label
        )
    ectr, cleans = _partition_cleans(table, policy, ct, view, now)
    files = {
        c.partition: tuple(
            HoodieCleanFileInfo(file_path=hudi_location(table, loc), is_bootstrap_base_file=False) for loc in c.files()
        )
        for c in cleans
        if c.files()
    }
    to_delete = tuple(c.partition for c in cleans if c.delete_partition)
    if not files and not to_delete:
        return None
    last_commit = ct.timeline.completed_writes().last()
    extra: dict[str, str] = {}
    if ct.savepoints and table.config.is_partitioned:
        extra[SAVEPOINTED_TIMESTAMPS] = ",".join(sp.requested_time for sp in ct.savepoints)
    return HoodieCleanerPlan(
        earliest_instant_to_retain=_action_instant(ectr, table.config.layout_version),
        last_completed_commit_timestamp=last_commit.requested_time if last_commit is not None else "",
        policy=policy.policy.value,
        files_to_be_deleted_per_partition={},
        version=PLAN_VERSION,
        file_paths_to_be_deleted_per_partition=files,
        partitions_to_be_deleted=to_delete,
        extra_metadata=extra,
    )


def _action_instant(ectr: Instant | None, layout_version: int) -> HoodieActionInstant | None:
    if ectr is None:
        return None
    return HoodieActionInstant(
        timestamp=ectr.requested_time, action=ectr.completed_action(layout_version).value, state=State.COMPLETED.name
    )


@dataclass(frozen=True)
class CleanPlanner:
    """A policy bound to the planning functions, for `tableservice.hudi.action.clean.schedule_clean`."""

    policy: CleanPolicy
    now: datetime | None = None

    def due(self, table: HudiTable) -> tuple[bool, str]:
        """On the table's timeline as last loaded (no listing)."""
        return clean_due(table, table.timeline(), self.policy)

    def plan(self, table: HudiTable, instant_time: str, timeline: Timeline | None = None) -> HoodieCleanerPlan | None:
        return plan_clean(table, instant_time, self.policy, timeline=timeline, now=self.now)
