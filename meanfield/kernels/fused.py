r"""Fused float64 softmax velocity for small ``d`` with a vectorisable ``exp``.

:func:`velocity_fused` computes the ``softmax`` law of :mod:`meanfield.kernels.attention`

.. math::

    v_i = \sum_h \frac{\sum_j a_j e^{\beta s^h_{ij}} V_h x_j}{\sum_j a_j e^{\beta s^h_{ij}}},
    \qquad s^h_{ij} = x_i^\top B_h x_j,

in one numba pass per row (score → ``exp`` → accumulate over column chunks,
rows spread over the cores by ``prange``), with :math:`O(n\,d)` memory.  It is
meant for small ``d`` (≤ 8, especially 3), where the two thin GEMMs of
:func:`meanfield.kernels.attention.velocity_blas` cost as much as the exponentials.
The ``pooled`` law is assembled from the same passes, one per head (their means and row sums,
:func:`velocity_fused`); the other laws are the float32 kernel's (:mod:`meanfield.kernels.fused32`) and BLAS's.

numba's ``math.exp`` is a scalar libm call, so the kernel uses its own
vectorisable exponential (:func:`exp_nonpositive_scalar`): Cody–Waite reduction
:math:`z = k\ln 2 + r`, :math:`|r|\le\ln 2/2`, a degree-13 Taylor polynomial (its
high terms in Estrin's form), and :math:`2^k` built from integer bits (two factors, so that the
subnormal range down to :math:`z=-745` is handled; below that the result is 0).
Its relative error is below about 2 ulp on the normal range (tested against
``np.exp``).  The range reduction is compiled with ``fastmath={"contract"}``
only (FMA contraction, no reassociation, which would fold the rounding trick
away); only the final dot-product sums are compiled with full ``fastmath``.

Rows are shifted by :math:`c_i=\|\beta B_h^\top x_i\|\max_j\|x_j\|\ge\max_j\beta s^h_{ij}`,
so that every exponent is ≤ 0.  Where the shifted row sum underflows (below ``1e-200``: the bound
overshot the row's maximum by more than 460, as it does for most rows of clustered tokens at large β),
that (row, head) term is summed once more on the same thread, shifted by the row's own largest score over the
tokens with mass (one score pass without ``exp``; the exponents of tokens of mass 0 above it clamped at 0, their
terms weighing 0); a row after one that needed it takes it first (:data:`PREDICT_ROWS`).  A term that still
underflows (the row's top mass below 1e-200) is recomputed in NumPy, shifted by
:math:`\max_j(\beta s^h_{ij}+\ln a_j)` — never silently wrong.  (These terms had all gone to that
single-threaded twin: 59 % of the rows of five clusters at β = 1024, 19–21× slower than the ``local`` kernel.)

With ``mask="causal"`` (Karagodin, Polyanskiy and Rigollet, *Clustering in Causal
Attention Masking*, arXiv 2411.04990) row :math:`i` runs its column chunks over
:math:`j\le i` only (half the pairs; the shift :math:`c_i` still bounds the prefix's
scores), and the row blocks are visited in the order 0, B-1, 1, B-2, … so that the
static ``prange`` chunks carry equal work.
"""
from __future__ import annotations

import numpy as np
from numba import prange, types

from meanfield.kernels.jit import bitcast, jit, kernel_threads, pjit
from meanfield.kernels.inputs import check_tokens, is_causal, token_masses
from meanfield.heads import HeadStack

__all__ = ["velocity_fused", "exp_nonpositive", "exp_nonpositive_scalar", "exp_flushed", "FLUSH_BELOW", "CHUNK", "FUSED_KINDS"]

#: columns per chunk of the fused loop (score, exp and accumulate buffers stay in L1)
CHUNK = 512
#: the laws of :func:`velocity_fused` (float64; the float32 kernel, :mod:`meanfield.kernels.fused32`, has every law)
FUSED_KINDS = ("softmax", "pooled")
#: the rows :func:`velocity_fused` redoes in NumPy (:func:`_exact_rows`) go through it in blocks of this many scores
#: (32 MB in float64): all of them at once had made a (rows × n) array, up to n × n
EXACT_ROWS_ELEMENTS = 1 << 22
#: shifted row sums below this are summed again, shifted by the row's own maximum
_UNDERFLOW = 1e-200
#: a row whose sum underflowed under the Cauchy–Schwarz shift makes the next one take its own maximum first (one score
#: pass, no ``exp``), up to the next multiple of this many rows (the row blocks are multiples of it: the same shifts,
#: and so the same result to the last bit, for any number of threads)
PREDICT_ROWS = 16

