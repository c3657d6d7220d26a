"""Noisy tokens: dx = P⊥v dt + √(2/γ) P⊥dW on the sphere and its grid twin (1/γ)Δ_S μ.

References the code did not compute: the uniform law on S^{d-1} (its ⟨x, e⟩ law is Beta((d-1)/2, (d-1)/2)
on (u+1)/2, a scipy distribution), the heat-kernel decay e^{-(d-1)t/γ} of the degree-1 harmonic, the
measured weak order of the Euler–Maruyama step, the measured order of the grid's decay rate under
refinement, mass and positivity invariants, and exit status 2 of the CLI.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

import meanfield as mf
from meanfield.cli import main
from meanfield.config import ConfigNote, load_config
from meanfield.errors import ConfigError
from meanfield.geometry.mesh import fibonacci_mesh, initial_mass
from meanfield.noise import NoiseSchedule, em_mean_factor, geometric_em_step, interval_generator
from meanfield.solvers.grid import GridStepper
from meanfield.solvers.loop import StopRun
from meanfield.solvers.noise import LaplaceBeltrami, NoisyParticleStepper
from meanfield.solvers.particle import ParticleStepper


class ZeroField:
    """A model without drift (noise alone): independent tokens at O(n d) cost."""

    backend = "blas"

    def __init__(self, d: int) -> None:
        self.d = d

    def velocity(self, x: np.ndarray, t: float, *, weights: np.ndarray | None = None) -> np.ndarray:
        return np.zeros_like(x)


def _pure_noise(n: int, d: int, *, gamma: float, dt: float, t1: float, seed: int = 0, t0: float = 0.0) -> np.ndarray:
    """n independent tokens started at e_d, moved by the noise alone from t0 to t1."""
    x0 = np.zeros((n, d))
    x0[:, -1] = 1.0
    stepper = NoisyParticleStepper(ParticleStepper(ZeroField(d), method="euler", dt=dt), NoiseSchedule(gamma=gamma, seed=seed))
    return stepper.advance(x0, t0, t1)


def _uniform_cdf(d: int):
    """CDF of u = ⟨x, e⟩ for x uniform on S^{d-1}: (u+1)/2 ~ Beta((d-1)/2, (d-1)/2)."""
    law = stats.beta((d - 1) / 2, (d - 1) / 2)
    return lambda u: law.cdf((np.asarray(u) + 1.0) / 2.0)


#: the 0.1 % critical value of the Kolmogorov distribution: √n D_n > 1.95 with probability 1e-3
KS_CRITICAL = 1.95


@pytest.mark.parametrize("d", [3, 5])
def test_noise_alone_tends_to_the_uniform_law(d):
    """The step's kernel is rotation invariant, so its invariant law is uniform at any step: dt = 0.05 suffices."""
    n, gamma = 20000, 1.0
    t_final = 8.0 * gamma / (d - 1)  # the degree-1 mode is down to e^{-8}, higher ones further
    x = _pure_noise(n, d, gamma=gamma, dt=0.05, t1=t_final, seed=3)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=0, atol=1e-14)
    # mean → 0 and E[x xᵀ] → I/d, within 5 standard errors of n samples of the uniform law
    np.testing.assert_allclose(x.mean(axis=0), 0.0, rtol=0, atol=5.0 / math.sqrt(d * n) + math.exp(-8.0))
    second = x.T @ x / n
    np.testing.assert_allclose(second, np.eye(d) / d, rtol=0, atol=5.0 * math.sqrt(2.0 / (d * (d + 2))) / math.sqrt(n))
    # Kolmogorov–Smirnov of ⟨x, e⟩ against the uniform law's CDF
    cdf = _uniform_cdf(d)
    assert stats.kstest(x[:, -1], cdf).statistic * math.sqrt(n) < KS_CRITICAL
    assert stats.kstest(x[:, 0], cdf).statistic * math.sqrt(n) < KS_CRITICAL
    # the test has power: early on, the law is still far from uniform
    early = _pure_noise(n, d, gamma=gamma, dt=0.05, t1=0.25 * gamma / (d - 1), seed=3)
    assert stats.kstest(early[:, -1], cdf).statistic * math.sqrt(n) > 10 * KS_CRITICAL


@pytest.mark.parametrize("d", [3, 6])
def test_degree_one_harmonic_decays_at_rate_d_minus_one_over_gamma(d):
    n, gamma, dt = 20000, 2.0, 0.005
    rate = (d - 1) / gamma
    t_star = 1.0 / rate  # one e-fold: the rate's relative error is smallest there
    u = _pure_noise(n, d, gamma=gamma, dt=dt, t1=t_star, seed=11)[:, -1]
    mean, sem = float(u.mean()), float(u.std(ddof=1) / math.sqrt(n))
    # the scheme's own mean, c(h)^K, exactly
    steps = math.ceil(t_star / dt - 1e-9)
    discrete = em_mean_factor(t_star / steps, gamma, d) ** steps
    np.testing.assert_allclose(mean, discrete, rtol=0, atol=4 * sem)
    # the continuum: fitted rate within 4 standard errors plus the O(h) bias of the scheme
    fitted = -math.log(mean) / t_star
    fitted_se = sem / (mean * t_star)
    bias = abs(-math.log(discrete) / t_star - rate)
    assert bias < 0.02 * rate
    np.testing.assert_allclose(fitted, rate, rtol=0, atol=4 * fitted_se + bias)


