"""The `decisions` console script (and `python -m pipeline`): Ctrl-C or SIGINT while the
command is still loading its modules (the first tenth of a second) stops it as quietly as
later, not with a traceback; nothing has been done by then."""

from __future__ import annotations

import sys


def main() -> int:
    try:
        from pipeline.cli import main as run
    except KeyboardInterrupt:
        print("decisions: interrupted while starting; nothing was done", file=sys.stderr)
        return 130
    return run()
