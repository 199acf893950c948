"""Read an input table (CSV, XLSX, Parquet) into a frame of text cells.

The reader is chosen by the file's extension, and the file's first bytes must agree with it: an
XLSX workbook is a zip archive (``PK\\x03\\x04``), a Parquet file starts and ends with ``PAR1``,
an old Excel 97-2003 workbook (and an encrypted XLSX) is an OLE2 file (``D0 CF 11 E0``). An
OpenDocument spreadsheet (LibreOffice's .ods) is a zip archive too, told apart by its first entry,
``mimetype``, which the OpenDocument standard stores first and uncompressed. A file whose content
contradicts its extension, or that no reader here reads, is refused with an InputError that says
what it is.

Every reader returns the same shape of frame, so later steps never care about the format:

- every column is ``pl.String``; normalisation decides what a cell means, and the original text
  is what gets written back;
- headers are kept exactly as written, except that a byte-order mark is removed, an empty header
  becomes ``column_N`` (N is the 1-based position) and a repeated header gets the suffix
  ``_2``, ``_3``, ... on its second, third, ... occurrence (a suffix already taken by another
  header is skipped);
- an empty or whitespace-only cell is null;
- rows keep their order and none is dropped, except trailing rows in which every cell is null
  (a spreadsheet's formatted-but-empty tail, a CSV's trailing blank lines); a column with an
  empty header and no value at all is dropped for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from pipeline.errors import InputError
from pipeline.io import csv_reader, parquet_reader

__all__ = ["SUPPORTED_EXTENSIONS", "ReadResult", "read_table", "read_table_with_info"]

CSV_EXTENSIONS = (".csv", ".txt", ".tsv")
XLSX_EXTENSIONS = (".xlsx", ".xlsm")
PARQUET_EXTENSIONS = (".parquet", ".pq")
SUPPORTED_EXTENSIONS = CSV_EXTENSIONS + XLSX_EXTENSIONS + PARQUET_EXTENSIONS

ZIP_MAGIC = b"PK\x03\x04"
OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
PARQUET_MAGIC = b"PAR1"
# The first entry of an OpenDocument file, as its local header stores it (name, then content).
ODS_MIMETYPE = b"mimetypeapplication/vnd.oasis.opendocument.spreadsheet"
HEAD_BYTES = 128  # reaches past the first zip entry's header and an ODS mimetype

SAVE_AS_XLSX = "open it in Excel and use File > Save As > Excel Workbook (.xlsx)"
OPENDOCUMENT = "an OpenDocument spreadsheet (.ods)"
SAVE_ODS_AS = "save it as .xlsx or CSV"


@dataclass(frozen=True, kw_only=True)
class ReadResult:
    """A read table and how it was read (for the run summary and for error messages)."""

    frame: pl.DataFrame
    format: str  # csv | xlsx | parquet
    encoding: str | None = None  # CSV: the encoding used
    encoding_overridden: str | None = None  # CSV: why the --encoding named was not used
    separator: str | None = None  # CSV: the field separator used
    sheet: str | None = None  # XLSX: the sheet read
    passed_over: list[str] | None = None  # XLSX without --sheet: sheets before it not read
    merged_down: list[str] | None = None  # XLSX: merges down a column, filled ("B2:B5")
    not_restored: str | None = None  # XLSX: merged / error cells left as read (see the note)
    renamed_headers: dict[str, str] | None = None  # final name -> header as written
    # The row a spreadsheet shows the first row read (the header) on: CSV 1, XLSX where the
    # sheet's data starts; None for Parquet. And XLSX: the sheet rows hidden (1-based).
    first_row: int | None = None
    hidden_rows: tuple[int, ...] = ()
    # CSV: quoted cells with lines shaped like rows in them (a stray quote joining rows?)
    rows_in_quoted_cells: list[csv_reader.RowsInQuotedCell] | None = None


def read_table(
    path: Path, *, encoding: str | None = None, sheet: str | int | None = None
) -> pl.DataFrame:
    """Read ``path`` as a frame of text cells (see the module docstring for the guarantees)."""
    return read_table_with_info(path, encoding=encoding, sheet=sheet).frame


def read_table_with_info(
    path: Path, *, encoding: str | None = None, sheet: str | int | None = None
) -> ReadResult:
    """Like :func:`read_table`, also saying which encoding, separator or sheet was used.

    ``encoding`` applies to CSV only (any codec name Python knows, e.g. ``cp1256``,
    ``utf-16``); ``sheet`` to XLSX only: a sheet name, or a 0-based position (an int, or a
    string of digits that names no sheet).
    """
    path = Path(path)
    kind = _kind_for(path)
    try:
        if kind == "csv":
            headers, frame, details = csv_reader.read_csv(path, encoding=encoding)
        elif kind == "xlsx":
            from pipeline.io import xlsx_reader  # its imports (10 ms) only for a workbook

            headers, frame, details = xlsx_reader.read_xlsx(path, sheet=sheet)
        else:
            headers, frame, details = parquet_reader.read_parquet(path)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    frame, renamed = finish_frame(headers, frame)
    if frame.width == 0:
        raise InputError(f"{path}: has no header row (the first non-empty row names the columns)")
    if "rows_in_quoted_cells" in details:
        names = unique_headers(headers)[0]  # by position, before empty columns are dropped
        details["rows_in_quoted_cells"] = [
            replace(cell, column=names[cell.position])
            for cell in details["rows_in_quoted_cells"]
            if cell.row <= frame.height
        ]
    return ReadResult(frame=frame, format=kind, renamed_headers=renamed or None, **details)


def check_input(path: Path) -> str:
    """'csv', 'xlsx' or 'parquet' for a readable input file; InputError naming what is wrong."""
    return _kind_for(Path(path))


def _unreadable(path: Path, exc: OSError) -> InputError:
    """A file that is there but cannot be read (permissions, a disk error)."""
    return InputError(f"{path}: cannot be read ({exc.strerror or exc})")


def _kind_for(path: Path) -> str:
    """The reader for ``path``, after checking that the file exists and its bytes agree."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if not path.is_file():
        raise InputError(f"{path}: is not a file")
    size = path.stat().st_size
    if size == 0:
        raise InputError(f"{path}: the file is empty")
    try:
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
            fh.seek(max(size - 4, 0))
            tail = fh.read(4)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    looks_like = _describe(head, tail)
    ext = path.suffix.lower()

    if looks_like == OPENDOCUMENT:  # whatever its name: an .ods renamed .xlsx too
        raise InputError(f"{path}: is {OPENDOCUMENT}: {SAVE_ODS_AS}")
    if ext in XLSX_EXTENSIONS:
        if head.startswith(ZIP_MAGIC):
            return "xlsx"
        if head.startswith(OLE2_MAGIC):
            raise InputError(
                f"{path}: is an old-format Excel 97-2003 workbook or a password-protected one, "
                f"not an XLSX workbook; remove the password or {SAVE_AS_XLSX}"
            )
        raise InputError(f"{path}: named {ext} but is {looks_like}; {_rename_hint(looks_like)}")
    if ext == ".xls":
        if head.startswith(ZIP_MAGIC):
            raise InputError(f"{path}: is an XLSX workbook named .xls; rename it to .xlsx")
        if head.startswith(OLE2_MAGIC):
            raise InputError(
                f"{path}: old-format Excel 97-2003 workbooks (.xls) are not supported; "
                f"{SAVE_AS_XLSX}"
            )
        raise InputError(f"{path}: named .xls but is {looks_like}; {_rename_hint(looks_like)}")
    if ext in PARQUET_EXTENSIONS:
        if head.startswith(PARQUET_MAGIC) and tail == PARQUET_MAGIC:
            return "parquet"
        if head.startswith(PARQUET_MAGIC):
            raise InputError(f"{path}: is a truncated Parquet file (no PAR1 footer)")
        raise InputError(f"{path}: named {ext} but is {looks_like}; {_rename_hint(looks_like)}")
    if ext in CSV_EXTENSIONS:
        if looks_like == "text":
            return "csv"
        raise InputError(f"{path}: named {ext} but is {looks_like}; {_rename_hint(looks_like)}")
    raise InputError(
        f"{path}: unsupported file type {ext or '(no extension)'!r} (the content looks like "
        f"{looks_like}); supported: {', '.join(SUPPORTED_EXTENSIONS)}"
    )


