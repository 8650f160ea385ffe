"""Clustering planning: which file slices a clustering at a new instant C rewrites, as Hudi would plan them.

`plan_clustering` reproduces Hudi's ClusteringPlanActionExecutor + SparkSizeBasedClusteringPlanStrategy
(checked against every real clustering plan in the fixtures, see tests/test_planning_clustering.py):

1. C must be newer than every instant on the timeline (InvalidTimelineError otherwise).
2. Partitions: `partition.selected` when set (as listed); else the table's partitions (sorted; table versions 8
   and 9 with incremental table services: only those `clustering_trigger.incremental_partitions` names, when
   a completed clustering exists), kept when they fully match `partition.regex.pattern`; then the filter mode
   (SELECTED_PARTITIONS: between `cluster.begin.partition` and `cluster.end.partition`, inclusive).
3. Per partition, the groups of `clustering_groups.build_partition_groups`; at most `max.num.groups` groups in
   the whole plan, taken in partition order.
4. No group → None (no plan is written). Otherwise a plan version 1 with the execution strategy class,
   `strategyParams` holding the sort columns key when sort columns are set (else empty), `extraMetadata` {},
   `preserveHoodieMetadata` true and, in table versions 8 and 9 with incremental table services,
   `missingSchedulePartitions`: partitions whose slices were not all planned (plus, with `partition.selected`,
   those the last completed clustering left out), in Java HashSet order; null otherwise.

The requested file (`requested_replace_metadata`, `encode_requested_clustering`) is a
HoodieRequestedReplaceMetadata with operationType CLUSTER, the plan, the writer's extra metadata ({} by default)
and version 1; its instant is `<C>.replacecommit.requested` in table version 6 and `<C>.clustering.requested`
in versions 8 and 9 (`clustering_action`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from tableservice.errors import InvalidTimelineError
from tableservice.hudi.action.plan_paths import check_plan_location
from tableservice.hudi.models import (
    HoodieClusteringGroup,
    HoodieClusteringPlan,
    HoodieClusteringStrategy,
    HoodieRequestedReplaceMetadata,
    encode_requested_replace_metadata,
)
from tableservice.hudi.table.fs_view import FileSystemView
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action
from tableservice.planning.clustering.groups import build_partition_groups, eligible_slices
from tableservice.planning.clustering.policy import (
    SORT_COLUMNS_KEY,
    ClusteringPartitionFilterMode,
    ClusteringPolicy,
    LayoutOptimizationStrategy,
)
from tableservice.planning.clustering.trigger import (
    clustering_due,
    commits_since_last_clustering,
    incremental_partitions,
    java_hash_set_order,
    last_clustering_instant,
    previous_missing_partitions,
)
from tableservice.planning.clustering.validate import ClusteringGroupInput, validate_clustering_plan

PLAN_VERSION = 1
CLUSTER_OPERATION = "CLUSTER"

__all__ = [
    "CLUSTER_OPERATION",
    "PLAN_VERSION",
    "ClusteringGroupInput",
    "ClusteringPartitionFilterMode",
    "ClusteringPolicy",
    "LayoutOptimizationStrategy",
    "clustering_action",
    "clustering_due",
    "commits_since_last_clustering",
    "encode_requested_clustering",
    "last_clustering_instant",
    "plan_clustering",
    "plan_partitions",
    "requested_replace_metadata",
    "validate_clustering_plan",
]


def clustering_action(table_version: int) -> Action:
    """The action a new clustering is requested as: replacecommit (version 6) or clustering (8 and 9)."""
    return Action.CLUSTERING if table_version >= 8 else Action.REPLACE_COMMIT


def plan_partitions(
    table: HudiTable, timeline: Timeline, view: FileSystemView, instant_time: str, policy: ClusteringPolicy
) -> tuple[list[str], list[str]]:
    """(partitions to plan, in order; partitions carried over as missing)."""
    incremental = policy.incremental and table.config.version >= 8
    carried: list[str] = []
    if policy.selected_partitions:
        partitions = list(policy.selected_partitions)
        if incremental:
            carried = previous_missing_partitions(table, timeline)[1]
    else:
        listed = incremental_partitions(table, timeline, instant_time) if incremental else None
        partitions = listed if listed is not None else view.partitions()
        pattern = policy.partition_regex_pattern
        if pattern is not None:
            regex = re.compile(pattern)
            partitions = [p for p in partitions if regex.fullmatch(p)]
    if policy.partition_filter_mode is ClusteringPartitionFilterMode.SELECTED_PARTITIONS:
        begin, end = policy.begin_partition, policy.end_partition
        partitions = [p for p in partitions if (begin is None or p >= begin) and (end is None or p <= end)]
    return partitions, carried


def plan_clustering(
    table: HudiTable,
    instant_time: str,
    policy: ClusteringPolicy,
    *,
    timeline: Timeline | None = None,
    view: FileSystemView | None = None,
) -> HoodieClusteringPlan | None:
    """The clustering plan for a new instant `instant_time`, or None when nothing is worth clustering.

    `timeline` defaults to the table's active timeline and `view` to the file-system view built from it (pass
    both to plan against a state other than the current one). Does not look at whether a clustering is due
    (see `clustering_due`) or at `policy.enabled`, and writes nothing.
    """
    tl = timeline if timeline is not None else table.timeline()
    newer = [i for i in tl if i.requested_time >= instant_time]
    if newer:
        raise InvalidTimelineError(
            f"clustering instant {instant_time} is not newer than {newer[0]} on the timeline", table=table.label
        )
    fsv = view if view is not None else table.file_system_view(timeline=tl)
    partitions, carried = plan_partitions(table, tl, fsv, instant_time, policy)
    if not partitions:
        return None
    known = set(fsv.partitions())
    groups: list[HoodieClusteringGroup] = []
    partial: list[str] = []
    overflow: list[str] = []
    for partition in partitions:
        if partition not in known:
            continue
        built = build_partition_groups(partition, eligible_slices(fsv, partition, policy), policy)
        if built.partial:
            partial.append(partition)
        room = policy.max_num_groups - len(groups)
        if len(built.groups) > room:
            overflow.append(partition)
        groups.extend(built.groups[: max(room, 0)])
    if not groups:
        return None
    _check_paths(table, groups)
    missing: tuple[str, ...] | None = None
    if policy.incremental and table.config.version >= 8:
        missing = tuple(java_hash_set_order([*partial, *overflow, *carried]))
    params = {SORT_COLUMNS_KEY: policy.sort_columns} if policy.sort_columns else {}
    return HoodieClusteringPlan(
        input_groups=tuple(groups),
        strategy=HoodieClusteringStrategy(
            strategy_class_name=policy.execution_strategy_class, strategy_params=params, version=1
        ),
        extra_metadata={},
        version=PLAN_VERSION,
        preserve_hoodie_metadata=True,
        missing_schedule_partitions=missing,
    )


def _check_paths(table: HudiTable, groups: list[HoodieClusteringGroup]) -> None:
    """Every path the plan names is absolute under the table's base path (`plan_paths.check_plan_location`)."""
    for group in groups:
        for s in group.slices or ():
            for path in (s.data_file_path, *(s.delta_file_paths or ())):
                if path:
                    check_plan_location(table.base_path, path, table=table.name)


def requested_replace_metadata(
    plan: HoodieClusteringPlan, *, extra_metadata: Mapping[str, str] | None = None
) -> HoodieRequestedReplaceMetadata:
    """What the requested clustering file holds (Hudi's ClusteringPlanActionExecutor.execute)."""
    return HoodieRequestedReplaceMetadata(
        operation_type=CLUSTER_OPERATION,
        clustering_plan=plan,
        extra_metadata=dict(extra_metadata or {}),
        version=1,
    )


def encode_requested_clustering(
    plan: HoodieClusteringPlan, *, table_version: int, extra_metadata: Mapping[str, str] | None = None
) -> bytes:
    """The bytes of `<C>.replacecommit.requested` (version 6) or `<C>.clustering.requested` (8 and 9). Version 6
    writers' schema has no `missingSchedulePartitions`: the field is dropped."""
    if table_version < 8 and plan.missing_schedule_partitions is not None:
        plan = plan.model_copy(update={"missing_schedule_partitions": None})
    md = requested_replace_metadata(plan, extra_metadata=extra_metadata)
    return encode_requested_replace_metadata(md, table_version=table_version)
