"""Polls sharing worker-thread hops: each caller gets its own result or error, polls of one moment share a hop, and
nothing waits forever when the batches stop."""

from __future__ import annotations

import threading

import anyio
import anyio.abc
import pytest

from tableservice.errors import RetryableError, StorageError
from tableservice.service.poll_batches import PollBatches

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _start_runner(batches: PollBatches, tg: anyio.abc.TaskGroup) -> anyio.CancelScope:
    """Run the batches in `tg` under a scope of their own: cancelling it stops them (the daemon stopping) while the
    callers in `tg` go on."""
    runner = anyio.CancelScope()

    async def run() -> None:
        with runner:
            await batches.run()

    tg.start_soon(run)
    return runner


async def _ask(
    batches: PollBatches,
    key: object,
    fn: object,
    got: dict[object, object],
    catch: tuple[type[BaseException], ...] = (RetryableError,),
) -> None:
    """One caller: its poll's value, or the error of `catch` it got, into `got[key]`."""
    try:
        got[key] = await batches.poll(fn)  # type: ignore[arg-type]
    except catch as e:
        got[key] = e


def _thread_of(tag: int) -> tuple[int, int]:
    return tag, threading.get_ident()


async def test_polls_of_one_moment_share_a_hop_and_get_their_own_results() -> None:
    batches = PollBatches(window_seconds=0.05, max_batch=8, max_concurrent=2)
    results: dict[int, tuple[int, int]] = {}

    async def one(tag: int) -> None:
        results[tag] = await batches.poll(lambda: _thread_of(tag))

    async with anyio.create_task_group() as tg:
        tg.start_soon(batches.run)
        await anyio.sleep(0.01)
        async with anyio.create_task_group() as callers:
            for tag in range(20):
                callers.start_soon(one, tag)
        tg.cancel_scope.cancel()
    assert sorted(results) == list(range(20))
    assert all(results[tag][0] == tag for tag in results)
    loop_thread = threading.get_ident()
    assert all(ident != loop_thread for _, ident in results.values())  # blocking work stays off the event loop
    # 20 polls asked for at once: batches of at most 8, so 3 hops (not 20), each in one thread
    assert (batches.polls, batches.hops) == (20, 3)
    threads_used = {ident for _, ident in results.values()}
    assert len(threads_used) <= 3


async def test_an_error_reaches_only_its_own_caller() -> None:
    batches = PollBatches(window_seconds=0.02)
    outcome: dict[object, object] = {}

    def broken() -> int:
        raise StorageError("listing failed", path="s3://b/t/.hoodie")

    async with anyio.create_task_group() as tg:
        tg.start_soon(batches.run)
        await anyio.sleep(0.01)
        async with anyio.create_task_group() as callers:
            callers.start_soon(_ask, batches, "bad", broken, outcome, (StorageError,))
            callers.start_soon(_ask, batches, "good", lambda: 7, outcome)
        tg.cancel_scope.cancel()
    assert outcome["good"] == 7
    error = outcome["bad"]
    assert isinstance(error, StorageError) and error.path == "s3://b/t/.hoodie"
    assert batches.hops == 1


async def test_without_the_batches_running_a_poll_takes_its_own_hop() -> None:
    batches = PollBatches()
    assert await batches.poll(lambda: "alone") == "alone"
    assert (batches.polls, batches.hops) == (1, 1)


async def test_a_poll_asked_alone_takes_its_own_hop_while_the_batches_run() -> None:
    """A table's first poll and a busy table's: not held in the window, not sharing a hop with idle tables'."""
    batches = PollBatches(window_seconds=5.0)  # a batched poll would wait 5 s
    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(batches.run)
            await anyio.sleep(0.01)
            assert await batches.poll(lambda: "first", alone=True) == "first"
            tg.cancel_scope.cancel()
    assert (batches.polls, batches.hops) == (1, 1)


