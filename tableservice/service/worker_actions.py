"""How the table worker runs one action and records how it ended: a typed failure goes to the pass result, the
metrics, the log and the action history, and the pass goes on; a permanent failure holds the instant back (or the
whole service, for damaged committed data). A mixin of `TableWorker` (`service/table_worker.py`)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar, cast

from tableservice.errors import (
    ActionAbandonedError,
    InstantNotPendingError,
    SparkUnavailableError,
    TableServiceError,
)
from tableservice.metrics import Metrics
from tableservice.service.history import ActionHistory, ActionOutcome, action_record
from tableservice.service.holds import SERVICE_WIDE, Holds
from tableservice.service.priority import TableSlo
from tableservice.service.protocol import Outcome, TableService
from tableservice.service.table_state import Failure, PassResult, TableSettings, TableStatus
from tableservice.storage.requests import counting

log = logging.getLogger("tableservice.service.table_worker")
T = TypeVar("T")


class ActionGuard:
    """The worker's action runs and holds; the worker owns the state they use."""

    if TYPE_CHECKING:
        status: TableStatus
        metrics: Metrics | None
        history: ActionHistory | None
        _services: list[TableService]
        _held: Holds
        _slo: TableSlo
        _spark_seconds: float

        @property
        def settings(self) -> TableSettings: ...

        @property
        def label(self) -> str: ...

    def _hold(self, action: str, instant: str, error: TableServiceError) -> None:
        """A permanent failure of one action: not retried until the hold runs out, the settings change or the daemon
        restarts; the table's other work goes on. Damaged committed data holds the whole service for the table
        (`holds`). Shown in /status (`held_back`, `quarantined_services`) and the metrics."""
        hold_s = self.settings.permanent_failure_hold_s
        held = self._held.add(action, instant, error, hold_s)
        what = "quarantined for this table" if held == SERVICE_WIDE else "not retried"
        log.error(
            "%s failed permanently, %s for %.0fs: %s",
            action,
            what,
            hold_s,
            error,
            extra={"table": self.label, "instant": getattr(error, "instant_time", instant)},
        )
        self._report_held()

    def _report_held(self) -> None:
        """Into /status and the metrics; on a change only (and once at first: every service at 0)."""
        self._held_reported = True
        self.status.held_back = self._held.held_back()
        self.status.quarantined_services = self._held.quarantined_services()
        if self.metrics is not None:
            for svc in self._services:
                self.metrics.set_held_back(self.label, svc.name, self._held.count(svc.name))
                self.metrics.set_service_quarantined(self.label, svc.name, self._held.service_held(svc.name))

    def _guarded(self, action: str, instant: str, result: PassResult, fn: Callable[[], T]) -> T | None:
        """Run one action: a typed failure is recorded (result, metrics, log, history) and the pass goes on. A
        permanent failure of an action on a pending instant holds that instant back (`_hold`)."""
        started, started_at = time.monotonic(), time.time()
        self._spark_seconds = 0.0
        try:
            with counting() as made_here:
                out = fn()
            out = _with_requests(out, made_here.counts())
        except InstantNotPendingError as e:  # another process got there first
            log.info("%s skipped: %s", action, e.problem, extra={"table": self.label, "instant": instant})
            self._remember(action, instant, started_at, ActionOutcome.SKIPPED, error=str(e))
            return None
        except SparkUnavailableError as e:  # Spark's failure, not the table's: only Spark actions wait for it
            if self.metrics is not None:
                self.metrics.action_failed(self.label, action)
            log.warning("%s waits for spark: %s", action, e.problem, extra={"table": self.label, "instant": instant})
            self._remember(action, instant, started_at, ActionOutcome.FAILED, error=str(e))
            result.failed.append(Failure(instant, e, action))  # reported; the daemon does not back off
            return None
        except ActionAbandonedError as e:  # optimistic concurrency at work, not a failure of the table
            if self.metrics is not None:
                self.metrics.action_abandoned(self.label, action)
            log.warning("%s abandoned: %s", action, e, extra={"table": self.label, "instant": instant})
            self._remember(action, instant, started_at, ActionOutcome.ABANDONED, error=str(e))
            return None
        except TableServiceError as e:
            failure = Failure(instant, e, action)
            result.failed.append(failure)
            if self.metrics is not None:
                self.metrics.action_failed(self.label, action)
                self.metrics.table_error(self.label, e)
            held = not e.retryable and bool(instant)
            self._remember(
                action, instant, started_at, ActionOutcome.HELD_BACK if held else ActionOutcome.FAILED, error=str(e)
            )
            if held:
                result.held_back.append(failure)
                self._hold(action, instant, e)
            else:
                log.error("%s failed: %s", action, e, extra={"table": self.label, "instant": instant})
            return None
        except Exception as e:  # a bug: the daemon backs the table off; the history still says what happened
            self._remember(action, instant, started_at, ActionOutcome.FAILED, error=f"{type(e).__name__}: {e}")
            raise
        if self.metrics is not None:
            self.metrics.action_completed(self.label, action, duration_seconds=time.monotonic() - started)
        self._remember(action, instant, started_at, ActionOutcome.COMPLETED, out)
        return out

    def _remember(
        self, action: str, instant: str, started: float, outcome: ActionOutcome, done: object = None, error: str = ""
    ) -> None:
        if outcome is ActionOutcome.COMPLETED:
            self._slo.action_completed()  # a new duration to average
        if self.history is not None:  # never raises: a history that cannot be written is a warning
            record = action_record(
                self.label, action, instant, started, outcome, done, error or None, spark_seconds=self._spark_seconds
            )
            self.history.record(record)


def _with_requests(out: T, made_here: Mapping[str, int]) -> T:
    """An action's outcome with the object-store requests made in this process added to those its Spark tasks
    reported (`Outcome.requests`, lower-case kinds). The tasks count theirs apart (`counting(isolated=True)`), so
    nothing is counted twice, wherever they ran."""
    if not isinstance(out, Outcome) or not made_here:
        return out
    total = Counter({k.lower(): n for k, n in out.requests.items()})
    total.update({k.lower(): n for k, n in made_here.items()})
    return cast(T, replace(out, requests=dict(sorted(total.items()))))
