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

from meanfield import __version__
from meanfield.errors import ConfigError, RunFailed

__all__ = ["main", "build_parser", "COMMANDS"]

#: the sub-commands, in the order ``meanfield --help`` lists them: running, looking at a run,
#: studies, the papers, real checkpoints, and the tools around them
COMMANDS: tuple[str, ...] = (
    "run",
    "simulate",
    "info",
    "diagnose",
    "concentration",
    "convergence",
    "sweep",
    "reproduce",
    "theory",
    "inspect",
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


def build_parser() -> argparse.ArgumentParser:
    """The ``meanfield`` parser with every sub-command."""
    parser = argparse.ArgumentParser(prog="meanfield", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"meanfield {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"meanfield.cli.{name}").add_parser(sub)
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
        message = getattr(args, "interrupted", "interrupted; saved frames are kept")
        print(f"meanfield {args.command}: {message}", file=sys.stderr)
        return 1
    return int(status or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
