"""The fused small-d softmax kernel: its exp against np.exp, the kernel against the NumPy twin."""
from __future__ import annotations

import numpy as np
import pytest

from meanfield.kernels.attention import velocity_numpy
from meanfield.kernels.fused import FLUSH_BELOW, _fused_kernel, _score_exp3, exp_nonpositive, velocity_fused
from meanfield.heads import HeadStack
from meanfield.geometry.sphere import sample_uniform

TINY = np.finfo(float).tiny


def test_exp_matches_numpy_on_the_whole_range():
    z = -np.random.default_rng(0).uniform(0.0, 745.0, 10**6)
    got, ref = exp_nonpositive(z), np.exp(z)
    normal = ref >= TINY
    np.testing.assert_allclose(got[normal], ref[normal], rtol=4.5e-16, atol=0)  # ≤ 2 ulp
    np.testing.assert_allclose(got[~normal], ref[~normal], rtol=0, atol=2 * 5e-324)  # subnormals: 1 unit


def test_exp_is_within_one_ulp_of_numpy():
    # the polynomial's large low terms are added last (1 + (r + r²(…))): no more than one rounding
    # step from np.exp, near 0 (most scores) and over the whole normal range
    rng = np.random.default_rng(3)
    for z in (-rng.uniform(0.0, 1.0, 10**6), -rng.uniform(0.0, 708.0, 10**6)):
        got, ref = exp_nonpositive(z), np.exp(z)
        assert np.max(np.abs(got - ref) / np.spacing(ref)) <= 1.0


def test_exp_edge_values():
    z = np.array([0.0, -0.0, -1e-300, -5e-324, -0.5 * np.log(2), -np.log(2), -708.39, -709.8, -745.1, -745.2, -746.0, -800.0, -np.inf])
    np.testing.assert_allclose(exp_nonpositive(z), np.exp(z), rtol=4.5e-16, atol=5e-324)
    # the range reduction is exact at the Cody–Waite nodes (fastmath must not have folded it)
    k = -np.arange(0, 1022, dtype=float)
    np.testing.assert_allclose(exp_nonpositive(k * np.log(2)), np.exp(k * np.log(2)), rtol=4.5e-16, atol=0)



def test_score_pass_flushes_what_would_be_subnormal():
    # the score passes' exp: np.exp to 1 ulp down to exp(FLUSH_BELOW), exactly 0 below (no subnormal result)
    z = np.concatenate([-np.random.default_rng(4).uniform(0.0, 800.0, 10**5), [FLUSH_BELOW, np.nextafter(FLUSH_BELOW, -1.0)]])
    e = np.empty_like(z)
    _score_exp3(1.0, 0.0, 0.0, 0.0, z, np.zeros_like(z), np.zeros_like(z), z.size, e)
    kept = z >= FLUSH_BELOW
    ref = np.exp(z[kept])
    assert np.max(np.abs(e[kept] - ref) / np.spacing(ref)) <= 1.0
    assert np.all(e[~kept] == 0.0) and np.all(e[kept] >= TINY)


@pytest.mark.parametrize("beta", [512.0, 1024.0])
def test_kernel_at_low_temperature_against_numpy(beta):
    # scores spread over [-2β, 0]: a few per cent of the pairs fall where exp is subnormal, now flushed
    x = sample_uniform(1500, 3, seed=6)
    rng = np.random.default_rng(7)
    heads = HeadStack(B=(np.eye(3) + 0.2 * rng.standard_normal((3, 3)))[None], V=rng.standard_normal((3, 3))[None])
    ref = velocity_numpy(x, heads, beta=beta)
    np.testing.assert_allclose(velocity_fused(x, heads, beta=beta), ref, rtol=0, atol=1e-13 * np.abs(ref).max())

def _close(got, ref):
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("d", [3, 5])
def test_kernel_matches_numpy_twin(H, d):
    rng = np.random.default_rng(10 * H + d)
    n = 700
    x = rng.standard_normal((n, d))
    heads = HeadStack(B=rng.standard_normal((H, d, d)), V=rng.standard_normal((H, d, d)))
    a = rng.uniform(0.1, 1.0, n)
    for beta in (0.3, 4.0, 40.0):
        for weights in (None, a):
            _close(velocity_fused(x, heads, beta=beta, weights=weights), velocity_numpy(x, heads, beta=beta, weights=weights))


