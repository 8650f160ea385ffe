"""Compacting the metadata table: each file group's base HFile and valid log blocks merged into a new base HFile.

Due when the completed metadata delta commits since the last metadata compaction reach
`hoodie.metadata.compact.max.delta.commits` (HUDI-MDT-NOTES §9). The instant `C` is a new time, except when a data
instant is pending on the data table while its metadata delta commit is completed: then `C` is one millisecond
before the earliest such instant, so that the (not yet valid) blocks of that delta commit stay in log files and
count once the data instant completes. Log files of delta commits completed at or after `C` stay in the new
slice. Files: `<C>.compaction.requested` (the plan), `.inflight`, one `<fileId>_0-0-0_<C>.hfile` per file group
(an HFile without cells when nothing is left), then `<C>_<c>.commit`.

Table version 6 (Hudi 0.14/0.15) differs: `C` is the latest completed metadata delta commit + `001`, and the
compaction waits while any data instant at or before that delta commit is pending; it takes every log file of
each slice that has one, and a slice with no base file whose records merge to nothing yields no file (the
group keeps its slice).

Runs under the data table's lock. A crash leaves the compaction pending: readers merge the pending slice with the
one before it, and the next attempt deletes the partial base files and runs the same plan again.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import fastavro

from tableservice.errors import AlreadyExistsError
from tableservice.hudi.file_group.filenames import PARTITION_METADATA_FILE
from tableservice.hudi.metadata.delta_commit import writer_schema
from tableservice.hudi.metadata.hfile_write import hfile_layout, write_hfile
from tableservice.hudi.metadata.instants import COMPACTION_SUFFIX, is_suffixed, latest_delta_commit, uses_suffixes
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.records import RawRecord, is_live, merge_for
from tableservice.hudi.models import (
    HoodieCommitMetadata,
    HoodieCompactionOperation,
    HoodieCompactionPlan,
    HoodieWriteStat,
    decode_compaction_plan,
    encode_commit_metadata,
    encode_compaction_plan,
)
from tableservice.hudi.table.fs_view import FileSlice, partition_location
from tableservice.hudi.table.properties import format_properties
from tableservice.hudi.timeline.instant import Action, Instant, State, format_instant_time, parse_instant_time
from tableservice.storage import Storage, join

log = logging.getLogger(__name__)

DEFAULT_MAX_DELTA_COMMITS = 10
# A completed compaction is `compaction` on timeline layout 2 and `commit` on layout 1.
COMPACTION_ACTIONS = (Action.COMPACTION, Action.COMMIT)
WRITE_TOKEN = "0-0-0"


@dataclass(frozen=True)
class MetadataCompactionDecision:
    due: bool
    delta_commits: int
    instant_time: str | None
    reason: str


def metadata_compaction_due(
    mdt: MetadataTable, max_delta_commits: int = DEFAULT_MAX_DELTA_COMMITS
) -> MetadataCompactionDecision:
    """Whether the metadata table is due a compaction, and at which instant."""
    timeline = mdt.mdt_timeline
    compactions = [i for i in timeline.completed() if i.action in COMPACTION_ACTIONS]
    last = compactions[-1].requested_time if compactions else ""
    deltas = [i for i in timeline.completed() if i.action is Action.DELTA_COMMIT and i.requested_time > last]
    if len(deltas) < max_delta_commits:
        return MetadataCompactionDecision(
            False, len(deltas), None, f"{len(deltas)} of {max_delta_commits} delta commits"
        )
    if timeline.pending_compactions():
        return MetadataCompactionDecision(True, len(deltas), None, "a metadata compaction is pending")
    if mdt.data_timeline.pending_of(Action.INDEXING):  # its partitions' files must not be compacted half-built
        return MetadataCompactionDecision(False, len(deltas), None, "an indexing action is pending")
    if uses_suffixes(mdt.mdt.config.version):
        return _suffixed_decision(mdt, len(deltas))
    t = _instant_time(mdt)
    if t <= last or timeline.get(t) is not None:
        return MetadataCompactionDecision(False, len(deltas), None, f"pending data instants hold it before {last}")
    return MetadataCompactionDecision(True, len(deltas), t, f"{len(deltas)} delta commits since the last compaction")


def _suffixed_decision(mdt: MetadataTable, deltas: int) -> MetadataCompactionDecision:
    latest = latest_delta_commit(mdt.mdt_timeline)
    if latest is None:
        return MetadataCompactionDecision(False, deltas, None, "no delta commit")
    if is_suffixed(latest):
        return MetadataCompactionDecision(
            False,
            deltas,
            None,
            f"the latest delta commit {latest} is the metadata table's own: waits for a data commit",
        )
    held = sorted(i.requested_time for i in mdt.data_timeline.pending() if i.requested_time <= latest)
    if held:
        return MetadataCompactionDecision(False, deltas, None, f"pending data instant {held[0]} holds it")
    t = latest + COMPACTION_SUFFIX
    if mdt.mdt_timeline.get(t) is not None:
        return MetadataCompactionDecision(False, deltas, None, f"{t} is on the metadata timeline already")
    return MetadataCompactionDecision(True, deltas, t, f"{deltas} delta commits since the last compaction")


def _instant_time(mdt: MetadataTable) -> str:
    data_pending = {i.requested_time for i in mdt.data_timeline.pending()}
    held = sorted(
        i.requested_time
        for i in mdt.mdt_timeline.completed()
        if i.action is Action.DELTA_COMMIT and i.requested_time in data_pending
    )
    tz = mdt.mdt.active.tz
    if held:
        return format_instant_time(parse_instant_time(held[0], tz) - timedelta(milliseconds=1), tz)
    return mdt.mdt.active.new_instant_time(mdt.mdt_timeline)


def compact_metadata_table(
    mdt: MetadataTable,
    max_delta_commits: int = DEFAULT_MAX_DELTA_COMMITS,
    *,
    before_commit: Callable[[], None] = lambda: None,
) -> Instant | None:
    """Run a pending metadata compaction, or schedule and run one when due; the completed instant, else None.
    `mdt`'s timeline is current: the metadata table changes only under the data table's lock, held by the caller;
    `before_commit` runs right before the completed instant is written (it raises when that lock is lost)."""
    table = mdt.mdt
    pending = list(mdt.mdt_timeline.pending_compactions())
    if pending:
        instant = pending[0]
        plan_path = table.active.path_of(instant.with_state(State.REQUESTED))
        plan = decode_compaction_plan(table.storage.read_bytes(plan_path), path=plan_path)
    else:
        decision = metadata_compaction_due(mdt, max_delta_commits)
        if not decision.due or decision.instant_time is None:
            return None
        plan = _plan(mdt, decision.instant_time)
        instant = table.active.create_requested(
            decision.instant_time, Action.COMPACTION, encode_compaction_plan(plan, table_version=table.config.version)
        )
    return _execute(mdt, instant, plan, before_commit)


def _plan(mdt: MetadataTable, t: str) -> HoodieCompactionPlan:
    operations = []
    suffixed = uses_suffixes(mdt.mdt.config.version)
    for partition in mdt.storage_partitions():
        for file_slice in mdt.file_slices(partition):
            if suffixed and not file_slice.log_files:
                continue  # nothing to merge into its base file (Hudi plans slices with log files only)
            inputs = file_slice if suffixed else _inputs(mdt, file_slice, t)
            operations.append(
                HoodieCompactionOperation(
                    base_instant_time=inputs.base_instant_time,
                    delta_file_paths=tuple(lf.file_name for lf in inputs.log_files),
                    data_file_path=inputs.base_file.file_name if inputs.base_file else None,
                    file_id=inputs.file_id,
                    partition_path=partition,
                    metrics={},
                )
            )
    return HoodieCompactionPlan(operations=tuple(operations), extra_metadata={}, version=2)


def _inputs(mdt: MetadataTable, file_slice: FileSlice, t: str) -> FileSlice:
    """The slice's files a compaction at `t` takes: the base file and the logs of delta commits completed before
    `t` (later ones stay in the new slice)."""
    timeline = mdt.mdt_timeline
    logs = tuple(lf for lf in file_slice.log_files if (timeline.completion_time(lf.instant_time) or t) < t)
    return replace(file_slice, log_files=logs)


def _execute(
    mdt: MetadataTable, instant: Instant, plan: HoodieCompactionPlan, before_commit: Callable[[], None]
) -> Instant:
    table = mdt.mdt
    t = instant.requested_time
    started = time.monotonic()
    inflight = instant if instant.state is State.INFLIGHT else table.active.transition_to_inflight(instant)
    schema_json = writer_schema(mdt)
    parsed = fastavro.parse_schema(json.loads(schema_json))
    partitions = sorted({op.partition_path or "" for op in plan.operations or ()})
    slices = {(s.partition_path, s.file_id): s for p in partitions for s in mdt.file_slices(p)}
    stats: dict[str, list[HoodieWriteStat]] = {}
    for op in plan.operations or ():
        partition, file_id = op.partition_path or "", op.file_id or ""
        current = slices.get((partition, file_id))
        wanted = set(op.delta_file_paths or ())
        logs = tuple(lf for lf in current.log_files if lf.file_name in wanted) if current else ()
        base = (
            current.base_file
            if current and current.base_file and current.base_file.file_name == op.data_file_path
            else None
        )
        source = FileSlice(partition, file_id, op.base_instant_time or "", base, logs)
        stat = _compact_one(mdt, source, t, schema_json, parsed)
        if stat is not None:
            stats.setdefault(partition, []).append(stat)
    metadata = HoodieCommitMetadata(
        partition_to_write_stats={p: tuple(s) for p, s in stats.items()},
        compacted=True,
        extra_metadata={"schema": schema_json},
        operation_type="COMPACT",
    )
    data = encode_commit_metadata(metadata, table_version=table.config.version)
    latest = table.reload()
    before_commit()
    done = table.active.transition_to_completed(inflight, data, timeline=latest)
    log.info(
        "metadata table: compacted %d file groups in %.2f s",
        sum(len(s) for s in stats.values()),
        time.monotonic() - started,
        extra={"table": mdt.data.name, "instant": t},
    )
    return done


def _compact_one(
    mdt: MetadataTable, source: FileSlice, t: str, schema_json: str, parsed: Any
) -> HoodieWriteStat | None:
    merge = merge_for(source.partition_path)
    merged: dict[str, RawRecord] = {}
    for key, record in mdt.slice_records(source):
        merged[key] = merge(merged[key], record) if key in merged else record
    cells = []
    for key in sorted(merged, key=lambda k: k.encode("utf-8")):
        record = _pruned(merged[key])
        if record is None or not is_live(record):
            continue
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, record)
        cells.append((key.encode("utf-8"), buf.getvalue()))
    if not cells and source.base_file is None and uses_suffixes(mdt.mdt.config.version):
        return None
    layout = hfile_layout(mdt.mdt.config.version)
    info = [(b"schema", schema_json.encode())]
    if cells:
        info += [(b"minRecordKey", cells[0][0]), (b"maxRecordKey", cells[-1][0])]
    data = write_hfile(
        cells, file_info=info, layout=layout, create_time_ms=int(time.time() * 1000) if layout == "hudi" else 0
    )
    name = f"{source.file_id}_{WRITE_TOKEN}_{t}.hfile"
    folder = partition_location(mdt.mdt.base_path, source.partition_path)
    location = join(folder, name)
    mdt.mdt.storage.delete(location)  # an earlier attempt's partial file
    mdt.mdt.storage.write_bytes(location, data)
    ensure_partition_metadata(mdt.mdt.storage, folder, t)
    return HoodieWriteStat(
        file_id=source.file_id,
        path=f"{source.partition_path}/{name}",
        prev_commit=source.base_instant_time,
        num_writes=len(cells),
        num_deletes=0,
        num_update_writes=0,
        num_inserts=len(cells),
        total_write_bytes=len(data),
        total_write_errors=0,
        partition_path=source.partition_path,
        file_size_in_bytes=len(data),
        total_log_files=len(source.log_files),
    )


def ensure_partition_metadata(storage: Storage, folder: str, t: str) -> None:
    """Partitions that never received a record lack `.hoodie_partition_metadata`; a base file gives them one."""
    location = join(folder, PARTITION_METADATA_FILE)
    if storage.exists(location):
        return
    stamp = datetime.now(UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
    text = format_properties({"commitTime": t, "partitionDepth": "1"}, ["partition metadata", stamp])
    with contextlib.suppress(AlreadyExistsError):
        storage.create_if_absent(location, text.encode("latin-1"))


def _pruned(record: RawRecord) -> RawRecord:
    """A merged `files` record without the tombstones of files it no longer lists: once everything older is in
    one base file, a tombstone has nothing left to hide."""
    if record is None or record.get("filesystemMetadata") is None:
        return record
    fs = {k: v for k, v in record["filesystemMetadata"].items() if not v["isDeleted"]}
    return {**record, "filesystemMetadata": fs}
