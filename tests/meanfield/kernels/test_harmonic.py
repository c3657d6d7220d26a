"""Spherical-harmonic and local attention on S^2 against the NumPy twin.

Both fast kernels are run at their default ``tolerance=1e-12`` and must agree with
:func:`velocity_numpy` to 1e-10 relative to ``max |v|`` (measured: ≤ 3e-13 for the
harmonic kernel, ≤ 3e-14 for the local one, at every beta in {0.5, 4, 64, 1024}).
Where every point of mass sits in a small cap, the twin's row maximum (taken over
all tokens, massless ones included) underflows at beta = 1024; there the reference is
a transcription of the laws over the tokens with positive mass.
"""
from __future__ import annotations

import re
import tracemalloc

import numpy as np
import pytest
from scipy.special import ive

from meanfield.geometry.sphere import sample_uniform, sample_vmf
from meanfield.heads import HeadStack
from meanfield.kernels.harmonic import (
    _accuracies,
    _source_coefficients,
    _source_degree,
    choose_sphere_method,
    harmonic_head_sums,
    scaled_spherical_in,
    truncation_degree,
    velocity_harmonic,
)
from meanfield.kernels.local import SphereSources, local_head_sums, velocity_local
from meanfield.kernels.reference import velocity_numpy

KINDS = ("softmax", "unnormalized", "pooled")
BETAS = (0.5, 4.0, 64.0, 1024.0)
METHODS = {"harmonic": velocity_harmonic, "local": velocity_local}
AGREE = 1e-10  # relative to max |v|


def masked_reference(x, heads, beta, kind, a):
    """The three laws over the tokens with positive mass, exact row maxima (small n only)."""
    keep = a > 0
    y, w = x[keep], a[keep]
    nums, dens, shifts = [], [], []
    for h in range(heads.H):
        z = beta * (x @ heads.B[h]) @ y.T
        m = z.max(axis=1, keepdims=True)
        e = np.exp(z - m) * w
        nums.append(e @ (y @ heads.V[h].T))
        dens.append(e.sum(axis=1, keepdims=True))
        shifts.append(m)
    if kind == "softmax":
        return sum(nums[h] / dens[h] for h in range(heads.H))
    if kind == "unnormalized":
        return sum(nums[h] * np.exp(shifts[h]) for h in range(heads.H))
    active = [h for h in range(heads.H) if heads.w[h] != 0]
    top = np.max(np.concatenate([shifts[h] + np.log(dens[h]) for h in active], axis=1), axis=1, keepdims=True)
    scale = {h: heads.w[h] * np.exp(shifts[h] - top) for h in active}
    return sum(scale[h] * nums[h] for h in active) / sum(scale[h] * dens[h] for h in active)


def general_heads(rng, H, *, spread=0.4, norm=1.0):
    """Random non-symmetric, non-orthogonal B (I + spread·G, spectral norm ``norm``), random V, weights with a zero."""
    B = np.stack([np.eye(3) + spread * rng.standard_normal((3, 3)) for _ in range(H)])
    B *= norm / np.linalg.norm(B, ord=2, axis=(1, 2))[:, None, None]
    w = rng.uniform(0.2, 1.0, H)
    if H > 1:
        w[1] = 0.0
    return HeadStack(B=B, V=rng.standard_normal((H, 3, 3)), w=w)


def token_weights(rng, n):
    a = rng.uniform(0.0, 1.0, n)
    a[::5] = 0.0  # empty cells
    return a / a.sum()


def assert_agrees(got, ref, rel=AGREE):
    scale = np.abs(ref).max()
    assert np.isfinite(scale) and scale > 0
    np.testing.assert_allclose(got, ref, rtol=0, atol=rel * scale)


# ----------------------------------------------------------------------------- the building blocks


