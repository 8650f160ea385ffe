"""The ZooKeeper table lock, speaking the protocol of Hudi's ZookeeperBasedLockProvider.

Hudi's provider is an Apache Curator `InterProcessMutex` on `<base_path>/<lock_key>`. A contender creates an
EPHEMERAL_SEQUENTIAL child named `_c_<uuid>-lock-<10-digit sequence>` (Curator's "protected" mode: the `_c_<uuid>-`
prefix lets a client find its own node again after a connection loss during the create), lists the children,
orders them by the text after the last `lock-` in each name (the whole name when there is none), holds the lock
when its node is first, and otherwise waits until its immediate predecessor is gone. Curator leaves its client's
default data in the node: the client's IP address as text. This module does the same with kazoo, so a Hudi
writer and the daemon exclude each other. (kazoo's own `Lock` recipe names its nodes `<hex>__lock__<seq>`, which
Curator orders after its own nodes: the two would both "hold" the lock at once.)

A held lock is reported lost (`LockHandle.lost`) as soon as the connection is SUSPENDED or the session is LOST,
as Curator's documentation advises: the ephemeral node may be gone and another writer may hold the lock.
Hudi's own provider does not watch the connection; the daemon is stricter.

kazoo is imported only here.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, KazooException, NoNodeError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from tableservice.config.locks import LockSettings
from tableservice.errors import LockError
from tableservice.locks.base import LockHandle, LockProvider, TableLock, lock_timeout

log = logging.getLogger(__name__)

LOCK_NAME = "lock-"
"""Curator's InterProcessMutex lock name: contender nodes end with `lock-<sequence>`."""
PROTECTED_PREFIX = "_c_"
"""Curator's prefix for nodes created `withProtection()`: `_c_<uuid>-`."""
_MAX_WAIT_SLICE_S = 2.0  # re-check the contenders at least this often while waiting
_MIN_ROUND_TRIP_S = 1.0  # the least time given to one ZooKeeper request, whatever the deadline


def contender_prefix(node_id: str) -> str:
    """The name a contender asks ZooKeeper for; the server appends the 10-digit sequence."""
    return f"{PROTECTED_PREFIX}{node_id}-{LOCK_NAME}"


def sort_key(name: str) -> str:
    """Curator's ordering of lock children: the text after the last `lock-`, else the whole name."""
    index = name.rfind(LOCK_NAME)
    return name[index + len(LOCK_NAME) :] if index >= 0 else name


def protected_prefix_of(name: str) -> str:
    """A contender node's name without its sequence: `_c_<uuid>-lock-`."""
    index = name.rfind(LOCK_NAME)
    return name[: index + len(LOCK_NAME)] if index >= 0 else name


def curator_default_data() -> bytes:
    """Curator's default node data: the local host's address as text (empty when the host name does not
    resolve), as `InetAddress.getLocalHost().getHostAddress().getBytes()`."""
    try:
        return socket.gethostbyname(socket.gethostname()).encode("ascii")
    except OSError:
        return b""


def _waker(event: threading.Event) -> Callable[[Any], None]:
    return lambda _watched: event.set()


@dataclass
class ZookeeperLockHandle(LockHandle):
    """A held ZooKeeper lock; `node` is the full path of our contender node."""

    node: str = ""


class _Retry(Exception):
    """An attempt failed for a reason another attempt may not meet (connection or session trouble)."""


