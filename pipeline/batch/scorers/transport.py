"""A lean HTTP/1.1 transport for httpx: keep-alive connections on asyncio streams.

The remote scorer sends tens of thousands of small POSTs, as many in flight as --concurrency,
and on two cores the client's CPU per request decides how close it gets to the limit
(concurrency / latency). Measured against a server answering in 50 ms (bench/bench_remote.py):
httpx's own pool spends milliseconds per request at concurrency 32 and more; aiohttp's pool
under httpx about 0.8-1 ms; this transport, called without AsyncClient's layers (auth,
redirects, cookies and hooks, none of which the scorer uses), about 0.25 ms.

What it does: one connection per request in flight, reused while the server keeps it open;
bodies framed by Content-Length or chunked (or read to the end when the server closes);
https through the standard library's TLS with httpx's default certificate store; timeouts
from the request's `timeout` extension (connect, read, write). What it does not: redirects
(never followed: a redirect is the scorer's business), proxies, HTTP/2, streamed request
bodies. Every failure is raised as the httpx exception httpx's own transport would raise
(ConnectError, ReadTimeout, RemoteProtocolError...), so retry rules read the same. A request
with an Idempotency-Key that fails on a reused connection before any byte of the answer
arrived is sent once more on a new one (the server may have closed the idle connection): the
key makes a second arrival a replay, not a second charge.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, NamedTuple

import certifi
import httpx

_DEFAULT_PORTS = {"http": 80, "https": 443}
_NO_BODY_STATUSES = frozenset({204, 304})
_MAX_LINE = 64 * 1024
_MAX_HEADERS = 200

Origin = tuple[str, str, int]


class RawAnswer(NamedTuple):
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    sends: int = 1  # 2: sent again on a fresh connection (an answer lost, perhaps after a charge)


class _Connection:
    __slots__ = ("reader", "used", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.used = False  # has answered a request before: may have been closed while idle

    def close(self) -> None:
        self.writer.close()


class _NothingReceived(Exception):
    """The connection failed before any byte of the answer: safe to send again."""

    def __init__(self, error: httpx.TransportError) -> None:
        self.error = error


def _transport_error(
    exc: BaseException,
    timeout_error: type[httpx.TransportError],
    error: type[httpx.TransportError],
) -> httpx.TransportError:
    """The httpx exception for what went wrong on a connection (raise it `from exc`)."""
    if isinstance(exc, httpx.TransportError):
        return exc
    if isinstance(exc, TimeoutError):
        return timeout_error(str(exc) or "timed out")
    if isinstance(exc, asyncio.IncompleteReadError):
        return httpx.RemoteProtocolError("the server closed the connection mid-answer")
    if isinstance(exc, OSError | ConnectionError | EOFError):
        return error(str(exc) or type(exc).__name__)
    if isinstance(exc, ValueError | asyncio.LimitOverrunError):  # over the stream's limit
        return httpx.RemoteProtocolError(f"an answer's head or line is too long ({exc})")
    raise exc


def origin_of(url: httpx.URL) -> Origin:
    """(scheme, host, port) of an http or https URL."""
    if url.scheme not in _DEFAULT_PORTS:
        raise httpx.UnsupportedProtocol(f"{url.scheme!r} is not http or https")
    return url.scheme, url.host, url.port or _DEFAULT_PORTS[url.scheme]


class KeepAliveTransport(httpx.AsyncBaseTransport):
    def __init__(self, *, max_connections: int, ssl_context: ssl.SSLContext | None = None) -> None:
        self._max_connections = max_connections
        self._ssl_context = ssl_context
        self._idle: dict[Origin, list[_Connection]] = {}
        self._slots: asyncio.Semaphore | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        content = await request.aread()
        head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode(), request.url.raw_path)]
        head += [name + b": " + value + b"\r\n" for name, value in request.headers.raw]
        head.append(b"\r\n")
        answer = await self.send(
            origin_of(request.url),
            b"".join(head) + content,
            method=request.method,
            replayable="idempotency-key" in request.headers,
            timeouts=timeouts,
        )
        return httpx.Response(
            answer.status,
            headers=answer.headers,
            content=answer.body,
            request=request,
            extensions={"sends": answer.sends},
        )

    async def send(
        self,
        origin: Origin,
        message: bytes,
        *,
        method: str,
        replayable: bool,
        timeouts: dict[str, Any],
    ) -> RawAnswer:
        """Send `message` (a whole request: request line, headers, body) to `origin`; the
        answer's status, headers and body. `replayable`: the request may be sent a second time
        if it was lost on a reused connection (it carries an idempotency key).

        The scorer calls this with a request it wrote itself: building an httpx.Request and
        httpx.Response costs about 0.1 ms of CPU per request, a quarter of the client's work."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._max_connections)
        async with self._slots:
            connection = self._take_idle(origin) or await self._connect(origin, timeouts)
            try:
                return await self._exchange(connection, origin, message, method, timeouts)
            except _NothingReceived as failed:
                # Sent again only if the server may have closed an idle connection and the
                # request carries an idempotency key (a second arrival is replayed, not charged).
                if not connection.used or not replayable:
                    raise failed.error from None
            fresh = await self._connect(origin, timeouts)
            try:
                answer = await self._exchange(fresh, origin, message, method, timeouts)
                return answer._replace(sends=2)
            except _NothingReceived as failed:
                raise failed.error from None

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    def _take_idle(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if not connection.reader.at_eof() and not connection.writer.is_closing():
                return connection
            connection.close()
        return None

    async def _connect(self, origin: Origin, timeouts: dict[str, Any]) -> _Connection:
        scheme, host, port = origin
        tls = None
        if scheme == "https":
            if self._ssl_context is None:
                self._ssl_context = ssl.create_default_context(cafile=certifi.where())
            tls = self._ssl_context
        try:
            async with asyncio.timeout(timeouts.get("connect")):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=tls, server_hostname=host if tls else None, limit=_MAX_LINE
                )
        except Exception as exc:
            raise _transport_error(exc, httpx.ConnectTimeout, httpx.ConnectError) from exc
        return _Connection(reader, writer)

    async def _exchange(
        self,
        connection: _Connection,
        origin: Origin,
        message: bytes,
        method: str,
        timeouts: dict[str, Any],
    ) -> RawAnswer:
        """Send `message` on `connection` and read the answer; the connection goes back to the
        idle list if the answer leaves it usable, else it is closed."""
        reusable = received = False
        writer, reader = connection.writer, connection.reader
        try:
            try:
                writer.write(message)
                if writer.transport.get_write_buffer_size():  # small bodies leave at once
                    async with asyncio.timeout(timeouts.get("write")):
                        await writer.drain()
            except Exception as exc:
                error = _transport_error(exc, httpx.WriteTimeout, httpx.WriteError)
                raise _NothingReceived(error) from exc
            try:
                # One deadline for the whole answer (a decision is a small body).
                async with asyncio.timeout(timeouts.get("read")):
                    try:
                        head_bytes = await reader.readuntil(b"\r\n\r\n")
                    except asyncio.IncompleteReadError as exc:
                        if exc.partial:
                            raise
                        raise _NothingReceived(
                            httpx.RemoteProtocolError("the server closed the connection unanswered")
                        ) from None
                    received = True
                    status, headers, body, reusable = await self._read_answer(
                        reader, head_bytes, method
                    )
            except (_NothingReceived, httpx.TransportError):
                raise
            except Exception as exc:
                error = _transport_error(exc, httpx.ReadTimeout, httpx.ReadError)
                if received or isinstance(error, httpx.ReadTimeout):
                    raise error from exc
                raise _NothingReceived(error) from exc
            connection.used = True
            return RawAnswer(status, headers, body)
        finally:
            if reusable:
                self._idle.setdefault(origin, []).append(connection)
            else:
                connection.close()

    async def _read_answer(
        self, reader: asyncio.StreamReader, head: bytes, method: str
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
        """Status, headers, body and whether the connection stays usable, from the answer's
        head (status line and headers, read whole) and what follows it on `reader`."""
        while True:
            version, status, headers = _parse_head(head)
            if not 100 <= status < 200:
                break
            head = await reader.readuntil(b"\r\n\r\n")  # an interim answer (100): skip it
        fields = {name.lower(): value for name, value in headers}
        closing = b"close" in fields.get(b"connection", b"").lower() or version == b"HTTP/1.0"
        if method == "HEAD" or status in _NO_BODY_STATUSES:
            return status, headers, b"", not closing
        if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
            return status, headers, await _chunked(reader), not closing
        length = fields.get(b"content-length")
        if length is not None:
            if not length.strip().isdigit():
                raise httpx.RemoteProtocolError(f"a malformed Content-Length: {length!r}")
            return status, headers, await reader.readexactly(int(length)), not closing
        return status, headers, await reader.read(), False  # framed by the end of the stream


def _parse_head(head: bytes) -> tuple[bytes, int, list[tuple[bytes, bytes]]]:
    status_line, *lines = head[:-4].split(b"\r\n")
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise httpx.RemoteProtocolError(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
    if len(lines) > _MAX_HEADERS:
        raise httpx.RemoteProtocolError(f"more than {_MAX_HEADERS} header lines")
    headers = []
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon:
            raise httpx.RemoteProtocolError(f"a malformed header line: {line[:80]!r}")
        headers.append((name.strip(), value.strip()))
    return parts[0], int(parts[1]), headers


async def _trailers(reader: asyncio.StreamReader) -> None:
    """The trailer lines after the last chunk, up to the empty line (their content unused)."""
    for _ in range(_MAX_HEADERS):
        line = await reader.readline()
        if line in (b"\r\n", b"\n"):
            return
        if not line:
            raise httpx.RemoteProtocolError("the server closed the connection mid-trailers")
    raise httpx.RemoteProtocolError(f"more than {_MAX_HEADERS} trailer lines")


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    parts = []
    while True:
        size_line = await reader.readline()
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise httpx.RemoteProtocolError(f"a malformed chunk size: {size_line[:40]!r}") from None
        if size == 0:
            await _trailers(reader)
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)  # the CRLF after the chunk
