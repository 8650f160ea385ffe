"""The health summary of `table show`: what the table services have to catch up on, and when each last ran."""

from __future__ import annotations

from typing import Any

from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.fs_view import FileSystemView
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, State, parse_instant_time, timeline_timezone
from tableservice.planning.clustering.policy import ClusteringPolicy

#: Hudi's default small-file limit of clustering plans (`hoodie.clustering.plan.strategy.small.file.limit`).
SMALL_FILE_BYTES = ClusteringPolicy().small_file_limit


def _age_seconds(requested_time: str, tz_name: str, now: float) -> float | None:
    try:
        return max(0.0, now - parse_instant_time(requested_time, timeline_timezone(tz_name)).timestamp())
    except Exception:  # an instant time that is not a date (e.g. a metadata table's solo commit): no age
        return None


def _last(timeline: Timeline, table: HudiTable, want: Action) -> Instant | None:
    done = [
        i for i in timeline.completed() if i.action is want or (want is Action.CLUSTERING and table.is_clustering(i))
    ]
    return done[-1] if done else None


def last_archived(table: HudiTable, want: Action) -> str | None:
    """The newest archived compaction (a merge-on-read table's completed `commit`) or clean, for when the active
    timeline holds none any more: read from the newest archive files only."""
    if want is Action.COMPACTION and table.config.table_type is not TableType.MERGE_ON_READ:
        return None
    action = Action.COMMIT if want is Action.COMPACTION else want
    found = table.newest_archived(lambda a: a.state is State.COMPLETED and a.action is action)
    return found.requested_time if found is not None else None


def health_summary(table: HudiTable, timeline: Timeline, view: FileSystemView, now: float) -> dict[str, Any]:
    """Log backlog, small files, the oldest pending instant of each action, the last completed service actions."""
    slices = view.latest_merged_slices()
    with_logs = [s for s in slices if s.log_files]
    small = [s for s in slices if s.base_file is not None and s.base_file.size < SMALL_FILE_BYTES]
    oldest: dict[str, dict[str, Any]] = {}
    for i in timeline.pending():
        key = i.action.value
        if key not in oldest:
            oldest[key] = {
                "instant": i.requested_time,
                "state": i.state.name,
                "age_seconds": _age_seconds(i.requested_time, table.config.timezone_name, now),
            }
    last: dict[str, dict[str, Any] | None] = {}
    for name, action in (("compaction", Action.COMPACTION), ("clustering", Action.CLUSTERING), ("clean", Action.CLEAN)):
        found = _last(timeline, table, action)
        if found is not None:
            last[name] = {"instant": found.requested_time, "archived": False}
            continue
        archived = last_archived(table, action) if action is not Action.CLUSTERING else None
        last[name] = {"instant": archived, "archived": True} if archived else None
    newest = table.newest_archived()  # the newest archive file only: the archive can be long
    return {
        "file_groups": len(slices),
        "file_groups_with_logs": len(with_logs),
        "most_log_files_in_a_file_group": max((len(s.log_files) for s in with_logs), default=0),
        "log_bytes": sum(s.log_size for s in with_logs),
        "small_base_files": len(small),
        "small_file_limit_bytes": SMALL_FILE_BYTES,
        "oldest_pending": oldest,
        "last_completed": last,
        "newest_archived_instant": newest.requested_time if newest is not None else None,
    }


def print_health(health: dict[str, Any], human: Any) -> None:
    print(
        f"health: {health['file_groups_with_logs']} of {health['file_groups']} file groups with log files "
        f"(at most {health['most_log_files_in_a_file_group']} in one, {human(health['log_bytes'])}); "
        f"{health['small_base_files']} base files under {human(health['small_file_limit_bytes'])}"
    )
    for action, p in health["oldest_pending"].items():
        age = f", {p['age_seconds']:.0f}s old" if p["age_seconds"] is not None else ""
        print(f"  oldest pending {action}: {p['instant']} ({p['state']}{age})")
    for name, done in health["last_completed"].items():
        where = " (archived)" if done and done["archived"] else ""
        print(f"  last {name}: {done['instant'] if done else '-'}{where}")
    print(f"  newest archived instant: {health['newest_archived_instant'] or '-'}")
