r"""Spherical-harmonic attention on :math:`S^2`: the velocity laws in :math:`O(N + L^2\log L)` per head.

Every numerator and denominator of the exponential velocity laws (softmax — the law of
Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931 —, unnormalized, pooled; see
:mod:`meanfield.kernels.attention`) is, for one head, a sum

.. math::

    F(u) = \sum_j a_j\, f(y_j)\, e^{\beta\, u\cdot y_j},\qquad u = B_h^\top x_i,

against the point masses :math:`a_j\delta_{y_j}` on the unit sphere.  With
:math:`r=\beta\|u\|` and :math:`\hat u = u/\|u\|`, the plane-wave (Funk–Hecke)
expansion and the addition theorem give

.. math::

    e^{r\,\hat u\cdot y} = \sum_{l\ge0}(2l+1)\,i_l(r)\,P_l(\hat u\cdot y)
      = \sum_{l\ge0} 4\pi\, i_l(r) \sum_{m=-l}^{l} Y_{lm}(\hat u)\,\overline{Y_{lm}(y)},
    \qquad
    e^{-r}F = \sum_{l\ge0} 4\pi\,\phi_l(r)\,G_l(\hat u),\quad
    G_l(\hat u)=\sum_m Y_{lm}(\hat u)\,g_{lm},\quad
    g_{lm} = \sum_j a_j\,\overline{Y_{lm}(y_j)},

with the exponentially scaled modified spherical Bessel functions
:math:`\phi_l(r) = e^{-r} i_l(r)\in[0,1]` (:func:`scaled_spherical_in`; the common
factor :math:`e^{r}` is kept apart — it cancels in the softmax law, the pooled law shifts
every head by the row's largest :math:`r^h_i+\ln\widetilde D^h_i` — so :math:`\beta = 1024`
cannot overflow).  One adjoint transform (``ducc0.sht.experimental.adjoint_synthesis_general``,
shared by all heads) gives :math:`g_{lm}` for :math:`f = 1`; the value-weighted numerator
needs no further transform since :math:`\sum_j a_j y_j e^{\beta u\cdot y_j}=\beta^{-1}\nabla_u F`:

.. math::

    e^{-r}\!\sum_j a_j y_j e^{r\hat u\cdot y_j}
      = \hat u\sum_l 4\pi\,\phi'_l(r)\,G_l(\hat u) + \frac1r\sum_l 4\pi\,\phi_l(r)\,\nabla_{S^2}G_l(\hat u),
    \qquad \phi'_l = e^{-r}i_l' = \tfrac{l\,\phi_{l-1}+(l+1)\,\phi_{l+1}}{2l+1},

(a spin-0 and a gradient synthesis, ``mode="DERIV1"``), and :math:`V_h` is applied to the
result.  ducc0's conventions, checked numerically: healpy ``alm`` layout (:math:`m\ge0`),
real maps (``synthesis`` returns :math:`\sum_l a_{l0}Y_{l0}+2\,\mathrm{Re}\sum_{m>0}a_{lm}Y_{lm}`),
``loc = (colatitude, longitude)``, orthonormal :math:`Y_{lm}`, the adjoint returning
:math:`\sum_j w_j\overline{Y_{lm}(y_j)}`, and ``DERIV1`` returning
:math:`(\partial_\theta, \sin^{-1}\theta\,\partial_\varphi)`; so ``synthesis_general`` of the
adjoint evaluates :math:`\sum_j a_j\sum_l\tfrac{2l+1}{4\pi}P_l(\hat u\cdot y_j)` as written.

**Truncation.**  :math:`L(r)` (:func:`truncation_degree`) is the least degree with
:math:`\sum_{l>L}(2l+1)\max(\phi_l,|\phi'_l|,l\phi_l/r)\le\varepsilon_T`: relative to the
largest value of the kernel, :math:`e^{r(t-1)}\le1` (the largest term of any row), since
:math:`|P_l|\le1` and, by Bernstein's inequality, :math:`|\partial_\theta P_l|\le l`.  It
grows like :math:`\sqrt{2r\ln(1/\varepsilon_T)}` beyond small :math:`r`:
:math:`L = 74, 284` at :math:`r = 64, 1024` for :math:`\varepsilon_T=10^{-17}`.

**A radius that depends on the row.**  :math:`r_i=\beta\|B_h^\top x_i\|` is the same for
every row only when :math:`B_h` is a multiple of an orthogonal matrix (then one node is
used and the expansion is exact up to :math:`\varepsilon_T`).  Otherwise the three
coefficient families :math:`\phi_l,\phi'_l,\phi_l/r` are interpolated in
:math:`\tau=\ln(1+r)` at :math:`K` Chebyshev nodes :math:`r_k` of :math:`[r_a, r_b]`
(barycentric weights :math:`\ell_k`):

.. math::

    e^{-r_i}F(u_i) \approx \sum_{k=1}^{K} \ell_k(\tau_i)\, S_k(\hat u_i),\qquad
    S_k = \sum_{l\le L(r_b)} 4\pi\,\phi_l(r_k)\,G_l .

:math:`K` is the least number of nodes (doubling, then bisection; at most :data:`MAX_NODES`)
with interpolation error

.. math::

    \varepsilon_C=\max_{r\in[r_a,r_b]}\ \sum_{l\le L}(2l+1)\,\Bigl|\phi_l(r)-\sum_k\ell_k(\tau)\,\phi_l(r_k)\Bigr|
    \ \le\ \varepsilon_T

(the same for :math:`\phi'_l` and for :math:`l\,\phi_l/r`), evaluated in extended precision
at 33 Chebyshev points of the interval.  By :math:`|P_l|\le1` and Bernstein again this
bounds the error of the interpolated kernel for every pair of points, hence for every row

.. math::

    \bigl|\widetilde D_i - e^{-r_i}D_i\bigr|,\ \bigl|\widetilde N_i - e^{-r_i}N_i\bigr|_\infty
    \le M\,(\varepsilon_T+\varepsilon_C) + (\text{transform errors}),\qquad M=\sum_j a_j .

For the benchmark head (singular values 1.19, 1.03, 0.93) :math:`K = 13` at
:math:`\varepsilon_T=10^{-17}`.  The slices are evaluated in one of two ways:

* ``direct``: every slice is synthesised at the rows (``synthesis_general``), the rows in
  bins with :math:`(1+r_b)/(1+r_a)\le` :data:`BIN_RATIO` from :data:`BIN_SPLIT_ROWS` rows
  on (one bin below).  Works for any :math:`B` (singular ones too); costs :math:`3.3K`
  syntheses of the rows.
* ``resampled`` (invertible :math:`B`, condition number ≤ :data:`RESAMPLE_MAX_COND`): on
  the sphere of directions the row radius is the smooth function
  :math:`r(\hat u)=\beta/\|B^{-\top}\hat u\|`, so
  :math:`\widetilde D(\hat u)=e^{-r(\hat u)}F(r(\hat u)\hat u/\beta)` (and the numerator)
  are smooth functions on :math:`S^2`.  They are computed exactly on a Gauss–Legendre
  grid of degree :math:`L'` (the :math:`K` slices by ``synthesis_2d``, no NUFFT),
  analysed exactly (``analysis_2d``) and evaluated at the rows by *one*
  ``synthesis_general`` per field.  :math:`L'` starts at
  :math:`L(1+0.2\ln\kappa)+8` and grows by 30 % while the tail estimate :math:`E_R` — four
  times the rms of a field carrying, in every coefficient, the mean square of the last
  :math:`\max(4, L'/10)` degrees — exceeds :data:`TAIL_RELATIVE` times the map's rms and
  still falls; the way is abandoned for ``direct`` when more than
  :data:`RESAMPLE_MAX_REJECT` of the grid would fail the row test below.  The cheaper
  way is taken by measured cost models (:func:`estimate_sphere_seconds`).

**Error bound and exact fallback.**  Every (row, head) gets the bound

.. math::

    E_i = M(\varepsilon_T+\varepsilon_C) + E_R + \Lambda_K\max(c_F S_{\max}, c_M M) + c_F D_{\max}
          + c_N\,\varepsilon_N\,|\widetilde D_i|,

:math:`\Lambda_K` the Lebesgue constant of the nodes, :math:`S_{\max}, D_{\max}` the
largest values of the synthesised slices and maps, :math:`c_F` = :data:`FLOOR_RELATIVE`
the measured absolute floor of the transforms (rounding), relative to those values, and
:math:`c_M` = :data:`MASS_FLOOR_RELATIVE` the same floor relative to the total mass (rows that
see little of the mass have small slices, but the coefficients they are synthesised from are of
the size of :math:`M`), :math:`\varepsilon_N` the
accuracy asked of ducc0's NUFFT and :math:`c_N` = :data:`NUFFT_RELATIVE` (its error was
measured to be relative to the values near the point, at most 1.5 :math:`\varepsilon_N`).
A row is kept only if :math:`E_i\le\mathrm{tol}\cdot\widetilde D_i` (pooled law:
:math:`\sum_h|w_h|e^{r^h_i-R_i}E^h_i \le \mathrm{tol}\cdot|\sum_h w_he^{r^h_i-R_i}\widetilde D^h_i|`);
all other rows — typically those of a non-symmetric :math:`B` whose direction
:math:`\hat u_i` sees no mass nearby, or the empty cells of a grid late in a run — are
recomputed *exactly* by the local method (:func:`meanfield.kernels.local.local_head_sums`).
Every row therefore has relative error :math:`\lesssim` ``tolerance`` with respect to its
scale :math:`\|V_h\|` (softmax, pooled) or :math:`\|V_h\|e^{r_i}\widetilde D_i`
(unnormalized).  The accuracies follow the tolerance:
:math:`\varepsilon_T = 10^{-5}\,\mathrm{tol}` (within :math:`[10^{-18},10^{-8}]`) and
:math:`\varepsilon_N=\mathrm{tol}/8` (within :math:`[2.5\cdot10^{-13},10^{-4}]`, ducc0's
limit being :math:`2\cdot10^{-13}`); the default ``tol = 1e-12`` is thus near what double
precision allows.  The expansion reads the tokens' directions only: tokens up to :math:`\delta\le10^{-10}`
off the unit sphere are accepted and divided by their norms
(:func:`~meanfield.kernels.local.check_sphere_tokens`), as for the local kernel, so both give the velocity of the
unit vectors (the vectors as given would differ from it by about :math:`\delta\beta\|B\|`).

**Causal mask** (``mask="causal"``; Karagodin, Polyanskiy and Rigollet, *Clustering in
Causal Attention Masking*, arXiv 2411.04990): row :math:`i` sums over :math:`j\le i` only.
The source coefficients are linear in the sources, so a prefix sum is a sum of
coefficients.  The rows are cut into consecutive blocks :math:`I_k=[ks,(k+1)s)` of
:math:`s` tokens, and

.. math::

    F_i = \underbrace{\sum_{j<ks} a_je^{\beta u_i\cdot y_j}}_{\text{harmonic},\ g^{(k)}=\sum_{k'<k}g(I_{k'})}
        + \underbrace{\sum_{ks\le j\le i} a_je^{\beta u_i\cdot y_j}}_{\text{dense, exact}},
    \qquad i\in I_k :

one adjoint transform per block (its coefficients :math:`g(I_k)`, accumulated),
one evaluation of :func:`harmonic_head_sums` per block and head with the accumulated
:math:`g^{(k)}` and prefix mass :math:`M_k=\sum_{j<ks}a_j` in the error bound, and the
triangle inside the block by the causal local method (numba, exact to
:data:`NEAR_SHARE` · tol).  The row test compares the far bound with
:math:`(1-` :data:`NEAR_SHARE` :math:`)\,\mathrm{tol}` times the whole row sum (far + near); the rows that
fail it are recomputed exactly by the causal local method over their whole prefix.  The block
size minimises the measured cost models (:func:`causal_block_rows`).

Memory: :math:`O(N + L^2 + L'^2)` per head, no :math:`n\times n` arrays.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import ducc0
import numpy as np
from ducc0.sht.experimental import (
    adjoint_synthesis_general,
    analysis_2d,
    synthesis_2d,
    synthesis_2d_deriv1,
    synthesis_general,
)

from numba import prange

from meanfield.heads.head import HeadStack
from meanfield.kernels.inputs import is_causal, masses_near_one, token_masses
from meanfield.kernels.jit import kernel_threads, num_threads, pjit
from meanfield.kernels.local import (
    WHOLE_CHORD,
    HeadSums,
    SphereSources,
    check_sphere_tokens,
    combine_head_sums,
    local_head_sums,
    pooled_scales,
    store_row_logs,
    velocity_local,
)

__all__ = [
    "certified_head_sums",
    "sphere_head_row_logs",
    "velocity_harmonic",
    "choose_sphere_method",
    "estimate_sphere_seconds",
    "scaled_spherical_in",
    "truncation_degree",
    "harmonic_head_sums",
    "causal_block_rows",
    "estimate_causal_sphere_seconds",
    "CAUSAL_MIN_BLOCK",
    "NUFFT_EPS_MIN",
    "FLOOR_RELATIVE",
    "MASS_FLOOR_RELATIVE",
    "TAIL_RELATIVE",
    "MAX_NODES",
    "BIN_RATIO",
    "RESAMPLE_MAX_COND",
    "RESAMPLE_MAX_GROWTH",
    "DENSE_PAIR_SECONDS",
    "LOCAL_CALL_SECONDS",
    "LOCAL_ROW_SECONDS",
    "LOCAL_PAIR_SECONDS",
    "RING_ROW_SECONDS",
    "RING_PAIR_SECONDS",
    "RING_DEPTH",
    "HARMONIC_CALL_SECONDS",
    "HARMONIC_ROW_SECONDS",
    "SYNTHESIS_PER_POINT",
    "SYNTHESIS_PER_COEFFICIENT",
    "GRID_PER_OPERATION",
    "HARMONIC_PARALLEL_POINTS",
    "HARMONIC_PARALLEL_DEGREE",
    "MAX_DEGREE",
    "HarmonicDegreeError",
    "check_harmonic_degree",
]

#: at most this many tokens, :func:`velocity_harmonic` takes their direct sums (:func:`~meanfield.kernels.local.velocity_local`):
#: exact, and cheaper than a transform (``auto`` keeps the dense kernels up to 1024 tokens); on two tokens the
#: transform had missed ``tolerance = 1e-12`` by a factor 5
HARMONIC_EXACT_MAX_N = 64
#: smallest accuracy ducc0's NUFFT accepts in double precision (its documented bound is 2e-13)
NUFFT_EPS_MIN = 2.5e-13
#: absolute error floor of a synthesised map relative to its largest value (measured ≤ 3e-16; ×3)
FLOOR_RELATIVE = 1e-15
#: absolute error floor of a synthesised slice relative to the total mass of its sources (measured 7e-17; ×3):
#: rows far from every mass, with slices far below it, had kept errors up to 6× the tolerance at 1e-12
MASS_FLOOR_RELATIVE = 2e-16
#: a resampled map counts as resolved when its tail (:func:`_tail`) is below this times its rms
#: (the rounding plateau of the grid transforms measured 3e-14 … 1e-13 of the rms)
TAIL_RELATIVE = 4e-13
#: the resampled maps are given up if more than this fraction of the grid would fail the row test
RESAMPLE_MAX_REJECT = 0.1
#: the NUFFT error relative to the values near the point, in units of its accuracy ε_N (measured ≤ 1.5)
NUFFT_RELATIVE = 2.0
#: first grid degree of the resampled evaluation: L (1 + RESAMPLE_GROWTH ln κ) + RESAMPLE_MARGIN
RESAMPLE_GROWTH = 0.2
RESAMPLE_MARGIN = 8
#: measured ducc0 costs on this machine (2 cores, one of them busy with another process):
#: ``synthesis_general`` ≈ 0.2 ms + 1.15e-7 s per point + 1.3e-7 s per coefficient
#: (16384 points: 2.3 ms at L = 80, 16 ms at L = 309; 262144 points: 34 ms, 62 ms)
SYNTHESIS_PER_CALL = 2e-4
SYNTHESIS_PER_POINT = 1.15e-7
SYNTHESIS_PER_COEFFICIENT = 1.3e-7
#: ducc0 hands a transform to its thread pool at about 0.05–0.07 ms a call here: two threads pay for a transform of
#: scattered points from this many points (plus L³/256; on 2 quiet cores, L = 128: 16 384 points 1.3 ms on one thread
#: against 1.6 on two, 65 536 points 3.3 against 2.6) ...
HARMONIC_PARALLEL_POINTS = 32768
#: ... and for a transform on a Gauss–Legendre grid from this degree (``synthesis_2d``: L = 64 0.07 ms on one thread
#: against 0.11 on two, L = 128 even, L = 256 3.2 against 2.1); beside a busy process two threads are even at both
HARMONIC_PARALLEL_DEGREE = 160
#: ``synthesis_2d`` of degree L on a GL grid of degree G ≈ 2.5e-9 s · G L^1.6 (0.33 ms at L = 80,
#: 6.9 ms at L = 309, 31 ms at L = 600; gradient 2.4×, analysis ≈ synthesis), plus the
#: interpolation weights, ≈ 30 ns per grid point and node
GRID_PER_OPERATION = 2.5e-9
GRID_WEIGHT_PER_POINT = 3e-8
#: most Chebyshev nodes in r for one bin (direct) or one head (resampled)
MAX_NODES = 64
#: largest truncation degree L of the source coefficients (:func:`truncation_degree` of β‖B_h‖₂): the kernel's time
#: and memory grow like L², and L like √(β‖B‖₂) (L = 885, 2798, 3957 at β‖B‖₂ = 1e4, 1e5, 2e5 for tolerance 1e-12;
#: 100 tokens took 0.85 s and 0.29 GB at β = 1e4, 7.5–22 s and 1.2 GB at 1e5, 183 s and 10.7 GB at 1e6, and β = 1e308 had
#: failed in ducc0, "Maximum allowed dimension exceeded").  Past it :func:`velocity_harmonic` refuses
#: (:class:`HarmonicDegreeError`), ``"auto"`` prices the harmonic kernel as never finishing, and
#: :func:`certified_head_sums` takes every row's exact local sums; the local kernel, whose caps shrink as β grows,
#: costs less there
MAX_DEGREE = 4096
#: widest bin of the direct evaluation, as a ratio of (1 + r), from this many rows on (fewer: one bin)
BIN_RATIO = 2.0
BIN_SPLIT_ROWS = 20000
#: the resampled evaluation is tried for condition numbers up to this
RESAMPLE_MAX_COND = 50.0
#: ... and for grid degrees up to this multiple of the truncation degree
RESAMPLE_MAX_GROWTH = 4.0
#: smallest interpolation error the extended-precision check certifies (x87 long double: 1e-19 rounding)
INTERPOLATION_FLOOR = 1e-18
#: extended precision for the interpolation-error check
_LONG = np.longdouble
_FOUR_PI = 4.0 * np.pi


# ----------------------------------------------------------------------------- scaled Bessel functions


def scaled_spherical_in(lmax: int, r: np.ndarray | float, *, dtype: type = np.float64) -> np.ndarray:
    r"""Exponentially scaled modified spherical Bessel functions :math:`\phi_l(r)=e^{-r}i_l(r)`.

    Backward recurrence on the ratios :math:`\rho_l=i_l/i_{l-1}`,

    .. math::

        \rho_l = \frac{r}{2l+1 + r\,\rho_{l+1}},\qquad
        \phi_0(r) = \frac{1-e^{-2r}}{2r},\qquad \phi_l = \phi_{l-1}\,\rho_l,

    started at :math:`l_0` far enough above ``lmax`` that the start value does not matter:
    an error in :math:`\rho_{l+1}` reaches :math:`\rho_l` times :math:`\rho_l^2`, and
    :math:`\ln\rho_l\approx-l/r` for :math:`l\ll r`, so the recurrence damps the start's error by about
    :math:`e^{-(l_0^2-l_{\max}^2)/r}` down to ``lmax``.  :math:`l_0` is the larger of ``lmax + 41 + 3√r``
    and :math:`\sqrt{l_{\max}^2+40r}+41` (a damping of :math:`e^{-40}` whatever ``lmax``; the first alone
    had left ``lmax = 2`` at :math:`r = 1024` with errors of 9e-9, and 2e-6 at :math:`r = 4000`).  Stable
    for every :math:`r\ge0` (relative error ≈ 1e-15 up to :math:`r = 4000` for every ``lmax``, against
    mpmath; scipy's ``ive`` is ≈ 1e-13) and free of overflow (:math:`0<\phi_l\le1`;
    :math:`\phi_l(0)=\delta_{l0}`).

    Parameters
    ----------
    lmax : int
        Largest degree.
    r : float or array
        Arguments :math:`r\ge0`.
    dtype : type
        ``np.float64`` or ``np.longdouble``.

    Returns
    -------
    array of shape ``(lmax + 1,) + r.shape``
    """
    r = np.asarray(r, dtype=dtype)
    shape = r.shape
    rr = np.maximum(r.reshape(-1), np.asarray(1e-300, dtype=dtype))
    r_top = float(rr.max()) if rr.size else 0.0
    top = max(int(lmax) + 41 + int(3.0 * np.sqrt(r_top)), int(np.sqrt(float(lmax) ** 2 + 40.0 * r_top)) + 41)
    ratio = np.zeros((lmax + 1, rr.size), dtype=dtype)
    rho = np.zeros_like(rr)
    for l in range(top, 0, -1):
        rho = rr / ((2 * l + 1) + rr * rho)
        if l <= lmax:
            ratio[l] = rho
    out = np.empty((lmax + 1, rr.size), dtype=dtype)
    out[0] = -np.expm1(-2.0 * rr) / (2.0 * rr)
    for l in range(1, lmax + 1):
        out[l] = out[l - 1] * ratio[l]
    zero = r.reshape(-1) == 0
    if zero.any():
        out[:, zero] = 0.0
        out[0, zero] = 1.0
    return out.reshape((lmax + 1,) + shape)


def _tables(lmax: int, r: np.ndarray, *, dtype: type = np.float64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""The three coefficient families at radii ``r``: :math:`\phi_l`, :math:`\phi'_l`, :math:`\phi_l/r` (l ≤ lmax)."""
    r = np.asarray(r, dtype=dtype)
    phi = scaled_spherical_in(lmax + 1, r, dtype=dtype)
    ell = np.arange(lmax + 1, dtype=dtype).reshape((-1,) + (1,) * r.ndim)
    deriv = np.empty((lmax + 1,) + r.shape, dtype=dtype)
    deriv[0] = phi[1]
    if lmax >= 1:
        deriv[1:] = (ell[1:] * phi[:-2] + (ell[1:] + 1) * phi[2:]) / (2 * ell[1:] + 1)
    rr = np.maximum(r, np.asarray(1e-300, dtype=dtype))
    over = phi[: lmax + 1] / rr
    over[0] = 0.0  # the gradient of a constant
    if lmax >= 1:
        over[1] = np.where(r == 0, 1.0 / 3.0, over[1])  # i_1(r)/r → 1/3
    return phi[: lmax + 1], deriv, over


