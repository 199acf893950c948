"""`decisions serve --rate-limit N`: each workspace's requests a second, past which 429
`rate_limited` with Retry-After and nothing charged; the batch client slows to the limit."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import polars as pl
import pytest

from pipeline.cli import main
from pipeline.engine.engine import Engine
from pipeline.service.rate_limit import RateLimit, retry_after
from tests.test_service_fixtures import VALID, running_service

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_workspace_sends_a_burst_then_its_rate_each_workspace_apart():
    clock = Clock()
    limit = RateLimit(2, clock=clock)
    assert [limit.wait("acme") for _ in range(3)] == [0.0, 0.0, 0.5]
    assert limit.wait("beta") == 0.0  # another workspace has its own allowance
    clock.now += 0.5
    assert limit.wait("acme") == 0.0 and limit.wait("acme") == 0.5
    clock.now += 60
    assert [limit.wait("acme") for _ in range(3)] == [0.0, 0.0, 0.5]  # the burst, no more
    assert retry_after(0.5) == "1" and retry_after(1.2) == "2"
    with pytest.raises(ValueError):
        RateLimit(0)


def test_past_the_limit_a_request_is_refused_with_retry_after_and_not_charged(tmp_path):
    with running_service(tmp_path, Engine.default(), balance=100, rate_limit=2) as service:
        service.ledger.create_workspace("beta", 10)
        service.accounts.create_account("beta-agency", "beta", "agency")
        beta = service.accounts.create_key("beta-agency").key
        answers = [service.post(VALID) for _ in range(3)]
        other_workspace = service.post(VALID, key=beta)
        time.sleep(0.6)  # a request's worth at 2 a second
        later = service.post(VALID)

    assert [a.status_code for a in answers] == [200, 200, 429]
    refused = answers[2]
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"] == "rate_limited"
    assert "2 requests a second" in refused.json()["message"]
    assert other_workspace.status_code == 200 and later.status_code == 200
    assert service.balance() == 100 - 3


def test_at_zero_balance_a_replay_past_the_limit_is_told_to_wait_not_402(tmp_path):
    with running_service(tmp_path, Engine.default(), balance=1, rate_limit=2) as service:
        again = {"Idempotency-Key": "last-one"}
        answers = [service.post(VALID, headers=again) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]  # paid, replayed, paced
    assert answers[1].headers["idempotent-replayed"] == "true"
    assert answers[2].json()["error"] == "rate_limited"


def test_serve_refuses_a_rate_that_is_not_a_positive_number(capsys):
    for rate in ("0", "-1", "fast", "nan"):
        with pytest.raises(SystemExit) as stopped:
            main(["serve", "--rate-limit", rate])
        assert stopped.value.code == 2
        assert "not a number of requests above 0" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_batch_run_through_a_rate_limited_service_slows_down_and_pays_each_row_once(
    tmp_path, capsys
):
    db, port = tmp_path / "ledger.db", _free_port()
    for command in (
        ["workspace", "create", "acme", "--balance", "1000", "--db", str(db)],
        ["account", "create", "acme-broker", "--workspace", "acme", "--type", "broker",
         "--db", str(db)],
    ):  # fmt: skip
        assert main(command) == 0
    capsys.readouterr()
    assert main(["key", "create", "--account", "acme-broker", "--db", str(db)]) == 0
    key_file = tmp_path / "key.txt"
    key_file.write_text(capsys.readouterr().out.strip(), encoding="utf-8")
    source = tmp_path / "listings.csv"
    pl.read_csv(ROOT / "sample_data" / "portfolio.csv", infer_schema=False).head(60).write_csv(
        source
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "serve", "--port", str(port), "--db", str(db),
         "--rate-limit", "10"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                httpx.get(f"{url}/openapi.json", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        out = tmp_path / "scored.parquet"
        code = main(["score", str(source), "-o", str(out), "--api-url", url,
                     "--api-key-file", str(key_file), "--concurrency", "16",
                     "--journal", str(tmp_path / "job.journal"), "--json"])  # fmt: skip
        summary = json.loads(capsys.readouterr().out)
    finally:
        server.terminate()
        log = server.communicate(timeout=30)[1]

    assert code == 0, summary
    scored = pl.read_parquet(out)
    assert scored.filter(pl.col("status") == "failed").height == 0
    charged = 1000 - json.loads(
        subprocess.run(
            [sys.executable, "-m", "pipeline", "workspace", "show", "acme", "--db", str(db)],
            capture_output=True, text=True, check=True, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        ).stdout
    )["balance"]  # fmt: skip
    assert charged == summary["decisions_spent"] == scored["decisions_used"].sum() > 20
    assert '" 429' in log  # the limit was met, and waited for
