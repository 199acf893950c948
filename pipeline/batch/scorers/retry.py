"""The one retry policy of remote scoring: what is retried, how long to wait, and a shared pause.

Retried, always as the same request under the same `Idempotency-Key` (an attempt whose answer
was lost is replayed by the service, not charged again):

    connection errors, timeouts, dropped connections     (httpx.TransportError and the like)
    HTTP 408, 429, 500, 502, 503, 504
    HTTP 409 request_in_progress                         (our own earlier attempt still running)

Never retried: 400, 401, 402, 422 and every other status; a second try cannot change them.
A 503 `too_many_connections` (the service's connection limit, before the request is read) is
waited for as a 429 is: never charged, and bounded as those are.

Waits: exponential backoff with equal jitter (half of min(cap, base * 2**n), plus up to the
other half at random), or the server's `Retry-After` when it sends one (of more than zero). A
`Retry-After` is shared: it moves the "not before" time of the `Pause` that every worker waits
on before sending, so a 429 slows the whole run, not one task. (A 409's Retry-After concerns our
own request only and is not shared.) Attempts and total time are bounded by `RetryPolicy`; a 429
is the service pacing its clients, not a failure, so attempts it refused count only towards a
longer bound of their own (at a strict `--rate-limit`, workers racing for each second's requests
would otherwise fail rows). So do attempts refused 409, waited for with growing backoff (at
least their Retry-After): the service holds an earlier attempt whose charge stands (its answer
or refund could not be written, or its server was killed) for two minutes before it replays it.

The first attempt is a plain `await`; tenacity takes over only after a retryable failure, so its
per-call machinery (20-40 us, and 35-50% of throughput at concurrency 32, PERF-NOTES) stays off
the hot path. `set_testing(True)` removes every sleep, like stamina's switch of the same name.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import NamedTuple

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
)

from pipeline.batch.scorers.sending import Answer

# A gateway in front of the service (Cloudflare's 520-524: the origin failed, is down, cannot
# be reached or took too long) answers as a proxy's 502 and 504 do: for the service. The same
# idempotency key makes each retry safe, and a retry answered tells the balance again.
GATEWAY_STATUSES = frozenset({520, 521, 522, 523, 524})
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504}) | GATEWAY_STATUSES
# Of those, the ones that say the service itself is not serving (not this request's trouble).
UNAVAILABLE_STATUSES = frozenset({502, 503, 504}) | GATEWAY_STATUSES
# The service's refusal of a connection past its limit (503 too_many_connections), made before
# the request is read: never charged, a wait for a free connection as a 429 is for the next
# second (see `slots`).
_TURNED_AWAY = b'"too_many_connections"'


def turned_away(response: Answer) -> bool:
    return response.status_code == 503 and _TURNED_AWAY in response.content


# The service holding this key's earlier attempt (409 request_in_progress): any other 409 (a
# gateway's) is retried as a failure is.
_IN_PROGRESS = b'"request_in_progress"'


def in_progress(response: Answer) -> bool:
    return response.status_code == 409 and _IN_PROGRESS in response.content


# The transport raises httpx's exceptions; the others are a safety net for what might escape.
_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.TransportError,
    asyncio.TimeoutError,
    OSError,
)

_testing = False


def set_testing(testing: bool) -> None:
    """Tests: no sleeps at all (backoff, Retry-After, the shared pause); attempts unchanged."""
    global _testing
    _testing = testing


def is_testing() -> bool:
    return _testing


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    # In all, the first included: the waits between 8 (see `_retry`) add up to 15-31 s, so a
    # service restarting (a few seconds down) is waited for, and one that is down is found out
    # within half a minute. Six attempts (0-8 s) ended runs during restarts.
    attempts: int = 8
    total_s: float = 120.0  # no new attempt after this long since the first failure
    backoff_s: float = 0.25  # cap of the first backoff; doubles with every attempt
    max_backoff_s: float = 15.0
    max_retry_after_s: float = 300.0  # a longer Retry-After is cut to this
    # A request refused 429 (rate limited) is retried this long, or this many times (with a
    # Retry-After of a second or more, the time bound comes first; tests sleep not at all).
    throttled_s: float = 600.0
    throttled_attempts: int = 1000
    # A request refused 409 (its key's earlier attempt still held by the service: in progress,
    # or a charge that stands, replayed free once the service counts it abandoned, two minutes
    # after it began) is retried this long, or this many times, its waits growing as backoff.
    in_progress_s: float = 180.0
    in_progress_attempts: int = 30


async def _sleep(seconds: float) -> None:
    if not _testing and seconds > 0:
        await asyncio.sleep(seconds)


class Pause:
    """A "not before" time shared by every worker of a run (set by Retry-After)."""

    def __init__(self) -> None:
        self.not_before = 0.0  # time.monotonic()

    def hold(self, seconds: float) -> None:
        self.not_before = max(self.not_before, time.monotonic() + seconds)

    async def wait(self) -> None:
        while (delay := self.not_before - time.monotonic()) > 0 and not _testing:
            await asyncio.sleep(delay)


def retry_after_s(response: Answer, cap: float) -> float | None:
    """The Retry-After of a response in seconds (delta-seconds or an HTTP date), capped."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(seconds, 0.0), cap)


