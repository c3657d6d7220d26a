r"""Optimal-transport estimators between measures on the sphere :math:`S^{d-1}`.

.. math::

    W_2(\mu, \nu)^2 = \min_{\pi \in \Pi(\mu, \nu)}
        \int_{S^{d-1} \times S^{d-1}} c(x, y)^2 \, \mathrm{d}\pi(x, y),
    \qquad
    c(x, y) = \arccos \langle x, y \rangle \ \text{(geodesic)}
    \quad\text{or}\quad \|x - y\| \ \text{(chordal)}.

Three estimators:

* ``"exact"``: the linear program, POT's :func:`ot.emd2` on the cost matrix, with
  a fast exact path when one side has few atoms (:func:`w2_to_atoms`);
* ``"sinkhorn"``: the debiased Sinkhorn divergence (Feydy et al. 2019), by our own
  log-domain updates with ε-scaling, each level finished by Newton steps on the dual
  where the updates crawl;
* ``"sliced"``: the spherical sliced-Wasserstein distance ``SSW_2`` of
  Bonet et al. (2023), POT's, which is a *different* quantity from ``W_2``.

Measures are discrete, :math:`\mu = \sum_i a_i \delta_{x_i}`; particle
clouds, grid measures and atoms are all given in this form.

References
----------
- G. Peyré and M. Cuturi, "Computational Optimal Transport",
  Foundations and Trends in Machine Learning 11(5-6), 2019.
  doi:10.1561/2200000073
- J. Feydy, T. Séjourné, F.-X. Vialard, S. Amari, A. Trouvé and
  G. Peyré, "Interpolating between Optimal Transport and MMD using Sinkhorn
  Divergences", AISTATS 2019.
- L. Chizat, P. Roussillon, F. Léger, F.-X. Vialard and G. Peyré,
  "Faster Wasserstein Distance Estimation with the Sinkhorn Divergence",
  NeurIPS 2020.
- C. Bonet, P. Berg, N. Courty, F. Septier, L. Drumetz and
  M.-T. Pham, "Spherical Sliced-Wasserstein", ICLR 2023.
"""
from __future__ import annotations

import time
import warnings
from typing import Any

import math

import numba
import numpy as np
import ot
from numpy.typing import ArrayLike, NDArray

from meanfield.checks import check_flag
from meanfield.kernels.jit import kernel_threads, one_blas_thread, pjit

__all__ = [
    "COSTS",
    "METHODS",
    "MASS_RTOL",
    "SPHERE_TOL",
    "cost_matrix",
    "w2",
    "w2_to_atoms",
]

#: Ground costs accepted by ``cost=``.
COSTS: tuple[str, ...] = ("geodesic", "chordal")
#: Estimators accepted by ``method=``.
METHODS: tuple[str, ...] = ("exact", "sinkhorn", "sliced")
#: Largest accepted deviation ``| ||x|| - 1 |`` of an input point.
SPHERE_TOL: float = 1e-6
#: Points whose ``| ||x|| - 1 |`` is at most this (rounding: ``x / np.linalg.norm(x)`` gives 2.2e-16) are used as
#: given, not divided by their norm again (which would move them by an ulp, 1e-8 relative at a distance of 1e-8).
UNIT_AS_GIVEN: float = 1e-15
#: Relative tolerance on ``sum(a) == sum(b)``.
MASS_RTOL: float = 1e-9

# Options of each method, with their defaults (``None`` = chosen from the sizes).
_OPTIONS: dict[str, dict[str, Any]] = {
    "exact": {"numItermax": None, "merge_duplicates": True},
    "sinkhorn": {"epsilon": 1e-2, "numItermax": 10_000, "stopThr": 1e-6,
                 "merge_duplicates": True},
    "sliced": {"n_projections": 200, "seed": 0},
}
# Few-atoms exact path: closed form (k = 1), greedy (k = 2), certified
# reduced problems for 3 <= k <= _FEW_ATOMS_MAX when the other side has more
# than _FEW_ATOMS_MIN_N atoms (below that, ot.emd2 is already fast; above
# k = 16 the O(n k^2) Newton refinement of the dual guess stops paying off).
_FEW_ATOMS_MAX = 16
_FEW_ATOMS_MIN_N = 16384
# Entries of the Gram matrix with |<x, y>| > 1 - _NEAR are recomputed from exact
# differences: elsewhere its absolute error ~1e-16 gives a geodesic error below
# 1e-16 / sqrt(2 _NEAR) ~ 3e-15 rad and a relative error of the squared costs below
# ~1e-16 / _NEAR; for uniform clouds a share ~_NEAR of the entries is recomputed.
_NEAR = 1e-3
_INT_MAX = 2**31 - 1
_SSW_BATCH = 4_000_000  # projected values per call to POT in the sliced method


# ----------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------
def _points(x: ArrayLike, name: str) -> NDArray[np.float64]:
    """Validate points on the sphere and return them renormalised (a new array).

    Rows already unit to rounding (``| ||x|| - 1 | <=`` :data:`UNIT_AS_GIVEN`, as ``x / np.linalg.norm(x)`` makes
    them) are kept as given: dividing by the norm would move each by about an ulp, 1e-8 of a distance of 1e-8, and
    the costs of close pairs come from the rows' differences."""
    arr = _float_array(x, name)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array of shape (n, d) of points on S^(d-1); "
            f"got an array of shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} must contain at least one point; got shape {arr.shape}")
    if arr.shape[1] < 2:
        raise ValueError(
            f"{name} must have d >= 2 columns (points of S^(d-1) in R^d); "
            f"got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.argwhere(~np.isfinite(arr))[0, 0])
        raise ValueError(f"{name} has non-finite coordinates (first at row {bad})")
    norms = np.sqrt(np.einsum("ij,ij->i", arr, arr))
    dev = np.abs(norms - 1.0)
    worst = int(np.argmax(dev))
    if dev[worst] > SPHERE_TOL:
        raise ValueError(
            f"{name} is not on the unit sphere: row {worst} has norm "
            f"{norms[worst]:.12g}, | ||x|| - 1 | = {dev[worst]:.3g} > {SPHERE_TOL:g} "
            f"({int(np.count_nonzero(dev > SPHERE_TOL))} of {arr.shape[0]} rows are off)")
    out = arr.copy()
    off = dev > UNIT_AS_GIVEN
    out[off] /= norms[off, None]
    return out


def _weights(w: ArrayLike | None, n: int, name: str) -> NDArray[np.float64]:
    """Validate non-negative weights of shape (n,); ``None`` -> uniform 1/n."""
    if w is None:
        return np.full(n, 1.0 / n)
    arr = _float_array(w, name)
    if arr.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) to match the points; got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} has non-finite weights (first at index "
                         f"{int(np.argwhere(~np.isfinite(arr))[0, 0])})")
    if np.any(arr < 0):
        i = int(np.argmin(arr))
        raise ValueError(f"{name} has negative weights: {name}[{i}] = {arr[i]:.6g}")
    with np.errstate(over="ignore"):
        total = float(arr.sum())
    if not total > 0:
        raise ValueError(f"{name} has zero total mass")
    if not np.isfinite(total):  # every weight finite, their sum not: a mass check of inf against inf let it through
        raise ValueError(f"{name} has a total mass past the largest float ({total}); divide the weights by a common factor")
    return arr


def _mass_rounding(w: ArrayLike | None, n: int) -> float:
    """How far from 1 the total of ``n`` weights normalised in their own precision may be: each weight rounded
    (ε/2 of the total at most) and their pairwise sum (log₂ n ε): float32 weights summing to 1 in float32 had been
    refused against float64's 1e-9 (1/7 seven times is 1 + 4.5e-8)."""
    dtype = getattr(w, "dtype", None)
    if dtype is None or dtype.kind != "f" or dtype.itemsize >= 8:
        return 0.0
    return (math.log2(max(n, 1)) + 2.0) * float(np.finfo(dtype).eps)


def _float_array(value: ArrayLike, name: str) -> NDArray[np.float64]:
    """``value`` as a float64 array, or a ValueError naming ``name`` (a string or ragged nesting)."""
    try:
        if np.iscomplexobj(value):  # NumPy would drop the imaginary part with a warning
            raise ValueError(f"{name} must be real numbers; got complex numbers")
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        raise ValueError(message if message.startswith(name) else f"{name} must be an array of real numbers; {message}") from None


def _measures(x: ArrayLike, y: ArrayLike, a: ArrayLike | None, b: ArrayLike | None,
              names: tuple[str, str] = ("x", "y")):
    """Validate two discrete measures; return points and probability weights."""
    xs = _points(x, names[0])
    ys = _points(y, names[1])
    if xs.shape[1] != ys.shape[1]:
        raise ValueError(
            f"{names[0]} and {names[1]} live in different dimensions: "
            f"{names[0]} has shape {xs.shape}, {names[1]} has shape {ys.shape}")
    aw = _weights(a, xs.shape[0], "a")
    bw = _weights(b, ys.shape[0], "b")
    sa, sb = float(aw.sum()), float(bw.sum())
    tolerance = max(MASS_RTOL, _mass_rounding(a, aw.size), _mass_rounding(b, bw.size))
    if abs(sa - sb) > tolerance * max(sa, sb):
        raise ValueError(
            f"the measures have different total masses: sum(a) = {sa:.17g}, "
            f"sum(b) = {sb:.17g} (relative difference {abs(sa - sb) / max(sa, sb):.3g} "
            f"> {tolerance:.3g}); W2 needs equal masses")
    return xs, ys, aw / sa, bw / sb


