from __future__ import annotations

import anyio

from tableservice.service.quotas import GroupCapacity


def test_oldest_pending_work_goes_first() -> None:
    order: list[str] = []

    async def scenario() -> None:
        capacity = GroupCapacity(1)
        gate = anyio.Event()

        async def holder() -> None:
            async with capacity.slot("0"):
                await gate.wait()

        async def waiter(key: str) -> None:
            async with capacity.slot(key):
                order.append(key)

        async with anyio.create_task_group() as tg:
            tg.start_soon(holder)
            await anyio.sleep(0.05)
            for key in ("20250103", "20250101", "20250102"):
                tg.start_soon(waiter, key)
                await anyio.sleep(0.01)
            assert capacity.waiting == 3
            gate.set()

    anyio.run(scenario)
    assert order == ["20250101", "20250102", "20250103"]


def test_cancelled_waiter_releases_nothing_it_did_not_get() -> None:
    async def scenario() -> None:
        capacity = GroupCapacity(1)
        async with capacity.slot("a"):
            with anyio.move_on_after(0.05):
                async with capacity.slot("b"):
                    raise AssertionError("must not get the slot")
            assert capacity.waiting == 0 and capacity.in_use == 1
        assert capacity.in_use == 0
        async with capacity.slot("c"):
            assert capacity.in_use == 1

    anyio.run(scenario)
