r"""Phase diagram of self-attention dynamics over random initialisations (arXiv 2312.10794).

.. math::

    \dot x_i = P^\perp_{x_i}\sum_j \frac{e^{\beta\langle x_i,x_j\rangle}}{\sum_k e^{\beta\langle x_i,x_k\rangle}}\,x_j,
    \qquad \hat P_1(\beta,t) = \frac1S\sum_{s=1}^S \mathbf 1\{K_s(\beta,t)=1\}

(one softmax head, :math:`Q=K=V=I`), the phase diagram of Geshkovski, Letrouit,
Polyanskiy and Rigollet, *A mathematical perspective on Transformers* (arXiv
2312.10794), whose public code sweeps :math:`n = 32` tokens, :math:`\beta\in[0.1, 9]`,
:math:`t\le 30`: tokens started uniformly at random cluster, the sooner the smaller
:math:`\beta`; at large :math:`\beta` several clusters persist for long times
(metastability).  Here on :math:`S^2` (``d = 3``) through
:func:`meanfield.solvers.phase.phase_diagram`: :math:`S` random initialisations
per :math:`\beta` (the same for every :math:`\beta`), RK4 with their step
:math:`\Delta t = 0.1`; :math:`K_s` counts the connected components of the graph
linking tokens within :math:`\arccos 0.999` of each other, the Gram rank the
eigenvalues of :math:`XX^\top` above :math:`10^{-3}` (their thresholds).  The first
``REFINE`` initialisations are run again at :math:`\Delta t/2`: the ``flips``
column is the fraction of them whose one-cluster indicator changes.

Claims (from the CSV): :math:`\hat P_1` increases with :math:`t` at fixed
:math:`\beta` and decreases with :math:`\beta` at fixed :math:`t` (no step the
other way beyond 3 standard errors of the difference), the mean number of clusters
decreases with :math:`t` likewise, the diagram has a transition (at the last time
:math:`\hat P_1` falls by at least 0.5 from the smallest to the largest
:math:`\beta`), probabilities lie in [0, 1], and halving the step changes at most
2 % of the indicators.

Runtime: about 15 s (``--quick``: 5 β × 160 initialisations, t ≤ 12) to 5 min
(13 β × 256, t ≤ 30) on 2 cores.

Command: ``python figures/perspective_phase_diagram.py [--quick] [--out DIR]``.
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

ID = "perspective_phase_diagram"
PAPER = "2312.10794"
THEOREM = "phase diagram (clustering vs β, t)"
DESCRIPTION = ("phase diagram over (beta, t) of n = 32 tokens from random initialisations: P(one cluster), the mean "
               "number of clusters and the Gram rank, with standard errors over the initialisations")

# ---- constants -----------------------------------------------------------
N_TOKENS = 32
D = 3
DT = 0.1                  # the step of the authors' code
BATCH = 256
BETAS = (0.1, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)
T_FINAL = 30.0
SAVE_EVERY = 0.5
SAMPLES = 256
REFINE = 64               # initialisations run again at DT/2
QUICK_BETAS = (0.5, 1.0, 2.0, 4.0, 8.0)
QUICK_T_FINAL = 12.0
QUICK_SAVE_EVERY = 1.0
QUICK_SAMPLES = 160
QUICK_REFINE = 32
SIGMAS = 3.0              # a step the wrong way counts beyond this many standard errors of the difference
TRANSITION = 0.5          # least drop of P(one cluster) from the smallest to the largest β at the last time
FLIPS_TOL = 0.02          # largest fraction of indicators that halving the step may change


def _config(betas: Sequence[float], *, t_final: float, save_every: float, samples: int, dt: float) -> dict[str, Any]:
    return {
        "model": {"d": D, "attention": "softmax"},
        "init": {"kind": "uniform", "n": N_TOKENS, "seed": 0},
        "solver": {"method": "rk4", "dt": dt, "t_final": t_final, "save_every": save_every},
        "phase": {"betas": list(betas), "samples": samples, "batch": BATCH},
    }


def compute(*, quick: bool = False) -> tuple[list[dict[str, Any]], Any]:
    """Rows per (β, t) of the diagram, with the step-halving columns; and the diagram itself."""
    from meanfield.solvers.phase import phase_diagram

    betas = QUICK_BETAS if quick else BETAS
    t_final = QUICK_T_FINAL if quick else T_FINAL
    save_every = QUICK_SAVE_EVERY if quick else SAVE_EVERY
    samples = QUICK_SAMPLES if quick else SAMPLES
    refine = QUICK_REFINE if quick else REFINE
    diagram = phase_diagram(_config(betas, t_final=t_final, save_every=save_every, samples=samples, dt=DT), workers=0)
    fine = phase_diagram(_config(betas, t_final=t_final, save_every=save_every, samples=refine, dt=DT / 2), workers=0)
    coarse_one = diagram.counts["clusters"][:, :refine] == 1  # the same initialisations (init.seed + s)
    fine_one = fine.counts["clusters"] == 1
    rows = []
    for row, k_j in zip(diagram.rows(), np.ndindex(*diagram.one_cluster.shape)):
        k, j = k_j
        rows.append({
            **row, "n": N_TOKENS, "d": D, "dt": DT, "refined": refine,
            "p_one_cluster_refined_dt": float(np.mean(coarse_one[k, :, j])),
            "p_one_cluster_refined_half_dt": float(np.mean(fine_one[k, :, j])),
            "flips": float(np.mean(coarse_one[k, :, j] != fine_one[k, :, j])),
            "clusters_max_change": int(np.max(np.abs(diagram.counts["clusters"][k, :refine, j] - fine.counts["clusters"][k, :, j]))),
        })
    return rows, diagram


def read_csv(path: str | Path) -> list[dict[str, float]]:
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _grid(rows: list[dict[str, float]], name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    betas = np.array(sorted({r["beta"] for r in rows}))
    times = np.array(sorted({r["t"] for r in rows}))
    values = np.full((betas.size, times.size), np.nan)
    for r in rows:
        values[np.searchsorted(betas, r["beta"]), np.searchsorted(times, r["t"])] = r[name]
    return betas, times, values


def _worst_step(values: np.ndarray, se: np.ndarray, axis: int, *, up: bool) -> float:
    """Largest step the wrong way along ``axis`` in units of the standard error of the difference (0 if none; NaN when
    a value or a standard error is not finite: ``step > 0`` had read a NaN step as none)."""
    if not (np.all(np.isfinite(values)) and np.all(np.isfinite(se))):
        return math.nan
    step = np.diff(values, axis=axis) * (1.0 if up else -1.0)  # > 0: the wrong way
    spread = np.sqrt(se[(slice(None),) * axis + (slice(1, None),)] ** 2 + se[(slice(None),) * axis + (slice(None, -1),)] ** 2)
    z = np.where(step > 0, step / np.maximum(spread, 1e-300), 0.0)
    return float(np.max(z))


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Monotone in t and in β within the spread, a transition, probabilities in [0, 1], step-converged."""
    rows = read_csv(csv_path)
    _, _, p = _grid(rows, "p_one_cluster")
    _, _, p_se = _grid(rows, "p_one_cluster_se")
    _, _, k = _grid(rows, "clusters_mean")
    _, _, k_se = _grid(rows, "clusters_se")
    probabilities = np.array([[r["p_one_cluster"], r["p_pair"]] for r in rows])
    outside = float(np.max(np.maximum(-probabilities, probabilities - 1.0)))
    decrease_t = _worst_step(p, p_se, 1, up=False)
    increase_beta = _worst_step(p, p_se, 0, up=True)
    clusters_up_t = _worst_step(k, k_se, 1, up=True)
    drop = float(p[0, -1] - p[-1, -1])
    flips = largest(r["flips"] for r in rows)
    return {
        "probabilities_in_0_1": {"ok": outside <= 0.0, "value": outside, "expected": "max(-P, P - 1) <= 0"},
        "p_one_cluster_increases_with_t": {"ok": decrease_t <= SIGMAS, "value": decrease_t,
                                           "expected": f"largest decrease <= {SIGMAS:g} standard errors"},
        "p_one_cluster_decreases_with_beta": {"ok": increase_beta <= SIGMAS, "value": increase_beta,
                                              "expected": f"largest increase <= {SIGMAS:g} standard errors"},
        "clusters_decrease_with_t": {"ok": clusters_up_t <= SIGMAS, "value": clusters_up_t,
                                     "expected": f"largest increase of the mean number of clusters <= {SIGMAS:g} standard errors"},
        "transition_in_beta": {"ok": drop >= TRANSITION, "value": drop,
                               "expected": f"P(one cluster) at the smallest minus the largest β, last time >= {TRANSITION:g}"},
        "step_converged": {"ok": flips <= FLIPS_TOL, "value": flips,
                           "expected": f"fraction of one-cluster indicators changed by halving dt <= {FLIPS_TOL:g}"},
    }


def make(out_dir: str | Path, *, quick: bool = False) -> dict[str, Path]:
    """Compute, write ``ID.csv`` and ``ID.png`` under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows, diagram = compute(quick=quick)
    csv_path = write_rows(out / f"{ID}.csv", rows)
    png = out / f"{ID}.png"
    diagram.plot(png, title=(
        "Phase diagram of softmax self-attention (Geshkovski, Letrouit, Polyanskiy and Rigollet, arXiv 2312.10794)\n"
        f"$n = {N_TOKENS}$ tokens on $S^{{{D - 1}}}$, $Q = K = V = I$, {diagram.samples} random initialisations per β, "
        f"RK4 with Δt = {DT:g} (halving it changes {max(r['flips'] for r in rows):.1%} of the one-cluster indicators)"))
    return {"png": png, "csv": csv_path}


def main(argv: Sequence[str] | None = None) -> int:
    return script_main(make, claim, DESCRIPTION, argv)


if __name__ == "__main__":
    sys.exit(main())