@pytest.mark.parametrize("r", [0.0, 1e-6, 0.3, 5.0, 64.0, 1024.0, 3000.0])
def test_scaled_bessel_functions(r):
    lmax = int(np.sqrt(2 * max(r, 1.0) * 45)) + 20
    phi = scaled_spherical_in(lmax, r)
    ell = np.arange(lmax + 1)
    assert np.all(phi >= 0) and np.all(phi <= 1)
    # generating function at t = 1: sum (2l+1) e^{-r} i_l(r) = 1
    np.testing.assert_allclose(np.sum((2 * ell + 1) * phi), 1.0, rtol=0, atol=1e-14)
    if r > 0:
        ref = np.sqrt(np.pi / (2 * r)) * ive(ell + 0.5, r)
        big = ref > 1e-250
        np.testing.assert_allclose(phi[big], ref[big], rtol=1e-11, atol=0)
    else:
        np.testing.assert_array_equal(phi, np.r_[1.0, np.zeros(lmax)])


def test_truncation_degree_grows_like_sqrt_beta():
    degrees = [truncation_degree(r) for r in (64.0, 256.0, 1024.0)]
    assert degrees == sorted(degrees)
    assert 1.7 < degrees[2] / degrees[1] < 2.3 and 1.7 < degrees[1] / degrees[0] < 2.3
    assert truncation_degree(0.0) == 1


def test_plane_wave_expansion_and_ducc_conventions(rng):
    # one head, exact radius (B = 2·rotation): the scaled sums are e^{-r} Σ_j a_j e^{r û·y_j} [y_j, 1]
    n = 300
    x = sample_uniform(n, 3, seed=2)
    a = token_weights(rng, n)
    Q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    B, beta = 2.0 * Q, 7.0
    src = SphereSources(x, a)
    eps_t, eps_n = _accuracies(1e-12)
    lsrc = _source_degree(B, beta, eps_t)
    g = _source_coefficients(src, lsrc, eps_n)
    sums, error = harmonic_head_sums(x, B, beta, g, lsrc, src.mass)
    z = beta * (x @ B) @ x.T - sums.shift[:, None]
    e = np.exp(z) * a
    np.testing.assert_allclose(sums.den, e.sum(axis=1), rtol=1e-12, atol=0)
    np.testing.assert_allclose(sums.num, e @ x, rtol=0, atol=1e-12 * np.abs(e @ x).max())
    assert np.all(error > 0) and np.all(error < 1e-12 * sums.den)


# ----------------------------------------------------------------------------- against the NumPy twin


@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", sorted(METHODS))
def test_matches_numpy_twin(rng, method, kind, H, beta):
    n = 600 if beta < 1024 else 400
    x = sample_uniform(n, 3, seed=H)
    # unnormalized sums grow like e^{beta |B|}: keep them finite at beta = 1024
    heads = general_heads(rng, H, spread=0.25 if beta > 64 else 0.4, norm=0.5 if kind == "unnormalized" and beta > 64 else 1.0)
    a = token_weights(rng, n)
    ref = velocity_numpy(x, heads, beta=beta, kind=kind, weights=a)
    got = METHODS[method](x, heads, beta=beta, kind=kind, weights=a, tolerance=1e-12)
    assert_agrees(got, ref)


@pytest.mark.parametrize("kind", KINDS)
def test_uniform_masses_and_clustered_tokens(rng, kind):
    x = sample_vmf(1500, 3, kappa=6.0, seed=8)
    heads = general_heads(rng, 2)
    for beta in (4.0, 64.0):
        ref = velocity_numpy(x, heads, beta=beta, kind=kind)
        for f in METHODS.values():
            assert_agrees(f(x, heads, beta=beta, kind=kind), ref)


