"""The service's retention of answers under their Idempotency-Key (a real SQLite ledger)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from pipeline.ledger.base import ChargeRequest
from pipeline.ledger.sqlite import SqliteLedger
from pipeline.service.retention import AnswerRetention

DAY = 86_400


@pytest.fixture
def ledger(tmp_path: Path) -> SqliteLedger:
    ledger = SqliteLedger(tmp_path / "ledger.db")
    ledger.create_workspace("acme", 10)
    ledger.charge("acme", ChargeRequest(cost=1, idempotency_key="k", fingerprint="f"))
    ledger.complete("acme", "k", '{"score": 80}')
    return ledger


def test_answers_are_forgotten_every_round_while_serving(ledger):
    now = [time.time()]
    retention = AnswerRetention(ledger, 1, every_s=0.01, clock=lambda: now[0])
    retention.start()
    try:
        time.sleep(0.05)  # rounds with nothing past its time
        assert ledger.charged("acme", "k")
        now[0] += 2 * DAY
        deadline = time.monotonic() + 10
        while ledger.charged("acme", "k") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not ledger.charged("acme", "k")
    finally:
        retention.stop()
    assert ledger.workspace("acme").balance == 9


def test_a_ledger_that_cannot_be_written_is_tried_again_next_round(ledger, tmp_path, caplog):
    retention = AnswerRetention(ledger, 1, clock=lambda: time.time() + 2 * DAY)
    (tmp_path / "ledger.db").rename(tmp_path / "moved.db")  # as an operator might, by mistake
    with caplog.at_level(logging.WARNING, logger="pipeline.service"):
        assert retention.forget_now() == 0
    assert "answers older than 1 day(s) not forgotten this time" in caplog.text


def test_answers_are_kept_at_least_a_day(ledger):
    with pytest.raises(ValueError, match="at least 1 day"):
        AnswerRetention(ledger, 0.5)
