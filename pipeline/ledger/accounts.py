"""Accounts and their API keys, in the ledger's SQLite file.

A key is `sk-` + 40 base32 characters (200 random bits) + a 6-character checksum (30 bits of
the sha256 of the rest), so a mistyped key is refused by `check_key_format` before any lookup.
The database keeps only the sha256 of the whole key and its display prefix (`sk-` and the first
8 secret characters, which leave 160 unknown bits); a lookup finds the rows of that prefix and
compares hashes in constant time. Only broker and agency accounts may hold keys (spec 5.3).

These tables sit beside the ledger's (`CREATE TABLE IF NOT EXISTS`), on their own connection
per thread, so the `Ledger` interface stays about balances only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, get_args

from pipeline.errors import LedgerBusy, PipelineError, UnknownWorkspace, UsageError
from pipeline.ledger.base import check_name
from pipeline.ledger.connection import ThreadConnections, cannot_write, unwritable
from pipeline.ledger.key_changes import REMEMBERED_S, KeyChanges, Stamp
from pipeline.ledger.key_text import DISPLAY_CHARS as _DISPLAY_CHARS

AccountType = Literal["broker", "agency", "buyer", "seller"]
ACCOUNT_TYPES: tuple[str, ...] = get_args(AccountType)
KEY_HOLDING_TYPES = frozenset({"broker", "agency"})

KEY_PREFIX = "sk-"
_SECRET_BYTES = 25  # 200 bits: exactly 40 base32 characters, no padding
_SECRET_CHARS = 40
_CHECKSUM_CHARS = 6
_KEY_RE = re.compile(rf"sk-[a-z2-7]{{{_SECRET_CHARS + _CHECKSUM_CHARS}}}")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS accounts (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
    type TEXT NOT NULL CHECK (type IN ('broker', 'agency', 'buyer', 'seller')),
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    id INTEGER PRIMARY KEY,
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    prefix TEXT NOT NULL,
    last_chars TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    revoked_at REAL
);
CREATE INDEX IF NOT EXISTS api_keys_by_prefix ON api_keys(prefix);
"""


class AccountError(UsageError):
    """An account or key operation that cannot be done; exit code 2."""


class KeysNotAllowed(AccountError):
    """Buyer and seller accounts cannot hold API keys (spec 5.3)."""


class InvalidApiKey(PipelineError):
    """Spec error `invalid_api_key`. The message never contains the key."""

    code = "invalid_api_key"

    def body(self) -> dict[str, object]:
        return {"error": self.code, "message": str(self)}


@dataclass(frozen=True)
class Account:
    name: str
    workspace: str
    type: str


@dataclass(frozen=True)
class KeyInfo:
    """What may be shown of a key after its creation: never the secret."""

    id: int
    account: str
    prefix: str
    last_chars: str
    created_at: float
    revoked_at: float | None

    @property
    def display(self) -> str:
        return f"{self.prefix}...{self.last_chars}"


@dataclass(frozen=True)
class Caller:
    """The authenticated owner of a request."""

    account: str
    workspace: str
    key_prefix: str


@dataclass(frozen=True)
class NewKey:
    key: str  # shown once, stored nowhere
    info: KeyInfo


class AccountStore(Protocol):
    def create_account(self, name: str, workspace: str, type: str) -> Account: ...

    def create_key(self, account: str) -> NewKey: ...

    def revoke_key(self, prefix: str) -> KeyInfo: ...

    def list_keys(self, account: str | None = None) -> list[KeyInfo]: ...

    def authenticate(self, key: str) -> Caller: ...


# -- the key format --------------------------------------------------------------------------


def _checksum(secret: str) -> str:
    digest = hashlib.sha256(f"{KEY_PREFIX}{secret}".encode()).digest()
    return base64.b32encode(digest).decode()[:_CHECKSUM_CHARS].lower()


def generate_key() -> str:
    secret = base64.b32encode(secrets.token_bytes(_SECRET_BYTES)).decode().lower()
    return f"{KEY_PREFIX}{secret}{_checksum(secret)}"


def check_key_format(key: str) -> bool:
    """True if `key` is shaped like a key and its checksum holds; no database involved."""
    if _KEY_RE.fullmatch(key) is None:
        return False
    body = key[len(KEY_PREFIX) :]
    secret, checksum = body[:_SECRET_CHARS], body[_SECRET_CHARS:]
    return hmac.compare_digest(checksum, _checksum(secret))


