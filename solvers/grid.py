r"""Finite-volume solver of the transformer continuity equation on :math:`S^2`.

.. math::

    \partial_t\mu + \operatorname{div}_S(\mu\,X[\mu]) = 0,\qquad
    X[\mu](x) = \sigma P^\perp_x v[\mu](x)

(MODEL.md §2; :math:`\sigma=\pm1` for ascent/descent).  The measure is a vector
of cell masses :math:`m_c` on a spherical Voronoi mesh
(:mod:`meanfield.mesh`), the velocity field is evaluated at the cell centres by
quadrature over the cells,

.. math::

    X_c = \sigma P^\perp_{x_c} v_c,\qquad v_c = v\Big[\sum_{c'} m_{c'}\delta_{x_{c'}}\Big](x_c)

(``model.velocity(points, t, weights=m)``: every attention kind, any number of
heads, :math:`O(N d)` memory with the ``blas`` or ``numba`` kernels), and the
mass moves by conservative two-point upwind fluxes across the shared edges:

.. math::

    \frac{dm_i}{dt} = -\sum_{j\sim i} F_{ij},\qquad
    F_{ij} = \ell_{ij}\,u_{ij}\,\begin{cases} m_i/A_i & u_{ij}>0\\ m_j/A_j & u_{ij}\le 0\end{cases},\qquad
    u_{ij} = \tfrac12\,(X_i + X_j)\cdot n_{ij}.

The edge velocity :math:`u_{ij}` is the average of the two cell-centre
velocities dotted with the edge normal :math:`n_{ij}=(x_j-x_i)/\|x_j-x_i\|`
(which is normal to the whole edge).  Evaluating :math:`X` at the :math:`E\approx 3N`
edge midpoints instead would cost four times as much for a field that is smooth
on the mesh scale, and the upwind scheme is first order in :math:`h` anyway.
:math:`F_{ij} = -F_{ji}`, so :math:`\sum_i m_i` is conserved to round-off.

Time stepping is explicit strong-stability-preserving Runge–Kutta in Shu–Osher
form (Shu & Osher 1988; Gottlieb, Shu & Tadmor, *SIAM Rev.* 43 (2001) 89):
every stage is a convex combination of forward-Euler steps, and a forward-Euler
upwind step keeps :math:`m\ge0` when

.. math::

    \Delta t \le \mathrm{cfl}\cdot\min_i \frac{A_i}{\sum_{j} \ell_{ij}\max(u_{ij},0)}

(outflow of cell :math:`i`, :math:`u_{ij}` oriented from :math:`i` to :math:`j`), with
``cfl`` ≤ 1.  The step is chosen from the velocity at its start; since the
velocity changes between stages, a step whose stages or result would make a
cell negative is **rejected** and retried with half the step (never clipped),
and the rejections are counted.

Public API: :class:`GridStepper` (the :class:`solvers.loop.Stepper` of the
grid), :func:`solve_grid`, :class:`MassTracker`, :func:`convergence_study`,
:func:`grid_vs_particles`, :func:`w2_weighted`, :func:`bench_grid`.
"""
from __future__ import annotations

import dataclasses
import math
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from meanfield.errors import ConfigError, RunFailed
from meanfield.mesh import SphericalMesh, coarsen, fibonacci_mesh, initial_mass, mesh as build_mesh, sample_initial
from meanfield.model import Model
from meanfield.sphere import normalize
from meanfield.transport import w2
from solvers.loop import RunResult, StopRun, Tracker, run_loop, save_times
from solvers.trackers import EnergyTracker

__all__ = [
    "ShuOsher",
    "GRID_METHODS",
    "edge_velocity",
    "upwind_rate",
    "cfl_step",
    "GridStepper",
    "MassTracker",
    "solve_grid",
    "GridEnergyTracker",
    "GridSpeedTracker",
    "grid_init",
    "grid_mesh",
    "run_setup",
    "w2_weighted",
    "particle_states",
    "grid_vs_particles",
    "convergence_study",
    "observed_orders",
    "bench_grid",
]


# ----------------------------------------------------------------------------- SSP Runge–Kutta


@dataclass(frozen=True)
class ShuOsher:
    r"""An explicit SSP Runge–Kutta scheme in Shu–Osher form.

    .. math::

        u^{(0)} = m^n,\qquad
        u^{(k)} = \sum_{l<k} \big(\alpha_{kl}\,u^{(l)} + \beta_{kl}\,\Delta t\,L(u^{(l)}, t^n + c_l\Delta t)\big),
        \qquad m^{n+1} = u^{(s)}.

    With :math:`\alpha_{kl},\beta_{kl}\ge0` every stage is a convex combination of
    forward-Euler steps of size :math:`(\beta_{kl}/\alpha_{kl})\Delta t\le\Delta t`,
    so the scheme keeps positivity under the forward-Euler CFL condition
    (SSP coefficient 1 for all three schemes below).
    """

    name: str
    order: int
    alpha: tuple[tuple[float, ...], ...]
    beta: tuple[tuple[float, ...], ...]
    c: tuple[float, ...]

    @property
    def stages(self) -> int:
        return len(self.alpha)


