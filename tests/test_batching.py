"""MicroBatcher: work submitted together runs as one batch, each caller gets its own outcome."""

from __future__ import annotations

import asyncio
import threading

import pytest

from pipeline.engine.batching import MicroBatcher


class Recorder:
    """run_many that records its batches; odd numbers fail alone, -1 fails the whole batch."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.batches: list[list[int]] = []
        self.gate = gate
        self.entered = threading.Event()  # a batch is running (held at the gate, if any)

    def __call__(self, items: list[int]) -> list[int | BaseException]:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        self.batches.append(list(items))
        if -1 in items:
            raise RuntimeError("the whole batch failed")
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in items]


def test_a_lone_caller_is_its_own_batch_and_gets_its_outcome():
    recorder = Recorder()
    batcher = MicroBatcher(recorder)
    assert batcher.submit(4) == 40
    with pytest.raises(ValueError, match="odd 3"):
        batcher.submit(3)
    assert recorder.batches == [[4], [3]]


def test_coroutines_of_one_loop_iteration_go_as_one_batch():
    recorder = Recorder()
    batcher = MicroBatcher(recorder)

    async def scenario() -> list[object]:
        futures = [batcher.submit_async(i) for i in (2, 4, 5, 6)]
        return await asyncio.gather(*futures, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert outcomes[:2] == [20, 40] and outcomes[3] == 60
    assert isinstance(outcomes[2], ValueError)
    assert recorder.batches == [[2, 4, 5, 6]]


def test_work_arriving_while_a_batch_runs_waits_and_goes_together():
    gate = threading.Event()
    recorder = Recorder(gate)
    batcher = MicroBatcher(recorder)

    async def scenario() -> list[object]:
        first = batcher.submit_async(2)
        # The worker holds [2] at the gate. Waited for, not slept on: a loaded machine (CI)
        # may start the worker thread late.
        assert await asyncio.to_thread(recorder.entered.wait, 10)
        later = []
        for i in (4, 6, 8):
            later.append(batcher.submit_async(i))
            await asyncio.sleep(0)  # each in an iteration of its own
        threading.Thread(target=lambda: batcher.submit(10)).start()
        for _ in range(2000):  # until [4], [6], [8] and [10] are queued behind the gate
            if batcher._queue.qsize() == 4:
                break
            await asyncio.sleep(0.005)
        gate.set()
        return await asyncio.gather(first, *later)

    assert asyncio.run(scenario()) == [20, 40, 60, 80]
    assert recorder.batches[0] == [2]
    assert sorted(recorder.batches[1]) == [4, 6, 8, 10]  # one group commit for all of them


def test_a_failed_batch_fails_every_caller_in_it():
    batcher = MicroBatcher(Recorder())

    async def scenario() -> list[object]:
        futures = [batcher.submit_async(i) for i in (2, -1)]
        return await asyncio.gather(*futures, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert all(isinstance(o, RuntimeError) for o in outcomes)
