"""The account and key commands: keys printed once, buyer/seller refused with exit 2."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.ledger.accounts import SqliteAccounts, check_key_format, generate_key


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
    assert json.loads(listed)["created_at"].startswith(f"{datetime.now(UTC).year}-")
    assert main(["key", "revoke", key[:11], *db]) == 0
    revoked = json.loads(capsys.readouterr().out)
    assert revoked["revoked"] is True and revoked["revoked_at"].endswith("+00:00")
    assert main(["key", "revoke", "sk-nothere", *db]) == 2


def test_names_and_amounts_out_of_range_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--db", str(tmp_path / "l.db")]
    huge = str(2**63)
    for args, message in (
        (["workspace", "create", "", "--balance", "5"], "must not be blank"),
        (["workspace", "create", " w ", "--balance", "5"], "must not be blank"),
        (["workspace", "create", "w", "--balance", huge], "at most 9,223,372,036,854,775,807"),
    ):
        assert main([*args, *db]) == 2
        assert message in capsys.readouterr().err
    assert main(["workspace", "create", "w", "--balance", str(2**63 - 2), *db]) == 0
    assert main(["workspace", "topup", "w", "1", *db]) == 0
    assert main(["workspace", "topup", "w", "1", *db]) == 2
    assert "can take at most 0 more" in capsys.readouterr().err
    assert main(["account", "create", "  ", "--workspace", "w", "--type", "broker", *db]) == 2
    assert "must not be blank" in capsys.readouterr().err


def test_a_key_can_be_revoked_by_itself_and_errors_never_repeat_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--db", str(tmp_path / "l.db")]
    assert main(["workspace", "create", "w", "--balance", "5", *db]) == 0
    assert main(["account", "create", "b", "--workspace", "w", "--type", "broker", *db]) == 0
    assert main(["key", "create", "--account", "b", *db]) == 0
    key = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["key", "revoke", key, *db]) == 0
    assert json.loads(capsys.readouterr().out)["revoked"] is True
    other = SqliteAccounts(tmp_path / "l.db")
    unknown = key[:-8] + ("a" if key[-8] != "a" else "b") + key[-7:]  # checksum fails: a prefix
    for wrong in (unknown, generate_key()):
        assert main(["key", "revoke", wrong, *db]) == 2
        assert wrong not in capsys.readouterr().err
    assert other.list_keys("b")[0].revoked_at is not None


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_serve_refuses_a_port_out_of_range(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--port", port])
    assert exit_.value.code == 2
    assert "a port is a number from 0 to 65535" in capsys.readouterr().err


def test_serve_says_when_its_port_is_taken(tmp_path: Path, capsys) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port), "--db", str(tmp_path / "l.db")]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_a_named_ledger_that_is_not_there_is_refused_not_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "ledgr.db"
    for args in (
        ["key", "list"],
        ["account", "create", "b", "--workspace", "w", "--type", "broker"],
        ["workspace", "show", "w"],
        ["workspace", "topup", "w", "5"],
        ["workspace", "entries", "w"],
    ):
        assert main([*args, "--db", str(typo)]) == 2
        assert f"no ledger at {typo}" in capsys.readouterr().err
    assert not typo.exists()


def test_only_the_local_workspace_charged_is_made_in_a_named_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pipeline.ledger.sqlite import SqliteLedger

    db = tmp_path / "provider.db"
    assert main(["workspace", "create", "acme", "--balance", "5", "--db", str(db)]) == 0
    assert main(["account", "create", "b", "--workspace", "acme", "--type", "broker",
                 "--db", str(db)]) == 0  # fmt: skip
    assert main(["key", "list", "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["workspace", "show", "local", "--db", str(db)]) == 2
    assert "no workspace named 'local'" in capsys.readouterr().err
    assert [e["kind"] for e in SqliteLedger(db).entries("acme")] == ["opening"]


def test_a_reader_that_stops_early_ends_the_listing_quietly(tmp_path: Path) -> None:
    # Found by QA: `decisions workspace entries acme | head` ended in a BrokenPipeError traceback.
    import os
    import subprocess
    import sys

    from pipeline.ledger.sqlite import SqliteLedger

    ledger = SqliteLedger(tmp_path / "l.db")
    ledger.create_workspace("acme", 1)
    for _ in range(2000):  # a listing longer than the pipe holds
        ledger.topup("acme", 1)
    root = Path(__file__).resolve().parents[1]
    listing = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "workspace", "entries", "acme", "--db",
         str(tmp_path / "l.db")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert listing.stdout is not None and listing.stdout.readline() == b"[\n"
    listing.stdout.close()  # as `head -1` does
    assert listing.wait(timeout=60) == 141
    assert listing.stderr is not None and listing.stderr.read() == b""