@pytest.mark.parametrize(("h", "gamma", "d"), [(0.1, 1.0, 3), (0.0215, 1.0, 4), (0.01, 1.0, 15), (0.3, 1.0, 64), (0.3, 1.0, 65), (1e-4, 1.0, 256),
                                              (0.01, 1.0, 768), (0.05, 1.0, 768), (1.0, 1.0, 200), (1e-3, 1.0, 5000)])
def test_the_one_step_factor_against_a_sum_over_the_chi_square_law_at_any_d(h, gamma, d):
    # d = 256 had raised OverflowError, d = 768 given 1e-17 for 0.1136: the quadrature had missed the χ² peak at k = d − 1
    k, s2 = d - 1, 2.0 * h / gamma
    law = stats.chi2(k)
    # in u = √q, where the law's density 2u·pdf(u²) ∝ u^(k−1) e^(−u²/2) is smooth at 0 for every k (in q its root
    # singularity had made Simpson's rule the less accurate side at small k)
    u = np.linspace(0.0, np.sqrt(law.isf(1e-17)), 400_001)
    density = 2.0 * u * np.exp(law.logpdf(np.maximum(u, 1e-300) ** 2))
    reference = integrate.simpson(density / np.sqrt(1.0 + s2 * u**2), x=u) / integrate.simpson(density, x=u)
    rtol = 1e-10
    np.testing.assert_allclose(em_mean_factor(h, gamma, d), reference, rtol=rtol)


def test_the_one_step_factor_of_no_step_is_one_and_bad_arguments_are_named():
    assert em_mean_factor(0.0, 1.0, 3) == 1.0  # had divided by zero
    for args, name in (((-0.1, 1.0, 3), "h"), ((0.1, 0.0, 3), "gamma"), ((0.1, 1.0, 1), "d"), ((math.nan, 1.0, 3), "h")):
        with pytest.raises(ValueError, match=f"^{name} must be"):
            em_mean_factor(*args)


def test_euler_maruyama_is_weak_order_one():
    """E⟨x_T, e⟩ − e^{-(d-1)T/γ} against h: measured slope ≈ 1 (global), and ≈ 2 for one step (local).

    At these h the error is still pre-asymptotic (the exact scheme's slopes are 0.83 and 0.90 over
    h = 0.05 … 0.0125, and 1.76 … 1.86 locally): the bounds allow for that, not for order 1/2 or 2.
    """
    d, gamma, t_final = 3, 1.0, 0.5
    exact = math.exp(-(d - 1) * t_final / gamma)
    steps = np.array([0.05, 0.025, 0.0125])
    n = 50000
    errors = []
    for k, h in enumerate(steps):
        u = _pure_noise(n, d, gamma=gamma, dt=h, t1=t_final, seed=100 + k)[:, -1]
        sem = u.std(ddof=1) / math.sqrt(n)
        errors.append(u.mean() - exact)
        assert errors[-1] > 6 * sem  # the bias is resolved above the statistical error
        np.testing.assert_allclose(u.mean(), em_mean_factor(h, gamma, d) ** round(t_final / h), rtol=0, atol=4 * sem)
    slope = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert 0.75 <= slope <= 1.15, slope
    # one step from e: the local error is O(h²), n = 10⁶ tokens
    n, local = 1_000_000, []
    for k, h in enumerate((0.02, 0.01, 0.005)):
        u = _pure_noise(n, d, gamma=gamma, dt=h, t1=h, seed=200 + k)[:, -1]
        local.append(u.mean() - math.exp(-(d - 1) * h / gamma))
        assert local[-1] > 6 * u.std(ddof=1) / math.sqrt(n)
    slope = np.polyfit(np.log([0.02, 0.01, 0.005]), np.log(local), 1)[0]
    assert 1.7 <= slope <= 2.2, slope


def test_step_is_on_the_sphere_and_the_stream_depends_on_seed_and_interval_start():
    rng = np.random.default_rng(0)
    x = mf.sample_uniform(50, 4, seed=1)
    y = geometric_em_step(x, np.zeros_like(x), 0.1, 0.5, rng.standard_normal(x.shape))
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), 1.0, rtol=0, atol=1e-15)
    a = interval_generator(3, 0.25).standard_normal(5)
    np.testing.assert_array_equal(a, interval_generator(3, 0.25).standard_normal(5))
    assert not np.array_equal(a, interval_generator(3, 0.5).standard_normal(5))
    assert not np.array_equal(a, interval_generator(4, 0.25).standard_normal(5))


