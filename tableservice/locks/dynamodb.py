"""The DynamoDB lock, sharing its items with Apache Hudi's `DynamoDBBasedLockProvider`.

Hudi's provider (hudi-aws, `DynamoDBBasedLockProvider` / `DynamoDBBasedLockProviderBase`) is a thin wrapper around
the AWS DynamoDB Lock Client (`com.amazonaws:dynamodb-lock-client`, class `AmazonDynamoDBLockClient`). This module
speaks that client's protocol so a Hudi writer and this daemon exclude each other. Facts, as read in
awslabs/amazon-dynamodb-lock-client (AmazonDynamoDBLockClient, AmazonDynamoDBLockClientOptions,
AcquireLockOptions, LockItem; versions 1.0.0 to 1.4) and apache/hudi (DynamoDbBasedLockConfig, the providers,
LockManager):

Table. `hoodie.write.lock.dynamodb.table`; hash key attribute `key` of type S, no sort key. Hudi creates the table
when `describeTable` does not answer ACTIVE or UPDATING, with `billing_mode` (PAY_PER_REQUEST by default, or
PROVISIONED with `read_capacity` 20 / `write_capacity` 10) and waits up to `table_creation_timeout` ms (600000)
for ACTIVE. The partition key value is `hoodie.write.lock.dynamodb.partition_key`, inferred from the Hudi table
name (`hoodie.table.name`) when absent. The region defaults to AWS_REGION, else us-east-1; an endpoint_url without
a scheme gets `https://`.

Item, as the client writes it on acquire (PutItem of the whole item):
  `key` S = partition key; `ownerName` S = the client's owner name (by default the host name immediately followed by
  a random UUID, no separator); `leaseDuration` S = the lease in milliseconds as decimal text;
  `recordVersionNumber` S = a fresh random UUID (`UUID.randomUUID().toString()`); `data` B only when the caller
  passes data (Hudi never does). `isReleased` appears only when a lock is released without deleting the item; the
  client writes it as S "1" (not BOOL) and, reading, treats the mere presence of the attribute as "released".

Timing. Hudi sets lease = `hoodie.write.lock.wait_time_ms` (default 60000) and heartbeat period = lease / 3 with the
client's background heartbeat thread; it does not use a session monitor, data, sort keys or `refreshPeriod`
(so waiters poll every 1000 ms), and keeps the default `deleteLockOnRelease = true`. Hudi calls
`tryLock(wait_time_ms)`; the client then waits `wait_time_ms`, plus the holder's lease once it has seen the lock
held. Hudi's LockManager retries that `num_retries` times.

Acquire (consistent GetItem, then):
  - no item: PutItem under `attribute_not_exists(#pk)` (#pk = `key`);
  - item with `isReleased`: PutItem under `attribute_exists(#pk) AND #ir = :ir` (:ir = S "1");
  - item held: remember its `recordVersionNumber` with the local monotonic time the read returned; poll; when the
    version is unchanged for more than the item's `leaseDuration` on the waiter's own clock, PutItem over it under
    `attribute_exists(#pk) AND #rvn = :rvn` (no owner check). A changed version restarts the wait.
  - A failed condition means someone else won: keep waiting while time remains.
The new holder counts its lease from just before its write (it errs on the early side).

Heartbeat. UpdateItem `SET #ld = :ld, #rvn = :newRvn` (lease text and a new UUID) under
`attribute_exists(#pk) AND #rvn = :rvn AND #on = :on` (old version, own owner). The client stops heartbeating a lock
whose lease has run out on its own clock since the last successful heartbeat, and drops it when the condition
fails ("someone else acquired the lock").

Release. DeleteItem under `attribute_exists(#pk) AND #rvn = :rvn AND #on = :on` (with `deleteLockOnRelease`, Hudi's
case); otherwise UpdateItem `SET #ir = :ir` under the same condition. A failed condition means the lock was already
taken; Hudi logs "The lock has already been stolen" and carries on.

This implementation: one owner name per provider (host name + UUID, as the client), lease = `wait_time_ms`,
heartbeat about every lease/3 on a daemon thread per held lock, the handle counted lost once 80% of the lease has
passed without a successful write (a safety margin for the time between a check and the write it guards), delete
on release; it acquires items left released
by other clients (conditioning on their version and the presence of `isReleased`, whatever its type). A put or
heartbeat whose condition fails is checked against the item: if it holds our owner name and the version we just
wrote, the write succeeded and only its answer was lost (the client's retry then failed on our own write).
`acquire(timeout_s)` waits exactly `timeout_s` in total. What a waiter saw is kept by the provider across calls
(the version and when this process first saw it), so short tries repeated over time, as the executor leases'
`acquire(0)` on every poll, take over a holder that died once its version has stood unchanged for a lease.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tableservice.config.locks import LockSettings
from tableservice.errors import LockError
from tableservice.locks.base import LockHandle, LockProvider, TableLock

log = logging.getLogger(__name__)

HASH_KEY = "key"
OWNER_NAME = "ownerName"
LEASE_DURATION = "leaseDuration"
RECORD_VERSION_NUMBER = "recordVersionNumber"
DATA = "data"
IS_RELEASED = "isReleased"

_NAMES_PK = {"#pk": HASH_KEY}
_NAMES_PK_RVN = {"#pk": HASH_KEY, "#rvn": RECORD_VERSION_NUMBER}
_NAMES_OWNED = {"#pk": HASH_KEY, "#rvn": RECORD_VERSION_NUMBER, "#on": OWNER_NAME}
_IF_ABSENT = "attribute_not_exists(#pk)"
_IF_VERSION = "attribute_exists(#pk) AND #rvn = :rvn"
_IF_RELEASED = "attribute_exists(#pk) AND #rvn = :rvn AND attribute_exists(#ir)"
_IF_OWNED = "attribute_exists(#pk) AND #rvn = :rvn AND #on = :on"
_TRANSIENT = (ClientError, BotoCoreError)


def _conditional_failed(error: Exception) -> bool:
    return isinstance(error, ClientError) and error.response.get("Error", {}).get("Code") == (
        "ConditionalCheckFailedException"
    )


def _s(value: str) -> dict[str, str]:
    return {"S": value}


SAFETY_MARGIN = 0.2  # of the lease: a holder stalled this long between a check and its write is still covered


class DynamoDBLockHandle(LockHandle):
    """A held DynamoDB lock. `lost` also turns true by itself once 80% of the lease has passed since the last
    successful write (acquire or heartbeat) on this process's monotonic clock: another client may take the lock
    over once the whole lease has passed, whether or not the heartbeat thread has had a chance to notice, and the
    remaining 20% covers the time between a holder's last check and the write it guards (the AWS client's
    "safe time without heartbeat" plays the same part)."""

    def __init__(self, key: str, owner: str, *, record_version: str, lease_s: float, renewed_at: float) -> None:
        self._lost = False
        self.released = False
        super().__init__(key, owner)
        self.record_version = record_version
        self.lease_s = lease_s
        self.renewed_at = renewed_at
        self.acquired_unix = time.time()
        self.stop = threading.Event()
        self.mutex = threading.Lock()
        self.thread: threading.Thread | None = None

    @property
    def lost(self) -> bool:
        if self._lost:
            return True
        if not self.released and time.monotonic() - self.renewed_at > self.lease_s * (1 - SAFETY_MARGIN):
            self._lost = True
        return self._lost

    @lost.setter
    def lost(self, value: bool) -> None:
        self._lost = value


class DynamoDBTableLock(TableLock):
    """One lock item (`key` = the partition key) in the provider's DynamoDB table."""

    def __init__(self, provider: DynamoDBLockProvider, key: str, table_name: str) -> None:
        self.key = key
        self.provider = provider
        self.table_name = table_name
        self._held: DynamoDBLockHandle | None = None
        self._seen: tuple[str, float] | None = None

    # --- helpers -----------------------------------------------------------------------------------

    @property
    def _where(self) -> str:
        return f"DynamoDB table {self.provider.table!r} key {self.key!r}"

    def _item_key(self) -> dict[str, Any]:
        return {HASH_KEY: _s(self.key)}

    def read_item(self) -> dict[str, Any] | None:
        """The lock item as DynamoDB returns it (typed attribute values), read consistently, or None."""
        answer = self.provider.client.get_item(TableName=self.provider.table, Key=self._item_key(), ConsistentRead=True)
        item = answer.get("Item")
        return dict(item) if item else None

    def _new_item(self, version: str) -> dict[str, Any]:
        p = self.provider
        return {
            HASH_KEY: _s(self.key),
            OWNER_NAME: _s(p.owner_name),
            LEASE_DURATION: _s(str(p.lease_ms)),
            RECORD_VERSION_NUMBER: _s(version),
        }

    def _put(self, condition: str, names: dict[str, str], values: dict[str, Any] | None) -> DynamoDBLockHandle:
        """One conditional PutItem of a fresh item; raises ClientError when the condition fails."""
        p = self.provider
        version = str(uuid.uuid4())
        started = time.monotonic()
        kwargs: dict[str, Any] = {
            "TableName": p.table,
            "Item": self._new_item(version),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
        }
        if values:
            kwargs["ExpressionAttributeValues"] = values
        try:
            p.client.put_item(**kwargs)
        except ClientError as e:
            if not (_conditional_failed(e) and self._wrote(version)):
                raise
        return DynamoDBLockHandle(
            self.key, p.owner_name, record_version=version, lease_s=p.lease_ms / 1000.0, renewed_at=started
        )

    def _wrote(self, version: str) -> bool:
        """Whether the item is ours at `version`: a write whose answer was lost succeeded, and the client's retry of
        it failed its condition on our own write. Versions are fresh UUIDs, so nobody else wrote this one."""
        try:
            item = self.read_item()
        except _TRANSIENT:
            return False
        return (
            item is not None
            and item.get(OWNER_NAME, {}).get("S") == self.provider.owner_name
            and item.get(RECORD_VERSION_NUMBER, {}).get("S") == version
        )

    # --- TableLock ---------------------------------------------------------------------------------

    def acquire(self, timeout_s: float) -> LockHandle:
        p = self.provider
        p.ensure_table()
        started = time.monotonic()
        deadline = started + max(0.0, timeout_s)
        watched = p.watched(self.key)  # (version, first seen at, its lease in seconds), from earlier tries too
        last_owner = "nobody"
        last_error: Exception | None = None
        while True:
            try:
                item = self.read_item()
                if item is None:
                    handle = self._put(_IF_ABSENT, _NAMES_PK, None)
                    return self._start(handle)
                version = item.get(RECORD_VERSION_NUMBER, {}).get("S", "")
                last_owner = item.get(OWNER_NAME, {}).get("S", "?")
                if IS_RELEASED in item:
                    names = {**_NAMES_PK_RVN, "#ir": IS_RELEASED}
                    handle = self._put(_IF_RELEASED, names, {":rvn": _s(version)})
                    return self._start(handle)
                now = time.monotonic()
                if watched is None or watched[0] != version:
                    watched = (version, now, _lease_seconds(item, p.lease_ms))
                    p.remember(self.key, watched)
                elif now - watched[1] > watched[2]:
                    handle = self._put(_IF_VERSION, _NAMES_PK_RVN, {":rvn": _s(version)})
                    log.info("took over the expired lock of %s (%s)", last_owner, self._where)
                    return self._start(handle)
            except _TRANSIENT as e:
                if _conditional_failed(e):
                    watched = None  # someone else won this round; watch the new holder
                    p.forget(self.key)
                elif isinstance(e, ClientError) and e.response.get("Error", {}).get("Code") == (
                    "ResourceNotFoundException"
                ):
                    raise LockError(f"the lock table does not exist: {self._where}", table=self.table_name) from e
                else:
                    last_error = e
                    log.warning("DynamoDB lock request failed (%s): %s", self._where, e)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                detail = f"; last error: {last_error}" if last_error is not None else ""
                raise LockError(
                    f"lock not acquired within {timeout_s:.1f}s: {self._where} held by {last_owner}{detail}",
                    table=self.table_name,
                )
            time.sleep(min(p.poll_s, remaining))

    def _start(self, handle: DynamoDBLockHandle) -> DynamoDBLockHandle:
        self.provider.forget(self.key)  # what waiters saw of the item is past
        self._held = handle
        self.provider.track(self, handle)
        self._seen = (handle.owner, handle.acquired_unix)
        thread = threading.Thread(
            target=self._heartbeat_loop, args=(handle,), name=f"ddb-lock-heartbeat-{self.key}", daemon=True
        )
        handle.thread = thread
        thread.start()
        return handle

    def _heartbeat_loop(self, handle: DynamoDBLockHandle) -> None:
        p = self.provider
        period = handle.lease_s / 3.0
        retry = max(0.05, period / 5.0)
        wait = period
        while not handle.stop.wait(max(0.0, wait)):
            with handle.mutex:
                if handle.stop.is_set():
                    return
                if handle.lost:  # the lease ran out on our clock: someone may hold it now; never revive it
                    log.warning("lock lease ran out before a heartbeat succeeded (%s)", self._where)
                    return
                started = time.monotonic()
                version = str(uuid.uuid4())
                try:
                    p.client.update_item(
                        TableName=p.table,
                        Key=self._item_key(),
                        UpdateExpression="SET #ld = :ld, #rvn = :newRvn",
                        ConditionExpression=_IF_OWNED,
                        ExpressionAttributeNames={**_NAMES_OWNED, "#ld": LEASE_DURATION},
                        ExpressionAttributeValues={
                            ":ld": _s(str(p.lease_ms)),
                            ":newRvn": _s(version),
                            ":rvn": _s(handle.record_version),
                            ":on": _s(handle.owner),
                        },
                    )
                except _TRANSIENT as e:
                    if _conditional_failed(e) and not self._wrote(version):
                        log.warning("lock taken over by another client (%s)", self._where)
                        handle.lost = True
                        return
                    if not _conditional_failed(e):
                        log.warning("heartbeat failed, retrying (%s): %s", self._where, e)
                        wait = retry
                        continue
                handle.record_version = version
                handle.renewed_at = started
            wait = started + period - time.monotonic()

    def release(self, handle: LockHandle) -> None:
        if not isinstance(handle, DynamoDBLockHandle):
            raise TypeError(f"not a DynamoDB lock handle: {handle!r}")
        p = self.provider
        handle.stop.set()
        with handle.mutex:
            if handle.released:
                return
            handle.released = True
            try:
                p.client.delete_item(
                    TableName=p.table,
                    Key=self._item_key(),
                    ConditionExpression=_IF_OWNED,
                    ExpressionAttributeNames=_NAMES_OWNED,
                    ExpressionAttributeValues={":rvn": _s(handle.record_version), ":on": _s(handle.owner)},
                )
            except _TRANSIENT as e:
                if _conditional_failed(e):
                    log.info("lock was already taken by another client when released (%s)", self._where)
                else:  # the item stays until its lease runs out; others take it over then
                    log.warning("lock release failed; it expires after its lease (%s): %s", self._where, e)
        if handle.thread is not None and handle.thread is not threading.current_thread():
            handle.thread.join(timeout=p.request_timeout_s * 2)
        if self._held is handle:
            self._held = None
        p.untrack(handle)

    def holder(self) -> tuple[str, float] | None:
        """(ownerName, since): our acquisition time when we hold it, else when this object first saw that owner
        holding it (the item records no time, so that is a lower bound on how long it has been held)."""
        held = self._held
        if held is not None and not held.lost:
            return held.owner, held.acquired_unix
        try:
            item = self.read_item()
        except _TRANSIENT as e:
            log.warning("cannot read the lock item (%s): %s", self._where, e)
            return None
        if item is None or IS_RELEASED in item:
            self._seen = None
            return None
        owner = item.get(OWNER_NAME, {}).get("S", "?")
        if self._seen is None or self._seen[0] != owner:
            self._seen = (owner, time.time())
        return self._seen


