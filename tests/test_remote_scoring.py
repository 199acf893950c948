"""Remote scoring end to end: `run_batch` with HttpScorer against the real service on 127.0.0.1.

Outputs must equal the embedded run's; faults injected by a proxy after the service charged
must never cost a second charge; 402, top-up and the same run again must cost exactly once per
row; the key must never show anywhere.
"""

from __future__ import annotations

import argparse
import json
import logging
import pickle
import sqlite3
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pytest

from pipeline.batch.journal import Journal
from pipeline.batch.labels import PERHAPS_CHARGED
from pipeline.batch.options import BatchOptions
from pipeline.batch.run import BatchOutcome, run_batch
from pipeline.batch.scorers.http import ApiKey, HttpScorer, RemoteConfig
from pipeline.batch.scorers.local import LocalScorer
from pipeline.batch.scorers.remote_options import add_remote_options, remote_scorer_from_args
from pipeline.batch.scorers.retry import set_testing
from pipeline.engine.engine import Engine
from pipeline.errors import InsufficientDecisions, UsageError
from pipeline.ledger.base import ChargeRequest
from pipeline.ledger.sqlite import SqliteLedger
from pipeline.service.limits import ConnectionLimits
from pipeline.settings import Settings
from tests.remote_helpers import charges_by_key, running_proxy
from tests.test_service_fixtures import Service, running_service

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"
PORTFOLIO = SAMPLE / "portfolio.csv"


