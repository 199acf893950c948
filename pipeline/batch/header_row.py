"""The header row below a title: broker exports often open with a title row or two
("Portfolio Q4 2026", the agency's name, a date) above the real header. When the first row maps
no required column, the next few rows are tried as the header; the first one that maps a
required column is it, provided no row above it looks like a listing (filled nearly like the
header, or holding an amount): a file of listings is not thrown away to score a table below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from pipeline.batch.columns import (
    REQUIRED_FIELDS,
    ColumnConfig,
    ColumnMap,
    find_columns,
    map_columns,
)
from pipeline.errors import UnknownHeaderError
from pipeline.io.read import finish_frame

TITLE_ROWS_MAX = 10  # a title block is a few rows; past that a missing column is just missing


@dataclass(frozen=True)
class HeaderBelowTitle:
    frame: pl.DataFrame  # the rows under the header, named by it
    renamed: dict[str, str]  # final name -> header as written (see io.read.unique_headers)
    mapping: ColumnMap
    title_rows: int  # rows above the header, the first of them the one read as the header


def header_below_title(
    raw: pl.DataFrame, config: ColumnConfig, *, source: str, first_row_cells: int
) -> HeaderBelowTitle | None:
    """The table under the header found below `raw`'s header row (which held
    `first_row_cells` values), or None. A header found there that lacks a required column
    raises its MissingColumnError, which names that row's headers."""
    above: list[tuple[int, bool]] = [(first_row_cells, False)]  # (cells filled, a price?)
    for row in range(min(TITLE_ROWS_MAX, raw.height)):
        cells = list(raw.row(row))
        filled = sum(cell is not None for cell in cells)
        priced = any(cell is not None and _AMOUNT.match(cell) for cell in cells)
        frame, renamed = finish_frame(cells, raw.slice(row + 1))
        try:
            found = find_columns(frame.columns, config, source=source, as_written=renamed)
        except UnknownHeaderError:  # a --config's header is not in this row
            found = dict.fromkeys(REQUIRED_FIELDS)
        if any(found[name] is not None for name in REQUIRED_FIELDS):
            if any(_like_a_listing(*row_above, header_cells=filled) for row_above in above):
                return None  # listings above it, not a title: the header is elsewhere
            under = f"{source}, the header under its title"
            mapping = map_columns(frame.columns, config, source=under, as_written=renamed)
            return HeaderBelowTitle(frame, renamed, mapping, title_rows=row + 1)
        above.append((filled, priced))
    return None


def _like_a_listing(filled: int, priced: bool, *, header_cells: int) -> bool:
    """A row filled nearly like the header, or a row of a few cells holding an amount: a
    listing. A title, an agency's name, an export date, group headings are neither."""
    return 4 * filled >= 3 * header_cells or (priced and filled >= 3)


_AMOUNT = re.compile(r"^\s*[0-9][0-9,.\s]{3,}\s*$")  # 1500000, 1,500,000, 120.5 ...
