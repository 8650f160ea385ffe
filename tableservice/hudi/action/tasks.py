"""Work units executors run: compaction operations and clustering groups, as self-contained JSON.

`compaction_tasks` and `clustering_tasks` are the one place each task type is built: by the services from a
validated plan, and by tests and benchmarks from file slices. Every task of one instant carries the same
table facts (schema with meta fields, properties, the completed and pending instants its reads honour).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from tableservice.errors import InvalidPlanError
from tableservice.hudi.action.cluster import ClusteringTask, SliceInput, run_clustering_task
from tableservice.hudi.action.compact import CompactionTask, run_compaction_task
from tableservice.hudi.file_group.bloom import BloomFilterSettings
from tableservice.hudi.models import HoodieWriteStat
from tableservice.hudi.table.fs_view import FileSlice
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.schema import add_meta_fields
from tableservice.hudi.timeline.active import Timeline
from tableservice.storage import Storage

Task = CompactionTask | ClusteringTask


class SliceToCompact(Protocol):
    """One file slice of a compaction: a plan's resolved operation, or a `CompactionInput`."""

    @property
    def partition(self) -> str: ...
    @property
    def file_id(self) -> str: ...
    @property
    def base_instant_time(self) -> str: ...
    @property
    def base_file(self) -> str | None: ...
    @property
    def log_files(self) -> tuple[str, ...]: ...
    @property
    def size_hint(self) -> int: ...
    @property
    def file_sizes(self) -> Mapping[str, int]: ...


class GroupToCluster(Protocol):
    """One clustering group: a plan's resolved group, or a `ClusteringInput`."""

    @property
    def index(self) -> int: ...
    @property
    def partition(self) -> str: ...
    @property
    def slices(self) -> tuple[SliceInput, ...]: ...
    @property
    def num_output_file_groups(self) -> int: ...
    @property
    def input_bytes(self) -> int: ...


@dataclass(frozen=True)
class CompactionInput:
    partition: str
    file_id: str
    base_instant_time: str
    base_file: str | None
    log_files: tuple[str, ...]
    size_hint: int = 0
    sizes: tuple[tuple[str, int], ...] = ()  # (location, bytes) from the view

    @property
    def file_sizes(self) -> Mapping[str, int]:
        return dict(self.sizes)

    @classmethod
    def of(cls, file_slice: FileSlice) -> CompactionInput:
        return cls(
            file_slice.partition_path,
            file_slice.file_id,
            file_slice.base_instant_time,
            file_slice.base_file.location if file_slice.base_file else None,
            tuple(lf.location for lf in file_slice.log_files),
            file_slice.total_size,
            _sizes(file_slice),
        )


@dataclass(frozen=True)
class ClusteringInput:
    index: int
    partition: str
    slices: tuple[SliceInput, ...]
    num_output_file_groups: int
    input_bytes: int = 0

    @classmethod
    def of(cls, index: int, partition: str, file_slices: Iterable[FileSlice], output_groups: int) -> ClusteringInput:
        chosen = list(file_slices)
        return cls(
            index,
            partition,
            tuple(
                SliceInput(
                    s.file_id,
                    s.base_instant_time,
                    s.base_file.location if s.base_file else None,
                    tuple(lf.location for lf in s.log_files),
                    _sizes(s),
                )
                for s in chosen
            ),
            output_groups,
            sum(s.total_size for s in chosen),
        )


def _sizes(file_slice: FileSlice) -> tuple[tuple[str, int], ...]:
    """(location, bytes) of the slice's files, as its view listed them."""
    logs = tuple((f.location, f.size) for f in file_slice.log_files)
    base = file_slice.base_file
    return logs if base is None else ((base.location, base.size), *logs)


@dataclass(frozen=True)
class ClusteringLayout:
    """How a clustering writes its output: file size target and sort order (linear or z-order)."""

    target_file_bytes: int
    sort_columns: tuple[str, ...] = ()
    layout: str = "linear"


