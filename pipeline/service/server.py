"""Running the app: `decisions serve` in the foreground, or a background server for tests."""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.config import LOGGING_CONFIG


def build_app(db: Path, benchmarks: Path, **options: Any) -> FastAPI:
    """The service over the SQLite ledger and accounts in `db` and the real engine."""
    from pipeline.decisions import DecisionDesk
    from pipeline.engine.benchmarks import BenchmarkTable
    from pipeline.engine.engine import Engine
    from pipeline.ledger.accounts import SqliteAccounts
    from pipeline.ledger.sqlite import SqliteLedger
    from pipeline.service.app import create_app

    ledger = SqliteLedger(db)
    desk = DecisionDesk(Engine(BenchmarkTable.load(benchmarks)), ledger)
    return create_app(desk, SqliteAccounts(db), **options)


def log_config() -> dict[str, Any]:
    """uvicorn's logging, plus our access log (key prefix only) in place of uvicorn's."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["pipeline.service"] = {
        "handlers": ["default"],
        "level": "INFO",
        "propagate": False,
    }
    return config


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until SIGINT/SIGTERM; uvicorn lets requests in flight finish before it exits."""
    uvicorn.run(
        app,
        host=host,
        port=port,
        access_log=False,
        log_config=log_config(),
        timeout_graceful_shutdown=30,
    )


class BackgroundServer:
    """uvicorn in a thread on 127.0.0.1 and a free port: `with BackgroundServer(app) as url:`."""

    def __init__(self, app: FastAPI, *, host: str = "127.0.0.1", log_level: str = "warning"):
        config = uvicorn.Config(
            app, host=host, port=0, access_log=False, log_level=log_level, lifespan="off"
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
