"""What a batch run is asked to do: its input, outputs and options."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ReasoningMode = Literal["none", "all", "borderline"]


@dataclass(frozen=True, kw_only=True)
class BatchOptions:
    input: Path
    outputs: list[Path]
    config: Path | None = None
    reasoning: ReasoningMode = "none"
    budget: int | None = None
    priority: str | None = None
    encoding: str | None = None
    sheet: str | int | None = None
    csv_bom: bool = True
    # decisions the run leaves in the workspace balance (--reserve): each batch is cut to the
    # balance above it; a remote scorer also keeps it request by request
    reserve: int = 0
    # how the rows left for lack of budget name it: a nightly job sets it in its configuration
    budget_named: str = "--budget"
    # list the verdicts changed since the verdict history as it stood then (a Unix time: a
    # night's start, so that every run of a night lists the changes since the last night);
    # None: since the last run
    changes_since: float | None = None
