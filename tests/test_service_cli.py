"""The account and key commands: keys printed once, buyer/seller refused with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.ledger.accounts import SqliteAccounts, check_key_format


def test_account_and_key_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", str(tmp_path / "l.db")]
    assert main(["workspace", "create", "w", "--balance", "5", *db]) == 0
    assert main(["account", "create", "b", "--workspace", "w", "--type", "broker", *db]) == 0
    assert main(["account", "create", "s", "--workspace", "w", "--type", "seller", *db]) == 0
    capsys.readouterr()

    assert main(["key", "create", "--account", "s", *db]) == 2
    assert "only broker and agency" in capsys.readouterr().err

    assert main(["key", "create", "--account", "b", *db]) == 0
    out = capsys.readouterr()
    key = out.out.strip()
    assert check_key_format(key) and "shown only this once" in out.err
    assert SqliteAccounts(tmp_path / "l.db").authenticate(key).workspace == "w"

    assert main(["key", "list", *db]) == 0
    listed = capsys.readouterr().out
    assert key not in listed and key[:11] in listed and key[-4:] in listed
    assert main(["key", "revoke", key[:11], *db]) == 0
    assert json.loads(capsys.readouterr().out)["revoked"] is True
    assert main(["key", "revoke", "sk-nothere", *db]) == 2
