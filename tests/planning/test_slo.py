"""SLO readings on synthetic timelines: values, time to breach, the service that fixes each target, and the risk
order against oldest-first."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from tableservice.hudi.models import HoodieWriteStat
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, State, format_instant_time
from tableservice.planning.due import Due
from tableservice.planning.slo import (
    DEFAULT_ACTION_SECONDS,
    NO_PENDING,
    DueWork,
    SloReading,
    SloTargets,
    Target,
    due_with_slo,
    expected_duration,
    oldest_first,
    readings,
    risk_key,
    risk_order,
    slack,
    slo_due,
    small_files_of,
    waiting_since,
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


def test_risk_order_puts_the_earliest_start_by_moment_first_and_work_waiting_past_its_budget_before_all() -> None:
    def reading(target: Target, ttb: float, service: str) -> SloReading:
        return SloReading(target, 100, 0, ttb, service, "")

    # `old_plain` has no targets but its plan has waited 5000 s, more than the budget of 3600 s.
    old_plain = DueWork("old_plain", (), frozenset({"compaction"}), at(5000), T - 5000)
    slow_compaction = DueWork(
        "slow", (reading(Target.LOG_AGE, 1000, "compaction"),), frozenset({"compaction"}), at(100), T - 100
    )
    tight = DueWork("tight", (reading(Target.PENDING_AGE, 300, "clean"),), frozenset({"clean"}), at(200), T - 200)
    unfixable = DueWork(
        "unfixable", (reading(Target.SMALL_FILES, -50, "clustering"),), frozenset({"clean"}), at(300), T - 300
    )
    no_pending = DueWork("no_pending", (), frozenset({"clean"}), NO_PENDING)  # found due just now
    durations = {"slow": {"compaction": 950.0}}

    def expected(table: str) -> dict[str, float]:
        return durations.get(table, {})

    works = [no_pending, unfixable, tight, slow_compaction, old_plain]
    order = [w.table for w in risk_order(works, expected, now=T, budget=3600)]
    keys = {w.table: risk_key(w, expected(w.table), now=T, budget=3600)[0] - T for w in works}
    assert slack(slow_compaction.readings[0], durations["slow"]) == 1000 - 950
    assert keys["slow"] == 1000 - 950 and keys["tight"] == 300 - DEFAULT_ACTION_SECONDS
    # Clustering has no work in `unfixable`'s pass: its breach does not count, its wait does (300 s of 3600 s).
    assert keys["unfixable"] == 3600 - 300 and keys["old_plain"] == 3600 - 5000 and keys["no_pending"] == 3600
    assert order == ["old_plain", "slow", "tight", "unfixable", "no_pending"]
    assert [w.table for w in oldest_first(works)] == ["old_plain", "unfixable", "tight", "slow", "no_pending"]
    # Without targets anywhere the risk order is oldest-first (the wait is the oldest pending plan's).
    plain = [DueWork(w.table, (), w.services, w.oldest_pending, w.waiting_since) for w in works]
    assert [w.table for w in risk_order(plain, expected, now=T)] == [w.table for w in oldest_first(plain)]
    # Without a budget in reach, the least slack decides, as before.
    far = [DueWork(w.table, w.readings, w.services, w.oldest_pending) for w in works]
    assert [w.table for w in risk_order(far, expected, now=T, budget=1e6)][:2] == ["slow", "tight"]


def test_a_key_is_a_moment_so_a_waiter_keyed_earlier_compares_rightly_with_one_keyed_now() -> None:
    # An age target's time to breach falls by the seconds that pass: the same start-by moment later on.
    tl = timeline(instant(900, Action.DELTA_COMMIT), instant(10, Action.DELTA_COMMIT))
    targets = SloTargets(max_uncompacted_log_age_seconds=1200)
    keys = []
    for later in (0.0, 250.0):
        found = readings(tl, targets, is_mor=True, tz=UTC, now=T + later)
        work = DueWork("t", found, frozenset({"compaction"}), NO_PENDING, T - 100)
        keys.append(risk_key(work, {"compaction": 60.0}, now=T + later, budget=3600)[0])
    assert keys[0] == keys[1] == T - 900 + 1200 - 60
    # The implicit deadline does not move either: `waiting_since` is a moment too.
    idle = DueWork("u", (), frozenset({"compaction"}), NO_PENDING, T - 100)
    assert risk_key(idle, {}, now=T, budget=600) == risk_key(idle, {}, now=T + 250, budget=600) == (T + 500, NO_PENDING)


def test_waiting_since_is_the_oldest_pending_plan_or_when_work_was_found_due() -> None:
    plans = [instant(700, Action.COMPACTION, State.REQUESTED), instant(300, Action.CLEAN, State.REQUESTED)]
    assert waiting_since(plans, UTC, T - 100) == T - 700
    assert waiting_since(plans, UTC, T - 900) == T - 900
    assert waiting_since([], UTC, T - 5) == T - 5
    assert waiting_since([], UTC, None) is None


def test_a_target_close_to_its_breach_makes_the_fixing_service_due() -> None:
    tl = timeline(instant(1000, Action.DELTA_COMMIT), instant(50, Action.DELTA_COMMIT))
    targets = SloTargets(max_uncompacted_log_age_seconds=1100, max_pending_age_seconds=10)
    found = readings(tl, targets, is_mor=True, tz=UTC, now=T)
    log_age = next(r for r in found if r.target is Target.LOG_AGE)
    assert log_age.time_to_breach == 100
    trigger = Due(False, "not due: 2 delta commits since first delta commit (threshold 5)")
    # 100 s to breach against 60 s of compaction: due only with a margin of 40 s or more.
    assert slo_due(found, "compaction", 60, 39) is None
    assert due_with_slo(trigger, found, "compaction", 60, 39) == trigger
    forced = due_with_slo(trigger, found, "compaction", 60, 40)
    assert forced.due and forced.next_due_at is None
    assert forced.reason == (
        "due: SLO max_uncompacted_log_age_seconds breaches in 100 s (1000 of 1100; expected compaction 60 s + margin "
        "40 s); trigger not due: 2 delta commits since first delta commit (threshold 5)"
    )
    # A breached target says since when; another service's targets (and the pending age: executing a plan fixes
    # it, not planning one) never make this one due; a trigger already due is kept as it is.
    breached = readings(tl, SloTargets(max_uncompacted_log_age_seconds=400), is_mor=True, tz=UTC, now=T)
    got = slo_due(breached, "compaction", 60, 0)
    assert got is not None and got.reason.startswith("due: SLO max_uncompacted_log_age_seconds breached 600 s ago")
    assert slo_due(breached, "clustering", 60, 0) is None
    pending = [SloReading(Target.PENDING_AGE, 10, 500, -490, "compaction", "")]
    assert slo_due(pending, "compaction", 60, 30) is None
    already = Due(True, "due: 5 delta commits")
    assert due_with_slo(already, breached, "compaction", 60, 0) is already


def test_expected_duration_is_the_mean_of_the_last_completed_actions() -> None:
    newest_first = [10.0, 20.0, 30.0, 40.0, 50.0, 1000.0]
    assert expected_duration(newest_first) == sum(newest_first[:5]) / 5
    assert expected_duration([]) == DEFAULT_ACTION_SECONDS
    assert expected_duration([], 7.0) == 7.0


def test_targets_are_true_when_any_target_is_set() -> None:
    assert not SloTargets()
    for target in Target:  # every kind of target, so that a new one cannot be left out of the check
        assert SloTargets(**{target.value: 1})
