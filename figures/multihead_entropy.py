r"""Attention entropy rises to :math:`\log n` (Thm 27 of arXiv 2605.04279).

.. math::

    \mathcal H_i(t) = -\sum_j p_{ij}\log p_{ij},\qquad
    p_{ij}=\frac{e^{\beta\lambda\langle x_i,x_j\rangle}}{\sum_k e^{\beta\lambda\langle x_i,x_k\rangle}},\qquad
    \frac{d\mathcal H_i}{dt}=-\beta^2\,\mathrm{Cov}_{p_i}(s_{i\cdot},\dot s_{i\cdot})\ \ge 0

in the scalar equiangular case (one softmax head :math:`B=V=\lambda I`,
tokens with :math:`\langle x_i,x_j\rangle=\gamma`): the entropy of every
attention row is non-decreasing and tends to :math:`\log n` as the tokens
collapse — clustering *equalises* the scores instead of sharpening them.
The particle solver (RK4, :func:`meanfield.simulate`) runs from
orthogonal tokens for several :math:`\beta`; the entropy is computed directly
from the saved trajectory (:func:`row_entropy`), and drawn against
:func:`meanfield.analysis.theory.equiangular_entropy` along the solved equiangular ODE.

Claim: the measured entropy is non-decreasing, ends within :math:`10^{-3}` of
:math:`\log n`, and equals the closed form.

Runtime: about 1 s (``--quick``) to 4 s.

Command: ``python figures/multihead_entropy.py [--quick] [--out DIR]``.
"""
from __future__ import annotations

import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.figures import largest, script_main

ID = "multihead_entropy"
PAPER = "2605.04279"
THEOREM = "Thm 27"
DESCRIPTION = "attention entropy of the scalar equiangular flow, measured from the particle trajectory, rises monotonically to log n"

# ---- constants -----------------------------------------------------------
LAMBDA = 1.0
N_TOKENS = 6
BETAS = (1.0, 2.0, 3.0, 4.0, 5.0)
T_FINAL = 25.0
QUICK_BETAS = (1.0, 3.0)
QUICK_T_FINAL = 10.0
DT = 0.02
SAVE_EVERY = 0.1
MONOTONE_TOL = 1e-9      # allowed decrease between frames (round-off)
FINAL_TOL = 1e-3         # log n − H(T)
CLOSED_FORM_TOL = 1e-8   # |H_particles − H_closed form|


def row_entropy(x: np.ndarray, *, beta: float, lam: float) -> np.ndarray:
    r"""Entropy of every softmax row, :math:`-\sum_j p_{ij}\log p_{ij}`, for ``x`` (T, n, d); returns (T, n)."""
    scores = beta * lam * np.einsum("tid,tjd->tij", x, x)
    scores -= scores.max(axis=2, keepdims=True)
    log_p = scores - np.log(np.sum(np.exp(scores), axis=2, keepdims=True))
    return -np.sum(np.exp(log_p) * log_p, axis=2)


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """Rows ``beta, t, entropy_mean, entropy_min, entropy_max, entropy_closed_form, log_n``."""
    from meanfield.config import load_config
    from meanfield.analysis.theory import equiangular_entropy, solve_equiangular
    from meanfield import simulate

    rows: list[dict[str, Any]] = []
    root = math.sqrt(LAMBDA)
    for beta in QUICK_BETAS if quick else BETAS:
        cfg = load_config(
            {
                "model": {"d": N_TOKENS, "beta": beta, "attention": "softmax", "heads": [{"Q": root, "K": root, "V": LAMBDA}]},
                "init": {"kind": "equiangular", "n": N_TOKENS, "gamma": 0.0, "seed": 0},
                "solver": {"method": "rk4", "dt": DT, "t_final": QUICK_T_FINAL if quick else T_FINAL, "save_every": SAVE_EVERY},
                "track": {"energy": False},
            }
        )
        result = simulate(cfg)
        entropy = row_entropy(np.asarray(result.states), beta=beta, lam=LAMBDA)
        gamma = solve_equiangular(0.0, result.t, lambdas=[LAMBDA], beta=beta, n=N_TOKENS)
        closed = np.asarray(equiangular_entropy(gamma, lam=LAMBDA, beta=beta, n=N_TOKENS))
        for k, t in enumerate(result.t):
            rows.append(
                {
                    "beta": beta, "t": float(t),
                    "entropy_mean": float(entropy[k].mean()), "entropy_min": float(entropy[k].min()), "entropy_max": float(entropy[k].max()),
                    "entropy_closed_form": float(closed[k]), "log_n": math.log(N_TOKENS),
                }
            )
    return rows


