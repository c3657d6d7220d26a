"""Trackers and the normalised dynamics read the heads at the time they are called, not at t = 0.

Found by mutation: with the heads of t = 0 in place of those of t, the Pre-LN velocity, the energy tracker, the
energy–dissipation tracker's explicit derivative, a Pre-LN run's energies (taken at r·θ instead of θ), the mean heads'
log-energy and a replayed weight path's derivative on a non-uniform grid had all passed every test.  Each is checked
here against an independent NumPy transcription at t = 0.7 with oscillating heads.
"""
from __future__ import annotations

import math

import numpy as np

import meanfield as mf
from meanfield.heads.schedules import OscillatingSchedule, PathSchedule
from meanfield.io.runfile import RunReader, RunWriter
from meanfield.normalization import NormalizedDynamics
from meanfield.solvers.jko import EnergyDissipationTracker
from meanfield.solvers.normalized import DirectionsTracker
from meanfield.solvers.trackers import EnergyTracker

BETA, T = 1.3, 0.7


def _oscillating_model(**options) -> mf.Model:
    heads = mf.Model(d=3, beta=BETA).heads.at(0.0)
    return mf.Model(d=3, beta=BETA, heads=OscillatingSchedule(heads, amplitude=0.8, omega=2.0), **options)


def _energies(model: mf.Model, x: np.ndarray, t: float) -> list[float]:
    """(1/2β) Σ_ij a_i a_j exp(β ⟨x_i, B_h(t) x_j⟩), a = 1/n, per head."""
    n = len(x)
    return [float(np.exp(BETA * x @ B @ x.T).sum() / n**2 / (2 * BETA)) for B in model.heads.at(t).B]


def test_the_heads_move_between_zero_and_t():
    model = _oscillating_model()
    x = mf.sample_uniform(8, 3, seed=1)
    assert abs(_energies(model, x, T)[0] - _energies(model, x, 0.0)[0]) > 0.1  # so that the checks below can fail


def test_the_energy_tracker_takes_the_heads_at_t():
    model = _oscillating_model()
    x = mf.sample_uniform(8, 3, seed=1)
    np.testing.assert_allclose(EnergyTracker(model)(T, x)["energy_h0"], _energies(model, x, T)[0], rtol=1e-12)


def test_a_normalised_run_takes_its_energies_at_the_directions():
    # the tracker of a Pre-LN run gets r·θ: its energies are those of θ (the raw tokens had read 5919.7 for 1.14)
    model = _oscillating_model()
    x = mf.sample_uniform(8, 3, seed=1)
    got = DirectionsTracker(EnergyTracker(model))(T, 2.5 * x)["energy_h0"]
    np.testing.assert_allclose(got, _energies(model, x, T)[0], rtol=1e-12)


def test_the_pre_ln_velocity_takes_the_heads_at_t():
    # Pre-LN: θ̇ = P⊥_θ A / r and ṙ = ⟨θ, A⟩ with A = σ v(θ; t), the attention output at time t
    model = _oscillating_model()
    x, r = mf.sample_uniform(8, 3, seed=1), np.full(8, 1.5)
    a = model.sign * model.ambient_velocity(x, T)
    theta_dot, r_dot = NormalizedDynamics(model, norm="pre").velocity(x, r, T)
    np.testing.assert_allclose(theta_dot, (a - np.sum(a * x, 1)[:, None] * x) / r[:, None], rtol=0, atol=1e-13)
    np.testing.assert_allclose(r_dot, np.sum(a * x, 1), rtol=0, atol=1e-13)


def test_the_explicit_energy_derivative_is_that_of_the_heads_at_t():
    # ∂E/∂t at fixed tokens against a centred difference of the tracker's own energy in t (it reads 0.21 at t = 0.7;
    # the heads of t = 0 give 0.58)
    model = _oscillating_model()
    x = mf.sample_uniform(8, 3, seed=1)
    tracker, eps = EnergyDissipationTracker(model), 1e-5
    centred = (tracker(T + eps, x)["energy_theta"] - tracker(T - eps, x)["energy_theta"]) / (2 * eps)
    np.testing.assert_allclose(tracker(T, x)["dE_dt_explicit"], centred, rtol=1e-7)


