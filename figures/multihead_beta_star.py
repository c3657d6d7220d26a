r"""Critical inverse temperature :math:`\beta^*(H,n)` of per-head monotonicity (Thm 19 of arXiv 2605.04279).

.. math::

    \beta^* = \frac{1}{2\alpha}\ln\frac{c^*(H)^2\,(n-1)}{1-c^*(H)^2},\qquad
    c^*(H)=\frac{\sqrt{(H-1)^2+4}-(H-1)}{2},\qquad
    c(\beta)=\frac{e^{\alpha\beta}}{\sqrt{e^{2\alpha\beta}+n-1}},

for scalar heads :math:`B_h=\alpha I` and orthogonal tokens (:math:`n\le d`):
radial dominance (Condition 8), hence monotone per-head energies, holds while
the head/token cosine :math:`c(\beta)` stays below :math:`c^*(H)`, i.e. for
:math:`\beta<\beta^*`.  Left: :math:`\beta^*` against :math:`n` for several
:math:`H` — closed form (:func:`meanfield.analysis.theory.beta_star`, lines) and the
root of :math:`c(\beta)=c^*(H)` (:func:`meanfield.analysis.theory.beta_star_numeric`,
circles).  Right: :math:`c(\beta)` for one :math:`n`, crossing the levels
:math:`c^*(H)` at :math:`\beta^*`.  (The overlay with simulated per-head
:math:`dE_h/dt` sign changes belongs with the multi-head diagnostics.)

Claim: closed form = numerical root; :math:`c(\beta^*)=c^*(H)`; :math:`\beta^*`
grows with :math:`n` and falls with :math:`H`; :math:`c^*(2)=1/\varphi`.

Runtime: under a second.

Command: ``python figures/multihead_beta_star.py [--quick] [--out DIR]``.
"""
from __future__ import annotations

import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.figures import largest, script_main, smallest, write_rows

ID = "multihead_beta_star"
PAPER = "2605.04279"
THEOREM = "Thm 19"
DESCRIPTION = "critical inverse temperature β*(H, n) below which every head's energy is monotone: closed form against the root of c(β) = c*(H) (a check of the formula's algebra; the monotonicity itself is simulated in multihead_beta_star_sim)"

# ---- constants -----------------------------------------------------------
ALPHA = 1.0
HEADS = (2, 3, 4, 8, 16)
N_VALUES = np.unique(np.round(np.geomspace(2, 4096, 60)).astype(int))
QUICK_HEADS = (2, 4, 8)
QUICK_N_VALUES = np.array([2, 4, 8, 16, 64, 256, 1024])
N_COSINE = 64          # the n of the right panel
ROOT_RTOL = 1e-10      # closed form against the numerical root
COSINE_ATOL = 1e-12    # |c(β*) − c*(H)|


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """Rows ``H, n, c_star, beta_star, beta_star_numeric, cosine_at_beta_star``."""
    from meanfield.analysis.theory import beta_star, beta_star_numeric, c_star, head_cosine

    rows: list[dict[str, Any]] = []
    for H in QUICK_HEADS if quick else HEADS:
        for n in QUICK_N_VALUES if quick else N_VALUES:
            closed = beta_star(H, int(n), ALPHA)
            rows.append(
                {
                    "H": H,
                    "n": int(n),
                    "c_star": float(c_star(H)),
                    "beta_star": closed,
                    "beta_star_numeric": beta_star_numeric(H, int(n), ALPHA),
                    "cosine_at_beta_star": float(head_cosine(closed, n=int(n), alpha=ALPHA)),
                }
            )
    return rows


