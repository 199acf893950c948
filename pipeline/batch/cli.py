"""`decisions score`: options in, `run_batch` called, the summary printed."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sqlite3
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import asdict, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.batch.columns import load_column_config
from pipeline.batch.job_files import job_input
from pipeline.batch.labels import (
    EXPLANATIONS_NOT_AFFORDED,
    PERHAPS_CHARGED,
    REASONING_SKIPPED,
    STILL_NEEDED,
    WARNING,
)
from pipeline.batch.options import BatchOptions
from pipeline.batch.plan import Plan
from pipeline.batch.progress import ProgressReporter
from pipeline.batch.run import BatchOutcome, run_batch
from pipeline.batch.scorers.base import SKIPPED_BALANCE, SKIPPED_BUDGET
from pipeline.batch.scorers.remote_options import add_remote_options, service_url
from pipeline.command_parser import CommandParser
from pipeline.errors import (
    Interrupted,
    JobInProgress,
    LedgerUnavailable,
    PipelineError,
    UsageError,
)
from pipeline.ledger.key_text import redact_keys_in_message
from pipeline.settings import Settings, ledger_location

if TYPE_CHECKING:
    import polars as pl

    from pipeline.batch.journal import Journal
    from pipeline.batch.scorers.http import HttpScorer
    from pipeline.batch.scorers.local import LocalScorer
    from pipeline.engine.engine import Engine


def default_output(input_path: Path) -> Path:
    return input_path.with_name(f"{input_path.stem}-scored.xlsx")


def add_score_command(commands: Any) -> None:
    score = commands.add_parser(
        "score",
        help="score every listing of a CSV / XLSX / Parquet file",
        description="Score a portfolio file and write it back enriched with verdicts.",
    )
    score.add_argument("input", type=Path, help="portfolio: .csv, .xlsx or .parquet")
    score.add_argument(
        "-o",
        "--output",
        type=Path,
        action="append",
        help="output .xlsx, .csv or .parquet; repeat for several (default: INPUT-scored.xlsx)",
    )
    score.add_argument("--config", type=Path, help="TOML file with column aliases / mapping")
    score.add_argument(
        "--reasoning",
        choices=("none", "all", "borderline"),
        default="none",
        help="the bilingual explanation: none (1 decision a row; the default), all (3), or "
        "borderline (3 more for each partial verdict)",
    )
    score.add_argument("--budget", type=int, help="most decisions this run may spend")
    score.add_argument("--encoding", help="CSV encoding when detection cannot tell (cp1256...)")
    score.add_argument(
        "--sheet", help="XLSX sheet name or 0-based index (default: the first visible with data)"
    )
    score.add_argument("--no-bom", action="store_true", help="CSV output without the UTF-8 BOM")
    score.add_argument("--workspace", help="workspace to charge (default: the local one)")
    score.add_argument("--db", help="ledger: a SQLite path or sqlite:///PATH (env DECISIONS_DB)")
    score.add_argument(
        "--priority", metavar="COLUMN", help="score the highest values of COLUMN first"
    )
    score.add_argument(
        "--dry-run", action="store_true", help="print the plan and its cost; charge nothing"
    )
    score.add_argument(
        "--fresh", action="store_true", help="forget the journal: score (and pay) every row again"
    )
    score.add_argument(
        "--journal", type=Path, help="journal file (default: one per input file and workspace)"
    )
    score.add_argument(
        "--quiet",
        action="store_true",
        help="no progress, no summary table (its warnings, and how to go on when rows are left,"
        " are still said)",
    )
    score.add_argument("--json", action="store_true", help="print the summary as JSON")
    score.add_argument(
        "--manifest", type=Path, help="also write the run's summary as JSON to this file"
    )
    add_remote_options(score)
    # What raises the budget, as the advice to go on names it: `decisions nightly` reads it
    # from its configuration file, and has no --budget.
    score.set_defaults(handler=cmd_score, budget_named="--budget", unattended=False, night=None)


def add_nightly_command(commands: Any) -> None:
    nightly = commands.add_parser(
        "nightly",
        help="the scheduled run: score the portfolio of configs/nightly.toml into a dated folder",
        description="The scheduled run (cron): `decisions score` with the options of "
        "configs/nightly.toml, into out/nightly/YYYY-MM-DD/ with a manifest.json; the "
        "configuration's budget is the night's, across its runs.",
    )
    nightly.add_argument("--config", type=Path, help="default: configs/nightly.toml")
    nightly.add_argument("--db", help="ledger: a SQLite path or sqlite:///PATH (env DECISIONS_DB)")
    nightly.set_defaults(handler=cmd_nightly)


def cmd_nightly(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.batch.nightly import (
        NightRun,
        load_nightly,
        make_room,
        night_so_far,
        score_arguments,
        tonight,
    )

    config = load_nightly(args.config or settings.root / "configs" / "nightly.toml")
    today = tonight()
    # The workspace that pays: configured, else the local one; through a service, the key's
    # (not known before the run asks the service, and what its manifest names).
    workspace = None if service_url(None) else config.workspace or settings.ledger.workspace
    make_room(config, settings.root, today, workspace)
    so_far = night_so_far(config, settings.root, today, workspace)
    argv = ["score", *score_arguments(config, settings.root, today, spent_tonight=so_far.spent)]
    if args.db:
        argv += ["--db", args.db]
    parser = CommandParser(prog="decisions")
    add_score_command(parser.add_subparsers(dest="command"))
    score_args = parser.parse_args(argv)
    score_args.unattended = True  # a ledger named and not there is refused, not started
    named = f"`budget` in {args.config or 'configs/nightly.toml'}"
    score_args.night = NightRun(so_far, config.budget, named)
    score_args.budget_named = score_args.night.budget_named()
    print(f"decisions nightly: {' '.join(argv)}", flush=True)
    return cmd_score(score_args, settings)


def _engine(settings: Settings) -> Engine:
    """The engine over the settings' benchmark tables, read and checked now (their lookups
    are built when first needed: a rerun answered from the journal never needs them): tables
    that cannot be read, or are not benchmark tables, stop the run here, before its ledger is
    opened, which would make the file."""
    from pipeline.engine.benchmarks import BenchmarkTable
    from pipeline.engine.engine import Engine

    return Engine(BenchmarkTable.read(settings.resolve(settings.benchmarks.table)))


def _embedded_scorer(args: argparse.Namespace, settings: Settings) -> tuple[LocalScorer, str]:
    from pipeline.batch.scorers.local import LocalScorer
    from pipeline.ledger.sqlite import first_charge_note, open_ledger

    engine = _engine(settings)
    workspace = args.workspace or settings.ledger.workspace
    # The job lock keeps a second run of this job out, so a charge of ours still marked in
    # flight belongs to a run that died: replay it at once instead of waiting.
    ledger = open_ledger(
        settings,
        args.db,
        charges_local=workspace == settings.ledger.workspace,
        # A dry run makes nothing, and a nightly run has nobody to read a note: a mistyped
        # --db (or DECISIONS_DB) is said to be, before anything is charged.
        must_exist=args.dry_run or args.unattended,
        stale_in_flight_s=0,
    )
    ledger.workspace(workspace)  # an unknown workspace stops the run before any reading
    if (note := first_charge_note(ledger)) is not None:
        print(note, file=sys.stderr)  # --quiet too: cron mails it
    scorer = LocalScorer(engine, ledger, workspace=workspace, chunk_rows=settings.batch.chunk_rows)
    return scorer, workspace


def _warn_unused_read_options(args: argparse.Namespace) -> None:
    from pipeline.io.read import CSV_EXTENSIONS, XLSX_EXTENSIONS

    suffix = args.input.suffix.lower()
    if args.sheet is not None and suffix not in XLSX_EXTENSIONS:
        print(f"decisions: warning: --sheet applies to XLSX files; ignored for {args.input}",
              file=sys.stderr)  # fmt: skip
    if args.encoding is not None and suffix not in CSV_EXTENSIONS:
        print(f"decisions: warning: --encoding applies to CSV files; ignored for {args.input}",
              file=sys.stderr)  # fmt: skip


def cmd_score(args: argparse.Namespace, settings: Settings) -> int:
    started = datetime.now(UTC)
    try:
        with _stop_signal_interrupts():
            try:
                return _score(args, settings)
            except KeyboardInterrupt as stop:
                if (done := getattr(args, "not_recorded", None)) is not None:
                    stop.outcome, stop.scorer_version = done  # type: ignore[attr-defined]
                raise _interrupted(stop) from None
            except (sqlite3.Error, LedgerUnavailable) as exc:  # a full disk, a damaged file
                raise _database_failed(exc) from exc
    except PipelineError as exc:
        if args.manifest is not None:
            _record_failure(args, settings, exc, started)
        if args.json:  # a script reading stdout gets a document, failed or not
            print(json.dumps(_failure_record(args, settings, exc, started), ensure_ascii=False,
                             indent=2))  # fmt: skip
        raise


def _database_failed(exc: sqlite3.Error | LedgerUnavailable) -> PipelineError:
    """The ledger's or the run journal's SQLite failing (which one, sqlite3 does not say)."""
    replayed = "rows sent and not recorded go again under their keys, replayed, not paid again"
    if isinstance(exc, LedgerUnavailable):
        message = (
            f"{exc}. What was paid before is kept: run the same command again once it is "
            f"fixed; {replayed}"
        )
    else:
        if isinstance(exc, sqlite3.OperationalError):  # a full disk, a file made read-only
            fix = "fix this (a full disk?) and run the same command again"
        else:
            fix = (
                "if the run journal is damaged, move the journal file away, keeping its .files "
                "folder, and run the same command again (its batches are taken back from the "
                "files); if the ledger is, restore it from a backup"
            )
        message = (
            f"a database failed ({exc}): the ledger (--db) or the run journal. What was paid "
            f"is kept: {fix}; {replayed}"
        )
    error = PipelineError(message)
    for paid in ("decisions_spent", "decisions_perhaps_charged", "balance_before"):  # its record
        if hasattr(exc, paid):
            setattr(error, paid, getattr(exc, paid))
    return error


def _interrupted(stop: KeyboardInterrupt) -> Interrupted:
    """The stop as an error that says how to go on, with what the run had paid (once it was
    charging) for its record, and its summary when it was stopped while writing."""
    error = Interrupted(
        "interrupted; what was paid is kept: the batches answered in the run journal, the "
        "requests of the batch under way by their idempotency keys (the next run replays them, "
        "free). Run the same command again to go on (nothing paid is paid twice):\n  "
        + command_line(sys.argv)
    )
    error.decisions_spent = getattr(stop, "decisions_spent", 0)  # type: ignore[attr-defined]
    perhaps = getattr(stop, "decisions_perhaps_charged", 0)
    error.decisions_perhaps_charged = perhaps  # type: ignore[attr-defined]
    error.balance_before = getattr(stop, "balance_before", None)  # type: ignore[attr-defined]
    error.outcome = getattr(stop, "outcome", None)  # type: ignore[attr-defined]
    error.scorer_version = getattr(stop, "scorer_version", None)  # type: ignore[attr-defined]
    return error


@contextmanager
def _stop_signal_interrupts() -> Iterator[None]:
    """SIGTERM (what cron, systemd and timeouts send) stops a run as Ctrl-C does: the run
    unwinds (its journal closed, its lock released) and says how to go on, instead of dying
    silently."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _failure_record(
    args: argparse.Namespace, settings: Settings, error: PipelineError, started: datetime
) -> dict[str, Any]:
    """The summary of a run that failed, if it got as far as one (what it paid shows), else a
    record of the error."""
    outcome = getattr(error, "outcome", None)
    if outcome is not None:
        manifest = summary_json(outcome, error.scorer_version)  # type: ignore[arg-type]
        return (
            manifest | {"exit_code": error.exit_code, "error": _said(error)} | _night_fields(args)
        )
    remote = service_url(args.api_url)
    workspace = args.workspace or (None if remote else settings.ledger.workspace)
    return failure_manifest(error, started, args.input, workspace) | _night_fields(args)


