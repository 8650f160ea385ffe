from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tableservice.metrics import Metrics
from tableservice.service.http import (
    Handler,
    HealthState,
    HttpLimits,
    Request,
    Response,
    serve_http,
    service_routes,
)

pytestmark = pytest.mark.anyio

HOST = "127.0.0.1"
FAST = HttpLimits(read_timeout_seconds=0.3, write_timeout_seconds=2.0, linger_seconds=0.2)


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Daemon:
    metrics: Metrics
    health: HealthState
    clock: FakeClock
    status: dict[str, object]


def make_daemon() -> tuple[Daemon, dict[str, Handler]]:
    clock = FakeClock()
    daemon = Daemon(
        Metrics(CollectorRegistry(), version="1.2.3"),
        HealthState(stale_after_seconds=30.0, clock=clock),
        clock,
        {"tables": {"trips": {"pending": 2}}, "uptime_seconds": 12.5},
    )
    return daemon, service_routes(metrics=daemon.metrics, health=daemon.health, status=lambda: daemon.status)


@asynccontextmanager
async def running(routes: Mapping[str, Handler], limits: HttpLimits = FAST, **options: Any) -> AsyncIterator[int]:
    """Serves `routes` on a free loopback port; `options` go to serve_http (bearer_token, stats...)."""
    async with anyio.create_task_group() as tg:
        port: int = await tg.start(partial(serve_http, HOST, 0, routes, limits=limits, **options))
        try:
            yield port
        finally:
            tg.cancel_scope.cancel()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


def parse_reply(raw: bytes) -> Reply:
    head, sep, body = raw.partition(b"\r\n\r\n")
    assert sep, f"no complete response head in {raw!r}"
    lines = head.decode("latin-1").split("\r\n")
    version, status, _ = lines[0].split(" ", 2)
    assert version == "HTTP/1.1"
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.lower()] = value.strip()
    return Reply(int(status), headers, body)


async def raw_exchange(port: int, data: bytes, *, close_write: bool = False) -> bytes:
    """Send `data`, then read until the server closes the connection."""
    async with await anyio.connect_tcp(HOST, port) as stream:
        if data:
            await stream.send(data)
        if close_write:
            await stream.send_eof()
        received = b""
        with anyio.fail_after(5):
            while True:
                try:
                    received += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return received


async def get(port: int, path: str, *, method: str = "GET", headers: str = "") -> Reply:
    request = f"{method} {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n{headers}\r\n".encode()
    return parse_reply(await raw_exchange(port, request))


def urllib_fetch(url: str, method: str = "GET", data: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method, data=data)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


async def test_scrape_metrics_with_urllib() -> None:
    daemon, routes = make_daemon()
    daemon.metrics.action_completed("trips", "compaction", duration_seconds=90.0)
    daemon.metrics.set_pending("trips", "compaction", count=4, oldest_age_seconds=600.0)
    async with running(routes) as port:
        status, headers, body = await anyio.to_thread.run_sync(urllib_fetch, f"http://{HOST}:{port}/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    assert headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)
    values = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode("utf-8"))
        for sample in family.samples
    }
    labels = (("action", "compaction"), ("table", "trips"))
    assert values[("tableservice_actions_completed_total", labels)] == 1.0
    assert values[("tableservice_action_duration_seconds_sum", labels)] == 90.0
    assert values[("tableservice_pending_actions", labels)] == 4.0
    build = {dict(labels)["version"]: value for (name, labels), value in values.items() if name.endswith("build_info")}
    assert build == {"1.2.3": 1.0}
    assert values[("tableservice_up", ())] == 1.0


async def test_a_scrape_renders_off_the_event_loop() -> None:
    """Rendering a thousand tables' series takes most of a second: it runs in a worker thread, and the event loop
    (every table's schedule) goes on meanwhile."""
    daemon, routes = make_daemon()
    render = daemon.metrics.render
    rendered_in: list[int] = []
    release = threading.Event()

    def slow_render(accept: str | None = None) -> tuple[bytes, str]:
        rendered_in.append(threading.get_ident())
        release.wait(5)  # a long render: the loop must keep running while it lasts
        return render(accept)

    daemon.metrics.render = slow_render  # type: ignore[method-assign]
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    async with running(routes) as port, anyio.create_task_group() as tg:
        tg.start_soon(tick)
        scrape = partial(urllib_fetch, f"http://{HOST}:{port}/metrics")
        got: list[tuple[int, dict[str, str], bytes]] = []

        async def fetch() -> None:
            got.append(await anyio.to_thread.run_sync(scrape))

        tg.start_soon(fetch)
        while not rendered_in:
            await anyio.sleep(0.01)
        before = ticks
        await anyio.sleep(0.2)
        during = ticks - before
        release.set()
        while not got:
            await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert rendered_in[0] != threading.get_ident()
    assert during >= 5, f"the event loop stood still during the render ({during} ticks in 0.2 s)"
    status, _, body = got[0]
    assert status == 200 and b"tableservice_up 1.0" in body


