"""Running the app: `decisions serve` in the foreground, or a background server for tests."""

from __future__ import annotations

import copy
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import uvicorn
from fastapi import FastAPI
from starlette.types import Lifespan
from uvicorn.config import LOGGING_CONFIG

from pipeline.ledger.connection import BUSY_TIMEOUT_MS
from pipeline.service.connections import guarded_protocol
from pipeline.service.limits import BACKLOG, DEFAULT_LIMITS, ConnectionLimits

if TYPE_CHECKING:
    from pipeline.engine.benchmarks import BenchmarkTable
    from pipeline.ledger.sqlite import SqliteLedger

log = logging.getLogger("pipeline.service")

# The event loop shares the GIL with the ledger's writer threads, and Python hands the GIL to a
# waiting thread only once per switch interval (5 ms by default): a writer with charges to
# commit would wait that long behind a busy loop while every request waits on it. Measured
# with `make bench`: 0.5 ms gives about a third more requests per second at concurrency 8.
SWITCH_INTERVAL_S = 0.0005
# How long a stopping server lets its requests in flight finish: longer than a charge waits for
# a ledger another process holds locked (then 503 ledger_busy, nothing charged). Cut short at
# 30 s, those requests were cancelled with a bare 500 and a traceback, and a charge committed
# after the cancellation went to nobody (QA 61). Within systemd's default stop timeout (90 s).
SHUTDOWN_GRACE_S = BUSY_TIMEOUT_MS // 1000 + 5


def tune_process(*, one_cpu: bool = True) -> int | None:
    """Process-wide settings for serving (call once, before the server starts); the CPU the
    process was bound to, if any.

    `one_cpu`: bind the process to the CPU it runs on. Its threads (the event loop and the
    ledger's writers) hand every request's charge to each other and back, and take turns on
    the GIL anyway; on the 2-core development machine a round trip between two threads costs
    165-225 us of CPU and wake-ups when they sit on different cores, 17-45 us on one core
    (measured with a queue ping-pong). Run one server per CPU to use more of them."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    if one_cpu:
        return bind_to_current_cpu()
    return None


def bind_to_current_cpu() -> int | None:
    """Bind this process to the CPU it is running on (Linux); None where that is not possible."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        cpu = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])
        if cpu not in os.sched_getaffinity(0):
            return None
        os.sched_setaffinity(0, {cpu})
    except (OSError, ValueError, IndexError):
        return None
    return cpu


def build_app(db: Path, benchmarks: BenchmarkTable, **options: Any) -> FastAPI:
    """The service over the SQLite ledger and accounts in `db` and the real engine over
    `benchmarks`."""
    from pipeline.decisions import DecisionDesk
    from pipeline.engine.engine import Engine
    from pipeline.ledger.accounts import SqliteAccounts
    from pipeline.ledger.sqlite import SqliteLedger
    from pipeline.service.app import create_app

    ledger = SqliteLedger(db)
    desk = DecisionDesk(Engine(benchmarks), ledger)
    return create_app(desk, SqliteAccounts(db), lifespan=folding_log_on_stop(ledger), **options)


def folding_log_on_stop(ledger: SqliteLedger) -> Lifespan[FastAPI]:
    """The app's lifespan: as the server stops, the ledger's log is folded into its file
    (`SqliteLedger.fold_log`). Here, on the loop's thread, and not once `uvicorn.run`
    returns: after a SIGTERM, uvicorn raises the signal again, which ends the process."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if not ledger.fold_log():
            log.warning(
                "not all of the ledger's log could be folded into %s: another process is "
                "using the ledger. Its last charges may be in %s-wal: back it up with "
                "`sqlite3 %s \".backup COPY.db\"`, or move the -wal (and -shm) with it",
                ledger.path, ledger.path, ledger.path,
            )  # fmt: skip

    return lifespan


def log_config() -> dict[str, Any]:
    """uvicorn's logging, plus our access log (key prefix only) in place of uvicorn's."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["pipeline.service"] = {
        "handlers": ["default"],
        "level": "INFO",
        "propagate": False,
    }
    return config


def connection_options(limits: ConnectionLimits) -> dict[str, Any]:
    """uvicorn's options for the connections `limits` allow (see `connections`)."""
    return {"http": guarded_protocol(limits), "backlog": BACKLOG}


def serve(
    app: FastAPI,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    one_cpu: bool = True,
    limits: ConnectionLimits = DEFAULT_LIMITS,
) -> None:
    """Serve until SIGINT/SIGTERM; uvicorn lets requests in flight finish before it exits."""
    cpu = tune_process(one_cpu=one_cpu)
    if cpu is not None:
        print(f"bound to CPU {cpu} (--all-cpus to run on every CPU)", flush=True)
    uvicorn.run(
        app,
        host=host,
        port=port,
        access_log=False,
        log_config=log_config(),
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        **connection_options(limits),
    )


class BackgroundServer:
    """uvicorn in a thread on 127.0.0.1 and a free port: `with BackgroundServer(app) as url:`."""

    def __init__(
        self,
        app: FastAPI,
        *,
        host: str = "127.0.0.1",
        log_level: str = "warning",
        limits: ConnectionLimits = DEFAULT_LIMITS,
    ):
        config = uvicorn.Config(
            app,
            host=host,
            port=0,
            access_log=False,
            log_level=log_level,
            lifespan="off",
            **connection_options(limits),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = ""

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self.url

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
