"""Putting values back at their row positions, instead of joining on a row-number column."""

from __future__ import annotations

import polars as pl


def scattered(values: pl.Series, at: pl.Series, length: int) -> pl.Series:
    """A series of `length` nulls with `values` put at the positions `at`."""
    empty = pl.select(pl.repeat(None, length, dtype=values.dtype)).to_series()
    return empty.scatter(at, values).alias(values.name)
