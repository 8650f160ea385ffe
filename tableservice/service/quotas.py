"""A capacity limiter with per-group quotas that hands free slots to the most urgent waiter that may run.

A global cap (the smallest priority key goes first, first come among equals),
and a waiter in a group (`service.groups`) also needs a free slot of its group: waiters whose group is full are
passed over, so a full group never blocks the other tables.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio


@dataclass(eq=False)
class _Waiter:
    key: Any
    order: int
    group: str | None
    event: anyio.Event = field(default_factory=anyio.Event)


class GroupCapacity:
    def __init__(self, total: int, groups: Mapping[str, int] | None = None) -> None:
        self.total = total
        self.in_use = 0
        self._limits: dict[str, int] = dict(groups or {})
        self._group_use: Counter[str] = Counter()
        self._waiters: list[_Waiter] = []
        self._order = itertools.count()

    def configure(self, total: int, groups: Mapping[str, int]) -> None:
        """New caps (a reload); slots held now stay held, a lowered cap takes effect as they end."""
        self.total = total
        self._limits = dict(groups)
        self._wake()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def group_in_use(self, group: str) -> int:
        return self._group_use[group]

    def _fits(self, group: str | None) -> bool:
        if self.in_use >= self.total:
            return False
        return group is None or group not in self._limits or self._group_use[group] < self._limits[group]

    def _take(self, group: str | None) -> None:
        self.in_use += 1
        if group is not None:
            self._group_use[group] += 1

    def _give_back(self, group: str | None) -> None:
        self.in_use -= 1
        if group is not None:
            self._group_use[group] -= 1
        self._wake()

    def _wake(self) -> None:
        self._waiters.sort(key=lambda w: (w.key, w.order))
        for waiter in list(self._waiters):
            if self.in_use >= self.total:
                break
            if self._fits(waiter.group):
                self._waiters.remove(waiter)
                self._take(waiter.group)
                waiter.event.set()

    @asynccontextmanager
    async def slot(self, key: Any, group: str | None = None) -> AsyncIterator[None]:
        """Hold one slot (and one of `group`'s); waiters with a smaller `key` are served first."""
        waiter = _Waiter(key, next(self._order), group)
        self._waiters.append(waiter)
        self._wake()
        if not waiter.event.is_set():
            try:
                await waiter.event.wait()
            except BaseException:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.event.is_set():
                    self._give_back(group)
                raise
        try:
            yield
        finally:
            self._give_back(group)
