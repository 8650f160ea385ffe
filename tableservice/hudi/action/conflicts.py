"""Conflict rules of optimistic concurrency, in one place: what a commit checks, under the table lock, against the
timeline re-read there (see `tableservice.hudi.action.commit`).

- A compaction leaves out file groups that a replace commit (insert overwrite, clustering) took meanwhile.
- A clustering plan names the files it reads: a write that completed after the plan and touched or replaced an
  input file group makes it impossible (its data would be lost). Table version 6 has no completion times, so the
  plan's input slices must also hold no committed file the plan does not name (late commits).
- A write fails when a write that completed since it started touched its file groups (compactions excepted), or,
  unless updates under clustering are allowed, when a clustering scheduled after it started covers them.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterable

from tableservice.errors import ConflictError
from tableservice.hudi.action.commit import ConflictCheck, WriteStats
from tableservice.hudi.file_group.filenames import parse_base_file_name
from tableservice.hudi.file_group.log_format import BlockType, LogBlock, iter_log_blocks
from tableservice.hudi.models import HoodieClusteringPlan, HoodieReplaceCommitMetadata
from tableservice.hudi.table.fs_view import FileGroupId, partition_location
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant

log = logging.getLogger(__name__)


def writes_completed_since(
    timeline: Timeline, instant: Instant, *, pending_at_start: Iterable[str] = ()
) -> list[Instant]:
    """Completed writes of `timeline` (a fresh load) that completed after pending `instant` was requested.
    With completion times (v8+) they are compared. Table version 6 has none: the writes requested later, and
    those the caller saw pending when it requested `instant` (`pending_at_start`, as Hudi 0.x writers record)."""
    pending = frozenset(pending_at_start)
    out = []
    for other in timeline.completed_writes():
        if other.requested_time == instant.requested_time:
            continue
        if other.completion_time is not None:
            later = other.completion_time > instant.requested_time
        else:
            later = other.requested_time > instant.requested_time or other.requested_time in pending
        if later:
            out.append(other)
    return out


def touched_file_groups(table: HudiTable, write: Instant) -> set[FileGroupId]:
    """File groups a completed write wrote to or replaced."""
    md = table.commit_metadata(write)
    out = {(s.partition_path or "", s.file_id or "") for s in md.write_stats()}
    if isinstance(md, HoodieReplaceCommitMetadata):
        out |= {(p, f) for p, fids in md.replaced_file_ids().items() for f in fids}
    return out


# --- compaction --------------------------------------------------------------------------------------


def without_replaced_groups(table: HudiTable, instant: Instant) -> ConflictCheck:
    """The write stats of file groups no replace commit has taken. A file group replaced (insert overwrite,
    clustering) while the compaction ran is left out of the commit (the commit path deletes its new base file):
    committed, it would outlive the cleaning of the replaced group and bring the overwritten rows back once the
    replace commit is archived. The rest of the plan still completes, so the plan does not stay pending for ever."""

    def check(latest: Timeline, stats: WriteStats) -> WriteStats:
        replaced: dict[FileGroupId, Instant] = {}
        for other in latest.completed_writes():
            if other.requested_time == instant.requested_time:
                continue
            if other.completed_action(table.config.layout_version) is not Action.REPLACE_COMMIT:
                continue
            for p, fids in table.replace_commit_metadata(other).replaced_file_ids().items():
                for f in fids:
                    replaced.setdefault((p, f), other)
        kept = tuple(s for s in stats if (s.partition_path or "", s.file_id or "") not in replaced)
        dropped = sorted({(s.partition_path or "", s.file_id or "") for s in stats} & set(replaced))
        if dropped:
            log.warning(
                "leaving %d replaced file groups out of the compaction (first: %s, replaced by %s)",
                len(dropped),
                dropped[0],
                replaced[dropped[0]],
                extra={"table": table.label, "instant": instant.requested_time},
            )
        return kept

    return check


# --- clustering ------------------------------------------------------------------------------------


def clustering_inputs_untouched(
    table: HudiTable, instant: Instant, plan: HoodieClusteringPlan, *, pending_at_start: Iterable[str] = ()
) -> ConflictCheck:
    """Refuse (ConflictError) when a write that completed after the plan touched or replaced an input file group.
    `pending_at_start`: the writes pending when the tasks started (they read only blocks of instants completed by
    then)."""

    def check(latest: Timeline, stats: WriteStats) -> WriteStats:
        check_clustering_inputs(table, latest, instant, plan, pending_at_start=pending_at_start)
        return stats

    return check


def check_clustering_inputs(
    table: HudiTable,
    latest: Timeline,
    instant: Instant,
    plan: HoodieClusteringPlan,
    *,
    pending_at_start: Iterable[str] = (),
) -> None:
    """The check of `clustering_inputs_untouched`, run once before a plan's job starts too."""
    inputs = plan.file_group_ids()
    for other in writes_completed_since(latest, instant, pending_at_start=pending_at_start):
        clash = touched_file_groups(table, other) & inputs
        if clash:
            raise ConflictError(
                f"{other} wrote file groups {sorted(clash)[:3]} under clustering {instant.requested_time}",
                table=table.label,
            )
    if table.config.version < 8:
        _check_inputs_unchanged(table, latest, instant, plan)


