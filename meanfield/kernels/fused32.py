r"""Fused float32 attention velocity for small ``d``: every law, float32 scores and ``exp``, float64 sums.

:func:`velocity_fused32` computes the four laws of :mod:`meanfield.kernels.attention`,

.. math::

    v_i^{\mathrm{softmax}} = \sum_h V_h\frac{\sum_j a_j e^{\beta s^h_{ij}} x_j}{\sum_j a_j e^{\beta s^h_{ij}}},\qquad
    v_i^{\mathrm{unnorm}} = \sum_h V_h\sum_j a_j e^{\beta s^h_{ij}} x_j,\qquad
    v_i^{\mathrm{relu}} = \sum_h V_h\sum_j a_j (s^h_{ij})_+ x_j,

    v_i^{\mathrm{pooled}} = \frac{\sum_h w_h\sum_j a_j e^{\beta s^h_{ij}} V_h x_j}{\sum_h w_h\sum_j a_j e^{\beta s^h_{ij}}},
    \qquad s^h_{ij} = x_i^\top B_h x_j,

in one numba pass per row, like the float64 kernel of :mod:`meanfield.kernels.fused`,
but with the score, the exponential and the sums over a column chunk in float32 —
twice the SIMD lanes (8 on AVX2, 16 on AVX-512) — and every chunk's partial sums
added into float64 accumulators.  The masks of Karagodin, Polyanskiy and Rigollet
(*Clustering in Causal Attention Masking*, arXiv 2411.04990) and token masses are
supported as in the float64 kernels.

**The float32 exponential** (:func:`exp32_nonpositive_scalar`, branch-free so that the
loops vectorise): Cody–Waite reduction :math:`z = k\ln2 + r`, :math:`|r|\le\ln 2/2`,
with :math:`\ln 2` split in a 9-bit head and a tail; the degree-7 Taylor polynomial
of :math:`e^r` (truncation below :math:`5\cdot10^{-9}`) in Horner form; :math:`2^k` from
the exponent bits.  Below :math:`z=-87` (the float32 normal range) the result is 0.
Its relative error is a few float32 ulp (:math:`\lesssim 3\cdot10^{-7}`, tested against ``np.exp``).

**Accuracy against float64.**  Each term carries the rounding of its float32
score, :math:`|\delta e_j|/e_j \lesssim (1+|\beta s_{ij}|+c_i)\,2^{-24}`, and each chunk
sum (``CHUNK32`` terms, float32) a relative :math:`\lesssim 2^{-24}\sqrt{m}`; the chunks
add in float64.  The result is within about :math:`10^{-6}(1+\beta\|B\|)` of the
float64 law relative to the size of the summed terms, :math:`\max_i\sum_h\|V_h\|_2T^h_i` with
:math:`T^h_i=1` for softmax and pooled, :math:`\sum_ja_je^{\beta s^h_{ij}}` for unnormalized and
:math:`\sum_ja_j(s^h_{ij})_+` for relu (the tests bound it at β up to 64).  The error is absolute at that
scale: where the velocities cancel far below it (antipodal tokens at small β, :math:`v\approx(\beta/d)x`),
it is larger relative to :math:`\max_i\|v_i\|` (79× at β = 0.01, d = 100).
For ``relu`` the same holds without the β factor.

Rows are shifted by :math:`c_i=\|\beta B_h^\top x_i\|\max_j\|x_j\|\ge\max_j\beta s^h_{ij}`.
Where a shifted row sum falls below ``1e-20`` (float32 terms underflow at
:math:`e^{-87}`: the bound overshot the row's maximum, as it does for most rows at large β
where :math:`B_h^\top x_i` points at no token), that row and head is summed once more in the
same thread, in float32, shifted by its own largest score over the tokens of nonzero mass
(one score pass without ``exp``); a row after one that needed it takes it first (:data:`PREDICT_ROWS`).  A row
that still underflows (its mass in view tiny or none) is recomputed in float64
(:func:`meanfield.kernels.reference.velocity_numpy` on those rows) — never silently wrong.
(These rows had all gone to that single-threaded twin: at d = 8, β = 1024 the float32 call
took 15× the float64 one.)
Where the shifted scores may fall below -:data:`FLOAT32_SCALE_DEPTH`, the masses are multiplied by a power
of two (:func:`float32_mass_exponent`), so that no product of a term with a weight is subnormal.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange, types

from meanfield.heads import HeadStack
from meanfield.kernels.inputs import check_float32_sums, check_tokens, float32_sums_bound, is_causal, token_masses
from meanfield.kernels.fused import PREDICT_ROWS, _row_max, _scores
from meanfield.kernels.jit import bitcast, jit, kernel_threads, pjit
from meanfield.kernels.reference import velocity_numpy

__all__ = ["velocity_fused32", "exp32_nonpositive", "exp32_nonpositive_scalar", "float32_mass_exponent", "float32_scaled_masses", "CHUNK32", "FUSED32_KINDS", "FLOAT32_SCALE_DEPTH", "FLOAT32_SUMS_EXPONENT"]

#: columns per chunk: the float32 partial sums cover this many terms before they go to float64
CHUNK32 = 256
#: the laws the kernel computes, by the code the compiled loop takes
FUSED32_KINDS = {"softmax": 0, "unnormalized": 1, "pooled": 2, "relu": 3}
#: shifted row sums below this are summed again, shifted by the row's own maximum
_UNDERFLOW32 = 1e-20

_F = np.float32
_LOG2E = _F(1.4426950408889634)
# Cody–Waite split of ln 2: the head has 9 significant bits, so k * head is exact for |k| < 2^15
_LN2_HI = _F(0.693359375)
_LN2_LO = _F(0.6931471805599453 - 0.693359375)
_ZMIN = _F(-87.0)
_HALF = _F(0.5)
_ONE = _F(1.0)
_ZERO = _F(0.0)
# 1/m! for m = 2..7
_C2 = _F(1.0 / 2)
_C3 = _F(1.0 / 6)
_C4 = _F(1.0 / 24)
_C5 = _F(1.0 / 120)
_C6 = _F(1.0 / 720)
_C7 = _F(1.0 / 5040)


#: register bitcast of an int32 as a float32 (vectorises)
_bits_to_float32 = bitcast(types.int32, types.float32)


#: float32 sums with scaled masses are kept below 2^FLOAT32_SUMS_EXPONENT (:func:`float32_mass_exponent`; float32 reaches 2^128)
FLOAT32_SUMS_EXPONENT = 60
#: the float32 kernels scale the masses only where the shifted scores may fall below -FLOAT32_SCALE_DEPTH: above
#: it a term is at least 4e-18, and its products with weights above 3e-21 are normal
FLOAT32_SCALE_DEPTH = 40.0


def float32_mass_exponent(a: np.ndarray, heads: HeadStack, x_norm_max: float) -> int:
    r"""The power of two :math:`k \ge 0` the float32 kernels multiply the masses by, where their shifted scores may
    fall below -:data:`FLOAT32_SCALE_DEPTH`: the largest with
    :math:`2^k` times :func:`~meanfield.kernels.inputs.float32_sums_bound` (a bound on every sum of the kernels) is at most
    :math:`2^{60}`.  At most 120.

    A term near the flushed edge of the float32 ``exp`` (:math:`e^{-87}`) times a weight :math:`a_j` (about
    :math:`1/n`) is subnormal, and each subnormal product costs a microcode assist: the float32 kernels ran
    5–50× slower in the band of β where the scores reach that edge.  Scaled by :math:`2^k` (exact) those products
    stay normal; the kernels carry :math:`k\ln 2` in their shifts.
    """
    bound = float32_sums_bound(a, heads, x_norm_max, kind="softmax")
    if not math.isfinite(bound) or bound <= 0.0:
        return 0
    return min(120, max(0, math.floor(FLOAT32_SUMS_EXPONENT - math.log2(bound))))


def float32_scaled_masses(a: np.ndarray, heads: HeadStack, x_norm_max: float, depth: float) -> tuple[np.ndarray, int]:
    r"""The masses a float32 kernel takes, :math:`2^k a`, and :math:`k`: :func:`float32_mass_exponent` where its shifted
    scores may fall below ``-depth`` < -:data:`FLOAT32_SCALE_DEPTH` (``depth`` a bound on minus the scores), else ``a``
    itself and 0."""
    if not depth > FLOAT32_SCALE_DEPTH:
        return a, 0
    exponent = float32_mass_exponent(a, heads, x_norm_max)
    return (a * math.ldexp(1.0, exponent) if exponent else a), exponent


@jit(fastmath={"contract"})
def exp32_nonpositive_scalar(z):  # pragma: no cover - compiled
    r"""float32 ``exp(z)`` for ``z ≤ 0`` (0 below -87, 1 above 0), branch-free so that loops calling it vectorise.

    Cody–Waite reduction with :math:`k=\mathrm{round}(z\log_2e)`, the degree-7 Taylor
    polynomial on :math:`|r|\le\ln2/2`, and :math:`2^k` built from the exponent bits.
    """
    keep = _F(z >= _ZMIN)
    z = _ZMIN if z < _ZMIN else z
    # a score past the row's shift by its float32 rounding counts as the shift (z > 88 had overflowed the exponent
    # bits into inf or a negative weight); the Model holds β‖B_h‖ to FLOAT32_SCORE_BOUND_LIMIT, where this is round-off
    z = _ZERO if z > _ZERO else z
    ki = np.int32(z * _LOG2E - _HALF)  # z ≤ 0: truncating y - 1/2 rounds y to nearest
    kf = _F(ki)
    r = (z - kf * _LN2_HI) - kf * _LN2_LO
    p = _C7
    p = p * r + _C6
    p = p * r + _C5
    p = p * r + _C4
    p = p * r + _C3
    p = p * r + _C2
    p = p * r + _ONE
    p = p * r + _ONE
    return keep * (p * _bits_to_float32((ki + np.int32(127)) << np.int32(23)))


@jit(fastmath={"contract"})
def _exp32_array(z, out):  # pragma: no cover - compiled
    for j in range(z.size):
        out[j] = exp32_nonpositive_scalar(z[j])


def exp32_nonpositive(z: np.ndarray) -> np.ndarray:
    """The kernel's float32 ``exp`` on a 1-d array of values ≤ 0 (for tests and checks)."""
    z = np.ascontiguousarray(z, dtype=np.float32).ravel()
    out = np.empty_like(z)
    _exp32_array(z, out)
    return out


