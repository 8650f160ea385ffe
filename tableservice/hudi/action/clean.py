"""Executing clean instants: `<t>.clean.requested` (HoodieCleanerPlan) → `.clean.inflight` → completed `.clean`
(HoodieCleanMetadata), as Hudi's CleanActionExecutor does.

- Scheduling holds the table lock only to generate the instant time, plan against the timeline re-read under it
  and write the requested file. The planner is passed in (the format layer does not know policies): anything
  with `due(table)` and `plan(table, instant_time)`, e.g. `tableservice.planning.clean.plan.CleanPlanner`.
- Execution resolves every path of the plan first (`plan_paths.resolve_absolute`: plans written by other
  processes work; a path outside the table, a file that is not a base or log file, or one outside the
  partition it is listed under is an InvalidPlanError naming the plan file, and nothing is touched), moves the
  instant to inflight (table version 6 writes the plan into the inflight file, as Hudi 0.x; 8 and 9 an empty
  one, as Hudi 1.x), deletes the files on a thread pool, deletes the partitions in `partitionsToBeDeleted`, and
  writes the completed instant under the lock.
- A file that is already gone counts as deleted (re-running an interrupted clean gives the same metadata; Hudi
  1.x records it under failedDeleteFiles instead). A file that cannot be deleted is recorded in
  failedDeleteFiles; it stays on disk and in the file-system view, so the next clean plans it again (the planner
  also looks at the partitions of the last clean's failed deletes in incremental mode).
- A partition is deleted (its `.hoodie_partition_metadata` and its folder) only when nothing but partition
  metadata is left in it once the plan's files are gone: a file a concurrent writer added keeps it
  (`isPartitionDeleted` false). The base path of a non-partitioned table is never deleted.
- Re-running an inflight clean re-executes its plan under the same instant; a completed clean returns its
  metadata unchanged.
"""

from __future__ import annotations

import logging
import posixpath
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from tableservice.errors import InstantNotPendingError, InvalidPlanError, InvalidTimelineError, TableServiceError
from tableservice.hudi.action.commit import Held, LockFactory, complete, no_lock
from tableservice.hudi.action.plan_paths import relative_to_table, resolve_in_partition
from tableservice.hudi.file_group.filenames import (
    PARTITION_METADATA_FILE,
    check_relative_path,
    parse_base_file_name,
    parse_log_file_name,
)
from tableservice.hudi.models import (
    HoodieCleanerPlan,
    HoodieCleanMetadata,
    HoodieCleanPartitionMetadata,
    decode_clean_metadata,
    decode_cleaner_plan,
    encode_cleaner_plan,
)
from tableservice.hudi.table.fs_view import partition_location
from tableservice.hudi.table.hudi_table import HudiTable, Requested
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.storage import join
from tableservice.storage.requests import carry_context

log = logging.getLogger(__name__)
METADATA_VERSION = 2


class CleanPlanning(Protocol):
    """What scheduling needs from a clean policy (see `tableservice.planning.clean.plan.CleanPlanner`)."""

    def due(self, table: HudiTable) -> tuple[bool, str]: ...

    def plan(self, table: HudiTable, instant_time: str, timeline: Timeline) -> HoodieCleanerPlan | None: ...


# --- scheduling ------------------------------------------------------------------------------------


def schedule_clean(
    table: HudiTable,
    policy: CleanPlanning,
    *,
    lock: LockFactory | None = None,
    instant_time: str | None = None,
    force: bool = False,
) -> Instant | None:
    """Write `<t>.clean.requested` when a clean is due (or `force`) and the plan deletes something; else None."""
    if not force:  # `force`: the caller found it due; the plan is made on the timeline re-read under the lock
        table.reload()
        due, reason = policy.due(table)
        if not due:
            log.debug("clean not due: %s", reason, extra={"table": table.label})
            return None
    done = request_clean(table, policy, lock=lock, instant_time=instant_time)
    return done.instant if done is not None else None


def request_clean(
    table: HudiTable,
    policy: CleanPlanning,
    *,
    lock: LockFactory | None = None,
    instant_time: str | None = None,
    dry_run: bool = False,
) -> Requested[HoodieCleanerPlan] | None:
    """Make a clean plan now and write it (a `dry_run` writes nothing); None when nothing would go."""
    done = table.request(
        Action.CLEAN,
        lambda t, timeline: policy.plan(table, t, timeline),
        lambda plan: encode_cleaner_plan(plan, table_version=table.config.version),
        lock=lock if lock is not None else no_lock,
        instant_time=instant_time,
        dry_run=dry_run,
    )
    if done is not None and done.written:
        n = sum(len(v) for v in (done.plan.file_paths_to_be_deleted_per_partition or {}).values())
        log.info("scheduled clean of %d files", n, extra={"table": table.label, "instant": done.instant.requested_time})
    return done


# --- resolving a plan ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CleanTarget:
    partition: str
    path: str  # as written in the plan
    location: str  # resolved inside the table

    @property
    def file_name(self) -> str:
        return posixpath.basename(self.location)


