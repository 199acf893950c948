"""Normalisation: example tables per kind of field, and properties over generated text."""

from __future__ import annotations

import re

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal, assert_series_equal

from pipeline.batch.columns import MAPPED_FIELDS, ColumnMap
from pipeline.batch.normalize import (
    BOOLEAN_WORDS,
    DOTTED_THOUSANDS,
    DOTTED_THOUSANDS_AREA,
    TYPE_SYNONYMS,
    normalize,
    normalize_column,
)
from pipeline.engine.schema import PROPERTY_TYPES, REQUEST_SCHEMA

IDENTITY = ColumnMap({name: name for name in MAPPED_FIELDS})
EXPECTED_SCHEMA = {name: dtype for name, dtype in REQUEST_SCHEMA.items() if name != "reasoning"}


def column(name: str, cells: list[str | None]) -> list[object]:
    return normalize_column(pl.Series(cells, dtype=pl.String), name).to_list()


PRICES = [
    ("1500000", 1_500_000.0),
    ("1,500,000", 1_500_000.0),
    ("1 500 000", 1_500_000.0),
    ("1\u00a0500\u00a0000", 1_500_000.0),
    ("١٬٥٠٠٬٠٠٠", 1_500_000.0),
    ("١٥٠٠٠٠٠", 1_500_000.0),
    ("۱۵۰۰۰۰۰", 1_500_000.0),
    ("١٢٠٠٠٠٠٫٥", 1_200_000.5),
    ("1,500,000 SAR", 1_500_000.0),
    ("SAR 1,500,000", 1_500_000.0),
    ("1500000 sr", 1_500_000.0),
    ("١٬٥٠٠٬٠٠٠ ريال", 1_500_000.0),
    ("1,500,000 ر.س", 1_500_000.0),
    ("\u200f1,500,000\u200f", 1_500_000.0),
    ("1.5M", 1_500_000.0),
    ("1.5 m", 1_500_000.0),
    ("1.5 مليون ريال", 1_500_000.0),
    ("750k", 750_000.0),
    ("750 ألف", 750_000.0),
    ("1500000.0", 1_500_000.0),
    ("1e+20", 1e20),
    ("-50", -50.0),
    ("+50", 50.0),
    ("−50", -50.0),
    ("0", 0.0),
    ("1,5", None),  # a decimal comma is ambiguous: refused, never read as 15
    ("1.500.000", None),
    ("950.000", None),  # 950 or 950,000: no price has three decimals, so neither is guessed
    ("3.200 SAR", None),
    ("١٫٢٠٠", None),
    ("1.500 مليون", 1_500_000.0),  # with a multiplier the dot is a decimal point
    ("0.500", 0.5),
    ("950.00", 950.0),
    ("12,34,567", None),
    ("abc", None),
    ("1e999", None),
    ("inf", None),
    ("NaN", None),
    ("", None),
    ("   ", None),
    (None, None),
]


@pytest.mark.parametrize(("cell", "expected"), PRICES)
def test_price(cell: str | None, expected: float | None) -> None:
    assert column("price", [cell]) == [expected]


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("120", 120.0),
        ("120.5", 120.5),
        ("١٢٠٫٥ م²", 120.5),
        ("120 m2", 120.0),
        ("120m²", 120.0),
        ("120 sqm", 120.0),
        ("120 sq m", 120.0),
        ("120 م2", 120.0),
        ("120 م٢", 120.0),
        ("200 متر مربع", 200.0),
        ("1,200", 1200.0),
        ("140.1", 140.1),
        ("140.12", 140.12),
        ("1.250", None),  # 1,250 m2 from a European-style export, or 1.25: neither is guessed
        ("12.500", None),
        ("140.125", 140.125),  # an area may have three decimals (a surveyed plot)
        ("92.903", 92.903),  # 1,000 sq ft, converted; as a number cell prints it
        ("1,140.125", 1140.125),
        ("-5", -5.0),
        ("120 sqft", None),  # another unit: not silently read as m2
        ("120 m", 120.0),
        ("120 م", 120.0),
        ("1.5k", None),  # multipliers are for prices only
        ("x", None),
    ],
)
def test_area(cell: str, expected: float | None) -> None:
    assert column("area", [cell]) == [expected]


