"""Polls of many tables share worker-thread hops.

Every table's worker polls on its own schedule, and a poll is blocking work (a timeline listing), so it runs in a
worker thread. A hop to a thread and back costs the event loop and the thread more CPU than an idle table's poll
itself (about 0.1 ms of CPU each way, wake-ups included, against 0.15 ms for the poll). With a thousand tables that
is most of the daemon's idle CPU. `PollBatches` gathers the polls asked for within `window_seconds` and runs them
one after another in one hop, up to `max_batch` per hop and `max_concurrent` hops at once (so that a slow store's
listings still overlap). The daemon batches only the polls of tables whose last poll found nothing to do: a
table's first poll (which reads its properties) and a busy table's take hops of their own, so that a slow poll
does not hold idle ones back.

Until `run` is serving (and after it stops), a poll takes its own hop, as before. A poll whose caller was cancelled
while it waited is not run; one still queued when `run` stops is not run either (its caller gets a retryable error).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio

from tableservice.errors import RetryableError

T = TypeVar("T")


@dataclass
class _Poll(Generic[T]):
    fn: Callable[[], T]
    done: anyio.Event = field(default_factory=anyio.Event)
    result: T | None = None
    error: BaseException | None = None
    ran: bool = False
    cancelled: bool = False  # its caller is gone (the table no longer served, the daemon stopping)

    def run(self) -> None:
        if self.cancelled:
            return
        self.ran = True
        try:
            self.result = self.fn()
        except BaseException as e:  # handed to the table's own task, which raises it as a lone poll would
            self.error = e


class PollBatches:
    def __init__(self, window_seconds: float = 0.05, max_batch: int = 16, max_concurrent: int = 8) -> None:
        self.window_seconds = window_seconds
        self.max_batch = max_batch
        self.max_concurrent = max_concurrent
        self._queue: deque[_Poll[object]] = deque()
        self._ready = anyio.Event()
        self._serving = False
        self.hops = 0  # thread hops taken for polls (batched or alone), for tests and benchmarks
        self.polls = 0

    async def poll(self, fn: Callable[[], T], *, alone: bool = False) -> T:
        """`fn()` in a worker thread, in a batch with the other polls of about the same moment; `alone`: in a hop
        of its own (a table's first poll, a busy table's)."""
        self.polls += 1
        if alone or not self._serving:
            self.hops += 1
            return await anyio.to_thread.run_sync(fn)
        item: _Poll[T] = _Poll(fn)
        self._queue.append(item)  # type: ignore[arg-type]
        self._ready.set()
        try:
            await item.done.wait()
        except BaseException:  # cancelled: a poll nobody waits for is not run (a removed table's, for one)
            item.cancelled = True
            raise
        if item.error is not None:
            raise item.error
        if not item.ran:  # the batches stopped before its hop (the daemon stopping)
            raise RetryableError("the poll did not run: the daemon is stopping")
        return item.result  # type: ignore[return-value]

    async def run(self) -> None:
        """Serve the batches until cancelled; polls still queued then are not run: their callers get a retryable
        error (the daemon is stopping: a poll against a stalled store must not hold its shutdown)."""
        slots = anyio.Semaphore(self.max_concurrent)
        self._serving = True
        try:
            async with anyio.create_task_group() as tg:
                try:
                    while True:
                        await self._ready.wait()
                        self._ready = anyio.Event()
                        await anyio.sleep(self.window_seconds)  # the polls due about now join
                        while self._queue:
                            await slots.acquire()
                            batch = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
                            tg.start_soon(self._hop, batch, slots)
                except BaseException:
                    self._serving = False  # hops under way stop after the poll they are running
                    raise
        finally:
            self._serving = False
            while self._queue:
                self._queue.popleft().done.set()

    async def _hop(self, batch: list[_Poll[object]], slots: anyio.Semaphore) -> None:
        self.hops += 1
        try:
            await anyio.to_thread.run_sync(_run_all, batch, lambda: self._serving)
        finally:
            slots.release()
            for item in batch:
                item.done.set()


def _run_all(batch: list[_Poll[object]], serving: Callable[[], bool]) -> None:
    for item in batch:
        if not serving():
            return
        item.run()
