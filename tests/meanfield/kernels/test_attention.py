"""Attention kernels: the BLAS and numba kernels against the NumPy twin, the twin against
an element-by-element transcription of the velocity laws, and memory/underflow behaviour."""
from __future__ import annotations

import math
import os
import threading
import time
import tracemalloc

import numpy as np
import pytest

from meanfield.kernels.attention import ATTENTION_KINDS, attention_velocity, velocity_blas, velocity_numba, velocity_numpy
from meanfield.heads import HeadStack
from meanfield.geometry.sphere import sample_uniform


def brute_force(x, heads, beta, kind, a):
    """The four velocity laws written out term by term (tiny n only)."""
    n, d = x.shape
    out = np.zeros((n, d))
    for i in range(n):
        num_pooled, den_pooled = np.zeros(d), 0.0
        for h in range(heads.H):
            B, V = heads.B[h], heads.V[h]
            s = np.array([x[i] @ B @ x[j] for j in range(n)])
            vx = np.array([V @ x[j] for j in range(n)])
            if kind == "relu":
                out[i] += sum(a[j] * max(s[j], 0.0) * vx[j] for j in range(n))
            elif kind == "unnormalized":
                out[i] += sum(a[j] * np.exp(beta * s[j]) * vx[j] for j in range(n))
            elif kind == "softmax":
                e = a * np.exp(beta * s)
                out[i] += (e @ vx) / e.sum()
            else:
                e = a * np.exp(beta * s)
                num_pooled += heads.w[h] * (e @ vx)
                den_pooled += heads.w[h] * e.sum()
        if kind == "pooled":
            out[i] = num_pooled / den_pooled
    return out


def random_heads(rng, H, d):
    return HeadStack(B=rng.standard_normal((H, d, d)), V=rng.standard_normal((H, d, d)), w=rng.uniform(0.2, 1.0, H))


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_numpy_twin_matches_the_formula(rng, kind):
    x = sample_uniform(9, 4, seed=1)
    heads = random_heads(rng, 2, 4)
    a = rng.uniform(0.1, 1.0, 9)
    a /= a.sum()
    np.testing.assert_allclose(velocity_numpy(x, heads, beta=1.7, kind=kind, weights=a), brute_force(x, heads, 1.7, kind, a), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("kernel", [velocity_blas, velocity_numba], ids=["blas", "numba"])
def test_kernels_match_numpy_twin(rng, kind, H, kernel):
    d = 5
    x = sample_uniform(700, d, seed=H)  # more rows than one block for the BLAS kernel
    heads = random_heads(rng, H, d)  # random, non-symmetric Q, K, V
    reference = velocity_numpy(x, heads, beta=2.5, kind=kind)
    np.testing.assert_allclose(kernel(x, heads, beta=2.5, kind=kind), reference, rtol=1e-11, atol=1e-12 * np.abs(reference).max())
    a = rng.uniform(0.0, 1.0, 700)
    a[::7] = 0.0  # empty cells
    a /= a.sum()
    reference = velocity_numpy(x, heads, beta=2.5, kind=kind, weights=a)
    np.testing.assert_allclose(kernel(x, heads, beta=2.5, kind=kind, weights=a), reference, rtol=1e-11, atol=1e-12 * np.abs(reference).max())


def test_blas_softmax_survives_a_loose_shift(rng):
    # indefinite B at large beta: the Cauchy–Schwarz shift overshoots the row maximum by
    # far more than exp's range, so rows must be recomputed with the exact maximum
    d = 3
    B = np.diag([40.0, -40.0, 1.0])
    heads = HeadStack(B=B[None], V=np.eye(d)[None])
    x = sample_uniform(300, d, seed=3)
    x[:, 0] *= 1e-3
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for kind in ("softmax", "pooled"):
        reference = velocity_numpy(x, heads, beta=30.0, kind=kind)
        assert np.all(np.isfinite(reference))
        np.testing.assert_allclose(velocity_blas(x, heads, beta=30.0, kind=kind), reference, rtol=1e-10, atol=1e-12)


def test_pooled_with_one_head_is_softmax(rng):
    x = sample_uniform(100, 4, seed=5)
    heads = random_heads(rng, 1, 4)
    np.testing.assert_allclose(
        attention_velocity(x, heads, beta=3.0, kind="pooled"), attention_velocity(x, heads, beta=3.0, kind="softmax"), rtol=1e-13
    )


def test_float32_precision_is_close(rng):
    x = sample_uniform(2000, 3, seed=6)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    v64 = velocity_blas(x, heads, beta=4.0)
    v32 = velocity_blas(x, heads, beta=4.0, precision="float32")
    np.testing.assert_allclose(v32, v64, rtol=0, atol=2e-5 * np.abs(v64).max())


def test_blas_memory_is_linear_in_n():
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    peaks = []
    for n in (4096, 8192):
        x = sample_uniform(n, 3, seed=7)
        velocity_blas(x, heads, beta=4.0, threads=1)  # warm the per-thread buffer
        tracemalloc.start()
        velocity_blas(x, heads, beta=4.0, threads=1)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    # an n×n float64 array at n = 8192 would be 512 MiB; O(n d) stays well below 4 MiB
    assert peaks[1] < 4 * 2**20
    assert peaks[1] < 3 * peaks[0]


def test_bad_input():
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    with pytest.raises(ValueError, match="unknown attention kind"):
        attention_velocity(np.ones((2, 3)), heads, beta=1.0, kind="linear")
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        attention_velocity(np.ones((2, 4)), heads, beta=1.0)
    with pytest.raises(ValueError, match="backend"):
        attention_velocity(np.ones((2, 3)), heads, beta=1.0, backend="gpu")



def test_tolerance_head_types_and_zero_pooled_weights_are_checked():
    from meanfield.analysis.energy import head_energies
    from meanfield.heads import identity
    from meanfield.kernels.harmonic import sphere_head_row_logs, velocity_harmonic
    from meanfield.kernels.local import velocity_local

    x = sample_uniform(40, 3, seed=0)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    # NaN had looped for ever in the harmonic truncation; 0.5 and 1e-20 had been taken where the config refuses them
    for tolerance in (float("nan"), 2.0, 0.0, -1e-3, 0.5, 0.011, 1e-16, 1e-20):
        for call in (lambda: attention_velocity(x, heads, beta=4.0, backend="harmonic", tolerance=tolerance),
                     lambda: velocity_harmonic(x, heads, beta=4.0, tolerance=tolerance),
                     lambda: velocity_local(x, heads, beta=4.0, tolerance=tolerance),
                     lambda: sphere_head_row_logs(x, heads, beta=4.0, tolerance=tolerance)):
            with pytest.raises(ValueError, match="tolerance must be a number in \\[1e-15, 0.01\\]"):
                call()
    from meanfield.config import SCHEMA
    from meanfield.errors import ConfigError
    from meanfield.kernels.inputs import TOLERANCE_RANGE, check_tolerance

    for tolerance in TOLERANCE_RANGE:  # the ends of model.tolerance's range, in the config and the Python API alike
        SCHEMA["model"]["tolerance"].check(tolerance, "model.tolerance")
        check_tolerance(tolerance)
        with pytest.raises(ConfigError):
            SCHEMA["model"]["tolerance"].check(tolerance * (0.99 if tolerance == TOLERANCE_RANGE[0] else 1.01), "model.tolerance")
    # a Head (as Model takes it) had failed on heads.H; anything else is named
    np.testing.assert_array_equal(attention_velocity(x, identity(3), beta=4.0), attention_velocity(x, heads, beta=4.0))
    with pytest.raises(TypeError, match="heads must be a HeadStack"):
        attention_velocity(x, np.eye(3), beta=4.0)
    zero = HeadStack(B=np.stack([np.eye(3)] * 2), V=np.stack([np.eye(3)] * 2), w=np.zeros(2))
    with pytest.raises(ValueError, match="every w is 0"):  # NaN from most kernels, 0 from the float32 one
        attention_velocity(x, zero, beta=4.0, kind="pooled")
    scalar = HeadStack(B=2.0 * np.eye(3)[None], V=2.0 * np.eye(3)[None])
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):  # B = λI had given the energy of d = 4 without a word
        head_energies(sample_uniform(10, 4, seed=1), scalar, beta=1.0)


