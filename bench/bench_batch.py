"""Batch throughput: CSV -> Parquet over 1,000,000 rows against the read+write floor, peak
memory of that run, and the workbook writer against bare xlsxwriter over 100,000 rows.

The target compares the command, started as a user starts it (the interpreter, the imports,
the ledger and journal opened), with the floor inside an interpreter that has polars loaded
already; the floor started as a command too is printed beside it, for a like-for-like ratio.

The machine is shared and noisy (the same code measures up to 20-40% apart from one minute to
the next), so each time is the best of a few alternated runs: the floor of 3, the end-to-end
run and the two workbook writers of 2 each (BENCH_BATCH_TRIALS).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import xlsxwriter

from bench.synthetic import listings
from pipeline.batch.result_columns import REJECTS_SCHEMA
from pipeline.batch.summary import RunSummary
from pipeline.io.write import write_output

ROWS = 1_000_000
XLSX_ROWS = 100_000
TRIALS = int(os.environ.get("BENCH_BATCH_TRIALS", "2"))


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipeline", *args]


def _floor(source: Path, target: Path) -> float:
    started = time.perf_counter()
    pl.read_csv(source, infer_schema=False).write_parquet(target)
    return time.perf_counter() - started


def _floor_command(source: Path, target: Path) -> float:
    """The floor as a command, started as `decisions score` is: the interpreter, polars'
    import and the exit count on both sides of this ratio."""
    program = (
        "import sys, polars as pl; "
        "pl.read_csv(sys.argv[1], infer_schema=False).write_parquet(sys.argv[2])"
    )
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", program, str(source), str(target)], check=True)
    return time.perf_counter() - started


def _end_to_end(source: Path, target: Path, db: Path) -> tuple[float, dict, int]:
    db.unlink(missing_ok=True)  # a new ledger every time
    subprocess.run(
        _cli("workspace", "create", "bench", "--balance", str(2 * ROWS), "--db", str(db)),
        check=True,
        capture_output=True,
    )
    started = time.perf_counter()
    done = subprocess.run(
        _cli(
            "score",
            str(source),
            "-o",
            str(target),
            "--db",
            str(db),
            "--workspace",
            "bench",
            "--journal",
            str(db.with_suffix(".journal")),  # in the temporary folder, not .cache/
            "--json",
        ),
        check=True,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return elapsed, json.loads(done.stdout), peak_kib


def _bare_xlsx(frame: pl.DataFrame, target: Path) -> float:
    started = time.perf_counter()
    workbook = xlsxwriter.Workbook(target, {"constant_memory": True})
    sheet = workbook.add_worksheet("Results")
    sheet.write_row(0, 0, frame.columns)
    for r, row in enumerate(frame.iter_rows(), start=1):
        for c, value in enumerate(row):
            if value is None:
                continue
            if isinstance(value, str):
                sheet.write_string(r, c, value)
            else:
                sheet.write_number(r, c, value)
    workbook.close()
    return time.perf_counter() - started


def _ours_xlsx(frame: pl.DataFrame, target: Path, rejects: pl.DataFrame) -> float:
    from datetime import UTC, datetime

    summary = RunSummary(
        input_path="bench.csv",
        input_fingerprint="0" * 64,
        rows_total=frame.height,
        counts_by_status={"scored": frame.height},
        counts_by_verdict={"match": 1, "partial": 1, "no_match": 1},
        decisions_spent=frame.height,
        balance_before=None,
        balance_after=None,
        started_at=datetime.now(UTC),
        duration_s=0.0,
    )
    started = time.perf_counter()
    write_output(target, frame, rejects=rejects, summary=summary)
    return time.perf_counter() - started


def run() -> None:
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        source = work / "listings.csv"
        listings(ROWS).write_csv(source)
        floor = min(_floor(source, work / "floor.parquet") for _ in range(3))
        floor_command = min(_floor_command(source, work / "floor.parquet") for _ in range(3))
        runs = [_end_to_end(source, work / "scored.parquet", work / f"l{i}.db")
                for i in range(TRIALS)]  # fmt: skip
        elapsed, summary, peak_kib = min(runs, key=lambda run: run[0])
        print(f"batch: CSV -> Parquet, {ROWS:,} rows x 15 columns (best of {TRIALS} runs)")
        print(f"  floor (polars read + write):   {ROWS / floor:>12,.0f} rows/s  ({floor:.2f} s)")
        print(
            f"  decisions score, end to end:  {ROWS / elapsed:>12,.0f} rows/s  ({elapsed:.2f} s,"
            f" {summary['decisions_spent']:,} decisions)"
        )
        print(f"  ratio to the floor:            {elapsed / floor:.2f}x  (target <= 4x)")
        print(
            f"  the floor as a command:        {ROWS / floor_command:>12,.0f} rows/s "
            f" ({floor_command:.2f} s; ratio {elapsed / floor_command:.2f}x, both started alike)"
        )
        print(f"  peak memory of the run:        {peak_kib / 1024:,.0f} MiB")

        scored = pl.read_parquet(work / "scored.parquet").head(XLSX_ROWS)
        rejects = pl.DataFrame(schema=REJECTS_SCHEMA)
        bare, ours = float("inf"), float("inf")
        for _ in range(TRIALS):  # alternated, so both see the same noise
            bare = min(bare, _bare_xlsx(scored, work / "bare.xlsx"))
            ours = min(ours, _ours_xlsx(scored, work / "ours.xlsx", rejects))
        print(f"xlsx: {XLSX_ROWS:,} rows x {scored.width} columns")
        print(
            f"  bare xlsxwriter (constant_memory): {XLSX_ROWS / bare:>9,.0f} rows/s ({bare:.2f} s)"
        )
        print(
            f"  our workbook (formats, sheets):    {XLSX_ROWS / ours:>9,.0f} rows/s ({ours:.2f} s)"
        )
        print(f"  ratio ours / bare:                 {ours / bare:.2f}x  (target <= 1.3x)")
