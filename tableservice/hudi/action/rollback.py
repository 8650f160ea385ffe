"""Rolling back a pending instant: a failed write, or an inflight compaction or clustering attempt.

A rollback is itself an instant: `<R>.rollback.requested` holds the plan (HoodieRollbackPlan), then
`.rollback.inflight`, then the completed file with HoodieRollbackMetadata. The plan comes from the attempt's
markers (direct or timeline-server markers); without markers, from file names (base files, and v8+ log files,
named with the instant) and, in table version 6, from the log blocks the instant appended.

What a plan undoes:
- files the attempt created or merged (CREATE/MERGE markers) are deleted;
- table version 6, log blocks the attempt appended (APPEND markers): a rollback command block (target = the
  instant) is written into a new log file of the same file slice, named with write token `1-0-1` as Hudi does;
  the failed log file stays and readers drop its blocks.

Afterwards a failed write's requested/inflight files are deleted; a compaction or clustering instant goes back
to requested so that its plan runs again under the same instant. Every step is idempotent: a rollback that
crashes half-way is resumed by `resume_pending_rollbacks`.
"""

from __future__ import annotations

import logging
import time

from tableservice.errors import InvalidPlanError, TableServiceError
from tableservice.hudi.action.commit import Held, LockFactory, complete, no_lock
from tableservice.hudi.action.plan_paths import check_plan_location, resolve_absolute
from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.hudi.file_group.rollback_blocks import append_rollback_block, has_blocks_of
from tableservice.hudi.models import (
    HoodieInstantInfo,
    HoodieRollbackMetadata,
    HoodieRollbackPartitionMetadata,
    HoodieRollbackPlan,
    HoodieRollbackRequest,
    decode_rollback_plan,
    encode_rollback_plan,
)
from tableservice.hudi.models.rollback import rollback_requests
from tableservice.hudi.table.fs_view import partition_location
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.hudi.write.markers import MarkerType, delete_markers, list_marked_files
from tableservice.storage import join

log = logging.getLogger(__name__)
TABLE_SERVICE_ACTIONS = frozenset({Action.COMPACTION, Action.LOG_COMPACTION, Action.CLUSTERING})


def _is_table_service(table: HudiTable, instant: Instant) -> bool:
    return instant.action in TABLE_SERVICE_ACTIONS or table.is_clustering(instant)


def plan_rollback(table: HudiTable, target: Instant) -> HoodieRollbackPlan:
    """What undoing `target` takes, from its markers or, without markers, from the files on disk."""
    t = target.requested_time
    markers = list_marked_files(table.storage, table.base_path, t)
    deletes: dict[str, list[str]] = {}
    appended: dict[tuple[str, str, str], dict[str, int]] = {}
    if markers:
        for partition, name, kind in markers:
            location = join(partition_location(table.base_path, partition), name)
            info = table.storage.info(location)
            if kind is MarkerType.APPEND and table.config.version < 8:
                lname = parse_log_file_name(name)
                if lname is not None and info is not None:
                    appended.setdefault((partition, lname.file_id, lname.instant_time), {})[location] = info.size
            elif info is not None:
                deletes.setdefault(partition, []).append(location)
    else:
        service = _is_table_service(table, target)
        for partition, files in table.list_storage_files().items():
            for fi in files:
                base = parse_base_file_name(fi.name)
                if base is not None and base.instant_time == t:
                    deletes.setdefault(partition, []).append(fi.location)
                    continue
                lname = parse_log_file_name(fi.name) if not service else None
                if lname is None:
                    continue
                if table.config.version >= 8 and lname.instant_time == t:
                    deletes.setdefault(partition, []).append(fi.location)
                elif table.config.version < 8 and has_blocks_of(table.storage, fi.location, t, table=table.label):
                    appended.setdefault((partition, lname.file_id, lname.instant_time), {})[fi.location] = fi.size
    requests = rollback_requests(deletes, appended, no_blocks={})
    for request in requests:  # a plan naming a relative path could only run in the folder it was made in
        for location in (*request.files_to_be_deleted, *(request.log_blocks_to_be_deleted or {})):
            check_plan_location(table.base_path, location, table=table.name)
    return HoodieRollbackPlan(
        instant_to_rollback=HoodieInstantInfo(commit_time=t, action=target.action.value),
        RollbackRequests=tuple(requests),
        version=1,
    )


def rollback(
    table: HudiTable, target: Instant, *, lock: LockFactory | None = None, lease: Held | None = None
) -> Instant:
    """Roll back a pending instant; returns the completed rollback instant."""
    lock_factory = lock if lock is not None else no_lock
    if target.is_completed:
        raise InvalidPlanError(
            f"{target} is completed; restoring completed instants is not supported", table=table.label
        )
    plan = plan_rollback(table, target)
    with lock_factory():
        timeline = table.reload()
        rollback_time = table.active.new_instant_time(timeline)
        requested = table.active.create_requested(
            rollback_time, Action.ROLLBACK, encode_rollback_plan(plan, table_version=table.config.version)
        )
    inflight = table.active.transition_to_inflight(requested)
    return _execute(table, inflight, plan, target, lock_factory, lease)


