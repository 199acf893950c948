"""A batch run: read -> columns -> normalise -> validate -> plan -> score -> write.

Each step is a function from frame to frame; `run_batch` strings them together, keeps the
counts and decides the exit code (DESIGN.md: 0 all scored or rejected, 3 rows left unscored
for lack of budget or balance, 1 any other failure).
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Literal

import polars as pl

from pipeline.batch.budget import Budget
from pipeline.batch.columns import (
    DEFAULT_CONFIG,
    REQUIRED_FIELDS,
    ColumnConfig,
    ColumnMap,
    find_columns,
    load_column_config,
    map_columns,
)
from pipeline.batch.execute import (
    SECONDS_PER_DAY,
    Executor,
    Triage,
    now,
    triage,
    with_explained_answers,
)
from pipeline.batch.fingerprint import request_fingerprints
from pipeline.batch.header_row import header_below_title
from pipeline.batch.journal import Journal, LastRun
from pipeline.batch.normalize import normalize, normalize_column
from pipeline.batch.notes_below import notes_below
from pipeline.batch.positions import scattered
from pipeline.batch.result_columns import (
    REJECTS_SCHEMA,
    RESULT_SCHEMA,
    clash_free_names,
    in_rejects_schema,
)
from pipeline.batch.scorers.base import Scorer
from pipeline.batch.sheet_rows import hidden_rows_note, sheet_rows
from pipeline.batch.summary import RunSummary
from pipeline.batch.unmatched_places import unmatched_places
from pipeline.batch.validate import reject_reasons
from pipeline.engine.schema import REQUEST_SCHEMA
from pipeline.errors import (
    MissingColumnError,
    OutputError,
    PipelineError,
    UnknownHeaderError,
    UsageError,
)
from pipeline.io.csv_reader import describe_rows_in_quoted_cells
from pipeline.io.parquet_types import typed_input
from pipeline.io.read import ReadResult, check_input, read_table_with_info
from pipeline.io.write import check_output_capacity, output_format, write_output
from pipeline.ledger.base import COST_WITH_REASONING, cost_of

ReasoningMode = Literal["none", "all", "borderline"]

EXIT_OK, EXIT_FAILED, EXIT_UNSCORED = 0, 1, 3
EXPLANATIONS_NOT_AFFORDED = "Explanations not afforded"  # a summary line
WARNING = "Warning:"  # a summary line's label begins so: said even by a --quiet run
# error_code of a borderline row scored but left without its explanation
REASONING_SKIPPED, REASONING_FAILED = "reasoning_skipped", "reasoning_failed"
# Said when rows of a remote run ended in doubt after this run's own sends: not in its spend.
PERHAPS_CHARGED = "Perhaps charged, answers lost (in doubt; not in Decisions spent)"
# A row scored whose explanation was not afforded or failed: its message, said of the row.
NOT_SCORED, NOT_EXPLAINED = "not scored: ", "scored, but not explained: "


@dataclass(frozen=True, kw_only=True)
class BatchOptions:
    input: Path
    outputs: list[Path]
    config: Path | None = None
    reasoning: ReasoningMode = "none"
    budget: int | None = None
    priority: str | None = None
    encoding: str | None = None
    sheet: str | int | None = None
    csv_bom: bool = True


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


Progress = Callable[[str, int, int, int], None]  # (stage, rows done, rows total, decisions spent)


def file_fingerprint(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Prepared:
    raw: pl.DataFrame  # the file as read: text cells, original headers
    mapping: ColumnMap
    requests: pl.DataFrame  # REQUEST_SCHEMA columns + row_number
    problems: pl.DataFrame  # reject_reasons() per row; a row is rejected when its error_code is set
    # how the file was read, for the summary: the sheet (and those passed over), a title
    notes: list[tuple[str, object]] = field(default_factory=list)
    # the row a spreadsheet shows each row on (see sheet_rows); None for a Parquet file
    sheet_rows: pl.Series | None = None


def prepare(options: BatchOptions) -> Prepared:
    """Read, map, normalise and validate; charges nothing."""
    read = read_table_with_info(options.input, encoding=options.encoding, sheet=options.sheet)
    raw = read.frame
    source = str(options.input)
    if read.sheet is not None:  # a wrong sheet is the usual cause of a missing column
        first = ", the first with data; --sheet NAME reads another" if options.sheet is None else ""
        source += f" (sheet {read.sheet!r}{first})"
    config = load_column_config(options.config)
    raw, mapping, header_note, title_rows = _mapped(raw, config, source, read.renamed_headers or {})
    notes = _reading_notes(read, header_note)
    if read.rows_in_quoted_cells:
        notes += _rows_in_quoted_cells_note(read, raw)
    below = notes_below(raw)
    if below is not None:
        raw = below.table
        notes.append(
            (
                "Notes below the table",
                f"the {below.rows} row(s) under the last listing (a blank row, then notes such "
                f"as {below.first_note!r}) are not listings",
            )
        )
    _check_priority(raw, options.priority)  # before a dry run, and before anything is paid
    row_numbers = pl.Series("row_number", range(1, raw.height + 1), dtype=pl.Int64)
    rows_in_sheet = sheet_rows(read.first_row, title_rows, raw.height)
    hidden = hidden_rows_note(read.hidden_rows, rows_in_sheet)
    if hidden is not None:
        notes.append(hidden)
    requests = normalize(raw, mapping).with_columns(
        reasoning=pl.lit(options.reasoning == "all"), row_number=row_numbers
    )
    problems = reject_reasons(raw, requests, mapping, row_numbers, rows_in_sheet)
    return Prepared(raw, mapping, requests, problems, notes, rows_in_sheet)


def _mapped(
    raw: pl.DataFrame, config: ColumnConfig, source: str, renamed: dict[str, str]
) -> tuple[pl.DataFrame, ColumnMap, str | None, int]:
    """The table and its column map: under its first row, or under a header found below a
    title (header_row.py; then also the note that says so, and how many rows the title
    took)."""
    try:
        mapping = map_columns(raw.columns, config, source=source, as_written=renamed)
        return raw, mapping, None, 0
    except (MissingColumnError, UnknownHeaderError):
        if _maps_a_required_field(raw.columns, config, source, renamed):
            raise
        written = [h for h in raw.columns if h not in renamed or renamed[h].strip()]
        below = header_below_title(raw, config, source=source, first_row_cells=len(written))
        if below is None:
            raise
    headers = ", ".join(repr(h) for h in below.frame.columns[:3])
    note = (
        f"the row headed {headers}...: the {below.title_rows} row(s) above it"
        + (f" ({written[0]!r}...)" if written else "")
        + " are a title, not listings"
    )
    return below.frame, below.mapping, note, below.title_rows


_ENCODING_NAMES = {
    "cp1256": "Windows-1256, Arabic Excel's CSV",
    "utf-16": "UTF-16, Excel's Unicode text",
    "utf-16-le": "UTF-16 without a byte-order mark",
    "utf-16-be": "UTF-16 without a byte-order mark",
}


def _reading_notes(read: ReadResult, header_note: str | None) -> list[tuple[str, object]]:
    """How the file was read, for the summary and the dry run: the sheet (and the sheets
    passed over), a header under a title, merged and error cells."""
    notes: list[tuple[str, object]] = []
    if read.encoding_overridden is not None:
        notes.append(("Encoding", f"{read.encoding} ({read.encoding_overridden})"))
    elif read.encoding not in (None, "utf-8", "utf-8-sig"):  # UTF-8 goes without saying
        named = _ENCODING_NAMES.get(read.encoding)
        notes.append(("Encoding", f"{read.encoding} ({named})" if named else read.encoding))
    if read.sheet is not None:
        sheet = repr(read.sheet)
        if read.passed_over:
            sheet += (
                f" (the first visible sheet with data; passed over: {', '.join(read.passed_over)})"
            )
        notes.append(("Sheet", sheet))
    if header_note is not None:
        notes.append(("Header row", header_note))
    if read.not_restored:
        notes.append(
            (
                "Merged and error cells not read",
                f"{read.not_restored}: their place in the sheet could not be checked (no number "
                "cell to check it by); their rows were read as they stand (merged cells empty "
                "below their first row, error cells empty). Unmerge and fill them, or fix the "
                "errors, to have them read",
            )
        )
    if read.merged_down:
        shown = ", ".join(read.merged_down[:5]) + (", ..." if len(read.merged_down) > 5 else "")
        notes.append(("Merged cells filled down", f"{len(read.merged_down)} ({shown})"))
    return notes


def _rows_in_quoted_cells_note(read: ReadResult, table: pl.DataFrame) -> list[tuple[str, str]]:
    """The warning about quoted cells holding lines shaped like rows, by the rows and columns
    of `table`: the file read, or the table under a header found below a title."""
    shift = read.frame.height - table.height  # the rows above a header found below a title
    cells = [
        replace(
            cell,
            row=cell.row - shift,
            column=table.columns[read.frame.columns.index(cell.column)]
            if shift and table.width == read.frame.width
            else cell.column,
        )
        for cell in read.rows_in_quoted_cells or []
        if cell.row > shift
    ]
    return (
        [(f"{WARNING} rows inside a quoted cell", describe_rows_in_quoted_cells(cells))]
        if cells
        else []
    )


def _maps_a_required_field(
    headers: list[str], config: ColumnConfig, source: str, renamed: dict[str, str]
) -> bool:
    try:
        found = find_columns(headers, config, source=source, as_written=renamed)
    except UnknownHeaderError:
        return False  # a --config naming headers the first row does not have: maybe below
    return any(found[name] is not None for name in REQUIRED_FIELDS)


def distinct_requests(requests: pl.DataFrame) -> pl.DataFrame:
    """row_number -> request_id: equal requests in one file share one id (scored once).

    `requests` are `costed`: grouped on their sha256 fingerprints, the identity the journal
    already trusts to reuse an answer (a third of the time of grouping on every column)."""
    first_row = _first_rows(requests)
    return requests.with_columns(request_id=first_row, first=requests["row_number"] == first_row)


def _group_key(fingerprint: pl.Expr) -> pl.Expr:
    return fingerprint.hash()


def _first_rows(requests: pl.DataFrame) -> pl.Series:
    """The first row_number of each fingerprint. Grouped on a 64-bit hash of the text (half the
    time and memory of grouping on 64 hex characters); every copy is then checked to carry its
    first row's fingerprint, and two fingerprints sharing a hash are grouped on the text."""
    rows = requests["row_number"]
    keyed = requests.select("row_number", _key=_group_key(pl.col("fingerprint")))
    first = keyed.select(pl.col("row_number").min().over("_key"))["row_number"]
    copies = rows != first
    if copies.any() and not (rows.is_sorted() and _same_as_first(requests, first, copies)):
        first = requests.select(pl.col("row_number").min().over("fingerprint"))["row_number"]
    return first


