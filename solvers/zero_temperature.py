r"""Zero-temperature particle solver: the :math:`\beta\to\infty` limit of softmax attention.

.. math::

    \dot x_i = \sigma\,\frac{P^\perp_{x_i}(S x_i)}{\|B^\top x_i\|},\qquad
    S = V B^\top,\quad B = Q^\top K,\quad \sigma=\pm1

(seed 002, Equation 3; MODEL.md §4).  When the token measure has full support,
the softmax weights :math:`\propto e^{\beta x^\top B y}` concentrate as
:math:`\beta\to\infty` on the maximiser :math:`y^\star = B^\top x/\|B^\top x\|` of
:math:`y\mapsto x^\top By` over the sphere, so :math:`v(x)\to Vy^\star = Sx/\|B^\top x\|`.
The tokens no longer interact: each one follows the curve
:math:`\tau\mapsto e^{\tau S}x_0/\|e^{\tau S}x_0\|` with its own clock
:math:`d\tau/dt = 1/\|B^\top x\|` (:func:`meanfield.projection.zero_temperature_flow`)
and converges exponentially to :math:`\Pi(x_0)` when ``S`` is symmetric with a gap.

Selected with ``solver.kind = "zero-temperature"``; it reuses the particle
stepper and the integrator registry (``solver.method``: euler, heun, rk4, rk45).
It needs one constant softmax head with an invertible ``B``.

Examples
--------
>>> import numpy as np
>>> from meanfield.sphere import sample_uniform
>>> S, B = np.diag([1.0, 0.5, 0.25]), np.eye(3)
>>> result = simulate_zero_temperature(sample_uniform(8, 3, seed=1), S=S, B=B, t_final=30.0, dt=0.1)
>>> bool(np.all(np.abs(result.final[:, 0]) > 0.999))
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from meanfield.build import build_heads, initial_tokens
from meanfield.errors import ConfigError
from meanfield.model import Model
from meanfield.projection import COND_MAX, score_and_value
from meanfield.sphere import normalize, project_tangent
from solvers.loop import RunResult, Tracker, run_loop, save_times
from solvers.particle import ParticleStepper
from solvers.run import RunSetup
from solvers.trackers import FiniteTracker, SphereTracker, SteadyStateTracker

__all__ = ["ZeroTemperatureField", "RayleighTracker", "field_from_config", "run_setup", "simulate_zero_temperature"]


@dataclass(frozen=True)
class ZeroTemperatureField:
    r"""The vector field :math:`\sigma P^\perp_x(Sx)/\|B^\top x\|`, with the model's ``velocity`` signature.

    Parameters
    ----------
    S : (d, d) array
        :math:`VB^\top`.
    B : (d, d) array
        :math:`Q^\top K` (invertible).
    sign : float
        +1 (ascent, the forward pass) or −1 (descent).
    """

    S: NDArray[np.float64]
    B: NDArray[np.float64]
    sign: float = 1.0

    def velocity(self, x: np.ndarray, t: float, *, weights: np.ndarray | None = None) -> np.ndarray:  # noqa: ARG002
        r""":math:`\sigma P^\perp_{x_i}(Sx_i)/\|B^\top x_i\|`, shape ``(n, d)``; tokens do not interact, so ``weights`` is unused."""
        speed = np.linalg.norm(x @ self.B, axis=1, keepdims=True)  # rows: (Bᵀ x_i)ᵀ
        return self.sign * project_tangent(x, x @ self.S.T) / speed

    def rayleigh(self, x: np.ndarray) -> np.ndarray:
        r"""Per-token Lyapunov function :math:`x^\top Sx` (non-decreasing in ascent)."""
        return np.einsum("ij,jk,ik->i", x, self.S, x)


@dataclass
class RayleighTracker:
    r"""Records the mean Rayleigh quotient :math:`\frac1n\sum_i x_i^\top Sx_i` (``rayleigh``).

    For symmetric ``S`` it is a Lyapunov function of the zero-temperature flow:
    :math:`\frac{d}{dt}x^\top Sx = 2\sigma\|P^\perp_x Sx\|^2/\|B^\top x\|`
    (seed 002, the Lyapunov estimate behind Corollary 2); it increases to :math:`\mu_1` in ascent.
    """

    field: ZeroTemperatureField
    name: str = "rayleigh"

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:  # noqa: ARG002
        return {"rayleigh": float(np.mean(self.field.rayleigh(state)))}


def field_from_config(cfg: dict[str, Any], model: Model | None = None) -> ZeroTemperatureField:
    """The zero-temperature field of a resolved config (one constant softmax head, invertible ``B``).

    Raises
    ------
    ConfigError
        More than one head (``model.heads``), another attention kind
        (``model.attention``), time-dependent weights (``weights.schedule``),
        or a singular ``B`` (``model.heads``).
    """
    if cfg["model"]["attention"] != "softmax":
        raise ConfigError("model.attention", f"the zero-temperature solver is the β → ∞ limit of softmax attention, got {cfg['model']['attention']!r}")
    if cfg["weights"]["schedule"] != "constant":
        raise ConfigError("weights.schedule", "the zero-temperature solver needs constant heads")
    heads = build_heads(cfg)
    if len(heads) != 1:
        raise ConfigError("model.heads", f"the zero-temperature solver needs a single head, got {len(heads)}")
    head = heads[0]
    B, S = score_and_value(head.Q, head.K, head.V)
    cond = float(np.linalg.cond(B))
    if not cond <= COND_MAX:
        raise ConfigError("model.heads[0]", f"B = QᵀK is singular (cond = {cond:.3g}); the zero-temperature field divides by |Bᵀx|")
    sign = 1.0 if (model.direction if model is not None else cfg["model"]["direction"]) == "ascent" else -1.0
    return ZeroTemperatureField(S=S, B=B, sign=sign)


def run_setup(cfg: dict[str, Any], model: Model) -> RunSetup:
    """Solver family ``zero-temperature`` for :mod:`solvers.run` (``solver.kind = "zero-temperature"``)."""
    solver = cfg["solver"]
    field = field_from_config(cfg, model)
    stepper = ParticleStepper(field, method=solver["method"], dt=solver["dt"], rtol=solver["rtol"], atol=solver["atol"])  # type: ignore[arg-type]
    x0 = initial_tokens(cfg)
    trackers: list[Tracker] = [FiniteTracker(), SphereTracker()]
    if cfg["track"]["energy"]:
        trackers.append(RayleighTracker(field))
    trackers.append(SteadyStateTracker(field.velocity, tol=solver["steady_tol"]))
    return RunSetup(model, stepper, x0, "x", {}, trackers, info=lambda: dict(stepper.stats))


def simulate_zero_temperature(
    x0: ArrayLike,
    *,
    S: ArrayLike,
    B: ArrayLike,
    t_final: float,
    dt: float = 0.01,
    save_every: float | None = None,
    method: str = "rk4",
    direction: str = "ascent",
    trackers: tuple[Tracker, ...] = (),
    **options: Any,
) -> RunResult:
    r"""Functional one-liner: integrate :math:`\dot x=\sigma P^\perp_x(Sx)/\|B^\top x\|` from ``x0``.

    Parameters
    ----------
    x0 : (n, d) array-like
        Initial tokens (normalised here).
    S, B : (d, d) array-like
    t_final, dt, save_every : float
    method : {"euler", "heun", "rk4", "rk45"}
    direction : {"ascent", "descent"}
    **options
        ``rtol``, ``atol`` for ``rk45``.
    """
    field = ZeroTemperatureField(S=np.asarray(S, dtype=float), B=np.asarray(B, dtype=float), sign=1.0 if direction == "ascent" else -1.0)
    stepper = ParticleStepper(field, method=method, dt=dt, **options)  # type: ignore[arg-type]
    times = save_times(0.0, t_final, save_every or max(t_final, dt))
    result = run_loop(stepper, normalize(np.asarray(x0, dtype=float)), times, trackers=trackers)
    result.info.update(stepper.stats)
    return result
