r"""Attention velocity laws :math:`v_i` of MODEL.md §2, for particles and weighted measures.

For tokens :math:`x_j` with masses :math:`a_j` (uniform :math:`1/n` for an
empirical measure, cell masses on a grid) and heads :math:`(B_h, V_h, w_h)`:

.. math::

    \text{softmax:}\quad v_i &= \sum_h \frac{\sum_j a_j e^{\beta s^h_{ij}} V_h x_j}{\sum_j a_j e^{\beta s^h_{ij}}} \\
    \text{unnormalized:}\quad v_i &= \sum_h \sum_j a_j e^{\beta s^h_{ij}} V_h x_j \\
    \text{relu:}\quad v_i &= \sum_h \sum_j a_j \max(s^h_{ij}, 0) V_h x_j \\
    \text{pooled:}\quad v_i &= \frac{\sum_h w_h \sum_j a_j e^{\beta s^h_{ij}} V_h x_j}{\sum_h w_h \sum_j a_j e^{\beta s^h_{ij}}}

with :math:`s^h_{ij}=x_i^\top B_h x_j`.  ``softmax`` is seeds 002/000 (Thms 19,
22, 27), ``unnormalized`` seed 000 Thm 11, ``relu`` seed 000 Thm 25 (the score
enters without :math:`\beta`), ``pooled`` the effective-mobility form of seed 004.
The tokens' velocity is :math:`\dot x_i = \pm P^\perp_{x_i} v_i` (see
:mod:`solvers.particle`); this module returns the ambient :math:`v_i`.

Implementations, which the tests compare (``backend="auto"``, the default, takes
``"fused"`` for float64 softmax at ``d ≤`` :data:`FUSED_MAX_D` and ``"blas"`` otherwise):

``"fused"`` (softmax only)
    :mod:`meanfield.fused`: score → exp → accumulate in one numba pass over
    column chunks, with a vectorisable ``exp`` of its own (≤ 1 ulp).
``"blas"``
    Row blocks of scores by one GEMM, NumPy's vectorised ``exp`` in place, one
    GEMM back, blocks spread over a thread pool (NumPy and BLAS release the GIL).
    Softmax rows are shifted by the Cauchy–Schwarz bound
    :math:`c_i=\beta\|B_h^\top x_i\|\ge\max_j\beta s^h_{ij}` (exact on the
    sphere), folded into the first GEMM as an extra column, and the row sums
    come out of the second GEMM as an extra column: one pass of ``exp`` and no
    max/sum passes.  Rows whose bound is too loose to avoid underflow are
    recomputed with the exact row maximum.  Memory: one ``block × n`` buffer per
    thread, capped at :data:`BLOCK_ELEMENTS`, i.e. :math:`O(n\,d)` overall.
``"numba"``
    A fused loop, parallel over rows, with :math:`O(n\,d)` memory.  numba's
    ``exp`` is scalar on these machines, so it is slower for dense attention;
    ``meanfield bench`` measures both.
``"numpy"``
    The plain NumPy twin: GEMM → max → exp → GEMM in row blocks, one thread.
    It is the reference the other two are tested against.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

from numba import prange as numba_prange

import numpy as np

from meanfield._jit import num_threads, one_blas_thread, pjit
from meanfield.heads import HeadStack

__all__ = [
    "ATTENTION_KINDS",
    "BACKENDS",
    "FUSED_MAX_D",
    "BLOCK_ELEMENTS",
    "attention_velocity",
    "velocity_numpy",
    "velocity_blas",
    "velocity_numba",
    "token_masses",
    "check_tokens",
    "block_rows",
]

#: names of the velocity laws of MODEL.md §2
ATTENTION_KINDS: tuple[str, ...] = ("softmax", "unnormalized", "relu", "pooled")
#: largest ``block × n`` score buffer per thread (elements): 4 MiB of float64 (fastest in `meanfield bench`)
BLOCK_ELEMENTS = 1 << 19
#: a shifted row sum below this (by dtype) means the Cauchy–Schwarz shift was too loose:
#: those rows are recomputed with the exact maximum (float32 sums below ~1e-31 lose digits)
_UNDERFLOW = {"d": 1e-200, "f": 1e-25}


def token_masses(n: int, weights: np.ndarray | None, *, positive: bool = False) -> np.ndarray:
    """Token masses :math:`a_j`: :math:`1/n` by default, else checked (shape ``(n,)``, finite, ≥ 0 or > 0)."""
    if weights is None:
        return np.full(n, 1.0 / n)
    a = np.asarray(weights, dtype=float)
    if a.shape != (n,):
        raise ValueError(f"weights must have shape ({n},), got {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a <= 0 if positive else a < 0):
        raise ValueError(f"weights (token masses) must be finite and {'positive' if positive else 'non-negative'}")
    return a


def check_tokens(x: np.ndarray, heads: HeadStack, kind: str) -> np.ndarray:
    """``x`` as a contiguous float ``(n, d)`` array matching the heads; ``kind`` must be known."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; choose from {ATTENTION_KINDS}")
    x = np.ascontiguousarray(x, dtype=float)
    if x.ndim != 2 or x.shape[1] != heads.d:
        raise ValueError(f"x must have shape (n, {heads.d}), got {x.shape}")
    return x


