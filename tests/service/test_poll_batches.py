"""The idle schedule: parked tables' polls share worker-thread hops, a poll that finds the table idle keeps it parked
(its task does not wake), each task gets its own result or error, a wake from outside takes a table out, and
nothing waits forever when the schedule stops."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import pytest

from tableservice.errors import StorageError
from tableservice.service.poll_batches import PollBatches, Polled

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _start_runner(batches: PollBatches, tg: anyio.abc.TaskGroup) -> anyio.CancelScope:
    """Run the schedule in `tg` under a scope of its own: cancelling it stops the schedule (the daemon stopping)
    while the parked callers in `tg` go on."""
    runner = anyio.CancelScope()

    async def run() -> None:
        with runner:
            await batches.run()

    tg.start_soon(run)
    return runner


class Table:
    """A parked table's poll and settle rule: its polls (the due time each was given and the thread it ran in),
    idle for `idle_polls` polls, then handed back."""

    def __init__(self, name: str, idle_polls: int = 0, every: float = 0.02, poll: Callable[[], Any] | None = None):
        self.name = name
        self.idle_polls = idle_polls
        self.every = every
        self.polls: list[tuple[float, int]] = []
        self.settled: list[Any] = []
        self._poll = poll
        self.wake = anyio.Event()
        self.got: Polled[Any] | str | None = "not returned"

    def poll(self, due: float) -> Any:
        self.polls.append((due, threading.get_ident()))
        if self._poll is not None:
            return self._poll()
        return f"{self.name}#{len(self.polls)}"

    def settle(self, value: Any) -> float | None:
        self.settled.append(value)
        if len(self.settled) <= self.idle_polls:
            return time.monotonic() + self.every
        return None

    async def park(self, batches: PollBatches, due_at: float) -> None:
        try:
            self.got = await batches.park(due_at, self.poll, self.settle, self.wake)
        except BaseException as e:
            self.got = Polled(None, e)
            if not isinstance(e, Exception):
                raise


async def _park_all(batches: PollBatches, tables: list[Table], due: float | None = None) -> None:
    """Serve the schedule while `tables` park, all due at `due` (now by default), until every one is handed back."""
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(batches.run)
            await anyio.sleep(0.01)
            at = time.monotonic() if due is None else due
            async with anyio.create_task_group() as parked:
                for t in tables:
                    parked.start_soon(t.park, batches, at)
            tg.cancel_scope.cancel()


async def test_tables_due_together_share_hops_and_stay_parked_while_idle() -> None:
    batches = PollBatches(window_seconds=0.05, max_batch=8, max_concurrent=2)
    tables = [Table(f"t{i}", idle_polls=2) for i in range(12)]
    now = time.monotonic() + 0.02  # after the schedule starts
    await _park_all(batches, tables, now)
    loop_thread = threading.get_ident()
    for t in tables:
        # polled three times: two idle polls settled in place, the third handed back with its own value
        assert t.settled == [f"{t.name}#1", f"{t.name}#2", f"{t.name}#3"]
        assert t.got == Polled(f"{t.name}#3")
        assert all(ident != loop_thread for _, ident in t.polls)  # blocking work stays off the event loop
        dues = [due for due, _ in t.polls]
        assert dues[0] == now and dues[1] > now and dues[2] > dues[1]
    # 36 polls, at most 8 per hop: 5 hops at the least; 6 when each round of 12 takes two hops of its own (8 + 4).
    # A table polled in a round's first hop is due again within the window, so it may fill the round's second hop
    # when that hop forms after the first has settled (on a slow machine): 5 hops. Stalls of a window's length on a
    # busy machine can split a round into more, smaller hops; even then far fewer than one hop per poll (36).
    assert (batches.polls, batches.handed_back) == (36, 12)
    assert 5 <= batches.hops <= 12, batches.hops
    assert batches.parked == 0


async def test_a_table_due_within_the_window_joins_the_hop_and_a_later_one_does_not() -> None:
    batches = PollBatches(window_seconds=0.1)
    now_table, soon, later = Table("now"), Table("soon"), Table("later")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(batches.run)
            await anyio.sleep(0.01)
            start = time.monotonic()
            async with anyio.create_task_group() as parked:
                parked.start_soon(now_table.park, batches, start)
                parked.start_soon(soon.park, batches, start + 0.05)  # polled up to the window early
                parked.start_soon(later.park, batches, start + 0.4)
            tg.cancel_scope.cancel()
    assert now_table.polls[0][1] == soon.polls[0][1]  # one hop: one thread, one after the other
    assert batches.hops == 2
    assert later.polls[0][0] == start + 0.4
    assert (now_table.got, soon.got, later.got) == (Polled("now#1"), Polled("soon#1"), Polled("later#1"))


async def test_an_error_reaches_only_its_own_table() -> None:
    batches = PollBatches(window_seconds=0.05)

    def broken() -> int:
        raise StorageError("listing failed", path="s3://b/t/.hoodie")

    bad, good = Table("bad", poll=broken), Table("good", idle_polls=1)
    await _park_all(batches, [bad, good])
    assert isinstance(bad.got, Polled) and isinstance(bad.got.error, StorageError)
    assert bad.got.error.path == "s3://b/t/.hoodie"
    with pytest.raises(StorageError, match="listing failed"):
        bad.got.get()
    assert bad.settled == []  # an error is not settled: the table's task handles it
    assert good.settled == ["good#1", "good#2"] and good.got == Polled("good#2")


async def test_a_settle_rule_that_raises_is_the_tables_error() -> None:
    batches = PollBatches(window_seconds=0.01)
    table = Table("t")

    def bad_rule(value: Any) -> float | None:
        raise ValueError(f"no rule for {value}")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(batches.run)
            await anyio.sleep(0.01)
            got = await batches.park(time.monotonic(), table.poll, bad_rule, table.wake)
            tg.cancel_scope.cancel()
    assert got is not None and isinstance(got.error, ValueError) and str(got.error) == "no rule for t#1"


async def test_without_the_schedule_running_a_parked_table_waits_for_its_due_time_and_polls_itself() -> None:
    batches = PollBatches()
    table = Table("t")
    started = time.monotonic()
    assert await batches.park(started + 0.05, table.poll, table.settle, table.wake) is None
    assert time.monotonic() - started >= 0.05
    assert table.polls == []
    assert await batches.poll(lambda: "alone") == "alone"
    assert (batches.polls, batches.hops) == (1, 1)


async def test_a_wake_takes_a_queued_table_out_without_its_poll() -> None:
    """A stop or a table-service-manager request wakes a parked table: its task polls itself, at once."""
    batches = PollBatches(window_seconds=0.01)
    table = Table("t")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(batches.run)
            await anyio.sleep(0.01)
            tg.start_soon(table.park, batches, time.monotonic() + 10)
            await anyio.sleep(0.05)
            assert batches.parked == 1
            table.wake.set()
            await anyio.sleep(0.05)
            assert table.got is None and table.polls == []
            assert batches.parked == 0
            await anyio.sleep(0.05)  # the schedule drops it: no poll at its old due time either
            tg.cancel_scope.cancel()
    assert table.polls == [] and batches.hops == 0


async def test_a_wake_while_the_tables_poll_runs_gets_that_poll_unsettled() -> None:
    batches = PollBatches(window_seconds=0.01)
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(5)
        return "fresh"

    table = Table("t", idle_polls=5, poll=slow)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(batches.run)
            await anyio.sleep(0.01)
            tg.start_soon(table.park, batches, time.monotonic())
            await anyio.to_thread.run_sync(started.wait, 5)
            table.wake.set()
            await anyio.sleep(0.02)
            assert table.got == "not returned"  # waits for the poll under way (never two polls of one table)
            release.set()
            while table.got == "not returned":  # the poll's thread finishes, then the table takes its result
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    assert table.got == Polled("fresh")
    assert table.settled == []  # handed back as it is, though the rule would have kept the table parked


async def test_a_cancelled_tables_poll_is_not_run() -> None:
    """A table removed while it waits (its scope cancelled): its poll is not run (it would bring back the metrics
    and priority state the daemon just dropped for that table)."""
    batches = PollBatches(window_seconds=0.01)
    removed, kept = Table("removed"), Table("kept")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(batches.run)
            await anyio.sleep(0.01)
            gone = anyio.CancelScope()

            async def removed_table() -> None:
                with gone:
                    await removed.park(batches, time.monotonic() + 0.1)

            tg.start_soon(removed_table)
            await anyio.sleep(0.02)
            gone.cancel()
            await kept.park(batches, time.monotonic() + 0.1)
            tg.cancel_scope.cancel()
    assert removed.polls == [] and kept.got == Polled("kept#1")


async def test_when_the_schedule_stops_queued_tables_come_back_without_a_poll() -> None:
    """The runner cancelled (the daemon stopping) while tables wait for their due time: they are handed back
    without a poll (a stalled store must not hold the shutdown), and later parks wait alone."""
    batches = PollBatches(window_seconds=0.01)
    tables = [Table("a"), Table("b")]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as callers:
            runner = _start_runner(batches, callers)
            await anyio.sleep(0.01)
            for t in tables:
                callers.start_soon(t.park, batches, time.monotonic() + 30)
            await anyio.sleep(0.05)
            runner.cancel()
    assert [t.got for t in tables] == [None, None]
    assert all(t.polls == [] for t in tables)
    later = Table("later")
    assert await batches.park(time.monotonic(), later.poll, later.settle, later.wake) is None


async def test_a_hop_under_way_when_the_schedule_stops_ends_after_its_current_poll() -> None:
    batches = PollBatches(window_seconds=0.05, max_batch=8, max_concurrent=1)
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(5)
        return "done"

    tables = [Table(f"t{i}", idle_polls=5, poll=slow) for i in range(4)]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as callers:
            runner = _start_runner(batches, callers)
            await anyio.sleep(0.01)
            now = time.monotonic()
            for t in tables:
                callers.start_soon(t.park, batches, now)
            await anyio.to_thread.run_sync(started.wait, 5)  # the hop runs its first poll
            runner.cancel()
            await anyio.sleep(0.05)
            release.set()
    polled = [t for t in tables if t.polls]
    assert len(polled) == 1  # the poll under way finished; the other three of its hop were not run
    assert polled[0].got == Polled("done") and polled[0].settled == []  # handed back: the schedule is gone
    assert [t.got for t in tables if not t.polls] == [None, None, None]


async def test_a_base_exception_of_one_poll_reaches_its_table_and_the_hop_goes_on() -> None:
    batches = PollBatches(window_seconds=0.05)

    class Stop(BaseException):
        pass

    def stops() -> None:
        raise Stop()

    stopping, after = Table("stops", poll=stops), Table("after")
    await _park_all(batches, [stopping, after])
    assert isinstance(stopping.got, Polled) and isinstance(stopping.got.error, Stop)
    assert after.got == Polled("after#1")
    assert batches.hops == 1
