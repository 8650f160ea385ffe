"""Archival: moving old completed instants from the active timeline into the archived timeline.

The choice of instants is the planning layer's (`tableservice.planning.archival.ArchivalPolicy`, passed in as an
`ArchivalSelection`); this module executes it in Hudi's order, under the table lock:

- table versions 8/9 (TimelineArchiverV2): leftover marker folders of the instants are deleted, the instants are
  written to the LSM history (a level-0 file, then `manifest_<N+1>`, then `_version_`), their active timeline
  files are deleted, then the history is compacted and cleaned (`compactAndClean`, batch
  `hoodie.timeline.compaction.batch.size`);
- table version 6 (TimelineArchiverV1): markers deleted, the archive log written (a new
  `.commits_.archive.<n>_1-0-1`, `hoodie.commits.archival.batch` entries per block), then the active files deleted.

Active files are deleted as Hudi does: every requested and inflight file first (a completed file deleted first
would make monitors see a pending instant), then the completed files in ascending order (HUDI-7207: no holes for
concurrent readers). A crash at any point leaves each instant active, archived, or both. Both is harmless: readers
of the active timeline take it from there, our archive readers keep one entry per instant, and
`instants_with_archived` keeps the active one. The next run finds such instants still eligible and does not write
them again when the newest archive files already hold them; it only deletes their active files.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from tableservice.hudi.action.commit import Change, ChangeKind, Held, LockFactory, commit
from tableservice.hudi.metadata.archival import before_bound, data_archival_bound
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.archive import (
    archive_instants_lsm,
    archive_instants_v6,
    archived_completion_times,
    compact_lsm,
    read_archive_sources,
)
from tableservice.hudi.timeline.archive_v1 import archive_log_files, read_archive_log
from tableservice.hudi.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from tableservice.hudi.write.markers import delete_markers
from tableservice.storage import join

log = logging.getLogger(__name__)

__all__ = [
    "ArchivalSelection",
    "archive",
    "archived_in_newest_files",
    "delete_active_files",
    "instants_with_archived",
]


class ArchivalSelection(Protocol):
    """What execution needs from an archival policy (`tableservice.planning.archival.ArchivalPolicy`)."""

    @property
    def archival_batch(self) -> int: ...

    @property
    def timeline_compaction_batch_size(self) -> int: ...

    def instants_to_archive(self, table: HudiTable, timeline: Timeline) -> list[Instant]: ...


def archive(
    table: HudiTable, policy: ArchivalSelection, *, lock: LockFactory | None = None, lease: Held | None = None
) -> list[Instant]:
    """Archive what `policy` selects on the reloaded timeline; returns the archived instants, oldest first."""

    def write(timeline: Timeline, _: Change) -> list[Instant]:
        instants = sorted(policy.instants_to_archive(table, timeline), key=lambda i: (i.requested_time, i.sort_key))
        if table.config.has_metadata_table:  # see tableservice.hudi.metadata.archival
            mdt = MetadataTable.open(table, timeline)
            bound = data_archival_bound(mdt.mdt_timeline) if mdt is not None else ""
            instants = before_bound(instants, bound, by_completion=True)
        if not instants:
            return []
        stored = archived_in_newest_files(table, instants)
        todo = [i for i in instants if i.requested_time not in stored]
        for instant in todo:
            if instant.action in WRITE_ACTIONS:
                delete_markers(table.storage, table.base_path, instant.requested_time)
        sources = read_archive_sources(table.storage, table.base_path, table.config, todo)
        if sources:
            if table.config.layout_version == 1:
                archive_instants_v6(
                    table.storage, table.base_path, table.config, sources, batch_size=policy.archival_batch
                )
            else:
                archive_instants_lsm(table.storage, table.base_path, table.config, sources)
        delete_active_files(table, instants)
        if table.config.layout_version >= 2:
            compact_lsm(table.storage, table.base_path, table.config, batch_size=policy.timeline_compaction_batch_size)
        return instants

    instants = commit(table, Change(ChangeKind.ARCHIVE), write, lock=lock, lease=lease)
    if not instants:
        return []
    table.forget_archive_reads()
    table.reload()
    log.info(
        "archived %d instants (%s .. %s)",
        len(instants),
        instants[0].requested_time,
        instants[-1].requested_time,
        extra={"table": table.label, "instant": instants[-1].requested_time, "action": "archival"},
    )
    return instants


def delete_active_files(table: HudiTable, instants: Iterable[Instant]) -> None:
    """Requested and inflight files of every instant first, then the completed files oldest first."""
    ordered = sorted(instants, key=lambda i: (i.requested_time, i.sort_key))
    for instant in ordered:
        for state in (State.REQUESTED, State.INFLIGHT):
            table.storage.delete(table.active.path_of(instant.with_state(state)))
    for instant in ordered:
        table.storage.delete(table.active.path_of(instant))


def archived_in_newest_files(table: HudiTable, instants: list[Instant]) -> set[str]:
    """Requested times among `instants` that the archive already holds as completed, looking only where a crashed
    run would have put them: v8+ history files whose name range overlaps the instants (two columns read); v6 the
    newest archive log files, until one holds nothing at or after the first instant."""
    if not instants:
        return set()
    wanted = {i.requested_time for i in instants}
    start, end = min(wanted), max(wanted)
    if table.config.layout_version >= 2:
        done = archived_completion_times(table.storage, table.base_path, table.config, start=start, end=end)
        return wanted & set(done)
    found: set[str] = set()
    folder = join(table.base_path, table.config.history_folder)
    for _, fi in archive_log_files(table.storage, folder):
        entries = list(read_archive_log(table.storage, fi.location, table=table.label))
        found.update(e.requested_time for e in entries if e.is_completed and e.requested_time in wanted)
        if not any(e.requested_time >= start for e in entries):
            break
    return found


def instants_with_archived(
    table: HudiTable, *, start: str | None = None, end: str | None = None, timeline: Timeline | None = None
) -> list[Instant]:
    """Completed archived instants and the active timeline's instants in [start, end], each requested time once:
    an instant a crashed archival left both archived and active is taken from the active timeline."""
    active = timeline if timeline is not None else table.reload()
    out: dict[tuple[str, bool], Instant] = {}
    for a in table.archived_instants(start=start, end=end, completed_only=True):
        out[(a.requested_time, a.action is Action.SAVEPOINT)] = a.to_instant()
    for i in active:
        if (start is None or i.requested_time >= start) and (end is None or i.requested_time <= end):
            out[(i.requested_time, i.action is Action.SAVEPOINT)] = i
    return sorted(out.values(), key=lambda i: i.sort_key)
