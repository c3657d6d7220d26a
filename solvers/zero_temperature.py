r"""Zero-temperature particle solver: the :math:`\beta\to\infty` limit of softmax attention.

.. math::

    \dot x_i = \sigma\,\frac{P^\perp_{x_i}(S x_i)}{\|B^\top x_i\|},\qquad
    S = V B^\top,\quad B = Q^\top K,\quad \sigma=\pm1

(Equation 3 of A. Alcalde, L. Bungert, K. Riedl and T. Roith, *Quantifying Concentration Phenomena of
Mean-Field Transformers in the Low-Temperature Regime*, arXiv 2605.10931).  When the token measure has full support,
the softmax weights :math:`\propto e^{\beta x^\top B y}` concentrate as
:math:`\beta\to\infty` on the maximiser :math:`y^\star = B^\top x/\|B^\top x\|` of
:math:`y\mapsto x^\top By` over the sphere, so :math:`v(x)\to Vy^\star = Sx/\|B^\top x\|`.
The tokens no longer interact: each one follows the curve
:math:`\tau\mapsto e^{\tau S}x_0/\|e^{\tau S}x_0\|` with its own clock
:math:`d\tau/dt = 1/\|B^\top x\|` (:func:`meanfield.analysis.projection.zero_temperature_flow`)
and converges exponentially to :math:`\Pi(x_0)` when ``S`` is symmetric with a gap.

Selected with ``solver.kind = "zero-temperature"``; it reuses the particle
stepper and the integrator registry (``solver.method``: euler, heun, rk4, rk45).
It needs one constant softmax head with an invertible ``B``.

Examples
--------
>>> import numpy as np
>>> import meanfield as mf
>>> head = mf.heads.Head(Q=np.eye(3), K=np.eye(3), V=np.diag([1.0, 0.5, 0.25]))
>>> problem = mf.Problem(mf.Model(d=3, beta=1.0, heads=head), mf.sample_uniform(8, 3, seed=1))
>>> run = mf.solve(problem, mf.ZeroTemperatureSolver(dt=0.1), t_final=30.0)
>>> bool(np.all(np.abs(run.final[:, 0]) > 0.999))
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from meanfield.config import check_mask
from meanfield.errors import ConfigError
from meanfield.io.token_masses import TOKEN_MASSES
from meanfield.model import Model
from meanfield.analysis.projection import COND_MAX
from meanfield.geometry.sphere import project_tangent
from meanfield.solvers.loop import RunSetup, Tracker
from meanfield.solvers.particle_stepper import ParticleStepper, check_step_options
from meanfield.solvers.trackers import FiniteTracker, SphereTracker, SteadyStateTracker

__all__ = ["ZeroTemperatureField", "RayleighTracker", "ZeroTemperatureSolver", "field_of"]


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
    r"""Records the mean Rayleigh quotient :math:`\frac1n\sum_i x_i^\top Sx_i` (``rayleigh``); with token masses
    ``weights``, their weighted mean :math:`\sum_i a_ix_i^\top Sx_i/\sum_ia_i`.

    For symmetric ``S`` it is a Lyapunov function of the zero-temperature flow:
    :math:`\frac{d}{dt}x^\top Sx = 2\sigma\|P^\perp_x Sx\|^2/\|B^\top x\|`
    (Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931: the Lyapunov estimate behind Corollary 2); it increases to :math:`\mu_1` in ascent.
    """

    field: ZeroTemperatureField
    name: str = "rayleigh"
    weights: np.ndarray | None = None

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:  # noqa: ARG002
        return {"rayleigh": float(np.average(self.field.rayleigh(state), weights=self.weights))}


def field_of(model: Model) -> ZeroTemperatureField:
    """The zero-temperature field of a model with one constant softmax head and an invertible ``B``.

    Raises
    ------
    ValueError
        Another attention kind, time-dependent heads, several heads, or a singular ``B``
        (the message names the config key it comes from).
    """
    from meanfield.model import ConstantHeads

    if model.attention != "softmax":
        raise ConfigError("model.attention", f"the zero-temperature solver is the β → ∞ limit of softmax attention, got {model.attention!r}")
    if not isinstance(model.heads, ConstantHeads):
        raise ConfigError("weights.schedule", "the zero-temperature solver needs constant heads")
    stack = model.heads.at(0.0)
    if stack.H != 1:
        raise ConfigError("model.heads", f"the zero-temperature solver needs a single head, got {stack.H}")
    B = stack.B[0]
    cond = float(np.linalg.cond(B))
    if not cond <= COND_MAX:
        raise ConfigError("model.heads[0]", f"B = QᵀK is singular (cond = {cond:.3g}); the zero-temperature field divides by |Bᵀx|")
    return ZeroTemperatureField(S=stack.V[0] @ B.T, B=B, sign=model.sign)


@dataclass(frozen=True, kw_only=True)
class ZeroTemperatureSolver:
    r"""Numerical options of the zero-temperature solver: the β → ∞ limit :math:`\dot x=\sigma P^\perp_x(Sx)/\|B^\top x\|`.

    The model must have one constant softmax head with an invertible ``B``; its β is not used.

    Parameters
    ----------
    method : {"euler", "heun", "rk4", "rk45"}
    dt : float
    rtol, atol : float
        Error control of ``rk45``.

    Examples
    --------
    >>> import meanfield as mf
    >>> model = mf.Model(d=3, beta=4.0, attention="softmax", heads=mf.heads.identity(3))
    >>> run = mf.solve(mf.Problem(model, mf.sample_uniform(32, 3, seed=0)), mf.ZeroTemperatureSolver(dt=0.05), t_final=1.0)
    >>> run.t.tolist(), "rayleigh" in run.diagnostics  # the mean Rayleigh quotient is recorded
    ([0.0, 1.0], True)
    """

    method: str = "rk4"
    dt: float = 0.01
    rtol: float = 1e-8
    atol: float = 1e-10
    kind: ClassVar[str] = "zero-temperature"

    def __post_init__(self) -> None:
        check_step_options(method=self.method, dt=self.dt, rtol=self.rtol, atol=self.atol)

    def setup(self, problem: Any, *, energy: bool = True, speed: bool = True, steady_tol: float = 0.0) -> RunSetup:
        """Stepper and trackers: finite values, the sphere, the mean Rayleigh quotient, the largest speed."""
        if problem.on_grid:
            raise ValueError("the zero-temperature solver takes tokens, not a grid density")
        check_mask(problem.model.mask, "zero-temperature", on_grid=problem.on_grid)  # a causal mask: refused here, as by the config
        field = field_of(problem.model)
        stepper = ParticleStepper(field, method=self.method, dt=self.dt, rtol=self.rtol, atol=self.atol)  # type: ignore[arg-type]
        trackers: list[Tracker] = [FiniteTracker(), SphereTracker()]
        if energy:
            trackers.append(RayleighTracker(field, weights=problem.weights))
        if speed:
            trackers.append(SteadyStateTracker(field.velocity, tol=steady_tol))
        # the token masses travel with the run, as the particle solver's (they had been dropped: run.token_masses None,
        # and the concentration of the run measured with equal masses); each token's flow is its own
        static = {} if problem.weights is None else {TOKEN_MASSES: problem.weights}
        return RunSetup(problem.model, stepper, problem.initial, "x", static, trackers, info=lambda: dict(stepper.stats))
