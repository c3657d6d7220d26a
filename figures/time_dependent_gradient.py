r"""The upper gradient :math:`|\partial E|(\mu_t,t)` against time for constant, OU and oscillating heads (Massucco et al., arXiv 2605.18870).

This project's −I-heads variant, not the paper's setup: :math:`H` scalar heads :math:`\bar B_h=-I`
(value-aligned), uniform tokens and the pooled softmax, built by
:func:`meanfield.solvers.experiments.time_dependent.time_dependent_model`.  Massucco, Del Grande,
Carioni, Brune and Schönlieb run octahedral clusters, random symmetric heads :math:`D_h(0)=Z+Z^\top`
relaxing toward :math:`+I`, the mean over heads of the per-head softmax fields and explicit Euler
(``data/massucco_ou.toml``, ``data/massucco_oscillating.toml``; the figure
``time_dependent_authors_plateau``).

.. math::

    |\partial E|^2(\mu,t) = \int \hat b_{\Theta_t}^\mu(x)\,\Big\|P^\perp_x\nabla\frac{\delta E}{\delta\mu}(x,t)\Big\|^2 d\mu(x),
    \qquad \hat b = \Big(\int b_\theta^{-1}\,d\Theta_t(\theta)\Big)^{-1}

(Massucco et al., arXiv 2605.18870: the metric slope of the time-dependent energy).  Long-time
behaviour: for constant weights the flow is autonomous and :math:`|\partial E|\to0`
(here exponentially, as the cloud collapses to one cluster); for integrable
Ornstein–Uhlenbeck weights it settles on a plateau set by the weight noise; for
oscillating weights (:math:`\int|\dot\Theta_t|dt=\infty`) it does not decay.
Authors' convention (:mod:`meanfield.solvers.experiments.time_dependent`): descent, :math:`1/H` head weights,
:math:`\beta=1`, :math:`H=4` scalar heads :math:`\bar B_h=-I`, OU
:math:`\kappa=1,\ \sigma=0.5`, oscillation :math:`A=2,\ \omega=1`; one uniform
cloud per seed (five seeds, the tokens and the OU path drawn from each; two with ``--quick``), RK4
particles of step 0.05 (:func:`meanfield.solvers.experiments.time_dependent.ou_vs_oscillating`), and (full
form) the first seed again at step 0.025.

Claim (from the CSV), comparing the window means of :math:`|\partial E|` over
:math:`[3T/4,T]` (late) and :math:`[T/4,T/2)` (early, after the first
rearrangement of the cloud), for every seed: constant decays by at least two orders of magnitude
(late/early :math:`\le10^{-2}`); oscillating does not decay (late/early
:math:`\ge0.3`); OU plateaus (late/early :math:`\ge0.3`, and its late level is
more than 100 times the constant one).  Converged in the step: the late levels of OU and
oscillating heads move by at most :data:`STEP_CONVERGED` at half the step (measured: below 1e-4;
the constant heads' late level, 1e-13 to 1e-12, is round-off).  The seeds' spread is in the legend
(late/early from the least to the largest: OU 0.68 … 1.3, oscillating 0.68 … 0.83).

Runtime: about 8 s with ``--quick``, 30 s in full, on one quiet core.

Command: ``python figures/time_dependent_gradient.py [--quick] [--out DIR]``
(or ``meanfield reproduce time_dependent_gradient``).
"""
from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.figures import largest, script_main, smallest, write_rows

ID = "time_dependent_gradient"
PAPER = "2605.18870"
THEOREM = "long-time behaviour (upper gradient)"
DESCRIPTION = "This project's −I-heads variant, not the paper's setup: upper gradient |∂E| against t (log scale): constant heads decay by orders of magnitude, OU heads plateau, oscillating heads do not decay"

