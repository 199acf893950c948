"""The remote run's in-flight slots: fewer on each connection turned away, back with answers."""

from __future__ import annotations

import asyncio

from pipeline.batch.scorers.slots import Slots


def test_slots_shrink_on_refusals_and_come_back_with_answers() -> None:
    async def scenario() -> list[int]:
        slots = Slots(4)
        seen = []
        for _ in range(5):
            slots.fewer()
        seen.append(slots.limit)  # never below one
        for _ in range(1 + 2 + 3):  # as many answers as slots, each time: one more
            slots.served()
        seen.append(slots.limit)
        for _ in range(10):
            slots.served()
        seen.append(slots.limit)  # never above --concurrency
        return seen

    assert asyncio.run(scenario()) == [1, 4, 4]


def test_a_worker_waits_for_a_slot_and_gets_the_one_given_back() -> None:
    async def scenario() -> list[str]:
        slots, order = Slots(1), []

        async def worker(name: str, hold: float) -> None:
            await slots.take()
            order.append(name)
            await asyncio.sleep(hold)
            slots.give_back()

        await asyncio.gather(worker("first", 0.01), worker("second", 0))
        return order

    assert asyncio.run(scenario()) == ["first", "second"]
