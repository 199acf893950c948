import time
from pathlib import Path

import polars as pl
import pytest

from pipeline.engine import benchmarks as benchmarks_module
from pipeline.engine.aliases import load_aliases
from pipeline.engine.benchmarks import (
    ATTACHED_SCHEMA,
    DEFAULT_DIR,
    HOME_FLOOR,
    BenchmarkTable,
    attach_benchmarks,
)
from pipeline.engine.benchmarks_build import (
    MIN_DISTRICT_MARKET_DEEDS,
    MIN_MARKET_DEEDS,
    MIN_TRANSACTIONS,
    TYPE_FACTOR_MIN_ALL_DEEDS,
    TYPE_FACTOR_MIN_TYPE_DEEDS,
    TYPE_FACTOR_RANGE,
    build,
    disagreeing_districts,
)
from pipeline.engine.names import normalize_name
from pipeline.errors import UsageError

SHARED_DATA = Path(__file__).parents[1].parent / "shared" / "data"


@pytest.fixture(scope="module")
def table() -> BenchmarkTable:
    return BenchmarkTable.default()


def frame(rows: list[tuple[str | None, str | None, str | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema={"city": pl.String, "district": pl.String, "type": pl.String}, orient="row"
    )


def test_table_loads_with_version(table: BenchmarkTable) -> None:
    assert len(table.version) == 12
    assert table.benchmarks.height > 1000
    again = BenchmarkTable.load(DEFAULT_DIR / "benchmarks.csv")
    assert again.version == table.version


def test_malqa_gets_its_district_benchmark(table: BenchmarkTable) -> None:
    out = attach_benchmarks(
        frame([("Riyadh", "Al Malqa", "villa"), ("الرياض", "حي الملقا", None)]), table
    )
    for row in out.iter_rows(named=True):
        assert row["benchmark_level"] == "district"
        assert row["district_key"] == "الملقا"
        assert 5000 < row["benchmark_median_sqm"] < 9100  # the MOJ file caps near 9,045
        assert row["benchmark_p25_sqm"] <= row["benchmark_median_sqm"] <= row["benchmark_p75_sqm"]
        assert row["benchmark_year"] == 2024
        assert row["benchmark_transaction_count"] >= MIN_TRANSACTIONS
        assert row["benchmark_yoy_pct"] is not None
    assert out["market_avg_level"].to_list() == ["district", None]  # no type: no average


def test_unknown_district_falls_back_to_city(table: BenchmarkTable) -> None:
    row = attach_benchmarks(frame([("Riyadh", "No Such Place", "apartment")]), table).row(
        0, named=True
    )
    city = table.benchmarks.filter(pl.col("city_key") == "الرياض", pl.col("level") == "city")
    assert row["benchmark_level"] == "city"
    assert row["benchmark_median_sqm"] == city["median_sqm"][0]
    assert row["benchmark_transaction_count"] == city["transaction_count"][0]


@pytest.mark.parametrize("label", ["خارج حدود الأحياء", "أخرى"])
def test_labels_that_name_no_district_get_the_city_benchmark(
    table: BenchmarkTable, label: str
) -> None:
    # MOJ files deeds "outside the district boundaries" or "other": no district of their own
    row = attach_benchmarks(frame([("Jeddah", label, "land")]), table).row(0, named=True)
    assert row["benchmark_level"] == "city"
    keys = set(table.benchmarks["district_key"].drop_nulls())
    assert not keys & {normalize_name(label), normalize_name("حي " + label)}


def test_unknown_city_has_no_benchmark_but_a_national_average(table: BenchmarkTable) -> None:
    row = attach_benchmarks(frame([("Atlantis", "Al Malqa", "land")]), table).row(0, named=True)
    assert row["benchmark_level"] is None
    assert row["benchmark_median_sqm"] is None
    assert row["benchmark_yoy_pct"] is None
    assert row["market_avg_level"] == "national"
    assert row["market_avg_sqm"] > 0


def test_all_null_inputs(table: BenchmarkTable) -> None:
    out = attach_benchmarks(frame([(None, None, None)]), table)
    assert out.select(list(ATTACHED_SCHEMA)).row(0) == (None,) * len(ATTACHED_SCHEMA)


def test_missing_columns_count_as_null(table: BenchmarkTable) -> None:
    out = attach_benchmarks(pl.DataFrame({"city": ["Jeddah"]}), table)
    assert out["benchmark_level"].to_list() == ["city"]
    assert out["market_avg_sqm"].to_list() == [None]


def test_attach_keeps_rows_order_and_types(table: BenchmarkTable) -> None:
    rows = [
        ("Riyadh", "Al Malqa", "villa"),
        ("Jeddah", "Al Safa", "office"),
        (None, None, None),
        ("Atlantis", None, "land"),
        ("Riyadh", "Al Malqa", "villa"),
        ("riyadh ", "al-malqa", "Villa"),
        ("مكة المكرمة", None, "apartment"),
    ] * 50
    source = frame(rows).with_row_index("n").with_columns(price=pl.lit(1.0))
    out = attach_benchmarks(source, table)
    assert out.height == source.height
    assert out.columns == [*source.columns, *ATTACHED_SCHEMA]
    assert out.select(source.columns).equals(source)
    assert dict(out.select(list(ATTACHED_SCHEMA)).schema) == ATTACHED_SCHEMA
    # Identical spellings of one place get identical results, wherever they are in the frame.
    malqa = out.filter(pl.col("district_key") == "الملقا", pl.col("city_key") == "الرياض")
    assert malqa.select(list(ATTACHED_SCHEMA)).unique().height == 1


def test_attach_replaces_its_own_columns(table: BenchmarkTable) -> None:
    once = attach_benchmarks(frame([("Riyadh", "Hittin", "villa")]), table)
    assert attach_benchmarks(once, table).equals(once)


def test_places_remembered_across_calls_answer_as_resolved_one_by_one() -> None:
    fresh = BenchmarkTable.load(DEFAULT_DIR / "benchmarks.csv")  # nothing remembered yet
    districts = fresh.benchmarks.filter(pl.col("level") == "district").head(150)
    places = [(c, d, t) for c, d in districts.select("city_ar", "district_ar").rows()
              for t in ("villa", "شقة")]  # fmt: skip
    places += [("Riyadh", "Al Malqa", "villa"), ("Atlantis", None, "land"), (None, None, None)]
    first = attach_benchmarks(frame(places[::2] * 2), fresh)  # over 256: the polars path
    second = attach_benchmarks(frame(places * 2), fresh)  # half remembered, half new

    one_by_one = pl.concat([attach_benchmarks(frame([p]), fresh) for p in places])
    assert second.equals(pl.concat([one_by_one, one_by_one]))
    assert first.equals(pl.concat([one_by_one[::2], one_by_one[::2]]))


def test_million_rows(table: BenchmarkTable) -> None:
    rows = [("Riyadh", "Al Narjis", "villa"), ("Jeddah", None, "land"), (None, "x", None)]
    big = frame(rows * 333_334).with_row_index("n")
    out = attach_benchmarks(big, table)
    assert out.height == big.height
    assert out["n"].is_sorted()
    assert out.select(list(ATTACHED_SCHEMA)).unique().height == 3


def test_benchmark_table_invariants(table: BenchmarkTable) -> None:
    bench = table.benchmarks
    assert bench.filter(pl.col("p25_sqm") > pl.col("median_sqm")).is_empty()
    assert bench.filter(pl.col("median_sqm") > pl.col("p75_sqm")).is_empty()
    assert bench["transaction_count"].min() >= MIN_TRANSACTIONS
    assert set(bench["level"]) == {"city", "district"}
    assert bench.filter(pl.col("level") == "city")["district_key"].null_count() == (
        bench.filter(pl.col("level") == "city").height
    )
    assert bench.select("city_key", "district_key").is_unique().all()
    # every district row has its city row, so a thin district always has a fallback
    cities = set(bench.filter(pl.col("level") == "city")["city_key"])
    assert set(bench["city_key"]) == cities
    assert bench["city_key"].to_list() == [normalize_name(c) for c in bench["city_key"]]


def test_market_averages_cover_every_type_nationally(table: BenchmarkTable) -> None:
    market = table.market_averages
    national = market.filter(pl.col("level") == "national")
    assert sorted(national["type"]) == sorted(
        ["apartment", "villa", "land", "commercial", "office"]
    )
    assert national["city_key"].null_count() == national.height
    assert market["avg_sqm"].min() > 0
    assert market.select("city_key", "district_key", "type").is_unique().all()


@pytest.mark.parametrize(
    ("city", "district", "official"),
    [
        ("Dammam", "Al Shulah", "الشعلة"), ("Ad Dammam", "Uhud", "أحد"),
        ("Khobar", "Ath Thuqbah", "الثقبة"), ("Buraydah", "AL TAWFEEQ", "التوفيق"),
        ("Tabuk", "Al Hamraa", "الحمراء"), ("Jazan", "Ar Rawdah", "الروضة"),
    ],
)  # fmt: skip
def test_english_district_names_outside_the_four_largest_cities(
    table: BenchmarkTable, city: str, district: str, official: str
) -> None:
    row = attach_one(table, city, district, None)  # the name, whichever type it is asked for
    assert row["benchmark_level"] == "district"
    assert normalize_name(row["benchmark_district_ar"]) == normalize_name(official)


def test_alias_targets_exist_in_the_table(table: BenchmarkTable) -> None:
    bench = table.benchmarks
    cities = set(bench.filter(pl.col("level") == "city")["city_key"])
    targets = set(load_aliases().cities.values())
    big = {"الرياض", "جده", "مكه المكرمه", "المدينه المنوره", "الدمام", "الخبر", "الطايف"}
    assert big <= cities
    assert len(targets & cities) >= 100
    riyadh = set(bench.filter(pl.col("city_key") == "الرياض")["district_key"].drop_nulls())
    for name in ["الملقا", "النرجس", "حطين", "الياسمين", "العليا"]:
        assert name in riyadh


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="official data not present in ../shared/data")
def test_a_folder_without_the_official_files_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"does not hold the official files \(moj/moj-sales"):
        build(tmp_path, tmp_path / "benchmarks.csv")
    assert not (tmp_path / "benchmarks.csv").exists()


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="official data not present in ../shared/data")
def test_the_official_files_may_come_from_several_sources(tmp_path: Path) -> None:
    """DESIGN.md: `benchmarks build --out PATH [SOURCES...]`: the folders, or the files."""
    from pipeline.cli import main

    rega = SHARED_DATA / "rega"
    out = tmp_path / "benchmarks.csv"
    sources = [SHARED_DATA / "moj" / "moj-sales-2024-clean.csv.gz", rega / "sales-indicators",
               rega]  # fmt: skip
    assert main(["benchmarks", "build", "--out", str(out), *map(str, sources)]) == 0
    for name in ("benchmarks.csv", "market_averages.csv", "type_factors.csv"):
        assert (tmp_path / name).read_bytes() == (DEFAULT_DIR / name).read_bytes(), name
    with pytest.raises(UsageError, match=r"data/moj: does not hold the official files \(rega/"):
        build([SHARED_DATA / "moj"], out)


