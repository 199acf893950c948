"""The account and key commands: keys printed once, buyer/seller refused with exit 2."""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from pipeline.cli import main
from pipeline.ledger.accounts import SqliteAccounts, check_key_format, generate_key
from pipeline.ledger.base import ChargeRequest
from pipeline.ledger.sqlite import SqliteLedger
from pipeline.service.limits import descriptors_needed
from tests.benchmark_tables import MALFORMED, malformed_settings, said_clearly, settings_naming

ROOT = Path(__file__).resolve().parents[1]


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


@pytest.mark.parametrize("table", ["missing.csv", "a-folder"])
def test_serve_stops_on_a_benchmark_table_it_cannot_read_before_any_ledger_is_made(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    table: str,
) -> None:
    """QA 71: exit 2, but `serve --demo --db NEW` left NEW made (with its demo workspace), and
    `serve` the settings' own ledger."""
    (tmp_path / "a-folder").mkdir()
    monkeypatch.setenv("DECISIONS_SETTINGS", str(settings_naming(tmp_path, table)))
    there = sorted(tmp_path.rglob("*"))
    for ledger in (["--demo", "--db", str(tmp_path / "new.db")], []):
        assert main(["serve", "--port", "18871", *ledger]) == 2
        assert "error: cannot read the benchmark table " in capsys.readouterr().err
    assert sorted(tmp_path.rglob("*")) == there


@pytest.mark.parametrize("case", MALFORMED)
def test_serve_names_a_benchmark_table_that_is_not_one_before_any_ledger_is_made(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: str,
) -> None:
    """QA 73: a polars traceback, exit 1, for a table read that was no benchmark table."""
    settings, table, said = malformed_settings(tmp_path, case)
    monkeypatch.setenv("DECISIONS_SETTINGS", str(settings))

    def served(*args: object, **kwargs: object) -> None:
        raise AssertionError("served over a table that is no benchmark table")

    monkeypatch.setattr("pipeline.service.server.serve", served)  # not for ever, if it did
    there = sorted(tmp_path.rglob("*"))
    for ledger in (["--demo", "--db", str(tmp_path / "new.db")], []):
        assert main(["serve", "--port", "19073", *ledger]) == 2
        assert said_clearly(capsys.readouterr().err, table, said)
    assert sorted(tmp_path.rglob("*")) == there


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


@contextmanager
def _served(tmp_path: Path, *options: str, limit_files: int | None = None) -> Iterator[Served]:
    """`decisions serve` in a process of its own with `options`, once it listens (and, with
    `limit_files`, started under that soft limit on open files: `ulimit -n`)."""
    db, port = tmp_path / "l.db", _free_port()
    if not db.exists():  # (a second server on the ledger of a first)
        assert main(["workspace", "create", "w", "--balance", "5", "--db", str(db)]) == 0

    def limited() -> None:
        if limit_files is not None:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit_files, hard))

    log: list[str] = []
    server = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "serve", "--port", str(port), "--db", str(db),
         *options],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, preexec_fn=limited,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, server.communicate()[1]
                assert time.monotonic() < deadline
                time.sleep(0.05)
        yield Served(port, server.pid, log, lambda: _stop(server, log))
    finally:
        _stop(server, log)


def _stop(server: subprocess.Popen[bytes], log: list[str]) -> None:
    """SIGTERM, as systemd stops it; what it wrote to stderr, once, into `log`."""
    if server.returncode is None:
        server.terminate()
        log.append(server.communicate(timeout=90)[1].decode())


class Served(NamedTuple):
    port: int
    pid: int
    log: list[str]  # what the server wrote to stderr, once it has stopped
    stop: Callable[[], None]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answer(client: socket.socket) -> tuple[int, dict[str, object]]:
    data = b""
    while chunk := client.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_serve_takes_its_connection_limits_from_the_command_line(tmp_path: Path) -> None:
    options = ("--max-connections", "2", "--head-timeout", "0.5", "--request-timeout", "1")
    with _served(tmp_path, *options) as served:
        address = ("127.0.0.1", served.port)
        with socket.create_connection(address) as slow, socket.create_connection(address):
            slow.sendall(b"POST /v1/decisions HTTP/1.1\r\nHost: t\r\n")  # and no more
            time.sleep(0.2)  # both connections seen by the server
            with socket.create_connection(address) as third:
                third.settimeout(5)
                status, body = _answer(third)
                assert (status, body["error"]) == (503, "too_many_connections")
                assert "2 connections open" in str(body["message"])
            slow.settimeout(5)
            started = time.monotonic()
            status, body = _answer(slow)
            assert (status, body["error"]) == (408, "request_timeout")
            assert "within 0.5 s" in str(body["message"])
            assert time.monotonic() - started < 2