@pytest.mark.parametrize(("backend", "kind"), [(backend, kind) for backend in ("numpy", "blas", "numba", "fused", "harmonic", "local")
                                                for kind in ("softmax", "pooled")])
def test_normalised_laws_refuse_masses_that_leave_a_row_empty(backend, kind):
    # every backend used to answer differently (NaN, or numba's ZeroDivisionError in the BLAS kernel)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    x = sample_uniform(600, 3, seed=3)
    with pytest.raises(ValueError, match="all zero"):
        attention_velocity(x, heads, beta=2.0, kind=kind, weights=np.zeros(600), backend=backend)
    first_empty = np.r_[0.0, np.ones(599)]
    with pytest.raises(ValueError, match="first token's mass"):
        attention_velocity(x, heads, beta=2.0, kind=kind, weights=first_empty, backend=backend, mask="causal")
    # without the mask a zero first mass is fine: every row still sees the others (against the twin)
    v = attention_velocity(x, heads, beta=2.0, kind=kind, weights=first_empty, backend=backend)
    np.testing.assert_allclose(v, velocity_numpy(x, heads, beta=2.0, kind=kind, weights=first_empty), rtol=0, atol=1e-12)
    # the unnormalised laws are defined for any masses: zero masses give zero velocity
    np.testing.assert_array_equal(velocity_numpy(x, heads, beta=2.0, kind="unnormalized", weights=np.zeros(600)), 0.0)


def test_model_float32_precision_runs_close_to_float64():
    from meanfield.config import load_config
    from meanfield.build import build_model, initial_tokens
    from meanfield.errors import ConfigError

    cfg64 = load_config({"init": {"n": 300}})
    cfg32 = load_config({"init": {"n": 300}, "model": {"precision": "float32"}})
    x = initial_tokens(cfg64)
    v64 = build_model(cfg64).velocity(x, 0.0)
    v32 = build_model(cfg32).velocity(x, 0.0)
    np.testing.assert_allclose(v32, v64, rtol=0, atol=1e-5 * np.abs(v64).max())
    with pytest.raises(ConfigError) as info:
        load_config({"model": {"precision": "float32", "backend": "numba"}})
    assert info.value.key == "model.precision"


def test_auto_float32_on_the_sphere_takes_a_faster_sphere_kernel_in_float64():
    # 16 384 tokens on S² at β = 4: the harmonic kernel's cost model beats even the float32 dense
    # kernel's, so "auto" in float32 runs it, at float64 accuracy; at 600 tokens it stays float32 dense
    from meanfield.kernels import attention
    from meanfield.kernels.harmonic import choose_sphere_method, estimate_sphere_seconds

    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    n = 16384
    est = estimate_sphere_seconds(n, 4.0, heads)
    assert min(est["harmonic"], est["local"]) < est["dense"] / attention.FUSED32_SPEEDUP
    assert choose_sphere_method(n, 4.0, heads, dense_speedup=attention.FUSED32_SPEEDUP) != "dense"
    x = sample_uniform(n, 3, seed=5)
    got = attention_velocity(x, heads, beta=4.0, precision="float32")
    exact = attention_velocity(x, heads, beta=4.0, precision="float64")
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-11 * np.abs(exact).max())
    small = sample_uniform(600, 3, seed=5)
    v32 = attention_velocity(small, heads, beta=4.0, precision="float32")
    v64 = velocity_numpy(small, heads, beta=4.0)
    error = np.abs(v32 - v64).max() / np.abs(v64).max()
    assert 1e-12 < error < 1e-5  # float32 arithmetic: not float64-exact, within its bound


@pytest.mark.parametrize("precision, rtol", [("float64", 1e-10), ("float32", 2e-4)])
@pytest.mark.parametrize("kind", ["softmax", "unnormalized", "pooled"])
def test_concentrated_tokens_and_loose_shifts(rng, precision, rtol, kind):
    # tokens bunched around one direction, non-symmetric B (or −I): the Cauchy–Schwarz shift
    # overshoots the row maximum far beyond exp's range, in float32 even more so
    from meanfield.geometry.sphere import sample_vmf

    x = sample_vmf(200, 3, kappa=200.0, seed=4)
    for B, beta in ((rng.standard_normal((3, 3)), 47.5), (-np.eye(3), 64.0)):
        heads = HeadStack(B=B[None], V=np.eye(3)[None])
        reference = velocity_numpy(x, heads, beta=beta, kind=kind)
        scale = np.abs(reference).max()
        assert np.isfinite(scale) and scale > 0
        got = velocity_blas(x, heads, beta=beta, kind=kind, precision=precision)
        np.testing.assert_allclose(got, reference, rtol=rtol, atol=rtol * scale)


#: the BLAS kernel's stages around the GEMMs (operands, weighting, finishing) in the calling thread or,
#: as for large n (d + 1) H, on the pool in row blocks
STAGES = pytest.mark.parametrize("stages", ["serial", "on the pool"])


def set_stages(monkeypatch, stages):
    from meanfield.kernels import blas

    if stages == "on the pool":
        monkeypatch.setattr(blas, "PARALLEL_STAGE_ELEMENTS", 0)


@STAGES
@pytest.mark.parametrize("precision, rtol", [("float64", 1e-11), ("float32", 3e-5)])
@pytest.mark.parametrize("kind", ["softmax", "unnormalized", "pooled"])
@pytest.mark.parametrize("H", [1, 3])
def test_blas_symmetric_tiles_match_numpy_twin(rng, kind, H, precision, rtol, stages, monkeypatch):
    # every B_h symmetric: the kernel runs the upper triangle of square tiles (n = 2.6 tiles a side,
    # so diagonal, off-diagonal and ragged tiles all occur), with masses, empty cells and unequal shifts
    from meanfield.kernels import blas

    set_stages(monkeypatch, stages)

    d = 6
    n = int(2.6 * (blas.TILE32 if precision == "float32" else blas.TILE))
    x = sample_uniform(n, d, seed=H)
    A = rng.standard_normal((H, d, d))
    heads = HeadStack(B=A + A.transpose(0, 2, 1), V=rng.standard_normal((H, d, d)), w=rng.uniform(0.2, 1.0, H))
    a = rng.uniform(0.0, 1.0, n)
    a[::7] = 0.0
    a /= a.sum()
    for weights in (None, a):
        reference = velocity_numpy(x, heads, beta=2.5, kind=kind, weights=weights)
        for threads in (1, 2):
            got = velocity_blas(x, heads, beta=2.5, kind=kind, weights=weights, precision=precision, threads=threads)
            np.testing.assert_allclose(got, reference, rtol=rtol, atol=rtol * np.abs(reference).max())


@pytest.mark.parametrize("precision, rtol", [("float64", 1e-11), ("float32", 3e-5)])
@pytest.mark.parametrize("kind", ATTENTION_KINDS)
@pytest.mark.parametrize("n", [300, 1100], ids=["row blocks", "symmetric tiles"])
@STAGES
def test_blas_scalar_heads_match_numpy_twin(rng, kind, n, precision, rtol, stages, monkeypatch):
    # B_h = λI and V_h = μI (λ, μ of either sign and 0) are scalings: no product is formed; tokens off
    # the sphere (unequal norms), mixed with a general head on the row-block path
    from meanfield.kernels import blas

    set_stages(monkeypatch, stages)

    d = 6
    x = sample_uniform(n, d, seed=2) * rng.uniform(0.5, 1.5, (n, 1))
    eye = np.eye(d)
    if n >= 2 * blas.TILE:  # every B_h symmetric, so that the tiles run
        B = np.stack([2.5 * eye, -0.7 * eye, 0.0 * eye])
    else:
        B = np.stack([2.5 * eye, rng.standard_normal((d, d)), 0.0 * eye])
    heads = HeadStack(B=B, V=np.stack([eye, -1.5 * eye, rng.standard_normal((d, d))]), w=np.array([0.5, 0.3, 0.2]))
    reference = velocity_numpy(x, heads, beta=1.3, kind=kind)
    for threads in (1, 2):
        got = velocity_blas(x, heads, beta=1.3, kind=kind, precision=precision, threads=threads)
        np.testing.assert_allclose(got, reference, rtol=rtol, atol=rtol * np.abs(reference).max())


