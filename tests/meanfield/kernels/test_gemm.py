"""The GEMM called from compiled code (meanfield.kernels.gemm) against NumPy's float64 products."""
import itertools

import numpy as np
import pytest

from meanfield.kernels.gemm import gemm_address, gemm_into


def strided(rng, shape, dtype):
    """A view with the given shape whose rows are longer than it (a row stride past its columns), like the kernels' slices."""
    base = rng.standard_normal((shape[0] + 5, shape[1] + 7)).astype(dtype)
    return base[2 : 2 + shape[0], 3 : 3 + shape[1]]


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-13), (np.float32, 2e-6)])
@pytest.mark.parametrize("transpose_a, transpose_b, accumulate", list(itertools.product((False, True), repeat=3)))
def test_gemm_into_matches_numpy(rng, dtype, rtol, transpose_a, transpose_b, accumulate):
    m, k, n = 37, 53, 29
    a = strided(rng, (k, m) if transpose_a else (m, k), dtype)
    b = strided(rng, (n, k) if transpose_b else (k, n), dtype)
    c = strided(rng, (m, n), dtype)
    before = c.astype(np.float64)
    base_before = c.base.copy()
    want = (a.T if transpose_a else a).astype(np.float64) @ (b.T if transpose_b else b).astype(np.float64)
    if accumulate:
        want += before
    gemm_into(a, b, c, accumulate, transpose_a, transpose_b, gemm_address(dtype))
    np.testing.assert_allclose(c, want, rtol=rtol, atol=rtol * np.abs(want).max())
    outside = np.ones(c.base.shape, dtype=bool)
    outside[2 : 2 + m, 3 : 3 + n] = False
    np.testing.assert_array_equal(c.base[outside], base_before[outside])  # nothing written around the view


def test_gemm_addresses_are_the_two_precisions():
    assert gemm_address(np.float32) != gemm_address(np.float64)
    assert gemm_address(np.dtype("float64")) == gemm_address(np.float64)
    with pytest.raises(KeyError):
        gemm_address(np.int32)


def test_scipy_blas_is_held_to_one_thread_with_the_others():
    # the tiles call SciPy's OpenBLAS from compiled code: one_blas_thread must limit that library too
    from threadpoolctl import threadpool_info

    from meanfield.kernels.jit import one_blas_thread

    with one_blas_thread():
        blas = [entry for entry in threadpool_info() if entry["user_api"] == "blas"]  # a fresh scan: every BLAS loaded now
        assert blas and all(entry["num_threads"] == 1 for entry in blas), blas


def test_gemm_into_refuses_mismatched_shapes_and_strides(rng):
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((5, 6))
    address = gemm_address(np.float64)
    with pytest.raises(ValueError, match="shapes"):
        gemm_into(a, b, np.zeros((4, 7)), False, False, False, address)
    with pytest.raises(ValueError, match="shapes"):
        gemm_into(a, b, np.zeros((4, 6)), False, True, False, address)  # aᵀ is (5, 4)
    with pytest.raises(ValueError, match="unit stride"):
        gemm_into(a, np.asfortranarray(b), np.zeros((4, 6)), False, False, False, address)
    with pytest.raises(ValueError, match="unit stride"):
        gemm_into(a, b, np.zeros((6, 4)).T, False, False, False, address)


def test_a_call_after_the_buffers_are_released_makes_them_in_sight_of_the_trace_and_gives_the_same_bits():
    # bench had traced a call whose row-block buffers earlier calls had made: 0.5 MiB of the 3.1 MiB it uses
    from meanfield.geometry.sphere import sample_uniform
    from meanfield.heads.head import HeadStack
    from meanfield.kernels.blas import release_buffers, velocity_blas
    from meanfield.solvers.bench import _blas_peak
    from meanfield.solvers.timing import peak_memory

    x = sample_uniform(1024, 64, seed=0)
    heads = HeadStack(B=np.eye(64)[None], V=np.eye(64)[None])
    first = velocity_blas(x, heads, beta=4.0)
    warm = peak_memory(lambda: velocity_blas(x, heads, beta=4.0))
    whole = _blas_peak(lambda: velocity_blas(x, heads, beta=4.0))
    assert whole > 4 * warm and whole > 1024 * 64 * 8  # at least the operands of one head
    release_buffers()
    np.testing.assert_array_equal(velocity_blas(x, heads, beta=4.0), first)


@pytest.mark.parametrize("case", ["broadcast rows", "reversed rows", "mixed dtypes", "mixed dtypes, one column", "integers"])
def test_gemm_into_refuses_what_blas_cannot_take(rng, case):
    # OpenBLAS had printed "parameter number 10 had an illegal value" and left c as it was, without an exception;
    # a float32 a of one column had been read as float64 (found in review)
    a, b, c = rng.standard_normal((3, 4)), rng.standard_normal((4, 5)), np.full((3, 5), 7.0)
    if case == "broadcast rows":
        a, words = np.broadcast_to(a[:1], (3, 4)), "row stride"
    elif case == "reversed rows":
        a, words = a[::-1], "row stride"
    elif case == "mixed dtypes":
        a, words = a.astype(np.float32), "one dtype"
    elif case == "mixed dtypes, one column":
        a, b, words = rng.standard_normal((3, 1)).astype(np.float32), b[:1], "one dtype"
    else:
        a, words = np.ones((3, 4), dtype=np.int64), "one dtype"
    with pytest.raises(ValueError, match=words):
        gemm_into(a, b, c, False, False, False, gemm_address(np.float64))
    np.testing.assert_array_equal(c, 7.0)
    one = np.zeros((1, 5))  # a single row's stride is never used (any, even 0, is taken)
    gemm_into(np.broadcast_to(a[:1].astype(float), (1, a.shape[1])), b, one, False, False, False, gemm_address(np.float64))
    np.testing.assert_allclose(one, a[:1].astype(float) @ b, rtol=1e-13)