@lru_cache(maxsize=1024)
def _truncation(r: float, eps: float) -> int:
    probe = int(10.0 * np.sqrt(r + 1.0) + 40)
    while True:
        phi, deriv, over = _tables(probe, np.array([r]))
        ell = np.arange(probe + 1)
        weight = (2 * ell + 1) * np.maximum(np.maximum(phi[:, 0], np.abs(deriv[:, 0])), ell * over[:, 0])
        tail = np.cumsum(weight[::-1])[::-1]  # tail[l] = sum over l' >= l
        above = np.flatnonzero(tail[1:] <= eps)  # tail[L + 1] <= eps
        if above.size:
            return max(1, int(above[0]))
        probe *= 2


def truncation_degree(r: float, eps: float = 1e-17) -> int:
    r"""Least :math:`L\ge1` with :math:`\sum_{l>L}(2l+1)\max(\phi_l,|\phi'_l|,l\,\phi_l/r)\le\varepsilon`.

    The bound covers the denominator (:math:`|P_l|\le1`), the radial part
    (:math:`\phi'_l`) and the tangential part of the numerator (Bernstein:
    :math:`|\partial_\theta P_l(\cos\theta)|\le l`).  ``r`` is rounded up to 4 significant
    digits (so that the result can be cached).
    """
    r = float(max(r, 0.0))
    if r > 0:
        unit = 10.0 ** (np.floor(np.log10(r)) - 3)
        r = float(np.ceil(r / unit * (1 - 1e-15)) * unit)
    return _truncation(r, float(eps))


