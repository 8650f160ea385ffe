"""The DynamoDB lock against moto in server mode: the AWS lock client's item layout and protocol (as Hudi's
DynamoDBBasedLockProvider uses it), heartbeats, take-over of dead holders, and separate processes contending."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tableservice.config.locks import LockSettings
from tableservice.errors import LockError, LockLostError
from tableservice.locks.base import LockHandle
from tableservice.locks.dynamodb import DynamoDBLockHandle, DynamoDBLockProvider, DynamoDBTableLock
from tests.support.fixtures import REPO
from tests.support.servers import MotoServer

pytestmark = pytest.mark.moto

CONTENDER = REPO / "tests" / "support" / "ddb" / "contender.py"
JAVA_ITEM_TYPES = {"key": "S", "ownerName": "S", "leaseDuration": "S", "recordVersionNumber": "S"}
"""What AmazonDynamoDBLockClient.acquireLock puts for Hudi (no data, no sort key, not released)."""


def settings(table: str, lease_ms: int = 2000, key: str | None = None, **extra: Any) -> LockSettings:
    raw: dict[str, Any] = {
        "hoodie.write.lock.provider": "dynamodb",
        "hoodie.write.lock.dynamodb.table": table,
        "hoodie.write.lock.dynamodb.region": "us-east-1",
        "hoodie.write.lock.wait_time_ms": lease_ms,
        **extra,
    }
    if key is not None:
        raw["hoodie.write.lock.dynamodb.partition_key"] = key
    return LockSettings.model_validate(raw)


@pytest.fixture()
def creds(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> MotoServer:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto.secret_access_key)
    return moto


@pytest.fixture()
def ddb(creds: MotoServer) -> Any:
    """A raw client, to look at items and to play the Java lock client."""
    return boto3.client("dynamodb", endpoint_url=creds.endpoint_url, region_name=creds.region)


@pytest.fixture()
def table_name() -> str:
    return f"hudi-locks-{uuid.uuid4().hex[:10]}"


@pytest.fixture()
def providers(creds: MotoServer) -> Iterator[list[DynamoDBLockProvider]]:
    made: list[DynamoDBLockProvider] = []
    yield made
    for p in made:
        p.close()


def make_lock(
    providers: list[DynamoDBLockProvider], creds: MotoServer, table: str, lease_ms: int = 2000, **extra: Any
) -> DynamoDBTableLock:
    provider = DynamoDBLockProvider(settings(table, lease_ms, **extra), endpoint_url=creds.endpoint_url)
    providers.append(provider)
    lock = provider.table_lock("trips", "s3://bucket/trips")
    assert isinstance(lock, DynamoDBTableLock)
    return lock


def get_item(ddb: Any, table: str, key: str = "trips") -> dict[str, Any] | None:
    item = ddb.get_item(TableName=table, Key={"key": {"S": key}}, ConsistentRead=True).get("Item")
    return dict(item) if item else None


def types_of(item: dict[str, Any]) -> dict[str, str]:
    return {name: next(iter(value)) for name, value in item.items()}


def java_put(ddb: Any, table: str, owner: str, lease_ms: int, **extra: dict[str, str]) -> str:
    """The item AmazonDynamoDBLockClient puts when it acquires `trips`; returns its record version."""
    version = str(uuid.uuid4())
    item = {
        "key": {"S": "trips"},
        "ownerName": {"S": owner},
        "leaseDuration": {"S": str(lease_ms)},
        "recordVersionNumber": {"S": version},
        **extra,
    }
    ddb.put_item(TableName=table, Item=item)
    return version


# --- layout, acquire, release, timeout -------------------------------------------------------------


def test_item_layout_table_and_release(providers: list[DynamoDBLockProvider], creds: MotoServer, ddb: Any) -> None:
    table = f"hudi-locks-{uuid.uuid4().hex[:10]}"
    lock = make_lock(providers, creds, table, lease_ms=2000)
    assert lock.key == "trips"  # partition key defaults to the Hudi table name

    handle = lock.acquire(timeout_s=5)
    try:
        description = ddb.describe_table(TableName=table)["Table"]
        assert description["TableStatus"] == "ACTIVE"
        assert description["KeySchema"] == [{"AttributeName": "key", "KeyType": "HASH"}]
        assert description["AttributeDefinitions"] == [{"AttributeName": "key", "AttributeType": "S"}]
        assert description["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"

        item = get_item(ddb, table)
        assert item is not None
        assert types_of(item) == JAVA_ITEM_TYPES
        assert item["key"]["S"] == "trips"
        assert item["leaseDuration"]["S"] == "2000"
        assert item["ownerName"]["S"] == handle.owner == providers[0].owner_name
        assert str(uuid.UUID(item["recordVersionNumber"]["S"])) == item["recordVersionNumber"]["S"]
        assert isinstance(handle, DynamoDBLockHandle)
        assert item["recordVersionNumber"]["S"] == handle.record_version
        assert not handle.lost
        holder = lock.holder()
        assert holder is not None and holder[0] == handle.owner and abs(holder[1] - time.time()) < 5
    finally:
        lock.release(handle)
    # Hudi keeps the client's deleteLockOnRelease=true: the item is deleted
    assert get_item(ddb, table) is None
    assert lock.holder() is None
    handle.check()  # a released handle is not "lost"


def test_partition_key_setting_and_holder_seen_from_another_owner(
    providers: list[DynamoDBLockProvider], creds: MotoServer, ddb: Any, table_name: str
) -> None:
    mine = make_lock(providers, creds, table_name, key="shared-key")
    theirs = make_lock(providers, creds, table_name, key="shared-key")
    assert mine.key == theirs.key == "shared-key"
    handle = mine.acquire(timeout_s=5)
    try:
        assert get_item(ddb, table_name, "shared-key") is not None
        seen = theirs.holder()
        assert seen is not None and seen[0] == providers[0].owner_name != providers[1].owner_name
    finally:
        mine.release(handle)


def test_timeout_names_table_and_key(
    providers: list[DynamoDBLockProvider], creds: MotoServer, ddb: Any, table_name: str
) -> None:
    first = make_lock(providers, creds, table_name)
    second = make_lock(providers, creds, table_name)
    handle = first.acquire(timeout_s=5)
    started = time.monotonic()
    with pytest.raises(LockError) as caught:
        second.acquire(timeout_s=0.6)
    assert time.monotonic() - started >= 0.6
    message = str(caught.value)
    assert table_name in message and "'trips'" in message and providers[0].owner_name in message
    assert caught.value.table == "trips"
    first.release(handle)
    again = second.acquire(timeout_s=2)  # free again: the waiter gets it at its next poll
    assert get_item(ddb, table_name)["ownerName"]["S"] == providers[1].owner_name  # type: ignore[index]
    second.release(again)


def test_hold_context_and_provisioned_table(providers: list[DynamoDBLockProvider], creds: MotoServer, ddb: Any) -> None:
    table = f"hudi-locks-{uuid.uuid4().hex[:10]}"
    extra: dict[str, Any] = {
        "hoodie.write.lock.dynamodb.billing_mode": "PROVISIONED",
        "hoodie.write.lock.dynamodb.read_capacity": 7,
        "hoodie.write.lock.dynamodb.write_capacity": 3,
    }
    lock = make_lock(providers, creds, table, **extra)
    waits: list[float] = []
    with lock.hold(5, on_acquired=waits.append) as handle:
        assert get_item(ddb, table)["recordVersionNumber"]["S"] == handle.record_version  # type: ignore[attr-defined,index]
    assert len(waits) == 1 and get_item(ddb, table) is None
    throughput = ddb.describe_table(TableName=table)["Table"]["ProvisionedThroughput"]
    assert (throughput["ReadCapacityUnits"], throughput["WriteCapacityUnits"]) == (7, 3)


def test_provider_close_releases_held_locks(
    providers: list[DynamoDBLockProvider], creds: MotoServer, ddb: Any, table_name: str
) -> None:
    lock = make_lock(providers, creds, table_name)
    handle = lock.acquire(timeout_s=5)
    assert get_item(ddb, table_name) is not None
    providers[0].close()  # like AmazonDynamoDBLockClient.close: release every lock still held
    assert get_item(ddb, table_name) is None
    assert isinstance(handle, DynamoDBLockHandle) and handle.released and not handle.lost


def test_missing_table_without_creation(creds: MotoServer) -> None:
    table = f"absent-{uuid.uuid4().hex[:10]}"
    provider = DynamoDBLockProvider(settings(table), endpoint_url=creds.endpoint_url, create_table=False)
    try:
        with pytest.raises(LockError, match=table):
            provider.table_lock("trips", "/x").acquire(timeout_s=1)
    finally:
        provider.close()


# --- interplay with the Java client's writes -------------------------------------------------------


def test_takes_over_a_dead_java_holder_after_its_lease(
    providers: list[DynamoDBLockProvider], creds: MotoServer, ddb: Any, table_name: str
) -> None:
    lock = make_lock(providers, creds, table_name)
    providers[0].ensure_table()
    old = java_put(ddb, table_name, "otherhost" + str(uuid.uuid4()), lease_ms=1200)
    started = time.monotonic()
    handle = lock.acquire(timeout_s=6)
    assert time.monotonic() - started > 1.2  # a whole lease of the item's own leaseDuration without a heartbeat
    item = get_item(ddb, table_name)
    assert item is not None and types_of(item) == JAVA_ITEM_TYPES
    assert item["ownerName"]["S"] == handle.owner and item["recordVersionNumber"]["S"] not in ("", old)
    lock.release(handle)


def test_an_executor_lease_left_by_a_dead_replica_is_taken_over_by_zero_wait_tries_on_later_polls(
    providers: list[DynamoDBLockProvider], creds: MotoServer, ddb: Any, table_name: str
) -> None:
    """The worker tries an action's lease with `acquire(0)` on each poll, on a fresh lock object: a live replica's
    lease is never taken that way, and a dead one's is, once its version has stood for a lease."""
    make_lock(providers, creds, table_name, lease_ms=1500)
    replica = DynamoDBLockProvider(settings(table_name, 1500), endpoint_url=creds.endpoint_url)
    providers.append(replica)
    name = "compaction-20260101000000000"
    held = replica.lease("trips", "s3://bucket/trips", name).acquire(timeout_s=2)

    def try_lease() -> LockHandle | None:
        try:
            return providers[0].lease("trips", "s3://bucket/trips", name).acquire(0.0)
        except LockError:
            return None

    started = time.monotonic()
    while time.monotonic() - started < 3.75:  # 2.5 leases of a replica that heartbeats
        assert try_lease() is None
        time.sleep(0.2)
    assert not held.lost
    assert isinstance(held, DynamoDBLockHandle)
    held.stop.set()  # the replica dies: no heartbeat, no release
    last_beat = get_item(ddb, table_name, held.key)
    died = time.monotonic()
    tries = 0
    while (handle := try_lease()) is None:
        tries += 1
        assert time.monotonic() - died < 10, "a dead replica's lease was never taken over"
        time.sleep(0.2)
    assert time.monotonic() - died > 1.0 and tries >= 4  # not before its version stood for about a lease
    item = get_item(ddb, table_name, held.key)
    assert last_beat is not None and item is not None
    assert item["ownerName"]["S"] == providers[0].owner_name != last_beat["ownerName"]["S"]
    assert item["recordVersionNumber"]["S"] != last_beat["recordVersionNumber"]["S"]
    providers[0].lease("trips", "s3://bucket/trips", name).release(handle)
    assert get_item(ddb, table_name, held.key) is None


