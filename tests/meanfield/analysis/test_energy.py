"""Tests for meanfield.analysis.energy: an independent NumPy energy, masses, threads, memory."""
from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest

from meanfield.analysis.energy import energy_multi, energy_theta, head_energies
from meanfield.errors import MeanfieldWarning
from meanfield.geometry.sphere import sample_uniform
from meanfield.heads import HeadStack


def _heads(rng: np.random.Generator, H: int, d: int, scale: float = 1.0) -> HeadStack:
    B = scale * rng.standard_normal((H, d, d)) / np.sqrt(d)
    return HeadStack(B=B, V=rng.standard_normal((H, d, d)), w=rng.uniform(0.5, 1.5, H))


def _numpy_energies(x: np.ndarray, B: np.ndarray, beta: float, a: np.ndarray) -> np.ndarray:
    """E_h = (1/2beta) sum_ij a_i a_j exp(beta x_i^T B_h x_j) from the full score matrix, shifted by its maximum."""
    out = []
    for Bh in B:
        S = x @ Bh @ x.T
        if beta == 0:
            out.append(0.5 * a @ S @ a)
            continue
        Z = beta * S
        top = Z.max()
        out.append(np.exp(top) * (a @ np.exp(Z - top) @ a) / (2 * beta))
    return np.array(out)


@pytest.mark.parametrize("beta", [0.0, 0.7, 4.0, -2.5, 300.0])
@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("masses", [False, True])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("flash", [False, True], ids=["row blocks", "flash tiles"])
def test_matches_numpy_energy(rng, beta, H, masses, symmetric, flash, monkeypatch):
    import meanfield.kernels.blas as blas_module

    monkeypatch.setattr(blas_module, "FLASH_CPU", True)  # the tiles' sums on any processor (the dispatch is tested apart)
    n, d = 300, 5
    x = sample_uniform(n, d, seed=int(rng.integers(1 << 30)))
    heads = _heads(rng, H, d)
    if symmetric:
        heads = HeadStack(B=0.5 * (heads.B + np.transpose(heads.B, (0, 2, 1))), V=heads.V, w=heads.w)
    a = rng.uniform(0.0, 2.0, n) if masses else None
    if masses:
        a[:7] = 0.0  # empty cells contribute nothing
    ref = _numpy_energies(x, heads.B, beta, np.full(n, 1.0 / n) if a is None else a)
    for threads in (1, 2):
        got = head_energies(x, heads, beta=beta, weights=a, threads=threads, flash=flash)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)
    assert np.all(np.isfinite(ref))
    np.testing.assert_allclose(energy_multi(x, heads, beta=beta, weights=a), ref.sum(), rtol=1e-12)
    np.testing.assert_allclose(energy_theta(x, heads, beta=beta, weights=a), heads.w @ ref, rtol=1e-12)


@pytest.mark.parametrize("flash", [False, True], ids=["row blocks", "flash tiles"])
def test_several_row_blocks_and_underflowing_shift(rng, flash, monkeypatch):
    """n larger than one block; a head with a loose Cauchy–Schwarz bound and large beta (the rows are redone)."""
    import meanfield.kernels.blas as blas_module

    monkeypatch.setattr(blas_module, "FLASH_CPU", True)
    n, d = 1500, 3
    x = rng.standard_normal((n, d)) * 0.1 + np.array([1.0, 0.0, 0.0])
    x /= np.linalg.norm(x, axis=1, keepdims=True)  # a cap around e_0, so |x_j1| <~ 0.4
    B = np.zeros((1, d, d))
    B[0, 0, 1] = 1.0  # s_ij = x_i0 x_j1 <~ 0.4 |x_i0|: c_i = beta |x_i0| overshoots the row maximum
    heads = HeadStack(B=B, V=np.eye(d)[None])
    for beta in (1.0, 2000.0):
        np.testing.assert_allclose(head_energies(x, heads, beta=beta, flash=flash), _numpy_energies(x, B, beta, np.full(n, 1 / n)),
                                   rtol=1e-12, atol=0)