def _record_failure(
    args: argparse.Namespace, settings: Settings, error: PipelineError, started: datetime
) -> None:
    """--manifest for a run that failed: its summary if it got as far as one (what it paid
    shows), else a record of the error. A file that holds an earlier run's summary (a night's
    first run) keeps it when this run paid nothing; otherwise that summary is copied aside
    first (see `keep_aside`): a run stopped after paying must leave a record of it (QA 33:
    a rerun stopped by cron's timeout left none of the 200,000 decisions it paid)."""
    from pipeline.batch.nightly import keep_aside, records_a_run

    if records_a_run(args.manifest):
        paid = getattr(error, "outcome", None) is not None or any(
            getattr(error, spent, 0) for spent in ("decisions_spent", "decisions_perhaps_charged")
        )
        if not paid:
            return
        try:
            keep_aside(args.manifest)
        except OSError as exc:
            print(f"decisions: warning: the manifest could not be kept ({exc})", file=sys.stderr)
            return
    manifest = _failure_record(args, settings, error, started)
    try:
        write_manifest(args.manifest, manifest)
    except (OSError, PipelineError) as exc:  # the run's own error is the one to report
        print(f"decisions: warning: the manifest could not be written ({exc})", file=sys.stderr)


def _is_default(args: argparse.Namespace, journal_dir: Path, target: str) -> bool:
    """Whether --journal names the job's default journal: one made before 2026-11-25 does not
    remember its verdict history yet, which is the default runs' (QA 35)."""
    from pipeline.batch.job_files import default_journal

    default = default_journal(journal_dir, args.input, target)
    return Path(args.journal).resolve() == default.resolve()


