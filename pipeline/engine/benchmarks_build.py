"""Build the benchmark tables from the official MOJ and REGA files (`../shared/data`).

Three CSVs come out, described (sources, rules, how to trace a figure) in
`sample_data/BENCHMARKS.md`:

- `benchmarks.csv`: price per m2 percentiles (p25 / median / p75) and transaction counts
  per city and per (city, district) from the MOJ 2024 deeds, the only deed-level source,
  plus `yoy_pct` from the REGA quarterly aggregates.
- `market_averages.csv`: mean price per m2 per property type from REGA, per district (where
  the district has its own type factor), per city and nationally.
- `type_factors.csv`: per district / city / nationally and per property type, how much
  dearer (or cheaper) per m2 that type trades than the area's deeds of all types together
  (REGA), so that the type-blind MOJ percentiles can be compared like for like.

Every figure is derived, not official data. Output is sorted and rounded so that a rebuild
from the same files is byte-identical.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline.engine.aliases import city_key_expr, district_key_expr
from pipeline.engine.names import normalize_name, normalize_name_expr
from pipeline.errors import UsageError

MOJ_FILE = Path("moj") / "moj-sales-2024-clean.csv.gz"
QUARTER_REPORT_FILE = Path("rega") / "quarter-report-SI-2018Q1-2023Q3.csv"
SALES_INDICATORS_DIR = Path("rega") / "sales-indicators"

BENCHMARK_YEAR = 2024
# Fewer deeds than this and a district gets no row of its own (it falls back to its city);
# a city gets no row at all. With 30 deeds the quartiles move little when one deed changes.
MIN_TRANSACTIONS = 30
# Agricultural deeds price farmland per m2 (median 60 SAR) and would drag every urban
# benchmark down; the spec's types are all urban.
CLASSIFICATIONS = ("Residential", "Commercial")
# MOJ district labels that name no district: "other", "outside district boundaries"; as keys
# (normalize_name: a final lone hamza goes, so the second is not the spelling it was written as).
NOT_A_DISTRICT = frozenset(normalize_name(label) for label in ("أخرى", "خارج حدود الأحياء"))

# yoy_pct compares the same quarters (Q1-Q3) of the year before, type by type.
YOY_QUARTERS = (1, 2, 3)
# Deeds a (place, type) cell needs in each year to enter the comparison, and a place in total.
YOY_MIN_TYPE_DEEDS = 10
YOY_MIN_DEEDS = MIN_TRANSACTIONS
# A city or national market average needs this many priced deeds behind it.
MIN_MARKET_DEEDS = MIN_TRANSACTIONS

BENCHMARK_COLUMNS = (
    "city_key",
    "district_key",
    "city_ar",
    "district_ar",
    "level",
    "median_sqm",
    "p25_sqm",
    "p75_sqm",
    "year",
    "transaction_count",
    "yoy_pct",
)
MARKET_COLUMNS = ("city_key", "district_key", "type", "avg_sqm", "deed_count", "year", "level")
TYPE_FACTOR_COLUMNS = (
    "city_key",
    "district_key",
    "type",
    "factor",
    "type_deeds",
    "all_deeds",
    "year",
    "level",
)
# A type factor needs this many priced deeds of the type, and of all types together, in its
# area (else the area falls back: district -> city -> national).
TYPE_FACTOR_MIN_TYPE_DEEDS = 20
TYPE_FACTOR_MIN_ALL_DEEDS = MIN_TRANSACTIONS
# Factors are clamped to this range, a guard against freak cells rather than a correction:
# unclamped, 2024 district factors stay within 0.2-3.7, but city factors reach 18 where cheap
# land dominates the deeds (Hail apartments 7.7, Buraydah villas 5.4, Arar apartments 12.3).
# Up to 8 those are real, large-sample ratios; the few below 0.25 are thin commercial-land
# cells. See BENCHMARKS.md.
TYPE_FACTOR_RANGE = (0.25, 8.0)
# A district's REGA cells must describe the same market as its MOJ deeds: REGA's all-types mean
# within this range of the MOJ mean price per m2 of the district's benchmark deeds, else the
# district gets no factors of its own (its city's apply). 90% of districts lie within 0.86-1.36;
# outside 0.5-2 are cells like a 75-deed bulk land sale at 450 SAR/m2 in Riyadh's الغدير (whose
# MOJ benchmark has 34 deeds at a median of 8,100). Not applied to cities, see BENCHMARKS.md.
TYPE_FACTOR_AGREEMENT = (0.5, 2.0)
# A district market average is the numerator of the district's type factor (REGA mean price per
# m2 of the type there), so it exists exactly where that factor does: same cells, year rule
# (2024 first, else 2023), minimums and agreement check. This names the type minimum it inherits.
MIN_DISTRICT_MARKET_DEEDS = TYPE_FACTOR_MIN_TYPE_DEEDS
TYPE_ORDER = ("apartment", "villa", "land", "commercial", "office")


@dataclass(frozen=True)
class BuildReport:
    """What a build read, kept and wrote; `lines()` is what the CLI prints."""

    benchmarks_path: Path
    market_averages_path: Path
    deeds_read: int
    deeds_used: int
    excluded_agricultural: int
    excluded_multi_property: int
    benchmark_rows: int
    cities: int
    districts: int
    rows_with_yoy: int
    market_rows: int
    type_factors_path: Path | None = None
    type_factor_rows: int = 0

    def lines(self) -> list[str]:
        return [
            f"MOJ deeds read: {self.deeds_read:,}; used: {self.deeds_used:,} "
            f"(excluded agricultural {self.excluded_agricultural:,}, "
            f"multi-property {self.excluded_multi_property:,})",
            f"{self.benchmarks_path}: {self.benchmark_rows} rows, {self.cities} cities, "
            f"{self.districts} districts, {self.rows_with_yoy} with yoy_pct",
            f"{self.market_averages_path}: {self.market_rows} rows",
            f"{self.type_factors_path}: {self.type_factor_rows} rows",
        ]


def _with_city_keys(frame: pl.DataFrame, column: str) -> pl.DataFrame:
    """`frame` with `city_key`, the key of its `column`: worked out once per city name (the
    files repeat a few hundred names over hundreds of thousands of rows)."""
    names = frame.select(pl.col(column).unique()).with_columns(
        city_key=city_key_expr(pl.col(column))
    )
    return frame.join(names, on=column, how="left", maintain_order="left")


def read_moj_deeds(path: Path) -> pl.DataFrame:
    """MOJ deeds with their keys: city_key, district_key (null when no district is named),
    city_ar, district_ar, classification, num_properties, price_per_sqm."""
    deeds = pl.read_csv(
        path,
        columns=["city_ar", "district_ar", "classification", "num_properties", "price_per_sqm"],
        schema_overrides={"num_properties": pl.Float64, "price_per_sqm": pl.Float64},
    )
    # district_ar is written "city/district"; the city part repeats city_ar.
    district = pl.col("district_ar").str.split_exact("/", 1).struct.field("field_1")
    deeds = _with_city_keys(
        deeds.with_columns(
            pl.col("city_ar").str.strip_chars(),
            district.str.strip_chars().alias("district_ar"),
        ),
        "city_ar",
    )
    deeds = deeds.with_columns(
        district_key=district_key_expr(pl.col("district_ar"), pl.col("city_key"))
    )
    # "Other", "outside the boundaries", or the city's own name: no district to benchmark.
    named = ~pl.col("district_key").is_in(list(NOT_A_DISTRICT)) & (
        pl.col("district_key") != pl.col("city_key")
    )
    return deeds.with_columns(district_key=pl.when(named).then(pl.col("district_key")))


# REGA headers (stripped of BOM and spaces) -> our names. Files before 2025 call the value
# column مجموع سعر العقار, later ones قيمة الصفقات; the second "الربع" is the quarter's name.
_SALES_HEADERS = {
    "السنة": "year",
    "الربع": "quarter",
    "رقم الربع": "quarter_id",
    "المنطقة": "region",
    "المدينة": "city",
    "الحي": "district",
    "نوع العقار": "rega_type",
    "تصنيف العقار": "rega_class",
    "عدد الصكوك": "deeds",
    "مجموع سعر العقار": "value",
    "قيمة الصفقات": "value",
    "المساحة M2": "area",
    "متوسط سعر المتر": "sqm",
    "الحد الأعلى لسعر المتر": "max_sqm",
    "الحد الأدنى لسعر المتر": "min_sqm",
}
# A published cell mean outside this range (SAR/m2) is a data error, not a market price.
VALID_SQM = (10.0, 100_000.0)


def _spec_type(rega_type: pl.Expr, rega_class: pl.Expr) -> pl.Expr:
    """REGA property category -> the spec's type (null for categories the spec lacks).

    Until 2024 land comes as "قطعة أرض-سكنى" / "قطعة أرض-تجارى"; from 2025 as "أرض" with a
    classification column. Commercial is commercial land: the only commercial category
    published for a full year.
    """
    t, c = normalize_name_expr(rega_type), normalize_name_expr(rega_class)
    return (
        pl.when(t == "شقه")
        .then(pl.lit("apartment"))
        .when(t == "فيلا")
        .then(pl.lit("villa"))
        .when((t == "قطعه ارض سكني") | ((t == "ارض") & (c == "سكني")))
        .then(pl.lit("land"))
        .when((t == "قطعه ارض تجاري") | ((t == "ارض") & (c == "تجاري")))
        .then(pl.lit("commercial"))
    )


def _is_agricultural(rega_type: pl.Expr, rega_class: pl.Expr) -> pl.Expr:
    """Farmland: "قطعة أرض- زراعي" until 2024, "أرض" with the class "زراعي" from 2025."""
    t, c = normalize_name_expr(rega_type), normalize_name_expr(rega_class)
    return t.str.contains("زراعي").fill_null(False) | (c == "زراعي").fill_null(False)


def _rega_cells(frame: pl.DataFrame, *, all_types: bool = False) -> pl.DataFrame:
    """Common shape of both REGA sources: year, quarter, city_key, district_key, type,
    deeds, sqm; only cells of a spec type with a plausible published mean.

    With `all_types`, categories the spec lacks (whole buildings, "other", ...) are kept as
    type "other", farmland excepted: the deeds of every type that the MOJ benchmark mixes.
    """
    low, high = VALID_SQM
    spec_type = _spec_type(pl.col("rega_type"), pl.col("rega_class"))
    if all_types:
        farmland = _is_agricultural(pl.col("rega_type"), pl.col("rega_class"))
        spec_type = pl.when(farmland).then(None).otherwise(spec_type.fill_null("other"))
    return (
        _with_city_keys(frame.with_columns(type=spec_type), "city")
        .with_columns(district_key=district_key_expr(pl.col("district"), pl.col("city_key")))
        .with_columns(
            district_key=pl.when(~pl.col("district_key").is_in(list(NOT_A_DISTRICT))).then(
                pl.col("district_key")
            )
        )
        .filter(
            pl.col("type").is_not_null(), pl.col("sqm").is_between(low, high), pl.col("deeds") > 0
        )
        .select("year", "quarter", "city_key", "district_key", "type", "deeds", "sqm")
    )


def read_quarter_report(path: Path, *, all_types: bool = False) -> pl.DataFrame:
    """REGA quarter report 2018Q1-2023Q3 as cells (see `_rega_cells`); `sqm` is its
    Meter_Price_W_Avg_IQR (area-weighted mean after an IQR filter, blank for small cells)."""
    raw = pl.read_csv(path, infer_schema=False, encoding="utf8-lossy")
    raw = raw.rename({c: c.strip().lstrip("\ufeff").strip() for c in raw.columns})
    frame = raw.select(
        year=pl.col("yearnumber").str.strip_chars().cast(pl.Int64),
        quarter=pl.col("quarternumber").str.strip_chars().cast(pl.Int64),
        city=pl.col("city_ar").str.strip_chars(),
        district=pl.col("district_ar").str.strip_chars(),
        rega_type=pl.col("typecategoryar").str.strip_chars(),
        rega_class=pl.lit(None, pl.String),
        deeds=pl.col("deed_counts").cast(pl.Float64).cast(pl.Int64),
        sqm=pl.col("Meter_Price_W_Avg_IQR").cast(pl.Float64),
    )
    return _rega_cells(frame, all_types=all_types)


def _read_sales_file(path: Path) -> pl.DataFrame:
    with path.open(encoding="utf-8-sig") as f:
        header = next(csv.reader(f))
    names: list[str] = []
    for i, title in enumerate(header):
        name = _SALES_HEADERS.get(title.strip(), f"unused_{i}")
        names.append("quarter_name" if name == "quarter" and "quarter" in names else name)
    frame = pl.read_csv(
        path,
        has_header=False,
        skip_rows=1,
        new_columns=names,
        infer_schema=False,
        null_values=["NULL", ""],
        encoding="utf8-lossy",
    )
    if "rega_class" not in frame.columns:
        frame = frame.with_columns(rega_class=pl.lit(None, pl.String))
    frame = frame.with_columns(pl.col(pl.String).str.strip_chars())
    return frame.select(
        year=pl.col("year").cast(pl.Float64).cast(pl.Int64),
        quarter=pl.col("quarter").cast(pl.Float64).cast(pl.Int64),
        city=pl.col("city"),
        district=pl.col("district"),
        rega_type=pl.col("rega_type"),
        rega_class=pl.col("rega_class"),
        deeds=pl.col("deeds").cast(pl.Float64).cast(pl.Int64),
        sqm=pl.col("sqm").cast(pl.Float64),
    ).filter(pl.col("year").is_not_null())


def read_sales_indicators(directory: Path, *, all_types: bool = False) -> pl.DataFrame:
    """All REGA sales-indicator files as cells (see `_rega_cells`). Year and quarter come
    from the columns, never the file name; a row published twice counts once. `sqm` is the
    published mean price per m2, blank for cells of fewer than five deeds."""
    files = sorted(Path(directory).glob("*.csv"))
    if not files:
        raise FileNotFoundError(f"no REGA sales-indicator CSV files in {directory}")
    frame = pl.concat([_read_sales_file(f) for f in files]).unique(maintain_order=True)
    return _rega_cells(frame, all_types=all_types)


def _label(deeds: pl.DataFrame, keys: list[str], raw: str) -> pl.DataFrame:
    """The most frequent official spelling behind each key (ties: the smallest string)."""
    return (
        deeds.group_by([*keys, raw])
        .len()
        .sort([*keys, "len", raw], descending=[False] * len(keys) + [True, False])
        .group_by(keys, maintain_order=True)
        .first()
        .drop("len")
    )


def _percentiles(deeds: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    sqm = pl.col("price_per_sqm")
    return (
        deeds.group_by(keys)
        .agg(
            median_sqm=sqm.median(),
            p25_sqm=sqm.quantile(0.25, interpolation="linear"),
            p75_sqm=sqm.quantile(0.75, interpolation="linear"),
            transaction_count=pl.len().cast(pl.Int64),
        )
        .filter(pl.col("transaction_count") >= MIN_TRANSACTIONS)
    )


def moj_benchmarks(deeds: pl.DataFrame) -> pl.DataFrame:
    """City and district percentile rows (no yoy_pct yet) from the kept deeds."""
    city_label = _label(deeds, ["city_key"], "city_ar")
    cities = _percentiles(deeds, ["city_key"]).join(city_label, on="city_key")
    with_district = deeds.filter(pl.col("district_key").is_not_null())
    districts = (
        _percentiles(with_district, ["city_key", "district_key"])
        .join(cities.select("city_key", "city_ar"), on="city_key")  # only cities with a row
        .join(
            _label(with_district, ["city_key", "district_key"], "district_ar"),
            on=["city_key", "district_key"],
        )
    )
    cities = cities.with_columns(
        district_key=pl.lit(None, pl.String),
        district_ar=pl.lit(None, pl.String),
        level=pl.lit("city"),
    )
    districts = districts.with_columns(level=pl.lit("district"))
    return pl.concat([cities, districts], how="diagonal_relaxed").with_columns(
        year=pl.lit(BENCHMARK_YEAR, pl.Int64)
    )


def _type_means(cells: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Deed-weighted mean price per m2 and deed count per key and type."""
    return (
        cells.group_by([*keys, "type"])
        .agg(
            sqm=(pl.col("sqm") * pl.col("deeds")).sum() / pl.col("deeds").sum(),
            deeds=pl.col("deeds").sum(),
        )
        .filter(pl.col("deeds") > 0)
    )


