"""The value rules of a decision request, as polars expressions over the request frame.

One list, used by the single-request path (a one-row frame) and the batch path (the whole
file), so the rules and their messages exist exactly once. The first broken rule of a row, in
the order of the request body, is the one reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from pipeline.engine.schema import FIELD_PATHS, PROPERTY_TYPES

_TYPES = ", ".join(PROPERTY_TYPES)


@dataclass(frozen=True)
class Rule:
    column: str  # column of the request frame
    slug: str  # short machine name of the rule
    message: str  # names the field and the rule it breaks
    broken: pl.Expr  # true where the row breaks the rule (null counts as not broken)

    @property
    def field(self) -> str:
        return FIELD_PATHS[self.column]


def _c(name: str) -> pl.Expr:
    return pl.col(name)


def _required(column: str, hint: str = "") -> Rule:
    path = FIELD_PATHS[column]
    return Rule(column, "required", f"{path} is required{hint}", _c(column).is_null())


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


def _at_most(column: str) -> Rule:
    path, limit = FIELD_PATHS[column], MAXIMUM[column]
    return Rule(column, "maximum", f"{path} must be at most {limit:,.0f}", _c(column) > limit)


def _positive(column: str) -> list[Rule]:
    path = FIELD_PATHS[column]
    return [
        _required(column),
        Rule(column, "finite", f"{path} must be a finite number", ~_c(column).is_finite()),
        Rule(column, "positive", f"{path} must be a positive number (> 0)", _c(column) <= 0),
        _at_most(column),
    ]


def _whole_non_negative(column: str) -> list[Rule]:
    path = FIELD_PATHS[column]
    value = _c(column)
    return [
        Rule(column, "finite", f"{path} must be a finite number", ~value.is_finite()),
        Rule(column, "non_negative", f"{path} must not be negative (>= 0)", value < 0),
        Rule(column, "whole", f"{path} must be a whole number", value.floor() != value),
        _at_most(column),
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
        ),
        Rule(column, "finite", f"{path} must be a finite number", ~value.is_finite()),
        Rule(
            column,
            "range",
            f"{path} must be between -{bound} and {bound}",
            (value < -bound) | (value > bound),
        ),
    ]


RULES: tuple[Rule, ...] = (
    _required("type", f" (one of {_TYPES})"),
    Rule(
        "type",
        "one_of",
        f"property.type must be one of {_TYPES}",
        ~_c("type").is_in(list(PROPERTY_TYPES)),
    ),
    *_positive("price"),
    *_positive("area"),
    Rule(
        "area",
        "minimum",
        f"property.area must be at least {MINIMUM_AREA} m2",
        _c("area") < MINIMUM_AREA,
    ),
    *_whole_non_negative("bedrooms"),
    *_whole_non_negative("bathrooms"),
    *_whole_non_negative("floor"),
    *_whole_non_negative("age"),
    _required("city"),
    Rule(
        "city", "not_blank", "location.city must not be empty", _c("city").str.strip_chars() == ""
    ),
    *_coordinate("lat", "lng", 90),
    *_coordinate("lng", "lat", 180),
    _required("reasoning", " (true or false)"),
)


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
