"""Request frames with market figures attached, for testing the formulas without the table."""

from __future__ import annotations

from typing import Any

import polars as pl

from pipeline.engine.benchmarks import ATTACHED_SCHEMA
from pipeline.engine.schema import REQUEST_SCHEMA

# What attach_benchmarks adds, less the keys the formulas never read.
MARKET_SCHEMA: dict[str, pl.DataType] = {
    name: dtype
    for name, dtype in ATTACHED_SCHEMA.items()
    if name not in ("city_key", "district_key", "benchmark_city_ar", "benchmark_district_ar")
}

DISTRICT_MARKET: dict[str, Any] = {
    "benchmark_level": "district",
    "benchmark_median_sqm": 6500.0,
    "benchmark_p25_sqm": 5000.0,
    "benchmark_p75_sqm": 8000.0,
    "benchmark_year": 2024,
    "benchmark_transaction_count": 400,
    "benchmark_yoy_pct": 3.0,
    "market_avg_sqm": 5800.0,
    "market_avg_level": "city",
    "type_factor": 1.0,
    "type_factor_level": "district",
}

NO_MARKET: dict[str, Any] = dict.fromkeys(MARKET_SCHEMA)


def request_row(**fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(REQUEST_SCHEMA)
    row.update(type="villa", price=2_500_000.0, area=400.0, city="Riyadh", reasoning=False)
    row.update(fields)
    return row


def market_frame(rows: list[dict[str, Any]], market: dict[str, Any] | None = None) -> pl.DataFrame:
    market = DISTRICT_MARKET if market is None else market
    return pl.DataFrame(
        [{**row, **market} for row in rows], schema={**REQUEST_SCHEMA, **MARKET_SCHEMA}
    )
