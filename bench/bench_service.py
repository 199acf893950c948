"""Throughput and latency of POST /v1/decisions (scoring only) against a bare endpoint.

The server runs in its own process (uvicorn, the real app with the real engine and a SQLite
ledger in a temporary folder); the client is a minimal keep-alive HTTP/1.1 client on asyncio
streams, one connection per concurrent caller, so the client costs as little as possible of the
two cores. Both endpoints are measured in the same run; compare the ratio, not absolute numbers.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CONCURRENCY = (1, 8, 32)
SECONDS = float(os.environ.get("BENCH_SERVICE_SECONDS", "3"))
TRIALS = int(os.environ.get("BENCH_SERVICE_TRIALS", "3"))  # median printed, with the range
WARMUP_S = 0.5
TARGET_RATIO = 0.40

REQUEST = json.dumps(
    {
        "property": {"type": "apartment", "price": 950000, "area": 140, "bedrooms": 3},
        "location": {"city": "Riyadh", "district": "Al Malqa"},
        "reasoning": False,
    }
).encode()


@dataclass(frozen=True)
class Result:
    requests: int
    seconds: float
    latencies_ms: list[float]
    errors: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def percentile(self, q: float) -> float:
        if len(self.latencies_ms) < 2:
            return self.latencies_ms[0] if self.latencies_ms else float("nan")
        return statistics.quantiles(self.latencies_ms, n=100)[int(q) - 1]


def _request_bytes(path: str, key: str) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(REQUEST)}\r\n\r\n"
    )
    return head.encode() + REQUEST


async def _one_connection(
    port: int, payload: bytes, until: float, record_from: float, latencies: list[float]
) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    errors = 0
    try:
        while (now := time.perf_counter()) < until:
            writer.write(payload)
            status_line = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            if not status_line.startswith(b"HTTP/1.1 200"):
                errors += 1
            if now >= record_from:
                latencies.append((time.perf_counter() - now) * 1000)
    finally:
        writer.close()
    return errors


async def _measure(port: int, path: str, key: str, concurrency: int) -> Result:
    payload = _request_bytes(path, key)
    start = time.perf_counter()
    record_from, until = start + WARMUP_S, start + WARMUP_S + SECONDS
    latencies: list[float] = []
    errors = await asyncio.gather(
        *(_one_connection(port, payload, until, record_from, latencies) for _ in range(concurrency))
    )
    return Result(len(latencies), SECONDS, latencies, sum(errors))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(db: str, port: int) -> None:
    """The server process: the real app with the bare endpoint, no access log."""
    import uvicorn

    from pipeline.engine.benchmarks import BenchmarkTable
    from pipeline.service.limits import DEFAULT_LIMITS
    from pipeline.service.server import build_app, connection_options, tune_process
    from pipeline.settings import load_settings

    tune_process()  # as `decisions serve` does

    settings = load_settings()
    table = BenchmarkTable.load(settings.resolve(settings.benchmarks.table))
    app = build_app(Path(db), table, bare_endpoint=True)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        access_log=False,
        log_level="warning",
        **connection_options(DEFAULT_LIMITS),
    )


def _loop_name() -> str:
    """What uvicorn's `loop="auto"` runs on here (uvloop only if installed)."""
    return "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"


def _http_name() -> str:
    """What the server parses HTTP with: h11, under `connections.GuardedH11Protocol`."""
    return "h11"


def _prepare(db: Path) -> str:
    from pipeline.ledger.accounts import SqliteAccounts
    from pipeline.ledger.sqlite import SqliteLedger

    SqliteLedger(db).create_workspace("bench", 10**9)
    accounts = SqliteAccounts(db)
    accounts.create_account("bench-broker", "bench", "broker")
    return accounts.create_key("bench-broker").key


def _wait_for(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the benchmark server exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the benchmark server did not start")


def run() -> None:
    """Print requests/s and p50/p99 latency of both endpoints at each concurrency."""
    from pipeline.service.app import BARE_PATH

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        key = _prepare(db)
        port = _free_port()
        code = f"from bench.bench_service import _serve; _serve({str(db)!r}, {port})"
        server = subprocess.Popen([sys.executable, "-c", code])
        try:
            _wait_for(port, server)
            print(f"service: POST /v1/decisions (scoring only) vs POST {BARE_PATH} (fixed JSON)")
            print(f"{SECONDS:.0f} s per cell after {WARMUP_S} s warm-up; client and server share")
            print(f"the machine ({os.cpu_count()} cores); median of {TRIALS} alternated runs.")
            print(f"uvicorn's event loop: {_loop_name()}, HTTP parser: {_http_name()}.\n")
            header = (
                f"{'conc':>4}  {'decisions/s':>11} {'p50 ms':>7} {'p99 ms':>7}  "
                f"{'bare/s':>8} {'p50 ms':>7} {'p99 ms':>7}  {'ratio':>6} {'(range)':>9}"
            )
            print(header)
            for concurrency in CONCURRENCY:
                pairs = []
                for _ in range(TRIALS):  # alternated, so both endpoints see the same noise
                    decisions = asyncio.run(_measure(port, "/v1/decisions", key, concurrency))
                    bare = asyncio.run(_measure(port, BARE_PATH, key, concurrency))
                    pairs.append((decisions.rps / bare.rps if bare.rps else 0.0, decisions, bare))
                pairs.sort(key=lambda pair: pair[0])
                ratio, decisions, bare = pairs[len(pairs) // 2]
                spread = f"{pairs[0][0]:.0%}-{pairs[-1][0]:.0%}" if TRIALS > 1 else ""
                flag = "" if ratio >= TARGET_RATIO else f"  (< {TARGET_RATIO:.0%} target)"
                errors = sum(d.errors + b.errors for _, d, b in pairs)
                d50, d99 = decisions.percentile(50), decisions.percentile(99)
                b50, b99 = bare.percentile(50), bare.percentile(99)
                print(
                    f"{concurrency:>4}  {decisions.rps:>11.0f} {d50:>7.2f} {d99:>7.2f}  "
                    f"{bare.rps:>8.0f} {b50:>7.2f} {b99:>7.2f}  {ratio:>6.0%} {spread:>9}{flag}"
                    + (f"  {errors} non-200" if errors else "")
                )
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    run()
