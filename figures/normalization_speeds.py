r"""Normalisation as speed regulation: Post-LN, Pre-LN, Peri-LN and nGPT cluster the same tokens at different speeds.

.. math::

    \dot\theta_k = s_k\,P^\perp_{\theta_k}A_k,\qquad
    s_k = \underbrace{1}_{\text{post}},\ \underbrace{1/r_k}_{\text{pre}},\ \underbrace{1/(r_k\|A_k\|)}_{\text{peri}},\
    \underbrace{\alpha/\|A_k\|}_{\text{ngpt}},\qquad
    \dot r_k = \langle\theta_k,A_k\rangle\ (\text{pre}),\ \ \langle\theta_k,A_k\rangle/\|A_k\|\ (\text{peri})

(Karagodin, Ge, Polyanskiy and Rigollet, *Normalization in Attention Dynamics*, arXiv 2510.22026;
:mod:`meanfield.normalization`).  One softmax head :math:`Q=K=V=I`, :math:`\beta=1`, :math:`n=32`
tokens uniform on :math:`S^7`, the same initial tokens for the four schemes (``init.seed``),
RK4 through :func:`meanfield.simulate` with ``model.norm``; nGPT's step :math:`\alpha=0.2` as in the
authors' public code.  Drawn against :math:`t`: the mean pairwise cosine of the directions
:math:`\frac{1}{n(n-1)}\sum_{i\ne j}\langle\theta_i,\theta_j\rangle` (1 = one cluster), the mean
direction speed :math:`\frac1n\sum_k\|\dot\theta_k\|` and the mean radius; mean over the seeds, band = min–max.

Claims (from the CSV): the paper's ordering of the speeds — Peri-LN moves first (its cosine
reaches 1/2 before Post-LN's for every seed, and before Pre-LN's), Post-LN collapses first (its
cosine reaches 0.99 before every other scheme's, by at least a factor 2, for every seed), Pre-LN starts at
Post-LN's speed (:math:`r_k(0)=1`), and Post-LN's speed falls exponentially (log-slope at most
:math:`-`\ ``DROP_RATE`` over :math:`[T/2, T]`, every seed; the total drop is printed as a note); the
curves and the crossing times are converged in the step (the same seed at :math:`\Delta t` and
:math:`\Delta t/2`), and the crossing times in the frame spacing: they are roots of the cubic Hermite
interpolant of the mean cosine (with its exact derivative, column ``dcos_dt``) between frames
``SAVE_EVERY`` apart, and seed 0 is also stored with a frame at every step (``frame = dt``) to check them.

Runtime: about 40 s (``--quick``: 3 seeds) to 80 s (8 seeds) on a loaded 2-core machine.

Command: ``python figures/normalization_speeds.py [--quick] [--out DIR]``.
"""
from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.figures import largest, script_main, smallest, write_rows

ID = "normalization_speeds"
PAPER = "2510.22026"
THEOREM = "speed regulation"
DESCRIPTION = "mean pairwise cosine, direction speed and radius against t for Post-LN, Pre-LN, Peri-LN and nGPT from the same tokens: Peri-LN moves first, Post-LN collapses first"

# ---- constants -----------------------------------------------------------
NORMS = ("post", "pre", "peri", "ngpt")
LABELS = {"post": "Post-LN", "pre": "Pre-LN", "peri": "Peri-LN", "ngpt": "nGPT (α = 0.2)"}
N_TOKENS = 32
D = 8
BETA = 1.0
T_FINAL = 25.0
SAVE_EVERY = 0.25         # frames drawn and stored; seed 0 is also stored at every step (``frame`` = dt)
DT = 0.05
SEEDS = tuple(range(8))
QUICK_SEEDS = (0, 1, 2)
QUICK_T_FINAL = 20.0
QUICK_DT = 0.1
EARLY, LATE = 0.5, 0.99   # cosine levels: first motion, collapse
LATE_FACTOR = 2.0         # Post-LN collapses at least this many times sooner
SPEED_TOL = 1e-12         # Pre-LN and Post-LN at t = 0
REFINE_TOL = 1e-5         # |mean cos(dt) − mean cos(dt/2)|
CROSS_TOL = 1e-4          # |crossing time from SAVE_EVERY frames − from every step|, and dt against dt/2
DROP_RATE = 0.5           # Post-LN's speed falls at least like e^{−DROP_RATE t} over [T/2, T] (measured 1.0000)


