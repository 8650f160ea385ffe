"""Records read by merged reads, counted where they are read: base file rows and log records (data and delete
records of the blocks a scan kept). A caller opens `counting_records()` around any work (one executor task, one
read) and reads the total afterwards; scopes live in a context variable, so concurrent tasks on other threads
count apart."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager


class RecordTally:
    def __init__(self) -> None:
        self.records = 0


_SCOPES: contextvars.ContextVar[tuple[RecordTally, ...]] = contextvars.ContextVar(
    "tableservice_records_read_scopes", default=()
)


def note_records_read(n: int) -> None:
    """`n` records were read (by the merged reader)."""
    for tally in _SCOPES.get():
        tally.records += n


@contextmanager
def counting_records() -> Iterator[RecordTally]:
    tally = RecordTally()
    token = _SCOPES.set((*_SCOPES.get(), tally))
    try:
        yield tally
    finally:
        _SCOPES.reset(token)