@pytest.mark.parametrize("precision, rtol", [("float64", 1e-11), ("float32", 3e-5)])
@pytest.mark.parametrize(("kind", "beta"), [("softmax", 1.3), ("unnormalized", 1.3), ("pooled", 1.3), ("softmax", 900.0), ("pooled", 900.0)],
                         ids=["softmax", "unnormalized", "pooled", "softmax, rows underflow", "pooled, rows underflow"])  # e^900 overflows unnormalised
@STAGES
def test_blas_all_scalar_heads_write_their_operands_in_one_pass(rng, kind, beta, precision, rtol, stages, monkeypatch):
    # every B_h = λI and V_h = μI on the symmetric path: the operands, weighted values and shifts come from
    # one compiled pass per head (_scalar_head_rows); tokens off the sphere make the weights e^{(c_j - c̄)/2}
    # unequal, and at β = 900 the shortest tokens' rows underflow and are redone exactly; there the largest
    # score of many rows falls on a token of zero mass, whose redo had divided by a float32 sum of 0
    from meanfield.kernels import blas

    set_stages(monkeypatch, stages)
    d = 5
    n = int(2.3 * (blas.TILE32 if precision == "float32" else blas.TILE))
    x = sample_uniform(n, d, seed=4) * rng.uniform(0.2, 1.0, (n, 1))
    x[0] *= 1.0 / np.linalg.norm(x[0])  # the longest token: norm 1
    eye = np.eye(d)
    heads = HeadStack(B=np.stack([1.0 * eye, -0.5 * eye]), V=np.stack([-1.5 * eye, 0.4 * eye]), w=np.array([0.7, 0.3]))
    a = rng.uniform(0.0, 1.0, n)
    a[1::5] = 0.0
    a /= a.sum()
    calls = []
    one_pass = blas._scalar_head_rows
    monkeypatch.setattr(blas, "_scalar_head_rows", lambda *args: calls.append(1) or one_pass(*args))
    for weights in (None, a):
        reference = velocity_numpy(x, heads, beta=beta, kind=kind, weights=weights)
        assert np.all(np.isfinite(reference))
        for threads in (1, 2):
            for flash in (False, True):  # the BLAS path's one-pass operands, and the flash tiles where float32 takes them
                got = velocity_blas(x, heads, beta=beta, kind=kind, weights=weights, precision=precision, threads=threads, flash=flash)
                np.testing.assert_allclose(got, reference, rtol=rtol, atol=rtol * np.abs(reference).max())
    assert calls  # the one-pass operands ran


@pytest.mark.parametrize("n, side", [(1024, 512), (1300, 512), (1100, 256), (3000, 256)])
@pytest.mark.parametrize("threads", [1, 2])
def test_symmetric_tile_items_cover_every_pair_once(n, side, threads):
    # each item (rows, cols, diagonal) sums E[rows, cols] into the rows and, off the diagonal, its
    # transpose into the columns: together every (i, j) exactly once, whether or not tiles were cut
    from meanfield.kernels.blas import _tile_items

    covered = np.zeros((n, n), dtype=np.int64)
    items = _tile_items(n, side, threads)
    for rows, cols, diagonal in items:
        covered[rows, cols] += 1
        if not diagonal:
            covered[cols, rows] += 1
    assert covered.min() == 1 and covered.max() == 1
    costs = [(r.stop - r.start) * (c.stop - c.start) * (2 if diag else 3) for r, c, diag in items]
    assert costs == sorted(costs, reverse=True)  # largest first: the threads' last items are small


def test_identity_multiple_recognises_exact_scalings_only():
    from meanfield.kernels.blas import identity_multiple

    eye = np.eye(4)
    assert identity_multiple(eye) == 1.0
    assert identity_multiple(-2.5 * eye) == -2.5
    assert identity_multiple(0.0 * eye) == 0.0
    near = eye.copy()
    near[0, 3] = 1e-300
    assert identity_multiple(near) is None
    assert identity_multiple(np.diag([1.0, 1.0, 1.0, 1.0 + 1e-16 * 4])) is None
    assert identity_multiple(np.full((4, 4), np.nan)) is None
    assert identity_multiple(np.ones((4, 4))) is None


def test_run_on_threads_runs_every_item_once_with_the_calling_thread():
    from meanfield.kernels.blas import run_on_threads

    seen: list[tuple[int, int]] = []

    def stage(item: int) -> None:
        time.sleep(0.002)
        seen.append((item, threading.get_ident()))

    run_on_threads(stage, list(range(20)), 2)
    assert sorted(item for item, _ in seen) == list(range(20))
    assert threading.get_ident() in {ident for _, ident in seen}  # the caller works, it does not only wait

    def failing(item: int) -> None:
        time.sleep(0.002)
        if item == 5:
            raise RuntimeError("item 5")

    with pytest.raises(RuntimeError, match="item 5"):
        run_on_threads(failing, list(range(20)), 2)


def test_run_on_threads_does_not_wait_for_a_helper_that_never_started():
    # the pool's only thread is held (as a descheduled thread would be): the calling thread does every
    # item and returns without waiting for it; the helper, when it does start, runs nothing

    from meanfield.kernels.blas import _pool, run_on_threads

    release = threading.Event()
    blocker = _pool(1).submit(release.wait, 30.0)
    seen: list[tuple[int, int]] = []
    try:
        run_on_threads(lambda item: seen.append((item, threading.get_ident())), list(range(8)), 2)
        assert not blocker.done()  # returned while the pool's thread was still held (a wait for it would end only with the hold)
        assert sorted(item for item, _ in seen) == list(range(8))
        assert {ident for _, ident in seen} == {threading.get_ident()}
    finally:
        release.set()
    blocker.result(timeout=30.0)
    _pool(1).submit(lambda: None).result(timeout=10.0)  # the late helper has run (and returned) by now
    assert len(seen) == 8


