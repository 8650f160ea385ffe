"""What the daemon keeps per table besides the worker: its settings (from the configuration), its status (served
on /status and by `tableservice status`), the outcome of one pass, and the Spark job tags of running actions."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import NamedTuple

from tableservice.errors import SparkUnavailableError, TableServiceError
from tableservice.hudi.action.indexing import IndexingResult
from tableservice.hudi.timeline.instant import Action, Instant, parse_instant_time, timeline_timezone
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.clustering.policy import ClusteringPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.planning.indexing.policy import IndexingPolicy
from tableservice.planning.metadata.policy import MetadataPolicy
from tableservice.planning.slo import SloTargets
from tableservice.planning.write import WritePolicy
from tableservice.service.archival import ArchivalService
from tableservice.service.clean import CleanService
from tableservice.service.clustering import ClusteringResult, ClusteringService
from tableservice.service.compaction import CompactionResult, CompactionService
from tableservice.service.indexing import IndexingService
from tableservice.service.metadata import MetadataService
from tableservice.service.protocol import Outcome, ServiceSettings, TableService
from tableservice.service.rollback import FailedWritesSettings, RollbackService


@dataclass(frozen=True)
class TableSettings:
    """How one table is served (from the daemon's configuration): per service, its switches and policy."""

    uri: str
    name: str | None
    compaction: ServiceSettings[CompactionPolicy] = field(default_factory=lambda: ServiceSettings(CompactionPolicy()))
    clustering: ServiceSettings[ClusteringPolicy] = field(
        default_factory=lambda: ServiceSettings(ClusteringPolicy(), schedule=False)
    )
    clean: ServiceSettings[CleanPolicy] = field(default_factory=lambda: ServiceSettings(CleanPolicy()))
    archival: ServiceSettings[ArchivalPolicy] = field(default_factory=lambda: ServiceSettings(ArchivalPolicy()))
    failed_writes: ServiceSettings[FailedWritesSettings] = field(
        default_factory=lambda: ServiceSettings(FailedWritesSettings(), schedule=False)
    )
    metadata: ServiceSettings[MetadataPolicy] = field(default_factory=lambda: ServiceSettings(MetadataPolicy()))
    indexing: ServiceSettings[IndexingPolicy] = field(default_factory=lambda: ServiceSettings(IndexingPolicy()))
    # Secondary indexes the table should have (`indexing.secondary_indexes`): index name -> column.
    secondary_indexes: Mapping[str, str] = field(default_factory=dict)
    # Compare the metadata table with storage after each action (`metadata.verify_after_action`).
    verify_metadata_after_action: bool = False
    lock_timeout_s: float = 60.0
    # An action that failed permanently (corrupt file, bad plan) is not retried for this long.
    permanent_failure_hold_s: float = 3600.0
    # Polled but no action runs (the table entry's `paused`, with `paused_reason`).
    paused: bool = False
    paused_reason: str | None = None
    # SLO targets (`slo`): the daemon orders due work by their risk of breach; none: oldest pending first.
    slo: SloTargets = field(default_factory=SloTargets)
    # A target whose time to breach is at most the fixing action's expected duration plus this (the wait until the
    # next poll: `service.poll_interval_seconds`) makes that service due.
    slo_margin_s: float = 30.0
    # How compaction and clustering write base files (`write`): codec and bloom filter.
    write: WritePolicy = field(default_factory=WritePolicy)

    @property
    def heartbeat_interval_ms(self) -> int:
        return self.failed_writes.policy.heartbeat_interval_ms

    def services(self) -> list[TableService]:
        """Every service, in Hudi's order."""
        return [
            RollbackService(self.failed_writes),
            CompactionService(self.compaction),
            ClusteringService(self.clustering),
            CleanService(self.clean),
            ArchivalService(self.archival),
            IndexingService(self.indexing, dict(self.secondary_indexes)),
            MetadataService(self.metadata),
        ]


class TableHealth(StrEnum):
    """How a table is being served; the reason says why when it is not `ok`."""

    UNKNOWN = "unknown"  # not polled yet
    OK = "ok"
    DEGRADED = "degraded"  # served, but an action is held back after a permanent failure
    FAILING = "failing"  # the last pass failed; retried with back-off
    QUARANTINED = "quarantined"  # not served until `quarantined_until`
    ERROR = "error"  # could not be read (status command)


@dataclass
class TableStatus:
    """What the daemon knows about a table (served on /status and by `tableservice status`). Worker threads
    change it and the event loop reads it: changes of several fields go through `update`, reads through
    `to_json`, both under one lock."""

    uri: str
    name: str
    table_type: str = ""
    table_version: int = 0
    pending: list[dict[str, object]] = field(default_factory=list)
    last_compaction: str | None = None
    health: TableHealth = TableHealth.UNKNOWN
    health_reason: str | None = None
    last_error: str | None = None
    consecutive_failures: int = 0
    quarantined_until: float | None = None
    last_poll: float | None = None
    # how late polls started after they were due (seconds): the last one and the worst since the daemon started
    poll_lag_seconds: float = 0.0
    max_poll_lag_seconds: float = 0.0
    running: str | None = None
    held_back: list[dict[str, object]] = field(default_factory=list)
    # services stopped for this table after they found damaged committed data: service -> until, reason
    quarantined_services: dict[str, dict[str, object]] = field(default_factory=dict)
    paused: bool = False  # an operator paused the table: polled, no action runs
    paused_reason: str | None = None
    # service -> {due, reason, next_due_at}: what the last poll's trigger check found
    due: dict[str, dict[str, object]] = field(default_factory=dict)
    # per SLO target: value, limit, time to breach, the service that fixes it (`planning/slo.py`); [] without targets
    slo: list[dict[str, object]] = field(default_factory=list)
    backoff_until: float | None = None  # unix time: the next action waits until then (its lock waits rose)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def update(self, **fields: object) -> None:
        """Change several fields at once, as readers of `to_json` will see them together."""
        with self._guard:
            for name, value in fields.items():
                if name.startswith("_") or name not in self.__dataclass_fields__:
                    raise AttributeError(f"TableStatus has no field {name!r}")
                setattr(self, name, value)

    def guard(self) -> threading.Lock:
        """The lock `update` and `to_json` take, for changing a field's contents in place."""
        return self._guard

    def set_health(self, health: TableHealth, reason: str | None = None) -> None:
        self.update(health=health, health_reason=reason)

    def to_json(self) -> dict[str, object]:
        with self._guard:
            return {
                k: (str(v) if isinstance(v, TableHealth) else dict(v) if isinstance(v, dict) else v)
                for k, v in self.__dict__.items()
                if k[0] != "_"
            }


class Failure(NamedTuple):
    """One failure in a pass: the instant ("" when not an action's), the error and what failed."""

    instant: str
    error: TableServiceError
    action: str = "table"


@dataclass
class PassResult:
    scheduled: list[str] = field(default_factory=list)
    completed: list[CompactionResult] = field(default_factory=list)
    clustered: list[ClusteringResult] = field(default_factory=list)
    cleaned: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    indexed: list[IndexingResult] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)
    held_back: list[Failure] = field(default_factory=list)  # permanent failures of actions, also in `failed`

    @property
    def failed_not_held(self) -> list[Failure]:
        """Failures that may pass on their own (the table backs off), and permanent ones not tied to an action's
        instant (the table is quarantined). Permanent failures of an action are held back by the worker instead; Spark
        that cannot start is Spark's failure, not the table's (its actions wait, reported in `failed` only)."""
        held = {id(f.error) for f in self.held_back}
        return [f for f in self.failed if id(f.error) not in held and not isinstance(f.error, SparkUnavailableError)]

    def record(self, outcome: Outcome) -> None:
        """Add what executing one instant did."""
        t = outcome.instant.requested_time
        if isinstance(outcome.value, CompactionResult):
            self.completed.append(outcome.value)
        elif isinstance(outcome.value, ClusteringResult):
            self.clustered.append(outcome.value)
        elif isinstance(outcome.value, IndexingResult):
            self.indexed.append(outcome.value)
        elif outcome.service == "clean":
            self.cleaned.append(t)
        elif outcome.service == "archival" and isinstance(outcome.value, list):
            self.archived.extend(i.requested_time for i in outcome.value)
        elif outcome.service == "rollback" and outcome.instant.action is not Action.ROLLBACK:
            self.rolled_back.append(t)


class RunningActions:
    """Spark job tags of the actions running now (for graceful shutdown)."""

    def __init__(self) -> None:
        self._tags: dict[str, str] = {}
        self._guard = threading.Lock()

    def add(self, key: str, tag: str) -> None:
        with self._guard:
            self._tags[key] = tag

    def remove(self, key: str) -> None:
        with self._guard:
            self._tags.pop(key, None)

    def tags(self) -> list[str]:
        with self._guard:
            return list(self._tags.values())

    def __len__(self) -> int:
        with self._guard:
            return len(self._tags)


def age_seconds(instant: Instant, tz_name: str) -> float:
    try:
        started = parse_instant_time(instant.requested_time, timeline_timezone(tz_name))
    except TableServiceError:
        return 0.0
    return max(0.0, (datetime.now(UTC) - started).total_seconds())
