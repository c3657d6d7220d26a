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

The ``exp`` is the fused kernels' own vectorised one (:func:`exp_block64`, :func:`exp_block32`:
2.5× and 4.7× ``np.exp`` on an AVX2 processor), except in float64 on AVX-512 processors, where
NumPy's own ``exp`` is vectorised and faster (:func:`exp_scores`, :data:`NUMPY_EXP64`).  When every :math:`B_h` is symmetric (and there is no mask), the
shift :math:`(c_i + c_j)/2` makes the shifted score matrix symmetric, and only the upper
triangle of :data:`TILE`-square tiles (:data:`TILE32` in float32) is computed, each tile serving the rows of both sides
(:func:`_symmetric_velocity`): half the score GEMM and half the ``exp``.  The tiles' products go
through :func:`meanfield.kernels.gemm.gemm_into`, which adds the value products into the
accumulators inside the GEMM (no separate pass; the float32 accumulators stay float32) and runs a
float32 tile in one compiled call without the GIL; the keys are row-major (no transposing copy).
Measured against the NumPy calls, one process, alternating, 2 threads (p25): float32 1.16–1.20× at
n = 1024 (d = 32, 64), 1.09–1.12× at n = 2048, d = 384 and n = 4096, d = 64; float64 1.01–1.06×.

**Flash tiles** (:mod:`meanfield.kernels.flash`): at ``d ≤``
:data:`~meanfield.kernels.flash.FLASH_MAX_D` in float32 and ``d ≤``
:data:`~meanfield.kernels.flash.FLASH_MAX_D64` in float64, on AVX-512 processors, without a mask and
for the exponential laws, the products run instead on register panels a tile at a time (score panel
with the ``exp`` on its registers, value panels), the symmetric case using each tile for both sides:
1.1–1.6× the path below at d = 32 to 128 in float32, 1.2–1.5× at d = 32 and 64 in float64
(:func:`_flash_velocity`).  The underflow redo and the heads' sums are the same.

What surrounds the GEMMs is kept small next to them, which matters at n ≈ 1000: a head with
:math:`B_h = \lambda I` or :math:`V_h = \lambda I` (the papers' default heads) forms no product
with it (:func:`identity_multiple`); small operands are built, and the symmetric path's rows finished,
in the calling thread; and the calling thread works on the pool's items instead of waiting
(:func:`run_on_threads`).  Measured at n = 1024, d = 32 on two cores: 1.2× faster than with a
pool hand-off per stage, and 1.3–1.4× at n = 2048, d = 384 in float32 (where the products with
:math:`B = V = I` had taken a third of the call).
"""
from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from meanfield.heads.head import HeadStack
from meanfield.kernels.fused import FLUSH_BELOW, exp_flushed
from meanfield.kernels.flash import (FLASH_CPU, FLASH_MAX_D, FLASH_MAX_D64, KEY_BLOCK, flash_fill, flash_rows, flash_shifts, flash_symmetric,
                                     padded_rows, partial_elements, query_block, tile_elements, value_width)
from meanfield.kernels.fused32 import exp32_nonpositive_scalar, float32_scaled_masses
from meanfield.kernels.atomics import fetch_add
from meanfield.kernels.gemm import gemm_address, gemm_into
from meanfield.kernels.inputs import BLOCK_ELEMENTS, block_rows, check_float32_sums, check_tokens, is_causal, token_masses
from meanfield.kernels.jit import jit, one_blas_thread, threads_for

__all__ = ["velocity_blas", "flash_tiles", "flash_row_sums", "FlashSums", "thread_buffer", "release_buffers", "exp_block64", "exp_block32", "exp_scores", "NUMPY_EXP64", "run_on_threads", "identity_multiple", "exp_shifted_by_mass", "blas_threads"]

#: a shifted row sum below this (by dtype) means the Cauchy–Schwarz shift was too loose:
#: those rows are recomputed with the exact maximum (float32 sums below ~1e-31 lose digits)
_UNDERFLOW = {"d": 1e-200, "f": 1e-25}


#: causal mask: the rows are cut into about this many blocks (each multiplies the columns up to its
#: last row), but no block has fewer than CAUSAL_MIN_ROWS rows
CAUSAL_BLOCKS = 8
CAUSAL_MIN_ROWS = 32
#: every B_h symmetric (and n ≥ 2 TILE, no mask): square tiles of this many rows, the upper
#: triangle only (a float64 tile of TILE² scores stays in a 1 MB L2 cache)
TILE = 256
#: the float32 tiles: 512² scores are the same 1 MB, and halve the per-tile overhead next to
#: float32's twice faster GEMMs (measured: 13–20 % faster than 256 at n ≥ 1536, d = 32 and 64; equal at
#: n = 1024 and at d = 384; in float64, 512 is no faster than 256)
TILE32 = 512
#: fewer symmetric tiles than this per thread: those off the diagonal are cut into two halves of rows (:func:`_tile_items`)
SPLIT_TILES_PER_THREAD = 4
#: a diagonal tile of at least twice this many rows (the float32 tiles) is done as the upper triangle of its
#: halves, three quarters of its scores: 1.05–1.09× at n = 1024–1536, d = 32 and 64; equal at n = 2048, d = 384.
#: (Halves of the 256-row float64 tiles measured 2–3 % slower at n = 1024.)
DIAGONAL_HALF = 256

#: the serial stages around the tiles (building the operands, weighting the values, adding the threads'
#: sums and the heads) run on the pool above this many elements (n (d + 1) H): copies and casts of
#: 2^18 elements take about 0.3 ms here, a hand-off 0.05–0.1 ms.  At n = 2048, d = 384 they had taken 6 of 24 ms.
PARALLEL_STAGE_ELEMENTS = 1 << 18
#: operand buffers (not the score block) up to this many elements are kept per thread between calls
REUSE_MAX_ELEMENTS = 1 << 21
#: the operands are built on the pool only above this many flops (the products with B_h and
#: V_h, ``2 n d²`` each where it is not a multiple of I); below it, in the calling thread:
#: a hand-off to the pool costs 0.1–0.3 ms on these cores, as much as building them at n = 1024, d = 32
PREP_PARALLEL_FLOPS = 1 << 24

_local = threading.local()
#: bumped by :func:`release_buffers`: a thread's buffers of an older generation are dropped at its next call
_generation = 0


def release_buffers() -> None:
    """Let every thread's buffers of :func:`thread_buffer` go (each thread drops its own at its next call), so that a
    trace of the next call's allocations (``tracemalloc``, :mod:`meanfield.solvers.timing`) sees all the memory it uses:
    with the buffers kept from earlier calls it had seen 0.5 MiB of the 3.1 MiB a call at n = 1024, d = 64 takes."""
    global _generation
    _generation += 1


def thread_buffer(size: int, dtype: type, slot: str = "scores") -> np.ndarray:
    """A per-thread buffer of ``size`` elements, reused across calls.

    At n = 1024, d = 64 building the GEMM operands serially with fresh arrays (``hstack``,
    casts) took about 1.7 ms of a 9.7 ms two-thread call; they are now written into
    these buffers, row block by row block on the pool.  ``slot`` names the buffer (the
    score block, the operands of one head), so that buffers in use at the same time never alias.
    Operands above :data:`REUSE_MAX_ELEMENTS` are allocated afresh, so that what
    stays allocated between calls is bounded.
    """
    if slot != "scores" and size > REUSE_MAX_ELEMENTS:  # large: the faults are small next to the O(n²) work
        return np.empty(size, dtype=dtype)
    if getattr(_local, "generation", None) != _generation:  # released since this thread's last call
        _local.__dict__.clear()
        _local.generation = _generation
    key = f"{slot}:{np.dtype(dtype).char}"
    buf = getattr(_local, key, None)
    if buf is None or buf.size < size:
        buf = np.empty(max(size, BLOCK_ELEMENTS if slot == "scores" else 0), dtype=dtype)
        setattr(_local, key, buf)
    return buf[:size]


@jit(fastmath={"contract"})
def exp_block64(z, first):  # pragma: no cover - compiled
    """``z ← exp(z)`` in place on a (rows, cols) float64 block of shifted scores (≤ 0), 0 below ``exp(FLUSH_BELOW)``.

    ``first ≥ 0`` (causal mask): row ``i`` is token ``first + i``, and its columns
    ``j > first + i`` are set to 0 instead.  The loop vectorises (the branch-free
    :func:`~meanfield.kernels.fused.exp_flushed`, no subnormal results): about 2.5× ``np.exp``.
    """
    rows, cols = z.shape
    for i in range(rows):
        stop = cols if first < 0 else min(cols, first + i + 1)
        for j in range(stop):
            z[i, j] = exp_flushed(z[i, j])
        for j in range(stop, cols):
            z[i, j] = 0.0


@jit(fastmath={"contract"})
def exp_block32(z, first):  # pragma: no cover - compiled
    """float32 twin of :func:`exp_block64` (:func:`~meanfield.kernels.fused32.exp32_nonpositive_scalar`)."""
    rows, cols = z.shape
    zero = np.float32(0.0)
    for i in range(rows):
        stop = cols if first < 0 else min(cols, first + i + 1)
        for j in range(stop):
            z[i, j] = exp32_nonpositive_scalar(z[i, j])
        for j in range(stop, cols):
            z[i, j] = zero


#: rows per block of the transposing copy :func:`_keys_into` (the block's rows stay in L1/L2 while it is read column by column)
TRANSPOSE_ROWS = 16


@jit
def _keys_into(xr, keys, start):  # pragma: no cover - compiled
    """``keys[:d, start + i] = xr[i]`` and ``keys[d, start + i] = 1``: the augmented keys, transposed.

    In blocks of :data:`TRANSPOSE_ROWS` rows: 2.6× faster than ``keys[:d, rows] = xr.T`` at
    n = 2048, d = 384 (0.9 against 2.3 ms) and at n = 4096, d = 64, which read one cache line per element.
    """
    rows, d = xr.shape
    one = keys.dtype.type(1.0)
    for i0 in range(0, rows, TRANSPOSE_ROWS):
        i1 = min(rows, i0 + TRANSPOSE_ROWS)
        for k in range(d):
            for i in range(i0, i1):
                keys[k, start + i] = xr[i, k]
    for i in range(rows):
        keys[d, start + i] = one


@jit(fastmath={"reassoc", "contract"})
def _row_norms(x):  # pragma: no cover - compiled
    """``‖x_i‖`` of every row, the sums of squares reassociated so that they vectorise (at n = 1024, d = 32, on a loaded machine: 7–16 µs against 19–34 µs for ``np.sqrt(np.einsum(…))``)."""
    n, d = x.shape
    out = np.empty(n)
    for i in range(n):
        total = 0.0
        for j in range(d):
            total += x[i, j] * x[i, j]
        out[i] = np.sqrt(total)
    return out


@jit
def _is_symmetric(m):  # pragma: no cover - compiled
    """``m == mᵀ`` exactly, stopping at the first pair that differs."""
    d = m.shape[0]
    for i in range(d):
        for j in range(i + 1, d):
            if m[i, j] != m[j, i]:
                return False
    return True


@jit
def _scale_rows_into(xr, scale, out):  # pragma: no cover - compiled
    """``out[i, j] = scale[i] · xr[i, j]`` for ``j < d``, cast to ``out``'s dtype; ``out`` may have more columns.

    Pass the whole rows of a contiguous ``out``, not a view of its first ``d`` columns: numba then
    knows the unit stride and vectorises the loop (at n = 1024, d = 64 the views took 2–3× longer).
    """
    rows, d = xr.shape
    for i in range(rows):
        s = scale[i]
        for j in range(d):
            out[i, j] = xr[i, j] * s


@jit
def _add_softmax_rows(blk, acc):  # pragma: no cover - compiled
    """``blk[i] += acc[i, :d] / acc[i, d]``: the softmax head's velocity from its shifted sums."""
    rows, d = blk.shape
    for i in range(rows):
        inverse = 1.0 / acc[i, d]
        for j in range(d):
            blk[i, j] += acc[i, j] * inverse


@jit
def _gather_flash_sums(parts, part_sums, slots, h, first, last, acc):  # pragma: no cover - compiled
    """``acc[i] = Σ_s [parts[s, h, i, :d] | part_sums[s, h, i]]`` over the first ``slots`` threads' accumulators, rows ``[first, last)``; returns the smallest sum."""
    d = acc.shape[1] - 1
    low = np.inf
    for i in range(first, last):
        for k in range(d):
            acc[i, k] = 0.0
        acc[i, d] = 0.0
        for s in range(slots):
            for k in range(d):
                acc[i, k] += parts[s, h, i, k]
            acc[i, d] += part_sums[s, h, i]
        low = min(low, acc[i, d])
    return low


@jit
def _smallest_flash_sum(part_sums, slots, h, first, last):  # pragma: no cover - compiled
    """The smallest row sum ``Σ_s part_sums[s, h, i]`` over rows ``[first, last)``."""
    low = np.inf
    for i in range(first, last):
        total = 0.0
        for s in range(slots):
            total += part_sums[s, h, i]
        low = min(low, total)
    return low


@jit
def _add_softmax_from_parts(parts, part_sums, slots, h, first, out):  # pragma: no cover - compiled
    """``out[i] += Σ_s parts[s, h, first + i, :d] / Σ_s part_sums[s, h, first + i]``: a softmax head's velocity straight from the threads' sums."""
    rows, d = out.shape
    row = np.empty(d)
    for i in range(rows):
        total = 0.0
        for k in range(d):
            row[k] = 0.0
        for s in range(slots):
            total += part_sums[s, h, first + i]
            for k in range(d):
                row[k] += parts[s, h, first + i, k]
        inverse = 1.0 / total
        for k in range(d):
            out[i, k] += row[k] * inverse


def _numpy_exp64_is_vectorised() -> bool:
    """``True`` where NumPy's float64 ``exp`` runs its AVX-512 loop (a CPU with AVX512F and a NumPy built with that target).

    NumPy vectorises the float64 ``exp`` only for AVX-512 (its AVX2 build calls the scalar libm
    ``exp``, about 9 ns per element); there it is a table-driven loop within 1 ulp, and measured
    0.51–0.55 ns per element against 0.86 ns for :func:`exp_block64` (whose loops LLVM compiles
    for 256-bit vectors on these processors).
    """
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # NumPy < 2
        try:
            from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
        except ImportError:
            return False
    built = any(target.startswith(("AVX512", "X86_V4")) for target in __cpu_dispatch__)
    return built and bool(__cpu_features__.get("AVX512F"))


#: the score blocks' float64 ``exp`` is NumPy's (in place) rather than :func:`exp_block64` (see
#: :func:`_numpy_exp64_is_vectorised`); decided once, from the CPU and the NumPy build, so that a
#: machine always takes the same path
NUMPY_EXP64 = _numpy_exp64_is_vectorised()


def exp_scores(z: np.ndarray, first: int = -1, *, deepest: float = 0.0) -> None:
    """``z ← exp(z)`` in place on a block of shifted scores (≤ 0), by the fastest ``exp`` of its dtype here.

    float32: :func:`exp_block32`; float64: NumPy's ``exp`` where it is vectorised
    (:data:`NUMPY_EXP64`, no causal mask, and no score below ``exp``'s normal range: ``deepest``, a bound
    on ``-z``, under ``-FLUSH_BELOW``), else :func:`exp_block64`, which flushes what would be subnormal
    (NumPy's ``exp`` takes some 80 ns for each subnormal result, 140× its normal time).  ``first`` as in
    :func:`exp_block64`.
    """
    if z.dtype == np.float32:
        exp_block32(z, first)
    elif NUMPY_EXP64 and first < 0 and deepest < -FLUSH_BELOW:
        np.exp(z, out=z)
    else:
        exp_block64(z, first)


def blas_threads(n: int, d: int, H: int, dtype: type, *, causal: bool = False) -> int:
    r"""Threads of a call of this kernel: :func:`~meanfield.kernels.jit.threads_for` of its work in score pairs of d = 48 in float64,

    .. math::

        n^2 H \,\frac{d + 16}{64}\,\big(\tfrac12 \text{ in float32}\big)\,\big(\tfrac12 \text{ causal}\big).

    A call hands tiles to the pool's helper thread at a fixed cost, so the crossover is in work, not in
    pairs: on 2 quiet cores two threads paid from n ≈ 770 at d = 16 in float32 (1.2–1.4× slower below),
    n ≈ 700 at d = 32, 580 at d = 64 and 480 at d = 128, and in float64 from n ≈ 450–490 (d = 16–64),
    about 12 million pair-dimensions in all; the threshold sits at 16 million, where a busy machine
    leaves two threads little to gain.
    """
    weight = (d + 16) / 64.0 * (0.5 if np.dtype(dtype) == np.float32 else 1.0) * (0.5 if causal else 1.0)
    return threads_for(float(n) * n * H * weight)


@lru_cache(maxsize=4)
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="meanfield-attn")


