r"""JKO τ-convergence to the pooled transformer PDE, per weight schedule (Massucco et al., arXiv 2605.18870).

This project's −I-heads variant, not the paper's setup: :math:`H` scalar heads :math:`\bar B_h=-I`
(value-aligned), uniform tokens and the pooled softmax, built by
:func:`meanfield.solvers.experiments.time_dependent.time_dependent_model`.  Massucco, Del Grande,
Carioni, Brune and Schönlieb run octahedral clusters, random symmetric heads :math:`D_h(0)=Z+Z^\top`
relaxing toward :math:`+I`, the mean over heads of the per-head softmax fields and explicit Euler
(``data/massucco_ou.toml``, ``data/massucco_oscillating.toml``; the figure
``time_dependent_authors_plateau``).

.. math::

    \mu_{k+1}\in\operatorname*{argmin}_\mu\ \frac{W_{m,2}^2(\mu,\mu_k)}{2\tau}+E(\mu,t_{k+1}),\qquad
    e(\tau)=\max_i d_S\big(x_i^{\mathrm{JKO},\tau}(T),\,x_i^{\mathrm{RK4}}(T)\big)=O(\tau)

(Massucco et al., arXiv 2605.18870: the minimizing movements converge to the gradient flow, i.e. the
pooled transformer PDE, as :math:`\tau\to0`; the scheme is an implicit Euler
step in the weighted geometry, so first order).  The particle JKO
(:mod:`meanfield.solvers.jko`, frozen mobility, tolerance :math:`10^{-10}` rad) is
compared with RK4 particles of the pooled PDE (step :math:`\min\tau/20`) from
the same :math:`n=32` tokens (:func:`meanfield.solvers.experiments.time_dependent.jko_tau_convergence`),
:math:`H=3` heads :math:`\bar B_h=-I`, descent, :math:`\beta=1`, for constant,
oscillating (:math:`A=2,\ \omega=1`) and OU (:math:`\kappa=1,\ \sigma=0.5`) weights.

The OU path is sampled exactly on a grid of step :math:`\Delta_\theta` and
interpolated linearly.  With :math:`\Delta_\theta=0.1` every τ of the study
resolves the path (its kinks fall on step ends) and the order is 1.  With the
default :math:`\Delta_\theta=0.01<\tau` the weights are rough on the scale of a
step (Brownian increments, Hölder-½): the error still falls with τ, but the
local orders scatter (0.4–1.6 between seeds) — drawn for reference, not claimed.

Claim (from the CSV): the least-squares slope of :math:`\log e` against
:math:`\log\tau` is in :math:`[0.8, 1.2]` for constant, oscillating and
path-resolving OU weights; for the rough OU path the error decreases
monotonically as τ is halved.

Runtime: about 4 s with ``--quick``, 10 s in full, on one core.

Command: ``python figures/time_dependent_jko_convergence.py [--quick] [--out DIR]``
(or ``meanfield reproduce time_dependent_jko_convergence``).
"""
from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.figures import script_main, write_rows

ID = "time_dependent_jko_convergence"
PAPER = "2605.18870"
THEOREM = "JKO convergence (minimizing movements)"
DESCRIPTION = "This project's −I-heads variant, not the paper's setup: error of the particle JKO scheme against the RK4 solution of the pooled PDE versus τ on log-log axes: first order for constant, oscillating and path-resolving OU weights (a rough OU path is shown unclaimed)"