def test_flash_row_sums_run_only_where_the_tiles_do(monkeypatch):
    """flash_row_sums: None (the caller's row blocks) without AVX-512, above FLASH_MAX_D64 or at β ≤ 0; otherwise the row sums."""
    import meanfield.kernels.blas as blas_module
    from meanfield.kernels.flash import FLASH_MAX_D64

    monkeypatch.setattr(blas_module, "FLASH_CPU", True)
    x = sample_uniform(100, 4, seed=2)
    heads = HeadStack(B=np.eye(4)[None], V=np.eye(4)[None])
    a = np.full(100, 0.01)
    sums = blas_module.flash_row_sums(x, heads, beta=2.0, weights=a)
    assert sums is not None and len(sums) == 1
    total, shift = sums[0]
    np.testing.assert_allclose(total * np.exp(shift), np.exp(2.0 * x @ x.T) @ a, rtol=1e-13)
    assert blas_module.flash_row_sums(x, heads, beta=0.0, weights=a) is None
    assert blas_module.flash_row_sums(x, heads, beta=-1.0, weights=a) is None
    wide = sample_uniform(10, FLASH_MAX_D64 + 1, seed=3)
    assert blas_module.flash_row_sums(wide, HeadStack(B=np.eye(FLASH_MAX_D64 + 1)[None], V=np.eye(FLASH_MAX_D64 + 1)[None]),
                                      beta=1.0, weights=np.full(10, 0.1)) is None
    monkeypatch.setattr(blas_module, "FLASH_CPU", False)
    assert blas_module.flash_row_sums(x, heads, beta=2.0, weights=a) is None


