"""Analysis functions with non-symmetric heads, unequal head weights and descent; the reduced model's RK4 and clock.

Found by mutation: with ``yB`` in place of ``By`` (the transpose of a symmetric B changes nothing), the pooled head
outputs without their weights, the monotone-energy verdict and the aggregate margin without the direction's sign,
the head overlap over unordered pairs only, ``S = VB`` in place of ``VBᵀ``, the zero-temperature clock of ‖Bx‖, a
second-order RK4 in the merging flow, a first-order clock time and an energy past the floats off by 2 had each passed
every test, whose heads were symmetric, equally weighted, two, or ascending.  Each is checked here against plain NumPy
or a closed form.
"""
from __future__ import annotations

import numpy as np
import pytest

import meanfield.analysis.diagnostics as diag
from meanfield.analysis.mobility import mobility_field
from meanfield.analysis.projection import score_and_value
from meanfield.analysis.theory import head_overlap
from meanfield.geometry.sphere import sample_uniform
from meanfield.heads import HeadStack

B0 = np.array([[1.0, 0.7, 0.0], [-0.2, 0.5, 0.3], [0.1, 0.0, 0.8]])
B1 = np.array([[0.3, -0.4, 0.2], [0.6, 0.1, 0.0], [0.0, 0.5, -0.2]])


def test_the_mobility_field_of_non_symmetric_heads_against_numpy():
    x = sample_uniform(8, 3, seed=3)
    a = np.linspace(1.0, 2.0, 8)
    a /= a.sum()
    w = np.array([0.3, 0.7])
    heads = HeadStack(B=np.stack([B0, B1]), V=np.stack([B0, B1]), w=w)
    beta = 2.0
    kernels = [a[None, :] * np.exp(beta * x @ B @ x.T) for B in (B0, B1)]  # a_j e^{β x_iᵀ B y_j}
    Z = np.array([k.sum(axis=1) for k in kernels])
    gradient = sum(wh * k @ (x @ B.T) for wh, k, B in zip(w, kernels, (B0, B1)))  # Σ_h w_h Σ_j … B_h y_j
    field = mobility_field(x, heads, beta=beta, weights=a)
    np.testing.assert_allclose(field.log_Z, np.log(Z), rtol=1e-13)
    np.testing.assert_allclose(field.log_b, -np.log(w @ Z), rtol=1e-13)
    np.testing.assert_allclose(field.gradient, gradient, rtol=1e-12, atol=1e-14)
    flux = gradient / (w @ Z)[:, None]
    np.testing.assert_allclose(field.flux, flux, rtol=1e-12, atol=1e-14)
    tangent = flux - np.sum(flux * x, axis=1)[:, None] * x
    np.testing.assert_allclose(field.tangent_flux, tangent, rtol=0, atol=1e-13)


def test_pooled_head_outputs_carry_the_head_weights():
    # f^h_i = w_h Σ_j a_j e^{β x_iᵀB_h y_j} V_h y_j / Σ_h' w_h' Σ_j a_j e^{β x_iᵀB_h' y_j}
    x = sample_uniform(10, 3, seed=1)
    w = np.array([0.2, 0.8])
    V = np.stack([np.eye(3), np.diag([0.3, 1.0, -0.5])])
    heads = HeadStack(B=np.stack([B0, B1]), V=V, w=w)
    a = np.full(10, 0.1)
    kernels = [a[None, :] * np.exp(2.0 * x @ B @ x.T) for B in (B0, B1)]
    total = sum(wh * k.sum(axis=1) for wh, k in zip(w, kernels))
    expected = np.stack([wh * k @ (x @ Vh.T) / total[:, None] for wh, k, Vh in zip(w, kernels, V)])
    got = diag.head_outputs(x, heads, beta=2.0, kind="pooled", weights=a)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(("direction", "energy", "monotone"), [
    ("descent", [3.0, 2.5, 2.2, 2.1], True), ("descent", [3.0, 3.5], False),
    ("ascent", [1.0, 2.0, 2.5], True), ("ascent", [1.0, 0.5], False),
])
def test_the_monotone_energy_verdict_follows_the_direction(direction, energy, monotone):
    series = {"energy": np.asarray(energy), "thm11_residual": np.zeros(len(energy)),
              "entropy_residual": np.zeros(len(energy)), "dominance_fraction_h0": np.ones(len(energy)),
              "dEdt_h0": np.ones(len(energy)), "aggregate_margin_h0": np.ones(len(energy)),
              "energy_h0": np.asarray(energy), "entropy_mean_h0": np.ones(len(energy))}
    got = diag.verdicts(series, direction=direction, H=1, n=10, gradient_flow=True)["energy_monotone"]
    assert got is monotone


@pytest.mark.parametrize("direction", ["ascent", "descent"])
def test_the_aggregate_margin_of_one_head_in_thm_11_is_one_either_way(direction):
    # one head, B = V = I, unnormalized: σ dE/dt = Σ_i a_i ‖ẋ_i‖² = the self power, so σ·(dE/dt)/S = +1 (Thm 11)
    x = sample_uniform(10, 3, seed=0)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    frame = diag.frame_diagnostics(x, heads, beta=1.0, kind="unnormalized", direction=direction)
    np.testing.assert_allclose(frame.scalars["aggregate_margin_h0"], 1.0, rtol=1e-10)


