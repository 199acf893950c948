"""Writing a run's output: one entry point, the format chosen by the file extension.

    .xlsx            workbook with Results, Rejects and Summary sheets (xlsx_writer)
    .csv             results only, UTF-8 with BOM (csv_writer)
    .parquet / .pq   results only, snappy (parquet_writer)

Every writer goes through a temporary file renamed into place, so the output is either the
complete new file or whatever was there before.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipeline.batch.summary import RunSummary
from pipeline.errors import UsageError
from pipeline.io.atomic import check_name_fits, check_writable
from pipeline.io.csv_writer import write_csv
from pipeline.io.parquet_types import with_input_types
from pipeline.io.parquet_writer import write_parquet

__all__ = [
    "OUTPUT_FORMATS",
    "check_output_capacity",
    "output_format",
    "write_output",
]

OUTPUT_FORMATS = {".xlsx": "xlsx", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


def output_format(path: Path) -> str:
    """'xlsx', 'csv' or 'parquet' for `path`; UsageError for any other extension."""
    suffix = Path(path).suffix.lower()
    try:
        return OUTPUT_FORMATS[suffix]
    except KeyError:
        raise UsageError(
            f"{path}: cannot write '{suffix or '(no extension)'}' files; "
            "name the output .xlsx, .csv, .parquet or .pq"
        ) from None


def check_output_capacity(path: Path, rows: int, columns: int | None = None) -> None:
    """Refuse, before anything is charged, an output that cannot hold `rows` data rows (and
    `columns` columns, when known), or cannot be written at all.

    Raises UsageError for an unknown extension or a path that is a folder, and
    TooManyRowsError when an .xlsx output would need more than 1,048,575 data rows or 16,384
    columns.
    """
    path = Path(path)
    check_name_fits(path)
    if path.is_dir():
        suffix = path.suffix if path.suffix.lower() in OUTPUT_FORMATS else ".xlsx"
        raise UsageError(f"{path}: is a folder; name the file to write (-o {path}/NAME{suffix})")
    if output_format(path) == "xlsx":
        from pipeline.io.xlsx_writer import check_xlsx_capacity  # xlsxwriter: only for workbooks

        check_xlsx_capacity(path, rows, columns)
    check_writable(path)


def write_output(
    path: Path,
    results: pl.DataFrame,
    *,
    rejects: pl.DataFrame,
    summary: RunSummary,
    changes: pl.DataFrame | None = None,
    csv_bom: bool = True,
    typed_input: pl.DataFrame | None = None,
) -> None:
    """Write `results` (input columns as text, then RESULT_SCHEMA) to `path`.

    A Parquet output's input columns take their types back from `typed_input`, the Parquet
    input as read by `pipeline.io.parquet_types.typed_input`; a workbook's numeric ones do (a
    float column's 3200000.0 is a number to write, not text someone typed).

    Only the workbook carries `rejects`, `summary` and `changes` (its sheets); a CSV or
    Parquet row says why it was rejected in its own error columns. Raises OutputError naming
    the path when the file cannot be written.
    """
    path = Path(path)
    kind = output_format(path)
    if kind == "xlsx":
        from pipeline.io.xlsx_writer import write_xlsx

        typed = with_input_types(results, typed_input, numeric_only=True)
        write_xlsx(path, typed, rejects=rejects, summary=summary, changes=changes)
    elif kind == "csv":
        write_csv(path, results, bom=csv_bom)
    else:
        write_parquet(path, with_input_types(results, typed_input))
