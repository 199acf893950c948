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
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

# One result per item, in order; an exception in place of a result fails that item alone.
RunMany = Callable[[Sequence[Item]], Sequence["Result | BaseException"]]


class MicroBatcher(Generic[Item, Result]):
    def __init__(self, run_many: RunMany, *, max_batch: int = 256, name: str = "batcher") -> None:
        self._run_many = run_many
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[tuple[Item, Future[Result]]] = queue.SimpleQueue()
        self._name = name
        self._worker: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def submit(self, item: Item) -> Result:
        """Evaluate `item` with whatever else is waiting; blocks until its result is ready."""
        future: Future[Result] = Future()
        self._queue.put((item, future))
        self._ensure_worker()
        return future.result()

    def submit_async(self, item: Item) -> asyncio.Future[Result]:
        """`submit` for a coroutine: queued at once; await the future for the result (the event
        loop is free while the worker runs the batch)."""
        future: Future[Result] = Future()
        self._queue.put((item, future))
        self._ensure_worker()
        return asyncio.wrap_future(future)

    def _ensure_worker(self) -> None:
        if self._worker is not None:
            return
        with self._start_lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._worker.start()

    def _work(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < self._max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._run(batch)

    def _run(self, batch: list[tuple[Item, Future[Result]]]) -> None:
        try:
            results = self._run_many([item for item, _ in batch])
        except BaseException as exc:
            for _, future in batch:
                future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
