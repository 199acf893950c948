"""One decision, paid for: parse and validate, charge the workspace, evaluate, answer.

This is POST /v1/decisions without HTTP; `decisions decide` and the service both call it. An
invalid request is never charged; a request that fails after its charge is refunded; a request
repeated under the same idempotency key is answered from the first, not charged again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from functools import partial
from typing import Any, NamedTuple

from pipeline.engine.batching import MicroBatcher
from pipeline.engine.engine import Engine
from pipeline.engine.models import DecisionRequest
from pipeline.engine.request import checked_row, loads_json, parse_request
from pipeline.errors import (
    ChargeNotRefunded,
    InsufficientDecisions,
    LedgerBusy,
    LedgerUnavailable,
    PipelineError,
    RequestValidationError,
)
from pipeline.ledger.base import Charge, ChargeRequest, Ledger, cost_of

_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def request_fingerprint(request: DecisionRequest | dict[str, Any]) -> str:
    """sha256 of the request's canonical JSON (of the request or its `model_dump()`): equal for
    equal requests however they were spelt."""
    dumped = request if isinstance(request, dict) else request.model_dump()
    return hashlib.sha256(_CANONICAL.encode(dumped).encode()).hexdigest()


class Decision(NamedTuple):
    body: dict[str, Any]  # the spec's response body
    replayed: bool = False  # answered from an earlier request with the same idempotency key


class DecisionDesk:
    """`decide_async`, for the service's event loop and (under asyncio.run) `decisions decide`.

    The ledger's writes go through one writer thread each (charges, completions), so concurrent
    requests share a transaction and its fsync (group commit), and the event loop never waits
    on the disk.
    """

    def __init__(self, engine: Engine, ledger: Ledger) -> None:
        self.engine = engine
        self.ledger = ledger
        # A charge refused LedgerBusy has waited the busy timeout for the write lock; those
        # queued behind it would each wait as long again (2 minutes for the second in line).
        self._charges: MicroBatcher[tuple[str, ChargeRequest], Charge] = MicroBatcher(
            ledger.charge_each, name="charges", fails_those_waiting=(LedgerBusy,)
        )
        self._completions: MicroBatcher[tuple[str, str, str | None], None] = MicroBatcher(
            partial(_complete_each, ledger), name="completions"
        )

    def balance(self, workspace: str) -> int:
        return self.ledger.workspace(workspace).balance

    def spent(self, workspace: str) -> bool:
        """Whether the workspace's balance is zero (a workspace that cannot be read: no)."""
        try:
            return self.balance(workspace) == 0
        except PipelineError:
            return False

    async def decide_async(
        self,
        body: bytes | str | dict[str, Any],
        *,
        workspace: str,
        idempotency_key: str | None = None,
        key_prefix: str | None = None,
        commit_inline: bool = False,
    ) -> Decision:
        """The spec's response body, and whether it is a replay (nothing charged); raises
        RequestValidationError or a LedgerError. The ledger's writes are awaited from their
        writer threads, never blocking the event loop; with `commit_inline` (a caller with
        nobody to share a transaction with, see `pipeline.service.activity`) they are made on
        the calling thread instead, which saves two thread handoffs.

        An engine that says it is fast (`inline`: microseconds of pure computation) answers
        first, on the loop, and its answer is sent only once the charge is made; if it fails,
        nothing was charged. (Evaluating while the charge commits was measured slower: the
        writer thread then waits for the GIL behind the loop.) Any other engine runs after
        the charge, in a worker thread, and a failure refunds the charge."""
        try:
            request, row, wanted = _admit(body, idempotency_key, key_prefix)
        except RequestValidationError:
            if self.spent(workspace):  # spec, section 8: at zero, every request is 402
                raise InsufficientDecisions(requested_cost(body), 0) from None
            raise
        inline = getattr(self.engine, "inline", False)
        evaluated = self.engine.evaluate(request, checked_row=row) if inline else None
        charge = self._charge_now(workspace, wanted) if commit_inline else None
        if charge is None:
            charge = await self._charges.submit_async((workspace, wanted))
        if charge.replayed and charge.response is not None:
            return Decision(json.loads(charge.response), replayed=True)
        try:
            if evaluated is None:
                evaluated = await asyncio.to_thread(self.engine.evaluate, request)
            response = _paid(evaluated, charge)
            if idempotency_key is not None:
                answer = json.dumps(response)
                if not (commit_inline and self._complete_now(workspace, idempotency_key, answer)):
                    await self._completions.submit_async((workspace, idempotency_key, answer))
        except BaseException as failure:
            if not charge.replayed:
                try:
                    await asyncio.to_thread(self.ledger.refund, charge.entry_id, REFUND_NOTE)
                except Exception as refund_failed:
                    raise _not_refunded(charge, idempotency_key, refund_failed) from failure
            raise
        return Decision(response, replayed=charge.replayed)

    # Committed on the calling thread only if nobody else is writing: the event loop must not
    # wait for another process's transaction (a second server, a batch run on the same ledger),
    # which would keep every other client waiting too. Otherwise the writer thread waits.

    def _charge_now(self, workspace: str, wanted: ChargeRequest) -> Charge | None:
        try:
            return self.ledger.charge(workspace, wanted, wait=False)
        except LedgerBusy:
            return None

    def _complete_now(self, workspace: str, idempotency_key: str, answer: str) -> bool:
        try:
            self.ledger.complete(workspace, idempotency_key, answer, wait=False)
        except LedgerBusy:
            return False
        return True