_LOG2E = 1.4426950408889634
# Cody–Waite split of ln 2: LN2_HI has trailing zero bits so that k * LN2_HI is exact for |k| < 2^11
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_ZMIN = -746.0
#: the score passes flush ``exp`` below ``exp(FLUSH_BELOW)`` to 0 (:func:`exp_flushed`): no subnormal results,
#: nor subnormal products with weights above 1e-47
FLUSH_BELOW = -600.0
#: 1.5·2^52: adding it rounds to an integer k held in the low mantissa bits
_SHIFTER = 6755399441055744.0
#: the bits of 1.5·2^52, less 2048 (so that bits(shifter + k) - this = k + 2048 > 0)
_SHIFTER_BITS = np.uint64(0x4338000000000000 - 2048)
_ONE = np.uint64(1)
_MANTISSA = np.uint64(52)

# 1/m! for m = 2..13
_C2 = 1.0 / 2
_C3 = 1.0 / 6
_C4 = 1.0 / 24
_C5 = 1.0 / 120
_C6 = 1.0 / 720
_C7 = 1.0 / 5040
_C8 = 1.0 / 40320
_C9 = 1.0 / 362880
_C10 = 1.0 / 3628800
_C11 = 1.0 / 39916800
_C12 = 1.0 / 479001600
_C13 = 1.0 / 6227020800


#: register bitcasts between float64 and uint64 (vectorise)
_bits_to_float = bitcast(types.uint64, types.float64)
_float_to_bits = bitcast(types.float64, types.uint64)


@jit(fastmath={"contract"})
def exp_nonpositive_scalar(z):  # pragma: no cover - compiled
    r"""``exp(z)`` for ``z ≤ 0`` (below -746: 0), branch-free so that loops calling it vectorise.

    Cody–Waite reduction with :math:`k=\mathrm{round}(z\log_2e)`, a degree-13 Taylor
    polynomial on :math:`|r|\le\ln2/2` (truncation error < 1e-17; its terms from :math:`r^4` on
    summed in Estrin's form, :math:`1 + (r + r^2(\ldots))` last), and :math:`2^k` built
    from integer bits as :math:`2^{\lfloor k/2\rfloor}\,2^{k-\lfloor k/2\rfloor}` (both
    factors normal for k ≥ -1077: subnormal results are right).

    Every step is a SIMD instruction on AVX2: ``k`` is rounded by the shifter
    :math:`1.5\cdot2^{52}` (adding it leaves ``k`` in the low bits of the sum, read by
    a bitcast), and the halving of ``k + 2048`` is a logical shift of an unsigned
    integer.  (A float → int64 conversion or a signed 64-bit shift has no AVX2
    instruction, and would make the loop scalar.)  Compiled without reassociation
    (``fastmath={"contract"}``), which would fold the shifter away.
    """
    z = _ZMIN if z < _ZMIN else z  # NaN passes through (and poisons the row sum)
    t = z * _LOG2E + _SHIFTER  # 1.5·2^52 + k, k = round(z log2 e)
    kf = t - _SHIFTER
    r = (z - kf * _LN2_HI) - kf * _LN2_LO
    # the degree-13 Taylor polynomial: its terms r^4 ... r^13 in Estrin's form (short dependency
    # chains: 1.2x faster than Horner's in the vectorised loops), the large low terms added last
    r2 = r * r
    r4 = r2 * r2
    tail = ((_C4 + _C5 * r) + (_C6 + _C7 * r) * r2) + ((_C8 + _C9 * r) + (_C10 + _C11 * r) * r2) * r4 + (_C12 + _C13 * r) * (r4 * r4)
    p = 1.0 + (r + r2 * ((_C2 + _C3 * r) + r2 * tail))
    u = _float_to_bits(t) - _SHIFTER_BITS  # k + 2048 ≥ 971
    half = u >> _ONE  # ⌊k/2⌋ + 1024
    return (p * _bits_to_float((half - _ONE) << _MANTISSA)) * _bits_to_float((u - half - _ONE) << _MANTISSA)


@jit(fastmath={"contract"})
def _exp_array(z, out):  # pragma: no cover - compiled
    for j in range(z.size):
        out[j] = exp_nonpositive_scalar(z[j])


def exp_nonpositive(z: np.ndarray) -> np.ndarray:
    """The kernel's ``exp`` on a 1-d float64 array of values ≤ 0 (for tests and checks)."""
    z = np.ascontiguousarray(z, dtype=np.float64).ravel()
    out = np.empty_like(z)
    _exp_array(z, out)
    return out


