r"""Spherical Voronoi meshes of :math:`S^2` and measures that live on them.

A mesh is the Voronoi tessellation of near-uniform generators :math:`x_c\in S^2`
(Fibonacci spiral or subdivided icosahedron), computed by
:class:`scipy.spatial.SphericalVoronoi`.  Cell :math:`c` is
:math:`\Omega_c=\{x\in S^2: \langle x,x_c\rangle\ge\langle x,x_{c'}\rangle\ \forall c'\}`,
with area :math:`A_c` (:math:`\sum_c A_c = 4\pi`).  Two cells are neighbours when
they share a Voronoi edge: an arc of the bisector great circle
:math:`\{x: \langle x, x_j - x_i\rangle = 0\}`, of length :math:`\ell_{ij}`.
Because the edge lies on that bisector plane, its unit tangent normal, pointing
from cell :math:`i` to cell :math:`j`, is the same at every point of the edge:

.. math::

    n_{ij} = \frac{x_j - x_i}{\|x_j - x_i\|}\quad(\perp \text{ the edge midpoint } m_{ij}).

A measure on the mesh is a vector of cell masses :math:`m_c\ge 0`,
:math:`\sum_c m_c = 1`, i.e. the cell averages :math:`\bar\rho_c = m_c/A_c` of the
density on :math:`\Omega_c`.  A smooth density :math:`f` is put on the mesh with the
integrals over the cells, :math:`m_c = \int_{\Omega_c} f\,dA/\int f\,dA`, by a degree-2
quadrature on the triangles that fan each cell from its spherical centroid
:math:`q_c` (:meth:`SphericalMesh.integrate`; :attr:`SphericalMesh.centroids` in closed
form).  Initial densities are registered by name
in :data:`INITIAL_DENSITIES` (``uniform``, ``vmf``, ``mixture``, ``function``, ``file``).

Refinement families: ``fibonacci`` takes any :math:`N` (so :math:`N` can double or
quadruple), ``icosahedral`` takes :math:`N = 10\cdot 4^L + 2` (quadrupling per level).
Meshes are cached in-process, and on disk from 32 768 cells on
(:mod:`meanfield.geometry.cache`).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from scipy.spatial import SphericalVoronoi, cKDTree

from meanfield.checks import check_seed
from meanfield.errors import ConfigError
from meanfield.expressions import EXPR_NAMES, EXPR_NODES, compile_expression
from meanfield.geometry.cache import cached_mesh
from meanfield.geometry.sphere import fibonacci_points, unit_rows
from meanfield.io.arrays import load_npy

__all__ = [
    "SphericalMesh",
    "MESH_FAMILIES",
    "fibonacci_points",
    "icosahedral_points",
    "fibonacci_mesh",
    "icosahedral_mesh",
    "icosahedral_cells",
    "mesh",
    "mesh_from_points",
    "mesh_by_size",
    "refinement_family",
    "deposit",
    "deposit_smooth",
    "to_weighted_points",
    "coarsen",
    "sample_mass",
    "INITIAL_DENSITIES",
    "initial_mass",
    "density_function",
    "sample_initial",
]

_FOUR_PI = 4.0 * math.pi


def _normalize(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a`` made read-only: the meshes are cached and shared by every caller, so are their derived arrays."""
    a.setflags(write=False)
    return a


