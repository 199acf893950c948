"""Remote scoring throughput: HttpScorer against a server that answers in 50 ms.

The limit at concurrency c is c / 0.05 s requests per second; the target is 0.9 of it. The
server (a minimal asyncio HTTP/1.1 keep-alive server returning a fixed decision body after
`asyncio.sleep(0.05)`) runs in a subprocess so that its CPU is not counted; client CPU per
request is `time.process_time()` of this process over the requests scored. The machine is shared and
noisy: each figure of the chosen transport is the median of TRIALS runs, with their range.
For comparison the same scorer is also measured on httpx's default transport (httpcore
pool), one shorter run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import httpx
import polars as pl

from pipeline.batch.budget import Budget
from pipeline.batch.scorers.http import ApiKey, HttpScorer, RemoteConfig
from pipeline.engine.schema import REQUEST_SCHEMA

LATENCY_S = 0.05
CONCURRENCY = (8, 32, 64)
SECONDS = float(os.environ.get("BENCH_REMOTE_SECONDS", "3"))
TRIALS = int(os.environ.get("BENCH_REMOTE_TRIALS", "3"))  # the median is printed, and the range
TARGET = 0.9

SERVER = textwrap.dedent(
    """
    import asyncio, json, sys
    bucket = {"score": 80, "status": "pass"}
    BODY = json.dumps({
        "verdict": "match", "score": 80,
        "breakdown": {b: bucket for b in ("price", "location", "size", "details")},
        "price_per_sqm": 6000.0, "benchmark": None,
        "decisions_used": 1, "decisions_remaining": 10**9,
    }).encode()
    HEAD = b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: "
    RESPONSE = HEAD + str(len(BODY)).encode() + b"\\r\\n\\r\\n" + BODY
    DELAY = float(sys.argv[1])

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\\r\\n\\r\\n")
                length = 0
                for line in head.split(b"\\r\\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
                await asyncio.sleep(DELAY)
                writer.write(RESPONSE)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    asyncio.run(main())
    """
)


def _requests(n: int) -> pl.DataFrame:
    row = {c: None for c in REQUEST_SCHEMA} | {
        "type": "apartment",
        "price": 950000.0,
        "area": 140.0,
        "bedrooms": 3.0,
        "city": "Riyadh",
        "district": "Al Malqa",
        "reasoning": False,
    }
    return pl.DataFrame([row] * n, schema=REQUEST_SCHEMA).with_columns(
        request_id=pl.int_range(1, n + 1, dtype=pl.Int64),
        cost=pl.lit(1, pl.Int64),
        idempotency_key=pl.format("bench-{}", pl.int_range(1, n + 1)),
    )


def _measure(url: str, concurrency: int, seconds: float, default_transport: bool) -> tuple:
    n = max(int(concurrency / LATENCY_S * seconds), concurrency * 4)
    config = RemoteConfig(base_url=url, concurrency=concurrency, chunk_rows=n)
    transport = None
    if default_transport:
        limits = httpx.Limits(max_connections=concurrency)
        transport = httpx.AsyncHTTPTransport(limits=limits)
    with HttpScorer(config, ApiKey("sk-bench"), transport=transport) as scorer:
        scorer.score(_requests(concurrency * 4), budget=Budget(None))  # warm up connections
        frame = _requests(n)
        cpu, wall = time.process_time(), time.perf_counter()
        result = scorer.score(frame, budget=Budget(None))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert result["status"].eq("scored").all()
    rps = n / wall
    return rps, rps / (concurrency / LATENCY_S), cpu / n * 1e6


def run() -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(LATENCY_S)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{int(server.stdout.readline())}"
        print(f"remote scoring, server answering in {LATENCY_S * 1000:.0f} ms (target {TARGET})")
        print(f"  {'transport':<22} {'conc':>4} {'req/s':>7} {'limit':>6} {'of limit':>8} "
              f"{'(range)':>11} {'client CPU/req':>14}")  # fmt: skip
        for transport, seconds, trials in (
            ("keep-alive (chosen)", SECONDS, TRIALS),
            ("httpx default", 1.0, 1),
        ):
            chosen = transport == "keep-alive (chosen)"
            for concurrency in CONCURRENCY:
                runs = sorted(
                    (_measure(url, concurrency, seconds, default_transport=not chosen)
                     for _ in range(trials)),
                    key=lambda run: run[1],
                )  # fmt: skip
                rps, ratio, cpu_us = runs[len(runs) // 2]
                spread = f"{runs[0][1]:.2f}-{runs[-1][1]:.2f}" if trials > 1 else ""
                flag = "" if ratio >= TARGET or not chosen else "  < target"
                print(
                    f"  {transport:<22} {concurrency:>4} {rps:>7.0f} "
                    f"{concurrency / LATENCY_S:>6.0f} {ratio:>8.2f} {spread:>11} "
                    f"{cpu_us:>11.0f} us{flag}"
                )
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    run()
