"""The decisions a run may still spend (--budget), reserved before a request and settled after.

Thread-safe, so concurrent workers can never together overshoot the cap.
"""

from __future__ import annotations

import threading


class Budget:
    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.spent = 0
        self._reserved = 0
        # Decisions perhaps charged with no answer to say so (an answer lost, then no reply
        # but refusals or failures): not counted as spent, but never spent again by this run.
        self.in_doubt = 0
        self._lock = threading.Lock()

    def reserve(self, cost: int) -> bool:
        """Hold `cost` decisions for a request about to be sent; False if the cap forbids it."""
        with self._lock:
            if self.limit is not None and self._taken() + cost > self.limit:
                return False
            self._reserved += cost
            return True

    def settle(self, reserved: int, spent: int, *, in_doubt: int = 0) -> None:
        """The answer came: `spent` of the `reserved` decisions were really charged, and
        `in_doubt` perhaps were (see `in_doubt`)."""
        with self._lock:
            self._reserved -= reserved
            self.spent += spent
            self.in_doubt += in_doubt

    @property
    def perhaps_charged(self) -> int:
        """Decisions perhaps charged with no answer to say so: those in doubt, and those held
        by requests in flight (a stopped run's stay unanswered)."""
        with self._lock:
            return self.in_doubt + self._reserved

    @property
    def remaining(self) -> int | None:
        with self._lock:
            return None if self.limit is None else self.limit - self._taken()

    def _taken(self) -> int:
        return self.spent + self._reserved + self.in_doubt
