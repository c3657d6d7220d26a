r"""An independent reference for the continuity equation on :math:`S^2` with :math:`Q=K=V=I` (softmax).

For a density that depends only on the polar angle :math:`\theta`, the azimuthal
integrals of the softmax velocity are Bessel functions,

.. math::

    \int_0^{2\pi} e^{\beta\langle x,y\rangle}\,d\psi = 2\pi e^{\beta\cos\theta\cos\theta'} I_0(\beta\sin\theta\sin\theta'),\qquad
    \int_0^{2\pi} e^{\beta\langle x,y\rangle}\cos\psi\,d\psi = 2\pi e^{\beta\cos\theta\cos\theta'} I_1(\beta\sin\theta\sin\theta'),

so the velocity is :math:`X = X_\theta(\theta)\,e_\theta` with

.. math::

    X_\theta(\theta) = \frac{\int \rho\,\sin\theta'\,e^{\beta\cos(\theta-\theta')}\big[\sin\theta'\cos\theta\,\tilde I_1
        - \cos\theta'\sin\theta\,\tilde I_0\big]\,d\theta'}{\int\rho\,\sin\theta'\,e^{\beta\cos(\theta-\theta')}\tilde I_0\,d\theta'},
    \qquad \tilde I_\nu = e^{-\beta\sin\theta\sin\theta'} I_\nu(\beta\sin\theta\sin\theta').

The PDE becomes one-dimensional and is solved in Lagrangian form: the polar
angles :math:`\theta(s, t)` of the rings that start at Gauss–Legendre nodes
:math:`s_k\in(0,\pi)` move with :math:`\dot\theta = X_\theta(\theta)` (DOP853 at
tight tolerances), carrying their initial masses, and the density is
:math:`\rho(\theta(s,t),t) = \rho_0(s)\sin s/(\sin\theta\,\partial_s\theta)` with
:math:`\partial_s\theta` from the Legendre interpolant of :math:`\theta(\cdot,t)`.
Cell masses come from a degree-5 rule on every fan triangle.

None of this shares code with the finite-volume solver: it is what the tests
measure the solver's convergence order against.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.polynomial import legendre
from scipy.integrate import solve_ivp
from scipy.special import ive

__all__ = ["AxisymmetricReference", "cell_integrals"]


def _vmf(theta: np.ndarray, kappa: float) -> np.ndarray:
    """The von Mises–Fisher density about +z with respect to the area of S²."""
    return kappa / (2.0 * math.pi * (1.0 - math.exp(-2.0 * kappa))) * np.exp(kappa * (np.cos(theta) - 1.0))


class AxisymmetricReference:
    """Density of the vMF(+z, κ) initial condition at time ``t`` under softmax attention with Q = K = V = I."""

    def __init__(self, *, beta: float, kappa: float, t_final: float, nodes: int = 160) -> None:
        self.beta, self.kappa = float(beta), float(kappa)
        u, w = legendre.leggauss(nodes)
        self.u = u
        self.s = 0.5 * math.pi * (u + 1.0)
        ring = 2.0 * math.pi * _vmf(self.s, kappa) * np.sin(self.s) * (0.5 * math.pi * w)
        self.ring_mass = ring
        sol = solve_ivp(lambda t, th: self.velocity(th, th), (0.0, t_final), self.s, method="DOP853",
                        rtol=1e-13, atol=1e-14)
        assert sol.success, sol.message
        self.theta = sol.y[:, -1]
        self.coef = legendre.legfit(u, self.theta - self.s, nodes - 1)

    def velocity(self, at: np.ndarray, rings: np.ndarray) -> np.ndarray:
        """Polar velocity X_θ at the angles ``at`` of the measure held by the rings at angles ``rings``."""
        b = self.beta
        th = at[:, None]
        tp = rings[None, :]
        arg = b * np.sin(th) * np.sin(tp)
        weight = self.ring_mass[None, :] * np.exp(b * (np.cos(th - tp) - 1.0))
        num = weight * (np.sin(tp) * np.cos(th) * ive(1, arg) - np.cos(tp) * np.sin(th) * ive(0, arg))
        den = weight * ive(0, arg)
        return num.sum(axis=1) / den.sum(axis=1)

    def _map(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = 0.5 * math.pi * (u + 1.0)
        theta = s + legendre.legval(u, self.coef)
        dtheta = 1.0 + legendre.legval(u, legendre.legder(self.coef)) * (2.0 / math.pi)
        return theta, dtheta

    def density(self, theta: np.ndarray) -> np.ndarray:
        """The density at polar angles ``theta`` (Newton on the Legendre interpolant of the ring map)."""
        theta = np.asarray(theta, dtype=float)
        u = np.interp(theta, self.theta, self.u)
        for _ in range(8):
            value, slope = self._map(u)
            u = np.clip(u - (value - theta) / (slope * 0.5 * math.pi), -1.0, 1.0)
        s = 0.5 * math.pi * (u + 1.0)
        _, dtheta = self._map(u)
        return _vmf(s, self.kappa) * np.sin(s) / (np.maximum(np.sin(theta), 1e-300) * dtheta)

    def at(self, x: np.ndarray) -> np.ndarray:
        """The density at unit vectors ``x`` (n, 3)."""
        return self.density(np.arccos(np.clip(x[:, 2], -1.0, 1.0)))


# Dunavant's degree-5 rule on the triangle: barycentric points and weights (sum 1)
_A1, _B1 = 0.059715871789770, 0.470142064105115
_A2, _B2 = 0.797426985353087, 0.101286507323456
_BARY = np.array([[1 / 3, 1 / 3, 1 / 3], [_A1, _B1, _B1], [_B1, _A1, _B1], [_B1, _B1, _A1],
                  [_A2, _B2, _B2], [_B2, _A2, _B2], [_B2, _B2, _A2]])
_W = np.array([0.225, *[0.132394152788506] * 3, *[0.125939180544827] * 3])


def cell_integrals(mesh, f) -> np.ndarray:
    r""":math:`\int_{\Omega_c} f\,dA` for every cell: fan triangles from the generator, radially projected.

    A flat triangle :math:`(a,b,c)` maps onto the sphere by :math:`p\mapsto p/\|p\|`
    with area element :math:`\delta/\|p\|^3` (:math:`\delta` its plane's distance from 0).
    """
    lens = np.diff(mesh.region_ptr)
    cell = np.repeat(np.arange(mesh.N), lens)
    start = np.repeat(mesh.region_ptr[:-1], lens)
    pos = np.arange(mesh.region_vertices.size)
    following = mesh.region_vertices[start + (pos - start + 1) % np.repeat(lens, lens)]
    a = mesh.points[cell]
    b = mesh.vertices[mesh.region_vertices]
    cc = mesh.vertices[following]
    cross = np.cross(b - a, cc - a)
    flat = 0.5 * np.linalg.norm(cross, axis=1)
    normal = cross / np.maximum(np.linalg.norm(cross, axis=1, keepdims=True), 1e-300)
    delta = np.abs(np.einsum("tk,tk->t", normal, a))
    p = _BARY[:, 0, None, None] * a + _BARY[:, 1, None, None] * b + _BARY[:, 2, None, None] * cc  # (7, T, 3)
    r = np.linalg.norm(p, axis=2)
    vals = f((p / r[..., None]).reshape(-1, 3)).reshape(r.shape)
    per_triangle = np.sum(_W[:, None] * vals * (delta / r**3), axis=0) * flat
    return np.bincount(cell, weights=per_triangle, minlength=mesh.N)