@dataclass(frozen=True)
class ResolvedCleanPlan:
    """A plan's files and partitions, resolved and checked (`dry_run` returns it without touching anything)."""

    plan: HoodieCleanerPlan
    plan_file: str
    files: tuple[CleanTarget, ...]
    partitions_to_delete: tuple[str, ...]

    def locations(self) -> list[str]:
        return [f.location for f in self.files]


def resolve_clean_plan(table: HudiTable, plan: HoodieCleanerPlan, *, plan_file: str) -> ResolvedCleanPlan:
    """Every file of the plan mapped into the table; InvalidPlanError (naming `plan_file`) for a path outside the
    table or its partition, or a file that is not a base or log file."""
    targets: list[CleanTarget] = []
    for partition, infos in (plan.file_paths_to_be_deleted_per_partition or {}).items():
        for info in infos:
            if info.is_bootstrap_base_file:
                raise InvalidPlanError(
                    f"bootstrap base file {info.file_path!r} (bootstrapped tables are not cleaned)",
                    table=table.label,
                    path=plan_file,
                )
            if not info.file_path:
                raise InvalidPlanError(f"empty file path in partition {partition!r}", table=table.label, path=plan_file)
            targets.append(_target(table, partition, info.file_path, plan_file))
    if not plan.file_paths_to_be_deleted_per_partition:
        # Version-1 plans list file names per partition in the deprecated field.
        for partition, names in (plan.files_to_be_deleted_per_partition or {}).items():
            for name in names:
                rel_partition = _relative(table, partition, plan_file, what="partition")
                location = resolve_in_partition(table.base_path, rel_partition, name, plan_file=plan_file)
                targets.append(_target(table, partition, location, plan_file))
    partitions = []
    for partition in plan.partitions_to_be_deleted or ():
        rel = _relative(table, partition, plan_file, what="partition")
        if rel.split("/", 1)[0] == ".hoodie":
            raise InvalidPlanError(f"partition {partition!r} is inside .hoodie", table=table.label, path=plan_file)
        partitions.append(rel)
    return ResolvedCleanPlan(plan, plan_file, tuple(targets), tuple(partitions))


def _relative(table: HudiTable, partition: str, plan_file: str, *, what: str) -> str:
    if not partition:
        return ""
    try:
        check_relative_path(partition, what=what, source=plan_file)
        rel = relative_to_table(table.base_path, join(table.base_path, partition), plan_file=plan_file)
    except TableServiceError as e:
        raise e.with_context(table=table.label) from e
    if posixpath.normpath(rel) != rel:
        raise InvalidPlanError(f"{what} {partition!r} is not a normal path", table=table.label, path=plan_file)
    return rel


def _target(table: HudiTable, partition: str, path: str, plan_file: str) -> CleanTarget:
    try:
        rel = relative_to_table(table.base_path, path, plan_file=plan_file)
    except TableServiceError as e:
        raise e.with_context(table=table.label) from e
    folder, _, name = rel.rpartition("/")
    expected = _relative(table, partition, plan_file, what="partition")
    if folder != expected:
        raise InvalidPlanError(
            f"path {path!r} is not in partition {partition!r} it is listed under", table=table.label, path=plan_file
        )
    is_log = name.startswith(".") and parse_log_file_name(name) is not None
    if not is_log and parse_base_file_name(name) is None:
        raise InvalidPlanError(f"path {path!r} names no base or log file", table=table.label, path=plan_file)
    return CleanTarget(partition, path, join(table.base_path, rel))


def dry_run(table: HudiTable, plan: HoodieCleanerPlan | Instant) -> ResolvedCleanPlan:
    """What a plan (or a pending clean instant's plan) would delete; nothing is touched."""
    if isinstance(plan, Instant):
        plan_file = table.active.path_of(plan.with_state(State.REQUESTED))
        plan = decode_cleaner_plan(table.storage.read_bytes(plan_file), path=plan_file)
    else:
        plan_file = "<plan>"
    return resolve_clean_plan(table, plan, plan_file=plan_file)


# --- execution -------------------------------------------------------------------------------------


def _delete_one(table: HudiTable, target: CleanTarget) -> tuple[CleanTarget, bool]:
    try:
        table.storage.delete(target.location)  # False: already gone, which counts as deleted
        return target, True
    except TableServiceError as e:
        log.warning("clean could not delete %s: %s", target.location, e, extra={"table": table.label})
        return target, False


def _delete_partition(table: HudiTable, partition: str, deleted: set[str]) -> bool:
    if not partition or not table.config.is_partitioned:
        return False
    folder = partition_location(table.base_path, partition)
    left = [fi for fi in table.storage.list(folder, recursive=True) if not fi.is_dir and fi.location not in deleted]
    others = [fi for fi in left if not fi.name.startswith(PARTITION_METADATA_FILE)]
    if others:
        log.warning(
            "partition %s not deleted: it holds %d other files (e.g. %s)",
            partition,
            len(others),
            others[0].name,
            extra={"table": table.label},
        )
        return False
    for fi in left:
        table.storage.delete(fi.location)
    table.storage.delete_dir(folder)
    return True


