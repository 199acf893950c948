"""SQLite connections for the ledger's stores: one per thread, WAL mode, errors named."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

from pipeline.errors import LedgerUnavailable, UsageError

BUSY_TIMEOUT_MS = 60_000  # how long a write waits for another connection's transaction
# How long a connection opening a new database waits for another one making it WAL: SQLite
# answers "database is locked" at once there (no busy handler: two readers both wanting to
# write would deadlock), which two runs started at the same instant on a new file met.
WAL_SWITCH_WAIT_S = 10.0
# The write-ahead log grows while a long read (a backup, a report) keeps it from starting over,
# and SQLite keeps the file at its largest after: 200 MB after a 15 s read under load (QA 61).
# Past this size, it is cut back each time it starts over.
WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024


class ThreadConnections:
    """A connection per thread to one database file (sqlite3 objects must stay in their thread).

    `get(waits=False)` is a second connection of the thread that never waits for a lock held by
    another (busy timeout 0): setting the busy timeout to 0 and back around one transaction
    costs two statements, about 26 us of a 1.4 ms request."""

    def __init__(
        self, path: Path, *, synchronous: str = "FULL", busy_timeout_ms: int = BUSY_TIMEOUT_MS
    ) -> None:
        self.path = path.absolute()
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._identity: tuple[int, int] | None = None  # (device, inode) of the file, once opened

    def check_file(self, undone: str) -> None:
        """LedgerUnavailable (saying `undone`) if the database's path no longer leads to the
        file first opened (deleted, moved or replaced while in use: what is written to a file
        nobody will open again is lost)."""
        if self._identity is not None and _identity(self.path) != self._identity:
            raise _moved(undone)

    def get(self, *, waits: bool = True) -> sqlite3.Connection:
        name = "waiting" if waits else "not_waiting"
        db = getattr(self._local, name, None)
        if db is None:
            db = self._open(self.busy_timeout_ms if waits else 0)
            setattr(self._local, name, db)
        return db

    def _open(self, busy_timeout_ms: int) -> sqlite3.Connection:
        # The first connection may make the file; a later one (another thread's) must find it.
        made = self._identity is None
        try:
            db = sqlite3.connect(
                self.path if made else f"{self.path.as_uri()}?mode=rw",
                timeout=busy_timeout_ms / 1000,
                isolation_level=None,
                uri=not made,
            )
            _switch_to_wal(db)
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
            db.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            if not made:
                raise _moved() from exc
            raise UsageError(f"cannot open the ledger database {self.path}: {exc}") from exc
        if made:
            self._identity = _identity(self.path)
        return db

    def close(self) -> None:
        """Close this thread's connections."""
        for name in ("waiting", "not_waiting"):
            db = getattr(self._local, name, None)
            if db is not None:
                db.close()
                setattr(self._local, name, None)


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`, None if there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


# SQLite's primary result codes of a ledger that cannot be written: READONLY, IOERR, FULL,
# CANTOPEN (an extended code carries the primary one in its low byte)
_CANNOT_WRITE = {8, 10, 13, 14}


def cannot_write(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF in _CANNOT_WRITE


def unwritable(exc: sqlite3.OperationalError, undone: str) -> LedgerUnavailable:
    """What a write the ledger could not take (`cannot_write`) says: why, and `undone`."""
    return LedgerUnavailable(
        f"the ledger cannot be written ({exc}); {undone}: try again once its disk has room "
        "(or its file can be written)"
    )


def _moved(undone: str = "nothing was written") -> LedgerUnavailable:
    return LedgerUnavailable(
        f"the ledger's file was moved, deleted or replaced while in use; {undone}: put it "
        "back in its place (or restart with the new one)"
    )


def _switch_to_wal(db: sqlite3.Connection) -> None:
    """WAL mode (kept in the file: a no-op once set), tried again while another connection is
    switching a new file to it (see WAL_SWITCH_WAIT_S)."""
    deadline = time.monotonic() + WAL_SWITCH_WAIT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)