def _remote_journals(
    journal_dir: Path, source: Path, workspace: str | None, owner: str | None
) -> list[Path]:
    """The default journals a remote job may have, its own name first: one per input and
    --workspace, and those of the same input without --workspace and under the key's own
    workspace."""
    from pipeline.batch.job_files import journal_path

    names = (workspace or "", "", owner or "")
    return list(dict.fromkeys(journal_path(journal_dir, source, f"remote:{w}") for w in names))


def _remote_journal(candidates: list[Path], workspace: str | None, owner: str | None) -> Path:
    """The default journal of a remote job: one per input and --workspace. A job without a
    journal of that name yet may have one under the other name (run with --workspace naming
    the key's own workspace, or without): the same workspace paid it, so it is the same job.
    So may a run without --workspace whose name another workspace's job has taken (run without
    --workspace too): this run's key is not that job's, and its own job is looked for."""
    from pipeline.batch.job_files import paid_by

    named, *others = candidates
    payer = paid_by(named)[0]  # an empty journal, left by a refused run, has none
    if payer is not None and (workspace is not None or owner is None or payer == owner):
        return named
    for other in others:
        payer, confirmed = paid_by(other)
        if payer is None:
            continue
        if owner is None and confirmed and payer == workspace:  # the job it names, placed
            _refuse_unplaced_key(payer, other)
        if payer == owner:
            return other
    return named


