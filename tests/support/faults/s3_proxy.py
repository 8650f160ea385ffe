"""A fault-injecting HTTP proxy on loopback in front of the moto server: S3 faults for the fault harness.

Every request is forwarded to moto (one upstream connection per client connection, HTTP/1.1 keep-alive on both
sides) and numbered in arrival order. A `FaultPlan` picks the requests that fail: a burst of `count` faults from
request `start` on (`count=None`: every request from there on), or each request with probability `probability`.
A failing request gets one fault `kind`:

- `reset`: the connection is closed with a TCP RST and no response;
- `500`: `InternalError`, S3's XML error body;
- `503`: `SlowDown`, S3's XML error body;
- `timeout`: nothing is sent for `hold` seconds (longer than the client's read timeout), then the connection is
  closed;
- `cut`: moto's response is sent with its full `Content-Length` but only half of its body, then the connection
  is reset (a response without a body, as to HEAD or PUT, is sent whole: nothing to cut, and not counted as
  injected).

`reset` and `timeout` happen before the request reaches moto or, with `after=True`, once moto has applied it (the
client never learns that its write landed); `500` and `503` never reach moto; `cut` always has.

The proxy also counts what it forwards, on the server's side of the client: every request is classified by
`request_kind` (LIST, GET, HEAD, PUT, POST, DELETE) and logged with its object key (`proxy.seen()`,
`proxy.counts(prefix)`), so benchmarks and tests check request counts independently of the client's own counting.
"""

from __future__ import annotations

import contextlib
import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

KINDS = ("reset", "500", "503", "timeout", "cut")
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te"})
_ERRORS = {
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "503": (503, "SlowDown", "Please reduce your request rate."),
}


@dataclass(frozen=True)
class SeenRequest:
    """One request the proxy received: its kind (`request_kind`), bucket and object key (for a LIST: its prefix),
    and when it arrived (unix seconds: which requests fall in a window a caller timed)."""

    kind: str
    bucket: str
    key: str
    at: float = field(default=0.0, compare=False)


def request_kind(method: str, target: str) -> SeenRequest:
    """Classify an S3 request (path-style addressing, as pyarrow and boto3 use against an endpoint override): a GET
    of a bucket (`?list-type=2`, `?prefix=`...) is a LIST, a GET of an object a GET; POST covers multipart uploads and
    batch deletes."""
    parts = urlsplit(target)
    path = unquote(parts.path).lstrip("/")
    bucket, _, key = path.partition("/")
    query = parse_qs(parts.query, keep_blank_values=True)
    if method == "GET" and not key:
        return SeenRequest("LIST", bucket, query.get("prefix", [""])[0])
    return SeenRequest(method, bucket, key)


