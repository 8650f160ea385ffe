"""What the operator commands (`compact|clean|cluster schedule|run`, `savepoint create|delete`) share: one table
served as the daemon serves it.

With `--config` (the daemon's file, or one with only a `locks` section) a command takes the lock provider the
daemon would take for the table (its `locks` override included), the table lock around the same short sections,
and the executor lease of a run: a plan whose lease another process (a daemon replica) holds is refused. The
table's policy sections (or `defaults`) apply to scheduling, with `-o KEY=VALUE` on top. Without `--config` the
lock is in-process and excludes nobody else, which is said once on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tableservice.config import DaemonConfig, TableEntry, load_config
from tableservice.errors import LeaseHeldError, LockError
from tableservice.executors.spark import SparkExecutor
from tableservice.hudi.action.clean import request_clean
from tableservice.hudi.table.hudi_table import HudiTable, Requested
from tableservice.hudi.timeline.instant import Instant
from tableservice.locks import LockHandle
from tableservice.planning.clean.plan import CleanPlanner
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.clustering.policy import ClusteringPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.actions import TableContext
from tableservice.service.clustering import request_clustering
from tableservice.service.compaction import request_compaction
from tableservice.service.history import ActionHistory
from tableservice.service.protocol import ServiceSettings
from tableservice.service.table_state import PassResult
from tableservice.service.table_worker import TableWorker
from tableservice.service.wiring import LockProviders, executor_settings, storage_options, table_settings
from tableservice.storage import Storage

NO_CONFIG_NOTICE = (
    "tableservice: no --config: using an in-process lock, which excludes no other process (writers, daemons)"
)

# Each service's switch, set so that an operator's schedule command plans whatever the daemon's policy says.
_SWITCHES = {
    "compaction": "tableservice.compaction.enabled",
    "clustering": "tableservice.clustering.enabled",
    "clean": "tableservice.clean.enabled",
}


def add_table_arguments(parser: argparse.ArgumentParser, *, options: str | None = None, spark: bool = False) -> None:
    """The table, `--config`, and optionally `-o KEY=VALUE` (help text `options`) and the Spark flags."""
    parser.add_argument("uri", help="the table's location (or its name in --config)")
    parser.add_argument(
        "--config",
        help="the daemon's YAML file (or one with a `locks` section): take the lock the table's writers and the "
        "daemon take, and the executor lease of a run",
    )
    if options is not None:
        parser.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE", help=options)
    if spark:
        parser.add_argument("--master", help="Spark master (default: the config's spark section, else local[*])")
        parser.add_argument("--remote", help="Spark Connect URL (sc://host:port) instead of a master")


def parse_options(values: list[str]) -> dict[str, str]:
    out = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep:
            raise SystemExit(f"tableservice: expected KEY=VALUE, got {v!r}")
        out[key.strip()] = value.strip()
    return out


@dataclass
class OperatorTable:
    """One table as an operator command serves it: through the worker the daemon would run for it."""

    worker: TableWorker

    @property
    def table(self) -> HudiTable:
        return self.context.table

    @property
    def context(self) -> TableContext:
        return self.worker.context()

    def schedule(self, service: str) -> Instant | None:
        """Plan one action of `service` now, as the daemon's pass does once its policy says one is due."""
        return self.worker.service(service).schedule(self.context)

    def preview(self, service: str, instant_time: str | None = None) -> Requested[Any] | None:
        """The plan `schedule(service)` would write now, made on the current timeline; nothing is written."""
        settings, ctx = self.worker.settings, self.context
        if service == "compaction":
            return request_compaction(ctx, settings.compaction.policy, instant_time=instant_time, dry_run=True)
        if service == "clustering":
            return request_clustering(ctx, settings.clustering.policy, instant_time=instant_time, dry_run=True)
        if service == "clean":
            planner = CleanPlanner(settings.clean.policy)
            return request_clean(ctx.table, planner, instant_time=instant_time, dry_run=True)
        raise ValueError(f"no dry run for {service}")

    @contextmanager
    def lease(self, service: str, instant_time: str) -> Iterator[LockHandle]:
        """Hold the executor lease of `service`'s instant (as a daemon executing it would); LeaseHeldError at once
        when another process holds it."""
        table = self.table
        lease = self.worker.locks.lease(table.name, table.base_path, f"{service}-{instant_time}")
        try:
            handle = lease.acquire(0.0)
        except LockError as e:
            raise LeaseHeldError(
                f"{service} {instant_time}: another process holds its executor lease {lease.key!r} (it is running)",
                table=self.worker.label,
            ) from e
        try:
            yield handle
        finally:
            lease.release(handle)

    def run(self, action: str, instant_time: str) -> PassResult:
        """Run one pending plan under its executor lease and the table lock, as the daemon does. Raises
        LeaseHeldError when another process runs it, or the action's own error when it failed."""
        result = self.worker.run_one(action, instant_time)
        if result.failed:
            raise result.failed[0].error
        return result


def _entry(config: DaemonConfig, uri: str, given: str) -> TableEntry:
    """The configured entry for `uri` (its absolute location) or for `given` (what was typed: a configured name),
    else the table at `uri` with `defaults`."""
    listed = config.table(uri) or next((t for t in config.tables if t.name == given), None)
    return listed if listed is not None else TableEntry.model_validate({"uri": uri})


def _services(config: DaemonConfig, entry: TableEntry, service: str | None, options: dict[str, str]) -> dict[str, Any]:
    """The table's policies, each service switched on (the operator asked for it), `options` on top for `service`."""
    policies = config.effective_policy(entry)
    out: dict[str, Any] = {}
    for name, cls in (("compaction", CompactionPolicy), ("clustering", ClusteringPolicy), ("clean", CleanPolicy)):
        values = {**policies.section(name).hudi_options(), **(options if name == service else {})}
        out[name] = ServiceSettings(cls.from_mapping({**values, _SWITCHES[name]: True}))
    return out


@contextmanager
def operator_table(args: argparse.Namespace, service: str | None = None) -> Iterator[OperatorTable]:
    """The table named by `args.uri`, its lock provider (from `args.config`, else in-process with the notice) and
    an executor (started only when a job runs); closes both afterwards."""
    path: str | None = getattr(args, "config", None)
    if path is None:
        print(NO_CONFIG_NOTICE, file=sys.stderr)
    config = load_config(path) if path is not None else DaemonConfig()
    entry = _entry(config, args.uri, getattr(args, "uri_given", args.uri))
    options = parse_options(getattr(args, "option", []))
    settings = dataclasses.replace(table_settings(config, entry), **_services(config, entry, service, options))
    spark = executor_settings(config)
    master, remote = getattr(args, "master", None), getattr(args, "remote", None)
    if master is not None or remote is not None:
        spark = dataclasses.replace(spark, master=None if remote else master, remote=remote)
    executor = SparkExecutor(spark)
    locks = LockProviders()
    # With the daemon's configuration, the actions an operator runs go to its action history too.
    history = ActionHistory.from_settings(config.service.history) if path is not None else None
    try:
        provider = locks.for_table(config, entry)
        opts = storage_options(config)
        worker = TableWorker(settings, Storage(opts), provider, executor, storage_options=opts, history=history)
        yield OperatorTable(worker)
    finally:
        executor.stop()
        locks.close()
        if history is not None:
            history.close()
