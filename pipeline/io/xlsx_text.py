"""Making a frame's values safe and faithful as Excel cells.

Excel holds at most 32,767 UTF-16 code units in a cell; longer text is cut with a visible
marker instead of xlsxwriter's silent truncation. NaN and infinity have no cell form, so they
become blank. Other dtypes than String and numbers (dates, booleans) are written as their text;
text in ISO date form becomes a date cell (`xlsx_results`).
"""

from __future__ import annotations

import re
from datetime import date

import polars as pl

EXCEL_MAX_CHARS = 32_767
TRUNCATION_MARKER = " …[truncated: Excel holds at most 32,767 characters in a cell]"

# Text starting with one of these would be read as a formula if typed into Excel.
FORMULA_FIRST = frozenset("=+-@\t\r")
ARABIC = re.compile("[\u0600-\u06ff]")
# The same test as a polars pattern: a value that may be Arabic or start like a formula.
NEEDS_A_LOOK = r"^[=+\-@\t\r]|[^\x00-\x7f]"
# Text that is a plain number (no leading zero, no trailing decimal zero, not below 0.0001,
# which General shows as 1E-05) is written as a number, so that an input column of prices sums
# and sorts as numbers: a whole number of at most 11 characters (longer ones are identifiers,
# phone numbers, which Excel would show as 1.23457E+11), a decimal of at most 11 characters
# before its point and 17 significant digits (a double's longest shortest text; an XLSX
# number cell read back in full, 3166.6666666666665). "1,500,000", "00123", "1.50", "1e6" and
# long identifiers stay text.
PLAIN_NUMBER = r"^-?(?:0|[1-9][0-9]*)(?:\.[0-9]*[1-9])?$"
PLAIN_NUMBER_MAX_CHARS = 11
PLAIN_DECIMAL = r"^-?[0-9]{1,11}\.[0-9]+$"
PLAIN_DECIMAL_MAX_DIGITS = 17


def plain_numbers(column: pl.Expr) -> pl.Expr:
    """The number a text cell shows, where it is a plain number (else null)."""
    length = column.str.len_chars()
    plain = (
        column.str.contains(PLAIN_NUMBER)
        & (
            (length <= PLAIN_NUMBER_MAX_CHARS)
            | (
                column.str.contains(PLAIN_DECIMAL)
                & (column.str.count_matches("[0-9]") <= PLAIN_DECIMAL_MAX_DIGITS)
            )
        )
        & (column != "-0")
        & ~column.str.contains(r"^-?0\.0000")  # General shows 0.00000001 as 1E-08
    )
    return pl.when(plain).then(column.cast(pl.Float64, strict=False))


# Dates and times as the readers give a workbook's date cells (ISO, `xlsx_reader`), and as
# CSV exports write them: written back as Excel dates, so they filter and sort as dates. Years
# 1900-9999 only: Excel has no date before 1900.
ISO_DATE = r"^(?:19|[2-9][0-9])[0-9]{2}-[01][0-9]-[0-3][0-9]$"
ISO_DATETIME = r"^(?:19|[2-9][0-9])[0-9]{2}-[01][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-5][0-9]$"
ISO_TIME = r"^[0-2][0-9]:[0-5][0-9]:[0-5][0-9]$"
DATE_FORMATS = {"date": "yyyy-mm-dd", "datetime": "yyyy-mm-dd hh:mm:ss", "time": "hh:mm:ss"}


# Serial 0 of Excel's 1900 date system, counted from 1900-03-01 on; before that day serials are
# one less, Excel keeping the 1900-02-29 that Lotus 1-2-3 had (serial 60).
_EPOCH = date(1899, 12, 30)
_AFTER_LOTUS_LEAP_DAY = date(1900, 3, 1)


def _day_serial(day: pl.Expr) -> pl.Expr:
    days = (day - pl.lit(_EPOCH)).dt.total_days()
    return pl.when(day < pl.lit(_AFTER_LOTUS_LEAP_DAY)).then(days - 1).otherwise(days)


def _day_fraction(time: pl.Expr) -> pl.Expr:
    hours, minutes = time.dt.hour().cast(pl.Int32), time.dt.minute().cast(pl.Int32)  # not Int8
    return (hours * 3600 + minutes * 60 + time.dt.second()).cast(pl.Float64) / 86_400


