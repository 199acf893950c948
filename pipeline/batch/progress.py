"""Progress for people and for cron: a redrawn line on a terminal, plain log lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressReporter:
    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = self.stream.isatty()
        self._last_log = 0.0
        self._last_stage = ""

    def __call__(self, stage: str, done: int, total: int, spent: int) -> None:
        if self.quiet:
            return
        line = f"{stage}: {done:,}/{total:,} rows, {spent:,} decisions spent"
        if self.tty:
            self.stream.write("\r\x1b[2K" + self._bar(done, total) + " " + line)
            self.stream.flush()
            return
        now = time.monotonic()
        if stage != self._last_stage or done == total or now - self._last_log > 10:
            self.stream.write(time.strftime("%Y-%m-%d %H:%M:%S ") + line + "\n")
            self._last_log, self._last_stage = now, stage

    @staticmethod
    def _bar(done: int, total: int, width: int = 24) -> str:
        filled = width if total == 0 else width * done // total
        return "[" + "#" * filled + "." * (width - filled) + "]"

    def finish(self) -> None:
        if self.tty and not self.quiet:
            self.stream.write("\n")