# ---- constants -----------------------------------------------------------
HEADS = 4
N_TOKENS = 64
T_FINAL = 40.0
SEEDS = (0, 1, 2, 3, 4)
QUICK_SEEDS = (0, 1)
DT = 0.05               # the RK4 step; the first seed runs at DT / 2 too
STEP_CONVERGED = 0.01   # OU and oscillating: late |∂E| at DT/2 within this (relative) of DT
QUICK_N_TOKENS = 32
QUICK_T_FINAL = 20.0
SCHEDULES = ("constant", "ou", "oscillating")
LABELS = {"constant": "constant weights", "ou": "OU weights (integrable)", "oscillating": "oscillating weights"}
COLORS = {"constant": "C2", "ou": "C0", "oscillating": "C3"}
EARLY = (0.25, 0.5)     # window [T/4, T/2) as fractions of T
LATE = (0.75, 1.0)      # window [3T/4, T]
DECAY_MAX = 1e-2        # constant: late/early at most this
NO_DECAY_MIN = 0.3      # oscillating and OU: late/early at least this
PLATEAU_OVER_CONSTANT = 100.0


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """Rows ``schedule, seed, dt, t, upper_gradient, upper_gradient2, G2, energy, dEdt_explicit, n_clusters, min_inner,
    n_tokens`` for every seed at :data:`DT`, and the first seed at ``DT / 2``."""
    from meanfield.solvers.experiments.time_dependent import ou_vs_oscillating

    seeds = QUICK_SEEDS if quick else SEEDS
    rows: list[dict[str, Any]] = []
    for seed, dt in [(seed, DT) for seed in seeds] + ([] if quick else [(seeds[0], DT / 2)]):
        result = ou_vs_oscillating(H=HEADS, n=QUICK_N_TOKENS if quick else N_TOKENS,
                                   t_final=QUICK_T_FINAL if quick else T_FINAL, seed=seed, dt=dt)
        for name in SCHEDULES:
            run = result[name]
            for k, t in enumerate(run["t"]):
                rows.append({
                    "schedule": name, "seed": seed, "dt": dt, "t": float(t), "upper_gradient": float(run["slope"][k]),
                    "upper_gradient2": float(run["slope2"][k]), "G2": float(run["G2"][k]), "energy": float(run["energy"][k]),
                    "dEdt_explicit": float(run["dEdt_explicit"][k]), "n_clusters": float(run["n_clusters"][k]),
                    "min_inner": float(run["min_inner"][k]), "n_tokens": float(run["x"].shape[1]),
                })
    return rows


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: (v if k == "schedule" else float(v)) for k, v in row.items()} for row in csv.DictReader(f)]


def seeds_of(rows: list[dict[str, Any]]) -> list[float]:
    """The seeds run at the base step, in order."""
    return sorted({r["seed"] for r in rows if r["dt"] == DT})


def series(rows: list[dict[str, Any]], schedule: str, key: str, *, seed: float | None = None,
           dt: float = DT) -> tuple[np.ndarray, np.ndarray]:
    """``(t, rows[key])`` of one run: ``schedule``, ``seed`` (default the first) and step ``dt``."""
    seed = seeds_of(rows)[0] if seed is None else seed
    group = [r for r in rows if r["schedule"] == schedule and r["seed"] == seed and r["dt"] == dt]
    return np.array([r["t"] for r in group]), np.array([r[key] for r in group])


def window_means(rows: list[dict[str, Any]], schedule: str, *, seed: float | None = None, dt: float = DT) -> tuple[float, float]:
    r"""Mean :math:`|\partial E|` over the early and the late window of one run."""
    t, g = series(rows, schedule, "upper_gradient", seed=seed, dt=dt)
    T = float(t[-1])
    early = g[(t >= EARLY[0] * T) & (t < EARLY[1] * T)]
    late = g[(t >= LATE[0] * T) & (t <= LATE[1] * T)]
    return float(early.mean()), float(late.mean())


