"""Rerun of an unchanged 100,000-row file: every answer from the journal, nothing paid."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from bench.synthetic import listings

ROWS = 100_000


def _score(source: Path, target: Path, folder: Path) -> tuple[float, dict]:
    command = [
        sys.executable, "-m", "pipeline", "score", str(source), "-o", str(target),
        "--db", str(folder / "l.db"), "--workspace", "bench",
        "--journal", str(folder / "job.journal"), "--json",
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return time.perf_counter() - started, json.loads(done.stdout)


def run() -> None:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        source = folder / "listings.csv"
        listings(ROWS).write_csv(source)
        subprocess.run(
            [sys.executable, "-m", "pipeline", "workspace", "create", "bench",
             "--balance", str(2 * ROWS), "--db", str(folder / "l.db")],
            check=True, capture_output=True,
        )  # fmt: skip
        first, first_summary = _score(source, folder / "first.parquet", folder)
        again, again_summary = _score(source, folder / "again.parquet", folder)
        started = time.perf_counter()
        pl.read_csv(source, infer_schema=False).write_parquet(folder / "floor.parquet")
        floor = time.perf_counter() - started
        startup_started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import pipeline.batch.run"], check=True)
        startup = time.perf_counter() - startup_started
        print(f"journal: rerun of an unchanged {ROWS:,}-row CSV -> Parquet")
        print(f"  first run:  {first:6.2f} s, {first_summary['decisions_spent']:,} decisions")
        print(
            f"  rerun:      {again:6.2f} s, {again_summary['decisions_spent']:,} decisions"
            "  (target: 0)"
        )
        print(f"  floor (polars read + write): {floor:.2f} s; interpreter start-up {startup:.2f} s")
        without_startup = (again - startup) / floor
        print(
            f"  rerun / floor: {again / floor:.2f}x; without start-up {without_startup:.2f}x"
            "  (target < 2x)"
        )