def _arc(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Great-circle distance :math:`2\\arctan2(\\|a-b\\|,\\|a+b\\|)`, accurate at all angles."""
    return 2.0 * np.arctan2(np.linalg.norm(a - b, axis=-1), np.linalg.norm(a + b, axis=-1))


#: barycentric coordinates (apex, a, b) of the degree-2 rule on a triangle (equal weights 1/3)
DEGREE2_BARYCENTRIC = ((2.0 / 3.0, 1.0 / 6.0, 1.0 / 6.0), (1.0 / 6.0, 2.0 / 3.0, 1.0 / 6.0), (1.0 / 6.0, 1.0 / 6.0, 2.0 / 3.0))


def triangle_area(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    r"""Areas of the spherical triangles with unit vertices ``a``, ``b``, ``c`` (each ``(..., 3)``).

    .. math::

        \tan\frac{\Omega}{2} = \frac{|a\cdot(b\times c)|}{1 + a\cdot b + b\cdot c + c\cdot a}

    (Van Oosterom & Strackee, *IEEE Trans. Biomed. Eng.* 30 (1983) 125).
    """
    num = np.abs(np.einsum("...k,...k->...", a, np.cross(b, c)))
    den = 1.0 + np.einsum("...k,...k->...", a, b) + np.einsum("...k,...k->...", b, c) + np.einsum("...k,...k->...", c, a)
    return 2.0 * np.arctan2(num, den)


# ----------------------------------------------------------------------------- the mesh


@dataclass(frozen=True, eq=False)
class SphericalMesh:
    r"""Spherical Voronoi mesh of :math:`S^2` with the geometry a finite-volume flux needs.

    Attributes
    ----------
    points : (N, 3) array
        Generators :math:`x_c` (the cell centres where densities and velocities live).
    areas : (N,) array
        Cell areas :math:`A_c`, summing to :math:`4\pi`.
    edges : (E, 2) int array
        Neighbouring pairs ``(i, j)`` with ``i < j``, each undirected pair once.
    edge_lengths : (E,) array
        Arc length :math:`\ell_{ij} > 0` of the shared Voronoi edge.
    edge_normals : (E, 3) array
        Unit tangent normal :math:`n_{ij}=(x_j-x_i)/\|x_j-x_i\|` of the shared edge,
        pointing from cell ``i`` to cell ``j`` (tangent at every point of the edge).
    edge_midpoints : (E, 3) array
        Midpoint :math:`m_{ij}` of the shared Voronoi edge (on the sphere).
    generator_distances : (E,) array
        Geodesic distance :math:`d_S(x_i, x_j)`.
    vertices : (V, 3) array
        Voronoi vertices.
    edge_vertices : (E, 2) int array
        The two Voronoi vertices that end each edge.
    region_ptr, region_vertices : int arrays
        The cells' vertex lists in compressed form: cell ``c`` has the vertices
        ``region_vertices[region_ptr[c]:region_ptr[c + 1]]``, counter-clockwise
        seen from outside (:attr:`regions` gives them as a tuple of arrays).
    family : str
        ``"fibonacci"``, ``"icosahedral"`` or ``"custom"``.

    Notes
    -----
    The family meshes are cached and shared by every caller, so these arrays and the derived ones
    (:attr:`centroids`, :attr:`side_areas`, :attr:`fan_quadrature`, ...) are read-only: copy one to change it.
    """

    points: np.ndarray
    areas: np.ndarray
    edges: np.ndarray
    edge_lengths: np.ndarray
    edge_normals: np.ndarray
    edge_midpoints: np.ndarray
    generator_distances: np.ndarray
    vertices: np.ndarray
    edge_vertices: np.ndarray
    region_ptr: np.ndarray
    region_vertices: np.ndarray
    family: str = "custom"

    #: the arrays that define a mesh (what the disk cache stores)
    ARRAYS: ClassVar[tuple[str, ...]] = ("points", "areas", "edges", "edge_lengths", "edge_normals", "edge_midpoints",
                                         "generator_distances", "vertices", "edge_vertices", "region_ptr",
                                         "region_vertices")

    #: version of the code that derives :attr:`ARRAYS` from the generators (:func:`mesh_from_points`): bump it when
    #: any of them changes, so that the disk cache does not serve arrays built by older code
    #: (:mod:`meanfield.geometry.cache` stores it with them)
    CODE_VERSION: ClassVar[int] = 1

    def __post_init__(self) -> None:
        for name in self.ARRAYS:
            getattr(self, name).setflags(write=False)

    @cached_property
    def regions(self) -> tuple[np.ndarray, ...]:
        """Vertex indices of each cell, counter-clockwise seen from outside."""
        return tuple(np.split(self.region_vertices, self.region_ptr[1:-1]))

    # ------------------------------------------------------------------ sizes
    @property
    def N(self) -> int:
        """Number of cells."""
        return int(self.points.shape[0])

    @property
    def E(self) -> int:
        """Number of (undirected) edges."""
        return int(self.edges.shape[0])

    @property
    def h(self) -> float:
        r"""Mesh size :math:`h=\sqrt{4\pi/N}` (the side of an average cell)."""
        return math.sqrt(_FOUR_PI / self.N)

    def __repr__(self) -> str:
        return f"SphericalMesh(family={self.family!r}, N={self.N}, E={self.E}, h={self.h:.4g})"

    # ------------------------------------------------------------------ neighbours (CSR)
    @cached_property
    def _csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        i, j = self.edges[:, 0], self.edges[:, 1]
        src = np.concatenate([i, j])
        dst = np.concatenate([j, i])
        eid = np.concatenate([np.arange(self.E), np.arange(self.E)])
        order = np.lexsort((dst, src))
        ptr = np.zeros(self.N + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=self.N), out=ptr[1:])
        nbr, ids = dst[order], eid[order]
        for arr in (ptr, nbr, ids):
            arr.setflags(write=False)
        return ptr, nbr, ids

    def neighbours(self, i: int) -> np.ndarray:
        """Indices of the cells sharing an edge with cell ``i`` (sorted)."""
        ptr, nbr, _ = self._csr
        return nbr[ptr[i] : ptr[i + 1]]

    def neighbour_edges(self, i: int) -> np.ndarray:
        """Edge ids (rows of :attr:`edges`) of cell ``i``, in the order of :meth:`neighbours`."""
        ptr, _, ids = self._csr
        return ids[ptr[i] : ptr[i + 1]]

    @cached_property
    def degree(self) -> np.ndarray:
        """Number of neighbours of every cell, shape ``(N,)``."""
        return _frozen(np.diff(self._csr[0]))

    # ------------------------------------------------------------------ measures
    @cached_property
    def tree(self) -> cKDTree:
        """k-d tree of the generators (nearest generator = containing Voronoi cell)."""
        return cKDTree(self.points)

    def cell_of(self, x: np.ndarray) -> np.ndarray:
        """Index of the Voronoi cell containing each point of ``x`` (n, 3) (nearest generator)."""
        x = np.asarray(x, dtype=float).reshape(-1, 3)
        return self.tree.query(x)[1].astype(np.int64)

    def density(self, mass: np.ndarray) -> np.ndarray:
        r"""Cell densities :math:`\rho_c = m_c / A_c` (w.r.t. the area measure), shape ``(N,)``."""
        return np.asarray(mass, dtype=float) / self.areas

    def to_weighted_points(self, mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The grid measure as weighted atoms at the cell centres: ``(points (N, 3), weights (N,))``."""
        mass = np.asarray(mass, dtype=float)
        if mass.shape != (self.N,):
            raise ValueError(f"mass must have shape ({self.N},), got {mass.shape}")
        return self.points.copy(), mass.copy()

    @cached_property
    def cell_radius(self) -> np.ndarray:
        """Largest geodesic distance from each generator to a vertex of its cell, shape ``(N,)``."""
        cell = np.repeat(np.arange(self.N), np.diff(self.region_ptr))
        dist = _arc(self.vertices[self.region_vertices], self.points[cell])
        return _frozen(np.maximum.reduceat(dist, self.region_ptr[:-1]))

    # ------------------------------------------------------------------ second-order geometry
    @cached_property
    def centroids(self) -> np.ndarray:
        r"""Spherical centroids :math:`q_c = \int_{\Omega_c} x\,dA / \|\int_{\Omega_c} x\,dA\|`, shape ``(N, 3)``.

        The first moment of a cell has a closed form: :math:`\Delta_S x = -2x` for the
        coordinate functions, so by the divergence theorem

        .. math::

            \int_{\Omega_i} x\,dA = -\tfrac12\oint_{\partial\Omega_i}\nu\,d\ell
            = -\tfrac12\sum_{j\sim i}\ell_{ij}\,n_{ij},

        since the outward conormal of a Voronoi edge is the constant :math:`n_{ij}`.
        The centroid is where a cell's mass sits in second-order quadrature.
        """
        return _frozen(_normalize(self.first_moments))

    @cached_property
    def first_moments(self) -> np.ndarray:
        r"""First moments :math:`\int_{\Omega_c} x\,dA` of the cells (closed form, see :attr:`centroids`), ``(N, 3)``."""
        i, j = self.edges[:, 0], self.edges[:, 1]
        ln = self.edge_lengths[:, None] * self.edge_normals
        out = np.empty((self.N, 3))
        for k in range(3):
            out[:, k] = 0.5 * (np.bincount(j, weights=ln[:, k], minlength=self.N)
                               - np.bincount(i, weights=ln[:, k], minlength=self.N))
        return _frozen(out)

    @cached_property
    def side_areas(self) -> np.ndarray:
        r"""Areas of the triangles :math:`(q_c, a_e, b_e)` that fan each cell from its centroid, shape ``(E, 2)``.

        Column 0 is the triangle of edge ``e`` in cell ``edges[e, 0]``, column 1 in
        ``edges[e, 1]``; the triangles of a cell tile it, so each cell's sum is
        :math:`A_c` (Van Oosterom–Strackee formula for each spherical triangle).
        """
        a, b = self.vertices[self.edge_vertices[:, 0]], self.vertices[self.edge_vertices[:, 1]]
        return _frozen(np.column_stack([triangle_area(self.centroids[self.edges[:, k]], a, b) for k in (0, 1)]))

    @cached_property
    def fan_quadrature(self) -> tuple[np.ndarray, np.ndarray]:
        r"""A degree-2 quadrature of every cell: ``(nodes (E, 2, 3, 3), weights (E, 2, 3))``.

        Each fan triangle :math:`T_{c,e}=(q_c,a_e,b_e)` (side ``s`` of edge ``e``, as in
        :attr:`side_areas`) carries three nodes: the points of barycentric coordinates
        :math:`(\tfrac23,\tfrac16,\tfrac16)` and permutations on the flat triangle,
        projected radially onto the sphere, with weights :math:`\tfrac13|T^\flat|\,\delta/\|p\|^3`
        (:math:`|T^\flat|` the flat area, :math:`\delta` its plane's distance from 0: the
        area element of the radial projection).  It integrates quadratics on the flat
        triangle exactly, so :math:`\int_{\Omega_c}f` is accurate to :math:`O(h^4 A_c)` in a typical cell and
        :math:`O(h^3 A_c)` in the least symmetric ones (the Fibonacci poles, where the :math:`h^3` terms do not
        cancel); a constant is not integrated exactly (the areas' total off by 2e-5 at 500 cells).
        """
        a = self.vertices[self.edge_vertices[:, 0]][:, None, :]
        b = self.vertices[self.edge_vertices[:, 1]][:, None, :]
        q = self.centroids[self.edges]  # (E, 2, 3): the apex of each fan triangle
        cross = np.cross(a - q, b - q)
        flat = 0.5 * np.linalg.norm(cross, axis=2)
        normal = cross / np.maximum(np.linalg.norm(cross, axis=2, keepdims=True), 1e-300)
        delta = np.abs(np.einsum("esk,esk->es", normal, q))
        corners = (q, np.broadcast_to(a, q.shape), np.broadcast_to(b, q.shape))
        flat_nodes = np.stack([sum(w * c for w, c in zip(bary, corners)) for bary in DEGREE2_BARYCENTRIC], axis=2)
        r = np.linalg.norm(flat_nodes, axis=3)
        weights = (flat * delta)[..., None] / (3.0 * r**3)
        return _frozen(flat_nodes / r[..., None]), _frozen(weights)

    def cell_sum(self, side_values: np.ndarray) -> np.ndarray:
        """Sum per cell of values given per side ``(E, 2, ...)`` (the two cells of each edge), shape ``(N,)``."""
        v = np.asarray(side_values, dtype=float).reshape(self.E, 2, -1).sum(axis=2)
        return np.bincount(self.edges[:, 0], weights=v[:, 0], minlength=self.N) + np.bincount(
            self.edges[:, 1], weights=v[:, 1], minlength=self.N)

    def integrate(self, f: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        r""":math:`\int_{\Omega_c} f\,dA` for every cell by :attr:`fan_quadrature`, shape ``(N,)``.

        ``f`` maps unit vectors ``(n, 3)`` to values ``(n,)``.
        """
        nodes, weights = self.fan_quadrature
        values = np.asarray(f(nodes.reshape(-1, 3)), dtype=float).reshape(weights.shape)
        return self.cell_sum(values * weights)


# ----------------------------------------------------------------------------- generators


def _icosahedron() -> tuple[np.ndarray, np.ndarray]:
    g = (1.0 + math.sqrt(5.0)) / 2.0
    verts = np.array(
        [[-1, g, 0], [1, g, 0], [-1, -g, 0], [1, -g, 0],
         [0, -1, g], [0, 1, g], [0, -1, -g], [0, 1, -g],
         [g, 0, -1], [g, 0, 1], [-g, 0, -1], [-g, 0, 1]], dtype=float)
    faces = np.array(
        [[0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11],
         [1, 5, 9], [5, 11, 4], [11, 10, 2], [10, 7, 6], [7, 1, 8],
         [3, 9, 4], [3, 4, 2], [3, 2, 6], [3, 6, 8], [3, 8, 9],
         [4, 9, 5], [2, 4, 11], [6, 2, 10], [8, 6, 7], [9, 8, 1]], dtype=np.int64)
    return _normalize(verts), faces


def icosahedral_points(level: int) -> np.ndarray:
    r"""Vertices of the icosahedron subdivided ``level`` times: :math:`N = 10\cdot4^L+2`.

    Each level splits every triangle into four through its (normalised) edge
    midpoints, so :math:`N` roughly quadruples.
    """
    if level < 0:
        raise ValueError(f"level must be >= 0, got {level}")
    verts, faces = _icosahedron()
    for _ in range(level):
        e = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
        e.sort(axis=1)
        uniq, inverse = np.unique(e, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        mids = _normalize(verts[uniq[:, 0]] + verts[uniq[:, 1]])
        new = len(verts) + inverse
        nf = len(faces)
        a, b, c = faces[:, 0], faces[:, 1], faces[:, 2]
        ab, bc, ca = new[:nf], new[nf : 2 * nf], new[2 * nf :]
        faces = np.concatenate([
            np.column_stack([a, ab, ca]),
            np.column_stack([b, bc, ab]),
            np.column_stack([c, ca, bc]),
            np.column_stack([ab, bc, ca]),
        ])
        verts = np.concatenate([verts, mids])
    return verts


# ----------------------------------------------------------------------------- Voronoi

#: generators closer than this (chord, on the unit sphere) are one point to :class:`scipy.spatial.SphericalVoronoi`
#: (its ``threshold``, passed to it)
DUPLICATE_CHORD = 1e-6


def mesh_from_points(points: np.ndarray, *, family: str = "custom") -> SphericalMesh:
    r"""Spherical Voronoi mesh of the given generators.

    The Voronoi tessellation comes from :class:`scipy.spatial.SphericalVoronoi`
    (areas from :meth:`~scipy.spatial.SphericalVoronoi.calculate_areas`).  Every
    Voronoi edge ``(v_a, v_b)`` occurs in exactly two sorted regions; pairing
    them gives the neighbour list.  Each region is ordered counter-clockwise
    seen from outside (SciPy's sorted regions turn either way).  Edges of zero length (four or more
    co-circular generators meet at one vertex) carry no flux and are dropped.

    Parameters
    ----------
    points : (N, 3) array
        Distinct points (normalised here).
    family : str
        Label stored on the mesh.

    Raises
    ------
    ValueError
        Naming the row of a generator that is not finite or is zero, or the two rows of generators that are the
        same point (closer than :data:`DUPLICATE_CHORD`, SciPy's threshold), or for another shape than ``(N, 3)``,
        ``N >= 4``.
    """
    raw = np.asarray(points, dtype=float)
    if raw.ndim != 2 or raw.shape[1] != 3 or raw.shape[0] < 4:
        raise ValueError(f"points must have shape (N, 3) with N >= 4, got {raw.shape}")
    # a NaN or zero row had ended in qhull's "SVD did not converge", a duplicate in SciPy's message without its rows
    for bad, what in ((~np.all(np.isfinite(raw), axis=1), "is not finite"), (~np.any(raw != 0.0, axis=1), "is zero")):
        if np.any(bad):
            row = int(np.argmax(bad))
            more = f" (and {int(bad.sum()) - 1} more rows)" if bad.sum() > 1 else ""
            raise ValueError(f"generator points[{row}] = {raw[row].tolist()} {what}{more}; a generator is a non-zero "
                             "finite direction")
    pts = _normalize(raw)
    n = pts.shape[0]
    try:
        sv = SphericalVoronoi(pts, radius=1.0, center=np.zeros(3), threshold=DUPLICATE_CHORD)
    except ValueError:
        pairs = cKDTree(pts).query_pairs(DUPLICATE_CHORD, output_type="ndarray")
        if len(pairs):
            a, b = sorted(int(k) for k in pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))][0])
            more = f", and {len(pairs) - 1} more pairs" if len(pairs) > 1 else ""
            raise ValueError(f"generators points[{a}] and points[{b}] are the same point on the sphere (closer than "
                             f"{DUPLICATE_CHORD:g}{more}); the generators must be distinct") from None
        raise
    sv.sort_vertices_of_regions()
    areas = np.asarray(sv.calculate_areas(), dtype=float)
    verts = np.asarray(sv.vertices, dtype=float)
    lens = np.fromiter((len(r) for r in sv.regions), dtype=np.int64, count=n)
    flat = np.fromiter((v for r in sv.regions for v in r), dtype=np.int64, count=int(lens.sum()))
    start = np.repeat(np.cumsum(lens) - lens, lens)
    pos = np.arange(flat.size)
    cyc = np.repeat(lens, lens)
    cell = np.repeat(np.arange(n, dtype=np.int64), lens)
    # SciPy sorts each region's vertices cyclically but not all the same way round (about half the cells came out
    # clockwise): reverse those whose polygon, seen from outside along its generator, turns clockwise
    turn = np.einsum("nk,nk->n", np.cross(verts[flat], verts[flat[start + (pos - start + 1) % cyc]]), pts[cell])
    clockwise = np.bincount(cell, weights=turn, minlength=n) < 0
    flat = np.where(clockwise[cell], flat[start + (lens[cell] - 1 - (pos - start))], flat)
    nxt = flat[start + (pos - start + 1) % cyc]
    lo, hi = np.minimum(flat, nxt), np.maximum(flat, nxt)
    key = lo * len(verts) + hi
    order = np.argsort(key, kind="stable")
    ks = key[order]
    if ks.size % 2 or not np.array_equal(ks[0::2], ks[1::2]) or (ks.size > 2 and np.any(ks[2::2] == ks[1:-1:2])):
        raise ValueError("degenerate Voronoi diagram: an edge is not shared by exactly two cells")
    c0, c1 = cell[order[0::2]], cell[order[1::2]]
    va, vb = lo[order[0::2]], hi[order[0::2]]
    i, j = np.minimum(c0, c1), np.maximum(c0, c1)
    a, b = verts[va], verts[vb]
    lengths = _arc(a, b)
    keep = lengths > 1e-12 * math.sqrt(_FOUR_PI / n)
    i, j, va, vb, a, b, lengths = i[keep], j[keep], va[keep], vb[keep], a[keep], b[keep], lengths[keep]
    srt = np.lexsort((j, i))
    i, j, va, vb, a, b, lengths = i[srt], j[srt], va[srt], vb[srt], a[srt], b[srt], lengths[srt]
    diff = pts[j] - pts[i]
    normals = diff / np.linalg.norm(diff, axis=1, keepdims=True)
    mids = _normalize(a + b)
    return SphericalMesh(
        points=pts,
        areas=areas,
        edges=np.column_stack([i, j]).astype(np.int64),
        edge_lengths=lengths,
        edge_normals=normals,
        edge_midpoints=mids,
        generator_distances=_arc(pts[i], pts[j]),
        vertices=verts,
        edge_vertices=np.column_stack([va, vb]).astype(np.int64),
        region_ptr=np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
        region_vertices=flat,
        family=family,
    )


