"""What calamine does not tell about a sheet, read from the sheet's XML.

- Cells merged down a column, as broker sheets merge a city or a district over the rows of one
  block: Excel shows the value on every row of the merge, but stores it in the top cell only,
  and calamine reads the others as empty. They are filled down. Only merges that span rows and
  start below the first row are filled, and only down their first column (a merge across
  columns is a heading, or a note spread over the next column, whose value does not belong in
  that column).
- Error cells (#N/A, #DIV/0!, #VALUE!), which calamine reads as empty: they get their error
  text back, so a rejected row says "'#N/A'" where the user sees #N/A, not "empty", and the
  output keeps the cell as it was.
- Formulas without a saved result (a workbook written by a program that does not calculate,
  never opened in Excel), which calamine reads as empty, or drops with their row when they end
  the sheet: found, so the run can refuse the file instead of scoring blanks. The same for
  formulas whose saved result is a placeholder: a workbook that asks to be recalculated when
  opened (`fullCalcOnLoad`, as xlsxwriter writes every workbook) may hold formulas saved with
  a made-up result, xlsxwriter's 0 unless the script gave one, which calamine reads as the
  value: a formula saved as 0 in such a workbook is taken for one.

The sheet's XML counts rows and columns from A1, the frame from the first cell that holds a
value. Where the frame starts is worked out from the XML, then checked: the sheet's first number
cells must be, at the places it gives, the numbers calamine read; if they are not (or the sheet
has no number to check with), nothing is changed. A merge whose top cell is empty (a blank
block, for layout) or whose other cells hold values is left alone.
"""

from __future__ import annotations

import itertools
import posixpath
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import polars as pl

_ERROR_CELL = re.compile(
    rb'<(?:\w+:)?c\s+r="([A-Z]+)([0-9]+)"[^>]*?\bt="e"[^>]*>'
    rb"(?:<(?:\w+:)?f[^>]*/>|<(?:\w+:)?f[^>]*>[^<]*</(?:\w+:)?f>)?<(?:\w+:)?v>([^<]*)<"
)
_MERGE = re.compile(rb'<(?:\w+:)?mergeCell\s+ref="([A-Z]+)([0-9]+):([A-Z]+)([0-9]+)"')
_FORMULA = rb"(?:<(?:\w+:)?f[^>]*/>|<(?:\w+:)?f[^>]*>[^<]*</(?:\w+:)?f>)?"
# A cell element with content (not self-closing), and one whose content is a value (a
# formula's result, or text): two guesses at the cells calamine reads a value from.
_CELL = rb'<(?:\w+:)?c\s+r="%s([0-9]+)"[^>]*(?<!/)>'
_VALUE_CELL = _CELL + _FORMULA + rb"(?:<(?:\w+:)?v>[^<]|<(?:\w+:)?is>)"
# A number cell (no type, or t="n") and its number, to check a guess with.
_NUMBER_CELL = re.compile(
    rb'<(?:\w+:)?c\s+r="([A-Z]+)([0-9]+)"(?:\s+(?:s|t)="(?:[0-9]+|n)")*\s*>'
    + _FORMULA
    + rb"<(?:\w+:)?v>(-?[0-9.]+(?:[eE][-+]?[0-9]+)?)</"
)
CHECKED_NUMBERS = 200
# The end of a formula cell that may hold no result: no value element, or an empty-element one
# as openpyxl writes (an empty text result is <v></v>, or <v/> with t="str"), after a formula
# element with text or an empty one (a shared formula's other cells). Unprefixed tags first,
# whose literal start the scan skips to; prefixed ones (x:c) only in a sheet that has them.
_NO_RESULT = (
    re.compile(rb"</f>\s*(<v\s*/>\s*)?</c>"),
    re.compile(rb"<f\b[^>]*/>\s*(<v\s*/>\s*)?</c>"),
)
_NO_RESULT_PREFIXED = (
    re.compile(rb"</\w+:f>\s*(<\w+:v\s*/>\s*)?</\w+:c>"),
    re.compile(rb"<\w+:f\b[^>]*/>\s*(<\w+:v\s*/>\s*)?</\w+:c>"),
)
_REF = re.compile(rb'\br="([A-Z]+)([0-9]+)"')
# A cell whose content opens with a formula element.
_FORMULA_CELL = re.compile(rb'<(?:\w+:)?c\s+r="([A-Z]+)([0-9]+)"[^>]*(?<!/)>\s*(<(?:\w+:)?f\b)')
_FORMULA_ELEMENT = re.compile(rb"<(?:\w+:)?f\b[^>]*/>|<(?:\w+:)?f\b[^>]*>([^<]*)</(?:\w+:)?f>")
_ZERO_RESULT = re.compile(rb"\s*<(?:\w+:)?v>0</(?:\w+:)?v>")
_HIDDEN_ROW = re.compile(rb'<(?:\w+:)?row\b[^>]*\bhidden="(?:1|true)"[^>]*>')
_ROW_NUMBER = re.compile(rb'\br="([0-9]+)"')
_FULL_CALC_ON_LOAD = re.compile(rb'<(?:\w+:)?calcPr\b[^>]*\bfullCalcOnLoad="(?:1|true)"')
_TYPE = re.compile(rb'\bt="([^"]*)"')
_FORMULA_TEXT = re.compile(rb"<(?:\w+:)?f\b[^>]*>([^<]*)</(?:\w+:)?f>")
_NS = {
    "m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main",
    "r": "http://schemas.openxmlformats.org/officeDocument/2006/relationships",
}
_RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"


