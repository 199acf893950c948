"""The remote run's money gate: whether a request may be sent now, under --budget and --reserve.

The workers of `HttpScorer` send concurrently; the gate keeps their sending within the run's
budget and within the shared balance above --reserve:

- A request holds its cost (a `Hold`) from the budget for as long as it may be charged, and
  is counted in flight against the balance (known only from answers: the lowest seen is the
  latest). A worker that cannot take the cost waits while requests in flight may free some
  (they often settle at nothing: replays), and stops the run when none can.
- A request one of whose sends may have been charged with its answer lost (a failed attempt,
  a transport re-send, any answer but the service's own refusals) is `maybe_charged`: if it
  ends without an answer, its cost stays taken from the budget and from the balance estimate
  for the rest of the run (`in_doubt_cost`), not counted as spent.
- A request refused 409 (an earlier run's request with its key is still being answered), none
  of whose sends may have been charged, gives its cost back while it waits (`let_go`) and
  takes it again before its next attempt (`hold_again`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.batch.budget import Budget
from pipeline.batch.scorers.base import SKIPPED_BALANCE, SKIPPED_BUDGET, budget_spent
from pipeline.batch.scorers.retry import RETRY_STATUSES, turned_away
from pipeline.batch.scorers.sending import Answer

# The service's own refusals, all before any charge (see pipeline.service.handler): an answer
# with another status may come after a charge (a gateway's 502 or 524, a 2xx that is no
# decision), and its request counts as perhaps charged.
REFUSED_UNCHARGED = frozenset({400, 401, 402, 404, 405, 409, 413, 415, 422, 429})


@dataclass
class Stop:
    """Why the run sends no more: the status and error of the rows it leaves."""

    status: str  # skipped | failed
    code: str
    message: str  # for skipped rows: the reason, worded for skipped_rows()


@dataclass
class Hold:
    """A request's cost, held from the budget while it may be charged."""

    cost: int
    budget: Budget
    held: bool = True
    # a send of this run may have been charged with its answer lost (an attempt failed, or
    # the transport sent it twice)
    maybe_charged: bool = False
    retrying: bool = False  # an attempt failed: the request is being retried


class BudgetGone(Exception):
    """A request refused 409 could not hold its cost again for its next attempt."""


