r"""Exact "local" attention on :math:`S^2`: every row summed over the only points that matter.

For one head, row :math:`i` of the velocity laws of :mod:`meanfield.kernels.attention`
(softmax, unnormalized, pooled) is built from the shifted sums

.. math::

    D_i = \sum_j a_j\, e^{\beta s_{ij} - m_i}, \qquad
    N_i = \sum_j a_j\, e^{\beta s_{ij} - m_i}\, x_j, \qquad
    s_{ij} = x_i^\top B x_j = u_i\cdot x_j,\quad u_i = B^\top x_i ,

with :math:`m_i = \max_j \beta s_{ij}`.  Write :math:`r_i=\beta\|u_i\|`,
:math:`\hat u_i = u_i/\|u_i\|`, :math:`j^*_i=\arg\max_j\hat u_i\cdot x_j` the best point
and :math:`c^*_i=\hat u_i\cdot x_{j^*_i}`.  A point with :math:`r_i(c^*_i-\hat u_i\cdot
x_j)>\Delta_i` contributes less than :math:`e^{-\Delta_i}` times its mass, so, relative
to the row's own sum :math:`D_i\ge a_{j^*_i}`, everything outside the spherical cap

.. math::

    \mathcal C_i = \{y\in S^2:\ \hat u_i\cdot y \ge c^*_i - \Delta_i/r_i\},\qquad
    \Delta_i = \ln\frac{M}{\varepsilon\,a_{j^*_i}}

(:math:`M=\sum_j a_j`; :func:`cap_parameters`) may be dropped at relative cost
:math:`\varepsilon`.  With equal masses :math:`\Delta_i=\ln(m/\varepsilon)` for every row;
with masses over many decades (a grid density late in a clustering run) the rows whose
direction sees only empty cells get the larger caps they need, and the rows on a heavy
cluster smaller ones.  For large :math:`r_i` the cap is small: its chord radius is
:math:`\sqrt{2(1-c^*_i)+2\Delta_i/r_i}`, about :math:`(2\Delta_i/r_i)^{1/2}` around the
best point.

**Algorithm.**  The points with positive mass are binned in cubes on :math:`[-1,1]^3`
(:meth:`SphereSources.grid`, about :data:`GRID_POINTS` points in a cube the sphere
crosses), and go into a :class:`scipy.spatial.cKDTree` for the nearest-point queries.  The
query directions :math:`\hat u_i` are grouped into blocks: cells of a cube-sphere grid
(gnomonic side about half the typical cap radius, :data:`CELL_CAP`, or smaller so that a
cell holds about :data:`BLOCK_ROWS` rows), split into at most :data:`BLOCK_ROWS` rows.  For
a block with centre :math:`c`, radius :math:`\delta` (chord), nearest point at chord
:math:`d` from :math:`c` and largest cap parameter :math:`\Delta_b` of its rows, every
row's cap lies in the ball of chord radius :math:`R=\rho+\delta`,
:math:`\rho=\sqrt{(d+\delta)^2+2\Delta_b/r_{\min}}`, around :math:`c` (blocks with
:math:`R\ge` :data:`WHOLE_CHORD` scan every point instead).  One numba kernel, in parallel
over the blocks, lists each block's candidates from the cubes of the ball's bounding box (the
coordinates and masses stored in the grid's order, :attr:`SphereSources.grid_columns`, so that a
cube's points are read from contiguous memory), and sorts them into up to :data:`LOCAL_RINGS`
rings of equal area around :math:`c` (at least :data:`RING_POINTS` candidates a ring on average).
A row at chord :math:`\delta_i` from :math:`c` scores a point of ring :math:`k` (inner radius
:math:`t_k`) at most :math:`r_i(1-(t_k-\delta_i)_+^2/2)`.  Its exact maximum score :math:`m_i` (the
shift: no overflow, no underflow of the leading term) lies within :math:`d+2\delta_i` of :math:`c`,
in the first rings; then it sums :math:`e^{\beta s_{ij}-m_i}` ring after ring (every candidate of a
ring, with the branch-free vectorised ``exp`` of :mod:`meanfield.kernels.fused`; the rings are the
outer loop, so that each stays in cache while every row still summing runs over it), and stops at
the first ring after which the rigorous bound on everything it left out holds:

.. math::

    \sum_{k>K_i} M_k\, e^{r_i(1-(t_k-\delta_i)_+^2/2) - m_i}
    + (M - M_{\rm ball})\, e^{r_i(1-(R-\delta_i)^2/2) - m_i} \le \varepsilon\, D_i^{(K_i)}

(:math:`M_k` the mass of ring :math:`k`, :math:`M_{\rm ball}` that of all candidates,
:math:`D_i^{(K_i)}` the row's sum over rings :math:`\le K_i`).  The ball was drawn for the worst
case, :math:`D_i\ge a_{j^*_i}`; a row stops where its own sum, usually far larger, allows, about
:math:`\ln(1/\varepsilon)` below its best point rather than :math:`\Delta_i` (measured, two threads:
the 36 672 emptiest rows of a 131 072-cell grid at β = 256 in 0.37 s instead of 0.85 s when every
row summed its block's whole ball; 16 384 particles at β = 64 in 0.10 s instead of 0.34 s).  Blocks
that scan every point sort them into rings too.  Under the causal mask, or with proxies, every row sums all the
candidates of its block (in chunks of :data:`LOCAL_CHUNK` that stay in cache) and checks the
bound with :math:`\rho` alone.  Rows that fail the bound (the caps of :func:`cap_parameters` make
it hold at once) are redone with a doubled :math:`\Delta_i`, twice, and then by the dense exact
sum over all points.  The result is exact to a relative :math:`\varepsilon` = ``tolerance / 2`` per
row (plus rounding), whatever the data.

A candidate pair costs about what a pair of the dense fused kernel (:mod:`meanfield.kernels.fused`)
costs, its ``exp`` (3.7 ns on one AVX2 core, measured when the kernel summed every candidate).  Cost:
:math:`\sum_{\rm rows}` (candidates in the row's rings) pairs, about
:math:`n^2\cdot(\sqrt{2\ln(1/\varepsilon)/r}+\delta)^2/4` for spread-out data at large
:math:`r=\beta\|B\|` (vs :math:`n^2` dense), plus a pass over each block's ball.  Memory
:math:`O(n + m)` plus one block's candidates per thread.

**Compact clusters** (the terminal phase at large :math:`\beta`).  Where the tokens sit in
clusters tighter than the kernel's width, every row whose cap reaches a cluster would sum all of
its points: :math:`n^2/2` pairs for two clusters.  A heavy cell of the point grid whose points
lie in a small enough box is summed instead through the Chebyshev proxy of
:mod:`meanfield.kernels.cluster_proxies` (a few hundred to a few thousand nodes with anterpolated
weights, built once per evaluation and head, to a quarter of the tolerance; the cell's other
points are listed one by one).  A proxy stands for its whole box, so a ball that reaches the
cell sums all of it: more than the cap needs, never less, and the bound below holds as it is.

**Causal mask** (``mask="causal"``; Karagodin, Polyanskiy and Rigollet, *Clustering in
Causal Attention Masking*, arXiv 2411.04990): row :math:`i` may only use the points
:math:`j\le i`.  The cubes, the blocks and the candidate balls stay those of all points;
each block's candidates are sorted into index order, so that row :math:`i` scores the
leading candidates up to its limit only (the causal pairs, about half), and the bound
uses the mass :math:`M_i=\sum_{j\le i}a_j` of its prefix.  Causal rows take
:math:`\Delta_i=\ln(m/\varepsilon)`: their best point may lie outside their prefix.  The bound stays rigorous (the
ball bounds the scores of every point outside it, whichever index it has); rows whose
prefix holds nothing near the ball — the first few hundred rows, typically — fail it
and take the dense exact sum over their (short) prefix.

This module also holds what the harmonic kernel (:mod:`meanfield.kernels.harmonic`)
shares with it: the input checks, the per-head shifted sums :class:`HeadSums`, and
their combination into the velocity laws (:func:`combine_head_sums`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numba import prange
from scipy.spatial import cKDTree

from meanfield.heads.head import HeadStack
import meanfield.kernels.cluster_proxies as cluster_proxies_module
from meanfield.kernels.cluster_proxies import ClusterProxies, build_proxies
from meanfield.kernels.fused import _accumulate3, _score_exp3
from meanfield.kernels.inputs import BLOCK_ELEMENTS, check_tokens, check_tolerance, is_causal, token_masses
from meanfield.kernels.jit import jit, kernel_threads, num_threads, pjit

__all__ = [
    "velocity_local",
    "local_head_sums",
    "dense_head_sums",
    "combine_head_sums",
    "store_row_logs",
    "pooled_scales",
    "check_sphere_tokens",
    "HeadSums",
    "SphereSources",
    "SPHERE_KINDS",
    "SPHERE_TOLERANCE",
    "BLOCK_ROWS",
    "QUERY_PARALLEL_POINTS",
    "query_workers",
    "CELL_CAP",
    "WHOLE_CHORD",
    "GRID_POINTS",
    "MIN_BLOCK_ROWS",
    "LOCAL_CHUNK",
    "LOCAL_RINGS",
    "RING_POINTS",
    "GRID_SIDE",
]

#: velocity laws the sphere kernels provide (``relu`` has no exponential structure)
SPHERE_KINDS: tuple[str, ...] = ("softmax", "unnormalized", "pooled")
#: largest deviation :math:`\delta=\max_i|\|x_i\|-1|` accepted: the caps and the harmonic expansion
#: assume unit vectors, and :func:`check_sphere_tokens` divides the tokens it accepts by their norms, so that every
#: sphere kernel computes the velocity of the same unit vectors (the harmonic kernel, which reads directions only, had
#: differed from the local and dense ones, which read the vectors, by about δ·β‖B‖: 2e-9 at β = 1024, δ = 9e-11).
#: A dense kernel takes the tokens as given: it differs from the sphere kernels by up to that much on such tokens
SPHERE_TOLERANCE = 1e-10
#: most query rows per block of the local kernel (one candidate list per block)
BLOCK_ROWS = 128
#: fewest query rows a block should hold on average (cells no smaller than that): a block costs about
#: 2 µs of its own, the time of some 500 candidate pairs
MIN_BLOCK_ROWS = 16
#: cell side of the row blocks as a fraction of the typical cap radius (larger cells: fewer
#: candidate lists, more score pairs)
CELL_CAP = 0.5
#: candidates per chunk of the local kernel: every row of a block runs over one chunk while it is in
#: cache (7 arrays of 2048 doubles: 112 KiB)
LOCAL_CHUNK = 2048
#: rings (even in area) that sort a block's candidates by their distance to its centre: each row sums
#: them outward until the bound on the rest holds
LOCAL_RINGS = 32
#: fewest candidates a ring should hold on average (shorter loops cost more than the pairs they save)
RING_POINTS = 128
#: points per cell of the point grid that lists a block's candidates (:meth:`SphereSources.grid`)
GRID_POINTS = 16
#: most cells a side of that grid (128³ cells: 16 MiB of pointers)
GRID_SIDE = 128
#: blocks whose candidate ball has at least this chord radius (a third of the sphere's area)
#: scan all points instead: listing them costs more than the cheap score pass they save
WHOLE_CHORD = 1.15
#: rounds of widening the caps (Δ doubled each round) before the dense exact sum
_RETRIES = 2
#: k-d tree queries of fewer points than this run on one thread (:func:`query_workers`)
QUERY_PARALLEL_POINTS = 16384


# ----------------------------------------------------------------------------- shared pieces


def check_sphere_tokens(x: np.ndarray, heads: HeadStack, kind: str, *, tolerance: object = None, beta: object = None) -> np.ndarray:
    """``x`` as a contiguous ``(n, 3)`` float array of unit vectors; ``kind`` one of :data:`SPHERE_KINDS`; ``tolerance``,
    where given, in the range of :func:`~meanfield.kernels.inputs.check_tolerance`; ``beta``, where given, an inverse
    temperature (:func:`check_tokens`).

    Tokens within :data:`SPHERE_TOLERANCE` of the unit sphere are divided by their norms (a new array; tokens of norm
    exactly 1 are returned as they are), so that the harmonic kernel, which reads their directions only, and the
    local one, which reads the vectors, compute the same velocity: that of the unit vectors.

    Raises
    ------
    ValueError
        For an unknown kind, ``"relu"``, ``d != 3``, tokens off the unit sphere
        (by more than :data:`SPHERE_TOLERANCE`), a tolerance outside
        :data:`~meanfield.kernels.inputs.TOLERANCE_RANGE`, or a β that is not finite and ≥ 0.
    """
    if tolerance is not None:
        check_tolerance(tolerance)
    if kind == "relu":
        raise ValueError("the sphere kernels provide the exponential laws only (softmax, unnormalized, pooled), not 'relu'")
    if heads.d != 3:
        raise ValueError(f"the sphere kernels need d = 3, got heads of dimension {heads.d}")
    x = check_tokens(x, heads, kind, beta=beta)
    if x.shape[0]:
        norms = np.sqrt(np.einsum("ij,ij->i", x, x))
        err = float(np.max(np.abs(norms - 1.0)))
        if not err <= SPHERE_TOLERANCE:
            raise ValueError(f"the sphere kernels need tokens on the unit sphere (max | |x_i| - 1 | = {err:.3g} > {SPHERE_TOLERANCE:g})")
        if err > 0.0:  # every sphere kernel sums over the same unit vectors (module constant SPHERE_TOLERANCE)
            x = x / norms[:, None]
    return x


@dataclass
class HeadSums:
    r"""Shifted sums of one head for a set of rows.

    Attributes
    ----------
    num : (k, 3) array
        :math:`\sum_j a_j e^{\beta s_{ij}-m_i} x_j` (before the value matrix).
    den : (k,) array
        :math:`\sum_j a_j e^{\beta s_{ij}-m_i}`.
    shift : (k,) array
        :math:`m_i` (any number; exact row maximum for the local sums,
        :math:`\beta\|B^\top x_i\|` for the harmonic ones).
    """

    num: np.ndarray
    den: np.ndarray
    shift: np.ndarray

    @classmethod
    def empty(cls, k: int) -> HeadSums:
        return cls(np.zeros((k, 3)), np.zeros(k), np.zeros(k))

    def put(self, rows: np.ndarray, other: HeadSums) -> None:
        """Overwrite ``rows`` with ``other`` (whose rows are in the order of ``rows``)."""
        self.num[rows] = other.num
        self.den[rows] = other.den
        self.shift[rows] = other.shift

    def take(self, rows: np.ndarray) -> HeadSums:
        return HeadSums(self.num[rows], self.den[rows], self.shift[rows])


def _scaled_values(values: np.ndarray, shift: np.ndarray) -> np.ndarray:
    r""":math:`e^{m_i}\,y_i` for the rows ``values`` :math:`y_i` (``(k, 3)``, finite: :math:`V N_i`) and shifts :math:`m_i`.

    The factor goes on in four quarters, :math:`(((y\,e^{m/4})\,e^{m/4})\,e^{m/4})\,e^{m/4}` (:math:`m/4` is exact:
    a few roundings of the products, none of the exponent): a quarter is finite up to :math:`m = 2839`, past the
    :math:`m \approx 1455` from which :math:`e^m y` overflows for any :math:`y \ne 0` (the smallest double is
    :math:`4.9\cdot10^{-324}`), and the partial products grow (or shrink) monotonically, so an entry is finite wherever
    :math:`e^m y` is, and :math:`\pm\infty` where it overflows; an entry :math:`y = 0` is 0.  (The value matrix had
    been applied after :math:`e^{m/2}`: past :math:`m \approx 1419`, where that half is infinite, its products gave
    :math:`0\cdot\infty` and :math:`\infty-\infty`, NaN where the dense kernels gave :math:`\pm\infty`.)"""
    quarter = np.exp(0.25 * shift)[:, None]
    scaled = (((values * quarter) * quarter) * quarter) * quarter
    return np.where(values == 0.0, 0.0, scaled)


def pooled_scales(heads: HeadStack, sums: list[HeadSums]) -> tuple[np.ndarray, np.ndarray]:
    r"""Per-head factors :math:`w_h e^{m^h_i-R_i}` of the pooled law (shape ``(H, k)``) and :math:`R_i`.

    :math:`R_i=\max_h(m^h_i+\ln D^h_i)` over the heads with :math:`w_h\ne0`, so that the
    largest term of the pooled denominator is :math:`|w_h|` (no overflow, no underflow).
    """
    k = sums[0].den.shape[0]
    active = [h for h in range(heads.H) if heads.w[h] != 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        levels = np.array([sums[h].shift + np.log(np.maximum(sums[h].den, 1e-300)) for h in active]).reshape(len(active), k)
    top = levels.max(axis=0) if active else np.zeros(k)
    scales = np.zeros((heads.H, k))
    for h in active:
        scales[h] = heads.w[h] * np.exp(np.minimum(sums[h].shift - top, 700.0))
    return scales, top


@pjit
def _add_values(num, factor, V, out):  # pragma: no cover - compiled
    """out_i += factor_i · V num_i (factor applied as two halves when it could overflow alone)."""
    for i in prange(num.shape[0]):
        f = factor[i]
        for k in range(3):
            out[i, k] += f * (V[k, 0] * num[i, 0] + V[k, 1] * num[i, 1] + V[k, 2] * num[i, 2])


def _add(out: np.ndarray, num: np.ndarray, factor: np.ndarray, V: np.ndarray) -> None:
    with kernel_threads(8.0 * num.shape[0]):
        _add_values(np.ascontiguousarray(num), np.ascontiguousarray(factor, dtype=float), np.ascontiguousarray(V), out)


def combine_head_sums(heads: HeadStack, kind: str, sums: list[HeadSums]) -> np.ndarray:
    r"""The velocity laws from the per-head shifted sums.

    .. math::

        \text{softmax: } v_i=\sum_h \frac{V_hN^h_i}{D^h_i},\qquad
        \text{unnormalized: } v_i=\sum_h e^{m^h_i}V_hN^h_i,\qquad
        \text{pooled: } v_i=\frac{\sum_h w_h e^{m^h_i-R_i} V_hN^h_i}{\sum_h w_h e^{m^h_i-R_i}D^h_i}.

    Heads with :math:`w_h = 0` are not read by the pooled law (their sums may be left empty).
    """
    k = sums[0].den.shape[0]
    out = np.zeros((k, 3))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if kind == "softmax":
            for h in range(heads.H):
                _add(out, sums[h].num, 1.0 / sums[h].den, heads.V[h])
        elif kind == "unnormalized":
            for h in range(heads.H):
                out += _scaled_values(sums[h].num @ heads.V[h].T, sums[h].shift)
        elif kind == "pooled":
            scales, _ = pooled_scales(heads, sums)
            den = np.zeros(k)
            for h in range(heads.H):
                if heads.w[h] != 0:
                    _add(out, sums[h].num, scales[h], heads.V[h])
                    den += scales[h] * sums[h].den
            out /= den[:, None]
        else:  # pragma: no cover - checked before
            raise ValueError(f"unknown kind {kind!r}")
    return out


def store_row_logs(row_logs: np.ndarray | None, heads: HeadStack, kind: str, sums: list[HeadSums]) -> None:
    r"""``row_logs[h] =`` :math:`m^h_i + \ln D^h_i`, each head's :math:`\ln\sum_j a_j e^{\beta s^h_{ij}}` (pooled: the heads with
    :math:`w_h \neq 0`, whose sums were taken), where ``row_logs`` is asked for."""
    if row_logs is None:
        return
    with np.errstate(divide="ignore"):  # a row that sees no mass: ln 0 = -inf
        for h in range(heads.H):
            if kind != "pooled" or heads.w[h] != 0:
                row_logs[h] = sums[h].shift + np.log(sums[h].den)


class SphereSources:
    r"""The points with positive mass, prepared once per call: coordinates, masses and their k-d tree.

    Parameters
    ----------
    x : (n, 3) array
        Unit vectors.
    a : (n,) array
        Masses :math:`a_j\ge0`; points of zero mass are dropped.
    """

    def __init__(self, x: np.ndarray, a: np.ndarray) -> None:
        keep = a > 0
        self.index = np.flatnonzero(keep)
        self.y = np.ascontiguousarray(x[keep])
        self.w = np.ascontiguousarray(a[keep])
        self.m = int(self.y.shape[0])
        self.mass = float(self.w.sum())

    @cached_property
    def wy(self) -> np.ndarray:
        """(4, m): the columns the kernels accumulate, :math:`a_jy_j` and :math:`a_j`."""
        out = np.empty((4, self.m))
        np.multiply(self.y.T, self.w, out=out[:3])
        out[3] = self.w
        return out

    @cached_property
    def yt(self) -> np.ndarray:
        """(3, m): the coordinates, one row each."""
        return np.ascontiguousarray(self.y.T)

    @cached_property
    def cumulative_mass(self) -> np.ndarray:
        """(m + 1,): :math:`\\sum_{k<l} a_k`, the mass of the first ``l`` points (causal prefixes)."""
        out = np.zeros(self.m + 1)
        np.cumsum(self.w, out=out[1:])
        return out

    def causal_limits(self, rows: np.ndarray) -> np.ndarray:
        """For token indices ``rows``: how many of the points (in index order) have index ≤ the row's own."""
        return np.searchsorted(self.index, np.asarray(rows, dtype=np.int64), side="right").astype(np.int64)

    @cached_property
    def tree(self) -> cKDTree:
        return cKDTree(self.y, balanced_tree=False, compact_nodes=False)

    def proxies(self, qmax: float, tolerance: float) -> ClusterProxies:
        r"""The Chebyshev proxies of the compact, heavy clusters of points (:func:`~meanfield.kernels.cluster_proxies.build_proxies`),
        for rows with :math:`\|q\|\le` ``qmax``, to a relative ``tolerance`` per box; kept for the next head with the same bound."""
        key = (float(qmax), float(tolerance))
        cache = self.__dict__.setdefault("_proxies", {})
        if key not in cache:
            _, _, start, order = self.grid
            cache[key] = build_proxies(self.y, self.wy, start, order, qmax=qmax, tolerance=tolerance)
        return cache[key]

    @cached_property
    def grid_columns(self) -> tuple[np.ndarray, np.ndarray]:
        """:attr:`yt` and :attr:`wy` with their columns in the point grid's order (``cell_order`` of :attr:`grid`)."""
        order = self.grid[3]
        return np.ascontiguousarray(self.yt[:, order]), np.ascontiguousarray(self.wy[:, order])

    @cached_property
    def grid(self) -> tuple[float, int, np.ndarray, np.ndarray]:
        """The points binned in cubes of side ``g`` on :math:`[-1,1]^3`: ``(g, side, cell_start, cell_order)``.

        Cell ``(ix·side + iy)·side + iz`` holds the points ``cell_order[cell_start[c]:cell_start[c+1]]``;
        ``g`` puts about :data:`GRID_POINTS` points in a cell that the sphere crosses (such a cell holds
        a patch of area about :math:`1.5g^2`), with at most :data:`GRID_SIDE` cells a side.
        """
        g = max(2.0 / GRID_SIDE, min(2.0, float(np.sqrt(GRID_POINTS * 1.5 * 4.0 * np.pi / max(self.m, 1)))))
        side = int(np.ceil(2.0 / g))
        ijk = np.clip(np.floor((self.y + 1.0) / g).astype(np.int64), 0, side - 1)
        cell = (ijk[:, 0] * side + ijk[:, 1]) * side + ijk[:, 2]
        order = np.argsort(cell, kind="stable")
        start = np.zeros(side**3 + 1, dtype=np.int64)
        np.cumsum(np.bincount(cell, minlength=side**3), out=start[1:])
        return g, side, start, order.astype(np.int64)


