r"""Finite-volume solver of the transformer continuity equation on :math:`S^2`.

.. math::

    \partial_t\mu + \operatorname{div}_S(\mu\,X[\mu]) = 0,\qquad
    X[\mu](x) = \sigma P^\perp_x v[\mu](x)

(:math:`\sigma=\pm1` for ascent/descent).  The measure is a vector
of cell masses :math:`m_c` on a spherical Voronoi mesh
(:mod:`meanfield.geometry.mesh`), the velocity field is evaluated at the cell centres by
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
on the mesh scale.  :math:`F_{ij} = -F_{ji}`, so :math:`\sum_i m_i` is conserved to round-off.

This is the first-order scheme (``grid.order = 1``).  The default, ``grid.order = 2``
(:func:`muscl_rate`), takes the upwind density at the edge from a limited linear reconstruction of
each cell's density (:class:`meanfield.geometry.reconstruction.LinearReconstruction`, the
Barth–Jespersen limiter keeping it within the neighbours' values) instead of the cell average: second
order in :math:`h` where the density is smooth, first order at its extrema, and positive under the
step condition with the reconstructed outflow, :math:`\Delta t\le\mathrm{cfl}\cdot m_c/\mathrm{outflow}_c`.

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

Public API: :class:`GridSolver` (run it with :func:`meanfield.solve`), its
:class:`GridStepper` (the :class:`meanfield.solvers.loop.Stepper` of the grid)
and :class:`MassTracker`; refinement studies are in :mod:`meanfield.solvers.refinement`.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from meanfield.config import check_mask
from meanfield.errors import ConfigError, RunFailed
from meanfield.geometry.grid_config import mesh_of_grid
from meanfield.geometry.mesh import SphericalMesh
from meanfield.geometry.reconstruction import LIMITERS, LinearReconstruction
from meanfield.kernels.attention import BACKENDS
from meanfield.model import Model
from meanfield.solvers.signals import check
from meanfield.solvers.loop import RunSetup, StopRun, Tracker
from meanfield.solvers.particle_stepper import check_positive
from meanfield.solvers.trackers import EnergyTracker
from meanfield.noise import NoiseSchedule, check_noise_option, noise_from_config
from meanfield.solvers.noise import LaplaceBeltrami
from meanfield.heads.schedules import schedule_step

#: the shortest grid step taken, relative to the clock (max(1, |t|)): below it a run would not end (10¹² steps per
#: unit of time; a limiter-free second-order step at κ = 200 on 500 cells had fallen to 1.6e-19)
STEP_FLOOR = 1e-12

__all__ = [
    "ShuOsher",
    "GRID_METHODS",
    "edge_velocity",
    "upwind_rate",
    "cfl_step",
    "GRID_ORDERS",
    "muscl_rate",
    "GridStepper",
    "GridSolver",
    "MassTracker",
    "GridEnergyTracker",
    "GridSpeedTracker",
    "grid_init",
    "grid_mesh",
    "solver_from_config",
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

    The coefficients are held as integer numerators over one denominator per stage (``denominator``):
    SSP-RK3's weights 1/3 and 2/3 both round down in binary, and their sum, 1 − 5.55e-17, had scaled the
    mass by that factor at every step (a run of 18 000 steps had failed its mass check at 1e-12).
    """

    name: str
    order: int
    alpha: tuple[tuple[float, ...], ...]
    beta: tuple[tuple[float, ...], ...]
    c: tuple[float, ...]
    denominator: tuple[float, ...]

    @property
    def stages(self) -> int:
        return len(self.alpha)


