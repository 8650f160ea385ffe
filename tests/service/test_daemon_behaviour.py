"""Daemon behaviour without heavy Spark work: idle tables cost one listing per poll, a failing table is retried
and quarantined while the others are served, and configuration changes are picked up without a restart."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tableservice.config import load_config
from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.models import (
    HoodieCompactionOperation,
    HoodieCompactionPlan,
    encode_compaction_plan,
)
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, parse_instant_time, timeline_timezone
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.service.daemon import Daemon
from tableservice.service.history import ActionOutcome
from tableservice.service.protocol import ServiceSettings
from tableservice.storage import Storage
from tests.support.daemon_helpers import config_text, mor_table, run_until


class _CountingStorage(Storage):
    def __init__(self) -> None:
        super().__init__()
        self.lists: list[str] = []

    def list(self, location: str, *, recursive: bool = False, temp_files: bool = False) -> list[Any]:
        self.lists.append(location)
        return super().list(location, recursive=recursive, temp_files=temp_files)


@pytest.mark.spark
@pytest.mark.parametrize("metadata", [False, True])
def test_idle_table_costs_one_listing_per_poll(metadata: bool, tmp_path: Path, spark_executor: Any) -> None:
    path = mor_table(tmp_path / "t", records=100, commits=2)
    if metadata:  # the metadata service looks at the metadata table only when the data timeline moved
        initialize_metadata_table(HudiTable.open(Storage(), path), ("files", "column_stats"))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([path], max_delta_commits=50, poll=0.2))
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
    counting = _CountingStorage()
    daemon.storage = counting
    polls: list[float] = []
    timeline_folder = str(Path(path) / ".hoodie" / "timeline")
    settled: list[int] = []  # listings made by the time the table went idle

    def enough() -> bool:
        task = next(iter(daemon.tables.values()), None)
        if task is None or task.worker.status.last_poll is None:
            return False
        if not polls or polls[-1] != task.worker.status.last_poll:
            polls.append(task.worker.status.last_poll)
            if len(polls) == 3:
                settled.append(len(counting.lists))
        return len(polls) >= 9

    run_until(daemon, enough)
    # The first pass may plan (a clean is due on a table never cleaned; planning lists the table and finds
    # nothing to do); from then on, while nothing is written, each poll lists the timeline folder only.
    later = counting.lists[settled[0] :]
    assert later, "no polls after the table went idle"
    assert set(later) == {timeline_folder}, f"listings other than the timeline folder: {sorted(set(later))[:5]}"
    assert len(later) <= len(polls) - 3 + 2


@pytest.mark.spark
def test_idle_tables_park_and_their_polls_share_thread_hops(tmp_path: Path, spark_executor: Any) -> None:
    """Once a table's poll finds nothing to do, the table parks in the idle schedule: its next polls join those of
    other idle tables in one worker-thread hop, and its task is not woken while they find nothing to do; a table's
    first poll goes alone. Every table goes on being polled."""
    paths = [mor_table(tmp_path / f"t{i}", records=50, commits=2, name=f"t{i}") for i in range(6)]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text(paths, max_delta_commits=50, poll=0.2))
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
    daemon.polls.window_seconds = 0.05  # a quarter of the poll interval (the daemon's is 2% of it): shared hops
    first_polls: dict[str, float] = {}

    def enough() -> bool:
        for task in daemon.tables.values():
            if task.worker.status.last_poll is not None:
                first_polls.setdefault(task.worker.label, task.worker.status.last_poll)
        return daemon.polls.polls >= 60

    run_until(daemon, enough)
    tasks = list(daemon.tables.values())
    assert sorted(t.worker.label for t in tasks) == [f"table{i}" for i in range(6)]
    assert all(t.idle for t in tasks), [t.worker.status.last_error for t in tasks if not t.idle]
    # polled since their first poll, through the schedule, without their tasks waking
    assert all(t.worker.status.last_poll > first_polls[t.worker.label] for t in tasks)  # type: ignore[operator]
    assert all(t.worker.status.health == "ok" for t in tasks), [t.worker.status.health for t in tasks]
    assert daemon.polls.polls >= 60
    assert daemon.polls.handed_back == 0
    assert daemon.polls.hops < daemon.polls.polls * 0.8, (daemon.polls.hops, daemon.polls.polls)


@pytest.mark.spark
def test_permanent_errors_hold_back_the_action_or_quarantine_the_table_at_once(
    tmp_path: Path, spark_executor: Any
) -> None:
    good = mor_table(tmp_path / "good", records=200, commits=3, name="good")
    bad = mor_table(tmp_path / "bad", records=200, commits=3, name="bad")
    broken = mor_table(tmp_path / "broken", records=100, commits=2, name="broken")
    # A plan naming a file group that does not exist: every attempt would fail with InvalidPlanError.
    table = HudiTable.open(Storage(), bad)
    t = table.active.new_instant_time(table.timeline())
    plan = HoodieCompactionPlan(
        operations=(
            HoodieCompactionOperation(
                base_instant_time=t,
                delta_file_paths=(".nope-0_1.log.1_0-0-0",),
                data_file_path=None,
                file_id="nope-0",
                partition_path="city=nowhere",
                metrics={},
                bootstrap_file_path="",
            ),
        ),
        extra_metadata={},
        version=2,
    )
    table.active.create_requested(t, Action.COMPACTION, encode_compaction_plan(plan, table_version=9))
    # A table whose hoodie.properties is unreadable: the table itself cannot be served.
    (Path(broken) / ".hoodie" / "hoodie.properties").write_bytes(b"hoodie.table.version=\\uZZZZ\n\x00")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([good, bad, broken], max_delta_commits=2, poll=0.2))
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
    polls_after_hold: list[float] = []

    def done() -> bool:
        statuses = {t.worker.status.uri: t.worker.status for t in daemon.tables.values()}
        good_done = (
            HudiTable.open(Storage(), good).timeline().completed().filter(lambda i: i.action is Action.COMPACTION)
        )
        held = statuses.get(bad)
        if held is not None and held.held_back and held.last_poll not in polls_after_hold:
            polls_after_hold.append(held.last_poll or 0.0)
        quarantined = statuses.get(broken) is not None and statuses[broken].health == "quarantined"
        return bool(good_done) and len(polls_after_hold) >= 4 and quarantined

    run_until(daemon, done, timeout=300)
    statuses = {t.worker.status.uri: t.worker.status for t in daemon.tables.values()}
    # The bad plan failed once and is held back; the table goes on being polled and served, not backed off.
    assert [(h["action"], h["instant"]) for h in statuses[bad].held_back] == [("compaction", t)]
    assert "nope-0" in str(statuses[bad].held_back[0]["error"])
    assert statuses[bad].health == "degraded" and statuses[bad].consecutive_failures == 0
    assert HudiTable.open(Storage(), bad).timeline().get(t, Action.COMPACTION).is_requested  # type: ignore[union-attr]
    # The unreadable table was quarantined after its first failure.
    assert statuses[broken].consecutive_failures == 1
    assert "hoodie.properties" in (statuses[broken].last_error or "")
    assert statuses[good].health == "ok"
    text = daemon.metrics.render()[0].decode()
    assert 'tableservice_actions_failed_total{action="compaction",table="table1"} 1.0' in text
    assert 'tableservice_actions_held_back{action="compaction",table="table1"} 1.0' in text
    assert 'tableservice_table_errors_total{kind="InvalidPlanError",table="table1"} 1.0' in text
    assert 'tableservice_table_quarantined{table="table1"}' not in text
    assert 'tableservice_table_quarantined{table="table2"} 1.0' in text
    # each committed compaction of the good table ran one Spark job, timed apart from the whole action
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line and line[0] != "#"}
    series = 'action="compaction",table="table0"'
    completed = samples[f"tableservice_actions_completed_total{{{series}}}"]
    assert completed >= 1 and samples[f"tableservice_spark_job_seconds_count{{{series}}}"] == completed
    job, whole = (
        samples[f"tableservice_spark_job_seconds_sum{{{series}}}"],
        samples[f"tableservice_action_duration_seconds_sum{{{series}}}"],
    )
    assert 0 < job < whole
    assert 'tableservice_table_errors_total{kind="InvalidTableConfigError",table="table2"} 1.0' in text
    # The action history holds the held-back plan with its error and the good table's compactions with what they
    # wrote (the default history file of the run's state folder: rows picked by their instants).
    assert daemon.history is not None
    held = [r for r in daemon.history.query(table="table1", limit=10_000) if r.instant == t]
    assert [(r.action, r.outcome) for r in held] == [("compaction", ActionOutcome.HELD_BACK)]
    assert "nope-0" in (held[0].error or "")
    compactions = HudiTable.open(Storage(), good).timeline().completed().filter(lambda i: i.action is Action.COMPACTION)
    compacted = {i.requested_time for i in compactions}
    rows = [r for r in daemon.history.query(table="table0", limit=10_000) if r.instant in compacted]
    assert sorted(r.instant for r in rows) == sorted(compacted)
    assert {r.outcome for r in rows} == {ActionOutcome.COMPLETED}
    written = daemon.metrics.registry.get_sample_value(
        "tableservice_written_records_total", {"table": "table0", "action": "compaction"}
    )
    assert written and sum(r.records_written for r in rows) == written


@pytest.mark.spark
def test_config_change_adds_and_removes_tables_without_restart(tmp_path: Path, spark_executor: Any) -> None:
    first = mor_table(tmp_path / "a", records=100, commits=2, name="a")
    second = mor_table(tmp_path / "b", records=100, commits=2, name="b")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([first], max_delta_commits=50, poll=0.2))
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
    seen: list[set[str]] = []
    broken_at: list[float] = []

    def step() -> bool:
        uris = set(daemon.tables)
        if uris and (not seen or seen[-1] != uris):
            seen.append(uris)
        if uris == {first}:
            cfg.write_text(config_text([second], max_delta_commits=50, poll=0.2))
        if uris == {second} and not broken_at:
            # A broken edit is refused and the running configuration stays.
            cfg.write_text("service: {poll_interval_seconds: -5}\n")
            broken_at.append(time.monotonic())
        return bool(broken_at) and time.monotonic() - broken_at[0] > 5

    run_until(daemon, step)
    assert seen[0] == {first}
    assert seen[-1] == {second}
    assert set(daemon.tables) == {second}


def test_a_time_trigger_not_yet_due_is_asked_again_on_later_polls(tmp_path: Path) -> None:
    """An elapsed-time compaction trigger that is not due at one pass must not be remembered as "nothing to
    plan": once the time has passed, the table is due without any new write, and the next pass schedules."""
    from tableservice.executors.spark import SparkExecutor, SparkSettings
    from tableservice.locks import InProcessLockProvider
    from tableservice.planning.compaction.policy import CompactionPolicy
    from tableservice.service.table_worker import TableSettings, TableWorker

    path = mor_table(tmp_path / "t", records=100, commits=2)
    table = HudiTable.open(Storage(), path)
    first_write = table.timeline().completed_writes().instants[0].requested_time
    zone = timeline_timezone(table.config.timezone_name)
    # due ten seconds from now, however long the table took to write (the trigger counts from the first delta commit)
    threshold = int((datetime.now(UTC) - parse_instant_time(first_write, zone)).total_seconds()) + 10
    policy = CompactionPolicy.from_mapping(
        {"hoodie.compact.inline.trigger.strategy": "TIME_ELAPSED", "hoodie.compact.inline.max.delta.seconds": threshold}
    )
    settings = TableSettings(
        uri=path,
        name="t",
        compaction=ServiceSettings(policy, execute=False),
        clean=ServiceSettings(CleanPolicy(), schedule=False),
        archival=ServiceSettings(ArchivalPolicy(), schedule=False, execute=False),
    )
    worker = TableWorker(settings, Storage(), InProcessLockProvider(), SparkExecutor(SparkSettings()))
    first = worker.run_pass()
    assert first.scheduled == [] and first.failed == []
    assert not worker.due("compaction")
    deadline = time.monotonic() + 30
    while not worker.due("compaction") and time.monotonic() < deadline:
        worker.poll()
        time.sleep(0.5)
    assert worker.due("compaction"), "the time trigger came due without a new write"
    second = worker.run_pass()
    pending = HudiTable.open(Storage(), path).timeline().pending().instants
    assert second.scheduled == [i.requested_time for i in pending if i.action is Action.COMPACTION] != []


