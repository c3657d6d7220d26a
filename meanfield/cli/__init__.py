"""The ``meanfield`` command line: it only parses and dispatches.

Each sub-command lives in its own module of this package and exposes
``add_parser(subparsers)``, which registers the parser and sets
``func(args) -> int`` as its default.  Exit statuses: 0 success, 1 failed
run, 2 bad input (the message names the option or config key).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any

from meanfield.errors import ConfigError, RunFailed

__all__ = ["main", "COMMANDS"]

#: sub-commands that need only the model, in the order ``meanfield --help`` lists them
COMMANDS: tuple[str, ...] = ("info", "diagnose", "theory", "inspect")
#: entry-point group through which other packages (our ``solvers``) add sub-commands,
#: so that the model package never imports a solver
ENTRY_POINT_GROUP = "meanfield.commands"


def _command_modules() -> list[Any]:
    modules = []
    for name in COMMANDS:
        try:
            modules.append(importlib.import_module(f"meanfield.cli.{name}"))
        except ModuleNotFoundError as exc:  # a command not built in this installation
            if exc.name != f"meanfield.cli.{name}":
                raise
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        modules.append(importlib.import_module(entry.value))
    return modules


def build_parser() -> argparse.ArgumentParser:
    """The ``meanfield`` parser with every registered sub-command."""
    parser = argparse.ArgumentParser(prog="meanfield", description="Mean-field transformer dynamics on the sphere.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules():
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``meanfield`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
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
    except KeyboardInterrupt:
        print(f"meanfield {args.command}: interrupted; saved frames are kept", file=sys.stderr)
        return 1
    return int(status or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
