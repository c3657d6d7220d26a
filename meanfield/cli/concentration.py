"""``meanfield concentration``: W2(ρ_t, Π♯ρ₀) against t, t_min, W2_min and the metastable window.

Theorem 1 of Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931).  One form
analyses a stored run, the other (``--sweep-beta``) runs the β family of a
config and fits t_min against log β and W2_min against sqrt(log(β+1)/β).
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.cli.options import load_config_noted, picture_path, table_path
from meanfield.io.output import folder_path
from meanfield.errors import ConfigError

__all__ = ["add_parser", "main"]

#: the per-frame tables of a sweep in ``--out DIR``: the finer run of each β, and (refined sweeps) the coarser one
CURVE_TABLES = ("curves.csv", "curves_coarse.csv")
#: their columns (``n``: the run's ``grid.cells`` or ``init.n``, as in the summary's ``n`` and ``n_coarse``)
CURVE_COLUMNS = ["beta", "t", "w2_target", "v_eigenspace_distance", "e_eigenspace_distance", "n"]

DESCRIPTION = """\
W2 between the tokens and Π♯ρ₀ against time, its minimum W2_min at t_min, and the metastable window
(Theorem 1 of Alcalde, Bungert, Riedl and Roith, Quantifying Concentration Phenomena of Mean-Field
Transformers in the Low-Temperature Regime, arXiv 2605.10931).

  meanfield concentration OUT.h5 [--csv F] [--plot F.png] [--threshold X] [--force]
      analyses a stored run (the curve is recomputed from the frames when the run did not track it);
  meanfield concentration --sweep-beta 4,16,64 CONFIG.toml [--solver grid|particle] [--cells N | --spacing C]
                          [--single | --refinement R] [--out DIR] [--csv F] [--plot F.png]
      runs the family of β and fits t_min against log β and W2_min against sqrt(log(β+1)/β).
      On S² the resolution follows β: N = 4πβ/C² cells (or quasi-uniform particles), so that their
      spacing sqrt(4π/N) is C·β^(-1/2), C = 0.5 unless --spacing says otherwise (one C, or one per β:
      --spacing 4:0.25,16:0.5,64:0.5); --cells fixes N.
      Each β runs on N and on 4N (the spacing halved; --refinement 2: on 2N) and the table gives the
      change of W2_min and t_min between the two: the convergence columns (--single: one run per β).