def yoy_by_place(
    before: pl.DataFrame, after: pl.DataFrame, keys: list[str], within: tuple[str, ...] = ()
) -> pl.DataFrame:
    """Mix-adjusted change in percent, `after` against `before`, per `keys`.

    Prices are compared cell by cell, a cell being a property type (and each of `within`,
    e.g. the district, for a city figure); each cell's price ratio is weighted by its deeds
    in both years. So a city that sold more cheap outskirts land this year does not look
    cheaper just for that. Cells without a value for a `within` column do not take part.
    """
    cell = [*keys, *within]
    pairs = _type_means(before, cell).join(
        _type_means(after, cell), on=[*cell, "type"], suffix="_after"
    )
    pairs = pairs.filter(
        (pl.col("deeds") >= YOY_MIN_TYPE_DEEDS) & (pl.col("deeds_after") >= YOY_MIN_TYPE_DEEDS)
    ).with_columns(weight=pl.col("deeds") + pl.col("deeds_after"))
    ratio = pl.col("sqm_after") / pl.col("sqm")
    return (
        pairs.group_by(keys)
        .agg(
            yoy_pct=((ratio * pl.col("weight")).sum() / pl.col("weight").sum() - 1) * 100,
            deeds=pl.col("deeds").sum(),
            deeds_after=pl.col("deeds_after").sum(),
        )
        .filter((pl.col("deeds") >= YOY_MIN_DEEDS) & (pl.col("deeds_after") >= YOY_MIN_DEEDS))
        .select(*keys, "yoy_pct")
    )