def excel_dates(column: pl.Expr) -> pl.Expr:
    """The Excel serial (1900 date system) of a text cell in ISO date, date and time or time of
    day form, as struct fields `serial` and `kind` (date, datetime, time); nulls where it is
    none, or no real day (2024-02-30). Worked out here for the whole column: xlsxwriter's
    write_datetime converts cell by cell, and takes a datetime on 1900-01-01 for a time alone."""
    day = pl.when(column.str.contains(ISO_DATE)).then(column.str.to_date("%Y-%m-%d", strict=False))
    stamp = pl.when(column.str.contains(ISO_DATETIME)).then(
        column.str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False, time_unit="us")
    )
    time = pl.when(column.str.contains(ISO_TIME)).then(column.str.to_time("%H:%M:%S", strict=False))
    serial = pl.coalesce(
        _day_serial(day).cast(pl.Float64),
        _day_serial(stamp.dt.date()).cast(pl.Float64) + _day_fraction(stamp.dt.time()),
        _day_fraction(time),
    )
    kind = (
        pl.when(day.is_not_null())
        .then(pl.lit("date"))
        .when(stamp.is_not_null())
        .then(pl.lit("datetime"))
        .when(time.is_not_null())
        .then(pl.lit("time"))
    )
    return pl.struct(serial=serial, kind=kind)


def has_arabic(text: str) -> bool:
    return not text.isascii() and ARABIC.search(text) is not None


_FIRST_LETTER = re.compile(r"[^\W\d_]")


def reads_right_to_left(text: str) -> bool:
    """True when the first letter is Arabic (the Unicode rule for a paragraph's direction):
    an Arabic name or sentence, but not an English message that quotes an Arabic header."""
    if text.isascii():
        return False
    first = _FIRST_LETTER.search(text)
    return first is not None and ARABIC.match(first.group()) is not None


# A run of Arabic words (letters, and the spaces between them).
_ARABIC_RUN = re.compile("[\u0600-\u06ff](?:[\u0600-\u06ff\\s]*[\u0600-\u06ff])?")


def isolated_arabic(text: str) -> str:
    """An English text with each run of Arabic words in it isolated (U+2068 ... U+2069), as
    the Unicode bidi rules provide: otherwise what follows a name joins its right-to-left run,
    and Excel shows "city 'مدينة' (1)" as "city '(1) 'مدينة". Text that reads right to left
    (Arabic first) is left as it is."""
    if text.isascii() or reads_right_to_left(text):
        return text
    return _ARABIC_RUN.sub(lambda run: f"\u2068{run.group()}\u2069", text)


def looks_like_formula(text: str) -> bool:
    return text[:1] in FORMULA_FIRST


def fit_excel_text(text: str) -> str:
    """`text`, cut with a marker when it is longer than an Excel cell holds."""
    if len(text) <= EXCEL_MAX_CHARS // 2 or _utf16_len(text) <= EXCEL_MAX_CHARS:
        return text
    room = EXCEL_MAX_CHARS - len(TRUNCATION_MARKER)
    # Cut in UTF-16 code units, as Excel counts (an emoji is two); a pair cut in half is
    # dropped. (Shortening by the excess of characters looped for ever on 17,000 emoji.)
    units = text.encode("utf-16-le")[: room * 2]
    return units.decode("utf-16-le", errors="ignore") + TRUNCATION_MARKER


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def prepare_for_excel(frame: pl.DataFrame) -> pl.DataFrame:
    """A copy of `frame` whose every value can be written as one cell, with vectorised work.

    Numeric columns stay numeric with NaN/inf blanked; String columns keep their text (cut only
    past Excel's limit); any other dtype becomes its text form.
    """
    exprs: list[pl.Expr] = []
    long_text: list[str] = []
    text_columns = [n for n, dt in frame.schema.items() if dt == pl.String]
    if text_columns and frame.height:
        longest = frame.select(pl.col(text_columns).str.len_chars().max().fill_null(0)).row(0)
        long_text = [n for n, m in zip(text_columns, longest, strict=True) if m > 16_383]
    for name, dtype in frame.schema.items():
        col = pl.col(name)
        if dtype.is_float():
            exprs.append(pl.when(col.is_finite()).then(col).otherwise(None).alias(name))
        elif dtype.is_decimal():
            exprs.append(col.cast(pl.Float64))
        elif name in long_text:
            exprs.append(col.map_elements(fit_excel_text, return_dtype=pl.String))
        elif dtype == pl.String or dtype.is_integer():
            continue
        else:
            exprs.append(col.cast(pl.String))
    return frame.with_columns(exprs) if exprs else frame
