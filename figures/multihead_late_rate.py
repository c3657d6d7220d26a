r"""Late clustering rate of heterogeneous scalar heads (Thm 22 of arXiv 2605.04279).

.. math::

    \varepsilon(t) = 1-\gamma(t) \sim C\,e^{-2\Lambda t},\qquad \Lambda=\sum_h\lambda_h,

for softmax attention with :math:`B_h=V_h=\lambda_h I` and equiangular tokens
(:math:`\langle x_i,x_j\rangle=\gamma`, :math:`n\le d`).  The particle solver
(RK4, :func:`meanfield.simulate`) is run from orthogonal tokens
(:math:`\gamma_0=0`) for several head sets; :math:`\log(1-\gamma)` is measured
from the chord lengths :math:`1-\langle x_i,x_j\rangle=\tfrac12\|x_i-x_j\|^2`
(accurate down to :math:`\varepsilon\sim10^{-12}`) and drawn against the
equiangular ODE (:func:`meanfield.analysis.theory.solve_equiangular_log_gap`) and the
slope :math:`-2\Lambda`.

Claim: the least-squares slope of :math:`\log\varepsilon` over the late window
(:math:`\varepsilon<10^{-3}`) is :math:`-2\Lambda` within 1 %, and particles
follow the ODE.

Runtime: about 1 s with ``--quick``, 5 s in full, on one core.

Command: ``python figures/multihead_late_rate.py [--quick] [--out DIR]``
(or ``meanfield reproduce multihead_late_rate``).
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

ID = "multihead_late_rate"
PAPER = "2605.04279"
THEOREM = "Thm 22"
DESCRIPTION = "log(1-γ) against t for heterogeneous scalar heads: particles follow the equiangular ODE and decay at slope -2Λ"

# ---- constants -----------------------------------------------------------
BETA = 1.0
N_TOKENS = 4
DIM = 4
DT = 0.01
SAVE_EVERY = 0.1
HEAD_SETS = ((1.0,), (0.5, 1.0), (0.25, 0.5, 1.0), (0.2, 0.4, 0.6, 0.8))
T_FINAL = 12.0
QUICK_HEAD_SETS = ((1.0,), (0.5, 1.0))
QUICK_T_FINAL = 6.0
LATE_GAP = 1e-3        # fit window: 1 - γ below this
SMALLEST_GAP = 1e-11   # and above this (chord-length resolution)
SLOPE_RTOL = 0.01
ODE_ATOL = 1e-5        # |log ε_particles − log ε_ODE|


def _label(lambdas: Sequence[float]) -> str:
    return "+".join(f"{lam:g}" for lam in lambdas)


def log_gap_particles(x: np.ndarray) -> np.ndarray:
    r""":math:`\log(1-\bar\gamma)` per frame, with :math:`1-\gamma_{ij}=\tfrac12\|x_i-x_j\|^2`; ``x`` is (T, n, d)."""
    i, j = np.triu_indices(x.shape[1], 1)
    gap = 0.5 * np.mean(np.sum((x[:, i, :] - x[:, j, :]) ** 2, axis=-1), axis=1)
    with np.errstate(divide="ignore"):
        return np.log(gap)


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """Rows ``heads, Lambda, t, log_gap_particle, log_gap_ode`` for every head set and saved time."""
    from meanfield.config import load_config
    from meanfield.analysis.theory import solve_equiangular_log_gap
    from meanfield import simulate

    rows: list[dict[str, Any]] = []
    for lambdas in QUICK_HEAD_SETS if quick else HEAD_SETS:
        heads = [{"Q": math.sqrt(lam), "K": math.sqrt(lam), "V": lam} for lam in lambdas]
        cfg = load_config(
            {
                "model": {"d": DIM, "beta": BETA, "attention": "softmax", "heads": heads},
                "init": {"kind": "equiangular", "n": N_TOKENS, "gamma": 0.0, "seed": 0},
                "solver": {"method": "rk4", "dt": DT, "t_final": QUICK_T_FINAL if quick else T_FINAL, "save_every": SAVE_EVERY},
                "track": {"energy": False},
            }
        )
        result = simulate(cfg)
        particles = log_gap_particles(np.asarray(result.states))
        ode = np.asarray(solve_equiangular_log_gap(0.0, result.t, lambdas=lambdas, beta=BETA, n=N_TOKENS))
        for t, u_p, u_o in zip(result.t, particles, ode):
            rows.append({"heads": _label(lambdas), "Lambda": sum(lambdas), "t": float(t), "log_gap_particle": float(u_p), "log_gap_ode": float(u_o)})
    return rows


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: (v if k == "heads" else float(v)) for k, v in row.items()} for row in csv.DictReader(f)]


def late_slopes(rows: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """``heads -> (fitted slope over the late window, -2Λ)``."""
    out: dict[str, tuple[float, float]] = {}
    for label in dict.fromkeys(r["heads"] for r in rows):
        group = [r for r in rows if r["heads"] == label]
        t = np.array([r["t"] for r in group])
        u = np.array([r["log_gap_particle"] for r in group])
        window = (u < math.log(LATE_GAP)) & (u > math.log(SMALLEST_GAP))
        slope = float(np.polyfit(t[window], u[window], 1)[0]) if window.sum() >= 3 else math.nan
        out[label] = (slope, -2.0 * group[0]["Lambda"])
    return out


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Checks of the CSV: late slope = −2Λ within 1 %; particles on the ODE."""
    rows = read_csv(csv_path)
    checks: dict[str, dict[str, Any]] = {}
    for label, (slope, expected) in late_slopes(rows).items():
        rel = abs(slope / expected - 1.0)
        checks[f"slope[{label}]"] = {"ok": bool(rel <= SLOPE_RTOL), "value": slope, "expected": f"{expected:g} ± {SLOPE_RTOL:.0%}"}
    finite = [r for r in rows if math.isfinite(r["log_gap_particle"]) and r["log_gap_particle"] > math.log(SMALLEST_GAP)]
    gap = largest(abs(r["log_gap_particle"] - r["log_gap_ode"]) for r in finite)  # NaN (a failure) for a non-finite ODE value
    checks["particles_vs_ode"] = {"ok": bool(gap <= ODE_ATOL), "value": gap, "expected": f"<= {ODE_ATOL:g}"}
    return checks


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib.figure import Figure

    labels = list(dict.fromkeys(r["heads"] for r in rows))
    fig = Figure(figsize=(6.4, 4.2 + 0.15 * len(labels)), constrained_layout=True)  # room for the legend below
    ax = fig.add_subplot(1, 1, 1)
    slopes = late_slopes(rows)
    for k, label in enumerate(labels):
        group = [r for r in rows if r["heads"] == label]
        t = np.array([r["t"] for r in group])
        color = f"C{k}"
        ax.plot(t, [r["log_gap_ode"] for r in group], color=color, lw=1.2, label=f"λ = {label}: ODE (line); particles' fitted slope {slopes[label][0]:.4f}")
        ax.plot(t[::4], [r["log_gap_particle"] for r in group][::4], "o", ms=3.5, mfc="none", color=color)
        anchor = group[-1]
        ax.plot(t, anchor["log_gap_ode"] + slopes[label][1] * (t - anchor["t"]), ls=":", color=color, lw=0.9)
    shown = [r["log_gap_particle"] for r in rows if math.isfinite(r["log_gap_particle"])] + [r["log_gap_ode"] for r in rows if math.isfinite(r["log_gap_ode"])]
    ax.set_ylim(max(math.log(SMALLEST_GAP), min(shown)) - 2, 1)
    ax.set_xlabel("time t")
    ax.set_ylabel(r"$\log(1-\gamma)$")
    # two lines: on one, the quick form's wider tick labels had pushed its end ("slope −2Λ)") off the picture
    ax.set_title("Thm 22 of Pendharkar, arXiv 2605.04279: late rate $2\\Lambda$\n(circles: particles; dotted: slope $-2\\Lambda$)",
                 fontsize=9)
    # below the axes: inside them (lower left) it had covered the steepest curves of the full form
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13))
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
