"""The one commit path: every change the daemon makes to a table's timeline ends here.

A change is a completed action (compaction, clustering, clean, rollback), a savepoint created or deleted, a
pending plan removed, instants archived, or a restore to a savepoint. Each goes through `commit`, which, in this order:

1. takes the table lock (the one the table's writers take);
2. re-reads the timeline under it;
3. runs the change's conflict checks (`tableservice.hudi.action.conflicts`) against that timeline: a check raises a
   ConflictError, or returns the write stats that may still be committed;
4. checks that the table lock and the executor lease are still held (a lost one raises LockLostError and nothing
   is written);
5. deletes the files of write stats a check left out;
6. calls `update_metadata_table` with the change (instant, action, write stats): the one place where keeping the
   metadata table in step goes;
7. checks the lock and the lease once more (the metadata-table update takes time; a lock lost meanwhile leaves the
   metadata table's delta commit for an instant that never completes, which readers ignore and a rollback removes);
8. writes the change to the timeline. The table then holds the timeline re-read in step 2 with the change
   applied where the change is known exactly (a completed instant), else it loads a fresh one when next asked.

Nothing is written unless every step before it succeeded, so a failure leaves the timeline as it was. A lock lost
only while it is released, after step 8, does not undo the change: it is logged, not raised.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar, runtime_checkable

from tableservice.errors import LockLostError
from tableservice.hudi.metadata.update import sync_metadata_table
from tableservice.hudi.models import HoodieWriteStat, TimelineContent, encode_instant_content
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant
from tableservice.storage import join

log = logging.getLogger(__name__)
T = TypeVar("T")

LockFactory = Callable[[], AbstractContextManager[object]]
WriteStats = tuple[HoodieWriteStat, ...]
ConflictCheck = Callable[[Timeline, WriteStats], WriteStats]


@runtime_checkable
class Held(Protocol):
    """A held lock or lease: `check` raises LockLostError once it is no longer held."""

    def check(self) -> None: ...


class ChangeKind(enum.Enum):
    COMPLETE = "complete"  # an inflight action's completed instant
    REMOVE_PENDING = "remove_pending"  # a pending plan that can never complete is removed
    SAVEPOINT = "savepoint"  # a savepoint created or deleted
    ARCHIVE = "archive"  # instants moved to the archived timeline
    RESTORE = "restore"  # the table restored to a savepoint (the metadata table is rebuilt by the restore itself)


@dataclass(frozen=True)
class Change:
    """What one commit changes, as `update_metadata_table` sees it."""

    kind: ChangeKind
    instant: Instant | None = None
    write_stats: WriteStats = ()
    metadata: TimelineContent | None = None  # what the completed instant's file holds (COMPLETE)

    @property
    def action(self) -> Action | None:
        return self.instant.action if self.instant is not None else None

    @property
    def instant_time(self) -> str:
        return self.instant.requested_time if self.instant is not None else ""


def update_metadata_table(table: HudiTable, timeline: Timeline, change: Change) -> None:
    """Keep the table's metadata table in step with `change`: called by every commit under the table lock, after
    the conflict checks and before the data table's timeline is written (`tableservice.hudi.metadata.update`).
    The configuration was read again with the timeline under the lock, so a metadata table a writer enabled while
    the action ran is seen here. Savepoints, removed plans and archival change no file and send nothing."""
    if change.kind is not ChangeKind.COMPLETE or change.instant is None or not table.config.has_metadata_table:
        return
    done = sync_metadata_table(table, timeline, change.instant, change.metadata)
    if done is not None and done.completion_time is not None:
        table.active.note_time(done.completion_time)  # the data instant completes after its metadata


def no_lock() -> AbstractContextManager[object]:
    """For callers that exclude nobody (tests, single-process tools)."""
    return contextlib.nullcontext()


def commit(
    table: HudiTable,
    change: Change,
    write: Callable[[Timeline, Change], T],
    *,
    lock: LockFactory | None = None,
    checks: Sequence[ConflictCheck] = (),
    lease: Held | None = None,
    describe: Callable[[WriteStats], TimelineContent] | None = None,
) -> T:
    """Run the commit path (see the module docstring); returns what `write` returns. `write` receives the timeline
    re-read under the lock and the change with the write stats the checks kept (and, given `describe`, the
    completed instant's metadata made from them)."""
    written: list[T] = []
    try:
        with (lock if lock is not None else no_lock)() as held:
            latest = table.reload()
            kept = change.write_stats
            for check in checks:
                kept = check(latest, kept)
            _still_held(held, lease)
            if len(kept) != len(change.write_stats):
                _discard(table, change, kept)
                change = replace(change, write_stats=kept)
            if describe is not None:
                change = replace(change, metadata=describe(kept))
            update_metadata_table(table, latest, change)
            _still_held(held, lease)  # again right before the write: the metadata-table update takes time
            written.append(write(latest, change))
            table.forget_timeline(unless_replaced=latest)  # unless `write` applied its change to the held timeline
    except LockLostError as e:
        if not written:
            raise
        # The change is on the timeline: it was written while the lock was still held. Losing the lock while
        # releasing it does not undo it, so the action is not reported as failed.
        log.warning(
            "the table lock was lost after the change was written (it stands): %s",
            e,
            extra={"table": table.label, "instant": change.instant_time},
        )
    return written[0]


def _still_held(held: object, lease: Held | None) -> None:
    """LockLostError unless the table lock (and the executor lease) are still held."""
    if isinstance(held, Held):
        held.check()
    if lease is not None:
        lease.check()


def complete(
    table: HudiTable,
    inflight: Instant,
    content: Callable[[WriteStats], TimelineContent],
    *,
    write_stats: Sequence[HoodieWriteStat] = (),
    lock: LockFactory | None = None,
    checks: Sequence[ConflictCheck] = (),
    lease: Held | None = None,
) -> tuple[Instant, WriteStats]:
    """Complete an inflight action through `commit`: the completed file holds `content(kept write stats)`."""

    def write(latest: Timeline, change: Change) -> tuple[Instant, WriteStats]:
        assert change.metadata is not None  # set by `describe`
        data = encode_instant_content(change.metadata, table_version=table.config.version)
        done = table.active.transition_to_completed(inflight, data, timeline=latest)
        table.applied(latest, done)
        return done, change.write_stats

    change = Change(ChangeKind.COMPLETE, inflight, tuple(write_stats))
    return commit(table, change, write, lock=lock, checks=checks, lease=lease, describe=content)


def _discard(table: HudiTable, change: Change, kept: WriteStats) -> None:
    keep = {s.path for s in kept}
    for s in change.write_stats:
        if s.path and s.path not in keep:
            table.storage.delete(join(table.base_path, s.path))
            log.info(
                "deleted %s: left out of the commit by a conflict check",
                s.path,
                extra={"table": table.label, "instant": change.instant_time},
            )
