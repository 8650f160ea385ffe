"""Which completed instants archival moves out of the active timeline (pure planning over the timeline).

Hudi's rules (`TimelineArchiverV2.getCommitInstantsToArchive` for table versions 8/9, `TimelineArchiverV1` and
0.14/0.15's `HoodieTimelineArchiver` for version 6, `ArchivalUtils.getMinAndMaxInstantsToKeep`,
`CleanerUtils.getEarliestCommitToRetain`, `CompactionUtils.getEarliestInstantToRetainForCompaction`,
`ClusteringUtils.getEarliestInstantToRetainForClustering`):

- Only the completed commits timeline (commit, deltacommit, replacecommit, clustering, compaction, log
  compaction) is counted. Nothing is archived while it holds at most `max` instants; then the oldest are
  archived down to `min`, stopping at the first bound below.
- `min`/`max` are raised when the cleaner keeps more (ArchivalUtils): with the earliest commit the cleaner would
  retain now (KEEP_LATEST_COMMITS: the N-th newest completed commit, not past the earliest pending commit;
  KEEP_LATEST_BY_HOURS: the first completed commit at or after the latest commit's time minus H hours;
  KEEP_LATEST_FILE_VERSIONS: none), `cleanMin = completed commits after it + 2`; when `min < cleanMin`,
  `max += cleanMin - min` and `min = cleanMin`.
- Bounds (a commit is archived only if its requested time is below each): the completed commit just before the
  earliest pending write (or that pending write when none precedes it); for merge-on-read with trigger
  NUM_COMMITS or NUM_AND_TIME, the last completed compaction while fewer than `max.delta.commits` delta commits
  followed it, else the delta commit that leaves `max.delta.commits` of them (v6 counts delta commits of any state
  requested after the compaction, v8+ those completed after it or pending); the first replace commit or
  clustering (any state) at or after the last completed clean's plan `earliestInstantToRetain` (or its earliest
  savepoint listed in `savepointed_timestamps` when a replace commit lies between it and the ECTR; or the clean's
  own time when the plan has no ECTR), the first one when no clean completed; the first savepoint.
- Clean and rollback instants: v8+ archives completed ones requested before the last commit archived; v6 archives,
  per action, the oldest `count - min` completed ones once there are more than `max` (independent of commits).
- Savepoint, restore, indexing and schema instants are never archived.

Our additional bounds (stricter than Hudi):
- The earliest commit the last completed clean retained (its metadata's `earliestCommitToRetain`, else its plan's
  `earliestInstantToRetain`): an incremental cleaner needs the commits after the previous clean's ECTR (Hudi falls
  back to listing every partition instead).
- The first completed replace commit or clustering whose replaced file groups still have files on storage: the
  replaced files still exist, and without the replace metadata every reader would see them again (Hudi relies on
  the clean's ECTR alone).
- The earliest instant archival leaves behind that is not a completed commit, clean or rollback: pending
  instants of any action, savepoints (inflight too), restores, indexing. The archived instants then always form
  a prefix of the timeline, which readers rely on when they take every instant older than the active timeline's
  first one as archived and committed (our FileSystemView does).
- v6 also archives the clean and rollback instants older than the last commit archived (v8+'s rule), so that no
  clean older than an archived commit stays behind.
- `hoodie.archive.beyond.savepoint=true` is refused: it leaves holes in the active timeline.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, Self

from pydantic import Field, field_validator, model_validator

from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.hudi.models import decode_clean_metadata, decode_cleaner_plan
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import (
    Action,
    Instant,
    State,
    format_instant_time,
    parse_instant_time,
    timeline_timezone,
)
from tableservice.planning.clean.plan import SAVEPOINTED_TIMESTAMPS
from tableservice.planning.clean.policy import CleanerPolicyName, CleanPolicy
from tableservice.planning.compaction.policy import CompactionPolicy, CompactionTriggerStrategy
from tableservice.planning.keyed_policy import MAX_COUNT, HudiKeyedPolicy
from tableservice.storage import FileInfo

_OWN_PREFIXES = ("hoodie.keep.", "hoodie.archive.", "hoodie.commits.archival.", "hoodie.timeline.compaction.")
"""Key of the cleaner plan's extraMetadata listing the savepoints the clean kept files for (CleanerUtils)."""


