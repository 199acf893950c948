"""The remote scorer: one POST {base_url}/v1/decisions per request, over httpx, concurrently.

Transport: `transport.KeepAliveTransport`, sent to as bytes by `sending.DirectSender`
(AsyncClient's auth, redirect, cookie and hook layers cost about 0.2 ms of CPU a request, and
httpx's Request and Response objects 0.1 ms; the scorer uses none of them). Errors are httpx's
exceptions; any other httpx transport (tests: httpx.MockTransport) is sent httpx.Requests.
Against a server answering in 50 ms (bench/bench_remote.py), httpx's default AsyncClient
reached 0.21 / 0.07 of the limit at concurrency 32 / 64 (httpcore's pool, encode/httpx issue
3215), httpx over aiohttp's pool 0.84 / 0.77, this transport 0.9 or more at 8, 32 and 64.

Money rules (the journal gives every request an `Idempotency-Key`, the same on every attempt and
every run): retries in `retry.py`; 402 stops sending, lets requests in flight finish and leaves
the rest `skipped`; 401 stops the run at once, rows not answered end `failed` with
`invalid_api_key` (exit 1, `stopped_by` says why); a redirect or a 404 also stop it (a wrong
--api-url); 422 `validation_error` marks that row `rejected`.

Sending within --budget and the balance above --reserve: `spend_gate.SpendGate`. The balance is
known only from `decisions_remaining` (and a 402's `balance`), the lowest value seen being the
latest. An answer marked `Idempotent-Replayed` on a request's first attempt was paid for by an
earlier run: it spends nothing from this run's budget, and says nothing of the balance now (its
`decisions_remaining` is from then). On a retry it was paid for by an attempt of this run whose
answer was lost (or, for a request in doubt, possibly by the earlier run): counted as spent, so
the budget is never overrun, and its balance, the one after that charge, is taken as any
answer's is, so `--reserve` is kept too.

The API key lives in an `ApiKey`, whose repr and str hide it; it is only ever put in the
Authorization header, and redirects are never followed, so it never reaches another host.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import polars as pl

from pipeline.batch.budget import Budget
from pipeline.batch.scorers.base import (
    OUTPUT_SCHEMA,
    SKIPPED_BALANCE,
    ProgressCallback,
    flat_list,
    skipped_rows,
)
from pipeline.batch.scorers.retry import (
    RETRY_STATUSES,
    UNAVAILABLE_STATUSES,
    Pause,
    RetriesExhausted,
    RetryPolicy,
    Sent,
    in_progress,
    send_with_retry,
    turned_away,
)
from pipeline.batch.scorers.sending import Answer, Sender, build_sender
from pipeline.batch.scorers.slots import Slots
from pipeline.batch.scorers.spend_gate import BudgetGone, Hold, SpendGate, Stop
from pipeline.batch.scorers.transport import KeepAliveTransport
from pipeline.engine.schema import BENCHMARK_FIELDS, LOCATION_FIELDS, PROPERTY_FIELDS
from pipeline.errors import UsageError
from pipeline.ledger.key_text import redact_keys_in_message

if TYPE_CHECKING:
    from pipeline.engine.benchmarks import BenchmarkTable

log = logging.getLogger("pipeline.remote")

DECISIONS_PATH = "/v1/decisions"
WORKSPACE_PATH = "/v1/workspace"
INVALID_KEY_MESSAGE = (
    "the API key was refused (wrong or revoked); set DECISIONS_API_KEY (or --api-key-file) "
    "to a valid key and run the same command again"
)
IN_DOUBT = "in_doubt"  # failed, perhaps charged: the next run sends it under the same key
_REPLAYED = "_replayed"  # marks a scored row answered by a replay, until it is settled
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")
_INT_COLUMNS = frozenset(c for c, t in OUTPUT_SCHEMA.items() if t == pl.Int64())
_FLOAT_COLUMNS = frozenset(c for c, t in OUTPUT_SCHEMA.items() if t == pl.Float64())
_TEXT_COLUMNS = frozenset(c for c, t in OUTPUT_SCHEMA.items() if t == pl.String())


class ApiKey:
    """The API key: shown by nothing (repr, str, format, pickling); `reveal()` for the header."""

    __slots__ = ("_secret",)

    def __init__(self, secret: str) -> None:
        secret = secret.strip().removeprefix("\ufeff").strip()  # a key file saved with a BOM
        if not secret or any(c.isspace() for c in secret) or not secret.isprintable():
            raise UsageError("the API key is empty or holds spaces; it should look like sk-...")
        self._secret = secret

    def reveal(self) -> str:
        return self._secret

    def __repr__(self) -> str:
        return "ApiKey('sk-***')"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("an API key is not pickled")


@dataclass(frozen=True, kw_only=True)
class RemoteConfig:
    base_url: str  # without /v1/decisions
    concurrency: int = 8
    reserve: int = 0  # decisions to leave in the shared balance
    chunk_rows: int = 5_000  # requests the run hands over (and journals as sent) at a time
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0  # reasoning requests may take a while
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @property
    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.read_timeout_s, connect=self.connect_timeout_s)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_transport(config: RemoteConfig) -> httpx.AsyncBaseTransport:
    """Keep-alive connections, one per concurrent request; no proxies, no redirects."""
    return KeepAliveTransport(max_connections=config.concurrency)


def request_body(row: dict[str, Any]) -> bytes:
    """The spec's request body (section 2.1) from a request row; null optional fields omitted."""
    prop = {k: row[k] for k in PROPERTY_FIELDS if row[k] is not None}
    location = {k: row[k] for k in LOCATION_FIELDS if row[k] is not None}
    body = {"property": prop, "location": location, "reasoning": bool(row["reasoning"])}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _scored(request_id: int, body: dict[str, Any]) -> dict[str, Any]:
    breakdown = body["breakdown"]
    benchmark = body.get("benchmark") or {}
    reasoning = body.get("reasoning")
    row: dict[str, Any] = {
        "request_id": request_id,
        "status": "scored",
        "verdict": body["verdict"],
        "score": body["score"],
        "price_per_sqm": body["price_per_sqm"],
        "decisions_used": body["decisions_used"],
    }
    for bucket in ("price", "location", "size", "details"):
        row[f"{bucket}_score"] = breakdown[bucket]["score"]
        row[f"{bucket}_status"] = breakdown[bucket]["status"]
    for name in BENCHMARK_FIELDS:
        row[f"benchmark_{name}"] = benchmark.get(name)
    if reasoning is not None:
        row["reasoning_en"] = reasoning["reasoning_en"]
        row["reasoning_ar"] = reasoning["reasoning_ar"]
        row["key_factors"] = flat_list(reasoning["key_factors"])
        row["risk_flags"] = flat_list(reasoning["risk_flags"])
    return _typed(row)


