"""KeepAliveTransport against real sockets on 127.0.0.1: framing, reuse, failures, timeouts."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import httpx
import pytest

from pipeline.batch.scorers.sending import Answer, HttpxSender, build_sender
from pipeline.batch.scorers.transport import KeepAliveTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, await reader.readexactly(length)


def ok(body: bytes, *extra: bytes) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"Content-Length: %d" % len(body), *extra]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def exchange(handler: Handler, *requests: httpx.Request | Callable[[int], httpx.Request],
             timeout: float = 5.0) -> tuple[list[httpx.Response | Exception], int]:  # fmt: skip
    """Send `requests` one after another through one transport to a server running `handler`;
    the answers (or exceptions) and how many connections the server saw."""
    connections = 0

    async def counted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            await handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def scenario() -> list[httpx.Response | Exception]:
        server = await asyncio.start_server(counted, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport = KeepAliveTransport(max_connections=4)
        answers: list[httpx.Response | Exception] = []
        for make in requests:
            request = make(port) if callable(make) else make
            request.extensions["timeout"] = httpx.Timeout(timeout).as_dict()
            try:
                answers.append(await transport.handle_async_request(request))
            except Exception as exc:
                answers.append(exc)
        await transport.aclose()
        server.close()
        return answers

    return asyncio.run(scenario()), connections


def post(
    body: bytes = b'{"a":1}', path: str = "/v1/decisions?x=1"
) -> Callable[[int], httpx.Request]:
    return lambda port: httpx.Request(
        "POST", f"http://127.0.0.1:{port}{path}", content=body,
        headers={"Authorization": "Bearer sk-test", "Idempotency-Key": "k-1"},
    )  # fmt: skip


def test_requests_go_over_one_kept_alive_connection_as_written():
    seen: list[tuple[bytes, bytes]] = []

    async def handler(reader, writer):
        while True:
            seen.append(await read_request(reader))
            writer.write(ok(b'{"verdict":"match"}'))

    answers, connections = exchange(handler, *[post(b'{"n":%d}' % i) for i in range(5)])

    assert [a.json() for a in answers] == [{"verdict": "match"}] * 5
    assert connections == 1
    head, body = seen[3]
    assert head.startswith(b"POST /v1/decisions?x=1 HTTP/1.1\r\n")
    assert b"\r\nhost: 127.0.0.1:" in head.lower() and b"content-length: 7" in head.lower()
    assert b"idempotency-key: k-1" in head.lower() and body == b'{"n":3}'


def test_chunked_and_close_delimited_bodies_are_read_whole():
    async def chunked(reader, writer):
        await read_request(reader)
        chunks = b'4\r\n{"a"\r\n9;ext=1\r\n:[1,2,3]}\r\n0\r\nX-Trailer: t\r\n\r\n'
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks)
        await read_request(reader)  # the connection stays usable after a chunked answer
        writer.write(ok(b"{}"))

    answers, connections = exchange(chunked, post(), post())
    assert answers[0].json() == {"a": [1, 2, 3]} and answers[1].json() == {}
    assert connections == 1

    async def until_close(reader, writer):
        await read_request(reader)
        writer.write(b'HTTP/1.0 200 OK\r\n\r\n{"b":2}')
        writer.close()

    answers, connections = exchange(until_close, post(), post())
    assert [a.json() for a in answers] == [{"b": 2}, {"b": 2}]
    assert connections == 2


def test_an_idle_connection_the_server_closed_is_replaced_without_an_error():
    async def one_answer_per_connection(reader, writer):
        await read_request(reader)
        writer.write(ok(b"{}"))  # says keep-alive, then closes anyway
        await writer.drain()

    answers, connections = exchange(one_answer_per_connection, post(), post(), post())
    assert all(isinstance(a, httpx.Response) and a.status_code == 200 for a in answers)
    assert connections == 3


def test_a_request_lost_on_a_reused_connection_is_resent_once_on_a_new_one():
    async def second_request_dropped(reader, writer):
        await read_request(reader)
        writer.write(ok(b"{}"))
        await read_request(reader)  # then the connection dies without an answer

    answers, connections = exchange(second_request_dropped, post(), post())
    assert [a.status_code for a in answers] == [200, 200]
    assert connections == 2

    no_key = lambda port: httpx.Request("POST", f"http://127.0.0.1:{port}/", content=b"{}")  # noqa: E731
    answers, _ = exchange(second_request_dropped, no_key, no_key)
    assert answers[0].status_code == 200
    assert isinstance(answers[1], httpx.RemoteProtocolError)  # without a key: never resent


def test_a_dropped_or_broken_answer_is_an_httpx_error_the_retry_policy_knows():
    async def drops(reader, writer):
        await read_request(reader)  # the request arrived (and was charged), no answer

    async def garbage(reader, writer):
        await read_request(reader)
        writer.write(b"SPDY/9 banana\r\n\r\n")

    async def cut(reader, writer):
        await read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{"half')

    async def endless_head(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nX-Padding: " + b"x" * 100_000 + b"\r\n\r\n{}")

    for handler in (drops, garbage, cut, endless_head):
        (answer,), _ = exchange(handler, post())
        assert isinstance(answer, httpx.RemoteProtocolError), handler.__name__


def test_timeouts_and_refused_connections():
    async def silent(reader, writer):
        await read_request(reader)
        await asyncio.sleep(5)

    (answer,), _ = exchange(silent, post(), timeout=0.2)
    assert isinstance(answer, httpx.ReadTimeout)

    # A port bound and never listened on refuses connections, and stays ours meanwhile: a port
    # closed before the request could be taken by another server (the test's own, once).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
        refused = httpx.Request("POST", f"http://127.0.0.1:{closed_port}/", content=b"{}")
        (answer,), _ = exchange(silent, refused)
    assert isinstance(answer, httpx.ConnectError)


@pytest.mark.parametrize("status", [204, 304])
def test_answers_without_a_body_keep_the_connection(status):
    async def empty(reader, writer):
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 %d Nothing\r\n\r\n" % status)

    answers, connections = exchange(empty, post(), post())
    assert [a.status_code for a in answers] == [status, status] and answers[0].content == b""
    assert connections == 1


def test_the_direct_sender_writes_what_an_httpx_request_writes_and_reads_the_same_answer():
    seen: list[tuple[bytes, bytes]] = []

    async def handler(reader, writer):
        while True:
            seen.append(await read_request(reader))
            writer.write(ok(b'{"score":80}', b"Retry-After: 7", b"X-Two: a"))

    async def scenario() -> list[Answer]:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        url = httpx.URL(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/decisions")
        transport = KeepAliveTransport(max_connections=2)
        headers = {"authorization": "Bearer sk-test", "content-type": "application/json"}
        timeout = httpx.Timeout(5.0)
        senders = [build_sender(transport, url, headers, timeout),
                   HttpxSender(transport, url, headers, timeout)]  # fmt: skip
        answers = [await send(b'{"n":1}', "job-7") for send in senders]
        with pytest.raises(ValueError, match="printable"):
            await senders[0](b"{}", "k\r\nX-Injected: 1")
        await transport.aclose()
        server.close()
        return answers

    direct, through_httpx = asyncio.run(scenario())
    assert len(seen) == 2 and seen[0] == seen[1]  # byte for byte
    assert seen[0][0].startswith(b"POST /v1/decisions HTTP/1.1\r\nHost: 127.0.0.1:")
    for answer in (direct, through_httpx):
        assert answer.status_code == 200 and answer.content == b'{"score":80}'
        assert answer.headers.get("retry-after") == "7" and answer.headers.get("x-two") == "a"
    assert isinstance(build_sender(httpx.MockTransport(lambda r: httpx.Response(200)),
                                   httpx.URL("http://h/"), {}, httpx.Timeout(1.0)),
                      HttpxSender)  # fmt: skip