def test_the_log_energy_of_mean_heads_is_the_log_of_their_energy():
    model = mf.Model(d=3, beta=2.0, heads=[mf.heads.identity(3), mf.heads.scalar(0.5, 3)], combine="mean")
    out = EnergyTracker(model)(0.0, mf.sample_uniform(10, 3, seed=0))
    np.testing.assert_allclose(math.exp(out["log_energy"]), out["energy"], rtol=1e-12)  # (the sum's had been 2×)


def test_a_replayed_path_takes_the_derivative_of_its_own_interval_on_a_non_uniform_grid():
    t = np.array([0.0, 1.0, 3.0])
    B = np.stack([np.eye(2)[None] * (1 + 0.5 * s) for s in t])  # B(t) = (1 + t/2) I
    path = PathSchedule(t, B, B.copy())
    np.testing.assert_allclose(path.derivative(2.0)[0][0, 0, 0], 0.5, rtol=1e-12)  # (the first step's width gave 1.0)


def test_a_series_first_recorded_late_reads_nan_before(tmp_path):
    path = tmp_path / "r.h5"
    writer = RunWriter(path, config={"model": {"d": 3}, "solver": {"kind": "particle"}}, state_name="x", state_shape=(2, 3))
    x = np.eye(3)[:2]
    writer.append(0.0, x, {"a": 1.0})
    writer.append(0.1, x, {"a": 2.0})
    writer.append(0.2, x, {"a": 3.0, "late": 7.0})
    writer.finish("completed")
    np.testing.assert_array_equal(RunReader(path).diagnostics()["late"], [np.nan, np.nan, 7.0])  # (not 0, 0, 7)


# ----------------------------------------------------------------------------- more survivors of the same mutation review


def test_isotropic_matrix_sde_noise_has_variance_sigma_squared_dt_in_every_free_entry():
    # the symmetric increment ξ = triu(Z, 1) + triu(Z, 1)ᵀ + diag(Z): each free entry N(0, σ²Δ) (a doubled diagonal, of
    # variance 4σ²Δ, had passed); 20 000 steps put a variance within 4 % (3 standard errors of 1 %)
    from meanfield.heads.schedules import MatrixSDESchedule

    d, dt = 3, 0.01
    sde = MatrixSDESchedule(initial=np.eye(d)[None], drift="ou", dt=dt, kappa=0.0, mean=np.eye(d)[None], sigma=1.0,
                            noise="isotropic", integrator="euler-maruyama", seed=0)
    path = np.stack([sde.at(k * dt).B[0] for k in range(20001)])
    increments = np.diff(path, axis=0) / math.sqrt(dt)
    rows, cols = np.triu_indices(d)
    np.testing.assert_allclose(increments[:, rows, cols].var(axis=0), 1.0, rtol=0.04)


def test_the_jko_tracker_records_the_worst_step_residual():
    from types import SimpleNamespace

    from meanfield.solvers.jko import JKOTracker, StepReport

    def report(residual):
        return StepReport(t0=0, t1=0.1, iterations=3, residual=residual, method="fixed-point", fallback=False,
                          mobility_iterations=1, energy_start=1, energy_mid=1, energy_end=1.1, transport_cost=0.001,
                          slope_squared=1, sign=1.0)

    stepper = SimpleNamespace(log=SimpleNamespace(take=lambda: [report(1e-12), report(3e-11)]))
    assert JKOTracker(stepper)(0.2, None)["jko_residual"] == 3e-11  # (the best step's had passed)


def test_the_degree_one_decay_rate_is_the_laplacian_eigenvalue():
    from meanfield.noise import l1_decay_rate

    for d in (2, 3, 6):  # l(l + d − 2)/γ at l = 1
        np.testing.assert_allclose(l1_decay_rate(2.0, d), (d - 1) / 2.0, rtol=1e-15)


def test_a_run_file_with_a_repeated_time_is_refused_as_damaged(tmp_path):
    from meanfield.errors import ConfigError

    path = tmp_path / "dup.h5"
    writer = RunWriter(path, config={"model": {"d": 3}, "solver": {"kind": "particle"}}, state_name="x", state_shape=(2, 3))
    for t in (0.0, 0.1, 0.1):
        writer.append(t, np.eye(3)[:2])
    writer.finish("completed")
    import pytest

    with pytest.raises(ConfigError, match=r"is damaged: its saved times 't' are not finite and increasing \(t\[2\] = 0.1 after t\[1\] = 0.1\)"):
        RunReader(path).times()