def _error_row(
    request_id: int, status: str, code: str, message: str, field: str | None = None
) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "status": status,
        "decisions_used": 0,
        "error_code": code,
        "error_field": field,
        "error_message": message,
    }


def _typed(row: dict[str, Any]) -> dict[str, Any]:
    """The row's numbers as its columns' types: whole numbers rounded (a score of 75.6 is 76,
    as the spec's score may have decimals and our columns do not); TypeError for a value
    that is no finite number (`"score": "75.5"`, 1e20 past any column) or, in a text column,
    no text (an object for a verdict), which makes the answer no decision body."""
    for name in _INT_COLUMNS.intersection(row):
        if row[name] is not None:
            row[name] = math.floor(_number(row[name], name) + 0.5)
            if abs(row[name]) >= _INT64_LIMIT:  # no column holds it (a score of 1e20)
                raise TypeError(f"{name} is out of range")
    for name in _FLOAT_COLUMNS.intersection(row):
        if row[name] is not None:
            row[name] = _number(row[name], name)
    for name in _TEXT_COLUMNS.intersection(row):
        if row[name] is not None and not isinstance(row[name], str):
            raise TypeError(f"{name} is not text")
    return row


_INT64_LIMIT = 2**63


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"{name} is not a number")
    return float(value)


def _json(response: Answer) -> dict[str, Any]:
    try:
        body = json.loads(response.content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _status(answer: dict[str, Any] | Stop) -> str | None:
    return answer.status if isinstance(answer, Stop) else answer.get("status")


class HttpScorer:
    """Scores requests through a decision service; see the module docstring for the rules.

    `transport`: the httpx transport to send with (the seam for tests: httpx.MockTransport);
    by default a KeepAliveTransport, built at the first request. The scorer runs its own event
    loop across `score` calls (the journal hands requests over in chunks), so call `close()`
    (or use it as a context manager) when the run is over.
    """

    name = "remote"

    def __init__(
        self,
        config: RemoteConfig,
        key: ApiKey,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url = httpx.URL(config.base_url.rstrip("/") + DECISIONS_PATH)
        if url.scheme not in ("http", "https") or not url.host:
            raise UsageError(f"--api-url must be an http(s) address, not {config.base_url!r}")
        if url.userinfo:
            raise UsageError("--api-url must not hold credentials; the key goes in the env")
        given = config.base_url.rstrip("/")
        for endpoint in (DECISIONS_PATH, WORKSPACE_PATH):
            if given.endswith(endpoint):  # requests would go to .../v1/decisions/v1/decisions
                raise UsageError(
                    f"--api-url must be the service's base address, without {endpoint}: "
                    f"{given.removesuffix(endpoint) or '/'!r}"
                )
        if config.concurrency < 1 or config.reserve < 0:
            raise UsageError("--concurrency must be 1 or more and --reserve 0 or more")
        if url.scheme == "http" and not _is_loopback(url.host):
            log.warning(
                "--api-url %s is plain http: the API key would cross the network unencrypted; "
                "use the service's https:// address",
                url.copy_with(path="/", query=None, fragment=None),
            )
        self.config = config
        self.chunk_rows = config.chunk_rows
        self.reserve = config.reserve
        self.url = url
        self._headers = {
            "authorization": f"Bearer {key.reveal()}",
            "content-type": "application/json",
            "accept": "application/json",
        }
        self._transport = transport
        self._sender: Sender | None = None
        self._runner: asyncio.Runner | None = None
        self._pause = Pause()
        self._slots = Slots(config.concurrency)
        self._gate = SpendGate(config.reserve, run_stop=lambda: self._stop, halt=self._halt)
        self._stop: Stop | None = None
        self._fatal: Stop | None = None  # survives across score() calls (401, bad URL)
        self._stopped: asyncio.Event | None = None
        self.requests_sent = 0  # attempts, retries included
        self.stopped_by: str | None = None  # error code that stopped the run (invalid_api_key...)
        self.stop_message: str | None = None

    def __repr__(self) -> str:
        return f"HttpScorer({self.version!r}, concurrency={self.config.concurrency})"

    @property
    def address(self) -> str:
        """The service's host address, as every request of the run is fingerprinted with it
        (without the path of --api-url, as it always was: answers keep their fingerprints)."""
        return str(self.url.copy_with(path="/", query=None, fragment=None))

    @property
    def service(self) -> str:
        """The service's base address, the path before /v1/decisions included: two services
        behind one host (`https://gw/staging`, `https://gw/prod`) are two services."""
        base = self.url.path.removesuffix(DECISIONS_PATH).rstrip("/") + "/"
        return str(self.url.copy_with(path=base, query=None, fragment=None))

    @property
    def version(self) -> str:
        return f"remote:{self.address}"

    def balance(self) -> int | None:
        return self._gate.balance

    def benchmarks(self) -> BenchmarkTable | None:
        return None  # the service's own, which may not be this package's

    def batch_charged(self, batch_key: str) -> bool | None:
        return None  # each request has its own key, and the service is asked only by sending

    def batch_charged_at(self, batch_key: str) -> float | None:
        return None  # the service tells a replay, not when its charge was made

    def identify(self) -> tuple[str, int] | None:
        """The key's workspace and balance from GET /v1/workspace (our service's addition to
        the spec), before anything is sent; the balance seeds `--reserve`, the workspace is
        recorded in the job's journal. None for a service of the spec alone (404, 405, or an
        answer that is not ours): the run then learns the balance from its answers.

        Asked with the run's retries (a service restarting is waited for). UsageError, before
        anything is sent, for a refused key, a service that cannot be reached, or one that
        answers 5xx or 429 through every retry: a run that went on without knowing who pays
        could let another workspace's key take over the job's journal."""
        if self._runner is None:
            self._runner = asyncio.Runner()
        if self._transport is None:
            self._transport = build_transport(self.config)
        return self._runner.run(self._identify(self._transport))

    def refresh_balance(self) -> int | None:
        """The balance asked of the service again (GET /v1/workspace), between batches: with
        nothing in flight, the answer is the balance now, a top-up made during the run
        included (the answers' lowest balance never rises). None when the service cannot say
        (a service of the spec alone, one the run stopped for)."""
        if self._runner is None or self._transport is None or self._fatal is not None:
            return None
        try:
            identity = self._runner.run(self._identify(self._transport))
        except UsageError:
            return None
        if identity is None:
            return None
        self._gate.balance = identity[1]
        return identity[1]

    async def _identify(self, transport: httpx.AsyncBaseTransport) -> tuple[str, int] | None:
        # Not closed: closing a client closes its transport, which the run goes on to use.
        client = httpx.AsyncClient(transport=transport, timeout=self.config.timeout)
        url = self.config.base_url.rstrip("/") + WORKSPACE_PATH
        headers = {k: v for k, v in self._headers.items() if k != "content-type"}

        async def ask() -> Answer:
            got = await client.get(url, headers=headers)
            return Answer(got.status_code, got.headers, got.content, got.extensions.get("sends", 1))

        try:
            sent = await send_with_retry(ask, self.config.retry, self._pause)
        except RetriesExhausted as exc:
            # Nothing answers there (a wrong port, a service down): said before anything is
            # sent, and before an output of an earlier run is overwritten with failed rows.
            raise UsageError(
                f"the service at {self.service} cannot be reached ({exc}); check --api-url "
                "(DECISIONS_API_URL) and that the service is running"
            ) from None
        response, attempts = sent.response, sent.attempts
        status = response.status_code
        if status == 401:
            raise UsageError(INVALID_KEY_MESSAGE)
        if status in RETRY_STATUSES:
            raise UsageError(
                f"the service at {self.service} answered HTTP {status} {attempts} time(s) when "
                f"asked which workspace the key spends from ({WORKSPACE_PATH}); nothing was sent: "
                "run the same command again once it answers"
            )
        try:
            body = json.loads(response.content) if status == 200 else None
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return None
        workspace, balance = body.get("workspace"), body.get("balance")
        if not isinstance(workspace, str) or not isinstance(balance, int):
            return None
        workspace = self._scrubbed(workspace)  # it names the journal, and shows in the outputs
        self._gate.saw_balance(balance)
        return workspace, balance

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> HttpScorer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._runner is None:
            return
        # The workers a stop (SIGTERM) left waiting: cancelled before the loop runs again to
        # close the transport, or they would send more requests, paid and in no record (QA 70)
        for task in asyncio.all_tasks(self._runner.get_loop()):
            task.cancel()
        if self._transport is not None:
            self._runner.run(self._transport.aclose())
        self._runner.close()
        self._runner = None

    # -- scoring -----------------------------------------------------------------------------

    def scoring_ahead(self, requests: pl.DataFrame) -> AbstractContextManager[None]:
        return nullcontext()  # every answer is the service's, paid for as it comes

    def score(
        self, requests: pl.DataFrame, *, budget: Budget, progress: ProgressCallback | None = None
    ) -> pl.DataFrame:
        if requests.is_empty():
            return pl.DataFrame(schema=OUTPUT_SCHEMA)
        if "idempotency_key" not in requests.columns:  # no journal: keys for this run only
            run = uuid.uuid4().hex
            requests = requests.with_columns(
                idempotency_key=pl.format("pd-{}-{}", pl.lit(run), pl.col("request_id"))
            )
        if self._runner is None:
            self._runner = asyncio.Runner()
        answers = self._runner.run(self._score_all(requests, budget, progress))
        return self._frame(requests, answers)

    async def _score_all(
        self, requests: pl.DataFrame, budget: Budget, progress: ProgressCallback | None
    ) -> list[dict[str, Any] | Stop]:
        self._stop = self._fatal
        self._stopped = asyncio.Event()
        if self._fatal is not None:
            self._stopped.set()
        rows = requests.to_dicts()
        answers: list[dict[str, Any] | Stop | None] = [None] * len(rows)
        pending = iter(range(len(rows)))
        done = 0
        last_report = 0.0

        async def worker() -> None:
            nonlocal done, last_report
            for i in pending:
                answers[i] = await self._one(rows[i], budget)
                done += 1
                if progress is not None and (time.monotonic() - last_report > 0.2):
                    last_report = time.monotonic()
                    progress(done, budget.spent)

        workers = min(self.config.concurrency, len(rows))
        await asyncio.gather(*(worker() for _ in range(workers)))
        if progress is not None:
            progress(done, budget.spent)
        return [a for a in answers if a is not None]

    async def _one(self, row: dict[str, Any], budget: Budget) -> dict[str, Any] | Stop:
        hold = await self._gate.admit(row["cost"], budget)
        if isinstance(hold, Stop):
            return hold
        spent, failed = 0, True
        try:
            answer = await self._send(row, hold)
            if isinstance(answer, dict):
                if answer.pop(_REPLAYED, False):
                    answer["decisions_used"] = 0  # paid by an earlier run (see Scorer)
                spent = answer.get("decisions_used") or 0
            failed = _status(answer) == "failed"
            return answer
        finally:
            self._gate.release(hold, spent=spent, failed=failed)

    def _halt(self, stop: Stop, *, fatal: bool = False) -> Stop:
        if self._stop is None or (fatal and self._stop.status != "failed"):
            self._stop = stop
        if fatal and self._fatal is None:  # said once, though every request in flight sees it
            self._fatal = stop
            self.stopped_by, self.stop_message = stop.code, stop.message
            log.error("remote scoring stopped: %s", stop.message)
        if self._stopped is not None:
            self._stopped.set()
        return stop

    def _stopped_for_money(self) -> Stop | None:
        """The run's stop when the budget or the balance ended it (its retries cut short)."""
        return self._stop if self._stop is not None and self._stop.status == "skipped" else None

    def _cut_short(self, request_id: int, what: str) -> dict[str, Any]:
        """A request whose retries the run's budget or balance stop ended, an attempt of which
        may have been charged (its answer lost): failed, so it stays in doubt under its key.
        Made skipped, the next run would send it under a new key and pay for it twice."""
        stop = self._stopped_for_money()
        assert stop is not None
        return _error_row(
            request_id,
            "failed",
            IN_DOUBT,
            f"the service {what}, and the run stopped ({stop.message}) before it was sent "
            "again; an attempt whose answer did not come back may have been charged: the next "
            "run sends it under the same key, and a charge made is replayed, not made again",
        )

    async def _send(self, row: dict[str, Any], hold: Hold) -> dict[str, Any] | Stop:
        if self._sender is None:
            if self._transport is None:
                self._transport = build_transport(self.config)
            self._sender = build_sender(
                self._transport, self.url, self._headers, self.config.timeout
            )
        sender, content, key = self._sender, request_body(row), row["idempotency_key"]

        async def send() -> Answer:
            await self._gate.hold_again(hold)  # after a 409
            await self._slots.take()
            self.requests_sent += 1
            try:
                answer = await sender(content, key)
            except BaseException:
                self._gate.failed(hold)
                raise
            finally:
                self._slots.give_back()
            if turned_away(answer):
                self._slots.fewer()
            else:
                self._slots.served()
            self._gate.answered(hold, answer)
            return answer

        return await self._sent(row, send)

    async def _sent(
        self, row: dict[str, Any], send: Callable[[], Awaitable[Answer]]
    ) -> dict[str, Any] | Stop:
        try:
            sent = await send_with_retry(
                send, self.config.retry, self._pause, stopped=self._stopped
            )
        except BudgetGone:  # refused 409 before: the earlier run's charge stays in doubt
            if self._stopped_for_money():
                return self._cut_short(row["request_id"], "answered HTTP 409")
            assert self._stop is not None
            return self._stop
        except RetriesExhausted as exc:
            if self._stopped_for_money():
                return self._cut_short(row["request_id"], "could not be reached")
            # Unreachable through every retry: the service is down, and each row left would
            # spend its own retries finding that out (a day for 200,000 rows). The run stops;
            # the rows not answered stay in doubt under their keys for the next run.
            stop = Stop(
                "failed",
                "service_unavailable",
                f"the service at {self.url} could not be reached ({exc}), so the run stopped; "
                "run the same command again once it is back: the same idempotency keys make "
                "the retry safe",
            )
            return self._halt(stop, fatal=True)
        return self._answer(row, sent)

    def _answer(self, row: dict[str, Any], sent: Sent) -> dict[str, Any] | Stop:
        response, attempts = sent.response, sent.attempts
        request_id, status = row["request_id"], response.status_code
        body = _json(response)
        code = self._scrubbed(body.get("error") or f"http_{status}")
        message = self._scrubbed(body.get("message") or f"the service answered HTTP {status}")
        field = None if body.get("field") is None else self._scrubbed(body["field"])
        if 200 <= status < 300:
            try:
                scored = _scored(request_id, body)
            except (KeyError, TypeError, AttributeError, ValueError):
                return _error_row(
                    request_id,
                    "failed",
                    "invalid_response",
                    f"the service's answer (HTTP {status}) is not a decision body; run the same "
                    "command again: the same idempotency key replays it without a new charge",
                )
            replayed = response.headers.get("idempotent-replayed") == "true"
            # A replay is paid for by an earlier run, and spends nothing now, unless an attempt
            # of this run may have been charged (a 429 or a 409 never was: it was refused, not
            # lost): its balance is then the one after this run's charge, which the run must
            # count (a replay of an earlier run's charge tells the balance of then).
            if replayed and attempts - sent.refused == 1 and response.sends == 1:
                scored[_REPLAYED] = True
            else:
                self._gate.saw_balance(body.get("decisions_remaining"))
            return scored
        if status == 402:
            self._gate.saw_balance(body.get("balance"))
            return self._halt(Stop("skipped", SKIPPED_BALANCE, "the workspace balance is spent"))
        if status == 401:
            return self._halt(Stop("failed", "invalid_api_key", INVALID_KEY_MESSAGE), fatal=True)
        if 300 <= status < 400 or status in (404, 405):
            where = "redirected elsewhere" if status < 400 else f"answered HTTP {status}"
            stop = Stop(
                "failed",
                "wrong_api_url" if status >= 400 else "unexpected_redirect",
                f"{self.url} {where}; check --api-url (DECISIONS_API_URL): it should be the "
                "service's base address, without /v1/decisions",
            )
            return self._halt(stop, fatal=True)
        if status == 422 and code == "validation_error":
            return _error_row(request_id, "rejected", code, message, field)
        if status in RETRY_STATUSES and self._stopped_for_money():
            if (status == 429 or turned_away(response)) and attempts == sent.paced:
                # Every attempt was refused (429, or turned away): never charged, so it takes
                # the run's stop.
                return self._stop
            return self._cut_short(request_id, f"answered HTTP {status}")
        if turned_away(response):
            stop = Stop(
                "failed",
                "service_unavailable",
                f"the service at {self.url} turned {attempts} connection(s) of this request away "
                "(503 too_many_connections: it serves as many connections as it can), so the "
                "run stopped; run the same command again later, or with a lower --concurrency",
            )
            return self._halt(stop, fatal=True)
        if status in UNAVAILABLE_STATUSES:
            # The service, or the proxy before it, says it cannot serve through every retry:
            # as when it cannot be reached, the run stops rather than each row left spending
            # its own retries finding that out.
            # its reason (a full disk...), on one line: no control character of a service's
            # reaches a terminal or a log
            said = _CONTROL.sub(" ", message)[:200] if body.get("message") else ""
            stop = Stop(
                "failed",
                "service_unavailable",
                f"the service at {self.url} answered HTTP {status} {attempts} time(s)"
                f"{f' ({said})' if said else ''}, so the run stopped; run the same command again "
                "once it is back: the same idempotency keys make the retry safe",
            )
            return self._halt(stop, fatal=True)
        if status == 429:
            # Paced past the bound of its own (minutes): every row left would wait as long, one
            # wave of workers at a time (hours). The run stops, as for a service down.
            stop = Stop(
                "failed",
                "rate_limited",
                f"the service at {self.url} kept answering HTTP 429 (rate limited) "
                f"{attempts} time(s), so the run stopped; run the same command again later: "
                "the same idempotency keys make the retry safe",
            )
            return self._halt(stop, fatal=True)
        if in_progress(response):
            code = "request_in_progress"
            message = (
                f"the service answered HTTP 409 (request in progress) {attempts} time(s): it "
                "still holds an earlier attempt of this request (still being answered, or a "
                "charge that stands, replayed free once the service counts it abandoned); run "
                "the same command again in a few minutes: the same idempotency key makes the "
                "retry safe"
            )
        elif status in RETRY_STATUSES:
            code = "service_unavailable"
            message = (
                f"the service answered HTTP {status} {attempts} time(s); run the same command "
                "again later: the same idempotency key makes the retry safe"
            )
        return _error_row(request_id, "failed", code, message, field)

    def _scrubbed(self, said: object) -> str:
        """A service's words, for the outputs and the journal: without the API key, should the
        service repeat what it was sent (a proxy's error page, a debugging build)."""
        text = str(said)
        secret = self._headers["authorization"].removeprefix("Bearer ").removeprefix("sk-")
        if len(secret) >= 16:  # a key's secret part, not a word that a message may hold
            text = re.sub(re.escape(secret), "...", text, flags=re.IGNORECASE)
        return redact_keys_in_message(text)

    def _frame(self, requests: pl.DataFrame, answers: list[dict[str, Any] | Stop]) -> pl.DataFrame:
        rows: list[dict[str, Any]] = []
        stops: dict[tuple[str, str, str], list[int]] = {}
        for request_id, answer in zip(requests["request_id"], answers, strict=True):
            if isinstance(answer, Stop):
                stops.setdefault((answer.status, answer.code, answer.message), []).append(
                    request_id
                )
            else:
                rows.append(answer)
        parts = [pl.DataFrame(rows, schema=OUTPUT_SCHEMA)] if rows else []
        for (status, code, message), ids in stops.items():
            stopped = requests.filter(pl.col("request_id").is_in(ids))
            if status == "skipped":
                parts.append(skipped_rows(stopped, code, message))
            else:
                parts.append(
                    pl.DataFrame(
                        [_error_row(i, status, code, message) for i in ids], schema=OUTPUT_SCHEMA
                    )
                )
        if not parts:
            return pl.DataFrame(schema=OUTPUT_SCHEMA)
        order = requests.select("request_id")
        return order.join(pl.concat(parts), on="request_id", how="left", maintain_order="left")
