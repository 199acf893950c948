"""The suite runs the same in any shell: the variables that point the commands at a ledger,
a settings file or a service are the tests' own to set (QA 57: an exported
DECISIONS_API_URL, as the README's remote-mode example leaves it, failed 160 tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

_ENVIRONMENT = ("DECISIONS_API_URL", "DECISIONS_API_KEY", "DECISIONS_DB", "DECISIONS_SETTINGS")


@pytest.fixture(autouse=True)
def _no_decisions_environment() -> Iterator[None]:
    # A patcher of its own: a test's monkeypatch.undo() must not bring the shell's back.
    with pytest.MonkeyPatch.context() as patch:
        for name in _ENVIRONMENT:
            patch.delenv(name, raising=False)
        yield