class RetryableStatus(Exception):
    """A response whose status is worth another attempt (inside the retry loop only)."""

    def __init__(self, response: Answer) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


class Sent(NamedTuple):
    """The final response of a request, and how many attempts it took: in all; refused 429 on
    their only send (`paced`: never charged, the service said when to come back instead); and
    refused 429 or 409 on their only send (`refused`: a 409 is the same key still being
    answered, charged by an earlier attempt, never by this one). A refusal of a send the
    transport repeated (`Answer.sends`, an answer lost on a reused connection) is in neither:
    the lost send may have been charged."""

    response: Answer
    attempts: int
    paced: int = 0
    refused: int = 0


class RetriesExhausted(Exception):
    """Every attempt ended in a transport error; `cause` names the last one (never a header)."""

    def __init__(self, attempts: int, last: BaseException) -> None:
        self.attempts = attempts
        self.cause = type(last).__name__
        super().__init__(f"{attempts} attempt(s), the last ended in {self.cause}")


Send = Callable[[], Awaitable[Answer]]


async def send_with_retry(
    send: Send,
    policy: RetryPolicy,
    pause: Pause,
    *,
    stopped: asyncio.Event | None = None,
) -> Sent:
    """The final response and the attempts made.

    A retryable response that is still the answer when attempts or time run out is returned as
    it is (the caller turns it into a failed row); a transport error then raises
    RetriesExhausted. `stopped` ends the retries early (the run was stopped, e.g. by a 401).
    """
    await pause.wait()
    try:
        response = await send()
    except _TRANSPORT_ERRORS as exc:
        first: BaseException = exc
    else:
        if response.status_code not in RETRY_STATUSES:
            return Sent(response, 1)
        first = RetryableStatus(response)
    return await _retry(send, policy, pause, first, stopped)


async def _retry(
    send: Send,
    policy: RetryPolicy,
    pause: Pause,
    first: BaseException,
    stopped: asyncio.Event | None,
) -> Sent:
    """Tenacity from the second attempt on; its attempt 1 re-raises the plain attempt's failure,
    so attempt numbers, waits and the bound on attempts count that one too."""

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, RetryableStatus):
            after = retry_after_s(exc.response, policy.max_retry_after_s)
            # "Retry-After: 0" (or a date gone by) is no pause at all: the backoff's instead,
            # or a run would hammer a service that says so for a thousand attempts on end.
            if after is not None and after > 0:
                if in_progress(exc.response):  # our earlier attempt: held for minutes
                    return max(after, backoff(state))  # when a charge of it stands
                if turned_away(exc.response):
                    return after  # this request's own wait (a slot)
                pause.hold(after)  # everyone waits, this worker too (at pause.wait below)
                return 0.0
        return backoff(state)

    def backoff(state: RetryCallState) -> float:
        # Half the cap for sure, half at random: workers spread out, and the waits add up to
        # at least half their caps' sum (full jitter could add up to almost nothing).
        doublings = min(state.attempt_number - 1, 32)  # 2.0 ** 1024 overflows a float
        cap = min(policy.max_backoff_s, policy.backoff_s * 2.0**doublings)
        return cap / 2 + random.uniform(0, cap / 2)

    # throttled: attempts refused 429, not among `policy.attempts`; paced: those of them whose
    # only send was refused (never charged); held: attempts refused 409, not among them either
    attempts = throttled = paced = refused = held = 0

    def stop(state: RetryCallState) -> bool:
        if stopped is not None and stopped.is_set():
            return True
        since = state.seconds_since_start or 0.0
        # the service pacing its clients, or holding our earlier attempt: waited for, up to
        # bounds of their own
        bounds = [policy.throttled_s] if throttled else []
        bounds += [policy.in_progress_s] if held else []
        return (
            attempts - throttled - held >= policy.attempts
            or throttled >= policy.throttled_attempts
            or held >= policy.in_progress_attempts
            or since >= max(bounds or [policy.total_s])
        )

    retrying = AsyncRetrying(
        stop=stop,
        wait=wait,
        retry=retry_if_exception_type((RetryableStatus, *_TRANSPORT_ERRORS)),
        sleep=_sleep,
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                attempts += 1
                failure = first
                if attempts > 1:
                    await pause.wait()
                    response = await send()
                    if response.status_code not in RETRY_STATUSES:
                        return Sent(response, attempts, paced, refused)
                    failure = RetryableStatus(response)
                if isinstance(failure, RetryableStatus):
                    status, once = failure.response.status_code, failure.response.sends == 1
                    waited = status == 429 or turned_away(failure.response)
                    throttled += waited
                    held += in_progress(failure.response)
                    paced += waited and once
                    refused += (status == 409 or waited) and once
                raise failure
    except RetryableStatus as exc:
        return Sent(exc.response, attempts, paced, refused)
    except _TRANSPORT_ERRORS as exc:
        raise RetriesExhausted(attempts, exc) from None
    raise AssertionError("unreachable: tenacity either returns or re-raises")  # pragma: no cover
