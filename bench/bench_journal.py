"""Reruns of a 100,000-row file: unchanged (every answer from the journal, nothing paid), then
with 0.1% of its listings edited, as a nightly run finds it (only those paid)."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from bench.synthetic import listings
from pipeline.cli import main

ROWS = 100_000


def _score(source: Path, target: Path, folder: Path) -> tuple[float, dict]:
    """One `decisions score` in this process (imports already paid): seconds and summary."""
    argv = [
        "score", str(source), "-o", str(target), "--db", str(folder / "l.db"),
        "--workspace", "bench", "--journal", str(folder / "job.journal"), "--json",
    ]  # fmt: skip
    out = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out):
        main(argv)
    return time.perf_counter() - started, json.loads(out.getvalue())


def run() -> None:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        source = folder / "listings.csv"
        listings(ROWS).write_csv(source)
        with contextlib.redirect_stdout(io.StringIO()):
            main(["workspace", "create", "bench", "--balance", str(2 * ROWS),
                  "--db", str(folder / "l.db")])  # fmt: skip
        first, first_summary = _score(source, folder / "first.parquet", folder)
        again, again_summary = _score(source, folder / "again.parquet", folder)
        started = time.perf_counter()
        pl.read_csv(source, infer_schema=False).write_parquet(folder / "floor.parquet")
        floor = time.perf_counter() - started
        command = [sys.executable, "-m", "pipeline", "score", str(source), "-o",
                   str(folder / "cli.parquet"), "--db", str(folder / "l.db"), "--workspace",
                   "bench", "--journal", str(folder / "job.journal"), "--quiet"]  # fmt: skip
        started = time.perf_counter()
        subprocess.run(command, check=True)
        wall = time.perf_counter() - started
        print(f"journal: rerun of an unchanged {ROWS:,}-row CSV -> Parquet")
        print(f"  first run:   {first:6.2f} s, {first_summary['decisions_spent']:,} decisions")
        print(
            f"  rerun:       {again:6.2f} s, {again_summary['decisions_spent']:,} decisions"
            "  (target: 0)"
        )
        print(f"  floor (polars read + write):   {floor:.2f} s")
        print(f"  rerun / floor: {again / floor:.2f}x  (target < 2x)")
        print(f"  the same rerun as a new process (interpreter and imports included): {wall:.2f} s")

        edited = listings(ROWS).with_columns(  # every thousandth price changed
            pl.when(pl.int_range(pl.len()) % 1000 == 7)
            .then(pl.lit("987654"))
            .otherwise(pl.col("price"))
            .alias("price")
        )
        edited.write_csv(source)
        nightly, nightly_summary = _score(source, folder / "nightly.parquet", folder)
        print(f"rerun with {ROWS // 1000:,} listings edited (a night's changes)")
        print(
            f"  rerun:       {nightly:6.2f} s, {nightly_summary['decisions_spent']:,} decisions"
            f"  ({nightly / first:.2f}x the first run)"
        )
