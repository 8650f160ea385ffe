"""The daemon's HTTP endpoints: a minimal HTTP/1.1 server on anyio.

    /metrics   the Prometheus registry (classic text format, or OpenMetrics when the Accept header asks)
    /healthz   200 while the service loop's heartbeat is fresh, 503 once it is older than a threshold
    /readyz    200 when the service says it is ready (config loaded, Spark up...), 503 with a reason otherwise
    /status    JSON from a callable the service provides

The server answers GET and HEAD, one request per connection (`Connection: close`), 404 for unknown paths and
405 for other methods on known ones. A client gets `read_timeout_seconds` to send its request head of at most
`max_head_bytes`; slow, silent, oversized or garbled requests are answered 408, 431 or 400, or simply closed,
and never disturb other connections.

`serve_http` runs until its cancel scope is cancelled, inside the caller's task group:

    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, "0.0.0.0", 9464, service_routes(metrics=m, health=h, status=s))
        ...
        tg.cancel_scope.cancel()   # stops accepting, closes open connections and the listening sockets
"""

from __future__ import annotations

import email.utils
import http
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketAttribute, SocketListener, SocketStream, TaskGroup, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream

from tableservice.metrics import Metrics

__all__ = [
    "DEFAULT_LIMITS",
    "Handler",
    "HealthState",
    "HttpLimits",
    "Request",
    "Response",
    "serve_http",
    "service_routes",
]

log = logging.getLogger(__name__)

ALLOWED_METHODS = ("GET", "HEAD")
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_MAX_REASON_CHARS = 300
_MAX_LINGER_BYTES = 1 << 20


@dataclass(frozen=True)
class Request:
    """A parsed request head. Header names are lower-case; repeated headers are joined with ", "."""

    method: str
    path: str
    query: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def text(cls, status: int, text: str, *, headers: tuple[tuple[str, str], ...] = ()) -> Response:
        """A plain-text response; a final newline is added when missing."""
        if not text.endswith("\n"):
            text += "\n"
        return cls(status, text.encode("utf-8"), headers=headers)

    @classmethod
    def json(cls, status: int, value: object) -> Response:
        """`value` as JSON; values JSON does not know (datetimes, paths...) are written as strings."""
        body = json.dumps(value, default=str, ensure_ascii=False).encode("utf-8") + b"\n"
        return cls(status, body, content_type="application/json")


Handler = Callable[[Request], Awaitable[Response]]
"""A route: called for GET (and HEAD, whose body the server drops) on its path."""


@dataclass(frozen=True)
class HttpLimits:
    read_timeout_seconds: float = 10.0
    """Time a client gets to send its whole request head."""
    write_timeout_seconds: float = 30.0
    """Time a client gets to take the whole response."""
    max_head_bytes: int = 16 * 1024
    """Largest request head (request line and headers) accepted; larger ones get 431."""
    max_connections: int = 64
    """Connections served at once; further ones get 503 straight away."""
    linger_seconds: float = 1.0
    """After the response, how long to drain what the client still sends before closing."""


DEFAULT_LIMITS = HttpLimits()


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_REASON_CHARS else flat[: _MAX_REASON_CHARS - 3] + "..."


