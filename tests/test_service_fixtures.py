"""The real service on 127.0.0.1 for the service tests, with injectable engines.

Each service test module builds its fixture with `start_service`; no tests here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from pipeline.decisions import DecisionDesk
from pipeline.engine.models import DecisionRequest
from pipeline.ledger.accounts import SqliteAccounts
from pipeline.ledger.sqlite import SqliteLedger
from pipeline.service.app import create_app
from pipeline.service.limits import DEFAULT_LIMITS, ConnectionLimits
from pipeline.service.server import BackgroundServer

VALID: dict[str, Any] = {
    "property": {"type": "apartment", "price": 900000, "area": 150, "bedrooms": 3},
    "location": {"city": "Riyadh", "district": "Al Malqa"},
    "reasoning": False,
}


def body(**changes: Any) -> dict[str, Any]:
    """VALID with top-level keys replaced; `reasoning=True` for a cost-3 request."""
    return {**VALID, **changes}


class FakeEngine:
    """Answers like the engine without polars: a fixed, spec-shaped body."""

    def evaluate(self, request: DecisionRequest) -> dict[str, Any]:
        bucket = {"score": 80.0, "status": "pass"}
        response: dict[str, Any] = {
            "verdict": "match",
            "score": 80.0,
            "breakdown": {k: dict(bucket) for k in ("price", "location", "size", "details")},
            "price_per_sqm": request.property.price / request.property.area,
            "benchmark": None,
        }
        if request.reasoning:
            response["reasoning"] = {
                "reasoning_en": "fine",
                "reasoning_ar": "جيد",
                "key_factors": [],
                "risk_flags": [],
            }
        return response


class SlowEngine(FakeEngine):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.started = threading.Event()

    def evaluate(self, request: DecisionRequest) -> dict[str, Any]:
        self.started.set()
        time.sleep(self.delay_s)
        return super().evaluate(request)


class FailingEngine:
    def evaluate(self, request: DecisionRequest) -> dict[str, Any]:
        raise RuntimeError("the engine fell over")


@dataclass
class Service:
    url: str
    ledger: SqliteLedger
    accounts: SqliteAccounts
    key: str
    workspace: str = "acme"
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=30))

    def post(
        self,
        json: Any = None,
        *,
        key: str | None = None,
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        sent = {"Authorization": f"Bearer {key or self.key}", **(headers or {})}
        if json is not None:
            kwargs["json"] = json
        return self.client.post(f"{self.url}/v1/decisions", headers=sent, **kwargs)

    def balance(self) -> int:
        return self.ledger.workspace(self.workspace).balance


def start_service(
    tmp_path: Path,
    engine: Any,
    balance: int = 100,
    *,
    limits: ConnectionLimits = DEFAULT_LIMITS,
    **options: Any,
) -> Iterator[Service]:
    db = tmp_path / "ledger.db"
    ledger = SqliteLedger(db)
    ledger.create_workspace("acme", balance)
    accounts = SqliteAccounts(db)
    accounts.create_account("acme-broker", "acme", "broker")
    key = accounts.create_key("acme-broker").key
    app = create_app(DecisionDesk(engine, ledger), accounts, **options)  # type: ignore[arg-type]
    with BackgroundServer(app, limits=limits) as url:
        service = Service(url, ledger, accounts, key)
        try:
            yield service
        finally:
            service.client.close()


running_service = contextmanager(start_service)