@lru_cache(maxsize=16)
def fibonacci_mesh(N: int) -> SphericalMesh:
    """Voronoi mesh of ``N`` Fibonacci points (any ``N >= 4``; cached in-process, and on disk when large).

    See :mod:`meanfield.geometry.cache` for the disk cache of meshes with many cells.
    """
    points = fibonacci_points(int(N))
    return cached_mesh(f"fibonacci-{int(N)}", points, lambda p: mesh_from_points(p, family="fibonacci"),
                       cls=SphericalMesh, family="fibonacci")


@lru_cache(maxsize=8)
def icosahedral_mesh(level: int) -> SphericalMesh:
    r"""Voronoi mesh of the ``level``-times subdivided icosahedron, :math:`N=10\cdot4^L+2` (cached).

    The cells are the 12 pentagons and hexagons of a geodesic (Goldberg) grid.
    """
    points = icosahedral_points(int(level))
    return cached_mesh(f"icosahedral-{int(level)}", points, lambda p: mesh_from_points(p, family="icosahedral"),
                       cls=SphericalMesh, family="icosahedral")


def icosahedral_cells(cells: int) -> int:
    """The cells of the icosahedral mesh ``grid.cells = cells`` builds: :math:`10\\cdot4^L+2`, ``L`` the nearest level."""
    return 10 * 4 ** _icosahedral_level(int(cells)) + 2