@dataclass(frozen=True)
class MergedDown:
    ref: str  # as Excel names it: "B2:B5"
    column: int  # 0-based, in the sheet
    first_row: int  # 0-based, in the sheet: the cell holding the value
    last_row: int


@dataclass(frozen=True)
class Restored:
    frame: pl.DataFrame
    merged_down: list[str]  # the merges filled ("B2:B5")
    not_placed: str | None = None  # what could not be restored, when the place was not sure
    # The first formula without a saved result: (cell, formula), as "A2", "=B2*2"
    no_result: tuple[str, str] | None = None
    # Whether that formula has a placeholder for a result (the workbook asks to be recalculated
    # when opened) rather than none
    placeholder_result: bool = False


@dataclass(frozen=True)
class SheetXml:
    xml: bytes
    recalculated_on_open: bool  # the workbook asks to be recalculated when opened


@dataclass(frozen=True)
class RowPlaces:
    first: int | None  # the sheet row (1-based) of the table's first row read, its header
    hidden: tuple[int, ...]  # the sheet rows (1-based) hidden, by hand or by a filter


def row_places(sheet: SheetXml | None) -> RowPlaces:
    """Where the table's rows are in the sheet, as Excel numbers them: calamine's range starts
    at the first row holding a value (rows above it, empty, are not read), and the rows the
    sheet hides (a filter hides the rows it leaves out)."""
    if sheet is None:
        return RowPlaces(None, ())
    top = _first_value_row(sheet.xml)
    hidden: tuple[int, ...] = ()
    if b'hidden="' in sheet.xml:
        hidden = tuple(
            int(row.group(1))
            for tag in _HIDDEN_ROW.finditer(sheet.xml)
            if (row := _ROW_NUMBER.search(tag.group(0))) is not None
        )
    return RowPlaces(top + 1 if top is not None else None, hidden)


def restore_cells(sheet: SheetXml | None, frame: pl.DataFrame) -> Restored:
    """`frame` (a sheet as read, its first row the header) with its error cells' text and
    each merge down a column filled with its top value; or, when the table holds a formula
    without a saved result, the frame as read and that formula."""
    if sheet is None:
        return Restored(frame, [])
    xml, recalculated_on_open = sheet.xml, sheet.recalculated_on_open
    unsaved = (b"<f" in xml or b":f" in xml) and (
        _unsaved_formula(xml, 0, recalculated_on_open) is not None
    )
    if not unsaved and b"mergeCell" not in xml and b't="e"' not in xml:
        return Restored(frame, [])
    origin = _origin(xml, frame)
    if unsaved:
        # Not in the first row read (a title, or the header: a header cell that is a formula
        # without a result reads as a blank header, said as such), nor above it.
        top = origin[0] if origin is not None else (_first_value_row(xml) or 0)
        formula = _unsaved_formula(xml, top + 1, recalculated_on_open)
        if formula is not None:
            no_result, placeholder = formula
            return Restored(frame, [], no_result=no_result, placeholder_result=placeholder)
        if b"mergeCell" not in xml and b't="e"' not in xml:
            return Restored(frame, [])
    if origin is None:
        merges = len(_merges(xml))
        errors = sum(1 for _ in _ERROR_CELL.finditer(xml))
        counts = [(merges, "merged range(s)"), (errors, "error cell(s)")]
        found = " and ".join(f"{n} {what}" for n, what in counts if n)
        return Restored(frame, [], found or None)
    frame = _with_errors(xml, origin, frame)
    return Restored(*_filled_down(xml, origin, frame))


