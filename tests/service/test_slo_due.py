"""The worker without Spark: a target close to its breach makes the service that fixes it due (the reason in
/status), every service's due is asked on each poll (the log-bytes trigger's listing only while the pass is not
needed anyway), a table's key moves up as its work waits, and a lock timeout backs the table off."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from tableservice.config import BackoffSettings
from tableservice.errors import LockError
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.locks import InProcessLockProvider
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.planning.slo import DEFAULT_ACTION_SECONDS, SloTargets, Target
from tableservice.service.priority import PriorityPolicy
from tableservice.service.protocol import ServiceSettings
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import Storage
from tests.support.counting_storage import CountingStorage
from tests.support.daemon_helpers import mor_table, with_pending_compaction

NEVER_BY_COUNT = {"hoodie.compact.inline.max.delta.commits": 50}  # the compaction trigger does not fire


def _settings(
    path: str,
    *,
    slo: SloTargets,
    compaction: Mapping[str, object] | None = None,
    execute: bool = False,
    **extra: object,
) -> TableSettings:
    """Compaction planned only (no Spark) unless `execute`; a clean due after 40 commits; no archival."""
    policy = CompactionPolicy.from_mapping(compaction or NEVER_BY_COUNT)
    return TableSettings(
        uri=path,
        name=Path(path).name,
        compaction=ServiceSettings(policy, execute=execute),  # planned only by default: no Spark
        clean=ServiceSettings(CleanPolicy(max_commits=40)),
        archival=ServiceSettings(ArchivalPolicy(), schedule=False, execute=False),
        slo=slo,
        **extra,  # type: ignore[arg-type]
    )


def _reason(worker: TableWorker, service: str) -> str:
    return str(worker.status.due[service]["reason"])


def _worker(path: str, settings: TableSettings, storage: Storage | None = None) -> TableWorker:
    return TableWorker(settings, storage or Storage(), InProcessLockProvider(), SparkExecutor(SparkSettings()))


def test_a_log_age_target_about_to_breach_makes_compaction_due_before_its_trigger(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t", records=80, commits=3)
    # No target, and a target an hour off: the trigger (50 delta commits) decides, compaction is not due.
    for slo in (SloTargets(), SloTargets(max_uncompacted_log_age_seconds=3600)):
        idle = _worker(path, _settings(path, slo=slo, slo_margin_s=30.0))
        idle.poll()
        assert not idle.needs_pass()
        assert idle.status.due["compaction"]["due"] is False
        assert _reason(idle, "compaction").startswith("not due: 3 delta commits")
        assert idle.found_due_at is None
    # A target whose time to breach is within the expected duration (60 s without history) plus the margin.
    worker = _worker(path, _settings(path, slo=SloTargets(max_uncompacted_log_age_seconds=80), slo_margin_s=30.0))
    worker.poll()
    before = time.time()
    assert worker.needs_pass()
    assert worker.found_due_at is not None and worker.found_due_at >= before
    (reading,) = worker.slo_readings()
    assert reading.target is Target.LOG_AGE and 0 < reading.time_to_breach <= 80
    due = worker.status.due["compaction"]
    assert due["due"] is True and due["next_due_at"] is None
    assert due["reason"] == (
        f"due: SLO max_uncompacted_log_age_seconds breaches in {reading.time_to_breach:.0f} s "
        f"({reading.value:g} of 80; expected compaction {DEFAULT_ACTION_SECONDS:.0f} s + margin 30 s); "
        "trigger not due: " + _reason(idle, "compaction").removeprefix("not due: ")
    )
    # The pass plans the compaction; with the plan pending the target no longer asks for another one.
    result = worker.run_pass(reload=False)
    assert len(result.scheduled) == 1 and result.failed == []
    assert worker.found_due_at is None  # served
    assert worker.pending("compaction")[0].requested_time == result.scheduled[0]
    worker.poll()
    worker.needs_pass()
    assert worker.status.due["compaction"]["due"] is False
    assert _reason(worker, "compaction").startswith("not due: ")


def test_every_service_due_is_recorded_and_the_log_bytes_listing_waits_until_reached(tmp_path: Path) -> None:
    path, _, plan = with_pending_compaction(tmp_path / "t", object(), records=80, commits=3)
    compaction = dict(NEVER_BY_COUNT) | {"tableservice.compaction.log.bytes.threshold": 10**12}
    settings = _settings(path, slo=SloTargets(), compaction=compaction, execute=True)  # the plan is work for a pass
    storage = CountingStorage()
    worker = _worker(path, settings, storage)
    worker.poll()
    storage.calls.clear()
    assert worker.needs_pass()  # the pending plan
    # Every service was asked, not only up to the first with work; no listing beyond the poll's.
    assert set(worker.status.due) == {"rollback", "compaction", "clustering", "clean", "archival", "indexing"}
    assert [c for c in storage.calls if c[0] == "list"] == []
    assert _reason(worker, "compaction").endswith("log bytes not measured on this poll (the pass measures them)")
    clean_reason = _reason(worker, "clean")
    assert clean_reason.startswith("not due: ") and "hoodie.clean.max.commits=40" in clean_reason
    # Without other work the log-bytes trigger is reached: it lists the file groups and says what it measured.
    idle = _settings(path, slo=SloTargets(), compaction=compaction)
    other = _worker(path, idle, storage)
    other.poll()
    storage.calls.clear()
    assert not other.needs_pass()
    assert [c for c in storage.calls if c[0] == "list"] != []
    assert "log bytes not measured" not in _reason(other, "compaction")
    assert plan.requested_time in [p["instant"] for p in worker.status.pending]


def test_a_table_waiting_past_its_budget_goes_before_a_targeted_table_with_time_to_spare(tmp_path: Path) -> None:
    loose = mor_table(tmp_path / "loose", records=80, commits=2, name="loose")
    tight = mor_table(tmp_path / "tight", records=80, commits=2, name="tight")
    due_now = {"hoodie.compact.inline.max.delta.commits": 1}
    untargeted = _worker(loose, _settings(loose, slo=SloTargets(), compaction=due_now))
    targets = SloTargets(max_uncompacted_log_age_seconds=1200)
    targeted = _worker(tight, _settings(tight, slo=targets, compaction=due_now))
    policy = PriorityPolicy(metrics=None, backoff=BackoffSettings(), groups={}, wait_budget=1800)
    keys = {}
    for worker in (untargeted, targeted):
        worker.poll()
        keys[worker.label] = policy.assess(worker, worker.needs_pass())
    # Just found due: the untargeted table's deadline is its budget away (30 min), later than the targeted one's
    # (20 min to breach less a minute of compaction).
    assert keys["tight"][0] < keys["loose"][0] == untargeted.found_due_at + 1800  # type: ignore[operator]
    # It stays unserved (no pass ran): its deadline stays where it was while the targeted one's does too, and once
    # it has waited longer than the difference it goes first.
    untargeted.poll()
    assert untargeted.needs_pass()
    assert policy.assess(untargeted, True) == keys["loose"]
    untargeted.found_due_at -= 1000  # type: ignore[operator]  # as if it had waited 1000 s
    aged = policy.assess(untargeted, True)
    assert aged[0] == keys["loose"][0] - 1000 < keys["tight"][0]


def test_a_lock_timeout_backs_the_table_off_like_a_long_wait(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t", records=80, commits=2)
    due_now = {"hoodie.compact.inline.max.delta.commits": 1}
    settings = _settings(path, slo=SloTargets(), compaction=due_now, lock_timeout_s=0.3)
    worker = _worker(path, settings)
    # The threshold is far above the lock timeout: only the timeout itself can trigger the back-off.
    backoff = BackoffSettings(lock_wait_seconds=30, initial_delay_seconds=10, max_delay_seconds=40)
    policy = PriorityPolicy(metrics=None, backoff=backoff, groups={})
    lock = InProcessLockProvider().table_lock("t", HudiTable.open(Storage(), path).base_path)
    handle = lock.acquire(1.0)  # a writer holds the table lock through the pass
    try:
        # Planning fails: the pass raises, as the daemon sees it (its `after_pass` runs in a `finally`).
        with pytest.raises(LockError, match=r"not acquired within 0\.3s"):
            worker.run_pass()
    finally:
        lock.release(handle)
    assert worker.pending("compaction") == []
    now, wall = time.monotonic(), time.time()  # the wait counts on the monotonic clock; the status shows wall time
    policy.after_pass(worker, now=now)
    assert worker.status.backoff_until is not None and 10 <= worker.status.backoff_until - wall < 11
    assert policy.backing_off(worker, now=now + 5) and not policy.backing_off(worker, now=now + 10)
    # The next pass gets the lock at once: a short wait ends the back-off.
    result = worker.run_pass()
    assert len(result.scheduled) == 1 and result.failed == []
    policy.after_pass(worker, now=now)
    assert worker.status.backoff_until is None and not policy.backing_off(worker, now=now)
