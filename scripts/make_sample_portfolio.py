"""Generate the sample portfolio (sample_data/portfolio.csv and .xlsx) from the benchmark table.

Deterministic (fixed seed): listings in several cities, all five property types, Arabic and
English headers and values written the ways brokers write them, plausible prices drawn around
the official benchmarks, a few exact duplicates and a handful of deliberately bad rows.

    python scripts/make_sample_portfolio.py      (or: make sample)
"""

from __future__ import annotations

import csv
import random
import tomllib
from pathlib import Path

import polars as pl
import xlsxwriter

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data"
SEED = 20261122
ROWS = 360

HEADERS = [
    "Listing ID",
    "المدينة",
    "District",
    "نوع العقار",
    "Price (SAR)",
    "المساحة",
    "Bedrooms",
    "Bathrooms",
    "الدور",
    "Age",
    "Parking",
    "مفروش",
    "Agent",
    "Notes",
]
CITIES = ["الرياض", "جده", "الدمام", "مكة المكرمة", "المدينة المنورة", "الخبر", "بريده", "الطائف"]
TYPE_WORDS = {
    "apartment": ["apartment", "شقة", "Flat", "شقه"],
    "villa": ["villa", "فيلا", "Villa"],
    "land": ["land", "أرض", "ارض", "Plot"],
    "commercial": ["commercial", "معرض", "Showroom", "محل"],
    "office": ["office", "مكتب", "Office"],
}
TYPE_WEIGHTS = {"apartment": 40, "villa": 25, "land": 20, "commercial": 8, "office": 7}
AREAS = {
    "apartment": (70, 260),
    "villa": (250, 700),
    "land": (300, 1500),
    "commercial": (60, 600),
    "office": (40, 400),
}
ARABIC_DIGITS = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


def english_names() -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    aliases = tomllib.loads((ROOT / "pipeline" / "data" / "aliases.toml").read_text("utf-8"))
    cities = {city: names[0] for city, names in aliases["cities"].items() if names}
    districts = {
        (city, district): names[0]
        for city, table in aliases.get("districts", {}).items()
        for district, names in table.items()
        if names
    }
    return cities, districts


def write_price(rng: random.Random, price: int) -> str:
    style = rng.random()
    if style < 0.45:
        return str(price)
    if style < 0.75:
        return f"{price:,}"
    if style < 0.88:
        return f"{price:,} ريال"
    if style < 0.95:
        return f"SAR {price:,}"
    return f"{price:,}".translate(ARABIC_DIGITS).replace(",", "٬")


def write_bool(rng: random.Random, value: bool | None) -> str:
    if value is None:
        return ""
    return rng.choice(["yes", "نعم", "Y", "true"] if value else ["no", "لا", "N", "false"])


def listing(rng: random.Random, n: int, markets: dict, english: tuple) -> list[str]:
    city_names, district_names = english
    city = rng.choice(CITIES)
    kind = rng.choices(list(TYPE_WEIGHTS), weights=list(TYPE_WEIGHTS.values()))[0]
    districts = markets["districts"].get(city, [])
    district_row = rng.choice(districts) if districts and rng.random() < 0.85 else None
    district = district_row["district_ar"] if district_row else ""
    average = markets["averages"].get((city, kind)) or markets["averages"].get(("", kind))
    reference = average or (district_row or markets["cities"][city])["median_sqm"]
    area = rng.randint(*AREAS[kind])
    price = int(round(area * reference * rng.lognormvariate(0, 0.28), -3))
    built = kind != "land"
    rooms = rng.randint(1, 4) if kind == "apartment" else rng.randint(3, 7)
    homes = kind in ("apartment", "villa")
    shown_city = city_names.get(city, city) if rng.random() < 0.5 else city
    shown_district = (
        district_names.get((city, district), district) if rng.random() < 0.5 else district
    )
    if shown_district and rng.random() < 0.15:
        shown_district = "حي " + shown_district
    return [
        f"L-{n:04d}",
        shown_city,
        shown_district,
        rng.choice(TYPE_WORDS[kind]),
        write_price(rng, price),
        str(area) if rng.random() < 0.8 else f"{area} م²",
        str(rooms) if homes else "",
        str(max(1, rooms - rng.randint(0, 2))) if homes else "",
        str(rng.randint(0, 12)) if kind in ("apartment", "commercial", "office") else "",
        str(rng.randint(0, 35)) if built and rng.random() < 0.9 else "",
        write_bool(rng, rng.random() < 0.7) if built else "",
        write_bool(rng, rng.random() < 0.3) if kind in ("apartment", "office") else "",
        rng.choice(["Sara", "محمد", "Omar", "نورة", "Faisal"]),
        rng.choice(["", "", "corner plot", "قريب من المترو", '=HYPERLINK("x")', "+966 5x"]),
    ]