async def test_polls_queued_when_the_batches_stop_are_not_run() -> None:
    """The runner cancelled while polls wait in its window (the daemon stopping): they are not run (a stalled store
    must not hold the shutdown); their callers get a retryable error, and later polls go alone."""
    batches = PollBatches(window_seconds=5.0)  # a window the test never reaches
    ran: list[str] = []
    got: dict[object, object] = {}

    with anyio.fail_after(5):
        async with anyio.create_task_group() as callers:
            runner = _start_runner(batches, callers)
            await anyio.sleep(0.01)
            for value in ("a", "b"):
                callers.start_soon(_ask, batches, value, lambda v=value: ran.append(v), got)
            await anyio.sleep(0.05)
            assert got == {}  # still in the window
            runner.cancel()
    assert ran == []
    assert set(got) == {"a", "b"} and all(isinstance(e, RetryableError) for e in got.values())
    assert await batches.poll(lambda: "after") == "after"  # no runner now: alone


async def test_a_hop_under_way_when_the_batches_stop_ends_after_its_current_poll() -> None:
    batches = PollBatches(window_seconds=0.01, max_batch=8, max_concurrent=1)
    started = threading.Event()
    release = threading.Event()
    ran: list[int] = []

    def slow(i: int) -> int:
        started.set()
        release.wait(5)
        ran.append(i)
        return i

    got: dict[object, object] = {}

    with anyio.fail_after(10):
        async with anyio.create_task_group() as callers:
            runner = _start_runner(batches, callers)
            await anyio.sleep(0.01)
            for i in range(4):
                callers.start_soon(_ask, batches, i, lambda i=i: slow(i), got)
            await anyio.to_thread.run_sync(started.wait, 5)  # the hop runs its first poll
            runner.cancel()
            await anyio.sleep(0.05)
            release.set()
    assert len(ran) == 1  # the poll under way finished; the other three of its hop were not run
    assert got[ran[0]] == ran[0]
    assert sum(isinstance(v, RetryableError) for v in got.values()) == 3


async def test_a_cancelled_callers_poll_is_not_run() -> None:
    """A table removed while its poll waits in the window: the poll is not run (it would bring back the metrics
    and priority state the daemon just dropped for that table)."""
    batches = PollBatches(window_seconds=0.1)
    ran: list[str] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(batches.run)
            await anyio.sleep(0.01)
            gone = anyio.CancelScope()

            async def removed_table() -> None:
                with gone:
                    await batches.poll(lambda: ran.append("removed"))

            tg.start_soon(removed_table)
            await anyio.sleep(0.02)
            gone.cancel()

            def kept() -> str:
                ran.append("kept")
                return "kept"

            assert await batches.poll(kept) == "kept"
            tg.cancel_scope.cancel()
    assert ran == ["kept"]


async def test_a_base_exception_of_one_poll_reaches_its_caller_and_the_batch_goes_on() -> None:
    batches = PollBatches(window_seconds=0.02)
    outcome: dict[object, object] = {}

    class Stop(BaseException):
        pass

    def stops() -> None:
        raise Stop()

    async with anyio.create_task_group() as tg:
        tg.start_soon(batches.run)
        await anyio.sleep(0.01)
        async with anyio.create_task_group() as callers:
            callers.start_soon(_ask, batches, "stops", stops, outcome, (Stop,))
            await anyio.sleep(0)
            callers.start_soon(_ask, batches, "after", lambda: "fine", outcome)
        tg.cancel_scope.cancel()
    assert isinstance(outcome["stops"], Stop)
    assert outcome["after"] == "fine"
    assert batches.hops == 1


async def test_a_poll_whose_hop_never_reached_it_is_a_retryable_error() -> None:
    batches = PollBatches()
    batches._serving = True  # a runner that stops before it takes the queue (its clean-up not yet run)

    async def release() -> None:
        await anyio.sleep(0.01)
        (item,) = batches._queue
        item.done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(release)
        with pytest.raises(RetryableError, match="did not run"):
            await batches.poll(lambda: "never")
