"""`decisions nightly`: the scheduled run, from configs/nightly.toml, into a dated folder.

It is `decisions score` with its options taken from the file: the journal makes each night
pay only for new, changed or stale rows, the job lock keeps two nights from overlapping, and
the manifest beside the outputs says what happened in a form a monitor can read.
"""

from __future__ import annotations

import tomllib
from datetime import date
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.errors import UsageError


class NightlyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: Path
    output_dir: Path = Path("out/nightly")
    formats: list[Literal["xlsx", "csv", "parquet"]] = Field(default=["xlsx"], min_length=1)
    budget: int | None = Field(default=None, ge=0)
    reasoning: Literal["none", "all", "borderline"] = "none"
    workspace: str | None = None


def load_nightly(path: Path) -> NightlyConfig:
    try:
        return NightlyConfig.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such nightly configuration") from None
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise UsageError(f"{path}: invalid nightly configuration: {exc}") from exc


def score_arguments(config: NightlyConfig, root: Path, day: date) -> list[str]:
    """The `decisions score` arguments of one night's run."""

    def resolved(path: Path) -> Path:
        return path if path.is_absolute() else root / path

    source = resolved(config.input)
    folder = resolved(config.output_dir) / day.isoformat()
    args = [
        str(source),
        "--reasoning",
        config.reasoning,
        "--manifest",
        str(folder / "manifest.json"),
    ]
    for fmt in config.formats:
        args += ["-o", str(folder / f"{source.stem}-scored.{fmt}")]
    if config.budget is not None:
        args += ["--budget", str(config.budget)]
    if config.workspace:
        args += ["--workspace", config.workspace]
    return args
