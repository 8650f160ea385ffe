"""Each served table's task in the daemon: wait for its next poll (or a wake), poll, run a pass when one is needed,
and act on the outcome (back-off, quarantine, health). A table whose last poll found nothing to do parks in the
daemon's idle schedule (`poll_batches`): its polls share worker-thread hops with other idle tables', and its task
wakes only when a poll finds work or fails. Passes take a slot of the daemon's capacity in priority order."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio

from tableservice.config import DaemonConfig
from tableservice.errors import RetryableError, TableServiceError
from tableservice.metrics import Metrics
from tableservice.service.poll_batches import PollBatches, Polled
from tableservice.service.priority import PriorityKey, PriorityPolicy
from tableservice.service.quotas import GroupCapacity
from tableservice.service.table_state import Failure, TableHealth, TableStatus
from tableservice.service.table_worker import TableWorker
from tableservice.service.tsm import TableServiceManager

log = logging.getLogger("tableservice.service.daemon")


@dataclass
class TableTask:
    """One served table: its worker, the scope its task runs in, what wakes it."""

    worker: TableWorker
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    wake: anyio.Event = field(default_factory=anyio.Event)
    """Set to start the table's next pass now: a stop, or a request through the table-service-manager endpoint."""
    idle: bool = False
    """Its last poll found nothing to do: it parks in the idle schedule (`PollBatches.park`) until a poll finds
    work. A table's first poll, and a busy table's, take a hop of their own."""
    quarantine_ends: float | None = None
    """While quarantined: the end, on the monotonic clock (the status shows the wall-clock time; a clock stepped
    back must not lengthen the quarantine)."""


