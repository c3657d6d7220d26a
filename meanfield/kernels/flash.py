r"""Flash tiles for the dense attention kernel: score panel → ``exp`` → value panels, in cache, on register panels.

For one head with shift :math:`c_i \ge \max_j \beta s_{ij}` the dense kernel needs, per query row,

.. math::

    \mathrm{acc}_i = \sum_j E_{ij}\, W_j, \qquad z_i = \sum_j E_{ij}\, w_j,
    \qquad E_{ij} = e^{\beta s_{ij} - c_i} \le 1,

with :math:`W_j = a_j V x_j` (padded to a whole number of vectors) and :math:`w_j = a_j`.
:func:`flash_rows` computes them for a block of query rows against every key, a tile at a time:
:data:`QUERY_BLOCK` queries × :data:`KEY_BLOCK` keys of scores from the
:func:`~meanfield.kernels.panels.score_exp_panel` (queries in the vector lanes, keys broadcast), their
``exp`` computed on the panel's registers before they are stored, the
sums :math:`z` (a one-row panel), then the value panels (value coordinates in the lanes, the tile's
exponentials broadcast).  The tile never leaves the L1/L2 cache, and nothing is
packed: the operands are read where they lie.

**Symmetric scores** (every :math:`B_h` symmetric; the layout of
:mod:`meanfield.kernels.blas`: queries :math:`[\beta B x_i \mid -c_i/2 \mid 1]`, keys
:math:`[x_j \mid 1 \mid -c_j/2]`, values weighted by :math:`e^{(c_j-\bar c)/2}`):
:math:`E_{ij} = e^{\beta s_{ij} - (c_i + c_j)/2}` is symmetric, and :func:`flash_symmetric`
uses each tile of a pair of key blocks :math:`I < J` for both sides, :math:`\mathrm{acc}_I \mathrel{+}= E W_J`
and :math:`\mathrm{acc}_J \mathrel{+}= E^\top W_I`: the second product is the same value panel with
the tile's strides exchanged.  A diagonal pair (:math:`I = J`) is computed whole, for one side.

Where it pays (``d ≤`` :data:`FLASH_MAX_D` in float32, :data:`FLASH_MAX_D64` in float64, measured there against the OpenBLAS path) the
dense kernel :func:`meanfield.kernels.blas.velocity_blas` takes these tiles.  Each part runs near the
core's peak (float32, one thread, n = 1024, ns per ordered pair of the symmetric tiles): at d = 32 the
scores with their ``exp`` 0.28, the two value products 0.38, the whole tile 0.71; at d = 64 0.39, 0.76 and 1.14.

Layouts (row-major, every array contiguous; ``npad`` is ``n`` rounded up to :data:`PAD`,
the padding rows zero, so that no tile runs over):

* ``queries`` (``npad / block``, ``width``, ``block``): the augmented queries by query block, each block
  transposed (a query per column), so that a block's rows are contiguous (one or two memory pages, where
  a transpose of all ``npad`` queries put every row of a block on its own page: 5 % slower at n = 4096, d = 64);
* ``keys`` (``npad``, ``width``): the augmented keys, a key per row;
* ``values`` (``npad``, ``dv``): :math:`W_j`, ``dv`` a multiple of the vector lanes;
* ``masses`` (``npad``): :math:`w_j`;
* ``acc`` (``npad``, ``dv``) and ``sums`` (``npad``): the results, added to.
"""
from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np

from meanfield.kernels.jit import jit
from meanfield.kernels.panels import lanes, score_exp_panel, score_exp_panel_tail, sum_panel, value_panel, value_panel_half, value_panel_wide, value_panel_wide_half, weighted_rows

__all__ = ["QUERY_BLOCK", "KEY_BLOCK", "PAD", "FLASH_CPU", "FLASH_MAX_D", "FLASH_MAX_D64", "query_block", "padded_rows", "value_width",
           "flash_rows", "flash_symmetric", "flash_operands", "flash_shifts", "flash_fill", "tile_elements", "partial_elements",
           "tile_buffer", "partial_buffer"]

