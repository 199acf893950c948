"""CSV and Parquet outputs, the dispatch by extension, atomic writing and the capacity check.

Every test writes a real file and reads it back. The frame builders here are shared with
test_workbook.py.
"""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipeline.batch.result_columns import REJECTS_SCHEMA, RESULT_SCHEMA
from pipeline.batch.summary import RunSummary
from pipeline.errors import OutputError, TooManyRowsError, UsageError
from pipeline.io.parquet_types import with_input_types
from pipeline.io.write import check_output_capacity, write_output

# The input's own columns, all text, exactly as a user typed them.
ORIGINALS: dict[str, list[str | None]] = {
    "title": [
        "شقة في حي النرجس",
        '=HYPERLINK("http://evil.example","click")',
        "+966 50 000 0000",
        "Villa, pool",
        None,
        "@SUM(A1:A9)",
    ],
    "price": ["1,500,000", "-50", "٢٥٠٠٠٠٠", "abc", "", "2500000"],
    "city": ["الرياض", "Jeddah", "جدة", "\tTabbed", "line1\nline2", "Riyadh"],
    "score_input": ["7", None, "x", "-", "=1+1", "0"],
}

STATUSES = ["scored", "scored", "scored", "rejected", "skipped", "failed"]
VERDICTS = ["match", "partial", "no_match", None, None, None]


def make_results() -> pl.DataFrame:
    """Six rows: one per verdict, then a rejected, a skipped and a failed row."""
    n = len(STATUSES)
    scored = [s == "scored" for s in STATUSES]

    def only_scored(values: list) -> list:
        return [v if ok else None for v, ok in zip(values, scored, strict=True)]

    columns: dict[str, list] = {name: [None] * n for name in RESULT_SCHEMA}
    columns |= {
        "row_number": list(range(1, n + 1)),
        "status": STATUSES,
        "verdict": VERDICTS,
        "score": only_scored([91, 64, 18, 0, 0, 0]),
        "price_score": only_scored([95, 60, 10, 0, 0, 0]),
        "price_status": only_scored(["pass", "warn", "fail", "", "", ""]),
        "location_score": only_scored([80, 70, 30, 0, 0, 0]),
        "location_status": only_scored(["pass", "pass", "fail", "", "", ""]),
        "price_per_sqm": only_scored([5234.5, 7100.25, 12999.99, 0, 0, 0]),
        "benchmark_median_sqm": only_scored([6100.0, 7000.0, 8000.5, 0, 0, 0]),
        "benchmark_p25_sqm": only_scored([5000.0, 6500.0, 7000.0, 0, 0, 0]),
        "benchmark_p75_sqm": only_scored([7000.0, 7500.0, 9000.0, 0, 0, 0]),
        "benchmark_year": only_scored([2024, 2024, 2023, 0, 0, 0]),
        "benchmark_transaction_count": only_scored([1520, 48, 12034, 0, 0, 0]),
        "benchmark_yoy_pct": only_scored([3.4, -1.25, 0.0, 0, 0, 0]),
        "reasoning_en": only_scored(["Below the district median.", "-close to median", "", *"xyz"]),
        "reasoning_ar": only_scored(["السعر أقل من متوسط الحي", "قريب من المتوسط", "", *"xyz"]),
        "key_factors": only_scored(["price; location", "=price", "size", *"xyz"]),
        "risk_flags": only_scored([None, "@risk", "overpriced", *"xyz"]),
        "decisions_used": [1, 1, 1, 0, 0, 0],
        "error_code": [None, None, None, "validation_error", None, "upstream_error"],
        "error_field": [None, None, None, "property.price", None, None],
        "error_message": [None, None, None, "'abc' is not a number", None, "=timeout"],
    }
    results = pl.DataFrame(columns, schema=RESULT_SCHEMA)
    originals = pl.DataFrame(ORIGINALS, schema=dict.fromkeys(ORIGINALS, pl.String))
    return pl.concat([originals, results], how="horizontal")


