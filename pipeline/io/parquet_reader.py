"""Parquet through polars; every column cast to text like the other formats.

Casting follows polars: numbers print as the shortest decimal that reads back the same
(``1500000.0``, ``1e+20``), booleans as ``true``/``false``, dates and datetimes as ISO. A
nested column (list, struct) cannot become text and is refused.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipeline.errors import InputError


def read_parquet(path: Path) -> tuple[list[str | None], pl.DataFrame, dict[str, str]]:
    """The column names, the rows as text (positional column names) and nothing else to say."""
    try:
        frame = pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(f"{path}: cannot be read as Parquet ({_first_line(exc)})") from exc
    nested = [name for name, dtype in frame.schema.items() if dtype.is_nested()]
    if nested:
        raise InputError(
            f"{path}: column(s) {', '.join(repr(n) for n in nested)} hold lists or structs; "
            "only flat columns can be read"
        )
    headers: list[str | None] = list(frame.columns)
    texts = []
    for i, name in enumerate(frame.columns):
        try:
            texts.append(frame.get_column(name).cast(pl.String).alias(f"c{i}"))
        except pl.exceptions.PolarsError as exc:  # e.g. a binary column that is not UTF-8
            raise InputError(
                f"{path}: column {name!r} cannot be read as text ({_first_line(exc)})"
            ) from exc
    return headers, pl.DataFrame(texts), {}


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
