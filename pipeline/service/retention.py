"""How long the service keeps answers under their Idempotency-Key.

Every request sent with a key stores its answer in the ledger, so that the same request sent
again (a retry after a lost answer, a batch run resumed) is answered without a new charge.
Kept for ever, a busy ledger grows by one to three kilobytes a request, so records older than
`--keep-answers-days` (30 by default; DESIGN.md promises at least 24 hours) are deleted as
the server starts and every hour after. The charges themselves stay in the ledger's entries.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipeline.errors import LedgerError

if TYPE_CHECKING:
    from pipeline.ledger.sqlite import SqliteLedger

KEEP_ANSWERS_DAYS = 30.0
MIN_KEEP_ANSWERS_DAYS = 1.0  # DESIGN.md: idempotency keys are kept at least 24 h
PRUNE_EVERY_S = 3600.0
SECONDS_PER_DAY = 86_400

log = logging.getLogger("pipeline.service")


class AnswerRetention:
    """Forgets the answers older than `keep_days`: `forget_now` once, `start` at once and every
    hour after, on a thread of its own (with its own connection to the ledger)."""

    def __init__(
        self,
        ledger: SqliteLedger,
        keep_days: float = KEEP_ANSWERS_DAYS,
        *,
        every_s: float = PRUNE_EVERY_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if keep_days < MIN_KEEP_ANSWERS_DAYS:
            raise ValueError(f"answers must be kept at least {MIN_KEEP_ANSWERS_DAYS:g} day")
        self.ledger = ledger
        self.keep_days = keep_days
        self.every_s = every_s
        self.clock = clock
        self._stop = threading.Event()

    def forget_now(self) -> int:
        """Delete the answers past their time; how many (0, logged, when the ledger cannot be
        written now: the next round tries again)."""
        try:
            forgotten = self.ledger.forget_answers(self.clock() - self.keep_days * SECONDS_PER_DAY)
        except (LedgerError, sqlite3.Error) as exc:
            log.warning(
                "answers older than %g day(s) not forgotten this time: %s", self.keep_days, exc
            )
            return 0
        if forgotten:
            log.info(
                "forgot %d answer(s) older than %g day(s): those Idempotency-Keys are new again",
                forgotten,
                self.keep_days,
            )
        return forgotten

    def start(self) -> None:
        """A round now, then one every `every_s`, on a thread of their own. Not before the
        server listens: behind a ledger another process keeps locked, the first round waits
        up to a minute (QA 64), and an answer kept a few moments past its time harms nobody."""
        threading.Thread(target=self._every_round, name="answer-retention", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _every_round(self) -> None:
        self.forget_now()
        while not self._stop.wait(self.every_s):
            self.forget_now()