#: grid time integrators by name
GRID_METHODS: dict[str, ShuOsher] = {
    "euler": ShuOsher("euler", 1, ((1.0,),), ((1.0,),), (0.0,)),
    "ssprk2": ShuOsher("ssprk2", 2, ((1.0,), (0.5, 0.5)), ((1.0,), (0.0, 0.5)), (0.0, 1.0)),
    "ssprk3": ShuOsher(
        "ssprk3",
        3,
        ((1.0,), (0.75, 0.25), (1.0 / 3.0, 0.0, 2.0 / 3.0)),
        ((1.0,), (0.0, 0.25), (0.0, 0.0, 2.0 / 3.0)),
        (0.0, 1.0, 0.5),
    ),
}


# ----------------------------------------------------------------------------- spatial operator


def edge_velocity(mesh: SphericalMesh, velocity: np.ndarray) -> np.ndarray:
    r"""Normal velocity on every edge, :math:`u_{ij}=\tfrac12(X_i+X_j)\cdot n_{ij}`, shape ``(E,)``.

    Parameters
    ----------
    mesh : SphericalMesh
    velocity : (N, 3) array
        Tangent velocity :math:`X_c` at the cell centres.
    """
    i, j = mesh.edges[:, 0], mesh.edges[:, 1]
    return 0.5 * np.einsum("ek,ek->e", velocity[i] + velocity[j], mesh.edge_normals)


def upwind_rate(mesh: SphericalMesh, mass: np.ndarray, u: np.ndarray) -> np.ndarray:
    r"""Upwind finite-volume rate :math:`dm_i/dt=-\sum_j F_{ij}`, shape ``(N,)``.

    .. math::

        F_{ij} = \ell_{ij}\,u_{ij}\,(m_i/A_i \text{ if } u_{ij}>0 \text{ else } m_j/A_j)

    Each flux is added to one cell and subtracted from the other, so the rates
    sum to zero up to round-off.
    """
    i, j = mesh.edges[:, 0], mesh.edges[:, 1]
    rho = mass / mesh.areas
    flux = mesh.edge_lengths * u * np.where(u > 0.0, rho[i], rho[j])
    return np.bincount(j, weights=flux, minlength=mesh.N) - np.bincount(i, weights=flux, minlength=mesh.N)


def _outflow(mesh: SphericalMesh, u: np.ndarray) -> np.ndarray:
    i, j = mesh.edges[:, 0], mesh.edges[:, 1]
    lu = mesh.edge_lengths * u
    return np.bincount(i, weights=np.maximum(lu, 0.0), minlength=mesh.N) + np.bincount(
        j, weights=np.maximum(-lu, 0.0), minlength=mesh.N
    )


def cfl_step(mesh: SphericalMesh, u: np.ndarray, cfl: float) -> float:
    r"""Largest stable step :math:`\mathrm{cfl}\cdot\min_i A_i/\sum_j\ell_{ij}\max(u_{ij},0)` (``inf`` if nothing moves)."""
    out = _outflow(mesh, u)
    moving = out > 0
    if not np.any(moving):
        return math.inf
    return float(cfl * np.min(mesh.areas[moving] / out[moving]))


# ----------------------------------------------------------------------------- the stepper