class TableLoop:
    """The per-table loop of `Daemon` (which holds these attributes)."""

    config: DaemonConfig
    metrics: Metrics
    priority: PriorityPolicy
    capacity: GroupCapacity
    polls: PollBatches
    tsm: TableServiceManager | None

    @property
    def stopping(self) -> bool:
        raise NotImplementedError

    def _next_delay(self, worker: TableWorker) -> float:
        service = self.config.service
        failures = worker.status.consecutive_failures
        if failures:
            retry = service.retry
            return float(min(retry.max_backoff_seconds, retry.initial_backoff_seconds * 2 ** (failures - 1)))
        jitter = service.poll_jitter
        return service.poll_interval_seconds * (1 + random.uniform(-jitter, jitter))

    async def _serve_table(self, task: TableTask) -> None:
        worker = task.worker
        with task.scope:
            delay = 0.0
            while not self.stopping:
                due_at = time.monotonic() + delay
                polled: Polled[tuple[bool, PriorityKey]] | None = None
                if task.idle:
                    poll = partial(self._poll_in_thread, worker)
                    polled = await self.polls.park(due_at, poll, partial(self._settle_idle, worker), task.wake)
                else:
                    with anyio.move_on_after(delay):
                        await task.wake.wait()
                task.wake = anyio.Event()  # a wake during the pass ended this wait at once; none is lost
                if self.stopping:
                    return
                status = worker.status
                if status.quarantined_until is not None:
                    delay = self._quarantine_left(task)
                    if delay > 0:
                        continue
                    status.quarantined_until = task.quarantine_ends = None
                    self.metrics.set_quarantined(worker.label, False)
                if self.tsm is not None:  # instants Hudi writers asked for go first
                    await self.tsm.run_queued(worker, self.capacity, lambda: self.stopping, self.priority.group(worker))
                task.idle = await self._one_pass(worker, due_at, polled)
                self._quarantine_left(task)  # a quarantine the pass began: its end counted from now
                delay = self._next_delay(worker)

    @staticmethod
    def _quarantine_left(task: TableTask) -> float:
        """Seconds left of the table's quarantine (0 when none). The status shows its end as wall-clock time; the
        wait counts on the monotonic clock from when it was first seen, so a clock stepped back does not lengthen
        it."""
        until = task.worker.status.quarantined_until
        if until is None:
            task.quarantine_ends = None  # lifted, whoever lifted it: the next quarantine counts afresh
            return 0.0
        if task.quarantine_ends is None:
            task.quarantine_ends = time.monotonic() + max(0.0, until - time.time())
        return task.quarantine_ends - time.monotonic()

    def _settle_idle(self, worker: TableWorker, polled: tuple[bool, PriorityKey]) -> float | None:
        """A parked table's poll, in the event loop: when it found nothing to do (and nothing else asks for the
        table's task), the table's outcome is recorded as any idle poll's and it stays parked until the returned
        time; else None: the poll goes to the table's task."""
        due, _ = polled
        if due or self.stopping or worker.status.quarantined_until is not None:
            return None
        if self.tsm is not None and self.tsm.has_queued(worker):
            return None
        self._succeeded(worker)
        return time.monotonic() + self._next_delay(worker)

    def _poll_in_thread(self, worker: TableWorker, due_at: float | None) -> tuple[bool, PriorityKey]:
        """Poll (noting how late the poll started after it was due), say whether a pass is needed, and the
        table's priority key: most at risk of breaching an SLO first, then oldest pending work
        (`service/priority.py`). One worker thread for all three."""
        if due_at is not None:
            lag = max(0.0, time.monotonic() - due_at)
            status = worker.status
            status.update(poll_lag_seconds=round(lag, 3), max_poll_lag_seconds=max(status.max_poll_lag_seconds, lag))
            self.metrics.poll_lag(worker.label, lag)
        worker.poll()
        due = worker.needs_pass()
        return due, self.priority.assess(worker, due)

    async def _one_pass(
        self, worker: TableWorker, due_at: float | None = None, polled: Polled[tuple[bool, PriorityKey]] | None = None
    ) -> bool:
        """Poll the table (unless the idle schedule `polled` it) and run a pass when one is needed; whether the poll
        found it idle (no pass needed)."""
        status = worker.status
        due = False
        try:
            if polled is not None:
                due, key = polled.get()
            else:
                due, key = await self.polls.poll(partial(self._poll_in_thread, worker, due_at))
            failed: list[Failure] = []
            if due and not self.stopping and not self.priority.backing_off(worker):
                async with self.capacity.slot(key, self.priority.group(worker)):
                    if self.stopping:
                        return False
                    try:
                        result = await anyio.to_thread.run_sync(self._pass_in_thread, worker)
                    finally:
                        self.priority.after_pass(worker)
                # Permanent failures of an action are held back by the worker: the table goes on being served.
                failed = result.failed_not_held
        except TableServiceError as e:
            failed = [Failure("", e)]
            self.metrics.table_error(worker.label, e)
            log.error("table error: %s", e, extra={"table": worker.label})
        except Exception as e:  # a bug must not stop the other tables; retried with back-off like a retryable error
            failed = [Failure("", RetryableError(f"unexpected {type(e).__name__}: {e}", table=worker.label))]
            self.metrics.table_error(worker.label, e)
            log.exception("unexpected error", extra={"table": worker.label})
        if not failed:
            self._succeeded(worker)
            return not due
        error = str(failed[0].error)
        status.update(consecutive_failures=status.consecutive_failures + 1, last_error=error)
        status.set_health(TableHealth.FAILING, error)
        retry = self.config.service.retry
        permanent = next((f.error for f in failed if not f.error.retryable), None)
        if permanent is not None or status.consecutive_failures >= retry.quarantine_after_failures:
            # A permanent error of the table itself (its hoodie.properties, a plan that cannot be made) fails again
            # until someone changes the input: quarantined at once. Retryable ones after repeated failures.
            if permanent is not None:
                why = f"permanent error: {permanent.problem}"
            else:
                why = f"{status.consecutive_failures} failures in a row"
            status.update(quarantined_until=time.time() + retry.quarantine_seconds)
            status.set_health(TableHealth.QUARANTINED, why)
            self.metrics.set_quarantined(worker.label, True)
            log.error("quarantined for %.0fs: %s", retry.quarantine_seconds, why, extra={"table": worker.label})
        return False

    def _succeeded(self, worker: TableWorker) -> None:
        status = worker.status
        held = _held_reason(status)
        status.update(consecutive_failures=0, last_error=held)
        status.set_health(TableHealth.DEGRADED if held else TableHealth.OK, held)

    def _pass_in_thread(self, worker: TableWorker) -> Any:
        stopping: Callable[[], bool] = lambda: self.stopping  # noqa: E731
        return worker.run_pass(stop=stopping, reload=False)


def _held_reason(status: TableStatus) -> str | None:
    """Why the table is degraded: a service quarantined after it found damaged data, or a held-back action."""
    for service, info in sorted(status.quarantined_services.items()):
        return f"{service} quarantined: {info['reason']}"
    return str(status.held_back[0]["error"]) if status.held_back else None
