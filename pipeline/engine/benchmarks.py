"""The engine's view of the benchmark tables: load them, attach benchmarks to a frame.

`benchmarks.csv`, `market_averages.csv` and `type_factors.csv` are built by
`benchmarks_build` from official MOJ / REGA files (see `sample_data/BENCHMARKS.md`). A row
finds its benchmark by district first, then by city; its market average by (city, type), then
nationally by type; its type factor (how the row's type prices against the benchmark area's
mix of all types) by the benchmark's district, then its city, then nationally.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import polars as pl

from pipeline.engine.aliases import city_key_expr, district_key_expr

DEFAULT_DIR = Path(__file__).parents[2] / "sample_data"

BENCHMARK_SCHEMA: dict[str, pl.DataType] = {
    "city_key": pl.String(),
    "district_key": pl.String(),
    "city_ar": pl.String(),
    "district_ar": pl.String(),
    "level": pl.String(),
    "median_sqm": pl.Float64(),
    "p25_sqm": pl.Float64(),
    "p75_sqm": pl.Float64(),
    "year": pl.Int64(),
    "transaction_count": pl.Int64(),
    "yoy_pct": pl.Float64(),
}
MARKET_SCHEMA: dict[str, pl.DataType] = {
    "city_key": pl.String(),
    "type": pl.String(),
    "avg_sqm": pl.Float64(),
    "deed_count": pl.Int64(),
    "year": pl.Int64(),
    "level": pl.String(),
}
TYPE_FACTOR_SCHEMA: dict[str, pl.DataType] = {
    "city_key": pl.String(),
    "district_key": pl.String(),
    "type": pl.String(),
    "factor": pl.Float64(),
    "type_deeds": pl.Int64(),
    "all_deeds": pl.Int64(),
    "year": pl.Int64(),
    "level": pl.String(),
}
# Columns attach_benchmarks adds, in order, with their types.
ATTACHED_SCHEMA: dict[str, pl.DataType] = {
    "city_key": pl.String(),
    "district_key": pl.String(),
    "benchmark_level": pl.String(),
    "benchmark_median_sqm": pl.Float64(),
    "benchmark_p25_sqm": pl.Float64(),
    "benchmark_p75_sqm": pl.Float64(),
    "benchmark_year": pl.Int64(),
    "benchmark_transaction_count": pl.Int64(),
    "benchmark_yoy_pct": pl.Float64(),
    "market_avg_sqm": pl.Float64(),
    "market_avg_level": pl.String(),
    # Official Arabic names of the matched benchmark row (district null on a city benchmark).
    "benchmark_city_ar": pl.String(),
    "benchmark_district_ar": pl.String(),
    # Multiply the benchmark percentiles by this to compare like for like with the row's type;
    # null only without a benchmark, 1.0 (level null) when the type is unknown or unmapped.
    "type_factor": pl.Float64(),
    "type_factor_level": pl.String(),
}
# Type factor when the row's type has none at any level: the benchmark as it stands.
NEUTRAL_TYPE_FACTOR = 1.0
_FIGURES = ("median_sqm", "p25_sqm", "p75_sqm", "year", "transaction_count", "yoy_pct")
_INPUTS = ("city", "district", "type")
# Working names of the inputs, so they cannot clash with columns the lookup creates.
_TEMP = {"_city": "city", "_district": "district", "_type_in": "type"}


@dataclass(frozen=True)
class BenchmarkTable:
    """The three tables in memory; `version` fingerprints their bytes (results record it)."""

    benchmarks: pl.DataFrame
    market_averages: pl.DataFrame
    version: str
    type_factors: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema=TYPE_FACTOR_SCHEMA)
    )

    @classmethod
    def load(
        cls,
        benchmarks_path: Path,
        market_averages_path: Path | None = None,
        type_factors_path: Path | None = None,
    ) -> BenchmarkTable:
        """Read `benchmarks_path`, the market averages and the type factors (default: the
        `market_averages.csv` and `type_factors.csv` beside it)."""
        benchmarks_path = Path(benchmarks_path)
        market_path = Path(market_averages_path or benchmarks_path.with_name("market_averages.csv"))
        factors_path = Path(type_factors_path or benchmarks_path.with_name("type_factors.csv"))
        parts = [p.read_bytes() for p in (benchmarks_path, market_path, factors_path)]
        digest = hashlib.sha256(b"\0".join(parts)).hexdigest()[:12]
        return cls(
            benchmarks=pl.read_csv(parts[0], schema=BENCHMARK_SCHEMA),
            market_averages=pl.read_csv(parts[1], schema=MARKET_SCHEMA),
            version=digest,
            type_factors=pl.read_csv(parts[2], schema=TYPE_FACTOR_SCHEMA),
        )

    @classmethod
    def default(cls) -> BenchmarkTable:
        """The tables committed under `sample_data/` (loaded once per process)."""
        return _default_table()

    def benchmark_for(
        self, city: str | None, district: str | None, type_: str | None = None
    ) -> dict:
        """One location's attached columns as a dict (the service's single-request path)."""
        frame = pl.DataFrame(
            {"city": [city], "district": [district], "type": [type_]},
            schema=dict.fromkeys(_INPUTS, pl.String),
        )
        return attach_benchmarks(frame, self).drop(_INPUTS).row(0, named=True)


@cache
def _default_table() -> BenchmarkTable:
    return BenchmarkTable.load(
        DEFAULT_DIR / "benchmarks.csv",
        DEFAULT_DIR / "market_averages.csv",
        DEFAULT_DIR / "type_factors.csv",
    )


def _lookup(keys: pl.DataFrame, table: BenchmarkTable) -> pl.DataFrame:
    """Attached columns for each distinct (city, district, type) of the input."""
    keys = keys.with_columns(city_key=city_key_expr(pl.col("_city"))).with_columns(
        district_key=district_key_expr(pl.col("_district"), pl.col("city_key"))
    )
    bench = table.benchmarks
    districts = bench.filter(pl.col("level") == "district").select(
        "city_key",
        "district_key",
        *[pl.col(c).alias(f"d_{c}") for c in _FIGURES],
        d_district_ar="district_ar",
    )
    cities = bench.filter(pl.col("level") == "city").select(
        "city_key", *[pl.col(c).alias(f"c_{c}") for c in _FIGURES], c_city_ar="city_ar"
    )
    market = table.market_averages
    city_market = market.filter(pl.col("level") == "city").select(
        "city_key", _type="type", m_city=pl.col("avg_sqm")
    )
    national = market.filter(pl.col("level") == "national").select(
        _type="type", m_national=pl.col("avg_sqm")
    )
    factors = table.type_factors
    district_factor = factors.filter(pl.col("level") == "district").select(
        "city_key", "district_key", _type="type", f_district="factor"
    )
    city_factor = factors.filter(pl.col("level") == "city").select(
        "city_key", _type="type", f_city="factor"
    )
    national_factor = factors.filter(pl.col("level") == "national").select(
        _type="type", f_national="factor"
    )
    keys = (
        keys.with_columns(_type=pl.col("_type_in").str.strip_chars().str.to_lowercase())
        .join(districts, on=["city_key", "district_key"], how="left")
        .join(cities, on="city_key", how="left")
        .join(city_market, on=["city_key", "_type"], how="left")
        .join(national, on="_type", how="left")
        .join(district_factor, on=["city_key", "district_key", "_type"], how="left")
        .join(city_factor, on=["city_key", "_type"], how="left")
        .join(national_factor, on="_type", how="left")
    )
    has_district = pl.col("d_year").is_not_null()
    has_city = pl.col("c_year").is_not_null()
    # The factor describes the benchmark's area: a district factor only on a district benchmark.
    use_district_factor = has_district & pl.col("f_district").is_not_null()
    use_city_factor = has_city & pl.col("f_city").is_not_null()
    use_national_factor = has_city & pl.col("f_national").is_not_null()
    figures = {
        f"benchmark_{c}": pl.when(has_district).then(pl.col(f"d_{c}")).otherwise(pl.col(f"c_{c}"))
        for c in _FIGURES
    }
    return keys.select(
        pl.col("^_.*$"),
        "city_key",
        "district_key",
        benchmark_level=pl.when(has_district)
        .then(pl.lit("district"))
        .when(has_city)
        .then(pl.lit("city")),
        **figures,
        market_avg_sqm=pl.coalesce("m_city", "m_national"),
        market_avg_level=pl.when(pl.col("m_city").is_not_null())
        .then(pl.lit("city"))
        .when(pl.col("m_national").is_not_null())
        .then(pl.lit("national")),
        benchmark_city_ar=pl.when(has_city).then(pl.col("c_city_ar")),
        benchmark_district_ar=pl.when(has_district).then(pl.col("d_district_ar")),
        type_factor=pl.when(use_district_factor)
        .then(pl.col("f_district"))
        .when(use_city_factor)
        .then(pl.col("f_city"))
        .when(use_national_factor)
        .then(pl.col("f_national"))
        .when(has_city)
        .then(pl.lit(NEUTRAL_TYPE_FACTOR)),
        type_factor_level=pl.when(use_district_factor)
        .then(pl.lit("district"))
        .when(use_city_factor)
        .then(pl.lit("city"))
        .when(use_national_factor)
        .then(pl.lit("national")),
    )


def attach_benchmarks(frame: pl.DataFrame, table: BenchmarkTable) -> pl.DataFrame:
    """`frame` with the columns of ATTACHED_SCHEMA added, same rows in the same order.

    Reads `city`, `district` and `type` (user text; a missing column counts as all null).
    Names are resolved once per distinct (city, district, type) and joined back on integer
    codes (categorical ids), which keeps a million rows well under a second.
    """
    texts = frame.select(
        (pl.col(src) if src in frame.columns else pl.lit(None)).cast(pl.String).alias(name)
        for name, src in _TEMP.items()
    )
    codes = texts.select(
        pl.col(name).cast(pl.Categorical).to_physical().alias(f"{name}_code") for name in _TEMP
    )
    code_columns = codes.columns
    distinct = pl.concat([codes, texts], how="horizontal").unique(subset=code_columns)
    found = _lookup(distinct, table).drop(list(_TEMP))
    attached = codes.join(
        found, on=code_columns, how="left", nulls_equal=True, maintain_order="left"
    ).select(pl.col(name).cast(dtype) for name, dtype in ATTACHED_SCHEMA.items())
    return pl.concat([frame.drop(list(ATTACHED_SCHEMA), strict=False), attached], how="horizontal")
