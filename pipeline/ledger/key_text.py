"""API keys in text: found and cut to their display prefix (`sk-` and 8 characters), so that a
key pasted in the wrong place (a URL path, a header, an option) reaches no log, error message or
output whole. Kept apart from the account store, so that the command line can use it without
loading that."""

from __future__ import annotations

import re

DISPLAY_CHARS = 8  # secret characters shown in a key's display prefix

# Anything shaped like the start of a key, however it is cased (`sk_` a slip for `sk-`): a key
# pasted into a URL path must not reach a log line or an error body whole.
_KEY_LIKE_RE = re.compile(rf"(sk[-_][a-z0-9]{{{DISPLAY_CHARS}}})[a-z0-9]+", re.IGNORECASE)
# A key, or 20 characters of one, in a message that also names files and workspaces, which
# _KEY_LIKE_RE would cut at any "sk-" (risk-assessment-2024.csv). Whatever comes before it: a
# key glued to a word (listing_sk-..., 42sk-...) is a key all the same.
_KEY_IN_MESSAGE_RE = re.compile(
    rf"(sk[-_][a-z2-7]{{{DISPLAY_CHARS}}})[a-z2-7]{{12,}}(?![a-z0-9])", re.IGNORECASE
)


def redact_keys(text: str) -> str:
    """`text` with every key-like token cut to its display prefix (for paths in logs and errors)."""
    return _KEY_LIKE_RE.sub("\\1...", text)


def redact_keys_in_message(text: str) -> str:
    """`text` with every key in it cut to its display prefix: for messages of the command line
    and of a service, where `redact_keys` would cut names that hold an "sk-"."""
    return _KEY_IN_MESSAGE_RE.sub("\\1...", text)


def looks_like_key(text: str) -> bool:
    """Whether `text` holds an API key, or 20 characters of one (an Idempotency-Key such as
    `risk-assessment-42` does not)."""
    return _KEY_IN_MESSAGE_RE.search(text) is not None
