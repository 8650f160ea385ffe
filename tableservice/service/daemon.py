"""The daemon: one anyio task per table in a task group, a global cap on concurrent actions, retries with
back-off, quarantine, configuration reload without restart, and graceful shutdown.

Shutdown (SIGTERM/SIGINT): no new action starts; running actions get `shutdown_grace_seconds` to finish; then
their Spark jobs are interrupted by tag. An interrupted compaction stays inflight and the next start rolls it
back and runs it again under the same instant.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from enum import StrEnum
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskGroup

from tableservice import __version__
from tableservice.config import (
    DaemonConfig,
    LogSettings,
    NameClash,
    TableEntry,
    load_config,
)
from tableservice.errors import ConfigError, TableServiceError
from tableservice.executors.spark import SparkExecutor
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.metrics import Metrics, new_metrics
from tableservice.service.history import ActionHistory, answer_query, history_path
from tableservice.service.http import (
    OPEN_PATHS,
    ConnectionStats,
    HealthState,
    HttpLimits,
    serve_http,
    service_routes,
)
from tableservice.service.ledger import answer_report
from tableservice.service.poll_batches import PollBatches
from tableservice.service.priority import PriorityPolicy
from tableservice.service.quotas import GroupCapacity
from tableservice.service.table_loop import TableLoop, TableTask
from tableservice.service.table_state import RunningActions
from tableservice.service.table_worker import TableWorker
from tableservice.service.tsm import TableServiceManager
from tableservice.service.tsm_store import Registrations
from tableservice.service.wiring import (
    LockProviders,
    apply_log_settings,
    executor_settings,
    named_entries,
    status_token,
    storage_options,
    table_settings,
    tsm_token,
)
from tableservice.storage import Storage

log = logging.getLogger(__name__)
CONFIG_WATCH_SECONDS = 2.0


class RunState(StrEnum):
    """The daemon's life: STARTING until the tables are served (Spark starts beside them), RUNNING, STOPPING once a stop
    was asked for (running actions drain), STOPPED."""

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class Daemon(TableLoop):
    def __init__(
        self,
        config_path: str,
        config: DaemonConfig,
        *,
        metrics: Metrics | None = None,
        executor: SparkExecutor | None = None,
        on_log_settings: Callable[[LogSettings], None] | None = None,
    ) -> None:
        """`on_log_settings`: applies a reloaded `service.log` (level, format) to the process's logging."""
        self.config_path = config_path
        self._on_log_settings = on_log_settings
        self.config = config
        self.storage = Storage(storage_options(config))
        self.metrics = metrics if metrics is not None else new_metrics()
        self.health = HealthState(stale_after_seconds=max(60.0, 3 * config.service.poll_interval_seconds))
        self.executor = executor if executor is not None else SparkExecutor(executor_settings(config))
        self._owns_executor = executor is None
        self.locks = LockProviders()
        self.running = RunningActions()
        self.history = ActionHistory.from_settings(config.service.history, self.metrics)
        service = config.service
        self.priority = PriorityPolicy(
            metrics=self.metrics,
            backoff=service.backoff,
            groups=service.groups,
            wait_budget=service.wait_budget_seconds,
        )
        self.capacity = GroupCapacity(service.max_concurrent_actions, self.priority.group_limits())
        self.polls = PollBatches(_poll_window(service.poll_interval_seconds))  # idle tables wait and poll together
        self.tables: dict[str, TableTask] = {}
        self.state = RunState.STARTING
        self._stop_event = anyio.Event()
        self._reload_requested = False
        self._spark_up = False
        self._config_mtime = _mtime(config_path)
        self.http_port: int | None = None
        self.http_stats = ConnectionStats()
        self.tsm: TableServiceManager | None = None  # the table-service-manager endpoint, when enabled
        self._tg: TaskGroup | None = None
        self._sync_lock = anyio.Lock()

    @property
    def stopping(self) -> bool:
        """No new action starts once a stop was asked for."""
        return self.state in (RunState.STOPPING, RunState.STOPPED)

    # --- status ------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "version": __version__,
            "state": str(self.state),
            "stopping": self.stopping,
            "spark_up": self._spark_up,
            "running_actions": len(self.running),
            "tables": [t.worker.status.to_json() for t in self.tables.values()],
            **({"requested": self.tsm.queued()} if self.tsm is not None else {}),
        }

    def history_answer(self, query: str) -> tuple[int, object]:
        """/history: the actions the daemon ran (blocking: reads the history file)."""
        history = self.history
        if history is None:
            return 404, {"error": "the action history is off (service.history.enabled is false)"}
        return answer_query(history, query)

    def report_answer(self, query: str) -> tuple[int, object]:
        """/report: the cost ledger over the history (blocking: reads the history file)."""
        history = self.history
        if history is None:
            return 404, {"error": "the action history is off (service.history.enabled is false): no ledger"}
        return answer_report(history, query, self.config.service.cost)

    # --- main loop ---------------------------------------------------------------------------------

    async def run(self) -> int:
        http = self.config.service.http
        token = status_token(http)
        self.tsm = self._table_service_manager()
        # Every table's one name, before anything starts: two tables with one name are a configuration error.
        named: list[TableEntry] | None = None
        try:
            named, clashes = await anyio.to_thread.run_sync(self._named_entries, self.config)
        except TableServiceError as e:  # storage unreachable: served from the first rescan that finds them
            log.error("finding the tables failed at start: %s", e)
            clashes = []
        if clashes:
            raise ConfigError("; ".join(str(c) for c in clashes))
        self.metrics.set_up(True)
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                routes = service_routes(
                    metrics=self.metrics,
                    health=self.health,
                    status=self.status,
                    history=self.history_answer,
                    report=self.report_answer,
                )
                open_paths = OPEN_PATHS
                if self.tsm is not None:  # it checks its own token (Hudi's client cannot send a header)
                    routes.update(self.tsm.routes())
                    open_paths = OPEN_PATHS | self.tsm.paths
                serve = partial(
                    serve_http,
                    limits=HttpLimits(max_connections=http.max_connections),
                    bearer_token=token,
                    open_paths=open_paths,
                    stats=self.http_stats,
                )
                self.http_port = await tg.start(serve, http.host, http.port, routes)
                log.info(
                    "serving /metrics, /healthz, /readyz, /status, /history and /report%s on %s:%s",
                    " (with the bearer token)" if token else "",
                    http.host,
                    self.http_port,
                )
                tg.start_soon(self._signals, tg)
                tg.start_soon(self._heartbeat)
                tg.start_soon(self._start_spark)  # in the background: readiness and the polls do not wait for it
                self.health.set_ready(True)
                tg.start_soon(self._watch_config, tg)
                tg.start_soon(self.polls.run)
                await self._sync_tables(tg, named)
                if self.state is RunState.STARTING:
                    self.state = RunState.RUNNING
                await self._stop_event.wait()
                await self._drain()
                tg.cancel_scope.cancel()
        finally:
            # Every exit path (a stop, a port already in use, a bug) releases the locks' sessions and Spark.
            self.state = RunState.STOPPED
            self.health.set_ready(False, "stopped")
            self.metrics.set_up(False)
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.locks.close)
                if self.history is not None:
                    await anyio.to_thread.run_sync(self.history.close)
                if self.tsm is not None:
                    await anyio.to_thread.run_sync(self.tsm.store.close)
                if self._owns_executor:
                    await anyio.to_thread.run_sync(self.executor.stop)
                    self.metrics.set_spark_up(False)
            log.info("stopped")
        return 0

    def request_stop(self) -> None:
        if not self.stopping:
            log.info("stopping: no new actions; running ones get %.0fs", self.config.service.shutdown_grace_seconds)
            self.state = RunState.STOPPING
        self.health.set_ready(False, "shutting down")
        self._stop_event.set()
        for task in self.tables.values():
            task.wake.set()

    async def _start_spark(self) -> None:
        """Start the Spark session (and warm its Python workers) beside the tables' polls; actions that need it wait
        for it (`SparkExecutor.start`). A failed start is retried with the retry back-off until it succeeds or the
        daemon stops; meanwhile only the actions that need Spark are held back."""
        retry = self.config.service.retry
        delay = float(retry.initial_backoff_seconds)
        log.info("starting the spark session (%s) in the background", self.executor.where)
        while not self.stopping:
            try:
                await anyio.to_thread.run_sync(self.executor.start_again)
                await anyio.to_thread.run_sync(self.executor.warm_up)
            except Exception as e:  # Spark failing to start holds back Spark actions, not the daemon
                log.error("spark did not start, trying again in %.0fs: %s", delay, e)
                with anyio.move_on_after(delay):
                    await self._stop_event.wait()
                delay = min(float(retry.max_backoff_seconds), delay * 2)
                continue
            self._spark_up = True
            self.metrics.set_spark_up(True)
            return

    async def _heartbeat(self) -> None:
        while True:
            self.health.beat()
            await anyio.sleep(1.0)

    async def _signals(self, tg: TaskGroup) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    log.info("SIGHUP: reloading the configuration")
                    await self._reload(tg)
                else:
                    self.request_stop()

    async def _drain(self) -> None:
        grace = self.config.service.shutdown_grace_seconds
        deadline = time.monotonic() + grace
        while len(self.running) and time.monotonic() < deadline:
            await anyio.sleep(0.2)
        tags = self.running.tags()
        if tags:
            log.warning("grace period over: interrupting %d running actions", len(tags))
            for tag in tags:
                await anyio.to_thread.run_sync(self.executor.cancel, tag)
            with anyio.move_on_after(60):
                while len(self.running):
                    await anyio.sleep(0.2)

    # --- tables ------------------------------------------------------------------------------------

    def _named_entries(
        self, config: DaemonConfig, taken: dict[str, str] | None = None
    ) -> tuple[list[TableEntry], list[NameClash]]:
        registered = self.tsm.registered_entries() if self.tsm is not None else []
        return named_entries(config, self.storage, registered, taken)

    # --- the table-service-manager endpoint ----------------------------------------------------------------

    def _table_service_manager(self) -> TableServiceManager | None:
        settings = self.config.service.table_service_manager
        token = tsm_token(settings) if settings.enabled else None
        if token is None:
            return None
        return TableServiceManager(
            token,
            Registrations(history_path(self.config.service.history)),
            served=lambda uri: uri if uri in self.tables else None,
            wake=self._wake_table,
            refresh=self._rescan,
            check_table=self._check_table,
            register_on_request=settings.register_on_request,
        )

    def _check_table(self, uri: str) -> None:
        """Raises unless a Hudi table is at `uri` (its hoodie.properties reads)."""
        HudiTable.open(self.storage, uri)

    def _wake_table(self, uri: str) -> None:
        task = self.tables.get(uri)
        if task is not None:
            task.wake.set()

    async def _rescan(self) -> None:
        if self._tg is not None:
            await self._sync_tables(self._tg)

    async def _sync_tables(self, tg: TaskGroup, named: list[TableEntry] | None = None) -> None:
        """Serve `named` (a start or a reload: names already checked), or rescan the configured tables and
        discovery roots, where a table found later never takes a name a served table has. One at a time (a
        rescan, a reload and a registration may overlap)."""
        async with self._sync_lock:
            await self._sync_tables_now(tg, named)

    async def _sync_tables_now(self, tg: TaskGroup, named: list[TableEntry] | None) -> None:
        rescan = named is None  # under the configuration the served tables were set up with
        if named is None:
            served = {task.worker.label: uri for uri, task in self.tables.items()}
            try:
                found, clashes = await anyio.to_thread.run_sync(self._named_entries, self.config, served)
            except TableServiceError as e:  # a storage hiccup while discovering must not end the daemon
                log.error("finding the tables failed, serving the ones found before: %s", e)
                return
            for clash in clashes:
                log.error("not serving %s: %s", clash.uri, clash)
            named = found
        wanted = {e.uri: e for e in named}
        for uri in list(self.tables):
            if uri not in wanted:
                task = self.tables.pop(uri)
                task.scope.cancel()
                self.metrics.forget_table(task.worker.label)
                self.priority.forget(task.worker.label)
                log.info("no longer serving %s", uri)
        for uri, entry in wanted.items():
            if rescan and uri in self.tables:
                continue  # served already, with these settings and locks
            settings = table_settings(self.config, entry)
            try:
                locks = await anyio.to_thread.run_sync(self.locks.for_table, self.config, entry)
            except TableServiceError as e:  # e.g. the lock service is unreachable
                log.error("not serving %s until the next reload or discovery rescan: %s", uri, e)
                continue
            if uri in self.tables:
                worker = self.tables[uri].worker
                old_label = worker.label
                worker.settings = settings
                worker.locks = locks
                worker.history = self.history
                if worker.label != old_label:  # renamed in the configuration
                    self.metrics.forget_table(old_label)
                continue
            worker = TableWorker(
                settings,
                self.storage,
                locks,
                self.executor,
                self.metrics,
                storage_options(self.config),
                self.running,
                self.history,
            )
            task = TableTask(worker)
            self.tables[uri] = task
            tg.start_soon(self._serve_table, task)
            log.info("serving %s", uri)

    async def _reload(self, tg: TaskGroup) -> None:
        try:
            new = await anyio.to_thread.run_sync(load_config, self.config_path)
            named, clashes = await anyio.to_thread.run_sync(self._named_entries, new)
            if clashes:
                raise ConfigError("; ".join(str(c) for c in clashes))
        except ConfigError as e:
            log.error("configuration reload failed, keeping the running configuration: %s", e)
            self.metrics.config_reloaded(False)
            return
        except TableServiceError as e:
            log.error("configuration reload failed (finding its tables), keeping the running configuration: %s", e)
            self.metrics.config_reloaded(False)
            return
        self.metrics.config_reloaded(True)
        old_service = self.config.service
        self.config = new
        apply_log_settings(old_service.log, new.service.log, self._on_log_settings)
        if new.service.history != old_service.history:  # the workers take the new one in _sync_tables
            old_history, self.history = self.history, ActionHistory.from_settings(new.service.history, self.metrics)
            if old_history is not None:
                await anyio.to_thread.run_sync(old_history.close)
        self.priority.configure(
            backoff=new.service.backoff,
            groups=new.service.groups,
            wait_budget=new.service.wait_budget_seconds,
        )
        self.capacity.configure(new.service.max_concurrent_actions, self.priority.group_limits())
        self.polls.window_seconds = _poll_window(new.service.poll_interval_seconds)
        await self._sync_tables(tg, named)
        log.info("configuration reloaded: %d tables", len(self.tables))

    async def _watch_config(self, tg: TaskGroup) -> None:
        rescan_every = max(1, int(10 * self.config.service.poll_interval_seconds / CONFIG_WATCH_SECONDS))
        ticks = 0
        while not self.stopping:
            await anyio.sleep(CONFIG_WATCH_SECONDS)
            ticks += 1
            mtime = _mtime(self.config_path)
            if mtime is not None and mtime != self._config_mtime:
                self._config_mtime = mtime
                log.info("configuration file changed: reloading")
                await self._reload(tg)
            elif self.config.discovery and ticks % rescan_every == 0:
                await self._sync_tables(tg)


def _poll_window(poll_interval: float) -> float:
    """How early an idle table may be polled to share a hop: 2% of the poll interval, at most 0.2 s (the jitter
    between tables' polls is 10% by default)."""
    return min(0.2, 0.02 * poll_interval)


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


async def run_daemon(config_path: str) -> int:
    config = load_config(config_path)
    return await Daemon(config_path, config).run()
