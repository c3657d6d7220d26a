r"""Graded Voronoi meshes of :math:`S^2`: fine cells in caps around given centres, a uniform mesh elsewhere.

At low temperature the tokens concentrate onto a few points (onto :math:`\Pi_\sharp\rho_0` in the
theorem of Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931), and the cluster cores keep
contracting for a long time.  A uniform mesh fine enough to resolve them everywhere needs millions
of cells; a mesh that is fine only where the mass goes needs a few tens of thousands.  The spacing
of the generators at angular distance :math:`r` from a centre :math:`c` is

.. math::

    h(r) = \begin{cases} h_f, & r \le R,\\
                         \min\big(h_c,\; h_f + \gamma\,(r - R)\big), & r > R,\end{cases}
    \qquad h_c = \sqrt{4\pi/N_c},\quad h_f = h_c/F,

where :math:`N_c` is the number of cells of the uniform mesh outside the caps, :math:`F` the
refinement factor, :math:`R` the radius of the fine cap and :math:`\gamma` the grading (the
relative growth of the spacing from one ring of cells to the next).

**Generators.**  Around each centre the generators lie on rings: the centre itself, then rings
at :math:`r_{k+1} = r_k + h\big(r_k + \tfrac12 h(r_k)\big)` with
:math:`m_k = \operatorname{round}(2\pi\sin r_k / h(r_k))` points each, the rings turned by the
golden angle against each other, up to the first ring whose spacing is :math:`h_c`.  Outside, the
generators are the points of the :math:`N_c`-point Fibonacci lattice farther than
:math:`r_K + 0.7\,h_c` from every centre (:math:`r_K` the last ring), so that no two generators
come closer than about :math:`0.7\,h_c` across the seam.  The cells are nearly isotropic
everywhere (a ring's arc spacing equals its radial step), their sizes change by a factor
:math:`1+\gamma` at most from ring to ring, and the finite-volume scheme of
:mod:`meanfield.solvers.grid` needs nothing uniform: its time step, reconstruction and fluxes are
per cell.

Public API: :func:`graded_points`, :func:`graded_mesh`, :func:`graded_cell_count`, :class:`GradedSpacing`.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from meanfield.errors import ConfigError
from meanfield.geometry.cache import cached_mesh
from meanfield.geometry.mesh import SphericalMesh, mesh_from_points
from meanfield.geometry.sphere import fibonacci_points

__all__ = ["GradedSpacing", "graded_points", "graded_mesh", "graded_cell_count", "GRADED_COUNT_MAX", "DEFAULT_REFINE_RADIUS", "DEFAULT_REFINE_FACTOR",
           "DEFAULT_GRADING"]

#: defaults of ``grid.refine_radius``, ``grid.refine_factor`` and ``grid.grading``
DEFAULT_REFINE_RADIUS = 0.12
DEFAULT_REFINE_FACTOR = 8.0
DEFAULT_GRADING = 0.25

_FOUR_PI = 4.0 * math.pi
#: the finest spacing taken (radians): at 1e-9 qhull's Voronoi diagram of S² found duplicate generators, at 1e-8 not
MIN_FINE_SPACING = 1e-7
_GOLDEN_ANGLE = math.pi * (3.0 - math.sqrt(5.0))
#: lattice points closer than this many coarse spacings beyond the last ring are dropped
_SEAM = 0.7


@dataclass(frozen=True)
class GradedSpacing:
    r"""The spacing :math:`h(r)` of a graded mesh at angular distance :math:`r` from a centre (module docstring).

    Parameters
    ----------
    coarse : float
        :math:`h_c`, the spacing far from the centres.
    factor : float
        :math:`F = h_c/h_f \ge 1`.
    radius : float
        :math:`R`, the radius of the cap of spacing :math:`h_f`.
    grading : float
        :math:`\gamma > 0`, the growth of the spacing per unit of distance beyond :math:`R`.
    """

    coarse: float
    factor: float
    radius: float
    grading: float

    @property
    def fine(self) -> float:
        """:math:`h_f = h_c/F`."""
        return self.coarse / self.factor

    @property
    def outer(self) -> float:
        r"""The distance :math:`R + (h_c - h_f)/\gamma` at which the spacing reaches :math:`h_c`."""
        return self.radius + (self.coarse - self.fine) / self.grading

    def __call__(self, r: float) -> float:
        """:math:`h(r)`."""
        return min(self.coarse, self.fine + self.grading * max(r - self.radius, 0.0))

    def cap_points(self) -> float:
        r"""About how many generators a cap holds, without placing them: the density :math:`1/h(r)^2` integrated,
        :math:`\int_0^{r_c} 2\pi\sin r\,h(r)^{-2}\,dr` out to where :math:`h` reaches :math:`h_c`, less the
        lattice points the cap replaces (:math:`N_c(1-\cos r_c)/2`). The size checks take it where placing the
        rings would itself cost too much (``refine_factor = 1e6`` had asked for 13 TiB)."""
        fine, coarse = self.fine, self.coarse
        reach = min(self.radius + (coarse - fine) / self.grading, math.pi / 2)
        r = np.linspace(0.0, reach, 4097)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):  # a fine spacing whose square underflows:
            # countless points, inf (refine_factor = 1e308 had printed NumPy's warnings before the clean refusal)
            density = 2.0 * math.pi * np.sin(r) / np.minimum(coarse, fine + self.grading * np.maximum(r - self.radius, 0.0)) ** 2
            inner = float(np.sum(0.5 * (density[1:] + density[:-1]) * np.diff(r)))
        if not math.isfinite(inner):
            return math.inf
        return max(inner - _FOUR_PI / coarse**2 * (1.0 - math.cos(reach)) / 2.0, 0.0)

    def rings(self) -> tuple[np.ndarray, np.ndarray]:
        """The ring radii :math:`r_k` (the first is 0, the centre) and their point counts :math:`m_k`."""
        radii, counts = [0.0], [1]
        r = 0.0
        while self(r) < self.coarse and r < math.pi / 2:
            r += self(r + 0.5 * self(r))
            radii.append(r)
            counts.append(max(6, int(round(2.0 * math.pi * math.sin(r) / self(r)))))
        return np.array(radii), np.array(counts, dtype=np.int64)


def _frame(centre: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two unit tangents at ``centre`` completing it to an orthonormal frame."""
    helper = np.zeros(3)
    helper[int(np.argmin(np.abs(centre)))] = 1.0
    e1 = helper - (helper @ centre) * centre
    e1 /= np.linalg.norm(e1)
    return e1, np.cross(centre, e1)