def display_prefix(key: str) -> str:
    """The part of a key that may appear in logs and listings."""
    return key[: len(KEY_PREFIX) + _DISPLAY_CHARS]


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


# -- the SQLite store ------------------------------------------------------------------------

_WELL_FORMED_REMEMBERED = 10_000
_CALLERS_REMEMBERED = 10_000


@dataclass(frozen=True)
class _Remembered:
    caller: Caller
    stamp: Stamp  # of the key changes, taken before the look-up
    until: float  # on the store's clock


class SqliteAccounts:
    def __init__(self, path: Path | str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self._connections = ThreadConnections(self.path)
        self._connection().executescript(_SCHEMA)
        # Hashes of keys whose format and checksum held: a service sees the same few keys on
        # every request, and the checksum costs half of authentication (~10 us).
        self._well_formed: set[str] = set()
        # The callers of keys looked up lately, by key hash (see pipeline.ledger.key_changes).
        self._callers: dict[str, _Remembered] = {}
        self._key_changes = KeyChanges(self.path)
        self._clock = clock

    def _connection(self) -> sqlite3.Connection:
        return self._connections.get()

    def close(self) -> None:
        self._connections.close()

    @contextmanager
    def _writing(self, undone: str) -> Iterator[sqlite3.Connection]:
        """This thread's connection for a write: LedgerUnavailable (saying `undone`) if the
        ledger cannot take it (a full disk, a file made read-only), LedgerBusy if another
        process keeps it locked past the busy timeout."""
        try:
            yield self._connection()
        except sqlite3.OperationalError as exc:
            if cannot_write(exc):
                raise unwritable(exc, undone) from exc
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                raise LedgerBusy(
                    f"the ledger stayed locked by another process; {undone}: try again"
                ) from exc
            raise

    def create_account(self, name: str, workspace: str, type: str) -> Account:
        check_name(name, "account")
        if type not in ACCOUNT_TYPES:
            raise AccountError(f"account type must be one of {', '.join(ACCOUNT_TYPES)}")
        db = self._connection()
        try:
            row = db.execute("SELECT id FROM workspaces WHERE name = ?", (workspace,)).fetchone()
        except sqlite3.OperationalError:
            row = None  # no ledger in this file yet
        if row is None:
            raise UnknownWorkspace(f"no workspace named {workspace!r} in {self.path}")
        try:
            with self._writing("the account was not made") as db:
                db.execute(
                    "INSERT INTO accounts (name, workspace_id, type, created_at)"
                    " VALUES (?, ?, ?, ?)",
                    (name, row[0], type, time.time()),
                )
        except sqlite3.IntegrityError:
            raise AccountError(f"account {name!r} already exists in {self.path}") from None
        return Account(name, workspace, type)

    def account(self, name: str) -> Account:
        row = (
            self._connection()
            .execute(
                "SELECT a.name, w.name, a.type FROM accounts a"
                " JOIN workspaces w ON w.id = a.workspace_id WHERE a.name = ?",
                (name,),
            )
            .fetchone()
        )
        if row is None:
            raise AccountError(f"no account named {name!r} in {self.path}")
        return Account(*row)

    def create_key(self, account: str) -> NewKey:
        db = self._connection()
        row = db.execute("SELECT id, type FROM accounts WHERE name = ?", (account,)).fetchone()
        if row is None:
            raise AccountError(f"no account named {account!r} in {self.path}")
        account_id, account_type = row
        if account_type not in KEY_HOLDING_TYPES:
            raise KeysNotAllowed(
                f"account {account!r} is a {account_type} account; only broker and agency "
                "accounts can have API keys"
            )
        key = generate_key()
        now = time.time()
        prefix, last = display_prefix(key), key[-4:]
        with self._writing("no key was made") as db:
            cursor = db.execute(
                "INSERT INTO api_keys (account_id, prefix, last_chars, key_hash, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (account_id, prefix, last, hash_key(key), now),
            )
        assert cursor.lastrowid is not None
        return NewKey(key, KeyInfo(cursor.lastrowid, account, prefix, last, now, None))

    def revoke_key(self, prefix: str, *, warn: Callable[[str], None] | None = None) -> KeyInfo:
        """Revoke the key shown as `prefix` (its display prefix, or `prefix...last`), or the
        key itself (a leaked key in hand); an error never repeats a whole key. Once it
        returns, running servers refuse the key (see pipeline.ledger.key_changes): when they
        could not be told, it waits until what they remember is too old to be used, and says
        why to `warn`."""
        if check_key_format(prefix):
            matches = self._keys("k.key_hash = ?", (hash_key(prefix),))
            if not matches:
                raise AccountError(f"no such API key ({display_prefix(prefix)}...) in {self.path}")
            return self._revoke(matches[0], warn)
        prefix, _, last = prefix.partition("...")
        matches = [k for k in self._keys("k.prefix = ?", (prefix,)) if last in ("", k.last_chars)]
        if not matches:
            if len(prefix) > len(KEY_PREFIX) + _DISPLAY_CHARS:  # a mistyped key: never echo it
                raise AccountError("no API key matches; give its prefix as `key list` shows it")
            raise AccountError(f"no API key with prefix {prefix!r}")
        if len(matches) > 1:
            raise AccountError(f"several keys start with {prefix!r}; give prefix...last too")
        return self._revoke(matches[0], warn)

    def _revoke(self, key: KeyInfo, warn: Callable[[str], None] | None) -> KeyInfo:
        revoked = key
        if key.revoked_at is None:
            now = time.time()
            with self._writing("the key was not revoked, it still works") as db:
                db.execute("UPDATE api_keys SET revoked_at = ? WHERE id = ?", (now, key.id))
            revoked = KeyInfo(key.id, key.account, key.prefix, key.last_chars, key.created_at, now)
        # Told again when it was revoked already: perhaps by hand, unseen by servers (QA 72).
        failed = self._key_changes.signal()
        if failed is not None:
            # A server's answer, looked up before the commit, is forgotten REMEMBERED_S after.
            time.sleep(REMEMBERED_S)
            if warn is not None:
                warn(
                    f"running servers could not be told through {self._key_changes.path} "
                    f"({failed.strerror or failed}): waited {REMEMBERED_S:g} s, until none "
                    "accepts the key any more. Make that file one that whoever revokes keys "
                    "can append to (a plain file, not a link), as the ledger's -wal is"
                )
        return revoked

    def list_keys(self, account: str | None = None) -> list[KeyInfo]:
        if account is None:
            return self._keys("1", ())
        self.account(account)
        return self._keys("a.name = ?", (account,))

    def _keys(self, where: str, params: tuple[object, ...]) -> list[KeyInfo]:
        rows = (
            self._connection()
            .execute(
                "SELECT k.id, a.name, k.prefix, k.last_chars, k.created_at, k.revoked_at"
                f" FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE {where}"
                " ORDER BY k.id",
                params,
            )
            .fetchall()
        )
        return [KeyInfo(*row) for row in rows]

    def authenticate(self, key: str) -> Caller:
        """The caller a key belongs to, or InvalidApiKey (format, checksum, unknown, revoked).
        A key's caller is remembered until a key is revoked, for at most REMEMBERED_S."""
        wanted = hash_key(key)
        stamp = self._key_changes.stamp()
        now = self._clock()
        remembered = self._callers.get(wanted)
        if remembered is not None and remembered.stamp == stamp and now < remembered.until:
            return remembered.caller
        caller = self._look_up(key, wanted)
        if len(self._callers) >= _CALLERS_REMEMBERED:
            self._callers.clear()
        self._callers[wanted] = _Remembered(caller, stamp, now + REMEMBERED_S)
        return caller

    def _look_up(self, key: str, wanted: str) -> Caller:
        if wanted not in self._well_formed:
            if not check_key_format(key):
                raise InvalidApiKey("the API key is malformed; check that it was copied whole")
            if len(self._well_formed) >= _WELL_FORMED_REMEMBERED:
                self._well_formed.clear()
            self._well_formed.add(wanted)
        rows = (
            self._connection()
            .execute(
                "SELECT k.key_hash, k.revoked_at, a.name, w.name FROM api_keys k"
                " JOIN accounts a ON a.id = k.account_id"
                " JOIN workspaces w ON w.id = a.workspace_id WHERE k.prefix = ?",
                (display_prefix(key),),
            )
            .fetchall()
        )
        for key_hash, revoked_at, account, workspace in rows:
            if hmac.compare_digest(key_hash, wanted):
                if revoked_at is not None:
                    revoked = InvalidApiKey("this API key has been revoked")
                    # for the access log: which client still calls with it (an issued key's
                    # prefix; a key made up to carry another's prefix has none)
                    revoked.key_prefix = display_prefix(key)  # type: ignore[attr-defined]
                    raise revoked
                return Caller(account, workspace, display_prefix(key))
        raise InvalidApiKey("unknown API key")
