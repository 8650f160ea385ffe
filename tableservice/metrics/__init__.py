"""Prometheus metrics of the tableservice daemon.

`Metrics` owns every metric the daemon exports, registered on a `CollectorRegistry` the caller injects
(never prometheus_client's global default registry, so tests and several daemons in one process do not
share state). The service calls its typed methods; nothing outside this package imports prometheus_client.

Labels: `table` (the table's configured name), `action` (Hudi's action name: compaction, logcompaction,
clustering, clean, rollback, indexing...), `lock` (the lock provider's name), `kind` (an error's class
name).

Values are seconds and bytes (Prometheus base units); counts and durations must not be negative (a
`ValueError` says which metric got which value). Measure durations with a monotonic clock.
"""

from __future__ import annotations

import copy
import platform
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.process_collector import ProcessCollector

from tableservice import __version__
from tableservice.metrics.ledger import LedgerMetrics
from tableservice.metrics.slo import SloMetrics

__all__ = [
    "ACTION_DURATION_BUCKETS",
    "LOCK_BUCKETS",
    "NAMESPACE",
    "POLL_BUCKETS",
    "Metrics",
]

NAMESPACE = "tableservice"

_M = TypeVar("_M", bound=MetricWrapperBase)

# Every table has its own series of these histograms (of the action ones, one per action it runs): with 1,000 tables,
# each bucket is 1,000 series or more that Prometheus stores and every scrape renders (`bench.fleet`: 84 samples per
# idle table with 18 lock and 14 poll buckets). So the buckets are few, placed where the daemon and its alerts draw
# lines.
# Table services run from seconds (a clean) to hours (a large compaction or clustering).
ACTION_DURATION_BUCKETS: tuple[float, ...] = (1.0, 5.0, 30.0, 120.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0)
# Lock waits and holds: milliseconds when uncontended, up to an hour behind a long writer (past 30 minutes, +Inf);
# 30 s is the long-wait alert's threshold.
LOCK_BUCKETS: tuple[float, ...] = (0.01, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0, 1800.0)
# One poll reads a table's timeline and plans: tens of milliseconds to a few minutes on a slow store; 30 s is the
# default poll interval.
POLL_BUCKETS: tuple[float, ...] = (0.025, 0.1, 0.5, 2.5, 10.0, 30.0, 120.0, 300.0)


def _check_non_negative(metric: str, value: float) -> float:
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{NAMESPACE}_{metric}: value must be a non-negative number, got {value!r}")
    return float(value)


def _check_label(name: str, value: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"label {name!r} must be a non-empty string, got {value!r}")
    return value