class HealthState:
    """What /healthz and /readyz report, updated by the service.

    Liveness: the service loop calls `beat()` on every turn; the daemon is alive while the last beat is at
    most `stale_after_seconds` old. Construction counts as a beat, so start-up has one threshold of grace.

    Readiness: `set_ready(True)` once the configuration is loaded, plus optional named checks (cheap,
    non-blocking callables such as "is the Spark session up"); every one must hold. Starts not ready.
    """

    def __init__(self, *, stale_after_seconds: float = 60.0, clock: Callable[[], float] | None = None) -> None:
        """`clock` is a monotonic clock in seconds (default: time.monotonic)."""
        if not stale_after_seconds > 0:
            raise ValueError(f"stale_after_seconds must be positive, got {stale_after_seconds!r}")
        self._clock = clock if clock is not None else time.monotonic
        self._stale_after = float(stale_after_seconds)
        self._last_beat = self._clock()
        self._ready = False
        self._not_ready_reason = "starting"
        self._checks: dict[str, Callable[[], bool]] = {}

    @property
    def stale_after_seconds(self) -> float:
        return self._stale_after

    def beat(self) -> None:
        """The service loop is alive."""
        self._last_beat = self._clock()

    def seconds_since_beat(self) -> float:
        return max(0.0, self._clock() - self._last_beat)

    def liveness(self) -> tuple[bool, str]:
        """(alive, one-line explanation)."""
        age = self.seconds_since_beat()
        if age <= self._stale_after:
            return True, f"ok: last heartbeat {age:.1f}s ago"
        return False, f"stale: last heartbeat {age:.1f}s ago (threshold {self._stale_after:g}s)"

    def set_ready(self, ready: bool, reason: str = "") -> None:
        """Whether the service is ready; `reason` says why not (e.g. "config not loaded", "shutting down")."""
        self._ready = ready
        self._not_ready_reason = _one_line(reason) or "not ready"

    def add_readiness_check(self, name: str, check: Callable[[], bool]) -> None:
        """Also require `check()` to be true (replaces a check of the same name); it must not block."""
        self._checks[name] = check

    def remove_readiness_check(self, name: str) -> None:
        self._checks.pop(name, None)

    def readiness(self) -> tuple[bool, str]:
        """(ready, one-line explanation)."""
        if not self._ready:
            return False, f"not ready: {self._not_ready_reason}"
        for name, check in list(self._checks.items()):
            try:
                ok = check()
            except Exception as exc:
                return False, _one_line(f"not ready: {name} check failed: {type(exc).__name__}: {exc}")
            if not ok:
                return False, f"not ready: {name}"
        return True, "ready"


def service_routes(
    *, metrics: Metrics, health: HealthState, status: Callable[[], object] | None = None
) -> dict[str, Handler]:
    """The daemon's routes: /metrics, /healthz, /readyz and, when `status` is given, /status.

    `status` returns the JSON-serialisable state of the service; it runs on the event loop, so it must be
    quick and not block.
    """

    async def metrics_route(request: Request) -> Response:
        body, content_type = metrics.render(request.headers.get("accept"))
        return Response(200, body, content_type=content_type)

    async def healthz_route(request: Request) -> Response:
        alive, text = health.liveness()
        return Response.text(200 if alive else 503, text)

    async def readyz_route(request: Request) -> Response:
        ready, text = health.readiness()
        return Response.text(200 if ready else 503, text)

    routes: dict[str, Handler] = {"/metrics": metrics_route, "/healthz": healthz_route, "/readyz": readyz_route}
    if status is not None:
        status_callable = status

        async def status_route(request: Request) -> Response:
            return Response.json(200, status_callable())

        routes["/status"] = status_route
    return routes


# --- the server ------------------------------------------------------------------------------------


