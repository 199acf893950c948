"""A Parquet input's column types, given back to the original columns of a Parquet output.

Every reader hands the pipeline text cells (see `pipeline.io.read`), so without this a Parquet
input's Int64 price or Date column would come out of a Parquet output as text. An input column
takes its type back in the output column of its name, as the run names it (a BOM removed,
" (input)" after a result column's name), when that column's text is exactly the input column
read as text, row for row: nothing is put back that the run did not read. Columns are matched
by name, never by position; one with a blank name (which the reader names by position, or
drops when empty) or a name shared once the BOM is removed stays text.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipeline.batch.result_columns import RESULT_COLUMNS, clash_free_names
from pipeline.errors import InputError
from pipeline.io.parquet_reader import as_text, with_repeated_names


def typed_input(source: Path) -> pl.DataFrame | None:
    """The Parquet file `source` as its types are, or None when it has only text columns."""
    try:
        schema = pl.read_parquet_schema(source)
        if all(dtype == pl.String for dtype in schema.values()):
            return None
        return pl.read_parquet(source)
    except pl.exceptions.DuplicateError:
        return _without_repeated_names(source)
    except (pl.exceptions.PolarsError, OSError):
        return None  # read as text already; the output keeps that text


def _without_repeated_names(source: Path) -> pl.DataFrame | None:
    """The file's columns whose name no other column has (those stay text), with their types:
    one repeated name cost every column its type."""
    try:
        names, frame = with_repeated_names(source)
    except InputError:
        return None
    return frame.select(
        pl.col(f"c{i}").alias(str(name)) for i, name in enumerate(names) if names.count(name) == 1
    )


# Excel keeps 15 significant digits: a longer integer (an ID, a phone number) stays text there.
_EXCEL_DIGITS = 10**15


def _fits_a_spreadsheet(column: pl.Series) -> bool:
    """A number column that a workbook holds as the numbers it has: not a long integer, or a
    decimal of more digits, that Excel would round."""
    if column.dtype.is_integer():
        largest = column.cast(pl.Float64).abs().max()
        return largest is None or float(largest) < _EXCEL_DIGITS  # type: ignore[arg-type]
    if isinstance(column.dtype, pl.Decimal):
        largest = column.abs().max()
        scale = column.dtype.scale or 0
        return largest is None or largest * 10**scale < _EXCEL_DIGITS  # type: ignore[operator]
    return column.dtype.is_numeric()


def with_input_types(
    results: pl.DataFrame, typed: pl.DataFrame | None, *, numeric_only: bool = False
) -> pl.DataFrame:
    """`results` (the input's columns, then RESULT_COLUMNS) with each input column that holds
    exactly the text of `typed`'s column of the same name replaced by that typed column
    (`numeric_only`: only numbers, for a workbook, whose dates and the like stay text)."""
    if typed is None or typed.height < results.height:
        return results
    typed = typed.head(results.height)  # trailing empty rows are not among the results
    originals = set(results.columns[: results.width - len(RESULT_COLUMNS)])
    finals = [name.replace("\ufeff", "") for name in typed.columns]
    named = {
        final: name
        for final, name in zip(finals, typed.columns, strict=True)
        if final.strip() and finals.count(final) == 1
    }
    renames = clash_free_names(list(named))
    replaced: dict[str, pl.Series] = {}
    for final, name in named.items():
        column = typed.get_column(name)
        target = renames.get(final, final)
        if column.dtype == pl.String or target not in originals:
            continue
        if numeric_only and not _fits_a_spreadsheet(column):
            continue
        if results.schema[target] != pl.String:
            continue
        text = as_text(column)
        if text.equals(results.get_column(target), check_names=False):
            if numeric_only and column.dtype == pl.Float32:
                # the number its text shows (140.1), not the one it widens to (140.10000610...)
                column = text.cast(pl.Float64)
            replaced[target] = column.alias(target)
    return results.with_columns(replaced.values()) if replaced else results
