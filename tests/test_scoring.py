"""Properties of the scoring formulas (docs/scoring.md), over generated listings."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.engine.schema import PROPERTY_TYPES
from pipeline.engine.scoring import (
    PLACE_FIGURES,
    SCORE_COLUMNS,
    overall_score,
    overall_score_row,
    reported_percentiles,
    reported_percentiles_row,
    score_frame,
    score_row,
)
from tests.engine_frames import DISTRICT_MARKET, NO_MARKET, market_frame, request_row

BUCKETS = ("price", "location", "size", "details")

counts = st.one_of(st.none(), st.integers(0, 12).map(float))
flags = st.one_of(st.none(), st.booleans())
listings = st.fixed_dictionaries(
    {
        "type": st.sampled_from(PROPERTY_TYPES),
        "price": st.floats(1_000, 50_000_000),
        "area": st.floats(10, 20_000),
        "bedrooms": counts,
        "bathrooms": counts,
        "floor": st.one_of(st.none(), st.integers(0, 40).map(float)),
        "age": st.one_of(st.none(), st.integers(0, 80).map(float)),
        "parking": flags,
        "furnished": flags,
    }
)
markets = st.one_of(
    st.just(NO_MARKET),
    st.builds(
        lambda median, spread, count, yoy, avg, level, factor: {
            **DISTRICT_MARKET,
            "benchmark_level": level,
            "benchmark_median_sqm": median,
            "benchmark_p25_sqm": median * (1 - spread),
            "benchmark_p75_sqm": median * (1 + spread),
            "benchmark_transaction_count": count,
            "benchmark_yoy_pct": yoy,
            "market_avg_sqm": avg,
            "type_factor": factor,
        },
        st.floats(300, 20_000),
        st.floats(0.0, 0.6),
        st.integers(1, 50_000),
        st.one_of(st.none(), st.floats(-40, 40)),
        st.one_of(st.none(), st.floats(300, 20_000)),
        st.sampled_from(["district", "city"]),
        st.floats(0.25, 4.0),
    ),
)


def verdict_of(score: int) -> str:
    return "match" if score >= 70 else "partial" if score >= 40 else "no_match"


@settings(max_examples=150, deadline=None)
@given(st.lists(listings, min_size=1, max_size=20), markets)
def test_scores_are_in_range_and_verdict_follows_score(rows, market):
    scored = score_frame(market_frame([request_row(**r) for r in rows], market))
    for row in scored.iter_rows(named=True):
        assert 0 <= row["score"] <= 100
        assert row["verdict"] == verdict_of(row["score"])
        for bucket in BUCKETS:
            value = row[f"{bucket}_score"]
            assert 0 <= value <= 100
            assert row[f"{bucket}_status"] == (
                "pass" if value >= 70 else "warn" if value >= 40 else "fail"
            )


@settings(max_examples=150, deadline=None)
@given(listings, markets, st.floats(0.05, 0.999))
def test_a_lower_price_never_scores_worse(listing, market, factor):
    cheaper = {**listing, "price": listing["price"] * factor}
    scored = score_frame(market_frame([request_row(**listing), request_row(**cheaper)], market))
    dear, cheap = scored.iter_rows(named=True)
    assert cheap["price_score"] >= dear["price_score"]
    assert cheap["size_score"] >= dear["size_score"]
    assert cheap["score"] >= dear["score"]


@settings(max_examples=100, deadline=None)
@given(listings, st.integers(0, 40), st.integers(0, 40))
def test_floor_never_matters_for_land_or_villas(listing, floor_a, floor_b):
    for kind in ("land", "villa"):
        rows = [
            request_row(**{**listing, "type": kind, "floor": float(f)}) for f in (floor_a, floor_b)
        ]
        a, b = score_frame(market_frame(rows)).iter_rows(named=True)
        assert a["details_score"] == b["details_score"]


def test_floor_matters_for_an_apartment():
    base = {"type": "apartment", "area": 150.0, "price": 900_000.0, "age": 8.0}
    rows = [request_row(**base, floor=0.0), request_row(**base, floor=3.0)]
    ground, third = score_frame(market_frame(rows)).iter_rows(named=True)
    assert third["details_score"] > ground["details_score"]


def test_bedrooms_do_not_matter_for_land():
    rows = [request_row(type="land", area=600.0, bedrooms=b) for b in (None, 0.0, 6.0)]
    assert score_frame(market_frame(rows))["details_score"].n_unique() == 1


def test_price_anchors_at_the_benchmark_percentiles():
    # 400 m2 against p25 5,000 / median 6,500 / p75 8,000 SAR per m2
    prices = [400 * 4_000.0, 400 * 5_000.0, 400 * 6_500.0, 400 * 8_000.0, 400 * 12_000.0]
    scored = score_frame(market_frame([request_row(price=p) for p in prices]))
    assert scored["price_score"].to_list() == [100, 100, 75, 50, 0]
    assert scored["price_status"].to_list() == ["pass", "pass", "pass", "warn", "fail"]


def test_the_type_factor_scales_the_price_anchors():
    # Villas here trade at twice the area's average deed price per m2: a villa at twice the
    # median scores as a median-priced listing would without the factor.
    villa_market = {**DISTRICT_MARKET, "type_factor": 2.0}
    at_twice_median = score_frame(market_frame([request_row(price=400 * 13_000.0)], villa_market))
    assert at_twice_median["price_score"].to_list() == [75]


def test_without_a_benchmark_price_is_neutral_and_location_low():
    scored = score_frame(market_frame([request_row()], NO_MARKET)).row(0, named=True)
    assert scored["price_score"] == 50
    assert scored["location_score"] == 30
    assert scored["size_score"] == 50
    assert scored["price_per_sqm"] == 6250.0


def test_city_level_benchmark_discounts_location():
    district = score_frame(market_frame([request_row()])).row(0, named=True)
    city = score_frame(
        market_frame([request_row()], {**DISTRICT_MARKET, "benchmark_level": "city"})
    )
    assert city.row(0, named=True)["location_score"] < district["location_score"]


def test_overall_score_is_the_weighted_sum_of_rounded_buckets():
    row = score_frame(market_frame([request_row(age=3.0, bedrooms=5.0)])).row(0, named=True)
    weighted = (
        0.40 * row["price_score"]
        + 0.20 * row["location_score"]
        + 0.25 * row["size_score"]
        + 0.15 * row["details_score"]
    )
    assert row["score"] == int(weighted + 0.5)


def test_an_overall_score_of_exactly_a_half_rounds_up_to_match():
    # 0.4 x 91 + 0.2 x 19 + 0.25 x 98 + 0.15 x 32 = 69.5, which floats compute as 69.4999...
    buckets = {"price": 91, "location": 19, "size": 98, "details": 32}
    assert overall_score_row(buckets) == 70
    frame = pl.DataFrame({f"{name}_score": [score] for name, score in buckets.items()})
    assert frame.select(overall_score()).item() == 70


wide_listings = st.fixed_dictionaries(
    {
        "type": st.sampled_from(PROPERTY_TYPES),
        "price": st.one_of(st.floats(1, 1e11), st.sampled_from([1_000_000.0, 999_999.5])),
        "area": st.one_of(st.floats(0.01, 1e8), st.sampled_from([25.0, 200.0, 800.0, 5000.0])),
        "bedrooms": counts,
        "bathrooms": counts,
        "floor": st.one_of(st.none(), st.integers(0, 300).map(float)),
        "age": st.one_of(st.none(), st.sampled_from([0.0, 5.0, 10.0, 20.0, 30.0, 31.0, 999.0])),
        "parking": flags,
        "furnished": flags,
    }
)


@settings(max_examples=100, deadline=None)
@given(st.lists(wide_listings, min_size=10, max_size=60), markets)
def test_the_row_formulas_score_exactly_as_the_frame_formulas(rows, market):
    frame = market_frame([request_row(**row) for row in rows], market)
    by_frame = score_frame(frame).select(SCORE_COLUMNS).to_dicts()
    by_row = [{c: score_row(row)[c] for c in SCORE_COLUMNS} for row in frame.to_dicts()]
    assert by_row == by_frame


@settings(max_examples=80, deadline=None)
@given(st.lists(listings, min_size=10, max_size=60), markets)
def test_the_reported_percentiles_mean_what_the_spec_says_of_the_price(rows, market):
    """At or below the reported p25: well priced (100); above the reported p75: expensive
    (the p75 anchor's 50 at most, never a pass); to the halala, as both are reported."""
    scored = score_frame(market_frame([request_row(**row) for row in rows], market))
    reported = scored.with_columns(reported_percentiles())
    for row in reported.filter(pl.col("benchmark_level").is_not_null()).iter_rows(named=True):
        if row["price_per_sqm"] <= row["benchmark_p25_sqm"]:
            assert row["price_score"] == 100
        if row["price_per_sqm"] > row["benchmark_p75_sqm"]:
            assert row["price_score"] <= 50 and row["price_status"] != "pass"
    by_row = [reported_percentiles_row(row) for row in scored.to_dicts()]
    assert by_row == reported.select(r"^benchmark_.*_sqm$", *PLACE_FIGURES).to_dicts()


def test_a_large_frame_scored_by_the_streaming_engine_scores_as_small_frames():
    from pipeline.engine.scoring import STREAMING_FROM_ROWS

    kinds = [
        request_row(type=kind, price=price, area=area, bedrooms=3.0, floor=floor)
        for kind in PROPERTY_TYPES
        for price, area, floor in [(950_000.0, 140.0, 2.0), (4e6, 600.0, None), (1e5, 30.0, 9.0)]
    ]
    frames = [market_frame(kinds, market) for market in (DISTRICT_MARKET, NO_MARKET)]
    base = pl.concat(frames)
    repeats = STREAMING_FROM_ROWS // base.height + 1
    big = pl.concat([base] * repeats).with_columns(
        price=pl.col("price") * (1 + pl.int_range(pl.len()) % 997 / 1000)
    )
    small = pl.concat([score_frame(part) for part in big.iter_slices(STREAMING_FROM_ROWS // 2)])
    assert score_frame(big).equals(small)


def test_a_true_half_halala_rounds_up_in_both_renderings():
    # 426,107.73 SAR over 1,294 m2 is 329.295 SAR a m2, which floats compute as 329.2949999...
    row = request_row(price=426_107.73, area=1_294.0)
    assert score_frame(market_frame([row]))["price_per_sqm"].to_list() == [329.30]
    assert score_row(market_frame([row]).row(0, named=True))["price_per_sqm"] == 329.30
    # 1,034.5 x 2.13 = 2,203.485 (an apartment's p75 in الخفجي / الملك فهد)
    market = {**DISTRICT_MARKET, "benchmark_p75_sqm": 1_034.5, "type_factor": 2.13}
    scored = score_frame(market_frame([request_row()], market))
    assert scored.select(reported_percentiles())["benchmark_p75_sqm"].to_list() == [2_203.49]
    assert reported_percentiles_row(scored.row(0, named=True))["benchmark_p75_sqm"] == 2_203.49