def _same_as_first(requests: pl.DataFrame, first: pl.Series, copies: pl.Series) -> bool:
    rows, fingerprints = requests["row_number"], requests["fingerprint"]
    at_first = fingerprints.gather(rows.search_sorted(first.filter(copies)))
    return fingerprints.filter(copies).equals(at_first)


def costed(requests: pl.DataFrame, reasoning: bool, version: str) -> pl.DataFrame:
    """One pass's requests with their cost and fingerprint (which includes `reasoning`)."""
    cost = cost_of(reasoning)
    frame = requests.with_columns(reasoning=pl.lit(reasoning), cost=pl.lit(cost, pl.Int64))
    return frame.with_columns(request_fingerprints(frame, version))


def _check_priority(raw: pl.DataFrame, column: str | None) -> None:
    if column is not None and column not in raw.columns:
        raise UsageError(
            f"--priority {column!r}: the file has no such column; it has "
            + ", ".join(repr(c) for c in raw.columns)
        )


def prioritised(requests: pl.DataFrame, raw: pl.DataFrame, column: str | None) -> pl.DataFrame:
    """Highest value of `column` first (numbers read as numbers), then file order; `column`
    is one of `raw`'s (checked by `prepare`)."""
    if column is None:
        return requests
    values = normalize_column(raw[column], "price")
    order = pl.DataFrame({"request_id": pl.int_range(1, raw.height + 1, eager=True), "_p": values})
    return (
        requests.join(order, on="request_id", how="left", maintain_order="left")
        .sort("_p", descending=True, nulls_last=True, maintain_order=True)
        .drop("_p")
    )