# ----------------------------------------------------------------------------- Chebyshev nodes in r


@dataclass(frozen=True)
class _Nodes:
    """Chebyshev nodes in τ = ln(1 + r) on [r_a, r_b] and the interpolation error they certify."""

    r: np.ndarray
    tau: np.ndarray
    weights: np.ndarray
    error: float

    def basis(self, r: np.ndarray) -> _Basis:
        """Barycentric interpolation weights of the nodes at radii ``r`` (one node at a time)."""
        return _Basis(self, np.log1p(r))


class _Basis:
    """Barycentric weights :math:`\\ell_k(\\tau)` of a set of nodes at many points, O(points) memory."""

    def __init__(self, nodes: _Nodes, tau: np.ndarray) -> None:
        self.nodes = nodes
        self.tau = tau
        self.total = np.zeros_like(tau)
        self.lebesgue = 1.0
        if nodes.r.size > 1:
            for k in range(nodes.r.size):
                self.total += self._raw(k)
            absum = np.zeros_like(tau)
            for k in range(nodes.r.size):
                absum += np.abs(self._raw(k))
            self.lebesgue = float(np.max(absum / np.abs(self.total))) if tau.size else 1.0

    def _raw(self, k: int) -> np.ndarray:
        d = self.tau - self.nodes.tau[k]
        d[d == 0.0] = 1e-300
        return self.nodes.weights[k] / d

    def __getitem__(self, k: int) -> np.ndarray | float:
        if self.nodes.r.size == 1:
            return 1.0
        return self._raw(k) / self.total


def _first_kind(k: int) -> tuple[np.ndarray, np.ndarray]:
    j = np.arange(k)
    return np.cos(np.pi * (j + 0.5) / k), (-1.0) ** j * np.sin(np.pi * (j + 0.5) / k)


def _interpolation_error(k: int, mid: float, half: float, lmax: int, test_t: np.ndarray, exact: tuple) -> tuple[float, np.ndarray, np.ndarray]:
    """Weighted interpolation error of the three coefficient families with ``k`` nodes (extended precision)."""
    x, w = _first_kind(k)
    tau = mid + half * x.astype(_LONG)
    rk = np.expm1(tau)
    at = _tables(lmax, rk, dtype=_LONG)
    d = test_t[None, :] - tau[:, None]
    d[d == 0] = 1e-300
    c = w.astype(_LONG)[:, None] / d
    c /= c.sum(axis=0, keepdims=True)
    ell = np.arange(lmax + 1, dtype=_LONG)[:, None]
    scale = (2 * ell + 1, 2 * ell + 1, (2 * ell + 1) * np.maximum(ell, 1))
    error = 0.0
    for fam in range(3):
        error = max(error, float(np.max(np.sum(scale[fam] * np.abs(at[fam] @ c - exact[fam]), axis=0))))
    return error, np.asarray(rk, dtype=np.float64), w


@lru_cache(maxsize=256)
def _nodes(r_a: float, r_b: float, lmax: int, target: float) -> _Nodes:
    """The fewest nodes (up to :data:`MAX_NODES`) whose interpolation error is ≤ ``target``.

    The error is evaluated in extended precision at 33 Chebyshev points of the interval
    (doubling search, then bisection on the number of nodes).  Targets below
    :data:`INTERPOLATION_FLOOR`, which extended precision cannot certify, are raised to it.
    """
    target = max(float(target), INTERPOLATION_FLOOR)
    ta, tb = np.log1p(r_a), np.log1p(r_b)
    mid, half = 0.5 * (ta + tb), 0.5 * (tb - ta)
    if half <= 1e-15 * max(tb, 1.0):
        rr = np.array([r_b])
        return _Nodes(rr, np.log1p(rr), np.ones(1), 0.0)
    test_t = mid + half * np.cos(np.linspace(0.0, np.pi, 33, dtype=_LONG))
    exact = _tables(lmax, np.expm1(test_t), dtype=_LONG)
    tried: dict[int, tuple] = {}

    def attempt(k: int) -> tuple:
        if k not in tried:
            tried[k] = _interpolation_error(k, mid, half, lmax, test_t, exact)
        return tried[k]

    lo, hi = 0, 4
    while attempt(hi)[0] > target and hi < MAX_NODES:
        lo, hi = hi, min(2 * hi, MAX_NODES)
    if attempt(hi)[0] <= target:
        while hi - lo > 1:
            k = (lo + hi) // 2
            if attempt(k)[0] <= target:
                hi = k
            else:
                lo = k
    error, rk, w = attempt(hi)
    return _Nodes(rk, np.log1p(rk), np.asarray(w, dtype=np.float64), float(error))


# ----------------------------------------------------------------------------- transforms


