r"""Minimizing movements (JKO) in the weighted Wasserstein geometry of A. Massucco, L. Del Grande, M. Carioni,
C. Brune and C.-B. Schönlieb, *Multi-Headed Transformer Architectures as Time-dependent Wasserstein Gradient
Flows*, arXiv 2605.18870.

.. math::

    \mu_{k+1}\in\operatorname*{argmin}_\mu\ \frac{W_{m,2}^2(\mu,\mu_k)}{2\tau} - \sigma E(\mu,t_{k+1}),
    \qquad E(\mu,t)=\sum_h\frac{w_h}{2\beta}\iint e^{\beta x^\top B_h(t)y}\,d\mu\,d\mu

(:math:`\sigma=+1` ascent — the forward pass, default; :math:`\sigma=-1` descent —
the authors' code).  The heads must be symmetric and value-aligned (:math:`V_h=B_h`);
as :math:`\tau\to0` the scheme converges, at order 1, to the transformer PDE
:math:`\partial_t\mu+\operatorname{div}(\mu\,\sigma\hat b P^\perp\nabla\delta E/\delta\mu)=0`,
i.e. the ``pooled`` attention kind (:mod:`meanfield.analysis.mobility`).

Particle JKO (:class:`ParticleJKOStepper`)
    With :math:`y_i=x_i^k` and the effective mobility :math:`\hat b_i` frozen at
    :math:`(\mu_k,\Theta_{t_{k+1}})` at :math:`y_i`, each step solves on the product of spheres

    .. math::

        \min_X F(X) = \sum_i a_i\frac{d_S(x_i,y_i)^2}{2\tau\hat b_i} - \sigma E(X,t_{k+1}).

    In the metric :math:`\langle u,v\rangle=\sum_i (a_i/\tau\hat b_i)\,u_i\cdot v_i` the
    Riemannian gradient of :math:`F` is :math:`-r(X)`,

    .. math::

        r_i(X) = \log_{x_i}y_i + \sigma\tau\,\hat b_i\,P^\perp_{x_i}\nabla\tfrac{\delta E}{\delta\mu}(x_i),

    a displacement in radians.  **Tolerance:** the step is converged when
    :math:`\max_i\|r_i\|\le` ``tol`` (``solver.tol``, default :math:`10^{-10}` rad).
    **Solver:** the fixed-point iteration :math:`x_i\leftarrow\exp_{x_i}(r_i(X))`
    (Riemannian gradient descent with unit step in that metric; it contracts
    with factor :math:`\approx\tau\,\mathrm{Lip}`), started at :math:`X=Y`.
    **Fallback:** when it stalls (the residual fails to drop by 10% over 5
    iterations, grows 100-fold, is not finite, or ``max_iter`` is reached) or
    ends at a point with :math:`F(X)>F(Y)`, the step is re-solved by Riemannian
    L-BFGS (two-loop recursion in the same metric, exponential-map retraction,
    vector transport by projection, Armijo backtracking; a step that is flat to
    the round-off of :math:`F` is accepted when it lowers the residual), started at the better
    of :math:`Y` and the fixed-point iterate, so that :math:`F` decreases
    monotonically.  Every step records its iterations, final residual, method and
    whether it fell back (:class:`StepReport`).
    **Halving:** a step whose solve ends above ``tol`` is not kept: it is redone as two
    steps of :math:`\tau/2`, down to :math:`\tau/2^{10}`, and the run fails past that.
    The problem is convex only for :math:`\tau` below about the inverse of the
    energy's curvature, which grows with :math:`\beta`: with :math:`\tau = 0.05` the
    steps from uniform tokens had ended at residuals of :math:`10^9` rad at
    :math:`\beta = 64` and :math:`10^{22}` at 128, and were kept. Within a saved interval
    the next step starts one level coarser than the last accepted one; each interval
    starts at :math:`\tau`, so that a resumed run takes the same steps.
    ``mobility = "implicit"``: :math:`\hat b` is evaluated at the new iterate
    (:math:`\hat b_{\mu_{k+1}}(x^{k+1}_i)`, fully implicit Euler); the fixed-point
    iteration updates it at every iteration, the L-BFGS fallback alternates
    frozen-mobility solves with mobility updates (Picard) until the implicit
    residual is below ``tol`` (damped by ½ in :math:`\log\hat b`); if that does not
    settle in 50 rounds the step keeps the frozen-mobility minimiser and reports
    ``method = "lbfgs-frozen"``.

Grid JKO on :math:`S^2` (:class:`GridJKOStepper`)
    A linearised JKO step on a spherical Voronoi mesh (:mod:`meanfield.geometry.mesh`).
    Linearising the energy and freezing the metric at :math:`\mu_k`, the
    minimizing movement is the push-forward of :math:`\mu_k` by the time-:math:`\tau`
    flow of :math:`u^k=\sigma\hat b_k\nabla\phi_k`, :math:`\phi_k=\delta E/\delta\mu(\mu_k,t_{k+1})`.
    It is discretised by Benamou–Brenier two-point fluxes with upwind density,
    implicit in the transported mass (one sparse LU solve per step):

    .. math::

        m^{k+1}_i + \tau\sum_{j\sim i}\ell_{ij}\big(u_{ij}^+\rho^{k+1}_i - u_{ij}^-\rho^{k+1}_j\big) = m^k_i,
        \qquad u_{ij} = \sigma\,\frac{\hat b_i+\hat b_j}{2}\,\frac{\phi_j-\phi_i}{d_S(x_i,x_j)},

    :math:`\rho_i=m_i/A_i`.  The matrix :math:`I+\tau A` has unit column sums
    (mass is conserved exactly, to the round-off of the solve) and is an M-matrix
    (non-negative inverse: positivity for every :math:`\tau`).  A result with a
    negative cell (round-off only) is rejected and the step redone as two half
    steps — never clipped.  With :math:`\phi_c=\partial E/\partial m_c` exactly
    (midpoint quadrature of :math:`E`), the semi-discrete scheme is a gradient
    flow on the graph (upwind discrete Wasserstein structure): :math:`dE/dt=\sigma\sum_e\ell_e d_e
    \rho_{\mathrm{up}}\hat b_e((\phi_j-\phi_i)/d_e)^2`.  **Artificial diffusion:**
    upwinding adds :math:`\approx\tfrac12h|u|` (first order in the mesh size
    :math:`h`) and the implicit transport :math:`\approx\tfrac12\tau|u|^2` (first
    order in :math:`\tau`).  ``mobility = "implicit"`` re-evaluates :math:`u`
    at the new masses by Picard iteration (each iterate positive and
    conservative) until :math:`\|m^{(p+1)}-m^{(p)}\|_1\le` ``tol``.
    ``edge_flux = "velocity"`` uses instead the grid solver's edge velocity
    :math:`\tfrac12(X_i+X_j)\cdot n_{ij}` of the pooled field (same spatial
    operator as :mod:`meanfield.solvers.grid`, for comparisons).

Energy–dissipation identity (tracked per step)
    :math:`E(\mu_T,T)-E(\mu_0,0)=\int_0^T[\tfrac12|\dot\mu|_m^2+\tfrac12|\partial E|^2+\partial_tE]\,dt`
    (ascent; the first two terms change sign for descent).  Per step:
    ``edi_time`` :math:`=E(\mu_k,t_{k+1})-E(\mu_k,t_k)` (exact integral of
    :math:`\partial_tE` at fixed :math:`\mu_k`), ``edi_transport`` :math:`=W_m^2/(2\tau)`,
    ``edi_slope`` :math:`=\tfrac\tau2|\partial E|^2(\mu_{k+1},t_{k+1})`, ``edi_energy_change``,
    and ``edi_residual`` = change − time − σ(transport + slope), which is
    :math:`O(\tau^2)` per step, :math:`O(\tau)` in total.

Examples
--------
>>> import numpy as np
>>> from meanfield.heads import HeadStack
>>> from meanfield.model import ConstantHeads, Model
>>> from meanfield.geometry.sphere import sample_uniform
>>> model = Model(d=3, beta=1.0, attention="pooled", heads=ConstantHeads(HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])))
>>> import meanfield as mf
>>> run = mf.solve(mf.Problem(model, sample_uniform(32, 3, seed=0)), mf.JKOSolver(tau=0.1), t_final=0.5, save_every=0.5)
>>> run.t.tolist(), bool(run.diagnostics["jko_residual"][-1] < 1e-10)
([0.0, 0.5], True)
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from meanfield.analysis.energy import energies_from_row_logs, energy_theta
from meanfield.checks import check_flag, check_int
from meanfield.config import JKO_TOL_RANGE, check_mask
from meanfield.errors import ConfigError, RunFailed
from meanfield.heads import HeadStack
from meanfield.io.token_masses import TOKEN_MASSES
from meanfield.analysis.mobility import (
    MobilityField,
    authors_slope_squared,
    energy_time_derivative,
    mobility_field,
)
from meanfield.model import EXP_OVERFLOW, ConstantHeads, Model, unshifted_exponent
from meanfield.heads.schedules import head_structure, path_structure, schedule_derivative
from meanfield.geometry.sphere import exp_map, geodesic_distance, log_map, project_tangent
from meanfield.solvers.signals import check
from meanfield.solvers.loop import RunSetup, Tracker
from meanfield.solvers.particle_stepper import check_positive
from meanfield.solvers.trackers import EnergyTracker, FiniteTracker, SphereTracker

__all__ = [
    "StepReport",
    "ParticleJKOStepper",
    "GridJKOStepper",
    "JKOTracker",
    "EnergyDissipationTracker",
    "check_gradient_structure",
    "check_gradient_structure_path",
    "JKOSolver",
    "solver_from_config",
    "JKO_VARIANTS",
    "MOBILITIES",
]

JKO_VARIANTS = ("particle", "grid")
MOBILITIES = ("frozen", "implicit")
#: the grid scheme's edge fluxes (``edge_flux`` of :class:`GridJKOStepper`)
EDGE_FLUXES = ("potential", "velocity")
#: the grid's linear solve is accepted at an L¹ residual ‖(I + τA)m − m_k‖₁ up to this (sparse LU round-off)
LINEAR_SOLVE_FLOOR = 1e-12


def check_tol(tol: Any) -> None:
    r"""``tol`` is a number in :data:`meanfield.config.JKO_TOL_RANGE` (the config's ``solver.tol`` bounds): below
    1e-14 the residual cannot reach it (the run fails after ten halvings), and one near a step's displacement
    :math:`\tau\|v\|` accepts the unmoved tokens (``tol = 0.5`` had written a run that never moved, exit 0)."""
    low, high = JKO_TOL_RANGE
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.integer, np.floating)) or not low <= tol <= high:
        raise ValueError(f"tol must lie in [{low:g}, {high:g}] (an absolute displacement in radians, or the grid's L¹ mass "
                         f"change), got {tol!r}")


# ----------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class StepReport:
    """What one JKO step did.

    Attributes
    ----------
    t0, t1 : float
        Start and end time (:math:`\\tau = t_1 - t_0`).
    iterations : int
        Inner iterations (fixed-point and L-BFGS together; grid: linear solves).
    residual : float
        Final residual: particle :math:`\\max_i\\|r_i\\|` (radians); grid
        :math:`\\|m^{(p+1)}-m^{(p)}\\|_1` of the mobility iteration (0 for frozen)
        plus the linear solve's residual.
    method : str
        ``"fixed-point"``, ``"lbfgs"``, ``"lbfgs-frozen"`` (implicit mobility
        abandoned for this step) or ``"upwind-implicit"`` (grid).
    fallback : bool
        Whether the fallback was used (particle: L-BFGS; grid: step halving).
    mobility_iterations : int
        Evaluations of the mobility at a new iterate (1 for ``frozen``).
    energy_start, energy_mid, energy_end : float
        :math:`E(\\mu_k,t_k)`, :math:`E(\\mu_k,t_{k+1})`, :math:`E(\\mu_{k+1},t_{k+1})`.
    transport_cost : float
        :math:`W_m^2` estimate of the step (particles: :math:`\\sum_ia_id_S^2/\\hat b_i`;
        grid: the two-point Benamou–Brenier action :math:`\\tau^2\\sum_e\\ell_ed_e\\rho_{\\rm up}u_e^2/\\hat b_e`).
    slope_squared : float
        :math:`|\\partial E|^2(\\mu_{k+1},t_{k+1})`.
    sign : float
        +1 ascent, −1 descent.
    """

    t0: float
    t1: float
    iterations: int
    residual: float
    method: str
    fallback: bool
    mobility_iterations: int
    energy_start: float
    energy_mid: float
    energy_end: float
    transport_cost: float
    slope_squared: float
    sign: float

    @property
    def tau(self) -> float:
        return self.t1 - self.t0

    @property
    def dissipation_margin(self) -> float:
        r""":math:`\sigma(E_{k+1}-E(\mu_k,t_{k+1})) - W_m^2/(2\tau)\ \ge 0` up to the tolerance (JKO minimality)."""
        return self.sign * (self.energy_end - self.energy_mid) - self.transport_cost / (2 * self.tau)

    def edi_terms(self) -> dict[str, float]:
        """The terms of the discrete energy–dissipation balance of this step."""
        change = self.energy_end - self.energy_start
        time = self.energy_mid - self.energy_start
        transport = self.transport_cost / (2 * self.tau)
        slope = 0.5 * self.tau * self.slope_squared
        return {
            "edi_energy_change": change,
            "edi_time": time,
            "edi_transport": transport,
            "edi_slope": slope,
            "edi_residual": change - time - self.sign * (transport + slope),
        }


class _ReportLog:
    """Per-step reports, the totals of a run and those pending for the next saved frame."""

    def __init__(self) -> None:
        self.reports: list[StepReport] = []
        self.pending: list[StepReport] = []
        self.stats: dict[str, Any] = {"jko_steps": 0, "jko_iterations": 0, "jko_fallbacks": 0, "jko_max_residual": 0.0,
                                      "jko_rejected_steps": 0, "jko_rejected_iterations": 0, "jko_frozen_steps": 0}

    def add(self, report: StepReport, keep: bool) -> None:
        """A step kept; one that kept the frozen mobility where the implicit iteration did not settle is counted too."""
        if keep:
            self.reports.append(report)
        self.pending.append(report)
        self.stats["jko_steps"] += 1
        self.stats["jko_iterations"] += report.iterations
        self.stats["jko_fallbacks"] += int(report.fallback)
        self.stats["jko_max_residual"] = max(self.stats["jko_max_residual"], report.residual)
        self.stats["jko_frozen_steps"] += int(report.method == "lbfgs-frozen")

    def reject(self, report: StepReport) -> None:
        """A step that missed ``tol`` and was halved: its inner iterations are work the kept steps do not count
        (at β = 16, τ = 0.5 they had been 87 % of the run's, unreported)."""
        self.stats["jko_rejected_steps"] += 1
        self.stats["jko_rejected_iterations"] += report.iterations

    def take(self) -> list[StepReport]:
        out, self.pending = self.pending, []
        return out


class _FieldCache:
    """The last few mobility fields, keyed by the bytes of (points, masses, heads): steps share them."""

    def __init__(self, beta: float, size: int = 3) -> None:
        self.beta = beta
        self.size = size
        self.entries: list[tuple[bytes, MobilityField]] = []

    def get(self, x: np.ndarray, heads: HeadStack, a: np.ndarray) -> MobilityField:
        key = x.tobytes() + a.tobytes() + heads.B.tobytes() + heads.w.tobytes()
        for k, value in self.entries:
            if k == key:
                return value
        value = mobility_field(x, heads, beta=self.beta, weights=a)
        self.put(key, value)
        return value

    def put(self, key: Any, value: MobilityField) -> None:
        """Store a field, dropping the oldest beyond ``size``."""
        self.entries.append((key, value))
        if len(self.entries) > self.size:
            self.entries.pop(0)


def _steps_between(t0: float, t1: float, tau: float) -> int:
    """``k = ceil((t1 - t0)/tau)``, at least 1: steps never exceed the requested τ."""
    return max(1, math.ceil((t1 - t0) / tau - 1e-9))


# ----------------------------------------------------------------------------- model checks


def check_gradient_structure(model: Model, *, t: float = 0.0) -> None:
    """Raise ``ValueError`` unless every head at time ``t`` is symmetric and value-aligned.

    The JKO scheme is the gradient flow of :math:`E(\\mu,t)`, which drives the
    ``pooled`` dynamics only for :math:`B_h=B_h^\\top`, :math:`V_h=B_h` (Massucco et al., arXiv 2605.18870).
    Only the heads at ``t`` are checked, and a schedule of :mod:`meanfield.heads.schedules` may leave this
    structure later: the oscillating and classic OU schedules keep it, but the matrix SDE does not where its
    relaxation target (``weights.target``) or OU mean (``weights.mean``) is not symmetric.  A config's run checks
    its whole stored weight path before any file (:func:`check_gradient_structure_path`), and each JKO step the
    heads at its end (:class:`~meanfield.errors.RunFailed` otherwise).
    """
    s = head_structure(model.heads.at(t))
    bad = [h for h in range(len(s["b_symmetric"])) if not (s["b_symmetric"][h] and s["v_aligned"][h])]
    if bad:
        raise ValueError(
            f"heads {bad} are not symmetric and value-aligned (need B = QᵀK symmetric and V = B, "
            "e.g. Q = K and V = \"aligned\"): the JKO scheme is the gradient flow of E(μ,t) of Massucco et al. (arXiv 2605.18870)"
        )


def check_gradient_structure_path(times: np.ndarray, B: np.ndarray, V: np.ndarray) -> None:
    """Raise ``ValueError`` unless every head of a weight path is symmetric and value-aligned at every stored time.

    ``times`` (T,), ``B`` and ``V`` (T, H, d, d): the path a config's run stores (``weights/t``, ``weights/B``,
    ``weights/V``), by :func:`~meanfield.heads.schedules.path_structure`.  The message names
    the first time and head that leave the structure (a relaxation towards a non-symmetric target had run as the
    gradient flow, its energy–dissipation identity off by 6 %, or failed after ten step halvings).
    """
    s = path_structure(B, V)
    bad = ~(s["b_symmetric"] & s["v_aligned"])
    if np.any(bad):
        k, h = (int(i) for i in np.argwhere(bad)[0])
        what = "B_h ≠ B_hᵀ" if not s["b_symmetric"][k, h] else "V_h ≠ B_h"
        raise ValueError(f"head {h} at t = {float(times[k]):.6g} is not symmetric and value-aligned ({what}): the JKO scheme is "
                         "the gradient flow of E(μ,t) of Massucco et al. (arXiv 2605.18870), which needs B_h = B_hᵀ = V_h "
                         "at all times")


def _check_heads_in_time(model: Model, heads: HeadStack, t: float) -> None:
    """:class:`~meanfield.errors.RunFailed` where the heads of a schedule at a step's time ``t`` leave what the scheme
    takes: symmetric, value-aligned heads with :math:`\\beta\\|B_h\\|_2` at most :data:`JKO_MAX_EXPONENT` (checked at
    t = 0 by the solver, over the whole stored path by a config's run; :func:`meanfield.solve` with a schedule that
    left them had run on, failing after ten halvings or ending in inf energies)."""
    if isinstance(model.heads, ConstantHeads):
        return
    s = head_structure(heads)
    bad = [h for h in range(heads.H) if not (s["b_symmetric"][h] and s["v_aligned"][h])]
    if bad:
        raise RunFailed(f"the heads {bad} at t = {t:.6g} are no longer symmetric and value-aligned (B_h = B_hᵀ = V_h): "
                        "the schedule leaves the gradient structure the JKO scheme needs (use the particle solver)")
    exponent = unshifted_exponent(model.beta, heads.B)
    if exponent > JKO_MAX_EXPONENT:
        raise RunFailed(f"β·max‖B_h‖₂ = {exponent:.4g} at t = {t:.6g}: the schedule takes the heads past the JKO scheme's "
                        f"floats (β‖B_h‖₂ ≤ {JKO_MAX_EXPONENT:.2f}; use the particle solver)")


def _energy(x: np.ndarray, heads: HeadStack, beta: float, a: np.ndarray, fld: MobilityField | None = None) -> float:
    r""":math:`E(\mu,t)=\sum_hw_hE_h`; from a mobility field at the atoms themselves: :math:`\frac1{2\beta}\sum_ia_i/\hat b_i`."""
    if beta > 0 and fld is not None:  # the pooled row sums: ln Σ_h w_h Z_h(x_i) = -ln b̂_i
        return float(energies_from_row_logs(-fld.log_b[None, :], beta=beta, weights=a)[0])
    with np.errstate(over="ignore"):
        return energy_theta(x, heads, beta=beta, weights=a)


# ----------------------------------------------------------------------------- particle JKO


class ParticleJKOStepper:
    r"""Particle minimizing movements on :math:`(S^{d-1})^n` (see the module docstring).

    Parameters
    ----------
    model : Model
        Symmetric value-aligned heads (any schedule); ``direction`` sets :math:`\sigma`.
        The attention kind is not used: the scheme is the gradient flow, whose
        PDE is the ``pooled`` kind.
    tau : float
        JKO step :math:`\tau` (each save interval takes ``ceil(Δt/τ)`` equal steps, none longer than τ).
    mobility : {"frozen", "implicit"}
    tol : float
        Tolerance on :math:`\max_i\|r_i\|` (radians).
    max_iter : int
        Iteration cap of the fixed-point iteration and of L-BFGS (each).
    max_halvings : int
        Nested halvings of a step that does not reach ``tol``, after which the run fails.
    weights : (n,) array, optional
        Token masses (default :math:`1/n`).
    memory : int
        L-BFGS memory.
    keep_reports : bool
        Keep every :class:`StepReport` in :attr:`reports` (they are always
        passed to :class:`JKOTracker`).
    force_lbfgs : bool
        Skip the fixed-point iteration (tests, hard steps).
    """

    def __init__(
        self,
        model: Model,
        *,
        tau: float,
        mobility: str = "frozen",
        tol: float = 1e-10,
        max_iter: int = 500,
        max_halvings: int = 10,
        weights: np.ndarray | None = None,
        memory: int = 10,
        keep_reports: bool = True,
        force_lbfgs: bool = False,
    ) -> None:
        if not (tau > 0 and math.isfinite(tau)):
            raise ValueError(f"tau must be positive and finite, got {tau!r}")
        if mobility not in MOBILITIES:
            raise ValueError(f"mobility must be one of {MOBILITIES}, got {mobility!r}")
        check_tol(tol)
        check_gradient_structure(model)
        self.model = model
        self.tau = float(tau)
        self.mobility = mobility
        self.tol = float(tol)
        self.max_iter = check_int("max_iter", max_iter, minimum=1)
        self.max_halvings = check_int("max_halvings", max_halvings, minimum=0)
        self.halvings = 0
        self.weights = None if weights is None else np.asarray(weights, dtype=float)
        self.memory = check_int("memory", memory, minimum=1)
        self.keep_reports = keep_reports
        self.force_lbfgs = check_flag("force_lbfgs", force_lbfgs)
        self.log = _ReportLog()
        self._cache = _FieldCache(model.beta)

    # ------------------------------------------------------------------ bookkeeping
    @property
    def reports(self) -> list[StepReport]:
        return self.log.reports

    @property
    def stats(self) -> dict[str, Any]:
        return dict(self.log.stats, solver="jko", variant="particle", tau=self.tau, mobility=self.mobility, tol=self.tol,
                    halvings=self.halvings)

    def _a(self, n: int) -> np.ndarray:
        if self.weights is None:
            return np.full(n, 1.0 / n)
        if self.weights.shape != (n,):
            raise ValueError(f"weights must have shape ({n},), got {self.weights.shape}")
        return self.weights

    # ------------------------------------------------------------------ pieces
    def _field(self, x: np.ndarray, heads: HeadStack, a: np.ndarray) -> MobilityField:
        return mobility_field(x, heads, beta=self.model.beta, weights=a)

    def _residual(self, x: np.ndarray, y: np.ndarray, fld: MobilityField, log_bf: np.ndarray | None, h: float) -> np.ndarray:
        """:math:`r_i=\\log_{x_i}y_i+\\sigma h\\hat b_i P^\\perp g(x_i)`; ``log_bf=None``: mobility at ``x`` (implicit)."""
        scale = 1.0 if log_bf is None else np.exp(log_bf - fld.log_b)[:, None]
        return log_map(x, y) + (self.model.sign * h) * scale * fld.tangent_flux

    def _objective(self, x: np.ndarray, y: np.ndarray, heads: HeadStack, a: np.ndarray, log_bf: np.ndarray, h: float,
                   fld: MobilityField) -> float:
        dist = geodesic_distance(x, y)
        cost = float(np.sum(a * dist * dist * np.exp(-log_bf)))
        return cost / (2 * h) - self.model.sign * _energy(x, heads, self.model.beta, a, fld)

    # ------------------------------------------------------------------ inner solvers
    def _fixed_point(self, y: np.ndarray, heads: HeadStack, a: np.ndarray, log_bf: np.ndarray | None, h: float,
                     x_start: np.ndarray) -> tuple[np.ndarray, float, int, bool, MobilityField]:
        """Fixed-point iteration; returns ``(x, residual, iterations, converged, field_at_x)``."""
        x = x_start
        fld = self._field(x, heads, a)
        r = self._residual(x, y, fld, log_bf, h)
        res = float(np.max(np.linalg.norm(r, axis=1)))
        first = res
        history = [res]
        it = 0
        while res > self.tol and it < self.max_iter:
            x = exp_map(x, r)
            fld = self._field(x, heads, a)
            r = self._residual(x, y, fld, log_bf, h)
            res = float(np.max(np.linalg.norm(r, axis=1)))
            it += 1
            history.append(res)
            if not math.isfinite(res) or res > 100 * max(first, self.tol):
                return x, res, it, False, fld
            if len(history) > 5 and res > 0.9 * history[-6]:
                return x, res, it, False, fld
        return x, res, it, res <= self.tol, fld

    def _lbfgs(self, y: np.ndarray, heads: HeadStack, a: np.ndarray, log_bf: np.ndarray, h: float,
               x_start: np.ndarray) -> tuple[np.ndarray, float, int, bool, MobilityField]:
        """Riemannian L-BFGS for the frozen-mobility problem; returns like :meth:`_fixed_point`."""
        m = (a * np.exp(-log_bf) / h)[:, None]  # metric weights m_i = a_i / (τ b̂_i)

        def dot(u: np.ndarray, v: np.ndarray) -> float:
            return float(np.sum(m * u * v))

        x = x_start
        fld = self._field(x, heads, a)
        f = self._objective(x, y, heads, a, log_bf, h, fld)
        g = -self._residual(x, y, fld, log_bf, h)
        res = float(np.max(np.linalg.norm(g, axis=1)))
        S: list[np.ndarray] = []
        Y: list[np.ndarray] = []
        it = 0
        while res > self.tol and it < self.max_iter:
            # two-loop recursion
            q = g.copy()
            alphas = []
            for s_vec, y_vec in zip(reversed(S), reversed(Y)):
                rho = 1.0 / dot(y_vec, s_vec)
                alpha = rho * dot(s_vec, q)
                alphas.append((alpha, rho))
                q -= alpha * y_vec
            gamma = dot(S[-1], Y[-1]) / dot(Y[-1], Y[-1]) if S else 1.0
            p = gamma * q
            for (s_vec, y_vec), (alpha, rho) in zip(zip(S, Y), reversed(alphas)):
                beta = rho * dot(y_vec, p)
                p += s_vec * (alpha - beta)
            p = -project_tangent(x, p)
            slope = dot(g, p)
            if not slope < 0:
                p, slope = -g, -dot(g, g)
                S.clear()
                Y.clear()
            # Armijo backtracking on the exponential retraction
            step = 1.0
            accepted = False
            for _ in range(40):
                x_try = exp_map(x, step * p)
                fld_try = self._field(x_try, heads, a)
                f_try = self._objective(x_try, y, heads, a, log_bf, h, fld_try)
                if f_try <= f + 1e-4 * step * slope:
                    accepted = True
                    break
                # near the minimiser the decrease falls below the round-off of F:
                # accept a step that is flat to round-off and lowers the gradient
                if f_try <= f + 1e-13 * (1.0 + abs(f)):
                    g_try = self._residual(x_try, y, fld_try, log_bf, h)
                    if float(np.max(np.linalg.norm(g_try, axis=1))) < res:
                        accepted = True
                        break
                step *= 0.5
            it += 1
            if not accepted:
                break
            g_new = -self._residual(x_try, y, fld_try, log_bf, h)
            s_new = project_tangent(x_try, step * p)
            y_new = g_new - project_tangent(x_try, g)
            S = [project_tangent(x_try, s) for s in S]
            Y = [project_tangent(x_try, v) for v in Y]
            if dot(s_new, y_new) > 1e-14 * dot(s_new, s_new):
                S.append(s_new)
                Y.append(y_new)
                if len(S) > self.memory:
                    S.pop(0)
                    Y.pop(0)
            x, fld, f, g = x_try, fld_try, f_try, g_new
            res = float(np.max(np.linalg.norm(g, axis=1)))
        return x, res, it, res <= self.tol, fld

    # ------------------------------------------------------------------ one step
    def step(self, y: np.ndarray, t0: float, t1: float) -> tuple[np.ndarray, StepReport]:
        """One JKO step from ``y`` at ``t0`` to ``t1``; returns the new tokens and the report."""
        h = t1 - t0
        a = self._a(y.shape[0])
        beta = self.model.beta
        heads1 = self.model.heads.at(t1)
        _check_heads_in_time(self.model, heads1, t1)
        heads0 = self.model.heads.at(t0)
        fld_y = self._cache.get(y, heads1, a)
        log_b0 = fld_y.log_b
        energy_mid = _energy(y, heads1, beta, a, fld_y)
        energy_start = _energy(y, heads0, beta, a, self._cache.get(y, heads0, a) if beta > 0 else None)
        implicit = self.mobility == "implicit"
        method, fallback, iterations, mob_iter = "fixed-point", False, 0, 0
        x, res, converged, fld = y, math.inf, False, fld_y
        if not self.force_lbfgs:
            x, res, iterations, converged, fld = self._fixed_point(y, heads1, a, None if implicit else log_b0, h, y)
            mob_iter = iterations + 1 if implicit else 1
        log_bf = fld.log_b if implicit else log_b0
        if converged:
            # minimality check against the competitor Y (cost 0): F(X) <= F(Y)
            f_x = self._objective(x, y, heads1, a, log_bf, h, fld)
            f_y = -self.model.sign * energy_mid
            if f_x > f_y + 1e-12 * (1.0 + abs(f_y)):
                converged = False
        if not converged:
            fallback, method = not self.force_lbfgs, "lbfgs"
            start = y
            if math.isfinite(res) and x is not y:
                if self._objective(x, y, heads1, a, log_b0, h, fld) < -self.model.sign * energy_mid:
                    start = x
            log_bf = log_b0
            x = start
            frozen_solution: tuple[Any, ...] | None = None
            for _ in range(50 if implicit else 1):
                x, res, it, converged, fld = self._lbfgs(y, heads1, a, log_bf, h, x)
                iterations += it
                mob_iter += 1
                if not implicit:
                    break
                if frozen_solution is None:
                    frozen_solution = (x, res, converged, fld, log_bf)
                implicit_res = float(np.max(np.linalg.norm(self._residual(x, y, fld, None, h), axis=1)))
                converged = implicit_res <= self.tol
                if converged:
                    log_bf, res = fld.log_b, implicit_res
                    break
                log_bf = 0.5 * (log_bf + fld.log_b)  # damped Picard on log b̂
            if implicit and not converged and frozen_solution is not None:
                # the mobility iteration did not settle: keep the frozen-mobility step, and say so
                x, res, converged, fld, log_bf = frozen_solution
                method = "lbfgs-frozen"
        dist = geodesic_distance(x, y)
        transport = float(np.sum(a * dist * dist * np.exp(-log_bf)))
        slope2 = fld.slope_squared(a)
        energy_end = _energy(x, heads1, beta, a, fld)
        key = x.tobytes() + a.tobytes() + heads1.B.tobytes() + heads1.w.tobytes()
        self._cache.put(key, fld)
        report = StepReport(
            t0=t0, t1=t1, iterations=iterations, residual=res, method=method, fallback=fallback,
            mobility_iterations=mob_iter, energy_start=energy_start, energy_mid=energy_mid, energy_end=energy_end,
            transport_cost=transport, slope_squared=slope2, sign=self.model.sign,
        )
        if not math.isfinite(res):
            raise RunFailed(f"JKO step {t0:.6g} -> {t1:.6g} failed: residual {res}")
        return x, report

    def _converged_steps(self, x: np.ndarray, t0: float, t1: float, depth: int) -> tuple[np.ndarray, int]:
        """Advance ``x`` from ``t0`` to ``t1`` by steps that reach ``tol``, halving those that do not;
        returns the tokens and the depth of the last step kept."""
        check()
        x_new, report = self.step(x, t0, t1)
        if report.residual <= self.tol:
            self.log.add(report, self.keep_reports)
            return x_new, depth
        if depth >= self.max_halvings:
            raise RunFailed(
                f"JKO step {t0:.6g} -> {t1:.6g} (tau/2^{depth}) ends at a residual of {report.residual:.3g} rad, above "
                f"solver.tol = {self.tol:g}; a smaller solver.tau or a larger solver.tol may help"
            )
        self.log.reject(report)
        self.halvings += 1
        mid = 0.5 * (t0 + t1)
        x, _ = self._converged_steps(x, t0, mid, depth + 1)
        return self._converged_steps(x, mid, t1, depth + 1)

    def advance(self, state: np.ndarray, t0: float, t1: float) -> np.ndarray:
        """Take ``k = ceil((t1 - t0)/τ)`` equal JKO steps from ``t0`` to exactly ``t1``, each halved until it
        reaches ``tol`` (module docstring)."""
        if t1 <= t0:
            return state
        k = _steps_between(t0, t1, self.tau)
        x = np.asarray(state, dtype=float)
        depth = 0  # each saved interval starts at τ: a resumed run takes the same steps
        for j in range(k):
            s0 = t0 + (t1 - t0) * j / k
            s1 = t1 if j == k - 1 else t0 + (t1 - t0) * (j + 1) / k
            start = max(depth - 1, 0)  # one level coarser than the last step kept
            parts = 2**start
            for i in range(parts):
                u0 = s0 + (s1 - s0) * i / parts
                u1 = s1 if i == parts - 1 else s0 + (s1 - s0) * (i + 1) / parts
                x, depth = self._converged_steps(x, u0, u1, start)
        return x


# ----------------------------------------------------------------------------- grid JKO


class GridJKOStepper:
    r"""Linearised JKO on a spherical Voronoi mesh: implicit upwind two-point fluxes (module docstring).

    Parameters
    ----------
    model : Model
        ``d = 3``, symmetric value-aligned heads.
    mesh : SphericalMesh
    tau : float
    mobility : {"frozen", "implicit"}
    tol : float
        Picard tolerance on :math:`\|m^{(p+1)}-m^{(p)}\|_1` (``implicit``).
    max_iter : int
        Picard iteration cap.
    edge_flux : {"potential", "velocity"}
        Two-point potential differences (default, the gradient-flow structure)
        or the averaged cell-centre pooled velocity of :mod:`meanfield.solvers.grid`.
    max_halvings : int
        Nested step halvings after which the step fails.
    """

    def __init__(
        self,
        model: Model,
        mesh: Any,
        *,
        tau: float,
        mobility: str = "frozen",
        tol: float = 1e-10,
        max_iter: int = 100,
        edge_flux: str = "potential",
        max_halvings: int = 20,
        keep_reports: bool = True,
    ) -> None:
        if model.d != 3:
            raise ValueError(f"the grid JKO works on S² (d = 3), got d={model.d}")
        if not (tau > 0 and math.isfinite(tau)):
            raise ValueError(f"tau must be positive and finite, got {tau!r}")
        if mobility not in MOBILITIES:
            raise ValueError(f"mobility must be one of {MOBILITIES}, got {mobility!r}")
        if edge_flux not in EDGE_FLUXES:
            raise ValueError(f"edge_flux must be 'potential' or 'velocity', got {edge_flux!r}")
        check_tol(tol)
        check_gradient_structure(model)
        self.model = model
        self.mesh = mesh
        self.tau = float(tau)
        self.mobility = mobility
        self.tol = float(tol)
        self.max_iter = check_int("max_iter", max_iter, minimum=1)
        self.edge_flux = edge_flux
        self.max_halvings = check_int("max_halvings", max_halvings, minimum=0)
        self.keep_reports = keep_reports
        self.log = _ReportLog()
        self._cache = _FieldCache(model.beta)
        self.halvings = 0
        self.min_mass = math.inf
        i, j = mesh.edges[:, 0], mesh.edges[:, 1]
        self._i, self._j = i, j
        N = mesh.N
        # sparsity pattern of A: diagonal entries and both off-diagonals of every edge
        self._rows = np.concatenate([i, j, j, i])
        self._cols = np.concatenate([i, i, j, j])
        self._N = N

    @property
    def reports(self) -> list[StepReport]:
        return self.log.reports

    @property
    def stats(self) -> dict[str, Any]:
        return dict(self.log.stats, solver="jko", variant="grid", tau=self.tau, mobility=self.mobility,
                    cells=self.mesh.N, halvings=self.halvings, min_mass=self.min_mass, edge_flux=self.edge_flux)

    # ------------------------------------------------------------------ operator
    def field(self, mass: np.ndarray, t: float) -> tuple[MobilityField, HeadStack]:
        heads = self.model.heads.at(t)
        return self._cache.get(self.mesh.points, heads, np.asarray(mass, dtype=float)), heads

    def potential(self, mass: np.ndarray, fld: MobilityField, heads: HeadStack) -> np.ndarray:
        r""":math:`\phi_c=\partial E/\partial m_c=\frac1\beta\sum_hw_hZ_h(x_c)` (:math:`\beta=0`: :math:`\sum_hw_hx_c^\top B_h\bar y`)."""
        if self.model.beta > 0:
            return np.exp(-fld.log_b) / self.model.beta
        mean = mass @ self.mesh.points
        return np.einsum("h,ck,hkl,l->c", heads.w, self.mesh.points, heads.B, mean)

    def edge_velocity(self, mass: np.ndarray, fld: MobilityField, heads: HeadStack) -> np.ndarray:
        r"""Normal velocity :math:`u_{ij}` on every edge, oriented from ``i`` to ``j``, shape ``(E,)``."""
        sign = self.model.sign
        if self.edge_flux == "velocity":
            vel = sign * project_tangent(self.mesh.points, fld.flux)
            return 0.5 * np.einsum("ek,ek->e", vel[self._i] + vel[self._j], self.mesh.edge_normals)
        phi = self.potential(mass, fld, heads)
        b = np.exp(fld.log_b)
        b_edge = 0.5 * (b[self._i] + b[self._j])
        return sign * b_edge * (phi[self._j] - phi[self._i]) / self.mesh.generator_distances

    def matrix(self, u: np.ndarray, h: float) -> sp.csc_matrix:
        r""":math:`I+hA(u)` in masses (unit column sums, M-matrix)."""
        q = self.mesh.edge_lengths * u
        qp, qm = np.maximum(q, 0.0), np.maximum(-q, 0.0)
        Ai, Aj = self.mesh.areas[self._i], self.mesh.areas[self._j]
        vals = np.concatenate([qp / Ai, -qp / Ai, qm / Aj, -qm / Aj]) * h
        A = sp.coo_matrix((vals, (self._rows, self._cols)), shape=(self._N, self._N)).tocsc()
        return (sp.identity(self._N, format="csc") + A).tocsc()

    def _solve(self, u: np.ndarray, h: float, rhs: np.ndarray) -> tuple[np.ndarray, float]:
        M = self.matrix(u, h)
        m = splu(M).solve(rhs)
        return m, float(np.sum(np.abs(M @ m - rhs)))

    def action(self, mass: np.ndarray, u: np.ndarray, b: np.ndarray) -> float:
        r"""Two-point Benamou–Brenier action :math:`\sum_e\ell_ed_e\rho_{\rm up}u_e^2/\hat b_e` (per unit time²)."""
        rho = mass / self.mesh.areas
        up = np.where(u > 0, rho[self._i], rho[self._j])
        b_edge = 0.5 * (b[self._i] + b[self._j])
        return float(np.sum(self.mesh.edge_lengths * self.mesh.generator_distances * up * u * u / b_edge))

    def energy(self, mass: np.ndarray, fld: MobilityField, heads: HeadStack) -> float:
        return _energy(self.mesh.points, heads, self.model.beta, mass, fld)

    # ------------------------------------------------------------------ step
    def _attempt(self, m0: np.ndarray, u0: np.ndarray, t1: float, h: float) -> tuple[np.ndarray, float, int, bool]:
        """One linearised step from ``m0``, with the implicit mobility its Picard iteration: ``(m, residual, iterations,
        settled)``, settled when the last Picard change is within ``tol`` and the linear solve's residual within
        :data:`LINEAR_SOLVE_FLOOR` (the frozen mobility: always)."""
        m, lin = self._solve(u0, h, m0)
        iterations, res, u = 1, lin, u0
        change = math.inf
        if self.mobility == "implicit":
            for _ in range(self.max_iter):
                if np.any(m < 0) or not np.all(np.isfinite(m)):
                    res = math.inf  # round-off negative iterate: the caller halves the step
                    break
                fld, heads = self.field(m, t1)
                u = self.edge_velocity(m, fld, heads)
                m_new, lin = self._solve(u, h, m0)
                iterations += 1
                change = float(np.sum(np.abs(m_new - m)))
                m = m_new
                res = change + lin
                if change <= self.tol:
                    break
        settled = self.mobility == "frozen" or (change <= self.tol and lin <= LINEAR_SOLVE_FLOOR)
        return m, res, iterations, settled

    def _substep(self, m0: np.ndarray, t0: float, t1: float, depth: int) -> tuple[np.ndarray, int, float, int]:
        """Advance ``m0`` over ``[t0, t1]``, halving on a negative cell; returns ``(m, iterations, residual, halvings)``."""
        fld, heads = self.field(m0, t1)
        u0 = self.edge_velocity(m0, fld, heads)
        m, res, its, settled = self._attempt(m0, u0, t1, t1 - t0)
        # the Picard change against tol, the linear solve against its round-off: a stalled Picard loop had been
        # accepted at tol + 1e-12 (60× a tol of 1e-14)
        if np.all(m >= 0) and np.all(np.isfinite(m)) and settled:
            return m, its, res, 0
        if depth >= self.max_halvings:
            raise RunFailed(f"grid JKO step {t0:.6g} -> {t1:.6g}: negative mass or no convergence after {depth} halvings")
        mid = 0.5 * (t0 + t1)
        m1, i1, r1, k1 = self._substep(m0, t0, mid, depth + 1)
        m2, i2, r2, k2 = self._substep(m1, mid, t1, depth + 1)
        return m2, its + i1 + i2, max(r1, r2), 1 + k1 + k2

    def step(self, m0: np.ndarray, t0: float, t1: float) -> tuple[np.ndarray, StepReport]:
        _check_heads_in_time(self.model, self.model.heads.at(t1), t1)
        h = t1 - t0
        fld0_t0, heads0 = self.field(m0, t0)
        energy_start = self.energy(m0, fld0_t0, heads0)
        fld0, heads1 = self.field(m0, t1)
        energy_mid = self.energy(m0, fld0, heads1)
        m, its, res, halvings = self._substep(m0, t0, t1, 0)
        self.halvings += halvings
        self.min_mass = min(self.min_mass, float(m.min()))
        fld1, _ = self.field(m, t1)
        energy_end = self.energy(m, fld1, heads1)
        b1 = np.exp(fld1.log_b)
        u1 = self.edge_velocity(m, fld1, heads1)
        if self.mobility == "implicit":
            transport = h * h * self.action(m, u1, b1)
        else:
            u0 = self.edge_velocity(m0, fld0, heads1)
            transport = h * h * self.action(m, u0, np.exp(fld0.log_b))
        slope2 = self.action(m, u1, b1)  # = Σ ℓ d ρ_up b̂ (Δφ/d)² for edge_flux="potential"
        report = StepReport(
            t0=t0, t1=t1, iterations=its, residual=res, method="upwind-implicit", fallback=halvings > 0,
            mobility_iterations=its, energy_start=energy_start, energy_mid=energy_mid, energy_end=energy_end,
            transport_cost=transport, slope_squared=slope2, sign=self.model.sign,
        )
        return m, report

    def advance(self, state: np.ndarray, t0: float, t1: float) -> np.ndarray:
        """Take ``k = ceil((t1 - t0)/τ)`` equal linearised JKO steps from ``t0`` to exactly ``t1``."""
        if t1 <= t0:
            return state
        k = _steps_between(t0, t1, self.tau)
        m = np.asarray(state, dtype=float)
        for j in range(k):
            check()
            s0 = t0 + (t1 - t0) * j / k
            s1 = t1 if j == k - 1 else t0 + (t1 - t0) * (j + 1) / k
            m, report = self.step(m, s0, s1)
            self.log.add(report, self.keep_reports)
        return m


# ----------------------------------------------------------------------------- trackers


@dataclass
class JKOTracker:
    """Per saved frame: the JKO steps taken since the previous frame.

    Keys: ``jko_steps``, ``jko_iterations`` (sum), ``jko_residual`` (max),
    ``jko_fallbacks``, ``jko_margin`` (min of :attr:`StepReport.dissipation_margin`),
    and the energy–dissipation terms ``edi_energy_change``, ``edi_time``,
    ``edi_transport``, ``edi_slope``, ``edi_residual`` summed over those steps
    (cumulative sums give the balance of the whole run).  At the first frame
    the sums are 0 and the residual/margin NaN.
    """

    stepper: Any
    name: str = "jko"

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:  # noqa: ARG002
        reports = self.stepper.log.take()
        out = {
            "jko_steps": float(len(reports)),
            "jko_iterations": float(sum(r.iterations for r in reports)),
            "jko_residual": max((r.residual for r in reports), default=math.nan),
            "jko_fallbacks": float(sum(r.fallback for r in reports)),
            "jko_margin": min((r.dissipation_margin for r in reports), default=math.nan),
        }
        totals = dict.fromkeys(("edi_energy_change", "edi_time", "edi_transport", "edi_slope", "edi_residual"), 0.0)
        for r in reports:
            for key, value in r.edi_terms().items():
                totals[key] += value
        out.update(totals)
        return out


@dataclass
class EnergyDissipationTracker:
    r"""Instantaneous terms of Massucco et al.'s (arXiv 2605.18870) energy–dissipation identity for any run of the model.

    Keys: ``energy_theta`` (:math:`E(\mu_t,t)`), ``slope2`` (:math:`|\partial E|^2`),
    ``metric_speed2`` (:math:`|\dot\mu|_m^2=\int\|\dot x\|^2/\hat b\,d\mu`, with the
    model's own velocity: the attention kernel's, whose tangent part keeps the round-off of a token's own term, about
    :math:`10^{-16}e^{\beta(1-\cos\theta)}` of it for the nearest atom at angle :math:`\theta`, where ``slope2``
    projects that term apart), ``dE_dt_explicit`` (:math:`\partial_tE`) and
    ``authors_G2`` (:func:`meanfield.analysis.mobility.authors_slope_squared`).  For the
    pooled flow :math:`|\dot\mu|_m^2=|\partial E|^2` and
    :math:`\tfrac{d}{dt}E=|\partial E|^2+\partial_tE` (ascent).

    Parameters
    ----------
    model : Model
    mesh : SphericalMesh, optional
        For grid states (cell masses); default: particle states.
    weights : (n,) array, optional
        Particle masses.
    """

    model: Model
    mesh: Any = None
    weights: np.ndarray | None = None
    name: str = "edi"

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:
        heads = self.model.heads.at(t)
        beta = self.model.beta
        if self.mesh is None:
            x = np.asarray(state, dtype=float)
            a = np.full(x.shape[0], 1.0 / x.shape[0]) if self.weights is None else self.weights
        else:
            x, a = self.mesh.points, np.asarray(state, dtype=float)
        with np.errstate(over="ignore"):
            fld = mobility_field(x, heads, beta=beta, weights=a)
            slope2 = fld.slope_squared(a)
            speed2 = fld.metric_speed_squared(self.model.velocity(x, t, weights=a), a)
            dB, _ = schedule_derivative(self.model.heads, t)
            dEdt = energy_time_derivative(x, heads, dB, beta=beta, weights=a)
            g2 = authors_slope_squared(x, heads, beta=beta, weights=a)
            energy = _energy(x, heads, beta, a, fld)
        return {"energy_theta": energy, "slope2": slope2, "metric_speed2": speed2, "dE_dt_explicit": dEdt, "authors_G2": g2}


# ----------------------------------------------------------------------------- drivers


@dataclass(frozen=True, kw_only=True)
class JKOSolver:
    r"""Numerical options of the JKO scheme (minimizing movements in the weighted Wasserstein metric).

    .. math::

        \mu_{k+1}\in\arg\min_\mu\ \frac{W_{m,2}^2(\mu,\mu_k)}{2\tau} - \sigma E(\mu, t_{k+1})

    Tokens when the problem holds tokens, the linearised grid step when it holds a
    density on a mesh.  The model must have symmetric value-aligned heads; the
    scheme is the gradient flow whose PDE is the ``pooled`` kind.

    Parameters
    ----------
    tau : float
        Largest step :math:`\tau`: each save interval :math:`\Delta t` is cut into :math:`\lceil\Delta t/\tau\rceil` equal
        steps (``tau = 0.03`` with frames every 0.1 takes steps of 0.025).
    mobility : {"frozen", "implicit"}
        Mobility frozen at :math:`\mu_k` (``"frozen"``), or iterated to the new measure (``"implicit"``).
    tol : float
        Inner-solver tolerance.
    keep_reports : bool
        Keep every step's :class:`StepReport` in ``run.info["reports"]``.
    options : dict
        Passed to the stepper, checked when the solver is made: ``max_iter`` (an integer ≥ 1), ``max_halvings`` (≥ 0),
        and for tokens ``memory`` (≥ 1) and ``force_lbfgs`` (a bool), for a grid density ``edge_flux``
        (``"potential"`` or ``"velocity"``); an option of the other variant is refused when the run starts.

    Examples
    --------
    >>> import numpy as np
    >>> import meanfield as mf
    >>> pooled = mf.Model(d=3, beta=4.0, attention="pooled", heads=mf.heads.identity(3))
    >>> run = mf.solve(mf.Problem(pooled, mf.sample_uniform(32, 3, seed=0)), mf.JKOSolver(tau=0.05), t_final=0.2)
    >>> len(run.info["reports"]), bool(run.diagnostics["energy"][-1] > run.diagnostics["energy"][0])  # 4 steps, E rises
    (4, True)
    """

    tau: float = 0.05
    mobility: str = "frozen"
    tol: float = 1e-10
    keep_reports: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)
    kind: ClassVar[str] = "jko"

    def __post_init__(self) -> None:
        """The options checked where they are given (``tau=0`` had been refused only inside :func:`meanfield.solve`);
        they are keyword-only, so that ``JKOSolver("implicit")``, a mobility taken for the step, is refused by Python."""
        check_positive(tau=self.tau)
        if self.mobility not in MOBILITIES:
            raise ValueError(f"mobility must be one of {MOBILITIES}, got {self.mobility!r}")
        check_tol(self.tol)  # the config's bounds (tol=1e-16 had run ten halvings for 14 s before failing)
        if not isinstance(self.keep_reports, (bool, np.bool_)):  # ("False", a string, had kept them)
            raise TypeError(f"keep_reports must be True or False, got {self.keep_reports!r}")
        if not isinstance(self.options, Mapping):
            raise TypeError(f"options must be a mapping of the steppers' keywords, got {type(self.options).__name__}")
        given_apart = {"tau", "mobility", "tol", "keep_reports", "weights"}  # (the solver's own, and the problem's)
        known = {name for stepper in (ParticleJKOStepper, GridJKOStepper)
                 for name, p in inspect.signature(stepper).parameters.items() if p.kind is p.KEYWORD_ONLY} - given_apart
        unknown = sorted(set(self.options) - known)
        if unknown:  # (they had been refused at solve(), as the steppers' unexpected keywords, options not named)
            raise ValueError(f"options: unknown {', '.join(map(repr, unknown))}; the steppers take {', '.join(sorted(known))}")
        # the values too (max_iter = 0 had failed the run blaming solver.tau, force_lbfgs = "False" had switched it on,
        # max_iter = 2.7 had been cut to 2)
        for name, minimum in (("max_iter", 1), ("max_halvings", 0), ("memory", 1)):
            if name in self.options:
                check_int(f"options[{name!r}]", self.options[name], minimum=minimum)
        if "force_lbfgs" in self.options:
            check_flag("options['force_lbfgs']", self.options["force_lbfgs"])
        if "edge_flux" in self.options and self.options["edge_flux"] not in EDGE_FLUXES:
            raise ValueError(f"options['edge_flux'] must be one of {EDGE_FLUXES}, got {self.options['edge_flux']!r}")
        # a copy of its own: the caller's dict changed later had changed the checked solver (options={"max_iter": 0}
        # got past the checks as options.update(...)), and the dict had made the frozen solver unhashable
        object.__setattr__(self, "options", dict(self.options))

    def __hash__(self) -> int:
        return hash((self.tau, self.mobility, self.tol, self.keep_reports, tuple(sorted(self.options.items()))))

    def _check_variant(self, on_grid: bool) -> None:
        """Refuse the options of the other variant (``edge_flux`` with tokens, ``memory`` with a grid density): they
        had failed at :func:`meanfield.solve` as Python's bare ``TypeError`` of an unexpected keyword."""
        stepper = GridJKOStepper if on_grid else ParticleJKOStepper
        own = {name for name, p in inspect.signature(stepper).parameters.items() if p.kind is p.KEYWORD_ONLY}
        foreign = sorted(set(self.options) - own)
        if foreign:
            raise ValueError(f"options: {', '.join(map(repr, foreign))} {'is an option' if len(foreign) == 1 else 'are options'} "
                             f"of the {'particle' if on_grid else 'grid'} JKO scheme; this problem holds "
                             f"{'a grid density' if on_grid else 'tokens'}")

    def setup(self, problem: Any, *, energy: bool = True, speed: bool = True, steady_tol: float = 0.0) -> RunSetup:  # noqa: ARG002
        """Stepper and trackers: the JKO step reports, finite values and the sphere (tokens) or the mass (grid), energies."""
        model = problem.model
        _check_model(model)
        check_mask(model.mask, "jko", on_grid=problem.on_grid)  # a causal mask: refused here, as by the config
        self._check_variant(problem.on_grid)
        if not problem.on_grid:
            stepper: Any = ParticleJKOStepper(model, tau=self.tau, mobility=self.mobility, tol=self.tol, weights=problem.weights,
                                              keep_reports=self.keep_reports, **self.options)
            trackers: list[Tracker] = [FiniteTracker(), SphereTracker(), JKOTracker(stepper)]
            if energy:
                trackers += [EnergyTracker(model, weights=problem.weights), EnergyDissipationTracker(model, weights=problem.weights)]
            # the token masses travel with the run, as the particle solver's (they had been dropped: run.token_masses None)
            state_name, static = "x", {} if problem.weights is None else {TOKEN_MASSES: problem.weights}
        else:
            from meanfield.solvers.grid import GridEnergyTracker, MassTracker

            stepper = GridJKOStepper(model, problem.mesh, tau=self.tau, mobility=self.mobility, tol=self.tol,
                                     keep_reports=self.keep_reports, **self.options)
            trackers = [MassTracker(total=float(problem.initial.sum())), JKOTracker(stepper)]
            if energy:
                trackers += [GridEnergyTracker(model, problem.mesh), EnergyDissipationTracker(model, mesh=problem.mesh)]
            state_name = "mass"
            static = {"points": np.array(problem.mesh.points), "areas": np.array(problem.mesh.areas)}

        def info() -> dict[str, Any]:
            out = dict(stepper.stats)
            if self.keep_reports:
                out["reports"] = stepper.reports
            return out

        return RunSetup(model, stepper, problem.initial, state_name, static, trackers, info=info)


#: the largest β·max_h‖B_h‖_op the JKO scheme takes: e^{this} is the largest float (its energies and mobilities are
#: floats); the config refuses the same (``meanfield.config``), this is the check of :func:`meanfield.solve`
JKO_MAX_EXPONENT = EXP_OVERFLOW


def _check_model(model: Model) -> None:
    try:
        check_gradient_structure(model)
    except ValueError as exc:
        raise ConfigError("model.heads", str(exc)) from None
    if model.attention != "pooled" and not (model.attention == "softmax" and model.heads.at(0.0).H == 1):
        raise ConfigError(
            "model.attention",
            f"the JKO scheme is the gradient flow whose PDE is the 'pooled' kind (Massucco et al., arXiv 2605.18870); "
            f"got {model.attention!r} (softmax is accepted only with one head, where it coincides with pooled)",
        )
    exponent = unshifted_exponent(model.beta, model.heads.at(0.0).B)  # (the config's check of the same, for mf.solve)
    if exponent > JKO_MAX_EXPONENT:  # the step's objective and metric, and its energies, had been inf or nan
        raise ConfigError(
            "model.beta",
            f"β·max‖B_h‖ = {exponent:.4g} at t = 0: the JKO scheme works with the energy and the mobility "
            f"1/b̂ as floats, which grow like e^(β⟨x, By⟩) and pass the largest float from β·max‖B_h‖ ≈ "
            f"{JKO_MAX_EXPONENT:.0f}; run this temperature with solver.kind = \"particle\" (its velocity is the same "
            f"pooled flow, in log scale)",
        )


def solver_from_config(cfg: dict[str, Any]) -> JKOSolver:
    """The :class:`JKOSolver` of a resolved config (``solver.tau``, ``mobility``, ``tol``)."""
    solver = cfg["solver"]
    return JKOSolver(tau=solver["tau"], mobility=solver["mobility"], tol=solver["tol"], keep_reports=False)
