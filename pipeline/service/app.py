"""The ASGI app: POST /v1/decisions, the OpenAPI document, JSON bodies for every error."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError as FastApiValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Lifespan

from pipeline.errors import PipelineError
from pipeline.ledger.accounts import AccountStore
from pipeline.ledger.key_text import redact_keys
from pipeline.service.access_log import AccessLog
from pipeline.service.activity import ConnectionActivity
from pipeline.service.errors import ApiError, internal_error, json_response, translate
from pipeline.service.handler import (
    MAX_BODY_BYTES,
    Decider,
    DecisionHandler,
    Incoming,
    refused_key_prefix,
)
from pipeline.service.openapi import (
    DECISION_OPERATION,
    WORKSPACE_OPERATION,
    decision_responses,
    install_openapi,
    workspace_responses,
)
from pipeline.service.rate_limit import RateLimit

BARE_PATH = "/_bench/bare"
WORKSPACE_PATH = "/v1/workspace"
_BARE_BODY = b'{"verdict":"match","score":75.0}'

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}
# On an answer replayed under its Idempotency-Key (nothing charged): the body is the first
# answer's, decisions_used included, so a client that counts its spending needs to know.
_REPLAYED = {"Idempotent-Replayed": "true"}


async def read_body(request: Request, limit: int, length: str) -> bytes | None:
    """The body, or None when it is larger than `limit` bytes (the rest is not read).
    `length`: the Content-Length header ("" without one)."""
    if length.isdigit() and int(length) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


# The headers a decision request is read by (one pass over the request's headers).
_DECISION_HEADERS = frozenset(
    (b"authorization", b"content-type", b"content-encoding", b"content-length", b"idempotency-key")
)


def _decision_headers(request: Request) -> dict[bytes, list[str]]:
    """The values of each of `_DECISION_HEADERS` the request has (names as ASGI gives them,
    lower case)."""
    found: dict[bytes, list[str]] = {}
    for name, value in request.scope["headers"]:
        if name in _DECISION_HEADERS:
            found.setdefault(name, []).append(value.decode("latin-1"))
    return found


def _combined_values(values: list[str]) -> str | None:
    """A header's value; repeated ones combine as one comma-separated value (RFC 9110), so that
    a request cannot have the server pick whichever of two comes first."""
    return values[0] if len(values) == 1 else ", ".join(values) or None


def _authorization(request: Request) -> str | None:
    """The Authorization header (two combined match no key)."""
    return _combined_values(request.headers.getlist("authorization"))


def _connection(request: Request) -> tuple[str, int] | None:
    """The client's (host, port): one keep-alive connection."""
    client = request.scope.get("client")
    return (client[0], client[1]) if client else None


class GetAndHeadRoute(APIRoute):
    """A route that answers HEAD wherever it answers GET (RFC 9110 9.3.2), as Starlette's own
    routes (/openapi.json, /docs) do and FastAPI's do not: the same handler, so the same
    status and headers, and uvicorn sends no body to a HEAD. `Allow` of a 405 names HEAD too.
    The OpenAPI document leaves HEAD out (`openapi.documented`)."""

    def __init__(self, path: str, endpoint: Any, **options: Any) -> None:
        super().__init__(path, endpoint, **options)
        if "GET" in self.methods:
            self.methods.add("HEAD")


def create_app(
    desk: Decider,
    accounts: AccountStore,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    bare_endpoint: bool = False,
    rate_limit: float | None = None,
    lifespan: Lifespan[FastAPI] | None = None,
) -> FastAPI:
    """The service over a decision desk and an account store.

    `bare_endpoint` adds POST /_bench/bare, a fixed JSON answer the benchmark compares against.
    `rate_limit`: decisions requests a second each workspace may send (None: no limit).
    `lifespan`: what to do as the server starts and stops.
    """
    limit = RateLimit(rate_limit) if rate_limit is not None else None
    handler = DecisionHandler(desk, accounts, max_body_bytes=max_body_bytes, rate_limit=limit)
    activity = ConnectionActivity()
    app = FastAPI(
        title="Property decisions",
        version="1.0.0",
        description="Scored verdicts on properties, paid from a workspace's decision balance.",
        redoc_url=None,
        redirect_slashes=False,  # /v1/decisions/ is an unknown path (404), not a redirect
        lifespan=lifespan,
    )
    app.router.route_class = GetAndHeadRoute

    @app.post(
        "/v1/decisions",
        summary="Evaluate a property",
        responses=decision_responses(),
        openapi_extra=DECISION_OPERATION,
        response_class=Response,
    )
    async def create_decision(request: Request) -> Response:
        headers = _decision_headers(request)
        idempotency_keys = headers.get(b"idempotency-key", [])
        incoming = Incoming(
            authorization=_combined_values(headers.get(b"authorization", [])),
            content_type=_combined_values(headers.get(b"content-type", [])),
            body=await read_body(request, max_body_bytes, headers.get(b"content-length", [""])[0]),
            content_encoding=_combined_values(headers.get(b"content-encoding", [])),
            idempotency_key=idempotency_keys[0] if idempotency_keys else None,
            idempotency_key_repeated=len(idempotency_keys) > 1,
            alone=activity.alone(_connection(request)),
        )
        state: dict[str, Any] = request.scope.setdefault("state", {})
        try:
            body = await handler.handle(incoming, state)
        except ApiError as error:
            return error.response()
        return json_response(200, body, _REPLAYED if state.get("replayed") else None)

    @app.get(
        WORKSPACE_PATH,
        summary="The caller's workspace and balance (not charged)",
        description="Not in the spec: lets a batch client name its journal after the workspace "
        "its key spends from, and know the balance before its first request.",
        responses=workspace_responses(),
        openapi_extra=WORKSPACE_OPERATION,
        response_class=Response,
    )
    async def show_workspace(request: Request) -> Response:
        state = request.scope.setdefault("state", {})
        try:
            caller = handler.authenticate(_authorization(request))
            state["key_prefix"] = caller.key_prefix
            balance = desk.balance(caller.workspace)
        except PipelineError as exc:
            state.setdefault("key_prefix", refused_key_prefix(exc))
            return translate(exc).response()
        return json_response(200, {"workspace": caller.workspace, "balance": balance})

    if bare_endpoint:

        @app.post(BARE_PATH, include_in_schema=False)
        async def bare() -> Response:
            return Response(_BARE_BODY, media_type="application/json")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        path = redact_keys(request.url.path)
        message = {
            404: f"no such endpoint: {path}; the API is POST /v1/decisions",
            405: f"{request.method} is not allowed on {path}",
        }.get(exc.status_code, str(exc.detail))
        return ApiError(exc.status_code, code, message, headers=exc.headers).response()

    @app.exception_handler(FastApiValidationError)
    async def validation_error(request: Request, exc: FastApiValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        field = ".".join(str(p) for p in first.get("loc", ())[1:]) or "body"
        message = f"{field}: {first.get('msg', 'invalid')}"
        return ApiError(422, "validation_error", message, extra={"field": field}).response()

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, exc: ClientDisconnect) -> Response:
        # The client left, or its request timed out (answered 408 by the connection), before
        # the body was read: nobody reads this answer, and it is no error of ours to log with a
        # traceback. 499 in the access log, as nginx writes it.
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        return internal_error().response()

    install_openapi(app)
    app.add_middleware(AccessLog)
    return app
