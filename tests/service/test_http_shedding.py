"""The HTTP endpoints under a crowd of idle and trickling connections: probes are answered at once, open
connections stay bounded, the idlest are closed first."""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import pytest

from tableservice.service.http import ConnectionStats, HttpLimits
from tests.service.test_http import HOST, get, make_daemon, parse_reply, raw_exchange, running

pytestmark = pytest.mark.anyio

PROBE_BOUND_SECONDS = 2.0
TRICKLE = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


async def connect(port: int) -> socket.socket:
    """A plain non-blocking client socket, connected without blocking the event loop (the server shares it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    error = sock.connect_ex((HOST, port))
    if error == errno.EINPROGRESS:
        await anyio.wait_writable(sock)
        error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if error:
        sock.close()
        raise OSError(error, f"connecting to {HOST}:{port} failed")
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed this connection (EOF or reset waiting), without consuming anything."""
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


@contextmanager
def closing_all() -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    try:
        yield socks
    finally:
        for sock in socks:
            sock.close()


async def trickle(socks: list[socket.socket]) -> None:
    """One byte a second on every socket, of a request head that is never finished here."""
    for byte in TRICKLE:
        for sock in socks:
            sock.send(bytes([byte]))
        await anyio.sleep(1.0)


async def test_probes_are_answered_at_once_while_hundreds_of_idle_and_slow_connections_are_open() -> None:
    daemon, routes = make_daemon()
    daemon.health.set_ready(True)
    # Timeouts far beyond the test: only shedding can make room here.
    limits = HttpLimits(
        first_byte_timeout_seconds=60.0, read_timeout_seconds=60.0, linger_seconds=0.2, max_connections=100
    )
    stats = ConnectionStats()
    latencies: list[tuple[str, int, float]] = []

    async def probe(path: str) -> None:
        start = time.monotonic()
        with anyio.fail_after(10):
            reply = await get(port, path)
        latencies.append((path, reply.status, time.monotonic() - start))

    with closing_all() as idle, closing_all() as slow:
        async with running(routes, limits, stats=stats) as port, anyio.create_task_group() as clients:
            for _ in range(300):
                idle.append(await connect(port))
            for _ in range(20):
                slow.append(await connect(port))
            clients.start_soon(trickle, slow)
            await anyio.sleep(1.5)  # the slow ones have sent two bytes each by now
            async with anyio.create_task_group() as probes:
                for i in range(50):
                    probes.start_soon(probe, ("/healthz", "/readyz", "/metrics")[i % 3])
            open_after_probes, peak = stats.open, stats.peak_open
            with anyio.move_on_after(3):  # until every close the server made has reached the clients
                while sum(map(closed_by_server, idle + slow)) < stats.shed:
                    await anyio.sleep(0.05)
            idle_closed = [closed_by_server(sock) for sock in idle]
            slow_closed = [closed_by_server(sock) for sock in slow]
            clients.cancel_scope.cancel()

    assert sorted(status for _, status, _ in latencies) == [200] * 50
    slowest = max(latencies, key=lambda item: item[2])
    assert slowest[2] < PROBE_BOUND_SECONDS, f"slowest probe: {slowest}"
    # Every connection was taken, never more than the limit open at once.
    assert stats.accepted == 300 + 20 + 50
    assert peak <= 100 and open_after_probes <= 100
    # The idlest went first: the oldest idle connections, in order; the slow ones (younger, making progress)
    # and the rest of the idle ones are still open. What was shed is exactly what the clients saw closed.
    shed = sum(idle_closed)
    assert idle_closed == [True] * shed + [False] * (300 - shed)
    assert 300 + 20 - 100 <= shed <= 300 + 20 + 50 - 100
    assert slow_closed == [False] * 20
    assert stats.shed == shed


async def test_over_the_limit_the_connection_with_the_oldest_progress_is_closed() -> None:
    _, routes = make_daemon()
    limits = HttpLimits(
        first_byte_timeout_seconds=30.0, read_timeout_seconds=30.0, linger_seconds=0.1, max_connections=2
    )
    stats = ConnectionStats()
    async with running(routes, limits, stats=stats) as port:
        first = await anyio.connect_tcp(HOST, port)
        second = await anyio.connect_tcp(HOST, port)
        await anyio.sleep(0.2)
        await first.send(b"GET /hea")  # the first connected, but the second has been silent for longer
        await anyio.sleep(0.3)
        probe = await get(port, "/healthz")
        with anyio.fail_after(2), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await second.receive()  # closed without a response
        await first.send(b"lthz HTTP/1.1\r\n\r\n")
        finished = b""
        with anyio.fail_after(5):
            while True:
                try:
                    finished += await first.receive()
                except anyio.EndOfStream:
                    break
        await first.aclose()
        await second.aclose()
    assert probe.status == 200
    assert parse_reply(finished).status == 200
    assert (stats.accepted, stats.shed, stats.peak_open) == (3, 1, 2)


async def test_silent_clients_are_closed_at_the_first_byte_deadline_and_slow_ones_get_408() -> None:
    _, routes = make_daemon()
    limits = HttpLimits(first_byte_timeout_seconds=0.2, read_timeout_seconds=1.0, linger_seconds=0.1)
    async with running(routes, limits) as port:
        timings: dict[str, tuple[float, bytes]] = {}

        async def timed(name: str, data: bytes) -> None:
            start = time.monotonic()
            received = await raw_exchange(port, data)
            timings[name] = (time.monotonic() - start, received)

        async with anyio.create_task_group() as tg:
            tg.start_soon(timed, "silent", b"")
            tg.start_soon(timed, "slow", b"GET /healthz HTTP/1.1\r\n")
    silent_seconds, silent_reply = timings["silent"]
    slow_seconds, slow_reply = timings["slow"]
    assert silent_reply == b""
    assert parse_reply(slow_reply).status == 408
    assert 0.15 <= silent_seconds < 0.9 <= slow_seconds