async def test_metrics_openmetrics_negotiation_and_head() -> None:
    daemon, routes = make_daemon()
    daemon.metrics.action_failed("trips", "clean")
    async with running(routes) as port:
        om = await get(port, "/metrics", headers="Accept: application/openmetrics-text; version=1.0.0\r\n")
        head = await get(port, "/metrics", method="HEAD")
        full = await get(port, "/metrics")
    assert om.status == 200
    assert om.headers["content-type"].startswith("application/openmetrics-text")
    assert om.body.endswith(b"# EOF\n")
    assert b'tableservice_actions_failed_total{action="clean",table="trips"} 1.0' in om.body
    assert head.status == 200
    assert head.body == b""
    assert int(head.headers["content-length"]) == len(full.body) > 0


async def test_healthz_turns_503_when_the_beat_is_stale() -> None:
    daemon, routes = make_daemon()
    async with running(routes) as port:
        fresh = await get(port, "/healthz")
        daemon.clock.now += 29.0
        still = await get(port, "/healthz")
        daemon.clock.now += 2.0
        stale = await get(port, "/healthz")
        daemon.health.beat()
        again = await get(port, "/healthz")
    assert (fresh.status, still.status, stale.status, again.status) == (200, 200, 503, 200)
    assert stale.body == b"stale: last heartbeat 31.0s ago (threshold 30s)\n"
    assert again.body == b"ok: last heartbeat 0.0s ago\n"


async def test_readyz_reflects_readiness() -> None:
    daemon, routes = make_daemon()
    spark_up = False

    def spark() -> bool:
        return spark_up

    def broken() -> bool:
        raise RuntimeError("session\nclosed")

    async with running(routes) as port:
        starting = await get(port, "/readyz")
        daemon.health.set_ready(False, "config not loaded: /etc/ts.yaml")
        no_config = await get(port, "/readyz")
        daemon.health.set_ready(True)
        ready = await get(port, "/readyz")
        daemon.health.add_readiness_check("spark", spark)
        no_spark = await get(port, "/readyz")
        spark_up = True
        with_spark = await get(port, "/readyz")
        daemon.health.add_readiness_check("probe", broken)
        failing = await get(port, "/readyz")
        daemon.health.remove_readiness_check("probe")
        daemon.health.set_ready(False, "shutting down")
        stopping = await get(port, "/readyz")
    assert (starting.status, starting.body) == (503, b"not ready: starting\n")
    assert (no_config.status, no_config.body) == (503, b"not ready: config not loaded: /etc/ts.yaml\n")
    assert (ready.status, ready.body) == (200, b"ready\n")
    assert (no_spark.status, no_spark.body) == (503, b"not ready: spark\n")
    assert with_spark.status == 200
    assert (failing.status, failing.body) == (503, b"not ready: probe check failed: RuntimeError: session closed\n")
    assert (stopping.status, stopping.body) == (503, b"not ready: shutting down\n")


async def test_status_json() -> None:
    daemon, routes = make_daemon()
    async with running(routes) as port:
        status, headers, body = await anyio.to_thread.run_sync(urllib_fetch, f"http://{HOST}:{port}/status")
        daemon.status["tables"] = {}
        second = await get(port, "/status?pretty=1")
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {"tables": {"trips": {"pending": 2}}, "uptime_seconds": 12.5}
    assert json.loads(second.body) == {"tables": {}, "uptime_seconds": 12.5}