def test_the_noise_stream_is_none_of_the_other_seeded_draws_and_the_first_step_diffuses():
    # interval_generator(s, 0.0) had been default_rng([s, 0]) = default_rng(s): the stream of the initial tokens
    # (and of model.seed's random heads, and the weights' first noise block), so with the default seeds the
    # first Brownian draw of every token was the very Gaussian that made it, radial, and the first step did not move
    for seed in (0, 7):
        noise = interval_generator(seed, 0.0).standard_normal(12)
        for other in (np.random.default_rng(seed), np.random.default_rng([seed, 0])):
            assert not np.allclose(noise, other.standard_normal(12))
    cfg = {"model": {"d": 3, "heads": [{"Q": "identity", "K": "identity", "V": [[0.0] * 3] * 3}]},
           "init": {"kind": "uniform", "n": 20}, "noise": {"gamma": 1.0},
           "solver": {"method": "euler", "dt": 0.1, "save_every": 0.1, "t_final": 0.1}}
    run = mf.simulate(cfg, **{"track.energy": False})
    moved = np.arccos(np.clip(np.sum(run.x[0] * run.x[1], axis=1), -1.0, 1.0))
    # each token moves by the tangent part of √(2h/γ) ξ: about √(2·0.1·2)·(its law) ≈ 0.6; had been 1e-16
    assert moved.min() > 1e-3 and 0.3 < moved.mean() < 1.0


# ----------------------------------------------------------------------------- annealing


def test_annealing_schedules_follow_their_formulas():
    lin = NoiseSchedule(gamma=1.0, anneal="linear", gamma_final=3.0, duration=2.0)
    np.testing.assert_allclose([lin.gamma_at(t) for t in (0.0, 1.0, 2.0, 9.0)], [1.0, 2.0, 3.0, 3.0], rtol=1e-15)
    exp_ = NoiseSchedule(gamma=1.0, anneal="exponential", gamma_final=5.0, anneal_rate=0.5)
    np.testing.assert_allclose(exp_.gamma_at(2.0), 5.0 - 4.0 * math.exp(-1.0), rtol=1e-15)
    log_ = NoiseSchedule(gamma=2.0, anneal="logarithmic", anneal_rate=3.0)
    np.testing.assert_allclose(log_.gamma_at(1.0), 2.0 * math.log(math.e + 3.0), rtol=1e-15)
    expr = NoiseSchedule(gamma=2.0, anneal="expression", anneal_expr="gamma*(1 + t**2)", t_check=4.0)
    np.testing.assert_allclose(expr.gamma_at(3.0), 20.0, rtol=1e-15)
    np.testing.assert_allclose(expr.diffusivity(3.0), 0.05, rtol=1e-15)


def test_a_schedule_takes_numpy_numbers_but_not_bools():
    # γ from a NumPy sweep array had been refused ("noise.gamma: expected a number, got np.int64(2)"), a NumPy seed taken
    for gamma in (np.int64(2), np.float32(2.0), np.float64(2.0)):
        s = NoiseSchedule(gamma=gamma, anneal="linear", gamma_final=np.int64(3), duration=np.float32(1.0), seed=np.int64(5))
        assert type(s.gamma) is float and type(s.gamma_final) is float and type(s.duration) is float
        assert (s.gamma, s.gamma_at(0.5), s.gamma_at(2.0)) == (2.0, 2.5, 3.0)
    for key in ("gamma", "anneal_rate"):
        with pytest.raises(ConfigError, match=f"^noise.{key}: expected a number, got"):
            NoiseSchedule(**{"gamma": 2.0, "anneal": "logarithmic", "anneal_rate": 1.0, key: np.bool_(True)})


def test_the_expression_error_shows_plain_numbers():
    # it had read "it is np.float64(0.0) at t = 1"
    with pytest.raises(ConfigError, match=r"^noise.anneal_expr: .* it is 0.0 at t = 1$"):
        NoiseSchedule(gamma=2.0, anneal="expression", anneal_expr="gamma*(1-t)")
    with pytest.raises(ConfigError, match=r"it is inf at t = 1$"):
        NoiseSchedule(gamma=2.0, anneal="expression", anneal_expr="gamma/(1-t)")


def test_annealed_noise_follows_the_time_changed_heat_kernel():
    """γ(t) = γ₀(1 + t): E⟨x_t, e⟩ = exp(−(d−1)∫₀ᵗ ds/γ(s)) = (1 + t)^{−(d−1)/γ₀}."""
    n, d, g0, t_final, dt = 20000, 3, 1.0, 1.0, 0.01
    x0 = np.zeros((n, d))
    x0[:, -1] = 1.0
    schedule = NoiseSchedule(gamma=g0, seed=5, anneal="expression", anneal_expr="gamma*(1 + t)", t_check=t_final)
    u = NoisyParticleStepper(ParticleStepper(ZeroField(d), method="euler", dt=dt), schedule).advance(x0, 0.0, t_final)[:, -1]
    sem = u.std(ddof=1) / math.sqrt(n)
    # the scheme: Π_k c(h, γ(t_k)) exactly (left-point γ); the diffusion: the closed form, up to the O(h) bias
    discrete = math.prod(em_mean_factor(dt, schedule.gamma_at(k * dt), d) for k in range(round(t_final / dt)))
    np.testing.assert_allclose(u.mean(), discrete, rtol=0, atol=4 * sem)
    expected = (1.0 + t_final) ** (-(d - 1) / g0)
    np.testing.assert_allclose(u.mean(), expected, rtol=0, atol=4 * sem + abs(discrete - expected))
    assert abs(discrete - expected) < 0.05 * expected


