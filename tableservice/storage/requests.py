"""Object-store requests counted where they are made: at the storage boundary, by kind.

`Storage` calls `count(kind)` for every request it sends to an object store (local disk is not counted: it costs
nothing per request). Counts go to every open `counting()` scope of the calling context and to the process-wide
totals (`process_totals()`), so a caller reads what one step cost without knowing what ran inside it:

    with counting() as tally:
        worker.poll()
    tally.counts()  # {"LIST": 1}

Scopes live in a context variable: they follow the code that opened them, across nested calls, and into worker
threads that run a callable wrapped by `carry_context` (the clean's delete pool, the heartbeat thread). Requests
made in other processes (Spark tasks) are counted there, not here.

The kinds are S3's request classes, as they are billed: LIST (ListObjectsV2), GET (GetObject, ranged or whole),
HEAD (HeadObject), PUT (PutObject, a multipart part, CopyObject), POST (a multipart upload's start and completion,
a batch delete), DELETE (DeleteObject).
"""

from __future__ import annotations

import contextvars
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import StrEnum
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class RequestKind(StrEnum):
    LIST = "LIST"
    GET = "GET"
    HEAD = "HEAD"
    PUT = "PUT"
    POST = "POST"
    DELETE = "DELETE"


class RequestTally:
    """Requests counted by kind; safe to add to from several threads."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._guard = threading.Lock()

    def add(self, kind: RequestKind, n: int = 1) -> None:
        with self._guard:
            self._counts[kind.value] += n

    def counts(self) -> dict[str, int]:
        """Requests by kind (only the kinds made)."""
        with self._guard:
            return {k: v for k, v in self._counts.items() if v}

    def total(self) -> int:
        with self._guard:
            return sum(self._counts.values())

    def merge(self, other: Mapping[str, int]) -> None:
        with self._guard:
            self._counts.update(other)

    def __repr__(self) -> str:
        return f"RequestTally({self.counts()})"


_SCOPES: contextvars.ContextVar[tuple[RequestTally, ...]] = contextvars.ContextVar(
    "tableservice_storage_request_scopes", default=()
)
_TOTALS = RequestTally()


def count(kind: RequestKind, n: int = 1, scopes: tuple[RequestTally, ...] | None = None) -> None:
    """Record `n` requests of `kind`: in every open scope of this context (or in `scopes`, taken earlier with
    `open_scopes` where the request was asked for) and in the process totals."""
    if n <= 0:
        return
    for tally in _SCOPES.get() if scopes is None else scopes:
        tally.add(kind, n)
    _TOTALS.add(kind, n)


def open_scopes() -> tuple[RequestTally, ...]:
    """The scopes open here: for requests made later on another thread (pyarrow's I/O threads reading a file
    opened here) that belong to them."""
    return _SCOPES.get()


@contextmanager
def counting(*, isolated: bool = False) -> Iterator[RequestTally]:
    """A scope counting the requests made inside it (nested scopes each count them). `isolated`: the enclosing
    scopes do not count them (a Spark task reports its requests to the driver, which adds them once, wherever the
    task ran)."""
    tally = RequestTally()
    token = _SCOPES.set((tally,) if isolated else (*_SCOPES.get(), tally))
    try:
        yield tally
    finally:
        _SCOPES.reset(token)


def process_totals() -> dict[str, int]:
    """Every request this process counted since it started, by kind."""
    return _TOTALS.counts()


def carry_context(fn: Callable[P, T]) -> Callable[P, T]:
    """`fn` running in (a copy of) the caller's context wherever it is called: for worker threads, so that their
    requests count in the caller's scopes."""
    ctx = contextvars.copy_context()

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return ctx.copy().run(fn, *args, **kwargs)

    return run
