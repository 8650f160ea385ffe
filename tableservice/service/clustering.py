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
import posixpath
import time
from dataclasses import dataclass

from tableservice.errors import ActionAbandonedError, ConflictError, InvalidPlanError
from tableservice.hudi.clustering import ClusteringTask, clustering_commit_metadata
from tableservice.hudi.filenames import parse_base_file_name
from tableservice.hudi.fsview import partition_location
from tableservice.hudi.instant import Instant, State
from tableservice.hudi.logformat import BlockType, LogBlock, iter_log_blocks
from tableservice.hudi.models import HoodieClusteringPlan, HoodieWriteStat
from tableservice.hudi.rollback import rollback
from tableservice.hudi.schema import add_meta_fields, avro_schema_to_json
from tableservice.hudi.table import HudiTable
from tableservice.hudi.timeline import Timeline
from tableservice.locks import LockHandle
from tableservice.planning.clustering import clustering_action, encode_requested_clustering, plan_clustering
from tableservice.planning.clustering_policy import ClusteringPolicy, LayoutOptimizationStrategy
from tableservice.planning.clustering_trigger import clustering_due
from tableservice.planning.clustering_validate import ClusteringGroupInput, validate_clustering_plan
from tableservice.service.actions import TableContext, check_no_metadata_table, pending_plan, run_plan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusteringResult:
    instant: Instant
    stats: tuple[HoodieWriteStat, ...]
    replaced: dict[str, tuple[str, ...]]
    seconds: float

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
    check_no_metadata_table(table)
    timeline = table.reload()
    if not force:
        due, reason = clustering_due(table, timeline, policy)
        if not due:
            log.debug("clustering not due: %s", reason, extra={"table": table.name})
            return None
    done = table.request(
        clustering_action(table.config.version),
        lambda t, timeline: plan_clustering(table, t, policy, timeline=timeline),
        lambda plan: encode_requested_clustering(plan, table_version=table.config.version),
        lock=ctx.locked,
        instant_time=instant_time,
    )
    if done is None:
        return None
    instant, plan = done
    log.info(
        "scheduled clustering of %d groups",
        len(plan.input_groups or ()),
        extra={"table": table.name, "instant": instant.requested_time},
    )
    return instant


def _tasks(
    ctx: TableContext,
    instant: Instant,
    groups: list[ClusteringGroupInput],
    timeline: Timeline,
    policy: ClusteringPolicy,
) -> list[ClusteringTask]:
    table = ctx.table
    schema = table.latest_schema(timeline)
    if schema is None:
        raise InvalidPlanError("table has no schema", table=table.name)
    plan = table.clustering_plan(instant)
    params = (plan.strategy.strategy_params if plan.strategy else None) or {}
    sort_columns = tuple(
        c.strip() for c in params.get("hoodie.clustering.plan.strategy.sort.columns", "").split(",") if c.strip()
    )
    layout = "z-order" if policy.layout_strategy is LayoutOptimizationStrategy.Z_ORDER else "linear"
    return [
        ClusteringTask(
            table_name=table.name,
            base_path=table.base_path,
            table_version=table.config.version,
            properties=dict(table.config.properties),
            avro_schema=add_meta_fields(schema),
            instant_time=instant.requested_time,
            partition_path=g.partition,
            slices=g.slices,
            num_output_groups=g.num_output_file_groups,
            target_file_bytes=policy.target_file_max_bytes,
            sort_columns=sort_columns,
            layout=layout,
            completed_instants=tuple(i.requested_time for i in timeline.completed()),
            timeline_start=timeline.commits_start(),
            pending_instants=tuple(i.requested_time for i in timeline.pending()),
            compression=ctx.compression,
            size_hint=g.input_bytes,
            group_index=g.index,
        )
        for g in groups
    ]


def _named_files(plan: HoodieClusteringPlan) -> dict[tuple[str, str], set[str]]:
    """File names the plan reads, per input file group."""
    named: dict[tuple[str, str], set[str]] = {}
    for group in plan.input_groups or ():
        for info in group.slices or ():
            paths = ([info.data_file_path] if info.data_file_path else []) + list(info.delta_file_paths or ())
            fg = (info.partition_path or "", info.file_id or "")
            named.setdefault(fg, set()).update(posixpath.basename(p) for p in paths)
    return named