_DONE = object()


def run_on_threads(stage: Callable[[Any], None], items: Sequence[Any], threads: int) -> None:
    """``stage(item)`` for every item, on ``threads`` threads of which the calling thread is one.

    The items are handed out one at a time as threads free up (in order).  The calling thread
    works instead of waiting: one hand-off fewer per call, on a core whose caches are warm.
    When the calling thread runs out of items it waits only for the helpers that took one:
    a helper that has not started by then (on a loaded machine the scheduler may not have run
    it yet) is released, and does nothing when it does start.  Waiting for such a helper had
    cost a time slice per call: at n = 1024, d = 32, with two busy processes on the two cores,
    a two-thread call took 1.6–3× the one-thread call.
    An exception in any thread is raised here, once every helper that started has stopped.
    """
    workers = min(int(threads), len(items))
    if workers <= 1:
        for item in items:
            stage(item)
        return
    pending = iter(items)
    lock = threading.Lock()
    failed = threading.Event()
    closed = False  # set by the calling thread when it has run out of items: no helper starts after that
    started = [False] * (workers - 1)

    def drain() -> None:
        while not failed.is_set():
            with lock:
                item = next(pending, _DONE)
            if item is _DONE:
                return
            try:
                stage(item)
            except BaseException:
                failed.set()
                raise

    def help_out(slot: int) -> None:
        with lock:
            if closed:
                return
            started[slot] = True
        drain()

    helpers = [_pool(workers - 1).submit(help_out, slot) for slot in range(workers - 1)]
    try:
        drain()
    finally:
        with lock:
            closed = True
            running = [helper for helper, began in zip(helpers, started) if began]
        for helper in running:
            helper.exception()  # wait for every helper that started before raising (theirs or ours)
    for helper in running:
        helper.result()


