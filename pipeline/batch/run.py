"""A batch run: read -> columns -> normalise -> validate -> plan -> score -> write.

Each step is a function from frame to frame, in a module of its own: `prepare` (read, map,
normalise, validate), `distinct` (costed, fingerprinted, each request once), `passes` (the
scoring passes), `assemble` (the output table), `plan` (a dry run), `verdict_changes`.
`run_batch` strings them together with the journal and the ledger, keeps the counts and
decides the exit code (labels.py: 0 all scored or rejected, 3 rows left unscored for lack of
budget or balance, 1 any other failure).
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.batch.assemble import assemble, rejects_table
from pipeline.batch.budget import Budget
from pipeline.batch.columns import DEFAULT_CONFIG
from pipeline.batch.distinct import costed, distinct_requests
from pipeline.batch.execute import SECONDS_PER_DAY, Executor, now
from pipeline.batch.journal import Journal, LastRun
from pipeline.batch.labels import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNSCORED,
    EXPLANATIONS_NOT_AFFORDED,
    PERHAPS_CHARGED,
    REASONING_FAILED,
    REASONING_SKIPPED,
    STILL_NEEDED,
    WARNING,
)
from pipeline.batch.options import BatchOptions
from pipeline.batch.passes import Progress, RunContext, score_requests
from pipeline.batch.plan import Plan, make_plan
from pipeline.batch.prepare import file_fingerprint, prepare
from pipeline.batch.result_columns import RESULT_SCHEMA, clash_free_names, in_rejects_schema
from pipeline.batch.scorers.base import SKIPPED_BUDGET, Scorer
from pipeline.batch.summary import RunSummary
from pipeline.batch.unmatched_places import place_notes
from pipeline.batch.verdict_changes import changed_verdicts, listing_keys
from pipeline.errors import OutputError, PipelineError, UsageError
from pipeline.io.parquet_types import typed_input
from pipeline.io.read import check_input
from pipeline.io.write import check_output_capacity, output_format, write_output
from pipeline.ledger.base import COST_WITH_REASONING


@dataclass
class BatchOutcome:
    summary: RunSummary
    results: pl.DataFrame
    rejects: pl.DataFrame
    outputs: list[Path] = field(default_factory=list)
    changes: pl.DataFrame | None = None

    @property
    def exit_code(self) -> int:
        return self.summary.exit_code


def _counts(results: pl.DataFrame, column: str, keys: tuple[str, ...]) -> dict[str, int]:
    """How many rows hold each of `keys` in `column` (a comparison per key: a quarter of the
    time of counting every value, as a million rows have few keys)."""
    values = results[column]
    return {k: int((values == k).sum()) for k in keys}


def exit_code_for(status_counts: dict[str, int], unexplained: dict[str, int] | None = None) -> int:
    """1 if a row (or its borderline explanation) failed; 3 if one was not afforded; else 0."""
    unexplained = unexplained or {}
    if status_counts.get("failed") or unexplained.get(REASONING_FAILED):
        return EXIT_FAILED
    if status_counts.get("skipped") or unexplained.get(REASONING_SKIPPED):
        return EXIT_UNSCORED
    return EXIT_OK


def summarise(
    options: BatchOptions,
    results: pl.DataFrame,
    *,
    fingerprint: str,
    spent: int,
    balance: tuple[int | None, int | None],
    workspace: str | None,
    started: datetime,
    clock: float,
    notes: list[tuple[str, object]],
) -> RunSummary:
    """The run's summary, counted from its results (balance: before and after)."""
    statuses = _counts(results, "status", ("scored", "rejected", "skipped", "failed"))
    unexplained = _counts(results, "error_code", (REASONING_SKIPPED, REASONING_FAILED))
    if any(unexplained.values()):
        notes = [*notes, (EXPLANATIONS_NOT_AFFORDED, unexplained[REASONING_SKIPPED])]
        notes += [("Explanations failed", unexplained[REASONING_FAILED])]
    return RunSummary(
        input_path=str(options.input),
        input_fingerprint=fingerprint,
        rows_total=results.height,
        counts_by_status=statuses,
        counts_by_verdict=_counts(results, "verdict", ("match", "partial", "no_match")),
        decisions_spent=spent,
        balance_before=balance[0],
        balance_after=balance[1],
        started_at=started,
        duration_s=time.perf_counter() - clock,
        workspace=workspace,
        exit_code=exit_code_for(statuses, unexplained),
        notes=[("Reasoning", options.reasoning), *notes],
    )