def test_rebuild_is_byte_identical(tmp_path: Path) -> None:
    report = build(SHARED_DATA, tmp_path / "benchmarks.csv")
    for name in ("benchmarks.csv", "market_averages.csv", "type_factors.csv"):
        assert (tmp_path / name).read_bytes() == (DEFAULT_DIR / name).read_bytes(), name
    assert report.cities + report.districts == report.benchmark_rows
    assert report.type_factor_rows == BenchmarkTable.default().type_factors.height
    assert report.deeds_used < report.deeds_read


# -- type factors -------------------------------------------------------------------------------

TYPES = ("apartment", "villa", "land", "commercial", "office")


def attach_one(table: BenchmarkTable, city: str | None, district: str | None, type_: str | None):
    return attach_benchmarks(frame([(city, district, type_)]), table).row(0, named=True)


def place_row(rows: pl.DataFrame, level: str, type_: str, city=None, district=None) -> dict:
    """The one row of a by-place-and-type table (type factors, market averages)."""
    rows = rows.filter(
        pl.col("level") == level,
        pl.col("type") == type_,
        pl.col("city_key").eq_missing(city),
        pl.col("district_key").eq_missing(district),
    )
    assert rows.height == 1, (level, type_, city, district)
    return rows.row(0, named=True)


def factor_row(table: BenchmarkTable, level: str, type_: str, city=None, district=None) -> dict:
    return place_row(table.type_factors, level, type_, city, district)


