"""The Excel workbook: Results, Rejects and Summary sheets, written with xlsxwriter.

The workbook streams (constant_memory): rows go to disk as they are written, so memory stays
flat for a million rows, and every sheet is written top to bottom. Workbook options switch off
every conversion of strings (to numbers, formulas or links): text stays text.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import xlsxwriter
from xlsxwriter.exceptions import XlsxWriterException

from pipeline.batch.summary import RunSummary
from pipeline.errors import OutputError, TooManyRowsError
from pipeline.io.atomic import atomic_path, scratch_dir
from pipeline.io.xlsx_rejects import write_rejects_sheet
from pipeline.io.xlsx_results import write_results_sheet
from pipeline.io.xlsx_styles import make_formats
from pipeline.io.xlsx_summary import SHEET as SUMMARY_SHEET
from pipeline.io.xlsx_summary import write_summary_sheet
from pipeline.io.xlsx_text import prepare_for_excel

__all__ = ["XLSX_MAX_COLUMNS", "XLSX_MAX_DATA_ROWS", "check_xlsx_capacity", "write_xlsx"]

XLSX_MAX_DATA_ROWS = 1_048_575  # Excel's 1,048,576 rows less the header
XLSX_MAX_COLUMNS = 16_384
# Past this many cells the sheet's XML may pass 4 GB, which a zip needs ZIP64 for (older
# Excel versions then warn, so it is not switched on for ordinary sizes).
_ZIP64_CELLS = 20_000_000

WORKBOOK_OPTIONS = {
    "constant_memory": True,
    "strings_to_numbers": False,
    "strings_to_formulas": False,
    "strings_to_urls": False,
    "nan_inf_to_errors": False,
}


def check_xlsx_capacity(path: Path, rows: int, columns: int | None = None) -> None:
    """Raise TooManyRowsError when `rows` data rows (or `columns`) do not fit in one sheet."""
    if rows > XLSX_MAX_DATA_ROWS:
        raise TooManyRowsError(
            f"{path}: {rows:,} rows do not fit in an Excel sheet, which holds at most "
            f"{XLSX_MAX_DATA_ROWS:,} data rows; write to '{Path(path).with_suffix('.parquet')}' "
            f"or '{Path(path).with_suffix('.csv')}' instead"
        )
    if columns is not None and columns > XLSX_MAX_COLUMNS:
        raise TooManyRowsError(
            f"{path}: {columns:,} columns do not fit in an Excel sheet, which holds at most "
            f"{XLSX_MAX_COLUMNS:,}; write to .parquet or .csv instead"
        )


def write_xlsx(
    path: Path,
    results: pl.DataFrame,
    *,
    rejects: pl.DataFrame,
    summary: RunSummary,
    changes: pl.DataFrame | None = None,
) -> None:
    """Write the workbook to `path` atomically; see the module docstring for the sheets."""
    check_xlsx_capacity(path, results.height, results.width)
    frame = prepare_for_excel(_isolated(results, "error_message"))
    rejects = _isolated(rejects, "reason")
    options = {
        **WORKBOOK_OPTIONS,
        "use_zip64": frame.height * frame.width > _ZIP64_CELLS,
    }
    with atomic_path(path) as tmp, scratch_dir(path) as work:
        workbook = xlsxwriter.Workbook(str(tmp), {**options, "tmpdir": str(work)})
        try:
            formats = make_formats(workbook)
            write_results_sheet(workbook.add_worksheet("Results"), formats, frame)
            write_rejects_sheet(workbook.add_worksheet("Rejects"), formats, rejects)
            summary_sheet = workbook.add_worksheet(SUMMARY_SHEET)
            write_summary_sheet(workbook, summary_sheet, formats, summary, changes)
            workbook.close()
        except XlsxWriterException as exc:
            raise OutputError(f"{path}: cannot write the workbook ({exc})") from exc
        finally:
            _release(workbook)


# A quoted name with Arabic in an English message ("row 18, column 'المساحة': '-50': ...")
# is isolated (U+2068 ... U+2069), as the Unicode bidi rules provide: otherwise the digits after
# it join its right-to-left run, and Excel and LibreOffice show '-50' as '50-'.
_QUOTED_ARABIC = r"'([^']*[\u0600-\u06ff][^']*)'"


def _isolated(frame: pl.DataFrame, column: str) -> pl.DataFrame:
    if column not in frame.columns or frame.schema[column] != pl.String:
        return frame
    return frame.with_columns(pl.col(column).str.replace_all(_QUOTED_ARABIC, "'\u2068${1}\u2069'"))


def _release(workbook: xlsxwriter.Workbook) -> None:
    """Close the streamed sheets' row files so the scratch directory can be removed
    (on Windows an open file cannot be deleted). A no-op after a successful close."""
    for sheet in workbook.worksheets():
        handle = getattr(sheet, "row_data_fh", None)
        if handle is not None and not handle.closed:
            handle.close()
