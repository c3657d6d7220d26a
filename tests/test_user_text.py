"""What a user reads: the papers by name, no internal shorthand, no file that is not here, help as plain text."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from meanfield.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
#: every file a user reads: the README, the package's sources (docstrings, messages, comments) and the example configs
USER_FILES = sorted(
    [ROOT / "README.md"]
    + [p for folder in ("meanfield", "solvers", "figures") for p in (ROOT / folder).rglob("*.py")]
    + sorted((ROOT / "data").glob("*.toml"))
)
#: internal shorthand for the papers ("seed 000", "seed-002", "seed004_…", "Seed 004:")
SEED_NUMBER = re.compile(r"\bseeds?[ _-]?0{2}[024]|\bthe seeds?(?:'s?|\s+(?:states?|says|summary|summaries|paper))\b",
                         re.IGNORECASE)  # (and "the seed's", "the seed states": the papers' summaries)
#: a repository path a text may name (relative to the repository root)
REPO_PATH = re.compile(r"(?<![\w/.])((?:data|figures|meanfield|solvers|tests)/[\w./-]*\w)")
#: paths that name what a run writes, not a file of the repository
OUTPUTS = ("data/runs", "figures/gallery/quick", "figures/default_run.png", "figures/inspect", "data/minilm_x0.npy")
#: reST and LaTeX that a terminal shows raw
MARKUP = re.compile(r":math:|\.\. math::|``|:func:|:mod:|:class:|:data:|:meth:|\\frac|\\sqrt|\\mathrm")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", USER_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_user_text_names_a_paper_by_a_seed_number(path: Path) -> None:
    hits = [f"{n}: {line.strip()}" for n, line in enumerate(_text(path).splitlines(), 1) if SEED_NUMBER.search(line)]
    assert not hits, "cite the papers by authors and arXiv number:\n" + "\n".join(hits)


@pytest.mark.parametrize("path", USER_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_a_user_text_names_is_in_the_repository(path: Path) -> None:
    text = _text(path)
    missing = sorted({m for m in re.findall(r"(?<![\w/.-])([A-Z][A-Z_]+\.md)\b", text) if not (ROOT / m).exists()})
    for candidate in REPO_PATH.findall(text):
        if candidate.startswith(OUTPUTS) or "<" in candidate or "*" in candidate:
            continue
        if not (ROOT / candidate).exists() and not (ROOT / candidate.rstrip(".")).exists():
            missing.append(candidate)
    assert not missing, f"{path.relative_to(ROOT)} names files the repository does not contain: {sorted(set(missing))}"


#: control characters: a formula written through a non-raw string turns ``\frac`` into a form feed, ``\beta`` into a
#: backspace
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


#: in a file's own bytes also a tab and a carriage return: ``\tfrac`` and ``\rho`` through a non-raw string (a text read
#: with universal newlines turns a lone carriage return into a line break, and hides it)
CONTROL_IN_FILE = re.compile(r"[\x00-\x08\x09\x0b\x0c\x0d\x0e-\x1f\x7f]")


@pytest.mark.parametrize("path", USER_FILES + sorted((ROOT / "tests").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_text_holds_a_control_character(path: Path) -> None:
    hits = [f"{n}: {CONTROL_IN_FILE.sub(lambda m: repr(m.group()), line.strip())}"
            for n, line in enumerate(path.read_bytes().decode("utf-8").split("\n"), 1)
            if CONTROL_IN_FILE.search(line)]  # split at line feeds only: splitlines() cuts at \f and \r
    assert not hits, "control characters (a backslash lost to a non-raw string?):\n" + "\n".join(hits)


@pytest.mark.parametrize("path", [p for p in USER_FILES if p.suffix == ".py"], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_string_of_the_sources_holds_a_control_character(path: Path) -> None:
    """The same once Python has read the escapes: ``\\beta`` in a docstring that is not raw is a backspace and "eta"."""
    hits = [f"{node.lineno}: {CONTROL.sub(lambda m: repr(m.group()), node.value)[:120]!r}"
            for node in ast.walk(ast.parse(_text(path))) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and CONTROL.search(node.value)]
    assert not hits, "strings with control characters (make them raw: r\"\"\"...\"\"\"):\n" + "\n".join(hits)
    # a docstring holds no tab or carriage return either (``\tfrac``, ``\rho``); other strings may ("\t" in a table)
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = [node for node in ast.walk(ast.parse(_text(path))) if isinstance(node, documented)]
    bad = [f"{node.body[0].lineno}: {ast.get_docstring(node, clean=False)[:120]!r}" for node in docstrings
           if ast.get_docstring(node, clean=False) and re.search(r"[\t\r]", ast.get_docstring(node, clean=False))]
    assert not bad, "docstrings with a tab or a carriage return (make them raw: r\"\"\"...\"\"\"):\n" + "\n".join(bad)


@pytest.mark.parametrize("path", [p for p in USER_FILES if p.suffix == ".py"], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_string_of_the_sources_holds_an_invalid_escape(path: Path) -> None:
    """``\\|B\\|`` in a docstring that is not raw: Python warns of the escape, and will refuse it."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            compile(_text(path), str(path), "exec")
        except (SyntaxError, SyntaxWarning, DeprecationWarning) as exc:
            pytest.fail(f"{path.relative_to(ROOT)}: {exc} (make the string raw)")


def test_the_checks_above_can_fail(tmp_path: Path) -> None:
    assert SEED_NUMBER.search("see seed 002, Thm 1") and SEED_NUMBER.search("Seed-004 figures") and SEED_NUMBER.search("seed004_model")
    assert SEED_NUMBER.search("where the seed's statement invites") and SEED_NUMBER.search("The seed states super-additivity")
    assert not SEED_NUMBER.search("init.seed = 0 and seeds 0, 1, 2")
    assert not SEED_NUMBER.search("the first seed's run; every seed's path; the seed of the increments; the seeds' spread")
    assert REPO_PATH.findall("run data/nothing.toml and figures/x.py.") == ["data/nothing.toml", "figures/x.py"]
    assert MARKUP.search("the :math:`\\beta` of ``x``")
    assert CONTROL.search("E = \frac1{2\beta}") and not CONTROL.search(r"E = \frac1{2\beta}\tab")


def _helps() -> dict[str, str]:
    """``--help`` of the program, of every command and of every ``theory`` sub-command."""
    parser = build_parser()
    out = {"meanfield": parser.format_help()}
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse keeps them there
    for name, sub in commands.items():
        out[name] = sub.format_help()
        for action in sub._subparsers._group_actions if sub._subparsers else ():  # noqa: SLF001
            for inner, parser_of in action.choices.items():
                out[f"{name} {inner}"] = parser_of.format_help()
    return out


def test_help_reads_as_plain_text_and_names_the_papers() -> None:
    helps = _helps()
    assert set(COMMANDS) <= set(helps)
    assert {"theory beta-star", "theory rates", "theory clustering-time"} <= set(helps)
    for name, text in helps.items():
        assert not MARKUP.search(text), f"meanfield {name} --help shows markup: {MARKUP.search(text).group(0)!r}"
        assert not SEED_NUMBER.search(text), f"meanfield {name} --help names a seed number"
    assert "arXiv 2605.04279" in helps["meanfield"] and "arXiv 2605.10931" in helps["concentration"]


def test_commands_are_listed_in_order_and_the_version_is_printed() -> None:
    listing = build_parser().format_help()
    positions = [listing.index(f"    {name}") for name in COMMANDS]
    assert positions == sorted(positions)
    from meanfield import __version__

    done = subprocess.run([sys.executable, "-m", "meanfield", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"meanfield {__version__}"