def read_csv(path: str | Path) -> list[dict[str, float]]:
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Monotone entropy, limit log n, agreement with the closed form."""
    rows = read_csv(csv_path)
    checks: dict[str, dict[str, Any]] = {}
    errors: list[float] = []
    for beta in dict.fromkeys(r["beta"] for r in rows):
        group = [r for r in rows if r["beta"] == beta]
        lowest = np.array([r["entropy_min"] for r in group])
        highest = np.array([r["entropy_max"] for r in group])
        drop = float(np.max(highest[:-1] - lowest[1:]))  # largest decrease of any row between frames
        gap = group[-1]["log_n"] - group[-1]["entropy_mean"]
        checks[f"non_decreasing[beta={beta:g}]"] = {"ok": drop <= MONOTONE_TOL, "value": drop, "expected": f"largest drop <= {MONOTONE_TOL:g}"}
        checks[f"limit_log_n[beta={beta:g}]"] = {"ok": -1e-12 <= gap <= FINAL_TOL, "value": gap, "expected": f"0 <= log n - H(T) <= {FINAL_TOL:g}"}
        errors += [abs(r[key] - r["entropy_closed_form"]) for r in group for key in ("entropy_min", "entropy_max")]
    worst = largest(errors)
    checks["particles_vs_closed_form"] = {"ok": worst <= CLOSED_FORM_TOL, "value": worst, "expected": f"<= {CLOSED_FORM_TOL:g}"}
    return checks


def plot(rows: list[dict[str, float]], path: Path) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2), constrained_layout=True)
    ax = fig.add_subplot(1, 1, 1)
    for k, beta in enumerate(dict.fromkeys(r["beta"] for r in rows)):
        group = [r for r in rows if r["beta"] == beta]
        t = np.array([r["t"] for r in group])
        ax.plot(t, [r["entropy_closed_form"] for r in group], color=f"C{k}", lw=1.2, label=f"β = {beta:g}")
        ax.plot(t[::5], [r["entropy_mean"] for r in group][::5], "o", ms=3.5, mfc="none", color=f"C{k}")
    ax.axhline(rows[0]["log_n"], color="k", ls="--", lw=0.9)
    ax.text(0.0, rows[0]["log_n"], f"log n (n = {N_TOKENS})", va="bottom", fontsize=8)
    ax.set_xlabel("time t")
    ax.set_ylabel(r"attention entropy $\mathcal{H}_i$")
    ax.set_title("Thm 27 of Pendharkar, arXiv 2605.04279: entropy of the scalar equiangular flow\n"
                 "(lines: closed form; circles: particles)", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.savefig(path, dpi=120)
    return path


def make(out_dir: str | Path, *, quick: bool = False) -> dict[str, Path]:
    """Compute, write ``ID.csv`` and ``ID.png`` under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = compute(quick=quick)
    csv_path = out / f"{ID}.csv"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({k: repr(v) for k, v in row.items()} for row in rows)
    return {"png": plot(read_csv(csv_path), out / f"{ID}.png"), "csv": csv_path}


def main(argv: Sequence[str] | None = None) -> int:
    return script_main(make, claim, DESCRIPTION, argv)


if __name__ == "__main__":
    sys.exit(main())