# ----------------------------------------------------------------------------- numba kernels


@jit(fastmath=True)
def _max_score(q0, q1, q2, y0, y1, y2, nc):  # pragma: no cover - compiled
    """``max_j q · y_j`` over the first ``nc`` candidates (``-inf`` for none)."""
    best = -np.inf
    for j in range(nc):
        best = max(best, q0 * y0[j] + q1 * y1[j] + q2 * y2[j])
    return best


@jit
def _box(cx, cy, cz, R, g, side):  # pragma: no cover - compiled
    """The cube indices ``lo ≤ i ≤ hi`` (per axis) that the bounding box of the ball ``(c, R)`` overlaps."""
    return (max(0, int(np.floor((cx - R + 1.0) / g))), min(side - 1, int(np.floor((cx + R + 1.0) / g))),
            max(0, int(np.floor((cy - R + 1.0) / g))), min(side - 1, int(np.floor((cy + R + 1.0) / g))),
            max(0, int(np.floor((cz - R + 1.0) / g))), min(side - 1, int(np.floor((cz + R + 1.0) / g))))


@jit
def _gather(cx, cy, cz, R, g, side, cell_start, ys, idx):  # pragma: no cover - compiled
    """Positions (in the grid's order) of the points within chord ``R`` of ``(cx, cy, cz)`` into ``idx``; returns their count.

    The grid's cells are cubes of side ``g`` on :math:`[-1, 1]^3`, numbered
    ``(ix·side + iy)·side + iz``: for each ``(ix, iy)`` in the ball's bounding box the cells of
    its ``iz`` range hold one contiguous run of positions.  ``ys`` (3, m) holds the coordinates in
    that order (:attr:`SphereSources.grid_columns`), so that the runs are read from contiguous memory.
    """
    lo0, hi0, lo1, hi1, lo2, hi2 = _box(cx, cy, cz, R, g, side)
    r2 = R * R
    c = 0
    for i0 in range(lo0, hi0 + 1):
        for i1 in range(lo1, hi1 + 1):
            base = (i0 * side + i1) * side
            for p in range(cell_start[base + lo2], cell_start[base + hi2 + 1]):
                d0 = ys[0, p] - cx
                d1 = ys[1, p] - cy
                d2 = ys[2, p] - cz
                if d0 * d0 + d1 * d1 + d2 * d2 <= r2:
                    idx[c] = p
                    c += 1
    return c


