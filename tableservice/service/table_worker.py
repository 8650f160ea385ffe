"""One pass over one table: every service in Hudi's order (failed-write rollback, compaction, clustering, clean,
archival) executes its pending instants, oldest first, each under its executor lease, then schedules one action
when its policy says it is due and executes it (`tableservice.service.protocol`). Blocking code (storage and
Spark); the daemon runs it in worker threads.

The same pass serves `tableservice run` (every poll), `tableservice once` and the operator commands.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from tableservice.errors import (
    DamagedInputError,
    LeaseHeldError,
    LockError,
    MetadataOutOfStepError,
    TableServiceError,
)
from tableservice.executors.spark import SparkExecutor, job_tag
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.table.hudi_table import HudiTable, TableSnapshot
from tableservice.hudi.timeline.instant import Action, Instant
from tableservice.locks import LockProvider
from tableservice.metrics import Metrics
from tableservice.service.actions import ActionHooks, TableContext
from tableservice.service.history import ActionHistory, ActionOutcome
from tableservice.service.holds import SERVICE_WIDE, Holds
from tableservice.service.outcome_metrics import record_outcome
from tableservice.service.priority import LockWaits, TableSlo
from tableservice.service.protocol import SchedulingDeferred, TableService
from tableservice.service.table_state import (
    Failure,
    PassResult,
    RunningActions,
    TableSettings,
    TableStatus,
    age_seconds,
)
from tableservice.service.worker_actions import ActionGuard
from tableservice.service.worker_due import DueDecisions
from tableservice.storage import Storage, StorageOptions
from tableservice.storage.requests import counting

__all__ = ["PassResult", "RunningActions", "TableSettings", "TableStatus", "TableWorker"]
log = logging.getLogger(__name__)
T = TypeVar("T")


class TableWorker(DueDecisions, ActionGuard):
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
        history: ActionHistory | None = None,
    ) -> None:
        self._settings = settings
        self._services = settings.services()  # one instance per service: some keep state between polls
        self.storage = storage
        self.locks = locks
        self.executor = executor
        self.metrics = metrics
        self.storage_options = storage_options
        self.running = running if running is not None else RunningActions()
        self.history = history  # every action run is recorded there (`service.history`)
        self.table: HudiTable | None = None
        self.snapshot: TableSnapshot | None = None  # what the current pass sees
        self._nothing_at: dict[str, str] = {}
        self._spark_seconds = 0.0  # Spark job seconds of the action running now (one at a time per worker)
        self._held = Holds()
        self._held_reported = False
        self._none_pending: dict[str, str] = {}  # services whose pending gauges were set to 0, under which label
        self._counting = False
        self.lock_waits = LockWaits()  # the daemon's back-off reads them (`service/priority.py`)
        self.found_due_at: float | None = None  # when a poll first found work since the last pass (priority aging)
        self._slo = TableSlo()  # SLO readings per snapshot, expected durations per service
        self.status = TableStatus(uri=settings.uri, name=settings.name or settings.uri)
        self._show_paused()

    @property
    def settings(self) -> TableSettings:
        return self._settings

    @settings.setter
    def settings(self, value: TableSettings) -> None:
        """New settings (a configuration reload): what planning found under the old policies no longer holds. Equal
        settings (a discovery rescan, a reload that left the table as it was) change nothing."""
        if value == self._settings:
            return
        self._settings = value
        if value.name is not None and value.name != self.status.name:  # renamed in the configuration
            self.status.name = value.name
            if self.table is not None:
                self.table.relabel(value.name)
        self._services = value.services()
        self._slo.forget()
        self._nothing_at.clear()
        self._held.clear()
        self._held_reported = False
        self._show_paused()

    @property
    def paused(self) -> bool:
        """Paused by an operator: polled, but no pass runs (operator commands naming an instant still do)."""
        return self._settings.paused

    def _show_paused(self) -> None:
        self.status.update(paused=self.paused, paused_reason=self._settings.paused_reason if self.paused else None)
        if self.metrics is not None:
            self.metrics.set_paused(self.label, self.paused)

    @property
    def label(self) -> str:
        return self.status.name

    def _open(self) -> HudiTable:
        if self.table is None:
            self.table = HudiTable.open(self.storage, self.settings.uri, label=self.settings.name)
            if self.settings.name is None:  # built outside the daemon without a name: hoodie.table.name
                self.status.name = self.table.name
        return self.table

    def _context(self, table: HudiTable) -> TableContext:
        lock = self.locks.table_lock(table.name, table.base_path)
        return TableContext(
            table=table,
            lock=lock,
            executor=self.executor,
            lock_timeout_s=self.settings.lock_timeout_s,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            storage_options=self.storage_options,
            write=self.settings.write,
            hooks=ActionHooks(
                lock_waited=self._lock_waited,
                lock_timed_out=self.lock_waits.add_timeout,
                lock_held=self._lock_held,
                spark_job=self._spark_job_ran,
            ),
        )

    def _lock_waited(self, seconds: float) -> None:
        self.lock_waits.add(seconds)  # the daemon's back-off reads them
        if self.metrics is not None:
            self.metrics.observe_lock_wait(self.label, self.locks.name, seconds)

    def _lock_held(self, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_lock_hold(self.label, self.locks.name, seconds)

    def _spark_job_ran(self, action: str, seconds: float) -> None:
        """An action's Spark job ended: its metric, and the seconds the action's history record adds up."""
        self._spark_seconds += seconds
        if self.metrics is not None:
            self.metrics.observe_spark_job(self.label, action, seconds)

    def context(self) -> TableContext:
        """The table's context as a pass builds it (its lock, lock timeout and executor); for the operator commands."""
        return self._context(self._open())

    @contextmanager
    def _requests_counted(self) -> Iterator[None]:
        """Count the object-store requests made for this table into `tableservice_storage_requests_total` (the
        outermost of nested calls reports: a pass polls inside itself)."""
        if self._counting or self.metrics is None:
            yield
            return
        self._counting = True
        try:
            with counting() as tally:
                yield
        finally:
            self._counting = False
            self.metrics.storage_requests(self.label, tally.counts())

    # --- polling -----------------------------------------------------------------------------------

    def poll(self, *, reload: bool = True) -> list[Instant]:
        """Take a snapshot (one listing; without `reload`, of what the table holds) and report pending actions in
        the status and the metrics; returns pending compactions (none when the table is not served)."""
        with self._requests_counted():
            return self._poll(reload)

    def _poll(self, reload: bool) -> list[Instant]:
        started = time.monotonic()
        table = self._open()
        try:
            snapshot = self.snapshot = table.refresh() if reload else table.snapshot()
            config, timeline = snapshot.config, snapshot.timeline
            tz = config.timezone_name
            done = [i for i in timeline.completed() if i.action is Action.COMPACTION]
            self.status.update(
                table_type=config.table_type.value,
                table_version=config.version,
                pending=[
                    {
                        "instant": i.requested_time,
                        "action": i.action.value,
                        "state": i.state.name,
                        "age_seconds": round(age_seconds(i, tz), 1),
                    }
                    for i in timeline.pending()
                ],
                # The newest on the active timeline, else the last one this worker saw: a poll never reads the
                # archived timeline (its cost would grow with the table's history); `status` looks there.
                last_compaction=done[-1].requested_time if done else self.status.last_compaction,
                last_poll=time.time(),
            )
            pending = {svc.name: svc.pending(snapshot) for svc in self._services if svc.plans_on_timeline}
            if self.metrics is not None:
                for name, instants in pending.items():
                    if not instants and self._none_pending.get(name) == self.label:
                        continue  # still none: the gauges say so already
                    oldest = age_seconds(instants[0], tz) if instants else 0.0
                    self.metrics.set_pending(self.label, name, count=len(instants), oldest_age_seconds=oldest)
                    if instants:
                        self._none_pending.pop(name, None)
                    else:
                        self._none_pending[name] = self.label
                self.metrics.poll_finished(self.label, duration_seconds=time.monotonic() - started, succeeded=True)
            return pending["compaction"]
        except TableServiceError:
            if self.metrics is not None:
                self.metrics.poll_finished(self.label, duration_seconds=time.monotonic() - started, succeeded=False)
            raise

    # --- what a pass would do -----------------------------------------------------------------------

    def _snapshot(self) -> TableSnapshot:
        if self.snapshot is None:
            self.snapshot = self._open().refresh()
        return self.snapshot

    def services(self) -> list[TableService]:
        """The services serving this table, in Hudi's order."""
        snapshot = self._snapshot()
        return [svc for svc in self._services if svc.applies(snapshot)]

    def service(self, name: str) -> TableService:
        for svc in self._services:
            if svc.name == name:
                return svc
        raise KeyError(name)

    def pending(self, name: str) -> list[Instant]:
        """Instants the service would execute now, on the snapshot of the last poll."""
        return self.service(name).pending(self._snapshot())

    def due(self, name: str) -> bool:
        """Whether a pass would schedule an action of the service now (on the timeline of the last load; only a
        trigger that needs file sizes lists files)."""
        return self._schedule_due(self.service(name), self._snapshot())

    def needs_pass(self) -> bool:
        """Whether a pass has anything to do: a pending instant to execute or an action due to be scheduled (never
        while the table is paused). Every service's due is asked (and shown in /status); a trigger that needs a
        listing only while no other service has made the pass needed."""
        if self.paused:
            self.found_due_at = None
            return False
        with self._requests_counted():
            needed = self._needs_pass()
        if not needed:
            self.found_due_at = None
        elif self.found_due_at is None:
            self.found_due_at = time.time()
        return needed

    def _needs_pass(self) -> bool:
        snapshot = self._snapshot()
        needed = False
        for svc in self.services():
            needed = (svc.settings.execute and bool(self._runnable(svc, svc.pending(snapshot)))) or needed
            needed = self._schedule_due(svc, snapshot, listing=not needed) or needed
        return needed

    # --- one pass ----------------------------------------------------------------------------------

    def run_pass(
        self, *, allow_schedule: bool = True, stop: Callable[[], bool] = lambda: False, reload: bool = True
    ) -> PassResult:
        """One pass: each service in Hudi's order executes its pending instants (oldest first), then schedules one
        action when its policy says one is due and executes it. Without `reload`, the pass starts from the snapshot
        of the last poll (the daemon polls first to decide whether a pass is needed). A paused table is polled only."""
        with self._requests_counted():
            return self._run_pass(allow_schedule, stop, reload)

    def _run_pass(self, allow_schedule: bool, stop: Callable[[], bool], reload: bool) -> PassResult:
        result = PassResult()
        self.poll(reload=reload)
        if self.paused:
            log.info(
                "paused: no action runs (%s)",
                self.settings.paused_reason or "no reason given",
                extra={"table": self.label},
            )
            return result
        snapshot = self._snapshot()
        ctx = self._context(snapshot.table)
        for svc in self.services():
            if stop():
                break
            snapshot = self._serve(ctx, svc, snapshot, result, allow_schedule, stop)
        self.poll(reload=False)  # the table holds the timeline its commits left, or loads one
        self.found_due_at = None  # served: what is still due waits from the next poll on
        return result

    def _serve(
        self,
        ctx: TableContext,
        svc: TableService,
        snapshot: TableSnapshot,
        result: PassResult,
        allow_schedule: bool,
        stop: Callable[[], bool],
    ) -> TableSnapshot:
        """One service's turn on `snapshot`; returns the snapshot the next service starts from: a new one (taken
        explicitly) when this one changed the timeline."""
        if svc.uses_spark and isinstance(self.executor, SparkExecutor):  # tests may pass stand-ins
            unavailable = self.executor.unavailable()
            if unavailable is not None:  # retried by the next start; the table's other services go on
                log.warning("%s waits for spark: %s", svc.name, unavailable.problem, extra={"table": self.label})
                if self._runnable(svc, svc.pending(snapshot)) or self._schedule_due(svc, snapshot, listing=False):
                    result.failed.append(Failure("", unavailable, svc.name))  # reported; the daemon does not back off
                return snapshot
        changed = False
        if svc.settings.execute:
            for instant in self._runnable(svc, svc.pending(snapshot)):
                if stop():
                    break
                self._run_leased(ctx, svc, instant, result)
                changed = True
        if allow_schedule and not stop() and self._schedule_due(svc, snapshot):
            changed = True  # planning re-read the timeline under the lock, whatever it found
            planned_at = time.time()
            try:
                scheduled = svc.schedule(ctx)
            except SchedulingDeferred as e:
                log.info("%s", e, extra={"table": self.label})
                scheduled = None
            except DamagedInputError as e:  # planning found damaged data: this service stops for the table
                failure = Failure("", e, svc.name)
                result.failed.append(failure)
                result.held_back.append(failure)
                if self.metrics is not None:
                    self.metrics.action_failed(self.label, svc.name)
                    self.metrics.table_error(self.label, e)
                self._hold(svc.name, SERVICE_WIDE, e)
                self._remember(svc.name, "", planned_at, ActionOutcome.HELD_BACK, error=str(e))
                return ctx.table.snapshot()
            else:
                self._planned(svc.name, scheduled, ctx.table.snapshot())
            if scheduled is not None:
                if svc.plans_on_timeline:
                    result.scheduled.append(scheduled.requested_time)
                    if self.metrics is not None:
                        self.metrics.action_scheduled(self.label, svc.name)
                if svc.settings.execute and not stop():
                    self._run_leased(ctx, svc, scheduled, result)
        if not changed:
            return snapshot
        self.snapshot = ctx.table.snapshot()
        return self.snapshot

    def _runnable(self, svc: TableService, pending: list[Instant]) -> list[Instant]:
        """`pending` less the instants held back after a permanent failure (until their hold runs out)."""
        if self._held.expire() or not self._held_reported:
            self._report_held()
        return self._held.runnable(svc.name, pending)

    def _quarantined(self, service: str) -> bool:
        if self._held.expire():
            self._report_held()
        return self._held.service_held(service)

    def run_one(self, service: str, instant_time: str) -> PassResult:
        """Execute one pending instant of `service` as a pass does (under its executor lease), for the operator
        commands: LeaseHeldError when another process holds the lease; nothing when the instant is not pending; a
        failure is recorded in the result's `failed`."""
        table = self._open()
        svc = self.service(service)
        result = PassResult()
        for instant in svc.pending(table.refresh()):
            if instant.requested_time == instant_time:
                self._run_leased(self.context(), svc, instant, result, refuse=True)
        return result

    def _run_leased(
        self, ctx: TableContext, svc: TableService, instant: Instant, result: PassResult, *, refuse: bool = False
    ) -> None:
        """Execute one instant under its executor lease: skipped (`refuse`: LeaseHeldError) when another replica
        holds the lease, skipped when a pending instant is no longer pending; tracked for graceful shutdown while it
        runs; recorded in `result`."""
        t = instant.requested_time
        lease = self.locks.lease(ctx.table.name, ctx.table.base_path, svc.lease_name(instant))
        try:
            handle = lease.acquire(0.0)
        except LockError as e:
            if refuse:
                raise LeaseHeldError(
                    f"not running {svc.name} {t}: another process holds its executor lease {lease.key!r}",
                    table=self.label,
                ) from e
            log.info("another replica runs this %s", svc.name, extra={"table": self.label, "instant": t})
            return
        key = f"{self.settings.uri}#{svc.name}#{t}"
        self.running.add(key, job_tag(ctx.table.name, svc.name, t))
        self.status.running = f"{svc.name} {t}"
        if self.metrics is not None:
            self.metrics.lease_held(self.label, svc.name, True)
        try:
            outcome = self._guarded(svc.name, t, result, lambda: svc.execute(ctx, instant, handle))
        finally:
            self.running.remove(key)
            self.status.running = None
            lease.release(handle)
            if self.metrics is not None:
                self.metrics.lease_held(self.label, svc.name, False)
        if outcome is None:
            return
        result.record(outcome)
        if self.settings.verify_metadata_after_action and ctx.table.config.has_metadata_table:
            self._guarded("metadata_verify", t, result, lambda: verify_in_step(ctx.table))
        if self.metrics is None:
            return
        record_outcome(self.metrics, self.label, svc.name, outcome)


def verify_in_step(table: HudiTable) -> None:
    """Raise MetadataOutOfStepError when the table's metadata table differs from storage (`metadata` section's
    `verify_after_action`)."""
    differences = verify_metadata_table(table, table.reload())
    if differences:
        shown = "; ".join(str(d) for d in differences[:5])
        raise MetadataOutOfStepError(
            f"metadata table differs from storage in {len(differences)} places: {shown}", table=table.label
        )