class _LostAnswers:
    """A DynamoDB client whose `ops` succeed on the server and then answer as the client's retry of them would: with
    the condition failure their own write caused (the first answer lost on the way back)."""

    def __init__(self, real: Any, ops: set[str]) -> None:
        self.real, self.ops, self.replayed = real, ops, list[str]()

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.real, name)
        if name not in self.ops:
            return call

        def twice(**kwargs: Any) -> Any:
            call(**kwargs)
            self.replayed.append(name)
            return call(**kwargs)

        return twice


def test_writes_whose_answers_were_lost_keep_the_lock(
    providers: list[DynamoDBLockProvider], creds: MotoServer, ddb: Any, table_name: str
) -> None:
    real = boto3.client("dynamodb", endpoint_url=creds.endpoint_url, region_name=creds.region)
    client = _LostAnswers(real, {"put_item", "update_item"})
    provider = DynamoDBLockProvider(settings(table_name, 1500), endpoint_url=creds.endpoint_url, client=client)
    providers.append(provider)
    lock = provider.table_lock("trips", "s3://bucket/trips")
    assert isinstance(lock, DynamoDBTableLock)
    handle = lock.acquire(timeout_s=1.0)  # under a lease: too short to take over even its own item
    assert isinstance(handle, DynamoDBLockHandle)
    assert client.replayed == ["put_item"]  # the put succeeded, and its retry's failure was the answer
    first = handle.record_version
    item = get_item(ddb, table_name)
    assert item is not None and (item["ownerName"]["S"], item["recordVersionNumber"]["S"]) == (handle.owner, first)
    time.sleep(2.0)  # four heartbeats, each answered with its retry's condition failure
    assert client.replayed[:4] == ["put_item", "update_item", "update_item", "update_item"]
    assert not handle.lost
    with handle.mutex:  # between heartbeats
        item = get_item(ddb, table_name)
        assert item is not None and item["recordVersionNumber"]["S"] == handle.record_version != first
    lock.release(handle)
    assert get_item(ddb, table_name) is None