@pytest.fixture(autouse=True)
def no_sleeps() -> Iterator[None]:
    set_testing(True)
    yield
    set_testing(False)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 150 rows of the portfolio: enough for fault tests, quick to score."""
    path = tmp_path_factory.mktemp("portfolio") / "small.csv"
    pl.read_csv(PORTFOLIO, infer_schema=False).head(150).write_csv(path)
    return path


def paid_rows(outcome: BatchOutcome) -> int:
    """Distinct requests charged: scored rows that are not duplicates of an earlier row."""
    return outcome.results.filter(pl.col("decisions_used") > 0).height


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.default()


@pytest.fixture
def service(tmp_path: Path, engine: Engine) -> Iterator[Service]:
    with running_service(tmp_path, engine, balance=10_000) as running:
        yield running


def remote(url: str, key: str, **config: object) -> HttpScorer:
    return HttpScorer(RemoteConfig(base_url=url, **config), ApiKey(key))  # type: ignore[arg-type]


def score_remote(
    scorer: HttpScorer,
    out: Path,
    *,
    reasoning: str = "none",
    journal: Journal | None = None,
    source: Path = PORTFOLIO,
    budget: int | None = None,
) -> BatchOutcome:
    options = BatchOptions(input=source, outputs=[out], reasoning=reasoning, budget=budget)  # type: ignore[arg-type]
    with scorer:
        outcome = run_batch(options, scorer, journal=journal)
    assert isinstance(outcome, BatchOutcome)
    return outcome


def test_remote_outputs_equal_the_embedded_run(tmp_path, service, engine):
    remote_run = score_remote(
        remote(service.url, service.key), tmp_path / "remote.parquet", reasoning="borderline"
    )
    ledger = SqliteLedger(tmp_path / "embedded.db")
    ledger.create_workspace("local", 10_000)
    embedded = run_batch(
        BatchOptions(
            input=PORTFOLIO, outputs=[tmp_path / "embedded.parquet"], reasoning="borderline"
        ),
        LocalScorer(engine, ledger, workspace="local", chunk_rows=1000),
    )
    assert isinstance(embedded, BatchOutcome)
    assert remote_run.summary.counts_by_status == {
        "scored": 363,
        "rejected": 8,
        "skipped": 0,
        "failed": 0,
    }
    assert remote_run.results.equals(embedded.results)
    written = pl.read_parquet(tmp_path / "remote.parquet")
    assert written.equals(pl.read_parquet(tmp_path / "embedded.parquet"))
    spent = remote_run.summary.decisions_spent
    assert spent == embedded.summary.decisions_spent
    assert service.balance() == 10_000 - spent
    assert remote_run.summary.balance_after == service.balance()
    assert remote_run.summary.balance_before == 10_000  # after + this run's spend


def test_faults_after_the_charge_never_charge_twice(tmp_path, service, small):
    arrival: dict[str, int] = {}  # by order of first arrival: exactly 1 in 15 of each fault

    def decide(key: str, attempt: int) -> str:
        if attempt > 1:
            return "pass"
        order = arrival.setdefault(key, len(arrival))
        return {0: "500", 1: "503", 2: "drop", 3: "429"}.get(order % 15, "pass")

    with running_proxy(service.url, decide) as proxy:
        outcome = score_remote(
            remote(proxy.url, service.key, concurrency=16), tmp_path / "out.parquet", source=small
        )
    assert outcome.exit_code == 0
    assert set(outcome.results["status"]) <= {"scored", "rejected"}
    paid = paid_rows(outcome)
    after_charge = proxy.actions["500"] + proxy.actions["503"] + proxy.actions["drop"]
    assert after_charge > paid // 10  # about 20% of the distinct requests
    assert proxy.actions["429"] > 3
    charges = charges_by_key(service.ledger.entries("acme"))
    assert len(charges) == paid
    assert set(charges.values()) == {1}  # one charge per distinct row: retries were replayed
    assert service.balance() == 10_000 - paid
    assert outcome.results["decisions_used"].sum() == paid
    assert outcome.summary.decisions_spent == paid  # a retry's replay was paid by this run


def test_a_run_past_the_services_connection_limit_waits_for_connections(tmp_path, engine, small):
    # Turned away (503 too_many_connections) before the request is read: never charged, so
    # neither in doubt nor a reason to stop the run; the run takes fewer connections instead.
    limits = ConnectionLimits(max_connections=3)
    with running_service(tmp_path, engine, balance=10_000, limits=limits) as service:
        scorer = remote(service.url, service.key, concurrency=16)
        outcome = score_remote(scorer, tmp_path / "out.parquet", source=small)
        assert outcome.exit_code == 0
        assert set(outcome.results["status"]) <= {"scored", "rejected"}
        assert PERHAPS_CHARGED not in dict(outcome.summary.notes)
        charges = charges_by_key(service.ledger.entries("acme"))
        assert len(charges) == paid_rows(outcome) and set(charges.values()) == {1}
        assert service.balance() == 10_000 - paid_rows(outcome)


@pytest.mark.parametrize("spoilt", ["text score", "huge score", "object verdict"])
def test_an_answer_whose_score_is_not_a_number_fails_its_row_not_the_run(
    tmp_path, service, small, engine, spoilt
):
    spoiled: set[str] = set()  # the first answer of five requests: "score": "75", or 1e20

    def decide(key: str, attempt: int) -> str:
        if attempt == 1 and (key in spoiled or len(spoiled) < 5):
            spoiled.add(key)
            return spoilt
        return "fractional score"

    journal_path, out = tmp_path / "run.journal", tmp_path / "out.parquet"
    with running_proxy(service.url, decide) as proxy:
        first = score_remote(
            remote(proxy.url, service.key), out, journal=Journal(journal_path), source=small
        )
        assert first.exit_code == 1 and out.exists()  # the outputs written, a row each
        failed = first.results.filter(pl.col("status") == "failed")
        assert failed.height == 5 and set(failed["error_code"]) == {"invalid_response"}
        charged = 10_000 - service.balance()
        second = score_remote(
            remote(proxy.url, service.key), out, journal=Journal(journal_path), source=small
        )
    assert second.exit_code == 0
    assert 10_000 - service.balance() == charged  # the five replayed, not paid again
    # a score with decimals (the spec allows them) is rounded, not cut: N + 0.6 reads N + 1
    ledger = SqliteLedger(tmp_path / "embedded.db")
    ledger.create_workspace("local", 10_000)
    embedded = run_batch(
        BatchOptions(input=small, outputs=[tmp_path / "embedded.parquet"]),
        LocalScorer(engine, ledger, workspace="local", chunk_rows=1000),
    )
    assert isinstance(embedded, BatchOutcome)
    assert second.results["score"].dtype == pl.Int64
    assert (
        second.results["score"] - embedded.results["score"]
    ).drop_nulls().unique().to_list() == [1]


def test_answers_lost_after_their_charge_count_against_the_budget(tmp_path, service, small):
    def lose_first_answer(key: str, attempt: int) -> str:
        return "drop" if attempt == 1 and zlib.crc32(key.encode()) % 3 == 0 else "pass"

    with running_proxy(service.url, lose_first_answer) as proxy:
        outcome = score_remote(
            remote(proxy.url, service.key, concurrency=4, chunk_rows=20), tmp_path / "out.parquet",
            source=small, budget=60,
        )  # fmt: skip
    # batches of 20: a budget counting replays as free went on sending (90 charged of 60)
    assert proxy.actions["drop"] > 5  # charged, then answered only by a replay
    charged = 10_000 - service.balance()
    assert outcome.exit_code == 3 and 57 < charged <= 60
    assert outcome.summary.decisions_spent == charged == paid_rows(outcome)


def test_a_rerun_counts_replayed_answers_as_paid_before_not_spent_again(tmp_path, service, small):
    losing = True  # the first run: some answers are lost after their charge, on every attempt

    def answer_lost(key: str, attempt: int) -> str:
        return "500" if losing and zlib.crc32(key.encode()) % 8 == 0 else "pass"

    journal_path = tmp_path / "run.journal"
    out = tmp_path / "out.parquet"
    with running_proxy(service.url, answer_lost) as proxy:  # one URL: the same fingerprints
        first = score_remote(
            remote(proxy.url, service.key), out, journal=Journal(journal_path), source=small
        )
        lost = first.summary.counts_by_status["failed"]
        assert first.exit_code == 1 and lost > 3
        charged = 10_000 - service.balance()
        assert charged == first.summary.decisions_spent + lost  # charged, answers lost
        assert dict(first.summary.notes)[PERHAPS_CHARGED] == lost  # and said so

        losing, sent_before = False, proxy.requests
        second = score_remote(
            remote(proxy.url, service.key), out, journal=Journal(journal_path), source=small
        )
        assert proxy.requests - sent_before == lost  # only those, under their keys
    assert second.exit_code == 0 and second.summary.counts_by_status["failed"] == 0
    assert 10_000 - service.balance() == charged  # replayed by the service, not charged
    assert second.summary.decisions_spent == 0  # and not counted as this run's spending
    assert second.results["decisions_used"].sum() == charged  # resumed: what the job paid
    assert second.summary.balance_after is None  # replays tell the balance of then, not now


def test_requests_in_doubt_a_budget_keeps_back_are_replayed_later_not_paid_again(
    tmp_path, service, small, monkeypatch
):
    record = Journal.record

    def killed_before_the_answers_are_recorded(journal, answers, batch_key):
        raise KeyboardInterrupt  # as kill -9: the batch charged, left `sent` in the journal

    monkeypatch.setattr(Journal, "record", killed_before_the_answers_are_recorded)
    journal_path = tmp_path / "run.journal"
    out = tmp_path / "out.parquet"
    with pytest.raises(KeyboardInterrupt):
        score_remote(remote(service.url, service.key), out, journal=Journal(journal_path),
                     source=small)  # fmt: skip
    monkeypatch.setattr(Journal, "record", record)
    charged = 10_000 - service.balance()
    assert charged > 0

    held = score_remote(  # the requests in doubt, not affordable this time: not sent
        remote(service.url, service.key), out, journal=Journal(journal_path), source=small,
        budget=0,
    )  # fmt: skip
    assert held.exit_code == 3 and 10_000 - service.balance() == charged
    messages = held.results.filter(pl.col("status") == "skipped")["error_message"]
    assert messages.str.contains("a charge made then is replayed").sum() == charged

    last = score_remote(
        remote(service.url, service.key), out, journal=Journal(journal_path), source=small
    )
    assert last.exit_code == 0
    assert 10_000 - service.balance() == last.results["decisions_used"].sum()  # each paid once


def test_a_top_up_during_the_run_is_spent_by_its_rows_cut_for_lack_of_balance(
    tmp_path, engine, small
):
    # The batch is cut to the 40 decisions the balance held when the run began; the workspace
    # is topped up while those are sent: the rest of the batch is scored, not left "spent".
    with running_service(tmp_path, engine, balance=40) as service:

        def colleague_tops_up(request_count: int) -> None:
            if request_count == 20:
                service.ledger.topup("acme", 1_000)

        with running_proxy(service.url, lambda k, a: "pass", colleague_tops_up) as proxy:
            scorer = remote(proxy.url, service.key, concurrency=4)
            assert scorer.identify() == ("acme", 40)  # as `decisions score` asks first
            outcome = score_remote(scorer, tmp_path / "out.parquet", source=small)
        assert outcome.exit_code == 0
        assert set(outcome.results["status"]) <= {"scored", "rejected"}
        assert service.balance() == 1_040 - paid_rows(outcome)
        assert outcome.summary.balance_after == service.balance()


def test_a_run_down_to_its_reserve_stops_there_not_a_few_rows_at_a_time(tmp_path, engine, small):
    # The balance asked again after the batch is the reserve itself: no top-up. (The rest was
    # sent in batches of a few rows, each asking the balance again, until the file ended.)
    with running_service(tmp_path, engine, balance=20) as service:
        with running_proxy(service.url, lambda k, a: "pass") as proxy:
            scorer = remote(proxy.url, service.key, concurrency=4, reserve=5)
            scorer.identify()
            options = BatchOptions(input=small, outputs=[tmp_path / "out.parquet"], reserve=5)
            with scorer:
                outcome = run_batch(options, scorer)
        assert isinstance(outcome, BatchOutcome) and outcome.exit_code == 3
        assert service.balance() == 5 and outcome.summary.decisions_spent == 15
        assert proxy.requests == 1 + 15 + 1  # who pays, the rows it affords, the balance again
        skipped = outcome.results.filter(pl.col("status") == "skipped")["error_message"]
        assert skipped.str.contains("is down to --reserve 5").all()


def test_requests_in_doubt_left_out_of_a_resumed_file_are_replayed_when_they_return(
    tmp_path, service, small, monkeypatch
):
    record = Journal.record

    def killed_before_the_answers_are_recorded(journal, answers, batch_key):
        raise KeyboardInterrupt

    monkeypatch.setattr(Journal, "record", killed_before_the_answers_are_recorded)
    journal_path, out = tmp_path / "run.journal", tmp_path / "out.parquet"
    source = tmp_path / "listings.csv"
    listings = pl.read_csv(small, infer_schema=False)
    listings.write_csv(source)
    with pytest.raises(KeyboardInterrupt):
        score_remote(remote(service.url, service.key), out, journal=Journal(journal_path),
                     source=source)  # fmt: skip
    monkeypatch.setattr(Journal, "record", record)
    charged = 10_000 - service.balance()

    listings.head(listings.height // 2).write_csv(source)  # half the rows in doubt come back
    score_remote(remote(service.url, service.key), out, journal=Journal(journal_path),
                 source=source)  # fmt: skip
    listings.write_csv(source)  # then the other half
    last = score_remote(
        remote(service.url, service.key), out, journal=Journal(journal_path), source=source
    )
    assert last.exit_code == 0 and 10_000 - service.balance() == charged  # none paid twice


def test_a_remote_run_short_of_balance_says_to_top_up_at_the_service(
    tmp_path, engine, small, monkeypatch, capsys
):
    from pipeline.cli import main

    with running_service(tmp_path, engine, balance=20) as service:
        monkeypatch.setenv("DECISIONS_API_KEY", service.key)
        out = tmp_path / "out.parquet"
        argv = ["score", str(small), "-o", str(out), "--api-url", service.url, "--journal",
                str(tmp_path / "run.journal")]  # fmt: skip
        assert main(argv) == 3
    said = capsys.readouterr().out
    assert "Top up the workspace at the service (not a local ledger)" in said
    assert "decisions workspace topup" not in said


def test_402_mid_run_then_topup_then_same_run_pays_each_row_once(tmp_path, service, small):
    drained = threading.Event()

    def colleague_spends_the_rest(requests_seen: int) -> None:
        if requests_seen == 60:
            while True:  # requests in flight are charged meanwhile: read the balance again
                try:
                    service.ledger.charge("acme", ChargeRequest(cost=service.balance() - 10))
                    break
                except InsufficientDecisions:
                    continue
            drained.set()
        elif requests_seen > 60:
            drained.wait(30)  # a request that reaches the proxy meanwhile waits for the drain

    journal_path = tmp_path / "run.journal"
    out = tmp_path / "out.parquet"
    with running_proxy(service.url, lambda k, a: "pass", colleague_spends_the_rest) as proxy:
        first = score_remote(
            remote(proxy.url, service.key), out, journal=Journal(journal_path), source=small
        )
        assert first.exit_code == 3
        statuses = first.summary.counts_by_status
        assert statuses["skipped"] > 0 and statuses["failed"] == 0
        skipped = first.results.filter(pl.col("status") == "skipped")
        assert skipped["error_code"].unique().to_list() == ["insufficient_decisions"]
        assert "run the same command again" in skipped["error_message"][0]
        assert proxy.requests < 60 + 10 + 8  # stopped sending: no retry storm on 402

        service.ledger.topup("acme", 1_000)
        second = score_remote(
            remote(proxy.url, service.key), out, journal=Journal(journal_path), source=small
        )
    assert second.exit_code == 0
    assert set(second.results["status"]) <= {"scored", "rejected"}
    charges = charges_by_key(service.ledger.entries("acme"))
    ours = {k: v for k, v in charges.items() if k != "None"}  # not the colleague's charge
    assert len(ours) == paid_rows(second) and set(ours.values()) == {1}


def test_reserve_leaves_decisions_in_the_shared_balance(tmp_path, engine, small):
    with running_service(tmp_path, engine, balance=100) as service:
        outcome = score_remote(
            remote(service.url, service.key, reserve=30, concurrency=8),
            tmp_path / "o.parquet",
            source=small,
        )
        assert service.balance() == 30
    assert paid_rows(outcome) == 70
    assert outcome.exit_code == 3
    assert outcome.summary.balance_after == 30


def test_balance_runs_out_without_a_402(tmp_path, engine, small):
    with running_service(tmp_path, engine, balance=50) as service:
        with running_proxy(service.url, lambda k, a: "pass") as proxy:
            scorer = remote(proxy.url, service.key, concurrency=8)
            outcome = score_remote(scorer, tmp_path / "o.parquet", source=small)
        assert service.balance() == 0
    assert proxy.requests == 50  # stopped when the known balance could not pay: no 402 sent
    assert scorer.balance() == 0
    assert paid_rows(outcome) == 50 and outcome.exit_code == 3


def test_a_refused_key_stops_the_run_at_once(tmp_path, service, small):
    wrong = service.key[:-4] + ("aaaa" if not service.key.endswith("aaaa") else "bbbb")
    with running_proxy(service.url, lambda k, a: "pass") as proxy:
        scorer = remote(proxy.url, wrong, concurrency=8)
        outcome = score_remote(scorer, tmp_path / "o.csv", source=small)
    assert proxy.requests <= 8  # those in flight when the first 401 came
    assert scorer.stopped_by == "invalid_api_key"
    failed = outcome.results.filter(pl.col("status") == "failed")
    assert failed.height == outcome.results.filter(pl.col("error_field").is_null()).height
    assert set(failed["error_code"]) == {"invalid_api_key"}
    assert (
        "the API key was refused (wrong or revoked); set DECISIONS_API_KEY"
        in (failed["error_message"][0])
    )
    assert outcome.exit_code == 1
    assert service.balance() == 10_000


def test_the_key_is_never_sent_after_a_redirect(tmp_path, service, small):
    """A service that redirects to another host gets no key there: redirects are not followed."""
    with running_proxy(service.url, lambda k, a: "pass") as elsewhere:
        target = elsewhere.url.replace("127.0.0.1", "localhost") + "/v1/decisions"

        from fastapi import FastAPI
        from starlette.responses import RedirectResponse

        from pipeline.service.server import BackgroundServer

        app = FastAPI()

        @app.post("/v1/decisions")
        async def moved() -> RedirectResponse:
            return RedirectResponse(target, status_code=307)

        with BackgroundServer(app) as redirecting:
            scorer = remote(redirecting, service.key)
            outcome = score_remote(scorer, tmp_path / "o.csv", source=small)
    assert elsewhere.requests == 0
    assert scorer.stopped_by == "unexpected_redirect"
    assert outcome.exit_code == 1
    assert service.balance() == 10_000


def test_canary_key_shows_nowhere(tmp_path, service, caplog, small):
    caplog.set_level(logging.DEBUG)
    outputs = [tmp_path / f"scored.{ext}" for ext in ("xlsx", "csv", "parquet")]
    journal = Journal(tmp_path / "journals" / "run.journal")
    key = service.key

    def decide(k: str, attempt: int) -> str:
        return "503" if attempt == 1 and zlib.crc32(k.encode()) % 5 == 0 else "pass"

    with running_proxy(service.url, decide) as proxy:
        scorer = remote(proxy.url, key, concurrency=4)
        options = BatchOptions(input=small, outputs=outputs, reasoning="all")
        with scorer:
            outcome = run_batch(options, scorer, journal=journal)
        refused = remote(proxy.url, key[:-4] + "zzzz")
        with refused:
            run_batch(BatchOptions(input=small, outputs=[tmp_path / "refused.csv"]), refused)
    assert isinstance(outcome, BatchOutcome) and outcome.exit_code == 0
    journal.close()
    secret = key.removeprefix("sk-")
    texts = [caplog.text, repr(scorer), str(scorer), repr(ApiKey(key)), f"{ApiKey(key)}"]
    texts += [str(v) for v in vars(outcome.summary).values()]
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name != "ledger.db":  # the service's own ledger
            data = path.read_bytes()
            assert secret.encode() not in data, path
            if path.suffix == ".xlsx":
                with zipfile.ZipFile(path) as archive:
                    texts += [
                        archive.read(n).decode("utf-8", "replace") for n in archive.namelist()
                    ]
            if path.suffix == ".parquet":
                texts.append(pl.read_parquet(path).write_csv())
    assert not [t for t in texts if secret in t]
    with pytest.raises(TypeError):
        pickle.dumps(ApiKey(key))


# -- options -----------------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_remote_options(parser)
    return parser.parse_args(argv)


def test_no_url_means_embedded():
    assert remote_scorer_from_args(parse(), Settings(), env={}) is None


def test_the_key_comes_from_env_or_a_file(tmp_path):
    with remote_scorer_from_args(
        parse("--api-url", "http://127.0.0.1:9", "--concurrency", "32", "--reserve", "5"),
        Settings(),
        env={"DECISIONS_API_KEY": "sk-canary-env"},
    ) as scorer:
        assert scorer.config.concurrency == 32 and scorer.reserve == 5
        assert "sk-canary" not in repr(scorer)
    key_file = tmp_path / "key"
    key_file.write_text("sk-canary-file\n")
    scorer = remote_scorer_from_args(
        parse("--api-key-file", str(key_file)),
        Settings(),
        env={"DECISIONS_API_URL": "https://api.example.com"},
    )
    assert scorer is not None and scorer.version == "remote:https://api.example.com/"
    assert ApiKey("\ufeffsk-saved-by-notepad\r\n").reveal() == "sk-saved-by-notepad"  # QA


def test_a_url_without_a_key_names_both_ways():
    with pytest.raises(UsageError, match=r"DECISIONS_API_KEY.*--api-key-file"):
        remote_scorer_from_args(parse("--api-url", "http://127.0.0.1:9"), Settings(), env={})


def test_the_key_is_refused_on_the_command_line(capsys):
    with pytest.raises(SystemExit) as exited:
        parse("--api-key", "sk-canary-argv")
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "never accepted on the command line" in err and "sk-canary-argv" not in err


def test_a_key_given_as_the_key_file_is_not_echoed():
    with pytest.raises(UsageError) as raised:
        remote_scorer_from_args(
            parse("--api-url", "http://127.0.0.1:9", "--api-key-file", "sk-canary-path"),
            Settings(),
            env={},
        )
    assert "sk-canary" not in str(raised.value)


def test_plain_http_to_another_host_is_warned_about(caplog):
    env = {"DECISIONS_API_KEY": "sk-canary-http"}
    for url in (
        "http://127.0.0.1:9",
        "http://localhost:9",
        "http://[::1]:9",
        "https://api.example.com",
    ):
        with caplog.at_level("WARNING", logger="pipeline.remote"):
            remote_scorer_from_args(parse("--api-url", url), Settings(), env=env)
    assert not caplog.records
    with caplog.at_level("WARNING", logger="pipeline.remote"):
        remote_scorer_from_args(parse("--api-url", "http://api.example.com"), Settings(), env=env)
    (warning,) = caplog.records
    assert "unencrypted" in warning.getMessage() and "https://" in warning.getMessage()
    assert "sk-canary" not in caplog.text


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://127.0.0.1:9/v1/decisions", "http://127.0.0.1:9"),
        ("https://api.example.com/pd/v1/workspace/", "https://api.example.com/pd"),
    ],
)
def test_an_endpoint_given_as_the_base_address_is_refused_before_anything_is_sent(url, base):
    """QA 58: with --workspace (no GET /v1/workspace to fail first), every row went to
    .../v1/decisions/v1/decisions, was answered 404, and the output was written all failed."""
    with pytest.raises(UsageError, match="must be the service's base address") as raised:
        remote_scorer_from_args(parse("--api-url", url), Settings(), env={"DECISIONS_API_KEY": "k"})
    assert repr(base) in str(raised.value)


def test_credentials_in_the_url_are_refused():
    with pytest.raises(UsageError) as raised:
        remote_scorer_from_args(
            parse("--api-url", "https://user:sk-canary@api.example.com"),
            Settings(),
            env={"DECISIONS_API_KEY": "sk-x"},
        )
    assert "sk-canary" not in str(raised.value)


def test_the_score_command_scores_through_the_service(tmp_path, service, monkeypatch, capsys):
    from pipeline.cli import main

    monkeypatch.setenv("DECISIONS_API_KEY", service.key)
    out = tmp_path / "remote.csv"
    argv = ["score", str(PORTFOLIO), "-o", str(out), "--api-url", service.url,
            "--journal", str(tmp_path / "job.journal"), "--json"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["decisions_spent"] == 360 == 10_000 - service.balance()
    assert summary["balance_after"] == service.balance()
    assert summary["balance_before"] == 10_000
    assert main(argv) == 0  # the journal answers the rerun: nothing sent, nothing paid
    assert json.loads(capsys.readouterr().out)["decisions_spent"] == 0
    assert service.balance() == 10_000 - 360
    assert service.key not in out.read_text(encoding="utf-8-sig")


def test_a_refused_key_exits_2_before_anything_is_sent(tmp_path, service, monkeypatch, capsys):
    from pipeline.cli import main

    monkeypatch.setenv("DECISIONS_API_KEY", "sk-" + "a" * 40)
    out = tmp_path / "remote.csv"
    code = main(["score", str(PORTFOLIO), "-o", str(out), "--api-url", service.url,
                 "--journal", str(tmp_path / "job.journal"), "--quiet"])  # fmt: skip
    assert code == 2  # asked GET /v1/workspace first: a configuration error, nothing sent
    assert "the API key was refused" in capsys.readouterr().err
    assert service.balance() == 10_000


def test_a_service_that_cannot_be_reached_stops_the_run_before_anything(
    tmp_path, monkeypatch, capsys
):
    # Found by QA: a wrong port passed the dry run, and the run replaced the last good output
    # with failed rows.
    import socket

    from pipeline.batch.scorers import retry
    from pipeline.cli import main

    monkeypatch.setattr(retry, "_testing", True)  # its retries without their waits
    monkeypatch.setenv("DECISIONS_API_KEY", "sk-" + "a" * 40)
    out = tmp_path / "remote.csv"
    out.write_text("last night's output")
    with socket.socket() as unreachable:  # bound, never listening: refused, and no one else's
        unreachable.bind(("127.0.0.1", 0))
        port = unreachable.getsockname()[1]
        for extra in ("--dry-run", "--quiet"):
            code = main(["score", str(PORTFOLIO), "-o", str(out), "--api-url",
                         f"http://127.0.0.1:{port}", "--journal", str(tmp_path / "j.journal"),
                         extra])  # fmt: skip
            assert code == 2
            assert f"the service at http://127.0.0.1:{port}/ cannot be reached" in (
                capsys.readouterr().err
            )
    assert out.read_text() == "last night's output"


def test_the_same_service_under_another_address_is_refused_not_paid_again(
    tmp_path, service, monkeypatch, capsys, small
):
    # Found by QA: 127.0.0.1 then localhost paid every row again, those in doubt included.
    from pipeline.cli import main

    settings = tmp_path / "settings.toml"
    settings.write_text(f'[batch]\njournal_dir = "{tmp_path / "journals"}"\n', encoding="utf-8")
    monkeypatch.setenv("DECISIONS_SETTINGS", str(settings))
    monkeypatch.setenv("DECISIONS_API_KEY", service.key)
    first, other = f"{service.url}/", service.url.replace("127.0.0.1", "localhost") + "/"
    base = ["score", str(small), "-o", str(tmp_path / "o.csv"), "--quiet"]
    for journal in ([], ["--journal", str(tmp_path / "j.journal")]):  # default, then named
        assert main([*base, *journal, "--api-url", first]) == 0
        paid = 10_000 - service.balance()
        for extra in ([], ["--dry-run"]):
            assert main([*base, *journal, "--api-url", other, *extra]) == 2
            err = capsys.readouterr().err
            assert (
                f"this job's requests went to {first}, and this run would send them to "
                f"{other}" in err
            )
            assert f"Run with --api-url {first} if that is the same service" in err
        assert 10_000 - service.balance() == paid
    assert main([*base, "--api-url", other, "--fresh"]) == 0  # asked for: paid again
    assert main([*base, "--api-url", other]) == 0  # and the job now goes there
    assert len(list((tmp_path / "journals").glob("*.journal"))) == 1


@pytest.fixture
def default_journals(tmp_path, service, monkeypatch, small) -> list[str]:
    """`decisions score` of `small` through `service`, its journal the default one of a
    journal folder of the test's own."""
    settings = tmp_path / "settings.toml"
    settings.write_text(f'[batch]\njournal_dir = "{tmp_path / "journals"}"\n', encoding="utf-8")
    monkeypatch.setenv("DECISIONS_SETTINGS", str(settings))
    monkeypatch.setenv("DECISIONS_API_KEY", service.key)
    return ["score", str(small), "-o", str(tmp_path / "o.csv"), "--quiet", "--api-url", service.url]