@pytest.mark.parametrize("beta", [4.0, 64.0, 1024.0])
@pytest.mark.parametrize("kind", ["softmax", "pooled"])
def test_mass_in_a_small_cap_needs_the_exact_fallback(rng, kind, beta):
    # all mass within 25° of the north pole, queries everywhere, non-symmetric B: for most
    # rows the direction B^T x_i sees no mass nearby and the harmonic sums are far below
    # their absolute error, so these rows must come from the local method
    n = 600
    x = sample_uniform(n, 3, seed=5)
    a = rng.uniform(0.5, 1.0, n) * (x[:, 2] > np.cos(np.radians(25.0)))
    a /= a.sum()
    heads = general_heads(rng, 2, spread=0.3)
    src = SphereSources(x, a)
    eps_t, eps_n = _accuracies(1e-12)
    lsrc = _source_degree(heads.B[0], beta, eps_t)
    g = _source_coefficients(src, lsrc, eps_n)
    sums, error = harmonic_head_sums(x, heads.B[0], beta, g, lsrc, src.mass)
    needs_fallback = ~(error <= 1e-12 * sums.den)
    if beta >= 64:
        assert needs_fallback.mean() > 0.2
    ref = masked_reference(x, heads, beta, kind, a)
    if beta <= 4:
        assert_agrees(velocity_numpy(x, heads, beta=beta, kind=kind, weights=a), ref, rel=1e-12)
    for f in METHODS.values():
        assert_agrees(f(x, heads, beta=beta, kind=kind, weights=a), ref)


def test_direct_and_resampled_evaluations_agree(rng):
    n = 1200
    x = sample_uniform(n, 3, seed=6)
    a = token_weights(rng, n)
    B = np.diag([1.5, 1.0, 0.7]) @ np.linalg.qr(rng.standard_normal((3, 3)))[0] + 0.1 * rng.standard_normal((3, 3))
    src = SphereSources(x, a)
    for beta in (4.0, 64.0):
        eps_t, eps_n = _accuracies(1e-12)
        lsrc = _source_degree(B, beta, eps_t)
        g = _source_coefficients(src, lsrc, eps_n)
        exact = local_head_sums(x, B, beta, src, tolerance=1e-14)
        for method in ("direct", "resampled"):
            sums, error = harmonic_head_sums(x, B, beta, g, lsrc, src.mass, method=method)
            scaled = np.exp(exact.shift - sums.shift)
            miss = np.maximum(np.abs(sums.den - exact.den * scaled), np.abs(sums.num - exact.num * scaled[:, None]).max(axis=1))
            assert np.all(miss <= error), method  # the error bound holds row by row



def test_auto_takes_the_resampled_way_for_spread_tokens_within_the_direct_budget(rng, monkeypatch):
    # uniform tokens, a general head: the first grid degree costs less than the direct way, so "auto" resamples;
    # with no budget left the grid does not grow past its first degree; concentrated tokens are sent back
    # to the direct way after that first degree.  The error bound holds row by row every time.
    import meanfield.kernels.harmonic as harmonic

    B = np.array([[1.1, 0.3, -0.2], [-0.1, 0.9, 0.25], [0.15, -0.3, 1.0]])
    calls = []
    real = harmonic._resampled
    monkeypatch.setattr(harmonic, "_resampled", lambda *args, **kwargs: calls.append(kwargs.get("budget")) or real(*args, **kwargs))
    degrees = []
    slices = harmonic._grid_slices
    monkeypatch.setattr(harmonic, "_grid_slices", lambda alms, lmax, grid_l, *rest: degrees.append(grid_l) or slices(alms, lmax, grid_l, *rest))
    for x, resampled in ((sample_uniform(4096, 3, seed=13), True), (sample_vmf(4096, 3, kappa=40.0, seed=14), False)):
        a = token_weights(rng, x.shape[0])
        src = SphereSources(x, a)
        beta = 16.0
        eps_t, eps_n = _accuracies(1e-12)
        lsrc = _source_degree(B, beta, eps_t)
        g = _source_coefficients(src, lsrc, eps_n)
        exact = local_head_sums(x, B, beta, src, tolerance=1e-14)
        calls.clear()
        sums, error = harmonic_head_sums(x, B, beta, g, lsrc, src.mass)
        assert len(calls) == 1 and 0.0 < calls[0] < np.inf  # tried, with the direct way's cost as its budget
        assert (sums.shift is not None) and (error.shape == (x.shape[0],))
        scaled = np.exp(exact.shift - sums.shift)
        miss = np.maximum(np.abs(sums.den - exact.den * scaled), np.abs(sums.num - exact.num * scaled[:, None]).max(axis=1))
        assert np.all(miss <= error)
        direct, _ = harmonic_head_sums(x, B, beta, g, lsrc, src.mass, method="direct")
        assert (not np.array_equal(sums.den, direct.den)) == resampled  # the resampled result, or the direct one
    # B with condition number 3.3 at β = 4: the grid grows through four degrees, or stops at its first with no budget
    B = np.diag([2.0, 1.0, 0.6])
    x = sample_uniform(4096, 3, seed=13)
    src = SphereSources(x, np.full(4096, 1.0 / 4096))
    lsrc = _source_degree(B, 4.0, _accuracies(1e-12)[0])
    g = _source_coefficients(src, lsrc, _accuracies(1e-12)[1])
    uhat, _, loc = harmonic._geometry(x, B, 4.0)
    grown = []
    for budget in (np.inf, 0.0):
        degrees.clear()
        harmonic._resampled(g, lsrc, B, 4.0, uhat, loc, src.mass, *_accuracies(1e-12), 1e-12, budget=budget)
        grown.append(len(set(degrees)) - 1)  # the maps at the last degree add one more call of the same degree
    assert grown[0] >= 2 and grown[1] == 0

