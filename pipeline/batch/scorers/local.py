"""The embedded scorer: the engine in-process, charging the local ledger batch by batch.

One ledger charge per batch of rows (one transaction, one audit entry), so a million-row file
costs a few dozen transactions, not a million.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import polars as pl
import polars_hash  # noqa: F401  (registers the .chash namespace)

from pipeline.batch.budget import Budget
from pipeline.batch.positions import scattered
from pipeline.batch.scorers.base import (
    COMPACTED_BATCH,
    OUTPUT_SCHEMA,
    SKIPPED_BALANCE,
    SKIPPED_BUDGET,
    ProgressCallback,
    budget_spent,
    flat_list,
    skipped_rows,
)
from pipeline.engine.benchmarks import BenchmarkTable
from pipeline.engine.engine import Engine
from pipeline.engine.schema import REQUEST_SCHEMA
from pipeline.engine.scoring import reported_percentiles
from pipeline.errors import IdempotencyKeyReused, InsufficientDecisions
from pipeline.ledger.base import ChargeRequest, Ledger

_REASONING_COLUMNS = ("reasoning_en", "reasoning_ar", "key_factors", "risk_flags")
_ANSWER_COLUMNS = frozenset(OUTPUT_SCHEMA) | {"cost", "reasoning", "type_factor"}


class LocalScorer:
    """Scores requests with the engine; one ledger charge per `batch_key` group of rows.

    The charge's idempotency key is the batch key the journal recorded before the charge, so
    a group charged just before a crash is replayed on the next run, not charged again.
    """

    name = "embedded"

    def __init__(self, engine: Engine, ledger: Ledger, *, workspace: str, chunk_rows: int) -> None:
        self.engine = engine
        self.ledger = ledger
        self.workspace = workspace
        self.chunk_rows = chunk_rows
        self._ahead: _ScoredAhead | None = None

    @property
    def version(self) -> str:
        return f"embedded:{self.engine.version}"

    def balance(self) -> int | None:
        return self.ledger.workspace(self.workspace).balance

    def refresh_balance(self) -> int | None:
        return self.balance()  # read from the ledger every time

    def batch_charged(self, batch_key: str) -> bool | None:
        if batch_key.startswith(COMPACTED_BATCH):  # paid, under the keys folded into it
            return True
        return self.ledger.charged(self.workspace, batch_key)

    def batch_charged_at(self, batch_key: str) -> float | None:
        if batch_key.startswith(COMPACTED_BATCH):
            return None
        return self.ledger.charged_at(self.workspace, batch_key)

    def benchmarks(self) -> BenchmarkTable | None:
        return self.engine.benchmarks

    def score(
        self, requests: pl.DataFrame, *, budget: Budget, progress: ProgressCallback | None = None
    ) -> pl.DataFrame:
        parts: list[pl.DataFrame] = []
        done = 0
        for batch_key, group in _batches(requests):
            parts.append(self._score_group(batch_key, group, budget))
            done += group.height
            if progress is not None:
                progress(done, budget.spent)
        if not parts:
            return pl.DataFrame(schema=OUTPUT_SCHEMA)
        return pl.concat(parts, how="vertical")

    def _score_group(self, batch_key: str, group: pl.DataFrame, budget: Budget) -> pl.DataFrame:
        if batch_key.startswith(COMPACTED_BATCH):
            # A compacted batch whose answers file was lost: every row of it was paid, under the
            # key of the batch it came from (which the journal no longer holds). Score it again;
            # charge nothing.
            return _paid_before(self._evaluate(group))
        cost = int(group["cost"].sum())
        # A batch a killed run had charged replays that charge at no cost: it needs no budget.
        reserved = 0 if self.ledger.charged(self.workspace, batch_key) else cost
        if reserved and not budget.reserve(reserved):
            return skipped_rows(group, SKIPPED_BUDGET, budget_spent())
        try:
            charge = self.ledger.charge(
                self.workspace,
                ChargeRequest(
                    cost=cost, idempotency_key=batch_key, fingerprint=_fingerprint(group)
                ),
            )
        except InsufficientDecisions as exc:
            budget.settle(reserved, 0)
            return skipped_rows(
                group, SKIPPED_BALANCE, f"the workspace balance ({exc.balance}) is spent"
            )
        except IdempotencyKeyReused:
            # Batch keys are never reused for new work, so this is a batch charged before a
            # crash being resent in another order or with fewer rows (the file changed since):
            # those rows were paid for with the rest. Score them; charge nothing.
            budget.settle(reserved, 0)
            return _paid_before(self._evaluate(group))
        budget.settle(reserved, 0 if charge.replayed else charge.cost)
        try:
            scored = self._evaluate(group)
        except Exception:
            if not charge.replayed:
                self.ledger.refund(charge.entry_id, "the engine failed on this batch")
            raise
        self.ledger.complete(self.workspace, batch_key, None)
        return _paid_before(scored) if charge.replayed else scored

    @contextmanager
    def scoring_ahead(self, requests: pl.DataFrame) -> Iterator[None]:
        """The engine is pure: a pass's requests are scored in one call before any is charged,
        and each batch takes its rows once charged (one call over a million rows costs half
        of twenty calls over 50,000). Released when the block ends."""
        if requests.height > self.chunk_rows:
            self._ahead = _ScoredAhead.of(requests, self.engine)
        try:
            yield
        finally:
            self._ahead = None

    def _evaluate(self, charged: pl.DataFrame) -> pl.DataFrame:
        scored = self._ahead.rows(charged) if self._ahead is not None else None
        if scored is None:
            scored = _engine_rows(self.engine, charged)
        scored = scored.with_columns(
            status=pl.lit("scored"),
            decisions_used=pl.col("cost"),
            error_code=pl.lit(None, pl.String),
            error_field=pl.lit(None, pl.String),
            error_message=pl.lit(None, pl.String),
        )
        scored = _with_reasoning(self.engine, scored).with_columns(reported_percentiles())
        return scored.select(
            pl.col(name).cast(dtype) if name in scored.columns else pl.lit(None, dtype).alias(name)
            for name, dtype in OUTPUT_SCHEMA.items()
        )


@dataclass(frozen=True)
class _ScoredAhead:
    scored: pl.DataFrame  # the engine's output for the requests of a pass
    position: pl.Series  # request_id -> its row in `scored` (null: not among them)

    @classmethod
    def of(cls, requests: pl.DataFrame, engine: Engine) -> _ScoredAhead:
        scored = _engine_rows(engine, requests)
        ids = scored["request_id"]
        rows = pl.int_range(scored.height, eager=True, dtype=pl.UInt32)
        return cls(scored, scattered(rows, ids, int(ids.max()) + 1))

    def rows(self, charged: pl.DataFrame) -> pl.DataFrame | None:
        """The engine's rows for `charged`, or None if any was not scored ahead."""
        ids = charged["request_id"]
        if int(ids.max()) >= self.position.len():
            return None
        positions = self.position.gather(ids)
        if positions.null_count():
            return None
        scored = self.scored
        if not charged["reasoning"].any():  # the answer's columns; an explanation reads all
            scored = scored.select(c for c in scored.columns if c in _ANSWER_COLUMNS)
        return _taken(scored, positions).with_columns(charged["cost"], charged["reasoning"])


