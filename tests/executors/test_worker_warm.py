"""What a Python worker does ahead of its tasks: imports paid at warm-up, no zip directory re-read per Spark task."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
import zipfile
import zipimport
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tableservice.executors import worker
from tableservice.executors.worker import _forget_zip_importers


def _zip_importers(archive: Path) -> list[str]:
    return [
        path
        for path, finder in sys.path_importer_cache.items()
        if isinstance(finder, zipimport.zipimporter) and path.startswith(str(archive))
    ]


def test_zip_importers_are_forgotten_and_imports_still_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "libs.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zpkg_warm/__init__.py", "")
        z.writestr("zpkg_warm/first.py", "VALUE = 'first'\n")
        z.writestr("zpkg_warm/second.py", "VALUE = 'second'\n")
    monkeypatch.syspath_prepend(str(archive))
    try:
        assert importlib.import_module("zpkg_warm.first").VALUE == "first"
        # the archive and its package each got an importer
        assert sorted(_zip_importers(archive)) == [str(archive), str(archive / "zpkg_warm")]
        _forget_zip_importers()
        assert _zip_importers(archive) == []
        importlib.invalidate_caches()  # what PySpark's worker calls before each task: nothing to re-read now
        assert importlib.import_module("zpkg_warm.second").VALUE == "second"  # a new importer when needed
    finally:
        for name in ("zpkg_warm", "zpkg_warm.first", "zpkg_warm.second"):
            sys.modules.pop(name, None)


def test_warm_worker_pays_pyarrows_pandas_import(tmp_path: Path) -> None:
    code = (
        "import os, sys, pyarrow as pa\n"
        "from tableservice.executors.worker import warm_worker\n"
        "assert 'pandas' not in sys.modules\n"
        "out = list(warm_worker([pa.RecordBatch.from_pydict({'id': [0, 1]})]))\n"
        "print(out[0].column(0).to_pylist() == [os.getpid()] * 2, 'pandas' in sys.modules,\n"
        "      'tableservice.hudi.file_group.bloom' in sys.modules, pa.default_memory_pool().backend_name)\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, env=env
    )
    # the kernels ran on a temporary file, gone afterwards; Arrow's buffers now come from glibc's malloc
    assert done.stdout.split() == ["True", "True", "True", "system"]
    assert list(tmp_path.iterdir()) == []


def test_warm_worker_keeps_a_memory_pool_named_in_the_environment() -> None:
    code = (
        "import pyarrow as pa\n"
        "from tableservice.executors.worker import warm_worker\n"
        "list(warm_worker([pa.RecordBatch.from_pydict({'id': [0]})]))\n"
        "print(pa.default_memory_pool().backend_name)\n"
    )
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, env=env
    )
    assert done.stdout.split() == ["jemalloc"]


def test_a_worker_releases_memory_once_idle_not_between_back_to_back_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    released: list[float] = []
    monkeypatch.setattr(worker, "_release_unused_memory", lambda: released.append(time.monotonic()))
    monkeypatch.setattr(worker, "RELEASE_AFTER_IDLE_SECONDS", 0.2)
    idle = worker._IdleRelease()
    idle.idle()
    idle.busy()  # the next task came at once
    time.sleep(0.4)
    assert released == []
    started = time.monotonic()
    idle.idle()
    deadline = started + 10  # the timer's thread may be late on a busy machine; never early
    while not released and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # and once only
    assert len(released) == 1 and released[0] - started >= 0.2


def test_a_warm_up_whose_kernels_fail_still_starts_the_worker() -> None:
    """Warming the kernels writes a temporary Parquet file: where that fails (a full or read-only TMPDIR) the worker
    still answers the warm-up (Spark counts as up), on the system allocator, and says why in its log."""
    code = (
        "import logging, sys\n"
        "import pyarrow as pa\n"
        "import tableservice.hudi.action.warm as warm\n"
        "def broken():\n"
        "    raise OSError(28, 'No space left on device')\n"
        "warm.warm_kernels = broken\n"
        "logging.basicConfig(stream=sys.stdout, format='%(levelname)s %(message)s')\n"
        "from tableservice.executors.worker import warm_worker\n"
        "out = list(warm_worker([pa.RecordBatch.from_pydict({'id': [0, 1]})]))\n"
        "print(out[0].num_rows, pa.default_memory_pool().backend_name)\n"
    )
    lines = _python_without_pool_setting(code).strip().splitlines()
    assert lines[0] == "WARNING warming the worker's kernels failed: [Errno 28] No space left on device"
    assert lines[-1] == "2 system"


def test_tasks_run_on_the_system_allocator_in_a_worker_never_warmed() -> None:
    """A Python worker Spark starts later (replacing an idle one) runs tasks without a warm-up: they switch it."""
    code = (
        "import pyarrow as pa\n"
        "from tableservice.executors.task_shares import TaskShares\n"
        "from tableservice.executors.worker import _run_task_batches\n"
        "print(pa.default_memory_pool().backend_name)\n"
        "list(_run_task_batches([], [], TaskShares(0, 1)))\n"
        "print(pa.default_memory_pool().backend_name)\n"
    )
    before, after = _python_without_pool_setting(code).split()
    assert (before != "system", after) == (True, "system")  # pyarrow's build default (mimalloc here), then glibc


def _python_without_pool_setting(code: str) -> str:
    """What `code` prints in a fresh interpreter (a fresh Python worker) with pyarrow's default memory pool."""
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, env=env
    )
    return done.stdout


def test_warm_worker_freezes_the_long_lived_objects_once(tmp_path: Path) -> None:
    """After the warm-up, the objects alive then (imports) are out of the collector's generations, so that PySpark's
    `gc.collect()` after each Spark task does not walk them; a later task does not freeze again."""
    code = (
        "import gc, json, pyarrow as pa\n"
        "from tableservice.executors import worker\n"
        "before = len(gc.get_objects())\n"
        "list(worker.warm_worker([pa.RecordBatch.from_pydict({'id': [0]})]))\n"
        "frozen, tracked = gc.get_freeze_count(), len(gc.get_objects())\n"
        "worker._freeze_long_lived_objects()\n"
        "print(json.dumps([before, frozen, tracked, gc.get_freeze_count()]))\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, env=env
    )
    before, frozen, tracked, frozen_again = json.loads(done.stdout.strip().splitlines()[-1])
    assert frozen >= before  # everything alive before the warm-up, and what it imported
    assert tracked < before // 20  # the generations hold only what was made after the freeze
    assert frozen_again == frozen


@pytest.mark.spark
def test_python_workers_allocate_every_arrow_buffer_from_glibc(spark_executor: Any) -> None:
    """Arrow's C++ default pool is the system one in the workers (set through their environment), so no buffer is
    kept by mimalloc past the idle release: the variable is there, and nothing these workers ran took memory from
    mimalloc (the warm-up's kernels alone take 0.5 MB from it when it is Arrow's default)."""
    spark_executor.warm_up()

    def report(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import os

        import pyarrow as pa

        for b in batches:
            n = b.num_rows
            yield pa.RecordBatch.from_pydict(
                {
                    "pool": [os.environ.get("ARROW_DEFAULT_MEMORY_POOL")] * n,
                    "mimalloc": [pa.mimalloc_memory_pool().max_memory()] * n,
                }
            )

    rows = spark_executor.session.range(0, 2, 1, 2).mapInArrow(report, "pool string, mimalloc long").collect()
    assert [(r["pool"], r["mimalloc"]) for r in rows] == [("system", 0), ("system", 0)]