#: the rows (queries and keys) are padded to a multiple of this: of every query block (32 float32, 16
#: float64), of the value panels' 8 rows and of the score panels' 12 or 4 keys (at n = 1024, 96 rows
#: had cost 6 % in padding)
PAD = 32
#: keys per tile (at most): a multiple of :data:`PAD`
KEY_BLOCK = 192
#: queries per tile by dtype character: the score panel's two vectors of lanes
QUERY_BLOCK = {"f": 2 * lanes(4), "d": 2 * lanes(8)}
#: rows of the score panel (keys broadcast) and of the value panels
_SCORE_ROWS = 12
_SCORE_TAIL_ROWS = 4
_VALUE_ROWS = 8
_WIDE_ROWS = 12


def _host_has_avx512() -> bool:
    """Whether this processor has AVX-512F (the panels' 512-bit vectors and 32 registers)."""
    try:
        return bool(llvm.get_host_cpu_features().get("avx512f", False))
    except Exception:  # pragma: no cover - llvmlite without the query
        return False


#: the dense kernel takes the flash tiles on processors with AVX-512 (elsewhere a panel's 24
#: accumulators would not fit the 16 registers, and OpenBLAS's kernels are the faster)
FLASH_CPU = _host_has_avx512()
#: the dense kernel takes the flash tiles in float32 up to this ``d``.  Measured against the BLAS path in one
#: process, alternating calls (p25; B = I / a random rotation, V = I; t_BLAS / t_tiles): two threads 1.37 / 1.59
#: at n = 1024, d = 32; 1.28 / 1.37 at n = 1024, d = 64 and 1.31 / 1.47 at n = 4096; 1.22 / 1.11 at n = 1024,
#: d = 96; 1.14 / 1.02 at n = 1024, d = 128 and 1.09 / 1.13 at n = 4096; one thread 1.35 / 1.40 at n = 1024, d = 64
#: and 1.15 / 1.10 at d = 128.  Above, the gain goes: 1.09 / 1.01 at n = 2048, d = 160, and at d = 384 1.06 / 0.89
#: (n = 1024) and 1.00 / 0.93 (n = 2048).
FLASH_MAX_D = 128
#: the same in float64 (the ``exp`` on the score panels' registers: before it, numba's 256-bit ``exp`` loop had
#: lost what the panels gain, 0.9–1.1×).  Two threads, t_BLAS / t_tiles: 1.26 / 1.34 at n = 1024, d = 32 and 1.25 / 1.30
#: at n = 4096; 1.31 / 1.29 at n = 1024, d = 64 and 1.19 / 0.99 at n = 4096; one thread 1.31 / 1.48 (d = 32) and
#: 1.26 / 1.28 (d = 64) at n = 1024.  At d = 128 1.14 / 0.86–0.93, at d = 384 0.96 / 0.71: the BLAS path stays there.
FLASH_MAX_D64 = 64


def query_block(dtype: type | np.dtype) -> int:
    """Queries per tile for ``dtype`` (32 float32, 16 float64)."""
    return QUERY_BLOCK[np.dtype(dtype).char]


