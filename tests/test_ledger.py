"""The decision balance in a real SQLite file: atomic charges, idempotency, refunds."""

from __future__ import annotations

import contextlib
import multiprocessing
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import (
    IdempotencyKeyReused,
    InsufficientDecisions,
    LedgerBusy,
    LedgerUnavailable,
    RequestInProgress,
    UnknownWorkspace,
    UsageError,
)
from pipeline.ledger.base import ChargeRequest
from pipeline.ledger.sqlite import SqliteLedger


@pytest.fixture
def ledger(tmp_path: Path) -> SqliteLedger:
    ledger = SqliteLedger(tmp_path / "ledger.db")
    ledger.create_workspace("acme", 10)
    return ledger


def test_charge_takes_the_cost_and_records_an_entry(ledger):
    charge = ledger.charge("acme", ChargeRequest(cost=3, idempotency_key="k1", fingerprint="f"))
    assert (charge.cost, charge.balance_after, charge.replayed) == (3, 7, False)
    assert ledger.workspace("acme").balance == 7
    kinds = [(e["kind"], e["amount"], e["balance_after"]) for e in ledger.entries("acme")]
    assert kinds == [("opening", 10, 10), ("charge", -3, 7)]


def test_a_balance_lower_than_the_cost_is_refused_with_required_and_balance(ledger):
    ledger.charge("acme", ChargeRequest(cost=8))
    with pytest.raises(InsufficientDecisions) as caught:
        ledger.charge("acme", ChargeRequest(cost=3))
    assert caught.value.body() == {
        "error": "insufficient_decisions",
        "message": caught.value.args[0],
        "required": 3,
        "balance": 2,
    }
    assert ledger.workspace("acme").balance == 2


def test_a_zero_balance_refuses_everything(tmp_path):
    ledger = SqliteLedger(tmp_path / "l.db")
    ledger.create_workspace("empty", 0)
    with pytest.raises(InsufficientDecisions):
        ledger.charge("empty", ChargeRequest(cost=1))


def test_the_same_key_is_replayed_not_charged_again(ledger):
    request = ChargeRequest(cost=1, idempotency_key="k", fingerprint="f")
    first = ledger.charge("acme", request)
    ledger.complete("acme", "k", '{"ok": true}')
    again = ledger.charge("acme", request)
    assert again.replayed and again.response == '{"ok": true}'
    assert again.balance_after == first.balance_after == 9
    assert ledger.workspace("acme").balance == 9


def test_charged_tells_whether_a_key_would_replay(ledger):
    ledger.create_workspace("other", 5)
    charge = ledger.charge("acme", ChargeRequest(cost=1, idempotency_key="k", fingerprint="f"))
    assert ledger.charged("acme", "k")  # in flight or done alike
    assert not ledger.charged("acme", "unknown") and not ledger.charged("other", "k")
    ledger.refund(charge.entry_id, "engine failed")
    assert not ledger.charged("acme", "k")


def test_the_same_key_with_another_body_is_refused(ledger):
    ledger.charge("acme", ChargeRequest(cost=1, idempotency_key="k", fingerprint="a"))
    ledger.complete("acme", "k", "{}")
    with pytest.raises(IdempotencyKeyReused):
        ledger.charge("acme", ChargeRequest(cost=1, idempotency_key="k", fingerprint="b"))


def test_a_key_in_flight_is_refused_until_it_goes_stale(tmp_path):
    ledger = SqliteLedger(tmp_path / "l.db")
    ledger.create_workspace("w", 5)
    request = ChargeRequest(cost=1, idempotency_key="k", fingerprint="f")
    ledger.charge("w", request)
    with pytest.raises(RequestInProgress):
        ledger.charge("w", request)
    # A process killed between charge and answer: a later run replays the charge, never repeats it.
    after_crash = SqliteLedger(tmp_path / "l.db", stale_in_flight_s=0)
    replay = after_crash.charge("w", request)
    assert replay.replayed and replay.response is None
    assert after_crash.workspace("w").balance == 4


def test_keys_are_scoped_to_the_workspace(ledger):
    ledger.create_workspace("other", 5)
    request = ChargeRequest(cost=1, idempotency_key="k", fingerprint="f")
    ledger.charge("acme", request)
    assert not ledger.charge("other", request).replayed