def test_malqa_type_factors_and_arabic_names(table: BenchmarkTable) -> None:
    out = attach_benchmarks(frame([("Riyadh", "Al Malqa", t) for t in TYPES]), table)
    assert out["type_factor_level"].to_list() == ["district"] * len(TYPES)
    assert out["benchmark_city_ar"].to_list() == ["الرياض"] * len(TYPES)
    assert out["benchmark_district_ar"].to_list() == ["الملقا"] * len(TYPES)
    factor = dict(zip(TYPES, out["type_factor"], strict=True))
    # An established district trades mostly homes: homes near the mix, land below it.
    assert 0.7 < factor["apartment"] < 1.5
    assert 0.7 < factor["villa"] < 1.5
    assert factor["land"] < 1.0
    assert factor["office"] == factor["commercial"]  # no office data: office repeats commercial
    for type_, value in factor.items():
        assert value == factor_row(table, "district", type_, "الرياض", "الملقا")["factor"]


def test_land_dominated_place_lifts_homes_and_not_land(table: BenchmarkTable) -> None:
    # Buraydah: REGA names no districts there, so every Buraydah benchmark uses the city factor.
    out = attach_benchmarks(
        frame([("Buraydah", None, t) for t in ("villa", "apartment", "land")]), table
    )
    villa, apartment, land = out["type_factor"]
    assert villa > 3 and apartment > 3
    assert land < 1
    assert set(out["type_factor_level"]) == {"city"}
    assert out["benchmark_district_ar"].to_list() == [None] * 3