def ratios(rows: list[dict[str, Any]], schedule: str) -> np.ndarray:
    """Late/early of every seed at the base step."""
    return np.array([late / early for early, late in (window_means(rows, schedule, seed=s) for s in seeds_of(rows))])


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Checks of the CSV, for every seed: constant decays by ≥ 2 orders, oscillating and OU do not decay, OU ≫ constant
    late; and the late levels of OU and oscillating heads converged in the step."""
    rows = read_csv(csv_path)
    seeds = seeds_of(rows)
    ratio = {name: ratios(rows, name) for name in SCHEDULES}
    level = smallest(window_means(rows, "ou", seed=s)[1] / window_means(rows, "constant", seed=s)[1] for s in seeds)
    every = f"for each of the {len(seeds)} seeds"
    checks = {
        "constant_decays": {"ok": bool(ratio["constant"].max() <= DECAY_MAX), "value": float(ratio["constant"].max()),
                            "expected": f"late/early <= {DECAY_MAX:g} {every}"},
        "oscillating_does_not_decay": {"ok": bool(ratio["oscillating"].min() >= NO_DECAY_MIN), "value": float(ratio["oscillating"].min()),
                                       "expected": f"late/early >= {NO_DECAY_MIN:g} {every}"},
        "ou_plateaus": {"ok": bool(ratio["ou"].min() >= NO_DECAY_MIN), "value": float(ratio["ou"].min()),
                        "expected": f"late/early >= {NO_DECAY_MIN:g} {every}"},
        "ou_plateau_above_constant": {"ok": bool(level >= PLATEAU_OVER_CONSTANT), "value": level,
                                      "expected": f"late OU / late constant >= {PLATEAU_OVER_CONSTANT:g} {every}"},
    }
    if any(r["dt"] == DT / 2 for r in rows):  # the full form: the first seed at half the step
        moved = largest(abs(window_means(rows, name, dt=DT / 2)[1] / window_means(rows, name)[1] - 1.0) for name in ("ou", "oscillating"))
        checks["step_converged"] = {"ok": bool(moved <= STEP_CONVERGED), "value": moved,
                                    "expected": f"late |∂E| of OU and oscillating heads at dt = {DT / 2:g} within {STEP_CONVERGED:g} of dt = {DT:g}"}
    return checks


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11.0, 4.3), constrained_layout=True)
    ax, bx = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    T = max(r["t"] for r in rows)
    for lo, hi, label in ((*EARLY, "early window"), (*LATE, "late window")):
        ax.axvspan(lo * T, hi * T, color="0.85" if label.startswith("early") else "0.75", alpha=0.5, lw=0)
    seeds = seeds_of(rows)
    for name in SCHEDULES:
        for seed in seeds[1:]:  # the other seeds, thin: the spread of the draw
            t, g = series(rows, name, "upper_gradient", seed=seed)
            ax.semilogy(t, g, color=COLORS[name], lw=0.5, alpha=0.35)
        t, g = series(rows, name, "upper_gradient")
        early, late = window_means(rows, name)
        spread = ratios(rows, name)
        ax.semilogy(t, g, color=COLORS[name], lw=1.2,
                    label=f"{LABELS[name]}: late/early = {spread.min():.2g} … {spread.max():.2g} over {len(seeds)} seeds")
        ax.plot([EARLY[0] * T, EARLY[1] * T], [early, early], color=COLORS[name], ls="--", lw=1.0)
        ax.plot([LATE[0] * T, LATE[1] * T], [late, late], color=COLORS[name], ls="--", lw=1.0)
        t, k = series(rows, name, "n_clusters")
        wide = name == "constant"  # drawn wide underneath: it shares the single-cluster end with OU
        bx.plot(t, k, color=COLORS[name], lw=3.0 if wide else 1.2, alpha=0.6 if wide else 1.0, label=LABELS[name])
    ax.set_xlabel("time t")
    ax.set_ylabel(r"upper gradient $|\partial E|(\mu_t, t)$")
    ax.set_title("|∂E| against t (thick: seed 0, thin: the other seeds; shaded: early and late windows; dashed: "
                 "their means)", fontsize=8)
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3, which="both")
    bx.set_yscale("log")
    bx.set_xlabel("time t")
    bx.set_ylabel("number of clusters (⟨xᵢ,xⱼ⟩ ≥ 1 − 10⁻³ linked)")
    bx.set_title("clustering of the same runs", fontsize=9)
    bx.legend(fontsize=8)
    bx.grid(alpha=0.3, which="both")
    n = int(rows[0]["n_tokens"])
    fig.suptitle(f"Massucco et al., arXiv 2605.18870, this project's −I-heads variant, not the paper's setup:\nupper gradient for constant, OU and oscillating heads (H = {HEADS}, n = {n}, descent, β = 1)",
                 fontsize=10)
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