def _describe(head: bytes, tail: bytes) -> str:
    if head.startswith(ZIP_MAGIC) and ODS_MIMETYPE in head:
        return OPENDOCUMENT
    if head.startswith(ZIP_MAGIC):
        return "an XLSX workbook (zip archive)"
    if head.startswith(OLE2_MAGIC):
        return "an old-format Excel 97-2003 (.xls) or password-protected workbook"
    if head.startswith(PARQUET_MAGIC) and tail == PARQUET_MAGIC:
        return "a Parquet file"
    return "text"


def _rename_hint(looks_like: str) -> str:
    if looks_like == "text":
        return "if it is CSV or tab-separated text, rename it to .csv"
    if looks_like.startswith("an XLSX"):
        return "if it is an Excel workbook, rename it to .xlsx"
    if looks_like.startswith("a Parquet"):
        return "rename it to .parquet"
    return SAVE_AS_XLSX


def unique_headers(headers: list[str | None]) -> tuple[list[str], dict[str, str]]:
    """Final column names for ``headers``, and the renamed ones (new name -> as written).

    A BOM is removed; an empty or whitespace-only header becomes ``column_N`` (1-based
    position); the k-th occurrence (k >= 2) of a repeated header becomes ``header_k``, skipping
    a suffix some other header already uses. Renaming is deterministic and leaves every header
    that needs no renaming exactly as written.
    """
    cleaned = [(h or "").replace("\ufeff", "") for h in headers]
    taken = {h for h in cleaned if h.strip()}
    seen: dict[str, int] = {}
    names: list[str] = []
    renamed: dict[str, str] = {}
    for position, header in enumerate(cleaned, start=1):
        if not header.strip():
            name = f"column_{position}"
            while name in taken or name in names:
                name += "_"
        elif header in seen:
            count = seen[header] + 1
            while f"{header}_{count}" in taken or f"{header}_{count}" in names:
                count += 1
            seen[header] = count
            name = f"{header}_{count}"
        else:
            seen[header] = 1
            names.append(header)
            continue
        names.append(name)
        renamed[name] = header
    return names, renamed


def _blank(cell: pl.Expr) -> pl.Expr:
    """Empty or only (Unicode) white space; a quarter faster than the regex ^\\s*$."""
    return cell.str.strip_chars().str.len_bytes() == 0


def finish_frame(
    headers: list[str | None], frame: pl.DataFrame
) -> tuple[pl.DataFrame, dict[str, str]]:
    """Apply the shared guarantees to a reader's raw frame (columns in header order)."""
    frame = frame.with_columns(
        pl.when(_blank(pl.col(c))).then(None).otherwise(pl.col(c)).alias(c) for c in frame.columns
    )
    names, renamed = unique_headers(headers)
    frame.columns = names
    empty = [
        name
        for name, header in zip(names, headers, strict=True)
        if not (header or "").replace("\ufeff", "").strip()
        and frame[name].null_count() == frame.height
    ]
    if empty:
        frame = frame.drop(empty)
        renamed = {k: v for k, v in renamed.items() if k not in empty}
    if frame.width and frame.height:
        filled = frame.select(pl.any_horizontal(pl.all().is_not_null()).alias("filled"))["filled"]
        last = filled.arg_true()
        frame = frame.head(int(last[-1]) + 1 if len(last) else 0)
    return frame, renamed
