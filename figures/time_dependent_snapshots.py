r"""OU against oscillating head weights: snapshots of the token cloud on :math:`S^2` (Massucco et al., arXiv 2605.18870).

This project's −I-heads variant, not the paper's setup: :math:`H` scalar heads :math:`\bar B_h=-I`
(value-aligned), uniform tokens and the pooled softmax, built by
:func:`meanfield.solvers.experiments.time_dependent.time_dependent_model`.  Massucco, Del Grande,
Carioni, Brune and Schönlieb run octahedral clusters, random symmetric heads :math:`D_h(0)=Z+Z^\top`
relaxing toward :math:`+I`, the mean over heads of the per-head softmax fields and explicit Euler
(``data/massucco_ou.toml``, ``data/massucco_oscillating.toml``; the figure
``time_dependent_authors_plateau``).  That OU heads let the tokens cluster is a property of these −I heads,
not a result of the paper's setup.

.. math::

    \dot x_i = -P^\perp_{x_i}\,\frac{\sum_h \tfrac1H\sum_j e^{\beta x_i^\top B_h(t)x_j}B_h(t)x_j}
    {\sum_h \tfrac1H\sum_j e^{\beta x_i^\top B_h(t)x_j}},\qquad
    B_h(t) = \begin{cases} \lambda I + \text{OU}_h(t) & \text{integrable: } \int|\dot\Theta_t|\,dt<\infty \text{ in law}\\
    (\lambda + A\sin(\omega t + 2\pi h/H))\,I & \text{oscillating}\end{cases}

Massucco et al. (arXiv 2605.18870), long-time behaviour: with integrable (Ornstein–Uhlenbeck) weights
the cloud relaxes to a stationary configuration — here a single cluster — while
sustained oscillations of the weights prevent clustering.  Authors' convention
(:mod:`meanfield.solvers.experiments.time_dependent`): descent, heads averaged with weight :math:`1/H`,
:math:`\beta=1`, :math:`\lambda=-1` (attractive under descent), OU
:math:`\kappa=1,\ \sigma=0.5`, oscillation :math:`A=2>|\lambda|,\ \omega=1` (every
head changes sign periodically, phases spread over the heads).  Both rows start
from the same uniform cloud and are solved by RK4 particles
(:func:`meanfield.solvers.experiments.time_dependent.ou_vs_oscillating`); tokens keep their colour (their
initial longitude) in every panel.

The panels show the first seed.  The evidence behind them: the clouds at the last snapshot of five seeds
(:data:`SEEDS`, the tokens and the OU path drawn from each; two with ``--quick``), and in the full form the first
seed again at half the RK4 step.

Claim (from the CSV): for every seed, at the last snapshot the OU cloud has fewer clusters
(tokens linked when :math:`\langle x_i,x_j\rangle\ge 1-10^{-3}`) and a higher
minimum pairwise inner product (recomputed from the stored coordinates) than
the oscillating one; in the full form, the first seed's last clouds at half the step have the same cluster counts
and their minimum inner products move by at most :data:`STEP_CONVERGED` (measured: below 1e-6).

Runtime: about 10 s with ``--quick``, 50 s in full, on one loaded core.

Command: ``python figures/time_dependent_snapshots.py [--quick] [--out DIR]``
(or ``meanfield reproduce time_dependent_snapshots``).
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

ID = "time_dependent_snapshots"
PAPER = "2605.18870"
THEOREM = "long-time behaviour (integrable vs oscillating weights)"
DESCRIPTION = "This project's −I-heads variant, not the paper's setup: token clouds on S² at four times under OU and oscillating head weights: OU weights let the tokens cluster, oscillating weights keep them apart"

# ---- constants -----------------------------------------------------------
HEADS = 4
N_TOKENS = 64
T_FINAL = 20.0
SNAPSHOT_TIMES = (0.0, 3.0, 6.0, 20.0)
SEEDS = (0, 1, 2, 3, 4)
QUICK_SEEDS = (0, 1)
DT = 0.05               # the RK4 step; the first seed runs at DT / 2 too (full form)
STEP_CONVERGED = 1e-4   # largest move of a last cloud's min inner product at half the step
QUICK_N_TOKENS = 32
QUICK_T_FINAL = 10.0
QUICK_SNAPSHOT_TIMES = (0.0, 3.0, 6.0, 10.0)
SCHEDULES = ("ou", "oscillating")
LABELS = {"ou": "OU weights (integrable)", "oscillating": "oscillating weights"}


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """Rows ``schedule, seed, dt, t, token, x, y, z, n_clusters, min_inner``: every snapshot of the first seed at
    :data:`DT`, the last snapshot of the other seeds and (full form) of the first seed at ``DT / 2``."""
    from meanfield.solvers.experiments.time_dependent import ou_vs_oscillating

    times = QUICK_SNAPSHOT_TIMES if quick else SNAPSHOT_TIMES
    seeds = QUICK_SEEDS if quick else SEEDS
    rows: list[dict[str, Any]] = []
    for seed, dt in [(seed, DT) for seed in seeds] + ([] if quick else [(seeds[0], DT / 2)]):
        result = ou_vs_oscillating(
            H=HEADS, n=QUICK_N_TOKENS if quick else N_TOKENS, t_final=QUICK_T_FINAL if quick else T_FINAL,
            seed=seed, snapshots=times, dt=dt, schedules=SCHEDULES,
        )
        every = seed == seeds[0] and dt == DT  # the panels' run keeps all its snapshots
        for name in SCHEDULES:
            run = result[name]
            for k, t in enumerate(result["snapshot_times"]):
                if not every and k < len(times) - 1:
                    continue
                frame = int(np.argmin(np.abs(run["t"] - t)))
                for i, (x, y, z) in enumerate(run["snapshots"][k]):
                    rows.append({
                        "schedule": name, "seed": seed, "dt": dt, "t": float(run["t"][frame]), "token": i,
                        "x": float(x), "y": float(y), "z": float(z),
                        "n_clusters": float(run["n_clusters"][frame]), "min_inner": float(run["min_inner"][frame]),
                    })
    return rows


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: (v if k == "schedule" else float(v)) for k, v in row.items()} for row in csv.DictReader(f)]


def seeds_of(rows: list[dict[str, Any]]) -> list[float]:
    """The seeds run at the base step, in order."""
    return sorted({r["seed"] for r in rows if r["dt"] == DT})


def _frames(rows: list[dict[str, Any]], schedule: str, *, seed: float | None = None,
            dt: float = DT) -> dict[float, list[dict[str, Any]]]:
    """The snapshots of one run, by time: ``schedule``, ``seed`` (default the first) and step ``dt``."""
    seed = seeds_of(rows)[0] if seed is None else seed
    out: dict[float, list[dict[str, Any]]] = {}
    for r in rows:
        if r["schedule"] == schedule and r["seed"] == seed and r["dt"] == dt:
            out.setdefault(r["t"], []).append(r)
    return dict(sorted(out.items()))


def last_cloud(rows: list[dict[str, Any]], schedule: str, *, seed: float | None = None,
               dt: float = DT) -> tuple[float, float]:
    """``(n_clusters, min inner product)`` of one run's last snapshot, the latter from its coordinates."""
    frame = list(_frames(rows, schedule, seed=seed, dt=dt).values())[-1]
    return frame[0]["n_clusters"], min_inner_product(_points(frame))


