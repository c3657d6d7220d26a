r"""Chebyshev proxies of compact, heavy clusters of points, for the local sums on :math:`S^2`.

Late in a clustering run at large :math:`\beta` the tokens sit in clusters much tighter than the
kernel's width :math:`1/(\beta\|B\|)` (the terminal phase of Alcalde, Bungert, Riedl and Roith,
*Quantifying Concentration Phenomena of Mean-Field Transformers in the Low-Temperature Regime*,
arXiv 2605.10931, Conjecture 1).  Every row of the local kernel
(:mod:`meanfield.kernels.local`) whose cap reaches such a cluster then sums all of its points: with
two clusters of :math:`n/2` tokens that is :math:`n^2/2` pairs, 35 s for one velocity of
:math:`10^6` tokens.  But over a cluster of small extent the kernel is smooth.  For one cell of the
point grid (:meth:`meanfield.kernels.local.SphereSources.grid`), with its points in a box of
half-widths :math:`\rho_d` about a centre :math:`c` in an orthonormal frame :math:`(e_1,e_2,e_3)`
(:math:`e_1` the cell's mean direction), :math:`y = c + \sum_d \rho_d t_d e_d` with
:math:`t\in[-1,1]^3`, the plane wave is separable,

.. math::

    e^{q\cdot y} = e^{q\cdot c}\prod_{d=1}^{3} e^{(q\cdot e_d)\rho_d t_d},

and its tensor-product interpolation at :math:`p_d` Chebyshev points :math:`\tau_k` per axis gives

.. math::

    \sum_{j\in\text{cell}} a_j f_j\, e^{q\cdot y_j} \;\approx\; \sum_k W_{k,f}\, e^{q\cdot z_k},\qquad
    W_{k,f}=\sum_{j\in\text{cell}} a_j f_j \prod_d \ell_{k_d}(t_{j,d}),\qquad
    z_k = c+\sum_d \rho_d\,\tau_{k_d}\,e_d ,

for :math:`f\in\{y^{(1)},y^{(2)},y^{(3)},1\}`: :math:`\prod_d p_d` proxy points ("nodes") stand for
the cell's points, whatever the row :math:`q`.  The weights :math:`W` depend on the points only,
so they are built once per velocity evaluation and head.

**Error bound.**  With :math:`u_d=q_{\max}\rho_d` (:math:`q_{\max}=\beta\|B\|_2` bounds
:math:`|q\cdot e_d|` for every row), and the Chebyshev interpolation error of :math:`e^{ut}` on
:math:`[-1,1]`, :math:`\le e^{u}\,b_d`, :math:`b_d = u_d^{p_d}/(2^{p_d-1}p_d!)`
(:func:`interpolation_error_bound`), the tensor interpolant errs by at most
:math:`e^{q\cdot c}e^{U}\sum_d b_d(1+\sum_d b_d)^2` at every point, where
:math:`\sum_d|q\cdot e_d|\rho_d\le\|q\|\,\|\rho\|_2` (Cauchy–Schwarz) gives
:math:`U=q_{\max}\|\rho\|_2`, the box's half-diagonal in units of the kernel's scale.  By Jensen's inequality the
box's own sum is at least :math:`M e^{q\cdot\bar y}` (:math:`M` its mass, :math:`\bar y` its
centroid), so, with :math:`\omega = q_{\max}|\bar y - c|`, relative to that sum (and so to the
row's :math:`D_i`; the numerators, with :math:`|f|\le1`, likewise),

.. math::

    \text{relative error} \;\le\; e^{U+\omega}\sum_d b_d\Big(1+\sum_d b_d\Big)^2 .

:func:`build_proxies` takes for every axis the fewest points :math:`p_d` that keep this below a
quarter of the budget, and proxies a box only where the rounding of the cancelling weights,
about :math:`10^{-15}\Lambda^3e^{U+\omega}` (:math:`\Lambda` the Lebesgue constant of the
Chebyshev points), stays below another quarter, and where :math:`\prod_d p_d` is at most a
:data:`PROXY_GAIN`-th of its points (:data:`PROXY_MIN_POINTS` at least).  A heavy cell whose
box is too wide first sheds its outliers (a token in transit in a cluster's cell would otherwise
widen the cluster's box past any proxy), which are tried apart, or else is split into four along
its tangents where a quarter's own box shows the split can pay, up to :data:`MAX_DEPTH` times
(smaller boxes, smaller :math:`U`); what qualifies nowhere is summed point by point, as before.
Spread-out tokens never qualify (a cell holds 16 points); a cluster of half a million tokens of
radius :math:`5\cdot10^{-4}` at :math:`\beta = 1024` becomes about 2300 nodes.  The
bound is a worst case: measured errors are far below it (``tests``).

**Cost.**  Building: about :math:`4\prod_d p_d` operations per proxied point, once per evaluation
and head; a row then scores the nodes instead of the points.  :mod:`meanfield.kernels.local` builds
proxies only where they pay (:data:`PROXY_MIN_ROWS`, :data:`PROXY_MIN_CANDIDATES`).  Measured on two
cores with two clusters of :math:`n/2` tokens (r.m.s. radius :math:`5\cdot10^{-4}`, the head of
``data/concentration.toml``, β = 1024, tolerance 1e-8; ``meanfield bench``, *clusters* table):
0.19 s against 3.5 s point by point at :math:`n = 65\,536`, 0.98 s against 55 s at
:math:`262\,144`, 5.0 s against about 930 s at :math:`2^{20}`.

Public API: :func:`build_proxies`, :class:`ClusterProxies`, :func:`chebyshev_points`,
:func:`interpolation_error_bound`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import prange

from meanfield.kernels.jit import jit, kernel_threads, pjit

__all__ = [
    "ClusterProxies",
    "build_proxies",
    "chebyshev_points",
    "interpolation_error_bound",
    "PROXY_MIN_POINTS",
    "PROXY_GAIN",
    "MAX_POINTS_PER_AXIS",
    "MAX_DEPTH",
    "PROXY_MIN_ROWS",
    "PROXY_MIN_CANDIDATES",
]

#: fewest points a cell (and a box split from it) must hold to be considered for a proxy
PROXY_MIN_POINTS = 256
#: a proxy's nodes must number at most 1/PROXY_GAIN of its box's points
PROXY_GAIN = 4
#: most Chebyshev points per axis
MAX_POINTS_PER_AXIS = 48
#: fewest rows a local pass must have for the proxies to be built (fewer rows sum the points more cheaply)
PROXY_MIN_ROWS = 2048
#: fewest candidate points per row, on average, for the proxies to be built: a proxy has a few hundred
#: to a few thousand nodes, and its build costs about as many pairs per proxied point
PROXY_MIN_CANDIDATES = 4096
#: most times a heavy cell's box is split into four
MAX_DEPTH = 10
#: a box too wide for a proxy sheds the points farther from its median point than this many times their median distance
_TRIM = 8.0
#: relative rounding of one term of the proxy sums, before the Lebesgue constants and e^{U+ω}
_ROUNDING = 1e-15


@dataclass(frozen=True)
class ClusterProxies:
    """The proxies of the cells of a point grid.

    Attributes
    ----------
    node_start : (cells + 1,) int64 array
        Cell ``c`` has the nodes ``node_start[c]:node_start[c+1]`` (none where it keeps its points),
        laid out like the point grid's ``cell_start``.
    nodes : (3, K) array
        The nodes :math:`z_k`, one coordinate per row.
    weights : (4, K) array
        :math:`W_{k,f}` for :math:`f = y^{(1)}, y^{(2)}, y^{(3)}, 1`.
    points : int
        How many points the proxies stand for.
    residual_start, residual_order : int64 arrays
        The point grid of the points summed one by one: cell ``c`` keeps
        ``residual_order[residual_start[c]:residual_start[c+1]]`` (all of its points where it has no proxy).
    """

    node_start: np.ndarray
    nodes: np.ndarray
    weights: np.ndarray
    points: int
    residual_start: np.ndarray
    residual_order: np.ndarray

    @property
    def cells(self) -> int:
        """How many cells have a proxy."""
        return int(np.count_nonzero(np.diff(self.node_start)))

    @property
    def active(self) -> bool:
        """Whether any box is proxied."""
        return self.nodes.shape[1] > 0


def chebyshev_points(p: int) -> np.ndarray:
    r"""The :math:`p` Chebyshev points of the first kind, :math:`\tau_k=\cos\frac{(2k+1)\pi}{2p}`, :math:`k<p`."""
    return np.cos((2.0 * np.arange(p) + 1.0) * np.pi / (2.0 * p))


def interpolation_error_bound(u: float, p: int) -> float:
    r"""Relative bound of the Chebyshev interpolation of :math:`e^{ut}` on :math:`[-1, 1]` at :math:`p` points.

    .. math::

        \frac{\max_{[-1,1]}|e^{ut}-I_{p}e^{ut}|}{e^{|u|}} \le \frac{|u|^{p}}{2^{p-1}\,p!}

    (the interpolation remainder with :math:`\max|f^{(p)}| = |u|^p e^{|u|}`).
    """
    u = abs(float(u))
    if u == 0.0:
        return 0.0
    return math.exp(p * math.log(u) - (p - 1) * math.log(2.0) - math.lgamma(p + 1.0))


def _lebesgue(p: int) -> float:
    """An upper bound of the Lebesgue constant of ``p`` Chebyshev points of the first kind."""
    return 1.0 + 2.0 / math.pi * math.log(max(p, 1))


def _points_per_axis(u: np.ndarray, offset: float, budget: float) -> tuple[int, int, int] | None:
    """The fewest Chebyshev points per axis whose bound, times :math:`e^{U+\\omega}`, stays within ``budget``; None if none does."""
    amplification = math.exp(float(np.linalg.norm(u)) + offset)  # U = q_max ‖ρ‖₂ (Cauchy–Schwarz)
    share = budget / (16.0 * amplification)  # three axes and the (1 + Σ b)² factor: within budget / 4 · e^{-(U + ω)}
    out = []
    for ud in u:
        p = 1
        while interpolation_error_bound(ud, p) > share:
            p += 1
            if p > MAX_POINTS_PER_AXIS:
                return None
        out.append(p)
    lebesgue = _lebesgue(out[0]) * _lebesgue(out[1]) * _lebesgue(out[2])
    if _ROUNDING * lebesgue * amplification > budget / 4.0:
        return None
    return out[0], out[1], out[2]


def _children_may_qualify(u: np.ndarray, points: int, budget: float) -> bool:
    """Whether a quarter of the box (half its tangent widths, a quarter of its points on average) could take a proxy.

    A cheap test before the split: where even the average child cannot pay for its nodes, splitting
    further only makes the boxes poorer in points faster than it makes them narrower.
    """
    child = np.array([u[0] / 4.0, u[1] / 2.0, u[2] / 2.0])  # the normal extent shrinks with the square of the tangents
    nodes = _points_per_axis(child, 0.0, budget)
    return nodes is not None and 4 * math.prod(nodes) * PROXY_GAIN <= points


def _frame(direction: np.ndarray) -> np.ndarray:
    """(3, 3): rows ``direction`` and two unit tangents completing it to an orthonormal frame."""
    helper = np.zeros(3)
    helper[int(np.argmin(np.abs(direction)))] = 1.0
    e2 = helper - (helper @ direction) * direction
    e2 /= np.linalg.norm(e2)
    return np.stack([direction, e2, np.cross(direction, e2)])


@jit(fastmath={"contract"})
def _barycentric(t, tau, bary, out):  # pragma: no cover - compiled
    r"""``out[k] = ℓ_k(t)``, the Lagrange basis at the points ``tau`` (barycentric weights ``bary``), exact at a node."""
    p = tau.shape[0]
    total = 0.0
    for k in range(p):
        diff = t - tau[k]
        if diff == 0.0:
            for m in range(p):
                out[m] = 0.0
            out[k] = 1.0
            return
        out[k] = bary[k] / diff
        total += out[k]
    for k in range(p):
        out[k] /= total


@pjit
def _anterpolate(local, values, t1, b1, t2, b2, t3, b3, first, bounds, weights):  # pragma: no cover - compiled
    r"""The proxy weights of every box, in parallel over the boxes (each writes its own nodes only).

    Box ``c`` holds the points ``bounds[c]:bounds[c+1]`` of ``local`` ((m, 3), their coordinates
    :math:`t\in[-1,1]^3` in the box) and ``values`` ((m, 4), :math:`a_j f_j`); its nodes are
    ``first[c] + (k_1 p_2 + k_2) p_3 + k_3`` with the box's own Chebyshev points ``t1[c], t2[c], t3[c]``
    (padded rows; ``p_d`` = the number of finite entries) and barycentric weights ``b1, b2, b3``.
    """
    for c in prange(first.shape[0]):
        p1 = 0
        while p1 < t1.shape[1] and np.isfinite(t1[c, p1]):
            p1 += 1
        p2 = 0
        while p2 < t2.shape[1] and np.isfinite(t2[c, p2]):
            p2 += 1
        p3 = 0
        while p3 < t3.shape[1] and np.isfinite(t3[c, p3]):
            p3 += 1
        l1 = np.empty(p1)
        l2 = np.empty(p2)
        l3 = np.empty(p3)
        f0 = first[c]
        for j in range(bounds[c], bounds[c + 1]):
            _barycentric(local[j, 0], t1[c, :p1], b1[c, :p1], l1)
            _barycentric(local[j, 1], t2[c, :p2], b2[c, :p2], l2)
            _barycentric(local[j, 2], t3[c, :p3], b3[c, :p3], l3)
            v0, v1, v2, v3 = values[j, 0], values[j, 1], values[j, 2], values[j, 3]
            for k1 in range(p1):
                for k2 in range(p2):
                    s = l1[k1] * l2[k2]
                    base = f0 + (k1 * p2 + k2) * p3
                    for k3 in range(p3):
                        w = s * l3[k3]
                        weights[base + k3, 0] += w * v0
                        weights[base + k3, 1] += w * v1
                        weights[base + k3, 2] += w * v2
                        weights[base + k3, 3] += w * v3


def _no_proxies(cell_start: np.ndarray, cell_order: np.ndarray) -> ClusterProxies:
    return ClusterProxies(np.zeros(cell_start.shape[0], dtype=np.int64), np.zeros((3, 0)), np.zeros((4, 0)), 0,
                          cell_start, cell_order)


@dataclass
class _Box:
    """One proxied box: its points, their coordinates in the box, the nodes' axes and the frame."""

    cell: int
    idx: np.ndarray
    local: np.ndarray
    middle: np.ndarray
    half: np.ndarray
    points: tuple[int, int, int]
    frame: np.ndarray


