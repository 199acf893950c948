"""The value rules of a decision request: one list, each rule in two renderings side by side.

`broken` is a polars expression over the request frame (the batch path: a whole file at once);
`test` the same rule over one request row as a dict (the service path: polars' fixed cost of a
few milliseconds per call would dwarf the check of one row). Both come from the one definition
below, and tests/test_rules.py checks they agree on generated rows. The first broken rule of a
row, in the order of the request body, is the one reported.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from pipeline.engine.schema import FIELD_PATHS, PROPERTY_TYPES

_TYPES = ", ".join(PROPERTY_TYPES)


@dataclass(frozen=True)
class Rule:
    column: str  # column of the request frame
    slug: str  # short machine name of the rule
    message: str  # names the field and the rule it breaks
    broken: pl.Expr  # true where the row breaks the rule (null counts as not broken)
    test: Callable[[Mapping[str, Any]], bool]  # the same, for one row: true if it breaks it

    @property
    def field(self) -> str:
        return FIELD_PATHS[self.column]


def _c(name: str) -> pl.Expr:
    return pl.col(name)


def _required(column: str, hint: str = "") -> Rule:
    path = FIELD_PATHS[column]
    return Rule(
        column,
        "required",
        f"{path} is required{hint}",
        _c(column).is_null(),
        lambda row: row[column] is None,
    )


def _number_rule(
    column: str, slug: str, message: str, broken: pl.Expr, test: Callable[[float], bool]
) -> Rule:
    """A rule on a number column; a missing value breaks none of these (see `_required`)."""
    return Rule(
        column, slug, message, broken, lambda row: row[column] is not None and test(row[column])
    )


# Upper bounds far beyond any real listing; they keep price per m2 and every score finite.
MAXIMUM: dict[str, float] = {
    "price": 100_000_000_000,  # SAR
    "area": 100_000_000,  # m2
    "bedrooms": 1000,
    "bathrooms": 1000,
    "floor": 300,
    "age": 1000,
}
MINIMUM_AREA = 0.01  # m2
# The longest district name in the official records has 50 characters. A longer name is not one
# (a note, a pasted paragraph); refusing it keeps the name matcher's work per request small.
MAX_NAME_CHARACTERS = 200
# A name has a letter or a digit: spaces, zero-width and bidi marks, a BOM, tatweel and the
# Hangul fillers (letters to Unicode, a stretch of line or a blank to a reader) or a lone
# diacritic name nothing.
_LETTER_OR_DIGIT = r"[\p{L}\p{N}&&[^\x{0640}\x{115F}\x{1160}\x{3164}\x{FFA0}]]"
BLANK_LETTERS = "\u0640\u115f\u1160\u3164\uffa0"  # tatweel, the Hangul fillers


def _at_most(column: str) -> Rule:
    path, limit = FIELD_PATHS[column], MAXIMUM[column]
    return _number_rule(
        column, "maximum", f"{path} must be at most {limit:,.0f}",
        (_c(column) > limit) & _c(column).is_not_nan(),  # polars sorts NaN above everything
        lambda v: v > limit,
    )  # fmt: skip


def _finite(column: str) -> Rule:
    path = FIELD_PATHS[column]
    return _number_rule(
        column, "finite", f"{path} must be a finite number", ~_c(column).is_finite(),
        lambda v: not math.isfinite(v),
    )  # fmt: skip


def _positive(column: str) -> list[Rule]:
    path = FIELD_PATHS[column]
    # 1e400 (infinite as a float) is said to be too large and -1e400 not positive: only NaN
    # is left for "finite"
    return [
        _required(column),
        _at_most(column),
        _number_rule(
            column,
            "positive",
            f"{path} must be a positive number (> 0)",
            _c(column) <= 0,
            lambda v: v <= 0,
        ),
        _finite(column),
    ]


def _whole_non_negative(column: str) -> list[Rule]:
    path = FIELD_PATHS[column]
    value = _c(column)
    return [
        _at_most(column),
        _number_rule(
            column,
            "non_negative",
            f"{path} must not be negative (>= 0)",
            value < 0,
            lambda v: v < 0,
        ),
        _finite(column),
        _number_rule(
            column,
            "whole",
            f"{path} must be a whole number",
            value.floor() != value,
            lambda v: math.floor(v) != v,
        ),
    ]


def _coordinate(column: str, other: str, bound: int) -> list[Rule]:
    path, other_path = FIELD_PATHS[column], FIELD_PATHS[other]
    value = _c(column)
    return [
        Rule(
            column,
            "pair",
            f"{path} is required when {other_path} is given (send both or neither)",
            value.is_null() & _c(other).is_not_null(),
            lambda row: row[column] is None and row[other] is not None,
        ),
        _finite(column),
        _number_rule(
            column,
            "range",
            f"{path} must be between -{bound} and {bound}",
            (value < -bound) | (value > bound),
            lambda v: v < -bound or v > bound,
        ),
    ]


def _not_too_long(column: str) -> Rule:
    return Rule(
        column,
        "max_length",
        f"{FIELD_PATHS[column]} must be at most {MAX_NAME_CHARACTERS} characters",
        _c(column).str.len_chars() > MAX_NAME_CHARACTERS,
        lambda row: row[column] is not None and len(row[column]) > MAX_NAME_CHARACTERS,
    )


# Control characters other than white space (which names may hold, and the matcher folds: tab,
# line breaks, the separators 0x1c-0x1f, NEL): NUL, escape and the rest name nothing, and said
# back in an explanation they would garble it. Written as escapes, which polars, Python and the
# OpenAPI document's regular expressions all read.
CONTROL_CHARACTERS = r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]"
_CONTROL_RE = re.compile(CONTROL_CHARACTERS)


def _no_control_characters(column: str) -> Rule:
    return Rule(
        column,
        "no_control_characters",
        f"{FIELD_PATHS[column]} must not contain control characters (such as NUL)",
        _c(column).str.contains(CONTROL_CHARACTERS),
        lambda row: row[column] is not None and _CONTROL_RE.search(row[column]) is not None,
    )


RULES: tuple[Rule, ...] = (
    _required("type", f" (one of {_TYPES})"),
    Rule(
        "type",
        "one_of",
        f"property.type must be one of {_TYPES}",
        ~_c("type").is_in(list(PROPERTY_TYPES)),
        lambda row: row["type"] is not None and row["type"] not in PROPERTY_TYPES,
    ),
    *_positive("price"),
    *_positive("area"),
    _number_rule(
        "area",
        "minimum",
        f"property.area must be at least {MINIMUM_AREA} m2",
        _c("area") < MINIMUM_AREA,
        lambda v: v < MINIMUM_AREA,
    ),
    *_whole_non_negative("bedrooms"),
    *_whole_non_negative("bathrooms"),
    *_whole_non_negative("floor"),
    *_whole_non_negative("age"),
    _required("city"),
    Rule(
        "city",
        "not_blank",
        "location.city must name a place: it has no letter or digit",
        ~_c("city").str.contains(_LETTER_OR_DIGIT),
        lambda row: row["city"] is not None and not _names_something(row["city"]),
    ),
    _not_too_long("city"),
    _not_too_long("district"),
    _no_control_characters("city"),
    _no_control_characters("district"),
    *_coordinate("lat", "lng", 90),
    *_coordinate("lng", "lat", 180),
    _required("reasoning", " (true or false)"),
)


def _names_something(text: str) -> bool:
    """`_LETTER_OR_DIGIT` for one value: a letter or a digit other than tatweel."""
    return any(unicodedata.category(ch)[0] in "LN" and ch not in BLANK_LETTERS for ch in text)


def _first_broken_rule() -> pl.Expr:
    return pl.coalesce(
        [
            pl.when(rule.broken.fill_null(False)).then(pl.lit(i, pl.Int32))
            for i, rule in enumerate(RULES)
        ]
    )


# Built once: assembling the expression costs about as much as evaluating it on one row.
FIRST_BROKEN_RULE: pl.Expr = _first_broken_rule().alias("rule")
_FIELDS = pl.Series("error_field", [r.field for r in RULES])
_COLUMNS = pl.Series("error_column", [r.column for r in RULES])
_MESSAGES = pl.Series("error_message", [r.message for r in RULES])


def violations(requests: pl.DataFrame) -> pl.DataFrame:
    """Per row: `error_field` (dotted path), `error_column`, `error_message`; nulls when valid."""
    index = requests.select(FIRST_BROKEN_RULE)["rule"]
    return pl.DataFrame([_FIELDS.gather(index), _COLUMNS.gather(index), _MESSAGES.gather(index)])


def first_violation(row: Mapping[str, Any]) -> Rule | None:
    """The first rule one request row (REQUEST_SCHEMA keys) breaks, or None."""
    for rule in RULES:
        if rule.test(row):
            return rule
    return None