@cache
def _code_digest() -> str:
    """The package's code and data as one digest: after an upgrade that reads, normalises or
    validates rows otherwise (a new type synonym, a new rule), an unchanged file is run again
    (its answers reused from the journal, free), not answered with an output made the old way."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.suffix in (".py", ".toml")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _options_key(options: BatchOptions, scorer: Scorer) -> str:
    """What, besides the input's bytes, decides a run's output: a rerun with the same key and
    the same input can answer from the last run's output without reading the file again. A
    --priority (which column orders the rows when money is short) is in it too, so a new one
    is checked against the file's columns."""
    config = options.config.read_bytes() if options.config else b""
    parts = [
        _code_digest(),
        scorer.version,
        options.reasoning,
        str(options.encoding),
        str(options.sheet),
        str(options.priority),
        hashlib.sha256(config).hexdigest(),
        hashlib.sha256(DEFAULT_CONFIG.read_bytes()).hexdigest(),
    ]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def still_needed(requests: pl.DataFrame, scored: pl.DataFrame) -> int:
    """The decisions a run would need to score the distinct `requests` it left `skipped` (at
    their cost) and to explain those it left unexplained; 0 when it left none. A row skipped
    in borderline mode needs its explanation too if it scores partial: not counted, as not
    known."""
    skipped = scored.filter(pl.col("status") == "skipped").select("request_id")
    cost = requests.join(skipped, on="request_id", how="semi")["cost"].sum()
    unexplained = int((scored["error_code"] == REASONING_SKIPPED).sum())
    return int(cost or 0) + unexplained * COST_WITH_REASONING


def _first_column(columns: list[str]) -> str | None:
    """The input's first column as the results name it (`status (input)` when the input has a
    column named like a result column, a scored file scored again)."""
    if not columns:
        return None
    return clash_free_names(columns).get(columns[0], columns[0])


def _changes_since_not_kept(journal: Journal, options: BatchOptions) -> bool:
    """Whether the changes the run should list are since a history older than the last run's
    (a night's second run: since the last night's, not since the night's first run), which
    the last run's output kept to answer again does not list."""
    since = options.changes_since
    return since is not None and journal.verdicts_kept_since(since)


def _kept_aside_as_of(options: BatchOptions) -> float:
    """The history a run's verdicts replace is kept aside if it was kept before then (see
    `Journal.keep_verdicts`): a night's start; for a run by hand, the start of its day, the
    night of that date then compares with the history as it stood before it (QA 67: the
    night took the history a run by hand had kept that day for its own runs', and listed the
    changes since the night before last)."""
    if options.changes_since is not None:
        return options.changes_since
    return datetime.combine(date.today(), datetime.min.time()).timestamp()


def _answer_again(
    options: BatchOptions,
    scorer: Scorer,
    journal: Journal,
    last: tuple[pl.DataFrame, pl.DataFrame],
    fingerprint: str,
    workspace: str | None,
    clock: float,
) -> BatchOutcome:
    """An unchanged file: the last run's output again, every row at 0 decisions."""
    results, rejects = last[0], in_rejects_schema(last[1])  # kept by an earlier version, maybe
    results = results.with_columns(decisions_used=pl.lit(0, pl.Int64))
    for output in options.outputs:
        check_output_capacity(output, results.height)
    balance = scorer.balance()
    notes_then = journal.last_run_notes()
    summary = summarise(
        options, results, fingerprint=fingerprint, spent=0, balance=(balance, balance),
        workspace=workspace, started=datetime.now(UTC), clock=clock,
        notes=[
            ("Budget", "none" if options.budget is None else options.budget),
            ("Unchanged since the last run", "every answer reused (0 decisions)"),
            *_reused_again(results, notes_then),
            # the history is the last run's (a run kept since would have forgotten it)
            ("Verdicts changed since last run", 0),
            *notes_then,  # how the file was read, as that run said
            ("Scorer", scorer.name),
        ],
    )  # fmt: skip
    typed = _typed_input(options)
    for output in options.outputs:
        write_output(
            output, results, rejects=rejects, summary=summary, csv_bom=options.csv_bom,
            typed_input=typed,
        )  # fmt: skip
    # The listings' verdicts kept by the run answered again are this run's too: unchanged.
    summary = replace(summary, duration_s=time.perf_counter() - clock)
    return BatchOutcome(summary, results, rejects, list(options.outputs), None)


