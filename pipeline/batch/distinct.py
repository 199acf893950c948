"""The requests a pass sends: costed and fingerprinted, equal ones scored once, in the order
of a --priority column when money may run short."""

from __future__ import annotations

import polars as pl

from pipeline.batch.fingerprint import request_fingerprints
from pipeline.batch.normalize import normalize_column
from pipeline.ledger.base import cost_of


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
