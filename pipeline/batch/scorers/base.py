"""What scores a batch: the embedded engine now, a remote decision service later.

A scorer takes a frame of valid, distinct requests (the request columns of
`pipeline.engine.schema.REQUEST_SCHEMA` plus `request_id` and `cost`) and returns one row per
request with `request_id`, `status` and the result columns it could fill. It spends decisions
only through the `Budget` it is given, and stops sending once the budget or the balance is out:
the rows it did not send come back `skipped` with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import polars as pl

from pipeline.batch.budget import Budget

ProgressCallback = Callable[[int, int], None]  # (requests done so far, decisions spent so far)

SKIPPED_BUDGET = "budget_exhausted"
SKIPPED_BALANCE = "insufficient_decisions"


class Scorer(Protocol):
    name: str

    def balance(self) -> int | None:
        """The balance now, when the scorer can know it."""
        ...

    def score(
        self, requests: pl.DataFrame, *, budget: Budget, progress: ProgressCallback | None = None
    ) -> pl.DataFrame: ...