def test_city_benchmark_never_takes_a_district_factor(table: BenchmarkTable) -> None:
    row = attach_one(table, "Riyadh", "No Such Place", "villa")
    assert row["benchmark_level"] == "city"
    assert row["benchmark_city_ar"] == "الرياض"
    assert row["benchmark_district_ar"] is None
    assert row["type_factor_level"] == "city"
    assert row["type_factor"] == factor_row(table, "city", "villa", "الرياض")["factor"]


def _lacking(table: BenchmarkTable, rows: pl.DataFrame, type_: str) -> list[str]:
    """Riyadh's districts (official names) that have no row of their own in `rows`."""
    districts = table.benchmarks.filter(
        pl.col("level") == "district", pl.col("city_key") == "الرياض"
    )
    own = rows.filter(pl.col("level") == "district", pl.col("type") == type_)
    return districts.join(own, on=["city_key", "district_key"], how="anti")["district_ar"].to_list()


def test_district_without_its_own_factor_falls_back_to_city(table: BenchmarkTable) -> None:
    lacking = _lacking(table, table.type_factors, "apartment")
    rows = [attach_one(table, "الرياض", district, "apartment") for district in lacking]
    on_district = [row for row in rows if row["benchmark_level"] == "district"]
    assert len(on_district) >= 20
    city_factor = factor_row(table, "city", "apartment", "الرياض")["factor"]
    for row in on_district:
        assert row["type_factor_level"] == "city"
        assert row["type_factor"] == city_factor


def test_a_district_is_judged_by_its_own_average_not_its_citys(table: BenchmarkTable) -> None:
    """QA 39, 40: districts dearer or cheaper than their city keep their figures (REGA's own
    cells: Riyadh الازدهار's land 4,782-8,242, Jeddah الشرائع's 486, Riyadh الحائر's villas
    723), where a band against the city's average sent them to the city's, 2-5 x off."""
    for city, district, type_, median in (
        ("الرياض", "الازدهار", "land", 4521),
        ("جده", "الشرائع", "land", 404),
        ("الرياض", "الحاير", "villa", 647),
    ):
        row = attach_one(table, city, district, type_)
        assert row["benchmark_level"] == "district"
        assert row["type_factor_level"] == "city"
        assert abs(row["benchmark_median_sqm"] * row["type_factor"] - median) < 2


def test_a_districts_home_below_the_floor_takes_its_citys_benchmark(
    table: BenchmarkTable,
) -> None:
    """QA 38: Afif غرناطة's deeds (land, median 29) scaled to an apartment median of 62 SAR/m2;
    under the floor of what a building costs, the district is on its city's benchmark, which
    has no percentiles for apartments either."""
    row = attach_one(table, "Afif", "غرناطة", "apartment")
    assert row["benchmark_level"] == "city"
    assert row["benchmark_median_sqm"] is None
    assert attach_one(table, "Afif", "غرناطة", None)["benchmark_level"] == "district"


