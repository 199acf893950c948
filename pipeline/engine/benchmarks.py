"""The engine's view of the benchmark tables: load them, attach benchmarks to a frame.

`benchmarks.csv`, `market_averages.csv` and `type_factors.csv` are built by
`benchmarks_build` from official MOJ / REGA files (see `sample_data/BENCHMARKS.md`). A row
finds its benchmark by district first, then by city; its market average (mean price per m2 of
its type) and its type factor (how the row's type prices against the benchmark area's mix of
all types) by the benchmark's district, then its city, then nationally. The district figures
apply only on a district benchmark: a row on its city's benchmark takes the city's.

Everything that depends on the tables alone (their lookup frames) is built once per
`BenchmarkTable`; a call resolves the input's names and joins, so one row costs about a
millisecond.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path

import polars as pl

from pipeline.engine.names import STRIP_WHITESPACE
from pipeline.engine.places import Places
from pipeline.errors import UsageError

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
    "district_key": pl.String(),  # empty on city and national rows
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
    "market_avg_level": pl.String(),  # district | city | national
    # Official Arabic names of the matched benchmark row (district null on a city benchmark).
    "benchmark_city_ar": pl.String(),
    "benchmark_district_ar": pl.String(),
    # Multiply the benchmark percentiles by this to compare like for like with the row's type;
    # null without percentiles (no benchmark, or none that stands for the type: CREDIBLE_BAND),
    # 1.0 (level null) when the type is unknown or unmapped.
    "type_factor": pl.Float64(),
    "type_factor_level": pl.String(),
}
# Type factor when the row's type has none at any level: the benchmark as it stands.
NEUTRAL_TYPE_FACTOR = 1.0
# A benchmark scaled to the type stands for the type only if its median lies within this band
# of the type's market average for the benchmark's own place (the district's on a district
# benchmark, the city's on a city's). Outside it, the place's deeds are of another market than
# the type's, and the factor cannot bridge them (Ranyah's commercial land: 4.47 SAR/m2 against
# its average of 23.52). Wide on purpose: the averages are REGA's means, the benchmark MOJ's
# deeds. A district without an average of its own is not judged by its city's: a district
# dearer or cheaper than its city (Riyadh الازدهار's land, Jeddah الشرائع's) keeps its figures.
CREDIBLE_BAND = (0.2, 5.0)
# Where the place has no average for the type, a home's figure must reach this share of the
# country's average for the type (about 440 SAR/m2): a building has a floor in what it costs,
# land has none. Afif's deeds are land, median 28 SAR/m2, which the national apartment factor
# made an apartment median of 59 against 4,404 in the country; Ranyah's own apartment factor,
# clamped at 8, made 133. Jeddah المسرة's villas (611, REGA's own cells 587) stand.
HOME_FLOOR = 0.1
BUILT_TO_A_FLOOR = ("apartment", "villa")
_FIGURES = ("median_sqm", "p25_sqm", "p75_sqm", "year", "transaction_count", "yoy_pct")
_PERCENTILES = ("median_sqm", "p25_sqm", "p75_sqm")
_INPUTS = ("city", "district", "type")
# Working names of the inputs, so they cannot clash with columns the lookup creates.
_TEMP = {"_city": "city", "_district": "district", "_type_in": "type"}
# Inputs up to this many rows (or distinct city, district, type) are resolved in Python, with
# `Places.city` / `Places.district` (microseconds a name) and dict look-ups; larger inputs by polars
# expressions and joins, whose fixed cost (a few ms) pays off there. Both read the same
# resolved table, and the name functions match their expressions (tests/test_names.py,
# tests/test_places.py).
_PYTHON_MAX = 256
# Match keys: the benchmark place and type a row resolves to (null where it has none).
_MATCH = ("_m_city", "_m_district", "_m_type")
# Attached columns that depend on the match keys only (all but the row's own keys).
_RESOLVED = tuple(c for c in ATTACHED_SCHEMA if c not in ("city_key", "district_key"))
_UNRESOLVED = (None,) * len(_RESOLVED)


class _PlaceMemo:
    """Places already resolved by this table, kept across calls: a batch scored in chunks
    resolves each distinct (city, district, type) once, not once per chunk."""

    LIMIT = 1_000_000  # distinct texts kept; past it, start over (memory stays bounded)

    def __init__(self) -> None:
        self._known = pl.DataFrame(schema={**dict.fromkeys(_TEMP, pl.String), **ATTACHED_SCHEMA})
        self._lock = threading.Lock()

    def attached(self, texts: pl.DataFrame, found: _Lookups) -> pl.DataFrame:
        """ATTACHED_SCHEMA columns for each row of `texts` (distinct _TEMP rows), in order."""
        keys = list(_TEMP)
        with self._lock:
            known = self._known
            missing = texts.join(known, on=keys, how="anti", nulls_equal=True)
            if not missing.is_empty():
                if missing.height <= _PYTHON_MAX:
                    values = _resolve_in_python(*(missing[c].to_list() for c in _TEMP), found)
                else:
                    values = _resolve_in_polars(missing, found).select(*ATTACHED_SCHEMA)
                fresh = pl.concat([missing, values], how="horizontal")
                if known.height + fresh.height > self.LIMIT:
                    known = known.clear()
                known = pl.concat([known, fresh.cast(known.schema)], how="vertical")
                self._known = known
        joined = texts.join(known, on=keys, how="left", nulls_equal=True, maintain_order="left")
        return joined.select(*ATTACHED_SCHEMA)


@dataclass(frozen=True)
class _Lookups:
    """Everything `attach_benchmarks` needs from the tables, built once per BenchmarkTable.

    `resolved` holds the attached columns for every benchmark place (each district row, each
    city with a benchmark or a market average, and no place at all) times every type in the
    tables (and no type): one join, or one dict look-up, per input row.
    """

    city_keys: frozenset[str]
    district_keys: frozenset[tuple[str, str]]
    types: frozenset[str]
    resolved: pl.DataFrame  # _MATCH + _RESOLVED, unique on _MATCH
    resolved_rows: dict[tuple[str | None, str | None, str | None], tuple]
    district_match: pl.DataFrame  # city_key, district_key, _m_district
    places: Places  # names -> the keys above
    memo: _PlaceMemo = field(default_factory=_PlaceMemo)


def _credible(median: str, factor: pl.Expr, local: pl.Expr) -> pl.Expr:
    """Whether a benchmark's median, scaled to the type by `factor`, can describe the type's
    market: within CREDIBLE_BAND of the type's average for the benchmark's own place (`local`),
    or, where that place has none, for a home, at least HOME_FLOOR of the country's."""
    scaled = pl.col(median) * factor.fill_null(NEUTRAL_TYPE_FACTOR)
    low, high = CREDIBLE_BAND
    floor = pl.when(pl.col("_type").is_in(BUILT_TO_A_FLOOR)).then(pl.col("m_national") * HOME_FLOOR)
    return (
        pl.when(local.is_not_null())
        .then((scaled / local).is_between(low, high))
        .otherwise(floor.is_null() | (scaled >= floor))
    )