@jit(fastmath={"contract"})
def _score_exp32_3(q0, q1, q2, c, x0, x1, x2, m, e):  # pragma: no cover - compiled
    """d = 3: ``e[j] = exp(q · x_j - c)`` in one pass (score and exponential fused)."""
    for j in range(m):
        e[j] = exp32_nonpositive_scalar(q0 * x0[j] + q1 * x1[j] + q2 * x2[j] - c)


@jit(fastmath={"contract"})
def _exp32_inplace(z, m):  # pragma: no cover - compiled
    for j in range(m):
        z[j] = exp32_nonpositive_scalar(z[j])


@jit(fastmath=True)
def _relu32_inplace(z, m):  # pragma: no cover - compiled
    for j in range(m):
        z[j] = z[j] if z[j] > _ZERO else _ZERO


@jit(fastmath=True)
def _accumulate32(e, wx, j0, m, acc):  # pragma: no cover - compiled
    """``acc[k] += Σ_j e_j wx[k, j0+j]``: float32 sums over the chunk, added into float64 ``acc``."""
    rows = wx.shape[0]
    j1 = j0 + m
    k = 0
    while k + 4 <= rows:
        w0, w1, w2, w3 = wx[k, j0:j1], wx[k + 1, j0:j1], wx[k + 2, j0:j1], wx[k + 3, j0:j1]
        s0 = _ZERO
        s1 = _ZERO
        s2 = _ZERO
        s3 = _ZERO
        for j in range(m):
            ej = e[j]
            s0 += ej * w0[j]
            s1 += ej * w1[j]
            s2 += ej * w2[j]
            s3 += ej * w3[j]
        acc[k] += np.float64(s0)
        acc[k + 1] += np.float64(s1)
        acc[k + 2] += np.float64(s2)
        acc[k + 3] += np.float64(s3)
        k += 4
    while k < rows:
        wk = wx[k, j0:j1]
        total = _ZERO
        for j in range(m):
            total += e[j] * wk[j]
        acc[k] += np.float64(total)
        k += 1


