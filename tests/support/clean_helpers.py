"""Helpers of the clean tests: tables with several commits, an insert overwrite and (MOR) a compaction, and an
independent model of their file slices built from the commits' write stats and compaction plans (not from the
file-system view), with the clean rules applied to it."""

from __future__ import annotations

import posixpath
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from tableservice.hudi.action.clean import schedule_clean
from tableservice.hudi.action.compact import compaction_commit_metadata, run_compaction_task
from tableservice.hudi.action.tasks import compaction_tasks
from tableservice.hudi.file_group.filenames import parse_base_file_name
from tableservice.hudi.models import (
    HoodieCleanerPlan,
    HoodieReplaceCommitMetadata,
    HoodieRequestedReplaceMetadata,
    decode_cleaner_plan,
    encode_commit_metadata,
    encode_compaction_plan,
    encode_requested_replace_metadata,
)
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.schema import avro_schema_to_json
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.planning.clean.plan import (
    CleanPlanner,
    CleanPolicy,
    load_clean_timeline,
)
from tableservice.planning.compaction.plan import plan_compaction
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.planning.compaction.validate import validate_compaction_plan
from tableservice.storage import Storage
from tests.support.oracle import hudi_read
from tests.support.trip_tables import create_trip_table

FG = tuple[str, str]
SF, SP = "city=san_francisco", "city=sao_paulo"
CASES = [(v, tt) for v in (6, 8, 9) for tt in (TableType.COPY_ON_WRITE, TableType.MERGE_ON_READ)]
IDS = [f"v{v}-{tt.value[:3]}" for v, tt in CASES]


# --- building tables -------------------------------------------------------------------------------


def create(path: str, version: int, table_type: TableType) -> WriteClient:
    storage = Storage()
    create_trip_table(path, version, table_type, storage=storage)
    return WriteClient(storage, path, options=WriteOptions(max_file_records=40))


def schedule_compaction(path: str) -> Instant:
    table = HudiTable.open(Storage(), path)
    t = table.active.new_instant_time(table.reload())
    plan = plan_compaction(table, t, CompactionPolicy(), timeline=table.timeline())
    assert plan is not None
    data = encode_compaction_plan(plan, table_version=table.config.version)
    return table.active.create_requested(t, Action.COMPACTION, data)


def complete_compaction(path: str, instant: Instant) -> None:
    """The steps of tableservice.service.compaction without Spark: one run_compaction_task per operation."""
    table = HudiTable.open(Storage(), path)
    timeline = table.reload()
    plan = table.compaction_plan(instant)
    ops = validate_compaction_plan(table, instant, plan, plan_file="plan")
    schema = table.latest_schema(timeline)
    assert schema is not None
    tasks = compaction_tasks(table, timeline, instant.requested_time, ops)
    inflight = table.active.transition_to_inflight(instant)
    stats = [run_compaction_task(table.storage, task) for task in tasks]
    md = compaction_commit_metadata(stats, avro_schema_to_json(schema))
    data = encode_commit_metadata(md, table_version=table.config.version)
    table.active.transition_to_completed(inflight, data, timeline=table.reload())


def build(path: str, version: int, table_type: TableType) -> None:
    """Three writes, (MOR) a compaction, an insert overwrite of san_francisco, two more writes."""
    client = create(path, version, table_type)
    steps = list(Workload(160, 6, 0.3, 0.03, partitions=2, seed=5).steps())
    for step in steps[:3]:
        client.apply(step)
    if table_type is TableType.MERGE_ON_READ:
        complete_compaction(path, schedule_compaction(path))
    client.insert_overwrite(next(iter(Workload(30, 1, partitions=1, seed=99).steps())).records)
    for step in steps[3:5]:
        client.apply(step)


def build_all(root: Path) -> dict[tuple[int, TableType], str]:
    out = {}
    for version, table_type in CASES:
        path = str(root / f"v{version}_{table_type.value}" / "t")
        build(path, version, table_type)
        out[(version, table_type)] = path
    return out


def copy_of(built: dict[tuple[int, TableType], str], case: tuple[int, TableType], tmp_path: Path) -> str:
    dest = tmp_path / "t"
    shutil.copytree(built[case], dest)  # copy2 keeps modification times (v6 completion times)
    return str(dest)


# --- the independent model -------------------------------------------------------------------------


@dataclass
class Ledger:
    """File slices per file group, oldest first, from write stats and compaction plans only."""

    slices: dict[FG, list[tuple[str, list[str]]]] = field(default_factory=dict)
    replaced: dict[FG, str] = field(default_factory=dict)
    pending_base: dict[FG, str] = field(default_factory=dict)
    completed: list[str] = field(default_factory=list)  # completed write instants
    pending: list[str] = field(default_factory=list)  # pending write instants


def timeline_of(table: HudiTable) -> Timeline:
    return load_clean_timeline(table).timeline


