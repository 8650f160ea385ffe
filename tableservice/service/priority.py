"""The daemon's priority policy: which table's pass takes a free action slot first, which group's quota it counts
against, and when a table backs off because its lock waits rose.

- Order: a table with SLO targets (`slo`) is keyed by its least slack, the time to breach of a target that a
  service with work in the pass fixes, minus that service's expected duration (the mean of the table's last
  completed actions of the service in the history, else `DEFAULT_ACTION_SECONDS`); then by its oldest pending
  instant. A table without targets has infinite slack: oldest pending work first, as before.
- Groups (`service.groups`): a table's pass holds one of its group's slots as well as a global one.
- Back-off (`service.backoff`): the lock waits of the daemon's own actions on a table are recorded as they happen
  (`LockWaits`, fed by the worker's lock hooks); after a pass whose longest wait exceeded `lock_wait_seconds`, the
  table's next action waits `initial_delay_seconds`, doubled each time again (at most `max_delay_seconds`); a pass
  whose waits stay below resets it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from tableservice.config import BackoffSettings, GroupSettings, group_of
from tableservice.errors import TableServiceError
from tableservice.metrics import Metrics
from tableservice.planning.slo import (
    DEFAULT_ACTION_SECONDS,
    NO_PENDING,
    DueWork,
    expected_duration,
    risk_key,
    snapshot_readings,
)
from tableservice.service.history import ActionHistory, ActionOutcome

if TYPE_CHECKING:
    from tableservice.service.table_worker import TableWorker

log = logging.getLogger(__name__)
HISTORY_ROWS = 200  # the table's newest history rows read for its expected durations
PriorityKey = tuple[float, str]


class LockWaits:
    """The lock waits of one table's actions since the last `take` (thread-safe; worker threads add)."""

    def __init__(self) -> None:
        self._waits: list[float] = []
        self._guard = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._guard:
            self._waits.append(seconds)

    def take(self) -> list[float]:
        with self._guard:
            waits, self._waits = self._waits, []
        return waits


class _Backoff:
    def __init__(self) -> None:
        self.times = 0
        self.until = 0.0


class PriorityPolicy:
    def __init__(
        self,
        *,
        history: ActionHistory | None,
        metrics: Metrics | None,
        backoff: BackoffSettings,
        groups: dict[str, GroupSettings],
    ) -> None:
        self.history = history
        self.metrics = metrics
        self.backoff = backoff
        self.groups = groups
        self._backoffs: dict[str, _Backoff] = defaultdict(_Backoff)

    def configure(
        self, *, history: ActionHistory | None, backoff: BackoffSettings, groups: dict[str, GroupSettings]
    ) -> None:
        self.history, self.backoff, self.groups = history, backoff, groups

    def group_limits(self) -> dict[str, int]:
        return {name: g.max_concurrent_actions for name, g in self.groups.items()}

    def group(self, worker: TableWorker) -> str | None:
        found = group_of(self.groups, worker.label)
        return found[0] if found is not None else None

    # --- order ---------------------------------------------------------------------------------------------

    def assess(self, worker: TableWorker, due: bool) -> PriorityKey:
        """Blocking (a worker thread): the table's SLO readings on the last poll's snapshot (into its status and
        the metrics), and its priority key when `due`."""
        status = worker.status
        oldest = min((str(p["instant"]) for p in status.pending), default=NO_PENDING)
        targets = worker.settings.slo
        if not targets or worker.snapshot is None:
            if status.slo:
                status.update(slo=[])
            return (math.inf, oldest)
        snapshot = worker.snapshot
        services = worker.services()
        pending = {svc.name: svc.pending(snapshot) for svc in services if svc.plans_on_timeline}
        try:
            readings = snapshot_readings(
                snapshot,
                targets,
                now=time.time(),
                pending=pending,
                small_file_limit=worker.settings.clustering.policy.small_file_limit,
            )
        except TableServiceError as e:  # an undecodable commit: the table is served in oldest-first order
            log.warning("SLO readings failed: %s", e, extra={"table": worker.label})
            return (math.inf, oldest)
        status.update(slo=[r.to_json() for r in readings])
        if self.metrics is not None:
            for target in self.metrics.slo.report(worker.label, readings):
                reading = next(r for r in readings if r.target.value == target)
                log.warning(
                    "SLO %s breached: %g > %g (%s)",
                    target,
                    reading.value,
                    reading.limit,
                    reading.basis,
                    extra={"table": worker.label},
                )
        if not due:
            return (math.inf, oldest)
        with status.guard():
            due_services = {name for name, d in status.due.items() if d.get("due")}
        working = {svc.name for svc in services if pending.get(svc.name)} | due_services
        work = DueWork(worker.label, readings, frozenset(working), oldest)
        return risk_key(work, self.expected_durations(worker.label))

    def expected_durations(self, table: str) -> dict[str, float]:
        """Per service: the mean duration of the table's last completed actions (history), when it has any."""
        if self.history is None:
            return {}
        try:
            records = self.history.query(table=table, limit=HISTORY_ROWS)
        except TableServiceError as e:
            log.warning("cannot read the action history for expected durations: %s", e, extra={"table": table})
            return {}
        durations: dict[str, list[float]] = defaultdict(list)
        for record in records:  # newest first
            if record.outcome is ActionOutcome.COMPLETED:
                durations[record.action].append(record.ended - record.started)
        return {action: expected_duration(d, DEFAULT_ACTION_SECONDS) for action, d in durations.items()}

    # --- back-off on lock waits ------------------------------------------------------------------------------

    def backing_off(self, worker: TableWorker, now: float | None = None) -> bool:
        """Whether the table's next action must still wait (its lock waits rose); logs the remaining delay."""
        state = self._backoffs.get(worker.label)
        if state is None or not state.until:
            return False
        now = time.time() if now is None else now
        if now >= state.until:
            return False
        log.info(
            "backing off after long lock waits: next action in %.0fs", state.until - now, extra={"table": worker.label}
        )
        return True

    def after_pass(self, worker: TableWorker, now: float | None = None) -> None:
        """Look at the lock waits of the pass that just ended: back the table off, or reset its back-off."""
        waits = worker.lock_waits.take()
        threshold = self.backoff.lock_wait_seconds
        if threshold is None or not waits:
            return
        now = time.time() if now is None else now
        state = self._backoffs[worker.label]
        longest = max(waits)
        if longest <= threshold:
            if state.times:
                log.info("lock waits back to normal: back-off ended", extra={"table": worker.label})
            state.times, state.until = 0, 0.0
            worker.status.update(backoff_until=None)
            return
        state.times += 1
        delay = min(self.backoff.max_delay_seconds, self.backoff.initial_delay_seconds * 2 ** (state.times - 1))
        state.until = now + delay
        worker.status.update(backoff_until=state.until)
        log.warning(
            "lock wait %.1fs exceeded service.backoff.lock_wait_seconds (%gs), %d time(s) in a row: the next action "
            "waits %.0fs so the table's writers get the lock",
            longest,
            threshold,
            state.times,
            delay,
            extra={"table": worker.label},
        )

    def forget(self, label: str) -> None:
        self._backoffs.pop(label, None)