def _reused_again(
    results: pl.DataFrame, notes_then: list[tuple[str, object]]
) -> list[tuple[str, object]]:
    """The figure a full run gives, for a monitor reading it: every distinct request scored
    is reused (the rows scored, less the duplicates the kept run counted)."""
    duplicates = dict(notes_then).get(DUPLICATES)
    scored = int((results["status"] == "scored").sum())
    return [(REUSED, scored - (duplicates if isinstance(duplicates, int) else 0))]


def _typed_input(options: BatchOptions) -> pl.DataFrame | None:
    """A Parquet input's typed columns, for a Parquet or XLSX output (see
    pipeline.io.parquet_types)."""
    if check_input(options.input) != "parquet":
        return None
    if not any(output_format(o) in ("parquet", "xlsx") for o in options.outputs):
        return None
    return typed_input(options.input)


DUPLICATES = "Duplicate rows (scored once)"
REUSED = "Reused from the journal (0 decisions)"
RESUMED_FROM_BEFORE = (
    "Decisions used (a run resumed)",
    "begun by a version before 2026-11-25: rows answered from the journal show their cost, "
    "whenever it was paid (earlier runs' too); the ledger's entries have the account",
)


VERDICTS_NOT_KEPT = (
    f"{WARNING} this run's verdicts were not kept",
    "the next run lists no verdicts changed since this one",
)


RUN_NOT_KEPT = (
    f"{WARNING} the journal's copy of this run was not kept",
    "a rerun of the unchanged file is answered from the journal's answers, free",
)


def _failure_of(saved: Future[Any] | None) -> BaseException | None:
    return None if saved is None else saved.exception()


def _not_kept(failure: BaseException | None, said: tuple[str, str]) -> list[tuple[str, object]]:
    """A summary note if a journal's file could not be written (`failure`), with why."""
    if failure is None:
        return []
    if not isinstance(failure, OSError | PipelineError | pl.exceptions.PolarsError):
        raise failure
    label, consequence = said
    return [(label, f"{failure}; {consequence}")]


def _unexplained(results: pl.DataFrame) -> bool:
    """Rows left without their borderline explanation: a last run kept as finished before
    that made a run exit 3 (up to 640bbde) is not finished, and is run again."""
    return bool(results["error_code"].is_in([REASONING_SKIPPED, REASONING_FAILED]).any())


def _budget_as_named(results: pl.DataFrame, options: BatchOptions) -> pl.DataFrame:
    """Rows left for lack of budget say where it is set: a nightly job has no --budget."""
    if options.budget_named == "--budget":
        return results
    left = pl.col("error_code").is_in([SKIPPED_BUDGET, REASONING_SKIPPED])  # no user text
    named = pl.col("error_message").str.replace_all("--budget", options.budget_named, literal=True)
    return results.with_columns(error_message=pl.when(left).then(named).otherwise("error_message"))


def _fresh_as_when_begun(journal: Journal | None, fingerprint: str, days: float) -> float:
    """The freshness window of a run that resumes an unfinished run of the same input: the
    answers that run recorded are fresh, whenever it began (QA 35: resumed past the window,
    a run paid again every answer the stopped run had paid)."""
    if journal is None or journal.open_run() != fingerprint:
        return days
    began = journal.open_run_since()
    # fresh now, or recorded since that run began (QA 36: not every answer as old as the
    # window plus that run's age, which a night stopped by its budget widened every night)
    return days if began is None else max(days, (now() - began) / SECONDS_PER_DAY)


