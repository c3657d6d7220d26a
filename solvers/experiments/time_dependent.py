r"""The experiments of Massucco et al. (arXiv 2605.18870) (time-dependent multi-head Wasserstein gradient flows) on :math:`S^2`.

Library functions that simulate, measure and fit; each returns a ``dict`` of
arrays and fitted numbers.  Authors' convention by default:
``direction = "descent"``, head weights :math:`1/H`, :math:`\beta=1`; the
dynamics is the transformer PDE of Massucco et al. (arXiv 2605.18870), i.e. the ``pooled`` kind with
value-aligned heads, solved by RK4 particles (:mod:`meanfield.solvers.particle`) or by the
JKO scheme (:mod:`meanfield.solvers.jko`).

==========================================  ======================================
OU against oscillating weights               :func:`ou_vs_oscillating`
plateau of the upper gradient against H      :func:`gradient_plateau_vs_heads`
the plateau and its two fits                 :func:`authors_plateau`, :func:`plateau_fits`
discrete energy–dissipation balance          :func:`energy_dissipation_balance`
JKO :math:`\tau`-convergence to the PDE      :func:`jko_tau_convergence`
stability (inputs, weights)                  :func:`input_stability`, :func:`weight_stability`
==========================================  ======================================

Heads of the experiments (:func:`time_dependent_model`): :math:`H` scalar value-aligned
heads :math:`\bar B_h=\lambda I_3` (``base`` :math:`=\lambda`), moved by a
schedule of :mod:`meanfield.heads.schedules`.  Under descent, :math:`\lambda<0` is
attractive (tokens cluster for constant weights) and :math:`\lambda>0`
repulsive; the oscillating schedule with amplitude :math:`A>|\lambda|` flips
the sign of every head periodically.

Every function has ``quick=True`` (a few seconds on one core).
Run ``python -m meanfield.solvers.experiments.time_dependent --quick [--out DIR]`` for the numbers and the figure.
"""
from __future__ import annotations

import argparse
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.analysis.diagnostics import cluster_statistics
from meanfield.heads import HeadStack
from meanfield.analysis.mobility import lipschitz_bound
from meanfield.model import ConstantHeads, HeadSchedule, Model
from meanfield.heads.schedules import OscillatingSchedule, OUSchedule, oscillation_phases
from meanfield.geometry.sphere import sample_uniform
from meanfield.analysis.transport import w2
from meanfield.solvers.jko import EnergyDissipationTracker, JKOSolver
from meanfield.solvers.particle import ParticleSolver
from meanfield.solvers.problem import Problem, solve

__all__ = [
    "DEFAULTS",
    "time_dependent_model",
    "FIT_METHODS",
    "fit_power_law",
    "plateau_fits",
    "authors_plateau",
    "trajectory",
    "ou_vs_oscillating",
    "gradient_plateau_vs_heads",
    "energy_dissipation_balance",
    "jko_tau_convergence",
    "input_stability",
    "weight_stability",
    "plot_time_dependent",
    "main",
]

#: parameters of the Massucco et al. (arXiv 2605.18870) experiments (authors' convention)
DEFAULTS: dict[str, Any] = {
    "beta": 1.0,
    "direction": "descent",
    "base": -1.0,
    "kappa": 1.0,
    "sigma": 0.5,
    "weights_dt": 0.01,
    "amplitude": 2.0,
    "omega": 1.0,
    "phases": "spread",
    "n": 64,
    "t_final": 20.0,
    "dt": 0.05,
    "save_every": 0.25,
}


