"""The daemon starts Spark in the background: /readyz and the tables' passes do not wait for it, an action that
needs Spark waits for the start, and a start that fails holds back only the actions that need Spark (compaction
here) while clean goes on. The executors here never create a session (the run's one shared session is left
alone): their `_create_session` blocks or fails."""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from pyspark.sql import SparkSession

from tableservice.config import load_config
from tableservice.errors import SparkUnavailableError
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.models import decode_clean_metadata
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, State
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.service.daemon import Daemon
from tableservice.storage import Storage
from tests.support.daemon_helpers import with_pending_compaction
from tests.support.trip_tables import create_trip_table


class _SlowSpark(SparkExecutor):
    """A start that blocks until `release` is set, then fails: no session is ever made."""

    def __init__(self) -> None:
        super().__init__(SparkSettings(master="local[1]"))
        self.release = threading.Event()
        self.attempts = 0

    def _create_session(self) -> tuple[SparkSession, bool]:
        self.attempts += 1
        self.release.wait(60)
        raise RuntimeError("test: this spark never starts")

    def warm_up(self) -> None:
        raise AssertionError("no session to warm up")


def _cow_table(path: Path) -> str:
    create_trip_table(str(path), 9, TableType.COPY_ON_WRITE, name="cow")
    client = WriteClient(Storage(), str(path), options=WriteOptions(max_file_records=20))
    for step in Workload(60, 5, 0.5, 0.0, partitions=2, seed=4).steps():
        client.apply(step)
    return str(path)


def _data_files(path: str) -> set[str]:
    root = Path(path)
    return {
        str(p.relative_to(root))
        for p in root.rglob("*.parquet")
        if ".hoodie" not in p.relative_to(root).parts and not p.name.startswith(".")
    }


def _config(tmp_path: Path, tables: list[str]) -> str:
    entries = "\n".join(f"  - uri: {t}\n    name: table{i}" for i, t in enumerate(tables))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"""\
service:
  poll_interval_seconds: 0.3
  retry: {{initial_backoff_seconds: 1, max_backoff_seconds: 2, quarantine_after_failures: 3, quarantine_seconds: 60}}
  http: {{host: 127.0.0.1, port: 0}}
  history: {{enabled: false}}
spark:
  master: "local[1]"
defaults:
  clean:
    hoodie.cleaner.commits.retained: 1
  archival:
    hoodie.keep.min.commits: 20
    hoodie.keep.max.commits: 30
tables:
{entries}
""")
    return str(cfg)


def _get(port: int | None, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read().decode()


def _completed_clean(path: str) -> str | None:
    done = [i for i in HudiTable.open(Storage(), path).timeline().completed() if i.action is Action.CLEAN]
    return done[-1].requested_time if done else None


def _cleaned_files(path: str, instant: str) -> set[str]:
    """The files the clean's metadata says it deleted, relative to the table."""
    data = (Path(path) / ".hoodie" / "timeline").glob(f"{instant}_*.clean")
    md = decode_clean_metadata(next(iter(data)).read_bytes(), path=path)
    return {f"{p}/{Path(f).name}" for p, part in md.partition_metadata.items() for f in part.success_delete_files}


def _run(daemon: Daemon, until: Any, timeout: float = 60) -> dict[str, Any]:
    """Run the daemon until `until(daemon)` holds; returns what `until` gave, with /readyz and /status asked
    while Spark was still not up."""
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                await anyio.sleep(0.2)
                if daemon.http_port is None:
                    continue
                if "readyz" not in seen:
                    seen["readyz"] = await anyio.to_thread.run_sync(_get, daemon.http_port, "/readyz")
                found = await anyio.to_thread.run_sync(until, daemon)
                if found:
                    seen["until"] = found
                    break
            seen["spark_up"] = daemon.status()["spark_up"]
            daemon.request_stop()

    anyio.run(scenario)
    return seen


def test_readiness_and_a_clean_do_not_wait_for_a_slow_spark_start(tmp_path: Path) -> None:
    path = _cow_table(tmp_path / "cow")
    files_before = _data_files(path)
    executor = _SlowSpark()
    cfg = _config(tmp_path, [path])
    daemon = Daemon(cfg, load_config(cfg), executor=executor)

    def cleaned_while_starting(d: Daemon) -> tuple[str, bool] | None:
        instant = _completed_clean(path)
        if instant is None:
            return None
        starting = executor._starting_since is not None
        executor.release.set()  # let the start fail now: stopping the daemon waits for it
        return instant, starting

    try:
        seen = _run(daemon, cleaned_while_starting)
    finally:
        executor.release.set()
    assert seen["readyz"][0] == 200
    instant, still_starting = seen["until"]
    assert still_starting  # the clean completed while the Spark start was still blocked
    assert seen["spark_up"] is False
    gone = files_before - _data_files(path)
    assert gone == _cleaned_files(path, instant)
    assert gone, "the clean deleted nothing: the test would prove nothing"
    assert executor.attempts == 1


def test_a_failed_spark_start_holds_back_only_spark_actions(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    executor = _SlowSpark()
    executor.release.set()  # every start fails at once
    cow = _cow_table(tmp_path / "cow")
    mor, _, compaction = with_pending_compaction(tmp_path / "mor", executor, name="mor")
    files_before = _data_files(cow)
    cfg = _config(tmp_path, [cow, mor])
    daemon = Daemon(cfg, load_config(cfg), executor=executor)

    def cleaned_and_compaction_skipped(d: Daemon) -> str | None:
        skipped = any("compaction waits for spark" in r.getMessage() for r in caplog.records)
        return _completed_clean(cow) if skipped else None

    with caplog.at_level(logging.INFO):
        seen = _run(daemon, cleaned_and_compaction_skipped)
    instant = seen["until"]
    assert instant is not None
    assert seen["readyz"][0] == 200
    assert seen["spark_up"] is False
    assert _data_files(cow) == files_before - _cleaned_files(cow, instant)
    # The compaction is still requested, and the table is not failing for it: only the action waits.
    pending = HudiTable.open(Storage(), mor).timeline().pending()
    assert [(i.requested_time, i.state) for i in pending] == [(compaction.requested_time, State.REQUESTED)]
    statuses = {t["uri"]: t for t in daemon.status()["tables"]}
    assert statuses[mor]["consecutive_failures"] == 0
    assert statuses[mor]["health"] == "ok"
    assert isinstance(executor.unavailable(), SparkUnavailableError)
    assert any("spark did not start" in r.getMessage() for r in caplog.records)


def test_an_action_waits_for_a_start_under_way(caplog: pytest.LogCaptureFixture) -> None:
    """A second caller of `start` while a start runs waits for it and logs that it waits; a failed start is
    refused at once afterwards (no second attempt within START_RETRY_S)."""
    executor = _SlowSpark()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            executor.start()
        except SparkUnavailableError as e:
            errors.append(e)

    with caplog.at_level(logging.INFO):
        starter = threading.Thread(target=first)
        starter.start()
        while executor._starting_since is None:
            time.sleep(0.01)
        threading.Timer(0.3, executor.release.set).start()
        with pytest.raises(SparkUnavailableError) as waited:
            executor.start()
        starter.join(10)
        with pytest.raises(SparkUnavailableError):
            executor.start()
    assert executor.attempts == 1
    assert [str(e) for e in errors] == [str(waited.value)]
    assert "this spark never starts" in str(waited.value)
    assert any(r.getMessage().startswith("waiting for the spark session (local[1])") for r in caplog.records)
