"""The ZooKeeper lock against a real ZooKeeper server and a real Apache Curator client (Hudi's lock).

Needs Debian's `zookeeper` and `libcurator-recipes-java` and a JDK (`./dev test` installs them). Outside CI the
real-server tests skip with the reason; with CI=true they fail instead.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tableservice.config.locks import LockSettings
from tableservice.errors import LockError, LockLostError
from tableservice.locks.base import LockProvider
from tableservice.locks.zookeeper import (
    ZookeeperLockHandle,
    ZookeeperLockProvider,
    contender_prefix,
    curator_default_data,
    protected_prefix_of,
    sort_key,
)
from tests.support.zk.server import CuratorProcess, ZooKeeperServer, compile_contender

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
BASE_PATH = "/hudi/locks"
SESSION_MS = 10_000  # long enough not to expire on a loaded CI machine
SHORT_SESSION_MS = 2000  # for the session-loss tests
CURATOR_NAME = re.compile(r"^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-lock-\d{10}$")


# --- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def curator_classpath(zk_tools: None, tmp_path_factory: pytest.TempPathFactory) -> str:
    return compile_contender(tmp_path_factory.mktemp("curator-classes"))


@pytest.fixture()
def curator(zk_server: ZooKeeperServer, curator_classpath: str, tmp_path: Path) -> Iterator[CuratorProcess]:
    process = CuratorProcess(curator_classpath, zk_server.connect_string, 4000, tmp_path / "curator.err")
    yield process
    process.close()


def settings_for(server: ZooKeeperServer, **extra: Any) -> LockSettings:
    raw: dict[str, Any] = {
        "hoodie.write.lock.provider": "zookeeper",
        "hoodie.write.lock.zookeeper.url": "127.0.0.1",
        "hoodie.write.lock.zookeeper.port": server.port,
        "hoodie.write.lock.zookeeper.base_path": BASE_PATH,
        "hoodie.write.lock.zookeeper.session_timeout_ms": SESSION_MS,
        "hoodie.write.lock.zookeeper.connection_timeout_ms": 2000,
        "hoodie.write.lock.wait_time_ms": 5000,
        "hoodie.write.lock.num_retries": 3,
        "hoodie.write.lock.wait_time_ms_between_retry": 100,
        "hoodie.write.lock.max_wait_time_ms_between_retry": 500,
    }
    raw.update(extra)
    return LockSettings.model_validate(raw)


@pytest.fixture()
def providers(zk_server: ZooKeeperServer) -> Iterator[list[ZookeeperLockProvider]]:
    made: list[ZookeeperLockProvider] = []
    yield made
    for p in made:
        p.close()


def new_provider(made: list[ZookeeperLockProvider], server: ZooKeeperServer, **extra: Any) -> ZookeeperLockProvider:
    provider = ZookeeperLockProvider(settings_for(server, **extra))
    made.append(provider)
    provider.connect()
    return provider


def table_name() -> str:
    return f"t_{uuid.uuid4().hex[:10]}"


def children(provider: ZookeeperLockProvider, path: str) -> list[str]:
    names: list[str] = provider._client.get_children(path)
    return sorted(names, key=sort_key)


def wait_until(condition: Any, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{what} not seen within {timeout}s")
        time.sleep(0.02)
    return time.monotonic() - started


# --- pure helpers (no server) ------------------------------------------------------------------------


def test_curator_naming_and_ordering_rules() -> None:
    node_id = "0f8e3c1a-2b4d-4e6f-8a9b-0c1d2e3f4a5b"
    assert contender_prefix(node_id) == f"_c_{node_id}-lock-"
    name = contender_prefix(node_id) + "0000000042"
    assert CURATOR_NAME.match(name)
    assert sort_key(name) == "0000000042"
    assert protected_prefix_of(name) == contender_prefix(node_id)
    # Curator orders by the sequence, not by the random prefix; a name without `lock-` sorts as a whole.
    names = ["_c_ffff-lock-0000000003", "_c_0000-lock-0000000007", "abc__lock__0000000001", "_c_aaaa-lock-0000000005"]
    assert sorted(names, key=sort_key) == [
        "_c_ffff-lock-0000000003",
        "_c_aaaa-lock-0000000005",
        "_c_0000-lock-0000000007",
        "abc__lock__0000000001",
    ]


def test_provider_is_a_lock_provider_and_needs_zookeeper_settings() -> None:
    assert issubclass(ZookeeperLockProvider, LockProvider)
    assert ZookeeperLockProvider.name == "zookeeper"
    with pytest.raises(LockError, match=r"zookeeper\.url"):
        ZookeeperLockProvider(LockSettings())


# --- real server: our lock alone -----------------------------------------------------------------------


@pytest.mark.zookeeper
def test_acquire_release_timeout_and_holder(zk_server: ZooKeeperServer, providers: list[ZookeeperLockProvider]) -> None:
    a = new_provider(providers, zk_server)
    b = new_provider(providers, zk_server)
    name = table_name()
    lock_a = a.table_lock(name, f"/data/{name}")
    lock_b = b.table_lock(name, f"/data/{name}")
    path = f"{BASE_PATH}/{name}"
    assert lock_a.key == path  # lock_key defaults to the table name, as in Hudi
    assert lock_a.holder() is None

    before = time.time()
    handle = lock_a.acquire(5)
    assert isinstance(handle, ZookeeperLockHandle) and not handle.lost
    (node,) = children(a, path)
    assert CURATOR_NAME.match(node), node
    assert handle.node == f"{path}/{node}"
    data, stat = a._client.get(handle.node)
    assert data == curator_default_data()
    assert stat.ephemeralOwner == a._client.client_id[0]

    owner, since = lock_a.holder() or ("", 0.0)
    assert owner == handle.owner and node in owner
    assert before - 1 <= since <= time.time() + 1
    owner_b, since_b = lock_b.holder() or ("", 0.0)
    assert node in owner_b and data.decode() in owner_b and since_b == since

    started = time.monotonic()
    with pytest.raises(LockError, match=re.escape(path)) as failed:
        lock_b.acquire(0.5)
    assert not isinstance(failed.value, LockLostError)
    assert 0.4 <= time.monotonic() - started < 3.0
    assert children(a, path) == [node]  # the loser cleaned up its node

    lock_a.release(handle)
    assert children(a, path) == []
    assert lock_a.holder() is None
    lock_a.release(handle)  # a second release is harmless

    handle_b = lock_b.acquire(0)  # a zero timeout tries once
    (node_b,) = children(b, path)
    assert sort_key(node_b) > sort_key(node)  # sequences keep growing under the lock path
    with pytest.raises(LockError, match=r"not acquired within 0\.0s"):
        lock_a.acquire(0)
    assert children(a, path) == [node_b]
    lock_b.release(handle_b)


@pytest.mark.zookeeper
def test_waiter_takes_over_in_queue_order(zk_server: ZooKeeperServer, providers: list[ZookeeperLockProvider]) -> None:
    name = table_name()
    locks = [new_provider(providers, zk_server).table_lock(name, "/x") for _ in range(3)]
    first = locks[0].acquire(5)
    order: list[int] = []
    overlap = threading.Lock()

    def contend(i: int) -> None:
        handle = locks[i].acquire()  # default timeout: wait_time_ms (5 s)
        assert overlap.acquire(blocking=False), "two holders at once"
        order.append(i)
        time.sleep(0.05)
        overlap.release()
        locks[i].release(handle)

    threads = []
    for i in (1, 2):
        threads.append(threading.Thread(target=contend, args=(i,)))
        threads[-1].start()
        wait_until(lambda n=i: len(children(providers[0], locks[0].key)) == n + 1, 5, f"contender {i}")
    time.sleep(0.2)
    assert order == []
    locks[0].release(first)
    for t in threads:
        t.join(10)
    assert order == [1, 2]


# --- real server: with Curator (Hudi's lock) ------------------------------------------------------------


@pytest.mark.zookeeper
def test_curator_and_us_exclude_each_other(
    zk_server: ZooKeeperServer, providers: list[ZookeeperLockProvider], curator: CuratorProcess
) -> None:
    provider = new_provider(providers, zk_server)
    name = table_name()
    lock = provider.table_lock(name, "/x")

    # Curator holds: we time out; its node looks like ours.
    answer = curator.command(f"acquire {lock.key} 5000")
    assert answer.startswith(f"ACQUIRED {lock.key}/_c_"), answer
    curator_node = answer.split()[1].rsplit("/", 1)[1]
    assert CURATOR_NAME.match(curator_node)
    data, _ = provider._client.get(f"{lock.key}/{curator_node}")
    assert data == curator_default_data()  # Curator's default data: the client's address, as we write it
    owner, _ = lock.holder() or ("", 0.0)
    assert curator_node in owner
    with pytest.raises(LockError, match=re.escape(lock.key)):
        lock.acquire(0.5)

    # Curator releases while we wait: we get it.
    got: list[ZookeeperLockHandle] = []
    waiter = threading.Thread(target=lambda: got.append(lock.acquire(10)))
    waiter.start()
    wait_until(lambda: len(children(provider, lock.key)) == 2, 5, "our contender node")
    assert curator.command(f"release {lock.key}") == "RELEASED"
    waiter.join(10)
    assert len(got) == 1 and not got[0].lost

    # We hold: Curator times out, then gets it after our release.
    assert curator.command(f"acquire {lock.key} 700") == "TIMEOUT"
    lock.release(got[0])
    assert curator.command(f"acquire {lock.key} 5000").startswith("ACQUIRED")
    assert curator.command(f"release {lock.key}") == "RELEASED"


@pytest.mark.zookeeper
def test_alternation_with_curator_never_overlaps(
    zk_server: ZooKeeperServer, providers: list[ZookeeperLockProvider], curator: CuratorProcess, tmp_path: Path
) -> None:
    rounds, hold_ms, pause_ms = 60, 4, 8
    lock = new_provider(providers, zk_server).table_lock(table_name(), "/x")
    log_path = tmp_path / "sections.log"
    log_path.touch()
    started = time.monotonic()
    curator.send(f"contend {lock.key} {rounds} {hold_ms} {pause_ms} {log_path} 20000")
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    try:
        for _ in range(rounds):
            handle = lock.acquire(20)
            os.write(fd, f"python enter {time.time_ns()}\n".encode())
            time.sleep(hold_ms / 1000)
            handle.check()
            os.write(fd, f"python exit {time.time_ns()}\n".encode())
            lock.release(handle)
            time.sleep(random.uniform(0, pause_ms / 1000))
    finally:
        os.close(fd)
    assert curator.read(30) == f"DONE {rounds}"
    elapsed = time.monotonic() - started

    lines = [line.split() for line in log_path.read_text().splitlines()]
    assert len(lines) == 4 * rounds
    holders: list[str] = []
    last_time = 0
    for i in range(0, len(lines), 2):
        (who, enter, t_enter), (who2, leave, t_exit) = lines[i], lines[i + 1]
        assert (enter, leave, who2) == ("enter", "exit", who), f"overlap at line {i}: {lines[i : i + 2]}"
        assert last_time <= int(t_enter) <= int(t_exit), f"clock overlap at line {i}"
        last_time = int(t_exit)
        holders.append(who)
    assert holders.count("python") == rounds and holders.count("curator") == rounds
    alternations = sum(1 for x, y in itertools.pairwise(holders) if x != y)
    print(f"{2 * rounds} critical sections, {alternations} hand-overs between Curator and us in {elapsed:.1f}s")
    assert alternations >= 50


@pytest.mark.zookeeper
def test_kazoo_stock_lock_is_not_seen_by_curator(
    zk_server: ZooKeeperServer, providers: list[ZookeeperLockProvider], curator: CuratorProcess
) -> None:
    """Why the node names matter: kazoo's own Lock recipe (`<hex>__lock__<seq>`) does not exclude Curator."""
    from kazoo.recipe.lock import Lock

    provider = new_provider(providers, zk_server)
    path = f"{BASE_PATH}/{table_name()}"
    stock = Lock(provider._client, path, "stock kazoo")
    assert stock.acquire(timeout=5)
    try:
        answer = curator.command(f"acquire {path} 2000")
        assert answer.startswith("ACQUIRED"), "Curator should (wrongly) get the lock kazoo's recipe holds"
        assert curator.command(f"release {path}") == "RELEASED"
    finally:
        stock.release()


