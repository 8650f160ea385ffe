"""Cancelling a plan nobody has started: a requested compaction, clustering or clean is removed from the timeline.

Hudi allows deleting a plan while it is only requested (its `.requested` file is all there is: no data file was
written for it, no writer waits on it, and in the metadata table nothing exists for it, since the metadata table
receives an action only when it completes). Once an attempt has started (`.inflight`), data files of the attempt
may exist and the plan must be rolled back instead; that is refused here with a message saying so.

The removal goes through the one commit path (`commit` with a `REMOVE_PENDING` change): under the table lock the
timeline is re-read and the instant is checked again there (an executor that moved it to inflight meanwhile wins),
the lock and the executor lease given are checked, the metadata table is asked for nothing, and the requested file
is deleted.
"""

from __future__ import annotations

import logging

from tableservice.errors import PlanNotCancellableError
from tableservice.hudi.action.commit import Change, ChangeKind, Held, LockFactory, WriteStats, commit
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, State

log = logging.getLogger(__name__)


def plan_service(table: HudiTable, instant: Instant) -> str | None:
    """The table service that owns a pending plan (compaction, clustering or clean), else None."""
    if instant.action is Action.COMPACTION:
        return "compaction"
    if instant.action is Action.CLEAN:
        return "clean"
    if table.is_clustering(instant):  # clustering (v8+), or a v6 replace commit holding a clustering plan
        return "clustering"
    return None


def cancellable(table: HudiTable, timeline: Timeline, instant_time: str) -> tuple[Instant, str]:
    """The requested plan at `instant_time` and its service; PlanNotCancellableError naming why it cannot go."""
    instant = timeline.get(instant_time)
    if instant is None:
        raise PlanNotCancellableError(f"no instant {instant_time} on the active timeline", table=table.label)
    path = table.active.path_of(instant)
    if instant.is_completed:
        raise PlanNotCancellableError(
            f"{instant} is completed: only a requested plan can be cancelled", table=table.label, path=path
        )
    service = plan_service(table, instant)
    if service is None:
        raise PlanNotCancellableError(
            f"{instant} is not a compaction, clustering or clean plan (a write is rolled back, an indexing plan "
            "aborted with `tableservice index abort`)",
            table=table.label,
            path=path,
        )
    if instant.state is State.INFLIGHT:
        raise PlanNotCancellableError(
            f"{service} {instant_time} is inflight: an attempt has started and may have written files, so it "
            "cannot be cancelled; roll it back instead (the daemon or `tableservice "
            f"{'compact' if service == 'compaction' else 'cluster' if service == 'clustering' else 'clean'} run` "
            "rolls back the attempt and runs the plan again)",
            table=table.label,
            path=path,
        )
    return instant, service


def cancel_plan(
    table: HudiTable, instant_time: str, *, lock: LockFactory | None = None, lease: Held | None = None
) -> Instant:
    """Remove the requested plan at `instant_time` through the commit path (checked again under the lock); returns
    the removed instant. PlanNotCancellableError when it is missing, completed, inflight or not a plan."""
    instant, _ = cancellable(table, table.reload(), instant_time)  # refuse early, without the lock

    def still_requested(latest: Timeline, kept: WriteStats) -> WriteStats:
        cancellable(table, latest, instant_time)
        return kept

    def remove(latest: Timeline, change: Change) -> Instant:
        current = latest.get(instant_time)
        assert current is not None and current.state is State.REQUESTED  # checked under the lock just before
        table.active.delete_pending(current)
        return current

    removed = commit(
        table, Change(ChangeKind.REMOVE_PENDING, instant), remove, lock=lock, checks=[still_requested], lease=lease
    )
    log.warning("cancelled the requested plan %s", removed, extra={"table": table.label, "instant": instant_time})
    return removed