@jit(fastmath={"contract"})
def _head_sums32(q, c, xt, wx, jend, chunk, code, z, acc):  # pragma: no cover - compiled
    r"""``acc = [Σ_j t_j a_j x_j | Σ_j t_j a_j]`` over the columns ``[0, jend)`` of one row and head, with the terms
    :math:`t_j = e^{q\cdot x_j - c}` (``code`` 3, relu: :math:`(q\cdot x_j)_+`) in float32, by chunks added in float64."""
    d = q.shape[0]
    for k in range(d + 1):
        acc[k] = 0.0
    c32 = np.float32(c)
    for j0 in range(0, jend, chunk):
        m = min(chunk, jend - j0)
        if d == 3 and code != 3:
            j1 = j0 + m
            _score_exp32_3(q[0], q[1], q[2], c32, xt[0, j0:j1], xt[1, j0:j1], xt[2, j0:j1], m, z)
        else:
            _scores(q, xt, j0, m, c32, z)
            if code == 3:
                _relu32_inplace(z, m)
            else:
                _exp32_inplace(z, m)
        _accumulate32(z, wx, j0, m, acc)


@pjit
def _fused32_kernel(q32, shift, xt, wx, V, w, code, rows_per_block, chunk, causal, mass_scale):  # pragma: no cover - compiled
    H, n, d = q32.shape
    out = np.zeros((n, d))
    low = np.zeros(n, dtype=np.bool_)
    underflow = _UNDERFLOW32 * mass_scale  # the masses in wx carry mass_scale (a power of two), and so the row sums
    log_underflow = math.log(underflow)
    nblocks = (n + rows_per_block - 1) // rows_per_block
    for p in prange(nblocks):
        half = np.int64(p) // 2  # causal: cheap and expensive blocks alternate, so static chunks balance
        b = (half if p % 2 == 0 else nblocks - 1 - half) if causal else np.int64(p)
        z = np.empty(chunk, dtype=np.float32)
        accs = np.empty((H, d + 1))
        shifts = np.empty(H)
        predicted = np.zeros(H, dtype=np.bool_)
        num = np.zeros(d)
        for i in range(b * rows_per_block, min(n, (b + 1) * rows_per_block)):
            jend = i + 1 if causal else n
            top = -np.inf
            for h in range(H):
                if code == 2 and w[h] == 0.0:  # pooled: a head of weight 0 adds nothing (its e^{c - top} may overflow: 0·inf)
                    continue
                c = shift[h, i]
                acc = accs[h]
                if i % PREDICT_ROWS == 0:
                    predicted[h] = False
                exact = False
                if predicted[h]:  # the row before needed its own maximum: take it first (one score pass, no exp)
                    best = _row_max(q32[h, i], xt, wx, jend, chunk, z)
                    if best > -np.inf:
                        c = np.float64(best)
                        exact = True
                _head_sums32(q32[h, i], c, xt, wx, jend, chunk, code, z, acc)
                if code != 3 and not exact and not acc[d] >= underflow:
                    # the Cauchy–Schwarz shift overshot the row's maximum by more than float32's exp reaches
                    # (e^-87): once more in float32, shifted by the row's own largest score, here on this thread
                    best = _row_max(q32[h, i], xt, wx, jend, chunk, z)
                    if best > -np.inf:
                        c = np.float64(best)
                        exact = True
                        _head_sums32(q32[h, i], c, xt, wx, jend, chunk, code, z, acc)
                if code != 3:
                    if not acc[d] >= underflow:  # (a row whose mass in view is tiny or none: the NumPy twin below)
                        low[i] = True
                    # would the bound have underflowed this row?  Then the next row takes its maximum first
                    predicted[h] = exact and acc[d] > 0.0 and math.log(acc[d]) - (shift[h, i] - c) < log_underflow
                shifts[h] = c
                top = max(top, c)  # pooled: the common shift, over the heads that weigh
            den_pool = 0.0
            for k in range(d):
                num[k] = 0.0
            for h in range(H):
                if code == 2 and w[h] == 0.0:
                    continue
                acc = accs[h]
                den = acc[d]
                c = shifts[h]
                if code == 0:
                    scale = 1.0 / den if den > 0.0 else 0.0
                elif code == 1:
                    scale = np.exp(c) / mass_scale
                elif code == 2:
                    scale = w[h] * np.exp(c - top)
                    den_pool += scale * den
                else:
                    scale = 1.0
                for k in range(d):
                    vk = 0.0
                    for l in range(d):
                        vk += V[h, k, l] * acc[l]
                    if code == 2:
                        num[k] += scale * vk
                    else:
                        out[i, k] += scale * vk
            if code == 2:
                if den_pool > 0.0:
                    for k in range(d):
                        out[i, k] = num[k] / den_pool
    return out, low