def test_java_heartbeats_keep_the_lock(
    providers: list[DynamoDBLockProvider], creds: MotoServer, ddb: Any, table_name: str
) -> None:
    lock = make_lock(providers, creds, table_name)
    providers[0].ensure_table()
    owner = "otherhost" + str(uuid.uuid4())
    version = [java_put(ddb, table_name, owner, lease_ms=2000)]
    stop = threading.Event()

    def heartbeat() -> None:  # AmazonDynamoDBLockClient.sendHeartbeat, here every lease/6: a late beat is no death
        while not stop.wait(0.33):
            new = str(uuid.uuid4())
            ddb.update_item(
                TableName=table_name,
                Key={"key": {"S": "trips"}},
                UpdateExpression="SET #ld = :ld, #rvn = :newRvn",
                ConditionExpression="attribute_exists(#pk) AND #rvn = :rvn AND #on = :on",
                ExpressionAttributeNames={
                    "#pk": "key",
                    "#ld": "leaseDuration",
                    "#rvn": "recordVersionNumber",
                    "#on": "ownerName",
                },
                ExpressionAttributeValues={
                    ":ld": {"S": "2000"},
                    ":newRvn": {"S": new},
                    ":rvn": {"S": version[0]},
                    ":on": {"S": owner},
                },
            )
            version[0] = new

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    try:
        with pytest.raises(LockError, match=owner):
            lock.acquire(timeout_s=5)  # 2.5 leases: only a heartbeat-less holder would be taken over
    finally:
        stop.set()
        beat.join()
    assert get_item(ddb, table_name)["ownerName"]["S"] == owner  # type: ignore[index]
    # once the Java holder stops heartbeating, one lease later the lock is ours
    handle = lock.acquire(timeout_s=8)
    lock.release(handle)


