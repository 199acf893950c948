"""Micro-batching: work that arrives together is done together, by one worker thread.

The ledger's writes use it: a SQLite transaction costs about the same (one fsync) for one
charge as for fifty. Concurrent callers hand their item to the worker, which takes everything
queued at that moment, runs it as one batch and hands each caller its own result. A lone
caller waits for nobody: its batch is just itself. Callers on a thread block in `submit`;
callers on an event loop await `submit_async`, and the loop goes on serving meanwhile.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

# One result per item, in order; an exception in place of a result fails that item alone.
RunMany = Callable[[Sequence[Item]], Sequence["Result | BaseException"]]
Outcome = Any  # a result, or the exception that failed its item


class MicroBatcher(Generic[Item, Result]):
    """`fails_those_waiting`: exceptions of `run_many` that fail every item waiting behind the
    batch as well (a lock held past its timeout: each would wait as long again)."""

    def __init__(
        self,
        run_many: RunMany,
        *,
        max_batch: int = 256,
        name: str = "batcher",
        fails_those_waiting: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._run_many = run_many
        self._max_batch = max_batch
        self._fails_those_waiting = fails_those_waiting
        self._queue: queue.SimpleQueue[tuple[list[Item], Future[list[Outcome]]]] = (
            queue.SimpleQueue()
        )
        self._name = name
        self._worker: threading.Thread | None = None
        self._start_lock = threading.Lock()
        # Per event loop: items submitted during the current iteration, handed over together.
        self._gathering: dict[asyncio.AbstractEventLoop, list[tuple[Item, asyncio.Future]]] = {}

    def submit(self, item: Item) -> Result:
        """Evaluate `item` with whatever else is waiting; blocks until its result is ready."""
        (outcome,) = self._hand_over([item]).result()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def submit_async(self, item: Item) -> asyncio.Future[Result]:
        """`submit` for a coroutine: await the future (the loop serves others meanwhile).

        Items submitted during one iteration of the loop go to the worker as one bundle, and
        come back with one wake-up of the loop: two thread handoffs per batch, not per item
        (measured: a third more requests per second at concurrency 8 and 32)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        gathering = self._gathering.get(loop)
        if gathering is None:
            gathering = self._gathering[loop] = []
            loop.call_soon(self._hand_over_gathered, loop)
        gathering.append((item, future))
        return future

    def _hand_over_gathered(self, loop: asyncio.AbstractEventLoop) -> None:
        gathered = self._gathering.pop(loop)
        outcomes = asyncio.wrap_future(self._hand_over([item for item, _ in gathered]), loop=loop)
        outcomes.add_done_callback(lambda done: _settle(gathered, done))

    def _hand_over(self, items: list[Item]) -> Future[list[Outcome]]:
        future: Future[list[Outcome]] = Future()
        self._queue.put((items, future))
        self._ensure_worker()
        return future

    def _ensure_worker(self) -> None:
        if self._worker is not None:
            return
        with self._start_lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._worker.start()

    def _work(self) -> None:
        while True:
            entries = [self._queue.get()]
            size = len(entries[0][0])
            while size < self._max_batch:
                try:
                    entry = self._queue.get_nowait()
                except queue.Empty:
                    break
                entries.append(entry)
                size += len(entry[0])
            self._run(entries)

    def _run(self, entries: list[tuple[list[Item], Future[list[Outcome]]]]) -> None:
        try:
            outcomes = list(self._run_many([item for items, _ in entries for item in items]))
        except BaseException as exc:
            if isinstance(exc, self._fails_those_waiting):
                entries = [*entries, *self._waiting()]
            for _, future in entries:
                future.set_exception(exc)
            return
        start = 0
        for items, future in entries:
            future.set_result(outcomes[start : start + len(items)])
            start += len(items)

    def _waiting(self) -> list[tuple[list[Item], Future[list[Outcome]]]]:
        waiting = []
        while True:
            try:
                waiting.append(self._queue.get_nowait())
            except queue.Empty:
                return waiting


def _settle(gathered: list[tuple[Any, asyncio.Future]], done: asyncio.Future) -> None:
    """Each awaiting caller's own outcome (or the batch's failure), on the loop."""
    failure = None if done.cancelled() else done.exception()
    for index, (_, future) in enumerate(gathered):
        if future.done():
            continue
        if done.cancelled():
            future.cancel()
        elif failure is not None:
            future.set_exception(failure)
        else:
            outcome = done.result()[index]
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
