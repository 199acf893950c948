"""The Summary sheet: counts by verdict (with a chart) and by status, the run's label/value
lines, and, when given, the rows whose verdict changed since the last run.

Everything is written top to bottom because the workbook streams rows (constant_memory).
Shares are stored as numbers, not formulas, so the workbook holds no formula at all.
"""

from __future__ import annotations

import math

import polars as pl
from xlsxwriter.workbook import Workbook
from xlsxwriter.worksheet import Worksheet

from pipeline.batch.summary import RUN_TIME, RUN_TIME_IN_WORKBOOK, RunSummary
from pipeline.io.xlsx_styles import COUNT, TONE_OF_VALUE, Formats
from pipeline.io.xlsx_text import isolated_arabic, looks_like_formula, reads_right_to_left

SHEET = "Summary"
CHANGES_TITLE = "Changed since last run"
EXCEL_LAST_ROW = 1_048_575  # zero-based index of Excel's last row
CHART_COLOURS = {"good": "#63BE7B", "neutral": "#FFC000", "bad": "#F8696B"}


class _Cursor:
    """The next free row; rows only ever move down."""

    def __init__(self) -> None:
        self.row = 0

    def take(self) -> int:
        self.row += 1
        return self.row - 1

    def skip(self) -> None:
        self.row += 1

    def skip_to(self, row: int) -> None:
        self.row = max(self.row, row)


def write_summary_sheet(
    workbook: Workbook,
    sheet: Worksheet,
    formats: Formats,
    summary: RunSummary,
    changes: pl.DataFrame | None,
) -> None:
    lines = [(RUN_TIME_IN_WORKBOOK if k == RUN_TIME else k, v) for k, v in summary.lines()]
    # Column B stays narrow for the count tables; long values (path, fingerprint) overflow
    # into the empty cells to their right.
    sheet.set_column(0, 0, max(24, *(len(label) + 2 for label, _ in lines)))
    sheet.set_column(1, 2, 12)
    sheet.set_landscape()
    sheet.fit_to_pages(1, 0)
    at = _Cursor()
    sheet.write_string(at.take(), 0, "Run summary", formats.title)
    # The counts and their chart first: below the run's lines (two dozen, and notes a few
    # lines tall), the chart was printed cut in two by the first page break.
    chart_ends = at.row
    verdict_rows = _write_counts(sheet, formats, at, "Verdict", summary.counts_by_verdict)
    if verdict_rows and sum(summary.counts_by_verdict.values()) > 0:
        _insert_verdict_chart(workbook, sheet, verdict_rows, list(summary.counts_by_verdict))
        chart_ends += _CHART_ROWS
    at.skip()
    _write_counts(sheet, formats, at, "Status", summary.counts_by_status)

    at.skip()
    at.skip_to(chart_ends + 1)  # the lines' notes, merged over columns B to I, clear of it
    for label, value in lines:
        _write_value_row(sheet, formats, at.take(), label, value)

    if changes is not None:
        at.skip()
        _write_changes(sheet, formats, at, changes)


_HOLDING_PATHS = frozenset({"Input file", "Run journal"})


def _write_value_row(
    sheet: Worksheet, formats: Formats, row: int, label: str, value: object
) -> None:
    if value is not None and not isinstance(value, int | float) and label not in _HOLDING_PATHS:
        text = isolated_arabic(str(value))  # (bool is an int)
        if len(text) > _NOTE_LINE:
            _write_note(sheet, formats, row, label, text)
            return
    _write_text(sheet, formats, row, 0, label)
    if value is None:
        return
    if isinstance(value, bool):
        sheet.write_boolean(row, 1, value)
    elif isinstance(value, int):  # rows, decisions, balances: 100,000 not 100000
        sheet.write_number(row, 1, value, formats.numbers[COUNT])
    elif isinstance(value, float):
        sheet.write_number(row, 1, value)
    elif label in _HOLDING_PATHS:  # a path copied from the cell must open the file
        _write_text(sheet, formats, row, 1, str(value))
    else:
        _write_text(sheet, formats, row, 1, isolated_arabic(str(value)))


# A value longer than a line of columns B to I (about this many characters) is wrapped over
# them: overflowing to the right, a note of 600 characters made the page, printed to fit one
# width, unreadably small.
_NOTE_LINE = 85
_NOTE_LAST_COLUMN = 8
_LINE_HEIGHT = 15  # points, Calibri 11


