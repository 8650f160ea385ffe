"""The daemon's priority policy without Spark: group quotas of the capacity, the SLO order on real tables against
the oldest-first order, SLO metrics equal to the readings, and the back-off of a table whose lock waits rose."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from prometheus_client import CollectorRegistry

from tableservice.config import BackoffSettings
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import parse_instant_time, timeline_timezone
from tableservice.locks import InProcessLockProvider
from tableservice.metrics import Metrics
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.planning.slo import (
    DEFAULT_ACTION_SECONDS,
    DEFAULT_WAIT_BUDGET_SECONDS,
    SloTargets,
    snapshot_readings,
)
from tableservice.service.priority import PriorityPolicy
from tableservice.service.protocol import ServiceSettings
from tableservice.service.quotas import GroupCapacity
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table, with_pending_compaction


def grant_order(capacity: GroupCapacity, requests: Sequence[tuple[str, Any, str | None]]) -> list[str]:
    """Queue `requests` (name, key, group) behind a held slot of `capacity`, release it, and return the order in
    which they ran; each holds its slot briefly, and the most that ran at once per group is checked by callers."""
    order: list[str] = []
    at_once: dict[str | None, int] = {}
    running: dict[str | None, int] = {}

    async def scenario() -> None:
        gate = anyio.Event()

        async def holder() -> None:  # takes every slot until the gate opens
            async with capacity.slot((-math.inf, "")):
                await gate.wait()

        async def waiter(name: str, key: Any, group: str | None) -> None:
            async with capacity.slot(key, group):
                order.append(name)
                running[group] = running.get(group, 0) + 1
                at_once[group] = max(at_once.get(group, 0), running[group])
                await anyio.sleep(0.02)
                running[group] -= 1

        async with anyio.create_task_group() as tg:
            for _ in range(capacity.total):
                tg.start_soon(holder)
            await anyio.sleep(0.02)
            for name, key, group in requests:
                tg.start_soon(waiter, name, key, group)
                await anyio.sleep(0.005)
            assert capacity.waiting == len(requests)
            gate.set()

    anyio.run(scenario)
    grant_order.at_once = at_once  # type: ignore[attr-defined]
    return order


def test_a_full_group_passes_its_turn_to_other_tables_and_never_exceeds_its_quota() -> None:
    capacity = GroupCapacity(2, {"g": 1})
    requests = [
        ("g-urgent", (1.0, "b"), "g"),
        ("g-second", (2.0, "a"), "g"),
        ("g-third", (3.0, "a"), "g"),
        ("free", (math.inf, "z"), None),
    ]
    order = grant_order(capacity, requests)
    at_once = grant_order.at_once  # type: ignore[attr-defined]
    assert at_once["g"] == 1
    # One slot each for the urgent group member and, the group being full, the ungrouped table; then the group.
    assert order == ["g-urgent", "free", "g-second", "g-third"]
    assert capacity.in_use == 0 and capacity.group_in_use("g") == 0
    # One slot and no groups: the same keys run in key order.
    assert grant_order(GroupCapacity(1), requests) == ["g-urgent", "g-second", "g-third", "free"]


def test_a_cancelled_waiter_gives_back_its_group_slot() -> None:
    async def scenario() -> None:
        capacity = GroupCapacity(3, {"g": 1})
        async with capacity.slot((0.0, "a"), "g"):
            with anyio.move_on_after(0.05):
                async with capacity.slot((0.0, "b"), "g"):
                    raise AssertionError("the group is full")
            assert capacity.waiting == 0 and capacity.group_in_use("g") == 1
        assert capacity.in_use == 0 and capacity.group_in_use("g") == 0
        capacity.configure(3, {"g": 2})
        async with capacity.slot((0.0, "c"), "g"), capacity.slot((0.0, "d"), "g"):
            assert capacity.group_in_use("g") == 2

    anyio.run(scenario)


def _worker(path: str, name: str, *, slo: SloTargets, metrics: Metrics | None = None) -> TableWorker:
    settings = TableSettings(
        uri=path,
        name=name,
        compaction=ServiceSettings(CompactionPolicy.from_mapping({"hoodie.compact.inline.max.delta.commits": 1})),
        clean=ServiceSettings(CleanPolicy(), schedule=False),
        archival=ServiceSettings(ArchivalPolicy(), schedule=False, execute=False),
        slo=slo,
    )
    return TableWorker(settings, Storage(), InProcessLockProvider(), SparkExecutor(SparkSettings()), metrics)


def _keys(policy: PriorityPolicy, workers: list[TableWorker]) -> dict[str, tuple[float, str]]:
    keys = {}
    for worker in workers:
        worker.poll()
        keys[worker.label] = policy.assess(worker, worker.needs_pass())
    return keys


def test_a_tight_target_table_is_served_before_the_oldest_first_choice(tmp_path: Path) -> None:
    # `old` has the oldest pending work (a compaction plan); `tight` has only due work, and a log-age target it
    # already misses.
    old, _, plan = with_pending_compaction(tmp_path / "old", object(), records=100, commits=2, name="old")
    tight = mor_table(tmp_path / "tight", records=100, commits=3, name="tight")
    policy = PriorityPolicy(metrics=None, backoff=BackoffSettings(), groups={})
    plain = [_worker(old, "old", slo=SloTargets()), _worker(tight, "tight", slo=SloTargets())]
    with_targets = [
        _worker(old, "old", slo=SloTargets(max_uncompacted_log_age_seconds=3600)),
        _worker(tight, "tight", slo=SloTargets(max_uncompacted_log_age_seconds=1)),
    ]
    time.sleep(1.1)  # the tight table's delta commits are older than its target now
    before = _keys(policy, plain)
    after = _keys(policy, with_targets)
    # Without targets: the implicit deadline, an hour (the default budget) after the work began to wait: the plan's
    # request for `old`, the poll that found a compaction due for `tight`.
    tz = timeline_timezone(HudiTable.open(Storage(), old).config.timezone_name)
    requested = parse_instant_time(plan.requested_time, tz).timestamp()
    assert before["old"] == (requested + DEFAULT_WAIT_BUDGET_SECONDS, plan.requested_time)
    assert plain[1].found_due_at is not None
    assert before["tight"][0] == plain[1].found_due_at + DEFAULT_WAIT_BUDGET_SECONDS
    capacity = [("old", before["old"], None), ("tight", before["tight"], None)]
    assert grant_order(GroupCapacity(1), capacity) == ["old", "tight"]  # oldest pending first
    # With targets: `tight` breached (start by a minute ago, the default duration) vs an hour to spare for `old`.
    assert after["tight"][0] < time.time() - DEFAULT_ACTION_SECONDS < time.time() + 3000 < after["old"][0]
    slo_capacity = [("old", after["old"], None), ("tight", after["tight"], None)]
    assert grant_order(GroupCapacity(1), slo_capacity) == ["tight", "old"]
    shown = {r["target"]: r for r in with_targets[1].status.slo}
    assert shown["max_uncompacted_log_age_seconds"]["breached"] is True
    assert plain[1].status.to_json()["slo"] == []


def test_metrics_equal_the_readings_and_count_breaches_on_the_transition(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t", records=100, commits=3, name="t")
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    targets = SloTargets(max_uncompacted_log_age_seconds=0.5, max_log_files_per_file_group=50)
    worker = _worker(path, "t", slo=targets, metrics=metrics)
    policy = PriorityPolicy(metrics=metrics, backoff=BackoffSettings(), groups={})
    time.sleep(0.6)
    worker.poll()
    readings = snapshot_readings(worker.snapshot, targets, now=time.time())  # type: ignore[arg-type]
    got = metrics.slo.report("t", readings)
    assert got == [r.target.value for r in readings if r.breached] == ["max_uncompacted_log_age_seconds"]

    def sample(name: str, target: str) -> float | None:
        return registry.get_sample_value(name, {"table": "t", "target": target})

    for r in readings:
        assert sample("tableservice_slo_compliant", r.target.value) == (0.0 if r.breached else 1.0)
        assert sample("tableservice_slo_time_to_breach_seconds", r.target.value) == r.time_to_breach
        assert sample("tableservice_slo_breaches_total", r.target.value) == (1.0 if r.breached else 0.0)
    # Still breached at the daemon's next poll: no new breach; /status shows what the metrics show.
    policy.assess(worker, due=False)
    shown = {str(r["target"]): r for r in worker.status.to_json()["slo"]}  # type: ignore[attr-defined]
    assert sorted(shown) == sorted(r.target.value for r in readings)
    for target, reading in shown.items():
        assert sample("tableservice_slo_compliant", target) == (0.0 if reading["breached"] else 1.0)
        ttb = sample("tableservice_slo_time_to_breach_seconds", target)
        assert ttb is not None and abs(ttb - reading["time_to_breach_seconds"]) <= 0.05  # type: ignore[operator]
    assert sample("tableservice_slo_breaches_total", "max_uncompacted_log_age_seconds") == 1.0
    # Met again (a generous target), then breached again: a second breach.
    met = [type(r)(r.target, 1e9, r.value, 1e9 - r.value, r.service, r.basis) for r in readings]
    metrics.slo.report("t", met)
    metrics.slo.report("t", readings)
    assert sample("tableservice_slo_breaches_total", "max_uncompacted_log_age_seconds") == 2.0
    metrics.forget_table("t")
    assert sample("tableservice_slo_compliant", "max_uncompacted_log_age_seconds") is None


def test_a_table_whose_lock_waits_rise_backs_off_growing_then_recovers(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t", records=100, commits=2, name="t")
    worker = _worker(path, "t", slo=SloTargets())
    worker.settings = TableSettings(  # schedule the compaction only: no Spark
        uri=path,
        name="t",
        compaction=ServiceSettings(
            CompactionPolicy.from_mapping({"hoodie.compact.inline.max.delta.commits": 1}), execute=False
        ),
        clean=ServiceSettings(CleanPolicy(), schedule=False),
        archival=ServiceSettings(ArchivalPolicy(), schedule=False, execute=False),
    )
    backoff = BackoffSettings(lock_wait_seconds=0.3, initial_delay_seconds=10, max_delay_seconds=25)
    policy = PriorityPolicy(metrics=None, backoff=backoff, groups={})
    # A writer holds the table lock (the in-process lock the worker takes) while the pass plans a compaction.
    lock = InProcessLockProvider().table_lock("t", HudiTable.open(Storage(), path).base_path)
    handle = lock.acquire(1.0)
    release = threading.Timer(0.8, lock.release, args=(handle,))
    release.start()
    try:
        result = worker.run_pass()
    finally:
        release.join()
    assert result.scheduled and result.failed == []
    now, wall = time.monotonic(), time.time()  # the wait counts on the monotonic clock; the status shows wall time
    policy.after_pass(worker, now=now)
    assert worker.status.backoff_until is not None and 10 <= worker.status.backoff_until - wall < 11
    assert policy.backing_off(worker, now=now + 9.9) and not policy.backing_off(worker, now=now + 10)
    # Waits stay high: the delay doubles, up to the maximum.
    for expected in (20, 25):
        worker.lock_waits.add(0.5)
        policy.after_pass(worker, now=now)
        assert worker.status.backoff_until is not None and expected <= worker.status.backoff_until - wall < expected + 1
        assert policy.backing_off(worker, now=now + expected - 0.1) and not policy.backing_off(
            worker, now=now + expected
        )
    # A pass without lock waits says nothing; one with short waits ends the back-off.
    shown = worker.status.backoff_until
    policy.after_pass(worker, now=now)
    assert worker.status.backoff_until == shown
    worker.lock_waits.add(0.01)
    policy.after_pass(worker, now=now)
    assert worker.status.backoff_until is None and not policy.backing_off(worker, now=now)
