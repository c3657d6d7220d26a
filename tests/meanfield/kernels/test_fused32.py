"""The fused float32 kernel against the float64 NumPy twin: every law, H = 1 and 3, masses, the causal mask."""
from __future__ import annotations

import numpy as np
import pytest

from meanfield.geometry.sphere import normalize, sample_uniform
from meanfield.heads import HeadStack
from meanfield.kernels.attention import attention_velocity
from meanfield.kernels.fused32 import FLOAT32_SUMS_EXPONENT, exp32_nonpositive, velocity_fused32
from meanfield.kernels.reference import velocity_numpy

KINDS = ("softmax", "unnormalized", "pooled", "relu")


def test_float32_exp_is_within_a_few_ulp_and_zero_below_the_normal_range():
    z = -np.linspace(0.0, 86.9, 400_001).astype(np.float32)
    got = exp32_nonpositive(z).astype(np.float64)
    ref = np.exp(z.astype(np.float64))
    np.testing.assert_allclose(got, ref, rtol=3e-7, atol=0)
    assert np.all(exp32_nonpositive(np.array([-87.5, -100.0, -1e30], dtype=np.float32)) == 0.0)
    assert exp32_nonpositive(np.array([0.0], dtype=np.float32))[0] == 1.0
    # a positive z (a score past its row's shift by float32 rounding) counts as 0 (z > 88 had given inf or -6.2e9)
    assert np.all(exp32_nonpositive(np.array([1e-7, 1.0, 50.0, 88.0, 89.0, 200.0, 1e30], dtype=np.float32)) == 1.0)


def _heads(rng, H, d):
    return HeadStack(B=rng.standard_normal((H, d, d)), V=rng.standard_normal((H, d, d)), w=rng.uniform(0.2, 1.0, H))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_every_law_matches_the_float64_twin_to_float32_accuracy(rng, kind, H, d, mask):
    n = 301
    x = sample_uniform(n, d, seed=3)
    heads = _heads(rng, H, d)
    a = rng.uniform(0.5, 1.5, n)
    for beta in (0.5, 4.0, 16.0):
        for weights in (None, a):
            ref = velocity_numpy(x, heads, beta=beta, kind=kind, weights=weights, mask=mask)
            got = velocity_fused32(x, heads, beta=beta, kind=kind, weights=weights, mask=mask)
            scale = float(np.max(np.linalg.norm(ref, axis=1)))
            bound = 2e-6 * (1.0 + (0.0 if kind == "relu" else beta))  # the module's stated float32 accuracy
            np.testing.assert_allclose(got, ref, rtol=0, atol=bound * scale)



@pytest.mark.parametrize("kind", ("softmax", "unnormalized", "pooled"))
def test_scaled_masses_at_low_temperature_match_the_float64_twin(rng, kind, monkeypatch):
    # β = 64 and 256 on S²: scores down to -2β, past the float32 exp's edge (-87), so the masses are scaled by a
    # power of two (the exponent the bound gives), which the laws must undo
    import meanfield.kernels.fused32 as fused32

    exponents = []
    real = fused32.float32_mass_exponent
    monkeypatch.setattr(fused32, "float32_mass_exponent", lambda *args: exponents.append(real(*args)) or exponents[-1])
    n = 400
    x = sample_uniform(n, 3, seed=12)
    heads = HeadStack(B=(np.eye(3) + 0.2 * rng.standard_normal((2, 3, 3))), V=rng.standard_normal((2, 3, 3)), w=np.array([0.4, 0.6]))
    a = rng.uniform(0.5, 1.5, n)
    for beta in (64.0, 256.0):
        ref = velocity_numpy(x, heads, beta=beta, kind=kind, weights=a)
        got = velocity_fused32(x, heads, beta=beta, kind=kind, weights=a)
        scale = float(np.max(np.linalg.norm(ref, axis=1)))
        np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * (1.0 + beta) * scale)
    assert len(exponents) == 2 and min(exponents) > 0