#: grid time integrators by name
GRID_METHODS: dict[str, ShuOsher] = {
    "euler": ShuOsher("euler", 1, ((1.0,),), ((1.0,),), (0.0,), (1.0,)),
    "ssprk2": ShuOsher("ssprk2", 2, ((1.0,), (1.0, 1.0)), ((1.0,), (0.0, 1.0)), (0.0, 1.0), (1.0, 2.0)),
    "ssprk3": ShuOsher(  # numerators over (1, 4, 3): α = (1), (3/4, 1/4), (1/3, 0, 2/3)
        "ssprk3",
        3,
        ((1.0,), (3.0, 1.0), (1.0, 0.0, 2.0)),
        ((1.0,), (0.0, 1.0), (0.0, 0.0, 2.0)),
        (0.0, 1.0, 0.5),
        (1.0, 4.0, 3.0),
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


#: spatial orders of the grid scheme: 1 (upwind cell averages), 2 (limited linear reconstruction)
GRID_ORDERS: tuple[int, ...] = (1, 2)


def muscl_rate(mesh: SphericalMesh, faces: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Second-order upwind rate from reconstructed face values: ``(dm/dt (N,), outflow (N,))``.

    .. math::

        F_e = \ell_e\,u_e\begin{cases} r_{i,e} & u_e>0\\ r_{j,e} & u_e\le0\end{cases},\qquad
        \frac{dm_i}{dt} = -\sum_{e\ni i}\pm F_e,

    with :math:`r_{c,e}` the limited linear reconstruction of cell :math:`c` at the
    midpoint of edge :math:`e` (:meth:`LinearReconstruction.face_values`).  ``outflow``
    is :math:`\sum_{e}\ell_e u_e^+ r_{c,e}`, the mass a cell loses per unit time, so a
    forward-Euler step keeps :math:`m\ge0` when :math:`\Delta t\le m_c/\mathrm{outflow}_c`.
    """
    i, j = mesh.edges[:, 0], mesh.edges[:, 1]
    lu = mesh.edge_lengths * u
    forward = lu > 0.0
    flux = lu * np.where(forward, faces[:, 0], faces[:, 1])
    rate = np.bincount(j, weights=flux, minlength=mesh.N) - np.bincount(i, weights=flux, minlength=mesh.N)
    out = np.bincount(i, weights=np.where(forward, flux, 0.0), minlength=mesh.N) - np.bincount(
        j, weights=np.where(forward, 0.0, flux), minlength=mesh.N)
    return rate, out


# ----------------------------------------------------------------------------- the stepper


#: the velocity kernels a :class:`GridSolver` may name (``None``: the model's)
GRID_BACKENDS = ("auto", *BACKENDS)


def check_grid_options(*, method: Any, cfl: Any, dt_max: Any, order: Any, limiter: Any) -> None:
    """The grid scheme's options, checked where they are given (:class:`GridSolver` had taken ``method=0.5`` or
    ``cfl=-1`` and refused them only inside :func:`meanfield.solve`)."""
    if isinstance(order, (bool, np.bool_)) or order not in GRID_ORDERS:  # (True had run as order 1)
        raise ValueError(f"order must be one of {GRID_ORDERS}, got {order!r}")
    if limiter not in LIMITERS:
        raise ValueError(f"unknown limiter {limiter!r}; choose from {', '.join(LIMITERS)}")
    if not isinstance(method, str) or method not in GRID_METHODS:
        raise ValueError(f"unknown grid method {method!r}; choose from {sorted(GRID_METHODS)}")
    check_positive(cfl=cfl)
    if dt_max is not None and not (isinstance(dt_max, (int, float, np.integer, np.floating))
                                   and not isinstance(dt_max, (bool, np.bool_)) and dt_max > 0):
        raise ValueError(f"dt_max must be positive, got {dt_max!r}")  # (inf: no limit but the CFL condition; True had been 1)


class GridStepper:
    r"""Finite-volume :class:`~meanfield.solvers.loop.Stepper` of the continuity equation on a spherical mesh.

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
    order : {2, 1}
        Spatial order.  ``2``: the velocity is evaluated at the cell centroids and
        reconstructed to second order at the edge midpoints, the density is the
        Barth–Jespersen-limited linear reconstruction of
        :class:`~meanfield.geometry.reconstruction.LinearReconstruction`, and the step
        also satisfies :math:`\Delta t\le\mathrm{cfl}\,m_c/\sum_e\ell_e u_e^+r_{c,e}` (positivity
        of the reconstructed outflow).  ``1``: the upwind scheme on cell averages at the
        generators (first order in :math:`h`).
    limiter : {"barth-jespersen", "none"}
        Slope limiter of the second-order scheme (``"none"`` is not positive).
    noise : NoiseSchedule, optional
        Noisy tokens: adds the Laplace–Beltrami term :math:`\gamma(t)^{-1}\Delta_S\mu`
        (:class:`meanfield.solvers.noise.LaplaceBeltrami`) to every stage, and its outflow
        :math:`\gamma^{-1}\sum_j\ell_{ij}/\delta_{ij}` to the CFL rule:
        :math:`\Delta t\le\mathrm{cfl}\,A_i/(\sum_j\ell_{ij}u^+_{ij}+\gamma^{-1}\sum_j\ell_{ij}/\delta_{ij})`
        (and :math:`\mathrm{cfl}\,m_c/(\mathrm{outflow}_c+m_c\gamma^{-1}\sum_j\ell_{cj}/\delta_{cj}/A_c)` at second order).

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
    >>> from meanfield.geometry.mesh import fibonacci_mesh, initial_mass
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
        order: int = 2,
        limiter: str = "barth-jespersen",
        noise: NoiseSchedule | None = None,
    ) -> None:
        check_grid_options(method=method, cfl=cfl, dt_max=dt_max, order=order, limiter=limiter)
        if model.d != 3:
            raise ValueError(f"the grid solver works on S² (d = 3), got d={model.d}")
        self.scheme = GRID_METHODS[method]
        chosen = backend or ("blas" if model.backend == "numpy" else model.backend)
        self.model = model if chosen == model.backend else dataclasses.replace(model, backend=chosen)
        self.mesh = mesh
        self.method = method
        self.cfl = float(cfl)
        self.dt_max = None if dt_max is None else float(dt_max)
        self.max_halvings = int(max_halvings)
        self.order = int(order)
        self.limiter = limiter
        self.reconstruction = LinearReconstruction(mesh, limiter=limiter) if self.order == 2 else None
        #: where the velocity is evaluated and the cell masses sit in the quadrature
        self.points = mesh.centroids if self.order == 2 else mesh.points
        self.noise = noise
        self.diffusion = LaplaceBeltrami(mesh, noise) if noise is not None else None
        #: the longest step that follows time-dependent heads (the CFL step alone had stepped over an oscillation)
        self.schedule_step = schedule_step(getattr(model, "heads", None))  # (a model-like field without heads: none)
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
            "order": self.order,
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
        r"""Tangent velocity :math:`X_c` at :attr:`points` by quadrature over the cells, ``(N, 3)``."""
        self.velocity_evaluations += 1
        vel = self.model.velocity(self.points, t, weights=mass)
        if not np.all(np.isfinite(vel)):
            raise RunFailed(f"non-finite velocity at t={t:.6g} (overflow in the attention kernel?)")
        return vel

    def rate(self, mass: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """``(dm/dt (N,), u (E,))`` at ``(mass, t)``."""
        rate, u, _ = self._evaluate(mass, t)
        return rate, u

    def _evaluate(self, mass: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(dm/dt, u, outflow)``; ``outflow`` (second order only) is the reconstructed mass lost per unit time."""
        vel = self.velocity(mass, t)
        if self.reconstruction is None:
            u = edge_velocity(self.mesh, vel)
            rate, out = upwind_rate(self.mesh, mass, u), None
        else:
            u = self.reconstruction.edge_velocity(vel)
            faces = self.reconstruction.face_values(mass / self.mesh.areas)
            rate, out = muscl_rate(self.mesh, faces, u)
        if self.diffusion is not None:  # the noise: (1/γ) Δ_S μ, in the same stage
            rate = rate + self.diffusion.rate(mass, t)
        return rate, u, out

    def stable_step(self, mass: np.ndarray, u: np.ndarray, outflow: np.ndarray | None = None, *, t: float = 0.0) -> float:
        r"""The CFL step of the state: :math:`\mathrm{cfl}\min_c A_c/\sum_e\ell_e u_e^+`, and for the
        second-order scheme also :math:`\mathrm{cfl}\min_c m_c/\mathrm{outflow}_c` (``inf`` if nothing moves);
        with noise each outflow also holds the diffusive one at time ``t`` (see ``noise``)."""
        if self.diffusion is not None:
            diffusive = self.diffusion.outflow_rate(t)  # fraction of a cell's mass lost per unit time
            advective = _outflow(self.mesh, u) / self.mesh.areas
            dt = float(self.cfl / np.max(advective + diffusive))
            if outflow is not None:
                loss = outflow + mass * diffusive
                moving = loss > 0
                if np.any(moving):
                    dt = min(dt, float(self.cfl * np.min(mass[moving] / loss[moving])))
            return dt
        dt = cfl_step(self.mesh, u, self.cfl)
        if outflow is not None:
            moving = outflow > 0
            if np.any(moving):
                dt = min(dt, float(self.cfl * np.min(mass[moving] / outflow[moving])))
        return dt

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
            if self.scheme.denominator[k] != 1.0:  # one division by the stage's denominator: weights that sum to it exactly
                new /= self.scheme.denominator[k]
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
        first, u, out = self._evaluate(mass, t)
        if dt is None:
            dt = min(self.stable_step(mass, u, out, t=t), self.dt_max or math.inf)
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

    def _stalled(self, t: float, dt: float) -> None:
        why = ("with grid.limiter = 'none' the reconstruction is not positive, and a cell of almost no mass gets the "
               "face values of its heavy neighbour: use the default 'barth-jespersen'") if self.limiter == "none" and self.order == 2 \
            else "a cell's outflow is out of proportion to its mass"
        raise RunFailed(f"grid step {dt:.3g} at t={t:.6g}, below {STEP_FLOOR:g} of the clock: the run would not end ({why})")

    def advance(self, mass: np.ndarray, t0: float, t1: float) -> np.ndarray:
        """Integrate the cell masses from ``t0`` to exactly ``t1``.

        A CFL step below :data:`STEP_FLOOR` times ``max(1, |t1|)`` ends the run with :class:`RunFailed`
        (it would not reach ``t1``; ``t + dt`` may not even move).

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
            check()
            remaining = t1 - t
            first, u, out = self._evaluate(m, t)
            dt = min(self.stable_step(m, u, out, t=t), self.dt_max or math.inf, self.schedule_step)
            if dt < STEP_FLOOR * max(1.0, abs(t1)):
                self._stalled(t, dt)
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
    :class:`~meanfield.solvers.loop.StopRun` (``failed=True``) when either is violated or a
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
            raise StopRun(f"non-finite cell mass at t={t:.6g}", bad_state=True)
        total = float(m.sum())
        if self.total is None:
            self.total = total
        error = abs(total - self.total)
        low = float(m.min())
        if error > self.tol * max(1.0, abs(self.total)):
            raise StopRun(f"mass not conserved at t={t:.6g}: |sum m - {self.total:.17g}| = {error:.3g} > {self.tol:.1g}", bad_state=True)
        if low < 0.0:
            raise StopRun(f"negative cell mass {low:.3g} at t={t:.6g}", bad_state=True)
        return {"mass_error": error, "min_mass": low}


@dataclass(frozen=True, kw_only=True)
class GridSolver:
    r"""Numerical options of the finite-volume solver on a spherical Voronoi mesh.

    The problem's measure is a density given by its cell masses on ``problem.mesh``.

    Parameters
    ----------
    method : {"ssprk3", "ssprk2", "euler"}
        Shu–Osher SSP integrator.
    cfl : float
        CFL number (steps whose stages would make a cell negative are rejected and halved).
    dt_max : float, optional
        Largest step (default: the CFL condition and the save times alone).
    backend : {"auto", "blas", "fused", "harmonic", "local", "numba", "numpy"}, optional
        Attention kernel of the velocity quadrature (default: the model's).
    order : {2, 1}
        Spatial order (:class:`GridStepper`).
    limiter : {"barth-jespersen", "none"}
        Slope limiter of the second-order scheme.
    noise : NoiseSchedule, optional
        Noisy tokens: the Laplace–Beltrami term :math:`\gamma(t)^{-1}\Delta_S\mu` (:class:`GridStepper`).

    Examples
    --------
    >>> import meanfield as mf
    >>> model = mf.Model(d=3, beta=4.0, attention="softmax", heads=mf.heads.identity(3))
    >>> m = mf.mesh(400)
    >>> run = mf.solve(mf.Problem(model, mf.initial_mass(m, "vmf", kappa=2.0), mesh=m), mf.GridSolver(), t_final=0.5)
    >>> run.kind, abs(float(run.mass[-1].sum()) - 1.0) < 1e-12  # mass is kept to round-off
    ('grid', True)
    """

    method: str = "ssprk3"
    cfl: float = 0.5
    dt_max: float | None = None
    backend: str | None = None
    order: int = 2
    limiter: str = "barth-jespersen"
    noise: NoiseSchedule | None = None
    kind: ClassVar[str] = "grid"

    def __post_init__(self) -> None:
        check_noise_option(self.noise)
        check_grid_options(method=self.method, cfl=self.cfl, dt_max=self.dt_max, order=self.order, limiter=self.limiter)
        if self.backend is not None and not (isinstance(self.backend, str) and self.backend in GRID_BACKENDS):
            # ("" or {} had run with the default backend)
            raise ValueError(f"backend must be one of {GRID_BACKENDS} (or None: the model's), got {self.backend!r}")

    def setup(self, problem: Any, *, energy: bool = True, speed: bool = True, steady_tol: float = 0.0) -> RunSetup:
        """Stepper and trackers: mass and positivity (always), the energies, the largest speed."""
        if not problem.on_grid:
            raise ValueError("the grid solver takes a density on a mesh: Problem(model, masses, mesh=mesh)")
        check_noise_option(self.noise, steady_tol=steady_tol)
        check_mask(problem.model.mask, "grid", on_grid=problem.on_grid)  # a causal mask: refused here, as by the config
        mesh, mass0 = problem.mesh, problem.initial
        stepper = GridStepper(problem.model, mesh, method=self.method, cfl=self.cfl, dt_max=self.dt_max,
                              backend=self.backend, order=self.order, limiter=self.limiter, noise=self.noise)
        trackers: list[Tracker] = [MassTracker(total=float(mass0.sum()))]  # baseline: the initial mass, also on resume
        if energy:
            trackers.append(GridEnergyTracker(problem.model, mesh, points=stepper.points))
        if speed:
            trackers.append(GridSpeedTracker(stepper, tol=steady_tol))
        static = {"points": np.array(stepper.points), "areas": np.array(mesh.areas)}
        return RunSetup(problem.model, stepper, mass0, "mass", static, trackers, info=lambda: stepper.info)


# ----------------------------------------------------------------------------- config runs


class GridEnergyTracker(EnergyTracker):
    r"""Records :math:`E_{\mathrm{multi}}=\sum_h E_h` of the grid measure (Pendharkar, arXiv 2605.04279) at every frame.

    .. math::

        E_h(\mu)=\frac1{2\beta}\sum_{c,c'} m_c m_{c'} e^{\beta x_c^\top B_h x_{c'}}

    (the midpoint quadrature of the double integral, at the solver's quadrature points
    :math:`x_c`: the centroids for the second-order scheme, the generators for the first):
    :class:`meanfield.solvers.trackers.EnergyTracker` on those points.  Keys ``energy``,
    ``energy_theta`` and ``energy_h0``, ``energy_h1``, ….
    """

    def __init__(self, model: Model, mesh: SphericalMesh, *, points: np.ndarray | None = None) -> None:
        super().__init__(model, points=mesh.points if points is None else points)
        self.mesh = mesh


class GridSpeedTracker:
    r"""Records :math:`\max_c\|X_c\|` over cells with mass; stops below ``tol`` (steady state)."""

    name = "steady"

    def __init__(self, stepper: GridStepper, tol: float = 0.0) -> None:
        self.stepper = stepper
        self.tol = float(tol)

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:
        mass = np.asarray(state, dtype=float)
        vel = self.stepper.model.velocity(self.stepper.points, t, weights=mass)
        speed = np.linalg.norm(vel, axis=1)
        top = float(np.max(speed[mass > 0])) if np.any(mass > 0) else 0.0
        if self.tol > 0 and top < self.tol:
            raise StopRun(f"steady state at t={t:.6g}: max |X| = {top:.3g} < {self.tol:g}", values={"max_speed": top})
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
    """The mesh of a resolved config's ``[grid]`` (:func:`meanfield.geometry.grid_config.mesh_of_grid`)."""
    return mesh_of_grid(cfg.get("grid", {}))


def solver_from_config(cfg: Mapping[str, Any]) -> GridSolver:
    """The :class:`GridSolver` of a resolved config (``solver.method``, ``solver.cfl``, ``grid.dt_max``,
    ``grid.order``, ``grid.limiter``, ``[noise]``)."""
    solver, grid = cfg["solver"], cfg["grid"]
    return GridSolver(method=solver["method"], cfl=solver["cfl"], dt_max=grid["dt_max"] or None,
                      order=int(grid.get("order", 2)), limiter=grid.get("limiter", "barth-jespersen"),
                      noise=noise_from_config(cfg))
