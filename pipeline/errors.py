"""The exceptions of property-decisions, all under one base.

    PipelineError
    ├── UsageError                 bad options or configuration; exit code 2, nothing charged
    │   ├── InputError             an input file cannot be read as what it claims to be
    │   │   ├── MissingColumnError a required column maps to no header
    │   │   └── UnknownHeaderError a --config names a header the file does not have
    │   ├── TooManyRowsError       the output format cannot hold the rows
    │   └── JobInProgress          another run of the same job holds its lock
    ├── RequestValidationError     a decision request breaks a rule (spec: validation_error)
    │   └── InvalidJson            the body does not parse as JSON (DESIGN.md: invalid_json)
    ├── LedgerError                the decision balance refused an operation
    │   ├── InsufficientDecisions  balance lower than the cost (spec: insufficient_decisions)
    │   ├── UnknownWorkspace
    │   ├── IdempotencyKeyReused   same key, other request body
    │   └── RequestInProgress      same key while the first request is still running
    └── OutputError                an output file cannot be written

Errors of the libraries below (polars, fastexcel, sqlite3, httpx) are translated into these at the
module that calls them, with the file, row and field they concern.
"""

from __future__ import annotations


class PipelineError(Exception):
    """Base of every error this package raises on purpose."""

    exit_code = 1
    # Set on an error raised after a batch run was charged (its outputs failing to write):
    # the run's BatchOutcome so far, so the failure's record says what was paid.
    outcome: object | None = None
    scorer_version: str | None = None


class UsageError(PipelineError):
    exit_code = 2


class JobInProgress(UsageError):
    """Another run of the same job (an input, a workspace) holds its lock."""


class InputError(UsageError):
    """An input file cannot be read; the message names the file and what to try."""


class MissingColumnError(InputError):
    def __init__(
        self, path: str, field: str, aliases: list[str], headers: list[str], note: str = ""
    ) -> None:
        self.field = field
        self.aliases = aliases
        super().__init__(
            f"{path}: no column for required field '{field}'; tried headers "
            f"{', '.join(repr(a) for a in aliases)}; the file has "
            f"{', '.join(repr(h) for h in headers)}. Rename a column or map it with --config."
            + note
        )


class UnknownHeaderError(InputError):
    pass


class TooManyRowsError(UsageError):
    pass


class RequestValidationError(PipelineError):
    """Spec error `validation_error`: `field` is the dotted path, `message` names field and rule."""

    code = "validation_error"

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(message)

    def body(self) -> dict[str, object]:
        return {"error": self.code, "message": self.message, "field": self.field}


class InvalidJson(RequestValidationError):
    """The body is not JSON (undecodable, truncated, nested too deep): the service's 400."""

    code = "invalid_json"

    def __init__(self, message: str) -> None:
        super().__init__("body", message)

    def body(self) -> dict[str, object]:
        return {"error": self.code, "message": self.message}


class LedgerError(PipelineError):
    code = "ledger_error"

    def body(self) -> dict[str, object]:
        return {"error": self.code, "message": str(self)}


class InsufficientDecisions(LedgerError):
    code = "insufficient_decisions"
    exit_code = 3

    def __init__(self, required: int, balance: int) -> None:
        self.required = required
        self.balance = balance
        super().__init__(
            f"this request needs {required} decision(s) and the workspace has {balance}; "
            "top up the workspace and try again"
        )

    def body(self) -> dict[str, object]:
        return {
            "error": self.code,
            "message": str(self),
            "required": self.required,
            "balance": self.balance,
        }


class UnknownWorkspace(LedgerError):
    code = "unknown_workspace"
    exit_code = 2


class IdempotencyKeyReused(LedgerError):
    code = "idempotency_key_reused"


class RequestInProgress(LedgerError):
    code = "request_in_progress"


class LedgerBusy(LedgerError):
    """Another connection holds the ledger's write lock, and the caller asked not to wait."""

    code = "ledger_busy"


class LedgerUnavailable(LedgerError):
    """The ledger cannot be written (a full disk, a file made read-only, moved or deleted)."""

    code = "ledger_unavailable"


class ChargeNotRefunded(LedgerUnavailable):
    """A request failed after its charge, and the ledger could not take the refund."""


class Interrupted(PipelineError):
    """A batch run stopped by Ctrl-C or a stop signal (SIGTERM: cron, systemd, a timeout)."""

    exit_code = 130


class OutputError(PipelineError):
    pass
