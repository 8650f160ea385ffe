"""Rolling back one instant of the metadata table, as part of the data table's rollback of the same instant.

A writer that crashed after completing its metadata delta commit `x` but before completing its data instant
leaves `x` in the metadata table (invisible to readers by the valid-instant rule). When the data table rolls `x`
back at `r`, the metadata table gets its own rollback at `r`: plan (`<r>.rollback.requested`), inflight, the log
and base files written at `x` deleted, `x`'s timeline files removed, then `<r>_<c>.rollback`. In table version 6
log files are named by their slice's base instant and `x`'s blocks cannot be deleted: every log file holding
them gets a rollback command block appended to its slice (a new log file), and the rollback's instant is
`<r>006` (see `instants`).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict

from tableservice.errors import UnsupportedTableError
from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.hudi.file_group.rollback_blocks import has_blocks_of, undo_writes
from tableservice.hudi.metadata.compaction import COMPACTION_ACTIONS
from tableservice.hudi.metadata.instants import uses_suffixes
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.models import (
    HoodieInstantInfo,
    HoodieRollbackMetadata,
    HoodieRollbackPlan,
    encode_rollback_metadata,
    encode_rollback_plan,
)
from tableservice.hudi.models.rollback import rollback_requests
from tableservice.hudi.timeline.instant import Action, Instant, State

log = logging.getLogger(__name__)


def rollback_metadata_instant(mdt: MetadataTable, target_time: str, rollback_time: str) -> Instant | None:
    """Roll back the metadata table's instant `target_time` at `rollback_time`; None when it holds no such instant
    (a rollback already finished there is completed again only if its files remain)."""
    table = mdt.mdt
    timeline = table.reload()
    done = timeline.get(rollback_time, Action.ROLLBACK)
    if done is not None and done.is_completed:
        return done
    target = next((i for i in timeline if i.requested_time == target_time and i.action is not Action.ROLLBACK), None)
    if target is None and done is None:
        return None
    compactions = [i for i in timeline.completed() if i.action in COMPACTION_ACTIONS and i.requested_time > target_time]
    if target is not None and target.is_completed and compactions:
        raise UnsupportedTableError(
            f"metadata instant {target_time} is older than the metadata table's compaction "
            f"{compactions[-1].requested_time}: it cannot be rolled back (a restore or a rebuilt metadata table is "
            "needed)",
            table=mdt.data.name,
            path=table.base_path,
        )
    started = time.monotonic()
    files: dict[str, list[str]] = defaultdict(list)
    appended: dict[tuple[str, str, str], dict[str, int]] = defaultdict(dict)  # (partition, file id, base) -> logs
    in_place = uses_suffixes(table.config.version)
    for partition in mdt.storage_partitions():
        for fi in mdt.partition_listing(partition):
            log_name = parse_log_file_name(fi.name)
            parsed = log_name or parse_base_file_name(fi.name)
            if parsed is not None and parsed.instant_time == target_time:
                files[partition].append(fi.location)
            elif log_name is not None and in_place and has_blocks_of(table.storage, fi.location, target_time):
                appended[(partition, log_name.file_id, log_name.instant_time)][fi.location] = fi.size
    version = table.config.version
    action = target.action if target is not None else Action.DELTA_COMMIT
    if done is None:
        plan = HoodieRollbackPlan(
            instant_to_rollback=HoodieInstantInfo(commit_time=target_time, action=action.value),
            RollbackRequests=rollback_requests(files, appended, no_blocks=None),
            version=1,
        )
        done = table.active.create_requested(
            rollback_time, Action.ROLLBACK, encode_rollback_plan(plan, table_version=version)
        )
    inflight = done if done.state is State.INFLIGHT else table.active.transition_to_inflight(done)
    partitions = undo_writes(
        table.storage, table.base_path, files, appended, rollback_time=rollback_time, target_time=target_time
    )
    deleted = sum(len(locations) for locations in files.values())
    if target is not None:
        table.active.delete(target)
    metadata = HoodieRollbackMetadata(
        start_rollback_time=rollback_time,
        time_taken_in_millis=int((time.monotonic() - started) * 1000),
        total_files_deleted=deleted,
        commits_rollback=(target_time,),
        partition_metadata=partitions,
        version=1,
        instants_rollback=(HoodieInstantInfo(commit_time=target_time, action=action.value),),
    )
    completed = table.active.transition_to_completed(
        inflight, encode_rollback_metadata(metadata, table_version=version), timeline=table.reload()
    )
    log.info(
        "metadata table: rolled back %s (%d files)",
        target_time,
        deleted,
        extra={"table": mdt.data.name, "instant": rollback_time},
    )
    return completed