def _run(norm: str, seed: int, *, dt: float, t_final: float, frame: float = SAVE_EVERY) -> list[dict[str, Any]]:
    from meanfield import simulate
    from meanfield.normalization import NormalizedDynamics, polar

    cfg = {
        "model": {"d": D, "beta": BETA, "norm": norm},
        "init": {"kind": "uniform", "n": N_TOKENS, "seed": seed},
        "solver": {"method": "rk4", "dt": dt, "t_final": t_final, "save_every": frame},
        "track": {"energy": False},
    }
    run = simulate(cfg)
    dynamics = NormalizedDynamics(run.model, norm=norm, alpha=run.config["model"]["ngpt_alpha"])
    rows = []
    for t, x in zip(run.t, np.asarray(run.states)):
        theta, r = polar(x)
        gram = theta @ theta.T
        velocity = dynamics.direction_velocity(x, float(t))
        speed = np.linalg.norm(velocity, axis=1)
        total = theta.sum(axis=0)
        rows.append({
            "norm": norm, "seed": seed, "dt": dt, "frame": frame, "t": float(t),
            "mean_cos": float((gram.sum() - np.trace(gram)) / (N_TOKENS * (N_TOKENS - 1))),
            # d/dt of mean_cos, exact (θ̇_k ⟂ θ_k): 2⟨Σθ, Σθ̇⟩ / (n(n−1)); it makes the crossing times cubic-accurate
            "dcos_dt": float(2.0 * total @ velocity.sum(axis=0) / (N_TOKENS * (N_TOKENS - 1))),
            "mean_speed": float(speed.mean()), "r_mean": float(r.mean()),
        })
    return rows


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """Rows ``norm, seed, dt, frame, t, mean_cos, dcos_dt, mean_speed, r_mean``.

    Every seed at ``DT`` with frames ``SAVE_EVERY`` apart; seed 0 also at ``DT/2`` (same frames) and at ``DT``
    with a frame at every step (``frame = DT``), the references of the step and frame convergence checks.
    """
    dt, t_final = (QUICK_DT, QUICK_T_FINAL) if quick else (DT, T_FINAL)
    rows: list[dict[str, Any]] = []
    for norm in NORMS:
        for seed in QUICK_SEEDS if quick else SEEDS:
            rows += _run(norm, seed, dt=dt, t_final=t_final)
        rows += _run(norm, 0, dt=dt / 2, t_final=t_final)
        if dt < SAVE_EVERY:
            rows += _run(norm, 0, dt=dt, t_final=t_final, frame=dt)
    return rows


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: (v if k == "norm" else float(v)) for k, v in row.items()} for row in csv.DictReader(f)]


def _series(rows: list[dict[str, Any]], norm: str, seed: float, dt: float, key: str, *,
            frame: float = SAVE_EVERY) -> tuple[np.ndarray, np.ndarray]:
    group = [r for r in rows if r["norm"] == norm and r["seed"] == seed and r["dt"] == dt and r["frame"] == frame]
    return np.array([r["t"] for r in group]), np.array([r[key] for r in group])


