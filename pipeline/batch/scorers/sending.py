"""One POST of a decision request, and its answer as the remote scorer reads it.

The scorer sends tens of thousands of identical-looking requests; on the keep-alive transport it
writes each one as bytes from a head prepared once, and reads the answer as an `Answer`, not
as httpx.Request and httpx.Response objects (building those cost about 0.1 ms of CPU per
request, a quarter of the client's work, measured with bench/bench_remote.py). Any other httpx
transport (httpx.MockTransport in tests, httpx's own pool) is sent an httpx.Request as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from pipeline.batch.scorers.transport import KeepAliveTransport, origin_of


@dataclass(frozen=True, slots=True)
class Answer:
    status_code: int
    headers: Mapping[str, str]  # lower-case names
    content: bytes
    sends: int = 1  # more than 1: the transport sent the request again (see RawAnswer)


class Sender(Protocol):
    async def __call__(self, content: bytes, idempotency_key: str) -> Answer: ...


class HttpxSender:
    """Through any httpx transport's `handle_async_request`."""

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport,
        url: httpx.URL,
        headers: dict[str, str],
        timeout: httpx.Timeout,
    ) -> None:
        self._transport = transport
        self._url = url
        self._headers = headers
        self._extensions = {"timeout": timeout.as_dict()}

    async def __call__(self, content: bytes, idempotency_key: str) -> Answer:
        request = httpx.Request(
            "POST",
            self._url,
            headers={**self._headers, "idempotency-key": idempotency_key},
            content=content,
            extensions=self._extensions,
        )
        response = await self._transport.handle_async_request(request)
        await response.aread()
        sends = response.extensions.get("sends", 1)
        return Answer(response.status_code, response.headers, response.content, sends)


class DirectSender:
    """Through `KeepAliveTransport.send`, the request written as bytes: the same request line
    and headers httpx would write (Host, the given headers, Idempotency-Key, Content-Length)."""

    def __init__(
        self,
        transport: KeepAliveTransport,
        url: httpx.URL,
        headers: dict[str, str],
        timeout: httpx.Timeout,
    ) -> None:
        self._transport = transport
        self._origin = origin_of(url)
        lines = [b"POST %s HTTP/1.1" % url.raw_path, b"Host: %s" % url.netloc]
        lines += [f"{name}: {value}".encode() for name, value in headers.items()]
        self._head = b"\r\n".join(lines) + b"\r\nidempotency-key: "
        self._timeouts: dict[str, Any] = timeout.as_dict()

    async def __call__(self, content: bytes, idempotency_key: str) -> Answer:
        if not idempotency_key.isprintable() or not idempotency_key.isascii():
            raise ValueError("an idempotency key must be printable ASCII")
        message = b"%s%s\r\nContent-Length: %d\r\n\r\n%s" % (
            self._head,
            idempotency_key.encode(),
            len(content),
            content,
        )
        answer = await self._transport.send(
            self._origin, message, method="POST", replayable=True, timeouts=self._timeouts
        )
        headers = {n.decode("latin-1").lower(): v.decode("latin-1") for n, v in answer.headers}
        return Answer(answer.status, headers, answer.body, answer.sends)


def build_sender(
    transport: httpx.AsyncBaseTransport,
    url: httpx.URL,
    headers: dict[str, str],
    timeout: httpx.Timeout,
) -> Sender:
    kind = DirectSender if isinstance(transport, KeepAliveTransport) else HttpxSender
    return kind(transport, url, headers, timeout)  # type: ignore[arg-type]
