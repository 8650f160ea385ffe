"""The daemon's one long-lived SparkSession and the jobs it runs.

Jobs are DataFrames of self-contained task descriptions (JSON) mapped with `mapInArrow`: each Python worker
runs the format layer on its tasks (merged read, new base file written straight to storage) and returns the
write stats as JSON. Each action's jobs carry a Spark job tag naming the table and instant, so an action can be
cancelled on its own (`SparkSession.interruptTag`), on classic Spark and on Spark Connect alike.

Python workers import `tableservice` themselves: with a cluster or Spark Connect, install the package (same
version) on the executors' Python environment.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from tableservice.errors import (
    SparkJobError,
    SparkUnavailableError,
)
from tableservice.executors.jvm_output import classic_session
from tableservice.executors.jvm_priority import lower_priority
from tableservice.executors.task_shares import TaskShares
from tableservice.executors.worker import (
    RESULT_SCHEMA,
    decode_task_error,
    no_task_results,
    task_worker,
    warm_worker,
)
from tableservice.hudi.action.tasks import Task
from tableservice.hudi.models import HoodieWriteStat
from tableservice.storage import StorageOptions

log = logging.getLogger(__name__)

RESULT_TYPE = from_arrow_schema(RESULT_SCHEMA)


@dataclass(frozen=True)
class SparkSettings:
    master: str | None = "local[*]"
    remote: str | None = None  # Spark Connect, e.g. sc://host:15002
    app_name: str = "tableservice"
    conf: Mapping[str, str] = field(default_factory=dict)
    jvm_log_level: str | None = "WARN"
    """The driver JVM's log4j2 root level, its output re-emitted through Python logging (`jvm_output`); None leaves
    the JVM's logging and standard streams as PySpark sets them up."""
    local_jvm_nice: int = 10
    """Under a local master, the nice value the driver JVM's threads get once `warm_up` has started the Python
    workers (0: unchanged). The workers do an action's work; the JVM (its JIT compiler above all: 0.2-0.7 CPU s per
    compaction job on a young JVM) then takes the cores only when they are free. See `jvm_priority`."""


def job_tag(table: str, action: str, instant: str) -> str:
    """A Spark job tag for one action (tags may not contain commas)."""
    return re.sub(r"[^A-Za-z0-9_.:=-]", "_", f"tableservice:{table}:{action}:{instant}")


@dataclass(frozen=True)
class JobResult:
    """What one action's job did: the write stats of every file written, and what its tasks measured themselves
    (run time, records read by merged reads, the highest Python worker peak RSS, object-store requests by kind,
    lower-case: `get`, `put`... as the cost ledger keys them)."""

    stats: list[HoodieWriteStat]
    executor_seconds: float = 0.0
    records_read: int = 0
    peak_rss_kb: int = 0
    requests: dict[str, int] = field(default_factory=dict)


def task_payload(tasks: Sequence[Task], storage_options: StorageOptions | None) -> list[str]:
    """What a job ships to Spark: each task as JSON, with the storage settings that may travel (no credentials:
    executors take those from their own environment)."""
    opts = json.dumps(storage_options.shareable() if storage_options is not None else {}, sort_keys=True)
    return [replace(t, extra={**t.extra, "storage_options": opts}).to_json() for t in tasks]