@jit
def _gather_bound(cx, cy, cz, R, g, side, cell_start):  # pragma: no cover - compiled
    """How many points the cells of the ball's bounding box hold (a bound on :func:`_gather`'s count)."""
    lo0, hi0, lo1, hi1, lo2, hi2 = _box(cx, cy, cz, R, g, side)
    c = 0
    for i0 in range(lo0, hi0 + 1):
        for i1 in range(lo1, hi1 + 1):
            base = (i0 * side + i1) * side
            c += cell_start[base + hi2 + 1] - cell_start[base + lo2]
    return c


@jit
def _gather_nodes(cx, cy, cz, R, g, side, node_start, idx, c):  # pragma: no cover - compiled
    """Append the nodes of the proxies (:mod:`meanfield.kernels.cluster_proxies`) of the cells in the bounding box
    of the ball ``(c, R)`` to ``idx`` from position ``c``, coded ``-(node + 1)``; returns the new count.

    A proxy stands for all of its box's points, which may reach beyond the ball: summing more points
    than the cap needs only makes the row more exact.  (Their number is :func:`_gather_bound` of ``node_start``.)
    """
    lo0, hi0, lo1, hi1, lo2, hi2 = _box(cx, cy, cz, R, g, side)
    for i0 in range(lo0, hi0 + 1):
        for i1 in range(lo1, hi1 + 1):
            base = (i0 * side + i1) * side
            for p in range(node_start[base + lo2], node_start[base + hi2 + 1]):
                idx[c] = -p - 1
                c += 1
    return c


