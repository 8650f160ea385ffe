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
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession

from tableservice import errors
from tableservice.errors import (
    PermanentError,
    RetryableError,
    SparkJobError,
    SparkUnavailableError,
    TableServiceError,
)
from tableservice.executors.jvm_output import classic_session
from tableservice.hudi.action.tasks import Task, run_task, task_from_json
from tableservice.hudi.file_group.records_read import counting_records
from tableservice.hudi.models import HoodieWriteStat
from tableservice.storage import Storage, StorageOptions
from tableservice.storage.requests import counting

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SparkSettings:
    master: str | None = "local[*]"
    remote: str | None = None  # Spark Connect, e.g. sc://host:15002
    app_name: str = "tableservice"
    conf: Mapping[str, str] = field(default_factory=dict)
    jvm_log_level: str | None = "WARN"
    """The driver JVM's log4j2 root level, its output re-emitted through Python logging (`jvm_output`); None leaves
    the JVM's logging and standard streams as PySpark sets them up."""


def job_tag(table: str, action: str, instant: str) -> str:
    """A Spark job tag for one action (tags may not contain commas)."""
    return re.sub(r"[^A-Za-z0-9_.:=-]", "_", f"tableservice:{table}:{action}:{instant}")


def _task_context_token() -> str:
    """`<partitionId>-<stageId>-<attemptNumber>` of the running Spark task (Hudi's write token)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return "0-0-0"
    return f"{ctx.partitionId()}-{ctx.stageId()}-{ctx.attemptNumber()}"


def _peak_rss_kb() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _forget_zip_importers() -> None:
    """Drop the zip importers Python cached for `pyspark.zip` and `py4j-*.zip` (one per package imported from
    them). PySpark's worker calls `importlib.invalidate_caches()` before every Spark task, and on Python 3.11 each
    cached zip importer then re-reads its whole archive's directory: about 0.15 CPU s per Spark task in a worker
    that imported PySpark's SQL modules. Modules already imported stay; an import that needs the archive again
    makes a new importer (from the directory Python keeps per archive)."""
    import zipimport

    for path, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            del sys.path_importer_cache[path]


def _raise_malloc_mmap_threshold() -> None:
    """glibc's malloc serves blocks above its mmap threshold (128 KiB at first) from fresh mappings, returned to
    the OS on free and faulted in page by page on the next allocation; freeing such a block raises the threshold to
    its size (up to 32 MiB). One 32 MiB block freed here keeps a task's numpy arrays on the heap: measured on a
    clustering group of 500k rows, its first run in a fresh process took 0.76 system CPU s without this, 0.24 s
    with it (other allocators: a harmless allocation)."""
    block = np.ones(32 << 20, dtype=np.uint8)
    del block


def _use_system_allocator() -> None:
    """Arrow buffers from glibc's malloc (Arrow's system pool) unless ARROW_DEFAULT_MEMORY_POOL names a pool.
    pyarrow's default, mimalloc, served a worker's first clustering group (500k rows) with 0.4-0.8 system CPU s
    more than later groups (huge pages faulted in); glibc: 0.1-0.2 s, and no more user time. Buffers already
    allocated go back to the pool they came from."""
    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        pa.set_memory_pool(pa.system_memory_pool())


def _release_unused_memory() -> None:
    """Give the memory Arrow's pool keeps cached back to the OS (`malloc_trim` for glibc): about 10-20 ms after a
    clustering group of 500k rows, RSS back from about 450 to 150 MiB."""
    pa.default_memory_pool().release_unused()


RELEASE_AFTER_IDLE_SECONDS = 5.0


class _IdleRelease:
    """Releases a worker's cached memory once it has run no Spark task for `RELEASE_AFTER_IDLE_SECONDS`: an idle
    worker does not keep a task's peak resident, and a job that follows another at once reuses the memory instead
    of faulting it in again (about 0.2 system CPU s per worker for a clustering group of 500k rows)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def busy(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def idle(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(RELEASE_AFTER_IDLE_SECONDS, _release_unused_memory)
            self._timer.daemon = True
            self._timer.start()


_idle_release = _IdleRelease()


def _warm_worker(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    from tableservice.hudi.action.warm import warm_kernels

    _use_system_allocator()
    # pyarrow imports pandas (about 0.3 CPU s) the first time it converts a Python value (`pa.scalar`, which
    # `fill_null` and the merge use): pay it here, not in the first task of the worker.
    pa.scalar(False, pa.bool_())
    _raise_malloc_mmap_threshold()
    try:
        warm_kernels()
    except Exception as e:  # only speed is lost: the first tasks pay what the warm-up would have (a full TMPDIR...)
        log.warning("warming the worker's kernels failed: %s", e)
    _release_unused_memory()
    _forget_zip_importers()
    for batch in batches:
        yield pa.RecordBatch.from_pydict({"pid": pa.array([os.getpid()] * batch.num_rows, pa.int64())})


def _no_task_results(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    """Rows shaped like a task's measurements (`_run_task_batches`), one per input row, for nothing run."""
    for batch in batches:
        n = batch.num_rows
        yield pa.RecordBatch.from_pydict(
            {
                "stat": pa.nulls(n, pa.string()),
                "peak_rss_kb": pa.array([_peak_rss_kb()] * n, pa.int64()),
                "task_seconds": pa.array([0.0] * n, pa.float64()),
                "records_read": pa.array([0] * n, pa.int64()),
                "requests": pa.array(["{}"] * n, pa.string()),
            }
        )


def _task_worker(payload: Sequence[str]) -> Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]:
    """The function Spark runs over a range of task indexes (the task list travels with the function)."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        return _run_task_batches(batches, payload)

    return run


_RESULT_SCHEMA = "stat string, peak_rss_kb long, task_seconds double, records_read long, requests string"


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


def _run_task_batches(batches: Iterable[pa.RecordBatch], payload: Sequence[str]) -> Iterable[pa.RecordBatch]:
    """Executor side of a job: task indexes in; out, one row per file written (its write stat JSON) and one per
    task (no stat: the task's run time, records read and object-store requests by kind as JSON), each with the
    Python worker's peak RSS so far (KiB)."""
    _idle_release.busy()
    _use_system_allocator()  # a worker Spark started after the warm-up (it replaces idle ones) was not warmed
    try:
        yield from _run_tasks(batches, payload)
    finally:
        _idle_release.idle()  # the worker may idle until the next job (a failed task's memory is released too)


def _run_tasks(batches: Iterable[pa.RecordBatch], payload: Sequence[str]) -> Iterable[pa.RecordBatch]:
    token = _task_context_token()
    _forget_zip_importers()  # for the next Spark task this worker runs
    storages: dict[str, Storage] = {}
    for batch in batches:
        rows: dict[str, list[Any]] = {
            "stat": [],
            "peak_rss_kb": [],
            "task_seconds": [],
            "records_read": [],
            "requests": [],
        }
        for index in batch.column(0).to_pylist():
            task = task_from_json(payload[index])
            opts = task.extra.get("storage_options", "{}")
            storage = storages.get(opts)
            if storage is None:
                storage = storages[opts] = Storage(StorageOptions(**json.loads(opts)) if opts != "{}" else None)
            started = time.monotonic()
            try:
                with counting_records() as records, counting(isolated=True) as requests:
                    written = run_task(storage, task, token)
            except TableServiceError as e:  # travels to the driver inside Spark's error text
                raise RuntimeError(encode_task_error(e, task.table_name)) from e
            measured = [(None, time.monotonic() - started, records.records, json.dumps(requests.counts()))]
            for stat, seconds, count, made in [
                *((w.model_dump_json(by_alias=True), 0.0, 0, None) for w in written),
                *measured,
            ]:
                rows["stat"].append(stat)
                rows["peak_rss_kb"].append(_peak_rss_kb())
                rows["task_seconds"].append(seconds)
                rows["records_read"].append(count)
                rows["requests"].append(made)
        yield pa.RecordBatch.from_pydict(
            {
                "stat": pa.array(rows["stat"], pa.string()),
                "peak_rss_kb": pa.array(rows["peak_rss_kb"], pa.int64()),
                "task_seconds": pa.array(rows["task_seconds"], pa.float64()),
                "records_read": pa.array(rows["records_read"], pa.int64()),
                "requests": pa.array(rows["requests"], pa.string()),
            }
        )


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
                **s.conf,
            }
            session = classic_session(options, s.jvm_log_level)
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
        with them)."""
        slots = self.task_slots() or 1
        self.session.range(0, slots, 1, slots).mapInArrow(_warm_worker, "pid long").collect()
        for _ in range(2):
            self.session.range(0, slots, 1, slots).mapInArrow(_no_task_results, _RESULT_SCHEMA).collect()

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
        with spark_job(spark, tag, description):
            # Task i is row i of a range: no shuffle, and each Spark task runs its share of the operations.
            df = spark.range(0, len(payload), 1, partitions)
            rows = df.mapInArrow(_task_worker(payload), _RESULT_SCHEMA).collect()
        peak = max((int(r["peak_rss_kb"]) for r in rows), default=0)
        self.last_peak_rss_kb = peak
        return JobResult(
            [HoodieWriteStat.model_validate_json(r["stat"]) for r in rows if r["stat"] is not None],
            executor_seconds=sum(float(r["task_seconds"]) for r in rows),
            records_read=sum(int(r["records_read"]) for r in rows),
            peak_rss_kb=peak,
            requests=task_requests(r["requests"] for r in rows),
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


_TASK_ERROR = re.compile(r"<tableservice-task-error>(.*?)</tableservice-task-error>", re.DOTALL)


def encode_task_error(error: TableServiceError, table: str) -> str:
    """A typed error of a task, as text that survives Spark's wrapping of worker exceptions."""
    fields = {
        "class": type(error).__name__,
        "problem": error.problem,
        "table": error.table or table,
        "path": error.path,
        "retryable": error.retryable,
    }
    return f"<tableservice-task-error>{json.dumps(fields)}</tableservice-task-error>"


def decode_task_error(text: str) -> TableServiceError | None:
    """The typed error a task raised, from the text of the Spark error that carried it (None: not ours)."""
    found = _TASK_ERROR.search(text)
    if found is None:
        return None
    try:
        fields = json.loads(found.group(1))
        cls = getattr(errors, str(fields["class"]), None)
        if not (isinstance(cls, type) and issubclass(cls, TableServiceError)):
            cls = RetryableError if fields.get("retryable") else PermanentError
        problem, table, path = str(fields["problem"]), fields.get("table"), fields.get("path")
    except (ValueError, KeyError, TypeError):
        return None
    error = cls.__new__(cls)
    TableServiceError.__init__(error, problem, table=table, path=path)
    return error


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
