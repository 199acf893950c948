"""Turn the text cells of mapped columns into the typed request frame (REQUEST_SCHEMA).

Everything is a polars expression over whole columns; nothing runs per row in Python.

A value that cannot be read becomes null; the caller rejects a row whose raw cell is non-empty
but whose typed value is null ("not a number", "unknown value"). What is understood:

Numbers (price, area, bedrooms, bathrooms, floor, age, lat, lng)
    Arabic-Indic (٠-٩) and Persian (۰-۹) digits; ``٫`` (U+066B) or ``.`` as the decimal point;
    thousands grouped by ``,`` ``٬`` (U+066C) ``،`` ``'`` or a space/NBSP, only in groups of three
    (so ``1,5`` and ``1.500.000`` are null rather than a wrong number); a sign (``-50`` stays
    -50.0 for the engine to reject as not positive); an exponent (``1e+20``). Non-finite -> null.
    Units around the number, per field:
      price: SAR, SR, ريال, ر.س, ﷼ before or after; multipliers ``1.5M``/``1.5m``/``mn``/
             ``million``/``مليون`` (x 1,000,000) and ``750k``/``thousand``/``ألف`` (x 1,000);
      area: m2, m², sqm, sq m, square meters, م2, م², م, متر, متر مربع;
      age: years, yrs, سنة, سنوات, عام;
      floor: also ground / G / أرضي / الأرضي = 0;
      lat, lng: a trailing ``°``; no thousands grouping.
Property type
    Synonyms in English and Arabic (see TYPE_SYNONYMS) -> apartment, villa, land, commercial,
    office; compared case-insensitively, trimmed, ignoring Arabic diacritics, tatweel and
    alef/ta marbuta/alef maqsura variants. Decisions: studio and penthouse are apartments;
    house, townhouse and duplex (دوبلكس) are villas; shop, retail and showroom (محل، معرض) are
    commercial. دور (a floor of a villa), عمارة (a building), استراحة and warehouses are left
    alone: an unknown value stays as its trimmed, lower-cased text, for the engine to reject by
    name.
Booleans (parking, furnished)
    yes/no, y/n, true/false, t/f, 1/0, نعم/لا, يوجد/لا يوجد, متوفر/غير متوفر, موجود/غير موجود,
    furnished/unfurnished, مفروش/غير مفروش (case-insensitive); anything else -> null.
Text (city, district)
    Trimmed, inner whitespace collapsed, empty -> null. Names are not mapped to benchmark keys
    here (the engine does that).

Everywhere, bidi marks, zero-width characters and BOMs are removed first. Normalising a frame
that was already normalised (cast back to text) gives the same frame.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

import polars as pl

from pipeline.batch.columns import MAPPED_FIELDS, ColumnMap
from pipeline.engine.schema import REQUEST_SCHEMA

__all__ = ["BOOLEAN_WORDS", "TYPE_SYNONYMS", "normalize"]

V = TypeVar("V")

TYPE_SYNONYMS: dict[str, tuple[str, ...]] = {
    "apartment": (
        "apartment", "apartments", "apt", "flat", "studio", "penthouse",
        "شقة", "شقه", "شقق", "شقة سكنية", "استوديو", "ستوديو", "بنتهاوس",
    ),
    "villa": (
        "villa", "villas", "house", "townhouse", "town house", "duplex",
        "فيلا", "فيلّا", "فله", "فلة", "فلل", "دوبلكس", "فيلا دوبلكس", "تاون هاوس", "بيت", "منزل",
    ),
    "land": ("land", "plot", "lot", "أرض", "ارض", "أراضي", "قطعة أرض", "أرض سكنية", "أرض تجارية"),
    "commercial": (
        "commercial", "shop", "store", "retail", "showroom",
        "تجاري", "تجارية", "محل", "محل تجاري", "محلات", "معرض", "معرض تجاري",
    ),
    "office": ("office", "offices", "مكتب", "مكاتب", "مكتب إداري", "مكتب تجاري"),
}  # fmt: skip

BOOLEAN_WORDS: dict[bool, tuple[str, ...]] = {
    True: (
        "yes", "y", "true", "t", "1", "1.0", "available", "furnished",
        "نعم", "يوجد", "متوفر", "متوفرة", "موجود", "مفروش", "مفروشة", "مؤثث", "مؤثثة",
    ),
    False: (
        "no", "n", "false", "f", "0", "0.0", "none", "not available", "unavailable", "unfurnished",
        "لا", "لا يوجد", "غير متوفر", "غير متوفرة", "غير موجود", "غير مفروش", "غير مفروشة",
        "غير مؤثث",
    ),
}  # fmt: skip

GROUND_FLOOR = ("ground", "ground floor", "g", "gf", "أرضي", "الأرضي", "الدور الأرضي")

_INVISIBLE = "[\u200b-\u200f\u202a-\u202e\u2066-\u2069\u061c\ufeff]"
_ARABIC_MARKS = "[\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0640]"
_DIGITS = [chr(0x0660 + d) for d in range(10)] + [chr(0x06F0 + d) for d in range(10)]
_DIGIT_MAP = ([*_DIGITS, "٫", "−"], [str(d) for d in range(10)] * 2 + [".", "-"])
_LETTERS = (["أ", "إ", "آ", "ٱ", "ة", "ى"], ["ا", "ا", "ا", "ا", "ه", "ي"])

_SEPARATORS = r"[,٬،'\s]"
_NUMBER = r"[+-]?(?:[0-9][0-9.,٬،'\s]*|\.[0-9]+)(?:e[+-]?[0-9]+)?"
_GROUPED = (
    r"^[+-]?(?:[0-9]+|[0-9]{1,3}(?:"
    + _SEPARATORS
    + r"[0-9]{3})+)(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?$"
    r"|^[+-]?\.[0-9]+(?:[eE][+-]?[0-9]+)?$"
)
_PLAIN = r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$"

_CURRENCY = r"sar|s\.?r\.?|riyals?|ريال(?:\s*سعودي)?|ر\.?\s?س\.?|﷼"
_AREA_UNIT = (
    r"square\s+met(?:er|re)s?|sq\.?\s?m\.?|sqm|m2|m²|m"
    r"|متر(?:\s*مربع)?|م2|م²|م\.?"
)
_YEARS = r"years?|yrs?|سنة|سنه|سنوات|عام|أعوام"
_DEGREES = r"°"
_MILLION = ("m", "mn", "million", "مليون", "ملايين")
_THOUSAND = ("k", "thousand", "ألف", "الف", "آلاف")
_MULTIPLIERS = sorted((*_MILLION, *_THOUSAND), key=len, reverse=True)


def normalize(raw: pl.DataFrame, mapping: ColumnMap) -> pl.DataFrame:
    """The request frame (REQUEST_SCHEMA without ``reasoning``) for ``raw``'s rows, in order."""
    exprs = []
    for name in MAPPED_FIELDS:
        header = mapping[name]
        dtype = REQUEST_SCHEMA[name]
        if header is None:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
            continue
        exprs.append(_FIELD_EXPRS[name](pl.col(header).cast(pl.String)).cast(dtype).alias(name))
    if not mapping.mapped:  # only literals: select would give one row, not raw.height
        schema = {name: REQUEST_SCHEMA[name] for name in MAPPED_FIELDS}
        return pl.DataFrame(schema=schema).clear(raw.height)
    return raw.select(exprs)


