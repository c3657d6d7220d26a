r"""Concentration onto :math:`\Pi_\sharp\rho_0` of a measure and of a run: distances, minimum, window.

.. math::

    W_2\big(\rho^\beta_t, \Pi_\sharp\rho_0\big) \lesssim
        \sqrt{\tfrac{\log(\beta+1)}{\beta}}\; e^{C_1 t} + e^{-ct}

(Theorem 1 of Alcalde, Bungert, Riedl and Roith, *Quantifying Concentration
Phenomena of Mean-Field Transformers in the Low-Temperature Regime*, arXiv
2605.10931).  The curve :math:`W_2(t)` first falls (the zero-temperature flow
concentrates the tokens on the dominant eigenspace :math:`E` of :math:`S=VB^\top`),
reaches its minimum :math:`W_{2,\min}(\beta)` at :math:`t_{\min}(\beta)`, and then
rises again as the finite-temperature error takes over; for large ``t`` the mass
drifts toward the dominant eigenspace of ``V`` (their Conjecture 1, the terminal phase).

* :class:`ConcentrationTracker` — ``w2_target`` = :math:`W_2(\rho_t,\Pi_\sharp\rho_0)`,
  ``v_eigenspace_distance`` (to :math:`E_V`) and ``e_eigenspace_distance`` (to
  :math:`E`) of a measure; a run tracker with ``[track] concentration = true``;
* :func:`concentration_summary` — :math:`t_{\min}`, :math:`W_{2,\min}` and the
  metastable window of one curve;
* :func:`concentration_curves` — the three curves of a stored run.
"""
from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from meanfield.analysis.core_resolution import CoreResolution, core_resolution
from meanfield.analysis.projection import (
    AssumptionReport,
    Pushforward,
    check_assumptions,
    dominant_eigenspace,
    dominant_projector,
    eigenspace_distance,
    enforce_assumptions,
    pushforward_target,
    score_and_value,
    value_projector,
)
from meanfield.build import build_heads
from meanfield.errors import ConfigError, MeanfieldWarning
from meanfield.io.token_masses import stored_token_masses

__all__ = [
    "ConcentrationTracker",
    "single_head",
    "assumption_report",
    "tracker_from_head",
    "concentration_summary",
    "concentration_curves",
    "origin_target",
    "OriginMeasure",
    "origin_measure",
    "open_window_note",
    "grid_core_resolution",
    "core_check",
    "resolved_range_text",
    "resolution_size",
    "RunSource",
    "run_source",
    "linear_fit",
]


def single_head(cfg: dict[str, Any]) -> Any:
    """The one head of a resolved config (the theory of Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931, is for one head).

    Raises
    ------
    ConfigError
        ``model.heads`` holds more than one head, or ``model.direction`` is ``"descent"``.
    """
    check_ascent(cfg["model"].get("direction", "ascent"))
    heads = build_heads(cfg)
    if len(heads) != 1:
        raise ConfigError("model.heads", f"W2 to Π♯ρ₀ (Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931) needs a single head, got {len(heads)}")
    return heads[0]


def check_ascent(direction: str) -> None:
    """Refuse a run of the descent flow (``model.direction``), to which the concentration analysis does not apply:
    W2 had been measured against the wrong end of S's spectrum (a run of :func:`meanfield.solve` too, t_min = 0)."""
    if direction != "ascent":
        raise ConfigError("model.direction", "W2 to Π♯ρ₀ (Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931) is the limit "
                                             "of the ascent flow, whose tokens gather in the dominant eigenspace of S = V Bᵀ; "
                                             "under descent they leave it (to the other end of S's spectrum), so the analysis "
                                             "does not apply")


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

    (Theorem 1 and Conjecture 1 of arXiv 2605.10931), with geodesic cost and :math:`D` of
    :func:`meanfield.analysis.projection.eigenspace_distance`.  The state is either a
    particle cloud ``(n, d)`` with masses ``weights`` (uniform when None) or,
    when ``points`` is set, the cell masses ``(N,)`` of a grid measure on those
    points.  When ``mesh`` is set too, the grid measure is the limited linear
    reconstruction of the masses, integrated by the second-order quadrature of
    :meth:`meanfield.geometry.reconstruction.LinearReconstruction.quadrature` (so
    that :math:`W_2` keeps the spread of the mass inside each cell).  ``seconds``
    accumulates the time spent in the tracker.
    """

    target: Pushforward
    P_E: NDArray[np.float64]
    P_V: NDArray[np.float64]
    method: str = "exact"
    points: NDArray[np.float64] | None = None
    weights: NDArray[np.float64] | None = None
    report: AssumptionReport | None = None
    mesh: Any = None
    name: str = "concentration"
    seconds: float = field(default=0.0, init=False)
    calls: int = field(default=0, init=False)

    def measure(self, state: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Support points and weights of the measure held by ``state``."""
        if self.points is None:
            return state, self.weights
        mass = np.clip(np.asarray(state, dtype=float), 0.0, None)
        if self.mesh is not None:
            nodes, weights = grid_quadrature(self.mesh, mass)
            return nodes, weights / weights.sum()
        return self.points, mass / mass.sum()

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:  # noqa: ARG002
        from meanfield.analysis.transport import w2

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
    mesh: Any = None,
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
    mesh : SphericalMesh, optional
        The grid's mesh: the measure is then the second-order quadrature of the
        reconstructed density (for runs of the second-order scheme), and, when
        ``dim E = 1``, the weight :math:`p` of :math:`\Pi_\sharp\rho_0` is the mass of
        that density on the side :math:`\langle x,e\rangle>0`, with the cells the plane
        cuts split exactly (:meth:`LinearReconstruction.half_space_mass`), not by the side of
        each quadrature node: on a mesh of 40 000 cells the node split errs by 2e-5,
        and moving that mass between the atoms adds 20 % to :math:`W_2` near its minimum at β = 1024.
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
        support, a0 = grid_quadrature(mesh, mass) if mesh is not None else (pts, mass)
        a0 = a0 / a0.sum()
    target = pushforward_target(support, P_E, a0, density=pts is not None)  # a grid's nodes: no mass on E^⊥
    if mesh is not None and target.atoms.shape[0] > QUADRATURE_MAX_ATOMS:
        # Π♯ρ₀ is no few atoms (a head whose E is the whole space, …): W2 between two quadratures of the mesh would
        # pair every node with every node (500 cells: two minutes and 3 GB a frame); the cells' masses at their centres
        # measure it at the mesh's resolution
        mesh, support, a0 = None, pts, mass / mass.sum()
        target = pushforward_target(support, P_E, a0, density=True)
    if mesh is not None and target.dim_E == 1:  # (it had been skipped where nodes lie on the plane: icosahedral meshes)
        # p = ρ₀(⟨x,e⟩ > 0) of the reconstructed density, with the cells that the plane cuts split exactly
        from meanfield.geometry.reconstruction import reconstruction_of

        p = reconstruction_of(mesh).half_space_mass(mass, target.atoms[0]) / mass.sum()
        target = replace(target, weights=np.array([p, 1.0 - p]))
    masses = None if (pts is not None or weights is None) else np.asarray(weights, dtype=float) / np.sum(weights)
    return ConcentrationTracker(target=target, P_E=P_E, P_V=P_V, method=method, points=pts, weights=masses, report=report,
                                mesh=mesh)