# ---- constants -----------------------------------------------------------
HEADS = 3
N_TOKENS = 32
T_FINAL = 1.0
TAUS = (0.1, 0.05, 0.025, 0.0125)
SEED = 0
QUICK_T_FINAL = 0.5
QUICK_TAUS = (0.1, 0.05, 0.025, 0.0125)
#: label -> (schedule, weights_dt of the OU path, claimed order?)
CASES: dict[str, tuple[str, float, bool]] = {
    "constant": ("constant", 0.01, True),
    "oscillating": ("oscillating", 0.01, True),
    "ou_resolved": ("ou", 0.1, True),
    "ou_rough": ("ou", 0.01, False),
}
LABELS = {
    "constant": "constant weights",
    "oscillating": "oscillating weights",
    "ou_resolved": "OU, path step Δθ = 0.1 (resolved by every τ)",
    "ou_rough": "OU, path step Δθ = 0.01 < τ (rough; not claimed)",
}
ORDER_RANGE = (0.8, 1.2)


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """Rows ``case, schedule, weights_dt, tau, error, iterations``."""
    from meanfield.solvers.experiments.time_dependent import jko_tau_convergence

    rows: list[dict[str, Any]] = []
    for case, (schedule, weights_dt, _) in CASES.items():
        result = jko_tau_convergence(taus=QUICK_TAUS if quick else TAUS, H=HEADS, schedule=schedule, n=N_TOKENS,
                                     t_final=QUICK_T_FINAL if quick else T_FINAL, seed=SEED, weights_dt=weights_dt)
        for tau, err, its in zip(result["taus"], result["error"], result["iterations"]):
            rows.append({"case": case, "schedule": schedule, "weights_dt": weights_dt, "tau": float(tau), "error": float(err),
                         "iterations": int(its), "t_final": QUICK_T_FINAL if quick else T_FINAL})
    return rows


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: (v if k in ("case", "schedule") else float(v)) for k, v in row.items()} for row in csv.DictReader(f)]


def errors(rows: list[dict[str, Any]], case: str) -> tuple[np.ndarray, np.ndarray]:
    """``(tau decreasing, error)`` of one case."""
    group = sorted((r for r in rows if r["case"] == case), key=lambda r: -r["tau"])
    return np.array([r["tau"] for r in group]), np.array([r["error"] for r in group])


def fitted_order(rows: list[dict[str, Any]], case: str) -> tuple[float, float]:
    r"""``(c, p)`` of the least-squares fit :math:`\log e=\log c+p\log\tau`."""
    tau, err = errors(rows, case)
    p, log_c = np.polyfit(np.log(tau), np.log(err), 1)
    return float(np.exp(log_c)), float(p)


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Checks of the CSV: fitted order in [0.8, 1.2] (claimed cases); monotone decrease (rough OU)."""
    rows = read_csv(csv_path)
    checks: dict[str, dict[str, Any]] = {}
    for case, (_, _, claimed) in CASES.items():
        _, p = fitted_order(rows, case)
        if claimed:
            checks[f"order[{case}]"] = {"ok": bool(ORDER_RANGE[0] <= p <= ORDER_RANGE[1]), "value": p,
                                        "expected": f"in [{ORDER_RANGE[0]:g}, {ORDER_RANGE[1]:g}]"}
        else:
            _, err = errors(rows, case)
            checks[f"decreasing[{case}]"] = {"ok": bool(np.all(np.diff(err) < 0)), "value": float(err[-1] / err[0]),
                                             "expected": "error decreases at every halving of τ (value: e(τ_min)/e(τ_max))"}
    return checks


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.8, 4.8), constrained_layout=True)
    ax = fig.add_subplot(1, 1, 1)
    for k, case in enumerate(CASES):
        tau, err = errors(rows, case)
        c, p = fitted_order(rows, case)
        claimed = CASES[case][2]
        ax.loglog(tau, err, "o-" if claimed else "s--", color=f"C{k}", ms=5, lw=1.2 if claimed else 0.9,
                  mfc=None if claimed else "none", label=f"{LABELS[case]}: slope {p:.2f}")
    tau, err = errors(rows, "constant")
    ax.loglog(tau, err[0] * tau / tau[0] * 0.6, "k:", lw=1.0, label="slope 1")
    from matplotlib.ticker import FixedLocator, FormatStrFormatter, NullFormatter

    ax.xaxis.set_major_locator(FixedLocator(list(tau)))
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("JKO step τ")
    ax.set_ylabel(r"$\max_i\, d_S(x_i^{\mathrm{JKO}}(T),\, x_i^{\mathrm{RK4}}(T))$")
    ax.set_title(f"Massucco et al., arXiv 2605.18870, this project's −I-heads variant, not the paper's setup:\nJKO → pooled PDE as τ → 0 (H = {HEADS}, n = {N_TOKENS}, "
                 f"T = {rows[0]['t_final']:g}, descent, β = 1)", fontsize=9)
    ax.legend(fontsize=7.5)
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
