"""A workspace's request rate: `decisions serve --rate-limit N` lets each workspace send N
decisions requests a second (every key of a workspace counted together, as they spend one
balance), in bursts of up to N; past that, 429 `rate_limited` with `Retry-After`.

A token bucket per workspace, on the event loop (no lock: one thread). The batch client waits
a 429's `Retry-After` on every worker before sending again, so a run slows to the limit instead
of failing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class RateLimit:
    def __init__(self, per_second: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if not per_second > 0:
            raise ValueError("a rate limit must allow more than 0 requests a second")
        self.per_second = per_second
        self.burst = max(1.0, per_second)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # workspace -> (tokens, at)

    def wait(self, workspace: str) -> float:
        """Take one request from `workspace`'s allowance: 0.0 if it may go now, else the
        seconds until it may (nothing taken)."""
        now = self._clock()
        tokens, at = self._buckets.get(workspace, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.per_second)
        if tokens >= 1.0:
            self._buckets[workspace] = (tokens - 1.0, now)
            return 0.0
        self._buckets[workspace] = (tokens, now)
        return (1.0 - tokens) / self.per_second


def retry_after(seconds: float) -> str:
    """A `Retry-After` header value: whole seconds (RFC 9110), at least 1."""
    return str(max(1, math.ceil(seconds)))