def attach_yoy(bench: pl.DataFrame, before: pl.DataFrame, after: pl.DataFrame) -> pl.DataFrame:
    """yoy_pct of the district where it has enough deeds in both years, else of its city
    (compared district by district where REGA names districts, else type by type)."""
    by_district = yoy_by_place(before, after, ["city_key", "district_key"])
    by_city = (
        yoy_by_place(before, after, ["city_key"], ("district_key",))
        .join(yoy_by_place(before, after, ["city_key"]), on="city_key", how="full", coalesce=True)
        .select("city_key", city_yoy=pl.coalesce("yoy_pct", "yoy_pct_right"))
    )
    return (
        bench.join(by_district, on=["city_key", "district_key"], how="left")
        .join(by_city, on="city_key", how="left")
        .with_columns(yoy_pct=pl.coalesce("yoy_pct", "city_yoy"))
        .drop("city_yoy")
    )


def district_market_averages(factor_rows: pl.DataFrame) -> pl.DataFrame:
    """District rows of market_averages.csv from the (unfinished) output of `type_factors`:
    each district type factor's numerator, the REGA deed-weighted mean price per m2 of the type
    in the district, with its deeds and year. So a district has a market average for a type
    exactly where it has a type factor of its own (2024 first, else 2023; at least
    MIN_DISTRICT_MARKET_DEEDS deeds of the type; REGA cells that agree with the MOJ deeds), and
    the two always describe the same cells. Office rows are not taken here (see
    `market_averages`, which derives them from commercial)."""
    return factor_rows.filter(
        pl.col("level") == "district",
        pl.col("type") != "office",
        pl.col("type_deeds") >= MIN_DISTRICT_MARKET_DEEDS,
    ).select(
        "city_key",
        "district_key",
        "type",
        avg_sqm=pl.col("sqm"),
        deed_count=pl.col("type_deeds"),
        year=pl.col("year"),
    )


