"""Clean as a table service: pending clean plans run oldest first; a new plan is written when the cleaner's policy
says enough has changed (planning: `tableservice.planning.clean`, execution: `tableservice.hudi.action.clean`)."""

from __future__ import annotations

from tableservice.hudi.action.clean import execute_clean, planned_file_sizes, schedule_clean
from tableservice.hudi.table.hudi_table import TableSnapshot
from tableservice.hudi.timeline.instant import Action, Instant
from tableservice.locks import LockHandle
from tableservice.planning.clean.plan import CleanPlanner, clean_due
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.due import Due
from tableservice.service.actions import TableContext
from tableservice.service.protocol import Outcome, ServiceBase


class CleanService(ServiceBase[CleanPolicy]):
    name = "clean"

    def pending(self, snapshot: TableSnapshot) -> list[Instant]:
        return list(snapshot.timeline.pending_of(Action.CLEAN))

    def due(self, snapshot: TableSnapshot, *, listing: bool = True) -> Due:
        return Due.of(clean_due(snapshot.table, snapshot.timeline, self.settings.policy))

    def schedule(self, ctx: TableContext) -> Instant | None:
        return schedule_clean(ctx.table, CleanPlanner(self.settings.policy), lock=ctx.lock_factory(), force=True)

    def execute(self, ctx: TableContext, instant: Instant, lease: LockHandle) -> Outcome:
        sizes = planned_file_sizes(ctx.table, instant)
        metadata = execute_clean(ctx.table, instant, lock=ctx.lock_factory(), lease=lease, require_pending=True)
        deleted = [(p, f) for p, m in metadata.partition_metadata.items() for f in m.success_delete_files]
        return Outcome(
            self.name,
            instant,
            metadata,
            files_deleted=metadata.total_files_deleted,
            bytes_deleted=sum(sizes.get(f, 0) for f in deleted),
        )
