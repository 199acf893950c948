"""What scores a batch: the embedded engine now, a remote decision service later.

A scorer takes a frame of valid, distinct requests: the request columns of
`pipeline.engine.schema.REQUEST_SCHEMA` plus `request_id` (Int64), `cost` (1 or 3),
`fingerprint`, `idempotency_key` (per request, kept by the journal across runs) and `batch_key`
(the group the journal marked sent together; a scorer that charges per group uses it as the
group's idempotency key). It returns one row per request in OUTPUT_SCHEMA: `request_id`,
`status` and the result columns it could fill, `decisions_used` being what the row spent now
(0 for an answer replayed from a charge made by an earlier run). It spends decisions only
through the `Budget` it is given, and stops sending once the budget or the balance is out: the
rows it did not send come back `skipped` with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

import polars as pl

from pipeline.batch.budget import Budget
from pipeline.batch.result_columns import RESULT_SCHEMA

if TYPE_CHECKING:
    from pipeline.engine.benchmarks import BenchmarkTable

ProgressCallback = Callable[[int, int], None]  # (requests done so far, decisions spent so far)

SKIPPED_BUDGET = "budget_exhausted"
SKIPPED_BALANCE = "insufficient_decisions"
LIST_SEPARATOR = "; "  # joins key_factors and risk_flags in flat files
# The batch key of a journal's compacted batch: its rows were all paid, under the keys of the
# batches folded into it, never under this one.
COMPACTED_BATCH = "compacted-"


def flat_list(items: Sequence[str]) -> str:
    """A list of the response (key_factors, risk_flags) as one cell of a flat file: a factor's
    closing full stop is dropped, so the joined text does not read "there.; It is"."""
    return LIST_SEPARATOR.join(item.removesuffix(".") for item in items)


OUTPUT_SCHEMA: dict[str, pl.DataType] = {
    "request_id": pl.Int64(),
    **{k: v for k, v in RESULT_SCHEMA.items() if k != "row_number"},
}


def budget_spent(in_doubt: int = 0) -> str:
    """Why a row was not sent for lack of --budget; `in_doubt`: decisions perhaps charged
    (answers lost), which took some of it though Decisions spent does not count them."""
    held = f" (with {in_doubt} perhaps charged, answers lost)" if in_doubt else ""
    return f"the run's --budget is spent{held}"


_WHAT_TO_DO = {
    SKIPPED_BUDGET: "raise --budget",
    SKIPPED_BALANCE: "top up the workspace",
}


def skipped_rows(rows: pl.DataFrame, code: str, reason: str) -> pl.DataFrame:
    """OUTPUT_SCHEMA rows for requests not sent: status skipped, the reason and the cost."""
    message = pl.format(
        "not scored: {}; this row needs {} decision(s); {}, then run the same command again",
        pl.lit(reason),
        pl.col("cost"),
        pl.lit(_WHAT_TO_DO.get(code, "top up or raise --budget")),
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


class Scorer(Protocol):
    name: str
    chunk_rows: int  # how many requests the run hands over (and marks sent) at a time

    @property
    def version(self) -> str:
        """What answers depend on (formulas and benchmarks, or the service): in fingerprints."""
        ...

    def balance(self) -> int | None:
        """The balance now, when the scorer can know it."""
        ...

    def refresh_balance(self) -> int | None:
        """The balance asked again where it is kept, between batches (nothing in flight): a
        top-up made during the run counts. None when it cannot be asked."""
        ...

    def benchmarks(self) -> BenchmarkTable | None:
        """The benchmark tables answers are made with, when known here (embedded); None for a
        remote service, whose tables may differ."""
        ...

    def batch_charged(self, batch_key: str) -> bool | None:
        """Whether a batch sent under `batch_key` was charged, when the scorer can know it
        without sending (embedded: the ledger says); None when it cannot (a remote service)."""
        ...

    def batch_charged_at(self, batch_key: str) -> float | None:
        """When the batch sent under `batch_key` was charged, when the scorer can know it
        without sending (embedded: the ledger says); None when it cannot, or none was."""
        ...

    def scoring_ahead(self, requests: pl.DataFrame) -> AbstractContextManager[None]:
        """While the block runs, `score` may take what costs nothing from work done ahead on
        `requests` (the new requests of a pass, in sending order). Charges nothing."""
        ...

    def score(
        self, requests: pl.DataFrame, *, budget: Budget, progress: ProgressCallback | None = None
    ) -> pl.DataFrame: ...
