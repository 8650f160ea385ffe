"""SLO readings on synthetic timelines: values, time to breach, the service that fixes each target, and the risk
order against oldest-first."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from tableservice.hudi.models import HoodieWriteStat
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, State, format_instant_time
from tableservice.planning.slo import (
    DEFAULT_ACTION_SECONDS,
    NO_PENDING,
    DueWork,
    SloReading,
    SloTargets,
    Target,
    expected_duration,
    oldest_first,
    readings,
    risk_key,
    risk_order,
    small_files_of,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
T = NOW.timestamp()


def at(seconds_ago: float) -> str:
    return format_instant_time(NOW - timedelta(seconds=seconds_ago), UTC)


def instant(seconds_ago: float, action: Action, state: State = State.COMPLETED) -> Instant:
    return Instant(at(seconds_ago), action, state)


def timeline(*instants: Instant) -> Timeline:
    return Timeline(tuple(sorted(instants)), 2)


# A merge-on-read timeline: a compaction 1000 s ago, three delta commits after it, one still inflight.
COMPACTED_AGO = 1000.0
DELTAS_AGO = (900.0, 600.0, 300.0)
MOR = timeline(
    instant(1200, Action.DELTA_COMMIT),
    instant(COMPACTED_AGO, Action.COMPACTION),
    *(instant(s, Action.DELTA_COMMIT) for s in DELTAS_AGO),
    instant(100, Action.DELTA_COMMIT, State.INFLIGHT),
)


def by_target(found: list[SloReading]) -> dict[Target, SloReading]:
    return {r.target: r for r in found}


def test_uncompacted_log_age_is_the_oldest_delta_commit_after_the_last_compaction() -> None:
    for limit in (600.0, 2000.0):
        (reading,) = readings(MOR, SloTargets(max_uncompacted_log_age_seconds=limit), is_mor=True, tz=UTC, now=T)
        oldest = max(DELTAS_AGO)
        assert reading.value == oldest
        assert reading.time_to_breach == limit - oldest
        assert reading.breached is (oldest > limit)
        assert reading.service == "compaction"


def test_log_files_grow_with_delta_commits_and_extrapolate_to_the_limit() -> None:
    count = len(DELTAS_AGO)
    rate = count / COMPACTED_AGO  # delta commits per second since the compaction
    (met,) = readings(MOR, SloTargets(max_log_files_per_file_group=5), is_mor=True, tz=UTC, now=T)
    assert met.value == count and not met.breached
    assert math.isclose(met.time_to_breach, (5 + 1 - count) / rate)
    (breached,) = readings(MOR, SloTargets(max_log_files_per_file_group=2), is_mor=True, tz=UTC, now=T)
    # breached by the third delta commit after the compaction: that long ago
    third = sorted(DELTAS_AGO, reverse=True)[2]
    assert breached.breached and breached.time_to_breach == -third
    assert breached.service == "compaction"


def test_log_targets_do_not_apply_to_copy_on_write_tables_and_no_deltas_leave_the_whole_budget() -> None:
    targets = SloTargets(max_uncompacted_log_age_seconds=60, max_log_files_per_file_group=4)
    assert readings(MOR, targets, is_mor=False, tz=UTC, now=T) == []
    compacted = timeline(instant(50, Action.DELTA_COMMIT), instant(10, Action.COMPACTION))
    found = by_target(readings(compacted, targets, is_mor=True, tz=UTC, now=T))
    assert found[Target.LOG_AGE].value == 0 and found[Target.LOG_AGE].time_to_breach == 60
    assert found[Target.LOG_FILES].value == 0 and found[Target.LOG_FILES].time_to_breach == math.inf


def test_pending_age_names_the_oldest_plan_and_its_service() -> None:
    tl = timeline(
        instant(800, Action.COMMIT),
        instant(500, Action.CLUSTERING, State.REQUESTED),
        instant(200, Action.CLEAN, State.INFLIGHT),
        instant(50, Action.COMMIT, State.INFLIGHT),  # a writer's commit is not a plan
    )
    (reading,) = readings(tl, SloTargets(max_pending_age_seconds=300), is_mor=False, tz=UTC, now=T)
    assert (reading.value, reading.time_to_breach, reading.service) == (500, 300 - 500, "clustering")
    # The services' own view of what is pending wins over the timeline's actions.
    clean_only = {"clean": [instant(200, Action.CLEAN, State.INFLIGHT)]}
    (seen,) = readings(tl, SloTargets(max_pending_age_seconds=300), is_mor=False, tz=UTC, now=T, pending=clean_only)
    assert (seen.value, seen.service) == (200, "clean")
    (idle,) = readings(timeline(), SloTargets(max_pending_age_seconds=300), is_mor=False, tz=UTC, now=T)
    assert (idle.value, idle.time_to_breach, idle.service, idle.breached) == (0, 300, "", False)


def test_small_files_from_the_latest_base_file_of_each_file_group_since_the_last_clustering() -> None:
    clustered = instant(900, Action.CLUSTERING)
    first, second = instant(600, Action.COMMIT), instant(300, Action.COMMIT)
    tl = timeline(instant(1000, Action.COMMIT), clustered, first, second)
    limit = 1000
    stats = {
        first.requested_time: [("fg1", 10), ("fg2", 50), ("fg3", 5000)],
        second.requested_time: [("fg1", 4000), ("fg4", 20)],  # fg1 rewritten large
    }

    def write_stats(i: Instant) -> list[HoodieWriteStat]:
        rows = stats.get(i.requested_time, [("old", 1)])
        return [
            HoodieWriteStat(file_id=f, path=f"p/{f}_{i.requested_time}.parquet", file_size_in_bytes=n) for f, n in rows
        ]

    small = small_files_of(tl, write_stats, limit_bytes=limit, last_clustering=clustered, tz=UTC)
    latest = {}
    for t in (first.requested_time, second.requested_time):
        latest.update(dict(stats[t]))
    expected_small = sorted(f for f, size in latest.items() if size < limit)
    assert sorted(f for f, (size, _) in small.latest.items() if size < limit) == expected_small == ["fg2", "fg4"]
    (reading,) = readings(tl, SloTargets(max_small_files=1), is_mor=False, tz=UTC, now=T, small_files=small)
    assert reading.value == len(expected_small) and reading.breached and reading.service == "clustering"
    assert reading.time_to_breach == -300  # the second small file group came with the commit 300 s ago


def test_risk_order_puts_the_table_nearest_a_breach_first_and_oldest_first_among_equals() -> None:
    def reading(target: Target, ttb: float, service: str) -> SloReading:
        return SloReading(target, 100, 0, ttb, service, "")

    old_plain = DueWork("old_plain", (), frozenset({"compaction"}), at(5000))
    slow_compaction = DueWork(
        "slow", (reading(Target.LOG_AGE, 1000, "compaction"),), frozenset({"compaction"}), at(100)
    )
    tight = DueWork("tight", (reading(Target.PENDING_AGE, 300, "clean"),), frozenset({"clean"}), at(200))
    unfixable = DueWork("unfixable", (reading(Target.SMALL_FILES, -50, "clustering"),), frozenset({"clean"}), at(300))
    no_pending = DueWork("no_pending", (), frozenset({"clean"}), NO_PENDING)
    durations = {"slow": {"compaction": 950.0}}

    def expected(table: str) -> dict[str, float]:
        return durations.get(table, {})

    works = [no_pending, unfixable, tight, slow_compaction, old_plain]
    order = [w.table for w in risk_order(works, expected)]
    slacks = {w.table: risk_key(w, expected(w.table))[0] for w in works}
    assert slacks["slow"] == 1000 - 950 and slacks["tight"] == 300 - DEFAULT_ACTION_SECONDS
    assert math.isinf(slacks["unfixable"]) and math.isinf(slacks["old_plain"])  # clustering has no work in its pass
    assert order == ["slow", "tight", "old_plain", "unfixable", "no_pending"]
    assert [w.table for w in oldest_first(works)] == ["old_plain", "unfixable", "tight", "slow", "no_pending"]
    # Without targets anywhere the risk order is oldest-first.
    plain = [DueWork(w.table, (), w.services, w.oldest_pending) for w in works]
    assert [w.table for w in risk_order(plain, expected)] == [w.table for w in oldest_first(plain)]


def test_expected_duration_is_the_mean_of_the_last_completed_actions() -> None:
    newest_first = [10.0, 20.0, 30.0, 40.0, 50.0, 1000.0]
    assert expected_duration(newest_first) == sum(newest_first[:5]) / 5
    assert expected_duration([]) == DEFAULT_ACTION_SECONDS
    assert expected_duration([], 7.0) == 7.0
