"""Operator commands with `--config` take the lock the tables' writers take (a real ZooKeeper) and the executor
lease a daemon takes; without `--config` they say that their in-process lock excludes no other process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tableservice.cli import main
from tableservice.cli.operator import NO_CONFIG_NOTICE
from tableservice.config import load_config
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.locks import TableLock
from tableservice.locks.zookeeper import ZookeeperLockProvider
from tableservice.service.wiring import lock_provider
from tableservice.storage import Storage
from tests.support.daemon_helpers import config_text, mor_table
from tests.support.trip_tables import create_trip_table


def _zk_config(tmp_path: Path, server: Any, tables: list[str], key: str, *, only_locks: bool = False) -> Path:
    """A daemon's configuration of `tables` with a ZooKeeper lock (`only_locks`: a file with the lock only)."""
    cfg = tmp_path / f"{key}{'-locks' if only_locks else ''}.yaml"
    cfg.write_text(
        ("" if only_locks else config_text(tables, spark='master: "local[1]"'))
        + f"""locks:
  hoodie.write.lock.provider: zookeeper
  hoodie.write.lock.zookeeper.url: 127.0.0.1
  hoodie.write.lock.zookeeper.port: {server.port}
  hoodie.write.lock.zookeeper.base_path: /hudi/{key}
  hoodie.write.lock.zookeeper.session_timeout_ms: 6000
  hoodie.write.lock.wait_time_ms: 150000
"""
    )
    return cfg


def _writer_locks(cfg: Path) -> ZookeeperLockProvider:
    provider = lock_provider(load_config(str(cfg)).locks)
    assert isinstance(provider, ZookeeperLockProvider)
    return provider


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _contenders(provider: ZookeeperLockProvider, lock: TableLock) -> int:
    client = provider.connected_client(time.monotonic() + 10, lock.key)
    return len(client.get_children(lock.key))


def _pending(path: str) -> list[tuple[str, str, State]]:
    return [(i.requested_time, i.action.value, i.state) for i in HudiTable.open(Storage(), path).timeline().pending()]


def _instant(path: str, t: str) -> Instant:
    instant = HudiTable.open(Storage(), path).timeline().get(t)
    assert instant is not None, t
    return instant


def _written_at(path: str, instant: Instant) -> float:
    """When the instant's file was written, allowing for the file system's coarse clock (a few milliseconds)."""
    return os.stat(HudiTable.open(Storage(), path).active.path_of(instant)).st_mtime + 0.02


def _main_in_thread(argv: list[str]) -> tuple[threading.Thread, list[int]]:
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(main(argv)))
    thread.start()
    return thread, codes


def _cow_table_to_clean(path: str) -> str:
    create_trip_table(path, 9, TableType.COPY_ON_WRITE, name="c")
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=100))
    for step in Workload(200, 4, 0.5, 0.0, partitions=1).steps():
        client.apply(step)
    return path


def test_without_config_the_notice_is_printed_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mor_table(tmp_path / "t", records=100, commits=2)
    assert main(["compact", "schedule", path]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [NO_CONFIG_NOTICE]
    assert captured.out.startswith("scheduled compaction ")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([path]))
    assert main(["compact", "schedule", "--config", str(cfg), path]) == 0
    captured = capsys.readouterr()
    assert NO_CONFIG_NOTICE not in captured.err
    pending = HudiTable.open(Storage(), path).timeline().pending_compactions().instants[0].requested_time
    assert captured.out == (  # all slices with log files are in the pending plan: it says so, and what to run
        f"nothing to compact: compaction {pending} (requested) is pending and holds the file slices it names "
        "(run it: `tableservice compact run`); no other file slice has log files\n"
    )


