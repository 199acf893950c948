"""Which client connections sent a request lately: is this caller the only one being served?

A charge is normally committed by the ledger's writer thread, so that concurrent requests share
one transaction and the event loop serves others during the fsync. A caller alone on the server
has nobody to share with or to keep waiting; for it the handoff to the writer thread and back
is pure cost (about a quarter of its latency, measured at concurrency 1 with `make bench`), so
its charge is committed on the loop (unless another process holds the ledger's write lock: the
writer thread waits for that, not the loop). "Alone": no other connection sent a request within the
last `window_s`. Counting requests in flight would not do: at concurrency 8 the first request
read in a loop iteration finds nobody in flight yet, and every request would commit alone.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

WINDOW_S = 0.05


class ConnectionActivity:
    def __init__(self, *, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._last_seen: dict[Hashable, float] = {}
        self._pruned_at = 0.0

    def alone(self, connection: Hashable | None) -> bool:
        """Record a request from `connection`; true if no other connection sent one within the
        window. An unknown connection (None) is never alone."""
        if connection is None:
            return False
        now = time.monotonic()
        since = now - self.window_s
        last_seen = self._last_seen
        last_seen[connection] = now
        if now - self._pruned_at > self.window_s:  # at most once a window: O(1) a request
            self._pruned_at = now
            for other in [c for c, seen in last_seen.items() if seen < since]:
                del last_seen[other]
        return all(seen < since or other == connection for other, seen in last_seen.items())
