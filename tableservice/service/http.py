"""The daemon's HTTP endpoints: a minimal HTTP/1.1 server on anyio.

    /metrics   the Prometheus registry (classic text format, or OpenMetrics when the Accept header asks)
    /healthz   200 while the service loop's heartbeat is fresh, 503 once it is older than a threshold
    /readyz    200 when the service says it is ready (config loaded, Spark up...), 503 with a reason otherwise
    /status    JSON from a callable the service provides (table state); needs the bearer token when one is set
    /history   JSON of the actions the daemon ran (`service/history.py`), query `table`, `since`, `limit`; needs
               the bearer token when one is set
    /report    JSON of the cost ledger (`service/ledger.py`), query `table`, `since`; needs the bearer token

The server answers GET and HEAD, one request per connection (`Connection: close`), 404 for unknown paths and
405 for other methods on known ones.

Nothing a client holds open makes a probe wait, and the open sockets stay bounded:

- At most `max_connections` connections are open at once. A connection arriving at the limit is neither refused
  nor parked: the server closes the idlest open connection (without a response) and serves the new one. The
  idlest is the one whose last progress (a byte of the request received, a piece of the response sent; the
  accept for a silent one) is oldest; a connection whose route handler is running is never closed. Probes and
  scrapers send their request as soon as they connect and are answered at once, so they are always among the
  freshest: a crowd of idle or trickling connections only pushes out its own members. Closing is logged as
  a warning at most once a minute, with how many were closed since the last report.
- A client gets `first_byte_timeout_seconds` after connecting to send the first byte of its request, and
  `read_timeout_seconds` in all for its request head of at most `max_head_bytes`: silent clients are closed,
  slow ones get 408, oversized heads 431, garbled ones 400 (or 505 for another HTTP version).
- A client gets `write_timeout_seconds` to take the response; then the server half-closes, drains what the
  client still sends for at most `linger_seconds` and closes.

Bearer token: with `bearer_token` set, every route but the open ones (`OPEN_PATHS`: /healthz, /readyz,
/metrics) needs `Authorization: Bearer <token>`, compared in constant time; without it the answer is 401.
Probes and metrics never need it. Without a token, `serve_http` logs a warning when it listens on an address
other than loopback while it serves such routes (/status exposes the tables' state).

`serve_http` runs until its cancel scope is cancelled, inside the caller's task group:

    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, "0.0.0.0", 9464, service_routes(metrics=m, health=h, status=s))
        ...
        tg.cancel_scope.cancel()   # stops accepting, closes open connections and the listening sockets
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

import anyio
from anyio.abc import SocketAttribute, SocketListener, SocketStream, TaskGroup, TaskStatus

from tableservice.metrics import Metrics
from tableservice.service.health import HealthState, one_line
from tableservice.service.http_wire import Request, Response, encode, parse_head

__all__ = [
    "DEFAULT_LIMITS",
    "OPEN_PATHS",
    "ConnectionStats",
    "Handler",
    "HealthState",
    "HttpLimits",
    "Request",
    "Response",
    "log_exposure",
    "serve_http",
    "service_routes",
]

log = logging.getLogger(__name__)

ALLOWED_METHODS = ("GET", "HEAD")
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""Paths served without the bearer token: the probes and the Prometheus scrape."""

_MAX_LINGER_BYTES = 1 << 20
_SEND_CHUNK = 64 * 1024
_SHED_REPORT_SECONDS = 60.0
_END_OF_HEAD = b"\r\n\r\n"

Handler = Callable[[Request], Awaitable[Response]]
"""A route: called for GET (and HEAD, whose body the server drops) on its path."""


@dataclass(frozen=True)
class HttpLimits:
    read_timeout_seconds: float = 10.0
    """Time a client gets to send its whole request head."""
    first_byte_timeout_seconds: float = 3.0
    """Time a client gets after connecting to send the first byte of its request; a silent one is closed."""
    write_timeout_seconds: float = 30.0
    """Time a client gets to take the whole response."""
    max_head_bytes: int = 16 * 1024
    """Largest request head (request line and headers) accepted; larger ones get 431."""
    max_connections: int = 64
    """Connections open at once; one more closes the idlest open connection."""
    linger_seconds: float = 1.0
    """After the response, how long to drain what the client still sends before closing."""

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.max_head_bytes < 1:
            raise ValueError(f"max_connections and max_head_bytes must be positive: {self}")
        if min(self.read_timeout_seconds, self.first_byte_timeout_seconds, self.write_timeout_seconds) <= 0:
            raise ValueError(f"HTTP timeouts must be positive: {self}")