def _taken(scored: pl.DataFrame, positions: pl.Series) -> pl.DataFrame:
    """`scored`'s rows at `positions`: a slice when they follow each other, as a batch's rows
    do when the pass is sent in the order it was scored (a gather copied 0.5 s of strings
    per million rows)."""
    first = int(positions[0])
    run = pl.int_range(first, first + positions.len(), eager=True, dtype=positions.dtype)
    if positions.equals(run, check_names=False):
        return scored.slice(first, positions.len())
    return scored[positions]


def _paid_before(scored: pl.DataFrame) -> pl.DataFrame:
    """A batch replayed from an earlier run's charge: nothing spent now (see Scorer)."""
    return scored.with_columns(decisions_used=pl.lit(0, pl.Int64))


def _engine_rows(engine: Engine, requests: pl.DataFrame) -> pl.DataFrame:
    return engine.score(requests.select(*REQUEST_SCHEMA, "request_id", "cost"))


def _batches(requests: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """(batch_key, rows) in order; one batch (the run's usual case) without a group_by."""
    if requests.is_empty():
        return []
    keys = requests["batch_key"]
    if (keys == keys[0]).all():
        return [(str(keys[0]), requests)]
    return [(str(k), g) for (k,), g in requests.group_by("batch_key", maintain_order=True)]


def _with_reasoning(engine: Engine, scored: pl.DataFrame) -> pl.DataFrame:
    wanted = scored.filter(pl.col("reasoning"))
    if wanted.is_empty():
        return scored
    explained = engine.explain(wanted)
    reasoning = pl.DataFrame(
        {
            "request_id": wanted["request_id"],
            "reasoning_en": [e.reasoning_en for e in explained],
            "reasoning_ar": [e.reasoning_ar for e in explained],
            "key_factors": [flat_list(e.key_factors) for e in explained],
            "risk_flags": [flat_list(e.risk_flags) for e in explained],
        },
        schema_overrides={c: pl.String for c in _REASONING_COLUMNS},
    )
    return scored.join(reasoning, on="request_id", how="left", maintain_order="left")


def _fingerprint(rows: pl.DataFrame) -> str:
    """What a group charge was for: the sha256 of its rows' request fingerprints joined by
    newlines, in the order sent, which is the order of the batch's journal rows file (so the
    entry can be checked against it). Not sorted: a batch resent in another order or with
    fewer rows is refused as a reused key, which is handled as a replay (see `_score_group`);
    a sort cost a quarter of a second per million rows."""
    return rows.select(pl.col("fingerprint").str.join("\n").chash.sha2_256()).item()
