"""Service-level objectives of a table and the risk of breaching them (pure: a timeline in, readings out).

A table's targets (`slo` in `defaults` or a table's `policy`) bound how stale its read path may get:

- `max_uncompacted_log_age_seconds` (merge-on-read; fixed by compaction): age of the oldest completed delta commit
  after the last completed compaction. Read from the timeline.
- `max_log_files_per_file_group` (merge-on-read; compaction): completed delta commits after the last completed
  compaction. Each adds at most one log file to a file group, so this is an upper bound. Read from the timeline.
- `max_small_files` (clustering): file groups whose latest base file, as the write stats of the completed commits
  since the last clustering record it, is smaller than the clustering small-file limit. Read from commit metadata
  (decoded once per instant by the table's cache); never a listing.
- `max_pending_age_seconds` (the pending plan's service): age of the oldest pending table-service plan. Read from
  the timeline.

A target is breached when its value exceeds the limit. Time to breach: for the ages, limit minus value; for the
counts, the count's growth since it started (the last compaction or clustering, else the first instant counted)
extrapolated linearly to the limit. Zero or negative once breached (minus the time since the breach began, by the
same extrapolation); infinite when nothing grows. The daemon orders due work by the moment it should start
(`risk_key`): now plus the smallest time to breach minus the expected duration of the action that fixes it, or the
table's implicit deadline (`DEFAULT_WAIT_BUDGET_SECONDS` after its work began to wait) when earlier; oldest pending
work first among equals. A target close to its breach also makes the service that fixes it due (`slo_due`), even
when the service's own trigger is not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import tzinfo
from enum import StrEnum

from tableservice.errors import TableServiceError
from tableservice.hudi.models import HoodieWriteStat
from tableservice.hudi.table.hudi_table import TableSnapshot
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, parse_instant_time, timeline_timezone
from tableservice.planning.due import Due

DEFAULT_ACTION_SECONDS = 60.0
"""Expected duration of an action when the daemon's history holds none of that table and service."""
DURATION_SAMPLES = 5
"""How many of the table's last completed actions of a service its expected duration averages."""
DEFAULT_WAIT_BUDGET_SECONDS = 3600.0
"""Every table's implicit deadline: its due work should start within this many seconds of when it began to wait
(`service.wait_budget_seconds`); its SLO targets may set an earlier one."""
NO_PENDING = "9" * 17
"""The oldest-first key of a table with no pending instant: after every table that has one."""


class Target(StrEnum):
    LOG_AGE = "max_uncompacted_log_age_seconds"
    LOG_FILES = "max_log_files_per_file_group"
    SMALL_FILES = "max_small_files"
    PENDING_AGE = "max_pending_age_seconds"


@dataclass(frozen=True)
class SloTargets:
    """A table's targets; None: no target of that kind."""

    max_uncompacted_log_age_seconds: float | None = None
    max_log_files_per_file_group: int | None = None
    max_small_files: int | None = None
    max_pending_age_seconds: float | None = None

    def limit(self, target: Target) -> float | None:
        value: float | None = getattr(self, target.value)
        return value

    def __bool__(self) -> bool:  # asked for every service on every poll
        return not (
            self.max_uncompacted_log_age_seconds is None
            and self.max_log_files_per_file_group is None
            and self.max_small_files is None
            and self.max_pending_age_seconds is None
        )


@dataclass(frozen=True)
class SloReading:
    """One target of one table now: its value, its limit, the seconds left before it is breached (<= 0 once it is)
    and the service whose action brings the value down."""

    target: Target
    limit: float
    value: float
    time_to_breach: float
    service: str
    basis: str  # what the value was read from, in the operator's terms

    @property
    def breached(self) -> bool:
        return self.value > self.limit

    def to_json(self) -> dict[str, object]:
        ttb = self.time_to_breach
        return {
            "target": self.target.value,
            "limit": self.limit,
            "value": round(self.value, 3),
            "time_to_breach_seconds": round(ttb, 1) if math.isfinite(ttb) else None,
            "breached": self.breached,
            "service": self.service,
            "basis": self.basis,
        }


