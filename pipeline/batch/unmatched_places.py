"""Places the benchmark tables do not know, said before paying (the dry run) and in the summary.

A district the tables do not know is scored against its city's benchmark, and a city they do
not know has none (a neutral price score, its size against the national average):
documented, but a listing's verdict can swing from match to no_match on a spelling, and the
output says so only in the paid explanation (risk flag `city_level_benchmark`). The summary
names the places, most rows first, so an analyst can fix a spelling (or a column mapping)
before paying, or know which verdicts stand on less.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from pipeline.batch.price_outliers import price_outliers, price_ranges
from pipeline.engine.aliases import english_name
from pipeline.engine.benchmarks import BenchmarkTable, attach_benchmarks
from pipeline.io.xlsx_text import has_arabic

NOTE = "Places without their own benchmark"
TYPES_NOTE = "Types their place's sales do not price"
SHOWN = 5  # places named; the rest counted


def place_notes(
    requests: pl.DataFrame, table: BenchmarkTable, rows_in_sheet: pl.Series | None = None
) -> list[tuple[str, str]]:
    """The summary's notes on the places of `requests` (valid requests, with row_number):
    `unmatched_places`', `unpriced_types`' and `price_outliers`', from one pass over the rows
    (`rows_in_sheet`: the sheet row of each input row, see `sheet_rows`)."""
    kinds = (
        requests.filter(pl.col("city").is_not_null())
        .group_by("city", "district", "type")
        .agg(pl.len().alias("rows"), *price_ranges())
    )
    counted = kinds.drop("lowest", "highest")
    notes = [
        unmatched_places(counted, table),
        unpriced_types(counted, table),
        price_outliers(requests, kinds, table, rows_in_sheet),
    ]
    return [note for note in notes if note is not None]


def unmatched_places(kinds: pl.DataFrame, table: BenchmarkTable) -> tuple[str, str] | None:
    """The note on the rows counted in `kinds` (city, district, type, rows) whose district, or
    city, has no benchmark of its own; None when every place has one."""
    places = kinds.group_by("city", "district").agg(pl.col("rows").sum())
    if places.is_empty():
        return None
    level = attach_benchmarks(places, table)["benchmark_level"]
    missing = places.with_columns(level=level).filter(
        pl.col("level").is_null()
        | (pl.col("district").is_not_null() & (pl.col("level") != "district"))
    )
    if missing.is_empty():
        return None
    # A city not found is one place, whatever districts its rows name
    missing = (
        missing.with_columns(district=pl.when(pl.col("level").is_not_null()).then("district"))
        .group_by("city", "district", "level")
        .agg(pl.col("rows").sum())
    )
    listed = _listed(missing, ["city", "district"], lambda row: _place(row, table), "more place(s)")
    return (
        NOTE,
        f"{listed}. A district not found is scored against its city's benchmark; a city not "
        "found has none (a neutral price score, the size compared with the national average): "
        "check the spelling",
    )


def _listed(
    found: pl.DataFrame, order: list[str], name: Callable[[dict[str, object]], str], more: str
) -> str:
    """'N row(s): the SHOWN places with most rows, named; and K more'."""
    found = found.sort(["rows", *order], descending=[True] + [False] * len(order))
    named = [name(row) for row in found.head(SHOWN).iter_rows(named=True)]
    left = found.height - SHOWN
    listed = "; ".join(named) + (f"; and {left} {more}" if left > 0 else "")
    return f"{int(found['rows'].sum())} row(s): {listed}"


def _place(row: dict[str, Any], table: BenchmarkTable) -> str:
    """'city 'Riyadth' (2, did you mean Riyadh?)': the place as written, its rows, and the
    known place spelt most like it, if one is."""
    places = table.lookups.places
    if row["level"] is None:
        kind, written, where = "city", row["city"], ""
        city, district = places.nearest_city(written), None
        found = city is not None
    else:
        kind, written, where = "district", row["district"], f" in {row['city']}"
        city = places.city(row["city"])
        district = places.nearest_district(written, city)
        found = district is not None
    guess = f", did you mean {_name(table, written, city, district)}?" if found else ""
    return f"{kind} {written!r}{where} ({row['rows']}{guess})"


def _name(table: BenchmarkTable, written: str, city: str, district: str | None) -> str:
    """A place of the table as its user would write it: by its English name when they wrote
    in Latin letters (accents too) and one is known, else by its official Arabic name."""
    if not has_arabic(written) and (english := english_name(city, district)) is not None:
        return english
    level = "city" if district is None else "district"
    official = table.benchmarks.filter(
        (pl.col("city_key") == city)
        & (pl.col("level") == level)
        & (pl.col("district_key") == district if district is not None else True)
    )
    column = "city_ar" if district is None else "district_ar"
    return official[column][0] if official.height else district or city


def unpriced_types(kinds: pl.DataFrame, table: BenchmarkTable) -> tuple[str, str] | None:
    """The note on the rows counted in `kinds` (city, district, type, rows) whose place has a
    benchmark, but one whose deeds, scaled to the row's type, would not describe the type's
    market (see `benchmarks.CREDIBLE_BAND`): a district scored against its city's benchmark,
    or a city without one for the type. None when there are none. (Places the tables do not
    know are `unmatched_places`'.)"""
    places = kinds.filter(pl.col("type").is_not_null())
    if places.is_empty():
        return None
    typed = attach_benchmarks(places, table)
    as_place = attach_benchmarks(places.with_columns(type=pl.lit(None, pl.String)), table)
    found = places.with_columns(
        level=typed["benchmark_level"],
        priced=typed["benchmark_median_sqm"].is_not_null(),
        place_level=as_place["benchmark_level"],
    ).filter(
        pl.col("place_level").is_not_null()
        & (~pl.col("priced") | (pl.col("level") != pl.col("place_level")))
    )
    if found.is_empty():
        return None
    listed = _listed(found, ["city", "district", "type"], _typed_place, "more")
    return (
        TYPES_NOTE,
        f"{listed}. Scaled to the type, the recorded sales there would not describe its market: "
        "a district is scored against its city's benchmark, a city has none for the type (a "
        "neutral price score)",
    )


def _typed_place(row: dict[str, object]) -> str:
    where = (
        f"district {row['district']!r} in {row['city']}"
        if row["place_level"] == "district"
        else f"{row['city']!r}"
    )
    outcome = "its city's benchmark" if row["priced"] else "no benchmark"
    return f"{row['type']} in {where} ({row['rows']}, {outcome})"
