"""Batch validation: the engine's rules over the whole file, with messages for a spreadsheet.

A row is rejected for the first problem in the order of the request body: a cell that does not
read as what its field needs (a price of 'abc'), else the first engine rule it breaks. The rule
text is the engine's own (`pipeline.engine.rules`); this module only adds where it was found:
row, column and the value as written.
"""

from __future__ import annotations

import polars as pl

from pipeline.batch.columns import ColumnMap
from pipeline.batch.normalize import ascii_digits
from pipeline.batch.positions import scattered
from pipeline.engine.rules import violations
from pipeline.engine.schema import FIELD_PATHS, REQUEST_SCHEMA

EMPTY_ROW = "empty_row"  # error_code of a row with no value at all (a blank line)
REASON_COLUMNS = ("error_code", "error_field", "error_message", "error_column", "error_value")
SHOWN_CHARACTERS = 60  # of a long value, in an error message
_EXPECTED = {pl.Float64(): "a number", pl.Boolean(): "yes or no"}

# Excel's error values, as an XLSX reader hands them over (a formula that failed: a VLOOKUP
# that found no district). A number or yes/no field cannot read one; a name field would take
# it for a name, so it is refused there too.
EXCEL_ERROR = r"^#(?:N/A|DIV/0!|VALUE!|REF!|NAME\?|NUM!|NULL!|SPILL!|CALC!|GETTING_DATA)$"
# Bytes that are not UTF-8 text, as the Parquet reader shows them (see pipeline.io.parquet_reader)
NOT_TEXT = r"^0x(?:[0-9a-f]{2})+$"
_NAME_NOT = {
    EXCEL_ERROR: "a name, not an Excel error value (a formula that failed in the sheet)",
    NOT_TEXT: "a name, not bytes in hex (a binary value that is not UTF-8 text)",
}

# (column, what it must be, pattern) for the cells a reader hands over as text and
# normalisation types (no pattern: a cell with text but no typed value), and for the name
# fields, which take any text but what a pattern finds, in request order.
_TYPED: list[tuple[str, str, str | None]] = []
for _column, _dtype in REQUEST_SCHEMA.items():
    if _dtype in _EXPECTED and _column != "reasoning":
        _TYPED.append((_column, _EXPECTED[_dtype], None))
    elif _column in ("city", "district"):
        _TYPED += [(_column, what, pattern) for pattern, what in _NAME_NOT.items()]


# A number written the European way (1.250.000,50 or 140,5), or a price like 950.000 whose
# dot may separate thousands: said outright, as the generic "must be a number" leaves a
# broker wondering what is wrong with it.
_SEPARATORS = (
    r"(?:^|[^0-9.,])(?:[0-9]{1,3}(?:\.[0-9]{3})+(?:,[0-9]+)?|[0-9]+,[0-9]{1,2})(?:$|[^0-9.,])"
)
# Question marks where characters were: what Excel writes for those the encoding it saves in
# cannot hold (Arabic-Indic digits in Windows-1256, Arabic in a Western code page).
_LOST = r"\?\?"
_LOST_RULE = (
    "{} (question marks stand where its characters were: lost when the file was saved in an "
    "encoding that cannot hold them; save it again as CSV UTF-8, or as a workbook)"
)
_SEPARATORS_RULE = (
    "{} must be a number with '.' for decimals and ',' (or nothing) between thousands, as in "
    "1,250,000.50: a dot between groups of three digits, or a decimal comma, reads two ways"
)


def _unreadable_cell(
    raw: pl.DataFrame, requests: pl.DataFrame, mapping: ColumnMap, bytes_as_hex: bool
) -> pl.Series:
    """Index into _TYPED of the first cell that has text but no typed value, or a name field
    an error value, or bytes (`bytes_as_hex`: a Parquet input's reader shows them in hex);
    null if none."""
    checks = []
    for i, (column, _, pattern) in enumerate(_TYPED):
        header = mapping.fields.get(column)
        if header is None or (pattern == NOT_TEXT and not bytes_as_hex):
            continue
        if pattern is not None:
            unread = raw[header].str.contains(pattern).fill_null(False)
        else:  # readers turn blank cells into nulls (io.read.finish_frame): a cell has text
            unread = raw[header].is_not_null() & requests[column].is_null()
        checks.append(pl.when(unread).then(pl.lit(i, pl.Int32)))
    if not checks:
        return pl.repeat(None, raw.height, dtype=pl.Int32, eager=True).alias("unread")
    frame = pl.DataFrame({"_": pl.repeat(None, raw.height, dtype=pl.Int32, eager=True)})
    return frame.select(pl.coalesce([*checks, pl.col("_")]).alias("unread")).to_series()


