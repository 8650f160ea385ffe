"""What runs inside Spark's Python workers: the tasks of a job (each a self-contained JSON description, run by the
format layer), the warm-up that pays a worker's one-time costs, the worker's memory (allocator, idle release), and
the typed errors that travel back to the driver inside Spark's error text. Nothing here imports pyspark: the
driver side (`spark.py`) ships these functions with `mapInArrow`."""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa

from tableservice import errors
from tableservice.errors import PermanentError, RetryableError, TableServiceError
from tableservice.executors.task_shares import TaskShares
from tableservice.hudi.action.tasks import run_task, task_from_json
from tableservice.hudi.file_group.records_read import counting_records
from tableservice.storage import Storage, StorageOptions
from tableservice.storage.requests import counting

log = logging.getLogger(__name__)


def _task_context() -> tuple[int, str]:
    """The running Spark task's partition and `<partitionId>-<stageId>-<attemptNumber>` (Hudi's write token)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, "0-0-0"
    return ctx.partitionId(), f"{ctx.partitionId()}-{ctx.stageId()}-{ctx.attemptNumber()}"


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


def _use_system_allocator() -> None:
    """Arrow buffers from glibc's malloc (Arrow's system pool) unless ARROW_DEFAULT_MEMORY_POOL names a pool.
    pyarrow's default, mimalloc, served a worker's first clustering group (500k rows) with 0.4-0.8 system CPU s
    more than later groups (huge pages faulted in); glibc: 0.1-0.2 s, and no more user time. Buffers already
    allocated go back to the pool they came from. This sets the pool pyarrow's calls use; Arrow's C++ code takes its
    own default from the environment the process started with, which the driver sets (`spark.WORKER_ENV`)."""
    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        pa.set_memory_pool(pa.system_memory_pool())


def _release_unused_memory() -> None:
    """Give the memory Arrow's pool keeps cached back to the OS (`malloc_trim` for glibc): about 10-20 ms after a
    clustering group of 500k rows, RSS back from about 450 to 150 MiB."""
    pa.default_memory_pool().release_unused()


_frozen = False


def _freeze_long_lived_objects() -> None:
    """Move the objects alive now (imported modules, their functions and classes: about 100k in a worker that
    imported the format layer, pyarrow and PySpark) out of the garbage collector's reach, once per worker process
    (`gc.freeze`). PySpark's daemon runs a full `gc.collect()` after every Spark task of a reused worker: it took
    50-60 ms of CPU per Spark task walking these objects, which never become garbage. Garbage first: a collection
    before the freeze."""
    global _frozen
    if _frozen:
        return
    gc.collect()
    gc.freeze()
    _frozen = True


RELEASE_AFTER_IDLE_SECONDS = 30.0


class _IdleRelease:
    """Releases a worker's cached memory once it has run no Spark task for `RELEASE_AFTER_IDLE_SECONDS`: an idle
    worker does not keep a task's peak resident, and a job that follows within that time (actions come in bursts:
    one poll tick finds several tables due) reuses what glibc kept instead of faulting it in again. glibc gives some
    back by itself (blocks above its mmap threshold, a large free top of the heap): in one process, a 500k-row
    clustering group right after another faulted 10-23k pages in, one after a release 43-50k. The peak is the same
    either way. Faulting it in again cost about 0.1 system CPU s per clustering group of 500k rows, and, with
    5 s, `bench.compaction` (jobs 12 s apart) measured `local[2]` at 2.40 and 2.65 s against 2.19 s with 30 s."""

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


def warm_worker(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    from tableservice.hudi.action.warm import warm_kernels

    _use_system_allocator()
    # pyarrow imports pandas (about 0.3 CPU s) the first time it converts a Python value (`pa.scalar`, which
    # `fill_null` and the merge use): pay it here, not in the first task of the worker.
    pa.scalar(False, pa.bool_())
    try:
        warm_kernels()
    except Exception as e:  # only speed is lost: the first tasks pay what the warm-up would have (a full TMPDIR...)
        log.warning("warming the worker's kernels failed: %s", e)
    _release_unused_memory()
    _forget_zip_importers()
    _freeze_long_lived_objects()
    for batch in batches:
        yield pa.RecordBatch.from_pydict({"pid": pa.array([os.getpid()] * batch.num_rows, pa.int64())})


RESULT_SCHEMA = pa.schema(
    [
        ("task", pa.int64()),
        ("stat", pa.string()),
        ("peak_rss_kb", pa.int64()),
        ("task_seconds", pa.float64()),
        ("records_read", pa.int64()),
        ("requests", pa.string()),
    ]
)
"""The rows a job's tasks return. The driver hands Spark this schema as a struct type, not as DDL text: Spark parses
DDL text with its SQL parser on every job: on trivial jobs (16 rows, two partitions), a median of 75 ms of driver JVM
CPU per job with the text against 66 ms with the struct type (six blocks of ten jobs each way, alternating)."""


# What a settling job returns for a task: a text the length of a real write stat's JSON (about 1 KB). The driver
# JVM then compiles the path real results take (non-null strings of that size, collected), not that of nulls.
_SAMPLE_STAT = '{"fileId":"' + "0" * 36 + '-0","path":"' + "p" * 120 + '","numWrites":125000}' + " " * 900


def no_task_results(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    """Rows shaped like a task's measurements (`_run_task_batches`), one per input row, for nothing run: a write
    stat's worth of text in `stat` (the caller discards the rows)."""
    for batch in batches:
        n = batch.num_rows
        yield pa.RecordBatch.from_pydict(
            {
                "task": batch.column(0).cast(pa.int64()),
                "stat": [_SAMPLE_STAT] * n,
                "peak_rss_kb": [_peak_rss_kb()] * n,
                "task_seconds": [0.0] * n,
                "records_read": [0] * n,
                "requests": ["{}"] * n,
            },
            schema=RESULT_SCHEMA,
        )