def ledger(table: HudiTable) -> Ledger:
    out = Ledger()
    for instant in timeline_of(table).write_instants():
        t = instant.requested_time
        if not instant.is_completed:
            out.pending.append(t)
        else:
            out.completed.append(t)
        if instant.action is Action.COMPACTION:
            for op in table.compaction_plan(instant).operations or ():
                fg = (op.partition_path or "", op.file_id or "")
                out.slices.setdefault(fg, []).append((t, []))
                if not instant.is_completed:
                    out.pending_base[fg] = op.base_instant_time or ""
        if not instant.is_completed:
            continue
        md = table.commit_metadata(instant)
        for stat in md.write_stats():
            fg = (stat.partition_path or "", stat.file_id or "")
            rel = stat.path or ""
            group = out.slices.setdefault(fg, [])
            if parse_base_file_name(posixpath.basename(rel)) is not None:
                if group and group[-1][0] == t:
                    group[-1][1].insert(0, rel)
                else:
                    group.append((t, [rel]))
            elif rel not in group[-1][1]:
                group[-1][1].append(rel)
        if isinstance(md, HoodieReplaceCommitMetadata):
            for p, fids in md.replaced_file_ids().items():
                for fid in fids:
                    out.replaced[(p, fid)] = t
    return out


def expected_ectr(book: Ledger, retained: int) -> str | None:
    if len(book.completed) <= retained:
        return None
    nth = book.completed[-retained]
    if book.pending and book.pending[0] < nth:
        before = [t for t in book.completed if t < book.pending[0]]
        return before[-1] if before else None
    return nth


def expected_files(
    book: Ledger, ectr: str | None, versions: int | None, savepointed: frozenset[str] | set[str] = frozenset()
) -> set[str]:
    """Relative paths the rules delete; `versions` set → KEEP_LATEST_FILE_VERSIONS, else commit-based."""

    def protected(fg: FG, base: str, files: list[str]) -> bool:
        pending = book.pending_base.get(fg)
        saved = any(posixpath.basename(f) in savepointed for f in files)
        return saved or (pending is not None and base >= pending)

    out: set[str] = set()
    for fg, oldest_first in book.slices.items():
        newest_first = list(reversed(oldest_first))
        replaced_at = book.replaced.get(fg)
        if replaced_at is not None:
            if versions is not None or (ectr is not None and replaced_at < ectr):
                out |= {f for base, files in newest_first if not protected(fg, "", files) for f in files}
            continue
        if versions is not None:
            keep = versions - (1 if fg in book.pending_base else 0)
            rest = [(b, f) for b, f in newest_first if not protected(fg, b, f)]
            out |= {x for _, files in rest[max(keep, 0) :] for x in files}
            continue
        if ectr is None:
            continue
        latest = newest_first[0][0]
        before = next((b for b, _ in newest_first if b < ectr), None)
        for base, files in newest_first:
            if base not in (latest, before) and base < ectr and not protected(fg, base, files):
                out |= set(files)
    return out


def relative(path: str, plan_path: str) -> str:
    assert plan_path.startswith("file:/"), plan_path
    prefix = "file:" + path + "/"
    assert plan_path.startswith(prefix)
    return plan_path[len(prefix) :]


def plan_relative(path: str, plan: HoodieCleanerPlan) -> set[str]:
    return {
        relative(path, fi.file_path or "")
        for infos in (plan.file_paths_to_be_deleted_per_partition or {}).values()
        for fi in infos
    }


def reads(path: str, instants: list[str]) -> dict[str | None, pa.Table]:
    out: dict[str | None, pa.Table] = {None: hudi_read(path)}
    for t in instants:
        out[t] = hudi_read(path, as_of=t)
    return out


def data_files(path: str) -> set[str]:
    root = Path(path)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".hoodie" not in p.parts}


POLICIES = {
    "commits": {"hoodie.cleaner.commits.retained": "2"},
    "versions": {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": "1"},
    "hours": {"hoodie.cleaner.policy": "KEEP_LATEST_BY_HOURS", "hoodie.cleaner.hours.retained": "1"},
}


def scheduled(
    path: str, policy: CleanPolicy, storage: Storage | None = None
) -> tuple[HudiTable, Instant, HoodieCleanerPlan]:
    table = HudiTable.open(storage or Storage(), path)
    instant = schedule_clean(table, CleanPlanner(policy), force=True)
    assert instant is not None
    plan_file = table.active.path_of(instant)
    return table, instant, decode_cleaner_plan(table.storage.read_bytes(plan_file), path=plan_file)


def delete_partition(path: str, partition: str, storage: Storage | None = None) -> str:
    """A DELETE_PARTITION replace commit (all file groups of the partition replaced, no new file)."""
    table = HudiTable.open(storage or Storage(), path)
    version = table.config.version
    timeline = table.reload()
    fids = tuple(g.file_id for g in table.file_system_view(timeline=timeline).file_groups(partition))
    requested = HoodieRequestedReplaceMetadata(
        operation_type="DELETE_PARTITION", clustering_plan=None, extra_metadata={}, version=1
    )
    t = table.active.new_instant_time(timeline)
    data = encode_requested_replace_metadata(requested, table_version=version)
    instant = table.active.create_requested(t, Action.REPLACE_COMMIT, data)
    instant = table.active.transition_to_inflight(instant)
    md = HoodieReplaceCommitMetadata(
        partition_to_write_stats={},
        compacted=False,
        extra_metadata={},
        operation_type="DELETE_PARTITION",
        partition_to_replace_file_ids={partition: fids},
    )
    table.active.transition_to_completed(
        instant, encode_commit_metadata(md, table_version=version), timeline=table.reload()
    )
    return t


def insert_into(path: str, partition_value: str, seed: int) -> str:
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=40))
    rows = next(iter(Workload(20, 1, partitions=0, seed=seed).steps())).records
    rows = rows.set_column(rows.schema.get_field_index("city"), "city", pa.array([partition_value] * rows.num_rows))
    return client.insert(rows).instant_time
