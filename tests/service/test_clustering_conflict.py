"""A write in flight while a clustering of its file groups is scheduled (the write started before the plan and
commits after it). Hudi's default writer (updates under clustering rejected) fails at commit and undoes its
attempt, and the clustering completes. A writer that allows updates under clustering commits; the clustering plan
can then never complete (it names the files it reads), so the daemon abandons it: the attempt is rolled back, the
instant removed, no rows are lost, and a later plan over the new slices completes. Table version 6 has no
completion times, so there the late commit is found from the timeline files' modification times."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tableservice.errors import ActionAbandonedError, ConflictError
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, Instant
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import TRIP_SCHEMA, Workload, WorkloadStep
from tableservice.locks import InProcessLockProvider
from tableservice.metrics import Metrics
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.clustering.policy import ClusteringPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.actions import TableContext
from tableservice.service.clustering import execute_clustering, pending_clustering, schedule_clustering
from tableservice.service.protocol import ServiceSettings
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import Storage
from tests.support.oracle import hudi_read
from tests.support.table_model import Row, table_rows
from tests.support.trip_tables import create_trip_table

pytestmark = [pytest.mark.spark, pytest.mark.oracle]
POLICY = ClusteringPolicy.from_mapping(
    {
        "tableservice.clustering.enabled": "true",
        "hoodie.clustering.plan.strategy.target.file.max.bytes": str(1 << 20),
        "hoodie.clustering.plan.strategy.sort.columns": "fare",
    }
)


class PlanBeforeCommit:
    """The writer's lock factory. Its second use is the writer's commit: just before it (or before its first use,
    the instant's creation, with `at = 1`), a clustering is scheduled, so the plan lands while the write is in
    flight."""

    def __init__(self, locks: InProcessLockProvider, path: str, schedule: Callable[[], Instant | None]) -> None:
        self.lock = locks.table_lock("t", path)
        self.schedule = schedule
        self.calls = 0
        self.at = 2
        self.wait_for: threading.Event | None = None
        self.scheduled: Instant | None = None

    def __call__(self) -> AbstractContextManager[object]:
        self.calls += 1
        if self.calls == self.at:
            self.scheduled = self.schedule()
            if self.wait_for is not None:  # hold the write back until the clustering job has run
                assert self.wait_for.wait(120)
        return self.lock.hold(30.0)


def _setup(tmp_path: Path, version: int, table_type: TableType) -> tuple[str, list[WorkloadStep]]:
    path = str(tmp_path / "t")
    create_trip_table(path, version, table_type)
    steps = list(Workload(300, 3, 0.3, 0.02, partitions=2, seed=11).steps())
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=50))
    for step in steps[:2]:
        client.apply(step)
    return path, steps[2:]


def _rows(path: str) -> list[Row]:
    """The table's rows as hudi-rs reads them, without the meta fields (clustering renames files)."""
    return table_rows(hudi_read(path), TRIP_SCHEMA.names, "uuid", "city")


def _ctx(path: str, locks: InProcessLockProvider, executor: Any) -> TableContext:
    table = HudiTable.open(Storage(), path)
    return TableContext(table=table, lock=locks.table_lock("t", path), executor=executor)


@pytest.mark.parametrize("version", [6, 9])
def test_rejecting_writer_fails_at_commit_and_clustering_completes(
    version: int, tmp_path: Path, spark_executor: Any
) -> None:
    path, (step,) = _setup(tmp_path, version, TableType.MERGE_ON_READ)
    before = _rows(path)
    locks = InProcessLockProvider()
    ctx = _ctx(path, locks, spark_executor)
    hook = PlanBeforeCommit(locks, path, lambda: schedule_clustering(ctx, POLICY, force=True))
    writer = WriteClient(Storage(), path, lock=hook, options=WriteOptions(max_file_records=50))
    with pytest.raises(ConflictError, match="scheduled after this write started"):
        writer.apply(step)
    assert hook.scheduled is not None, "the clustering was planned while the write was in flight"
    timeline = ctx.table.reload()
    pending = [i for i in timeline.pending() if i.action is not Action.CLUSTERING and not ctx.table.is_clustering(i)]
    assert pending == [], "the failed write's attempt was undone at once"
    assert timeline.completed().filter(lambda i: i.action is Action.ROLLBACK).instants
    done = execute_clustering(ctx, hook.scheduled.requested_time, POLICY)
    assert done.instant.is_completed
    assert _rows(path) == before, "after the rejected write and the clustering"


def _worker(path: str, locks: InProcessLockProvider, executor: Any, metrics: Metrics) -> TableWorker:
    settings = TableSettings(
        uri=path,
        name="t",
        compaction=ServiceSettings(CompactionPolicy(), schedule=False, execute=False),
        clustering=ServiceSettings(POLICY, schedule=False),
        clean=ServiceSettings(CleanPolicy(), schedule=False),
        archival=ServiceSettings(ArchivalPolicy(), schedule=False, execute=False),
    )
    return TableWorker(settings, Storage(), locks, executor, metrics)


@pytest.mark.parametrize(
    ("version", "table_type", "plan_at", "abandoned"),
    [
        (9, TableType.MERGE_ON_READ, "commit", True),
        (8, TableType.COPY_ON_WRITE, "commit", True),
        (6, TableType.COPY_ON_WRITE, "commit", True),
        # v6 log files carry no instant: the plan names the in-flight write's log file, and the job reads its
        # blocks because the write completed before the job started; nothing is lost, the clustering completes
        (6, TableType.MERGE_ON_READ, "commit", False),
        (6, TableType.MERGE_ON_READ, "start", True),
    ],
)
def test_clustering_that_lost_to_a_write_is_abandoned_without_losing_rows(
    version: int, table_type: TableType, plan_at: str, abandoned: bool, tmp_path: Path, spark_executor: Any
) -> None:
    path, (step,) = _setup(tmp_path, version, table_type)
    locks = InProcessLockProvider()
    ctx = _ctx(path, locks, spark_executor)
    hook = PlanBeforeCommit(locks, path, lambda: schedule_clustering(ctx, POLICY, force=True))
    hook.at = 2 if plan_at == "commit" else 1
    writer = WriteClient(
        Storage(), path, lock=hook, options=WriteOptions(max_file_records=50, allow_updates_under_clustering=True)
    )
    written = writer.apply(step)
    plan = hook.scheduled
    assert plan is not None
    after_write = _rows(path)
    assert any(s.num_update_writes for s in written.stats), "the write updated file groups under the plan"

    metrics = Metrics(CollectorRegistry())
    result = _worker(path, locks, spark_executor, metrics).run_pass()
    assert result.failed == []
    assert len(result.clustered) == (0 if abandoned else 1)
    assert [c.instant.requested_time for c in result.clustered] == ([] if abandoned else [plan.requested_time])
    text = metrics.render()[0].decode()
    assert ('tableservice_actions_abandoned_total{action="clustering",table="t"} 1.0' in text) is abandoned
    table = HudiTable.open(Storage(), path)
    timeline = table.timeline()
    assert pending_clustering(table, timeline) == []
    assert (timeline.get(plan.requested_time) is None) is abandoned
    assert _rows(path) == after_write, "no row lost"

    again = schedule_clustering(_ctx(path, locks, spark_executor), POLICY, force=True)
    assert again is not None
    done = execute_clustering(_ctx(path, locks, spark_executor), again.requested_time, POLICY)
    assert done.instant.is_completed
    assert _rows(path) == after_write, "after a new clustering"


@pytest.mark.parametrize(("version", "crash"), [(6, False), (9, False), (9, True)])
def test_write_completing_while_the_job_runs_abandons_the_clustering(
    version: int, crash: bool, tmp_path: Path, spark_executor: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan is written while a write is in flight, the job starts, then the write completes: the commit check
    finds it and abandons the clustering (committing would lose the write). Table version 6: the plan names the
    in-flight write's log file and the job leaves its blocks out, so only "pending when the job started" tells.
    With `crash`, the process dies after rolling the attempt back and before removing the plan; the next attempt
    finds the same conflict and removes it."""
    path, (step,) = _setup(tmp_path, version, TableType.MERGE_ON_READ)
    locks = InProcessLockProvider()
    ctx = _ctx(path, locks, spark_executor)
    job_ran, write_done = threading.Event(), threading.Event()

    class WriteCompletesDuringJob:
        def start(self) -> Any:
            return spark_executor.start()

        def run_tasks(self, *args: Any, **kwargs: Any) -> Any:
            out = spark_executor.run_tasks(*args, **kwargs)
            job_ran.set()
            assert write_done.wait(60)
            return out

    hook = PlanBeforeCommit(locks, path, lambda: schedule_clustering(ctx, POLICY, force=True))
    hook.wait_for = job_ran
    writer = WriteClient(
        Storage(), path, lock=hook, options=WriteOptions(max_file_records=50, allow_updates_under_clustering=True)
    )
    errors: list[BaseException] = []

    def write() -> None:
        try:
            writer.apply(step)
        except BaseException as e:  # reported below
            errors.append(e)
        finally:
            write_done.set()

    thread = threading.Thread(target=write)
    thread.start()
    deadline = time.monotonic() + 60
    while hook.scheduled is None and time.monotonic() < deadline:
        time.sleep(0.05)
    plan = hook.scheduled
    assert plan is not None
    job_ctx = TableContext(table=ctx.table, lock=ctx.lock, executor=WriteCompletesDuringJob())  # type: ignore[arg-type]
    if crash:
        from tableservice.hudi.timeline.active import ActiveTimeline

        def dies(self: ActiveTimeline, instant: Instant) -> None:
            raise OSError("killed (injected) before the plan was removed")

        monkeypatch.setattr(ActiveTimeline, "delete_pending", dies)
        with pytest.raises(OSError, match="injected"):
            execute_clustering(job_ctx, plan.requested_time, POLICY)
        monkeypatch.undo()
        timeline = HudiTable.open(Storage(), path).timeline()
        left = timeline.get(plan.requested_time)
        assert left is not None and left.is_requested, "the attempt was rolled back, the plan is still there"
    with pytest.raises(ActionAbandonedError, match="under clustering"):
        execute_clustering(job_ctx, plan.requested_time, POLICY)
    thread.join(60)
    assert errors == []
    assert HudiTable.open(Storage(), path).timeline().get(plan.requested_time) is None
    ref, (ref_step,) = _setup(tmp_path / "ref", version, TableType.MERGE_ON_READ)  # the same writes, no clustering
    WriteClient(Storage(), ref, options=WriteOptions(max_file_records=50)).apply(ref_step)
    assert _rows(path) == _rows(ref), "no row of the write lost"
    leftovers = [p.name for p in Path(path).rglob("*.parquet") if plan.requested_time in p.name]
    assert leftovers == [], "the abandoned attempt's files are gone"
