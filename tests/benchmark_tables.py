"""Benchmark tables that can be read but are not benchmark tables, for the commands' tests.

No tests here. `malformed_settings` writes a project folder whose settings name a copy of the
sample tables with one of them broken as `MALFORMED` says, and the settings' own ledger
(`own.db`) beside it, so a test can check that a command leaves no file behind.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"
TABLES = ("benchmarks.csv", "market_averages.csv", "type_factors.csv")


def _text(path: Path) -> pl.DataFrame:
    return pl.read_csv(path, infer_schema=False)


def _without(column: str) -> Callable[[Path], None]:
    return lambda path: _text(path).drop(column).write_csv(path)


def _renamed(column: str, name: str) -> Callable[[Path], None]:
    return lambda path: _text(path).rename({column: name}).write_csv(path)


def _typed_by_hand(column: str, value: str) -> Callable[[Path], None]:
    """The table with `value` typed into `column` on its fifth line (its fourth row)."""

    def edit(path: Path) -> None:
        table = _text(path)
        at = pl.int_range(pl.len()) == 3
        table = table.with_columns(
            pl.when(at).then(pl.lit(value)).otherwise(pl.col(column)).alias(column)
        )
        table.write_csv(path)

    return edit


def _emptied(path: Path) -> None:
    path.write_bytes(b"")


def _header_only(path: Path) -> None:
    path.write_text(path.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")


def _notes_renamed(path: Path) -> None:
    path.write_text("Benchmarks to check with Omar\nthe 2024 deeds, not yet\n", encoding="utf-8")


def _as_parquet(path: Path) -> None:
    _text(path).write_parquet(path)


# case -> (the table broken, how, what the error must say of it)
MALFORMED: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "column-missing": ("benchmarks.csv", _without("yoy_pct"), "lacks the column yoy_pct"),
    "column-renamed": (
        "benchmarks.csv",
        _renamed("median_sqm", "median"),
        "lacks the column median_sqm (its columns: city_key, district_key, city_ar, "
        "district_ar, level, median, ",
    ),
    "not-a-number": (
        "benchmarks.csv",
        _typed_by_hand("median_sqm", "n/a"),
        "holds 'n/a' in the column median_sqm (line 5), which takes numbers",
    ),
    "not-a-whole-number": (
        "benchmarks.csv",
        _typed_by_hand("year", "2024.5"),
        "holds '2024.5' in the column year (line 5), which takes whole numbers",
    ),
    "empty": ("benchmarks.csv", _emptied, "is empty"),
    "header-only": ("benchmarks.csv", _header_only, "holds no rows"),
    "notes-renamed": ("benchmarks.csv", _notes_renamed, "lacks the columns city_key, "),
    "parquet": ("benchmarks.csv", _as_parquet, "is a Parquet file"),
    # scored without market averages, silently, before: 77 for the 89 of the real table
    "market-column-missing": (
        "market_averages.csv",
        _without("avg_sqm"),
        "lacks the column avg_sqm",
    ),
    "market-notes-renamed": ("market_averages.csv", _notes_renamed, "lacks the columns "),
    # (a table built before the district averages has no district_key, and no district rows)
    "market-district-key-missing": (
        "market_averages.csv",
        _without("district_key"),
        "lacks the column district_key",
    ),
    "factor-not-a-number": (
        "type_factors.csv",
        _typed_by_hand("factor", "x1.2"),
        "holds 'x1.2' in the column factor (line 5), which takes numbers",
    ),
    "factors-empty": ("type_factors.csv", _emptied, "is empty"),
}


def malformed_settings(root: Path, case: str) -> tuple[Path, Path, str]:
    """Under `root`: configs/settings.toml naming tables/benchmarks.csv (with the settings'
    own ledger own.db), the tables copied from the sample and one broken by `case`. Returns
    the settings file, the table broken and what the error must say of it."""
    tables = root / "tables"
    tables.mkdir()
    for name in TABLES:
        shutil.copy(SAMPLE / name, tables / name)
    name, breaking, said = MALFORMED[case]
    breaking(tables / name)
    return settings_naming(root, "tables/benchmarks.csv"), tables / name, said


def settings_naming(root: Path, table: str) -> Path:
    """root/configs/settings.toml naming `table` (relative to root) as the benchmark table,
    and the settings' own ledger own.db."""
    configs = root / "configs"
    configs.mkdir()
    settings = configs / "settings.toml"
    settings.write_text(
        f'[ledger]\ndb = "own.db"\n[benchmarks]\ntable = "{table}"\n', encoding="utf-8"
    )
    return settings


def said_clearly(error: str, table: Path, said: str) -> bool:
    """Whether a command's stderr names the table broken, what is wrong with it, and the
    setting that places the tables, in one line and without a traceback."""
    return (
        error.startswith(f"decisions: error: the benchmark table {table} {said}")
        and "`table` under [benchmarks] in the settings" in error
        and "Traceback" not in error
        and error.count("\n") == 1
    )