@pytest.mark.zookeeper
def test_a_run_refuses_a_plan_whose_executor_lease_another_process_holds(
    tmp_path: Path, zk_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = mor_table(tmp_path / "t", records=150, commits=3)
    other = mor_table(tmp_path / "u", records=200, commits=2, max_file_records=30, name="u")
    cfg = _zk_config(tmp_path, zk_server, [path, other], "lease")
    assert main(["compact", "schedule", "--config", str(cfg), path]) == 0
    assert main(["cluster", "schedule", "--config", str(cfg), other]) == 0
    capsys.readouterr()
    [(compaction, action, state)] = _pending(path)
    assert (action, state) == ("compaction", State.REQUESTED)
    [(clustering, action, state)] = _pending(other)
    assert (action, state) == ("clustering", State.REQUESTED)
    timelines = [tmp_path / name / ".hoodie" / "timeline" for name in ("t", "u")]
    before = {p: p.read_bytes() for folder in timelines for p in folder.iterdir() if p.is_file()}
    daemon = _writer_locks(cfg)  # as a daemon replica executing both plans
    try:
        leases = [
            daemon.lease("t", path, f"compaction-{compaction}"),
            daemon.lease("u", other, f"clustering-{clustering}"),
        ]
        handles = [lease.acquire(10) for lease in leases]
        for service, action, name, label, table, t in (
            ("compact", "compaction", "t", "table0", path, compaction),
            ("cluster", "clustering", "u", "table1", other, clustering),
        ):
            assert main([service, "run", "--config", str(cfg), table]) == 1
            err = capsys.readouterr().err
            key = f"/hudi/lease/tableservice-leases/{name}/{action}-{t}"
            assert err.splitlines() == [
                f"tableservice: busy: not running {action} {t}: another process holds its executor lease "
                f"{key!r} | table={label}"
            ]
        assert main(["compact", "run", "--config", str(cfg), path, "--instant", compaction]) == 1
        assert f"not running compaction {compaction}" in capsys.readouterr().err
        for lease, handle in zip(leases, handles, strict=True):
            lease.release(handle)
    finally:
        daemon.close()
    assert [i[0] for i in _pending(path)] == [compaction] and [i[0] for i in _pending(other)] == [clustering]
    assert {p: p.read_bytes() for folder in timelines for p in folder.iterdir() if p.is_file()} == before


@pytest.mark.zookeeper
def test_clean_and_clustering_schedule_wait_for_a_writer_holding_the_table_lock(
    tmp_path: Path, zk_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cow = _cow_table_to_clean(str(tmp_path / "c"))
    cfg = _zk_config(tmp_path, zk_server, [cow], "clean")
    assert main(["clean", "schedule", "--config", str(cfg), cow, "-o", "hoodie.cleaner.commits.retained=1"]) == 0
    [(t, action, _)] = _pending(cow)
    assert action == "clean"
    writer = _writer_locks(cfg)
    try:
        lock = writer.table_lock("c", cow)
        handle = lock.acquire(10)
        thread, codes = _main_in_thread(["clean", "run", "--execute", "--config", str(cfg), cow])
        _wait_for(lambda: _contenders(writer, lock) == 2, 60, "clean run to wait for the table lock")
        time.sleep(1.0)
        assert thread.is_alive() and not _instant(cow, t).is_completed
        released = time.time()
        lock.release(handle)
        thread.join(120)
        assert codes == [0]
        done = _instant(cow, t)
        assert done.is_completed and _written_at(cow, done) >= released
        assert f"completed clean {t}: " in capsys.readouterr().out

        mor = mor_table(tmp_path / "m", records=150, commits=2, max_file_records=30, name="m")
        cfg_m = _zk_config(tmp_path, zk_server, [], "clean", only_locks=True)  # the same lock, no tables
        lock_m = writer.table_lock("m", mor)
        handle = lock_m.acquire(10)
        thread, codes = _main_in_thread(["cluster", "schedule", "--config", str(cfg_m), mor])
        _wait_for(lambda: _contenders(writer, lock_m) == 2, 60, "cluster schedule to wait for the table lock")
        time.sleep(1.0)
        assert thread.is_alive() and _pending(mor) == []
        released = time.time()
        lock_m.release(handle)
        thread.join(120)
        assert codes == [0]
        [(tc, action, state)] = _pending(mor)
        assert (action, state) == ("clustering", State.REQUESTED)
        assert _written_at(mor, _instant(mor, tc)) >= released
    finally:
        writer.close()


@pytest.mark.zookeeper
@pytest.mark.spark
def test_compact_run_waits_for_a_writer_holding_the_table_lock(
    tmp_path: Path, zk_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = mor_table(tmp_path / "t", records=200, commits=3)
    cfg = _zk_config(tmp_path, zk_server, [path], "writer")
    assert main(["compact", "schedule", "--config", str(cfg), path]) == 0
    [(t, action, _)] = _pending(path)
    assert action == "compaction"
    writer = _writer_locks(cfg)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    try:
        lock = writer.table_lock("t", path)
        handle = lock.acquire(10)
        proc = subprocess.Popen(
            [sys.executable, "-m", "tableservice", "compact", "run", "--config", str(cfg), path],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # The Spark job runs without the lock; the commit then waits for the writer.
            _wait_for(lambda: _contenders(writer, lock) == 2 or proc.poll() is not None, 300, "the commit to wait")
            time.sleep(2.0)
            assert proc.poll() is None and _instant(path, t).state is State.INFLIGHT
            released = time.time()
            lock.release(handle)
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        writer.close()
    assert proc.returncode == 0, err
    assert NO_CONFIG_NOTICE not in err
    assert f"completed compaction {t}: " in out
    done = _instant(path, t)
    assert done.is_completed and done.action is Action.COMPACTION
    assert _written_at(path, done) >= released


@pytest.mark.zookeeper
def test_a_tables_locks_override_is_taken_when_named_by_its_configured_name(
    tmp_path: Path, zk_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = mor_table(tmp_path / "t", records=100, commits=2)
    cfg = _zk_config(tmp_path, zk_server, [], "override", only_locks=True)
    cfg.write_text(
        f"tables:\n  - uri: {path}\n    name: trips\n    locks:\n"
        "      hoodie.write.lock.zookeeper.lock_key: special\n" + cfg.read_text()
    )
    assert main(["compact", "schedule", "--config", str(cfg), "trips"]) == 0
    [(t, _, _)] = _pending(path)
    config = load_config(str(cfg))
    entry = config.table(path)
    assert entry is not None
    daemon = lock_provider(config.effective_locks(entry))
    try:
        lease = daemon.lease("t", path, f"compaction-{t}")
        assert lease.key == f"/hudi/override/tableservice-leases/special/compaction-{t}"
        handle = lease.acquire(10)
        capsys.readouterr()
        assert main(["compact", "run", "--config", str(cfg), "trips"]) == 1
        assert f"executor lease {lease.key!r} | table=trips" in capsys.readouterr().err
        lease.release(handle)
    finally:
        daemon.close()
    assert [i[0] for i in _pending(path)] == [t]
