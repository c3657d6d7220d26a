r"""The plateau and its two fits (Massucco, Del Grande, Carioni, Brune and Schönlieb, arXiv 2605.18870).

.. math::

    \overline{G^2}(H)\approx a\,H^{b}

fitted by log-log least squares and by the authors' nonlinear least squares, on synthetic data
with known :math:`a, b`.
"""
from __future__ import annotations

import numpy as np
import pytest

from meanfield.solvers.experiments.time_dependent import FIT_METHODS, authors_plateau, fit_power_law, plateau_fits

H = np.array([1.0, 4.0, 10.0, 16.0, 100.0])


@pytest.mark.parametrize("method", list(FIT_METHODS))
@pytest.mark.parametrize(("a", "b"), [(0.3, -1.0), (2.0, 0.0), (0.05, -0.5)])
def test_exact_power_law_is_recovered(method, a, b):
    fa, fb = fit_power_law(H, a * H**b, method=method)
    assert fa == pytest.approx(a, rel=1e-8) and fb == pytest.approx(b, abs=1e-8)


def test_the_two_fits_minimise_different_errors():
    # multiplicative noise on the largest value: curve_fit follows the large y, log-log weighs all alike
    a, b = 0.3, -1.0
    y = a * H**b * np.array([1.3, 0.9, 1.1, 0.95, 1.2])
    fits = {f["method"]: f for f in plateau_fits(H, y)}
    assert set(fits) == set(FIT_METHODS) and all(f["description"] == FIT_METHODS[m] for m, f in fits.items())
    ll, cf = fits["loglog"], fits["curve_fit"]
    # each is the minimiser of its own objective
    def log_sq(p):
        return float(np.sum((np.log(y) - np.log(p[0]) - p[1] * np.log(H)) ** 2))

    def lin_sq(p):
        return float(np.sum((y - p[0] * H ** p[1]) ** 2))

    assert log_sq((ll["a"], ll["b"])) < log_sq((cf["a"], cf["b"]))
    assert lin_sq((cf["a"], cf["b"])) < lin_sq((ll["a"], ll["b"]))
    for da in (0.99, 1.01):
        for db in (-0.01, 0.01):
            assert lin_sq((cf["a"] * da, cf["b"] + db)) > lin_sq((cf["a"], cf["b"]))
    # the log-log fit is the closed-form regression line
    X = np.stack([np.ones_like(H), np.log(H)], axis=1)
    coef = np.linalg.lstsq(X, np.log(y), rcond=None)[0]
    assert ll["b"] == pytest.approx(coef[1], rel=1e-10) and ll["a"] == pytest.approx(np.exp(coef[0]), rel=1e-10)
    assert abs(ll["b"] - cf["b"]) > 1e-3


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="method"):
        fit_power_law(H, H, method="spline")


def test_plateau_is_the_mean_over_the_second_half():
    t = np.linspace(0.0, 20.0, 801)
    y = np.where(t < 10.0, 100.0, 1.0 + t)
    assert authors_plateau(t, y) == pytest.approx(np.mean(1.0 + t[400:]))
    assert authors_plateau(t, y, t_final=40.0) == pytest.approx(21.0)


def test_energy_balance_curves_close_the_identity_with_the_signed_transport():
    # residual = ΔE − time − transport − slope on every frame, with the transport curve carrying σ
    from meanfield.solvers.experiments.time_dependent import energy_dissipation_balance

    b = energy_dissipation_balance(quick=True, taus=(0.1,), t_final=1.0, n=16)
    gap = b["energy_change"] - b["time_term"] - b["transport_term"] - b["slope_term"] - b["residual_curve"]
    np.testing.assert_allclose(gap, 0.0, rtol=0, atol=1e-12)
    assert np.abs(b["transport_term"]).max() > 1e-3  # the identity is not met trivially


def test_late_slope_is_the_mean_of_the_slope_over_the_second_half():
    from meanfield.solvers.experiments.time_dependent import ou_vs_oscillating

    # "mean |∂E| over the last half" (the mean of |∂E|² had been a third of it here)
    out = ou_vs_oscillating(quick=True, H=2, n=8, t_final=2.0, dt=0.05, schedules=("oscillating",))
    r = out["oscillating"]
    t, slope = np.asarray(r["t"]), np.asarray(r["slope"])
    assert np.sum(t >= 1.0) >= 4
    np.testing.assert_allclose(r["late_slope"], slope[t >= 1.0].mean(), rtol=1e-12, atol=0)


def test_fit_g2_is_the_log_log_fit_of_the_g2_plateau():
    from meanfield.solvers.experiments.time_dependent import gradient_plateau_vs_heads

    o = gradient_plateau_vs_heads(quick=True, heads=(1, 4), n=16, t_final=4.0, seeds=(0,))
    b, log_a = np.polyfit(np.log(o["H"]), np.log(o["G2"]), 1)
    np.testing.assert_allclose(o["fit_G2"], (np.exp(log_a), b), rtol=1e-8, atol=0)


def test_jko_tau_convergence_error_is_the_largest_geodesic_distance():
    # the documented max_i d_S(x_i^JKO(T), x_i^RK4(T)), recomputed here from the two runs (the mean had passed the
    # ratio checks)
    from meanfield.geometry.sphere import sample_uniform
    from meanfield.solvers.experiments.time_dependent import jko_tau_convergence, time_dependent_model
    from meanfield.solvers.jko import JKOSolver
    from meanfield.solvers.particle import ParticleSolver
    from meanfield.solvers.problem import Problem, solve

    taus, n, T = (0.2,), 6, 0.4
    out = jko_tau_convergence(taus=taus, H=2, n=n, t_final=T, seed=0)
    model = time_dependent_model(2, schedule="ou", seed=0, weights_dt=0.2)
    x0 = sample_uniform(n, 3, seed=0)
    ref = solve(Problem(model, x0), ParticleSolver(dt=0.01, method="rk4"), t_final=T, energy=False, speed=False).final
    jko = solve(Problem(model, x0), JKOSolver(tau=0.2, mobility="frozen"), t_final=T, energy=False, speed=False).final
    d = np.arccos(np.clip(np.sum(jko * ref, axis=1), -1.0, 1.0))
    assert d.max() > 1.5 * d.mean()
    np.testing.assert_allclose(out["error"], [d.max()], rtol=1e-6, atol=0)
