"""A JSON decision request -> a validated one-row request frame, or RequestValidationError."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl
from pydantic import ValidationError

from pipeline.engine.batching import MicroBatcher
from pipeline.engine.models import DecisionRequest
from pipeline.engine.rules import violations
from pipeline.engine.schema import REQUEST_SCHEMA
from pipeline.errors import RequestValidationError

_TYPE_WORDS = {
    "float_type": "a number",
    "int_type": "a number",
    "bool_type": "a boolean (true or false)",
    "string_type": "a string",
    "model_type": "an object",
    "dict_type": "an object",
    "model_attributes_type": "an object",
}


def parse_request(body: bytes | str | dict[str, Any]) -> DecisionRequest:
    """Parse a request body; structural and JSON-type errors become RequestValidationError."""
    try:
        if isinstance(body, dict):
            return DecisionRequest.model_validate(body)
        return DecisionRequest.model_validate_json(body)
    except ValidationError as exc:
        raise _translate(exc) from None


def _translate(exc: ValidationError) -> RequestValidationError:
    error = exc.errors(include_url=False, include_input=False)[0]
    path = ".".join(str(part) for part in error["loc"]) or "body"
    kind = error["type"]
    if kind == "missing":
        return RequestValidationError(path, f"{path} is required")
    if kind in _TYPE_WORDS:
        return RequestValidationError(path, f"{path} must be {_TYPE_WORDS[kind]}")
    if kind == "json_invalid":
        return RequestValidationError("body", f"the request body is not valid JSON: {error['msg']}")
    return RequestValidationError(path, f"{path}: {error['msg']}")


def request_frame(request: DecisionRequest) -> pl.DataFrame:
    """The one-row request frame of a parsed request."""
    row = {**request.property.model_dump(), **request.location.model_dump()}
    row["reasoning"] = request.reasoning
    return pl.DataFrame([row], schema=REQUEST_SCHEMA)


def _check_many(requests: Sequence[DecisionRequest]) -> list[RequestValidationError | None]:
    problems = violations(pl.concat([request_frame(r) for r in requests], how="vertical"))
    return [
        None if field is None else RequestValidationError(field, message)
        for field, message in problems.select("error_field", "error_message").iter_rows()
    ]


_CHECKER: MicroBatcher[DecisionRequest, None] = MicroBatcher(_check_many, name="validation")


def check_request(request: DecisionRequest) -> None:
    """Raise RequestValidationError for the first rule `request` breaks. Concurrent callers
    are checked together in one frame (see `batching`)."""
    _CHECKER.submit(request)
