"""``meanfield reproduce --list`` / ``meanfield reproduce ID|all [ID …] [--quick] [--out DIR]``.

Makes the papers' figures: each figure is one script in ``figures/`` (see
``figures/__init__.py`` for how to add one) that writes ``DIR/ID.png`` and the
numbers behind it, ``DIR/ID.csv``, and checks the paper's claim on that CSV.
``--quick`` makes the small versions the tests run (under a minute each).

Default ``DIR``: ``figures/gallery`` (``figures/gallery/quick`` with ``--quick``).
Exit status: 0 when every figure was made and every claim holds, 1 when a
figure failed or a claim did not hold, 2 for an unknown figure id or an output
that cannot be written (checked before any figure is made).
"""
from __future__ import annotations

import argparse
import sys
import traceback

from meanfield.errors import ConfigError

__all__ = ["add_parser", "main"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "reproduce",
        help="make the papers' figures (a PNG and a CSV each)",
        description="Make the papers' figures: each is one script of meanfield.figures that writes DIR/ID.png and "
        "the numbers behind it, DIR/ID.csv, and checks the paper's claim on that CSV. --quick makes the small "
        "versions the tests run (under a minute each). Exit status 0 when every figure was made and every claim "
        "holds, 1 when a figure failed or a claim did not hold (or it was interrupted), 2 for an unknown figure id "
        "or an output DIR/ID.png or DIR/ID.csv that cannot be written (checked before any figure is made).",
    )
    p.add_argument("ids", nargs="*", metavar="ID", help="figure ids, or 'all' (see --list)")
    p.add_argument("--list", action="store_true", help="list the figures (or the IDs named): id, paper, theorem, what it shows")
    p.add_argument("--quick", action="store_true", help="the small versions (under a minute each)")
    p.add_argument("--out", metavar="DIR", help="output folder (default figures/gallery, or figures/gallery/quick)")
    p.set_defaults(func=main, interrupted="interrupted; the figures finished before are in the output folder")


def main(args: argparse.Namespace) -> int:
    from meanfield import figures

    entries = figures.registry()
    for figure_id in args.ids:  # before 'all' is expanded (it had hidden a misspelt id beside it), also with --list
        if figure_id != "all" and figure_id not in entries:
            raise ConfigError("ID", f"unknown figure {figure_id!r}; meanfield reproduce --list shows the {len(entries)} figures")
    ids = list(entries) if "all" in args.ids or (args.list and not args.ids) else list(dict.fromkeys(args.ids))
    if args.list:
        width = max((len(i) for i in ids), default=2)
        for figure_id in ids:
            entry = entries[figure_id]
            print(f"{entry.id:<{width}}  {entry.theorem:<8} of {entry.citation}: {entry.description}")
        return 0
    if not args.ids:
        raise ConfigError("ID", "name a figure id or 'all' (meanfield reproduce --list shows them)")
    out = figures.output_folder(args.out, quick=args.quick)
    figures.check_outputs(out, ids)  # (before any figure is made)
    status = 0
    for figure_id in ids:
        try:
            run = figures.run_figure(figure_id, out, quick=args.quick)
        except Exception as exc:  # one broken figure does not stop the others
            traceback.print_exc(file=sys.stderr)
            print(f"{figure_id}: FAILED ({type(exc).__name__}: {exc})")
            status = 1
            continue
        print(f"{figure_id}: {run.png}, {run.csv} ({run.seconds:.1f} s)")
        figures.print_checks(run.checks)
        if not run.ok:
            status = 1
    sys.stdout.flush()
    return status