@pytest.mark.parametrize("kind", ["softmax", "pooled"])
@STAGES
@pytest.mark.parametrize("precision, rtol", [("float64", 1e-10), ("float32", 1e-5)])
def test_blas_symmetric_tiles_redo_rows_that_underflow(kind, stages, precision, rtol, monkeypatch):
    # B = diag(1, 1e-3, 1e-3) at β = 3000: tokens near e_2 have c_j ≈ 3 against max c ≈ 3000, so their
    # tile sums carry e^{(c_j - max c)/2} = 0 and must be redone exactly (on the pool: in each row block);
    # in float32 the redone sums go back into the float32 accumulators (measured error 1.4e-7)
    from meanfield.geometry.sphere import sample_vmf
    from meanfield.kernels import blas

    set_stages(monkeypatch, stages)

    n = 3 * blas.TILE
    x = sample_vmf(n, 3, kappa=50.0, seed=0)
    x[: n // 2] = sample_vmf(n // 2, 3, kappa=50.0, seed=1)[:, [1, 0, 2]]
    heads = HeadStack(B=np.diag([1.0, 1e-3, 1e-3])[None], V=np.eye(3)[None])
    reference = velocity_numpy(x, heads, beta=3000.0, kind=kind)
    assert np.all(np.isfinite(reference))
    def run():
        return velocity_blas(x, heads, beta=3000.0, kind=kind, threads=2, precision=precision)

    np.testing.assert_allclose(run(), reference, rtol=rtol, atol=rtol * 1e-2 * np.abs(reference).max())
    monkeypatch.setattr(blas, "block_rows", lambda cols: 7)  # the exact rows redone 7 at a time
    np.testing.assert_allclose(run(), reference, rtol=rtol, atol=rtol * 1e-2 * np.abs(reference).max())


@pytest.mark.parametrize("numpy_exp", [False, True], ids=["numba exp", "numpy exp"])
def test_blas_float64_exp_paths_match_numpy_twin(rng, numpy_exp, monkeypatch):
    # the float64 score blocks take NumPy's exp where it is vectorised (AVX-512) and the kernels' own
    # elsewhere: both paths, whichever this machine takes, on the row blocks, the tiles and the energy
    from meanfield.analysis.energy import head_energies
    from meanfield.kernels import blas

    from meanfield.kernels.fused import FLUSH_BELOW

    monkeypatch.setattr(blas, "NUMPY_EXP64", numpy_exp)
    z = -np.concatenate([rng.uniform(0, 745, 4000), rng.uniform(0, 1e-3, 100), [0.0, 800.0]])
    kept = z >= FLUSH_BELOW  # the compiled exp flushes below e^FLUSH_BELOW (no subnormal result or product)
    for deepest in (0.0, 800.0):  # scores that may fall below that: the compiled exp on either path
        block = z.reshape(1, -1).copy()
        blas.exp_scores(block, deepest=deepest)
        if numpy_exp and deepest < -FLUSH_BELOW:
            np.testing.assert_allclose(block[0], np.exp(z), rtol=2.3e-16, atol=5e-324)  # within 1 ulp
        else:
            np.testing.assert_allclose(block[0][kept], np.exp(z[kept]), rtol=2.3e-16, atol=0)
            assert np.all(block[0][~kept] == 0.0)
    d = 6
    A = rng.standard_normal((2, d, d))
    for n, B in ((300, rng.standard_normal((2, d, d))), (1100, A + A.transpose(0, 2, 1))):  # row blocks, then tiles
        x = sample_uniform(n, d, seed=n)
        heads = HeadStack(B=B, V=rng.standard_normal((2, d, d)), w=np.array([0.6, 0.4]))
        for kind in ("softmax", "unnormalized", "pooled"):
            reference = velocity_numpy(x, heads, beta=2.5, kind=kind)
            got = velocity_blas(x, heads, beta=2.5, kind=kind, threads=2)
            np.testing.assert_allclose(got, reference, rtol=1e-11, atol=1e-11 * np.abs(reference).max())
    x = sample_uniform(700, d, seed=3)
    heads = HeadStack(B=rng.standard_normal((1, d, d)), V=np.eye(d)[None])
    s = x @ heads.B[0] @ x.T
    expected = np.exp(2.0 * s).sum() / (2 * 2.0 * 700**2)
    np.testing.assert_allclose(head_energies(x, heads, beta=2.0)[0], expected, rtol=1e-12)


def _cpu_seconds_by_thread() -> dict[int, float]:
    """CPU time of each of this process's threads (Linux ``/proc``), by native id."""
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        seconds[int(task)] = (int(fields[11]) + int(fields[12])) / ticks
    return seconds


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="reads the threads' CPU time from Linux's /proc, with BLAS allowed two threads")
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_blas_kernel_leaves_no_blas_worker_spinning(precision):
    """No BLAS call of ``velocity_blas`` runs threaded: one that did (the float32 path's norm of a large B_h) left
    OpenBLAS's workers spinning on the other core through the call, where the kernel's own helper thread
    needed it.  The threads that are not Python's (BLAS and OpenMP workers) must stay idle."""
    from threadpoolctl import threadpool_limits

    n, d = 512, 200  # the 200 × 200 norm is a 40 000-element dot: threaded in OpenBLAS when allowed
    x = sample_uniform(n, d, seed=0)
    heads = HeadStack(B=np.eye(d)[None] + 0.01 * np.ones((d, d))[None], V=np.eye(d)[None])  # symmetric, not a multiple of I
    with threadpool_limits(limits=2, user_api="blas"):
        velocity_blas(x, heads, beta=1.0, precision=precision, threads=2)
        time.sleep(0.3)  # any worker woken before this test stops spinning
        before = _cpu_seconds_by_thread()
        for _ in range(40):
            velocity_blas(x, heads, beta=1.0, precision=precision, threads=2)
        after = _cpu_seconds_by_thread()
    python_threads = {thread.native_id for thread in threading.enumerate()}
    used = {t: after[t] - before.get(t, 0.0) for t in after}
    ours = sum(cpu for t, cpu in used.items() if t in python_threads)
    foreign = sum(cpu for t, cpu in used.items() if t not in python_threads)
    assert foreign <= 0.1 * ours + 0.02, f"threads outside Python used {foreign:.3f} s of CPU beside the kernel's {ours:.3f} s"


def test_blas_threads_follow_the_work_not_the_pairs(monkeypatch):
    """Two threads from about 16 million pair-dimensions (n² H (d + 16)/64 pairs, half in float32 and under the
    causal mask): measured, two threads were up to 1.4x slower below the crossover, n ≈ 770 at d = 16 in float32."""
    from meanfield.kernels.blas import blas_threads
    from meanfield.kernels.jit import num_threads

    monkeypatch.setenv("MEANFIELD_NUM_THREADS", "2")
    two = num_threads()
    assert blas_threads(768, 32, 1, np.float32) == 1 and blas_threads(1024, 32, 1, np.float32) == two
    assert blas_threads(768, 16, 1, np.float64) == two and blas_threads(512, 16, 1, np.float64) == 1
    assert blas_threads(1024, 16, 1, np.float32) == two and blas_threads(1024, 16, 1, np.float32, causal=True) == 1
    assert blas_threads(512, 32, 3, np.float32) == two  # three heads: three times the work


def _log_row_sums(x, heads, beta, a):
    """Every head's ln Σ_j a_j e^{β s_ij} per row, by SciPy's logsumexp (the reference the kernels did not compute)."""
    from scipy.special import logsumexp

    return np.stack([logsumexp(beta * (x @ B) @ x.T + np.log(a)[None, :], axis=1) for B in heads.B])


@pytest.mark.parametrize(
    "n, d, backend, symmetric, flash",
    [
        (300, 16, "blas", True, True),  # flash tiles, symmetric
        (300, 16, "blas", False, True),  # flash tiles, query rows
        (600, 16, "blas", True, False),  # OpenBLAS symmetric tiles
        (300, 80, "blas", False, False),  # OpenBLAS row blocks
        (400, 3, "fused", False, True),
        (3000, 3, "harmonic", False, True),
        (3000, 3, "local", False, True),
    ],
    ids=["flash-symmetric", "flash-rows", "openblas-tiles", "openblas-rows", "fused", "harmonic", "local"],
)
@pytest.mark.parametrize("H", [1, 3])
def test_row_logs_are_the_velocitys_own_row_sums(rng, n, d, backend, symmetric, flash, H, monkeypatch):
    """``row_logs``: each head's ln Σ_j a_j e^{β s_ij}, filled by the kernels that take these sums (the energy at no cost)."""
    import meanfield.kernels.attention as attention

    if backend == "blas" and not flash:
        monkeypatch.setitem(attention.BACKENDS, "blas", lambda *args, **kw: velocity_blas(*args, flash=False, **kw))
    x = sample_uniform(n, d, seed=7)
    B = rng.standard_normal((H, d, d)) / np.sqrt(d)
    heads = HeadStack(B=B + B.transpose(0, 2, 1) if symmetric else B, V=rng.standard_normal((H, d, d)), w=rng.uniform(0.2, 1.0, H))
    a = rng.uniform(0.5, 1.5, n)
    for kind, beta in (("softmax", 6.0), ("unnormalized", 2.0), ("pooled", 6.0)):
        if backend == "fused" and kind != "softmax":
            continue
        logs = np.full((H, n), np.nan)
        v = attention_velocity(x, heads, beta=beta, kind=kind, weights=a, backend=backend, row_logs=logs)
        np.testing.assert_allclose(logs, _log_row_sums(x, heads, beta, a), rtol=0, atol=1e-11)  # ln: relative accuracy of the sums
        np.testing.assert_allclose(v, velocity_numpy(x, heads, beta=beta, kind=kind, weights=a), rtol=0, atol=1e-9 * np.abs(v).max())