def test_no_n_by_n_array_at_large_n():
    n, d = 8192, 3
    x = sample_uniform(n, d, seed=1)
    heads = HeadStack(B=np.eye(d)[None], V=np.eye(d)[None])
    head_energies(x, heads, beta=4.0)  # warm the pool and its buffers
    tracemalloc.start()
    try:
        e = head_energies(x, heads, beta=4.0, threads=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < n * n * 8 / 16, f"peak {peak / 2**20:.1f} MiB against n^2 * 8 = {n * n * 8 / 2**20:.0f} MiB"
    # and it is the energy: a row-subsampled check of E = (1/2beta) sum_ij a_i a_j e^{beta s_ij}
    rows = np.arange(0, n, 64)
    part = np.exp(4.0 * x[rows] @ x.T).sum() / n**2 / 8.0 * (n / rows.size)
    assert abs(e[0] - part) < 0.05 * part


def test_energies_from_the_sphere_kernels_row_sums_equal_the_dense_pass():
    """On S² with more tokens than the dense limit, ``backend="auto"`` takes the harmonic/local row sums: same energies."""
    from meanfield.geometry.sphere import sample_uniform
    from meanfield.heads import HeadStack
    from meanfield.kernels.attention import SPHERE_DENSE_MAX_N

    rng = np.random.default_rng(4)
    n = 2 * SPHERE_DENSE_MAX_N
    x = sample_uniform(n, 3, seed=2)
    heads = HeadStack(B=rng.standard_normal((2, 3, 3)), V=np.eye(3)[None].repeat(2, 0))
    a = rng.uniform(0.5, 1.5, n)
    for beta in (1.0, 16.0, 128.0):
        dense = head_energies(x, heads, beta=beta, weights=a)
        for backend in ("auto", "harmonic", "local"):
            shared = head_energies(x, heads, beta=beta, weights=a, backend=backend, tolerance=1e-12)
            np.testing.assert_allclose(shared, dense, rtol=1e-11, atol=0)


def test_the_speed_tracker_shares_the_next_steps_first_evaluation():
    """One kernel call serves the frame's largest speed and the next RK4 step's first stage; the values are unchanged."""
    import meanfield as mf
    from meanfield.solvers.loop import run_loop, save_times

    problem = mf.Problem(mf.Model(d=3, beta=4.0), mf.sample_uniform(64, 3, seed=0))
    setup = mf.ParticleSolver(method="rk4", dt=0.05).setup(problem, energy=False)
    result = run_loop(setup.stepper, setup.state, save_times(0.0, 0.5, 0.1), trackers=setup.trackers, keep_states=True)
    steps = setup.stepper.stats["steps"]
    assert setup.stepper.stats["evaluations"] == 4 * steps + 1  # the frames' speeds cost nothing but the first
    for k, t in enumerate(result.t):
        x = result.states[k]
        speed = np.max(np.linalg.norm(problem.model.velocity(x, t), axis=1))
        np.testing.assert_allclose(result.diagnostics["max_speed"][k], speed, rtol=1e-14, atol=0)


def _numpy_log_energies(x: np.ndarray, B: np.ndarray, beta: float, a: np.ndarray) -> np.ndarray:
    """ln E_h = logsumexp_ij(ln a_i + ln a_j + beta s_ij) - ln(2 beta), from the full score matrix (scipy's logsumexp)."""
    from scipy.special import logsumexp

    with np.errstate(divide="ignore"):
        log_a = np.log(a)
    return np.array([logsumexp(log_a[:, None] + log_a[None, :] + beta * (x @ Bh @ x.T)) - np.log(2 * beta) for Bh in B])


@pytest.mark.parametrize("flash", [False, True], ids=["row blocks", "flash tiles"])
def test_log_energies_where_the_energies_overflow(rng, flash, monkeypatch):
    # at β = 1024 every E_h is inf (e^{β s} past the largest float); ln E_h is a number, from the same row sums
    import meanfield.kernels.blas as blas_module
    from meanfield.analysis.energy import head_log_energies

    monkeypatch.setattr(blas_module, "FLASH_CPU", True)
    n, d = 200, 4
    x = sample_uniform(n, d, seed=5)
    heads = _heads(rng, 2, d, scale=2.0)
    a = rng.uniform(0.0, 2.0, n)
    a[:5] = 0.0
    for beta in (0.7, 4.0, 1024.0):
        ref = _numpy_log_energies(x, heads.B, beta, a)
        got = head_log_energies(x, heads, beta=beta, weights=a, flash=flash)
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=0)
        with np.errstate(over="ignore"), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "the energy of head", MeanfieldWarning)  # (β = 1024: inf, said)
            energies = head_energies(x, heads, beta=beta, weights=a, flash=flash)
        if beta < 100:
            np.testing.assert_allclose(np.log(energies), got, rtol=1e-13)
        else:
            assert np.all(np.isposinf(energies))
    with pytest.raises(ValueError, match="beta > 0"):
        head_log_energies(x, heads, beta=-1.0)
    from meanfield.analysis.energy import energy_row_logs, log_energies_from_row_logs

    with pytest.raises(ValueError, match="beta > 0"):  # (it had given nan)
        log_energies_from_row_logs(energy_row_logs(x, heads, beta=-2.0), beta=-2.0)


def test_log_energies_from_the_sphere_kernels_row_sums():
    from meanfield.analysis.energy import head_log_energies
    from meanfield.kernels.attention import SPHERE_DENSE_MAX_N

    rng = np.random.default_rng(6)
    n = 2 * SPHERE_DENSE_MAX_N
    x = sample_uniform(n, 3, seed=3)
    heads = HeadStack(B=np.stack([np.eye(3), rng.standard_normal((3, 3))]), V=np.eye(3)[None].repeat(2, 0))
    a = rng.uniform(0.5, 1.5, n)
    ref = _numpy_log_energies(x, heads.B, 1024.0, a)
    for backend in ("harmonic", "local"):
        np.testing.assert_allclose(head_log_energies(x, heads, beta=1024.0, weights=a, backend=backend, tolerance=1e-12),
                                   ref, rtol=1e-13, atol=0)


