r"""The particle stepper: a token cloud advanced between save times by a Runge–Kutta scheme on the sphere.

.. math::

    \dot x_i = \sigma\,P^\perp_{x_i}\, v_i(x_1,\dots,x_n; t), \qquad x_i\in S^{d-1}

with every stage point put back on the sphere (:mod:`meanfield.solvers.integrators`);
:class:`meanfield.solvers.particle.ParticleSolver` builds it, and the steppers of the
normalisation schemes (:mod:`meanfield.solvers.normalized`) extend it.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from meanfield.errors import RunFailed
from meanfield.geometry.sphere import normalize
from meanfield.model import Model
from meanfield.solvers.integrators import DormandPrince, from_name
from meanfield.solvers.signals import check

__all__ = ["ParticleStepper", "check_step_options", "fail_if_not_finite"]


def fail_if_not_finite(y: np.ndarray, t: float) -> None:
    """:class:`~meanfield.errors.RunFailed` where the state after a step to ``t`` holds a NaN or an Inf.

    Checked after every fixed step (one sum of the state: about 1.5 µs at n = 16, 3 µs at n = 256 and 6 µs at n = 4096,
    d = 3: 0.2 % of an RK4 step at n = 256, not measurable on the default run; 1.5 % of an Euler step at n = 16), so
    the run stops at the step where it happened and keeps the frames saved before it; the
    frame check (:class:`~meanfield.solvers.trackers.FiniteTracker`) had seen it only at the next save time, the steps
    between run on NaN (``B = I`` at β = 720 overflows at the first step and had taken 12 more)."""
    if not math.isfinite(y.sum()):  # a NaN or ±Inf anywhere makes the sum one (finite entries of a state cannot overflow it)
        bad = int(np.count_nonzero(~np.isfinite(y)))
        if bad:
            raise RunFailed(f"NaN/Inf in the state after the step to t={t:.6g} ({bad} entries)")


def check_positive(**options: object) -> None:
    """Each option a positive finite number (not a bool, a string or NaN): :class:`ValueError` naming it otherwise.
    The solvers check their options with it when they are made."""
    for name, value in options.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not (
            math.isfinite(value) and value > 0
        ):
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def check_step_options(*, method: str, dt: object, rtol: object, atol: object) -> None:
    """A known scheme and positive finite ``dt``, ``rtol``, ``atol``: :class:`ValueError` naming the option otherwise
    (the solvers' options are checked when they are made; ``dt=0`` had been a ZeroDivisionError in :func:`meanfield.solve`)."""
    if not isinstance(method, str):
        raise ValueError(f"method must be a scheme's name, got {method!r}")
    from_name(method)
    check_positive(dt=dt, rtol=rtol, atol=atol)


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
        check_step_options(method=method, dt=dt, rtol=rtol, atol=atol)
        self.model = model
        self.scheme = from_name(method)
        self.dt = float(dt)
        self.rtol = float(rtol)
        self.atol = float(atol)
        self.weights = weights
        self.stats: dict[str, int] = {"steps": 0, "rejected": 0, "evaluations": 0}
        self._largest_step: float | None = None  # of the fixed steps since taken_step() was last called
        self._last: tuple[Any, float, np.ndarray, np.ndarray, np.ndarray | None] | None = None

    #: the field is the model's velocity, so its evaluation's row sums are the model's (a subclass integrating
    #: another field sets this to False)
    shares_row_logs: ClassVar[bool] = True

    def evaluate(self, x: np.ndarray, t: float, *, row_logs: np.ndarray | None = None) -> np.ndarray:
        """The integrated field at ``(x, t)``: the model's tangent velocity (``row_logs`` as in :meth:`Model.velocity
        <meanfield.model.Model.velocity>`, where given)."""
        self.stats["evaluations"] += 1
        if row_logs is None:
            return self.model.velocity(x, t, weights=self.weights)
        return self.model.velocity(x, t, weights=self.weights, row_logs=row_logs)

    def field(self, x: np.ndarray, t: float) -> np.ndarray:
        """The field at ``(x, t)``, kept for the next step (:meth:`stage_field`): the speed tracker's call on
        a saved frame and the next step's first stage (the same tokens, time and model) cost one kernel call.
        The heads' log row sums of that evaluation are kept too (:meth:`kept_row_logs`: the frame's energy)."""
        if self._kept_at(x, t):
            return self._last[3].copy()
        logs = self._row_logs_buffer(x, t)
        v = self.evaluate(x, t) if logs is None else self.evaluate(x, t, row_logs=logs)  # a subclass that shares no sums may take (x, t) only
        if logs is not None and np.isnan(logs).any():  # the kernel does not take these sums (float32, a pooled head of weight 0, …)
            logs = None
        self._last = (self.model, t, np.array(x, copy=True), v.copy(), logs)
        return v

    def kept_row_logs(self, t: float, x: np.ndarray) -> np.ndarray | None:
        r"""The heads' :math:`\ln\sum_j a_j e^{\beta s^h_{ij}}` (H, n) of what :meth:`field` kept at ``(x, t)``, if its kernel
        took them (:func:`~meanfield.analysis.energy.energies_from_row_logs`); else ``None``."""
        return self._last[4] if self._kept_at(x, t) else None

    def _row_logs_buffer(self, x: np.ndarray, t: float) -> np.ndarray | None:
        """A NaN-filled (H, n) buffer for the kernel's log row sums, where they can make the energy: the attention
        model of :mod:`meanfield.model` with an exponential law, no mask and β > 0; else ``None``."""
        model = self.model
        if not self.shares_row_logs or not isinstance(model, Model) or model.attention == "relu" or model.mask != "none" or not model.beta > 0:
            return None
        return np.full((model.heads.at(t).H, np.asarray(x).shape[0]), np.nan)

    def stage_field(self, x: np.ndarray, t: float) -> np.ndarray:
        """The field at a stage of a step: the one :meth:`field` kept, if it was at ``(x, t)``, else evaluated.

        What :meth:`field` kept is used once and dropped, and stages store nothing: copying and comparing
        the tokens at every stage had cost 0.9 ms a stage next to an 11 ms kernel call at n = 1024, d = 384.
        """
        kept, last = self._kept_at(x, t), self._last
        self._last = None
        return last[3] if kept else self.evaluate(x, t)

    def _kept_at(self, x: np.ndarray, t: float) -> bool:
        """Whether :meth:`field` kept its evaluation at these tokens, time and model."""
        last = self._last
        return last is not None and last[0] is self.model and last[1] == t and last[2].shape == x.shape and bool(np.array_equal(last[2], x))

    def advance(self, state: np.ndarray, t0: float, t1: float) -> np.ndarray:
        """Integrate from ``t0`` to exactly ``t1``."""
        if t1 <= t0:
            return state
        pieces = getattr(getattr(self.model, "heads", None), "pieces", None)  # (the zero-temperature field has no heads)
        if pieces is not None:  # piecewise-constant heads (weights.schedule = "layers"): no step crosses a switch
            return self._advance_pieces(state, pieces(t0, t1))
        return self.integrate_between_bends(state, t0, t1)

    def integrate_between_bends(self, y: np.ndarray, t0: float, t1: float, *, retract: Any = normalize) -> np.ndarray:
        """:meth:`integrate` from ``t0`` to ``t1``, cut where the heads' path bends (OU and relaxation weights, a replay:
        linear between grid points, ``heads.kinks``): a Runge–Kutta step across a bend had been second order."""
        kinks = getattr(getattr(self.model, "heads", None), "kinks", None)
        ends = [t0, *kinks(t0, t1), t1] if kinks is not None and self.scheme.order > 1 else [t0, t1]
        for a, b in zip(ends[:-1], ends[1:]):
            y = self.integrate(y, a, b, retract=retract)
        return y

    def integrate(self, y: np.ndarray, t0: float, t1: float, *, retract: Any = normalize) -> np.ndarray:
        """The scheme's steps of :meth:`stage_field` from ``t0`` to exactly ``t1``, every stage point put back by ``retract``."""
        if isinstance(self.scheme, DormandPrince):
            y, counts = self.scheme.integrate(self.stage_field, y, t0, t1, h0=self.dt, retract=retract, rtol=self.rtol, atol=self.atol)
            self.stats["steps"] += counts["accepted"]
            self.stats["rejected"] += counts["rejected"]
            return y
        steps = max(1, math.ceil((t1 - t0) / self.dt - 1e-9))
        h = (t1 - t0) / steps
        self.record_step(h)
        for k in range(steps):
            check()
            y = self.scheme.step(self.stage_field, y, t0 + k * h, h, retract=retract)
            self.stats["steps"] += 1
            fail_if_not_finite(y, t0 + (k + 1) * h)
        return y

    def record_step(self, h: float) -> None:
        """Note a fixed step of length ``h`` (:meth:`taken_step`)."""
        self._largest_step = h if self._largest_step is None else max(self._largest_step, h)

    def taken_step(self) -> float | None:
        """The largest fixed step taken since the last call (``None``: none); the speed tracker's step-size warning
        reads it (the steps are at most ``dt``, and a shorter save interval makes them shorter)."""
        h, self._largest_step = self._largest_step, None
        return h

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
