"""The daemon's priority policy: which table's pass takes a free action slot first, which group's quota it counts
against, and when a table backs off because its lock waits rose.

- Order: a waiting table is keyed by the moment its pass should start by: now plus its least slack (the time to
  breach of a target that a service with work in the pass fixes, minus that service's expected duration: the mean
  of the table's last completed actions of the service in the history, else `DEFAULT_ACTION_SECONDS`), or its
  implicit deadline, `service.wait_budget_seconds` after its due work began to wait (its oldest pending plan, or
  when a service was first found due), whichever is earlier; then by its oldest pending instant. So a table without
  targets moves up as it waits and never starves behind tables with targets.
- Groups (`service.groups`): a table's pass holds one of its group's slots as well as a global one.
- Back-off (`service.backoff`): the lock waits of the daemon's own actions on a table are recorded as they happen
  (`LockWaits`, fed by the worker's lock hooks, a lock timeout as the longest wait of all); after a pass whose
  longest wait exceeded `lock_wait_seconds` (or that timed out on the lock), the
  table's next action waits `initial_delay_seconds`, doubled each time again (at most `max_delay_seconds`); a pass
  whose waits stay below resets it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from tableservice.config import BackoffSettings, GroupSettings, group_of
from tableservice.errors import TableServiceError
from tableservice.hudi.table.hudi_table import TableSnapshot
from tableservice.hudi.timeline.instant import Instant, timeline_timezone
from tableservice.metrics import Metrics
from tableservice.planning.slo import (
    DEFAULT_ACTION_SECONDS,
    DEFAULT_WAIT_BUDGET_SECONDS,
    NO_PENDING,
    DueWork,
    SloReading,
    SloTargets,
    expected_duration,
    risk_key,
    snapshot_readings,
    waiting_since,
)
from tableservice.service.history import ActionHistory, ActionOutcome

if TYPE_CHECKING:
    from tableservice.service.table_worker import TableWorker

log = logging.getLogger(__name__)
HISTORY_ROWS = 200  # the table's newest history rows read for its expected durations
PriorityKey = tuple[float, str]


class LockWaits:
    """The lock waits of one table's actions since the last `take`, and the lock timeouts (the lock was not
    acquired within the table's lock timeout: as long a wait as there can be). Thread-safe; worker threads add."""

    def __init__(self) -> None:
        self._waits: list[float] = []
        self._timeouts: list[float] = []
        self._guard = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._guard:
            self._waits.append(seconds)

    def add_timeout(self, seconds: float) -> None:
        """A lock acquisition gave up after `seconds`."""
        with self._guard:
            self._timeouts.append(seconds)

    def take(self) -> tuple[list[float], list[float]]:
        """(waits, timeouts) since the last call."""
        with self._guard:
            waits, timeouts = self._waits, self._timeouts
            self._waits, self._timeouts = [], []
        return waits, timeouts


def expected_durations(history: ActionHistory | None, table: str) -> dict[str, float]:
    """Per service: the mean duration of the table's last completed actions (history), when it has any."""
    if history is None:
        return {}
    try:
        records = history.query(table=table, limit=HISTORY_ROWS)
    except TableServiceError as e:
        log.warning("cannot read the action history for expected durations: %s", e, extra={"table": table})
        return {}
    durations: dict[str, list[float]] = defaultdict(list)
    for record in records:  # newest first
        if record.outcome is ActionOutcome.COMPLETED:
            durations[record.action].append(record.ended - record.started)
    return {action: expected_duration(d, DEFAULT_ACTION_SECONDS) for action, d in durations.items()}


class TableSlo:
    """One table's SLO readings (read once per snapshot) and the expected durations of its services (read from the
    history again after each action), for the worker's due decisions and the daemon's order."""

    def __init__(self) -> None:
        self._readings: tuple[TableSnapshot, list[SloReading]] | None = None
        self._expected: tuple[ActionHistory | None, dict[str, float]] | None = None  # by the history read

    def readings(
        self,
        snapshot: TableSnapshot,
        targets: SloTargets,
        pending: Callable[[], Mapping[str, Sequence[Instant]]],
        *,
        small_file_limit: int,
        label: str,
    ) -> list[SloReading]:
        if not targets:
            return []
        if self._readings is not None and self._readings[0] is snapshot:
            return self._readings[1]
        try:
            found = snapshot_readings(
                snapshot, targets, now=time.time(), pending=pending(), small_file_limit=small_file_limit
            )
        except TableServiceError as e:  # an undecodable commit: the table is ordered by its implicit deadline
            log.warning("SLO readings failed: %s", e, extra={"table": label})
            found = []
        self._readings = (snapshot, found)
        return found

    def expected(self, history: ActionHistory | None, table: str) -> dict[str, float]:
        """Read again after a completed action, or from another history (a reload replaced it)."""
        if self._expected is None or self._expected[0] is not history:
            self._expected = (history, expected_durations(history, table))
        return self._expected[1]

    def action_completed(self) -> None:
        self._expected = None

    def forget(self) -> None:
        """New settings: readings of the old targets no longer hold."""
        self._readings = None