def padded_rows(n: int) -> int:
    """``n`` rounded up to a whole number of :data:`PAD` rows."""
    return -(-int(n) // PAD) * PAD


def value_width(d: int, dtype: type | np.dtype) -> int:
    """The values' padded width: ``d`` rounded up to a whole number of vectors of ``dtype``."""
    width = lanes(np.dtype(dtype).itemsize)
    return -(-int(d) // width) * width


def tile_elements(dtype: type | np.dtype) -> int:
    """The size of one tile of exponentials: :data:`KEY_BLOCK` × the query block."""
    return KEY_BLOCK * query_block(dtype)


def partial_elements(dtype: type | np.dtype) -> int:
    """The size of the transposed side's sums (:func:`flash_symmetric`): :data:`KEY_BLOCK` vectors."""
    return KEY_BLOCK * lanes(np.dtype(dtype).itemsize)


def tile_buffer(dtype: type | np.dtype) -> np.ndarray:
    """A buffer for one tile of exponentials (:func:`tile_elements`)."""
    return np.empty(tile_elements(dtype), dtype=dtype)


def partial_buffer(dtype: type | np.dtype) -> np.ndarray:
    """A buffer for the transposed side's sums (:func:`partial_elements`)."""
    return np.empty(partial_elements(dtype), dtype=dtype)


@jit
def _query_sums(tile, masses, sums, q0, k0, keys):  # pragma: no cover - compiled
    """``sums[q0 + i] += Σ_k tile[k, i] masses[k0 + k]`` over the tile's ``keys`` rows (a one-row panel: the sums stay in registers)."""
    size = tile.itemsize
    block = 2 * (64 // size)
    sum_panel(tile, np.int64(tile.ctypes.data), block, np.int64(masses.ctypes.data) + k0 * size, 1, 0,
              np.int64(sums.ctypes.data) + q0 * size, 0, keys, 1)


@jit(fastmath={"reassoc", "contract"})
def _key_sums(tile, masses, sums, partial, q0, k0, keys, first, last):  # pragma: no cover - compiled
    """The transposed side's sums ``sums[k0 + k] += Σ_i tile[k, i] masses[q0 + i]``, gathered lane-wise in ``partial``.

    ``first``: ``partial`` is cleared first; ``last``: its rows' lanes are summed into ``sums``.
    """
    size = tile.itemsize
    width = 64 // size
    if first:
        partial[: keys * width] = 0.0
    weighted_rows(tile, np.int64(tile.ctypes.data), np.int64(masses.ctypes.data) + q0 * size, np.int64(partial.ctypes.data), keys)
    if last:
        for k in range(keys):
            total = partial.dtype.type(0.0)
            for lane in range(width):
                total += partial[k * width + lane]
            sums[k0 + k] += total


@jit
def _score_exps(queries, keys, tile, q0, k0, count):  # pragma: no cover - compiled
    """``tile[k, i] = exp(queries[q0 / block, :, i] · keys[k0 + k])`` for ``k < count`` (a multiple of 4), ``i`` < the query block.

    The ``exp`` runs on the score panels' registers before they are stored.  Measured on the symmetric
    float32 tiles at n = 1024 (one thread, ns per ordered pair): a separate ``exp`` pass over the tile
    (numba's 256-bit loop, 0.29 ns per element) had added 0.14 to the scores; on the registers it adds 0.09
    at d = 32 and 0.04 at d = 64, and the whole tile went from 0.76 to 0.71 (d = 32) and 1.44 to 1.14 (d = 64).
    """
    width, block = queries.shape[1], queries.shape[2]
    size = tile.itemsize
    q = np.int64(queries.ctypes.data) + q0 * width * size
    kk = np.int64(keys.ctypes.data) + k0 * width * size
    t = np.int64(tile.ctypes.data)
    whole = count - count % _SCORE_ROWS
    for r in range(0, whole, _SCORE_ROWS):
        score_exp_panel(tile, q, block, kk + r * width * size, 1, width, t + r * block * size, block, width, 0)
    for r in range(whole, count, _SCORE_TAIL_ROWS):
        score_exp_panel_tail(tile, q, block, kk + r * width * size, 1, width, t + r * block * size, block, width, 0)


@jit
def _values(tile, values, acc, rows, term_stride, row_stride, first_value, first_row, terms):  # pragma: no cover - compiled
    """``acc[first_row + r] += Σ_p tile[p·term_stride + r·row_stride] · values[first_value + p]`` for ``r < rows``, ``p < terms``.

    With ``term_stride`` the query block and ``row_stride`` 1: the tile's queries against its keys' values
    (:math:`E W`); with the strides exchanged: its keys against its queries' values (:math:`E^\\top W`).
    ``rows`` is a multiple of 8: 12-row panels, then one or two of 8 rows; every value coordinate is covered (two vectors at a time, one for a remainder).
    """
    dv = values.shape[1]
    size = tile.itemsize
    width = 64 // size
    t = np.int64(tile.ctypes.data)
    v = np.int64(values.ctypes.data) + first_value * dv * size
    a = np.int64(acc.ctypes.data) + first_row * dv * size
    narrow = (rows % _WIDE_ROWS) // 4 * 2 % 3  # 8-row panels (none, one or two for rows ≡ 0, 8, 4 mod 12): the rest whole 12-row panels
    wide = rows - narrow * _VALUE_ROWS
    r = 0
    while r < rows:
        b = t + r * row_stride * size
        c = a + r * dv * size
        j = 0
        while j < dv:
            whole = j + 2 * width <= dv  # two vectors, or one for the remainder
            if r < wide:
                if whole:
                    value_panel_wide(tile, v + j * size, dv, b, term_stride, row_stride, c + j * size, dv, terms, 1)
                else:
                    value_panel_wide_half(tile, v + j * size, dv, b, term_stride, row_stride, c + j * size, dv, terms, 1)
            elif whole:
                value_panel(tile, v + j * size, dv, b, term_stride, row_stride, c + j * size, dv, terms, 1)
            else:
                value_panel_half(tile, v + j * size, dv, b, term_stride, row_stride, c + j * size, dv, terms, 1)
            j += 2 * width if whole else width
        r += _WIDE_ROWS if r < wide else _VALUE_ROWS


@jit
def flash_rows(queries, keys, values, masses, acc, sums, tile, first, last, key_count):  # pragma: no cover - compiled
    r"""Queries ``[first, last)`` (whole query blocks) against keys ``[0, key_count)`` (a multiple of :data:`PAD`): ``acc``, ``sums`` added to."""
    block = 2 * (64 // tile.itemsize)
    for q0 in range(first, last, block):
        for k0 in range(0, key_count, KEY_BLOCK):
            count = min(KEY_BLOCK, key_count - k0)
            _score_exps(queries, keys, tile, q0, k0, count)
            _query_sums(tile, masses, sums, q0, k0, count)
            _values(tile, values, acc, block, block, 1, k0, q0, count)


@jit
def flash_symmetric(queries, keys, values, masses, acc, sums, tile, partial, rows0, rows, cols0, cols):  # pragma: no cover - compiled
    r"""Queries ``[rows0, rows0 + rows)`` against keys ``[cols0, cols0 + cols)`` of symmetric scores (``rows``, ``cols`` multiples of :data:`PAD`, ``cols`` at most :data:`KEY_BLOCK`).

    Off the diagonal (``rows0 != cols0``; the two ranges then do not overlap) each tile serves both
    sides: ``acc[I] += E W_J``, ``acc[J] += Eᵀ W_I`` and the sums of both.  On it the block is
    computed whole, for its rows.  ``partial`` holds :data:`KEY_BLOCK` vectors.
    """
    block = 2 * (64 // tile.itemsize)
    diagonal = rows0 == cols0
    for q0 in range(rows0, rows0 + rows, block):
        _score_exps(queries, keys, tile, q0, cols0, cols)
        _query_sums(tile, masses, sums, q0, cols0, cols)
        if not diagonal:
            _key_sums(tile, masses, sums, partial, q0, cols0, cols, q0 == rows0, q0 + block >= rows0 + rows)
            _values(tile, values, acc, cols, 1, block, q0, cols0, block)
        _values(tile, values, acc, block, block, 1, cols0, q0, cols)


@jit
def flash_shifts(bx, b_scale, beta, x_norm_max, shifts, first, last):  # pragma: no cover - compiled
    r"""The shifts :math:`c_i = \beta\|B_h^\top x_i\|\max_j\|x_j\|` of rows ``[first, last)`` into ``shifts`` (``bx`` as in :func:`flash_operands`); returns their largest."""
    d = bx.shape[1]
    top = 0.0
    for i in range(first, last):
        total = 0.0
        for k in range(d):
            total += bx[i, k] * bx[i, k]
        c = beta * abs(b_scale) * np.sqrt(total) * x_norm_max
        shifts[i] = c
        top = max(top, c)
    return top


@jit
def flash_fill(x, bx, b_scale, vx, v_scale, a, beta, top, symmetric, queries, keys, values, masses, shifts, first, last):  # pragma: no cover - compiled
    r"""Rows ``[first, last)`` of the operands of :func:`flash_operands`, their shifts already in ``shifts`` and ``top`` the largest of all.

    ``first`` is a whole number of query blocks; rows from ``n`` on (up to ``npad``) are the zero padding.
    ``values`` may have no columns (the row sums only).
    """
    n, d = x.shape
    dv = values.shape[1]
    zero = keys.dtype.type(0.0)
    block = queries.shape[2]
    scale = beta * b_scale
    stop = min(last, n)
    for i in range(first, stop):  # keys, values and masses: a row each
        c = shifts[i]
        weight = a[i] * np.exp(0.5 * (c - top)) if symmetric else a[i]
        value_scale = weight * v_scale
        for k in range(d):
            keys[i, k] = x[i, k]
        if dv > 0:  # no values (dv = 0): the row sums only
            for k in range(d):
                values[i, k] = value_scale * vx[i, k]
            for k in range(d, dv):
                values[i, k] = zero
        keys[i, d] = 1.0
        masses[i] = weight
        if symmetric:
            keys[i, d + 1] = -0.5 * c
    for q in range(first // block, -(-stop // block)):  # queries: a block at a time, a row of the block (all its lanes) at a time
        i0 = q * block
        filled = min(block, stop - i0)  # the block's real rows (the rest is padding, zeroed below)
        for k in range(d):
            for lane in range(filled):
                queries[q, k, lane] = scale * bx[i0 + lane, k]
        for lane in range(filled):
            c = shifts[i0 + lane]
            if symmetric:
                queries[q, d, lane] = -0.5 * c
                queries[q, d + 1, lane] = 1.0
            else:
                queries[q, d, lane] = -c
    for i in range(max(first, n), last):
        masses[i] = zero
        for k in range(keys.shape[1]):
            keys[i, k] = zero
        for k in range(dv):
            values[i, k] = zero
        for k in range(queries.shape[1]):
            queries[i // block, k, i % block] = zero


@jit
def flash_operands(x, bx, b_scale, vx, v_scale, a, beta, x_norm_max, symmetric, queries, keys, values, masses, shifts):  # pragma: no cover - compiled
    r"""One head's operands in the layouts above, from ``bx`` (row ``i``: :math:`B_h^\top x_i / \texttt{b\_scale}`) and ``vx`` (:math:`V_h x_i / \texttt{v\_scale}`).

    Writes the shifts :math:`c_i = \beta\|B_h^\top x_i\|\max_j\|x_j\|` into ``shifts`` and returns
    :math:`\bar c = \max_i c_i`.  Rows: queries :math:`[\beta B_h^\top x_i \mid -c_i]` and keys
    :math:`[x_j \mid 1]`, values :math:`a_j V_h x_j`, masses :math:`a_j`; ``symmetric``: queries
    :math:`[\beta B_h x_i \mid -c_i/2 \mid 1]`, keys :math:`[x_j \mid 1 \mid -c_j/2]`, and values and masses
    weighted by :math:`e^{(c_j-\bar c)/2}`.  The padding rows (from ``n`` to ``npad``) and columns are zeroed.
    The two passes, :func:`flash_shifts` then :func:`flash_fill`, may also run on row ranges.
    """
    n = x.shape[0]
    top = flash_shifts(bx, b_scale, beta, x_norm_max, shifts, 0, n)
    flash_fill(x, bx, b_scale, vx, v_scale, a, beta, top, symmetric, queries, keys, values, masses, shifts, 0, keys.shape[0])
    return top
