"""Checking a compaction plan (ours or a Hudi writer's) before executing it, and resolving its files.

A plan names files relative to its partition. Before anything is read or written:

- every operation has a file id and a base instant, names its file group once, and that file group exists in
  the view (replaced groups included: a pending compaction still runs on them);
- no operation's file group is under pending clustering or under another pending compaction;
- its partition path and file names resolve inside the table (`plan_paths.resolve_in_partition`: no absolute
  paths, no `..`, plain file names); version-1 plans (absolute paths) are mapped onto the table first;
- each file name parses as a base or log file of that file group, the base file's instant is the operation's
  `baseInstantTime`, which is older than the compaction instant, and every named file is in the listing.

Problems raise InvalidPlanError naming the plan file and the offending value; a named file that does not
exist raises FileMissingError.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from tableservice.errors import FileMissingError, InvalidPlanError
from tableservice.hudi.action.plan_paths import resolve_absolute, resolve_in_partition
from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.hudi.models import HoodieCompactionOperation, HoodieCompactionPlan
from tableservice.hudi.table.fs_view import FileGroup, FileSystemView
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Instant


@dataclass(frozen=True)
class ResolvedOperation:
    """One operation of a plan, with its files resolved to locations (log files in log order)."""

    partition: str
    file_id: str
    base_instant_time: str
    base_file: str | None
    log_files: tuple[str, ...]
    operation: HoodieCompactionOperation
    sizes: tuple[tuple[str, int], ...] = ()  # (location, bytes) as the file-system view listed them

    @property
    def file_sizes(self) -> Mapping[str, int]:
        """Bytes of the operation's files by location (the task opens them without a HEAD)."""
        return dict(self.sizes)

    @property
    def size_hint(self) -> int:
        """Bytes the operation reads, as the plan's metrics estimate them (for balancing tasks)."""
        return int((self.operation.metrics or {}).get("TOTAL_IO_READ_MB", 0) * 1024 * 1024)


def _name(value: str, *, version: int, base_path: str, plan_file: str) -> str:
    """The file name an operation field holds (version-1 plans hold absolute paths)."""
    if version >= 2 or "/" not in value:
        return value
    return posixpath.basename(resolve_absolute(base_path, value, plan_file=plan_file))


def _resolve_one(
    table: HudiTable,
    view: FileSystemView,
    groups: dict[tuple[str, str], FileGroup],
    instant: Instant,
    op: HoodieCompactionOperation,
    version: int,
    plan_file: str,
) -> ResolvedOperation:
    def bad(problem: str) -> InvalidPlanError:
        return InvalidPlanError(problem, table=table.label, path=plan_file)

    if not op.file_id:
        raise bad(f"an operation has no fileId (partition {op.partition_path!r})")
    if not op.base_instant_time:
        raise bad(f"operation for file group {op.file_id!r} has no baseInstantTime")
    partition = op.partition_path or ""
    fg = (partition, op.file_id)
    if op.base_instant_time >= instant.requested_time:
        raise bad(f"baseInstantTime {op.base_instant_time} of file group {op.file_id!r} is not older than {instant}")
    # Paths first: nothing outside the table is even looked up.
    base_name, base_location = None, None
    if op.data_file_path:
        base_name = _name(op.data_file_path, version=version, base_path=table.base_path, plan_file=plan_file)
        base_location = resolve_in_partition(table.base_path, partition, base_name, plan_file=plan_file)
    log_names = []
    for raw in op.delta_file_paths or ():
        name = _name(raw, version=version, base_path=table.base_path, plan_file=plan_file)
        log_names.append((raw, name, resolve_in_partition(table.base_path, partition, name, plan_file=plan_file)))
    if not op.data_file_path and not log_names:
        raise bad(f"operation for file group {op.file_id!r} names no file")

    clustering = view.inputs.pending_clustering.get(fg)
    if clustering is not None:
        raise bad(f"file group {op.file_id!r} in partition {partition!r} is under pending clustering {clustering}")
    other = view.inputs.pending_compaction.get(fg)
    if other is not None and other != instant.requested_time:
        raise bad(f"file group {op.file_id!r} in partition {partition!r} is also under pending compaction {other}")
    group = groups.get(fg)
    if group is None:
        raise bad(f"file group {op.file_id!r} in partition {partition!r} does not exist")
    known = {lf.file_name: lf.size for s in group.slices for lf in s.log_files}
    known.update((s.base_file.file_name, s.base_file.size) for s in group.slices if s.base_file is not None)

    def require(name: str) -> None:
        if name not in known:
            raise FileMissingError(
                f"file {name!r} of file group {op.file_id!r} named by the plan does not exist",
                table=table.label,
                path=plan_file,
            )

    if base_name is not None:
        parsed = parse_base_file_name(base_name)
        if parsed is None or parsed.file_id != op.file_id:
            raise bad(f"dataFilePath {op.data_file_path!r} is not a base file of file group {op.file_id!r}")
        if parsed.instant_time != op.base_instant_time:
            raise bad(f"dataFilePath {op.data_file_path!r} does not match baseInstantTime {op.base_instant_time}")
        require(base_name)
    logs = []
    for raw, name, location in log_names:
        parsed_log = parse_log_file_name(name)
        if parsed_log is None or parsed_log.file_id != op.file_id:
            raise bad(f"deltaFilePath {raw!r} is not a log file of file group {op.file_id!r}")
        require(name)
        logs.append((parsed_log.sort_key, location, known[name]))
    logs.sort(key=lambda kv: kv[0])
    sizes = tuple((location, size) for _, location, size in logs)
    if base_name is not None and base_location is not None:
        sizes = ((base_location, known[base_name]), *sizes)
    return ResolvedOperation(
        partition=partition,
        file_id=op.file_id,
        base_instant_time=op.base_instant_time,
        base_file=base_location,
        log_files=tuple(loc for _, loc, _ in logs),
        operation=op,
        sizes=sizes,
    )


def validate_compaction_plan(
    table: HudiTable,
    instant: Instant,
    plan: HoodieCompactionPlan,
    *,
    plan_file: str,
    timeline: Timeline | None = None,
    view: FileSystemView | None = None,
) -> list[ResolvedOperation]:
    """The operations of `plan` (the plan of compaction `instant`) resolved against the table, in plan order.
    `timeline` / `view` default to the table's current ones."""
    tl = timeline if timeline is not None else table.timeline()
    fsv = view if view is not None else table.file_system_view(timeline=tl)
    groups = {g.id: g for g in fsv.all_file_groups()}
    version = plan.version if plan.version is not None else 1
    seen: set[tuple[str, str]] = set()
    out = []
    for op in plan.operations or ():
        resolved = _resolve_one(table, fsv, groups, instant, op, version, plan_file)
        fg = (resolved.partition, resolved.file_id)
        if fg in seen:
            raise InvalidPlanError(
                f"file group {resolved.file_id!r} in partition {resolved.partition!r} appears twice",
                table=table.label,
                path=plan_file,
            )
        seen.add(fg)
        out.append(resolved)
    return out