def test_city_without_a_factor_falls_back_to_national(table: BenchmarkTable) -> None:
    factors = table.type_factors
    cities = table.benchmarks.filter(pl.col("level") == "city")
    with_villa = factors.filter(pl.col("level") == "city", pl.col("type") == "villa")
    lacking = cities.join(with_villa, on="city_key", how="anti")["city_ar"].to_list()
    rows = [attach_one(table, city, None, "villa") for city in lacking]
    priced = [row for row in rows if row["benchmark_median_sqm"] is not None]
    assert priced
    for row in priced:
        assert row["benchmark_level"] == "city"
        assert row["type_factor_level"] == "national"
        assert row["type_factor"] == factor_row(table, "national", "villa")["factor"]
        scaled = row["benchmark_median_sqm"] * row["type_factor"]
        assert scaled >= HOME_FLOOR * market_row(table, "national", "villa")["avg_sqm"]


def test_a_city_whose_deeds_do_not_price_the_type_gives_it_no_percentiles(
    table: BenchmarkTable,
) -> None:
    """QA 38: Afif's deeds are land (median 29 SAR/m2); scaled by the national apartment factor
    they made an apartment benchmark of 62 SAR/m2, against 4,404 for apartments nationally, and
    a fair apartment read 4,758% above the median. The city is known (its deeds count for the
    location bucket); the type has no percentiles there."""
    row = attach_one(table, "Afif", None, "apartment")
    assert row["benchmark_level"] == "city"
    assert row["benchmark_city_ar"] == "عفيف"
    assert row["benchmark_median_sqm"] is None
    assert row["benchmark_p25_sqm"] is None
    assert row["benchmark_p75_sqm"] is None
    assert row["benchmark_transaction_count"] > 1000
    assert row["type_factor"] is None
    assert row["type_factor_level"] is None
    assert row["market_avg_level"] == "national"
    deeds = attach_one(table, "Afif", None, None)  # the city's own deeds, as they are
    assert deeds["benchmark_median_sqm"] is not None


def test_a_citys_own_factor_clamped_far_from_the_types_market_gives_no_percentiles(
    table: BenchmarkTable,
) -> None:
    """QA 39: the band applies to a place's own factor too. Ranyah's apartment factor, clamped
    at 8, made an apartment median of 133 SAR/m2."""
    ranyah = attach_one(table, "رنيه", None, "apartment")
    assert ranyah["type_factor"] is None and ranyah["benchmark_median_sqm"] is None


def test_a_town_on_the_national_factor_keeps_figures_that_can_be_its_market(
    table: BenchmarkTable,
) -> None:
    """QA 39: a town's land is no absurdity at a tenth of the country's average; only homes
    have a floor (what a building costs). Hofuf (median 878) kept no benchmark for any type
    under a first version of the rule."""
    for type_, median in (("apartment", 1870), ("villa", 1860), ("land", 399)):
        row = attach_one(table, "الهفوف", None, type_)
        assert row["type_factor_level"] == "national"
        assert abs(row["benchmark_median_sqm"] * row["type_factor"] - median) < 5


def test_factor_null_only_without_a_benchmark(table: BenchmarkTable) -> None:
    no_benchmark = attach_one(table, "Atlantis", None, "villa")
    assert no_benchmark["type_factor"] is None
    assert no_benchmark["type_factor_level"] is None
    assert no_benchmark["benchmark_city_ar"] is None
    for type_ in (None, "castle"):  # unknown type: the benchmark as it stands
        row = attach_one(table, "Riyadh", "Al Malqa", type_)
        assert row["type_factor"] == 1.0
        assert row["type_factor_level"] is None
    assert attach_one(table, "Riyadh", "Al Malqa", " Villa ")["type_factor_level"] == "district"


def test_benchmark_for_has_the_factor_columns(table: BenchmarkTable) -> None:
    row = table.benchmark_for("جدة", None, "apartment")
    assert row["benchmark_city_ar"] == "جده"  # MOJ's most frequent spelling of جدة
    assert row["type_factor_level"] == "city"
    assert row["type_factor"] > 1