@dataclass
class FaultPlan:
    kind: str
    start: int = 1  # the first request (1-based) that may fail
    count: int | None = None  # how many from `start` on fail (None: all); ignored with a probability
    probability: float | None = None  # each request from `start` on fails with this probability
    after: bool = False  # reset/timeout once moto has applied the request
    hold: float = 4.0  # seconds a `timeout` holds the connection
    seed: int = 0
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}")
        self.rng = random.Random(self.seed)

    def fails(self, number: int, injected: int) -> bool:
        """Whether request `number` fails, `injected` faults in so far (a `cut` counts only once a body is cut, so
        a burst of cuts goes on until that many bodies are cut)."""
        if number < self.start:
            return False
        if self.probability is not None:
            return self.rng.random() < self.probability
        return self.count is None or injected < self.count

    def describe(self) -> str:
        when = (
            f"p={self.probability} from {self.start}"
            if self.probability is not None
            else f"from request {self.start}, " + ("every one" if self.count is None else f"{self.count}")
        )
        return f"{self.kind}{' after apply' if self.after else ''} {when}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FaultProxy

    def log_message(self, format: str, *args: object) -> None:
        return

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length", "0") or 0)
        return self.rfile.read(length) if length else b""

    def _upstream(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self, "_conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.server.upstream_host, self.server.upstream_port, timeout=60)
            self._conn: http.client.HTTPConnection | None = conn
        return conn

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Content-Length"] = str(len(body))
        for attempt in range(2):  # a kept-alive upstream connection moto closed meanwhile: once more, fresh
            conn = self._upstream()
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                return resp.status, resp.reason, resp.getheaders(), data
            except (http.client.HTTPException, OSError):
                conn.close()
                self._conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _reset(self) -> None:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True

    def _hold(self) -> None:
        deadline = time.monotonic() + self.server.plan_hold()
        while time.monotonic() < deadline and not self.server.stopping.is_set():
            time.sleep(0.05)
        self.close_connection = True

    def _send(self, status: int, reason: str, headers: list[tuple[str, str]], data: bytes, cut: bool) -> None:
        head = [f"HTTP/1.1 {status} {reason}\r\n".encode("latin-1")]
        for k, v in headers:
            if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length":
                head.append(f"{k}: {v}\r\n".encode("latin-1"))
        length = len(data) if self.command != "HEAD" else int(dict(headers).get("Content-Length", "0") or 0)
        head.append(f"Content-Length: {length}\r\n".encode("latin-1"))
        head.append(b"Connection: close\r\n\r\n" if cut else b"\r\n")
        raw = b"".join(head)
        body = data if self.command != "HEAD" else b""
        if cut:  # half the body, then a reset; a response without a body is sent whole (nothing to cut)
            self.close_connection = True
            if body:
                self.server.count_cut()
            self.wfile.write(raw + body[: len(body) // 2] if body else raw)
            self.wfile.flush()
            self._reset()
            return
        self.wfile.write(raw + body)
        self.wfile.flush()

    def _error(self, kind: str) -> None:
        status, code, message = _ERRORS[kind]
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<Resource>{self.path.split('?')[0]}</Resource><RequestId>FAULTPROXY</RequestId></Error>"
        ).encode()
        headers = [("Content-Type", "application/xml"), ("x-amz-request-id", "FAULTPROXY")]
        self._send(status, code, headers, body, cut=False)

    def _serve(self) -> None:
        body = self._body()
        self.server.note(self.command, self.path)
        kind = self.server.next_fault()
        if kind is None or kind == "cut":
            status, reason, headers, data = self._forward(body)
            self._send(status, reason, headers, data, cut=kind == "cut")
            return
        if kind in _ERRORS:
            self._error(kind)
            return
        if self.server.plan_after():
            self._forward(body)
        if kind == "reset":
            self._reset()
        else:
            self._hold()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _serve

    def finish(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
        with contextlib.suppress(OSError):
            super().finish()


class FaultProxy(ThreadingHTTPServer):
    """The proxy: `with FaultProxy(moto_url) as proxy: ... proxy.endpoint_url ...`; set `proxy.plan` per trial."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        if parts.hostname not in ("127.0.0.1", "localhost"):
            raise ValueError(f"the fault proxy serves loopback only, not {upstream_url}")
        self.upstream_host = "127.0.0.1"
        self.upstream_port = int(parts.port or 80)
        self.stopping = threading.Event()
        self._guard = threading.Lock()
        self.plan: FaultPlan | None = None
        self.requests = 0
        self.injected = 0
        self._seen: list[SeenRequest] = []
        super().__init__(("127.0.0.1", 0), _Handler)
        self._thread = threading.Thread(target=self.serve_forever, name="s3-fault-proxy", daemon=True)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def arm(self, plan: FaultPlan | None) -> None:
        """A new plan, request numbers from 1 again (None: forward everything)."""
        with self._guard:
            self.plan = plan
            self.requests = 0
            self.injected = 0

    def note(self, method: str, target: str) -> None:
        seen = replace(request_kind(method, target), at=time.time())
        with self._guard:
            self._seen.append(seen)

    def seen(self) -> list[SeenRequest]:
        """Every request received since the last `reset_seen` (faulted ones too), in arrival order."""
        with self._guard:
            return list(self._seen)

    def reset_seen(self) -> None:
        with self._guard:
            self._seen.clear()

    def counts(self, prefix: str = "") -> Counter[str]:
        """Requests by kind whose object key (a LIST's prefix) starts with `prefix`."""
        return Counter(r.kind for r in self.seen() if r.key.startswith(prefix))

    def next_fault(self) -> str | None:
        with self._guard:
            self.requests += 1
            if self.plan is None or not self.plan.fails(self.requests, self.injected):
                return None
            if self.plan.kind != "cut":  # counted once a body is cut
                self.injected += 1
            return self.plan.kind

    def count_cut(self) -> None:
        with self._guard:
            self.injected += 1

    def plan_after(self) -> bool:
        plan = self.plan
        return plan is not None and plan.after

    def plan_hold(self) -> float:
        plan = self.plan
        return plan.hold if plan is not None else 0.0

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=10)