def _metadata(
    instant: Instant,
    resolved: ResolvedCleanPlan,
    results: list[tuple[CleanTarget, bool]],
    deleted_partitions: set[str],
    started: float,
) -> HoodieCleanMetadata:
    plan = resolved.plan
    by_partition: dict[str, tuple[list[str], list[str], list[str]]] = {}
    for partition in plan.file_paths_to_be_deleted_per_partition or {}:
        by_partition[partition] = ([], [], [])
    for target, ok in results:
        patterns, success, failed = by_partition.setdefault(target.partition, ([], [], []))
        patterns.append(target.file_name)
        (success if ok else failed).append(target.file_name)
    partitions = {
        p: HoodieCleanPartitionMetadata(
            partition_path=p,
            policy=plan.policy,
            delete_path_patterns=tuple(patterns),
            success_delete_files=tuple(success),
            failed_delete_files=tuple(failed),
            is_partition_deleted=p in deleted_partitions,
        )
        for p, (patterns, success, failed) in by_partition.items()
    }
    ectr = plan.earliest_instant_to_retain
    return HoodieCleanMetadata(
        start_clean_time=instant.requested_time,
        time_taken_in_millis=int((time.monotonic() - started) * 1000),
        total_files_deleted=sum(len(m.success_delete_files) for m in partitions.values()),
        earliest_commit_to_retain=ectr.timestamp if ectr is not None else "",
        last_completed_commit_timestamp=plan.last_completed_commit_timestamp or "",
        partition_metadata=partitions,
        version=METADATA_VERSION,
        bootstrap_partition_metadata={},
        extra_metadata=dict(plan.extra_metadata or {}),
    )


def execute_clean(
    table: HudiTable,
    instant: Instant,
    *,
    lock: LockFactory | None = None,
    lease: Held | None = None,
    parallelism: int = 8,
    require_pending: bool = False,
) -> HoodieCleanMetadata:
    """Run a pending clean (requested or inflight) to completion and return its metadata. A completed clean's
    metadata is returned as it is, unless `require_pending` (InstantNotPendingError: another process did it)."""
    started = time.monotonic()
    current = table.reload().get(instant.requested_time, Action.CLEAN)
    if current is None:
        if require_pending:
            raise InstantNotPendingError(f"no pending clean at {instant.requested_time}", table=table.label)
        raise InvalidTimelineError(f"no clean instant at {instant.requested_time}", table=table.label)
    if current.is_completed:
        if require_pending:
            raise InstantNotPendingError(f"clean {instant.requested_time} is completed", table=table.label)
        path = table.active.path_of(current)
        return decode_clean_metadata(table.storage.read_bytes(path), path=path)
    plan_file = table.active.path_of(current.with_state(State.REQUESTED))
    plan_bytes = table.storage.read_bytes(plan_file)
    try:
        plan = decode_cleaner_plan(plan_bytes, path=plan_file)
    except TableServiceError as e:
        raise e.with_context(table=table.label) from e
    resolved = resolve_clean_plan(table, plan, plan_file=plan_file)
    if current.is_requested:
        content = plan_bytes if table.config.layout_version < 2 else b""
        current = table.active.transition_to_inflight(current, content)
    with ThreadPoolExecutor(max_workers=max(1, parallelism), thread_name_prefix="clean") as pool:
        results = list(pool.map(carry_context(partial(_delete_one, table)), resolved.files))
    gone = {t.location for t, ok in results if ok}
    deleted_partitions = {p for p in resolved.partitions_to_delete if _delete_partition(table, p, gone)}
    metadata = _metadata(current, resolved, results, deleted_partitions, started)
    complete(
        table,
        current,
        lambda _: metadata,
        lock=lock,
        lease=lease,
    )
    failed = sum(len(m.failed_delete_files) for m in metadata.partition_metadata.values())
    log.info(
        "completed clean: %d files deleted, %d failed, %d partitions deleted",
        metadata.total_files_deleted,
        failed,
        len(deleted_partitions),
        extra={"table": table.label, "instant": current.requested_time, "action": "clean"},
    )
    return metadata


def planned_file_sizes(table: HudiTable, instant: Instant) -> dict[tuple[str, str], int]:
    """Sizes of the files a pending clean plans to delete, by (partition, file name): one listing per partition
    (what the clean's metrics count as bytes deleted). Empty when the plan cannot be read (the clean reports why)."""
    plan_file = table.active.path_of(instant.with_state(State.REQUESTED))
    try:
        resolved = resolve_clean_plan(
            table, decode_cleaner_plan(table.storage.read_bytes(plan_file), path=plan_file), plan_file=plan_file
        )
    except TableServiceError:
        return {}
    out: dict[tuple[str, str], int] = {}
    wanted = {(t.partition, t.file_name) for t in resolved.files}
    for partition in sorted({p for p, _ in wanted}):
        for fi in table.storage.list(partition_location(table.base_path, partition)):
            if (partition, fi.name) in wanted:
                out[(partition, fi.name)] = fi.size
    return out


def pending_cleans(table: HudiTable) -> list[Instant]:
    return list(table.reload().pending_of(Action.CLEAN))