def test_type_factor_table_invariants(table: BenchmarkTable) -> None:
    factors = table.type_factors
    low, high = TYPE_FACTOR_RANGE
    assert factors["factor"].min() >= low and factors["factor"].max() <= high
    assert (
        factors.null_count().select(pl.exclude("city_key", "district_key")).sum_horizontal()[0] == 0
    )
    assert factors["type_deeds"].min() >= TYPE_FACTOR_MIN_TYPE_DEEDS
    assert factors["all_deeds"].min() >= TYPE_FACTOR_MIN_ALL_DEEDS
    assert (factors["type_deeds"] <= factors["all_deeds"]).all()
    assert set(factors["type"]) == set(TYPES)
    assert factors.select("city_key", "district_key", "type").is_unique().all()
    by_level = {
        lvl: factors.filter(pl.col("level") == lvl) for lvl in ("district", "city", "national")
    }
    assert sum(f.height for f in by_level.values()) == factors.height
    assert sorted(by_level["national"]["type"]) == sorted(TYPES)
    assert by_level["national"]["city_key"].null_count() == len(TYPES)
    assert by_level["city"]["district_key"].null_count() == by_level["city"].height
    assert by_level["district"]["district_key"].null_count() == 0
    # Factors exist only for places that have a benchmark of the same level.
    bench = table.benchmarks
    assert by_level["district"].join(bench, on=["city_key", "district_key"], how="anti").is_empty()
    cities = bench.filter(pl.col("level") == "city")
    assert by_level["city"].join(cities, on="city_key", how="anti").is_empty()
    # Office repeats commercial everywhere.
    office = factors.filter(pl.col("type") == "office").drop("type")
    commercial = factors.filter(pl.col("type") == "commercial").drop("type")
    assert office.equals(commercial)


def test_version_covers_the_type_factors(tmp_path: Path, table: BenchmarkTable) -> None:
    for name in ("benchmarks.csv", "market_averages.csv", "type_factors.csv"):
        (tmp_path / name).write_bytes((DEFAULT_DIR / name).read_bytes())
    assert BenchmarkTable.load(tmp_path / "benchmarks.csv").version == table.version
    text = (tmp_path / "type_factors.csv").read_text(encoding="utf-8")
    assert text.startswith("city_key,district_key,type,factor,type_deeds,all_deeds,year,level\n")
    assert "\n,,apartment," in text  # national rows: both keys empty
    changed = text.replace("\n,,apartment,", "\n,,apartment,9", 1)
    (tmp_path / "type_factors.csv").write_text(changed, encoding="utf-8")
    assert BenchmarkTable.load(tmp_path / "benchmarks.csv").version != table.version


# -- market averages by district ----------------------------------------------------------------


def market_row(table: BenchmarkTable, level: str, type_: str, city=None, district=None) -> dict:
    return place_row(table.market_averages, level, type_, city, district)


def test_malqa_takes_its_district_market_averages(table: BenchmarkTable) -> None:
    out = attach_benchmarks(frame([("Riyadh", "Al Malqa", t) for t in TYPES]), table)
    assert out["market_avg_level"].to_list() == ["district"] * len(TYPES)
    average = dict(zip(TYPES, out["market_avg_sqm"], strict=True))
    for type_, value in average.items():
        assert value == market_row(table, "district", type_, "الرياض", "الملقا")["avg_sqm"]
    # A prime district: villas near 12,400 SAR/m2 against Riyadh's 4,946.
    riyadh_villa = market_row(table, "city", "villa", "الرياض")["avg_sqm"]
    assert average["villa"] > 10_000 and average["villa"] > 2 * riyadh_villa
    assert average["office"] == average["commercial"]


def test_city_benchmark_takes_the_city_market_average(table: BenchmarkTable) -> None:
    row = attach_one(table, "Riyadh", "No Such Place", "villa")
    assert row["benchmark_level"] == "city"
    assert row["market_avg_level"] == "city"
    assert row["market_avg_sqm"] == market_row(table, "city", "villa", "الرياض")["avg_sqm"]


def test_district_without_its_own_average_falls_back_to_city(table: BenchmarkTable) -> None:
    average = market_row(table, "city", "apartment", "الرياض")["avg_sqm"]
    lacking = _lacking(table, table.market_averages, "apartment")
    rows = [attach_one(table, "الرياض", district, "apartment") for district in lacking]
    on_district = [row for row in rows if row["benchmark_level"] == "district"]
    assert on_district
    for row in on_district:
        assert row["market_avg_level"] == "city"
        assert row["market_avg_sqm"] == average


def test_city_without_an_average_falls_back_to_national(table: BenchmarkTable) -> None:
    cities = table.benchmarks.filter(pl.col("level") == "city")
    with_villa = table.market_averages.filter(pl.col("level") == "city", pl.col("type") == "villa")
    city = cities.join(with_villa, on="city_key", how="anti")["city_ar"][0]
    row = attach_one(table, city, None, "villa")
    assert row["benchmark_level"] == "city"
    assert row["market_avg_level"] == "national"
    assert row["market_avg_sqm"] == market_row(table, "national", "villa")["avg_sqm"]