def test_row_logs_of_rows_that_underflow_and_where_no_kernel_takes_them(rng):
    """Rows whose shifted sum underflows are redone exactly, their logs too; masks, float32 and the NumPy twin leave them."""
    import meanfield.kernels.blas as blas

    n, d = 700, 16
    x = sample_uniform(n, d, seed=8)
    x[:350] = x[0] + 1e-3 * x[:350]  # the mass in a tight cluster: the rows far from it see it far below their shift
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    a = np.full(n, 1.0 / 350)
    a[350:] = 0.0
    redone = []
    original = blas._exact_where_underflow

    def counted(acc, shift, *args):
        redone.append(int(np.sum(acc[:, -1] < args[-2])))
        return original(acc, shift, *args)

    for symmetric in (True, False):
        B = np.eye(d) + 0.1 * rng.standard_normal((d, d))
        heads = HeadStack(B=(0.5 * (B + B.T) if symmetric else B)[None], V=np.eye(d)[None])
        with np.errstate(divide="ignore"):
            reference = _log_row_sums(x, heads, 2000.0, a)
        for flash in (True, False):
            logs = np.full((1, n), np.nan)
            redone.clear()
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(blas, "_exact_where_underflow", counted)
                velocity_blas(x, heads, beta=2000.0, weights=a, flash=flash, row_logs=logs)
            assert sum(redone) >= 350, (symmetric, flash, redone)  # at least the rows outside the cluster were redone
            np.testing.assert_allclose(logs, reference, rtol=0, atol=1e-11 * 2000.0)
    heads = HeadStack(B=np.eye(d)[None], V=np.eye(d)[None])
    for kw in ({"mask": "causal"}, {"precision": "float32"}, {"backend": "numpy"}):
        logs = np.full((1, n), np.nan)
        attention_velocity(x, heads, beta=4.0, weights=a, row_logs=logs, **kw)
        assert np.isnan(logs).all(), kw


# ----------------------------------------------------------------------------- masses of 0, heads of weight 0
DENSE_PATHS = [("numpy", "float64"), ("numba", "float64"), ("fused", "float64"), ("blas", "float64"), ("auto", "float64"),
               ("fused", "float32"), ("blas", "float32")]


def _softmax_by_logsumexp(x, B, V, beta, a):
    """Each row's softmax velocity with the masses in the exponent: Σ_j e^{β s_ij + ln a_j - m_i} V x_j / Σ_j (…)."""
    with np.errstate(divide="ignore"):
        z = beta * (x @ B) @ x.T + np.log(a)[None, :]
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return (p @ (x @ V.T)) / p.sum(axis=1, keepdims=True)


@pytest.mark.parametrize(("backend", "precision"), DENSE_PATHS)
def test_a_token_of_mass_zero_holding_the_top_score_is_left_out(backend, precision):
    # an empty grid cell next to a row: shifted by the plain maximum, every term with mass underflowed (0/0 = NaN)
    x = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    v = attention_velocity(x, heads, beta=1000.0, weights=np.array([1.0, 0.0]), backend=backend, precision=precision)
    np.testing.assert_allclose(v, [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], rtol=0, atol=1e-12)
    # 60 tokens on S², the mass on a cluster at the pole only: most rows' top score sits on a token of mass 0
    rng = np.random.default_rng(3)
    y = sample_uniform(60, 3, seed=4)
    a = np.where(y[:, 2] > 0.8, rng.uniform(0.5, 1.0, 60), 0.0)
    B = np.eye(3) + 0.2 * rng.standard_normal((3, 3))
    V = rng.standard_normal((3, 3))
    for beta in (500.0, 5000.0):
        v = attention_velocity(y, HeadStack(B=B[None], V=V[None]), beta=beta, weights=a, backend=backend, precision=precision)
        ref = _softmax_by_logsumexp(y, B, V, beta, a)
        tol = 1e-12 if precision == "float64" else 2e-6 * (1 + beta * np.linalg.norm(B, 2))
        np.testing.assert_allclose(v, ref, rtol=0, atol=tol * np.abs(ref).max())


@pytest.mark.parametrize(("backend", "precision"), [path for path in DENSE_PATHS if path != ("fused", "float64")])  # softmax only
def test_a_pooled_head_of_weight_zero_adds_nothing(backend, precision):
    # its shift had set the pooled one, and the heads that weigh underflowed against it (NaN, or zeros in float32)
    x = sample_uniform(40, 3, seed=2)
    eye = np.eye(3)
    pooled = HeadStack(B=np.stack([5 * eye, eye]), V=np.stack([eye, 2 * eye]), w=[0.0, 1.0])
    alone = HeadStack(B=eye[None], V=(2 * eye)[None])
    v = attention_velocity(x, pooled, beta=200.0, kind="pooled", backend=backend, precision=precision)
    ref = velocity_numpy(x, alone, beta=200.0, kind="softmax")
    tol = 1e-12 if precision == "float64" else 1e-3
    np.testing.assert_allclose(v, ref, rtol=0, atol=tol * np.abs(ref).max())


def test_the_numba_rows_scale_unnormalized_sums_by_the_row_maximum():
    # the Cauchy–Schwarz bound's e^c overflowed where the sum itself is 1 (a rotation: every score 0)
    heads = HeadStack(B=np.array([[[0.0, 1.0], [-1.0, 0.0]]]), V=np.eye(2)[None])
    x = np.array([[1.0, 0.0], [1.0, 0.0]])
    for beta in (710.0, 1000.0):
        np.testing.assert_allclose(velocity_numba(x, heads, beta=beta, kind="unnormalized"), [[1.0, 0.0], [1.0, 0.0]], rtol=1e-14)


def test_no_tokens_give_an_empty_velocity_on_every_backend():
    # n = 0 had raised ZeroDivisionError (the default masses 1/n) or a reduction error on the BLAS path
    for d, backends in ((3, ("auto", "numpy", "numba", "fused", "blas", "harmonic", "local")), (16, ("auto", "numpy", "numba", "blas"))):
        heads = HeadStack(B=np.eye(d)[None], V=np.eye(d)[None])
        for backend in backends:
            for precision in (("float64", "float32") if backend in ("auto", "fused", "blas") else ("float64",)):
                v = attention_velocity(np.zeros((0, d)), heads, beta=1.0, backend=backend, precision=precision)
                assert v.shape == (0, d), (backend, precision)


@pytest.mark.parametrize("beta", [float("nan"), float("inf"), -1.0, "2"])
def test_a_bad_inverse_temperature_is_named(beta):
    from meanfield.kernels.fused import velocity_fused
    from meanfield.kernels.fused32 import velocity_fused32
    from meanfield.kernels.local import velocity_local

    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    x = sample_uniform(8, 3, seed=0)
    with pytest.raises(ValueError, match="beta"):
        attention_velocity(x, heads, beta=beta)
    # the kernels' own entries too (a string had been a numba TypingError, NaN NaN velocities or a cap of NaN radius)
    for kernel in (velocity_numpy, velocity_blas, velocity_numba, velocity_fused, velocity_fused32, velocity_local):
        with pytest.raises(ValueError, match="^beta must be a finite number"):
            kernel(x, heads, beta=beta)


def test_an_unknown_precision_of_the_blas_kernel_is_named():
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    with pytest.raises(ValueError, match="precision must be 'float64' or 'float32', got 'float16'"):  # had been a KeyError
        velocity_blas(sample_uniform(8, 3, seed=0), heads, beta=1.0, precision="float16")