def _check_unplaced_key(journal: Journal, workspace: str | None) -> None:
    """A run whose key the service does not place (GET /v1/workspace answering 404, or a page
    not ours): the paying workspace is the one --workspace names (a service of the spec alone
    cannot say), and a job the service placed a key for is not this run's."""
    payer, confirmed = journal.paid_by()
    if payer is not None and confirmed:
        _refuse_unplaced_key(payer, journal.path)
    if workspace is None:  # with --journal too: the job records who pays, for the next key
        raise UsageError(
            "the service did not say which workspace the API key spends from (GET "
            "/v1/workspace); check --api-url (the service's base address, without "
            "/v1/decisions), or, for a service of the spec alone, name the paying workspace "
            "with --workspace NAME (one journal per workspace)"
        )
    if payer is not None and payer != workspace:
        raise UsageError(
            f"{journal.path}: this job's answers were paid by workspace {payer!r}, and this "
            f"run names {workspace!r}; give each workspace its own journal (--journal PATH)"
        )


def _refuse_unplaced_key(payer: str, journal: Path) -> None:
    """A job a workspace paid for, as the service said, scored with a key the service does not
    place: the key may be another workspace's, which would be handed answers it did not pay
    for, and pay again for those in doubt (the service's idempotency keys are per workspace)."""
    raise UsageError(
        f"{journal}: this job was paid by workspace {payer!r}, and the service did not say "
        "which workspace this run's key spends from (GET /v1/workspace); check --api-url "
        "(the service's base address, without /v1/decisions), or give this run its own "
        "--journal PATH"
    )


def _claim_journal(
    journal: Journal, args: argparse.Namespace, remote: HttpScorer | None, owner: str | None
) -> None:
    """Check that the job's journal is this run's to use (who paid, through which service),
    every check before anything is recorded, then forget it for --fresh and record this run's
    payer and service (a dry run checks, and leaves the journal as it was)."""
    payer = owner
    if remote is not None and owner is None:  # before --fresh: not this run's to forget
        _check_unplaced_key(journal, args.workspace)
        payer = args.workspace
    paid = journal.paid_by()[0]
    _check_same_ledger(journal, paid, payer)
    if args.fresh and paid is not None and paid != payer:
        # Another workspace's job (or another ledger's): --fresh would forget what it paid for
        # (its next run paying it all again), and hand the job to this one.
        way_on = "another --journal PATH" if args.journal else "--workspace NAME or --journal PATH"
        raise UsageError(
            f"{journal.path}: this job's answers were paid by workspace {paid!r}; --fresh "
            f"would forget them for it: give this run its own job with {way_on}"
        )
    if args.fresh and not args.dry_run:
        journal.reset()
    if args.dry_run and args.fresh:
        return  # a dry run checks, and leaves the journal as it was
    # Every check before anything is recorded, who pays first: a job another workspace paid
    # for is refused as such, not sent to --fresh by the service check.
    for record in (False, True) if not args.dry_run else (False,):
        if payer is not None:
            journal.claim_for(
                payer,
                hint="--workspace NAME (one journal per workspace), or another --journal (for "
                "another ledger too)",
                record=record,
                confirmed=owner is not None,
            )
        if remote is not None:
            journal.claim_service(
                remote.service,
                hint=f"Run with --api-url {journal.service()} if that is the same service; for "
                "another service, give this job its own --journal PATH, or run with --fresh to "
                f"score the file again and pay through {remote.service}",
                record=record,
                host=remote.address,
            )