def _same_file(output: Path, source: Path) -> bool:
    """True if writing `output` would replace `source` (another spelling, a link)."""
    if output.exists():
        return output.samefile(source)
    return output.resolve() == source.resolve()


@contextmanager
def _stop_records_spend(budget: Budget, balance_before: int | None) -> Iterator[None]:
    """A stop (Ctrl-C, SIGTERM) or a failure (a full disk under the journal, a database)
    once charging has begun carries what the run had paid, and perhaps paid, for the record
    of the stop: scoring, assembling or writing, the decisions are spent."""
    try:
        yield
    except (KeyboardInterrupt, PipelineError, sqlite3.Error) as stop:
        stop.decisions_spent = budget.spent  # type: ignore[union-attr]
        stop.decisions_perhaps_charged = budget.perhaps_charged  # type: ignore[union-attr]
        stop.balance_before = balance_before  # type: ignore[union-attr]
        raise


def _new_journal(journal: Journal | None, scorer_version: str) -> tuple[str, str] | None:
    """The summary's note on a journal whose answers this run cannot reuse: one that holds none
    yet (a renamed input, another workspace: a job anew), saying so when the job was scored
    before, or one whose answers another version of the scorer made. A new version of the
    formulas or the benchmark tables makes new answers (a default journal of its own), and every
    row is paid again once (QA 39: a nightly's summary did not say why)."""
    if journal is None:
        return None
    if journal.holds_batches():
        before = journal.scored_by()
        if before is None or before == scorer_version:
            return None
        return (
            "Scorer changed since the last run",
            f"{before} -> {scorer_version}: the journal's answers were made by the other, and "
            "are not reused; rows are scored, and paid, again",
        )
    if journal.previous_verdicts()["old_verdict"].is_null().all():  # (a run that paid nothing)
        return ("Run journal", f"new, no earlier answers to reuse: {journal.path}")
    return (
        "Run journal",
        f"new: {journal.path}. This job was scored before (its verdicts are kept), by another "
        "version of the formulas or benchmark tables, whose answers are not reused, or with a "
        "journal since removed (--fresh): its rows are scored, and paid, again",
    )