DEFAULT_LIMITS = HttpLimits()


@dataclass
class ConnectionStats:
    """What one server has done with connections, kept up to date while it runs."""

    open: int = 0
    """Connections open now."""
    peak_open: int = 0
    """Most connections open at once."""
    accepted: int = 0
    shed: int = 0
    """Connections closed to make room for a new one."""


def service_routes(
    *,
    metrics: Metrics,
    health: HealthState,
    status: Callable[[], object] | None = None,
    history: Callable[[str], tuple[int, object]] | None = None,
    report: Callable[[str], tuple[int, object]] | None = None,
) -> dict[str, Handler]:
    """The daemon's routes: /metrics, /healthz, /readyz and, when `status` is given, /status, when `history` is
    given, /history, when `report` is given, /report (the cost ledger; answered like `history`).

    `status` returns the JSON-serialisable state of the service; it runs on the event loop, so it must be
    quick and not block. `history` answers a query string with an HTTP status and a JSON-serialisable document;
    it may block (it runs in a worker thread).
    """

    async def metrics_route(request: Request) -> Response:
        # In a worker thread: rendering a thousand tables' series takes most of a second of CPU, and the event loop
        # (every table's schedule) must not stop for it.
        body, content_type = await anyio.to_thread.run_sync(metrics.render, request.headers.get("accept"))
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
    for path, answer in (("/history", history), ("/report", report)):
        if answer is not None:
            routes[path] = _threaded(answer)
    return routes


def _threaded(answer: Callable[[str], tuple[int, object]]) -> Handler:
    """A route answering a query string from a worker thread (it may block: it reads a file)."""

    async def route(request: Request) -> Response:
        code, document = await anyio.to_thread.run_sync(answer, request.query)
        return Response.json(code, document)

    return route


def log_exposure(addresses: Iterable[tuple[str, int]], protected_paths: Collection[str], *, has_token: bool) -> bool:
    """Warn when a listening address is not loopback, no bearer token is set and routes beyond the open
    ones are served. Returns whether it warned."""
    exposed = [(host, port) for host, port in addresses if not ipaddress.ip_address(host.split("%")[0]).is_loopback]
    if has_token or not exposed or not protected_paths:
        return False
    where = ", ".join(_address(host, port) for host, port in exposed)
    log.warning(
        "HTTP endpoints listen beyond loopback on %s without a bearer token: %s open to anyone who can reach the "
        "port; set service.http.status_token_file to require one",
        where,
        ", ".join(sorted(protected_paths)),
        extra={"address": where},
    )
    return True


# --- the server ------------------------------------------------------------------------------------


_CLIENT_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _valid_token(token: str) -> bool:
    return bool(token) and token.isascii() and token.isprintable() and not any(c.isspace() for c in token)


def _digest(secret: bytes) -> bytes:
    return hashlib.sha256(secret).digest()