def time_dependent_model(
    H: int,
    *,
    schedule: str = "ou",
    beta: float = DEFAULTS["beta"],
    direction: str = DEFAULTS["direction"],
    base: float = DEFAULTS["base"],
    kappa: float = DEFAULTS["kappa"],
    sigma: float = DEFAULTS["sigma"],
    weights_dt: float = DEFAULTS["weights_dt"],
    amplitude: float = DEFAULTS["amplitude"],
    omega: float = DEFAULTS["omega"],
    phases: str = DEFAULTS["phases"],
    seed: int = 0,
    d: int = 3,
) -> Model:
    r"""The pooled model with :math:`H` heads :math:`\bar B_h=\lambda I` under a weight schedule.

    .. math::

        \dot x_i=\sigma P^\perp_{x_i}\frac{\sum_h w_h\sum_j e^{\beta x_i^\top B_h(t)x_j}B_h(t)x_j}
        {\sum_h w_h\sum_j e^{\beta x_i^\top B_h(t)x_j}},\qquad w_h=\frac1H

    (Massucco et al., arXiv 2605.18870: 's transformer PDE for particles).

    Parameters
    ----------
    H : int
        Number of heads.
    schedule : {"constant", "ou", "oscillating"}
    base : float
        :math:`\lambda` of :math:`\bar B_h=\lambda I`.
    kappa, sigma, weights_dt, seed
        OU parameters (:class:`~meanfield.heads.schedules.OUSchedule`).
    amplitude, omega, phases
        Oscillation (:class:`~meanfield.heads.schedules.OscillatingSchedule`,
        :func:`~meanfield.heads.schedules.oscillation_phases`).
    """
    if H < 1:
        raise ValueError(f"H must be >= 1, got {H}")
    B = np.repeat((base * np.eye(d))[None], H, axis=0)
    mean = HeadStack(B=B, V=B.copy())
    sched: HeadSchedule
    if schedule == "constant":
        sched = ConstantHeads(mean)
    elif schedule == "ou":
        sched = OUSchedule(mean, kappa=kappa, sigma=sigma, dt=weights_dt, seed=seed)
    elif schedule == "oscillating":
        sched = OscillatingSchedule(mean, amplitude=amplitude, omega=omega, phases=oscillation_phases(H, phases, seed=seed))
    else:
        raise ValueError(f"schedule must be 'constant', 'ou' or 'oscillating', got {schedule!r}")
    return Model(d=d, beta=beta, attention="pooled", heads=sched, direction=direction)


#: the two fits of :math:`y\approx a\,x^b`, by ``method`` name: what each minimises
FIT_METHODS: dict[str, str] = {
    "loglog": "log-log least squares: min over (log a, b) of sum_k (log y_k - log a - b log x_k)^2 (numpy.polyfit)",
    "curve_fit": "nonlinear least squares of a*x^b: min over (a, b) of sum_k (y_k - a x_k^b)^2 (scipy.optimize.curve_fit)",
}


def fit_power_law(x: Sequence[float], y: Sequence[float], *, method: str = "loglog") -> tuple[float, float]:
    r"""Fit :math:`y\approx a\,x^b`; returns ``(a, b)``.

    .. math::

        \text{loglog:}\ \min_{\log a,\,b}\sum_k\big(\log y_k-\log a-b\log x_k\big)^2,\qquad
        \text{curve\_fit:}\ \min_{a,\,b}\sum_k\big(y_k-a\,x_k^{b}\big)^2

    The second is the fit of Massucco, Del Grande, Carioni, Brune and Schönlieb (arXiv 2605.18870)
    (``scipy.optimize.curve_fit`` of ``a * H**b``), started here from the log-log fit; it weighs the
    largest :math:`y` most, the first weighs every point's relative error alike, so on noisy
    plateaus the two exponents differ.

    Parameters
    ----------
    x, y : (K,) array-like
        Positive abscissae and values.
    method : {"loglog", "curve_fit"}
        See :data:`FIT_METHODS`.
    """
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if method not in FIT_METHODS:
        raise ValueError(f"method must be one of {', '.join(FIT_METHODS)}, got {method!r}")
    b, log_a = np.polyfit(np.log(xs), np.log(ys), 1)
    if method == "loglog":
        return float(math.exp(log_a)), float(b)
    from scipy.optimize import OptimizeWarning, curve_fit

    with warnings.catch_warnings():  # the covariance is not used: an exact fit need not estimate it
        warnings.simplefilter("ignore", OptimizeWarning)
        popt, _ = curve_fit(lambda h, a_, b_: a_ * h**b_, xs, ys, p0=(math.exp(log_a), b), maxfev=20000)
    return float(popt[0]), float(popt[1])


