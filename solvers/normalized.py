r"""Particle solver for the normalisation schemes of Karagodin, Ge, Polyanskiy and Rigollet (arXiv 2510.22026).

.. math::

    \dot\theta_k = s_k\,P^\perp_{\theta_k}A_k,\qquad \dot r_k = \rho_k,\qquad x_k = r_k\theta_k

with the speeds :math:`s_k` and radial laws :math:`\rho_k` of :mod:`meanfield.normalization`
(Post-LN, Pre-LN, Peri-LN, nGPT).  The state the solver integrates holds what the scheme
needs: the directions :math:`\theta` (n, d) for ``"post"`` and ``"ngpt"``, the directions and the
radii :math:`(\theta, r)` (n, d + 1) for ``"pre"`` and ``"peri"``, advanced together by a
registered Runge–Kutta scheme (:mod:`meanfield.solvers.integrators`) whose stage points put
:math:`\theta` back on the sphere and leave :math:`r` alone.

Frames (the HDF5 dataset ``x``, (T, n, d)) hold the tokens: unit vectors for ``"post"``
and ``"ngpt"``, the unnormalised tokens :math:`x_k=r_k\theta_k` of the residual stream for
``"pre"`` and ``"peri"`` (so :math:`r_k=\|x_k\|`, :math:`\theta_k=x_k/\|x_k\|`; no other dataset).

Reached through :class:`meanfield.solvers.particle.ParticleSolver` with ``norm`` set (config
``model.norm``); ``norm="post"`` stays the sphere model of :class:`~meanfield.solvers.particle.ParticleStepper`.

Examples
--------
>>> import meanfield as mf
>>> problem = mf.Problem(mf.Model(d=3, beta=1.0), mf.sample_uniform(16, 3, seed=0))
>>> run = mf.solve(problem, NormalizedSolver(norm="pre", dt=0.05), t_final=1.0)
>>> bool(run.final[0] @ run.final[0] > 1.0)  # the radius has grown
True
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from meanfield.errors import RunFailed
from meanfield.geometry.sphere import normalize
from meanfield.io.token_masses import TOKEN_MASSES
from meanfield.normalization import DEFAULT_NGPT_ALPHA, NormalizedDynamics, check_norm_options, polar
from meanfield.solvers.loop import RunSetup, StopRun, Tracker
from meanfield.solvers.particle_stepper import ParticleStepper, check_step_options
from meanfield.solvers.trackers import EnergyTracker, FiniteTracker, SphereTracker, SteadyStateTracker

__all__ = ["NormalizedStepper", "NormalizedSolver", "RadiusTracker", "DirectionsTracker"]


def _retract_polar(y: np.ndarray) -> np.ndarray:
    """Stage points of ``(θ, r)``: θ back on the sphere, r unchanged."""
    out = np.empty_like(y)
    out[:, :-1] = normalize(y[:, :-1])
    out[:, -1] = y[:, -1]
    return out


class NormalizedStepper(ParticleStepper):
    """Advances the tokens of one normalisation scheme between save times.

    Parameters
    ----------
    dynamics : NormalizedDynamics
        The model and the scheme.
    method : {"euler", "heun", "rk4", "rk45"}
    dt : float
        Step (fixed schemes: the largest step that divides the save interval evenly;
        ``rk45``: the first trial step of each interval).
    rtol, atol : float
        Error control of ``rk45`` (on θ and r together).
    weights : (n,) array, optional
        Token masses (default uniform).
    """

    def __init__(
        self,
        dynamics: NormalizedDynamics,
        *,
        method: str = "rk4",
        dt: float = 0.01,
        rtol: float = 1e-8,
        atol: float = 1e-10,
        weights: np.ndarray | None = None,
    ) -> None:
        super().__init__(dynamics.model, method=method, dt=dt, rtol=rtol, atol=atol, weights=weights)
        self.dynamics = dynamics

    shares_row_logs = False  # the field of (θ, r), not the model's velocity

    def evaluate(self, y: np.ndarray, t: float) -> np.ndarray:
        """The integrated field: :math:`\\dot\\theta` (n, d), or :math:`(\\dot\\theta, \\dot r)` (n, d + 1) for a radial scheme."""
        self.stats["evaluations"] += 1
        if not self.dynamics.radial:
            return self.dynamics.velocity(y, np.ones(y.shape[0]), t, weights=self.weights)[0]
        theta_dot, r_dot = self.dynamics.velocity(y[:, :-1], y[:, -1], t, weights=self.weights)
        return np.concatenate([theta_dot, r_dot[:, None]], axis=1)

    def direction_velocity(self, x: np.ndarray, t: float) -> np.ndarray:
        r""":math:`\dot\theta` of the stored tokens ``x`` (what ``max_speed`` records)."""
        return self.dynamics.direction_velocity(x, t, weights=self.weights)

    def advance(self, state: np.ndarray, t0: float, t1: float) -> np.ndarray:
        """Integrate the tokens ``state`` (n, d) from ``t0`` to exactly ``t1``."""
        if t1 <= t0:
            return state
        pieces = getattr(self.model.heads, "pieces", None)
        if pieces is not None:  # piecewise-constant heads (weights.schedule = "layers"): no step crosses a switch
            return self._advance_pieces(state, pieces(t0, t1))
        if self.dynamics.radial:
            theta, r = polar(state)
            y = np.concatenate([theta, r[:, None]], axis=1)
            retract = _retract_polar
        else:
            y, retract = state, normalize
        y = self.integrate_between_bends(y, t0, t1, retract=retract)
        if not self.dynamics.radial:
            return y
        if not np.all(y[:, -1] > 0):
            raise RunFailed(f"a radius reached {float(np.min(y[:, -1])):.3g} <= 0 before t={t1:.6g}: the token went through the "
                            "origin, where its direction is undefined (attention pointing against the tokens, e.g. V = -I)")
        return y[:, -1:] * y[:, :-1]

    def _advance_pieces(self, x: np.ndarray, pieces: list[tuple[float, float, Any]]) -> np.ndarray:
        """Integrate each piece ``(a, b, heads)`` with the heads held constant on it (every RK stage sees them)."""
        dynamics = self.dynamics
        try:
            for a, b, heads in pieces:
                self.dynamics = replace(dynamics, model=replace(dynamics.model, heads=heads))
                self.model = self.dynamics.model
                x = self.advance(x, a, b)
        finally:
            self.dynamics, self.model = dynamics, dynamics.model
        return x


@dataclass
class RadiusTracker:
    r"""Records the radii :math:`r_k=\|x_k\|` of Pre-LN and Peri-LN tokens: ``r_min``, ``r_mean``, ``r_max``.

    Stops the run as failed when a radius is not positive (the direction is undefined there);
    it takes the place of the sphere-constraint tracker, which the radial tokens do not obey.
    """

    name: str = "radius"

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:
        r = np.sqrt(np.einsum("ij,ij->i", state, state))
        if not np.all(r > 0):
            raise StopRun(f"a token reached the origin at t={t:.6g} (min r = {float(np.min(r)):.3g})", bad_state=True)
        return {"r_min": float(r.min()), "r_mean": float(r.mean()), "r_max": float(r.max())}


@dataclass
class DirectionsTracker:
    r"""Runs ``tracker`` on the directions :math:`\theta_k=x_k/\|x_k\|` of radial tokens (e.g. the energies of :math:`\theta`)."""

    tracker: Any
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or getattr(self.tracker, "name", "directions")

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float] | None:
        return self.tracker(t, polar(state)[0])


@dataclass(frozen=True)
class NormalizedSolver:
    """Numerical options of the particle solver of one normalisation scheme.

    Parameters
    ----------
    norm : {"post", "pre", "peri", "ngpt"}
        The scheme (:mod:`meanfield.normalization`).
    ngpt_alpha : float
        nGPT's step :math:`\\alpha>0` (default 0.2; refused with another scheme).
    method : {"euler", "heun", "rk4", "rk45"}
        Runge–Kutta scheme; stage points put the directions back on the sphere.
    dt : float
        Step (fixed schemes) or first trial step (``rk45``).
    rtol, atol : float
        Error control of ``rk45``.

    Raises
    ------
    ValueError
        An unknown ``norm`` or ``method``; ``ngpt_alpha``, ``dt``, ``rtol`` or ``atol`` not a positive finite number;
        ``ngpt_alpha`` with a ``norm`` other than ``"ngpt"``.
    """

    norm: str = "pre"
    ngpt_alpha: float = DEFAULT_NGPT_ALPHA
    method: str = "rk4"
    dt: float = 0.01
    rtol: float = 1e-8
    atol: float = 1e-10
    kind: ClassVar[str] = "particle"

    def __post_init__(self) -> None:  # when it is made, as ParticleSolver (norm="foo" had been found only when the run started)
        check_norm_options(norm=self.norm, ngpt_alpha=self.ngpt_alpha)
        check_step_options(method=self.method, dt=self.dt, rtol=self.rtol, atol=self.atol)

    def stepper(self, problem: Any) -> NormalizedStepper:
        """The :class:`NormalizedStepper` of ``problem`` under this scheme."""
        dynamics = NormalizedDynamics(problem.model, norm=self.norm, alpha=self.ngpt_alpha)
        return NormalizedStepper(dynamics, method=self.method, dt=self.dt, rtol=self.rtol, atol=self.atol, weights=problem.weights)

    def setup(self, problem: Any, *, energy: bool = True, speed: bool = True, steady_tol: float = 0.0) -> RunSetup:
        """Stepper and trackers: finite values, the sphere (post, ngpt) or the radii (pre, peri), the energies of the directions, the largest direction speed."""
        if problem.on_grid:
            raise ValueError("the particle solver takes tokens; this problem holds a grid density (use GridSolver)")
        stepper = self.stepper(problem)
        radial = stepper.dynamics.radial
        if radial and steady_tol > 0:  # the test had read θ̇ alone: "steady state" while the radii grew at ṙ ≈ 1
            raise ValueError(f"steady_tol = {steady_tol:g} with norm={self.norm!r}: its tokens (ẋ = {'A' if self.norm == 'pre' else 'A/‖A‖'}) "
                             "keep moving once their directions have settled, their radii growing, so the speed test would stop "
                             "a run that is not at rest (use 0 and a t_final)")
        trackers: list[Tracker] = [FiniteTracker(), RadiusTracker() if radial else SphereTracker()]
        if energy:
            tracker = EnergyTracker(problem.model, weights=problem.weights)
            trackers.append(DirectionsTracker(tracker) if radial else tracker)
        if speed:
            # a fixed step that turns the directions too far is warned of, as under norm = "post" (pre and peri had been silent)
            trackers.append(SteadyStateTracker(stepper.direction_velocity, tol=steady_tol,
                                               step=None if self.method == "rk45" else self.dt, taken=stepper.taken_step))
        # the token masses travel with the run, as the particle solver's (they had been dropped: run.token_masses None
        # beside the weighted energy); the scheme too (a run of mf.solve has no config that says it)
        static = {} if problem.weights is None else {TOKEN_MASSES: problem.weights}
        return RunSetup(problem.model, stepper, problem.initial, "x", static, trackers, info=lambda: dict(stepper.stats, norm=self.norm))