def _parse_head(head: bytes) -> Request | Response:
    """The request in `head` (everything before the blank line), or the error response it deserves."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return Response.text(400, "malformed request line")
    method, target, version = parts
    if not method or not set(method) <= _TOKEN_CHARS:
        return Response.text(400, "malformed method")
    if not version.startswith("HTTP/"):
        return Response.text(400, "malformed protocol version")
    if not version.startswith("HTTP/1."):
        return Response.text(505, f"HTTP version not supported: {version}")
    if not target.isascii() or not target.isprintable():
        return Response.text(400, "malformed request target")
    if target.startswith(("http://", "https://")):  # absolute form: keep the path
        slash = target.find("/", target.index("//") + 2)
        target = target[slash:] if slash >= 0 else "/"
    if not target.startswith("/"):
        return Response.text(400, "malformed request target")
    path, _, query = target.partition("?")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or not set(name) <= _TOKEN_CHARS:
            return Response.text(400, "malformed header line")
        key = name.lower()
        value = value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return Request(method=method, path=path, query=query, headers=headers)


def _encode(response: Response, *, head_only: bool) -> bytes:
    try:
        phrase = http.HTTPStatus(response.status).phrase
    except ValueError:
        phrase = ""
    lines = [
        f"HTTP/1.1 {response.status} {phrase}",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Cache-Control: no-store",
        "X-Content-Type-Options: nosniff",
        "Connection: close",
        *(f"{name}: {value}" for name, value in response.headers),
    ]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + response.body


_CLIENT_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


class _Server:
    def __init__(self, routes: Mapping[str, Handler], limits: HttpLimits) -> None:
        for path in routes:
            if not path.startswith("/"):
                raise ValueError(f"route paths must start with '/', got {path!r}")
        self._routes = dict(routes)
        self._limits = limits
        self._active = 0

    async def accept_loop(self, listener: SocketListener, task_group: TaskGroup) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:  # e.g. out of file descriptors: keep serving once some are free
                log.warning("HTTP endpoints: accept failed: %s", exc)
                await anyio.sleep(0.1)
                continue
            task_group.start_soon(self.connection, stream)

    async def connection(self, stream: SocketStream) -> None:
        try:
            if self._active >= self._limits.max_connections:
                await self._respond(stream, Response.text(503, "too many connections"), head_only=False)
                return
            self._active += 1
            try:
                await self._exchange(stream)
            finally:
                self._active -= 1
        except _CLIENT_GONE as exc:
            log.debug("HTTP endpoints: client went away: %r", exc)
        except Exception:
            log.exception("HTTP endpoints: unexpected error on a connection")
        finally:
            await anyio.aclose_forcefully(stream)

    async def _exchange(self, stream: SocketStream) -> None:
        received = await self._receive_request(stream)
        if received is None:
            return
        if isinstance(received, Response):
            await self._respond(stream, received, head_only=False)
            return
        response = await self._dispatch(received)
        await self._respond(stream, response, head_only=received.method == "HEAD")

    async def _receive_request(self, stream: SocketStream) -> Request | Response | None:
        """The request, an error response for a bad one, or None when the client sent nothing and left."""
        buffered = BufferedByteReceiveStream(stream)
        too_large = Response.text(431, f"request head larger than {self._limits.max_head_bytes} bytes")
        with anyio.move_on_after(self._limits.read_timeout_seconds):
            try:
                head = await buffered.receive_until(b"\r\n\r\n", self._limits.max_head_bytes)
            except anyio.DelimiterNotFound:
                return too_large
            except anyio.IncompleteRead:
                return None
            # One receive may bring in more than the limit, delimiter included.
            return too_large if len(head) + 4 > self._limits.max_head_bytes else _parse_head(head)
        if buffered.buffer:
            return Response.text(408, "request head not received in time")
        return None

    async def _dispatch(self, request: Request) -> Response:
        handler = self._routes.get(request.path)
        if handler is None:
            return Response.text(404, f"not found: {_one_line(request.path)}")
        if request.method not in ALLOWED_METHODS:
            allow = ", ".join(ALLOWED_METHODS)
            return Response.text(405, f"method not allowed: {request.method}", headers=(("Allow", allow),))
        try:
            return await handler(request)
        except Exception as exc:
            log.exception("HTTP endpoints: handler for %s failed", request.path)
            return Response.text(500, _one_line(f"internal error: {type(exc).__name__}: {exc}"))

    async def _respond(self, stream: SocketStream, response: Response, *, head_only: bool) -> None:
        with anyio.move_on_after(self._limits.write_timeout_seconds) as scope:
            await stream.send(_encode(response, head_only=head_only))
        if scope.cancelled_caught:
            return
        # Half-close, then drain what the client still sends, so that closing does not reset the connection
        # (and destroy the response in flight) when a request body or a second request is still unread.
        try:
            await stream.send_eof()
        except _CLIENT_GONE:
            return
        with anyio.move_on_after(self._limits.linger_seconds):
            drained = 0
            while drained < _MAX_LINGER_BYTES:
                try:
                    drained += len(await stream.receive())
                except _CLIENT_GONE:
                    return


async def serve_http(
    host: str,
    port: int,
    routes: Mapping[str, Handler],
    *,
    limits: HttpLimits = DEFAULT_LIMITS,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `routes` on `host`:`port` until cancelled; reports the bound port through `task_status`.

    `port` 0 binds a free port (the same on every address `host` resolves to). Raises OSError when the
    address cannot be bound.
    """
    server = _Server(routes, limits)
    multi = await anyio.create_tcp_listener(local_host=host, local_port=port)
    async with multi:
        listeners: list[SocketListener] = []
        for listener in multi.listeners:
            if not isinstance(listener, SocketListener):
                raise TypeError(f"unexpected listener type {type(listener).__name__}")
            listeners.append(listener)
        bound_port = listeners[0].extra(SocketAttribute.local_port)
        addresses = ", ".join(str(listener.extra(SocketAttribute.local_address)) for listener in listeners)
        async with anyio.create_task_group() as task_group:
            for listener in listeners:
                task_group.start_soon(server.accept_loop, listener, task_group)
            log.info("HTTP endpoints listening on %s", addresses)
            task_status.started(bound_port)
