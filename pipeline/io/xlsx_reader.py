"""XLSX / XLSM workbooks through fastexcel (calamine), every cell as text.

fastexcel's ``dtypes="string"`` turns each cell into text the way a user reads it: whole numbers
without a decimal point (1500000, not 1500000.0), other numbers with at most 9 decimal places,
booleans as ``true``/``false``, dates and times as ISO ``YYYY-MM-DD HH:MM:SS``. Error cells
(``#N/A``, ``#DIV/0!``) become null (their text is put back from the sheet's XML, with merged
cells: `xlsx_sheet_xml`). Three artefacts of that conversion are undone here, in number, date
and time cells only (a text cell that reads like one is kept as typed, found in the sheet's XML):

- a number cut to 9 decimals (3166.666666667 for the formula result 3166.6666666666665) is
  printed in full, so a value read and written back is the value in the cell;

- a datetime at midnight becomes the date alone (``2024-05-01``), which is what a date cell shows;
- a time of day alone (a cell holding 09:30, no date) becomes the time alone (``09:30:00``),
  not a datetime on calamine's day zero (``1899-12-31 09:30:00``, 1904-01-01 in the 1904 system);
- a number of 10^8 or more with a fraction prints binary noise in its 9 decimals
  (99999999.99 -> ``99999999.989999995``); such text is re-printed as the shortest decimal that
  reads back as the same double (``99999999.99``).

Without --sheet, the first visible sheet with data is read. The table starts at the sheet's first
non-empty row and column (calamine's range); that first row holds the headers. Formulas are read
as their cached values.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import fastexcel
import polars as pl

from pipeline.errors import InputError
from pipeline.io.xlsx_sheet_xml import (
    SheetXml,
    read_sheet_xml,
    restore_cells,
    row_places,
    text_cells,
    zero_padded,
    zero_padded_styles,
)

# calamine logs what it passes over ("'chartsheet' not a valid worksheet" for a chart sheet,
# which is passed over as empty): without a handler of the program's, Python printed it on
# stderr, which cron mails as if the run had failed.
logging.getLogger("calamine").addHandler(logging.NullHandler())

MIDNIGHT = r"^(\d{4}-\d{2}-\d{2}) 00:00:00$"
# calamine's day zero: 1899-12-31, or 1904-01-01 in a workbook of the 1904 date system (old Mac
# Excel); no Excel date is before 1900, and a date-and-time on 1 January 1904 is not a listing's
TIME_OF_DAY = r"^(?:1899-12-31|1904-01-01) (\d{2}:\d{2}:\d{2}(?:\.\d+)?)$"
FLOAT_NOISE = r"^-?\d{8,}\.\d{9}$"
NINE_DECIMALS = r"^-?\d+\.\d{9}$"  # how the text conversion prints a number it cut short


def read_xlsx(
    path: Path, *, sheet: str | int | None = None
) -> tuple[list[str | None], pl.DataFrame, dict[str, object]]:
    """The header cells, the data rows (positional column names) and the sheet read."""
    try:
        workbook = fastexcel.read_excel(path)
    except fastexcel.FastExcelError as exc:
        raise InputError(f"{path}: {_why_unreadable(path, exc)}") from exc
    names = workbook.sheet_names
    passed_over: list[str] = []
    if sheet is None:
        index, raw, passed_over = _first_sheet_with_data(path, workbook)
    else:
        index = _sheet_index(path, names, sheet)
        raw = _load(path, workbook, index)
    if raw.height == 0:
        others = f"; its sheets are {', '.join(repr(n) for n in names)} (--sheet NAME)"
        raise InputError(f"{path}: sheet {names[index]!r} is empty" + others * (len(names) > 1))
    raw = _with_all_digits(workbook, index, raw)
    sheet_xml = read_sheet_xml(path, index)
    raw = _tidied(raw, sheet_xml)
    restored = restore_cells(sheet_xml, raw)
    if restored.no_result is not None:
        cell, formula = restored.no_result
        if restored.placeholder_result:
            raise InputError(
                f"{path}: sheet {names[index]!r} holds formulas that were never calculated (cell "
                f"{cell}: {formula}, saved as 0): the program that wrote the file (xlsxwriter "
                "does) left them for the spreadsheet to work out when it opens the file, and "
                "they would read as 0. Open the file in Excel and save it (in LibreOffice, first "
                "Data > Calculate > Recalculate Hard), and run again"
            )
        raise InputError(
            f"{path}: sheet {names[index]!r} holds formulas without a saved result (cell {cell}:"
            f" {formula}), which read as empty: the program that wrote the file did not "
            "calculate them. Open the file in Excel or LibreOffice, save it, and run again"
        )
    raw = zero_padded(sheet_xml, restored.frame, zero_padded_styles(path))
    headers = list(raw.row(0))
    places = row_places(sheet_xml)
    details = {
        "sheet": names[index],
        "first_row": places.first,
        "hidden_rows": places.hidden,
        "passed_over": passed_over,
        "merged_down": restored.merged_down,
        "not_restored": restored.not_placed,
    }
    return headers, raw.slice(1), details


def _load(path: Path, workbook: fastexcel.ExcelReader, index: int) -> pl.DataFrame:
    try:
        return workbook.load_sheet(index, header_row=None, dtypes="string").to_polars()
    except fastexcel.FastExcelError as exc:
        name = workbook.sheet_names[index]
        raise InputError(f"{path}: sheet {name!r} cannot be read ({_first_line(exc)})") from exc


def _first_sheet_with_data(
    path: Path, workbook: fastexcel.ExcelReader
) -> tuple[int, pl.DataFrame, list[str]]:
    """The first sheet a user sees with something in it: hidden sheets (often last
    quarter's figures kept for reference) and empty ones (a leftover "Sheet1", a chart) are
    passed over, and named in the run's summary. If only hidden sheets have data, the run
    stops: which of them, if any, is this quarter's is for the user to say (--sheet).
    Without any data, the first sheet (its error says it is empty)."""
    passed_over, hidden = [], []
    for index, name in enumerate(workbook.sheet_names):
        try:
            loaded = workbook.load_sheet(index, header_row=None, dtypes="string")
        except fastexcel.FastExcelError:
            passed_over.append(f"{name!r} unreadable")
            continue
        if loaded.visible != "visible":
            passed_over.append(f"{name!r} hidden")
            hidden += [name] * (loaded.height > 0)
        elif loaded.height == 0:
            passed_over.append(f"{name!r} empty")
        else:
            return index, loaded.to_polars(), passed_over
    if hidden:
        raise InputError(
            f"{path}: no visible sheet has data; hidden sheet(s) "
            f"{', '.join(repr(n) for n in hidden)} do: to score one, name it with --sheet NAME"
        )
    return 0, _load(path, workbook, 0), []


def _sheet_index(path: Path, names: list[str], sheet: str | int | None) -> int:
    if sheet is None:
        return 0
    if isinstance(sheet, str):
        if sheet in names:
            return names.index(sheet)
        # Then as typed loosely: spaces around it, another case (Excel's own rule: sheet
        # names are unique whatever their case).
        alike = [i for i, n in enumerate(names) if n.strip().casefold() == sheet.strip().casefold()]
        if len(alike) == 1:
            return alike[0]
        if len(alike) > 1:
            raise InputError(
                f"{path}: has no sheet named exactly {sheet!r}, and "
                f"{', '.join(repr(names[i]) for i in alike)} all fit it: name one as it is "
                "written (--sheet)"
            )
        if not sheet.strip().isdigit():
            raise InputError(
                f"{path}: has no sheet named {sheet!r}; its sheets are "
                f"{', '.join(repr(n) for n in names)}"
            )
        sheet = int(sheet)
    if not 0 <= sheet < len(names):
        raise InputError(
            f"{path}: has no sheet at position {sheet} (0-based); it has {len(names)} sheet(s): "
            f"{', '.join(repr(n) for n in names)}"
        )
    return sheet


def _with_all_digits(
    workbook: fastexcel.ExcelReader, index: int, raw: pl.DataFrame
) -> pl.DataFrame:
    """`raw` with the numbers that the text conversion cut to 9 decimals (3166.666666667 for
    3166.6666666666665, 46.612345679 for 46.6123456789) printed in full: the shortest text
    that reads back as the cell's number. Only columns holding such a cut number are read
    again, as numbers; a text cell reads back as exactly its own number, so it is left alone."""
    # By name: fastexcel counts positions in use_columns from the sheet's column A, and the
    # frame from its first column with a value.
    cut = [c for c in raw.columns if raw[c].str.contains(NINE_DECIMALS).any()]
    if not cut:
        return raw
    sheet = workbook.load_sheet(index, header_row=None, dtypes="float", use_columns=cut)
    numbers = sheet.to_polars()
    if numbers.height != raw.height or numbers.columns != cut:  # not the same cells
        return raw
    fixed = []
    for name in cut:
        text, number = raw.get_column(name), numbers.get_column(name)
        printed = text.cast(pl.Float64, strict=False)
        # the text is this number cut to 9 decimals (and not, say, a text cell's own number)
        lost = (
            text.str.contains(NINE_DECIMALS)
            & (printed != number)
            & ((printed - number).abs() <= 1e-9)
        )
        fixed.append(text.zip_with(~lost.fill_null(True), number.cast(pl.String)))
    return raw.with_columns(fixed)


def _tidied(raw: pl.DataFrame, sheet: SheetXml | None) -> pl.DataFrame:
    """`raw` with calamine's printing of number, date and time cells undone (`_tidy`); a text
    cell that happens to read like that printing (`2024-05-01 00:00:00` typed as text) is
    kept as typed."""
    tidy = raw.with_columns(_tidy(pl.col(c)) for c in raw.columns)
    changed = [i for i, c in enumerate(raw.columns) if not tidy[c].equals(raw[c])]
    if not changed:
        return tidy
    kept = text_cells(sheet, raw, changed)
    columns: dict[int, list[str | None]] = {}
    for row, column in kept:
        if column in changed and 0 <= row < raw.height:
            if column not in columns:  # (setdefault would build the list again every time)
                columns[column] = tidy.to_series(column).to_list()
            columns[column][row] = raw[row, column]
    return tidy.with_columns(
        pl.Series(raw.columns[c], cells, dtype=pl.String) for c, cells in columns.items()
    )


def _tidy(cell: pl.Expr) -> pl.Expr:
    shortest = cell.cast(pl.Float64, strict=False).cast(pl.String)
    return (
        pl.when(cell.str.contains(FLOAT_NOISE))
        .then(shortest.str.replace(r"\.0$", ""))
        .otherwise(cell.str.replace(TIME_OF_DAY, "$1").str.replace(MIDNIGHT, "$1"))
    )


def _why_unreadable(path: Path, exc: Exception) -> str:
    """What calamine's refusal to open `path` means to the person who sent it: a zip archive
    cut short (a copy or download interrupted) or otherwise broken is damaged; a whole archive
    without a workbook in it is not an XLSX workbook. Calamine's words come last."""
    try:
        with zipfile.ZipFile(path) as archive:
            broken = archive.testzip()
            names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        broken = path.name
        names = set()
    if broken is not None:
        return (
            "the file is damaged or incomplete (not a whole zip archive): copy it again "
            f"({_first_line(exc)})"
        )
    if "xl/workbook.xml" not in names:
        return (
            "is a zip archive but not an XLSX workbook (it holds no xl/workbook.xml); "
            f"save it from Excel as .xlsx ({_first_line(exc)})"
        )
    return f"cannot be read as an XLSX workbook ({_first_line(exc)})"


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
