r"""The noisy transformer in the solvers: a stochastic particle stepper and the grid's Laplace–Beltrami term.

.. math::

    dx_i = P^\perp_{x_i}v_i\,dt + \sqrt{2/\gamma(t)}\,P^\perp_{x_i}\circ dW_i
    \quad\longleftrightarrow\quad
    \partial_t\mu + \operatorname{div}_S(\mu X[\mu]) = \gamma(t)^{-1}\Delta_S\mu

(Stratonovich noise; in Itô form the drift is :math:`P^\perp_{x_i}v_i-\tfrac{d-1}{\gamma(t)}x_i`; the McKean–Vlasov equation of noisy tokens; A. Shalova and A. Schlichting, *Solutions of
stationary McKean–Vlasov equation on a high-dimensional sphere and other Riemannian
manifolds*, arXiv 2412.14813).

* Particles: :class:`NoisyParticleStepper` takes geometric Euler–Maruyama steps
  (:func:`meanfield.noise.geometric_em_step`), weak order 1.  The increments of the save
  interval :math:`[t_0,t_1]` come from :func:`meanfield.noise.interval_generator`, a stream
  keyed by ``(seed, t0)``, and the interval is cut into the same steps as the deterministic
  schemes, so the result depends only on ``(x, t0, t1)``: a run resumed from a saved frame
  equals the uninterrupted one bit for bit.  Only this Euler–Maruyama step is stochastic;
  the Runge–Kutta schemes of :mod:`meanfield.solvers.integrators` are deterministic.
* Grid: :class:`LaplaceBeltrami` is the two-point finite-volume diffusion on the spherical
  Voronoi mesh,

  .. math::

      \Big(\frac{dm_i}{dt}\Big)_{\mathrm{noise}} = \frac1{\gamma(t)}\sum_{j\sim i}\frac{\ell_{ij}}{\delta_{ij}}
      \Big(\frac{m_j}{A_j}-\frac{m_i}{A_i}\Big),\qquad \delta_{ij} = \angle(x_i, x_j)

  (edge length :math:`\ell_{ij}`, geodesic distance :math:`\delta_{ij}` of the generators,
  whose bisector the Voronoi edge lies on, so the flux is consistent).  The flux is
  antisymmetric, so mass is conserved to round-off, and a forward-Euler step keeps
  :math:`m\ge0` when :math:`\Delta t\,\gamma^{-1}\sum_j\ell_{ij}/\delta_{ij}\le A_i`: the
  grid's CFL rule adds this outflow to the advective one (:meth:`LaplaceBeltrami.outflow_rate`).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from meanfield.geometry.mesh import SphericalMesh
from meanfield.geometry.sphere import geodesic_distance
from meanfield.noise import NoiseSchedule, geometric_em_step, interval_generator
from meanfield.solvers.particle_stepper import fail_if_not_finite
from meanfield.solvers.signals import check

__all__ = ["NoisyParticleStepper", "LaplaceBeltrami"]


class NoisyParticleStepper:
    r"""Geometric Euler–Maruyama :class:`~meanfield.solvers.loop.Stepper` of :math:`dx=X\,dt+\sqrt{2/\gamma}P^\perp\circ dW` (Stratonovich).

    Parameters
    ----------
    base : ParticleStepper-like
        Gives the drift ``base.stage_field(x, t)`` (the model's tangent velocity), the step
        ``base.dt`` and the counters ``base.stats``.
    noise : NoiseSchedule
        :math:`\gamma(t)` and the seed.

    Raises
    ------
    ValueError
        Heads that switch at the layers (:class:`~meanfield.heads.schedules.LayerSchedule`, config
        ``weights.schedule = "layers"``): the steps would cross the switches.

    Notes
    -----
    Each save interval :math:`[t_0,t_1]` is cut into :math:`K=\lceil (t_1-t_0)/\Delta t\rceil`
    equal steps :math:`h`; step :math:`k` uses :math:`\gamma(t_0+kh)` (left point: the scheme of the Itô form, whose drift
    :math:`-\tfrac{d-1}{\gamma}x` the radial projection supplies) and the :math:`k`-th draw of
    ``interval_generator(seed, t0)``.
    """

    def __init__(self, base: Any, noise: NoiseSchedule) -> None:
        if getattr(getattr(base.model, "heads", None), "pieces", None) is not None:  # (a step across an integer time had kept the last layer's heads)
            raise ValueError("noise does not combine with heads that switch at the layers (a LayerSchedule; the config's "
                             "weights.schedule = 'layers'): the Euler–Maruyama steps would cross the layer switches; drop one of them")
        self.base = base
        self.noise = noise
        self.model = base.model
        self.weights = getattr(base, "weights", None)
        self.stats = base.stats

    @property
    def dt(self) -> float:
        return float(self.base.dt)

    def field(self, x: np.ndarray, t: float) -> np.ndarray:
        return self.base.field(x, t)

    def taken_step(self) -> float | None:
        """The largest step since the last call (:meth:`ParticleStepper.taken_step`)."""
        return self.base.taken_step()

    def advance(self, state: np.ndarray, t0: float, t1: float) -> np.ndarray:
        """Integrate from ``t0`` to exactly ``t1`` with the increments of the interval's stream."""
        if t1 <= t0:
            return state
        x = np.asarray(state, dtype=float)
        steps = max(1, math.ceil((t1 - t0) / self.dt - 1e-9))
        h = (t1 - t0) / steps
        self.base.record_step(h)
        rng = interval_generator(self.noise.seed, t0)
        for k in range(steps):
            check()
            t = t0 + k * h
            drift = self.base.stage_field(x, t)  # the tracker's evaluation of this frame, if kept (ParticleStepper.field)
            x = geometric_em_step(x, drift, h, self.noise.gamma_at(t), rng.standard_normal(x.shape))
            self.stats["steps"] += 1
            fail_if_not_finite(x, t + h)
        return x


class LaplaceBeltrami:
    r"""Two-point finite-volume Laplace–Beltrami operator on a spherical Voronoi mesh, times :math:`1/\gamma(t)`.

    .. math::

        (L m)_i = \frac1{\gamma(t)}\sum_{j\sim i} w_{ij}\Big(\frac{m_j}{A_j}-\frac{m_i}{A_i}\Big),
        \qquad w_{ij}=\frac{\ell_{ij}}{\angle(x_i,x_j)}

    Parameters
    ----------
    mesh : SphericalMesh
        Reads ``edges``, ``edge_lengths``, ``points`` (generators) and ``areas``.
    noise : NoiseSchedule

    Examples
    --------
    >>> from meanfield.geometry.mesh import fibonacci_mesh
    >>> mesh = fibonacci_mesh(200)
    >>> op = LaplaceBeltrami(mesh, NoiseSchedule(gamma=1.0))
    >>> bool(abs(op.rate(mesh.areas / mesh.areas.sum(), 0.0)).max() < 1e-15)  # the uniform density is steady
    True
    """

    def __init__(self, mesh: SphericalMesh, noise: NoiseSchedule) -> None:
        self.mesh = mesh
        self.noise = noise
        i, j = mesh.edges[:, 0], mesh.edges[:, 1]
        #: transmissibilities ℓ_ij / δ_ij, one per edge
        self.weights = mesh.edge_lengths / geodesic_distance(mesh.points[i], mesh.points[j])
        #: Σ_j w_ij / A_i: the per-cell outflow rate of density at γ = 1
        self.cell_rate = (np.bincount(i, weights=self.weights, minlength=mesh.N)
                          + np.bincount(j, weights=self.weights, minlength=mesh.N)) / mesh.areas

    def rate(self, mass: np.ndarray, t: float) -> np.ndarray:
        r""":math:`(dm/dt)_{\mathrm{noise}}`, shape ``(N,)``; sums to zero up to round-off."""
        mesh = self.mesh
        i, j = mesh.edges[:, 0], mesh.edges[:, 1]
        rho = mass / mesh.areas
        flux = (self.noise.diffusivity(t) * self.weights) * (rho[i] - rho[j])  # from i to j
        return np.bincount(j, weights=flux, minlength=mesh.N) - np.bincount(i, weights=flux, minlength=mesh.N)

    def outflow_rate(self, t: float) -> np.ndarray:
        r"""Per-cell :math:`\gamma(t)^{-1}\sum_j w_{ij}/A_i`: a forward-Euler step loses the fraction :math:`\Delta t` times this of its mass."""
        return self.noise.diffusivity(t) * self.cell_rate
