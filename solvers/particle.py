r"""Particle solver for :math:`\dot x_i=\sigma P^\perp_{x_i}v_i`.

.. math::

    \dot x_i = \sigma\,P^\perp_{x_i}\, v_i(x_1,\dots,x_n; t), \qquad x_i\in S^{d-1}

integrated by a registered Runge–Kutta scheme (:mod:`meanfield.solvers.integrators`)
with stage points put back on the sphere.

Run it with :func:`meanfield.solve` and :class:`ParticleSolver`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from meanfield.model import Model
from meanfield.geometry.sphere import normalize
from meanfield.solvers.integrators import DormandPrince, from_name
from meanfield.solvers.signals import check
from meanfield.solvers.loop import RunSetup, Tracker
from meanfield.solvers.trackers import EnergyTracker, FiniteTracker, SphereTracker, SteadyStateTracker

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

    def field(self, x: np.ndarray, t: float) -> np.ndarray:
        self.stats["evaluations"] += 1
        return self.model.velocity(x, t, weights=self.weights)

    def advance(self, state: np.ndarray, t0: float, t1: float) -> np.ndarray:
        """Integrate from ``t0`` to exactly ``t1``."""
        if t1 <= t0:
            return state
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
    kind: ClassVar[str] = "particle"

    def stepper(self, problem: Any) -> ParticleStepper:
        """The :class:`ParticleStepper` of ``problem`` (the field is ``problem.model.velocity``)."""
        return ParticleStepper(problem.model, method=self.method, dt=self.dt, rtol=self.rtol, atol=self.atol, weights=problem.weights)

    def setup(self, problem: Any, *, energy: bool = True, speed: bool = True, steady_tol: float = 0.0) -> RunSetup:
        """Stepper and trackers: finite values, the sphere constraint, the energies, the largest speed."""
        if problem.on_grid:
            raise ValueError("the particle solver takes tokens; this problem holds a grid density (use GridSolver)")
        stepper = self.stepper(problem)
        trackers: list[Tracker] = [FiniteTracker(), SphereTracker()]
        if energy:
            trackers.append(EnergyTracker(problem.model, weights=problem.weights))
        if speed:
            trackers.append(SteadyStateTracker(lambda x, t: stepper.model.velocity(x, t, weights=problem.weights), tol=steady_tol))
        return RunSetup(problem.model, stepper, problem.initial, "x", {}, trackers, info=lambda: dict(stepper.stats))