# Pending plans and the service that executes them (a v6 `replacecommit` plan only when the caller says it is a
# clustering: an insert overwrite is a writer's).
_PLAN_SERVICES = {
    Action.COMPACTION: "compaction",
    Action.LOG_COMPACTION: "compaction",
    Action.CLUSTERING: "clustering",
    Action.CLEAN: "clean",
    Action.INDEXING: "indexing",
    Action.ROLLBACK: "rollback",
    Action.RESTORE: "rollback",
}


def _epoch(instant_time: str, tz: tzinfo) -> float | None:
    try:
        return parse_instant_time(instant_time, tz).timestamp()
    except TableServiceError:
        return None


def _written_at(instant: Instant, tz: tzinfo) -> float | None:
    """When an instant's data became visible: its completion time where the timeline has one, else its start."""
    return _epoch(instant.completion_time or instant.requested_time, tz)


def _count_reading(
    target: Target, limit: float, times: Sequence[float], since: float | None, now: float, service: str, basis: str
) -> SloReading:
    """A count that grows by one at each of `times` (sorted) since `since`: time to breach by linear
    extrapolation of its growth; a breach began at the event that took it past the limit."""
    value = float(len(times))
    if value > limit:
        crossed = times[int(limit)]  # the (limit + 1)-th event
        return SloReading(target, limit, value, -(now - crossed), service, basis)
    start = since if since is not None else (times[0] if times else None)
    span = now - start if start is not None else 0.0
    if value <= 0 or span <= 0:
        return SloReading(target, limit, value, math.inf, service, basis)
    per_second = value / span
    # The next event after the limit is reached breaches it: (limit + 1 - value) more events.
    return SloReading(target, limit, value, (limit + 1 - value) / per_second, service, basis)


def _age_reading(
    target: Target, limit: float, started: float | None, now: float, service: str, basis: str
) -> SloReading:
    """An age: none yet leaves the whole limit (the clock starts with the next write or plan)."""
    age = max(0.0, now - started) if started is not None else 0.0
    return SloReading(target, limit, age, limit - age, service, basis)


@dataclass(frozen=True)
class SmallFiles:
    """Small base files as the write stats of completed commits say: (file group id -> size and commit time)."""

    limit_bytes: int
    commits_since: float | None  # unix time of the last clustering (None: none on the timeline)
    latest: Mapping[str, tuple[int, float]]  # file id -> (size of its latest base file, when it was written)

    def small(self) -> list[float]:
        return sorted(at for size, at in self.latest.values() if size < self.limit_bytes)


def readings(
    timeline: Timeline,
    targets: SloTargets,
    *,
    is_mor: bool,
    tz: tzinfo,
    now: float,
    pending: Mapping[str, Sequence[Instant]] | None = None,
    small_files: SmallFiles | None = None,
) -> list[SloReading]:
    """The table's readings for the targets set (a target that does not apply, or whose input is missing, is left
    out: the log targets on copy-on-write tables, small files without `small_files`). `pending`: the services' pending
    instants as the services see them; else read from the timeline's actions."""
    out: list[SloReading] = []
    layout = timeline.layout_version
    log_age, log_files = targets.limit(Target.LOG_AGE), targets.limit(Target.LOG_FILES)
    if is_mor and (log_age is not None or log_files is not None):
        compactions = [i for i in timeline.completed() if i.completed_action(layout) is Action.COMMIT]
        last = compactions[-1] if compactions else None
        after = last.requested_time if last is not None else ""
        deltas = [i for i in timeline.completed() if i.action is Action.DELTA_COMMIT and i.requested_time > after]
        written = sorted(t for t in (_written_at(i, tz) for i in deltas) if t is not None)
        since = f"since the compaction {after}" if last is not None else "on the active timeline (no compaction)"
        if log_age is not None:
            basis = f"oldest of {len(written)} delta commits {since}"
            out.append(_age_reading(Target.LOG_AGE, log_age, written[0] if written else None, now, "compaction", basis))
        if log_files is not None:
            start = _written_at(last, tz) if last is not None else None
            basis = f"{len(written)} delta commits {since} (at most one log file per file group each)"
            out.append(_count_reading(Target.LOG_FILES, log_files, written, start, now, "compaction", basis))
    small_limit = targets.limit(Target.SMALL_FILES)
    if small_limit is not None and small_files is not None:
        times = small_files.small()
        basis = f"file groups whose latest base file is under {small_files.limit_bytes} bytes (commit write stats)"
        out.append(
            _count_reading(Target.SMALL_FILES, small_limit, times, small_files.commits_since, now, "clustering", basis)
        )
    pending_limit = targets.limit(Target.PENDING_AGE)
    if pending_limit is not None:
        plans = _pending_plans(timeline, pending)
        oldest = min(plans, key=lambda p: p[0].requested_time, default=None)
        if oldest is None:
            out.append(_age_reading(Target.PENDING_AGE, pending_limit, None, now, "", "no pending plan"))
        else:
            instant, service = oldest
            basis = f"{instant.action.value} {instant.requested_time} ({instant.state.name.lower()})"
            started = _epoch(instant.requested_time, tz)
            out.append(_age_reading(Target.PENDING_AGE, pending_limit, started, now, service, basis))
    return out