@pytest.mark.parametrize("kind", KINDS)
def test_special_heads(rng, kind):
    # beta = 0, singular B (rank 2 and the zero matrix), a multiple of a rotation, -I
    n = 500
    x = sample_uniform(n, 3, seed=7)
    a = token_weights(rng, n)
    singular = rng.standard_normal((3, 3))
    singular[:, 2] = singular[:, 0] - singular[:, 1]
    Q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    heads = HeadStack(
        B=np.stack([singular, np.zeros((3, 3)), 3.0 * Q, -np.eye(3)]),
        V=rng.standard_normal((4, 3, 3)),
        w=np.array([0.4, 0.1, 0.3, 0.2]),
    )
    for beta in (0.0, 16.0):
        ref = velocity_numpy(x, heads, beta=beta, kind=kind, weights=a)
        for f in METHODS.values():
            assert_agrees(f(x, heads, beta=beta, kind=kind, weights=a), ref)


def test_one_point_of_mass_and_one_token(rng):
    n = 300
    x = sample_uniform(n, 3, seed=9)
    a = np.zeros(n)
    a[17] = 1.0
    heads = general_heads(rng, 1)
    for beta in (4.0, 1024.0):
        for f in METHODS.values():
            got = f(x, heads, beta=beta, weights=a)
            np.testing.assert_allclose(got, np.tile(heads.V[0] @ x[17], (n, 1)), rtol=0, atol=1e-12)
    for f in METHODS.values():
        np.testing.assert_allclose(f(x[:1], heads, beta=64.0), (heads.V[0] @ x[0])[None], rtol=1e-12)


def test_local_rows_argument(rng):
    n = 700
    x = sample_uniform(n, 3, seed=10)
    heads = general_heads(rng, 3)
    rows = np.array([3, 500, 0, 699, 3])
    for kind in KINDS:
        full = velocity_numpy(x, heads, beta=64.0, kind=kind)
        np.testing.assert_allclose(velocity_local(x, heads, beta=64.0, kind=kind, rows=rows), full[rows], rtol=0, atol=1e-12 * np.abs(full).max())
    assert velocity_local(x, heads, beta=64.0, rows=np.zeros(0, dtype=int)).shape == (0, 3)


def test_memory_is_linear_in_n(rng):
    heads = general_heads(rng, 1)
    for f in METHODS.values():
        x = sample_uniform(16384, 3, seed=11)
        f(x[:2000], heads, beta=64.0)  # warm up (compilation, caches)
        tracemalloc.start()
        f(x, heads, beta=64.0)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 64 * 2**20  # an n×n float64 array would be 2 GiB


