"""S3 listings (ListObjectsV2) over kept-alive HTTP connections: the daemon's idle poll is one LIST per table, and
pyarrow's client spends about a millisecond of CPU on each; this one a fraction of that.

- Addressing: path-style (`host/bucket?...`) against an endpoint override (moto, MinIO) or for a bucket name with
  a dot (a virtual host would not match AWS's certificate); otherwise virtual-host style
  (`bucket.s3.region.amazonaws.com`). HTTPS with the default SSL context unless the endpoint says `http://`.
- Signing: SigV4 (`s3_sign`), credentials from the options or botocore's default chain, `x-amz-security-token`
  with a session token.
- Connections (`s3_http`): a small pool per host, shared by threads. A kept-alive connection the server closed
  meanwhile is left behind before use when its close is already visible, else reopened once when a request on it
  finds no answer (neither counts as a request: the server never saw one).
- Retries: up to `ATTEMPTS` attempts for a 5xx, a throttling answer, a timeout or a connection failure; every
  attempt that reached the server is counted (`count(RequestKind.LIST)`), so the counts match the server's.
- The entries are pyarrow's (`FileSystem.get_file_info(FileSelector)` on S3) in the same order with the same values:
  non-recursive (`delimiter=/`) each page's common prefixes as folders, then its objects; recursive (no delimiter)
  each object, then those of its folders not listed yet, deepest first (an empty key ending in `/` is a folder
  marker: a folder). The folder's own key is left out; folders have no size or time. A missing bucket lists as
  empty, as pyarrow's `allow_not_found` does; any other failure is a StorageError naming the location and S3's
  error code, the error the pyarrow path raises.
"""

from __future__ import annotations

import builtins
import datetime
import html
import random
import re
import threading
import time
import xml.etree.ElementTree as ET
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote_plus, urlsplit

from tableservice.errors import StorageError
from tableservice.storage.requests import RequestKind, count
from tableservice.storage.s3_http import CONNECT_TIMEOUT, REQUEST_TIMEOUT, Connection, NoAnswer, Pool
from tableservice.storage.s3_sign import Credentials, CredentialSource, Signer, canonical_query

ATTEMPTS = 3  # as pyarrow's and botocore's default retry strategies
PAGE_CACHE_BYTES = 32 << 20  # answers of one-page folder listings kept with their entries (a timeline: a few KB)
PAGE_CACHE_MAX_BODY = 256 << 10  # larger answers (a partition of hundreds of files) are read each time
_RETRY_CODES = frozenset({"SlowDown", "InternalError", "RequestTimeout", "ServiceUnavailable", "Throttling"})
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)


@dataclass(frozen=True)
class Entry:
    """One listed entry: its key relative to the listed folder (no trailing `/`), size, time, kind."""

    rel: str
    size: int
    mtime_ms: int
    is_dir: bool


