r"""Snapshots of the token cloud on :math:`S^2`: uniform, concentrated on :math:`\pm e`, then on :math:`\pm v` (Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931).

.. math::

    \rho_{t_{\min}} \approx \Pi_\sharp\rho_0 = p\,\delta_e + (1-p)\,\delta_{-e},\qquad
    p = \rho_0(\langle x, e\rangle > 0)

(Theorem 1 and Conjecture 1 of arXiv 2605.10931).  The default concentration head
(``data/concentration.toml``: :math:`S=VB^\top=\operatorname{diag}(1,0.5,0.25)`,
:math:`E=\operatorname{span}(e)`, :math:`e=e_1`; :math:`V`'s dominant eigenvector
:math:`v=(1,1,0)/\sqrt2`) is run with **particles** (RK4, uniform sample, β = 16;
resolved since n ≥ 10β, :func:`meanfield.analysis.projection.resolution_warning`) through
:func:`meanfield.simulate` with the concentration tracker.  The cloud is
drawn (:func:`meanfield.plotting.sphere.plot_particles_sphere`) at :math:`t=0`, at
:math:`t_{\min}` (the saved frame where :math:`W_2(\rho_t,\Pi_\sharp\rho_0)` is smallest)
and at the final time, with the axes :math:`\pm e` (black) and :math:`\pm v` (red);
tokens are coloured by the side of :math:`e^\perp` they started on.

Claim (from the CSV of the three frames): at :math:`t_{\min}` at least 85 % of the mass
lies within :math:`\delta = 0.5` rad (≈ 29°) of :math:`\pm e` (a uniform cloud puts
:math:`1-\cos\delta\approx12\%` there, and so does the t = 0 frame, within 0.05);
the mass on the :math:`+e` side at :math:`t_{\min}` equals
:math:`p=\rho_0(\langle x,e\rangle>0)` within 0.03 (a few per cent of the tokens
cross :math:`e^\perp` at finite β; the CSV reports how many); at the final time at least
95 % lies within δ of :math:`\pm v` (the terminal phase).

Runtime: about 3 s with ``--quick`` (n = 400, t = 12), about 15 s in full
(n = 2000, t = 14), on one core.

Command: ``python figures/concentration_snapshots.py [--quick] [--out DIR]``
(or ``meanfield reproduce concentration_snapshots``).
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

ID = "concentration_snapshots"
PAPER = "2605.10931"
THEOREM = "Thm 1"
DESCRIPTION = "The token cloud on S² at t = 0, t_min and late (particles, β = 16): uniform, then two clusters at ±e with masses p and 1−p, then at ±v (V's axis)"

# ---- constants -----------------------------------------------------------
BETA = 16.0
N_TOKENS = 2000
T_FINAL = 14.0
QUICK_N_TOKENS = 400
QUICK_T_FINAL = 12.0
SAVE_EVERY = 0.1
SEED = 0
DELTA = 0.5               # rad: "near ±e" means within this angle
#: the camera leans this far from the normal of the plane of e and v towards their bisector (so +e and +v face it)
VIEW_TILT = 1.2
MIN_NEAR_E = 0.85         # fraction near ±e at t_min must exceed this
UNIFORM_ATOL = 0.05       # at t = 0 the fraction near ±e is 1 − cos δ within this
P_ATOL = 0.03             # |mass on the +e side at t_min − p|
MIN_NEAR_V = 0.95         # fraction near ±v at the last frame
FRAMES = ("initial", "t_min", "final")


def config(*, quick: bool) -> dict[str, Any]:
    """The resolved particle config."""
    from meanfield.config import load_config
    from meanfield.solvers.experiments.concentration import DEFAULT_CONCENTRATION_CONFIG

    raw = copy.deepcopy(DEFAULT_CONCENTRATION_CONFIG)
    raw["model"]["beta"] = BETA
    raw["init"] = {"kind": "uniform", "n": QUICK_N_TOKENS if quick else N_TOKENS, "seed": SEED}
    raw["solver"].update(t_final=QUICK_T_FINAL if quick else T_FINAL, save_every=SAVE_EVERY)
    return load_config(raw)


def axes_of(cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors ``e`` (spanning :math:`E` of :math:`S=VB^\\top`) and ``v`` (spanning :math:`E_V`)."""
    from meanfield.analysis.projection import dominant_projector, value_projector
    from meanfield.solvers.experiments.concentration import single_head

    head = single_head(cfg)
    S = np.asarray(head.V) @ (np.asarray(head.Q).T @ np.asarray(head.K)).T
    out = []
    for P in (dominant_projector(S), value_projector(head.V)):
        if round(np.trace(P)) != 1:
            raise ValueError("this figure expects one-dimensional E and E_V")
        u = np.linalg.eigh(P)[1][:, -1]
        out.append(u if u[np.argmax(np.abs(u))] > 0 else -u)
    return out[0], out[1]


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """One row per token and frame (initial, t_min, final).

    Columns ``frame, t, n, beta, w2_target, token, x, y, z, side0`` (sign of
    :math:`\\langle x_i(0), e\\rangle`), ``angle_e``, ``angle_v`` (geodesic angle to the
    nearer of :math:`\\pm e`, :math:`\\pm v`), ``e_x, e_y, e_z, v_x, v_y, v_z``.
    """
    from meanfield.analysis.projection import resolution_warning
    from meanfield import simulate

    cfg = config(quick=quick)
    n = cfg["init"]["n"]
    warning = resolution_warning(n, BETA, cfg["model"]["d"])
    if warning:
        raise ValueError(warning)
    e, v = axes_of(cfg)
    result = simulate(cfg)
    states = np.asarray(result.states)
    w2 = np.asarray(result.diagnostics["w2_target"])
    picks = {"initial": 0, "t_min": int(np.argmin(w2)), "final": len(result.t) - 1}
    side0 = np.where(states[0] @ e > 0, 1, -1)
    rows: list[dict[str, Any]] = []
    for frame, k in picks.items():
        x = states[k]
        angle_e = np.arccos(np.clip(np.abs(x @ e), 0.0, 1.0))
        angle_v = np.arccos(np.clip(np.abs(x @ v), 0.0, 1.0))
        for i in range(n):
            rows.append({
                "frame": frame, "t": float(result.t[k]), "n": n, "beta": BETA, "w2_target": float(w2[k]), "token": i,
                "x": float(x[i, 0]), "y": float(x[i, 1]), "z": float(x[i, 2]), "side0": int(side0[i]),
                "angle_e": float(angle_e[i]), "angle_v": float(angle_v[i]),
                "e_x": float(e[0]), "e_y": float(e[1]), "e_z": float(e[2]),
                "v_x": float(v[0]), "v_y": float(v[1]), "v_z": float(v[2]),
            })
    return rows


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: (v if k == "frame" else float(v)) for k, v in row.items()} for row in csv.DictReader(f)]


