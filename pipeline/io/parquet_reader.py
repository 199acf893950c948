"""Parquet through polars; every column cast to text like the other formats.

Casting follows polars: numbers print as the shortest decimal that reads back the same
(``1500000.0``, ``1e+20``), booleans as ``true``/``false``, dates as ISO. Times and datetimes
(without a time zone) print as ISO with a fraction of a second only when they have one
(``2024-05-01 13:30:00``, ``23:59:59.500``): polars' own text pads every datetime with six
zeros and cuts a time's fraction off. Decimals print as numbers do, without trailing zeros
(``140.000`` is ``140``, ``300.500`` is ``300.5``). Durations print as ISO 8601 (``P3D``,
``PT1H30M``, ``PT1.5S``), which no spreadsheet takes for a number. A binary column holding
UTF-8 text (as Hive and Impala store strings) reads as that text, and a value of it that is not
UTF-8 (text in another encoding) as ``0x`` and lowercase hex (``0x1f8b...``), which no name or
number field takes; a binary column of bytes (a UUID as 16 bytes, a checksum: most values not
UTF-8) reads as hex, every value of it, and an empty value as empty. A nested column (list,
struct) cannot become text and is refused.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipeline.errors import InputError


def read_parquet(path: Path) -> tuple[list[str | None], pl.DataFrame, dict[str, str]]:
    """The column names, the rows as text (positional column names) and nothing else to say."""
    try:
        frame = pl.read_parquet(path)
        headers: list[str | None] = list(frame.columns)
    except pl.exceptions.DuplicateError:
        headers, frame = with_repeated_names(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(f"{path}: cannot be read as Parquet ({_first_line(exc)})") from exc
    nested = [name for name, s in zip(headers, frame, strict=True) if s.dtype.is_nested()]
    if nested:
        raise InputError(
            f"{path}: column(s) {', '.join(repr(n) for n in nested)} hold lists or structs; "
            "only flat columns can be read"
        )
    texts = []
    for i, name in enumerate(headers):
        try:
            texts.append(as_text(frame.to_series(i)).alias(f"c{i}"))
        except pl.exceptions.PolarsError as exc:  # e.g. a binary column that is not UTF-8
            raise InputError(
                f"{path}: column {name!r} cannot be read as text ({_first_line(exc)})"
            ) from exc
    return headers, pl.DataFrame(texts), {}


def with_repeated_names(path: Path) -> tuple[list[str | None], pl.DataFrame]:
    """The names and columns (named `c0`, `c1`... by position) of a file with two columns of
    one name (pyarrow writes them, polars refuses them), which are read as `note`, `note_2`
    as a CSV's or a workbook's repeated headers are."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path).read()
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path}: cannot be read as Parquet ({_first_line(exc)})") from exc
    names: list[str | None] = list(table.column_names)
    frame = pl.from_arrow(table.rename_columns([f"c{i}" for i in range(len(names))]))
    assert isinstance(frame, pl.DataFrame)
    return names, frame


def as_text(column: pl.Series) -> pl.Series:
    """A typed column as the text cells the pipeline reads (see the module docstring)."""
    dtype = column.dtype
    if dtype == pl.Time:
        return column.dt.to_string("%H:%M:%S%.f")
    if isinstance(dtype, pl.Datetime) and dtype.time_zone is None:
        return column.dt.to_string("%Y-%m-%d %H:%M:%S%.f")
    if isinstance(dtype, pl.Duration):
        return column.dt.to_string("iso")
    if dtype == pl.Binary:
        return _binary_as_text(column)
    if isinstance(dtype, pl.Decimal):  # polars prints the scale's zeros: 140.000
        return column.cast(pl.String).str.replace(r"\.0+$|(\.[0-9]*?)0+$", "${1}")
    return column.cast(pl.String)


def _binary_as_text(column: pl.Series) -> pl.Series:
    try:
        return column.cast(pl.String)  # UTF-8 text stored as bytes
    except pl.exceptions.ComputeError:
        pass
    digits = column.bin.encode("hex")
    as_hex = ("0x" + digits).zip_with(digits != "", digits).alias(column.name)
    texts = [_utf8(value) for value in column.to_list()]
    decoded = sum(bool(text) for text in texts)
    if decoded < (digits != "").sum() / 2:  # bytes, shown as an analyst's tools show them
        return as_hex
    return pl.Series(column.name, texts, dtype=pl.String).fill_null(as_hex)  # text, mostly


def _utf8(value: bytes | None) -> str | None:
    try:
        return None if value is None else value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