def _check_cost(cost: str) -> None:
    if cost not in COSTS:
        raise ValueError(f"unknown cost {cost!r}; expected one of {COSTS}")


def _resolve_options(method: str, options: dict[str, Any]) -> dict[str, Any]:
    allowed = _OPTIONS[method]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TypeError(
            f"w2(method={method!r}) got unexpected option(s) {unknown}; "
            f"accepted: {sorted(allowed)}")
    resolved = {**allowed, **options}
    # each option named where it is wrong (a string epsilon had failed in float(), "no" had merged duplicates)
    if not isinstance(resolved.get("merge_duplicates", True), (bool, np.bool_)):
        raise TypeError(f"merge_duplicates must be True or False; got {resolved['merge_duplicates']!r}")
    for name in ("epsilon", "stopThr"):
        value = resolved.get(name, 1.0)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive finite number; got {value!r}")
    seed = resolved.get("seed", 0)
    if seed is not None and not isinstance(seed, np.random.Generator) and (
            isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):  # (a Generator, documented,
        raise ValueError(f"seed must be an integer >= 0, a numpy Generator or None; got {seed!r}")  # had been refused)
    return resolved


# ----------------------------------------------------------------------------
# cost matrices
# ----------------------------------------------------------------------------
# fdlibm's rational approximation asin(s) = s + s z P(z)/Q(z), z = s^2 <= 1/4 (|error| < 1 ulp)
_PIO2_HI = 1.57079632679489655800e+00
_PIO2_LO = 6.12323399573676603587e-17
_PS = (1.66666666666666657415e-01, -3.25565818622400915405e-01, 2.01212532134862925881e-01,
       -4.00555345006794114027e-02, 7.91534994289814532176e-04, 3.47933107596021167570e-05)
_QS = (-2.40339491173441421878e+00, 2.02094576023350569471e+00, -6.88283971605453293030e-01,
       7.70381505559019352791e-02)


@pjit
def _geodesic_inplace(x, y, out, squared, near):  # pragma: no cover - compiled
    r"""Overwrite the Gram matrix ``out`` by :math:`\arccos\langle x_i, y_j\rangle` (squared if asked).

    Pass 1 (vectorised, no calls but ``sqrt``): fdlibm's ``acos``, i.e.
    :math:`\tfrac\pi2 - \arcsin g` for :math:`|g| \le \tfrac12` and
    :math:`2\arcsin\sqrt{(1-|g|)/2}` (or :math:`\pi` minus it) beyond.  Pass 2 redoes the
    entries with :math:`|g| > 1 - \text{near}` from exact differences,
    :math:`2\arcsin(\|x-y\|/2)` and :math:`\pi - 2\arcsin(\|x+y\|/2)`, where the
    Gram matrix's absolute error :math:`\sim 10^{-16}` would cost relative accuracy.
    """
    n, m = out.shape
    d = x.shape[1]
    p0, p1, p2, p3, p4, p5 = _PS
    q1, q2, q3, q4 = _QS
    t_lo = math.acos(1.0 - near)  # below t_lo or above pi - t_lo: recompute
    t_hi = 2.0 * _PIO2_HI - t_lo
    for i in numba.prange(n):
        row = out[i]
        for j in range(m):
            g = min(1.0, max(-1.0, row[j]))
            ag = abs(g)
            small = ag <= 0.5
            z = g * g if small else 0.5 * (1.0 - ag)
            s = ag if small else math.sqrt(z)
            r = z * (p0 + z * (p1 + z * (p2 + z * (p3 + z * (p4 + z * p5))))) / (
                1.0 + z * (q1 + z * (q2 + z * (q3 + z * q4))))
            if small:
                t = _PIO2_HI - ((g + g * r) - _PIO2_LO)
            elif g > 0.0:
                t = 2.0 * (s + s * r)
            else:
                t = 2.0 * _PIO2_HI - 2.0 * ((s + s * r) - _PIO2_LO)
            row[j] = t
        for j in range(m):
            t = row[j]
            if t < t_lo or t > t_hi:
                acc = 0.0
                if t < t_lo:
                    for k in range(d):
                        e = x[i, k] - y[j, k]
                        acc += e * e
                    t = 2.0 * math.asin(min(1.0, 0.5 * math.sqrt(acc)))
                else:
                    for k in range(d):
                        e = x[i, k] + y[j, k]
                        acc += e * e
                    t = 2.0 * _PIO2_HI - 2.0 * (math.asin(min(1.0, 0.5 * math.sqrt(acc))) - _PIO2_LO)
                row[j] = t
        if squared:
            for j in range(m):
                row[j] *= row[j]


@pjit
def _chordal_inplace(x, y, out, squared, near):  # pragma: no cover - compiled
    r"""Overwrite the Gram matrix ``out`` by :math:`\|x_i - y_j\|^2 = \max(2 - 2g, 0)` (or its root).

    Entries with :math:`g > 1 - \text{near}` are redone from exact differences (relative accuracy
    for tiny distances); near :math:`g = -1` the value is about 4 and ``2 - 2g`` is accurate.
    """
    n, m = out.shape
    d = x.shape[1]
    lo = 2.0 * near
    for i in numba.prange(n):
        row = out[i]
        for j in range(m):
            row[j] = max(2.0 - 2.0 * row[j], 0.0)
        for j in range(m):
            if row[j] < lo:
                acc = 0.0
                for k in range(d):
                    e = x[i, k] - y[j, k]
                    acc += e * e
                row[j] = acc
        if not squared:
            for j in range(m):
                row[j] = math.sqrt(row[j])


def _cost(x: NDArray[np.float64], y: NDArray[np.float64], cost: str,
          squared: bool = True) -> NDArray[np.float64]:
    """Cost matrix between unit vectors (no validation): GEMM, then the transform in place."""
    n, m = x.shape[0], y.shape[0]
    out = np.empty((n, m))
    if n == 0 or m == 0:
        return out
    with one_blas_thread():  # the transform threads over rows itself
        np.matmul(x, y.T, out=out)
    kernel = _geodesic_inplace if cost == "geodesic" else _chordal_inplace
    with kernel_threads(float(n) * m):
        kernel(x, y, out, bool(squared), _NEAR)
    return out


def cost_matrix(x: ArrayLike, y: ArrayLike, *, cost: str = "geodesic",
                squared: bool = True) -> NDArray[np.float64]:
    r"""Ground-cost matrix between two point clouds on the sphere.

    .. math::

        C_{ij} = c(x_i, y_j)^2, \qquad
        c(x, y) = \arccos\,\mathrm{clip}(\langle x, y\rangle, -1, 1)
        \ \text{(geodesic)}, \qquad c(x, y) = \|x - y\| \ \text{(chordal)}.

    Points are renormalised to unit norm first, except those unit to rounding
    already (``UNIT_AS_GIVEN``), which are used as given.  The matrix is built from the
    Gram matrix :math:`g_{ij} = \langle x_i, y_j\rangle` (one GEMM) with the
    transform applied in place by a compiled pass over rows: ``acos`` by
    fdlibm's rational approximation, the chord as :math:`\max(2 - 2g, 0)`.
    Where :math:`|g_{ij}| > 1 - 10^{-3}` the Gram matrix's absolute error
    :math:`\sim 10^{-16}` would cost relative accuracy (and, at
    :math:`g = -1`, :math:`10^{-8}` of the geodesic), so those entries are
    recomputed from exact differences,

    .. math::

        \theta = 2\arcsin\tfrac{\|x-y\|}{2} \ (g > 0), \qquad
        \theta = \pi - 2\arcsin\tfrac{\|x+y\|}{2} \ (g < 0), \qquad
        \|x-y\|^2 = \textstyle\sum_k (x_k - y_k)^2 ;

    tiny distances keep their relative accuracy, the squared costs are
    accurate to about ``1e-13`` relative and the geodesic to ``1e-14`` rad
    everywhere (for points off the sphere by more than rounding, relative to
    their renormalised copies, which are an ulp from the exact quotients).  Costs :math:`O(nmd)` time and one
    :math:`n \times m` array.

    Parameters
    ----------
    x : (n, d) array-like
        Points on :math:`S^{d-1}` (``| ||x_i|| - 1 | <= 1e-6``).
    y : (m, d) array-like
        Points on :math:`S^{d-1}`.
    cost : {"geodesic", "chordal"}
        Ground distance.
    squared : bool, default True
        Return :math:`c^2` (the ``W_2`` cost) rather than :math:`c`.

    Returns
    -------
    C : (n, m) ndarray

    Raises
    ------
    ValueError
        Bad shapes, different dimensions, points off the sphere, unknown cost.

    Examples
    --------
    >>> import numpy as np
    >>> e = np.array([[1.0, 0.0, 0.0]]); f = np.array([[0.0, 1.0, 0.0]])
    >>> float(cost_matrix(e, f, cost="geodesic", squared=False)[0, 0])  # pi/2
    1.5707963267948966
    >>> float(cost_matrix(e, f, cost="chordal")[0, 0])
    2.0
    """
    _check_cost(cost)
    squared = check_flag("squared", squared)  # ("no", a truthy string, had given the squared matrix)
    xs = _points(x, "x")
    ys = _points(y, "y")
    if xs.shape[1] != ys.shape[1]:
        raise ValueError(f"x and y live in different dimensions: x has shape {xs.shape}, "
                         f"y has shape {ys.shape}")
    return _cost(xs, ys, cost, squared)


