"""What a run would do before it spends anything (`decisions score --dry-run`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from pipeline.batch.distinct import costed
from pipeline.batch.execute import now, triage
from pipeline.batch.journal import Journal
from pipeline.batch.options import BatchOptions
from pipeline.batch.passes import first_pass
from pipeline.batch.prepare import Prepared
from pipeline.batch.scorers.base import Scorer
from pipeline.ledger.base import COST_WITH_REASONING


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
    reserve: int = 0  # left in the balance (--reserve)
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
        if self.reserve:
            rows.append(("Reserve (left in the balance)", self.reserve))
        return rows + list(self.read_as.items())


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
    first, _ = first_pass(unique, journal, scorer.version, mode, freshness_days)
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
        reserve=options.reserve,
        read_as=dict(prepared.notes),
        in_doubt_decisions=in_doubt_cost,
    )
