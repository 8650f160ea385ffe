"""When a clustering is due, and which partitions an incremental clustering planner looks at.

Trigger (Hudi's ClusteringPlanActionExecutor.createClusteringPlan, 0.14+ and 1.x): the last clustering is the
newest replace commit or clustering instant on the timeline, in any state, whose requested metadata holds a
clustering plan (insert overwrites do not count); the count is the completed commits, delta commits and replace
commits (completed compactions and log compactions included: they complete as commit / delta commit) requested
after it, or all of them when there is none. Due when the count reaches the policy's `max_commits`.

Incremental partitions (Hudi 1.x BaseTableServicePlanActionExecutor.getIncrementalPartitions, table versions 8
and 9 with `hoodie.table.services.incremental.enabled`): with a completed clustering L on the timeline, the
partitions written (write stats) by completed commits and replace commits (copy-on-write) or delta commits and
replace commits (merge-on-read) other than L itself whose completion time lies in [L's requested time, C), plus
the partitions L's plan left out (`missingSchedulePartitions`). Hudi collects them in a Java HashSet and plans
them in that set's iteration order (`java_hash_set_order`). Without a completed clustering: every partition.
"""

from __future__ import annotations

from collections.abc import Iterable

from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant
from tableservice.planning.clustering.policy import ClusteringPolicy

_COUNTED = frozenset({Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT})


def last_clustering_instant(table: HudiTable, timeline: Timeline, *, completed_only: bool = False) -> Instant | None:
    """The newest clustering instant (pending ones too unless `completed_only`)."""
    for instant in reversed(timeline.instants):
        if completed_only and not instant.is_completed:
            continue
        if table.is_clustering(instant):
            return instant
    return None


def commits_since_last_clustering(table: HudiTable, timeline: Timeline | None = None) -> tuple[int, Instant | None]:
    """(completed commits requested after the last clustering, that clustering or None)."""
    tl = timeline if timeline is not None else table.timeline()
    last = last_clustering_instant(table, tl)
    after = last.requested_time if last is not None else ""
    layout = tl.layout_version
    count = sum(1 for i in tl if i.is_completed and i.requested_time > after and i.completed_action(layout) in _COUNTED)
    return count, last


def clustering_due(table: HudiTable, timeline: Timeline | None, policy: ClusteringPolicy) -> tuple[bool, str]:
    """(due?, why) for scheduling a new clustering now."""
    tl = timeline if timeline is not None else table.timeline()
    count, last = commits_since_last_clustering(table, tl)
    since = f"since the last clustering {last.requested_time}" if last is not None else "and no clustering yet"
    threshold = policy.max_commits
    due = count >= threshold
    why = f"{count} completed commits {since} (threshold {threshold})"
    if not policy.enabled:
        return False, f"clustering scheduling is disabled; {why}"
    return due, ("due: " if due else "not due: ") + why


# --- incremental partitions ----------------------------------------------------------------------------------


def _java_string_hash(text: str) -> int:
    h = 0
    data = text.encode("utf-16-be")
    for k in range(0, len(data), 2):
        h = (31 * h + ((data[k] << 8) | data[k + 1])) & 0xFFFFFFFF
    return h


def java_hash_set_order(items: Iterable[str]) -> list[str]:
    """The iteration order of a `java.util.HashSet<String>` filled with `items` in order (duplicates keep their
    first place): buckets by spread hash (`h ^ (h >>> 16)`) over a table of 16 doubled while more than 3/4 full,
    insertion order within a bucket. (Bins turned into trees, 8+ colliding keys in a table of 64+, are not
    modelled.)"""
    unique = list(dict.fromkeys(items))
    capacity = 16
    while len(unique) > capacity * 3 // 4:
        capacity *= 2

    def bucket(text: str) -> int:
        h = _java_string_hash(text)
        return (h ^ (h >> 16)) & (capacity - 1)

    return [s for _, s in sorted(enumerate(unique), key=lambda pair: (bucket(pair[1]), pair[0]))]


def previous_missing_partitions(table: HudiTable, timeline: Timeline) -> tuple[Instant | None, list[str]]:
    """(newest completed clustering, the partitions its plan left out)."""
    last = last_clustering_instant(table, timeline, completed_only=True)
    if last is None:
        return None, []
    plan = table.requested_replace_metadata(last).clustering_plan
    return last, list(plan.missing_schedule_partitions or ()) if plan is not None else []


def incremental_partitions(table: HudiTable, timeline: Timeline, instant_time: str) -> list[str] | None:
    """Partitions an incremental planner at `instant_time` looks at, in Hudi's order; None when it falls back to
    every partition (no completed clustering on the active timeline)."""
    last, missing = previous_missing_partitions(table, timeline)
    if last is None:
        return None
    written_by = (
        {Action.DELTA_COMMIT, Action.REPLACE_COMMIT} if table.config.is_mor else {Action.COMMIT, Action.REPLACE_COMMIT}
    )
    layout = timeline.layout_version
    left = last.requested_time
    found: list[str] = []
    for i in timeline:
        if not i.is_completed or i.requested_time == last.requested_time:
            continue
        if i.completed_action(layout) not in written_by:
            continue
        done = i.completion_time or i.requested_time
        if not (left <= done < instant_time):
            continue
        md = table.commit_metadata(i)
        for partition, stats in (md.partition_to_write_stats or {}).items():
            for stat in stats:
                found.append(stat.partition_path if stat.partition_path is not None else partition)
    return java_hash_set_order([*found, *missing])
