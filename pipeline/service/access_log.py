"""The access log: one line per request with the API key's display prefix, never the key.

uvicorn's own access log is switched off; this middleware writes method, path (without the query
string), status, key prefix (of a revoked key too: which client still calls with it),
`replayed` for an answer replayed under its Idempotency-Key (charged before, not now), and
time. The handler puts what it knows in `scope["state"]`.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeline.ledger.key_text import redact_keys

log = logging.getLogger("pipeline.service.access")

# The path arrives percent-decoded: a %0a in it would start a line of the caller's making; so
# may the method, and the client address a proxy takes from X-Forwarded-For.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _said(text: str) -> str:
    """What the caller sent, as logged: no key whole, control characters escaped (\\n, \\x1b...),
    so one request is one line, and a terminal shows it as sent."""
    return _CONTROL.sub(
        lambda m: m.group().encode("unicode_escape").decode("ascii"), redact_keys(text)
    )


def _host(host: str) -> str:
    """The client's address; in brackets, its double quotes made single, when it is no address
    (uvicorn takes it from X-Forwarded-For when the request comes from 127.0.0.1: a local
    proxy's, or anyone's), so that it cannot pass for a request of its own."""
    try:
        address = ipaddress.ip_address(host)
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
            raise ValueError("a zone, which may hold any text")  # ::1%<anything>
        return str(address)
    except ValueError:
        return "[" + _said(host).replace('"', "'") + "]"


class AccessLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            state: dict[str, Any] = scope.get("state") or {}
            client = scope.get("client") or ("-", 0)
            log.info(
                '%s:%s "%s %s" %d key=%s%s %.1fms',
                _host(str(client[0])),
                client[1],
                _said(scope["method"]),
                _said(scope["path"]),
                status,
                state.get("key_prefix", "-"),
                " replayed" if state.get("replayed") else "",
                (time.perf_counter() - started) * 1000,
            )