def _unsaved_formula(
    xml: bytes, from_row: int, recalculated_on_open: bool
) -> tuple[tuple[str, str], bool] | None:
    """The first formula, from `from_row` (0-based) down, saved without a result, or (in a
    workbook asking to be recalculated when opened) with a placeholder for one; and whether
    it was a placeholder. Such a workbook's formulas were saved uncalculated, their results
    made up: xlsxwriter's are 0 (a real result of 0 is taken for one too, until the file is
    saved calculated)."""
    no_result = formula_without_result(xml, from_row=from_row)
    if no_result is not None:
        return no_result, False
    if recalculated_on_open:
        zero = first_formula_saved_as_zero(xml, from_row=from_row)
        if zero is not None:
            return zero, True
    return None


def _first_value_row(xml: bytes) -> int | None:
    """The sheet row (0-based) calamine's range starts at, unchecked: the first holding a value
    (for a sheet whose numbers cannot place the frame, see `_origin`); None in an empty sheet."""
    first = re.search(_VALUE_CELL % rb"[A-Z]+", xml)  # rows come in order: the top row
    return int(first.group(1)) - 1 if first else None


def formula_without_result(xml: bytes, *, from_row: int = 0) -> tuple[str, str] | None:
    """The first formula cell of a sheet's XML, in row `from_row` (0-based) or below, that
    holds no result: (cell, "=formula")."""
    patterns = [*_NO_RESULT, *(_NO_RESULT_PREFIXED if b":f" in xml else ())]
    for end in sorted(
        (m for pattern in patterns for m in pattern.finditer(xml)), key=lambda m: m.start()
    ):
        found = _cell_without_result(xml, end, from_row)
        if found is not None:
            return found
    return None


def first_formula_saved_as_zero(xml: bytes, *, from_row: int = 0) -> tuple[str, str] | None:
    """The first formula cell of a sheet's XML, in row `from_row` (0-based) or below, whose
    saved result is the number 0: (cell, "=formula"); a shared formula's other cells are
    named without their formula."""
    for match in _FORMULA_CELL.finditer(xml):
        letters, row, _ = match.groups()
        kind = _TYPE.search(match.group(0))
        if int(row) - 1 < from_row or (kind is not None and kind.group(1) != b"n"):
            continue
        formula = _FORMULA_ELEMENT.match(xml, match.start(3))
        if formula is not None and _ZERO_RESULT.match(xml, formula.end()):
            text = formula.group(1)
            return (letters + row).decode(), "=" + _unescaped(text) if text else "a shared formula"
    return None


def _unescaped(text: bytes) -> str:
    return ElementTree.fromstring(b"<f>" + text + b"</f>").text or ""


def _cell_without_result(xml: bytes, end: re.Match[bytes], from_row: int) -> tuple[str, str] | None:
    start = max(xml.rfind(b"<c ", 0, end.start()), xml.rfind(b":c ", 0, end.start()))
    tag_end = xml.find(b">", start)
    if start < 0 or tag_end < 0:
        return None
    tag = xml[start:tag_end]
    ref, kind = _REF.search(tag), _TYPE.search(tag)
    if ref is None or int(ref.group(2)) - 1 < from_row:
        return None
    kind_text = kind.group(1) if kind else b"n"
    if kind_text not in (b"n", b"str") or (kind_text == b"str" and end.group(1)):
        return None  # a result there, empty as it may be (a text <v/>, an error, a boolean)
    formula = _FORMULA_TEXT.search(xml, tag_end, end.end())
    text = formula.group(1) if formula else b""
    return (ref.group(1) + ref.group(2)).decode(), "=" + _unescaped(text)


def text_cells(
    sheet: SheetXml | None, frame: pl.DataFrame, columns: list[int]
) -> set[tuple[int, int]]:
    """The (row, column) places in `frame` (a sheet as read) of its text cells in `columns`
    (shared strings, inline strings, a formula's text result); empty when the places cannot
    be worked out."""
    if sheet is None or not columns:
        return set()
    origin = _origin(sheet.xml, frame)
    if origin is None:
        return set()
    top, left = origin
    letters = b"|".join(_letters(c + left).encode() for c in columns)
    cell = rb'<(?:\w+:)?c\s+r="(' + letters + rb')([0-9]+)"[^>]*?\bt="(?:s|str|inlineStr)"'
    return {
        (int(number) - 1 - top, _column(column) - left)
        for column, number in re.findall(cell, sheet.xml)
    }