def score_requests(
    unique: pl.DataFrame,
    executor: Executor,
    context: RunContext,
    progress: Progress,
) -> pl.DataFrame:
    """Score distinct valid requests (`costed` for the first pass); in borderline mode,
    reasoning for `partial` ones after."""
    mode = context.options.reasoning

    def report(stage: str, total: int) -> Callable[[int, int], None]:
        return lambda done, spent: progress(stage, done, total, spent)

    first = prioritised(unique, context.raw, context.options.priority)
    triaged, explained_before = _first_pass(
        first, executor.journal, executor.scorer.version, mode, context.freshness_days
    )
    results = executor.run(triaged, report("scoring", unique.height), keep_costs=context.resuming)
    results = _without_explanations(results, explained_before)
    if mode != "borderline":
        return results
    results = _with_explanation_cost(results)
    partial_ids = results.filter(pl.col("verdict") == "partial").select("request_id")
    if partial_ids.is_empty():
        return results
    again = costed(
        unique.join(partial_ids, on="request_id", how="semi"), True, executor.scorer.version
    )
    again = prioritised(again, context.raw, context.options.priority)
    triaged = triage(again, executor.journal, freshness_days=context.freshness_days, now=now())
    explained = executor.run(
        triaged, report("reasoning", again.height), keep_costs=context.resuming, explaining=True
    )
    return _merge_reasoning(results, explained)


