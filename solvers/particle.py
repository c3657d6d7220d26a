r"""Particle solver for :math:`\dot x_i=\sigma P^\perp_{x_i}v_i`.

.. math::

    \dot x_i = \sigma\,P^\perp_{x_i}\, v_i(x_1,\dots,x_n; t), \qquad x_i\in S^{d-1}

integrated by a registered Runge–Kutta scheme (:mod:`meanfield.solvers.integrators`)
with stage points put back on the sphere.

Run it with :func:`meanfield.solve` and :class:`ParticleSolver`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from meanfield.model import Model
from meanfield.geometry.sphere import normalize
from meanfield.solvers.integrators import DormandPrince, from_name
from meanfield.solvers.signals import check
from meanfield.solvers.loop import RunSetup, Tracker
from meanfield.noise import NoiseSchedule
from meanfield.solvers.noise import NoisyParticleStepper
from meanfield.solvers.trackers import EnergyTracker, FiniteTracker, SphereTracker, SteadyStateTracker
from meanfield.solvers.normalized import NormalizedSolver

__all__ = ["ParticleStepper", "ParticleSolver"]


class ParticleStepper:
    """Advances a token cloud between save times with a fixed or adaptive RK scheme.

    Parameters
    ----------
    model : Model
    method : {"euler", "heun", "rk4", "rk45"}
    dt : float
        Step (fixed schemes: the largest step that divides the save interval
        evenly is used; ``rk45``: the first trial step of each interval).
    rtol, atol : float
        Error control of ``rk45``.
    weights : (n,) array, optional
        Token masses (default uniform).
    """

    def __init__(
        self,
        model: Model,
        *,
        method: str = "rk4",
        dt: float = 0.01,
        rtol: float = 1e-8,
        atol: float = 1e-10,
        weights: np.ndarray | None = None,
    ) -> None:
        if dt <= 0 or not math.isfinite(dt):
            raise ValueError(f"dt must be positive and finite, got {dt}")
        self.model = model
        self.scheme = from_name(method)
        self.dt = float(dt)
        self.rtol = float(rtol)
        self.atol = float(atol)
        self.weights = weights
        self.stats: dict[str, int] = {"steps": 0, "rejected": 0, "evaluations": 0}
        self._last: tuple[Any, float, np.ndarray, np.ndarray] | None = None

    def field(self, x: np.ndarray, t: float) -> np.ndarray:
        """The velocity at ``(x, t)``; the last evaluation is kept, so the speed tracker's call on a
        saved frame and the next step's first stage (the same tokens, time and model) cost one kernel call."""
        last = self._last
        if last is not None and last[0] is self.model and last[1] == t and last[2].shape == x.shape and np.array_equal(last[2], x):
            return last[3].copy()
        self.stats["evaluations"] += 1
        v = self.model.velocity(x, t, weights=self.weights)
        self._last = (self.model, t, np.array(x, copy=True), v.copy())
        return v

    def advance(self, state: np.ndarray, t0: float, t1: float) -> np.ndarray:
        """Integrate from ``t0`` to exactly ``t1``."""
        if t1 <= t0:
            return state
        pieces = getattr(getattr(self.model, "heads", None), "pieces", None)  # (the zero-temperature field has no heads)
        if pieces is not None:  # piecewise-constant heads (weights.schedule = "layers"): no step crosses a switch
            return self._advance_pieces(state, pieces(t0, t1))
        x = state
        if isinstance(self.scheme, DormandPrince):
            x, counts = self.scheme.integrate(
                self.field, x, t0, t1, h0=self.dt, retract=normalize, rtol=self.rtol, atol=self.atol
            )
            self.stats["steps"] += counts["accepted"]
            self.stats["rejected"] += counts["rejected"]
            return x
        steps = max(1, math.ceil((t1 - t0) / self.dt - 1e-9))
        h = (t1 - t0) / steps
        for k in range(steps):
            check()
            x = self.scheme.step(self.field, x, t0 + k * h, h, retract=normalize)
        self.stats["steps"] += steps
        return x

    def _advance_pieces(self, x: np.ndarray, pieces: list[tuple[float, float, Any]]) -> np.ndarray:
        """Integrate each piece ``(a, b, heads)`` with the heads held constant on it (every RK stage sees them)."""
        model = self.model
        try:
            for a, b, heads in pieces:
                self.model = replace(model, heads=heads)
                x = self.advance(x, a, b)
        finally:
            self.model = model
        return x