# --- real server: session loss ----------------------------------------------------------------------------


@pytest.fixture()
def own_server(zk_tools: None, tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A server of the test's own, free to be stopped and restarted."""
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    yield server
    server.stop()


@pytest.mark.zookeeper
def test_server_stop_marks_held_lock_lost_and_restart_recovers(
    own_server: ZooKeeperServer, providers: list[ZookeeperLockProvider]
) -> None:
    name = table_name()
    a = new_provider(providers, own_server, **{"hoodie.write.lock.zookeeper.session_timeout_ms": SHORT_SESSION_MS})
    lock = a.table_lock(name, "/x")
    with pytest.raises(LockLostError, match=re.escape(lock.key)), lock.hold(5) as handle:
        handle.check()
        own_server.stop()
        waited = wait_until(lambda: handle.lost, 10, "lock marked lost")
        print(f"held lock marked lost {waited:.2f}s after the server stopped")
        with pytest.raises(LockLostError):
            handle.check()
        # While the server is down, nobody gets the lock and acquiring fails in bounded time.
        started = time.monotonic()
        with pytest.raises(LockError):
            lock.acquire(1.0)
        assert time.monotonic() - started < 10
    assert handle.lost  # never reported as held again

    own_server.start()
    b = new_provider(providers, own_server)
    other = b.table_lock(name, "/x")
    started = time.monotonic()
    handle_b = other.acquire(15)  # our node was deleted on reconnect, or went with the expired session
    print(f"another provider acquired {time.monotonic() - started:.2f}s after the restart")
    assert not handle_b.lost and handle.lost
    other.release(handle_b)
    again = lock.acquire(5)  # the first provider recovers too
    assert not again.lost
    lock.release(again)


@pytest.mark.zookeeper
def test_expired_session_marks_lost_and_frees_the_lock(
    own_server: ZooKeeperServer, providers: list[ZookeeperLockProvider]
) -> None:
    from kazoo.client import KazooClient

    name = table_name()
    a = new_provider(providers, own_server, **{"hoodie.write.lock.zookeeper.session_timeout_ms": SHORT_SESSION_MS})
    b = new_provider(providers, own_server)
    lock = a.table_lock(name, "/x")
    handle = lock.acquire(5)
    session_id, password = a._client.client_id

    # A second client on the same session closes it: the server expires it and deletes its ephemeral nodes.
    twin = KazooClient(
        hosts=own_server.connect_string, client_id=(session_id, password), timeout=SHORT_SESSION_MS / 1000
    )
    twin.start(timeout=10)
    twin.stop()
    twin.close()

    waited = wait_until(lambda: handle.lost, 10, "lock marked lost")
    print(f"lock marked lost {waited:.2f}s after its session was closed")
    with pytest.raises(LockLostError):
        handle.check()
    handle_b = b.table_lock(name, "/x").acquire(5)  # the node went with the session
    assert not handle_b.lost
    b.table_lock(name, "/x").release(handle_b)

    lock.release(handle)
    wait_until(lambda: a._client.connected, 10, "a new session")
    assert a._client.client_id[0] != session_id
    again = lock.acquire(5)
    assert not again.lost
    lock.release(again)


def test_executor_lease_is_exclusive_and_apart_from_the_table_lock(
    zk_server: ZooKeeperServer, providers: list[ZookeeperLockProvider]
) -> None:
    """Two replicas (two sessions): one holds the lease, the other cannot take it; the table lock stays free for
    writers meanwhile; the lease is lost with its holder's session and then free for the other replica."""
    first = new_provider(providers, zk_server)
    second = new_provider(providers, zk_server)
    name = table_name()
    lease_a = first.lease(name, "/t", "compaction-20250101000000000")
    lease_b = second.lease(name, "/t", "compaction-20250101000000000")
    held = lease_a.acquire(2.0)
    with pytest.raises(LockError):
        lease_b.acquire(0.2)
    table_lock = second.table_lock(name, "/t")
    writer = table_lock.acquire(2.0)  # a writer's table lock is not blocked by the lease
    table_lock.release(writer)
    assert "tableservice-leases" in held.key and held.key != table_lock.key
    first.close()  # the holder's session ends (a killed replica)
    assert held.lost
    taken = lease_b.acquire(5.0)
    lease_b.release(taken)
