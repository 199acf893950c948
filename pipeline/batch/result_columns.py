"""The result columns every output carries after the input's own columns (DESIGN.md)."""

import polars as pl

RESULT_SCHEMA: dict[str, pl.DataType] = {
    "row_number": pl.Int64(),
    "status": pl.String(),  # scored | rejected | skipped | failed
    "verdict": pl.String(),  # match | partial | no_match
    "score": pl.Int64(),
    "price_score": pl.Int64(),
    "price_status": pl.String(),  # pass | warn | fail
    "location_score": pl.Int64(),
    "location_status": pl.String(),
    "size_score": pl.Int64(),
    "size_status": pl.String(),
    "details_score": pl.Int64(),
    "details_status": pl.String(),
    "price_per_sqm": pl.Float64(),
    "benchmark_median_sqm": pl.Float64(),
    "benchmark_p25_sqm": pl.Float64(),
    "benchmark_p75_sqm": pl.Float64(),
    "benchmark_year": pl.Int64(),
    "benchmark_transaction_count": pl.Int64(),
    "benchmark_yoy_pct": pl.Float64(),
    "reasoning_en": pl.String(),
    "reasoning_ar": pl.String(),
    "key_factors": pl.String(),  # "; "-joined for flat files
    "risk_flags": pl.String(),  # "; "-joined for flat files
    "decisions_used": pl.Int64(),
    "error_code": pl.String(),
    "error_field": pl.String(),
    "error_message": pl.String(),
}

RESULT_COLUMNS: tuple[str, ...] = tuple(RESULT_SCHEMA)
INPUT_SUFFIX = " (input)"  # appended to an input header that clashes with a result column

# Columns holding SAR amounts (thousands separators in the workbook).
SAR_COLUMNS = (
    "price_per_sqm",
    "benchmark_median_sqm",
    "benchmark_p25_sqm",
    "benchmark_p75_sqm",
)

# The Rejects sheet / rejects table.
REJECTS_SCHEMA: dict[str, pl.DataType] = {
    "row_number": pl.Int64(),
    "sheet_row": pl.Int64(),  # the row a spreadsheet shows it on (null for a Parquet input)
    "listing": pl.String(),  # the row's value in the input's first column (its ID, usually)
    "column": pl.String(),  # the input header the bad value came from (null if none)
    "field": pl.String(),  # dotted request path, e.g. property.area
    "value": pl.String(),  # the original cell text
    "reason": pl.String(),
}


def in_rejects_schema(rejects: pl.DataFrame) -> pl.DataFrame:
    """A rejects table as REJECTS_SCHEMA has it now: one kept by an earlier version (a journal's
    last run) gets the columns it lacks, empty."""
    return rejects.select(
        pl.col(name) if name in rejects.columns else pl.lit(None, dtype).alias(name)
        for name, dtype in REJECTS_SCHEMA.items()
    )


def clash_free_names(columns: list[str]) -> dict[str, str]:
    """New names for the input columns named like a result column: `status (input)`, or
    `status (input 2)` when the file has that too (a scored file scored again, twice)."""
    taken = set(columns) | set(RESULT_COLUMNS)
    renames: dict[str, str] = {}
    for column in columns:
        if column not in RESULT_COLUMNS:
            continue
        name, number = column + INPUT_SUFFIX, 1
        while name in taken:
            number += 1
            name = f"{column}{INPUT_SUFFIX[:-1]} {number})"
        taken.add(name)
        renames[column] = name
    return renames