@jit
def _candidate_bounds(centre, radius, whole, g, side, cell_start, m):  # pragma: no cover - compiled
    """Per block, how many points the cells of its ball's bounding box hold (``m`` where it scans everything)."""
    out = np.empty(centre.shape[0])
    for b in range(centre.shape[0]):
        out[b] = m if whole[b] else _gather_bound(centre[b, 0], centre[b, 1], centre[b, 2], radius[b], g, side, cell_start)
    return out


@jit
def _ring_sort(cand, nc, yt, cx, cy, cz, scale, rings):  # pragma: no cover - compiled
    """Reorder ``cand[:nc]`` by ring, ring ``k`` holding the points with ``k ≤ |y - c|² · scale < k + 1``
    (the last ring also what lies beyond), by a counting sort; returns the rings' starts (``rings + 1``)."""
    ring = np.empty(nc, dtype=np.int64)
    start = np.zeros(rings + 1, dtype=np.int64)
    for j in range(nc):
        k = cand[j]
        d0 = yt[0, k] - cx
        d1 = yt[1, k] - cy
        d2 = yt[2, k] - cz
        ring[j] = min(rings - 1, int((d0 * d0 + d1 * d1 + d2 * d2) * scale))
        start[ring[j] + 1] += 1
    for k in range(rings):
        start[k + 1] += start[k]
    fill = start[:rings].copy()
    ordered = np.empty(nc, dtype=np.int64)
    for j in range(nc):
        ordered[fill[ring[j]]] = cand[j]
        fill[ring[j]] += 1
    cand[:nc] = ordered
    return start


@jit
def _mass_bound(mass, exponent):  # pragma: no cover - compiled
    """``mass · e^exponent``, the bound on what ``mass`` contributes at scores below ``exponent`` (0 for no mass,
    ``inf`` past the float64 range: never certified)."""
    if mass <= 0.0:
        return 0.0
    return np.inf if exponent > 700.0 else mass * np.exp(exponent)


