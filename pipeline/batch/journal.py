"""The run journal: what was asked, what was sent, what came back, so nothing is paid twice.

One journal per job (an input file scored into one workspace through one scorer), in a
SQLite file in WAL mode. Every distinct request of the file has a row keyed by its
fingerprint (sha256 of the normalised request and the scorer's version), with its idempotency
key and its state:

    planned -> sent -> done | failed          (skipped rows go back to planned)

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
    state TEXT NOT NULL CHECK (state IN ('planned', 'sent', 'done', 'failed')),
    batch_key TEXT,
    cost INTEGER NOT NULL,
    result_file TEXT,
    verdict TEXT,
    scored_at REAL,
    updated_at REAL NOT NULL
);
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
        wanted = fingerprints.unique().to_list()
        rows: list[tuple] = []
        for start in range(0, len(wanted), 20_000):
            part = wanted[start : start + 20_000]
            self._db.execute(
                "CREATE TEMP TABLE IF NOT EXISTS wanted (fingerprint TEXT PRIMARY KEY)"
            )
            self._db.execute("DELETE FROM wanted")
            self._db.executemany("INSERT OR IGNORE INTO wanted VALUES (?)", ((f,) for f in part))
            rows += self._db.execute(
                "SELECT r.fingerprint, r.idempotency_key, r.state, r.batch_key, r.result_file,"
                " r.scored_at FROM requests r JOIN wanted w USING (fingerprint)"
            ).fetchall()
        return pl.DataFrame(rows, schema=STATE_SCHEMA, orient="row")

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

    def plan(self, rows: pl.DataFrame) -> None:
        """Record new requests (fingerprint, idempotency_key, cost) as planned."""
        now = time.time()
        with self._transaction() as db:
            db.executemany(
                "INSERT INTO requests (fingerprint, idempotency_key, state, cost, updated_at)"
                " VALUES (?, ?, 'planned', ?, ?) ON CONFLICT (fingerprint) DO UPDATE SET"
                " idempotency_key = excluded.idempotency_key, state = 'planned',"
                " cost = excluded.cost, batch_key = NULL, updated_at = excluded.updated_at",
                (
                    (f, k, c, now)
                    for f, k, c in rows.select("fingerprint", "idempotency_key", "cost").iter_rows()
                ),
            )

    def mark_sent(self, fingerprints: list[str], batch_key: str) -> None:
        """Written before the requests leave: from here on a crash leaves them in doubt."""
        now = time.time()
        with self._transaction() as db:
            db.executemany(
                "UPDATE requests SET state = 'sent', batch_key = ?, updated_at = ?"
                " WHERE fingerprint = ?",
                ((batch_key, now, f) for f in fingerprints),
            )

    def record(self, answers: pl.DataFrame) -> None:
        """Store the answers (fingerprint + result columns + status), then move the states.

        scored and rejected rows become done (their answer is final), skipped rows planned
        again (nothing was charged), failed rows failed (retried under the same key later).
        """
        if answers.is_empty():
            return
        final = answers.filter(pl.col("status").is_in(["scored", "rejected"]))
        file_name = None
        now = time.time()
        if not final.is_empty():
            file_name = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}.parquet"
            target = self.results_dir / file_name
            temporary = target.with_suffix(".tmp")
            final.with_columns(scored_at=pl.lit(now)).write_parquet(temporary)
            temporary.replace(target)
        states = answers.select(
            "fingerprint",
            pl.col("verdict"),
            state=pl.col("status").replace_strict(
                {"scored": "done", "rejected": "done", "skipped": "planned", "failed": "failed"}
            ),
        )
        with self._transaction() as db:
            db.executemany(
                "UPDATE requests SET state = ?, result_file = CASE WHEN ? = 'done' THEN ?"
                " ELSE result_file END, verdict = ?, scored_at = CASE WHEN ? = 'done' THEN ?"
                " ELSE scored_at END, updated_at = ? WHERE fingerprint = ?",
                (
                    (state, state, file_name, verdict, state, now, now, fingerprint)
                    for fingerprint, verdict, state in states.iter_rows()
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
