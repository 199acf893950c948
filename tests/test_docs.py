"""The README tells the truth about the command line: every command and option it shows exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.cli import build_parser

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _subcommands(parser) -> dict[str, object]:
    actions = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return dict(actions[0].choices) if actions else {}


def _options(parser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def test_every_command_in_the_readme_exists():
    commands = _subcommands(build_parser())
    blocks = "\n".join(re.findall(r"```[a-z]*\n(.*?)```", README, flags=re.DOTALL))
    shown = set(re.findall(r"(?:^|\$\(|\s)(?:\.venv/bin/)?decisions ([a-z]+)", blocks, re.M))
    shown |= set(re.findall(r"`decisions ([a-z]+)", README))
    assert shown, "the README shows no command"
    assert shown <= set(commands), shown - set(commands)


def test_every_score_option_in_the_readme_exists():
    score = _subcommands(build_parser())["score"]
    table = README.split("## Scoring a portfolio")[1].split("###")[0]
    shown = set(re.findall(r"`(--[a-z-]+)", table))
    assert "--budget" in shown
    assert shown <= _options(score), shown - _options(score)


@pytest.mark.parametrize("command", ["decide", "score", "nightly", "serve", "workspace", "key"])
def test_commands_have_help(command, capsys):
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([command, "--help"])
    assert done.value.code == 0
    assert "usage: decisions" in capsys.readouterr().out


def _every_command(parser, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object]]:
    found = [(path, parser)]
    for name, sub in _subcommands(parser).items():
        found += _every_command(sub, (*path, name))
    return found


def test_every_option_of_every_command_says_what_it_is():
    """QA 66: `workspace create --balance`, `account create --workspace` and `--type` had no
    help text, and `decide` and `serve` no description in their own --help."""
    silent = [
        f"decisions {' '.join(path)} {action.option_strings[0]}"
        for path, parser in _every_command(build_parser())
        for action in parser._actions
        if action.option_strings and not action.help and action.dest != "help"
    ]
    assert not silent, silent
    undescribed = [
        path[0]
        for path, parser in _every_command(build_parser())
        if len(path) == 1 and not _subcommands(parser) and not (parser.description or "").strip()
    ]
    assert not undescribed, undescribed  # (an action's help line is in its command's --help)