def _check_inputs_unchanged(table: HudiTable, latest: Timeline, instant: Instant, plan: HoodieClusteringPlan) -> None:
    """Table version 6 has no completion times, so a write requested before the plan may have completed after it.
    The plan names the files it reads: refuse when an input file group's latest slice holds a file the plan does
    not name with data of a completed instant in it, or the group is gone (replaced)."""
    named = _named_files(plan)
    partitions = {p for p, _ in named}
    listing = {p: table.storage.list(partition_location(table.base_path, p)) for p in partitions}
    view = table.file_system_view(timeline=latest, listing=listing)
    current = {g.id: g.latest_slice() for p in partitions for g in view.file_groups(p)}
    for fg, names in sorted(named.items()):
        slice_ = current.get(fg)
        if slice_ is None:
            raise ConflictError(
                f"file group {fg[1]} in {fg[0]!r} was replaced after clustering {instant.requested_time} was planned",
                table=table.name,
            )
        extra = sorted(
            name
            for f in slice_.files()
            if (name := posixpath.basename(f)) not in names and _holds_committed_data(table, latest, f)
        )
        if extra:
            raise ConflictError(
                f"file group {fg[1]} in {fg[0]!r} has files written after clustering {instant.requested_time} was "
                f"planned: {extra[:3]}",
                table=table.name,
            )


def _holds_committed_data(table: HudiTable, latest: Timeline, location: str) -> bool:
    """Whether a file holds data of a completed instant. A failed write leaves files behind in table version 6 (its
    rollback only appends a command block), and they hold nothing a reader keeps."""
    name = posixpath.basename(location)
    base = parse_base_file_name(name)
    if base is not None:
        return latest.is_completed(base.instant_time)
    return any(
        isinstance(block, LogBlock)
        and block.block_type is not BlockType.COMMAND
        and latest.is_completed(block.instant_time or "")
        for block in iter_log_blocks(table.storage, location, table=table.name)
    )


def _check_conflicts(
    table: HudiTable,
    latest: Timeline,
    instant: Instant,
    plan: HoodieClusteringPlan,
    pending_at_start: frozenset[str] = frozenset(),
) -> None:
    """Refuse when a write that completed after the plan touched or replaced an input file group: the plan names
    the files it reads, so that write's data would be lost. Such a plan can never complete. `pending_at_start`:
    the writes pending when the tasks started (they read only blocks of instants completed by then)."""
    inputs = plan.file_group_ids()
    for other in table.writes_completed_since(latest, instant, pending_at_start=pending_at_start):
        md = table.commit_metadata(other)
        touched = {(s.partition_path or "", s.file_id or "") for s in md.write_stats()}
        replaced = getattr(md, "partition_to_replace_file_ids", None) or {}
        touched |= {(p, f) for p, fids in replaced.items() for f in fids}
        clash = touched & inputs
        if clash:
            raise ConflictError(
                f"{other} wrote file groups {sorted(clash)[:3]} under clustering {instant.requested_time}",
                table=table.name,
            )
    if table.config.version < 8:
        _check_inputs_unchanged(table, latest, instant, plan)


def _unless_conflicting(
    table: HudiTable,
    latest: Timeline,
    instant: Instant,
    plan: HoodieClusteringPlan,
    started: Timeline,
    stats: list[HoodieWriteStat],
) -> list[HoodieWriteStat]:
    _check_conflicts(table, latest, instant, plan, frozenset(i.requested_time for i in started.pending()))
    return stats


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
    with ctx.locked():
        current = table.reload().get(instant_time)
        if current is not None and not current.is_completed:
            table.active.delete_pending(current)
    log.warning(
        "clustering abandoned and its plan removed: %s",
        conflict.problem,
        extra={"table": table.name, "instant": instant_time},
    )
    return ActionAbandonedError(
        f"clustering {instant_time} abandoned (its plan was removed): {conflict.problem}", table=table.name
    )


def execute_clustering(
    ctx: TableContext, instant_time: str, policy: ClusteringPolicy, *, lease: LockHandle | None = None
) -> ClusteringResult:
    started = time.monotonic()
    table = ctx.table
    check_no_metadata_table(table)
    instant, timeline = pending_plan(ctx, instant_time, "clustering", table.is_clustering)
    plan = table.clustering_plan(instant)
    try:
        _check_conflicts(table, timeline, instant, plan)
    except ConflictError as e:
        raise _abandon(ctx, instant_time, e) from e
    plan_file = table.active.path_of(instant.with_state(State.REQUESTED))
    groups = validate_clustering_plan(table, instant, plan, plan_file=plan_file, timeline=timeline)
    replaced: dict[str, list[str]] = {}
    for g in groups:
        replaced.setdefault(g.partition, []).extend(s.file_id for s in g.slices)
    replaced_t = {p: tuple(v) for p, v in replaced.items()}
    schema_json = avro_schema_to_json(table.latest_schema(timeline) or {})
    try:
        done, stats = run_plan(
            ctx,
            instant,
            _tasks(ctx, instant, groups, timeline, policy),
            action="clustering",
            partitions={g.partition for g in groups},
            metadata=lambda stats: clustering_commit_metadata(stats, replaced_t, schema_json),
            check_conflicts=lambda latest, stats: _unless_conflicting(table, latest, instant, plan, timeline, stats),
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
        extra={"table": table.name, "instant": instant_time},
    )
    return ClusteringResult(done, tuple(stats), replaced_t, seconds)
