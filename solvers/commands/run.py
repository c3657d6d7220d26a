"""``meanfield run``: the built-in default experiment.

A few hundred tokens on S², one identity softmax head, β = 4 (the clustering
picture of Geshkovski et al.), integrated with RK4 to t = 15.  Writes the
trajectory to ``data/runs/default.h5`` and a picture to ``figures/default_run.png``.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from meanfield.config import load_config

#: the built-in default experiment (also in data/default.toml)
DEFAULT_CONFIG = {
    "model": {"d": 3, "beta": 4.0, "attention": "softmax"},
    "init": {"kind": "uniform", "n": 256, "seed": 0},
    "solver": {"kind": "particle", "method": "rk4", "dt": 0.02, "t_final": 15.0, "save_every": 0.25},
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run the built-in default experiment", description=__doc__)
    p.add_argument("--out", default="data/runs/default.h5", help="HDF5 output (default data/runs/default.h5)")
    p.add_argument("--plot", default="figures/default_run.png", help="picture (default figures/default_run.png)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from meanfield.cli.info import plot_file, summarise
    from solvers.run import simulate_config

    cfg = load_config(DEFAULT_CONFIG, args.overrides)
    started = time.perf_counter()
    simulate_config(cfg, args.out, quiet=args.quiet)
    print(summarise(args.out))
    png = plot_file(args.out, args.plot)
    print(f"trajectory: {Path(args.out)}")
    print(f"picture:    {png}")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 0