REASONING_COLUMNS = ("reasoning_en", "reasoning_ar", "key_factors", "risk_flags")


def _with_explanation_cost(results: pl.DataFrame) -> pl.DataFrame:
    """Borderline mode: a row the scoring pass skipped says what a partial verdict adds, so a
    top-up sized on the messages is not short by the explanations."""
    more = f"decision(s), and {COST_WITH_REASONING} more if it scores partial (its explanation);"
    skipped = pl.col("status") == "skipped"
    return results.with_columns(
        error_message=pl.when(skipped)
        .then(pl.col("error_message").str.replace("decision(s);", more, literal=True))
        .otherwise("error_message")
    )


def _first_pass(
    requests: pl.DataFrame, journal: Journal | None, version: str, mode: str, days: float
) -> tuple[Triage, pl.Series]:
    """The first pass's requests by journal state (the run and its dry run alike); when that
    pass asks for no reasoning, the answers an earlier run gave them with reasoning count as
    done (see with_explained_answers), and the ids of those come back too."""
    at = now()
    triaged = triage(requests, journal, freshness_days=days, now=at)
    if mode == "all":
        return triaged, requests["request_id"].clear()
    return with_explained_answers(triaged, journal, version, freshness_days=days, now=at)


def _without_explanations(results: pl.DataFrame, ids: pl.Series) -> pl.DataFrame:
    """`results` with the rows of `ids` (answered from a reasoning request) as a scoring pass
    answers: no explanation, and nothing paid by this run."""
    if ids.is_empty():
        return results
    taken = pl.col("request_id").is_in(ids.implode())
    return results.with_columns(
        *(pl.when(taken).then(None).otherwise(c).alias(c) for c in REASONING_COLUMNS),
        decisions_used=pl.when(taken).then(0).otherwise("decisions_used"),
    )


