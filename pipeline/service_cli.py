"""`decisions serve`, `decisions account create`, `decisions key create|revoke|list`.

Parsing only; the work is in pipeline.service and pipeline.ledger.accounts.
"""

from __future__ import annotations

import argparse
import json
import logging.config
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.errors import UsageError
from pipeline.ledger.accounts import ACCOUNT_TYPES, AccountError, KeyInfo, SqliteAccounts
from pipeline.service.limits import (
    HEAD_TIMEOUT_S,
    MAX_CONNECTIONS,
    REQUEST_TIMEOUT_S,
    ConnectionLimits,
    allow_descriptors_for,
)
from pipeline.service.retention import KEEP_ANSWERS_DAYS, MIN_KEEP_ANSWERS_DAYS
from pipeline.settings import Settings

DEMO_WORKSPACE = "demo"
DEMO_ACCOUNT = "demo-broker"
DEMO_BALANCE = 1000

_CURL = """\
curl -s http://{host}:{port}/v1/decisions \\
  -H "Authorization: Bearer $DECISIONS_API_KEY" \\
  -H "Content-Type: application/json" \\
  -d '{{"property": {{"type": "apartment", "price": 950000, "area": 140, "bedrooms": 3}},
       "location": {{"city": "Riyadh", "district": "Al Malqa"}}, "reasoning": false}}'"""


def _db(args: argparse.Namespace, settings: Settings) -> Path:
    """The ledger file of the command, which must be there (but for `serve --demo`)."""
    from pipeline.ledger.sqlite import open_ledger

    must_exist = not getattr(args, "demo", False)
    return open_ledger(settings, args.db, must_exist=must_exist).path


def _key_row(info: KeyInfo) -> dict[str, Any]:
    def when(timestamp: float | None) -> str | None:
        return None if timestamp is None else datetime.fromtimestamp(timestamp, UTC).isoformat()

    return {
        "account": info.account,
        "key": info.display,
        "created_at": when(info.created_at),
        "revoked": info.revoked_at is not None,
        "revoked_at": when(info.revoked_at),
    }


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.engine.benchmarks import BenchmarkTable
    from pipeline.ledger.sqlite import SqliteLedger
    from pipeline.service.retention import AnswerRetention
    from pipeline.service.server import build_app, log_config, serve

    check_can_listen(args.host, args.port)
    allow_descriptors_for(args.max_connections)
    # before the ledger is opened, which makes its file: tables that cannot be read stop here
    benchmarks = BenchmarkTable.load(settings.resolve(settings.benchmarks.table))
    db = _db(args, settings)
    if args.demo:
        balance = _ensure_demo(db)
        db_option = f" --db {args.db}" if args.db else ""
        print(
            f"Demo workspace {DEMO_WORKSPACE!r} ({balance:,} decisions), account "
            f"{DEMO_ACCOUNT!r}. Create a key in another terminal (printed once):\n\n"
            f"  export DECISIONS_API_KEY=$(.venv/bin/decisions key create "
            f"--account {DEMO_ACCOUNT}{db_option})\n\nthen ask for a decision:\n\n"
            + _CURL.format(host=args.host, port=args.port)
            + "\n",
            flush=True,
        )
    limits = ConnectionLimits(
        head_timeout_s=args.head_timeout,
        request_timeout_s=args.request_timeout,
        max_connections=args.max_connections,
    )
    app = build_app(db, benchmarks, rate_limit=args.rate_limit)
    logging.config.dictConfig(log_config())  # as uvicorn will: the first round's line is logged
    retention = AnswerRetention(SqliteLedger(db), args.keep_answers_days)
    retention.start()  # its first round at once, beside the first requests (see `start`)
    try:
        serve(app, host=args.host, port=args.port, one_cpu=not args.all_cpus, limits=limits)
    finally:
        retention.stop()
    return 0


def _ensure_demo(db: Path) -> int:
    """The demo workspace and account (made on first use); the workspace's balance now."""
    from pipeline.ledger.sqlite import SqliteLedger

    balance = SqliteLedger(db).ensure_workspace(DEMO_WORKSPACE, DEMO_BALANCE).balance
    accounts = SqliteAccounts(db)
    try:
        accounts.account(DEMO_ACCOUNT)
    except AccountError:
        accounts.create_account(DEMO_ACCOUNT, DEMO_WORKSPACE, "broker")
    return balance


def cmd_account_create(args: argparse.Namespace, settings: Settings) -> int:
    account = SqliteAccounts(_db(args, settings)).create_account(
        args.name, args.workspace, args.type
    )
    print(json.dumps({"account": account.name, "workspace": account.workspace, "type": args.type}))
    return 0


def cmd_key_create(args: argparse.Namespace, settings: Settings) -> int:
    new = SqliteAccounts(_db(args, settings)).create_key(args.account)
    print(
        f"API key for {args.account} ({new.info.display}); it is shown only this once.",
        file=sys.stderr,
    )
    print(new.key)
    return 0


def cmd_key_revoke(args: argparse.Namespace, settings: Settings) -> int:
    info = SqliteAccounts(_db(args, settings)).revoke_key(
        args.prefix, warn=lambda note: print(f"decisions: note: {note}", file=sys.stderr)
    )
    print(json.dumps(_key_row(info)))
    return 0


