"""`decisions nightly`: dated outputs, a manifest, and a second night that pays nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest

from pipeline.batch import nightly
from pipeline.cli import main
from pipeline.errors import OutputError
from pipeline.ledger.sqlite import SqliteLedger
from tests.benchmark_tables import malformed_settings, said_clearly

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"
NIGHT = date(2026, 11, 24)


@pytest.fixture(autouse=True)
def _one_night(monkeypatch):
    """Every run of a test on one night: midnight passing during a test made two (QA 57)."""
    monkeypatch.setattr(nightly, "tonight", lambda: NIGHT)


def _project(root: Path) -> Path:
    """A project folder at `root` whose settings use the sample benchmarks; its configs/."""
    configs = root / "configs"
    configs.mkdir()
    (configs / "settings.toml").write_text(
        f'[benchmarks]\ntable = "{SAMPLE / "benchmarks.csv"}"\n', encoding="utf-8"
    )
    return configs


def _ledger(root: Path, balance: int = 100_000) -> str:
    """A ledger whose local workspace holds `balance`: a nightly run never starts one."""
    db = str(root / "ledger.db")
    assert main(["workspace", "create", "local", "--balance", str(balance), "--db", db]) == 0
    return db


def test_two_nights_dated_outputs_manifest_and_no_second_payment(tmp_path, monkeypatch):
    configs = _project(tmp_path)
    (configs / "nightly.toml").write_text(
        f'input = "{SAMPLE / "portfolio.csv"}"\noutput_dir = "out/nightly"\n'
        'formats = ["xlsx", "parquet"]\nbudget = 1000\nreasoning = "none"\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    db = _ledger(tmp_path)

    assert main(["nightly", "--db", db]) == 0
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    assert (night / "portfolio-scored.xlsx").exists() and (
        night / "portfolio-scored.parquet"
    ).exists()
    manifest = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["decisions_spent"] == 360
    assert manifest["status"] == {"scored": 363, "rejected": 8, "skipped": 0, "failed": 0}
    assert manifest["balance_before"] - manifest["balance_after"] == 360
    assert manifest["exit_code"] == 0 and manifest["input_sha256"]
    assert manifest["scorer"].startswith("embedded:formula-")

    assert main(["nightly", "--db", db]) == 0
    again = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert again["decisions_spent"] == 0 and again["notes"]["Budget"] == 640  # left tonight
    earlier = list(night.glob("manifest-*.json"))  # the first run's record is kept
    assert len(earlier) == 1
    assert json.loads(earlier[0].read_text(encoding="utf-8"))["decisions_spent"] == 360


def test_a_rerun_the_same_night_spends_only_what_is_left_of_the_nights_budget(
    tmp_path, monkeypatch, capsys
):
    """QA 50: `budget` is "the most decisions one night may spend", yet each run of the night
    had all of it: three runs spent three budgets."""
    configs = _project(tmp_path)
    (configs / "nightly.toml").write_text(
        f'input = "{SAMPLE / "portfolio.csv"}"\nformats = ["parquet"]\nbudget = 200\n'
        'reasoning = "none"\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    db = _ledger(tmp_path)
    assert main(["nightly", "--db", db]) == 3
    capsys.readouterr()
    assert main(["nightly", "--db", db]) == 3
    said = capsys.readouterr().out
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    again = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert again["decisions_spent"] == 0 and 100_000 - again["balance_after"] == 200
    assert "Raise `budget` in configs/nightly.toml (200 a night, 200 spent by earlier runs)" in said
    # another job's records in the folder (a failed run's, kept aside) are not this job's spend
    for n, record in enumerate(night.glob("manifest-*.json")):
        other = json.loads(record.read_text(encoding="utf-8"))
        other["input"] = str(tmp_path / "another.csv")
        record.with_name(f"manifest-another-{n}.json").write_text(json.dumps(other), "utf-8")
    (configs / "nightly.toml").write_text(
        f'input = "{SAMPLE / "portfolio.csv"}"\nformats = ["parquet"]\nbudget = 300\n',
        encoding="utf-8",
    )
    assert main(["nightly", "--db", db]) == 3  # the 200 paid reused, 100 more paid
    third = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert third["decisions_spent"] == 100 and third["notes"]["Budget"] == 100


def test_a_latest_link_repointed_the_same_day_is_the_same_job(tmp_path, monkeypatch):
    # Found by QA: the manifest recorded the input with its link followed, so a rerun after
    # the export's link moved was refused as another job's night.
    configs = _project(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    listings = (SAMPLE / "portfolio.csv").read_text(encoding="utf-8")
    (data / "export-1.csv").write_text(listings, encoding="utf-8")
    (data / "export-2.csv").write_text(listings.replace(",1254000,", ",1254001,"), encoding="utf-8")
    (data / "latest.csv").symlink_to("export-1.csv")
    (configs / "nightly.toml").write_text(
        'input = "data/latest.csv"\noutput_dir = "out/nightly"\nformats = ["parquet"]\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    db = _ledger(tmp_path)
    assert main(["nightly", "--db", db]) == 0
    (data / "latest.csv").unlink()
    (data / "latest.csv").symlink_to("export-2.csv")
    assert main(["nightly", "--db", db]) == 0
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    manifest = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert 0 < manifest["decisions_spent"] < 10  # the rows whose price moved
    assert manifest["input"] == str(data / "latest.csv")

    # a manifest of a version before 2026-11-25 named the file the link led to: same job
    manifest["input"] = str(data / "export-2.csv")
    (night / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert main(["nightly", "--db", db]) == 0


def test_two_jobs_sharing_an_output_folder_are_told_apart_not_overwritten(
    tmp_path, monkeypatch, capsys
):
    configs = _project(tmp_path)
    other = tmp_path / "agency-b" / "portfolio.csv"  # the same file name, another job
    other.parent.mkdir()
    other.write_text((SAMPLE / "portfolio.csv").read_text(encoding="utf-8-sig")[:2000])
    for name, source in (("a.toml", SAMPLE / "portfolio.csv"), ("b.toml", other)):
        (configs / name).write_text(
            f'input = "{source}"\noutput_dir = "out/nightly"\nformats = ["csv", "csv"]\n',
            encoding="utf-8",
        )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    db = _ledger(tmp_path)
    assert main(["nightly", "--config", str(configs / "a.toml"), "--db", db]) == 0
    assert main(["nightly", "--config", str(configs / "b.toml"), "--db", db]) == 2
    assert "give each nightly job its own output_dir" in capsys.readouterr().err
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    manifest = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["input"] == str(SAMPLE / "portfolio.csv") and manifest["rows"] == 371
    assert len(manifest["outputs"]) == 1  # csv asked twice, written once


def test_a_nightly_job_takes_a_column_mapping_and_the_options_of_score(
    tmp_path, monkeypatch, capsys
):
    configs = _project(tmp_path)
    source = tmp_path / "export.csv"
    source.write_bytes(
        "Kind;Asking;Size;Town\nvilla;3200000;400;الرياض\nشقة;900000;150;جدة\n".encode("cp1256")
    )
    (configs / "mine.toml").write_text(
        '[columns]\ntype = "Kind"\nprice = "Asking"\narea = "Size"\ncity = "Town"\n',
        encoding="utf-8",
    )
    (configs / "nightly.toml").write_text(
        f'input = "{source}"\ncolumns = "configs/mine.toml"\nencoding = "cp1256"\n'
        'priority = "Asking"\nbudget = 1\nformats = ["parquet"]\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    assert main(["nightly", "--db", _ledger(tmp_path)]) == 3  # budget 1: one row
    # how to go on names the budget where a nightly job sets it (it has no --budget; QA 28)
    said = capsys.readouterr().out
    assert "Raise `budget` in configs/nightly.toml, then run the same command again" in said
    assert "--budget," not in said
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    import polars as pl

    scored = pl.read_parquet(night / "export-scored.parquet")
    assert scored["Town"].to_list() == ["الرياض", "جدة"]  # read as cp1256
    assert scored["status"].to_list() == ["scored", "skipped"]  # the dearer one first
    # and so does the row left, in the output an analyst opens
    left = scored["error_message"][1]
    assert "the run's `budget` in configs/nightly.toml is spent" in left
    assert "raise `budget` in configs/nightly.toml, then run the same command again" in left
    assert "--budget" not in left


def test_a_failed_rerun_leaves_the_nights_manifest_and_another_workspace_is_another_job(
    tmp_path, monkeypatch, capsys
):
    configs = _project(tmp_path)
    source = tmp_path / "portfolio.xlsx"
    source.write_bytes((SAMPLE / "portfolio.xlsx").read_bytes())
    (configs / "nightly.toml").write_text(
        'input = "portfolio.xlsx"\nsheet = 0\nformats = ["csv"]\n', encoding="utf-8"
    )
    (configs / "beta.toml").write_text(
        'input = "portfolio.xlsx"\nworkspace = "beta"\nformats = ["csv"]\n', encoding="utf-8"
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    db = _ledger(tmp_path)
    assert main(["workspace", "create", "beta", "--balance", "1000", "--db", db]) == 0
    assert main(["nightly", "--db", db]) == 0  # sheet = 0: a position, as score takes it
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    first = (night / "manifest.json").read_text(encoding="utf-8")
    assert json.loads(first)["input"] == str(source)  # resolved: comparable from anywhere

    assert main(["nightly", "--config", str(configs / "beta.toml"), "--db", db]) == 2
    assert "another job" in capsys.readouterr().err

    source.unlink()  # tonight's rerun fails before it writes anything
    assert main(["nightly", "--db", db]) == 2
    assert (night / "manifest.json").read_text(encoding="utf-8") == first


def test_a_night_that_stops_before_its_summary_still_leaves_a_manifest(tmp_path, monkeypatch):
    configs = _project(tmp_path)
    (configs / "nightly.toml").write_text(
        'input = "exports/portfolio.csv"\nformats = ["csv"]\n', encoding="utf-8"
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    db = _ledger(tmp_path)

    assert main(["nightly", "--db", db]) == 2  # tonight's export never arrived
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    failed = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert failed["exit_code"] == 2 and failed["decisions_spent"] == 0
    assert "portfolio.csv" in failed["error"] and failed["outputs"] == []
    assert failed["input"] == str(tmp_path / "exports" / "portfolio.csv")
    (tmp_path / "exports").mkdir()
    (tmp_path / "exports" / "portfolio.csv").write_text("address,price\nsomewhere,1\n")
    assert main(["nightly", "--db", db]) == 2  # a file of another shape: the newer failure
    failed = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert "type" in failed["error"] and len(list(night.glob("manifest-*.json"))) == 1

    # the real export arrives; the rerun is the same job, not another
    (tmp_path / "exports" / "portfolio.csv").write_bytes((SAMPLE / "portfolio.csv").read_bytes())
    assert main(["nightly", "--db", db]) == 0
    manifest = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["exit_code"] == 0 and manifest["decisions_spent"] == 360
    assert "error" not in manifest


def test_a_remote_night_run_twice_is_one_job(tmp_path, monkeypatch):
    from pipeline.engine.engine import Engine
    from tests.test_service_fixtures import running_service

    configs = _project(tmp_path)
    (configs / "nightly.toml").write_text(
        f'input = "{SAMPLE / "portfolio.csv"}"\nformats = ["csv"]\nworkspace = "acme-eu"\n',
        encoding="utf-8",
    )  # a workspace name the key does not spend from: it names the journal only
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    with running_service(tmp_path / "service", Engine.default(), balance=1000) as service:
        monkeypatch.setenv("DECISIONS_API_URL", service.url)
        monkeypatch.setenv("DECISIONS_API_KEY", service.key)
        assert main(["nightly"]) == 0
        assert main(["nightly"]) == 0  # after a top-up, say: the same job, not "another job"
        assert service.balance() == 640
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    manifest = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["workspace"] == "acme"  # the workspace that paid


@pytest.mark.parametrize("stopped_at", [None, 120], ids=["run-ended", "run-stopped"])
def test_a_remote_nights_answers_lost_after_their_charge_count_against_its_budget(
    tmp_path, monkeypatch, stopped_at
):
    """QA 70: requests charged whose answers were all lost are in doubt, in none of the run's
    Decisions spent (nor in a stopped run's record at all, and a stopped run sent more while it
    closed); the night's rerun replayed them free and had their share of the budget again (100
    a night, 111 to 114 spent; 113 to 120 when the first run was stopped)."""
    import _thread
    import signal
    import zlib

    from pipeline.batch.labels import PERHAPS_CHARGED
    from pipeline.batch.scorers.retry import set_testing
    from pipeline.engine.engine import Engine
    from tests.remote_helpers import running_proxy
    from tests.test_service_fixtures import running_service

    configs = _project(tmp_path)
    (configs / "nightly.toml").write_text(
        f'input = "{SAMPLE / "portfolio.csv"}"\nformats = ["csv"]\nbudget = 100\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    losing = True  # the first run: some answers lost after their charge, on every attempt

    def answer_lost(key: str, attempt: int) -> str:
        lost = losing and key and zlib.crc32(key.encode()) % 8 == 0  # (no key: GET /v1/workspace)
        return "500" if lost else "pass"

    def stop(requests: int) -> None:
        if losing and requests == stopped_at:
            _thread.interrupt_main(signal.SIGTERM)  # cron's timeout, requests in flight

    set_testing(True)  # no waits between retries
    with running_service(tmp_path / "service", Engine.default(), balance=1000) as service:
        with running_proxy(service.url, answer_lost, stop) as proxy:
            monkeypatch.setenv("DECISIONS_API_URL", proxy.url)
            monkeypatch.setenv("DECISIONS_API_KEY", service.key)
            try:
                assert main(["nightly"]) == (1 if stopped_at is None else 130)
                first_spent = 1000 - service.balance()
                losing = False
                assert main(["nightly"]) == 3
            finally:
                set_testing(False)
        night_spent = 1000 - service.balance()
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    (first,) = [json.loads(p.read_text(encoding="utf-8")) for p in night.glob("manifest-*.json")]
    assert 0 < first["decisions_spent"] < first_spent  # some charged, their answers lost
    assert first["decisions_spent"] + first["notes"][PERHAPS_CHARGED] >= first_spent
    # counted spent; at a stop, the requests in flight too, which may not have been charged
    in_flight = 0 if stopped_at is None else 8  # (--concurrency)
    assert 100 - in_flight <= night_spent <= 100


def test_a_night_that_fails_after_paying_says_what_it_paid(tmp_path, monkeypatch):
    configs = _project(tmp_path)
    (configs / "nightly.toml").write_text(
        f'input = "{SAMPLE / "portfolio.csv"}"\nformats = ["csv", "xlsx"]\n', encoding="utf-8"
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    db = _ledger(tmp_path)
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()

    def disk_full(path, *args, **kwargs):  # the disk, the one thing a test cannot fill here
        raise OutputError(f"{path}: cannot be written: [Errno 28] No space left on device")

    monkeypatch.setattr("pipeline.io.xlsx_writer.write_xlsx", disk_full)
    assert main(["nightly", "--db", db]) == 1
    manifest = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["decisions_spent"] == 360 and manifest["exit_code"] == 1
    assert "portfolio-scored.xlsx" in manifest["error"]
    assert manifest["outputs"] == [str(night / "portfolio-scored.csv")]


def test_a_night_that_failed_on_a_typo_does_not_bar_the_corrected_one(tmp_path, monkeypatch):
    configs = _project(tmp_path)
    nightly = configs / "nightly.toml"
    nightly.write_text('input = "portfolio.csvv"\nformats = ["csv"]\n', encoding="utf-8")
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    db = _ledger(tmp_path)
    assert main(["nightly", "--db", db]) == 2
    (tmp_path / "portfolio.csv").write_bytes((SAMPLE / "portfolio.csv").read_bytes())
    nightly.write_text('input = "portfolio.csv"\nformats = ["csv"]\n', encoding="utf-8")
    assert main(["nightly", "--db", db]) == 0  # not "another job"


def test_a_mistake_in_the_configuration_is_named_in_plain_words(tmp_path, monkeypatch, capsys):
    # Found by UX review: pydantic's dump ("1 validation error for NightlyConfig ... For
    # further information visit https://errors.pydantic.dev/...") and `pq` refused though
    # `score -o x.pq` takes it.
    configs = _project(tmp_path)
    nightly = configs / "nightly.toml"
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    db = _ledger(tmp_path)
    source = SAMPLE / "portfolio.csv"
    nightly.write_text(f'input = "{source}"\nbudjet = 5\nformats = ["csv", "pdf"]\n', "utf-8")
    capsys.readouterr()
    assert main(["nightly", "--db", db]) == 2
    error = capsys.readouterr().err
    assert "unknown key 'budjet' (the keys are: input, output_dir, formats, budget," in error
    assert "formats[1] = 'pdf': should be 'xlsx', 'csv', 'parquet' or 'pq', in any case" in error
    assert "pydantic" not in error
    nightly.write_text(f'input = "{source}"\nformats = ["CSV", "pq"]\n', encoding="utf-8")
    assert main(["nightly", "--db", db]) == 0
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    assert (night / "portfolio-scored.csv").exists()
    assert (night / "portfolio-scored.parquet").exists()


def test_a_rerun_stopped_after_paying_leaves_its_record_beside_the_first_runs(
    tmp_path, monkeypatch
):
    """QA round 33: the night's first run stopped on its budget (exit 3, its summary in
    manifest.json); the rerun after a top-up was stopped by cron's timeout once it had paid.
    Its record was not written (the first run's summary stayed), and what it paid (200,000
    decisions there) was in no manifest of the night."""
    from pipeline.batch.journal import Journal

    configs = _project(tmp_path)
    with (configs / "settings.toml").open("a", encoding="utf-8") as settings:
        settings.write("[batch]\nchunk_rows = 40\n")
    nightly = configs / "nightly.toml"
    nightly.write_text(
        f'input = "{SAMPLE / "portfolio.csv"}"\nformats = ["parquet"]\nbudget = 100\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    db = _ledger(tmp_path)
    assert main(["nightly", "--db", db]) == 3
    nightly.write_text(f'input = "{SAMPLE / "portfolio.csv"}"\nformats = ["parquet"]\n', "utf-8")
    record, recorded = Journal.record, []

    def stopped_at_the_third_answers(journal, answers, batch_key):
        if len(recorded) == 2:
            raise KeyboardInterrupt  # as SIGTERM stops a run
        recorded.append(batch_key)
        record(journal, answers, batch_key)

    monkeypatch.setattr(Journal, "record", stopped_at_the_third_answers)
    assert main(["nightly", "--db", db]) == 130
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    stopped = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert stopped["exit_code"] == 130 and stopped["decisions_spent"] == 120
    (first,) = night.glob("manifest-*.json")
    first_run = json.loads(first.read_text(encoding="utf-8"))
    assert first_run["exit_code"] == 3 and first_run["decisions_spent"] == 100
    # the night's records add up to what the ledger took
    assert 100_000 - stopped["balance_after"] == 100 + 120


def test_a_job_whose_journal_is_named_stays_one_when_the_export_changes_format(
    tmp_path, monkeypatch
):
    """QA round 33: an export switched from CSV to XLSX was another job by default, whose first
    night paid every row again; `journal` in the configuration keeps the job one."""
    configs = _project(tmp_path)
    nightly = configs / "nightly.toml"
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    db = _ledger(tmp_path)
    for export in ("portfolio.csv", "portfolio.xlsx"):  # on two nights (two folders)
        nightly.write_text(
            f'input = "{SAMPLE / export}"\noutput_dir = "out/{export}"\nformats = ["parquet"]\n'
            'journal = "journals/agency"\n',
            encoding="utf-8",
        )
        assert main(["nightly", "--db", db]) == 0
        night = tmp_path / "out" / export / NIGHT.isoformat()
        manifest = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["decisions_spent"] == (360 if export.endswith("csv") else 0)
    assert (tmp_path / "journals" / "agency").is_file()


def test_a_nightly_run_refuses_a_ledger_that_is_not_there(tmp_path, monkeypatch, capsys):
    """QA 58: a mistyped --db (or DECISIONS_DB on a volume not mounted) started a new ledger
    whose local workspace opened with 100,000 decisions, and the night paid from it, with
    only a note on stderr that nobody reads at night."""
    configs = _project(tmp_path)
    (configs / "nightly.toml").write_text(
        f'input = "{SAMPLE / "portfolio.csv"}"\nformats = ["parquet"]\nbudget = 1000\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    missing = tmp_path / "mistyped.db"
    assert main(["nightly", "--db", str(missing)]) == 2
    assert f"no ledger at {missing}: check --db (or DECISIONS_DB)" in capsys.readouterr().err
    monkeypatch.setenv("DECISIONS_DB", str(missing))
    assert main(["nightly"]) == 2
    assert not missing.exists()
    assert not list((tmp_path / "out").rglob("*.parquet"))


def test_a_benchmark_table_that_cannot_be_read_stops_the_night_before_its_ledger_is_made(
    tmp_path, monkeypatch, capsys
):
    """QA 71: exit 2, but the settings' own ledger was made, its local workspace opened with
    100,000 decisions."""
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "settings.toml").write_text(
        '[ledger]\ndb = "own.db"\n[benchmarks]\ntable = "missing.csv"\n', encoding="utf-8"
    )
    (configs / "nightly.toml").write_text(
        f'input = "{SAMPLE / "portfolio.csv"}"\nformats = ["parquet"]\nbudget = 1000\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    assert main(["nightly"]) == 2
    assert "error: cannot read the benchmark table " in capsys.readouterr().err
    assert not (tmp_path / "own.db").exists()
    [manifest] = (tmp_path / "out").rglob("manifest.json")  # the night's record of the failure
    assert json.loads(manifest.read_text(encoding="utf-8"))["exit_code"] == 2


@pytest.mark.parametrize("case", ["column-renamed", "not-a-number", "market-column-missing"])
def test_a_benchmark_table_that_is_not_one_stops_the_night_before_its_ledger_is_made(
    tmp_path, monkeypatch, capsys, case
):
    """QA 73: a polars traceback, exit 1, the settings' own ledger made and the job's journal
    started; the night's record said nothing of the table."""
    settings, table, said = malformed_settings(tmp_path, case)
    (settings.parent / "nightly.toml").write_text(
        f'input = "{SAMPLE / "portfolio.csv"}"\nformats = ["parquet"]\nbudget = 1000\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(settings))
    assert main(["nightly"]) == 2
    assert said_clearly(capsys.readouterr().err, table, said)
    assert not (tmp_path / "own.db").exists() and not (tmp_path / ".cache").exists()
    [manifest] = (tmp_path / "out").rglob("manifest.json")  # the night's record of the failure
    record = json.loads(manifest.read_text(encoding="utf-8"))
    assert record["exit_code"] == 2 and said in record["error"]


def test_two_runs_started_in_the_same_second_keep_both_records(tmp_path):
    """QA 57: the second record set aside under the same manifest-HHMMSS.json replaced the
    first, and the night's budget forgot what the first run had paid."""
    from pipeline.batch.nightly import keep_aside

    manifest = tmp_path / "manifest.json"
    started = "2026-11-25T02:30:00+00:00"
    for spent in (2, 0):
        manifest.write_text(json.dumps({"started_at": started, "decisions_spent": spent}))
        keep_aside(manifest)
        keep_aside(manifest)  # the same record again (a run that failed before its own): one
    kept = sorted(tmp_path.glob("manifest-*.json"))
    assert [p.name for p in kept] == ["manifest-023000-2.json", "manifest-023000.json"]
    assert sorted(json.loads(p.read_text())["decisions_spent"] for p in kept) == [0, 2]
    assert not list(tmp_path.glob(".*.tmp"))


_KILLED_AT_AN_ANSWER = """
import os, sys
from datetime import date
from pipeline.batch import nightly
from pipeline.batch.journal import Journal
from pipeline.cli import main

nightly.tonight = lambda: date.fromisoformat(sys.argv[1])
killed_at = int(sys.argv[2])
record, recorded = Journal.record, []

def killed(journal, answers, batch_key):
    if len(recorded) == killed_at:
        os._exit(137)  # as kill -9 ends it: no unwinding, no manifest
    recorded.append(batch_key)
    record(journal, answers, batch_key)

Journal.record = killed
main(["nightly", "--db", sys.argv[3]])
"""


def _killed_night(db: str, at_answer: int) -> None:
    """A nightly run in a process of its own, killed once `at_answer` batches were answered
    (the next one charged, its answers not recorded)."""
    import subprocess
    import sys

    program = [sys.executable, "-c", _KILLED_AT_AN_ANSWER, NIGHT.isoformat(), str(at_answer), db]
    done = subprocess.run(program, capture_output=True, text=True)
    assert done.returncode == 137, done.stderr


def test_a_run_killed_before_its_record_counts_against_the_nights_budget(
    tmp_path, monkeypatch, capsys
):
    """QA 63: a night killed with kill -9 wrote no manifest, and the rerun had the whole
    budget again: killed after 200 of 300, its rerun spent 300 more."""
    _, db = _night_of_a_copy(tmp_path, monkeypatch, budget=100)
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    ledger = SqliteLedger(db)

    _killed_night(db, at_answer=1)  # 40 answered, 40 more charged: 80 of the 100
    assert 100_000 - ledger.workspace("local").balance == 80
    assert not list(night.glob("manifest*.json"))
    capsys.readouterr()
    assert main(["nightly", "--db", db]) == 3
    said = capsys.readouterr().out
    assert 100_000 - ledger.workspace("local").balance == 100  # 20 more, not 100
    rerun = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert rerun["decisions_spent"] == 20 and rerun["decisions_spent_by_stopped_runs"] == 80
    assert "(100 a night, 80 spent by earlier runs)" in said

    # a third run that night counts both records, and no send twice
    assert main(["nightly", "--db", db]) == 3
    third = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert third["decisions_spent"] == 0 and third["notes"]["Budget"] == 0
    assert third.get("decisions_spent_by_stopped_runs", 0) == 0
    assert 100_000 - ledger.workspace("local").balance == 100


def test_two_runs_killed_one_after_the_other_are_both_counted(tmp_path, monkeypatch):
    _, db = _night_of_a_copy(tmp_path, monkeypatch, budget=150)
    ledger = SqliteLedger(db)
    _killed_night(db, at_answer=0)  # 40 charged, none answered
    _killed_night(db, at_answer=2)  # those 40 replayed, 40 answered, 40 more charged
    assert 100_000 - ledger.workspace("local").balance == 120
    assert main(["nightly", "--db", db]) == 3
    assert 100_000 - ledger.workspace("local").balance == 150
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    rerun = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert rerun["decisions_spent"] + rerun["decisions_spent_by_stopped_runs"] >= 150


_KILLED_ONCE_CLOSED = """
import os, sys
from datetime import date
from pipeline.batch import nightly
from pipeline.batch.journal import Journal
from pipeline.cli import main

nightly.tonight = lambda: date.fromisoformat(sys.argv[1])
finish_run = Journal.finish_run

def killed(journal, *args, **kwargs):
    finish_run(journal, *args, **kwargs)
    os._exit(137)  # the run closed in its journal, its manifest not written yet

Journal.finish_run = killed
main(["nightly", "--db", sys.argv[2]])
"""


def _night_of_a_copy(tmp_path: Path, monkeypatch, budget: int) -> tuple[Path, str]:
    """A nightly job of 40-row batches scoring a copy of the sample portfolio (to change it
    between runs) with `budget`; the copy, and the ledger."""
    configs = _project(tmp_path)
    with (configs / "settings.toml").open("a", encoding="utf-8") as settings:
        settings.write("[batch]\nchunk_rows = 40\n")
    source = tmp_path / "listings.csv"
    source.write_bytes((SAMPLE / "portfolio.csv").read_bytes())
    (configs / "nightly.toml").write_text(
        f'input = "{source}"\nformats = ["parquet"]\nbudget = {budget}\n', encoding="utf-8"
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    return source, _ledger(tmp_path)


def _new_prices(source: Path, rows: int) -> None:
    """The next export: the first `rows` listings at another price (new requests to pay)."""
    import polars as pl

    listings = pl.read_csv(source, infer_schema=False)
    price = pl.when(pl.int_range(pl.len()) < rows).then(pl.lit("1999999"))
    listings.with_columns(price.otherwise(pl.col("Price (SAR)")).alias("Price (SAR)")).write_csv(
        source
    )


def test_a_run_killed_once_it_closed_its_journal_counts_against_the_nights_budget(
    tmp_path, monkeypatch
):
    """QA 67: killed after it closed its run in the journal and before it wrote its manifest,
    a run left no record and no unfinished run: the rerun, on an export with new prices, had
    the night's whole budget again (400 a night, 557 spent)."""
    import subprocess
    import sys

    source, db = _night_of_a_copy(tmp_path, monkeypatch, budget=400)
    program = [sys.executable, "-c", _KILLED_ONCE_CLOSED, NIGHT.isoformat(), db]
    killed = subprocess.run(program, capture_output=True, text=True)
    assert killed.returncode == 137, killed.stderr
    ledger = SqliteLedger(db)
    assert 100_000 - ledger.workspace("local").balance == 360
    _new_prices(source, 200)
    assert main(["nightly", "--db", db]) == 3
    assert 100_000 - ledger.workspace("local").balance == 400
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    rerun = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert rerun["decisions_spent_by_stopped_runs"] == 360


def test_two_runs_killed_on_two_exports_are_both_counted(tmp_path, monkeypatch):
    """QA 67: the export changed between two runs killed that night: the second began a run of
    its own in the journal, and the third counted only what the second had sent (300 a night,
    420 spent)."""
    source, db = _night_of_a_copy(tmp_path, monkeypatch, budget=300)
    ledger = SqliteLedger(db)
    _killed_night(db, at_answer=2)  # 80 answered, 40 more charged
    _new_prices(source, 371)  # every request another
    _killed_night(db, at_answer=2)  # 120 more
    assert 100_000 - ledger.workspace("local").balance == 240
    assert main(["nightly", "--db", db]) == 3
    assert 100_000 - ledger.workspace("local").balance == 300


def test_a_run_stopped_once_done_before_its_manifest_records_what_it_paid(tmp_path, monkeypatch):
    """QA 67: stopped (SIGTERM) once it was done, before it wrote its manifest, a run recorded
    that it had paid nothing, and the rerun, on an export with new prices, had the night's
    whole budget again (400 a night, 557 spent)."""
    from pipeline.batch import cli as batch_cli

    source, db = _night_of_a_copy(tmp_path, monkeypatch, budget=400)
    summary_json, stops = batch_cli.summary_json, [KeyboardInterrupt]

    def stopped_once_done(*args, **kwargs):
        if stops:
            raise stops.pop()  # as SIGTERM does, between the run's end and its manifest
        return summary_json(*args, **kwargs)

    monkeypatch.setattr(batch_cli, "summary_json", stopped_once_done)
    assert main(["nightly", "--db", db]) == 130
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    stopped = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert stopped["decisions_spent"] == 360 and stopped["exit_code"] == 130
    _new_prices(source, 200)
    assert main(["nightly", "--db", db]) == 3
    assert 100_000 - SqliteLedger(db).workspace("local").balance == 400


def _with(field: str, value: str) -> Callable[[Path], None]:
    def damaged(record: Path) -> None:
        content = json.loads(record.read_text(encoding="utf-8"))
        record.write_text(json.dumps({**content, field: value}), encoding="utf-8")

    return damaged


def _cut_short(record: Path) -> None:
    record.write_bytes(record.read_bytes()[:100])  # a copy, or a disk, that stopped half way


# A night's record damaged by hand or by a tool, and why the log says it cannot be read.
_DAMAGED_RECORDS: dict[str, tuple[Callable[[Path], None], str]] = {
    "notes-not-a-table": (
        _with("notes", "Budget: 200"),
        "notes: 'Budget: 200' is no table of notes",
    ),
    "until-not-a-time": (
        _with("spend_recorded_until", "after the 02:30 run"),
        "spend_recorded_until: 'after the 02:30 run' is no time",
    ),
    "spent-in-words": (
        _with("decisions_spent", "two hundred"),
        "decisions_spent: 'two hundred' is no number of decisions",
    ),
    "cut-short": (_cut_short, "not JSON: "),
}


def _raise_budget(configs: Path, budget: int) -> None:
    nightly_toml = configs / "nightly.toml"
    text = nightly_toml.read_text(encoding="utf-8")
    nightly_toml.write_text(re.sub(r"budget = \d+", f"budget = {budget}", text), encoding="utf-8")


@pytest.mark.parametrize("damage", _DAMAGED_RECORDS)
def test_a_night_record_that_cannot_be_read_is_counted_from_the_journal(
    tmp_path, monkeypatch, capsys, damage
):
    """QA 73: the rerun after a damaged record kept to the budget, the job's journal counting
    the requests sent since the run began; but a record whose `notes` or
    `spend_recorded_until` could not be read had its other fields counted too, its run's
    spend twice (raised to 300 a night after 200 spent, the rerun spent nothing), one cut
    short was overwritten, and the log said nothing of them. Each counted once, and named."""
    _, db = _night_of_a_copy(tmp_path, monkeypatch, budget=200)
    ledger = SqliteLedger(db)
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    assert main(["nightly", "--db", db]) == 3
    assert 100_000 - ledger.workspace("local").balance == 200
    damaged, why = _DAMAGED_RECORDS[damage]
    damaged(night / "manifest.json")
    _raise_budget(tmp_path / "configs", 300)  # a top-up, say: 100 more tonight
    capsys.readouterr()
    assert main(["nightly", "--db", db]) == 3
    assert 100_000 - ledger.workspace("local").balance == 300
    said = capsys.readouterr().out
    [aside] = night.glob("manifest-*.json")  # a record cut short is kept too, and named
    assert f"the night's record {aside.name} cannot be read ({why}" in said
    assert "200 decisions" in said


@pytest.mark.parametrize("damage", _DAMAGED_RECORDS)
def test_a_night_record_that_cannot_be_read_before_a_later_one_still_counts(
    tmp_path, monkeypatch, capsys, damage
):
    """QA 73: the journal accounts for the requests sent since the night's last record read;
    a record that could not be read (`decisions_spent` in words, cut short) before a later one
    was lost from the night's spend, and the third run had its share again (300 a night, 360
    spent; 200 a night, 360 too)."""
    _, db = _night_of_a_copy(tmp_path, monkeypatch, budget=200)
    ledger = SqliteLedger(db)
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    assert main(["nightly", "--db", db]) == 3  # 200 spent
    assert main(["nightly", "--db", db]) == 3  # nothing left tonight: its record says 0
    [first] = [
        record
        for record in night.glob("manifest-*.json")
        if json.loads(record.read_text(encoding="utf-8"))["decisions_spent"] == 200
    ]
    _DAMAGED_RECORDS[damage][0](first)
    _raise_budget(tmp_path / "configs", 300)
    capsys.readouterr()
    assert main(["nightly", "--db", db]) == 3
    assert 100_000 - ledger.workspace("local").balance == 300
    assert f"the night's record {first.name} cannot be read (" in capsys.readouterr().out
    assert main(["nightly", "--db", db]) == 3  # the records read now hold it: nothing more
    assert 100_000 - ledger.workspace("local").balance == 300


def test_a_run_by_hand_the_day_of_a_night_is_not_taken_for_an_unreadable_records(
    tmp_path, monkeypatch, capsys
):
    """QA 74: with a night's record that could not be read, every request the job's journal
    showed sent since midnight counted as the night's, those of the job's file scored by hand
    (`decisions score`) before the night's first run too: 300 a night, 99 spent by the night's
    runs, 360 by hand, and the third run had nothing left (459 "spent by earlier runs")."""
    source, db = _night_of_a_copy(tmp_path, monkeypatch, budget=300)
    ledger = SqliteLedger(db)
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    by_hand = ["score", str(source), "--db", db, "--quiet", "-o", str(tmp_path / "hand.csv")]
    assert main(by_hand) == 0
    assert 100_000 - ledger.workspace("local").balance == 360  # the day's export, by hand
    _new_prices(source, 100)
    assert main(["nightly", "--db", db]) == 0
    assert 100_000 - ledger.workspace("local").balance == 459  # 99 requests of its own
    assert main(["nightly", "--db", db]) == 0  # nothing new: its record says 0
    _cut_short(night / "manifest.json")
    _new_prices(source, 150)  # 49 more
    capsys.readouterr()
    assert main(["nightly", "--db", db]) == 0
    said = capsys.readouterr().out
    assert 100_000 - ledger.workspace("local").balance == 508
    assert "0 decisions spent tonight beyond the records read" in said


def test_a_run_by_hand_before_the_night_leaves_it_the_changes_since_the_last_night(
    tmp_path, monkeypatch
):
    """QA 67: the job's file scored by hand (`decisions score`) the day of a night kept the
    verdict history the night then took for one its own runs had kept: the night compared with
    the history kept aside the night before, and listed the last night's changes again with
    its own (54, for 17)."""
    import os
    from datetime import datetime, timedelta

    source, db = _night_of_a_copy(tmp_path, monkeypatch, budget=100_000)

    def night(day: date) -> int:
        """`day`'s run, its history then aged as if kept that night; its changes listed."""
        monkeypatch.setattr(nightly, "tonight", lambda: day)
        assert main(["nightly", "--db", db]) == 0
        kept = datetime.combine(day, datetime.min.time()).timestamp() + 3600
        for history in tmp_path.rglob("*verdicts.parquet"):
            os.utime(history, (kept, kept))
        manifest = tmp_path / "out" / "nightly" / day.isoformat() / "manifest.json"
        return json.loads(manifest.read_text())["notes"]["Verdicts changed since last run"]

    night(NIGHT - timedelta(days=2))
    _new_prices(source, 60)
    assert night(NIGHT - timedelta(days=1)) > 0  # the last night's changes
    _new_prices(source, 80)  # 20 more prices changed since
    by_hand = tmp_path / "by-hand.json"
    assert main(["score", str(source), "--db", db, "--manifest", str(by_hand), "--quiet"]) == 0
    since_last_night = json.loads(by_hand.read_text())["notes"]["Verdicts changed since last run"]
    assert since_last_night > 0
    monkeypatch.setattr(nightly, "tonight", lambda: NIGHT)
    assert main(["nightly", "--db", db]) == 0
    manifest = tmp_path / "out" / "nightly" / NIGHT.isoformat() / "manifest.json"
    tonight = json.loads(manifest.read_text())["notes"]["Verdicts changed since last run"]
    assert tonight == since_last_night


def test_a_second_run_the_same_night_lists_the_changes_since_the_last_night(tmp_path, monkeypatch):
    """QA 63: a second run the same night (after a top-up, say) listed the verdicts changed
    since the night's first run, none, in place of those changed since the last night."""
    import os
    from datetime import datetime, timedelta

    import polars as pl

    from pipeline.io.read import read_table

    configs = _project(tmp_path)
    source = tmp_path / "listings.csv"
    listings = read_table(SAMPLE / "portfolio.csv").unique(maintain_order=True)
    listings.write_csv(source)
    (configs / "nightly.toml").write_text(
        f'input = "{source}"\nformats = ["parquet"]\n', encoding="utf-8"
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    db = _ledger(tmp_path)
    monkeypatch.setattr(nightly, "tonight", lambda: NIGHT - timedelta(days=1))
    assert main(["nightly", "--db", db]) == 0
    last_night = datetime.combine(NIGHT, datetime.min.time()).timestamp() - 3600
    for history in tmp_path.rglob("*verdicts*.parquet"):  # kept then, as it would have been
        os.utime(history, (last_night, last_night))

    monkeypatch.setattr(nightly, "tonight", lambda: NIGHT)
    listings.with_columns(
        pl.when(pl.int_range(pl.len()) < 60).then(pl.lit("99000000"))
        .otherwise(pl.col("Price (SAR)")).alias("Price (SAR)")
    ).write_csv(source)  # fmt: skip
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()

    def changed() -> int:
        manifest = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
        return manifest["notes"]["Verdicts changed since last run"]

    assert main(["nightly", "--db", db]) == 0
    first = changed()
    assert first >= 20
    assert main(["nightly", "--db", db]) == 0  # the file unchanged
    assert changed() == first
    listings.with_columns(
        pl.when(pl.int_range(pl.len()) < 90).then(pl.lit("99000000"))
        .otherwise(pl.col("Price (SAR)")).alias("Price (SAR)")
    ).write_csv(source)  # fmt: skip
    assert main(["nightly", "--db", db]) == 0  # 30 more prices changed since
    assert changed() > first


def test_a_row_in_doubt_resent_weeks_later_leaves_its_batchs_other_answers_fresh(
    tmp_path, monkeypatch
):
    """QA 68: a batch resent for a row left in doubt (its price changed back weeks later) took
    its answers, stale by then, for the latest of its other rows: those, paid again meanwhile,
    were paid a third time the next night."""
    import time

    import polars as pl

    from pipeline.batch.journal import Journal

    source, db = _night_of_a_copy(tmp_path, monkeypatch, budget=100_000)
    ledger = SqliteLedger(db)
    real, later = time.time, [0.0]
    monkeypatch.setattr(time, "time", lambda: real() + later[0])

    def spent(run) -> int:
        before = ledger.workspace("local").balance
        run()
        return before - ledger.workspace("local").balance

    def score() -> None:
        assert main(["score", str(source), "--db", db, "--quiet"]) == 0

    record, stops = Journal.record, [KeyboardInterrupt]

    def stopped_once(journal, answers, batch_key):
        if stops:
            raise stops.pop()  # the first batch charged, its answers never recorded
        record(journal, answers, batch_key)

    monkeypatch.setattr(Journal, "record", stopped_once)
    assert main(["score", str(source), "--db", db, "--quiet"]) == 130
    listings = pl.read_csv(source, infer_schema=False)
    first_price = listings["Price (SAR)"][0]
    _new_prices(source, 1)  # the first row in doubt leaves the file
    score()  # the rest of its batch replayed, the other rows paid
    later[0] += 31 * 86_400
    assert spent(score) > 300  # every answer stale: paid again
    listings.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit(first_price))
        .otherwise(pl.col("Price (SAR)")).alias("Price (SAR)")
    ).write_csv(source)  # fmt: skip
    later[0] += 3600
    assert spent(score) == 0  # the row in doubt is back: replayed
    later[0] += 3600
    assert spent(score) == 0  # every answer fresh


def test_a_run_killed_once_it_compacted_its_journal_counts_what_it_sent_not_what_it_kept(
    tmp_path, monkeypatch
):
    """QA 68: killed after its run closed in the journal, a run that had compacted it left one
    batch made then, holding every answer still fresh: the rerun took all of them for what the
    killed run had sent (1,365 counted for 32 charged), and the night's budget was gone."""
    import subprocess
    import sys

    source, db = _night_of_a_copy(tmp_path, monkeypatch, budget=400)
    assert main(["score", str(source), "--db", db, "--quiet"]) == 0  # by hand: 360 paid
    settings = tmp_path / "configs" / "settings.toml"
    settings.write_text(settings.read_text().replace("chunk_rows = 40", "chunk_rows = 1"))
    _new_prices(source, 160)  # one batch a row: past 150 batches, compacted as the run ends
    program = [sys.executable, "-c", _KILLED_ONCE_CLOSED, NIGHT.isoformat(), db]
    killed = subprocess.run(program, capture_output=True, text=True)
    assert killed.returncode == 137, killed.stderr
    ledger = SqliteLedger(db)
    tonight = 100_000 - 360 - ledger.workspace("local").balance
    assert 100 < tonight < 160
    _new_prices(source, 250)  # 90 more
    assert main(["nightly", "--db", db]) == 0
    night = tmp_path / "out" / "nightly" / NIGHT.isoformat()
    rerun = json.loads((night / "manifest.json").read_text(encoding="utf-8"))
    assert rerun["decisions_spent_by_stopped_runs"] == tonight
    assert 0 < rerun["decisions_spent"] <= 90