def test_bad_input():
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    x = sample_uniform(10, 3, seed=0)
    for f in METHODS.values():
        with pytest.raises(ValueError, match="relu"):
            f(x, heads, beta=1.0, kind="relu")
        with pytest.raises(ValueError, match="unknown attention kind"):
            f(x, heads, beta=1.0, kind="linear")
        with pytest.raises(ValueError, match="d = 3"):
            f(sample_uniform(10, 4, seed=0), HeadStack(B=np.eye(4)[None], V=np.eye(4)[None]), beta=1.0)
        with pytest.raises(ValueError, match="unit sphere"):
            f(2.0 * x, heads, beta=1.0)


def test_choose_sphere_method():
    heads = HeadStack(B=np.eye(3)[None] + 0.1, V=np.eye(3)[None])
    assert choose_sphere_method(256, 4.0, heads) == "dense"
    assert choose_sphere_method(2**20, 64.0, heads) == "harmonic"
    assert choose_sphere_method(16384, 1024.0, heads) == "local"
    for n in (100, 10**4, 10**6):
        for beta in (0.5, 64.0, 1024.0):
            assert choose_sphere_method(n, beta, heads) in ("harmonic", "local", "dense")


@pytest.mark.slow
@pytest.mark.parametrize("beta", [4.0, 64.0, 1024.0])
def test_large_problem_against_dense_rows(rng, beta):
    from meanfield.kernels.local import combine_head_sums, dense_head_sums

    n = 65536
    x = sample_uniform(n, 3, seed=12)
    heads = general_heads(rng, 2)
    rows = rng.choice(n, 300, replace=False)
    src = SphereSources(x, np.full(n, 1.0 / n))
    ref = combine_head_sums(heads, "softmax", [dense_head_sums(x[rows], heads.B[h], beta, src) for h in range(heads.H)])
    assert_agrees(velocity_harmonic(x, heads, beta=beta)[rows], ref)
    assert_agrees(velocity_local(x, heads, beta=beta, rows=rows), ref)


def test_sphere_benchmark_runs():
    from meanfield.solvers.bench_sphere import bench_sphere, format_table

    rows = bench_sphere(sizes=(2048,), betas=(64.0,), repeat=1, memory=False, million=False)
    (row,) = rows
    assert row["harmonic_error"] < AGREE and row["local_error"] < AGREE
    assert row["choice"] in ("harmonic", "local", "dense") and row["dense_s"] > 0
    assert "2048" in format_table(rows)


def test_small_transforms_run_on_one_thread(monkeypatch):
    """ducc0 hands each transform to its thread pool at about 0.05–0.07 ms a call: below HARMONIC_PARALLEL_POINTS
    points (plus L³/256) and HARMONIC_PARALLEL_DEGREE on a grid, one thread (two had made n = 4096, β = 16 1.7x
    slower); the result is the dense one either way."""
    import meanfield.kernels.harmonic as harmonic
    from meanfield.kernels.jit import num_threads

    monkeypatch.setenv("MEANFIELD_NUM_THREADS", "2")
    asked = []
    for name in ("adjoint_synthesis_general", "analysis_2d", "synthesis_2d", "synthesis_2d_deriv1", "synthesis_general"):
        original = getattr(harmonic, name)
        monkeypatch.setattr(harmonic, name, lambda *args, _f=original, _name=name, **kw: (asked.append((_name, kw["nthreads"])), _f(*args, **kw))[1])
    rng = np.random.default_rng(5)
    x = sample_uniform(4096, 3, seed=6)
    heads = HeadStack(B=(np.eye(3) + 0.3 * rng.standard_normal((3, 3)))[None], V=np.eye(3)[None])
    v = velocity_harmonic(x, heads, beta=16.0)
    assert asked and all(threads == 1 for _, threads in asked), asked
    np.testing.assert_allclose(v, velocity_numpy(x, heads, beta=16.0), rtol=0, atol=1e-11 * np.abs(v).max())
    assert harmonic._threads(harmonic.HARMONIC_PARALLEL_POINTS, 8) == num_threads() and harmonic._threads(16384, 128) == 1
    assert harmonic._grid_threads(harmonic.HARMONIC_PARALLEL_DEGREE) == num_threads() and harmonic._grid_threads(128) == 1


