import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.engine.aliases import (
    city_key,
    city_key_expr,
    district_key,
    district_key_expr,
    load_aliases,
    parse_aliases,
)
from pipeline.engine.names import normalize_name, normalize_name_expr


def vectorised(values: list[str | None]) -> list[str | None]:
    frame = pl.DataFrame({"s": values}, schema={"s": pl.String})
    return frame.select(normalize_name_expr(pl.col("s")))["s"].to_list()


SAMPLES = [
    "الرياض",
    "حي الملقا",
    "حى الملقا",
    "الملقـــا",
    "الْمَلْقَا",
    "أبحر الشمالية",
    "إشبيلية",
    "آل",
    "ٱلمدينة",
    "مكة المكرمة",
    "الدوادمى",
    "مخطط ٣ جزء ۴",
    "ﻷ ﷲ",
    "Al Malqa",
    "al-malqa",
    "ALMALQA",
    "Ha'il",
    "Ḥiṭṭīn",
    "  Riyadh\t\n",
    "King Fahd District",
    "Al Malqa Dist.",
    "الملقا حي",
    "حي حي",
    "al al malqa",
    "حي",
    "al",
    "",
    "   ",
    None,
    "İstanbul",
    "ᴬl Malqa",
    "\u200fالرياض\u200e",
    "a\u0640\u0301",
]

# Scripts the engine meets: Latin, Arabic and its presentation forms, general punctuation.
ALPHABET = st.characters(
    codec="utf-8",
    categories=None,
    include_characters="حيalAL -'",
).filter(
    lambda c: (
        c < "\u0250"
        or "\u0600" <= c <= "\u06ff"
        or "\ufb50" <= c <= "\ufdff"
        or "\ufe70" <= c <= "\ufeff"
        or "\u2000" <= c <= "\u206f"
    )
)
AFFIX = st.text(ALPHABET, max_size=3)
KNOWN = st.sampled_from([s for s in SAMPLES if s is not None])
TEXT = st.text(alphabet=ALPHABET, max_size=24) | st.builds(
    lambda a, s, b: a + s + b, AFFIX, KNOWN, AFFIX
)


@pytest.mark.parametrize(
    "spellings",
    [
        ["Riyadh", "الرياض", "RIYADH ", "riyadh", "Ar Riyadh", " الـرياض "],
        ["Jeddah", "جدة", "جده", "Jiddah"],
        ["Makkah", "Mecca", "مكة المكرمة", "مكه المكرمه"],
        ["Jazan", "جازان", "جيزان"],
        ["Khobar", "Al Khobar", "al-khobar", "AlKhobar", "الخبر"],
        ["Hail", "Ha'il", "حائل", "حايل"],
        ["Riyadh", "مدينة الرياض", "Riyadh City", "riyadh city", "مدينه الرياض", "City of Riyadh"],
        ["Al Kharj", "محافظة الخرج", "الخرج", "Kharj Governorate", "Governorate of Al Kharj"],
        ["Riyadh", "Riyadh\x00", "\x01Riyadh", "Riy\u3164adh"],
    ],
)
def test_city_spellings_meet(spellings: list[str]) -> None:
    assert len({city_key(s) for s in spellings}) == 1


def test_district_spellings_meet() -> None:
    spellings = ["حي الملقا", "Al Malqa", "الملقا", "al-malqa", "الملقـا", "ALMALQA", "حى الملقا"]
    riyadh = city_key("Riyadh")
    assert {district_key(s, riyadh) for s in spellings} == {"الملقا"}
    assert {district_key(s) for s in spellings} == {"الملقا"}


def test_same_english_name_differs_by_city() -> None:
    text = """
[districts."الرياض"]
"الصفاء" = ["Al Safa"]
[districts."جده"]
"الصفوه" = ["Al Safa"]
"""
    aliases = parse_aliases(text)
    assert aliases.districts_in_city["الرياض\x1fsafa"] == "الصفا"
    assert aliases.districts_in_city["جده\x1fsafa"] == "الصفوه"
    assert "safa" not in aliases.districts


def test_riyadh_and_jeddah_safa() -> None:
    # REGA writes الصفا where MOJ writes الصفاء: the lone hamza is dropped.
    assert district_key("Al Safa", city_key("Riyadh")) == normalize_name("الصفاء") == "الصفا"