class SparkExecutor:
    """Owns the SparkSession; thread-safe for concurrent actions (one job tag per action).

    The session starts on first use, or ahead of it (the daemon starts it in the background). An action that needs
    it while another thread starts it waits, and says so in the log. A failed start raises SparkUnavailableError
    (retryable); for `START_RETRY_S` after it, actions get that error at once instead of starting again."""

    START_RETRY_S = 30.0

    def __init__(self, settings: SparkSettings) -> None:
        self.settings = settings
        self._session: SparkSession | None = None
        self._owns_session = False
        self._lock = threading.Lock()
        self._starting_since: float | None = None  # monotonic time a start began, while it runs
        self._failure: tuple[str, float] | None = None  # the last failed start: its error, monotonic time
        self.last_peak_rss_kb = 0  # highest Python worker peak RSS seen by the last job

    # --- lifecycle ---------------------------------------------------------------------------------

    @property
    def where(self) -> str:
        return self.settings.remote or self.settings.master or "local[*]"

    def unavailable(self) -> SparkUnavailableError | None:
        """The error of the last start when it failed less than `START_RETRY_S` ago and no session is up."""
        failure = self._failure
        if self._session is not None or failure is None or time.monotonic() - failure[1] >= self.START_RETRY_S:
            return None
        return SparkUnavailableError(f"the spark session ({self.where}) did not start: {failure[0]}")

    def start(self) -> SparkSession:
        """The session, started now if it is not up (waiting for a start under way in another thread)."""
        session = self._session
        if session is not None:
            return session
        refused = self.unavailable()
        if refused is not None:
            raise refused
        since = self._starting_since
        waited = time.monotonic()
        if since is not None:
            log.info("waiting for the spark session (%s), starting for %.1fs", self.where, waited - since)
        with self._lock:
            if self._session is not None:
                if since is not None:
                    log.info("spark session up after waiting %.1fs", time.monotonic() - waited)
                return self._session
            refused = self.unavailable()  # the start waited for failed
            if refused is not None:
                raise refused
            self._starting_since = time.monotonic()
            try:
                session, self._owns_session = self._create_session()
            except Exception as e:  # any failure to start: the JVM, the connection, the configuration
                self._failure = (short_error(e), time.monotonic())
                raise SparkUnavailableError(
                    f"the spark session ({self.where}) did not start: {self._failure[0]}"
                ) from e
            finally:
                self._starting_since = None
            self._failure = None
            self._session = session
            return session

    def start_again(self) -> SparkSession:
        """`start`, trying now even when the last start failed less than `START_RETRY_S` ago (the daemon's own
        retries, with their back-off)."""
        self._failure = None
        return self.start()

    def _create_session(self) -> tuple[SparkSession, bool]:
        """A new session, or the one already running in this process; whether this executor owns (stops) it."""
        s = self.settings
        active = None if s.remote else SparkSession.getActiveSession()
        if active is not None:  # getOrCreate would return it: share it, and leave stopping it to its owner
            log.info("using the spark session already running in this process")
            return active, False
        if s.remote:
            builder = SparkSession.builder.appName(s.app_name).remote(s.remote)
            for key, value in s.conf.items():
                builder = builder.config(key, value)
            session = builder.getOrCreate()
        else:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            options = {
                "spark.app.name": s.app_name,
                "spark.master": s.master or "local[*]",
                "spark.ui.enabled": "false",
                "spark.sql.execution.arrow.pyspark.enabled": "true",
                **WORKER_ENV,
                **s.conf,
            }
            session = classic_session(local_java_options(options), s.jvm_log_level)
        log.info("spark session started (%s)", self.where)
        return session, True

    @property
    def session(self) -> SparkSession:
        return self.start()

    def is_up(self) -> bool:
        session = self._session
        if session is None:
            return False
        try:
            return bool(session.range(1).count() == 1)
        except Exception:  # any failure means not ready
            return False

    def stop(self) -> None:
        with self._lock:
            if self._session is not None:
                try:
                    if self._owns_session:
                        self._session.stop()
                finally:
                    self._session = None

    def warm_up(self) -> None:
        """Start the Python workers and import the format layer in them, so the first action does not pay it; then
        two jobs shaped like an action's (task results out) for the driver JVM: its first such jobs run slower
        (measured on the first clustering job of `bench.clustering`: 0.86-0.94 JVM CPU s without, 0.42-0.45 s
        with them). Last, under a local master, the driver JVM's priority is lowered (`local_jvm_nice`)."""
        local_slots = self.task_slots()  # None unless the master is local
        slots = local_slots or 1
        self.session.range(0, slots, 1, slots).mapInArrow(warm_worker, "pid long").collect()
        self.empty_jobs(2)
        nice = self.settings.local_jvm_nice
        pid = self.driver_jvm_pid() if nice and self._owns_session and local_slots is not None else None
        # After the workers started: Spark's Python daemon, a child of the JVM, keeps the default priority.
        if pid is not None and lower_priority(pid, nice):
            log.info("driver JVM (pid %d) at nice %d beside the Python workers", pid, nice)

    def empty_jobs(self, count: int) -> None:
        """Run `count` jobs shaped like an action's (eight rows per task slot in, a task's results out for each)
        with no task in them: what the driver JVM plans and compiles for an action, without its work. With results
        of a real stat's size (not nulls, one row a slot), the first compaction job after 200 of them cost the
        JVM 0.06-0.09 CPU s instead of 0.23-0.29 s (`bench.compaction`'s table, `local[2]`)."""
        slots = self.task_slots() or 1
        for _ in range(count):
            self.session.range(0, slots * 8, 1, slots).mapInArrow(no_task_results, RESULT_TYPE).collect()

    def driver_jvm_pid(self) -> int | None:
        """The process id of the driver JVM of a classic session (None for Spark Connect, or when it cannot say)."""
        if self.settings.remote or self._session is None:
            return None
        try:
            return int(self._session._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
        except Exception as e:  # a session without a py4j gateway: nothing to lower
            log.debug("no driver JVM process id: %s", e)
            return None

    def task_slots(self) -> int | None:
        """How many tasks run at once: N of a local[N] master (the cores for local[*]); None when unknown (a
        cluster or Spark Connect: then one Spark task per operation)."""
        master = self.settings.master if not self.settings.remote else None
        if master is None:
            return None
        m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
        if m is None:
            return None
        threads = m.group(1)
        if threads is None:
            return 1
        if threads == "*":
            return os.cpu_count() or 1
        return max(1, int(threads))

    def cancel(self, tag: str) -> None:
        """Interrupt every running job of one action."""
        if self._session is not None:
            try:
                self._session.interruptTag(tag)
            except Exception as e:  # cancelling is best effort
                log.warning("could not interrupt spark jobs tagged %s: %s", tag, e)

    # --- jobs --------------------------------------------------------------------------------------

    def spread(
        self, tasks: Sequence[Task], storage_options: StorageOptions | None, parallelism: int | None = None
    ) -> tuple[list[str], int]:
        """The tasks as a job ships them (JSON, `task_payload`), ordered so that Spark's range partitions get
        similar weights, and how many partitions: one per task slot, at most one per task."""
        payload = task_payload(tasks, storage_options)
        slots = parallelism if parallelism is not None else self.task_slots()
        partitions = max(1, min(slots if slots is not None else len(payload), len(payload)))
        return balanced(payload, [t.size_hint for t in tasks], partitions), partitions

    def run_tasks(
        self,
        tasks: Sequence[Task],
        *,
        tag: str,
        description: str,
        storage_options: StorageOptions | None = None,
        parallelism: int | None = None,
    ) -> JobResult:
        """Run one action's tasks (compaction operations or clustering groups) as one Spark job: the write stats
        of every file written and what the tasks measured."""
        if not tasks:
            return JobResult([])
        spark = self.session
        payload, partitions = self.spread(tasks, storage_options, parallelism)
        with (
            shared_tasks(len(payload), partitions, self.task_slots() is not None) as shares,
            spark_job(spark, tag, description),
        ):
            # Task i is row i of a range: no shuffle, and each Spark task runs its share of the operations (and,
            # under a local master, what is left of the others' once its own are done: `task_shares`).
            df = spark.range(0, len(payload), 1, partitions)
            rows = df.mapInArrow(task_worker(payload, shares), RESULT_TYPE).collect()
        ran_once(description, len(payload), [int(r["task"]) for r in rows if r["stat"] is None])
        peak = max((int(r["peak_rss_kb"]) for r in rows), default=0)
        self.last_peak_rss_kb = peak
        return JobResult(
            [HoodieWriteStat.model_validate_json(r["stat"]) for r in rows if r["stat"] is not None],
            executor_seconds=sum(float(r["task_seconds"]) for r in rows),
            records_read=sum(int(r["records_read"]) for r in rows),
            peak_rss_kb=peak,
            requests=task_requests(r["requests"] for r in rows),
        )


WORKER_ENV = {"spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": "system"}
"""The Python workers' environment (a user's `spark.executorEnv.*` wins): Arrow's C++ code allocates from glibc's
malloc, as the pyarrow calls do (`worker._use_system_allocator`). Only the environment reaches the allocations
Arrow's C++ code makes with its own default pool (compute kernels, Parquet internals); with mimalloc there, a
warmed worker process running two 500k-row clustering groups peaked at 400 MiB and kept 200 MiB after the idle
release (`malloc_trim` does not reach mimalloc's memory); with the variable set, 348 and 144 MiB. A Spark Connect
server's executors take it from the server's configuration."""

LOCAL_JAVA_OPTIONS = "-XX:+UseSerialGC"
"""Driver JVM flags for a local master, where the JVM shares the machine's cores with the Python workers: the serial
collector (no parallel GC threads competing with the workers). Measured on this machine's 2 cores, one run each
(`bench.compaction`, `bench.indexing`): compaction `local[2]` 1.94x `local[1]`; the record-index build (whose shuffle
and sort run in the JVM) 4.03 s / 2.65 s at `local[1]` / `local[2]` against 5.24 s / 3.59 s with the default
collector. The C2 compiler stays: without it (`-XX:TieredStopAtLevel=1`) compaction jobs cost less JVM CPU, but the
index build took 6.67 s / 6.27 s."""


def local_java_options(options: Mapping[str, str]) -> dict[str, str]:
    """`options` with `LOCAL_JAVA_OPTIONS` before the user's driver Java options when the master is local, unless the
    user chose a collector (the JVM refuses to start with two); other masters' options unchanged."""
    out = dict(options)
    master = out.get("spark.master", "").strip()
    if not re.fullmatch(r"local(\[.*\])?", master):
        return out
    user = out.get("spark.driver.extraJavaOptions", "").strip()
    if re.search(r"-XX:[+-]Use\w*GC\b", user):
        return out
    out["spark.driver.extraJavaOptions"] = f"{LOCAL_JAVA_OPTIONS} {user}" if user else LOCAL_JAVA_OPTIONS
    return out


@contextmanager
def shared_tasks(count: int, partitions: int, local: bool) -> Iterator[TaskShares]:
    """How the job's partitions share its tasks: under a local master with more tasks than partitions, through a
    claims directory of the job's own (removed afterwards); otherwise each partition runs its share."""
    directory = None
    if local and count > partitions > 1:
        try:
            directory = tempfile.mkdtemp(prefix="tableservice-claims-")
        except OSError as e:  # no sharing: the job runs as dealt
            log.warning("tasks not shared between partitions: no claims directory: %s", e)
    try:
        yield TaskShares(count, partitions, directory)
    finally:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def ran_once(description: str, count: int, ran: Sequence[int]) -> None:
    """Raise SparkJobError unless each of the job's `count` tasks reported its run exactly once (the Spark task
    attempts whose results Spark kept): a task not run, or run twice, must not reach a commit."""
    times = Counter(ran)
    missing = [i for i in range(count) if times[i] == 0]
    twice = sorted(i for i, n in times.items() if n > 1 or not 0 <= i < count)
    if missing or twice:
        raise SparkJobError(
            f"job {description}: tasks not run {missing[:10]}, run more than once or unknown {twice[:10]} (of {count})"
        )


def task_requests(reported: Iterable[str | None]) -> dict[str, int]:
    """The object-store requests the tasks reported (JSON by kind), summed, with lower-case kinds."""
    total: Counter[str] = Counter()
    for text in reported:
        if text:
            total.update({kind.lower(): int(n) for kind, n in json.loads(text).items()})
    return dict(sorted(total.items()))


@contextmanager
def spark_job(spark: SparkSession, tag: str, description: str) -> Iterator[None]:
    """One job under its tag (so that it can be cancelled on its own): a task's own error (a corrupt file, a bad
    plan, a storage error) comes back typed, anything else as SparkJobError."""
    spark.addTag(tag)
    try:
        yield
    except Exception as e:
        typed = decode_task_error(str(e))
        if typed is not None:
            raise typed from e
        raise SparkJobError(f"job {description} failed: {short_error(e)}") from e
    finally:
        spark.removeTag(tag)


def balanced(payload: Sequence[str], weights: Sequence[int], partitions: int) -> list[str]:
    """Order tasks so that Spark's range partitions (contiguous index ranges) get similar total weights: the
    heaviest tasks first, dealt to the partitions in snake order, each partition taking as many tasks as its
    index range holds."""
    n, k = len(payload), partitions
    if k <= 1 or n <= k:
        return list(payload)
    sizes = [((p + 1) * n) // k - (p * n) // k for p in range(k)]
    bins: list[list[int]] = [[] for _ in range(k)]
    cycle = [*range(k), *range(k - 1, -1, -1)]
    turn = 0
    for i in sorted(range(n), key=lambda i: -weights[i]):
        while len(bins[cycle[turn % len(cycle)]]) >= sizes[cycle[turn % len(cycle)]]:
            turn += 1
        bins[cycle[turn % len(cycle)]].append(i)
        turn += 1
    return [payload[i] for b in bins for i in b]


def short_error(e: BaseException) -> str:
    """The line of a Spark error that says what went wrong: for a Python worker, the exception at the end of its
    traceback (the first line only says that the worker raised)."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception)\b.*:", line)]
    pick = raised[-1] if raised else (lines[0] if lines else type(e).__name__)
    return pick[:500]


def session_info(executor: SparkExecutor) -> dict[str, Any]:
    s = executor.settings
    return {"master": s.master, "remote": s.remote, "up": executor._session is not None}
