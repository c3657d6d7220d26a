r"""Grid density concentrating onto :math:`\Pi_\sharp\rho_0`, and the grid refinement study (Thm 1 of arXiv 2605.10931).

.. math::

    W_2\big(\rho^\beta_t,\Pi_\sharp\rho_0\big)\lesssim\sqrt{\tfrac{\log(\beta+1)}{\beta}}\,e^{C_1t}+e^{-ct},
    \qquad \Pi_\sharp\rho_0 = p\,\delta_{e_1}+(1-p)\,\delta_{-e_1},\quad p=\rho_0(x_1>0)

(Theorem 1 of arXiv 2605.10931).  The head of ``data/concentration.toml`` (softmax,
:math:`\beta=16`, :math:`S=VB^\top=\operatorname{diag}(1,0.5,0.25)`, so
:math:`E=\operatorname{span}(e_1)`) drives the uniform density on :math:`S^2`,
solved by the finite-volume grid solver (:func:`meanfield.solvers.grid.solve_grid`:
upwind two-point fluxes on a Fibonacci Voronoi mesh, SSP-RK3, CFL 0.5) up to
:math:`t=5`, near the minimum of :math:`W_2(t)` (afterwards the terminal phase
of Conjecture 1 pulls the mass away toward the dominant eigenvector of
:math:`V`).  Top: the density :math:`m_c/A_c` on Mollweide maps (log colour
scale; the map is turned 90° about :math:`e_3` so that :math:`\pm e_1` sit at
longitudes :math:`\pm90°`, marked with the target weights; white crosses: the
dominant eigenvector :math:`\pm(1,1,0)/\sqrt2` of :math:`V`, toward which the
peaks have begun to drift by :math:`t=5`).  Bottom:
:math:`W_2(\rho_t,\Pi_\sharp\rho_0)` (exact, geodesic cost), the mass error
:math:`|\sum_cm_c(t)-\sum_cm_c(0)|` at every saved frame, and the refinement study
(:func:`meanfield.solvers.grid.convergence_study`): :math:`W_2` at :math:`t=2` between
each mesh and a finer reference mesh against :math:`h=\sqrt{4\pi/N}`, with the
fitted order (upwind: first order expected).

Claim (from the CSV): mass is conserved to :math:`10^{-12}` at every saved
frame (and at the end of every refinement run); the observed order of the
refinement (least-squares slope, and between the two finest meshes) is at
least 0.7; :math:`W_2(\rho_t,\Pi_\sharp\rho_0)` falls to at most half its
initial value.

Runtime: about 3 s with ``--quick`` (cells ≤ 1000), about 40 s in full
(reference mesh of 8000 cells), on one core.

Command: ``python figures/concentration_grid_density.py [--quick] [--out DIR]``
(or ``meanfield reproduce concentration_grid_density``).
"""
from __future__ import annotations

import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.figures import largest, script_main, write_rows

ID = "concentration_grid_density"
PAPER = "2605.10931"
THEOREM = "Thm 1"
DESCRIPTION = "Grid density on S² (Mollweide maps at three times) concentrating onto Π♯ρ₀ for the data/concentration.toml head, with mass conservation per frame and the grid refinement order in W2"

# ---- constants -----------------------------------------------------------
CONFIG = Path(__file__).resolve().parents[1] / "data" / "concentration.toml"
CELLS = 2000
T_FINAL = 5.0
SAVE_EVERY = 0.25
MAP_TIMES = (0.0, 2.5, 5.0)
STUDY_CELLS = (250, 500, 1000, 2000)
REFERENCE_CELLS = 8000
STUDY_T = 2.0
QUICK_CELLS = 500
QUICK_STUDY_CELLS = (125, 250, 500)
QUICK_REFERENCE_CELLS = 1000
MASS_TOL = 1e-12
ORDER_MIN = 0.7
CONCENTRATION_RATIO_MAX = 0.5
NAN = math.nan


def _config() -> dict[str, Any]:
    """The resolved concentration experiment (``data/concentration.toml``; its documented twin when not shipped)."""
    from meanfield.config import load_config

    if CONFIG.is_file():
        return load_config(CONFIG)
    from meanfield.solvers.experiments.concentration import DEFAULT_CONCENTRATION_CONFIG

    return load_config(DEFAULT_CONCENTRATION_CONFIG)


def run(*, quick: bool = False) -> dict[str, Any]:
    """The density run (masses at every saved frame) and the refinement rows."""
    from meanfield.build import build_model
    from meanfield.geometry.mesh import initial_mass, mesh
    from meanfield.analysis.concentration import single_head, tracker_from_head
    from meanfield.solvers.grid import GridSolver
    from meanfield.solvers.problem import Problem, solve
    from meanfield.solvers.refinement import convergence_study

    cfg = _config()
    model = build_model(cfg)
    head = single_head(cfg)
    msh = mesh(QUICK_CELLS if quick else CELLS, "fibonacci")
    mass0 = initial_mass(msh, "uniform")
    tracker = tracker_from_head(head.Q, head.K, head.V, mass0, points=msh.points)
    result = solve(Problem(model, mass0, mesh=msh), GridSolver(), t_final=T_FINAL, save_every=SAVE_EVERY, trackers=[tracker], energy=False, speed=False)
    study = convergence_study(model, "uniform", cells=QUICK_STUDY_CELLS if quick else STUDY_CELLS,
                              reference_cells=QUICK_REFERENCE_CELLS if quick else REFERENCE_CELLS, t_final=STUDY_T)
    return {"mesh": msh, "result": result, "study": study, "target": tracker.target, "P_V": tracker.P_V}


