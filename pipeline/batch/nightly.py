"""`decisions nightly`: the scheduled run, from configs/nightly.toml, into a dated folder.

It is `decisions score` with its options taken from the file: the journal makes each night
pay only for new, changed or stale rows, the job lock keeps two nights from overlapping, and
the manifest beside the outputs says what happened in a form a monitor can read.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pipeline.batch.job_files import job_input
from pipeline.batch.labels import PERHAPS_CHARGED
from pipeline.errors import UsageError

if TYPE_CHECKING:
    from pipeline.batch.journal import Journal

STOPPED_RUNS_SPENT = "decisions_spent_by_stopped_runs"
SPEND_RECORDED_UNTIL = "spend_recorded_until"


class NightlyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: Path
    output_dir: Path = Path("out/nightly")
    formats: list[Literal["xlsx", "csv", "parquet"]] = Field(default=["xlsx"], min_length=1)
    budget: int | None = Field(default=None, ge=0)
    reasoning: Literal["none", "all", "borderline"] = "none"
    workspace: str | None = None
    columns: Path | None = None  # a column mapping file (`decisions score --config`)
    sheet: str | int | None = None  # a name, or a 0-based position
    encoding: str | None = None
    priority: str | None = None  # the column whose highest values are scored first
    # the job's run journal (`decisions score --journal`): named, it stays the job's when the
    # export changes its name or format (portfolio.csv -> portfolio.xlsx), which by default
    # starts another job, whose first night pays every row again
    journal: Path | None = None

    @field_validator("formats", mode="before")
    @classmethod
    def _format_names(cls, value: object) -> object:
        """`CSV`, `pq`: as `-o` takes them (an output's extension, in any case)."""
        if isinstance(value, list):
            return [
                _FORMAT_NAMES.get(v.lower(), v.lower()) if isinstance(v, str) else v for v in value
            ]
        return value

    @field_validator("reasoning", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value


_FORMAT_NAMES = {"pq": "parquet", "xlsm": "xlsx"}


def load_nightly(path: Path) -> NightlyConfig:
    try:
        return NightlyConfig.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such nightly configuration") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid nightly configuration: {exc}") from exc
    except ValidationError as exc:
        problems = "; ".join(dict.fromkeys(_problem(error) for error in exc.errors()))
        raise UsageError(f"{path}: invalid nightly configuration: {problems}") from None


def _problem(error: Mapping[str, Any]) -> str:
    """One mistake of a nightly configuration, in its own words (not pydantic's dump)."""
    key, *index = error["loc"]  # strings after the key name a type of a union: left out
    where = f"{key}" + "".join(f"[{i}]" for i in index if isinstance(i, int))  # formats[1]
    if error["type"] == "extra_forbidden":
        known = ", ".join(NightlyConfig.model_fields)
        return f"unknown key {where!r} (the keys are: {known})"
    if error["type"] == "missing":
        return f"{where!r} is required"
    if key in _EXPECTED and (key != "formats" or error["type"] == "literal_error"):
        return f"{where} = {error.get('input')!r}: should be {_EXPECTED[key]}"
    message = str(error["msg"]).removeprefix("Input ").removeprefix("Value ")
    return f"{where} = {error.get('input')!r}: {message}"


_EXPECTED = {
    "sheet": "a sheet's name, or its position counting from 0",
    "formats": "'xlsx', 'csv', 'parquet' or 'pq', in any case",
}


def _resolved(path: Path, root: Path) -> Path:
    """A configured path: relative ones are relative to the project folder."""
    return path if path.is_absolute() else root / path


def tonight() -> date:
    """The night a run belongs to: the local date it starts on (a rerun after midnight is the
    next night's, with its own folder and budget)."""
    return date.today()


def _night_folder(config: NightlyConfig, root: Path, day: date) -> Path:
    return _resolved(config.output_dir, root) / day.isoformat()


@dataclass(frozen=True)
class NightSoFar:
    """What the night's records of a job say its earlier runs spent (their manifests, set
    aside by `make_room`; another job's records in a shared folder are not counted), and the
    time up to which they account for every request the job sent: what its journal shows sent
    after it, by a run still unfinished, is in no record (a run killed with kill -9 writes
    none). `unread`: the night's records that could not be read (the file's name, and why),
    counted in neither figure."""

    spent: int
    recorded_until: float  # a Unix time: the night's start, or a record's
    began: float  # the night's start (local midnight), a Unix time
    unread: tuple[tuple[str, str], ...] = ()


class _Unreadable(Exception):
    """A night's record that is not one a run writes; the message says why."""


def night_so_far(config: NightlyConfig, root: Path, day: date, workspace: str | None) -> NightSoFar:
    source = _resolved(config.input, root)
    began = datetime.combine(day, datetime.min.time()).timestamp()
    spent, until, unread = 0, began, []
    for path in sorted(_night_folder(config, root, day).glob("manifest-*.json")):
        try:
            earlier = _record(path)
            if not _of_the_job(earlier, source, workspace):
                continue
            run_spent, run_recorded_until = _recorded_spend(earlier)
        except _Unreadable as exc:  # counted from the journal (`NightRun.stopped_runs_spent`)
            unread.append((path.name, str(exc)))
            continue
        spent += run_spent
        until = max(until, run_recorded_until or until)
    return NightSoFar(spent, until, began, tuple(unread))


def _record(path: Path) -> dict[str, Any]:
    """The night's record in `path`, a JSON object as a run writes it, or _Unreadable."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _Unreadable(exc.strerror) from None
    except ValueError as exc:
        raise _Unreadable(f"not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise _Unreadable("not a run's record")
    return record


def _of_the_job(earlier: dict[str, Any], source: Path, workspace: str | None) -> bool:
    try:
        return _same_job(earlier, source, workspace)
    except (OSError, ValueError):  # an `input` that names no file (a NUL in it)
        raise _Unreadable(f"input: {earlier.get('input')!r} is no file's path") from None


def _recorded_spend(earlier: dict[str, Any]) -> tuple[int, float | None]:
    """What a night's record `earlier` says its run spent, with what runs stopped before it
    had and what it perhaps paid for answers it lost (in none of its spend, and free to the
    rerun that replays them: QA 70), and the time up to which it accounts for every request
    sent (None: a record of a version that did not say). Read whole or not at all: a field
    that is not what a run writes raises _Unreadable."""
    notes = earlier.get("notes") or {}
    if not isinstance(notes, dict):
        raise _Unreadable(f"notes: {notes!r} is no table of notes")
    spent = (
        _decisions(earlier, "decisions_spent")
        + _decisions(earlier, STOPPED_RUNS_SPENT)
        + _decisions(notes, PERHAPS_CHARGED)
    )
    recorded = earlier.get(SPEND_RECORDED_UNTIL)
    try:
        return spent, None if recorded is None else datetime.fromisoformat(recorded).timestamp()
    except (TypeError, ValueError):
        raise _Unreadable(f"{SPEND_RECORDED_UNTIL}: {recorded!r} is no time") from None


def _decisions(fields: dict[str, Any], name: str) -> int:
    """The number of decisions `fields` hold under `name` (0 when none)."""
    value = fields.get(name) or 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Unreadable(f"{name}: {value!r} is no number of decisions")
    return value


@dataclass(frozen=True)
class NightRun:
    """A night's run of a job: what is known of the night before it opens the job's journal,
    and what its budget is (None: no budget), set in `named`."""

    so_far: NightSoFar
    budget: int | None
    named: str

    def budget_named(self, stopped: int = 0) -> str:
        """Where the budget is set, and what the night's earlier runs spent of it."""
        spent = self.so_far.spent + stopped
        if not self.budget or not spent:
            return self.named
        return f"{self.named} ({self.budget:,} a night, {spent:,} spent by earlier runs)"

    def stopped_runs_spent(self, journal: Journal) -> int:
        """The decisions asked by the requests sent tonight and in none of the night's records,
        by the job's unfinished run (however often resumed) and by the night's runs that left
        no record: spent, as far as is known (a run killed with kill -9 says nothing of what it
        paid). Counted as spent, a request sent and never charged makes the night spend less,
        never more.

        Marks this run begun in the journal, before it sends anything: a night's run whose
        mark is newer than the night's last record wrote none, even if it closed its run in
        the journal first (killed before its manifest) or a changed input began another
        (QA 67). The earliest such run's mark is kept until a record covers it.

        With a record that could not be read, at least what the job sent tonight beyond what
        the records read hold: a later record's time hides its run's requests from the mark
        (QA 73)."""
        recorded = self.so_far.recorded_until
        first = self._first_night_run(journal)
        marked = journal.night_run_since()
        began = [marked] if marked is not None and marked > recorded else []
        journal.mark_night_run(began[0] if began else time.time())
        if journal.open_run() is not None:
            began.append(journal.open_run_since() or 0.0)
        stopped = journal.sent_since(max(recorded, min(began))) if began else 0
        if not self.so_far.unread:
            return stopped
        return max(stopped, journal.sent_since(first) - self.so_far.spent)

    def _first_night_run(self, journal: Journal) -> float:
        """When the night's first run of the job began, marked by it (before `mark_night_run`
        moves the mark of its own): the requests the job's journal shows sent before it, by
        `decisions score` run by hand on the job's file, are no night's spend (QA 74: 360 paid
        by hand after midnight were taken for an unreadable record's, and a night of 300 with
        99 spent had nothing left). A night begun by a version that did not mark it counts
        from the night's start."""
        night = self.so_far.began
        first = journal.night_first_run_since()
        if first is None or first < night:
            earlier = journal.night_run_since()
            began_unmarked = earlier is not None and earlier >= night
            first = night if began_unmarked else time.time()
            journal.mark_night_first_run(first)
        return first

    def unread_records_said(self, counted: int) -> str | None:
        """What the log says of the night's records that could not be read, and of how their
        runs' spend is counted (`counted`: `stopped_runs_spent`); None when all were read."""
        if not self.so_far.unread:
            return None
        unread = "; ".join(
            f"the night's record {name} cannot be read ({why})" for name, why in self.so_far.unread
        )
        return (
            f"{unread}; what the job sent tonight is counted from its journal instead: "
            f"{counted:,} decisions spent tonight beyond the records read"
        )


def night_record(stopped_runs_spent: int) -> dict[str, Any]:
    """A night's manifest's account of its job's spend: what runs stopped before their record
    spent, and the time up to which the night's records hold every request sent."""
    return {
        STOPPED_RUNS_SPENT: stopped_runs_spent,
        SPEND_RECORDED_UNTIL: datetime.now(UTC).isoformat(timespec="microseconds"),
    }


def _same_job(earlier: dict[str, Any], source: Path, workspace: str | None) -> bool:
    """Whether a night's record `earlier` is of the job scoring `source` for `workspace`
    (None: not known before the run, through a service)."""
    recorded = Path(str(earlier.get("input", "")))
    # (a manifest of a version before 2026-11-25 recorded the file a link led to)
    same_input = job_input(recorded) == job_input(source) or recorded == source.resolve()
    paid_by = earlier.get("workspace") or workspace
    return same_input and (workspace is None or paid_by == workspace)


def score_arguments(
    config: NightlyConfig, root: Path, day: date, *, spent_tonight: int = 0
) -> list[str]:
    """The `decisions score` arguments of one night's run, whose budget is what the night's
    earlier runs (`spent_tonight`) left of it."""
    source = _resolved(config.input, root)
    folder = _night_folder(config, root, day)
    args = [
        str(source),
        "--reasoning",
        config.reasoning,
        "--manifest",
        str(folder / "manifest.json"),
    ]
    for fmt in dict.fromkeys(config.formats):  # each format once
        args += ["-o", str(folder / f"{source.stem}-scored.{fmt}")]
    if config.budget is not None:
        args += ["--budget", str(max(config.budget - spent_tonight, 0))]
    if config.workspace:
        args += ["--workspace", config.workspace]
    if config.columns is not None:
        args += ["--config", str(_resolved(config.columns, root))]
    if config.journal is not None:
        args += ["--journal", str(_resolved(config.journal, root))]
    for option, value in (
        ("--sheet", None if config.sheet is None else str(config.sheet)),
        ("--encoding", config.encoding),
        ("--priority", config.priority),
    ):
        if value is not None:
            args += [option, value]
    return args


def make_room(config: NightlyConfig, root: Path, day: date, workspace: str | None) -> None:
    """Before a night's run writes its folder: refuse when the folder holds another job's
    night (another input, or another `workspace` when it is known: jobs sharing an output_dir
    would overwrite each other's manifest and outputs); copy an earlier run of this job that
    night to manifest-HHMMSS.json, so a rerun after a top-up does not erase the record of what
    the first run paid (the copy, not a move: a rerun that fails leaves manifest.json as it
    was)."""
    source = _resolved(config.input, root)
    manifest = _night_folder(config, root, day) / "manifest.json"
    if not manifest.exists():
        return
    try:
        earlier = _record(manifest)
        # a run that failed before it paid or wrote anything (a typo since fixed) holds no night
        failed_early = (
            "error" in earlier and not earlier.get("outputs") and not earlier.get("decisions_spent")
        )
        another_job = not failed_early and not _of_the_job(earlier, source, workspace)
    except _Unreadable:
        # Whose it is cannot be told: kept aside all the same, not lost under this run's, for
        # the night's count to name it and count what the job sent from its journal (QA 73).
        with contextlib.suppress(OSError):  # (a file that cannot be read cannot be copied)
            keep_aside(manifest, {})
        return
    if another_job:
        raise UsageError(
            f"{manifest.parent}: holds tonight's run of {earlier.get('input')} for workspace "
            f"{earlier.get('workspace')!r}, another job; give each nightly job its own output_dir"
        )
    keep_aside(manifest, earlier)


def keep_aside(manifest: Path, earlier: dict | None = None) -> None:
    """Copy an earlier run's `manifest` (its content: `earlier`, when read already) to
    manifest-HHMMSS.json, its start time (UTC), before a later run that night writes its own."""
    if earlier is None:
        try:
            earlier = _record(manifest)
        except _Unreadable:
            return
    started = str(earlier.get("started_at", ""))[11:19].replace(":", "") or "earlier"
    record = manifest.read_bytes()
    whole = manifest.with_name(f".{manifest.name}.{os.getpid()}.tmp")
    whole.write_bytes(record)
    try:
        for n in itertools.count(1):
            # Two runs started in the same second are two records (one copied over the other
            # lost what the first paid from the night's budget); the same record set aside
            # again (a run that failed before writing its own) is still one.
            aside = manifest.with_name(f"{manifest.stem}-{started}{f'-{n}' if n > 1 else ''}.json")
            try:
                os.link(whole, aside)  # whole, and never over another record
                return
            except FileExistsError:
                if aside.read_bytes() == record:
                    return
    finally:
        whole.unlink(missing_ok=True)


def records_a_run(manifest: Path) -> bool:
    """True if `manifest` holds the summary of a run that got as far as scoring, which a
    later failure that night must not replace (a failure record may be)."""
    try:
        return "error" not in _record(manifest)
    except _Unreadable:  # (JSON that is no record, `null` say, too: QA 74)
        return False