def _check_same_ledger(journal: Journal, paid: str | None, payer: str | None) -> None:
    """UsageError for a job paid by this workspace of a ledger at another path: the same
    ledger moved (a new disk, a restore), or another one; which, the path cannot tell."""
    if paid is None or payer is None or paid == payer or " in " not in paid + payer:
        return
    (workspace, _, ledger), (now, _, this_ledger) = paid.partition(" in "), payer.partition(" in ")
    if workspace == now and ledger and this_ledger:
        raise UsageError(
            f"{journal.path}: this job's answers were paid by workspace {workspace!r} of the "
            f"ledger {ledger}, and this run's ledger is {this_ledger}. If it is the same "
            "ledger, moved (a new disk, a restore), move it back to that path to go on with "
            "this job; to score it with this ledger instead, give the run its own --journal "
            "PATH, which pays for every row again (--fresh is refused: it would forget what "
            "that ledger paid)"
        )


def _score(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.batch.job_files import job_lock, journal_path
    from pipeline.batch.journal import Journal
    from pipeline.batch.scorers.remote_options import remote_scorer_from_args
    from pipeline.io.read import check_input

    if args.budget is not None and args.budget < 0:
        raise UsageError("--budget must be 0 or more decisions")
    if args.config is not None:
        load_column_config(args.config)  # a config that cannot be read stops the run first
    options = BatchOptions(
        input=args.input,
        outputs=args.output or [default_output(args.input)],
        config=args.config,
        reasoning=args.reasoning,
        budget=args.budget,
        priority=args.priority,
        encoding=args.encoding,
        sheet=args.sheet,  # digits name a sheet first, a position only if no sheet has that name
        csv_bom=not args.no_bom,
        budget_named=args.budget_named,
    )
    _warn_unused_read_options(args)
    check_input(args.input)  # a missing or mislabelled file: before a journal is made for it
    if args.reserve < 0:
        raise UsageError("--reserve must be 0 or more decisions")
    # kept by the run between batches (and, remotely, by the scorer between requests too)
    options = replace(options, reserve=args.reserve)
    remote = remote_scorer_from_args(args, settings)
    owner: str | None = None  # who pays: the remote key's workspace, or the local ledger's
    if remote is not None:
        scorer, workspace = remote, args.workspace
        target = f"{remote.version}:{args.workspace or ''}"
        identity = remote.identify()
        if identity is not None:
            owner = identity[0]
            if workspace is not None and workspace != owner:
                print(
                    redact_keys_in_message(
                        f"decisions: warning: the API key spends from workspace {owner!r}; "
                        f"--workspace {workspace!r} only names this job's journal"
                    ),
                    file=sys.stderr,
                )
            workspace = owner  # the summary names the workspace that pays
    else:
        if args.concurrency is not None:
            print("decisions: warning: --concurrency applies to a decision service (--api-url);"
                  " the embedded engine scores a batch at a time", file=sys.stderr)  # fmt: skip
        scorer, workspace = _embedded_scorer(args, settings)
        target = f"{scorer.version}:{scorer.ledger.path.resolve()}:{workspace}"
        # which ledger paid: asked of another one, a charged batch would read as never charged
        owner = f"{workspace} in {scorer.ledger.path.resolve()}"
    journal_dir = settings.resolve(settings.batch.journal_dir)
    path = args.journal or journal_path(journal_dir, args.input, target)
    candidates: list[Path] = []
    lock = path
    if remote is not None and args.journal is None and not path.exists():
        # One default journal per input and --workspace, whatever the service's address is
        # spelled: another address finds the job's journal and is refused, not paid twice. A
        # journal of an earlier version, named after the address, is kept while it is used.
        candidates = _remote_journals(journal_dir, args.input, args.workspace, owner)
        # One run at a time of a workspace's job on this input, whichever name its journal
        # has (two first runs, with and without --workspace, would both pay), then of the
        # journal chosen; other workspaces' jobs on the same input run on.
        payer = owner or args.workspace or ""
        lock = journal_path(journal_dir, args.input, f"remote-payer:{payer}")
    # The verdict history outlives a change of benchmarks (which starts a new journal: its
    # answers were made with the old ones), to list the verdicts the new benchmarks flip.
    history = None
    if remote is None and (args.journal is None or _is_default(args, journal_dir, target)):
        versionless = target.replace(scorer.version, scorer.name, 1)
        history = journal_path(journal_dir, args.input, versionless, suffix=".verdicts.parquet")
    progress = ProgressReporter(quiet=args.quiet or args.json)
    with job_lock(lock), remote or nullcontext(), ExitStack() as also_locked:
        if candidates:  # chosen once no other run of the workspace can claim one of them
            path = _remote_journal(candidates, args.workspace, owner)
            try:
                also_locked.enter_context(job_lock(path))
            except UsageError as exc:  # (QA 34: waiting did not help a run of another key's)
                if args.workspace is not None or not isinstance(exc, JobInProgress):
                    raise
                raise UsageError(
                    f"{exc} If that run spends another workspace's key, give this one "
                    "--workspace NAME: each workspace's job on this file has a journal of its "
                    "own, and both run at once"
                ) from None
        journal = Journal(path, verdicts=history)
        if journal.taken_back:
            print(
                f"decisions: warning: the run journal {path} had lost its record of "
                f"{journal.taken_back} batch{'es' * (journal.taken_back != 1)} (the file "
                "deleted or emptied, or its -wal file "
                "removed after a crash); they were taken back from its files: their rows sent "
                "and not answered go again under their keys, replayed, not paid again",
                file=sys.stderr,
            )
        _claim_journal(journal, args, remote, owner)
        if args.night is not None and not args.dry_run:
            options = _count_stopped_runs(journal, args, options)
            options = replace(options, changes_since=args.night.so_far.began)
        outcome = run_batch(
            options,
            scorer,
            journal=None if args.fresh and args.dry_run else journal,
            workspace=workspace,
            progress=progress,
            freshness_days=settings.batch.freshness_days,
            dry_run=args.dry_run,
        )
        if not isinstance(outcome, Plan):
            # Done and paid, its manifest not written yet: a stop (SIGTERM) from here records
            # the run's summary, not a run that paid nothing (QA 67)
            args.not_recorded = outcome, scorer.version
        journal.close()
    progress.finish()
    stopped = None  # why a remote run stopped, without an API key
    if remote is not None and remote.stop_message:
        stopped = redact_keys_in_message(remote.stop_message)
    if stopped is not None:
        again = command_line(sys.argv)  # without --fresh, which would pay everything again
        print(f"decisions: error: {stopped}\n  {again}", file=sys.stderr)
    if isinstance(outcome, Plan):
        print_plan(outcome, as_json=args.json)
        return 0
    manifest = summary_json(outcome, scorer.version) | _night_fields(args)
    failed = failed_rows(outcome)
    if stopped is not None:  # why the run stopped, for a monitor
        manifest["error"] = stopped
    elif failed is not None:
        manifest["error"] = failed
    if args.manifest:
        write_manifest(args.manifest, manifest)
    args.not_recorded = None
    if args.json:
        print(json.dumps(manifest, ensure_ascii=False, indent=2))
    named_ledger = _ledger_to_name(args, settings)
    if not (args.json or args.quiet):
        print_summary(outcome, sys.argv, budget_named=args.budget_named, db=named_ledger)
    if args.quiet:
        # What the summary would have warned of (rows read as one cell): cron mails stderr.
        for label, value in outcome.summary.notes:
            if label.startswith(WARNING):
                print(f"decisions: {label[0].lower()}{label[1:]}: {value}", file=sys.stderr)
    if (args.json or args.quiet) and rows_left(outcome):
        # Rows were left: even a quiet run (cron mails what it prints) says how to go on,
        # on stderr, as stdout is for the JSON.
        advice = run_again(outcome, budget_named=args.budget_named, db=named_ledger)
        print(advice + "\n  " + command_line(sys.argv), file=sys.stderr)
    elif (args.json or args.quiet) and failed is not None and stopped is None:
        print(f"decisions: error: {failed}. {RETRY_FAILED}\n  {command_line(sys.argv)}",
              file=sys.stderr)  # fmt: skip
    return outcome.exit_code


def _count_stopped_runs(
    journal: Journal, args: argparse.Namespace, options: BatchOptions
) -> BatchOptions:
    """A night's run: what a run of the job stopped tonight before writing its record (killed
    with kill -9) sent is spent tonight, and the night's budget is what is left of it (QA 63:
    killed after 200 of a night's 300, its rerun spent 300 more). `args.stopped_runs_spent`:
    for the run's manifest, which then holds it (a third run counts it from there)."""
    stopped = args.stopped_runs_spent = args.night.stopped_runs_spent(journal)
    if (unread := args.night.unread_records_said(stopped)) is not None:
        print(f"decisions nightly: {unread}", flush=True)
    elif stopped:
        print(
            f"decisions nightly: a run of this job stopped tonight before it recorded its "
            f"spend; the requests it sent asked for {stopped:,} decisions, counted as spent "
            "tonight",
            flush=True,
        )
    if not stopped or options.budget is None:
        return options
    args.budget_named = args.night.budget_named(stopped)
    return replace(options, budget=max(options.budget - stopped, 0), budget_named=args.budget_named)


def _night_fields(args: argparse.Namespace) -> dict[str, Any]:
    """A night's run's account of the job's spend, for its manifest (see `night_record`)."""
    from pipeline.batch.nightly import night_record

    stopped = getattr(args, "stopped_runs_spent", None)
    return {} if stopped is None else night_record(stopped)


def _ledger_to_name(args: argparse.Namespace, settings: Settings) -> str | None:
    """The ledger a top-up after this run must name: its --db, or the file the environment
    chose (DECISIONS_DB, DECISIONS_SETTINGS), which the shell the top-up is typed in may not
    have; None for the settings' own file."""
    if args.db:
        return args.db
    if os.environ.get("DECISIONS_DB") or os.environ.get("DECISIONS_SETTINGS"):
        return str(ledger_location(settings, None)[0])
    return None


def print_plan(plan: Plan, *, as_json: bool) -> None:
    if as_json:
        fields = asdict(plan) | {
            "decisions_needed": plan.decisions_needed,
            "decisions_needed_at_most": plan.decisions_needed_at_most,
            "dry_run": True,
        }
        print(json.dumps(fields, ensure_ascii=False, indent=2))
        return
    print("Dry run: nothing was sent and nothing was charged.")
    width = max(len(label) for label, _ in plan.lines())
    for label, value in plan.lines():
        shown = f"{value:,}" if isinstance(value, int) else value
        print(f"  {label:<{width}}  {shown}")


def summary_json(outcome: BatchOutcome, scorer_version: str | None = None) -> dict[str, Any]:
    s = outcome.summary
    return {
        "version": package_version(),
        "scorer": scorer_version,
        "started_at": s.started_at.isoformat(timespec="seconds"),
        "input": str(job_input(Path(s.input_path))),  # a monitor compares it from anywhere
        "input_sha256": s.input_fingerprint,
        "outputs": [str(p) for p in outcome.outputs],
        "rows": s.rows_total,
        "status": s.counts_by_status,
        "verdict": s.counts_by_verdict,
        "decisions_spent": s.decisions_spent,
        "balance_before": s.balance_before,
        "balance_after": s.balance_after,
        "workspace": s.workspace,
        "duration_s": round(s.duration_s, 3),
        "exit_code": s.exit_code,
        "notes": dict(s.notes),
    }


def _balance_after(error: PipelineError) -> int | None:
    before, spent = getattr(error, "balance_before", None), getattr(error, "decisions_spent", 0)
    return None if before is None else before - spent


def failure_manifest(
    error: PipelineError, started: datetime, source: Path, workspace: str | None
) -> dict[str, Any]:
    """The manifest of a run that stopped before it could summarise: the keys of
    `summary_json`, unknown ones null, with the exit code and the error."""
    return {
        "version": package_version(),
        "scorer": None,
        "started_at": started.isoformat(timespec="seconds"),
        "input": redact_keys_in_message(str(job_input(source))),  # a key given as the file
        "input_sha256": None,
        "outputs": [],
        "rows": None,
        "status": {},
        "verdict": {},
        # a run stopped while scoring had paid for its batches so far
        "decisions_spent": getattr(error, "decisions_spent", 0),
        "balance_before": getattr(error, "balance_before", None),
        "balance_after": _balance_after(error),
        "workspace": None if workspace is None else redact_keys_in_message(workspace),
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 3),
        "exit_code": error.exit_code,
        "error": _said(error),
        "notes": _perhaps_charged(error),
    }