def test_sphere_and_odd_chunks():
    x = sample_uniform(1000, 3, seed=2)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    ref = velocity_numpy(x, heads, beta=9.0)
    for chunk in (8, 37, 512, 4096):
        _close(velocity_fused(x, heads, beta=9.0, chunk=chunk), ref)


def _far_token(d, H, seed=5):
    """300 tokens on the sphere and one 200 times as far: the Cauchy–Schwarz shift overshoots by about 200 β."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((300, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x[0] *= 200.0
    B = np.stack([np.eye(d)] + [rng.standard_normal((d, d)) for _ in range(H - 1)])
    return x, HeadStack(B=B, V=rng.standard_normal((H, d, d)))


def _raw_kernel(x, heads, beta, a):
    xt = np.ascontiguousarray(x.T)
    wx = np.ascontiguousarray(np.vstack([x.T * a, a]))
    xmax = float(np.linalg.norm(x, axis=1).max())
    logs = np.full((heads.B.shape[0], len(x)), np.nan)
    _, low = _fused_kernel(x, xt, wx, heads.B, heads.V, beta, xmax, 16, 64, False, logs)
    return low, logs


@pytest.mark.parametrize("d,H", [(3, 1), (4, 2)])
def test_underflowing_rows_are_summed_again_at_their_own_maximum_on_the_kernels_threads(d, H, monkeypatch):
    # rows whose sum underflowed under the Cauchy–Schwarz shift had all gone to a single-threaded NumPy twin: 59 % of the
    # rows of clustered tokens at β = 1024 with a general head, 19–21× slower than the local kernel (found in review)
    from scipy.special import logsumexp

    from meanfield.kernels import fused

    x, heads = _far_token(d, H)
    beta, n = 10.0, len(x)
    shift = beta * np.linalg.norm(np.einsum("nl,hlk->hnk", x, heads.B), axis=2) * 200.0
    logs_ref = np.stack([logsumexp(beta * (x @ B) @ x.T, axis=1) - np.log(n) for B in heads.B])
    assert np.mean(logs_ref - shift < np.log(1e-200)) > 0.5  # most rows underflow under the bound
    low, logs = _raw_kernel(x, heads, beta, np.full(n, 1.0 / n))
    assert not low.any()  # every one summed again by the kernel
    np.testing.assert_allclose(logs, logs_ref, rtol=1e-13)
    sent = []
    monkeypatch.setattr(fused, "_exact_rows", lambda *args: sent.append(args) or pytest.fail("sent to NumPy"))
    for mask in ("none", "causal"):
        _close(velocity_fused(x, heads, beta=beta, mask=mask), velocity_numpy(x, heads, beta=beta, mask=mask))
    assert not sent


@pytest.mark.parametrize("d", [3, 5])
def test_clustered_tokens_at_large_beta_match_numpy_with_the_same_bits_for_any_number_of_threads(d):
    from meanfield.kernels import fused
    from meanfield.kernels.jit import num_threads, set_num_threads

    threads = num_threads()
    for seed in range(3):
        rng = np.random.default_rng(10 * d + seed)
        n = 256  # n² H = 2^18 pairs: parallel, in row blocks of 64 on one thread and 32 on two
        centres = rng.standard_normal((5, d))
        x = centres[rng.integers(0, 5, n)] + 1e-2 * rng.standard_normal((n, d))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        heads = HeadStack(B=rng.standard_normal((4, d, d)), V=rng.standard_normal((4, d, d)))
        a = rng.uniform(0.5, 1.5, n)
        for mask in ("none", "causal"):
            _close(velocity_fused(x, heads, beta=1024.0, weights=a, mask=mask),
                   velocity_numpy(x, heads, beta=1024.0, weights=a, mask=mask))
        try:  # which rows take their own maximum first depends on the row before: within blocks of PREDICT_ROWS rows
            calls = []
            for t in (1, 2, 2):
                set_num_threads(t)
                calls.append(velocity_fused(x, heads, beta=1024.0, weights=a))
            assert calls[0].tobytes() == calls[1].tobytes() == calls[2].tobytes()
        finally:
            set_num_threads(threads)
    assert fused.PREDICT_ROWS == 16


@pytest.mark.parametrize("d", [3, 5])
def test_rows_whose_top_score_has_mass_zero_are_summed_by_the_kernel_too(d, monkeypatch):
    # shifted by the largest score over every token, rows whose top score sat on a token of mass 0 still underflowed
    # and went to NumPy: with zero-mass tracers spread over the sphere, most rows (6-9.5x slower, found in review); the
    # shift is now the largest score over the tokens with mass, the tracers' exponents above it clamped at 0
    from meanfield.kernels import fused

    x, heads = _far_token(d, 2)
    x = np.roll(x, -1, axis=0)  # the far token last (under the causal mask the first token needs a mass)
    a = np.full(len(x), 1.0 / (len(x) - 1))
    a[-1] = 0.0  # the far token: the top score of about half the rows, and no mass
    a[1::5] = 0.0  # tracers
    low, logs = _raw_kernel(x, heads, 10.0, a)
    assert not low.any()
    monkeypatch.setattr(fused, "_exact_rows", lambda *args: pytest.fail("sent to NumPy"))
    row_logs = np.full((2, len(x)), np.nan)
    for mask in ("none", "causal"):
        v = velocity_fused(x, heads, beta=10.0, weights=a, mask=mask, row_logs=row_logs)
        _close(v, velocity_numpy(x, heads, beta=10.0, weights=a, mask=mask))
    from scipy.special import logsumexp

    expected = np.stack([logsumexp(10.0 * (x @ B) @ x.T, b=a[None, :], axis=1) for B in heads.B])
    np.testing.assert_allclose(row_logs, expected, rtol=1e-13)


def test_rows_whose_mass_is_below_the_floats_reach_go_to_numpy_in_blocks_of_bounded_size(monkeypatch):
    # the rows that still underflow (a top mass below 1e-200) go to NumPy, shifted by max_j (β s_ij + ln a_j); all of
    # them at once had made a (rows × n) array, up to n × n
    from meanfield.kernels import fused

    x, heads = _far_token(3, 2)
    a = 1e-250 * np.random.default_rng(1).uniform(1.0, 2.0, len(x))  # every row's sum below 1e-200, at any shift
    low, _ = _raw_kernel(x, heads, 10.0, a)
    assert low.all()
    sizes = []
    real = fused._exact_rows
    monkeypatch.setattr(fused, "EXACT_ROWS_ELEMENTS", 300 * 7)  # 7 rows of 300 scores a block
    monkeypatch.setattr(fused, "_exact_rows", lambda x, a, B, V, beta, idx, causal: sizes.append(idx.size) or real(x, a, B, V, beta, idx, causal))
    logs = np.full((2, 300), np.nan)
    v = velocity_fused(x, heads, beta=10.0, weights=a, row_logs=logs)
    assert sizes and max(sizes) <= 7 and sum(sizes) == low.sum()
    _close(v, velocity_numpy(x, heads, beta=10.0, weights=a))
    assert not np.isnan(logs).any()


@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("d", [3, 5])
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_pooled_law_matches_an_independent_log_sum_exp(H, d, mask):
    # the effective-mobility law of Massucco et al. (arXiv 2605.18870): Σ_h w_h Σ_j a_j e^{βs} V_h x_j / Σ_h w_h Σ_j a_j e^{βs},
    # written here from scratch in log space (a head of weight 0, masses with zeros, low temperature)
    from scipy.special import logsumexp

    rng = np.random.default_rng(100 * H + d)
    n = 200
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    w = rng.uniform(0.3, 1.0, H)
    w[H // 2] = 0.0 if H > 1 else w[0]
    heads = HeadStack(B=rng.standard_normal((H, d, d)), V=rng.standard_normal((H, d, d)), w=w)
    a = rng.uniform(0.0, 1.0, n)
    a[5::9] = 0.0
    seen = np.tril(np.ones((n, n), dtype=bool)) if mask == "causal" else np.ones((n, n), dtype=bool)
    for beta in (0.0, 3.0, 300.0):
        for masses in (None, a):
            m = np.full(n, 1.0 / n) if masses is None else masses
            logs, means = [], []
            for B, V in zip(heads.B, heads.V):
                z = np.where(seen, beta * (x @ B) @ x.T, -np.inf)
                logs.append(logsumexp(z, b=m[None, :], axis=1))
                p = np.exp(z - logs[-1][:, None]) * m[None, :]
                means.append(p @ x @ V.T)
            logs = np.array(logs)
            lw = np.where(w[:, None] > 0, np.log(np.where(w > 0, w, 1.0))[:, None] + logs, -np.inf)
            share = np.exp(lw - logsumexp(lw, axis=0))
            ref = np.einsum("hn,hnk->nk", share, np.array(means))
            row_logs = np.full((H, n), np.nan)
            got = velocity_fused(x, heads, beta=beta, kind="pooled", weights=masses, mask=mask, row_logs=row_logs)
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
            if mask == "none":  # every head's sums, the weight-0 head's too (the energy reads them)
                np.testing.assert_allclose(row_logs, logs, rtol=1e-13, atol=1e-13)
            else:
                assert np.isnan(row_logs).all()


def test_pooled_law_with_a_dominant_head_of_weight_0_and_weights_near_the_largest_float():
    # the shift is the largest row sum over the heads that weigh: a head of weight 0 far stronger than the others
    # (summed for row_logs) would have made every row 0/0; weights of 1e308 had summed to inf, rows of 0 (found in review)
    x = sample_uniform(100, 3, seed=8)
    strong = HeadStack(B=np.stack([10.0 * np.eye(3), -np.eye(3)]), V=np.stack([np.eye(3), 2.0 * np.eye(3)]), w=np.array([0.0, 1.0]))
    logs = np.full((2, 100), np.nan)
    _close(velocity_fused(x, strong, beta=100.0, kind="pooled", row_logs=logs), velocity_numpy(x, strong, beta=100.0, kind="pooled"))
    assert np.all(logs[0] - logs[1] > 709)  # the weight-0 head's sums beyond the floats' range of the other's
    rng = np.random.default_rng(1)
    heads = HeadStack(B=rng.standard_normal((2, 3, 3)), V=rng.standard_normal((2, 3, 3)), w=np.array([1e308, 1e308]))
    unit = HeadStack(B=heads.B, V=heads.V, w=np.ones(2))
    _close(velocity_fused(x, heads, beta=2.0, kind="pooled"), velocity_numpy(x, unit, beta=2.0, kind="pooled"))


def test_rejects_bad_input():
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    with pytest.raises(ValueError, match="shape"):
        velocity_fused(np.zeros((4, 2)), heads, beta=1.0)
    with pytest.raises(ValueError, match="weights"):
        velocity_fused(np.ones((4, 3)), heads, beta=1.0, weights=np.ones(3))


def test_pooled_law_through_auto_on_a_few_hundred_tokens():
    from meanfield.kernels import attention

    rng = np.random.default_rng(4)
    heads = HeadStack(B=rng.standard_normal((2, 3, 3)), V=rng.standard_normal((2, 3, 3)), w=np.array([0.3, 0.7]))
    x = sample_uniform(200, 3, seed=4)
    auto = attention.attention_velocity(x, heads, beta=8.0, kind="pooled")
    assert auto.tobytes() == velocity_fused(x, heads, beta=8.0, kind="pooled").tobytes()
    _close(auto, velocity_numpy(x, heads, beta=8.0, kind="pooled"))
    with pytest.raises(ValueError, match="every w is 0"):
        velocity_fused(x, HeadStack(B=heads.B, V=heads.V, w=np.zeros(2)), beta=8.0, kind="pooled")
    with pytest.raises(ValueError, match="the fused float64 kernel computes softmax and pooled, got kind='relu'"):
        velocity_fused(x, heads, beta=8.0, kind="relu")
    with pytest.raises(ValueError, match="backend 'fused' computes the softmax and pooled laws in float64"):
        attention.attention_velocity(x, heads, beta=8.0, kind="unnormalized", backend="fused")