def test_two_services_behind_one_host_are_two_services(
    tmp_path, service, monkeypatch, capsys, small
):
    # Found by QA: the journal recorded the address without the path of --api-url, so a job
    # scored through https://gw/staging was answered from its journal through https://gw/prod:
    # the production workspace had staging's answers, never charged.
    from pipeline.cli import main

    monkeypatch.setenv("DECISIONS_API_KEY", service.key)
    with running_proxy(service.url, lambda key, attempt: "pass") as gateway:
        argv = ["score", str(small), "-o", str(tmp_path / "o.csv"), "--quiet",
                "--journal", str(tmp_path / "job.journal"), "--api-url"]  # fmt: skip
        assert main([*argv, f"{gateway.url}/staging"]) == 0
        paid = 10_000 - service.balance()
        assert main([*argv, f"{gateway.url}/staging/"]) == 0  # the same service: reused
        assert main([*argv, f"{gateway.url}/prod"]) == 2
        err = capsys.readouterr().err
        assert f"went to {gateway.url}/staging/, and this run would send them to" in err
        # a journal of the version before, which recorded the host alone, goes on
        with sqlite3.connect(tmp_path / "job.journal") as db:
            db.execute("DELETE FROM meta WHERE name = 'service_address'")
            db.execute("INSERT INTO meta VALUES ('service', ?)", (f"{gateway.url}/",))
        assert main([*argv, f"{gateway.url}/staging"]) == 0
        assert main([*argv, f"{gateway.url}/prod"]) == 2  # and records the path from then on
        root = ["--journal", str(tmp_path / "root.journal")]  # a job at the gateway's root
        assert main([*argv[:-1], *root, "--api-url", gateway.url]) == 0
        paid = 10_000 - service.balance()
        assert main([*argv[:-1], *root, "--api-url", f"{gateway.url}/staging"]) == 2
    assert 10_000 - service.balance() == paid


