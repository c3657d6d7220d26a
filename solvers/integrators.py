r"""Explicit Runge–Kutta integrators on the product of spheres, registered by name.

Each scheme is a Butcher tableau held as class data.  On the sphere every stage
point and the new state are put back on :math:`S^{d-1}` by the radial
projection ("project, then renormalise"): the vector field is tangent, so the
ambient flow preserves :math:`\|x\|=1` and the projection only removes the
:math:`O(h^{p+1})` drift; the order :math:`p` of the tableau is kept.

Registry: :data:`INTEGRATORS` (``euler``, ``heun``, ``rk4``, ``rk45``), looked
up with :func:`from_name`.  ``rk45`` is Dormand–Prince 5(4) with error control
(``rtol``, ``atol``) and first-same-as-last stages.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from meanfield.errors import RunFailed
from meanfield.geometry.sphere import normalize, normalized_combination
from meanfield.resources import MAX_STEPS
from meanfield.solvers.signals import check

__all__ = ["stage_point", "ExplicitRK", "Euler", "Heun", "RK4", "DormandPrince", "INTEGRATORS", "from_name"]

VectorField = Callable[[np.ndarray, float], np.ndarray]
Retraction = Callable[[np.ndarray], np.ndarray]


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def stage_point(x: np.ndarray, h: float, coefficients: Sequence[float], stages: Sequence[np.ndarray], retract: Retraction) -> np.ndarray:
    r"""The point :math:`R\big(x + h\sum_j a_j k_j\big)` of a tableau row ``coefficients`` (zero entries skipped).

    With the radial retraction (:func:`~meanfield.geometry.sphere.normalize`) one compiled pass over the
    rows (:func:`~meanfield.geometry.sphere.normalized_combination`): at n = 1024, d = 384 NumPy's
    temporaries and passes had cost a quarter of an RK4 step next to its four kernel calls.
    """
    terms = [(h * a_j, k_j) for a_j, k_j in zip(coefficients, stages) if a_j]
    if retract is normalize and terms:
        return normalized_combination(x, [c for c, _ in terms], [k for _, k in terms])
    y = x
    for c, k in terms:
        y = y + c * k
    return retract(y)


@dataclass
class ExplicitRK:
    """Fixed-step explicit Runge–Kutta scheme (subclasses set the tableau)."""

    name: ClassVar[str] = ""
    order: ClassVar[int] = 0
    A: ClassVar[tuple[tuple[float, ...], ...]] = ()
    b: ClassVar[tuple[float, ...]] = ()
    c: ClassVar[tuple[float, ...]] = ()
    adaptive: ClassVar[bool] = False

    def step(self, f: VectorField, x: np.ndarray, t: float, h: float, *, retract: Retraction = _identity) -> np.ndarray:
        r"""One step :math:`x_{k+1}=R\big(x_k+h\sum_s b_s k_s\big)`, :math:`k_s=f(R(x_k+h\sum_j a_{sj}k_j), t+c_sh)`."""
        stages: list[np.ndarray] = []
        for s, row in enumerate(self.A):
            stages.append(f(stage_point(x, h, row, stages, retract) if s else x, t + self.c[s] * h))
        return stage_point(x, h, self.b, stages, retract)


class Euler(ExplicitRK):
    name = "euler"
    order = 1
    A = ((),)
    b = (1.0,)
    c = (0.0,)


class Heun(ExplicitRK):
    name = "heun"
    order = 2
    A = ((), (1.0,))
    b = (0.5, 0.5)
    c = (0.0, 1.0)


class RK4(ExplicitRK):
    name = "rk4"
    order = 4
    A = ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0))
    b = (1 / 6, 1 / 3, 1 / 3, 1 / 6)
    c = (0.0, 0.5, 0.5, 1.0)


class DormandPrince(ExplicitRK):
    """Dormand–Prince 5(4) (Hairer, Nørsett & Wanner, *Solving ODEs I*, II.5)."""

    name = "rk45"
    order = 5
    adaptive = True
    A = (
        (),
        (1 / 5,),
        (3 / 40, 9 / 40),
        (44 / 45, -56 / 15, 32 / 9),
        (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
        (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
        (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
    )
    b = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)
    b_low = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)
    c = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)

    def attempt(
        self, f: VectorField, x: np.ndarray, t: float, h: float, k1: np.ndarray, *, retract: Retraction, rtol: float, atol: float
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """One trial step: returns ``(x_new, f(x_new), error_norm)``; accept when ``error_norm <= 1``."""
        stages = [k1]
        for s in range(1, 7):
            y = stage_point(x, h, self.A[s], stages, retract)
            if s == 6:  # FSAL: the last stage point is the 5th-order solution
                x_new = y
            stages.append(f(y, t + self.c[s] * h))
        err = h * sum((bh - bl) * k for bh, bl, k in zip(self.b, self.b_low, stages) if bh != bl)
        scale = atol + rtol * np.maximum(np.abs(x), np.abs(x_new))
        error_norm = float(np.sqrt(np.mean((err / scale) ** 2)))
        return x_new, stages[-1], error_norm

    def integrate(
        self,
        f: VectorField,
        x: np.ndarray,
        t0: float,
        t1: float,
        *,
        h0: float,
        retract: Retraction = _identity,
        rtol: float = 1e-8,
        atol: float = 1e-10,
        h_min: float = 1e-14,
    ) -> tuple[np.ndarray, dict[str, int]]:
        """Adaptive integration from ``t0`` to exactly ``t1`` starting with step ``h0``.

        The controller restarts from ``h0`` on every call, so the result depends
        only on ``(x, t0, t1)``: resumed runs are identical to uninterrupted ones.
        """
        t = t0
        h = min(h0, t1 - t0)
        k1 = f(x, t)
        accepted = rejected = 0
        while t1 - t > 1e-14 * max(1.0, abs(t1)):
            check()
            h = min(h, t1 - t)
            x_new, k_new, error = self.attempt(f, x, t, h, k1, retract=retract, rtol=rtol, atol=atol)
            if not np.isfinite(error):  # a NaN/Inf of the field: no smaller step removes it (it had been rejected
                _fail_if_not_finite(x_new, k_new, t + h)  # ~20 times, then reported as a step size below 1e-14)
                error = np.inf
            factor = 5.0 if error == 0 else min(5.0, max(0.2, 0.9 * error ** (-1 / 5)))
            if error <= 1.0:
                last = h >= t1 - t
                t = t1 if last else t + h
                x, k1 = x_new, k_new
                accepted += 1
                if accepted % _STEP_CHECK == 0 and not last:
                    _fail_if_endless(k1, h, accepted, t0, t, t1)
                h = h * factor
            else:
                rejected += 1
                h = h * factor
                if h < h_min:  # only a rejected step can stall; a tiny last step is fine
                    raise RunFailed(f"rk45 step size fell below {h_min:g} at t={t:.6g} (a stiff field)")
        return x, {"accepted": accepted, "rejected": rejected}


#: accepted steps between two looks at how many the interval still needs (:func:`_fail_if_endless`)
_STEP_CHECK = 1000


def _fail_if_endless(k: np.ndarray, h: float, accepted: int, t0: float, t: float, t1: float) -> None:
    """:class:`~meanfield.errors.RunFailed` where the accepted step ``h`` would take the interval to ``t1`` past
    :data:`~meanfield.resources.MAX_STEPS` steps, the bound a fixed ``solver.dt`` is held to (a field of 9e10 had taken
    steps of 1e-12, above the smallest step: the run had sat at t = 0 without a word)."""
    needed = accepted + (t1 - t) / h
    if needed <= MAX_STEPS:
        return
    k = np.asarray(k)
    speed = float(np.max(np.linalg.norm(k.reshape(-1, k.shape[-1]), axis=1))) if k.ndim >= 2 else float(np.max(np.abs(k)))
    raise RunFailed(f"rk45 took {accepted} steps of about {h:.2g} from t={t0:.6g} to t={t:.6g}: the interval to t={t1:.6g} "
                    f"needs about {needed:.2g}, past the limit of {MAX_STEPS:.0e} steps (the field reaches "
                    f"max |dx/dt| = {speed:.3g}: a smaller model.beta, or normalized attention)")


def _fail_if_not_finite(x: np.ndarray, k: np.ndarray, t: float) -> None:
    """:class:`~meanfield.errors.RunFailed` naming the NaN/Inf of a trial step to ``t``: in its state ``x``, or in the field
    ``k`` there (the fixed-step schemes' message, :func:`~meanfield.solvers.particle_stepper.fail_if_not_finite`)."""
    for what, values in (("state after the step", x), ("field at the state after the step", k)):
        bad = int(np.count_nonzero(~np.isfinite(values)))
        if bad:
            raise RunFailed(f"NaN/Inf in the {what} to t={t:.6g} ({bad} entries)")


#: integrators by name
INTEGRATORS: dict[str, type[ExplicitRK]] = {cls.name: cls for cls in (Euler, Heun, RK4, DormandPrince)}


def from_name(name: str) -> ExplicitRK:
    """The integrator registered as ``name`` (``euler``, ``heun``, ``rk4``, ``rk45``)."""
    try:
        return INTEGRATORS[name]()
    except KeyError:
        raise ValueError(f"method: unknown integrator {name!r}; choose from {sorted(INTEGRATORS)}") from None
