"""One decision, paid for: parse and validate, charge the workspace, evaluate, answer.

This is POST /v1/decisions without HTTP; `decisions decide` and the service both call it. An
invalid request is never charged; a request that fails after its charge is refunded; a request
repeated under the same idempotency key is answered from the first, not charged again.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pipeline.engine.batching import MicroBatcher
from pipeline.engine.engine import Engine
from pipeline.engine.models import DecisionRequest
from pipeline.engine.request import check_request, parse_request
from pipeline.ledger.base import Charge, ChargeRequest, Ledger

COST_SCORING = 1
COST_WITH_REASONING = 3


def cost_of(reasoning: bool) -> int:
    return COST_WITH_REASONING if reasoning else COST_SCORING


def request_fingerprint(request: DecisionRequest) -> str:
    """sha256 of the request's canonical JSON: equal for equal requests however they were spelt."""
    canonical = json.dumps(request.model_dump(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class DecisionDesk:
    def __init__(self, engine: Engine, ledger: Ledger) -> None:
        self.engine = engine
        self.ledger = ledger
        # Concurrent requests are charged together: one transaction, one fsync, for all.
        self._charges: MicroBatcher[tuple[str, ChargeRequest], Charge] = MicroBatcher(
            ledger.charge_each, name="charges"
        )

    def decide(
        self,
        body: bytes | str | dict[str, Any],
        *,
        workspace: str,
        idempotency_key: str | None = None,
        key_prefix: str | None = None,
    ) -> dict[str, Any]:
        """The spec's response body; raises RequestValidationError or a LedgerError."""
        request = parse_request(body)
        check_request(request)  # never charge for an invalid request
        charge = self._charges.submit(
            (
                workspace,
                ChargeRequest(
                    cost=cost_of(request.reasoning),
                    idempotency_key=idempotency_key,
                    fingerprint=request_fingerprint(request),
                    key_prefix=key_prefix,
                ),
            )
        )
        if charge.replayed and charge.response is not None:
            return json.loads(charge.response)
        try:
            response = self.engine.evaluate(request)
            response["decisions_used"] = charge.cost
            response["decisions_remaining"] = charge.balance_after
            if idempotency_key is not None:
                self.ledger.complete(workspace, idempotency_key, json.dumps(response))
        except BaseException:
            if not charge.replayed:
                self.ledger.refund(charge.entry_id, "the request failed after its charge")
            raise
        return response
