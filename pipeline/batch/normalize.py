"""Turn the text cells of mapped columns into the typed request frame (REQUEST_SCHEMA).

Everything is a polars expression over whole columns; nothing runs per row in Python.
``normalize_column`` does one field; it takes two shortcuts that do not change the result.

A value that cannot be read becomes null; the caller rejects a row whose raw cell is non-empty
but whose typed value is null ("not a number", "unknown value"). What is understood:

Numbers (price, area, bedrooms, bathrooms, floor, age, lat, lng)
    Arabic-Indic (٠-٩) and Persian (۰-۹) digits; ``٫`` (U+066B) or ``.`` as the decimal point;
    thousands grouped by ``,`` ``٬`` (U+066C) ``،`` ``'`` or a space/NBSP, only in groups of three
    (so ``1,5`` and ``1.500.000`` are null rather than a wrong number; so is a price like
    ``950.000``, whose dot may separate thousands: no price has three decimals); a sign
    (``-50`` stays -50.0 for the engine to reject as not positive); an exponent (``1e+20``).
    Non-finite -> null.
    Units around the number, per field:
      price: SAR, SR, ريال, ر.س, ﷼ before or after; multipliers ``1.5M``/``1.5m``/``mn``/
             ``million``/``مليون`` (x 1,000,000) and ``750k``/``thousand``/``ألف`` (x 1,000);
      area: m2, m², sqm, sq m, square meters, م2, م², متر, متر مربع, and a bare m / م
            (how listings abbreviate square metres); other units (sqft) -> null;
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

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import polars as pl

from pipeline.batch.columns import MAPPED_FIELDS, ColumnMap
from pipeline.engine.names import BIDI_CONTROLS
from pipeline.engine.schema import REQUEST_SCHEMA

__all__ = [
    "BOOLEAN_WORDS",
    "DOTTED_THOUSANDS",
    "DOTTED_THOUSANDS_AREA",
    "TYPE_SYNONYMS",
    "ascii_digits",
    "normalize",
    "normalize_column",
]

V = TypeVar("V")

TYPE_SYNONYMS: dict[str, tuple[str, ...]] = {
    "apartment": (
        "apartment", "apartments", "apt", "flat", "studio", "penthouse",
        "شقة", "شقه", "شقق", "شقة سكنية", "استوديو", "ستوديو", "بنتهاوس",
    ),
    "villa": (
        "villa", "villas", "house", "townhouse", "town house", "duplex",
        "فيلا", "فيلّا", "فيلة", "فله", "فلة", "فلل", "دوبلكس", "دبلكس", "دوبليكس", "فيلا دوبلكس",
        "تاون هاوس", "بيت", "منزل",
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

_INVISIBLE_CHARS = [
    *map(chr, range(0x200B, 0x200E)),  # zero-width space and joiners
    *BIDI_CONTROLS,  # LRM, RLM, the Arabic letter mark, embeddings, overrides, isolates
    "\ufeff",  # BOM / zero-width no-break space
]
_INVISIBLE = "[" + "".join(_INVISIBLE_CHARS) + "]"
_ARABIC_MARKS = "[\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0640]"
_LETTERS = (["أ", "إ", "آ", "ٱ", "ة", "ى"], ["ا", "ا", "ا", "ا", "ه", "ي"])
# Arabic-Indic and Persian digits, the Arabic decimal separator, the minus sign; invisible marks.
_DIGIT_MAP = (
    [
        *map(chr, range(0x0660, 0x066A)),
        *map(chr, range(0x06F0, 0x06FA)),
        "٫",
        "−",
        *_INVISIBLE_CHARS,
    ],
    [*"0123456789", *"0123456789", ".", "-", *[""] * len(_INVISIBLE_CHARS)],
)

# Thousands separators: only between groups of three digits.
_GROUP_CHARS = [",", "٬", "،", "'", " ", "\u00a0", "\u202f", "\u2009"]
_MILLION, _THOUSAND = "\x01", "\x02"  # markers standing for a multiplier word
_UNGROUP = [*_GROUP_CHARS, _MILLION, _THOUSAND]
_EXPONENT = r"(?:[eE][+-]?[0-9]+)?"
_GROUPED = (
    r"^[+-]?(?:[0-9]+|[0-9]{1,3}(?:[" + "".join(_GROUP_CHARS) + r"][0-9]{3})+)(?:\.[0-9]*)?"
    + _EXPONENT + r"\s?[\x01\x02]?$|^[+-]?\.[0-9]+" + _EXPONENT + r"\s?[\x01\x02]?$"
)  # fmt: skip
_PLAIN = r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)" + _EXPONENT + "$"
# One to three digits, a dot, exactly three digits: 950.000 is 950 or 950,000 depending on
# where the file was made. A price never has three decimals, so it is read as neither.
DOTTED_THOUSANDS = r"^[+-]?[1-9][0-9]{0,2}\.[0-9]{3}$"
# An area may have three decimals (a surveyed plot, 92.903 m2 converted from square feet),
# but never as a number prints them ending in 0: "1.250" or "12.500" is text from an export
# whose dot separates thousands (1,250 m2), or 1.25: read as neither. (A number cell or a
# typed column prints 1.25.)
DOTTED_THOUSANDS_AREA = r"^[+-]?[1-9][0-9]{0,2}\.[0-9]{2}0$"
_DOTTED = {"price": DOTTED_THOUSANDS, "area": DOTTED_THOUSANDS_AREA}

# Words removed wherever they occur in a number cell of the field (ASCII case ignored).
_CURRENCY = ("ريال سعودي", "riyals", "riyal", "ر.س.", "ر.س", "ر. س", "ر س", "ريال", "s.r.", "s.r",
             "sar", "sr", "﷼")  # fmt: skip
_AREA_UNITS = ("square meters", "square metres", "square meter", "square metre", "sq. m.", "sq. m",
               "sq.m.", "sq.m", "sq m", "sqm", "m²", "m2", "متر مربع", "مترمربع", "متر", "م²", "م2",
               "م.", "م", "m")  # fmt: skip
_YEARS = ("years", "year", "yrs", "yr", "سنوات", "سنة", "سنه", "أعوام", "عام")
_DEGREES = ("°",)
_SAMPLE = 10_000  # rows looked at to decide whether values repeat enough to compute per value
_MULTIPLIERS = {
    **dict.fromkeys(("million", "ملايين", "مليون", "mn", "m"), _MILLION),
    **dict.fromkeys(("thousand", "آلاف", "ألف", "الف", "k"), _THOUSAND),
}


def ascii_digits(text: pl.Expr) -> pl.Expr:
    """Arabic-Indic and Persian digits, the Arabic decimal separator and the minus sign as
    ASCII, invisible marks removed: how a number cell reads before its rules apply."""
    return text.str.replace_many(*_DIGIT_MAP)


def normalize(raw: pl.DataFrame, mapping: ColumnMap) -> pl.DataFrame:
    """The request frame (REQUEST_SCHEMA without ``reasoning``) for ``raw``'s rows, in order.

    Columns are normalised two at a time (polars releases the GIL; most steps of one column
    use one core): a million rows in two thirds of the time."""

    def field(name: str) -> pl.Series:
        header = mapping[name]
        if header is None:
            return pl.repeat(None, raw.height, dtype=REQUEST_SCHEMA[name], eager=True).alias(name)
        return normalize_column(raw.get_column(header).cast(pl.String), name).alias(name)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return pl.DataFrame(list(pool.map(field, MAPPED_FIELDS)))


def normalize_column(cells: pl.Series, name: str, *, shortcuts: bool = True) -> pl.Series:
    """Request field ``name``'s typed values for a column of text cells.

    Two shortcuts keep this fast on a million rows without changing the result (a property test
    compares with ``shortcuts=False``): a number column first tries polars' plain float parser
    and sends only the cells it cannot read down the full path; and the full path runs once per
    distinct value, mapped back onto the column, when values repeat.
    """
    dtype = REQUEST_SCHEMA[name]
    transform = _FIELD_TRANSFORMS[name]
    if not shortcuts:
        return transform(cells).cast(dtype)
    if dtype != pl.Float64:
        return _per_distinct(cells, transform, dtype)
    values = cells.cast(pl.Float64, strict=False)
    slow = values.is_null() & cells.is_not_null()
    if name in _DOTTED:  # the float parser reads 950.000 as 950: the full path refuses it
        small = (values.abs() < 1000).fill_null(False)  # only such values can read so
        if small.any():
            dotted = cells.str.strip_chars().str.contains(_DOTTED[name]).fill_null(False)
            slow |= small & dotted
    if slow.any():
        typed = _per_distinct(cells.filter(slow), transform, dtype)
        values = values.scatter(slow.arg_true(), typed)
    return _eval(values, lambda v: pl.when(v.is_finite()).then(v))


def _per_distinct(
    cells: pl.Series, transform: Callable[[pl.Series], pl.Series], dtype: pl.DataType
) -> pl.Series:
    """``transform(cells)``, computed once per distinct value when values repeat."""
    sample = cells.head(_SAMPLE)
    if len(cells) <= _SAMPLE or sample.n_unique() * 2 > len(sample):
        return transform(cells).cast(dtype)
    distinct = cells.unique().drop_nulls()
    if distinct.is_empty():  # replace_strict would keep the text dtype of an all-null column
        return pl.repeat(None, len(cells), dtype=dtype, eager=True).alias(cells.name)
    return cells.replace_strict(distinct, transform(distinct).cast(dtype), return_dtype=dtype)


def _eval(cells: pl.Series, expr: Callable[[pl.Expr], pl.Expr]) -> pl.Series:
    """``expr`` over one series (each call materialises, so an input is computed only once)."""
    return cells.to_frame("v").select(expr(pl.col("v")).alias("v")).to_series()


def _clean(text: pl.Expr) -> pl.Expr:
    """Without invisible marks, trimmed, inner whitespace collapsed to one space."""
    return text.str.replace_all(_INVISIBLE, "").str.replace_all(r"\s+", " ").str.strip_chars(" ")


def _key(cleaned: pl.Expr) -> pl.Expr:
    """What a cleaned word is compared by: lower-cased, Arabic marks and letter variants gone."""
    return (
        cleaned.str.to_lowercase()
        .str.replace_all(_ARABIC_MARKS, "")
        .str.replace_many(*_LETTERS)
        .str.replace_many(*_DIGIT_MAP)
    )


def _keys_of(words: Iterable[str]) -> list[str]:
    """The key of each word, computed by the same expressions as for a column."""
    cleaned = _eval(pl.Series(list(words), dtype=pl.String), _clean)
    return _eval(cleaned, _key).to_list()


def _lookup(words: Mapping[V, tuple[str, ...]]) -> dict[str, V]:
    table: dict[str, V] = {}
    for value, synonyms in words.items():
        for key in _keys_of(synonyms):
            table[key] = value
    return table


def _text(cells: pl.Series) -> pl.Series:
    return _eval(_eval(cells, _clean), lambda c: pl.when(c != "").then(c))


def _property_type(cells: pl.Series) -> pl.Series:
    keys, values = zip(*_TYPE_TABLE.items(), strict=True)
    lowered = _eval(_eval(cells, _clean), lambda c: c.str.to_lowercase())

    def known(c: pl.Expr) -> pl.Expr:
        return pl.when(c != "").then(_key(c).replace_strict(keys, values, default=c))

    return _eval(lowered, known)


def _boolean(cells: pl.Series) -> pl.Series:
    keys, values = zip(*_BOOLEAN_TABLE.items(), strict=True)
    return _eval(
        _eval(cells, _clean),
        lambda c: _key(c).replace_strict(keys, values, default=None, return_dtype=pl.Boolean),
    )


def _number(
    cells: pl.Series,
    *,
    units: tuple[str, ...] = (),
    multipliers: bool = False,
    grouping: bool = True,
    ambiguous: str | None = None,
) -> pl.Series:
    """Number cells: literal replacements (Aho-Corasick) and one validating regex; `ambiguous`:
    a regex of numbers read as null because they could mean two things."""
    words = dict.fromkeys(units, "") | (_MULTIPLIERS if multipliers else {})
    ordered = sorted(words, key=len, reverse=True)  # the longest word wins at one position

    def prepared(c: pl.Expr) -> pl.Expr:
        c = c.str.replace_many(*_DIGIT_MAP)
        if ordered:
            replace_with = [words[w] for w in ordered]
            c = c.str.replace_many(
                ordered, replace_with, ascii_case_insensitive=True, leftmost=True
            )
        return c.str.strip_chars()

    t = pl.col("v")
    parts = (
        _eval(cells, prepared)
        .to_frame("v")
        .with_columns(
            valid=t.str.contains(_GROUPED if grouping else _PLAIN)
            & (pl.lit(True) if ambiguous is None else ~t.str.contains(ambiguous)),
            digits=t.str.replace_many(_UNGROUP, [""] * len(_UNGROUP)) if grouping else t,
            factor=pl.when(t.str.ends_with(_MILLION))
            .then(1e6)
            .when(t.str.ends_with(_THOUSAND))
            .then(1e3)
            .otherwise(1.0),
        )
    )
    value = pl.when("valid").then(pl.col("digits")).cast(pl.Float64, strict=False) * pl.col(
        "factor"
    )
    return parts.select(pl.when(value.is_finite()).then(value)).to_series()


def _floor(cells: pl.Series) -> pl.Series:
    ground = _eval(_eval(cells, _clean), lambda c: _key(c).is_in(_GROUND_KEYS))
    return pl.select(pl.when(ground).then(0.0).otherwise(_number(cells))).to_series()


_TYPE_TABLE = _lookup(TYPE_SYNONYMS)
_BOOLEAN_TABLE = _lookup(BOOLEAN_WORDS)
_GROUND_KEYS = _keys_of(GROUND_FLOOR)

_FIELD_TRANSFORMS: dict[str, Callable[[pl.Series], pl.Series]] = {
    "type": _property_type,
    "price": lambda c: _number(c, units=_CURRENCY, multipliers=True, ambiguous=DOTTED_THOUSANDS),
    "area": lambda c: _number(c, units=_AREA_UNITS, ambiguous=DOTTED_THOUSANDS_AREA),
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
