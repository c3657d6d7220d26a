r"""``meanfield concentration``: W2(ρ_t, Π♯ρ₀) against t, t_min, W2_min, the metastable window (seed 002).

Two forms, one positional argument:

* ``meanfield concentration OUT.h5 [--csv F] [--plot F.png] [--threshold X] [--force]``
  analyses a stored run (the curve is recomputed from the saved frames when
  the run did not track it);
* ``meanfield concentration --sweep-beta 4,8,16,32,64 CONFIG.toml [--csv F] [--plot F.png]
  [--out DIR] [--solver particle|grid] [--set KEY=VALUE …] [--quiet]`` runs the β family
  and fits :math:`t_{\min}` against :math:`\log\beta` and :math:`W_{2,\min}` against
  :math:`\sqrt{\log(\beta+1)/\beta}`.

Exit status 2 (with the numbers) when Assumption 1 fails, unless ``--force``
or ``model.assumptions = "warn"``; 2 for bad options.
"""
from __future__ import annotations

import argparse
import csv
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.errors import ConfigError

__all__ = ["add_parser", "main", "plot_curve", "plot_sweep"]

#: at most this many rows of the W2 table are printed (the CSV has all frames)
PRINT_ROWS = 41


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "concentration",
        help="W2(ρ_t, Π♯ρ₀) against t, t_min, W2_min, metastable window; --sweep-beta for the β family",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", metavar="OUT.h5 | CONFIG.toml", help="a run file, or with --sweep-beta a TOML config")
    p.add_argument("--sweep-beta", metavar="B1,B2,…", help="run the β family of CONFIG.toml")
    p.add_argument("--csv", metavar="F", help="write the numbers as CSV")
    p.add_argument("--plot", metavar="F.png", help="draw the curve(s)")
    p.add_argument("--threshold", type=float, metavar="X", help="metastability threshold on W2 (default 2·W2_min)")
    p.add_argument("--force", action="store_true", help="go on (with a warning) when Assumption 1 fails")
    p.add_argument("--out", metavar="DIR", help="--sweep-beta: keep the runs as DIR/beta_<β>.h5")
    p.add_argument("--solver", choices=("particle", "grid"), help="--sweep-beta: solver family (default on S²: grid; elsewhere the config's)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="--sweep-beta: override a config key")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=main)


def _check_options(args: argparse.Namespace) -> None:
    if args.threshold is not None and not (np.isfinite(args.threshold) and args.threshold > 0):
        raise ConfigError("--threshold", f"must be a positive number, got {args.threshold}")
    if args.sweep_beta is None:
        for option, value in (("--out", args.out), ("--solver", args.solver), ("--set", args.overrides)):
            if value:
                raise ConfigError(option, "only applies with --sweep-beta")
    if not Path(args.path).exists():
        raise ConfigError("CONFIG.toml" if args.sweep_beta is not None else "OUT.h5", f"file not found: {args.path}")


def main(args: argparse.Namespace) -> int:
    _check_options(args)
    if args.sweep_beta is not None:
        return _sweep(args)
    return _analyse(args)


# ----------------------------------------------------------------------------- one run


def _analyse(args: argparse.Namespace) -> int:
    from meanfield.io import read_run
    from meanfield.projection import resolution_warning
    from solvers.concentration import concentration_curves, concentration_summary, resolution_size

    try:
        run = read_run(args.path)
    except (OSError, KeyError) as exc:
        raise ConfigError("OUT.h5", f"{args.path} is not a meanfield run: {exc}") from None
    cfg = run["config"]
    policy = "warn" if args.force else cfg["model"].get("assumptions", "check")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        curves = concentration_curves(run, policy=policy)
    for item in caught:
        print(f"warning: {item.message}", file=sys.stderr)
    summary = concentration_summary(curves["t"], curves["w2_target"], threshold=args.threshold)
    t, w = curves["t"], curves["w2_target"]
    m = cfg["model"]
    print(f"run: {args.path}  (solver {cfg['solver']['kind']}, β = {m['beta']:g}, d = {m['d']})")
    print(f"{'t':>10} {'W2(ρ_t,Π♯ρ0)':>14} {'dist(E_V)':>10}")
    step = max(1, int(np.ceil(len(t) / PRINT_ROWS)))
    picks = sorted(set(range(0, len(t), step)) | {len(t) - 1, int(np.nanargmin(w))})
    for i in picks:
        print(f"{t[i]:10.4g} {w[i]:14.6g} {curves['v_eigenspace_distance'][i]:10.4g}")
    print(_summary_text(summary))
    note = resolution_warning(resolution_size(cfg), float(m["beta"]), int(m["d"]))
    if note and cfg["solver"]["kind"] != "zero-temperature":
        print(f"warning: {note}", file=sys.stderr)
    if args.csv:
        _write_csv(args.csv, ["t", "w2_target", "v_eigenspace_distance", "e_eigenspace_distance"],
                   zip(t, w, curves["v_eigenspace_distance"], curves["e_eigenspace_distance"]))
        print(f"wrote {args.csv}")
    if args.plot:
        title = f"β = {m['beta']:g}, {cfg['solver']['kind']} solver"
        print(f"wrote {plot_curve(curves, summary, args.plot, title=title)}")
    return 0


def _summary_text(s: dict[str, Any]) -> str:
    lines = [f"t_min  = {s['t_min']:.6g}", f"W2_min = {s['w2_min']:.6g}"]
    if np.isnan(s["t_a"]):
        lines.append(f"window: none (threshold {s['threshold']:.4g} < W2_min)")
    else:
        ends = ("[" if not s["open_start"] else "[≤") , ("]" if not s["open_end"] else "≥]")
        lines.append(
            f"metastable window (W2 ≤ {s['threshold']:.4g}): {ends[0]}{s['t_a']:.4g}, {s['t_b']:.4g}{ends[1]}  (length {s['window_length']:.4g})"
        )
        if s["open_end"]:
            lines.append("note: W2 is still below the threshold at the last frame: the window may extend further")
    if s["min_at_end"]:
        lines.append("note: the minimum is at the last frame (W2 still falling): run longer to see t_min")
    return "\n".join(lines)


def _write_csv(path: str, header: list[str], rows: Any) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for row in rows:
            writer.writerow([f"{float(v):.10g}" if isinstance(v, (float, np.floating)) else v for v in row])


def _figure(**kwargs: Any) -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def plot_curve(curves: dict[str, np.ndarray], summary: dict[str, Any], path: str | Path, *, title: str = "") -> Path:
    """W2(ρ_t, Π♯ρ₀) and the distance to E_V against t (log y), window shaded, t_min marked."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = _figure(figsize=(6.0, 4.0), constrained_layout=True)
    ax = fig.add_subplot(1, 1, 1)
    t = curves["t"]
    ax.semilogy(t, curves["w2_target"], color="C0", label=r"$W_2(\rho_t,\Pi_\sharp\rho_0)$")
    ax.semilogy(t, np.maximum(curves["v_eigenspace_distance"], 1e-16), color="C3", ls="--", label=r"dist to $E_V$ (Conj. 1)")
    if not np.isnan(summary["t_a"]):
        ax.axvspan(summary["t_a"], summary["t_b"], color="C0", alpha=0.12, label="metastable window")
    ax.plot([summary["t_min"]], [summary["w2_min"]], "o", color="C0")
    ax.set_xlabel("t")
    ax.set_ylabel("distance (rad)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.savefig(path, dpi=110)
    return path


# ----------------------------------------------------------------------------- β sweep


def _sweep(args: argparse.Namespace) -> int:
    from meanfield.config import load_config
    from solvers.concentration import sweep_beta

    cfg = load_config(args.path, args.overrides)
    policy = "warn" if args.force else None
    solver = args.solver
    if solver is None and cfg["model"]["d"] == 3 and cfg["solver"]["kind"] == "particle":
        # the theorem is about the PDE: on S² the grid resolves large β where particles cannot
        solver = "grid"
        print("on S² the β family runs on the grid solver (grid.cells = "
              f"{cfg['grid']['cells']}); --solver particle keeps the particles", file=sys.stderr)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        sweep = sweep_beta(cfg, args.sweep_beta, solver=solver, out_dir=args.out, threshold=args.threshold, quiet=args.quiet, policy=policy)
    for message in dict.fromkeys(str(item.message) for item in caught):
        print(f"warning: {message}", file=sys.stderr)
    print(f"β sweep of {args.path} ({sweep.solver} solver)")
    print(sweep.table())
    for s in sweep.summaries:
        if s["under_resolved"]:
            print(f"warning: β = {s['beta']:g}: {s['under_resolved']}", file=sys.stderr)
    if args.csv:
        keys = ["beta", "n", "t_min", "w2_min", "threshold", "t_a", "t_b", "window_length", "rate", "ratio", "min_at_end", "under_resolved", "wall_time"]
        rows = [[s[k] if k != "under_resolved" else bool(s[k]) for k in keys] for s in sweep.summaries]
        _write_csv(args.csv, keys, rows)
        print(f"wrote {args.csv}")
    if args.out:
        curves_csv = Path(args.out) / "curves.csv"
        _write_csv(
            str(curves_csv),
            ["beta", "t", "w2_target", "v_eigenspace_distance", "e_eigenspace_distance"],
            ((b, *row) for b, c in zip(sweep.betas, sweep.curves)
             for row in zip(c["t"], c["w2_target"], c["v_eigenspace_distance"], c["e_eigenspace_distance"])),
        )
        print(f"wrote {len(sweep.files)} runs and {curves_csv}")
    if args.plot:
        print(f"wrote {plot_sweep(sweep, args.plot)}")
    return 0


def plot_sweep(sweep: Any, path: str | Path) -> Path:
    """Three panels: W2(t) per β (log–log); t_min against log β with its fit; W2_min against √(log(β+1)/β)."""
    from meanfield.projection import concentration_rate

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = _figure(figsize=(13.0, 4.0), constrained_layout=True)
    ax1, ax2, ax3 = (fig.add_subplot(1, 3, k) for k in (1, 2, 3))
    colors = [f"C{k % 10}" for k in range(len(sweep.betas))]
    for beta, curve, s, color in zip(sweep.betas, sweep.curves, sweep.summaries, colors):
        t, w = curve["t"], curve["w2_target"]
        keep = t > 0
        ax1.loglog(t[keep], w[keep], color=color, label=f"β = {beta:g}" + (" (under-res.)" if s["under_resolved"] else ""))
        ax1.plot([s["t_min"]], [s["w2_min"]], "o", color=color, ms=4)
    ax1.set_xlabel("t")
    ax1.set_ylabel(r"$W_2(\rho^\beta_t,\Pi_\sharp\rho_0)$")
    ax1.grid(alpha=0.3, which="both")
    ax1.legend(fontsize=7)
    logb = np.log(sweep.betas)
    t_min = np.array([s["t_min"] for s in sweep.summaries])
    ax2.plot(logb, t_min, "o", color="C0")
    fit = sweep.fit_tmin
    grid = np.linspace(logb.min(), logb.max(), 50)
    ax2.plot(grid, fit["slope"] * grid + fit["intercept"], color="C1",
             label=f"{fit['slope']:.3g} log β + {fit['intercept']:.3g}  (R²={fit['r2']:.3f})")
    ax2.set_xlabel(r"$\log\beta$")
    ax2.set_ylabel(r"$t_{\min}$")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    rate = concentration_rate(sweep.betas)
    w_min = np.array([s["w2_min"] for s in sweep.summaries])
    ax3.loglog(rate, w_min, "o", color="C0", label=r"$W_{2,\min}$")
    fit = sweep.fit_w2min
    grid = np.linspace(np.log(rate.min()), np.log(rate.max()), 50)
    ax3.loglog(np.exp(grid), np.exp(fit["slope"] * grid + fit["intercept"]), color="C1",
               label=f"∝ rate^{fit['slope']:.3g}  (R²={fit['r2']:.3f})")
    ax3.loglog(rate, rate, color="0.5", ls=":", label="rate")
    ax3.set_xlabel(r"$\sqrt{\log(\beta+1)/\beta}$")
    ax3.set_ylabel(r"$W_{2,\min}$")
    ax3.grid(alpha=0.3, which="both")
    ax3.legend(fontsize=8)
    fig.suptitle(f"concentration onto Π♯ρ₀, {sweep.solver} solver", fontsize=10)
    fig.savefig(path, dpi=110)
    return path