class ZookeeperTableLock(TableLock):
    """One table's lock: Curator's InterProcessMutex protocol on `key` (`<base_path>/<lock_key>`)."""

    def __init__(self, provider: ZookeeperLockProvider, key: str) -> None:
        self.key = key
        self._provider = provider

    # --- acquire -----------------------------------------------------------------------------------

    def acquire(self, timeout_s: float | None = None) -> ZookeeperLockHandle:
        """Wait up to `timeout_s` (default: `hoodie.write.lock.wait_time_ms`) for the lock. Connection and
        session failures are retried `num_retries` times with Hudi's bounded exponential back-off."""
        p = self._provider
        timeout = p.settings.wait_time_ms / 1000 if timeout_s is None else max(0.0, timeout_s)
        deadline = time.monotonic() + timeout
        delay = p.settings.wait_time_ms_between_retry / 1000
        failures = 0
        while True:
            try:
                return self._attempt(deadline, timeout)
            except _Retry as e:
                failures += 1
                remaining = deadline - time.monotonic()
                if failures > p.settings.num_retries or remaining <= 0:
                    raise LockError(f"not acquired after {failures} attempt(s), last: {e}: lock {self.key!r}") from e
                log.info("ZooKeeper lock %s: %s; retrying in %.1fs", self.key, e, min(delay, remaining))
                time.sleep(min(delay, remaining))
                delay = min(delay * 2, p.settings.max_wait_time_ms_between_retry / 1000)

    def _attempt(self, deadline: float, timeout: float) -> ZookeeperLockHandle:
        p = self._provider
        client = p.started_client(self.key)
        if not p.wait_connected(max(deadline, time.monotonic() + _MIN_ROUND_TRIP_S)):
            raise _Retry(f"not connected to ZooKeeper at {p.connect_string}")
        p.sweep_orphans()
        node_id = str(uuid.uuid4())
        node: str | None = None
        done = False
        try:
            node = self._create(client, node_id, deadline, timeout)
            name = node.rsplit("/", 1)[1]
            while True:
                epoch = p.epoch
                try:
                    children = self._wait(client.get_children_async(self.key), deadline, timeout)
                    ordered = sorted(children, key=sort_key)
                    if name not in ordered:
                        raise _Retry(f"our contender node {node} vanished (session expired?)")
                    index = ordered.index(name)
                    if index == 0:
                        handle = ZookeeperLockHandle(self.key, f"{p.owner} node {name}", node=node)
                        if p.register(handle, epoch):
                            done = True
                            return handle
                        continue  # the connection wavered while we looked: look again
                    woken = threading.Event()
                    predecessor = f"{self.key}/{ordered[index - 1]}"
                    try:
                        self._wait(client.get_async(predecessor, watch=_waker(woken)), deadline, timeout)
                    except NoNodeError:
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise lock_timeout(f"not acquired within {timeout:.1f}s", self.key)
                    woken.wait(min(remaining, _MAX_WAIT_SLICE_S))
                except ConnectionLoss:
                    # Our node survives a connection loss within the session: keep our place in the queue.
                    if not p.wait_connected(deadline):
                        raise _Retry("ZooKeeper connection lost") from None
        except SessionExpiredError as e:
            raise _Retry("ZooKeeper session expired") from e
        except NoNodeError as e:
            raise _Retry(f"lock node vanished: {e!r}") from e
        except ConnectionLoss as e:
            raise _Retry("ZooKeeper connection lost") from e
        except KazooException as e:
            raise LockError(f"ZooKeeper error while acquiring: {e!r}: lock {self.key!r}") from e
        finally:
            if not done:
                if node is not None:
                    p.delete_quietly(node, self.key, contender_prefix(node_id))
                else:
                    p.add_orphan(self.key, contender_prefix(node_id))

    def _create(self, client: Any, node_id: str, deadline: float, timeout: float) -> str:
        """Create our contender node; after a connection loss find it again by its protected prefix."""
        p = self._provider
        prefix = contender_prefix(node_id)
        while True:
            result = client.create_async(
                f"{self.key}/{prefix}", p.node_data, ephemeral=True, sequence=True, makepath=True
            )
            try:
                return str(self._wait(result, deadline, timeout))
            except LockError:
                # The create may still reach the server: delete the node should it ever appear.
                result.rawlink(lambda r: p.delete_late(r, self.key, prefix))
                raise
            except ConnectionLoss:
                if not p.wait_connected(deadline):
                    raise _Retry("ZooKeeper connection lost while creating our node") from None
                for child in self._wait(client.get_children_async(self.key), deadline, timeout):
                    if child.startswith(prefix):
                        return f"{self.key}/{child}"

    def _wait(self, result: Any, deadline: float, timeout: float, what: str = "not acquired") -> Any:
        """The value of a kazoo async result, waiting until `deadline` but at least one short round trip
        (so that `acquire(0)` still tries once)."""
        try:
            return result.get(timeout=max(_MIN_ROUND_TRIP_S, deadline - time.monotonic()))
        except KazooTimeoutError:
            raise lock_timeout(f"{what} within {timeout:.1f}s", self.key) from None

    # --- release and holder ------------------------------------------------------------------------

    def release(self, handle: LockHandle) -> None:
        """Delete our node (a node already gone is fine). Never raises for connection trouble: the node is
        ephemeral, and a node that could not be deleted now is deleted once the connection is back."""
        node = handle.node if isinstance(handle, ZookeeperLockHandle) else ""
        self._provider.unregister(node)
        if node:
            self._provider.delete_quietly(node, self.key, protected_prefix_of(node.rsplit("/", 1)[1]))

    def holder(self) -> tuple[str, float] | None:
        """The first contender: `(owner, since)`, `since` being its node's creation time (unix seconds).
        Curator stores no owner; the owner is the node's data (the holder's IP address) and its name."""
        p = self._provider
        wait = p.connection_timeout_s
        deadline = time.monotonic() + wait
        client = p.connected_client(deadline, self.key)
        try:
            children = self._wait(client.get_children_async(self.key), deadline, wait, "contenders not listed")
            for name in sorted(children, key=sort_key):
                try:
                    data, stat = self._wait(client.get_async(f"{self.key}/{name}"), deadline, wait, "node not read")
                except NoNodeError:
                    continue
                mine = p.held_owner(f"{self.key}/{name}")
                if mine is not None:
                    return mine, float(stat.created)
                address = bytes(data).decode("utf-8", "replace") or "unknown host"
                return f"{address} node {name}", float(stat.created)
            return None
        except NoNodeError:
            return None
        except KazooException as e:
            raise LockError(f"cannot read the lock's contenders: {e!r}: lock {self.key!r}") from e