def test_acquires_an_item_the_java_client_left_released(
    providers: list[DynamoDBLockProvider], creds: MotoServer, ddb: Any, table_name: str
) -> None:
    lock = make_lock(providers, creds, table_name)
    providers[0].ensure_table()
    # releaseLock with deleteLock=false: SET isReleased = "1" (type S) under the owner/version condition
    java_put(ddb, table_name, "otherhost" + str(uuid.uuid4()), lease_ms=60_000, isReleased={"S": "1"})
    assert lock.holder() is None
    started = time.monotonic()
    handle = lock.acquire(timeout_s=1)
    assert time.monotonic() - started < 1  # no lease to wait out
    item = get_item(ddb, table_name)
    assert item is not None and types_of(item) == JAVA_ITEM_TYPES and item["ownerName"]["S"] == handle.owner
    lock.release(handle)


def test_lost_when_taken_over_and_release_keeps_the_new_holder(
    providers: list[DynamoDBLockProvider], creds: MotoServer, ddb: Any, table_name: str
) -> None:
    lock = make_lock(providers, creds, table_name, lease_ms=1500)
    handle = lock.acquire(timeout_s=5)
    intruder = "otherhost" + str(uuid.uuid4())
    java_put(ddb, table_name, intruder, lease_ms=60_000)  # as if our lease had run out and someone took it
    deadline = time.monotonic() + 3
    while not handle.lost and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handle.lost
    with pytest.raises(LockLostError):
        handle.check()
    lock.release(handle)  # the owner/version condition fails: the new holder's item stays
    assert get_item(ddb, table_name)["ownerName"]["S"] == intruder  # type: ignore[index]