def make_rejects() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "row_number": [4, 4],
            "sheet_row": [5, 5],
            "listing": ["L-0004", "L-0004"],
            "column": ["price", None],
            "field": ["property.price", "property.area"],
            "value": ["abc", "=-5"],
            "reason": ["'abc' is not a number", "area is missing"],
        },
        schema=REJECTS_SCHEMA,
    )


def make_summary() -> RunSummary:
    return RunSummary(
        input_path="portfolio.xlsx",
        input_fingerprint="ab" * 32,
        rows_total=len(STATUSES),
        counts_by_status={"scored": 3, "rejected": 1, "skipped": 1, "failed": 1},
        counts_by_verdict={"match": 1, "partial": 1, "no_match": 1},
        decisions_spent=3,
        balance_before=100,
        balance_after=97,
        started_at=datetime(2026, 11, 22, 3, 0, 0),
        duration_s=12.345,
        workspace="الفريق",
        notes=[("Config", "=default")],
    )


def write(path: Path, results: pl.DataFrame | None = None, **kwargs: object) -> None:
    write_output(
        path,
        make_results() if results is None else results,
        rejects=make_rejects(),
        summary=make_summary(),
        **kwargs,  # type: ignore[arg-type]
    )


def leftovers(directory: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


def test_csv_starts_with_bom_and_reads_back_equal(tmp_path: Path) -> None:
    path = tmp_path / "scored.csv"
    write(path)
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    back = pl.read_csv(path, schema=make_results().schema)
    assert_frame_equal(back, make_results())
    assert leftovers(tmp_path, {"scored.csv"}) == []


def test_csv_keeps_original_text_exactly(tmp_path: Path) -> None:
    path = tmp_path / "scored.csv"
    write(path)
    back = pl.read_csv(path, infer_schema=False)
    for name, values in ORIGINALS.items():
        assert back[name].to_list() == values, name
    assert back["price"][0] == "1,500,000"


def test_csv_without_bom(tmp_path: Path) -> None:
    path = tmp_path / "scored.csv"
    write(path, csv_bom=False)
    assert path.read_bytes().startswith(b"title,price,")


@pytest.mark.parametrize("name", ["scored.parquet", "scored.pq", "SCORED.PARQUET"])
def test_parquet_reads_back_equal_with_dtypes(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    write(path)
    back = pl.read_parquet(path)
    assert_frame_equal(back, make_results())
    assert back.schema == make_results().schema
    assert leftovers(tmp_path, {name}) == []


def test_parent_directories_are_created(tmp_path: Path) -> None:
    path = tmp_path / "out" / "nightly" / "scored.csv"
    write(path)
    assert path.exists()


@pytest.mark.parametrize("name", ["scored.csv", "scored.parquet"])
def test_failed_write_leaves_existing_output_and_no_temp_files(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"yesterday's output")
    unwritable = make_results().with_columns(
        pl.Series("blob", [object()] * len(STATUSES), dtype=pl.Object)
    )
    with pytest.raises(OutputError, match=name):
        write(path, unwritable)
    assert path.read_bytes() == b"yesterday's output"
    assert leftovers(tmp_path, {name}) == []


def test_destination_that_cannot_be_replaced_is_an_output_error(tmp_path: Path) -> None:
    path = tmp_path / "scored.csv"
    path.mkdir()  # e.g. a directory where the file should go
    with pytest.raises(OutputError, match=r"scored\.csv: cannot write the output"):
        write(path)
    assert leftovers(tmp_path, {"scored.csv"}) == []


def test_parent_that_is_a_file_is_an_output_error(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("not a directory")
    with pytest.raises(OutputError, match="out"):
        write(tmp_path / "out" / "scored.parquet")


def test_unknown_extension_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"name the output \.xlsx, \.csv, \.parquet or \.pq"):
        write(tmp_path / "scored.json")
    with pytest.raises(UsageError):
        check_output_capacity(tmp_path / "scored", 10)
    assert list(tmp_path.iterdir()) == []


def test_capacity_check() -> None:
    check_output_capacity(Path("out.xlsx"), 1_048_575)
    check_output_capacity(Path("out.csv"), 5_000_000)
    check_output_capacity(Path("out.parquet"), 5_000_000)
    with pytest.raises(TooManyRowsError) as info:
        check_output_capacity(Path("out/scored.xlsx"), 1_048_576)
    assert str(info.value) == (
        "out/scored.xlsx: 1,048,576 rows do not fit in an Excel sheet, which holds at most "
        "1,048,575 data rows; write to 'out/scored.parquet' or 'out/scored.csv' instead"
    )
    assert info.value.exit_code == 2


def test_xlsx_with_too_many_rows_is_refused_before_writing(tmp_path: Path) -> None:
    too_many = pl.DataFrame({"row_number": pl.int_range(0, 1_048_576, eager=True)})
    with pytest.raises(TooManyRowsError, match=r"\.parquet"):
        write(tmp_path / "big.xlsx", too_many)
    assert list(tmp_path.iterdir()) == []


def _with_result_columns(originals: pl.DataFrame) -> pl.DataFrame:
    empty = {c: pl.Series(c, [None] * originals.height, dtype=t) for c, t in RESULT_SCHEMA.items()}
    return originals.with_columns(empty.values())


def test_input_types_come_back_only_to_columns_holding_exactly_their_text() -> None:
    typed = pl.DataFrame(
        {
            "id": [1, 2, None],  # the trailing empty row is not among the results
            "price": [1.5, 2.0, None],
            "area": [90, 120, None],
            "status": pl.Series([7, 8, None], dtype=pl.Int8),  # renamed by the run
        }
    )
    results = _with_result_columns(
        pl.DataFrame(
            {"id": ["1", "2"], "price": ["1.5", "2.0"], "area": ["90", "121"],
             "status (input)": ["7", "8"]}
        )
    )  # fmt: skip
    back = with_input_types(results, typed)
    assert back.schema == {"id": pl.Int64, "price": pl.Float64, "area": pl.String,
                           "status (input)": pl.Int8, **RESULT_SCHEMA}  # fmt: skip
    assert back["id"].to_list() == [1, 2] and back["area"].to_list() == ["90", "121"]
    assert with_input_types(results, None) is results
    assert with_input_types(results, typed.head(1)) is results  # fewer rows than the results


def test_a_workbook_takes_back_only_the_numbers_excel_holds_as_they_are() -> None:
    typed = pl.DataFrame(
        {
            "phone": [966501234567890, 12345678901234567],  # 16-17 digits: Excel rounds them
            "floors": [3, 12],
            "area": pl.Series([140.1, 100.0], dtype=pl.Float32),  # widens to 140.1000061...
            "price": [950000.5, 3200000.0],
            "listed": [date(2026, 1, 2), date(2026, 3, 4)],
        }
    )
    results = _with_result_columns(typed.select(pl.all().cast(pl.String)))
    back = with_input_types(results, typed, numeric_only=True)
    assert [back.schema[c] for c in typed.columns] == [
        pl.String, pl.Int64, pl.Float64, pl.Float64, pl.String,
    ]  # fmt: skip
    # a Float32 as the number its text shows: "100.0" was left text (not a plain number),
    # "140.1" a number, so a column's SUM counted half its cells
    assert back["area"].to_list() == [140.1, 100.0]


@pytest.mark.parametrize("dropped", ["", " ", "\ufeff"])
def test_input_types_follow_names_past_a_column_the_reader_dropped(dropped: str) -> None:
    # The reader drops a blank-headed column that is empty, so positions shift by one: two
    # neighbours with the same text must not swap types, nor a result column take one.
    blanks = {dropped * (n + 1): ["", "", ""] for n in range(len(RESULT_SCHEMA) + 5)}
    typed = pl.DataFrame(
        {**blanks, "id": [1, 2, 3], "id32": pl.Series([1, 2, 3], dtype=pl.Int32),
         "note": ["1", "2", "3"]}
    )  # fmt: skip
    read = pl.DataFrame({"id": ["1", "2", "3"], "id32": ["1", "2", "3"], "note": ["1", "2", "3"]})
    back = with_input_types(_with_result_columns(read), typed)
    assert back.schema == {"id": pl.Int64, "id32": pl.Int32, "note": pl.String, **RESULT_SCHEMA}
