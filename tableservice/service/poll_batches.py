"""Idle tables wait in one schedule, and their polls share worker-thread hops.

A poll is blocking work (a timeline listing), so it runs in a worker thread. For a table whose last poll found
nothing to do, the poll itself is cheap (about 0.15 ms of CPU on local disk), and what surrounds it costs more: its
task's timer and wake-up, a cancel scope, events, and a thread hop there and back. With a thousand tables that is
most of the daemon's idle CPU.

So an idle table's task *parks* here (`PollBatches.park`) until it has something to do, instead of waking for
every poll. One scheduler (`run`) keeps the parked tables in a heap by due time; when the first is due, it takes
every parked table due within `window_seconds` (polled that much early at most), up to `max_batch` of them, and
polls them one after another in one thread hop (at most `max_concurrent` hops at once, so that a slow store's
listings still overlap). Back in the event loop, each poll's result is *settled* by the table's own rule
(`settle`): when the table stays idle, the rule gives its next due time and the table stays parked (its task does
not wake); otherwise (work to do, an error, or the rule says so) the result is handed back and the task wakes.

A table's task that is woken from outside (a stop, a request of the table-service-manager endpoint) leaves the
schedule: a poll not yet started is not run (`park` returns None: the task polls itself); one under way is waited
for and its result handed back. A table's first poll and a busy table's take a hop of their own (`poll`).

Until `run` is serving (and after it stops), a parked table waits for its due time or a wake and then polls in a
hop of its own, as a busy table does. Polls still queued when `run` stops are not run (a stalled store must not
hold the daemon's shutdown): their tables are handed back without a result.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio

T = TypeVar("T")


@dataclass(frozen=True)
class Polled(Generic[T]):
    """A parked table's poll handed back to its task: the poll's value, or the error it raised."""

    value: T | None
    error: BaseException | None = None

    def get(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class _State(enum.Enum):
    QUEUED = "queued"  # in the schedule, waiting for its due time
    RUNNING = "running"  # taken into a hop
    DONE = "done"  # handed back to its task
    GONE = "gone"  # its task left (woken, cancelled): nothing more is done for it


@dataclass(eq=False)
class _Parked(Generic[T]):
    due_at: float
    poll: Callable[[float], T]
    settle: Callable[[T], float | None]
    wake: anyio.Event
    state: _State = _State.QUEUED
    polled: Polled[T] | None = None  # what its poll in the current hop gave (None: not run)
    outcome: Polled[T] | None = None  # what was handed back to its task
    withdrawn: bool = False  # its task was woken while its poll ran: the result goes to the task, unsettled
    finished: anyio.Event | None = field(default=None, repr=False)

    def run(self) -> None:
        if self.state is not _State.RUNNING:
            return
        try:
            self.polled = Polled(self.poll(self.due_at))
        except BaseException as e:  # handed to the table's own task, which raises it as its own poll would
            self.polled = Polled(None, e)


class PollBatches:
    def __init__(self, window_seconds: float = 0.05, max_batch: int = 16, max_concurrent: int = 8) -> None:
        self.window_seconds = window_seconds
        self.max_batch = max_batch
        self.max_concurrent = max_concurrent
        self._heap: list[tuple[float, int, _Parked[Any]]] = []
        self._order = itertools.count()
        self._pushed = anyio.Event()
        self._serving = False
        self.hops = 0  # thread hops taken for polls (batched or alone), for tests and benchmarks
        self.polls = 0
        self.handed_back = 0  # parked polls whose result woke their task

    @property
    def parked(self) -> int:
        """Tables waiting in the schedule."""
        return sum(1 for _, _, entry in self._heap if entry.state is _State.QUEUED)

    async def poll(self, fn: Callable[[], T]) -> T:
        """`fn()` in a worker thread of its own (a table's first poll, a busy table's)."""
        self.polls += 1
        self.hops += 1
        return await anyio.to_thread.run_sync(fn)

    async def park(
        self, due_at: float, poll: Callable[[float], T], settle: Callable[[T], float | None], wake: anyio.Event
    ) -> Polled[T] | None:
        """Wait until the table has something to do: `poll(due)` runs in a shared hop at each due time (from
        `due_at` on), and `settle(value)`, in the event loop, gives the next due time or None to hand the value
        back. Returns the poll handed back (its value or error), or None when `wake` was set from outside before
        a poll started (the caller polls itself)."""
        if not self._serving:
            with anyio.move_on_after(max(0.0, due_at - time.monotonic())):
                await wake.wait()
            return None
        entry: _Parked[T] = _Parked(due_at, poll, settle, wake)
        self._push(entry)
        try:
            await wake.wait()
            if entry.state is _State.RUNNING:  # woken from outside while its poll runs: wait for that poll
                entry.withdrawn = True
                entry.finished = anyio.Event()
                await entry.finished.wait()
        except BaseException:  # cancelled (the table no longer served, the daemon stopping): its poll is not run
            entry.state = _State.GONE
            raise
        if entry.state is _State.QUEUED:
            entry.state = _State.GONE
            return None
        return entry.outcome

    def _push(self, entry: _Parked[Any]) -> None:
        entry.state = _State.QUEUED
        earliest = self._heap[0][0] if self._heap else None
        heapq.heappush(self._heap, (entry.due_at, next(self._order), entry))
        if earliest is None or entry.due_at < earliest:
            self._pushed.set()

    async def run(self) -> None:
        """Serve the schedule until cancelled; tables still queued then are handed back without a poll."""
        slots = anyio.Semaphore(self.max_concurrent)
        self._serving = True
        try:
            async with anyio.create_task_group() as tg:
                try:
                    while True:
                        batch = await self._next_batch()
                        await slots.acquire()
                        tg.start_soon(self._hop, batch, slots)
                except BaseException:
                    self._serving = False  # hops under way stop after the poll they are running
                    raise
        finally:
            self._serving = False
            while self._heap:
                _, _, entry = heapq.heappop(self._heap)
                if entry.state is _State.QUEUED:
                    self._hand_back(entry, None)

    async def _next_batch(self) -> list[_Parked[Any]]:
        """Wait for the earliest due table; it and the tables due within the window (at most `max_batch`)."""
        heap = self._heap
        while True:
            while heap and heap[0][2].state is not _State.QUEUED:
                heapq.heappop(heap)  # tables that left the schedule
            if not heap:
                wait = None
            else:
                wait = heap[0][0] - time.monotonic()
                if wait <= 0:
                    break
            self._pushed = anyio.Event()
            with anyio.move_on_after(wait if wait is not None else float("inf")):
                await self._pushed.wait()
        horizon = time.monotonic() + self.window_seconds
        batch: list[_Parked[Any]] = []
        while heap and heap[0][0] <= horizon and len(batch) < self.max_batch:
            _, _, entry = heapq.heappop(heap)
            if entry.state is _State.QUEUED:
                entry.state = _State.RUNNING
                batch.append(entry)
        return batch

    async def _hop(self, batch: list[_Parked[Any]], slots: anyio.Semaphore) -> None:
        self.hops += 1
        try:
            await anyio.to_thread.run_sync(_run_all, batch, lambda: self._serving)
        finally:
            slots.release()
            for entry in batch:
                self._settle(entry)

    def _settle(self, entry: _Parked[Any]) -> None:
        if entry.finished is not None:
            entry.finished.set()
        if entry.state is not _State.RUNNING:
            return
        polled, entry.polled = entry.polled, None
        if polled is None:  # the schedule stopped before its poll
            self._hand_back(entry, None)
            return
        self.polls += 1
        if polled.error is not None or entry.withdrawn or not self._serving:
            self._hand_back(entry, polled)
            return
        try:
            next_due = entry.settle(polled.value)
        except Exception as e:  # a bug in the rule: the table's task meets it as its poll's error
            self._hand_back(entry, Polled(None, e))
            return
        if next_due is None:
            self._hand_back(entry, polled)
        else:
            entry.due_at = next_due
            self._push(entry)

    def _hand_back(self, entry: _Parked[Any], polled: Polled[Any] | None) -> None:
        entry.state = _State.DONE
        entry.outcome = polled
        if polled is not None:
            self.handed_back += 1
        entry.wake.set()


def _run_all(batch: list[_Parked[Any]], serving: Callable[[], bool]) -> None:
    for entry in batch:
        if not serving():
            return
        entry.run()
