"""Which metadata-table log blocks a reader applies: Hudi's valid-instant rule.

A metadata-table delta commit carries the same instant time as the data action it records, and is completed
first. Until the data action completes, its records must stay invisible; when the data action is rolled back,
they must disappear. A log block counts when its `INSTANT_TIME` is
- the requested time of a completed instant of the data timeline;
- a completed metadata delta commit whose time is not on the data timeline at all (archived data instants,
  the metadata table's own instants);
- an instant rolled back by a completed data rollback or restore newer than the earliest valid instant;
- a completed metadata rollback or restore;
- an initialisation delta commit (`00000000000000…`).
Base files are not filtered: they come from completed metadata compactions or initialisations only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant

INIT_PREFIX = "00000000000000"


def valid_instant_times(
    data_timeline: Timeline,
    mdt_timeline: Timeline,
    rolled_back_by: Callable[[Instant], Iterable[str]],
) -> frozenset[str]:
    """The instant times whose metadata-table log blocks are applied. `rolled_back_by(instant)` gives the
    instants a completed data rollback or restore undid (read from its metadata)."""
    on_data = {i.requested_time for i in data_timeline}
    valid = {i.requested_time for i in data_timeline.completed()}
    for instant in mdt_timeline.completed():
        t = instant.requested_time
        own = instant.action is Action.DELTA_COMMIT and (t not in on_data or t.startswith(INIT_PREFIX))
        if own or instant.action in (Action.ROLLBACK, Action.RESTORE):
            valid.add(t)
    earliest = min(valid) if valid else None
    for instant in data_timeline.completed():
        if instant.action not in (Action.ROLLBACK, Action.RESTORE):
            continue
        if earliest is not None and instant.requested_time > earliest:
            valid.update(rolled_back_by(instant))
    return frozenset(valid)
