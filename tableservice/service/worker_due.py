"""What the table worker decides on every poll before a pass: whether each service should plan now (its trigger,
an SLO target about to breach, or nothing to do since planning last found nothing), recorded per service in
/status `due`. A mixin of `TableWorker` (`service/table_worker.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tableservice.hudi.table.hudi_table import TableSnapshot
from tableservice.hudi.timeline.instant import Instant
from tableservice.planning.due import Due
from tableservice.planning.slo import DEFAULT_ACTION_SECONDS, SloReading, due_with_slo
from tableservice.service.history import ActionHistory
from tableservice.service.priority import TableSlo
from tableservice.service.protocol import TableService
from tableservice.service.table_state import TableSettings, TableStatus


class DueDecisions:
    """The due decisions of one table's worker; the worker owns the state they use."""

    if TYPE_CHECKING:
        status: TableStatus
        history: ActionHistory | None
        _services: list[TableService]
        _slo: TableSlo
        _nothing_at: dict[str, str]

        @property
        def settings(self) -> TableSettings: ...

        @property
        def label(self) -> str: ...

        def _snapshot(self) -> TableSnapshot: ...

        def _quarantined(self, service: str) -> bool: ...

    def _schedule_due(self, svc: TableService, snapshot: TableSnapshot, *, listing: bool = True) -> bool:
        """Asked on every poll; what it found (and why) is what /status shows per service (`due`)."""
        found = self._due_now(svc, snapshot, listing)
        if found is not None:
            with self.status.guard():
                self.status.due[svc.name] = found.to_json()
        return bool(found)

    def _due_now(self, svc: TableService, snapshot: TableSnapshot, listing: bool = True) -> Due | None:
        if not svc.applies(snapshot):
            return None
        if self._quarantined(svc.name):
            return Due(False, "quarantined for this table (see quarantined_services)")
        if not svc.settings.schedule:
            return Due(False, "scheduling is off for this service (schedule: false); plans from elsewhere still run")
        if not self._worth_planning(svc.name, snapshot):
            return Due(False, "its trigger was due, but planning found nothing to do; asked again after a new commit")
        trigger = svc.due(snapshot, listing=listing)
        if trigger.due or not self.settings.slo:
            return trigger
        # A target about to breach makes the service that fixes it due, whatever its trigger says; not while a plan
        # of the service is pending (running it is the fix, and it runs first).
        readings = [r for r in self.slo_readings(snapshot) if r.service == svc.name]
        if not readings or svc.pending(snapshot):
            return trigger
        expected = self.expected_durations().get(svc.name, DEFAULT_ACTION_SECONDS)
        return due_with_slo(trigger, readings, svc.name, expected, self.settings.slo_margin_s)

    def slo_readings(self, snapshot: TableSnapshot | None = None) -> list[SloReading]:
        """The table's SLO readings on `snapshot` (the last poll's), read once per snapshot; none without targets or
        when a commit's metadata does not decode (logged)."""
        snapshot = snapshot if snapshot is not None else self._snapshot()
        planning = [svc for svc in self._services if svc.plans_on_timeline and svc.applies(snapshot)]
        return self._slo.readings(
            snapshot,
            self.settings.slo,
            lambda: {svc.name: svc.pending(snapshot) for svc in planning},
            small_file_limit=self.settings.clustering.policy.small_file_limit,
            label=self.label,
        )

    def expected_durations(self) -> dict[str, float]:
        """Per service, the mean duration of the table's last completed actions in the history."""
        return self._slo.expected(self.history, self.label)

    @staticmethod
    def _timeline_mark(snapshot: TableSnapshot) -> str:
        """A mark of the completed timeline that moves with any change to it: a new write, or a clean, rollback or
        removed savepoint that frees a bound."""
        done = snapshot.timeline.completed().instants
        return f"{len(done)}:{done[-1].requested_time}.{done[-1].action.value}" if done else ""

    def _planned(self, service: str, scheduled: Instant | None, snapshot: TableSnapshot) -> None:
        """After a due trigger: remember that planning found nothing to do on `snapshot` (the timeline it planned
        on), so that an idle table is not planned again (a listing) on every poll while its trigger stays due. Only a
        due trigger may record this: a trigger that is not due yet (elapsed time) must be asked again."""
        if scheduled is None:
            self._nothing_at[service] = self._timeline_mark(snapshot)
        else:
            self._nothing_at.pop(service, None)

    def _worth_planning(self, service: str, snapshot: TableSnapshot) -> bool:
        return self._nothing_at.get(service) != self._timeline_mark(snapshot)