def plateau_fits(H: Sequence[float], plateau: Sequence[float]) -> list[dict[str, Any]]:
    r"""Both fits of :math:`\overline{G^2}(H)\approx a\,H^b`, each with its method.

    Returns
    -------
    list of dict
        One per :data:`FIT_METHODS` entry: ``method`` (the name), ``description``, ``a``, ``b``.
    """
    out = []
    for method, description in FIT_METHODS.items():
        a, b = fit_power_law(H, plateau, method=method)
        out.append({"method": method, "description": description, "a": a, "b": b})
    return out


def authors_plateau(t: Sequence[float], values: Sequence[float], t_final: float | None = None) -> float:
    r"""The plateau of Massucco et al. (arXiv 2605.18870): the mean of a recorded series over :math:`t\ge T/2`.

    .. math::

        \overline{G^2} = \operatorname{mean}\{G^2(t_k) : t_k \ge T/2\}

    ``t_final`` defaults to the last recorded time.
    """
    ts, vs = np.asarray(t, dtype=float), np.asarray(values, dtype=float)
    T = float(ts[-1]) if t_final is None else float(t_final)
    return float(np.mean(vs[ts >= T / 2 - 1e-12 * max(1.0, T)]))


def trajectory(
    model: Model,
    x0: np.ndarray,
    *,
    t_final: float,
    dt: float = DEFAULTS["dt"],
    save_every: float = DEFAULTS["save_every"],
    cluster_tol: float = 1e-3,
) -> dict[str, Any]:
    r"""RK4 particle run with the energy–dissipation terms at every saved frame.

    Returns
    -------
    dict
        ``t``, ``x`` (T, n, d), ``energy`` (:math:`E(\mu_t,t)`), ``slope``
        (:math:`|\partial E|`), ``slope2``, ``G2`` (authors' :math:`G^2`), ``speed2``
        (:math:`|\dot\mu|_m^2`), ``dEdt_explicit``, ``n_clusters``, ``min_inner``,
        ``resultant`` (:math:`\|\frac1n\sum_ix_i\|`).
    """
    tracker = EnergyDissipationTracker(model)
    result = solve(Problem(model, x0), ParticleSolver(dt=dt, method="rk4"), t_final=t_final, save_every=save_every, trackers=[tracker], energy=False, speed=False)
    diag = result.diagnostics
    stats = [cluster_statistics(x, tol=cluster_tol) for x in result.states]
    return {
        "t": result.t,
        "x": np.stack(result.states),
        "energy": diag["energy_theta"],
        "slope2": diag["slope2"],
        "slope": np.sqrt(diag["slope2"]),
        "G2": diag["authors_G2"],
        "speed2": diag["metric_speed2"],
        "dEdt_explicit": diag["dE_dt_explicit"],
        "n_clusters": np.array([s["n_clusters"] for s in stats]),
        "min_inner": np.array([s["min_inner"] for s in stats]),
        "resultant": np.array([float(np.linalg.norm(x.mean(axis=0))) for x in result.states]),
    }


def _tail_mean(t: np.ndarray, values: np.ndarray, start: float) -> float:
    keep = t >= start
    return float(np.mean(values[keep]))


def ou_vs_oscillating(
    *,
    H: int = 4,
    n: int = DEFAULTS["n"],
    t_final: float = DEFAULTS["t_final"],
    seed: int = 0,
    quick: bool = False,
    snapshots: Sequence[float] | None = None,
    dt: float = DEFAULTS["dt"],
    schedules: Sequence[str] = ("ou", "oscillating", "constant"),
    **params: Any,
) -> dict[str, Any]:
    r"""OU against oscillating weights on :math:`S^2`: clouds, energy, upper gradient, clustering.

    ``seed`` draws the tokens and the OU path; ``dt`` is the RK4 step (:func:`trajectory`); ``schedules`` are
    the weight schedules run, each from the same cloud.

    Massucco et al. (arXiv 2605.18870), long-time behaviour: integrable (OU) weights relax to a stationary
    configuration with a small upper gradient; oscillating weights keep moving
    the cloud and :math:`|\partial E|` does not decay.

    Returns
    -------
    dict
        For each of ``schedules`` (by default ``"ou"``, ``"oscillating"`` and ``"constant"``) the output of
        :func:`trajectory` plus ``snapshots`` ((S, n, 3) clouds at ``snapshot_times``)
        and ``late_slope`` (mean :math:`|\partial E|` over the last half),
        ``final_clusters``, ``final_min_inner``; and ``snapshot_times``.
    """
    if quick:
        n, t_final = min(n, 32), min(t_final, 8.0)
    x0 = sample_uniform(n, 3, seed=seed)
    times = np.asarray(snapshots if snapshots is not None else np.linspace(0.0, t_final, 4))
    out: dict[str, Any] = {"snapshot_times": times, "H": H}
    for name in schedules:
        model = time_dependent_model(H, schedule=name, seed=seed, **params)
        run = trajectory(model, x0, t_final=t_final, dt=dt)
        idx = [int(np.argmin(np.abs(run["t"] - s))) for s in times]
        run["snapshots"] = run["x"][idx]
        run["late_slope"] = _tail_mean(run["t"], run["slope"], t_final / 2)
        run["final_clusters"] = float(run["n_clusters"][-1])
        run["final_min_inner"] = float(run["min_inner"][-1])
        out[name] = run
    return out


