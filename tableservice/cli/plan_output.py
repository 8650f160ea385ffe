"""What `schedule --dry-run` prints: the plan a schedule command would write, made on the current timeline.

The readable form is one summary line and a line per unit of work (compaction operation, clustering group, clean
partition, index partition). `--json` prints the requested file's content as Hudi's Avro/JSON model (field names as
Hudi writes them), decoded back from the exact bytes the real command would write, so what is shown is what would
be on storage (e.g. version 6 clustering plans without `missingSchedulePartitions`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from tableservice.hudi.models import (
    HoodieCleanerPlan,
    HoodieClusteringPlan,
    HoodieCompactionPlan,
    HoodieIndexPlan,
    decode_instant_content,
)
from tableservice.hudi.table.hudi_table import Requested


def add_dry_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="make the plan on the current timeline and print it; write nothing (no lock is taken)",
    )
    parser.add_argument("--json", action="store_true", help="with --dry-run: print the plan as Hudi's JSON model")


def plan_json(done: Requested[Any], table_name: str) -> dict[str, Any]:
    """The dry run's JSON document: where the plan would go and the plan itself (Hudi's field names)."""
    instant = done.instant
    content = decode_instant_content(done.content, action=instant.action.value, state=instant.state, path=done.path)
    return {
        "table": table_name,
        "dry_run": True,
        "action": instant.action.value,
        "instant": instant.requested_time,
        "file": done.path,
        "plan": content.to_avro() if content is not None else None,
    }


def _compaction_lines(plan: HoodieCompactionPlan) -> tuple[str, list[str]]:
    ops = plan.operations or ()
    logs = sum(len(op.delta_file_paths or ()) for op in ops)
    lines = [
        f"  {op.partition_path or '(unpartitioned)'} {op.file_id} base={op.data_file_path or '-'} "
        f"logs={len(op.delta_file_paths or ())}"
        for op in ops
    ]
    return f"{len(ops)} operations, {logs} log files", lines


def _clustering_lines(plan: HoodieClusteringPlan) -> tuple[str, list[str]]:
    groups = plan.input_groups or ()
    slices = sum(len(g.slices or ()) for g in groups)
    lines = []
    for g in groups:
        partitions = sorted({s.partition_path or "" for s in g.slices or ()})
        lines.append(
            f"  group in {','.join(partitions) or '(unpartitioned)'}: {len(g.slices or ())} file slices -> "
            f"{g.num_output_file_groups} file groups"
        )
    return f"{len(groups)} groups, {slices} file slices", lines


def _clean_lines(plan: HoodieCleanerPlan) -> tuple[str, list[str]]:
    per_partition = plan.file_paths_to_be_deleted_per_partition or {}
    files = sum(len(v) for v in per_partition.values())
    retain = plan.earliest_instant_to_retain.timestamp if plan.earliest_instant_to_retain else "-"
    lines = [f"  {p or '(unpartitioned)'}: {len(v)} files" for p, v in sorted(per_partition.items())]
    lines += [f"  partition {p}: deleted" for p in plan.partitions_to_be_deleted or ()]
    return f"{files} files ({plan.policy}, earliest instant to retain {retain})", lines


def _index_lines(plan: HoodieIndexPlan) -> tuple[str, list[str]]:
    infos = plan.index_partition_infos or ()
    lines = [f"  {i.metadata_partition_path} up to {i.index_upto_instant}" for i in infos]
    return f"{len(infos)} partitions", lines


_SUMMARIES: dict[type, Callable[[Any], tuple[str, list[str]]]] = {
    HoodieCompactionPlan: _compaction_lines,
    HoodieClusteringPlan: _clustering_lines,
    HoodieCleanerPlan: _clean_lines,
    HoodieIndexPlan: _index_lines,
}


def print_dry_run(done: Requested[Any] | None, what: str, table_name: str, *, as_json: bool, nothing: str) -> None:
    """Print the dry run's plan (`what`: the service's word, e.g. compaction), or `nothing` when none is made."""
    if done is None:
        print(json.dumps({"table": table_name, "dry_run": True, "plan": None}) if as_json else f"dry run: {nothing}")
        return
    if as_json:
        print(json.dumps(plan_json(done, table_name), indent=2, sort_keys=False))
        return
    summary, lines = _SUMMARIES[type(done.plan)](done.plan)
    print(f"dry run: would schedule {what} {done.instant.requested_time}: {summary}; nothing was written")
    for line in lines:
        print(line)