def _pending_plans(timeline: Timeline, pending: Mapping[str, Sequence[Instant]] | None) -> list[tuple[Instant, str]]:
    if pending is not None:
        return [(i, service) for service, instants in pending.items() for i in instants]
    return [(i, _PLAN_SERVICES[i.action]) for i in timeline.pending() if i.action in _PLAN_SERVICES]


WriteStats = Callable[[Instant], Iterable[HoodieWriteStat]]


def small_files_of(
    timeline: Timeline, write_stats: WriteStats, *, limit_bytes: int, last_clustering: Instant | None, tz: tzinfo
) -> SmallFiles:
    """Small base files from the write stats of the completed writes after `last_clustering`: per file group the
    latest base file written (log files are not base files)."""
    after = last_clustering.requested_time if last_clustering is not None else ""
    latest: dict[str, tuple[int, float]] = {}
    for instant in timeline.completed_writes():
        if instant.requested_time <= after:
            continue
        at = _written_at(instant, tz)
        for stat in write_stats(instant):
            path = stat.path or ""
            if not stat.file_id or not path.endswith((".parquet", ".orc", ".hfile")):
                continue
            latest[stat.file_id] = (int(stat.file_size_in_bytes or 0), at if at is not None else 0.0)
    since = _written_at(last_clustering, tz) if last_clustering is not None else None
    return SmallFiles(limit_bytes, since, latest)


def snapshot_readings(
    snapshot: TableSnapshot,
    targets: SloTargets,
    *,
    now: float,
    pending: Mapping[str, Sequence[Instant]] | None = None,
    small_file_limit: int = 314_572_800,
) -> list[SloReading]:
    """`readings` of a pass's snapshot; small files only when `max_small_files` is set (commit metadata, decoded
    once per instant by the table's cache)."""
    config, timeline, table = snapshot.config, snapshot.timeline, snapshot.table
    tz = timeline_timezone(config.timezone_name)
    small: SmallFiles | None = None
    if targets.max_small_files is not None:
        clusterings = [i for i in timeline.completed() if table.is_clustering(i)]

        def stats(instant: Instant) -> Iterable[HoodieWriteStat]:
            if instant.completed_action(timeline.layout_version) is Action.REPLACE_COMMIT:
                return table.replace_commit_metadata(instant).write_stats()
            return table.commit_metadata(instant).write_stats()

        small = small_files_of(
            timeline,
            stats,
            limit_bytes=small_file_limit,
            last_clustering=clusterings[-1] if clusterings else None,
            tz=tz,
        )
    return readings(timeline, targets, is_mor=config.is_mor, tz=tz, now=now, pending=pending, small_files=small)


# --- the risk order ------------------------------------------------------------------------------------------------


def expected_duration(durations: Sequence[float], default: float = DEFAULT_ACTION_SECONDS) -> float:
    """Mean of the last `DURATION_SAMPLES` durations (newest first), else `default`."""
    recent = [d for d in durations[:DURATION_SAMPLES] if d >= 0]
    return sum(recent) / len(recent) if recent else default


def slack(reading: SloReading, expected: Mapping[str, float], default: float = DEFAULT_ACTION_SECONDS) -> float:
    """Seconds to spare if the fixing action started now: time to breach minus its expected duration."""
    return reading.time_to_breach - expected.get(reading.service, default)


