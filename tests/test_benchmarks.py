import time
from pathlib import Path

import polars as pl
import pytest

from pipeline.engine.aliases import load_aliases
from pipeline.engine.benchmarks import (
    ATTACHED_SCHEMA,
    DEFAULT_DIR,
    BenchmarkTable,
    attach_benchmarks,
)
from pipeline.engine.benchmarks_build import MIN_TRANSACTIONS, build
from pipeline.engine.names import normalize_name

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
    assert out["market_avg_level"].to_list() == ["city", None]


def test_unknown_district_falls_back_to_city(table: BenchmarkTable) -> None:
    row = attach_benchmarks(frame([("Riyadh", "No Such Place", "apartment")]), table).row(
        0, named=True
    )
    city = table.benchmarks.filter(pl.col("city_key") == "الرياض", pl.col("level") == "city")
    assert row["benchmark_level"] == "city"
    assert row["benchmark_median_sqm"] == city["median_sqm"][0]
    assert row["benchmark_transaction_count"] == city["transaction_count"][0]


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


def test_million_rows_fast(table: BenchmarkTable) -> None:
    rows = [("Riyadh", "Al Narjis", "villa"), ("Jeddah", None, "land"), (None, "x", None)]
    big = frame(rows * 333_334).with_row_index("n")
    attach_benchmarks(big.head(10), table)
    start = time.perf_counter()
    out = attach_benchmarks(big, table)
    elapsed = time.perf_counter() - start
    assert out.height == big.height
    assert out["n"].is_sorted()
    assert elapsed < 2.0  # about 0.3 s on a laptop; generous for shared CI machines


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
    assert market.select("city_key", "type").is_unique().all()


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
def test_rebuild_is_byte_identical(tmp_path: Path) -> None:
    report = build(SHARED_DATA, tmp_path / "benchmarks.csv")
    for name in ("benchmarks.csv", "market_averages.csv"):
        assert (tmp_path / name).read_bytes() == (DEFAULT_DIR / name).read_bytes(), name
    assert report.cities + report.districts == report.benchmark_rows
    assert report.deeds_used < report.deeds_read