@jit(fastmath={"contract"})
def exp_flushed(z):  # pragma: no cover - compiled
    r"""``exp(z)`` for ``z ≤ 0``, and exactly 0 below :data:`FLUSH_BELOW` (:math:`e^{-600}\approx3\cdot10^{-261}`):
    the score passes' ``exp``.

    A term that small is nothing beside the row's leading one (the shift makes it about 1; rows whose sum
    falls below ``1e-200`` are recomputed exactly, so a flushed term weighs under :math:`10^{-60}` of its
    row), while a subnormal result, or a subnormal product of a term with a token's weight, costs a
    microcode assist of some hundred cycles: on uniform tokens at β = 512 the 4 % of pairs whose ``exp``
    was subnormal made the fused kernel 9× slower, and at d = 64, β = 800 the value products of terms near
    :math:`e^{-700}` made the float64 tiles 2× slower even when flushed at the normal range's edge.
    Branch-free (a max and a select).
    """
    e = exp_nonpositive_scalar(max(z, FLUSH_BELOW))
    return e if z >= FLUSH_BELOW else 0.0


@jit(fastmath={"contract"})
def _score_exp3(q0, q1, q2, c, x0, x1, x2, m, e):  # pragma: no cover - compiled
    """d = 3: ``e[j] = exp(q · x_j - c)`` for the chunk (slices ``x0, x1, x2`` of the coordinates; :func:`exp_flushed`)."""
    for j in range(m):
        e[j] = exp_flushed(q0 * x0[j] + q1 * x1[j] + q2 * x2[j] - c)


@jit(fastmath={"contract"})
def _score_exp3_clamped(q0, q1, q2, c, x0, x1, x2, m, e):  # pragma: no cover - compiled
    """:func:`_score_exp3` with the exponents clamped at 0 (the redo at a row's own maximum over the tokens with mass)."""
    for j in range(m):
        e[j] = exp_flushed(min(q0 * x0[j] + q1 * x1[j] + q2 * x2[j] - c, 0.0))