def test_the_energy_tracker_records_the_log_energy_and_the_summary_shows_it_where_the_energy_overflows():
    import meanfield as mf

    cool = mf.simulate({"model": {"beta": 4.0}, "init": {"n": 40}, "solver": {"t_final": 0.1, "save_every": 0.05}})
    np.testing.assert_allclose(cool.diagnostics["log_energy"], np.log(cool.diagnostics["energy"]), rtol=1e-14)
    assert "log_energy" not in cool.summary()
    cold = mf.simulate({"model": {"beta": 1024.0}, "init": {"n": 40}, "solver": {"t_final": 0.1, "save_every": 0.05}})
    assert np.all(np.isposinf(cold.diagnostics["energy"]))
    for k in range(cold.frames):
        x = cold.frame(k)
        ref = _numpy_log_energies(x, np.eye(3)[None], 1024.0, np.full(40, 1 / 40))[0]
        np.testing.assert_allclose(cold.diagnostics["log_energy"][k], ref, rtol=1e-13)
    assert np.all(np.diff(cold.diagnostics["log_energy"]) >= 0)  # ascent: the energy grows
    assert "log_energy:" in cold.summary()
    mean = mf.simulate({"model": {"beta": 2.0, "num_heads": 3, "combine": "mean"}, "init": {"n": 30},
                        "solver": {"t_final": 0.05, "save_every": 0.05}})
    np.testing.assert_allclose(mean.diagnostics["log_energy"], np.log(mean.diagnostics["energy"]), rtol=1e-14)


@pytest.mark.parametrize("name", ["head_energies", "head_log_energies", "energy_row_logs"])
def test_the_masses_are_checked_once_per_call(name, monkeypatch):
    # (head_energies and head_log_energies had checked them in their own entry and again in energy_row_logs: a pass)
    import meanfield.analysis.energy as energy_module

    calls = []
    real = energy_module.token_masses
    monkeypatch.setattr(energy_module, "token_masses", lambda *args, **kw: calls.append(1) or real(*args, **kw))
    x = np.eye(3)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    getattr(energy_module, name)(x, heads, beta=2.0, weights=np.array([0.2, 0.3, 0.5]))
    assert len(calls) == 1


def test_an_energy_past_the_largest_float_warns_and_names_the_log_energies():
    # E ~ e^β / 2β is inf from β ≈ 716 (B = I): it had come without a word
    from meanfield.analysis.energy import head_energies, head_log_energies
    from meanfield.errors import MeanfieldWarning
    from meanfield.geometry.sphere import sample_uniform
    from meanfield.heads import HeadStack

    x = sample_uniform(40, 3, seed=0)
    heads = HeadStack(B=np.stack([np.eye(3), 0.5 * np.eye(3)]), V=np.stack([np.eye(3), np.eye(3)]))
    with pytest.warns(MeanfieldWarning, match=r"head\(s\) \[0\] exceeds the largest float at beta = 1024 \(inf\); head_log_energies"):
        energies = head_energies(x, heads, beta=1024.0)
    assert np.isinf(energies[0]) and np.isfinite(energies[1])
    np.testing.assert_allclose(np.log(energies[1]), head_log_energies(x, heads, beta=1024.0)[1], rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.all(np.isfinite(head_energies(x, heads, beta=700.0)))  # in range: no warning


def test_a_large_negative_beta_on_the_row_blocks(rng):
    # β = −400 (the energy's continuation to negative β, on the row blocks: flash=False): their shift must be
    # |β|·|B x_i|·max|x_j|, the largest of the row's scores; β·(...) is the smallest, and e^{βs − shift} overflowed to a
    # NaN energy (mut3 E7)
    x = sample_uniform(50, 3, seed=int(rng.integers(1 << 30)))
    B = np.eye(3)[None]
    heads = HeadStack(B=B, V=np.eye(3)[None])
    for beta in (-2.0, -400.0):
        ref = _numpy_energies(x, B, beta, np.full(50, 1 / 50))
        assert np.all(np.isfinite(ref))
        np.testing.assert_allclose(head_energies(x, heads, beta=beta, flash=False), ref, rtol=1e-12, atol=0)
