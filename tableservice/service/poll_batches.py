"""Polls of many tables share worker-thread hops.

Every table's worker polls on its own schedule, and a poll is blocking work (a timeline listing), so it runs in a
worker thread. A hop to a thread and back costs the event loop and the thread more CPU than an idle table's poll
itself (about 0.1 ms of CPU each way, wake-ups included, against 0.15 ms for the poll). With a thousand tables that
is most of the daemon's idle CPU. `PollBatches` gathers the polls asked for within `window_seconds` and runs them
one after another in one hop, up to `max_batch` per hop and `max_concurrent` hops at once (so that a slow store's
listings still overlap). The daemon batches only the polls of tables whose last poll found nothing to do: a
table's first poll (which reads its properties) and a busy table's take hops of their own, so that a slow poll
does not hold idle ones back.

Until `run` is serving (and after it stops), a poll takes its own hop, as before.
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

    def run(self) -> None:
        self.ran = True
        try:
            self.result = self.fn()
        except Exception as e:  # handed to the table's own task, which raises it as a lone poll would
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

    async def poll(self, fn: Callable[[], T]) -> T:
        """`fn()` in a worker thread, in a batch with the other polls of about the same moment."""
        self.polls += 1
        if not self._serving:
            self.hops += 1
            return await anyio.to_thread.run_sync(fn)
        item: _Poll[T] = _Poll(fn)
        self._queue.append(item)  # type: ignore[arg-type]
        self._ready.set()
        await item.done.wait()
        if item.error is not None:
            raise item.error
        if not item.ran:  # its hop ended before reaching it (the daemon stopping)
            raise RetryableError("the poll did not run: the daemon is stopping")
        return item.result  # type: ignore[return-value]

    async def run(self) -> None:
        """Serve the batches until cancelled; polls still queued then take their own hops."""
        slots = anyio.Semaphore(self.max_concurrent)
        self._serving = True
        try:
            async with anyio.create_task_group() as tg:
                while True:
                    await self._ready.wait()
                    self._ready = anyio.Event()
                    await anyio.sleep(self.window_seconds)  # the polls due about now join
                    while self._queue:
                        await slots.acquire()
                        batch = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
                        tg.start_soon(self._hop, batch, slots)
        finally:
            self._serving = False
            with anyio.CancelScope(shield=True):
                while self._queue:
                    item = self._queue.popleft()
                    await anyio.to_thread.run_sync(item.run)
                    item.done.set()

    async def _hop(self, batch: list[_Poll[object]], slots: anyio.Semaphore) -> None:
        self.hops += 1
        try:
            await anyio.to_thread.run_sync(_run_all, batch)
        finally:
            slots.release()
            for item in batch:
                item.done.set()


def _run_all(batch: list[_Poll[object]]) -> None:
    for item in batch:
        item.run()