@dataclass(frozen=True)
class DueWork:
    """A table waiting to run a pass: its readings, the services with work in the pass (pending or due), the
    requested time of its oldest pending instant (`NO_PENDING` when none) and since when (unix seconds) its due work
    has waited: its oldest pending plan, or when a service was first found due (None: from now)."""

    table: str
    readings: Sequence[SloReading] = ()
    services: frozenset[str] = frozenset()
    oldest_pending: str = NO_PENDING
    waiting_since: float | None = None


def risk_key(
    work: DueWork,
    expected: Mapping[str, float],
    default: float = DEFAULT_ACTION_SECONDS,
    *,
    now: float,
    budget: float = DEFAULT_WAIT_BUDGET_SECONDS,
) -> tuple[float, str]:
    """(the moment the pass should start by, oldest pending instant): smaller goes first. Two deadlines, the earlier
    wins: `now` plus the least slack among the targets a service of this pass fixes (none: never), and the implicit
    one every table has, `budget` seconds after its due work began to wait. The key is a moment, not a span, so a
    waiter queued earlier compares rightly with one queued now; and a table without targets (or whose targets are
    far from breach) moves up as it waits instead of waiting behind targeted tables for ever."""
    least = min(
        (slack(r, expected, default) for r in work.readings if r.service and r.service in work.services),
        default=math.inf,
    )
    since = work.waiting_since if work.waiting_since is not None else now
    return (min(now + least, since + budget), work.oldest_pending)


def risk_order(
    works: Iterable[DueWork],
    expected: Callable[[str], Mapping[str, float]],
    default: float = DEFAULT_ACTION_SECONDS,
    *,
    now: float,
    budget: float = DEFAULT_WAIT_BUDGET_SECONDS,
) -> list[DueWork]:
    """Due work, most at risk first; `expected(table)`: that table's expected duration per service."""
    return sorted(works, key=lambda w: risk_key(w, expected(w.table), default, now=now, budget=budget))


def waiting_since(pending: Iterable[Instant], tz: tzinfo, found_due_at: float | None) -> float | None:
    """Since when a table's due work has waited (unix seconds): the request of its oldest pending plan (of the
    services' pending instants), or when a service was first found due, whichever is earlier; None: neither."""
    times = [t for t in (_epoch(i.requested_time, tz) for i in pending) if t is not None]
    if found_due_at is not None:
        times.append(found_due_at)
    return min(times, default=None)


def oldest_first(works: Iterable[DueWork]) -> list[DueWork]:
    """The order without targets: oldest pending instant first."""
    return sorted(works, key=lambda w: w.oldest_pending)


# --- due because of a target ----------------------------------------------------------------------------------------

# The targets that scheduling a new plan brings down (the pending-age target is met by executing the plan).
FIXED_BY_PLANNING = frozenset({Target.LOG_AGE, Target.LOG_FILES, Target.SMALL_FILES})


def slo_due(readings: Iterable[SloReading], service: str, expected_seconds: float, margin_seconds: float) -> Due | None:
    """Due now because of a target, whatever the service's trigger says: the target of `service` nearest its
    breach, when its time to breach is at most the action's expected duration plus `margin_seconds` (the wait
    until the next poll). None: no target of the service is that close."""
    close = [
        r
        for r in readings
        if r.service == service
        and r.target in FIXED_BY_PLANNING
        and r.time_to_breach <= expected_seconds + margin_seconds
    ]
    if not close:
        return None
    r = min(close, key=lambda x: x.time_to_breach)
    if r.time_to_breach > 0:
        when = f"breaches in {r.time_to_breach:.0f} s"
    else:
        when = f"breached {-r.time_to_breach:.0f} s ago"
    return Due(
        True,
        f"due: SLO {r.target.value} {when} ({r.value:g} of {r.limit:g}; expected {service} {expected_seconds:.0f} s "
        f"+ margin {margin_seconds:.0f} s)",
    )


def due_with_slo(trigger: Due, readings: Iterable[SloReading], service: str, expected: float, margin: float) -> Due:
    """The service's own trigger, unless a target makes it due first (the trigger's reason kept after it)."""
    if trigger.due:
        return trigger
    forced = slo_due(readings, service, expected, margin)
    if forced is None:
        return trigger
    return Due(True, f"{forced.reason}; trigger {trigger.reason}")
