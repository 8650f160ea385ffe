"""Archival as a table service. It has no plan on the timeline: scheduling selects what the policy would archive
on the pass's timeline (nothing written), and execution archives under the table lock what the policy selects on
the timeline re-read there. One lease, `archival`, keeps replicas from archiving the same table at once."""

from __future__ import annotations

from tableservice.hudi.action.archival import archive
from tableservice.hudi.table.hudi_table import TableSnapshot
from tableservice.hudi.timeline.instant import Instant
from tableservice.locks import LockHandle
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.due import Due
from tableservice.service.actions import TableContext
from tableservice.service.protocol import Outcome, ServiceBase


class ArchivalService(ServiceBase[ArchivalPolicy]):
    name = "archival"
    plans_on_timeline = False

    def pending(self, snapshot: TableSnapshot) -> list[Instant]:
        return []

    def due(self, snapshot: TableSnapshot, *, listing: bool = True) -> Due:
        count, most = len(snapshot.timeline.completed_writes()), self.settings.policy.max_commits
        verdict = "due" if count > most else "not due"
        return Due(
            count > most, f"{verdict}: {count} completed commits on the active timeline, hoodie.keep.max.commits={most}"
        )

    def schedule(self, ctx: TableContext) -> Instant | None:
        """The newest instant the policy would archive now, or None when its bounds hold everything back."""
        selected = self.settings.policy.instants_to_archive(ctx.table, ctx.table.timeline())
        return max(selected, key=lambda i: (i.requested_time, i.sort_key)) if selected else None

    def lease_name(self, instant: Instant) -> str:
        return "archival"

    def execute(self, ctx: TableContext, instant: Instant, lease: LockHandle) -> Outcome:
        archived = archive(ctx.table, self.settings.policy, lock=ctx.lock_factory(), lease=lease)
        return Outcome(self.name, instant, archived, instants_archived=len(archived))
