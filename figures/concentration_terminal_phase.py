r"""The terminal phase: after the metastable window the mass moves to the dominant eigenspace of V (Conj. 1 of arXiv 2605.10931).

.. math::

    D(\rho_t, E_V) = \Big(\int d_S\big(x, E_V\cap S^{d-1}\big)^2\,d\rho_t(x)\Big)^{1/2}
    \xrightarrow[t\to\infty]{} 0,\qquad d_S(x, E\cap S^{d-1}) = \arccos\|P_Ex\|

(Conjecture 1: for fixed β and large t the mass drifts toward the
dominant eigenspace :math:`E_V` of :math:`V`, largest :math:`|\lambda|`); :math:`D` is :func:`meanfield.analysis.projection.eigenspace_distance`, the :math:`W_2` distance to
the measures carried by :math:`E_V`).  The default concentration head
(``data/concentration.toml``: :math:`S=VB^\top=\operatorname{diag}(1,0.5,0.25)`, so
:math:`E=\operatorname{span}(e_1)`, while :math:`V` has eigenvalues 2, 0.5, 0.25 and
:math:`E_V=\operatorname{span}((1,1,0)/\sqrt2)`, 45° away) is run at β = 16 from
the uniform measure on :math:`S^2` twice: with the **finite-volume grid solver**
(``solver.kind = "grid"``, the reference on :math:`S^2`) and with **particles**
(RK4, uniform sample; resolved at β = 16 since n ≥ 10β).  The concentration tracker
records :math:`W_2(\rho_t,\Pi_\sharp\rho_0)`, :math:`D(\rho_t,E_V)` and
:math:`D(\rho_t,E)` at every saved frame.

First the mass concentrates on :math:`\pm e_1` (:math:`D(\rho,E)` and :math:`W_2` fall),
then the two clusters slide to :math:`\pm(1,1,0)/\sqrt2`: :math:`D(\rho,E_V)\to0`
while :math:`W_2` to :math:`\Pi_\sharp\rho_0` climbs back to about the angle
:math:`\angle(E,E_V)=\pi/4`.  The particles' :math:`D(\rho,E_V)` goes to 0 (to
round-off) and their :math:`D(\rho,E)` to :math:`\pi/4`; the grid's clusters keep
a width of a few cells (the numerical diffusion of the second-order scheme, ``grid.order = 2``) and settle
slightly off :math:`\pm v`, toward :math:`\pm e`: with 2000 cells :math:`D(\rho,E_V)` ends
at 0.049 and :math:`D(\rho,E)` at 0.766 (the gallery's run).  That is a mesh effect: on 8000 cells (half the
spacing; a separate run of the same config, 59 min on a loaded core) they end at 0.027 and 0.784
(:math:`\pi/4=0.785`), while :math:`W_{2,\min}` moves from 0.330 to 0.329 and :math:`t_{\min}` stays 4.6.

Claim, for each solver: :math:`D(\rho_t,E_V)` does not increase after
:math:`t_{\min}` and ends below 0.1; :math:`D(\rho_t,E)` ends within 0.05 of
:math:`\angle(E,E_V)`; :math:`W_2(\rho_{t},\Pi_\sharp\rho_0)` ends above
:math:`1.5\,W_{2,\min}`.

Runtime: about 15 s with ``--quick`` (1000 cells and 400 particles to t = 20), under a
minute in full (2000 cells and 2000 particles to t = 30), on one core.

Command: ``python figures/concentration_terminal_phase.py [--quick] [--out DIR]``
(or ``meanfield reproduce concentration_terminal_phase``).
"""
from __future__ import annotations

import copy
import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.figures import script_main, write_rows

ID = "concentration_terminal_phase"
PAPER = "2605.10931"
THEOREM = "Conj. 1"
DESCRIPTION = "Distance to V's dominant eigenspace, to E and W2 to Π♯ρ₀ against t (grid and particles, β = 16): the mass leaves ±e for V's eigenvector"

