"""The XLSX workbook, read back with openpyxl (and opened by LibreOffice when installed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

import openpyxl
import polars as pl
import pytest
from openpyxl.utils import get_column_letter
from openpyxl.workbook.workbook import Workbook

from pipeline.batch.result_columns import REJECTS_SCHEMA, RESULT_SCHEMA, SAR_COLUMNS
from pipeline.errors import OutputError
from pipeline.io.read import read_table
from pipeline.io.write import write_output
from pipeline.io.xlsx_text import (
    EXCEL_MAX_CHARS,
    NEEDS_A_LOOK,
    TRUNCATION_MARKER,
    has_arabic,
    looks_like_formula,
    plain_numbers,
    reads_right_to_left,
)
from tests.test_writers import (
    ORIGINALS,
    STATUSES,
    leftovers,
    make_rejects,
    make_results,
    make_summary,
    write,
)

CHANGES = pl.DataFrame(
    {
        "row_number": [1, 3],
        "old_verdict": ["partial", "match"],
        "new_verdict": ["match", "no_match"],
    }
)


@pytest.fixture(scope="module")
def workbook_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("xlsx") / "scored.xlsx"
    write(path, changes=CHANGES)
    return path


@pytest.fixture(scope="module")
def book(workbook_path: Path) -> Iterator[Workbook]:
    wb = openpyxl.load_workbook(workbook_path)
    yield wb
    wb.close()


def column_values(book: Workbook, name: str) -> list[object]:
    sheet = book["Results"]
    header = [c.value for c in sheet[1]]
    col = header.index(name) + 1
    return [sheet.cell(row=r, column=col).value for r in range(2, sheet.max_row + 1)]


def test_sheets_in_order(book: Workbook, workbook_path: Path) -> None:
    assert book.sheetnames == ["Results", "Rejects", "Summary"]
    assert leftovers(workbook_path.parent, {"scored.xlsx"}) == []


def test_every_part_is_well_formed_xml(workbook_path: Path) -> None:
    with zipfile.ZipFile(workbook_path) as zf:
        assert zf.testzip() is None
        for name in zf.namelist():
            if name.endswith((".xml", ".rels")):
                ElementTree.fromstring(zf.read(name))


def test_header_then_every_row_in_input_order(book: Workbook) -> None:
    sheet = book["Results"]
    assert [c.value for c in sheet[1]] == make_results().columns
    assert sheet.max_row == 1 + len(STATUSES)
    assert column_values(book, "row_number") == list(range(1, len(STATUSES) + 1))
    assert column_values(book, "status") == STATUSES


PLAIN_NUMBERS = {"-50": -50, "2500000": 2500000, "7": 7, "0": 0}


def test_original_columns_are_the_users_text_and_plain_numbers_are_numbers(book: Workbook) -> None:
    for name, values in ORIGINALS.items():
        # An empty string and a null are both an empty cell; "-50" is the number -50.
        wanted = [PLAIN_NUMBERS.get(v, v) if v else None for v in values]
        got = column_values(book, name)
        assert got == wanted, name
        for value, cell in zip(values, got, strict=True):
            if value in PLAIN_NUMBERS:
                assert isinstance(cell, int | float) and not isinstance(cell, bool)
            elif value:
                assert isinstance(cell, str)


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("950000", 950000), ("-3", -3), ("0.25", 0.25), ("120.5", 120.5),
        ("12345678901", 12345678901), ("123456789012", None), ("00123", None), ("1.50", None),
        ("1e6", None), ("-0", None),
        ("1,500,000", None), ("٢٥", None), (" 5", None), ("5.", None), (".5", None),
        ("0.0001", 0.0001), ("0.00001", None), ("-0.00000001", None),
        ("3166.6666666666665", 3166.6666666666665), ("-46.6123456789", -46.6123456789),
        ("123456789012.5", None), ("1.1234567890123456789", None), ("3166.66666666666650", None),
        ("12345678901.2345678", None), ("0.10000000000000001", None),
        ("-0.1000000000000001", -0.1000000000000001),
    ],
)  # fmt: skip
def test_only_text_that_is_a_plain_number_becomes_one(text: str, number: float | None) -> None:
    got = pl.select(plain_numbers(pl.lit(text))).item()
    assert got == number


def test_result_columns_keep_their_types(book: Workbook) -> None:
    expected = make_results()
    for name, dtype in RESULT_SCHEMA.items():
        values = column_values(book, name)
        wanted = [v or None for v in expected[name].to_list()] if dtype == pl.String else None
        if dtype == pl.String:
            assert values == wanted, name
            continue
        for got, want in zip(values, expected[name].to_list(), strict=True):
            if want is None:
                assert got is None, name
            else:
                assert isinstance(got, int | float) and not isinstance(got, bool), name
                assert got == pytest.approx(want), name


def test_no_cell_anywhere_is_a_formula(book: Workbook) -> None:
    for sheet in book.worksheets:
        for row in sheet.iter_rows():
            for cell in row:
                assert cell.data_type != "f", (sheet.title, cell.coordinate, cell.value)


def test_formula_like_text_carries_a_quote_prefix(book: Workbook) -> None:
    sheet = book["Results"]
    for row in sheet.iter_rows(min_row=2):
        for cell in row:
            if isinstance(cell.value, str):
                assert cell.quotePrefix == (cell.value[0] in "=+-@\t\r"), cell.coordinate


def test_arabic_text_reads_right_to_left(book: Workbook) -> None:
    sheet = book["Results"]
    arabic = sheet["A2"]
    assert arabic.value == "شقة في حي النرجس"
    assert arabic.alignment.readingOrder == 2
    assert arabic.alignment.horizontal == "right"
    assert sheet["C3"].value == "Jeddah"
    assert sheet["C3"].alignment.readingOrder in (0, None)


def test_an_arabic_table_is_a_right_to_left_sheet(book: Workbook, tmp_path: Path) -> None:
    assert not book["Results"].sheet_view.rightToLeft  # one Arabic header of four
    arabic = {"title": "الوصف", "price": "السعر", "city": "المدينة"}
    path = tmp_path / "arabic.xlsx"
    write(path, make_results().rename(arabic))  # three of four
    workbook = openpyxl.load_workbook(path)
    assert workbook["Results"].sheet_view.rightToLeft
    assert not workbook["Summary"].sheet_view.rightToLeft  # English labels
    assert not workbook["Rejects"].sheet_view.rightToLeft


def test_frozen_header_and_autofilter(book: Workbook) -> None:
    results = book["Results"]
    last = get_column_letter(make_results().width)
    assert results.freeze_panes == "A2"
    # printed: the header on every page, and the file's first column beside the results
    assert results.print_title_rows == "$1:$1"
    assert results.print_title_cols == "$A:$A"
    # a listing's columns on consecutive printed pages, not a strip of every row at a time
    assert results.page_setup.pageOrder == "overThenDown"
    assert results.auto_filter.ref == f"A1:{last}{len(STATUSES) + 1}"
    rejects = book["Rejects"]
    assert rejects.freeze_panes == "A2"
    # printed with gridlines: without, "-50" ran into its reason ("-50 row 18 (sheet ...")
    assert results.print_options.gridLines and rejects.print_options.gridLines
    assert rejects.auto_filter.ref == "A1:G3"


def test_number_formats(book: Workbook) -> None:
    sheet = book["Results"]
    header = [c.value for c in sheet[1]]

    def fmt(name: str) -> str:
        return sheet.cell(row=2, column=header.index(name) + 1).number_format

    for name in SAR_COLUMNS:
        assert fmt(name) == "#,##0.00"
    assert fmt("benchmark_transaction_count") == "#,##0"
    assert fmt("benchmark_yoy_pct") == '0.0"%"'
    assert fmt("benchmark_year") == "General"


def test_header_is_bold_with_a_fill_and_columns_have_widths(book: Workbook) -> None:
    sheet = book["Results"]
    for cell in sheet[1]:
        assert cell.font.bold
        assert cell.fill.fgColor.rgb.endswith("D9E1F2")
    widths = [sheet.column_dimensions[get_column_letter(i + 1)].width for i in range(3)]
    assert all(6 <= w <= 60 for w in widths)


def test_verdict_and_status_columns_are_coloured_by_rule(book: Workbook) -> None:
    sheet = book["Results"]
    header = [c.value for c in sheet[1]]
    rules = {str(cf.sqref): [r.formula[0] for r in cf.rules] for cf in sheet.conditional_formatting}
    verdict = get_column_letter(header.index("verdict") + 1)
    assert rules[f"{verdict}2:{verdict}{len(STATUSES) + 1}"] == [
        '"match"',
        '"partial"',
        '"no_match"',
    ]
    status = get_column_letter(header.index("status") + 1)
    assert '"rejected"' in rules[f"{status}2:{status}{len(STATUSES) + 1}"]


def test_rejects_sheet(book: Workbook) -> None:
    rows = list(book["Rejects"].values)
    assert rows[0] == tuple(REJECTS_SCHEMA)
    assert rows[1:] == [tuple(r) for r in make_rejects().rows()]


def test_rejects_reasons_wrap_at_their_column_beside_their_row(tmp_path: Path) -> None:
    """QA 75: a reason of a sentence overflowed to the right of the last column, and the
    sheet, printed to fit one page wide, came out unreadably small (Excel cuts it instead)."""
    path = tmp_path / "scored.xlsx"
    reason = (
        "row 151 (sheet row 152), column 'نوع العقار': 'castle': property.type must be one "
        "of apartment, villa, land, commercial, office"
    )
    rejects = make_rejects().with_columns(
        pl.Series("reason", [reason, "area is missing"]), pl.lit("نوع العقار").alias("column")
    )
    write_output(path, make_results(), rejects=rejects, summary=make_summary())
    sheet = openpyxl.load_workbook(path)["Rejects"]
    header = [c.value for c in sheet[1]]
    cell = sheet.cell(2, header.index("reason") + 1)
    assert cell.value.endswith("commercial, office")
    assert cell.alignment.wrap_text and cell.alignment.vertical == "top"
    assert sheet.column_dimensions[cell.column_letter].width <= 51
    # as tall as its lines (LibreOffice leaves a row written without a height one line high)
    assert sheet.row_dimensions[2].height >= 15 * 3
    assert sheet.row_dimensions[3].height is None  # a short reason: one line, as it was
    # the row's other cells beside the reason's first line, Arabic and numbers too
    for name in ("row_number", "listing", "column", "field"):
        assert sheet.cell(2, header.index(name) + 1).alignment.vertical == "top", name
    assert sheet.cell(2, header.index("column") + 1).alignment.horizontal == "right"


def test_summary_sheet_lines_counts_chart_and_changes(book: Workbook, workbook_path: Path) -> None:
    rows = [r[:3] for r in book["Summary"].values]
    lines = {r[0]: r[1] for r in rows if r[0]}
    for label, value in make_summary().lines():
        if label == "Run time (s)":  # taken before the outputs are written, and labelled so
            label = "Run time before the outputs (s)"
        assert lines[label] == (round(value, 2) if isinstance(value, float) else value), label
    assert isinstance(lines["Decisions spent"], int)
    spent = next(r for r in book["Summary"].iter_rows() if r[0].value == "Decisions spent")[1]
    assert spent.number_format == "#,##0"  # 100,000, not 100000
    counted = next(r for r in book["Summary"].iter_rows() if r[0].value == "rejected")[1]
    assert counted.number_format == "#,##0"  # the count tables too
    assert ("match", 1, pytest.approx(1 / 3)) in rows
    assert ("rejected", 1, pytest.approx(1 / 6)) in rows
    at = rows.index(("Changed since last run", None, None))
    assert rows[at + 1 : at + 4] == [
        ("Row", "Old verdict", "New verdict"),
        (1, "partial", "match"),
        (3, "match", "no_match"),
    ]
    with zipfile.ZipFile(workbook_path) as zf:
        assert "xl/charts/chart1.xml" in zf.namelist()


def test_the_verdict_chart_stands_above_the_run_lines_beside_its_counts(
    book: Workbook, workbook_path: Path
) -> None:
    # Below two dozen run lines (and notes a few lines tall), it was printed cut in two by the
    # first page break (QA 75).
    with zipfile.ZipFile(workbook_path) as zf:
        drawing = ElementTree.fromstring(zf.read("xl/drawings/drawing1.xml"))
    spreadsheet = "{http://schemas.openxmlformats.org/drawingml/2006/spreadsheetDrawing}"
    anchor = drawing.find(f"{spreadsheet}twoCellAnchor")
    assert anchor is not None
    top, bottom = (
        int(anchor.findtext(f"{spreadsheet}{end}/{spreadsheet}row")) for end in ("from", "to")
    )
    labels = [row[0] for row in book["Summary"].values]
    assert labels.index("Verdict") == top == 1  # zero-based: right under the sheet's title
    assert labels.index("Status") < bottom < labels.index("Input file")


def test_no_changes_block_without_changes(tmp_path: Path) -> None:
    path = tmp_path / "scored.xlsx"
    write(path)
    wb = openpyxl.load_workbook(path)
    assert "Changed since last run" not in [r[0] for r in wb["Summary"].values]


def test_text_past_the_excel_limit_is_cut_with_a_marker(tmp_path: Path) -> None:
    path = tmp_path / "scored.xlsx"
    long = "ب" * 40_000
    results = make_results().with_columns(pl.lit(long).alias("reasoning_ar"))
    write(path, results)
    value = column_values(openpyxl.load_workbook(path), "reasoning_ar")[0]
    assert isinstance(value, str)
    assert value.endswith(TRUNCATION_MARKER)
    assert len(value) == EXCEL_MAX_CHARS


def test_a_long_summary_note_is_wrapped_not_printed_across_the_page(tmp_path: Path) -> None:
    """QA 59: a note of 600 characters overflowed to the right, and the Summary, printed to
    fit one page wide, came out unreadably small."""
    from dataclasses import replace

    path = tmp_path / "scored.xlsx"
    note = "villa in district 'الصويدرة' in Madinah (1, its city's benchmark); " * 9
    summary = replace(make_summary(), notes=[("Types", note.strip()), ("Short", "a few words")])
    write_output(path, make_results(), rejects=make_rejects(), summary=summary)
    sheet = openpyxl.load_workbook(path)["Summary"]
    (row,) = [r for r in range(1, sheet.max_row + 1) if sheet.cell(r, 1).value == "Types"]
    assert sheet.cell(row, 2).value.endswith("(1, its city's benchmark);")
    assert [str(m) for m in sheet.merged_cells.ranges] == [f"B{row}:I{row}"]
    assert sheet.cell(row, 2).alignment.wrap_text and sheet.cell(row, 2).alignment.vertical == "top"
    assert sheet.cell(row, 1).alignment.vertical == "top"  # the label beside its first line
    assert sheet.row_dimensions[row].height >= 15 * len(note) // 85
    assert not sheet.cell(row + 1, 2).alignment.wrap_text  # a short value stays as it was


def test_summary_notes_isolate_the_arabic_names_they_quote(tmp_path: Path) -> None:
    # Unisolated, Excel and LibreOffice showed "city '(1) 'مدينة" for "city 'مدينة' (1)".
    from dataclasses import replace

    path = tmp_path / "scored.xlsx"
    note = "2 row(s): district 'حي الملقا' in الرياض (1); city 'مدينة' (1)"
    summary = replace(
        make_summary(),
        input_path="/data/محفظة 2024.xlsx",
        notes=[("Places without their own benchmark", note), ("Arabic", "الرياض (1)")],
    )
    write_output(path, make_results(), rejects=make_rejects(), summary=summary)
    values = {
        r[0]: r[1] for r in openpyxl.load_workbook(path)["Summary"].iter_rows(values_only=True)
    }
    assert values["Places without their own benchmark"] == (
        "2 row(s): district '\u2068حي الملقا\u2069' in \u2068الرياض\u2069 (1); "
        "city '\u2068مدينة\u2069' (1)"
    )
    assert values["Arabic"] == "الرياض (1)"  # reads right to left: left as it is
    assert values["Input file"] == "/data/محفظة 2024.xlsx"  # a path, to copy: as it is


def test_text_of_emoji_past_the_limit_is_cut_where_excel_counts_it_full(tmp_path: Path) -> None:
    # An emoji is two of Excel's 32,767 units: such text was cut to a sixth of what fits, or
    # the cutting looped for ever (17,000 emoji), after the run had paid.
    path = tmp_path / "scored.xlsx"
    results = make_results().with_columns(pl.lit("😀" * 30_000 + "x").alias("reasoning_ar"))
    write(path, results)
    value = column_values(openpyxl.load_workbook(path), "reasoning_ar")[0]
    assert isinstance(value, str) and value.endswith(TRUNCATION_MARKER)
    units = len(value.encode("utf-16-le")) // 2
    assert EXCEL_MAX_CHARS - 1 <= units <= EXCEL_MAX_CHARS  # a pair cut in half is dropped


def test_iso_dates_and_times_in_input_columns_become_excel_dates(tmp_path: Path) -> None:
    # Found by QA: a workbook's date column came back as text, which no longer filters by date.
    import datetime as dt

    path = tmp_path / "scored.xlsx"
    listed = ["2024-05-01", "2024-05-01 13:30:00", "09:30:00", "2024-02-30", "1800-01-01", None]
    # 1900-01-01 with a time is not a time alone (xlsxwriter's write_datetime takes it for one)
    late = ["1900-01-01 09:30:00", "1900-02-28", "1900-03-01 00:00:01", "9999-12-31", "", ""]
    write(path, make_results().with_columns(pl.Series("listed", listed), pl.Series("late", late)))
    sheet = openpyxl.load_workbook(path)["Results"]
    header = [c.value for c in sheet[1]]
    cells = [sheet.cell(row=r, column=header.index("listed") + 1) for r in range(2, 8)]
    assert [c.value for c in cells] == [
        dt.datetime(2024, 5, 1), dt.datetime(2024, 5, 1, 13, 30), dt.time(9, 30),
        "2024-02-30", "1800-01-01", None,  # no such day; before Excel's first date
    ]  # fmt: skip
    assert [c.number_format for c in cells[:3]] == [
        "yyyy-mm-dd", "yyyy-mm-dd hh:mm:ss", "hh:mm:ss"
    ]  # fmt: skip
    edges = [sheet.cell(row=r, column=header.index("late") + 1).value for r in range(2, 6)]
    assert edges == [
        dt.datetime(1900, 1, 1, 9, 30), dt.datetime(1900, 2, 28), dt.datetime(1900, 3, 1, 0, 0, 1),
        dt.datetime(9999, 12, 31),
    ]  # fmt: skip
    back = read_table(path)  # read back as written
    assert back["listed"].to_list() == [*listed[:5], None]
    assert back["late"].to_list() == [*late[:4], None, None]


def test_a_date_column_is_wide_enough_for_its_dates_wherever_they_are(tmp_path: Path) -> None:
    # Found by QA: widths are measured on the first 2,000 rows; dates only later showed #####.
    path = tmp_path / "scored.xlsx"
    results = pl.concat([make_results()] * 350)  # 2,100 rows
    sold = [None] * 2_050 + ["2024-05-01 13:30:00"] * 50
    write(path, results.with_columns(pl.Series("sold_on", sold, dtype=pl.String)))
    sheet = openpyxl.load_workbook(path)["Results"]
    column = [c.value for c in sheet[1]].index("sold_on") + 1
    (width,) = [d.width for d in sheet.column_dimensions.values() if d.min <= column <= d.max]
    assert width >= 19


def test_nan_and_infinity_become_blank_cells(tmp_path: Path) -> None:
    path = tmp_path / "scored.xlsx"
    results = make_results().with_columns(
        pl.Series("price_per_sqm", [float("nan"), float("inf"), 1.5, None, None, None])
    )
    write(path, results)
    wb = openpyxl.load_workbook(path)
    assert column_values(wb, "price_per_sqm") == [None, None, 1.5, None, None, None]


def test_empty_results_make_a_valid_workbook(tmp_path: Path) -> None:
    path = tmp_path / "scored.xlsx"
    write_output(
        path,
        make_results().clear(),
        rejects=pl.DataFrame(schema=REJECTS_SCHEMA),
        summary=make_summary(),
    )
    wb = openpyxl.load_workbook(path)
    assert [c.value for c in wb["Results"][1]] == make_results().columns
    assert wb["Results"].max_row == 1


def test_failure_half_way_leaves_the_old_workbook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "scored.xlsx"
    path.write_bytes(b"last night's workbook")

    def failing_rows(self: pl.DataFrame, *args: object, **kwargs: object) -> Iterator[tuple]:
        yield from self.head(3).rows()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pl.DataFrame, "iter_rows", failing_rows)
    with pytest.raises(OutputError, match=r"scored\.xlsx: cannot write the output"):
        write(path)
    assert path.read_bytes() == b"last night's workbook"
    assert leftovers(tmp_path, {"scored.xlsx"}) == []


def test_a_bug_half_way_is_not_disguised_but_still_cleaned_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "scored.xlsx"

    def failing_rows(self: pl.DataFrame, *args: object, **kwargs: object) -> Iterator[tuple]:
        yield from self.head(2).rows()
        raise RuntimeError("boom")

    monkeypatch.setattr(pl.DataFrame, "iter_rows", failing_rows)
    with pytest.raises(RuntimeError, match="boom"):
        write(path)
    assert list(tmp_path.iterdir()) == []


SOFFICE = shutil.which("soffice") or shutil.which("libreoffice")


def _soffice_convert(workbook: Path, folder: Path, target: str) -> Path:
    """`workbook` converted by LibreOffice headless (its first sheet, for a CSV); the file."""
    done = subprocess.run(
        [
            str(SOFFICE),
            f"-env:UserInstallation=file://{folder / 'profile'}",
            "--headless",
            "--convert-to",
            target,
            "--outdir",
            str(folder),
            str(workbook),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "HOME": str(folder)},
    )
    assert "Error" not in done.stderr, done.stderr
    return folder / f"{workbook.stem}.{target}"


@pytest.mark.skipif(SOFFICE is None, reason="LibreOffice is not installed")
def test_libreoffice_opens_the_workbook(workbook_path: Path, tmp_path: Path) -> None:
    text = _soffice_convert(workbook_path, tmp_path, "csv").read_text(
        encoding="utf-8", errors="replace"
    )
    assert "1,500,000" in text
    assert '=HYPERLINK(""http://evil.example"",""click"")' in text
    pdf = _soffice_convert(workbook_path, tmp_path, "pdf").read_bytes()
    assert pdf.startswith(b"%PDF")
    # every sheet laid out: Results, Rejects and Summary (whose chart is drawn), a page or more
    assert len(re.findall(rb"/Type\s*/Page[^s]", pdf)) >= 3


@pytest.mark.parametrize(
    "text",
    ["plain", "a-b", "1,500,000", "-5", "=1", "+1", "@x", "\tx", "\rx", "é", "عربي", "x عربي"],
)
def test_vectorised_pre_check_never_misses_a_cell_that_needs_a_look(text: str) -> None:
    flagged = pl.Series([text]).str.contains(NEEDS_A_LOOK)[0]
    if has_arabic(text) or looks_like_formula(text):
        assert flagged


@pytest.mark.parametrize(
    ("text", "rtl"),
    [
        ("شقة في حي النرجس", True),
        ("«الرياض» 2024", True),
        ("12 شارع الملك فهد", True),
        ("row 18, column 'المساحة': '-50': property.area must be a positive number", False),
        ("Riyadh / الرياض", False),
        ("café", False),
        ("-50", False),
    ],
)
def test_text_reads_right_to_left_when_its_first_letter_is_arabic(text: str, rtl: bool) -> None:
    assert reads_right_to_left(text) is rtl
