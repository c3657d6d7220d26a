r"""Snapshots of both token clouds on S² in the authors' setup, OU and oscillating (Massucco et al., arXiv 2605.18870).

.. math::

    \dot x_i=-P^\perp_{x_i}\,\frac1H\sum_h\frac{\sum_j e^{x_i^\top D_h(t)x_j}D_h(t)x_j}{\sum_j e^{x_i^\top D_h(t)x_j}},\qquad
    \begin{cases}dD_h=(I-D_h)\,dt+\sqrt2\,dW_{\mathrm{sym}} & \text{OU}\\
    dD_h=(F(t+2\pi h/H)-D_h)\,dt & \text{oscillating}\end{cases},\qquad D_h(0)=Z_h+Z_h^\top

The experiments of Massucco, Del Grande, Carioni, Brune and Schönlieb as their public code runs
them, read from ``data/massucco_ou.toml`` and ``data/massucco_oscillating.toml`` (:math:`H=10`):
200 tokens in six octahedral clusters (a vertex :math:`\pm e_k` plus :math:`N(0,0.05^2)` noise,
normalised), random symmetric heads with value map :math:`V_h=D_h`, the mean over heads of the
per-head softmax fields, descent, :math:`\beta=1`, explicit Euler :math:`dt=5\cdot10^{-3}`.  The
head draw and the noise follow the authors' seeds (``model.seed`` :math:`=42+H`, ``weights.seed``
:math:`=2000+H`).  Each experiment is one row; each time :math:`t=0,T/2,T` is two orthographic
views of the sphere, from :math:`(1,1,1)` (the clusters :math:`+e_1,+e_2,+e_3` in front) and from
:math:`(-1,-1,-1)` (the other three), so every token is seen on a front hemisphere once.  Tokens
keep the colour of their initial cluster (the nearest octahedral vertex at :math:`t=0`).

Unlike the −I heads of this project's variant (the figure ``time_dependent_snapshots``), the
authors' heads relax toward :math:`+I` and the cloud does not collapse: the six clusters drift and
smear, but the cloud stays spread over the sphere.

Claim (from the CSV): at :math:`T`, for each experiment, the mean pairwise inner product
:math:`\frac{2}{n(n-1)}\sum_{i<j}\langle x_i,x_j\rangle` is at most 0.5 (one cluster gives about 1,
the initial cloud 0.012); for OU, the single-linkage clusters at :math:`\langle x_i,x_j\rangle\ge0.95`
are at least as many as at :math:`t=0` (six) and none holds tokens of two initial clusters; and every
token is on the sphere to :math:`10^{-12}`, both in the stored coordinates and in the run's
``sphere_error`` over every recorded frame.

Runtime: ``--quick`` (H = 3, T = 4) about 10 s on one slow core; the full form (H = 10, T = 20)
about a minute.

Command: ``python figures/time_dependent_authors_snapshots.py [--quick] [--out DIR]``
(or ``meanfield reproduce time_dependent_authors_snapshots``).
"""
from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.figures import AUTHORS_CONFIGS, authors_overrides, largest, script_main, write_rows

ID = "time_dependent_authors_snapshots"
PAPER = "2605.18870"
THEOREM = "long-time behaviour (integrable vs oscillating weights), in the authors' setup"
DESCRIPTION = "Token clouds on S² at t = 0, T/2, T in the paper's setup (H = 10, octahedral clusters, random symmetric heads relaxing to +I or to F(t + 2πh/H)), OU and oscillating, coloured by initial cluster: with the authors' heads neither cloud collapses"