def rows_of(out: dict[str, Any]) -> list[dict[str, Any]]:
    """Tidy rows: ``part = "frame"`` (density run) and ``part = "refinement"`` (one per mesh)."""
    msh, result, target = out["mesh"], out["result"], out["target"]
    d = result.diagnostics
    rows: list[dict[str, Any]] = []
    for k, t in enumerate(result.t):
        rows.append({
            "part": "frame", "role": "density", "cells": msh.N, "h": msh.h, "t": float(t),
            "mass_error": float(d["mass_error"][k]), "min_mass": float(d["min_mass"][k]), "w2_target": float(d["w2_target"][k]),
            "target_p": float(target.weights[0]), "w2_reference": NAN, "order_reference": NAN,
        })
    for r in out["study"]:
        rows.append({
            "part": "refinement", "role": r["role"], "cells": r["cells"], "h": r["h"], "t": STUDY_T,
            "mass_error": float(r["mass_error"]), "min_mass": float(r["min_mass"]), "w2_target": NAN, "target_p": NAN,
            "w2_reference": float(r["w2_reference"]), "order_reference": float(r["order_reference"]),
        })
    return rows


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: (v if k in ("part", "role") else float(v)) for k, v in row.items()} for row in csv.DictReader(f)]


def refinement(rows: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, float, float]:
    """``(h, W2 to the reference, least-squares order, order between the two finest meshes)`` of the study meshes."""
    study = sorted((r for r in rows if r["part"] == "refinement" and r["role"] == "study"), key=lambda r: -r["h"])
    h = np.array([r["h"] for r in study])
    e = np.array([r["w2_reference"] for r in study])
    fit = float(np.polyfit(np.log(h), np.log(e), 1)[0])
    last = float(math.log(e[-2] / e[-1]) / math.log(h[-2] / h[-1]))
    return h, e, fit, last


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Checks of the CSV: mass to 1e-12 at every frame; refinement order ≥ 0.7; W2 to Π♯ρ₀ at least halves."""
    rows = read_csv(csv_path)
    frames = [r for r in rows if r["part"] == "frame"]
    worst = largest(r["mass_error"] for r in rows)
    _, _, fit, last = refinement(rows)
    ratio = frames[-1]["w2_target"] / frames[0]["w2_target"]
    return {
        "mass_conserved": {"ok": bool(worst <= MASS_TOL and all(r["min_mass"] >= 0 for r in rows)), "value": worst,
                           "expected": f"max |Σm(t) − Σm(0)| <= {MASS_TOL:g} over {len(frames)} frames and every mesh, m >= 0"},
        "observed_order": {"ok": bool(fit >= ORDER_MIN), "value": fit, "expected": f">= {ORDER_MIN:g} (least squares; upwind: 1)"},
        "observed_order_finest": {"ok": bool(last >= ORDER_MIN), "value": last, "expected": f">= {ORDER_MIN:g} (two finest meshes)"},
        "concentrates": {"ok": bool(ratio <= CONCENTRATION_RATIO_MAX), "value": ratio,
                         "expected": f"W2(ρ_T, Π♯ρ₀) / W2(ρ_0, Π♯ρ₀) <= {CONCENTRATION_RATIO_MAX:g}"},
    }


def plot(out: dict[str, Any], rows: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib import colors as mcolors
    from matplotlib.figure import Figure

    from meanfield.geometry.mesh import mesh_from_points
    from meanfield.plotting.density import plot_density_mollweide

    msh, result = out["mesh"], out["result"]
    turn = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # 90° about e3: e1 -> e2 (longitude +90°)
    shown = mesh_from_points(msh.points @ turn.T, family=msh.family)  # same cells, same order, turned
    t = np.asarray(result.t)
    picks = [int(np.argmin(np.abs(t - s))) for s in MAP_TIMES]
    rho = np.concatenate([result.states[k] / msh.areas for k in picks])
    norm = mcolors.LogNorm(vmin=max(float(rho.min()), 1e-4), vmax=float(rho.max()))
    frames = [r for r in rows if r["part"] == "frame"]
    p = frames[0]["target_p"]
    e_v = np.linalg.eigh(out["P_V"])[1][:, -1]  # unit vector spanning E_V (dim 1 for this head)
    fig = Figure(figsize=(15.0, 8.4), constrained_layout=True)
    grid = fig.add_gridspec(2, 3, height_ratios=[1.05, 1.0])
    maps = []
    for col, k in enumerate(picks):
        ax = fig.add_subplot(grid[0, col], projection="mollweide")
        maps.append(ax)
        plot_density_mollweide(shown, result.states[k], ax=ax, log=True, vmin=norm.vmin, vmax=norm.vmax, colorbar=False,
                               resolution=300, title=f"t = {t[k]:g}:  W₂(ρₜ, Π♯ρ₀) = {frames[k]['w2_target']:.3f}")
        ax.set_yticklabels([])
        for lon, weight, name in ((math.pi / 2, p, "+e₁"), (-math.pi / 2, 1 - p, "−e₁")):
            ax.plot([lon], [0.0], marker="o", ms=11, mfc="none", mec="red", mew=1.6)
            ax.annotate(f"{name} ({weight:.2f})", (lon, 0.0), xytext=(0, -17), textcoords="offset points", ha="center",
                        color="red", fontsize=8)
        for sign in (1.0, -1.0):  # the dominant eigenvector of V: where the terminal phase (Conj. 1) takes the mass
            v = turn @ (sign * e_v)
            lon, lat = math.atan2(v[1], v[0]), math.asin(max(-1.0, min(1.0, float(v[2]))))
            ax.plot([lon], [lat], marker="x", ms=8, color="white", mew=1.6)
            ax.annotate("E_V", (lon, lat), xytext=(0, 8), textcoords="offset points", ha="center", color="white", fontsize=8)
    import matplotlib

    mappable = matplotlib.cm.ScalarMappable(norm=norm, cmap=matplotlib.colormaps["viridis"])
    fig.colorbar(mappable, ax=maps, orientation="vertical", fraction=0.02, pad=0.01, label="density m/A (log scale)")
    ax = fig.add_subplot(grid[1, 0])
    ft = np.array([r["t"] for r in frames])
    ax.plot(ft, [r["w2_target"] for r in frames], "o-", ms=3)
    ax.set_xlabel("time t")
    ax.set_ylabel(r"$W_2(\rho_t, \Pi_\sharp\rho_0)$ (geodesic)")
    ax.set_title(f"distance to the target (grid, N = {int(frames[0]['cells'])} cells)", fontsize=9)
    ax.grid(alpha=0.3)
    bx = fig.add_subplot(grid[1, 1])
    errs = np.array([r["mass_error"] for r in frames])
    bx.semilogy(ft, np.maximum(errs, 1e-17), "o-", ms=3, label="|Σm(t) − Σm(0)| per saved frame")
    bx.axhline(MASS_TOL, color="r", ls="--", lw=1.0, label=f"tolerance {MASS_TOL:g}")
    bx.set_ylim(1e-17, 1e-10)
    bx.set_xlabel("time t")
    bx.set_ylabel("mass error (0 drawn at 1e-17)")
    bx.set_title("mass conservation of the finite-volume scheme", fontsize=9)
    bx.legend(fontsize=8)
    bx.grid(alpha=0.3, which="both")
    cx = fig.add_subplot(grid[1, 2])
    h, e, fit, last = refinement(rows)
    cx.loglog(h, e, "o-", label=f"W₂ to the reference mesh at t = {STUDY_T:g}")
    cx.loglog(h, e[0] * (h / h[0]), "k:", lw=1.0, label="slope 1")
    ref = [r for r in rows if r["part"] == "refinement" and r["role"] == "reference"][0]
    from matplotlib.ticker import FixedLocator, FormatStrFormatter, NullFormatter

    cx.xaxis.set_major_locator(FixedLocator(list(h)))
    cx.xaxis.set_major_formatter(FormatStrFormatter("%.3f"))
    cx.xaxis.set_minor_formatter(NullFormatter())
    cx.set_xlabel("h = √(4π/N)")
    cx.set_ylabel("W₂ (geodesic)")
    cx.set_title(f"grid refinement against a reference mesh of N = {int(ref['cells'])} cells\n"
                 f"observed order {fit:.2f} (least squares), {last:.2f} (two finest meshes)", fontsize=9)
    cx.legend(fontsize=8)
    cx.grid(alpha=0.3, which="both")
    fig.suptitle("Thm 1 of Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931: the grid density concentrates onto Π♯ρ₀ = p δ(e₁) + (1−p) δ(−e₁) "
                 "(softmax, β = 16, S = VBᵀ = diag(1, 0.5, 0.25))\n"
                 "red ○: the target atoms ±e₁ with their weights; white ×: ±dominant eigenvector of V (terminal phase, Conj. 1); "
                 "log colour scale; map turned 90° about e₃", fontsize=10)
    fig.savefig(path, dpi=110)
    return path


def make(out_dir: str | Path, *, quick: bool = False) -> dict[str, Path]:
    """Compute, write ``ID.csv`` and ``ID.png`` under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    computed = run(quick=quick)
    rows = rows_of(computed)
    csv_path = out / f"{ID}.csv"
    write_rows(csv_path, rows)
    return {"png": plot(computed, read_csv(csv_path), out / f"{ID}.png"), "csv": csv_path}


def main(argv: Sequence[str] | None = None) -> int:
    return script_main(make, claim, DESCRIPTION, argv)


if __name__ == "__main__":
    sys.exit(main())
