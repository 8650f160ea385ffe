"""Clustering groups of one partition, as Hudi's size-based plan strategy builds them.

Rules (SparkSizeBasedClusteringPlanStrategy + PartitionAwareClusteringPlanStrategy + ClusteringPlanStrategy,
Hudi 0.14 to 1.x; checked against the real clustering plans of the fixtures):

- Eligible slices: the latest slice of every visible file group, leaving out file groups under pending
  compaction, pending log compaction or pending clustering, and slices whose base file is not smaller than
  `small.file.limit` (a slice without base file counts as size 0 here, so it is eligible).
- Size of a slice: its base file's size, or `hoodie.parquet.max.file.size` without base file. Log files do not
  count, neither for eligibility nor for grouping.
- Slices sorted by size, largest first (stable: ties keep the view's order, file ids ascending). A group is
  closed before the slice that would take it past `max.bytes.per.group` (a single slice larger than the cap
  makes a group of its own); once `max.num.groups` groups are closed in the partition, the rest of the
  partition is left out (the partition is then "partially scheduled"). The last group is kept when it holds
  more than one slice, or when sort columns are set, or with single-group clustering enabled (the default).
- `numOutputFileGroups` = ceil(group size / `target.file.max.bytes`).
- Metrics (FileSliceMetricUtils over the group's slices): TOTAL_LOG_FILES, TOTAL_LOG_FILES_SIZE (bytes),
  TOTAL_IO_READ_MB = (base sizes + log sizes) // 1 MiB, TOTAL_IO_WRITE_MB = (base sizes, or
  `hoodie.parquet.max.file.size` per slice without base) // 1 MiB, TOTAL_IO_MB = read + write; doubles, in the
  key order Java's HashMap gives them (the order real plans carry).
- Slice entries: absolute `dataFilePath` ("" without base file), `deltaFilePaths` newest first (Hudi's
  FileSlice keeps log files in reverse log order), `fileId`, `partitionPath`, `bootstrapFilePath` "" and
  version 1. Local paths are written as `file:/...` (as Hudi's Hadoop paths print), other schemes as they are.

Hudi 1.1 also closes a group when a base file's Parquet schema differs from the group's first one (unless
`binary.copy.schema.evolution.enable`); that needs the files' footers and is not modelled here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tableservice.hudi.models import HoodieClusteringGroup, HoodieSliceInfo
from tableservice.hudi.table.fs_view import FileSlice, FileSystemView
from tableservice.planning.clustering.policy import MB, ClusteringPolicy

TOTAL_LOG_FILES = "TOTAL_LOG_FILES"
TOTAL_LOG_FILES_SIZE = "TOTAL_LOG_FILES_SIZE"
TOTAL_IO_READ_MB = "TOTAL_IO_READ_MB"
TOTAL_IO_WRITE_MB = "TOTAL_IO_WRITE_MB"
TOTAL_IO_MB = "TOTAL_IO_MB"


def slice_size(slice_: FileSlice, policy: ClusteringPolicy) -> int:
    """The size Hudi's planner counts for a slice (base file only)."""
    return slice_.base_file.size if slice_.base_file is not None else policy.parquet_max_file_size


def eligible_slices(view: FileSystemView, partition: str, policy: ClusteringPolicy) -> list[FileSlice]:
    excluded = view.inputs.under_pending_services()
    out = []
    for s in view.latest_slices(partition):
        if s.file_group_id in excluded or s.is_empty:
            continue
        base_size = s.base_file.size if s.base_file is not None else 0
        if base_size < policy.small_file_limit:
            out.append(s)
    return out


def hudi_location(location: str) -> str:
    """A location as Hudi writes absolute paths into plans: local paths as `file:/...`."""
    if "://" in location or location.startswith("file:"):
        return location
    return "file:" + location if location.startswith("/") else location


def slice_info(slice_: FileSlice) -> HoodieSliceInfo:
    newest_first = sorted(slice_.log_files, key=lambda lf: lf.name.sort_key, reverse=True)
    return HoodieSliceInfo(
        data_file_path=hudi_location(slice_.base_file.location) if slice_.base_file is not None else "",
        delta_file_paths=tuple(hudi_location(lf.location) for lf in newest_first),
        file_id=slice_.file_id,
        partition_path=slice_.partition_path,
        bootstrap_file_path="",
        version=1,
    )


def group_metrics(slices: Sequence[FileSlice], parquet_max_file_size: int) -> dict[str, float]:
    log_files = 0
    log_bytes = 0
    read = 0
    write = 0
    for s in slices:
        log_files += len(s.log_files)
        log_bytes += sum(lf.size for lf in s.log_files if lf.size >= 0)
        base = s.base_file.size if s.base_file is not None else 0
        read += base
        write += base if base > 0 else parquet_max_file_size
    read_mb = (read + log_bytes) // MB
    write_mb = write // MB
    return {
        TOTAL_LOG_FILES: float(log_files),
        TOTAL_IO_MB: float(read_mb + write_mb),
        TOTAL_IO_READ_MB: float(read_mb),
        TOTAL_LOG_FILES_SIZE: float(log_bytes),
        TOTAL_IO_WRITE_MB: float(write_mb),
    }


@dataclass(frozen=True)
class PartitionGroups:
    """The groups built for one partition; `partial` when slices were left out by `max.num.groups`."""

    partition: str
    groups: list[HoodieClusteringGroup]
    slices: list[list[FileSlice]]
    partial: bool


def _group(slices: list[FileSlice], size: int, policy: ClusteringPolicy) -> HoodieClusteringGroup:
    return HoodieClusteringGroup(
        slices=tuple(slice_info(s) for s in slices),
        metrics=group_metrics(slices, policy.parquet_max_file_size),
        num_output_file_groups=math.ceil(size / policy.target_file_max_bytes),
        extra_metadata=None,
        version=1,
    )


def build_partition_groups(partition: str, slices: Sequence[FileSlice], policy: ClusteringPolicy) -> PartitionGroups:
    ordered = sorted(slices, key=lambda s: -slice_size(s, policy))
    closed: list[tuple[list[FileSlice], int]] = []
    current: list[FileSlice] = []
    total = 0
    partial = False
    for s in ordered:
        size = slice_size(s, policy)
        if current and total + size > policy.max_bytes_per_group:
            closed.append((current, total))
            current, total = [], 0
            if len(closed) >= policy.max_num_groups:
                partial = True
                break
        current.append(s)
        total += size
    if current and (len(current) > 1 or policy.keeps_single_slice_groups):
        closed.append((current, total))
    return PartitionGroups(
        partition=partition,
        groups=[_group(members, size, policy) for members, size in closed],
        slices=[members for members, _ in closed],
        partial=partial,
    )