class _WithoutCreatedSeries:
    """A view of a registry without the `<name>_created` samples of counters and histograms.

    The classic text format has no place for them: Prometheus would store each as one more gauge series.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            if family.type in ("counter", "histogram", "summary"):
                created = family.name + "_created"
                family = copy.copy(family)
                family.samples = [sample for sample in family.samples if sample.name != created]
            yield family


class Metrics:
    """Every metric of the daemon, on one injected registry.

    Thread-safe: executors running in worker threads may call it while the event loop does too.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        version: str = __version__,
        process_metrics: bool = False,
        created_series: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Register the metrics on `registry`.

        `version` goes into `tableservice_build_info`; `process_metrics` also registers the standard
        `process_*` collector (CPU, memory, open files) on the same registry; `created_series` keeps the
        `*_created` gauges in the classic text format (OpenMetrics always has them); `clock` gives the unix time
        recorded by `poll_finished` when the caller passes none.
        """
        self._registry = registry
        self._clock = clock
        self._created_series = created_series
        self._lock = threading.Lock()
        # table -> the (metric, label values) series created for it, so forget_table can remove them.
        # table -> (metric, labels after `table`) -> the labelled child: a poll finds its series without a label
        # lookup (about 20 per idle poll of every table)
        self._series: dict[str, dict[tuple[MetricWrapperBase, tuple[str, ...]], Any]] = {}

        def name(suffix: str) -> str:
            return f"{NAMESPACE}_{suffix}"

        ta = ("table", "action")
        reg = registry
        # --- scheduling state, refreshed on every poll
        self._pending = Gauge(
            name("pending_actions"), "Requested or inflight instants of this action on the timeline", ta, registry=reg
        )
        self._oldest_pending_age = Gauge(
            name("oldest_pending_age_seconds"),
            "Age of the oldest pending instant of this action (0 when none is pending)",
            ta,
            registry=reg,
        )
        self._scheduled = Counter(
            name("actions_scheduled"), "Actions scheduled (requested instants written) by the daemon", ta, registry=reg
        )
        # --- executions
        self._completed = Counter(name("actions_completed"), "Actions executed and committed", ta, registry=reg)
        self._failed = Counter(name("actions_failed"), "Action executions that failed", ta, registry=reg)
        self._abandoned = Counter(
            name("actions_abandoned"),
            "Pending plans removed because a write that completed after them conflicts (a new plan may follow)",
            ta,
            registry=reg,
        )
        self._duration = Histogram(
            name("action_duration_seconds"),
            "Wall time of a successful action execution, from start to commit",
            ta,
            registry=reg,
            buckets=ACTION_DURATION_BUCKETS,
        )
        self._bytes_read = Counter(name("read_bytes"), "Bytes read by action executions", ta, registry=reg)
        self._bytes_written = Counter(name("written_bytes"), "Bytes written by action executions", ta, registry=reg)
        self._records_read = Counter(name("read_records"), "Records read by action executions", ta, registry=reg)
        self._records_written = Counter(
            name("written_records"), "Records written by action executions", ta, registry=reg
        )
        self._log_files_compacted = Counter(
            name("log_files_compacted"), "Log files merged into new base files or log files", ta, registry=reg
        )
        self.ledger = LedgerMetrics(reg, NAMESPACE, self._child)
        self.slo = SloMetrics(reg, NAMESPACE, self._child)
        # --- locks
        tl = ("table", "lock")
        self._lock_wait = Histogram(
            name("lock_wait_seconds"), "Time spent waiting to acquire the table lock", tl, registry=reg,
            buckets=LOCK_BUCKETS,
        )  # fmt: skip
        self._lock_hold = Histogram(
            name("lock_hold_seconds"), "Time the table lock was held", tl, registry=reg, buckets=LOCK_BUCKETS
        )
        # --- polling and table health
        self._poll_duration = Histogram(
            name("poll_duration_seconds"),
            "Wall time of one poll of a table (timeline read and planning)",
            ("table",),
            registry=reg,
            buckets=POLL_BUCKETS,
        )
        self._last_poll = Gauge(
            name("last_successful_poll_timestamp_seconds"),
            "Unix time at which the last successful poll of the table finished",
            ("table",),
            registry=reg,
        )
        self._poll_lag = Gauge(
            name("poll_lag_seconds"),
            "How late the table's last poll started after it was due (waiting for a worker thread)",
            ("table",),
            registry=reg,
        )
        self._storage_requests = Counter(
            name("storage_requests"),
            "Object-store requests made for the table (polls and actions run in this process), by kind: LIST, GET, "
            "HEAD, PUT, POST, DELETE",
            ("table", "kind"),
            registry=reg,
        )
        self._errors = Counter(
            name("table_errors"), "Errors raised while serving a table, by error class", ("table", "kind"), registry=reg
        )
        self._quarantined = Gauge(
            name("table_quarantined"), "1 while the table is quarantined after repeated failures", ("table",),
            registry=reg,
        )  # fmt: skip
        self._paused = Gauge(
            name("table_paused"), "1 while an operator has paused the table (polled, no action runs)", ("table",),
            registry=reg,
        )  # fmt: skip
        self._service_quarantined = Gauge(
            name("service_quarantined"),
            "1 while a service is stopped for the table after it found damaged committed data (see /status)",
            ("table", "action"), registry=reg,
        )  # fmt: skip
        self._held_back = Gauge(
            name("actions_held_back"), "Actions not retried after a permanent failure (a corrupt file, a bad plan)",
            ("table", "action"), registry=reg,
        )  # fmt: skip
        self._spark_job = Histogram(
            name("spark_job_seconds"),
            "Time of the Spark job running one action's tasks (the session's start-up excluded)", ta, registry=reg,
            buckets=ACTION_DURATION_BUCKETS,
        )  # fmt: skip
        self._last_success = Gauge(
            name("last_success_timestamp_seconds"),
            "Unix time the table's last execution of this action committed", ta, registry=reg,
        )  # fmt: skip
        self._cleaned_files = Counter(
            name("cleaned_files"), "Files deleted from storage by clean executions", ("table",), registry=reg
        )
        self._cleaned_bytes = Counter(
            name("cleaned_bytes"), "Bytes of the files clean executions deleted", ("table",), registry=reg
        )
        self._archived = Counter(
            name("archived_instants"),
            "Instants moved from the active timeline to the archive",
            ("table",),
            registry=reg,
        )
        self._rolled_back = Counter(
            name("failed_writes_rolled_back"), "Failed writes (of writers or of table services) rolled back",
            ("table",), registry=reg,
        )  # fmt: skip
        # --- process
        self._build_info = Info(name("build"), "Build of the tableservice daemon", registry=reg)
        self._build_info.info({"version": version, "python": platform.python_version()})
        self._up = Gauge(name("up"), "1 while the daemon is running", registry=reg)
        self._reloads = Counter(
            name("config_reloads"), "Configuration reloads, by result (success, failure)", ("result",), registry=reg
        )
        self._reload_ok = Gauge(
            name("config_last_reload_successful"), "1 when the last configuration reload succeeded", registry=reg
        )
        self._reload_ok.set(1)
        self._spark_up = Gauge(name("spark_up"), "1 once the daemon's Spark session is up and warmed", registry=reg)
        self._leases = Gauge(
            name("leases_held"), "Executor leases this replica holds (actions it is running)", ta, registry=reg
        )
        self._history_failures = Counter(
            name("history_write_failures"),
            "Actions the action history could not record (its SQLite file unwritable or corrupt)",
            registry=reg,
        )
        for result in ("success", "failure"):
            self._reloads.labels(result)
        self._up.set(1)
        if process_metrics:
            ProcessCollector(registry=reg)

    @property
    def registry(self) -> CollectorRegistry:
        """The registry the metrics are registered on."""
        return self._registry

    # --- helpers -----------------------------------------------------------------------------------

    def _child(self, metric: _M, table: str, *rest: str) -> _M:
        key = (metric, rest)
        children = self._series.get(table)
        child = None if children is None else children.get(key)
        if child is None:
            child = metric.labels(_check_label("table", table), *rest)
            with self._lock:
                self._series.setdefault(table, {})[key] = child
        return cast(_M, child)

    # --- scheduling state --------------------------------------------------------------------------

    def set_pending(self, table: str, action: str, *, count: int, oldest_age_seconds: float) -> None:
        """Pending (requested or inflight) instants of `action` on `table` and the oldest one's age.

        Call it on every poll for each action the daemon serves, with count 0 when none is pending.
        """
        _check_label("action", action)
        pending = _check_non_negative("pending_actions", count)
        age = _check_non_negative("oldest_pending_age_seconds", oldest_age_seconds) if count else 0.0
        self._child(self._pending, table, action).set(pending)
        self._child(self._oldest_pending_age, table, action).set(age)

    def action_scheduled(self, table: str, action: str) -> None:
        """The daemon wrote a requested instant of `action` on `table`."""
        self._child(self._scheduled, table, _check_label("action", action)).inc()

    # --- executions --------------------------------------------------------------------------------

    def action_completed(self, table: str, action: str, *, duration_seconds: float) -> None:
        """An execution of `action` committed after `duration_seconds`."""
        _check_label("action", action)
        duration = _check_non_negative("action_duration_seconds", duration_seconds)
        self._child(self._completed, table, action).inc()
        self._child(self._duration, table, action).observe(duration)

    def action_failed(self, table: str, action: str) -> None:
        """An execution of `action` failed (report the error itself with `table_error`)."""
        self._child(self._failed, table, _check_label("action", action)).inc()

    def action_abandoned(self, table: str, action: str) -> None:
        """A pending plan of `action` was rolled back and removed: a completed write conflicts with it."""
        self._child(self._abandoned, table, _check_label("action", action)).inc()

    def record_io(
        self,
        table: str,
        action: str,
        *,
        bytes_read: int = 0,
        bytes_written: int = 0,
        records_read: int = 0,
        records_written: int = 0,
        log_files_compacted: int = 0,
    ) -> None:
        """Add an execution's I/O (from its write stats) to the table's counters."""
        _check_label("action", action)
        amounts = (
            (self._bytes_read, "read_bytes_total", bytes_read),
            (self._bytes_written, "written_bytes_total", bytes_written),
            (self._records_read, "read_records_total", records_read),
            (self._records_written, "written_records_total", records_written),
            (self._log_files_compacted, "log_files_compacted_total", log_files_compacted),
        )
        checked = [(metric, _check_non_negative(name, amount)) for metric, name, amount in amounts]
        for metric, amount in checked:
            # Touch the series even for 0 so that rate() has a starting point.
            self._child(metric, table, action).inc(amount)

    def observe_spark_job(self, table: str, action: str, seconds: float) -> None:
        """One action's Spark job ran for `seconds` (from submission to the last task, start-up excluded)."""
        duration = _check_non_negative("spark_job_seconds", seconds)
        self._child(self._spark_job, table, _check_label("action", action)).observe(duration)

    def record_effects(
        self,
        table: str,
        action: str,
        *,
        finished_at: float,
        files_deleted: int = 0,
        bytes_deleted: int = 0,
        instants_archived: int = 0,
        failed_writes_rolled_back: int = 0,
    ) -> None:
        """What a committed execution of `action` changed beyond its I/O, and when it committed (unix seconds)."""
        _check_label("action", action)
        self._child(self._last_success, table, action).set(_check_non_negative("finished_at", finished_at))
        for metric, metric_name, amount, owner in (
            (self._cleaned_files, "cleaned_files_total", files_deleted, "clean"),
            (self._cleaned_bytes, "cleaned_bytes_total", bytes_deleted, "clean"),
            (self._archived, "archived_instants_total", instants_archived, "archival"),
            (self._rolled_back, "failed_writes_rolled_back_total", failed_writes_rolled_back, "rollback"),
        ):
            checked = _check_non_negative(metric_name, amount)
            if checked or action == owner:  # the owning action touches its series even for 0 (rate() needs a start)
                self._child(metric, table).inc(checked)

    # --- locks -------------------------------------------------------------------------------------

    def observe_lock_wait(self, table: str, lock: str, seconds: float) -> None:
        """Time spent waiting for `table`'s lock from provider `lock` (also when the wait timed out)."""
        waited = _check_non_negative("lock_wait_seconds", seconds)
        self._child(self._lock_wait, table, _check_label("lock", lock)).observe(waited)

    def observe_lock_hold(self, table: str, lock: str, seconds: float) -> None:
        """Time `table`'s lock from provider `lock` was held, measured at release."""
        held = _check_non_negative("lock_hold_seconds", seconds)
        self._child(self._lock_hold, table, _check_label("lock", lock)).observe(held)

    # --- polling and table health ------------------------------------------------------------------

    def poll_finished(
        self, table: str, *, duration_seconds: float, succeeded: bool, finished_at: float | None = None
    ) -> None:
        """One poll of `table` took `duration_seconds`; a successful one also sets the last-poll time.

        `finished_at` is unix seconds (default: now).
        """
        duration = _check_non_negative("poll_duration_seconds", duration_seconds)
        self._child(self._poll_duration, table).observe(duration)
        if succeeded:
            self._child(self._last_poll, table).set(self._clock() if finished_at is None else finished_at)

    def poll_lag(self, table: str, seconds: float) -> None:
        """The table's poll started `seconds` after it was due."""
        self._child(self._poll_lag, table).set(max(0.0, seconds))

    def storage_requests(self, table: str, counts: Mapping[str, int]) -> None:
        """Object-store requests made for `table`, by kind (`tableservice.storage.requests`)."""
        for kind, n in counts.items():
            if n > 0:
                self._child(self._storage_requests, table, _check_label("kind", kind)).inc(n)

    def table_error(self, table: str, error: BaseException | str) -> None:
        """Count an error on `table`; `error` is the exception or its class name."""
        kind = error if isinstance(error, str) else type(error).__name__
        self._child(self._errors, table, _check_label("kind", kind)).inc()

    def set_quarantined(self, table: str, quarantined: bool) -> None:
        """Whether `table` is quarantined (skipped after repeated failures)."""
        self._child(self._quarantined, table).set(1 if quarantined else 0)

    def set_paused(self, table: str, paused: bool) -> None:
        """Whether an operator paused `table` (`paused: true` in its configuration entry)."""
        self._child(self._paused, table).set(1 if paused else 0)

    def set_service_quarantined(self, table: str, action: str, quarantined: bool) -> None:
        """Whether the service `action` is stopped for `table` after it found damaged committed data."""
        self._child(self._service_quarantined, table, _check_label("action", action)).set(1 if quarantined else 0)

    def set_held_back(self, table: str, action: str, count: int) -> None:
        """How many pending actions of `action` on `table` are held back after a permanent failure."""
        self._child(self._held_back, table, _check_label("action", action)).set(_check_non_negative("held", count))

    # --- process -----------------------------------------------------------------------------------

    def set_up(self, up: bool) -> None:
        """`tableservice_up` (1 from construction; set 0 while shutting down)."""
        self._up.set(1 if up else 0)

    def set_spark_up(self, up: bool) -> None:
        self._spark_up.set(1 if up else 0)

    def lease_held(self, table: str, action: str, held: bool) -> None:
        """This replica took (True) or gave back (False) the executor lease of one `action` on `table`."""
        child = self._child(self._leases, table, _check_label("action", action))
        if held:
            child.inc()
        else:
            child.dec()

    def config_reloaded(self, succeeded: bool) -> None:
        """A configuration reload ended (the running configuration is kept when it failed)."""
        self._reloads.labels("success" if succeeded else "failure").inc()
        self._reload_ok.set(1 if succeeded else 0)

    def history_write_failed(self) -> None:
        """The action history could not record an action (the action itself went on)."""
        self._history_failures.inc()

    # --- lifecycle and exposition ------------------------------------------------------------------

    def known_tables(self) -> frozenset[str]:
        """Tables that currently have series."""
        with self._lock:
            return frozenset(self._series)

    def forget_table(self, table: str) -> None:
        """Remove every series labelled with `table` (the table left the configuration)."""
        with self._lock:
            series = self._series.pop(table, {})
        self.slo.forget(table)
        for metric, rest in series:
            metric.remove(table, *rest)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The registry in Prometheus' exposition format: (body, content type).

        `accept` is the scraper's Accept header; OpenMetrics is returned when it asks for it, the classic
        text format otherwise.
        """
        encoder, content_type = choose_encoder(accept or "")
        content_type = str(content_type)
        if content_type.startswith("text/plain") and not self._created_series:
            body: bytes = encoder(_WithoutCreatedSeries(self._registry))
        else:
            body = encoder(self._registry)
        return body, content_type


def new_metrics(*, process_metrics: bool = True) -> Metrics:
    """A Metrics on a fresh registry of its own (callers above this layer never touch prometheus_client)."""
    return Metrics(CollectorRegistry(), process_metrics=process_metrics)