# ----------------------------------------------------------------------------- end to end: config, resume, CLI


def _noisy_config(**solver) -> dict:
    return {
        "model": {"beta": 1.0, "heads": [{"Q": "identity", "K": "identity", "V": "aligned"}]},
        "init": {"n": 60, "seed": 2},
        "solver": {"dt": 0.01, "t_final": 1.0, "save_every": 0.25, **solver},
        "noise": {"gamma": 4.0, "seed": 9},
        "track": {"energy": False},
    }


def test_a_noisy_run_is_reproducible_and_a_resumed_run_equals_the_uninterrupted_one(tmp_path):
    with pytest.warns(ConfigNote, match="Euler–Maruyama"):
        cfg = load_config(_noisy_config())
    assert cfg["solver"]["method"] == "euler"
    whole = mf.simulate(cfg, out=tmp_path / "whole.h5")
    again = mf.simulate(cfg)
    np.testing.assert_array_equal(np.asarray(whole.x), np.asarray(again.x))  # bit for bit

    def stop_at_half(t, x):
        if t >= 0.5:
            raise StopRun("stopped for the test")

    part = tmp_path / "part.h5"
    first = mf.simulate(cfg, out=part, trackers=[stop_at_half])
    assert first.frames == 3 and first.status == "stopped"
    resumed = mf.simulate(cfg, out=part, resume=True)
    np.testing.assert_array_equal(resumed.t, whole.t)
    np.testing.assert_array_equal(np.asarray(resumed.x), np.asarray(whole.x))  # bit for bit
    # another seed gives another path; without [noise] the run is deterministic RK4 as before
    other = mf.simulate(cfg, **{"noise.seed": 10})
    assert not np.array_equal(np.asarray(other.x)[-1], np.asarray(whole.x)[-1])
    plain_cfg = _noisy_config()
    del plain_cfg["noise"]
    plain = load_config(plain_cfg)
    assert plain["solver"]["method"] == "rk4" and plain["noise"]["gamma"] is None
    reference = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), mf.sample_uniform(60, 3, seed=2)),
                         mf.ParticleSolver(method="rk4", dt=0.01), t_final=1.0, save_every=0.25)
    np.testing.assert_array_equal(np.asarray(mf.simulate(plain).x), np.asarray(reference.x))


def test_resuming_with_noise_dropped_or_added_names_the_noise_section(tmp_path, capsys):
    # a noisy run resumed from its config without [noise] had been refused for solver.method ('euler' there, 'rk4' now),
    # the Euler–Maruyama default of the noise; noise.gamma had come only after --set solver.method=euler
    plain = tmp_path / "plain.toml"
    plain.write_text("[init]\nn = 8\n[solver]\nt_final = 0.1\nsave_every = 0.05\n")
    noisy = tmp_path / "noisy.toml"
    noisy.write_text(plain.read_text() + "[noise]\ngamma = 4.0\nseed = 7\n")
    cases = [(noisy, plain, "noise.gamma: the run in {} is noisy (gamma = 4.0 there) and this config has no [noise] section; "
                            "cannot resume with another config (other keys differ too: solver.method)"),
             (plain, noisy, "noise.gamma: the run in {} has no noise and this config adds a [noise] section (gamma = 4.0); "
                            "cannot resume with another config (other keys differ too: solver.method)")]
    for first, then, message in cases:
        out = tmp_path / f"{first.stem}.h5"
        assert main(["simulate", str(first), "-o", str(out), "--quiet"]) == 0
        before = out.read_bytes()
        capsys.readouterr()
        assert main(["simulate", str(then), "-o", str(out), "--quiet", "--resume", "--set", "solver.t_final=0.2"]) == 2
        assert message.format(out) in capsys.readouterr().err
        assert out.read_bytes() == before
    out = tmp_path / "noisy.h5"  # another key of [noise] is named as before, and the others listed after it
    assert main(["simulate", str(noisy), "-o", str(out), "--quiet", "--resume", "--set", "noise.seed=3", "--set", "model.beta=2"]) == 2
    assert ("noise.seed: differs from the run in {} (7 there, 3 now); cannot resume with another config (other keys differ too: "
            "model.beta)").format(out) in capsys.readouterr().err