def _merge_reasoning(results: pl.DataFrame, explained: pl.DataFrame) -> pl.DataFrame:
    """Borderline mode: the reasoning pass's text and cost onto the scoring pass's rows."""
    reasoning_columns = list(REASONING_COLUMNS)
    extra = explained.select(
        "request_id",
        *(pl.col(c).alias(f"_{c}") for c in reasoning_columns),
        pl.col("decisions_used").alias("_used"),
        pl.col("status").alias("_status"),
        pl.col("error_message").alias("_error"),
    )
    merged = results.join(extra, on="request_id", how="left", maintain_order="left")
    # The row stays scored; its missing explanation is said in error_code and error_message,
    # and the run's exit code (3 or 1) says to run it again.
    missing = pl.col("_status").is_in(["skipped", "failed"])
    code = pl.when(pl.col("_status") == "skipped").then(pl.lit(REASONING_SKIPPED))
    merged = merged.with_columns(
        *(pl.coalesce(f"_{c}", c).alias(c) for c in reasoning_columns),
        decisions_used=pl.col("decisions_used") + pl.col("_used").fill_null(0),
        error_code=pl.when(missing)
        .then(code.otherwise(pl.lit(REASONING_FAILED)))
        .otherwise("error_code"),
        error_message=pl.when(missing)
        .then(
            pl.concat_str(pl.lit(NOT_EXPLAINED), pl.col("_error").str.replace(f"^{NOT_SCORED}", ""))
        )
        .otherwise("error_message"),
    )
    return merged.drop(*(f"_{c}" for c in reasoning_columns), "_used", "_status", "_error")


def assemble(prepared: Prepared, keyed: pl.DataFrame, scored: pl.DataFrame) -> pl.DataFrame:
    """Every input row once, in input order: original columns, then the result columns."""
    problems = prepared.problems
    rejected = problems["error_code"].is_not_null()
    rows = prepared.raw.height
    # Positions, not joins: request_id and row_number are 1-based row numbers of the file.
    answer_of_request = scattered(
        pl.int_range(scored.height, eager=True, dtype=pl.UInt32), scored["request_id"], rows + 1
    )
    at_row = keyed["row_number"] - 1
    answer_of_row = scattered(answer_of_request.gather(keyed["request_id"]), at_row, rows)
    first = scattered(keyed["first"], at_row, rows)
    # One chunk per column first: `scored` holds a chunk per batch, and a gather over many
    # chunks finds each row's chunk (a million rows: 0.27 s, against 0.02 s + 0.07 s).
    result = (
        scored.rechunk()
        .select(pl.all().gather(answer_of_row))
        .with_columns(decisions_used=pl.when(pl.lit(first)).then("decisions_used").otherwise(0))
    )
    result = result.with_columns(
        row_number=pl.int_range(1, rows + 1, dtype=pl.Int64),
        status=pl.when(pl.lit(rejected)).then(pl.lit("rejected")).otherwise("status"),
        decisions_used=pl.when(pl.lit(rejected)).then(0).otherwise("decisions_used"),
        error_code=pl.coalesce(pl.lit(problems["error_code"]), "error_code"),
        error_field=pl.coalesce(pl.lit(problems["error_field"]), "error_field"),
        error_message=pl.coalesce(pl.lit(problems["error_message"]), "error_message"),
    ).select(pl.col(c).cast(t) for c, t in RESULT_SCHEMA.items())
    original = prepared.raw.rename(clash_free_names(prepared.raw.columns))
    return pl.concat([original, result], how="horizontal")


def rejects_table(prepared: Prepared) -> pl.DataFrame:
    sheet_row = (
        prepared.sheet_rows
        if prepared.sheet_rows is not None
        else pl.repeat(None, prepared.problems.height, dtype=pl.Int64, eager=True)
    )
    problems = prepared.problems.with_columns(
        row_number=prepared.requests["row_number"], sheet_row=sheet_row
    )
    return (
        problems.filter(pl.col("error_code").is_not_null())
        .select(
            pl.col("row_number"),
            pl.col("sheet_row"),
            pl.col("error_column").alias("column"),
            pl.col("error_field").alias("field"),
            pl.col("error_value").alias("value"),
            pl.col("error_message").alias("reason"),
        )
        .cast(REJECTS_SCHEMA)
    )


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


