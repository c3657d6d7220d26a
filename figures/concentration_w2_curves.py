r"""Distance to the projected measure against time, for a family of β (Thm 1 of arXiv 2605.10931).

.. math::

    W_2\big(\rho^\beta_t,\Pi_\sharp\rho_0\big) \lesssim
        \sqrt{\tfrac{\log(\beta+1)}{\beta}}\;e^{C_1t} + e^{-ct}

(Theorem 1 of arXiv 2605.10931).  The default concentration head of
``data/concentration.toml`` (:data:`meanfield.solvers.experiments.concentration.DEFAULT_CONCENTRATION_CONFIG`:
:math:`S=VB^\top=\operatorname{diag}(1,0.5,0.25)`, :math:`E=\operatorname{span}(e_1)`,
:math:`\Pi_\sharp\rho_0=p\,\delta_{e_1}+(1-p)\,\delta_{-e_1}`) is run from the
uniform density on :math:`S^2` with the **finite-volume grid solver**
(``solver.kind = "grid"``, SSP-RK3, second order) for each β: the β family of the other Thm 1
figures (:func:`meanfield.figures.beta_family_sweep`, run once when they are made together), the
tracker recording :math:`W_2(\rho_t,\Pi_\sharp\rho_0)` (geodesic cost, exact transport of the cell
masses onto the two atoms) at every saved frame.  The grid is the reference on :math:`S^2`:
particles under-resolve the kernel width :math:`\beta^{-1/2}` at large β.

The curves fall (the zero-temperature flow concentrates the mass on :math:`\pm e_1`), reach a
minimum :math:`W_{2,\min}(\beta)` at :math:`t_{\min}(\beta)`, and climb again (the
finite-temperature error, then the terminal phase of Conjecture 1).

The mesh follows β: :math:`N=\lceil4\pi\beta/c^2\rceil` cells, spacing :math:`c\,\beta^{-1/2}`
(full: β = 4, 16, 64, :math:`c = 0.25` at β = 4 and 0.5 at 16 and 64, t ≤ 16).  In full every β
runs on :math:`N` and on :math:`4N` cells, the convergence evidence: the figure draws the finer
run, the coarser one dashed beside it; :math:`W_{2,\min}` moves by at most 2 % between the two
meshes (measured: 0.3 %, 1.2 %, 0.5 % at β = 4, 16, 64), and the whole curve up to :math:`t_{\min}`
by at most :data:`CURVE_CONVERGED` of its value (measured: 1.5 %; after :math:`t_{\min}`, where the
clusters' cores narrow toward the cells, up to 6.7 %).  Quick: β = 4, 8, 16, 32 on one coarse mesh
each (:math:`c = 0.7`), t ≤ 10.

Claim: every curve has an interior minimum below its start and rises after it,
:math:`W_{2,\min}` decreases strictly with β, no β is under-resolved, and (full) the curves are
converged as above.

Runtime: under a minute with ``--quick``; in full about 15 min on two quiet cores (32 min on loaded
ones; the β = 64 pair has 3217 and 12 868 cells), the sweep shared with ``concentration_tmin_fit`` and
``concentration_w2min_rate`` when made in one process (``meanfield reproduce``).

Command: ``python figures/concentration_w2_curves.py [--quick] [--out DIR]``
(or ``meanfield reproduce concentration_w2_curves``).
"""
from __future__ import annotations

import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.figures import FAMILY_CONVERGED, beta_family_sweep, family_mesh_label, script_main, write_rows

ID = "concentration_w2_curves"
PAPER = "2605.10931"
THEOREM = "Thm 1"
DESCRIPTION = ("W2(ρ_t, Π♯ρ₀) against t on log axes for a family of β (grid solver on S², two meshes each): each curve dips "
               "to a minimum that falls with β, then rises")

# ---- constants -----------------------------------------------------------
RISE = 1.05  # the curve must climb back above RISE · W2_min after its minimum
#: largest relative change of W2(ρ_t, Π♯ρ₀) between N and 4N cells over t ≤ t_min the full form accepts
CURVE_CONVERGED = 0.02


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """Rows ``solver, beta, cells, spacing, coarse, rate, under_resolved, t, w2_target`` for every β, mesh and saved time
    (``coarse`` = 1 for the coarser run of a refined β, drawn dashed)."""
    sweep = beta_family_sweep(quick=quick)
    rows: list[dict[str, Any]] = []
    for k, summary in enumerate(sweep.summaries):
        runs = [(0, summary["n"], sweep.curves[k])]
        if sweep.coarse_curves:
            runs.append((1, summary["n_coarse"], sweep.coarse_curves[k]))
        for coarse, cells, curve in runs:
            for t, w in zip(curve["t"], curve["w2_target"]):
                rows.append({
                    "solver": sweep.solver, "beta": summary["beta"], "cells": cells, "spacing": summary["spacing"], "coarse": coarse,
                    "rate": summary["rate"], "under_resolved": int(bool(summary["under_resolved"])), "t": float(t), "w2_target": float(w),
                })
    return rows


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: (v if k == "solver" else float(v)) for k, v in row.items()} for row in csv.DictReader(f)]


