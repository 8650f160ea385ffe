"""Rolling back failed writes as a table service: rollbacks a crashed process left pending are finished first, then
the pending writes that `hoodie.cleaner.policy.failed.writes` counts as failed (LAZY: expired heartbeat; EAGER:
any; NEVER: none) are rolled back, each under its own lease so that one replica does it. A restore to a savepoint
left pending by a crashed process is finished first, alone (its plan rolls back whatever is after the savepoint)."""

from __future__ import annotations

from dataclasses import dataclass

from tableservice.errors import InstantNotPendingError
from tableservice.hudi.action.restore import pending_restore, resume_restore
from tableservice.hudi.action.rollback import resume_rollback, rollback
from tableservice.hudi.table.hudi_table import TableSnapshot
from tableservice.hudi.timeline.failed_writes import FailedWritesPolicy, failed_writes
from tableservice.hudi.timeline.instant import Action, Instant
from tableservice.locks import LockHandle
from tableservice.planning.due import Due
from tableservice.service.actions import TableContext
from tableservice.service.protocol import Outcome, ServiceBase


@dataclass(frozen=True)
class FailedWritesSettings:
    """`hoodie.cleaner.policy.failed.writes` and the heartbeat that tells a live writer from a dead one."""

    policy: FailedWritesPolicy = FailedWritesPolicy.LAZY
    heartbeat_interval_ms: int = 60_000
    heartbeat_tolerable_misses: int = 2


class RollbackService(ServiceBase[FailedWritesSettings]):
    name = "rollback"
    plans_on_timeline = False

    def pending(self, snapshot: TableSnapshot) -> list[Instant]:
        restoring = pending_restore(snapshot.timeline)
        if restoring is not None:
            return [restoring]
        policy = self.settings.policy
        failed = failed_writes(
            snapshot.table,
            policy.policy,
            timeline=snapshot.timeline,
            heartbeat_interval_ms=policy.heartbeat_interval_ms,
            tolerable_misses=policy.heartbeat_tolerable_misses,
        )
        return list(snapshot.timeline.pending_of(Action.ROLLBACK)) + failed

    def due(self, snapshot: TableSnapshot, *, listing: bool = True) -> Due:
        return Due(False, "never plans: rolls back the failed writes each poll finds")

    def schedule(self, ctx: TableContext) -> Instant | None:
        return None

    def execute(self, ctx: TableContext, instant: Instant, lease: LockHandle) -> Outcome:
        current = ctx.table.reload().get(instant.requested_time, instant.action)
        if current is None or current.is_completed:
            raise InstantNotPendingError(f"{instant} was rolled back or completed meanwhile", table=ctx.table.label)
        instant = current
        if instant.action is Action.RESTORE:
            restored = resume_restore(ctx.table, lock=ctx.lock_factory())
            if restored is None:
                raise InstantNotPendingError(f"{instant} was finished meanwhile", table=ctx.table.label)
            return Outcome(self.name, instant, restored.instant)
        if instant.action is Action.ROLLBACK:
            done = resume_rollback(ctx.table, instant, lock=ctx.lock_factory(), lease=lease)
        else:
            done = rollback(ctx.table, instant, lock=ctx.lock_factory(), lease=lease)
        return Outcome(self.name, instant, done, failed_writes_rolled_back=int(instant.action is not Action.ROLLBACK))
