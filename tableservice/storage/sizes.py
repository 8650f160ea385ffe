"""File sizes a caller already knows (from a listing, a file-system view, a plan), so that opening those files
on an object store needs no HEAD.

A task that reads files a listing named runs inside `known_sizes({location: bytes, ...})`; every
`Storage.open_input_file(location)` in that context (the merged reader's base file, each log file, a log block's
content read later) then takes the size from there. The scope follows the calling context (a context variable),
so concurrent tasks in one process never see each other's sizes.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

_KNOWN: contextvars.ContextVar[Mapping[str, int] | None] = contextvars.ContextVar(
    "tableservice_storage_known_sizes", default=None
)


@contextmanager
def known_sizes(sizes: Mapping[str, int]) -> Iterator[None]:
    """Sizes in bytes by location, for the files opened inside the scope (added to any outer scope's). A size of 0
    or less says nothing: such a file is looked up as before."""
    outer = _KNOWN.get()
    token = _KNOWN.set({**(outer or {}), **{loc: n for loc, n in sizes.items() if n > 0}})
    try:
        yield
    finally:
        _KNOWN.reset(token)


def known_size(location: str) -> int | None:
    """The size of `location` as the enclosing `known_sizes` scope gives it, else None."""
    sizes = _KNOWN.get()
    return None if sizes is None else sizes.get(location)
