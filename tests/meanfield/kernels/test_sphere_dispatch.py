"""``backend="auto"`` on S²: the harmonic and local kernels where they win, the dense ones elsewhere."""
from __future__ import annotations

import numpy as np
import pytest

import meanfield as mf
from meanfield.kernels.flash import FLASH_CPU
from meanfield.config import load_config
from meanfield.build import build_model
from meanfield.geometry.sphere import sample_uniform
from meanfield.heads import HeadStack
from meanfield.kernels import attention as attention_module
from meanfield.kernels.attention import SPHERE_DENSE_MAX_N, attention_velocity, velocity_numpy


@pytest.fixture
def calls(monkeypatch):
    """Which backend each call of ``attention_velocity`` ends in."""
    seen = _Calls()
    seen_options: list[dict] = []
    for name, kernel in list(attention_module.BACKENDS.items()):
        def spy(*args, _name=name, _kernel=kernel, **kwargs):
            seen.append(_name)
            seen_options.append(kwargs)
            return _kernel(*args, **kwargs)
        monkeypatch.setitem(attention_module.BACKENDS, name, spy)
    seen.options = seen_options  # type: ignore[attr-defined]
    return seen


class _Calls(list):
    """Backend names, with the keyword options of each call in ``options``."""


def general_head(seed: int) -> HeadStack:
    rng = np.random.default_rng(seed)
    return HeadStack(B=(np.eye(3) + 0.3 * rng.standard_normal((3, 3)))[None], V=rng.standard_normal((3, 3))[None])


@pytest.mark.parametrize("kind", ["softmax", "unnormalized", "pooled"])
def test_auto_takes_the_harmonic_kernel_on_many_tokens_and_agrees_with_numpy(calls, kind):
    x = sample_uniform(8192, 3, seed=3)
    heads = general_head(1)
    a = np.random.default_rng(2).random(8192)
    got = attention_velocity(x, heads, beta=16.0, kind=kind, weights=a)
    assert calls == ["harmonic"]
    ref = velocity_numpy(x, heads, beta=16.0, kind=kind, weights=a)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def test_auto_keeps_dense_kernels_for_few_tokens_other_dimensions_and_relu(calls):
    heads = general_head(2)
    attention_velocity(sample_uniform(SPHERE_DENSE_MAX_N, 3, seed=1), heads, beta=4.0)
    attention_velocity(sample_uniform(4096, 4, seed=1), HeadStack(B=np.eye(4)[None], V=np.eye(4)[None]), beta=4.0)
    attention_velocity(sample_uniform(4096, 3, seed=1), heads, beta=4.0, kind="relu")
    attention_velocity(1.01 * sample_uniform(4096, 3, seed=1), heads, beta=4.0)  # off the sphere
    dense = "blas" if FLASH_CPU else "fused"  # the dense kernel at small d: the flash tiles on AVX-512 from 512² pairs
    assert calls == [dense, dense, "blas", dense]


def test_auto_takes_the_local_kernel_for_small_caps(calls):
    x = sample_uniform(4096, 3, seed=4)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    got = attention_velocity(x, heads, beta=1024.0)
    assert calls == ["local"]
    np.testing.assert_allclose(got, velocity_numpy(x, heads, beta=1024.0), rtol=0, atol=1e-11)


def test_tolerance_reaches_the_kernel_from_the_config(calls):
    cfg = load_config({"model": {"backend": "harmonic", "tolerance": 1e-6, "beta": 64.0}})
    model = build_model(cfg)
    assert model.tolerance == 1e-6 and model.backend == "harmonic"
    x = sample_uniform(3000, 3, seed=5)
    loose = model.velocity(x, 0.0)
    assert calls == ["harmonic"] and calls.options[0]["tolerance"] == 1e-6
    exact = mf.Model(d=3, beta=64.0, backend="numpy").velocity(x, 0.0)
    assert np.abs(loose - exact).max() / np.abs(exact).max() <= 1e-6


def test_harmonic_run_matches_a_dense_run():
    """A particle run with the harmonic kernel follows the dense one to the kernel's tolerance."""
    common = {"model": {"beta": 16.0}, "init": {"kind": "fibonacci", "n": 1500}, "solver": {"t_final": 1.0, "dt": 0.05, "save_every": 1.0}}
    fast = mf.simulate({**common, "model": {"beta": 16.0, "backend": "harmonic"}})
    dense = mf.simulate({**common, "model": {"beta": 16.0, "backend": "fused"}})
    np.testing.assert_allclose(fast.x[-1], dense.x[-1], rtol=0, atol=1e-10)


def test_auto_weighs_the_sphere_kernels_at_the_tolerance_asked_for(monkeypatch):
    # the choice had taken their cost at 1e-12 whatever model.tolerance asked
    from meanfield.kernels import attention
    from meanfield.kernels.harmonic import choose_sphere_method

    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    assert choose_sphere_method(2048, 128.0, heads) == "dense"
    assert choose_sphere_method(2048, 128.0, heads, tolerance=1e-4) == "harmonic"
    seen = []
    monkeypatch.setattr(attention, "choose_sphere_method", lambda *a, **kw: seen.append(kw["tolerance"]) or "dense")
    attention.attention_velocity(sample_uniform(2048, 3, seed=0), heads, beta=128.0, tolerance=1e-4)
    assert seen == [1e-4]


def test_the_sphere_choice_prices_the_dense_kernel_that_would_run(monkeypatch):
    # the dense cost model is the fused kernel's, but pooled and unnormalized run the BLAS kernel in float64 (1.7-2x
    # slower at d = 3 without its flash tiles): pooled at n = 8192, β = 16 went dense at 2x the local kernel's time
    # (found in review).  The choice logic only, no timing
    from meanfield.kernels.harmonic import choose_sphere_method, estimate_sphere_seconds

    attention = attention_module
    gen = np.random.default_rng(1)
    heads = HeadStack(B=gen.standard_normal((1, 3, 3)), V=gen.standard_normal((1, 3, 3)))
    n, beta = 8192, 16.0
    blas = 1.0 / attention.BLAS_SPHERE_SLOWDOWN
    for flash in (False, True):
        monkeypatch.setattr(attention, "FLASH_CPU", flash)

        def speed(kind, precision="float64", mask="none"):
            return attention._dense_sphere_speedup(heads, kind, precision, n=n, mask=mask)

        for kind in ("pooled", "unnormalized"):
            assert speed(kind) == (1.0 if flash else blas)  # the flash tiles are priced as the fused kernel
            assert speed(kind, mask="causal") == blas
            assert speed(kind, "float32") == attention.FUSED32_SPEEDUP
        assert speed("softmax") == speed("softmax", mask="causal") == 1.0
    monkeypatch.setattr(attention, "FLASH_CPU", False)
    seen = []
    real = attention.choose_sphere_method
    monkeypatch.setattr(attention, "choose_sphere_method", lambda *a, **kw: seen.append(kw["dense_speedup"]) or real(*a, **kw))
    x = sample_uniform(n, 3, seed=2)
    picked = attention._sphere_backend(x, heads, beta, "pooled", "float64")
    assert seen == [blas]
    est = estimate_sphere_seconds(n, beta, heads)
    assert min(est, key=est.get) == "dense" and est["dense"] / blas > est["local"]  # fused-priced dense had won
    assert picked == choose_sphere_method(n, beta, heads, dense_speedup=blas) == "local"
    assert attention._sphere_backend(x, heads, beta, "softmax", "float64") == "dense"  # softmax runs the fused kernel