REFUND_NOTE = "the request failed after its charge"


def _not_refunded(
    charge: Charge, idempotency_key: str | None, error: Exception
) -> ChargeNotRefunded:
    if idempotency_key is not None:
        again = (
            "once the ledger can be written again, send the request again with the same "
            "Idempotency-Key: it is answered without a new charge (409 request_in_progress "
            "until the first request counts as abandoned, two minutes after it)"
        )
    else:
        again = f"its ledger entry is {charge.entry_id}"
    cause = error.__cause__ if isinstance(error, LedgerUnavailable) else None
    return ChargeNotRefunded(
        f"this request was charged and failed before its answer, and its refund could not be "
        f"written ({cause or error}): the charge stands; {again}"
    )


def requested_cost(body: bytes | str | dict[str, Any] | None) -> int:
    """What a request refused before its charge would have cost, as far as its body tells."""
    try:
        parsed = body if isinstance(body, dict) else loads_json(body or b"")
        reasoning = parsed.get("reasoning")
    except (ValueError, AttributeError, RecursionError):  # nested past Python's stack
        reasoning = None
    return cost_of(reasoning is True)


def _admit(
    body: bytes | str | dict[str, Any], idempotency_key: str | None, key_prefix: str | None
) -> tuple[DecisionRequest, dict[str, Any], ChargeRequest]:
    """The parsed request, its checked row and what to charge for it; an invalid request is
    never charged."""
    request = parse_request(body)
    dumped = request.model_dump()  # once, for the row and the fingerprint
    row = checked_row(dumped)
    return (
        request,
        row,
        ChargeRequest(
            cost=cost_of(request.reasoning),
            idempotency_key=idempotency_key,
            fingerprint=request_fingerprint(dumped),
            key_prefix=key_prefix,
        ),
    )


def _paid(response: dict[str, Any], charge: Charge) -> dict[str, Any]:
    response["decisions_used"] = charge.cost
    response["decisions_remaining"] = charge.balance_after
    return response


def _complete_each(ledger: Ledger, outcomes: Sequence[tuple[str, str, str | None]]) -> list[None]:
    """Store answers under their idempotency keys, one transaction per workspace."""
    by_workspace: dict[str, list[tuple[str, str | None]]] = {}
    for workspace, key, response in outcomes:
        by_workspace.setdefault(workspace, []).append((key, response))
    for workspace, answers in by_workspace.items():
        ledger.complete_many(workspace, answers)
    return [None] * len(outcomes)
