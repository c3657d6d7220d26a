"""``meanfield simulate CONFIG.toml -o OUT.h5 [--set key=value …] [--resume] [--quiet] [--plot F.png]``."""
from __future__ import annotations

import argparse
import sys

from meanfield.config import load_config


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="solve one configuration (particle, grid, JKO or zero-temperature)",
        description="Solve one configuration and append its frames to an HDF5 file as they are saved.",
    )
    p.add_argument("config", help="TOML config")
    p.add_argument("-o", "--out", required=True, help="HDF5 output file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a config key, e.g. model.beta=9")
    p.add_argument("--resume", action="store_true", help="continue the run in OUT from its last saved frame")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--plot", metavar="PNG", help="also draw the run")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from solvers.run import simulate_config

    cfg = load_config(args.config, args.overrides)
    result = simulate_config(cfg, args.out, resume=args.resume, quiet=args.quiet)
    print(f"wrote {args.out} ({len(result.t)} frames, {result.info['steps']} steps, {result.info['wall_time']:.2f} s, stop: {result.info['stop_reason']})")
    if args.plot:
        from meanfield.cli.info import plot_file

        print(f"wrote {plot_file(args.out, args.plot)}")
    sys.stdout.flush()
    return 0
