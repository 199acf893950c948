"""Where a job's journal and its files live, and the lock that lets one run of a job at a time.

A job is an input file scored into one workspace through one scorer; its journal is named
after the input (a link by its own name, not the file it leads to) and the target, in the
cache folder or where --journal says.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager, nullcontext, suppress
from pathlib import Path

from pipeline.errors import JobInProgress, UsageError


def journal_path(
    cache_dir: Path, input_path: Path, target: str, *, suffix: str = ".journal"
) -> Path:
    """The default journal of a job: the same input scored for the same target (workspace,
    service), the input named by `job_input`. `suffix`: another file of the job named alike
    (its verdict history, a lock).

    Versions before 2026-11-25 named a link's job after the file it led to: such a journal is
    moved to the job's name on first use (else the link's job would pay every row once more).
    """
    named = default_journal(cache_dir, input_path, target, suffix=suffix)
    if not named.exists():
        earlier = _earlier_link_journal(cache_dir, input_path, target, suffix)
        if earlier is not None:
            _adopt(earlier, named)
    return named


def default_journal(
    cache_dir: Path, input_path: Path, target: str, *, suffix: str = ".journal"
) -> Path:
    """The name `journal_path` gives the job's journal, without moving one an earlier
    version named otherwise."""
    return _job_file(cache_dir, input_path, job_input(input_path), target, suffix)


def _earlier_link_journal(cache_dir: Path, link: Path, target: str, suffix: str) -> Path | None:
    """The journal a version before 2026-11-25 kept for the job of `link` while it led to the
    file it leads to now: named after the link, hashed on that file. (Not one it kept for
    another export beside it: two links of one name may lead into one folder, and which
    link's journal it was cannot be told.) None for a link named like its file (as far as
    journal names go: their first 40 characters): that journal was also the job of the file
    scored under its own name, not the link's."""
    followed = link.resolve()
    if followed == job_input(link):
        return None
    journal = _job_file(cache_dir, link, followed, target, suffix)
    if journal == _job_file(cache_dir, followed, followed, target, suffix):
        return None
    return journal if journal.exists() else None


def _job_file(cache_dir: Path, given: Path, source: Path, target: str, suffix: str) -> Path:
    job = f"{source}\x1f{target}".encode()
    return cache_dir / f"{given.stem[:40]}-{hashlib.sha256(job).hexdigest()[:12]}{suffix}"


def _adopt(earlier: Path, named: Path) -> None:
    """Move a job's files from the name an earlier version gave them: a journal's folders and
    SQLite companions first, the journal itself last (once it is there, the move is done; a
    move cut short is finished by the next run). Not while a run of that version holds the
    journal's lock: UsageError."""
    with job_lock(earlier) if earlier.suffix == ".journal" else nullcontext():
        _move_job_files(earlier, named)


def _move_job_files(earlier: Path, named: Path) -> None:
    moves = []
    if earlier.suffix == ".journal":
        moves += [(results_folder(earlier), results_folder(named))]
        moves += [(legacy_folder(earlier), legacy_folder(named))]
        moves += [
            (earlier.with_name(earlier.name + tail), named.with_name(named.name + tail))
            for tail in ("-wal", "-shm", "-journal")
        ]
    for source, target in [*moves, (earlier, named)]:
        if source.exists() and not target.exists():
            with suppress(FileNotFoundError):  # another run has just moved it
                source.rename(target)


def job_input(input_path: Path) -> Path:
    """The input of a job: the file's name in its folder, the folder's path resolved (however
    it is reached: relative, through linked folders, with `..`) but the name itself not
    followed if it is a link: a `latest.csv` link is one job whatever export it points to,
    each night paying only for what changed. (A file that is no link: its resolved path.)"""
    return input_path.parent.resolve() / input_path.name


def paid_by(journal: Path) -> tuple[str | None, bool]:
    """`Journal.paid_by` of the journal at `journal`, read without making anything."""
    if not journal.is_file():
        return None, False
    try:
        with closing(sqlite3.connect(journal, timeout=60)) as db:
            meta = dict(db.execute("SELECT name, value FROM meta").fetchall())
    except sqlite3.Error:
        return None, False
    return meta.get("workspace"), "workspace_confirmed" in meta


def results_folder(journal: Path) -> Path:
    """The folder of a journal's files, named after the journal's whole name (job.riyadh ->
    job.riyadh.files), so that no two journals share one."""
    return journal.with_name(journal.name + ".files")


def legacy_folder(journal: Path) -> Path:
    """Where versions before 2026-11-24 kept a journal's files: named after its stem, which
    job.riyadh and job.jeddah (or job and job.journal) share."""
    return journal.with_suffix(".results")


def lock_file(journal: Path) -> Path:
    """The lock of a journal's job: X.lock for X.journal (as runs of earlier versions lock
    it), the whole name + .lock for any other name (job.riyadh.lock, job.jeddah.lock)."""
    if journal.suffix == ".journal":
        return journal.with_suffix(".lock")
    return journal.with_name(journal.name + ".lock")


@contextmanager
def job_lock(journal_file: Path) -> Iterator[None]:
    """One run of a job at a time: a second run (a slow nightly, a double cron) stops at once."""
    lock_path = lock_file(journal_file)
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        handle = lock_path.open("a+")
    except OSError as exc:  # a folder of that name, a file where a folder should be
        raise UsageError(
            f"{journal_file}: cannot lock this job's journal at {lock_path} ({exc.strerror}); "
            "give --journal a path in a folder this run can write"
        ) from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            where = f"; its journal is {journal_file}" if journal_file.exists() else ""
            raise JobInProgress(
                f"another run of this job is in progress ({holder}){where}. Wait for it to finish."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
