"""A JSON decision request -> a checked request row (or one-row frame), or a validation error."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, NoReturn

import polars as pl
from pydantic import ValidationError
from pydantic_core import from_json

from pipeline.engine.models import DecisionRequest, Location, Property
from pipeline.engine.rules import first_violation
from pipeline.engine.schema import REQUEST_SCHEMA
from pipeline.errors import InvalidJson, RequestValidationError

_TYPE_WORDS = {
    "float_type": "a number",
    "int_type": "a number",
    "bool_type": "a boolean (true or false)",
    "string_type": "a string",
    "model_type": "an object",
    "dict_type": "an object",
    "model_attributes_type": "an object",
}


_BOM = "\ufeff"


def parse_request(body: bytes | str | dict[str, Any]) -> DecisionRequest:
    """Parse a request body; structural and JSON-type errors become RequestValidationError, a
    body that is not JSON InvalidJson. A leading UTF-8 byte-order mark is ignored (RFC 8259
    allows a parser to)."""
    try:
        if isinstance(body, dict):
            return DecisionRequest.model_validate(body)
        if isinstance(body, bytes) and body.startswith(_BOM.encode()):
            body = body[len(_BOM.encode()) :]
        elif isinstance(body, str) and body.startswith(_BOM):
            body = body[len(_BOM) :]
        _refuse_non_json_numbers(body)
        _refuse_repeated_fields(body)
        return DecisionRequest.model_validate_json(body)
    except ValidationError as exc:
        if not isinstance(body, dict) and _integer_too_long(exc):
            return _parse_long_integers(body)
        raise _translate(exc) from None


def loads_json(raw: bytes | str, **options: Any) -> Any:
    """json.loads with every integer read as a float. Python converts no integer of more than
    4,300 digits (`sys.int_max_str_digits`), and the request has no integer fields: a number
    too large for a float is infinite, which the fields' upper bounds refuse."""
    return json.loads(raw, parse_int=float, **options)


_TOO_LONG = "number out of range"  # pydantic's parser, of an integer over 4,300 digits


def _integer_too_long(exc: ValidationError) -> bool:
    """Whether pydantic's parser refused the body for an integer of more than 4,300 digits, in
    valid JSON (as 1e999999 is, which it reads as infinite)."""
    error = exc.errors(include_url=False, include_input=False)[0]
    return error["type"] == "json_invalid" and _TOO_LONG in error["msg"]


def _parse_long_integers(body: bytes | str) -> DecisionRequest:
    """A body refused for `_integer_too_long` only, read by Python's parser and written again
    with its integers as floats (too large: Infinity), so that pydantic's reads it by its own
    other rules (depth, lone surrogates)."""
    try:
        rewritten = json.dumps(loads_json(body, parse_constant=_refuse_constant))
    except (ValueError, RecursionError) as exc:
        raise _invalid_json(str(exc)) from None
    try:
        return DecisionRequest.model_validate_json(rewritten)
    except ValidationError as exc:
        raise _translate(exc) from None


def _refuse_non_json_numbers(body: bytes | str) -> None:
    """InvalidJson for NaN, Infinity and -Infinity anywhere in the body: pydantic's parser
    reads them (JSON has no such values) and only a number field refuses them, as not finite.
    The full check runs only for a body holding such a word, so as to cost nothing else. (An
    integer too long for the parser stops it first: `_parse_long_integers` checks the rest.)"""
    raw = body.encode() if isinstance(body, str) else body
    if b"NaN" in raw or b"Infinity" in raw:
        try:
            from_json(raw, allow_inf_nan=False)
        except ValueError as exc:
            if _TOO_LONG not in str(exc):
                raise _invalid_json(f"NaN and Infinity are not JSON numbers ({exc})") from None


def _refuse_constant(word: str) -> NoReturn:
    raise _invalid_json(f"NaN and Infinity are not JSON numbers ({word})")