@dataclass
class _Part:
    """Some points of one cell and the box about them in their own frame; ``points`` is None where it takes no proxy."""

    idx: np.ndarray
    coords: np.ndarray
    middle: np.ndarray
    half: np.ndarray
    points: tuple[int, int, int] | None
    frame: np.ndarray


def _measure(y: np.ndarray, wy: np.ndarray, idx: np.ndarray, *, qmax: float, tolerance: float) -> _Part | None:
    """The box about the points ``idx`` and its proxy's Chebyshev points per axis (None: too few points, no mass)."""
    if idx.size < PROXY_MIN_POINTS:
        return None
    mass = wy[3, idx]
    total = float(mass.sum())
    mean = wy[:3, idx].sum(axis=1)
    norm = float(np.linalg.norm(mean))
    if not total > 0 or not norm > 0:
        return None
    frame = _frame(mean / norm)
    coords = y[idx] @ frame.T  # (count, 3): along the mean direction and the two tangents
    lo, hi = coords.min(axis=0), coords.max(axis=0)
    half, middle = 0.5 * (hi - lo), 0.5 * (hi + lo)
    centroid = (mass @ coords) / total
    offset = qmax * float(np.linalg.norm(centroid - middle))  # Jensen: the box's sum is ≥ M e^{q·ȳ}
    points = _points_per_axis(qmax * half, offset, tolerance)
    if points is not None and math.prod(points) * PROXY_GAIN > idx.size:
        points = None
    return _Part(idx, coords, middle, half, points, frame)