class SpendGate:
    """`admit` before a request is sent, `release` once it is over; in between, `answered`
    after each attempt's answer and `failed` after each failed attempt.

    `run_stop` tells the run's stop (None while it goes on), which a worker waiting at the gate
    meets; `halt` makes a money stop the run's, and returns it."""

    def __init__(
        self,
        reserve: int,
        *,
        run_stop: Callable[[], Stop | None],
        halt: Callable[[Stop], Stop],
    ) -> None:
        self.reserve = reserve
        self._run_stop = run_stop
        self._halt = halt
        self.balance: int | None = None
        self._in_flight = 0
        self._in_flight_cost = 0
        # what requests of this run perhaps charged, their answers lost, may have taken from
        # the balance (a later answer's balance may show it already: counted twice, to be safe)
        self.in_doubt_cost = 0
        self._retrying = 0  # requests in flight retried after a failure (not a 429: paced)
        self.budget_waiting = 0  # workers waiting for requests in flight to free the budget
        self._answered: asyncio.Event | None = None

    def saw_balance(self, value: object) -> None:
        """A balance an answer told; answers arrive out of order, so the lowest is the latest."""
        if isinstance(value, int | float) and (self.balance is None or value < self.balance):
            self.balance = int(value)

    async def admit(self, cost: int, budget: Budget) -> Hold | Stop:
        """The request's hold on `cost`, or the stop it meets: the run's, or the money stop
        made when the budget or the balance above the reserve cannot pay it, now or once the
        requests in flight are answered."""
        if self.budget_waiting:
            await asyncio.sleep(0)  # the workers the last answer woke take the budget it freed
        while True:
            if (stop := self._run_stop()) is not None:
                return stop
            affordable = await self._affordable(cost)
            if (stop := self._run_stop()) is not None:
                return stop
            if not affordable:
                return self._halt(self._money_stop(balance=True))
            if budget.reserve(cost):
                break
            # Requests in flight hold their cost until answered, and rows in doubt often settle
            # at nothing (replayed): wait for their answers (then look at the balance again),
            # unless one is being retried after a failure (a lost answer, a 5xx: perhaps for
            # a minute): the budget stop then ends its retries. (A request paced by 429s, or
            # refused 409 while an earlier run's is answered, is waited for: never charged.)
            if not self._in_flight or self._retrying:
                return self._halt(self._money_stop(balance=False))
            await self._an_answer(for_budget=True)
        self._in_flight += 1
        self._in_flight_cost += cost
        return Hold(cost, budget)

    def release(self, hold: Hold, *, spent: int, failed: bool) -> None:
        """The request is over: `spent` decisions charged (by its answer), `failed` if it
        ended without one. Every attempt was sent holding the cost, so a charge is always
        within the budget; one perhaps made, unanswered, stays taken from it."""
        self._in_flight -= 1
        self._retrying -= hold.retrying
        if hold.held:
            self._in_flight_cost -= hold.cost
        doubt = hold.cost if hold.maybe_charged and failed and not spent else 0
        self.in_doubt_cost += doubt
        hold.budget.settle(hold.cost if hold.held else 0, spent, in_doubt=doubt)
        self._wake()

    def failed(self, hold: Hold) -> None:
        """An attempt failed (no answer, or a 5xx to retry): perhaps charged, and retried."""
        hold.maybe_charged = True
        if not hold.retrying:
            hold.retrying = True
            self._retrying += 1
            self._wake()

    def answered(self, hold: Hold, answer: Answer) -> None:
        """What an attempt's answer says of its charge."""
        status = answer.status_code
        refused = status in REFUSED_UNCHARGED or turned_away(answer)
        if answer.sends > 1 or not refused:
            # the first send's answer lost, perhaps after a charge; an answer of success,
            # charged, that may yet be no decision (unreadable: failed); or another status,
            # which a gateway may send once the service has charged (524)
            hold.maybe_charged = True
        if status == 409:
            # Refused; but perhaps the answer to this run's own earlier send, lost after its
            # charge: only a request no send of which may have been is let go.
            if not hold.maybe_charged:
                self._let_go(hold)
        elif status in RETRY_STATUSES and not refused:
            self.failed(hold)  # (a 429, a 409 or a 503 turning it away: never charged, waited for)

    def _let_go(self, hold: Hold) -> None:
        """A request refused 409, none of whose sends in this run may have been charged, gives
        its cost back while it waits: its answer will be the earlier charge's replay, and rows
        waiting for the budget, free replays often, go meanwhile."""
        if hold.held:
            hold.held = False
            self._in_flight_cost -= hold.cost
            hold.budget.settle(hold.cost, 0)
            self._wake()

    async def hold_again(self, hold: Hold) -> None:
        """The cost held again before the next attempt of a request refused 409, from the
        budget and from the balance above --reserve (the earlier charge may have been refunded,
        and the attempt charged anew): waited for while requests holding some are answered;
        BudgetGone when none is left to answer (the budget or the balance is spent) or the
        run has stopped."""
        while not hold.held:
            if self.budget_waiting:
                await asyncio.sleep(0)  # the workers its 409 woke take the budget first
            if self._run_stop() is not None:
                raise BudgetGone
            known = self.balance
            if known is None:
                paid = not (self.reserve and self.in_doubt_cost)  # see _affordable
            else:
                paid = self._spendable(known) - hold.cost >= self.reserve
            if paid and hold.budget.reserve(hold.cost):
                hold.held = True
                self._in_flight_cost += hold.cost
                return
            if not self._in_flight_cost or self._retrying:
                self._halt(self._money_stop(balance=not paid))
                raise BudgetGone
            await self._an_answer(for_budget=True)

    def _money_stop(self, *, balance: bool) -> Stop:
        """The stop for lack of balance (above --reserve) or of --budget."""
        doubt = self.in_doubt_cost
        if not balance:
            return Stop("skipped", SKIPPED_BUDGET, budget_spent(doubt))
        shown = f"{self.balance}, less {doubt} perhaps charged" if doubt else f"{self.balance}"
        reason = f"the workspace balance ({shown}) is spent"
        if self.balance is None:
            reason = (
                f"the workspace balance is not known (the answers of {doubt} decision(s) "
                f"perhaps charged were lost), and --reserve {self.reserve} must be left"
            )
        elif self.reserve:
            reason = f"the workspace balance ({shown}) is down to --reserve {self.reserve}"
        return Stop("skipped", SKIPPED_BALANCE, reason)

    def _spendable(self, balance: int) -> int:
        """The known balance less what requests in flight, and those perhaps charged with
        their answers lost, may take from it."""
        return balance - self._in_flight_cost - self.in_doubt_cost

    async def _affordable(self, cost: int) -> bool:
        """Whether the known balance pays `cost` above the reserve, counting requests in flight.

        Unknown balance: send, except that with a reserve only one request goes out until the
        first answer tells the balance, and none once a request perhaps charged has lost its
        answer (what is left above the reserve cannot be known). When requests in flight make
        it uncertain, wait for them: once none is in flight the known balance is exact."""
        while True:
            if self._run_stop() is not None:
                return True  # the caller sees the stop
            known = self.balance
            if known is None:
                if not self.reserve:
                    return True
                if self.in_doubt_cost:
                    return False
                if not self._in_flight:
                    return True
            elif self._spendable(known) - cost >= self.reserve:
                return True
            elif not self._in_flight:
                return False
            await self._an_answer()

    async def _an_answer(self, *, for_budget: bool = False) -> None:
        """Until a request in flight is answered (or begins its retries). `for_budget`: the
        waiter wants the budget it frees, and is counted so that it goes first."""
        if self._answered is None:
            # An event, not one future the waiters share: a waiter cancelled (Ctrl-C, SIGTERM)
            # would cancel that future, and the answer then set a result on a cancelled one.
            self._answered = asyncio.Event()
        self.budget_waiting += for_budget
        try:
            await self._answered.wait()
        finally:
            self.budget_waiting -= for_budget

    def _wake(self) -> None:
        """Those waiting in `_an_answer` look again."""
        if self._answered is not None:
            self._answered.set()
            self._answered = None
