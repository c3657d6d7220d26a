r"""Particle solver for :math:`\dot x_i=\sigma P^\perp_{x_i}v_i` (MODEL.md §1–2).

.. math::

    \dot x_i = \sigma\,P^\perp_{x_i}\, v_i(x_1,\dots,x_n; t), \qquad x_i\in S^{d-1}

integrated by a registered Runge–Kutta scheme (:mod:`solvers.integrators`)
with stage points put back on the sphere.

Examples
--------
>>> from meanfield.model import Model, ConstantHeads
>>> from meanfield.heads import HeadStack
>>> from meanfield.sphere import sample_uniform
>>> import numpy as np
>>> model = Model(d=3, beta=4.0, attention="softmax", heads=ConstantHeads(HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])))
>>> result = simulate(model, sample_uniform(64, 3, seed=0), t_final=1.0, dt=0.05, save_every=0.5)
>>> result.t.tolist()
[0.0, 0.5, 1.0]
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from meanfield.model import Model
from meanfield.sphere import normalize
from solvers.integrators import DormandPrince, from_name
from solvers.loop import RunResult, Tracker, run_loop, save_times

__all__ = ["ParticleStepper", "simulate"]


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
            x = self.scheme.step(self.field, x, t0 + k * h, h, retract=normalize)
        self.stats["steps"] += steps
        return x


def simulate(
    model: Model,
    x0: np.ndarray,
    *,
    t_final: float,
    dt: float = 0.01,
    save_every: float | None = None,
    method: str = "rk4",
    trackers: Sequence[Tracker] = (),
    weights: np.ndarray | None = None,
    **options: Any,
) -> RunResult:
    """Functional one-liner: integrate ``x0`` to ``t_final`` and return the saved frames.

    Parameters
    ----------
    model : Model
    x0 : (n, d) array
        Initial tokens (normalised here).
    t_final, dt, save_every : float
        Final time, step, and time between saved frames (default: only the
        first and the last frame).
    method : {"euler", "heun", "rk4", "rk45"}
    trackers : sequence of Tracker
    weights : (n,) array, optional
    **options
        ``rtol``, ``atol`` for ``rk45``.
    """
    stepper = ParticleStepper(model, method=method, dt=dt, weights=weights, **options)
    times = save_times(0.0, t_final, save_every or max(t_final, dt))
    result = run_loop(stepper, normalize(np.asarray(x0, dtype=float)), times, trackers=trackers)
    result.info.update(stepper.stats)
    return result
