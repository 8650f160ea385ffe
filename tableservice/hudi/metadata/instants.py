"""The instant times of the metadata table's own actions, by table version.

Table version 6 (Hudi 0.14/0.15) derives them from data instants with a three-digit suffix, and readers and
Hudi's own metadata writer rely on that ordering (every later 17-digit instant sorts after all of them):
- initialisation of a partition: the latest completed data instant (or `00000000000000` on a table with none)
  + `010`, `011`, ... (the first not yet on the metadata timeline);
- compaction: the latest completed metadata delta commit + `001`; clean: the same + `002`;
- the metadata table's rollback of `x` within the data table's rollback at `r`: `r` + `006` (the data rollback
  itself also writes a delta commit at `r`).
Versions 8 and 9 use fresh instant times, initialisation `00000000000000000`, `...001`, ..., and a rollback at
`r` itself.
"""

from __future__ import annotations

from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action

SOLO_COMMIT_TIME = "00000000000000"
COMPACTION_SUFFIX = "001"
CLEAN_SUFFIX = "002"
ROLLBACK_SUFFIX = "006"
FIRST_INIT_SUFFIX = 10
DATA_TIME_DIGITS = 17  # yyyyMMddHHmmssSSS


def uses_suffixes(table_version: int) -> bool:
    """Whether the metadata table of a table of this version names its own instants by suffix (version 6)."""
    return table_version < 8


def init_instant(table_version: int, data_timeline: Timeline, mdt_timeline: Timeline) -> str:
    """The instant at which the next metadata partition is initialised."""
    used = {i.requested_time for i in mdt_timeline}
    if not uses_suffixes(table_version):
        n = 0
        while f"{n:017d}" in used:
            n += 1
        return f"{n:017d}"
    base = max((i.requested_time for i in data_timeline.completed()), default=SOLO_COMMIT_TIME)
    offset = FIRST_INIT_SUFFIX
    while f"{base}{offset:03d}" in used:
        offset += 1
    return f"{base}{offset:03d}"


def latest_delta_commit(mdt_timeline: Timeline) -> str | None:
    """The latest completed delta commit of the metadata table."""
    done = [i.requested_time for i in mdt_timeline.completed() if i.action is Action.DELTA_COMMIT]
    return max(done) if done else None


def suffix_base(mdt_timeline: Timeline) -> str | None:
    """The instant time a version 6 compaction or clean suffixes: the latest completed metadata delta commit, when
    it is an instant time of the data table's form (17 digits, or 14). None before any, and when the latest is the
    metadata table's own, suffixed (an initialisation `<t>010`, an indexer's `<t>004`): Hudi's metadata writer runs
    these services right after a data commit's delta commit, so it never suffixes its own instants, and
    `<t>010001` is no instant time."""
    latest = latest_delta_commit(mdt_timeline)
    return latest if latest is not None and not is_suffixed(latest) else None


def is_suffixed(instant_time: str) -> bool:
    """Whether a metadata instant time is one of its own suffixed ones (longer than a data instant time)."""
    return len(instant_time) > DATA_TIME_DIGITS


def metadata_rollback_instant(table_version: int, rollback_time: str) -> str:
    """The metadata table's rollback instant within the data table's rollback at `rollback_time`."""
    return rollback_time + ROLLBACK_SUFFIX if uses_suffixes(table_version) else rollback_time