def test_archival_held_back_by_a_savepoint_is_not_retried_every_poll(tmp_path: Path) -> None:
    """More completed commits than `hoodie.keep.max.commits`, but a savepoint on the first one holds archival
    back: one pass finds nothing to archive, and the table is not due for archival again (no table lock taken on
    every poll) until the timeline changes; deleting the savepoint (a change) makes it due and archival runs."""
    from tableservice.executors.spark import SparkExecutor, SparkSettings
    from tableservice.hudi.action.savepoint import create_savepoint, delete_savepoint
    from tableservice.locks import InProcessLockProvider
    from tableservice.planning.archival import ArchivalPolicy
    from tableservice.planning.compaction.policy import CompactionPolicy
    from tableservice.service.table_worker import TableSettings, TableWorker

    path = mor_table(tmp_path / "t", records=60, commits=7)
    table = HudiTable.open(Storage(), path)
    first = table.timeline().completed_writes().instants[0].requested_time
    create_savepoint(table, first)
    settings = TableSettings(
        uri=path,
        name="t",
        compaction=ServiceSettings(CompactionPolicy(), schedule=False, execute=False),
        clean=ServiceSettings(CleanPolicy(), schedule=False),
        archival=ServiceSettings(ArchivalPolicy(min_commits=2, max_commits=3, cleaner_commits_retained=1)),
    )
    worker = TableWorker(settings, Storage(), InProcessLockProvider(), SparkExecutor(SparkSettings()))
    worker.poll()
    assert worker.due("archival")
    held = worker.run_pass()
    assert held.archived == [] and held.failed == []
    assert not worker.due("archival")
    assert delete_savepoint(HudiTable.open(Storage(), path), first)
    worker.poll()
    assert worker.due("archival")
    freed = worker.run_pass()
    remaining = [i.requested_time for i in HudiTable.open(Storage(), path).timeline().completed_writes()]
    assert freed.archived and not set(freed.archived) & set(remaining)
    assert first in freed.archived