class _Failure(Exception):
    """A request that got no (whole) answer: retried."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


class S3Lister:
    """ListObjectsV2 for one set of storage options; thread-safe."""

    def __init__(
        self,
        endpoint_url: str | None,
        region: str | None,
        credentials: Credentials | None,
        timeouts: tuple[float, float] = (CONNECT_TIMEOUT, REQUEST_TIMEOUT),
    ) -> None:
        self._timeouts = timeouts  # (to connect, for an answer to stall)
        self._endpoint: tuple[bool, str] | None = None
        if endpoint_url:
            parts = urlsplit(endpoint_url if "://" in endpoint_url else f"https://{endpoint_url}")
            self._endpoint = (parts.scheme == "https", parts.netloc)
        self._region = region or _default_region()
        self._signer = Signer(self._region)
        self._credentials = CredentialSource(credentials)
        self._pools: dict[tuple[bool, str], Pool] = {}
        self._guard = threading.Lock()
        self._pages = _PageCache()

    def close(self) -> None:
        with self._guard:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()

    def _pool(self, https: bool, host: str) -> Pool:
        pool = self._pools.get((https, host))
        if pool is None:
            with self._guard:
                pool = self._pools.setdefault((https, host), Pool(https, host, *self._timeouts))
        return pool

    def _address(self, bucket: str) -> tuple[bool, str, str]:
        """(https, host, path) of a bucket's listing."""
        if self._endpoint is not None:
            return self._endpoint[0], self._endpoint[1], f"/{bucket}"
        regional = f"s3.{self._region}.amazonaws.com"
        if "." in bucket:
            return True, regional, f"/{bucket}"
        return True, f"{bucket}.{regional}", "/"

    def list(self, location: str, bucket: str, key: str, recursive: bool) -> list[Entry]:
        """The entries under folder `key` of `bucket` (`location` names it in errors), in pyarrow's order."""
        prefix = key.strip("/") + "/" if key.strip("/") else ""
        params = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
        if not recursive:
            params["delimiter"] = "/"
        out: list[Entry] = []
        seen: set[str] = set()
        while True:
            query = _query(tuple(params.items()))
            body = self._get(location, bucket, query)
            if body is None:  # no such bucket
                return []
            token = self._read_page(location, (bucket, query), body, prefix, recursive, out, seen)
            if token is None:
                return out
            params["continuation-token"] = token

    def _read_page(
        self,
        location: str,
        request: tuple[str, str],
        body: bytes,
        prefix: str,
        recursive: bool,
        out: builtins.list[Entry],
        seen: set[str],
    ) -> str | None:
        """`_page`, or for a one-page folder listing that answered the bytes it answered last time, its entries then
        (a recursive page's folders depend on the pages before it: read each time)."""
        kept = None if recursive else self._pages.get(request, body)
        if kept is not None:
            out.extend(kept)
            return None  # only one-page answers are kept
        start = len(out)
        try:
            token = _page(body, prefix, recursive, out, seen)
        except (ValueError, UnicodeDecodeError) as e:
            raise StorageError(f"listing failed: {e}", path=location) from None
        if not recursive and token is None and "continuation-token" not in request[1]:
            self._pages.keep(request, body, tuple(out[start:]))
        return token

    def _get(self, location: str, bucket: str, query: str) -> bytes | None:
        https, host, path = self._address(bucket)
        pool = self._pool(https, host)
        target = f"{path}?{query}"
        attempt = 0
        while True:
            attempt += 1
            try:
                creds = self._credentials.current()
            except Exception as e:  # botocore's (a missing profile, a failing credential process): typed here
                raise StorageError(f"listing failed: no usable AWS credentials: {e}", path=location) from e
            if creds is None:
                raise StorageError("listing failed: no AWS credentials found", path=location)
            headers = self._signer.headers(creds, host, path, query)
            request = "".join([f"GET {target} HTTP/1.1\r\n", *(f"{k}: {v}\r\n" for k, v in headers.items()), "\r\n"])
            try:
                status, body = self._send(pool, request.encode())
            except _Failure as failure:
                if attempt < ATTEMPTS:
                    _back_off(attempt)
                    continue
                raise StorageError(f"listing failed: {failure.problem}", path=location) from None
            if status == 200:
                return body
            code, message = _error(body)
            if code == "NoSuchBucket":
                return None
            if (status >= 500 or status == 429 or code in _RETRY_CODES) and attempt < ATTEMPTS:
                _back_off(attempt)
                continue
            detail = f"{code or 'HTTP ' + str(status)}: {message}" if message else code or f"HTTP {status}"
            raise StorageError(f"listing failed: {detail} (HTTP {status})", path=location)

    def _send(self, pool: Pool, request: bytes) -> tuple[int, bytes]:
        """One request. Counted once sent (the server may have seen it), unless it went out on a reused connection
        that turned out closed: then it is sent once more on a new one, uncounted (the server never saw it)."""
        conn: Connection | None = None
        sent = False
        try:
            conn, reused = pool.take()
            if conn is None:
                conn = pool.new()  # a refused or timed-out connect sent nothing
            sent = True
            try:
                status, body, close = conn.get(request)
            except NoAnswer:
                if not reused:
                    raise
                conn.close()
                conn, sent = None, False
                conn = pool.new()
                sent = True
                status, body, close = conn.get(request)
        except (OSError, ValueError) as e:  # ValueError: an answer that is not HTTP
            if conn is not None:
                conn.close()
            if sent:
                count(RequestKind.LIST)
            raise _Failure(f"{type(e).__name__}: {e}") from None
        count(RequestKind.LIST)
        if close:
            conn.close()
        else:
            pool.give_back(conn)
        return status, body


class _PageCache:
    """The last answer to each one-page folder listing, with its entries: an idle table's timeline answers the same
    bytes poll after poll, and comparing them costs a fraction of reading them again. Only answers of up to
    `PAGE_CACHE_MAX_BODY` bytes are kept, `PAGE_CACHE_BYTES` in all (each counted twice: the entries read from an
    answer take about as much again), least recently used first out."""

    def __init__(self) -> None:
        self._pages: OrderedDict[tuple[str, str], tuple[bytes, tuple[Entry, ...]]] = OrderedDict()
        self._bytes = 0
        self._guard = threading.Lock()

    def get(self, request: tuple[str, str], body: bytes) -> tuple[Entry, ...] | None:
        """The entries kept for `request` when its answer is `body` again, else None."""
        with self._guard:
            last = self._pages.get(request)
            if last is None:
                return None
            self._pages.move_to_end(request)
        return last[1] if last[0] == body else None

    def keep(self, request: tuple[str, str], body: bytes, entries: tuple[Entry, ...]) -> None:
        if len(body) > PAGE_CACHE_MAX_BODY:
            return
        with self._guard:
            previous = self._pages.pop(request, None)
            if previous is not None:
                self._bytes -= 2 * len(previous[0])
            self._pages[request] = (body, entries)
            self._bytes += 2 * len(body)
            while self._bytes > PAGE_CACHE_BYTES:
                _, (old, _) = self._pages.popitem(last=False)
                self._bytes -= 2 * len(old)


