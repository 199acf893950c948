"""CSV output: UTF-8 with a byte order mark by default, so Excel shows Arabic text correctly."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipeline.errors import OutputError
from pipeline.io.atomic import atomic_path

__all__ = ["write_csv"]


def write_csv(path: Path, frame: pl.DataFrame, *, bom: bool = True) -> None:
    """Write `frame` as comma-separated UTF-8 with a header row; null is an empty field.

    Text is written exactly as it is in the frame: a cell such as `=1+1` or `1,500,000` comes
    back identical when the file is read as text.
    """
    with atomic_path(path) as tmp:
        try:
            frame.write_csv(tmp, include_bom=bom, include_header=True, separator=",")
        except pl.exceptions.PolarsError as exc:
            raise OutputError(f"{path}: cannot write CSV ({exc})") from exc
