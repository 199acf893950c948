"""The OpenAPI document: the spec's request, response and error bodies and every status code."""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.routing import BaseRoute

from pipeline.engine.models import (
    DecisionRequest,
    DecisionResponse,
    ErrorBody,
    InsufficientDecisionsBody,
    UnprocessableBody,
    WorkspaceBody,
)

_ERRORS: dict[int, str] = {
    400: "`invalid_json`: the body is not JSON; `invalid_idempotency_key`: empty, too long, "
    "sent twice, or holding an API key; `bad_request`: the bytes sent are not HTTP/1.1 (the "
    "connection is closed).",
    401: "`invalid_api_key`: the key is missing, malformed, unknown or revoked.",
    402: "`insufficient_decisions`: the balance is lower than the cost, or is zero (`required`, "
    "`balance`).",
    408: "`request_timeout`: the request head did not arrive within 10 s, or the whole request "
    "within 30 s (as the server is configured by default); the connection is closed.",
    409: "`request_in_progress`: a request with this Idempotency-Key is still running.",
    413: "`payload_too_large`: the body is larger than the limit.",
    415: "`unsupported_media_type`: the body is not sent as application/json (UTF-8, "
    "uncompressed, one Content-Type header); a body sent without Content-Type is read as JSON.",
    422: "`validation_error` (`field`, dotted path: a value breaks a rule, or a field is given "
    "twice) or `idempotency_key_reused`.",
    429: "`rate_limited`: the workspace sent more requests a second than the server allows "
    "(`decisions serve --rate-limit`); nothing charged, send it again after `Retry-After`.",
    431: "`request_header_fields_too_large`: the request head is over 16 KiB; the connection "
    "is closed.",
    500: "`internal_error`: the evaluation failed; nothing charged (a charge made is refunded).",
    501: "`not_implemented`: a Transfer-Encoding other than chunked; the connection is closed.",
    503: "`ledger_busy`: the ledger stayed locked by another process (a backup, a long batch) "
    "for a minute; send it again after `Retry-After` (with its Idempotency-Key). "
    "`ledger_unavailable`: the ledger cannot be written (a full disk, a file made read-only, "
    "moved or deleted); nothing charged, unless the message says a charge stands (a request "
    "that failed after its charge and whose refund could not be written). "
    "`too_many_connections`: the server has as many connections open as it allows.",
}

# The statuses whose errors add fields (spec, section 7) have a body schema of their own; every
# other status has the bare ErrorBody.
_BODIES: dict[int, type[BaseModel]] = {
    402: InsufficientDecisionsBody,
    422: UnprocessableBody,
}

_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}},
    409: {"Retry-After": {"schema": {"type": "string"}, "description": "seconds"}},
    429: {"Retry-After": {"schema": {"type": "string"}, "description": "seconds"}},
    503: {"Retry-After": {"schema": {"type": "string"}, "description": "seconds"}},
}


def decision_responses() -> dict[int | str, dict[str, Any]]:
    responses: dict[int | str, dict[str, Any]] = {
        200: {
            "model": DecisionResponse,
            "description": "The decision, charged (or replayed under its Idempotency-Key).",
            "headers": {
                "Idempotent-Replayed": {
                    "description": "`true` when this is the stored answer of an earlier request "
                    "with the same Idempotency-Key: nothing was charged for it.",
                    "schema": {"type": "string", "enum": ["true"]},
                }
            },
        }
    }
    for status, description in _ERRORS.items():
        responses[status] = {"model": _BODIES.get(status, ErrorBody), "description": description}
        if status in _HEADERS:
            responses[status]["headers"] = _HEADERS[status]
    return responses


def workspace_responses() -> dict[int | str, dict[str, Any]]:
    return {
        200: {"model": WorkspaceBody, "description": "The key's workspace and its balance."},
        401: {"model": ErrorBody, "description": _ERRORS[401], "headers": _HEADERS[401]},
    }


WORKSPACE_OPERATION: dict[str, Any] = {"security": [{"bearer": []}]}

DECISION_OPERATION: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/DecisionRequest"}}
        },
    },
    "parameters": [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "description": "Replays the first response without a new charge; kept at least 24 h.",
            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
        }
    ],
    "security": [{"bearer": []}],
}


def documented(route: BaseRoute) -> BaseRoute:
    """The route as the document describes it: without HEAD, which is its GET without the body
    (RFC 9110 9.3.2), not an operation of its own (FastAPI would give it the GET's operationId
    too)."""
    if not isinstance(route, APIRoute) or "HEAD" not in route.methods:
        return route
    described = copy.copy(route)
    described.methods = route.methods - {"HEAD"}
    return described


def install_openapi(app: FastAPI) -> None:
    """Add the request model and the bearer scheme to FastAPI's generated document."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=[documented(route) for route in app.routes],
            )
            components = document.setdefault("components", {})
            schemas = components.setdefault("schemas", {})
            request = DecisionRequest.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(request.pop("$defs", {}))
            schemas["DecisionRequest"] = request
            # `reasoning` is left out of a body that did not ask for it, never sent as null.
            reasoning = schemas["DecisionResponse"]["properties"]["reasoning"]
            reasoning.pop("anyOf", None)
            reasoning["$ref"] = "#/components/schemas/Reasoning"
            components["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer", "description": "sk-... API key"}
            }
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