def test_heartbeat_rotates_record_version(
    providers: list[DynamoDBLockProvider], creds: MotoServer, ddb: Any, table_name: str
) -> None:
    lock = make_lock(providers, creds, table_name, lease_ms=1500)
    handle = lock.acquire(timeout_s=5)
    versions: list[str] = []
    try:
        end = time.monotonic() + 15  # four versions take ~1.5 s; the margin is for a loaded machine
        while time.monotonic() < end and len(versions) < 4:
            item = get_item(ddb, table_name)
            assert item is not None
            assert types_of(item) == JAVA_ITEM_TYPES
            assert item["ownerName"]["S"] == handle.owner and item["leaseDuration"]["S"] == "1500"
            if not versions or versions[-1] != item["recordVersionNumber"]["S"]:
                versions.append(item["recordVersionNumber"]["S"])
            time.sleep(0.05)
        assert not handle.lost
    finally:
        lock.release(handle)
    assert len(versions) >= 4  # the acquire's version and a heartbeat every 0.5 s
    assert len(set(versions)) == len(versions)
    assert all(str(uuid.UUID(v)) == v for v in versions)


# --- separate processes -----------------------------------------------------------------------------


def contender(
    mode: str, creds: MotoServer, table: str, lease_ms: int, seconds: float, out: Path
) -> subprocess.Popen[bytes]:
    env = dict(os.environ, AWS_ACCESS_KEY_ID=creds.access_key_id, AWS_SECRET_ACCESS_KEY=creds.secret_access_key)
    args = [
        sys.executable,
        str(CONTENDER),
        mode,
        creds.endpoint_url,
        table,
        "trips",
        str(lease_ms),
        str(seconds),
        str(out),
    ]
    return subprocess.Popen(args, env=env, stderr=subprocess.PIPE)


def read_lines(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_three_processes_never_overlap(
    providers: list[DynamoDBLockProvider], creds: MotoServer, table_name: str, tmp_path: Path
) -> None:
    make_lock(providers, creds, table_name).provider.ensure_table()  # no creation race between contenders
    outs = [tmp_path / f"contender-{i}.log" for i in range(3)]
    procs = [contender("contend", creds, table_name, 2000, 30, out) for out in outs]
    try:
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err.decode()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    sections: list[tuple[float, float, int]] = []
    for i, out in enumerate(outs):
        lines = read_lines(out)
        assert lines[-1] == ["done"]
        assert not [line for line in lines if line[0] == "lost"]
        events = [line for line in lines if line[0] in ("enter", "exit")]
        assert [e[0] for e in events] == ["enter", "exit"] * (len(events) // 2)
        pairs = [(float(events[j][1]), float(events[j + 1][1]), i) for j in range(0, len(events), 2)]
        assert len(pairs) >= 5, f"contender {i} held the lock only {len(pairs)} times"
        sections.extend(pairs)
    sections.sort()
    assert all(enter <= leave for enter, leave, _ in sections)
    for (_, exit_a, who_a), (enter_b, _, who_b) in itertools.pairwise(sections):
        assert exit_a <= enter_b, f"contenders {who_a} and {who_b} overlapped at {enter_b:.3f} < {exit_a:.3f}"


@pytest.mark.slow
def test_stopped_holder_loses_the_lock(
    providers: list[DynamoDBLockProvider], creds: MotoServer, ddb: Any, table_name: str, tmp_path: Path
) -> None:
    thief = make_lock(providers, creds, table_name, lease_ms=2000)
    thief.provider.ensure_table()
    out = tmp_path / "holder.log"
    proc = contender("hold", creds, table_name, 2000, 40, out)
    try:
        deadline = time.monotonic() + 30
        while sum(1 for line in read_lines(out) if line[0] == "held") < 5:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the holder process did not take the lock"
            time.sleep(0.05)
        holder_owner = read_lines(out)[0][2]
        os.kill(proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        handle = thief.acquire(timeout_s=15)
        taken_at = time.time()
        assert time.monotonic() - stopped > 2.0  # the stopped holder's version stood still for a whole lease
        assert get_item(ddb, table_name)["ownerName"]["S"] == handle.owner != holder_owner  # type: ignore[index]

        os.kill(proc.pid, signal.SIGCONT)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err.decode()
        lines = read_lines(out)
        kinds = [line[0] for line in lines]
        assert kinds[0] == "acquired" and kinds[-2:] == ["lost", "released"]
        held = [float(line[1]) for line in lines if line[0] == "held"]
        # no check that started after the take-over said "held"; the first check after SIGCONT said "lost"
        assert max(held) < taken_at <= float(lines[-2][1])
        # its release ran under the owner/version condition and left our item alone
        item = get_item(ddb, table_name)
        assert item is not None and item["ownerName"]["S"] == handle.owner
        assert not handle.lost
        thief.release(handle)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