class _Connection:
    """One accepted connection and what shedding needs to know about it."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.scope = anyio.CancelScope()
        self.progress = time.monotonic()
        self.handling = False
        self.shed = False
        self.closed = anyio.Event()

    def idleness(self) -> float:
        """The connection with the smallest value is closed first."""
        return self.progress

    def peer(self) -> str:
        try:
            remote = self.stream.extra(SocketAttribute.remote_address)
        except (anyio.TypedAttributeLookupError, OSError):
            return "?"
        return _address(str(remote[0]), int(remote[1])) if isinstance(remote, tuple) else str(remote)


class _Server:
    def __init__(
        self,
        routes: Mapping[str, Handler],
        limits: HttpLimits,
        *,
        bearer_token: str | None,
        open_paths: Collection[str],
        stats: ConnectionStats,
    ) -> None:
        for path in routes:
            if not path.startswith("/"):
                raise ValueError(f"route paths must start with '/', got {path!r}")
        if bearer_token is not None and not _valid_token(bearer_token):
            raise ValueError("the bearer token must be non-empty ASCII without whitespace")
        self._routes = dict(routes)
        self._limits = limits
        self._token_digest = None if bearer_token is None else _digest(bearer_token.encode("ascii"))
        self._open_paths = frozenset(open_paths)
        self.stats = stats
        self.address = ""
        self._open: set[_Connection] = set()
        self._room = anyio.Event()
        self._shed_unreported = 0
        self._shed_reported_at = -math.inf

    @property
    def protected_paths(self) -> list[str]:
        return sorted(set(self._routes) - self._open_paths)

    async def accept_loop(self, listener: SocketListener, task_group: TaskGroup) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:  # e.g. out of file descriptors: keep serving once some are free
                log.warning("HTTP endpoints: accept failed: %s", exc, extra={"address": self.address})
                await anyio.sleep(0.1)
                continue
            self.stats.accepted += 1
            try:
                await self._make_room()
            except BaseException:
                await anyio.aclose_forcefully(stream)
                raise
            # No checkpoint between the room check and the registration: the limit holds across listeners.
            connection = _Connection(stream)
            self._open.add(connection)
            self.stats.open = len(self._open)
            self.stats.peak_open = max(self.stats.peak_open, self.stats.open)
            task_group.start_soon(self._serve, connection)

    async def _make_room(self) -> None:
        """Returns once fewer than `max_connections` are open, closing the idlest ones to get there."""
        while len(self._open) >= self._limits.max_connections:
            candidates = (c for c in self._open if not c.handling and not c.shed)
            victim = min(candidates, key=_Connection.idleness, default=None)
            if victim is None:  # every one is running its handler or being closed already
                await self._room.wait()
                continue
            victim.shed = True
            victim.scope.cancel()
            self._report_shed(victim)
            await victim.closed.wait()

    def _report_shed(self, victim: _Connection) -> None:
        self.stats.shed += 1
        self._shed_unreported += 1
        now = time.monotonic()
        if now - self._shed_reported_at < _SHED_REPORT_SECONDS:
            return
        log.warning(
            "HTTP endpoints at their limit of %d open connections: closed %d idle or slow ones since the last "
            "report, the idlest first (the latest from %s)",
            self._limits.max_connections,
            self._shed_unreported,
            victim.peer(),
            extra={"address": self.address},
        )
        self._shed_unreported = 0
        self._shed_reported_at = now

    async def _serve(self, connection: _Connection) -> None:
        try:
            with connection.scope:
                await self._exchange(connection)
        except _CLIENT_GONE as exc:
            log.debug("HTTP endpoints: client went away: %r", exc)
        except Exception:
            log.exception("HTTP endpoints: unexpected error on a connection", extra={"address": self.address})
        finally:
            try:
                await anyio.aclose_forcefully(connection.stream)
            finally:
                self._open.discard(connection)
                self.stats.open = len(self._open)
                connection.closed.set()
                self._room.set()
                self._room = anyio.Event()

    async def _exchange(self, connection: _Connection) -> None:
        received = await self._receive_request(connection)
        if received is None:
            return
        if isinstance(received, Response):
            await self._respond(connection, received, head_only=False)
            return
        connection.handling = True
        try:
            response = await self._dispatch(received)
        finally:
            connection.handling = False
        connection.progress = time.monotonic()
        await self._respond(connection, response, head_only=received.method == "HEAD")

    async def _receive_request(self, connection: _Connection) -> Request | Response | None:
        """The request, an error response for a bad one, or None when the client sent nothing and left or
        stayed silent past the first-byte deadline."""
        limits = self._limits
        too_large = Response.text(431, f"request head larger than {limits.max_head_bytes} bytes")
        head = bytearray()
        with anyio.move_on_after(limits.read_timeout_seconds):
            with anyio.move_on_after(limits.first_byte_timeout_seconds):
                if not await self._receive_more(connection, head):
                    return None
            if not head:
                return None
            scanned = 0
            while (end := head.find(_END_OF_HEAD, max(0, scanned - 3))) < 0:
                if len(head) >= limits.max_head_bytes:
                    return too_large
                scanned = len(head)
                if not await self._receive_more(connection, head):
                    return None
            return too_large if end + len(_END_OF_HEAD) > limits.max_head_bytes else parse_head(bytes(head[:end]))
        return Response.text(408, "request head not received in time") if head else None

    @staticmethod
    async def _receive_more(connection: _Connection, head: bytearray) -> bool:
        """Appends what the client sends next; False when it has closed its side."""
        try:
            head += await connection.stream.receive()
        except anyio.EndOfStream:
            return False
        connection.progress = time.monotonic()
        return True

    def _authorised(self, request: Request) -> bool:
        if self._token_digest is None or request.path in self._open_paths:
            return True
        scheme, _, credentials = request.headers.get("authorization", "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        # Header values were decoded as latin-1: encoding back gives the bytes the client sent.
        return hmac.compare_digest(_digest(credentials.strip().encode("latin-1")), self._token_digest)

    async def _dispatch(self, request: Request) -> Response:
        handler = self._routes.get(request.path)
        if handler is None:
            return Response.text(404, f"not found: {one_line(request.path)}")
        if not self._authorised(request):
            challenge = ("WWW-Authenticate", 'Bearer realm="tableservice"')
            return Response.text(401, f"{request.path} needs a bearer token", headers=(challenge,))
        if request.method not in ALLOWED_METHODS:
            allow = ", ".join(ALLOWED_METHODS)
            return Response.text(405, f"method not allowed: {request.method}", headers=(("Allow", allow),))
        try:
            return await handler(request)
        except Exception as exc:
            log.exception("HTTP endpoints: handler for %s failed", request.path, extra={"address": self.address})
            return Response.text(500, one_line(f"internal error: {type(exc).__name__}: {exc}"))

    async def _respond(self, connection: _Connection, response: Response, *, head_only: bool) -> None:
        data = encode(response, head_only=head_only)
        with anyio.move_on_after(self._limits.write_timeout_seconds) as scope:
            for start in range(0, len(data), _SEND_CHUNK):
                await connection.stream.send(data[start : start + _SEND_CHUNK])
                connection.progress = time.monotonic()
        if scope.cancelled_caught:
            return
        # Half-close, then drain what the client still sends, so that closing does not reset the connection
        # (and destroy the response in flight) when a request body or a second request is still unread.
        try:
            await connection.stream.send_eof()
        except _CLIENT_GONE:
            return
        with anyio.move_on_after(self._limits.linger_seconds):
            drained = 0
            while drained < _MAX_LINGER_BYTES:
                try:
                    drained += len(await connection.stream.receive())
                except _CLIENT_GONE:
                    return


async def serve_http(
    host: str,
    port: int,
    routes: Mapping[str, Handler],
    *,
    limits: HttpLimits = DEFAULT_LIMITS,
    bearer_token: str | None = None,
    open_paths: Collection[str] = OPEN_PATHS,
    stats: ConnectionStats | None = None,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `routes` on `host`:`port` until cancelled; reports the bound port through `task_status`.

    `port` 0 binds a free port (the same on every address `host` resolves to). With `bearer_token`, routes
    outside `open_paths` need it. `stats`, when given, is kept up to date. Raises OSError when the address
    cannot be bound.
    """
    server = _Server(
        routes,
        limits,
        bearer_token=bearer_token,
        open_paths=open_paths,
        stats=ConnectionStats() if stats is None else stats,
    )
    multi = await anyio.create_tcp_listener(local_host=host, local_port=port)
    async with multi:
        listeners: list[SocketListener] = []
        for listener in multi.listeners:
            if not isinstance(listener, SocketListener):
                raise TypeError(f"unexpected listener type {type(listener).__name__}")
            listeners.append(listener)
        bound_port = listeners[0].extra(SocketAttribute.local_port)
        bound = [listener.extra(SocketAttribute.local_address) for listener in listeners]
        addresses = [(str(a[0]), int(a[1])) for a in bound if isinstance(a, tuple)]
        server.address = ", ".join(_address(h, p) for h, p in addresses)
        async with anyio.create_task_group() as task_group:
            for listener in listeners:
                task_group.start_soon(server.accept_loop, listener, task_group)
            log.info(
                "HTTP endpoints listening on %s (at most %d connections; %s)",
                server.address,
                limits.max_connections,
                "bearer token required beyond probes and metrics" if bearer_token else "no bearer token",
                extra={"address": server.address},
            )
            log_exposure(addresses, server.protected_paths, has_token=bearer_token is not None)
            task_status.started(bound_port)
