"""Executor leases: an action whose lease another replica holds is skipped, and runs once the lease is free."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.locks import InProcessLockProvider
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.actions import TableContext
from tableservice.service.compaction import schedule_compaction
from tableservice.service.protocol import ServiceSettings
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table


def _worker(path: str, executor: Any, locks: InProcessLockProvider) -> TableWorker:
    settings = TableSettings(
        uri=path, name="t", compaction=ServiceSettings(CompactionPolicy(), schedule=False, execute=True)
    )
    return TableWorker(settings, Storage(), locks, executor)


@pytest.mark.spark
def test_compaction_runs_once_across_replicas(tmp_path: Path, spark_executor: Any) -> None:
    path = mor_table(tmp_path / "t", records=300, commits=3)
    locks = InProcessLockProvider()
    table = HudiTable.open(Storage(), path)
    ctx = TableContext(table=table, lock=locks.table_lock("t", path), executor=spark_executor)
    instant = schedule_compaction(ctx, CompactionPolicy(), force=True)
    assert instant is not None
    lease = locks.lease("t", path, f"compaction-{instant.requested_time}")
    held = lease.acquire(1.0)
    skipped = _worker(path, spark_executor, locks).run_pass()
    assert not skipped.completed and not skipped.failed
    assert HudiTable.open(Storage(), path).timeline().get(instant.requested_time) == instant
    lease.release(held)
    # Two replicas at once: exactly one of them completes the compaction.
    results: list[Any] = []
    replicas = [
        threading.Thread(target=lambda: results.append(_worker(path, spark_executor, locks).run_pass()))
        for _ in range(2)
    ]
    for r in replicas:
        r.start()
    for r in replicas:
        r.join()
    assert sum(len(r.completed) for r in results) == 1
    assert len(results) == 2, "both replicas finished their pass"
    assert [c.instant.requested_time for r in results for c in r.completed] == [instant.requested_time]
    assert all(not r.failed for r in results)
    done = [i for i in HudiTable.open(Storage(), path).timeline().completed() if i.action is Action.COMPACTION]
    assert [i.requested_time for i in done] == [instant.requested_time]


@pytest.mark.spark
@pytest.mark.moto
def test_two_replicas_with_dynamodb_leases_run_a_compaction_once(
    tmp_path: Path, spark_executor: Any, moto: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas, each with its own DynamoDB lock provider (as two pods would have), on one table."""
    from tableservice.config import LockSettings
    from tableservice.locks.dynamodb import DynamoDBLockProvider

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto.secret_access_key)
    settings = LockSettings.model_validate(
        {
            "hoodie.write.lock.provider": "dynamodb",
            "hoodie.write.lock.dynamodb.table": f"locks-{tmp_path.name[-8:]}",
            "hoodie.write.lock.dynamodb.region": "us-east-1",
            "hoodie.write.lock.dynamodb.endpoint_url": moto.endpoint_url,
            "hoodie.write.lock.wait_time_ms": 3000,
        }
    )
    providers = [DynamoDBLockProvider(settings) for _ in range(2)]
    path = mor_table(tmp_path / "t", records=300, commits=3)
    table = HudiTable.open(Storage(), path)
    ctx = TableContext(table=table, lock=providers[0].table_lock("t", path), executor=spark_executor)
    instant = schedule_compaction(ctx, CompactionPolicy(), force=True)
    assert instant is not None
    results: list[Any] = []
    settings_ = TableSettings(
        uri=path,
        name="t",
        compaction=ServiceSettings(CompactionPolicy(), schedule=False, execute=True),
        lock_timeout_s=6,
    )
    replicas = [
        threading.Thread(
            target=lambda p=p: results.append(TableWorker(settings_, Storage(), p, spark_executor).run_pass())
        )
        for p in providers
    ]
    try:
        for r in replicas:
            r.start()
        for r in replicas:
            r.join()
    finally:
        for p in providers:
            p.close()
    assert sum(len(r.completed) for r in results) == 1
    assert len(results) == 2, "both replicas finished their pass"
    assert [c.instant.requested_time for r in results for c in r.completed] == [instant.requested_time]
    assert all(not r.failed for r in results)
    assert HudiTable.open(Storage(), path).timeline().is_completed(instant.requested_time)
