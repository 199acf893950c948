"""The balance over HTTP: idempotent replays and conflicts, and many connections on one balance."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.test_service_fixtures import (
    FakeEngine,
    Service,
    SlowEngine,
    body,
    running_service,
)


def test_replay_charges_once(tmp_path: Path) -> None:
    with running_service(tmp_path, FakeEngine(), balance=10) as svc:
        first = svc.post(body(), headers={"Idempotency-Key": "req-1"})
        again = svc.post(body(), headers={"Idempotency-Key": "req-1"})
        assert first.status_code == again.status_code == 200
        assert first.json() == again.json()
        assert "idempotent-replayed" not in first.headers
        assert again.headers["idempotent-replayed"] == "true"  # nothing charged for it
        assert first.json()["decisions_remaining"] == 9
        assert svc.balance() == 9
        other = svc.post(body(reasoning=True), headers={"Idempotency-Key": "req-1"})
        assert other.status_code == 422
        assert other.json()["error"] == "idempotency_key_reused"
        assert svc.balance() == 9
        fresh = svc.post(body(), headers={"Idempotency-Key": "req-2"})
        assert fresh.json()["decisions_remaining"] == 8


def test_at_zero_every_request_is_402_but_a_paid_answer_is_still_replayed(tmp_path: Path):
    # Spec, section 8: "When it reaches zero, every request returns 402 with
    # insufficient_decisions until the workspace is topped up."
    with running_service(tmp_path, FakeEngine(), balance=1) as svc:
        paid = svc.post(body(), headers={"Idempotency-Key": "last"})
        assert paid.status_code == 200 and svc.balance() == 0
        invalid = body(property={"type": "villa", "price": 1, "area": -1})
        answers = {
            "valid": svc.post(body()),
            "invalid": svc.post(invalid),
            "invalid, reasoning": svc.post({**invalid, "reasoning": True}),
            "reasoning, a number of 4,301 digits": svc.post(  # its cost was read as 1 (QA 65)
                content=b'{"reasoning": true, "note": ' + b"9" * 4301 + b"}",
                headers={"Content-Type": "application/json"},
            ),
            "not json": svc.post(content=b"{", headers={"Content-Type": "application/json"}),
            "not sent as json": svc.post(content=b"{}", headers={"Content-Type": "text/plain"}),
            "nested too deep": svc.post(  # was a 500: a RecursionError reading its cost
                content=b"[" * 50_000, headers={"Content-Type": "application/json"}
            ),
        }
        for what, answer in answers.items():
            assert answer.status_code == 402, what
            assert answer.json()["error"] == "insufficient_decisions", what
            assert answer.json()["balance"] == 0, what
        assert answers["invalid"].json()["required"] == 1
        assert answers["invalid, reasoning"].json()["required"] == 3
        assert answers["reasoning, a number of 4,301 digits"].json()["required"] == 3
        replay = svc.post(body(), headers={"Idempotency-Key": "last"})
        assert replay.status_code == 200 and replay.json() == paid.json()
        assert svc.post(invalid, key="sk-nope").status_code == 401  # an unknown caller: 401
        svc.ledger.topup("acme", 5)
        assert svc.post(invalid).status_code == 422  # topped up: told what is wrong again
        assert svc.balance() == 5


def test_same_key_while_the_first_is_in_flight(tmp_path: Path) -> None:
    engine = SlowEngine(delay_s=1.0)
    with running_service(tmp_path, engine, balance=10) as svc:
        results: dict[str, httpx.Response] = {}

        def first() -> None:
            results["first"] = svc.post(body(), headers={"Idempotency-Key": "slow"})

        thread = threading.Thread(target=first)
        thread.start()
        assert engine.started.wait(10)
        second = svc.post(body(), headers={"Idempotency-Key": "slow"})
        assert second.status_code == 409
        assert second.json()["error"] == "request_in_progress"
        assert second.headers["retry-after"] == "1"
        thread.join()
        assert results["first"].status_code == 200
        replay = svc.post(body(), headers={"Idempotency-Key": "slow"})
        assert replay.json() == results["first"].json()
        assert svc.balance() == 9


def _hammer(svc: Service, requests: list[dict[str, Any]]) -> list[httpx.Response]:
    """Every request on its own connection, all at once."""
    barrier = threading.Barrier(len(requests))

    def send(request: dict[str, Any]) -> httpx.Response:
        with httpx.Client(timeout=60) as client:
            barrier.wait()
            return client.post(
                f"{svc.url}/v1/decisions",
                json=request,
                headers={"Authorization": f"Bearer {svc.key}"},
            )

    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(send, requests))


def _audit(svc: Service, opening: int) -> list[dict[str, object]]:
    entries = svc.ledger.entries("acme")
    assert entries[0]["kind"] == "opening" and entries[0]["amount"] == opening
    charges = [e for e in entries if e["kind"] == "charge"]
    assert sum(int(e["amount"]) for e in entries) == svc.balance()  # type: ignore[call-overload]
    for entry in charges:
        assert entry["key_prefix"] == svc.key[:11]
        assert entry["fingerprint"] and entry["created_at"]
    return charges


def test_64_requests_on_a_balance_of_50(tmp_path: Path) -> None:
    with running_service(tmp_path, FakeEngine(), balance=50) as svc:
        responses = _hammer(svc, [body()] * 64)
        assert Counter(r.status_code for r in responses) == {200: 50, 402: 14}
        assert svc.balance() == 0
        charges = _audit(svc, 50)
        assert sum(int(e["amount"]) for e in charges) == -50  # type: ignore[call-overload]
        remaining = sorted(r.json()["decisions_remaining"] for r in responses if r.is_success)
        assert remaining == list(range(50))  # no lost update: every balance seen once


def test_64_reasoning_requests_on_150(tmp_path: Path) -> None:
    with running_service(tmp_path, FakeEngine(), balance=150) as svc:
        responses = _hammer(svc, [body(reasoning=True)] * 64)
        assert Counter(r.status_code for r in responses) == {200: 50, 402: 14}
        assert all(r.json()["decisions_used"] == 3 for r in responses if r.is_success)
        assert svc.balance() == 0
        assert sum(int(e["amount"]) for e in _audit(svc, 150)) == -150  # type: ignore[call-overload]


def test_mixed_load(tmp_path: Path) -> None:
    requests = [body(reasoning=i % 2 == 0) for i in range(64)]
    with running_service(tmp_path, FakeEngine(), balance=100) as svc:
        responses = _hammer(svc, requests)
        assert {r.status_code for r in responses} <= {200, 402}
        pairs = list(zip(requests, responses, strict=True))
        spent = sum(3 if q["reasoning"] else 1 for q, r in pairs if r.is_success)
        final = svc.balance()
        assert final >= 0 and final + spent == 100
        refused = [q for q, r in pairs if r.status_code == 402]
        if any(not q["reasoning"] for q in refused):
            assert final == 0  # a cost-1 refusal means the balance was empty, and stays so
        if refused:
            assert final < 3
        charges = _audit(svc, 100)
        assert -sum(int(e["amount"]) for e in charges) == spent  # type: ignore[call-overload]
