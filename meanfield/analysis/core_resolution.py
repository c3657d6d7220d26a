r"""Whether a grid still resolves the cores of the two clusters that form at low temperature.

At large β the tokens gather around the two atoms :math:`\pm e` of :math:`\Pi_\sharp\rho_0`
(Theorem 1 of Alcalde, Bungert, Riedl and Roith, *Quantifying Concentration Phenomena of
Mean-Field Transformers in the Low-Temperature Regime*, arXiv 2605.10931), and the cores of the
clusters keep contracting.  Near its minimum :math:`W_2(\rho_t,\Pi_\sharp\rho_0)` is about

.. math::

    W_2^2 \approx \sum_\pm m_\pm\big(\theta(c_\pm,\pm e)^2 + r_\pm^2\big),\qquad
    r_\pm^2 = \frac{1}{m_\pm}\sum_{i\in\pm} m_i\,\theta(x_i, c_\pm)^2,

with :math:`c_\pm` the centre of the cluster on each side of the plane :math:`\langle x,e\rangle=0`,
:math:`m_\pm` its mass and :math:`\theta` the geodesic angle.  Once the r.m.s. radius
:math:`r_\pm` falls below the spacing :math:`h = \sqrt{|\Omega_c|}` of the cell :math:`\Omega_c`
at the centre, the cluster sits on a cell or two and the grid's :math:`W_2` from there on is the
mesh's, not the flow's: :func:`core_resolution` finds that time.

Public API: :class:`CoreResolution`, :func:`core_resolution`.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["CoreResolution", "core_resolution"]


@dataclass(frozen=True)
class CoreResolution:
    r"""The two clusters' r.m.s. radii against the spacing of the cells at their centres, per frame.

    Attributes
    ----------
    t : (T,) array
    radius : (T, 2) array
        r.m.s. geodesic radius :math:`r_\pm` of the mass on the side :math:`\langle x,e\rangle>0`
        (column 0) and :math:`<0` (column 1) about its centre.
    spacing : (T, 2) array
        :math:`\sqrt{|\Omega_c|}` of the cell nearest each centre.
    offset : (T, 2) array
        Geodesic angle of each centre from its atom :math:`\pm e`.
    axis : (3,) array
        :math:`e`, unit.
    """

    t: NDArray[np.float64]
    radius: NDArray[np.float64]
    spacing: NDArray[np.float64]
    offset: NDArray[np.float64]
    axis: NDArray[np.float64]

    @property
    def unresolved(self) -> NDArray[np.bool_]:
        """Frames where a cluster's radius is below the spacing of the cells at its centre."""
        return np.any(self.radius < self.spacing, axis=1)

    @property
    def t_unresolved(self) -> float:
        """The first such time (NaN when the cores stay resolved)."""
        hits = np.flatnonzero(self.unresolved)
        return float(self.t[hits[0]]) if hits.size else math.nan

    def describe(self, t_min: float | None = None) -> str:
        """The warning a reader needs, or ``""`` when the cores stay resolved."""
        hits = np.flatnonzero(self.unresolved)
        if not hits.size:
            return ""
        k = int(hits[0])
        below = self.radius[k] < self.spacing[k]  # False where a side holds no mass (NaN)
        side = int(np.argmax(np.where(below, self.spacing[k] - self.radius[k], -np.inf)))
        when = ""
        if t_min is not None and math.isfinite(t_min) and self.t[k] <= t_min:
            when = f", before t_min = {t_min:.4g}: W2_min is the mesh's, not the flow's"
        atom = ", ".join(f"{v + 0.0:.3g}" for v in (self.axis if side == 0 else -self.axis))
        return (f"from t = {self.t[k]:.4g} the r.m.s. radius of the cluster at ({atom}) "
                f"({self.radius[k, side]:.3g} rad) is below the spacing of the cells at its centre "
                f"({self.spacing[k, side]:.3g}){when}; the grid no longer resolves the core: refine the cells there "
                "(grid.family = \"graded\" with grid.refine_centres at the two atoms, or a larger grid.refine_factor)")


def core_resolution(
    points: ArrayLike, areas: ArrayLike, frames: Iterable[ArrayLike], t: ArrayLike, axis: ArrayLike
) -> CoreResolution:
    r"""Radii, spacings and offsets of the clusters at :math:`\pm e` of a grid measure, frame by frame.

    Parameters
    ----------
    points : (N, 3) array
        Cell points (centroids or generators) on :math:`S^2`.
    areas : (N,) array
        Cell areas.
    frames : iterable of (N,) arrays
        Cell masses, one per time of ``t``.
    t : (T,) array
    axis : (3,) array
        :math:`e`, the dominant eigenvector of :math:`S=VB^\top` (``dim E = 1``).

    Returns
    -------
    CoreResolution
    """
    x = np.asarray(points, dtype=float)
    h = np.sqrt(np.asarray(areas, dtype=float))
    e = np.asarray(axis, dtype=float)
    e = e / np.linalg.norm(e)
    along = x @ e
    sides = (along > 0.0, along < 0.0)
    times = np.asarray(t, dtype=float)
    radius, spacing, offset = (np.full((times.size, 2), np.nan) for _ in range(3))
    for k, frame in enumerate(frames):
        mass = np.clip(np.asarray(frame, dtype=float), 0.0, None)
        for j, (sign, side) in enumerate(zip((1.0, -1.0), sides)):
            m = mass[side]
            total = m.sum()
            if total <= 0.0:
                continue
            centre = m @ x[side]
            norm = np.linalg.norm(centre)
            if norm == 0.0:
                continue
            centre /= norm
            cosines = np.clip(x[side] @ centre, -1.0, 1.0)
            radius[k, j] = math.sqrt(float(m @ np.arccos(cosines) ** 2) / total)
            spacing[k, j] = h[side][int(np.argmax(cosines))]
            offset[k, j] = math.acos(min(1.0, max(-1.0, sign * float(centre @ e))))
    return CoreResolution(times, radius, spacing, offset, e)