def test_one_run_at_a_time_of_a_workspaces_job_whatever_its_journal_is_named(
    tmp_path, service, capsys, default_journals, small
):
    # Found by QA: two first runs of one job, with and without --workspace naming the key's
    # own workspace, locked two journal names, and both paid every row; and (the next pass)
    # locking every name kept another workspace's own job on the same input from running.
    import os
    import subprocess
    import sys

    from pipeline.cli import main

    service.ledger.create_workspace("beta", 1_000)
    service.accounts.create_account("beta-agency", "beta", "agency")
    beta_key = tmp_path / "beta.key"
    beta_key.write_text(service.accounts.create_key("beta-agency").key, encoding="utf-8")
    gate, sent = threading.Event(), threading.Event()

    def hold_the_first_decision(request_number: int) -> None:
        if request_number >= 2:  # after GET /v1/workspace
            sent.set()
            gate.wait(60)

    root = Path(__file__).resolve().parents[1]
    with running_proxy(service.url, lambda key, attempt: "pass", hold_the_first_decision) as proxy:
        first = subprocess.Popen(
            [sys.executable, "-m", "pipeline", *default_journals[:-1], proxy.url,
             "--workspace", "acme", "--concurrency", "1"],
            cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert sent.wait(60)  # acme's run, under its --workspace name, is under way
            assert main(default_journals) == 2  # acme's job under its other name: refused
            assert "another run of this job is in progress" in capsys.readouterr().err
            assert main([*default_journals, "--api-key-file", str(beta_key)]) == 0  # beta's own
        finally:
            gate.set()
            assert first.wait(60) == 0, first.stderr.read() if first.stderr else ""
        paid = 10_000 - service.balance()
        assert paid > 0 and service.ledger.workspace("beta").balance < 1_000
        again = [*default_journals[:-1], proxy.url]
        assert main(again) == 0  # the same job, under its other name: nothing paid again
        assert 10_000 - service.balance() == paid


def test_a_job_paid_by_a_workspace_is_refused_to_a_key_the_service_does_not_place(
    tmp_path, service, monkeypatch, capsys, default_journals
):
    # Found by QA: a 404 to GET /v1/workspace (an --api-url ending in /v1/decisions, a
    # maintenance page) skipped the check of who paid: another workspace's key was handed the
    # job's answers, and paid again for its rows in doubt; with --workspace, the same
    # workspace started a second journal and paid the file twice.
    from pipeline.cli import main

    base = default_journals
    assert main([*base, "--budget", "40"]) == 3
    monkeypatch.setattr(HttpScorer, "identify", lambda self: None)  # the workspace not said
    for extra in ([], ["--workspace", "acme"], ["--dry-run"]):
        assert main([*base, *extra]) == 2
        assert "this job was paid by workspace 'acme', and the service did not say" in (
            capsys.readouterr().err
        )
    assert 10_000 - service.balance() == 40
    monkeypatch.undo()
    monkeypatch.setenv("DECISIONS_API_KEY", service.key)
    monkeypatch.setenv("DECISIONS_SETTINGS", str(tmp_path / "settings.toml"))
    assert main([*base, "--workspace", "acme"]) == 0  # its own workspace named: the same job
    used = pl.read_csv(tmp_path / "o.csv")["decisions_used"].sum()  # each request once
    assert 10_000 - service.balance() == used


def test_unplaced_keys_name_their_workspace_and_never_take_a_placed_job(
    tmp_path, service, monkeypatch, capsys, default_journals
):
    # Found by QA: a job run with --workspace acme, rerun through a service not placing the
    # key, started a new journal and paid again; a journal made by such a run was taken over
    # by another workspace's key; --fresh with such a key wiped a job acme had paid for.
    from pipeline.batch.job_files import journal_path, paid_by
    from pipeline.cli import main

    base = default_journals
    assert main([*base, "--workspace", "acme", "--budget", "40"]) == 3
    placed = HttpScorer.identify
    monkeypatch.setattr(HttpScorer, "identify", lambda self: None)  # the workspace not said
    explicit = ["--journal", str(tmp_path / "own.journal")]
    for extra in ([], ["--workspace", "acme"], ["--workspace", "acme", "--fresh"], explicit):
        assert main([*base, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert "the service did not say which workspace" in err
    assert 10_000 - service.balance() == 40
    monkeypatch.setattr(HttpScorer, "identify", placed)
    assert main(base) == 0  # placed again, without --workspace: the job of step one, not the
    # empty journal a refused run left under its name (found by QA)
    assert 10_000 - service.balance() == pl.read_csv(tmp_path / "o.csv")["decisions_used"].sum()
    paid = 10_000 - service.balance()
    monkeypatch.setattr(HttpScorer, "identify", lambda self: None)

    spec_only = [*base, "-o", str(tmp_path / "spec.csv"), "--workspace", "team"]
    spec_only[spec_only.index(str(tmp_path / "o.csv"))] = str(tmp_path / "first.csv")
    assert main([*spec_only, "--budget", "10"]) == 3  # a service of the spec alone: as named
    capsys.readouterr()
    assert main([*spec_only, "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]  # QA 58: "Balance before" twice
    assert notes["Balance before, counted as"] == "the service's last answer plus this run's spend"
    assert (
        10_000 - service.balance()
        == paid + pl.read_csv(tmp_path / "spec.csv")["decisions_used"].sum()
    )
    monkeypatch.setattr(HttpScorer, "identify", placed)
    assert main(spec_only) == 2  # the key placed now: acme's, not the team's the job names
    journals = tmp_path / "journals"
    assert paid_by(journal_path(journals, Path(base[1]), "remote:team")) == ("team", False)


def test_naming_the_keys_own_workspace_is_the_same_job(
    tmp_path, service, monkeypatch, capsys, default_journals
):
    # Found by QA: adding --workspace acme (the key's own) started another journal, paying again.
    from pipeline.cli import main

    base = default_journals
    assert main([*base, "--budget", "40"]) == 3
    assert main([*base, "--workspace", "acme"]) == 0
    used = pl.read_csv(tmp_path / "o.csv")["decisions_used"].sum()
    assert 10_000 - service.balance() == used  # the first 40 not paid again

    service.ledger.create_workspace("beta", 1_000)  # a colleague's workspace, the same file
    service.accounts.create_account("beta-agency", "beta", "agency")
    monkeypatch.setenv("DECISIONS_API_KEY", service.accounts.create_key("beta-agency").key)
    assert main(base) == 2  # acme's answers are not beta's
    assert main([*base, "--fresh"]) == 2  # nor beta's to wipe (found by QA: acme paid again)
    assert main([*base, "--workspace", "beta"]) == 0  # as the refusal says: beta's own job
    assert 1_000 - service.ledger.workspace("beta").balance == used
    assert 10_000 - service.balance() == used  # acme's job untouched

    monkeypatch.setattr(HttpScorer, "identify", lambda self: None)  # beta's key not placed:
    assert main([*base, "--workspace", "beta"]) == 2  # its own job, which the service placed
    assert "paid by workspace 'beta'" in capsys.readouterr().err  # (acme's is not the reason)
    service.ledger.create_workspace("gamma", 1_000)  # a third, never placed: its own job
    service.accounts.create_account("gamma-agency", "gamma", "agency")
    monkeypatch.setenv("DECISIONS_API_KEY", service.accounts.create_key("gamma-agency").key)
    assert main([*base, "--workspace", "gamma"]) == 0  # not refused for acme's job
    assert 1_000 - service.ledger.workspace("gamma").balance == used


def test_a_journal_paid_by_one_workspace_is_not_reused_by_another(
    tmp_path, service, monkeypatch, capsys, small
):
    from pipeline.cli import main

    service.ledger.create_workspace("beta", 1_000)
    service.accounts.create_account("beta-agency", "beta", "agency")
    beta_key = service.accounts.create_key("beta-agency").key
    argv = ["score", str(small), "-o", str(tmp_path / "o.csv"), "--api-url", service.url,
            "--journal", str(tmp_path / "job.journal"), "--json"]  # fmt: skip
    monkeypatch.setenv("DECISIONS_API_KEY", beta_key)
    assert main([*argv, "--dry-run"]) == 0  # a dry run claims nothing
    capsys.readouterr()
    monkeypatch.setenv("DECISIONS_API_KEY", service.key)
    assert main(argv) == 0
    paid = 10_000 - service.balance()
    assert json.loads(capsys.readouterr().out)["workspace"] == "acme"

    monkeypatch.setenv("DECISIONS_API_KEY", beta_key)
    assert main(argv) == 2  # beta would have had acme's answers for nothing
    assert main([*argv, "--dry-run"]) == 2  # and says so before anything is paid
    # --fresh would forget acme's answers (acme paying them all again) and give beta the job
    assert main([*argv, "--fresh"]) == 2 and main([*argv, "--dry-run", "--fresh"]) == 2
    assert "paid by workspace 'acme'" in capsys.readouterr().err
    # under another address too, told who paid, not sent to --fresh as for another service
    elsewhere = [a.replace("127.0.0.1", "localhost") for a in argv]
    assert main(elsewhere) == 2
    err = capsys.readouterr().err
    assert "paid by workspace 'acme'" in err and "--fresh" not in err
    assert service.ledger.workspace("beta").balance == 1_000

    rotated = service.accounts.create_key("acme-broker").key  # acme's new key: same job
    service.accounts.revoke_key(service.key)
    monkeypatch.setenv("DECISIONS_API_KEY", rotated)
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["decisions_spent"] == 0
    assert 10_000 - service.balance() == paid


def test_the_reserve_holds_from_the_first_request(tmp_path, engine, small):
    with running_service(tmp_path, engine, balance=1_000) as service:
        scorer = remote(service.url, service.key, reserve=999)
        assert scorer.identify() == ("acme", 1_000)
        outcome = score_remote(scorer, tmp_path / "o.parquet", source=small, reasoning="all")
        assert service.balance() == 1_000  # 3 decisions would have left 997 < 999
    assert outcome.exit_code == 3 and paid_rows(outcome) == 0


def test_a_balance_stop_that_leaves_a_row_in_doubt_still_says_how_to_go_on(
    tmp_path, engine, small, monkeypatch, capsys
):
    # Found by QA: a row cut short by the stop (charged, its answers lost) makes the run exit 1,
    # and the message to top up and run the same command again, printed only on exit 3, was
    # not printed at all: cron mailed a failure with nothing to act on.
    from pipeline.cli import main

    answer_lost = _first_request_fails()  # charged, its answers lost on every attempt
    with running_service(tmp_path, engine, balance=30) as service:
        monkeypatch.setenv("DECISIONS_API_KEY", service.key)
        with running_proxy(service.url, answer_lost) as proxy:
            argv = ["score", str(small), "-o", str(tmp_path / "out.parquet"), "--api-url",
                    proxy.url, "--journal", str(tmp_path / "run.journal"), "--json"]  # fmt: skip
            capsys.readouterr()
            assert main(argv) == 1
    said = capsys.readouterr()
    record = json.loads(said.out)
    assert record["status"]["failed"] >= 1 and record["status"]["skipped"] > 0
    assert "Top up the workspace at the service" in said.err


def test_an_explanation_that_failed_says_the_row_was_scored(tmp_path, service, small):
    # Found by QA: a failed explanation's message was the request's ("the service answered
    # HTTP 500 ..."), as if the row had failed; a skipped one's says "scored, but not explained".
    seen: set[str] = set()
    explaining = False

    def explanations_fail(key: str, attempt: int) -> str:
        if not explaining:
            seen.add(key)
        return "500" if explaining and key and key not in seen else "pass"

    journal = Journal(tmp_path / "run.journal")
    out = tmp_path / "out.parquet"
    with running_proxy(service.url, explanations_fail) as proxy:
        score_remote(remote(proxy.url, service.key), out, journal=journal, source=small)
        explaining = True
        outcome = score_remote(
            remote(proxy.url, service.key), out, reasoning="borderline",
            journal=Journal(tmp_path / "run.journal"), source=small,
        )  # fmt: skip
    unexplained = outcome.results.filter(pl.col("error_code") == "reasoning_failed")
    assert unexplained.height > 0 and set(unexplained["status"]) == {"scored"}
    assert unexplained["error_message"][0].startswith("scored, but not explained: the service")


def test_a_run_whose_rows_failed_says_how_to_go_on_even_quiet(
    tmp_path, engine, small, monkeypatch, capsys
):
    """QA round 32: rows whose retries ran out (409 while a killed server's requests were in
    flight, 500s) made a run exit 1 with nothing on stderr under --quiet, and no `error` in
    the --json record: cron mailed a bare failure."""
    from pipeline.batch.scorers import retry
    from pipeline.cli import main

    monkeypatch.setattr(retry, "_testing", True)  # its retries without their waits
    busy_for_one = _first_request_fails()
    with running_service(tmp_path, engine, balance=10_000) as service:
        monkeypatch.setenv("DECISIONS_API_KEY", service.key)
        with running_proxy(service.url, busy_for_one) as proxy:
            argv = ["score", str(small), "-o", str(tmp_path / "out.parquet"), "--api-url",
                    proxy.url, "--journal", str(tmp_path / "run.journal")]  # fmt: skip
            capsys.readouterr()
            assert main([*argv, "--quiet"]) == 1
            said = capsys.readouterr()
            assert said.out == ""
            assert "row(s) failed (the first: " in said.err
            assert "run the same command again (later, if the service was busy)" in said.err
            assert main([*argv, "--json"]) == 1
            said = capsys.readouterr()
    record = json.loads(said.out)
    assert record["status"]["failed"] >= 1 and record["exit_code"] == 1
    assert record["error"].startswith(f"{record['status']['failed']} row(s) failed")


def test_a_run_locked_out_by_a_run_of_the_same_file_says_how_another_workspace_runs_beside(
    tmp_path, service, monkeypatch, capsys, small
):
    """QA round 34: workspace B's key, on a file whose default job another workspace's run
    held, was told to wait; after waiting it was refused for another reason (the job paid by
    A). It is told now that --workspace gives it a job of its own, run at once."""
    from pipeline.batch.job_files import job_lock, journal_path
    from pipeline.cli import main

    journals = tmp_path / "journals"
    settings = tmp_path / "settings.toml"
    settings.write_text(f'[batch]\njournal_dir = "{journals}"\n', encoding="utf-8")
    monkeypatch.setenv("DECISIONS_SETTINGS", str(settings))
    monkeypatch.setenv("DECISIONS_API_KEY", service.key)
    argv = ["score", str(small), "-o", str(tmp_path / "o.csv"), "--api-url", service.url]
    with job_lock(journal_path(journals, small, "remote:")):  # A's run of the file, under way
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert "another run of this job is in progress" in err
    assert "give this one --workspace NAME" in err
    assert service.balance() == 10_000


def _first_request_fails() -> Callable[[str, int], str]:
    """A proxy's decision: the first keyed request answered 500 on every attempt (after its
    charge), every other one passed."""
    failing: list[str] = []

    def decide(key: str, attempt: int) -> str:
        if key and not failing:
            failing.append(key)
        return "500" if key and key == failing[0] else "pass"

    return decide
