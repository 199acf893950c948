"""Scoring distinct requests through the journal: reuse, resend in doubt, budget, stop.

For each distinct valid request of the file (one pass of `--reasoning`):

- done in the journal and fresh enough: its stored answer is reused, nothing is sent;
- sent (or failed) in an earlier run with no answer recorded: sent again in the same batch
  under the same keys, so the ledger or the service replays the first charge;
- otherwise planned with a new idempotency key and sent in batches, each batch trimmed first
  to what the budget and the known balance can pay, and marked sent before it leaves.

Once a batch comes back short of budget or balance, nothing more is sent: the remaining rows
end `skipped` with the reason and the decisions they still need.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import polars as pl

from pipeline.batch.budget import Budget
from pipeline.batch.fingerprint import request_fingerprints
from pipeline.batch.journal import STATE_SCHEMA, Journal
from pipeline.batch.scorers.base import (
    OUTPUT_SCHEMA,
    SKIPPED_BALANCE,
    SKIPPED_BUDGET,
    Scorer,
    budget_spent,
    skipped_rows,
)

StageProgress = Callable[[int, int], None]  # (requests handled, decisions spent)

# Said of a row in doubt that the budget or the balance kept from going again.
STILL_IN_DOUBT = (
    " (an earlier run stopped while sending it, so it may have been charged: the next run"
    " sends it under the same key, and a charge made then is replayed, not made again)"
)

SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class Triage:
    """The requests of one pass, sorted by what the journal knows of them."""

    reuse: pl.DataFrame  # done and fresh: answer from the journal
    in_doubt: pl.DataFrame  # sent or failed before, no answer: resend under the same keys
    new: pl.DataFrame  # never sent (or stale): new keys
    stale: int = 0  # of `new`, those whose answer went stale (older than freshness_days)


def triage(
    requests: pl.DataFrame, journal: Journal | None, *, freshness_days: float, now: float
) -> Triage:
    """Split `requests` (request columns + request_id, cost, fingerprint) by journal state."""
    if journal is None:
        empty = requests.clear()
        return Triage(empty, empty, requests.with_columns(_no_state()))
    joined = requests.with_columns(journal.states(requests["fingerprint"]).drop("fingerprint"))
    # One chunk per column: filtered below, columns of several chunks (the streamed fingerprints)
    # made polars 2.1 panic in pl.format on the `new` rows of a resumed run (index out of
    # bounds in a string view). A join, as before, left them whole; a rechunk costs 0.03 s.
    joined = joined.rechunk()
    fresh_after = now - freshness_days * SECONDS_PER_DAY
    done = (pl.col("state") == "done") & (pl.col("scored_at") >= fresh_after)
    doubt = pl.col("state").is_in(["sent", "failed"])
    stale = (pl.col("state") == "done") & (pl.col("scored_at") < fresh_after)
    return Triage(
        reuse=joined.filter(done),
        in_doubt=joined.filter(doubt & ~done),
        new=joined.filter(~done.fill_null(False) & ~doubt.fill_null(False)),
        stale=int(joined.select(stale.sum()).item() or 0),
    )


def with_explained_answers(
    triaged: Triage,
    journal: Journal | None,
    version: str,
    *,
    freshness_days: float,
    now: float,
) -> tuple[Triage, pl.Series]:
    """A scoring pass (no reasoning) whose new requests an earlier run answered with reasoning
    (`--reasoning all`): those answers hold their verdicts and scores, so they are reused, free,
    instead of being paid for again. The ids of the requests so answered, whose explanation
    the caller drops (this pass asked for none)."""
    ids = pl.Series("request_id", [], dtype=triaged.new.schema.get("request_id", pl.Int64))
    if journal is None or triaged.new.is_empty() or not journal.holds_answers():
        return triaged, ids  # (a first run: no fingerprints to compute, 0.4 s a million rows)
    asked = triaged.new.drop([c for c in STATE_SCHEMA if c != "fingerprint"], strict=False)
    explained = asked.with_columns(
        fingerprint=request_fingerprints(asked.with_columns(reasoning=pl.lit(True)), version)
    )
    found = triage(explained, journal, freshness_days=freshness_days, now=now).reuse
    if found.is_empty():
        return triaged, ids
    ids = found["request_id"]
    return (
        Triage(
            reuse=pl.concat([triaged.reuse, found], how="vertical_relaxed"),
            in_doubt=triaged.in_doubt,
            new=triaged.new.filter(~pl.col("request_id").is_in(ids.implode())),
            stale=triaged.stale,
        ),
        ids,
    )


def _no_state() -> list[pl.Expr]:
    return [
        pl.lit(None, pl.String).alias(c)
        for c in ("idempotency_key", "state", "batch_key", "result_file")
    ] + [pl.lit(None, pl.Float64).alias("scored_at")]


def _new_keys(new: pl.DataFrame, journal_id: str) -> pl.DataFrame:
    """Keys for requests never sent, or whose stored answer went stale (a new charge)."""
    stamp = uuid.uuid4().hex[:8]
    fresh_key = pl.format(
        "pd-{}-{}-{}",
        pl.lit(journal_id[:12]),
        pl.col("fingerprint").str.slice(0, 24),
        pl.lit(stamp),
    )
    return new.with_columns(idempotency_key=fresh_key)


def _affordable(costs: pl.Series, available: int | None) -> int:
    """How many of `costs` (positive), taken in order, `available` decisions pay for."""
    if available is None:
        return costs.len()
    return int((costs.cum_sum() <= available).sum())


@dataclass
class Executor:
    scorer: Scorer
    journal: Journal | None
    budget: Budget
    reserve: int = 0
    reused: int = 0  # requests of the scoring pass answered from the journal
    explanations_reused: int = 0  # borderline: explanations of the reasoning pass, likewise
    # decisions charged by an earlier run that stopped before its answers came back (so no
    # run's spending counts them), whose charges this run replayed
    replayed: int = 0
    oldest_reused: float = float("inf")  # when the oldest answer reused was scored
    stale: int = 0  # requests of the scoring pass whose answer went stale, paid again
    # A resumed run (`keep_costs`): when the run it resumes began. The answers it reuses that
    # were recorded before then were paid by earlier runs, not by this job: 0 in the output.
    resumed_since: float | None = None

    def run(
        self,
        triaged: Triage,
        progress: StageProgress,
        *,
        keep_costs: bool,
        explaining: bool = False,
    ) -> pl.DataFrame:
        """OUTPUT_SCHEMA rows for every request of `triaged`, plus `fingerprint`.
        `explaining`: the reasoning pass of a borderline run."""
        parts = [self._reused(triaged.reuse, keep_costs)]
        if explaining:
            self.explanations_reused += triaged.reuse.height
        else:
            self.reused += triaged.reuse.height
        handled = triaged.reuse.height
        stop: tuple[str, str] | None = None
        groups, never_charged = self._doubt_groups(triaged.in_doubt)
        for group in groups:
            answers = self._send(group, keep_costs=keep_costs, in_doubt=True)
            parts.append(answers)
            handled += group.height
            progress(handled, self.budget.spent)
            stop = stop or _stop_reason(answers, self.reserve)
        journal_id = self.journal.journal_id if self.journal is not None else uuid.uuid4().hex
        new = pl.concat([triaged.new, *never_charged], how="vertical_relaxed")
        first_new = len(parts)
        for answers, sent in self._new_batches(_new_keys(new, journal_id), stop):
            parts.append(answers)
            if sent:
                handled += answers.height
                progress(handled, self.budget.spent)
        if triaged.stale and not explaining:
            self.stale += _paid_again(triaged.new, parts[first_new:])
        if self.journal is not None:
            self.journal.flush()
        return pl.concat([p for p in parts if not p.is_empty()] or [_empty()], how="vertical")

    def _new_batches(
        self, new: pl.DataFrame, stop: tuple[str, str] | None
    ) -> Iterator[tuple[pl.DataFrame, bool]]:
        """(answers, sent) for each batch of `new` in turn; once sending stops, the rows left
        as `skipped` with the reason (not sent)."""
        ahead: _Ahead | None = None
        affordable = new.head(_affordable(new["cost"], self._available()))
        try:
            with self.scorer.scoring_ahead(affordable):
                while not new.is_empty():
                    if stop is not None:
                        yield _with_fingerprint(skipped_rows(new, *stop), new), False
                        return
                    batch = ahead.batch if ahead is not None else self._batch_of(new)
                    group, stop = self._affordable_part(batch)
                    rows_file = None
                    if ahead is not None:
                        rows_file = ahead.rows_file(self.journal, fits=group.height == batch.height)
                        ahead = None
                    if group.is_empty():
                        continue
                    new = new.slice(group.height)
                    if stop is None and not new.is_empty():
                        ahead = self._write_ahead(self._batch_of(new))
                    before = (self.scorer.balance(), self.budget.spent)
                    answers = self._send(group, rows_file)
                    yield answers, True
                    sent_stopped = _stop_reason(answers, self.reserve)
                    # Only a batch this run cut goes on after a top-up: rows the scorer left
                    # in it are not sent again by this run, and later ones must not go first.
                    if (
                        sent_stopped is None
                        and stop is not None
                        and stop[0] == SKIPPED_BALANCE
                        and self._topped_up(new, *before)
                    ):
                        stop = None
                    stop = stop or sent_stopped
        finally:
            if ahead is not None:
                ahead.discard(self.journal)

    def _batch_of(self, new: pl.DataFrame) -> pl.DataFrame:
        # A new batch gets a key of its own: rows re-scored because their answer went stale
        # still carry the key of the batch that answered them last time.
        return new.head(self.scorer.chunk_rows).with_columns(
            batch_key=pl.lit(f"batch-{uuid.uuid4().hex}")
        )

    def _write_ahead(self, batch: pl.DataFrame) -> _Ahead | None:
        """The next batch's rows file, written while this batch is scored (about half a
        second of a million-row run). Used only if the next batch leaves exactly as it is."""
        if self.journal is None:
            return None
        return _Ahead(batch, self.journal.write_rows_ahead(batch, batch["batch_key"][0]))

    def _topped_up(self, new: pl.DataFrame, balance: int | None, spent: int) -> bool:
        """Whether, the balance asked again after a batch cut short for lack of it, the
        workspace was topped up during the batch (`balance` and `spent`: as the batch began)
        and the next row can be paid now. Nothing is in flight between batches, so the
        balance asked is the balance now."""
        if new.is_empty() or balance is None:
            return False
        after = self.scorer.refresh_balance()
        # More than the batch left: a balance that only looked enough (the reserve reached,
        # requests in doubt holding some of it) would send the rest a few rows at a time.
        left = balance - (self.budget.spent - spent)
        return (
            after is not None
            and after > left
            and _affordable(new["cost"].head(1), self._available()) > 0
        )

    def _spendable(self, balance: int | None) -> int | None:
        return None if balance is None else max(balance - self.reserve, 0)

    def _available(self) -> int | None:
        """What this run can still spend: the smaller of the budget left and the balance
        known (less the reserve); None when neither bounds it."""
        bounds = [b for b in (self.budget.remaining, self._spendable(self.scorer.balance()))
                  if b is not None]  # fmt: skip
        return min(bounds) if bounds else None

    def _affordable_part(self, batch: pl.DataFrame) -> tuple[pl.DataFrame, tuple[str, str] | None]:
        """The head of `batch` that the budget and the known balance pay for, and why the
        rest cannot be sent (None when all of it can)."""
        costs = batch["cost"]
        by_budget = _affordable(costs, self.budget.remaining)
        balance = self.scorer.balance()
        by_balance = _affordable(costs, self._spendable(balance))
        rows = min(by_budget, by_balance)
        if rows == costs.len():
            return batch, None
        if by_budget <= by_balance:
            reason = (SKIPPED_BUDGET, budget_spent(self.budget.in_doubt))
        else:  # what is left once the rows sent are paid, not what there was before them
            left = None if balance is None else balance - int(costs.head(rows).sum())
            reason = (SKIPPED_BALANCE, _balance_stop(self.reserve, left))
        return batch.head(rows), reason

    def _doubt_groups(
        self, in_doubt: pl.DataFrame
    ) -> tuple[list[pl.DataFrame], list[pl.DataFrame]]:
        """The groups to resend, and the rows of batches the scorer knows were never charged
        (embedded: a run killed between marking a batch sent and charging it), which are new
        work: resent under their batch key with fewer rows, they would be charged for those
        alone, and the rest, coming back later, taken for paid with them."""
        if in_doubt.is_empty():
            return [], []
        # A batch that left and never came back goes again whole, under its own key (the key of
        # an embedded charge); rows whose retries ran out go again together in a new batch,
        # each under its own idempotency key.
        retry = f"retry-{uuid.uuid4().hex}"
        keyed = in_doubt.with_columns(
            batch_key=pl.when(pl.col("state") == "sent").then("batch_key").otherwise(pl.lit(retry))
        )
        groups, never_charged = [], []
        for (batch_key,), group in keyed.group_by("batch_key", maintain_order=True):
            sent = group["state"][0] == "sent"
            if sent and self.scorer.batch_charged(str(batch_key)) is False:
                never_charged.append(group)
                if self.journal is not None:
                    self.journal.forget_batch(str(batch_key))
            else:
                groups.append(group)
        return groups, never_charged

    def _send(
        self,
        group: pl.DataFrame,
        rows_file: str | None = None,
        *,
        keep_costs: bool = True,
        in_doubt: bool = False,
    ) -> pl.DataFrame:
        """Mark `group` (one batch_key) sent, score it, record the answers. `rows_file`: the
        group's rows file if it was written ahead.

        The journal keeps each scored row at its cost, what its decision was paid whenever
        it was; the rows returned say what this run spent on them, unless `keep_costs` (a
        resumed run: the output counts what the whole job paid).

        A group `in_doubt` (sent by an earlier run, no answer recorded) may have been paid:
        its rows that the budget or the balance keep from going again this time stay in doubt,
        under their keys, for the next run to replay. Recorded as skipped, they would count
        as never sent, and be paid again under new keys."""
        batch_key = group["batch_key"][0]
        # a batch in doubt resent under its own key (not rows retried in a batch of their own)
        again = in_doubt and group["state"][0] == "sent"
        earlier_charge = keep_costs and in_doubt and self._sent_before_resumed_run(batch_key)
        if self.journal is not None:
            self.journal.mark_sent(group, batch_key, rows_file, again=again)
        answers = _with_fingerprint(self.scorer.score(group, budget=self.budget), group)
        if in_doubt:
            answers = answers.with_columns(
                error_message=pl.when(pl.col("status") == "skipped")
                .then(pl.concat_str("error_message", pl.lit(STILL_IN_DOUBT)))
                .otherwise("error_message")
            )
        paid = _at_cost(answers, group)
        if paid is not answers:
            self.replayed += int(paid["decisions_used"].sum()) - int(
                answers["decisions_used"].sum()
            )
        if self.journal is not None:
            _record(self.journal, group, paid, batch_key, in_doubt=in_doubt)
        return paid if keep_costs and not earlier_charge else answers

    def _sent_before_resumed_run(self, batch_key: str) -> bool:
        """Whether a batch in doubt was charged before the run this one resumes began: its
        charge was then made by an earlier run, which the output shows at 0 (as `_reused`
        does its answers). When the charge was made, the embedded ledger tells; through a
        service, a batch last sent before then was charged before then too (sent since, the
        stopped run may have paid it, which the output counts)."""
        if self.journal is None or self.resumed_since is None:
            return False
        if (charged := self._charged_before(batch_key)) is not None:
            return charged
        sent_at = self.journal.sent_at(batch_key)
        return sent_at is not None and sent_at < self.resumed_since

    def _charged_before(self, batch_key: str | None) -> bool | None:
        """Whether the batch was charged before the run this one resumes began, when the
        scorer can tell (the embedded ledger); None when it cannot."""
        charged_at = None if batch_key is None else self.scorer.batch_charged_at(batch_key)
        if charged_at is None or self.resumed_since is None:
            return None
        return charged_at < self.resumed_since

    def _reused(self, reuse: pl.DataFrame, keep_costs: bool) -> pl.DataFrame:
        if reuse.is_empty() or self.journal is None:
            return _empty()
        stored = self.journal.results(reuse.select("fingerprint", "result_file"))
        self.oldest_reused = min(self.oldest_reused, float(stored["scored_at"].min()))
        answers = stored.with_columns(reuse["request_id"])  # this run's ids, not the stored ones
        if not keep_costs:
            answers = answers.with_columns(decisions_used=pl.lit(0, pl.Int64))
        elif self.resumed_since is not None:
            recorded_since = stored["scored_at"] >= self.resumed_since
            keys = reuse["batch_key"]
            # answers the stopped run recorded of batches it replayed: charged before it began
            replayed = [k for k in keys.filter(recorded_since).unique() if self._charged_before(k)]
            paid_by_this_job = recorded_since & ~keys.is_in(replayed).fill_null(False)
            answers = answers.with_columns(
                decisions_used=pl.when(paid_by_this_job).then("decisions_used").otherwise(0)
            )
        return answers.select(*OUTPUT_SCHEMA, "fingerprint")


@dataclass(frozen=True)
class _Ahead:
    """A batch whose rows file is being written before its turn."""

    batch: pl.DataFrame
    written: Future[str]

    def rows_file(self, journal: Journal | None, *, fits: bool) -> str | None:
        """The file, once written, if the batch leaves as it was written (`fits`); otherwise
        the file is removed (a trimmed batch writes its own)."""
        if fits:
            return self.written.result()
        self.discard(journal)
        return None

    def discard(self, journal: Journal | None) -> None:
        if self.written.exception() is None and journal is not None:
            journal.discard_rows(self.written.result())


def _record(
    journal: Journal, group: pl.DataFrame, paid: pl.DataFrame, batch_key: str, *, in_doubt: bool
) -> None:
    """`Journal.record` the answers to `group`; but rows of a group `in_doubt` not sent this
    time (skipped: the budget or the balance held them back) get no answer, so they stay in
    doubt under their keys (Journal.states), to be replayed by the next run."""
    if in_doubt:
        paid = paid.filter(pl.col("status") != "skipped")
    journal.record(paid, batch_key)


def _of_group(answers: pl.DataFrame, group: pl.DataFrame, column: str) -> pl.Series:
    """`group`'s `column` for each row of `answers`, matched on request_id."""
    if answers["request_id"].equals(group["request_id"]):  # in the same order: no join
        return group[column]
    return answers.select("request_id").join(
        group.select("request_id", column), on="request_id", how="left", maintain_order="left"
    )[column]