@pytest.mark.spark
def test_a_discovery_rescan_sets_up_only_the_tables_it_finds_new(tmp_path: Path, spark_executor: Any) -> None:
    """A rescan runs under the configuration the served tables were set up with: their settings and lock clients
    are not made again (a thousand tables would each cost a lock client and a thread hop per rescan); a new table
    under the root is set up and served."""
    root = tmp_path / "root"
    mor_table(root / "a", records=40, commits=1, name="a")
    mor_table(root / "b", records=40, commits=1, name="b")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""\
service:
  poll_interval_seconds: 0.2
  http: {{host: 127.0.0.1, port: 0}}
discovery:
  - root: {root}
    max_depth: 1
defaults:
  compaction: {{hoodie.compact.inline.max.delta.commits: 50}}
""")
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
    set_up: list[str] = []
    scans: list[float] = []
    for_table, named_entries = daemon.locks.for_table, daemon._named_entries

    def counted_locks(config: Any, entry: Any) -> Any:
        set_up.append(entry.uri.rstrip("/").rsplit("/", 1)[-1])
        return for_table(config, entry)

    def counted_scan(*args: Any) -> Any:
        scans.append(time.monotonic())
        return named_entries(*args)

    daemon.locks.for_table = counted_locks  # type: ignore[method-assign,assignment]
    daemon._named_entries = counted_scan  # type: ignore[method-assign,assignment]
    added: list[float] = []

    def enough() -> bool:
        if not added and len(daemon.tables) == 2:
            mor_table(root / "c", records=40, commits=1, name="c")
            added.append(time.monotonic())
        return bool(added) and len(daemon.tables) == 3 and sum(s > added[0] for s in scans) >= 2

    run_until(daemon, enough, timeout=60)
    assert sorted(t.worker.settings.uri.rstrip("/").rsplit("/", 1)[-1] for t in daemon.tables.values()) == [
        "a",
        "b",
        "c",
    ]
    assert sum(s > added[0] for s in scans) >= 2  # rescans after the new table came, the last one finding no news
    assert sorted(set_up) == ["a", "b", "c"]  # each table set up once, at the scan that found it
