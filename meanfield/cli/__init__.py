"""The ``meanfield`` command line: it only parses and dispatches.

Each sub-command lives in its own module of this package and exposes
``add_parser(subparsers)``, which registers the parser and sets
``func(args) -> int`` as its default.  Exit statuses: 0 success, 1 failed
run, 2 bad input (the message names the option or config key).
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from meanfield import __version__
from meanfield.allocator import keep_freed_memory
from meanfield.errors import ConfigError, MeanfieldWarning, RunFailed, RunInterrupted

__all__ = ["main", "build_parser", "COMMANDS"]

#: the sub-commands, in the order ``meanfield --help`` lists them: running, looking at a run,
#: studies, the papers, real checkpoints, and the tools around them
COMMANDS: tuple[str, ...] = (
    "run",
    "simulate",
    "info",
    "diagnose",
    "landscape",
    "concentration",
    "convergence",
    "sweep",
    "phase",
    "reproduce",
    "theory",
    "inspect",
    "forward",
    "bench",
    "examples",
)

DESCRIPTION = (
    "Mean-field dynamics of transformers on the sphere: tokens are points of S^(d-1) and self-attention "
    "moves them by the continuity equation d/dt mu + div(mu X[mu]) = 0. Solve it with particles, on a "
    "spherical grid or by a JKO scheme, measure Wasserstein convergence, and reproduce the figures of "
    "Pendharkar (arXiv 2605.04279), Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931) and Massucco, "
    "Del Grande, Carioni, Brune and Schönlieb (arXiv 2605.18870)."
)
EPILOG = "Exit status: 0 success, 1 a failed run, 2 bad input. 'meanfield COMMAND --help' describes each command."


class _Parser(argparse.ArgumentParser):
    """An argument parser that reads every token starting with ``-`` and a digit as a value.

    argparse takes only plain negative numbers (``-4``, ``-.5``) as values; ``--sweep-beta -4,16`` or
    ``--value -1e-3`` stopped with "expected one argument" instead of the option's own message naming the
    value. No option of this command starts with a digit, so nothing else is read differently. (The
    pattern is argparse's documented behaviour kept in a private attribute; the sub-commands' parsers
    are of this class too.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?\d")


def build_parser() -> argparse.ArgumentParser:
    """The ``meanfield`` parser with every sub-command."""
    parser = _Parser(prog="meanfield", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"meanfield {__version__}")
    # before the command too (``meanfield --threads 1 run`` had been refused as "invalid choice: '1'"); below it the
    # option defaults to nothing, so that a value given before the command stands
    parser.add_argument("--threads", metavar="N", default=None,
                        help="threads of the kernels, before or after the command (default: MEANFIELD_NUM_THREADS, else all cores)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"meanfield.cli.{name}").add_parser(sub)
    for command in sub.choices.values():
        _add_threads(command, default=argparse.SUPPRESS)
    return parser


def _add_threads(parser: argparse.ArgumentParser, *, default: Any) -> None:
    """``--threads N`` on a command and on its own sub-commands (``theory beta-star --threads 1`` had been refused); below
    the command it defaults to nothing, so that a value given before the sub-command stands."""
    parser.add_argument("--threads", metavar="N", default=default,
                        help="threads of the kernels (default: MEANFIELD_NUM_THREADS, else all cores)")
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its sub-parsers there
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for child in action.choices.values():
                _add_threads(child, default=argparse.SUPPRESS)


@contextmanager
def _command_threads(value: str | None) -> Iterator[None]:
    """``--threads N``: the kernels' threads for this command (numba and the BLAS row-block pool), given back after it
    (``main`` called from Python had left ``MEANFIELD_NUM_THREADS`` and numba's threads set for the rest of the process);
    without it, a ``MEANFIELD_NUM_THREADS`` that is not a positive integer is bad input (the kernels would ignore it)."""
    from meanfield.cli.options import parse_int

    if value is None:
        setting = os.environ.get("MEANFIELD_NUM_THREADS")
        if setting:
            parse_int(setting, "MEANFIELD_NUM_THREADS", minimum=1)
        yield
        return
    import numba

    from meanfield.kernels.jit import set_num_threads

    count = parse_int(value, "--threads", minimum=1)
    setting, before = os.environ.get("MEANFIELD_NUM_THREADS"), numba.get_num_threads()
    set_num_threads(count)
    try:
        yield
    finally:
        if setting is None:
            os.environ.pop("MEANFIELD_NUM_THREADS", None)
        else:
            os.environ["MEANFIELD_NUM_THREADS"] = setting
        numba.set_num_threads(before)


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (``kill``, a batch system's time limit) ends a command as Ctrl-C does: exit 1 with a message, finished
    work kept (``meanfield phase`` had died of the signal with status 143 and nothing printed). Runs take their own
    handler (:func:`meanfield.solvers.signals.interruptible`), which stops them between steps."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:  # noqa: ARG001
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _notes_on_stderr() -> Iterator[None]:
    """Print the choices made for the user (:class:`~meanfield.config.ConfigNote`) as ``note:`` lines on stderr."""
    from meanfield.config import ConfigNote

    original = warnings.showwarning

    def show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if issubclass(category, ConfigNote):
            print(f"note: {message}", file=sys.stderr)
        elif issubclass(category, MeanfieldWarning):  # (it had been printed with the module's file and line)
            print(f"warning: {message}", file=sys.stderr)
        else:
            original(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", ConfigNote)
        warnings.showwarning = show
        yield


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``meanfield`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    keep_freed_memory()  # this process's arrays reuse freed memory instead of faulting in fresh pages every step
    try:
        with _command_threads(getattr(args, "threads", None)), _notes_on_stderr(), _sigterm_interrupts():
            status = args.func(args)
    except ConfigError as exc:
        print(f"meanfield {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:
        print(f"meanfield {args.command}: run failed: {exc}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"meanfield {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and closed early
        sys.stderr.close()
        return 0
    except RunInterrupted as exc:
        print(f"meanfield {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # each command says what an interrupt left (it had said "saved frames are kept" for commands that save none)
        message = getattr(args, "interrupted", "interrupted; nothing was written")
        print(f"meanfield {args.command}: {message}", file=sys.stderr)
        return int(getattr(args, "interrupted_status", 1))
    return int(status or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
