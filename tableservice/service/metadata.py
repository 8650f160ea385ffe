"""The metadata table's own services as one table service: compaction, clean and archival of `.hoodie/metadata`.

Every commit the daemon makes already writes the metadata table's delta commit (the commit path). What keeps the
metadata table's log files, file slices and timeline bounded is this service, last in a pass: under the data
table's lock (the lock Hudi's writers hold while they run the same services) it compacts the metadata table when
`hoodie.metadata.compact.max.delta.commits` delta commits completed since its last compaction (or finishes a
compaction a crash left pending), cleans the file slices that compaction superseded, and archives its timeline.
It serves tables of version 6, 8 and 9 with a metadata table (version 6 names the compaction and clean
after the latest metadata delta commit, see `tableservice.hudi.metadata.instants`). No plan is written before
execution: `schedule` names the metadata table's newest instant and `execute` decides again under the lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from tableservice.hudi.action.archival import archive
from tableservice.hudi.action.clean import execute_clean, pending_cleans, schedule_clean
from tableservice.hudi.metadata.archival import before_bound, metadata_archival_bound
from tableservice.hudi.metadata.compaction import COMPACTION_ACTIONS, compact_metadata_table, metadata_compaction_due
from tableservice.hudi.metadata.instants import CLEAN_SUFFIX, suffix_base, uses_suffixes
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.table.hudi_table import HudiTable, TableSnapshot
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant
from tableservice.locks import LockHandle
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.plan import CleanPlanner
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.due import Due
from tableservice.planning.metadata.policy import MetadataPolicy
from tableservice.service.actions import TableContext
from tableservice.service.protocol import Outcome, ServiceBase, ServiceSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetadataMaintenance:
    """What one execution did to the metadata table."""

    compaction: Instant | None = None
    clean: Instant | None = None
    archived: tuple[Instant, ...] = ()


@dataclass(frozen=True)
class _Due:
    compaction: bool
    clean: bool
    archival: bool

    def __bool__(self) -> bool:
        return self.compaction or self.clean or self.archival


class MetadataService(ServiceBase[MetadataPolicy]):
    name = "metadata"
    plans_on_timeline = False

    def __init__(self, settings: ServiceSettings[MetadataPolicy]) -> None:
        super().__init__(settings)
        self._not_due_at: dict[str, int] = {}  # table base path -> data timeline mark last found not due

    def applies(self, snapshot: TableSnapshot) -> bool:
        return bool(snapshot.config.metadata_partitions)

    def pending(self, snapshot: TableSnapshot) -> list[Instant]:
        return []

    def due(self, snapshot: TableSnapshot, *, listing: bool = True) -> Due:
        """Asked on every poll: the metadata table changes only with the data table's commits, so it is opened (a
        listing of its timeline) only when the data timeline changed since it was last found not due."""
        mark = snapshot.timeline.mark()
        if self._not_due_at.get(snapshot.table.base_path) == mark:
            return Due(False, "not due: no data commit since the metadata table was last found in order")
        if not listing:  # opening the metadata table lists its timeline: the pass asks
            return Due(False, "not asked on this poll: a pass runs anyway and opens the metadata table")
        mdt = MetadataTable.open(snapshot.table, snapshot.timeline)
        found = _due(mdt, self.settings.policy) if mdt is not None else None
        if found:
            self._not_due_at.pop(snapshot.table.base_path, None)
            steps = [n for n in ("compaction", "clean", "archival") if getattr(found, n)]
            return Due(True, f"due: the metadata table needs {', '.join(steps)}")
        self._not_due_at[snapshot.table.base_path] = mark
        return Due(False, "not due: the metadata table needs no compaction, clean or archival")

    def schedule(self, ctx: TableContext) -> Instant | None:
        table = ctx.table
        mdt = MetadataTable.open(table, table.timeline())
        if mdt is None or not _due(mdt, self.settings.policy):
            return None
        return mdt.mdt_timeline.last()

    def lease_name(self, instant: Instant) -> str:
        return "metadata"

    def execute(self, ctx: TableContext, instant: Instant, lease: LockHandle) -> Outcome:
        with ctx.locked() as held:

            def still_held() -> None:  # before each write that completes a step (the commit path's last check)
                held.check()
                lease.check()

            still_held()
            done = maintain_metadata_table(ctx.table, self.settings.policy, still_held=still_held)
        return Outcome(self.name, instant, done)


def _due(mdt: MetadataTable, policy: MetadataPolicy) -> _Due:
    timeline = mdt.mdt_timeline
    return _Due(
        compaction=metadata_compaction_due(mdt, policy.compact_max_delta_commits).due,
        clean=_clean_due(timeline, policy.cleaner_commits_retained),
        archival=len(timeline.completed()) > policy.keep_max_commits,
    )


def _clean_due(timeline: Timeline, retained: int) -> bool:
    """A clean is pending, or a compaction since the last clean has `retained` delta commits after it: the file
    slices it superseded are then needed by no retained delta commit (KEEP_LATEST_COMMITS)."""
    if timeline.pending_of(Action.CLEAN):
        return True
    last_clean = max((i.requested_time for i in timeline.completed() if i.action is Action.CLEAN), default="")
    compactions = [
        i.requested_time
        for i in timeline.completed()
        if i.action in COMPACTION_ACTIONS and i.requested_time > last_clean
    ]
    if not compactions:
        return False
    after = [i for i in timeline.completed() if i.action is Action.DELTA_COMMIT and i.requested_time > min(compactions)]
    return len(after) >= retained


def maintain_metadata_table(
    table: HudiTable, policy: MetadataPolicy, *, still_held: Callable[[], None] = lambda: None
) -> MetadataMaintenance:
    """Compact, clean and archive the metadata table as due. Call under the data table's lock; `still_held` raises
    LockLostError when that lock (or the executor lease) is lost: it is called right before each step's final
    write, so a lost lock leaves the step pending (resumed or rolled back by the next pass)."""
    timeline = table.reload()
    mdt = MetadataTable.open(table, timeline)
    if mdt is None:
        return MetadataMaintenance()
    compaction = compact_metadata_table(mdt, policy.compact_max_delta_commits, before_commit=still_held)
    mdt_table = mdt.mdt
    clean = None
    mdt_timeline = mdt_table.reload()
    if _clean_due(mdt_timeline, policy.cleaner_commits_retained):
        still_held()
        clean = _clean(mdt_table, mdt_timeline, policy)
    archived: tuple[Instant, ...] = ()
    if len(mdt_table.reload().completed()) > policy.keep_max_commits:
        still_held()
        archived = tuple(archive(mdt_table, _MetadataArchival(policy, timeline)))
    return MetadataMaintenance(compaction, clean, archived)


def _clean(mdt_table: HudiTable, mdt_timeline: Timeline, policy: MetadataPolicy) -> Instant | None:
    """Delete the file slices no reader of the latest `hoodie.metadata.cleaner.commits.retained` delta commits
    needs (the metadata table is cleaned like any merge-on-read table; the data table's lock is held)."""
    pending = pending_cleans(mdt_table)
    instant = pending[0] if pending else None
    if instant is None:
        base = suffix_base(mdt_timeline) if uses_suffixes(mdt_table.config.version) else None
        instant_time = base + CLEAN_SUFFIX if base is not None else None  # else a fresh time
        if instant_time is not None and any(instant_time <= x for x in mdt_timeline.all_times()):
            instant_time = None  # a later metadata instant (a rollback at `<r>006`): a fresh time, as Hudi's would
        planner = CleanPlanner(
            CleanPolicy.from_mapping({"hoodie.cleaner.commits.retained": policy.cleaner_commits_retained})
        )
        instant = schedule_clean(mdt_table, planner, force=True, instant_time=instant_time)
    if instant is None:
        return None
    execute_clean(mdt_table, instant)
    return instant


class _MetadataArchival:
    """Archival of the metadata table: Hudi's rules with the `hoodie.metadata.keep.*` bounds, never at or after
    the data table's earliest active write or pending instant."""

    def __init__(self, policy: MetadataPolicy, data_timeline: Timeline) -> None:
        self.policy = ArchivalPolicy.from_mapping(
            {
                "hoodie.keep.min.commits": policy.keep_min_commits,
                "hoodie.keep.max.commits": policy.keep_max_commits,
                "hoodie.cleaner.commits.retained": policy.cleaner_commits_retained,
            }
        )
        self.bound = metadata_archival_bound(data_timeline)

    @property
    def archival_batch(self) -> int:
        return self.policy.archival_batch

    @property
    def timeline_compaction_batch_size(self) -> int:
        return self.policy.timeline_compaction_batch_size

    def instants_to_archive(self, table: HudiTable, timeline: Timeline) -> list[Instant]:
        selected = self.policy.instants_to_archive(table, timeline)
        return before_bound(selected, self.bound, by_completion=False)