# ---- constants -----------------------------------------------------------
BETA = 16.0
CELLS = 2000
PARTICLES = 2000
T_FINAL = 30.0
QUICK_CELLS = 1000
QUICK_PARTICLES = 400
QUICK_T_FINAL = 20.0
SAVE_EVERY = 0.1
CFL = 0.5
FINAL_V_DISTANCE = 0.1     # D(ρ, E_V) at the end must be below this
E_ANGLE_ATOL = 0.05        # |D(ρ, E) at the end − ∠(E, E_V)|
MONOTONE_ATOL = 1e-4       # allowed increase of D(ρ, E_V) between frames after t_min
RISE = 1.5                 # W2 at the end ≥ RISE · W2_min


def configs(*, quick: bool) -> dict[str, dict[str, Any]]:
    """The resolved grid and particle configs (``label -> config``)."""
    from meanfield.config import load_config
    from meanfield.solvers.experiments.concentration import DEFAULT_CONCENTRATION_CONFIG

    t_final = QUICK_T_FINAL if quick else T_FINAL
    grid = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    grid.pop("init", None)  # the uniform density on the grid
    grid["model"]["beta"] = BETA
    grid["solver"] = {"kind": "grid", "method": "ssprk3", "cfl": CFL, "t_final": t_final, "save_every": SAVE_EVERY}
    grid["grid"] = {"cells": QUICK_CELLS if quick else CELLS, "family": "fibonacci"}
    particles = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    particles["model"]["beta"] = BETA
    particles["init"] = {"kind": "uniform", "n": QUICK_PARTICLES if quick else PARTICLES, "seed": 0}
    particles["solver"].update(t_final=t_final, save_every=SAVE_EVERY)
    return {"grid": load_config(grid), "particle": load_config(particles)}


def eigenspace_angle(cfg: dict[str, Any]) -> float:
    r"""The angle :math:`\angle(E, E_V)=\arccos|\langle e, v\rangle|` between the dominant axes of :math:`S` and :math:`V`."""
    from meanfield.analysis.projection import dominant_projector, value_projector
    from meanfield.solvers.experiments.concentration import single_head

    head = single_head(cfg)
    S = np.asarray(head.V) @ (np.asarray(head.Q).T @ np.asarray(head.K)).T
    P_E, P_V = dominant_projector(S), value_projector(head.V)
    if round(np.trace(P_E)) != 1 or round(np.trace(P_V)) != 1:
        raise ValueError("this figure expects one-dimensional E and E_V")
    e = np.linalg.eigh(P_E)[1][:, -1]
    v = np.linalg.eigh(P_V)[1][:, -1]
    return float(np.arccos(min(1.0, abs(float(e @ v)))))


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """Rows ``solver, size, beta, angle_E_EV, t, w2_target, v_eigenspace_distance, e_eigenspace_distance``."""
    from meanfield.solvers.experiments.concentration import resolution_size
    from meanfield import simulate

    rows: list[dict[str, Any]] = []
    for label, cfg in configs(quick=quick).items():
        angle = eigenspace_angle(cfg)
        result = simulate(cfg)
        d = result.diagnostics
        for k, t in enumerate(result.t):
            rows.append({
                "solver": label, "size": resolution_size(cfg), "beta": BETA, "angle_E_EV": angle, "t": float(t),
                "w2_target": float(d["w2_target"][k]),
                "v_eigenspace_distance": float(d["v_eigenspace_distance"][k]),
                "e_eigenspace_distance": float(d["e_eigenspace_distance"][k]),
            })
    return rows


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: (v if k == "solver" else float(v)) for k, v in row.items()} for row in csv.DictReader(f)]


