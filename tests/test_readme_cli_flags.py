"""Every long option of every ``meanfield`` command, and of a command's own sub-commands, is documented in README.md.

An interface review had found options that ``meanfield COMMAND --help`` shows and the README never names for that
command (``info --interval``, ``inspect --sentence``, every option of ``theory rates``, ``examples --overwrite``, ...).
The options are read from the parser the command line itself builds (:func:`meanfield.cli.build_parser`), not from
``--help`` text. An option counts as documented for a command when it appears, as ``--option`` text, in a README
block that names the command (``meanfield theory rates``): a table row, a command line of a code block, a list item
or a paragraph. An option that every command takes (``--threads``) needs to appear only once.
"""
from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from meanfield.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
#: options argparse gives every parser, which the README need not list
IMPLICIT_OPTIONS = frozenset({"--help"})
#: a line that starts a block of its own: a table row, a list item, a command line (in a code block or a console)
BLOCK_START = re.compile(r"^\s*(?:\||[-*] |\d+\. |\$ |meanfield )")


def _sub_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The sub-commands of ``parser`` by name (empty when it has none)."""
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its sub-parsers there
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return dict(action.choices)
    return {}


def _long_options(parser: argparse.ArgumentParser) -> set[str]:
    """The long options of ``parser`` itself (not of its sub-commands)."""
    return {option for action in parser._actions for option in action.option_strings  # noqa: SLF001
            if option.startswith("--") and option not in IMPLICIT_OPTIONS}


def _commands(parser: argparse.ArgumentParser, *, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``(command path, parser)`` for ``parser`` and every sub-command below it, depth first."""
    yield path, parser
    for name, child in _sub_parsers(parser).items():
        yield from _commands(child, path=f"{path} {name}")


def _blocks(text: str) -> list[str]:
    """The README cut into blocks: paragraphs, and within them each table row, list item and command line."""
    blocks: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("```") or BLOCK_START.match(line):
            if current:
                blocks.append("\n".join(current))
            current = []
        if line.strip() and not line.lstrip().startswith("```"):
            current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def _mentions(text: str, words: str) -> bool:
    """Whether ``words`` (an option, or a command path) occurs in ``text`` as a whole word."""
    return re.search(rf"(?<![\w-]){re.escape(words)}(?![\w-])", text) is not None


def _undocumented() -> tuple[int, list[str]]:
    """How many (command, option) pairs there are, and ``"meanfield COMMAND --option"`` for each the README lacks."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = _blocks(readme)
    commands = list(_commands(build_parser(), path="meanfield"))
    top_level = [parser for path, parser in commands if path.count(" ") == 1]
    everywhere = set.intersection(*(_long_options(parser) for parser in top_level))
    pairs = [(path, option) for path, parser in commands for option in sorted(_long_options(parser))]
    missing = []
    for path, option in pairs:
        if option in everywhere:
            documented = _mentions(readme, option)
        else:
            documented = any(_mentions(block, option) and _mentions(block, path) for block in blocks)
        if not documented:
            missing.append(f"{path} {option}")
    return len(pairs), missing


def test_the_walk_reaches_every_command_and_sub_command() -> None:
    paths = {path for path, _ in _commands(build_parser(), path="meanfield")}
    assert {"meanfield info", "meanfield theory rates", "meanfield theory clustering-time",
            "meanfield landscape search", "meanfield examples"} <= paths


def test_every_long_option_of_every_command_is_in_the_readme() -> None:
    count, missing = _undocumented()
    assert count > 100, f"the walk found only {count} options: has the parser's layout changed?"
    assert not missing, (f"{len(missing)} options of the command line appear in no README block that names their "
                         "command (a table row, a command line, a list item or a paragraph):\n" + "\n".join(missing))