async def test_no_status_route_without_callable_and_handler_errors_are_500() -> None:
    metrics = Metrics(CollectorRegistry())
    routes = service_routes(metrics=metrics, health=HealthState())
    assert sorted(routes) == ["/healthz", "/metrics", "/readyz"]

    async def boom(request: Request) -> Response:
        raise KeyError("gone")

    async def echo(request: Request) -> Response:
        return Response.json(200, {"path": request.path, "query": request.query, "ua": request.headers["user-agent"]})

    async with running({**routes, "/boom": boom, "/echo": echo}) as port:
        missing = await get(port, "/status")
        failed = await get(port, "/boom")
        absolute = await get(port, "http://example.org/echo?x=1", headers="User-Agent: a\r\nuser-agent: b\r\n")
        alive = await get(port, "/healthz")
    assert missing.status == 404
    assert (failed.status, failed.body) == (500, b"internal error: KeyError: 'gone'\n")
    assert json.loads(absolute.body) == {"path": "/echo", "query": "x=1", "ua": "a, b"}
    assert alive.status == 200


async def test_404_and_405() -> None:
    _, routes = make_daemon()
    async with running(routes) as port:
        not_found = await get(port, "/nope")
        trailing = await get(port, "/metrics/")
        status, headers, body = await anyio.to_thread.run_sync(
            lambda: urllib_fetch(f"http://{HOST}:{port}/metrics", "POST", b"x=1" * 1000)
        )
        delete = await get(port, "/healthz", method="DELETE")
    assert (not_found.status, not_found.body) == (404, b"not found: /nope\n")
    assert trailing.status == 404
    assert (status, body) == (405, b"method not allowed: POST\n")
    assert headers["allow"] == "GET, HEAD"
    assert delete.status == 405


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"\x00\xff\xfe garbage\r\n\r\n", 400),
        (b"GET /healthz\r\n\r\n", 400),
        (b"GET /healthz HTTP/2.0\r\n\r\n", 505),
        (b"GET /healthz SPDY/3\r\n\r\n", 400),
        (b"GET healthz HTTP/1.1\r\n\r\n", 400),
        (b"G(T /healthz HTTP/1.1\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n", 431),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n", 408),  # head never finished
    ],
)
async def test_bad_requests_get_an_error_and_the_server_keeps_serving(data: bytes, status: int) -> None:
    _, routes = make_daemon()
    async with running(routes) as port:
        reply = parse_reply(await raw_exchange(port, data))
        after = await get(port, "/healthz")
    assert reply.status == status
    assert reply.headers["connection"] == "close"
    assert after.status == 200


async def test_silent_and_vanishing_clients() -> None:
    _, routes = make_daemon()
    async with running(routes) as port:
        with anyio.fail_after(3):
            # connects and says nothing: closed without a response after the read timeout
            assert await raw_exchange(port, b"") == b""
            # sends half a request and hangs up
            assert await raw_exchange(port, b"GET /heal", close_write=True) == b""
            # connects and resets at once
            stream = await anyio.connect_tcp(HOST, port)
            await anyio.aclose_forcefully(stream)
        after = await get(port, "/healthz")
    assert after.status == 200


async def test_server_stops_when_cancelled() -> None:
    _, routes = make_daemon()
    limits = HttpLimits(read_timeout_seconds=60.0)
    async with running(routes, limits) as port:
        reply = await get(port, "/healthz")
        idle = await anyio.connect_tcp(HOST, port)
    # the task group has exited: the open connection was closed and the port no longer accepts
    assert reply.status == 200
    with anyio.fail_after(2):
        with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await idle.receive()
    await idle.aclose()
    with pytest.raises(OSError):
        await anyio.connect_tcp(HOST, port)


async def test_cancelling_an_outer_scope_stops_serve_http_cleanly() -> None:
    _, routes = make_daemon()
    with anyio.move_on_after(0.3) as scope:
        async with anyio.create_task_group() as tg:
            port = await tg.start(serve_http, HOST, 0, routes)
            assert (await get(port, "/readyz")).status == 503
    assert scope.cancelled_caught
    with pytest.raises(OSError):
        await anyio.connect_tcp(HOST, port)


async def test_bind_failure_raises() -> None:
    _, routes = make_daemon()
    async with running(routes) as port:
        with pytest.raises(OSError):
            await serve_http(HOST, port, routes)


def test_health_state_rejects_bad_threshold() -> None:
    with pytest.raises(ValueError, match="stale_after_seconds"):
        HealthState(stale_after_seconds=0)


def test_routes_must_be_paths() -> None:
    async def ok(request: Request) -> Response:
        return Response.text(200, "ok")

    async def main() -> None:
        await serve_http(HOST, 0, {"healthz": ok})

    with pytest.raises(ValueError, match="must start with '/'"):
        anyio.run(main)