def test_the_head_overlap_takes_both_orders_of_each_pair():
    # ‖B1 B0‖ = 1 while ‖B0 B1‖ = 0: δ = max over h ≠ h' of ‖B_h' B_h‖ is 1 (one order only had read 0: orthogonal)
    assert head_overlap([np.diag([0.0, 1.0]), np.array([[0.0, 1.0], [0.0, 0.0]])]) == pytest.approx(1.0, rel=1e-15)
    rng = np.random.default_rng(4)
    Bs = rng.standard_normal((3, 4, 4))
    expected = max(np.linalg.norm(Bs[g] @ Bs[h], 2) for h in range(3) for g in range(3) if g != h)
    np.testing.assert_allclose(head_overlap(Bs), expected, rtol=1e-12)


def test_score_and_value_of_a_non_symmetric_head():
    rng = np.random.default_rng(5)
    Q, K, V = rng.standard_normal((2, 3)), rng.standard_normal((2, 3)), rng.standard_normal((3, 3))
    B, S = score_and_value(Q, K, V)
    np.testing.assert_allclose(B, Q.T @ K, rtol=1e-14)
    np.testing.assert_allclose(S, V @ (Q.T @ K).T, rtol=1e-13)


def test_the_zero_temperature_clock_of_a_non_symmetric_b_inverts_its_integral():
    # τ(t) of ẋ = P⊥(Sx)/‖Bᵀx‖: t = ∫₀^τ ‖Bᵀx(σ)‖ dσ along the closed-form flow (‖Bx‖ had passed: B was symmetric)
    from scipy.integrate import quad

    from meanfield.analysis.projection import zero_temperature_clock, zero_temperature_flow

    B = B0
    S = B @ B.T
    x0 = np.array([[0.6, 0.0, 0.8]])
    tau = float(zero_temperature_clock(x0, S, B, np.array([1.0]))[0, 0])
    back, _ = quad(lambda s: float(np.linalg.norm(B.T @ zero_temperature_flow(x0, S, s)[0])), 0.0, tau, epsabs=1e-13)
    np.testing.assert_allclose(back, 1.0, rtol=1e-9)


def test_the_reduced_models_rk4_is_fourth_order_and_its_clock_time_is_the_closed_form():
    # (a stage weight 2·k2 for 2·k3 had made it second order; weights (1/4,)*4 for the clock's time had made Δt first)
    import math

    from meanfield.analysis.landscape import _clock_step, _rk4_step

    S = np.diag([1.0, 0.0, -1.0])
    x0 = np.array([0.6, 0.48, 0.64])

    def field(x, _t):
        return S @ x - (x @ S @ x) * x

    def unit(x):
        return x / np.linalg.norm(x)

    exact = unit(np.exp(np.diag(S)) * x0)
    errors = []
    for steps in (5, 10, 20):
        x = x0.copy()
        for k in range(steps):
            x = _rk4_step(field, x, k / steps, 1.0 / steps, retract=unit)
        errors.append(np.linalg.norm(x - exact))
    np.testing.assert_allclose(np.log2(np.array(errors[:-1]) / errors[1:]), 4.0, atol=0.3)
    # the gradient clock on F = P⊥e_z: the token runs to the pole at unit speed, θ(s) = θ0 − s, and dt/ds = 1/sin θ
    e_z = np.array([0.0, 0.0, 1.0])
    theta0 = 1.2
    x = np.array([[math.sin(theta0), 0.0, math.cos(theta0)]])
    for h in (0.3, 0.15):
        _, dt, _ = _clock_step(lambda y: e_z - (y @ e_z)[:, None] * y, x, np.ones(1), h)
        exact_dt = math.log(math.tan(theta0 / 2)) - math.log(math.tan((theta0 - h) / 2))
        np.testing.assert_allclose(dt, exact_dt, rtol=5e-4 * (h / 0.3) ** 4)  # (1.1e-4, then 16× less)


def test_an_energy_just_past_the_floats_with_two_beta_above_one():
    # one token, B = I: E = e^β/(2β), 1.159e306 at β = 712 (log 2β had been log β there: 2.3e306)
    from meanfield.analysis.energy import head_energies

    for beta in (712.0, 705.0):
        got = head_energies(np.array([[1.0, 0.0, 0.0]]), HeadStack(B=np.eye(3)[None], V=np.eye(3)[None]), beta=beta)
        np.testing.assert_allclose(got, [np.exp(beta - np.log(2 * beta))], rtol=1e-12)


def test_identify_takes_the_merge_radius_as_geodesic():
    # two tokens 0.98 rad apart are no group at radius 0.96 and one at 1.0 (a chord of 0.96 had grouped them)
    from meanfield.analysis.landscape import identify

    x = np.array([[1.0, 0.0], [np.cos(0.98), np.sin(0.98)]])
    assert identify(x, 0.96) == []
    groups = identify(x, 1.0)
    assert len(groups) == 1 and list(groups[0]) == [0, 1]
