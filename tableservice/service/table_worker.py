"""One pass over one table, in Hudi's order: finish pending rollbacks, roll back failed writes, then compaction,
clustering and clean (each: execute pending plans oldest first, then schedule one when due and run it), then
archival. Blocking code (storage and Spark); the daemon runs it in worker threads.

The same pass serves `tableservice run` (every poll), `tableservice once` and the operator commands.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from tableservice.errors import ActionAbandonedError, LockError, TableServiceError, UnsupportedTableError
from tableservice.executors.spark import SparkExecutor, job_tag
from tableservice.hudi.archival import archive
from tableservice.hudi.clean import execute_clean, pending_cleans, schedule_clean
from tableservice.hudi.failed_writes import failed_writes
from tableservice.hudi.instant import Action, Instant
from tableservice.hudi.rollback import resume_pending_rollbacks, rollback
from tableservice.hudi.table import HudiTable
from tableservice.locks import LockHandle, LockProvider
from tableservice.metrics import Metrics
from tableservice.planning.clean import CleanPlanner
from tableservice.planning.clustering_trigger import clustering_due
from tableservice.planning.compaction import CompactionBlockedError
from tableservice.service.actions import ActionHooks, TableContext
from tableservice.service.clustering import (
    execute_clustering,
    pending_clustering,
    schedule_clustering,
)
from tableservice.service.compaction import (
    check_supported,
    compaction_decision,
    execute_compaction,
    schedule_compaction,
)
from tableservice.service.table_state import (
    PassResult,
    RunningActions,
    TableSettings,
    TableStatus,
    age_seconds,
)
from tableservice.storage import Storage, StorageOptions

__all__ = ["PassResult", "RunningActions", "TableSettings", "TableStatus", "TableWorker"]
log = logging.getLogger(__name__)
T = TypeVar("T")


class TableWorker:
    """Serves one table; keeps its HudiTable (and so its metadata cache) between polls."""

    def __init__(
        self,
        settings: TableSettings,
        storage: Storage,
        locks: LockProvider,
        executor: SparkExecutor,
        metrics: Metrics | None = None,
        storage_options: StorageOptions | None = None,
        running: RunningActions | None = None,
    ) -> None:
        self._settings = settings
        self.storage = storage
        self.locks = locks
        self.executor = executor
        self.metrics = metrics
        self.storage_options = storage_options
        self.running = running if running is not None else RunningActions()
        self.table: HudiTable | None = None
        self._nothing_at: dict[str, str] = {}
        self.status = TableStatus(uri=settings.uri, name=settings.name or settings.uri)

    @property
    def settings(self) -> TableSettings:
        return self._settings

    @settings.setter
    def settings(self, value: TableSettings) -> None:
        """New settings (a configuration reload): what planning found under the old policies no longer holds."""
        self._settings = value
        self._nothing_at.clear()

    @property
    def label(self) -> str:
        return self.status.name

    def _open(self) -> HudiTable:
        if self.table is None:
            self.table = HudiTable.open(self.storage, self.settings.uri)
            if self.settings.name is None:
                self.status.name = self.table.name
        return self.table

    def _context(self, table: HudiTable) -> TableContext:
        lock = self.locks.table_lock(table.name, table.base_path)
        hooks = ActionHooks()
        if self.metrics is not None:
            m, name, provider = self.metrics, self.label, self.locks.name
            hooks = ActionHooks(
                lock_waited=lambda s: m.observe_lock_wait(name, provider, s),
                lock_held=lambda s: m.observe_lock_hold(name, provider, s),
            )
        return TableContext(
            table=table,
            lock=lock,
            executor=self.executor,
            lock_timeout_s=self.settings.lock_timeout_s,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            storage_options=self.storage_options,
            hooks=hooks,
        )

    # --- polling -----------------------------------------------------------------------------------

    def poll(self) -> list[Instant]:
        """Reload the timeline (one listing) and report pending actions; returns pending compactions."""
        started = time.monotonic()
        table = self._open()
        try:
            timeline = table.reload()
            config = table.config
            self.status.table_type = config.table_type.value
            self.status.table_version = config.version
            pending = list(timeline.pending())
            self.status.pending = [
                {
                    "instant": i.requested_time,
                    "action": i.action.value,
                    "state": i.state.name,
                    "age_seconds": round(age_seconds(i, config.timezone_name), 1),
                }
                for i in pending
            ]
            done = [i for i in timeline.completed() if i.action is Action.COMPACTION]
            self.status.last_compaction = done[-1].requested_time if done else None
            compactions = [i for i in pending if i.action is Action.COMPACTION]
            unsupported: UnsupportedTableError | None = None
            if config.has_metadata_table:
                try:
                    check_supported(table)
                except UnsupportedTableError as e:
                    unsupported = e
            if self.metrics is not None:
                oldest = age_seconds(compactions[0], config.timezone_name) if compactions else 0.0
                self.metrics.set_pending(self.label, "compaction", count=len(compactions), oldest_age_seconds=oldest)
                cleans = [i for i in pending if i.action is Action.CLEAN]
                self.metrics.set_pending(
                    self.label,
                    "clean",
                    count=len(cleans),
                    oldest_age_seconds=age_seconds(cleans[0], config.timezone_name) if cleans else 0.0,
                )
                clusterings = [i for i in pending if table.is_clustering(i)]
                self.metrics.set_pending(
                    self.label,
                    "clustering",
                    count=len(clusterings),
                    oldest_age_seconds=age_seconds(clusterings[0], config.timezone_name) if clusterings else 0.0,
                )
                self.metrics.set_unsupported(
                    self.label,
                    None if unsupported is None else "metadata_table",
                )
                self.metrics.poll_finished(self.label, duration_seconds=time.monotonic() - started, succeeded=True)
            self.status.last_poll = time.time()
            if unsupported is not None:
                self.status.health = f"unsupported: {unsupported.problem}"
                return []
            return compactions
        except TableServiceError:
            if self.metrics is not None:
                self.metrics.poll_finished(self.label, duration_seconds=time.monotonic() - started, succeeded=False)
            raise

    def has_failed_writes(self) -> bool:
        """Whether a pending write has failed (per the policy); uses the timeline of the last poll."""
        s = self.settings
        table = self._open()
        if table.config.has_metadata_table:
            return False
        return bool(
            failed_writes(
                table,
                s.failed_writes,
                timeline=table.timeline(),
                heartbeat_interval_ms=s.heartbeat_interval_ms,
                tolerable_misses=s.heartbeat_tolerable_misses,
            )
        )

    def compaction_due(self) -> bool:
        """Whether a pass would schedule a compaction now (cheap: the timeline, plus a listing only when the
        policy has a log-bytes trigger)."""
        s = self.settings
        table = self._open()
        if not (s.compaction_schedule and s.compaction_policy.enabled) or table.config.has_metadata_table:
            return False
        if not table.config.is_mor:
            return False
        return self._worth_planning("compaction") and self._trigger_due("compaction")

    def _trigger_due(self, service: str) -> bool:
        """Whether the service's policy trigger says a plan is due, on the timeline of the last load."""
        s = self.settings
        table = self._open()
        if service == "compaction":
            return compaction_decision(self._context(table), s.compaction_policy).due
        if service == "clustering":
            return clustering_due(table, table.timeline(), s.clustering_policy)[0]
        return CleanPlanner(s.clean_policy).due(table)[0]

    # --- one pass ----------------------------------------------------------------------------------

    def run_pass(self, *, allow_schedule: bool = True, stop: Callable[[], bool] = lambda: False) -> PassResult:
        """One pass, in Hudi's order: roll back failed writes; compaction (execute pending plans oldest first,
        then schedule one when due and run it; merge-on-read tables); clustering (the same)."""
        result = PassResult()
        pending = self.poll()
        table = self._open()
        if table.config.has_metadata_table:
            return result
        ctx = self._context(table)
        resume_pending_rollbacks(table, lock=ctx.lock_factory())
        self._roll_back_failed_writes(ctx, result)
        if table.config.is_mor:
            self._compaction_pass(ctx, pending, result, allow_schedule, stop)
        self._clustering_pass(ctx, result, allow_schedule, stop)
        if not stop():
            self._clean_pass(ctx, result, allow_schedule)
        if not stop():
            self._archival_pass(ctx, result)
        self.poll()
        return result

    def _timeline_mark(self) -> str:
        """A mark of the completed timeline that moves with any change to it: a new write, or a clean, rollback or
        removed savepoint that frees a bound."""
        done = self._open().timeline().completed().instants
        return f"{len(done)}:{done[-1].requested_time}.{done[-1].action.value}" if done else ""

    def _planned(self, service: str, scheduled: Instant | None) -> None:
        """After a due trigger: remember that planning found nothing to do on the timeline as it is now, so that an
        idle table is not planned again (a listing) on every poll while its trigger stays due. Only a due trigger
        may record this: a trigger that is not due yet (elapsed time) must be asked again on the next poll."""
        if scheduled is None:
            self._nothing_at[service] = self._timeline_mark()
        else:
            self._nothing_at.pop(service, None)

    def _worth_planning(self, service: str) -> bool:
        return self._nothing_at.get(service) != self._timeline_mark()

    def has_pending_clean(self) -> bool:
        return any(i.action is Action.CLEAN for i in self._open().timeline().pending())

    def clean_due(self) -> bool:
        s = self.settings
        table = self._open()
        if not (s.clean_schedule and s.clean_policy.enabled) or table.config.has_metadata_table:
            return False
        return self._worth_planning("clean") and self._trigger_due("clean")

    def archival_due(self) -> bool:
        s = self.settings
        table = self._open()
        if not s.archival_enabled or table.config.has_metadata_table:
            return False
        return (
            self._worth_planning("archival")
            and len(table.timeline().completed_writes()) > s.archival_policy.max_commits
        )

    def _guarded(self, action: str, instant: str, result: PassResult, fn: Callable[[], T]) -> T | None:
        """Run one action: a typed failure is recorded (result, metrics, log) and the pass goes on."""
        started = time.monotonic()
        try:
            out = fn()
        except ActionAbandonedError as e:  # optimistic concurrency at work, not a failure of the table
            if self.metrics is not None:
                self.metrics.action_abandoned(self.label, action)
            log.warning("%s abandoned: %s", action, e, extra={"table": self.label, "instant": instant})
            return None
        except TableServiceError as e:
            result.failed.append((instant, e))
            if self.metrics is not None:
                self.metrics.action_failed(self.label, action)
                self.metrics.table_error(self.label, e)
            log.error("%s failed: %s", action, e, extra={"table": self.label, "instant": instant})
            return None
        if self.metrics is not None:
            self.metrics.action_completed(self.label, action, duration_seconds=time.monotonic() - started)
        return out

    def _clean_pass(self, ctx: TableContext, result: PassResult, allow_schedule: bool) -> None:
        s = self.settings
        table = ctx.table
        if s.clean_execute:
            for instant in pending_cleans(table):
                run = functools.partial(execute_clean, table, instant, lock=ctx.lock_factory())
                if self._guarded("clean", instant.requested_time, result, run) is not None:
                    result.cleaned.append(instant.requested_time)
        if s.clean_schedule and s.clean_policy.enabled and allow_schedule and self._trigger_due("clean"):
            scheduled = schedule_clean(table, CleanPlanner(s.clean_policy), lock=ctx.lock_factory(), force=True)
            self._planned("clean", scheduled)
            if scheduled is None:
                return
            result.scheduled.append(scheduled.requested_time)
            if self.metrics is not None:
                self.metrics.action_scheduled(self.label, "clean")
            if (
                s.clean_execute
                and self._guarded(
                    "clean",
                    scheduled.requested_time,
                    result,
                    lambda: execute_clean(table, scheduled, lock=ctx.lock_factory()),
                )
                is not None
            ):
                result.cleaned.append(scheduled.requested_time)

    def _archival_pass(self, ctx: TableContext, result: PassResult) -> None:
        s = self.settings
        if not s.archival_enabled or len(ctx.table.reload().completed_writes()) <= s.archival_policy.max_commits:
            return
        if not self._worth_planning("archival"):
            return
        lease = self.locks.lease(ctx.table.name, ctx.table.base_path, "archival")
        try:
            handle = lease.acquire(0.0)
        except LockError:
            return
        try:
            archived = self._guarded(
                "archival", "", result, lambda: archive(ctx.table, s.archival_policy, lock=ctx.lock_factory())
            )
        finally:
            lease.release(handle)
        if isinstance(archived, list):
            result.archived.extend(i.requested_time for i in archived)
            # Archival's bounds (savepoints, pending instants, the cleaner) can leave nothing to move: do not take
            # the table lock for it again on every poll until the timeline changes.
            self._planned("archival", archived[-1] if archived else None)

    def _compaction_pass(
        self,
        ctx: TableContext,
        pending: list[Instant],
        result: PassResult,
        allow_schedule: bool,
        stop: Callable[[], bool],
    ) -> None:
        s = self.settings
        if s.compaction_execute:
            for instant in pending:
                if stop():
                    return
                self._execute(ctx, instant.requested_time, result)
        if (
            s.compaction_schedule
            and s.compaction_policy.enabled
            and allow_schedule
            and not stop()
            and self._trigger_due("compaction")
        ):
            try:
                scheduled = schedule_compaction(ctx, s.compaction_policy, force=True)
            except CompactionBlockedError as e:  # table version 6: waits for the earlier write to finish
                log.info("compaction deferred: %s", e.problem, extra={"table": self.label})
                return
            self._planned("compaction", scheduled)
            if scheduled is not None:
                result.scheduled.append(scheduled.requested_time)
                if self.metrics is not None:
                    self.metrics.action_scheduled(self.label, "compaction")
                if s.compaction_execute and not stop():
                    self._execute(ctx, scheduled.requested_time, result)

    def has_pending_clustering(self) -> bool:
        table = self._open()
        return any(table.is_clustering(i) for i in table.timeline().pending())

    def clustering_due(self) -> bool:
        s = self.settings
        table = self._open()
        if not (s.clustering_schedule and s.clustering_policy.enabled) or table.config.has_metadata_table:
            return False
        return self._worth_planning("clustering") and self._trigger_due("clustering")

    def _clustering_pass(
        self, ctx: TableContext, result: PassResult, allow_schedule: bool, stop: Callable[[], bool]
    ) -> None:
        s = self.settings
        if s.clustering_execute:
            for instant in pending_clustering(ctx.table, ctx.table.reload()):
                if stop():
                    return
                self._cluster(ctx, instant.requested_time, result)
        if (
            s.clustering_schedule
            and s.clustering_policy.enabled
            and allow_schedule
            and not stop()
            and self._trigger_due("clustering")
        ):
            scheduled = schedule_clustering(ctx, s.clustering_policy, force=True)
            self._planned("clustering", scheduled)
            if scheduled is not None:
                result.scheduled.append(scheduled.requested_time)
                if self.metrics is not None:
                    self.metrics.action_scheduled(self.label, "clustering")
                if s.clustering_execute and not stop():
                    self._cluster(ctx, scheduled.requested_time, result)

    def _cluster(self, ctx: TableContext, instant_time: str, result: PassResult) -> None:
        policy = self.settings.clustering_policy
        done = self._run_leased(
            ctx,
            "clustering",
            instant_time,
            result,
            lambda lease: execute_clustering(ctx, instant_time, policy, lease=lease),
        )
        if done is None:
            return
        result.clustered.append(done)
        if self.metrics is not None:
            self.metrics.record_io(
                self.label, "clustering", bytes_written=done.bytes_written, records_written=done.records_written
            )

    def _run_leased(
        self, ctx: TableContext, action: str, instant_time: str, result: PassResult, run: Callable[[LockHandle], T]
    ) -> T | None:
        """Run one action on a pending instant under its executor lease: skipped when another replica holds the
        lease or the instant is no longer pending; tracked for graceful shutdown while it runs."""
        lease = self.locks.lease(ctx.table.name, ctx.table.base_path, f"{action}-{instant_time}")
        try:
            handle = lease.acquire(0.0)
        except LockError:
            log.info("another replica runs this %s", action, extra={"table": self.label, "instant": instant_time})
            return None
        key = f"{self.settings.uri}#{instant_time}"
        self.running.add(key, job_tag(ctx.table.name, action, instant_time))
        self.status.running = f"{action} {instant_time}"
        try:
            current = ctx.table.reload().get(instant_time)
            if current is None or current.is_completed:
                return None
            return self._guarded(action, instant_time, result, lambda: run(handle))
        finally:
            self.running.remove(key)
            self.status.running = None
            lease.release(handle)

    def _roll_back_failed_writes(self, ctx: TableContext, result: PassResult) -> None:
        s = self.settings
        for instant in failed_writes(
            ctx.table,
            s.failed_writes,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            tolerable_misses=s.heartbeat_tolerable_misses,
        ):
            t = instant.requested_time

            def undo(_lease: LockHandle, target: Instant = instant) -> Instant:
                return rollback(ctx.table, target, lock=ctx.lock_factory())

            done = self._run_leased(ctx, "rollback", t, result, undo)
            if done is not None:
                result.rolled_back.append(t)
                log.info("rolled back failed write %s", instant, extra={"table": self.label, "instant": t})

    def _execute(self, ctx: TableContext, instant_time: str, result: PassResult) -> None:
        done = self._run_leased(
            ctx, "compaction", instant_time, result, lambda lease: execute_compaction(ctx, instant_time, lease=lease)
        )
        if done is None:
            return
        result.completed.append(done)
        if self.metrics is not None:
            self.metrics.record_io(
                self.label,
                "compaction",
                bytes_read=done.bytes_read,
                bytes_written=done.bytes_written,
                records_written=done.records_written,
                log_files_compacted=done.log_files_compacted,
            )