# ----------------------------------------------------------------------------
# exact solvers
# ----------------------------------------------------------------------------
def _may_repeat(x: NDArray[np.float64]) -> bool:
    """Whether two rows of ``x`` share their first coordinate: a sort of one column, where ``np.unique(x, axis=0)``
    sorts whole rows (0.2 ms of a 2 ms exact W2 between clouds of 200 points on S², twice)."""
    first = np.sort(x[:, 0])
    return bool(np.any(first[1:] == first[:-1]))


def _merge(x: NDArray[np.float64], w: NDArray[np.float64], merge: bool):
    """Drop zero weights and merge identical points.

    Returns the merged points, their weights, and ``(keep, inverse)`` that map
    original indices to merged ones: original ``keep[r]`` goes to merged
    ``inverse[r]``.
    """
    keep = np.flatnonzero(w > 0)
    xk, wk = x[keep], w[keep]
    if merge and xk.shape[0] == 2 and not np.array_equal(xk[0], xk[1]):  # the common 2-atom target
        return xk, wk, keep, np.arange(2)
    if merge and xk.shape[0] > 1 and not _may_repeat(xk):  # no two rows share a first coordinate: nothing to merge
        return xk, wk, keep, np.arange(xk.shape[0])
    if merge and xk.shape[0] > 1:
        xu, first, inverse = np.unique(xk, axis=0, return_index=True, return_inverse=True)
        # keep the order of first occurrence: the network simplex can be many
        # times slower on lexicographically sorted rows
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        inverse = rank[inverse.reshape(-1)]
        wu = np.bincount(inverse, weights=wk, minlength=xu.shape[0])
        return xu[order], wu, keep, inverse
    return xk, wk, keep, np.arange(xk.shape[0])


def _same_measure(x, a, y, b) -> bool:
    """Whether two merged measures are identical up to the order of atoms."""
    if x.shape != y.shape:
        return False
    px, py = np.lexsort(x.T[::-1]), np.lexsort(y.T[::-1])
    return bool(np.array_equal(x[px], y[py]) and np.array_equal(a[px], b[py]))


def _unmerge_plan(G: NDArray[np.float64], shape: tuple[int, int],
                  wa: NDArray[np.float64], ka, ia, Wa,
                  wb: NDArray[np.float64], kb, ib, Wb) -> NDArray[np.float64]:
    """Plan on the original atoms; merged mass is split in proportion to weights."""
    out = np.zeros(shape)
    sub = G[np.ix_(ia, ib)]
    sub *= (wa[ka] / Wa[ia])[:, None]
    sub *= (wb[kb] / Wb[ib])[None, :]
    out[np.ix_(ka, kb)] = sub
    return out


