"""Who commits a charge: the event loop for a client alone on the server, the ledger's writer
thread when other connections are being served; and the server binding itself to one CPU."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from pipeline.decisions import DecisionDesk
from pipeline.engine.engine import Engine
from pipeline.ledger.accounts import SqliteAccounts
from pipeline.ledger.base import ChargeRequest
from pipeline.ledger.sqlite import SqliteLedger
from pipeline.service.activity import ConnectionActivity
from pipeline.service.app import create_app
from pipeline.service.server import BackgroundServer
from tests.test_service_fixtures import VALID


def test_a_connection_is_alone_until_another_sends_within_the_window():
    activity = ConnectionActivity(window_s=0.2)
    assert activity.alone(("10.0.0.1", 5000))
    assert activity.alone(("10.0.0.1", 5000))
    assert not activity.alone(("10.0.0.1", 5001))  # a second connection, just now
    assert not activity.alone(("10.0.0.1", 5000))
    time.sleep(0.25)
    assert activity.alone(("10.0.0.1", 5001))  # the other one has gone quiet
    assert not activity.alone(None)  # an unknown connection never commits on the loop


def test_connections_gone_quiet_are_forgotten():
    activity = ConnectionActivity(window_s=0.05)
    for port in range(1000):
        activity.alone(("10.0.0.2", port))
    time.sleep(0.06)
    assert activity.alone(("10.0.0.2", 5000))
    assert len(activity._last_seen) == 1  # the thousand quiet ones are gone


class RecordingLedger(SqliteLedger):
    """The real ledger, noting which thread commits each charge."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.committed_by: list[str] = []

    def charge_each(self, charges: Sequence[tuple[str, ChargeRequest]], *, wait=True) -> list:
        self.committed_by += [threading.current_thread().name] * len(charges)
        return super().charge_each(charges, wait=wait)


def _served(ledger: SqliteLedger) -> tuple[Any, dict[str, str]]:
    """The app over `ledger`, whose workspace acme has 100 decisions, and a broker key's
    headers."""
    ledger.create_workspace("acme", 100)
    accounts = SqliteAccounts(ledger.path)
    accounts.create_account("acme-broker", "acme", "broker")
    headers = {"Authorization": f"Bearer {accounts.create_key('acme-broker').key}"}
    return create_app(DecisionDesk(Engine.default(), ledger), accounts), headers


def test_a_lone_client_is_charged_on_the_loop_and_concurrent_clients_by_the_writer(tmp_path):
    ledger = RecordingLedger(tmp_path / "ledger.db")
    app, headers = _served(ledger)
    with BackgroundServer(app) as url, httpx.Client() as one:

        def post(client: httpx.Client, extra: dict[str, str] | None = None) -> httpx.Response:
            return client.post(
                f"{url}/v1/decisions", json=VALID, headers={**headers, **(extra or {})}
            )

        def three_on_own_connection(_: int) -> list[httpx.Response]:
            with httpx.Client() as client:
                return [post(client) for _ in range(3)]

        answers = [post(one), post(one)]
        alone = list(ledger.committed_by)
        with ThreadPoolExecutor(8) as pool:  # eight connections at once
            answers += [a for three in pool.map(three_on_own_connection, range(8)) for a in three]
        served = ledger.committed_by[len(alone) :]
        time.sleep(0.1)  # every other connection quiet: alone again, with a replay
        first = post(one, {"Idempotency-Key": "k-1"})
        replay = post(one, {"Idempotency-Key": "k-1"})
        after = ledger.committed_by[len(alone) + len(served) :]

    assert [a.status_code for a in answers] == [200] * 26
    assert len(alone) == 2 and "charges" not in alone  # committed on the server's loop
    assert "charges" in served  # other connections were active: the writer committed
    assert len(after) == 2 and "charges" not in after
    assert first.status_code == replay.status_code == 200 and first.json() == replay.json()
    assert ledger.workspace("acme").balance == 100 - 27  # the replay was not charged
    remaining = sorted(a.json()["decisions_remaining"] for a in [*answers, first])
    assert remaining == list(range(73, 100))  # each charge seen once, none lost