def curves(rows: list[dict[str, Any]], *, coarse: bool = False) -> dict[float, tuple[np.ndarray, np.ndarray]]:
    """``beta -> (t, W2)`` of the finer runs (``coarse``: the coarser runs of the refined β)."""
    out = {}
    for beta in sorted({r["beta"] for r in rows}):
        group = [r for r in rows if r["beta"] == beta and bool(r["coarse"]) == coarse]
        if group:
            out[beta] = (np.array([r["t"] for r in group]), np.array([r["w2_target"] for r in group]))
    return out


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Checks of the CSV: an interior dip per β, minima decreasing in β, every β resolved; with two meshes, W2_min and
    the curves up to t_min converged."""
    rows = read_csv(csv_path)
    checks: dict[str, dict[str, Any]] = {}
    minima = []
    fine = curves(rows)
    for beta, (t, w) in fine.items():
        i = int(np.argmin(w))
        minima.append(float(w[i]))
        dip = 0 < i < len(w) - 1 and w[i] < w[0] and float(np.max(w[i:])) > RISE * w[i]
        checks[f"dip[beta={beta:g}]"] = {
            "ok": bool(dip), "value": float(w[i] / w[0]),
            "expected": f"W2_min/W2(0) < 1 at an interior t_min = {t[i]:.3g}, then W2 > {RISE:g}·W2_min",
        }
    steps = np.diff(minima)
    checks["w2_min_decreases_with_beta"] = {
        "ok": bool(np.all(steps < 0)), "value": float(np.max(steps)), "expected": "every step of W2_min between consecutive β < 0",
    }
    unresolved = sum(r["under_resolved"] for r in rows)
    checks["resolved"] = {"ok": unresolved == 0, "value": float(unresolved), "expected": "0 frames from under-resolved β (N ≥ 4πβ cells)"}
    coarse = curves(rows, coarse=True)
    if coarse:
        moved_min, moved_curve = 0.0, 0.0
        for beta, (t, w) in fine.items():
            if beta not in coarse or not np.array_equal(coarse[beta][0], t):
                moved_min = moved_curve = math.inf  # a β on one mesh only, or on other frames: not converged
                continue
            w0 = coarse[beta][1]
            i = int(np.argmin(w))
            moved_min = max(moved_min, float(abs(w[i] - np.min(w0)) / w[i]))
            moved_curve = max(moved_curve, float(np.max(np.abs(w[: i + 1] - w0[: i + 1]) / w[: i + 1])))
        checks["w2_min_mesh_converged"] = {"ok": bool(moved_min <= FAMILY_CONVERGED), "value": moved_min,
                                           "expected": f"max |ΔW2_min|/W2_min between N and 4N cells <= {FAMILY_CONVERGED:g}"}
        checks["curve_mesh_converged"] = {"ok": bool(moved_curve <= CURVE_CONVERGED), "value": moved_curve,
                                          "expected": f"max over β and t <= t_min of |ΔW2|/W2 between N and 4N cells <= {CURVE_CONVERGED:g}"}
    return checks


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.6, 4.8), constrained_layout=True)
    ax = fig.add_subplot(1, 1, 1)
    family = curves(rows)
    coarse = curves(rows, coarse=True)
    cmap = colormaps["viridis"]
    for k, (beta, (t, w)) in enumerate(family.items()):
        color = cmap(k / max(len(family) - 1, 1) * 0.9)
        keep = t > 0
        ax.loglog(t[keep], w[keep], color=color, lw=1.6, label=f"β = {beta:g}")
        if beta in coarse:
            tc, wc = coarse[beta]
            ax.loglog(tc[tc > 0], wc[tc > 0], color=color, lw=1.0, ls="--")
        i = int(np.argmin(w))
        ax.plot(t[i], w[i], "o", color=color, ms=6, mec="k", mew=0.6)
        ax.axhline(math.sqrt(math.log1p(beta) / beta), color=color, lw=0.8, ls=":")
    ax.plot([], [], "o", color="0.6", mec="k", mew=0.6, label=r"minimum $(t_{\min}, W_{2,\min})$")
    ax.plot([], [], ":", color="0.4", lw=0.8, label=r"rate $r(\beta)=\sqrt{\log(\beta+1)/\beta}$")
    if coarse:
        ax.plot([], [], "--", color="0.4", lw=1.0, label="dashed: the same β on N cells (solid: 4N)")
    ax.set_xlabel("time t")
    ax.set_ylabel(r"$W_2(\rho_t,\ \Pi_\sharp\rho_0)$  (geodesic)")
    coarse_cells = {r["beta"]: r["cells"] for r in rows if r["coarse"]}
    meshes = [dict(r, cells_coarse=coarse_cells.get(r["beta"], math.nan)) for r in rows if not r["coarse"]]
    ax.set_title(
        f"Thm 1 of Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931:\n"
        f"distance to $\\Pi_\\sharp\\rho_0$ for a family of β, grid solver on $S^2$, uniform $\\rho_0$, "
        f"$S=\\mathrm{{diag}}(1,0.5,0.25)$\n{family_mesh_label(meshes)}",
        fontsize=8,
    )
    ax.legend(fontsize=7, loc="lower left")
    ax.grid(alpha=0.3, which="both")
    fig.savefig(path, dpi=120)
    return path


def make(out_dir: str | Path, *, quick: bool = False) -> dict[str, Path]:
    """Compute, write ``ID.csv`` and ``ID.png`` under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = compute(quick=quick)
    csv_path = out / f"{ID}.csv"
    write_rows(csv_path, rows)
    return {"png": plot(read_csv(csv_path), out / f"{ID}.png"), "csv": csv_path}


def main(argv: Sequence[str] | None = None) -> int:
    return script_main(make, claim, DESCRIPTION, argv)


if __name__ == "__main__":
    sys.exit(main())