def _emd(a, b, C, numItermax: int):
    """ot.emd2 with POT's warnings captured; returns (cost, plan, v, code, msg)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            val, lg = ot.emd2(a, b, np.ascontiguousarray(C), numItermax=int(numItermax),
                              log=True, return_matrix=True)
    return float(val), lg["G"], np.asarray(lg["v"]), int(lg["result_code"]), lg["warning"]


def _default_itermax(n: int, m: int) -> int:
    return int(min(_INT_MAX, max(100_000, 100 * n * m)))


def _two_atoms(a: NDArray[np.float64], b: NDArray[np.float64],
               C: NDArray[np.float64]) -> NDArray[np.float64]:
    """Exact plan to two atoms: fractional knapsack on ``C[:, 0] - C[:, 1]``.

    Sending mass ``p_i`` of point i to atom 0 costs
    ``sum_i a_i C_i1 + sum_i p_i (C_i0 - C_i1)`` with ``0 <= p_i <= a_i``,
    ``sum p_i = b_0``; filling in increasing order of the difference is optimal.
    """
    order = np.argsort(C[:, 0] - C[:, 1], kind="stable")
    ao = a[order]
    before = np.cumsum(ao) - ao
    p0 = np.empty_like(a)
    p0[order] = np.clip(b[0] - before, 0.0, ao)
    return np.stack([p0, a - p0], axis=1)


def _entropic_dual(a, b, C, v, eps: float, cap: float, max_iter: int = 20):
    r"""Damped Newton ascent on the smoothed semi-discrete dual.

    .. math::

        F_\varepsilon(v) = \sum_j b_j v_j - \varepsilon \sum_i a_i
        \log \sum_j \exp\big((v_j - C_{ij})/\varepsilon\big),

    concave in :math:`v \in \mathbb R^k` with gradient
    :math:`b - \sum_i a_i \pi_i(v)` (softmax assignments); its maximiser
    tends to an optimal dual of the linear program as
    :math:`\varepsilon \to 0`.  Only used to produce a dual *guess*.
    """
    k = C.shape[1]

    def evaluate(v):
        Z = (v[None, :] - C) / eps
        mx = Z.max(axis=1)
        Z -= mx[:, None]
        E = np.exp(Z)
        E[Z < -230.0] = 0.0  # no subnormals: they make the products crawl
        s = E.sum(axis=1)
        F = float(np.dot(b, v) - eps * np.sum(a * (mx + np.log(s))))
        return F, E / s[:, None]

    # Skinny (n, k) products go through einsum, not BLAS: multithreaded BLAS on
    # (n, k)^T (n, k) stalls badly on an oversubscribed machine.
    with np.errstate(under="ignore"):
        F, P = evaluate(v)
        for _ in range(max_iter):
            w = np.einsum("i,ij->j", a, P)
            g = b - w
            if np.abs(g).sum() <= 1e-3 * float(b.min()):
                break
            H = (np.diag(w) - np.einsum("ij,ik->jk", P * a[:, None], P)) / eps  # -Hessian
            tr = np.trace(H) / k + 1e-300
            H += tr * np.full((k, k), 1.0 / k) + 1e-9 * tr * np.eye(k)
            step = np.linalg.solve(H, g)
            big = float(np.abs(step).max())
            if big > cap:  # atoms without soft mass give huge Newton steps
                step *= cap / big
            t = 1.0
            while t > 1e-3:  # at most 10 halvings: this is only a guess
                Fn, Pn = evaluate(v + t * step)
                if Fn >= F + 1e-4 * t * float(g @ step):
                    break
                t *= 0.5
            else:
                break
            v, F, P = v + t * step, Fn, Pn
    return v


def _certified_few_atoms(a, b, C, numItermax: int | None):
    """Exact n x k transport for small k via reduced problems with a certificate.

    A dual guess ``v`` (``ot.emd2`` on a subsample, refined by Newton ascent on
    the smoothed semi-discrete dual) assigns every point with a clear
    preference (large gap between its best and second-best reduced cost
    ``C_ij - v_j``) to its best atom; the remaining points are solved exactly
    with ``ot.emd2`` against the residual capacities.  The combined plan is
    accepted only if it satisfies complementary slackness with the new duals
    (every unit of mass sits on an argmin of ``C_ij - v_j`` within ``tol``),
    which proves optimality up to ``tol``; otherwise the reduced set grows
    (up to the full problem).
    """
    n, k = C.shape
    spread = float(C.max() - C.min())
    if spread == 0.0:  # every plan is optimal
        return a[:, None] * b[None, :], {"rounds": 0, "reduced_size": 0, "result_code": 1,
                                         "warning": None, "max_violation": 0.0}
    tol = 1e-12 * float(C.max())
    rng = np.random.default_rng(0x5EED)
    sub = min(n, max(2048, 32 * k))
    idx = rng.choice(n, size=sub, replace=False)
    _, _, v, _, _ = _emd(a[idx] / a[idx].sum(), b, C[idx],
                         numItermax or _default_itermax(sub, k))
    eps = 1e-2 * spread
    while eps > 2e-5 * spread:
        v = _entropic_dual(a, b, C, v, eps, cap=0.25 * spread)
        eps *= 0.1
    R = C - v[None, :]
    two = np.partition(R, 1, axis=1)[:, :2]
    size = int(min(n, max(1024, np.count_nonzero(two[:, 1] - two[:, 0] < 40 * eps))))
    if size > n // 4:  # poor guess: the full problem is cheaper
        size = n
    rounds = 0
    while True:
        rounds += 1
        if size >= n:
            itm = numItermax or _default_itermax(n, k)
            _, G, v, code, msg = _emd(a, b, C, itm)
            return G, {"rounds": rounds, "reduced_size": n, "result_code": code,
                       "warning": msg, "max_violation": None}
        R = C - v[None, :]
        best = np.argmin(R, axis=1)
        two = np.partition(R, 1, axis=1)[:, :2]
        gap = two[:, 1] - two[:, 0]
        while True:
            S = np.argpartition(gap, size - 1)[:size]
            fixed = np.ones(n, dtype=bool)
            fixed[S] = False
            r = b - np.bincount(best[fixed], weights=a[fixed], minlength=k)
            if np.all(r >= -1e-14) or size >= n:
                break
            size = min(n, 2 * size)
        if size >= n:
            continue
        r = np.maximum(r, 0.0)
        aS = a[S]
        pos = r > 1e-15 * aS.sum()
        cols = np.flatnonzero(pos)
        rp = r[pos] * (aS.sum() / r[pos].sum())
        itm = numItermax or _default_itermax(size, cols.size)
        _, GS, vS, code, msg = _emd(aS, rp, C[np.ix_(S, cols)], itm)
        vnew = np.empty(k)
        vnew[pos] = vS
        if cols.size < k:
            # columns without residual capacity: largest v_j keeping S feasible
            uS = np.min(C[np.ix_(S, cols)] - vS[None, :], axis=1)
            for j in np.flatnonzero(~pos):
                vnew[j] = np.min(C[S, j] - uS)
        G = np.zeros((n, k))
        fi = np.flatnonzero(fixed)
        G[fi, best[fi]] = a[fi]
        G[np.ix_(S, cols)] = GS
        Rn = C - vnew[None, :]
        u = Rn.min(axis=1)
        viol = float(np.where(G > 0, Rn - u[:, None], 0.0).max())
        if code == 1 and viol <= tol:
            return G, {"rounds": rounds, "reduced_size": size, "result_code": code,
                       "warning": msg, "max_violation": viol}
        v = vnew  # duals of an exact sub-problem: a better guess
        size = min(n, 2 * size)


def _few_atoms(a, b, C, numItermax: int | None):
    """Exact plan for an (n, k) problem, k = number of columns (small)."""
    n, k = C.shape
    if k == 1:
        return a[:, None].copy(), {"solver": "one_atom", "result_code": 1, "warning": None}
    if k == 2:
        return _two_atoms(a, b, C), {"solver": "two_atoms_greedy", "result_code": 1,
                                     "warning": None}
    if k <= _FEW_ATOMS_MAX and n > _FEW_ATOMS_MIN_N:
        G, info = _certified_few_atoms(a, b, C, numItermax)
        return G, {"solver": "few_atoms_certified", **info}
    itm = numItermax or _default_itermax(n, k)
    _, G, _, code, msg = _emd(a, b, C, itm)
    return G, {"solver": "emd2", "result_code": code, "warning": msg, "numItermax": itm}


#: (n, m) float64 arrays the exact solver holds at once (the cost matrix, POT's plan and its copy) and Sinkhorn's
#: peak (the cost, the scaled cost and the soft-min buffer), for the memory check before them
_EXACT_COPIES, _SINKHORN_COPIES = 3, 3
#: elements of a row block of the Sinkhorn value (:func:`_entropic_value`): 4 MiB
_SINKHORN_VALUE_BLOCK = 1 << 19


def _check_pairs(n: int, m: int, copies: int, method: str) -> None:
    """Refuse a problem whose (n, m) arrays do not fit in the memory left (it had been NumPy's MemoryError, or the
    process killed inside POT)."""
    from meanfield.resources import memory_shortfall

    short = memory_shortfall(8.0 * copies * n * m)
    if short:
        raise ValueError(f"method={method!r} on {n} × {m} atoms {short} (its (n, m) arrays): use method='sliced' "
                         "(memory linear in n), or fewer atoms")


def _exact(x, y, a, b, cost: str, numItermax: int | None, merge: bool, want_plan: bool = True):
    """Exact squared W2, plan on the original atoms (``None`` unless ``want_plan``) and a log."""
    # Merge the smaller side first; against one or two atoms the closed form and the
    # greedy are exact with duplicates in the larger side, so merging it is wasted work
    # (it dominated the cost of tracking W2 to Π♯ρ₀ at every frame).
    if y.shape[0] <= x.shape[0]:
        ym, bm, kb, ib = _merge(y, b, merge)
        xm, am, ka, ia = _merge(x, a, merge and ym.shape[0] > 2)
    else:
        xm, am, ka, ia = _merge(x, a, merge)
        ym, bm, kb, ib = _merge(y, b, merge and xm.shape[0] > 2)
    n, m = xm.shape[0], ym.shape[0]
    info: dict[str, Any] = {"merged_sizes": (n, m)}
    if min(n, m) <= _FEW_ATOMS_MAX:
        if m <= n:
            C = _cost(xm, ym, cost)
            G, sub = _few_atoms(am, bm, C, numItermax)
        else:
            C = _cost(ym, xm, cost)
            G, sub = _few_atoms(bm, am, C, numItermax)
            G, C = G.T, C.T
        info.update(sub)
        value = float(np.einsum("ij,ij->", G, C))  # (n, k): cheap
    else:
        _check_pairs(n, m, _EXACT_COPIES, "exact")
        C = _cost(xm, ym, cost)
        itm = numItermax or _default_itermax(n, m)
        # emd2's own value: a sum over the dense (n, m) plan here cost a fifth of the solve
        value, G, _, code, msg = _emd(am, bm, C, itm)
        info.update({"solver": "emd2", "result_code": code, "warning": msg,
                     "numItermax": itm})
    info["converged"] = info.get("result_code") == 1
    if not info["converged"]:
        warnings.warn(
            f"exact W2: ot.emd2 did not reach optimality ({info.get('warning')}; "
            f"numItermax={info.get('numItermax')}); the value may be inaccurate. "
            "Pass a larger numItermax.", RuntimeWarning, stacklevel=3)
    plan = _unmerge_plan(G, (x.shape[0], y.shape[0]), a, ka, ia, am, b, kb, ib, bm) if want_plan else None
    return value, plan, info


# ----------------------------------------------------------------------------
# Sinkhorn divergence
# ----------------------------------------------------------------------------
def _entropy(w: NDArray[np.float64]) -> float:
    w = w[w > 0]
    return float(-np.sum(w * np.log(w)))


#: the range of ε of the Sinkhorn divergence, relative to the largest cost: below it the potentials divided by ε lose
#: their digits (measured: 1e-16 read 1.036 where the exact W2 is 0.917, 1e-18 read 3e10; 1e-12 agrees with an
#: independent log-domain Sinkhorn to 6 digits), above it the terms e^((f + g − C)/ε) round to 1 (1e17 read 0; at
#: 1.2e6 times the cost the divergence is 3e-6 off the limit, the energy distance, which it has reached already)
SINKHORN_MIN_RELATIVE_EPSILON = 1e-13
SINKHORN_MAX_RELATIVE_EPSILON = 1e6


def _eps_schedule(eps: float, C: NDArray[np.float64]) -> list[float]:
    """Epsilon-scaling: halve from the cost scale down to ``eps``."""
    levels = []
    e = float(C.max())
    while e > 2.0 * eps:
        levels.append(e)
        e *= 0.5
    return levels + [eps]


def _entropic_value(f, g, C, la, lb, eps: float) -> float:
    r""":math:`\langle C, P\rangle + \varepsilon\,\mathrm{KL}(P\,|\,a\otimes b)` of the plan
    :math:`P_{ij} = a_ib_je^{(f_i + g_j - C_{ij})/\varepsilon}` of the potentials.

    Since :math:`\varepsilon\log(P_{ij}/a_ib_j) = f_i + g_j - C_{ij}`, the value is
    :math:`\sum_i f_i(P\mathbf 1)_i + \sum_j g_j(P^\top\mathbf 1)_j`: only the plan's row and column sums, taken
    in row blocks (the plan, its mask and the log of it had held four more (n, m) arrays beside the cost).
    """
    rows, cols = _plan_sums(f, g, C, la, lb, eps)
    return float(f @ rows + g @ cols)


def _plan_sums(f, g, C, la, lb, eps: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""The row and column sums of the plan :math:`P_{ij} = a_ib_je^{(f_i + g_j - C_{ij})/\varepsilon}`, formed in row
    blocks (no (n, m) array beside the cost)."""
    n, m = C.shape
    rows, cols = np.empty(n), np.zeros(m)
    step = max(1, _SINKHORN_VALUE_BLOCK // max(m, 1))
    with np.errstate(under="ignore", over="ignore", invalid="ignore"):
        for i in range(0, n, step):
            block = (f[i:i + step, None] + g[None, :] - C[i:i + step]) / eps
            block += la[i:i + step, None] + lb[None, :]
            np.exp(block, out=block)
            rows[i:i + step] = block.sum(axis=1)
            cols += block.sum(axis=0)
    return rows, cols


def _soft_min(scaled_cost: NDArray[np.float64], potential: NDArray[np.float64], log_weights: NDArray[np.float64],
              eps: float, axis: int, buffer: NDArray[np.float64]) -> NDArray[np.float64]:
    r""":math:`-\varepsilon\log\sum_j w_j e^{g_j/\varepsilon - C_{ij}/\varepsilon}` along ``axis``, stably (the maximum is shifted out).

    ``scaled_cost`` is :math:`C/\varepsilon`; one pass into a preallocated
    ``buffer`` per step: several times faster than :func:`scipy.special.logsumexp`
    on these sizes, which otherwise dominates Sinkhorn.
    """
    shift = potential / eps + log_weights
    if axis == 1:
        np.subtract(shift[None, :], scaled_cost, out=buffer)
        top = buffer.max(axis=1)
        buffer -= top[:, None]
    else:
        np.subtract(shift[:, None], scaled_cost, out=buffer)
        top = buffer.max(axis=0)
        buffer -= top[None, :]
    np.exp(buffer, out=buffer)
    return -eps * (top + np.log(buffer.sum(axis=axis)))


def _sinkhorn_updates(a, b, C, eps: float, f, g, numItermax: int, tol: float, *, averaged: bool, symmetric: bool = False):
    r"""Log-domain Sinkhorn for :math:`\min_P\langle C,P\rangle+\varepsilon\mathrm{KL}(P|a\otimes b)`.

    .. math::

        f \leftarrow -\varepsilon\log\sum_j b_j e^{(g_j - C_{ij})/\varepsilon},\qquad
        g \leftarrow -\varepsilon\log\sum_i a_i e^{(f_i - C_{ij})/\varepsilon},

    with plan :math:`P_{ij} = a_i b_j e^{(f_i + g_j - C_{ij})/\varepsilon}`.  ``averaged``
    replaces each update by the mean of the old and the new potential [FSV19]:
    the alternating update oscillates (and stalls) on symmetric problems such as
    :math:`\mathrm{OT}_\varepsilon(\mu, \mu)`, the averaged one does not.
    Returns ``f, g, iterations, err`` with ``err`` the L2 violation of both marginals, or the potentials' L2 change in
    one update relative to the largest cost where that is larger: at an ε far above the costs every pair of
    potentials has marginals right to ``tol`` (ε = 1e7 had stopped at f = g = 0 after one iteration, the self terms
    0, the divergence 1.73 where about 0.59).
    """
    la, lb = np.log(a), np.log(b)
    scale = max(float(C.max()), float(np.finfo(float).tiny))  # (before C is scaled by 1/eps)
    C = C / eps
    buffer = np.empty_like(C)
    err = np.inf
    it = 0
    with np.errstate(under="ignore"):
        for it in range(numItermax):
            check = it % 10 == 0
            if averaged:
                Tf = _soft_min(C, g, lb, eps, 1, buffer)
                Tg = Tf if symmetric else _soft_min(C, f, la, eps, 0, buffer)
                if check:  # the marginals of the plan of (f, g) are a e^{(f - Tf)/eps} and b e^{(g - Tg)/eps}
                    err = float(np.linalg.norm(a * np.expm1((f - Tf) / eps)) + np.linalg.norm(b * np.expm1((g - Tg) / eps)))
                    err = max(err, float(np.linalg.norm(a * (f - Tf)) + np.linalg.norm(b * (g - Tg))) / scale)
                    if err < tol:
                        break
                f = 0.5 * (f + Tf)
                g = f if symmetric else 0.5 * (g + Tg)
            else:
                f = _soft_min(C, g, lb, eps, 1, buffer)
                g = _soft_min(C, f, la, eps, 0, buffer)
                if check:  # columns are exact after the g-update; rows: a e^{(f - Tf(g))/eps}
                    residual = f - _soft_min(C, g, lb, eps, 1, buffer)
                    err = max(float(np.linalg.norm(a * np.expm1(residual / eps))), float(np.linalg.norm(a * residual)) / scale)
                    if err < tol:
                        break
    return f, g, it + 1, err


#: Sinkhorn iterations at an ε level before the dual potentials are polished by Newton's method (:func:`_newton_polish`):
#: easy problems stop earlier and keep their values to the last digit; on nearly degenerate ones (20 vs 30 uniform
#: points on S² at ε = 0.01) the marginal error had fallen 0.048 → 3.5e-4 in 100 iterations but only to 3.1e-6 in
#: 10 000 (the default numItermax, 3.6 s and a warning), where Newton reaches the tolerance in about 5 steps (0.1 s)
SINKHORN_ITERATIONS_BEFORE_NEWTON = 100
#: Newton polishing only where the smaller side has at most this many atoms: a step costs O((n + m) min(n, m)²) and an
#: (min, min) matrix (measured 0.5 s, about 10 Sinkhorn updates, at 1000 × 1000 on 2 cores; 32 MB at 2000); larger
#: problems keep plain Sinkhorn
SINKHORN_NEWTON_MAX_ATOMS = 2000
#: Newton polishing only where ε is at least this times the largest cost: below, the exponents (f + g − C)/ε carry
#: rounding errors of about 1e-16 max C / ε, the plan's entries are known to no better than 1e-8 relative and Newton
#: cannot certify the default tolerance (at ε = 1e-13 max C it had taken 30 steps a level without reaching it)
SINKHORN_NEWTON_MIN_RELATIVE_EPSILON = 1e-8
#: Newton steps at one ε level at most (each with a backtracking line search on the dual) before Sinkhorn takes over
_NEWTON_MAX_STEPS = 30
#: full (undamped) Newton steps without a new smallest error after which Newton gives up (the error's rounding floor
#: is reached); damped steps do not count: far from the optimum the dual rises while the error may not (47 vs 53
#: weighted points on S¹ at ε = 1e-6 had given up after 5 damped steps, then 10 000 Sinkhorn updates had not converged)
_NEWTON_STALL_STEPS = 5
#: halvings of a Newton step before the line search gives up
_NEWTON_MAX_HALVINGS = 30


def _plan_into(out, a, b, C, eps: float, f, g) -> NDArray[np.float64]:
    r"""The plan :math:`P_{ij} = a_ib_je^{(f_i + g_j - C_{ij})/\varepsilon}` written into ``out``, an (n, m) buffer.

    The exponent is formed in place as :math:`(f_i + g_j - C_{ij})/\varepsilon + \log a_i + \log b_j` (no
    rescaled copy of the cost); near the optimum it is at most about 0, and a far-off trial point whose exponent
    overflows gives an infinite total mass, hence a dual of :math:`-\infty` that the line search rejects.
    """
    np.add.outer(f, g, out=out)
    out -= C
    out /= eps
    out += np.log(a)[:, None]
    out += np.log(b)[None, :]
    np.exp(out, out=out)
    return out


def _dual_error(a, b, r, c, eps: float, scale: float) -> float:
    r"""The stopping measure of :func:`_sinkhorn_updates` for a plan with row sums ``r`` and column sums ``c``.

    The L2 violation of both marginals, :math:`\|r - a\| + \|c - b\|`, or, where larger, the change of the potentials
    in one (averaged) Sinkhorn update relative to the largest cost, :math:`(\|a\,\varepsilon\log(r/a)\| +
    \|b\,\varepsilon\log(c/b)\|)/\max C` (:math:`f - T_f(g) = \varepsilon\log(r/a)`).
    """
    with np.errstate(divide="ignore"):
        change = float(np.linalg.norm(a * eps * np.log(r / a)) + np.linalg.norm(b * eps * np.log(c / b))) / scale
    err = max(float(np.linalg.norm(r - a) + np.linalg.norm(c - b)), change)
    return err if np.isfinite(err) else np.inf


def _newton_polish(a, b, C, eps: float, f, g, max_steps: int, tol: float, *, symmetric: bool = False):
    r"""Newton ascent on the concave dual of :math:`\min_P\langle C,P\rangle+\varepsilon\mathrm{KL}(P|a\otimes b)`.

    .. math::

        D(f, g) = \langle f, a\rangle + \langle g, b\rangle
          - \varepsilon\sum_{ij} a_ib_j\big(e^{(f_i + g_j - C_{ij})/\varepsilon} - 1\big),

    with gradient :math:`(a - P\mathbf 1,\ b - P^\top\mathbf 1)` and Hessian
    :math:`-\tfrac1\varepsilon\big[\begin{smallmatrix}\mathrm{diag}(P\mathbf 1) & P\\ P^\top &
    \mathrm{diag}(P^\top\mathbf 1)\end{smallmatrix}\big]`, singular along :math:`(\mathbf 1, -\mathbf 1)`.  The
    Newton system is reduced to the Schur complement :math:`\mathrm{diag}(r) - P\,\mathrm{diag}(1/c)P^\top` on the
    smaller side, whose null vector :math:`\mathbf 1` is pinned by adding :math:`\bar r\,\mathbf 1\mathbf 1^\top/n`
    (the right-hand side sums to 0, so the step keeps the potentials' balance).  Symmetric problems (``a = b``,
    ``C`` symmetric, ``g = f``) solve :math:`(\mathrm{diag}(r) + P)\,\delta f = \varepsilon(a - r)`, positive definite.
    A backtracking (Armijo) line search on :math:`D` makes each step increase the dual (to its rounding).  Near the
    optimum it converges quadratically where Sinkhorn's linear rate crawls on nearly degenerate problems.

    Returns ``f, g, steps, err`` with ``err`` the measure of :func:`_dual_error`; the potentials are the last
    accepted ones, at least as good in :math:`D` as those given.  Stops at ``err < tol``, after ``max_steps``, after
    :data:`_NEWTON_STALL_STEPS` full steps without a smaller error, or when a step finds no increase (the caller then goes
    on with Sinkhorn).
    """
    if not symmetric and a.size > b.size:  # the Schur complement on the smaller side
        g, f, steps, err = _newton_polish(b, a, C.T, eps, g, f, max_steps, tol)
        return f, g, steps, err
    n = a.size
    scale = max(float(C.max()), float(np.finfo(float).tiny))
    plan = np.empty(C.shape)
    err, steps = np.inf, 0
    best, since_best, full = np.inf, 0, False
    with np.errstate(under="ignore", over="ignore", invalid="ignore"):
        def dual(f_, g_) -> tuple[float, float]:  # the dual and the rounding of its sum
            P = _plan_into(plan, a, b, C, eps, f_, g_)
            mass = float(P.sum())
            value = float(f_ @ a + g_ @ b) - eps * (mass - 1.0)
            slack = 16.0 * np.finfo(float).eps * (abs(float(f_ @ a)) + abs(float(g_ @ b)) + eps * (mass + 1.0))
            return (value if np.isfinite(value) else -np.inf), slack

        D, slack = dual(f, g)
        if not np.isfinite(D):
            return f, g, 0, np.inf
        for steps in range(max_steps + 1):
            r, c = plan.sum(axis=1), plan.sum(axis=0)
            err = _dual_error(a, b, r, c, eps, scale)
            best, since_best = (err, 0) if err < best else (best, since_best + full)
            if err < tol or steps == max_steps or since_best >= _NEWTON_STALL_STEPS:
                break
            if not (np.all(r > 0) and np.all(c > 0)):  # a row or column of the plan underflowed: no Newton system
                break
            try:
                if symmetric:
                    H = plan.copy()
                    H[np.diag_indices(n)] += r
                    df = np.linalg.solve(H, eps * (a - r))
                    dg = df
                    slope = 2.0 * float((a - r) @ df)
                else:
                    root = np.sqrt(c)
                    plan /= root[None, :]  # Q = P diag(c)^(-1/2): the Schur complement is diag(r) - Q Qᵀ
                    S = plan @ plan.T
                    S *= -1.0
                    S[np.diag_indices(n)] += r
                    S += float(r.sum()) / n**2  # pins the null vector 1 (eigenvalue mean(r))
                    v = eps * (b - c)
                    df = np.linalg.solve(S, eps * (a - r) - plan @ (v / root))
                    dg = (v - root * (plan.T @ df)) / c
                    slope = float((a - r) @ df + (b - c) @ dg)
            except np.linalg.LinAlgError:
                break
            if not (np.all(np.isfinite(df)) and np.all(np.isfinite(dg)) and slope > 0):
                break
            t = 1.0
            for _ in range(_NEWTON_MAX_HALVINGS):
                f_try = f + t * df
                g_try = f_try if symmetric else g + t * dg
                D_try, _ = dual(f_try, g_try)  # (leaves the trial's plan in the buffer)
                # the rounding allowed is the current point's: a trial's own grows with its potentials, and a step to
                # |f| ≈ 1e10 had been accepted on it (W2 = 361638 on the sphere, reported converged); nor is a trial
                # taken whose plan has an empty row or column (no Newton system there, the error infinite)
                if D_try >= D + 1e-4 * t * slope - slack and plan.sum(axis=1).min() > 0 and plan.sum(axis=0).min() > 0:
                    break
                t *= 0.5
            else:  # no increase along a direction of ascent: rounding has the last word
                break
            full = t == 1.0
            if not symmetric:  # (f + s, g − s) is the same plan: keep the potentials balanced, their sizes small
                shift = 0.5 * (float(f_try @ a) - float(g_try @ b))
                f_try, g_try = f_try - shift, g_try + shift
            f, g = f_try, g_try
            D, slack = dual(f, g)
    return f, g, steps, err


def _entropic_ot(a, b, C, eps: float, numItermax: int, stopThr: float,
                 symmetric: bool = False):
    r""":math:`\min_P \langle C, P\rangle + \varepsilon\,\mathrm{KL}(P\,|\,a\otimes b)`.

    Epsilon-scaling (:func:`_eps_schedule`), each level warm-started from the
    previous one; alternating log-domain updates, averaged on symmetric
    problems (``a = b``, ``C`` symmetric), on which alternating Sinkhorn stalls
    (:func:`_sinkhorn_updates`).  A level that has not converged after
    :data:`SINKHORN_ITERATIONS_BEFORE_NEWTON` updates is polished by Newton's method on the dual
    (:func:`_newton_polish`) where the smaller side has at most :data:`SINKHORN_NEWTON_MAX_ATOMS` atoms and ε is at
    least :data:`SINKHORN_NEWTON_MIN_RELATIVE_EPSILON` times the largest cost, then
    Sinkhorn goes on if Newton has not reached the tolerance; Newton steps count against ``numItermax`` (per level)
    like Sinkhorn updates.  The same stopping measure throughout: the marginals' L2 violation, or the potentials'
    change in one update where larger.
    """
    la, lb = np.log(a), np.log(b)
    f, g = np.zeros_like(a), np.zeros_like(b)
    niter, newton, err = 0, 0, np.inf
    small = min(a.size, b.size) <= SINKHORN_NEWTON_MAX_ATOMS
    top = float(C.max())
    for e in _eps_schedule(eps, C):
        tol = stopThr if e == eps else max(stopThr, 1e-5)
        polish = small and e >= SINKHORN_NEWTON_MIN_RELATIVE_EPSILON * top
        budget = min(numItermax, SINKHORN_ITERATIONS_BEFORE_NEWTON) if polish else numItermax
        f, g, k, err = _sinkhorn_updates(a, b, C, e, f, g, budget, tol, averaged=symmetric, symmetric=symmetric)
        niter += k
        left = numItermax - k
        if err < tol or left <= 0:
            continue
        f, g, k, err = _newton_polish(a, b, C, e, f, g, min(left, _NEWTON_MAX_STEPS), tol, symmetric=symmetric)
        niter, newton, left = niter + k, newton + k, left - k
        if err >= tol and left > 0:
            f, g, k, err = _sinkhorn_updates(a, b, C, e, f, g, left, tol, averaged=symmetric, symmetric=symmetric)
            niter += k
    if err < stopThr:  # the marginals of the final potentials' own plan, recomputed: the updates' measure can round to 0
        rows, cols = _plan_sums(f, g, C, la, lb, eps)  # where the potentials have grown past ε's digits
        with np.errstate(over="ignore", invalid="ignore"):
            err = max(err, _dual_error(a, b, rows, cols, eps, max(top, float(np.finfo(float).tiny))))
    value = _entropic_value(f, g, C, la, lb, eps)
    # 0 <= OT_eps <= <C, a⊗b> (the product plan), up to the solver's error: a value outside is no solution
    slack = top * (math.sqrt(max(a.size, b.size)) * err + 1e-12)
    if not (-slack <= value <= float(a @ C @ b) + slack):
        err = max(err, math.inf if not np.isfinite(value) else stopThr)
    return value, {"niter": niter, "newton_steps": newton, "err": err, "converged": bool(err < stopThr),
                   "potentials": (f, g)}


def _check_sinkhorn_epsilon(eps: float, top: float) -> None:
    """Refuse an ε outside the range the log-domain potentials compute, relative to ``top``, the largest cost of the
    three problems (each problem's own had refused a clustered measure's self term at the default ε)."""
    if eps < SINKHORN_MIN_RELATIVE_EPSILON * top:  # (1e-18 had given 3e10 where every W2 is at most π)
        raise ValueError(f"epsilon = {eps:g} is below {SINKHORN_MIN_RELATIVE_EPSILON:g} of the largest cost ({top:.3g}): "
                         "the potentials divided by it lose their digits; use method='exact'")
    if eps > SINKHORN_MAX_RELATIVE_EPSILON * top > 0:  # (1e17 had given 0)
        raise ValueError(f"epsilon = {eps:g} is above {SINKHORN_MAX_RELATIVE_EPSILON:g} times the largest cost ({top:.3g}): "
                         "the terms e^((f + g − C)/ε) round to 1; the divergence has reached its limit (the energy "
                         "distance) at a smaller epsilon")


def _sinkhorn(x, y, a, b, cost, eps, numItermax, stopThr, merge):
    if not (np.isfinite(eps) and eps > 0):
        raise ValueError(f"epsilon must be a positive finite number; got {eps!r}")
    xm, am, _, _ = _merge(x, a, merge)
    ym, bm, _, _ = _merge(y, b, merge)
    _check_pairs(max(xm.shape[0], ym.shape[0]), max(xm.shape[0], ym.shape[0]), _SINKHORN_COPIES, "sinkhorn")
    same = _same_measure(xm, am, ym, bm)
    pairs = {"xx": (xm, xm), "yy": (ym, ym), "xy": (xm, ym)}
    # the largest cost of the three, one matrix at a time (the divergence of a measure to itself is 0: no ε refused)
    top = max(float(_cost(u, v, cost).max()) for u, v in (pairs.values() if not same else [pairs["xx"]]))
    if not same:
        _check_sinkhorn_epsilon(eps, top)
    parts = {"xx": _entropic_ot(am, am, _cost(xm, xm, cost), eps, numItermax, stopThr, True)}
    # identical measures: OT_eps(mu, mu) is the symmetric problem already solved
    parts["yy"] = parts["xx"] if same else _entropic_ot(bm, bm, _cost(ym, ym, cost), eps, numItermax, stopThr, True)
    parts["xy"] = parts["xx"] if same else _entropic_ot(am, bm, _cost(xm, ym, cost), eps, numItermax, stopThr)
    S = parts["xy"][0] - 0.5 * (parts["xx"][0] + parts["yy"][0])
    info = {
        "epsilon": eps,
        "divergence": S,
        "ot_eps": {k: v[0] for k, v in parts.items()},
        "niter": {k: v[1]["niter"] for k, v in parts.items()},
        "newton_steps": {k: v[1]["newton_steps"] for k, v in parts.items()},
        "err": {k: v[1]["err"] for k, v in parts.items()},
        "converged": all(v[1]["converged"] for v in parts.values()),
        "bias_bound": eps * max(_entropy(am), _entropy(bm)),
    }
    info["solver_error"] = top * math.sqrt(max(am.size, bm.size)) * sum(v[1]["err"] for v in parts.values())
    if not info["converged"]:
        warnings.warn(
            f"Sinkhorn did not converge to stopThr={stopThr:g} within numItermax="
            f"{numItermax} (marginal errors {info['err']}); increase numItermax or epsilon.",
            RuntimeWarning, stacklevel=3)
    elif info["solver_error"] > info["bias_bound"]:
        warnings.warn(
            f"Sinkhorn stopped at marginal errors {info['err']} (stopThr={stopThr:g}): the solver's own error, about "
            f"{info['solver_error']:.2g}, may exceed the entropic bias bound {info['bias_bound']:.2g} at epsilon={eps:g}; "
            "lower stopThr", RuntimeWarning, stacklevel=3)
    return S, info


# ----------------------------------------------------------------------------
# spherical sliced Wasserstein
# ----------------------------------------------------------------------------
def _sliced(x, y, a, b, n_projections: int, seed):
    if isinstance(n_projections, bool) or not isinstance(n_projections, (int, np.integer)) \
            or n_projections < 2:
        raise ValueError(f"n_projections must be an integer >= 2; got {n_projections!r}")
    rng = np.random.default_rng(seed)
    d = x.shape[1]
    # Haar-distributed orthonormal frames U in V_{d,2}
    U, _ = np.linalg.qr(rng.standard_normal((int(n_projections), d, 2)))
    step = max(1, _SSW_BATCH // (x.shape[0] + y.shape[0]))
    vals = []
    with np.errstate(all="ignore"):
        for s in range(0, U.shape[0], step):
            Ub = np.ascontiguousarray(U[s:s + step])
            _, lg = ot.sliced_wasserstein_sphere(x, y, a, b, n_projections=Ub.shape[0],
                                                 projections=Ub, p=2, log=True)
            vals.append(np.asarray(lg["projected_emds"], dtype=np.float64))
    # POT parametrises each great circle by [0, 1); convert to radians
    per = np.maximum(np.concatenate(vals), 0.0) * (2.0 * np.pi) ** 2
    ssw2 = float(per.mean())
    se2 = float(per.std(ddof=1) / np.sqrt(per.size))
    ssw = float(np.sqrt(ssw2))
    se = se2 / (2.0 * ssw) if ssw > 0 else 0.0
    info = {
        "quantity": "spherical sliced Wasserstein SSW_2 in radians (not W2)",
        "n_projections": int(n_projections),
        "seed": seed,
        "projected_w2_squared": per,
        "ssw_squared": ssw2,
        "stderr_squared": se2,
        "stderr": se,
        "projections": U,
    }
    return ssw, info


# ----------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------
def w2_to_atoms(x: ArrayLike, atoms: ArrayLike, a: ArrayLike | None = None,
                b: ArrayLike | None = None, *, cost: str = "geodesic",
                log: bool = False, numItermax: int | None = None):
    r"""Exact :math:`W_2` from a point cloud to a measure with few atoms.

    .. math::

        W_2^2\Big(\sum_{i=1}^n a_i \delta_{x_i}, \sum_{j=1}^k b_j \delta_{e_j}\Big)
        = \min_{P \ge 0,\ P\mathbf 1 = a,\ P^\top \mathbf 1 = b}
          \sum_{i,j} P_{ij}\, c(x_i, e_j)^2 .

    The problem is an :math:`n \times k` linear program, solved exactly:

    * :math:`k = 1`: :math:`W_2^2 = \sum_i a_i c(x_i, e_1)^2`;
    * :math:`k = 2`: sending mass :math:`p_i \le a_i` of point :math:`i` to
      :math:`e_1` costs :math:`\sum_i a_i c_{i2} + \sum_i p_i (c_{i1} - c_{i2})`
      with :math:`\sum_i p_i = b_1`, a fractional knapsack: filling in
      increasing order of :math:`c_{i1} - c_{i2}` is optimal
      (:math:`O(n \log n)`);
    * :math:`3 \le k \le 16` and :math:`n > 16384`: a dual guess from a
      subsample fixes the points with a clear preference, ``ot.emd2`` solves the
      rest, and complementary slackness of the combined plan is checked (it
      certifies optimality to ``1e-12 * max(C)``; the reduced set grows until
      it holds, ending at the full ``ot.emd2`` if needed);
    * otherwise ``ot.emd2`` on the :math:`n \times k` cost matrix.

    Zero weights are dropped and identical points merged first.

    Parameters
    ----------
    x : (n, d) array-like
        Points on :math:`S^{d-1}`.
    atoms : (k, d) array-like
        Atom locations on :math:`S^{d-1}`.
    a : (n,) array-like, optional
        Non-negative weights of ``x``; uniform by default.
    b : (k,) array-like, optional
        Non-negative weights of the atoms; uniform by default.  Must have the
        same total mass as ``a`` (relative tolerance ``1e-9``); both are then
        normalised to probabilities.
    cost : {"geodesic", "chordal"}
        Ground distance.
    log : bool
        Also return a dict with ``"plan"`` ((n, k) array), ``"solver"``,
        ``"converged"``, ``"w2_squared"``, ``"time"``.
    numItermax : int, optional
        Iteration cap for ``ot.emd2`` (default ``max(1e5, 100 n k)``).

    Returns
    -------
    w2 : float
    log : dict, only if ``log=True``

    Examples
    --------
    >>> import numpy as np
    >>> e = np.array([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    >>> x = np.tile(e, (5, 1))                 # half the mass at each pole
    >>> print(f"{w2_to_atoms(x, e, b=[0.3, 0.7]):.9f} {np.sqrt(0.2) * np.pi:.9f}")
    1.404962946 1.404962946
    """
    _measures(x, atoms, a, b, names=("x", "atoms"))  # its errors name the argument given here (they had said "y")
    return w2(x, atoms, a, b, cost=cost, method="exact", log=log, numItermax=numItermax)


def w2(x: ArrayLike, y: ArrayLike, a: ArrayLike | None = None, b: ArrayLike | None = None,
       *, cost: str = "geodesic", method: str = "exact", log: bool = False, **options):
    r"""Wasserstein-2 distance between two discrete measures on :math:`S^{d-1}`.

    .. math::

        W_2(\mu, \nu) = \Big(\min_{P \in \Pi(a, b)} \sum_{i,j} P_{ij}\,
        c(x_i, y_j)^2\Big)^{1/2},\qquad
        \mu = \sum_i a_i \delta_{x_i},\ \nu = \sum_j b_j \delta_{y_j},

    with :math:`c = \arccos\langle x, y\rangle` (``"geodesic"``) or
    :math:`c = \|x - y\|` (``"chordal"``); :math:`\Pi(a, b)` are the
    non-negative matrices with marginals ``a`` and ``b`` [PC19]_.  Since
    :math:`\|x-y\| \le \arccos\langle x,y\rangle \le \tfrac{\pi}{2}\|x-y\|`,
    the two distances are within a factor :math:`\pi/2` of each other.

    **Methods.**

    ``"exact"``
        The linear program with ``ot.emd2`` (network simplex).  Identical
        atoms are merged and zero weights dropped; if one side then has at
        most 16 atoms the structured solver of :func:`w2_to_atoms` is used
        (:math:`n = 10^5` against 2 atoms takes ~0.1 s; with 3 to 16 atoms and
        more than 16 384 points its plan is certified optimal to
        :math:`10^{-12}\max C` in :math:`W_2^2`, the floor of a small :math:`W_2`).  Options:
        ``numItermax`` (default :math:`\max(10^5, 100\,nm)`, capped at
        :math:`2^{31}-1`), ``merge_duplicates`` (default True).  A
        ``RuntimeWarning`` is issued when POT reports that the LP stopped
        before optimality (``log["converged"]`` is then False).
    ``"sinkhorn"``
        The debiased Sinkhorn divergence [FSV19]_

        .. math::

            S_\varepsilon(\mu,\nu) = \mathrm{OT}_\varepsilon(\mu,\nu)
              - \tfrac12 \mathrm{OT}_\varepsilon(\mu,\mu)
              - \tfrac12 \mathrm{OT}_\varepsilon(\nu,\nu),\quad
            \mathrm{OT}_\varepsilon(\mu,\nu) = \min_{P\in\Pi(a,b)}
              \langle C, P\rangle + \varepsilon\,\mathrm{KL}(P\,|\,a\otimes b),

        each term by the package's own log-domain Sinkhorn (not POT's: ``numItermax`` counts per ε level,
        Newton steps included); returns :math:`\sqrt{\max(S_\varepsilon,0)}`.
        ``epsilon`` (default ``1e-2``) is the regularisation in the units of
        the *squared* cost (rad\ :sup:`2` for geodesic; compare with
        :math:`\max C = \pi^2` or 4).  Bias: for any discrete measures
        :math:`|S_\varepsilon - W_2^2| \le \varepsilon \max(H(a), H(b))`
        (Shannon entropies in nats, at most :math:`\varepsilon \log \max(n,m)`;
        from :math:`0 \le \mathrm{KL}(P^\star|a\otimes b) \le \min(H(a),H(b))`),
        reported as ``log["bias_bound"]``; hence
        :math:`|\sqrt{S_\varepsilon} - W_2| \le (\varepsilon\max(H(a),H(b)))^{1/2}`.
        For measures with smooth densities the bias is :math:`O(\varepsilon^2)`
        [CRL20]_, versus :math:`O(\varepsilon\log(1/\varepsilon))` without
        debiasing.  Solver: epsilon-scaling (halving from :math:`\max C` to
        :math:`\varepsilon`, warm-started); :math:`\mathrm{OT}_\varepsilon(\mu,\nu)`
        by alternating log-domain Sinkhorn updates, the symmetric terms
        with the averaged update of [FSV19]_ (on which alternating Sinkhorn
        stalls); a level not converged after 100 updates is finished by
        Newton's method on the dual potentials (with a line search; where
        the smaller side has at most 2000 atoms, ``SINKHORN_NEWTON_MAX_ATOMS``,
        and :math:`\varepsilon \ge 10^{-8}\max C`),
        on which nearly degenerate problems converge in a few steps where
        Sinkhorn crawls; identical inputs give exactly 0.  Options: ``epsilon``,
        ``numItermax`` (10000 per level, Sinkhorn updates and Newton steps),
        ``stopThr`` (``1e-6``, L2 violation
        of the marginals).  ``bias_bound`` bounds the exact divergence's bias; the value returned also carries the
        solver's own error, estimated as ``log["solver_error"]`` (the three terms' L1 marginal violations, at most
        :math:`\sqrt{\max(n,m)}` times their L2 ``err``, times :math:`\max C`: an estimate, not a bound), which a
        ``RuntimeWarning`` names where it exceeds the bias bound (at ε = 1e-8 with the default ``stopThr`` the error had
        been 15 times the bound, unsaid): lower ``stopThr`` there,
        ``merge_duplicates``.  Memory and time are :math:`O(nm)` per
        Sinkhorn iteration and :math:`O((n+m)\min(n,m)^2)` per Newton step;
        iterations grow when :math:`\varepsilon` is small compared
        with the squared spacing of the points.  A ``RuntimeWarning`` is issued
        (and ``log["converged"]`` is False) when ``stopThr`` is not reached, measured on the final potentials' own
        plan, or when a term's value lies outside :math:`[0, \langle C, a\otimes b\rangle]`.  Limit: below about
        :math:`10^{-6}` of :math:`\max C` some nearly degenerate problems still end so (2 of 40 draws of 47 against
        53 weighted points on a great circle at ε = 1e-6, where Newton's line search stalls and Sinkhorn crawls;
        more ``numItermax`` does not help): take a larger ε or ``method="exact"`` there.
    ``"sliced"``
        The spherical sliced-Wasserstein distance of [BBC23]_ via
        ``ot.sliced_wasserstein_sphere``,

        .. math::

            \mathrm{SSW}_2(\mu,\nu)^2 = \int_{V_{d,2}}
            W_2^2\big(P^U_\#\mu, P^U_\#\nu\big)\,\mathrm d\sigma(U),\qquad
            P^U(x) = \frac{U^\top x}{\|U^\top x\|} \in S^1,

        with arc length on the circle, reported **in radians** (POT's value
        times :math:`2\pi`), estimated by Monte Carlo over ``n_projections``
        Haar frames :math:`U` (``seed``: int, Generator or None; default 0, so
        that the same call gives the same number).
        **This is not W2** and is not an estimator of it.  What holds:

        * for :math:`d = 2`, :math:`P^U` is an isometry and
          :math:`\mathrm{SSW}_2 = W_2` (geodesic);
        * for every :math:`d`, :math:`\mathrm{SSW}_2 \le \pi` and
          :math:`\mathrm{SSW}_2(\mu,\nu) \le (\pi\,W_1(\mu,\nu))^{1/2}
          \le (\pi\,W_2(\mu,\nu))^{1/2}` (geodesic :math:`W`).  Proof: along a
          unit-speed great circle the projected angle moves at mean speed
          exactly 1 over Haar :math:`U` (a Beta-integral identity, valid for
          all :math:`d \ge 3`), so :math:`\mathbb E_U\, d_{S^1}(P^Ux, P^Uy)
          \le d(x,y)` and :math:`\mathrm{SSW}_1 \le W_1`; on the circle
          :math:`W_2^2 \le \pi W_1`.  Hence :math:`W_2 \to 0` implies
          :math:`\mathrm{SSW}_2 \to 0`;
        * no bound :math:`\mathrm{SSW}_2 \le C\,W_2` holds with a constant
          :math:`C` for :math:`d \ge 3`: for two Dirac masses at distance
          :math:`\delta`, :math:`\mathrm{SSW}_2^2 \asymp \delta^2 \log(1/\delta)`.
          Nor do we claim a lower bound by :math:`W_2`.

        Only ``cost="geodesic"`` is accepted.  The Monte-Carlo standard error
        of :math:`\mathrm{SSW}_2^2` is ``log["stderr_squared"]`` (sample
        standard deviation of the per-projection values over
        :math:`\sqrt{L}`) and that of :math:`\mathrm{SSW}_2` is
        ``log["stderr"]`` (delta method).  Cost :math:`O(L\,(n+m)\log(n+m))`;
        POT takes ~50 ms per projection at :math:`n = 10^5`.  Options:
        ``n_projections`` (default 200, at least 2), ``seed``.

    Parameters
    ----------
    x : (n, d) array-like
        Support of :math:`\mu`, points with :math:`|\,\|x_i\| - 1| \le 10^{-6}`
        (renormalised before use); :math:`d \ge 2`.
    y : (m, d) array-like
        Support of :math:`\nu`, same dimension ``d``.
    a : (n,) array-like, optional
        Non-negative finite weights of ``x``; uniform ``1/n`` by default.
    b : (m,) array-like, optional
        Non-negative finite weights of ``y``; uniform ``1/m`` by default.
        The total masses must agree to relative ``1e-9``; both measures are
        then normalised to probability measures (so a common total mass
        :math:`M \ne 1` is divided out).
    cost : {"geodesic", "chordal"}
        Ground distance.
    method : {"exact", "sinkhorn", "sliced"}
        Estimator, see above.
    log : bool
        If True, also return a dict with ``"method"``, ``"cost"``, ``"time"``
        (seconds) and method-specific entries: exact: ``"plan"`` ((n, m)),
        ``"w2_squared"``, ``"solver"``, ``"converged"``, ``"result_code"``,
        ``"merged_sizes"``; sinkhorn: ``"epsilon"``, ``"divergence"``,
        ``"ot_eps"``, ``"bias_bound"``, ``"solver_error"``, ``"niter"``, ``"newton_steps"``,
        ``"err"``, ``"converged"``; sliced: ``"n_projections"``, ``"seed"``,
        ``"stderr"``, ``"stderr_squared"``, ``"projected_w2_squared"``
        ((L,), rad\ :sup:`2`), ``"projections"`` ((L, d, 2)).
    **options
        Method-specific options listed above; others raise ``TypeError``.

    Returns
    -------
    value : float
        :math:`W_2` (exact), :math:`\sqrt{\max(S_\varepsilon, 0)}` (sinkhorn) or
        :math:`\mathrm{SSW}_2` (sliced).
    log : dict, only if ``log=True``

    Raises
    ------
    ValueError
        Wrong shapes, different dimensions, non-finite coordinates, points off
        the sphere (the message names the row and how far), negative or
        non-finite weights, zero total mass, total masses that differ, unknown
        ``cost`` or ``method``, ``epsilon <= 0``, ``n_projections < 2``,
        ``cost="chordal"`` with ``method="sliced"``.

    References
    ----------
    .. [PC19] Peyré & Cuturi, Computational Optimal Transport, 2019.
    .. [FSV19] Feydy et al., Interpolating between OT and MMD using Sinkhorn
       divergences, AISTATS 2019.
    .. [CRL20] Chizat et al., Faster Wasserstein distance estimation with the
       Sinkhorn divergence, NeurIPS 2020.
    .. [BBC23] Bonet et al., Spherical Sliced-Wasserstein, ICLR 2023.

    Examples
    --------
    >>> import numpy as np
    >>> t = np.array([0.0, 0.3])
    >>> x = np.c_[np.cos(t[:1]), np.sin(t[:1]), 0 * t[:1]]
    >>> y = np.c_[np.cos(t[1:]), np.sin(t[1:]), 0 * t[1:]]
    >>> round(w2(x, y), 12)                        # geodesic: the angle
    0.3
    >>> print(f"{w2(x, y, cost='chordal'):.9f} {2 * np.sin(0.15):.9f}")  # 2 sin(theta/2)
    0.298876265 0.298876265
    >>> value, info = w2(x, y, method="sliced", log=True, seed=0)
    >>> bool(value <= np.sqrt(np.pi * 0.3))         # SSW_2 <= (pi W_2)^(1/2)
    True
    """
    t0 = time.perf_counter()
    _check_cost(cost)
    log = check_flag("log", log)  # (log="no", a string, had returned the pair)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    opts = _resolve_options(method, options)
    xs, ys, aw, bw = _measures(x, y, a, b)
    info: dict[str, Any] = {"method": method, "cost": cost}
    itm = opts.get("numItermax")
    if itm is not None and (isinstance(itm, bool) or not isinstance(itm, (int, np.integer))
                            or itm < 1):
        raise ValueError(f"numItermax must be a positive integer; got {itm!r}")
    if method == "sinkhorn" and not (np.isfinite(opts["stopThr"]) and opts["stopThr"] > 0):
        raise ValueError(f"stopThr must be a positive finite number; got {opts['stopThr']!r}")
    if method == "exact":
        value2, plan, sub = _exact(xs, ys, aw, bw, cost, None if itm is None else int(itm),
                                   bool(opts["merge_duplicates"]), want_plan=log)
        value = float(np.sqrt(max(value2, 0.0)))
        info.update(sub)
        info.update({"w2_squared": value2, "plan": plan})
    elif method == "sinkhorn":
        S, sub = _sinkhorn(xs, ys, aw, bw, cost, float(opts["epsilon"]),
                           int(opts["numItermax"]), float(opts["stopThr"]),
                           bool(opts["merge_duplicates"]))
        value = float(np.sqrt(max(S, 0.0)))
        info.update(sub)
    else:
        if cost != "geodesic":
            raise ValueError(
                "method='sliced' computes the spherical sliced-Wasserstein distance, "
                f"defined with arc length on great circles; cost={cost!r} is not "
                "supported (use cost='geodesic')")
        value, sub = _sliced(xs, ys, aw, bw, opts["n_projections"], opts["seed"])
        info.update(sub)
    info["time"] = time.perf_counter() - t0
    return (value, TransportLog(info)) if log else value


class TransportLog(dict):
    """The ``log`` of :func:`w2`: a plain dict whose printed form shows arrays by their shape, not their entries."""

    def __repr__(self) -> str:
        def short(value: Any) -> str:
            if isinstance(value, np.ndarray):
                return f"array{value.shape}"
            if isinstance(value, dict):
                return "{" + ", ".join(f"{k!r}: {short(v)}" for k, v in value.items()) + "}"
            if isinstance(value, float):
                return f"{value:.6g}"
            return repr(value)

        return "TransportLog(" + ", ".join(f"{k}={short(v)}" for k, v in self.items()) + ")"

    __str__ = __repr__
