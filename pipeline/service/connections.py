"""Limits on client connections: how long a request may take to arrive, how many are open.

uvicorn times out only idle keep-alive connections (between requests): a client that sent half
a request head, or a body at a trickle, held its socket for ever, and a few hundred such clients
used up the process's file descriptors and locked every other client out. `GuardedH11Protocol`
(uvicorn's h11 protocol, passed to uvicorn as `http=`) closes a connection whose request head
is not complete `head_timeout_s` after its first byte (or after the connection opened), or
whose whole request has not arrived `request_timeout_s` after that; it answers 408
`request_timeout` first unless an answer to the request has begun. A request that arrives in
one read (nearly all of them: a head and a body of up to 64 KiB) arms no timer; a slower one
arms one loop timer, cancelled once the request is complete. A request pipelined behind
another is timed from the moment the answer before it is complete. A client that reads none
of its answers (the socket's buffers full) is closed after `request_timeout_s`.

Past `max_connections` open connections a new one is answered 503 `too_many_connections` and
closed. uvicorn's `limit_concurrency` does not bound connections: it answers 503 to a request
once its head is complete (a client that never completes one is never refused) and counts idle
keep-alive connections as busy.

Bytes that are not HTTP/1.1 are answered with a JSON error body too (uvicorn's is plain text),
saying what h11 found wrong, and so is a request head (request line and headers) over 16 KiB
(uvicorn's `h11_max_incomplete_event_size`), whether it arrived in pieces or in one read.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import (
    DEFAULT_MAX_INCOMPLETE_EVENT_SIZE,
    STATUS_PHRASES,
    H11Protocol,
)

from pipeline.ledger.key_text import redact_keys
from pipeline.service.limits import DEFAULT_LIMITS, TURNING_AWAY_MAX, ConnectionLimits

# How long a turned-away client has to read its 503 before the socket is closed: closing it
# while its request sits unread would send a reset, which may destroy the answer unread.
TURN_AWAY_LINGER_S = 1.0


def _body(code: str, message: str) -> bytes:
    return json.dumps({"error": code, "message": message}, separators=(",", ":")).encode()


# What h11's refusal of a request's bytes hints at (its `error_status_hint`): code, message.
_REFUSALS = {
    400: ("bad_request", "the request is not valid HTTP/1.1"),
    431: ("request_header_fields_too_large", "the request head is too large"),
    501: ("not_implemented", "the request's Transfer-Encoding is not supported"),
}


class _RefusalRecordingConnection(h11.Connection):
    """h11's connection, keeping why it refused the client's bytes (uvicorn does not say), and
    refusing a request head over `max_head_bytes` however it arrived.

    h11 counts only a head still incomplete (`max_incomplete_event_size`): one that came whole
    in a single read, of any size up to the 256 KiB asyncio reads at once, was served. A whole
    head is measured as the bytes h11 took out of its receive buffer for it (the same count, so
    optional whitespace it drops from header values counts too): two `len` calls a request."""

    refusal: h11.RemoteProtocolError | None = None

    def __init__(self, max_head_bytes: int) -> None:
        super().__init__(h11.SERVER, max_head_bytes)
        self.max_head_bytes = max_head_bytes

    def next_event(self) -> Any:
        buffered = len(self._receive_buffer)
        try:
            event = super().next_event()
            if type(event) is h11.Request:
                head = buffered - len(self._receive_buffer)
                if head > self.max_head_bytes:
                    raise h11.RemoteProtocolError(
                        f"{head} bytes, over the limit of {self.max_head_bytes}",
                        error_status_hint=431,
                    )
                names = {name for name, _ in event.headers}
                if b"content-length" in names and b"transfer-encoding" in names:
                    # Framed two ways: a proxy in front may read it the other way, and take
                    # the rest of the body for another request (request smuggling, RFC 9112 6.1)
                    raise h11.RemoteProtocolError(
                        "both Content-Length and Transfer-Encoding", error_status_hint=400
                    )
            return event
        except h11.RemoteProtocolError as refusal:
            self.refusal = refusal
            raise


class GuardedH11Protocol(H11Protocol):
    limits: ClassVar[ConnectionLimits] = DEFAULT_LIMITS

    def __init__(self, config: Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        size = config.h11_max_incomplete_event_size
        self.conn = _RefusalRecordingConnection(
            size if size is not None else DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
        )

    _deadline: asyncio.TimerHandle | None = None
    _timing: object = None  # the part of a request timed: h11.IDLE (its head) or h11.SEND_BODY
    _started = 0.0
    _turned_away = False
    _first = True  # no request has come in full yet: the connection's opening starts the clock
    _unread: asyncio.TimerHandle | None = None  # closes a connection whose answers stay unread

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._turn_away()
        else:
            self._time(h11.IDLE)

    def data_received(self, data: bytes) -> None:
        if self._turned_away:
            return
        super().data_received(data)

    def eof_received(self) -> bool | None:
        """A client that closes its side once its request is sent (a half-close, which HTTP/1.1
        allows) still reads: its answer, paid for, is sent, then the connection closed; a
        request pipelined behind it is not started. (uvicorn closed at once: the request was
        charged and its answer dropped.)"""
        cycle = self.cycle
        answering = cycle is not None and not cycle.response_complete
        if self._turned_away or not answering or self.conn.their_state is not h11.DONE:
            return None  # nothing (more) to answer: closed now
        assert cycle is not None
        cycle.keep_alive = False  # (h11 told of the end instead loops for ever in uvicorn)
        return True

    def handle_events(self) -> None:
        # Called for data received, and once an answer is complete for a request that came
        # pipelined behind it (already read: it would otherwise never be timed).
        super().handle_events()
        state = self.conn.their_state
        if state is not h11.IDLE:
            self._first = False
        if state is h11.SEND_BODY or (
            state is h11.IDLE and (self._first or self.conn.trailing_data[0])
        ):
            self._time(state)
        elif self._timing is not None:
            self._stop_timing()  # (between requests, uvicorn's keep-alive timeout applies)

    def pause_writing(self) -> None:
        # The client reads none of the answers it asked for (the socket's buffers are full):
        # given as long as a request has to arrive, it is closed.
        super().pause_writing()
        if self._unread is None:
            self._unread = self.loop.call_later(self.limits.request_timeout_s, self._not_read)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._unread is not None:
            self._unread.cancel()
            self._unread = None

    def _not_read(self) -> None:
        self._unread = None
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timing()
        if self._unread is not None:
            self._unread.cancel()
            self._unread = None
        super().connection_lost(exc)

    def _time(self, part: object) -> None:
        """Arm the deadline of `part` of the request arriving (the head, or the whole request)
        unless it is armed; the request's first byte (or the connection opening) starts the
        clock."""
        if self._timing is part:
            return
        if self._deadline is not None:
            self._deadline.cancel()
        if self._timing is None or part is h11.IDLE:  # else the head has come: same request
            self._started = self.loop.time()
        self._deadline = self.loop.call_at(self._started + self._limit(part), self._timed_out)
        self._timing = part

    def _limit(self, part: object) -> float:
        return self.limits.head_timeout_s if part is h11.IDLE else self.limits.request_timeout_s

    def _stop_timing(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._timing = None

    def _timed_out(self) -> None:
        what = "request head" if self._timing is h11.IDLE else "request"
        message = (
            f"the {what} did not arrive within {self._limit(self._timing):g} s; "
            "the connection is closed"
        )
        self._deadline = None
        self._timing = None
        self._refuse(408, _body("request_timeout", message))

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes that are not HTTP/1.1 (h11 refused them), in plain text:
        the spec's JSON error body instead, saying what was wrong."""
        refusal = getattr(self.conn, "refusal", None)
        status = refusal.error_status_hint if refusal is not None else 400
        detail = redact_keys(str(refusal or msg))
        detail = detail if len(detail) <= 80 else detail[:80] + "..."
        code, said = _REFUSALS.get(status, _REFUSALS[400])
        self._refuse(status, _body(code, f"{said} ({detail}); the connection is closed"))

    def _refuse(self, status: int, body: bytes) -> None:
        """Answer `status` (unless the app's answer has begun) and close the connection."""
        if self.transport.is_closing():
            return
        if self.conn.our_state is h11.IDLE or self.conn.our_state is h11.SEND_RESPONSE:
            if self.cycle is not None and not self.cycle.response_complete:
                # The app may be waiting for the rest of the body: it reads a disconnect, and
                # whatever it answers is dropped.
                self.cycle.disconnected = True
                self.cycle.message_event.set()
            self._answer(status, body)
        self.transport.close()

    def _turn_away(self) -> None:
        self._turned_away = True
        if len(self.connections) > self.limits.max_connections + TURNING_AWAY_MAX:
            self.transport.abort()
            return
        message = (
            f"the server has {self.limits.max_connections} connections open, its limit; "
            "try again shortly"
        )
        self._answer(503, _body("too_many_connections", message), (b"retry-after", b"1"))
        self.transport.write_eof()
        self.loop.call_later(TURN_AWAY_LINGER_S, self.transport.abort)

    def _answer(self, status: int, body: bytes, *headers: tuple[bytes, bytes]) -> None:
        """A JSON answer on a connection about to close, before or instead of the app's."""
        head = [
            *self.server_state.default_headers,
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *headers,
        ]
        response = h11.Response(status_code=status, headers=head, reason=STATUS_PHRASES[status])
        for event in (response, h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event) or b"")


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedH11Protocol]:
    """The protocol class to pass to uvicorn as `http=`, under `limits`."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})
