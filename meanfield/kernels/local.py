r"""Exact "local" attention on :math:`S^2`: every row summed over the only points that matter.

For one head, row :math:`i` of the velocity laws of :mod:`meanfield.kernels.attention`
(softmax, unnormalized, pooled) is built from the shifted sums

.. math::

    D_i = \sum_j a_j\, e^{\beta s_{ij} - m_i}, \qquad
    N_i = \sum_j a_j\, e^{\beta s_{ij} - m_i}\, x_j, \qquad
    s_{ij} = x_i^\top B x_j = u_i\cdot x_j,\quad u_i = B^\top x_i ,

with :math:`m_i = \max_j \beta s_{ij}`.  Write :math:`r_i=\beta\|u_i\|`,
:math:`\hat u_i = u_i/\|u_i\|` and :math:`c^*_i=\max_j\hat u_i\cdot x_j`.  A point
with :math:`r_i(c^*_i-\hat u_i\cdot x_j)>\Delta` contributes less than
:math:`e^{-\Delta}` times its mass, so, relative to the row's own sum
:math:`D_i\ge a_{j^*}`, everything outside the spherical cap

.. math::

    \mathcal C_i = \{y\in S^2:\ \hat u_i\cdot y \ge c^*_i - \Delta/r_i\},\qquad
    \Delta = \ln\frac{M}{\varepsilon\,\bar a},

(:math:`M=\sum_j a_j`, :math:`\bar a = M/m` the mean positive mass) may be dropped
at relative cost :math:`\varepsilon`.  For large :math:`r_i` the cap is small: its
chord radius is :math:`\sqrt{2(1-c^*_i)+2\Delta/r_i}`, about
:math:`(2\ln(1/\varepsilon)/r_i)^{1/2}` around the best point when mass lies near
:math:`\hat u_i`.

**Algorithm.**  The points with positive mass go into a :class:`scipy.spatial.cKDTree`
(chord distances between unit vectors).  The query directions :math:`\hat u_i` are
grouped into blocks: cells of a cube-sphere grid (gnomonic side about half the typical cap
radius, :data:`CELL_CAP`, or smaller so that a cell holds about :data:`BLOCK_ROWS` rows),
split into at most :data:`BLOCK_ROWS` rows.  For a block with centre :math:`c`, radius
:math:`\delta` (chord) and nearest point at chord :math:`d` from :math:`c`, every row's cap
lies in the ball of chord radius :math:`R=\rho+\delta`,
:math:`\rho=\sqrt{(d+\delta)^2+2\Delta/r_{\min}}`, around :math:`c`; one
``query_ball_point`` per block lists these candidates (blocks with
:math:`R\ge` :data:`WHOLE_CHORD` scan every point instead).  A numba kernel then, row by
row, computes the candidates' scores and their exact maximum :math:`m_i` (the shift: no
overflow, no underflow of the leading term), exponentiates only the candidates within
:math:`\Delta` of it (the vectorised ``exp`` of :mod:`meanfield.kernels.fused`), sums them,
and checks the rigorous bound

.. math::

    (M - M_{\rm kept})\, e^{\max(-\Delta,\ r_i(1-\rho^2/2) - m_i)} \le \varepsilon\, D_i

on everything it left out (:math:`M_{\rm kept}` the mass it summed).  Rows that fail (a
tiny mass at the best point, say) are redone with a doubled :math:`\Delta`, twice, and then
by the dense exact sum over all points.  The result is exact to a relative
:math:`\varepsilon` = ``tolerance / 2`` per row (plus rounding), whatever the data.

Measured (n = 65536, β‖B‖ = 1220, 1.3e8 candidate pairs): the numba kernel takes
8 ns per pair on one thread, the same blocks in NumPy (GEMM → ``exp`` → GEMM) 25 ns.
Cost: :math:`\sum_{\rm blocks}\text{rows}\times\text{candidates}` pairs, about
:math:`n^2\cdot1.2\,(\sqrt{2\Delta/r}+0.06)^2/4` for spread-out data at large
:math:`r=\beta\|B\|` (vs :math:`n^2` dense), and :math:`n\,m` when :math:`r` is small
(every cap is the whole sphere).  Memory :math:`O(n + m)` plus the candidate lists of a
batch of blocks (at most :data:`MAX_BATCH_CANDIDATES` indices).

**Causal mask** (``mask="causal"``; Karagodin, Polyanskiy and Rigollet, *Clustering in
Causal Attention Masking*, arXiv 2411.04990): row :math:`i` may only use the points
:math:`j\le i`.  The tree, the blocks and the candidate balls stay those of all points;
each block's candidates are listed in index order, so that row :math:`i` scores the
leading candidates up to its limit only (the causal pairs, about half), and the bound
uses the mass :math:`M_i=\sum_{j\le i}a_j` of its prefix.  The bound stays rigorous (the
ball bounds the scores of every point outside it, whichever index it has); rows whose
prefix holds nothing near the ball — the first few hundred rows, typically — fail it
and take the dense exact sum over their (short) prefix.

This module also holds what the harmonic kernel (:mod:`meanfield.kernels.harmonic`)
shares with it: the input checks, the per-head shifted sums :class:`HeadSums`, and
their combination into the velocity laws (:func:`combine_head_sums`).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numba import prange
from scipy.spatial import cKDTree

from meanfield.heads.head import HeadStack
from meanfield.kernels.fused import _accumulate3, exp_nonpositive_scalar
from meanfield.kernels.inputs import BLOCK_ELEMENTS, check_tokens, is_causal, token_masses
from meanfield.kernels.jit import jit, kernel_threads, pjit, threads_for

__all__ = [
    "velocity_local",
    "local_head_sums",
    "dense_head_sums",
    "combine_head_sums",
    "pooled_scales",
    "check_sphere_tokens",
    "HeadSums",
    "SphereSources",
    "SPHERE_KINDS",
    "SPHERE_TOLERANCE",
    "BLOCK_ROWS",
    "CELL_CAP",
    "WHOLE_CHORD",
    "MAX_BATCH_CANDIDATES",
]

#: velocity laws the sphere kernels provide (``relu`` has no exponential structure)
SPHERE_KINDS: tuple[str, ...] = ("softmax", "unnormalized", "pooled")
#: largest deviation :math:`\delta=\max_i|\|x_i\|-1|` accepted: the caps and the harmonic expansion
#: assume unit vectors (a deviation costs the harmonic kernel a relative error of about δ·β‖B‖)
SPHERE_TOLERANCE = 1e-10
#: most query rows per block of the local kernel (one candidate list per block)
BLOCK_ROWS = 128
#: cell side of the row blocks as a fraction of the typical cap radius (larger cells: fewer
#: candidate lists, more score pairs)
CELL_CAP = 0.5
#: candidate indices materialised at once (a batch of blocks): the k-d tree returns Python lists
#: (~36 bytes per index while they live), so 2^20 keeps a batch below ~50 MiB
MAX_BATCH_CANDIDATES = 1 << 20
#: blocks whose candidate ball has at least this chord radius (a third of the sphere's area)
#: scan all points instead: listing them costs more than the cheap score pass they save
WHOLE_CHORD = 1.15
#: rounds of widening the caps (Δ doubled each round) before the dense exact sum
_RETRIES = 2


# ----------------------------------------------------------------------------- shared pieces


def check_sphere_tokens(x: np.ndarray, heads: HeadStack, kind: str) -> np.ndarray:
    """``x`` as a contiguous ``(n, 3)`` float array of unit vectors; ``kind`` one of :data:`SPHERE_KINDS`.

    Raises
    ------
    ValueError
        For an unknown kind, ``"relu"``, ``d != 3``, or tokens off the unit sphere
        (by more than :data:`SPHERE_TOLERANCE`).
    """
    if kind == "relu":
        raise ValueError("the sphere kernels provide the exponential laws only (softmax, unnormalized, pooled), not 'relu'")
    if heads.d != 3:
        raise ValueError(f"the sphere kernels need d = 3, got heads of dimension {heads.d}")
    x = check_tokens(x, heads, kind)
    if x.shape[0]:
        err = float(np.max(np.abs(np.sqrt(np.einsum("ij,ij->i", x, x)) - 1.0)))
        if not err <= SPHERE_TOLERANCE:
            raise ValueError(f"the sphere kernels need tokens on the unit sphere (max | |x_i| - 1 | = {err:.3g} > {SPHERE_TOLERANCE:g})")
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


def _half_exp(z: np.ndarray) -> np.ndarray:
    """``exp(z / 2)``: ``(value * exp(z/2)) * exp(z/2)`` stays finite whenever ``value * exp(z)`` is."""
    return np.exp(0.5 * z)


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
                half = _half_exp(sums[h].shift)
                _add(out, sums[h].num * half[:, None], half, heads.V[h])
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


# ----------------------------------------------------------------------------- numba kernels


@jit(fastmath=True)
def _scores(q0, q1, q2, y0, y1, y2, nc, z):  # pragma: no cover - compiled
    """``z[j] = q · y_j`` for the candidates; returns the maximum."""
    best = -np.inf
    for j in range(nc):
        s = q0 * y0[j] + q1 * y1[j] + q2 * y2[j]
        z[j] = s
        best = max(best, s)
    return best


@jit(fastmath={"contract"})
def _compact(z, top, floor, w0, w1, w2, w3, nc, zk, k0, k1, k2, k3):  # pragma: no cover - compiled
    """Keep the candidates with ``z - top >= floor`` (shifted scores and weights packed); returns their count."""
    c = 0
    for j in range(nc):
        t = z[j] - top
        if t >= floor:
            zk[c] = t
            k0[c] = w0[j]
            k1[c] = w1[j]
            k2[c] = w2[j]
            k3[c] = w3[j]
            c += 1
    return c


@jit(fastmath={"contract"})
def _exp_inplace(z, nc):  # pragma: no cover - compiled
    for j in range(nc):
        z[j] = exp_nonpositive_scalar(z[j])


@pjit
def _local_kernel(q, row_ptr, cand_ptr, cand, whole, cos_out, yt, wy, mass, eps, delta, sums, shift, ok,
                  causal, limits, cmass):  # pragma: no cover - compiled
    """Block ``b`` holds rows ``row_ptr[b]:row_ptr[b+1]`` of ``q`` (= β Bᵀx_i, already in block order) and
    candidates ``cand[cand_ptr[b]:cand_ptr[b+1]]`` (all points if ``whole[b]``).

    Per row: scores and their exact maximum ``top``; the candidates within ``delta`` of it are
    exponentiated and summed; the bound on everything else (the candidates below and the points
    outside the block's ball) is checked against ``eps`` times the row sum.  ``causal``: row ``i``
    uses the candidates below ``limits[i]`` only (the lists are sorted), and its mass is ``cmass[limits[i]]``.
    """
    nb = row_ptr.shape[0] - 1
    m = yt.shape[1]
    for b in prange(nb):
        if whole[b]:
            nc = m
        else:
            nc = cand_ptr[b + 1] - cand_ptr[b]
        y0 = np.empty(nc)
        y1 = np.empty(nc)
        y2 = np.empty(nc)
        w0 = np.empty(nc)
        w1 = np.empty(nc)
        w2 = np.empty(nc)
        w3 = np.empty(nc)
        z = np.empty(nc)
        zk = np.empty(nc)
        k0 = np.empty(nc)
        k1 = np.empty(nc)
        k2 = np.empty(nc)
        k3 = np.empty(nc)
        acc = np.empty(4)
        c0 = cand_ptr[b]
        for j in range(nc):
            k = j if whole[b] else cand[c0 + j]
            y0[j] = yt[0, k]
            y1[j] = yt[1, k]
            y2[j] = yt[2, k]
            w0[j] = wy[0, k]
            w1[j] = wy[1, k]
            w2[j] = wy[2, k]
            w3[j] = wy[3, k]
        for i in range(row_ptr[b], row_ptr[b + 1]):
            q0 = q[i, 0]
            q1 = q[i, 1]
            q2 = q[i, 2]
            nci = nc
            mass_i = mass
            if causal:  # the leading candidates (index order) below the row's limit
                lim = limits[i]
                nci = min(nc, lim) if whole[b] else np.searchsorted(cand[c0 : c0 + nc], lim)
                mass_i = cmass[lim]
            if nci == 0:
                ok[i] = False
                continue
            top = _scores(q0, q1, q2, y0, y1, y2, nci, z)
            kept = _compact(z, top, -delta, w0, w1, w2, w3, nci, zk, k0, k1, k2, k3)
            _exp_inplace(zk, kept)
            acc[:] = 0.0
            _accumulate3(zk, k0, k1, k2, k3, kept, acc)
            sums[i, 0] = acc[0]
            sums[i, 1] = acc[1]
            sums[i, 2] = acc[2]
            sums[i, 3] = acc[3]
            shift[i] = top
            inside = 0.0
            for j in range(kept):
                inside += k3[j]
            rest = mass_i - inside
            # exponent bound of what was left out: -delta inside the ball, r cos_out - top outside it
            t = -delta
            if not whole[b]:
                r = np.sqrt(q0 * q0 + q1 * q1 + q2 * q2)
                t = max(t, r * cos_out[b] - top)
            if rest <= 0.0:
                ok[i] = True
            elif t > 0.0:
                ok[i] = False
            else:
                ok[i] = rest * np.exp(t) <= eps * acc[3]


# ----------------------------------------------------------------------------- the local sums


def _flatten(lists: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR form (pointers, indices) of an object array of index lists."""
    counts = np.fromiter((len(c) for c in lists), dtype=np.int64, count=len(lists))
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(ptr[-1]))
    return ptr, flat


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
    delta = float(np.log(src.m / eps))
    pending = np.arange(k)
    lims = None if limits is None else np.asarray(limits, dtype=np.int64)
    for attempt in range(_RETRIES + 1):
        if pending.size == 0:
            break
        sub, ok = _local_pass(q[pending], r[pending], src, delta, eps, None if lims is None else lims[pending])
        out.put(pending, sub)
        pending = pending[~ok]
        delta *= 2.0
    if pending.size:
        out.put(pending, dense_head_sums(x_rows[pending], B, beta, src, limits=None if lims is None else lims[pending]))
    return out


