"""The workbook's look: cell formats, verdict/status colours and column widths.

Formats are created once per workbook; cells then reuse them (a format per cell would bloat
styles.xml and cost time).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
from xlsxwriter.format import Format
from xlsxwriter.workbook import Workbook
from xlsxwriter.worksheet import Worksheet

from pipeline.batch.result_columns import SAR_COLUMNS
from pipeline.io.xlsx_text import DATE_FORMATS

HEADER_FILL = "#D9E1F2"

# Excel's own "Good", "Neutral" and "Bad" cell styles: fill and font colour.
GOOD = {"bg_color": "#C6EFCE", "font_color": "#006100"}
NEUTRAL = {"bg_color": "#FFEB9C", "font_color": "#9C5700"}
BAD = {"bg_color": "#FFC7CE", "font_color": "#9C0006"}

# Values of the verdict and status columns, by the colour they are shown in.
TONE_OF_VALUE: dict[str, str] = {
    "match": "good",
    "pass": "good",
    "scored": "good",
    "partial": "neutral",
    "warn": "neutral",
    "skipped": "neutral",
    "no_match": "bad",
    "fail": "bad",
    "rejected": "bad",
    "failed": "bad",
}
TONE_COLOURS = {"good": GOOD, "neutral": NEUTRAL, "bad": BAD}

# Number formats by result column; other numeric columns are shown as Excel's General.
AMOUNT_2DP = "#,##0.00"
COUNT = "#,##0"
NUMBER_FORMATS: dict[str, str] = {
    **dict.fromkeys(SAR_COLUMNS, AMOUNT_2DP),
    "benchmark_transaction_count": COUNT,
    # A percent number (3.4 means 3.4 %), not a fraction, so no Excel "%" scaling.
    "benchmark_yoy_pct": '0.0"%"',
}

_VERDICTS = ("match", "partial", "no_match")
_CHECKS = ("pass", "warn", "fail")
# The coloured columns and the values each can hold.
COLOURED_COLUMNS: dict[str, tuple[str, ...]] = {
    "status": ("scored", "skipped", "rejected", "failed"),
    "verdict": _VERDICTS,
    "price_status": _CHECKS,
    "location_status": _CHECKS,
    "size_status": _CHECKS,
    "details_status": _CHECKS,
}

MIN_WIDTH = 6
MAX_WIDTH = 50
NUMBER_WIDTH = 12
WIDTH_SAMPLE_ROWS = 2000


@dataclass(frozen=True)
class TextFormats:
    """Formats for text cells by (contains Arabic, starts like a formula).

    Arabic text reads right to left and is right aligned. Text starting with `=`, `+`, `-`,
    `@`, tab or CR gets Excel's quote prefix, so editing the cell in Excel keeps it text.
    """

    plain: Format | None
    rtl: Format
    quoted: Format
    rtl_quoted: Format

    def pick(self, arabic: bool, quoted: bool) -> Format | None:
        if arabic:
            return self.rtl_quoted if quoted else self.rtl
        return self.quoted if quoted else self.plain


@dataclass(frozen=True)
class Formats:
    header: Format
    header_rtl: Format
    header_count: Format  # a total row's count: header look, thousands separator
    title: Format
    text: TextFormats
    wrapped: TextFormats  # the same, wrapped at the cell's width, from its top
    numbers: dict[str, Format]
    dates: dict[str, Format]  # by kind: date, datetime, time (`xlsx_text.DATE_FORMATS`)
    share: Format
    tones: dict[str, Format]  # cell formats for the Summary tables
    tone_conditional: dict[str, Format]  # conditional formats (fill and font only)


def make_formats(workbook: Workbook) -> Formats:
    header = {"bold": True, "bg_color": HEADER_FILL, "bottom": 1, "valign": "top"}
    rtl = {"reading_order": 2, "align": "right"}
    wrap = {"text_wrap": True, "valign": "top"}
    return Formats(
        header=workbook.add_format(header),
        header_rtl=workbook.add_format({**header, **rtl}),
        header_count=workbook.add_format({**header, "num_format": COUNT}),
        title=workbook.add_format({"bold": True, "font_size": 13}),
        text=TextFormats(
            plain=None,
            rtl=workbook.add_format(rtl),
            quoted=workbook.add_format({"quote_prefix": True}),
            rtl_quoted=workbook.add_format({**rtl, "quote_prefix": True}),
        ),
        wrapped=TextFormats(
            plain=workbook.add_format(wrap),
            rtl=workbook.add_format({**rtl, **wrap}),
            quoted=workbook.add_format({"quote_prefix": True, **wrap}),
            rtl_quoted=workbook.add_format({**rtl, "quote_prefix": True, **wrap}),
        ),
        numbers={f: workbook.add_format({"num_format": f}) for f in set(NUMBER_FORMATS.values())},
        dates={kind: workbook.add_format({"num_format": f}) for kind, f in DATE_FORMATS.items()},
        share=workbook.add_format({"num_format": "0.0%"}),
        tones={tone: workbook.add_format(c) for tone, c in TONE_COLOURS.items()},
        tone_conditional={tone: workbook.add_format(c) for tone, c in TONE_COLOURS.items()},
    )


def number_format(formats: Formats, column: str) -> Format | None:
    spec = NUMBER_FORMATS.get(column)
    return formats.numbers[spec] if spec else None


def colour_status_columns(
    sheet: Worksheet, formats: Formats, columns: list[str], last_row: int
) -> None:
    """Colour verdict and status cells by value with conditional formats (one rule per value,
    so the cost does not grow with the rows)."""
    if last_row < 1:
        return
    for index, name in enumerate(columns):
        for value in COLOURED_COLUMNS.get(name, ()):
            sheet.conditional_format(
                1,
                index,
                last_row,
                index,
                {
                    "type": "cell",
                    "criteria": "==",
                    "value": f'"{value}"',
                    "format": formats.tone_conditional[TONE_OF_VALUE[value]],
                },
            )


def column_widths(frame: pl.DataFrame) -> list[float]:
    """Readable widths (in characters) from the header and a sample of the values.

    Lengths are counted in characters, not bytes, so Arabic text (two bytes a letter in UTF-8)
    is not given twice the room; long text is capped and stays on one line.
    """
    sample = frame.head(WIDTH_SAMPLE_ROWS)
    text = [n for n, dt in sample.schema.items() if dt == pl.String]
    longest: dict[str, int] = {}
    if text and sample.height:
        row = sample.select(pl.col(text).str.len_chars().max().fill_null(0)).row(0)
        longest = dict(zip(text, row, strict=True))
    widths = []
    for name in frame.columns:
        header = len(name) + 3  # room for the autofilter button
        body = longest.get(name, NUMBER_WIDTH if name not in text else 0) + 1
        widths.append(float(min(MAX_WIDTH, max(MIN_WIDTH, header, body))))
    return widths