@jit
def _ring_rows(q, r0, nr, cx, cy, cz, R, start, buf, rest, eps, delta, nearest, sums, shift,
               ok):  # pragma: no cover - compiled
    r"""The rows ``r0 : r0 + nr`` of a block whose candidates (columns of ``buf``) are sorted into rings
    around the block's centre ``c`` (:func:`_ring_sort`, rings even in :math:`t^2`, :math:`t=|y-c|`, out to
    the chord ``R``): each row sums ring after ring until the bound on the rings left and on the mass ``rest``
    outside the ball is at most ``eps`` times its sum so far.

    A row at chord :math:`\delta_i` from ``c`` scores a point of ring ``k`` (inner radius :math:`t_k`) at most
    :math:`r_i(1-(t_k-\delta_i)_+^2/2)`, one outside the ball at most :math:`r_i(1-(R-\delta_i)^2/2)`; its shift is
    the exact maximum, found in the rings within :math:`d+2\delta_i` of ``c`` (``nearest`` = :math:`d`, the
    chord from ``c`` to its nearest point: the row's best point is no farther from ``c``).  The rings are the
    outer loop, so that each stays in cache while every row still summing runs over it.
    """
    rings = start.shape[0] - 1
    y0, y1, y2, w0, w1, w2, w3, z = buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6], buf[7]
    scale = rings / (R * R)
    floats = np.zeros((nr + 1, rings + 8))  # one allocation for the rows' numbers (blocks may be small)
    ring_mass = floats[nr, :rings]
    for k in range(rings):
        for j in range(start[k], start[k + 1]):
            ring_mass[k] += w3[j]
    tail = floats[:nr, : rings + 1]  # the bound on what row i leaves out once it has summed the rings < k
    acc = floats[:nr, rings + 1 : rings + 5]
    top = floats[:nr, rings + 5]
    top[:] = -np.inf
    off = floats[:nr, rings + 6]  # the rows' chords from the centre (any for r_i = 0: every score is 0)
    rr = floats[:nr, rings + 7]
    ints = np.zeros((2, nr), dtype=np.int64)
    last = ints[0]  # the last ring of each row's maximum
    done = ints[1]  # rings summed by each row that has stopped (0: still summing)
    for i in range(nr):
        q0, q1, q2 = q[r0 + i, 0], q[r0 + i, 1], q[r0 + i, 2]
        rr[i] = np.sqrt(q0 * q0 + q1 * q1 + q2 * q2)
        if rr[i] > 0.0:
            e0, e1, e2 = q0 / rr[i] - cx, q1 / rr[i] - cy, q2 / rr[i] - cz
            off[i] = np.sqrt(e0 * e0 + e1 * e1 + e2 * e2)
        reach = (nearest + 2.0 * off[i]) * (1.0 + 1e-12) + 1e-12
        last[i] = min(rings - 1, int(reach * reach * scale))
    for k in range(rings):  # the exact maxima
        j0, j1 = start[k], start[k + 1]
        for i in range(nr):
            if k <= last[i] and j1 > j0:
                top[i] = max(top[i], _max_score(q[r0 + i, 0], q[r0 + i, 1], q[r0 + i, 2], y0[j0:j1], y1[j0:j1], y2[j0:j1], j1 - j0))
    for i in range(nr):
        s = max(R - off[i], 0.0)
        tail[i, rings] = _mass_bound(rest, max(-delta, rr[i] * (1.0 - 0.5 * s * s) - top[i]))
        for k in range(rings - 1, -1, -1):
            s = max(np.sqrt(k / scale) - off[i], 0.0)
            tail[i, k] = tail[i, k + 1] + _mass_bound(ring_mass[k], rr[i] * (1.0 - 0.5 * s * s) - top[i])
    for k in range(rings):
        j0, j1 = start[k], start[k + 1]
        for i in range(nr):
            if done[i] == 0:
                if j1 > j0:
                    _score_exp3(q[r0 + i, 0], q[r0 + i, 1], q[r0 + i, 2], top[i], y0[j0:j1], y1[j0:j1], y2[j0:j1], j1 - j0, z)
                    _accumulate3(z, w0[j0:j1], w1[j0:j1], w2[j0:j1], w3[j0:j1], j1 - j0, acc[i])
                if tail[i, k + 1] <= eps * acc[i, 3]:
                    done[i] = k + 1
    for i in range(nr):
        row = r0 + i
        sums[row, 0] = acc[i, 0]
        sums[row, 1] = acc[i, 1]
        sums[row, 2] = acc[i, 2]
        sums[row, 3] = acc[i, 3]
        shift[row] = top[i]
        ok[row] = done[i] > 0 or tail[i, rings] <= eps * acc[i, 3]


