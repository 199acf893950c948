"""The decision balance in a SQLite file: WAL mode, every change in an IMMEDIATE transaction.

The balance column carries CHECK (balance >= 0), so even a bug cannot make it negative. Every
change of a balance writes an entry with the balance after it: the audit trail a workspace
owner reconciles (the sum of the entries equals the balance).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from pipeline.errors import (
    IdempotencyKeyReused,
    InsufficientDecisions,
    LedgerBusy,
    LedgerError,
    RequestInProgress,
    UnknownWorkspace,
    UsageError,
)
from pipeline.ledger.base import Charge, ChargeRequest, Workspace, check_name
from pipeline.ledger.connection import (
    BUSY_TIMEOUT_MS,
    ThreadConnections,
    cannot_write,
    unwritable,
)
from pipeline.settings import Settings, ledger_location

# An in-flight request older than this is taken to have died (a killed process): its charge
# stands and is replayed, never repeated.
STALE_IN_FLIGHT_S = 120.0
MAX_BALANCE = 2**63 - 1  # SQLite's largest integer

_SCHEMA = """
CREATE TABLE IF NOT EXISTS workspaces (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    balance INTEGER NOT NULL CHECK (balance >= 0),
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
    kind TEXT NOT NULL CHECK (kind IN ('opening', 'topup', 'charge', 'refund')),
    amount INTEGER NOT NULL,
    balance_after INTEGER NOT NULL,
    idempotency_key TEXT,
    fingerprint TEXT,
    key_prefix TEXT,
    note TEXT,
    refund_of INTEGER REFERENCES entries(id),
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_by_workspace ON entries(workspace_id, id);
CREATE TABLE IF NOT EXISTS idempotency (
    workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
    key TEXT NOT NULL,
    fingerprint TEXT,
    entry_id INTEGER NOT NULL REFERENCES entries(id),
    state TEXT NOT NULL CHECK (state IN ('in_flight', 'done')),
    response TEXT,
    created_at REAL NOT NULL,
    PRIMARY KEY (workspace_id, key)
);
"""


# A charge is refunded at most once. A partial index, so that a charge's commit writes no page
# of it; a ledger made before 2026-11-25 has the UNIQUE of its refund_of column instead.
_REFUNDED_ONCE = (
    "CREATE UNIQUE INDEX IF NOT EXISTS entries_refunded ON entries(refund_of)"
    " WHERE refund_of IS NOT NULL"
)


def _refunds_unique(db: sqlite3.Connection) -> bool:
    """Whether `entries` has a unique index on refund_of (the partial one, or the column's)."""
    for _, name, unique, *_ in db.execute("PRAGMA index_list(entries)").fetchall():
        columns = [row[2] for row in db.execute(f"PRAGMA index_info({name!r})").fetchall()]
        if unique and columns == ["refund_of"]:
            return True
    return False


class SqliteLedger:
    def __init__(
        self,
        path: Path | str,
        *,
        stale_in_flight_s: float = STALE_IN_FLIGHT_S,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        opened_by_first_charge: Workspace | None = None,
    ) -> None:
        """`opened_by_first_charge`: a workspace this ledger may not hold yet, made with its
        balance in the transaction of its first charge (the local workspace in a ledger named
        with --db); until then it reads as that balance, and nothing is written."""
        self.path = Path(path)
        self.stale_in_flight_s = stale_in_flight_s
        self.opened_by_first_charge = opened_by_first_charge
        self._connections = ThreadConnections(self.path, busy_timeout_ms=busy_timeout_ms)
        db = self._connection()
        db.executescript(_SCHEMA)  # no write on a ledger that has them: one read-only opens
        if not _refunds_unique(db):
            db.execute(_REFUNDED_ONCE)

    # -- connections -------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        return self._connections.get()

    @contextmanager
    def _transaction(self, undone: str, *, wait: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction: LedgerBusy, nothing done, if another connection holds the write
        lock past the busy timeout (a minute), or at once with `wait=False`; LedgerUnavailable,
        nothing done (`undone` says what), if the ledger cannot be written (a full disk, a
        read-only file) or its file is no longer the one opened (moved or deleted while in
        use: what is written to a file nobody will open again is lost)."""
        db = self._connections.get(waits=wait)
        try:
            _begin(db, waited_s=self._connections.busy_timeout_ms / 1000 if wait else 0)
            self._connections.check_file(undone)
            yield db
            db.execute("COMMIT")
        except BaseException as exc:
            _roll_back(db)  # after a failed COMMIT too, as SQLite asks (none after BEGIN failed)
            if isinstance(exc, sqlite3.OperationalError) and cannot_write(exc):
                raise unwritable(exc, undone) from exc
            raise

    def close(self) -> None:
        self._connections.close()

    def fold_log(self) -> bool:
        """Copy the write-ahead log into the database file and empty it, as far as no other
        process's transaction stands in the way (never waiting for one): called by a server
        as it stops, whose connections stay open (so SQLite never does it on their close), so
        that the file alone holds every charge made (a copy or a move of the .db file without
        its -wal, a backup the way operators take one, would lack them). The connection is
        this thread's: after a move of the file, it writes to the file where it now is.
        Whether the whole log was folded (False: another process is using the ledger)."""
        db = self._connection()
        try:
            db.execute("PRAGMA busy_timeout = 0")  # the connection's last use: it is stopping
            blocked, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error:
            return False
        return not blocked

    # -- workspaces --------------------------------------------------------------------------

    def _row(self, db: sqlite3.Connection, name: str) -> tuple[int, int]:
        row = db.execute("SELECT id, balance FROM workspaces WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise UnknownWorkspace(f"no workspace named {name!r} in {self.path}")
        return row

    def create_workspace(self, name: str, balance: int) -> Workspace:
        check_name(name, "workspace")
        if balance < 0:
            raise UsageError("a workspace balance cannot be negative")
        if balance > MAX_BALANCE:
            raise UsageError(f"a workspace balance can be at most {MAX_BALANCE:,} decisions")
        with self._transaction("the workspace was not made") as db:
            if db.execute("SELECT 1 FROM workspaces WHERE name = ?", (name,)).fetchone():
                raise UsageError(f"workspace {name!r} already exists in {self.path}")
            self._insert_workspace(db, name, balance)
        return Workspace(name, balance)

    def ensure_workspace(self, name: str, balance: int) -> Workspace:
        with self._transaction("the workspace was not made") as db:
            row = db.execute("SELECT balance FROM workspaces WHERE name = ?", (name,)).fetchone()
            if row is not None:
                return Workspace(name, row[0])
            self._insert_workspace(db, name, balance)
        return Workspace(name, balance)

    def _insert_workspace(self, db: sqlite3.Connection, name: str, balance: int) -> None:
        now = time.time()
        cursor = db.execute(
            "INSERT INTO workspaces (name, balance, created_at) VALUES (?, ?, ?)",
            (name, balance, now),
        )
        self._entry(db, cursor.lastrowid, "opening", balance, balance, note="opening balance")

    def workspace(self, name: str) -> Workspace:
        try:
            _, balance = self._row(self._connection(), name)
        except UnknownWorkspace:
            opened = self._opened_by_first_charge(name)
            if opened is None:
                raise
            return opened
        return Workspace(name, balance)

    def opens_on_first_charge(self) -> Workspace | None:
        """The workspace this ledger does not hold yet that its first charge will open (with
        its balance), if any: what a user who mistyped --db, or forgot --workspace, should hear
        of before that charge."""
        opened = self.opened_by_first_charge
        if opened is None:
            return None
        try:
            self._row(self._connection(), opened.name)
        except UnknownWorkspace:
            return opened
        return None

    def _opened_by_first_charge(self, name: str) -> Workspace | None:
        opened = self.opened_by_first_charge
        return opened if opened is not None and opened.name == name else None

    def _row_to_pay(self, db: sqlite3.Connection, name: str) -> tuple[int, int]:
        """`_row`, the workspace opened first if it is the one opened by its first charge (or
        top-up)."""
        try:
            return self._row(db, name)
        except UnknownWorkspace:
            opened = self._opened_by_first_charge(name)
            if opened is None:
                raise
            self._insert_workspace(db, name, opened.balance)
            return self._row(db, name)

    def topup(self, name: str, amount: int) -> Workspace:
        if amount <= 0:
            raise UsageError("a top-up must be a positive number of decisions")
        with self._transaction("the top-up was not made") as db:
            workspace_id, balance = self._row_to_pay(db, name)
            if amount > MAX_BALANCE - balance:
                raise UsageError(
                    f"workspace {name!r} holds {balance:,} decisions; a balance can be at most "
                    f"{MAX_BALANCE:,}, so it can take at most {MAX_BALANCE - balance:,} more"
                )
            balance += amount
            db.execute("UPDATE workspaces SET balance = ? WHERE id = ?", (balance, workspace_id))
            self._entry(db, workspace_id, "topup", amount, balance)
        return Workspace(name, balance)

    def entries(self, name: str) -> list[dict[str, object]]:
        db = self._connection()
        workspace_id, _ = self._row(db, name)
        cursor = db.execute(
            "SELECT id, kind, amount, balance_after, idempotency_key, fingerprint, key_prefix,"
            " note, refund_of, created_at FROM entries WHERE workspace_id = ? ORDER BY id",
            (workspace_id,),
        )
        columns = [c[0] for c in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]

    # -- charges -----------------------------------------------------------------------------

    @staticmethod
    def _entry(
        db: sqlite3.Connection,
        workspace_id: int | None,
        kind: str,
        amount: int,
        balance_after: int,
        request: ChargeRequest | None = None,
        note: str | None = None,
        refund_of: int | None = None,
    ) -> int:
        cursor = db.execute(
            "INSERT INTO entries (workspace_id, kind, amount, balance_after, idempotency_key,"
            " fingerprint, key_prefix, note, refund_of, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                workspace_id,
                kind,
                amount,
                balance_after,
                request.idempotency_key if request else None,
                request.fingerprint if request else None,
                request.key_prefix if request else None,
                note,
                refund_of,
                time.time(),
            ),
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def _earlier(
        self, db: sqlite3.Connection, workspace_id: int, request: ChargeRequest
    ) -> Charge | None:
        if request.idempotency_key is None:
            return None
        row = db.execute(
            "SELECT i.fingerprint, i.state, i.response, i.created_at, e.id, e.amount,"
            " e.balance_after FROM idempotency i JOIN entries e ON e.id = i.entry_id"
            " WHERE i.workspace_id = ? AND i.key = ?",
            (workspace_id, request.idempotency_key),
        ).fetchone()
        if row is None:
            return None
        fingerprint, state, response, created_at, entry_id, amount, balance_after = row
        if fingerprint != request.fingerprint:
            raise IdempotencyKeyReused(
                "this Idempotency-Key was already used with a different request body; "
                "use a new key for a new request"
            )
        if state == "in_flight" and time.time() - created_at < self.stale_in_flight_s:
            raise RequestInProgress(
                "a request with this Idempotency-Key is still in progress; retry shortly"
            )
        return Charge(entry_id, -amount, balance_after, replayed=True, response=response)

    def _charge_in(
        self, db: sqlite3.Connection, workspace_id: int, balance: int, request: ChargeRequest
    ) -> Charge:
        """The charge's entry (and idempotency record); the caller writes the new balance."""
        if request.cost <= 0:
            raise LedgerError("a charge must cost at least one decision")
        if balance < request.cost or balance == 0:
            raise InsufficientDecisions(required=request.cost, balance=balance)
        balance -= request.cost
        entry_id = self._entry(db, workspace_id, "charge", -request.cost, balance, request)
        if request.idempotency_key is not None:
            db.execute(
                "INSERT INTO idempotency (workspace_id, key, fingerprint, entry_id, state,"
                " created_at) VALUES (?, ?, ?, ?, 'in_flight', ?)",
                (workspace_id, request.idempotency_key, request.fingerprint, entry_id, time.time()),
            )
        return Charge(entry_id, request.cost, balance)

    def charged(self, workspace: str, idempotency_key: str) -> bool:
        row = (
            self._connection()
            .execute(
                "SELECT 1 FROM idempotency i JOIN workspaces w ON w.id = i.workspace_id"
                " WHERE w.name = ? AND i.key = ?",
                (workspace, idempotency_key),
            )
            .fetchone()
        )
        return row is not None

    def charged_at(self, workspace: str, idempotency_key: str) -> float | None:
        row = (
            self._connection()
            .execute(
                "SELECT i.created_at FROM idempotency i JOIN workspaces w ON w.id = i.workspace_id"
                " WHERE w.name = ? AND i.key = ?",
                (workspace, idempotency_key),
            )
            .fetchone()
        )
        return None if row is None else float(row[0])

    def charge(self, workspace: str, request: ChargeRequest, *, wait: bool = True) -> Charge:
        (outcome,) = self.charge_each([(workspace, request)], wait=wait)
        if isinstance(outcome, LedgerError):
            raise outcome
        return outcome

    def charge_each(
        self, charges: Sequence[tuple[str, ChargeRequest]], *, wait: bool = True
    ) -> list[Charge | LedgerError]:
        """Each (workspace, request) charged as `charge` would, all in one transaction (one
        fsync for many concurrent requests); a refusal comes back in place of its charge.
        Each workspace's balance is written once, at the end (its entries carry each step)."""
        results: list[Charge | LedgerError] = []
        with self._transaction("this charge was not made", wait=wait) as db:
            balances: dict[str, tuple[int, int]] = {}
            spent: set[str] = set()
            for workspace, request in charges:
                try:
                    if workspace not in balances:
                        balances[workspace] = self._row_to_pay(db, workspace)
                    workspace_id, balance = balances[workspace]
                    charge = self._earlier(db, workspace_id, request) or self._charge_in(
                        db, workspace_id, balance, request
                    )
                except LedgerError as refused:
                    results.append(refused)
                    continue
                if not charge.replayed:
                    balances[workspace] = (workspace_id, charge.balance_after)
                    spent.add(workspace)
                results.append(charge)
            for workspace in spent:
                workspace_id, balance = balances[workspace]
                db.execute(
                    "UPDATE workspaces SET balance = ? WHERE id = ?", (balance, workspace_id)
                )
        return results

    def complete(
        self, workspace: str, idempotency_key: str, response: str | None, *, wait: bool = True
    ) -> None:
        self.complete_many(workspace, [(idempotency_key, response)], wait=wait)

    def complete_many(
        self, workspace: str, outcomes: list[tuple[str, str | None]], *, wait: bool = True
    ) -> None:
        with self._transaction("the answer was not stored", wait=wait) as db:
            workspace_id, _ = self._row(db, workspace)
            db.executemany(
                "UPDATE idempotency SET state = 'done', response = ?"
                " WHERE workspace_id = ? AND key = ?",
                [(response, workspace_id, key) for key, response in outcomes],
            )

    def forget_answers(self, before: float, *, chunk: int = 1000) -> int:
        """Delete the idempotency records made before `before` (a Unix time); how many. A
        request sent again under one of their keys is a new request, charged anew; the
        charges' entries (the audit trail) stay.

        Records are read in the order they were made (rowid), oldest first, a chunk at a time,
        until a chunk holds one that is not old: an hourly round reads what it deletes and a
        chunk more, not the whole table (created_at has no index, which every charge would
        pay to write). Old records after a newer one (made under a clock set back) wait until it
        is old too: kept longer, never shorter. The reads keep no charge waiting (WAL); each
        chunk is deleted in a short write transaction."""
        forgotten = 0
        while True:
            oldest = self._connection().execute(
                "SELECT rowid, created_at FROM idempotency ORDER BY rowid LIMIT ?", (chunk,)
            )
            old = [(rowid, before) for rowid, made in oldest.fetchall() if made < before]
            if old:
                with self._transaction("no answer was forgotten") as db:
                    db.executemany(
                        "DELETE FROM idempotency WHERE rowid = ? AND created_at < ?", old
                    )
                forgotten += len(old)
            if len(old) < chunk:
                return forgotten

    def refund(self, entry_id: int, reason: str) -> Workspace:
        """Give back a charge whose request failed; its idempotency key becomes free again."""
        with self._transaction("the refund was not made") as db:
            row = db.execute(
                "SELECT e.workspace_id, e.amount, w.name, w.balance FROM entries e"
                " JOIN workspaces w ON w.id = e.workspace_id WHERE e.id = ? AND e.kind = 'charge'",
                (entry_id,),
            ).fetchone()
            if row is None:
                raise LedgerError(f"no charge with entry id {entry_id}")
            workspace_id, amount, name, balance = row
            if db.execute("SELECT 1 FROM entries WHERE refund_of = ?", (entry_id,)).fetchone():
                return Workspace(name, balance)  # refunded already
            balance -= amount  # amount is negative for a charge
            db.execute("UPDATE workspaces SET balance = ? WHERE id = ?", (balance, workspace_id))
            self._entry(
                db, workspace_id, "refund", -amount, balance, note=reason, refund_of=entry_id
            )
            db.execute("DELETE FROM idempotency WHERE entry_id = ?", (entry_id,))
        return Workspace(name, balance)


def open_ledger(
    settings: Settings,
    db: str | None = None,
    *,
    charges_local: bool = False,
    must_exist: bool = False,
    stale_in_flight_s: float = STALE_IN_FLIGHT_S,
) -> SqliteLedger:
    """The ledger of `--db` (else DECISIONS_DB, else the settings' file).

    The local workspace, with the opening balance of the settings, is made in the settings'
    own file on first use, and in another ledger by its first charge there (`charges_local`:
    `score` or `decide` without `--workspace`), never before: a dry run, or a command stopped
    before it charged, would leave a ledger holding decisions nobody paid for. `must_exist`: a
    named file that is not there is refused (a mistyped --db would otherwise start an empty
    ledger)."""
    path, own_file = ledger_location(settings, db)
    if must_exist and not own_file and not path.exists():
        raise UsageError(
            f"no ledger at {path}: check --db (or DECISIONS_DB), or make one with "
            f"`decisions workspace create NAME --balance N --db {path}`"
        )
    local = Workspace(settings.ledger.workspace, settings.ledger.initial_balance)
    ledger = SqliteLedger(
        path,
        stale_in_flight_s=stale_in_flight_s,
        opened_by_first_charge=local if charges_local and not own_file else None,
    )
    if own_file:
        ledger.ensure_workspace(local.name, local.balance)
    return ledger


def _roll_back(db: sqlite3.Connection) -> None:
    if db.in_transaction:
        with suppress(sqlite3.Error):  # SQLite rolled it back itself (a full disk can do that)
            db.execute("ROLLBACK")


def first_charge_note(ledger: SqliteLedger) -> str | None:
    """What to tell the user of a named ledger whose first charge opens the local workspace
    in it (a new file: perhaps a mistyped --db; another's ledger: perhaps no --workspace)."""
    opened = ledger.opens_on_first_charge()
    if opened is None:
        return None
    return (
        f"decisions: note: {ledger.path} holds no workspace {opened.name!r}: the first charge "
        f"opens it there, with {opened.balance:,} decisions. If another ledger (--db, "
        "DECISIONS_DB) or another workspace (--workspace) was meant, stop and run again with it"
    )


def _begin(db: sqlite3.Connection, *, waited_s: float) -> None:
    """BEGIN IMMEDIATE: LedgerBusy if the write lock stays taken for `waited_s`."""
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY:
            raise
        raise LedgerBusy(
            f"the ledger stayed locked by another process for {waited_s:g} s; try again"
        ) from exc