def test_refund_gives_back_once_and_frees_the_key(ledger):
    request = ChargeRequest(cost=3, idempotency_key="k", fingerprint="f")
    charge = ledger.charge("acme", request)
    assert ledger.refund(charge.entry_id, "engine failed").balance == 10
    assert ledger.refund(charge.entry_id, "engine failed").balance == 10
    assert not ledger.charge("acme", request).replayed
    assert sum(e["amount"] for e in ledger.entries("acme")) == ledger.workspace("acme").balance


def test_a_charge_is_refunded_at_most_once_by_the_schema_itself(ledger):
    first = ledger.charge("acme", ChargeRequest(cost=1))
    ledger.charge("acme", ChargeRequest(cost=1))  # charges, refunded by none: refund_of NULL
    ledger.refund(first.entry_id, "engine failed")
    db = sqlite3.connect(ledger.path)
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        db.execute(
            "INSERT INTO entries (workspace_id, kind, amount, balance_after, refund_of,"
            " created_at) VALUES (1, 'refund', 1, 11, ?, 0)",
            (first.entry_id,),
        )


_LEDGER_OF_BEFORE = """
CREATE TABLE workspaces (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
    balance INTEGER NOT NULL CHECK (balance >= 0), created_at REAL NOT NULL);
CREATE TABLE entries (id INTEGER PRIMARY KEY,
    workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
    kind TEXT NOT NULL CHECK (kind IN ('opening', 'topup', 'charge', 'refund')),
    amount INTEGER NOT NULL, balance_after INTEGER NOT NULL, idempotency_key TEXT,
    fingerprint TEXT, key_prefix TEXT, note TEXT,
    refund_of INTEGER UNIQUE REFERENCES entries(id), created_at REAL NOT NULL);
INSERT INTO workspaces VALUES (1, 'acme', 10, 0);
INSERT INTO entries (workspace_id, kind, amount, balance_after, note, created_at)
    VALUES (1, 'opening', 10, 10, 'opening balance', 0);
"""


def test_a_ledger_made_before_the_partial_index_charges_and_refunds(tmp_path):
    path = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript(_LEDGER_OF_BEFORE)
    ledger = SqliteLedger(path)
    # its refund_of column is unique already: opening it writes nothing (one read-only opens;
    # QA 31: creating the partial index was a traceback there)
    with contextlib.closing(sqlite3.connect(path)) as db:
        names = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    assert "entries_refunded" not in names
    charge = ledger.charge("acme", ChargeRequest(cost=3, idempotency_key="k", fingerprint="f"))
    assert ledger.refund(charge.entry_id, "engine failed").balance == 10
    assert ledger.refund(charge.entry_id, "engine failed").balance == 10
    assert ledger.charge("acme", ChargeRequest(cost=1)).balance_after == 9
    assert sum(e["amount"] for e in ledger.entries("acme")) == 9