class GridStepper:
    r"""Finite-volume :class:`~solvers.loop.Stepper` of the continuity equation on a spherical mesh.

    .. math::

        \frac{dm_i}{dt} = -\sum_{j\sim i}\ell_{ij}u_{ij}\,\rho_{\mathrm{up}(ij)},\qquad
        \Delta t = \min\Big(\mathrm{cfl}\min_i\frac{A_i}{\sum_j\ell_{ij}u^+_{ij}},\ \Delta t_{\max},\ t_1-t\Big)

    (see the module docstring).  :meth:`advance` restarts its step-size
    selection at ``t0``, so the result depends only on ``(mass, t0, t1)``:
    resumed runs are bit-identical to uninterrupted ones.

    Parameters
    ----------
    model : Model
        Must have ``d = 3``.
    mesh : SphericalMesh
    method : {"ssprk3", "ssprk2", "euler"}
        Shu–Osher SSP integrator (:data:`GRID_METHODS`).
    cfl : float
        CFL number in (0, 1] for a guaranteed-positive forward-Euler stage;
        larger values are allowed (the positivity check then rejects steps).
    dt_max : float, optional
        Upper bound on the step (needed for accuracy when the velocity is tiny).
    backend : {"blas", "numba", "numpy"}, optional
        Attention kernel for the quadrature; default: the model's own, except
        ``"numpy"`` is replaced by ``"blas"`` (same result, :math:`O(Nd)` memory).
    max_halvings : int
        Rejections in a row after which the run fails (:class:`~meanfield.errors.RunFailed`).

    Attributes
    ----------
    steps, rejections, velocity_evaluations : int
        Accepted steps, rejected attempts, calls of the velocity quadrature.
    min_mass : float
        Smallest cell mass of any accepted stage.
    dt_min, dt_max_taken : float
        Smallest and largest accepted steps (the last step of an interval, cut
        to land on ``t1``, is not counted in ``dt_min``).

    Examples
    --------
    >>> import numpy as np
    >>> from meanfield.heads import HeadStack
    >>> from meanfield.model import ConstantHeads, Model
    >>> from meanfield.mesh import fibonacci_mesh, initial_mass
    >>> heads = ConstantHeads(HeadStack(B=np.eye(3)[None], V=np.eye(3)[None]))
    >>> model = Model(d=3, beta=4.0, attention="softmax", heads=heads)
    >>> mesh = fibonacci_mesh(500)
    >>> stepper = GridStepper(model, mesh)
    >>> m = stepper.advance(initial_mass(mesh, "vmf", kappa=2.0), 0.0, 0.1)
    >>> bool(abs(m.sum() - 1.0) < 1e-12 and m.min() >= 0)
    True
    """

    def __init__(
        self,
        model: Model,
        mesh: SphericalMesh,
        *,
        method: str = "ssprk3",
        cfl: float = 0.5,
        dt_max: float | None = None,
        backend: str | None = None,
        max_halvings: int = 60,
    ) -> None:
        if model.d != 3:
            raise ValueError(f"the grid solver works on S² (d = 3), got d={model.d}")
        try:
            self.scheme = GRID_METHODS[method]
        except KeyError:
            raise ValueError(f"unknown grid method {method!r}; choose from {sorted(GRID_METHODS)}") from None
        if not (cfl > 0 and math.isfinite(cfl)):
            raise ValueError(f"cfl must be a positive finite number, got {cfl!r}")
        if dt_max is not None and not (dt_max > 0):
            raise ValueError(f"dt_max must be positive, got {dt_max!r}")
        chosen = backend or ("blas" if model.backend == "numpy" else model.backend)
        self.model = model if chosen == model.backend else dataclasses.replace(model, backend=chosen)
        self.mesh = mesh
        self.method = method
        self.cfl = float(cfl)
        self.dt_max = None if dt_max is None else float(dt_max)
        self.max_halvings = int(max_halvings)
        self.reset_stats()

    # ------------------------------------------------------------------ statistics
    def reset_stats(self) -> None:
        """Zero the counters."""
        self.steps = 0
        self.rejections = 0
        self.velocity_evaluations = 0
        self.min_mass = math.inf
        self.dt_min = math.inf
        self.dt_max_taken = 0.0

    @property
    def info(self) -> dict[str, Any]:
        """Counters as a dict (merged into :attr:`RunResult.info` by :func:`solve_grid`)."""
        return {
            "solver": "grid",
            "method": self.method,
            "cfl": self.cfl,
            "cells": self.mesh.N,
            "grid_steps": self.steps,
            "rejections": self.rejections,
            "velocity_evaluations": self.velocity_evaluations,
            "min_mass": self.min_mass,
            "dt_min": self.dt_min,
            "dt_max": self.dt_max_taken,
        }

    # ------------------------------------------------------------------ operator
    def velocity(self, mass: np.ndarray, t: float) -> np.ndarray:
        r"""Tangent velocity :math:`X_c` at the cell centres by quadrature over the cells, ``(N, 3)``."""
        self.velocity_evaluations += 1
        vel = self.model.velocity(self.mesh.points, t, weights=mass)
        if not np.all(np.isfinite(vel)):
            raise RunFailed(f"non-finite velocity at t={t:.6g} (overflow in the attention kernel?)")
        return vel

    def rate(self, mass: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """``(dm/dt (N,), u (E,))`` at ``(mass, t)``."""
        u = edge_velocity(self.mesh, self.velocity(mass, t))
        return upwind_rate(self.mesh, mass, u), u

    # ------------------------------------------------------------------ stepping
    def _attempt(self, mass: np.ndarray, t: float, dt: float, first: np.ndarray) -> np.ndarray | None:
        """One SSP step; ``None`` when a stage would be negative (or non-finite)."""
        stages = [mass]
        rates = [first]
        for k in range(self.scheme.stages):
            new = np.zeros_like(mass)
            for l, (a, b) in enumerate(zip(self.scheme.alpha[k], self.scheme.beta[k])):
                if a:
                    new += a * stages[l]
                if b:
                    new += (b * dt) * rates[l]
            if not np.all(np.isfinite(new)) or new.min() < 0.0:
                return None
            stages.append(new)
            if k + 1 < self.scheme.stages:
                rates.append(self.rate(new, t + self.scheme.c[k + 1] * dt)[0])
        self.min_mass = min(self.min_mass, *(float(s.min()) for s in stages[1:]))
        return stages[-1]

    def step(self, mass: np.ndarray, t: float, dt: float | None = None) -> tuple[np.ndarray, float]:
        """One accepted step from ``t``; ``dt`` defaults to the CFL step.

        Returns ``(new mass, step taken)``; the step is halved on every rejection.
        """
        first, u = self.rate(mass, t)
        if dt is None:
            dt = min(cfl_step(self.mesh, u, self.cfl), self.dt_max or math.inf)
            if not math.isfinite(dt):
                raise ValueError("nothing moves and no dt_max is set: give dt explicitly")
        return self._accept(mass, t, dt, first), self._taken

    def _accept(self, mass: np.ndarray, t: float, dt: float, first: np.ndarray) -> np.ndarray:
        for _ in range(self.max_halvings + 1):
            new = self._attempt(mass, t, dt, first)
            if new is not None:
                self.steps += 1
                self._taken = dt
                self.dt_max_taken = max(self.dt_max_taken, dt)
                return new
            self.rejections += 1
            dt *= 0.5
        raise RunFailed(f"grid step rejected {self.max_halvings + 1} times at t={t:.6g} (dt={dt:.3g}): a cell keeps going negative")

    def advance(self, mass: np.ndarray, t0: float, t1: float) -> np.ndarray:
        """Integrate the cell masses from ``t0`` to exactly ``t1``.

        Parameters
        ----------
        mass : (N,) array
            Non-negative cell masses.
        t0, t1 : float
            ``t1 >= t0``.
        """
        m = np.array(mass, dtype=float, copy=True)
        if m.shape != (self.mesh.N,):
            raise ValueError(f"mass must have shape ({self.mesh.N},), got {m.shape}")
        t = float(t0)
        t1 = float(t1)
        while t < t1:
            remaining = t1 - t
            first, u = self.rate(m, t)
            dt = min(cfl_step(self.mesh, u, self.cfl), self.dt_max or math.inf)
            if dt >= remaining * (1.0 - 1e-12):
                dt = remaining
            elif dt > 0.5 * remaining:  # avoid a sliver at the end: two equal steps instead
                dt = 0.5 * remaining
            m = self._accept(m, t, dt, first)
            taken = self._taken
            if taken >= remaining:
                t = t1
            else:
                self.dt_min = min(self.dt_min, taken)
                t = t + taken
        return m


# ----------------------------------------------------------------------------- tracker and driver


class MassTracker:
    r"""Checks :math:`|\sum_c m_c - M_0|\le\mathrm{tol}` and :math:`\min_c m_c\ge0` at every saved frame.

    Records ``mass_error`` and ``min_mass``; raises
    :class:`~solvers.loop.StopRun` (``failed=True``) when either is violated or a
    mass is not finite.

    Parameters
    ----------
    total : float, optional
        Expected total mass :math:`M_0` (default: that of the first frame).
    tol : float
        Allowed absolute drift of the total (relative to :math:`\max(1, M_0)`).
    """

    name = "mass"

    def __init__(self, total: float | None = None, *, tol: float = 1e-12) -> None:
        self.total = total
        self.tol = float(tol)

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:
        m = np.asarray(state, dtype=float)
        if not np.all(np.isfinite(m)):
            raise StopRun(f"non-finite cell mass at t={t:.6g}", failed=True)
        total = float(m.sum())
        if self.total is None:
            self.total = total
        error = abs(total - self.total)
        low = float(m.min())
        if error > self.tol * max(1.0, abs(self.total)):
            raise StopRun(f"mass not conserved at t={t:.6g}: |sum m - {self.total:.17g}| = {error:.3g} > {self.tol:.1g}", failed=True)
        if low < 0.0:
            raise StopRun(f"negative cell mass {low:.3g} at t={t:.6g}", failed=True)
        return {"mass_error": error, "min_mass": low}


def _check_mass(mesh: SphericalMesh, mass0: np.ndarray) -> np.ndarray:
    m = np.asarray(mass0, dtype=float)
    if m.shape != (mesh.N,):
        raise ValueError(f"mass0 must have shape ({mesh.N},), got {m.shape}")
    if not np.all(np.isfinite(m)) or np.any(m < 0):
        raise ValueError("mass0 must be finite and non-negative")
    if abs(m.sum() - 1.0) > 1e-9:
        raise ValueError(f"mass0 must sum to 1, got {m.sum():.17g}")
    return m


def solve_grid(
    model: Model,
    mesh: SphericalMesh,
    mass0: np.ndarray,
    *,
    t_final: float,
    save_every: float,
    method: str = "ssprk3",
    cfl: float = 0.5,
    dt_max: float | None = None,
    backend: str | None = None,
    t_start: float = 0.0,
    trackers: Sequence[Tracker] | None = None,
    write: Callable[[float, np.ndarray, dict[str, float]], None] | None = None,
    progress: Any = None,
    keep_states: bool = True,
) -> RunResult:
    r"""Solve :math:`\partial_t\mu+\operatorname{div}_S(\mu X[\mu])=0` on ``mesh`` from ``mass0``.

    One-line wrapper of :class:`GridStepper` and :func:`solvers.loop.run_loop`
    over :func:`solvers.loop.save_times`; a :class:`MassTracker` is always
    run first (mass and positivity at every saved frame).

    Parameters
    ----------
    model : Model
    mesh : SphericalMesh
    mass0 : (N,) array
        Initial cell masses (non-negative, total 1).
    t_final, save_every : float
    method, cfl, dt_max, backend
        See :class:`GridStepper`.
    trackers : sequence of Tracker, optional
        Extra trackers (after the mass tracker).

    Returns
    -------
    RunResult
        ``states`` are cell masses; ``info`` adds the stepper's counters
        (``grid_steps``, ``rejections``, ``min_mass``, …).
    """
    m0 = _check_mass(mesh, mass0)
    stepper = GridStepper(model, mesh, method=method, cfl=cfl, dt_max=dt_max, backend=backend)
    times = save_times(t_start, t_final, save_every)
    result = run_loop(
        stepper, m0, times, trackers=[MassTracker(), *(trackers or ())], write=write, progress=progress, keep_states=keep_states
    )
    return dataclasses.replace(result, info={**result.info, **stepper.info})


# ----------------------------------------------------------------------------- config runs


class GridEnergyTracker(EnergyTracker):
    r"""Records :math:`E_{\mathrm{multi}}=\sum_h E_h` of the grid measure (seed 000) at every frame.

    .. math::

        E_h(\mu)=\frac1{2\beta}\sum_{c,c'} m_c m_{c'} e^{\beta x_c^\top B_h x_{c'}}

    (the midpoint quadrature of the double integral): :class:`solvers.trackers.EnergyTracker`
    on the cell centres.  Keys ``energy``, ``energy_theta`` and ``energy_h0``, ``energy_h1``, ….
    """

    def __init__(self, model: Model, mesh: SphericalMesh) -> None:
        super().__init__(model, points=mesh.points)
        self.mesh = mesh


class GridSpeedTracker:
    r"""Records :math:`\max_c\|X_c\|` over cells with mass; stops below ``tol`` (steady state)."""

    name = "steady"

    def __init__(self, stepper: GridStepper, tol: float = 0.0) -> None:
        self.stepper = stepper
        self.tol = float(tol)

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:
        mass = np.asarray(state, dtype=float)
        vel = self.stepper.model.velocity(self.stepper.mesh.points, t, weights=mass)
        speed = np.linalg.norm(vel, axis=1)
        top = float(np.max(speed[mass > 0])) if np.any(mass > 0) else 0.0
        if self.tol > 0 and top < self.tol:
            raise StopRun(f"steady state at t={t:.6g}: max |X| = {top:.3g} < {self.tol:g}")
        return {"max_speed": top}


#: ``[init]`` keys that each grid density kind reads
_INIT_KEYS: dict[str, tuple[str, ...]] = {
    "uniform": (),
    "vmf": ("mean", "kappa"),
    "mixture": ("components",),
    "function": ("expr",),
    "file": ("path",),
}


def grid_init(cfg: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(kind, params)`` of the grid density described by a resolved config's ``[init]``."""
    init = cfg["init"]
    kind = init["kind"]
    if kind not in _INIT_KEYS:
        raise ConfigError("init.kind", f"{kind!r} is not a grid density; the grid takes {', '.join(_INIT_KEYS)}")
    return kind, {key: init[key] for key in _INIT_KEYS[kind] if init.get(key) is not None}


def grid_mesh(cfg: Mapping[str, Any]) -> SphericalMesh:
    """The mesh of a resolved config's ``[grid]`` (``cells``, ``family``)."""
    grid = cfg.get("grid", {})
    return build_mesh(grid.get("cells", 2000), grid.get("family", "fibonacci"))


def run_setup(cfg: dict[str, Any], model: Model) -> Any:
    """``solver.kind = "grid"`` for :mod:`solvers.run`: mesh, initial masses, stepper and trackers.

    The state is the vector of cell masses (``state_name = "mass"``); the run
    file also stores the mesh generators ``points`` and ``areas``.  Trackers:
    :class:`MassTracker` (always), :class:`GridEnergyTracker` (``track.energy``),
    :class:`GridSpeedTracker` (``solver.steady_tol``).
    """
    from solvers.run import RunSetup

    if model.d != 3:
        raise ConfigError("model.d", f"the grid solver works on S² (d = 3), got d={model.d}")
    solver = cfg["solver"]
    msh = grid_mesh(cfg)
    kind, params = grid_init(cfg)
    mass0 = initial_mass(msh, kind, **params)
    dt_max = cfg["grid"]["dt_max"] or None  # 0: the CFL step alone (a slow field takes large steps)
    stepper = GridStepper(model, msh, method=solver["method"], cfl=solver["cfl"], dt_max=dt_max)
    trackers: list[Tracker] = [MassTracker(total=float(mass0.sum()))]  # baseline: the initial mass, also on resume
    if cfg.get("track", {}).get("energy", True):
        trackers.append(GridEnergyTracker(model, msh))
    trackers.append(GridSpeedTracker(stepper, tol=solver.get("steady_tol", 0.0)))
    static = {"points": np.array(msh.points), "areas": np.array(msh.areas)}
    return RunSetup(model, stepper, mass0, "mass", static, trackers, info=lambda: stepper.info)


# ----------------------------------------------------------------------------- W2 and particles


def w2_weighted(
    x: np.ndarray,
    a: np.ndarray,
    y: np.ndarray,
    b: np.ndarray,
    *,
    max_pairs: int = 64_000_000,
) -> float:
    r"""Exact :math:`W_2` with geodesic cost between two weighted atom clouds on :math:`S^2`.

    .. math::

        W_2^2(\mu,\nu) = \min_{\pi\in\Pi(a,b)}\sum_{pq}\pi_{pq}\,d_S(x_p,y_q)^2

    solved exactly by :func:`meanfield.transport.w2` (``ot.emd2``, network
    simplex).  Atoms of zero mass are
    dropped and both weight vectors normalised.

    When :math:`n\cdot m` exceeds ``max_pairs`` (the cost matrix would pass
    512 MB and the simplex a minute) the problem is first reduced: the larger
    cloud is quantised on the Voronoi cells of the smaller one (each cell's mass
    at its normalised barycentre) when the smaller has at most
    :math:`\sqrt{\text{max\_pairs}}` atoms, otherwise both are quantised on one
    Fibonacci mesh of :math:`\sqrt{\text{max\_pairs}}` cells
    (:func:`meanfield.mesh.coarsen`).  By the triangle inequality the result is
    then off by at most the largest radius of the partition used — about the
    resolution of the coarser measure, i.e. the same order as the
    discretisation errors a refinement study measures; the default
    ``max_pairs`` (8000 × 8000) keeps studies up to 8000 cells against any
    reference exact up to that quantisation of the reference only.
    """
    x, a = _clean(x, a)
    y, b = _clean(y, b)
    if x.shape[0] * y.shape[0] > max_pairs:
        if x.shape[0] < y.shape[0]:
            x, a, y, b = y, b, x, a
        if y.shape[0] ** 2 <= max_pairs:  # quantise the larger cloud on the Voronoi cells of the smaller one
            x, a = _quantise_on(x, a, y)
        else:  # both on one Fibonacci mesh
            common = fibonacci_mesh(max(12, math.isqrt(max_pairs)))
            x, a = coarsen(x, a, common)
            y, b = coarsen(y, b, common)
    return float(w2(x, y, a, b, cost="geodesic", method="exact"))


def _quantise_on(x: np.ndarray, a: np.ndarray, sites: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Barycentric quantisation of ``(x, a)`` on the Voronoi cells of ``sites`` (nearest site)."""
    from scipy.spatial import cKDTree

    cell = cKDTree(sites).query(x)[1]
    k = sites.shape[0]
    mass = np.bincount(cell, weights=a, minlength=k)
    bary = np.stack([np.bincount(cell, weights=a * x[:, c], minlength=k) for c in range(x.shape[1])], axis=1)
    keep = mass > 0
    return normalize(bary[keep]), mass[keep]


def _clean(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=float)
    w = np.asarray(w, dtype=float)
    keep = w > 0
    return np.ascontiguousarray(x[keep]), w[keep] / w[keep].sum()


def particle_states(
    model: Model,
    x0: np.ndarray,
    times: Sequence[float],
    *,
    weights: np.ndarray | None = None,
    dt: float | None = None,
) -> list[np.ndarray]:
    r"""Weighted particles :math:`\dot x_p = X[\mu^n](x_p)`, :math:`\mu^n=\sum_p w_p\delta_{x_p}`, by RK4.

    The particle solver (:class:`solvers.particle.ParticleStepper`, classical
    RK4 with the radial retraction) with a fixed step of at most ``dt``
    (default :math:`\min(0.05, 0.25/(1+\beta))`, so that :math:`\beta\,\Delta t\le 1/4`
    and the time error is far below the spatial errors measured against it).
    The weights are carried along the trajectories (Lagrangian transport).
    Returns the states at ``times`` (``times[0]`` is ``x0``'s time).
    """
    from solvers.particle import ParticleStepper

    h_max = dt if dt is not None else min(0.05, 0.25 / (1.0 + model.beta))
    stepper = ParticleStepper(model, method="rk4", dt=h_max, weights=None if weights is None else np.asarray(weights, dtype=float))
    x = normalize(np.asarray(x0, dtype=float))
    out = [x.copy()]
    for t0, t1 in zip(times[:-1], times[1:]):
        x = stepper.advance(x, float(t0), float(t1))
        out.append(x.copy())
    return out


def grid_vs_particles(
    model: Model,
    mesh: SphericalMesh,
    init_kind: str,
    init_params: Mapping[str, Any] | None = None,
    *,
    t_final: float,
    save_every: float,
    particles: int = 4000,
    particle_init: str = "quadrature",
    particle_dt: float | None = None,
    method: str = "ssprk3",
    cfl: float = 0.5,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    r"""The series :math:`t\mapsto W_2(\mu^h_t, \mu^n_t)` between the grid and a particle run.

    Both start from the same smooth density.  ``particle_init="quadrature"``
    (default) puts the particles at the centres of a Fibonacci mesh of
    ``particles`` cells with the midpoint-rule masses of the density
    (deterministic, :math:`W_2(\mu^n_0,\mu_0)=O(n^{-1/2})` with a small
    constant); ``"sample"`` draws ``particles`` i.i.d. points (Monte Carlo
    floor :math:`\sim\sqrt{\log n/n}`).

    Returns
    -------
    dict
        ``t`` (T,), ``w2`` (T,), and ``grid`` (the :class:`RunResult`).
    """
    params = dict(init_params or {})
    mass0 = initial_mass(mesh, init_kind, **params)
    result = solve_grid(model, mesh, mass0, t_final=t_final, save_every=save_every, method=method, cfl=cfl)
    x0, w0 = _particle_init(init_kind, params, particles, particle_init, seed)
    states = particle_states(model, x0, list(result.t), weights=w0, dt=particle_dt)
    w2 = np.array([w2_weighted(mesh.points, m, x, w0 if w0 is not None else np.full(len(x), 1.0 / len(x)))
                   for m, x in zip(result.states, states)])
    return {"t": result.t, "w2": w2, "grid": result}  # type: ignore[dict-item]


def _particle_init(kind: str, params: Mapping[str, Any], n: int, how: str, seed: int) -> tuple[np.ndarray, np.ndarray | None]:
    if how == "quadrature":
        pmesh = fibonacci_mesh(int(n))
        return pmesh.points.copy(), initial_mass(pmesh, kind, **params)
    if how == "sample":
        return sample_initial(kind, int(n), seed=seed, **params), None
    raise ValueError(f"particle_init must be 'quadrature' or 'sample', got {how!r}")


def observed_orders(h: Sequence[float], errors: Sequence[float]) -> list[float]:
    r"""Observed orders :math:`p_k=\log(e_{k-1}/e_k)/\log(h_{k-1}/h_k)` (``nan`` first and where undefined)."""
    out = [math.nan]
    for k in range(1, len(h)):
        e0, e1 = errors[k - 1], errors[k]
        if e0 > 0 and e1 > 0 and math.isfinite(e0) and math.isfinite(e1) and h[k - 1] != h[k]:
            out.append(math.log(e0 / e1) / math.log(h[k - 1] / h[k]))
        else:
            out.append(math.nan)
    return out


def convergence_study(
    model: Model,
    init_kind: str,
    init_params: Mapping[str, Any] | None = None,
    *,
    cells: Sequence[int],
    t_final: float,
    save_every: float | None = None,
    reference_cells: int | None = None,
    particles: int | None = None,
    particle_init: str = "quadrature",
    particle_dt: float | None = None,
    method: str = "ssprk3",
    cfl: float = 0.5,
    family: str = "fibonacci",
    seed: int = 0,
    max_pairs: int = 64_000_000,
    log: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    r"""Refinement study of the grid solver: :math:`W_2` errors at ``t_final`` against :math:`h`.

    .. math::

        e^{\mathrm{ref}}_h = W_2(\mu^h_T, \mu^{h_{\mathrm{ref}}}_T),\qquad
        e^{\mathrm{part}}_h = W_2(\mu^h_T, \mu^{n}_T),\qquad
        p = \frac{\log(e_{h_1}/e_{h_2})}{\log(h_1/h_2)},\quad h=\sqrt{4\pi/N}.

    The reference is the run on ``reference_cells`` cells, or the finest of
    ``cells`` (whose row then has ``w2_reference = nan``).  The particle run
    (when ``particles`` is given) uses :func:`particle_states` from the same
    density (see :func:`grid_vs_particles` for ``particle_init``).  For the
    upwind scheme the expected order is 1 for smooth solutions (numerical
    diffusion :math:`\sim h|u|` and the :math:`O(h)` quantisation of a smooth
    density by cell atoms); the particle error levels off at the particle
    resolution.  :math:`W_2` by :func:`w2_weighted` (exact below ``max_pairs``).

    Returns
    -------
    list of dict
        One row per mesh, coarse to fine, with keys ``cells``, ``h``,
        ``w2_reference``, ``order_reference``, ``w2_particles``,
        ``order_particles``, ``grid_steps``, ``rejections``, ``mass_error``,
        ``min_mass``, ``wall_time``, ``role`` (``"study"`` or ``"reference"``).
    """
    params = dict(init_params or {})
    say = log or (lambda _msg: None)
    if not cells:
        raise ValueError("cells must list at least one mesh size")
    study_meshes = {m.N: m for m in (build_mesh(int(c), family) for c in cells)}  # icosahedral sizes may coincide
    ref_mesh_ = build_mesh(int(reference_cells), family) if reference_cells is not None else study_meshes[max(study_meshes)]
    meshes = dict(study_meshes)
    meshes[ref_mesh_.N] = ref_mesh_
    ref_size = ref_mesh_.N
    every = t_final if save_every is None else save_every
    finals: dict[int, tuple[SphericalMesh, np.ndarray, dict[str, Any]]] = {}
    for size in sorted(meshes):
        msh = meshes[size]
        started = time.perf_counter()
        result = solve_grid(model, msh, initial_mass(msh, init_kind, **params), t_final=t_final, save_every=every,
                            method=method, cfl=cfl)
        if result.info["failed"]:
            raise RunFailed(f"grid run on {msh.N} cells failed: {result.info['stop_reason']}")
        info = dict(result.info)
        info["wall_time"] = time.perf_counter() - started
        info["mass_error"] = abs(float(result.final.sum()) - 1.0)
        finals[size] = (msh, result.final, info)
        say(f"grid N={msh.N}: {info['grid_steps']} steps, {info['rejections']} rejections, {info['wall_time']:.1f} s")
    part: tuple[np.ndarray, np.ndarray] | None = None
    if particles:
        x0, w0 = _particle_init(init_kind, params, int(particles), particle_init, seed)
        started = time.perf_counter()
        xT = particle_states(model, x0, [0.0, t_final], weights=w0, dt=particle_dt)[-1]
        part = (xT, w0 if w0 is not None else np.full(len(xT), 1.0 / len(xT)))
        say(f"particles n={len(xT)}: {time.perf_counter() - started:.1f} s")
    ref_mesh, ref_mass, _ = finals[ref_size]
    rows: list[dict[str, Any]] = []
    for size in sorted(finals):
        msh, mass, info = finals[size]
        is_ref = size == ref_size
        row: dict[str, Any] = {
            "cells": msh.N,
            "h": msh.h,
            "w2_reference": math.nan if is_ref else w2_weighted(msh.points, mass, ref_mesh.points, ref_mass, max_pairs=max_pairs),
            "w2_particles": math.nan if part is None else w2_weighted(msh.points, mass, part[0], part[1], max_pairs=max_pairs),
            "grid_steps": info["grid_steps"],
            "rejections": info["rejections"],
            "mass_error": info["mass_error"],
            "min_mass": info["min_mass"],
            "wall_time": info["wall_time"],
            "role": "reference" if is_ref else "study",
        }
        rows.append(row)
        say(f"W2 N={msh.N}: ref {row['w2_reference']:.4g}, particles {row['w2_particles']:.4g}")
    study = [r for r in rows if r["role"] == "study"]
    for key in ("reference", "particles"):
        orders = observed_orders([r["h"] for r in study], [r[f"w2_{key}"] for r in study])
        for r, p in zip(study, orders):
            r[f"order_{key}"] = p
    if part is not None:  # the particle order runs over every row, the reference included
        orders = observed_orders([r["h"] for r in rows], [r["w2_particles"] for r in rows])
        for r, p in zip(rows, orders):
            r["order_particles"] = p
    for r in rows:
        r.setdefault("order_reference", math.nan)
        r.setdefault("order_particles", math.nan)
    return rows


# ----------------------------------------------------------------------------- benchmark


def bench_grid(
    cells_list: Sequence[int] = (2000, 8000, 32000),
    *,
    beta: float = 4.0,
    attention: str = "softmax",
    backend: str = "auto",
    method: str = "ssprk3",
    family: str = "fibonacci",
    repeats: int = 1,
) -> list[dict[str, Any]]:
    r"""Time the grid solver's velocity quadrature and one SSP step, and their peak memory.

    For each mesh size: one identity head, a vMF(κ=4) density; the best of
    ``repeats`` timings of ``model.velocity`` on the cells (``velocity_s``) and
    of one step at the CFL size (``step_s``, ``stages`` velocity evaluations
    plus the fluxes), ``cell_steps_per_s = N / step_s``, and the peak of
    :mod:`tracemalloc` over one step (``peak_bytes``, ``bytes_per_cell``;
    NumPy allocations only — numba's own scratch is not traced).

    Returns
    -------
    list of dict
        Keys ``cells``, ``edges``, ``backend``, ``mesh_s``, ``velocity_s``,
        ``step_s``, ``cell_steps_per_s``, ``peak_bytes``, ``bytes_per_cell``.
    """
    from meanfield.heads import HeadStack
    from meanfield.mesh import mesh_from_points
    from meanfield.model import ConstantHeads

    model = Model(d=3, beta=beta, attention=attention, heads=ConstantHeads(HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])),
                  backend=backend)
    rows = []
    for cells in cells_list:
        started = time.perf_counter()
        msh = build_mesh(int(cells), family)
        mesh_s = time.perf_counter() - started
        if family == "fibonacci":  # time an uncached build too
            started = time.perf_counter()
            mesh_from_points(msh.points, family=family)
            mesh_s = time.perf_counter() - started
        mass = initial_mass(msh, "vmf", kappa=4.0)
        stepper = GridStepper(model, msh, method=method, backend=backend)
        stepper.velocity(mass, 0.0)  # warm-up (numba compilation, thread pool)
        vel_s = min(_timed(lambda: stepper.velocity(mass, 0.0)) for _ in range(max(1, repeats)))
        step_s = min(_timed(lambda: stepper.step(mass, 0.0)) for _ in range(max(1, repeats)))
        tracemalloc.start()
        try:
            stepper.step(mass, 0.0)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        rows.append({
            "cells": msh.N,
            "edges": msh.E,
            "backend": backend,
            "mesh_s": mesh_s,
            "velocity_s": vel_s,
            "step_s": step_s,
            "cell_steps_per_s": msh.N / step_s,
            "peak_bytes": int(peak),
            "bytes_per_cell": peak / msh.N,
        })
    return rows


def _timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started