@jit(fastmath=True)
def _accumulate3(e, w0, w1, w2, w3, m, acc):  # pragma: no cover - compiled
    """d = 3: ``acc += Σ_j e_j (a_j x_j, a_j)`` (reassociated sums: vectorised)."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    for j in range(m):
        ej = e[j]
        s0 += ej * w0[j]
        s1 += ej * w1[j]
        s2 += ej * w2[j]
        s3 += ej * w3[j]
    acc[0] += s0
    acc[1] += s1
    acc[2] += s2
    acc[3] += s3


@jit(fastmath={"contract"})
def _score_exp(q, xt, j0, m, c, z, e):  # pragma: no cover - compiled
    """Any d: scores into ``z`` (:func:`_scores`), then ``e = exp(z)``."""
    _scores(q, xt, j0, m, c, z)
    for j in range(m):
        e[j] = exp_flushed(z[j])


@jit(fastmath={"contract"})
def _scores(q, xt, j0, m, c, z):  # pragma: no cover - compiled
    """Any d: ``z[j] = q · x_{j0+j} - c`` (one pass per group of ≤ 4 coordinates), in the precision of the arrays.

    Also the score pass of the float32 kernel (:mod:`meanfield.kernels.fused32`): numba compiles
    it once per argument type.
    """
    d = q.shape[0]
    j1 = j0 + m
    for j in range(m):
        z[j] = -c
    k = 0
    while k + 4 <= d:
        q0, q1, q2, q3 = q[k], q[k + 1], q[k + 2], q[k + 3]
        x0, x1, x2, x3 = xt[k, j0:j1], xt[k + 1, j0:j1], xt[k + 2, j0:j1], xt[k + 3, j0:j1]
        for j in range(m):
            z[j] += q0 * x0[j] + q1 * x1[j] + q2 * x2[j] + q3 * x3[j]
        k += 4
    while k < d:
        qk = q[k]
        xk = xt[k, j0:j1]
        for j in range(m):
            z[j] += qk * xk[j]
        k += 1


@jit(fastmath=True)
def _accumulate(e, wx, j0, m, acc):  # pragma: no cover - compiled
    """Any d: ``acc[k] += Σ_j e_j wx[k, j0+j]`` in groups of ≤ 4 rows (reassociated sums: vectorised)."""
    rows = wx.shape[0]
    j1 = j0 + m
    k = 0
    while k + 4 <= rows:
        w0, w1, w2, w3 = wx[k, j0:j1], wx[k + 1, j0:j1], wx[k + 2, j0:j1], wx[k + 3, j0:j1]
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for j in range(m):
            ej = e[j]
            s0 += ej * w0[j]
            s1 += ej * w1[j]
            s2 += ej * w2[j]
            s3 += ej * w3[j]
        acc[k] += s0
        acc[k + 1] += s1
        acc[k + 2] += s2
        acc[k + 3] += s3
        k += 4
    while k < rows:
        wk = wx[k, j0:j1]
        total = 0.0
        for j in range(m):
            total += e[j] * wk[j]
        acc[k] += total
        k += 1


@jit(fastmath={"contract"})
def _head_sums(q, c, xt, wx, jend, chunk, z, e, acc, clamp):  # pragma: no cover - compiled
    r"""``acc = [Σ_j t_j a_j x_j | Σ_j t_j a_j]`` over the columns ``[0, jend)`` of one row and head, with the terms
    :math:`t_j = e^{q\cdot x_j - c}` (:func:`exp_flushed`), by column chunks.  ``clamp``: exponents above 0 taken as 0
    (a shift by the largest score over the tokens with mass leaves those of mass 0 above it; their terms weigh 0,
    where the ``exp`` of a large positive exponent would be inf and 0·inf NaN)."""
    d = q.shape[0]
    for k in range(d + 1):
        acc[k] = 0.0
    for j0 in range(0, jend, chunk):
        m = min(chunk, jend - j0)
        j1 = j0 + m
        if clamp and d == 3:
            _score_exp3_clamped(q[0], q[1], q[2], c, xt[0, j0:j1], xt[1, j0:j1], xt[2, j0:j1], m, e)
            _accumulate3(e, wx[0, j0:j1], wx[1, j0:j1], wx[2, j0:j1], wx[3, j0:j1], m, acc)
        elif clamp:
            _scores(q, xt, j0, m, c, z)
            for j in range(m):
                e[j] = exp_flushed(min(z[j], 0.0))
            _accumulate(e, wx, j0, m, acc)
        elif d == 3:
            _score_exp3(q[0], q[1], q[2], c, xt[0, j0:j1], xt[1, j0:j1], xt[2, j0:j1], m, e)
            _accumulate3(e, wx[0, j0:j1], wx[1, j0:j1], wx[2, j0:j1], wx[3, j0:j1], m, acc)
        else:
            _score_exp(q, xt, j0, m, c, z, e)
            _accumulate(e, wx, j0, m, acc)


@jit(fastmath={"contract"})
def _row_max(q, xt, wx, jend, chunk, z):  # pragma: no cover - compiled
    r"""The largest score :math:`q\cdot x_j` over the columns ``[0, jend)`` whose mass ``wx[d, j]`` is not 0, -inf where
    there is none: one score pass, no ``exp``, in the precision of the arrays.

    Shared by the float64 and float32 kernels (:mod:`meanfield.kernels.fused32`): numba compiles it once per type.
    """
    d = q.shape[0]
    best = -np.inf
    for j0 in range(0, jend, chunk):
        m = min(chunk, jend - j0)
        _scores(q, xt, j0, m, 0.0, z)
        for j in range(m):
            if z[j] > best and wx[d, j0 + j] > 0.0:
                best = z[j]
    return best


@pjit
def _fused_kernel(x, xt, wx, B, V, beta, xmax, rows_per_block, chunk, causal, logs):  # pragma: no cover - compiled
    r"""The softmax velocity of every row (``logs[h, i]``: the head's :math:`\ln\sum_j a_j e^{\beta s_{ij}}`, where it did not
    underflow; ``low[i, h]``: where it did, even shifted by the row's own maximum)."""
    n, d = x.shape
    H = B.shape[0]
    out = np.zeros((n, d))
    low = np.zeros((n, H), dtype=np.bool_)
    log_underflow = np.log(_UNDERFLOW)
    nblocks = (n + rows_per_block - 1) // rows_per_block
    for p in prange(nblocks):
        # causal: cheap and expensive blocks alternate (0, B-1, 1, B-2, …), so that static chunks balance
        half = np.int64(p) // 2  # (prange indices are unsigned: int64 keeps the arithmetic integral)
        b = (half if p % 2 == 0 else nblocks - 1 - half) if causal else np.int64(p)
        z = np.empty(chunk)
        e = np.empty(chunk)
        q = np.empty(d)
        acc = np.empty(d + 1)
        predicted = np.zeros(H, dtype=np.bool_)
        for i in range(b * rows_per_block, min(n, (b + 1) * rows_per_block)):
            jend = i + 1 if causal else n
            for h in range(H):
                qn = 0.0
                for k in range(d):
                    tk = 0.0
                    for l in range(d):
                        tk += x[i, l] * B[h, l, k]
                    tk *= beta
                    q[k] = tk
                    qn += tk * tk
                bound = np.sqrt(qn) * xmax
                c = bound
                if i % PREDICT_ROWS == 0:
                    predicted[h] = False
                exact = False
                if predicted[h]:  # the row before needed its own maximum: take it first (one score pass, no exp)
                    best = _row_max(q, xt, wx, jend, chunk, z)
                    if best > -np.inf:
                        c = best
                        exact = True
                _head_sums(q, c, xt, wx, jend, chunk, z, e, acc, exact)
                if not exact and not acc[d] >= _UNDERFLOW:
                    # the Cauchy–Schwarz shift overshot the row's maximum by more than e^-460: once more, shifted by
                    # the row's own largest score over the tokens with mass (its term is then 1 times its mass), the
                    # exponents clamped at 0 (those of tokens of mass 0 above it, and the rounding of the top one's)
                    best = _row_max(q, xt, wx, jend, chunk, z)
                    if best > -np.inf:
                        c = best
                        exact = True
                        _head_sums(q, c, xt, wx, jend, chunk, z, e, acc, True)
                den = acc[d]
                # would the bound have underflowed this row?  Then the next row takes its maximum first
                predicted[h] = exact and den > 0.0 and np.log(den) - (bound - c) < log_underflow
                if not den >= _UNDERFLOW:  # (its top mass below 1e-200, or none in view: the NumPy twin)
                    low[i, h] = True
                    continue
                logs[h, i] = c + np.log(den)
                for k in range(d):
                    vk = 0.0
                    for l in range(d):
                        vk += V[h, k, l] * acc[l]
                    out[i, k] += vk / den
    return out, low


def _exact_rows(
    x: np.ndarray, a: np.ndarray, B: np.ndarray, V: np.ndarray, beta: float, idx: np.ndarray, causal: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    r"""Softmax term of one head for rows ``idx``, shifted by the exact :math:`\max_j(\beta s_{ij} + \ln a_j)` (NumPy; causal:
    over j ≤ i), and the rows' :math:`\ln\sum_j a_j e^{\beta s_{ij}}`.  The masses are in the shift: where a token of mass 0
    held the row's top score, the plain maximum left every term with mass at 0 (0/0)."""
    s = beta * ((x[idx] @ B) @ x.T)
    if causal:
        s[np.arange(x.shape[0])[None, :] > idx[:, None]] = -np.inf
    with np.errstate(divide="ignore"):
        s += np.log(a)  # -inf for a token of mass 0
    top = s.max(axis=1, keepdims=True)
    top[~np.isfinite(top)] = 0.0  # a row that sees no mass: every term e^{-inf} = 0
    s -= top
    np.exp(s, out=s)
    total = s.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (s @ (x @ V.T)) / total, (top + np.log(total))[:, 0]


def velocity_fused(
    x: np.ndarray,
    heads: HeadStack,
    *,
    beta: float,
    kind: str = "softmax",
    weights: np.ndarray | None = None,
    chunk: int = CHUNK,
    mask: str = "none",
    row_logs: np.ndarray | None = None,
) -> np.ndarray:
    r"""Softmax or pooled attention velocity by the fused small-``d`` kernel (float64).

    Same result as ``velocity_numpy(x, heads, beta=beta, kind=kind, weights=weights, mask=mask)``.  The pooled law
    (Massucco et al., arXiv 2605.18870: the effective-mobility form) is the heads' softmax means weighed by their
    partition functions, which the kernel's row sums give:

    .. math::

        v_i = \frac{\sum_h w_h Z^h_i\, m^h_i}{\sum_h w_h Z^h_i},\qquad
        Z^h_i = \sum_j a_j e^{\beta s^h_{ij}},\quad m^h_i = \frac{\sum_j a_j e^{\beta s^h_{ij}} V_h x_j}{Z^h_i},

    summed in log space (:math:`\ln Z^h_i` less its largest over the heads of nonzero weight), one kernel pass per head.

    Parameters
    ----------
    x : (n, d) array
        Tokens (need not be on the sphere); meant for small ``d`` (≤ 8).
    heads : HeadStack
        ``B`` (H, d, d), ``V`` (H, d, d); any ``H ≥ 1``; the head weights ``w`` are used by ``pooled`` only.
    beta : float
        Inverse temperature.
    kind : {"softmax", "pooled"}
        The attention law.
    weights : (n,) array, optional
        Token masses :math:`a_j` (default :math:`1/n`).
    chunk : int
        Columns per chunk of the inner loop.
    mask : {"none", "causal"}
        ``"causal"``: row :math:`i` sums over :math:`j\le i` only (half the pairs).
    row_logs : (H, n) array, optional
        Filled with every head's :math:`\ln\sum_j a_j e^{\beta s^h_{ij}}` per row (the sums the velocity
        takes anyway; the energy of :mod:`meanfield.analysis.energy`), without a mask; otherwise left as it is.
        (``pooled``: a head of weight 0 is summed for it too.)

    Returns
    -------
    (n, d) array
        The ambient velocity :math:`v_i`.
    """
    if kind not in FUSED_KINDS:
        raise ValueError(f"the fused float64 kernel computes {' and '.join(FUSED_KINDS)}, got kind={kind!r}")
    x = check_tokens(x, heads, kind, beta=beta)
    causal = is_causal(mask)
    n, d = x.shape
    a = token_masses(n, weights, kind=kind, causal=causal)
    if n == 0:
        return np.zeros((0, d))
    beta = float(beta)
    sums = _HeadSums(x, a, beta, max(8, int(chunk)), causal)
    B = np.ascontiguousarray(heads.B, dtype=float)
    V = np.ascontiguousarray(heads.V, dtype=float)
    logs = np.full((B.shape[0], n), np.nan)
    if kind == "softmax":
        out = sums(B, V, logs)
    else:
        w = np.asarray(heads.w, dtype=float)  # (not all 0: check_tokens refused that)
        w = w / w.max()  # the law is the same for c·w: weights near the largest float had summed to inf (rows of 0)
        wanted = [h for h in range(B.shape[0]) if w[h] != 0 or (row_logs is not None and not causal)]
        means = {h: sums(B[h:h + 1], V[h:h + 1], logs[h:h + 1]) for h in wanted}
        weighing = [h for h in wanted if w[h] != 0]
        top = np.max(logs[weighing], axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):  # (a row that sees no mass: 0/0, as in the NumPy twin)
            scale = [w[h] * np.exp(logs[h] - top) for h in weighing]
            out = sum(s[:, None] * means[h] for s, h in zip(scale, weighing)) / sum(scale)[:, None]
    if row_logs is not None and not causal:
        row_logs[...] = logs
    return out


class _HeadSums:
    r"""One fused pass over a stack of heads, with the tokens' operands built once: the sum of the heads' softmax means,
    and their :math:`\ln\sum_j a_j e^{\beta s^h_{ij}}` per row into ``logs``."""

    def __init__(self, x: np.ndarray, a: np.ndarray, beta: float, chunk: int, causal: bool) -> None:
        self.x, self.a, self.beta, self.chunk, self.causal = x, a, beta, chunk, causal
        self.xt = np.ascontiguousarray(x.T)
        self.wx = np.ascontiguousarray(np.vstack([x.T * a, a[None, :]]))  # (d+1, n): a_j x_j | a_j
        self.xmax = float(np.sqrt(np.max(np.sum(x * x, axis=1))))

    def __call__(self, B: np.ndarray, V: np.ndarray, logs: np.ndarray) -> np.ndarray:
        x, n = self.x, self.x.shape[0]
        with kernel_threads(float(n) * n * B.shape[0] * (0.5 if self.causal else 1.0)) as threads:
            rows = PREDICT_ROWS * -(-min(64, -(-n // (4 * threads))) // PREDICT_ROWS)  # 16, 32, 48 or 64 (PREDICT_ROWS)
            out, low = _fused_kernel(x, self.xt, self.wx, B, V, self.beta, self.xmax, rows, self.chunk, self.causal, logs)
        if low.any():  # rows that underflowed even shifted by their own maximum: shifted by max_j (βs_ij + ln a_j), in NumPy
            block = max(1, EXACT_ROWS_ELEMENTS // n)
            for h in range(B.shape[0]):
                redo = np.flatnonzero(low[:, h])
                for start in range(0, redo.size, block):
                    idx = redo[start:start + block]
                    term, logs[h, idx] = _exact_rows(x, self.a, B[h], V[h], self.beta, idx, self.causal)
                    out[idx] += term
        return out
