"""``meanfield phase CONFIG.toml -o DIR [--set KEY=VALUE …] [--scheduler ADDR] [--workers N] [--resume] [--quiet]``.

The phase diagram of Geshkovski, Letrouit, Polyanskiy and Rigollet (A mathematical
perspective on Transformers, arXiv 2312.10794) over the grid ``[phase] betas × times``:
the probability that the tokens form one cluster, the mean number of clusters,
the mean rank of the Gram matrix, and the probability that two tokens share a
cluster, each over ``phase.samples`` random initialisations
(:mod:`meanfield.solvers.phase`).  The batches run on Dask as the cases of
``meanfield sweep`` do.  Writes ``DIR/phase.csv``, ``DIR/phase.png``,
``DIR/phase.json`` and ``DIR/batches/``.

Exit status: 0 when the diagram is written, 1 for a failed or interrupted run
(``--resume`` continues it), 2 for bad input (before any file is touched).
"""
from __future__ import annotations

import argparse
import os
import sys

from meanfield.cli.options import load_config_noted
from meanfield.io.output import folder_path

__all__ = ["add_parser", "main"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "phase",
        help="phase diagram over (beta, t) from random initialisations; writes DIR/phase.csv",
        description="Phase diagram of the self-attention dynamics over the grid of [phase] betas and times "
        "(Geshkovski, Letrouit, Polyanskiy and Rigollet, arXiv 2312.10794): the probability that the tokens form "
        "one cluster, the mean number of clusters, the mean rank of the Gram matrix and the probability that two "
        "tokens lie within phase.cluster_angle, over phase.samples random initialisations per beta. Batches of phase.batch "
        "systems run as Dask tasks (a local cluster, or --scheduler). Writes DIR/phase.csv, DIR/phase.png, "
        "DIR/phase.json and DIR/batches/. Exit status 0 on success, 1 for a failed or interrupted run (--resume "
        "continues it), 2 for bad input.",
    )
    p.add_argument("config", metavar="CONFIG.toml", help="the configuration; its [phase] section sets the diagram")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="output folder (phase.csv, phase.png, phase.json, batches/)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set phase.samples=512 (repeatable)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="address of a running Dask scheduler, e.g. tcp://node01:8786")
    p.add_argument("--workers", type=int, metavar="N", help="local worker processes (default: one per core; 0: run in this process)")
    p.add_argument("--resume", action="store_true", help="keep the batches already in DIR and run the others")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main, interrupted="interrupted; finished batches are kept in DIR/batches, --resume continues")


def main(args: argparse.Namespace) -> int:
    from meanfield.solvers.phase import check_phase_config, phase_diagram
    from meanfield.solvers.sweep import check_scheduler

    if args.scheduler is not None:
        check_scheduler(args.scheduler)
    folder_path(args.out, "--out")
    args.interrupted = f"interrupted; finished batches are kept in {os.path.join(args.out, 'batches')}, --resume continues"
    cfg = load_config_noted(args.config, args.overrides)  # ConfigError (exit 2) before any work
    check_phase_config(cfg)
    diagram = phase_diagram(cfg, out=args.out, scheduler=args.scheduler, workers=args.workers, resume=args.resume,
                            quiet=args.quiet)
    info = diagram.info
    print(f"phase: {len(diagram.betas)} β × {len(diagram.times)} times, {diagram.samples} samples per β "
          f"({info['systems']} systems in {info['batches']} batch{'' if info['batches'] == 1 else 'es'}, {info['resumed_batches']} resumed; {info['steps']} steps each, "
          f"{info['wall_time']:.2f} s); wrote {args.out}/phase.csv and {args.out}/phase.png")
    last = len(diagram.times) - 1
    for k, beta in enumerate(diagram.betas):
        one = _probability(diagram.one_cluster[k, last], diagram.one_cluster_se[k, last], diagram.samples)
        print(f"  β = {beta:g}, t = {diagram.times[last]:g}: P(one cluster) = {one}, "
              f"clusters = {diagram.clusters[k, last]:.2f} ± {diagram.clusters_se[k, last]:.2f}, "
              f"Gram rank = {diagram.rank[k, last]:.2f} ± {diagram.rank_se[k, last]:.2f}")
    sys.stdout.flush()
    return 0


def _probability(p: float, se: float, samples: int) -> str:
    """``p ± se``; where every sample agreed (p = 0 or 1, where the standard error is 0) the 95 % bound of the rule of
    three instead (``0.000 ± 0.000`` of six samples had read as a certainty)."""
    if p == 0.0:
        return f"0.000 (none of {samples}; below {min(1.0, 3.0 / samples):.3f} at 95 %)"
    if p == 1.0:
        return f"1.000 (all {samples}; above {max(0.0, 1.0 - 3.0 / samples):.3f} at 95 %)"
    return f"{p:.3f} ± {se:.3f}"
