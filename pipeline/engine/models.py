"""Request and response bodies of POST /v1/decisions, exactly as the spec's tables.

The models check structure and JSON types only (a number is a number, a boolean a boolean,
required keys are present). Value rules (positive price, whole counts, coordinate bounds, the
property types) live in `rules.py`, shared with the batch path, so they exist once.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from pipeline.engine.rules import (
    BLANK_LETTERS,
    CONTROL_CHARACTERS,
    MAX_NAME_CHARACTERS,
    MAXIMUM,
    MINIMUM_AREA,
)
from pipeline.engine.schema import PROPERTY_TYPES

Verdict = Literal["match", "partial", "no_match"]
BucketStatus = Literal["pass", "warn", "fail"]

_STRICT = ConfigDict(strict=True, extra="ignore")

# The value rules shown in the OpenAPI document; they are enforced by rules.py, not here, so
# that the batch path and the API give the same messages.
_COUNT = {"minimum": 0, "multipleOf": 1}


def _bounds(field: str, **extra: float) -> dict[str, float]:
    return {**extra, "maximum": MAXIMUM[field]}


class Property(BaseModel):
    model_config = _STRICT

    type: str = Field(json_schema_extra={"enum": list(PROPERTY_TYPES)})
    price: float = Field(
        description="Asking price in SAR; > 0.",
        json_schema_extra=_bounds("price", exclusiveMinimum=0),
    )
    area: float = Field(
        description="Total area in m2; a positive number, at least 0.01.",
        json_schema_extra=_bounds("area", minimum=MINIMUM_AREA),
    )
    bedrooms: float | None = Field(
        default=None, description="Whole, >= 0.", json_schema_extra=_bounds("bedrooms", **_COUNT)
    )
    bathrooms: float | None = Field(
        default=None, description="Whole, >= 0.", json_schema_extra=_bounds("bathrooms", **_COUNT)
    )
    floor: float | None = Field(
        default=None, description="0 = ground.", json_schema_extra=_bounds("floor", **_COUNT)
    )
    age: float | None = Field(
        default=None, description="Years, whole.", json_schema_extra=_bounds("age", **_COUNT)
    )
    parking: bool | None = None
    furnished: bool | None = None


# A letter or a digit, other than tatweel and the Hangul fillers (rules.py: a city naming
# nothing, such as "-" or ".", is refused).
_NOT_BLANK = {
    "minLength": 1,
    "maxLength": MAX_NAME_CHARACTERS,
    "pattern": "(?![" + "".join(f"\\u{ord(c):04x}" for c in BLANK_LETTERS) + "])[\\p{L}\\p{N}]",
    "not": {"pattern": CONTROL_CHARACTERS},
}


# lat and lng: both numbers, or neither (absent or null).
_LAT_LNG_BOTH_OR_NEITHER = [
    {"properties": {"lat": {"type": "null"}, "lng": {"type": "null"}}},
    {
        "properties": {"lat": {"type": "number"}, "lng": {"type": "number"}},
        "required": ["lat", "lng"],
    },
]


class Location(BaseModel):
    model_config = ConfigDict(**_STRICT, json_schema_extra={"anyOf": _LAT_LNG_BOTH_OR_NEITHER})

    city: str = Field(
        description="City in Arabic or English, e.g. Riyadh or الرياض.",
        json_schema_extra=_NOT_BLANK,
    )
    district: str | None = Field(
        default=None,
        description="District; city level if absent.",
        # (a pattern, not "not": a null district is valid, and "not" would apply to it too)
        json_schema_extra={
            "maxLength": MAX_NAME_CHARACTERS,
            "pattern": f"^[^{CONTROL_CHARACTERS[1:-1]}]*$",
        },
    )
    lat: float | None = Field(
        default=None, description="With lng.", json_schema_extra={"minimum": -90, "maximum": 90}
    )
    lng: float | None = Field(
        default=None, description="With lat.", json_schema_extra={"minimum": -180, "maximum": 180}
    )


class DecisionRequest(BaseModel):
    model_config = _STRICT

    property: Property
    location: Location
    reasoning: bool


class Bucket(BaseModel):
    score: float = Field(ge=0, le=100)
    status: BucketStatus


class Breakdown(BaseModel):
    price: Bucket
    location: Bucket
    size: Bucket
    details: Bucket


class Benchmark(BaseModel):
    median_sqm: float
    p25_sqm: float
    p75_sqm: float
    year: int
    transaction_count: int
    yoy_pct: float | None


class Reasoning(BaseModel):
    reasoning_en: str
    reasoning_ar: str
    key_factors: list[str]
    risk_flags: list[str]


class DecisionResponse(BaseModel):
    verdict: Verdict
    score: float = Field(ge=0, le=100)
    breakdown: Breakdown
    price_per_sqm: float
    benchmark: Benchmark | None
    reasoning: Reasoning | None = None
    decisions_used: int = Field(ge=0)
    decisions_remaining: int = Field(ge=0)

    def body(self) -> dict[str, Any]:
        """The JSON body: `reasoning` absent (not null) when it was not asked for."""
        return self.model_dump(
            exclude_none=False, exclude={"reasoning"} if self.reasoning is None else set()
        )


class ErrorBody(BaseModel):
    """The spec's error body (section 7); the errors that add fields have models of their own."""

    error: str = Field(description="A machine-readable code.")
    message: str


class ValidationErrorBody(ErrorBody):
    error: Literal["validation_error"]
    field: str = Field(description="The dotted path of the offending field, such as property.area.")


class InsufficientDecisionsBody(ErrorBody):
    error: Literal["insufficient_decisions"]
    required: int = Field(description="The decisions the request needs.")
    balance: int = Field(description="The decisions the workspace has.")


class IdempotencyKeyReusedBody(ErrorBody):
    """The other 422: the Idempotency-Key was sent before with another body (no extra field)."""

    error: Literal["idempotency_key_reused"]


class UnprocessableBody(RootModel[ValidationErrorBody | IdempotencyKeyReusedBody]):
    """A 422 body: `validation_error` (with `field`) or `idempotency_key_reused`, told apart by
    `error`."""

    root: ValidationErrorBody | IdempotencyKeyReusedBody = Field(discriminator="error")


class WorkspaceBody(BaseModel):
    """GET /v1/workspace (an addition to the spec): which workspace a key spends from."""

    workspace: str
    balance: int
