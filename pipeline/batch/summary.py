"""What a batch run reports about itself: the Summary sheet, the end-of-run table, --json."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

RUN_TIME = "Run time (s)"
# A workbook is written before the run ends (its own writing, other outputs, the journal's
# copies): its figure is the time until the outputs began, and says so.
RUN_TIME_IN_WORKBOOK = "Run time before the outputs (s)"


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    input_path: str
    input_fingerprint: str  # sha256 of the input file's bytes
    rows_total: int
    counts_by_status: dict[str, int]  # scored / rejected / skipped / failed
    counts_by_verdict: dict[str, int]  # match / partial / no_match (scored rows only)
    decisions_spent: int
    balance_before: int | None
    balance_after: int | None
    started_at: datetime
    duration_s: float
    workspace: str | None = None
    exit_code: int = 0
    notes: list[tuple[str, object]] = field(default_factory=list)  # further label/value lines

    def lines(self) -> list[tuple[str, object]]:
        """Label/value pairs in the order a reader expects them."""
        rows: list[tuple[str, object]] = [
            ("Input file", self.input_path),
            ("Input fingerprint (sha256)", self.input_fingerprint),
            ("Rows", self.rows_total),
        ]
        rows += [(f"Status: {k}", v) for k, v in self.counts_by_status.items()]
        rows += [(f"Verdict: {k}", v) for k, v in self.counts_by_verdict.items()]
        rows += [
            ("Decisions spent", self.decisions_spent),
            ("Balance before", self.balance_before),
            ("Balance after", self.balance_after),
            ("Workspace", self.workspace),
            ("Started at", self.started_at.isoformat(timespec="seconds")),
            (RUN_TIME, round(self.duration_s, 2)),
            ("Exit code", self.exit_code),
        ]
        rows += self.notes
        return rows