def _shared(
    table: HudiTable,
    timeline: Timeline,
    instant_time: str,
    *,
    compression: str,
    bloom: BloomFilterSettings | None,
    write_token: str,
) -> dict[str, Any]:
    """The fields every task of one instant shares: what it reads, and how it writes its base files (codec, bloom
    filter as JSON fields or None, write token)."""
    schema = table.latest_schema(timeline)
    if schema is None:
        raise InvalidPlanError("table has no schema", table=table.label)
    return {
        "table_name": table.name,
        "base_path": table.base_path,
        "table_version": table.config.version,
        "properties": dict(table.config.properties),
        "avro_schema": add_meta_fields(schema),
        "instant_time": instant_time,
        "completed_instants": tuple(i.requested_time for i in timeline.completed()),
        "timeline_start": timeline.commits_start(),
        "pending_instants": tuple(i.requested_time for i in timeline.pending()),
        "compression": compression,
        "bloom": bloom.to_fields() if bloom is not None else None,
        "write_token": write_token,
    }


def compaction_tasks(
    table: HudiTable,
    timeline: Timeline,
    instant_time: str,
    slices: Iterable[SliceToCompact],
    *,
    compression: str = "gzip",
    bloom: BloomFilterSettings | None = BloomFilterSettings(),  # noqa: B008 - frozen value
    write_token: str = "0-0-0",
    memory_budget: int | None = None,
) -> list[CompactionTask]:
    """One task per file slice, each writing the slice's new base file at `instant_time`; `memory_budget` bounds
    the memory of each slice's merge (`spill.compaction_memory_budget`); `bloom`: the footers' bloom filter (None:
    none, as for a table whose writers write none: `WritePolicy.bloom_filter`)."""
    shared = _shared(table, timeline, instant_time, compression=compression, bloom=bloom, write_token=write_token)
    return [
        CompactionTask(
            **shared,
            partition_path=s.partition,
            file_id=s.file_id,
            base_instant_time=s.base_instant_time,
            base_file=s.base_file,
            log_files=s.log_files,
            size_hint=s.size_hint,
            memory_budget=memory_budget,
            file_sizes=dict(s.file_sizes),
        )
        for s in slices
    ]


def clustering_tasks(
    table: HudiTable,
    timeline: Timeline,
    instant_time: str,
    groups: Iterable[GroupToCluster],
    layout: ClusteringLayout,
    *,
    compression: str = "gzip",
    bloom: BloomFilterSettings | None = BloomFilterSettings(),  # noqa: B008 - frozen value
    write_token: str = "0-0-0",
) -> list[ClusteringTask]:
    """One task per clustering group, each writing the group's new file groups at `instant_time` (`bloom` as for
    `compaction_tasks`)."""
    shared = _shared(table, timeline, instant_time, compression=compression, bloom=bloom, write_token=write_token)
    return [
        ClusteringTask(
            **shared,
            partition_path=g.partition,
            slices=g.slices,
            num_output_groups=g.num_output_file_groups,
            target_file_bytes=layout.target_file_bytes,
            sort_columns=layout.sort_columns,
            layout=layout.layout,
            size_hint=g.input_bytes,
            group_index=g.index,
        )
        for g in groups
    ]


def task_from_json(text: str) -> Task:
    kind = json.loads(text).get("kind", "compaction")
    if kind == "compaction":
        return CompactionTask.from_json(text)
    if kind == "clustering":
        return ClusteringTask.from_json(text)
    raise InvalidPlanError(f"unknown task kind {kind!r}")


def run_task(storage: Storage, task: Task, write_token: str | None = None) -> list[HoodieWriteStat]:
    """Run one task; returns the write stats of the files it wrote."""
    if isinstance(task, CompactionTask):
        return [run_compaction_task(storage, replace(task, write_token=write_token or task.write_token))]
    return run_clustering_task(storage, replace(task, write_token=write_token or task.write_token))
