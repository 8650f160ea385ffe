"""Writing one metadata-table delta commit: the records a data action produces, in the file groups they route to.

For a data action at instant `t`, under the data table's lock and before the data instant completes:
1. anything the metadata table already holds at `t` (an earlier attempt of the same action that crashed before
   the data commit) is removed: its log files, then its timeline files. Its blocks were invalid to every reader,
   since the data instant never completed;
2. `<t>.deltacommit.requested`, then `.inflight`;
3. per touched file group one new log file holding one HFile data block (the records, sorted by key) and, when
   keys are removed, one delete block. Versions 8 and 9 name it `.<fileId>_<t>.log.1_<token>`; version 6 names
   it by the base instant of the group's latest slice with the next version, `.<fileId>_<base>.log.<n+1>_<token>`
   (Hudi on storage that cannot append), and its inflight file lists the touched groups with that base instant
   as `prevCommit`, which Hudi's own rollback of a failed attempt reads;
4. `<t>.deltacommit` (`<t>_<c>.deltacommit` from version 8) with one write stat per log file.
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro

from tableservice.errors import InvalidTableConfigError
from tableservice.hudi.file_group.filenames import LogFileName, parse_log_file_name
from tableservice.hudi.file_group.log_format import HeaderKey, append_log_blocks, encode_delete_block
from tableservice.hudi.file_group.log_format.blocks import BlockType, frame_block
from tableservice.hudi.file_group.log_format.deletes import DeleteRecord
from tableservice.hudi.file_group.rollback_blocks import has_blocks_of, next_log_version
from tableservice.hudi.metadata.hfile_write import hfile_layout, write_hfile
from tableservice.hudi.metadata.instants import uses_suffixes
from tableservice.hudi.metadata.keys import file_group_index, routes_by_value
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.schema import metadata_record_schema_json
from tableservice.hudi.models import HoodieCommitMetadata, HoodieWriteStat, encode_commit_metadata
from tableservice.hudi.table.fs_view import partition_location
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant
from tableservice.storage import FileInfo, join

log = logging.getLogger(__name__)

WRITE_TOKEN = "0-0-0"


@dataclass(frozen=True)
class MetadataRecord:
    """One record for a metadata partition: a `HoodieMetadataRecord` (Avro dict), or None to remove the key."""

    partition: str
    key: str
    value: dict[str, Any] | None


def write_delta_commit(
    mdt: MetadataTable, instant_time: str, records: Sequence[MetadataRecord], *, operation: str = "UPSERT_PREPPED"
) -> Instant:
    """Write and complete the metadata table's delta commit at `instant_time` (see the module docstring)."""
    table = mdt.mdt
    timeline = _remove_earlier_attempt(mdt, instant_time)
    schema_json = writer_schema(mdt)
    parsed = fastavro.parse_schema(json.loads(schema_json))
    routes: dict[str, Callable[[str], str]] = {}
    by_group: dict[tuple[str, str], dict[str, dict[str, Any] | None]] = defaultdict(dict)
    for r in records:
        if r.partition not in routes:
            routes[r.partition] = _router(mdt, r.partition)
        by_group[(r.partition, routes[r.partition](r.key))][r.key] = r.value
    targets = _LogTargets(mdt, instant_time)
    touched = {key: targets.target(*key) for key in sorted(by_group)}
    requested = table.active.create_requested(instant_time, Action.DELTA_COMMIT)
    inflight = table.active.transition_to_inflight(requested, _workload(table.config.version, touched, operation))
    stats: dict[str, list[HoodieWriteStat]] = defaultdict(list)
    for (partition, file_id), values in sorted(by_group.items()):
        target = touched[(partition, file_id)]
        stats[partition].append(_write_log_file(mdt, partition, target, instant_time, values, schema_json, parsed))
    metadata = HoodieCommitMetadata(
        partition_to_write_stats={p: tuple(s) for p, s in stats.items()},
        compacted=False,
        extra_metadata={"schema": schema_json},
        operation_type=operation,
    )
    done = table.active.transition_to_completed(
        inflight, encode_commit_metadata(metadata, table_version=table.config.version), timeline=timeline
    )
    log.info(
        "metadata table: delta commit with %d records in %d file groups",
        len(records),
        len(by_group),
        extra={"table": mdt.data.name, "instant": instant_time},
    )
    return done


@dataclass(frozen=True)
class _LogTarget:
    """Where a delta commit's records for one file group go: the new log file and the slice it joins."""

    name: LogFileName
    prev_commit: str
    base_file: str


class _LogTargets:
    def __init__(self, mdt: MetadataTable, instant_time: str) -> None:
        self.mdt = mdt
        self.instant_time = instant_time
        self.by_version = uses_suffixes(mdt.mdt.config.version)
        self._listings: dict[str, list[FileInfo]] = {}

    def target(self, partition: str, file_id: str) -> _LogTarget:
        if not self.by_version:
            return _LogTarget(LogFileName(file_id, self.instant_time, 1, WRITE_TOKEN), self.instant_time, "")
        latest = self.mdt.latest_slices(partition).get(file_id)
        if latest is None:
            raise InvalidTableConfigError(
                f"metadata file group {file_id} has no file slice",
                table=self.mdt.data.name,
                path=partition_location(self.mdt.mdt.base_path, partition),
            )
        if partition not in self._listings:
            self._listings[partition] = self.mdt.partition_listing(partition)
        base = latest.base_instant_time
        version = next_log_version(self._listings[partition], file_id, base)
        base_file = latest.base_file.file_name if latest.base_file is not None else ""
        return _LogTarget(LogFileName(file_id, base, version, WRITE_TOKEN), base, base_file)