def _clean(text: pl.Expr) -> pl.Expr:
    """Without invisible marks, trimmed, inner whitespace collapsed to one space."""
    return text.str.replace_all(_INVISIBLE, "").str.replace_all(r"\s+", " ").str.strip_chars(" ")


def _key(text: pl.Expr) -> pl.Expr:
    """What a word is compared by: cleaned, lower-cased, Arabic marks and letter variants gone."""
    return (
        _clean(text)
        .str.to_lowercase()
        .str.replace_all(_ARABIC_MARKS, "")
        .str.replace_many(*_LETTERS)
        .str.replace_many(*_DIGIT_MAP)
    )


def _keys_of(words: Iterable[str]) -> list[str]:
    """The same key for each word, computed by the same expression as for the column."""
    return (
        pl.Series("w", list(words), dtype=pl.String)
        .to_frame()
        .select(_key(pl.col("w")))["w"]
        .to_list()
    )


def _lookup(words: Mapping[V, tuple[str, ...]]) -> dict[str, V]:
    table: dict[str, V] = {}
    for value, synonyms in words.items():
        for key in _keys_of(synonyms):
            table[key] = value
    return table


def _text(cell: pl.Expr) -> pl.Expr:
    cleaned = _clean(cell)
    return pl.when(cleaned != "").then(cleaned)


