"""Clustering actions on one table: schedule a plan when due, execute a pending plan on Spark, complete it as a
replace commit in the table version's action names (v6: `replacecommit.requested/inflight` → `replacecommit`;
v8+: `clustering.requested/inflight` → `replacecommit`).

Locks as for compaction: instant generation + plan write; conflict check + completed-instant write. The conflict
check refuses to complete when a write that completed after the plan touched or replaced an input file group.
Such a plan can never complete (it names the files it reads), and while pending it blocks writers that reject
updates under clustering, so it is abandoned: its attempt is rolled back and its instant removed (as Hudi's
`hoodie.clustering.rollback.pending.replacecommit.on.conflict` does from the writer's side); the policy may then
schedule a new plan over the current file slices.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from tableservice.errors import ActionAbandonedError, ConflictError
from tableservice.hudi.action.cluster import clustering_commit_metadata
from tableservice.hudi.action.commit import Change, ChangeKind, commit
from tableservice.hudi.action.committed_inputs import check_committed_inputs
from tableservice.hudi.action.conflicts import check_clustering_inputs, clustering_inputs_untouched
from tableservice.hudi.action.rollback import rollback
from tableservice.hudi.action.tasks import ClusteringLayout, clustering_tasks
from tableservice.hudi.models import HoodieClusteringPlan, HoodieWriteStat
from tableservice.hudi.table.hudi_table import HudiTable, Requested, TableSnapshot
from tableservice.hudi.table.schema import avro_schema_to_json
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Instant, State
from tableservice.locks import LockHandle
from tableservice.planning.clustering.plan import clustering_action, encode_requested_clustering, plan_clustering
from tableservice.planning.clustering.policy import ClusteringPolicy, LayoutOptimizationStrategy
from tableservice.planning.clustering.trigger import clustering_due
from tableservice.planning.clustering.validate import validate_clustering_plan
from tableservice.planning.due import Due
from tableservice.service.actions import TableContext, pending_plan, run_plan
from tableservice.service.protocol import Outcome, ReadPathBenefit, ServiceBase

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusteringResult:
    instant: Instant
    stats: tuple[HoodieWriteStat, ...]
    replaced: dict[str, tuple[str, ...]]
    seconds: float
    bytes_read: int = 0  # base and log bytes of the replaced file slices
    files_read: int = 0  # base and log files of the replaced file slices
    log_files_read: int = 0
    log_bytes_read: int = 0
    executor_seconds: float = 0.0  # the tasks' run time, as they measured it
    records_read: int = 0  # base rows and log records the merged reads read
    task_requests: Mapping[str, int] = field(default_factory=dict)  # object-store requests of the tasks (lower case)

    def benefit(self) -> ReadPathBenefit:
        """The replaced file groups were read from all their base and log files; the new ones from one file each."""
        groups = sum(len(ids) for ids in self.replaced.values())
        return ReadPathBenefit(
            file_groups_before=groups,
            file_groups_after=len(self.stats),
            files_before=self.files_read,
            files_after=len(self.stats),
            log_files_removed=self.log_files_read,
            log_bytes_removed=self.log_bytes_read,
        )

    @property
    def bytes_written(self) -> int:
        return sum(s.total_write_bytes or 0 for s in self.stats)

    @property
    def records_written(self) -> int:
        return sum(s.num_writes or 0 for s in self.stats)


def pending_clustering(table: HudiTable, timeline: Timeline) -> list[Instant]:
    return [i for i in timeline.pending() if table.is_clustering(i)]


def schedule_clustering(
    ctx: TableContext, policy: ClusteringPolicy, *, force: bool = False, instant_time: str | None = None
) -> Instant | None:
    table = ctx.table
    table.merge_config()  # a table whose records cannot be merged gets no plan
    if not force:  # `force`: the caller found it due; the plan is made on the timeline re-read under the lock
        due, reason = clustering_due(table, table.reload(), policy)
        if not due:
            log.debug("clustering not due: %s", reason, extra={"table": table.label})
            return None
    done = request_clustering(ctx, policy, instant_time=instant_time)
    return done.instant if done is not None else None


def request_clustering(
    ctx: TableContext, policy: ClusteringPolicy, *, instant_time: str | None = None, dry_run: bool = False
) -> Requested[HoodieClusteringPlan] | None:
    """Make a clustering plan now and write it (a `dry_run` writes nothing); None when nothing is worth it."""
    table = ctx.table
    table.merge_config()  # a table whose records cannot be merged gets no plan
    done = table.request(
        clustering_action(table.config.version),
        lambda t, timeline: plan_clustering(table, t, policy, timeline=timeline),
        lambda plan: encode_requested_clustering(plan, table_version=table.config.version),
        lock=ctx.locked,
        instant_time=instant_time,
        dry_run=dry_run,
    )
    if done is not None and done.written:
        log.info(
            "scheduled clustering of %d groups",
            len(done.plan.input_groups or ()),
            extra={"table": table.label, "instant": done.instant.requested_time},
        )
    return done


def _layout(table: HudiTable, instant: Instant, policy: ClusteringPolicy) -> ClusteringLayout:
    plan = table.clustering_plan(instant)
    params = (plan.strategy.strategy_params if plan.strategy else None) or {}
    sort_columns = tuple(
        c.strip() for c in params.get("hoodie.clustering.plan.strategy.sort.columns", "").split(",") if c.strip()
    )
    layout = "z-order" if policy.layout_strategy is LayoutOptimizationStrategy.Z_ORDER else "linear"
    return ClusteringLayout(policy.target_file_max_bytes, sort_columns, layout)


def _abandon(ctx: TableContext, instant_time: str, conflict: ConflictError) -> ActionAbandonedError:
    """Remove a clustering plan that can never complete: roll back its attempt's files, then delete its instant
    (under the table lock), so the writers it blocks go on and a new plan can be scheduled. A crash half-way
    leaves the plan requested. The next attempt finds the same conflict and finishes this, except in table version
    6 when the conflict was a write the job started too early to read: the plan names that write's files, so the
    next attempt reads its blocks and runs the plan to completion without loss."""
    table = ctx.table
    current = table.reload().get(instant_time)
    if current is not None and current.is_inflight:
        rollback(table, current, lock=ctx.lock_factory())

    def remove(latest: Timeline, _: Change) -> None:
        current = latest.get(instant_time)
        if current is not None and not current.is_completed:
            table.active.delete_pending(current)

    commit(table, Change(ChangeKind.REMOVE_PENDING, current), remove, lock=ctx.lock_factory())
    log.warning(
        "clustering abandoned and its plan removed: %s",
        conflict.problem,
        extra={"table": table.label, "instant": instant_time},
    )
    return ActionAbandonedError(
        f"clustering {instant_time} abandoned (its plan was removed): {conflict.problem}", table=table.label
    )


def execute_clustering(
    ctx: TableContext, instant_time: str, policy: ClusteringPolicy, *, lease: LockHandle | None = None
) -> ClusteringResult:
    started = time.monotonic()
    table = ctx.table
    instant, timeline = pending_plan(ctx, instant_time, "clustering", table.is_clustering)
    table.merge_config()
    plan = table.clustering_plan(instant)
    try:
        check_clustering_inputs(table, timeline, instant, plan)
    except ConflictError as e:
        raise _abandon(ctx, instant_time, e) from e
    plan_file = table.active.path_of(instant.with_state(State.REQUESTED))
    groups = validate_clustering_plan(table, instant, plan, plan_file=plan_file, timeline=timeline)
    check_committed_inputs(
        table, timeline, [(g.partition, s) for g in groups for s in g.slices], before=instant.requested_time
    )
    replaced: dict[str, list[str]] = {}
    for g in groups:
        replaced.setdefault(g.partition, []).extend(s.file_id for s in g.slices)
    replaced_t = {p: tuple(v) for p, v in replaced.items()}
    schema_json = avro_schema_to_json(table.latest_schema(timeline) or {})
    try:
        done, stats, job = run_plan(
            ctx,
            instant,
            clustering_tasks(
                table,
                timeline,
                instant.requested_time,
                groups,
                _layout(table, instant, policy),
                compression=ctx.compression,
                bloom=ctx.bloom,
            ),
            action="clustering",
            partitions={g.partition for g in groups},
            metadata=lambda stats: clustering_commit_metadata(stats, replaced_t, schema_json),
            checks=[
                clustering_inputs_untouched(
                    table, instant, plan, pending_at_start=[i.requested_time for i in timeline.pending()]
                )
            ],
            lease=lease,
        )
    except ConflictError as e:
        raise _abandon(ctx, instant_time, e) from e
    seconds = time.monotonic() - started
    log.info(
        "completed clustering of %d groups into %d files in %.1fs",
        len(groups),
        len(stats),
        seconds,
        extra={"table": table.label, "instant": instant_time, "action": "clustering"},
    )
    slices = [s for g in groups for s in g.slices]
    return ClusteringResult(
        done,
        tuple(stats),
        replaced_t,
        seconds,
        bytes_read=sum(g.input_bytes for g in groups),
        files_read=sum((1 if s.base_file else 0) + len(s.log_files) for s in slices),
        log_files_read=sum(len(s.log_files) for s in slices),
        log_bytes_read=sum(g.log_bytes for g in groups),
        executor_seconds=job.executor_seconds,
        records_read=job.records_read,
        task_requests=job.requests,
    )


class ClusteringService(ServiceBase[ClusteringPolicy]):
    """Clustering (the `TableService` protocol); v6 replace commits holding a clustering plan count as pending."""

    name = "clustering"
    uses_spark = True

    def pending(self, snapshot: TableSnapshot) -> list[Instant]:
        return pending_clustering(snapshot.table, snapshot.timeline)

    def due(self, snapshot: TableSnapshot, *, listing: bool = True) -> Due:
        return Due.of(clustering_due(snapshot.table, snapshot.timeline, self.settings.policy))

    def schedule(self, ctx: TableContext) -> Instant | None:
        return schedule_clustering(ctx, self.settings.policy, force=True)

    def execute(self, ctx: TableContext, instant: Instant, lease: LockHandle) -> Outcome:
        done = execute_clustering(ctx, instant.requested_time, self.settings.policy, lease=lease)
        return Outcome(
            self.name,
            done.instant,
            done,
            bytes_read=done.bytes_read,
            bytes_written=done.bytes_written,
            records_written=done.records_written,
            records_read=done.records_read,
            executor_seconds=done.executor_seconds,
            requests=done.task_requests,  # the worker adds what the daemon's process requested
            benefit=done.benefit(),
        )
