"""Column mapping: default aliases in both languages, units in headers, config overrides."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.batch.columns import (
    DEFAULT_CONFIG,
    MAPPED_FIELDS,
    REQUIRED_FIELDS,
    header_key,
    load_column_config,
    loose_header_key,
    map_columns,
)
from pipeline.engine.schema import REQUEST_SCHEMA
from pipeline.errors import InputError, MissingColumnError, UsageError

CONFIG = load_column_config()


def test_default_config_covers_every_request_field_but_reasoning() -> None:
    assert DEFAULT_CONFIG.is_file()
    assert set(CONFIG.aliases) == set(REQUEST_SCHEMA) - {"reasoning"} == set(MAPPED_FIELDS)
    assert REQUIRED_FIELDS == ("type", "price", "area", "city")


def test_arabic_headers() -> None:
    headers = [
        "نوع العقار", "السعر (ريال)", "المساحة (م²)", "غرف النوم", "دورات المياه", "الطابق",
        "عمر العقار", "مواقف", "مؤثث", "المدينة", "الحي", "خط العرض", "خط الطول", "ملاحظات",
    ]  # fmt: skip
    mapping = map_columns(headers, CONFIG, source="listings.xlsx")
    assert mapping.fields == dict(zip(MAPPED_FIELDS, headers[:-1], strict=True))


def test_english_headers_with_units_and_odd_spelling() -> None:
    headers = [
        "Property Type", "Price (SAR)", "Size (m2)", "Beds", "Baths", "Floor", "Building Age",
        "Parking", "Furnished", "City", "Neighbourhood", "Latitude", "Long", "Agent",
    ]  # fmt: skip
    mapping = map_columns(headers, CONFIG, source="x.csv")
    assert mapping.mapped == dict(zip(MAPPED_FIELDS, headers[:-1], strict=True))


@pytest.mark.parametrize(
    ("header", "field"),
    [
        ("PRICE", "price"),
        ("  price  ", "price"),
        ("\ufeffprice", "price"),
        ("Asking_Price", "price"),
        ("Price SAR", "price"),
        ("Price (SAR, incl. VAT)", "price"),
        ("السعر بالريال", "price"),
        ("سعر العقار", "price"),
        ("Area (sqm)", "area"),
        ("area_sqm", "area"),
        ("المساحة م٢", "area"),
        ("المساحه", "area"),  # ta marbuta written as ha
        ("Age (years)", "age"),
        ("نوع  العقار", "type"),
        ("الـمدينة", "city"),  # tatweel
    ],
)
def test_header_variants_match(header: str, field: str) -> None:
    others = {"type": "type", "price": "price", "area": "area", "city": "city"}
    others.pop(field, None)
    mapping = map_columns([header, *others.values()], CONFIG, source="x.csv")
    assert mapping[field] == header


@pytest.mark.parametrize("header", ["Price per sqm", "Price/m2", "Price (per m2)", "Price m2"])
def test_a_rate_is_never_taken_for_the_price(header: str) -> None:
    with pytest.raises(MissingColumnError) as excinfo:
        map_columns([header, "type", "area", "city"], CONFIG, source="x.csv")
    assert excinfo.value.field == "price"


def test_header_keys() -> None:
    assert header_key(" Price (SAR) ") == "price sar"
    assert header_key("المساحة (م²)") == "المساحه م2"
    assert loose_header_key("Price (SAR)", "price") == "price"
    assert loose_header_key("السعر بالريال", "price") == "السعر"
    assert loose_header_key("Area sqm", "price") == "area sqm"  # units of another field stay
    assert loose_header_key("Price / m2", "price") is None


def test_missing_required_column_message_in_full() -> None:
    with pytest.raises(MissingColumnError) as excinfo:
        map_columns(["Price", "Area", "City", "Notes"], CONFIG, source="portfolio.xlsx")
    assert str(excinfo.value) == (
        "portfolio.xlsx: no column for required field 'type'; tried headers 'type', "
        "'property type', 'property_type', 'unit type', 'category', 'نوع العقار', 'النوع', "
        "'نوع الوحدة', 'التصنيف'; the file has 'Price', 'Area', 'City', 'Notes'. Rename a column "
        "or map it with --config."
    )
    assert excinfo.value.field == "type"
    assert isinstance(excinfo.value, InputError)


def test_two_headers_for_one_field_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as excinfo:
        map_columns(["type", "Price (SAR)", "السعر", "area", "city"], CONFIG, source="x.csv")
    assert str(excinfo.value) == (
        "x.csv: 2 headers match field 'price' ('Price (SAR)', 'السعر'); keep one, or say which "
        'to use in a --config file: [columns] price = "Price (SAR)" or "السعر"'
    )


def test_optional_fields_unmapped_are_none() -> None:
    mapping = map_columns(["type", "price", "area", "city"], CONFIG, source="x.csv")
    assert mapping["district"] is None
    assert set(mapping.mapped) == {"type", "price", "area", "city"}


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "decisions.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_config_explicit_mapping_wins_and_resolves_ambiguity(tmp_path: Path) -> None:
    config = load_column_config(
        write_config(
            tmp_path,
            """
            [columns]
            price = "My Price Header"
            district = ""
            """,
        )
    )
    headers = ["My Price Header", "Price", "type", "area", "city", "district"]
    mapping = map_columns(headers, config, source="x.csv")
    assert mapping["price"] == "My Price Header"
    assert mapping["district"] is None  # "" means: the file has no district column


def test_config_aliases_replace_a_fields_list(tmp_path: Path) -> None:
    config = load_column_config(
        write_config(tmp_path, '[aliases]\ncity = ["Municipality", "البلدية"]\n')
    )
    assert config.aliases["city"] == ("Municipality", "البلدية")
    assert config.aliases["price"] == CONFIG.aliases["price"]
    mapping = map_columns(["type", "price", "area", "البلدية"], config, source="x.csv")
    assert mapping["city"] == "البلدية"


def test_config_explicit_header_missing_from_file(tmp_path: Path) -> None:
    config = load_column_config(write_config(tmp_path, '[columns]\nprice = "Listing"\n'))
    with pytest.raises(InputError) as excinfo:
        map_columns(["type", "price", "area", "city"], config, source="x.csv")
    assert str(excinfo.value) == (
        "x.csv: the configuration maps field 'price' to header 'Listing', which the file does "
        "not have; the file has 'type', 'price', 'area', 'city'"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[columns]\nprise = 'x'\n", "[columns] has unknown field 'prise'"),
        ("[columns]\nprice = 3\n", "[columns] price must be a header name in quotes"),
        ("[columns]\nprice = ''\n", "[columns] price is required and cannot be left unmapped"),
        ("[columns]\nprice = 'a'\narea = 'a'\n", "maps header(s) 'a' to two fields"),
        ("[aliases]\nprice = 'x'\n", "[aliases] price must be a list of non-empty strings"),
        ("[aliases]\ncity = ['price']\n", "alias 'price' is listed for both"),
        ("[columns\n", "not valid TOML"),
        ("[column]\nprice = 'Sold'\n", "unknown table [column]; a --config file has [aliases]"),
        ("[Columns]\nprice = 'Sold'\n", "unknown table [Columns]"),
        (
            "price = 'Sold'\n",
            "'price' is outside any table; a --config file has [aliases] and "
            "[columns] (put it under [columns] there)",
        ),
    ],
)
def test_bad_config_is_a_usage_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        load_column_config(write_config(tmp_path, text))


def test_a_config_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "notepad.toml"
    path.write_bytes(b"\xef\xbb\xbf" + b'[columns]\nprice = "Sold"\n')
    assert load_column_config(path).explicit == {"price": "Sold"}


def test_config_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="configuration file not found"):
        load_column_config(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("header", "field"),
    [
        ("Price (thousand SAR)", "price"),
        ("Price (USD)", "price"),
        ("Price ($)", "price"),
        ("Price (M SAR)", "price"),
        ("السعر (بالمليون)", "price"),
        ("السعر (ألف ريال)", "price"),
        ("Area (sq ft)", "area"),
        ("Area (acres)", "area"),
        ("المساحة (دونم)", "area"),
        ("Size (ft²)", "area"),
        ("Price (SAR 000s)", "price"),
        ("Price (1000 SAR)", "price"),
        ("Price (x1,000)", "price"),
        ("Price (kSAR)", "price"),
        ("Price (MSAR)", "price"),
        ("Price (SARm)", "price"),
        ("Area (sf)", "area"),
        # a price of the metre (land is quoted so) or of a period (a rent): not the sale price
        ("Price (m²)", "price"),
        ("Price (sqm)", "price"),
        ("السعر (م²)", "price"),
        ("السعر (المتر)", "price"),
        ("Price (monthly)", "price"),
        ("السعر (سنوي)", "price"),
        ("Price (annual rent)", "price"),
        # a currency sign outside brackets, which header_key drops as punctuation
        ("Price $", "price"),
        ("$ Price", "price"),
        ("Price €", "price"),
        ("السعر $", "price"),
        ("Price - $", "price"),
    ],
)
def test_a_header_in_another_unit_is_not_taken(header: str, field: str) -> None:
    others = {"price": "Price", "area": "Area", "type": "type", "city": "city"}
    headers = [header, *(h for f, h in others.items() if f != field)]
    with pytest.raises(MissingColumnError) as excinfo:
        map_columns(headers, CONFIG, source="x.csv")
    assert excinfo.value.field == field
    assert f"Header {header!r} is not taken for '{field}'" in str(excinfo.value)


def test_headers_in_the_fields_own_units_or_with_notes_still_match() -> None:
    mapped = map_columns(
        ["Price (SAR)", "المساحة (م²)", "Age (years)", "Type (villa, flat...)", "City"],
        CONFIG,
        source="x.csv",
    )
    assert mapped.fields["price"] == "Price (SAR)"
    assert mapped.fields["area"] == "المساحة (م²)"
    assert mapped.fields["age"] == "Age (years)"
    assert mapped.fields["type"] == "Type (villa, flat...)"


@pytest.mark.parametrize(
    "header",
    ["Price (SAR, year-end)", "Price (excl. rent)", "Price (SAR) [sale, not rent]",
     "Price (asking, annual review)", "السعر (ريال)"],
)  # fmt: skip
def test_a_price_header_mentioning_a_year_or_a_rent_in_passing_is_still_taken(header) -> None:
    mapped = map_columns([header, "Area", "type", "city"], CONFIG, source="x.csv")
    assert mapped.fields["price"] == header


def test_age_in_months_is_not_taken_for_age() -> None:
    mapped = map_columns(["Price", "Area", "type", "city", "Age (months)"], CONFIG, source="x")
    assert mapped.fields["age"] is None


def test_an_alias_of_ones_own_that_names_a_unit_is_taken(tmp_path: Path) -> None:
    config = tmp_path / "mapping.toml"
    config.write_text('[aliases]\nprice = ["Price (k)", "price"]\n', encoding="utf-8")
    mapped = map_columns(
        ["Price (k)", "Area", "type", "city"], load_column_config(config), source="x"
    )
    assert mapped.fields["price"] == "Price (k)"
