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


@dataclass(frozen=True)
class NotesBelow:
    table: pl.DataFrame  # the rows above the notes
    rows: int  # rows below the table, blank ones included
    first_note: str


def notes_below(raw: pl.DataFrame) -> NotesBelow | None:
    """`raw` without the notes below its table, or None when there are none."""
    if raw.height == 0 or raw.width < 2:
        return None
    values = raw.select(_value(c) for c in raw.columns)
    filled = values.select(pl.sum_horizontal(pl.all().is_not_null()))[:, 0]
    table_rows = filled >= 2
    if not table_rows.any():
        return None
    last = int(table_rows.arg_true()[-1])
    below = filled.slice(last + 1)
    if below.is_empty() or below[0] != 0 or (below == 0).all():
        return None
    notes = values.slice(last + 1).select(pl.coalesce(pl.all()))[:, 0].drop_nulls()
    return NotesBelow(raw.head(last + 1), below.len(), _shown(notes[0]))


def _value(column: str) -> pl.Expr:
    """The cell's text, None when it holds none (empty, or spaces only)."""
    text = pl.col(column).cast(pl.String).str.strip_chars()
    return pl.when(text != "").then(text).alias(column)


def _shown(note: str) -> str:
    return note if len(note) <= SHOWN_CHARACTERS else note[:SHOWN_CHARACTERS] + "…"