def _centres(centres: object, key: str) -> np.ndarray:
    try:
        c = np.asarray(centres, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(key, f"expected a list of points of R³, got {centres!r}") from None
    if c.ndim == 1 and c.shape == (3,):
        c = c[None]
    if c.ndim != 2 or c.shape[1] != 3 or c.shape[0] < 1:
        raise ConfigError(key, f"expected a list of points of R³ (shape (k, 3)), got shape {c.shape}")
    if not np.all(np.isfinite(c)) or np.any(np.all(c == 0, axis=1)):
        raise ConfigError(key, "every centre must be a finite, non-zero vector (it is normalised onto S²)")
    c = c / np.max(np.abs(c), axis=1, keepdims=True)  # scaled first: the norm of [1e308, 1e308, 0] had overflowed
    return c / np.linalg.norm(c, axis=1)[:, None]


def graded_points(
    cells: int,
    centres: object,
    *,
    radius: float = DEFAULT_REFINE_RADIUS,
    factor: float = DEFAULT_REFINE_FACTOR,
    grading: float = DEFAULT_GRADING,
) -> np.ndarray:
    r"""Generators of a graded mesh (module docstring): rings around each centre, a Fibonacci lattice elsewhere.

    Parameters
    ----------
    cells : int
        :math:`N_c`: the coarse spacing is that of a uniform mesh of ``cells`` cells,
        :math:`h_c=\sqrt{4\pi/N_c}`.  The graded mesh has more cells than that.
    centres : (k, 3) array_like
        Centres of the fine caps (normalised here).  The caps, out to where the spacing
        reaches :math:`h_c`, must not overlap.
    radius, factor, grading : float
        :math:`R` (radians), :math:`F \ge 1` and :math:`\gamma > 0`.

    Returns
    -------
    (N, 3) array
        Unit vectors, the centres first.

    Raises
    ------
    ConfigError
        Naming ``grid.cells``, ``grid.refine_centres``, ``grid.refine_radius``,
        ``grid.refine_factor`` or ``grid.grading``.
    """
    if isinstance(cells, bool) or not isinstance(cells, (int, np.integer)) or cells < 12:
        raise ConfigError("grid.cells", f"expected an integer >= 12, got {cells!r}")
    c = _centres(centres, "grid.refine_centres")
    if not (math.isfinite(radius) and 0.0 <= radius < math.pi / 2):
        raise ConfigError("grid.refine_radius", f"expected 0 <= R < π/2 (radians), got {radius!r}")
    if not (math.isfinite(factor) and factor >= 1.0):
        raise ConfigError("grid.refine_factor", f"expected a number >= 1, got {factor!r}")
    if not (math.isfinite(grading) and grading > 0.0):
        raise ConfigError("grid.grading", f"expected a number > 0, got {grading!r}")
    spacing = GradedSpacing(coarse=math.sqrt(_FOUR_PI / int(cells)), factor=float(factor), radius=float(radius),
                            grading=float(grading))
    if spacing.coarse / spacing.factor < MIN_FINE_SPACING:
        raise ConfigError("grid.refine_factor", f"the fine spacing sqrt(4π/grid.cells)/refine_factor = "
                          f"{spacing.coarse / spacing.factor:.3g} rad is below {MIN_FINE_SPACING:g} rad, where the Voronoi "
                          "construction of S² loses its generators (measured: duplicates at 1e-9 rad)")
    radii, counts = spacing.rings()
    reach = float(radii[-1]) + _SEAM * spacing.coarse
    if reach >= math.pi / 2:
        raise ConfigError("grid.refine_radius", f"the graded caps reach {reach:.3g} rad from their centres, "
                          "beyond a hemisphere: take a smaller grid.refine_radius or grid.refine_factor, or a larger "
                          "grid.grading or grid.cells")
    if len(c) > 1:
        gap = np.arccos(np.clip(c @ c.T, -1.0, 1.0))[np.triu_indices(len(c), 1)].min()
        if gap < 2.0 * reach:
            raise ConfigError("grid.refine_centres", f"two centres are {gap:.3g} rad apart, but their graded caps "
                              f"reach {reach:.3g} rad each: they would overlap (take centres farther apart, or a "
                              "smaller grid.refine_radius or grid.refine_factor)")
    offsets = np.repeat(np.arange(len(radii)) * _GOLDEN_ANGLE, counts)
    phi = offsets + 2.0 * math.pi * (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)) \
        / np.repeat(counts, counts)
    r = np.repeat(radii, counts)
    caps = []
    for centre in c:
        e1, e2 = _frame(centre)
        caps.append(np.cos(r)[:, None] * centre + np.sin(r)[:, None] * (np.cos(phi)[:, None] * e1
                                                                         + np.sin(phi)[:, None] * e2))
    lattice = fibonacci_points(int(cells))
    far = np.all(lattice @ c.T < math.cos(reach), axis=1)
    points = np.concatenate(caps + [lattice[far]])
    return points / np.linalg.norm(points, axis=1, keepdims=True)