def cmd_key_list(args: argparse.Namespace, settings: Settings) -> int:
    for info in SqliteAccounts(_db(args, settings)).list_keys(args.account):
        print(json.dumps(_key_row(info)))
    return 0


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 0 to 65535, not {text!r}")
    return int(text)


def _number(text: str) -> float:
    """`text` as a float; NaN, which fails every range check, when it is no number."""
    try:
        return float(text)
    except ValueError:
        return float("nan")


def _seconds(text: str) -> float:
    seconds = _number(text)
    if not 0 < seconds <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in (0, 3600]")
    return seconds


def _connections(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of connections above 0")
    return int(text)


def _days_kept(text: str) -> float:
    days = _number(text)
    if not MIN_KEEP_ANSWERS_DAYS <= days < float("inf"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of days of at least {MIN_KEEP_ANSWERS_DAYS:g} (DESIGN.md: "
            "an idempotency key is kept at least 24 hours)"
        )
    return days


def _per_second(text: str) -> float:
    rate = _number(text)
    if not 0 < rate < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of requests above 0")
    return rate


def check_can_listen(host: str, port: int) -> None:
    """UsageError (exit 2) when host:port cannot be listened on, before the server starts."""
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
            probe.bind(address)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="ledger: a SQLite path or sqlite:///PATH (env DECISIONS_DB)")


def add_service_commands(commands: Any) -> None:
    """Add serve, account and key to the `decisions` subparsers."""
    serve = commands.add_parser(
        "serve",
        help="serve POST /v1/decisions over HTTP",
        description="Serve the decision API (POST /v1/decisions, GET /v1/workspace, "
        "/openapi.json) over HTTP, charging the workspaces of the ledger (--db).",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)"
    )
    serve.add_argument("--port", type=_port, default=8000, help="the port (default: 8000)")
    serve.add_argument(
        "--demo", action="store_true", help="create a demo workspace and broker account first"
    )
    serve.add_argument(
        "--all-cpus",
        action="store_true",
        help="run on every CPU (by default the server binds itself to the CPU it starts on: "
        "its threads hand each request to each other, which is cheaper on one core)",
    )
    serve.add_argument(
        "--rate-limit",
        type=_per_second,
        metavar="N",
        help="decisions requests a second each workspace may send, in bursts of up to N; "
        "past that 429 rate_limited with Retry-After, nothing charged (default: no limit)",
    )
    serve.add_argument(
        "--head-timeout",
        type=_seconds,
        default=HEAD_TIMEOUT_S,
        metavar="SECONDS",
        help="a request's head must arrive within this of its first byte, else 408 and the "
        f"connection closed (default {HEAD_TIMEOUT_S:g})",
    )
    serve.add_argument(
        "--request-timeout",
        type=_seconds,
        default=REQUEST_TIMEOUT_S,
        metavar="SECONDS",
        help="the whole request, body included, must arrive within this, else 408; a client "
        "reading none of its answers is disconnected after as long "
        f"(default {REQUEST_TIMEOUT_S:g})",
    )
    serve.add_argument(
        "--max-connections",
        type=_connections,
        default=MAX_CONNECTIONS,
        metavar="N",
        help="connections open at once; past that 503 too_many_connections and closed "
        f"(default {MAX_CONNECTIONS}; the process's file descriptor limit must allow it)",
    )
    serve.add_argument(
        "--keep-answers-days",
        type=_days_kept,
        default=KEEP_ANSWERS_DAYS,
        metavar="DAYS",
        help="answers are kept under their Idempotency-Key this long, then forgotten (at start "
        "and every hour): the same key sent later is a new request, charged anew "
        f"(default {KEEP_ANSWERS_DAYS:g}, at least {MIN_KEEP_ANSWERS_DAYS:g})",
    )
    _db_option(serve)
    serve.set_defaults(handler=cmd_serve)

    account = commands.add_parser("account", help="broker, agency, buyer and seller accounts")
    acc = account.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = acc.add_parser("create", help="create an account in a workspace")
    create.add_argument("name")
    create.add_argument("--workspace", required=True, help="the workspace its keys spend from")
    create.add_argument(
        "--type",
        required=True,
        choices=ACCOUNT_TYPES,
        help="broker and agency accounts can have API keys; buyer and seller cannot",
    )
    _db_option(create)
    create.set_defaults(handler=cmd_account_create)

    key = commands.add_parser("key", help="API keys (broker and agency accounts only)")
    keys = key.add_subparsers(dest="action", required=True, metavar="ACTION")
    key_create = keys.add_parser("create", help="create a key; printed once, stored as a hash")
    key_create.add_argument(
        "--account", required=True, help="the broker or agency account the key is for"
    )
    key_create.set_defaults(handler=cmd_key_create)
    revoke = keys.add_parser("revoke", help="revoke a key by its prefix (sk-xxxxxxxx)")
    revoke.add_argument(
        "prefix", help="the key's prefix as `key list` shows it (prefix...last), or the key"
    )
    revoke.set_defaults(handler=cmd_key_revoke)
    listing = keys.add_parser("list", help="list keys: prefix and last characters only")
    listing.add_argument("--account", help="only this account's keys (default: every account)")
    listing.set_defaults(handler=cmd_key_list)
    for sub in (key_create, revoke, listing):
        _db_option(sub)