@jit
def _is_identity_multiple(m):  # pragma: no cover - compiled
    """``m == m[0, 0] I`` exactly, row by row, stopping at the first row that differs (a general matrix at its first).

    Each row's nonzeros are counted in a branch-free loop: at d = 384, ``λI`` takes 15 µs
    (a test per entry took 107 µs, ``np.count_nonzero`` over the whole matrix 79 µs).
    """
    d = m.shape[0]
    lam = m[0, 0]
    expected = 1 if lam != 0.0 else 0
    for i in range(d):
        if m[i, i] != lam:
            return False
        nonzero = 0
        for j in range(d):
            nonzero += m[i, j] != 0.0
        if nonzero != expected:
            return False
    return True


def identity_multiple(m: np.ndarray) -> float | None:
    """``λ`` when the square matrix ``m`` is exactly ``λI`` (its products are then scalings), else ``None``."""
    return float(m[0, 0]) if _is_identity_multiple(m) else None


@dataclass
class Operands:
    r"""The GEMM operands of one call, per head (layouts: :func:`_operand_rows`).

    ``lhs[h]`` the augmented queries, ``rhs`` the augmented keys (one for all heads, or one per
    head on the symmetric path), ``values[h] = [a V_h x | a]`` and ``shifts[h]`` the bounds
    :math:`c_i \ge \max_j \beta s^h_{ij}`.  ``scale_B[h]`` (``scale_V[h]``) is ``λ`` where
    :math:`B_h = \lambda I` (:math:`V_h = \lambda I`), else ``None``: those products are scalings.
    ``B[h]`` and ``VT[h]`` are :math:`B_h` and :math:`V_h^\top` in the arithmetic of the scores
    (float32 products are twice as fast, and the scores are float32 anyway), ``None`` for scalings.
    ``masses`` are the tokens' masses :math:`a_j` in float64.  ``weighted[h]`` (symmetric path, every
    head scalar) are the values weighted by :math:`e^{(c_j-\bar c)/2}`, written with the operands.
    ``mass_exponent``: the masses (here and in the values) were multiplied by :math:`2^k`, float32 with deep
    scores (:func:`~meanfield.kernels.fused32.float32_scaled_masses`), so that no product of a term with a weight is subnormal.
    """

    lhs: list[np.ndarray]
    rhs: list[np.ndarray]
    values: list[np.ndarray]
    shifts: list[np.ndarray]
    scale_B: list[float | None]
    scale_V: list[float | None]
    B: list[np.ndarray | None]
    VT: list[np.ndarray | None]
    masses: np.ndarray
    weighted: list[np.ndarray] | None = None
    mass_exponent: int = 0

    def unscaled(self, shift: np.ndarray) -> np.ndarray:
        """Row shifts of sums taken with the masses times :math:`2^k` (``mass_exponent``), as shifts of the true sums."""
        return shift - self.mass_exponent * math.log(2.0) if self.mass_exponent else shift

    @property
    def underflow_scale(self) -> float:
        """:math:`2^k`: what a row sum taken with the scaled masses is compared with is scaled too."""
        return math.ldexp(1.0, self.mass_exponent)


@jit
def _scalar_head_rows(x, x_norms, a, r0, r1, query_scale, shift_scale, value_scale, top, lhs, rhs, values, weighted, shifts):  # pragma: no cover - compiled
    r"""Rows ``[r0, r1)`` of one scalar head's symmetric operands (:math:`B_h=\lambda I`, :math:`V_h=\mu I`) in one pass.

    With :math:`c_i` = ``shift_scale`` :math:`\|x_i\|`: ``lhs = [βλ x | -c/2 | 1]``,
    ``rhs = [x | 1 | -c/2]``, ``values = [aμ x | a]``, ``weighted = values`` :math:`\cdot e^{(c_i-\bar c)/2}`
    with :math:`\bar c` = ``top`` (the largest :math:`c_j`, known from the norms) and ``shifts = c``;
    cast to the operands' dtype.  At n = 1024, d = 32 this replaced about 20 NumPy calls (60–70 µs) and
    the separate weighting pass (20 µs) with one loop over the rows.
    """
    d = x.shape[1]
    for i in range(r0, r1):
        c = shift_scale * x_norms[i]
        shifts[i] = c
        mass = a[i]
        v = value_scale * mass
        w = np.exp(0.5 * (c - top))
        for j in range(d):
            xij = x[i, j]
            lhs[i, j] = xij * query_scale
            rhs[i, j] = xij
            values[i, j] = xij * v
            weighted[i, j] = values[i, j] * w
        lhs[i, d] = -0.5 * c
        lhs[i, d + 1] = 1.0
        rhs[i, d] = 1.0
        rhs[i, d + 1] = -0.5 * c
        values[i, d] = mass
        weighted[i, d] = values[i, d] * w


def _operand_rows(
    rows: slice,
    x: np.ndarray,
    heads: HeadStack,
    beta: float,
    kind: str,
    a: np.ndarray,
    x_norms: np.ndarray,
    x_norm_max: float,
    operands: Operands,
) -> None:
    r"""Rows ``rows`` of the GEMM operands, per head: the shifts :math:`c_i`, the values
    ``values[h] = [a V_h x | a]``, and the augmented queries and keys.

    Row layout (``lhs[h].shape[1] == d + 1``, one ``rhs[0]`` for all heads):
    ``lhs[h] = [β B_hᵀx | -c]``, ``rhs = [x | 1]ᵀ``, so that the product is :math:`\beta s_{ij} - c_i`.
    Symmetric layout (``d + 2``, one ``rhs[h]`` per head): ``lhs[h] = [β B_h x | -c/2 | 1]``,
    ``rhs[h] = [x | 1 | -c/2]``, row-major (n, d + 2), multiplied as ``lhs[h][I] @ rhs[h][J]ᵀ``:
    :math:`\beta s_{ij} - (c_i + c_j)/2`, symmetric in i, j.
    ``x_norms`` are the rows' norms :math:`\|x_i\|`: where :math:`B_h = \lambda I`,
    :math:`\|B_h^\top x_i\| = |\lambda|\,\|x_i\|` and no product is formed (nor with :math:`V_h = \lambda I`).
    """
    d = x.shape[1]
    lhs, rhs, values, shifts = operands.lhs, operands.rhs, operands.values, operands.shifts
    symmetric = lhs[0].shape[1] == d + 2
    if symmetric and operands.weighted is not None:  # every head scalar: one compiled pass per head
        for h in range(heads.H):
            lam, mu = operands.scale_B[h], operands.scale_V[h]
            reach = beta * abs(lam) * x_norm_max
            _scalar_head_rows(x, x_norms, a, rows.start, rows.stop, beta * lam, reach, mu, reach * x_norm_max,
                              lhs[h], rhs[h], values[h], operands.weighted[h], shifts[h])
        return
    xr = x[rows]
    for keys in rhs:
        if symmetric:  # row-major keys: a copy (the tiles' score GEMMs take them transposed)
            keys[rows, :d] = xr
            keys[rows, d] = 1.0
        else:
            _keys_into(xr, keys, rows.start)
    work = lhs[0].dtype
    product = thread_buffer(xr.shape[0] * d, work, "product").reshape(xr.shape[0], d)
    xw = xr if work == xr.dtype or all(m is None for m in operands.B + operands.VT) else xr.astype(work)
    for h in range(heads.H):
        query = lhs[h][rows]
        lam = operands.scale_B[h]
        if lam is None:
            np.matmul(xw, operands.B[h], out=product)  # row i: (B^T x_i)^T
        if kind == "relu":
            if lam is None:
                query[:, :d] = product
            else:
                np.multiply(xr, lam, out=query[:, :d], casting="same_kind")
            query[:, d] = 0.0
        else:
            if lam is None:
                c = beta * x_norm_max * np.sqrt(np.einsum("ij,ij->i", product, product).astype(float, copy=False))
                np.multiply(product, beta, out=query[:, :d], casting="same_kind")
            else:
                c = (beta * abs(lam) * x_norm_max) * x_norms[rows]
                _scale_rows_into(xr, np.full(xr.shape[0], beta * lam), query)
            if symmetric:
                query[:, d] = -0.5 * c
                query[:, d + 1] = 1.0
                rhs[h][rows, d + 1] = -0.5 * c
            else:
                query[:, d] = -c
            shifts[h][rows] = c
        mu = operands.scale_V[h]
        if mu is None:
            np.matmul(xw, operands.VT[h], out=product)
            np.multiply(product, a[rows, None], out=values[h][rows, :d], casting="same_kind")
        else:
            _scale_rows_into(xr, mu * a[rows], values[h][rows])
        values[h][rows, d] = a[rows]


