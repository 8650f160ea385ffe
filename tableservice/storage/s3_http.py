"""The little HTTP/1.1 the native S3 listing needs: a GET on a kept-alive socket (plain or TLS) and its answer read
by Content-Length or chunked transfer encoding; a small pool of idle connections per host.

`http.client` parses every answer's headers with the `email` package: about 0.35 ms of CPU per request here, more
than the rest of a listing. This reads the status line and the three headers a listing needs with bytes
operations.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading

CONNECT_TIMEOUT = 5.0  # seconds to open a connection (the storage options' `connect_timeout_s` replaces it)
REQUEST_TIMEOUT = 30.0  # seconds an answer may stall between bytes (`request_timeout_s`)
_POOL_SIZE = 16
_CHUNK = 65536


class NoAnswer(ConnectionError):
    """The connection was closed before any byte of an answer came back (on a kept-alive connection: the server
    closed it meanwhile and never saw the request)."""


class Connection:
    def __init__(
        self,
        host: str,
        tls: ssl.SSLContext | None,
        connect_timeout: float = CONNECT_TIMEOUT,
        request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            name, port = host, "443" if tls else "80"
        sock = socket.create_connection((name.strip("[]"), int(port)), timeout=connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:  # the TLS handshake is part of connecting: within the connect timeout
            self.sock: socket.socket = tls.wrap_socket(sock, server_hostname=name) if tls is not None else sock
        except BaseException:
            sock.close()
            raise
        self.sock.settimeout(request_timeout)
        self._buf = bytearray()

    def close(self) -> None:
        self.sock.close()

    def closed_by_peer(self) -> bool:
        """Whether an idle connection has something to read: the server's close (or stray bytes: unusable too)."""
        try:
            poller = select.poll()  # not select(): it refuses descriptors past 1023
            poller.register(self.sock, select.POLLIN | select.POLLERR | select.POLLHUP)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True

    def _more(self) -> None:
        data = self.sock.recv(_CHUNK)
        if not data:
            raise ConnectionResetError("the connection closed in the middle of an answer")
        self._buf += data

    def get(self, request: bytes) -> tuple[int, bytes, bool]:
        """Send a whole request; returns the answer's status, body and whether the server closes the connection."""
        try:
            self.sock.sendall(request)
            if not self._buf:
                data = self.sock.recv(_CHUNK)
                if not data:
                    raise NoAnswer("the connection closed before an answer")
                self._buf += data
        except (BrokenPipeError, ConnectionResetError) as e:
            raise NoAnswer(str(e)) from e
        buf = self._buf
        while (end := buf.find(b"\r\n\r\n")) < 0:
            self._more()
        lines = bytes(buf[:end]).split(b"\r\n")
        del buf[: end + 4]
        version, _, rest = lines[0].partition(b" ")
        status = int(rest[:3])
        close = version == b"HTTP/1.0"
        length: int | None = None
        chunked = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                close = value.strip().lower() != b"keep-alive" if close else value.strip().lower() == b"close"
        if chunked:
            return status, self._chunks(), close
        if length is None:  # to the end of the stream
            while True:
                data = self.sock.recv(_CHUNK)
                if not data:
                    break
                buf += data
            length, close = len(buf), True
        while len(buf) < length:
            self._more()
        body = bytes(buf[:length])
        del buf[:length]
        return status, body, close

    def _chunks(self) -> bytes:
        buf, out = self._buf, bytearray()
        while True:
            while (eol := buf.find(b"\r\n")) < 0:
                self._more()
            size = int(bytes(buf[:eol]).split(b";")[0], 16)
            del buf[: eol + 2]
            if size == 0:
                while (eol := buf.find(b"\r\n")) != 0:  # trailers, then the empty line
                    if eol < 0:
                        self._more()
                    else:
                        del buf[: eol + 2]
                del buf[:2]
                return bytes(out)
            while len(buf) < size + 2:
                self._more()
            out += buf[:size]
            del buf[: size + 2]


class Pool:
    """Idle kept-alive connections to one host, shared by threads."""

    def __init__(
        self, https: bool, host: str, connect_timeout: float = CONNECT_TIMEOUT, request_timeout: float = REQUEST_TIMEOUT
    ) -> None:
        self.host = host
        self._timeouts = (connect_timeout, request_timeout)
        self._tls = ssl.create_default_context() if https else None
        self._idle: list[Connection] = []
        self._guard = threading.Lock()

    def take(self) -> tuple[Connection | None, bool]:
        """An idle connection that still looks open (True), or None: open one with `new` (False)."""
        while True:
            with self._guard:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return None, False
            if not conn.closed_by_peer():
                return conn, True
            conn.close()

    def new(self) -> Connection:
        return Connection(self.host, self._tls, *self._timeouts)

    def give_back(self, conn: Connection) -> None:
        with self._guard:
            if len(self._idle) < _POOL_SIZE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._guard:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