@pjit
def _local_kernel(q, row_ptr, centre, radius, whole, cos_out, yt, wy, yts, wys, g, side, cell_start, cell_order, mass, eps,
                  delta, sums, shift, ok, causal, limits, cmass, everything, proxied, node_start, node_t,
                  node_w, nearest, rings_for):  # pragma: no cover - compiled
    """Block ``b`` holds rows ``row_ptr[b]:row_ptr[b+1]`` of ``q`` (= β Bᵀx_i, already in block order); its
    candidates are the points within chord ``radius[b]`` of ``centre[b]`` (all points if ``whole[b]``),
    gathered from the point grid (:meth:`SphereSources.grid`; ``yts``, ``wys`` the columns of ``yt``, ``wy`` in the
    grid's order, ``cell_order``); its caps were drawn with ``delta[b]``.

    ``rings_for[b]``: the candidates sorted into rings around the centre, each row summing them outward
    until its bound holds (:func:`_ring_rows`; ``nearest[b]`` the chord from the centre to its nearest point).
    Otherwise, per row: the candidates' scores and their exact maximum ``top``, then every candidate's
    ``exp(score - top)`` summed (one branch-free pass: no candidate is dropped), and the bound on
    the points outside the block's ball checked against ``eps`` times the row sum.  ``causal``: row
    ``i`` uses the candidates below ``limits[i]`` only (the candidates are sorted by index), and its
    mass is ``cmass[limits[i]]``.

    ``proxied``: the compact, heavy boxes of points are represented by the nodes ``node_t`` (3, K) of their
    proxies with the weights ``node_w`` (4, K) (:mod:`meanfield.kernels.cluster_proxies`; cell ``c`` has the
    nodes ``node_start[c]:node_start[c+1]``), and ``cell_start``/``cell_order`` list the other points only.
    A block that scans everything takes the candidates ``everything`` (points ``k ≥ 0``, nodes ``-(k + 1)``).
    """
    nb = row_ptr.shape[0] - 1
    for b in prange(nb):
        cx, cy, cz = centre[b, 0], centre[b, 1], centre[b, 2]
        ringed = rings_for[b]  # rows that stop at the radius they need
        reach = 2.0 if whole[b] else radius[b]  # every candidate lies within this chord of the centre
        if whole[b]:
            nc = everything.shape[0]
            cand = everything.copy() if ringed else everything
        else:
            bound = _gather_bound(cx, cy, cz, radius[b], g, side, cell_start)
            if proxied:
                bound += _gather_bound(cx, cy, cz, radius[b], g, side, node_start)
            cand = np.empty(bound, dtype=np.int64)
            nc = _gather(cx, cy, cz, radius[b], g, side, cell_start, yts, cand)
            if proxied:
                nc = _gather_nodes(cx, cy, cz, radius[b], g, side, node_start, cand, nc)
            if causal:  # the points' own indices, in index order
                for j in range(nc):
                    cand[j] = cell_order[cand[j]]
                cand[:nc] = np.sort(cand[:nc])
        points_t, points_w = (yt, wy) if whole[b] or causal else (yts, wys)  # indices, or grid positions
        ring_start = np.zeros(1, dtype=np.int64)
        if ringed:
            rings = max(1, min(LOCAL_RINGS, nc // RING_POINTS))
            ring_start = _ring_sort(cand, nc, points_t, cx, cy, cz, rings / (reach * reach), rings)
        buf = np.empty((8, nc))  # one allocation per block: the candidates' columns and the rows' exponentials
        y0, y1, y2, w0, w1, w2, w3, z = buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6], buf[7]
        for j in range(nc):
            k = cand[j]
            where, weight = points_t, points_w
            if k < 0:  # a proxy's node
                where, weight, k = node_t, node_w, -k - 1
            y0[j] = where[0, k]
            y1[j] = where[1, k]
            y2[j] = where[2, k]
            w0[j] = weight[0, k]
            w1[j] = weight[1, k]
            w2[j] = weight[2, k]
            w3[j] = weight[3, k]
        r0 = row_ptr[b]
        nr = row_ptr[b + 1] - r0
        ball = 0.0  # mass of all candidates
        for j in range(nc):
            ball += w3[j]
        if ringed:
            _ring_rows(q, r0, nr, cx, cy, cz, reach, ring_start, buf, mass - ball, eps, delta[b], nearest[b], sums,
                       shift, ok)
            continue
        ncs = np.empty(nr, dtype=np.int64)  # each row's candidates: all, or its causal prefix
        rowbuf = np.zeros((nr, 5))
        accs, tops = rowbuf[:, :4], rowbuf[:, 4]
        for i in range(nr):
            nci = nc
            if causal:  # the leading candidates (index order) below the row's limit
                lim = limits[r0 + i]
                nci = min(nc, lim) if whole[b] else np.searchsorted(cand[:nc], lim)
            ncs[i] = nci
            tops[i] = _max_score(q[r0 + i, 0], q[r0 + i, 1], q[r0 + i, 2], y0, y1, y2, nci)
        # the candidates in chunks that stay in cache while every row of the block runs over them
        for c0 in range(0, nc, LOCAL_CHUNK):
            c1 = min(nc, c0 + LOCAL_CHUNK)
            y0c, y1c, y2c = y0[c0:c1], y1[c0:c1], y2[c0:c1]
            w0c, w1c, w2c, w3c = w0[c0:c1], w1[c0:c1], w2[c0:c1], w3[c0:c1]
            for i in range(nr):
                mi = min(c1, ncs[i]) - c0
                if mi > 0:
                    _score_exp3(q[r0 + i, 0], q[r0 + i, 1], q[r0 + i, 2], tops[i], y0c, y1c, y2c, mi, z)
                    _accumulate3(z, w0c, w1c, w2c, w3c, mi, accs[i])
        for i in range(nr):
            row = r0 + i
            nci = ncs[i]
            if nci == 0:
                ok[row] = False
                continue
            mass_i = mass
            inside = ball
            if causal:
                mass_i = cmass[limits[row]]
                inside = 0.0
                for j in range(nci):
                    inside += w3[j]
            top = tops[i]
            sums[row, 0] = accs[i, 0]
            sums[row, 1] = accs[i, 1]
            sums[row, 2] = accs[i, 2]
            sums[row, 3] = accs[i, 3]
            shift[row] = top
            rest = mass_i - inside
            # exponent bound of what was left out: the points outside the ball score below r cos_out
            # (with every point listed, only the rounding of ``rest`` is left: bounded by -delta)
            t = -delta[b]
            if not whole[b]:
                q0, q1, q2 = q[row, 0], q[row, 1], q[row, 2]
                t = max(t, np.sqrt(q0 * q0 + q1 * q1 + q2 * q2) * cos_out[b] - top)
            if rest <= 0.0:
                ok[row] = True
            elif t > 0.0:
                ok[row] = False
            else:
                ok[row] = rest * np.exp(t) <= eps * accs[i, 3]


# ----------------------------------------------------------------------------- the local sums


def _row_blocks(uhat: np.ndarray, cell: float, max_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Order of the rows grouped by cube-sphere cell (gnomonic side ``cell``), and block pointers into it.

    A row's face is its largest coordinate (with sign); on the face the two other
    coordinates divided by it lie in [-1, 1] and are cut into ``ceil(2/cell)`` bins.
    Cells with more than ``max_rows`` rows are split into consecutive blocks.
    """
    n = uhat.shape[0]
    side = int(np.ceil(2.0 / cell))
    axis = np.argmax(np.abs(uhat), axis=1)
    main = uhat[np.arange(n), axis]
    face = 2 * axis + (main < 0)
    other = np.stack([uhat[np.arange(n), (axis + 1) % 3], uhat[np.arange(n), (axis + 2) % 3]], axis=1) / np.abs(main)[:, None]
    ij = np.clip(np.floor((other + 1.0) * (side / 2.0)).astype(np.int64), 0, side - 1)
    key = (face * side + ij[:, 0]) * side + ij[:, 1]
    order = np.argsort(key, kind="stable")
    ks = key[order]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    lengths = np.diff(np.r_[starts, n])
    pieces = -(-lengths // max_rows)
    first = np.repeat(starts, pieces)
    offset = np.arange(int(pieces.sum())) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    return order, np.r_[first + offset * max_rows, n].astype(np.int64)


def dense_head_sums(
    x_rows: np.ndarray, B: np.ndarray, beta: float, src: SphereSources, *, limits: np.ndarray | None = None
) -> HeadSums:
    """Exact shifted sums of one head over *all* points (row blocks, exact maxima): the last resort.

    ``limits`` (k,): row ``r`` sums over the first ``limits[r]`` points only (the causal mask).
    """
    k = x_rows.shape[0]
    out = HeadSums.empty(k)
    if k == 0 or src.m == 0:
        out.shift[:] = 0.0
        return out
    if limits is not None:
        return _dense_prefix_sums(x_rows, B, beta, src, np.asarray(limits, dtype=np.int64))
    q = beta * (x_rows @ B)
    block = max(1, min(k, BLOCK_ELEMENTS // max(src.m, 1)))
    for s in range(0, k, block):
        z = q[s : s + block] @ src.yt
        top = z.max(axis=1)
        z -= top[:, None]
        np.exp(z, out=z)
        acc = z @ src.wy.T
        out.num[s : s + block] = acc[:, :3]
        out.den[s : s + block] = acc[:, 3]
        out.shift[s : s + block] = top
    return out


def _dense_prefix_sums(x_rows: np.ndarray, B: np.ndarray, beta: float, src: SphereSources, limits: np.ndarray) -> HeadSums:
    """:func:`dense_head_sums` over the prefixes ``[0, limits[r])``: rows by increasing limit, each block
    multiplying the columns up to its largest limit (the others masked to :math:`-\\infty`)."""
    k = x_rows.shape[0]
    out = HeadSums.empty(k)
    order = np.argsort(limits, kind="stable")
    q = beta * (x_rows[order] @ B)
    lim = limits[order]
    block = max(1, min(k, BLOCK_ELEMENTS // max(int(lim[-1]), 1)))
    for s in range(0, k, block):
        rows = slice(s, min(k, s + block))
        idx = order[rows]
        cols = int(lim[rows.stop - 1])
        if cols == 0:  # no point at or before these rows: empty sums
            out.shift[idx] = -np.inf
            continue
        z = q[rows] @ src.yt[:, :cols]
        z[np.arange(cols)[None, :] >= lim[rows][:, None]] = -np.inf
        top = z.max(axis=1)
        z -= np.where(np.isfinite(top), top, 0.0)[:, None]
        np.exp(z, out=z)
        acc = z @ src.wy[:, :cols].T
        out.num[idx] = acc[:, :3]
        out.den[idx] = acc[:, 3]
        out.shift[idx] = top
    return out


def local_head_sums(
    x_rows: np.ndarray,
    B: np.ndarray,
    beta: float,
    src: SphereSources,
    *,
    tolerance: float = 1e-12,
    limits: np.ndarray | None = None,
    cluster_proxies: bool = True,
) -> HeadSums:
    r"""Exact shifted sums :math:`N_i, D_i, m_i` of one head for the rows ``x_rows`` (local method).

    Parameters
    ----------
    x_rows : (k, 3) array
        Query tokens.
    B : (3, 3) array
        Score matrix of the head.
    beta : float
        Inverse temperature.
    src : SphereSources
        The points with positive mass.
    tolerance : float
        Relative error allowed per row for the dropped points (rigorously checked).
    limits : (k,) int array, optional
        The causal mask: row ``r`` may use the first ``limits[r]`` points of ``src`` only
        (:meth:`SphereSources.causal_limits`); its bound then uses that prefix's mass.
    cluster_proxies : bool
        Sum compact, heavy clusters through their Chebyshev proxies
        (:mod:`meanfield.kernels.cluster_proxies`; a quarter of ``tolerance``, never under the causal
        mask, and only for at least :data:`~meanfield.kernels.cluster_proxies.PROXY_MIN_ROWS` rows,
        fewer being cheaper to sum point by point); ``False`` sums every candidate point by point.
    """
    k = x_rows.shape[0]
    out = HeadSums.empty(k)
    if k == 0:
        return out
    if src.m == 0:
        return out
    q = beta * (x_rows @ B)
    r = np.sqrt(np.einsum("ij,ij->i", q, q))
    eps = max(float(tolerance), 1e-300) * 0.5
    lims = None if limits is None else np.asarray(limits, dtype=np.int64)
    delta = cap_parameters(q, r, src, eps, causal=lims is not None)
    # compact clusters by their proxies (not under the causal mask, whose rows need the points' order)
    use_proxies = cluster_proxies and lims is None and k >= cluster_proxies_module.PROXY_MIN_ROWS
    qmax = beta * float(np.linalg.norm(B, 2))
    proxies = (lambda: src.proxies(qmax, 0.5 * eps)) if use_proxies else None
    pending = np.arange(k)
    for attempt in range(_RETRIES + 1):
        if pending.size == 0:
            break
        sub, ok = _local_pass(q[pending], r[pending], src, delta[pending], eps, None if lims is None else lims[pending],
                              proxies=proxies)
        out.put(pending, sub)
        pending = pending[~ok]
        delta[pending] *= 2.0
    if pending.size:
        out.put(pending, dense_head_sums(x_rows[pending], B, beta, src, limits=None if lims is None else lims[pending]))
    return out


def _row_indices(rows: object) -> np.ndarray:
    """The ``rows`` of :func:`velocity_local` as a 1-d int64 array: integers only, at most one dimension.

    (They had been cast with ``np.asarray(rows, dtype=np.int64).ravel()``: a boolean mask of n entries gave n rows of
    tokens 0 and 1, ``[1.5]`` row 1, and a 2-d array was flattened, all without a word.)
    """
    given = np.asarray(rows)
    if given.dtype.kind == "b":
        raise ValueError("rows must be row indices, got a boolean mask; pass np.flatnonzero(mask) for the rows it selects")
    if given.ndim > 1:
        raise ValueError(f"rows must be a 1-d array of row indices, got an array of shape {given.shape}")
    if given.size == 0:
        return np.zeros(0, dtype=np.int64)  # ([] is a float array)
    if given.dtype.kind not in "iu":
        raise ValueError(f"rows must be integer row indices, got dtype {given.dtype}")
    if given.dtype.kind == "u" and int(given.max()) > np.iinfo(np.int64).max:
        raise IndexError("rows out of range")  # (uint64 past int64 would wrap to a negative index)
    return given.astype(np.int64).reshape(-1)


def _directions(q: np.ndarray, r: np.ndarray) -> np.ndarray:
    r"""The rows' directions :math:`\hat u_i = q_i / r_i` (:math:`e_3` where :math:`r_i = 0`)."""
    uhat = np.empty_like(q)
    nz = r > 0
    uhat[nz] = q[nz] / r[nz, None]
    uhat[~nz] = (0.0, 0.0, 1.0)
    return uhat


def query_workers(points: int) -> int:
    """Threads of a k-d tree query of ``points`` nearest neighbours: one below :data:`QUERY_PARALLEL_POINTS`.

    SciPy starts Python threads for every query with ``workers > 1`` (about 0.25 ms here): a query of the
    blocks' 40 centres took 0.27 ms on two workers against 0.02 ms on one, and 4096 points 1.68 against
    1.53 ms; 16 384 points take 3.8 ms on two against 7.0 ms on one.
    """
    return num_threads() if points >= QUERY_PARALLEL_POINTS else 1


def cap_parameters(q: np.ndarray, r: np.ndarray, src: SphereSources, eps: float, *, causal: bool = False) -> np.ndarray:
    r"""The cap parameter :math:`\Delta_i` of each row, large enough for its bound to hold at once.

    .. math::

        \Delta_i = \ln\frac{M}{\varepsilon\, a_{j^*_i}},\qquad j^*_i=\arg\max_j \hat u_i\cdot y_j ,

    the mass :math:`a_{j^*_i}` of the row's best point (its nearest point, one k-d tree query):
    since :math:`D_i\ge a_{j^*_i}`, everything scoring :math:`\Delta_i` below the best point
    weighs at most :math:`M e^{-\Delta_i}=\varepsilon a_{j^*_i}\le\varepsilon D_i`.  Equal masses
    give :math:`\ln(m/\varepsilon)` for every row (no query); a row in a nearly empty region
    (a late grid density) gets the larger cap it needs in the first pass, a row on a heavy
    cluster a smaller one.  Causal rows (whose best point may lie outside their prefix) take
    :math:`\ln(m/\varepsilon)`.
    """
    k = q.shape[0]
    base = float(np.log(src.m / eps))
    if causal or k == 0 or float(src.w.min()) == float(src.w.max()):
        return np.full(k, base)
    uhat = _directions(q, r)
    _, best = src.tree.query(uhat, k=1, workers=query_workers(k))
    return np.log(src.mass / (eps * src.w[best]))


def _local_pass(
    q: np.ndarray, r: np.ndarray, src: SphereSources, delta: np.ndarray, eps: float, limits: np.ndarray | None = None,
    *, proxies: Callable[[], ClusterProxies] | None = None,
) -> tuple[HeadSums, np.ndarray]:
    """One pass of the local method with the cap parameters ``delta`` (one per row); returns the sums and
    the rows whose bound held.  A block's caps take the largest parameter of its rows.

    ``limits``: the causal prefix of each row (candidate lists are then sorted by index).
    ``proxies``: builds the proxies of the compact clusters (none under ``limits``); called only where the
    blocks' balls list at least :data:`~meanfield.kernels.cluster_proxies.PROXY_MIN_CANDIDATES` points per
    row on average (a proxy costs a build; few candidates are cheaper summed one by one).
    """
    causal = limits is not None
    k = q.shape[0]
    uhat = _directions(q, r)
    # cells (gnomonic side, ~ angle) of at most half the typical cap radius, about BLOCK_ROWS rows each
    r_typ = float(np.median(r)) if k else 1.0
    cap = np.sqrt(2.0 * float(np.median(delta)) / max(r_typ, 1e-300))
    cell = min(CELL_CAP * cap, np.sqrt(4.0 * np.pi * BLOCK_ROWS / max(k, 1)))
    cell = float(np.clip(max(cell, np.sqrt(4.0 * np.pi * MIN_BLOCK_ROWS / max(k, 1))), 1e-3, 2.0))
    order, row_ptr = _row_blocks(uhat, cell, BLOCK_ROWS)
    starts = row_ptr[:-1]
    us = uhat[order]
    centre = np.add.reduceat(us, starts, axis=0)
    norm = np.linalg.norm(centre, axis=1)
    bad = norm < 1e-12
    centre[bad] = us[starts[bad]]
    norm[bad] = 1.0
    centre /= norm[:, None]
    sizes = np.diff(row_ptr)
    block_of_row = np.repeat(np.arange(starts.size), sizes)
    spread = np.maximum.reduceat(np.linalg.norm(us - centre[block_of_row], axis=1), starts)
    r_min = np.minimum.reduceat(r[order], starts)
    block_delta = np.maximum.reduceat(delta[order], starts)
    nearest, _ = src.tree.query(centre, k=1, workers=query_workers(centre.shape[0]))
    with np.errstate(divide="ignore"):
        rho = np.sqrt((nearest + spread) ** 2 + np.where(r_min > 0, 2.0 * block_delta / np.maximum(r_min, 1e-300), np.inf))
    radius = rho + spread
    whole = radius >= WHOLE_CHORD  # a cap this large: scan every point rather than list them
    cos_out = np.where(whole, -1.0, 1.0 - 0.5 * np.minimum(rho, 2.0) ** 2)
    qs = np.ascontiguousarray(q[order])
    lims = np.ascontiguousarray(limits[order]) if causal else np.zeros(0, dtype=np.int64)
    cmass = src.cumulative_mass if causal else np.zeros(1)
    sums = np.zeros((k, 4))
    shift = np.zeros(k)
    ok = np.zeros(k, dtype=np.bool_)
    # score pairs, estimated from the balls' areas (chord R covers a fraction R²/4 of the sphere)
    listed = np.where(whole, src.m, np.minimum(src.m, src.m * radius**2 / 4.0))
    pairs = float(np.sum(sizes * listed)) * (0.5 if causal else 1.0)
    g, side, cell_start, cell_order = src.grid
    built = None
    if proxies is not None and not causal:
        candidates = _candidate_bounds(centre, radius, whole, g, side, cell_start, src.m)
        if float(np.sum(sizes * candidates)) >= cluster_proxies_module.PROXY_MIN_CANDIDATES * k:
            built = proxies()
    proxied = built is not None and built.active
    yts, wys = src.grid_columns
    if proxied:
        assert built is not None
        cell_start, cell_order = built.residual_start, built.residual_order
        yts, wys = np.ascontiguousarray(src.yt[:, cell_order]), np.ascontiguousarray(src.wy[:, cell_order])
        everything = np.concatenate([cell_order, -1 - np.arange(built.nodes.shape[1], dtype=np.int64)])
        node_start, node_t, node_w = built.node_start, built.nodes, built.weights
        # a proxied box costs its nodes, not its points
        listed = listed * (1.0 - (built.points - built.nodes.shape[1]) / max(src.m, 1))
        pairs = float(np.sum(sizes * listed))
    else:
        everything = np.arange(src.m, dtype=np.int64)
        node_start = np.zeros(1, dtype=np.int64)
        node_t, node_w = np.zeros((3, 0)), np.zeros((4, 0))
    rings_for = np.full(starts.size, not (causal or proxied))  # rows that stop at the radius they need
    with kernel_threads(pairs):
        _local_kernel(
            qs, row_ptr, np.ascontiguousarray(centre), np.ascontiguousarray(radius), whole, cos_out, src.yt, src.wy,
            yts, wys, g, side, cell_start, cell_order, src.mass, eps, block_delta, sums, shift, ok, causal, lims, cmass,
            everything, proxied, node_start, node_t, node_w, np.ascontiguousarray(nearest), rings_for,
        )
    result = HeadSums.empty(k)
    result.num[order] = sums[:, :3]
    result.den[order] = sums[:, 3]
    result.shift[order] = shift
    good = np.empty(k, dtype=np.bool_)
    good[order] = ok
    return result, good


def velocity_local(
    x: np.ndarray,
    heads: HeadStack,
    *,
    beta: float,
    kind: str = "softmax",
    weights: np.ndarray | None = None,
    tolerance: float = 1e-12,
    rows: np.ndarray | None = None,
    mask: str = "none",
    cluster_proxies: bool = True,
    row_logs: np.ndarray | None = None,
) -> np.ndarray:
    r"""Attention velocity on :math:`S^2` by exact local sums (k-d tree caps).

    Same result as ``velocity_numpy(x, heads, beta=beta, kind=kind, weights=weights)``
    (for the rows asked for) to a relative ``tolerance`` per row and head: for each
    row only the points in the cap
    :math:`\hat u_i\cdot y\ge c^*_i-\Delta/r_i` are summed (see the module
    docstring), and a rigorous bound on the rest is checked.

    .. math::

        v_i=\sum_h\frac{\sum_j a_je^{\beta s^h_{ij}}V_hx_j}{\sum_j a_je^{\beta s^h_{ij}}}
        \ (\text{softmax}),\quad
        \sum_h\sum_j a_je^{\beta s^h_{ij}}V_hx_j\ (\text{unnormalized}),\quad
        \frac{\sum_h w_h\sum_j a_je^{\beta s^h_{ij}}V_hx_j}{\sum_h w_h\sum_j a_je^{\beta s^h_{ij}}}\ (\text{pooled}).

    Parameters
    ----------
    x : (n, 3) array
        Tokens on the unit sphere.
    heads : HeadStack
        ``B``, ``V`` (H, 3, 3), head weights ``w`` (pooled only); any ``H ≥ 1``, general ``B``.
    beta : float
        Inverse temperature :math:`\beta\ge0`.
    kind : {"softmax", "unnormalized", "pooled"}
    weights : (n,) array, optional
        Token masses :math:`a_j\ge0` (default :math:`1/n`).
    tolerance : float
        Relative error allowed per row for the points left out.
    rows : 1-d array of int, optional
        Rows to compute (default all), as indices (negative ones count from the end).  A boolean mask is refused
        (pass ``np.flatnonzero(mask)``), and so are non-integer values and arrays of more than one dimension.
    mask : {"none", "causal"}
        ``"causal"``: row :math:`i` sums over :math:`j\le i` only (the causal local
        method of the module docstring; exact to the same tolerance).
    cluster_proxies : bool
        Sum compact, heavy clusters (the terminal phase at large β) through their Chebyshev proxies
        (:mod:`meanfield.kernels.cluster_proxies`), to a quarter of ``tolerance``; ``False``: point by point.
    row_logs : (H, k) array, optional
        Filled with every head's :math:`\ln\sum_j a_j e^{\beta s^h_{ij}}` for the rows (the sums the velocity takes
        anyway, to the same tolerance: the energy of :mod:`meanfield.analysis.energy`), without a mask;
        otherwise left as it is.

    Returns
    -------
    (k, 3) array
        :math:`v_i` for the requested rows (``k = n`` by default).

    Notes
    -----
    Fast when :math:`\beta\|B\|` is large (small caps); at small :math:`\beta` every
    cap is the whole sphere and the cost is that of a dense kernel.
    """
    x = check_sphere_tokens(x, heads, kind, tolerance=tolerance, beta=beta)  # (a NaN β had failed in int() of a cap's radius)
    causal = is_causal(mask)
    n = x.shape[0]
    a = token_masses(n, weights, kind=kind, causal=causal)
    idx = np.arange(n) if rows is None else _row_indices(rows)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IndexError("rows out of range")
    src = SphereSources(x, a)
    beta = float(beta)
    limits = src.causal_limits(np.where(idx < 0, idx + n, idx)) if causal else None
    sums = [
        local_head_sums(x[idx], heads.B[h], beta, src, tolerance=tolerance, limits=limits, cluster_proxies=cluster_proxies)
        if kind != "pooled" or heads.w[h] != 0
        else HeadSums.empty(idx.size)
        for h in range(heads.H)
    ]
    if idx.size == 0:
        return np.zeros((0, 3))
    if not causal:
        store_row_logs(row_logs, heads, kind, sums)
    return combine_head_sums(heads, kind, sums)