def task_worker(
    payload: Sequence[str], shares: TaskShares
) -> Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]:
    """The function Spark runs over a range of task indexes (the task list travels with the function); `shares`:
    how the partitions share the tasks."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        return _run_task_batches(batches, payload, shares)

    return run


def _run_task_batches(
    batches: Iterable[pa.RecordBatch], payload: Sequence[str], shares: TaskShares
) -> Iterable[pa.RecordBatch]:
    """Executor side of a job: task indexes in; out, per task run, one row per file written (its write stat JSON)
    and one for the task (no stat: the task's run time, records read and object-store requests by kind as JSON),
    each with the task's index and the Python worker's peak RSS so far (KiB)."""
    _idle_release.busy()
    _use_system_allocator()  # a worker Spark started after the warm-up (it replaces idle ones) was not warmed
    _freeze_long_lived_objects()
    try:
        yield from _run_tasks(batches, payload, shares)
    finally:
        _idle_release.idle()  # the worker may idle until the next job (a failed task's memory is released too)


def _run_tasks(
    batches: Iterable[pa.RecordBatch], payload: Sequence[str], shares: TaskShares
) -> Iterable[pa.RecordBatch]:
    partition, token = _task_context()
    _forget_zip_importers()  # for the next Spark task this worker runs
    storages: dict[str, Storage] = {}
    own = [index for batch in batches for index in batch.column(0).to_pylist()]  # a few ints: read them all first
    for index in shares.runs(partition, own):
        rows: dict[str, list[Any]] = {name: [] for name in RESULT_SCHEMA.names}
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
            rows["task"].append(index)
            rows["stat"].append(stat)
            rows["peak_rss_kb"].append(_peak_rss_kb())
            rows["task_seconds"].append(seconds)
            rows["records_read"].append(count)
            rows["requests"].append(made)
        yield pa.RecordBatch.from_pydict(rows, schema=RESULT_SCHEMA)


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