def block_rows(n: int, block_elements: int | None = None) -> int:
    """Rows per block so that a ``rows × n`` buffer holds at most ``block_elements`` (default :data:`BLOCK_ELEMENTS`)."""
    limit = BLOCK_ELEMENTS if block_elements is None else block_elements
    return int(max(1, min(n, limit // max(n, 1))))


# ------------------------------------------------------------------ NumPy twin (reference)


def velocity_numpy(
    x: np.ndarray, heads: HeadStack, *, beta: float, kind: str = "softmax", weights: np.ndarray | None = None
) -> np.ndarray:
    """Reference implementation: row blocks, exact row maxima, one thread.

    Parameters
    ----------
    x : (n, d) array
        Tokens (need not be on the sphere).
    heads : HeadStack
    beta : float
        Inverse temperature.
    kind : {"softmax", "unnormalized", "relu", "pooled"}
    weights : (n,) array, optional
        Masses :math:`a_j`; default :math:`1/n`.

    Returns
    -------
    (n, d) array
        The ambient velocity :math:`v_i` (not yet projected).
    """
    x = check_tokens(x, heads, kind)
    n, d = x.shape
    a = token_masses(n, weights)
    out = np.zeros((n, d))
    block = block_rows(n)
    values = [x @ heads.V[h].T for h in range(heads.H)]
    xt = np.ascontiguousarray(x.T)
    buffer = np.empty(block * n)
    for start in range(0, n, block):
        rows = slice(start, min(n, start + block))
        z = buffer[: (rows.stop - rows.start) * n].reshape(-1, n)
        if kind == "pooled":
            nums, dens, shifts = [], [], []
        for h in range(heads.H):
            np.matmul(x[rows] @ heads.B[h], xt, out=z)  # scores s_ij
            if kind == "relu":
                np.maximum(z, 0.0, out=z)
                z *= a
                out[rows] += z @ values[h]
                continue
            z *= beta
            if kind == "unnormalized":
                np.exp(z, out=z)
                z *= a
                out[rows] += z @ values[h]
                continue
            m = z.max(axis=1, keepdims=True)
            z -= m
            np.exp(z, out=z)
            z *= a
            num = z @ values[h]
            den = z.sum(axis=1, keepdims=True)
            if kind == "softmax":
                out[rows] += num / den
            else:
                nums.append(num)
                dens.append(den)
                shifts.append(m)
        if kind == "pooled":
            top = np.max(np.concatenate(shifts, axis=1), axis=1, keepdims=True)
            scale = [heads.w[h] * np.exp(shifts[h] - top) for h in range(heads.H)]
            num = sum(scale[h] * nums[h] for h in range(heads.H))
            den = sum(scale[h] * dens[h] for h in range(heads.H))
            out[rows] = num / den
    return out


# ------------------------------------------------------------------ BLAS + vectorised exp, threaded


_local = threading.local()


def _scratch(size: int, dtype: type) -> np.ndarray:
    """A per-thread score buffer, reused across calls (no page faults in the hot loop)."""
    key = np.dtype(dtype).char
    buf = getattr(_local, key, None)
    if buf is None or buf.size < size:
        buf = np.empty(max(size, BLOCK_ELEMENTS), dtype=dtype)
        setattr(_local, key, buf)
    return buf[:size]


@lru_cache(maxsize=4)
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="meanfield-attn")


def _blas_rows(
    rows: slice,
    x: np.ndarray,
    heads: HeadStack,
    beta: float,
    kind: str,
    lhs: list[np.ndarray],
    rhs_t: np.ndarray,
    values: list[np.ndarray],
    shifts: list[np.ndarray],
    out: np.ndarray,
    dtype: type,
) -> None:
    """Velocity of one row block; ``lhs[h]`` are the augmented queries (n, d+1)."""
    d = x.shape[1]
    blk = out[rows]
    z = _scratch(blk.shape[0] * rhs_t.shape[1], dtype).reshape(blk.shape[0], rhs_t.shape[1])
    underflow = _UNDERFLOW[np.dtype(dtype).char]
    pooled: list[tuple[np.ndarray, np.ndarray]] = []
    for h in range(heads.H):
        np.matmul(lhs[h][rows], rhs_t, out=z)  # beta*s - c_i  (or s for relu), shape (b, n)
        if kind == "relu":
            np.maximum(z, 0.0, out=z)
            blk += (z @ values[h]).astype(float, copy=False)[:, :d]
            continue
        np.exp(z, out=z)
        acc = (z @ values[h]).astype(float)  # (b, d+1): numerator | row sum
        shift = shifts[h][rows]
        low = acc[:, d] < underflow
        if np.any(low):  # the shift overshot the row maximum: redo those rows exactly, in float64
            idx = np.flatnonzero(low) + rows.start
            sub = beta * ((x[idx] @ heads.B[h]) @ x.T)
            row_max = sub.max(axis=1)
            sub -= row_max[:, None]
            np.exp(sub, out=sub)
            acc[low] = sub @ values[h].astype(float)
            shift = shift.copy()
            shift[low] = row_max
        if kind == "softmax":
            blk += acc[:, :d] / acc[:, d:]
        elif kind == "unnormalized":
            blk += acc[:, :d] * np.exp(shift)[:, None]
        else:
            pooled.append((acc, shift))
    if kind == "pooled":
        top = np.max(np.stack([shift for _, shift in pooled]), axis=0)
        num = np.zeros((blk.shape[0], d))
        den = np.zeros(blk.shape[0])
        for h, (acc, shift) in enumerate(pooled):
            scale = heads.w[h] * np.exp(shift - top)
            num += scale[:, None] * acc[:, :d]
            den += scale * acc[:, d]
        blk[...] = num / den[:, None]


def velocity_blas(
    x: np.ndarray,
    heads: HeadStack,
    *,
    beta: float,
    kind: str = "softmax",
    weights: np.ndarray | None = None,
    threads: int | None = None,
    precision: str = "float64",
) -> np.ndarray:
    """Production kernel: GEMM → in-place ``exp`` → GEMM over row blocks on threads.

    Same parameters and result as :func:`velocity_numpy`, plus

    threads : int, optional
        Size of the thread pool (default :func:`meanfield._jit.num_threads`).
    precision : {"float64", "float32"}
        Arithmetic of the score/exp buffers.  ``float32`` roughly doubles the
        ``exp`` throughput; its relative error is about ``1e-6`` — fine for
        pictures and sweeps, too coarse for convergence-order studies.
    """
    x = check_tokens(x, heads, kind)
    n, d = x.shape
    a = token_masses(n, weights)
    dtype = {"float64": np.float64, "float32": np.float32}[precision]
    out = np.zeros((n, d))
    ones = np.ones((n, 1))
    # rhs: [x | 1]ᵀ, so that [beta x B | -c] @ rhs = beta s - c
    rhs_t = np.ascontiguousarray(np.hstack([x, ones]).T, dtype=dtype)
    # one BLAS thread per pool thread: the pool already fills the cores, and threaded
    # BLAS on these thin GEMMs only adds synchronisation (up to 50× slower on a loaded machine)
    with one_blas_thread():
        lhs: list[np.ndarray] = []
        values: list[np.ndarray] = []
        shifts: list[np.ndarray] = []
        for h in range(heads.H):
            xb = x @ heads.B[h]  # row i: (B^T x_i)^T
            if kind == "relu":
                lhs.append(np.ascontiguousarray(np.hstack([xb, np.zeros((n, 1))]), dtype=dtype))
                shifts.append(np.zeros(n))
            else:
                c = beta * np.sqrt(np.sum(xb * xb, axis=1) * np.sum(x * x, axis=1).max())
                lhs.append(np.ascontiguousarray(np.hstack([beta * xb, -c[:, None]]), dtype=dtype))
                shifts.append(c)
            values.append(np.ascontiguousarray(np.hstack([a[:, None] * (x @ heads.V[h].T), a[:, None]]), dtype=dtype))
        block = block_rows(n)
        starts = range(0, n, block)
        jobs = [slice(s, min(n, s + block)) for s in starts]
        nthreads = min(threads or num_threads(), len(jobs))

        def work(rows: slice) -> None:
            _blas_rows(rows, x, heads, beta, kind, lhs, rhs_t, values, shifts, out, dtype)

        if nthreads <= 1:
            for rows in jobs:
                work(rows)
        else:
            list(_pool(nthreads).map(work, jobs))
    return out


# ------------------------------------------------------------------ fused numba loop


@pjit
def _numba_kernel(x, B, V, w, a, beta, mode):  # pragma: no cover - compiled
    # mode: 0 softmax, 1 unnormalized, 2 relu, 3 pooled
    n, d = x.shape
    H = B.shape[0]
    out = np.zeros((n, d))
    xnorm2 = 0.0
    for j in range(n):
        s2 = 0.0
        for k in range(d):
            s2 += x[j, k] * x[j, k]
        xnorm2 = max(xnorm2, s2)
    for i in numba_prange(n):
        q = np.empty(d)
        acc = np.empty(d)
        vx = np.empty(d)
        shifts = np.empty(H)
        nums = np.zeros((H, d))
        dens = np.zeros(H)
        for h in range(H):
            qn = 0.0
            for k in range(d):
                t = 0.0
                for m in range(d):
                    t += x[i, m] * B[h, m, k]
                q[k] = t
                qn += t * t
            c = beta * math.sqrt(qn * xnorm2) if mode != 2 else 0.0
            if mode == 0 or mode == 3:
                # exact row maximum (two passes): robust for any B
                best = -np.inf
                for j in range(n):
                    if a[j] > 0.0:
                        s = 0.0
                        for k in range(d):
                            s += q[k] * x[j, k]
                        if beta * s > best:
                            best = beta * s
                c = best
            for k in range(d):
                acc[k] = 0.0
            den = 0.0
            for j in range(n):
                s = 0.0
                for k in range(d):
                    s += q[k] * x[j, k]
                if mode == 2:
                    e = a[j] * s if s > 0.0 else 0.0
                else:
                    e = a[j] * math.exp(beta * s - c)
                den += e
                for k in range(d):
                    acc[k] += e * x[j, k]
            # apply V_h to the accumulated sum (linear): sum_j e_j V x_j = V (sum_j e_j x_j)
            for k in range(d):
                t = 0.0
                for m in range(d):
                    t += V[h, k, m] * acc[m]
                vx[k] = t
            if mode == 0:
                for k in range(d):
                    out[i, k] += vx[k] / den
            elif mode == 1:
                f = math.exp(c)
                for k in range(d):
                    out[i, k] += vx[k] * f
            elif mode == 2:
                for k in range(d):
                    out[i, k] += vx[k]
            else:
                shifts[h] = c
                dens[h] = den
                for k in range(d):
                    nums[h, k] = vx[k]
        if mode == 3:
            top = shifts.max()
            total = 0.0
            for h in range(H):
                f = w[h] * math.exp(shifts[h] - top)
                total += f * dens[h]
                for k in range(d):
                    out[i, k] += f * nums[h, k]
            for k in range(d):
                out[i, k] /= total
    return out




_MODES = {"softmax": 0, "unnormalized": 1, "relu": 2, "pooled": 3}


def velocity_numba(
    x: np.ndarray, heads: HeadStack, *, beta: float, kind: str = "softmax", weights: np.ndarray | None = None
) -> np.ndarray:
    """Fused numba kernel, parallel over rows, :math:`O(n\\,d)` memory.

    Same parameters and result as :func:`velocity_numpy`.  Softmax and pooled
    rows use the exact row maximum (two passes over the row).
    """
    x = check_tokens(x, heads, kind)
    a = token_masses(x.shape[0], weights)
    return _numba_kernel(x, heads.B, heads.V, heads.w, np.ascontiguousarray(a), float(beta), _MODES[kind])


def _velocity_fused(
    x: np.ndarray, heads: HeadStack, *, beta: float, kind: str = "softmax", weights: np.ndarray | None = None
) -> np.ndarray:
    """The fused small-``d`` softmax kernel of :mod:`meanfield.fused` (softmax only)."""
    if kind != "softmax":
        raise ValueError(f"backend 'fused' computes the softmax law only, got kind={kind!r}; use 'blas'")
    from meanfield.fused import velocity_fused  # imports this module: keep the import lazy

    return velocity_fused(x, heads, beta=beta, weights=weights)


#: kernels by backend name (``"auto"`` picks one per call, see :func:`attention_velocity`)
BACKENDS: dict[str, Callable[..., np.ndarray]] = {
    "blas": velocity_blas,
    "fused": _velocity_fused,
    "numba": velocity_numba,
    "numpy": velocity_numpy,
}
#: largest dimension for which ``"auto"`` uses the fused softmax kernel (it loses to BLAS above)
FUSED_MAX_D = 8


def attention_velocity(
    x: np.ndarray,
    heads: HeadStack,
    *,
    beta: float,
    kind: str = "softmax",
    weights: np.ndarray | None = None,
    backend: str = "auto",
    precision: str = "float64",
) -> np.ndarray:
    r"""Ambient attention velocity :math:`v_i` of MODEL.md §2 (see the module docstring).

    Parameters
    ----------
    x : (n, d) array
        Tokens on :math:`S^{d-1}`.
    heads : HeadStack
        Score matrices ``B`` (H, d, d), values ``V`` (H, d, d), head weights ``w`` (H,).
    beta : float
        Inverse temperature :math:`\beta\ge 0`.
    kind : {"softmax", "unnormalized", "relu", "pooled"}
    weights : (n,) array, optional
        Masses :math:`a_j` of the tokens (default :math:`1/n`).
    backend : {"auto", "blas", "fused", "numba", "numpy"}
        ``"auto"``: the fused kernel (:mod:`meanfield.fused`, one pass with a
        vectorised ``exp``) for float64 softmax with ``d ≤`` :data:`FUSED_MAX_D`,
        else ``"blas"``.
    precision : {"float64", "float32"}
        Arithmetic of the ``blas`` kernel's score buffers (the other backends
        are float64 only); see :func:`velocity_blas`.

    Returns
    -------
    (n, d) array

    Examples
    --------
    >>> import numpy as np
    >>> from meanfield.heads import HeadStack
    >>> from meanfield.sphere import sample_uniform
    >>> x = sample_uniform(64, 3, seed=1)
    >>> heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    >>> attention_velocity(x, heads, beta=4.0).shape
    (64, 3)
    """
    if backend == "auto":
        small = kind == "softmax" and precision == "float64" and heads.d <= FUSED_MAX_D
        backend = "fused" if small else "blas"
    try:
        kernel = BACKENDS[backend]
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}; choose from {sorted(BACKENDS)}") from None
    if precision not in ("float64", "float32"):
        raise ValueError(f"precision must be 'float64' or 'float32', got {precision!r}")
    if precision == "float32":
        if backend != "blas":
            raise ValueError("precision='float32' is available with backend='blas' (or 'auto') only")
        return velocity_blas(x, heads, beta=beta, kind=kind, weights=weights, precision=precision)
    return kernel(x, heads, beta=beta, kind=kind, weights=weights)