@dataclass(frozen=True)
class ParticleSolver:
    """Numerical options of the particle solver (tokens integrated on the sphere).

    Parameters
    ----------
    method : {"euler", "heun", "rk4", "rk45"}
        Runge–Kutta scheme; every stage point is put back on the sphere.
    dt : float
        Step (fixed schemes: the largest step that divides each save interval
        evenly is used; ``rk45``: its first trial step).
    rtol, atol : float
        Error control of ``rk45``.
    noise : NoiseSchedule, optional
        Noisy tokens, dx = P⊥v dt + √(2/γ) P⊥dW: geometric
        Euler–Maruyama steps (:class:`meanfield.solvers.noise.NoisyParticleStepper`); needs
        ``method = "euler"``, the only stochastic scheme.
    norm : {"post", "pre", "peri", "ngpt"}
        Normalisation scheme of Karagodin, Ge, Polyanskiy and Rigollet (arXiv 2510.22026):
        ``"post"`` (default) is this sphere model; the others run
        :class:`meanfield.solvers.normalized.NormalizedSolver` (:mod:`meanfield.normalization`).
    ngpt_alpha : float
        nGPT's step :math:`\\alpha` (``norm = "ngpt"``).

    Examples
    --------
    >>> import meanfield as mf
    >>> problem = mf.Problem(mf.Model(d=3, beta=4.0), mf.sample_uniform(32, 3, seed=0))
    >>> mf.solve(problem, mf.ParticleSolver(method="rk4", dt=0.05), t_final=0.5).frames
    2
    """

    method: str = "rk4"
    dt: float = 0.01
    rtol: float = 1e-8
    atol: float = 1e-10
    noise: NoiseSchedule | None = None
    norm: str = "post"
    ngpt_alpha: float = 0.2
    kind: ClassVar[str] = "particle"

    def stepper(self, problem: Any) -> ParticleStepper | NoisyParticleStepper:
        """The :class:`ParticleStepper` of ``problem`` (the field is ``problem.model.velocity``); with noise, its Euler–Maruyama twin."""
        base = ParticleStepper(problem.model, method=self.method, dt=self.dt, rtol=self.rtol, atol=self.atol, weights=problem.weights)
        if self.noise is None:
            return base
        if self.method != "euler":
            raise ValueError(f"noisy tokens take Euler–Maruyama steps: method must be 'euler', got {self.method!r}")
        return NoisyParticleStepper(base, self.noise)

    def setup(self, problem: Any, *, energy: bool = True, speed: bool = True, steady_tol: float = 0.0) -> RunSetup:
        """Stepper and trackers: finite values, the sphere constraint, the energies, the largest speed."""
        if problem.on_grid:
            raise ValueError("the particle solver takes tokens; this problem holds a grid density (use GridSolver)")
        if self.norm != "post":  # Pre-LN, Peri-LN, nGPT: meanfield.solvers.normalized
            if self.noise is not None:
                raise ValueError(f"noisy tokens follow the sphere model; norm={self.norm!r} takes no noise")
            scheme = NormalizedSolver(norm=self.norm, ngpt_alpha=self.ngpt_alpha, method=self.method, dt=self.dt, rtol=self.rtol, atol=self.atol)
            return scheme.setup(problem, energy=energy, speed=speed, steady_tol=steady_tol)
        stepper = self.stepper(problem)
        trackers: list[Tracker] = [FiniteTracker(), SphereTracker()]
        if energy:
            trackers.append(EnergyTracker(problem.model, weights=problem.weights))
        if speed:
            trackers.append(SteadyStateTracker(stepper.field, tol=steady_tol))  # shares the next step's first evaluation
        return RunSetup(problem.model, stepper, problem.initial, "x", {}, trackers, info=lambda: dict(stepper.stats))