#: above this many generators (by :meth:`GradedSpacing.cap_points`) :func:`graded_cell_count` takes the estimate:
#: placing them only to count them took minutes and gigabytes before the size check could refuse them
GRADED_COUNT_MAX = 2_000_000


def _centre_key(centres: object) -> tuple[tuple[float, float, float], ...]:
    """The checked, normalised centres as a hashable key of the in-process caches."""
    return tuple(tuple(float(v) for v in row) for row in _centres(centres, "grid.refine_centres"))


@lru_cache(maxsize=8)
def _graded_points(cells: int, centres: tuple[tuple[float, float, float], ...], radius: float, factor: float,
                   grading: float) -> np.ndarray:
    """:func:`graded_points`, cached: a config's size check, its coarse-mesh note and the mesh place them once."""
    points = graded_points(cells, np.array(centres), radius=radius, factor=factor, grading=grading)
    points.setflags(write=False)
    return points


def graded_cell_count(
    cells: int,
    centres: object,
    *,
    radius: float = DEFAULT_REFINE_RADIUS,
    factor: float = DEFAULT_REFINE_FACTOR,
    grading: float = DEFAULT_GRADING,
) -> int:
    """How many cells :func:`graded_mesh` has: the generators counted, or above :data:`GRADED_COUNT_MAX` their
    estimate (:meth:`GradedSpacing.cap_points`, within 1 %). Bad values raise what :func:`graded_points` raises."""
    key = _centre_key(centres)
    if isinstance(cells, (int, np.integer)) and not isinstance(cells, bool) and cells >= 12 and factor >= 1 and grading > 0 \
            and all(math.isfinite(v) for v in (radius, factor, grading)):
        spacing = GradedSpacing(coarse=math.sqrt(_FOUR_PI / int(cells)), factor=factor, radius=radius, grading=grading)
        estimate = int(cells) + len(key) * spacing.cap_points()
        if estimate > GRADED_COUNT_MAX:
            return int(min(estimate, 1e18))
    return len(_graded_points(cells, key, float(radius), float(factor), float(grading)))


@lru_cache(maxsize=8)
def _graded_mesh(cells: int, centres: tuple[tuple[float, float, float], ...], radius: float, factor: float,
                 grading: float) -> SphericalMesh:
    points = _graded_points(cells, centres, radius, factor, grading)
    tag = hashlib.sha256(np.ascontiguousarray(points).tobytes()).hexdigest()[:16]
    return cached_mesh(f"graded-{len(points)}-{tag}", points, lambda p: mesh_from_points(p, family="graded"),
                       cls=SphericalMesh, family="graded")


def graded_mesh(
    cells: int,
    centres: object,
    *,
    radius: float = DEFAULT_REFINE_RADIUS,
    factor: float = DEFAULT_REFINE_FACTOR,
    grading: float = DEFAULT_GRADING,
) -> SphericalMesh:
    r"""The Voronoi mesh of :func:`graded_points` (cached in-process, and on disk when large).

    Examples
    --------
    >>> m = graded_mesh(2000, [[1, 0, 0], [-1, 0, 0]], radius=0.2, factor=4)
    >>> m.family, m.N > 2000
    ('graded', True)
    >>> bool(abs(m.areas.sum() - 4 * np.pi) < 1e-9)
    True
    """
    return _graded_mesh(int(cells) if isinstance(cells, (int, np.integer)) and not isinstance(cells, bool) else cells,
                        _centre_key(centres), float(radius), float(factor), float(grading))
