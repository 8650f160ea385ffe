"""What the daemon keeps per table besides the worker: its settings (from the configuration), its status (served
on /status and by `tableservice status`), the outcome of one pass, and the Spark job tags of running actions."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tableservice.errors import TableServiceError
from tableservice.hudi.failed_writes import FailedWritesPolicy
from tableservice.hudi.instant import Instant, parse_instant_time, timeline_timezone
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean_policy import CleanPolicy
from tableservice.planning.clustering_policy import ClusteringPolicy
from tableservice.planning.policy import CompactionPolicy
from tableservice.service.clustering import ClusteringResult
from tableservice.service.compaction import CompactionResult


@dataclass(frozen=True)
class TableSettings:
    """How one table is served (from the daemon's configuration)."""

    uri: str
    name: str | None
    compaction_schedule: bool
    compaction_execute: bool
    compaction_policy: CompactionPolicy
    lock_timeout_s: float = 60.0
    failed_writes: FailedWritesPolicy = FailedWritesPolicy.LAZY
    clustering_schedule: bool = False
    clustering_execute: bool = True
    clustering_policy: ClusteringPolicy = field(default_factory=ClusteringPolicy)
    clean_schedule: bool = True
    clean_execute: bool = True
    clean_policy: CleanPolicy = field(default_factory=CleanPolicy)
    archival_enabled: bool = True
    archival_policy: ArchivalPolicy = field(default_factory=ArchivalPolicy)
    heartbeat_interval_ms: int = 60_000
    heartbeat_tolerable_misses: int = 2


@dataclass
class TableStatus:
    """What the daemon knows about a table (served on /status and by `tableservice status`)."""

    uri: str
    name: str
    table_type: str = ""
    table_version: int = 0
    pending: list[dict[str, object]] = field(default_factory=list)
    last_compaction: str | None = None
    health: str = "unknown"
    last_error: str | None = None
    consecutive_failures: int = 0
    quarantined_until: float | None = None
    last_poll: float | None = None
    running: str | None = None

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass
class PassResult:
    scheduled: list[str] = field(default_factory=list)
    completed: list[CompactionResult] = field(default_factory=list)
    clustered: list[ClusteringResult] = field(default_factory=list)
    cleaned: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    failed: list[tuple[str, TableServiceError]] = field(default_factory=list)


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