def _core(coords: np.ndarray) -> np.ndarray:
    """The points within :data:`_TRIM` times the median distance of the median point, along the tangents (a mask)."""
    centre = np.median(coords[:, 1:], axis=0)
    dist = np.hypot(coords[:, 1] - centre[0], coords[:, 2] - centre[1])
    return dist <= _TRIM * float(np.median(dist))


def _may_pay(part: _Part | None, *, qmax: float, tolerance: float) -> bool:
    """Whether a measured box takes a proxy, or the average quarter of it could (:func:`_children_may_qualify`)."""
    if part is None:
        return False
    return part.points is not None or _children_may_qualify(qmax * part.half, part.idx.size, tolerance)


def _split_or_proxy(y: np.ndarray, wy: np.ndarray, cell: int, idx: np.ndarray, *, qmax: float, tolerance: float,
                    boxes: list[_Box]) -> None:
    """Proxy the points ``idx`` of one cell; the boxes that qualify are appended to ``boxes``, the other points stay as
    they are.

    A box too wide for a proxy first sheds its outliers (:func:`_core`: a token in transit beside a
    cluster, in the same grid cell, would otherwise widen the cluster's box past any proxy), which
    are measured apart; with none to shed, it is split into four along its tangents where one of
    the quarters, measured, takes a proxy or may after a further split.
    """
    def measure(points: np.ndarray) -> _Part | None:
        return _measure(y, wy, points, qmax=qmax, tolerance=tolerance)

    stack = [(measure(idx), 0)]
    while stack:
        part, depth = stack.pop()
        if part is None:
            continue
        if part.points is not None:
            local = np.where(part.half > 0, (part.coords - part.middle) / np.where(part.half > 0, part.half, 1.0), 0.0)
            boxes.append(_Box(cell, part.idx, local, part.middle, part.half, part.points, part.frame))
            continue
        if depth >= MAX_DEPTH:
            continue
        inner = _core(part.coords)
        kept = int(np.count_nonzero(inner))
        if PROXY_MIN_POINTS <= kept < part.idx.size:
            stack.append((measure(part.idx[~inner]), depth + 1))
            stack.append((measure(part.idx[inner]), depth + 1))
            continue
        if part.idx.size < 4 * PROXY_MIN_POINTS:
            continue
        quarter = (part.coords[:, 1] > part.middle[1]).astype(np.int64) * 2 + (part.coords[:, 2] > part.middle[2])
        children = [measure(part.idx[quarter == k]) for k in range(4)]
        if _children_may_qualify(qmax * part.half, part.idx.size, tolerance) or any(
            _may_pay(child, qmax=qmax, tolerance=tolerance) for child in children
        ):
            stack.extend((child, depth + 1) for child in children)