def gradient_plateau_vs_heads(
    *,
    heads: Sequence[int] = (1, 2, 4, 8, 16),
    schedule: str = "ou",
    n: int = DEFAULTS["n"],
    t_final: float = DEFAULTS["t_final"],
    window: float = 0.5,
    seeds: Sequence[int] = (0, 1, 2),
    quick: bool = False,
    **params: Any,
) -> dict[str, Any]:
    r"""Plateau of :math:`G^2` and :math:`|\partial E|^2` against the number of heads, fitted :math:`aH^b`.

    Massucco et al., arXiv 2605.18870: with OU heads the upper gradient decays to a plateau of order
    :math:`1/H` (:math:`b\approx-1`); with oscillating heads it does not decay
    (:math:`b\approx0`).  The plateau is the time average over the last
    ``window`` fraction of ``[0, t_final]``, averaged over ``seeds`` (noise and
    initial cloud).

    Returns
    -------
    dict
        ``H``, ``G2`` and ``slope2`` plateaus (len(heads),), their per-seed values
        (``G2_runs``, ``slope2_runs``), and the fits ``fit_G2 = (a, b)``, ``fit_slope2``.
    """
    if quick:
        heads, n, t_final, seeds = tuple(h for h in heads if h <= 8), min(n, 32), min(t_final, 8.0), tuple(seeds)[:2]
    g2 = np.empty((len(heads), len(seeds)))
    s2 = np.empty_like(g2)
    for a, H in enumerate(heads):
        for b, seed in enumerate(seeds):
            model = time_dependent_model(H, schedule=schedule, seed=1000 * seed + H, **params)
            run = trajectory(model, sample_uniform(n, 3, seed=seed), t_final=t_final)
            start = t_final * (1 - window)
            g2[a, b] = _tail_mean(run["t"], run["G2"], start)
            s2[a, b] = _tail_mean(run["t"], run["slope2"], start)
    H = np.asarray(heads, dtype=float)
    G2, S2 = g2.mean(axis=1), s2.mean(axis=1)
    return {
        "H": H,
        "G2": G2,
        "slope2": S2,
        "G2_runs": g2,
        "slope2_runs": s2,
        "fit_G2": fit_power_law(H, G2),
        "fit_slope2": fit_power_law(H, S2),
        "schedule": schedule,
    }


