"""The archived timeline: reading and writing Hudi's archive log (table version 6) and LSM history (8 and 9).

Facts (from Apache Hudi's sources; no fixture table has archived instants, so the bytes we write are checked
against these facts, our own readers and hudi-rs, not against a Spark-written archive):

Table version 6 (Hudi 0.14/0.15; `HoodieTimelineArchiver`, later `TimelineArchiverV1`; reader
`HoodieArchivedTimeline`, later `ArchivedTimelineV1` + `ArchivedTimelineLoaderV1`):
- Folder `.hoodie/<hoodie.archivelog.folder>` (default `archived`). The archive is a Hudi log file opened with file
  id `commits`, extension `.archive` and an empty base instant, so its name is
  `.commits_.archive.<version>_<writeToken>`; the first is `.commits_.archive.1_1-0-1` (the log writer's unknown
  write token). Where the file system cannot append (local disk and object stores), each archival run rolls over to
  the next version; on HDFS Hudi appends blocks to the latest file. The log writer also rolls over past its size
  threshold (512 MB by default). Readers glob `.commits_.archive*` and read files by version, newest first.
- Each block is an Avro data block (content version 3: int32 version, int32 count, length-prefixed records) whose
  header holds only SCHEMA (`HoodieArchivedMetaEntry`'s schema text); `hoodie.commits.archival.batch` (10) records
  per block. Non-data blocks are ignored and corrupt blocks skipped by the reader.
- One `HoodieArchivedMetaEntry` per timeline file: for every instant chosen for archival, the requested, inflight
  and completed files of the same instant time and comparable action are all archived, in that order, each as an
  entry with `commitTime` (requested time), `actionType` (the file's action: `compaction` for a compaction's
  requested/inflight files, `commit` for its completed file), `actionState` (`REQUESTED`/`INFLIGHT`/`COMPLETED`) and,
  from 0.14, `stateTransitionTime` (the file's modification time formatted as an instant time). `version` stays null
  (entries are built with the no-argument constructor). Entries carry the file's content in one field per action:
  commit/deltacommit -> `hoodieCommitMetadata` (Jackson-converted to Avro, `ROLLING_STAT` blanked, operation COMPACT
  when compacted); clean -> `hoodieCleanMetadata` (completed) / `hoodieCleanerPlan` (pending); replacecommit ->
  `hoodieRequestedReplaceMetadata` (requested, if not empty) / `HoodieInflightReplaceMetadata` (inflight, if not
  empty) / `hoodieReplaceCommitMetadata` (completed); rollback -> `hoodieRollbackMetadata` (completed only);
  savepoint -> `hoodieSavePointMetadata`; compaction/logcompaction -> `hoodieCompactionPlan` (0.x reads the plan by
  instant time, so every state's entry carries it; 1.x only the requested one); indexing ->
  `hoodieIndexCommitMetadata`. An empty file gives an entry with no content field.
- Readers key instants on `commitTime` + `actionType` + `actionState` (absent state = COMPLETED); Hudi 1.x
  takes `stateTransitionTime` as the completion time of a completed v6 entry.

Table versions 8/9 (Hudi 1.x; `TimelineArchiverV2`, `LSMTimelineWriter`, `LSMTimeline`,
`HoodieLSMTimelineManifest`, readers `ArchivedTimelineV2` + `ArchivedTimelineLoaderV2`, `CompletionTimeQueryViewV2`):
- Folder `.hoodie/<hoodie.timeline.path>/<hoodie.timeline.history.path>` (default `.hoodie/timeline/history`).
- Data files `<minInstant>_<maxInstant>_<level>.parquet` (level one digit; pattern `^(\\d+)_(\\d+)_(\\d)\\.parquet`),
  written by Hudi's Avro Parquet writer without meta fields or bloom filter, rows `HoodieLSMTimelineInstant`:
  `instantTime` (requested time), `completionTime`, `action` (the completed action: `commit` for compaction,
  `replacecommit` for clustering), `metadata` (the completed file's raw bytes, null when empty), `plan` (raw bytes,
  by the requested action: clean -> the requested (else inflight) file; compaction/logcompaction -> the requested
  file; replacecommit/clustering -> the requested file if not empty, replaced by the inflight file if that is not
  empty; other actions null), `version` = 1. One row per instant; a new archival writes one level-0 file named
  after its first and last instant.
- `manifest_<N>`: Jackson pretty-printed `{"files" : [ {"fileName" : "...", "fileLen" : <bytes>} ]}`; unknown keys
  ignored; empty content = no files. `_version_`: N as text. N starts at 1 and grows by one per snapshot.
- Write order: skip when the level-0 file is already listed by the latest manifest, delete it when it exists
  unlisted; write it; `manifest_<N+1>` (deleted first if a failed write left one); delete and recreate
  `_version_`. Readers take `_version_`, falling back to the highest `manifest_<N>` (`.tmp` excluded) when it is
  missing or unreadable, then read only the files that manifest lists (skipping files whose name range misses
  the requested range).
- After archived instants leave the active timeline, `compactAndClean`: for level L = 0, 1, ...: when the level
  holds at least `hoodie.timeline.compaction.batch.size` (10) files, sort them by name, take at most that many
  oldest ones, closing the group early once their total size passes the target size (a lone oversized file is
  skipped), merge their rows in that order into `<min>_<max>_<L+1>.parquet`, and write a snapshot that removes
  them and adds it; stop at the first level without a compaction. Cleaning keeps the newest `3 + <levels
  compacted>` snapshots: older manifests are deleted, then every `*.parquet` no kept manifest lists.
- Completion times: readers map archived `instantTime -> completionTime`; an instant older than the first
  non-savepoint write of the active timeline counts as completed even without a row.

hudi-rs 0.5.0 reads neither layout: archived loading is off unless `hoodie.internal.timeline.archived.enabled` is
set, and even then its v6 loader only tries to parse the archive folder's file names as instants (archive log names
never parse) and its v2 loader returns nothing. Snapshot and time-travel reads and file slices are unchanged after
archiving old instants and deleting their active files (tests/test_archive.py), but incremental queries over the
archived range only see instants still on the active timeline; and archiving a replace commit or clustering
whose replaced files were not cleaned makes hudi-rs (and any view) read the replaced file groups again, which is
why Hudi's archival policy never does that.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from tableservice.errors import CorruptFileError, FileMissingError, InvalidTimelineError, TableServiceError
from tableservice.hudi.models import decode_instant_content
from tableservice.hudi.table.config import TableConfig
from tableservice.hudi.timeline.active import ActiveTimeline
from tableservice.hudi.timeline.archive_lsm import (
    archive_instants_lsm,
    clean_lsm,
    compact_lsm,
    latest_manifest,
    load_lsm_instants,
    lsm_completion_times,
)
from tableservice.hudi.timeline.archive_model import ArchivedInstant, ArchiveSource
from tableservice.hudi.timeline.archive_v1 import archive_instants_v6, load_archive_log_instants
from tableservice.hudi.timeline.instant import Instant, State, format_instant_time, timeline_timezone
from tableservice.storage import Storage, join

__all__ = [
    "ArchiveSource",
    "ArchivedInstant",
    "archive_instants",
    "archive_instants_lsm",
    "archive_instants_v6",
    "archived_completion_times",
    "clean_lsm",
    "compact_lsm",
    "latest_manifest",
    "load_archived_instants",
    "read_archive_sources",
]


def load_archived_instants(
    storage: Storage,
    base_path: str,
    config: TableConfig,
    *,
    start: str | None = None,
    end: str | None = None,
    completed_only: bool = False,
) -> list[ArchivedInstant]:
    """Archived instants with requested time in [start, end], sorted like the timeline; [] when nothing is archived.

    v6 yields one entry per archived state (requested, inflight, completed); `completed_only` keeps the completed
    ones. Corrupt archive files raise CorruptFileError naming the file; metadata is decoded on demand.
    """
    folder = join(base_path.rstrip("/"), config.history_folder)
    if config.layout_version == 1:
        out = load_archive_log_instants(storage, folder, start=start, end=end, table=config.name)
    else:
        out = load_lsm_instants(storage, folder, start=start, end=end)
    return [i for i in out if i.is_completed] if completed_only else out


def archived_completion_times(
    storage: Storage, base_path: str, config: TableConfig, *, start: str | None = None, end: str | None = None
) -> dict[str, str]:
    """Requested time -> completion time of archived completed instants (v6: where `stateTransitionTime` was
    recorded). Used for log files whose delta commits have been archived."""
    folder = join(base_path.rstrip("/"), config.history_folder)
    if config.layout_version == 1:
        return {
            i.requested_time: i.completion_time
            for i in load_archive_log_instants(storage, folder, start=start, end=end, table=config.name)
            if i.is_completed and i.completion_time is not None
        }
    return lsm_completion_times(storage, folder, start=start, end=end)


def _require_decodable(
    active: ActiveTimeline, config: TableConfig, instant: Instant, contents: dict[State, bytes | None]
) -> None:
    """An instant is archived only when its completed metadata (and its plan) decode: the archive is where readers
    find them once the active files are gone, so a damaged file is refused here rather than preserved."""
    layout = config.layout_version
    checks = [(State.COMPLETED, instant.completed_action(layout).value)]
    if contents.get(State.REQUESTED):
        checks.append((State.REQUESTED, instant.action.value))
    for state, action in checks:
        data = contents[state]
        path = active.path_of(instant.with_state(state, instant.completion_time))
        try:
            decode_instant_content(data or b"", action=action, state=state, path=path)
        except TableServiceError as e:
            raise CorruptFileError(
                f"{instant} is not archived: its {state.name.lower()} file does not decode ({e.problem})",
                table=config.name,
                path=path,
            ) from e


def read_archive_sources(
    storage: Storage, base_path: str, config: TableConfig, instants: Iterable[Instant]
) -> list[ArchiveSource]:
    """The timeline files of completed instants, read from the active timeline, ready to archive. v6 transition
    times are the files' modification times as instant times in the table's timeline time zone."""
    active = ActiveTimeline(storage, base_path.rstrip("/"), config)
    tz = timeline_timezone(config.timezone_name)
    out = []
    for instant in instants:
        if not instant.is_completed:
            raise InvalidTimelineError(f"only completed instants are archived, not {instant}", table=config.name)
        contents: dict[State, bytes | None] = {}
        times: dict[State, str] = {}
        for state in (State.REQUESTED, State.INFLIGHT, State.COMPLETED):
            path = active.path_of(instant.with_state(state, instant.completion_time))
            info = storage.info(path)
            if info is None:
                contents[state] = None
                continue
            contents[state] = storage.read_bytes(path)
            moment = datetime.fromtimestamp(info.mtime_ms / 1000, tz=UTC)
            times[state] = format_instant_time(moment, tz)
        completed = contents[State.COMPLETED]
        if completed is None:
            path = active.path_of(instant)
            raise FileMissingError(f"completed file of {instant} does not exist", table=config.name, path=path)
        _require_decodable(active, config, instant, contents)
        out.append(
            ArchiveSource(
                instant=instant,
                completed=completed,
                requested=contents[State.REQUESTED],
                inflight=contents[State.INFLIGHT],
                transition_times=times if config.layout_version == 1 else {},
            )
        )
    return out


def archive_instants(
    storage: Storage, base_path: str, config: TableConfig, sources: Iterable[ArchiveSource]
) -> list[str]:
    """Archive completed instants in the table's layout; returns the archive files written."""
    if config.layout_version == 1:
        return archive_instants_v6(storage, base_path.rstrip("/"), config, sources)
    name = archive_instants_lsm(storage, base_path.rstrip("/"), config, sources)
    return [] if name is None else [join(base_path.rstrip("/"), config.history_folder, name)]
