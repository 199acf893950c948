"""HTTP errors of the service: our exception tree -> status code and the spec's error body.

    PipelineError subclass        status  error
    InvalidApiKey                 401     invalid_api_key (+ WWW-Authenticate: Bearer)
    InvalidJson                   400     invalid_json
    RequestValidationError        422     validation_error (+ field)
    InsufficientDecisions         402     insufficient_decisions (+ required, balance)
    IdempotencyKeyReused          422     idempotency_key_reused
    RequestInProgress             409     request_in_progress (+ Retry-After)
    LedgerBusy                    503     ledger_busy (+ Retry-After): locked by another process
    LedgerUnavailable             503     ledger_unavailable (+ Retry-After): a full disk, a file
                                          made read-only, moved or deleted
    anything else                 500     internal_error (no detail, no traceback)

Errors found by the HTTP layer itself (400 invalid_idempotency_key,
413 payload_too_large, 415 unsupported_media_type, 404 not_found, 405 method_not_allowed) are
raised as ApiError directly.
"""

from __future__ import annotations

from pydantic_core import to_json
from starlette.responses import Response

from pipeline.errors import (
    IdempotencyKeyReused,
    InsufficientDecisions,
    InvalidJson,
    LedgerBusy,
    LedgerUnavailable,
    PipelineError,
    RequestInProgress,
    RequestValidationError,
)
from pipeline.ledger.accounts import InvalidApiKey

INTERNAL_MESSAGE = "the server failed to evaluate this request; nothing was charged"


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        extra: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        self.extra = extra or {}

    def body(self) -> dict[str, object]:
        return {"error": self.code, "message": self.message, **self.extra}

    def response(self) -> Response:
        return json_response(self.status, self.body(), self.headers)


_STATUS: tuple[tuple[type[PipelineError], int], ...] = (
    (InvalidApiKey, 401),
    (InvalidJson, 400),
    (RequestValidationError, 422),
    (InsufficientDecisions, 402),
    (IdempotencyKeyReused, 422),
    (RequestInProgress, 409),
    (LedgerBusy, 503),
    (LedgerUnavailable, 503),
)

_HEADERS: dict[type[PipelineError], dict[str, str]] = {
    InvalidApiKey: {"WWW-Authenticate": "Bearer"},
    RequestInProgress: {"Retry-After": "1"},
    LedgerBusy: {"Retry-After": "5"},
    LedgerUnavailable: {"Retry-After": "30"},
}


def translate(exc: PipelineError) -> ApiError:
    """The HTTP form of one of our errors; an unexpected one becomes a bare 500."""
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            body = exc.body()  # type: ignore[attr-defined]
            extra = {k: v for k, v in body.items() if k not in ("error", "message")}
            headers = _HEADERS.get(kind)
            return ApiError(status, body["error"], body["message"], headers=headers, extra=extra)
    return internal_error()


def internal_error() -> ApiError:
    return ApiError(500, "internal_error", INTERNAL_MESSAGE)


def json_response(status: int, body: object, headers: dict[str, str] | None = None) -> Response:
    # pydantic's serializer, compact UTF-8 as json.dumps(ensure_ascii=False) gives, in 3 us
    # instead of 25 for a decision's body.
    content = to_json(body)
    return Response(content, status_code=status, headers=headers, media_type="application/json")