def _output_exprs() -> list[pl.Expr]:
    """The attached columns from the joined lookup columns (see `_build_lookups`)."""
    has_district = pl.col("d_year").is_not_null()
    has_city = pl.col("c_year").is_not_null()
    own_district_factor = pl.col("f_district").is_not_null()
    # A factor borrowed from the city or the country where the area has none of its own.
    district_factor = pl.coalesce("f_district", "f_city", "f_national")
    city_factor = pl.coalesce("f_city", "f_national")
    # District figures describe the district: they apply only on its own benchmark (a row on
    # its city's benchmark takes the city's), like the type factor, which describes the
    # benchmark's mix. A district whose benchmark, scaled to the type, cannot describe the
    # type's market (judged by its own average only, never its city's) is on its city's
    # benchmark too; a city's that cannot gives the type no percentiles (see CREDIBLE_BAND).
    on_district = has_district & _credible("d_median_sqm", district_factor, pl.col("m_district"))
    priced_city = has_city & _credible("c_median_sqm", city_factor, pl.col("m_city"))
    priced = on_district | priced_city
    figures = [
        pl.when(on_district)
        .then(pl.col(f"d_{c}"))
        .when(priced_city | pl.lit(c not in _PERCENTILES))
        .then(pl.col(f"c_{c}"))
        .alias(f"benchmark_{c}")
        for c in _FIGURES
    ]
    use_district_market = on_district & pl.col("m_district").is_not_null()
    return [
        pl.when(on_district)
        .then(pl.lit("district"))
        .when(has_city)
        .then(pl.lit("city"))
        .alias("benchmark_level"),
        *figures,
        pl.when(use_district_market)
        .then(pl.col("m_district"))
        .otherwise(pl.coalesce("m_city", "m_national"))
        .alias("market_avg_sqm"),
        pl.when(use_district_market)
        .then(pl.lit("district"))
        .when(pl.col("m_city").is_not_null())
        .then(pl.lit("city"))
        .when(pl.col("m_national").is_not_null())
        .then(pl.lit("national"))
        .alias("market_avg_level"),
        pl.when(has_city).then(pl.col("c_city_ar")).alias("benchmark_city_ar"),
        pl.when(on_district).then(pl.col("d_district_ar")).alias("benchmark_district_ar"),
        pl.when(on_district)
        .then(district_factor.fill_null(NEUTRAL_TYPE_FACTOR))
        .when(priced_city)
        .then(city_factor.fill_null(NEUTRAL_TYPE_FACTOR))
        .alias("type_factor"),
        pl.when(on_district & own_district_factor)
        .then(pl.lit("district"))
        .when(priced & pl.col("f_city").is_not_null())
        .then(pl.lit("city"))
        .when(priced & pl.col("f_national").is_not_null())
        .then(pl.lit("national"))
        .alias("type_factor_level"),
    ]