@lru_cache(maxsize=4096)
def _query(params: tuple[tuple[str, str], ...]) -> str:
    """`canonical_query`, kept for the folders polled again and again."""
    return canonical_query(dict(params))


def _back_off(attempt: int) -> None:
    time.sleep(random.uniform(0, min(1.0, 0.05 * 2**attempt)))


def _default_region() -> str:
    import boto3

    return boto3.Session().region_name or "us-east-1"


def _error(body: bytes) -> tuple[str, str]:
    """S3's error code and message from an error answer's XML (empty when it has none)."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return "", ""
    return root.findtext("Code") or "", root.findtext("Message") or ""


def _mtime_ms(text: str) -> int:
    """`2024-05-01T12:00:00.000Z` as milliseconds since the epoch (pyarrow's time, to the millisecond)."""
    return (datetime.datetime.fromisoformat(text) - _EPOCH) // _MS


_LIST_RESULT = re.compile(r"<ListBucketResult[\s>]")
_PREFIX = re.compile(r"<CommonPrefixes>\s*<Prefix>([^<]*)</Prefix>")
_CONTENTS = re.compile(r"<Contents>(.*?)</Contents>", re.S)
_KEY = re.compile(r"<Key>([^<]*)</Key>")
_SIZE = re.compile(r"<Size>(\d+)</Size>")
_MODIFIED = re.compile(r"<LastModified>([^<]*)</LastModified>")
_TRUNCATED = re.compile(r"<IsTruncated>\s*true\s*</IsTruncated>")
_TOKEN = re.compile(r"<NextContinuationToken>([^<]*)</NextContinuationToken>")
_ENCODED = re.compile(r"<EncodingType>\s*url\s*</EncodingType>")


def _text(raw: str, encoded: bool = True) -> str:
    """An element's text: XML entities resolved, then (`encoding-type=url`) the URL encoding."""
    if "&" in raw:
        raw = html.unescape(raw)
    return unquote_plus(raw) if encoded and ("%" in raw or "+" in raw) else raw


def _page(body: bytes, prefix: str, recursive: bool, out: list[Entry], seen: set[str]) -> str | None:
    """Add one page's entries to `out`; returns the continuation token when more pages follow.

    S3's listing XML is flat and machine-written: regular expressions over it cost a tenth of ElementTree's parse
    and walk (the element order inside an entry does not matter to them)."""
    text = body.decode()
    if not _LIST_RESULT.search(text):
        raise ValueError(f"not a ListObjectsV2 answer: {text[:200]!r}")
    encoded = _ENCODED.search(text) is not None  # a store that ignores `encoding-type=url` sends keys as they are
    cut = len(prefix)
    for raw in _PREFIX.findall(text):
        folder = _text(raw, encoded)[cut:].rstrip("/")
        if folder:
            out.append(Entry(folder, 0, 0, True))
    for block in _CONTENTS.findall(text):
        key, size_m, modified = _KEY.search(block), _SIZE.search(block), _MODIFIED.search(block)
        if key is None or size_m is None or modified is None:
            raise ValueError(f"a listed object without key, size or time: {block[:200]!r}")
        rel = _text(key.group(1), encoded)[cut:]
        size = int(size_m.group(1))
        if not rel:
            continue  # the folder's own marker
        if recursive and rel.endswith("/") and size == 0:
            _folders(rel.rstrip("/"), True, out, seen)
            continue
        rel = rel.rstrip("/") if recursive else rel
        out.append(Entry(rel, size, _mtime_ms(_text(modified.group(1), False)), False))
        if recursive:
            _folders(rel, False, out, seen)
    token = _TOKEN.search(text)
    return _text(token.group(1), False) if token and _TRUNCATED.search(text) else None


def _folders(rel: str, itself: bool, out: list[Entry], seen: set[str]) -> None:
    """The folders of a recursive listing: `rel` itself when it is one, then its parents, deepest first, each once."""
    path = rel if itself else rel.rpartition("/")[0]
    while path and path not in seen:
        seen.add(path)
        out.append(Entry(path, 0, 0, True))
        path = path.rpartition("/")[0]
