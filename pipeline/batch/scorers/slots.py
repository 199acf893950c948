"""How many requests a remote run has in flight: --concurrency, fewer once the service says so.

A service past its connection limit (`decisions serve --max-connections`, shared by every
client) turns a new connection away, 503 `too_many_connections`, before reading the request: so
the run takes one slot fewer each time, down to one, and its workers queue for the slots left,
which go on over the connections the service accepted. A slot comes back after as many
answers as there are slots without a refusal, so a run goes back up to --concurrency once
the other clients are gone. Two runs of 24 against a limit of 32
settle below it together, where each worker retrying its own connection was turned away
again and again (the service's keep-alive connections are never free for long).
"""

from __future__ import annotations

import asyncio
from collections import deque


class Slots:
    def __init__(self, limit: int) -> None:
        self.limit = self.most = limit
        self._served = 0
        self._busy = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    async def take(self) -> None:
        while self._busy >= self.limit:
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                self._wake()  # the slot it was woken for, passed on
                raise
        self._busy += 1

    def give_back(self) -> None:
        self._busy -= 1
        self._wake()

    def fewer(self) -> None:
        """A connection was turned away: one slot fewer, never none."""
        self.limit = max(1, self.limit - 1)
        self._served = 0

    def served(self) -> None:
        """A request answered: after as many answers as slots without a refusal, one slot
        more, up to --concurrency (the other clients may have gone)."""
        if self.limit >= self.most:
            return
        self._served += 1
        if self._served >= self.limit:
            self._served = 0
            self.limit += 1
            self._wake()

    def _wake(self) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