def market_averages(
    latest: pl.DataFrame, fallback: pl.DataFrame, districts: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Mean price per m2 per city and type: from `latest` (REGA 2024, a full year) where a
    city has it, else from `fallback` (the quarter report's last year); a national row per
    type from `fallback`, which covers the whole country. `districts` (see
    `district_market_averages`) adds the district rows. Office is derived, see BENCHMARKS.md.
    """

    def averages(cells: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
        return (
            _type_means(cells, [*keys, "year"])
            .filter(pl.col("deeds") >= MIN_MARKET_DEEDS)
            .rename({"sqm": "avg_sqm", "deeds": "deed_count"})
        )

    latest, fallback_cities = (
        f.filter(pl.col("city_key").is_not_null()) for f in (latest, fallback)
    )
    recent = averages(latest, ["city_key"])
    older = averages(fallback_cities, ["city_key"]).join(
        recent, on=["city_key", "type"], how="anti"
    )
    national = averages(fallback, []).with_columns(city_key=pl.lit(None, pl.String))
    parts = [
        pl.concat([recent, older], how="diagonal_relaxed").with_columns(level=pl.lit("city")),
        national.with_columns(level=pl.lit("national")),
    ]
    if districts is not None:
        parts.append(districts.with_columns(level=pl.lit("district")))
    rows = pl.concat(parts, how="diagonal_relaxed").with_columns(
        district_key=pl.col("district_key") if districts is not None else pl.lit(None, pl.String)
    )
    # No source has offices; the office row repeats commercial (the same "تجاري" class).
    offices = rows.filter(pl.col("type") == "commercial").with_columns(type=pl.lit("office"))
    return pl.concat([rows, offices], how="diagonal_relaxed")


def _factors(cells: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Type factor per `keys` and spec type: deed-weighted mean price per m2 of the type over
    that of all types (non-farm) in the same cells, clamped to TYPE_FACTOR_RANGE.

    `cells` carries one year (all_types cells, see `_rega_cells`); both sides are REGA's
    published cell means weighted by their deeds, so the ratio is like for like.
    """
    group = [*keys, "year"]
    weighted = (pl.col("sqm") * pl.col("deeds")).sum() / pl.col("deeds").sum()
    everything = cells.group_by(group).agg(all_sqm=weighted, all_deeds=pl.col("deeds").sum())
    typed = cells.filter(pl.col("type") != "other").group_by([*group, "type"])
    low, high = TYPE_FACTOR_RANGE
    return (
        typed.agg(sqm=weighted, type_deeds=pl.col("deeds").sum())
        .join(everything, on=group)
        .filter(
            pl.col("type_deeds") >= TYPE_FACTOR_MIN_TYPE_DEEDS,
            pl.col("all_deeds") >= TYPE_FACTOR_MIN_ALL_DEEDS,
        )
        .with_columns(
            raw_factor=pl.col("sqm") / pl.col("all_sqm"),
            factor=(pl.col("sqm") / pl.col("all_sqm")).clip(low, high),
        )
    )


def disagreeing_districts(cells: pl.DataFrame, moj_mean: pl.DataFrame) -> pl.DataFrame:
    """(city_key, district_key, year) of the district-years whose REGA cells (`cells`, all
    types) describe another market than the district's MOJ deeds: their all-types mean outside
    TYPE_FACTOR_AGREEMENT x the mean of its benchmark deeds (`moj_mean`). The same test the
    type factors pass (`type_factors`), for the cells of the year-over-year change."""
    low, high = TYPE_FACTOR_AGREEMENT
    keys = ["city_key", "district_key", "year"]
    weighted = (pl.col("sqm") * pl.col("deeds")).sum() / pl.col("deeds").sum()
    return (
        cells.filter(pl.col("district_key").is_not_null())
        .group_by(keys)
        .agg(all_sqm=weighted)
        .join(moj_mean, on=["city_key", "district_key"])
        .filter(~(pl.col("all_sqm") / pl.col("moj_mean")).is_between(low, high))
        .select(keys)
    )


def type_factors(
    latest: pl.DataFrame,
    fallback: pl.DataFrame,
    bench: pl.DataFrame,
    district_moj_mean: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Type factors for the places of `bench` (its district and city rows) and nationally.

    `latest` = REGA sales indicators of the benchmark year, `fallback` = the quarter
    report's last year (both all_types cells). For each (district, type) and (city, type)
    the latest year with enough deeds wins; national rows come from `fallback`, which covers
    the whole country. A district row exists only where benchmarks.csv has that district (a
    listing on its city's benchmark must get its city's factor), a city row only where it
    has that city. Office is derived: it repeats commercial (see BENCHMARKS.md).

    `district_moj_mean` (city_key, district_key, moj_mean: mean price per m2 of the district's
    benchmark deeds) enables the TYPE_FACTOR_AGREEMENT check on district factors.
    """
    low, high = TYPE_FACTOR_AGREEMENT

    def by_place(keys: list[str], places: pl.DataFrame) -> pl.DataFrame:
        found = [
            _factors(cells.filter(*[pl.col(k).is_not_null() for k in keys]), keys).join(
                places, on=keys, how="inner"
            )
            for cells in (latest, fallback)
        ]
        if "moj_mean" in places.columns:
            agree = (pl.col("all_sqm") / pl.col("moj_mean")).is_between(low, high)
            found = [f.filter(agree) for f in found]
        return pl.concat(
            [found[0], found[1].join(found[0], on=[*keys, "type"], how="anti")],
            how="diagonal_relaxed",
        )

    district_places = bench.filter(pl.col("level") == "district").select("city_key", "district_key")
    if district_moj_mean is not None:
        district_places = district_places.join(
            district_moj_mean.select("city_key", "district_key", "moj_mean"),
            on=["city_key", "district_key"],
        )
    city_places = bench.filter(pl.col("level") == "city").select("city_key")
    rows = pl.concat(
        [
            by_place(["city_key", "district_key"], district_places).with_columns(
                level=pl.lit("district")
            ),
            by_place(["city_key"], city_places).with_columns(
                district_key=pl.lit(None, pl.String), level=pl.lit("city")
            ),
            _factors(fallback, []).with_columns(
                city_key=pl.lit(None, pl.String),
                district_key=pl.lit(None, pl.String),
                level=pl.lit("national"),
            ),
        ],
        how="diagonal_relaxed",
    )
    offices = rows.filter(pl.col("type") == "commercial").with_columns(type=pl.lit("office"))
    return pl.concat([rows, offices], how="diagonal_relaxed")


def _finish_benchmarks(bench: pl.DataFrame) -> pl.DataFrame:
    return bench.select(
        pl.col("city_key"),
        pl.col("district_key"),
        pl.col("city_ar"),
        pl.col("district_ar"),
        pl.col("level"),
        pl.col("median_sqm").round(2),
        pl.col("p25_sqm").round(2),
        pl.col("p75_sqm").round(2),
        pl.col("year").cast(pl.Int64),
        pl.col("transaction_count").cast(pl.Int64),
        pl.col("yoy_pct").round(1),
    ).sort(["city_key", "district_key"], nulls_last=False)


def _by_place_and_type(rows: pl.DataFrame) -> pl.DataFrame:
    """National rows, then city rows, then district rows; the spec's type order within each."""
    order = {t: i for i, t in enumerate(TYPE_ORDER)}
    levels = {"national": 0, "city": 1, "district": 2}
    return rows.with_columns(
        _order=pl.col("type").replace_strict(order, return_dtype=pl.Int64),
        _level=pl.col("level").replace_strict(levels, return_dtype=pl.Int64),
    ).sort(["_level", "city_key", "district_key", "_order"], nulls_last=False)


def _finish_market(rows: pl.DataFrame) -> pl.DataFrame:
    return _by_place_and_type(rows).select(
        pl.col("city_key"),
        pl.col("district_key"),
        pl.col("type"),
        pl.col("avg_sqm").round(2),
        pl.col("deed_count").cast(pl.Int64),
        pl.col("year").cast(pl.Int64),
        pl.col("level"),
    )


def _finish_type_factors(rows: pl.DataFrame) -> pl.DataFrame:
    return _by_place_and_type(rows).select(
        pl.col("city_key"),
        pl.col("district_key"),
        pl.col("type"),
        pl.col("factor").round(3),
        pl.col("type_deeds").cast(pl.Int64),
        pl.col("all_deeds").cast(pl.Int64),
        pl.col("year").cast(pl.Int64),
        pl.col("level"),
    )


OFFICIAL_FILES = (MOJ_FILE, QUARTER_REPORT_FILE, SALES_INDICATORS_DIR)


def official_files(sources: Sequence[Path]) -> dict[Path, Path]:
    """Where each of OFFICIAL_FILES is among `sources`: folders holding them as published
    (`data/`: `data/moj/...`), holding them directly (`data/moj`), or the files themselves;
    the first source that has one wins. UsageError naming those missing."""
    found: dict[Path, Path] = {}
    for name in OFFICIAL_FILES:
        for source in map(Path, sources):
            place = next(
                (p for p in (source / name, source / name.name) if p.exists()),
                source if source.name == name.name and source.exists() else None,
            )
            if place is not None:
                found[name] = place
                break
    missing = [str(name) for name in OFFICIAL_FILES if name not in found]
    if missing:
        named = ", ".join(str(s) for s in sources)
        raise UsageError(
            f"{named}: does not hold the official files ({', '.join(missing)} missing); "
            "pass the folder that does (../shared/data), or the files' folders"
        )
    return found


def build(sources: Path | Sequence[Path], out_path: Path) -> BuildReport:
    """Read the official files from `sources` (see `official_files`: one folder or several)
    and write `out_path` (benchmarks.csv) and `market_averages.csv`, `type_factors.csv`
    beside it."""
    files = official_files([sources] if isinstance(sources, str | Path) else sources)
    out_path = Path(out_path)
    deeds = read_moj_deeds(files[MOJ_FILE])
    urban = deeds.filter(pl.col("classification").is_in(CLASSIFICATIONS))
    # A multi-property deed's price covers all its units but its area may not: price/m2 mixes.
    kept = urban.filter(pl.col("num_properties") == 1)

    # Every non-farm category (the type factors' "all types" side); "other" dropped below.
    report_all = read_quarter_report(files[QUARTER_REPORT_FILE], all_types=True)
    indicators_all = read_sales_indicators(files[SALES_INDICATORS_DIR], all_types=True)
    quarter_report = report_all.filter(pl.col("type") != "other")
    indicators = indicators_all.filter(pl.col("type") != "other")
    last_report_year = quarter_report["year"].max()
    before = quarter_report.filter(
        pl.col("year") == BENCHMARK_YEAR - 1, pl.col("quarter").is_in(YOY_QUARTERS)
    )
    after = indicators.filter(
        pl.col("year") == BENCHMARK_YEAR, pl.col("quarter").is_in(YOY_QUARTERS)
    )

    moj_mean = (  # of the districts with a benchmark of their own: a few deeds' mean says little
        kept.filter(pl.col("district_key").is_not_null())
        .group_by("city_key", "district_key")
        .agg(moj_mean=pl.col("price_per_sqm").mean(), deeds=pl.len())
        .filter(pl.col("deeds") >= MIN_TRANSACTIONS)
        .drop("deeds")
    )
    # A district-year whose REGA cells describe another market than its deeds (one bulk sale
    # of land in a district of homes) takes no part in the change either: Dammam النورس read
    # -53% on one land cell, published twice, that the type factors already refuse.
    elsewhere = disagreeing_districts(
        pl.concat(
            [
                report_all.filter(pl.col("year") == BENCHMARK_YEAR - 1),
                indicators_all.filter(pl.col("year") == BENCHMARK_YEAR),
            ],
            how="diagonal_relaxed",
        ),
        moj_mean,
    )
    before, after = (
        cells.join(elsewhere, on=["city_key", "district_key", "year"], how="anti")
        for cells in (before, after)
    )
    bench = _finish_benchmarks(attach_yoy(moj_benchmarks(kept), before, after))
    factor_rows = type_factors(
        indicators_all.filter(pl.col("year") == BENCHMARK_YEAR),
        report_all.filter(pl.col("year") == last_report_year),
        bench,
        moj_mean,
    )
    factors = _finish_type_factors(factor_rows)
    market = _finish_market(
        market_averages(
            indicators.filter(pl.col("year") == BENCHMARK_YEAR),
            quarter_report.filter(pl.col("year") == last_report_year),
            district_market_averages(factor_rows),
        )
    )

    out_path.parent.mkdir(parents=True, exist_ok=True)
    market_path = out_path.with_name("market_averages.csv")
    factors_path = out_path.with_name("type_factors.csv")
    bench.write_csv(out_path)
    market.write_csv(market_path)
    factors.write_csv(factors_path)
    return BuildReport(
        benchmarks_path=out_path,
        market_averages_path=market_path,
        deeds_read=deeds.height,
        deeds_used=kept.height,
        excluded_agricultural=deeds.height - urban.height,
        excluded_multi_property=urban.height - kept.height,
        benchmark_rows=bench.height,
        cities=int((bench["level"] == "city").sum()),
        districts=int((bench["level"] == "district").sum()),
        rows_with_yoy=int(bench["yoy_pct"].is_not_null().sum()),
        market_rows=market.height,
        type_factors_path=factors_path,
        type_factor_rows=factors.height,
    )


def build_benchmarks(data_dir: Path, out: Path) -> BuildReport:
    """Alias of `build`."""
    return build(data_dir, out)