@pytest.mark.parametrize("n", [2, 7, 30])
def test_a_handful_of_tokens_takes_the_direct_sums(n):
    # on two tokens at β = 16 the transform had missed tolerance = 1e-12 by a factor 5 (a review's fuzz found 7 of 900
    # cases with n ≤ 30 over it, none from n = 1000); a handful of tokens is summed directly, exactly
    rng = np.random.default_rng(n)
    x = sample_uniform(n, 3, seed=n)
    heads = HeadStack(B=rng.standard_normal((2, 3, 3)), V=rng.standard_normal((2, 3, 3)))
    masses = rng.uniform(0.1, 1.0, n)
    for kind in ("softmax", "unnormalized", "pooled"):
        got = velocity_harmonic(x, heads, beta=16.0, kind=kind, weights=masses, tolerance=1e-12)
        expected = velocity_numpy(x, heads, beta=16.0, kind=kind, weights=masses)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-13 * np.abs(expected).max())


@pytest.mark.parametrize("kind", ["softmax", "unnormalized", "pooled"])
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_masses_far_from_one_are_summed_at_their_own_scale(kind, mask):
    # masses of total 1e-200 had squared to zero in the transforms' tail check, which then passed rows 1e-3 off
    # (β = 0.5), in silence; a total of 1e200 had warned of overflow
    import warnings

    rng = np.random.default_rng(3)
    x = sample_uniform(2000, 3, seed=3)
    heads = HeadStack(B=rng.normal(size=(1, 3, 3)), V=rng.normal(size=(1, 3, 3)))
    for scale in (1e-200, 1e200):
        a = rng.random(2000)
        a *= scale / a.sum()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            v = velocity_harmonic(x, heads, beta=0.5, kind=kind, weights=a, mask=mask)
        ref = velocity_numpy(x, heads, beta=0.5, kind=kind, weights=a, mask=mask)
        np.testing.assert_allclose(v, ref, rtol=0, atol=1e-11 * np.max(np.abs(ref)))


def test_rows_that_see_little_of_the_mass_keep_the_tolerance():
    # the transforms' rounding floor was bounded by the slices' values at the rows; it is of the size of the total
    # mass, and rows far from every mass (a rank-1 head, one tight cluster) had kept errors of 4× the tolerance at
    # 1e-10 and 2e12× (a wrong velocity) at 1e-12
    rng = np.random.default_rng(0)
    beta = 300.0
    a = np.r_[np.full(300, 1 / 300), np.zeros(100)]  # a tight cluster holds every mass
    for tolerance, start, step in ((1e-10, 15.0, 0.25), (1e-12, 10.0, 0.5)):
        for trial in range(8):
            rc = start + step * trial  # the rows see about e^{-rc} of the mass
            p = np.array([rc / beta, np.sqrt(1 - (rc / beta) ** 2), 0.0])
            heads = HeadStack(B=np.outer(p, [0.0, 0.0, 1.0])[None], V=np.eye(3)[None])
            x = np.concatenate([np.array([1.0, 0.0, 0.0]) + 1e-4 * rng.standard_normal((300, 3)), rng.standard_normal((100, 3))])
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            v = velocity_harmonic(x, heads, beta=beta, kind="softmax", weights=a, tolerance=tolerance)
            ref = velocity_numpy(x, heads, beta=beta, kind="softmax", weights=a)
            assert np.max(np.linalg.norm(v - ref, axis=1)) <= tolerance, (tolerance, rc)  # (‖V‖ = 1: relative)


# ----------------------------------------------------------------------------- review fixes (harmonic area)


def test_unnormalized_velocity_past_the_float_range_is_inf_not_nan():
    # β‖B‖ = 2000: e^(m/2) overflows past m ≈ 1419, and the harmonic and local kernels had given NaN (0·inf, inf − inf)
    # where the dense kernels give ±inf
    from meanfield.kernels.attention import attention_velocity

    x = sample_uniform(300, 3, seed=1)
    for V in (np.eye(3), np.array([[1.0, 0.1, 0.2], [0.3, 1.0, 0.1], [0.2, 0.2, 1.0]])):
        heads = HeadStack(B=np.eye(3)[None], V=V[None])
        with np.errstate(over="ignore"):
            dense = attention_velocity(x, heads, beta=2000.0, kind="unnormalized", backend="blas")
        assert np.isinf(dense).all()
        for backend in ("harmonic", "local"):
            v = attention_velocity(x, heads, beta=2000.0, kind="unnormalized", backend=backend)
            np.testing.assert_array_equal(v, dense)