def _points(frame: list[dict[str, Any]]) -> np.ndarray:
    return np.array([[r["x"], r["y"], r["z"]] for r in sorted(frame, key=lambda r: r["token"])])


def min_inner_product(x: np.ndarray) -> float:
    r""":math:`\min_{i<j}\langle x_i,x_j\rangle` of a cloud ``(n, 3)``."""
    gram = x @ x.T
    return float(np.min(gram[np.triu_indices(x.shape[0], 1)]))


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Checks of the CSV at the last snapshot, for every seed: OU has fewer clusters and a higher min inner product;
    in the full form the first seed's last clouds at half the step."""
    rows = read_csv(csv_path)
    seeds = seeds_of(rows)
    last = {(name, s): last_cloud(rows, name, seed=s) for name in SCHEDULES for s in seeds}
    every = f"for each of the {len(seeds)} seeds"
    clusters = {name: [last[name, s][0] for s in seeds] for name in SCHEDULES}
    inner = {name: [last[name, s][1] for s in seeds] for name in SCHEDULES}
    out = {
        "fewer_clusters_ou": {"ok": all(last["ou", s][0] < last["oscillating", s][0] for s in seeds),
                              "value": max(clusters["ou"]),
                              "expected": f"< oscillating ({min(clusters['oscillating']):g} … "
                                          f"{max(clusters['oscillating']):g}) {every}"},
        "min_inner_ou_above_oscillating": {"ok": all(last["ou", s][1] > last["oscillating", s][1] for s in seeds),
                                           "value": min(inner["ou"]),
                                           "expected": f"> oscillating ({min(inner['oscillating']):.4f} … "
                                                       f"{max(inner['oscillating']):.4f}) {every}"},
    }
    if any(r["dt"] == DT / 2 for r in rows):  # the full form: the first seed at half the step
        half = {name: last_cloud(rows, name, dt=DT / 2) for name in SCHEDULES}
        moved = largest(abs(half[name][1] - last[name, seeds[0]][1]) for name in SCHEDULES)
        same = all(half[name][0] == last[name, seeds[0]][0] for name in SCHEDULES)
        out["step_converged"] = {"ok": bool(same and moved <= STEP_CONVERGED), "value": moved,
                                 "expected": f"at dt = {DT / 2:g} the same cluster counts and min inner products "
                                             f"within {STEP_CONVERGED:g} of dt = {DT:g}"}
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib.figure import Figure

    from meanfield.plotting.particles import plot_particles_sphere

    frames = {name: _frames(rows, name) for name in SCHEDULES}
    seeds = seeds_of(rows)
    spread = {name: [last_cloud(rows, name, seed=s)[0] for s in seeds] for name in SCHEDULES}
    times = list(frames["ou"])
    fig = Figure(figsize=(3.2 * len(times), 7.0), constrained_layout=True)
    first = _points(frames["ou"][times[0]])
    hue = (np.arctan2(first[:, 1], first[:, 0]) + math.pi) / (2 * math.pi)  # initial longitude, same start for both rows
    import matplotlib

    colors = matplotlib.colormaps["hsv"](hue)
    for row, name in enumerate(SCHEDULES):
        # one camera per row, facing the mean direction of the last snapshot (where the tokens gather)
        mean = _points(frames[name][times[-1]]).mean(axis=0)
        mean = mean / max(float(np.linalg.norm(mean)), 1e-12)
        for col, t in enumerate(times):
            frame = frames[name][t]
            x = _points(frame)
            ax = fig.add_subplot(2, len(times), row * len(times) + col + 1)
            k = int(frame[0]["n_clusters"])
            plot_particles_sphere(x, ax=ax, color=colors, size=20.0, view=mean,
                                  title=f"t = {t:g}: {k} cluster{'s' if k != 1 else ''}\nmin⟨xᵢ,xⱼ⟩ = {min_inner_product(x):.3f}")
            ax.title.set_fontsize(9)
            if col == 0:
                low, high = min(spread[name]), max(spread[name])
                count = f"{low:g} cluster{'s' if low != 1 else ''} in each of" if low == high else f"{low:g} … {high:g} clusters over"
                label = f"{LABELS[name]}\nlast: {count} the {len(seeds)} seeds"
                ax.text(-0.08, 0.5, label, transform=ax.transAxes, rotation=90, va="center", ha="center", fontsize=10)
    fig.suptitle(f"Massucco et al., arXiv 2605.18870, this project's −I-heads variant, not the paper's setup: token clouds on S²\n(H = {HEADS} heads, n = {len(first)}, descent, β = 1; "
                 "colour = initial longitude; each row viewed from the mean direction of its last cloud; the first seed shown)", fontsize=10)
    fig.savefig(path, dpi=110)
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
