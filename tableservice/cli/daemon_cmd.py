"""`tableservice run|once|status` and `tableservice compact schedule|run`."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio

from tableservice.cli import status_cmd
from tableservice.cli.logsetup import configure_logging
from tableservice.cli.messages import describe
from tableservice.cli.operator import add_table_arguments, operator_table
from tableservice.cli.plan_output import add_dry_run_arguments, print_dry_run
from tableservice.cli.why import nothing_to_compact
from tableservice.config import DaemonConfig, load_config, resolve_named_tables
from tableservice.errors import InvalidPlanError, TableServiceError
from tableservice.executors.spark import SparkExecutor
from tableservice.service.compaction import schedule_compaction
from tableservice.service.daemon import Daemon
from tableservice.service.history import ActionHistory
from tableservice.service.table_state import TableHealth
from tableservice.service.table_worker import TableWorker
from tableservice.service.wiring import LockProviders, executor_settings, storage_options, table_settings
from tableservice.storage import Storage

log = logging.getLogger(__name__)


def register(sub: Any) -> None:
    run = sub.add_parser("run", help="run the daemon")
    run.add_argument("--config", required=True, help="YAML configuration file")
    run.set_defaults(handler=cmd_run)
    once = sub.add_parser("once", help="one pass over every table: execute what is pending, schedule what is due")
    once.add_argument("--config", required=True)
    once.set_defaults(handler=cmd_once)
    status = sub.add_parser(
        "status",
        help="the running daemon's view of every table (health, running, quarantined, pending); --offline reads "
        "the tables; exit 1 when a table is not healthy",
    )
    status_cmd.add_arguments(status)
    status.set_defaults(handler=cmd_status)
    compact = sub.add_parser("compact", help="operator commands for compaction")
    csub = compact.add_subparsers(dest="compact_command", required=True)
    sched = csub.add_parser("schedule", help="write a compaction plan now (if any slice has log files)")
    add_table_arguments(sched, options="Hudi compaction keys, e.g. hoodie.compaction.target.io=500000")
    sched.add_argument("--instant", help="instant time to use (must be above every instant on the timeline)")
    add_dry_run_arguments(sched)
    sched.set_defaults(handler=cmd_compact_schedule)
    crun = csub.add_parser("run", help="execute pending compactions (all, or one instant)")
    add_table_arguments(crun, spark=True)
    crun.add_argument("--instant")
    crun.set_defaults(handler=cmd_compact_run)


def cmd_run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    configure_logging(config.service.log.level, config.service.log.format)
    daemon = Daemon(args.config, config, on_log_settings=lambda log: configure_logging(log.level, log.format))
    return anyio.run(daemon.run)


@contextmanager
def _workers(config: DaemonConfig, executor: SparkExecutor) -> Iterator[list[TableWorker]]:
    """A worker per configured table; their lock providers (ZooKeeper sessions, DynamoDB heartbeats) and the
    executor are released on every exit path."""
    storage = Storage(storage_options(config))
    locks = LockProviders()
    history = ActionHistory.from_settings(config.service.history)  # what `once` runs is in the history too
    try:
        yield [
            TableWorker(
                table_settings(config, e),
                storage,
                locks.for_table(config, e),
                executor,
                storage_options=storage_options(config),
                history=history,
            )
            for e in resolve_named_tables(config.resolve_tables(storage), storage)
        ]
    finally:
        locks.close()
        executor.stop()
        if history is not None:
            history.close()


class _PassReport:
    """What `once` did, one line per table and action: printed (stdout, failures on stderr) with the text log format;
    with `log.format: json`, log events of `tableservice.once` (table, instant and action as fields), so that
    every line the command writes is a JSON object."""

    def __init__(self, fmt: str) -> None:
        self.json = fmt == "json"
        self.log = logging.getLogger("tableservice.once")

    def __call__(
        self, table: str, text: str, *, instant: str | None = None, action: str | None = None, failed: bool = False
    ) -> None:
        if not self.json:
            print(f"{table}: {text}", file=sys.stderr if failed else sys.stdout)
            return
        context = {"table": table, "instant": instant, "action": action}
        self.log.log(logging.ERROR if failed else logging.INFO, "%s", text, extra=context)


def cmd_once(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    configure_logging(config.service.log.level, config.service.log.format)
    report = _PassReport(config.service.log.format)
    failures = 0
    with _workers(config, SparkExecutor(executor_settings(config))) as workers:
        for worker in workers:
            name = worker.label
            try:
                result = worker.run_pass()
            except TableServiceError as e:
                report(name, f"error: {describe(e)}", failed=True)
                failures += 1
                continue
            except Exception as e:  # a bug must not keep the tables after this one from being served
                log.exception("unexpected error", extra={"table": name})
                report(name, f"unexpected {type(e).__name__}: {e}", failed=True)
                failures += 1
                continue
            for instant in result.scheduled:
                report(name, f"scheduled {instant}", instant=instant)
            for instant in result.cleaned:
                report(name, f"completed clean {instant}", instant=instant, action="clean")
            if result.archived:
                report(name, f"archived {len(result.archived)} instants", action="archival")
            for clustered in result.clustered:
                t = clustered.instant.requested_time
                report(
                    name,
                    f"completed clustering {t} ({len(clustered.stats)} new files, {clustered.seconds:.1f}s)",
                    instant=t,
                    action="clustering",
                )
            for done in result.completed:
                t = done.instant.requested_time
                report(
                    name,
                    f"completed compaction {t} ({len(done.stats)} file groups, {done.seconds:.1f}s)",
                    instant=t,
                    action="compaction",
                )
            for f in result.failed:
                what = f"{f.action} {f.instant}" if f.instant else f.action
                report(
                    name,
                    f"{what} failed: {describe(f.error)}",
                    instant=f.instant or None,
                    action=f.action,
                    failed=True,
                )
                failures += 1
    return 1 if failures else 0


def cmd_status(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if not args.offline:
        document = status_cmd.fetch_status(config, status_cmd.daemon_url(config, args.url))
        return status_cmd.render(
            status_cmd.with_archived_compactions(Storage(storage_options(config)), document), as_json=args.json
        )
    rows = []
    with _workers(config, SparkExecutor(executor_settings(config))) as workers:
        for worker in workers:
            try:
                worker.poll()
                if worker.status.health is TableHealth.UNKNOWN:
                    worker.status.set_health(TableHealth.OK)
            except TableServiceError as e:
                worker.status.set_health(TableHealth.ERROR, str(e))
            rows.append(worker.status.to_json())
    return status_cmd.render(
        status_cmd.with_archived_compactions(Storage(storage_options(config)), {"tables": rows}), as_json=args.json
    )


def cmd_compact_schedule(args: argparse.Namespace) -> int:
    with operator_table(args, "compaction") as op:
        if args.dry_run:
            nothing = nothing_to_compact(op.table)
            print_dry_run(
                op.preview("compaction", args.instant),
                "compaction",
                op.worker.label,
                as_json=args.json,
                nothing=nothing,
            )
            return 0
        policy = op.worker.settings.compaction.policy
        instant = schedule_compaction(op.context, policy, force=True, instant_time=args.instant)
        if instant is None:
            print(nothing_to_compact(op.table))
            return 0
        plan = op.table.compaction_plan(instant)
        print(f"scheduled compaction {instant.requested_time} with {len(plan.operations or ())} operations")
    return 0


def cmd_compact_run(args: argparse.Namespace) -> int:
    with operator_table(args, "compaction") as op:
        pending = [i.requested_time for i in op.table.reload().pending_compactions()]
        targets = [args.instant] if args.instant else pending
        if not targets:
            print("no pending compaction")
            return 0
        for t in targets:
            if t not in pending:
                raise InvalidPlanError(f"no pending compaction at {t}", table=op.worker.label)
            started = time.monotonic()
            result = op.run("compaction", t)
            if not result.completed:
                print(f"compaction {t} was not run: it is no longer pending")
                continue
            done = result.completed[0]
            print(
                f"completed compaction {t}: {len(done.stats)} file groups, {done.records_written} records, "
                f"{time.monotonic() - started:.1f}s"
            )
    return 0
