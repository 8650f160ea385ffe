"""Operator commands for clean, clustering and savepoints (create, delete, list, restore) on one table (local Spark
unless told otherwise)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tableservice.cli.operator import add_table_arguments, operator_table
from tableservice.cli.plan_output import add_dry_run_arguments, print_dry_run
from tableservice.cli.why import nothing_to_clean, nothing_to_cluster
from tableservice.errors import LockError, RestoreError
from tableservice.hudi.action.clean import dry_run, pending_cleans
from tableservice.hudi.action.restore import plan_restore, restore
from tableservice.hudi.action.savepoint import create_savepoint, delete_savepoint, list_savepoints
from tableservice.hudi.models import decode_clean_metadata
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.locks import LockHandle
from tableservice.service.clustering import pending_clustering
from tableservice.storage import Storage


def _service_commands(sub: Any, service: str, text: str, commands: Any, option_help: str) -> dict[str, Any]:
    """`tableservice <service> schedule|run URI [--config FILE] [-o KEY=VALUE ...]`; returns the sub-parsers."""
    parser = sub.add_parser(service, help=text)
    ssub = parser.add_subparsers(dest=f"{service}_command", required=True)
    out = {}
    for name, handler, help_text in commands:
        p = ssub.add_parser(name, help=help_text)
        add_table_arguments(p, options=option_help, spark=(service, name) == ("cluster", "run"))
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
    add_dry_run_arguments(clean["schedule"])
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
    add_dry_run_arguments(cluster["schedule"])
    save = sub.add_parser("savepoint", help="create, delete or list savepoints")
    ssub = save.add_subparsers(dest="savepoint_command", required=True)
    create = ssub.add_parser("create", help="savepoint a completed commit")
    add_table_arguments(create)
    create.add_argument("--instant", required=True)
    create.add_argument("--user", default="")
    create.add_argument("--comments", default="")
    create.set_defaults(handler=cmd_savepoint_create)
    delete = ssub.add_parser("delete", help="delete a savepoint")
    add_table_arguments(delete)
    delete.add_argument("--instant", required=True)
    delete.set_defaults(handler=cmd_savepoint_delete)
    lst = ssub.add_parser("list", help="list savepoints")
    lst.add_argument("uri")
    lst.set_defaults(handler=cmd_savepoint_list)
    rest = ssub.add_parser(
        "restore", help="restore the table to a savepoint: roll back every write after it (writers must be stopped)"
    )
    add_table_arguments(rest)
    rest.add_argument("--instant", required=True, help="the savepoint's instant time")
    rest.add_argument("--yes", action="store_true", help="restore; without it, print what would be rolled back")
    rest.add_argument(
        "--lock-timeout", type=float, default=10.0, help="seconds to wait for the table lock before giving up"
    )
    rest.set_defaults(handler=cmd_savepoint_restore)


def cmd_clean_schedule(args: argparse.Namespace) -> int:
    with operator_table(args, "clean") as op:
        if args.dry_run:
            nothing = nothing_to_clean(op.table, op.worker.settings.clean.policy)
            print_dry_run(op.preview("clean"), "clean", op.worker.label, as_json=args.json, nothing=nothing)
            return 0
        instant = op.schedule("clean")
        if instant is None:
            print(nothing_to_clean(op.table, op.worker.settings.clean.policy))
            return 0
        resolved = dry_run(op.table, instant)
        print(f"scheduled clean {instant.requested_time}: {len(resolved.files)} files")
    return 0


def cmd_clean_run(args: argparse.Namespace) -> int:
    with operator_table(args, "clean") as op:
        pending = pending_cleans(op.table)
        if not pending:
            print("no pending clean")
            return 0
        for instant in pending:
            t = instant.requested_time
            if not args.execute:  # a dry run only reads: no lock, no lease
                resolved = dry_run(op.table, instant)
                print(f"clean {t} would delete {len(resolved.files)} files:")
                for location in resolved.locations():
                    print(f"  {location}")
                continue
            if not op.run("clean", t).cleaned:
                print(f"clean {t} was not run: it is no longer pending")
                continue
            completed = op.table.reload().get(t, Action.CLEAN)
            assert completed is not None
            path = op.table.active.path_of(completed)
            md = decode_clean_metadata(op.table.storage.read_bytes(path), path=path)
            print(f"completed clean {t}: {md.total_files_deleted} files deleted")
    return 0


def cmd_cluster_schedule(args: argparse.Namespace) -> int:
    with operator_table(args, "clustering") as op:
        if args.dry_run:
            done = op.preview("clustering")
            nothing = nothing_to_cluster(op.table, op.worker.settings.clustering.policy)
            print_dry_run(done, "clustering", op.worker.label, as_json=args.json, nothing=nothing)
            return 0
        instant = op.schedule("clustering")
        if instant is None:
            print(nothing_to_cluster(op.table, op.worker.settings.clustering.policy))
            return 0
        plan = op.table.clustering_plan(instant)
        print(f"scheduled clustering {instant.requested_time} with {len(plan.input_groups or ())} groups")
    return 0


def cmd_cluster_run(args: argparse.Namespace) -> int:
    with operator_table(args, "clustering") as op:
        pending = pending_clustering(op.table, op.table.reload())
        if not pending:
            print("no pending clustering")
            return 0
        for instant in pending:
            t = instant.requested_time
            result = op.run("clustering", t)
            if not result.clustered:
                gone = op.table.reload().get(t) is None
                print(f"clustering {t} {'abandoned: its plan was removed' if gone else 'was not run'}")
                continue
            done = result.clustered[0]
            print(
                f"completed clustering {t}: {len(done.stats)} new files, "
                f"{done.records_written} records, {done.seconds:.1f}s"
            )
    return 0


def cmd_savepoint_create(args: argparse.Namespace) -> int:
    with operator_table(args) as op:
        lock = op.context.lock_factory()
        info = create_savepoint(op.table, args.instant, user=args.user, comments=args.comments, lock=lock)
    print(f"savepoint {info.instant_time} created")
    return 0


def cmd_savepoint_delete(args: argparse.Namespace) -> int:
    with operator_table(args) as op:
        deleted = delete_savepoint(op.table, args.instant, lock=op.context.lock_factory())
    print(f"savepoint {args.instant} {'deleted' if deleted else 'not found'}")
    return 0


def cmd_savepoint_list(args: argparse.Namespace) -> int:
    for info in list_savepoints(HudiTable.open(Storage(), args.uri)):
        md = info.metadata
        who = f" user={md.savepointed_by!r} comments={md.comments!r}" if md is not None else ""
        print(f"{info.instant_time} {info.state.name}{who}")
    return 0


def cmd_savepoint_restore(args: argparse.Namespace) -> int:
    """Exit 0 when restored, 1 for a preview (no `--yes`) or a lock held by another writer, 2 when refused."""
    with operator_table(args) as op:
        table, label = op.table, op.worker.label
        try:
            timeline = table.reload()
            plan = plan_restore(table, args.instant, timeline)
            if not args.yes:
                _print_preview(table, args.instant, plan.instants_to_rollback)
                return 1

            @contextmanager
            def locked() -> Iterator[LockHandle]:  # a short wait: another writer at work means "not now"
                with op.context.lock.hold(args.lock_timeout) as handle:
                    yield handle

            result = restore(table, args.instant, lock=locked)
        except RestoreError as e:
            print(f"tableservice: restore refused: {e}", file=sys.stderr)
            return 2
        except LockError as e:
            print(
                f"tableservice: table {label} is locked by another writer (not acquired within "
                f"{args.lock_timeout:g}s): stop its writers and the daemon, then run the restore again ({e})",
                file=sys.stderr,
            )
            return 1
    md = result.metadata
    print(
        f"restored {label} to savepoint {args.instant}: restore {result.instant.requested_time} rolled back "
        f"{len(md.instants_to_rollback)} instants"
    )
    if result.metadata_partitions:
        print(f"metadata table rebuilt: {','.join(result.metadata_partitions)}")
    return 0


def _print_preview(table: HudiTable, savepoint: str, instants: Any) -> None:
    timeline = table.timeline()
    print(f"restore of {table.label} to savepoint {savepoint} would roll back {len(instants)} instants, newest first:")
    for info in instants:
        current = timeline.get(info.commit_time)
        state = current.state.name if current is not None else "gone"
        print(f"  {info.commit_time} {info.action} {state}")
    partitions = table.config.metadata_partitions
    if partitions:
        print(f"the metadata table ({','.join(partitions)}) would be rebuilt")
    print("nothing was written; run again with --yes to restore")