class ZookeeperLockProvider(LockProvider):
    """ZooKeeper locks on `hoodie.write.lock.zookeeper.*`: one kazoo client (one session) shared by the
    provider's locks, connected on first use."""

    name = "zookeeper"

    def __init__(self, settings: LockSettings) -> None:
        connect = settings.zookeeper_connect_string()
        if connect is None or settings.zookeeper_base_path is None:
            raise LockError("hoodie.write.lock.zookeeper.url and .base_path are required for the ZooKeeper lock")
        self.settings = settings
        self.connect_string = connect
        self.connection_timeout_s = settings.zookeeper_connection_timeout_ms / 1000
        self.node_data = curator_default_data()
        self.owner = f"{self.node_data.decode('ascii') or socket.gethostname()} pid {os.getpid()}"
        self._client: Any = KazooClient(
            hosts=connect,
            timeout=settings.zookeeper_session_timeout_ms / 1000,
            connection_retry=KazooRetry(
                max_tries=-1,
                delay=min(0.1, settings.wait_time_ms_between_retry / 1000),
                max_delay=settings.max_wait_time_ms_between_retry / 1000,
            ),
        )
        self._guard = threading.Lock()
        self._connected = threading.Event()
        self._started = False
        self._closed = False
        self._held: dict[str, ZookeeperLockHandle] = {}
        self._orphans: set[tuple[str, str]] = set()
        self.epoch = 0
        self._client.add_listener(self._on_state)

    def table_lock(self, table_name: str, base_path: str) -> ZookeeperTableLock:
        path = self.settings.zookeeper_lock_path(table_name)
        assert path is not None  # checked in __init__
        return ZookeeperTableLock(self, path)

    def lease(self, table_name: str, base_path: str, name: str) -> ZookeeperTableLock:
        """An executor lease: the same Curator-style mutex on `<base_path>/tableservice-leases/<lock key>/<name>`,
        apart from the table lock's node; held while the session lives, lost with it."""
        root = (self.settings.zookeeper_base_path or "/").rstrip("/")
        key = self.settings.zookeeper_lock_key or table_name
        return ZookeeperTableLock(self, f"{root}/tableservice-leases/{key}/{name}")

    def connect(self, timeout_s: float | None = None) -> None:
        """Connect now (default wait: the connection timeout) rather than on first use; LockError if not."""
        wait = self.connection_timeout_s if timeout_s is None else timeout_s
        self.connected_client(time.monotonic() + wait, self.settings.zookeeper_base_path or "/")

    def close(self) -> None:
        """Close the session: ZooKeeper deletes our nodes, and any still-held handle is marked lost."""
        with self._guard:
            self._closed = True
            started, self._started = self._started, False
        if started:
            try:
                self._client.stop()
                self._client.close()
            except KazooException:
                log.warning("closing the ZooKeeper client for %s failed", self.connect_string, exc_info=True)
        self._on_state(KazooState.LOST)

    # --- connection --------------------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        """kazoo's connection-state listener (runs on kazoo's thread: must not block)."""
        sweep = False
        with self._guard:
            if state == KazooState.CONNECTED:
                self._connected.set()
                sweep = bool(self._orphans)
            else:
                self._connected.clear()
                self.epoch += 1
                for handle in self._held.values():
                    handle.lost = True
                if self._held:
                    log.warning("ZooKeeper connection %s: %d held lock(s) marked lost", state, len(self._held))
                if state == KazooState.LOST:
                    self._orphans.clear()  # the session's ephemeral nodes are gone with it
        if sweep:
            self._client.handler.spawn(self._sweep)

    def started_client(self, key: str) -> Any:
        """The kazoo client, started (connecting in the background) on first use."""
        with self._guard:
            if self._closed:
                raise LockError(f"the ZooKeeper lock provider is closed: lock {key!r}")
            if not self._started:
                self._started = True
                self._client.start_async()
        return self._client

    def connected_client(self, deadline: float, key: str) -> Any:
        """The kazoo client, once connected; LockError when not connected by `deadline` (or the connection
        timeout, whichever comes first)."""
        client = self.started_client(key)
        started = time.monotonic()
        if not self.wait_connected(deadline):
            waited = time.monotonic() - started
            raise LockError(f"not connected to ZooKeeper at {self.connect_string} within {waited:.1f}s: lock {key!r}")
        return client

    def sweep_orphans(self) -> None:
        if self._orphans:
            self._sweep()

    def wait_connected(self, deadline: float) -> bool:
        """Wait for the connection until `deadline`, at most the connection timeout."""
        return self._connected.wait(max(0.0, min(deadline - time.monotonic(), self.connection_timeout_s)))

    # --- bookkeeping of held handles and abandoned nodes -------------------------------------------

    def register(self, handle: ZookeeperLockHandle, epoch: int) -> bool:
        """Record a newly held handle, unless the connection wavered since `epoch` (then look again)."""
        with self._guard:
            if epoch != self.epoch or not self._connected.is_set():
                return False
            self._held[handle.node] = handle
            return True

    def unregister(self, node: str) -> None:
        with self._guard:
            self._held.pop(node, None)

    def held_owner(self, node: str) -> str | None:
        with self._guard:
            handle = self._held.get(node)
            return None if handle is None else handle.owner

    def add_orphan(self, lock_path: str, prefix: str) -> None:
        """Remember a node of ours whose fate is unknown; it is deleted once the connection is back."""
        with self._guard:
            self._orphans.add((lock_path, prefix))
        if self._connected.is_set():
            self._client.handler.spawn(self._sweep)

    def delete_quietly(self, node: str, lock_path: str, prefix: str) -> None:
        """Delete one of our nodes; a node already gone is fine; on connection trouble, an orphan (deleted
        once the connection is back). Does not wait for a connection that is down."""
        if not self._connected.is_set():
            self.add_orphan(lock_path, prefix)
            return
        try:
            self._client.delete_async(node).get(timeout=self.connection_timeout_s)
        except NoNodeError:
            pass
        except SessionExpiredError:
            pass  # ephemeral: gone with the session
        except (KazooException, KazooTimeoutError) as e:
            log.warning("could not delete ZooKeeper lock node %s (%r); will retry on reconnect", node, e)
            self.add_orphan(lock_path, prefix)

    def delete_late(self, result: Any, lock_path: str, prefix: str) -> None:
        """rawlink callback for an abandoned create: delete its node if it was made after all."""
        if result.successful():
            self._client.handler.spawn(self.delete_quietly, result.value, lock_path, prefix)

    def _sweep(self) -> None:
        """Delete abandoned nodes of ours (found by their protected prefixes)."""
        with self._guard:
            orphans = list(self._orphans)
        for lock_path, prefix in orphans:
            try:
                children = self._client.get_children_async(lock_path).get(timeout=self.connection_timeout_s)
                for child in children:
                    if child.startswith(prefix):
                        self._client.delete_async(f"{lock_path}/{child}").get(timeout=self.connection_timeout_s)
                with self._guard:
                    self._orphans.discard((lock_path, prefix))
            except NoNodeError:
                with self._guard:
                    self._orphans.discard((lock_path, prefix))
            except (KazooException, KazooTimeoutError):
                log.info("sweeping abandoned ZooKeeper nodes under %s failed; will retry", lock_path)