def velocity_fused32(
    x: np.ndarray,
    heads: HeadStack,
    *,
    beta: float,
    kind: str = "softmax",
    weights: np.ndarray | None = None,
    chunk: int = CHUNK32,
    mask: str = "none",
) -> np.ndarray:
    """Attention velocity by the fused float32 kernel (every law; float64 result).

    The same law as ``velocity_numpy(x, heads, beta=beta, kind=kind, weights=weights, mask=mask)``
    to float32 accuracy (see the module docstring).

    Parameters
    ----------
    x : (n, d) array
        Tokens (need not be on the sphere); meant for small ``d`` (≤ 8).
    heads : HeadStack
        ``B`` (H, d, d), ``V`` (H, d, d), head weights ``w`` (H,) (``pooled`` only).
    beta : float
        Inverse temperature.
    kind : {"softmax", "unnormalized", "relu", "pooled"}
    weights : (n,) array, optional
        Token masses :math:`a_j` (default :math:`1/n`).
    chunk : int
        Columns per chunk: the float32 sums cover this many terms.
    mask : {"none", "causal"}
        ``"causal"``: row :math:`i` sums over :math:`j\\le i` only.

    Returns
    -------
    (n, d) float64 array

    Examples
    --------
    >>> import numpy as np
    >>> from meanfield.heads import HeadStack
    >>> from meanfield.geometry.sphere import sample_uniform
    >>> x = sample_uniform(500, 3, seed=0)
    >>> heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    >>> v64 = velocity_numpy(x, heads, beta=4.0)
    >>> bool(np.max(np.abs(velocity_fused32(x, heads, beta=4.0) - v64)) < 1e-5)
    True
    """
    if kind not in FUSED32_KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; choose from {sorted(FUSED32_KINDS)}")
    x = check_tokens(x, heads, kind, beta=beta)
    causal = is_causal(mask)
    n, d = x.shape
    a = token_masses(n, weights, kind=kind, causal=causal, precision="float32")
    if n == 0:
        return np.zeros((0, d))
    xmax = float(np.sqrt(np.max(np.sum(x * x, axis=1))))
    if weights is not None:  # (the default masses 1/n total 1)
        check_float32_sums(a, xmax, heads, kind)
    beta = float(beta)
    code = FUSED32_KINDS[kind]
    B = np.asarray(heads.B, dtype=float)
    V = np.ascontiguousarray(heads.V, dtype=float)
    H = B.shape[0]
    q = np.einsum("nl,hlk->hnk", x, B)  # B_hᵀ x_i, float64
    if code == 3:
        shift = np.zeros((H, n))
    else:
        q *= beta
        shift = np.sqrt(np.einsum("hnk,hnk->hn", q, q)) * xmax
    weighing = np.asarray(heads.w) != 0  # pooled: the common shift over the heads that weigh (one of weight 0 may hold the top)
    top = (shift[weighing] if weighing.any() else shift).max(axis=0)
    q32 = np.ascontiguousarray(q, dtype=np.float32)
    xt = np.ascontiguousarray(x.T, dtype=np.float32)
    # scores reach -2 max c_i: where that is deep, masses scaled by a power of two (no subnormal product with a term)
    scaled, exponent = float32_scaled_masses(a, heads, xmax, 2.0 * float(top.max())) if code != 3 else (a, 0)
    wx = np.ascontiguousarray(np.vstack([x.T * scaled, scaled[None, :]]), dtype=np.float32)  # (d+1, n): a_j x_j | a_j
    w = np.ascontiguousarray(heads.w, dtype=float)
    with kernel_threads(float(n) * n * H * (0.5 if causal else 1.0)) as threads:
        rows = PREDICT_ROWS * -(-min(64, -(-n // (4 * threads))) // PREDICT_ROWS)  # 16, 32, 48 or 64 (PREDICT_ROWS)
        out, low = _fused32_kernel(q32, np.ascontiguousarray(shift), xt, wx, V, w, code, rows, max(8, int(chunk)), causal,
                                   math.ldexp(1.0, exponent))
    if low.any():  # rows that underflowed even shifted by their own maximum (tiny or no mass in view): in float64
        idx = np.flatnonzero(low)
        out[idx] = velocity_numpy(x, heads, beta=beta, kind=kind, weights=a, mask=mask, rows=idx)
    return out