def frames(rows: list[dict[str, Any]]) -> dict[str, dict[str, np.ndarray]]:
    """``frame -> {column -> array}`` (points as ``xyz`` (n, 3))."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for frame in dict.fromkeys(r["frame"] for r in rows):
        group = [r for r in rows if r["frame"] == frame]
        cols = {k: np.array([r[k] for r in group]) for k in group[0] if k != "frame"}
        cols["xyz"] = np.stack([cols["x"], cols["y"], cols["z"]], axis=1)
        cols["e"] = np.array([group[0]["e_x"], group[0]["e_y"], group[0]["e_z"]])
        cols["v"] = np.array([group[0]["v_x"], group[0]["v_y"], group[0]["v_z"]])
        out[frame] = cols
    return out


def statistics(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Fractions near ±e / ±v per frame, p, the +e side at t_min, and the tokens that crossed e⊥."""
    f = frames(rows)
    at_min = f["t_min"]
    plus = at_min["xyz"] @ at_min["e"] > 0
    return {
        "near_e_initial": float(np.mean(f["initial"]["angle_e"] < DELTA)),
        "near_e_t_min": float(np.mean(at_min["angle_e"] < DELTA)),
        "near_v_final": float(np.mean(f["final"]["angle_v"] < DELTA)),
        "p": float(np.mean(f["initial"]["side0"] > 0)),
        "plus_side_t_min": float(np.mean(plus)),
        "crossed_t_min": float(np.mean(plus != (at_min["side0"] > 0))),
        "t_min": float(at_min["t"][0]),
        "w2_t_min": float(at_min["w2_target"][0]),
    }


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Checks of the CSV: uniform start, ≥ 85 % near ±e at t_min with the +e mass ≈ p, ≥ 95 % near ±v at the end."""
    s = statistics(read_csv(csv_path))
    uniform = 1.0 - math.cos(DELTA)
    return {
        "near_e_initial": {"ok": abs(s["near_e_initial"] - uniform) <= UNIFORM_ATOL, "value": s["near_e_initial"],
                           "expected": f"1 − cos δ = {uniform:.4f} ± {UNIFORM_ATOL:g} (uniform cloud)"},
        "near_e_t_min": {"ok": s["near_e_t_min"] >= MIN_NEAR_E, "value": s["near_e_t_min"],
                         "expected": f">= {MIN_NEAR_E:g} within δ = {DELTA:g} rad of ±e at t_min = {s['t_min']:.3g}"},
        "plus_side_is_p": {"ok": abs(s["plus_side_t_min"] - s["p"]) <= P_ATOL, "value": s["plus_side_t_min"],
                           "expected": f"p = ρ₀(⟨x,e⟩>0) = {s['p']:.4f} ± {P_ATOL:g} ({s['crossed_t_min']:.1%} of the tokens crossed e⊥)"},
        "near_v_final": {"ok": s["near_v_final"] >= MIN_NEAR_V, "value": s["near_v_final"],
                         "expected": f">= {MIN_NEAR_V:g} within δ = {DELTA:g} rad of ±v at the last frame"},
    }


def _view(e: np.ndarray, v: np.ndarray) -> np.ndarray:
    """A direction about 45° from both ±e and ±v: the clusters on one side of the axes in front, the others behind."""
    v = v if e @ v >= 0 else -v  # eigenvectors have no sign: take the one within 90° of e
    normal = np.cross(e, v)
    bisector = (e + v) / np.linalg.norm(e + v)
    if np.linalg.norm(normal) < 1e-6:  # e and v (nearly) parallel: any normal will do
        normal = np.cross(e, [0.0, 0.0, 1.0] if abs(e[2]) < 0.9 else [1.0, 0.0, 0.0])
    normal = normal / np.linalg.norm(normal)
    view = normal + VIEW_TILT * bisector
    return view / np.linalg.norm(view)


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from meanfield.plotting.canvas import rotation_to
    from meanfield.plotting.particles import plot_particles_sphere

    data = frames(rows)
    s = statistics(rows)
    fig = Figure(figsize=(11.5, 4.4), constrained_layout=True)
    n = int(data["initial"]["n"][0])
    for k, name in enumerate(FRAMES):
        f = data[name]
        ax = fig.add_subplot(1, 3, k + 1)
        colors = np.where(f["side0"] > 0, "C0", "C1")
        at_plus_v = (f["angle_v"] < DELTA) & (f["xyz"] @ f["v"] > 0)
        plus_v = float(np.mean(at_plus_v))
        from_plus = float(np.mean(f["side0"][at_plus_v] > 0)) if at_plus_v.any() else math.nan
        near = {"initial": f"{np.mean(f['angle_e'] < DELTA):.0%} within {DELTA:g} rad of ±e",
                "t_min": f"{np.mean(f['angle_e'] < DELTA):.0%} within {DELTA:g} rad of ±e; +e side {s['plus_side_t_min']:.3f} (p = {s['p']:.3f})",
                "final": f"{np.mean(f['angle_v'] < DELTA):.0%} within {DELTA:g} rad of ±v\nmass {plus_v:.3f} at +v ({from_plus:.0%} from the +e side)"}[name]
        heading = {"initial": "t = 0", "t_min": f"t = t_min = {f['t'][0]:.3g}", "final": f"t = {f['t'][0]:.3g} (late)"}[name]
        if name == "final":
            near = near.replace("\n", ", ")
        view = _view(f["e"], f["v"])
        plot_particles_sphere(f["xyz"], ax=ax, color=colors, size=8.0 if n > 1000 else 14.0, view=view)
        rotation = rotation_to(view)
        ax.set_title(f"{heading}, W2 to Π♯ρ₀ = {f['w2_target'][0]:.3f}\n{near}", fontsize=7.5)
        for axis, color, style, label in ((f["e"], "k", "-", "e"), (f["v"], "C3", "--", "v")):
            ends = np.stack([-1.1 * axis, 1.1 * axis]) @ rotation.T
            ax.plot(ends[:, 0], ends[:, 1], style, color=color, lw=1.4, zorder=5)
            for sign, name in ((1.18, f"+{label}"), (-1.25, f"−{label}")):
                tip = sign * axis @ rotation.T
                ax.text(tip[0], tip[1], name, color=color, fontsize=10, fontweight="bold", ha="center", va="center")
    handles = [
        Line2D([], [], marker="o", ls="", color="C0", label=r"token with $\langle x_0, e\rangle > 0$"),
        Line2D([], [], marker="o", ls="", color="C1", label=r"token with $\langle x_0, e\rangle < 0$"),
        Line2D([], [], color="k", label=r"axis $e$ of $E$ (dominant eigenvector of $S = VB^\top$)"),
        Line2D([], [], color="C3", ls="--", label=r"axis $v$ of $E_V$ (dominant eigenvector of $V$)"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931: the cloud on $S^2$ (particles, n = {n}, β = {BETA:g}): uniform → $\\Pi_\\sharp\\rho_0 = p\\,\\delta_e+(1-p)\\,\\delta_{{-e}}$ → terminal phase at $\\pm v$", fontsize=10)
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
