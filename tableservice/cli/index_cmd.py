"""`tableservice index schedule|run|abort|drop|list`: metadata-table indexes of one table, as the daemon builds them.

`schedule` writes an indexing plan (`<t>.indexing.requested`) for the partitions named; `run` executes pending
plans (record keys read on Spark, local unless the config or `--master`/`--remote` say otherwise) under the
table lock and the plan's executor lease; `abort` removes a pending plan and what it built; `drop` removes a
built index; `list` shows completed, building and planned indexes with their sizes.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tableservice.cli.operator import add_table_arguments, operator_table
from tableservice.cli.plan_output import add_dry_run_arguments, print_dry_run
from tableservice.errors import InvalidTableConfigError
from tableservice.hudi.action.indexing import (
    abort_indexing,
    drop_index,
    planned_partitions,
    request_indexing,
    schedule_indexing,
)
from tableservice.hudi.metadata.keys import SECONDARY_INDEX_PREFIX
from tableservice.hudi.metadata.reader import metadata_table_path
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.planning.indexing.policy import IndexingPolicy
from tableservice.service.indexing import index_definitions
from tableservice.storage import Storage, join

PARTITIONS = ("files", "record_index", "column_stats", "bloom_filters", "partition_stats", "secondary_index")


def register(sub: Any) -> None:
    index = sub.add_parser("index", help="build, run, drop or list metadata-table indexes")
    isub = index.add_subparsers(dest="index_command", required=True)
    sched = isub.add_parser("schedule", help="plan an indexing action for an index the table lacks")
    add_table_arguments(sched)
    sched.add_argument("--partition", required=True, choices=PARTITIONS, help="the index to build")
    sched.add_argument("--columns", default="", help="column_stats: the columns; secondary_index: the column")
    sched.add_argument("--name", help="secondary_index: its name (the partition is secondary_index_<name>)")
    add_dry_run_arguments(sched)
    sched.set_defaults(handler=cmd_schedule)
    run = isub.add_parser("run", help="execute pending indexing plans")
    add_table_arguments(run, spark=True)
    run.set_defaults(handler=cmd_run)
    abort = isub.add_parser("abort", help="remove a pending indexing plan and whatever it built")
    add_table_arguments(abort)
    abort.add_argument("--instant", help="the plan's instant (default: every pending plan)")
    abort.set_defaults(handler=cmd_abort)
    drop = isub.add_parser("drop", help="remove a built index (files: the whole metadata table)")
    add_table_arguments(drop)
    drop.add_argument("--partition", required=True, help="the metadata partition, e.g. record_index")
    drop.set_defaults(handler=cmd_drop)
    lst = isub.add_parser("list", help="completed, building and planned indexes, with their sizes")
    lst.add_argument("uri")
    lst.add_argument("--json", action="store_true", help="print JSON")
    lst.set_defaults(handler=cmd_list)


def _partition(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    """The metadata partition `--partition` names, and the secondary index it defines (name -> column)."""
    if args.partition != "secondary_index":
        return args.partition, {}
    columns = [c.strip() for c in args.columns.split(",") if c.strip()]
    if not args.name or len(columns) != 1:
        raise InvalidTableConfigError("a secondary index needs --name and one column in --columns")
    return SECONDARY_INDEX_PREFIX + args.name, {args.name: columns[0]}


def cmd_schedule(args: argparse.Namespace) -> int:
    partition, secondary = _partition(args)
    with operator_table(args) as op:
        table = op.table
        policy = IndexingPolicy.from_mapping(
            {"hoodie.metadata.index.column.stats.column.list": args.columns if partition == "column_stats" else ""}
        )
        definitions = index_definitions(table, [partition], policy, secondary)
        if args.dry_run:
            done = request_indexing(table, [partition], definitions=definitions, dry_run=True)
            nothing = f"{partition} is already built or planned"
            print_dry_run(done, f"indexing of {partition}", op.worker.label, as_json=args.json, nothing=nothing)
            return 0
        instant = schedule_indexing(table, [partition], lock=op.context.lock_factory(), definitions=definitions)
        if instant is None:
            print(f"{partition} is already built or planned")
            return 0
        print(f"scheduled indexing {instant.requested_time} of {partition}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    with operator_table(args) as op:
        pending = list(op.table.reload().pending_of(Action.INDEXING))
        if not pending:
            print("no pending indexing")
            return 0
        for instant in pending:
            result = op.run("indexing", instant.requested_time)
            for done in result.indexed:
                print(
                    f"completed indexing {instant.requested_time}: {', '.join(done.partitions)} "
                    f"({done.records} records, caught up to {done.upto}, {done.seconds:.1f} s)"
                )
    return 0


def cmd_abort(args: argparse.Namespace) -> int:
    with operator_table(args) as op:
        pending = [
            i
            for i in op.table.reload().pending_of(Action.INDEXING)
            if args.instant is None or i.requested_time == args.instant
        ]
        if not pending:
            print("no pending indexing")
            return 0
        for instant in pending:
            abort_indexing(op.table, instant, lock=op.context.lock_factory())
            print(f"aborted indexing {instant.requested_time}")
    return 0


def cmd_drop(args: argparse.Namespace) -> int:
    with operator_table(args) as op:
        if not drop_index(op.table, args.partition, lock=op.context.lock_factory()):
            print(f"{args.partition} is not built")
            return 1
        print(f"dropped {args.partition}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    storage = Storage()
    table = HudiTable.open(storage, args.uri)
    config = table.config
    root = metadata_table_path(table.base_path)
    rows: list[dict[str, Any]] = []

    def size(partition: str) -> tuple[int, int]:
        folder = join(root, partition)
        if not storage.exists(folder):
            return 0, 0
        files = [fi for fi in storage.list(folder) if not fi.is_dir]
        return len(files), sum(fi.size for fi in files)

    for state, names in (("completed", config.metadata_partitions), ("building", config.metadata_partitions_inflight)):
        for p in names:
            count, total = size(p)
            rows.append({"partition": p, "state": state, "files": count, "bytes": total, "instant": None})
    for p, t in sorted(planned_partitions(table, table.timeline()).items()):
        if p not in config.metadata_partitions:
            rows.append({"partition": p, "state": "planned", "files": 0, "bytes": 0, "instant": t})
    if args.json:
        print(json.dumps({"table": config.name, "indexes": rows}, indent=2))
        return 0
    for r in rows:
        where = f" (indexing {r['instant']})" if r["instant"] else ""
        print(f"{r['partition']:<32} {r['state']:<10} {r['files']:>6} files {r['bytes']:>12} bytes{where}")
    if not rows:
        print("no metadata-table index")
    return 0