def test_the_stationary_law_of_tokens_without_drift_is_uniform_through_the_config():
    """V = 0: the configured particle solver moves independent tokens by the noise alone."""
    cfg = load_config({"model": {"heads": [{"Q": "identity", "K": "identity", "V": 0.0}]},
                       "init": {"kind": "vmf", "kappa": 1e6, "mean": [0.0, 0.0, 1.0], "n": 1500},
                       "solver": {"method": "euler", "dt": 0.05, "t_final": 4.0, "save_every": 2.0},
                       "noise": {"gamma": 1.0, "seed": 4}, "track": {"energy": False}})
    x = np.asarray(mf.simulate(cfg).x)[-1]
    assert stats.kstest(x[:, 2], _uniform_cdf(3)).statistic * math.sqrt(len(x)) < KS_CRITICAL


BAD = [
    ({"noise": {"gamma": 0.0}}, "noise.gamma"),
    ({"noise": {"gamma": -1.0}}, "noise.gamma"),
    ({"noise": {"gamma": float("inf")}}, "noise.gamma"),
    ({"noise": {"gamma": "big"}}, "noise.gamma"),
    ({"noise": {"anneal": "linear", "gamma_final": 2.0, "duration": 1.0}}, "noise.gamma"),
    ({"noise": {"gamma": 1.0, "anneal": "cosine"}}, "noise.anneal"),
    ({"noise": {"gamma": 1.0, "anneal": "linear", "duration": 1.0}}, "noise.gamma_final"),
    ({"noise": {"gamma": 1.0, "anneal": "linear", "gamma_final": 2.0}}, "noise.duration"),
    ({"noise": {"gamma": 1.0, "anneal": "exponential", "gamma_final": 0.0, "anneal_rate": 1.0}}, "noise.gamma_final"),
    ({"noise": {"gamma": 1.0, "gamma_final": 2.0}}, "noise.gamma_final"),
    ({"noise": {"gamma": 1.0, "anneal": "expression", "anneal_expr": "gamma - t"}}, "noise.anneal_expr"),
    ({"noise": {"gamma": 1.0, "anneal": "expression", "anneal_expr": "gamma + __import__('os')"}}, "noise.anneal_expr"),
    # negative between the points of an even grid of 1001 times of [0, 2000] (all even integers): had passed the check
    ({"noise": {"gamma": 1.0, "anneal": "expression", "anneal_expr": "gamma*cos(pi*t)"}, "solver": {"t_final": 2000.0}},
     "noise.anneal_expr"),
    ({"noise": {"gamma": 1.0, "seed": -3}}, "noise.seed"),
    ({"noise": {"gamma": 1.0, "temperature": 2.0}}, "noise.temperature"),
    ({"noise": {"gamma": 1.0}, "solver": {"method": "rk4"}}, "solver.method"),
    ({"noise": {"gamma": 1.0}, "solver": {"kind": "jko"}, "model": {"attention": "pooled"}}, "noise.gamma"),
    ({"noise": {"gamma": 1.0}, "solver": {"kind": "zero-temperature"}}, "noise.gamma"),
    # the steady test looks at the drift alone: a run with all its tokens at one point had stopped at t = 0 as "steady"
    ({"noise": {"gamma": 1.0}, "solver": {"steady_tol": 1e-3}}, "solver.steady_tol"),
    ({"noise": {"gamma": 1.0}, "solver": {"kind": "grid", "steady_tol": 1e-6}}, "solver.steady_tol"),
]


@pytest.mark.parametrize("raw, key", BAD, ids=[f"{k}-{i}" for i, (_, k) in enumerate(BAD)])
def test_bad_noise_input_is_a_config_error_naming_the_key(raw, key):
    raw = {**raw, "solver": {"t_final": 10.0, **raw.get("solver", {})}}
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    assert key in str(info.value)


def test_the_solvers_name_a_noise_option_that_is_not_a_schedule():
    # ParticleSolver(noise=2.0) had failed deep in the run with AttributeError: 'float' object has no attribute 'seed'
    for make in (lambda noise: mf.ParticleSolver(method="euler", noise=noise), lambda noise: mf.GridSolver(noise=noise)):
        for noise in (2.0, {"gamma": 2.0}):
            with pytest.raises(TypeError, match=r"^noise must be a NoiseSchedule, e.g. noise=NoiseSchedule\(gamma=2.0\)"):
                make(noise)
    with pytest.raises(ValueError, match="method must be 'euler', got 'rk4'"):  # at once, not when the run starts
        mf.ParticleSolver(method="rk4", noise=NoiseSchedule(gamma=2.0))
    # noise alone takes its one scheme (it had been refused for 'rk4', a default the user never chose)
    assert mf.ParticleSolver(noise=NoiseSchedule(gamma=2.0)).method == "euler" and mf.ParticleSolver().method == "rk4"
    with pytest.raises(ValueError, match=r"^noisy tokens follow the sphere model; norm='pre' takes no noise"):
        mf.ParticleSolver(norm="pre", noise=NoiseSchedule(gamma=2.0))  # when made (it had waited for the run)
    x = mf.sample("uniform", 20, 3, seed=0)
    with pytest.raises(ValueError, match="^steady_tol = 0.001 with noise"):
        mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), x), mf.ParticleSolver(method="euler", noise=NoiseSchedule(gamma=2.0)),
                 t_final=0.1, steady_tol=1e-3)