def _icosahedral_level(cells: int) -> int:
    """Level whose :math:`10\\cdot4^L+2` is nearest to ``cells`` in log scale."""
    if cells <= 12:
        return 0
    return max(0, int(round(math.log(max(cells - 2, 10) / 10.0, 4))))


#: mesh families by name: ``family -> f(cells) -> SphericalMesh``
MESH_FAMILIES: dict[str, Callable[[int], SphericalMesh]] = {
    "fibonacci": lambda cells: fibonacci_mesh(int(cells)),
    "icosahedral": lambda cells: icosahedral_mesh(_icosahedral_level(int(cells))),
}


def mesh(cells: int, family: str = "fibonacci") -> SphericalMesh:
    """A mesh with about ``cells`` cells from a registered family.

    ``fibonacci`` gives exactly ``cells`` cells; ``icosahedral`` the nearest
    :math:`10\\cdot4^L+2` (in log scale).

    Examples
    --------
    >>> import numpy as np
    >>> m = mesh(500)
    >>> m.N, bool(np.isclose(m.areas.sum(), 4 * np.pi))  # the cells tile the sphere
    (500, True)
    >>> mesh(600, "icosahedral").N  # 10·4^L + 2 nearest 600 in log scale
    642
    """
    try:
        build = MESH_FAMILIES[family]
    except KeyError:
        raise ConfigError("grid.family", f"unknown mesh family {family!r}; choose from {sorted(MESH_FAMILIES)}") from None
    if isinstance(cells, bool) or not isinstance(cells, (int, np.integer)) or cells < 12:
        raise ConfigError("grid.cells", f"expected an integer >= 12, got {cells!r}")
    return build(int(cells))


