"""Which listings changed verdict since the last run: rows are paired with the last run's by
a key of their request without the price, whatever their position in the file."""

from __future__ import annotations

import polars as pl

from pipeline.engine.schema import REQUEST_SCHEMA


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
