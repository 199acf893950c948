"""The run journal: what was asked, what was sent, what came back, so nothing is paid twice.

One journal per job (an input file scored into one workspace through one scorer). Requests
leave in batches; the journal is a SQLite file in WAL mode holding the state of every batch,
plus Parquet files beside it holding the rows of each batch:

    (new) -> sent -> done          per batch, in SQLite (synchronous=FULL)
    <batch>.<crc>.rows.parquet     fingerprint, idempotency key and cost of every row sent
                                   (`.unsent.parquet` until the batch is recorded sent)
    <batch>.<crc>.answers.parquet  every row's answer: status and result columns

(<crc>: the CRC-32 of the file's bytes, checked before the file is believed; see `_write`.)

A request's own state follows from its batch and its answer: `sent` (its batch left, no
answer recorded: in doubt), `done` (scored or rejected: final), `failed` (retries ran out:
in doubt), or new (never sent, or skipped for lack of budget). The rows file is written and
the batch marked `sent` before the requests leave, and the answers file is written before the
batch is marked `done`; so after a crash the rows in doubt are exactly known, and they are
sent again under the same idempotency keys: the ledger or the service replays the first
charge instead of taking a second.

Why not one SQLite row per request: measured here, inserting and updating a million keyed
rows costs 16-35 s, several times the whole rest of a million-row run; Parquet files per
batch cost a second or two. Once a finished job's batches hold more than twice the rows worth
keeping (answers paid again leave their old copies), or many batches, they are compacted into one.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sqlite3
import time
import uuid
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, NamedTuple

import polars as pl

from pipeline.batch.job_files import legacy_folder, results_folder
from pipeline.batch.scorers.base import COMPACTED_BATCH
from pipeline.errors import OutputError, PipelineError, UsageError
from pipeline.io.atomic import atomic_path, fsync_path
from pipeline.ledger.base import COST_WITH_REASONING

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    batch_key TEXT PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('sent', 'done')),
    rows_file TEXT NOT NULL,
    answers_file TEXT,
    rows INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
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
# The column of verdicts.parquet holding listing keys: named after the polars version whose
# hash made them, so keys of another version are never compared (polars.Expr.hash is stable
# within a version only).
LISTING_KEY = f"listing_polars_{pl.__version__}"
_ROWS_SCHEMA = {"fingerprint": pl.String(), "idempotency_key": pl.String(), "cost": pl.Int64()}
_ANSWERED_SCHEMA = {"status": pl.String(), "scored_at": pl.Float64()}  # of an answers file
_FINAL = ("scored", "rejected")
_LAST_RESULTS, _LAST_REJECTS = "last-run.results.parquet", "last-run.rejects.parquet"
# A recorded batch's rows file, and one written for a batch not recorded yet (see `mark_sent`)
_ROWS, _UNSENT = ".rows.parquet", ".unsent.parquet"
# Reading a journal costs one file pair per batch, and every row they hold: past so many
# batches, or once they hold more rows than so many for each worth keeping, a finished run
# compacts them (see `Journal._outgrown`).
COMPACT_AFTER_BATCHES = 150
COMPACT_PAST_ROWS_PER_ROW_KEPT = 2


class LastRun(NamedTuple):
    """A finished run kept to answer again (see `Journal.finish_run`)."""

    key: str  # the input's bytes, the options and the scorer
    oldest_answer: float  # when its oldest answer was scored
    notes: list[tuple[str, object]]  # what its summary said of how the file was read
    checksums: str  # of its files, as `write_last_run` gave them


class Journal:
    def __init__(self, path: Path, *, verdicts: Path | None = None) -> None:
        """`verdicts`: where the listings' verdict history lives, when it should outlast the
        journal (one per formula and benchmark version: new benchmarks are exactly when
        verdicts change); the journal remembers it, so the job's runs that name the journal
        (--journal) keep the same history. By default beside the answers."""
        self.path = Path(path)
        self.files = results_folder(self.path)
        self.verdicts_path = self.files / "verdicts.parquet"
        if self.files.exists() and not self.files.is_dir():
            raise UsageError(
                f"{self.path}: its files' folder {self.files} is a file (another job's "
                "journal?); give this job another --journal"
            )
        legacy = legacy_folder(self.path)
        moving_in = not self.files.exists() and self.path.exists() and legacy.is_dir()
        if not moving_in:
            try:
                self.files.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(
                    f"cannot make the run journal's folder {self.files} ({exc.strerror}); "
                    "give --journal a path in a folder this run can write"
                ) from None
        try:
            self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise UsageError(f"cannot open the run journal {self.path}: {exc}") from exc
        if moving_in:
            self._move_in(legacy)
        self._checked: dict[str, bool] = {}  # file name: intact (see _intact)
        self._settle_unsent_rows()
        self._remove_folded()
        self.taken_back = 0 if moving_in else self._take_back_batches()
        self.journal_id = self._meta("journal_id") or self._set_meta("journal_id", uuid.uuid4().hex)
        self.verdicts_path = self._verdict_history(verdicts)
        # Answers files, and the next batch's rows file, are written by these threads while a
        # batch is scored (two: one alone kept the scoring loop waiting a third of a second per
        # million rows); a batch is marked done (on the caller's thread, which owns the
        # database) once its answers file is.
        self._writer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="journal")
        self._recording: list[tuple[Future[str], str, float]] = []
        self._sent_any = False  # whether a batch was marked sent since the journal was opened

    def _take_back_batches(self) -> int:
        """Batches whose files are in the journal's folder but not in its database, put back;
        how many. The database lost its record of them (deleted, emptied, or its -wal file
        removed after a crash): the rows sent would go again under new keys, paid twice.
        Each comes back as sent, with its latest answers file: rows answered are done, the
        others in doubt, resent under their keys and replayed, not paid again. A rows file
        written for a batch that was never recorded (written ahead, say) is named apart and
        not taken (`_settle_unsent_rows`); one an earlier version left under a sent batch's
        name is: embedded, the ledger says it was never charged, and its rows are new work."""
        known = {
            name
            for names in self._db.execute("SELECT rows_file, answers_file FROM batches")
            for name in names
            if name is not None
        }
        known_batches = {key for (key,) in self._db.execute("SELECT batch_key FROM batches")}
        latest: dict[tuple[str, str], Path] = {}  # (batch key, kind): its newest file
        for path in sorted(self.files.glob("*.parquet"), key=_written_at):
            kind = path.name.rsplit(".", 2)[-2]
            key = _batch_key_of(path.name)
            if kind in ("rows", "answers") and path.name not in known and key not in known_batches:
                latest[key, kind] = path
        taken = [(key, path) for (key, kind), path in latest.items() if kind == "rows"]
        for batch_key, rows_path in taken:
            answers_path = latest.get((batch_key, "answers"))
            try:
                rows = pl.scan_parquet(rows_path).select(pl.len()).collect().item()
            except (OSError, pl.exceptions.PolarsError):
                rows = 0  # damaged: `states` says so, naming it
            written = _written_at(rows_path)
            self._db.execute(
                "INSERT INTO batches (batch_key, state, rows_file, answers_file, rows, created_at,"
                " updated_at) VALUES (?, 'sent', ?, ?, ?, ?, ?)",
                (batch_key, rows_path.name, answers_path and answers_path.name, rows, written,
                 written),
            )  # fmt: skip
        return len(taken)

    def _settle_unsent_rows(self) -> None:
        """Rows files a run left under their unsent name (`write_rows`), killed before their
        batch was recorded (`mark_sent`) or after, before the rename. Recorded: renamed, as
        `mark_sent` would have. Not: removed, as their batch never left (nothing of it was
        charged; its rows are new work); left, one would be taken for a sent batch whose
        record the database lost (QA round 33). The job's lock keeps away any run that could
        still be sending them."""
        recorded = {name for (name,) in self._db.execute("SELECT rows_file FROM batches")}
        for left in self.files.glob(f"*{_UNSENT}"):
            if _as_sent(left.name) in recorded:
                self._name_as_sent(left.name)
            else:
                left.unlink(missing_ok=True)

    def _move_in(self, legacy: Path) -> None:
        """A journal of an earlier version: copy the files of its batches from the folder it
        may share with another journal into its own (the new folder appears whole, or not at
        all: a crash midway copies again). The last run's output and the verdict history,
        which the other journal may have overwritten there, are not taken: the next run reads
        the file again (its answers reused, free) and keeps its verdicts from then on."""
        names = {
            name
            for row in self._db.execute("SELECT rows_file, answers_file FROM batches")
            for name in row
            if name is not None and (legacy / name).is_file()
        }
        for left in self.files.parent.glob(f"{glob.escape(self.files.name)}.*.tmp"):
            shutil.rmtree(left, ignore_errors=True)  # a copy a crash cut short
        staging = self.files.with_name(f"{self.files.name}.{uuid.uuid4().hex[:8]}.tmp")
        staging.mkdir(parents=True)
        for name in names:
            with open(staging / name, "wb") as target, open(legacy / name, "rb") as source:
                shutil.copyfileobj(source, target)
                target.flush()
                os.fsync(target.fileno())
        os.rename(staging, self.files)
        fsync_path(self.files.parent)  # the rename itself survives a power cut
        self._db.execute("DELETE FROM meta WHERE name IN ('last_run', 'last_run_notes')")

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._writer.shutdown()
            self._db.close()

    def _verdict_history(self, given: Path | None) -> Path:
        """`given`, remembered; else the history a run of this job gave before (QA 33: runs
        naming the default journal kept another history, and listed changes against the
        wrong night); else the one beside the answers."""
        if given is not None:
            given = given.resolve()
            if self._meta("verdict_history") != str(given):
                self._set_meta("verdict_history", str(given))
            return given
        remembered = self._meta("verdict_history")
        return Path(remembered) if remembered else self.verdicts_path

    def _meta(self, name: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else row[0]

    def _set_meta(self, name: str, value: str) -> str:
        self._db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, value))
        return value

    def _write(self, frame: pl.DataFrame, name: str) -> str:
        """Write a batch's Parquet file completely (fsynced) before the database refers to it;
        its name: `name` with the CRC-32 of its bytes before the kind (`x.rows.parquet` ->
        `x.1a2b3c4d.rows.parquet`). A damaged file can decode without an error, as other
        answers or other keys (paid again): the name lets `_intact` tell before it is read."""
        stem, kind = name.split(".", 1)
        # Uncompressed: the checksum, not a decoding error, is what finds damage, and lz4
        # cost 0.5-0.6 s of CPU a million rows (the files are 30% larger).
        named = f"{stem}.{self._put(frame, name, compression='uncompressed'):08x}.{kind}"
        os.replace(self.files / name, self.files / named)  # (a crash between: a stray file)
        self._checked[named] = True  # as written (a borderline run reads it again at once)
        return named

    def _put(
        self, frame: pl.DataFrame, name: str, *, compression: Literal["lz4", "uncompressed"] = "lz4"
    ) -> int:
        """`frame` written completely (fsynced) as the file `name`; the CRC-32 of its bytes.
        (lz4: several times faster than zstd.) JournalError if it cannot be."""
        with _writing_journal(self.files / name), atomic_path(self.files / name) as temporary:
            frame.write_parquet(temporary, compression=compression)
            return _crc32(temporary)

    def _copy(self, source: Path, name: str) -> int:
        """`_put` for a file that exists already: copied, fsynced, renamed into place."""
        crc = 0
        with (
            _writing_journal(self.files / name),
            atomic_path(self.files / name) as temporary,
            open(source, "rb") as reading,
            open(temporary, "wb") as writing,
        ):
            while chunk := reading.read(1 << 20):
                crc = zlib.crc32(chunk, crc)
                writing.write(chunk)
        return crc

    # -- runs ---------------------------------------------------------------------------------

    def open_run(self) -> str | None:
        """The input fingerprint of a run that started and did not finish, if any."""
        return self._meta("open_run")

    def claim_for(
        self, workspace: str, *, hint: str, record: bool = True, confirmed: bool = True
    ) -> None:
        """Record that this job's answers are paid by `workspace` (unless not `record`: a
        dry run), as the ledger or the service says (`confirmed`), or as the run's options
        name it for a service that cannot say; UsageError if another workspace paid for them
        (not this one's to reuse)."""
        owner = self._meta("workspace")
        if owner is not None and owner != workspace:
            raise UsageError(
                f"{self.path}: this job's answers were paid by workspace {owner!r}, and this "
                f"run would pay from {workspace!r}; give each workspace its own journal: "
                f"{hint}"
            )
        if record and owner is None:
            self._set_meta("workspace", workspace)
        if record and confirmed and self._meta("workspace_confirmed") is None:
            self._set_meta("workspace_confirmed", "1")

    def paid_by(self) -> tuple[str | None, bool]:
        """The workspace recorded as paying for this job (`claim_for`), if any, and whether
        the ledger or the service confirmed it."""
        return self._meta("workspace"), self._meta("workspace_confirmed") is not None

    def service(self) -> str | None:
        """The service address this job's requests went to (`claim_service`), if recorded."""
        return self._meta("service_address") or self._meta("service")

    def claim_service(
        self, address: str, *, hint: str, record: bool = True, host: str | None = None
    ) -> None:
        """Record the service address this job's requests go to (unless not `record`: a dry
        run). The address is part of every request's fingerprint and idempotency key, so
        requests sent or answered through another address (the same service as `localhost`
        and as 127.0.0.1, or another service) would all be paid again, and another service
        behind the same host would be handed answers it never gave: UsageError while the
        journal holds any. `host`: the address without its path, as versions before
        2026-11-25 recorded it (under another name): such a record is taken for any path on
        that host, and replaced by the whole address."""
        exact = self._meta("service_address")
        earlier = exact or self._meta("service")
        allowed = (address,) if exact is not None else (address, host)
        if earlier is not None and earlier not in allowed and self._batches():
            raise UsageError(
                f"{self.path}: this job's requests went to {earlier}, and this run would send "
                f"them to {address}: every one, those already paid too, would be paid again "
                f"(the address is part of each request's idempotency key). {hint}"
            )
        if record and exact != address:
            self._set_meta("service_address", address)

    def start_run(self, input_fingerprint: str) -> None:
        if self.open_run() != input_fingerprint:  # not resuming it: a run of its own begins
            self._set_meta("open_run_since", repr(time.time()))
        self._set_meta("open_run", input_fingerprint)

    def scored_by(self) -> str | None:
        """The scorer version (formulas and tables, or the service) of the job's last run that
        scored here; None before any, or for a journal of a version before 2026-11-25."""
        return self._meta("scored_by")

    def remember_scorer(self, version: str) -> None:
        self._set_meta("scored_by", version)

    def open_run_since(self) -> float | None:
        """When the unfinished run began (its first start, however often it was resumed): the
        answers recorded before it were paid by earlier runs. None for a run begun by a
        version before 2026-11-25, which did not record it."""
        return _number(self._meta("open_run_since"))

    def night_run_since(self) -> float | None:
        """When the earliest of the job's nightly runs that no night's record may account for
        began, as `mark_night_run` last set it (see `NightRun.stopped_runs_spent`)."""
        return _number(self._meta("night_run_since"))

    def mark_night_run(self, since: float) -> None:
        self._set_meta("night_run_since", repr(since))

    def night_first_run_since(self) -> float | None:
        """When the first of the job's nightly runs of the night `mark_night_first_run` last
        named began (None before any, or for a journal of a version before 2026-11-25)."""
        return _number(self._meta("night_first_run_since"))

    def mark_night_first_run(self, since: float) -> None:
        self._set_meta("night_first_run_since", repr(since))

    def finish_run(self, freshness_days: float, *, keep: LastRun | None = None) -> None:
        """Close the run; once the batches have outgrown what they hold (`_outgrown`), fold
        them into one file first, keeping the answers this run recorded whatever their age.
        `keep`: the run written by `write_last_run`, answered again for its key from now on,
        in the transaction that closes the run (a run stopped before it is resumed, its output
        the uninterrupted one; after it, finished)."""
        began = self.open_run_since()
        longest = self._longest_freshness(freshness_days)
        if self._outgrown(_kept_after(longest, began), began):
            self.compact(longest, run_began=began)
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if keep is not None:
                self._keep_last_run(keep)
            self._db.execute("DELETE FROM meta WHERE name IN ('open_run', 'open_run_since')")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _longest_freshness(self, freshness_days: float) -> float:
        """The longest freshness window any run of this job has used, this one's included:
        compaction keeps what that window keeps. (QA 35: a night run with a window of 0 days
        compacted away the answers of rows not in its file, which the job's usual 30-day
        nights then paid again.)"""
        longest = max(freshness_days, _number(self._meta("longest_freshness_days")) or 0.0)
        if self._meta("longest_freshness_days") != repr(longest):
            self._set_meta("longest_freshness_days", repr(longest))
        return longest

    def _outgrown(self, fresh_after: float, run_began: float | None = None) -> bool:
        """Whether the batches are worth compacting: past COMPACT_AFTER_BATCHES, or holding
        more than COMPACT_PAST_ROWS_PER_ROW_KEPT rows for each that compaction would keep.
        Answers paid again once stale stay in their batches, and every run reads them all: a
        nightly job that re-pays its 300,000 rows now and then grew from 86 MB to 400 MB over
        35 nights, and the memory of the same small night from 830 MiB to 2,000 (QA round 33),
        well short of 150 batches. Decided from the database, and, after a run that sent
        rows (one that sent none added nothing since the last decision), from the three
        columns of the answers files `states` reads at the start of a run."""
        batches = self._batches()
        if len(batches) <= 1:
            return False
        if len(batches) > COMPACT_AFTER_BATCHES:
            return True
        if not self._sent_any:
            return False
        held = dict(self._db.execute("SELECT batch_key, rows FROM batches").fetchall())
        if run_began is not None:
            # This run's batches hold distinct requests it just answered, all worth keeping:
            # when they are half the rows or more (a first run), no file need be read.
            sent_now = self._db.execute(
                "SELECT COALESCE(SUM(rows), 0) FROM batches WHERE created_at >= ?", (run_began,)
            ).fetchone()[0]
            if sum(held.values()) <= COMPACT_PAST_ROWS_PER_ROW_KEPT * sent_now:
                return False
        worth = self._rows_worth_keeping(batches, held, fresh_after)
        return sum(held.values()) > COMPACT_PAST_ROWS_PER_ROW_KEPT * worth

    def _rows_worth_keeping(
        self,
        batches: list[tuple[str, str, str, str | None, float]],
        held: dict[str, int],
        fresh_after: float,
    ) -> int:
        """About what `compact` would keep of `batches` (`held`: the rows of each): one row
        per fingerprint with a final answer recorded since `fresh_after`, and the batches that
        may hold rows in doubt, whole (sent and unanswered, a row failed, answers damaged).
        A file that cannot be read: every row counts (no compaction on a guess)."""
        answered = [a if a is not None and self._intact(a) else None for _, _, _, a, _ in batches]
        try:
            answers = self._scan_each(answered, ["fingerprint", *_ANSWERED_SCHEMA])
        except (OSError, pl.exceptions.PolarsError):
            return sum(held.values())
        fresh = pl.col("status").is_in(_FINAL) & (pl.col("scored_at") >= fresh_after)
        kept = answers.filter(fresh)["fingerprint"].hash().n_unique()
        failed = set(answers.filter(pl.col("status") == "failed")["_order"].to_list())
        doubtful = [
            key
            for order, (key, state, *_) in enumerate(batches)
            if state != "done" or answered[order] is None or order in failed
        ]
        return kept + sum(held[key] for key in doubtful)

    # -- reading ------------------------------------------------------------------------------

    def holds_answers(self) -> bool:
        """Whether any batch has its answers recorded (a first run's journal has none)."""
        self.flush()
        found = self._db.execute("SELECT 1 FROM batches WHERE answers_file IS NOT NULL LIMIT 1")
        return found.fetchone() is not None

    def sent_at(self, batch_key: str) -> float | None:
        """When the batch was last sent (None: the journal does not hold it)."""
        self.flush()
        found = self._db.execute(
            "SELECT created_at FROM batches WHERE batch_key = ?", (batch_key,)
        ).fetchone()
        return None if found is None else float(found[0])

    def holds_batches(self) -> bool:
        """Whether any batch was sent, answered or still in doubt (a new job's journal has none)."""
        self.flush()
        return self._db.execute("SELECT 1 FROM batches LIMIT 1").fetchone() is not None

    def sent_since(self, since: float) -> int:
        """The decisions the batches sent since `since` (a Unix time) asked for: what runs
        that left no record of their spend (killed with kill -9) spent at most. A batch resent
        since counts whole; a rows file that cannot be read counts each row at the highest
        cost."""
        self.flush()
        found = self._db.execute(
            "SELECT batch_key, rows_file, answers_file, rows FROM batches WHERE created_at >= ?",
            (since,),
        ).fetchall()
        # A batch a compaction made was not sent: it holds every answer still fresh, of which
        # those recorded since were sent since (QA 68: a run killed once it had compacted the
        # journal counted 1,365 for the 32 it had sent).
        folded = [
            (rows_file, answers_file)
            for key, rows_file, answers_file, _ in found
            if key.startswith(COMPACTED_BATCH) and rows_file.split(".", 1)[0] == key
            and answers_file is not None and self._intact(rows_file)
            and self._intact(answers_file)
        ]  # fmt: skip
        made = {rows_file for rows_file, _ in folded}
        sent = [(name, rows) for _, name, _, rows in found if name not in made]
        readable = [name for name, _ in sent if self._intact(name)]
        unread = sum(rows for name, rows in sent if not self._intact(name))
        asked = self._scan_each(readable, ["cost"])["cost"].sum() if readable else 0
        for rows_file, answers_file in folded:
            answered = pl.read_parquet(
                self.files / answers_file, columns=["fingerprint", "scored_at"]
            )
            costs = pl.read_parquet(self.files / rows_file, columns=["fingerprint", "cost"])
            recorded = answered.filter(pl.col("scored_at") >= since)
            asked += recorded.join(costs, on="fingerprint", how="inner")["cost"].sum()
        return int(asked) + unread * COST_WITH_REASONING

    def _batches(self) -> list[tuple[str, str, str, str | None, float]]:
        self.flush()
        return self._db.execute(
            "SELECT batch_key, state, rows_file, answers_file, created_at FROM batches"
            " ORDER BY created_at"
        ).fetchall()

    def states(self, fingerprints: pl.Series) -> pl.DataFrame:
        """STATE_SCHEMA rows, one per fingerprint of `fingerprints`, in order; a fingerprint
        the journal does not know has nulls (never sent, or skipped).

        The latest batch that holds a fingerprint decides: its answer if it has one (done,
        failed; a skipped row counts as never sent), else `sent`. Every batch's rows files are
        read in one scan, and its answers files in another: 200 batches in a tenth of a second.
        A batch's answers come in the order of its rows, which is checked, so they are put beside
        them (joined only when not); and the latest batch is looked for only when a fingerprint
        is in more than one. A million rows: 0.5 s (joins and a sort took 2.1 s).
        """
        asked = fingerprints.to_frame("fingerprint")
        batches = [self._as_stored(batch) for batch in self._batches()]
        if not batches:  # nothing known: no join of a million fingerprints with no rows
            return asked.with_columns(
                pl.lit(None, dtype).alias(c)
                for c, dtype in STATE_SCHEMA.items()
                if c != "fingerprint"
            )
        answers = self._scan_each([b[3] for b in batches], ["fingerprint", *_ANSWERED_SCHEMA])
        answered_in = [answers_file for _, _, _, answers_file, _ in batches]
        sent = pl.Series([state != "done" for _, state, *_ in batches])
        sent_at = pl.Series([created_at for *_, created_at in batches], dtype=pl.Float64)
        rows = self._scan_each(
            [rows_file for _, _, rows_file, _, _ in batches], ["fingerprint", "idempotency_key"]
        )
        rows = rows.with_columns(
            _sent=sent.gather(rows["_order"]), _at=sent_at.gather(rows["_order"])
        )
        rows = _beside(rows, answers)
        answered = pl.col("status").is_not_null() & (pl.col("status") != "skipped")
        final = pl.col("status").is_in(_FINAL)
        # A row of an answered batch with no answer of its own was not sent again when the
        # batch was (not in the file that time, or held back by the budget): still in doubt.
        # A batch being resent keeps its final answers: those rows are done.
        in_doubt = (pl.col("_sent") & ~final.fill_null(False)) | pl.col("status").is_null()
        known = rows.filter(in_doubt | answered)
        if not _each_once(known["fingerprint"]):  # in more than one batch
            # The latest: an answer by when it was recorded, a row in doubt by when its batch
            # was sent. A batch resent for a row left in doubt keeps its other rows' answers,
            # which its new send time made the latest (QA 68: answers stale by then, paid
            # again meanwhile, were paid a third time).
            latest = pl.when(in_doubt).then(pl.col("_at")).otherwise(pl.col("scored_at"))
            known = known.sort(latest.fill_null(pl.col("_at")), maintain_order=True)
            known = known.unique("fingerprint", keep="last", maintain_order=True)
        by_order = pl.DataFrame(
            {
                "batch_key": [batch_key for batch_key, *_ in batches],
                "result_file": answered_in,  # a sent batch has none
            },
            schema_overrides={"result_file": pl.String},
        )
        known = pl.concat([known, by_order[known["_order"]]], how="horizontal")
        state = (
            pl.when(in_doubt).then(pl.lit("sent"))
            .when(pl.col("status").is_in(_FINAL)).then(pl.lit("done"))
            .otherwise(pl.lit("failed"))
        )  # fmt: skip
        known = known.select(
            pl.col(c).cast(t) if c != "state" else state.alias(c) for c, t in STATE_SCHEMA.items()
        )
        return asked.join(known, on="fingerprint", how="left", maintain_order="left")

    def _as_stored(
        self, batch: tuple[str, str, str, str | None, float]
    ) -> tuple[str, str, str, str | None, float]:
        """A batch as its files say: one whose answers file is gone or damaged (a disk
        cleaned up, a copy cut short, a bit flipped) counts as sent and unanswered, so its rows
        are in doubt and go again under their keys, where the first charge is replayed, not
        paid again. A rows file gone or damaged stops the run: UsageError."""
        batch_key, _, rows_file, answers_file, created_at = batch
        self._check_rows_file(rows_file)
        if answers_file is None or self._intact(answers_file):
            return batch
        return batch_key, "sent", rows_file, None, created_at

    def _check_rows_file(self, rows_file: str) -> None:
        """UsageError if a batch's rows file is gone or damaged: without it, which keys its
        requests were paid under is not known."""
        if not self._intact(rows_file):
            raise UsageError(
                f"the run journal {self.path} has lost the rows file of a batch it sent "
                f"({self.files / rows_file}: gone or damaged): which of its requests were paid,"
                " and under which keys, is no longer known. Restore the file, or run with"
                " --fresh to score (and pay for) everything again"
            )

    def _intact(self, name: str) -> bool:
        """Whether the journal's file `name` is as it was written (see `_write`); each file is
        checked once per journal opened (its name changes with its content)."""
        intact = self._checked.get(name)
        if intact is None:
            intact = self._checked[name] = _as_written(self.files / name)
        return intact

    def _scan_each(self, names: list[str | None], columns: list[str] | None = None) -> pl.DataFrame:
        """The Parquet files `names` (None: no file) read in one scan, in order, each row with
        `_order`, the position of its file in `names` (a scan per file took five times as long).
        `columns`: those only (default: all)."""
        files = [(order, name) for order, name in enumerate(names) if name is not None]
        if not files:
            return pl.DataFrame(schema={**_ROWS_SCHEMA, **_ANSWERED_SCHEMA, "_order": pl.UInt32()})
        paths = [str(self.files / name) for _, name in files]
        wanted = pl.all() if columns is None else pl.col(columns)
        try:
            scanned = (
                pl.scan_parquet(paths, include_file_paths="_path")
                .select(wanted, _file=pl.col("_path").cast(pl.Enum(paths)).to_physical())
                .collect()
            )
        except pl.exceptions.PolarsError:  # files of other columns (written by another version)
            scans = [
                pl.scan_parquet(path).with_columns(_file=pl.lit(i)) for i, path in enumerate(paths)
            ]
            scanned = (
                pl.concat(scans, how="diagonal_relaxed").select(wanted.exclude("_file"), "_file")
                .collect()
            )  # fmt: skip
        orders = pl.Series([order for order, _ in files], dtype=pl.UInt32)
        return scanned.with_columns(_order=orders.gather(scanned["_file"])).drop("_file")

    def results(self, done: pl.DataFrame) -> pl.DataFrame:
        """The stored answers of `done` rows (fingerprint, result_file), one per row, in order:
        fingerprint + the answer's columns.

        The files are read in one scan. A fingerprint answered in one of them only is taken
        from it; one answered in several (a row scored again once its answer went stale) is
        taken from the file `done` names."""
        if done.is_empty():
            return pl.DataFrame()
        names = done["result_file"].unique(maintain_order=True).to_list()
        stored = self._scan_each(names)
        asked = done.select("fingerprint")
        if _each_once(stored["fingerprint"]):
            return asked.join(stored.drop("_order"), on="fingerprint", how="left",
                              maintain_order="left")  # fmt: skip
        asked = asked.with_columns(
            _order=done["result_file"].replace_strict(
                names, range(len(names)), return_dtype=pl.UInt32
            )
        )
        return asked.join(
            stored, on=["fingerprint", "_order"], how="left", maintain_order="left"
        ).drop("_order")

    def previous_verdicts(self, as_of: float | None = None) -> pl.DataFrame:
        """The last verdict of each listing (`listing`, `old_verdict`, `copies`: how many rows
        had that listing); empty if none was kept, or kept under another listing key (an older
        version: nothing to compare with). `as_of` (a Unix time): the history as it stood
        then, kept aside by `keep_verdicts` when a later one was kept (a night's start: every
        run of the night compares with the last night's)."""
        path = self.verdicts_path
        if as_of is not None and self.verdicts_kept_since(as_of):
            path = self._earlier_verdicts
        empty = pl.DataFrame(
            schema={"listing": pl.UInt64, "old_verdict": pl.String, "copies": pl.UInt32}
        )
        try:  # gone or damaged: tonight's verdicts are kept from here on
            stored = pl.read_parquet(path)
        except (OSError, pl.exceptions.PolarsError):
            return empty
        if LISTING_KEY not in stored.columns or "copies" not in stored.columns:
            return empty
        return stored.select(listing=LISTING_KEY, old_verdict="verdict", copies="copies")

    # -- writing ------------------------------------------------------------------------------

    def write_rows(self, rows: pl.DataFrame, batch_key: str) -> str:
        """A batch's rows file (fingerprints, keys, costs), fsynced; its name. Named unsent
        (`.unsent.parquet`) until `mark_sent` records the batch: a file written for a batch
        that never leaves (written ahead, a run killed before the batch is recorded) tells
        so, and is not taken for a sent batch the database lost (`_settle_unsent_rows`)."""
        return self._write(
            rows.select(pl.col(c).cast(t) for c, t in _ROWS_SCHEMA.items()),
            f"{_safe(batch_key)}-{uuid.uuid4().hex[:8]}{_UNSENT}",
        )

    def write_rows_ahead(self, rows: pl.DataFrame, batch_key: str) -> Future[str]:
        """`write_rows` in the background, while the batch before it is scored."""
        return self._writer.submit(self.write_rows, rows, batch_key)

    def _name_as_sent(self, rows_file: str) -> None:
        """A rows file written unsent renamed to the name its batch's record gives it (same
        bytes, same checksum), the folder fsynced: done before the requests leave, so a
        power cut after they did keeps the name the database refers to."""
        named = _as_sent(rows_file)
        if named == rows_file:
            return
        with _writing_journal(self.files / named):
            os.replace(self.files / rows_file, self.files / named)
            fsync_path(self.files)
        self._checked[named] = self._checked.pop(rows_file, True)

    def discard_rows(self, rows_file: str) -> None:
        """A rows file written ahead for a batch that did not leave as it was written."""
        (self.files / rows_file).unlink(missing_ok=True)

    def mark_sent(
        self,
        rows: pl.DataFrame,
        batch_key: str,
        rows_file: str | None = None,
        *,
        again: bool = False,
    ) -> None:
        """Before the requests leave: their fingerprints, keys and costs, and the batch `sent`.
        `rows_file`: these rows' file, already written by `write_rows` (ahead, say).

        From here on a crash leaves them in doubt, to be resent under the same keys. `again`:
        the batch is being resent (it was in doubt); its rows not among `rows` (not in this
        run's file, say) stay in it, unanswered, so they stay in doubt under their keys, and
        its answers so far are kept for `record` to add to."""
        earlier = self._batch_files(batch_key) if again else None
        if earlier is not None and earlier[0] is not None:
            kept = pl.read_parquet(self.files / earlier[0]).join(
                rows.select("fingerprint"), on="fingerprint", how="anti"
            )
            rows = pl.concat([rows.select(list(_ROWS_SCHEMA)), kept], how="vertical_relaxed")
            rows_file = None
        if rows_file is None:
            rows_file = self.write_rows(rows, batch_key)
        self._sent_any = True
        now = time.time()
        # Recorded under the name the file is given next: the record is what says the batch
        # may have left (a crash between the two: `_settle_unsent_rows` renames it).
        self._db.execute(
            "INSERT OR REPLACE INTO batches (batch_key, state, rows_file, answers_file, rows,"
            " created_at, updated_at) VALUES (?, 'sent', ?, ?, ?, ?, ?)",
            (batch_key, _as_sent(rows_file), earlier[1] if earlier else None, rows.height, now,
             now),
        )  # fmt: skip
        self._name_as_sent(rows_file)

    def forget_batch(self, batch_key: str) -> None:
        """A batch known never to have been charged: its rows count as never sent. Its files
        go too (left, they would be taken back as a batch the database lost)."""
        self.flush()
        files = self._batch_files(batch_key)
        self._db.execute("DELETE FROM batches WHERE batch_key = ?", (batch_key,))
        for name in files or ():
            if name is not None:
                (self.files / name).unlink(missing_ok=True)

    def _batch_files(self, batch_key: str) -> tuple[str | None, str | None] | None:
        """(rows file, answers file) of a batch the journal holds, or None; an answers file
        that is damaged counts as none (see `_as_stored`)."""
        self.flush()
        found = self._db.execute(
            "SELECT rows_file, answers_file FROM batches WHERE batch_key = ?", (batch_key,)
        ).fetchone()
        if found is None or found[1] is None or self._intact(found[1]):
            return found
        return found[0], None

    def record(self, answers: pl.DataFrame, batch_key: str) -> None:
        """After the answers: every row's answer (fingerprint + status + result columns), then
        the batch `done`. Scored and rejected rows are final; failed rows stay in doubt and are
        resent under the same key; skipped rows were never charged and count as new.

        The file is written in the background and the batch marked done at the next `flush`
        (the next record, any read, close): a crash before that leaves the batch `sent`, which
        is resent under its keys and replayed, not charged again."""
        self.flush()  # one batch in the background at most: memory stays one batch's worth
        if answers.is_empty():
            return
        now = time.time()
        name = f"{_safe(batch_key)}-{uuid.uuid4().hex[:8]}.answers.parquet"
        stamped = answers.with_columns(scored_at=pl.lit(now))
        earlier = self._batch_files(batch_key)
        if earlier is not None and earlier[1] is not None:  # a batch resent: add to its answers
            kept = pl.read_parquet(self.files / earlier[1]).join(
                stamped.select("fingerprint"), on="fingerprint", how="anti"
            )
            stamped = pl.concat([stamped, kept], how="diagonal_relaxed")
        written = self._writer.submit(self._write, stamped, name)
        self._recording.append((written, batch_key, now))

    def flush(self) -> None:
        """Wait for answers files being written and mark their batches done."""
        while self._recording:
            written, batch_key, now = self._recording.pop(0)
            answers_file = written.result()
            self._db.execute(
                "UPDATE batches SET state = 'done', answers_file = ?, updated_at = ?"
                " WHERE batch_key = ?",
                (answers_file, now, batch_key),
            )

    def save_verdicts(
        self, verdicts: pl.DataFrame, previous: pl.DataFrame | None = None, *, pending: bool = False
    ) -> None:
        """One row per listing (`listing`, `verdict`, `copies`) for the next run's changes:
        this run's verdict, or the last one known when this run has none (a row skipped
        tonight); a listing on several rows keeps no verdict (it cannot be paired).
        `previous`: `previous_verdicts()`, when the caller has read it already. `pending`:
        written beside the history, which it replaces at `keep_verdicts`, once the run's
        outputs are written; a run that fails before that has its changes listed by the next,
        against the last history kept."""
        latest = verdicts.group_by("listing", maintain_order=True).agg(
            pl.col("verdict").first(), copies=pl.len()
        )
        latest = latest.with_columns(verdict=pl.when(pl.col("copies") == 1).then("verdict"))
        if previous is None:
            previous = self.previous_verdicts()
        if not previous.is_empty():
            carried = pl.when(pl.col("copies") == 1).then(pl.coalesce("verdict", "old_verdict"))
            latest = latest.join(
                previous.drop("copies"), on="listing", how="left", maintain_order="left"
            ).select("listing", verdict=carried, copies="copies")
        self.verdicts_path.parent.mkdir(parents=True, exist_ok=True)
        target = self._pending_verdicts if pending else self.verdicts_path
        _write_parquet(latest.rename({"listing": LISTING_KEY}), target)

    def keep_verdicts(self, as_of: float | None = None) -> None:
        """The verdicts saved `pending` become the history the next run compares with. `as_of`:
        the history they replace, if it was kept before then, is kept aside (a copy, so that
        a crash in between leaves the history as it was), for `previous_verdicts(as_of)`."""
        latest = self.verdicts_path
        if as_of is not None and latest.exists() and not self.verdicts_kept_since(as_of):
            copy = self._earlier_verdicts.with_suffix(".tmp")
            shutil.copy2(latest, copy)  # with its time: when it was kept
            os.replace(copy, self._earlier_verdicts)
        os.replace(self._pending_verdicts, latest)

    def verdicts_kept_since(self, since: float) -> bool:
        """Whether the verdict history was kept at or after `since` (a Unix time)."""
        try:
            return self.verdicts_path.stat().st_mtime >= since
        except OSError:
            return False

    @property
    def _pending_verdicts(self) -> Path:
        return self.verdicts_path.with_name(f"{self.verdicts_path.stem}.pending.parquet")

    @property
    def _earlier_verdicts(self) -> Path:
        return self.verdicts_path.with_name(f"{self.verdicts_path.stem}.earlier.parquet")

    def compact(self, freshness_days: float, *, run_began: float | None = None) -> None:
        """One rows file and one answers file holding every final answer still fresh, and
        those recorded since `run_began` (the run being closed: what it just paid for is not
        dropped because this run's `freshness_days` is short, a later run's may be longer).

        Batches holding requests still in doubt (failed, or left unanswered in a resent batch)
        are kept as they are, keys and all, until those are answered: folded, they would be
        forgotten, and sent again under new keys, paid twice."""
        batches = self._batches()
        if len(batches) <= 1:
            return
        every = self._scan_each([rows_file for _, _, rows_file, *_ in batches], ["fingerprint"])
        states = self.states(every["fingerprint"].unique())
        doubt = states.filter(pl.col("state").is_in(["sent", "failed"]))
        holding = set(doubt["batch_key"].to_list())
        folded = [b for b in batches if b[0] not in holding]
        if len(folded) <= 1:
            return
        fresh_after = _kept_after(freshness_days, run_began)
        answered = [answers_file for _, _, _, answers_file, _ in folded]
        if all(name is None for name in answered):  # (a batch still sent has none)
            return
        kept = self._answers_kept(answered, fresh_after, doubt["fingerprint"])
        rows = [
            pl.read_parquet(self.files / rows_file).with_columns(_order=pl.lit(order))
            for order, (_, _, rows_file, _, _) in enumerate(folded)
        ]
        latest_rows = (
            pl.concat(rows, how="diagonal_relaxed")
            .sort("_order")
            .unique("fingerprint", keep="last", maintain_order=True)
            .drop("_order")
        )
        # In the order of the answers file, so `states` puts the two side by side, unjoined
        kept_rows = kept.select("fingerprint").join(
            latest_rows, on="fingerprint", how="inner", maintain_order="left"
        )
        key = f"{COMPACTED_BATCH}{uuid.uuid4().hex[: _COMPACTED_KEY - len(COMPACTED_BATCH)]}"
        unsent = self._write(kept_rows, f"{key}{_UNSENT}")  # (see `mark_sent`)
        answers_file = self._write(kept, f"{key}.answers.parquet")
        rows_file = _as_sent(unsent)
        now = time.time()
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(
                "DELETE FROM batches WHERE batch_key = ?", [(b[0],) for b in folded]
            )
            self._db.execute(
                "INSERT INTO batches (batch_key, state, rows_file, answers_file, rows, created_at,"
                " updated_at) VALUES (?, 'done', ?, ?, ?, ?, ?)",
                (key, rows_file, answers_file, kept.height, now, now),
            )
            folded_files = sorted(name for b in folded for name in b[2:4] if name)
            self._db.execute(
                "INSERT OR REPLACE INTO meta (name, value) VALUES ('folded_files', ?)",
                (json.dumps(folded_files),),
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        self._name_as_sent(unsent)
        live = {rows_file, answers_file, _LAST_RESULTS, _LAST_REJECTS}
        live |= {"verdicts.parquet", self._pending_verdicts.name, self._earlier_verdicts.name}
        live |= {name for b in batches if b[0] in holding for name in b[2:4] if name}
        for stale in self.files.glob("*.parquet"):
            if stale.name not in live:
                stale.unlink()
        self._db.execute("DELETE FROM meta WHERE name = 'folded_files'")

    def _remove_folded(self) -> None:
        """The files of batches a compaction folded, which a run killed after its commit left
        (QA 35): removed, not taken for batches whose record the database lost (a warning,
        and a journal of a hundred batches again)."""
        try:
            folded = json.loads(self._meta("folded_files") or "[]")
        except ValueError:
            folded = []
        live = {n for names in self._db.execute("SELECT rows_file, answers_file FROM batches")
                for n in names if n}  # fmt: skip
        # (a version before this one, run in between, took them back: they are live again)
        for name in folded if isinstance(folded, list) else []:
            if isinstance(name, str) and name not in live and "/" not in name:
                (self.files / name).unlink(missing_ok=True)
        self._db.execute("DELETE FROM meta WHERE name = 'folded_files'")

    def _answers_kept(
        self, answered: list[str | None], fresh_after: float, in_doubt: pl.Series
    ) -> pl.DataFrame:
        """The answers a compaction keeps from the answers files `answered` (in the order
        their batches were sent): each fingerprint's latest final answer recorded since
        `fresh_after`, unless `in_doubt` (the batches kept decide for those, being newer).
        Chosen from three columns first, then read file by file: a journal holding every
        answer twice over (paid again once stale) is never read whole at once."""
        narrow = self._scan_each(answered, ["fingerprint", *_ANSWERED_SCHEMA])
        fresh = pl.col("status").is_in(_FINAL) & (pl.col("scored_at") >= fresh_after)
        chosen = (
            narrow.with_columns(_row=pl.int_range(pl.len(), dtype=pl.UInt32).over("_order"))
            .filter(fresh)
            .sort("scored_at", maintain_order=True)  # the latest recorded (QA 68), not sent
            .unique("fingerprint", keep="last", maintain_order=True)
            .join(in_doubt.to_frame("fingerprint"), on="fingerprint", how="anti")
        )
        parts = []
        for (order,), rows in chosen.partition_by("_order", as_dict=True).items():
            stored = pl.read_parquet(self.files / str(answered[order]), row_index_name="_row")
            wanted = rows.select(pl.col("_row").cast(stored.schema["_row"]))
            parts.append(stored.join(wanted, on="_row", how="semi").drop("_row"))
        if not parts:  # none fresh: no rows, the columns of an answers file
            first = next(name for name in answered if name is not None)
            return pl.read_parquet(self.files / first, n_rows=0)
        return pl.concat(parts, how="diagonal_relaxed")

    def forget_last_run(self) -> None:
        """Before a run's output files are rewritten: no run is answered again until
        `finish_run` keeps the new ones."""
        self._db.execute("DELETE FROM meta WHERE name = 'last_run'")

    def write_last_run(
        self, results: pl.DataFrame, rejects: pl.DataFrame, *, written: Path | None = None
    ) -> str:
        """The complete output of a run, to answer again while nothing changes; the files'
        checksums, for `finish_run`. Touches files only, no database, so it can run in a
        thread beside the output writers.

        `written`: a Parquet file that already holds exactly `results` (the run's Parquet
        output), copied byte for byte instead of encoding a million rows again (0.06 s
        against 0.9 s)."""
        if written is None:
            results_crc = self._put(results, _LAST_RESULTS)
        else:
            results_crc = self._copy(written, _LAST_RESULTS)
        rejects_crc = self._put(rejects, _LAST_REJECTS)
        return f"{results_crc:08x}{rejects_crc:08x}"

    def _keep_last_run(self, keep: LastRun) -> None:
        self._set_meta("last_run_notes", json.dumps(keep.notes, ensure_ascii=False))
        self._set_meta("last_run", f"{keep.key} {keep.oldest_answer!r} {keep.checksums}")

    def last_run_notes(self) -> list[tuple[str, object]]:
        """The `notes` kept with the last run (none for a run kept by an older version)."""
        return [(label, value) for label, value in json.loads(self._meta("last_run_notes") or "[]")]

    def last_run(self, key: str, fresh_after: float) -> tuple[pl.DataFrame, pl.DataFrame] | None:
        """The last finished run's results and rejects, if it had the same key (same input
        bytes, options and scorer) and its oldest answer is still fresh."""
        saved = (self._meta("last_run") or "").split(" ")
        if len(saved) not in (2, 3) or saved[0] != key or float(saved[1]) < fresh_after:
            return None
        # Files gone or damaged: the run is answered from its batches' answers instead.
        # (Kept by a version before 2026-11-24: no checksums; read if they decode.)
        checksums = [int(saved[2][:8], 16), int(saved[2][8:], 16)] if len(saved) == 3 else []
        paths = [self.files / _LAST_RESULTS, self.files / _LAST_REJECTS]
        try:  # (checked, then read: the job's lock keeps other runs from the files between)
            if checksums and [_crc32(path) for path in paths] != checksums:
                return None
            results, rejects = (pl.read_parquet(path) for path in paths)
        except (OSError, pl.exceptions.PolarsError):
            return None
        return results, rejects

    def reset(self) -> None:
        """--fresh: forget every answer (charges already made stay in the ledger). The verdict
        history is no answer: kept, as a default journal's is (it lives beside the journal),
        so the run lists the verdicts that changed, and says the job was scored before."""
        self.flush()
        self._db.execute("DELETE FROM meta WHERE name IN ('last_run', 'workspace')")
        self._db.execute("DELETE FROM batches")
        history = {self.verdicts_path, self._pending_verdicts, self._earlier_verdicts}
        for stale in self.files.glob("*.parquet"):
            if stale not in history:
                stale.unlink()


def _write_parquet(frame: pl.DataFrame, path: Path) -> None:
    """Written completely (fsynced) under a temporary name, then renamed into place."""
    with atomic_path(path) as temporary:
        frame.write_parquet(temporary, compression="lz4")


def _kept_after(freshness_days: float, run_began: float | None) -> float:
    """When the oldest answer a compaction keeps was recorded: those fresh when the run that
    began at `run_began` began (None: not known, begun by an earlier version), which it found
    fresh, and its own. (QA 63: counted from the run's end, a nightly job's compaction dropped
    the answers paid 30 nights before, gone stale while it ran, and the next night paid them
    again as new, not as stale.)"""
    return (time.time() if run_began is None else run_began) - freshness_days * 86_400


def _number(text: str | None) -> float | None:
    """A number kept in the journal's meta; None if none is, or what is there is no number
    (edited by hand)."""
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


def _as_sent(rows_file: str) -> str:
    """The name of a rows file once its batch is recorded (see `Journal.write_rows`)."""
    if rows_file.endswith(_UNSENT):
        return rows_file.removesuffix(_UNSENT) + _ROWS
    return rows_file


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as reading:
        while chunk := reading.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


_CHECKSUM_IN_NAME = re.compile(r"\.([0-9a-f]{8})\.[a-z]+\.parquet$")


def _as_written(path: Path) -> bool:
    """Whether a journal's batch file is as written: its bytes against the CRC-32 in its name
    (see `Journal._write`), or, named without one (by a version before 2026-11-24), read whole
    without an error."""
    found = _CHECKSUM_IN_NAME.search(path.name)
    try:
        if found is None:
            pl.read_parquet(path)
            return True
        return _crc32(path) == int(found[1], 16)
    except (OSError, pl.exceptions.PolarsError):
        return False


class JournalError(PipelineError):
    """A journal file that cannot be written (a full disk, a folder made read-only)."""


@contextmanager
def _writing_journal(path: Path) -> Iterator[None]:
    try:
        yield
    except (OSError, OutputError, pl.exceptions.PolarsError) as exc:
        cause = exc.__cause__ if isinstance(exc, OutputError) else exc
        if isinstance(cause, OSError):
            reason = cause.strerror or str(cause)
        else:  # polars says "...: underlying IO error: No space left on device (os error 28)"
            reason = re.sub(r" \(os error \d+\)$", "", str(cause).rsplit("IO error: ", 1)[-1])
        raise JournalError(
            f"cannot write the run journal's file {path} ({reason}). What was paid is kept: "
            "fix this (free some space on that disk) and run the same command again; rows "
            "sent and not recorded go again under their keys, replayed, not paid again"
        ) from exc


_COMPACTED_KEY = len(COMPACTED_BATCH) + 12  # characters of a compacted batch's key


def _batch_key_of(name: str) -> str:
    """The batch key of a batch file's name (see `write_rows`, `record`, `compact`): the
    stem less the `-<8 hex>` `write_rows` and `record` add (a compacted batch resent keeps
    its key, then that suffix: compacted-<12 hex>-<8 hex>)."""
    stem = name.split(".", 1)[0]
    if stem.startswith(COMPACTED_BATCH):
        return stem[:_COMPACTED_KEY]
    return stem.rsplit("-", 1)[0]


def _written_at(path: Path) -> float:
    return path.stat().st_mtime


def _safe(batch_key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in batch_key)[:60]


def _each_once(fingerprints: pl.Series) -> bool:
    """No fingerprint twice: as many distinct 64-bit hashes as rows (a tenth of the time of
    counting the texts; a shared hash only sends the caller down its exact path)."""
    return fingerprints.hash().n_unique() == fingerprints.len()


def _beside(rows: pl.DataFrame, answers: pl.DataFrame) -> pl.DataFrame:
    """`rows` (fingerprint, _order) with the status and scored_at of their answers: put beside
    them when the answers are the same rows in the same order (every batch answered), else
    joined (a batch still sent, or answers in another order)."""
    if answers.is_empty():
        return rows.with_columns(status=pl.lit(None, pl.String), scored_at=pl.lit(None, pl.Float64))
    same = (
        rows.height == answers.height
        and rows["_order"].equals(answers["_order"])
        and rows["fingerprint"].equals(answers["fingerprint"])
    )
    if same:
        return rows.with_columns(answers["status"], answers["scored_at"])
    return rows.join(answers, on=["fingerprint", "_order"], how="left", maintain_order="left")