def refinement_family(cells: int, levels: int, *, family: str = "fibonacci", factor: int = 4) -> list[SphericalMesh]:
    """``levels`` meshes, each with about ``factor`` times the cells of the previous one.

    ``factor`` is 2 or 4 for ``fibonacci``; ``icosahedral`` always quadruples.
    """
    if family == "icosahedral":
        level = _icosahedral_level(cells)
        return [icosahedral_mesh(level + k) for k in range(levels)]
    return [mesh(int(cells) * factor**k, family) for k in range(levels)]


# ----------------------------------------------------------------------------- particles <-> grid


def _particle_weights(x: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=float)
    if x.ndim != 2 or x.shape[1] != 3:
        raise ValueError(f"points must have shape (n, 3), got {x.shape}")
    if weights is None:
        w = np.full(x.shape[0], 1.0 / x.shape[0])
    else:
        w = np.asarray(weights, dtype=float)
        if w.shape != (x.shape[0],) or np.any(w < 0) or not np.all(np.isfinite(w)):
            raise ValueError(f"weights must be {x.shape[0]} finite non-negative numbers")
    return x, w


def deposit(mesh: SphericalMesh, x: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    r"""Cell deposit: every atom gives its mass to the cell that contains it.

    .. math::

        m_c = \sum_{p:\ x_p\in\Omega_c} w_p

    (nearest generator by :class:`scipy.spatial.cKDTree`).  Conserves mass exactly
    (up to the order of the sum); ``W2`` error at most the largest cell radius.

    Parameters
    ----------
    mesh : SphericalMesh
    x : (n, 3) array
    weights : (n,) array, optional
        Masses of the atoms (default :math:`1/n`).
    """
    x, w = _particle_weights(x, weights)
    return np.bincount(mesh.cell_of(x), weights=w, minlength=mesh.N).astype(float)


def deposit_smooth(
    mesh: SphericalMesh, x: np.ndarray, weights: np.ndarray | None = None, *, width: float
) -> np.ndarray:
    r"""Smoothed deposit with a von Mises–Fisher kernel of angular width ``width``.

    .. math::

        m_c = \sum_p w_p\,\frac{A_c\,e^{\kappa(\langle x_c,x_p\rangle-1)}}
              {\sum_{c'} A_{c'}\,e^{\kappa(\langle x_{c'},x_p\rangle-1)}},\qquad
        \kappa = 1/\mathrm{width}^2 .

    Each atom's mass is spread over the cells within the kernel's support
    (truncated where it falls below :math:`10^{-16}`) and normalised, so the total is
    conserved.  A kernel narrower than the cells falls back to :func:`deposit`
    for the atoms that reach no cell centre.
    """
    if not (width > 0 and math.isfinite(width)):
        raise ValueError(f"width must be a positive finite number, got {width!r}")
    x, w = _particle_weights(x, weights)
    kappa = 1.0 / width**2
    # exp(-kappa * chord^2 / 2) < 1e-16  <=>  chord > width * sqrt(2 ln 1e16)
    radius = min(2.0, width * math.sqrt(2.0 * math.log(1e16)))
    sparse = cKDTree(x).sparse_distance_matrix(mesh.tree, radius, output_type="coo_matrix")
    p, c, chord = sparse.row, sparse.col, sparse.data
    k = mesh.areas[c] * np.exp(-0.5 * kappa * chord**2)
    norm = np.bincount(p, weights=k, minlength=x.shape[0])
    out = np.zeros(mesh.N)
    ok = norm > 0
    np.add.at(out, c, k * (w[p] / np.where(ok[p], norm[p], 1.0)) * ok[p])
    if not np.all(ok):  # atoms whose kernel reaches no cell centre: plain cell deposit
        out += np.bincount(mesh.cell_of(x[~ok]), weights=w[~ok], minlength=mesh.N)
    return out


def to_weighted_points(mesh: SphericalMesh, mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The grid measure as weighted atoms at the cell centres (see :meth:`SphericalMesh.to_weighted_points`)."""
    return mesh.to_weighted_points(mass)


def coarsen(
    x: np.ndarray, weights: np.ndarray, target: SphericalMesh, *, return_atoms: bool = False
) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Quantise weighted atoms on the cells of a coarser mesh, keeping barycentres.

    .. math::

        \hat m_c = \sum_{p\in\Omega_c} w_p,\qquad
        \hat x_c = \frac{\sum_{p\in\Omega_c} w_p x_p}{\|\sum_{p\in\Omega_c} w_p x_p\|}

    (the :math:`W_2`-optimal atom of each cell up to the spherical correction).
    Empty cells are dropped.  Used to bring large measures to a size the exact
    optimal-transport solver can handle.

    Returns
    -------
    points : (k, 3) array, weights : (k,) array
    atoms : (n,) int array, with ``return_atoms``
        The row of ``points`` that stands for each of ``x`` (its cell's atom; -1 where that cell holds no mass).
    """
    x, w = _particle_weights(x, weights)
    cell = target.cell_of(x)
    mass = np.bincount(cell, weights=w, minlength=target.N)
    bary = np.stack([np.bincount(cell, weights=w * x[:, k], minlength=target.N) for k in range(3)], axis=1)
    keep = mass > 0
    bary = bary[keep]
    norm = np.linalg.norm(bary, axis=1, keepdims=True)
    pts = np.where(norm > 1e-300, bary / np.where(norm > 1e-300, norm, 1.0), target.points[keep])
    if return_atoms:
        return pts, mass[keep], np.where(keep, np.cumsum(keep) - 1, -1)[cell]
    return pts, mass[keep]


def sample_mass(mesh: SphericalMesh, mass: np.ndarray, n: int, *, seed: int | None = 0) -> np.ndarray:
    """``n`` i.i.d. points from the piecewise-constant density ``mass / areas``.

    Pick a cell with probability :math:`m_c`, then a uniform point of that cell
    (uniform in the cap around the generator that contains the cell, accepted
    when the generator is the nearest).
    """
    rng = np.random.default_rng(seed)
    mass = np.asarray(mass, dtype=float)
    p = mass / mass.sum()
    cells = rng.choice(mesh.N, size=n, p=p)
    out = np.empty((n, 3))
    todo = np.arange(n)
    cos_r = np.cos(np.minimum(mesh.cell_radius * (1 + 1e-9), math.pi))
    while todo.size:
        c = cells[todo]
        # uniform in the cap {<y, x_c> >= cos r}: z uniform in [cos r, 1]
        z = cos_r[c] + (1.0 - cos_r[c]) * rng.random(todo.size)
        phi = 2.0 * math.pi * rng.random(todo.size)
        s = np.sqrt(np.clip(1.0 - z * z, 0.0, None))
        centre = mesh.points[c]
        helper = np.where(np.abs(centre[:, :1]) < 0.9, np.array([[1.0, 0, 0]]), np.array([[0, 1.0, 0]]))
        e1 = _normalize(np.cross(centre, helper))
        e2 = np.cross(centre, e1)
        y = z[:, None] * centre + s[:, None] * (np.cos(phi)[:, None] * e1 + np.sin(phi)[:, None] * e2)
        ok = mesh.cell_of(y) == c
        out[todo[ok]] = y[ok]
        todo = todo[~ok]
    return out


# ----------------------------------------------------------------------------- initial densities

#: names usable in a ``function`` expression (evaluated with NumPy, no builtins)
_EXPR_NAMES = EXPR_NAMES
_EXPR_VARS = ("x", "y", "z", "theta", "phi")
_EXPR_NODES = EXPR_NODES


def density_function(expr: str, *, key: str = "init.expr") -> Callable[[np.ndarray], np.ndarray]:
    r"""Compile a density written in ``x, y, z`` (and ``theta`` = polar angle, ``phi`` = azimuth).

    The expression is parsed and checked: only arithmetic, comparisons,
    numbers, the variables and the NumPy functions of :data:`_EXPR_NAMES`
    (``exp``, ``cos``, ``where``, ``pi``, …) are allowed; no attributes, no
    builtins.  Example: ``"exp(4*z) + 0.5*exp(6*x)"``.

    Returns
    -------
    callable
        ``f(points (n, 3)) -> (n,)`` values.
    """
    if not isinstance(expr, str) or not expr.strip():
        raise ConfigError(key, f"expected a non-empty expression in x, y, z, got {expr!r}")
    density = compile_expression(expr, variables=_EXPR_VARS, key=key, what="a density expression")

    def f(points: np.ndarray) -> np.ndarray:
        p = np.asarray(points, dtype=float)
        # (a complex value, e.g. of (-0.5)**(1/3), is refused: its real part had been taken, with a NumPy warning)
        value = density(x=p[:, 0], y=p[:, 1], z=p[:, 2], theta=np.arccos(np.clip(p[:, 2], -1, 1)),
                        phi=np.arctan2(p[:, 1], p[:, 0]))
        return np.broadcast_to(np.asarray(value, dtype=float), (p.shape[0],)).copy()

    return f


def _unit_mean(mean: Any, key: str) -> np.ndarray:
    if mean is None:
        return np.array([0.0, 0.0, 1.0])
    try:
        if np.iscomplexobj(mean):  # (its imaginary part had been dropped with a ComplexWarning)
            raise TypeError
        m = np.asarray(mean, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(key, f"expected a vector of 3 real numbers, got {mean!r}") from None
    if m.shape != (3,) or not np.all(np.isfinite(m)) or not np.any(m):
        raise ConfigError(key, f"expected a non-zero finite vector of 3 numbers, got {mean!r}")
    return unit_rows(m[None, :])[0][0]  # (the norm of [0, 0, 1e155] had overflowed, that of [0, 0, 1e-200] underflowed to 0)


#: the largest vMF concentration κ of an initial density (``init.kappa``'s range too): a cluster of width 1e-6
VMF_KAPPA_MAX = 1e12


def _kappa(kappa: Any, key: str) -> float:
    if isinstance(kappa, bool) or not isinstance(kappa, (int, float, np.floating, np.integer)):
        raise ConfigError(key, f"expected a number, got {kappa!r}")
    try:
        k = float(kappa)
    except OverflowError:  # an integer beyond float64 (10**400)
        k = math.inf
    if not math.isfinite(k) or k < 0:
        raise ConfigError(key, f"must be finite and >= 0, got {kappa!r}")
    if k > VMF_KAPPA_MAX:  # init.kappa's range (a component's κ = 1e308 had overflowed, with NumPy's warning, to "the
        raise ConfigError(key, f"must lie in [0, {VMF_KAPPA_MAX:g}], got {kappa!r}")  # density integrates to zero")
    return k


def _vmf_density(mean: Any = None, kappa: Any = 4.0, *, prefix: str = "init") -> Callable[[np.ndarray], np.ndarray]:
    m = _unit_mean(mean, f"{prefix}.mean")
    k = _kappa(kappa, f"{prefix}.kappa")
    # normalised vMF density on S^2: kappa / (2 pi (1 - e^{-2 kappa})) e^{kappa(<m,x> - 1)}
    const = 1.0 / _FOUR_PI if k == 0 else k / (2.0 * math.pi * -math.expm1(-2.0 * k))
    return lambda p: const * np.exp(k * (np.asarray(p) @ m - 1.0))


def _component_density(comp: Mapping[str, Any], prefix: str) -> Callable[[np.ndarray], np.ndarray]:
    if not isinstance(comp, Mapping):
        raise ConfigError(prefix, "expected a table with keys weight, kind, mean, kappa (or expr)")
    kind = comp.get("kind", "vmf")
    allowed = {"weight", "kind", "mean", "kappa", "expr"}
    for name in comp:
        if name not in allowed:
            raise ConfigError(f"{prefix}.{name}", f"unknown key; allowed keys are {sorted(allowed)}")
    if kind == "uniform":
        return lambda p: np.full(np.asarray(p).shape[0], 1.0 / _FOUR_PI)
    if kind == "vmf":
        return _vmf_density(comp.get("mean"), comp.get("kappa", 4.0), prefix=prefix)
    if kind == "function":
        f = density_function(comp.get("expr"), key=f"{prefix}.expr")  # type: ignore[arg-type]
        return f
    raise ConfigError(f"{prefix}.kind", f"expected 'uniform', 'vmf' or 'function', got {kind!r}")


def _mixture_parts(components: Any) -> tuple[list[float], list[Callable[[np.ndarray], np.ndarray]], list[Mapping[str, Any]]]:
    if not isinstance(components, Sequence) or isinstance(components, str) or not components:
        raise ConfigError("init.components", "expected a non-empty list of {weight, kind, mean, kappa} tables")
    weights, parts = [], []
    for index, comp in enumerate(components):
        prefix = f"init.components[{index}]"
        parts.append(_component_density(comp, prefix))
        wt = comp.get("weight", 1.0)
        if isinstance(wt, bool) or not isinstance(wt, (int, float)) or not math.isfinite(wt) or wt < 0:
            raise ConfigError(f"{prefix}.weight", f"expected a finite number >= 0, got {wt!r}")
        weights.append(float(wt))
    if sum(weights) <= 0:
        raise ConfigError("init.components", "the component weights sum to zero")
    return weights, parts, list(components)


#: points at which :func:`check_density` evaluates a configured density: the Fibonacci spiral and the six ±e_i
_PROBE_POINTS = 2000


def check_density(kind: str, *, expr: Any = None, components: Any = None) -> None:
    """Check a grid's ``init.expr`` or ``init.components`` without its mesh, while the config is read.

    The expression or the component tables are compiled as :func:`initial_mass` compiles them, and each density is
    evaluated at :data:`_PROBE_POINTS` quasi-uniform points and the poles ``±e_i``: a value that is not finite or is
    negative there is refused, naming the key.  (These had been found only when the run was built: ``meanfield
    sweep`` wrote its folder and then failed every case, exit 1.)  The mesh's own quadrature points are checked when
    the run is built, and so is a density that integrates to zero.

    Raises
    ------
    ConfigError
        Naming ``init.expr``, ``init.components`` or the component's key.
    """
    if kind == "function":
        parts = [("init.expr", density_function(expr))]
    elif kind == "mixture":
        _, densities, _ = _mixture_parts(components)
        parts = [(f"init.components[{index}]", f) for index, f in enumerate(densities)]
    else:
        return
    eye = np.eye(3)
    points = np.concatenate([fibonacci_points(_PROBE_POINTS), eye, -eye])
    for key, f in parts:
        with np.errstate(all="ignore"):  # a value that is not finite is named below
            values = np.asarray(f(points.copy()), dtype=float)
        if not np.all(np.isfinite(values)):
            at = points[int(np.argmin(np.isfinite(values)))]
            raise ConfigError(key, f"the density is not finite everywhere on the sphere (at x, y, z = {at[0]:.3g}, {at[1]:.3g}, {at[2]:.3g})")
        if np.any(values < 0):
            at = points[int(np.argmax(values < 0))]
            raise ConfigError(key, f"the density is negative (at x, y, z = {at[0]:.3g}, {at[1]:.3g}, {at[2]:.3g}; "
                                   f"{int(np.sum(values < 0))} of {values.size} points checked)")


def _normalised(mesh: SphericalMesh, f: Callable[[np.ndarray], Any], key: str) -> np.ndarray:
    """Cell masses of the density ``f`` by :meth:`SphericalMesh.integrate`, normalised to total 1."""
    nodes, weights = mesh.fan_quadrature
    values = np.asarray(f(nodes.reshape(-1, 3).copy()), dtype=float)
    if values.ndim == 0:
        values = np.broadcast_to(values, (weights.size,))
    if values.shape != (weights.size,):
        raise ConfigError(key, f"expected one value per point ({weights.size} points), got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ConfigError(key, "the density is not finite everywhere on the sphere")
    if np.any(values < 0):
        raise ConfigError(key, f"the density is negative at {int(np.sum(values < 0))} of {values.size} quadrature points")
    mass = mesh.cell_sum(values.reshape(weights.shape) * weights)
    total = mass.sum()
    if not total > 0:
        raise ConfigError(key, "the density integrates to zero")
    return mass / total


def _init_uniform(mesh: SphericalMesh) -> np.ndarray:
    return mesh.areas / mesh.areas.sum()


def _init_vmf(mesh: SphericalMesh, *, mean: Any = None, kappa: Any = 4.0) -> np.ndarray:
    f = _vmf_density(mean, kappa)
    return _normalised(mesh, f, "init.kappa")


def _init_mixture(mesh: SphericalMesh, *, components: Any = None) -> np.ndarray:
    weights, parts, _ = _mixture_parts(components)
    total = sum(weights)
    return _normalised(mesh, lambda x: sum((w / total) * f(x) for w, f in zip(weights, parts)), "init.components")


def _init_function(mesh: SphericalMesh, *, expr: str | None = None, f: Callable[[np.ndarray], Any] | None = None) -> np.ndarray:
    if (expr is None) == (f is None):
        raise ConfigError("init.expr", "kind='function' needs exactly one of expr (a string in x, y, z) or f (a callable)")
    if f is not None:
        if not callable(f):
            raise ConfigError("init.f", f"expected a callable f(points) -> values, got {f!r}")

        def values(x: np.ndarray) -> np.ndarray:
            try:
                return np.asarray(f(x), dtype=float)
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise ConfigError("init.f", f"calling f failed: {exc}") from None

        return _normalised(mesh, values, "init.f")
    return _normalised(mesh, density_function(expr), "init.expr")


def _init_file(mesh: SphericalMesh, *, path: str | Path | None = None, width: float | None = None) -> np.ndarray:
    if path is None:
        raise ConfigError("init.path", "kind='file' needs path = \"mass.npy\"")
    path = Path(path)
    if not path.exists():
        raise ConfigError("init.path", f"file not found: {path}")
    # the shared reader: an HDF5 or text file had been called "pickled data" (with NumPy's advice to unpickle it),
    # complex masses had lost their imaginary part and strings had failed in the cast to float
    arr = np.asarray(load_npy(path, "init.path", real=True), dtype=float)
    if arr.size == 0:
        raise ConfigError("init.path", f"{path} holds an empty array (shape {arr.shape}): no masses or points")
    if not np.all(np.isfinite(arr)):
        raise ConfigError("init.path", f"{path} contains non-finite values")
    if arr.ndim == 1:
        if np.any(arr < 0) or not arr.sum() > 0:
            raise ConfigError("init.path", f"{path}: cell masses must be >= 0 with a positive total")
        if arr.shape[0] == mesh.N:
            return arr / arr.sum()
        # masses of another mesh of the same family: sample its density at our centres
        if arr.shape[0] < 12:
            raise ConfigError("init.path", f"{path}: expected {mesh.N} cell masses, got {arr.shape[0]}")
        if mesh.family not in ("fibonacci", "icosahedral"):  # a graded mesh is set by its centres too: N alone names none
            raise ConfigError("init.path", f"{path} holds {arr.shape[0]} cell masses, and this {mesh.family} mesh has "
                                           f"{mesh.N} cells; masses of another mesh are read for the fibonacci and "
                                           "icosahedral families only (give (n, 3) or (n, 4) points instead)")
        source = fibonacci_mesh(arr.shape[0]) if mesh.family != "icosahedral" else mesh_by_size(arr.shape[0], "icosahedral", key="init.path")
        rho = (arr / arr.sum()) / source.areas
        return _normalised(mesh, lambda x: rho[source.cell_of(x)], "init.path")
    if arr.ndim == 2 and arr.shape[1] in (3, 4):
        x, norms = unit_rows(arr[:, :3])  # (a point of 1e-200s had been called zero, one of 1e200s become 0)
        if np.any(norms == 0):
            raise ConfigError("init.path", f"{path}: point {int(np.argmin(norms))} is zero and cannot be put on the sphere")
        w = arr[:, 3] if arr.shape[1] == 4 else None
        if w is not None and (np.any(w < 0) or not w.sum() > 0):
            raise ConfigError("init.path", f"{path}: weights (column 4) must be >= 0 with a positive total")
        w = None if w is None else w / w.sum()
        mass = deposit(mesh, x, w) if width is None else deposit_smooth(mesh, x, w, width=float(width))
        return mass / mass.sum()
    raise ConfigError("init.path", f"{path}: expected (N,) cell masses, (n, 3) points or (n, 4) weighted points, got shape {arr.shape}")


def mesh_by_size(n: int, family: str, *, key: str) -> SphericalMesh:
    """The mesh of ``family`` with exactly ``n`` cells (``ConfigError`` if there is none)."""
    if family == "icosahedral":
        level = _icosahedral_level(n)
        if 10 * 4**level + 2 != n:
            raise ConfigError(key, f"{n} is not the size 10·4^L+2 of an icosahedral mesh")
        return icosahedral_mesh(level)
    return fibonacci_mesh(n)


#: initial grid densities by name: ``kind -> f(mesh, **params) -> (N,) masses``
INITIAL_DENSITIES: dict[str, Callable[..., np.ndarray]] = {
    "uniform": _init_uniform,
    "vmf": _init_vmf,
    "mixture": _init_mixture,
    "function": _init_function,
    "file": _init_file,
}

_PARAMS: dict[str, tuple[str, ...]] = {
    "uniform": (),
    "vmf": ("mean", "kappa"),
    "mixture": ("components",),
    "function": ("expr", "f"),
    "file": ("path", "width"),
}


def initial_mass(mesh: SphericalMesh, kind: str, **params: Any) -> np.ndarray:
    r"""Initial cell masses of a named density: its integrals over the cells.

    .. math::

        m_c = \frac{\int_{\Omega_c} f\,dA}{\int_{S^2} f\,dA}

    by the degree-2 fan quadrature of :meth:`SphericalMesh.integrate` (error
    :math:`O(h^4A_c)` per cell for smooth :math:`f`: the cell averages a
    second-order scheme needs).

    Kinds and their parameters:

    ``uniform``
        :math:`f = 1/(4\pi)`, so :math:`m_c = A_c/4\pi`.
    ``vmf`` (``mean`` (3,), default :math:`e_3`; ``kappa`` ≥ 0, default 4)
        :math:`f\propto e^{\kappa\langle m,x\rangle}`.
    ``mixture`` (``components``: list of tables ``{weight, kind, mean, kappa}``, kind ``vmf``/``uniform``/``function`` with ``expr``)
        :math:`f=\sum_k w_k f_k/\sum_k w_k` with each :math:`f_k` normalised.
    ``function`` (``expr``: a string in ``x, y, z`` — see :func:`density_function` — or ``f``: a callable ``f(points) -> values``)
        any non-negative density, not necessarily normalised.
    ``file`` (``path`` to ``.npy``; optional ``width`` for a smoothed deposit)
        ``(N,)`` cell masses of this mesh; ``(M,)`` masses of the ``M``-cell
        mesh of the same family (its density sampled at our centres); ``(n, 3)``
        points or ``(n, 4)`` weighted points (deposited).

    Parameters ``None`` are ignored (so a resolved config section can be passed).

    Raises
    ------
    ConfigError
        (a ``ValueError``) naming the parameter, e.g. ``init.kappa``.

    Examples
    --------
    >>> m = initial_mass(fibonacci_mesh(500), "vmf", mean=[0, 0, 1], kappa=4.0)
    >>> round(float(m.sum()), 12)
    1.0
    """
    if not isinstance(mesh, SphericalMesh):  # (None had been an AttributeError on 'fan_quadrature')
        raise TypeError(f"mesh must be a SphericalMesh (meanfield.mesh(...)), got {type(mesh).__name__}")
    builder = INITIAL_DENSITIES.get(kind) if isinstance(kind, str) else None  # (a dict had been 'unhashable type')
    if builder is None:
        raise ConfigError("init.kind", f"unknown grid density {kind!r}; choose from {sorted(INITIAL_DENSITIES)}")
    given = {k: v for k, v in params.items() if v is not None}
    for name in given:
        if name not in _PARAMS[kind]:
            raise ConfigError(f"init.{name}", f"not a parameter of kind={kind!r}; it takes {list(_PARAMS[kind]) or 'none'}")
    return builder(mesh, **given)


def sample_initial(kind: str, n: int, *, seed: int | None = 0, **params: Any) -> np.ndarray:
    """``n`` i.i.d. points from the same density as :func:`initial_mass` (for particle runs).

    ``uniform``, ``vmf`` and ``mixture`` (of uniform/vMF) are sampled exactly;
    ``function`` by rejection against the uniform law (bound from a fine
    Fibonacci evaluation, times 1.25); ``file`` (and mixtures with ``function``
    components) by the piecewise-constant density of a 20 000-cell mesh
    (:func:`sample_mass`).
    """
    from meanfield.geometry.sphere import sample_uniform, sample_vmf

    given = {k: v for k, v in params.items() if v is not None}
    rng = np.random.default_rng(check_seed(seed))
    if kind == "uniform":
        return sample_uniform(n, 3, seed=rng.integers(2**63))
    if kind == "vmf":
        return sample_vmf(n, 3, mean=_unit_mean(given.get("mean"), "init.mean"),
                          kappa=_kappa(given.get("kappa", 4.0), "init.kappa"), seed=rng.integers(2**63))
    if kind == "mixture":
        weights, _, comps = _mixture_parts(given.get("components"))
        if all(c.get("kind", "vmf") in ("uniform", "vmf") for c in comps):
            counts = rng.multinomial(n, np.asarray(weights) / sum(weights))
            pieces = [sample_initial(c.get("kind", "vmf"), int(k), seed=int(rng.integers(2**31)),
                                     **{key: c[key] for key in ("mean", "kappa") if key in c})
                      for c, k in zip(comps, counts) if k > 0]
            out = np.concatenate(pieces)
            return out[rng.permutation(n)]
    if kind == "function" and "f" not in given:
        f = density_function(given.get("expr"))  # type: ignore[arg-type]
        probe = f(fibonacci_points(50_000))
        bound = 1.25 * float(np.max(probe))
        if not bound > 0:
            raise ConfigError("init.expr", "the density integrates to zero")
        out, filled = np.empty((n, 3)), 0
        while filled < n:
            y = sample_uniform(2 * (n - filled) + 64, 3, seed=rng.integers(2**63))
            keep = y[rng.random(y.shape[0]) * bound < f(y)][: n - filled]
            out[filled : filled + keep.shape[0]] = keep
            filled += keep.shape[0]
        return out
    fine = fibonacci_mesh(20_000)
    return sample_mass(fine, initial_mass(fine, kind, **given), n, seed=int(rng.integers(2**31)))