def _perhaps_charged(error: PipelineError) -> dict[str, int]:
    """The note of a run stopped while requests had no answer: what they perhaps cost, which
    a night's later runs count as spent (`night_so_far`)."""
    perhaps = getattr(error, "decisions_perhaps_charged", 0)
    return {PERHAPS_CHARGED: perhaps} if perhaps else {}


def _said(error: PipelineError) -> str:
    """An error for a record (--json, --manifest): without an API key typed in the wrong place
    (`-o sk-...`, the key as the input file), as the command line's own message."""
    return redact_keys_in_message(str(error))


def package_version() -> str:
    try:
        return metadata.version("property-decisions")
    except metadata.PackageNotFoundError:
        return "unknown"


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    from pipeline.io.atomic import atomic_path

    with atomic_path(path) as temporary:
        temporary.write_text(json.dumps(manifest, ensure_ascii=False, indent=2), encoding="utf-8")


_LEFT = "Some rows were not scored or explained"
RUN_AGAIN = (
    "Some rows were not scored or explained: the budget or the balance ran out. Top up "
    "(decisions workspace topup NAME N) or raise BUDGET, then run the same command again:"
)
RUN_AGAIN_BUDGET = (
    "Some rows were not scored or explained: the budget ran out (the balance did not). Raise "
    "BUDGET, then run the same command again:"
)
RUN_AGAIN_BALANCE = (
    "Some rows were not scored or explained: the balance ran out. Top up (decisions workspace "
    "topup NAME N), then run the same command again:"
)
RUN_AGAIN_RESERVE = (
    "Some rows were not scored or explained: the balance came down to --reserve (the decisions "
    "kept back). Top up (decisions workspace topup NAME N) or lower --reserve, then run the "
    "same command again:"
)
# Rows left by --reserve are skipped for the balance; their message names the reserve.
_RESERVE_REACHED = "reserve"
# Through a service the balance is the service's: a local top-up would not reach it.
_AT_THE_SERVICE = "the workspace at the service (not a local ledger)"


