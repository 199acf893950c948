"""Words a batch run says in its summary and rows, and its exit codes (DESIGN.md: 0 all
scored or rejected, 3 rows left unscored for lack of budget or balance, 1 any other failure)."""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_UNSCORED = 0, 1, 3

EXPLANATIONS_NOT_AFFORDED = "Explanations not afforded"  # a summary line
STILL_NEEDED = "Decisions the rows left need"  # a summary line, when rows were left
WARNING = "Warning:"  # a summary line's label begins so: said even by a --quiet run
# error_code of a borderline row scored but left without its explanation
REASONING_SKIPPED, REASONING_FAILED = "reasoning_skipped", "reasoning_failed"
# Said when rows of a remote run ended in doubt after this run's own sends: not in its spend.
PERHAPS_CHARGED = "Perhaps charged, answers lost (in doubt; not in Decisions spent)"
# A row scored whose explanation was not afforded or failed: its message, said of the row.
NOT_SCORED, NOT_EXPLAINED = "not scored: ", "scored, but not explained: "