def read_csv(path: str | Path) -> list[dict[str, float]]:
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Closed form = root; c(β*) = c*(H); monotone in n and H; c*(2) = 1/φ."""
    rows = read_csv(csv_path)
    root_err = largest(abs(r["beta_star"] - r["beta_star_numeric"]) / max(1.0, abs(r["beta_star"])) for r in rows)
    cos_err = largest(abs(r["cosine_at_beta_star"] - r["c_star"]) for r in rows)
    heads = sorted({r["H"] for r in rows})
    ns = sorted({r["n"] for r in rows})
    table = {(r["H"], r["n"]): r["beta_star"] for r in rows}
    rising_in_n = smallest(table[(H, b)] - table[(H, a)] for H in heads for a, b in zip(ns, ns[1:]))
    falling_in_h = smallest(table[(g, n)] - table[(h, n)] for n in ns for g, h in zip(heads, heads[1:]))
    golden = [r["c_star"] for r in rows if r["H"] == 2]
    golden_err = abs(golden[0] - 2.0 / (1.0 + math.sqrt(5.0))) if golden else math.nan
    return {
        "closed_form=root": {"ok": root_err <= ROOT_RTOL, "value": root_err, "expected": f"relative error <= {ROOT_RTOL:g}"},
        "c(beta*)=c*(H)": {"ok": cos_err <= COSINE_ATOL, "value": cos_err, "expected": f"<= {COSINE_ATOL:g}"},
        "increasing_in_n": {"ok": rising_in_n > 0, "value": rising_in_n, "expected": "> 0"},
        "decreasing_in_H": {"ok": falling_in_h > 0, "value": falling_in_h, "expected": "> 0"},
        "c*(2)=1/golden": {"ok": golden_err <= 1e-15, "value": golden_err, "expected": "0"},
    }


def plot(rows: list[dict[str, float]], path: Path) -> Path:
    from matplotlib.figure import Figure

    from meanfield.analysis.theory import beta_star, head_cosine

    fig = Figure(figsize=(10.0, 4.0), constrained_layout=True)
    ax_b, ax_c = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    heads = list(dict.fromkeys(r["H"] for r in rows))
    top, bottom = 0.0, 0.0
    for k, H in enumerate(heads):
        group = [r for r in rows if r["H"] == H]
        n = [r["n"] for r in group]
        ax_b.plot(n, [r["beta_star"] for r in group], color=f"C{k}", label=f"H = {H:g}")
        ax_b.plot(n[::4], [r["beta_star_numeric"] for r in group][::4], "o", mfc="none", ms=4, color=f"C{k}")
        b_star = beta_star(H, N_COSINE, ALPHA)
        top, bottom = max(top, b_star), min(bottom, b_star)
        ax_c.axhline(group[0]["c_star"], color=f"C{k}", ls="--", lw=0.9)
        ax_c.plot([b_star], [group[0]["c_star"]], "o", color=f"C{k}", label=f"H = {H:g}: β* = {b_star:.3f}")
    ax_b.axhline(0.0, color="0.5", lw=0.8)
    ax_b.set_xscale("log")
    low, high = ax_b.get_ylim()
    ax_b.set_ylim(low, high)  # (fixed before the shading: drawn from the limit of the moment, it had stopped short of the bottom)
    if low < 0.0:
        ax_b.axhspan(low, 0.0, color="0.5", alpha=0.08)
        # in the panel's lower right corner (at n = 150 in data coordinates it had run past the right edge)
        ax_b.text(0.98, 0.02, "β* ≤ 0: no β > 0 keeps every head monotone", transform=ax_b.transAxes, ha="right",
                  va="bottom", fontsize=7, color="0.3")
    ax_b.set_xlabel("n (orthogonal tokens)")
    ax_b.set_ylabel(r"$\beta^*$ ($\alpha = %g$)" % ALPHA)
    ax_b.set_title("Thm 19 of Pendharkar, arXiv 2605.04279: per-head monotonicity for β < β*\n(lines: closed form; circles: root)", fontsize=9)
    ax_b.legend(fontsize=8)
    beta = np.linspace(bottom - 0.3, 1.3 * top + 0.5, 300)
    ax_c.plot(beta, head_cosine(beta, n=N_COSINE, alpha=ALPHA), color="k", lw=1.2, label=r"$c(\beta)$")
    ax_c.set_xlabel(r"$\beta$")
    ax_c.set_ylabel("head/token cosine")
    ax_c.set_title(f"c(β) crosses c*(H) at β* (n = {N_COSINE}; dashed: c*(H))", fontsize=9)
    ax_c.legend(fontsize=8, loc="lower right")
    for ax in (ax_b, ax_c):
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
