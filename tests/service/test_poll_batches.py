"""Polls sharing worker-thread hops: each caller gets its own result or error, polls of one moment share a hop, and
nothing waits forever when the batches stop."""

from __future__ import annotations

import threading

import anyio
import pytest

from tableservice.errors import RetryableError, StorageError
from tableservice.service.poll_batches import PollBatches

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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
    outcome: dict[str, object] = {}

    def broken() -> int:
        raise StorageError("listing failed", path="s3://b/t/.hoodie")

    async def ask(name: str, fn: object) -> None:
        try:
            outcome[name] = await batches.poll(fn)  # type: ignore[arg-type]
        except StorageError as e:
            outcome[name] = e

    async with anyio.create_task_group() as tg:
        tg.start_soon(batches.run)
        await anyio.sleep(0.01)
        async with anyio.create_task_group() as callers:
            callers.start_soon(ask, "bad", broken)
            callers.start_soon(ask, "good", lambda: 7)
        tg.cancel_scope.cancel()
    assert outcome["good"] == 7
    error = outcome["bad"]
    assert isinstance(error, StorageError) and error.path == "s3://b/t/.hoodie"
    assert batches.hops == 1


async def test_without_the_batches_running_a_poll_takes_its_own_hop() -> None:
    batches = PollBatches()
    assert await batches.poll(lambda: "alone") == "alone"
    assert (batches.polls, batches.hops) == (1, 1)


async def test_polls_queued_when_the_batches_stop_still_run() -> None:
    """The runner cancelled while polls wait in its window: its clean-up runs them, each caller gets its value."""
    batches = PollBatches(window_seconds=5.0)  # a window the test never reaches
    got: dict[str, str] = {}

    async def ask(value: str) -> None:
        got[value] = await batches.poll(lambda: value.upper())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as callers:
            runner = anyio.CancelScope()

            async def run() -> None:
                with runner:
                    await batches.run()

            callers.start_soon(run)
            await anyio.sleep(0.01)
            callers.start_soon(ask, "a")
            callers.start_soon(ask, "b")
            await anyio.sleep(0.05)
            assert got == {}  # still in the window
            runner.cancel()
    assert got == {"a": "A", "b": "B"}
    assert await batches.poll(lambda: "after") == "after"  # no runner now: alone


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
