"""Compaction actions on one table: schedule a plan when due, execute a pending plan on Spark.

Locks are held only for short sections: instant generation + plan write when scheduling; conflict check +
completed-instant write when committing. The Spark job runs without the lock. A crash at any point leaves the
table as it was, or with a requested/inflight compaction that the next attempt rolls back and runs again under
the same instant.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from tableservice.errors import UnsupportedTableError
from tableservice.hudi.action.committed_inputs import check_committed_inputs
from tableservice.hudi.action.compact import compaction_commit_metadata
from tableservice.hudi.action.conflicts import without_replaced_groups
from tableservice.hudi.action.tasks import CompactionInput, compaction_tasks
from tableservice.hudi.file_group.spill import compaction_memory_budget
from tableservice.hudi.models import HoodieCompactionPlan, HoodieWriteStat, encode_compaction_plan
from tableservice.hudi.table.fs_view import partition_location
from tableservice.hudi.table.hudi_table import HudiTable, Requested, TableSnapshot
from tableservice.hudi.table.schema import avro_schema_to_json
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.locks import LockHandle
from tableservice.planning.compaction.plan import CompactionBlockedError, plan_compaction
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.planning.compaction.trigger import CompactionTableState, DueDecision, compaction_due
from tableservice.planning.compaction.validate import validate_compaction_plan
from tableservice.planning.due import Due
from tableservice.service.actions import (
    TableContext,
    pending_plan,
    run_plan,
)
from tableservice.service.protocol import Outcome, ReadPathBenefit, SchedulingDeferred, ServiceBase
from tableservice.storage import join

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompactionResult:
    instant: Instant
    stats: tuple[HoodieWriteStat, ...]
    seconds: float
    executor_seconds: float = 0.0  # the tasks' run time, as they measured it
    records_read: int = 0  # base rows and log records the merged reads read
    task_requests: Mapping[str, int] = field(default_factory=dict)  # object-store requests of the tasks (lower case)

    @property
    def bytes_written(self) -> int:
        return sum(s.total_write_bytes or 0 for s in self.stats)

    @property
    def bytes_read(self) -> int:
        return sum((s.total_log_size_compacted or 0) for s in self.stats)

    @property
    def records_written(self) -> int:
        return sum(s.num_writes or 0 for s in self.stats)

    @property
    def log_files_compacted(self) -> int:
        return sum(s.total_log_files_compacted or 0 for s in self.stats)

    def benefit(self) -> ReadPathBenefit:
        """Each compacted file group was read from its base file (when it had one) and its log files; it is now
        read from one base file."""
        before = sum((1 if s.prev_base_file else 0) + (s.total_log_files_compacted or 0) for s in self.stats)
        return ReadPathBenefit(
            file_groups_before=len(self.stats),
            file_groups_after=len(self.stats),
            files_before=before,
            files_after=len(self.stats),
            log_files_removed=self.log_files_compacted,
            log_bytes_removed=sum(s.total_log_size_compacted or 0 for s in self.stats),
        )


def check_supported(table: HudiTable) -> None:
    if not table.config.is_mor:
        raise UnsupportedTableError("compaction applies to merge-on-read tables only", table=table.label)


# --- scheduling ------------------------------------------------------------------------------------


def compaction_decision(ctx: TableContext, policy: CompactionPolicy, now: datetime | None = None) -> DueDecision:
    table = ctx.table
    state = CompactionTableState.of(table, policy, timeline=table.timeline())
    return compaction_due(state, policy, now if now is not None else datetime.now(UTC))


def schedule_compaction(
    ctx: TableContext, policy: CompactionPolicy, *, force: bool = False, instant_time: str | None = None
) -> Instant | None:
    """Write a compaction plan when one is due (or `force`); None when nothing is due or nothing to compact."""
    table = ctx.table
    check_supported(table)
    table.merge_config()  # a table whose records cannot be merged gets no plan
    if not force:  # `force`: the caller found it due; the plan is made on the timeline re-read under the lock
        table.reload()
        decision = compaction_decision(ctx, policy)
        if not decision.due:
            log.debug("compaction not due: %s", decision.reason, extra={"table": table.label})
            return None
    done = request_compaction(ctx, policy, instant_time=instant_time)
    return done.instant if done is not None else None


def request_compaction(
    ctx: TableContext, policy: CompactionPolicy, *, instant_time: str | None = None, dry_run: bool = False
) -> Requested[HoodieCompactionPlan] | None:
    """Make a compaction plan now and write it (a `dry_run` writes nothing); None when no slice needs one."""
    table = ctx.table
    check_supported(table)
    table.merge_config()  # a table whose records cannot be merged gets no plan
    done = table.request(
        Action.COMPACTION,
        lambda t, timeline: _checked_plan(table, t, timeline, policy),
        lambda plan: encode_compaction_plan(plan, table_version=table.config.version),
        lock=ctx.locked,
        instant_time=instant_time,
        dry_run=dry_run,
    )
    if done is not None and done.written:
        log.info(
            "scheduled compaction with %d operations",
            len(done.plan.operations or ()),
            extra={"table": table.label, "instant": done.instant.requested_time},
        )
    return done


def _checked_plan(
    table: HudiTable, t: str, timeline: Timeline, policy: CompactionPolicy
) -> HoodieCompactionPlan | None:
    """The plan, refused before it is written when a slice it names misses committed data (a missing base file
    would otherwise be planned as a slice of log files alone). Sizes only: this runs under the table lock."""
    plan = plan_compaction(table, t, policy, timeline=timeline)
    if plan is not None:
        slices = []
        for op in plan.operations or ():
            partition = op.partition_path or ""
            where = partition_location(table.base_path, partition)
            base = join(where, op.data_file_path) if op.data_file_path else None
            logs = tuple(join(where, name) for name in op.delta_file_paths or ())
            file_slice = CompactionInput(partition, op.file_id or "", op.base_instant_time or "", base, logs)
            slices.append((partition, file_slice))
        check_committed_inputs(table, timeline, slices, before=t, full=False)
    return plan


# --- execution -------------------------------------------------------------------------------------


def execute_compaction(
    ctx: TableContext,
    instant_time: str,
    *,
    parallelism: int | None = None,
    lease: LockHandle | None = None,
    memory_budget: int | None = None,
) -> CompactionResult:
    """Run a pending compaction (ours or a writer's) to completion. With an executor `lease`, the commit is
    abandoned (LockLostError) if the lease was lost meanwhile: another replica may be running the plan.
    `memory_budget`: bytes each task's merge may hold before it spills (None: unbounded)."""
    started = time.monotonic()
    table = ctx.table
    check_supported(table)
    instant, timeline = pending_plan(ctx, instant_time, "compaction", lambda i: i.action is Action.COMPACTION)
    table.merge_config()
    plan = table.compaction_plan(instant)
    plan_file = table.active.path_of(instant.with_state(State.REQUESTED))
    ops = validate_compaction_plan(table, instant, plan, plan_file=plan_file)
    check_committed_inputs(table, timeline, [(op.partition, op) for op in ops], before=instant.requested_time)
    schema_json = avro_schema_to_json(table.latest_schema(timeline) or {})
    done, stats, job = run_plan(
        ctx,
        instant,
        compaction_tasks(
            table,
            timeline,
            instant.requested_time,
            ops,
            compression=ctx.compression,
            bloom=ctx.bloom,
            memory_budget=memory_budget,
        ),
        action="compaction",
        partitions={op.partition for op in ops},
        metadata=lambda stats: compaction_commit_metadata(stats, schema_json),
        checks=[without_replaced_groups(table, instant)],
        lease=lease,
        parallelism=parallelism,
    )
    seconds = time.monotonic() - started
    log.info(
        "completed compaction of %d file groups in %.1fs",
        len(stats),
        seconds,
        extra={"table": table.label, "instant": instant_time, "action": "compaction"},
    )
    return CompactionResult(done, tuple(stats), seconds, job.executor_seconds, job.records_read, job.requests)


class CompactionService(ServiceBase[CompactionPolicy]):
    """Compaction of merge-on-read tables (the `TableService` protocol)."""

    name = "compaction"
    uses_spark = True

    def applies(self, snapshot: TableSnapshot) -> bool:
        return snapshot.config.is_mor

    def pending(self, snapshot: TableSnapshot) -> list[Instant]:
        return list(snapshot.timeline.pending_compactions())

    def due(self, snapshot: TableSnapshot, *, listing: bool = True) -> Due:
        if not self.settings.policy.enabled:
            return Due(False, "compaction scheduling is disabled (tableservice.compaction.enabled=false)")
        policy = self.settings.policy
        # The log-bytes trigger lists the file groups: left out when the pass is needed anyway (`listing`).
        lazy = not listing and policy.log_bytes_threshold is not None and snapshot.config.is_mor
        state = CompactionTableState.of(snapshot.table, None if lazy else policy, timeline=snapshot.timeline)
        if lazy:
            state = replace(state, log_bytes=0)
        decision = compaction_due(state, policy, datetime.now(UTC))
        if lazy and not decision.due:
            reason = f"{decision.reason}; log bytes not measured on this poll (the pass measures them)"
            return Due(False, reason, decision.next_due_at)
        return Due(decision.due, decision.reason, decision.next_due_at)

    def schedule(self, ctx: TableContext) -> Instant | None:
        try:
            return schedule_compaction(ctx, self.settings.policy, force=True)
        except CompactionBlockedError as e:  # table version 6: waits for the earlier write to finish
            raise SchedulingDeferred(f"compaction deferred: {e.problem}") from e

    def execute(self, ctx: TableContext, instant: Instant, lease: LockHandle) -> Outcome:
        policy = self.settings.policy
        budget = compaction_memory_budget(policy.memory_max_size, policy.memory_fraction, ctx.executor.settings.conf)
        done = execute_compaction(ctx, instant.requested_time, lease=lease, memory_budget=budget)
        return Outcome(
            self.name,
            done.instant,
            done,
            bytes_read=done.bytes_read,
            bytes_written=done.bytes_written,
            records_written=done.records_written,
            log_files_compacted=done.log_files_compacted,
            executor_seconds=done.executor_seconds,
            records_read=done.records_read,
            requests=done.task_requests,  # the worker adds what the daemon's process requested
            benefit=done.benefit(),
        )
