"""Savepoints: marking a completed commit so that cleaning keeps its files and archival stops before it.

Facts (Apache Hudi `SavepointActionExecutor`, `SavepointHelpers`, `TimelineMetadataUtils.convertSavepointMetadata`,
`CleanPlanner`; no fixture table holds a savepoint):

- A savepoint is an instant with the *same requested time as the commit it protects*: `<t>.savepoint.inflight`
  (empty), then the completed `<t>.savepoint` (layout 2: `<t>_<c>.savepoint`, `c` a new completion time) holding
  `HoodieSavepointMetadata`. There is no requested state.
- Only a completed commit of the active timeline's commits timeline (commit, deltacommit, replacecommit,
  clustering, compaction) can be savepointed ("Could not savepoint non-existing commit"), and not one older than
  the earliest commit the last clean retained: the last clean instant of any state; a completed clean gives its
  metadata's `earliestCommitToRetain`, a pending one its plan's `earliestInstantToRetain`; without a clean, the
  first completed commit ("Could not savepoint commit <t> as this is beyond the lookup window <ectr>").
- Metadata: `savepointedBy` (the user), `savepointedAt` (`System.currentTimeMillis()`), `comments`,
  `partitionMetadata` = partition path -> `{partitionPath, savepointDataFile}` with the *file names* (not paths)
  of each file group's latest slice with base instant <= `t` (`getLatestFileSlicesBeforeOrOn(partition, t, true)`
  over the whole timeline, so the slice carries every committed log file it has now, as hudi-rs slices it) in
  every partition, for file groups not replaced at or before `t`: the base file and, in current releases, the
  log files (older releases listed base files only). When that slice was opened by a pending compaction we also
  list the slice before it, which a read as of `t` needs (Hudi lists the new, base-less slice only).
- Deleting a savepoint removes the completed file, then the inflight file (`SavepointHelpers.deleteSavepoint`);
  Hudi only warns when there is none.
- The cleaner keeps every file named in a completed savepoint (`CleanPlanner.getSavepointedDataFiles`).

A savepoint shares the requested time of the commit it protects; the timeline keeps the two apart.
Every change here is made under the table lock: the checks, the listing of the slices and both timeline files.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from tableservice.errors import SavepointError, TableServiceError
from tableservice.hudi.action.commit import Change, ChangeKind, LockFactory, commit
from tableservice.hudi.models import (
    HoodieSavepointMetadata,
    HoodieSavepointPartitionMetadata,
    decode_clean_metadata,
    decode_cleaner_plan,
    decode_savepoint_metadata,
    encode_savepoint_metadata,
)
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import WRITE_ACTIONS, Action, Instant, State

log = logging.getLogger(__name__)

__all__ = [
    "SavepointError",
    "SavepointInfo",
    "create_savepoint",
    "delete_savepoint",
    "earliest_commit_retained_by_cleaner",
    "list_savepoints",
    "savepoint_instants",
    "savepointed_files",
]


@dataclass(frozen=True)
class SavepointInfo:
    """One savepoint instant; `metadata` is None while it is inflight."""

    instant_time: str
    state: State
    completion_time: str | None
    metadata: HoodieSavepointMetadata | None

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    @property
    def savepointed_by(self) -> str:
        return self.metadata.savepointed_by if self.metadata else ""

    @property
    def savepointed_at_ms(self) -> int | None:
        return int(self.metadata.savepointed_at) if self.metadata else None

    @property
    def comments(self) -> str:
        return self.metadata.comments if self.metadata else ""

    def files(self) -> dict[str, tuple[str, ...]]:
        """Partition path -> savepointed file names."""
        if self.metadata is None:
            return {}
        return {p: tuple(m.savepoint_data_file) for p, m in sorted(self.metadata.partition_metadata.items())}


def savepoint_instants(table: HudiTable) -> list[Instant]:
    """Savepoint instants (inflight or completed), from a fresh load of the timeline (one listing)."""
    return [i for i in table.reload() if i.action is Action.SAVEPOINT]


def earliest_commit_retained_by_cleaner(table: HudiTable, timeline: Timeline) -> str | None:
    """The lower bound of the cleaner's lookup window as SavepointActionExecutor reads it: the last clean (any
    state): a completed one's `earliestCommitToRetain`, a pending one's plan `earliestInstantToRetain`; without a
    clean, the first completed commit. None when there is no bound (no commit, or an empty ECTR)."""
    cleans = [i for i in timeline if i.action is Action.CLEAN]
    if not cleans:
        first = timeline.completed_writes().first()
        return first.requested_time if first else None
    last = cleans[-1]
    if last.is_completed:
        path = table.active.path_of(last)
        md = decode_clean_metadata(table.storage.read_bytes(path), path=path)
        return md.earliest_commit_to_retain or None
    path = table.active.path_of(last.with_state(State.REQUESTED))
    plan = decode_cleaner_plan(table.storage.read_bytes(path), path=path)
    ectr = plan.earliest_instant_to_retain
    return ectr.timestamp if ectr is not None and ectr.timestamp else None


def _check_savepointable(table: HudiTable, timeline: Timeline, instant_time: str) -> Instant:
    same_time = [i for i in timeline if i.requested_time == instant_time]
    if any(i.action is Action.SAVEPOINT for i in same_time):
        raise SavepointError(
            f"instant {instant_time} is already savepointed", instant_time=instant_time, table=table.label
        )
    writes = [i for i in same_time if i.action in WRITE_ACTIONS]
    if not writes:
        where = (
            "is archived (older than the active timeline)"
            if timeline.is_before_start(instant_time)
            else "does not exist on the active timeline"
        )
        other = f" (it is a {same_time[0].action.value})" if same_time else ""
        raise SavepointError(
            f"could not savepoint non-existing commit {instant_time}: it {where}{other}",
            instant_time=instant_time,
            table=table.label,
        )
    commit = writes[0]
    if not commit.is_completed:
        raise SavepointError(
            f"could not savepoint commit {instant_time}: {commit} is pending; only completed commits can be"
            " savepointed",
            instant_time=instant_time,
            table=table.label,
            path=table.active.path_of(commit),
        )
    ectr = earliest_commit_retained_by_cleaner(table, timeline)
    if ectr is not None and instant_time < ectr:
        raise SavepointError(
            f"could not savepoint commit {instant_time} as it is beyond the lookup window {ectr} "
            "(the earliest commit the last clean retained)",
            instant_time=instant_time,
            table=table.label,
        )
    return commit


def _latest_files(table: HudiTable, timeline: Timeline, instant_time: str) -> dict[str, tuple[str, ...]]:
    """Per partition, the files of each file group's latest slice with base instant <= `instant_time` (Hudi's
    getLatestFileSlicesBeforeOrOn over the whole timeline: the slice keeps every committed log file it has now),
    for file groups not replaced at or before that instant. A slice a pending compaction opened brings the
    slice before it too (a read as of the instant needs its base file)."""
    view = table.file_system_view(timeline=timeline)
    out: dict[str, tuple[str, ...]] = {}
    for partition in view.partitions():
        names: list[str] = []
        for group in view.all_file_groups(partition):
            replaced_at = view.inputs.replaced.get(group.id)
            if replaced_at is not None and replaced_at <= instant_time:
                continue
            slices = [s for s in group.slices if s.base_instant_time <= instant_time]
            if not slices:
                continue
            chosen = slices[:1]
            if (
                slices[0].base_file is None
                and view.inputs.pending_compaction.get(group.id) == slices[0].base_instant_time
            ):
                chosen = slices[:2]
            for s in chosen:
                if s.base_file is not None:
                    names.append(s.base_file.file_name)
                names.extend(lf.file_name for lf in s.log_files)
        out[partition] = tuple(names)
    return out


def create_savepoint(
    table: HudiTable, instant_time: str, *, user: str = "", comments: str = "", lock: LockFactory | None = None
) -> SavepointInfo:
    """Savepoint the completed commit `instant_time`; SavepointError (naming the instant) when Hudi would refuse."""

    def write(timeline: Timeline, _: Change) -> tuple[Instant, HoodieSavepointMetadata]:
        _check_savepointable(table, timeline, instant_time)
        files = _latest_files(table, timeline, instant_time)
        metadata = HoodieSavepointMetadata(
            savepointed_by=user,
            savepointed_at=int(time.time() * 1000),
            comments=comments,
            partition_metadata={
                p: HoodieSavepointPartitionMetadata(partition_path=p, savepoint_data_file=names)
                for p, names in files.items()
            },
            version=1,
        )
        inflight = table.active.create_inflight(instant_time, Action.SAVEPOINT, b"")
        done = table.active.transition_to_completed(
            inflight, encode_savepoint_metadata(metadata, table_version=table.config.version), timeline=timeline
        )
        return done, metadata

    change = Change(ChangeKind.SAVEPOINT, Instant(instant_time, Action.SAVEPOINT, State.COMPLETED))
    done, metadata = commit(table, change, write, lock=lock)
    table.reload()
    log.info("savepoint %s created", instant_time, extra={"table": table.label, "instant": instant_time})
    return SavepointInfo(instant_time, State.COMPLETED, done.completion_time, metadata)


def delete_savepoint(table: HudiTable, instant_time: str, *, lock: LockFactory | None = None) -> bool:
    """Remove the savepoint at `instant_time` (completed file, then inflight file). False when there is none."""

    def write(timeline: Timeline, _: Change) -> bool:
        found = [i for i in timeline if i.action is Action.SAVEPOINT and i.requested_time == instant_time]
        if not found:
            return False
        instant = found[0]
        if instant.is_completed:
            table.storage.delete(table.active.path_of(instant))
        table.storage.delete(table.active.path_of(Instant(instant_time, Action.SAVEPOINT, State.INFLIGHT)))
        return True

    change = Change(ChangeKind.SAVEPOINT, Instant(instant_time, Action.SAVEPOINT, State.COMPLETED))
    if not commit(table, change, write, lock=lock):
        log.warning("no savepoint at %s", instant_time, extra={"table": table.label, "instant": instant_time})
        return False
    table.reload()
    log.info("savepoint %s deleted", instant_time, extra={"table": table.label, "instant": instant_time})
    return True


def _metadata(table: HudiTable, instant: Instant) -> HoodieSavepointMetadata:
    path = table.active.path_of(instant)
    try:
        return decode_savepoint_metadata(table.storage.read_bytes(path), path=path)
    except TableServiceError as e:
        raise e.with_context(table=table.label) from e


def list_savepoints(table: HudiTable) -> list[SavepointInfo]:
    """Every savepoint on the active timeline, oldest first, inflight ones included (metadata None)."""
    out = []
    for instant in savepoint_instants(table):
        md = _metadata(table, instant) if instant.is_completed else None
        out.append(SavepointInfo(instant.requested_time, instant.state, instant.completion_time, md))
    return out


def savepointed_files(table: HudiTable) -> set[tuple[str, str]]:
    """(partition path, file name) of every file a completed savepoint protects: what the cleaner must keep."""
    out: set[tuple[str, str]] = set()
    for instant in savepoint_instants(table):
        if instant.is_completed:
            for partition, pm in _metadata(table, instant).partition_metadata.items():
                out.update((partition, name) for name in pm.savepoint_data_file)
    return out