def test_unnormalized_scaling_is_finite_wherever_the_product_is():
    from meanfield.kernels.local import _scaled_values

    # e^1440 · 2^-1074 = 1.196e302: finite, though e^(1440/2) is not; y = 0 gives 0 at any shift; past the range ±inf
    values = np.array([[2.0**-1074, -1.0, 0.0], [1.0, -2.5, 0.0], [3.0, 1e-300, -1e-300]])
    shift = np.array([1440.0, 1000.0, 3000.0])
    with np.errstate(over="ignore"):
        got = _scaled_values(values, shift)
    np.testing.assert_allclose(got[0, 0], 1.1962958538972262e302, rtol=1e-14)  # mpmath: 2^-1074 e^1440
    np.testing.assert_array_equal(got[0, 1:], [-np.inf, 0.0])
    np.testing.assert_array_equal(got[1], [np.inf, -np.inf, 0.0])
    np.testing.assert_array_equal(got[2], [np.inf, np.inf, -np.inf])
    small = _scaled_values(np.array([[1.0, -3.0, 0.5]]), np.array([-700.0]))
    np.testing.assert_allclose(small, np.exp(-700.0) * np.array([[1.0, -3.0, 0.5]]), rtol=1e-15)


@pytest.mark.parametrize("r", [1024.0, 4000.0])
@pytest.mark.parametrize("lmax", [0, 1, 2, 10, 60])
def test_scaled_bessel_functions_of_a_small_lmax_against_mpmath(r, lmax):
    # the recurrence had started at lmax + 41 + 3√r: for lmax = 2 at r = 1024 rows off by 9e-9, at r = 4000 by 2e-6
    import mpmath
    mpmath.mp.dps = 40
    exact = np.array([float(mpmath.exp(-r) * mpmath.sqrt(mpmath.pi / (2 * r)) * mpmath.besseli(l + 0.5, r))
                      for l in range(lmax + 1)])
    np.testing.assert_allclose(scaled_spherical_in(lmax, r), exact, rtol=2e-15, atol=0)