# ---- constants -----------------------------------------------------------
CONFIGS = AUTHORS_CONFIGS
LABELS = {"ou": "OU weights  dD = (I − D)dt + √2 dW", "oscillating": "oscillating weights  dD = (F(t + 2πh/H) − D)dt"}
HEADS = 10
T_FINAL = 20.0
QUICK_HEADS = 3
QUICK_T_FINAL = 4.0
SNAPSHOT_FRACTIONS = (0.0, 0.5, 1.0)   # t = 0, T/2, T
SPREAD_MAX = 0.5        # mean pairwise inner product of a spread cloud (one cluster: ≈ 1)
CLUSTER_INNER = 0.95    # single-linkage clusters: tokens linked when <x_i, x_j> >= 0.95
SPHERE_TOL = 1e-12
VIEWS = {"seen from (1, 1, 1)": (1.0, 1.0, 1.0), "seen from (−1, −1, −1)": (-1.0, -1.0, -1.0)}
VERTEX_NAMES = ("+e₁", "+e₂", "+e₃", "−e₁", "−e₂", "−e₃")


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """Rows ``experiment, H, n, t_final, t, token, cluster, x, y, z, sphere_error_run`` at t = 0, T/2, T."""
    from meanfield import simulate
    from meanfield.config import load_config
    from meanfield.geometry.sphere import cluster_centers

    H, t_final = (QUICK_HEADS, QUICK_T_FINAL) if quick else (HEADS, T_FINAL)
    rows: list[dict[str, Any]] = []
    for experiment, config in CONFIGS.items():
        cfg = load_config(config, authors_overrides(H, t_final=t_final, experiment=experiment))
        run = simulate(cfg)
        t, x = np.asarray(run.t), np.asarray(run.x)
        centers = cluster_centers(cfg["init"]["centers"], x.shape[2])
        cluster = np.argmax(x[0] @ centers.T, axis=1)  # the nearest octahedral vertex at t = 0
        sphere_run = float(np.max(run.diagnostics["sphere_error"]))  # every recorded frame
        for fraction in SNAPSHOT_FRACTIONS:
            k = int(np.argmin(np.abs(t - fraction * t_final)))
            for i, (a, b, c) in enumerate(x[k]):
                rows.append({"experiment": experiment, "H": H, "n": x.shape[1], "t_final": t_final, "t": float(t[k]),
                             "token": i, "cluster": int(cluster[i]), "x": float(a), "y": float(b), "z": float(c),
                             "sphere_error_run": sphere_run, "frames": len(t)})
    return rows


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: (v if k == "experiment" else float(v)) for k, v in row.items()} for row in csv.DictReader(f)]


def _frames(rows: list[dict[str, Any]], experiment: str) -> dict[float, list[dict[str, Any]]]:
    out: dict[float, list[dict[str, Any]]] = {}
    for r in rows:
        if r["experiment"] == experiment:
            out.setdefault(r["t"], []).append(r)
    return {t: sorted(frame, key=lambda r: r["token"]) for t, frame in sorted(out.items())}


def _points(frame: list[dict[str, Any]]) -> np.ndarray:
    return np.array([[r["x"], r["y"], r["z"]] for r in frame])


def mean_inner_product(x: np.ndarray) -> float:
    r""":math:`\frac{2}{n(n-1)}\sum_{i<j}\langle x_i,x_j\rangle` of a cloud ``(n, 3)`` (≈ 1 for one cluster, ≈ 0 when spread)."""
    gram = x @ x.T
    return float(np.mean(gram[np.triu_indices(x.shape[0], 1)]))


