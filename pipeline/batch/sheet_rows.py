"""The row a spreadsheet shows each listing on, beside its `row_number` (which counts data rows
only): the header's row, any title above it and, in a workbook, the empty rows above the table
(the reader starts at the first row holding a value) all come before. Rejects name both, so an
analyst finds a listing in the file where Excel shows it; the rows a sheet hides (by hand, or a
filter leaving them out) are counted for the summary, as they are scored and paid for alike.
"""

from __future__ import annotations

import polars as pl

SHOWN_HIDDEN_ROWS = 5  # in the summary's note


def sheet_rows(first_row: int | None, title_rows: int, rows: int) -> pl.Series | None:
    """The sheet row of each data row, from the sheet row of the first row read (the header,
    or the first of the title above it); None when the input has no rows to show (Parquet)."""
    if first_row is None:
        return None
    first_data_row = first_row + title_rows + 1
    return pl.Series("sheet_row", range(first_data_row, first_data_row + rows), dtype=pl.Int64)


def hidden_rows_note(
    hidden: tuple[int, ...], rows_in_sheet: pl.Series | None
) -> tuple[str, str] | None:
    """The summary's line on the listings in hidden rows, if any: they are read, scored and
    charged like the rest (every input row is in the output), which a sheet filtered down to
    a few rows does not show."""
    if not hidden or rows_in_sheet is None:
        return None
    listed = rows_in_sheet.filter(rows_in_sheet.is_in(hidden))
    if listed.is_empty():
        return None
    shown = ", ".join(str(row) for row in listed.head(SHOWN_HIDDEN_ROWS))
    more = ", ..." if listed.len() > SHOWN_HIDDEN_ROWS else ""
    return (
        "Hidden rows",
        f"{listed.len()} listing(s) on rows the sheet hides (by hand or by a filter: sheet rows "
        f"{shown}{more}) are read and scored like the others; delete them to leave them out",
    )