def _broker_key(db: Path) -> str:
    """A key of a broker account of workspace `w` (the one `_served` makes)."""
    accounts = SqliteAccounts(db)
    accounts.create_account("b", "w", "broker")
    return accounts.create_key("b").key


def _charge_one(served: Served, key: str) -> None:
    """One villa scored and charged (1 decision) by the served server."""
    body = {"property": {"type": "villa", "price": 2_000_000, "area": 300},
            "location": {"city": "Riyadh"}, "reasoning": False}  # fmt: skip
    answer = httpx.post(
        f"http://127.0.0.1:{served.port}/v1/decisions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text


def test_a_stopped_server_leaves_every_charge_in_the_ledger_file_itself(tmp_path: Path) -> None:
    # Found by QA 61: the server stopped (SIGTERM) with its last charges in the ledger's -wal
    # file, so a copy of the .db file alone, as an operator backs up or moves a ledger once
    # the server is stopped, lacked decisions that were paid and answered.
    db = tmp_path / "l.db"
    with _served(tmp_path) as served:
        key = _broker_key(db)
        for _ in range(3):
            _charge_one(served, key)
    copy = tmp_path / "copy.db"
    shutil.copyfile(db, copy)  # the file alone, without its -wal
    assert SqliteLedger(copy).workspace("w").balance == 2


def test_a_stopped_server_says_when_another_process_kept_its_log_from_being_folded(
    tmp_path: Path,
) -> None:
    # Found by QA 62: with another process reading the ledger as the server stopped, the log
    # was not folded into the file, and nothing said so: the .db file copied alone then lacks
    # the last charges, as the README warns only a running server's does.
    db = tmp_path / "l.db"
    with _served(tmp_path) as served:
        reader = sqlite3.connect(db, isolation_level=None)
        try:
            key = _broker_key(db)
            reader.execute("BEGIN")
            reader.execute("SELECT balance FROM workspaces").fetchall()  # a snapshot held
            _charge_one(served, key)
            served.stop()  # while the snapshot is held
        finally:
            reader.close()
    said = served.log[0]
    assert "not all of the ledger's log could be folded into" in said
    assert ".backup" in said


def test_serve_raises_its_open_files_limit_to_what_its_connections_need(tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    needed = descriptors_needed(1500)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard limit on open files here is {hard}, below {needed}")
    with _served(tmp_path, "--max-connections", "1500", limit_files=1024) as served:
        limits = Path(f"/proc/{served.pid}/limits").read_text()
    soft = next(line.split()[3] for line in limits.splitlines() if "open files" in line)
    assert int(soft) == needed


def test_serve_refuses_more_connections_than_the_process_may_open_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit on open files here")
    db = ["--db", str(tmp_path / "l.db")]
    assert main(["workspace", "create", "w", "--balance", "5", *db]) == 0
    assert main(["serve", "--port", str(_free_port()), "--max-connections", str(hard), *db]) == 2
    err = capsys.readouterr().err
    assert f"--max-connections {hard} needs" in err and "ulimit -Hn" in err
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[1] == hard


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--head-timeout", "0", "seconds in (0, 3600]"),
        ("--request-timeout", "soon", "seconds in (0, 3600]"),
        ("--max-connections", "0", "whole number of connections above 0"),
    ],
)
def test_serve_refuses_limits_out_of_range(
    option: str, value: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", option, value])
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err


def _post_decision(port: int, key: str, idempotency_key: str) -> tuple[int, dict[str, str]]:
    """Status and headers of one POST /v1/decisions sent under `idempotency_key`."""
    body = json.dumps(
        {
            "property": {"type": "apartment", "price": 950000, "area": 140},
            "location": {"city": "Riyadh"},
            "reasoning": False,
        }
    ).encode()
    head = (
        f"POST /v1/decisions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {key}\r\n"
        f"Idempotency-Key: {idempotency_key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(head.encode() + body)
        data = b""
        while chunk := client.recv(65536):
            data += chunk
    lines = data.partition(b"\r\n\r\n")[0].decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers


def test_serve_forgets_answers_kept_past_keep_answers_days(tmp_path: Path, capsys) -> None:
    """Every answer was kept for ever under its Idempotency-Key (the ledger grew by a few
    kilobytes a request). A server forgets those older than --keep-answers-days when it
    starts (and every hour); the charges stay in the ledger's entries."""
    db = tmp_path / "l.db"
    assert main(["workspace", "create", "w", "--balance", "5", "--db", str(db)]) == 0
    assert (
        main(["account", "create", "b", "--workspace", "w", "--type", "broker", "--db", str(db)])
        == 0
    )
    assert main(["key", "create", "--account", "b", "--db", str(db)]) == 0
    key = capsys.readouterr().out.strip().splitlines()[-1]
    with _served(tmp_path) as served:
        assert _post_decision(served.port, key, "old")[0] == 200
        assert _post_decision(served.port, key, "recent")[0] == 200
    with sqlite3.connect(db) as ledger:  # "old" answered 31 days ago
        ledger.execute(
            "UPDATE idempotency SET created_at = created_at - 31 * 86400 WHERE key = 'old'"
        )
    ledger.close()
    with _served(tmp_path, "--keep-answers-days", "30") as served:
        deadline = time.monotonic() + 30  # the first round runs beside the first requests
        while SqliteLedger(db).charged("w", "old") and time.monotonic() < deadline:
            time.sleep(0.05)
        recent = _post_decision(served.port, key, "recent")
        old = _post_decision(served.port, key, "old")
    assert recent[0] == 200 and recent[1].get("idempotent-replayed") == "true"
    assert old[0] == 200 and "idempotent-replayed" not in old[1]  # a new request, paid anew
    # QA 62: the round at start was not logged, its logger not yet set up by uvicorn
    assert "forgot 1 answer(s) older than 30 day(s)" in served.log[0]
    assert main(["workspace", "show", "w", "--db", str(db)]) == 0
    assert json.loads(capsys.readouterr().out)["balance"] == 2


@pytest.mark.parametrize("days", ["0.5", "0", "-1", "forever", "nan"])
def test_serve_keeps_answers_at_least_a_day(days: str, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["serve", "--keep-answers-days", days])
    assert stopped.value.code == 2
    assert "is not a number of days of at least 1" in capsys.readouterr().err


def test_a_stopping_server_waits_longer_than_a_charge_waits_for_the_ledger(monkeypatch) -> None:
    """QA 61: uvicorn's 30 s grace was shorter than a charge's wait for a ledger locked by
    another process (60 s): a SIGTERM then cancelled those requests with a bare 500, and a
    charge committed after the cancellation went to nobody."""
    from pipeline.ledger.connection import BUSY_TIMEOUT_MS
    from pipeline.service import server

    started: dict[str, object] = {}
    monkeypatch.setattr(server, "tune_process", lambda **_: None)  # process-wide settings
    monkeypatch.setattr(server.uvicorn, "run", lambda app, **options: started.update(options))
    server.serve(server.FastAPI())
    assert started["timeout_graceful_shutdown"] > BUSY_TIMEOUT_MS / 1000


def test_a_server_listens_while_its_first_round_waits_on_a_locked_ledger(
    tmp_path: Path, capsys
) -> None:
    """QA 64: the answers past their time were forgotten before the server listened, so behind
    a ledger another process kept locked (a backup, a batch run's transaction) it did not
    answer for up to a minute, and batch runs waiting for it gave up."""
    db = tmp_path / "l.db"
    assert main(["workspace", "create", "w", "--balance", "5", "--db", str(db)]) == 0
    SqliteAccounts(db)  # a served ledger has its accounts' tables (made on first use)
    ledger = SqliteLedger(db)
    ledger.charge("w", ChargeRequest(cost=1, idempotency_key="old", fingerprint="f"))
    with sqlite3.connect(db) as aging:
        aging.execute("UPDATE idempotency SET created_at = created_at - 31 * 86400")
    aging.close()
    locker = sqlite3.connect(db, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    try:
        with _served(tmp_path, "--keep-answers-days", "30"):
            assert time.monotonic() - started < 20  # listening, the round still waiting
            locker.execute("COMMIT")
            deadline = time.monotonic() + 30
            while ledger.charged("w", "old") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not ledger.charged("w", "old")
    finally:
        locker.close()


# -- what a running server remembers of keys, and `key revoke` (QA 72) ------------------------


def _decisions(*args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    """The real `decisions` command, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60, **options,
    )  # fmt: skip


def _workspace_status(served: Served, key: str) -> int:
    """The status of GET /v1/workspace with `key` (authenticated like a decision, free)."""
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.get(f"http://127.0.0.1:{served.port}/v1/workspace", headers=headers).status_code


@pytest.mark.parametrize("how", ["deleted", "restored in place"])
def test_a_key_revoked_after_the_keys_file_changed_unseen_is_refused_at_once(
    tmp_path: Path, how: str
) -> None:
    """The server compared the file's inode and size only: deleted and made again by the
    revocation (ext4 gives it the same inode), or copied back in place from a backup (same
    inode) and grown again by one revocation to the size it had when the key was looked
    up, the file looked unchanged, and the revoked key was served for up to a second."""
    db = tmp_path / "l.db"
    changes = tmp_path / "l.db-keys"
    with _served(tmp_path) as served:
        key, other = _broker_key(db), SqliteAccounts(db).create_key("b").key
        backup = changes.read_bytes()
        if how == "deleted":
            changes.unlink()
        SqliteAccounts(db).revoke_key(other)  # the file now holds one byte more than backup
        size = changes.stat().st_size
        assert _workspace_status(served, key) == 200  # remembered with the file as it is
        time.sleep(0.05)
        if how == "deleted":
            changes.unlink()
        else:
            changes.write_bytes(backup)  # in place: its inode kept
        SqliteAccounts(db).revoke_key(key)  # another process, as `key revoke` is
        assert changes.stat().st_size == size
        assert _workspace_status(served, key) == 401


@pytest.mark.parametrize("how", ["a directory", "a link"])
def test_key_revoke_that_cannot_tell_running_servers_says_so_and_waits_until_they_refuse(
    tmp_path: Path, how: str
) -> None:
    """`key revoke` said nothing when its byte could not be appended to <ledger>-keys (not
    writable by the one revoking, not a file), and returned while servers still accepted
    the key for up to a second. Through a link, it appended its byte to the file linked."""
    db = tmp_path / "l.db"
    changes = tmp_path / "l.db-keys"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"not ours\n")
    with _served(tmp_path) as served:
        key = _broker_key(db)
        changes.unlink()
        if how == "a directory":
            changes.mkdir()
        else:
            changes.symlink_to(elsewhere)
        assert _workspace_status(served, key) == 200  # remembered
        revoke = _decisions("key", "revoke", key[:11], "--db", str(db))
        assert _workspace_status(served, key) == 401  # at once after the command returned
    assert elsewhere.read_bytes() == b"not ours\n"
    assert revoke.returncode == 0, revoke.stderr
    assert json.loads(revoke.stdout)["revoked"] is True
    assert "running servers could not be told through" in revoke.stderr
    assert "waited 1 s" in revoke.stderr


def test_key_revoke_of_a_key_revoked_by_hand_tells_running_servers(tmp_path: Path) -> None:
    """A key revoked by SQL is refused within a second; `key revoke` run on it then (to be
    sure) returned at once, saying it was revoked, without telling the servers."""
    db = tmp_path / "l.db"
    with _served(tmp_path) as served:
        key = _broker_key(db)
        assert _workspace_status(served, key) == 200  # remembered
        with closing(sqlite3.connect(db)) as by_hand, by_hand:
            by_hand.execute("UPDATE api_keys SET revoked_at = 1")
        revoke = _decisions("key", "revoke", key[:11], "--db", str(db))
        assert revoke.returncode == 0, revoke.stderr
        assert _workspace_status(served, key) == 401


def test_the_keys_file_is_made_as_sqlite_makes_the_ledgers_own_files(tmp_path: Path) -> None:
    """<ledger>-keys took the umask of whichever command opened the ledger's accounts first
    (a group that may revoke keys in a ledger shared with it could not append to it); a link
    in its place had `key list` make the file linked, a FIFO held every command there."""
    db = tmp_path / "l.db"
    changes = tmp_path / "l.db-keys"
    assert main(["workspace", "create", "w", "--balance", "5", "--db", str(db)]) == 0
    db.chmod(0o660)
    owner = (12345, 12346) if os.geteuid() == 0 else (db.stat().st_uid, db.stat().st_gid)
    if os.geteuid() == 0:  # made by root (`sudo decisions key list`): the ledger's owner's
        os.chown(db, *owner)
    assert _decisions("key", "list", "--db", str(db), umask=0o022).returncode == 0
    made = changes.stat()
    assert (made.st_mode & 0o777, made.st_uid, made.st_gid) == (0o660, *owner)

    changes.unlink()
    changes.symlink_to(tmp_path / "linked")
    assert _decisions("key", "list", "--db", str(db)).returncode == 0
    assert not (tmp_path / "linked").exists()

    changes.unlink()
    os.mkfifo(changes)
    assert _decisions("key", "list", "--db", str(db)).returncode == 0  # (timeout: 60 s)