def test_letter_variants() -> None:
    assert normalize_name("أحمد") == normalize_name("احمد") == normalize_name("إحمد")
    assert normalize_name("آمنة") == normalize_name("امنه")
    assert normalize_name("الدوادمى") == normalize_name("الدوادمي")
    assert normalize_name("طيبة") == normalize_name("طيبه")
    assert normalize_name("العُلَيّا") == normalize_name("العليا")


def test_digits_become_ascii() -> None:
    assert normalize_name("مخطط ٣٤") == "مخطط 34"
    assert normalize_name("مخطط ۳۴") == "مخطط 34"


def test_district_words_after_the_name() -> None:
    names = ["Al Malqa Dist.", "Al Malqa Dist", "Al Malqa District", "الملقا حي", "حي الملقا"]
    assert {normalize_name(s) for s in names} == {"malqa", "الملقا"}
    assert normalize_name("حي") == "حي"  # nothing but the word: kept, as before


def test_empty_and_none() -> None:
    assert normalize_name(None) is None
    assert normalize_name("  ") is None
    assert city_key(None) is None
    assert district_key("", "x") is None


def test_unknown_names_map_to_their_normal_form() -> None:
    assert city_key("Atlantis ") == "atlantis"
    assert district_key("حي  المستقبل") == "المستقبل"


def test_scalar_equals_vectorised_on_samples() -> None:
    assert vectorised(SAMPLES) == [normalize_name(s) for s in SAMPLES]


@settings(max_examples=400, deadline=None)
@given(st.lists(TEXT, max_size=20))
def test_scalar_equals_vectorised(values: list[str]) -> None:
    assert vectorised(values) == [normalize_name(s) for s in values]


AFFIX_WORDS = st.sampled_from(
    ["dist", "district", "Dist.", "neighborhood", "neighbourhood", "حي", "al", "Malqa", "x", "-"]
)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(AFFIX_WORDS, max_size=6).map(" ".join), min_size=1, max_size=20))
def test_affix_words_are_stripped_as_the_polars_path_strips_them(values: list[str]) -> None:
    assert vectorised(values) == [normalize_name(s) for s in values]


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_idempotent(value: str) -> None:
    once = normalize_name(value)
    assert normalize_name(once) == once


def test_key_exprs_match_scalars() -> None:
    frame = pl.DataFrame(
        {
            "city": [
                "Riyadh",
                "Jeddah",
                "جدة",
                None,
                "Nowhere",
                "Mecca",
                "مدينة الرياض",
                "City",
                "Governorate of Al Kharj",
                # both scripts, naming one city or two; a region; a postal code (QA 30)
                "Riyadh - الرياض",
                "Riyadh - جدة",
                "منطقة الرياض",
                "Al Riyadh Region 12345",
            ],
            "district": [
                "Al Safa",
                "Al Safa",
                "حي الصفا",
                "Al Malqa",
                None,
                "Al Aziziyah",
                "مدينة العمال",
                "Al Malqa",
                None,
                "Hay Al Malqa",
                "Al Malqa",
                "حي: الملقا",
                "Al Malqa 13521",
            ],
        }
    )
    out = frame.with_columns(ck=city_key_expr(pl.col("city"))).with_columns(
        dk=district_key_expr(pl.col("district"), pl.col("ck"))
    )
    expected_c = [city_key(c) for c in frame["city"]]
    expected_d = [district_key(d, c) for d, c in zip(frame["district"], expected_c, strict=True)]
    assert out["ck"].to_list() == expected_c
    assert out["dk"].to_list() == expected_d
    assert expected_c[-4:] == ["الرياض", "riyadh جده", "الرياض", "الرياض"]


def test_words_naming_a_city_are_dropped_from_cities_only() -> None:
    assert city_key("مدينة الرياض") == city_key("Riyadh") == "الرياض"
    assert district_key("مدينة العمال") == "مدينه العمال"  # a district called "Workers' City"
    assert city_key("Madinah") == city_key("المدينة") == "المدينه المنوره"


def test_alias_file_loads_without_conflicts() -> None:
    aliases = load_aliases()
    assert len(aliases.cities) > 100
    assert len(aliases.districts_in_city) > 500


def test_conflicting_alias_is_an_error() -> None:
    text = '[cities]\n"الرياض" = ["Riyadh"]\n"جده" = ["Riyadh"]\n'
    with pytest.raises(ValueError, match="riyadh"):
        parse_aliases(text)