def _write_note(sheet: Worksheet, formats: Formats, row: int, label: str, text: str) -> None:
    sheet.set_row(row, _LINE_HEIGHT * math.ceil(len(text) / _NOTE_LINE))
    top = formats.wrapped  # the label beside the note's first line, not its last
    sheet.write_string(row, 0, label, top.pick(reads_right_to_left(label), False))
    look = top.pick(reads_right_to_left(text), looks_like_formula(text))
    sheet.merge_range(row, 1, row, _NOTE_LAST_COLUMN, text, look)


def _write_text(sheet: Worksheet, formats: Formats, row: int, col: int, text: str) -> None:
    if text:
        sheet.write_string(
            row, col, text, formats.text.pick(reads_right_to_left(text), looks_like_formula(text))
        )


def _write_counts(
    sheet: Worksheet, formats: Formats, at: _Cursor, title: str, counts: dict[str, int]
) -> tuple[int, int] | None:
    """A small table title | rows | share; returns its first and last data row."""
    header = at.take()
    for col, name in enumerate((title, "Rows", "Share")):
        sheet.write_string(header, col, name, formats.header)
    total = sum(counts.values())
    if not counts:
        sheet.write_string(at.take(), 0, "none")
        return None
    first = at.row
    for value, count in counts.items():
        row = at.take()
        tone = TONE_OF_VALUE.get(value)
        sheet.write_string(row, 0, value, formats.tones[tone] if tone else None)
        sheet.write_number(row, 1, count, formats.numbers[COUNT])
        if total:
            sheet.write_number(row, 2, count / total, formats.share)
    row = at.take()
    sheet.write_string(row, 0, "Total", formats.header)
    sheet.write_number(row, 1, total, formats.header_count)
    return first, at.row - 2


_CHART_ROWS = 15  # xlsxwriter's default chart, 288 pixels tall, over rows of 20


def _insert_verdict_chart(
    workbook: Workbook, sheet: Worksheet, rows: tuple[int, int], verdicts: list[str]
) -> None:
    first, last = rows
    chart = workbook.add_chart({"type": "pie"})
    chart.add_series(
        {
            "name": "Verdicts",
            "categories": [SHEET, first, 0, last, 0],
            "values": [SHEET, first, 1, last, 1],
            "data_labels": {"percentage": True, "category": True, "position": "best_fit"},
            "points": [
                {"fill": {"color": CHART_COLOURS[TONE_OF_VALUE.get(v, "neutral")]}}
                for v in verdicts
            ],
        }
    )
    chart.set_title({"name": "Verdicts of scored rows"})
    chart.set_legend({"position": "right"})
    sheet.insert_chart(first - 1, 3, chart, {"x_scale": 1.0, "y_scale": 1.0})


def _write_changes(sheet: Worksheet, formats: Formats, at: _Cursor, changes: pl.DataFrame) -> None:
    sheet.write_string(at.take(), 0, CHANGES_TITLE, formats.title)
    header = at.take()
    # Row, the input's first column when the run names one (an id to find the listing by,
    # as rows move between nights), old and new verdict
    labels = [c for c in changes.columns if c not in ("row_number", "old_verdict", "new_verdict")]
    for col, name in enumerate(("Row", *labels, "Old verdict", "New verdict")):
        sheet.write_string(header, col, name, formats.header)
    if changes.height == 0:
        sheet.write_string(at.take(), 0, "no verdict changed")
        return
    frame = changes.select("row_number", *labels, "old_verdict", "new_verdict")
    room = EXCEL_LAST_ROW - at.row  # keep the last row for the "more" line
    first_verdict = 1 + len(labels)
    for row_number, *labelled, old, new in frame.head(room).iter_rows():
        row = at.take()
        if row_number is not None:
            sheet.write_number(row, 0, row_number)
        for col, text in enumerate(labelled, start=1):
            if text is not None:
                _write_text(sheet, formats, row, col, str(text))
        for col, verdict in ((first_verdict, old), (first_verdict + 1, new)):
            if verdict:
                tone = TONE_OF_VALUE.get(verdict)
                sheet.write_string(row, col, verdict, formats.tones[tone] if tone else None)
    if frame.height > room:
        sheet.write_string(at.take(), 0, f"{frame.height - room:,} more changes not shown")
