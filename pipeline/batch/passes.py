"""The scoring passes of a run: every distinct request, then (--reasoning borderline) the
explanations of those scored partial, each pass through the journal and the executor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from pipeline.batch.distinct import costed, prioritised
from pipeline.batch.execute import Executor, Triage, now, triage, with_explained_answers
from pipeline.batch.journal import Journal
from pipeline.batch.labels import NOT_EXPLAINED, NOT_SCORED, REASONING_FAILED, REASONING_SKIPPED
from pipeline.batch.options import BatchOptions
from pipeline.ledger.base import COST_WITH_REASONING

Progress = Callable[[str, int, int, int], None]  # (stage, rows done, rows total, decisions spent)


@dataclass(frozen=True)
class RunContext:
    options: BatchOptions
    raw: pl.DataFrame
    freshness_days: float
    resuming: bool  # the same input as an unfinished run: keep that run's costs in the output


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
    triaged, explained_before = first_pass(
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


def first_pass(
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
