"""The Rejects sheet: one row per rejected row, its first broken rule: the value and why it was
refused (a row breaking several rules shows the next once that one is fixed, as the service
answers a request with its first)."""

from __future__ import annotations

import polars as pl
from xlsxwriter.worksheet import Worksheet

from pipeline.batch.result_columns import REJECTS_SCHEMA
from pipeline.io.xlsx_results import write_results_sheet
from pipeline.io.xlsx_styles import Formats
from pipeline.io.xlsx_text import prepare_for_excel

EXCEL_MAX_DATA_ROWS = 1_048_575


def write_rejects_sheet(sheet: Worksheet, formats: Formats, rejects: pl.DataFrame) -> None:
    """Write the rejects with the same cell rules as the Results sheet.

    A row can have several rejects, so in an extreme run there can be more than a sheet holds;
    the sheet then ends with a line saying how many were left out.
    """
    frame = rejects.select(list(REJECTS_SCHEMA)) if rejects.width else _empty()
    left_out = max(0, frame.height - (EXCEL_MAX_DATA_ROWS - 1))
    if left_out:
        frame = frame.head(EXCEL_MAX_DATA_ROWS - 1)
    # The reasons wrap at their column's width: overflowing to the right, they made the page,
    # printed to fit one width, unreadably small (and Excel cuts them at the last column).
    write_results_sheet(sheet, formats, prepare_for_excel(frame), wrapped=True)
    sheet.fit_to_pages(1, 0)  # seven columns: printed, a row and its reason on one page
    if left_out:
        sheet.write_string(
            frame.height + 1,
            0,
            f"{left_out:,} more rejects not shown: an Excel sheet holds no more rows; "
            "write the rejects as CSV to see them all",
        )


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=REJECTS_SCHEMA)
