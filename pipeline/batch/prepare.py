"""Read, map, normalise and validate a run's input, charging nothing: the rows and their
requests, the reasons of the rows rejected, and notes on how the file was read."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from pipeline.batch.columns import (
    REQUIRED_FIELDS,
    ColumnConfig,
    ColumnMap,
    columns_in_other_units,
    find_columns,
    load_column_config,
    map_columns,
)
from pipeline.batch.header_row import header_below_title
from pipeline.batch.labels import WARNING
from pipeline.batch.normalize import normalize
from pipeline.batch.notes_below import notes_below
from pipeline.batch.options import BatchOptions
from pipeline.batch.sheet_rows import hidden_rows_note, sheet_rows
from pipeline.batch.totals_row import totals_row
from pipeline.batch.validate import reject_reasons
from pipeline.errors import MissingColumnError, UnknownHeaderError, UsageError
from pipeline.io.csv_reader import describe_rows_in_quoted_cells
from pipeline.io.read import ReadResult, read_table_with_info


def file_fingerprint(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Prepared:
    raw: pl.DataFrame  # the file as read: text cells, original headers
    mapping: ColumnMap
    requests: pl.DataFrame  # REQUEST_SCHEMA columns + row_number
    problems: pl.DataFrame  # reject_reasons() per row; a row is rejected when its error_code is set
    # how the file was read, for the summary: the sheet (and those passed over), a title
    notes: list[tuple[str, object]] = field(default_factory=list)
    # the row a spreadsheet shows each row on (see sheet_rows); None for a Parquet file
    sheet_rows: pl.Series | None = None


def prepare(options: BatchOptions) -> Prepared:
    """Read, map, normalise and validate; charges nothing."""
    read = read_table_with_info(options.input, encoding=options.encoding, sheet=options.sheet)
    raw = read.frame
    source = str(options.input)
    if read.sheet is not None:  # a wrong sheet is the usual cause of a missing column
        first = ", the first with data; --sheet NAME reads another" if options.sheet is None else ""
        source += f" (sheet {read.sheet!r}{first})"
    config = load_column_config(options.config)
    raw, mapping, header_note, title_rows = _mapped(raw, config, source, read.renamed_headers or {})
    notes = _reading_notes(read, header_note)
    if unused := columns_in_other_units(list(raw.columns), mapping, config):
        notes.append((f"{WARNING} column not used", unused))
    if read.rows_in_quoted_cells:
        notes += _rows_in_quoted_cells_note(read, raw)
    below = notes_below(raw)
    if below is not None:
        raw = below.table
        notes.append(
            (
                "Notes below the table",
                f"the {below.rows} row(s) under the last listing (a blank row, then notes such "
                f"as {below.first_note!r}) are not listings",
            )
        )
    total = totals_row(raw, mapping)
    if total is not None:
        raw = total.table
        notes.append(("Totals row", f"the last row ({total.label!r}...) is not a listing"))
    _check_priority(raw, options.priority)  # before a dry run, and before anything is paid
    row_numbers = pl.Series("row_number", range(1, raw.height + 1), dtype=pl.Int64)
    rows_in_sheet = sheet_rows(read.first_row, title_rows, raw.height)
    hidden = hidden_rows_note(read.hidden_rows, rows_in_sheet)
    if hidden is not None:
        notes.append(hidden)
    requests = normalize(raw, mapping).with_columns(
        reasoning=pl.lit(options.reasoning == "all"), row_number=row_numbers
    )
    problems = reject_reasons(
        raw, requests, mapping, row_numbers, rows_in_sheet, bytes_as_hex=read.format == "parquet"
    )
    return Prepared(raw, mapping, requests, problems, notes, rows_in_sheet)


def _mapped(
    raw: pl.DataFrame, config: ColumnConfig, source: str, renamed: dict[str, str]
) -> tuple[pl.DataFrame, ColumnMap, str | None, int]:
    """The table and its column map: under its first row, or under a header found below a
    title (header_row.py; then also the note that says so, and how many rows the title
    took)."""
    try:
        mapping = map_columns(raw.columns, config, source=source, as_written=renamed)
        return raw, mapping, None, 0
    except (MissingColumnError, UnknownHeaderError):
        if _maps_a_required_field(raw.columns, config, source, renamed):
            raise
        written = [h for h in raw.columns if h not in renamed or renamed[h].strip()]
        below = header_below_title(raw, config, source=source, first_row_cells=len(written))
        if below is None:
            raise
    headers = ", ".join(repr(h) for h in below.frame.columns[:3])
    note = (
        f"the row headed {headers}...: the {below.title_rows} row(s) above it"
        + (f" ({written[0]!r}...)" if written else "")
        + " are a title, not listings"
    )
    return below.frame, below.mapping, note, below.title_rows


_ENCODING_NAMES = {
    "cp1256": "Windows-1256, Arabic Excel's CSV",
    "utf-16": "UTF-16, Excel's Unicode text",
    "utf-16-le": "UTF-16 without a byte-order mark",
    "utf-16-be": "UTF-16 without a byte-order mark",
}


def _reading_notes(read: ReadResult, header_note: str | None) -> list[tuple[str, object]]:
    """How the file was read, for the summary and the dry run: the sheet (and the sheets
    passed over), a header under a title, merged and error cells."""
    notes: list[tuple[str, object]] = []
    if read.encoding_overridden is not None:
        notes.append(("Encoding", f"{read.encoding} ({read.encoding_overridden})"))
    elif read.encoding not in (None, "utf-8", "utf-8-sig"):  # UTF-8 goes without saying
        named = _ENCODING_NAMES.get(read.encoding)
        notes.append(("Encoding", f"{read.encoding} ({named})" if named else read.encoding))
    if read.sheet is not None:
        sheet = repr(read.sheet)
        if read.passed_over:
            sheet += (
                f" (the first visible sheet with data; passed over: {', '.join(read.passed_over)})"
            )
        notes.append(("Sheet", sheet))
    if header_note is not None:
        notes.append(("Header row", header_note))
    if read.not_restored:
        notes.append(
            (
                "Merged and error cells not read",
                f"{read.not_restored}: their place in the sheet could not be checked (no number "
                "cell to check it by); their rows were read as they stand (merged cells empty "
                "below their first row, error cells empty). Unmerge and fill them, or fix the "
                "errors, to have them read",
            )
        )
    if read.merged_down:
        shown = ", ".join(read.merged_down[:5]) + (", ..." if len(read.merged_down) > 5 else "")
        notes.append(("Merged cells filled down", f"{len(read.merged_down)} ({shown})"))
    return notes


def _rows_in_quoted_cells_note(read: ReadResult, table: pl.DataFrame) -> list[tuple[str, str]]:
    """The warning about quoted cells holding lines shaped like rows, by the rows and columns
    of `table`: the file read, or the table under a header found below a title."""
    shift = read.frame.height - table.height  # the rows above a header found below a title
    cells = [
        replace(
            cell,
            row=cell.row - shift,
            column=table.columns[read.frame.columns.index(cell.column)]
            if shift and table.width == read.frame.width
            else cell.column,
        )
        for cell in read.rows_in_quoted_cells or []
        if cell.row > shift
    ]
    return (
        [(f"{WARNING} rows inside a quoted cell", describe_rows_in_quoted_cells(cells))]
        if cells
        else []
    )


def _maps_a_required_field(
    headers: list[str], config: ColumnConfig, source: str, renamed: dict[str, str]
) -> bool:
    try:
        found = find_columns(headers, config, source=source, as_written=renamed)
    except UnknownHeaderError:
        return False  # a --config naming headers the first row does not have: maybe below
    return any(found[name] is not None for name in REQUIRED_FIELDS)


def _check_priority(raw: pl.DataFrame, column: str | None) -> None:
    if column is not None and column not in raw.columns:
        raise UsageError(
            f"--priority {column!r}: the file has no such column; it has "
            + ", ".join(repr(c) for c in raw.columns)
        )
