"""The decision balance: what any storage behind it must do.

The service, `decisions decide` and the batch pipeline speak only to this interface; SQLite is
the embedded implementation and PostgreSQL can be added beside it without touching them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pipeline.errors import LedgerError, UsageError

COST_SCORING = 1  # decisions a request costs (spec: scoring only)
COST_WITH_REASONING = 3  # with `reasoning: true`


MAX_IDEMPOTENCY_KEY_CHARS = 255
IDEMPOTENCY_KEY_RULE = f"1 to {MAX_IDEMPOTENCY_KEY_CHARS} printable characters, for example a UUID"


def valid_idempotency_key(key: str) -> bool:
    """The service's rule for an Idempotency-Key, also for `decisions decide`: they share the
    ledger's keys."""
    return 0 < len(key) <= MAX_IDEMPOTENCY_KEY_CHARS and key.isprintable()


def cost_of(reasoning: bool) -> int:
    return COST_WITH_REASONING if reasoning else COST_SCORING


def check_name(name: str, kind: str) -> None:
    """A workspace or account name: not blank, no spaces around it (they would not show)."""
    if not name.strip() or name != name.strip():
        raise UsageError(f"a {kind} name must not be blank or begin or end with spaces: {name!r}")


@dataclass(frozen=True)
class Workspace:
    name: str
    balance: int


@dataclass(frozen=True)
class ChargeRequest:
    cost: int
    idempotency_key: str | None = None
    fingerprint: str | None = None  # sha256 of the canonical request body
    key_prefix: str | None = None  # display prefix of the API key that asked, for the audit


@dataclass(frozen=True)
class Charge:
    """A charge made now, or the earlier charge of the same idempotency key (`replayed`)."""

    entry_id: int
    cost: int
    balance_after: int
    replayed: bool = False
    response: str | None = None  # the stored response body of a replayed, completed request


class Ledger(Protocol):
    def create_workspace(self, name: str, balance: int) -> Workspace: ...

    def ensure_workspace(self, name: str, balance: int) -> Workspace: ...

    def workspace(self, name: str) -> Workspace: ...

    def topup(self, name: str, amount: int) -> Workspace: ...

    def charge(self, workspace: str, request: ChargeRequest, *, wait: bool = True) -> Charge:
        """Take `cost` from the balance atomically, or raise InsufficientDecisions.

        With an idempotency key already charged: the earlier charge comes back with
        `replayed=True` and nothing is taken (IdempotencyKeyReused for another fingerprint,
        RequestInProgress while the first is still running). `wait=False`: LedgerBusy, nothing
        taken, where the charge would first wait for another writer."""
        ...

    def charged(self, workspace: str, idempotency_key: str) -> bool:
        """True if a charge under `idempotency_key` stands: a `charge` with it replays, free."""
        ...

    def charged_at(self, workspace: str, idempotency_key: str) -> float | None:
        """When the charge under `idempotency_key` was made (None: no charge stands)."""
        ...

    def charge_each(
        self, charges: Sequence[tuple[str, ChargeRequest]], *, wait: bool = True
    ) -> list[Charge | LedgerError]:
        """Each (workspace, request) charged as `charge` would, in one transaction; a refusal
        (a LedgerError) comes back in place of its charge."""
        ...

    def complete(
        self, workspace: str, idempotency_key: str, response: str | None, *, wait: bool = True
    ) -> None: ...

    def complete_many(
        self, workspace: str, outcomes: list[tuple[str, str | None]], *, wait: bool = True
    ) -> None:
        """`complete` for each (idempotency key, response), in one transaction."""
        ...

    def refund(self, entry_id: int, reason: str) -> Workspace: ...
