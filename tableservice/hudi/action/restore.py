"""Restoring a table to a savepoint: every write instant after it is rolled back, newest first.

Facts (Apache Hudi `RestorePlanActionExecutor`, `BaseRestoreActionExecutor`, `Copy/MergeOnReadRestoreActionExecutor`,
`ListingBasedRollbackStrategy`, `SavepointHelpers`, `BaseHoodieWriteClient.restoreToSavepoint`,
`HoodieBackedTableMetadataWriter.update(HoodieRestoreMetadata)`):

- Only a completed savepoint on the active timeline can be restored to ("Could not restore to a non-existing
  savepoint"); one older than the active timeline (archived) is refused too.
- `<R>.restore.requested` holds `HoodieRestorePlan` (version 2, `savepointToRestoreTimestamp` = T): pending
  clustering after T first, then every write instant (commit, deltacommit, replacecommit, clustering, compaction,
  log compaction; completed or pending) after T, newest first. After T means: table version 6, requested after T;
  from version 8, completed after T completed (pending ones count as the newest). Cleans, rollbacks and savepoints
  are not in the plan. A pending restore to the same savepoint is resumed under its instant (Hudi reuses it).
- `.restore.inflight`; then each instant is rolled back as a listing-based rollback (markers are not used): a
  rollback instant `<r>.rollback.requested` (its plan) and `.rollback.inflight`, the files deleted (base files named
  with the instant; from version 8 log files named with it; in version 6 every file whose name carries the
  instant as base instant, and a rollback command block appended to each other log file holding the instant's
  blocks), the instant's timeline files removed. The rollback is never completed (Hudi skips publishing it); an
  instant already gone from the timeline (an earlier attempt rolled it back) is skipped.
- The metadata table: Hudi restores it to T and syncs it from a listing, or deletes it when it cannot (T at or
  before its oldest compaction, or before its timeline). We rebuild it: the partitions it listed (secondary
  indexes excepted: the indexing action builds those) are initialised again from the restored table. It is done
  before the restore completes, so a re-run after a crash rebuilds it again.
- The completed `<R>.restore` (layout 2: `<R>_<c>.restore`) holds `HoodieRestoreMetadata`, one
  `HoodieRollbackMetadata` per instant rolled back; then every rollback instant after T is removed.

The whole restore runs under the table lock, through the commit path.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from tableservice.errors import RestoreError, TableServiceError
from tableservice.hudi.action.commit import Change, ChangeKind, LockFactory, commit
from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.hudi.file_group.rollback_blocks import has_blocks_of, undo_writes
from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.metadata.keys import is_secondary_index
from tableservice.hudi.metadata.reader import metadata_table_path
from tableservice.hudi.models import (
    HoodieInstantInfo,
    HoodieRestoreMetadata,
    HoodieRestorePlan,
    HoodieRollbackMetadata,
    HoodieRollbackPartitionMetadata,
    HoodieRollbackPlan,
    decode_restore_plan,
    encode_restore_metadata,
    encode_restore_plan,
    encode_rollback_plan,
)
from tableservice.hudi.models.rollback import rollback_requests
from tableservice.hudi.table import config as tc
from tableservice.hudi.table.config import store_table_config
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from tableservice.hudi.write.markers import delete_markers
from tableservice.storage import FileInfo

log = logging.getLogger(__name__)

__all__ = ["RestoreError", "RestoreResult", "pending_restore", "plan_restore", "restore", "resume_restore"]


@dataclass(frozen=True)
class RestoreResult:
    instant: Instant  # the completed restore instant
    metadata: HoodieRestoreMetadata
    metadata_partitions: tuple[str, ...]  # the metadata table's partitions rebuilt (empty without one)


# A completed compaction, log compaction or clustering is named by the action it completes as (Hudi's
# HoodieInstant.getAction() of the completed file).
_COMPLETES_AS = {Action.COMPACTION: "commit", Action.LOG_COMPACTION: "deltacommit", Action.CLUSTERING: "replacecommit"}


def _action_name(instant: Instant) -> str:
    return _COMPLETES_AS.get(instant.action, instant.action.value) if instant.is_completed else instant.action.value


def _info(instant: Instant) -> HoodieInstantInfo:
    return HoodieInstantInfo(commit_time=instant.requested_time, action=_action_name(instant))


def _refuse(table: HudiTable, savepoint_time: str, problem: str) -> RestoreError:
    return RestoreError(f"cannot restore to {savepoint_time}: {problem}", table=table.label)


def _check_savepoint(table: HudiTable, timeline: Timeline, savepoint_time: str) -> Instant:
    """The savepointed write instant at `savepoint_time`; RestoreError when Hudi would refuse."""
    savepoint = timeline.get(savepoint_time, Action.SAVEPOINT)
    if savepoint is None or not savepoint.is_completed:
        if timeline.is_before_start(savepoint_time):
            raise _refuse(table, savepoint_time, "it is older than the active timeline (archived)")
        what = "its savepoint is not completed" if savepoint is not None else "it is not a savepoint"
        raise _refuse(table, savepoint_time, what)
    commit_instant = next(
        (i for i in timeline if i.requested_time == savepoint_time and i.action in WRITE_ACTIONS), None
    )
    if commit_instant is None or not commit_instant.is_completed:
        raise _refuse(table, savepoint_time, "the savepointed commit is not on the active timeline")
    return commit_instant


def _after_savepoint(table: HudiTable, timeline: Timeline, savepointed: Instant) -> list[Instant]:
    """The write instants after the savepoint, in the order they are rolled back."""
    t = savepointed.requested_time
    clustering = sorted(
        (i for i in timeline.pending() if i.requested_time > t and table.is_clustering(i)),
        key=lambda i: i.requested_time,
        reverse=True,
    )
    writes = [i for i in timeline if i.action in WRITE_ACTIONS and i not in clustering and i != savepointed]
    if table.config.version < 8:
        later = sorted((i for i in writes if i.requested_time > t), key=lambda i: i.requested_time, reverse=True)
    else:
        done = savepointed.completion_time or t
        completed = [i for i in writes if i.is_completed and (i.completion_time or i.requested_time) > done]
        pending = [i for i in writes if not i.is_completed and i.requested_time > t]
        later = sorted(pending, key=lambda i: i.requested_time, reverse=True) + sorted(
            completed, key=lambda i: i.completion_time or i.requested_time, reverse=True
        )
    return [*clustering, *later]


def pending_restore(timeline: Timeline) -> Instant | None:
    """The latest restore left requested or inflight."""
    pending = list(timeline.pending_of(Action.RESTORE))
    return pending[-1] if pending else None


def _read_plan(table: HudiTable, instant: Instant) -> HoodieRestorePlan:
    path = table.active.path_of(instant.with_state(State.REQUESTED))
    try:
        return decode_restore_plan(table.storage.read_bytes(path), path=path)
    except TableServiceError as e:
        raise e.with_context(table=table.label) from e


def plan_restore(table: HudiTable, savepoint_time: str, timeline: Timeline | None = None) -> HoodieRestorePlan:
    """The plan a restore to `savepoint_time` runs now (nothing is written); RestoreError when refused. A pending
    restore to the same savepoint gives its own plan; one to another savepoint is refused until it is finished."""
    timeline = timeline if timeline is not None else table.reload()
    pending = pending_restore(timeline)
    if pending is not None:
        plan = _read_plan(table, pending)
        if plan.savepoint_to_restore_timestamp != savepoint_time:
            raise _refuse(
                table,
                savepoint_time,
                f"restore {pending.requested_time} to {plan.savepoint_to_restore_timestamp} is pending: finish it "
                "first",
            )
        return plan
    savepointed = _check_savepoint(table, timeline, savepoint_time)
    instants = _after_savepoint(table, timeline, savepointed)
    return HoodieRestorePlan(
        instants_to_rollback=tuple(_info(i) for i in instants),
        version=2,
        savepoint_to_restore_timestamp=savepoint_time,
    )


def restore(table: HudiTable, savepoint_time: str, *, lock: LockFactory | None = None) -> RestoreResult:
    """Restore the table to the savepoint at `savepoint_time` (or finish a pending restore to it), under the table
    lock for the whole run. RestoreError (naming the table and the instant) when refused."""

    def write(timeline: Timeline, _: Change) -> RestoreResult:
        plan = plan_restore(table, savepoint_time, timeline)
        instant = pending_restore(timeline)
        if instant is None:
            restore_time = table.active.new_instant_time(timeline)
            data = encode_restore_plan(plan, table_version=table.config.version)
            instant = table.active.create_requested(restore_time, Action.RESTORE, data)
        return _execute(table, instant, plan)

    change = Change(ChangeKind.RESTORE, Instant(savepoint_time, Action.RESTORE, State.COMPLETED))
    result = commit(table, change, write, lock=lock)
    table.reload()
    return result


def resume_restore(table: HudiTable, *, lock: LockFactory | None = None) -> RestoreResult | None:
    """Finish the restore a crashed process left pending; None when there is none."""
    instant = pending_restore(table.reload())
    if instant is None:
        return None
    target = _read_plan(table, instant).savepoint_to_restore_timestamp
    if not target:
        raise RestoreError(
            f"restore {instant.requested_time}: its plan names no savepoint (plan version 1)",
            table=table.label,
            path=table.active.path_of(instant.with_state(State.REQUESTED)),
        )
    return restore(table, target, lock=lock)


def _execute(table: HudiTable, instant: Instant, plan: HoodieRestorePlan) -> RestoreResult:
    started = time.monotonic()
    savepoint_time = plan.savepoint_to_restore_timestamp or ""
    if instant.is_requested:
        instant = table.active.transition_to_inflight(instant)
    rolled: list[Instant] = []
    per_instant: dict[str, tuple[HoodieRollbackMetadata | None, ...]] = {}
    listing = table.list_storage_files()  # once: each rollback updates it with the files it deleted and wrote
    for info in plan.instants_to_rollback:
        current = next(
            (
                i
                for i in table.reload()
                if i.requested_time == info.commit_time and info.action in (i.action.value, _action_name(i))
            ),
            None,
        )
        if current is None:
            log.info("restore: %s %s was already rolled back", info.action, info.commit_time)
            continue
        per_instant[current.requested_time] = (_rollback_instant(table, current, listing),)
        rolled.append(current)
    partitions = _rebuild_metadata_table(table)
    metadata = HoodieRestoreMetadata(
        start_restore_time=instant.requested_time,
        time_taken_in_millis=int((time.monotonic() - started) * 1000),
        instants_to_rollback=tuple(i.requested_time for i in rolled),
        hoodie_restore_metadata=per_instant,
        version=1,
        restore_instant_info=tuple(_info(i) for i in rolled),
        extra_metadata={} if table.config.version >= 8 else None,
    )
    timeline = table.reload()
    done = table.active.transition_to_completed(
        instant, encode_restore_metadata(metadata, table_version=table.config.version), timeline=timeline
    )
    for rb in table.reload().of_actions(Action.ROLLBACK):
        if rb.requested_time > savepoint_time:
            table.active.delete(rb)
    log.info(
        "restored to savepoint %s: %d instants rolled back",
        savepoint_time,
        len(rolled),
        extra={"table": table.label, "instant": instant.requested_time},
    )
    return RestoreResult(done, metadata, partitions)


def _rollback_instant(table: HudiTable, target: Instant, listing: dict[str, list[FileInfo]]) -> HoodieRollbackMetadata:
    """One listing-based rollback of `target` (completed or pending): plan, inflight, files, timeline files.
    `listing` (the table's files by partition) is brought up to date with what the rollback deleted and wrote."""
    started = time.monotonic()
    t = target.requested_time
    v6 = table.config.version < 8
    deletes: dict[str, list[str]] = defaultdict(list)
    appended: dict[tuple[str, str, str], dict[str, int]] = defaultdict(dict)
    for partition, files in sorted(listing.items()):
        for fi in files:
            base = parse_base_file_name(fi.name)
            lname = parse_log_file_name(fi.name) if base is None else None
            named = base.instant_time if base is not None else lname.instant_time if lname is not None else None
            if named == t:
                deletes[partition].append(fi.location)
            elif (
                lname is not None
                and v6
                and target.action is Action.DELTA_COMMIT
                and has_blocks_of(table.storage, fi.location, t, table=table.label)
            ):
                appended[(partition, lname.file_id, lname.instant_time)][fi.location] = fi.size
    plan = HoodieRollbackPlan(
        instant_to_rollback=_info(target),
        RollbackRequests=rollback_requests(deletes, appended, no_blocks={}),
        version=1,
    )
    version = table.config.version
    rollback_time = table.active.new_instant_time(table.reload())
    requested = table.active.create_requested(
        rollback_time, Action.ROLLBACK, encode_rollback_plan(plan, table_version=version)
    )
    table.active.transition_to_inflight(requested)
    partitions = undo_writes(
        table.storage, table.base_path, deletes, appended, rollback_time=rollback_time, target_time=t
    )
    _apply(listing, partitions)
    delete_markers(table.storage, table.base_path, t)
    table.active.delete(target)
    log.info("restore: rolled back %s", target, extra={"table": table.label, "instant": rollback_time})
    return HoodieRollbackMetadata(
        start_rollback_time=rollback_time,
        time_taken_in_millis=int((time.monotonic() - started) * 1000),
        total_files_deleted=sum(len(v) for v in deletes.values()),
        commits_rollback=(t,),
        partition_metadata=partitions,
        version=1,
        instants_rollback=(_info(target),),
    )


def _apply(listing: dict[str, list[FileInfo]], partitions: Mapping[str, HoodieRollbackPartitionMetadata]) -> None:
    """The files a rollback deleted leave the listing; the log files of its command blocks join it."""
    now_ms = int(time.time() * 1000)
    for p, done in partitions.items():
        gone = set(done.success_delete_files)
        written = done.rollback_log_files or {}
        kept = [fi for fi in listing.get(p, []) if fi.location not in gone and fi.location not in written]
        listing[p] = kept + [FileInfo(location, size, now_ms, False) for location, size in sorted(written.items())]


def _rebuild_metadata_table(table: HudiTable) -> tuple[str, ...]:
    """The metadata table dropped (no partition listed, folder removed) and its partitions built again from the
    restored table; the partitions rebuilt (none without a metadata table)."""
    config = table.reload_config()
    listed = [*config.metadata_partitions, *config.metadata_partitions_inflight]
    if not listed:
        return ()
    store_table_config(
        table.storage,
        table.base_path,
        config.with_updates({tc.METADATA_PARTITIONS: "", tc.METADATA_PARTITIONS_INFLIGHT: ""}),
    )
    table.storage.delete_dir(metadata_table_path(table.base_path))
    table.reload_config()
    wanted = sorted({p for p in listed if not is_secondary_index(p)})
    skipped = sorted({p for p in listed if is_secondary_index(p)})
    if skipped:
        log.warning(
            "restore: secondary indexes %s are not rebuilt (the indexing action builds them)",
            ",".join(skipped),
            extra={"table": table.label},
        )
    return initialize_metadata_table(table, wanted) if wanted else ()
