"""The asynchronous `indexing` action (Hudi's HoodieIndexer): build metadata-table partitions beside writers.

- Schedule (under the lock): `<t>.indexing.requested` holds a `HoodieIndexPlan` naming the partitions and, for
  each, `indexUptoInstant`: the latest completed instant with no pending instant before it. Secondary indexes
  (table version 8+) get their definition in `.hoodie/.index_defs/index.json` first.
- Execute: `<t>.indexing.inflight`; the records of each partition are built from the table as of `upto` (the
  latest completed instant with nothing pending before it, taken when execution starts) and written, with every
  file group's initial log file, as the partition's files at its initialisation instant: all without the lock,
  invisible to readers (no metadata instant lists them, no property names the partition). A table without a
  `files` partition gets one first. Then, through the commit path (lock, re-read, lease check): the partition is
  listed in `hoodie.table.metadata.partitions.inflight`, its initialisation delta commit completes, the instants
  that completed after `upto` are caught up (their records for the new partitions, in one metadata delta commit
  of the metadata table's own), the partition moves to `hoodie.table.metadata.partitions`, and `<t>_<c>.indexing`
  completes with the instant caught up to. Holding the lock from the moment the partition is listed until it is
  published means no writer ever meets a listed partition without file groups; writers that commit during the
  build are caught up instead of logging into the new partition themselves.
- A crash leaves the indexing inflight and the partition unpublished (or listed inflight, which blocks writers
  that honour it until the next attempt). The next attempt discards what the earlier one left (the partition's
  folder, its initialisation and catch-up instants, the inflight listing) and runs the plan again; `abort`
  removes a plan and everything it built.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tableservice.errors import InvalidPlanError, InvalidTableConfigError
from tableservice.hudi.action.commit import Change, ChangeKind, Held, LockFactory, commit, no_lock
from tableservice.hudi.action.committed_inputs import check_committed_inputs
from tableservice.hudi.action.tasks import CompactionInput
from tableservice.hudi.metadata.column_stats import read_index_definitions, write_index_definitions
from tableservice.hudi.metadata.delta_commit import MetadataRecord, write_delta_commit
from tableservice.hudi.metadata.initialize import (
    FILES,
    Records,
    TableSource,
    check_supported,
    complete_initialization,
    file_group_count,
    open_or_create_metadata_table,
    write_partition_files,
)
from tableservice.hudi.metadata.instants import SOLO_COMMIT_TIME, init_instant, latest_delta_commit, uses_suffixes
from tableservice.hudi.metadata.keys import is_secondary_index
from tableservice.hudi.metadata.reader import MetadataTable, metadata_table_path
from tableservice.hudi.metadata.update import records_for
from tableservice.hudi.models import (
    HoodieIndexCommitMetadata,
    HoodieIndexPartitionInfo,
    HoodieIndexPlan,
    HoodieWriteStat,
    decode_commit_metadata,
    decode_index_plan,
    encode_index_commit_metadata,
    encode_index_plan,
)
from tableservice.hudi.table import config as tc
from tableservice.hudi.table.config import store_table_config
from tableservice.hudi.table.hudi_table import HudiTable, Requested
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.storage import join

log = logging.getLogger(__name__)

INDEXER_SUFFIX = "004"
# Builds the records of one partition from a table snapshot.
RecordBuilder = Callable[[TableSource, str], Records]
# Writes one new partition's files at its initialisation instant: (source, partition, metadata table, instant) ->
# (records written, write stats of its base files). The daemon passes one that runs on Spark.
PartitionWriter = Callable[[TableSource, str, HudiTable, str], tuple[int, list[HoodieWriteStat]]]


def records_writer(build: RecordBuilder | None = None) -> PartitionWriter:
    """Records built in this process (`build`, else the source's own), written by `write_partition_files`."""

    def write(source: TableSource, partition: str, mdt: HudiTable, instant: str) -> tuple[int, list[HoodieWriteStat]]:
        records = build(source, partition) if build is not None else source.records(partition)
        groups = file_group_count(partition, len(records))
        return len(records), write_partition_files(source.table, mdt, partition, instant, groups, records)

    return write


@dataclass(frozen=True)
class IndexingResult:
    instant: Instant
    partitions: tuple[str, ...]
    upto: str
    records: int
    seconds: float


def index_upto_instant(timeline: Timeline) -> str | None:
    """The latest completed instant with no pending instant before it (what an index built now covers)."""
    pending = [i.requested_time for i in timeline.pending() if i.action is not Action.INDEXING]
    first_pending = min(pending) if pending else None
    done = [i.requested_time for i in timeline.completed() if first_pending is None or i.requested_time < first_pending]
    return max(done) if done else None


def planned_partitions(table: HudiTable, timeline: Timeline) -> dict[str, str]:
    """Partition -> the pending indexing instant that will build it."""
    out: dict[str, str] = {}
    for instant in timeline.pending_of(Action.INDEXING):
        for info in read_plan(table, instant).index_partition_infos or ():
            if info.metadata_partition_path:
                out[info.metadata_partition_path] = instant.requested_time
    return out


def read_plan(table: HudiTable, instant: Instant) -> HoodieIndexPlan:
    path = table.active.path_of(instant.with_state(State.REQUESTED))
    return decode_index_plan(table.storage.read_bytes(path), path=path)


def schedule_indexing(
    table: HudiTable,
    partitions: Sequence[str],
    *,
    lock: LockFactory | None = None,
    definitions: Mapping[str, dict[str, object]] | None = None,
) -> Instant | None:
    """Write `<t>.indexing.requested` for the partitions neither built nor planned; None when none is left.
    `definitions`: index definitions to record in `.hoodie/.index_defs/index.json` (secondary indexes)."""
    done = request_indexing(table, partitions, lock=lock, definitions=definitions)
    return done.instant if done is not None else None


def request_indexing(
    table: HudiTable,
    partitions: Sequence[str],
    *,
    lock: LockFactory | None = None,
    definitions: Mapping[str, dict[str, object]] | None = None,
    dry_run: bool = False,
) -> Requested[HoodieIndexPlan] | None:
    """`schedule_indexing`, returning the plan; a `dry_run` makes it on the current timeline without the lock and
    writes nothing (neither the plan nor the index definitions)."""
    check_supported(table, partitions)
    for p in partitions:
        if is_secondary_index(p) and p not in (definitions or {}) and p not in (_definitions(table) or {}):
            raise InvalidTableConfigError(f"{p}: a secondary index needs a column (a definition)", table=table.label)
    with (no_lock if dry_run or lock is None else lock)():
        timeline = table.reload()
        config = table.config
        taken = {
            *config.metadata_partitions,
            *config.metadata_partitions_inflight,
            *planned_partitions(table, timeline),
        }
        todo = [p for p in dict.fromkeys(partitions) if p not in taken]
        if not todo:
            return None
        upto = index_upto_instant(timeline)
        if upto is None:
            raise InvalidTableConfigError("the table has no completed instant to index", table=table.label)
        t = table.active.new_instant_time(timeline)
        plan = HoodieIndexPlan(
            version=1,
            index_partition_infos=tuple(
                HoodieIndexPartitionInfo(
                    version=1, metadata_partition_path=p, index_upto_instant=upto, extra_metadata={}
                )
                for p in todo
            ),
        )
        content = encode_index_plan(plan, table_version=config.version)
        requested = Instant(t, Action.INDEXING, State.REQUESTED)
        done = Requested(requested, plan, content, table.active.path_of(requested), written=not dry_run)
        if dry_run:
            return done
        if definitions and config.version >= 8:
            wanted = {k: dict(v) for k, v in definitions.items() if k in todo}
            if wanted:
                write_index_definitions(table.storage, table.base_path, {**(_definitions(table) or {}), **wanted})
        instant = table.active.create_requested(t, Action.INDEXING, content)
        table.applied(timeline, instant)
    log.info("scheduled indexing of %s", ", ".join(todo), extra={"table": table.label, "instant": t})
    return done


def _check_inputs(table: HudiTable) -> None:
    """Before anything is written: the latest file slices an index is built from hold all the data the timeline
    committed (`check_committed_inputs`); a damaged table gets no index that silently misses records."""
    timeline = table.reload()
    upto = index_upto_instant(timeline)
    if upto is None:
        return
    as_of = timeline.at_or_before(upto)
    listing = table.list_storage_files()
    view = table.file_system_view(timeline=as_of, listing=listing)
    slices = [CompactionInput.of(s) for s in view.latest_merged_slices()]
    check_committed_inputs(table, as_of, [(s.partition, s) for s in slices], listing=listing)


def _definitions(table: HudiTable) -> dict[str, dict[str, object]] | None:
    return read_index_definitions(table.storage, table.base_path) if table.config.version >= 8 else None


def execute_indexing(
    table: HudiTable,
    instant: Instant,
    *,
    lock: LockFactory | None = None,
    lease: Held | None = None,
    build: RecordBuilder | None = None,
    writer: PartitionWriter | None = None,
) -> IndexingResult:
    """Build and publish the partitions of a pending indexing plan (see the module docstring)."""
    started = time.monotonic()
    lock_factory = lock if lock is not None else no_lock
    plan = read_plan(table, instant)
    planned = [i.metadata_partition_path for i in plan.index_partition_infos or () if i.metadata_partition_path]
    if not planned:
        raise InvalidPlanError(f"indexing plan {instant.requested_time} names no partition", table=table.label)
    t = instant.requested_time
    if any(p != FILES for p in planned):
        _check_inputs(table)
    with lock_factory():
        timeline = table.reload()
        current = timeline.get(t, Action.INDEXING)
        if current is None or current.is_completed:
            raise InvalidPlanError(f"indexing {t} is not pending", table=table.label)
        built = list(table.config.metadata_partitions)
        partitions = [p for p in planned if p not in built]
        if partitions and FILES not in built and FILES not in partitions:
            partitions.insert(0, FILES)  # Hudi requires the files partition before any other
        check_supported(table, partitions)
        mdt = open_or_create_metadata_table(table, fresh=not built)
        _discard_earlier_attempt(table, mdt, t, partitions)
        if current.state is State.REQUESTED:
            path = table.active.path_of(current)
            current = table.active.transition_to_inflight(current, table.storage.read_bytes(path))
        upto = index_upto_instant(timeline)
    if upto is None:
        raise InvalidTableConfigError("the table has no completed instant to index", table=table.label)
    source = TableSource(table, timeline.at_or_before(upto), as_of=upto)
    write = writer if writer is not None else records_writer(build)
    inits: dict[str, str] = {}
    stats = {}
    total = 0
    for partition in partitions:
        init = _init_time(table, mdt, t, upto, inits)
        inits[partition] = init
        count, stats[partition] = write(source, partition, mdt, init)
        total += count
        log.info(
            "indexing: %s built as of %s (%d records, %d base files)",
            partition,
            upto,
            count,
            len(stats[partition]),
            extra={"table": table.label, "instant": t},
        )

    def publish(latest: Timeline, change: Change) -> tuple[Instant, str]:
        config = table.config
        store_table_config(
            table.storage,
            table.base_path,
            config.with_updates(
                {tc.METADATA_PARTITIONS_INFLIGHT: _joined(config.metadata_partitions_inflight, partitions)}
            ),
        )
        for partition in partitions:
            complete_initialization(table, mdt, partition, inits[partition], stats[partition])
        caught_up = _catch_up(table, mdt, latest, upto, partitions)
        config = table.reload_config()
        store_table_config(
            table.storage,
            table.base_path,
            config.with_updates(
                {
                    tc.METADATA_PARTITIONS: _joined(config.metadata_partitions, partitions),
                    tc.METADATA_PARTITIONS_INFLIGHT: ",".join(
                        p for p in config.metadata_partitions_inflight if p not in partitions
                    ),
                }
            ),
        )
        metadata = HoodieIndexCommitMetadata(
            version=1,
            operation_type=None,
            index_partition_infos=tuple(
                HoodieIndexPartitionInfo(
                    version=1, metadata_partition_path=p, index_upto_instant=caught_up, extra_metadata={}
                )
                for p in planned
            ),
        )
        data = encode_index_commit_metadata(metadata, table_version=table.config.version)
        done = table.active.transition_to_completed(current, data, timeline=latest)
        table.applied(latest, done)
        return done, caught_up

    done, caught_up = commit(table, Change(ChangeKind.COMPLETE, current), publish, lock=lock_factory, lease=lease)
    seconds = time.monotonic() - started
    log.info(
        "indexing: published %s (caught up to %s, %d records, %.1f s)",
        ", ".join(partitions),
        caught_up,
        total,
        seconds,
        extra={"table": table.label, "instant": t},
    )
    return IndexingResult(done, tuple(partitions), caught_up, total, seconds)


def _joined(existing: Sequence[str], more: Sequence[str]) -> str:
    return ",".join(sorted({*existing, *more}))


def _init_time(table: HudiTable, mdt: HudiTable, t: str, upto: str, taken: Mapping[str, str]) -> str:
    """The initialisation instant of the next partition: the indexing instant (version 8+) or `<upto>004`
    (version 6) for the first, then the next unused initialisation instant."""
    first = upto + INDEXER_SUFFIX if uses_suffixes(table.config.version) else t
    used = set(taken.values())
    if first not in used:
        return first
    timeline = mdt.reload()
    candidate = init_instant(table.config.version, table.timeline(), timeline)
    while candidate in used:  # not on the metadata timeline yet: bump past the ones this run already chose
        candidate = candidate[:-3] + f"{int(candidate[-3:]) + 1:03d}"
    return candidate


def _catch_up(table: HudiTable, mdt: HudiTable, latest: Timeline, upto: str, partitions: Sequence[str]) -> str:
    """Records for the new partitions of every instant completed after `upto`, in one delta commit of the
    metadata table's own; returns the latest instant caught up to."""
    after = [i for i in latest.completed() if i.requested_time > upto and i.action is not Action.INDEXING]
    if not after:
        return upto
    opened = MetadataTable.open(table, latest)
    if opened is None:  # the files partition itself is being built: read it through the new partitions
        raise InvalidTableConfigError("indexing: the metadata table lists no partition to catch up", table=table.label)
    records: list[MetadataRecord] = []
    for instant in after:
        records.extend(records_for(opened, instant, partitions))
    if records:
        own = _own_instant(table, mdt, latest)
        write_delta_commit(opened, own, records)
        log.info(
            "indexing: caught up %d instants (%d records) at %s",
            len(after),
            len(records),
            own,
            extra={"table": table.label, "instant": after[-1].requested_time},
        )
    return max(i.requested_time for i in after)


def _own_instant(table: HudiTable, mdt: HudiTable, latest: Timeline) -> str:
    """A metadata delta commit time that is no data instant (its blocks are valid once completed)."""
    if uses_suffixes(table.config.version):
        base = latest_delta_commit(mdt.reload()) or SOLO_COMMIT_TIME
        return base + INDEXER_SUFFIX
    return table.active.new_instant_time(latest)


def _discard_earlier_attempt(table: HudiTable, mdt: HudiTable, t: str, partitions: Sequence[str]) -> None:
    """What a crashed attempt of this plan left: the partitions' folders, their inflight listing, and the metadata
    instants that wrote only to them."""
    wanted = set(partitions)
    config = table.config
    if wanted & set(config.metadata_partitions_inflight):
        store_table_config(
            table.storage,
            table.base_path,
            config.with_updates(
                {
                    tc.METADATA_PARTITIONS_INFLIGHT: ",".join(
                        p for p in config.metadata_partitions_inflight if p not in wanted
                    )
                }
            ),
        )
        table.reload_config()
    for partition in partitions:
        folder = join(metadata_table_path(table.base_path), partition)
        if table.storage.exists(folder):
            table.storage.delete_dir(folder)
    for instant in mdt.reload():
        if instant.action is not Action.DELTA_COMMIT:
            continue
        if instant.is_completed:
            path = mdt.active.path_of(instant)
            md = decode_commit_metadata(mdt.storage.read_bytes(path), path=path)
            written = set((md.partition_to_write_stats or {}).keys())
            if written and written <= wanted:
                mdt.active.delete_completed(instant)
        elif instant.requested_time == t or instant.requested_time.startswith(SOLO_COMMIT_TIME):
            mdt.active.delete_pending(instant)


def abort_indexing(table: HudiTable, instant: Instant, *, lock: LockFactory | None = None) -> None:
    """Remove a pending indexing plan and whatever it built (partitions it published stay)."""
    with (lock if lock is not None else no_lock)():
        current = table.reload().get(instant.requested_time, Action.INDEXING)
        if current is None or current.is_completed:
            return
        built = set(table.config.metadata_partitions)
        partitions = [
            i.metadata_partition_path
            for i in read_plan(table, current).index_partition_infos or ()
            if i.metadata_partition_path and i.metadata_partition_path not in built
        ]
        if table.storage.exists(join(metadata_table_path(table.base_path), ".hoodie", tc.PROPERTIES_FILE)):
            _discard_earlier_attempt(
                table,
                HudiTable.open(table.storage, metadata_table_path(table.base_path)),
                current.requested_time,
                partitions,
            )
        table.active.delete_pending(current)
    log.info("aborted indexing", extra={"table": table.label, "instant": instant.requested_time})


def drop_index(table: HudiTable, partition: str, *, lock: LockFactory | None = None) -> bool:
    """Remove a built metadata partition: from `hoodie.table.metadata.partitions` first (readers stop using it),
    then its folder and its definition. Dropping `files` removes the whole metadata table (every other partition
    needs it). False when the table has no such partition."""
    with (lock if lock is not None else no_lock)():
        table.reload()
        config = table.reload_config()
        listed = set(config.metadata_partitions) | set(config.metadata_partitions_inflight)
        if partition not in listed:
            return False
        if planned_partitions(table, table.timeline()):
            raise InvalidTableConfigError("an indexing action is pending: run or abort it first", table=table.label)
        gone = listed if partition == FILES else {partition}
        store_table_config(
            table.storage,
            table.base_path,
            config.with_updates(
                {
                    tc.METADATA_PARTITIONS: ",".join(p for p in config.metadata_partitions if p not in gone),
                    tc.METADATA_PARTITIONS_INFLIGHT: ",".join(
                        p for p in config.metadata_partitions_inflight if p not in gone
                    ),
                }
            ),
        )
        table.reload_config()
        root = metadata_table_path(table.base_path)
        folders = [root] if partition == FILES else [join(root, partition)]
        for folder in folders:
            if table.storage.exists(folder):
                table.storage.delete_dir(folder)
        definitions = _definitions(table)
        if definitions is not None and gone & set(definitions):
            write_index_definitions(
                table.storage, table.base_path, {k: v for k, v in definitions.items() if k not in gone}
            )
    log.info("dropped metadata partition %s", partition, extra={"table": table.label})
    return True