def reject_reasons(
    raw: pl.DataFrame,
    requests: pl.DataFrame,
    mapping: ColumnMap,
    row_numbers: pl.Series,
    sheet_rows: pl.Series | None = None,
    *,
    bytes_as_hex: bool = False,
) -> pl.DataFrame:
    """Per input row: error_code, error_field, error_message, error_column, error_value.

    All null for a valid row; `error_code` set for every rejected one (a blank line has no
    field or column). `raw` is the file as read (text), `requests` its normalised
    request frame, `row_numbers` the 1-based data row numbers used in messages, with the row a
    spreadsheet shows each on (`sheet_rows`, see batch.sheet_rows) when there is one;
    `bytes_as_hex`: the file is Parquet, whose reader shows bytes that are not text in hex.
    """
    unread = _unreadable_cell(raw, requests, mapping, bytes_as_hex)
    broken = violations(requests)
    bad = unread.is_not_null() | broken["error_field"].is_not_null()
    if not bad.any():
        nothing = pl.repeat(None, bad.len(), dtype=pl.String)
        return pl.select(nothing.alias(c) for c in REASON_COLUMNS)
    # Messages only for the rows that need one (a file has few): then back to every row.
    picked = bad.arg_true()
    raw, unread, broken = raw[picked], unread.gather(picked), broken[picked]
    columns = [c for c, _, _ in _TYPED]
    unread_field = pl.Series([FIELD_PATHS[c] for c in columns]).gather(unread)
    unread_column = pl.Series(columns).gather(unread)
    unread_rule = pl.Series(
        [f"{FIELD_PATHS[c]} must be {what}" for c, what, _ in _TYPED], dtype=pl.String
    ).gather(unread)

    where = row_numbers.gather(picked).cast(pl.String)  # the rejected rows' only
    if sheet_rows is not None:
        where = where + " (sheet row " + sheet_rows.gather(picked).cast(pl.String) + ")"
    frame = pl.DataFrame(
        {
            "row_number": where,
            "column": unread_column.fill_null(broken["error_column"]),
            "error_field": unread_field.fill_null(broken["error_field"]),
            "rule": unread_rule.fill_null(broken["error_message"]),
            "is_unread": unread.is_not_null(),
        }
    )
    header_of = {c: h for c, h in mapping.fields.items() if h is not None}
    headers = frame["column"].replace_strict(header_of, default=None, return_dtype=pl.String)
    values = _cell_values(raw, frame["column"], header_of)
    empty = raw.select(pl.all_horizontal(pl.all().is_null()).alias("empty")).to_series()
    frame = frame.with_columns(header=headers, value=values, empty=empty)
    written = ascii_digits(pl.col("value"))  # ٩٥٠٫٠٠٠ reads two ways as 950.000 does
    separators = pl.col("is_unread") & written.str.contains(_SEPARATORS).fill_null(False)
    lost = pl.col("is_unread") & pl.col("value").str.contains(_LOST).fill_null(False)
    number_fields = [FIELD_PATHS[c] for c, what, _ in _TYPED if what == _EXPECTED[pl.Float64()]]
    frame = frame.with_columns(
        rule=pl.when(lost)
        .then(pl.format(_LOST_RULE, pl.col("rule")))
        .when(separators & pl.col("error_field").is_in(number_fields))
        .then(pl.format(_SEPARATORS_RULE, pl.col("error_field")))
        .otherwise(pl.col("rule"))
    )
    where = pl.format("row {}", pl.col("row_number"))
    where = (
        pl.when(pl.col("header").is_not_null())
        .then(pl.format("row {}, column '{}'", pl.col("row_number"), pl.col("header")))
        .otherwise(where)
    )
    length = pl.col("value").str.len_chars()
    shown_value = (
        pl.when(pl.col("value").is_null())
        .then(pl.lit("empty"))
        .when(length > SHOWN_CHARACTERS)  # the whole value is in the Rejects sheet's `value`
        .then(
            pl.format(
                "'{}…' ({} characters)", pl.col("value").str.slice(0, SHOWN_CHARACTERS), length
            )
        )
        .otherwise(pl.format("'{}'", pl.col("value")))
    )
    message = (
        pl.when(pl.col("error_field").is_null())
        .then(None)
        .when(pl.col("empty"))
        .then(pl.format("row {} is empty: a blank line in the table", pl.col("row_number")))
        .otherwise(pl.format("{}: {}: {}", where, shown_value, pl.col("rule")))
    )
    reasons = frame.select(
        error_code=pl.when(pl.col("empty"))
        .then(pl.lit(EMPTY_ROW))
        .otherwise(pl.lit("validation_error")),
        error_field=pl.when(~pl.col("empty")).then(pl.col("error_field")),  # a blank line
        error_message=message,  # breaks no field's rule: it has no field
        error_column=pl.when(~pl.col("empty")).then(pl.col("header")),
        error_value=pl.col("value"),
    )
    return pl.DataFrame([scattered(reasons[c], picked, bad.len()) for c in reasons.columns])


def _cell_values(raw: pl.DataFrame, columns: pl.Series, header_of: dict[str, str]) -> pl.Series:
    """The original text of the cell named by `columns` (a request column per row)."""
    if not header_of:
        return pl.Series([None] * raw.height, dtype=pl.String)
    picks = [
        pl.when(pl.lit(columns) == column).then(pl.col(header))
        for column, header in header_of.items()
    ]
    return raw.select(pl.coalesce(picks).alias("value")).to_series()