_NUM_FMT = re.compile(rb'<(?:\w+:)?numFmt\s[^>]*?numFmtId="([0-9]+)"[^>]*?formatCode="(0{2,})"')
_CELL_XFS = re.compile(rb"<(?:\w+:)?cellXfs\b[^>]*>(.*?)</(?:\w+:)?cellXfs>", re.DOTALL)
_XF = re.compile(rb"<(?:\w+:)?xf\b[^>]*>")
_XF_FORMAT = re.compile(rb'\bnumFmtId="([0-9]+)"')
_TEXT_TYPE = re.compile(rb'\bt="(?:s|str|inlineStr|b|e)"')


def zero_padded_styles(path: Path) -> dict[int, int]:
    """Cell style (index) -> digits, for the styles whose number format pads a whole number
    with zeros (`00000`: an id stored as 123 and shown 00123, a phone number shown
    0501234567); empty when there are none or the styles cannot be read."""
    try:
        with zipfile.ZipFile(path) as archive:
            styles = archive.read("xl/styles.xml")
    except (KeyError, OSError, zipfile.BadZipFile):
        return {}
    widths = {int(number): len(code) for number, code in _NUM_FMT.findall(styles)}
    xfs = _CELL_XFS.search(styles) if widths else None
    if xfs is None:
        return {}
    padded = {}
    for index, xf in enumerate(_XF.findall(xfs.group(1))):
        number = _XF_FORMAT.search(xf)
        if number is not None and int(number.group(1)) in widths:
            padded[index] = widths[int(number.group(1))]
    return padded


def zero_padded(
    sheet: SheetXml | None, frame: pl.DataFrame, styles: dict[int, int]
) -> pl.DataFrame:
    """`frame` (a sheet as read) with the whole numbers of cells in `styles` padded with zeros
    as the sheet shows them (123 in a `00000` cell reads 00123)."""
    if sheet is None or not styles:
        return frame
    origin = _origin(sheet.xml, frame)
    if origin is None:
        return frame
    top, left = origin
    ids = b"|".join(str(index).encode() for index in styles)
    cell = re.compile(rb'<(?:\w+:)?c\s+r="([A-Z]+)([0-9]+)"[^>]*?\bs="(' + ids + rb')"[^>]*>')
    columns: dict[int, list[str | None]] = {}
    for match in cell.finditer(sheet.xml):
        if _TEXT_TYPE.search(match.group()):
            continue  # text typed in the cell is shown as typed
        row, column = int(match.group(2)) - 1 - top, _column(match.group(1)) - left
        if not (0 <= row < frame.height and 0 <= column < frame.width):
            continue
        cells = _cells(columns, frame, column)
        value = cells[row]
        if value is not None and value.isdigit():
            cells[row] = value.zfill(styles[int(match.group(3))])
    return _replaced(frame, columns)


def _with_errors(xml: bytes, origin: tuple[int, int], frame: pl.DataFrame) -> pl.DataFrame:
    top, left = origin
    columns: dict[int, list[str | None]] = {}
    for match in _ERROR_CELL.finditer(xml):
        letters, number, text = match.groups()
        row, column = int(number) - 1 - top, _column(letters) - left
        if not (0 <= row < frame.height and 0 <= column < frame.width):
            continue
        cells = _cells(columns, frame, column)
        if cells[row] is None:
            cells[row] = text.decode("utf-8", errors="replace")
    return _replaced(frame, columns)


def _filled_down(
    xml: bytes, origin: tuple[int, int], frame: pl.DataFrame
) -> tuple[pl.DataFrame, list[str]]:
    merges = _merges(xml)
    top, left = origin
    columns: dict[int, list[str | None]] = {}
    done = []
    for merge in sorted(merges, key=lambda m: (m.first_row, m.column)):
        row, column = merge.first_row - top, merge.column - left
        last = min(merge.last_row - top, frame.height - 1)
        if row < 1 or not 0 <= column < frame.width or last <= row:
            continue  # the header row or above, or outside the table
        cells = _cells(columns, frame, column)
        if cells[row] is None or any(c is not None for c in cells[row + 1 : last + 1]):
            continue  # a blank block, or not a merge as calamine read it
        cells[row + 1 : last + 1] = [cells[row]] * (last - row)
        done.append(merge.ref)
    return _replaced(frame, columns), done


def _cells(
    columns: dict[int, list[str | None]], frame: pl.DataFrame, column: int
) -> list[str | None]:
    """The column's cells as a list to change, made once per column."""
    if column not in columns:
        columns[column] = frame.to_series(column).to_list()
    return columns[column]