def clusters(x: np.ndarray, labels: np.ndarray) -> tuple[int, int]:
    """``(clusters, mixed)``: single-linkage components at ⟨xᵢ, xⱼ⟩ ≥ :data:`CLUSTER_INNER`, and how many hold two initial clusters."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    count, component = connected_components(csr_matrix(x @ x.T >= CLUSTER_INNER), directed=False)
    mixed = sum(len(set(labels[component == c].tolist())) > 1 for c in range(count))
    return int(count), int(mixed)


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Checks of the CSV: both clouds spread at T, OU keeps its initial clusters apart, every token on the sphere."""
    rows = read_csv(csv_path)
    checks: dict[str, dict[str, Any]] = {}
    stored, run = [], []
    for experiment in CONFIGS:
        frames = _frames(rows, experiment)
        first, last = list(frames.values())[0], list(frames.values())[-1]
        x_end = _points(last)
        inner = mean_inner_product(x_end)
        checks[f"mean pairwise inner product at T [{experiment}]"] = {
            "ok": bool(inner <= SPREAD_MAX), "value": inner,
            "expected": f"<= {SPREAD_MAX:g} (spread; one cluster ≈ 1, t = 0: {mean_inner_product(_points(first)):.4f})"}
        if experiment == "ou":
            labels = np.array([r["cluster"] for r in first], dtype=int)
            start, _ = clusters(_points(first), labels)
            count, mixed = clusters(x_end, labels)
            checks["clusters at T [ou]"] = {
                "ok": bool(count >= start), "value": float(count),
                "expected": f">= {start} (the clusters at t = 0; single linkage at <x_i, x_j> >= {CLUSTER_INNER:g})"}
            checks["clusters at T holding two initial clusters [ou]"] = {
                "ok": bool(mixed == 0), "value": float(mixed), "expected": "0 (no two initial clusters merge)"}
        for frame in frames.values():
            x = _points(frame)
            stored.append(float(np.max(np.abs(np.linalg.norm(x, axis=1) - 1.0))))
        run += [r["sphere_error_run"] for r in rows if r["experiment"] == experiment]
    worst_stored, worst_run = largest(stored), largest(run)
    checks["max | |x_i| − 1 | in the stored snapshots"] = {
        "ok": bool(worst_stored <= SPHERE_TOL), "value": worst_stored, "expected": f"<= {SPHERE_TOL:g}"}
    checks["max sphere_error over every recorded frame"] = {
        "ok": bool(worst_run <= SPHERE_TOL), "value": worst_run, "expected": f"<= {SPHERE_TOL:g}"}
    return checks


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from meanfield.plotting.canvas import draw_points, draw_sphere, rotation_to

    palette = matplotlib.colormaps["tab10"]
    frames = {e: _frames(rows, e) for e in CONFIGS}
    times = list(frames["ou"])
    cols = len(times) * len(VIEWS)
    fig = Figure(figsize=(2.7 * cols, 6.6), constrained_layout=True)
    rotations = {name: rotation_to(np.array(view) / np.sqrt(3.0)) for name, view in VIEWS.items()}
    for row, experiment in enumerate(CONFIGS):
        labels = np.array([r["cluster"] for r in list(frames[experiment].values())[0]], dtype=int)
        colors = palette(labels % 10)
        for k, t in enumerate(frames[experiment]):
            x = _points(frames[experiment][t])
            for v, (name, rotation) in enumerate(rotations.items()):
                ax = fig.add_subplot(2, cols, row * cols + k * len(VIEWS) + v + 1)
                draw_sphere(ax, rotation)
                draw_points(ax, x, rotation, color=colors, size=14.0)
                title = f"t = {t:g}, {name}"
                if v == 0:
                    title += f"\nmean ⟨xᵢ,xⱼ⟩ = {mean_inner_product(x):.3f}, {clusters(x, labels)[0]} clusters"
                ax.set_title(title, fontsize=8)
                if k == 0 and v == 0:
                    ax.text(-0.12, 0.5, LABELS[experiment], transform=ax.transAxes, rotation=90, va="center",
                            ha="center", fontsize=9)
    handles = [Line2D([], [], marker="o", ls="", color=palette(c), label=f"initial cluster {VERTEX_NAMES[c]}")
               for c in range(len(VERTEX_NAMES))]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    first = rows[0]
    fig.suptitle(f"Massucco et al., arXiv 2605.18870, in the authors' setup: token clouds on S² (H = {int(first['H'])} heads, "
                 f"n = {int(first['n'])}, T = {first['t_final']:g}, β = 1, descent); colour = initial cluster; "
                 "solid: front hemisphere, faint: back; clusters: single linkage at ⟨xᵢ,xⱼ⟩ ≥ 0.95", fontsize=9)
    fig.savefig(path, dpi=110)
    return path


def make(out_dir: str | Path, *, quick: bool = False) -> dict[str, Path]:
    """Compute, write ``ID.csv`` and ``ID.png`` under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = write_rows(out / f"{ID}.csv", compute(quick=quick))
    return {"png": plot(read_csv(csv_path), out / f"{ID}.png"), "csv": csv_path}


def main(argv: Sequence[str] | None = None) -> int:
    return script_main(make, claim, DESCRIPTION, argv)


if __name__ == "__main__":
    sys.exit(main())
