"""The `decisions` command: parses options and calls the library, nothing more."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.command_parser import CommandParser
from pipeline.errors import LedgerError, PipelineError, RequestValidationError, UsageError
from pipeline.ledger.base import Workspace
from pipeline.ledger.key_text import redact_keys_in_message
from pipeline.settings import Settings, load_settings

if TYPE_CHECKING:
    from pipeline.ledger.sqlite import SqliteLedger

Handler = Callable[[argparse.Namespace, Settings], int]


def _ledger(
    args: argparse.Namespace,
    settings: Settings,
    *,
    charges_local: bool = False,
    creates: bool = False,
) -> SqliteLedger:
    """The command's ledger; a file named by --db must be there already, unless the command
    `creates` a workspace or charges the local one (made on first use)."""
    from pipeline.ledger.sqlite import open_ledger

    must_exist = not (creates or charges_local)
    return open_ledger(settings, args.db, charges_local=charges_local, must_exist=must_exist)


def _workspace(args: argparse.Namespace, settings: Settings) -> str:
    return args.workspace or settings.ledger.workspace


def _print_json(value: object) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2))


# -- decide ----------------------------------------------------------------------------------


def cmd_decide(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio

    from pipeline.decisions import DecisionDesk
    from pipeline.engine.benchmarks import BenchmarkTable
    from pipeline.engine.engine import Engine
    from pipeline.ledger.base import IDEMPOTENCY_KEY_RULE, valid_idempotency_key
    from pipeline.ledger.key_text import looks_like_key
    from pipeline.ledger.sqlite import first_charge_note

    key = args.idempotency_key
    if key is not None and not valid_idempotency_key(key):
        raise UsageError(f"--idempotency-key must be {IDEMPOTENCY_KEY_RULE}")
    if key is not None and looks_like_key(key):  # as the service's header: it would be stored
        raise UsageError(
            "--idempotency-key holds an API key, which the ledger's entries would keep in clear: "
            "give the request a key of its own, and revoke this one (`decisions key revoke`), "
            "as the shell's history may have kept it"
        )
    try:
        body = sys.stdin.buffer.read() if args.request == "-" else Path(args.request).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the request {args.request}: {exc.strerror}") from exc
    engine = Engine(BenchmarkTable.load(settings.resolve(settings.benchmarks.table)))
    workspace = _workspace(args, settings)
    ledger = _ledger(args, settings, charges_local=workspace == settings.ledger.workspace)
    if (note := first_charge_note(ledger)) is not None:
        print(note, file=sys.stderr)
    desk = DecisionDesk(engine, ledger)
    try:
        decision = asyncio.run(
            desk.decide_async(
                body,
                workspace=workspace,
                idempotency_key=args.idempotency_key,
                commit_inline=True,  # one request: no transaction to share with anyone
            )
        )
    except (RequestValidationError, LedgerError) as exc:
        _print_json(exc.body())
        return exc.exit_code
    _print_json(decision.body)
    return 0


# -- workspace -------------------------------------------------------------------------------


def _show(workspace: Workspace) -> None:
    _print_json({"workspace": workspace.name, "balance": workspace.balance})


def cmd_workspace_create(args: argparse.Namespace, settings: Settings) -> int:
    _show(_ledger(args, settings, creates=True).create_workspace(args.name, args.balance))
    return 0


def cmd_workspace_topup(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.ledger.sqlite import open_ledger

    # The local workspace of a --db ledger is made by its first charge: a run that could pay
    # nothing advises a top-up of it, which makes it as well.
    local = args.name == settings.ledger.workspace
    ledger = open_ledger(settings, args.db, charges_local=local, must_exist=True)
    _show(ledger.topup(args.name, args.amount))
    return 0


def cmd_workspace_show(args: argparse.Namespace, settings: Settings) -> int:
    _show(_ledger(args, settings).workspace(args.name))
    return 0


ENTRY_FIELDS = (
    "id", "created_at", "kind", "amount", "balance_after", "key_prefix", "idempotency_key",
    "fingerprint", "refund_of", "note",
)  # fmt: skip


def cmd_workspace_entries(args: argparse.Namespace, settings: Settings) -> int:
    """The audit trail, oldest first: every change of the balance with the balance after it."""
    from datetime import UTC, datetime

    entries = [
        {name: entry[name] for name in ENTRY_FIELDS}
        | {"created_at": datetime.fromtimestamp(float(entry["created_at"]), UTC).isoformat()}
        for entry in _ledger(args, settings).entries(args.name)
    ]
    if args.csv:
        import csv

        from pipeline.io.xlsx_text import FORMULA_FIRST

        def inert(value: object) -> object:
            """A client's text (its idempotency key) that a spreadsheet would run as a formula
            gets an apostrophe first, as one types text into Excel."""
            if isinstance(value, str) and value[:1] in FORMULA_FIRST:
                return "'" + value
            return value

        writer = csv.DictWriter(sys.stdout, fieldnames=ENTRY_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: inert(v) for k, v in entry.items()} for entry in entries)
    else:
        _print_json(entries)
    return 0


# -- benchmarks ------------------------------------------------------------------------------


def cmd_benchmarks_build(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.engine.benchmarks_build import build

    sources = [Path(s) for s in args.sources] or [settings.root.parent / "shared" / "data"]
    report = build(sources, Path(args.out))
    print("\n".join(report.lines()))
    return 0


# -- parser ----------------------------------------------------------------------------------


def _add_ledger_options(parser: argparse.ArgumentParser, workspace: bool = False) -> None:
    parser.add_argument("--db", help="ledger: a SQLite path or sqlite:///PATH (env DECISIONS_DB)")
    if workspace:
        parser.add_argument("--workspace", help="workspace to charge (default: the local one)")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="decisions", description="Property decisions: score listings against the market."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    decide = commands.add_parser(
        "decide",
        help="evaluate one request body (JSON) and charge it",
        description="Evaluate one request body of POST /v1/decisions (JSON) with the embedded "
        "engine, charge the workspace 1 decision (3 with reasoning) and print the answer.",
    )
    decide.add_argument("request", help="REQUEST.json, or - for standard input")
    decide.add_argument("--idempotency-key", help="replay instead of charging twice")
    _add_ledger_options(decide, workspace=True)
    decide.set_defaults(handler=cmd_decide)

    workspace = commands.add_parser("workspace", help="decision balances")
    ws = workspace.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = ws.add_parser("create", help="create a workspace with an opening balance")
    create.add_argument("name")
    create.add_argument(
        "--balance", type=int, required=True, help="its opening balance, in decisions"
    )
    create.set_defaults(handler=cmd_workspace_create)
    topup = ws.add_parser("topup", help="add decisions to a workspace")
    topup.add_argument("name")
    topup.add_argument("amount", type=int)
    topup.set_defaults(handler=cmd_workspace_topup)
    show = ws.add_parser("show", help="print a workspace's balance")
    show.add_argument("name")
    show.set_defaults(handler=cmd_workspace_show)
    entries = ws.add_parser(
        "entries", help="print a workspace's audit trail: every charge, refund and top-up"
    )
    entries.add_argument("name")
    entries.add_argument("--csv", action="store_true", help="CSV instead of JSON")
    entries.set_defaults(handler=cmd_workspace_entries)
    for sub in (create, topup, show, entries):
        _add_ledger_options(sub)

    benchmarks = commands.add_parser("benchmarks", help="market benchmark tables")
    bm = benchmarks.add_subparsers(dest="action", required=True, metavar="ACTION")
    build = bm.add_parser("build", help="build the benchmark table from the official files")
    build.add_argument("--out", required=True, help="benchmarks.csv to write")
    build.add_argument(
        "sources",
        nargs="*",
        help="the official files: their folder (default ../shared/data), or the folders or "
        "files that hold them",
    )
    build.set_defaults(handler=cmd_benchmarks_build)

    from pipeline.batch.cli import add_nightly_command, add_score_command
    from pipeline.service_cli import add_service_commands

    add_score_command(commands)
    add_nightly_command(commands)
    add_service_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()  # (it loads the commands' modules)
    except KeyboardInterrupt:
        print("decisions: interrupted while starting; nothing was done", file=sys.stderr)
        return 130
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        handler: Handler = args.handler
        return handler(args, settings)
    except PipelineError as exc:
        print(f"decisions: error: {redact_keys_in_message(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("decisions: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout left (`decisions workspace entries acme | head`): as a shell
        # tool does, stop quietly; stdout is pointed at /dev/null so the exit flush is silent.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
