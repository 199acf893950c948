"""The Results sheet: every input row with its result columns, streamed in row order.

This sheet is the bottleneck of a run that writes XLSX (PERF-NOTES.md), so the loop does no
more per cell than bare xlsxwriter needs: each column's kind is decided once, rows come from one
`iter_rows()` pass, and a text column whose values are all ASCII, none a plain number or an ISO
date and none starting like a formula (found with vectorised passes) goes straight to
`write_string` without a look at each cell.
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl
from xlsxwriter.format import Format
from xlsxwriter.worksheet import Worksheet

from pipeline.io.xlsx_styles import (
    Formats,
    colour_status_columns,
    column_widths,
    number_format,
)
from pipeline.io.xlsx_text import (
    FORMULA_FIRST,
    ISO_DATE,
    ISO_DATETIME,
    ISO_TIME,
    NEEDS_A_LOOK,
    excel_dates,
    plain_numbers,
    reads_right_to_left,
)

# Excel's "number stored as text" warning triangle, shown on the input's own columns when
# they hold text like "1,500,000" on purpose.
_WHOLE_SHEET = "A1:XFD1048576"
# A date and time as yyyy-mm-dd hh:mm:ss: narrower, Excel shows ##### (widths are measured on
# the first rows' text, which may hold none of a column's dates).
_DATE_WIDTH = 20


def write_header(sheet: Worksheet, formats: Formats, columns: Iterable[str]) -> None:
    for index, name in enumerate(columns):
        sheet.write_string(
            0, index, name, formats.header_rtl if reads_right_to_left(name) else formats.header
        )


def _arabic_headers(columns: list[str]) -> bool:
    """Whether most of the input's own headers (those before the result columns, which start
    at `row_number`) read right to left: an Arabic table, shown as Arabic Excel shows one."""
    own = columns[: columns.index("row_number")] if "row_number" in columns else columns
    return sum(map(reads_right_to_left, own)) * 2 > len(own)


def write_results_sheet(
    sheet: Worksheet, formats: Formats, frame: pl.DataFrame, *, wrapped: bool = False
) -> None:
    """Write `frame` (already through `prepare_for_excel`) with a header row at row 0.

    `wrapped`: text wraps at its column's width and every cell sits at the top of its row (the
    Rejects sheet, whose reasons are a sentence long). The columns carry the format, so a cell
    written without one takes it at no cost per cell."""
    look = formats.wrapped if wrapped else formats.text
    columns = frame.columns
    last_row = frame.height
    plain_text, checked_text = _split_text_columns(frame, formats.dates)
    widths = column_widths(frame)
    for index, _, dates in checked_text:  # wide enough for its dates, wherever they are
        if dates is not None:
            widths[index] = max(widths[index], _DATE_WIDTH)
    for index, width in enumerate(widths):
        sheet.set_column(index, index, width, look.plain)
    if wrapped:
        _heights_for_wrapped_text(sheet, frame, widths)
    write_header(sheet, formats, columns)
    if _arabic_headers(columns):
        sheet.right_to_left()
    sheet.freeze_panes(1, 0)
    sheet.repeat_rows(0)
    if columns and columns[0] != "row_number":  # the file's first column (an id, a title)
        sheet.repeat_columns(0)  # on each printed page, beside the result columns
    sheet.set_landscape()
    # Across, then down: a listing's columns are printed on consecutive pages (down first, its
    # verdict came two dozen pages after its inputs in a file of a few hundred rows).
    sheet.print_across()
    # Printed without gridlines, a number's cell ran into the text right of it: "-50 row 18
    # (sheet row 19)", "19 L-9001", "7 true".
    sheet.hide_gridlines(0)  # 0: shown on screen and printed
    sheet.autofilter(0, 0, last_row, len(columns) - 1)
    colour_status_columns(sheet, formats, columns, last_row)
    sheet.ignore_errors({"number_stored_as_text": _WHOLE_SHEET})

    num_cols = [
        (i, number_format(formats, name))
        for i, (name, dt) in enumerate(frame.schema.items())
        if dt != pl.String
    ]
    write_string = sheet.write_string
    write_number = sheet.write_number
    rtl, quoted, rtl_quoted = look.rtl, look.quoted, look.rtl_quoted
    rtl_text = reads_right_to_left
    formula_first = FORMULA_FIRST

    for r, row in enumerate(frame.iter_rows(), 1):
        for c in plain_text:
            v = row[c]
            if v:  # null and "" are both an empty cell
                write_string(r, c, v)
        for c, numbers, dates in checked_text:
            v = row[c]
            if not v:
                continue
            if numbers is not None and (n := numbers[r - 1]) is not None:
                write_number(r, c, n)
            elif dates is not None and (d := dates[r - 1]) is not None:
                write_number(r, c, *d)
            elif v.isascii():
                if v[0] in formula_first:
                    write_string(r, c, v, quoted)
                else:
                    write_string(r, c, v)
            elif not rtl_text(v):
                write_string(r, c, v, quoted if v[0] in formula_first else None)
            else:
                write_string(r, c, v, rtl_quoted if v[0] in formula_first else rtl)
        for c, fmt in num_cols:
            v = row[c]
            if v is not None:
                write_number(r, c, v, fmt)


# Points a line of Calibri 11 takes. A row written without a height stays one line high in
# LibreOffice, whatever its wrapped text needs.
_LINE_HEIGHT = 15


def _heights_for_wrapped_text(sheet: Worksheet, frame: pl.DataFrame, widths: list[float]) -> None:
    """Give each row whose text wraps the lines its longest text needs at its column's width
    (set before the rows are written: the sheet streams, and a row written is gone)."""
    text = [
        (pl.col(name).str.len_chars().fill_null(0) / max(1.0, width - 1)).ceil()
        for (name, dtype), width in zip(frame.schema.items(), widths, strict=True)
        if dtype == pl.String
    ]
    if not text or frame.height == 0:
        return
    lines = frame.select(pl.max_horizontal(text).alias("lines"))["lines"]
    for row, count in enumerate(lines, 1):
        if count > 1:
            sheet.set_row(row, _LINE_HEIGHT * count)


def _split_text_columns(
    frame: pl.DataFrame, date_formats: dict[str, Format]
) -> tuple[list[int], list[tuple[int, list[float | None] | None, list[tuple] | None]]]:
    """Text columns whose cells all go in as they are, and those that need a look per cell:
    some cell is Arabic, starts like a formula, is a plain number (`plain_numbers`, given
    beside the column, None when it has none) or an ISO date or time (given as the value and
    its cell format, None when it has none). Decided with vectorised passes."""
    text = [name for name, dt in frame.schema.items() if dt == pl.String]
    if not text or frame.height == 0:
        return [], []
    numbers = frame.select(plain_numbers(pl.col(n)).alias(n) for n in text)
    has_numbers = {n for n, count in zip(text, numbers.count().row(0), strict=True) if count}
    dated = frame.select(pl.col(text).str.contains(_ANY_ISO).any()).row(0)
    dates = {
        name: _dates(frame[name], date_formats)
        for name, any_date in zip(text, dated, strict=True)
        if any_date
    }
    flags = frame.select(pl.col(text).str.contains(NEEDS_A_LOOK).any()).row(0)
    needs_look = {name for name, flag in zip(text, flags, strict=True) if flag}
    needs_look |= has_numbers | set(dates)
    index = {name: i for i, name in enumerate(frame.columns)}
    return (
        [index[n] for n in text if n not in needs_look],
        [
            (index[n], numbers[n].to_list() if n in has_numbers else None, dates.get(n))
            for n in text
            if n in needs_look
        ],
    )


_ANY_ISO = "|".join((ISO_DATE, ISO_DATETIME, ISO_TIME))


def _dates(column: pl.Series, date_formats: dict[str, Format]) -> list[tuple | None]:
    """Each cell's (Excel serial, date format) when it is an ISO date, datetime or time."""
    parts = column.to_frame().select(excel_dates(pl.col(column.name)).struct.unnest())
    return [
        None if serial is None else (serial, date_formats[kind])
        for serial, kind in zip(parts["serial"].to_list(), parts["kind"].to_list(), strict=True)
    ]
