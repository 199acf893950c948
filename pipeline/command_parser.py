"""The command line's argument parser, which says no API key back.

argparse's error messages repeat what was typed: an API key given to the wrong option
(`--budget sk-...`, or `--api-k=sk-...`, which could abbreviate --api-key and --api-key-file)
would be printed whole, and land in a cron mail or a CI log.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from pipeline.ledger.key_text import redact_keys_in_message


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser (its sub-commands' parsers too) that cuts any API key in its error
    messages to the key's display prefix."""

    def error(self, message: str) -> NoReturn:
        super().error(redact_keys_in_message(message))