def crossing_time(t: np.ndarray, c: np.ndarray, level: float, dc: np.ndarray | None = None) -> float:
    """First time the curve ``c`` reaches ``level``; ``inf`` if it never does.

    With the derivative ``dc`` at the frames, the root of the cubic Hermite interpolant on the bracketing
    frame interval (error O(h⁴) in the frame spacing h); without it, linear interpolation (O(h²)).
    """
    above = np.flatnonzero(c >= level)
    if above.size == 0:
        return float("inf")
    k = int(above[0])
    if k == 0:
        return float(t[0])
    h = t[k] - t[k - 1]
    if dc is None:
        return float(t[k - 1] + (level - c[k - 1]) * h / (c[k] - c[k - 1]))
    c0, c1, m0, m1 = c[k - 1], c[k], h * dc[k - 1], h * dc[k]
    # p(s) = c0 (2s³ − 3s² + 1) + m0 (s³ − 2s² + s) + c1 (−2s³ + 3s²) + m1 (s³ − s²), s ∈ [0, 1]
    coeffs = [2 * c0 + m0 - 2 * c1 + m1, -3 * c0 - 2 * m0 + 3 * c1 - m1, m0, c0 - level]
    roots = [z.real for z in np.roots(coeffs) if abs(z.imag) < 1e-9 and -1e-12 <= z.real <= 1 + 1e-12]
    return float(t[k - 1] + h * min(roots)) if roots else float(t[k - 1] + (level - c0) * h / (c1 - c0))


def _crossing(rows: list[dict[str, Any]], norm: str, seed: float, dt: float, level: float, *, frame: float = SAVE_EVERY) -> float:
    t, c = _series(rows, norm, seed, dt, "mean_cos", frame=frame)
    return crossing_time(t, c, level, _series(rows, norm, seed, dt, "dcos_dt", frame=frame)[1])


def _main_dt(rows: list[dict[str, Any]]) -> float:
    return max(r["dt"] for r in rows)


def _seeds(rows: list[dict[str, Any]], dt: float) -> list[float]:
    return sorted({r["seed"] for r in rows if r["dt"] == dt})


