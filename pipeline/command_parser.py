"""The command line's argument parser, which says no API key back.

argparse's error messages repeat what was typed: an API key given to the wrong option
(`--budget sk-...`, or `--api-k=sk-...`, which could abbreviate --api-key and --api-key-file)
would be printed whole, and land in a cron mail or a CI log.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from typing import NoReturn

from pipeline.ledger.key_text import redact_keys_in_message


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser (its sub-commands' parsers too) that cuts any API key in its error
    messages to the key's display prefix."""

    def error(self, message: str) -> NoReturn:
        super().error(redact_keys_in_message(message))

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """As argparse's, but an option it does not know is refused by the (sub-)command's
        parser it was given to, with that command's usage line and the option meant, if one
        is near (`decisions score in.csv --budgt 5`: not the top-level usage)."""
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            parser = _chosen(self, parsed)
            message = f"unrecognized arguments: {' '.join(unknown)}"
            known = [o for action in parser._actions for o in action.option_strings]
            near = difflib.get_close_matches(unknown[0].split("=", 1)[0], known, n=1)
            parser.error(message + (f" (did you mean {near[0]}?)" if near else ""))
        return parsed


def _chosen(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the innermost sub-command `parsed` was parsed with."""
    while True:
        commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(parsed, commands[0].dest, None) if commands else None
        if name is None or name not in commands[0].choices:
            return parser
        parser = commands[0].choices[name]
