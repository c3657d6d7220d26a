"""``meanfield run``: the built-in default experiment.

A few hundred tokens on S², one identity softmax head, β = 4 (the clustering
picture of Geshkovski, Letrouit, Polyanskiy and Rigollet), integrated with RK4 to
t = 15.  Writes the trajectory to ``data/runs/default.h5`` and a picture to
``figures/default_run.png``.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from meanfield.cli.options import distinct_outputs, load_config_noted, picture_path
from meanfield.config import load_config
from meanfield.errors import ConfigError

__all__ = ["DEFAULT_CONFIG", "add_parser", "main"]

#: where the trajectory goes (the file this command replaces freely: its own)
DEFAULT_OUT = "data/runs/default.h5"
#: the built-in default experiment (also in data/default.toml, which resolves to the same config: a run of either
#: file resumes the other's)
DEFAULT_CONFIG = {
    "model": {"d": 3, "beta": 4.0, "attention": "softmax", "heads": [{"Q": "identity", "K": "identity", "V": "identity"}]},
    "init": {"kind": "uniform", "n": 256, "seed": 0},
    "solver": {"kind": "particle", "method": "rk4", "dt": 0.02, "t_final": 15.0, "save_every": 0.25},
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="run the built-in default experiment",
        description="Run the built-in default experiment: 256 tokens on S^2, one identity softmax head, beta = 4, "
        "RK4 to t = 15 (the clustering picture of Geshkovski, Letrouit, Polyanskiy and Rigollet). It writes the "
        "trajectory and a picture, and replaces its own previous output.",
    )
    p.add_argument("--out", default=DEFAULT_OUT, metavar="OUT.h5",
                   help=f"HDF5 output (default {DEFAULT_OUT}); an existing file is replaced only if it is this command's "
                        "own earlier output (the default path, or a run of the same experiment)")
    p.add_argument("--plot", default="figures/default_run.png", metavar="F.png", help="picture (default figures/default_run.png); a .gif, or a video such as .mp4 where ffmpeg is found, "
                        "makes an animation")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last committed frame "
                                                          "(with the same --set options)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    from meanfield.cli.simulate import BEFORE_THE_RUN

    p.set_defaults(func=main, interrupted=BEFORE_THE_RUN)  # (it had said "saved frames are kept" with no file written)


def main(args: argparse.Namespace) -> int:
    from meanfield.io.output import check_output
    from meanfield.io.runfile import RunReader
    from meanfield.solvers.run import simulate_config

    picture_path(args.plot, "--plot", animation=True)
    distinct_outputs(out=args.out, plot=args.plot)
    cfg = load_config_noted(DEFAULT_CONFIG, args.overrides)
    if args.resume:  # (an interrupted run had been told "--resume continues", which run did not take)
        check_output(args.out, overwrite=False, resume=True, key="--out")
    elif Path(args.out).exists():  # its own earlier output may be replaced; any other file may not
        stored = RunReader(args.out, key="--out").config
        ours = [json.dumps(c, sort_keys=True) for c in (cfg, load_config(DEFAULT_CONFIG))]
        if Path(args.out).resolve() != Path(DEFAULT_OUT).resolve() and json.dumps(stored, sort_keys=True) not in ours:
            raise ConfigError("--out", f"{args.out} holds another run (β = {stored['model'].get('beta')}, "
                                       f"{stored['solver'].get('kind')} solver); meanfield run replaces only its own earlier "
                                       "output: choose another --out, or replace it with meanfield simulate … --overwrite")
    if not args.resume:
        check_output(args.out, overwrite=True, key="--out")
    started = time.perf_counter()
    from meanfield.cli.simulate import interrupt_left
    from meanfield.io.runfile import file_stamp

    before = file_stamp(args.out)
    try:
        run = simulate_config(cfg, args.out, resume=args.resume, quiet=args.quiet)
    except KeyboardInterrupt:  # (a stop between steps is a RunInterrupted, with its own message)
        args.interrupted = interrupt_left(args.out, cfg, before=before, resume=args.resume)
        raise
    if run.info.get("already_complete"):
        from meanfield.cli.simulate import nothing_to_resume

        print(nothing_to_resume(run, args.out))
    else:
        print(run.summary())
    from meanfield.cli.simulate import draw

    draw(run, args.plot)  # (also for a complete run: one interrupted while its picture was drawn had never got it)
    print(f"trajectory: {Path(args.out)}")
    print(f"picture:    {Path(args.plot)}")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 0