def _local_pass(
    q: np.ndarray, r: np.ndarray, src: SphereSources, delta: float, eps: float, limits: np.ndarray | None = None
) -> tuple[HeadSums, np.ndarray]:
    """One pass of the local method with cap parameter ``delta``; returns the sums and the rows whose bound held.

    ``limits``: the causal prefix of each row (candidate lists are then sorted by index).
    """
    causal = limits is not None
    k = q.shape[0]
    uhat = np.empty_like(q)
    nz = r > 0
    uhat[nz] = q[nz] / r[nz, None]
    uhat[~nz] = (0.0, 0.0, 1.0)
    # cells (gnomonic side, ~ angle) of at most half the typical cap radius, about BLOCK_ROWS rows each
    r_typ = float(np.median(r)) if k else 1.0
    cap = np.sqrt(2.0 * delta / max(r_typ, 1e-300))
    cell = float(np.clip(min(CELL_CAP * cap, np.sqrt(4.0 * np.pi * BLOCK_ROWS / max(k, 1))), 1e-3, 2.0))
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
    threads = threads_for(float(k) * src.m)
    nearest, _ = src.tree.query(centre, k=1, workers=threads)
    with np.errstate(divide="ignore"):
        rho = np.sqrt((nearest + spread) ** 2 + np.where(r_min > 0, 2.0 * delta / np.maximum(r_min, 1e-300), np.inf))
    radius = rho + spread
    whole = radius >= WHOLE_CHORD  # a cap this large: scan every point rather than list them
    cos_out = np.where(whole, -1.0, 1.0 - 0.5 * np.minimum(rho, 2.0) ** 2)
    qs = np.ascontiguousarray(q[order])
    lims = np.ascontiguousarray(limits[order]) if causal else np.zeros(0, dtype=np.int64)
    cmass = src.cumulative_mass if causal else np.zeros(1)
    sums = np.zeros((k, 4))
    shift = np.zeros(k)
    ok = np.zeros(k, dtype=np.bool_)
    # batches of blocks whose candidate lists fit in memory (estimated from the cap areas)
    est = np.where(whole, 0, np.minimum(src.m, np.ceil(src.m * radius**2 / 4.0 * 1.5) + 16))
    b0 = 0
    nb = starts.size
    while b0 < nb:
        total = np.cumsum(est[b0:])
        b1 = b0 + max(1, int(np.searchsorted(total, MAX_BATCH_CANDIDATES, side="right")))
        blocks = np.arange(b0, b1)
        part = ~whole[blocks]
        cand_ptr = np.zeros(blocks.size + 1, dtype=np.int64)
        cand = np.zeros(0, dtype=np.int64)
        if part.any():
            lists = src.tree.query_ball_point(centre[blocks[part]], radius[blocks[part]], return_sorted=causal, workers=threads)
            ptr, cand = _flatten(lists)
            counts = np.zeros(blocks.size, dtype=np.int64)
            counts[part] = np.diff(ptr)
            np.cumsum(counts, out=cand_ptr[1:])
        lo, hi = row_ptr[b0], row_ptr[b1]
        sub_ptr = row_ptr[b0 : b1 + 1] - lo
        pairs = float(np.sum(np.diff(sub_ptr) * np.where(whole[blocks], src.m, np.diff(cand_ptr)))) * (0.5 if causal else 1.0)
        with kernel_threads(pairs):
            _local_kernel(
                qs[lo:hi], sub_ptr, cand_ptr, cand, whole[blocks], cos_out[blocks], src.yt, src.wy,
                src.mass, eps, delta, sums[lo:hi], shift[lo:hi], ok[lo:hi], causal, lims[lo:hi] if causal else lims, cmass,
            )
        b0 = b1
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
    rows : array of int, optional
        Rows to compute (default all).
    mask : {"none", "causal"}
        ``"causal"``: row :math:`i` sums over :math:`j\le i` only (the causal local
        method of the module docstring; exact to the same tolerance).

    Returns
    -------
    (k, 3) array
        :math:`v_i` for the requested rows (``k = n`` by default).

    Notes
    -----
    Fast when :math:`\beta\|B\|` is large (small caps); at small :math:`\beta` every
    cap is the whole sphere and the cost is that of a dense kernel.
    """
    x = check_sphere_tokens(x, heads, kind)
    causal = is_causal(mask)
    n = x.shape[0]
    a = token_masses(n, weights)
    idx = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64).ravel()
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IndexError("rows out of range")
    src = SphereSources(x, a)
    beta = float(beta)
    limits = src.causal_limits(np.where(idx < 0, idx + n, idx)) if causal else None
    sums = [
        local_head_sums(x[idx], heads.B[h], beta, src, tolerance=tolerance, limits=limits)
        if kind != "pooled" or heads.w[h] != 0
        else HeadSums.empty(idx.size)
        for h in range(heads.H)
    ]
    if idx.size == 0:
        return np.zeros((0, 3))
    return combine_head_sums(heads, kind, sums)