def resume_rollback(
    table: HudiTable, instant: Instant, *, lock: LockFactory | None = None, lease: Held | None = None
) -> Instant:
    """Finish a rollback a crashed process left requested or inflight; returns the completed rollback instant."""
    path = table.active.path_of(instant.with_state(State.REQUESTED))
    plan = decode_rollback_plan(table.storage.read_bytes(path), path=path)
    if plan.instant_to_rollback is None:
        raise InvalidPlanError("rollback plan names no instant", table=table.label, path=path)
    info = plan.instant_to_rollback
    target = table.timeline().get(info.commit_time)
    if target is None:
        target = Instant(info.commit_time, Action(info.action), State.INFLIGHT)
    if instant.is_requested:
        instant = table.active.transition_to_inflight(instant)
    return _execute(table, instant, plan, target, lock if lock is not None else no_lock, lease)


def resume_pending_rollbacks(table: HudiTable, *, lock: LockFactory | None = None) -> list[Instant]:
    """Finish every rollback a crashed process left requested or inflight."""
    return [resume_rollback(table, instant, lock=lock) for instant in table.reload().pending_of(Action.ROLLBACK)]


def _execute(
    table: HudiTable,
    inflight: Instant,
    plan: HoodieRollbackPlan,
    target: Instant,
    lock_factory: LockFactory,
    lease: Held | None = None,
) -> Instant:
    started = time.monotonic()
    storage = table.storage
    plan_file = table.active.path_of(inflight.with_state(State.REQUESTED))
    partitions: dict[str, HoodieRollbackPartitionMetadata] = {}
    total_deleted = 0
    for request in plan.rollback_requests or ():
        p = request.partition_path
        ok: list[str] = []
        failed: list[str] = []
        for path in request.files_to_be_deleted:
            location = resolve_absolute(table.base_path, path, plan_file=plan_file)
            try:
                storage.delete(location)
                ok.append(path)
            except TableServiceError as e:
                log.warning(
                    "rollback could not delete %s: %s",
                    location,
                    e,
                    extra={"table": table.label, "instant": target.requested_time},
                )
                failed.append(path)
        rollback_logs: dict[str, int] = {}
        if request.log_blocks_to_be_deleted:
            rollback_logs = _append_rollback_block(
                table, request, inflight.requested_time, target.requested_time, plan_file
            )
        total_deleted += len(ok)
        previous = partitions.get(p)
        partitions[p] = HoodieRollbackPartitionMetadata(
            partition_path=p,
            success_delete_files=(previous.success_delete_files if previous else ()) + tuple(ok),
            failed_delete_files=(previous.failed_delete_files if previous else ()) + tuple(failed),
            rollback_log_files={**((previous.rollback_log_files or {}) if previous else {}), **rollback_logs},
            log_files_from_failed_commit={
                **((previous.log_files_from_failed_commit or {}) if previous else {}),
                **dict(request.log_blocks_to_be_deleted or {}),
            },
        )
    metadata = HoodieRollbackMetadata(
        start_rollback_time=inflight.requested_time,
        time_taken_in_millis=int((time.monotonic() - started) * 1000),
        total_files_deleted=total_deleted,
        commits_rollback=(target.requested_time,),
        partition_metadata=partitions,
        version=1,
        instants_rollback=(HoodieInstantInfo(commit_time=target.requested_time, action=target.action.value),),
    )
    delete_markers(storage, table.base_path, target.requested_time)
    current = table.reload().get(target.requested_time)
    if current is not None and not current.is_completed:
        if _is_table_service(table, current):
            if current.is_inflight:
                table.active.revert_to_requested(current)
        else:
            table.active.delete_pending(current)
    done, _ = complete(
        table,
        inflight,
        lambda _: metadata,
        lock=lock_factory,
        lease=lease,
    )
    log.info("rolled back %s", target, extra={"table": table.label, "instant": target.requested_time})
    return done


def _append_rollback_block(
    table: HudiTable, request: HoodieRollbackRequest, rollback_time: str, target: str, plan_file: str
) -> dict[str, int]:
    """Table version 6: a command block that drops `target`'s blocks, in a new log file of the slice."""
    folder = partition_location(table.base_path, request.partition_path)
    # The plan's paths must lie inside the table (plans may come from other writers). A run interrupted after
    # writing the block writes another one on resume; a second rollback block of the same target is harmless.
    for loc in request.log_blocks_to_be_deleted or {}:
        resolve_absolute(table.base_path, loc, plan_file=plan_file)
    location, size = append_rollback_block(
        table.storage, folder, request.file_id or "", request.latest_base_instant or "", rollback_time, target
    )
    return {location: size}