def crossing_table(rows: list[dict[str, Any]], level: float) -> dict[str, np.ndarray]:
    """Crossing times of ``level`` per scheme, one per seed (main step)."""
    dt = _main_dt(rows)
    return {norm: np.array([_crossing(rows, norm, s, dt, level) for s in _seeds(rows, dt)]) for norm in NORMS}


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """The ordering of the speeds, Pre-LN's initial speed, and convergence in the step."""
    rows = read_csv(csv_path)
    dt = _main_dt(rows)
    early, late = crossing_table(rows, EARLY), crossing_table(rows, LATE)
    checks: dict[str, dict[str, Any]] = {}
    gap = float(np.min(early["post"] - early["peri"]))
    checks["peri_moves_before_post"] = {"ok": gap > 0, "value": gap, "expected": f"t(cos ≥ {EARLY:g}): Post-LN − Peri-LN > 0 for every seed"}
    gap = float(np.min(early["pre"] - early["peri"]))
    checks["peri_moves_before_pre"] = {"ok": gap > 0, "value": gap, "expected": f"t(cos ≥ {EARLY:g}): Pre-LN − Peri-LN > 0 for every seed"}
    for norm in ("pre", "peri", "ngpt"):
        ratio = float(np.min(late[norm] / late["post"]))
        checks[f"post_collapses_before_{norm}"] = {"ok": ratio >= LATE_FACTOR, "value": ratio,
                                                   "expected": f"t(cos ≥ {LATE:g}): {norm} / post >= {LATE_FACTOR:g} for every seed"}
    start = largest(abs(_series(rows, "pre", s, dt, "mean_speed")[1][0] - _series(rows, "post", s, dt, "mean_speed")[1][0]) for s in _seeds(rows, dt))
    checks["pre_starts_at_post_speed"] = {"ok": start <= SPEED_TOL, "value": float(start), "expected": f"<= {SPEED_TOL:g} (r(0) = 1)"}
    changes = []
    for norm in NORMS:
        coarse, fine = _series(rows, norm, 0.0, dt, "mean_cos")[1], _series(rows, norm, 0.0, dt / 2, "mean_cos")[1]
        changes.append(float(np.max(np.abs(coarse - fine))))
    worst = largest(changes)
    checks["converged_in_dt"] = {"ok": worst <= REFINE_TOL, "value": worst, "expected": f"max |cos(dt) − cos(dt/2)| <= {REFINE_TOL:g}"}
    step = largest(abs(_crossing(rows, norm, 0.0, dt, level) - _crossing(rows, norm, 0.0, dt / 2, level)) for norm in NORMS for level in (EARLY, LATE))
    checks["crossings_converged_in_dt"] = {"ok": step <= CROSS_TOL, "value": step,
                                           "expected": f"seed 0, t(cos ≥ {EARLY:g}) and t(cos ≥ {LATE:g}): |t(dt) − t(dt/2)| <= {CROSS_TOL:g}"}
    if any(r["frame"] == dt for r in rows) and dt < SAVE_EVERY:
        spacing = largest(abs(_crossing(rows, norm, 0.0, dt, level) - _crossing(rows, norm, 0.0, dt, level, frame=dt))
                      for norm in NORMS for level in (EARLY, LATE))
        checks["crossings_converged_in_frames"] = {"ok": spacing <= CROSS_TOL, "value": spacing,
                                                   "expected": f"seed 0: |t(frames {SAVE_EVERY:g} apart) − t(a frame every step)| <= {CROSS_TOL:g}"}
    rates = []
    for s in _seeds(rows, dt):
        t, speed = _series(rows, "post", s, dt, "mean_speed")
        late = t >= t[-1] / 2
        rates.append(-np.polyfit(t[late], np.log(speed[late]), 1)[0])
    checks["post_speed_falls_exponentially"] = {"ok": smallest(rates) >= DROP_RATE, "value": smallest(rates),
                                                "expected": f"Post-LN: −d ln(speed)/dt over [T/2, T] >= {DROP_RATE:g} for every seed"}
    drops = [_series(rows, "post", s, dt, "mean_speed")[1][0] / _series(rows, "post", s, dt, "mean_speed")[1][-1] for s in _seeds(rows, dt)]
    checks["post_speed_drop"] = {"ok": None, "value": float(np.mean(drops)),
                                 "expected": f"Post-LN speed(0) / speed(t_final): mean over the seeds, [{min(drops):.2g}, {max(drops):.2g}]"}
    return checks


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib.figure import Figure

    dt = _main_dt(rows)
    seeds = _seeds(rows, dt)
    fig = Figure(figsize=(13.0, 4.2), constrained_layout=True)
    axes = fig.subplots(1, 3)
    keys = (("mean_cos", "mean pairwise cosine of the directions θ"), ("mean_speed", r"mean direction speed $\frac{1}{n}\sum_k\|\dot\theta_k\|$"),
            ("r_mean", r"mean radius $\frac{1}{n}\sum_k r_k$"))
    early, late = crossing_table(rows, EARLY), crossing_table(rows, LATE)
    for ax, (key, label) in zip(axes, keys):
        for k, norm in enumerate(NORMS):
            t = _series(rows, norm, seeds[0], dt, key)[0]
            values = np.array([_series(rows, norm, s, dt, key)[1] for s in seeds])
            name = LABELS[norm]
            if key == "mean_cos":
                name += f": t½ = {np.mean(early[norm]):.2g}, t₀.₉₉ = {np.mean(late[norm]):.3g}"
            ax.plot(t, values.mean(axis=0), color=f"C{k}", lw=1.6, label=name)
            ax.fill_between(t, values.min(axis=0), values.max(axis=0), color=f"C{k}", alpha=0.2, lw=0)
        ax.set_xlabel("time t (depth)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    for level in (EARLY, LATE):
        axes[0].axhline(level, color="k", ls=":", lw=0.8)
    axes[0].legend(fontsize=7.5, loc="lower right", title=f"mean over {len(seeds)} seeds (band: min–max)", title_fontsize=7.5)
    axes[2].text(0.03, 0.1, "Post-LN, nGPT: r ≡ 1 (tokens on the sphere)", transform=axes[2].transAxes, fontsize=8)
    axes[1].set_yscale("log")
    axes[2].set_yscale("log")
    fig.suptitle(f"Karagodin, Ge, Polyanskiy and Rigollet, arXiv 2510.22026: normalisation as speed regulation "
                 f"(softmax, Q = K = V = I, β = {BETA:g}, n = {N_TOKENS}, d = {D}, same initial tokens)", fontsize=10)
    fig.savefig(path, dpi=120)
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
