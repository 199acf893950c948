"""Accounts and API keys: format, checksum, hashing, broker/agency only, revocation."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from pipeline.errors import LedgerBusy, LedgerUnavailable
from pipeline.ledger.accounts import (
    AccountError,
    InvalidApiKey,
    KeysNotAllowed,
    SqliteAccounts,
    check_key_format,
    generate_key,
)
from pipeline.ledger.key_changes import REMEMBERED_S
from pipeline.ledger.sqlite import SqliteLedger


@pytest.fixture
def store(tmp_path: Path) -> SqliteAccounts:
    ledger = SqliteLedger(tmp_path / "ledger.db")
    ledger.create_workspace("acme", 10)
    return SqliteAccounts(tmp_path / "ledger.db")


def test_key_shape_and_checksum() -> None:
    key = generate_key()
    assert key.startswith("sk-") and len(key) == 3 + 40 + 6
    assert check_key_format(key)
    assert len({generate_key() for _ in range(100)}) == 100


@pytest.mark.parametrize("position", [3, 10, 30, 45, 48])
def test_a_mistyped_key_fails_its_checksum(position: int) -> None:
    key = generate_key()
    typo = "a" if key[position] != "a" else "b"
    assert not check_key_format(key[:position] + typo + key[position + 1 :])


@pytest.mark.parametrize("bad", ["", "sk-", "Bearer x", "sk-" + "A" * 46, "pk-" + "a" * 46])
def test_malformed_keys(bad: str) -> None:
    assert not check_key_format(bad)


def test_only_broker_and_agency_get_keys(store: SqliteAccounts) -> None:
    for kind in ("broker", "agency"):
        store.create_account(kind, "acme", kind)
        assert store.create_key(kind).key.startswith("sk-")
    for kind in ("buyer", "seller"):
        store.create_account(kind, "acme", kind)
        with pytest.raises(KeysNotAllowed, match="only broker and agency"):
            store.create_key(kind)


def test_account_errors(store: SqliteAccounts) -> None:
    with pytest.raises(AccountError, match="account type"):
        store.create_account("x", "acme", "landlord")
    store.create_account("x", "acme", "broker")
    with pytest.raises(AccountError, match="already exists"):
        store.create_account("x", "acme", "broker")
    with pytest.raises(AccountError, match="no account"):
        store.create_key("nobody")
    with pytest.raises(Exception, match="no workspace"):
        store.create_account("y", "nowhere", "broker")


def test_authenticate_and_revoke(store: SqliteAccounts) -> None:
    store.create_account("b", "acme", "broker")
    new = store.create_key("b")
    caller = store.authenticate(new.key)
    assert (caller.account, caller.workspace, caller.key_prefix) == ("b", "acme", new.info.prefix)
    with pytest.raises(InvalidApiKey, match="unknown"):
        store.authenticate(generate_key())
    with pytest.raises(InvalidApiKey, match="malformed"):
        store.authenticate(new.key[:-1] + ("a" if new.key[-1] != "a" else "b"))
    revoked = store.revoke_key(new.info.display)
    assert revoked.revoked_at is not None
    with pytest.raises(InvalidApiKey, match="revoked"):
        store.authenticate(new.key)
    with pytest.raises(AccountError, match="no API key"):
        store.revoke_key("sk-zzzzzzzz")


def test_a_remembered_key_revoked_by_another_process_is_refused_at_its_next_request(
    store: SqliteAccounts, tmp_path: Path
) -> None:
    store.create_account("b", "acme", "broker")
    key = store.create_key("b").key
    assert store.authenticate(key).account == "b"  # its caller is remembered now

    revoke = [sys.executable, "-m", "pipeline", "key", "revoke", key[:11]]
    subprocess.run([*revoke, "--db", str(tmp_path / "ledger.db")], check=True, capture_output=True)

    with pytest.raises(InvalidApiKey, match="revoked"):
        store.authenticate(key)


@pytest.mark.parametrize("how", ["sql by hand", "signal not written"])
def test_a_key_revoked_unseen_is_refused_once_its_caller_is_remembered_a_second(
    tmp_path: Path, how: str
) -> None:
    path = tmp_path / "ledger.db"
    SqliteLedger(path).create_workspace("acme", 10)
    now = [100.0]
    store = SqliteAccounts(path, clock=lambda: now[0])
    store.create_account("b", "acme", "broker")
    new = store.create_key("b")
    if how == "signal not written":
        (tmp_path / "ledger.db-keys").unlink()
        (tmp_path / "ledger.db-keys").mkdir()  # what holds its name cannot be appended to
    store.authenticate(new.key)
    if how == "sql by hand":
        with closing(sqlite3.connect(path)) as db, db:
            db.execute("UPDATE api_keys SET revoked_at = 1")
    else:
        SqliteAccounts(path).revoke_key(new.info.display)

    now[0] += REMEMBERED_S - 0.01
    assert store.authenticate(new.key).account == "b"
    now[0] += 0.01
    with pytest.raises(InvalidApiKey, match="revoked"):
        store.authenticate(new.key)


def test_keys_share_the_workspace_and_list_shows_no_secret(store: SqliteAccounts) -> None:
    store.create_account("b", "acme", "broker")
    store.create_account("a", "acme", "agency")
    keys = [store.create_key("b"), store.create_key("b"), store.create_key("a")]
    assert {store.authenticate(k.key).workspace for k in keys} == {"acme"}
    listed = store.list_keys("b")
    assert [k.prefix for k in listed] == [k.info.prefix for k in keys[:2]]
    for info in store.list_keys():
        assert info.display.startswith("sk-") and "..." in info.display
        assert len(info.display) == 3 + 8 + 3 + 4


def test_the_database_never_holds_a_key(store: SqliteAccounts, tmp_path: Path) -> None:
    store.create_account("b", "acme", "broker")
    key = store.create_key("b").key
    store.close()
    raw = (tmp_path / "ledger.db").read_bytes()
    for path in tmp_path.iterdir():
        raw += path.read_bytes()
    assert key.encode() not in raw
    assert key[3:].encode() not in raw
    rows = sqlite3.connect(tmp_path / "ledger.db").execute("SELECT * FROM api_keys").fetchall()
    assert all(key not in str(row) for row in rows)


def test_a_change_the_ledger_cannot_take_says_so_and_what_was_not_done(
    store: SqliteAccounts,
) -> None:
    """QA 61: `key revoke` (and `key create`, `account create`) on a ledger that cannot be
    written (a full disk, a file made read-only) ended in a sqlite3 traceback: an operator
    revoking a leaked key had to read one to learn that the key still worked."""
    store.create_account("b", "acme", "broker")
    key = store.create_key("b").key
    store._connections.get().execute("PRAGMA query_only = ON")  # as a read-only file refuses
    with pytest.raises(LedgerUnavailable, match=r"readonly database.*the key was not revoked"):
        store.revoke_key(key)
    with pytest.raises(LedgerUnavailable, match="no key was made"):
        store.create_key("b")
    with pytest.raises(LedgerUnavailable, match="the account was not made"):
        store.create_account("c", "acme", "agency")
    assert store.authenticate(key).account == "b"


def test_a_change_waiting_on_a_ledger_kept_locked_says_so_and_what_was_not_done(
    store: SqliteAccounts, tmp_path: Path
) -> None:
    """QA 62: past the wait for a ledger another process keeps locked, `key revoke` (and `key
    create`, `account create`) still ended in a sqlite3 traceback, 'database is locked'."""
    store.create_account("b", "acme", "broker")
    key = store.create_key("b").key
    store._connections.get().execute("PRAGMA busy_timeout = 10")  # its minute, shortened
    with closing(sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another process's write, not finished
        with pytest.raises(LedgerBusy, match=r"locked by another process.*key was not revoked"):
            store.revoke_key(key)
        with pytest.raises(LedgerBusy, match="no key was made"):
            store.create_key("b")
        with pytest.raises(LedgerBusy, match="the account was not made"):
            store.create_account("c", "acme", "agency")
        other.execute("ROLLBACK")
    assert store.authenticate(key).account == "b"