def test_a_noise_seed_on_the_grid_is_noted_as_unused():
    # the grid solves the Fokker–Planck equation: a sweep over noise.seed had given identical runs without a word
    with pytest.warns(ConfigNote, match="noise.seed not used by the grid solver"):
        load_config({"noise": {"gamma": 1.0, "seed": 3}, "solver": {"kind": "grid"}})


def test_the_cli_exits_2_naming_the_key_before_touching_the_output(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    out = tmp_path / "out.h5"
    for text, key in [("[noise]\ngamma = -2.0\n", "noise.gamma"), ("[noise]\ngamma = 1.0\nanneal = \"sometimes\"\n", "noise.anneal"),
                      ("[noise]\ngamma = 1.0\nanneal = \"linear\"\n", "noise.gamma_final")]:
        config.write_text(text)
        assert main(["simulate", str(config), "-o", str(out), "--quiet"]) == 2
        assert key in capsys.readouterr().err
        assert not out.exists()


# ----------------------------------------------------------------------------- grid: the Laplace–Beltrami term


def _grid_rate(cells: int, *, gamma: float, t_final: float) -> tuple[float, GridStepper, np.ndarray]:
    """Measured decay rate of the first moment of 1 + z/2 under (1/γ)Δ_S alone (first-order grid)."""
    mesh = fibonacci_mesh(cells)
    stepper = GridStepper(ZeroField(3), mesh, noise=NoiseSchedule(gamma=gamma), order=1)
    m0 = initial_mass(mesh, "function", expr="1 + 0.5*z")
    m1 = stepper.advance(m0, 0.0, t_final)
    z = mesh.points[:, 2]
    return -math.log((m1 @ z) / (m0 @ z)) / t_final, stepper, m1


def test_grid_degree_one_harmonic_decays_at_two_over_gamma_at_second_order():
    gamma, t_final = 1.0, 0.1
    cells = [250, 1000, 4000]
    errors = []
    for n in cells:
        rate, stepper, m1 = _grid_rate(n, gamma=gamma, t_final=t_final)
        errors.append(abs(rate - 2.0 / gamma))
        np.testing.assert_allclose(m1.sum(), 1.0, rtol=0, atol=1e-13)  # mass to round-off
        assert stepper.min_mass > 0 and stepper.rejections == 0      # positive at every stage, no step rejected
    h = np.sqrt(4 * math.pi / np.array(cells))
    orders = np.log(np.array(errors[:-1]) / np.array(errors[1:])) / np.log(h[:-1] / h[1:])
    np.testing.assert_allclose(orders, 2.0, atol=0.3)
    assert errors[-1] < 1.5e-3 * 2.0 / gamma


def test_grid_annealed_noise_decays_the_degree_one_harmonic_at_the_time_changed_rate():
    # (found in review: a grid diffusing at the first γ all run long had passed every test) under (1/γ(t))Δ_S alone the
    # degree-1 harmonic decays as exp(−2∫₀ᵀ ds/γ(s)); for γ linear from 1 to 3 over T = 0.2, ∫ = (T/2) ln 3
    g0, g1, t_final = 1.0, 3.0, 0.2
    mesh = fibonacci_mesh(4000)
    noise = NoiseSchedule(gamma=g0, anneal="linear", gamma_final=g1, duration=t_final)
    stepper = GridStepper(ZeroField(3), mesh, noise=noise, order=1)
    m0 = initial_mass(mesh, "function", expr="1 + 0.5*z")
    m1 = stepper.advance(m0, 0.0, t_final)
    z = mesh.points[:, 2]
    elapsed = t_final / (g1 - g0) * math.log(g1 / g0)  # ∫₀ᵀ ds/γ(s), 0.1099 (a constant γ = 1 would give 0.2)
    rate = -math.log((m1 @ z) / (m0 @ z)) / elapsed
    np.testing.assert_allclose(rate, 2.0, rtol=3e-3)  # the constant-γ test's error at 4000 cells is below 1.5e-3
    np.testing.assert_allclose(m1.sum(), 1.0, rtol=0, atol=1e-13)


def test_laplace_beltrami_conserves_mass_and_keeps_the_uniform_density():
    mesh = fibonacci_mesh(400)
    op = LaplaceBeltrami(mesh, NoiseSchedule(gamma=0.7))
    rng = np.random.default_rng(1)
    m = rng.uniform(0.5, 1.5, mesh.N)
    m /= m.sum()
    np.testing.assert_allclose(op.rate(m, 0.0).sum(), 0.0, rtol=0, atol=1e-13)
    np.testing.assert_allclose(op.rate(mesh.areas / mesh.areas.sum(), 0.0), 0.0, rtol=0, atol=1e-13)
    # the discrete Dirichlet form is non-negative: diffusion never raises Σ m²/A
    assert float(op.rate(m, 0.0) @ (m / mesh.areas)) < 0


def test_noisy_grid_run_with_attention_stays_positive_and_conserves_mass():
    """Softmax attention and noise together from a peaked density: the combined CFL rule keeps every stage positive."""
    cfg = load_config({"model": {"beta": 4.0}, "init": {"kind": "vmf", "kappa": 30.0}, "grid": {"cells": 400},
                       "solver": {"kind": "grid", "t_final": 0.3, "save_every": 0.1},
                       "noise": {"gamma": 2.0, "anneal": "linear", "gamma_final": 4.0, "duration": 0.3}})
    run = mf.simulate(cfg)
    mass = np.asarray(run.mass)
    np.testing.assert_allclose(mass.sum(axis=1), 1.0, rtol=0, atol=1e-13)
    assert run.info["min_mass"] > 0 and run.info["rejections"] == 0
    # noise spreads the peak: the first moment's length drops below the noiseless run's
    plain = {k: v for k, v in cfg.items() if k != "noise"}
    quiet = np.asarray(mf.simulate(load_config(plain)).mass)
    points = np.asarray(run.points)
    assert np.linalg.norm(mass[-1] @ points) < np.linalg.norm(quiet[-1] @ points)


def test_grid_diffusion_matches_the_particles_in_law():
    """The same noise on the grid and on particles: the first moments decay alike (heat kernel at 2/γ)."""
    gamma, t_final = 2.0, 0.5
    rate, _, _ = _grid_rate(1000, gamma=gamma, t_final=t_final)
    n = 20000
    u = _pure_noise(n, 3, gamma=gamma, dt=0.005, t1=t_final, seed=21)[:, -1]
    particle_rate = -math.log(u.mean()) / t_final
    np.testing.assert_allclose(particle_rate, rate, rtol=0, atol=4 * u.std() / (math.sqrt(n) * u.mean() * t_final) + 0.01)


def test_noise_with_the_layers_schedule_is_refused():
    """The Euler–Maruyama steps would cross the layer switches: a ConfigError naming weights.schedule."""
    import meanfield as mf

    with pytest.raises(mf.ConfigError, match="weights.schedule"):
        mf.load_config({"model": {"heads": [{"Q": "gpt2", "K": "gpt2", "V": "identity"}]},
                        "weights": {"schedule": "layers"}, "noise": {"gamma": 2.0}, "solver": {"method": "euler"}})


def test_noise_with_layer_heads_is_refused_in_the_api_too():
    # mf.solve had run it: the Euler–Maruyama step [0.9, 1.2] took the layer-0 drift throughout
    from meanfield.heads import HeadStack
    from meanfield.heads.schedules import LayerSchedule

    def layer(k):
        return HeadStack(B=np.random.default_rng(k).normal(size=(1, 3, 3)), V=np.random.default_rng(k + 100).normal(size=(1, 3, 3)))

    problem = mf.Problem(mf.Model(d=3, beta=1.0, heads=LayerSchedule(layer)), mf.sample_uniform(8, 3, seed=0))
    solver = mf.ParticleSolver(method="euler", dt=0.3, noise=NoiseSchedule(gamma=2.0))
    with pytest.raises(ValueError, match="^noise does not combine with heads that switch at the layers"):
        mf.solve(problem, solver, t_final=3.0, save_every=1.5)


def test_the_noisy_steps_share_the_speed_trackers_evaluation_and_keep_their_drift():
    """The first Euler–Maruyama step of a frame takes the drift the speed tracker evaluated there (one kernel
    call for both); every other step evaluates its own, and the path equals one built from model.velocity."""
    from meanfield.solvers.loop import run_loop, save_times

    model, x0 = mf.Model(d=3, beta=2.0), mf.sample_uniform(40, 3, seed=1)
    noise = NoiseSchedule(gamma=5.0, seed=3)
    setup = mf.ParticleSolver(method="euler", dt=0.05, noise=noise).setup(mf.Problem(model, x0), energy=False)
    result = run_loop(setup.stepper, setup.state, save_times(0.0, 0.3, 0.1), trackers=setup.trackers, keep_states=True)
    stats = setup.stepper.stats
    assert stats["steps"] == 6 and stats["evaluations"] == stats["steps"] + 1  # the frames at t = 0.1, 0.2 cost nothing
    x = x0
    for k in range(1, 4):  # the same increments, the drift from the model
        rng = interval_generator(noise.seed, 0.1 * (k - 1))
        for step in range(2):
            t = 0.1 * (k - 1) + 0.05 * step
            x = geometric_em_step(x, model.velocity(x, t), 0.05, noise.gamma_at(t), rng.standard_normal(x.shape))
        np.testing.assert_allclose(result.states[k], x, rtol=0, atol=1e-13)


def test_the_docs_write_the_sde_in_stratonovich_form_with_its_ito_drift():
    # "√(2/γ) P⊥ dW" read as Itô leaves the sphere (d|x|² = 2(d−1)/γ dt); the scheme follows P⊥∘dW
    from pathlib import Path

    import meanfield.noise
    import meanfield.solvers.noise

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    noisy = readme[readme.index("### Noisy tokens"):]
    noisy = noisy[:noisy.index("\n#")]
    for name, text in (("meanfield.noise", meanfield.noise.__doc__), ("meanfield.solvers.noise", meanfield.solvers.noise.__doc__),
                       ("README", noisy)):
        assert r"P^\perp_{x_i}\circ dW_i" in text and "Stratonovich" in text and r"\tfrac{d-1}{\gamma(t)}x_i" in text, name
        assert r"P^\perp_{x_i}\,dW_i" not in text, name
    for doc in (NoiseSchedule.__doc__, NoisyParticleStepper.__doc__, mf.ParticleSolver.__doc__):
        assert "circ dW" in doc or "P⊥∘dW" in doc


def test_noise_with_a_normalisation_scheme_names_the_scheme():
    # with method = "rk4" given too, the message had named solver.method, which is not what takes no noise
    with pytest.raises(ConfigError, match="model.norm"):
        load_config({"model": {"norm": "pre"}, "noise": {"gamma": 2.0}, "solver": {"method": "rk4"}})


def test_info_of_a_noisy_run_names_its_noise(tmp_path, capsys):
    # the summary of a noisy run had read exactly like a deterministic one
    config = tmp_path / "c.toml"
    config.write_text("[init]\nn = 8\n")
    out = tmp_path / "noisy.h5"
    assert main(["simulate", str(config), "-o", str(out), "--quiet", "--set", "init.n=8", "--set", "solver.t_final=0.1",
                 "--set", 'solver.method="euler"', "--set", "noise.gamma=20", "--set", 'noise.anneal="linear"',
                 "--set", "noise.gamma_final=40", "--set", "noise.duration=1", "--set", "noise.seed=3"]) == 0
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    assert "noise:     γ=20 anneal=linear gamma_final=40 duration=1 seed=3" in capsys.readouterr().out
    quiet = tmp_path / "quiet.h5"
    assert main(["simulate", str(config), "-o", str(quiet), "--quiet", "--set", "solver.t_final=0.1"]) == 0
    assert main(["info", str(quiet)]) == 0
    assert "noise:" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "noise, key",
    [
        ({"gamma": 1e-320}, "noise.gamma"),
        ({"gamma": 1.0, "anneal": "expression", "anneal_expr": "gamma*(t<0.05) + 1e-320"}, "noise.anneal_expr"),
        ({"gamma": 1.0, "anneal": "exponential", "gamma_final": 1e-320, "anneal_rate": 1000.0}, "noise.gamma_final"),
    ],
)
def test_a_gamma_whose_noise_overflows_is_refused_before_any_file(tmp_path, capsys, noise, key):
    """(γ = 1e-320 had run the particles to NaN, exit 1, a file written, after a raw RuntimeWarning.)"""
    with pytest.raises(ConfigError) as info:
        load_config({"init": {"n": 8}, "solver": {"method": "euler", "t_final": 0.1}, "noise": noise})
    assert info.value.key == key
    overrides = [item for k, v in noise.items() for item in ("--set", f"noise.{k}={v!r}" if isinstance(v, str) else f"noise.{k}={v}")]
    (tmp_path / "c.toml").write_text('[init]\nn = 8\n[solver]\nmethod = "euler"\nt_final = 0.1\n')
    status = main(["simulate", str(tmp_path / "c.toml"), "-o", str(tmp_path / "r.h5"), "--quiet", *overrides])
    assert status == 2
    assert f"error: {key}:" in capsys.readouterr().err
    assert not (tmp_path / "r.h5").exists()
    NoiseSchedule(gamma=1e-300)  # the floor itself is taken


def test_the_outflow_rate_sums_the_transmissibilities_of_every_edge_of_the_cell():
    # γ(t)^{-1} Σ_{j~i} ℓ_ij/δ_ij / A_i over all edges touching i (either end), written out here; and a unit mass in
    # one cell leaves it at exactly that rate under the operator
    mesh = fibonacci_mesh(300)
    gamma = 0.5
    op = LaplaceBeltrami(mesh, NoiseSchedule(gamma=gamma))
    ref = np.zeros(mesh.N)
    for (a, b), ell in zip(mesh.edges, mesh.edge_lengths):
        w = ell / math.acos(min(1.0, max(-1.0, float(mesh.points[a] @ mesh.points[b]))))
        ref[a] += w
        ref[b] += w
    ref /= mesh.areas * gamma
    np.testing.assert_allclose(op.outflow_rate(0.0), ref, rtol=1e-10, atol=0)
    for c in (0, mesh.N // 2, mesh.N - 1):
        m = np.zeros(mesh.N)
        m[c] = 1.0
        np.testing.assert_allclose(-op.rate(m, 0.0)[c], ref[c], rtol=1e-10, atol=0)