def test_rows_whose_float32_terms_underflow_are_summed_again_at_their_own_maximum(rng, monkeypatch):
    """Keys in a cap and B turning every query away from it: the shift overshoots by ~2β > 87, float32 underflows."""
    import meanfield.kernels.fused32 as fused32

    sent = []
    monkeypatch.setattr(fused32, "velocity_numpy", lambda *args, **kw: sent.append(kw["rows"]) or velocity_numpy(*args, **kw))
    x = normalize(np.array([1.0, 0.0, 0.0]) + 0.05 * rng.standard_normal((200, 3)))
    heads = HeadStack(B=-np.eye(3)[None], V=np.eye(3)[None])
    for kind in ("softmax", "pooled", "unnormalized"):
        ref = velocity_numpy(x, heads, beta=64.0, kind=kind)
        got = velocity_fused32(x, heads, beta=64.0, kind=kind)
        scale = float(np.max(np.linalg.norm(ref, axis=1)))
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6 * (1.0 + 64.0) * scale)
    assert not sent  # in float32 on the kernel's threads, none in the NumPy twin


def _two_clusters_and_rotations(d, H, n=240, seed=13):
    """Tokens in two tight clusters at ±e_0 and heads that rotate the queries 0.5–0.7 rad off them in the (e_0, e_1)
    plane: the Cauchy–Schwarz shift β‖B_hᵀx_i‖ overshoots every row's maximum by about (1 - cos θ) β."""
    gen = np.random.default_rng(seed)
    centre = np.zeros(d)
    centre[0] = 1.0
    x = normalize(np.concatenate([centre + 0.02 * gen.standard_normal((n // 2, d)), -centre + 0.02 * gen.standard_normal((n // 2, d))]))
    B = np.empty((H, d, d))
    for h, angle in enumerate(np.linspace(0.5, 0.7, H)):
        B[h] = np.eye(d)
        B[h][:2, :2] = [[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]]
    V = np.eye(d) + 0.3 * gen.standard_normal((H, d, d))
    return x, HeadStack(B=B, V=V, w=np.linspace(1.0, 0.5, H))


@pytest.mark.parametrize(("backend", "d"), [("fused", 3), ("blas", 16)])
@pytest.mark.parametrize("H", [1, 3])
def test_float32_rows_past_the_bounds_reach_are_redone_in_float32_to_its_accuracy(backend, d, H, monkeypatch):
    # at large β with a head that turns the queries away from the tokens nearly every row's float32 sum underflowed
    # under the Cauchy–Schwarz shift, and each went to a single-threaded float64 redo (the NumPy twin, or NumPy's exp
    # in the blas kernel): the float32 call took 10–35× the float64 one (found in review).  Now those rows are summed
    # once more in float32, shifted by their own maximum, on the kernel's threads
    from scipy.special import logsumexp

    import meanfield.kernels.blas as blas
    import meanfield.kernels.fused32 as fused32
    from meanfield.kernels.jit import num_threads, set_num_threads

    redone = []
    monkeypatch.setattr(fused32, "velocity_numpy", lambda *args, **kw: redone.append(kw["rows"]) or velocity_numpy(*args, **kw))
    monkeypatch.setattr(blas, "exp_shifted_by_mass", lambda *args: redone.append(args) or blas._exp_shifted_rows(*args))
    x, heads = _two_clusters_and_rotations(d, H)
    n, beta = x.shape[0], 512.0  # (unnormalized: e^{β s} stays below float64's overflow)
    shift = beta * np.linalg.norm(np.einsum("nl,hlk->hnk", x, heads.B), axis=2)  # the kernels' bound, ‖x_j‖ = 1
    logs = np.stack([logsumexp(beta * (x @ B) @ x.T, axis=1) - np.log(n) for B in heads.B])
    assert np.mean(logs - shift < np.log(1e-20)) > 0.9  # most rows' float32 sums underflow under the bound
    a = np.random.default_rng(2).uniform(0.5, 1.5, n)
    v_norm = sum(np.linalg.norm(V, 2) for V in heads.V)
    for kind in KINDS:
        for weights in (None, a):
            ref = velocity_numpy(x, heads, beta=beta, kind=kind, weights=weights)
            got = attention_velocity(x, heads, beta=beta, kind=kind, weights=weights, backend=backend, precision="float32")
            masses = np.full(n, 1.0 / n) if weights is None else weights
            if kind == "unnormalized":
                terms = max(float((np.exp(beta * (x @ B) @ x.T) @ masses).max()) for B in heads.B)
            elif kind == "relu":
                terms = max(float((np.maximum((x @ B) @ x.T, 0.0) @ masses).max()) for B in heads.B)
            else:
                terms = 1.0
            bound = 1e-6 * (1.0 + (0.0 if kind == "relu" else beta)) * v_norm * terms  # the documented float32 bound
            np.testing.assert_allclose(got, ref, rtol=0, atol=bound)
    assert not redone  # every row in float32 on the kernel's threads: none in the float64 redo
    threads = num_threads()
    try:  # the same bits on every call and whatever the number of threads
        calls = []
        for t in (1, 2, 2):
            set_num_threads(t)
            if backend == "blas":
                calls.append(blas.velocity_blas(x, heads, beta=beta, kind="pooled", weights=a, precision="float32", threads=t))
            else:
                calls.append(fused32.velocity_fused32(x, heads, beta=beta, kind="pooled", weights=a))
        assert calls[0].tobytes() == calls[1].tobytes() == calls[2].tobytes()
    finally:
        set_num_threads(threads)


def test_precision_float32_dispatch():
    rng = np.random.default_rng(1)
    x = sample_uniform(400, 3, seed=0)
    heads = _heads(rng, 2, 3)
    from meanfield.kernels import attention
    from meanfield.kernels.blas import velocity_blas

    for kind in KINDS:
        auto = attention_velocity(x, heads, beta=2.0, kind=kind, precision="float32")
        fused = attention_velocity(x, heads, beta=2.0, kind=kind, precision="float32", backend="fused")
        np.testing.assert_array_equal(fused, velocity_fused32(x, heads, beta=2.0, kind=kind))
        if attention._dense_backend(heads, kind, "float32", n=x.shape[0]) == "fused":
            np.testing.assert_array_equal(auto, fused)
        else:  # an AVX-512 processor: the BLAS kernel's flash tiles (400² pairs, two heads)
            assert attention.FLASH_CPU and kind != "relu"
            np.testing.assert_array_equal(auto, velocity_blas(x, heads, beta=2.0, kind=kind, precision="float32"))
            np.testing.assert_allclose(auto, fused, rtol=0, atol=2e-6 * np.abs(fused).max())
    # the rule: the fused kernel below FLASH_SMALL_D_MIN_PAIRS, with the causal mask and for relu; else the flash tiles
    small = int(np.sqrt(attention.FLASH_SMALL_D_MIN_PAIRS / heads.H)) - 1
    assert attention._dense_backend(heads, "softmax", "float32", n=small) == "fused"
    assert attention._dense_backend(heads, "softmax", "float64", n=4096, mask="causal") == "fused"
    assert attention._dense_backend(heads, "relu", "float32", n=4096) == "fused"
    assert attention._dense_backend(heads, "softmax", "float64", n=4096) == ("blas" if attention.FLASH_CPU else "fused")
    assert attention._dense_backend(heads, "unnormalized", "float64", n=64) == "blas"  # float64: fused has softmax and pooled only
    x16 = sample_uniform(300, 16, seed=0)
    wide = _heads(rng, 1, 16)
    blas = attention_velocity(x16, wide, beta=1.0, precision="float32")  # d > 8: the BLAS float32 kernel
    np.testing.assert_allclose(blas, velocity_numpy(x16, wide, beta=1.0), rtol=0, atol=1e-5 * np.abs(blas).max())
    with pytest.raises(ValueError, match="float32"):
        attention_velocity(x, heads, beta=1.0, precision="float32", backend="numba")
    with pytest.raises(ValueError, match="unknown attention kind"):
        velocity_fused32(x, heads, beta=1.0, kind="linear")


@pytest.mark.parametrize("backend", ["fused", "blas"])
@pytest.mark.parametrize("beta", [0.01, 0.5])
def test_the_float32_error_is_bounded_against_the_size_of_the_summed_terms(backend, beta):
    # the bound had been stated relative to max|v|: antipodal tokens at small β, whose velocities cancel to about
    # (β/d)·x, had been 79× past it; against the terms' size ‖V‖ (softmax rows sum to one) it holds
    d, half = 100, sample_uniform(150, 100, seed=3)
    x = np.concatenate([half, -half])
    heads = HeadStack(B=np.eye(d)[None], V=np.eye(d)[None])
    exact = velocity_numpy(x, heads, beta=beta)
    low = attention_velocity(x, heads, beta=beta, backend=backend, precision="float32")
    error = np.abs(low - exact).max()
    assert error <= 1e-6 * (1 + beta) * np.linalg.norm(heads.V[0], 2)
    assert error > 1e-6 * (1 + beta) * np.abs(exact).max() or beta > 0.1  # relative to max|v| it would not hold


@pytest.mark.parametrize("backend", ["fused", "blas"])
@pytest.mark.parametrize(("kind", "mass"), [("relu", 1e-46), ("relu", 1e-40), ("unnormalized", 1e-45), ("softmax", 1e37),
                                            ("pooled", 1e36), ("unnormalized", 1e30)])
def test_masses_beyond_float32_range_give_the_float64_velocity_to_float32_accuracy(backend, kind, mass):
    # relu with masses of 1e-46 had given v ≡ 0, softmax with 1e37 NaN: the masses are scaled by a power of two
    x = sample_uniform(300, 3, seed=2)
    heads = HeadStack(B=np.stack([np.eye(3), np.diag([1.0, 0.5, 0.2])]), V=np.stack([np.eye(3), np.diag([0.3, 1.0, 0.7])]))
    a = np.full(300, mass) * (1.0 + np.arange(300) / 300)
    exact = velocity_numpy(x, heads, beta=2.0, kind=kind, weights=a)
    low = attention_velocity(x, heads, beta=2.0, kind=kind, weights=a, backend=backend, precision="float32")
    assert np.all(np.isfinite(low))
    np.testing.assert_allclose(low, exact, rtol=0, atol=1e-6 * 3.0 * np.abs(exact).max())


@pytest.mark.parametrize("backend", ["fused", "blas"])
@pytest.mark.parametrize(("d", "beta"), [(3, 1e9), (40, 1e14)])
def test_float32_rows_at_scores_past_float32_resolution_stay_finite_and_nonnegative(backend, d, beta):
    # (found in review) from β‖B‖ ≈ 2e8 the float32 shifted exponents had come out positive by their rounding, above 88:
    # NaN rows, or negative weights (a row 0.34 off); each token attends to itself alone there, v = x
    x = sample_uniform(100, d, seed=0)
    heads = HeadStack(B=np.eye(d)[None], V=np.eye(d)[None])
    low = attention_velocity(x, heads, beta=beta, backend=backend, precision="float32")
    np.testing.assert_allclose(low, x, rtol=0, atol=1e-6)


def test_precision_float32_holds_beta_to_float32_resolution():
    # the Model (and a config, naming model.beta) refuses β‖B_h‖_F past 2^23 in float32, where the scores' rounding
    # passes 1/2, as it refuses past 2^52 in float64
    from meanfield.config import load_config
    from meanfield.errors import ConfigError
    from meanfield.build import build_model
    from meanfield.heads import identity
    from meanfield.model import FLOAT32_SCORE_BOUND_LIMIT, Model, ScoreOverflowError

    top = FLOAT32_SCORE_BOUND_LIMIT / np.sqrt(3.0)  # β‖I‖_F = β√3
    Model(d=3, beta=top * 0.999, heads=identity(3), precision="float32")
    Model(d=3, beta=1e9, heads=identity(3))  # float64 takes it
    with pytest.raises(ScoreOverflowError, match=r"past float32's resolution: .*\(at most 2\^23 = 8\.39e\+06 in float32"):
        Model(d=3, beta=top * 1.001, heads=identity(3), precision="float32")
    with pytest.raises(ConfigError, match=r"model\.beta: .*past float32's resolution"):
        build_model(load_config(None, ["model.precision=float32", "model.beta=1e9"]))


def test_mass_exponent_bounds_the_denominators_of_short_tokens_too(rng):
    # the denominators Σ_j 2^k a_j e^{…} ≤ 2^k Σ_j a_j whatever the tokens' norms: the exponent's bound (one helper
    # with the refusal's, float32_sums_bound) takes max(1, ‖x‖), so short tokens (‖x‖ = 1e-6) do not raise k past 2^60
    from meanfield.kernels.fused32 import float32_mass_exponent
    from meanfield.kernels.inputs import float32_sums_bound

    heads = HeadStack(B=np.eye(3)[None], V=2.0 * np.eye(3)[None])
    a = rng.uniform(0.5, 1.5, 50)
    for radius in (1e-6, 1.0, 3.0):
        k = float32_mass_exponent(a, heads, radius)
        assert 2.0**k * a.sum() * max(1.0, np.linalg.norm(heads.V[0])) * max(1.0, radius) <= 2.0**FLOAT32_SUMS_EXPONENT
        assert 2.0 ** (k + 1) * float32_sums_bound(a, heads, radius, kind="softmax") > 2.0**FLOAT32_SUMS_EXPONENT