def build_proxies(
    y: np.ndarray,
    wy: np.ndarray,
    cell_start: np.ndarray,
    cell_order: np.ndarray,
    *,
    qmax: float,
    tolerance: float,
) -> ClusterProxies:
    r"""The proxies of the compact, heavy parts of the cells of a point grid (module docstring).

    A heavy cell whose box is too wide for a proxy sheds its outliers, or else is split into four
    along its tangents, up to :data:`MAX_DEPTH` times; what qualifies nowhere keeps its points.

    Parameters
    ----------
    y : (m, 3) array
        The points (unit vectors).
    wy : (4, m) array
        :math:`a_jy_j` and :math:`a_j` (:attr:`meanfield.kernels.local.SphereSources.wy`).
    cell_start, cell_order : int64 arrays
        The point grid: cell ``c`` holds the points ``cell_order[cell_start[c]:cell_start[c+1]]``.
    qmax : float
        A bound on :math:`\|q\|` over the rows the proxies will serve (:math:`\beta\|B\|_2`).
    tolerance : float
        Relative error allowed per box's sum (interpolation and rounding together).

    Returns
    -------
    ClusterProxies
        No box proxied where none qualifies (the usual case for spread-out points).
    """
    counts = np.diff(cell_start)
    heavy = np.flatnonzero(counts >= PROXY_MIN_POINTS)
    if heavy.size == 0 or not qmax > 0 or not np.isfinite(qmax):
        return _no_proxies(cell_start, cell_order)
    boxes: list[_Box] = []
    for cell in heavy:
        _split_or_proxy(y, wy, int(cell), cell_order[cell_start[cell] : cell_start[cell + 1]], qmax=qmax,
                        tolerance=tolerance, boxes=boxes)
    if not boxes:
        return _no_proxies(cell_start, cell_order)
    boxes.sort(key=lambda box: box.cell)  # a cell's nodes are contiguous
    sizes = np.array([math.prod(box.points) for box in boxes], dtype=np.int64)
    firsts = np.r_[0, np.cumsum(sizes)[:-1]].astype(np.int64)
    widest = max(max(box.points) for box in boxes)
    taus = [np.full((len(boxes), widest), np.nan) for _ in range(3)]
    barys = [np.zeros((len(boxes), widest)) for _ in range(3)]
    nodes = np.empty((int(sizes.sum()), 3))
    for b, box in enumerate(boxes):
        axes = []
        for d, p in enumerate(box.points):
            tau = chebyshev_points(p)
            taus[d][b, :p] = tau
            barys[d][b, :p] = (-1.0) ** np.arange(p) * np.sin((2.0 * np.arange(p) + 1.0) * np.pi / (2.0 * p))
            axes.append(box.middle[d] + box.half[d] * tau)
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)  # node k = (k1 p2 + k2) p3 + k3
        nodes[firsts[b] : firsts[b] + sizes[b]] = grid @ box.frame
    local = np.ascontiguousarray(np.concatenate([box.local for box in boxes]))
    proxied = np.concatenate([box.idx for box in boxes])
    values = np.ascontiguousarray(wy[:, proxied].T)
    bounds = np.r_[0, np.cumsum([box.idx.size for box in boxes])].astype(np.int64)
    weights = np.zeros((nodes.shape[0], 4))
    work = float(np.sum(np.diff(bounds) * sizes))  # (point, node) pairs, like a kernel's score pairs
    with kernel_threads(work):
        _anterpolate(local, values, taus[0], barys[0], taus[1], barys[1], taus[2], barys[2], firsts, bounds, weights)
    cells = cell_start.shape[0] - 1
    which = np.array([box.cell for box in boxes], dtype=np.int64)
    node_start = np.zeros(cells + 1, dtype=np.int64)  # the boxes are sorted by cell: a cell's nodes are contiguous
    np.cumsum(np.bincount(which, weights=sizes, minlength=cells).astype(np.int64), out=node_start[1:])
    # the points left to be summed one by one, still grouped by cell (cell_order is)
    kept = np.ones(y.shape[0], dtype=bool)
    kept[proxied] = False
    kept_in_order = kept[cell_order]
    residual_start = np.r_[0, np.cumsum(kept_in_order)][cell_start].astype(np.int64)
    residual_order = cell_order[kept_in_order]
    return ClusterProxies(node_start, np.ascontiguousarray(nodes.T), np.ascontiguousarray(weights.T),
                          int(bounds[-1]), residual_start, residual_order)
