"""Executing compaction in the format layer: one operation (a file slice) into one new base file, and the
commit that completes a compaction instant.

`CompactionTask` is everything one operation needs, as plain JSON-able data, so that a Spark task (or any other
worker) can run it without the table's timeline: the table's properties (merge mode, ordering fields), the read
schema, the slice's files and the instants whose log blocks count.

The new base file is `<fileId>_<writeToken>_<compactionInstant>.parquet`. Records keep their commit time and
sequence number; `_hoodie_file_name` names the new file (as Hudi's compactor writes them).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from tableservice.errors import FileMissingError, InvalidPlanError, StaleAttemptError
from tableservice.hudi.file_group.base_file import write_base_file
from tableservice.hudi.file_group.bloom import BloomFilterSettings, default_bloom
from tableservice.hudi.file_group.filenames import BaseFileName, parse_base_file_name, parse_log_file_name
from tableservice.hudi.file_group.merge import merge_config_from_properties
from tableservice.hudi.file_group.reader import BlockFilter, FileGroupReader
from tableservice.hudi.models import HoodieCommitMetadata, HoodieRuntimeStats, HoodieWriteStat
from tableservice.hudi.table.fs_view import BaseFile, FileSlice, LogFile, partition_location
from tableservice.hudi.table.schema import arrow_schema_from_avro
from tableservice.hudi.write.markers import MarkerType, create_marker
from tableservice.storage import Storage, join
from tableservice.storage.sizes import known_sizes

FILE_NAME = "_hoodie_file_name"


@dataclass(frozen=True)
class CompactionTask:
    """One compaction operation, self-contained."""

    table_name: str
    base_path: str
    table_version: int
    properties: dict[str, str]
    avro_schema: dict[str, Any]  # with meta fields
    instant_time: str
    partition_path: str
    file_id: str
    base_instant_time: str
    base_file: str | None  # location
    log_files: tuple[str, ...]  # locations, in log order
    completed_instants: tuple[str, ...]  # for table version 6: blocks of these instants count
    timeline_start: str | None
    write_token: str = "0-0-0"
    compression: str = "gzip"
    size_hint: int = 0  # bytes to read (base + logs), for balancing tasks
    attempt_id: str = ""  # fencing: the attempt this task belongs to (see `attempt_file`)
    extra: dict[str, str] = field(default_factory=dict)
    kind: str = "compaction"
    pending_instants: tuple[str, ...] = ()  # never treated as archived
    memory_budget: int | None = None  # bytes of log records before the merge spills (None: unbounded)
    file_sizes: dict[str, int] = field(default_factory=dict)  # location -> bytes, as the plan's view listed them
    bloom: dict[str, Any] | None = field(default_factory=default_bloom)  # the footer's filter (None: none)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> CompactionTask:
        data = json.loads(text)
        data["log_files"] = tuple(data["log_files"])
        data["completed_instants"] = tuple(data["completed_instants"])
        data["pending_instants"] = tuple(data.get("pending_instants", ()))
        return cls(**data)

    @property
    def new_file_name(self) -> str:
        return BaseFileName(self.file_id, self.write_token, self.instant_time, ".parquet").name


def slice_at(
    storage: Storage,
    partition: str,
    file_id: str,
    base_instant_time: str,
    base_file: str | None,
    log_files: Sequence[str],
    sizes: Mapping[str, int] | None = None,
) -> FileSlice:
    """A file slice from the locations a task names; sizes from `sizes` (what the plan's listing gave), else from
    storage (a HEAD each on S3)."""
    known = sizes or {}

    def size_of(location: str) -> int:
        if known.get(location, 0) > 0:
            return known[location]
        info = storage.info(location)
        return info.size if info else 0

    base = None
    if base_file is not None:
        name = parse_base_file_name(base_file.rsplit("/", 1)[-1])
        if name is None:
            raise InvalidPlanError(f"{base_file!r} is not a base file name")
        base = BaseFile(base_file, name, size_of(base_file))
    logs = []
    for loc in log_files:
        lname = parse_log_file_name(loc.rsplit("/", 1)[-1])
        if lname is None:
            raise InvalidPlanError(f"{loc!r} is not a log file name")
        logs.append(LogFile(loc, lname, size_of(loc)))
    return FileSlice(partition, file_id, base_instant_time, base, tuple(logs))


def task_reader(storage: Storage, task: Any) -> FileGroupReader:
    """The merged reader a task uses: the table's merge mode and read schema, and the log blocks committed by
    the time the task's instant was planned."""
    return FileGroupReader(
        storage,
        table_name=task.table_name,
        merge_config=merge_config_from_properties(task.properties, task.table_version),
        schema=arrow_schema_from_avro(task.avro_schema),
        block_filter=BlockFilter(
            task.table_version,
            frozenset(task.completed_instants),
            task.timeline_start,
            as_of=task.instant_time,
            pending=frozenset(task.pending_instants),
        ),
        memory_budget=getattr(task, "memory_budget", None),
    )


def check_attempt(storage: Storage, task: Any) -> None:
    """Fencing check for any task carrying `base_path`, `instant_time`, `attempt_id` and `table_name`."""
    _check_attempt(storage, task)


def run_compaction_task(storage: Storage, task: CompactionTask) -> HoodieWriteStat:
    """Merge the slice and write the new base file (marker first). Returns the write stat of the new file. The
    input files open without a HEAD where the task carries their sizes."""
    with known_sizes(task.file_sizes):
        return _run_compaction_task(storage, task)


def _run_compaction_task(storage: Storage, task: CompactionTask) -> HoodieWriteStat:
    started = time.monotonic()
    reader = task_reader(storage, task)
    slice_ = slice_at(
        storage,
        task.partition_path,
        task.file_id,
        task.base_instant_time,
        task.base_file,
        task.log_files,
        task.file_sizes,
    )
    name = task.new_file_name
    _check_attempt(storage, task)
    create_marker(storage, task.base_path, task.instant_time, task.partition_path, name, MarkerType.CREATE)
    location = join(partition_location(task.base_path, task.partition_path), name)

    parts = reader.read_slice(slice_)
    try:
        result = write_base_file(  # sets `_hoodie_file_name` on every row (`file_name`)
            storage,
            location,
            _as_batches(parts),
            avro_schema=task.avro_schema,
            compression=task.compression,
            bloom=BloomFilterSettings.from_fields(task.bloom),
            file_name=name,
        )
    finally:
        parts.close()  # a bounded merge removes its spill files now, also when the write failed
    try:
        _check_attempt(storage, task)
    except StaleAttemptError:
        storage.delete(location)
        raise
    stats = reader.last_stats
    relative = f"{task.partition_path}/{name}" if task.partition_path else name
    return HoodieWriteStat(
        file_id=task.file_id,
        path=relative,
        prev_commit=task.base_instant_time,
        num_writes=result.num_rows,
        num_deletes=0,
        num_update_writes=0,
        num_inserts=0,
        total_write_bytes=result.file_size,
        total_write_errors=0,
        partition_path=task.partition_path,
        total_log_records=stats.log_records,
        total_log_files_compacted=len(slice_.log_files),
        total_log_size_compacted=slice_.log_size,
        total_updated_records_compacted=stats.log_records,
        total_log_blocks=stats.log_blocks,
        total_corrupt_log_block=stats.corrupt_blocks,
        total_rollback_blocks=stats.rollback_blocks,
        file_size_in_bytes=result.file_size,
        prev_base_file=slice_.base_file.file_name if slice_.base_file else None,
        runtime_stats=HoodieRuntimeStats(
            total_scan_time=0, total_create_time=0, total_upsert_time=int((time.monotonic() - started) * 1000)
        ),
    )


def attempt_file(base_path: str, instant_time: str) -> str:
    """`.hoodie/.temp/<instant>/ATTEMPT`: the id of the attempt allowed to write files for the instant."""
    return join(base_path, ".hoodie", ".temp", instant_time, "ATTEMPT")


def start_attempt(storage: Storage, base_path: str, instant_time: str) -> str:
    """Record a new attempt; tasks of earlier attempts that still run (orphaned jobs after a crash of the driver
    on a cluster or Spark Connect) delete what they write once they see it."""
    attempt = uuid.uuid4().hex
    storage.write_bytes(attempt_file(base_path, instant_time), attempt.encode())
    return attempt


def _check_attempt(storage: Storage, task: CompactionTask | Any) -> None:
    if not task.attempt_id:
        return
    try:
        current = storage.read_bytes(attempt_file(task.base_path, task.instant_time)).decode()
    except FileMissingError:
        current = ""
    if current != task.attempt_id:
        raise StaleAttemptError(
            f"attempt {task.attempt_id} of compaction {task.instant_time} was superseded "
            f"(current: {current or 'none'})",
            table=task.table_name,
        )


def _as_batches(tables: Iterator[pa.Table]) -> Iterator[pa.RecordBatch]:
    for t in tables:
        yield from t.to_batches()


def compaction_commit_metadata(
    stats: Sequence[HoodieWriteStat], schema_json: str, extra: Mapping[str, str] | None = None
) -> HoodieCommitMetadata:
    """The metadata of a completed compaction: `compacted=true`, operation COMPACT, stats by partition."""
    by_partition: dict[str, list[HoodieWriteStat]] = {}
    for s in stats:
        by_partition.setdefault(s.partition_path or "", []).append(s)
    extra_md = {"schema": schema_json}
    extra_md.update(extra or {})
    return HoodieCommitMetadata(
        partition_to_write_stats={p: tuple(v) for p, v in by_partition.items()},
        compacted=True,
        extra_metadata=extra_md,
        operation_type="COMPACT",
    )
