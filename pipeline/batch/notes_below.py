"""Notes below the table: a spreadsheet's table often ends with a blank row and a line or two
of text under it ("Source: CRM export, November 2026", "Prepared by: Omar"). Those lines are
not listings, as the title rows above a header are not: read as rows, each was rejected (the
blank rows as empty, the notes as missing a type), and the Rejects sheet filled with them.

What is taken for notes: the rows after the table's last row of two or more values, when the
first of them is blank and at least one holds a value, and none holds more than one value. A
row of one value could never be scored (a listing needs four), so nothing that could be is
left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

SHOWN_CHARACTERS = 40  # of the first note, in the summary
NOTES_ROWS_MAX = 1_000  # more rows of one value than that at the end are no notes


@dataclass(frozen=True)
class NotesBelow:
    table: pl.DataFrame  # the rows above the notes
    rows: int  # rows below the table, blank ones included
    first_note: str


def notes_below(raw: pl.DataFrame) -> NotesBelow | None:
    """`raw` without the notes below its table, or None when there are none. Only the rows
    at the end are looked at: the last of a file of listings (two values or more) ends it."""
    if raw.height == 0 or raw.width < 2 or _filled(_values(raw.tail(1)))[0] >= 2:
        return None
    tail = _values(raw.tail(NOTES_ROWS_MAX + 1))
    filled = _filled(tail)
    table_rows = filled >= 2
    if not table_rows.any():
        return None  # no table above, or a block too long to be notes
    last = int(table_rows.arg_true()[-1])
    below = filled.slice(last + 1)
    if below[0] != 0 or (below == 0).all():
        return None
    notes = tail.slice(last + 1).select(pl.coalesce(pl.all()))[:, 0].drop_nulls()
    return NotesBelow(raw.head(raw.height - below.len()), below.len(), _shown(notes[0]))


def _filled(values: pl.DataFrame) -> pl.Series:
    """How many values each row of `_values` holds."""
    return values.select(pl.sum_horizontal(pl.all().is_not_null()))[:, 0]


def _values(rows: pl.DataFrame) -> pl.DataFrame:
    """The rows' cells as `_value`s: text, or None."""
    return rows.select(_value(c) for c in rows.columns)


def _value(column: str) -> pl.Expr:
    """The cell's text, None when it holds none (empty, or spaces only)."""
    text = pl.col(column).cast(pl.String).str.strip_chars()
    return pl.when(text != "").then(text).alias(column)


def _shown(note: str) -> str:
    return note if len(note) <= SHOWN_CHARACTERS else note[:SHOWN_CHARACTERS] + "…"
