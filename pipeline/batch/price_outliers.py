"""Prices far from their market, said before paying (the dry run) and in the summary.

A price written in thousands or millions of riyals (3,200 or 3.2 for 3,200,000), or an area
in other units, is scored as written: a bargain that scores 100 on price, or a no_match, and
only the paid explanation flags it (`price_far_below_market`). Prices this far off (under a
tenth of the 25th percentile, over a hundred times the 75th) are slips rather than deals, so
the rows are named for an analyst to check before paying. Rows whose place has no benchmark
are not judged.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from pipeline.engine.benchmarks import BenchmarkTable, attach_benchmarks
from pipeline.engine.scoring import price_per_sqm, type_adjusted

NOTE = "Prices far from their market"
UNDER_P25_SHARE = 0.1
OVER_P75_TIMES = 100.0  # wide: land in an outlying district can trade at a twentieth of its city
SHOWN = 5  # rows named; the rest counted
PLACE = ["city", "district", "type"]


def price_ranges() -> list[pl.Expr]:
    """The aggregations `price_outliers` reads per place and type (lowest, highest)."""
    return [price_per_sqm().min().alias("lowest"), price_per_sqm().max().alias("highest")]


def price_outliers(
    requests: pl.DataFrame,
    kinds: pl.DataFrame,
    table: BenchmarkTable,
    rows_in_sheet: pl.Series | None,
) -> tuple[str, str] | None:
    """The note on the rows of `requests` (valid requests, with row_number) priced far from
    their benchmark; None when there are none. `kinds` holds each (city, district, type) of
    them with the `price_ranges` of its rows, so that the rows themselves are looked at only
    for the places where one is."""
    bands = (
        attach_benchmarks(kinds, table)
        .select(
            *PLACE,
            type_adjusted("p25").alias("p25"),
            type_adjusted("p75").alias("p75"),
            "lowest",
            "highest",
        )
        .filter(
            (pl.col("lowest") < pl.col("p25") * UNDER_P25_SHARE)
            | (pl.col("highest") > pl.col("p75") * OVER_P75_TIMES)
        )
    )
    if bands.is_empty():
        return None
    far = (
        requests.join(bands.drop("lowest", "highest"), on=PLACE, nulls_equal=True)
        .with_columns(price_per_sqm().alias("ppsqm"))
        .filter(
            (pl.col("ppsqm") < pl.col("p25") * UNDER_P25_SHARE)
            | (pl.col("ppsqm") > pl.col("p75") * OVER_P75_TIMES)
        )
        .sort("row_number")
    )
    if far.is_empty():
        return None
    named = [_row(row, rows_in_sheet) for row in far.head(SHOWN).iter_rows(named=True)]
    more = f"; and {far.height - SHOWN} more" if far.height > SHOWN else ""
    return (
        NOTE,
        f"{far.height} row(s): {'; '.join(named)}{more}. Under a tenth of their benchmark's "
        "25th percentile or over a hundred times its 75th, these are scored as written: a price in "
        "thousands or millions of riyals, or an area in other units?",
    )


def _row(row: dict[str, Any], rows_in_sheet: pl.Series | None) -> str:
    number = row["row_number"]
    where = (
        f"row_number {number}"
        if rows_in_sheet is None
        else f"sheet row {rows_in_sheet[number - 1]}"
    )
    if row["p25"] is not None and row["ppsqm"] < row["p25"]:  # (a table may lack one)
        against = f"a 25th percentile of {_sar(row['p25'])}"
    else:
        against = f"a 75th percentile of {_sar(row['p75'])}"
    return f"{where}, {_sar(row['ppsqm'])} SAR/m2 against {against}"


def _sar(amount: float) -> str:
    """To the halala, as the output's columns give the figures."""
    return f"{amount:,.2f}"