class _Backoff:
    def __init__(self) -> None:
        self.times = 0
        self.until = 0.0


class PriorityPolicy:
    def __init__(
        self,
        *,
        metrics: Metrics | None,
        backoff: BackoffSettings,
        groups: dict[str, GroupSettings],
        wait_budget: float = DEFAULT_WAIT_BUDGET_SECONDS,
    ) -> None:
        self.metrics = metrics
        self.backoff = backoff
        self.groups = groups
        self.wait_budget = wait_budget
        self._backoffs: dict[str, _Backoff] = defaultdict(_Backoff)

    def configure(
        self,
        *,
        backoff: BackoffSettings,
        groups: dict[str, GroupSettings],
        wait_budget: float = DEFAULT_WAIT_BUDGET_SECONDS,
    ) -> None:
        self.backoff, self.groups, self.wait_budget = backoff, groups, wait_budget

    def group_limits(self) -> dict[str, int]:
        return {name: g.max_concurrent_actions for name, g in self.groups.items()}

    def group(self, worker: TableWorker) -> str | None:
        found = group_of(self.groups, worker.label)
        return found[0] if found is not None else None

    # --- order ---------------------------------------------------------------------------------------------

    def assess(self, worker: TableWorker, due: bool, now: float | None = None) -> PriorityKey:
        """Blocking (a worker thread): the table's SLO readings on the last poll's snapshot (into its status and
        the metrics), and its priority key when `due`: the moment its pass should start by (`risk_key`)."""
        status = worker.status
        oldest = min((str(p["instant"]) for p in status.pending), default=NO_PENDING)
        now = time.time() if now is None else now
        snapshot = worker.snapshot
        if snapshot is None:
            return (now + self.wait_budget, oldest)
        readings = worker.slo_readings(snapshot)
        if status.slo or readings:
            status.update(slo=[r.to_json() for r in readings])
        if self.metrics is not None and readings:
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
        executing = [svc for svc in worker.services() if svc.settings.execute and svc.plans_on_timeline]
        pending = {svc.name: svc.pending(snapshot) for svc in executing}
        with status.guard():
            due_services = {name for name, d in status.due.items() if d.get("due")}
        working = {name for name, instants in pending.items() if instants} | due_services
        tz = timeline_timezone(snapshot.config.timezone_name)
        since = waiting_since((i for instants in pending.values() for i in instants), tz, worker.found_due_at)
        work = DueWork(worker.label, readings, frozenset(working), oldest, since)
        return risk_key(work, worker.expected_durations(), now=now, budget=self.wait_budget)

    # --- back-off on lock waits ------------------------------------------------------------------------------

    def backing_off(self, worker: TableWorker, now: float | None = None) -> bool:
        """Whether the table's next action must still wait (its lock waits rose); logs the remaining delay. `now`:
        the monotonic clock's time."""
        state = self._backoffs.get(worker.label)
        if state is None or not state.until:
            return False
        now = time.monotonic() if now is None else now
        if now >= state.until:
            return False
        log.info(
            "backing off after long lock waits: next action in %.0fs", state.until - now, extra={"table": worker.label}
        )
        return True

    def after_pass(self, worker: TableWorker, now: float | None = None) -> None:
        """Look at the lock waits of the pass that just ended: back the table off, or reset its back-off. `now`: the
        monotonic clock's time (the status shows the end as wall-clock time)."""
        waits, timeouts = worker.lock_waits.take()
        threshold = self.backoff.lock_wait_seconds
        if threshold is None or not (waits or timeouts):
            return
        now = time.monotonic() if now is None else now
        state = self._backoffs[worker.label]
        longest = max(waits, default=0.0)
        if not timeouts and longest <= threshold:
            if state.times:
                log.info("lock waits back to normal: back-off ended", extra={"table": worker.label})
            state.times, state.until = 0, 0.0
            worker.status.update(backoff_until=None)
            return
        state.times += 1
        delay = min(self.backoff.max_delay_seconds, self.backoff.initial_delay_seconds * 2 ** (state.times - 1))
        state.until = now + delay
        worker.status.update(backoff_until=time.time() + delay)
        what = (
            f"lock not acquired within {max(timeouts):.1f}s ({len(timeouts)} timeout(s))"
            if timeouts
            else f"lock wait {longest:.1f}s exceeded service.backoff.lock_wait_seconds ({threshold:g}s)"
        )
        log.warning(
            "%s, %d time(s) in a row: the next action waits %.0fs so the table's writers get the lock",
            what,
            state.times,
            delay,
            extra={"table": worker.label},
        )

    def forget(self, label: str) -> None:
        self._backoffs.pop(label, None)