BAD_ROWS = [
    [
        "L-9001",
        "Riyadh",
        "Al Malqa",
        "villa",
        "2,400,000",
        "-50",
        "5",
        "4",
        "",
        "3",
        "yes",
        "",
        "QA",
        "negative area",
    ],
    [
        "L-9002",
        "الرياض",
        "النرجس",
        "شقة",
        "call for price",
        "140",
        "3",
        "2",
        "2",
        "5",
        "yes",
        "no",
        "QA",
        "price is text",
    ],
    [
        "L-9003",
        "",
        "الياسمين",
        "villa",
        "3,100,000",
        "450",
        "6",
        "5",
        "",
        "2",
        "yes",
        "",
        "QA",
        "no city",
    ],
    [
        "L-9004",
        "Jeddah",
        "Al Rawdah",
        "castle",
        "9,000,000",
        "900",
        "",
        "",
        "",
        "",
        "",
        "",
        "QA",
        "unknown type",
    ],
    [
        "L-9005",
        "Dammam",
        "",
        "apartment",
        "650,000",
        "120",
        "2.5",
        "2",
        "1",
        "4",
        "no",
        "",
        "QA",
        "half bedroom",
    ],
    ["L-9006", "Makkah", "", "land", "0", "600", "", "", "", "", "", "", "QA", "zero price"],
    [
        "L-9007",
        "Riyadh",
        "Hittin",
        "apartment",
        "1,200,000",
        "",
        "3",
        "2",
        "4",
        "1",
        "maybe",
        "",
        "QA",
        "no area",
    ],
    [
        "L-9008",
        "Khobar",
        "",
        "office",
        "2,000,000",
        "220",
        "",
        "",
        "-2",
        "10",
        "yes",
        "yes",
        "QA",
        "floor below 0",
    ],
]


def load_markets() -> dict:
    table = pl.read_csv(SAMPLE / "benchmarks.csv", infer_schema_length=0).with_columns(
        pl.col("median_sqm").cast(pl.Float64)
    )
    averages = pl.read_csv(SAMPLE / "market_averages.csv", infer_schema_length=0)
    cities = {
        r["city_ar"]: r for r in table.filter(pl.col("level") == "city").iter_rows(named=True)
    }
    districts: dict[str, list] = {}
    for row in table.filter(pl.col("level") == "district").iter_rows(named=True):
        districts.setdefault(row["city_ar"], []).append(row)
    city_of_key = {r["city_key"]: r["city_ar"] for r in cities.values()}
    return {
        "cities": cities,
        "districts": districts,
        "averages": {
            (city_of_key.get(r["city_key"] or "", ""), r["type"]): float(r["avg_sqm"])
            for r in averages.filter(pl.col("level") != "district").iter_rows(named=True)
        },
    }


def main() -> None:
    rng = random.Random(SEED)
    markets = load_markets()
    english = english_names()
    rows = [listing(rng, n, markets, english) for n in range(1, ROWS + 1)]
    rows += [list(rows[i]) for i in (3, 10, 42)]  # exact duplicates: scored once
    for position, bad in zip((17, 60, 111, 150, 201, 255, 300, 333), BAD_ROWS, strict=True):
        rows.insert(position, bad)
    with (SAMPLE / "portfolio.csv").open("w", encoding="utf-8-sig", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADERS)
        writer.writerows(rows)
    workbook = xlsxwriter.Workbook(
        SAMPLE / "portfolio.xlsx", {"strings_to_numbers": False, "strings_to_formulas": False}
    )
    sheet = workbook.add_worksheet("Listings")
    for c, header in enumerate(HEADERS):
        sheet.write_string(0, c, header)
    numeric = {HEADERS.index(h) for h in ("المساحة", "Bedrooms", "Bathrooms", "الدور", "Age")}
    for r, row in enumerate(rows, start=1):
        for c, value in enumerate(row):
            if c in numeric and value.isdigit():
                sheet.write_number(r, c, int(value))  # as Excel users have them: real numbers
            elif value:
                sheet.write_string(r, c, value)
    workbook.close()
    print(f"wrote {len(rows)} listings to {SAMPLE / 'portfolio.csv'} and portfolio.xlsx")


if __name__ == "__main__":
    main()
