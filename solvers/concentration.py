r"""Low-temperature concentration onto :math:`\Pi_\sharp\rho_0` (seed 002): tracker, analysis, β sweeps, cost.

.. math::

    W_2\big(\rho^\beta_t, \Pi_\sharp\rho_0\big) \lesssim
        \sqrt{\tfrac{\log(\beta+1)}{\beta}}\; e^{C_1 t} + e^{-ct}

(seed 002, Theorem 1; MODEL.md §4).  The curve :math:`W_2(t)` first falls
(the zero-temperature flow concentrates the tokens on the dominant eigenspace
:math:`E` of :math:`S=VB^\top`), reaches its minimum :math:`W_{2,\min}(\beta)` at
:math:`t_{\min}(\beta)`, and then rises again as the finite-temperature error
takes over; for large ``t`` the mass drifts toward the dominant eigenspace of
``V`` (Conjecture 1, the terminal phase).

* :func:`concentration_tracker` — records ``w2_target`` = :math:`W_2(\rho_t,\Pi_\sharp\rho_0)`,
  ``v_eigenspace_distance`` (to :math:`E_V`) and ``e_eigenspace_distance``
  (to :math:`E`) at every saved frame (``[track] concentration = true``).
* :func:`concentration_summary` — :math:`t_{\min}`, :math:`W_{2,\min}` and the
  metastable window of one curve.
* :func:`sweep_beta` — the β family with the fits of :math:`t_{\min}` against
  :math:`\log\beta` and of :math:`W_{2,\min}` against :math:`\sqrt{\log(\beta+1)/\beta}`.
* :func:`tracking_share` and :func:`bench_concentration` — what the tracking costs.

The default experiment is :data:`DEFAULT_CONCENTRATION_CONFIG` (also
``data/concentration.toml``).
"""
from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from meanfield.build import build_heads
from meanfield.config import load_config
from meanfield.errors import ConfigError
from meanfield.projection import (
    AssumptionReport,
    Pushforward,
    check_assumptions,
    concentration_rate,
    dominant_projector,
    eigenspace_distance,
    enforce_assumptions,
    pushforward_target,
    resolution_warning,
    value_projector,
)

__all__ = [
    "DEFAULT_CONCENTRATION_CONFIG",
    "ConcentrationTracker",
    "BetaSweep",
    "single_head",
    "assumption_report",
    "concentration_tracker",
    "tracker_from_head",
    "concentration_summary",
    "concentration_curves",
    "resolution_size",
    "sweep_beta",
    "linear_fit",
    "tracking_share",
    "bench_concentration",
]

#: The default concentration experiment on S² (also ``data/concentration.toml``; keep them equal).
#: ``B = QᵀK = K`` and ``V`` are chosen so that ``S = V Bᵀ = diag(1, 0.5, 0.25)`` exactly
#: (``B = S V⁻¹`` with ``V⁻¹ = [[1.25, -0.75, 0], [-0.75, 1.25, 0], [0, 0, 4]]``):
#: Assumption 1 holds with gap 0.5 and ``E = span(e1)``, while the dominant
#: eigenspace of ``V`` (eigenvalue 2) is ``span((1, 1, 0)/√2)``, 45° away, so the
#: terminal phase of Conjecture 1 is visible (W2 to Π♯ρ₀ then climbs back to ≈ π/4).
DEFAULT_CONCENTRATION_CONFIG: dict[str, Any] = {
    "model": {
        "d": 3,
        "beta": 16.0,
        "attention": "softmax",
        "heads": [
            {
                "Q": "identity",
                "K": [[1.25, -0.75, 0.0], [-0.375, 0.625, 0.0], [0.0, 0.0, 1.0]],
                "V": [[1.25, 0.75, 0.0], [0.75, 1.25, 0.0], [0.0, 0.0, 0.25]],
            }
        ],
    },
    "init": {"kind": "uniform", "n": 600, "seed": 0},
    "solver": {"kind": "particle", "method": "rk4", "dt": 0.05, "t_final": 12.0, "save_every": 0.1},
    "track": {"energy": False, "concentration": True},
}