def _with_fingerprint(answers: pl.DataFrame, group: pl.DataFrame) -> pl.DataFrame:
    return answers.with_columns(_of_group(answers, group, "fingerprint"))


def _paid_again(new: pl.DataFrame, answers: list[pl.DataFrame]) -> int:
    """How many of `new` whose stored answer went stale were scored again (not those the
    budget or the balance left)."""
    stale = new.filter(pl.col("state") == "done").select("request_id")
    if stale.is_empty() or not answers:
        return 0
    scored = pl.concat(answers, how="vertical").filter(pl.col("status") == "scored")
    return scored.join(stale, on="request_id", how="semi").height


def _at_cost(answers: pl.DataFrame, group: pl.DataFrame) -> pl.DataFrame:
    """`answers` with every scored row at its cost, those replayed from an earlier run's charge
    (which spent nothing now) included."""
    replayed = (pl.col("status") == "scored") & (pl.col("decisions_used") == 0)
    if not answers.select(replayed.any()).item():
        return answers
    cost = _of_group(answers, group, "cost")
    return answers.with_columns(
        decisions_used=pl.when(replayed).then(cost).otherwise("decisions_used")
    )


def _stop_reason(answers: pl.DataFrame, reserve: int = 0) -> tuple[str, str] | None:
    """Why the rows after `answers` are not sent: what stopped the scorer in them."""
    skipped = answers.filter(pl.col("status") == "skipped")
    if skipped.is_empty():
        return None
    code = skipped["error_code"][0]
    return code, {
        SKIPPED_BUDGET: budget_spent(),
        SKIPPED_BALANCE: _balance_stop(reserve),
    }.get(code, "sending stopped")


def _balance_stop(reserve: int, left: int | None = None) -> str:
    """Why rows are not sent for lack of balance: spent, or down to --reserve."""
    balance = "the workspace balance" if left is None else f"the workspace balance ({left})"
    return f"{balance} is down to --reserve {reserve}" if reserve else f"{balance} is spent"


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema={**OUTPUT_SCHEMA, "fingerprint": pl.String()})


def now() -> float:
    return time.time()