def test_a_charge_that_may_not_wait_is_refused_at_once_while_another_writes(ledger):
    other = sqlite3.connect(ledger.path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    with pytest.raises(LedgerBusy):
        ledger.charge("acme", ChargeRequest(cost=1), wait=False)
    assert time.monotonic() - started < 1
    threading.Timer(0.3, lambda: other.execute("COMMIT")).start()
    # the thread's other connection still waits for the lock (the busy timeout, a minute)
    assert ledger.charge("acme", ChargeRequest(cost=1)).balance_after == 9
    assert ledger.charge("acme", ChargeRequest(cost=1), wait=False).balance_after == 8
    assert ledger.workspace("acme").balance == 8


def test_charge_each_answers_every_request_in_one_transaction(ledger):
    ledger.create_workspace("other", 1)
    results = ledger.charge_each(
        [("acme", ChargeRequest(cost=c, idempotency_key=f"k{i}", fingerprint="f"))
         for i, c in enumerate((3, 3, 3, 3, 1))]
        + [("acme", ChargeRequest(cost=1, idempotency_key="k0", fingerprint="f")),
           ("ghost", ChargeRequest(cost=1)), ("other", ChargeRequest(cost=3))]
    )  # fmt: skip
    kinds = [type(r).__name__ if isinstance(r, Exception) else r.cost for r in results]
    assert kinds == [3, 3, 3, "InsufficientDecisions", 1, "RequestInProgress",
                     "UnknownWorkspace", "InsufficientDecisions"]  # fmt: skip
    assert ledger.workspace("acme").balance == 0
    assert ledger.workspace("other").balance == 1


def test_topup_and_errors(ledger):
    assert ledger.topup("acme", 5).balance == 15
    with pytest.raises(UsageError):
        ledger.topup("acme", 0)
    with pytest.raises(UnknownWorkspace):
        ledger.workspace("nobody")
    with pytest.raises(UsageError):
        ledger.create_workspace("acme", 1)


def test_concurrent_threads_never_overspend(tmp_path):
    ledger = SqliteLedger(tmp_path / "l.db")
    ledger.create_workspace("w", 50)
    outcomes: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(10):
            try:
                ledger.charge("w", ChargeRequest(cost=1))
                result = "ok"
            except InsufficientDecisions:
                result = "402"
            with lock:
                outcomes.append(result)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 50 and outcomes.count("402") == 30
    assert ledger.workspace("w").balance == 0
    assert sum(e["amount"] for e in ledger.entries("w")) == 0


def _spend(path: str, tries: int, queue: multiprocessing.Queue) -> None:
    ledger = SqliteLedger(path)
    spent = 0
    for _ in range(tries):
        with contextlib.suppress(InsufficientDecisions):
            spent += ledger.charge("w", ChargeRequest(cost=3)).cost
    queue.put(spent)


def test_concurrent_processes_never_overspend(tmp_path):
    path = str(tmp_path / "l.db")
    SqliteLedger(path).create_workspace("w", 100)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [context.Process(target=_spend, args=(path, 20, queue)) for _ in range(4)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(60)
    spent = sum(queue.get(timeout=5) for _ in processes)
    assert spent == 99  # 33 charges of 3; the last decision cannot pay a 3
    assert SqliteLedger(path).workspace("w").balance == 1


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 30), st.lists(st.sampled_from([1, 3]), max_size=30))
def test_the_balance_never_goes_negative(opening, costs):
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        ledger = SqliteLedger(Path(folder) / "l.db")
        ledger.create_workspace("w", opening)
        expected = opening
        for cost in costs:
            try:
                ledger.charge("w", ChargeRequest(cost=cost))
                expected -= cost
            except InsufficientDecisions as exc:
                assert exc.balance < cost or exc.balance == 0
            assert ledger.workspace("w").balance == expected >= 0
        ledger.close()


def test_a_ledger_opened_while_another_run_makes_the_same_new_file_waits_for_it(tmp_path):
    """Two runs started at the same instant on a new --db file: the second switching it to WAL
    while the first held its write lock got "database is locked" at once (SQLite calls no busy
    handler there), about once in fifty such starts. It now waits for the first."""
    path = tmp_path / "ledger.db"
    first = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    first.execute("CREATE TABLE made_by_the_first_run (x)")
    first.execute("BEGIN IMMEDIATE")
    committing = threading.Timer(0.3, first.execute, ["COMMIT"])
    committing.start()
    try:
        ledger = SqliteLedger(path)
        ledger.create_workspace("w", 10)
    finally:
        committing.join()
        first.close()
    assert ledger.workspace("w").balance == 10


def test_a_ledger_that_cannot_be_written_refuses_whole_and_works_again_after(tmp_path):
    """QA 52: a full disk was a sqlite3 error (a traceback, a 500 saying the evaluation failed),
    and a COMMIT that failed was not rolled back. SQLite's page limit stands for the disk."""
    ledger = SqliteLedger(tmp_path / "ledger.db")
    ledger.create_workspace("acme", 10_000)
    connections = [ledger._connections.get(waits=wait) for wait in (True, False)]
    pages = connections[0].execute("PRAGMA page_count").fetchone()[0]
    for db in connections:
        db.execute(f"PRAGMA max_page_count = {pages}")
    charged = 0
    with pytest.raises(LedgerUnavailable, match=r"database or disk is full.*charge was not made"):
        for n in range(1_000):
            ledger.charge("acme", ChargeRequest(cost=1, idempotency_key=f"k{n}", fingerprint="f"))
            charged += 1
    assert ledger.workspace("acme").balance == 10_000 - charged
    assert len(ledger.entries("acme")) == 1 + charged
    with pytest.raises(LedgerUnavailable, match="the top-up was not made"):  # says what (QA 53)
        for _ in range(1_000):
            ledger.topup("acme", 1)
    assert ledger.workspace("acme").balance == 10_000 - charged
    for db in connections:
        db.execute("PRAGMA max_page_count = 1000000")
        assert not db.in_transaction
    ledger.charge("acme", ChargeRequest(cost=1, idempotency_key="after", fingerprint="f"))
    assert ledger.workspace("acme").balance == 9_999 - charged