def run_batch(
    options: BatchOptions,
    scorer: Scorer,
    *,
    journal: Journal | None = None,
    workspace: str | None = None,
    progress: Progress | None = None,
    freshness_days: float = 30.0,
    dry_run: bool = False,
) -> BatchOutcome | Plan:
    started, clock = datetime.now(UTC), time.perf_counter()
    progress = progress or (lambda *_: None)
    for output in options.outputs:
        check_output_capacity(output, 0)  # unknown extensions fail before any reading
    check_input(options.input)  # a missing or mislabelled file stops here, before anything else
    for i, output in enumerate(options.outputs):
        if _same_file(output, options.input):
            raise UsageError(
                f"{output}: is the input file, which scoring would overwrite; "
                "choose another output (-o)"
            )
        if any(_same_file(output, earlier) for earlier in options.outputs[:i]):
            raise UsageError(f"{output}: is named twice as an output (-o); name it once")
    fingerprint = file_fingerprint(options.input)
    key = f"{fingerprint}:{_options_key(options, scorer)}"
    if journal is not None and not dry_run:
        last = journal.last_run(key, now() - freshness_days * SECONDS_PER_DAY)
        if _changes_since_not_kept(journal, options):
            last = None  # its output lists the changes since a later history than asked
        if last is not None and not _unexplained(last[0]):
            return _answer_again(options, scorer, journal, last, fingerprint, workspace, clock)
    prepared = prepare(options)
    width = prepared.raw.width + len(RESULT_SCHEMA)  # the output: input columns, then ours
    for output in options.outputs:
        check_output_capacity(output, prepared.raw.height, width)
    progress("read", prepared.raw.height, prepared.raw.height, 0)

    valid = prepared.requests.filter(pl.lit(prepared.problems["error_code"].is_null()))
    keyed = distinct_requests(costed(valid, options.reasoning == "all", scorer.version))
    unique = keyed.filter(pl.col("first")).drop("first", "row_number")
    table = scorer.benchmarks()
    if table is not None:  # said before paying (the plan) and in the summary
        prepared = replace(
            prepared, notes=[*prepared.notes, *place_notes(valid, table, prepared.sheet_rows)]
        )
    if dry_run:
        days = _fresh_as_when_begun(journal, fingerprint, freshness_days)
        if (anew := _new_journal(journal, scorer.version)) is not None:  # before paying again
            prepared = replace(prepared, notes=[*prepared.notes, anew])
        return make_plan(unique, prepared, keyed, scorer, journal, options, days)

    notes = list(prepared.notes)
    duplicates = (DUPLICATES, int(keyed.height - unique.height))
    resuming = False
    if journal is not None:
        unfinished = journal.open_run()
        resuming = unfinished == fingerprint
        if unfinished is not None and not resuming:
            notes.append(
                ("Input changed since the unfinished run", "its answers to rows still in the "
                 "file are reused, if fresh")
            )  # fmt: skip
        if (anew := _new_journal(journal, scorer.version)) is not None:
            notes.append(anew)
        journal.start_run(fingerprint)
        journal.remember_scorer(scorer.version)
    balance_before = scorer.balance()
    budget = Budget(options.budget)
    executor = Executor(scorer, journal, budget, reserve=options.reserve)
    if resuming and journal is not None:
        executor.resumed_since = journal.open_run_since()
        if executor.resumed_since is None:  # begun by a version that did not record it
            notes.append(RESUMED_FROM_BEFORE)
    days = freshness_days
    if resuming:
        days = _fresh_as_when_begun(journal, fingerprint, freshness_days)
    context = RunContext(options, prepared.raw, days, resuming)
    with _stop_records_spend(budget, balance_before):
        with ThreadPoolExecutor(max_workers=1) as aside:
            # Which listing each row is (a hash of every row, polars without the GIL) is worked
            # out on the other core while the rows are scored.
            keys = aside.submit(listing_keys, prepared.requests) if journal is not None else None
            scored = score_requests(unique, executor, context, progress)
            listings = keys.result() if keys is not None else None
        results = _budget_as_named(assemble(prepared, keyed, scored.drop("fingerprint")), options)
        if needed := still_needed(unique, scored):
            notes.append((STILL_NEEDED, needed))
        rejects = rejects_table(prepared)
        changes = None
        if journal is not None:
            previous = journal.previous_verdicts(as_of=options.changes_since)
            label = _first_column(prepared.raw.columns)
            changes = changed_verdicts(results, listings, previous, label)

        balance_after = scorer.balance()
        if balance_before is None and balance_after is not None:
            # A remote service tells the balance only in its answers: before = after + this
            # run's spend (what colleagues spent meanwhile is not known, so not counted).
            balance_before = balance_after + budget.spent
            how = "the service's last answer plus this run's spend"
            notes.append(("Balance before, counted as", how))
        summary = summarise(
            options, results, fingerprint=fingerprint, spent=budget.spent,
            balance=(balance_before, balance_after), workspace=workspace, started=started,
            clock=clock,
            notes=[
                ("Budget", "none" if options.budget is None else options.budget),
                duplicates,
                (REUSED, executor.reused),
                *([(f"Answers older than {freshness_days:g} days, paid again", executor.stale)]
                  if executor.stale else []),
                *([("Explanations reused from the journal", executor.explanations_reused)]
                  if executor.explanations_reused else []),
                *([("Replayed from an earlier run's charges (not paid again)", executor.replayed)]
                  if executor.replayed else []),
                *([(PERHAPS_CHARGED, budget.in_doubt)] if budget.in_doubt else []),
                ("Verdicts changed since last run", 0 if changes is None else changes.height),
                ("Scorer", scorer.name),
                *notes,
            ],
        )  # fmt: skip
        exit_code = summary.exit_code
        # A finished run is kept in the journal, to answer a rerun of the unchanged file.
        keeping = journal if journal is not None and exit_code == EXIT_OK else None
        if keeping is not None:
            keeping.forget_last_run()  # its files are about to be rewritten
        typed = _typed_input(options)
        # A Parquet output holding exactly `results` (no input column typed again): the journal's
        # copy is then a copy of its bytes.
        parquet = next((o for o in options.outputs if output_format(o) == "parquet"), None)
        if typed is not None:
            parquet = None
        written: list[Path] = []
        kept: Future[str] | None = None  # the last run's files kept: their checksums
        verdicts_kept: Future[None] | None = None
        try:
            with ThreadPoolExecutor(max_workers=1) as beside:
                # The journal's files are written while the outputs are (polars writes release the
                # GIL): this run's verdicts, and a copy of the output a rerun of an unchanged file
                # answers from.
                if journal is not None:
                    # Taken, not selected: an eager select on `results` (input columns in the
                    # reader's chunks, ours in one) first copies every column into aligned
                    # chunks, 0.1-0.3 s a million rows.
                    verdicts = pl.DataFrame({"verdict": results["verdict"], "listing": listings})
                    verdicts_kept = beside.submit(
                        journal.save_verdicts, verdicts, previous, pending=True
                    )
                if keeping is not None and parquet is None:
                    kept = beside.submit(keeping.write_last_run, results, rejects)
                for output in options.outputs:
                    progress(f"writing {output.name}", 0, results.height, budget.spent)
                    write_output(
                        output, results, rejects=rejects, summary=summary, changes=changes,
                        csv_bom=options.csv_bom, typed_input=typed,
                    )  # fmt: skip
                    written.append(output)
                    progress(f"writing {output.name}", results.height, results.height, budget.spent)
                    if keeping is not None and output == parquet:
                        kept = beside.submit(
                            keeping.write_last_run, results, rejects, written=output
                        )
        except (PipelineError, KeyboardInterrupt) as exc:
            # Charged by then: the caller's record of the failure (or of the stop) says what was
            # paid, and what was written.
            failure = exc
            if isinstance(exc, OutputError) and journal is not None:
                failure = OutputError(
                    f"{exc}. What was paid is kept in the run journal: fix this and run the "
                    "same command again, which pays nothing twice"
                )
            failure.outcome = BatchOutcome(summary, results, rejects, written, changes)  # type: ignore[union-attr]
            failure.scorer_version = scorer.version  # type: ignore[union-attr]
            if failure is exc:
                raise
            raise failure from exc
        if keeping is not None:
            last_run = None
            if kept is not None and kept.exception() is None:
                oldest = min(executor.oldest_reused, started.timestamp())
                notes = [duplicates, *prepared.notes]
                last_run = LastRun(key, oldest, notes, checksums=kept.result())
            keeping.finish_run(freshness_days, keep=last_run)
        # Last, the outputs written and the run closed: this run's verdicts become the history
        # the next one compares with. A run that fails or is stopped before has its changes
        # listed again by the next (kept earlier, they were listed by none).
        verdicts_failure = _failure_of(verdicts_kept)
        if journal is not None and verdicts_kept is not None and verdicts_failure is None:
            try:
                journal.keep_verdicts(as_of=_kept_aside_as_of(options))
                if keeping is None:
                    # The history is now this run's: an unchanged file of the last run kept
                    # is run again (free), to list what changed since this one (QA 33).
                    journal.forget_last_run()
            except (OSError, sqlite3.Error) as exc:
                verdicts_failure = exc
        # The journal's copies serve the next run only: one not kept (a full disk under the
        # journal) is said, and costs the run nothing (its outputs are written).
        not_kept = _not_kept(verdicts_failure, VERDICTS_NOT_KEPT) + _not_kept(
            _failure_of(kept), RUN_NOT_KEPT
        )
        if not_kept:
            summary = replace(summary, notes=[*summary.notes, *not_kept])
        summary = replace(summary, duration_s=time.perf_counter() - clock)
        return BatchOutcome(summary, results, rejects, list(options.outputs), changes)