def _build_lookups(bench: pl.DataFrame, market: pl.DataFrame, factors: pl.DataFrame) -> _Lookups:
    if "district_key" not in market.columns:  # a table built before district averages
        market = market.with_columns(district_key=pl.lit(None, pl.String))

    def level(frame: pl.DataFrame, name: str, keys: list[str]) -> pl.DataFrame:
        # One row per key: a duplicated key would multiply the caller's rows.
        rows = frame.filter(pl.col("level") == name)
        return rows.unique(keys, keep="first", maintain_order=True) if keys else rows

    def by_type(keys: list[str], name: str, suffix: str) -> pl.DataFrame:
        on = [*keys, "_type"]
        averages = level(market.rename({"type": "_type"}), name, on).select(
            *on, **{f"m_{suffix}": pl.col("avg_sqm")}
        )
        factor = level(factors.rename({"type": "_type"}), name, on).select(
            *on, **{f"f_{suffix}": pl.col("factor")}
        )
        return averages.join(factor, on=on, how="full", coalesce=True)

    districts = level(bench, "district", ["city_key", "district_key"]).select(
        "city_key",
        "district_key",
        *[pl.col(c).alias(f"d_{c}") for c in _FIGURES],
        d_district_ar="district_ar",
    )
    cities = level(bench, "city", ["city_key"]).select(
        "city_key", *[pl.col(c).alias(f"c_{c}") for c in _FIGURES], c_city_ar="city_ar"
    )
    district_types = by_type(["city_key", "district_key"], "district", "district")
    city_types = by_type(["city_key"], "city", "city")
    national_types = by_type([], "national", "national")

    district_keys = districts.select("city_key", "district_key").drop_nulls()
    city_keys = (
        pl.concat([cities["city_key"], city_types["city_key"], district_keys["city_key"]])
        .drop_nulls()
        .unique()
        .sort()
    )
    types = (
        pl.concat([district_types["_type"], city_types["_type"], national_types["_type"]])
        .drop_nulls()
        .unique()
        .sort()
    )
    places = pl.concat(
        [
            district_keys,
            pl.DataFrame({"city_key": city_keys}).with_columns(
                district_key=pl.lit(None, pl.String)
            ),
            pl.DataFrame(
                {"city_key": [None], "district_key": [None]},
                schema=dict.fromkeys(["city_key", "district_key"], pl.String),
            ),
        ]
    )
    no_type = pl.Series([None], dtype=pl.String)
    grid = places.join(pl.DataFrame({"_type": pl.concat([types, no_type])}), how="cross")
    resolved = (
        grid.join(districts, on=["city_key", "district_key"], how="left")
        .join(cities, on="city_key", how="left")
        .join(district_types, on=["city_key", "district_key", "_type"], how="left")
        .join(city_types, on=["city_key", "_type"], how="left")
        .join(national_types, on="_type", how="left")
        .select(
            pl.col("city_key").alias("_m_city"),
            pl.col("district_key").alias("_m_district"),
            pl.col("_type").alias("_m_type"),
            *_output_exprs(),
        )
        .select(*_MATCH, *(pl.col(c).cast(ATTACHED_SCHEMA[c]) for c in _RESOLVED))
    )
    rows = resolved.rows()
    return _Lookups(
        city_keys=frozenset(city_keys.to_list()),
        district_keys=frozenset(district_keys.iter_rows()),
        types=frozenset(types.to_list()),
        resolved=resolved,
        resolved_rows={row[:3]: row[3:] for row in rows},
        district_match=district_keys.with_columns(_m_district=pl.col("district_key")),
        places=Places(city_keys.to_list(), district_keys.iter_rows()),
    )


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
    def read(
        cls,
        benchmarks_path: Path,
        market_averages_path: Path | None = None,
        type_factors_path: Path | None = None,
    ) -> BenchmarkTable:
        """Read and check `benchmarks_path`, the market averages and the type factors
        (default: the `market_averages.csv` and `type_factors.csv` beside it): a few ms. Their
        lookups are built when first used (a rerun answered from its journal needs none). A
        file that cannot be read, or is not such a table, is a UsageError naming it."""
        paths = _table_paths(benchmarks_path, market_averages_path, type_factors_path)
        parts = _table_bytes(paths)
        benchmarks, market, factors = (
            _checked(part, path, schema, benchmarks_path=paths[0])
            for part, path, schema in zip(parts, paths, _SCHEMAS, strict=True)
        )
        return cls(
            benchmarks=benchmarks,
            market_averages=market,
            version=_digest(parts),
            type_factors=factors,
        )

    @classmethod
    def load(
        cls,
        benchmarks_path: Path,
        market_averages_path: Path | None = None,
        type_factors_path: Path | None = None,
    ) -> BenchmarkTable:
        """`read`, with the lookups built now, so that the first request does not pay for them."""
        table = cls.read(benchmarks_path, market_averages_path, type_factors_path)
        table.lookups  # noqa: B018
        return table

    @cached_property
    def lookups(self) -> _Lookups:
        """The tables reshaped for `attach_benchmarks`, built on first use and kept."""
        return _build_lookups(self.benchmarks, self.market_averages, self.type_factors)

    @cached_property
    def city_trends(self) -> dict[str, float]:
        """Each city's own yoy_pct, by city key (a district row without one of its own
        carries its city's: see sample_data/BENCHMARKS.md)."""
        cities = self.benchmarks.filter(
            (pl.col("level") == "city") & pl.col("yoy_pct").is_not_null()
        )
        return dict(zip(cities["city_key"].to_list(), cities["yoy_pct"].to_list(), strict=True))

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


