"""The header row below a title: broker exports often open with a title row or two
("Portfolio Q4 2026", the agency's name, a date) above the real header. When the first row maps
no required column, the next few rows are tried as the header, and the first one under which
every required field finds its column is taken; the rows above it are not listings."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from pipeline.batch.columns import REQUIRED_FIELDS, ColumnConfig, ColumnMap, map_columns
from pipeline.errors import MissingColumnError
from pipeline.io.read import finish_frame

TITLE_ROWS_MAX = 10  # a title block is a few rows; past that a missing column is just missing


@dataclass(frozen=True)
class HeaderBelowTitle:
    frame: pl.DataFrame  # the rows under the header, named by it
    renamed: dict[str, str]  # final name -> header as written (see io.read.unique_headers)
    mapping: ColumnMap
    title_rows: int  # rows above the header, the first of them the one read as the header


def header_below_title(
    raw: pl.DataFrame, config: ColumnConfig, *, source: str
) -> HeaderBelowTitle | None:
    """The table under the first of `raw`'s first rows that works as its header, or None."""
    for row in range(min(TITLE_ROWS_MAX, raw.height)):
        cells = list(raw.row(row))
        if sum(cell is not None for cell in cells) < len(REQUIRED_FIELDS):
            continue
        frame, renamed = finish_frame(cells, raw.slice(row + 1))
        try:
            mapping = map_columns(frame.columns, config, source=source, as_written=renamed)
        except MissingColumnError:
            continue
        return HeaderBelowTitle(frame, renamed, mapping, title_rows=row + 1)
    return None
