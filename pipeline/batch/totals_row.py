"""A totals row under the table: exports from CRMs and workbooks kept by hand often end with
a row labelled "Total" or "الإجمالي" summing the prices and areas above it. Read as a listing it
was rejected (no type, no city) and counted among the rejects, in the summary's chart too.

What is taken for one: the table's last row, when it has no type and no city and one of its
cells says total and nothing else. A row without a type and a city could never be scored, so
nothing that could be is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from pipeline.batch.columns import ColumnMap

TOTAL_WORDS = frozenset(
    {
        "total", "totals", "grand total", "sum", "subtotal", "sub total",
        "الإجمالي", "الاجمالي", "إجمالي", "اجمالي", "الإجمالي العام", "الاجمالي العام",
        "المجموع", "مجموع", "المجموع الكلي", "المجموع العام",
    }
)  # fmt: skip


@dataclass(frozen=True)
class TotalsRow:
    table: pl.DataFrame  # the rows above it
    label: str  # the cell that says total, as written


def totals_row(raw: pl.DataFrame, mapping: ColumnMap) -> TotalsRow | None:
    """`raw` without its last row when that row is a totals row, else None."""
    if raw.height < 2:
        return None
    last = raw.row(-1, named=True)
    if any(_text(last.get(mapping[f] or "")) for f in ("type", "city")):
        return None
    for value in last.values():
        text = _text(value)
        if text is not None and text.rstrip(":：").strip().lower() in TOTAL_WORDS:
            return TotalsRow(raw.head(raw.height - 1), text)
    return None


def _text(value: object) -> str | None:
    text = "" if value is None else str(value).strip()
    return text or None