RETRY_FAILED = (
    "What was answered is kept and paid once; run the same command again (later, if the "
    "service was busy) to send the failed rows again:"
)


def failed_rows(outcome: BatchOutcome) -> str | None:
    """What failed, when rows did (their retries spent: a service busy or down): how many,
    and the first one's reason."""
    count = outcome.summary.counts_by_status.get("failed", 0)
    if not count:
        return None
    results = outcome.results
    first = results.filter(results["status"] == "failed")["error_message"][0]
    return f"{count:,} row(s) failed (the first: {first})"


def rows_left(outcome: BatchOutcome) -> bool:
    """Whether the budget or the balance left rows unscored or unexplained: exit 3, or exit 1
    when a row also failed (one whose retries such a stop cut short stays in doubt)."""
    s = outcome.summary
    return (
        s.exit_code == 3
        or s.counts_by_status.get("skipped", 0) > 0
        or bool(dict(s.notes).get(EXPLANATIONS_NOT_AFFORDED))
    )


def run_again(
    outcome: BatchOutcome, *, budget_named: str = "--budget", db: str | None = None
) -> str:
    """How to go on after a run that left rows for lack of budget or balance, naming the one
    that stopped it when the rows left say; `budget_named`: where the run's budget is set;
    `db`: the run's --db, which the top-up needs too."""
    why = _what_stopped(outcome.results)
    advice = RUN_AGAIN
    if why == {SKIPPED_BUDGET}:
        advice = RUN_AGAIN_BUDGET
    elif why == {SKIPPED_BALANCE}:
        advice = RUN_AGAIN_BALANCE
    elif why == {_RESERVE_REACHED}:
        advice = RUN_AGAIN_RESERVE
    noted = dict(outcome.summary.notes)
    if needed := noted.get(STILL_NEEDED):
        partial = noted.get("Reasoning") == "borderline" and outcome.summary.counts_by_status.get(
            "skipped"
        )
        more = ", and 3 more for each that scores partial" if partial else ""
        advice = advice.replace(_LEFT, f"{_LEFT} (they need {needed:,} decision(s){more})", 1)
    topup = "decisions workspace topup NAME N"
    if noted.get("Scorer") == "remote":
        advice = advice.replace(f"({topup})", _AT_THE_SERVICE)
    elif (workspace := outcome.summary.workspace) is not None:
        at = f" --db {shlex.quote(db)}" if db else ""
        advice = advice.replace(topup, f"decisions workspace topup {shlex.quote(workspace)} N{at}")
    return advice.replace("BUDGET", budget_named)