def test_district_average_needs_the_district_benchmark(table: BenchmarkTable) -> None:
    # A district average for a place without a district benchmark (the builder writes none,
    # a hand-edited table might) is not used: the row is on its city's benchmark.
    extra = pl.DataFrame(
        [("الرياض", "مكان جديد", "villa", 99_999.0, 50, 2024, "district")],
        schema=benchmarks_module.MARKET_SCHEMA,
        orient="row",
    )
    edited = BenchmarkTable(
        benchmarks=table.benchmarks,
        market_averages=pl.concat([table.market_averages, extra]),
        version="edited",
        type_factors=table.type_factors,
    )
    row = attach_one(edited, "Riyadh", "مكان جديد", "villa")
    assert row["benchmark_level"] == "city"
    assert row["market_avg_level"] == "city"
    assert row["market_avg_sqm"] == market_row(table, "city", "villa", "الرياض")["avg_sqm"]


def test_market_table_invariants(table: BenchmarkTable) -> None:
    market = table.market_averages
    assert list(market.columns) == list(benchmarks_module.MARKET_SCHEMA)
    assert set(market["level"]) == {"national", "city", "district"}
    assert (
        market.null_count().select(pl.exclude("city_key", "district_key")).sum_horizontal()[0] == 0
    )
    not_district = market.filter(pl.col("level") != "district")
    assert not_district["district_key"].null_count() == not_district.height
    assert not_district["deed_count"].min() >= MIN_MARKET_DEEDS
    districts = market.filter(pl.col("level") == "district")
    assert districts["district_key"].null_count() == 0
    assert districts["deed_count"].min() >= MIN_DISTRICT_MARKET_DEEDS
    # District rows only where benchmarks.csv has the district, and exactly where the district
    # has a type factor of its own: the average is that factor's numerator (same cells, year).
    bench = table.benchmarks.filter(pl.col("level") == "district")
    assert districts.join(bench, on=["city_key", "district_key"], how="anti").is_empty()
    factors = table.type_factors.filter(pl.col("level") == "district")
    paired = districts.join(factors, on=["city_key", "district_key", "type"], how="full")
    assert paired.height == districts.height == factors.height
    assert (paired["year"] == paired["year_right"]).all()
    assert (paired["deed_count"] == paired["type_deeds"]).all()
    office = districts.filter(pl.col("type") == "office").drop("type")
    commercial = districts.filter(pl.col("type") == "commercial").drop("type")
    assert office.equals(commercial)
    # Sorted: national, city, district rows.
    order = {"national": 0, "city": 1, "district": 2}
    assert market["level"].replace_strict(order, return_dtype=pl.Int64).is_sorted()


def test_market_file_without_district_key_still_loads(
    tmp_path: Path, table: BenchmarkTable
) -> None:
    for name in ("benchmarks.csv", "type_factors.csv"):
        (tmp_path / name).write_bytes((DEFAULT_DIR / name).read_bytes())
    old = table.market_averages.filter(pl.col("level") != "district").drop("district_key")
    old.write_csv(tmp_path / "market_averages.csv")
    loaded = BenchmarkTable.load(tmp_path / "benchmarks.csv")
    assert loaded.market_averages.columns == list(benchmarks_module.MARKET_SCHEMA)
    row = attach_one(loaded, "Riyadh", "Al Malqa", "villa")
    assert row["market_avg_level"] == "city"
    assert row["market_avg_sqm"] == market_row(table, "city", "villa", "الرياض")["avg_sqm"]


def test_tables_with_columns_of_their_own_or_in_another_order_load_the_same(
    tmp_path: Path, table: BenchmarkTable
) -> None:
    """QA 73: tables are checked where they are read; one as built takes the typed read, and
    one with a column added or its columns reordered the read as text, to the same frames."""
    from polars.testing import assert_frame_equal

    bench = pl.read_csv(DEFAULT_DIR / "benchmarks.csv", infer_schema=False)
    bench.select(reversed(bench.columns)).with_columns(source=pl.lit("MOJ")).write_csv(
        tmp_path / "benchmarks.csv"
    )
    for name in ("market_averages.csv", "type_factors.csv"):
        (tmp_path / name).write_bytes((DEFAULT_DIR / name).read_bytes())
    loaded = BenchmarkTable.read(tmp_path / "benchmarks.csv")
    for frame_of in (lambda t: t.benchmarks, lambda t: t.market_averages, lambda t: t.type_factors):
        assert_frame_equal(frame_of(loaded), frame_of(table))