def energy_dissipation_balance(
    *,
    taus: Sequence[float] = (0.1, 0.05, 0.025),
    H: int = 4,
    schedule: str = "ou",
    n: int = DEFAULTS["n"],
    t_final: float = 4.0,
    seed: int = 0,
    quick: bool = False,
    **params: Any,
) -> dict[str, Any]:
    r"""The discrete energy–dissipation identity along JKO runs, term by term.

    .. math::

        E(\mu_T,T)-E(\mu_0,0) = \sum_k\Big[\underbrace{E(\mu_k,t_{k+1})-E(\mu_k,t_k)}_{\int\partial_tE}
        + \sigma\Big(\underbrace{\tfrac{W_m^2(\mu_k,\mu_{k+1})}{2\tau}}_{\int\frac12|\dot\mu|^2_m}
        + \underbrace{\tfrac\tau2|\partial E|^2(\mu_{k+1},t_{k+1})}_{\int\frac12|\partial E|^2}\Big)\Big] + \text{residual}

    (Massucco et al., arXiv 2605.18870: EDI; :class:`meanfield.solvers.jko.StepReport`).  The residual is
    :math:`O(\tau)`.

    Returns
    -------
    dict
        ``taus``, ``residual`` (total |residual| at ``T`` per τ), ``order``
        (observed orders between consecutive τ), and for the smallest τ the
        cumulative curves ``t``, ``energy_change``, ``time_term``,
        ``transport_term``, ``slope_term``, ``residual_curve``.
    """
    if quick:
        n, t_final, taus = min(n, 32), min(t_final, 2.0), tuple(taus)[:3]
    model = time_dependent_model(H, schedule=schedule, seed=seed, **params)
    x0 = sample_uniform(n, 3, seed=seed)
    totals = []
    curves: dict[str, Any] = {}
    for tau in taus:
        result = solve(Problem(model, x0), JKOSolver(tau=tau), t_final=t_final, save_every=tau, energy=False, speed=False)
        reports = result.info["reports"]
        terms = {k: np.array([r.edi_terms()[k] for r in reports]) for k in reports[0].edi_terms()}
        totals.append(abs(float(np.sum(terms["edi_residual"]))))
        curves = {
            "t": np.concatenate([[0.0], [r.t1 for r in reports]]),
            "energy_change": np.concatenate([[0.0], np.cumsum(terms["edi_energy_change"])]),
            "time_term": np.concatenate([[0.0], np.cumsum(terms["edi_time"])]),
            "transport_term": np.concatenate([[0.0], np.cumsum(model.sign * terms["edi_transport"])]),
            "slope_term": np.concatenate([[0.0], np.cumsum(model.sign * terms["edi_slope"])]),
            "residual_curve": np.concatenate([[0.0], np.cumsum(terms["edi_residual"])]),
            "margin": np.array([r.dissipation_margin for r in reports]),
        }
    res = np.asarray(totals)
    return {
        "taus": np.asarray(taus, dtype=float),
        "residual": res,
        "order": np.log2(res[:-1] / res[1:]) / np.log2(np.asarray(taus[:-1]) / np.asarray(taus[1:])),
        **curves,
    }


def jko_tau_convergence(
    *,
    taus: Sequence[float] = (0.1, 0.05, 0.025, 0.0125),
    H: int = 3,
    schedule: str = "ou",
    n: int = 32,
    t_final: float = 1.0,
    seed: int = 0,
    mobility: str = "frozen",
    quick: bool = False,
    **params: Any,
) -> dict[str, Any]:
    r"""Error of the particle JKO against the RK4 solution of the pooled PDE, per τ.

    The JKO scheme is first order (implicit Euler in the weighted geometry), so
    halving τ should halve the error.  Error: :math:`\max_i d_S(x_i^{JKO}(T),x_i^{RK4}(T))`
    (same particles; RK4 with step :math:`\min\tau/20`).  An OU path is drawn on the step
    ``weights_dt`` = the largest τ unless given, so that every τ resolves it: on a rougher path
    (``weights_dt`` 0.01 < τ) the ratios had been 1.89 and 1.64, the path's own error, not the scheme's.

    Returns
    -------
    dict
        ``taus``, ``error``, ``ratio`` (error(τ)/error(τ/2)), ``order`` (log2 of the ratios), ``iterations``.
    """
    if quick:
        taus = tuple(taus)[:3]
    if schedule == "ou":
        params.setdefault("weights_dt", max(taus))
    model = time_dependent_model(H, schedule=schedule, seed=seed, **params)
    x0 = sample_uniform(n, 3, seed=seed)
    ref = solve(Problem(model, x0), ParticleSolver(dt=min(taus) / 20, method="rk4"), t_final=t_final, energy=False, speed=False).final
    errors, iterations = [], []
    for tau in taus:
        result = solve(Problem(model, x0), JKOSolver(tau=tau, mobility=mobility), t_final=t_final, energy=False, speed=False)
        cos = np.clip(np.sum(result.final * ref, axis=1), -1.0, 1.0)
        errors.append(float(np.max(np.arccos(cos))))
        iterations.append(int(result.info["jko_iterations"]))
    err = np.asarray(errors)
    ratio = err[:-1] / err[1:]
    return {"taus": np.asarray(taus, dtype=float), "error": err, "ratio": ratio,
            "order": np.log(ratio) / np.log(np.asarray(taus[:-1]) / np.asarray(taus[1:])), "iterations": np.asarray(iterations)}