def _workload(table_version: int, touched: dict[tuple[str, str], _LogTarget], operation: str) -> bytes:
    """The inflight file: empty from version 8; version 6 lists each touched group with the base instant of the
    slice it appends to (Hudi's rollback of a failed attempt writes its command blocks from these)."""
    if not uses_suffixes(table_version):
        return b""
    stats: dict[str, list[HoodieWriteStat]] = defaultdict(list)
    for (partition, file_id), target in touched.items():
        stats[partition].append(HoodieWriteStat(file_id=file_id, prev_commit=target.prev_commit))
    metadata = HoodieCommitMetadata(
        partition_to_write_stats={p: tuple(v) for p, v in stats.items()},
        compacted=False,
        extra_metadata={},
        operation_type=operation,
    )
    return encode_commit_metadata(metadata, table_version=table_version)


def _write_log_file(
    mdt: MetadataTable,
    partition: str,
    target: _LogTarget,
    instant_time: str,
    values: dict[str, dict[str, Any] | None],
    schema_json: str,
    parsed: Any,
) -> HoodieWriteStat:
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: schema_json}
    blocks: list[bytes] = []
    cells = []
    for key in sorted(values, key=lambda k: k.encode("utf-8")):
        value = values[key]
        if value is not None:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, value)
            cells.append((key.encode("utf-8"), buf.getvalue()))
    if cells:
        layout = hfile_layout(mdt.mdt.config.version)
        create = int(time.time() * 1000) if layout == "hudi" else 0
        hfile = write_hfile(cells, file_info=[(b"schema", schema_json.encode())], layout=layout, create_time_ms=create)
        blocks.append(frame_block(BlockType.HFILE_DATA, dict(header), hfile))
    deleted = [k for k, v in sorted(values.items()) if v is None]
    if deleted:
        blocks.append(
            encode_delete_block([DeleteRecord(k, partition, 0) for k in deleted], header)  # orderingVal IntWrapper 0
        )
    name = target.name.name
    location = join(partition_location(mdt.mdt.base_path, partition), name)
    result = append_log_blocks(mdt.mdt.storage, location, blocks, create_only=True)
    return HoodieWriteStat(
        file_id=target.name.file_id,
        path=f"{partition}/{name}",
        prev_commit=target.prev_commit,
        num_writes=len(values),
        num_deletes=len(deleted),
        num_update_writes=len(cells),
        num_inserts=0,
        total_write_bytes=result.size,
        total_write_errors=0,
        partition_path=partition,
        file_size_in_bytes=result.size,
        log_version=target.name.version,
        log_offset=0,
        base_file=target.base_file,
        log_files=(name,),
    )


def _router(mdt: MetadataTable, partition: str) -> Callable[[str], str]:
    """key -> the file id of the file group it lives in: file groups in file-id order, by the key's hash."""
    groups = sorted({s.file_id for s in mdt.file_slices(partition)})
    if not groups:
        raise InvalidTableConfigError(
            f"metadata partition {partition} has no file groups",
            table=mdt.data.name,
            path=partition_location(mdt.mdt.base_path, partition),
        )
    v2 = routes_by_value(partition, mdt.index_version(partition))
    return lambda key: groups[file_group_index(key, len(groups), secondary_v2=v2)]


def writer_schema(mdt: MetadataTable) -> str:
    """The `HoodieMetadataRecord` schema the table's own files were written with (readers resolve against it)."""
    found = mdt.writer_schema()
    if found is None:  # no base file yet: the schema of the table's version (same canonical form as Hudi's)
        return metadata_record_schema_json(mdt.mdt.config.version)
    return found


def _remove_earlier_attempt(mdt: MetadataTable, instant_time: str) -> Timeline:
    """Remove what an earlier attempt left at `instant_time` (its log files, then its timeline files); returns the
    metadata timeline to continue from. The timeline read when `mdt` was opened is current: the metadata table
    changes only under the data table's lock, which the caller holds."""
    table = mdt.mdt
    existing = mdt.mdt_timeline.get(instant_time)
    if existing is None:
        return mdt.mdt_timeline
    by_version = uses_suffixes(table.config.version)
    for partition in mdt.storage_partitions():
        for fi in mdt.partition_listing(partition):
            parsed = parse_log_file_name(fi.name)
            if parsed is None:
                continue
            # Each attempt writes new log files: named with the instant (version 8+), or holding its blocks only.
            if parsed.instant_time == instant_time or (
                by_version and has_blocks_of(table.storage, fi.location, instant_time, table=mdt.data.name)
            ):
                table.storage.delete(fi.location)
    table.active.delete(existing)
    log.info(
        "metadata table: removed an earlier attempt's %s",
        existing,
        extra={"table": mdt.data.name, "instant": instant_time},
    )
    return table.reload()
