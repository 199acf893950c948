"""A Parquet input's column types, given back to the original columns of a Parquet output.

Every reader hands the pipeline text cells (see `pipeline.io.read`), so without this a Parquet
input's Int64 price or Date column would come out of a Parquet output as text. An original
column takes its input column's values back only when its text is exactly that column read as
text (what the run read, row for row): nothing is put back that the run did not see.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipeline.io.read import PARQUET_EXTENSIONS


def typed_input(source: Path) -> pl.DataFrame | None:
    """The Parquet input as its types are, or None: not Parquet, or nothing but text columns."""
    if Path(source).suffix.lower() not in PARQUET_EXTENSIONS:
        return None
    try:
        schema = pl.read_parquet_schema(source)
        if all(dtype == pl.String for dtype in schema.values()):
            return None
        return pl.read_parquet(source)
    except (pl.exceptions.PolarsError, OSError):
        return None  # read as text already; the output keeps that text


def with_input_types(results: pl.DataFrame, typed: pl.DataFrame | None) -> pl.DataFrame:
    """`results` with each original column that is `typed`'s column as text (same position
    among the columns the reader kept, same rows) replaced by `typed`'s column."""
    if typed is None or typed.height < results.height:
        return results
    typed = typed.head(results.height)  # trailing empty rows are not in the results
    replaced: dict[str, pl.Series] = {}
    position = 0
    for name, dtype in typed.schema.items():
        column = typed.get_column(name)
        if not name.strip() and column.null_count() == column.len():
            continue  # a blank-headed empty column: the reader dropped it
        if position >= results.width:
            break
        target = results.columns[position]
        position += 1
        if dtype == pl.String or results.schema[target] != pl.String:
            continue
        if column.cast(pl.String).equals(results.get_column(target), check_names=False):
            replaced[target] = column.alias(target)
    return results.with_columns(replaced.values()) if replaced else results