def _same_as(model: type[HudiKeyedPolicy], key: str) -> Any:
    """The field `model` declares for Hudi key `key` (default, bounds, alias): archival reads the cleaner's and the
    compaction trigger's keys, and they must mean here what they mean there."""
    return copy.copy(model.model_fields[model.keys()[key]])


class ArchivalPolicy(HudiKeyedPolicy):
    """Frozen; Hudi's keys (`from_mapping`, `model_validate`) or attribute names. The cleaner and compaction keys
    are read because Hudi's archiver reads them (they move the bounds); they do not configure those services here.

    - `hoodie.keep.min.commits` (20), `hoodie.keep.max.commits` (30): completed commits kept; max > min.
    - `hoodie.timeline.compaction.batch.size` (10): LSM history files merged at once (v8+).
    - `hoodie.commits.archival.batch` (10): entries per archive log block (v6).
    - `hoodie.archive.beyond.savepoint` (false): only false is supported.
    - `hoodie.cleaner.policy` (KEEP_LATEST_COMMITS), `hoodie.cleaner.commits.retained` (10),
      `hoodie.cleaner.hours.retained` (24): raise min/max as ArchivalUtils does.
    - `hoodie.compact.inline.trigger.strategy` (NUM_COMMITS), `hoodie.compact.inline.max.delta.commits` (5):
      the delta commits the compaction trigger still counts are kept.
    """

    service_name: ClassVar[str] = "archival"
    own_prefixes: ClassVar[tuple[str, ...]] = _OWN_PREFIXES

    min_commits: int = Field(
        default=20,
        ge=1,
        le=MAX_COUNT,
        validation_alias="hoodie.keep.min.commits",
        serialization_alias="hoodie.keep.min.commits",
    )
    max_commits: int = Field(
        default=30,
        ge=2,
        le=MAX_COUNT,
        validation_alias="hoodie.keep.max.commits",
        serialization_alias="hoodie.keep.max.commits",
    )
    timeline_compaction_batch_size: int = Field(
        default=10,
        ge=2,
        le=MAX_COUNT,
        validation_alias="hoodie.timeline.compaction.batch.size",
        serialization_alias="hoodie.timeline.compaction.batch.size",
    )
    archival_batch: int = Field(
        default=10,
        ge=1,
        le=MAX_COUNT,
        validation_alias="hoodie.commits.archival.batch",
        serialization_alias="hoodie.commits.archival.batch",
    )
    archive_beyond_savepoint: bool = Field(
        default=False,
        validation_alias="hoodie.archive.beyond.savepoint",
        serialization_alias="hoodie.archive.beyond.savepoint",
    )
    cleaner_policy: CleanerPolicyName = _same_as(CleanPolicy, "hoodie.cleaner.policy")
    cleaner_commits_retained: int = _same_as(CleanPolicy, "hoodie.cleaner.commits.retained")
    cleaner_hours_retained: int = _same_as(CleanPolicy, "hoodie.cleaner.hours.retained")
    compaction_trigger_strategy: CompactionTriggerStrategy = _same_as(
        CompactionPolicy, "hoodie.compact.inline.trigger.strategy"
    )
    max_delta_commits: int = _same_as(CompactionPolicy, "hoodie.compact.inline.max.delta.commits")

    @field_validator("cleaner_policy", "compaction_trigger_strategy", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("archive_beyond_savepoint")
    @classmethod
    def _no_holes(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "archiving beyond a savepoint leaves holes in the active timeline; only false is supported"
            )
        return value

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.max_commits <= self.min_commits:
            raise ValueError(
                f"hoodie.keep.max.commits={self.max_commits} must be greater than "
                f"hoodie.keep.min.commits={self.min_commits}"
            )
        return self

    # --- the archiver's view (tableservice.hudi.action.archival.ArchivalSelection) ---------------------

    def instants_to_archive(self, table: HudiTable, timeline: Timeline) -> list[Instant]:
        return instants_to_archive(table, timeline, self)


@dataclass(frozen=True)
class ArchivalPlan:
    """`instants`: completed instants to archive, oldest first. `bounds`: why archival stops where it does
    (name -> requested time of the first instant kept for that reason)."""

    instants: tuple[Instant, ...]
    min_commits: int
    max_commits: int
    completed_commits: int
    bounds: dict[str, str] = field(default_factory=dict)

    @property
    def reason(self) -> str:
        if self.completed_commits <= self.max_commits and not self.instants:
            return f"{self.completed_commits} completed commits, at most {self.max_commits} kept"
        kept = ", ".join(f"{k} {v}" for k, v in sorted(self.bounds.items(), key=lambda kv: kv[1]))
        return (
            f"{len(self.instants)} instants to archive of {self.completed_commits} completed commits "
            f"(min {self.min_commits}, max {self.max_commits})" + (f"; bounded by {kept}" if kept else "")
        )


# --- min / max ---------------------------------------------------------------------------------------


def _commits_timeline(timeline: Timeline) -> list[Instant]:
    """Hudi's commits timeline of any state: completed writes, and pending commit, deltacommit, replacecommit and
    clustering instants (a pending compaction is not a commit yet)."""
    pending = (Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT, Action.CLUSTERING)
    return [i for i in timeline.write_instants() if i.is_completed or i.action in pending]


def cleaner_earliest_commit_to_retain(policy: ArchivalPolicy, timeline: Timeline, tz_name: str | None) -> str | None:
    """The ECTR the cleaner would compute now (CleanerUtils.getEarliestCommitToRetain, as ArchivalUtils calls it:
    hours counted back from the latest completed commit)."""
    commits = _commits_timeline(timeline)
    completed = [i for i in commits if i.is_completed]
    if policy.cleaner_policy is CleanerPolicyName.KEEP_LATEST_COMMITS:
        if len(completed) <= policy.cleaner_commits_retained:
            return None
        nth = completed[len(completed) - policy.cleaner_commits_retained]
        pending = next((i for i in commits if not i.is_completed), None)
        if pending is None or nth.requested_time <= pending.requested_time:
            return nth.requested_time
        before = [i for i in completed if i.requested_time < pending.requested_time]
        return before[-1].requested_time if before else None
    if policy.cleaner_policy is CleanerPolicyName.KEEP_LATEST_BY_HOURS and completed:
        tz = timeline_timezone(tz_name)
        latest = parse_instant_time(completed[-1].requested_time, tz)
        earliest = format_instant_time(latest - timedelta(hours=policy.cleaner_hours_retained), tz)
        return next((i.requested_time for i in completed if i.requested_time >= earliest), None)
    return None


def effective_limits(policy: ArchivalPolicy, timeline: Timeline, tz_name: str | None = None) -> tuple[int, int]:
    """(min, max) commits to keep after ArchivalUtils' adjustment to the cleaner's retention."""
    ectr = cleaner_earliest_commit_to_retain(policy, timeline, tz_name)
    if ectr is None:
        return policy.min_commits, policy.max_commits
    completed = timeline.completed_writes()
    clean_min = sum(1 for i in completed if i.requested_time > ectr) + 2
    if policy.min_commits < clean_min:
        return clean_min, clean_min + policy.max_commits - policy.min_commits
    return policy.min_commits, policy.max_commits


# --- bounds ------------------------------------------------------------------------------------------


def _pending_write_bound(timeline: Timeline, completed: list[Instant]) -> str | None:
    pending = next((i for i in timeline.write_instants() if not i.is_completed), None)
    if pending is None:
        return None
    before = [i for i in completed if i.requested_time < pending.requested_time]
    return before[-1].requested_time if before else pending.requested_time


def _is_delta_commit(i: Instant) -> bool:
    return i.action is Action.DELTA_COMMIT or (i.action is Action.LOG_COMPACTION and i.is_completed)


def compaction_bound(timeline: Timeline, table_version: int, max_delta_commits: int) -> str | None:
    """CompactionUtils.getEarliestInstantToRetainForCompaction (0.x counting for v6, 1.x for v8+)."""
    compactions = [i for i in timeline if i.is_completed and i.action in (Action.COMMIT, Action.COMPACTION)]
    deltas = [i for i in timeline if _is_delta_commit(i)]
    if compactions:
        ref = compactions[-1]
        t = ref.requested_time
        if table_version >= 8:
            deltas = [
                d
                for d in deltas
                if (d.completion_time is None and d.requested_time > t)
                or (d.completion_time is not None and d.completion_time > t and d.requested_time != t)
            ]
        else:
            deltas = [d for d in deltas if d.requested_time > t]
    elif deltas:
        ref = deltas[0]
    else:
        return None
    if len(deltas) < max_delta_commits:
        return ref.requested_time
    return deltas[len(deltas) - max_delta_commits].requested_time


def _last_completed_clean(timeline: Timeline) -> Instant | None:
    cleans = [i for i in timeline if i.action is Action.CLEAN and i.is_completed]
    return cleans[-1] if cleans else None


def _clean_plan_ectr(table: HudiTable, clean: Instant) -> tuple[str | None, list[str]]:
    path = table.active.path_of(clean.with_state(State.REQUESTED))
    plan = decode_cleaner_plan(table.storage.read_bytes(path), path=path)
    ectr = plan.earliest_instant_to_retain
    savepoints = (plan.extra_metadata or {}).get(SAVEPOINTED_TIMESTAMPS, "")
    return (ectr.timestamp if ectr is not None and ectr.timestamp else None), sorted(
        s for s in savepoints.split(",") if s
    )


def clustering_bound(table: HudiTable, timeline: Timeline, policy: ArchivalPolicy) -> str | None:
    """ClusteringUtils.getEarliestInstantToRetainForClustering: replace commits and clusterings stay until the
    last completed clean's ECTR has passed them."""
    replaces = [i for i in timeline if i.action in (Action.REPLACE_COMMIT, Action.CLUSTERING)]
    if not replaces:
        return None
    clean = _last_completed_clean(timeline)
    if clean is None:
        return replaces[0].requested_time
    ectr, savepoints = _clean_plan_ectr(table, clean)
    lower = ectr if ectr is not None else clean.requested_time
    if policy.cleaner_policy is not CleanerPolicyName.KEEP_LATEST_FILE_VERSIONS and ectr is not None and savepoints:
        first_sp = savepoints[0]
        completed_replaces = [i for i in replaces if i.is_completed and first_sp <= i.requested_time <= ectr]
        if ectr > first_sp and completed_replaces:
            lower = first_sp
    return next((i.requested_time for i in replaces if i.requested_time >= lower), None)


def last_clean_retained(table: HudiTable, timeline: Timeline) -> str | None:
    """The earliest commit the last completed clean retained: its metadata's ECTR, else its plan's."""
    clean = _last_completed_clean(timeline)
    if clean is None:
        return None
    path = table.active.path_of(clean)
    md = decode_clean_metadata(table.storage.read_bytes(path), path=path)
    if md.earliest_commit_to_retain:
        return md.earliest_commit_to_retain
    return _clean_plan_ectr(table, clean)[0]


def _replaced_files_bound(
    table: HudiTable, candidates: list[Instant], listing: Mapping[str, list[FileInfo]] | None
) -> str | None:
    """The first completed replace commit among `candidates` whose replaced file groups still have files."""
    replaces = [i for i in candidates if i.completed_action(table.config.layout_version) is Action.REPLACE_COMMIT]
    if not replaces:
        return None
    files = listing if listing is not None else table.list_data_files()
    present: set[tuple[str, str]] = set()
    for partition, infos in files.items():
        for fi in infos:
            parsed = parse_log_file_name(fi.name) if fi.name.startswith(".") else parse_base_file_name(fi.name)
            if parsed is not None:
                present.add((partition, parsed.file_id))
    for instant in replaces:
        md = table.replace_commit_metadata(instant)
        for partition, file_ids in (md.partition_to_replace_file_ids or {}).items():
            if any((partition, fid) in present for fid in file_ids):
                return instant.requested_time
    return None


def _staying_bound(timeline: Timeline) -> str | None:
    """The earliest instant archival never takes: anything but a completed commit, clean or rollback."""
    for i in timeline:
        if not i.is_completed or i.action not in _ARCHIVABLE_ACTIONS:
            return i.requested_time
    return None


_ARCHIVABLE_ACTIONS = frozenset(
    {
        Action.COMMIT,
        Action.DELTA_COMMIT,
        Action.REPLACE_COMMIT,
        Action.CLUSTERING,
        Action.COMPACTION,
        Action.LOG_COMPACTION,
        Action.CLEAN,
        Action.ROLLBACK,
    }
)


# --- the plan ----------------------------------------------------------------------------------------


def plan_archival(
    table: HudiTable,
    timeline: Timeline,
    policy: ArchivalPolicy,
    *,
    listing: Mapping[str, list[FileInfo]] | None = None,
) -> ArchivalPlan:
    """What archival takes from `timeline`. Reads the last clean's plan and metadata, replace commit metadata and,
    when a replace commit would be archived, a listing of the table (`listing` saves it)."""
    completed = list(timeline.completed_writes())
    lo, hi = effective_limits(policy, timeline, table.config.timezone_name)
    commits: list[Instant] = []
    bounds: dict[str, str] = {}
    if len(completed) > hi:
        candidates = {
            "earliest pending write": _pending_write_bound(timeline, completed),
            "instant archival leaves behind": _staying_bound(timeline),
            "replace commit not cleaned (clean ECTR)": clustering_bound(table, timeline, policy),
            "earliest commit the last clean retained": last_clean_retained(table, timeline),
        }
        savepoints = [i.requested_time for i in timeline if i.action is Action.SAVEPOINT]
        if savepoints:
            candidates["savepoint"] = savepoints[0]
        trigger = policy.compaction_trigger_strategy
        if table.config.is_mor and trigger in (
            CompactionTriggerStrategy.NUM_COMMITS,
            CompactionTriggerStrategy.NUM_AND_TIME,
        ):
            candidates["delta commits the compaction trigger counts"] = compaction_bound(
                timeline, table.config.version, policy.max_delta_commits
            )
        bounds = {k: v for k, v in candidates.items() if v is not None}
        limit = min(bounds.values(), default=None)
        eligible = [i for i in completed if limit is None or i.requested_time < limit]
        commits = eligible[: len(completed) - lo]
        replaced = _replaced_files_bound(table, commits, listing)
        if replaced is not None:
            bounds["replace commit whose replaced files exist"] = replaced
            commits = [i for i in commits if i.requested_time < replaced]
    chosen = {i.requested_time: i for i in commits}
    _add_cleans_and_rollbacks(chosen, timeline, commits, table.config.version, lo, hi)
    instants = tuple(sorted(chosen.values(), key=lambda i: (i.requested_time, i.sort_key)))
    return ArchivalPlan(instants, lo, hi, len(completed), bounds)


def _add_cleans_and_rollbacks(
    chosen: dict[str, Instant], timeline: Timeline, commits: list[Instant], version: int, lo: int, hi: int
) -> None:
    done = [i for i in timeline if i.is_completed and i.action in (Action.CLEAN, Action.ROLLBACK)]
    if commits:
        last = commits[-1].requested_time
        chosen.update((i.requested_time, i) for i in done if i.requested_time < last)
    if version < 8:
        for action in (Action.CLEAN, Action.ROLLBACK):
            of_action = [i for i in done if i.action is action]
            if len(of_action) > hi:
                chosen.update((i.requested_time, i) for i in of_action[: len(of_action) - lo])


def instants_to_archive(
    table: HudiTable,
    timeline: Timeline,
    policy: ArchivalPolicy,
    *,
    listing: Mapping[str, list[FileInfo]] | None = None,
) -> list[Instant]:
    """Completed instants to archive, oldest first (see `plan_archival`)."""
    return list(plan_archival(table, timeline, policy, listing=listing).instants)