def _replaced(frame: pl.DataFrame, columns: dict[int, list[str | None]]) -> pl.DataFrame:
    changed = [pl.Series(frame.columns[c], cells, dtype=pl.String) for c, cells in columns.items()]
    return frame.with_columns(changed) if changed else frame


def read_sheet_xml(path: Path, sheet_index: int) -> SheetXml | None:
    """The XML of the workbook's sheet at `sheet_index` (the order of its tabs), and whether
    the workbook asks to be recalculated when opened; None if it cannot be read."""
    try:
        with zipfile.ZipFile(path) as archive:
            workbook_xml = archive.read("xl/workbook.xml")
            workbook = ElementTree.fromstring(workbook_xml)
            sheets = workbook.findall("m:sheets/m:sheet", _NS)
            rel_id = sheets[sheet_index].get(f"{{{_NS['r']}}}id")
            rels = ElementTree.fromstring(archive.read("xl/_rels/workbook.xml.rels"))
            target = next(r.get("Target", "") for r in rels.iter(_RELS) if r.get("Id") == rel_id)
            name = target.lstrip("/") if target.startswith("/") else posixpath.join("xl", target)
            sheet = archive.read(posixpath.normpath(name))
            return SheetXml(sheet, _FULL_CALC_ON_LOAD.search(workbook_xml) is not None)
    except (KeyError, IndexError, StopIteration, zipfile.BadZipFile, ElementTree.ParseError):
        return None


def _merges(xml: bytes) -> list[MergedDown]:
    """The sheet's merges that span rows (one row's merge is a heading, not a value per row)."""
    found = []
    for match in _MERGE.finditer(xml):
        left, top, right, bottom = match.groups()
        ref = f"{left.decode()}{top.decode()}:{right.decode()}{bottom.decode()}"
        if int(bottom) > int(top):
            found.append(MergedDown(ref, _column(left), int(top) - 1, int(bottom) - 1))
    return found


def _origin(xml: bytes, frame: pl.DataFrame) -> tuple[int, int] | None:
    """(row, column), 0-based in the sheet, of the frame's first cell: where calamine's range
    starts, the first row and column holding a value. Guessed from the cells with a value,
    then from the cells with any content, and taken only once the sheet's numbers check."""
    numbers = [
        (int(row) - 1, _column(letters), float(value))
        for letters, row, value in itertools.islice(
            (m.groups() for m in _NUMBER_CELL.finditer(xml)), CHECKED_NUMBERS
        )
    ]
    if not numbers:
        return None
    for cell in (_VALUE_CELL, _CELL):
        guess = _first_row_and_column(xml, cell)
        if guess is not None and _numbers_match(frame, guess, numbers):
            return guess
    return None


def _first_row_and_column(xml: bytes, cell: bytes) -> tuple[int, int] | None:
    first = re.search(cell % rb"([A-Z]+)", xml)  # rows come in order: the top row
    if first is None:
        return None
    column = _column(first.group(1))
    if column > 0:  # a cell further left, in a row below: one scan for all those columns
        left = b"|".join(_letters(c).encode() for c in range(column))
        found = [_column(m.group(1)) for m in re.finditer(cell % (b"(" + left + b")"), xml)]
        column = min([column, *found])
    return int(first.group(2)) - 1, column


def _numbers_match(
    frame: pl.DataFrame, origin: tuple[int, int], numbers: list[tuple[int, int, float]]
) -> bool:
    """True if each number cell, placed by `origin`, is in the frame as that number (cells
    shown as dates or text do not count either way), and at least one is."""
    top, left = origin
    matched = 0
    for row, column, value in numbers:
        row, column = row - top, column - left
        if not (0 <= row < frame.height and 0 <= column < frame.width):
            return False
        text = frame[row, column]
        if text is not None and _DATE_OR_TIME.match(text):
            continue  # a number shown as a date or a time: calamine turned it into that text
        try:
            shown = float(text) if text is not None else None
        except ValueError:
            return False  # a number on a text cell: not the place
        if shown is None or abs(shown - value) > 1e-9 * max(1.0, abs(value)):
            return False
        matched += 1
    return matched > 0


_DATE_OR_TIME = re.compile(
    r"^(?:\d{4}-\d{2}-\d{2}(?: \d{2}:\d{2}:\d{2}(?:\.\d+)?)?|\d{2}:\d{2}:\d{2}(?:\.\d+)?)$"
)


def _column(letters: bytes) -> int:
    number = 0
    for letter in letters:
        number = number * 26 + letter - ord("A") + 1
    return number - 1


def _letters(column: int) -> str:
    letters = ""
    column += 1
    while column:
        column, rest = divmod(column - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters
