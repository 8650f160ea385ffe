"""The daemon beside a writer, both on the same real ZooKeeper lock, and two daemon replicas with ZooKeeper
leases on the same tables."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tableservice.config import load_config
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import TRIP_SCHEMA, Workload
from tableservice.locks.zookeeper import ZookeeperLockProvider
from tableservice.service.daemon import Daemon
from tableservice.service.wiring import lock_provider
from tableservice.storage import Storage
from tests.support.daemon_helpers import config_text, mor_table
from tests.support.oracle import hudi_read
from tests.support.table_model import TableModel, table_rows
from tests.support.trip_tables import create_trip_table

pytestmark = [pytest.mark.spark, pytest.mark.zookeeper, pytest.mark.oracle]


def _zk_locks(server: Any, key: str) -> str:
    return f"""locks:
  hoodie.write.lock.provider: zookeeper
  hoodie.write.lock.zookeeper.url: 127.0.0.1
  hoodie.write.lock.zookeeper.port: {server.port}
  hoodie.write.lock.zookeeper.base_path: /hudi/{key}
  hoodie.write.lock.zookeeper.session_timeout_ms: 4000
  hoodie.write.lock.wait_time_ms: 5000
"""


def _compactions(path: str) -> list[str]:
    return [
        i.requested_time
        for i in HudiTable.open(Storage(), path).timeline().completed()
        if i.action is Action.COMPACTION
    ]


def test_writer_and_daemon_share_the_zookeeper_lock(tmp_path: Path, spark_executor: Any, zk_server: Any) -> None:
    # One workload: its first two steps make the table, the writer applies the rest beside the daemon.
    steps = list(Workload(2000, 10, 0.15, 0.02, partitions=2, seed=7).steps())
    path = str(tmp_path / "t")
    create_trip_table(path, 9, TableType.MERGE_ON_READ)
    model = TableModel("uuid", "city", "ts", event_time=True)
    first = WriteClient(Storage(), path, options=WriteOptions(max_file_records=400))
    for step in steps[:2]:
        first.apply(step)
        model.upsert(step.records)
        if step.deletes is not None:
            model.delete(step.deletes)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([path], max_delta_commits=2, poll=0.3) + _zk_locks(zk_server, "w"))
    config = load_config(str(cfg))
    daemon = Daemon(str(cfg), config, executor=spark_executor)
    writer_locks = lock_provider(config.locks)
    assert isinstance(writer_locks, ZookeeperLockProvider)
    table_lock = writer_locks.table_lock("t", path)
    writes: list[str] = []
    errors: list[BaseException] = []

    def writer() -> None:
        client = WriteClient(
            Storage(), path, lock=lambda: table_lock.hold(10.0), options=WriteOptions(max_file_records=400)
        )
        try:
            for step in steps[2:]:
                writes.append(client.apply(step).instant_time)
                model.upsert(step.records)
                if step.deletes is not None:
                    model.delete(step.deletes)
                time.sleep(1.0)
        except BaseException as e:  # reported below
            errors.append(e)

    async def scenario() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not any(t.worker.status.last_poll for t in daemon.tables.values()):
                await anyio.sleep(0.2)
            thread = threading.Thread(target=writer)
            thread.start()
            await anyio.to_thread.run_sync(thread.join)
            finished = time.time()
            # Let the daemon finish what the last writes made due.
            while time.monotonic() < deadline:
                polled = all((t.worker.status.last_poll or 0) > finished + 1 for t in daemon.tables.values())
                table = HudiTable.open(Storage(), path)
                if polled and not table.timeline().pending() and len(daemon.running) == 0:
                    break
                await anyio.sleep(0.5)
            daemon.request_stop()

    try:
        anyio.run(scenario)
    finally:
        writer_locks.close()
    assert not errors, errors
    assert len(writes) == 8
    statuses = [t.worker.status.to_json() for t in daemon.tables.values()]
    assert len(_compactions(path)) >= 2, f"the daemon compacted while the writer was writing: {statuses}"
    columns = TRIP_SCHEMA.names
    assert table_rows(hudi_read(path), columns, "uuid", "city") == model.snapshot(columns)


def test_two_daemon_replicas_execute_each_action_once(tmp_path: Path, spark_executor: Any, zk_server: Any) -> None:
    tables = [mor_table(tmp_path / f"t{i}", records=300, commits=4, seed=i, name=f"t{i}") for i in range(2)]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text(tables, max_delta_commits=2, poll=0.2) + _zk_locks(zk_server, "r"))
    replicas = [Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor) for _ in range(2)]
    completed: list[int] = []

    async def scenario() -> None:
        async with anyio.create_task_group() as tg:
            for d in replicas:
                tg.start_soon(d.run)
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                await anyio.sleep(0.5)
                if all(_compactions(t) for t in tables) and not any(len(d.running) for d in replicas):
                    break
            await anyio.sleep(2)  # more polls by both replicas: nothing may run twice
            for d in replicas:
                d.request_stop()

    anyio.run(scenario)
    for t in tables:
        assert len(_compactions(t)) == 1, t
        timeline = HudiTable.open(Storage(), t).timeline()
        assert not timeline.pending()
        assert not [i for i in timeline if i.action is Action.ROLLBACK]
    for d in replicas:
        text = d.metrics.render()[0].decode()
        completed.extend(
            int(float(line.rsplit(" ", 1)[1]))
            for line in text.splitlines()
            if line.startswith("tableservice_actions_completed_total{") and 'action="compaction"' in line
        )
    assert sum(completed) == len(tables)


def test_killed_replica_action_is_completed_by_the_other_after_the_lease(
    tmp_path: Path, spark_executor: Any, zk_server: Any
) -> None:
    import os
    import signal
    import subprocess
    import sys

    from tableservice.service.table_worker import TableWorker
    from tableservice.service.wiring import table_settings
    from tests.support.oracle import assert_same_rows

    path = mor_table(tmp_path / "t", records=120_000, commits=3, max_file_records=15_000)
    before = hudi_read(path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([path], max_delta_commits=1, poll=0.3) + _zk_locks(zk_server, "k"))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tableservice", "run", "--config", str(cfg)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            pending = _pending_compactions(path)
            if pending and any(p.name.endswith(f"_{pending[0]}.parquet") for p in Path(path).rglob("*.parquet")):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("replica A never started writing compacted files")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    pending = _pending_compactions(path)
    assert len(pending) == 1
    config = load_config(str(cfg))
    locks = lock_provider(config.locks)
    try:
        worker = TableWorker(table_settings(config, config.tables[0]), Storage(), locks, spark_executor)
        started = time.monotonic()
        while time.monotonic() - started < 120 and not _compactions(path):
            worker.run_pass(allow_schedule=False)  # skipped while replica A's lease (its session) lives
            time.sleep(0.5)
        took_over_after = time.monotonic() - started
    finally:
        locks.close()
    assert _compactions(path) == pending
    assert took_over_after > 1.0  # replica A's ZooKeeper session had to expire first
    rollbacks = [i for i in HudiTable.open(Storage(), path).timeline() if i.action is Action.ROLLBACK]
    assert len(rollbacks) == 1 and rollbacks[0].is_completed
    assert_same_rows(
        hudi_read(path).drop_columns(["_hoodie_file_name"]),
        before.drop_columns(["_hoodie_file_name"]),
        "after takeover",
    )


def _pending_compactions(path: str) -> list[str]:
    return [
        i.requested_time for i in HudiTable.open(Storage(), path).timeline().pending() if i.action is Action.COMPACTION
    ]


def test_a_table_lock_override_is_the_lock_its_worker_takes(tmp_path: Path, zk_server: Any) -> None:
    """A table whose `locks` override names another lock key gets a provider for those settings: while a writer
    holds `<base>/orders_lock`, the daemon's worker for that table cannot take its table lock, and the other
    table's lock stays free."""
    from tableservice.errors import LockError
    from tableservice.service.wiring import LockProviders

    a, b = mor_table(tmp_path / "a", records=50, commits=1, name="a"), mor_table(tmp_path / "b", records=50, commits=1)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"""{_zk_locks(zk_server, "o")}tables:
  - uri: {a}
  - uri: {b}
    locks:
      hoodie.write.lock.zookeeper.lock_key: orders_lock
"""
    )
    config = load_config(str(cfg))
    writer = lock_provider(config.effective_locks(b))
    daemon_side = LockProviders()
    try:
        held = writer.table_lock("t", b)
        assert held.key == "/hudi/o/orders_lock"
        handle = held.acquire(5)
        try:
            lock_b = daemon_side.for_table(config, b).table_lock("t", b)
            assert lock_b.key == held.key
            with pytest.raises(LockError):
                lock_b.acquire(1.0)
            lock_a = daemon_side.for_table(config, a).table_lock("a", a)
            assert lock_a.key == "/hudi/o/a"
            lock_a.release(lock_a.acquire(5))
        finally:
            held.release(handle)
        assert daemon_side.for_table(config, a) is daemon_side.for_table(config, str(tmp_path / "unlisted"))
        assert daemon_side.for_table(config, a) is not daemon_side.for_table(config, b)
    finally:
        daemon_side.close()
        writer.close()
