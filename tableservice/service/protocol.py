"""The one protocol every table service implements, and the settings each takes.

A pass over a table (`TableWorker.run_pass`) loops over the services in Hudi's order (failed-write rollback,
compaction, clustering, clean, archival): for each, it executes the pending instants (each under its executor
lease), then, when the service's policy says scheduling is due, schedules one and executes it. Adding a service is
one class implementing `TableService` and one entry in `services_for`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from tableservice.hudi.table.hudi_table import TableSnapshot
from tableservice.hudi.timeline.instant import Instant
from tableservice.locks import LockHandle
from tableservice.planning.due import Due
from tableservice.service.actions import TableContext

P = TypeVar("P")


@dataclass(frozen=True)
class ServiceSettings(Generic[P]):
    """How one service serves one table: its switches and its policy."""

    policy: P
    schedule: bool = True  # plan new actions when the policy says they are due
    execute: bool = True  # execute pending plans (whoever scheduled them)


@dataclass(frozen=True)
class Outcome:
    """What executing one instant did, for the pass result and the metrics."""

    service: str
    instant: Instant
    value: object = None
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    log_files_compacted: int = 0
    files_deleted: int = 0  # clean: files removed from storage
    bytes_deleted: int = 0
    instants_archived: int = 0
    failed_writes_rolled_back: int = 0  # rollback of a failed write (not the resumption of a rollback)
    executor_seconds: float = 0.0  # the tasks' own run time, summed
    requests: Mapping[str, int] = field(default_factory=dict)  # object-store requests by kind (lower case)
    benefit: ReadPathBenefit | None = None  # compaction, clustering: the read path before and after


@dataclass(frozen=True)
class ReadPathBenefit:
    """What a rewrite bought readers of the file groups it rewrote: files opened before and after (read
    amplification = files per file group), log files and bytes no reader merges any more."""

    file_groups_before: int
    file_groups_after: int
    files_before: int
    files_after: int
    log_files_removed: int
    log_bytes_removed: int


class SchedulingDeferred(Exception):
    """Raised by `TableService.schedule` when a plan cannot be made yet but may be soon (e.g. table version 6 waits
    for an earlier write): the pass asks again on the next poll instead of remembering that nothing was due."""


class ServiceBase(Generic[P]):
    """What most services share: their settings, serving every table, one lease per instant."""

    name: ClassVar[str]
    plans_on_timeline: ClassVar[bool] = True
    uses_spark: ClassVar[bool] = False

    def __init__(self, settings: ServiceSettings[P]) -> None:
        self.settings = settings

    def applies(self, snapshot: TableSnapshot) -> bool:
        return True

    def lease_name(self, instant: Instant) -> str:
        return f"{self.name}-{instant.requested_time}"


class TableService(Protocol):
    """One table service: what is pending, whether scheduling is due, schedule, execute."""

    @property
    def name(self) -> str:
        """Metrics label, lease prefix and log name: compaction, clustering, clean, archival, rollback."""

    @property
    def plans_on_timeline(self) -> bool:
        """Whether `schedule` writes a requested instant (archival and rollback write none)."""

    @property
    def uses_spark(self) -> bool:
        """Whether executing needs the Spark session (compaction, clustering, indexing): held back while it is
        unavailable, while the other services go on."""

    @property
    def settings(self) -> ServiceSettings[Any]: ...

    def applies(self, snapshot: TableSnapshot) -> bool:
        """Whether the service serves this table at all (compaction: merge-on-read tables)."""

    def pending(self, snapshot: TableSnapshot) -> list[Instant]:
        """Instants to execute now, oldest first."""

    def due(self, snapshot: TableSnapshot, *, listing: bool = True) -> Due:
        """Whether the policy says a new action should be scheduled, why, and when a time trigger next fires (no
        listing beyond what the trigger needs). Without `listing`, from the poll's timeline alone: a trigger that
        needs a listing is left out and the reason says so (asked when a pass is needed anyway)."""

    def schedule(self, ctx: TableContext) -> Instant | None:
        """Plan a new action under the table lock; None when there is nothing to do."""

    def lease_name(self, instant: Instant) -> str:
        """The executor lease that makes one replica run `instant`."""

    def execute(self, ctx: TableContext, instant: Instant, lease: LockHandle) -> Outcome:
        """Run `instant` to completion through the commit path."""