def _table_paths(
    benchmarks_path: Path, market_averages_path: Path | None, type_factors_path: Path | None
) -> tuple[Path, Path, Path]:
    benchmarks_path = Path(benchmarks_path)
    market_path = Path(market_averages_path or benchmarks_path.with_name("market_averages.csv"))
    factors_path = Path(type_factors_path or benchmarks_path.with_name("type_factors.csv"))
    return benchmarks_path, market_path, factors_path


def _table_bytes(paths: tuple[Path, Path, Path]) -> list[bytes]:
    parts = []
    for path in paths:
        try:
            parts.append(path.read_bytes())
        except OSError as exc:  # a settings file copied elsewhere takes `table` from there (QA 66)
            raise UsageError(
                f"cannot read the benchmark table {path} ({exc.strerror}): {_where_set(paths[0])}"
            ) from exc
    return parts


def _where_set(benchmarks_path: Path) -> str:
    """The setting that places the tables, and how to make them: the end of their errors."""
    return (
        "`table` under [benchmarks] in the settings (configs/settings.toml, or the file "
        "DECISIONS_SETTINGS names) places the tables (market_averages.csv and type_factors.csv "
        "beside it), a relative path from the folder above the settings file's; build them "
        f"with `decisions benchmarks build --out {benchmarks_path}`"
    )