def _lease_seconds(item: dict[str, Any], default_ms: int) -> float:
    text = item.get(LEASE_DURATION, {}).get("S")
    try:
        return int(text) / 1000.0 if text is not None else default_ms / 1000.0
    except ValueError:
        return default_ms / 1000.0


def default_owner_name() -> str:
    """The AWS lock client's default: the host name immediately followed by a random UUID."""
    try:
        return socket.gethostname() + str(uuid.uuid4())
    except OSError:
        return str(uuid.uuid4())


class DynamoDBLockProvider(LockProvider):
    """Locks in the DynamoDB table `hoodie.write.lock.dynamodb.table`, one item per Hudi table."""

    name = "dynamodb"

    def __init__(
        self,
        settings: LockSettings,
        *,
        endpoint_url: str | None = None,
        create_table: bool = True,
        owner_name: str | None = None,
        client: Any = None,
    ) -> None:
        if settings.dynamodb_table is None:
            raise LockError("hoodie.write.lock.dynamodb.table is not set")
        self.settings = settings
        self.table = settings.dynamodb_table
        self.lease_ms = settings.wait_time_ms
        self.poll_s = min(1.0, max(0.05, self.lease_ms / 1000.0 / 10.0))
        self.request_timeout_s = min(10.0, max(1.0, self.lease_ms / 1000.0 / 3.0))
        self.owner_name = owner_name or default_owner_name()
        self.region = (
            settings.dynamodb_region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        ) or "us-east-1"
        endpoint = endpoint_url or settings.dynamodb_endpoint_url
        if endpoint is not None and "://" not in endpoint:
            endpoint = "https://" + endpoint
        self.endpoint_url = endpoint
        self.create_table = create_table
        self._client = client
        self._table_ready = False
        self._guard = threading.Lock()
        self._live: dict[int, tuple[DynamoDBTableLock, DynamoDBLockHandle]] = {}
        self._watched: dict[str, tuple[str, float, float]] = {}

    @property
    def client(self) -> Any:
        """The boto3 DynamoDB client (thread-safe; shared by every lock and heartbeat of this provider)."""
        with self._guard:
            if self._client is None:
                timeout = self.request_timeout_s
                config = Config(
                    connect_timeout=timeout,
                    read_timeout=timeout,
                    retries={"max_attempts": 2, "mode": "standard"},
                )
                self._client = boto3.client(
                    "dynamodb", region_name=self.region, endpoint_url=self.endpoint_url, config=config
                )
            return self._client

    # --- what waiters saw, across acquire calls ----------------------------------------------------------

    def watched(self, key: str) -> tuple[str, float, float] | None:
        """(version, monotonic time this process first saw it, its lease in seconds) of the item `key`, as the
        last try to acquire it left it, or None."""
        with self._guard:
            return self._watched.get(key)

    def remember(self, key: str, seen: tuple[str, float, float]) -> None:
        """Keep what a try saw. Entries for keys nobody tries again are dropped after ten leases (at least ten
        minutes): dropping one only restarts the wait for a lock that is tried again after all."""
        with self._guard:
            self._watched[key] = seen
            now = seen[1]
            for other, (_, first, lease_s) in list(self._watched.items()):
                if now - first > max(600.0, 10 * lease_s):
                    del self._watched[other]

    def forget(self, key: str) -> None:
        with self._guard:
            self._watched.pop(key, None)

    def table_lock(self, table_name: str, base_path: str) -> TableLock:
        return DynamoDBTableLock(self, self.settings.dynamodb_partition_key_for(table_name), table_name)

    def lease(self, table_name: str, base_path: str, name: str) -> TableLock:
        """An executor lease: its own item in the same lock table, keyed apart from Hudi's table lock."""
        key = f"{self.settings.dynamodb_partition_key_for(table_name)}/tableservice-lease/{name}"
        return DynamoDBTableLock(self, key, table_name)

    def table_status(self) -> str | None:
        """The lock table's status, or None when it does not exist."""
        try:
            answer = self.client.describe_table(TableName=self.table)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return None
            raise
        return str(answer["Table"]["TableStatus"])

    def ensure_table(self) -> None:
        """Create the lock table when it is missing (as Hudi does) and wait until it is ACTIVE."""
        if self._table_ready:
            return
        try:
            status = self.table_status()
            if status in ("ACTIVE", "UPDATING"):
                self._table_ready = True
                return
            if status is None:
                if not self.create_table:
                    raise LockError(f"the DynamoDB lock table {self.table!r} does not exist")
                self._create()
            self._wait_active()
        except _TRANSIENT as e:
            raise LockError(f"cannot check or create the DynamoDB lock table {self.table!r}: {e}") from e
        self._table_ready = True

    def _create(self) -> None:
        s = self.settings
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeySchema": [{"AttributeName": HASH_KEY, "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": HASH_KEY, "AttributeType": "S"}],
            "BillingMode": s.dynamodb_billing_mode,
        }
        if s.dynamodb_billing_mode == "PROVISIONED":
            kwargs["ProvisionedThroughput"] = {
                "ReadCapacityUnits": s.dynamodb_read_capacity,
                "WriteCapacityUnits": s.dynamodb_write_capacity,
            }
        log.info("creating the DynamoDB lock table %r", self.table)
        try:
            self.client.create_table(**kwargs)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") != "ResourceInUseException":  # created meanwhile
                raise

    def _wait_active(self) -> None:
        timeout_s = self.settings.dynamodb_table_creation_timeout / 1000.0
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.table_status()
            if status == "ACTIVE":
                return
            if time.monotonic() >= deadline:
                raise LockError(
                    f"the DynamoDB lock table {self.table!r} is {status or 'missing'}, not ACTIVE, "
                    f"after {timeout_s:.0f}s (hoodie.write.lock.dynamodb.table_creation_timeout)"
                )
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def track(self, lock: DynamoDBTableLock, handle: DynamoDBLockHandle) -> None:
        with self._guard:
            self._live[id(handle)] = (lock, handle)

    def untrack(self, handle: DynamoDBLockHandle) -> None:
        with self._guard:
            self._live.pop(id(handle), None)

    def close(self) -> None:
        """Release the locks still held through this provider (as the Java client's close does), then the client."""
        with self._guard:
            live = list(self._live.values())
        for lock, handle in live:
            lock.release(handle)
        with self._guard:
            if self._client is not None:
                self._client.close()
                self._client = None
