"""SQLite connections for the ledger's stores: one per thread, WAL mode, errors named."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from pipeline.errors import UsageError

BUSY_TIMEOUT_MS = 60_000  # how long a write waits for another connection's transaction


class ThreadConnections:
    """A connection per thread to one database file (sqlite3 objects must stay in their thread)."""

    def __init__(
        self, path: Path, *, synchronous: str = "FULL", busy_timeout_ms: int = BUSY_TIMEOUT_MS
    ) -> None:
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def get(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(
                    self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None
                )
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(f"PRAGMA synchronous={self.synchronous}")
                db.execute("PRAGMA foreign_keys=ON")
            except sqlite3.Error as exc:
                raise UsageError(f"cannot open the ledger database {self.path}: {exc}") from exc
            self._local.db = db
        return db

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
