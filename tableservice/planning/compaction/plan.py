"""Compaction planning: which file slices a compaction at a new instant C merges, as Hudi would plan them.

`plan_compaction` reproduces Hudi's ScheduleCompactionActionExecutor + HoodieCompactionPlanGenerator (checked
against every real compaction plan in the fixtures, see tests/test_planning_compaction.py):

1. C must be newer than every instant on the timeline (InvalidTimelineError otherwise).
2. Table version 6 (Hudi 0.x, single writer): no compaction at C while a write other than a compaction or log
   compaction is pending with an instant ≤ C — its log files would miss the plan and be shadowed by C's new
   base file. We raise CompactionBlockedError (retryable: it passes once that write completes or is rolled
   back); Hudi 0.15 / 1.x skip scheduling in that case. Versions 8 and 9 have no such rule (non-blocking
   concurrency: such a write's log files join C's new slice when they complete after C).
3. Candidates: the latest slice of every visible file group (replaced groups hidden; only committed base files;
   in versions 8 and 9 only log files of completed delta commits), in every partition, leaving out file groups
   under pending compaction, pending clustering and pending log compaction (Hudi's compaction planner does not
   skip pending log compaction; we do, so that the two never take the same file group).
4. Versions 8 and 9 keep only the log files whose delta commit completed before C (Hudi's
   `CompletionTimeQueryView.isCompletedBefore(C, deltaCommitTime)`; a completion time of another length than C
   is read as the requested time, as Hudi does for legacy instants). Version 6 keeps every log file of the slice.
5. Slices left without log files are dropped; the strategy orders and bounds the rest (compaction_strategy).
6. No operation → None (no plan is written). Otherwise a plan version 2 with `extraMetadata` (the caller's, or
   empty), `strategy` null, `preserveHoodieMetadata` false and, in versions 8 and 9,
   `missingSchedulePartitions` (partitions the strategy left out; empty in every real plan).
"""

from __future__ import annotations

from collections.abc import Mapping

from tableservice.errors import ConflictError, InvalidTimelineError, UnsupportedTableError
from tableservice.hudi.models import HoodieCompactionOperation, HoodieCompactionPlan
from tableservice.hudi.table.fs_view import FileSystemView, LogFile
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import WRITE_ACTIONS, Action, Instant
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.planning.compaction.strategy import (
    build_operation,
    day_based_partitions,
    order_and_filter,
)
from tableservice.planning.compaction.trigger import (
    CompactionTableState,
    DueDecision,
    compactable_log_bytes,
    compaction_due,
)
from tableservice.planning.compaction.validate import ResolvedOperation, validate_compaction_plan

PLAN_VERSION = 2

__all__ = [
    "PLAN_VERSION",
    "CompactionBlockedError",
    "CompactionTableState",
    "DueDecision",
    "ResolvedOperation",
    "blocking_pending_write",
    "compactable_log_bytes",
    "compaction_due",
    "plan_compaction",
    "validate_compaction_plan",
]


class CompactionBlockedError(ConflictError):
    """A compaction cannot be scheduled at this instant yet (table version 6: a pending write at or before it)."""

    def __init__(self, problem: str, *, blocking: Instant, table: str | None = None) -> None:
        super().__init__(problem, table=table)
        self.blocking = blocking


def blocking_pending_write(timeline: Timeline, instant_time: str, table_version: int) -> Instant | None:
    """Version 6 only: the earliest pending write (not a compaction or log compaction) with an instant ≤ C."""
    if table_version >= 8:
        return None
    for i in timeline:
        if i.is_completed or i.action in (Action.COMPACTION, Action.LOG_COMPACTION) or i.action not in WRITE_ACTIONS:
            continue
        return i if i.requested_time <= instant_time else None
    return None


def _completed_before(view: FileSystemView, instant_time: str, log: LogFile) -> bool:
    done = view.completion_time_of(log.instant_time)
    if done is None:
        return False
    if len(done) != len(instant_time):
        done = log.instant_time
    return done < instant_time


def _candidates(
    view: FileSystemView, partitions: list[str], instant_time: str, policy: CompactionPolicy, table_version: int
) -> list[HoodieCompactionOperation]:
    excluded = view.inputs.under_pending_services()
    ops: list[HoodieCompactionOperation] = []
    for partition in partitions:
        for slice_ in view.latest_slices(partition):
            if slice_.file_group_id in excluded or not slice_.log_files:
                continue
            logs = list(slice_.log_files)
            if table_version >= 8:
                logs = [lf for lf in logs if _completed_before(view, instant_time, lf)]
            if logs:
                ops.append(build_operation(slice_, logs, policy))
    return ops


def plan_compaction(
    table: HudiTable,
    instant_time: str,
    policy: CompactionPolicy,
    *,
    timeline: Timeline | None = None,
    view: FileSystemView | None = None,
    extra_metadata: Mapping[str, str] | None = None,
) -> HoodieCompactionPlan | None:
    """The compaction plan for a new instant `instant_time`, or None when no file slice needs compacting.

    `timeline` defaults to the table's active timeline and `view` to the file-system view built from it (pass
    both to plan against a state other than the current one). `extra_metadata` goes into the plan's
    `extraMetadata` (Hudi writers put their commit's extra metadata there; empty by default). Does not look at
    whether a compaction is due (see `compaction_due`) and writes nothing.
    """
    config = table.config
    if not config.is_mor:
        raise UnsupportedTableError(
            f"compaction needs a merge-on-read table, not {config.table_type}", table=table.label
        )
    tl = timeline if timeline is not None else table.timeline()
    newer = [i for i in tl if i.requested_time >= instant_time]
    if newer:
        raise InvalidTimelineError(
            f"compaction instant {instant_time} is not newer than {newer[0]} on the timeline", table=table.label
        )
    blocking = blocking_pending_write(tl, instant_time, config.version)
    if blocking is not None:
        raise CompactionBlockedError(
            f"cannot schedule a compaction at {instant_time}: write {blocking} is still pending "
            "(table version 6 needs every earlier write completed or rolled back first)",
            blocking=blocking,
            table=table.label,
        )
    fsv = view if view is not None else table.file_system_view(timeline=tl)
    partitions, left_out = day_based_partitions(fsv.partitions(), policy)
    candidates = _candidates(fsv, partitions, instant_time, policy, config.version)
    result = order_and_filter(candidates, policy, config.version)
    if not result.operations:
        return None
    missing: tuple[str, ...] | None = None
    if config.version >= 8:
        missing = tuple(dict.fromkeys([*result.missing_partitions, *left_out]))
    return HoodieCompactionPlan(
        operations=tuple(result.operations),
        extra_metadata=dict(extra_metadata or {}),
        version=PLAN_VERSION,
        strategy=None,
        preserve_hoodie_metadata=False,
        missing_schedule_partitions=missing,
    )
