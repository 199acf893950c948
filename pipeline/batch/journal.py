"""The run journal: what was asked, what was sent, what came back, so nothing is paid twice.

One journal per job (an input file scored into one workspace through one scorer), in a
SQLite file in WAL mode. Every distinct request of the file has a row keyed by its
fingerprint (sha256 of the normalised request and the scorer's version), with its idempotency
key and its state:

    (new) -> sent -> done | failed            (a skipped row was never sent: it stays new)

`sent` is written before a request leaves and `done` after its answer, so after a crash the
rows in `sent` are exactly the ones in doubt: they are sent again under the same idempotency
key, and the ledger or the service replays the first answer instead of charging again. The
answers themselves are kept beside the database as Parquet files (one per recorded batch,
written before the rows are marked done); a row's `result_file` names the file that holds
its answer.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline.errors import UsageError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    fingerprint TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('sent', 'done', 'failed')),
    batch_key TEXT,
    cost INTEGER NOT NULL,
    result_file TEXT,
    scored_at REAL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_by_batch ON requests(batch_key);
CREATE TABLE IF NOT EXISTS row_verdicts (
    row_number INTEGER PRIMARY KEY,
    verdict TEXT
);
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value TEXT
);
"""

STATE_SCHEMA: dict[str, pl.DataType] = {
    "fingerprint": pl.String(),
    "idempotency_key": pl.String(),
    "state": pl.String(),
    "batch_key": pl.String(),
    "result_file": pl.String(),
    "scored_at": pl.Float64(),
}


def journal_path(cache_dir: Path, input_path: Path, target: str) -> Path:
    """The journal of a job: the same input file scored for the same target (workspace/URL)."""
    job = f"{input_path.resolve()}\x1f{target}".encode()
    name = f"{input_path.stem[:40]}-{hashlib.sha256(job).hexdigest()[:12]}.journal"
    return cache_dir / name


@dataclass(frozen=True)
class JournalLookup:
    """The journal's view of this run's requests, one row per fingerprint it knows."""

    states: pl.DataFrame  # STATE_SCHEMA


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.results_dir = self.path.with_suffix(".results")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.results_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise UsageError(f"cannot open the run journal {self.path}: {exc}") from exc
        self.journal_id = self._meta("journal_id") or self._set_meta("journal_id", uuid.uuid4().hex)

    def close(self) -> None:
        self._db.close()

    def _meta(self, name: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else row[0]

    def _set_meta(self, name: str, value: str) -> str:
        self._db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, value))
        return value

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- runs ---------------------------------------------------------------------------------

    def open_run(self) -> str | None:
        """The input fingerprint of a run that started and did not finish, if any."""
        return self._meta("open_run")

    def start_run(self, input_fingerprint: str) -> None:
        self._set_meta("open_run", input_fingerprint)

    def finish_run(self) -> None:
        self._db.execute("DELETE FROM meta WHERE name = 'open_run'")

    # -- reading ------------------------------------------------------------------------------

    def states(self, fingerprints: pl.Series) -> pl.DataFrame:
        """STATE_SCHEMA rows for the fingerprints the journal knows (others are absent)."""
        cursor = self._db.execute(
            "SELECT fingerprint, idempotency_key, state, batch_key, result_file, scored_at"
            " FROM requests"
        )
        known = pl.DataFrame(cursor.fetchall(), schema=STATE_SCHEMA, orient="row")
        return known.join(
            fingerprints.unique().to_frame("fingerprint"), on="fingerprint", how="semi"
        )

    def results(self, done: pl.DataFrame) -> pl.DataFrame:
        """The stored answers of `done` rows (fingerprint, result_file): fingerprint + columns."""
        frames = []
        for file_name, group in done.group_by("result_file"):
            stored = pl.read_parquet(self.results_dir / str(file_name[0]))
            frames.append(stored.join(group.select("fingerprint"), on="fingerprint", how="semi"))
        if not frames:
            return pl.DataFrame()
        return pl.concat(frames, how="vertical_relaxed").unique("fingerprint", keep="last")

    def previous_verdicts(self) -> pl.DataFrame:
        rows = self._db.execute("SELECT row_number, verdict FROM row_verdicts").fetchall()
        return pl.DataFrame(
            rows, schema={"row_number": pl.Int64, "old_verdict": pl.String}, orient="row"
        )

    # -- writing ------------------------------------------------------------------------------

    def mark_sent(self, rows: pl.DataFrame, batch_key: str) -> None:
        """Written before the requests leave (fingerprint, idempotency_key, cost per row): from
        here on a crash leaves them in doubt, to be resent under the same keys."""
        now = time.time()
        with self._transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO requests (fingerprint, idempotency_key, state, batch_key,"
                " cost, updated_at) VALUES (?, ?, 'sent', ?, ?, ?)",
                (
                    (f, k, batch_key, c, now)
                    for f, k, c in rows.select("fingerprint", "idempotency_key", "cost").iter_rows()
                ),
            )

    def record(self, answers: pl.DataFrame, batch_key: str) -> None:
        """Store a batch's answers (fingerprint + result columns + status), then its states.

        scored and rejected rows become done (their answer is final); skipped rows are
        forgotten (nothing was charged: they are new again next run); failed rows stay in
        doubt as failed, to be resent under the same key.
        """
        if answers.is_empty():
            return
        final = answers.filter(pl.col("status").is_in(["scored", "rejected"]))
        now = time.time()
        file_name = None
        if not final.is_empty():
            file_name = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}.parquet"
            target = self.results_dir / file_name
            temporary = target.with_suffix(".tmp")
            final.with_columns(scored_at=pl.lit(now)).write_parquet(temporary)
            temporary.replace(target)
        others = answers.filter(~pl.col("status").is_in(["scored", "rejected"]))
        with self._transaction() as db:
            db.execute(
                "UPDATE requests SET state = 'done', result_file = ?, scored_at = ?,"
                " updated_at = ? WHERE batch_key = ?",
                (file_name, now, now, batch_key),
            )
            db.executemany(
                "DELETE FROM requests WHERE fingerprint = ?",
                (
                    (f,)
                    for (f,) in others.filter(pl.col("status") == "skipped")
                    .select("fingerprint")
                    .iter_rows()
                ),
            )
            db.executemany(
                "UPDATE requests SET state = 'failed', result_file = NULL, scored_at = NULL,"
                " updated_at = ? WHERE fingerprint = ?",
                (
                    (now, f)
                    for (f,) in others.filter(pl.col("status") == "failed")
                    .select("fingerprint")
                    .iter_rows()
                ),
            )

    def save_verdicts(self, verdicts: pl.DataFrame) -> None:
        """This run's verdict of every row (row_number, verdict), for the next run's changes."""
        with self._transaction() as db:
            db.execute("DELETE FROM row_verdicts")
            db.executemany(
                "INSERT INTO row_verdicts (row_number, verdict) VALUES (?, ?)",
                verdicts.select("row_number", "verdict").iter_rows(),
            )

    def reset(self) -> None:
        """--fresh: forget every answer (charges already made stay in the ledger)."""
        with self._transaction() as db:
            db.execute("DELETE FROM requests")
            db.execute("DELETE FROM row_verdicts")
        for stale in self.results_dir.glob("*.parquet"):
            stale.unlink()


@contextmanager
def job_lock(journal_file: Path) -> Iterator[None]:
    """One run of a job at a time: a second run (a slow nightly, a double cron) stops at once."""
    lock_path = journal_file.with_suffix(".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise UsageError(
                f"another run of this job is in progress ({holder}); its journal is "
                f"{journal_file}. Wait for it to finish."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