@dataclass(frozen=True)
class RunContext:
    options: BatchOptions
    raw: pl.DataFrame
    freshness_days: float
    resuming: bool  # the same input as an unfinished run: keep that run's costs in the output


@dataclass(frozen=True)
class Plan:
    """What a run would do, before it spends anything (--dry-run prints it)."""

    rows_total: int
    rejected: int
    duplicates: int
    already_scored: int
    in_doubt: int
    to_send: int
    scoring_decisions: int
    reasoning_decisions: int
    borderline_worst_case: int | None
    balance: int | None
    budget: int | None
    # rows in doubt cost nothing if their first send was charged (replayed), their cost if it
    # never arrived: the plan cannot tell which, so it says how much at most
    in_doubt_decisions: int = 0
    read_as: dict[str, object] = field(default_factory=dict)  # the sheet, header row, merges

    @property
    def decisions_needed(self) -> int:
        return self.scoring_decisions + self.reasoning_decisions

    @property
    def decisions_needed_at_most(self) -> int:
        """What the run can spend at worst: rows in doubt paid, and in borderline mode every
        verdict still unknown partial (`borderline_worst_case` counts both)."""
        if self.borderline_worst_case is not None:
            return self.borderline_worst_case
        return self.decisions_needed + self.in_doubt_decisions

    def lines(self) -> list[tuple[str, object]]:
        rows: list[tuple[str, object]] = [
            ("Rows", self.rows_total),
            ("Rejected (never sent, never charged)", self.rejected),
            ("Duplicates (scored once)", self.duplicates),
            ("Already scored (from the journal)", self.already_scored),
            ("In doubt (resent under the same keys: free if charged before)", self.in_doubt),
            ("To be sent", self.to_send),
            ("Decisions for scoring", self.scoring_decisions),
            ("Decisions for reasoning", self.reasoning_decisions),
        ]
        if self.borderline_worst_case is not None:
            rows.append(("Worst case with borderline reasoning", self.borderline_worst_case))
        if self.in_doubt_decisions:
            rows.append(
                ("Decisions for rows in doubt, at most (none if charged before)",
                 self.in_doubt_decisions)
            )  # fmt: skip
        rows.append(("Decisions needed", self.decisions_needed))
        if self.decisions_needed_at_most != self.decisions_needed:
            rows.append(("Decisions needed, at most", self.decisions_needed_at_most))
        rows += [
            ("Budget", "none" if self.budget is None else self.budget),
            ("Balance", "unknown" if self.balance is None else self.balance),
        ]
        return rows + list(self.read_as.items())


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
    summary = summarise(
        options, results, fingerprint=fingerprint, spent=0, balance=(balance, balance),
        workspace=workspace, started=datetime.now(UTC), clock=clock,
        notes=[
            ("Budget", "none" if options.budget is None else options.budget),
            ("Unchanged since the last run", "every answer reused (0 decisions)"),
            *journal.last_run_notes(),  # how the file was read, as that run said
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


def _typed_input(options: BatchOptions) -> pl.DataFrame | None:
    """A Parquet input's typed columns, for a Parquet or XLSX output (see
    pipeline.io.parquet_types)."""
    if check_input(options.input) != "parquet":
        return None
    if not any(output_format(o) in ("parquet", "xlsx") for o in options.outputs):
        return None
    return typed_input(options.input)


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


def _known_partial(
    unique: pl.DataFrame, reused: pl.DataFrame, journal: Journal | None
) -> pl.DataFrame:
    """The rows of `unique` whose scoring answer in the journal (`reused`) is partial."""
    if journal is None or reused.is_empty():
        return unique.clear()
    verdicts = journal.results(reused)["verdict"]
    partial = reused.filter(verdicts == "partial").select("request_id")
    return unique.join(partial, on="request_id", how="semi")


def make_plan(
    unique: pl.DataFrame, prepared: Prepared, keyed: pl.DataFrame, scorer: Scorer,
    journal: Journal | None, options: BatchOptions, freshness_days: float,
) -> Plan:  # fmt: skip
    mode = options.reasoning
    first, _ = _first_pass(unique, journal, scorer.version, mode, freshness_days)
    to_send = first.new.height + first.in_doubt.height
    in_doubt = first.in_doubt.height
    new_cost = int(first.new["cost"].sum() or 0)
    reasoning = new_cost if mode == "all" else 0
    in_doubt_cost = int(first.in_doubt["cost"].sum() or 0)
    worst = None
    if mode == "borderline":
        # Explanations owed for verdicts the journal already holds as partial are certain;
        # each row still to be scored may turn out partial too (the worst case).
        explain = _known_partial(unique, first.reuse, journal)
        second = triage(
            costed(explain, True, scorer.version), journal, freshness_days=freshness_days,
            now=now(),
        )  # fmt: skip
        reasoning = int(second.new["cost"].sum() or 0)
        in_doubt += second.in_doubt.height
        to_send += second.new.height + second.in_doubt.height
        # Requests in doubt are free when their first send was charged, paid when it never
        # arrived: the worst case pays them.
        in_doubt_cost += int(second.in_doubt["cost"].sum() or 0)
        unknown = first.new.height + first.in_doubt.height  # verdicts not known yet
        worst = new_cost + reasoning + in_doubt_cost + COST_WITH_REASONING * unknown
    return Plan(
        rows_total=prepared.raw.height,
        rejected=int(prepared.problems["error_code"].is_not_null().sum()),
        duplicates=keyed.height - unique.height,
        already_scored=first.reuse.height,
        in_doubt=in_doubt,
        to_send=to_send,
        scoring_decisions=first.new.height if mode != "all" else 0,
        reasoning_decisions=reasoning,
        borderline_worst_case=worst,
        balance=scorer.balance(),
        budget=options.budget,
        read_as=dict(prepared.notes),
        in_doubt_decisions=in_doubt_cost,
    )


def listing_keys(requests: pl.DataFrame) -> pl.Series:
    """Per row, which listing it is from one run to the next, whatever its position: its
    request without the price (the field an edit most often changes, and with it the
    verdict). An edit of another field makes it a new listing, with no change to report."""
    return requests.select(pl.struct(_LISTING_FIELDS).hash(_LISTING_SEED).alias("listing"))[
        "listing"
    ]


_LISTING_FIELDS = [c for c in REQUEST_SCHEMA if c not in ("price", "reasoning")]
_LISTING_SEED = 20261123


def changed_verdicts(
    results: pl.DataFrame, listings: pl.Series, previous: pl.DataFrame, label: str | None = None
) -> pl.DataFrame | None:
    """Rows whose verdict differs from the last verdict of the same listing (`listings`, one
    key per row of `results`; `previous`: `Journal.previous_verdicts`). Listings that occur
    more than once (tonight or last time) cannot be paired, and are left out. `label`: an
    input column shown beside the row number (the file's first: an id, a title, an address),
    as rows move from one night to the next."""
    if previous.is_empty():
        return None
    labelled = label is not None and label not in ("row_number", "old_verdict", "new_verdict")
    now_verdicts = pl.DataFrame(
        {
            "row_number": results["row_number"],
            **({label: results[label]} if labelled else {}),
            "new_verdict": results["verdict"],
            "listing": listings,
        }
    )  # columns taken, not selected: see `verdicts` in run_batch
    once = pl.len().over("listing") == 1
    both = now_verdicts.filter(once).join(
        previous.filter(pl.col("copies") == 1), on="listing", how="inner", maintain_order="left"
    )
    return both.filter(
        pl.col("old_verdict").is_not_null()
        & pl.col("new_verdict").is_not_null()
        & (pl.col("old_verdict") != pl.col("new_verdict"))
    ).select("row_number", *([label] if labelled else []), "old_verdict", "new_verdict")


def _same_file(output: Path, source: Path) -> bool:
    """True if writing `output` would replace `source` (another spelling, a link)."""
    if output.exists():
        return output.samefile(source)
    return output.resolve() == source.resolve()


@contextmanager
def _stop_records_spend(budget: Budget, balance_before: int | None) -> Iterator[None]:
    """A stop (Ctrl-C, SIGTERM) or a failure (a full disk under the journal, a database)
    once charging has begun carries what the run had paid, for the record of the stop:
    scoring, assembling or writing, the decisions are spent."""
    try:
        yield
    except (KeyboardInterrupt, PipelineError, sqlite3.Error) as stop:
        stop.decisions_spent = budget.spent  # type: ignore[union-attr]
        stop.balance_before = balance_before  # type: ignore[union-attr]
        raise


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
    for output in options.outputs:
        if _same_file(output, options.input):
            raise UsageError(
                f"{output}: is the input file, which scoring would overwrite; "
                "choose another output (-o)"
            )
    fingerprint = file_fingerprint(options.input)
    key = f"{fingerprint}:{_options_key(options, scorer)}"
    if journal is not None and not dry_run:
        last = journal.last_run(key, now() - freshness_days * SECONDS_PER_DAY)
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
    places = unmatched_places(valid, table) if table is not None else None
    if places is not None:  # said before paying (the plan) and in the summary
        prepared = replace(prepared, notes=[*prepared.notes, places])
    if dry_run:
        return make_plan(unique, prepared, keyed, scorer, journal, options, freshness_days)

    notes = list(prepared.notes)
    duplicates = ("Duplicate rows (scored once)", int(keyed.height - unique.height))
    resuming = False
    if journal is not None:
        unfinished = journal.open_run()
        resuming = unfinished == fingerprint
        if unfinished is not None and not resuming:
            notes.append(
                ("Input changed since the unfinished run", "its answers to rows still in the "
                 "file are reused, if fresh")
            )  # fmt: skip
        if not journal.holds_answers():  # a renamed input, another workspace: a job anew
            notes.append(("Run journal", f"new, no earlier answers to reuse: {journal.path}"))
        journal.start_run(fingerprint)
    balance_before = scorer.balance()
    budget = Budget(options.budget)
    executor = Executor(scorer, journal, budget)
    if resuming and journal is not None:
        executor.resumed_since = journal.open_run_since()
        if executor.resumed_since is None:  # begun by a version that did not record it
            notes.append(RESUMED_FROM_BEFORE)
    context = RunContext(options, prepared.raw, freshness_days, resuming)
    with _stop_records_spend(budget, balance_before):
        with ThreadPoolExecutor(max_workers=1) as aside:
            # Which listing each row is (a hash of every row, polars without the GIL) is worked
            # out on the other core while the rows are scored.
            keys = aside.submit(listing_keys, prepared.requests) if journal is not None else None
            scored = score_requests(unique, executor, context, progress)
            listings = keys.result() if keys is not None else None
        results = assemble(prepared, keyed, scored.drop("fingerprint"))
        rejects = rejects_table(prepared)
        changes = None
        if journal is not None:
            previous = journal.previous_verdicts()
            label = prepared.raw.columns[0] if prepared.raw.width else None
            changes = changed_verdicts(results, listings, previous, label)

        balance_after = scorer.balance()
        if balance_before is None and balance_after is not None:
            # A remote service tells the balance only in its answers: before = after + this
            # run's spend (what colleagues spent meanwhile is not known, so not counted).
            balance_before = balance_after + budget.spent
            notes.append(("Balance before", "the service's last answer plus this run's spend"))
        summary = summarise(
            options, results, fingerprint=fingerprint, spent=budget.spent,
            balance=(balance_before, balance_after), workspace=workspace, started=started,
            clock=clock,
            notes=[
                ("Budget", "none" if options.budget is None else options.budget),
                duplicates,
                ("Reused from the journal (0 decisions)", executor.reused),
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
                journal.keep_verdicts()
            except OSError as exc:
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
