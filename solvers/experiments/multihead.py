r"""The experiments of Pendharkar (arXiv 2605.04279) (multi-head gradient-flow structure) as library functions.

Each function simulates particles with :func:`meanfield.solvers.particle.simulate`,
measures with :mod:`meanfield.analysis.diagnostics`, compares with the closed forms of
:mod:`meanfield.analysis.theory`, and returns a ``dict`` of arrays plus the fitted numbers.

========================================  ==========================================
Thm 19, critical inverse temperature      :func:`beta_star_sign_experiment`
                                          (configuration :func:`block_configuration`)
Thm 22, heterogeneous scalar heads        :func:`equiangular_experiment`
Thm 25, ReLU vs softmax clustering time   :func:`clustering_time`, :func:`clustering_time_experiment`
Thm 27, attention entropy                 :func:`entropy_experiment`
Thm 39, approximate orthogonality         :func:`orthogonality_margin_experiment`
                                          (heads :func:`rotated_heads`)
========================================  ==========================================

Runtime: every function with its defaults takes well under a second to a few
seconds on one core, except :func:`clustering_time_experiment` over large grids
(use ``quick=True`` for a capped version).

Examples
--------
>>> out = equiangular_experiment([0.5, 1.5], beta=2.0, n=8, t_final=1.0, save_every=0.1)
>>> abs(out["early_rate_particles"] / out["early_rate_theory"] - 1) < 1e-12
True
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.optimize import brentq

from meanfield.analysis import theory
from meanfield.analysis.diagnostics import cluster_statistics, diagnose_trajectory, fd_weights, frame_diagnostics, head_outputs
from meanfield.errors import ConfigError
from meanfield.heads import HeadStack
from meanfield.model import ConstantHeads, Model
from meanfield.geometry.sphere import sample_equiangular, sample_uniform
from meanfield.solvers.particle import ParticleSolver, ParticleStepper
from meanfield.solvers.problem import Problem, solve

__all__ = [
    "block_configuration",
    "block_energy_rates",
    "beta_flip",
    "beta_star_sign_experiment",
    "equiangular_experiment",
    "entropy_experiment",
    "clustering_time",
    "clustering_time_experiment",
    "rotated_heads",
    "orthogonality_margin_experiment",
]


def _positive(value: float, key: str) -> float:
    x = float(value)
    if not (math.isfinite(x) and x > 0):
        raise ConfigError(key, f"must be a positive number, got {value!r}")
    return x


def _int_at_least(value: int, key: str, bound: int) -> int:
    if isinstance(value, bool) or int(value) != value or value < bound:
        raise ConfigError(key, f"must be an integer >= {bound}, got {value!r}")
    return int(value)


def _model(heads: HeadStack, *, beta: float, kind: str, direction: str = "ascent") -> Model:
    return Model(d=heads.d, beta=float(beta), attention=kind, heads=ConstantHeads(heads), direction=direction, backend="numpy")


# =========================================================================== Thm 19


def _shares(H: int, dominant_share: float | None, shares: Sequence[float] | None) -> np.ndarray:
    if shares is not None:
        w2 = np.asarray(shares, dtype=float)
        if w2.shape != (H,) or not np.all(w2 > 0) or not math.isclose(float(w2.sum()), 1.0, rel_tol=1e-12):
            raise ConfigError("shares", f"expected {H} positive numbers summing to 1, got {shares!r}")
        return w2
    if dominant_share is None:
        return np.full(H, 1.0 / H)
    rho = float(dominant_share)
    if H == 1:
        return np.ones(1)
    if not (1.0 / H <= rho < 1.0):
        raise ConfigError("dominant_share", f"must lie in [1/H, 1) = [{1.0 / H:g}, 1), got {dominant_share!r}")
    return np.array([rho] + [(1.0 - rho) / (H - 1)] * (H - 1))


def block_configuration(
    H: int, n: int, alpha: float, *, dominant_share: float | None = None, shares: Sequence[float] | None = None
) -> tuple[HeadStack, np.ndarray]:
    r"""The Thm 19 configuration used here: scalar heads on orthogonal blocks, orthogonal tokens (Thm 19 of arXiv 2605.04279).

    .. math::

        d = nH,\qquad x_i = \sum_{h} w_h\, e^{(h)}_i,\qquad
        B_h = V_h = \frac{\alpha}{w_h^2}\,P_h,\qquad \sum_h w_h^2 = 1,

    where :math:`e^{(h)}_1,\dots,e^{(h)}_n` is the standard basis of block
    :math:`h` (coordinates :math:`hn,\dots,hn+n-1`) and :math:`P_h` its
    orthogonal projector.  Then

    * the tokens are orthonormal (:math:`n\le d`) and the heads exactly
      orthogonal (:math:`B_{h'}B_h=0`), symmetric and value-aligned (Thms 11, 16–17);
    * every head scores the tokens as a scalar head of strength :math:`\alpha` on
      orthogonal tokens: :math:`s^h_{ij}=\alpha\,\delta_{ij}`;
    * the cosine between head :math:`h`'s output :math:`f^h_i` and the token as
      that head sees it, :math:`P_hx_i/\|P_hx_i\|`, is
      :math:`c(\beta)=e^{\alpha\beta}/\sqrt{e^{2\alpha\beta}+n-1}` (:func:`meanfield.analysis.theory.head_cosine`);
      its cosine with :math:`x_i` itself is :math:`w_h c(\beta)`.

    Thm 19 of Pendharkar (arXiv 2605.04279) leaves its configuration open; scalar heads
    :math:`B_h=\alpha I` acting on the *same* space are not it (identical heads
    give :math:`\Pi_h = H\sum_i a_i\|P^\perp u_i\|^2\ge0` for every :math:`\beta`).
    This block configuration is the orthogonal-head version of "scalar heads,
    orthogonal tokens"; see :func:`block_energy_rates` for its exact rates.

    Parameters
    ----------
    H : int, >= 1
        Number of heads.
    n : int, >= 2
        Number of tokens.
    alpha : float, > 0
        Scalar strength.
    dominant_share : float, optional
        :math:`w_0^2=\rho\in[1/H,1)`, the other heads sharing :math:`1-\rho`
        equally (default: equal shares :math:`1/H`).
    shares : (H,) sequence, optional
        All :math:`w_h^2` explicitly (positive, summing to 1).

    Returns
    -------
    heads : HeadStack
    x0 : (n, nH) array
    """
    H = _int_at_least(H, "H", 1)
    n = _int_at_least(n, "n", 2)
    alpha = _positive(alpha, "alpha")
    w2 = _shares(H, dominant_share, shares)
    d = n * H
    B = np.zeros((H, d, d))
    x0 = np.zeros((n, d))
    for h in range(H):
        block = slice(h * n, (h + 1) * n)
        B[h, block, block] = (alpha / w2[h]) * np.eye(n)
        x0[:, block] = math.sqrt(w2[h]) * np.eye(n)
    return HeadStack(B=B, V=B.copy()), x0


def block_energy_rates(
    beta: float | np.ndarray,
    *,
    H: int,
    n: int,
    alpha: float,
    shares: Sequence[float],
    kind: str = "unnormalized",
) -> np.ndarray:
    r"""Exact per-head energy rates at :math:`t=0` in :func:`block_configuration` (Thms 16–19 of arXiv 2605.04279).

    .. math::

        \frac{dE_h}{dt}\Big|_{t=0} = \kappa\,\Big(\frac{\alpha}{n}\Big)^2
        \Big[\frac{e^{2\alpha\beta}+n-1}{w_h^2} - H\,e^{2\alpha\beta}\Big],
        \qquad \kappa = \begin{cases}1 & \text{unnormalized}\\ \dfrac{n}{e^{\alpha\beta}+n-1} & \text{softmax}\end{cases}

    from :math:`\|u^h_i\|^2=(\alpha/n)^2(e^{2\alpha\beta}+n-1)/w_h^2`, equal radial
    shadows :math:`a^h_i=(\alpha/n)e^{\alpha\beta}` for every head, no cross
    terms, and :math:`dE_h/dt=\|u^h\|^2-(a^h)^2-\sum_{h'\ne h}a^ha^{h'}`.  Head
    :math:`h` loses monotonicity iff :math:`c(\beta)^2>1/(Hw_h^2)`; since
    :math:`c^*(H)\le 1/\sqrt H\le 1/(\sqrt H w_h)`, never for :math:`\beta<\beta^*`.

    Returns
    -------
    ndarray, shape ``beta.shape + (H,)``
    """
    if kind not in ("unnormalized", "softmax"):
        raise ConfigError("kind", f"closed form known for 'unnormalized' and 'softmax', got {kind!r}")
    w2 = np.asarray(shares, dtype=float)
    b = np.asarray(beta, dtype=float)[..., None]
    e2 = np.exp(2.0 * alpha * b)
    rates = (alpha / n) ** 2 * ((e2 + n - 1.0) / w2 - H * e2)
    if kind == "softmax":
        rates = rates * n / (np.exp(alpha * b) + n - 1.0)
    return rates


def beta_flip(*, H: int, n: int, alpha: float, share: float) -> float:
    r"""Inverse temperature above which a head of share :math:`w^2` loses monotonicity (block configuration, Thm 19).

    .. math::

        \beta_{\mathrm{flip}} = \frac{1}{2\alpha}\ln\frac{n-1}{Hw^2-1}\quad (Hw^2>1),\qquad
        \inf_{w}\beta_{\mathrm{flip}} = \frac{1}{2\alpha}\ln\frac{n-1}{H-1} = \beta^* - \frac{\ln c^*(H)}{2\alpha} > \beta^*,

    and :math:`+\infty` when :math:`Hw^2\le1` (e.g. equal shares: every head stays monotone).
    """
    excess = H * share - 1.0
    if excess <= 0:
        return math.inf
    return math.log((n - 1.0) / excess) / (2.0 * alpha)


def beta_star_sign_experiment(
    H: int,
    n: int,
    alpha: float,
    betas: Sequence[float],
    *,
    dominant_share: float = 0.75,
    attention: str = "softmax",
    t_short: float = 0.1,
    dt: float = 0.005,
    save_every: float = 0.01,
    method: str = "rk4",
) -> dict[str, Any]:
    r"""Sign of the per-head :math:`dE_h/dt` on both sides of :math:`\beta^*` (Thm 19 of arXiv 2605.04279).

    .. math::

        \beta^* = \frac{1}{2\alpha}\ln\frac{c^*(H)^2(n-1)}{1-c^*(H)^2},\qquad
        c(\beta^*) = c^*(H).

    In :func:`block_configuration` (``dominant_share`` :math:`=w_0^2`) each
    :math:`\beta` is simulated on :math:`[0,t_{\mathrm{short}}]` and the exact
    chain-rule rates :math:`dE_h/dt` are recorded at every saved frame.  At :math:`t=0`, below
    :math:`\beta^*` every head's energy increases; above
    :math:`\beta_{\mathrm{flip}}` (:func:`beta_flip`, :math:`>\beta^*`) the
    dominant head's energy decreases.  :math:`\beta^*` is a sufficient
    threshold: the paper's bound takes the other heads' shadows at their
    largest, :math:`|a^{h'}|\le\|u^{h'}\|`.  Between :math:`\beta^*` and
    :math:`\beta_{\mathrm{flip}}` the sign holds at :math:`t=0`.  Over the window
    the sign can be lost at any :math:`\beta`, even :math:`\beta=0` (e.g. H = 3,
    n = 8), because the tokens leave the Thm 19 configuration (they stop being
    orthogonal) as soon as they move: the theorem is a statement at :math:`t=0`.

    Softmax attention is the default (Thm 19 of arXiv 2605.04279 is stated for it); the sign
    of :math:`dE_h/dt` at :math:`t=0` is the same for ``"unnormalized"``
    (:func:`block_energy_rates`), but there the heads of small share
    (:math:`\|B_h\|=\alpha/w_h^2`) make the flow stiff and fast, so the window
    must be much shorter.

    Parameters
    ----------
    H, n : int
        Heads (>= 2) and tokens (>= 2); :math:`d=nH`.
    alpha : float
        Scalar strength.
    betas : sequence of float
        Inverse temperatures to simulate.
    dominant_share : float
        :math:`w_0^2\in[1/H,1)`.
    attention : {"unnormalized", "softmax"}
    t_short, dt, save_every : float
        Window, step and frame spacing.
    method : str
        Integrator.

    Returns
    -------
    dict
        Arrays ``betas`` (B,), ``t`` (T,), ``dEdt`` (B, T, H), ``dEdt0`` and
        ``dEdt0_closed`` (B, H), ``dEdt_min`` (B, H) over the window,
        ``sign_kept`` (B,) (all heads > 0 on the whole window),
        ``cosine`` (B,) (measured :math:`\cos(f^0_i,P_0x_i)`), ``cosine_theory`` (B,),
        ``dominance_fraction0`` (B, H) (per-token Condition 8 at t=0), ``shares`` (H,);
        numbers ``c_star``, ``beta_star``, ``beta_star_numeric``, ``beta_flip``
        (closed form, dominant head), ``beta_flip_measured`` (root of the
        measured :math:`dE_0/dt(\beta)` at t=0), ``beta_kept_max`` (largest
        simulated β with the sign kept everywhere) and ``beta_lost_min``
        (smallest simulated β where some head's rate is negative).
    """
    H = _int_at_least(H, "H", 2)
    n = _int_at_least(n, "n", 2)
    alpha = _positive(alpha, "alpha")
    heads, x0 = block_configuration(H, n, alpha, dominant_share=dominant_share)
    w2 = _shares(H, dominant_share, None)
    betas_arr = np.asarray(betas, dtype=float)
    if betas_arr.ndim != 1 or betas_arr.size == 0 or np.any(betas_arr < 0):
        raise ConfigError("betas", "expected a non-empty list of inverse temperatures >= 0")
    rates, cosines, dominance = [], [], []
    times = None
    for beta in betas_arr:
        model = _model(heads, beta=beta, kind=attention)
        run = solve(Problem(model, x0), ParticleSolver(dt=dt, method=method), t_final=t_short, save_every=save_every, energy=False, speed=False)
        series = diagnose_trajectory(run.t, np.stack(run.states), heads, beta=beta, kind=attention)
        rates.append(np.stack([series[f"dEdt_h{h}"] for h in range(H)], axis=1))
        dominance.append([series[f"dominance_fraction_h{h}"][0] for h in range(H)])
        f0 = head_outputs(x0, heads, beta=beta, kind=attention)[0]
        seen = np.zeros_like(x0)  # the tokens as head 0 sees them: P_0 x_i / |P_0 x_i|
        seen[:, :n] = x0[:, :n] / np.linalg.norm(x0[:, :n], axis=1, keepdims=True)
        cosines.append(float(np.mean(np.sum(f0 * seen, axis=1) / np.linalg.norm(f0, axis=1))))
        times = run.t
    dEdt = np.stack(rates)

    def measured_rate(beta: float) -> float:
        fr = frame_diagnostics(x0, heads, beta=beta, kind=attention)
        return fr.scalars["dEdt_h0"]

    flip = beta_flip(H=H, n=n, alpha=alpha, share=float(w2[0]))
    flip_measured = math.inf
    if math.isfinite(flip):
        lo, hi = 0.0, max(2.0 * flip, 1.0 / alpha)
        while measured_rate(hi) > 0:
            hi *= 2.0
        flip_measured = float(brentq(measured_rate, lo, hi, xtol=1e-14, rtol=1e-13))
    kept = np.all(dEdt > 0, axis=(1, 2))
    lost = np.any(dEdt < 0, axis=(1, 2))
    return {
        "betas": betas_arr,
        "t": times,
        "shares": w2,
        "dEdt": dEdt,
        "dEdt0": dEdt[:, 0, :],
        "dEdt0_closed": block_energy_rates(betas_arr, H=H, n=n, alpha=alpha, shares=w2, kind=attention),
        "dEdt_min": dEdt.min(axis=1),
        "sign_kept": kept,
        "cosine": np.asarray(cosines),
        "cosine_theory": np.asarray(theory.head_cosine(betas_arr, n=n, alpha=alpha)),
        "dominance_fraction0": np.asarray(dominance),
        "c_star": float(theory.c_star(H)),
        "beta_star": theory.beta_star(H, n, alpha),
        "beta_star_numeric": theory.beta_star_numeric(H, n, alpha),
        "beta_flip": flip,
        "beta_flip_measured": flip_measured,
        "beta_kept_max": float(betas_arr[kept].max()) if np.any(kept) else math.nan,
        "beta_lost_min": float(betas_arr[lost].min()) if np.any(lost) else math.nan,
    }


# =========================================================================== Thm 22 and Thm 27


def _pair_gap_spread(x: np.ndarray) -> float:
    """(max - min) of the pairwise gaps 1 - <x_i, x_j> over their mean (0 for equiangular tokens)."""
    y = x - x.mean(axis=0)
    q = np.sum(y * y, axis=1)
    gaps = 0.5 * (q[:, None] + q[None, :]) - y @ y.T
    off = ~np.eye(x.shape[0], dtype=bool)
    values = gaps[off]
    mean = float(values.mean())
    return float(values.max() - values.min()) / mean if mean > 0 else 0.0


def equiangular_experiment(
    lambdas: Sequence[float],
    beta: float,
    n: int,
    t_final: float,
    *,
    d: int | None = None,
    gamma0: float = 0.0,
    dt: float = 0.01,
    save_every: float = 0.05,
    method: str = "rk4",
    late_window: tuple[float, float] = (1e-3, 1e-9),
    seed: int = 0,
) -> dict[str, Any]:
    r"""Particles against the equiangular ODE for heterogeneous scalar heads (Thms 22, 27 of arXiv 2605.04279).

    .. math::

        \dot\gamma = 2A(\gamma)(1-\gamma)\bigl(1+(n-1)\gamma\bigr),\qquad
        \dot\gamma(0)\big|_{\gamma=0}=\sum_h\varphi(\lambda_h),\qquad
        1-\gamma\sim Ce^{-2\Lambda t}.

    Softmax attention, :math:`B_h=V_h=\lambda_hI`, equiangular tokens
    (:math:`\langle x_i,x_j\rangle=\gamma_0`, :math:`n\le d`).  Measured:
    :math:`\gamma(t)` from the particles (:math:`1-\gamma` from centred
    coordinates, accurate far below :math:`10^{-16}`), the early rate from the
    exact velocity at :math:`t=0` (:math:`\frac{2}{n(n-1)}\sum_{i\ne j}\langle\dot x_i,x_j\rangle`)
    and from a second-order one-sided difference of the frames, the late slope of
    :math:`\log(1-\gamma)` fitted where :math:`1-\gamma` lies in ``late_window``,
    and each head's mean attention entropy against
    :func:`meanfield.analysis.theory.equiangular_entropy`.

    Parameters
    ----------
    lambdas : (H,) sequence of float
        Head strengths :math:`\lambda_h>0`.
    beta : float
    n : int
    t_final : float
    d : int, optional
        Dimension (default ``n``).
    gamma0 : float
        Initial common inner product.
    dt, save_every : float
    method : str
    late_window : (float, float)
        Upper and lower bound of :math:`1-\gamma` for the late fit.
    seed : int
        Rotation of the equiangular frame.

    Returns
    -------
    dict
        Arrays ``t``, ``gamma``, ``gamma_ode``, ``log_gap``, ``log_gap_ode``,
        ``entropy`` (T, H), ``entropy_theory`` (T, H) (at the particles' γ),
        ``equiangularity`` (T,) (relative spread of the pairwise gaps);
        numbers ``early_rate_particles``, ``early_rate_fd``, ``early_rate_theory``,
        ``late_slope``, ``late_slope_theory`` (:math:`-2\Lambda`), ``late_slope_error``
        (relative), ``late_points``, ``log_gap_error`` (max abs difference with
        the ODE where :math:`1-\gamma>10^{-12}`), ``entropy_monotone``
        (min over heads and frames of the entropy increment), ``log_n``.
    """
    lam = np.asarray(lambdas, dtype=float)
    if lam.ndim != 1 or lam.size == 0 or np.any(lam <= 0):
        raise ConfigError("lambdas", f"expected positive head strengths, got {lambdas!r}")
    n = _int_at_least(n, "n", 2)
    d = n if d is None else _int_at_least(d, "d", n)
    H = lam.size
    eye = np.eye(d)
    heads = HeadStack(B=lam[:, None, None] * eye, V=lam[:, None, None] * eye)
    model = _model(heads, beta=beta, kind="softmax")
    x0 = sample_equiangular(n, d, gamma=gamma0, seed=seed)
    run = solve(Problem(model, x0), ParticleSolver(dt=dt, method=method), t_final=t_final, save_every=save_every, energy=False, speed=False)
    frames = np.stack(run.states)
    t = run.t
    series = diagnose_trajectory(t, frames, heads, beta=beta, kind="softmax")
    gap = series["one_minus_gamma"]
    gamma = 1.0 - gap
    with np.errstate(divide="ignore"):
        log_gap = np.log(gap)
    log_gap_ode = np.asarray(theory.solve_equiangular_log_gap(gamma0, t, lambdas=lam, beta=beta, n=n))
    gamma_ode = -np.expm1(log_gap_ode)

    xdot = model.velocity(frames[0], 0.0)
    pair = xdot @ frames[0].T
    off = ~np.eye(n, dtype=bool)
    early_particles = float((pair + pair.T)[off].mean())
    early_fd = float(fd_weights(t[:3] - t[0]) @ gamma[:3]) if t.size >= 3 else math.nan

    upper, lower = late_window
    late = (gap <= upper) & (gap >= lower)
    if np.count_nonzero(late) >= 2:
        slope = theory.fit_linear(t[late], log_gap[late])[0]
    else:
        slope = math.nan
    slope_theory = -theory.late_rate(lam)
    resolved = gap > 1e-12
    entropy = np.stack([series[f"entropy_mean_h{h}"] for h in range(H)], axis=1)
    entropy_theory = np.stack(
        [np.asarray(theory.equiangular_entropy(np.minimum(gamma, 1.0), lam=float(lam[h]), beta=beta, n=n)) for h in range(H)],
        axis=1,
    )
    return {
        "t": t,
        "gamma": gamma,
        "gamma_ode": gamma_ode,
        "log_gap": log_gap,
        "log_gap_ode": log_gap_ode,
        "entropy": entropy,
        "entropy_theory": entropy_theory,
        "equiangularity": np.array([_pair_gap_spread(x) for x in frames]),
        "early_rate_particles": early_particles,
        "early_rate_fd": early_fd,
        "early_rate_theory": theory.early_rate(lam, beta=beta, n=n),
        "late_slope": float(slope),
        "late_slope_theory": slope_theory,
        "late_slope_error": abs(slope / slope_theory - 1.0) if math.isfinite(slope) else math.nan,
        "late_points": int(np.count_nonzero(late)),
        "log_gap_error": float(np.max(np.abs(log_gap[resolved] - log_gap_ode[resolved]))),
        "entropy_monotone": float(np.min(np.diff(entropy, axis=0))) if t.size > 1 else math.nan,
        "log_n": math.log(n),
    }


def entropy_experiment(
    lam: float,
    beta: float,
    n: int,
    t_final: float,
    *,
    gamma0: float = 0.0,
    dt: float = 0.01,
    save_every: float = 0.05,
    method: str = "rk4",
) -> dict[str, Any]:
    r"""Attention entropy in the scalar equiangular case (Thm 27 of arXiv 2605.04279).

    .. math::

        \frac{d\mathcal H_i}{dt} = -\beta^2\,\mathrm{Cov}_{p_i}(s_{i\cdot},\dot s_{i\cdot})\ \ge 0,
        \qquad \mathcal H_i(t)\uparrow\log n .

    One softmax head :math:`B=V=\lambda I` on equiangular tokens (:math:`d=n`).

    Returns
    -------
    dict
        ``t``, ``entropy`` (T,) (mean over tokens), ``entropy_spread`` (T,)
        (max - min over tokens: 0 by symmetry), ``entropy_theory`` (T,)
        (:func:`meanfield.analysis.theory.equiangular_entropy` of the particles' γ),
        ``production`` (T,) (mean Thm 27 right-hand side), ``residual`` (T,)
        (identity residual, nan at the ends); numbers ``min_increment``,
        ``min_production``, ``final_gap`` (:math:`\log n-\mathcal H(t_{\mathrm{final}})`), ``log_n``.
    """
    lam = _positive(lam, "lam")
    n = _int_at_least(n, "n", 2)
    heads = HeadStack(B=lam * np.eye(n)[None], V=lam * np.eye(n)[None])
    model = _model(heads, beta=beta, kind="softmax")
    x0 = sample_equiangular(n, n, gamma=gamma0, seed=0)
    run = solve(Problem(model, x0), ParticleSolver(dt=dt, method=method), t_final=t_final, save_every=save_every, energy=False, speed=False)
    series = diagnose_trajectory(run.t, np.stack(run.states), heads, beta=beta, kind="softmax")
    entropy = series["entropy_mean_h0"]
    gamma = np.minimum(1.0 - series["one_minus_gamma"], 1.0)
    return {
        "t": run.t,
        "entropy": entropy,
        "entropy_spread": series["entropy_max_h0"] - series["entropy_min_h0"],
        "entropy_theory": np.asarray(theory.equiangular_entropy(gamma, lam=lam, beta=beta, n=n)),
        "production": series["entropy_rate_h0"],
        "residual": series["entropy_residual_h0"],
        "min_increment": float(np.min(np.diff(entropy))) if entropy.size > 1 else math.nan,
        "min_production": float(np.min(series["entropy_rate_h0"])),
        "final_gap": math.log(n) - float(entropy[-1]),
        "log_n": math.log(n),
    }


# =========================================================================== Thm 25


def clustering_time(
    attention: str,
    n: int,
    d: int,
    *,
    beta: float = 1.0,
    eps: float = 1e-3,
    init: str = "uniform",
    seed: int = 0,
    dt: float = 0.2,
    check_every: float = 0.5,
    t_max: float | None = None,
    stall_speed: float = 1e-9,
    x0: np.ndarray | None = None,
) -> dict[str, Any]:
    r"""Time until every pairwise inner product exceeds :math:`1-\varepsilon` (Thm 25 of arXiv 2605.04279).

    .. math::

        T_\varepsilon = \inf\{t:\ \min_{i\ne j}\langle x_i(t),x_j(t)\rangle \ge 1-\varepsilon\}.

    One identity head (:math:`B=V=I`), ``attention`` ``"softmax"`` (inverse
    temperature ``beta``) or ``"relu"`` (:math:`v_i=\frac1n\sum_j\max(\langle x_i,x_j\rangle,0)x_j`),
    RK4 with step ``dt``.  The largest gap :math:`1-\min\langle x_i,x_j\rangle`
    is checked every ``check_every`` and the crossing time is interpolated
    linearly in :math:`\log(\text{gap})` between checks.

    Initial tokens:

    ``"uniform"``
        i.i.d. uniform on :math:`S^{d-1}` (seeded).  With ReLU attention a
        token whose inner products with all others are negative feels no force,
        so such runs can stop in several clusters: they are detected when
        :math:`\max_i\|\dot x_i\|<` ``stall_speed`` and reported with
        :math:`T=\infty`, ``clustered = False``.
    ``"equiangular"``
        :math:`\langle x_i,x_j\rangle=\gamma_0=d^{-1/2}` (the typical overlap of
        random tokens in dimension :math:`d`, the linearised regime of Pendharkar's Thm 25);
        needs :math:`n\le d`.

    ``x0`` (an ``(n, d)`` array) replaces the sampled tokens.

    Returns
    -------
    dict
        ``time`` (float, ``inf`` if not clustered), ``clustered`` (bool),
        ``n_clusters`` (at tolerance ``eps`` at the end), ``t_end``, ``reason``.
    """
    if attention not in ("softmax", "relu"):
        raise ConfigError("attention", f"must be 'softmax' or 'relu', got {attention!r}")
    n = _int_at_least(n, "n", 2)
    d = _int_at_least(d, "d", 2)
    eps = _positive(eps, "eps")
    if x0 is not None:
        x = np.asarray(x0, dtype=float)
        if x.shape != (n, d):
            raise ConfigError("x0", f"expected an array of shape ({n}, {d}), got {x.shape}")
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    elif init == "uniform":
        x = sample_uniform(n, d, seed=seed)
    elif init == "equiangular":
        if n > d:
            raise ConfigError("d", f"init='equiangular' needs n <= d, got n={n}, d={d}")
        x = sample_equiangular(n, d, gamma=d**-0.5, seed=seed)
    else:
        raise ConfigError("init", f"must be 'uniform' or 'equiangular', got {init!r}")
    heads = HeadStack(B=np.eye(d)[None], V=np.eye(d)[None])
    model = _model(heads, beta=beta, kind=attention)
    stepper = ParticleStepper(model, method="rk4", dt=dt)
    limit = t_max if t_max is not None else clustering_time_limit(n, d)
    t = 0.0
    gap = cluster_statistics(x, tol=eps)["max_gap"]
    if gap < eps:
        return {"time": 0.0, "clustered": True, "n_clusters": 1, "t_end": 0.0, "reason": "clustered"}
    while t < limit:
        x_next = stepper.advance(x, t, t + check_every)
        gap_next = cluster_statistics(x_next, tol=eps)["max_gap"]
        if gap_next < eps:
            frac = (math.log(gap) - math.log(eps)) / (math.log(gap) - math.log(max(gap_next, 1e-300)))
            return {"time": t + frac * check_every, "clustered": True, "n_clusters": 1, "t_end": t + check_every, "reason": "clustered"}
        x, gap, t = x_next, gap_next, t + check_every
        speed = float(np.max(np.linalg.norm(model.velocity(x, t), axis=1)))
        if speed < stall_speed:
            stats = cluster_statistics(x, tol=eps)
            return {"time": math.inf, "clustered": False, "n_clusters": int(stats["n_clusters"]), "t_end": t, "reason": "stalled"}
    stats = cluster_statistics(x, tol=eps)
    return {"time": math.inf, "clustered": False, "n_clusters": int(stats["n_clusters"]), "t_end": t, "reason": "t_max"}


def clustering_time_limit(n: int, d: int) -> float:
    r"""The horizon of :func:`clustering_time` unless given: :math:`50\,n\,(1 + \ln d) + 100`."""
    return 50.0 * n * (1.0 + math.log(d)) + 100.0


def check_clustering_steps(ns: Sequence[int], ds: Sequence[int], dt: float, *, key: str = "dt") -> None:
    """Refuse a step that takes one run past :data:`~meanfield.resources.MAX_STEPS` steps to its horizon
    (``dt = 1e-9`` had run for ever, with no way to see it).

    Raises
    ------
    ConfigError
        Naming ``key``.
    """
    from meanfield.resources import MAX_STEPS

    n, d = max(ns), max(ds)
    steps = clustering_time_limit(n, d) / dt
    if not steps <= MAX_STEPS:
        raise ConfigError(key, f"{dt:g} takes {steps:.3g} steps to the horizon t = {clustering_time_limit(n, d):g} of n = {n}, "
                               f"d = {d}; the limit is {MAX_STEPS:.0e} steps")


def check_clustering_memory(ns: Sequence[int], ds: Sequence[int], *, key: str = "d", available: int | None = None) -> None:
    """Refuse a size whose run does not fit in memory: the identity head's dense d×d matrices and the tokens'
    Runge–Kutta copies (``d = 1e9`` had failed with a traceback after it started allocating).

    Raises
    ------
    ConfigError
        Naming ``key`` (the dimension: the head grows as d²).
    """
    from meanfield.resources import memory_shortfall

    n, d = max(ns), max(ds)
    # B, V and the kernels' copies; the tokens, stages and velocities
    short = memory_shortfall(8.0 * (6 * d * d + 24 * n * d), available=available)
    if short:
        raise ConfigError(key, f"d = {d} with n = {n} tokens (heads of {d}×{d}) {short}")


def _fit_or_nan(fit: Any, xs: np.ndarray, ys: np.ndarray) -> tuple[float, float, float]:
    if xs.size < 2 or np.ptp(xs) == 0:
        return (math.nan, math.nan, math.nan)
    return fit(xs, ys)


def clustering_time_experiment(
    attention: str,
    ns: Sequence[int],
    ds: Sequence[int],
    eps: float = 1e-3,
    *,
    beta: float = 1.0,
    runs: int = 3,
    max_draws: int | None = None,
    init: str = "uniform",
    dt: float = 0.2,
    quick: bool = False,
) -> dict[str, Any]:
    r"""Clustering time over a grid of :math:`(n,d)` and its fits (Thm 25 of arXiv 2605.04279).

    .. math::

        T_{\mathrm{softmax}} = O(n),\qquad T_{\mathrm{ReLU}} = O(n\log d).

    For each :math:`(n,d)`, :func:`clustering_time` is run with seeds
    :math:`0,1,2,\dots` until ``runs`` runs have reached one cluster or
    ``max_draws`` seeds were tried; the reported time is the median over the
    clustered runs (``inf`` if none) and ``clustered_fraction`` the share of
    tried seeds that clustered.  With softmax every run clusters, so the seeds
    are :math:`0,\dots,\text{runs}-1`; with ReLU from uniform tokens a sizeable
    share of runs stalls in several clusters (a token whose inner products with
    all others are negative feels no force), and the time is then conditional
    on clustering.

    The medians are fitted against the predicted scale :math:`X`
    (:func:`meanfield.analysis.theory.clustering_time_scale`: :math:`n` or :math:`n\log d`)
    with :func:`meanfield.analysis.theory.fit_linear` (:math:`T\approx aX+b`), against
    :math:`n` on log–log axes (:func:`meanfield.analysis.theory.fit_power_law`; exponent 1
    for :math:`T\propto n`) and against :math:`\log d` (:math:`T\approx c\log d+e`);
    each fit uses the finite medians only and is ``nan`` when fewer than two
    distinct abscissae remain.  Pendharkar's scalings come from the linearisation at
    :math:`\gamma=0` and are upper bounds: softmax clustering from random tokens
    is typically much faster than :math:`O(n)` (the drive grows with :math:`(n-1)\gamma`).

    Parameters
    ----------
    attention : {"softmax", "relu"}
    ns, ds : sequences of int
    eps : float
        Clustering tolerance.
    beta : float
        Softmax inverse temperature.
    runs : int
        Clustered runs wanted per :math:`(n,d)`.
    max_draws : int, optional
        Seeds tried at most per :math:`(n,d)` (default ``10 * runs``).
    init : {"uniform", "equiangular"}
    dt : float
        RK4 step.
    quick : bool
        Cap the cost: ``runs = 1``, ``max_draws = 4``, ``dt = 0.5``, ``eps = max(eps, 1e-2)``.

    Returns
    -------
    dict
        Arrays ``n``, ``d`` (K,), ``times`` (K, runs) (``inf`` for missing
        clustered runs), ``seeds`` (K, runs) (the seed of each clustered run,
        -1 where missing), ``median`` (K,), ``clustered_fraction`` (K,),
        ``draws`` (K,), ``scale`` (K,); numbers ``slope``, ``intercept``, ``r2``
        (linear fit on the scale), ``exponent_n``, ``r2_n`` (power law in n),
        ``slope_log_d``, ``r2_log_d``, ``points`` (finite medians used).
    """
    if attention not in ("softmax", "relu"):
        raise ConfigError("attention", f"must be 'softmax' or 'relu', got {attention!r}")
    ns_list = [_int_at_least(v, "n", 2) for v in ns]
    ds_list = [_int_at_least(v, "d", 2) for v in ds]
    if not ns_list:
        raise ConfigError("n", "needs at least one value")
    if not ds_list:
        raise ConfigError("d", "needs at least one value")
    runs = _int_at_least(runs, "runs", 1)
    max_draws = 10 * runs if max_draws is None else _int_at_least(max_draws, "max_draws", 1)
    if quick:
        runs, max_draws, dt, eps = 1, min(max_draws, 4), max(dt, 0.5), max(eps, 1e-2)
    check_clustering_steps(ns_list, ds_list, dt)
    grid = [(n, d) for n in ns_list for d in ds_list]
    times = np.full((len(grid), runs), math.inf)
    seeds = np.full((len(grid), runs), -1, dtype=int)
    draws = np.zeros(len(grid), dtype=int)
    clustered = np.zeros(len(grid), dtype=int)
    for k, (n, d) in enumerate(grid):
        seed = 0
        while clustered[k] < runs and seed < max_draws:
            result = clustering_time(attention, n, d, beta=beta, eps=eps, init=init, seed=seed, dt=dt)
            if result["clustered"]:
                times[k, clustered[k]] = result["time"]
                seeds[k, clustered[k]] = seed
                clustered[k] += 1
            seed += 1
        draws[k] = seed
    median = np.array([np.median(row[np.isfinite(row)]) if np.any(np.isfinite(row)) else math.inf for row in times])
    n_arr = np.array([g[0] for g in grid], dtype=float)
    d_arr = np.array([g[1] for g in grid], dtype=float)
    scale = np.array([theory.clustering_time_scale(attention, n=n, d=d) for n, d in grid])
    ok = np.isfinite(median)
    slope, intercept, r2 = _fit_or_nan(theory.fit_linear, scale[ok], median[ok])
    exponent, _, r2_n = _fit_or_nan(theory.fit_power_law, n_arr[ok], median[ok])
    slope_d, _, r2_d = _fit_or_nan(theory.fit_linear, np.log(d_arr[ok]), median[ok])
    return {
        "attention": attention,
        "init": init,
        "eps": eps,
        "beta": beta,
        "runs": runs,
        "n": n_arr.astype(int),
        "d": d_arr.astype(int),
        "times": times,
        "seeds": seeds,
        "median": median,
        "clustered_fraction": clustered / np.maximum(draws, 1),
        "draws": draws,
        "scale": scale,
        "slope": slope,
        "intercept": intercept,
        "r2": r2,
        "exponent_n": exponent,
        "r2_n": r2_n,
        "slope_log_d": slope_d,
        "r2_log_d": r2_d,
        "points": int(np.count_nonzero(ok)),
    }


# =========================================================================== Thm 39


def rotated_heads(d: int, alpha: float, delta: float) -> HeadStack:
    r"""Two value-aligned projector heads with :math:`\|B_1B_0\|_{op}=\delta` (Thm 39 of arXiv 2605.04279).

    .. math::

        B_0 = \alpha P_{S_0},\quad S_0=\mathrm{span}(e_1,\dots,e_k);\qquad
        B_1 = \alpha P_{S_1},\quad S_1=\mathrm{span}(\cos\theta\,e_{k+j}+\sin\theta\,e_j)_{j\le k},

    with :math:`k=\lfloor d/2\rfloor`, :math:`\sin\theta=\delta/\alpha^2`; all
    principal angles between :math:`S_0` and :math:`S_1` equal :math:`90^\circ-\theta`,
    and :math:`\|B_1B_0\|_{op}=\alpha^2\sin\theta=\delta`.  :math:`V_h=B_h`.
    """
    d = _int_at_least(d, "d", 2)
    alpha = _positive(alpha, "alpha")
    if not (0.0 <= delta <= alpha * alpha):
        raise ConfigError("delta", f"must lie in [0, alpha^2] = [0, {alpha * alpha:g}], got {delta!r}")
    k = d // 2
    theta = math.asin(delta / (alpha * alpha))
    U0 = np.zeros((d, k))
    U1 = np.zeros((d, k))
    for j in range(k):
        U0[j, j] = 1.0
        U1[k + j, j] = math.cos(theta)
        U1[j, j] = math.sin(theta)
    B = np.stack([alpha * U0 @ U0.T, alpha * U1 @ U1.T])
    return HeadStack(B=B, V=B.copy())


def orthogonality_margin_experiment(
    deltas: Sequence[float],
    *,
    n: int = 32,
    d: int = 8,
    alpha: float = 1.0,
    beta: float = 1.0,
    seed: int = 0,
    t_short: float = 0.5,
    dt: float = 0.01,
    save_every: float = 0.05,
) -> dict[str, Any]:
    r"""Per-head monotonicity margin as the head overlap :math:`\delta` grows (Thm 39 of arXiv 2605.04279).

    .. math::

        \delta=\max_{h\ne h'}\|B_{h'}B_h\|_{op},\qquad
        \Big|\sum_ia_i\langle u^h_i,u^{h'}_i\rangle\Big| \le \delta\sum_ia_i\,m^h_im^{h'}_i,
        \quad m^h_i=\sum_ja_je^{\beta s^h_{ij}},

    (Cauchy–Schwarz through :math:`\|B_hB_{h'}\|_{op}`): the cross terms that
    exact orthogonality removes come back at most linearly in :math:`\delta`.
    Heads :func:`rotated_heads`, ``unnormalized`` kind (Thm 11 setting), uniform
    tokens (one draw, ``seed``); each :math:`\delta` is simulated on :math:`[0,t_{\mathrm{short}}]`.

    Returns
    -------
    dict
        Arrays over ``deltas``: ``delta``, ``delta_measured``
        (:func:`meanfield.analysis.theory.head_overlap`), ``angle_deg`` (principal angles,
        :func:`meanfield.analysis.theory.principal_angles`, smallest), ``margin0`` and
        ``margin_min`` (D, 2) (aggregate margin :math:`\sigma\,(dE_h/dt)/S_h` at t=0
        and its minimum over the window), ``dEdt0`` (D, 2), ``cross0`` (D,)
        (:math:`\sum_ia_i\langle u^0_i,u^1_i\rangle` at t=0), ``cross_bound0`` (D,),
        ``shadow0`` (D,), ``dominance_fraction0`` (D, 2), ``margin_bound0`` (D, 2)
        (the margin Thm 39 guarantees from the bound alone,
        :math:`(S_h-\sum_{h'\ne h}\mathrm{shadow}_{hh'}-\delta\sum_ia_im^0_im^1_i)/S_h`); numbers
        ``delta_robust`` (the overlap up to which the bound alone guarantees
        monotonicity of both heads at t=0, computed at :math:`\delta=0`:
        :math:`\min_h(S_h-\mathrm{shadow}_h)/\sum_ia_im^0_im^1_i`),
        ``margin_slope`` (fitted :math:`d\,\min_h\mathrm{margin}/d\delta` at t=0), ``monotone_all``
        (every head monotone on every window).

        The sign of the cross terms depends on the token draw ``seed``, not
        on the heads being positive semi-definite (:math:`\langle P_0y,P_1z\rangle`
        can be negative): in some draws they are positive at every :math:`\delta`
        (overlapping heads cooperate and the margin grows with :math:`\delta`), in
        others negative at some :math:`\delta` (the margin falls), and at large
        :math:`\beta` a head's margin can be negative already at :math:`\delta=0`
        (radial shadows).  The figure ``multihead_orthogonality_margin`` reports
        the shares over several seeds; what holds in every draw is the bound
        itself and that the guaranteed margin never exceeds the measured one.
    """
    deltas_arr = np.asarray(deltas, dtype=float)
    if deltas_arr.ndim != 1 or deltas_arr.size == 0:
        raise ConfigError("deltas", "expected a non-empty list")
    x0 = sample_uniform(n, d, seed=seed)
    a = np.full(n, 1.0 / n)
    rows: dict[str, list[Any]] = {
        k: [] for k in ("measured", "angle", "m0", "mmin", "r0", "c0", "cb0", "s0", "dom0", "bound0")
    }
    monotone = True
    for delta in deltas_arr:
        heads = rotated_heads(d, alpha, float(delta))
        rows["measured"].append(theory.head_overlap(heads.B))
        rows["angle"].append(float(theory.principal_angles(heads.B)[(0, 1)].min()))
        model = _model(heads, beta=beta, kind="unnormalized")
        run = solve(Problem(model, x0), ParticleSolver(dt=dt, method="rk4"), t_final=t_short, save_every=save_every, energy=False, speed=False)
        series = diagnose_trajectory(run.t, np.stack(run.states), heads, beta=beta, kind="unnormalized")
        margins = np.stack([series[f"aggregate_margin_h{h}"] for h in range(2)], axis=1)
        rates = np.stack([series[f"dEdt_h{h}"] for h in range(2)], axis=1)
        monotone &= bool(np.all(rates > 0))
        rows["m0"].append(margins[0])
        rows["mmin"].append(margins.min(axis=0))
        rows["r0"].append(rates[0])
        rows["c0"].append(series["cross_h0_h1"][0])
        rows["s0"].append(series["shadow_h0_h1"][0])
        rows["dom0"].append([series[f"dominance_fraction_h{h}"][0] for h in range(2)])
        partitions = [np.exp(beta * (x0 @ heads.B[h] @ x0.T)) @ a for h in range(2)]
        bound = float(theory.head_overlap(heads.B)) * float(np.sum(a * partitions[0] * partitions[1]))
        rows["cb0"].append(bound)
        self0 = np.array([series[f"self_power_h{h}"][0] for h in range(2)])
        shadow_sum0 = np.array([series[f"shadow_sum_h{h}"][0] for h in range(2)])
        rows["bound0"].append((self0 - shadow_sum0 - bound) / self0)
    base = rotated_heads(d, alpha, 0.0)
    base_series = frame_diagnostics(x0, base, beta=beta, kind="unnormalized").scalars
    partitions = [np.exp(beta * (x0 @ base.B[h] @ x0.T)) @ a for h in range(2)]
    coupling = float(np.sum(a * partitions[0] * partitions[1]))
    delta_robust = min(
        (base_series[f"self_power_h{h}"] - base_series[f"shadow_sum_h{h}"]) / coupling for h in range(2)
    )
    margin0 = np.asarray(rows["m0"])
    slope = theory.fit_linear(deltas_arr, margin0.min(axis=1))[0] if np.ptp(deltas_arr) > 0 else math.nan
    return {
        "delta": deltas_arr,
        "delta_measured": np.asarray(rows["measured"]),
        "angle_deg": np.asarray(rows["angle"]),
        "margin0": margin0,
        "margin_min": np.asarray(rows["mmin"]),
        "dEdt0": np.asarray(rows["r0"]),
        "cross0": np.asarray(rows["c0"]),
        "cross_bound0": np.asarray(rows["cb0"]),
        "shadow0": np.asarray(rows["s0"]),
        "dominance_fraction0": np.asarray(rows["dom0"]),
        "margin_bound0": np.asarray(rows["bound0"]),
        "delta_robust": float(delta_robust),
        "margin_slope": float(slope),
        "monotone_all": monotone,
    }