@lru_cache(maxsize=32)
def _layout(lsrc: int, lmax: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indices of the degree-``lmax`` healpy layout inside a degree-``lsrc`` one, their ``l`` and ``m``."""
    m = np.repeat(np.arange(lmax + 1), np.arange(lmax + 1, 0, -1))
    first = np.repeat(np.cumsum(np.r_[0, np.arange(lmax + 1, 1, -1)]), np.arange(lmax + 1, 0, -1))
    ell = np.arange(m.size) - first + m
    idx = m * (2 * lsrc + 1 - m) // 2 + ell
    return idx, ell, m


@pjit
def _geometry_kernel(x, B, beta, uhat, r, loc):  # pragma: no cover - compiled
    """Per row: q = β Bᵀx_i, r_i = |q|, û_i = q / r_i (e_z if r_i = 0), (colatitude, longitude) of û_i."""
    n = x.shape[0]
    two_pi = 2.0 * np.pi
    for i in prange(n):
        q0 = beta * (x[i, 0] * B[0, 0] + x[i, 1] * B[1, 0] + x[i, 2] * B[2, 0])
        q1 = beta * (x[i, 0] * B[0, 1] + x[i, 1] * B[1, 1] + x[i, 2] * B[2, 1])
        q2 = beta * (x[i, 0] * B[0, 2] + x[i, 1] * B[1, 2] + x[i, 2] * B[2, 2])
        rr = np.sqrt(q0 * q0 + q1 * q1 + q2 * q2)
        r[i] = rr
        if rr > 0.0:
            q0 /= rr
            q1 /= rr
            q2 /= rr
        else:
            q0 = 0.0
            q1 = 0.0
            q2 = 1.0
        uhat[i, 0] = q0
        uhat[i, 1] = q1
        uhat[i, 2] = q2
        loc[i, 0] = np.arctan2(np.sqrt(q0 * q0 + q1 * q1), q2)
        phi = np.arctan2(q1, q0)
        loc[i, 1] = phi + two_pi if phi < 0.0 else phi


def _geometry(x: np.ndarray, B: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(û, r, loc) of the rows for score matrix ``B`` (r = β‖Bᵀx‖)."""
    n = x.shape[0]
    uhat = np.empty((n, 3))
    r = np.empty(n)
    loc = np.empty((n, 2))
    with kernel_threads(64.0 * n):
        _geometry_kernel(np.ascontiguousarray(x, dtype=float), np.ascontiguousarray(B, dtype=float), float(beta), uhat, r, loc)
    return uhat, r, loc


@pjit
def _assemble_kernel(u, radial, g_theta, g_phi, out):  # pragma: no cover - compiled
    """out_i = radial_i û_i + g_θ e_θ + g_φ e_φ (e_φ = e_y at the poles, where φ = 0)."""
    for i in prange(u.shape[0]):
        x0 = u[i, 0]
        x1 = u[i, 1]
        x2 = u[i, 2]
        rho = np.sqrt(x0 * x0 + x1 * x1)
        if rho > 0.0:
            c = x0 / rho
            s = x1 / rho
        else:
            c = 1.0
            s = 0.0
        out[i, 0] = radial[i] * x0 + g_theta[i] * x2 * c - g_phi[i] * s
        out[i, 1] = radial[i] * x1 + g_theta[i] * x2 * s + g_phi[i] * c
        out[i, 2] = radial[i] * x2 - g_theta[i] * rho


def _threads(points: int, lmax: int) -> int:
    """Threads of a ducc0 transform between degree ``lmax`` and ``points`` scattered points: one below
    :data:`HARMONIC_PARALLEL_POINTS` (points + lmax³/256)."""
    return num_threads() if points + float(lmax) ** 3 / 256.0 >= HARMONIC_PARALLEL_POINTS else 1


def _grid_threads(lmax: int) -> int:
    """Threads of a ducc0 transform on the Gauss–Legendre grid of degree ``lmax``: one below :data:`HARMONIC_PARALLEL_DEGREE`."""
    return num_threads() if lmax >= HARMONIC_PARALLEL_DEGREE else 1


def _source_coefficients(src: SphereSources, lmax: int, eps: float) -> np.ndarray:
    r""":math:`g_{lm}=\sum_j a_j\overline{Y_{lm}(y_j)}` up to ``lmax`` (healpy layout, complex)."""
    if src.m == 0:
        return np.zeros((lmax + 1) * (lmax + 2) // 2, dtype=complex)
    _, _, loc = _geometry(src.y, np.eye(3), 1.0)
    return adjoint_synthesis_general(
        map=src.w[None, :], spin=0, lmax=lmax, loc=loc, epsilon=eps, nthreads=_threads(src.m, lmax)
    )[0]


def _slice_alm(g: np.ndarray, lsrc: int, lmax: int, tables: tuple[np.ndarray, np.ndarray, np.ndarray], k: int) -> list[np.ndarray]:
    """The three coefficient sets (D, radial, tangential) of node ``k``, degree ``lmax``."""
    idx, ell, _ = _layout(lsrc, lmax)
    gl = g[idx]
    return [(gl * (_FOUR_PI * t[: lmax + 1, k])[ell])[None, :] for t in tables]


# ----------------------------------------------------------------------------- per-head evaluation


@dataclass
class _Estimate:
    """Scaled sums of one head at some rows, with what the error bound needs."""

    den: np.ndarray  # (k,)
    num: np.ndarray  # (k, 3)
    error: np.ndarray  # (k,) absolute error bound of den (and of each num component)
    shift: np.ndarray | None = None  # the radius the sums are scaled by, when not the rows' own r_i


def _assemble(uhat: np.ndarray, radial: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """Cartesian numerator from its radial part and its gradient (θ, φ components)."""
    out = np.empty((uhat.shape[0], 3))
    with kernel_threads(16.0 * uhat.shape[0]):
        _assemble_kernel(np.ascontiguousarray(uhat), np.ascontiguousarray(radial), np.ascontiguousarray(grad[0]), np.ascontiguousarray(grad[1]), out)
    return out


@dataclass(frozen=True)
class _Bin:
    rows: np.ndarray
    lmax: int
    nodes: _Nodes


def _direct_bins(r: np.ndarray, lsrc: int, eps_t: float) -> list[_Bin]:
    r"""The rows split into bins, each with its degree and nodes.

    Few rows (below :data:`BIN_SPLIT_ROWS`): one bin, since every synthesis costs
    :math:`O(L^2)` whatever the number of points; many rows: bins with
    :math:`(1+r_b)/(1+r_a)\le` :data:`BIN_RATIO`, which need fewer nodes per row.  A bin
    whose interpolation error stays above target with :data:`MAX_NODES` nodes is halved.
    """
    lo, hi = float(r.min()), float(r.max())
    ratio = BIN_RATIO if r.size >= BIN_SPLIT_ROWS else np.inf
    edges = [hi]
    while (1.0 + edges[-1]) / (1.0 + lo) > ratio:
        edges.append((1.0 + edges[-1]) / ratio - 1.0)
    edges.append(lo)
    pending = [(edges[b + 1], edges[b]) for b in range(len(edges) - 1)]
    bins = []
    assigned = np.zeros(r.size, dtype=bool)
    while pending:
        bottom, top = pending.pop()
        rows = np.flatnonzero(~assigned & (r >= bottom) & (r <= top))
        if rows.size == 0:
            continue
        rb = r[rows]
        lmax = min(truncation_degree(float(rb.max()), eps_t), lsrc)
        nodes = _nodes(float(rb.min()), float(rb.max()), lmax, eps_t)
        if nodes.error > eps_t and (1.0 + rb.max()) / (1.0 + rb.min()) > 1.01:
            split = float(np.sqrt((1.0 + rb.min()) * (1.0 + rb.max())) - 1.0)
            pending += [(float(rb.min()), split), (split, float(rb.max()))]
            continue
        assigned[rows] = True
        bins.append(_Bin(rows, lmax, nodes))
    return bins


def _direct(
    g: np.ndarray, lsrc: int, uhat: np.ndarray, r: np.ndarray, loc: np.ndarray, mass: float, eps_t: float, eps_n: float,
    bins: list[_Bin] | None = None,
) -> _Estimate:
    """Slices synthesised at the rows (``synthesis_general``), bin by bin."""
    k = r.size
    den = np.zeros(k)
    num = np.zeros((k, 3))
    error = np.zeros(k)
    for part in bins if bins is not None else _direct_bins(r, lsrc, eps_t):
        rows, lmax, nodes = part.rows, part.lmax, part.nodes
        tables = _tables(lmax, nodes.r)
        basis = nodes.basis(r[rows])
        locb = np.ascontiguousarray(loc[rows])
        threads = _threads(rows.size, lmax)
        d = np.zeros(rows.size)
        rad = np.zeros(rows.size)
        grad = np.zeros((2, rows.size))
        smax = 0.0
        for j in range(nodes.r.size):
            aD, aR, aT = _slice_alm(g, lsrc, lmax, tables, j)
            sD = synthesis_general(alm=aD, spin=0, lmax=lmax, loc=locb, epsilon=eps_n, nthreads=threads)[0]
            sR = synthesis_general(alm=aR, spin=0, lmax=lmax, loc=locb, epsilon=eps_n, nthreads=threads)[0]
            sT = synthesis_general(alm=aT, spin=1, lmax=lmax, loc=locb, epsilon=eps_n, nthreads=threads, mode="DERIV1")
            smax = max(smax, float(np.max(np.abs(sD))))
            wj = basis[j]
            d += wj * sD
            rad += wj * sR
            grad += wj * sT
        den[rows] = d
        num[rows] = _assemble(uhat[rows], rad, grad)
        floor = basis.lebesgue * max(FLOOR_RELATIVE * smax, MASS_FLOOR_RELATIVE * mass)
        error[rows] = mass * (eps_t + nodes.error) + floor + NUFFT_RELATIVE * eps_n * np.abs(d)
    return _Estimate(den, num, error)


def _grid_shape(lmax: int) -> tuple[int, int]:
    """Rings and points per ring of the GL grid of degree ``lmax``: nφ ≥ 2 lmax + 2 a fast FFT length."""
    return lmax + 1, int(ducc0.fft.good_size(2 * lmax + 2, True))


@lru_cache(maxsize=8)
def _gl_grid(lmax: int) -> tuple[np.ndarray, int, int]:
    """Unit vectors of ducc0's Gauss–Legendre grid (rings north → south, φ_j = 2πj/nφ), nθ, nφ."""
    ntheta, nphi = _grid_shape(lmax)
    cos_t = np.polynomial.legendre.leggauss(ntheta)[0][::-1]
    sin_t = np.sqrt(np.maximum(0.0, 1.0 - cos_t**2))
    phi = 2.0 * np.pi * np.arange(nphi) / nphi
    u = np.empty((ntheta, nphi, 3))
    u[..., 0] = sin_t[:, None] * np.cos(phi)[None, :]
    u[..., 1] = sin_t[:, None] * np.sin(phi)[None, :]
    u[..., 2] = cos_t[:, None]
    return u.reshape(-1, 3), ntheta, nphi


def _tail(alm: np.ndarray, lmax: int) -> float:
    r"""Pointwise size of what the last degrees of a real map's ``alm`` stand for.

    With :math:`\nu^2` the mean square of the coefficients of the last
    :math:`\max(4, L/10)` degrees, :math:`4\nu(L+1)/\sqrt{4\pi}` is four times the rms of
    a field carrying that level in every coefficient: the rounding noise of the grid
    transforms (flat in :math:`l`) or, before the spectrum has decayed, the unresolved tail.
    """
    _, ell, _ = _layout(lmax, lmax)
    top = ell > lmax - max(4, lmax // 10)
    nu = float(np.sqrt(np.mean(np.abs(alm[top]) ** 2)))
    return 4.0 * nu * (lmax + 1) / np.sqrt(4.0 * np.pi)


def _rms(alm: np.ndarray, lmax: int) -> float:
    """Root mean square over the sphere of the real map with coefficients ``alm``."""
    _, _, m = _layout(lmax, lmax)
    return float(np.sqrt(np.sum(np.abs(alm) ** 2 * np.where(m > 0, 2.0, 1.0)) / (4.0 * np.pi)))


def _grid_slices(alms: list, lmax: int, grid_l: int, basis: _Basis, fields: tuple[int, ...], threads: int) -> tuple[list[np.ndarray], float]:
    """Σ_k ℓ_k(τ_g) S_k on the GL grid of degree ``grid_l`` for the fields (0: D, 1: radial, 2: gradient)."""
    ntheta, nphi = _grid_shape(grid_l)
    size = ntheta * nphi
    out = [np.zeros(size) if f < 2 else np.zeros((2, size)) for f in fields]
    smax = 0.0
    for j, alm in enumerate(alms):
        wj = basis[j]
        for slot, f in enumerate(fields):
            if f < 2:
                s = synthesis_2d(alm=alm[f], spin=0, lmax=lmax, geometry="GL", ntheta=ntheta, nphi=nphi, nthreads=threads)[0].reshape(-1)
                if f == 0:
                    smax = max(smax, float(np.max(np.abs(s))))
            else:
                s = synthesis_2d_deriv1(alm=alm[f], lmax=lmax, geometry="GL", ntheta=ntheta, nphi=nphi, nthreads=threads).reshape(2, -1)
            out[slot] += wj * s
    return out, smax


def _resampled(
    g: np.ndarray, lsrc: int, B: np.ndarray, beta: float, uhat: np.ndarray, loc: np.ndarray, mass: float,
    eps_t: float, eps_n: float, tolerance: float, *, budget: float = np.inf,
) -> _Estimate | None:
    """Smooth maps on a GL grid of directions, analysed, then one synthesis per field at the rows.

    Returns None when the resampled maps would not serve: their interpolation in r or
    their resolution falls short, or more than :data:`RESAMPLE_MAX_REJECT` of the grid
    would fail the row test (the caller then uses :func:`_direct`), the last checked already on the
    first grid degree without the resolution's share of the floor.  ``budget``: the grid stops
    growing where the next degree and the finish would take the modelled seconds past it (the
    best degree so far is then used, its error bound as measured).
    """
    sigma = np.linalg.svd(B, compute_uv=False)
    kappa = sigma[0] / sigma[-1]
    binv_t = np.linalg.inv(B).T
    r_a, r_b = beta * sigma[-1], beta * sigma[0]
    lmax = min(truncation_degree(r_b, eps_t), lsrc)
    nodes = _nodes(float(r_a), float(r_b), lmax, eps_t)
    margin = tolerance - NUFFT_RELATIVE * eps_n
    if nodes.error > eps_t or margin <= 0:
        return None
    tables = _tables(lmax, nodes.r)
    alms = [_slice_alm(g, lsrc, lmax, tables, j) for j in range(nodes.r.size)]
    grid_l = int(np.ceil(lmax * (1.0 + RESAMPLE_GROWTH * np.log(kappa)) + RESAMPLE_MARGIN))
    best = None
    previous = np.inf
    spent = 0.0
    while True:
        spent += _resampled_degree_seconds(nodes.r.size, grid_l, lmax)
        ug, ntheta, nphi = _gl_grid(grid_l)
        basis = nodes.basis(beta / np.linalg.norm(ug @ binv_t.T, axis=1))
        threads = _grid_threads(grid_l)
        (dmap,), smax = _grid_slices(alms, lmax, grid_l, basis, (0,), threads)
        a_den = analysis_2d(map=dmap.reshape(1, ntheta, nphi), spin=0, lmax=grid_l, geometry="GL", nthreads=threads)
        tail = _tail(a_den[0], grid_l)
        rms = _rms(a_den[0], grid_l)
        if best is None:  # the floor below less its tail: too much of the sphere sees too little mass, whatever the degree
            floor = (mass * (eps_t + nodes.error) + basis.lebesgue * max(FLOOR_RELATIVE * smax, MASS_FLOOR_RELATIVE * mass)
                     + FLOOR_RELATIVE * float(np.max(np.abs(dmap))))
            if np.mean(margin * dmap < floor) > RESAMPLE_MAX_REJECT:
                return None
        if best is None or tail < best[0]:
            best = (tail, grid_l, ug, basis, a_den, smax, dmap)
        grown = int(np.ceil(1.3 * grid_l))
        # resolved (down to the rounding level), or no longer improving, or too large, or past the budget
        if tail <= TAIL_RELATIVE * rms or tail > 0.3 * previous or grown > RESAMPLE_MAX_GROWTH * lmax + 2 * RESAMPLE_MARGIN:
            break
        if spent + _resampled_degree_seconds(nodes.r.size, grown, lmax) + _resampled_finish_seconds(uhat.shape[0], nodes.r.size, grown, lmax) > budget:
            break
        previous = tail
        grid_l = grown
    tail, grid_l, ug, basis, a_den, smax, dmap = best
    dmax = float(np.max(np.abs(dmap)))
    floor = (mass * (eps_t + nodes.error) + tail + basis.lebesgue * max(FLOOR_RELATIVE * smax, MASS_FLOOR_RELATIVE * mass)
             + FLOOR_RELATIVE * dmax)
    if np.mean(margin * dmap < floor) > RESAMPLE_MAX_REJECT:
        return None
    ntheta, nphi = _grid_shape(grid_l)
    threads = _grid_threads(grid_l)
    (rad, grad), _ = _grid_slices(alms, lmax, grid_l, basis, (1, 2), threads)
    nmap = _assemble(ug, rad, grad)
    a_num = [
        analysis_2d(map=np.ascontiguousarray(nmap[:, c]).reshape(1, ntheta, nphi), spin=0, lmax=grid_l, geometry="GL", nthreads=threads)
        for c in range(3)
    ]
    threads = _threads(loc.shape[0], grid_l)
    den = synthesis_general(alm=a_den, spin=0, lmax=grid_l, loc=loc, epsilon=eps_n, nthreads=threads)[0]
    num = np.stack([synthesis_general(alm=a, spin=0, lmax=grid_l, loc=loc, epsilon=eps_n, nthreads=threads)[0] for a in a_num], axis=1)
    # the maps are scaled by e^{-r(û)}, r(û) = β / ‖B^{-T} û‖ (= r_i for unit tokens)
    shift = beta / np.linalg.norm(uhat @ binv_t.T, axis=1)
    return _Estimate(den, num, floor + NUFFT_RELATIVE * eps_n * np.abs(den), shift)


def _norm2(B: np.ndarray) -> float:
    """The spectral norm ‖B‖₂."""
    return float(np.linalg.svd(B, compute_uv=False)[0])


def _source_degree(B: np.ndarray, beta: float, tolerance: float) -> int:
    """Degree the source coefficients must reach for a head: the truncation degree of β‖B‖₂."""
    r = beta * _norm2(B)
    return truncation_degree(r, _accuracies(tolerance, r)[0])


def _within_degree_cap(r: float, tolerance: float) -> bool:
    r"""Whether the truncation degree of the radius ``r`` at ``tolerance`` is at most :data:`MAX_DEGREE`.

    Past :math:`r = (L_{\max}/2)^2` it is not, without computing it (that had taken a minute at :math:`r = 10^{12}`):
    the tail term :math:`(2l+1)\phi_l(r)\approx 2l\,e^{-l^2/2r}/2r` is about :math:`0.27/\sqrt r` at
    :math:`l = 2\sqrt r`, above every :math:`\varepsilon_T\le10^{-8}` for such :math:`r`, so :math:`L > 2\sqrt r`."""
    if not r <= (MAX_DEGREE / 2) ** 2:
        return False
    return truncation_degree(r, _accuracies(tolerance, r)[0]) <= MAX_DEGREE


class HarmonicDegreeError(ValueError):
    """A β so large that the harmonic kernel's truncation degree passes :data:`MAX_DEGREE` (its time and memory grow
    like the degree squared); the local kernel runs it."""


def check_harmonic_degree(heads: HeadStack, beta: float, *, kind: str = "softmax", tolerance: float = 1e-12) -> None:
    r"""Refuse a :math:`\beta` whose harmonic truncation degree passes :data:`MAX_DEGREE` for one of the heads the law
    reads (pooled: those with :math:`w_h\neq0`).

    Raises
    ------
    HarmonicDegreeError
        A ``ValueError`` naming ``beta``, the backend and the degree.
    """
    active = [h for h in range(heads.H) if kind != "pooled" or heads.w[h] != 0]
    beta = float(beta)
    for h in active:
        r = beta * _norm2(heads.B[h])
        if not _within_degree_cap(r, tolerance):
            degree = (f"L = {truncation_degree(r, _accuracies(tolerance, r)[0])}" if r <= (MAX_DEGREE / 2) ** 2
                      else f"L > 2√(β‖B_h‖₂) = {2.0 * np.sqrt(r):.3g}")
            raise HarmonicDegreeError(
                f"beta = {beta:g} is too large for backend 'harmonic': at β‖B_h‖₂ = {r:.3g} its spherical-harmonic "
                f"degree would be {degree}, past its limit of {MAX_DEGREE} (time and memory grow like L²: 10.7 GB at "
                "β‖B‖₂ = 1e6); use backend 'local' (or 'auto'), whose caps shrink as β grows")


def _synthesis_seconds(points: float, lmax: float) -> float:
    """Measured cost of one spin-0 ``synthesis_general``: a call, per point, per coefficient."""
    return SYNTHESIS_PER_CALL + SYNTHESIS_PER_POINT * points + SYNTHESIS_PER_COEFFICIENT * lmax**2


def _grid_seconds(grid_l: float, lmax: float) -> float:
    """Measured cost of one spin-0 ``synthesis_2d`` of degree ``lmax`` on the GL grid of degree ``grid_l``."""
    return SYNTHESIS_PER_CALL / 4 + GRID_PER_OPERATION * grid_l * lmax**1.6


def _direct_seconds(bins: list[_Bin]) -> float:
    """Two spin-0 syntheses and one gradient (1.3 of them) per node and bin."""
    return sum(3.3 * part.nodes.r.size * _synthesis_seconds(part.rows.size, part.lmax) for part in bins)


def _resampled_degree_seconds(nodes: int, grid_l: float, lmax: float) -> float:
    """One attempt of :func:`_resampled`'s growth loop: the denominator map at grid degree ``grid_l`` (one synthesis
    per node, the interpolation weights) and its analysis."""
    points = (grid_l + 1) * (2 * grid_l + 2)
    return nodes * (_grid_seconds(grid_l, lmax) + GRID_WEIGHT_PER_POINT * points) + _grid_seconds(grid_l, grid_l)


def _resampled_finish_seconds(k: int, nodes: int, grid_l: float, lmax: float) -> float:
    """The end of :func:`_resampled` at grid degree ``grid_l``: the radial and gradient maps (3.4 syntheses per
    node), three analyses and four syntheses at the ``k`` rows."""
    return nodes * 3.4 * _grid_seconds(grid_l, lmax) + 3.0 * _grid_seconds(grid_l, grid_l) + 4.0 * _synthesis_seconds(k, grid_l)


def _resampled_seconds(k: int, beta: float, sigma: np.ndarray, lsrc: int, eps_t: float, *, worst: bool = True) -> float:
    """The cost of :func:`_resampled`: ``worst``, the denominator map at every grid degree of the growth
    loop (×1.3 up to :data:`RESAMPLE_MAX_GROWTH` L) and the finish at the last; else the first degree only
    (the maps of spread-out tokens are resolved there).

    The worst case decides against the dense and local kernels in :func:`estimate_sphere_seconds`
    (measured once: 4–5 attempts for a uniform density at 3217 points, 0.26 s per call, where the
    first-degree estimate had predicted 0.01 s); inside :func:`harmonic_head_sums` the first degree
    decides, and :func:`_resampled` stops growing at the direct way's cost.
    """
    r_b = beta * sigma[0]
    lmax = min(truncation_degree(r_b, eps_t), lsrc)
    grid_l = lmax * (1.0 + RESAMPLE_GROWTH * np.log(sigma[0] / sigma[-1])) + RESAMPLE_MARGIN
    nodes = _nodes(float(beta * sigma[-1]), float(r_b), lmax, eps_t).r.size
    top = RESAMPLE_MAX_GROWTH * lmax + 2 * RESAMPLE_MARGIN
    seconds = 0.0
    while True:
        seconds += _resampled_degree_seconds(nodes, grid_l, lmax)
        if not worst or 1.3 * grid_l > top:
            break
        grid_l = np.ceil(1.3 * grid_l)
    return seconds + _resampled_finish_seconds(k, nodes, grid_l, lmax)


def harmonic_head_sums(
    x_rows: np.ndarray,
    B: np.ndarray,
    beta: float,
    g: np.ndarray,
    lsrc: int,
    mass: float,
    *,
    tolerance: float = 1e-12,
    method: str = "auto",
    geometry: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[HeadSums, np.ndarray]:
    r"""Scaled sums of one head by spherical harmonics, with their error bound.

    Parameters
    ----------
    x_rows : (k, 3) array
        Query tokens.
    B : (3, 3) array
        Score matrix.
    beta : float
        Inverse temperature.
    g : complex array
        :math:`g_{lm}=\sum_j a_j\overline{Y_{lm}(y_j)}` up to degree ``lsrc`` (healpy layout).
    lsrc : int
        Degree of ``g`` (at least the truncation degree of :math:`\beta\|B\|`).
    mass : float
        Total mass :math:`M`.
    tolerance : float
        Target relative accuracy (sets truncation, interpolation and NUFFT accuracies).
    method : {"auto", "direct", "resampled"}
        ``auto`` takes the resampled way where its first grid degree costs less than the direct way by
        the measured cost models (only for invertible :math:`B` with condition number ≤
        :data:`RESAMPLE_MAX_COND`), growing its grid no further than the direct way's cost, and falls
        back to ``direct`` when its maps are not resolved.
    geometry : (û, r, loc), optional
        The rows' directions, radii and (colatitude, longitude), if already computed.

    Returns
    -------
    sums : HeadSums
        ``num``, ``den`` scaled by :math:`e^{-r_i}`, ``shift`` :math:`= r_i=\beta\|B^\top x_i\|`.
    error : (k,) array
        Absolute error bound :math:`E_i` of ``den`` (and of each component of ``num``).
    """
    eps_t, eps_n = _accuracies(tolerance, beta * _norm2(B))
    uhat, r, loc = _geometry(x_rows, B, beta) if geometry is None else geometry
    k = r.size
    if k == 0:
        return HeadSums.empty(0), np.zeros(0)
    bins = _direct_bins(r, lsrc, eps_t)
    est = None
    if method in ("auto", "resampled"):
        sigma = np.linalg.svd(B, compute_uv=False)
        if sigma[-1] > 0 and 1.0 + 1e-12 < sigma[0] / sigma[-1] <= RESAMPLE_MAX_COND:
            direct = _direct_seconds(bins)
            if method == "resampled":
                est = _resampled(g, lsrc, B, beta, uhat, loc, mass, eps_t, eps_n, float(tolerance))
            elif _resampled_seconds(k, beta, sigma, lsrc, eps_t, worst=False) < direct:  # at most the direct cost more
                est = _resampled(g, lsrc, B, beta, uhat, loc, mass, eps_t, eps_n, float(tolerance), budget=direct)
    if est is None:
        est = _direct(g, lsrc, uhat, r, loc, mass, eps_t, eps_n, bins)
    return HeadSums(est.num, est.den, r if est.shift is None else est.shift), est.error


def _accuracies(tolerance: float, r_max: float = 0.0) -> tuple[float, float]:
    r"""Truncation/interpolation target ε_T and NUFFT accuracy ε_N for a tolerance and a head's :math:`\beta\|B\|_2`.

    The truncation bound is absolute, :math:`M\varepsilon_T`, while the scaled denominator
    of a row is only about :math:`M/(2r)` for a uniform measure (the kernel's mass
    :math:`\int e^{r(t-1)}dt/2`), so :math:`\varepsilon_T = 10^{-5}\,\mathrm{tol}/(1+r)`:
    the bound then leaves room for densities :math:`10^5` times below the mean before a
    row needs the exact path (the truncation degree grows only like
    :math:`\sqrt{\ln(1/\varepsilon_T)}`).  The scaling by :math:`1+r` stops at
    :math:`\min(10^{-5}\mathrm{tol}, 10^{-17})`: below that the other terms of the bound
    (transform floor, NUFFT accuracy) are only measured, not proven, and a smaller
    :math:`\varepsilon_T` would let rows through on them alone.
    """
    tol = float(tolerance)
    scaled = 1e-5 * tol / (1.0 + max(float(r_max), 0.0))
    eps_t = float(np.clip(max(scaled, min(1e-5 * tol, 1e-17)), 1e-18, 1e-8))
    eps_n = float(np.clip(0.125 * tol, NUFFT_EPS_MIN, 1e-4))
    return eps_t, eps_n


# ----------------------------------------------------------------------------- the velocity


def velocity_harmonic(
    x: np.ndarray,
    heads: HeadStack,
    *,
    beta: float,
    kind: str = "softmax",
    weights: np.ndarray | None = None,
    tolerance: float = 1e-12,
    mask: str = "none",
    block: int | None = None,
    row_logs: np.ndarray | None = None,
) -> np.ndarray:
    r"""Attention velocity on :math:`S^2` by spherical harmonics, exact local fallback where needed.

    Same result as ``velocity_numpy(x, heads, beta=beta, kind=kind, weights=weights)``:

    .. math::

        \text{softmax: } v_i=\sum_h\frac{\sum_j a_je^{\beta s^h_{ij}}V_hx_j}{\sum_j a_je^{\beta s^h_{ij}}},\quad
        \text{unnormalized: } v_i=\sum_h\sum_j a_je^{\beta s^h_{ij}}V_hx_j,\quad
        \text{pooled: } v_i=\frac{\sum_h w_h\sum_j a_je^{\beta s^h_{ij}}V_hx_j}{\sum_h w_h\sum_j a_je^{\beta s^h_{ij}}},

    :math:`s^h_{ij}=x_i^\top B_hx_j`, evaluated by the plane-wave expansion of the module
    docstring (one adjoint transform shared by all heads, a few syntheses per head).

    **Error bound.**  Each (row, head) comes with the bound
    :math:`E_i = M(\varepsilon_T+\varepsilon_C)+E_R+c_FS_{\max}+\varepsilon_N|\widetilde D_i|`
    on its scaled sums (truncation, interpolation in :math:`r`, resampling tail,
    transform floor, NUFFT accuracy).  Rows with :math:`E_i>\mathrm{tol}\cdot\widetilde D_i`
    are recomputed exactly by :func:`meanfield.kernels.local.local_head_sums`, so every
    row has relative error :math:`\lesssim` ``tolerance`` (measured: ≤ 1e-12 relative to
    :math:`\max_i|v_i|` on uniform points for β ≤ 1024, a few 1e-13 typical; near the
    NUFFT's floor, at tolerance 1e-12, up to 7e-12 on clustered tokens with zero masses).

    Parameters
    ----------
    x : (n, 3) array
        Tokens on the unit sphere.
    heads : HeadStack
        ``B``, ``V`` (H, 3, 3) (general, non-symmetric), weights ``w`` (pooled).
    beta : float
        Inverse temperature :math:`\beta\ge0`.
    kind : {"softmax", "unnormalized", "pooled"}
    weights : (n,) array, optional
        Token masses :math:`a_j\ge0` (default :math:`1/n`).
    tolerance : float
        Target relative accuracy per row.  The NUFFT accuracy is
        :math:`\varepsilon_N=\max(\varepsilon_{\min}, \mathrm{tol}/8)` (:data:`NUFFT_EPS_MIN`, at most
        :math:`10^{-4}`), truncation and interpolation aim at :math:`10^{-5}\,\mathrm{tol}/(1+\beta\|B\|_2)`
        (:func:`_accuracies`).
    mask : {"none", "causal"}
        ``"causal"``: row :math:`i` sums over :math:`j\le i` only, by the block-prefix
        algorithm of the module docstring (same tolerance).
    block : int, optional
        Causal mask only (a ``ValueError`` without it): tokens per block, an integer ≥ 1 (more than ``n`` is taken as
        ``n``; default :func:`causal_block_rows`).
    row_logs : (H, n) array, optional
        Filled with every head's :math:`\ln\sum_j a_j e^{\beta s^h_{ij}}` per row (the certified sums the velocity
        takes anyway: the energy of :mod:`meanfield.analysis.energy`), without a mask; otherwise left as it is.

    Returns
    -------
    (n, 3) array
        The ambient velocity :math:`v_i`.

    Raises
    ------
    ValueError
        For ``kind="relu"``, ``d != 3``, tokens off the unit sphere or a bad ``block``;
        :class:`HarmonicDegreeError` for a β whose truncation degree passes :data:`MAX_DEGREE` (any ``n``).
    """
    x = check_sphere_tokens(x, heads, kind, tolerance=tolerance, beta=beta)
    causal = is_causal(mask)
    if block is not None:
        if isinstance(block, (bool, np.bool_)) or not isinstance(block, (int, np.integer)) or block < 1:
            raise ValueError(f"block (tokens per block of the causal mask) must be an integer ≥ 1, got {block!r}")
        if not causal:
            raise ValueError(f"block applies to mask='causal' only (its tokens per block), got block = {block!r} with mask = {mask!r}")
    check_harmonic_degree(heads, beta, kind=kind, tolerance=tolerance)  # (before the handful of tokens: whatever n)
    n = x.shape[0]
    if 0 < n <= HARMONIC_EXACT_MAX_N:  # a handful of tokens: their direct sums, exact and cheaper than any transform
        return velocity_local(x, heads, beta=beta, kind=kind, weights=weights, tolerance=tolerance, mask=mask, row_logs=row_logs)
    a = token_masses(n, weights, kind=kind, causal=causal)
    if n == 0:
        return np.zeros((0, 3))
    beta = float(beta)
    if causal:
        return _causal_harmonic(x, heads, beta, kind, a, float(tolerance), block)
    sums = certified_head_sums(x, heads, beta, kind, a, float(tolerance), per_head=row_logs is not None)
    store_row_logs(row_logs, heads, kind, sums)
    return combine_head_sums(heads, kind, sums)


def certified_head_sums(x: np.ndarray, heads: HeadStack, beta: float, kind: str, a: np.ndarray, tolerance: float, *,
                        per_head: bool = False) -> list[HeadSums]:
    r"""Every head's shifted sums :math:`N^h_i, D^h_i, m^h_i` over all tokens, each row to ``tolerance``.

    The harmonic sums of :func:`harmonic_head_sums` (one adjoint transform for all
    heads), with the rows whose bound exceeds ``tolerance`` times their sum — per head,
    or for ``kind="pooled"`` of the pooled denominator — recomputed exactly by
    :func:`meanfield.kernels.local.local_head_sums`.  Heads of zero weight are left
    empty under ``pooled``.  (``x`` unit vectors, ``a`` the masses.)  ``per_head``: under
    ``pooled`` too, every head's sum to ``tolerance`` of itself (its log row sums are asked
    for: a head far below the pooled sum had come out 7–60 nats off, or negative).
    """
    n = x.shape[0]
    a, exponent = masses_near_one(a)
    src = SphereSources(x, a)
    active = [h for h in range(heads.H) if kind != "pooled" or heads.w[h] != 0]
    if not all(_within_degree_cap(beta * _norm2(heads.B[h]), tolerance) for h in active):
        # a degree past MAX_DEGREE: every row's exact local sums (the energy's row sums at a large β had taken the
        # transform's O(L²) time and memory; the velocity refuses, check_harmonic_degree)
        sums = [local_head_sums(x, heads.B[h], beta, src, tolerance=tolerance) if h in active else HeadSums.empty(n)
                for h in range(heads.H)]
        _restore_masses(sums, exponent)
        return sums
    lsrc = max([_source_degree(heads.B[h], beta, tolerance) for h in active] + [1])
    eps_n = _accuracies(tolerance)[1]
    g = _source_coefficients(src, lsrc, eps_n)
    sums: list[HeadSums] = [HeadSums.empty(n) for _ in range(heads.H)]
    errors: list[np.ndarray] = [np.zeros(n) for _ in range(heads.H)]
    for h in active:
        sums[h], errors[h] = harmonic_head_sums(x, heads.B[h], beta, g, lsrc, src.mass, tolerance=tolerance)
    tol = float(tolerance)
    if kind in ("softmax", "unnormalized"):
        for h in active:
            bad = np.flatnonzero(~(errors[h] <= tol * sums[h].den))
            if bad.size:
                sums[h].put(bad, local_head_sums(x[bad], heads.B[h], beta, src, tolerance=tol))
    else:
        scales, _ = pooled_scales(heads, sums)
        err = sum(np.abs(scales[h]) * errors[h] for h in active)
        den = sum(scales[h] * sums[h].den for h in active)
        bad = np.flatnonzero(~(err <= tol * np.abs(den)))
        if bad.size:
            for h in active:
                sums[h].put(bad, local_head_sums(x[bad], heads.B[h], beta, src, tolerance=tol))
                errors[h][bad] = 0.0
        for h in active if per_head else ():
            bad = np.flatnonzero(~(errors[h] <= tol * sums[h].den))
            if bad.size:
                sums[h].put(bad, local_head_sums(x[bad], heads.B[h], beta, src, tolerance=tol))
    _restore_masses(sums, exponent)
    return sums


def _restore_masses(sums: list[HeadSums], exponent: int) -> None:
    r"""Put the masses' power of two of :func:`~meanfield.kernels.inputs.masses_near_one` back, into the shifts:
    :math:`\sum_j a_j e^{\beta s_{ij}} = 2^k e^{m_i} D_i`."""
    if exponent:
        for head_sums in sums:
            head_sums.shift += exponent * np.log(2.0)


def sphere_head_row_logs(
    x: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None, tolerance: float = 1e-12,
) -> np.ndarray:
    r"""The heads' log row sums on :math:`S^2` from the harmonic row sums, shape ``(H, n)``: no :math:`O(n^2)` pass.

    .. math::

        \ell^h_i=m^h_i+\ln D^h_i,\qquad D^h_i e^{m^h_i}=\sum_j a_je^{\beta s^h_{ij}}

    (:math:`-\infty` where :math:`D^h_i=0`), with the row sums of :func:`certified_head_sums`, each to relative
    ``tolerance``: the energies :math:`E_h=\frac1{2\beta}\sum_ia_ie^{\ell^h_i}` of Pendharkar (arXiv 2605.04279), sums of
    positive terms, are too (:func:`meanfield.analysis.energy.energies_from_row_logs`).  The velocity's own transform
    cost, once per frame.  Tokens up to :math:`10^{-10}` off the unit sphere are divided by their norms first
    (:func:`~meanfield.kernels.local.check_sphere_tokens`): the sums are those of the unit vectors.

    Parameters
    ----------
    x : (n, 3) array
        Unit vectors.
    heads : HeadStack
    beta : float
        Inverse temperature, > 0.
    weights : (n,) array, optional
        Masses (default :math:`1/n`).
    tolerance : float
        Relative accuracy of each row sum.
    """
    x = check_sphere_tokens(x, heads, "softmax", tolerance=tolerance)
    a = token_masses(x.shape[0], weights)
    beta = float(beta)
    if not beta > 0 or not np.isfinite(beta):
        raise ValueError(f"beta must be finite and > 0, got {beta}")
    out = np.full((heads.H, x.shape[0]), -np.inf)
    for h, sums in enumerate(certified_head_sums(x, heads, beta, "softmax", a, float(tolerance))):
        positive = sums.den > 0
        out[h, positive] = sums.shift[positive] + np.log(sums.den[positive])
    return out


# ----------------------------------------------------------------------------- the causal mask


def _merge_sums(far: HeadSums, near: HeadSums) -> tuple[HeadSums, np.ndarray]:
    """The sum of two sets of shifted sums on a common shift, and the factor that brings ``far``'s shift to it.

    The factor scales ``far``'s error bound whatever its sum: where the far sum came out at its rounding floor
    (zero or negative) it is left out of the merged sum, but its error still counts, so that the row is
    recomputed exactly when that error outweighs the rest (β = 1000 under the causal mask: rows off by 0.67,
    and NaN where the near sum underflowed against the far shift, had passed the check with an error of 0).
    """
    top = np.maximum(far.shift, near.shift)
    base = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(invalid="ignore"):
        scale = np.where(np.isfinite(far.shift), np.exp(np.minimum(far.shift - base, 0.0)), 0.0)
        f_far = np.where(far.den > 0, scale, 0.0)
        f_near = np.where(near.den > 0, np.exp(np.minimum(near.shift - base, 0.0)), 0.0)
    merged = HeadSums(far.num * f_far[:, None] + near.num * f_near[:, None], far.den * f_far + near.den * f_near, top)
    return merged, scale


def _causal_harmonic(
    x: np.ndarray, heads: HeadStack, beta: float, kind: str, a: np.ndarray, tol: float, block: int | None
) -> np.ndarray:
    """The causal velocity by block prefixes of the source coefficients (module docstring, *Causal mask*)."""
    n = x.shape[0]
    a, exponent = masses_near_one(a)
    src = SphereSources(x, a)
    active = [h for h in range(heads.H) if kind != "pooled" or heads.w[h] != 0]
    lsrc = max([_source_degree(heads.B[h], beta, tol) for h in active] + [1])
    eps_n = _accuracies(tol)[1]
    size = int(block) if block is not None else causal_block_rows(n, beta, heads, tolerance=tol)
    size = max(1, min(n, size))
    sums: list[HeadSums] = [HeadSums.empty(n) for _ in range(heads.H)]
    errors: list[np.ndarray] = [np.zeros(n) for _ in range(heads.H)]
    g = np.zeros((lsrc + 1) * (lsrc + 2) // 2, dtype=complex)
    mass = 0.0
    for b0 in range(0, n, size):
        b1 = min(n, b0 + size)
        rows = np.arange(b0, b1)
        part = SphereSources(x[b0:b1], a[b0:b1])
        limits = part.causal_limits(rows - b0)
        for h in active:
            near = local_head_sums(x[b0:b1], heads.B[h], beta, part, tolerance=NEAR_SHARE * tol, limits=limits)
            if mass > 0:
                far, err = harmonic_head_sums(x[b0:b1], heads.B[h], beta, g, lsrc, mass, tolerance=tol)
                near, to_common = _merge_sums(far, near)
                errors[h][rows] = err * to_common
            sums[h].put(rows, near)
        if part.m:
            g += _source_coefficients(part, lsrc, eps_n)
            mass += part.mass
    far_tol = (1.0 - NEAR_SHARE) * tol
    if kind in ("softmax", "unnormalized"):
        for h in active:
            bad = np.flatnonzero(~(errors[h] <= far_tol * sums[h].den))
            if bad.size:
                sums[h].put(bad, local_head_sums(x[bad], heads.B[h], beta, src, tolerance=tol, limits=src.causal_limits(bad)))
    else:
        scales, _ = pooled_scales(heads, sums)
        err = sum(np.abs(scales[h]) * errors[h] for h in active)
        den = sum(scales[h] * sums[h].den for h in active)
        bad = np.flatnonzero(~(err <= far_tol * np.abs(den)))
        if bad.size:
            limits = src.causal_limits(bad)
            for h in active:
                sums[h].put(bad, local_head_sums(x[bad], heads.B[h], beta, src, tolerance=tol, limits=limits))
    _restore_masses(sums, exponent)
    return combine_head_sums(heads, kind, sums)


#: smallest block of the causal harmonic kernel
CAUSAL_MIN_BLOCK = 256
#: share of the tolerance left to the in-block (near) sums of the causal harmonic kernel
NEAR_SHARE = 0.25


def _causal_local_seconds(n: int, beta: float, heads: HeadStack, tolerance: float) -> float:
    """The local cost model of :func:`estimate_sphere_seconds` with half the candidate pairs (causal rows)."""
    calls = heads.H * (LOCAL_CALL_SECONDS + LOCAL_ROW_SECONDS * n)
    return calls + 0.5 * max(_local_seconds(n, beta, heads, tolerance, rings=False) - calls, 0.0)


def _causal_harmonic_seconds(n: int, size: int, beta: float, heads: HeadStack, tolerance: float) -> float:
    """Predicted seconds of the causal harmonic kernel with blocks of ``size`` tokens: per block the
    harmonic far part (all blocks but the first) and the causal local sums inside the block."""
    blocks = -(-n // size)
    far = estimate_sphere_seconds(size, beta, heads, tolerance=tolerance)["harmonic"]
    near = _causal_local_seconds(size, beta, heads, tolerance)
    return (blocks - 1) * far + blocks * near


def causal_block_rows(n: int, beta: float, heads: HeadStack, *, tolerance: float = 1e-12) -> int:
    r"""Tokens per block of the causal harmonic kernel: the cheapest power of two (≥ 256) by the cost models.

    .. math::

        T(s) = \Big(\Big\lceil\frac ns\Big\rceil-1\Big)\,C_{\rm harmonic}(s)
               + \Big\lceil\frac ns\Big\rceil\,C_{\rm local}(s),

    :math:`C_{\rm harmonic}(s)` the harmonic estimate of :func:`estimate_sphere_seconds` for
    :math:`s` rows and :math:`C_{\rm local}(s)` its local estimate with half the pairs
    (the causal triangle of a block).
    """
    sizes = [CAUSAL_MIN_BLOCK << k for k in range(32) if (CAUSAL_MIN_BLOCK << k) < n] or [max(1, n)]
    return min(sizes, key=lambda size: _causal_harmonic_seconds(n, size, beta, heads, tolerance))


def estimate_causal_sphere_seconds(n: int, beta: float, heads: HeadStack, *, tolerance: float = 1e-12) -> dict[str, float]:
    """Predicted seconds of the three methods under the causal mask (``n`` tokens spread over the sphere).

    * ``dense``: half the pairs of :func:`estimate_sphere_seconds`;
    * ``local``: the per-call and per-row costs, half the candidate pairs;
    * ``harmonic``: the block-prefix algorithm at its best block size (:func:`causal_block_rows`).
    """
    size = causal_block_rows(n, beta, heads, tolerance=tolerance)
    return {
        "harmonic": _causal_harmonic_seconds(n, size, beta, heads, tolerance),
        "local": _causal_local_seconds(n, beta, heads, tolerance),
        "dense": 0.5 * estimate_sphere_seconds(n, beta, heads, tolerance=tolerance)["dense"],
    }


# ----------------------------------------------------------------------------- method choice

#: the dense fused kernel: seconds per score pair, 3x its quiet 0.79–0.87e-9 at n = 4096 … 16384, d = 3 (the
#: scale of the local model; 5.5e-9, fitted when the kernel was slower, sent n = 2048 … 4096 to slower methods)
DENSE_PAIR_SECONDS = 2.6e-9
#: the local kernel: a call, per row (nearest points, blocks), per candidate pair (the model's pairs
#: undercount the candidates of the balls by up to 2x); measured on 2 quiet cores for the
#: benchmark head (β‖B‖ = 1.35 β): 7 ms at n = 2048, 0.14 s at 32768 and 0.45 s at 65536 for
#: β = 1024, 1.2 s at 65536 for β = 256, and scaled by the load factor of the dense constant.  The call:
#: a whole call takes 1.25–1.9 ms at n = 256 (β = 128, 1024; causal rows 1.3–2.3 ms at n = 128, 256), 2.5 ms on
#: the dense constant's scale (5 ms had kept the fused kernel at n = 2048, β = 1024, where the local one is 1.3×
#: faster, measured on 2 quiet cores)
LOCAL_CALL_SECONDS = 2.5e-3
LOCAL_ROW_SECONDS = 2e-6
LOCAL_PAIR_SECONDS = 4.5e-9
#: the local kernel whose rows stop at the ring their bound needs (every mask but the causal one; the
#: constants above stay those of the causal rows, which sum their block's whole ball): per row, per pair,
#: and the depth past ln(2/tolerance) at which a row stops on average.  Fitted to 18 timings on 2 quiet
#: cores (n = 4096, 16384, 65536; β = 1 … 1024; the benchmark head), every one within ±14 %, and
#: scaled by 3, the factor between the full-ball model and that kernel's own quiet timings
RING_ROW_SECONDS = 3.6e-6
RING_PAIR_SECONDS = 2.9e-9
RING_DEPTH = 20.0
#: the harmonic kernel outside the transforms: a call (planning, nodes), per row and head (geometry,
#: sums; measured ≈ 0.3 s per 10^6 rows)
HARMONIC_CALL_SECONDS = 3e-3
HARMONIC_ROW_SECONDS = 3e-7


def _local_fraction(n: int, r: float, tolerance: float, *, rings: bool = False) -> float:
    """Fraction of all points a local row scans: its cap widened by the blocks, area/4π.

    The full ball of a block (causal rows): chord² ≈ 2Δ/r, Δ = ln(n/ε), and the whole sphere past
    :data:`~meanfield.kernels.local.WHOLE_CHORD`.  With rings (every other row): the depth
    ln(2/tolerance) + :data:`RING_DEPTH` at which a row stops, whatever n.
    """
    if rings:
        chord = np.sqrt(2.0 * (np.log(2.0 / tolerance) + RING_DEPTH) / max(r, 1e-300))
        return float(min(1.0, 1.2 * chord**2 / 4.0))
    delta = np.log(max(n, 2) / (0.5 * tolerance))
    chord = np.sqrt(2.0 * delta / max(r, 1e-300)) + 0.06
    if chord >= WHOLE_CHORD:
        return 1.0
    return float(min(1.0, 1.2 * chord**2 / 4.0))


def _local_seconds(n: int, beta: float, heads: HeadStack, tolerance: float, *, rings: bool = True) -> float:
    """The local kernel's cost model, per head: a call, per row, per candidate pair (:func:`_local_fraction`)."""
    row, pair = (RING_ROW_SECONDS, RING_PAIR_SECONDS) if rings else (LOCAL_ROW_SECONDS, LOCAL_PAIR_SECONDS)
    total = 0.0
    for h in range(heads.H):
        r_b = float(beta * np.linalg.norm(heads.B[h], 2))
        total += LOCAL_CALL_SECONDS + row * n + pair * float(n) * n * _local_fraction(n, r_b, tolerance, rings=rings)
    return total


def estimate_sphere_seconds(n: int, beta: float, heads: HeadStack, *, tolerance: float = 1e-12) -> dict[str, float]:
    r"""Predicted seconds of the three methods for ``n`` tokens spread over the sphere (measured cost models).

    * ``dense``: :data:`DENSE_PAIR_SECONDS` · n² H;
    * ``local``: per head :data:`LOCAL_CALL_SECONDS` + :data:`RING_ROW_SECONDS` · n +
      :data:`RING_PAIR_SECONDS` · n² · (fraction of the sphere a row sums at :math:`r=\beta\|B_h\|`);
    * ``harmonic``: the adjoint transform, and per head the cheaper of the direct and the
      resampled evaluation (the cost models used inside :func:`harmonic_head_sums`), no fallback rows; ``inf``
      where a head's truncation degree passes :data:`MAX_DEGREE` (the kernel refuses that β).
    """
    n = int(n)
    H = heads.H
    dense = DENSE_PAIR_SECONDS * float(n) * n * H + 1e-4
    local = _local_seconds(n, beta, heads, tolerance)
    harmonic = HARMONIC_CALL_SECONDS
    lsrc = 1
    for h in range(H):
        sigma = np.linalg.svd(heads.B[h], compute_uv=False)
        r_a, r_b = float(beta * sigma[-1]), float(beta * sigma[0])
        if not _within_degree_cap(r_b, tolerance):  # the kernel refuses (MAX_DEGREE); its degree had been computed
            harmonic = np.inf  # here, a minute at β = 1e12, and β = 1e300 had failed in NumPy ("Maximum allowed dimension")
            break
        eps_t = _accuracies(tolerance, r_b)[0]
        lmax = truncation_degree(r_b, eps_t)
        lsrc = max(lsrc, lmax)
        if n >= BIN_SPLIT_ROWS and (1 + r_b) / (1 + r_a) > BIN_RATIO:
            bins = int(np.ceil(np.log((1 + r_b) / (1 + r_a)) / np.log(BIN_RATIO)))
            top = (1 + r_b) / BIN_RATIO - 1
            nodes = _nodes(max(top, r_a), r_b, lmax, eps_t)
            direct = bins * 3.3 * nodes.r.size * _synthesis_seconds(n / bins, lmax)
        else:
            nodes = _nodes(r_a, r_b, lmax, eps_t)
            direct = _direct_seconds([_Bin(np.zeros(n, dtype=np.int64), lmax, nodes)])
        cost = direct
        if sigma[-1] > 0 and 1.0 + 1e-12 < sigma[0] / sigma[-1] <= RESAMPLE_MAX_COND:
            cost = min(cost, _resampled_seconds(n, beta, sigma, lmax, eps_t))
        harmonic += cost + HARMONIC_ROW_SECONDS * n
    harmonic += _synthesis_seconds(n, lsrc)  # (inf stays inf)
    return {"harmonic": harmonic, "local": local, "dense": dense}


def choose_sphere_method(n: int, beta: float, heads: HeadStack, *, mask: str = "none", dense_speedup: float = 1.0,
                         tolerance: float = 1e-12) -> str:
    """The fastest method for ``n`` tokens at inverse temperature ``beta``: "harmonic", "local" or "dense".

    The least of the measured cost models of :func:`estimate_sphere_seconds` (their
    constants, on the scale of 2 cores shared with busy processes, are the thresholds:
    :data:`DENSE_PAIR_SECONDS`, :data:`LOCAL_CALL_SECONDS`, :data:`LOCAL_ROW_SECONDS`,
    :data:`LOCAL_PAIR_SECONDS`, :data:`RING_ROW_SECONDS`, :data:`RING_PAIR_SECONDS`, :data:`RING_DEPTH`,
    :data:`HARMONIC_CALL_SECONDS`, :data:`HARMONIC_ROW_SECONDS`, :data:`SYNTHESIS_PER_POINT`,
    :data:`SYNTHESIS_PER_COEFFICIENT`, :data:`GRID_PER_OPERATION`).
    "dense" means :func:`meanfield.kernels.fused.velocity_fused` (softmax) or
    :func:`meanfield.kernels.blas.velocity_blas` (other kinds; priced through ``dense_speedup``).  Measured for uniform tokens
    and a general head (singular values 1.19, 1.03, 0.93) on 2 quiet cores, n = 1024 … 262144,
    β = 1 … 1024, the models pick the fastest method in 24 of 25 cases (the other costs 1.9×
    the best: n = 4096 at β = 16, where the harmonic kernel wins over dense), which amounts to:

    * dense for n ≲ 2048 (1–3 ms);
    * local when the caps are small, n ≲ 60 β‖B‖₂ (at β = 1024: 0.024 s vs 0.25 s for the
      harmonic kernel at n = 16384, 0.15 s vs 0.20 s at n = 65536);
    * harmonic everywhere else, far ahead at large n (65536 tokens at β = 64: 0.03–0.04 s,
      some 130× the dense kernel).

    ``mask="causal"`` compares the causal cost models instead (:func:`estimate_causal_sphere_seconds`).
    ``dense_speedup`` divides the dense model's cost, which is the fused float64 kernel's: the speed over it of the
    dense kernel that would run (:data:`meanfield.kernels.attention.FUSED32_SPEEDUP` in float32, ``1 /``
    :data:`meanfield.kernels.attention.BLAS_SPHERE_SLOWDOWN` for the BLAS kernel without its flash tiles; ``auto``
    passes it, :func:`meanfield.kernels.attention._dense_sphere_speedup`).  ``tolerance``: the accuracy the sphere kernels are
    asked for (``model.tolerance``), which sets their degrees and caps (it had been taken as 1e-12 whatever was asked).
    """
    estimate = estimate_causal_sphere_seconds if is_causal(mask) else estimate_sphere_seconds
    est = estimate(n, beta, heads, tolerance=tolerance)
    est["dense"] = est["dense"] / float(dense_speedup)
    return min(est, key=est.get)
