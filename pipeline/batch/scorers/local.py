"""The embedded scorer: the engine in-process, charging the local ledger chunk by chunk.

One ledger charge per chunk of rows (one transaction, one audit entry naming the rows), so a
million-row file costs a few hundred transactions, not a million. Each chunk's charge carries
an idempotency key, so a chunk charged before a crash is replayed, not charged again.
"""

from __future__ import annotations

import hashlib
from array import array
from itertools import accumulate

import polars as pl

from pipeline.batch.budget import Budget
from pipeline.batch.result_columns import RESULT_SCHEMA
from pipeline.batch.scorers.base import SKIPPED_BALANCE, SKIPPED_BUDGET, ProgressCallback
from pipeline.engine.engine import Engine
from pipeline.engine.schema import REQUEST_SCHEMA
from pipeline.errors import InsufficientDecisions
from pipeline.ledger.base import ChargeRequest, Ledger

OUTPUT_SCHEMA: dict[str, pl.DataType] = {
    "request_id": pl.Int64(),
    **{k: v for k, v in RESULT_SCHEMA.items() if k != "row_number"},
}
_SCORE_COLUMNS = [c for c in OUTPUT_SCHEMA if c not in ("request_id", "status", "decisions_used")]
_REASONING_COLUMNS = ("reasoning_en", "reasoning_ar", "key_factors", "risk_flags")
LIST_SEPARATOR = "; "


class LocalScorer:
    name = "embedded"

    def __init__(
        self, engine: Engine, ledger: Ledger, *, workspace: str, run_key: str, chunk_rows: int
    ) -> None:
        self.engine = engine
        self.ledger = ledger
        self.workspace = workspace
        self.run_key = run_key
        self.chunk_rows = chunk_rows

    def balance(self) -> int | None:
        return self.ledger.workspace(self.workspace).balance

    def score(
        self, requests: pl.DataFrame, *, budget: Budget, progress: ProgressCallback | None = None
    ) -> pl.DataFrame:
        parts: list[pl.DataFrame] = []
        done = 0
        stop_reason: tuple[str, str] | None = None
        for chunk in requests.iter_slices(self.chunk_rows):
            if stop_reason is None:
                charged, stop_reason = self._charge(chunk, budget)
                if charged.height:
                    parts.append(self._evaluate(charged))
                chunk = chunk.slice(charged.height)
            if chunk.height:
                assert stop_reason is not None
                parts.append(_skipped(chunk, *stop_reason))
            done += chunk.height
            if progress is not None:
                progress(done, budget.spent)
        if not parts:
            return pl.DataFrame(schema=OUTPUT_SCHEMA)
        return pl.concat(parts, how="vertical")

    def _charge(
        self, chunk: pl.DataFrame, budget: Budget
    ) -> tuple[pl.DataFrame, tuple[str, str] | None]:
        """Charge the longest affordable prefix of the chunk; the reason when it is not all."""
        costs = chunk["cost"].to_list()
        prefix, stop = len(costs), None
        while prefix and not budget.reserve(sum(costs[:prefix])):
            prefix = _affordable(costs, budget.remaining or 0)
            stop = (SKIPPED_BUDGET, "the run's --budget is spent")
        while prefix:
            total = sum(costs[:prefix])
            try:
                charge = self.ledger.charge(
                    self.workspace,
                    ChargeRequest(
                        cost=total,
                        idempotency_key=self._chunk_key(chunk, prefix),
                        fingerprint=_fingerprint(chunk.head(prefix)),
                    ),
                )
            except InsufficientDecisions as exc:
                budget.settle(total, 0)
                prefix = _affordable(costs, exc.balance)
                stop = (SKIPPED_BALANCE, f"the workspace balance ({exc.balance}) is spent")
                if prefix and not budget.reserve(sum(costs[:prefix])):
                    prefix = 0
                continue
            budget.settle(total, 0 if charge.replayed else charge.cost)
            self.ledger.complete(self.workspace, self._chunk_key(chunk, prefix), None)
            return chunk.head(prefix), stop
        return chunk.clear(), stop or (SKIPPED_BALANCE, "the workspace balance is spent")

    def _chunk_key(self, chunk: pl.DataFrame, rows: int) -> str:
        first = chunk["request_id"][0]
        return f"{self.run_key}:rows-{first}-{first + rows - 1}"

    def _evaluate(self, charged: pl.DataFrame) -> pl.DataFrame:
        scored = self.engine.score(charged.select(*REQUEST_SCHEMA, "request_id", "cost"))
        scored = scored.with_columns(
            status=pl.lit("scored"),
            decisions_used=pl.col("cost"),
            error_code=pl.lit(None, pl.String),
            error_field=pl.lit(None, pl.String),
            error_message=pl.lit(None, pl.String),
        )
        scored = _with_reasoning(self.engine, scored)
        return scored.select(
            pl.col(name).cast(dtype) if name in scored.columns else pl.lit(None, dtype).alias(name)
            for name, dtype in OUTPUT_SCHEMA.items()
        )


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
            "key_factors": [LIST_SEPARATOR.join(e.key_factors) for e in explained],
            "risk_flags": [LIST_SEPARATOR.join(e.risk_flags) for e in explained],
        },
        schema_overrides={c: pl.String for c in _REASONING_COLUMNS},
    )
    return scored.join(reasoning, on="request_id", how="left", maintain_order="left")


def _affordable(costs: list[int], available: int) -> int:
    """How many leading requests `available` decisions pay for."""
    return sum(1 for total in accumulate(costs) if total <= available)


def _fingerprint(rows: pl.DataFrame) -> str:
    """What a chunk charge was for: the same rows give the same fingerprint on a rerun."""
    row_hashes = rows.select(*REQUEST_SCHEMA, "request_id").hash_rows(seed=0)
    return hashlib.sha256(array("Q", row_hashes.to_list()).tobytes()).hexdigest()


def _skipped(rows: pl.DataFrame, code: str, reason: str) -> pl.DataFrame:
    message = pl.format(
        "not scored: {}; this row needs {} decision(s); top up or raise --budget, then run "
        "the same command again",
        pl.lit(reason),
        pl.col("cost"),
    )
    values = {
        "request_id": pl.col("request_id"),
        "status": pl.lit("skipped"),
        "decisions_used": pl.lit(0),
        "error_code": pl.lit(code),
        "error_message": message,
    }
    return rows.select(
        values.get(name, pl.lit(None)).cast(dtype).alias(name)
        for name, dtype in OUTPUT_SCHEMA.items()
    )
