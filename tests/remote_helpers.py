"""Helpers of the remote scoring tests: a fault-injecting proxy and ledger audit queries.

No tests here. The proxy is a raw asyncio HTTP/1.1 server on 127.0.0.1 in front of the real
service: it can answer 429 before forwarding, or forward (so the service charges) and then
answer 500/503 or drop the connection, the failures a client must survive without paying
twice.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

# (idempotency key, attempt number of that key from 1) -> action:
#   "pass", "429" (before forwarding: not charged), "500" / "503" / "drop" (after the charge),
#   "text score" / "fractional score" / "huge score" (the answer's score as text, plus 0.6,
#   or 1e20: after it), "object verdict" (the verdict inside an object: after it)
Decide = Callable[[str, int], str]


@dataclass
class FaultProxy:
    upstream: str
    decide: Decide
    before_forward: Callable[[int], None] | None = None  # called with the request count
    url: str = ""
    attempts: Counter[str] = field(default_factory=Counter)
    actions: Counter[str] = field(default_factory=Counter)
    requests: int = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with httpx.AsyncClient(base_url=self.upstream, timeout=30) as upstream:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    lines = head.decode("latin-1").split("\r\n")
                    method, path, _ = lines[0].split(" ", 2)
                    headers = {}
                    for line in lines[1:]:
                        if ":" in line:
                            name, _, value = line.partition(":")
                            headers[name.strip().lower()] = value.strip()
                    body = await reader.readexactly(int(headers.get("content-length", "0")))
                    if not await self._one(upstream, method, path, headers, body, writer):
                        return
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

    async def _one(
        self,
        upstream: httpx.AsyncClient,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        writer: asyncio.StreamWriter,
    ) -> bool:
        self.requests += 1
        key = headers.get("idempotency-key", "")
        self.attempts[key] += 1
        action = self.decide(key, self.attempts[key])
        self.actions[action] += 1
        if action == "429":
            _write(writer, 429, {"error": "rate_limited", "message": "slow down"}, "1")
            return True
        if self.before_forward is not None:
            await asyncio.to_thread(self.before_forward, self.requests)
        forwarded = {k: v for k, v in headers.items() if k not in ("host", "content-length")}
        path = path[path.find("/v1/") :] if "/v1/" in path else path  # a gateway: /any/v1/...
        answer = await upstream.request(method, path, headers=forwarded, content=body)
        if action == "drop":
            writer.transport.abort()
            return False
        if action in ("500", "503"):
            _write(writer, int(action), {"error": "internal_error", "message": "injected"})
            return True
        if action in ("text score", "fractional score", "huge score", "object verdict"):
            decision = json.loads(answer.content)
            if action == "object verdict":
                decision["verdict"] = {"value": decision["verdict"]}
                _write(writer, answer.status_code, decision)
                return True
            score = decision["score"]
            decision["score"] = {"text score": str(score), "huge score": 1e20}.get(
                action, score + 0.6
            )
            _write(writer, answer.status_code, decision)
            return True
        retry_after = answer.headers.get("retry-after")
        replayed = answer.headers.get("idempotent-replayed")
        _write(writer, answer.status_code, answer.content, retry_after, replayed)
        return True


def _write(
    writer: asyncio.StreamWriter,
    status: int,
    body: Any,
    retry_after: str | None = None,
    replayed: str | None = None,
) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    extra = f"Retry-After: {retry_after}\r\n" if retry_after else ""
    extra += f"Idempotent-Replayed: {replayed}\r\n" if replayed else ""
    writer.write(
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(content)}\r\n{extra}\r\n".encode()
        + content
    )


@contextmanager
def running_proxy(
    upstream: str, decide: Decide, before_forward: Callable[[int], None] | None = None
) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream, decide, before_forward)
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    server: asyncio.Server | None = None

    async def start() -> None:
        nonlocal server
        server = await asyncio.start_server(proxy._handle, "127.0.0.1", 0)
        proxy.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        ready.set()

    def run() -> None:
        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield proxy
    finally:
        assert server is not None

        async def shutdown() -> None:
            server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def charges_by_key(entries: list[dict[str, object]]) -> Counter[str]:
    """Net charges per idempotency key in a ledger's audit trail (refunds cancel charges)."""
    refunded = {e["refund_of"] for e in entries if e["kind"] == "refund"}
    return Counter(
        str(e["idempotency_key"])
        for e in entries
        if e["kind"] == "charge" and e["id"] not in refunded
    )