@pytest.mark.parametrize("flash", [False, True])
@pytest.mark.parametrize("d", [2, 9, 33])
def test_unnormalized_rows_whose_bound_overflows_exp_stay_finite(rng, d, flash, monkeypatch):
    # the BLAS kernel multiplied the shifted sums by e^{c_i}, c_i = β‖Bᵀx_i‖ the Cauchy–Schwarz bound: above ln(max float)
    # that was inf for rows whose own sum is finite (found in review: auto takes this kernel for unnormalized float64)
    import meanfield.kernels.blas as blas

    if not flash:
        monkeypatch.setattr(blas, "FLASH_MAX_D64", 0)
    if d == 2:
        x = np.array([[1.0, 0.0], [0.0, 1.0]])
        heads = HeadStack(B=np.array([[[0.4, 0.6344], [0.0, 0.0]]]), V=np.eye(2)[None])  # c_0 = 750, row max 400
        beta = 1000.0
    else:
        x = sample_uniform(17, d, seed=3)
        heads = HeadStack(B=0.3 * rng.standard_normal((2, d, d)), V=rng.standard_normal((2, d, d)))
        beta = 300.0
    ref = velocity_numpy(x, heads, beta=beta, kind="unnormalized")
    got = velocity_blas(x, heads, beta=beta, kind="unnormalized")
    assert np.all(np.isfinite(ref)) and np.all(np.isfinite(got))
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12 * np.max(np.abs(ref)))


@pytest.mark.parametrize(("seed", "n", "beta"), [(9, 17, 256.0), (1, 257, 1024.0)])
def test_pooled_row_logs_of_the_sphere_kernels_hold_for_every_head(seed, n, beta):
    # the harmonic kernel certified pooled rows against the pooled sum only: a head far below it had logs 7-60 nats
    # off, or NaN, and its energy NaN (found in review)
    from meanfield.analysis.energy import energies_from_row_logs

    gen = np.random.default_rng(seed)
    x = sample_uniform(n, 3, seed=seed)
    B = np.stack([gen.standard_normal((3, 3)), 0.5 * gen.standard_normal((3, 3)), 0.3 * gen.standard_normal((3, 3))])
    heads = HeadStack(B=B, V=gen.standard_normal((3, 3, 3)), w=np.array([0.3, 0.3, 0.4]))
    exact = _log_row_sums(x, heads, beta, np.full(n, 1.0 / n))
    for backend in ("harmonic", "local"):
        logs = np.full((3, n), np.nan)
        attention_velocity(x, heads, beta=beta, kind="pooled", backend=backend, row_logs=logs)
        np.testing.assert_allclose(logs, exact, rtol=0, atol=1e-10)
        with np.errstate(over="ignore"):  # at β = 1024 the first head's energy is e^{1000}: inf on both sides
            np.testing.assert_allclose(energies_from_row_logs(logs, beta=beta), energies_from_row_logs(exact, beta=beta), rtol=1e-10)


@pytest.mark.parametrize("flash", [True, False])
@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("d", [8, 32])
def test_symmetric_tiles_on_two_threads_give_the_same_bits_every_call(d, precision, flash):
    # a slot of accumulators per thread had made the sums depend on which tiles each thread claimed: 10 of 12 calls
    # gave different bits (1e-16 apart), and --resume did not continue a run exactly; now a slot per chunk of tiles
    from meanfield.kernels.blas import tile_chunks

    x = sample_uniform(2000, d, seed=1)
    heads = HeadStack(B=np.eye(d)[None], V=np.eye(d)[None])
    calls = [velocity_blas(x, heads, beta=4.0, kind="softmax", precision=precision, flash=flash, threads=2) for _ in range(12)]
    assert len({v.tobytes() for v in calls}) == 1
    ref = velocity_numpy(x, heads, beta=4.0, kind="softmax")
    np.testing.assert_allclose(calls[0], ref, rtol=0, atol=(1e-6 if precision == "float32" else 1e-13) * np.abs(ref).max())
    bounds = tile_chunks(tuple(range(30, 0, -1)), 2)  # shares 2:2:1:1 of the work, contiguous, none empty
    assert bounds == (0, 6, 13, 18, 30) and tile_chunks((5, 4), 1) == (0, 2) and tile_chunks((3, 2, 1), 2) == (0, 1, 2, 3)


@pytest.mark.parametrize("scale", [1e-300, 1e-200, 1e-46, 0.3, 1.0, 7.0, 1e37, 1e300])
def test_masses_near_one_divides_by_an_exact_power_of_two(scale):
    # the shared rescaling of the harmonic and float32 kernels: total about 1, and multiplying back is exact
    from meanfield.kernels.inputs import masses_near_one

    a = np.random.default_rng(3).random(50) * scale
    scaled, k = masses_near_one(a)
    assert 2.0**-0.5 <= scaled.sum() <= 2.0**0.5
    np.testing.assert_array_equal(np.ldexp(scaled, k), a)  # bit for bit: a power of two divides exactly
    for degenerate in (np.zeros(4), np.array([np.inf, 1.0]), np.array([np.nan, 1.0])):
        same, k0 = masses_near_one(degenerate)
        assert k0 == 0 and same is not None and np.array_equal(same, degenerate, equal_nan=True)


@pytest.mark.parametrize("backend", ["local", "harmonic", "blas", "fused", "numpy"])
@pytest.mark.parametrize("scale", [1e-320, 1e300])
def test_masses_far_from_one_give_the_velocity_and_row_logs_of_masses_near_one(backend, scale):
    # subnormal masses had made the local kernel's softmax NaN; every backend now sums masses of total near 1
    from meanfield.kernels.attention import MASS_RANGE

    x = sample_uniform(1500, 3, seed=4)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    w = np.full(1500, scale)
    assert not 2.0**-MASS_RANGE <= w.sum() <= 2.0**MASS_RANGE
    logs = np.full((1, 1500), np.nan)
    v = attention_velocity(x, heads, beta=8.0, backend=backend, weights=w, row_logs=logs)
    np.testing.assert_allclose(v, velocity_numpy(x, heads, beta=8.0), rtol=0, atol=1e-10)  # softmax: scale-free
    if backend != "numpy":  # (the twin fills no log sums)
        exact = np.log(np.sum(np.exp(8.0 * (x @ x.T) - 8.0), axis=1)) + 8.0 + math.log(scale)
        np.testing.assert_allclose(logs[0], exact, rtol=0, atol=1e-9 + 3e-4 * (scale < 1e-300))  # (subnormal: 3 digits)
    u = attention_velocity(x, heads, beta=8.0, backend="blas" if backend in ("fused", "numpy") else backend, weights=w,
                           kind="unnormalized")
    reference = attention_velocity(x, heads, beta=8.0, backend="numpy", kind="unnormalized", weights=w / scale)
    np.testing.assert_allclose(u / float(w[0]), reference, rtol=1e-9 + 1e-5 * (scale < 1e-300), atol=0)  # (a subnormal v)


@pytest.mark.parametrize("backend", ["auto", "harmonic", "local"])
def test_float32_tokens_on_the_sphere_run_the_sphere_kernels_to_their_rounding(backend):
    # their rounding (6e-8) had been refused by the sphere kernels, and auto had run the dense kernel (25x slower)
    x = sample_uniform(3000, 3, seed=2)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    x32 = x.astype(np.float32)
    v = attention_velocity(x32, heads, beta=4.0, backend=backend)
    exact = velocity_numpy(x32.astype(float), heads, beta=4.0)  # the float32 values as given, unnormalised
    assert v.dtype == np.float64
    np.testing.assert_allclose(v, exact, rtol=0, atol=1e-6 * np.abs(exact).max())  # about β × their rounding
    with pytest.raises(ValueError, match="unit sphere"):  # float32 tokens far off the sphere are still refused
        attention_velocity(1.01 * x32, heads, beta=4.0, backend="harmonic")


