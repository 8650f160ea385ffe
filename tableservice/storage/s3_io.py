"""File objects over S3 that count their own requests: a random-access object of known size read with ranged GETs
(no HEAD), and pyarrow's output stream counting the PUTs (or multipart POSTs) its close makes."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tableservice.storage.requests import RequestKind, count, open_scopes

if TYPE_CHECKING:
    from tableservice.storage.fs import Storage

# pyarrow's S3 output stream: a file of up to one part goes up as one PutObject (delayed open), larger ones as a
# multipart upload of parts this size.
MULTIPART_PART_SIZE = 10 * 1024 * 1024


def retries(reply: Any) -> int:
    """How many times botocore retried a request (each one reached the server)."""
    try:
        return int(reply.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0)
    except (AttributeError, TypeError, ValueError):
        return 0


class S3RangeFile(io.RawIOBase):
    """A random-access S3 object of known size: each read is one ranged GET (no HEAD)."""

    def __init__(self, storage: Storage, location: str, path: str, size: int) -> None:
        super().__init__()
        self._storage, self._location, self._path, self._size, self._pos = storage, location, path, size, 0
        self._scopes = open_scopes()  # pyarrow reads on its I/O threads: the requests count where the file opened

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def size(self) -> int:
        return self._size

    def read(self, n: int | None = -1) -> bytes:
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        if end <= self._pos:
            return b""
        data = self._storage._get(self._location, self._path, f"bytes={self._pos}-{end - 1}", self._scopes)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)


class CountedOutput:
    """pyarrow's S3 output stream, counting the requests its close makes: one PUT up to a part, else a multipart
    upload (start and completion POSTs and a PUT per part)."""

    def __init__(self, stream: pa.NativeFile) -> None:
        self._stream = stream
        self._written = 0
        self._scopes = open_scopes()
        self.closed = False

    def write(self, data: Any) -> int:
        n = int(self._stream.write(data))
        self._written += n
        return n

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        self._stream.flush()

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._stream.close()
        finally:
            if self._written <= MULTIPART_PART_SIZE:
                count(RequestKind.PUT, 1, self._scopes)
            else:
                count(RequestKind.POST, 2, self._scopes)
                count(RequestKind.PUT, -(-self._written // MULTIPART_PART_SIZE), self._scopes)
