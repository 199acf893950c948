"""The remote options of `decisions score` and the scorer they build.

The key comes only from the environment (DECISIONS_API_KEY) or a file (--api-key-file): a
command-line argument would show in `ps`, shell history and cron logs. `--api-key` exists only
to refuse the key with a clear message (and so that argparse cannot take it as an
abbreviation of --api-key-file and echo the key in a "no such file" error).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import UsageError
from pipeline.settings import Settings

if TYPE_CHECKING:  # the HTTP stack costs a fraction of a second to import: only when used
    from pipeline.batch.scorers.http import ApiKey, HttpScorer

ENV_URL = "DECISIONS_API_URL"
ENV_KEY = "DECISIONS_API_KEY"
KEY_WAYS = f"set {ENV_KEY} in the environment, or pass --api-key-file PATH (a file holding it)"


class _RefuseKey(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        parser.error(
            "the API key is never accepted on the command line (it would show in ps, shell "
            f"history and logs); {KEY_WAYS}"
        )


def add_remote_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "remote scoring", f"score through a decision service; the key: {KEY_WAYS}"
    )
    group.add_argument(
        "--api-url",
        metavar="URL",
        help=f"the service's base address, e.g. https://api.example.com (env {ENV_URL}); "
        "without it the embedded engine scores",
    )
    group.add_argument("--api-key-file", metavar="PATH", type=Path, help="file holding the key")
    group.add_argument("--api-key", nargs="?", action=_RefuseKey, help=argparse.SUPPRESS)
    group.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="requests in flight at once (default: batch.concurrency of the settings, 8)",
    )
    group.add_argument(
        "--reserve",
        type=int,
        default=0,
        metavar="N",
        help="leave N decisions in the shared balance: stop before spending below it",
    )


def read_key(args: argparse.Namespace, env: Mapping[str, str]) -> ApiKey:
    from pipeline.batch.scorers.http import ApiKey

    path: Path | None = args.api_key_file
    if path is not None:
        if path.name.startswith("sk-") or not path.is_file():
            # the value given may be a key pasted in place of a path: never echo it
            shown = "the path given" if path.name.startswith("sk-") else str(path)
            raise UsageError(f"--api-key-file: cannot read {shown}; {KEY_WAYS}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--api-key-file: cannot read {path} ({type(exc).__name__})") from None
        return ApiKey(text)
    if env.get(ENV_KEY, "").strip():
        return ApiKey(env[ENV_KEY])
    raise UsageError(f"--api-url needs an API key: {KEY_WAYS}")


def service_url(api_url: str | None, env: Mapping[str, str] | None = None) -> str:
    """The decision service to score through: --api-url, else DECISIONS_API_URL; "" for
    the embedded engine."""
    env = os.environ if env is None else env
    return api_url or env.get(ENV_URL, "").strip()


def remote_scorer_from_args(
    args: argparse.Namespace, settings: Settings, env: Mapping[str, str] | None = None
) -> HttpScorer | None:
    """The remote scorer the options ask for; None without a URL (embedded mode)."""
    env = os.environ if env is None else env
    url = service_url(args.api_url, env)
    if not url:
        if args.api_key_file is not None:
            raise UsageError(f"--api-key-file needs --api-url (or {ENV_URL})")
        return None
    concurrency = args.concurrency or settings.batch.concurrency
    if not 1 <= concurrency <= 256:
        raise UsageError("--concurrency must be between 1 and 256")
    from pipeline.batch.scorers.http import HttpScorer, RemoteConfig

    config = RemoteConfig(base_url=url, concurrency=concurrency, reserve=args.reserve)
    return HttpScorer(config, read_key(args, env))