def single_head(cfg: dict[str, Any]) -> Any:
    """The one head of a resolved config (seed 002 is a single-head theory).

    Raises
    ------
    ConfigError
        ``model.heads`` holds more than one head.
    """
    heads = build_heads(cfg)
    if len(heads) != 1:
        raise ConfigError("model.heads", f"W2 to Π♯ρ₀ (seed 002) needs a single head, got {len(heads)}")
    return heads[0]


def assumption_report(cfg: dict[str, Any], *, policy: str | None = None) -> AssumptionReport:
    """Check Assumption 1 for the head of ``cfg`` and apply ``policy`` (default ``model.assumptions``).

    Raises
    ------
    ConfigError
        (key ``model.heads``) when the assumption fails under ``policy = "check"``,
        with every number in the message.
    """
    head = single_head(cfg)
    report = check_assumptions(head.Q, head.K, head.V)
    return enforce_assumptions(report, cfg["model"]["assumptions"] if policy is None else policy)


@dataclass
class ConcentrationTracker:
    r"""Records the distances of the token measure to :math:`\Pi_\sharp\rho_0`, :math:`E` and :math:`E_V`.

    .. math::

        \texttt{w2\_target} = W_2(\rho_t, \Pi_\sharp\rho_0),\quad
        \texttt{e\_eigenspace\_distance} = D(\rho_t, E),\quad
        \texttt{v\_eigenspace\_distance} = D(\rho_t, E_V)

    (seed 002, Theorem 1 and Conjecture 1), with geodesic cost and :math:`D` of
    :func:`meanfield.projection.eigenspace_distance`.  The state is either a
    particle cloud ``(n, d)`` with masses ``weights`` (uniform when None) or,
    when ``points`` is set, the cell masses ``(N,)`` of a grid measure on those
    points.  ``seconds`` accumulates the time spent in the tracker.
    """

    target: Pushforward
    P_E: NDArray[np.float64]
    P_V: NDArray[np.float64]
    method: str = "exact"
    points: NDArray[np.float64] | None = None
    weights: NDArray[np.float64] | None = None
    report: AssumptionReport | None = None
    name: str = "concentration"
    seconds: float = field(default=0.0, init=False)
    calls: int = field(default=0, init=False)

    def measure(self, state: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Support points and weights of the measure held by ``state``."""
        if self.points is None:
            return state, self.weights
        mass = np.clip(np.asarray(state, dtype=float), 0.0, None)
        return self.points, mass / mass.sum()

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:  # noqa: ARG002
        from meanfield.transport import w2

        started = time.perf_counter()
        x, a = self.measure(state)
        options: dict[str, Any] = {"seed": 0} if self.method == "sliced" else {}
        value = w2(x, self.target.atoms, a, self.target.weights, method=self.method, **options)
        out = {
            "w2_target": float(value),
            "v_eigenspace_distance": eigenspace_distance(x, self.P_V, a),
            "e_eigenspace_distance": eigenspace_distance(x, self.P_E, a),
        }
        self.seconds += time.perf_counter() - started
        self.calls += 1
        return out


def tracker_from_head(
    Q: ArrayLike,
    K: ArrayLike,
    V: ArrayLike,
    x0: ArrayLike,
    *,
    weights: ArrayLike | None = None,
    points: ArrayLike | None = None,
    method: str = "exact",
    policy: str = "check",
) -> ConcentrationTracker:
    r"""A :class:`ConcentrationTracker` for the head ``(Q, K, V)`` and the initial measure.

    Parameters
    ----------
    Q, K, V : arrays
        The head (``S = V Bᵀ``, ``B = QᵀK``).
    x0 : (n, d) array or (N,) array
        Initial particles, or the initial cell masses when ``points`` is given.
    weights : (n,) array, optional
        Particle masses (uniform by default), for the target and every frame.
    points : (N, d) array, optional
        Grid cell centres; the state is then a mass vector.
    method : {"exact", "sinkhorn", "sliced"}
        W2 estimator (``track.w2_method``).
    policy : {"check", "warn", "skip"}
        What to do when Assumption 1 fails (``model.assumptions``).
    """
    report = enforce_assumptions(check_assumptions(Q, K, V), policy)
    B = np.asarray(Q, dtype=float).T @ np.asarray(K, dtype=float)
    S = np.asarray(V, dtype=float) @ B.T
    P_E = dominant_projector(S)
    P_V = value_projector(V)
    if points is None:
        support, a0 = np.asarray(x0, dtype=float), weights
        pts = None
    else:
        pts = np.asarray(points, dtype=float)
        mass = np.clip(np.asarray(x0, dtype=float), 0.0, None)
        support, a0 = pts, mass / mass.sum()
    target = pushforward_target(support, P_E, a0)
    masses = None if (pts is not None or weights is None) else np.asarray(weights, dtype=float) / np.sum(weights)
    return ConcentrationTracker(target=target, P_E=P_E, P_V=P_V, method=method, points=pts, weights=masses, report=report)


def concentration_tracker(cfg: dict[str, Any], setup: Any) -> ConcentrationTracker:
    """The tracker ``[track] concentration = true`` adds to a run (called by :mod:`solvers.run`).

    Checks Assumption 1 per ``model.assumptions`` and builds :math:`\\Pi_\\sharp\\rho_0` from
    the run's initial state ``setup.state`` (particles ``x``; for grid runs, the
    masses on ``setup.static["points"]``).

    Raises
    ------
    ConfigError
        More than one head, or Assumption 1 fails under ``model.assumptions = "check"``.
    """
    head = single_head(cfg)
    points = None
    if setup.state_name != "x":
        if "points" not in setup.static:
            raise ConfigError("track.concentration", f"cannot locate the measure of a {setup.state_name!r} state (no 'points')")
        points = setup.static["points"]
    return tracker_from_head(
        head.Q, head.K, head.V, setup.state, points=points, method=cfg["track"]["w2_method"], policy=cfg["model"]["assumptions"]
    )


# ----------------------------------------------------------------------------- analysis


def concentration_summary(
    t: ArrayLike, w2: ArrayLike, *, threshold: float | None = None, factor: float = 2.0
) -> dict[str, Any]:
    r"""Minimum and metastable window of a curve :math:`W_2(t)`.

    .. math::

        t_{\min} = \arg\min_t W_2(t),\qquad
        [t_a, t_b] = \text{the connected component of } \{t : W_2(t)\le \theta\}
        \text{ containing } t_{\min}

    (seed 002, Theorem 1: metastability near :math:`\Pi_\sharp\rho_0` for
    :math:`t\lesssim\log\beta`).  The threshold is ``threshold`` if given, else
    :math:`\theta = \text{factor}\cdot W_{2,\min}` (default twice the minimum).
    :math:`t_a, t_b` are interpolated linearly between saved frames; when the
    curve is still below :math:`\theta` at the first (last) frame the window is
    reported open at that end.

    Parameters
    ----------
    t : (T,) array-like
        Increasing times.
    w2 : (T,) array-like
        Values; NaN frames are ignored.
    threshold : float, optional
    factor : float

    Returns
    -------
    dict
        ``t_min``, ``w2_min``, ``threshold``, ``t_a``, ``t_b``, ``window_length``
        (NaN when the threshold is below the minimum), ``open_start``,
        ``open_end``, ``min_at_end`` (the curve was still falling: run longer),
        ``w2_initial``, ``w2_final``.

    Examples
    --------
    >>> import numpy as np
    >>> t = np.linspace(0.0, 4.0, 5)
    >>> s = concentration_summary(t, [1.0, 0.4, 0.2, 0.5, 0.9])
    >>> s["t_min"], s["w2_min"], s["t_a"], round(s["t_b"], 6)
    (2.0, 0.2, 1.0, 2.666667)
    """
    times = np.asarray(t, dtype=float)
    values = np.asarray(w2, dtype=float)
    if times.shape != values.shape or times.ndim != 1:
        raise ValueError(f"t and w2 must be 1-D arrays of equal length, got {times.shape} and {values.shape}")
    good = np.isfinite(values) & np.isfinite(times)
    if not np.any(good):
        raise ValueError("no finite W2 value")
    times, values = times[good], values[good]
    i = int(np.argmin(values))
    w_min = float(values[i])
    theta = float(threshold) if threshold is not None else factor * w_min
    out: dict[str, Any] = {
        "t_min": float(times[i]),
        "w2_min": w_min,
        "threshold": theta,
        "w2_initial": float(values[0]),
        "w2_final": float(values[-1]),
        "min_at_end": bool(i == values.size - 1 and values.size > 1),
        "open_start": False,
        "open_end": False,
    }
    if w_min > theta:
        out.update(t_a=math.nan, t_b=math.nan, window_length=math.nan)
        return out

    def crossing(j_in: int, j_out: int) -> float:
        w_in, w_out = values[j_in], values[j_out]
        frac = (theta - w_in) / (w_out - w_in) if w_out != w_in else 0.0
        return float(times[j_in] + frac * (times[j_out] - times[j_in]))

    lo = i
    while lo > 0 and values[lo - 1] <= theta:
        lo -= 1
    hi = i
    while hi < values.size - 1 and values[hi + 1] <= theta:
        hi += 1
    if lo == 0:
        t_a, out["open_start"] = float(times[0]), True
    else:
        t_a = crossing(lo, lo - 1)
    if hi == values.size - 1:
        t_b, out["open_end"] = float(times[-1]), True
    else:
        t_b = crossing(hi, hi + 1)
    out.update(t_a=t_a, t_b=t_b, window_length=t_b - t_a)
    return out


def linear_fit(x: ArrayLike, y: ArrayLike) -> dict[str, float]:
    r"""Least-squares line :math:`y \approx a x + b` with :math:`R^2 = 1 - \mathrm{SS}_{res}/\mathrm{SS}_{tot}`."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.size < 2:
        return {"slope": math.nan, "intercept": math.nan, "r2": math.nan}
    slope, intercept = np.polyfit(xa, ya, 1)
    residual = ya - (slope * xa + intercept)
    total = float(np.sum((ya - ya.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residual**2)) / total if total > 0 else 1.0
    return {"slope": float(slope), "intercept": float(intercept), "r2": r2}


def resolution_size(cfg: dict[str, Any]) -> int:
    """The number of degrees of freedom that must resolve the kernel: particles, or grid cells."""
    return int(cfg["grid"]["cells"] if cfg["solver"]["kind"] == "grid" else cfg["init"]["n"])


def concentration_curves(run: dict[str, Any], *, policy: str | None = None) -> dict[str, NDArray[np.float64]]:
    """``t``, ``w2_target``, ``v_eigenspace_distance``, ``e_eigenspace_distance`` of a stored run.

    Uses the tracked diagnostics when the run recorded them and recomputes
    them from the saved frames otherwise (Π♯ρ₀ from the first frame).
    Assumption 1 is checked with ``policy`` (default: the run's ``model.assumptions``).

    Parameters
    ----------
    run : dict
        As returned by :func:`meanfield.io.read_run`.
    """
    cfg = run["config"]
    assumption_report(cfg, policy=policy)
    diagnostics = run.get("diagnostics", {})
    keys = ("w2_target", "v_eigenspace_distance", "e_eigenspace_distance")
    t = np.asarray(run["t"], dtype=float)
    if all(k in diagnostics and np.all(np.isfinite(diagnostics[k])) for k in keys):
        return {"t": t, **{k: np.asarray(diagnostics[k], dtype=float) for k in keys}}
    head = single_head(cfg)
    if "x" in run:
        frames, points = run["x"], None
    elif "mass" in run and "points" in run:
        frames, points = run["mass"], run["points"]
    else:
        raise ConfigError("OUT.h5", "the run holds neither particles 'x' nor grid 'mass' with 'points'")
    if len(frames) == 0:
        raise ConfigError("OUT.h5", "the run holds no frame")
    tracker = tracker_from_head(head.Q, head.K, head.V, frames[0], points=points, method=cfg["track"]["w2_method"], policy="skip")
    rows = [tracker(float(tk), frame) for tk, frame in zip(t, frames)]
    return {"t": t, **{k: np.array([row[k] for row in rows]) for k in keys}}


# ----------------------------------------------------------------------------- β sweeps


@dataclass(frozen=True)
class BetaSweep:
    r"""Outcome of :func:`sweep_beta`.

    Attributes
    ----------
    betas : (m,) array
    curves : list of dict
        Per β: ``t``, ``w2_target``, ``v_eigenspace_distance``, ``e_eigenspace_distance``.
    summaries : list of dict
        Per β: :func:`concentration_summary` plus ``beta``, ``n``, ``rate``
        (:math:`\sqrt{\log(\beta+1)/\beta}`), ``ratio`` (:math:`W_{2,\min}/\text{rate}`),
        ``under_resolved`` (the warning text or ``""``), ``wall_time``.
    fit_tmin : dict
        :math:`t_{\min}\approx a\log\beta+b`: ``slope``, ``intercept``, ``r2``.
    fit_w2min : dict
        :math:`\log W_{2,\min}\approx a\log\sqrt{\log(\beta+1)/\beta}+b`: ``slope``, ``intercept``, ``r2``.
    solver : str
    files : list of str
        HDF5 runs written (empty without ``out_dir``).
    """

    betas: NDArray[np.float64]
    curves: list[dict[str, NDArray[np.float64]]]
    summaries: list[dict[str, Any]]
    fit_tmin: dict[str, float]
    fit_w2min: dict[str, float]
    solver: str
    files: list[str] = field(default_factory=list)

    @property
    def under_resolved(self) -> bool:
        return any(s["under_resolved"] for s in self.summaries)

    def table(self) -> str:
        """The per-β numbers and both fits as text."""
        lines = [f"{'beta':>8} {'n':>7} {'t_min':>8} {'W2_min':>9} {'window [t_a, t_b]':>20} {'rate':>9} {'W2min/rate':>10}  resolved"]
        for s in self.summaries:
            end = "*" if s["min_at_end"] else " "
            if math.isnan(s["t_a"]):
                window = "none"
            else:
                window = f"[{'≤' if s['open_start'] else ''}{s['t_a']:.3g}, {'≥' if s['open_end'] else ''}{s['t_b']:.3g}]"
            lines.append(
                f"{s['beta']:8.4g} {s['n']:7d} {s['t_min']:7.4g}{end} {s['w2_min']:9.4g} {window:>20} "
                f"{s['rate']:9.4g} {s['ratio']:10.4g}  {'no' if s['under_resolved'] else 'yes'}"
            )
        a = self.fit_tmin
        b = self.fit_w2min
        lines.append(f"fit t_min = {a['slope']:.4g}·log β + {a['intercept']:.4g}   (R² = {a['r2']:.4f})")
        lines.append(f"fit log W2_min = {b['slope']:.4g}·log √(log(β+1)/β) + {b['intercept']:.4g}   (R² = {b['r2']:.4f})")
        if any(s["open_end"] for s in self.summaries):
            lines.append("≥ the curve is still below the threshold at the last frame: the window may extend further")
        if any(s["min_at_end"] for s in self.summaries):
            lines.append("* the minimum is at the last frame: the run is too short to see t_min (raise solver.t_final)")
        return "\n".join(lines)


def _parse_betas(betas: Sequence[float] | str) -> NDArray[np.float64]:
    if isinstance(betas, str):
        try:
            values = [float(item) for item in betas.split(",") if item.strip()]
        except ValueError:
            raise ConfigError("--sweep-beta", f"expected comma-separated numbers, got {betas!r}") from None
    else:
        values = [float(b) for b in betas]
    arr = np.asarray(values, dtype=float)
    if arr.size < 2 or np.unique(arr).size < 2:
        raise ConfigError("--sweep-beta", f"need at least two distinct values of β, got {values}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ConfigError("--sweep-beta", f"every β must be finite and > 0 (the fits use log β), got {values}")
    return np.sort(arr)


def sweep_beta(
    cfg: dict[str, Any] | str | Path,
    betas: Sequence[float] | str,
    *,
    solver: str | None = None,
    out_dir: str | Path | None = None,
    threshold: float | None = None,
    quiet: bool = True,
    policy: str | None = None,
) -> BetaSweep:
    r"""Run the β family of a config and fit the concentration observables.

    .. math::

        t_{\min}(\beta) \approx a\log\beta + b,\qquad
        \log W_{2,\min}(\beta) \approx a'\log\sqrt{\tfrac{\log(\beta+1)}{\beta}} + b'

    (seed 002, Theorem 1: the bound
    :math:`r(\beta)e^{C_1t}+e^{-ct}` is smallest at
    :math:`t\approx\log(1/r)/(C_1+c)`, linear in :math:`\log\beta`, where it is
    :math:`\sim r^{c/(C_1+c)}`, so the theory predicts :math:`a>0` and :math:`0<a'\le1`).
    Every run tracks ``w2_target`` (``[track] concentration = true``); each β is
    checked for under-resolution (:func:`meanfield.projection.resolution_warning`).

    Parameters
    ----------
    cfg : dict or path
        Resolved config (or a TOML file); ``model.beta`` is replaced by each β.
    betas : sequence of float or "b1,b2,..."
        At least two distinct positive values.
    solver : {"particle", "grid"}, optional
        Override ``solver.kind``; ``"grid"`` (S² only) needs :mod:`solvers.grid`
        and switches the method to ``ssprk3`` unless it is already a grid method.
    out_dir : path, optional
        Write each run to ``out_dir/beta_<β>.h5``.
    threshold : float, optional
        Metastability threshold of :func:`concentration_summary` (default 2·W2_min).
    quiet : bool
        No progress bars.
    policy : {"check", "warn", "skip"}, optional
        Assumption-1 policy (default ``model.assumptions``).

    Returns
    -------
    BetaSweep
    """
    from solvers.run import simulate_config

    base = load_config(cfg) if isinstance(cfg, (str, Path)) else copy.deepcopy(cfg)
    values = _parse_betas(betas)
    if solver is not None:
        if solver not in ("particle", "grid"):
            raise ConfigError("--solver", f"expected 'particle' or 'grid', got {solver!r}")
        if solver == "grid":
            import importlib.util

            if importlib.util.find_spec("solvers.grid") is None:
                raise ConfigError("--solver", "the grid solver (solvers/grid.py) is not available in this installation")
            if base["model"]["d"] != 3:
                raise ConfigError("--solver", f"the grid solver works on S² (d = 3), got model.d = {base['model']['d']}")
            if base["solver"]["method"] not in ("ssprk2", "ssprk3"):
                base["solver"]["method"] = "ssprk3"
        elif base["solver"]["method"] in ("ssprk2", "ssprk3"):
            base["solver"]["method"] = "rk4"
        base["solver"]["kind"] = solver
    if policy is not None:
        base["model"]["assumptions"] = policy
    assumption_report(base)
    base["track"]["concentration"] = True
    curves: list[dict[str, NDArray[np.float64]]] = []
    summaries: list[dict[str, Any]] = []
    files: list[str] = []
    n = resolution_size(base)
    d = base["model"]["d"]
    for beta in values:
        case = copy.deepcopy(base)
        case["model"]["beta"] = float(beta)
        out = None
        if out_dir is not None:
            out = Path(out_dir) / f"beta_{beta:g}.h5"
            files.append(str(out))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Assumption 1", category=RuntimeWarning)  # warned once above
            result = simulate_config(case, out, quiet=quiet, keep_states=False)
        curve = {"t": result.t, **{k: result.diagnostics[k] for k in ("w2_target", "v_eigenspace_distance", "e_eigenspace_distance")}}
        curves.append(curve)
        summary = concentration_summary(curve["t"], curve["w2_target"], threshold=threshold)
        rate = float(concentration_rate(beta))
        summary.update(
            beta=float(beta),
            n=n,
            rate=rate,
            ratio=summary["w2_min"] / rate,
            under_resolved=resolution_warning(n, float(beta), d) or "",
            wall_time=float(result.info["wall_time"]),
        )
        summaries.append(summary)
    t_min = np.array([s["t_min"] for s in summaries])
    w_min = np.array([s["w2_min"] for s in summaries])
    fit_tmin = linear_fit(np.log(values), t_min)
    fit_w2min = linear_fit(np.log(concentration_rate(values)), np.log(np.maximum(w_min, 1e-300)))
    return BetaSweep(values, curves, summaries, fit_tmin, fit_w2min, base["solver"]["kind"], files)


# ----------------------------------------------------------------------------- cost


def tracking_share(cfg: dict[str, Any] | None = None) -> dict[str, float]:
    """Run ``cfg`` (default: the default concentration experiment) and time the concentration tracking.

    Returns
    -------
    dict
        ``simulation_seconds`` (wall time of the run loop, tracking included),
        ``tracking_seconds`` (time in the concentration tracker), ``share``
        (their ratio), ``frames``, ``n``.
    """
    from solvers.loop import run_loop, save_times
    from solvers.run import setup_run

    resolved = load_config(DEFAULT_CONCENTRATION_CONFIG) if cfg is None else copy.deepcopy(cfg)
    resolved["track"]["concentration"] = True
    setup = setup_run(resolved)  # the same build as simulate_config, without a writer
    tracker = [t for t in setup.trackers if isinstance(t, ConcentrationTracker)]
    solver = resolved["solver"]
    times = save_times(0.0, solver["t_final"], solver["save_every"])
    result = run_loop(setup.stepper, setup.state, times, trackers=setup.trackers, keep_states=False)
    seconds = tracker[0].seconds
    wall = float(result.info["wall_time"])
    return {
        "simulation_seconds": wall,
        "tracking_seconds": seconds,
        "share": seconds / wall if wall > 0 else math.nan,
        "frames": float(tracker[0].calls),
        "n": float(resolution_size(resolved)),
    }


def _timed(func: Any, repeat: int) -> tuple[float, Any]:
    best, value = math.inf, None
    for _ in range(repeat):
        started = time.perf_counter()
        value = func()
        best = min(best, time.perf_counter() - started)
    return best, value


def bench_concentration(*, quick: bool = False, repeat: int = 3) -> dict[str, Any]:
    r"""Timings of the concentration diagnostics, for ``meanfield bench``.

    Rows (best of ``repeat``):

    * ``w2_target`` — exact :math:`W_2(\rho,\Pi_\sharp\rho_0)` for :math:`n=10^5`
      uniform tokens on :math:`S^2` against the two atoms :math:`\pm e`;
    * ``eigenspace_distance`` — :math:`D(\rho, E_V)` for the same cloud;
    * ``w2_exact_clouds`` — exact :math:`W_2` between two clouds of :math:`n = 2000`
      (``ot.emd2``, for comparison: the structure makes the first row cheap);
    * ``tracking_share`` — share of the default concentration experiment's
      wall time spent in the tracker (target < 10 %).

    ``quick`` divides the sizes by 10 and runs the default experiment with ``n = 200``, ``t_final = 2``.

    Returns
    -------
    dict
        ``rows``: list of ``{"name", "n", "seconds", "value"}``; ``tracking``:
        the dict of :func:`tracking_share`.
    """
    from meanfield.sphere import sample_uniform
    from meanfield.transport import w2

    scale = 10 if quick else 1
    n_big, n_pair = 100_000 // scale, 2000 // scale
    cfg = load_config(DEFAULT_CONCENTRATION_CONFIG)
    head = single_head(cfg)
    x = sample_uniform(n_big, 3, seed=1)
    tracker = tracker_from_head(head.Q, head.K, head.V, x, policy="skip")
    rows = []
    seconds, value = _timed(lambda: w2(x, tracker.target.atoms, None, tracker.target.weights), repeat)
    rows.append({"name": "w2_target", "n": n_big, "seconds": seconds, "value": float(value)})
    seconds, value = _timed(lambda: eigenspace_distance(x, tracker.P_V), repeat)
    rows.append({"name": "eigenspace_distance", "n": n_big, "seconds": seconds, "value": float(value)})
    y1, y2 = sample_uniform(n_pair, 3, seed=2), sample_uniform(n_pair, 3, seed=3)
    seconds, value = _timed(lambda: w2(y1, y2), 1 if not quick else repeat)
    rows.append({"name": "w2_exact_clouds", "n": n_pair, "seconds": seconds, "value": float(value)})
    if quick:
        cfg["init"]["n"] = 200
        cfg["solver"]["t_final"] = 2.0
    share = tracking_share(cfg)
    rows.append({"name": "tracking_share", "n": int(share["n"]), "seconds": share["tracking_seconds"], "value": share["share"]})
    return {"rows": rows, "tracking": share}
