"""``meanfield diagnose OUT.h5``: the diagnostics of Pendharkar (arXiv 2605.04279) along a particle run.

Prints a table (first, last, min and max of every series) and the verdicts:
whether the total energy was monotone in the flow's direction (Thm 11), whether
radial dominance (Condition 8) held per token and in aggregate (the sign of
every dE_h/dt), and the largest residuals of the identities of Thms 11 and 27.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.cli.options import picture_path, table_path
from meanfield.config import ConfigNote
from meanfield.errors import ConfigError

__all__ = ["add_parser", "main", "write_csv"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``meanfield diagnose``."""
    p = subparsers.add_parser(
        "diagnose",
        help="energies, radial shadows, dominance, entropy and cluster statistics of a particle run",
        description="The diagnostics of Pendharkar, Gradient Flow Structure and Quantitative Dynamics of Multi-Head "
        "Self-Attention (arXiv 2605.04279) along a particle run: the total and per-head energies, the split of "
        "every dE_h/dt into self power, cross terms and radial shadows, radial dominance (Condition 8) per token "
        "and in aggregate, the attention entropy against log n (Thm 27), and the cluster statistics.",
    )
    p.add_argument("run", metavar="OUT.h5", help="a particle run file")
    p.add_argument("--csv", metavar="F", help="write every series, one row per frame")
    p.add_argument("--plot", metavar="F.png", help="draw the diagnostics")
    p.add_argument("--tol", default="1e-3", metavar="TOL", help="cluster tolerance: <x_i,x_j> >= 1 - TOL links tokens (default 1e-3)")
    p.add_argument("--stride", default="1", metavar="K", help="use every K-th frame, and the last (default 1)")
    p.add_argument("--fd-points", default="5", metavar="P", help="odd stencil size of the entropy finite difference (default 5)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def write_csv(series: dict[str, np.ndarray], path: str | Path) -> Path:
    """One header row of series names, then one row per frame (``%.17g``; ``nan`` where undefined)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = list(series)
    columns = [np.asarray(series[k], dtype=float) for k in keys]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(keys)
        for row in zip(*columns):
            writer.writerow([f"{v:.17g}" for v in row])
    return path


def _positive_int(text: str, key: str, *, odd_at_least: int | None = None) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ConfigError(key, f"expected an integer, got {text!r}") from None
    if value < 1:
        raise ConfigError(key, f"must be >= 1, got {text!r}")
    if odd_at_least is not None and (value < odd_at_least or value % 2 == 0):
        raise ConfigError(key, f"must be an odd integer >= {odd_at_least}, got {text!r}")
    return value


def main(args: argparse.Namespace) -> int:
    """Run ``meanfield diagnose``."""
    from meanfield.run import load

    try:
        tol = float(args.tol)
    except ValueError:
        raise ConfigError("--tol", f"expected a number, got {args.tol!r}") from None
    if not (math.isfinite(tol) and tol >= 0):
        raise ConfigError("--tol", f"must be a finite number >= 0, got {args.tol!r}")
    stride = _positive_int(args.stride, "--stride")
    fd_points = _positive_int(args.fd_points, "--fd-points", odd_at_least=3)
    picture_path(args.plot, "--plot")
    table_path(args.csv, "--csv")
    run = load(args.run, key="OUT.h5")
    from meanfield.analysis.diagnostics import diagnose
    from tqdm import tqdm

    with np.errstate(over="ignore", invalid="ignore"), contextlib.ExitStack() as stack:
        # (an energy past the largest float: said below, not as a warning; the bar: the diagnostics of a run can take
        # 80 times as long as the run, and had printed nothing until the end; it starts once the run is accepted, as a
        # refused one had drawn it at 0 % before its message)
        bars: list[Any] = []

        def start(total: int) -> None:
            bars.append(stack.enter_context(tqdm(total=total, disable=args.quiet, desc="diagnose", unit="frame",
                                                 file=sys.stderr)))

        diagnosis = diagnose(run, tol=tol, stride=stride, fd_points=fd_points, on_start=start,
                             on_frame=lambda: bars[0].update())
    energy = diagnosis.series.get("energy")
    if energy is not None and energy.size and not np.isfinite(energy).any() and run.config is not None:
        beta = run.config["model"]["beta"]
        # dEdt is nan where it passes the floats itself: near rest it is one while the energy is not
        whole = not np.isfinite(diagnosis.series["dEdt"]).any()
        warnings.warn(f"the energy is not a float at any frame (β = {beta:g}: e^(β⟨x, By⟩) passes the largest float "
                      f"from β⟨x, By⟩ ≈ 709), so {'dEdt, ' if whole else ''}the Theorem 11 and split residuals and the "
                      f"aggregate margin are nan{'' if whole else ' (dEdt where it passes the largest float too)'}; "
                      "log_energy is its logarithm, and energy_monotone is read from it",
                      ConfigNote, stacklevel=2)
    frames = diagnosis.series["t"].size
    if frames < fd_points:
        warnings.warn(f"entropy_residual is nan: its {fd_points}-point stencil in time (--fd-points) needs "
                      f"{fd_points} frames, the run has {frames} (after --stride)", ConfigNote, stacklevel=2)
    print(diagnosis.text())
    if args.csv:
        print(f"wrote {write_csv(diagnosis.series, args.csv)}")
    if args.plot:
        diagnosis.plot(args.plot)
        print(f"wrote {args.plot}")
    return 0