@pytest.mark.parametrize(
    ("name", "cell", "expected"),
    [
        ("bedrooms", "3", 3.0),
        ("bedrooms", "٣", 3.0),
        ("bedrooms", "2.5", 2.5),  # not whole: the engine rejects it
        ("bedrooms", "3+1", None),
        ("bathrooms", " 2 ", 2.0),
        ("floor", "ground", 0.0),
        ("floor", "الأرضي", 0.0),
        ("floor", "أرضي", 0.0),
        ("floor", "7", 7.0),
        ("floor", "-1", -1.0),
        ("age", "5 years", 5.0),
        ("age", "١٠ سنوات", 10.0),
        ("lat", "24.7136", 24.7136),
        ("lat", "٢٤٫٧١٣٦", 24.7136),
        ("lat", "24.7136°", 24.7136),
        ("lng", "46,675", None),  # no thousands grouping in coordinates
        ("lng", "-46.6753", -46.6753),
    ],
)
def test_other_numbers(name: str, cell: str, expected: float | None) -> None:
    assert column(name, [cell]) == [expected]


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("شقة", "apartment"),
        ("شقه", "apartment"),
        (" Apartment ", "apartment"),
        ("FLAT", "apartment"),
        ("Studio", "apartment"),
        ("فيلا", "villa"),
        ("فيلّا", "villa"),
        ("فـيلا", "villa"),  # tatweel
        ("Villa", "villa"),
        ("house", "villa"),
        ("Duplex", "villa"),
        ("دوبلكس", "villa"),
        ("فيلة", "villa"),  # the common spellings with a final ta marbuta or ha
        ("فيله", "villa"),
        ("فلة", "villa"),
        ("دبلكس", "villa"),
        ("أرض", "land"),
        ("ارض", "land"),
        ("إرض", "land"),
        ("Plot", "land"),
        ("مكتب", "office"),
        ("Office", "office"),
        ("معرض", "commercial"),
        ("showroom", "commercial"),
        ("محل", "commercial"),
        ("Shop", "commercial"),
        ("retail", "commercial"),
        ("تجاري", "commercial"),
        ("COMMERCIAL", "commercial"),
        ("  Castle   Keep ", "castle keep"),  # unknown: trimmed, lower-cased, for the engine
        ("عمارة", "عمارة"),
        ("", None),
        (None, None),
    ],
)
def test_property_type(cell: str | None, expected: str | None) -> None:
    assert column("type", [cell]) == [expected]


def test_every_type_synonym_maps_to_a_spec_type() -> None:
    assert set(TYPE_SYNONYMS) == set(PROPERTY_TYPES)
    for value, synonyms in TYPE_SYNONYMS.items():
        assert column("type", list(synonyms)) == [value] * len(synonyms)


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("yes", True),
        ("YES", True),
        ("Y", True),
        ("true", True),
        ("1", True),
        ("نعم", True),
        ("يوجد", True),
        ("متوفر", True),
        ("no", False),
        ("N", False),
        ("False", False),
        ("0", False),
        ("لا", False),
        ("لا يوجد", False),
        ("غير متوفر", False),
        ("غير  متوفر", False),
        ("maybe", None),
        ("2", None),
        ("", None),
        (None, None),
    ],
)
def test_booleans(cell: str | None, expected: bool | None) -> None:
    assert column("parking", [cell]) == [expected]
    assert column("furnished", [cell]) == [expected]


def test_every_boolean_word() -> None:
    for value, words in BOOLEAN_WORDS.items():
        assert column("parking", list(words)) == [value] * len(words)


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("  الرياض  ", "الرياض"),
        ("Al   Malqa", "Al Malqa"),
        ("حي\u00a0النرجس", "حي النرجس"),
        ("\u200fجدة", "جدة"),
        ("Riyadh", "Riyadh"),  # names are not mapped to benchmark keys here
        ("  ", None),
        (None, None),
    ],
)
def test_text(cell: str | None, expected: str | None) -> None:
    assert column("city", [cell]) == [expected]
    assert column("district", [cell]) == [expected]


