"""Register panels and flash tiles: the panels against NumPy products, the tiles' sums against dense sums,
and the BLAS kernel with the tiles against the float64 NumPy twin and against its OpenBLAS path.

The panels and tiles are called directly, so that they are checked on any processor; the dispatch
(:data:`meanfield.kernels.flash.FLASH_CPU`) only decides whether ``velocity_blas`` takes them.
"""
from __future__ import annotations

import numba
import numpy as np
import pytest

import meanfield.kernels.blas as blas_module
from meanfield.geometry.sphere import sample_uniform
from meanfield.heads import HeadStack
from meanfield.kernels import flash
from meanfield.kernels.blas import velocity_blas
from meanfield.kernels.fused import FLUSH_BELOW
from meanfield.kernels.fused32 import FLOAT32_SUMS_EXPONENT
from meanfield.kernels.panels import lanes, make_panel, weighted_rows
from meanfield.kernels.reference import velocity_numpy

_panel_3x5 = make_panel(3, 5)
_exp_panel_2x3 = make_panel(2, 3, exp=True)


@numba.njit
def _run_panel(a, b, c, accumulate, exchange):  # the panel over whole arrays: c[r] (+)= Σ_p b[p, r] a[p]
    k = a.shape[0]
    size = a.itemsize
    rows = c.shape[0]
    sbp, sbr = (1, k) if exchange else (rows, 1)  # b read as b[p, r] from a (k, rows) array or its transpose
    _panel_3x5(a, np.int64(a.ctypes.data), a.shape[1], np.int64(b.ctypes.data), sbp, sbr,
               np.int64(c.ctypes.data), c.shape[1], k, accumulate)


@numba.njit
def _run_exp_panel(a, b, c):  # c[r] = exp(Σ_p b[p, r] a[p])
    _exp_panel_2x3(a, np.int64(a.ctypes.data), a.shape[1], np.int64(b.ctypes.data), c.shape[0], 1,
                   np.int64(c.ctypes.data), c.shape[1], a.shape[0], 0)


@numba.njit
def _run_weighted_rows(tile, weights, partial, rows):
    weighted_rows(tile, np.int64(tile.ctypes.data), np.int64(weights.ctypes.data), np.int64(partial.ctypes.data), rows)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("accumulate", [0, 1])
