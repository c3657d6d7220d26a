r"""Particle solver for :math:`\dot x_i=\sigma P^\perp_{x_i}v_i`.

.. math::

    \dot x_i = \sigma\,P^\perp_{x_i}\, v_i(x_1,\dots,x_n; t), \qquad x_i\in S^{d-1}

integrated by a registered Runge–Kutta scheme (:mod:`meanfield.solvers.integrators`)
with stage points put back on the sphere.

Run it with :func:`meanfield.solve` and :class:`ParticleSolver`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from meanfield.io.token_masses import TOKEN_MASSES
from meanfield.noise import NoiseSchedule, check_noise_option
from meanfield.normalization import DEFAULT_NGPT_ALPHA, check_norm_options
from meanfield.solvers.loop import RunSetup, Tracker
from meanfield.solvers.noise import NoisyParticleStepper
from meanfield.solvers.normalized import NormalizedSolver
from meanfield.solvers.particle_stepper import ParticleStepper, check_step_options
from meanfield.solvers.trackers import EnergyTracker, FiniteTracker, SphereTracker, SteadyStateTracker

__all__ = ["ParticleStepper", "ParticleSolver"]


@dataclass(frozen=True, kw_only=True)
class ParticleSolver:
    """Numerical options of the particle solver (tokens integrated on the sphere).

    Parameters
    ----------
    method : {"euler", "heun", "rk4", "rk45"}, optional
        Runge–Kutta scheme; every stage point is put back on the sphere.  Default ``"rk4"``, and ``"euler"`` with
        ``noise`` (its only scheme).
    dt : float
        Step (fixed schemes: the largest step that divides each save interval
        evenly is used; ``rk45``: its first trial step).
    rtol, atol : float
        Error control of ``rk45``.
    noise : NoiseSchedule, optional
        Noisy tokens, dx = P⊥v dt + √(2/γ) P⊥∘dW (Stratonovich): geometric
        Euler–Maruyama steps (:class:`meanfield.solvers.noise.NoisyParticleStepper`); needs
        ``method = "euler"``, the only stochastic scheme.
    norm : {"post", "pre", "peri", "ngpt"}
        Normalisation scheme of Karagodin, Ge, Polyanskiy and Rigollet (arXiv 2510.22026):
        ``"post"`` (default) is this sphere model; the others run
        :class:`meanfield.solvers.normalized.NormalizedSolver` (:mod:`meanfield.normalization`).
    ngpt_alpha : float
        nGPT's step :math:`\\alpha>0` (``norm = "ngpt"``; refused with another scheme).

    Raises
    ------
    ValueError
        An unknown ``method`` or ``norm``; ``dt``, ``rtol``, ``atol`` or ``ngpt_alpha`` not a positive finite number;
        ``ngpt_alpha`` with a ``norm`` other than ``"ngpt"``; ``noise`` with a ``method`` other than ``"euler"`` or a
        ``norm`` other than ``"post"``.
    TypeError
        ``noise`` that is not a :class:`~meanfield.noise.NoiseSchedule`.

    Examples
    --------
    >>> import meanfield as mf
    >>> problem = mf.Problem(mf.Model(d=3, beta=4.0), mf.sample_uniform(32, 3, seed=0))
    >>> mf.solve(problem, mf.ParticleSolver(method="rk4", dt=0.05), t_final=0.5).frames
    2
    """

    method: str | None = None
    dt: float = 0.01
    rtol: float = 1e-8
    atol: float = 1e-10
    noise: NoiseSchedule | None = None
    norm: str = "post"
    ngpt_alpha: float = DEFAULT_NGPT_ALPHA
    kind: ClassVar[str] = "particle"

    def __post_init__(self) -> None:
        if self.method is None:  # (noise=... alone had been refused, "method must be 'euler', got 'rk4'", a default not chosen)
            object.__setattr__(self, "method", "euler" if self.noise is not None else "rk4")
        check_step_options(method=self.method, dt=self.dt, rtol=self.rtol, atol=self.atol)
        check_norm_options(norm=self.norm, ngpt_alpha=self.ngpt_alpha)  # (norm="foo" had been found only when the run started)
        check_noise_option(self.noise)
        if self.noise is not None and self.method != "euler":  # (had been found only when the run started)
            raise ValueError(f"noisy tokens take Euler–Maruyama steps: method must be 'euler', got {self.method!r}")
        if self.noise is not None and self.norm != "post":  # (had been found only when the run started)
            raise ValueError(f"noisy tokens follow the sphere model; norm={self.norm!r} takes no noise")

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
        check_noise_option(self.noise, steady_tol=steady_tol)
        if self.norm != "post":  # Pre-LN, Peri-LN, nGPT: meanfield.solvers.normalized (no noise: refused when made)
            scheme = NormalizedSolver(norm=self.norm, ngpt_alpha=self.ngpt_alpha, method=self.method, dt=self.dt, rtol=self.rtol, atol=self.atol)
            return scheme.setup(problem, energy=energy, speed=speed, steady_tol=steady_tol)
        stepper = self.stepper(problem)
        trackers: list[Tracker] = [FiniteTracker(), SphereTracker()]
        if speed:
            fixed = None if self.method == "rk45" else self.dt  # a fixed step too long for the field is warned of
            # (it shares the next step's first evaluation; the step it checks is the one taken, not dt)
            trackers.append(SteadyStateTracker(stepper.field, tol=steady_tol, step=fixed, taken=stepper.taken_step))
        if energy:  # after the speed: the energy from the row sums of its evaluation, where the kernel took them
            field_of = stepper.base if isinstance(stepper, NoisyParticleStepper) else stepper  # the noisy steps' drift is the base's field
            shared = field_of.kept_row_logs if speed else None
            trackers.append(EnergyTracker(problem.model, weights=problem.weights, shared=shared))
        static = {} if problem.weights is None else {TOKEN_MASSES: problem.weights}  # token masses travel with the run
        marks = {"noisy": True} if self.noise is not None else {}  # read by the diagnostics, which describe the deterministic flow
        return RunSetup(problem.model, stepper, problem.initial, "x", static, trackers, info=lambda: dict(stepper.stats, **marks))