def test_a_lone_client_waits_for_another_writer_without_holding_up_the_server(tmp_path):
    # Another process writing to the same ledger (a second server, a batch run, a top-up) holds
    # its write lock: a lone client's charge waits for it on the writer thread, not on the
    # event loop, so every other client is still answered meanwhile.
    ledger = RecordingLedger(tmp_path / "ledger.db")
    app, headers = _served(ledger)
    other_writer = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    with BackgroundServer(app) as url, ThreadPoolExecutor(1) as aside:
        other_writer.execute("BEGIN IMMEDIATE")
        paid = aside.submit(httpx.post, f"{url}/v1/decisions", json=VALID, headers=headers)
        time.sleep(0.3)  # the paid request is waiting for the lock
        started = time.monotonic()
        refused = httpx.post(f"{url}/v1/decisions", json=VALID)  # no key: 401, at once
        waited_for_401 = time.monotonic() - started
        still_waiting = not paid.done()
        other_writer.execute("COMMIT")
        answer = paid.result(timeout=30)

    assert refused.status_code == 401 and waited_for_401 < 1.5
    assert still_waiting  # the charge waited for the lock...
    assert answer.status_code == 200  # ...then was made, once, by the writer thread
    assert ledger.committed_by[-1] == "charges"
    assert ledger.workspace("acme").balance == 99


def test_a_ledger_locked_past_the_busy_timeout_is_503_with_retry_after(tmp_path):
    ledger = SqliteLedger(tmp_path / "ledger.db", busy_timeout_ms=300)
    app, headers = _served(ledger)
    other_writer = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    with BackgroundServer(app) as url:
        other_writer.execute("BEGIN IMMEDIATE")
        busy = httpx.post(f"{url}/v1/decisions", json=VALID, headers=headers)
        other_writer.execute("COMMIT")
        after = httpx.post(f"{url}/v1/decisions", json=VALID, headers=headers)

    assert busy.status_code == 503 and busy.headers["retry-after"] == "5"
    assert busy.json()["error"] == "ledger_busy"  # was a 500 "evaluation failed"
    assert "locked by another process for 0.3 s" in busy.json()["message"]
    assert after.status_code == 200 and ledger.workspace("acme").balance == 99


def test_a_request_queued_behind_a_charge_refused_busy_waits_no_longer_than_it(tmp_path):
    # Found by QA: the second in line waited for the first's timeout, then its own (2 minutes).
    ledger = SqliteLedger(tmp_path / "ledger.db", busy_timeout_ms=1000)
    app, headers = _served(ledger)
    other_writer = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)

    def timed_post(url: str) -> tuple[httpx.Response, float]:
        started = time.perf_counter()
        answer = httpx.post(f"{url}/v1/decisions", json=VALID, headers=headers, timeout=30)
        return answer, time.perf_counter() - started

    with BackgroundServer(app) as url, ThreadPoolExecutor(2) as clients:
        other_writer.execute("BEGIN IMMEDIATE")
        first = clients.submit(timed_post, url)
        time.sleep(0.5)  # the writer thread is waiting for the lock with the first charge
        second = clients.submit(timed_post, url)
        (answer, _), (queued, waited) = first.result(), second.result()
        other_writer.execute("COMMIT")

    assert answer.status_code == queued.status_code == 503
    assert queued.json()["error"] == "ledger_busy"
    assert waited < 1.0  # about 0.5 s: the rest of the first's wait, not that and its own
    assert ledger.workspace("acme").balance == 100


def test_the_server_binds_itself_to_one_cpu_unless_told_not_to():
    code = (
        "import json, os; from pipeline.service.server import tune_process; "
        "cpu = tune_process(one_cpu={one}); "
        "print(json.dumps([cpu, sorted(os.sched_getaffinity(0))]))"
    )
    bound = subprocess.run([sys.executable, "-c", code.format(one=True)],
                           capture_output=True, text=True, check=True)  # fmt: skip
    cpu, allowed = json.loads(bound.stdout)
    assert allowed == [cpu]
    free = subprocess.run([sys.executable, "-c", code.format(one=False)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    cpu, allowed = json.loads(free.stdout)
    assert cpu is None and len(allowed) >= 1