class _NotATable(Exception):
    """A file read that is not the table asked for; the message says why, after its name."""


_SCHEMAS = (BENCHMARK_SCHEMA, MARKET_SCHEMA, TYPE_FACTOR_SCHEMA)
_TAKES = {pl.Float64(): "numbers", pl.Int64(): "whole numbers"}
_COLUMNS_NAMED = 12


def _checked(
    data: bytes, path: Path, schema: dict[str, pl.DataType], *, benchmarks_path: Path
) -> pl.DataFrame:
    """The table read from `data` (the file `path`) with `schema`'s columns and types, or a
    UsageError naming the file, what makes it no such table and the setting to fix."""
    try:
        return _parsed(data, schema)
    except _NotATable as exc:
        where = _where_set(benchmarks_path)
        raise UsageError(f"the benchmark table {path} {exc}: {where}") from None


def _parsed(data: bytes, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """CSV `data` as `schema`'s columns, in its order and types. A table as `benchmarks build`
    writes it takes one typed read, the cheapest; another (extra columns, an older market
    averages table) is read as text, which also finds what makes a file no such table."""
    try:
        table = pl.read_csv(data, schema=schema)
    except pl.exceptions.PolarsError:
        table = _read_as_text(data, schema)
    if table.is_empty():
        raise _NotATable("holds no rows")
    return table


def _read_as_text(data: bytes, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """`_parsed` for a file the typed read refused: its columns found by name (others are
    ignored), then cast, or _NotATable saying what is wrong."""
    if not data.strip():
        raise _NotATable("is empty")
    if data.startswith(b"PAR1"):
        raise _NotATable(
            "is a Parquet file, not CSV (the tables are CSV, as `decisions benchmarks build` "
            "writes them)"
        )
    try:
        text = pl.read_csv(data, infer_schema=False)
    except pl.exceptions.PolarsError as exc:  # not UTF-8, a row longer than the header...
        raise _NotATable(_unreadable(data, schema, exc)) from None
    if missing := _missing(schema, text):
        raise _NotATable(_lacking(missing, text.columns))
    text = text.select((pl.col(c) if c in text.columns else pl.lit(None)).alias(c) for c in schema)
    try:
        return text.cast(schema)
    except pl.exceptions.InvalidOperationError:
        raise _NotATable(_first_mistyped(text, schema)) from None


def _missing(schema: dict[str, pl.DataType], text: pl.DataFrame) -> list[str]:
    """The columns of `schema` that `text` lacks. One without district rows may lack
    district_key (null then): market averages built before the district ones have none."""
    missing = [c for c in schema if c not in text.columns]
    no_districts = "level" in text.columns and not text["level"].eq("district").any()
    if "district_key" in missing and no_districts:
        missing.remove("district_key")
    return missing


def _unreadable(data: bytes, schema: dict[str, pl.DataType], error: Exception) -> str:
    """Why CSV `data` could not be read: the columns its header lacks, when it lacks some (a
    text file renamed: which table was meant is clearer than where its lines went wrong)."""
    try:
        header = pl.read_csv(data, n_rows=0, infer_schema=False)
    except pl.exceptions.PolarsError:
        header = None
    if header is not None and (missing := _missing(schema, header)):
        return _lacking(missing, header.columns)
    return f"cannot be read as CSV ({str(error).splitlines()[0]})"


def _lacking(missing: list[str], columns: list[str]) -> str:
    named = ", ".join(columns[:_COLUMNS_NAMED]) + (", ..." if len(columns) > _COLUMNS_NAMED else "")
    plural = "s" if len(missing) > 1 else ""
    return f"lacks the column{plural} {', '.join(missing)} (its columns: {named})"


def _first_mistyped(text: pl.DataFrame, schema: dict[str, pl.DataType]) -> str:
    """The first value of `text` its column's type cannot take, and its line in the file (a
    CSV file's header is its first line)."""
    for name, dtype in schema.items():
        values = text[name]
        wrong = values.is_not_null() & values.cast(dtype, strict=False).is_null()
        if wrong.any():
            row = wrong.arg_true()[0]
            where = f"in the column {name} (line {row + 2})"
            return f"holds {values[row]!r} {where}, which takes {_TAKES[dtype]}"
    return "holds values its columns cannot take"


def _digest(parts: list[bytes]) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:12]


@cache
def _default_table() -> BenchmarkTable:
    return BenchmarkTable.load(
        DEFAULT_DIR / "benchmarks.csv",
        DEFAULT_DIR / "market_averages.csv",
        DEFAULT_DIR / "type_factors.csv",
    )


def _resolve_row(
    city: str | None, district: str | None, type_: str | None, found: _Lookups
) -> tuple:
    """The attached columns (ATTACHED_SCHEMA, in order) of one (city, district, type)."""
    ckey = found.places.city(city)
    dkey = found.places.district(district, ckey)
    kind = None if type_ is None else type_.strip(STRIP_WHITESPACE).lower()
    match = (
        ckey if ckey in found.city_keys else None,
        dkey if (ckey, dkey) in found.district_keys else None,
        kind if kind in found.types else None,
    )
    if match[1] is not None:
        match = (ckey, *match[1:])
    return (ckey, dkey, *found.resolved_rows.get(match, _UNRESOLVED))


def _resolve_in_python(cities: list, districts: list, types: list, found: _Lookups) -> pl.DataFrame:
    """The attached columns (ATTACHED_SCHEMA) for each (city, district, type), in Python."""
    rows = [_resolve_row(*place, found) for place in zip(cities, districts, types, strict=True)]
    return pl.DataFrame(rows, schema=ATTACHED_SCHEMA, orient="row")


def attached_row(
    city: str | None, district: str | None, type_: str | None, table: BenchmarkTable
) -> dict:
    """`attach_benchmarks` for one place, as a dict of the ATTACHED_SCHEMA columns (no polars:
    the service's path, microseconds)."""
    return dict(
        zip(ATTACHED_SCHEMA, _resolve_row(city, district, type_, table.lookups), strict=True)
    )


def _resolve_in_polars(keys: pl.DataFrame, found: _Lookups) -> pl.DataFrame:
    """`keys` (_city, _district, _type_in, ...) with the attached columns, by expressions."""
    keys = found.places.with_keys(keys, "_city", "_district")
    kind = pl.col("_type_in").str.strip_chars().str.to_lowercase()
    return (
        keys.join(found.district_match, on=["city_key", "district_key"], how="left")
        .with_columns(
            _m_city=pl.when(
                pl.col("city_key").is_in(list(found.city_keys))
                | pl.col("_m_district").is_not_null()
            ).then(pl.col("city_key")),
            _m_type=pl.when(kind.is_in(list(found.types))).then(kind),
        )
        .join(found.resolved, on=list(_MATCH), how="left", nulls_equal=True)
    )


def attach_benchmarks(frame: pl.DataFrame, table: BenchmarkTable) -> pl.DataFrame:
    """`frame` with the columns of ATTACHED_SCHEMA added, same rows in the same order.

    Reads `city`, `district` and `type` (user text; a missing column counts as all null).
    Names are resolved once per distinct (city, district, type), remembered by the table, and
    joined back on integer codes (categorical ids), which keeps a million rows well under a
    second; a small frame
    is resolved row by row in Python, which keeps one row around a millisecond.
    """
    found = table.lookups
    texts = frame.select(
        (pl.col(src) if src in frame.columns else pl.lit(None)).cast(pl.String).alias(name)
        for name, src in _TEMP.items()
    )
    if texts.height <= _PYTHON_MAX:
        attached = _resolve_in_python(*(texts[c].to_list() for c in _TEMP), found)
    else:
        codes = texts.select(
            pl.col(name).cast(pl.Categorical).to_physical().alias(f"{name}_code") for name in _TEMP
        )
        code_columns = codes.columns
        distinct = pl.concat([codes, texts], how="horizontal").unique(subset=code_columns)
        values = found.memo.attached(distinct.select(*_TEMP), found)
        found_rows = pl.concat([distinct.select(code_columns), values], how="horizontal")
        attached = codes.join(
            found_rows, on=code_columns, how="left", nulls_equal=True, maintain_order="left"
        ).select(pl.col(name).cast(dtype) for name, dtype in ATTACHED_SCHEMA.items())
    return pl.concat([frame.drop(list(ATTACHED_SCHEMA), strict=False), attached], how="horizontal")
