"""The Results sheet: every input row with its result columns, streamed in row order.

This sheet is the bottleneck of a run that writes XLSX (PERF-NOTES.md), so the loop does no
more per cell than bare xlsxwriter needs: each column's kind is decided once, rows come from one
`iter_rows()` pass, and ASCII text that cannot look like a formula - nearly all of it - goes
straight to `write_string`.
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl
from xlsxwriter.worksheet import Worksheet

from pipeline.io.xlsx_styles import (
    Formats,
    colour_status_columns,
    column_widths,
    number_format,
)
from pipeline.io.xlsx_text import ARABIC, FORMULA_FIRST, has_arabic

# Excel's "number stored as text" warning triangle, shown on the input's own columns when
# they hold text like "1,500,000" on purpose.
_WHOLE_SHEET = "A1:XFD1048576"


def write_header(sheet: Worksheet, formats: Formats, columns: Iterable[str]) -> None:
    for index, name in enumerate(columns):
        sheet.write_string(
            0, index, name, formats.header_rtl if has_arabic(name) else formats.header
        )


def write_results_sheet(sheet: Worksheet, formats: Formats, frame: pl.DataFrame) -> None:
    """Write `frame` (already through `prepare_for_excel`) with a header row at row 0."""
    columns = frame.columns
    last_row = frame.height
    for index, width in enumerate(column_widths(frame)):
        sheet.set_column(index, index, width)
    write_header(sheet, formats, columns)
    sheet.freeze_panes(1, 0)
    sheet.repeat_rows(0)
    sheet.set_landscape()
    sheet.autofilter(0, 0, last_row, len(columns) - 1)
    colour_status_columns(sheet, formats, columns, last_row)
    sheet.ignore_errors({"number_stored_as_text": _WHOLE_SHEET})

    text_cols = [i for i, dt in enumerate(frame.dtypes) if dt == pl.String]
    num_cols = [
        (i, number_format(formats, name))
        for i, (name, dt) in enumerate(frame.schema.items())
        if dt != pl.String
    ]
    write_string = sheet.write_string
    write_number = sheet.write_number
    text_formats = formats.text
    arabic_search = ARABIC.search
    formula_first = FORMULA_FIRST

    for r, row in enumerate(frame.iter_rows(), 1):
        for c in text_cols:
            v = row[c]
            if not v:  # null and "" are both an empty cell
                continue
            if v.isascii() and v[0] not in formula_first:
                write_string(r, c, v)
            else:
                arabic = not v.isascii() and arabic_search(v) is not None
                write_string(r, c, v, text_formats.pick(arabic, v[0] in formula_first))
        for c, fmt in num_cols:
            v = row[c]
            if v is not None:
                write_number(r, c, v, fmt)