def _what_stopped(results: pl.DataFrame) -> set[str | None]:
    """What left rows unscored (their error_code) or unexplained (said in their message): the
    run's budget, the workspace balance, the balance down to --reserve (said in the message of
    either), or None for anything else."""
    why: set[str | None] = set()
    skipped = results.filter(results["status"] == "skipped").select("error_code", "error_message")
    for code, message in skipped.unique().iter_rows():
        reserve = code == SKIPPED_BALANCE and "--reserve" in (message or "")
        why.add(_RESERVE_REACHED if reserve else code)
    unexplained = results.filter(results["error_code"] == REASONING_SKIPPED)["error_message"]
    for message in unexplained.unique().to_list():
        message = message or ""
        if "--reserve" in message:
            why.add(_RESERVE_REACHED)
        elif "workspace balance" in message:
            why.add(SKIPPED_BALANCE)
        else:
            why.add(SKIPPED_BUDGET if "budget" in message else None)
    return why


def command_line(argv: list[str]) -> str:
    """`argv` as the line that goes on with the run, to paste into a shell: quoted, runnable
    however it was started (`python -m pipeline` leaves the path of pipeline/__main__.py in
    argv[0]), and without `--fresh`, which would forget what this run paid and pay it again."""
    head = [sys.executable, "-m", "pipeline"] if Path(argv[0]).name == "__main__.py" else argv[:1]
    rest = [arg for arg in argv[1:] if not (len(arg) > 2 and "--fresh".startswith(arg))]  # --f
    return shlex.join([*head, *rest])


def print_summary(
    outcome: BatchOutcome, argv: list[str], *, budget_named: str = "--budget", db: str | None = None
) -> None:
    s = outcome.summary
    width = max(len(label) for label, _ in s.lines())
    for label, value in s.lines():
        shown = f"{value:,}" if isinstance(value, int) else ("" if value is None else value)
        print(f"  {label:<{width}}  {shown}")
    for output in outcome.outputs:
        print(f"  wrote {output}")
    if rows_left(outcome):
        print(run_again(outcome, budget_named=budget_named, db=db) + "\n  " + command_line(argv))
    elif (failed := failed_rows(outcome)) is not None:
        print(f"{failed}. {RETRY_FAILED}\n  {command_line(argv)}")