def series(rows: list[dict[str, Any]]) -> dict[str, dict[str, np.ndarray]]:
    """``solver -> {column -> array}``."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for label in dict.fromkeys(r["solver"] for r in rows):
        group = [r for r in rows if r["solver"] == label]
        out[label] = {k: np.array([r[k] for r in group]) for k in group[0] if k != "solver"}
    return out


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Checks of the CSV, per solver: D(ρ,E_V) non-increasing after t_min and small at the end; D(ρ,E) → ∠(E,E_V); W2 rises."""
    checks: dict[str, dict[str, Any]] = {}
    for label, s in series(read_csv(csv_path)).items():
        w, dv, de = s["w2_target"], s["v_eigenspace_distance"], s["e_eigenspace_distance"]
        i = int(np.argmin(w))
        angle = float(s["angle_E_EV"][0])
        rise = float(np.max(np.diff(dv[i:]))) if dv.size - i > 1 else math.nan
        checks[f"v_distance_non_increasing_after_t_min[{label}]"] = {
            "ok": bool(rise <= MONOTONE_ATOL), "value": rise, "expected": f"largest step of D(ρ,E_V) for t ≥ t_min = {s['t'][i]:.3g}: <= {MONOTONE_ATOL:g}",
        }
        checks[f"v_distance_final[{label}]"] = {
            "ok": bool(dv[-1] <= FINAL_V_DISTANCE), "value": float(dv[-1]), "expected": f"<= {FINAL_V_DISTANCE:g} (from D(ρ_0,E_V) = {dv[0]:.3g})",
        }
        checks[f"e_distance_final[{label}]"] = {
            "ok": bool(abs(de[-1] - angle) <= E_ANGLE_ATOL), "value": float(de[-1]), "expected": f"∠(E,E_V) = {angle:.4f} ± {E_ANGLE_ATOL:g}",
        }
        checks[f"w2_rises[{label}]"] = {
            "ok": bool(w[-1] >= RISE * w[i]), "value": float(w[-1] / w[i]), "expected": f"W2(t_final)/W2_min >= {RISE:g}",
        }
    return checks


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib.figure import Figure

    data = series(rows)
    fig = Figure(figsize=(7.0, 4.6), constrained_layout=True)
    ax = fig.add_subplot(1, 1, 1)
    styles = {"grid": "-", "particle": "--"}
    names = {"grid": "grid", "particle": "particles"}
    for label, s in data.items():
        ls = styles.get(label, "-.")
        size = int(s["size"][0])
        tag = f"{names.get(label, label)} ({size} {'cells' if label == 'grid' else 'tokens'})"
        ax.plot(s["t"], s["w2_target"], ls, color="C0", lw=2.8, alpha=0.8, label=rf"$W_2(\rho_t,\Pi_\sharp\rho_0)$, {tag}")
        ax.plot(s["t"], s["v_eigenspace_distance"], ls, color="C3", lw=1.5, label=rf"$D(\rho_t,E_V)$, {tag}")
        ax.plot(s["t"], s["e_eigenspace_distance"], ls, color="C2", lw=1.0, label=rf"$D(\rho_t,E)$, {tag}")
        i = int(np.argmin(s["w2_target"]))
        ax.axvline(s["t"][i], color="0.5", lw=0.8, ls=ls, label=rf"$t_{{\min}}$ = {s['t'][i]:.3g}, {names.get(label, label)}")
    angle = float(next(iter(data.values()))["angle_E_EV"][0])
    ax.axhline(angle, color="0.3", lw=0.8, ls=":", label=rf"$\angle(E,E_V) = {angle:.4f}$ (= π/4)")
    ax.set_xlabel("time t")
    ax.set_ylabel("geodesic distance (rad)")
    ax.set_ylim(0, 1.15)
    ax.set_title(
        rf"Conjecture 1 of Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931: the terminal phase at β = {BETA:g}" "\n"
        r"mass concentrates on $E=\mathrm{span}(e_1)$ of $S$, then moves to $E_V=\mathrm{span}((1,1,0)/\sqrt{2})$ of $V$" "\n"
        r"(for the grid $W_2$ and $D(\rho_t,E)$ nearly coincide: its two clusters carry masses close to $p$, $1-p$)",
        fontsize=9,
    )
    ax.legend(fontsize=6.5, loc="center right", bbox_to_anchor=(1.0, 0.4), ncol=1)
    ax.grid(alpha=0.3)
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
