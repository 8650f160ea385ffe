"""Operator commands for clean, clustering and savepoints on one table (local Spark unless told otherwise)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from tableservice.errors import ActionAbandonedError
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.clean import dry_run, execute_clean, pending_cleans, schedule_clean
from tableservice.hudi.savepoint import create_savepoint, delete_savepoint, list_savepoints
from tableservice.hudi.table import HudiTable
from tableservice.locks import InProcessLockProvider
from tableservice.planning.clean import CleanPlanner
from tableservice.planning.clean_policy import CleanPolicy
from tableservice.planning.clustering_policy import ClusteringPolicy
from tableservice.service.actions import TableContext
from tableservice.service.clustering import execute_clustering, pending_clustering, schedule_clustering
from tableservice.storage import Storage


def _options(values: list[str]) -> dict[str, str]:
    out = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep:
            raise SystemExit(f"tableservice: expected KEY=VALUE, got {v!r}")
        out[key.strip()] = value.strip()
    return out


def _service_commands(sub: Any, service: str, text: str, commands: Any, option_help: str) -> dict[str, Any]:
    """`tableservice <service> schedule|run URI [-o KEY=VALUE ...]`; returns the sub-parsers by name."""
    parser = sub.add_parser(service, help=text)
    ssub = parser.add_subparsers(dest=f"{service}_command", required=True)
    out = {}
    for name, handler, help_text in commands:
        p = ssub.add_parser(name, help=help_text)
        p.add_argument("uri")
        p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE", help=option_help)
        p.set_defaults(handler=handler)
        out[name] = p
    return out


def register(sub: Any) -> None:
    clean = _service_commands(
        sub,
        "clean",
        "operator commands for cleaning",
        (
            ("schedule", cmd_clean_schedule, "write a clean plan now if anything can go"),
            ("run", cmd_clean_run, "execute pending cleans (dry run unless --execute)"),
        ),
        "Hudi clean keys, e.g. hoodie.cleaner.commits.retained=5",
    )
    mode = clean["run"].add_mutually_exclusive_group()
    mode.add_argument("--dry-run", dest="execute", action="store_false", help="print what would go (default)")
    mode.add_argument("--execute", dest="execute", action="store_true", help="delete the files")
    clean["run"].set_defaults(execute=False)
    cluster = _service_commands(
        sub,
        "cluster",
        "operator commands for clustering",
        (
            ("schedule", cmd_cluster_schedule, "write a clustering plan now"),
            ("run", cmd_cluster_run, "execute pending clustering plans"),
        ),
        "Hudi clustering keys, e.g. hoodie.clustering.plan.strategy.sort.columns=ts",
    )
    cluster["run"].add_argument("--master", default="local[*]")
    cluster["run"].add_argument("--remote", help="Spark Connect URL instead of a master")
    save = sub.add_parser("savepoint", help="create, delete or list savepoints")
    ssub = save.add_subparsers(dest="savepoint_command", required=True)
    create = ssub.add_parser("create", help="savepoint a completed commit")
    create.add_argument("uri")
    create.add_argument("--instant", required=True)
    create.add_argument("--user", default="")
    create.add_argument("--comments", default="")
    create.set_defaults(handler=cmd_savepoint_create)
    delete = ssub.add_parser("delete", help="delete a savepoint")
    delete.add_argument("uri")
    delete.add_argument("--instant", required=True)
    delete.set_defaults(handler=cmd_savepoint_delete)
    lst = ssub.add_parser("list", help="list savepoints")
    lst.add_argument("uri")
    lst.set_defaults(handler=cmd_savepoint_list)


def _table(uri: str) -> tuple[HudiTable, Any]:
    table = HudiTable.open(Storage(), uri)
    lock = InProcessLockProvider().table_lock(table.name, table.base_path)
    return table, lambda: lock.hold(60.0)


def cmd_clean_schedule(args: argparse.Namespace) -> int:
    table, lock = _table(args.uri)
    policy = CleanPolicy.from_mapping(_options(args.option))
    instant = schedule_clean(table, CleanPlanner(policy), lock=lock, force=True)
    if instant is None:
        print("nothing to clean")
        return 0
    resolved = dry_run(table, instant)
    print(f"scheduled clean {instant.requested_time}: {len(resolved.files)} files")
    return 0


def cmd_clean_run(args: argparse.Namespace) -> int:
    table, lock = _table(args.uri)
    pending = pending_cleans(table)
    if not pending:
        print("no pending clean")
        return 0
    for instant in pending:
        resolved = dry_run(table, instant)
        if not args.execute:
            print(f"clean {instant.requested_time} would delete {len(resolved.files)} files:")
            for location in resolved.locations():
                print(f"  {location}")
            continue
        md = execute_clean(table, instant, lock=lock)
        print(f"completed clean {instant.requested_time}: {md.total_files_deleted} files deleted")
    return 0


def cmd_cluster_schedule(args: argparse.Namespace) -> int:
    table, _ = _table(args.uri)
    ctx = TableContext(
        table=table,
        lock=InProcessLockProvider().table_lock(table.name, table.base_path),
        executor=SparkExecutor(SparkSettings()),
    )
    policy = ClusteringPolicy.from_mapping({**_options(args.option), "tableservice.clustering.enabled": "true"})
    instant = schedule_clustering(ctx, policy, force=True)
    if instant is None:
        print("nothing to cluster")
        return 0
    plan = table.clustering_plan(instant)
    print(f"scheduled clustering {instant.requested_time} with {len(plan.input_groups or ())} groups")
    return 0


def cmd_cluster_run(args: argparse.Namespace) -> int:
    executor = SparkExecutor(SparkSettings(master=None if args.remote else args.master, remote=args.remote))
    try:
        table, _ = _table(args.uri)
        ctx = TableContext(
            table=table, lock=InProcessLockProvider().table_lock(table.name, table.base_path), executor=executor
        )
        policy = ClusteringPolicy.from_mapping(_options(args.option))
        pending = pending_clustering(table, table.timeline())
        if not pending:
            print("no pending clustering")
            return 0
        for instant in pending:
            started = time.monotonic()
            try:
                result = execute_clustering(ctx, instant.requested_time, policy)
            except ActionAbandonedError as e:  # the table is consistent; a new plan may be scheduled
                print(e.problem)
                continue
            print(
                f"completed clustering {instant.requested_time}: {len(result.stats)} new files, "
                f"{result.records_written} records, {time.monotonic() - started:.1f}s"
            )
    finally:
        executor.stop()
    return 0


def cmd_savepoint_create(args: argparse.Namespace) -> int:
    table, lock = _table(args.uri)
    info = create_savepoint(table, args.instant, user=args.user, comments=args.comments, lock=lock)
    print(f"savepoint {info.instant_time} created")
    return 0


def cmd_savepoint_delete(args: argparse.Namespace) -> int:
    table, lock = _table(args.uri)
    print(f"savepoint {args.instant} {'deleted' if delete_savepoint(table, args.instant, lock=lock) else 'not found'}")
    return 0


def cmd_savepoint_list(args: argparse.Namespace) -> int:
    table, _ = _table(args.uri)
    for info in list_savepoints(table):
        md = info.metadata
        who = f" user={md.savepointed_by!r} comments={md.comments!r}" if md is not None else ""
        print(f"{info.instant_time} {info.state.name}{who}")
    return 0
