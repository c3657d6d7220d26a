r"""Random heads: Wigner's semicircle of the GOE ensemble, and tokens under heads redrawn at every layer.

.. math::

    W=\frac{G+G^\top}{\sqrt{2d}},\qquad \rho(\lambda)=\frac{\sqrt{4-\lambda^2}}{2\pi}\ \ (d\to\infty);\qquad
    \dot x_i = P^\perp_{x_i}\sum_j \operatorname{softmax}_j(\beta\,x_i^\top W_k x_j)\,W_kx_j,\quad t\in[k,k+1)

Left: the eigenvalues of ``goe`` head matrices (the ensemble of ``Q``, ``K``, ``V = "goe"``) at
``d = D_SPECTRUM`` against the semicircle law.  Right: ``n`` tokens on :math:`S^{d-1}` under one
symmetric value-aligned GOE head (``Q = "identity"``, ``K = "goe"``, ``V = "aligned"``), either held
for the whole run (``weights.schedule = "constant"``) or redrawn at every integer time
(``weights.schedule = "layers"``: one draw per layer, as in a randomly initialised deep
transformer, the setting of the random-weight experiments of Geshkovski, Letrouit, Polyanskiy and
Rigollet's public code), the mean pairwise cosine against t, mean and spread over ``SEEDS``
head seeds (the same initial tokens).

Claims: the spectrum's Kolmogorov distance to the semicircle (the exact sup over the empirical CDF's
jumps, not the drawn grid) is below ``KS_TOL`` and its edges are within ``EDGE_TOL`` of ±2 (each
draw's edges are stored too: at ``d = 400`` they scatter by up to about 0.07, a few times the
Tracy–Widom scale :math:`d^{-2/3}\approx 0.02`); the two schedules agree exactly on the first layer, [0, 1) (the
"layers" path starts from the constant heads), and differ after it; the cosine curves are converged
in the step (full form: every seed and schedule at ``DT`` and ``DT/2``, within ``REFINE_TOL``).

Runtime: about 10 s (``--quick``) to 45 s, on a loaded core.

Command: ``python figures/clusters_random_layers.py [--quick] [--out DIR]``.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.figures import largest, script_main, smallest, write_rows

ID = "clusters_random_layers"
PAPER = "2305.05465"
THEOREM = "random weights (GOE heads, redrawn per layer)"
DESCRIPTION = "GOE head spectra against Wigner's semicircle, and the mean pairwise cosine of tokens under one GOE head held constant or redrawn at every layer (weights.schedule = 'layers'), mean and spread over head seeds"

# ---- constants -----------------------------------------------------------
D_SPECTRUM = 400
MATRICES = 8
QUICK_MATRICES = 2
D = 8
N_TOKENS = 64
BETA = 2.0
T_FINAL = 8.0
QUICK_T_FINAL = 4.0
DT = 0.05
SAVE_EVERY = 0.25
SEEDS = 8
QUICK_SEEDS = 3
KS_TOL = 0.02
EDGE_TOL = 0.1
REFINE_TOL = 1e-4     # max |cos(DT) − cos(DT/2)| over the seeds, both schedules


def spectrum(matrices: int) -> np.ndarray:
    """Eigenvalues of ``matrices`` independent GOE draws at ``d = D_SPECTRUM`` (seeds 0, 1, …)."""
    return np.sort(np.concatenate([spectrum_of(s) for s in range(matrices)]))


def spectrum_of(seed: int) -> np.ndarray:
    """Sorted eigenvalues of the GOE draw of ``seed`` at ``d = D_SPECTRUM``."""
    from meanfield.heads.ensembles import draw

    return np.linalg.eigvalsh(draw("goe", np.random.default_rng(seed), D_SPECTRUM, D_SPECTRUM))


def ks_distance(eig: np.ndarray) -> float:
    """Exact Kolmogorov distance of the sorted sample ``eig`` to the semicircle law.

    The sup of |F_emp − F| is attained at a jump of the empirical CDF: max over i of
    max(i/N − F(λ_i), F(λ_i) − (i−1)/N).
    """
    from meanfield.heads.ensembles import semicircle_cdf

    eig = np.sort(np.asarray(eig, dtype=float))
    cdf = semicircle_cdf(np.clip(eig, -2.0, 2.0))
    i = np.arange(1, eig.size + 1)
    return float(max(np.max(i / eig.size - cdf), np.max(cdf - (i - 1) / eig.size)))


def mean_cosine(x: np.ndarray) -> np.ndarray:
    """Mean of ⟨x_i, x_j⟩ over pairs i < j, for frames ``x`` (T, n, d)."""
    n = x.shape[1]
    s = np.einsum("tid->td", x)
    return (np.einsum("td,td->t", s, s) - n) / (n * (n - 1))


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """Rows ``panel, x, value, reference, seed, schedule, dt``.

    Panels: ``spectrum`` (the empirical and semicircle CDFs on a grid, drawn), ``ks`` (the exact Kolmogorov
    distance, :func:`ks_distance`), ``edges`` (smallest and largest eigenvalue of all draws; ``edges_draw``: of
    draw ``seed``), ``cosine`` (the curves, at ``DT`` and, for the step check of the full form, ``DT/2``).
    """
    import meanfield as mf
    from meanfield.heads.ensembles import semicircle_cdf

    nan = float("nan")
    rows: list[dict[str, Any]] = []
    matrices = QUICK_MATRICES if quick else MATRICES
    eig = spectrum(matrices)
    grid = np.linspace(-2.2, 2.2, 89)
    empirical = np.searchsorted(eig, grid, side="right") / eig.size
    for x, e, s in zip(grid, empirical, semicircle_cdf(np.clip(grid, -2, 2))):
        rows.append({"panel": "spectrum", "x": float(x), "value": float(e), "reference": float(s), "seed": -1, "schedule": "none", "dt": nan})
    rows.append({"panel": "ks", "x": nan, "value": ks_distance(eig), "reference": 0.0, "seed": -1, "schedule": "none", "dt": nan})
    rows.append({"panel": "edges", "x": float(eig[0]), "value": float(eig[-1]), "reference": 2.0, "seed": -1, "schedule": "none", "dt": nan})
    for s in range(matrices):
        one = spectrum_of(s)
        rows.append({"panel": "edges_draw", "x": float(one[0]), "value": float(one[-1]), "reference": 2.0, "seed": s, "schedule": "none", "dt": nan})
    t_final = QUICK_T_FINAL if quick else T_FINAL
    for seed in range(QUICK_SEEDS if quick else SEEDS):
        for schedule in ("constant", "layers"):
            for dt in (DT,) if quick else (DT, DT / 2):  # the step check in the full form
                cfg = {
                    "model": {"d": D, "beta": BETA, "seed": seed, "heads": [{"Q": "identity", "K": "goe", "V": "aligned"}]},
                    "init": {"kind": "uniform", "n": N_TOKENS, "seed": 0},
                    "solver": {"kind": "particle", "method": "rk4", "dt": dt, "t_final": t_final, "save_every": SAVE_EVERY},
                    "weights": {"schedule": schedule},
                    "track": {"energy": False},
                }
                run = mf.simulate(cfg)
                for t, c in zip(np.asarray(run.t), mean_cosine(np.asarray(run.x))):
                    rows.append({"panel": "cosine", "x": float(t), "value": float(c), "reference": nan, "seed": seed, "schedule": schedule, "dt": dt})
    return rows


def make(out_dir: str | Path, *, quick: bool = False) -> dict[str, Path]:
    """Compute, write ``ID.csv`` and draw ``ID.png``."""
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = compute(quick=quick)
    csv_path = write_rows(out / f"{ID}.csv", rows)
    spec = [r for r in rows if r["panel"] == "spectrum"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot([r["x"] for r in spec], [r["value"] for r in spec], "o", ms=3, label=f"GOE eigenvalues, d = {D_SPECTRUM}")
    left.plot([r["x"] for r in spec], [r["reference"] for r in spec], "k-", lw=1, label="semicircle law")
    left.set(xlabel="eigenvalue λ", ylabel="cumulative fraction", title="the goe ensemble: Wigner's semicircle")
    left.legend()
    for schedule, color in (("constant", "C0"), ("layers", "C3")):
        curves = _curves(rows, schedule)
        t = curves[0][0]
        values = np.array([c[1] for c in curves])
        label = "one GOE head for all t" if schedule == "constant" else "a new GOE head at every integer t ('layers')"
        right.plot(t, values.mean(axis=0), color=color, label=label)
        right.fill_between(t, values.min(axis=0), values.max(axis=0), color=color, alpha=0.2)
    right.set(xlabel="time t (layers)", ylabel="mean pairwise cosine ⟨x_i, x_j⟩",
              title=f"{N_TOKENS} tokens on S^{D - 1}, β = {BETA:g}: mean and range over {len(_curves(rows, 'layers'))} head seeds")
    for k in range(1, int(max(r["x"] for r in rows if r["panel"] == "cosine")) + 1):
        right.axvline(k, color="0.85", lw=0.8, zorder=0)
    right.legend(loc="upper left", fontsize=8)
    fig.suptitle("Random heads (Geshkovski, Letrouit, Polyanskiy and Rigollet, arXiv 2305.05465; their public code's random weights)")
    fig.tight_layout()
    png = out / f"{ID}.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return {"png": png, "csv": csv_path}


def _curves(rows: Sequence[dict[str, Any]], schedule: str) -> list[tuple[np.ndarray, np.ndarray]]:
    seeds = sorted({r["seed"] for r in rows if r["panel"] == "cosine" and r["schedule"] == schedule})
    out = []
    for seed in seeds:
        mine = [r for r in rows if r["panel"] == "cosine" and r["schedule"] == schedule and r["seed"] == seed and r["dt"] == DT]
        out.append((np.array([r["x"] for r in mine]), np.array([r["value"] for r in mine])))
    return out


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """The semicircle law and the layer structure, from the CSV alone."""
    import csv

    with open(csv_path, newline="") as f:
        rows = [{k: (v if k in ("panel", "schedule") else float(v)) for k, v in r.items()} for r in csv.DictReader(f)]
    ks = [r for r in rows if r["panel"] == "ks"][0]["value"]
    edges = [r for r in rows if r["panel"] == "edges"][0]
    edge = largest([abs(edges["x"] + 2.0), abs(edges["value"] - 2.0)])
    draws = [r for r in rows if r["panel"] == "edges_draw"]
    const = {(r["seed"], r["x"]): r["value"] for r in rows if r["panel"] == "cosine" and r["schedule"] == "constant" and r["dt"] == DT}
    layer = {(r["seed"], r["x"]): r["value"] for r in rows if r["panel"] == "cosine" and r["schedule"] == "layers" and r["dt"] == DT}
    fine = {(r["seed"], r["schedule"], r["x"]): r["value"] for r in rows if r["panel"] == "cosine" and r["dt"] == DT / 2}
    step = largest(abs(v - (const if key[1] == "constant" else layer)[key[0], key[2]]) for key, v in fine.items()) if fine else None
    first = largest(abs(layer[k] - const[k]) for k in const if k[1] < 1.0)
    later = smallest(largest(abs(layer[k] - const[k]) for k in const if k[0] == seed and k[1] >= 2.0) for seed in {k[0] for k in const})
    return {
        "semicircle": {"ok": ks <= KS_TOL, "value": ks, "expected": f"Kolmogorov distance (exact sup) to the semicircle <= {KS_TOL}"},
        "edges": {"ok": edge <= EDGE_TOL, "value": edge, "expected": f"spectrum edges (all draws) within {EDGE_TOL} of ±2"},
        "edges_per_draw": {"ok": None, "value": max(max(abs(r["x"] + 2.0), abs(r["value"] - 2.0)) for r in draws),
                           "expected": f"largest |edge ∓ 2| of a single draw; its edges span [{min(r['x'] for r in draws):.3f}, "
                                       f"{max(r['x'] for r in draws):.3f}] and [{min(r['value'] for r in draws):.3f}, {max(r['value'] for r in draws):.3f}]"},
        "first_layer_identical": {"ok": first == 0.0, "value": first, "expected": "the two schedules agree exactly on [0, 1)"},
        "later_layers_differ": {"ok": later > 1e-6, "value": later, "expected": "every seed's 'layers' path differs from the constant one after t = 2"},
    } | ({} if step is None else {  # the full form: every seed and schedule at dt/2 too
        "converged_in_dt": {"ok": step <= REFINE_TOL, "value": step, "expected": f"max |cos(dt) − cos(dt/2)| <= {REFINE_TOL:g}, every seed and schedule"},
    })


def main(argv: Sequence[str] | None = None) -> int:
    return script_main(make, claim, DESCRIPTION, argv)


if __name__ == "__main__":
    sys.exit(main())