def _named_files(plan: HoodieClusteringPlan) -> dict[FileGroupId, set[str]]:
    """File names the plan reads, per input file group."""
    named: dict[FileGroupId, set[str]] = {}
    for group in plan.input_groups or ():
        for info in group.slices or ():
            paths = ([info.data_file_path] if info.data_file_path else []) + list(info.delta_file_paths or ())
            fg = (info.partition_path or "", info.file_id or "")
            named.setdefault(fg, set()).update(posixpath.basename(p) for p in paths)
    return named


def _check_inputs_unchanged(table: HudiTable, latest: Timeline, instant: Instant, plan: HoodieClusteringPlan) -> None:
    """Table version 6 has no completion times, so a write requested before the plan may have completed after it.
    The plan names the files it reads: refuse when an input file group's latest slice holds a file the plan does
    not name with data of a completed instant in it, or the group is gone (replaced)."""
    named = _named_files(plan)
    partitions = {p for p, _ in named}
    listing = {p: table.storage.list(partition_location(table.base_path, p)) for p in partitions}
    view = table.file_system_view(timeline=latest, listing=listing)
    current = {g.id: g.latest_slice() for p in partitions for g in view.file_groups(p)}
    for fg, names in sorted(named.items()):
        slice_ = current.get(fg)
        if slice_ is None:
            raise ConflictError(
                f"file group {fg[1]} in {fg[0]!r} was replaced after clustering {instant.requested_time} was planned",
                table=table.label,
            )
        extra = sorted(
            name
            for f in slice_.files()
            if (name := posixpath.basename(f)) not in names and _holds_committed_data(table, latest, f)
        )
        if extra:
            raise ConflictError(
                f"file group {fg[1]} in {fg[0]!r} has files written after clustering {instant.requested_time} was "
                f"planned: {extra[:3]}",
                table=table.label,
            )


def _holds_committed_data(table: HudiTable, latest: Timeline, location: str) -> bool:
    """Whether a file holds data of a completed instant. A failed write leaves files behind in table version 6 (its
    rollback only appends a command block), and they hold nothing a reader keeps."""
    name = posixpath.basename(location)
    base = parse_base_file_name(name)
    if base is not None:
        return latest.is_completed(base.instant_time)
    return any(
        isinstance(block, LogBlock)
        and block.block_type is not BlockType.COMMAND
        and latest.is_completed(block.instant_time or "")
        for block in iter_log_blocks(table.storage, location, table=table.label)
    )


# --- writers ---------------------------------------------------------------------------------------


def check_write(
    table: HudiTable,
    latest: Timeline,
    instant: Instant,
    ours: set[FileGroupId],
    *,
    pending_at_start: Iterable[str] = (),
    allow_updates_under_clustering: bool = False,
) -> None:
    """A write's check at commit: fail when a write that completed since it started touched its file groups (or
    replaced them), unless it is a compaction (which leaves the file group's data unchanged); and, unless updates
    under clustering are allowed, when a clustering scheduled after it started covers them."""
    if not allow_updates_under_clustering:
        for fg, clustering in table.view_inputs(latest).pending_clustering.items():
            if fg in ours and clustering > instant.requested_time:
                raise ConflictError(
                    f"clustering {clustering} scheduled after this write started covers file group {fg[1]} "
                    f"in {fg[0]!r}",
                    table=table.label,
                )
    for other in writes_completed_since(latest, instant, pending_at_start=pending_at_start):
        if other.action is Action.COMPACTION:
            continue
        clash = ours & touched_file_groups(table, other)
        if clash:
            raise ConflictError(f"{other} wrote file groups {sorted(clash)[:3]} concurrently", table=table.label)