@lru_cache(maxsize=32)
def _tile_items(n: int, side: int, threads: int) -> tuple[tuple[slice, slice, bool], ...]:
    """The symmetric path's work items ``(rows, cols, diagonal)``: the upper triangle of ``side``-square tiles, largest first.

    Cached: a run calls the kernel with the same ``n`` every stage (6–12 µs per call at n = 1024).

    A diagonal tile of at least 2 :data:`DIAGONAL_HALF` rows is replaced by the upper triangle of
    its halves (two diagonal quarters and one off the diagonal): 3/4 of its scores and ``exp``.
    With fewer than :data:`SPLIT_TILES_PER_THREAD` tiles per thread, every tile off the diagonal
    is cut into two halves of rows, so that the threads' shares come out even: at n = 1024 in float32
    (three tiles, a diagonal one costing a score GEMM and one value GEMM, the other a score GEMM and
    two), one thread had carried both diagonal tiles, 2 score GEMMs + 2 value GEMMs against 1.5 + 2
    for even shares.  (Cutting the diagonal tiles too measured 5–8 % slower at d = 32: more, smaller
    items for no better balance.)
    """
    tiles = [slice(s, min(n, s + side)) for s in range(0, n, side)]
    items = [(tiles[i], tiles[j], i == j) for i in range(len(tiles)) for j in range(i, len(tiles))]
    triangle = []  # a diagonal tile of 2 DIAGONAL_HALF rows or more: the upper triangle of its halves
    for rows, cols, diagonal in items:
        if diagonal and rows.stop - rows.start >= 2 * DIAGONAL_HALF:
            mid = (rows.start + rows.stop) // 2
            top, bottom = slice(rows.start, mid), slice(mid, rows.stop)
            triangle += [(top, top, True), (top, bottom, False), (bottom, bottom, True)]
        else:
            triangle.append((rows, cols, diagonal))
    items = triangle
    if threads > 1 and len(items) < SPLIT_TILES_PER_THREAD * threads:
        items = [(half, cols, diagonal) for rows, cols, diagonal in items
                 for half in ((rows,) if diagonal or rows.stop - rows.start < 2 else
                              (slice(rows.start, (rows.start + rows.stop) // 2), slice((rows.start + rows.stop) // 2, rows.stop)))]

    return tuple(sorted(items, key=_tile_cost, reverse=True))


def _tile_cost(item: tuple[slice, slice, bool]) -> int:
    """A symmetric tile's work: score GEMM + exp, then one value GEMM (two off the diagonal)."""
    rows, cols, diagonal = item
    return (rows.stop - rows.start) * (cols.stop - cols.start) * (2 if diagonal else 3)


@lru_cache(maxsize=64)
def tile_chunks(costs: tuple[int, ...], threads: int) -> tuple[int, ...]:
    r"""Where the symmetric paths cut their work items (largest first) into chunks, each with its own accumulator slot.

    A thread claims a whole chunk and adds its tiles, in order, into the chunk's slot; the slots are added
    in order. Which thread runs a chunk then changes nothing, and a run is the same bit for bit from call to
    call: with a slot per thread, the tiles a thread happened to claim had set how the sums were rounded
    (1e-16 apart from call to call at d = 8–64 on two threads, so that ``--resume`` did not continue the
    uninterrupted run exactly). The :math:`C = 2\,\mathrm{threads}` chunks are contiguous: one per thread with
    2/3 of its even share of the work, then one per thread with 1/3, so that a thread that starts late
    (a helper's wake-up) or runs slowly (a busy core) leaves a small chunk to the others. One thread: one chunk.
    Returns the ``C + 1`` boundaries.
    """
    total = len(costs)
    count = 1 if threads <= 1 else min(total, 2 * threads)
    if count <= 1:
        return (0, total)
    cumulative = np.cumsum(np.asarray(costs, dtype=float))
    shares = np.cumsum(([2.0] * threads + [1.0] * threads)[:count])
    targets = shares / shares[-1] * cumulative[-1]
    bounds = [0]
    for c, target in enumerate(targets[:-1]):
        cut = int(np.searchsorted(cumulative, target, side="left")) + 1  # the item that reaches the target closes it,
        if cut > 1 and target - cumulative[cut - 2] < cumulative[cut - 1] - target:  # or opens the next: the nearer end
            cut -= 1
        cut = max(cut, bounds[-1] + 1)  # every chunk holds an item
        cut = min(cut, total - (count - 1 - c))  # and leaves one for each chunk after it
        bounds.append(cut)
    bounds.append(total)
    return tuple(bounds)


@jit
def _tile_values(z, weighted, acc, r0, r1, c0, c1, diagonal, address):  # pragma: no cover - compiled
    """The value GEMMs of one head's tile ``E = z`` (rows ``[r0, r1)``, columns ``[c0, c1)``), accumulating in the GEMM:
    ``acc[I] += E W_J`` and, off the diagonal, ``acc[J] += Eᵀ W_I``."""
    gemm_into(z, weighted[c0:c1], acc[r0:r1], True, False, False, address)
    if not diagonal:
        gemm_into(z, weighted[r0:r1], acc[c0:c1], True, True, False, address)


@jit
def _symmetric_tile32(lhs, rhs, weighted, z, acc, r0, r1, c0, c1, diagonal, address):  # pragma: no cover - compiled
    """One head's float32 tile of :func:`_symmetric_tile` in one call without the GIL:
    score GEMM, :func:`exp_block32`, then :func:`_tile_values`."""
    gemm_into(lhs[r0:r1], rhs[c0:c1], z, False, False, True, address)
    exp_block32(z, -1)
    _tile_values(z, weighted, acc, r0, r1, c0, c1, diagonal, address)


def _symmetric_tile(
    tile: tuple[slice, slice, bool],
    lhs: list[np.ndarray],
    rhs: list[np.ndarray],
    weighted: list[np.ndarray],
    acc: np.ndarray,
    dtype: type,
    deepest: float = 0.0,
) -> None:
    r"""One tile :math:`(I, J)`, :math:`I \le J`, of the symmetric path (or a part ``I`` of its rows), for every head
    (``deepest``: a bound on minus the shifted scores, as in :func:`exp_scores`).

    :math:`E_{IJ} = \exp(\beta s_{IJ} - (c_I + c_J)/2)` serves both sides:
    ``acc[I] += E_IJ @ W_J`` and, off the diagonal, ``acc[J] += E_IJᵀ @ W_I``, into ``acc``, the slot of the
    accumulators of the tile's chunk (:func:`tile_chunks`; the slots are summed once every tile is done).
    """
    rows, cols, diagonal = tile
    m, k = rows.stop - rows.start, cols.stop - cols.start
    z = thread_buffer(m * k, dtype).reshape(m, k)
    address = gemm_address(dtype)
    for h in range(len(lhs)):
        if z.dtype == np.float32:  # the whole tile in one compiled call: the GIL is released once
            _symmetric_tile32(lhs[h], rhs[h], weighted[h], z, acc[h], rows.start, rows.stop, cols.start, cols.stop, diagonal, address)
            continue
        gemm_into(lhs[h][rows], rhs[h][cols], z, False, False, True, address)
        exp_scores(z, deepest=deepest)  # in float64 NumPy's exp may be the faster one (exp_scores), so it runs between the compiled calls
        _tile_values(z, weighted[h], acc[h], rows.start, rows.stop, cols.start, cols.stop, diagonal, address)


def _blas_rows(
    rows: slice,
    x: np.ndarray,
    heads: HeadStack,
    beta: float,
    kind: str,
    operands: Operands,
    out: np.ndarray,
    dtype: type,
    causal: bool = False,
    row_logs: np.ndarray | None = None,
) -> None:
    """Velocity of one row block; ``lhs[h]`` are the augmented queries (n, d+1); ``row_logs`` as in :func:`velocity_blas`.

    ``causal``: only the columns ``[0, rows.stop)``, the strict upper triangle of the
    diagonal square ``[rows.start, rows.stop)²`` zeroed after the ``exp``.
    """
    d = x.shape[1]
    blk = out[rows]
    blk.fill(0.0)
    lhs, values, shifts = operands.lhs, operands.values, operands.shifts
    rhs_t = operands.rhs[0]
    cols = rows.stop if causal else rhs_t.shape[1]
    z = thread_buffer(blk.shape[0] * cols, dtype).reshape(blk.shape[0], cols)
    keys = rhs_t[:, :cols] if causal else rhs_t
    upper = np.triu_indices(blk.shape[0], 1) if causal else None
    underflow = _UNDERFLOW[np.dtype(dtype).char] * operands.underflow_scale
    accs: list[np.ndarray] = []
    row_shifts: list[np.ndarray] = []
    for h in range(heads.H):
        vals = values[h][:cols] if causal else values[h]
        np.matmul(lhs[h][rows], keys, out=z)  # beta*s - c_i  (or s for relu), shape (b, n)
        if kind == "relu":
            np.maximum(z, 0.0, out=z)
            if causal:
                z[:, rows.start :][upper] = 0.0
            blk += (z @ vals).astype(float, copy=False)[:, :d]
            continue
        exp_scores(z, rows.start if causal else -1, deepest=2.0 * float(shifts[h][rows].max()))  # |β s_ij| ≤ c_i
        acc = thread_buffer(blk.shape[0] * (d + 1), np.float64, f"row sums{h}").reshape(blk.shape[0], d + 1)
        if np.dtype(dtype) == np.float64:
            np.matmul(z, vals, out=acc)  # (b, d+1): numerator | row sum
        else:
            acc[...] = np.matmul(z, vals, out=thread_buffer(blk.shape[0] * (d + 1), dtype, "value product").reshape(blk.shape[0], d + 1))
        accs.append(acc)
        shift = shifts[h][rows]
        if np.dtype(dtype) == np.float32:
            shift = _float32_where_underflow(acc, shift, lhs[h][rows], keys, vals, rows.start, underflow, causal)
        row_shifts.append(_exact_where_underflow(acc, shift, rows.start, x, heads.B[h], heads.V[h], operands.masses[:cols], beta, underflow, causal))
    if kind != "relu":
        shifts = [operands.unscaled(shift) for shift in row_shifts]
        _store_row_logs(row_logs, rows, [acc[:, d] for acc in accs], shifts)
        _add_heads(blk, accs, shifts, heads, kind)


def exp_shifted_by_mass(scores: np.ndarray, log_mass: np.ndarray) -> np.ndarray:
    r"""``scores ← exp(scores + ln a − m)`` in place, row by row, with :math:`m_i=\max_j(\text{scores}_{ij}+\ln a_j)`; returns :math:`m`.

    Every term is at most 1 and a row's largest is 1 (its sum of masses times exponentials is at least 1),
    where a shift by the largest score alone can sit on a token of zero mass and leave the row's sum
    underflowing.  ``log_mass`` is :math:`\ln a_j` (−inf for an empty token); a row that sees no mass
    gets :math:`m_i = 0` and exponentials 0.  The exact redo of underflowing rows in this kernel and in
    :mod:`meanfield.analysis.energy`.
    """
    top = np.empty(scores.shape[0])
    _exp_shifted_rows(scores, np.ascontiguousarray(log_mass, dtype=np.float64), top)
    return top


@jit(fastmath={"contract"})
def _exp_shifted_rows(scores, log_mass, top):  # pragma: no cover - compiled
    """:func:`exp_shifted_by_mass` compiled: each row's maximum, then the kernels' vectorised ``exp``
    (:func:`~meanfield.kernels.fused.exp_flushed`, about 10× NumPy's scalar float64 ``exp`` without AVX-512); a NaN
    score stays NaN.  (NumPy's passes had made the redo of underflowing rows cost 3–5× the kernel's own pass.)"""
    rows, cols = scores.shape
    for i in range(rows):
        row = scores[i]
        m = -np.inf
        for j in range(cols):
            v = row[j] + log_mass[j]
            row[j] = v
            m = v if v > m else m
        if not np.isfinite(m):  # no mass in view: every term is e^{-inf} = 0
            m = 0.0
        top[i] = m
        for j in range(cols):
            z = row[j] - m
            e = exp_flushed(z)
            row[j] = e if z == z else z


def _float32_where_underflow(acc: np.ndarray, shift: np.ndarray, lhs: np.ndarray, keys: np.ndarray, values: np.ndarray, first: int,
                             underflow: float, causal: bool) -> np.ndarray:
    r"""Sum again in float32 the rows of ``acc`` (tokens ``first + i``) whose shifted row sum fell below ``underflow``,
    shifted by their own largest score: the float32 kernel's redo, before :func:`_exact_where_underflow`.

    ``lhs`` (the block's queries) times ``keys`` gives :math:`\beta s_{ij}-c_i`; each low row's maximum :math:`m_i`
    over its columns is subtracted, the float32 ``exp`` taken and the values (masses included) summed: one more
    float32 pass over those rows, on this thread.  Returns the shifts, :math:`c_i+m_i` on the rows redone.  A row
    whose largest score falls on a token of (nearly) no mass can still underflow: the exact redo takes it.  (These
    rows had all gone to the float64 NumPy redo: at d = 16, β = 1024, n = 6000, 2–7× the float64 kernel's time.)
    """
    d = acc.shape[1] - 1
    low = np.flatnonzero(acc[:, d] < underflow)
    if not low.size:
        return shift
    sub = lhs[low] @ keys  # (k, cols) float32: β s_ij - c_i
    if causal:
        sub[np.arange(sub.shape[1])[None, :] > (low + first)[:, None]] = -np.inf
    top = sub.max(axis=1)
    top[~np.isfinite(top)] = 0.0
    sub -= top[:, None]
    exp_block32(sub, -1)  # -inf (masked) gives 0
    acc[low] = (sub @ values).astype(np.float64)
    shift = shift.copy()
    shift[low] += top
    return shift


def _exact_where_underflow(
    acc: np.ndarray,
    shift: np.ndarray,
    first: int,
    x: np.ndarray,
    B: np.ndarray,
    V: np.ndarray,
    a: np.ndarray,
    beta: float,
    underflow: float,
    causal: bool,
) -> np.ndarray:
    r"""Redo in float64 the rows of ``acc`` (tokens ``first + i``) whose shifted row sum fell below
    ``underflow``: the shift overshot the row maximum.

    The redone rows are shifted by :math:`m_i=\max_j(\beta s_{ij}+\ln a_j)`, with the masses in the
    exponent, :math:`\text{acc}_i=\sum_j e^{\beta s_{ij}+\ln a_j-m_i}[V x_j \mid 1]`: every term is at most 1
    and the largest is 1, so the row sum is at least 1 whatever the masses.  (Shifting by the
    plain maximum of :math:`\beta s_{ij}` failed where that maximum sat on a token of zero mass: the
    row sum could underflow again, to 0 in a float32 accumulator, and the softmax divided by it.)
    A row that sees no mass (unnormalised law) gets zero sums.  The columns are the first
    ``len(a)`` tokens.  Returns the rows' shifts, a copy with the recomputed rows' :math:`m_i`
    where any row was redone.
    """
    d = x.shape[1]
    low = acc[:, d] < underflow
    if not np.any(low):
        return shift
    cols = a.shape[0]
    rows = np.flatnonzero(low)
    shift = shift.copy()
    with np.errstate(divide="ignore"):
        log_mass = np.log(a)  # -inf where a_j = 0: those terms are exactly 0
    values = np.empty((cols, d + 1))
    values[:, :d] = x[:cols] @ V.T
    values[:, d] = 1.0
    step = block_rows(cols)  # at most BLOCK_ELEMENTS exact scores at a time
    for start in range(0, rows.size, step):
        chunk = rows[start : start + step]
        idx = chunk + first
        sub = beta * ((x[idx] @ B) @ x[:cols].T)
        if causal:
            sub[np.arange(cols)[None, :] > idx[:, None]] = -np.inf
        row_max = exp_shifted_by_mass(sub, log_mass)
        acc[chunk] = sub @ values
        shift[chunk] = row_max
    return shift


def _store_row_logs(row_logs: np.ndarray | None, rows: slice, sums: list[np.ndarray], shifts: list[np.ndarray]) -> None:
    """``row_logs[h, rows] = shifts[h] + ln sums[h]``: the heads' log row sums, where they are asked for."""
    if row_logs is None:
        return
    with np.errstate(divide="ignore"):  # a row that sees no mass: ln 0 = -inf
        for h, (total, shift) in enumerate(zip(sums, shifts)):
            row_logs[h, rows] = shift + np.log(total)


def _add_heads(blk: np.ndarray, accs: list[np.ndarray], shifts: list[np.ndarray], heads: HeadStack, kind: str) -> None:
    r"""Add the heads' velocities to ``blk`` from their shifted sums ``accs[h] = [Σ_j e^{βs_ij - c_i} a_j V_h x_j | Σ_j e^{βs_ij - c_i} a_j]``."""
    n, d = blk.shape
    term = thread_buffer(n * d, np.float64, "head term").reshape(n, d)  # reused: no fresh pages per call
    if kind == "softmax":
        for acc in accs:
            _add_softmax_rows(blk, acc)
    elif kind == "unnormalized":
        for acc, shift in zip(accs, shifts):
            with np.errstate(over="ignore"):
                factor = np.exp(shift)
            deep = ~np.isfinite(factor)  # a bound c_i above ln(max float) while the row's own sum may be far smaller
            if np.any(deep):
                factor[deep] = 0.0
            blk += np.multiply(acc[:, :d], factor[:, None], out=term)
            if np.any(deep):  # e^{c_i} Σ_j(...) as the row's mean value times its sum e^{c_i + ln Σ_j e^{βs_ij - c_i} a_j}
                sums = np.asarray(acc[deep, d], dtype=np.float64)
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    total = np.exp(shift[deep] + np.log(sums))
                    rows = acc[deep, :d] / sums[:, None] * total[:, None]
                blk[deep] += np.where(sums[:, None] > 0, rows, 0.0)  # a row that sees no mass moves by 0
    else:  # pooled: one softmax over the heads' pooled sums, shifted by the largest shift of a head that weighs
        weighing = [h for h in range(len(accs)) if heads.w[h] != 0] or list(range(len(accs)))
        top = np.max(np.stack([shifts[h] for h in weighing]), axis=0)
        num = thread_buffer(n * d, np.float64, "pooled numerator").reshape(n, d)
        num.fill(0.0)
        den = np.zeros(n)
        for h, (acc, shift) in enumerate(zip(accs, shifts)):
            if h not in weighing:  # a head of weight 0 adds nothing (its e^{shift - top} may overflow: 0·inf)
                continue
            scale = heads.w[h] * np.exp(shift - top)
            num += np.multiply(scale[:, None], acc[:, :d], out=term)
            den += scale * acc[:, d]
        np.divide(num, den[:, None], out=blk)


def _stages_on_pool(n: int, d: int, H: int) -> bool:
    """Whether the stages around the GEMMs run on the pool: above :data:`PARALLEL_STAGE_ELEMENTS` elements ``n (d + 1) H``."""
    return n * (d + 1) * H > PARALLEL_STAGE_ELEMENTS


def _symmetric_velocity(
    out: np.ndarray,
    x: np.ndarray,
    heads: HeadStack,
    beta: float,
    kind: str,
    operands: Operands,
    dtype: type,
    threads: int,
    row_logs: np.ndarray | None = None,
) -> None:
    r"""Every :math:`B_h` symmetric: the upper triangle of :data:`TILE`-square tiles only (:data:`TILE32` in float32).

    With :math:`\bar c = \max_j c_j` and :math:`W_j = a_j e^{(c_j-\bar c)/2}[V_hx_j \mid 1]`,

    .. math::

        \sum_j a_j e^{\beta s_{ij}}[V_hx_j \mid 1]
        = e^{(c_i+\bar c)/2}\sum_j E_{ij} W_j, \qquad E_{ij} = e^{\beta s_{ij}-(c_i+c_j)/2} \le 1,

    and :math:`E` is symmetric (:math:`\beta s_{ij}\le\min(c_i,c_j)`), so each tile's score
    GEMM and ``exp`` serve two tiles of rows: about half of both.  Rows whose sum underflows
    are redone exactly, as on the row-block path.  Each chunk of tiles (:func:`tile_chunks`) adds into its own
    slot of one accumulator buffer, and a softmax block with no such row takes its velocity from the slots in one
    compiled pass (:func:`_add_softmax_from_parts`, as the flash tiles do), where the slots had been
    added into the first and then divided (float32, two threads: 1.00–1.07× at n = 1024 and 2048, d = 160–384).
    """
    n, d = x.shape
    lhs, rhs, values, shifts = operands.lhs, operands.rhs, operands.values, operands.shifts
    weighted: list[np.ndarray] = []
    row_shifts: list[np.ndarray] = []
    to_weight: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (W_h, values_h, e^{(c_j - c̄)/2})
    for h in range(heads.H):
        top = float(shifts[h].max())
        if operands.weighted is not None:  # written with the operands (_scalar_head_rows), with this c̄
            weighted.append(operands.weighted[h])
        elif top == float(shifts[h].min()):  # B_h = λI on the sphere: every c_j equal, W = values
            weighted.append(values[h])
        else:
            weighted.append(thread_buffer(values[h].size, dtype, f"weighted{h}").reshape(values[h].shape))
            to_weight.append((weighted[h], values[h], np.exp(0.5 * (shifts[h] - top))))
        row_shifts.append(0.5 * (shifts[h] + top))
    stages_on_pool = _stages_on_pool(n, d, heads.H)
    blocks = [slice(s, min(n, s + TILE)) for s in range(0, n, TILE)] if stages_on_pool else [slice(0, n)]

    def weigh(rows: slice) -> None:
        for w, v, scale in to_weight:
            _scale_rows_into(v[rows], scale[rows], w[rows])

    if to_weight:
        run_on_threads(weigh, blocks, threads if stages_on_pool else 1)
    side = TILE32 if np.dtype(dtype) == np.float32 else TILE
    items = _tile_items(n, side, threads)
    bounds = tile_chunks(tuple(map(_tile_cost, items)), threads)
    used = len(bounds) - 1
    # one slot of accumulators per chunk of tiles, in one buffer reused across calls (no fresh pages per call)
    parts = thread_buffer(used * heads.H * n * (d + 1), dtype, "accumulators").reshape(used, heads.H, n, d + 1)
    deepest = 2.0 * max(float(c.max()) for c in shifts)  # β s_ij - (c_i + c_j)/2 ≥ -(c_i + c_j)

    def run_chunk(chunk: int) -> None:  # the chunk's tiles in order into its own slot: the same sums whichever thread
        acc = parts[chunk]
        acc.fill(0.0)
        for tile in items[bounds[chunk] : bounds[chunk + 1]]:
            _symmetric_tile(tile, lhs, rhs, weighted, acc, dtype, deepest)

    run_on_threads(run_chunk, range(used), threads)
    sums, numerators = parts[:used, :, :, d], parts[:used, :, :, :d]
    underflow = _UNDERFLOW[np.dtype(dtype).char] * operands.underflow_scale
    gathered = [thread_buffer(n * (d + 1), np.float64, f"head sums{h}").reshape(n, d + 1) for h in range(heads.H)]

    def finish(rows: slice) -> None:  # the threads' sums added, rows that underflowed redone, the heads added
        out[rows].fill(0.0)
        if kind == "softmax" and all(_smallest_flash_sum(sums, used, h, rows.start, rows.stop) >= underflow for h in range(heads.H)):
            for h in range(heads.H):  # the common case: no row to redo, the velocity straight from the slots in one pass
                _add_softmax_from_parts(numerators, sums, used, h, rows.start, out[rows])
            if row_logs is not None:
                _store_row_logs(row_logs, rows, [sums[:, h, rows].sum(axis=0) for h in range(heads.H)],
                                [operands.unscaled(row_shifts[h][rows]) for h in range(heads.H)])
            return
        accs = []
        for h in range(heads.H):
            _gather_flash_sums(numerators, sums, used, h, rows.start, rows.stop, gathered[h])
            accs.append(gathered[h][rows])
        fixed = [operands.unscaled(_exact_where_underflow(accs[h], row_shifts[h][rows], rows.start, x, heads.B[h], heads.V[h], operands.masses,
                                                          beta, underflow, False)) for h in range(heads.H)]
        _store_row_logs(row_logs, rows, [acc[:, d] for acc in accs], fixed)
        _add_heads(out[rows], accs, fixed, heads, kind)

    run_on_threads(finish, blocks, threads if stages_on_pool else 1)  # small: in this thread, without a hand-off


def _symmetric_scores(heads: HeadStack, scale_B: list[float | None]) -> bool:
    """Whether every :math:`B_h` is symmetric (``scale_B``: each head's :func:`identity_multiple`, a symmetric one where it is not ``None``)."""
    return all(lam is not None or _is_symmetric(b) for lam, b in zip(scale_B, heads.B))


@lru_cache(maxsize=32)
def _flash_items(npad: int, block: int, symmetric: bool, threads: int) -> tuple[tuple[int, int, int, int], ...]:
    r"""The flash path's work items ``(rows0, rows, cols0, cols)``, largest first.

    Cached, as :func:`_tile_items`: a run calls the kernel with the same ``n`` every stage (10 µs per call at n = 1024).

    Symmetric: the pairs :math:`I \le J` of :data:`~meanfield.kernels.flash.KEY_BLOCK`-row blocks (the
    last one shorter), those off the diagonal (two value products) first.  Otherwise: ranges of whole
    query blocks against every key, about four per thread.
    """
    if symmetric:
        starts = list(range(0, npad, KEY_BLOCK))
        sizes = [min(KEY_BLOCK, npad - s) for s in starts]
        pairs = [(starts[i], sizes[i], starts[j], sizes[j]) for i in range(len(starts)) for j in range(i, len(starts))]
        return tuple(sorted(pairs, key=_flash_cost, reverse=True))
    blocks = npad // block
    per_item = max(1, -(-blocks // (4 * max(1, threads))))
    return tuple((s * block, min(blocks - s, per_item) * block, 0, npad) for s in range(0, blocks, per_item))


@dataclass
class FlashSums:
    r"""The flash tiles' sums of every head, in the threads' slots (:func:`flash_tiles`).

    ``parts[s, h, i]`` and ``part_sums[s, h, i]`` for the first ``slots`` slots add up to
    :math:`\sum_j a_j e^{\beta s_{ij} - \sigma_i} [V_h x_j \mid 1]` (the values only where they were asked for), with the
    row shift :math:`\sigma_i` of :meth:`row_shift` (``tops``: each head's largest :math:`c_i`).  ``ranges`` and
    ``stage_threads``: the row ranges and the threads the stages around the tiles ran on.  ``mass_exponent``: the
    sums were taken with the masses times :math:`2^k` (float32 with deep scores), which :meth:`row_shift` carries;
    ``scale`` = :math:`2^k` multiplies what a sum is compared with.
    """

    parts: np.ndarray
    part_sums: np.ndarray
    slots: int
    shifts: list[np.ndarray]
    tops: list[float]
    symmetric: bool
    ranges: list[slice]
    stage_threads: int
    mass_exponent: int = 0

    @property
    def scale(self) -> float:
        return math.ldexp(1.0, self.mass_exponent)

    def row_shift(self, h: int, rows: slice) -> np.ndarray:
        r"""The shifts :math:`\sigma_i` of head ``h`` on ``rows``: :math:`c_i`, or :math:`(c_i + \bar c)/2` in the symmetric layout
        (less :math:`k\ln 2` for masses scaled by :math:`2^k`)."""
        shift = self.shifts[h][rows]
        return (0.5 * (shift + self.tops[h]) if self.symmetric else shift) - self.mass_exponent * math.log(2.0)


def flash_tiles(
    x: np.ndarray,
    heads: HeadStack,
    beta: float,
    a: np.ndarray,
    dtype: type,
    threads: int,
    symmetric: bool,
    scale_B: list[float | None],
    scale_V: list[float | None],
    x_norm_max: float,
    *,
    values: bool = True,
) -> FlashSums:
    r"""Every head's sums :math:`\sum_j a_j e^{\beta s_{ij}} [V_h x_j \mid 1]` (shifted) on the flash tiles of :mod:`meanfield.kernels.flash`.

    Three stages, by ranges of whole query blocks but for the tiles (on the pool above
    :data:`PARALLEL_STAGE_ELEMENTS`; below it in this thread, cheaper than a hand-off): the rows'
    products with :math:`B_h` and :math:`V_h` and their shifts
    (:func:`~meanfield.kernels.flash.flash_shifts`); the operands in the tiles' layouts
    (:func:`~meanfield.kernels.flash.flash_fill`, which needs the largest shift); the tiles, on the
    pool, query ranges against every key or with every :math:`B_h` symmetric the upper triangle of
    key-block pairs, each thread adding into its own slot of the accumulators.  Each thread claims
    its tiles from an atomic counter in one compiled call (:func:`~meanfield.kernels.atomics.fetch_add`),
    without the GIL between them: handed out one by one from Python, a tile whose thread came back while
    the other held the GIL waited for a futex wake-up (n = 1024, d = 32, float32: 0.79 → 0.72 ms a call on
    2 quiet cores, 4–6 % at d = 64 and at n = 2048–4096; float64 and beside a busy process even).  ``values=False``:
    the row sums only (no value products: the energy).  Every buffer is reused across calls
    (:func:`thread_buffer`): the result is valid until the next call in this thread.

    In float32, where the shifted scores may fall below -:data:`~meanfield.kernels.fused32.FLOAT32_SCALE_DEPTH`, the
    masses are multiplied by :math:`2^k` (exact; :func:`~meanfield.kernels.fused32.float32_scaled_masses`), so that a term near the flushed edge of
    ``exp`` (:math:`e^{-87}`) times a weight stays a normal number: each subnormal product costs a microcode
    assist, and at d = 64, β ≈ 90 they made the call up to 10× slower.
    """
    n, d = x.shape
    npad = padded_rows(n)
    block = query_block(dtype)
    width = d + 2 if symmetric else d + 1
    dv = value_width(d, dtype) if values else 0
    H = heads.H
    queries = [thread_buffer(width * npad, dtype, f"flash queries{h}").reshape(npad // block, width, block) for h in range(H)]
    keys = [thread_buffer(npad * width, dtype, f"flash keys{h}").reshape(npad, width) for h in range(H)]
    value_rows = [thread_buffer(npad * dv, dtype, f"flash values{h}").reshape(npad, dv) for h in range(H)]
    masses = [thread_buffer(npad, dtype, f"flash masses{h}") for h in range(H)]
    if not values:
        scale_V = [1.0] * H  # no products with V_h
    # the products with B_h and V_h in the kernel's precision (in float32 twice as fast, and at d = 384 most of the call
    # outside the tiles); a shift from them may then fall short of its bound by float32 round-off, so that a
    # term reaches e^(1e-6) at most: never an overflow
    general = [lam is None for lam in scale_B] + [mu is None for mu in scale_V]
    x_cast = x.astype(dtype, copy=False) if any(general) else x
    B_cast = [None if lam is not None else heads.B[h].astype(dtype) for h, lam in enumerate(scale_B)]
    VT_cast = [None if mu is not None else np.ascontiguousarray(heads.V[h].T, dtype=dtype) for h, mu in enumerate(scale_V)]
    bxs = [x if scale_B[h] is not None else thread_buffer(n * d, dtype, f"flash bx{h}").reshape(n, d) for h in range(H)]
    vxs = [x if scale_V[h] is not None else thread_buffer(n * d, dtype, f"flash vx{h}").reshape(n, d) for h in range(H)]
    shifts = [thread_buffer(n, np.float64, f"flash shifts{h}") for h in range(H)]
    items = _flash_items(npad, block, symmetric, threads)
    threads = min(threads, len(items))
    stage_threads = threads if _stages_on_pool(n, d, H) else 1
    step = -(-npad // (2 * block * stage_threads)) * block  # about two row ranges per thread, whole query blocks
    ranges = [slice(s, min(npad, s + step)) for s in range(0, npad, step)] if stage_threads > 1 else [slice(0, npad)]
    scales = [(1.0 if lam is None else lam, 1.0 if mu is None else mu) for lam, mu in zip(scale_B, scale_V)]

    def shift_rows(rows: slice) -> None:
        real = slice(rows.start, min(rows.stop, n))
        for h in range(H):
            if scale_B[h] is None and real.stop > real.start:
                np.matmul(x_cast[real], B_cast[h], out=bxs[h][real])  # row i: (B_hᵀ x_i)ᵀ
            if scale_V[h] is None and real.stop > real.start:
                np.matmul(x_cast[real], VT_cast[h], out=vxs[h][real])
            flash_shifts(bxs[h], scales[h][0], beta, x_norm_max, shifts[h], real.start, real.stop)

    tops: list[float] = []  # each head's largest shift, once every row's is known
    scaled: list[np.ndarray] = []  # the masses as the tiles take them (float32_scaled_masses), once the shifts are known

    def fill_rows(rows: slice) -> None:
        for h in range(H):
            flash_fill(x, bxs[h], scales[h][0], vxs[h], scales[h][1], scaled[0], beta, tops[h], symmetric,
                       queries[h], keys[h], value_rows[h], masses[h], shifts[h], rows.start, rows.stop)

    # symmetric: a slot per chunk of tiles (tile_chunks: the same sums whichever thread runs a chunk); otherwise the
    # threads' query ranges are disjoint: one set of accumulators
    bounds = tile_chunks(tuple(_flash_cost(item) for item in items), threads) if symmetric else (0, len(items))
    slots = len(bounds) - 1
    parts = thread_buffer(slots * H * npad * dv, dtype, "flash accumulators").reshape(slots, H, npad, dv)  # reused: no fresh pages per call
    part_sums = thread_buffer(slots * H * npad, dtype, "flash sums").reshape(slots, H, npad)
    if not symmetric:
        parts.fill(0.0)
        part_sums.fill(0.0)

    run_on_threads(shift_rows, ranges, stage_threads)
    tops.extend(float(shift.max()) for shift in shifts)
    # scores reach -2 max c_i: where that is deep, float32 masses scaled so that no product with a term is subnormal
    masses_in, exponent = float32_scaled_masses(a, heads, x_norm_max, 2.0 * max(tops)) if np.dtype(dtype) == np.float32 else (a, 0)
    scaled.append(masses_in)
    run_on_threads(fill_rows, ranges, stage_threads)
    counter = np.zeros(1, dtype=np.int64)  # the next tile (or, symmetric, chunk of tiles) to claim
    table = np.asarray(items, dtype=np.int64)
    cuts = np.asarray(bounds, dtype=np.int64)
    arrays = (tuple(queries), tuple(keys), tuple(value_rows), tuple(masses))

    def claim_tiles(_: Any) -> None:  # one per thread: tiles (symmetric: chunks) claimed from the counter until none is left
        tile = thread_buffer(tile_elements(dtype), dtype, "flash tile")
        partial = thread_buffer(partial_elements(dtype), dtype, "flash partial")
        if symmetric:
            _claim_flash_chunks(counter, table, cuts, *arrays, parts, part_sums, tile, partial)
        else:
            _claim_flash_tiles(counter, table, *arrays, parts[0], part_sums[0], tile)

    run_on_threads(claim_tiles, range(threads), threads)  # a helper that starts after the tiles ran out claims none
    return FlashSums(parts, part_sums, slots, shifts, tops, symmetric, ranges, stage_threads, exponent)


def _flash_cost(item: tuple[int, int, int, int]) -> int:
    """A flash work item's work (its sort key in :func:`_flash_items`)."""
    return item[1] * item[3] * (2 if item[0] == item[2] else 3)


@jit
def _claim_flash_tiles(counter, items, queries, keys, values, masses, acc, sums, tile):  # pragma: no cover - compiled
    """Claim query ranges ``items[k]`` (``k`` from ``counter``, atomically) until none is left, each against every key for
    every head into ``acc``, ``sums`` (the ranges' rows are disjoint): one call per thread, no GIL between its tiles."""
    while True:
        k = fetch_add(counter, 0, 1)
        if k >= items.shape[0]:
            return
        rows0, rows, cols = items[k, 0], items[k, 1], items[k, 3]
        for h in range(len(queries)):
            flash_rows(queries[h], keys[h], values[h], masses[h], acc[h], sums[h], tile, rows0, rows0 + rows, cols)


@jit
def _claim_flash_chunks(counter, items, cuts, queries, keys, values, masses, parts, part_sums, tile, partial):  # pragma: no cover - compiled
    """Claim chunks ``c`` of the symmetric tiles (``c`` from ``counter``, atomically) until none is left: the chunk's slot
    ``parts[c]``, ``part_sums[c]`` zeroed, then its tiles ``items[cuts[c]:cuts[c + 1]]`` in order, each for every head
    (:func:`tile_chunks`): one call per thread, no GIL between its tiles."""
    while True:
        c = fetch_add(counter, 0, 1)
        if c >= cuts.shape[0] - 1:
            return
        parts[c] = 0.0
        part_sums[c] = 0.0
        for k in range(cuts[c], cuts[c + 1]):
            rows0, rows, cols0, cols = items[k, 0], items[k, 1], items[k, 2], items[k, 3]
            for h in range(len(queries)):
                flash_symmetric(queries[h], keys[h], values[h], masses[h], parts[c, h], part_sums[c, h], tile, partial,
                                rows0, rows, cols0, cols)


def _flash_velocity(out: np.ndarray, x: np.ndarray, heads: HeadStack, beta: float, kind: str, a: np.ndarray, dtype: type,
                    tiles: FlashSums, row_logs: np.ndarray | None = None) -> None:
    r"""The velocity from the flash tiles' sums (:func:`flash_tiles`; no mask, the exponential laws).

    By row ranges: the slots added, the rows whose sum underflowed redone exactly (as on the BLAS
    path) and the heads added: a softmax head without such rows straight from the slots.  ``row_logs``:
    as in :func:`velocity_blas`.
    """
    n, d = x.shape
    H = heads.H
    parts, part_sums, used = tiles.parts, tiles.part_sums, tiles.slots
    underflow = _UNDERFLOW[np.dtype(dtype).char] * tiles.scale  # the sums carry the masses' scale
    accs = [thread_buffer(n * (d + 1), np.float64, f"flash head sums{h}").reshape(n, d + 1) for h in range(H)]  # reused: no fresh pages per call

    def finish_rows(rows: slice) -> None:  # the threads' sums added, rows that underflowed redone, the heads added
        rows = slice(rows.start, min(rows.stop, n))
        if rows.stop <= rows.start:
            return
        out[rows].fill(0.0)
        if kind == "softmax" and all(_smallest_flash_sum(part_sums, used, h, rows.start, rows.stop) >= underflow for h in range(H)):
            for h in range(H):  # the common case: no row to redo, no shift needed
                _add_softmax_from_parts(parts, part_sums, used, h, rows.start, out[rows])
            if row_logs is not None:
                _store_row_logs(row_logs, rows, [part_sums[:used, h, rows].sum(axis=0) for h in range(H)],
                                [tiles.row_shift(h, rows) for h in range(H)])
            return
        fixed = []
        for h in range(H):
            shift = tiles.row_shift(h, rows)
            if _gather_flash_sums(parts, part_sums, used, h, rows.start, rows.stop, accs[h]) < underflow:
                shift = _exact_where_underflow(accs[h][rows], shift, rows.start, x, heads.B[h], heads.V[h], a, beta, underflow, False)
            fixed.append(shift)
        _store_row_logs(row_logs, rows, [acc[rows, d] for acc in accs], fixed)
        _add_heads(out[rows], [acc[rows] for acc in accs], fixed, heads, kind)

    run_on_threads(finish_rows, tiles.ranges, tiles.stage_threads)


def flash_row_sums(x: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray, threads: int | None = None) -> list[tuple[np.ndarray, np.ndarray]] | None:
    r"""Every head's row sums :math:`\sum_j a_j e^{\beta s^h_{ij}} = e^{\sigma_i} z_i` on the float64 flash tiles, as pairs ``(z, σ)``.

    The scores, their ``exp`` and the sums of the tiles without the value products (the energy of
    :mod:`meanfield.analysis.energy`): at n = 4096, d = 64 about half a velocity call.  ``None``
    where the tiles do not run (no AVX-512, ``d`` above :data:`~meanfield.kernels.flash.FLASH_MAX_D64`,
    ``β ≤ 0``): then the caller sums its own way.  A row whose ``z`` fell below the float64 range
    (every mass far from its direction) is the caller's to redo.
    """
    n, d = x.shape
    if not FLASH_CPU or d > FLASH_MAX_D64 or beta <= 0 or n == 0:
        return None
    scale_B = [identity_multiple(b) for b in heads.B]
    symmetric = _symmetric_scores(heads, scale_B)
    with one_blas_thread():
        tiles = flash_tiles(x, heads, beta, weights, np.float64, threads or blas_threads(n, d, heads.H, np.float64), symmetric,
                            scale_B, [None] * heads.H, float(_row_norms(x).max()), values=False)
        return [(tiles.part_sums[: tiles.slots, h, :n].sum(axis=0), tiles.row_shift(h, slice(0, n))) for h in range(heads.H)]


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
    flash: bool = True,
    row_logs: np.ndarray | None = None,
) -> np.ndarray:
    r"""Production kernel: GEMM → in-place ``exp`` → GEMM over row blocks on threads.

    Same parameters and result as :func:`velocity_numpy` (``mask="causal"``: row
    :math:`i` sums over :math:`j\le i`, about 56 % of the pairs), plus

    threads : int, optional
        Size of the thread pool (default :func:`meanfield.kernels.jit.num_threads`).
    precision : {"float64", "float32"}
        Arithmetic of the score/exp buffers.  ``float32`` roughly doubles the
        ``exp`` throughput; its relative error is about ``1e-6`` — fine for
        pictures and sweeps, too coarse for convergence-order studies.
    flash : bool
        Take the flash tiles of :mod:`meanfield.kernels.flash` where they are the faster path
        (``d ≤`` :data:`~meanfield.kernels.flash.FLASH_MAX_D` in float32, ``d ≤``
        :data:`~meanfield.kernels.flash.FLASH_MAX_D64` in float64, an AVX-512 processor, no mask, not
        ``relu``); ``False`` keeps the OpenBLAS products (the same law to round-off).
    row_logs : (H, n) array, optional
        Filled with every head's :math:`\ln\sum_j a_j e^{\beta s^h_{ij}}` per row, the sums the velocity
        takes anyway (the energy of :mod:`meanfield.analysis.energy` at no cost), in float64 without a
        mask for the exponential laws; otherwise left as it is.
    """
    x = check_tokens(x, heads, kind, beta=beta)
    if precision not in ("float64", "float32"):  # a KeyError had named nothing
        raise ValueError(f"precision must be 'float64' or 'float32', got {precision!r}")
    dtype = {"float64": np.float64, "float32": np.float32}[precision]
    # BLAS on one thread for the whole call, not only around the products: one threaded BLAS call here (the
    # norm of a 384-square B_h is a dot over 147 456 elements) left OpenBLAS's workers spinning on the other
    # core for the rest of the call, where the pool's helper thread needed it (1.4-1.7x slower at d = 384)
    causal = is_causal(mask)
    with one_blas_thread():
        logs = row_logs if dtype == np.float64 and kind != "relu" and not causal else None
        return _velocity_blas(x, heads, beta, kind, weights, threads, dtype, causal, flash, logs)


def _velocity_blas(
    x: np.ndarray,
    heads: HeadStack,
    beta: float,
    kind: str,
    weights: np.ndarray | None,
    threads: int | None,
    dtype: type,
    causal: bool,
    flash: bool,
    row_logs: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`velocity_blas` on checked tokens, with BLAS already held to one thread (``row_logs`` as there, or ``None``)."""
    n, d = x.shape
    a = token_masses(n, weights, kind=kind, causal=causal, precision=np.dtype(dtype).name)
    if n == 0:
        return np.zeros((0, d))
    x_norms = _row_norms(x)  # (once: the float32 check, the flash tiles and the row blocks read them)
    x_norm_max = float(x_norms.max())
    if dtype == np.float32 and weights is not None:  # (the default masses 1/n total 1)
        check_float32_sums(a, x_norm_max, heads, kind)
    out = np.empty((n, d))  # each stage that finishes rows zeroes them first, in its own thread, where it adds into them
    scale_B = [identity_multiple(b) for b in heads.B]
    scale_V = [identity_multiple(v) for v in heads.V]
    symmetric_scores = _symmetric_scores(heads, scale_B)
    if flash and FLASH_CPU and d <= (FLASH_MAX_D if dtype == np.float32 else FLASH_MAX_D64) and not causal and kind != "relu":
        tiles = flash_tiles(x, heads, beta, a, dtype, threads or blas_threads(n, d, heads.H, dtype), symmetric_scores, scale_B,
                            scale_V, x_norm_max)
        _flash_velocity(out, x, heads, beta, kind, a, dtype, tiles, row_logs)
        return out
    symmetric = not causal and kind != "relu" and n >= 2 * TILE and symmetric_scores
    # rhs: [x | 1]ᵀ, so that [beta x B | -c] @ rhs = beta s - c (symmetric layout: _operand_rows).  The
    # operands live in buffers reused across calls (thread_buffer), filled row block by row block on the pool.
    width = d + 2 if symmetric else d + 1
    a_ops, exponent = a, 0  # float32 masses scaled where the scores may run deep (|β s_ij| ≤ c_i ≤ β|B_h|_F max|x|²)
    if dtype == np.float32 and kind != "relu":
        a_ops, exponent = float32_scaled_masses(a, heads, x_norm_max, 2.0 * beta * max(float(np.linalg.norm(b)) for b in heads.B) * x_norm_max**2)
    operands = Operands(
        lhs=[thread_buffer(n * width, dtype, f"lhs{h}").reshape(n, width) for h in range(heads.H)],
        rhs=[thread_buffer(width * n, dtype, f"rhs{h}").reshape((n, width) if symmetric else (width, n)) for h in range(heads.H if symmetric else 1)],
        values=[thread_buffer(n * (d + 1), dtype, f"values{h}").reshape(n, d + 1) for h in range(heads.H)],
        shifts=[np.zeros(n) for _ in range(heads.H)],
        scale_B=scale_B,
        scale_V=scale_V,
        B=[None if lam is not None else heads.B[h].astype(dtype) for h, lam in enumerate(scale_B)],
        VT=[None if mu is not None else np.ascontiguousarray(heads.V[h].T, dtype=dtype) for h, mu in enumerate(scale_V)],
        masses=a_ops,
        mass_exponent=exponent,
    )
    if symmetric and all(lam is not None and mu is not None for lam, mu in zip(scale_B, scale_V)):
        operands.weighted = [thread_buffer(n * (d + 1), dtype, f"weighted{h}").reshape(n, d + 1) for h in range(heads.H)]
    block = block_rows(n)
    if causal:  # smaller blocks skip more of the masked triangle (at least 32 rows: GEMM-sized)
        block = min(block, max(CAUSAL_MIN_ROWS, -(-n // CAUSAL_BLOCKS)))
    jobs = [slice(s, min(n, s + block)) for s in range(0, n, block)]
    nthreads = min(threads or blas_threads(n, d, heads.H, dtype, causal=causal), len(jobs) if not symmetric else n)
    products = 2.0 * n * d * d * sum((lam is None) + (mu is None) for lam, mu in zip(scale_B, scale_V))

    def prepare(rows: slice) -> None:
        _operand_rows(rows, x, heads, beta, kind, a_ops, x_norms, x_norm_max, operands)

    # one BLAS thread per pool thread (velocity_blas holds it): the pool already fills the cores, and threaded
    # BLAS on these thin GEMMs only adds synchronisation (up to 50× slower on a loaded machine)
    if products > PREP_PARALLEL_FLOPS or _stages_on_pool(n, d, heads.H):  # every operand row is written before any block reads it
        run_on_threads(prepare, jobs, nthreads)
    else:
        prepare(slice(0, n))
    if symmetric:
        _symmetric_velocity(out, x, heads, beta, kind, operands, dtype, nthreads, row_logs)
    else:

        def work(rows: slice) -> None:
            _blas_rows(rows, x, heads, beta, kind, operands, out, dtype, causal, row_logs)

        run_on_threads(work, jobs[::-1] if causal else jobs, nthreads)  # causal: the longest rows first
    return out
