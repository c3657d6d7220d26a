"""``meanfield info OUT.h5``: what a run is and what happened in it; ``--plot`` draws it, ``--follow`` watches it."""
from __future__ import annotations

import argparse

from meanfield.cli.options import picture_path

__all__ = ["add_parser", "main"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "info",
        help="summarise a run file (also one still being written)",
        description="Summarise a run file: its model, solver, frames, status, final clusters and the main "
        "diagnostics. --plot draws it (a .gif path makes an animation).",
    )
    p.add_argument("run", metavar="OUT.h5", help="HDF5 run file")
    p.add_argument("--plot", metavar="F.png", help="also draw the run (a .gif path makes an animation)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from meanfield.cli.simulate import draw
    from meanfield.run import load

    picture_path(args.plot, "--plot", animation=True)
    run = load(args.run)
    print(run.summary())
    if args.plot:
        draw(run, args.plot)
        print(f"wrote {args.plot}")
    return 0