Exit status 2, with the numbers, when Assumption 1 of the paper fails (B = QᵀK invertible, S = V Bᵀ
symmetric with a spectral gap), unless --force or model.assumptions = "warn"."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "concentration",
        help="W2(ρ_t, Π♯ρ₀) against t, t_min, W2_min, metastable window; --sweep-beta for the β family",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", metavar="OUT.h5 | CONFIG.toml", help="a run file, or with --sweep-beta a TOML config")
    p.add_argument("--sweep-beta", metavar="B1,B2,…", help="run the β family of CONFIG.toml")
    p.add_argument("--csv", metavar="F", help="write the numbers as CSV")
    p.add_argument("--plot", metavar="F.png", help="draw the curve(s)")
    p.add_argument("--threshold", type=float, metavar="X", help="metastability threshold on W2 (default 2·W2_min)")
    p.add_argument("--force", action="store_true", help="go on (with a warning) when Assumption 1 fails")
    p.add_argument("--out", metavar="DIR", help="--sweep-beta: keep the runs as DIR/beta_<β>.h5 (the coarser: beta_<β>_coarse.h5) "
                                               "and their W2(t) as DIR/curves.csv (the coarser runs': curves_coarse.csv)")
    p.add_argument("--solver", choices=("particle", "grid"), help="--sweep-beta: solver family (default on S²: grid; elsewhere the config's)")
    p.add_argument("--cells", type=int, metavar="N", help="--sweep-beta: cells (or particles) of every β, the coarser of the two runs")
    p.add_argument("--spacing", metavar="C | B:C,…", help="--sweep-beta on S²: N = 4πβ/C² (default C = 0.5), one C or one per β (4:0.25,16:0.5)")
    p.add_argument("--single", action="store_true", help="--sweep-beta: one run per β, no convergence columns")
    p.add_argument("--refinement", type=int, metavar="R",
                   help="--sweep-beta: the finer run of each β has R times the coarser's cells or particles (default 4)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="--sweep-beta: override a config key")
    p.add_argument("--resume", action="store_true",
                   help="--sweep-beta with --out: continue a sweep whose runs are in DIR (finished runs are read, "
                        "interrupted ones resumed, missing ones run; each is checked against the config before any runs)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=main, interrupted="interrupted; with --sweep-beta --out DIR the finished runs are kept there and --resume continues")


def _check_options(args: argparse.Namespace) -> None:
    if args.threshold is not None and not (np.isfinite(args.threshold) and args.threshold > 0):
        raise ConfigError("--threshold", f"must be a positive number, got {args.threshold}")
    if args.sweep_beta is None:
        for option, value in (("--out", args.out), ("--solver", args.solver), ("--set", args.overrides),
                              ("--cells", args.cells), ("--spacing", args.spacing), ("--single", args.single),
                              ("--refinement", args.refinement), ("--resume", args.resume)):
            if value:
                raise ConfigError(option, "only applies with --sweep-beta")
    if args.cells is not None and args.cells < 12:
        raise ConfigError("--cells", f"must be at least 12, got {args.cells}")
    if args.spacing is not None:
        from meanfield.solvers.experiments.concentration import check_spacing_betas, parse_betas, parse_spacing

        args.spacing = parse_spacing(args.spacing)
        if args.sweep_beta is not None:  # every β has its constant and no other β has one, before any run
            check_spacing_betas(args.spacing, parse_betas(args.sweep_beta))
    if args.refinement is not None:
        if args.refinement < 2:
            raise ConfigError("--refinement", f"must be an integer ≥ 2 (the finer run's size over the coarser's), got {args.refinement}")
        if args.single:
            raise ConfigError("--refinement", "--single runs one resolution per β; give one of them")
    if args.cells is not None and args.spacing is not None:
        raise ConfigError("--cells", "give --cells or --spacing, not both")
    if not Path(args.path).exists():
        raise ConfigError("CONFIG.toml" if args.sweep_beta is not None else "OUT.h5", f"file not found: {args.path}")
    if args.sweep_beta is None and Path(args.path).suffix.lower() == ".toml":  # (it had said only: not an HDF5 file)
        raise ConfigError("OUT.h5", f"{args.path} is a config: the β family of a config is --sweep-beta B1,B2,… "
                                    f"{args.path}; without it, give a run file")
    picture_path(args.plot, "--plot")
    table_path(args.csv, "--csv")
    folder_path(args.out, "--out")
    if args.resume and args.out is None:
        raise ConfigError("--resume", "continues the runs kept in --out DIR; give --out")
    for name in CURVE_TABLES:
        if args.csv and args.out and Path(args.csv).resolve() == (Path(args.out) / name).resolve():
            raise ConfigError("--csv", f"{args.csv} is a per-frame table the sweep writes into --out; name the summary otherwise")


def main(args: argparse.Namespace) -> int:
    _check_options(args)
    if args.sweep_beta is not None:
        return _sweep(args)
    return _analyse(args)


# ----------------------------------------------------------------------------- one run


def _analyse(args: argparse.Namespace) -> int:
    from meanfield.run import load

    policy = "warn" if args.force else None
    run = load(args.path, key="OUT.h5")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        try:
            result = run.concentration(threshold=args.threshold, policy=policy)
        finally:  # also when the analysis stops: a damaged frame's warning says why (it had been held back)
            for item in caught:
                print(f"warning: {item.message}", file=sys.stderr)
    print(result.text(cli=True))  # its warnings: caught above, as the analysis warns of them (MeanfieldWarning)
    if args.csv:
        _write_csv(args.csv, ["t", "w2_target", "v_eigenspace_distance", "e_eigenspace_distance"], result.rows())
        print(f"wrote {args.csv}")
    if args.plot:
        result.plot(args.plot)
        print(f"wrote {args.plot}")
    return 0


def _write_csv(path: str, header: list[str], rows: Any) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for row in rows:
            writer.writerow([f"{float(v):.10g}" if isinstance(v, (float, np.floating)) else v for v in row])


# ----------------------------------------------------------------------------- β sweep


def _runs(count: int, noun: str = "run") -> str:
    """``"1 run"``, ``"2 runs"`` (it had said "wrote 1 runs")."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _sweep(args: argparse.Namespace) -> int:
    from meanfield.solvers.experiments.concentration import REFINEMENT, SWEEP_MIN_SIZE, SWEEP_SPACING, parse_betas, sweep_beta

    parse_betas(args.sweep_beta)  # before the lines below say what the sweep will do
    cfg = load_config_noted(args.path, args.overrides)
    policy = "warn" if args.force else None
    solver = args.solver
    on_sphere = cfg["model"]["d"] == 3
    if solver is None and on_sphere and cfg["solver"]["kind"] == "particle":
        # the theorem is about the PDE: on S² the grid resolves large β where particles cannot
        solver = "grid"
        print("on S² the β family runs on the grid solver; --solver particle keeps the particles", file=sys.stderr)
    refinement = REFINEMENT if args.refinement is None else args.refinement
    spacing = None
    if args.cells is None and on_sphere:
        spacing = SWEEP_SPACING if args.spacing is None else args.spacing
        if isinstance(spacing, dict):
            rule = "N = 4πβ/C² (spacing C·β^(-1/2), " + ", ".join(f"C = {c:g} at β = {b:g}" for b, c in spacing.items()) + ")"
        else:
            rule = f"N = 4πβ/{spacing:g}² (spacing {spacing:g}·β^(-1/2))"
        print(f"the resolution follows β: {rule}, at least {SWEEP_MIN_SIZE}"
              + ("" if args.single else f", and {refinement}N for the convergence columns"), file=sys.stderr)
    elif args.spacing is not None:
        raise ConfigError("--spacing", f"the resolution follows β on S² (d = 3) only, got model.d = {cfg['model']['d']}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        sweep = sweep_beta(cfg, args.sweep_beta, solver=solver, out_dir=args.out, threshold=args.threshold, quiet=args.quiet,
                           policy=policy, spacing=spacing, size=args.cells, refine=not args.single,
                           refinement=refinement, resume=args.resume)
    from meanfield.errors import ConfigNote

    for message, note in dict.fromkeys((str(item.message), issubclass(item.category, ConfigNote)) for item in caught):
        print(f"{'note' if note else 'warning'}: {message}", file=sys.stderr)  # as the CLI prints notes elsewhere
    print(f"β sweep of {args.path} ({sweep.solver} solver)")
    print(sweep.table())
    for s in sweep.summaries:
        if s["under_resolved"]:
            print(f"warning: β = {s['beta']:g}: {s['under_resolved']}", file=sys.stderr)
        if s.get("cores"):
            print(f"warning: β = {s['beta']:g}: {s['cores']}", file=sys.stderr)
    if args.csv:
        keys = ["beta", "n", "cells", "spacing", "t_min", "w2_min", "t_first_min", "w2_first_min", "threshold", "t_a", "t_b", "window_length", "open_start", "open_end", "rate", "ratio", "min_at_end", "under_resolved", "wall_time"]
        if not args.single:
            keys += ["n_coarse", "cells_coarse", "w2_min_coarse", "t_min_coarse", "dw2_min", "dt_min", "t_first_min_coarse",
                     "w2_first_min_coarse", "under_resolved_coarse"]
        if any("t_cores_unresolved" in s for s in sweep.summaries):  # grid runs: the core check
            keys += ["t_cores_unresolved", "w2_min_resolved", "t_min_resolved", "resolved_min_at_end"]
            if not args.single:
                keys.append("t_cores_unresolved_coarse")
        rows = [[bool(s[k]) if k.startswith("under_resolved") else s.get(k, math.nan) for k in keys] for s in sweep.summaries]
        _write_csv(args.csv, keys, rows)
        print(f"wrote {args.csv}")
    if args.out:
        # the finer run of each β, and beside it the coarser one: the two halves of the convergence columns (only the
        # finer had been written, and ΔW2_min could not be checked from the sweep's own tables)
        tables = [(Path(args.out) / CURVE_TABLES[0], sweep.curves, "n")]
        if sweep.coarse_curves:
            tables.append((Path(args.out) / CURVE_TABLES[1], sweep.coarse_curves, "n_coarse"))
        for path, runs, size in tables:
            _write_csv(str(path), CURVE_COLUMNS,
                       ((b, *row, s[size]) for b, c, s in zip(sweep.betas, runs, sweep.summaries)
                        for row in zip(c["t"], c["w2_target"], c["v_eigenspace_distance"], c["e_eigenspace_distance"])))
        wrote_tables = " and ".join(str(path) for path, _, _ in tables)
        written = len(sweep.files) - len(sweep.read)  # (--resume over finished runs had said "wrote 4 runs", having read them)
        if not sweep.read:
            print(f"wrote {_runs(written)}{',' if len(tables) > 1 else ' and'} {wrote_tables}")
        elif not written:
            print(f"read {_runs(len(sweep.read), 'finished run')} (nothing to resume) and wrote {wrote_tables}")
        else:
            print(f"wrote {_runs(written)}, read {_runs(len(sweep.read), 'finished one')}, and wrote {wrote_tables}")
    if args.plot:
        from meanfield.plotting.curves import plot_sweep

        plot_sweep(sweep, args.plot)
        print(f"wrote {args.plot}")
    return 0