# -- the two resolution paths and the single-row cost --------------------------------------------


def test_python_and_polars_paths_agree(table: BenchmarkTable, monkeypatch) -> None:
    bench = table.benchmarks
    places = bench.select(city="city_ar", district="district_ar").join(
        pl.DataFrame({"type": [*TYPES, None, " Villa ", "castle"]}), how="cross"
    )
    odd = frame(
        [
            ("Riyadh", "Al Malqa", "villa"),
            (" riyadh ", "al-malqa", "LAND"),
            ("الرياض", "حي الملقا", "apartment\u3000"),
            (None, "Al Malqa", "villa"),
            ("Atlantis", "x", "land"),
            ("Riyadh", "No Such Place", "office"),
            ("Jeddah", None, None),
            ("جدة", "", "commercial"),
            ("رياض", "ملقا", "villa"),
            ("Riyadh", "الملقا (شمال الرياض)", "villa"),
            ("الرياض", "Al-Malqa, Riyadh", "land"),
            ("Riyadh", "الرياض - الملقا", None),
            ("Riyadh", "Al Malqa Dist.", "apartment"),
            ("Riyadh", "الملقا، جدة", "villa"),
            ("طائف", None, "land"),
        ]
    )
    source = pl.concat([places, odd])
    in_python = pl.concat(
        [attach_benchmarks(part, table) for part in source.iter_slices(100)]  # row by row
    )
    monkeypatch.setattr(benchmarks_module, "_PYTHON_MAX", -1)
    in_polars = attach_benchmarks(source, table)
    assert in_python.equals(in_polars)
    assert set(in_polars["market_avg_level"].drop_nulls()) == {"district", "city", "national"}


def test_single_row_is_fast(table: BenchmarkTable) -> None:
    one = frame([("Riyadh", "Al Malqa", "villa")])
    assert table.lookups is table.lookups  # built once per table
    attach_benchmarks(one, table)
    times = []
    for _ in range(30):
        start = time.perf_counter()
        attach_benchmarks(one, table)
        times.append(time.perf_counter() - start)
    times.sort()
    assert times[len(times) // 2] < 0.005  # about 0.5 ms; it was 10-25 ms per call


def test_one_place_as_a_dict_equals_its_attached_row(table: BenchmarkTable) -> None:
    from pipeline.engine.benchmarks import attached_row

    places = [("Riyadh", "Al Malqa", "villa"), ("جدة", None, "شقة"), ("Atlantis", "x", "land"),
              (None, None, None), ("riyadh ", "al-malqa", " Office ")]  # fmt: skip
    for place in places:
        assert attached_row(*place, table) == attach_benchmarks(frame([place]), table).drop(
            "city", "district", "type"
        ).row(0, named=True)


def test_district_years_whose_rega_cells_disagree_with_their_deeds_give_no_trend() -> None:
    cells = pl.DataFrame(
        {
            "city_key": ["c", "c", "c", "c"],
            "district_key": ["homes", "homes", "plain", None],
            "year": [2024, 2023, 2024, 2024],
            "sqm": [450.0, 4000.0, 2100.0, 9.0],  # homes, 2024: one bulk sale of land
            "deeds": [75, 40, 60, 1000],
        }
    )
    moj = pl.DataFrame({"city_key": ["c", "c"], "district_key": ["homes", "plain"],
                        "moj_mean": [4000.0, 2000.0]})  # fmt: skip
    assert disagreeing_districts(cells, moj).rows() == [("c", "homes", 2024)]


def test_a_bulk_sale_in_a_district_of_homes_does_not_read_as_a_price_fall(
    table: BenchmarkTable,
) -> None:
    """QA 38: Dammam النورس read -53.3% on one 2024 land cell (459 SAR/m2, published twice),
    and Jeddah الشراع -38.5%: cells the type factors refuse. They carry their city's figure."""
    bench = table.benchmarks
    for city, district in (("الدمام", "النورس"), ("جده", "الشراع")):
        city_yoy = bench.filter(pl.col("level") == "city", pl.col("city_key") == city)["yoy_pct"]
        row = bench.filter(pl.col("city_key") == city, pl.col("district_key") == district)
        assert row["yoy_pct"].to_list() == city_yoy.to_list()
