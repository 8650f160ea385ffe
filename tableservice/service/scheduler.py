"""A capacity limiter that hands free slots to the most urgent waiter first.

The daemon caps concurrent actions across all tables; when several tables wait for a slot, the one whose pending
work is oldest (smallest priority key, e.g. the requested time of its oldest pending instant) goes first, so a
busy table cannot starve the others.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio


class PriorityCapacity:
    def __init__(self, total: int) -> None:
        self.total = total
        self.in_use = 0
        self._waiters: list[tuple[str, int, anyio.Event]] = []
        self._order = itertools.count()

    def set_total(self, total: int) -> None:
        self.total = total
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_use < self.total:
            self._waiters.sort(key=lambda w: (w[0], w[1]))
            _, _, event = self._waiters.pop(0)
            self.in_use += 1
            event.set()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @asynccontextmanager
    async def slot(self, priority: str) -> AsyncIterator[None]:
        """Hold one slot; waiters with a smaller `priority` are served first (ties: first come)."""
        if self.in_use < self.total and not self._waiters:
            self.in_use += 1
        else:
            event = anyio.Event()
            entry = (priority, next(self._order), event)
            self._waiters.append(entry)
            self._wake()
            try:
                await event.wait()
            except BaseException:
                if entry in self._waiters:
                    self._waiters.remove(entry)
                elif event.is_set():
                    self.in_use -= 1
                    self._wake()
                raise
        try:
            yield
        finally:
            self.in_use -= 1
            self._wake()
