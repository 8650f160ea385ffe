"""Finding failed writes to roll back, per Hudi's `hoodie.cleaner.policy.failed.writes`.

- EAGER: every pending write (commit, delta commit, insert-overwrite replace commit) is failed. Only safe with a
  single writer, which is never the case when a table-services daemon runs beside the writers.
- LAZY (the daemon's default, and what Hudi uses under optimistic concurrency): only pending writes whose
  heartbeat has expired, checked after a fresh timeline load. A heartbeat is expired when its file is missing or
  older than interval × tolerable misses. As a safeguard against writers that keep no heartbeat, an instant
  younger than that window is never failed either.
- NEVER: nothing.

Table services (compaction, log compaction, clustering) are never failed writes: their plans are re-run instead.
"""

from __future__ import annotations

import enum
import time

from tableservice.errors import TableServiceError
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, parse_instant_time, timeline_timezone
from tableservice.hudi.write.markers import DEFAULT_HEARTBEAT_INTERVAL_MS, DEFAULT_TOLERABLE_MISSES, heartbeat_expired

WRITE_ACTIONS = frozenset({Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT})


class FailedWritesPolicy(enum.StrEnum):
    EAGER = "EAGER"
    LAZY = "LAZY"
    NEVER = "NEVER"


def _instant_age_ms(table: HudiTable, instant: Instant, now_ms: int) -> int:
    try:
        started = parse_instant_time(instant.requested_time, timeline_timezone(table.config.timezone_name))
    except TableServiceError:
        return 0
    return now_ms - int(started.timestamp() * 1000)


def failed_writes(
    table: HudiTable,
    policy: FailedWritesPolicy,
    *,
    timeline: Timeline | None = None,
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    now_ms: int | None = None,
) -> list[Instant]:
    """Pending writes the policy considers failed, oldest first."""
    if policy is FailedWritesPolicy.NEVER:
        return []
    tl = timeline if timeline is not None else table.reload()
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    window = heartbeat_interval_ms * tolerable_misses
    out = []
    for instant in tl.pending():
        if instant.action not in WRITE_ACTIONS or table.is_clustering(instant):
            continue
        if policy is FailedWritesPolicy.EAGER:
            out.append(instant)
            continue
        if _instant_age_ms(table, instant, now) <= window:
            continue
        if heartbeat_expired(
            table.storage,
            table.base_path,
            instant.requested_time,
            interval_ms=heartbeat_interval_ms,
            tolerable_misses=tolerable_misses,
            now_ms=now,
        ):
            out.append(instant)
    return out
