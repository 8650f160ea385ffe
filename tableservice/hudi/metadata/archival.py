"""Archival bounds between a data table and its metadata table (HUDI-MDT-NOTES §9).

- Data table: only instants completed before the metadata table's latest compaction are archived (its base files
  then hold everything those instants wrote); nothing while the metadata table has no compaction.
- Metadata table: never its instants at or after the data table's earliest active write (commit, delta commit,
  replace commit) or earliest pending instant; readers judge blocks by the data timeline's instants.
Archival takes a prefix of the timeline, so selections are cut at the first instant past the bound.
"""

from __future__ import annotations

from collections.abc import Sequence

from tableservice.hudi.metadata.compaction import COMPACTION_ACTIONS
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Instant


def data_archival_bound(mdt_timeline: Timeline) -> str:
    """Data instants completed before this time may be archived ("" when none may)."""
    compactions = [i.requested_time for i in mdt_timeline.completed() if i.action in COMPACTION_ACTIONS]
    return max(compactions, default="")


def metadata_archival_bound(data_timeline: Timeline) -> str | None:
    """Metadata instants requested before this time may be archived (None: no bound from the data table)."""
    candidates = [i.requested_time for i in data_timeline.write_instants()]
    candidates += [i.requested_time for i in data_timeline.pending()]
    return min(candidates, default=None)


def before_bound(instants: Sequence[Instant], bound: str | None, *, by_completion: bool) -> list[Instant]:
    """The oldest-first prefix of `instants` that lies before `bound` (by completion or requested time)."""
    if bound is None:
        return list(instants)
    out = []
    for instant in sorted(instants, key=lambda i: (i.requested_time, i.sort_key)):
        t = (instant.completion_time or instant.requested_time) if by_completion else instant.requested_time
        if t >= bound:
            break
        out.append(instant)
    return out