@pytest.mark.parametrize("scale", [1e-20, 1e30])
@pytest.mark.parametrize(("d", "backend"), [(16, "auto"), (16, "blas"), (3, "blas"), (3, "harmonic"), (3, "local")])
def test_pooled_row_logs_of_a_weight_zero_head_under_rescaled_masses(d, backend, scale):
    # the blas kernel fills every pooled head's log sums, and masses outside [2^-60, 2^60] are divided by 2^k before
    # the kernels run; k ln 2 was added back to the heads with w != 0 only, so a w = 0 head's logs stayed k ln 2 low
    # (its energy off by 2^61 at masses 1e-20) while not NaN (found in review)
    from scipy.special import logsumexp

    from meanfield.analysis.energy import energies_from_row_logs

    gen = np.random.default_rng(15)
    n, beta = 50, 2.0
    heads = HeadStack(B=gen.standard_normal((2, d, d)) / 4, V=gen.standard_normal((2, d, d)), w=np.array([1.0, 0.0]))
    x = sample_uniform(n, d, seed=5)
    a = np.full(n, scale)
    logs = np.full((2, n), np.nan)
    attention_velocity(x, heads, beta=beta, kind="pooled", weights=a, backend=backend, row_logs=logs)
    exact = np.stack([logsumexp(beta * (x @ B) @ x.T, axis=1) + math.log(scale) for B in heads.B])
    filled = ~np.isnan(logs).all(axis=1)
    assert filled[0] and not np.isnan(logs[filled]).any()  # a head is filled whole or left whole
    np.testing.assert_allclose(logs[filled], exact[filled], rtol=0, atol=1e-9)
    direct = np.array([math.fsum(a * np.exp(row)) for row in exact]) / (2.0 * beta)  # E_h = Σ_i a_i e^{ℓ_i} / 2β
    np.testing.assert_allclose(energies_from_row_logs(logs, beta=beta, weights=a)[filled], direct[filled], rtol=1e-9)


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("n", [5, 700, 1024])
def test_auto_gives_the_dense_kernels_bits_on_float32_tokens_it_does_not_send_to_a_sphere_kernel(n, precision):
    # auto had normalised float32 tokens on S² at every n, so that where it then ran a dense kernel (always at
    # n ≤ 1024) its velocity differed from the same kernel named, by the tokens' rounding (1e-8; found in review)
    from meanfield.kernels import attention

    x32 = sample_uniform(n, 3, seed=6).astype(np.float32)
    gen = np.random.default_rng(6)
    heads = HeadStack(B=np.eye(3) + 0.3 * gen.standard_normal((2, 3, 3)), V=gen.standard_normal((2, 3, 3)))
    for kind in ("softmax", "pooled", "unnormalized"):
        dense = attention._dense_backend(heads, kind, precision, n=n)
        auto = attention_velocity(x32, heads, beta=4.0, kind=kind, precision=precision)
        named = attention_velocity(x32, heads, beta=4.0, kind=kind, precision=precision, backend=dense)
        assert auto.tobytes() == named.tobytes()


def test_auto_runs_the_row_kernel_on_a_few_tokens_for_the_float64_laws_the_fused_kernel_does_not_compute():
    # BLAS's fixed cost per head and call (0.3-0.6 ms) had made pooled attention on 32 tokens 2-7x slower than the row
    # kernel; a call that asks for the row sums keeps BLAS, which fills them (but for relu, whose sums no kernel takes)
    from meanfield.kernels import attention

    gen = np.random.default_rng(9)
    heads = HeadStack(B=gen.standard_normal((3, 3, 3)), V=gen.standard_normal((3, 3, 3)), w=np.array([0.2, 0.3, 0.5]))
    x = sample_uniform(attention.ROWS_MAX_N, 3, seed=9)
    for kind in ("pooled", "unnormalized", "relu"):
        assert attention._dense_backend(heads, kind, "float64", n=x.shape[0]) == "numba"
        auto = attention_velocity(x, heads, beta=2.0, kind=kind)
        assert auto.tobytes() == attention_velocity(x, heads, beta=2.0, kind=kind, backend="numba").tobytes()
        np.testing.assert_allclose(auto, velocity_numpy(x, heads, beta=2.0, kind=kind), rtol=1e-12, atol=1e-13)
        logs = np.full((3, x.shape[0]), np.nan)
        with_logs = attention_velocity(x, heads, beta=2.0, kind=kind, row_logs=logs)
        kept = {"relu": "numba", "pooled": "fused"}.get(kind, "blas")  # no kernel fills them for relu
        assert with_logs.tobytes() == attention_velocity(x, heads, beta=2.0, kind=kind, backend=kept).tobytes()
        assert np.isnan(logs).all() if kind == "relu" else not np.isnan(logs).any()
    # pooled from 49 tokens: the fused kernel, one pass per head (1.06-1.95x BLAS up to FUSED_POOLED_MAX_N), then BLAS
    assert attention._dense_backend(heads, "pooled", "float64", n=attention.ROWS_MAX_N + 1) == "fused"
    assert attention._dense_backend(heads, "pooled", "float64", n=attention.FUSED_POOLED_MAX_N) == "fused"
    assert attention._dense_backend(heads, "pooled", "float64", n=attention.FUSED_POOLED_MAX_N + 1) == "blas"
    assert attention._dense_backend(heads, "pooled", "float64", n=attention.ROWS_MAX_N, mask="causal") == "fused"
    assert attention._dense_backend(heads, "unnormalized", "float64", n=attention.ROWS_MAX_N + 1) == "blas"
    assert attention._dense_backend(heads, "pooled", "float32", n=8) == "fused"
    assert attention._dense_backend(heads, "softmax", "float64", n=8) == "fused"
    wide = HeadStack(B=np.eye(64)[None], V=np.eye(64)[None])
    assert attention._dense_backend(wide, "pooled", "float64", n=8) == "numba"
    assert attention._dense_backend(wide, "pooled", "float64", n=9) == "blas"  # n d > ROWS_MAX_ND