#: beyond this many atoms of Π♯ρ₀ a grid run's W2 takes the cells at their centres, not the quadrature of its reconstruction
QUADRATURE_MAX_ATOMS = 64

#: the slope of W2 at the end of a curve (``w2_final_slope`` of :func:`concentration_summary`) is taken over this many
#: frame intervals before the last frame (from the minimum on)
LEVEL_FRAMES = 3

#: W2 has levelled off below the threshold (:func:`open_window_note`) when its rise at the last frames' slope, over as
#: long again as the time since the minimum, is at most this fraction of what it lacks to the threshold
LEVEL_FRACTION = 0.1


def grid_quadrature(mesh: Any, mass: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Nodes and weights of the reconstructed grid measure (one :class:`LinearReconstruction` per mesh)."""
    from meanfield.geometry.reconstruction import reconstruction_of

    return reconstruction_of(mesh).quadrature(np.asarray(mass, dtype=float))


# ----------------------------------------------------------------------------- analysis


def concentration_summary(
    t: ArrayLike, w2: ArrayLike, *, threshold: float | None = None, factor: float = 2.0
) -> dict[str, Any]:
    r"""Minimum and metastable window of a curve :math:`W_2(t)`.

    .. math::

        t_{\min} = \arg\min_t W_2(t),\qquad
        [t_a, t_b] = \text{the connected component of } \{t : W_2(t)\le \theta\}
        \text{ containing } t_{\min}

    (Theorem 1: metastability near :math:`\Pi_\sharp\rho_0` for
    :math:`t\lesssim\log\beta`).  The first local minimum of the saved frames,
    ``t_first_min`` and ``w2_first_min``, is reported beside the global one: at large β
    the curve can wander near its floor after it (perturbations of the discretisation
    decide when the clusters leave, and a later dip may go lower), while the first
    approach is a property of the flow.  The threshold is ``threshold`` if given, else
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
        ``t_min``, ``w2_min``, ``t_first_min``, ``w2_first_min`` (the first frame after the start
        lower than the next one and not higher than the previous one; the global minimum when the
        curve never rises after a fall), ``threshold``, ``t_a``, ``t_b``, ``window_length``
        (NaN when the threshold is below the minimum; ``window_length`` NaN also where W2 is below the threshold from
        the first frame, ``open_start``: no window, ``t_a`` the first frame's time), ``open_start``,
        ``open_end``, ``min_at_end`` (the curve was still falling: run longer),
        ``w2_initial``, ``w2_final``, and ``w2_final_slope``, :math:`dW_2/dt` at the end of the curve: the
        difference quotient over the last :data:`LEVEL_FRAMES` frame intervals, or the frames from the minimum on where
        fewer follow it (NaN when the minimum is at the last frame).

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
    # a dip after the start: W2 rising from t = 0 had made the start its "first local minimum"
    rises = np.flatnonzero((values[:-1] < values[1:]) & (np.r_[False, values[1:-1] <= values[:-2]]))
    first = min(int(rises[0]), i) if rises.size else i  # the global minimum is a local one: the first is never later
    out: dict[str, Any] = {
        "t_min": float(times[i]),
        "w2_min": w_min,
        "t_first_min": float(times[first]),
        "w2_first_min": float(values[first]),
        "threshold": theta,
        "w2_initial": float(values[0]),
        "w2_final": float(values[-1]),
        "min_at_end": bool(i == values.size - 1 and values.size > 1),
        "w2_final_slope": _final_slope(times, values, i),
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
    # (open at the start, the threshold above W2(0): no window, whose length the concentration CSV had given as the run's)
    out.update(t_a=t_a, t_b=t_b, window_length=math.nan if out["open_start"] else t_b - t_a)
    return out


def _final_slope(times: NDArray[np.float64], values: NDArray[np.float64], i: int) -> float:
    """``w2_final_slope`` of :func:`concentration_summary` (``i``: the minimum's frame)."""
    j = max(i, values.size - 1 - LEVEL_FRAMES)
    if j >= values.size - 1:
        return math.nan
    return float((values[-1] - values[j]) / (times[-1] - times[j]))


def open_window_note(summary: Mapping[str, Any], *, option: str = "--threshold") -> str:
    r"""What an open end of the window (W2 below the threshold at the last frame) means for a curve of
    :func:`concentration_summary`: run longer, or, where W2 has come back more than halfway from its minimum to the
    threshold and levelled off there, give a lower threshold — the late plateau of the terminal phase (near
    :math:`E_V`, about π/4 on the default head) lies below :math:`2W_{2,\min}` at small β, and such a window had been
    "extended" over the whole terminal phase, with the advice to run longer.  ``option`` names where a threshold is
    given (the CLI's ``--threshold``; the Python text names :meth:`meanfield.Run.concentration`'s argument).

    W2 counts as levelled off when, rising at its slope over the last frames (``w2_final_slope``) for as long again as
    the time since the minimum, it would cover at most :data:`LEVEL_FRACTION` (a tenth) of what it lacks to the
    threshold:

    .. math::

        \dot W_2(t_{\rm last})\,(t_{\rm last} - t_{\min}) \le 0.1\,(\theta - W_2(t_{\rm last})).

    Where W2 has come back more than halfway but is still rising faster, the run ends before the window closes (a run
    truncated in the climb had been told its window never closes at this threshold), and a later ``solver.t_final``
    shows where it closes.

    A window open at its start too (the threshold above :math:`W_2` at the first frame, :math:`W_2(0)` but for a
    continued run) is none: a longer run cannot give it a start; a lower threshold can, unless the run starts at its
    minimum (a run continued from the frame of its minimum), where no window can open."""
    w_min, theta, final = summary["w2_min"], summary["threshold"], summary["w2_final"]
    if summary["open_start"]:  # (it had read "[≤0, 6≥]", "run longer")
        where = "above" if theta > summary["w2_initial"] else "at"
        origin = " (2·W2_min)" if theta == 2.0 * w_min else ""  # the default: the user gave none
        t_first = summary.get("t_a", 0.0)  # open at the start: the first frame's time (not 0 for a continued run)
        start = "W2(0)" if t_first == 0 else f"W2(t = {t_first:.4g})"
        if summary["w2_initial"] <= w_min:  # (it had advised a threshold below W2_min, which gives no window at all)
            advice = "the run starts at its minimum: no window can open in it"
        else:
            advice = f"a threshold below {summary['w2_initial']:.4g} ({option}) gives one a start"
        return (f"threshold {theta:.4g}{origin} {where} {start} = {summary['w2_initial']:.4g}: no window (W2 is below the threshold "
                f"from the first frame; {advice})")
    if not summary["min_at_end"] and final - w_min > 0.5 * (theta - w_min):
        slope = summary.get("w2_final_slope", math.nan)
        elapsed = summary["t_b"] - summary["t_min"]  # open at the end: t_b is the last frame's time
        if slope * elapsed <= LEVEL_FRACTION * (theta - final):  # (NaN, where no slope was measured: still rising)
            return (f"W2 has come back from W2_min = {w_min:.4g} to {final:.4g} at the last frame, still below the threshold "
                    f"{theta:.4g}: where it levels off there (the terminal phase, near E_V) the window never closes at this "
                    f"threshold; a threshold below {final:.4g} ({option}) ends it")
        # (a run cut off in the climb had been told that the window never closes at this threshold)
        return (f"W2 has come back from W2_min = {w_min:.4g} to {final:.4g} at the last frame, still below the threshold "
                f"{theta:.4g} and rising ({slope:.3g} per unit of time over the last frames): the run ends before the window "
                f"closes (or W2 levels off); a later solver.t_final shows where it closes")
    return "W2 is still below the threshold at the last frame: the window may extend further (run longer)"


def linear_fit(x: ArrayLike, y: ArrayLike) -> dict[str, float]:
    r"""Least-squares line :math:`y \approx a x + b` with :math:`R^2 = 1 - \mathrm{SS}_{res}/\mathrm{SS}_{tot}`
    (NaN when every y is the same, :math:`\mathrm{SS}_{tot} = 0`, as in a sweep whose runs do not depend on β, and for
    two points, which any line through both fits)."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.size < 2:
        return {"slope": math.nan, "intercept": math.nan, "r2": math.nan}
    slope, intercept = np.polyfit(xa, ya, 1)
    residual = ya - (slope * xa + intercept)
    total = float(np.sum((ya - ya.mean()) ** 2))
    # constant y: nothing for a line to explain; two points: a line through both, whatever they are (R² = 1 said nothing)
    r2 = 1.0 - float(np.sum(residual**2)) / total if total > 0 and xa.size > 2 else math.nan
    return {"slope": float(slope), "intercept": float(intercept), "r2": r2}


def r_squared_label(fit: Mapping[str, float], *, digits: int = 4, undefined: str = "") -> str:
    """``"  (R² = …)"`` of a :func:`linear_fit`; ``undefined`` where it has none (two points, which any line fits, or
    the same value at every point), as legends and tables had read "R² = nan"."""
    r2 = fit.get("r2", math.nan)
    return f"  (R² = {r2:.{digits}f})" if np.isfinite(r2) else undefined


def resolution_size(cfg: dict[str, Any]) -> int:
    """The number of degrees of freedom that must resolve the kernel: particles, or grid cells."""
    return int(cfg["grid"]["cells"] if cfg["solver"]["kind"] == "grid" else cfg["init"]["n"])


@dataclass(frozen=True)
class RunSource:
    r"""What the concentration analysis of a run reads besides its frames: its one head and how it was solved.

    From the resolved config of a run of :func:`meanfield.simulate` (or of a stored run), or from the
    :class:`meanfield.Model` and the solver's record of a run of :func:`meanfield.solve`, which has no config
    (:func:`run_source`).

    Attributes
    ----------
    Q, K, V : arrays
        The head (``Q = I`` and ``K = B`` for a model's :class:`~meanfield.heads.HeadStack`: only
        :math:`B = Q^\top K` enters).
    beta : float
    d : int
    solver : str
        ``particle``, ``grid``, ``jko`` or ``zero-temperature``.
    size : int
        Particles or cells (:func:`resolution_size`).
    assumptions : str
        The policy for Assumption 1 (``model.assumptions``; ``"check"`` for a model).
    w2_method : str
        The W2 estimator (``track.w2_method``; ``"exact"`` for a model).
    reconstructs : bool
        Whether the cell masses carry a linear reconstruction (second-order grid).
    norm : str
        The normalisation scheme (``post``, ``pre``, ``peri``, ``ngpt``).
    schedule : str
        ``constant``, or the name of the time-dependent heads' schedule.
    init : mapping or None
        The config's ``[init]`` (``None`` for a run of :func:`meanfield.solve`).
    attention, mask : str
        ``model.attention`` and ``model.mask`` (Theorem 1 is for unmasked softmax attention).
    """

    Q: NDArray[np.float64]
    K: NDArray[np.float64]
    V: NDArray[np.float64]
    beta: float
    d: int
    solver: str
    size: int
    assumptions: str
    w2_method: str
    reconstructs: bool
    norm: str
    schedule: str
    init: Mapping[str, Any] | None
    attention: str = "softmax"
    mask: str = "none"


def run_source(run: Any) -> RunSource:
    """The :class:`RunSource` of a :class:`meanfield.Run`: from its config, or from its model for a run of :func:`meanfield.solve`.

    Raises
    ------
    ConfigError
        (key ``model.heads``) more than one head.
    """
    from meanfield.geometry.grid_config import reconstructs_density

    cfg = run.config
    if cfg is not None:
        m, head = cfg["model"], single_head(cfg)
        return RunSource(Q=head.Q, K=head.K, V=head.V, beta=float(m["beta"]), d=int(m["d"]), solver=cfg["solver"]["kind"],
                         size=resolution_size(cfg), assumptions=m.get("assumptions", "check"),
                         w2_method=cfg["track"]["w2_method"], reconstructs=reconstructs_density(cfg), norm=m.get("norm", "post"),
                         schedule=(cfg.get("weights") or {}).get("schedule", "constant"), init=cfg["init"],
                         attention=m["attention"], mask=m.get("mask", "none"))
    from meanfield.model import ConstantHeads

    if run.config is None and run._model is None:  # noqa: SLF001 - a solve() run carries its model
        raise ConfigError("run", "this run has neither a config nor a model to analyse (a run of mf.solve read back by "
                                 "Run.from_xarray keeps neither: analyse it before to_xarray, or run it with mf.simulate)")
    model, info = run.model, run.info
    check_ascent(model.direction)
    stack = model.heads.at(float(run.t[0]) if run.frames else 0.0)
    if stack.H != 1:
        raise ConfigError("model.heads", f"W2 to Π♯ρ₀ (Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931) needs a single head, got {stack.H}")
    solver = str(info.get("solver", run.kind))
    size = len(run.points) if run.kind == "grid" else (int(np.shape(run.frame(0))[0]) if run.frames else 0)
    schedule = "constant" if isinstance(model.heads, ConstantHeads) else type(model.heads).__name__
    return RunSource(Q=np.eye(model.d), K=np.array(stack.B[0]), V=np.array(stack.V[0]), beta=float(model.beta), d=int(model.d),
                     solver=solver, size=size, assumptions="check", w2_method="exact",
                     reconstructs=solver == "grid" and int(info.get("order", 1)) == 2, norm=str(info.get("norm", "post")),
                     schedule=schedule, init=None, attention=model.attention, mask=model.mask)


#: the curves of :func:`concentration_curves` besides ``t``: the diagnostics of :class:`ConcentrationTracker`
CURVE_KEYS = ("w2_target", "v_eigenspace_distance", "e_eigenspace_distance")


def tracked_curves(run: Any) -> bool:
    """Whether ``run`` recorded the curves of :class:`ConcentrationTracker` at every frame (then they are read, not
    recomputed, unless an ``origin`` is given)."""
    return all(k in run.diagnostics and np.all(np.isfinite(run.diagnostics[k])) for k in CURVE_KEYS)


def concentration_curves(
    run: Any, *, policy: str | None = None, source: RunSource | None = None, origin: Any = None
) -> dict[str, NDArray[np.float64]]:
    """``t``, ``w2_target``, ``v_eigenspace_distance``, ``e_eigenspace_distance`` of a :class:`meanfield.Run`.

    Uses the tracked diagnostics when the run recorded them and recomputes
    them from the saved frames otherwise (Π♯ρ₀ from the first frame, or, for a run started from a
    stored frame, ``init.kind = "run"``, from the first frame of the first run of the chain: :func:`origin_target`).
    With ``origin`` (the initial measure ρ₀: a :class:`meanfield.Run`, an ``(n, d)`` token array or a
    ``(tokens, masses)`` pair, :func:`origin_measure`) the curves are always recomputed, against Π♯ of ``origin``.
    Assumption 1 is checked with ``policy`` (default: the run's ``model.assumptions``; ``"check"`` for a run of
    :func:`meanfield.solve`, whose head comes from its model: :func:`run_source`; ``source``: that, when it is at hand).
    """
    source = run_source(run) if source is None else source
    enforce_assumptions(check_assumptions(source.Q, source.K, source.V), source.assumptions if policy is None else policy)
    keys = CURVE_KEYS
    t = np.asarray(run.t, dtype=float)
    if run.frames == 0:
        raise ConfigError("OUT.h5", "the run holds no frame yet")
    given = None if origin is None else origin_measure(origin, d=source.d)
    if given is None and tracked_curves(run):  # (with origin: the tracker's target was the run's own, recomputed)
        return {"t": t, **{k: np.asarray(run.diagnostics[k], dtype=float) for k in keys}}
    points = run.points if run.kind == "grid" else None
    weights = run.token_masses if run.kind == "particle" else None  # token masses (a continued grid run, mf.solve's)
    mesh = run.mesh() if run.kind == "grid" and source.reconstructs else None  # as the tracker (the JKO grid: atoms)
    tracker = tracker_from_head(source.Q, source.K, source.V, run.frame(0), weights=weights, points=points, mesh=mesh,
                                method=source.w2_method, policy="skip")
    if given is not None:  # ρ₀ given: Π♯ρ₀ is its pushforward (a continued run's first frame is not ρ₀)
        tracker = replace(tracker, target=given.target(source.Q, source.K, source.V))
    elif continues_stored_run(source):  # the first frame is the source's: Π♯ρ₀ is that of the chain's first run
        from meanfield.io.source_frame import SOURCE_DIGEST, check_source_unchanged

        digest = run.static.get(SOURCE_DIGEST)  # the source still holds the frame this run took (each link of the chain too)
        check_source_unchanged(run.path or "this run", source.init, None if digest is None else np.asarray(digest, dtype=np.uint8))
        tracker = replace(tracker, target=origin_target(source.init["path"], source.Q, source.K, source.V, init=source.init))
    rows = []
    for k in range(run.frames):
        try:
            rows.append(tracker(float(t[k]), run.frame(k)))
        except ValueError as exc:  # a frame off the sphere or not finite: a run never commits one (it had been a traceback)
            key, what = run.error_names
            raise ConfigError(key, f"frame {k} (t = {t[k]:.6g}) is not a measure W2 can read ({exc}): the {what} was "
                                   "altered or damaged") from None
    return {"t": t, **{k: np.array([row[k] for row in rows]) for k in keys}}


def origin_target(path: Any, Q: ArrayLike, K: ArrayLike, V: ArrayLike, *, init: Mapping[str, Any] | None = None) -> Pushforward:
    r"""The :math:`\Pi_\sharp\rho_0` of the head ``(Q, K, V)`` for the first run of the chain that ``path`` continues.

    :math:`\rho_0` is that run's first frame: its tokens (with their masses), or its cell masses, with the
    exact split of the cells the separating plane cuts on the second-order grid, as its own tracker has it.
    Where the continuing run (``init``) or a run of the chain took its frame with ``init.symmetry = "antipodal"``,
    the measure it continues is the symmetrisation :math:`\tfrac12(\rho + (-\mathrm{id})_\sharp\rho)` of the
    chain's, and its target is that of :math:`\tfrac12(\rho_0 + (-\mathrm{id})_\sharp\rho_0)`, the atoms and
    their images with half the weights (:math:`\Pi(-x)=-\Pi(x)`): the unsymmetrised target had put a floor
    under W2 (1.04 where the run came within 0.57 of its own, from a source with p = 0.33).  Tokens left out by
    ``init.min_mass`` are not: they carry at most 1e-3 of the mass.

    Parameters
    ----------
    path : path
        A run started with ``init.kind = "run"`` (its ``init.path``), or the first run itself.
    Q, K, V : arrays
        The head.
    init : mapping, optional
        The ``[init]`` of the run that continues ``path`` (its ``symmetry``).

    Returns
    -------
    Pushforward
        The target of :func:`tracker_from_head` for that first frame.
    """
    from meanfield.geometry.grid_config import reconstructs_density, stored_mesh
    from meanfield.io.runfile import RunReader  # local: h5py
    from meanfield.io.source_frame import chain_symmetrised, origin_run

    origin, config = origin_run(path)
    reader = RunReader(origin, key="init.path")
    first, static = reader.states(0), reader.static()
    if reader.state_name == "x":
        target = tracker_from_head(Q, K, V, first, weights=stored_token_masses(static), policy="skip").target
    else:
        mesh = stored_mesh(config.get("grid", {}), static["points"]) if reconstructs_density(config) else None
        target = tracker_from_head(Q, K, V, first, points=static["points"], mesh=mesh, policy="skip").target
    if not chain_symmetrised(path, init):
        return target
    return replace(target, atoms=np.concatenate([target.atoms, -target.atoms]),
                   weights=np.concatenate([target.weights, target.weights]) / 2.0)


def continues_stored_run(source: RunSource) -> bool:
    r"""Whether the run of ``source`` started from a stored frame (``init.kind = "run"``): its config names the chain
    whose first run holds :math:`\rho_0` (:func:`origin_target`)."""
    return source.init is not None and source.init.get("kind") == "run"


@dataclass(frozen=True)
class OriginMeasure:
    r"""The initial measure :math:`\rho_0` given as ``origin`` to :func:`run_concentration` (:func:`origin_measure`).

    Attributes
    ----------
    state : (n, d) array or (N,) array
        Tokens on :math:`S^{d-1}`, or the cell masses of a grid run's first frame.
    weights : (n,) array or None
        Token masses summing to 1 (``None``: ``1/n`` each; always ``None`` for cell masses).
    points : (N, 3) array or None
        The grid run's cell points (``None`` for tokens).
    mesh : SphericalMesh or None
        The grid run's mesh where its masses carry the linear reconstruction (second-order grid), as its own
        tracker has it.
    description : str
        What the measure is, for the analysis' note ("the 128 tokens given", "the first frame (t = 0) of the run
        given").
    """

    state: NDArray[np.float64]
    weights: NDArray[np.float64] | None
    points: NDArray[np.float64] | None
    mesh: Any
    description: str

    def target(self, Q: ArrayLike, K: ArrayLike, V: ArrayLike) -> Pushforward:
        r""":math:`\Pi_\sharp\rho_0` for the head ``(Q, K, V)``: the target of :func:`tracker_from_head` for this measure."""
        return tracker_from_head(Q, K, V, self.state, weights=self.weights, points=self.points, mesh=self.mesh,
                                 policy="skip").target


def origin_measure(origin: Any, *, d: int) -> OriginMeasure:
    r"""The initial measure :math:`\rho_0` named by ``origin``, checked (the ``origin`` of :func:`run_concentration`).

    Parameters
    ----------
    origin : Run, (n, d) array-like, or (tokens, masses) tuple
        A :class:`meanfield.Run`: its first frame, with its token masses (a grid run: its cell masses, on its mesh);
        an ``(n, d)`` array of tokens on :math:`S^{d-1}`, each of mass ``1/n``; or a tuple ``(tokens, masses)`` of
        such an array and its ``(n,)`` non-negative masses (normalised here).  A tuple of two items whose first is
        2-D is read as ``(tokens, masses)``; anything else as an array of tokens.  An :class:`OriginMeasure` is
        returned as it is.
    d : int
        The dimension of the analysed run.

    Raises
    ------
    TypeError
        ``origin`` holds complex numbers.
    ValueError
        Naming ``origin``: a run without frames, or not of dimension ``d``; tokens that are not numbers, not of
        shape ``(n, d)``, not finite or off the unit sphere (by more than
        :data:`meanfield.analysis.transport.SPHERE_TOL`); masses not of shape ``(n,)``, not finite, negative or
        all zero.
    """
    from meanfield.analysis.transport import SPHERE_TOL
    from meanfield.checks import real_array

    if isinstance(origin, OriginMeasure):
        dim = (origin.points if origin.points is not None else origin.state).shape[1]
        if dim != d:
            raise ValueError(f"origin is a measure on S^{dim - 1} (d = {dim}), but the analysed run has d = {d}")
        return origin
    if is_run(origin):
        return run_origin_measure(origin, d=d)
    masses: Any = None
    if isinstance(origin, tuple) and len(origin) == 2:
        try:
            pair = np.ndim(origin[0]) == 2
        except (TypeError, ValueError):  # ragged: refused below as an array
            pair = False
        if pair:
            origin, masses = origin
    tokens = real_array("origin", origin)
    if tokens.ndim != 2 or tokens.shape[0] < 1 or tokens.shape[1] != d:
        raise ValueError(f"origin must be tokens of shape (n, {d}) (the run's d = {d}), a (tokens, masses) pair or a Run; "
                         f"got an array of shape {tokens.shape}")
    if not np.all(np.isfinite(tokens)):
        raise ValueError(f"origin has non-finite coordinates (first at row {int(np.argwhere(~np.isfinite(tokens))[0, 0])})")
    with np.errstate(over="ignore"):
        off = np.abs(np.linalg.norm(tokens, axis=1) - 1.0)
    if not float(np.max(off)) <= SPHERE_TOL:
        worst = int(np.argmax(off))
        raise ValueError(f"origin must be tokens on the unit sphere: row {worst} has | ||x|| - 1 | = {off[worst]:.3g} > "
                         f"{SPHERE_TOL:g} ({int(np.count_nonzero(off > SPHERE_TOL))} of {tokens.shape[0]} rows are off)")
    weights = None
    if masses is not None:
        weights = real_array("origin masses", masses)
        n = tokens.shape[0]
        if weights.shape != (n,):
            raise ValueError(f"origin masses must have shape ({n},) to match its {n} tokens, got {weights.shape}")
        with np.errstate(over="ignore"):
            total = float(np.sum(weights))
        if not (np.all(np.isfinite(weights)) and np.all(weights >= 0) and total > 0 and math.isfinite(total)):
            raise ValueError("origin masses must be finite and non-negative, not all zero, with a finite total")
        weights = weights / total
    what = f"the {tokens.shape[0]} tokens given" + (" with their masses" if weights is not None else "")
    return OriginMeasure(state=tokens.copy(), weights=weights, points=None, mesh=None, description=what)


def is_run(value: Any) -> bool:
    """Whether ``value`` is a :class:`meanfield.Run` (by what it has: this module is imported by ``meanfield.run``)."""
    return all(hasattr(value, name) for name in ("t", "kind", "frames", "frame", "static", "info", "config"))


def run_origin_measure(origin: Any, *, d: int) -> OriginMeasure:
    r"""The first frame of the :class:`meanfield.Run` ``origin`` as :math:`\rho_0` (:func:`origin_measure`)."""
    from meanfield.geometry.grid_config import reconstructs_density

    if origin.frames == 0:
        raise ValueError("origin is a run without frames: ρ₀ is its first frame")
    first = np.asarray(origin.frame(0), dtype=float)
    when = f"the first frame (t = {float(origin.t[0]):.6g}) of the {origin.kind} run given"
    if origin.kind == "particle":
        measure = origin_measure((first, origin.token_masses) if origin.token_masses is not None else first, d=d)
        return replace(measure, description=f"{when} ({first.shape[0]} tokens)")
    if d != 3:
        raise ValueError(f"origin is a grid run, on S² (d = 3), but the analysed run has d = {d}")
    if not (np.all(np.isfinite(first)) and np.all(first >= 0) and first.sum() > 0):
        raise ValueError("origin is a grid run whose first frame is no measure (cell masses not finite, negative or all zero)")
    if origin.config is not None:
        second_order = reconstructs_density(origin.config)
    else:  # a run of mf.solve: its solver's record
        second_order = str(origin.info.get("solver", "grid")) == "grid" and int(origin.info.get("order", 1)) == 2
    mesh = origin.mesh() if second_order else None  # as the tracker of that run (the JKO grid: atoms)
    return OriginMeasure(state=first, weights=None, points=np.asarray(origin.points, dtype=float), mesh=mesh,
                         description=f"{when} ({first.shape[0]} cells)")


#: at most this many rows of the W2 table are printed (the CSV has every frame)
PRINT_ROWS = 41


@dataclass(frozen=True)
class Concentration:
    r"""The concentration analysis of one run (what ``meanfield concentration OUT.h5`` prints).

    Attributes
    ----------
    curves : dict of (T,) arrays
        ``t``, ``w2_target`` (:math:`W_2(\rho_t,\Pi_\sharp\rho_0)`), ``v_eigenspace_distance``
        (to :math:`E_V`, the terminal phase of Conjecture 1) and ``e_eigenspace_distance`` (to :math:`E`).
    summary : dict
        :func:`concentration_summary` of the W2 curve: ``t_min``, ``w2_min``, the window ``t_a``, ``t_b`` …
    report : AssumptionReport
        Assumption 1 for the run's head, with ``dim_E``.
    heading : str
        What the run is (solver, β, d).
    notes : list of str
        What a reader must know to read the numbers (a trivial target); part of :meth:`text`.
    warnings : list of str
        Doubts about the run itself (too few particles for this β, cluster cores below the grid's
        cells): ``warning:`` lines of :meth:`text`, and a :class:`~meanfield.errors.MeanfieldWarning` each when
        :func:`run_concentration` builds the analysis; the CLI prints them on stderr.
    cores : CoreResolution or None
        For grid runs with ``dim E = 1``: the clusters' r.m.s. radii against the spacing of the cells
        at their centres (:mod:`meanfield.analysis.core_resolution`).
    target : str
        The target's name in the head of :meth:`table`: ``"Π♯ρ0"``, or ``"Π♯ρ_2"`` where W2 is measured against
        the pushforward of the run's first frame at t = 2, not of the flow's ρ₀ (a run of
        :func:`meanfield.solve` continued with ``t_start = 2`` and analysed without ``origin``).
    """

    curves: dict[str, NDArray[np.float64]]
    summary: dict[str, Any]
    report: AssumptionReport
    heading: str
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cores: Any = None
    target: str = "Π♯ρ0"

    @property
    def trivial(self) -> bool:
        r"""Whether :math:`E=\mathbb R^d`: then :math:`\Pi` is the identity and :math:`\Pi_\sharp\rho_0=\rho_0`."""
        return self.report.dim_E == len(self.report.eigenvalues)

    @property
    def t_min(self) -> float:
        return float(self.summary["t_min"])

    @property
    def w2_min(self) -> float:
        return float(self.summary["w2_min"])

    def table(self, *, rows: int = PRINT_ROWS) -> str:
        """The curve at about ``rows`` frames (always the minimum and the last frame)."""
        t, w, v = self.curves["t"], self.curves["w2_target"], self.curves["v_eigenspace_distance"]
        step = max(1, int(np.ceil(len(t) / rows)))
        picks = sorted(set(range(0, len(t), step)) | {len(t) - 1, int(np.nanargmin(w))})
        lines = [f"{'t':>10} {f'W2(ρ_t,{self.target})':>14} {'dist(E_V)':>10}"]
        lines += [f"{t[i]:10.4g} {w[i]:14.6g} {v[i]:10.4g}" for i in picks]
        return "\n".join(lines)

    def window_text(self, *, cli: bool = False) -> str:
        """``t_min``, ``W2_min`` and the metastable window, in words (``cli``: naming the command's ``--threshold``)."""
        s = self.summary
        lines = [f"t_min  = {s['t_min']:.6g}", f"W2_min = {s['w2_min']:.6g}"]
        if s["t_first_min"] < s["t_min"]:  # an earlier dip (a flat bottom tied with the minimum is the minimum)
            lines.append(f"first local minimum: W2 = {s['w2_first_min']:.6g} at t = {s['t_first_min']:.6g}")
        option = "--threshold" if cli else "run.concentration(threshold=…)"
        if np.isnan(s["t_a"]):
            lines.append(f"window: none (threshold {s['threshold']:.4g} < W2_min)")
        elif s["open_start"]:  # below the threshold from t = 0: no window (it had read "[≤0, 6≥]" and "run longer")
            lines.append(f"metastable window: none ({open_window_note(s, option=option)})")
        else:
            end = "≥" if s["open_end"] else ""  # (it had read "6≥]"; the sweep's table writes "≥6]")
            lines.append(f"metastable window (W2 ≤ {s['threshold']:.4g}): [{s['t_a']:.4g}, {end}{s['t_b']:.4g}]  (length {s['window_length']:.4g})")
            if s["open_end"]:
                lines.append(f"note: {open_window_note(s, option=option)}")
        if s["min_at_end"]:
            lines.append("note: the minimum is at the last frame (W2 still falling): run longer to see t_min")
        elif len(self.curves.get("t", ())) == 1:  # (one frame had read t_min = 0 without a word)
            lines.append("note: the run holds one frame (t = 0 only): t_min and W2_min are that frame's; run longer to see them")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # noqa: ARG002 - IPython's hook: a notebook cell shows the text
        printer.text(self.text())

    def text(self, *, cli: bool = False) -> str:
        """The heading, the notes, the warnings, the table and the window: what ``meanfield concentration`` prints.

        Parameters
        ----------
        cli : bool
            The command's standard output: without the ``warning:`` lines (it prints them on stderr), and naming its
            options (``--threshold``) where the text otherwise names :meth:`meanfield.Run.concentration`'s arguments.
        """
        doubts = [] if cli else [f"warning: {doubt}" for doubt in self.warnings]
        return "\n".join([self.heading, *(f"note: {note}" for note in self.notes), *doubts, self.table(),
                          self.window_text(cli=cli)])

    def rows(self) -> list[list[float]]:
        """One row per frame: ``t, w2_target, v_eigenspace_distance, e_eigenspace_distance``."""
        c = self.curves
        return [list(r) for r in zip(c["t"], c["w2_target"], c["v_eigenspace_distance"], c["e_eigenspace_distance"])]

    def plot(self, path: Any = None, *, ax: Any = None) -> Any:
        """W2 to Π♯ρ₀ and the distance to E_V against t, window shaded, t_min marked; saved when ``path`` is given;
        ``ax``: a matplotlib Axes of your own figure to draw into (the figure that holds it is returned)."""
        from meanfield.plotting.curves import plot_concentration

        return plot_concentration(self.curves, self.summary, path, title=self.heading, ax=ax)


def run_concentration(
    run: Any, *, threshold: float | None = None, policy: str | None = None, origin: Any = None
) -> Concentration:
    r"""Concentration analysis of a :class:`meanfield.Run` (Theorem 1 of arXiv 2605.10931).

    Parameters
    ----------
    run : Run
        A run of :func:`meanfield.simulate` or a stored one (the head from its config), or a run of
        :func:`meanfield.solve` (the head from its model: :func:`run_source`).
    threshold : float, optional
        Metastability threshold on W2 (default twice ``W2_min``).
    policy : {"check", "warn", "skip"}, optional
        What to do when Assumption 1 fails (default: the run's ``model.assumptions``; ``"check"`` for a run
        of :func:`meanfield.solve`).
    origin : Run, (n, d) array-like or (tokens, masses) tuple, optional
        The initial measure :math:`\rho_0` of the flow, whose :math:`\Pi_\sharp\rho_0` is the target: a run (its
        first frame, with its token masses; a grid run's cell masses on its mesh), tokens on the sphere (mass
        ``1/n`` each) or tokens with their masses (:func:`origin_measure`).  W2 is then recomputed from the frames
        against it (a tracked ``w2_target`` is not used).  For a run continued with
        ``mf.solve(..., t_start=…)``: without ``origin`` its first frame stands for :math:`\rho_0`, with a
        :class:`~meanfield.errors.MeanfieldWarning`.  Default: the run's first frame, or, for a run started from a
        stored frame (``init.kind = "run"``), the first frame of the first run of its chain.

    Raises
    ------
    ConfigError
        More than one head; Assumption 1 fails under ``policy = "check"``; no frame.
    ValueError, TypeError
        ``origin`` is not a measure of the run's dimension on the sphere (the message names ``origin``).

    Examples
    --------
    >>> import numpy as np, meanfield as mf
    >>> B = np.diag([2.0, 1.0, 0.5])
    >>> model = mf.Model(d=3, beta=8.0, heads=mf.heads.HeadStack(B=B[None], V=B[None]))
    >>> x0 = mf.sample_uniform(128, 3, seed=0)
    >>> half = mf.solve(mf.Problem(model, x0), mf.ParticleSolver(dt=0.05), t_final=1.0)
    >>> rest = mf.solve(mf.Problem(model, half.final), mf.ParticleSolver(dt=0.05), t_start=1.0, t_final=2.0)
    >>> rest.concentration(origin=x0).curves["w2_target"].shape  # W2 to Π♯ρ₀ of the flow from x0
    (2,)
    """
    from meanfield.analysis.projection import ASSUMPTION_POLICIES, run_resolution_warning

    if policy is not None and policy not in ASSUMPTION_POLICIES:
        raise ConfigError("policy", f"expected one of {ASSUMPTION_POLICIES} (or None: the run's model.assumptions), got {policy!r}")
    if threshold is not None:
        if isinstance(threshold, (bool, str, bytes)) or not isinstance(threshold, (int, float, np.integer, np.floating)) \
                or not (math.isfinite(threshold) and threshold > 0):
            raise ConfigError("threshold", f"expected a finite W2 > 0 (or None: twice W2_min), got {threshold!r}")
    source = run_source(run)
    given = None if origin is None else origin_measure(origin, d=source.d)  # refused before any W2 is computed
    if source.norm in ("pre", "peri"):  # as the config refuses track.concentration for these (it had been a traceback)
        raise ConfigError("model.norm", f"W2 to Π♯ρ₀ is measured on the sphere; the tokens of norm = {source.norm!r} have radii "
                                        "(the analysis takes norm = 'post' or 'ngpt')")
    policy = source.assumptions if policy is None else policy
    report = enforce_assumptions(check_assumptions(source.Q, source.K, source.V), policy)
    curves = concentration_curves(run, policy="skip", source=source, origin=given)  # the heads built once (a checkpoint's read once)
    summary = concentration_summary(curves["t"], curves["w2_target"], threshold=threshold)
    zero = source.solver == "zero-temperature"
    beta = "β = ∞ (zero temperature)" if zero else f"β = {source.beta:g}"
    where = f"{run.path}" if run.path is not None else "run"
    heading = f"run: {where}  ({source.solver} solver, {beta}, d = {source.d})"
    notes, doubts = [], []
    target = "Π♯ρ0"
    t_first = float(curves["t"][0])
    if given is not None:
        notes.append(f"Π♯ρ₀ is that of origin=: {given.description}")
    elif t_first != 0.0 and not continues_stored_run(source) and not tracked_curves(run):
        # a run of mf.solve continued with t_start: its first frame is not the flow's ρ₀ (W2 had read 0.05 where it was 0.27)
        target = f"Π♯ρ_{t_first:.4g}"
        doubts.append(f"this run starts at t = {t_first:.6g}, not 0 (mf.solve(..., t_start={t_first:.6g})?): W2 is measured "
                      f"against Π♯ of its first frame, ρ at t = {t_first:.6g}, not of the flow's ρ₀ at t = 0; pass the "
                      "measure the flow started from as run.concentration(origin=…): the run that began at t = 0, or "
                      "its tokens (n, d), or (tokens, masses)")
    if source.w2_method != "exact":  # (sliced had printed 0.398 as W2_min where the exact value is 0.347)
        estimate = {"sliced": "the sliced distance (on data/concentration.toml 15 % below W2 at t = 0, 17 % above it at the "
                              "minimum)",
                    "sinkhorn": "the entropic (Sinkhorn) estimate, biased by its regularisation (up to 5 % on "
                                "data/concentration.toml)"}
        doubts.append(f"W2 here is the run's track.w2_method = {source.w2_method!r}: {estimate.get(source.w2_method, 'an estimate')}, "
                      "not the exact distance; t_min and W2_min are that estimate's (track.w2_method = 'exact' for W2)")
    if report.dim_E == len(report.eigenvalues):
        notes.append(
            "the analysis is trivial for this head: S = V Bᵀ has a single eigenvalue, so E is the whole space, "
            "Π is the identity and Π♯ρ₀ = ρ₀; W2 only measures how far the tokens moved"
        )
    if source.schedule != "constant":  # the theorem is for one constant head
        notes.append(
            f"the heads change in time (schedule {source.schedule!r}): Π♯ρ₀, E and E_V are those of the head at the first "
            "frame; Theorem 1 of arXiv 2605.10931 is for a constant head"
        )
    if source.solver != "zero-temperature" and (source.attention != "softmax" or source.mask != "none"):
        law = f"model.attention = {source.attention!r}" + (f" with model.mask = {source.mask!r}" if source.mask != "none" else "")
        notes.append(f"Theorem 1 of arXiv 2605.10931 and its rate √(log(β+1)/β) are for unmasked softmax attention; this "
                     f"run has {law}: t_min and W2_min are measured, not the theorem's")
    incomplete = incomplete_run_note(run)
    if incomplete:  # (an interrupted sweep run had read as a whole curve: a minimum or window past its end cut off unsaid)
        notes.append(incomplete)
    on_grid = run.kind == "grid" and source.d == 3  # cells: the mesh's criterion (the particles' had been applied to them)
    resolution = run_resolution_warning(source.size, source.beta, source.d, cells=on_grid)
    if resolution and not zero:
        doubts.append(resolution)
    cores = grid_core_resolution(run, source=source) if on_grid and report.dim_E == 1 else None
    core_doubt = cores.describe(summary["t_min"]) if cores is not None else ""
    if core_doubt:
        doubts.append(core_doubt)
        check = core_check(run, summary, cores=cores, w2=curves["w2_target"])
        if check["cores"]:  # below the cells before t_min: what W2 says while they were resolved
            notes.append(resolved_range_text({**summary, **check}))
    for doubt in doubts:  # (they had been left to the CLI: a notebook's under-resolved W2_min had read as a fine one)
        warnings.warn(doubt, MeanfieldWarning, stacklevel=3)
    return Concentration(curves, summary, report, heading, notes, doubts, cores, target)


def incomplete_run_note(run: Any) -> str:
    """A sentence for a run that ends before its ``t_final`` (status interrupted, failed, stopped or running), naming
    its status and the time range it has no frame for; ``""`` for a completed run or one whose ``t_final`` is unknown."""
    status = str(getattr(run, "status", "completed") or "completed")
    from meanfield.io.runfile import solver_settings  # local: h5py

    solver = solver_settings(run.config, run.info)
    t_final = solver.get("t_final")
    if status == "completed" or run.frames == 0 or not isinstance(t_final, (int, float)):
        return ""
    t_last = float(run.t[-1])
    if not t_last < float(t_final):
        return ""
    reason = run.stop_reason if run.stop_reason and run.stop_reason != status else ""
    return (f"the run is {status}{f' ({reason})' if reason else ''}: its last frame is at t = {t_last:.6g} of "
            f"t_final = {float(t_final):.6g}, so t in ({t_last:.6g}, {float(t_final):.6g}] is missing and t_min, W2_min "
            f"and the window are those of t ≤ {t_last:.6g}")


def grid_core_resolution(run: Any, *, source: RunSource | None = None) -> CoreResolution:
    """:func:`meanfield.analysis.core_resolution.core_resolution` of a grid run whose ``dim E = 1`` (``source``: its
    :func:`run_source`, when it is at hand)."""
    source = run_source(run) if source is None else source
    _, S = score_and_value(source.Q, source.K, source.V)
    basis, _ = dominant_eigenspace(S)
    areas = run.static["areas"] if "areas" in run.static else run.mesh().areas  # stored with every grid run
    return core_resolution(run.points, areas, (run.frame(k) for k in range(run.frames)), run.t, basis[:, 0])


def core_check(
    run: Any, summary: Mapping[str, Any], *, cores: CoreResolution | None = None, w2: ArrayLike | None = None
) -> dict[str, Any]:
    r"""Whether a grid run resolved the cores of its two clusters up to its ``t_min``.

    The r.m.s. radius :math:`r_\pm` of each cluster against the spacing :math:`\sqrt{|\Omega_c|}` of the
    cell at its centre (:mod:`meanfield.analysis.core_resolution`): from the first frame where a radius
    is below it, the grid's :math:`W_2(\rho_t,\Pi_\sharp\rho_0)` is the mesh's, not the flow's.

    Parameters
    ----------
    run : Run
        A grid run on S² whose head has ``dim E = 1``, with its frames (in memory or on disk).
    summary : mapping
        Its :func:`concentration_summary` (``t_min``).
    cores : CoreResolution, optional
        :func:`grid_core_resolution` of the run, when it is at hand.
    w2 : (T,) array, optional
        :math:`W_2(\rho_t,\Pi_\sharp\rho_0)` per frame (default: the run's tracked ``w2_target``;
        :func:`concentration_curves` for a run that did not track it).

    Returns
    -------
    dict
        ``t_cores_unresolved`` (NaN while the cores stay resolved) and ``cores``, the warning of
        :meth:`~meanfield.analysis.core_resolution.CoreResolution.describe` when that time comes at or
        before ``t_min`` (else ``""``).  Then also ``w2_min_resolved`` and ``t_min_resolved``, the least W2
        over the frames before it (NaN when there are none), and ``resolved_min_at_end``, whether that
        least value is the last of those frames (no minimum while the cores are resolved).
    """
    cores = grid_core_resolution(run) if cores is None else cores
    t_off = cores.t_unresolved
    result: dict[str, Any] = {"t_cores_unresolved": t_off, "cores": ""}
    if math.isnan(t_off) or t_off > summary["t_min"]:
        return result
    t = np.asarray(run.t, dtype=float)
    w = np.asarray(run.diagnostics["w2_target"] if w2 is None else w2, dtype=float)
    before = np.flatnonzero(t < t_off)
    result["cores"] = cores.describe(summary["t_min"])
    if before.size == 0:
        result.update(w2_min_resolved=math.nan, t_min_resolved=math.nan, resolved_min_at_end=False)
        return result
    k = int(before[np.nanargmin(w[before])])
    result.update(w2_min_resolved=float(w[k]), t_min_resolved=float(t[k]), resolved_min_at_end=k == int(before[-1]))
    return result


def resolved_range_text(summary: Mapping[str, Any]) -> str:
    """What a β's W2 says over the frames where the grid resolved the cores (after :func:`core_check`)."""
    t_off = summary["t_cores_unresolved"]
    head = f"the cores fall below the cells at t = {t_off:.4g}, before t_min = {summary['t_min']:.4g}: W2_min is the mesh's"
    if math.isnan(summary.get("w2_min_resolved", math.nan)):
        return head + "; no frame before it resolves them (refine the cells at the atoms: grid.family = \"graded\")"
    if summary["resolved_min_at_end"]:
        return (head + f"; while they are resolved W2 has no minimum: {summary['w2_min_resolved']:.4g} at "
                f"t = {summary['t_min_resolved']:.4g}, still falling (an upper bound of the flow's W2_min; t_min later)")
    return head + f"; while they are resolved the least W2 is {summary['w2_min_resolved']:.4g} at t = {summary['t_min_resolved']:.4g}"
