"""One typed settings model; configs/settings.toml and the environment are read here only."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.errors import UsageError

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SETTINGS = PROJECT_ROOT / "configs" / "settings.toml"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LedgerSettings(_Section):
    db: Path = Path(".cache/decisions.db")
    workspace: str = "local"
    initial_balance: int = Field(default=100_000, ge=0)


class BenchmarkSettings(_Section):
    table: Path = Path("sample_data/benchmarks.csv")


class BatchSettings(_Section):
    concurrency: int = Field(default=8, ge=1, le=256)
    chunk_rows: int = Field(default=50_000, ge=1)
    journal_dir: Path = Path(".cache/journals")
    freshness_days: float = Field(default=30, ge=0)


class Settings(_Section):
    ledger: LedgerSettings = LedgerSettings()
    benchmarks: BenchmarkSettings = BenchmarkSettings()
    batch: BatchSettings = BatchSettings()
    root: Path = PROJECT_ROOT

    def resolve(self, path: Path) -> Path:
        return path if path.is_absolute() else self.root / path


def load_settings(path: Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Settings from the TOML file (DECISIONS_SETTINGS or configs/settings.toml) and env."""
    env = dict(os.environ) if env is None else env
    path = path or Path(env.get("DECISIONS_SETTINGS", DEFAULT_SETTINGS))
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        settings = Settings.model_validate({**data, "root": path.resolve().parent.parent})
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise UsageError(f"{path}: invalid settings: {exc}") from exc
    if env.get("DECISIONS_DB"):
        ledger = settings.ledger.model_copy(update={"db": db_path(env["DECISIONS_DB"])})
        settings = settings.model_copy(update={"ledger": ledger})
    return settings


def ledger_location(
    settings: Settings, db: str | None, env: dict[str, str] | None = None
) -> tuple[Path, bool]:
    """A command's ledger file (`--db`, else DECISIONS_DB, else the settings' file), and whether
    it is the settings' own file rather than one the user named."""
    env = dict(os.environ) if env is None else env
    if db:
        return db_path(db), False
    return settings.resolve(settings.ledger.db), not env.get("DECISIONS_DB")


def db_path(url: str) -> Path:
    """A ledger location as given by a user: a path, or a sqlite:/// URL (relative to cwd)."""
    if "://" in url:
        scheme, _, rest = url.partition("://")
        if scheme != "sqlite":
            raise UsageError(f"unsupported ledger URL {url!r}: only sqlite:///PATH for now")
        url = rest[1:]  # sqlite:///relative.db, sqlite:////absolute.db
    return Path(url).resolve()
