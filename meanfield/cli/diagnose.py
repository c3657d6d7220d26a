r"""``meanfield diagnose OUT.h5 [--csv F] [--plot F.png]``: seed-000 diagnostics of a particle run.

Prints a summary table (first, last, min and max of every series of
:func:`meanfield.diagnostics.diagnose_run`) followed by the verdicts: whether
:math:`E_{\mathrm{multi}}` was monotone in the flow's direction, whether radial
dominance (Condition 8) held per token and in aggregate (the sign of every
:math:`dE_h/dt`), and the largest residuals of the Thm 11 and Thm 27 identities.
``--csv`` writes one row per frame; ``--plot`` draws energies, the
:math:`dE_h/dt` split with its radial shadows, the dominance margins, the
entropy against :math:`\log n`, and the cluster statistics.

Exit status 0 on success, 2 for a missing or unreadable file or a run without
particle frames.
"""
from __future__ import annotations

import argparse
import csv
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.errors import ConfigError

__all__ = ["add_parser", "main", "load_particle_run", "summary_lines", "verdicts", "write_csv", "plot_diagnostics"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``meanfield diagnose``."""
    p = subparsers.add_parser(
        "diagnose",
        help="energies, radial shadows, dominance, entropy and cluster statistics of a particle run",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("run", help="HDF5 particle run (datasets t and x)")
    p.add_argument("--csv", metavar="F", help="write every series, one row per frame")
    p.add_argument("--plot", metavar="PNG", help="draw the diagnostics")
    p.add_argument("--tol", default="1e-3", metavar="TOL", help="cluster tolerance: <x_i,x_j> >= 1 - TOL links tokens (default 1e-3)")
    p.add_argument("--stride", default="1", metavar="K", help="use every K-th frame (default 1)")
    p.add_argument("--fd-points", default="5", metavar="P", help="odd stencil size of the entropy finite difference (default 5)")
    p.set_defaults(func=main)


def load_particle_run(path: str | Path) -> dict[str, Any]:
    """Read a run file; ``ConfigError`` naming ``OUT.h5`` when it is missing, unreadable or not a particle run."""
    from meanfield.io import read_run

    if not Path(path).exists():
        raise ConfigError("OUT.h5", f"file not found: {path}")
    try:
        run = read_run(path)
    except (OSError, KeyError, ValueError) as exc:
        raise ConfigError("OUT.h5", f"{path} is not a meanfield run: {exc}") from None
    if "x" not in run:
        raise ConfigError("OUT.h5", f"{path} has no particle frames (dataset 'x'); diagnose needs a particle run")
    if len(run["t"]) == 0:
        raise ConfigError("OUT.h5", f"{path} holds no saved frame")
    return run


def _stat(values: np.ndarray) -> tuple[float, float, float, float]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return (math.nan,) * 4
    return float(finite[0]), float(finite[-1]), float(finite.min()), float(finite.max())


def summary_lines(series: Mapping[str, np.ndarray]) -> list[str]:
    """The table: one line per series with first, last, min and max (over finite values)."""
    width = max(len(k) for k in series)
    lines = [f"{'series':<{width}}  {'first':>14} {'last':>14} {'min':>14} {'max':>14}"]
    for key, values in series.items():
        if key == "t":
            continue
        first, last, lo, hi = _stat(np.asarray(values, dtype=float))
        lines.append(f"{key:<{width}}  {first:>14.7g} {last:>14.7g} {lo:>14.7g} {hi:>14.7g}")
    return lines


def verdicts(series: Mapping[str, np.ndarray], *, direction: str, H: int, n: int, gradient_flow: bool) -> dict[str, Any]:
    r"""Yes/no answers of the summary.

    * ``energy_monotone``: :math:`E_{\mathrm{multi}}` non-decreasing (ascent) or
      non-increasing (descent) between frames, up to :math:`10^{-12}\max|E|`;
    * ``dominance_per_token``: Condition 8 held for every token, head and frame;
    * ``dominance_aggregate``: every :math:`\sigma\,dE_h/dt\ge0` at every frame;
    * ``min_aggregate_margin``, ``max_thm11_residual`` (only meaningful in the
      Thm 11 setting), ``max_entropy_residual``.
    """
    sigma = 1.0 if direction == "ascent" else -1.0
    energy = np.asarray(series["energy"], dtype=float)
    scale = float(np.nanmax(np.abs(energy))) if energy.size else 0.0
    steps = sigma * np.diff(energy)
    monotone = bool(np.all(steps >= -1e-12 * max(scale, 1e-300))) if energy.size > 1 else True
    fractions = np.stack([series[f"dominance_fraction_h{h}"] for h in range(H)])
    rates = np.stack([series[f"dEdt_h{h}"] for h in range(H)])
    margins = np.stack([series[f"aggregate_margin_h{h}"] for h in range(H)])
    with np.errstate(invalid="ignore"):
        per_token = bool(np.all(fractions == 1.0))
        aggregate = bool(np.all(sigma * rates >= 0.0))
    finite_margins = margins[np.isfinite(margins)]
    thm11 = np.asarray(series["thm11_residual"], dtype=float)
    ent = np.asarray(series["entropy_residual"], dtype=float)
    return {
        "frames": int(energy.size),
        "tokens": n,
        "heads": H,
        "direction": direction,
        "gradient_flow_setting": gradient_flow,
        "energy_monotone": monotone,
        "dominance_per_token": per_token,
        "dominance_aggregate": aggregate,
        "min_aggregate_margin": float(finite_margins.min()) if finite_margins.size else math.nan,
        "max_thm11_residual": float(np.nanmax(thm11)) if np.any(np.isfinite(thm11)) else math.nan,
        "max_entropy_residual": float(np.nanmax(ent)) if np.any(np.isfinite(ent)) else math.nan,
        "final_entropy_over_log_n": float(np.mean([series[f"entropy_mean_h{h}"][-1] for h in range(H)]) / math.log(n)) if n > 1 else math.nan,
    }


def write_csv(series: Mapping[str, np.ndarray], path: str | Path) -> Path:
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


def plot_diagnostics(series: Mapping[str, np.ndarray], path: str | Path, *, H: int, n: int, title: str = "") -> Path:
    """Five panels: energies; the :math:`dE_h/dt` split; dominance margins; entropy vs :math:`\\log n`; clusters."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    t = np.asarray(series["t"])
    colors = [f"C{h % 10}" for h in range(H)]
    fig = Figure(figsize=(11, 13), layout="constrained")
    axes = fig.subplots(5, 1, sharex=True)

    ax = axes[0]
    ax.plot(t, series["energy"], "k", lw=2, label=r"$E_{\rm multi}$")
    for h in range(H):
        ax.plot(t, series[f"energy_h{h}"], color=colors[h], label=f"$E_{h}$")
    ax.set_ylabel("energy")
    ax.legend(fontsize=8, ncol=min(H + 1, 6))

    ax = axes[1]
    for h in range(H):
        c = colors[h]
        ax.plot(t, series[f"dEdt_h{h}"], color=c, lw=2, label=f"$dE_{h}/dt$")
        ax.plot(t, series[f"self_power_h{h}"], color=c, ls="-", lw=0.8, alpha=0.8, label=f"self power {h}")
        if H > 1:
            ax.plot(t, series[f"cross_sum_h{h}"], color=c, ls="--", lw=0.8, label=f"cross {h}")
            ax.plot(t, -np.asarray(series[f"shadow_sum_h{h}"]), color=c, ls=":", lw=1.2, label=f"−shadows {h}")
    ax.axhline(0.0, color="0.5", lw=0.6)
    stems = ("dEdt", "self_power", "cross_sum", "shadow_sum")
    magnitude = [np.nanmax(np.abs(series[f"{s}_h{h}"])) for s in stems for h in range(H) if np.any(np.isfinite(series[f"{s}_h{h}"]))]
    top = float(max(magnitude)) if magnitude else 0.0
    if top > 0:  # heads of very different strength: linear near 0, logarithmic beyond
        ax.set_yscale("symlog", linthresh=1e-3 * top)
    ax.set_ylabel(r"$dE_h/dt$ split")
    ax.legend(fontsize=7, ncol=4)

    ax = axes[2]
    for h in range(H):
        ax.plot(t, series[f"aggregate_margin_h{h}"], color=colors[h], label=f"aggregate margin {h}")
    ax.axhline(0.0, color="0.5", lw=0.6)
    ax.set_ylabel(r"$\sigma\,(dE_h/dt)/S_h$")
    twin = ax.twinx()
    for h in range(H):
        twin.plot(t, series[f"dominance_fraction_h{h}"], color=colors[h], ls="--", lw=0.8)
    twin.set_ylabel("per-token fraction (dashed)")
    twin.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=8)

    ax = axes[3]
    for h in range(H):
        mean = np.asarray(series[f"entropy_mean_h{h}"])
        std = np.asarray(series[f"entropy_std_h{h}"])
        ax.plot(t, mean, color=colors[h], label=f"$\\mathcal{{H}}^{h}$ mean")
        ax.fill_between(t, mean - std, mean + std, color=colors[h], alpha=0.2, lw=0)
    if n > 1:
        ax.axhline(math.log(n), color="k", ls="--", lw=1, label=r"$\log n$")
    ax.set_ylabel("attention entropy")
    ax.legend(fontsize=8)

    ax = axes[4]
    with np.errstate(invalid="ignore", divide="ignore"):
        for key, style in (("one_minus_gamma", "-"), ("max_gap", "--")):
            values = np.asarray(series[key], dtype=float)
            positive = values > 0
            if np.any(positive):
                ax.semilogy(t[positive], values[positive], "k" + style, label=key.replace("_", " "))
    ax.set_ylabel(r"$1-\gamma$, $1-\min\langle x_i,x_j\rangle$")
    ax.set_xlabel("t")
    twin = ax.twinx()
    twin.step(t, series["n_clusters"], where="post", color="C3", lw=1)
    twin.set_ylabel("clusters", color="C3")
    ax.legend(fontsize=8, loc="lower left")
    if title:
        fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
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
    from meanfield.build import build_heads
    from meanfield.diagnostics import diagnose_run, gradient_flow_setting
    from meanfield.heads import stack_heads

    try:
        tol = float(args.tol)
    except ValueError:
        raise ConfigError("--tol", f"expected a number, got {args.tol!r}") from None
    if not (math.isfinite(tol) and tol >= 0):
        raise ConfigError("--tol", f"must be a finite number >= 0, got {args.tol!r}")
    stride = _positive_int(args.stride, "--stride")
    fd_points = _positive_int(args.fd_points, "--fd-points", odd_at_least=3)
    run = load_particle_run(args.run)
    cfg = run["config"]
    series = diagnose_run(run, tol=tol, fd_points=fd_points, stride=stride)
    heads = stack_heads(build_heads(cfg))
    n = int(run["x"].shape[1])
    model = cfg["model"]
    verdict = verdicts(
        series,
        direction=model["direction"],
        H=heads.H,
        n=n,
        gradient_flow=gradient_flow_setting(heads, model["attention"]),
    )
    print(f"run:        {args.run}")
    print(f"model:      d={model['d']} beta={model['beta']:g} attention={model['attention']} direction={model['direction']} heads={heads.H} n={n}")
    print()
    print("\n".join(summary_lines(series)))
    print()
    for key, value in verdict.items():
        text = ("yes" if value else "no") if isinstance(value, bool) else (f"{value:.6g}" if isinstance(value, float) else str(value))
        print(f"{key:<26}{text}")
    if args.csv:
        print(f"wrote {write_csv(series, args.csv)}")
    if args.plot:
        title = f"{model['attention']}, β={model['beta']:g}, H={heads.H}, n={n}"
        print(f"wrote {plot_diagnostics(series, args.plot, H=heads.H, n=n, title=title)}")
    return 0
