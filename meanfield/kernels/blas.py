r"""The BLAS attention kernel: score GEMM → in-place ``exp`` → value GEMM over row blocks on a thread pool.

Softmax rows are shifted by the Cauchy–Schwarz bound
:math:`c_i=\beta\|B_h^\top x_i\|\max_j\|x_j\|\ge\max_j\beta s^h_{ij}` (exact on the
sphere), folded into the first GEMM as an extra column, and the row sums come
out of the second GEMM as an extra column: one pass of ``exp`` and no max/sum
passes.  Rows whose bound is too loose to avoid underflow are recomputed with
the exact row maximum.  Memory: one ``block × n`` buffer per thread, capped at
:data:`~meanfield.kernels.inputs.BLOCK_ELEMENTS`, i.e. :math:`O(n\,d)` overall.

With ``mask="causal"`` (Karagodin, Polyanskiy and Rigollet, *Clustering in Causal
Attention Masking*, arXiv 2411.04990) the block of rows ``[r0, r1)`` multiplies only the
columns ``[0, r1)`` and zeroes the strict upper triangle of its diagonal square after
the ``exp``: with blocks of at most ``n/8`` rows that is about 56 % of the unmasked
pairs.  The blocks go to the pool largest first (the pool hands them out as threads free up).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np

from meanfield.heads.head import HeadStack
from meanfield.kernels.inputs import BLOCK_ELEMENTS, block_rows, check_tokens, is_causal, token_masses
from meanfield.kernels.jit import one_blas_thread, threads_for

__all__ = ["velocity_blas"]

#: a shifted row sum below this (by dtype) means the Cauchy–Schwarz shift was too loose:
#: those rows are recomputed with the exact maximum (float32 sums below ~1e-31 lose digits)
_UNDERFLOW = {"d": 1e-200, "f": 1e-25}


#: causal mask: the rows are cut into about this many blocks (each multiplies the columns up to its
#: last row), but no block has fewer than CAUSAL_MIN_ROWS rows
CAUSAL_BLOCKS = 8
CAUSAL_MIN_ROWS = 32

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
    causal: bool = False,
) -> None:
    """Velocity of one row block; ``lhs[h]`` are the augmented queries (n, d+1).

    ``causal``: only the columns ``[0, rows.stop)``, the strict upper triangle of the
    diagonal square ``[rows.start, rows.stop)²`` zeroed after the ``exp``.
    """
    d = x.shape[1]
    blk = out[rows]
    cols = rows.stop if causal else rhs_t.shape[1]
    z = _scratch(blk.shape[0] * cols, dtype).reshape(blk.shape[0], cols)
    rhs = rhs_t[:, :cols] if causal else rhs_t
    upper = np.triu_indices(blk.shape[0], 1) if causal else None
    underflow = _UNDERFLOW[np.dtype(dtype).char]
    pooled: list[tuple[np.ndarray, np.ndarray]] = []
    for h in range(heads.H):
        vals = values[h][:cols] if causal else values[h]
        np.matmul(lhs[h][rows], rhs, out=z)  # beta*s - c_i  (or s for relu), shape (b, n)
        if kind == "relu":
            np.maximum(z, 0.0, out=z)
            if causal:
                z[:, rows.start :][upper] = 0.0
            blk += (z @ vals).astype(float, copy=False)[:, :d]
            continue
        np.exp(z, out=z)
        if causal:
            z[:, rows.start :][upper] = 0.0
        acc = (z @ vals).astype(float)  # (b, d+1): numerator | row sum
        shift = shifts[h][rows]
        low = acc[:, d] < underflow
        if np.any(low):  # the shift overshot the row maximum: redo those rows exactly, in float64
            idx = np.flatnonzero(low) + rows.start
            sub = beta * ((x[idx] @ heads.B[h]) @ x[:cols].T)
            if causal:
                sub[np.arange(cols)[None, :] > idx[:, None]] = -np.inf
            row_max = sub.max(axis=1)
            sub -= row_max[:, None]
            np.exp(sub, out=sub)
            acc[low] = sub @ vals.astype(float)
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
    mask: str = "none",
) -> np.ndarray:
    """Production kernel: GEMM → in-place ``exp`` → GEMM over row blocks on threads.

    Same parameters and result as :func:`velocity_numpy` (``mask="causal"``: row
    :math:`i` sums over :math:`j\\le i`, about 56 % of the pairs), plus

    threads : int, optional
        Size of the thread pool (default :func:`meanfield.kernels.jit.num_threads`).
    precision : {"float64", "float32"}
        Arithmetic of the score/exp buffers.  ``float32`` roughly doubles the
        ``exp`` throughput; its relative error is about ``1e-6`` — fine for
        pictures and sweeps, too coarse for convergence-order studies.
    """
    x = check_tokens(x, heads, kind)
    causal = is_causal(mask)
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
        if causal:  # smaller blocks skip more of the masked triangle (at least 32 rows: GEMM-sized)
            block = min(block, max(CAUSAL_MIN_ROWS, -(-n // CAUSAL_BLOCKS)))
        starts = range(0, n, block)
        jobs = [slice(s, min(n, s + block)) for s in starts]
        if causal:
            jobs.reverse()  # the longest rows first: the pool balances what is left
        pairs = float(n) * n * heads.H * (0.5 if causal else 1.0)
        nthreads = min(threads or threads_for(pairs), len(jobs))

        def work(rows: slice) -> None:
            _blas_rows(rows, x, heads, beta, kind, lhs, rhs_t, values, shifts, out, dtype, causal)

        if nthreads <= 1:
            for rows in jobs:
                work(rows)
        else:
            list(_pool(nthreads).map(work, jobs))
    return out