def _small_tokens(n=37, d=3, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_masses_whose_sum_overflows_are_rescaled_without_overflow():
    # the total had been taken as sum |a|, inf for 37 masses of 1e308: the masses were left as they were (found in review)
    from meanfield.kernels.inputs import MASS_RANGE, masses_in_range, masses_near_one

    a = np.full(37, 1e308)
    scaled, k = masses_near_one(a)
    assert 2.0**-0.5 <= scaled.sum() <= 2.0**0.5 and k == round(math.log2(37) + math.log2(1e308)) == 1028
    np.testing.assert_array_equal(np.ldexp(scaled, k), a)
    same, k0, back = masses_in_range(np.full(37, 1e-3), "relu")  # in [2^-60, 2^60]: kept, bits and all
    assert k0 == back == 0 and np.array_equal(same, np.full(37, 1e-3))
    assert masses_in_range(a, "softmax")[1:] == (k, 0) and masses_in_range(a, "relu")[1:] == (k, k)
    assert MASS_RANGE == 60


@pytest.mark.parametrize(("backend", "precision"), [("auto", "float64"), ("numba", "float64"), ("numpy", "float64"),
                                                    ("blas", "float64"), ("fused", "float64"), ("fused", "float32"),
                                                    ("blas", "float32")])
@pytest.mark.parametrize("kind", ["softmax", "pooled"])
def test_normalised_laws_of_masses_whose_sum_overflows_are_those_of_uniform_masses(backend, precision, kind):
    # every backend and precision had returned all NaN for 37 masses of 1e308 (each finite; found in review)
    x = _small_tokens()
    heads = HeadStack(B=np.random.default_rng(1).standard_normal((2, 3, 3)), V=np.eye(3)[None].repeat(2, axis=0))
    v = attention_velocity(x, heads, beta=2.0, kind=kind, weights=np.full(37, 1e308), backend=backend, precision=precision)
    uniform = attention_velocity(x, heads, beta=2.0, kind=kind, backend=backend, precision=precision)
    np.testing.assert_allclose(v, uniform, rtol=0, atol=(1e-6 if precision == "float32" else 1e-14) * np.abs(uniform).max())


@pytest.mark.parametrize("kind", ["unnormalized", "relu"])
def test_linear_laws_of_masses_whose_sum_overflows_are_inf_where_their_value_is(kind):
    # they scale with the masses: their entries past the float range had been NaN, the others too
    x = _small_tokens()
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    with np.errstate(over="ignore"):
        v = attention_velocity(x, heads, beta=2.0, kind=kind, weights=np.full(37, 1e308), backend="numpy")
    exact = velocity_numpy(x, heads, beta=2.0, kind=kind, weights=np.full(37, 1.0))  # × 1e308 is the true value
    assert not np.isnan(v).any() and np.isinf(v).any()
    finite = np.isfinite(v)
    np.testing.assert_allclose(v[finite] / 1e308, exact[finite], rtol=1e-13)
    assert np.all(np.abs(exact[~finite]) > np.finfo(float).max / 1e308) and np.array_equal(np.sign(v[~finite]), np.sign(exact[~finite]))


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
@pytest.mark.parametrize("scale", [5e-324, 1e-315, 1e308])
def test_the_row_kernel_called_directly_rescales_the_masses_as_attention_velocity_does(kind, scale):
    # its products a_j e^{βs - c} of subnormal masses had lost their digits: softmax wrong by 100 %, pooled NaN at
    # 5e-324, 1e-8 at 1e-315; masses summing past the float range NaN (found in review)
    x = _small_tokens()
    gen = np.random.default_rng(1)
    heads = HeadStack(B=gen.standard_normal((2, 3, 3)), V=gen.standard_normal((2, 3, 3)))
    a = np.full(37, scale)
    with np.errstate(over="ignore"):
        v = velocity_numba(x, heads, beta=2.0, kind=kind, weights=a)
        ref = velocity_numpy(x, heads, beta=2.0, kind=kind, weights=a / scale if scale > 1 else a)
    if scale > 1 and kind in ("unnormalized", "relu"):  # linear in the masses: 37e308 overflows, as it truly does
        assert not np.isnan(v).any()
        finite = np.isfinite(v)
        np.testing.assert_allclose(v[finite] / scale, ref[finite], rtol=1e-12)
        return
    if kind in ("unnormalized", "relu"):  # a subnormal true value, to its rounding (2^-1074 apart)
        ref = velocity_numpy(x, heads, beta=2.0, kind=kind, weights=np.ones(37)) * scale
    np.testing.assert_allclose(v, ref, rtol=0, atol=1e-12 * np.abs(ref).max() + 2.0**-1073)


@pytest.mark.parametrize("entry", ["numba", "numpy", "blas", "fused", "fused32"])
def test_every_direct_kernel_refuses_pooled_heads_whose_weights_are_all_zero(entry):
    # attention_velocity and velocity_fused refused them; velocity_numba, _numpy and _blas returned NaN (found in review)
    from meanfield.kernels.fused import velocity_fused
    from meanfield.kernels.fused32 import velocity_fused32

    kernel = {"numba": velocity_numba, "numpy": velocity_numpy, "blas": velocity_blas, "fused": velocity_fused,
              "fused32": velocity_fused32}[entry]
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None], w=[0.0])
    with pytest.raises(ValueError, match="every w is 0"):
        kernel(_small_tokens(), heads, beta=1.0, kind="pooled")
    assert np.isfinite(kernel(_small_tokens(), heads, beta=1.0, kind="softmax")).all()  # (w is pooled's only)


@pytest.mark.parametrize("backend", ["numpy", "numba", "blas", "fused"])
def test_a_numpy_bool_temperature_and_complex_or_object_tokens_are_refused(backend):
    # np.True_ had been taken as beta = 1 (a bool was refused); complex tokens had lost their imaginary parts with only
    # a ComplexWarning, object arrays had been cast (found in review)
    from meanfield.kernels.inputs import is_temperature

    assert not is_temperature(np.True_) and not is_temperature(np.array(False)) and is_temperature(np.float64(1.0))
    x = _small_tokens(5)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    with pytest.raises(ValueError, match="beta"):
        attention_velocity(x, heads, beta=np.True_, backend=backend)
    for bad in (x + 1e-3j, x.astype(object), x.astype(str)):
        with pytest.raises(ValueError, match="x \\(the tokens\\) must be an array of real numbers"):
            attention_velocity(bad, heads, beta=1.0, backend=backend)


@pytest.mark.parametrize("entry", ["numpy", "blas", "fused", "fused32", "harmonic", "local"])
def test_the_other_direct_entries_refuse_masses_whose_sum_overflows(entry):
    # they do not rescale the masses (attention_velocity and the row kernel do): softmax had been NaN, or finite and
    # wrong (0 and -1.08 where the velocity is -0.07 and 0.4), without a word (found in review)
    from meanfield.kernels.fused import velocity_fused
    from meanfield.kernels.fused32 import velocity_fused32
    from meanfield.kernels.harmonic import velocity_harmonic
    from meanfield.kernels.local import velocity_local

    call = {"numpy": velocity_numpy, "blas": velocity_blas, "fused": velocity_fused, "fused32": velocity_fused32,
            "harmonic": velocity_harmonic, "local": velocity_local}[entry]
    x = _small_tokens()
    heads = HeadStack(B=np.random.default_rng(1).standard_normal((2, 3, 3)), V=np.eye(3)[None].repeat(2, axis=0))
    with pytest.raises(ValueError, match=r"^weights \(token masses\): their total passes the largest float(64|32) .*"
                                         r"attention_velocity divides such masses"):
        call(x, heads, beta=2.0, kind="softmax", weights=np.full(37, 1e308))
    if entry != "fused32":
        call(x, heads, beta=2.0, kind="softmax", weights=np.full(37, 1e306))  # a total of 3.7e307 is taken


@pytest.mark.parametrize("entry", ["fused32", "blas"])
def test_the_float32_entries_refuse_masses_whose_sum_passes_float32(entry):
    # a total between 3.4e38 and the float64 limit had given NaN rows (or rows 0.43 off) with an overflow warning only
    from meanfield.kernels.fused32 import velocity_fused32

    x = _small_tokens()
    heads = HeadStack(B=np.random.default_rng(1).standard_normal((2, 3, 3)), V=np.eye(3)[None].repeat(2, axis=0))
    call = velocity_fused32 if entry == "fused32" else (lambda *args, **kw: velocity_blas(*args, precision="float32", **kw))
    with pytest.raises(ValueError, match=r"^weights \(token masses\): their total passes the largest float32 "):
        call(x, heads, beta=2.0, kind="softmax", weights=np.full(37, 1e38))
    v = call(x, heads, beta=2.0, kind="softmax", weights=np.full(37, 1e36))  # 3.7e37: taken, and right
    np.testing.assert_allclose(v, attention_velocity(x, heads, beta=2.0, kind="softmax"), rtol=0, atol=1e-5)
    np.testing.assert_allclose(attention_velocity(x, heads, beta=2.0, weights=np.full(37, 1e38), precision="float32"),
                               v, rtol=0, atol=1e-5)  # attention_velocity rescales them
    # the sums scale with ||V|| (relu: and its scores, ||B||): a total of 1e38 with V = 100 I had given inf, relu NaN
    tokens, quarter = np.eye(3)[[0, 0, 1, 2]], np.full(4, 2.5e37)
    for kind, stack in (("softmax", HeadStack(B=np.eye(3)[None], V=100 * np.eye(3)[None])),
                        ("relu", HeadStack(B=10 * np.eye(3)[None], V=np.eye(3)[None]))):
        with pytest.raises(ValueError, match=r"^weights \(token masses\): their float32 sums may pass the largest float32"):
            call(tokens, stack, beta=1.0, kind=kind, weights=quarter)
