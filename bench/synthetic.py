"""Synthetic portfolios for the benchmarks: realistic text cells, drawn around the benchmarks."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
TYPES = ["apartment", "villa", "land", "commercial", "office", "شقة", "فيلا", "أرض"]


def _draw(values: list, rows: int, seed: int) -> pl.Series:
    return pl.Series(values).sample(rows, with_replacement=True, seed=seed)


def listings(rows: int, seed: int = 7) -> pl.DataFrame:
    """`rows` listings as a spreadsheet has them: every cell text, 15 columns."""
    table = pl.read_csv(ROOT / "sample_data" / "benchmarks.csv", infer_schema_length=0)
    places = table.filter(pl.col("level") == "district").select(
        "city_ar", "district_ar", pl.col("median_sqm").cast(pl.Float64)
    )
    rng = random.Random(seed)
    picks = places.sample(rows, with_replacement=True, seed=seed)
    area = _draw(list(range(60, 900)), rows, seed + 1)
    noise = _draw([rng.lognormvariate(0.3, 0.35) for _ in range(4096)], rows, seed + 2)
    price = ((area * picks["median_sqm"] * noise) / 1000).round() * 1000
    return pl.DataFrame(
        {
            "listing_id": pl.int_range(rows, eager=True).cast(pl.String).str.zfill(7),
            "city": picks["city_ar"],
            "district": picks["district_ar"],
            "type": _draw(TYPES, rows, seed + 3),
            "price": price.cast(pl.Int64).cast(pl.String),
            "area": area.cast(pl.String),
            "bedrooms": _draw([str(n) for n in range(7)], rows, seed + 4),
            "bathrooms": _draw([str(n) for n in range(1, 6)], rows, seed + 5),
            "floor": _draw([str(n) for n in range(15)], rows, seed + 6),
            "age": _draw([str(n) for n in range(40)], rows, seed + 7),
            "parking": _draw(["yes", "no", "نعم", "لا"], rows, seed + 8),
            "furnished": _draw(["yes", "no", None], rows, seed + 9),
            "agent": _draw(["Sara", "محمد", "Omar", "نورة"], rows, seed + 10),
            "notes": _draw([None, "corner", "قريب من المترو"], rows, seed + 11),
            "listed_on": _draw(["2026-10-01", "2026-11-02"], rows, seed + 12),
        }
    )