def input_stability(
    *,
    H: int = 2,
    n: int = 24,
    epsilon: float = 1e-4,
    t_final: float = 2.0,
    seed: int = 0,
    schedule: str = "ou",
    **params: Any,
) -> dict[str, Any]:
    r"""Grönwall: :math:`W_2(\mu_t,\nu_t)\le e^{Lt}\|X_0-Y_0\|_a` for a perturbed input (Massucco et al., arXiv 2605.18870: stability).

    Returns
    -------
    dict
        ``t``, ``w2`` (chordal, exact), ``coupled`` (:math:`\|X_t-Y_t\|_a`), ``bound``
        (:math:`e^{Lt}\|X_0-Y_0\|_a`), ``L`` (:func:`meanfield.analysis.mobility.lipschitz_bound`
        with :math:`M` the largest :math:`\|B_h(t)\|` on the saved frames), ``rate``
        (observed :math:`\max_t \log(\|X_t-Y_t\|_a/\|X_0-Y_0\|_a)/t`).
    """
    model = time_dependent_model(H, schedule=schedule, seed=seed, **params)
    x0 = sample_uniform(n, 3, seed=seed)
    rng = np.random.default_rng(seed + 1)
    y0 = x0 + epsilon * rng.standard_normal(x0.shape)
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    a = solve(Problem(model, x0), ParticleSolver(dt=0.01), t_final=t_final, save_every=t_final / 10, energy=False, speed=False)
    b = solve(Problem(model, y0), ParticleSolver(dt=0.01), t_final=t_final, save_every=t_final / 10, energy=False, speed=False)
    t = a.t
    coupled = np.array([math.sqrt(np.mean(np.sum((p - q) ** 2, axis=1))) for p, q in zip(a.states, b.states)])
    dist = np.array([w2(p, q, cost="chordal") for p, q in zip(a.states, b.states)])
    L = max(lipschitz_bound(model.heads.at(float(s)), beta=model.beta) for s in np.linspace(0, t_final, 41))
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = float(np.nanmax(np.log(coupled[1:] / coupled[0]) / t[1:]))
    with np.errstate(over="ignore"):  # the bound is far from sharp: e^{Lt} may overflow to inf
        bound = coupled[0] * np.exp(L * t)
    return {"t": t, "w2": dist, "coupled": coupled, "bound": bound, "L": L, "rate": rate}


def weight_stability(
    *,
    epsilons: Sequence[float] = (1e-2, 5e-3, 2.5e-3, 1.25e-3),
    H: int = 2,
    n: int = 24,
    t_final: float = 2.0,
    seed: int = 0,
    schedule: str = "ou",
    **params: Any,
) -> dict[str, Any]:
    r"""Weight perturbations of size ε give flows :math:`O(\varepsilon)` apart (Massucco et al., arXiv 2605.18870: Γ-convergence).

    Every head of the schedule is perturbed to :math:`B_h(t)+\varepsilon P_h` with a fixed
    random symmetric :math:`P_h` of unit Frobenius norm (value-aligned); the
    distance at :math:`T` is the exact chordal :math:`W_2` between the two clouds.

    Returns
    -------
    dict
        ``epsilons``, ``w2`` (at ``t_final``), ``fit = (a, b)`` of :math:`W_2\approx a\varepsilon^b` (b ≈ 1).
    """
    base = time_dependent_model(H, schedule=schedule, seed=seed, **params)
    rng = np.random.default_rng(seed + 7)
    P = rng.standard_normal((H, 3, 3))
    P = P + P.transpose(0, 2, 1)
    P /= np.linalg.norm(P, axis=(1, 2), keepdims=True)
    x0 = sample_uniform(n, 3, seed=seed)
    ref = solve(Problem(base, x0), ParticleSolver(dt=0.01), t_final=t_final, energy=False, speed=False).final
    out = []
    for eps in epsilons:
        sched = _Shifted(base.heads, eps * P)
        model = Model(d=3, beta=base.beta, attention="pooled", heads=sched, direction=base.direction)
        out.append(w2(ref, solve(Problem(model, x0), ParticleSolver(dt=0.01), t_final=t_final, energy=False, speed=False).final, cost="chordal"))
    dist = np.asarray(out)
    return {"epsilons": np.asarray(epsilons, dtype=float), "w2": dist, "fit": fit_power_law(epsilons, dist)}