def _property_type(cell: pl.Expr) -> pl.Expr:
    as_written = _clean(cell).str.to_lowercase()
    keys, values = zip(*_TYPE_TABLE.items(), strict=True)
    known = _key(cell).replace_strict(list(keys), list(values), default=as_written)
    return pl.when(as_written != "").then(known)


def _boolean(cell: pl.Expr) -> pl.Expr:
    keys, values = zip(*_BOOLEAN_TABLE.items(), strict=True)
    return _key(cell).replace_strict(
        list(keys), list(values), default=None, return_dtype=pl.Boolean
    )


def _number(
    cell: pl.Expr, *, units: str | None = None, multipliers: bool = False, grouping: bool = True
) -> pl.Expr:
    text = _clean(cell).str.replace_many(*_DIGIT_MAP)
    unit = rf"(?:(?:{units})\s*)?" if units else ""
    trailing_unit = rf"(?:\s*(?:{units}))?" if units else ""
    scale = rf"(?:\s*(?P<mult>{'|'.join(_MULTIPLIERS)}))?" if multipliers else ""
    pattern = rf"(?i)^{unit}(?P<num>{_NUMBER}){scale}{trailing_unit}$"
    parts = text.str.extract_groups(pattern)
    digits = parts.struct.field("num").str.strip_chars()
    valid = digits.str.contains(_GROUPED if grouping else _PLAIN)
    value = (
        pl.when(valid).then(digits.str.replace_all(_SEPARATORS, "")).cast(pl.Float64, strict=False)
    )
    if multipliers:
        factor = (
            parts.struct.field("mult")
            .str.to_lowercase()
            .replace_strict(
                [*_MILLION, *_THOUSAND],
                [1e6] * len(_MILLION) + [1e3] * len(_THOUSAND),
                default=1.0,
                return_dtype=pl.Float64,
            )
            .fill_null(1.0)
        )
        value = value * factor
    return pl.when(value.is_finite()).then(value)


def _floor(cell: pl.Expr) -> pl.Expr:
    return pl.when(_key(cell).is_in(_GROUND_KEYS)).then(0.0).otherwise(_number(cell))


_TYPE_TABLE = _lookup(TYPE_SYNONYMS)
_BOOLEAN_TABLE = _lookup(BOOLEAN_WORDS)
_GROUND_KEYS = _keys_of(GROUND_FLOOR)

_FIELD_EXPRS = {
    "type": _property_type,
    "price": lambda c: _number(c, units=_CURRENCY, multipliers=True),
    "area": lambda c: _number(c, units=_AREA_UNIT),
    "bedrooms": _number,
    "bathrooms": _number,
    "floor": _floor,
    "age": lambda c: _number(c, units=_YEARS),
    "parking": _boolean,
    "furnished": _boolean,
    "city": _text,
    "district": _text,
    "lat": lambda c: _number(c, units=_DEGREES, grouping=False),
    "lng": lambda c: _number(c, units=_DEGREES, grouping=False),
}