def test_frame_has_the_request_schema_rows_in_order_and_unmapped_fields_null() -> None:
    raw = pl.DataFrame(
        {
            "Price (SAR)": ["1,500,000", "abc", None, "950000"],
            "المساحة": ["120", "300", "80", "١٢٠"],
            "النوع": ["شقة", "villa", "castle", "أرض"],
            "المدينة": ["الرياض", "جدة", " ", "الدمام"],
            "notes": ["a", "b", "c", "d"],
        }
    )
    mapping = ColumnMap(
        {
            **dict.fromkeys(MAPPED_FIELDS),
            "price": "Price (SAR)",
            "area": "المساحة",
            "type": "النوع",
            "city": "المدينة",
        }
    )
    out = normalize(raw, mapping)
    assert out.schema == EXPECTED_SCHEMA
    assert out.height == raw.height
    assert out["price"].to_list() == [1_500_000.0, None, None, 950_000.0]
    assert out["area"].to_list() == [120.0, 300.0, 80.0, 120.0]
    assert out["type"].to_list() == ["apartment", "villa", "castle", "land"]
    assert out["city"].to_list() == ["الرياض", "جدة", None, "الدمام"]
    assert out["district"].null_count() == out.height


def test_only_literal_fields_still_give_every_row() -> None:
    out = normalize(pl.DataFrame({"x": ["1", "2", "3"]}), ColumnMap(dict.fromkeys(MAPPED_FIELDS)))
    assert out.schema == EXPECTED_SCHEMA
    assert out.height == 3


# --- Properties -----------------------------------------------------------------------------


def arabic(text: str) -> str:
    return text.translate(str.maketrans("0123456789,.", "٠١٢٣٤٥٦٧٨٩٬٫"))


WORDS = [w for ws in TYPE_SYNONYMS.values() for w in ws] + [
    w for ws in BOOLEAN_WORDS.values() for w in ws
]
NUMBERISH = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.integers(-(10**12), 10**12).map(lambda n: f"{n:,}"),
    st.integers(0, 10**9).map(lambda n: f"{n} SAR"),
    st.decimals(-(10**6), 10**6, places=3).map(lambda d: f"{d}M"),
    st.integers(0, 10**6).map(lambda n: arabic(f"{n:,}")),
)  # fmt: skip
CELLS = st.one_of(
    st.none(),
    NUMBERISH,
    st.sampled_from([*WORDS, "ground", "أرضي", "", " ", "\u200f"]),
    st.text(alphabet=st.sampled_from("aAم٣3 ,.\u00a0-+ةأ\u200fkmM٬٫"), max_size=12),
    st.text(max_size=8),
)
# Frames of ten rows or more: normalising costs about the same for one row as for a hundred.
ROWS = st.lists(st.tuples(*[CELLS] * len(MAPPED_FIELDS)), min_size=10, max_size=100)


def frame_of(rows: list[tuple[str | None, ...]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=dict.fromkeys(MAPPED_FIELDS, pl.String), orient="row")


@settings(max_examples=60, deadline=None)
@given(ROWS)
def test_normalising_twice_changes_nothing(rows: list[tuple[str | None, ...]]) -> None:
    once = normalize(frame_of(rows), IDENTITY)
    again = normalize(once.select(pl.all().cast(pl.String)), IDENTITY)
    assert_frame_equal(again, once)


@settings(max_examples=300, deadline=None)
@given(
    st.floats(min_value=-1e15, max_value=1e15, allow_nan=False),
    st.integers(0, 6),
    st.sampled_from(["price", "area", "bedrooms", "age"]),
)
def test_arabic_digits_and_separators_read_as_their_ascii_form(
    value: float, places: int, name: str
) -> None:
    ascii_form = f"{value:,.{places}f}"
    plain = ascii_form.replace(",", "")
    # A price like 950.000 reads two ways (see DOTTED_THOUSANDS), however its digits are written
    dotted = {"price": DOTTED_THOUSANDS, "area": DOTTED_THOUSANDS_AREA}.get(name)
    two_ways = dotted is not None and re.fullmatch(dotted, plain) is not None
    expected = None if two_ways else float(plain)
    assert column(name, [arabic(ascii_form)]) == column(name, [plain]) == [expected]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CELLS, min_size=1, max_size=40), st.sampled_from(MAPPED_FIELDS))
def test_fast_paths_give_the_same_values(cells: list[str | None], name: str) -> None:
    repeated = pl.Series(cells * (12_000 // len(cells) + 1), dtype=pl.String)  # past the sample
    for series in (pl.Series(cells, dtype=pl.String), repeated):
        assert_series_equal(
            normalize_column(series, name),
            normalize_column(series, name, shortcuts=False),
            check_names=False,
        )
