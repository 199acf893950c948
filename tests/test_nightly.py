"""`decisions nightly`: dated outputs, a manifest, and a second night that pays nothing."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

from pipeline.cli import main

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"


def test_two_nights_dated_outputs_manifest_and_no_second_payment(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "settings.toml").write_text(
        f'[benchmarks]\ntable = "{SAMPLE / "benchmarks.csv"}"\n', encoding="utf-8"
    )
    (configs / "nightly.toml").write_text(
        f'input = "{SAMPLE / "portfolio.csv"}"\noutput_dir = "out/nightly"\n'
        'formats = ["xlsx", "parquet"]\nbudget = 1000\nreasoning = "none"\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DECISIONS_SETTINGS", str(configs / "settings.toml"))
    db = str(tmp_path / "ledger.db")

    assert main(["nightly", "--db", db]) == 0
    night = tmp_path / "out" / "nightly" / date.today().isoformat()
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
    assert again["decisions_spent"] == 0
