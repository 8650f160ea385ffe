"""What every planned table-service action shares: the table context, the short lock sections, and running a
plan to completion.

Running a plan: the pending instant is found (an inflight attempt of an earlier run is rolled back first, and the
plan runs again under the same instant), moved to inflight, given a fresh attempt id (tasks of an older attempt
that still run delete what they write) and a heartbeat; the tasks run as one Spark job without any lock; files the
commit will not name are removed; then, under the table lock, the timeline is re-read, conflicts are checked, the
lock and the executor lease are verified, and the completed instant is written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace

from tableservice.errors import InstantNotPendingError, InvalidPlanError, LockError
from tableservice.executors.spark import JobResult, SparkExecutor, job_tag
from tableservice.hudi.action.commit import ConflictCheck, WriteStats, complete
from tableservice.hudi.action.compact import start_attempt
from tableservice.hudi.action.rollback import rollback
from tableservice.hudi.action.tasks import Task
from tableservice.hudi.file_group.bloom import BloomFilterSettings
from tableservice.hudi.file_group.filenames import parse_base_file_name
from tableservice.hudi.models import HoodieCommitMetadata, HoodieWriteStat
from tableservice.hudi.table.fs_view import partition_location
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Instant, State
from tableservice.hudi.write.markers import Heartbeat, delete_markers, list_marked_files
from tableservice.locks import LockHandle, TableLock
from tableservice.planning.write import WritePolicy
from tableservice.storage import StorageOptions, join

log = logging.getLogger(__name__)


@dataclass
class ActionHooks:
    """Callbacks for metrics and the back-off: lock wait and hold seconds, the seconds an acquisition waited before
    it timed out, Spark job seconds of an action's tasks."""

    lock_waited: Callable[[float], None] = lambda seconds: None
    lock_timed_out: Callable[[float], None] = lambda seconds: None
    lock_held: Callable[[float], None] = lambda seconds: None
    spark_job: Callable[[str, float], None] = lambda action, seconds: None  # one plan's tasks, Spark start-up excluded


@dataclass
class TableContext:
    table: HudiTable
    lock: TableLock
    executor: SparkExecutor
    lock_timeout_s: float = 60.0
    storage_options: StorageOptions | None = None
    heartbeat_interval_ms: int = 60_000
    write: WritePolicy = field(default_factory=WritePolicy)  # codec and bloom filter of the base files written
    hooks: ActionHooks = field(default_factory=ActionHooks)

    @property
    def compression(self) -> str:
        return self.write.compression_codec

    @property
    def bloom(self) -> BloomFilterSettings | None:
        """The bloom filter the table's base files carry (None: its writers write none)."""
        return self.write.bloom_filter(self.table.config.populate_meta_fields)

    @contextmanager
    def locked(self) -> Iterator[LockHandle]:
        """Hold the table lock; a LockError before it was acquired (its timeout) is reported to `lock_timed_out`."""
        started = time.monotonic()
        acquired = False

        def waited(seconds: float) -> None:
            nonlocal acquired
            acquired = True
            self.hooks.lock_waited(seconds)

        try:
            with self.lock.hold(self.lock_timeout_s, waited, self.hooks.lock_held) as handle:
                yield handle
        except LockError:
            if not acquired:
                self.hooks.lock_timed_out(time.monotonic() - started)
            raise

    def lock_factory(self) -> Callable[[], AbstractContextManager[object]]:
        return self.locked


def pending_plan(
    ctx: TableContext, instant_time: str, what: str, is_target: Callable[[Instant], bool]
) -> tuple[Instant, Timeline]:
    """The requested instant of a pending plan and the timeline it was found on; an inflight attempt left by an
    earlier run is rolled back first."""
    table = ctx.table
    timeline = table.reload()
    instant = timeline.get(instant_time)
    if instant is None or instant.is_completed:
        raise InstantNotPendingError(f"no pending {what} at {instant_time}", table=table.label)
    if not is_target(instant):
        raise InvalidPlanError(f"instant {instant_time} is not a {what}", table=table.label)
    if instant.state is State.INFLIGHT:
        log.info("rolling back the previous attempt", extra={"table": table.label, "instant": instant_time})
        rollback(table, instant, lock=ctx.lock_factory())
        timeline = table.reload()
        current = timeline.get(instant_time)
        if current is None or not current.is_requested:
            raise InvalidPlanError(f"{what} {instant_time} is not requested after its rollback", table=table.label)
        instant = current
    return instant, timeline


def reconcile_attempt_files(
    ctx: TableContext, instant: Instant, stats: Sequence[HoodieWriteStat], partitions: set[str]
) -> int:
    """Delete files named with the instant that the commit will not name: files of failed or speculative task
    attempts (from the markers), and files an orphaned job of an earlier attempt left (from a listing of the plan's
    partitions: base files carry the instant in their name)."""
    table = ctx.table
    t = instant.requested_time
    keep = {s.path for s in stats if s.path}
    removed = 0
    candidates = {(p, name) for p, name, _ in list_marked_files(table.storage, table.base_path, t)}
    for partition in partitions:
        for fi in table.storage.list(partition_location(table.base_path, partition)):
            parsed = parse_base_file_name(fi.name)
            if parsed is not None and parsed.instant_time == t:
                candidates.add((partition, fi.name))
    for partition, name in sorted(candidates):
        rel = f"{partition}/{name}" if partition else name
        if rel not in keep and table.storage.delete(join(table.base_path, rel)):
            removed += 1
    return removed


def run_plan(
    ctx: TableContext,
    instant: Instant,
    tasks: Sequence[Task],
    *,
    action: str,
    partitions: set[str],
    metadata: Callable[[Sequence[HoodieWriteStat]], HoodieCommitMetadata],
    checks: Sequence[ConflictCheck] = (),
    lease: LockHandle | None = None,
    parallelism: int | None = None,
) -> tuple[Instant, WriteStats, JobResult]:
    """Run a requested plan's tasks and complete its instant through the commit path (see the module docstring);
    returns the completed instant, the write stats committed and the job's own measures. A conflict check raises,
    or returns the stats that may still be committed: the commit path deletes the files of the others."""
    table = ctx.table
    t = instant.requested_time
    inflight = table.active.transition_to_inflight(instant)
    attempt = start_attempt(table.storage, table.base_path, t)
    fenced = [replace(task, attempt_id=attempt) for task in tasks]
    heartbeat = Heartbeat(table.storage, table.base_path, t, ctx.heartbeat_interval_ms).start()
    try:
        ctx.executor.start()  # a no-op once started: the job's time below excludes Spark's start-up
        job_started = time.monotonic()
        job = ctx.executor.run_tasks(
            fenced,
            tag=job_tag(table.name, action, t),
            description=f"{action} {table.name} {t}",
            storage_options=ctx.storage_options,
            parallelism=parallelism,
        )
        ctx.hooks.spark_job(action, time.monotonic() - job_started)
        stats = job.stats
        removed = reconcile_attempt_files(ctx, inflight, stats, partitions)
        if removed:
            log.info("removed %d files of failed task attempts", removed, extra={"table": table.label, "instant": t})
        done, kept = complete(
            table,
            inflight,
            metadata,
            write_stats=stats,
            lock=ctx.lock_factory(),
            checks=checks,
            lease=lease,
        )
        delete_markers(table.storage, table.base_path, t)
    finally:
        heartbeat.stop()
    return done, kept, job