def test_tokens_near_the_sphere_give_every_kernel_the_same_velocity():
    # tokens 9e-11 off the sphere (accepted: SPHERE_TOLERANCE): the harmonic kernel reads their directions, the local
    # kernel had read the vectors (2e-9 apart at β = 1024); both now give the velocity of the unit vectors
    rng = np.random.default_rng(4)
    x = sample_uniform(2000, 3, seed=4) * (1.0 + 9e-11 * rng.choice([-1.0, 1.0], size=2000))[:, None]
    unit = x / np.linalg.norm(x, axis=1)[:, None]
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    beta = 256.0
    dense = velocity_numpy(unit, heads, beta=beta)
    scale = np.abs(dense).max()
    for f in METHODS.values():
        np.testing.assert_allclose(f(x, heads, beta=beta), dense, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(velocity_harmonic(x, heads, beta=beta), velocity_local(x, heads, beta=beta), rtol=0,
                               atol=1e-12 * scale)


def test_local_rows_must_be_integer_indices():
    x = sample_uniform(300, 3, seed=1)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    mask = np.zeros(300, dtype=bool)
    mask[[5, 7]] = True
    with pytest.raises(ValueError, match="boolean mask.*flatnonzero"):  # (had given 300 rows of tokens 0 and 1)
        velocity_local(x, heads, beta=4.0, rows=mask)
    with pytest.raises(ValueError, match="integer row indices"):  # (1.5 had been row 1)
        velocity_local(x, heads, beta=4.0, rows=[1.5])
    with pytest.raises(ValueError, match="1-d array"):  # (had been flattened)
        velocity_local(x, heads, beta=4.0, rows=[[0, 1], [2, 3]])
    full = velocity_local(x, heads, beta=4.0)
    for rows, expected in ((np.flatnonzero(mask), [5, 7]), (np.array([7, -1], dtype=np.int32), [7, 299]),
                           (np.array([5], dtype=np.uint16), [5])):
        np.testing.assert_allclose(velocity_local(x, heads, beta=4.0, rows=rows), full[expected], rtol=0, atol=1e-14)
    assert velocity_local(x, heads, beta=4.0, rows=[]).shape == (0, 3)


def test_causal_block_must_be_a_positive_integer_under_the_causal_mask():
    x = sample_uniform(300, 3, seed=1)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    for block in (0, -5, "10", True, 2.5):  # (all had been taken, clipped to [1, n])
        with pytest.raises(ValueError, match="block .* must be an integer ≥ 1"):
            velocity_harmonic(x, heads, beta=4.0, mask="causal", block=block)
    with pytest.raises(ValueError, match="block applies to mask='causal' only"):  # (had been ignored)
        velocity_harmonic(x, heads, beta=4.0, block=64)
    reference = velocity_numpy(x, heads, beta=4.0, mask="causal")
    np.testing.assert_allclose(velocity_harmonic(x, heads, beta=4.0, mask="causal", block=np.int64(128)), reference,
                               rtol=0, atol=1e-11 * np.abs(reference).max())


def test_a_beta_past_the_degree_limit_is_refused_by_the_harmonic_kernel():
    # β = 1e6 had taken 183 s and 10.7 GB on 100 tokens, β = 1e308 failed in ducc0 ("Maximum allowed dimension")
    from meanfield.kernels.attention import attention_velocity
    from meanfield.kernels.harmonic import MAX_DEGREE, HarmonicDegreeError, estimate_sphere_seconds

    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    x = sample_uniform(100, 3, seed=5)
    for beta in (1e6, 1e300):
        for call in (lambda: velocity_harmonic(x, heads, beta=beta),
                     lambda: velocity_harmonic(x[:10], heads, beta=beta),  # (a handful of tokens: refused alike)
                     lambda: velocity_harmonic(x, heads, beta=beta, mask="causal"),
                     lambda: attention_velocity(x, heads, beta=beta, backend="harmonic")):
            with pytest.raises(HarmonicDegreeError, match=re.escape(f"beta = {beta:g} is too large for backend 'harmonic'") + ".*'local'"):
                call()
        # auto prices it as never finishing, without computing the degree (β = 1e300 had failed in NumPy)
        assert estimate_sphere_seconds(4096, beta, heads)["harmonic"] == np.inf
        assert choose_sphere_method(4096, beta, heads) != "harmonic"
    assert truncation_degree(2e5, _accuracies(1e-12, 2e5)[0]) <= MAX_DEGREE  # β = 2e5 still runs
    # the shortcut: past r = (MAX_DEGREE / 2)² the degree passes MAX_DEGREE for the largest ε_T (1e-8)
    assert truncation_degree((MAX_DEGREE / 2) ** 2, 1e-8) > MAX_DEGREE


def test_row_logs_past_the_degree_limit_are_the_exact_local_sums():
    from meanfield.kernels.harmonic import sphere_head_row_logs

    x = sample_uniform(500, 3, seed=6)
    heads = HeadStack(B=np.stack([np.eye(3), np.diag([1.0, 0.5, 0.2])]), V=np.stack([np.eye(3)] * 2))
    beta = 1e6
    s = beta * np.einsum("ni,hij,mj->hnm", x, heads.B, x)  # (H, n, n): β x_i^T B_h x_j
    top = s.max(axis=2)
    exact = top + np.log(np.exp(s - top[..., None]).mean(axis=2))
    # (the logs are about 1e6: their rounding, 1e-10, is far above the sums' tolerance 1e-12)
    np.testing.assert_allclose(sphere_head_row_logs(x, heads, beta=beta), exact, rtol=1e-15, atol=1e-9)
