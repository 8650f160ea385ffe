"""HTTP/1.1 on the wire for the daemon's endpoints: the request head parsed, the response encoded."""

from __future__ import annotations

import email.utils
import http
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Request", "Response", "encode", "parse_head"]

_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


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


def parse_head(head: bytes) -> Request | Response:
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


def encode(response: Response, *, head_only: bool) -> bytes:
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