# The fields of each object of the request, by their names there: "price" -> "property.price".
_TOP_FIELDS = {name: name for name in DecisionRequest.model_fields}
_FIELDS_IN = {
    "property": {name: f"property.{name}" for name in Property.model_fields},
    "location": {name: f"location.{name}" for name in Location.model_fields},
}
_QUOTED_NAMES = [
    f'"{name}"'.encode() for fields in (_TOP_FIELDS, *_FIELDS_IN.values()) for name in fields
]


class _Pairs(dict[str, Any]):
    """A JSON object as parsed, with the names it was given more than once."""

    repeated: frozenset[str] = frozenset()


def _object_pairs(pairs: list[tuple[str, Any]]) -> _Pairs:
    parsed = _Pairs(pairs)
    if len(parsed) < len(pairs):
        parsed.repeated = frozenset(name for name, count in Counter(n for n, _ in pairs).items()
                                    if count > 1)  # fmt: skip
    return parsed


def _refuse_repeated_fields(body: bytes | str) -> None:
    """RequestValidationError for a field of the spec given twice in its object (`"reasoning":
    false, "reasoning": true`): JSON parsers keep the last, and which the caller meant is not
    known, though it decides the cost. A name repeated in any other object (an unknown field's,
    `"meta": {"price": 1, "price": 2}`) is ignored with the object. The full check runs only
    for a body that holds a field's name twice, or an escape that could spell one, so as to cost
    nothing else."""
    raw = body.encode() if isinstance(body, str) else body
    if b"\\u" not in raw and all(raw.count(quoted) < 2 for quoted in _QUOTED_NAMES):
        return
    try:
        request = loads_json(raw, object_pairs_hook=_object_pairs)
    except (ValueError, RecursionError):
        return  # not JSON: pydantic's parser says why
    if not isinstance(request, _Pairs):
        return
    objects = [(request, _TOP_FIELDS)]
    objects += [(request.get(name), fields) for name, fields in _FIELDS_IN.items()]
    for parsed, fields in objects:
        repeated = sorted(parsed.repeated & fields.keys()) if isinstance(parsed, _Pairs) else []
        if repeated:
            path = fields[repeated[0]]
            raise RequestValidationError(path, f"{path} is given twice: send it once")


def _translate(exc: ValidationError) -> RequestValidationError:
    error = exc.errors(include_url=False, include_input=False)[0]
    path = ".".join(str(part) for part in error["loc"]) or "body"
    kind = error["type"]
    if kind == "missing":
        return RequestValidationError(path, f"{path} is required")
    if kind in _TYPE_WORDS:
        return RequestValidationError(path, f"{path} must be {_TYPE_WORDS[kind]}")
    if kind == "json_invalid":
        return _invalid_json(error["msg"].removeprefix("Invalid JSON: "))
    return RequestValidationError(path, f"{path}: {error['msg']}")


def _invalid_json(detail: str) -> InvalidJson:
    return InvalidJson(f"the request body is not valid JSON: {detail}")


_FLOATS = frozenset(c for c, dtype in REQUEST_SCHEMA.items() if dtype == pl.Float64)


def request_row(request: DecisionRequest | dict[str, Any]) -> dict[str, Any]:
    """The request (or its `model_dump()`) as one row of the request frame: REQUEST_SCHEMA keys,
    numbers as floats."""
    dumped = request if isinstance(request, dict) else request.model_dump()
    row = {**dumped["property"], **dumped["location"], "reasoning": dumped["reasoning"]}
    return {
        column: float(row[column]) if column in _FLOATS and row[column] is not None else row[column]
        for column in REQUEST_SCHEMA
    }


def request_frame(request: DecisionRequest) -> pl.DataFrame:
    """The one-row request frame of a parsed request."""
    return pl.DataFrame([request_row(request)], schema=REQUEST_SCHEMA)


def checked_row(request: DecisionRequest | dict[str, Any]) -> dict[str, Any]:
    """The request's row (of the request or its `model_dump()`); RequestValidationError for the
    first rule it breaks."""
    row = request_row(request)
    rule = first_violation(row)
    if rule is not None:
        raise RequestValidationError(rule.field, rule.message)
    return row