def test_a_ledger_opened_read_only_refuses_its_writes_as_unavailable(ledger):
    """QA 54: BEGIN IMMEDIATE on a file opened read-only raised a bare sqlite3 error: a 500 and
    a traceback per request, and a remote run retrying each row as a service failure."""
    for wait in (True, False):
        ledger._connections.get(waits=wait).execute("PRAGMA query_only = ON")
    with pytest.raises(LedgerUnavailable, match=r"readonly database.*charge was not made"):
        ledger.charge("acme", ChargeRequest(cost=1, fingerprint="f"))
    assert ledger.workspace("acme").balance == 10


def _age(path: Path, key: str, days: float) -> None:
    """Make the idempotency record of `key` as old as `days` (as if written then)."""
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "UPDATE idempotency SET created_at = created_at - ? WHERE key = ?", (days * 86400, key)
        )


def test_answers_kept_past_their_time_are_forgotten_and_the_charges_stay(ledger, tmp_path):
    """The service stores every answer under its Idempotency-Key; kept for ever, a busy
    ledger grows by a few kilobytes a request. Records older than the cutoff are deleted; the
    entries (the audit trail) and the balance are not touched."""
    for key in ("old-1", "old-2", "recent"):
        ledger.charge("acme", ChargeRequest(cost=1, idempotency_key=key, fingerprint="f"))
        ledger.complete("acme", key, '{"score": 80}')
    ledger.charge("acme", ChargeRequest(cost=1, idempotency_key="old-in-flight", fingerprint="f"))
    for key in ("old-1", "old-2", "old-in-flight"):
        _age(tmp_path / "ledger.db", key, 31)
    entries = ledger.entries("acme")

    assert ledger.forget_answers(time.time() - 30 * 86400, chunk=2) == 3
    assert [
        k for k in ("old-1", "old-2", "old-in-flight", "recent") if ledger.charged("acme", k)
    ] == ["recent"]
    assert ledger.entries("acme") == entries and ledger.workspace("acme").balance == 6
    replayed = ledger.charge(
        "acme", ChargeRequest(cost=1, idempotency_key="recent", fingerprint="f")
    )
    assert replayed.replayed
    again = ledger.charge("acme", ChargeRequest(cost=1, idempotency_key="old-1", fingerprint="f"))
    assert not again.replayed and again.balance_after == 5  # a new request, charged anew
    assert ledger.forget_answers(time.time() - 30 * 86400) == 0


def test_a_write_ahead_log_grown_under_a_long_read_is_cut_back(tmp_path, monkeypatch):
    """QA 61: a read held for a while under load (a backup, a report) grew the -wal file to
    200 MB, and SQLite kept it at that size for as long as the server ran."""
    from pipeline.ledger import connection

    monkeypatch.setattr(connection, "WAL_SIZE_LIMIT_BYTES", 64 * 1024)
    path = tmp_path / "ledger.db"
    ledger = SqliteLedger(path)
    ledger.create_workspace("acme", 1000)
    with contextlib.closing(sqlite3.connect(path)) as reader:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM entries").fetchone()  # the log cannot start over
        for i in range(100):
            ledger.charge("acme", ChargeRequest(cost=1, idempotency_key=f"k{i}", fingerprint="f"))
        reader.execute("COMMIT")
    wal = path.with_name("ledger.db-wal")
    assert wal.stat().st_size > 4 * 64 * 1024
    with contextlib.closing(sqlite3.connect(path)) as other:
        other.execute("PRAGMA wal_checkpoint(PASSIVE)")
    ledger.charge("acme", ChargeRequest(cost=1))  # the log starts over, and is cut back
    assert wal.stat().st_size <= 64 * 1024
    assert ledger.workspace("acme").balance == 899