@pytest.mark.parametrize("exchange", [False, True])
def test_panel_matches_numpy_product(dtype, accumulate, exchange):
    rng = np.random.default_rng(1)
    width = 3 * lanes(np.dtype(dtype).itemsize)
    k = 37
    a = rng.standard_normal((k, width)).astype(dtype)
    b = rng.standard_normal((k, 5)).astype(dtype)
    stored = np.ascontiguousarray(b.T) if exchange else b
    c0 = rng.standard_normal((5, width)).astype(dtype)
    c = c0.copy()
    _run_panel(a, stored, c, accumulate, exchange)
    expected = b.T.astype(float) @ a.astype(float) + (c0 if accumulate else 0.0)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(c, expected, rtol=0, atol=tol * np.abs(expected).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exp_panel_stores_the_exponentials_of_the_products(dtype):
    """The score panel with the exp on its registers: float32 within 2.4e-7 of exp of the exact product over
    [-87, 0] and 0 below; float64 within 1 ulp over [-600, 0] and exactly 0 below (no subnormal result); NaN kept."""
    rng = np.random.default_rng(2)
    width = 2 * lanes(np.dtype(dtype).itemsize)
    low = -100.0 if dtype == np.float32 else -760.0
    z = np.concatenate([np.linspace(0.0, low, 3 * width - 2), [np.nan, -np.inf]]).reshape(3, width)
    z = z[:, rng.permutation(width)]  # the special values in any lane
    a = np.vstack([z, rng.uniform(-1.0, 1.0, (2, width))]).astype(dtype)  # a row per term: z exactly, then two more terms
    b = np.zeros((5, 3), dtype)  # b[p, r]: row r of the result sums term r only, plus 0 × the extra terms
    b[[0, 1, 2], [0, 1, 2]] = 1.0
    c = np.full((3, width), dtype(7.0))
    _run_exp_panel(a, b, c)
    exact = np.exp(z.astype(dtype).astype(np.float64))
    clean = np.isfinite(z).all(axis=0)[None, :]  # a lane holding NaN or -inf in any term is NaN in every row (0 × NaN)
    if dtype == np.float32:
        inside = clean & (z >= -87.0)
        np.testing.assert_allclose(c[inside], exact[inside], rtol=2.4e-7)
        assert np.all(c[clean & (z < -87.0)] == 0.0)
    else:
        inside = clean & (z >= FLUSH_BELOW)
        np.testing.assert_allclose(c[inside], exact[inside], rtol=2.3e-16, atol=0)
        assert np.all(c[clean & (z < FLUSH_BELOW)] == 0.0) and np.all(c[inside] >= np.finfo(float).tiny)
    assert np.all(np.isnan(c[np.isnan(z)]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weighted_rows_matches_numpy(dtype):
    rng = np.random.default_rng(2)
    width = lanes(np.dtype(dtype).itemsize)
    tile = rng.random((11, 2 * width)).astype(dtype)
    weights = rng.random(2 * width).astype(dtype)
    partial = rng.random((11, width)).astype(dtype)
    expected = partial + (tile * weights).reshape(11, 2, width).sum(axis=1)
    _run_weighted_rows(tile, weights, partial, 11)
    np.testing.assert_allclose(partial, expected, rtol=1e-6 if dtype == np.float32 else 1e-15)


def _operands(x, B, V, a, beta, symmetric, dtype):
    n, d = x.shape
    npad, block, dv = flash.padded_rows(n), flash.query_block(dtype), flash.value_width(d, dtype)
    width = d + 2 if symmetric else d + 1
    queries = np.full((npad // block, width, block), np.nan, dtype)  # NaN: every entry must be written
    keys = np.full((npad, width), np.nan, dtype)
    values = np.full((npad, dv), np.nan, dtype)
    masses = np.full(npad, np.nan, dtype)
    shifts = np.empty(n)
    top = flash.flash_operands(x, x @ B, 1.0, x @ V.T, 1.0, a, beta, 1.0, symmetric, queries, keys, values, masses, shifts)
    return queries, keys, values, masses, shifts, top


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("n,d", [(7, 3), (250, 4), (300, 5), (500, 33), (200, 100)])
def test_tiles_match_dense_sums(dtype, symmetric, n, d):
    """acc_i = Σ_j E_ij W_j and z_i = Σ_j E_ij w_j against the dense sums (padding, partial key blocks, both sides;
    last key blocks of 32, 64 and 128 rows: every mix of 12- and 8-row value panels and of 12- and 4-key score panels)."""
    rng = np.random.default_rng(n + d)
    x = sample_uniform(n, d, seed=3)
    B = rng.standard_normal((d, d)) / np.sqrt(d)
    if symmetric:
        B = B + B.T
    V = rng.standard_normal((d, d))
    a = rng.random(n)
    a[::7] = 0.0
    beta = 5.0
    queries, keys, values, masses, shifts, top = _operands(x, B, V, a, beta, symmetric, dtype)
    assert np.all(np.isfinite(queries)) and np.all(np.isfinite(keys)) and np.all(np.isfinite(values)) and np.all(np.isfinite(masses))
    npad, dv = values.shape
    acc = np.zeros((npad, dv), dtype)
    sums = np.zeros(npad, dtype)
    tile = flash.tile_buffer(dtype)
    if symmetric:
        partial = flash.partial_buffer(dtype)
        starts = range(0, npad, flash.KEY_BLOCK)
        for i in starts:
            for j in starts:
                if j >= i:
                    flash.flash_symmetric(queries, keys, values, masses, acc, sums, tile, partial, i, min(flash.KEY_BLOCK, npad - i), j,
                                          min(flash.KEY_BLOCK, npad - j))
        shift = 0.5 * (shifts + top)
    else:
        flash.flash_rows(queries, keys, values, masses, acc, sums, tile, 0, npad, npad)
        shift = shifts
    scores = beta * (x @ B) @ x.T
    np.testing.assert_allclose(shifts, beta * np.linalg.norm(x @ B, axis=1), rtol=1e-12)
    weights = np.exp(scores - shift[:, None]) * a
    expected_sums = weights.sum(axis=1)
    expected_acc = weights @ (x @ V.T)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(sums[:n], expected_sums, rtol=0, atol=tol * expected_sums.max())
    np.testing.assert_allclose(acc[:n, :d], expected_acc, rtol=0, atol=tol * np.abs(expected_acc).max())


@pytest.mark.parametrize("symmetric", [False, True])
def test_operands_by_row_ranges_match_one_pass(symmetric):
    """flash_shifts then flash_fill over row ranges (in any order, padding last) write what flash_operands writes in one pass."""
    n, d, dtype = 150, 6, np.float32
    rng = np.random.default_rng(4)
    x = sample_uniform(n, d, seed=4)
    B, V = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    a = rng.random(n)
    whole = _operands(x, B, V, a, 3.0, symmetric, dtype)
    queries, keys, values, masses = (np.full_like(array, np.nan) for array in whole[:4])
    shifts = np.empty(n)
    bx, vx = x @ B, x @ V.T
    npad = keys.shape[0]
    ranges = [(64, 128), (0, 64), (128, npad)]
    tops = [flash.flash_shifts(bx, 1.0, 3.0, 1.0, shifts, first, min(last, n)) for first, last in ranges]
    for first, last in ranges:
        flash.flash_fill(x, bx, 1.0, vx, 1.0, a, 3.0, max(tops), symmetric, queries, keys, values, masses, shifts, first, last)
    assert max(tops) == whole[5]
    for got, expected in zip((queries, keys, values, masses, shifts), whole[:5]):
        np.testing.assert_array_equal(got, expected)


def _heads(d, H, symmetric, seed):
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((H, d, d)) / np.sqrt(d)
    if symmetric:
        B = B + np.transpose(B, (0, 2, 1))
    return HeadStack(B=B, V=rng.standard_normal((H, d, d)) / np.sqrt(d), w=np.linspace(1.0, 2.0, H))


@pytest.mark.parametrize("kind", ["softmax", "unnormalized", "pooled"])
@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("masses", [False, True])
@pytest.mark.parametrize("stages_on_pool", [False, True], ids=["stages in one thread", "stages on the pool"])
@pytest.mark.parametrize("precision, tol", [("float32", 2e-5), ("float64", 1e-13)])
def test_blas_kernel_with_tiles_matches_numpy(kind, H, symmetric, masses, stages_on_pool, precision, tol, monkeypatch):
    """The kernel on the flash tiles (forced on, whatever the processor) against the float64 twin and the
    OpenBLAS path; the stages around the tiles in the calling thread, or by row ranges on the pool."""
    monkeypatch.setattr(blas_module, "FLASH_CPU", True)
    if stages_on_pool:
        monkeypatch.setattr(blas_module, "PARALLEL_STAGE_ELEMENTS", 0)
    n, d = 700, 24
    x = sample_uniform(n, d, seed=5)
    heads = _heads(d, H, symmetric, seed=6)
    weights = np.random.default_rng(7).random(n) if masses else None
    expected = velocity_numpy(x, heads, beta=4.0, kind=kind, weights=weights)
    scale = np.abs(expected).max()
    for threads in (1, 2):
        tiles = velocity_blas(x, heads, beta=4.0, kind=kind, weights=weights, precision=precision, threads=threads)
        np.testing.assert_allclose(tiles, expected, rtol=0, atol=tol * scale)
    products = velocity_blas(x, heads, beta=4.0, kind=kind, weights=weights, precision=precision, flash=False)
    np.testing.assert_allclose(tiles, products, rtol=0, atol=tol * scale)


@pytest.mark.parametrize("symmetric", [False, True])
def test_tile_sums_are_blocked_not_one_chain(symmetric, monkeypatch):
    """At n = 4096 each accumulator gets 4096 terms: the panels sum each call's terms apart and add them once,
    which keeps the float32 velocity within 6e-7 of float64 (relative to its largest entry; one running sum
    over all terms had measured 1.1e-6 with B = I and 2.4e-6 with a rotation)."""
    monkeypatch.setattr(blas_module, "FLASH_CPU", True)
    n, d = 4096, 32
    x = sample_uniform(n, d, seed=0)
    B = np.eye(d) if symmetric else np.linalg.qr(np.random.default_rng(1).standard_normal((d, d)))[0]
    heads = HeadStack(B=B[None], V=np.eye(d)[None])
    expected = velocity_numpy(x, heads, beta=1.0)
    got = velocity_blas(x, heads, beta=1.0, precision="float32", threads=2)
    np.testing.assert_allclose(got, expected, rtol=0, atol=6e-7 * np.abs(expected).max())


@pytest.mark.parametrize("symmetric", [False, True])
def test_blas_kernel_with_tiles_at_large_d(symmetric, monkeypatch):
    """d = 100 (the values padded to 112: whole and half value panels), general B and V, two threads."""
    monkeypatch.setattr(blas_module, "FLASH_CPU", True)
    n, d = 300, 100
    assert d <= flash.FLASH_MAX_D
    x = sample_uniform(n, d, seed=11)
    heads = _heads(d, 2, symmetric, seed=12)
    expected = velocity_numpy(x, heads, beta=6.0)
    got = velocity_blas(x, heads, beta=6.0, precision="float32", threads=2)
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5 * np.abs(expected).max())


@pytest.mark.parametrize("stages_on_pool", [False, True], ids=["stages in one thread", "stages on the pool"])
def test_scalar_heads_and_underflowing_rows(stages_on_pool, monkeypatch):
    """B = λI and V = μI (no products formed), and rows whose shifted sums underflow in float32 (β‖B‖ large,
    every mass far from the row's direction): those are redone exactly, in whichever row range they fall."""
    monkeypatch.setattr(blas_module, "FLASH_CPU", True)
    if stages_on_pool:
        monkeypatch.setattr(blas_module, "PARALLEL_STAGE_ELEMENTS", 0)
    n, d = 400, 16
    x = sample_uniform(n, d, seed=8)
    heads = HeadStack(B=2.0 * np.eye(d)[None], V=-0.5 * np.eye(d)[None])
    expected = velocity_numpy(x, heads, beta=3.0)
    got = velocity_blas(x, heads, beta=3.0, precision="float32")
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5 * np.abs(expected).max())
    weights = np.zeros(n)
    weights[:5] = 1.0  # the mass sits on five tokens: most rows see none of it near their direction
    general = HeadStack(B=np.random.default_rng(9).standard_normal((1, d, d)), V=np.eye(d)[None])
    expected = velocity_numpy(x, general, beta=60.0, weights=weights)
    for threads in (1, 2):
        got = velocity_blas(x, general, beta=60.0, weights=weights, precision="float32", threads=threads)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * np.abs(expected).max())


def test_dispatch_follows_the_processor_and_the_limits(monkeypatch):
    """The tiles run at d ≤ FLASH_MAX_D in float32 and d ≤ FLASH_MAX_D64 in float64 on a processor with AVX-512,
    and never with a mask or relu."""
    calls = []
    monkeypatch.setattr(blas_module, "FLASH_CPU", True)
    monkeypatch.setattr(blas_module, "_flash_velocity", lambda *args, **kwargs: calls.append((args[1].shape, np.dtype(args[6]).name)))
    heads = HeadStack(B=np.eye(8)[None], V=np.eye(8)[None])
    x = sample_uniform(64, 8, seed=0)
    velocity_blas(x, heads, beta=1.0, precision="float32")
    velocity_blas(x, heads, beta=1.0, precision="float64")
    taken = [((64, 8), "float32"), ((64, 8), "float64")]
    assert calls == taken
    velocity_blas(x, heads, beta=1.0, precision="float32", mask="causal")
    velocity_blas(x, heads, beta=1.0, precision="float32", kind="relu")
    velocity_blas(x, heads, beta=1.0, precision="float32", flash=False)
    for precision, limit in (("float32", flash.FLASH_MAX_D), ("float64", flash.FLASH_MAX_D64)):
        wide = limit + 1
        velocity_blas(sample_uniform(64, wide, seed=0), HeadStack(B=np.eye(wide)[None], V=np.eye(wide)[None]), beta=1.0, precision=precision)
    assert calls == taken
    monkeypatch.setattr(blas_module, "FLASH_CPU", False)
    velocity_blas(x, heads, beta=1.0, precision="float32")
    assert calls == taken


@pytest.mark.parametrize("flash_tiles", [True, False], ids=["tiles", "OpenBLAS"])
@pytest.mark.parametrize("symmetric", [False, True])
def test_low_temperature_scores_across_the_flush_match_numpy(flash_tiles, symmetric):
    # β = 800, d = 16: the shifted scores straddle FLUSH_BELOW, where exp is flushed to 0 (no subnormal
    # results or products); the rows' sums stay exact to round-off, and rows whose Cauchy–Schwarz shift
    # overshoots (a general B) are redone exactly
    d, n, beta = 16, 600, 800.0
    rng = np.random.default_rng(21)
    x = sample_uniform(n, d, seed=22)
    A = np.eye(d) + 0.1 * rng.standard_normal((d, d))
    B = (A + A.T) / 2 if symmetric else A
    heads = HeadStack(B=B[None], V=rng.standard_normal((1, d, d)))
    reference = velocity_numpy(x, heads, beta=beta)
    got = velocity_blas(x, heads, beta=beta, flash=flash_tiles)
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-12 * np.abs(reference).max())


@pytest.mark.parametrize("kind", ["softmax", "unnormalized", "pooled"])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("flash_tiles", [True, False], ids=["tiles", "OpenBLAS"])
def test_float32_with_scaled_masses_matches_numpy(kind, symmetric, flash_tiles, monkeypatch):
    # β = 60: the shifted scores reach -120, past float32's flushed exp (-87), so the masses are scaled by a
    # power of two (no subnormal products); the shifts carry the scale, for every law, on the flash tiles and
    # on the OpenBLAS row blocks and symmetric tiles
    import meanfield.kernels.fused32 as fused32

    monkeypatch.setattr(blas_module, "FLASH_CPU", True)
    exponents = []
    real = fused32.float32_mass_exponent

    def recorded(*args):
        exponents.append(real(*args))
        return exponents[-1]

    monkeypatch.setattr(fused32, "float32_mass_exponent", recorded)
    n, d = 600, 24
    x = sample_uniform(n, d, seed=8)
    heads = _heads(d, 2, symmetric, seed=9)
    weights = np.random.default_rng(10).random(n)
    expected = velocity_numpy(x, heads, beta=60.0, kind=kind, weights=weights)
    got = velocity_blas(x, heads, beta=60.0, kind=kind, weights=weights, precision="float32", flash=flash_tiles)
    assert exponents and exponents[0] > 0
    assert exponents[0] == int(np.floor(FLOAT32_SUMS_EXPONENT - np.log2(weights.sum() * max(1.0, max(np.linalg.norm(V) for V in heads.V)))))
    np.testing.assert_allclose(got, expected, rtol=0, atol=3e-5 * np.abs(expected).max())
