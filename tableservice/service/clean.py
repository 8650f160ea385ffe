"""Clean as a table service: pending clean plans run oldest first; a new plan is written when the cleaner's policy
says enough has changed (planning: `tableservice.planning.clean`, execution: `tableservice.hudi.action.clean`)."""

from __future__ import annotations

from tableservice.hudi.action.clean import execute_clean, schedule_clean
from tableservice.hudi.table.hudi_table import TableSnapshot
from tableservice.hudi.timeline.instant import Action, Instant
from tableservice.locks import LockHandle
from tableservice.planning.clean.plan import CleanPlanner, clean_due
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.service.actions import TableContext
from tableservice.service.protocol import Outcome, ServiceBase


class CleanService(ServiceBase[CleanPolicy]):
    name = "clean"

    def pending(self, snapshot: TableSnapshot) -> list[Instant]:
        return list(snapshot.timeline.pending_of(Action.CLEAN))

    def due(self, snapshot: TableSnapshot) -> bool:
        if not self.settings.policy.enabled:
            return False
        return clean_due(snapshot.table, snapshot.timeline, self.settings.policy)[0]

    def schedule(self, ctx: TableContext) -> Instant | None:
        return schedule_clean(ctx.table, CleanPlanner(self.settings.policy), lock=ctx.lock_factory(), force=True)

    def execute(self, ctx: TableContext, instant: Instant, lease: LockHandle) -> Outcome:
        metadata = execute_clean(ctx.table, instant, lock=ctx.lock_factory(), lease=lease, require_pending=True)
        return Outcome(self.name, instant, metadata)