class _Shifted:
    """A schedule plus a constant value-aligned shift of every head."""

    def __init__(self, schedule: HeadSchedule, shift: np.ndarray) -> None:
        self.schedule = schedule
        self.shift = shift

    def at(self, t: float) -> HeadStack:
        s = self.schedule.at(t)
        B = s.B + self.shift
        return HeadStack(B=B, V=B, w=s.w)


# ----------------------------------------------------------------------------- figure


def plot_time_dependent(results: dict[str, Any], path: str | Path) -> Path:
    """One figure: OU vs oscillating (|∂E| and energy), the plateau fit, and the EDI balance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    comp = results["comparison"]
    for name in ("ou", "oscillating", "constant"):
        axes[0].semilogy(comp[name]["t"], comp[name]["slope"], label=name)
        axes[1].plot(comp[name]["t"], comp[name]["energy"], label=name)
    axes[0].set(xlabel="t", ylabel="|∂E|", title=f"upper gradient, H={comp['H']}")
    axes[1].set(xlabel="t", ylabel="E(μ_t, t)", title="energy")
    axes[0].legend()
    for key, marker in (("plateau_ou", "o"), ("plateau_oscillating", "s")):
        if key in results:
            p = results[key]
            a, b = p["fit_G2"]
            axes[2].loglog(p["H"], p["G2"], marker, label=f"{p['schedule']}: b = {b:.2f}")
            axes[2].loglog(p["H"], a * p["H"] ** b, "k:", lw=0.8)
    axes[2].set(xlabel="H", ylabel="plateau of G²", title="G² ≈ a H^b")
    axes[2].legend()
    bal = results["balance"]
    for key in ("energy_change", "time_term", "transport_term", "slope_term", "residual_curve"):
        axes[3].plot(bal["t"], bal[key], label=key)
    axes[3].set(xlabel="t", title=f"EDI balance, τ = {bal['taus'][-1]:g}")
    axes[3].legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m meanfield.solvers.experiments.time_dependent [--quick] [--out DIR]``: print the fitted numbers, write ``time_dependent.png``."""
    parser = argparse.ArgumentParser(prog="python -m meanfield.solvers.experiments.time_dependent", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="figures")
    args = parser.parse_args(argv)
    results = {
        "comparison": ou_vs_oscillating(quick=args.quick),
        "plateau_ou": gradient_plateau_vs_heads(schedule="ou", quick=args.quick),
        "plateau_oscillating": gradient_plateau_vs_heads(schedule="oscillating", quick=args.quick),
        "balance": energy_dissipation_balance(quick=args.quick),
        "convergence": jko_tau_convergence(quick=args.quick),
    }
    for name in ("ou", "oscillating", "constant"):
        run = results["comparison"][name]
        print(f"{name:12s} late |∂E| = {run['late_slope']:.3g}  clusters = {run['final_clusters']:.0f}  min<x,y> = {run['final_min_inner']:.3f}")
    for key in ("plateau_ou", "plateau_oscillating"):
        p = results[key]
        print(f"{key}: G² ≈ {p['fit_G2'][0]:.3g} H^{p['fit_G2'][1]:.2f};  |∂E|² ≈ {p['fit_slope2'][0]:.3g} H^{p['fit_slope2'][1]:.2f}")
    bal = results["balance"]
    print("EDI residual per τ:", dict(zip(bal["taus"].tolist(), bal["residual"].tolist())), "orders", bal["order"])
    conv = results["convergence"]
    print("JKO error per τ:", dict(zip(conv["taus"].tolist(), conv["error"].tolist())), "ratios", conv["ratio"])
    print("figure:", plot_time_dependent(results, Path(args.out) / "time_dependent.png"))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
