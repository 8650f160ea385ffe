"""Compaction strategies: the metrics of one operation, and how a strategy orders and bounds operations.

Metrics (Hudi's FileSliceMetricUtils, one slice): TOTAL_LOG_FILES, TOTAL_LOG_FILES_SIZE (bytes),
TOTAL_IO_READ_MB = (base size + log sizes) // 1 MiB, TOTAL_IO_WRITE_MB = base size // 1 MiB, or
`hoodie.parquet.max.file.size` // 1 MiB when the slice has no base file (or an empty one), and TOTAL_IO_MB =
read + write; all stored as doubles. The dict keeps the order Java's HashMap gives these five keys, which is
the order real plans carry.

Strategies (Hudi 1.x orderAndFilter; ties keep the generation order: partitions sorted, file ids sorted):

- LogFileSizeBased (default): drop operations whose log size is below `hoodie.compaction.logfile.size.threshold`,
  sort by log size descending, then bound the IO: take operations while the remaining budget
  (`hoodie.compaction.target.io` MB) is above zero, subtracting each one's TOTAL_IO_MB (so the operation that
  crosses the budget is taken). Hudi 0.x (table version 6) adds an operation first and stops when the budget
  reaches zero; the two differ only for a budget of zero.
- UnBounded: every operation, in generation order.
- DayBased: partitions read as `yyyy/MM/dd` (hive-style `year=2024/month=01/day=02` too), newest
  `hoodie.compaction.daybased.target.partitions` partitions only, newest first; no IO bound.

Partitions an incremental Hudi planner must revisit (operations dropped by the threshold or the IO bound,
partitions left out by DayBased) are returned as "missing" partitions for the plan's
`missingSchedulePartitions` (table versions 8 and 9).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tableservice.errors import ConfigError
from tableservice.hudi.models import HoodieCompactionOperation
from tableservice.hudi.table.fs_view import FileSlice, LogFile
from tableservice.planning.compaction.policy import MB, CompactionPolicy, CompactionStrategyName

TOTAL_LOG_FILES = "TOTAL_LOG_FILES"
TOTAL_LOG_FILES_SIZE = "TOTAL_LOG_FILES_SIZE"
TOTAL_IO_READ_MB = "TOTAL_IO_READ_MB"
TOTAL_IO_WRITE_MB = "TOTAL_IO_WRITE_MB"
TOTAL_IO_MB = "TOTAL_IO_MB"


def operation_metrics(base_size: int | None, log_sizes: Sequence[int], parquet_max_file_size: int) -> dict[str, float]:
    log_total = sum(s for s in log_sizes if s >= 0)
    base = base_size or 0
    read_mb = (base + log_total) // MB
    write_mb = (base if base > 0 else parquet_max_file_size) // MB
    return {
        TOTAL_LOG_FILES: float(len(log_sizes)),
        TOTAL_IO_MB: float(read_mb + write_mb),
        TOTAL_IO_READ_MB: float(read_mb),
        TOTAL_LOG_FILES_SIZE: float(log_total),
        TOTAL_IO_WRITE_MB: float(write_mb),
    }


def build_operation(slice_: FileSlice, logs: Sequence[LogFile], policy: CompactionPolicy) -> HoodieCompactionOperation:
    """The plan entry of one slice (file names, not paths; `baseInstantTime` = the slice's key)."""
    base = slice_.base_file
    ordered = sorted(logs, key=lambda lf: lf.name.sort_key)
    return HoodieCompactionOperation(
        base_instant_time=slice_.base_instant_time,
        delta_file_paths=tuple(lf.file_name for lf in ordered),
        data_file_path=base.file_name if base is not None else None,
        file_id=slice_.file_id,
        partition_path=slice_.partition_path,
        metrics=operation_metrics(
            base.size if base is not None else None, [lf.size for lf in ordered], policy.parquet_max_file_size
        ),
        bootstrap_file_path=None,
    )


def _metric(op: HoodieCompactionOperation, key: str) -> int:
    return int((op.metrics or {}).get(key, 0.0))


# --- partition dates (DayBased) ------------------------------------------------------------------------------

_DATE_RE = re.compile(r"^(\d+)/(\d+)/(\d+)")


def _without_partition_keys(partition: str) -> str:
    """`year=2019/month=11/day=24` → `2019/11/24` (as Hudi strips hive-style keys)."""
    if "=" not in partition:
        return partition
    out = re.sub(r"^.*?=", "", partition, count=1)
    return re.sub(r"/.*?=", "/", out)


def partition_date(partition: str) -> tuple[int, int, int]:
    """The date a `yyyy/MM/dd` partition path names; a ConfigError for other partitions."""
    m = _DATE_RE.match(_without_partition_keys(partition))
    if m is None:
        raise ConfigError(
            f"DayBasedCompactionStrategy needs yyyy/MM/dd partition paths; partition {partition!r} is not one"
        )
    y, mo, d = (int(g) for g in m.groups())
    return (y, mo, d)


def day_based_partitions(partitions: Sequence[str], policy: CompactionPolicy) -> tuple[list[str], list[str]]:
    """(partitions to plan, partitions left out) for DayBased: Hudi's `filterPartitionPaths` (reverse order of
    the path with `/` read as `-`, first N)."""
    if policy.strategy is not CompactionStrategyName.DAY_BASED:
        return list(partitions), []
    ordered = sorted(partitions, key=lambda p: p.replace("/", "-"), reverse=True)
    n = policy.day_based_target_partitions
    return ordered[:n], ordered[n:]


# --- order and filter ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StrategyResult:
    operations: list[HoodieCompactionOperation]
    missing_partitions: list[str]


def order_and_filter(
    operations: Sequence[HoodieCompactionOperation], policy: CompactionPolicy, table_version: int
) -> StrategyResult:
    if policy.strategy is CompactionStrategyName.UNBOUNDED:
        return StrategyResult(list(operations), [])
    if policy.strategy is CompactionStrategyName.DAY_BASED:
        return _day_based(operations, policy)
    return _log_file_size_based(operations, policy, table_version)


def _log_file_size_based(
    operations: Sequence[HoodieCompactionOperation], policy: CompactionPolicy, table_version: int
) -> StrategyResult:
    missing: list[str] = []
    kept: list[HoodieCompactionOperation] = []
    for op in operations:
        if _metric(op, TOTAL_LOG_FILES_SIZE) >= policy.log_file_size_threshold:
            kept.append(op)
        else:
            missing.append(op.partition_path or "")
    kept.sort(key=lambda op: -_metric(op, TOTAL_LOG_FILES_SIZE))  # stable: ties keep generation order
    out: list[HoodieCompactionOperation] = []
    remaining = policy.target_io_mb
    for op in kept:
        if table_version < 8:
            out.append(op)
            remaining -= _metric(op, TOTAL_IO_MB)
            if remaining <= 0:
                break
        elif remaining > 0:
            remaining -= _metric(op, TOTAL_IO_MB)
            out.append(op)
        else:
            missing.append(op.partition_path or "")
    return StrategyResult(out, missing)


def _day_based(operations: Sequence[HoodieCompactionOperation], policy: CompactionPolicy) -> StrategyResult:
    by_partition: dict[str, list[HoodieCompactionOperation]] = {}
    for op in operations:
        by_partition.setdefault(op.partition_path or "", []).append(op)
    dates = {p: partition_date(p) for p in by_partition}
    ordered = sorted(by_partition, key=lambda p: dates[p], reverse=True)
    n = policy.day_based_target_partitions
    out = [op for p in ordered[:n] for op in by_partition[p]]
    return StrategyResult(out, ordered[n:])
