"""POST /v1/decisions without the HTTP plumbing: authenticate, check the body, decide.

`DecisionHandler.handle` runs on the server's event loop: the checks and the key look-up (a
SQLite read) inline, the charge awaited from the ledger's writer thread (see
`DecisionDesk.decide_async`). The order of checks: the key first (nothing is said about a
request whose caller is not known), then the workspace's request rate (when limited), content
type, size, JSON, validation, charge and evaluation. A workspace whose balance is zero gets
402 for every request (spec, section 8), however else it is wrong; an answer it paid for
earlier is still replayed under its Idempotency-Key.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline.decisions import Decision, requested_cost
from pipeline.errors import (
    InsufficientDecisions,
    LedgerUnavailable,
    PipelineError,
)
from pipeline.ledger.accounts import AccountStore, Caller, InvalidApiKey
from pipeline.ledger.base import IDEMPOTENCY_KEY_RULE, valid_idempotency_key
from pipeline.ledger.key_text import looks_like_key, redact_keys
from pipeline.service.errors import ApiError, internal_error, translate
from pipeline.service.rate_limit import RateLimit, retry_after

log = logging.getLogger("pipeline.service")

MAX_BODY_BYTES = 64 * 1024


class Decider(Protocol):
    """What the service needs of `pipeline.decisions.DecisionDesk`."""

    async def decide_async(
        self,
        body: bytes,
        *,
        workspace: str,
        idempotency_key: str | None = None,
        key_prefix: str | None = None,
        commit_inline: bool = False,
    ) -> Decision: ...

    def balance(self, workspace: str) -> int: ...

    def spent(self, workspace: str) -> bool: ...


@dataclass(frozen=True)
class Incoming:
    authorization: str | None
    content_type: str | None
    body: bytes | None  # None: larger than the limit, not read
    content_encoding: str | None = None
    idempotency_key: str | None = None
    idempotency_key_repeated: bool = False  # two Idempotency-Key headers: which one is meant?
    alone: bool = False  # no other client is being served (see pipeline.service.activity)


def bearer_token(authorization: str | None) -> str:
    """The key of an `Authorization: Bearer sk-...` header."""
    if not authorization:
        raise InvalidApiKey("missing API key: send the header Authorization: Bearer sk-...")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise InvalidApiKey("the Authorization header must be: Bearer sk-...")
    if "," in token:
        raise InvalidApiKey("send one API key, in one Authorization header")
    return token.strip()  # its format and checksum: AccountStore.authenticate


def refused_key_prefix(error: Exception) -> str:
    """For the access log: the display prefix of a revoked key (which client still calls with
    it), '-' for any other refusal (unknown, malformed: a key made up to carry an issued
    key's prefix would pass for it, a malformed token may be a password pasted by mistake)."""
    return getattr(error, "key_prefix", None) or "-"


def check_content_type(content_type: str | None, content_encoding: str | None = None) -> None:
    """ApiError 415 for a body that is not JSON, not UTF-8 or compressed, or described by two
    headers (given combined, comma-separated, as RFC 9110 reads them). The spec lists
    Content-Type without marking it required (only Authorization is): a body sent without
    one is read as JSON."""
    if content_encoding is not None and content_encoding.strip().lower() not in ("", "identity"):
        raise ApiError(
            415,
            "unsupported_media_type",
            f"send the request body uncompressed: Content-Encoding {_quoted(content_encoding)}"
            " is not accepted",
        )
    if not (content_type or "").strip():
        return
    if "," in content_type:  # two headers, combined: which one describes the body?
        raise ApiError(
            415,
            "unsupported_media_type",
            "send one Content-Type header: application/json",
        )
    media_type, _, parameters = content_type.partition(";")
    if media_type.strip().lower() != "application/json":
        raise ApiError(
            415,
            "unsupported_media_type",
            "send the request body as JSON with the header Content-Type: application/json",
        )
    charset = _parameter(parameters, "charset")
    if charset is not None and charset.lower() not in ("utf-8", "utf8"):
        raise ApiError(
            415,
            "unsupported_media_type",
            f"send the request body as UTF-8 JSON (charset={_quoted(charset)} is not accepted)",
        )


def _quoted(value: str) -> str:
    """A header value said back in an error: quoted, short, and no API key in it."""
    value = redact_keys(value.strip())
    return repr(value if len(value) <= 40 else value[:40] + "...")


def _parameter(parameters: str, name: str) -> str | None:
    """A media type parameter's value (`charset=utf-8`), unquoted; None when not given."""
    for parameter in parameters.split(";"):
        key, _, value = parameter.partition("=")
        if key.strip().lower() == name:
            return value.strip().strip('"')
    return None


def check_idempotency_key(value: str | None, *, repeated: bool = False) -> str | None:
    if repeated:
        raise ApiError(
            400,
            "invalid_idempotency_key",
            "send one Idempotency-Key header: with two, the request could be paid under either",
        )
    if value is None:
        return None
    if not valid_idempotency_key(value):
        raise ApiError(
            400,
            "invalid_idempotency_key",
            f"the Idempotency-Key header must be {IDEMPOTENCY_KEY_RULE}",
        )
    if looks_like_key(value):  # it would be stored, and listed in the ledger's entries
        raise ApiError(
            400,
            "invalid_idempotency_key",
            "the Idempotency-Key header holds an API key: send the key in Authorization only, "
            "and revoke this one (`decisions key revoke`), as it may have been logged on the way",
        )
    return value


def check_rate(limit: RateLimit, workspace: str) -> None:
    """ApiError 429 when `workspace` has sent its requests of this second."""
    wait = limit.wait(workspace)
    if wait > 0:
        after = retry_after(wait)
        raise ApiError(
            429,
            "rate_limited",
            f"this workspace may send {limit.per_second:g} requests a second; "
            f"nothing was charged: send it again in {after} s",
            headers={"Retry-After": after},
        )


class DecisionHandler:
    def __init__(
        self,
        desk: Decider,
        accounts: AccountStore,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        rate_limit: RateLimit | None = None,
    ) -> None:
        self.desk = desk
        self.accounts = accounts
        self.max_body_bytes = max_body_bytes
        self.rate_limit = rate_limit

    def authenticate(self, authorization: str | None) -> Caller:
        return self.accounts.authenticate(bearer_token(authorization))

    async def handle(
        self, incoming: Incoming, seen: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The 200 body, or ApiError with the status and body to send.

        `seen["key_prefix"]` is set to the caller's display prefix, for the access log, and
        `seen["replayed"]` to True for an answer replayed under its idempotency key."""
        caller: Caller | None = None
        try:
            caller = self.authenticate(incoming.authorization)
            if seen is not None:
                seen["key_prefix"] = caller.key_prefix
            if self.rate_limit is not None:
                check_rate(self.rate_limit, caller.workspace)
            check_content_type(incoming.content_type, incoming.content_encoding)
            if incoming.body is None:
                raise ApiError(
                    413,
                    "payload_too_large",
                    f"the request body is larger than {self.max_body_bytes} bytes",
                )
            idempotency_key = check_idempotency_key(
                incoming.idempotency_key, repeated=incoming.idempotency_key_repeated
            )
            decision = await self._decide(incoming.body, caller, idempotency_key, incoming.alone)
            if seen is not None and decision.replayed:
                seen["replayed"] = True
            return decision.body
        except ApiError as refused:  # (an invalid body at zero: the desk answers 402 itself)
            paced = refused.status == 429  # told when to return
            if caller is not None and not paced and self.desk.spent(caller.workspace):
                raise translate(InsufficientDecisions(requested_cost(incoming.body), 0)) from None
            raise
        except PipelineError as exc:
            if caller is None and seen is not None:
                seen["key_prefix"] = refused_key_prefix(exc)
            error = translate(exc)
            prefix = caller.key_prefix if caller else "-"
            if error.status == 500:
                log.error("unexpected %s for key %s", type(exc).__name__, prefix)
            elif isinstance(exc, LedgerUnavailable):  # the operator's to fix: one line each
                log.error("ledger unavailable, key %s: %s", prefix, exc)
            raise error from None

    async def _decide(
        self, body: bytes, caller: Caller, idempotency_key: str | None, alone: bool
    ) -> Decision:
        try:
            return await self.desk.decide_async(
                body,
                workspace=caller.workspace,
                idempotency_key=idempotency_key,
                key_prefix=caller.key_prefix,
                commit_inline=alone,
            )
        except PipelineError:
            raise
        except Exception:
            # DecisionDesk has refunded the charge. The traceback names engine code only: the
            # key never reaches the engine.
            log.exception("decision failed for key %s", caller.key_prefix)
            raise internal_error() from None
