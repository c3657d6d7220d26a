"""The mobility module's edge cases (its formulas are checked against direct sums in tests/solvers/test_slope_tracker.py and test_jko.py)."""
from __future__ import annotations

import numpy as np
import pytest

from meanfield.heads import HeadStack


def test_energy_time_derivative_is_infinite_past_floats_range_like_the_slopes():
    # e^{β} past float's range had raised a bare OverflowError (at β ≈ 800) where the other slopes give inf
    from meanfield.analysis.mobility import energy_time_derivative

    x = np.eye(3)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    np.testing.assert_allclose(energy_time_derivative(x, heads, np.eye(3)[None], beta=2.0), np.e**2 / 6, rtol=1e-14)
    assert energy_time_derivative(x, heads, np.eye(3)[None], beta=800.0) == np.inf
    assert energy_time_derivative(x, heads, -np.eye(3)[None], beta=800.0) == -np.inf


# six points on S^2, at least 0.38 rad apart; masses with a tracer of mass 0
_POINTS = np.array([[0.7, -0.2, 0.5], [0.6, 0.1, 0.6], [-0.3, 0.9, 0.2], [0.1, 0.2, -0.95], [-0.8, -0.5, 0.1], [0.0, -0.7, 0.7]])
_MASSES = np.array([0.1, 0.25, 0.15, 0.2, 0.0, 0.3])
_B2 = np.array([[1.2, 0.3, 0.0], [0.3, 0.8, -0.2], [0.0, -0.2, 1.0]])
_V1 = np.array([[1.0, 0.2, 0.0], [-0.1, 0.9, 0.3], [0.0, 0.1, 1.1]])


def test_slopes_keep_their_digits_where_the_own_term_dominates():
    # 60-digit mpmath sums (the points normalised at 60 digits).  The tangent part of the whole flux had kept 1e-16 of
    # the own term's size: metric slope 2e4 times too large at β = 500 (B = I), the authors' G² likewise
    from meanfield.analysis.mobility import authors_slope_squared, metric_slope_squared

    x = _POINTS / np.linalg.norm(_POINTS, axis=1, keepdims=True)
    identity = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    for beta, exact in ((300.0, 2.1262949037793226394e109), (500.0, 4.1682344731087954715e183)):
        np.testing.assert_allclose(metric_slope_squared(x, identity, beta=beta), exact, rtol=1e-12)
        np.testing.assert_allclose(authors_slope_squared(x, identity, beta=beta), exact, rtol=1e-12)
    w = np.array([0.3, 0.7])
    aligned = HeadStack(B=np.stack([np.eye(3), _B2]), V=np.stack([np.eye(3), _B2]), w=w)
    np.testing.assert_allclose(metric_slope_squared(x, aligned, beta=400.0, weights=_MASSES), 1.6033842515580014783e190,
                               rtol=1e-12)
    general = HeadStack(B=np.stack([np.eye(3), _B2]), V=np.stack([_V1, 2 * np.eye(3)]), w=w)
    np.testing.assert_allclose(authors_slope_squared(x, general, beta=400.0, weights=_MASSES), 1.7258850244950582614e171,
                               rtol=1e-12)


def test_tangent_flux_is_the_projected_flux_where_no_term_dominates():
    from meanfield.analysis.mobility import mobility_field
    from meanfield.geometry.sphere import project_tangent

    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 4))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    m = rng.normal(size=(2, 4, 4))
    heads = HeadStack(B=m + m.transpose(0, 2, 1), V=m + m.transpose(0, 2, 1), w=np.array([0.4, 0.6]))
    masses = rng.random(40)
    masses[[3, 17]] = 0.0
    masses /= masses.sum()
    field = mobility_field(x, heads, beta=1.5, weights=masses)
    np.testing.assert_allclose(field.tangent_flux, project_tangent(x, field.flux), rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.einsum("ij,ij->i", field.tangent_flux, x), 0.0, atol=1e-15)
    apart = mobility_field(x, heads, beta=1.5, y=x.copy(), weights=masses)  # atoms given apart: no own term
    np.testing.assert_allclose(apart.flux, field.flux, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(apart.tangent_flux, field.tangent_flux, rtol=1e-12, atol=1e-14)


def test_slopes_stay_numbers_where_the_tangent_flux_squared_underflows():
    # two tokens 60° apart at β = 1024: the tangent flux is 4e-223 (its square 0) and 1/b̂ ~ e^1024, the slope 0.375
    # exactly (each token: a_i·|P⊥∇|²/Z_i = 0.1875/(1 + e^{-β/2})); both slopes had read nan (0 · inf), and a tracer
    # had made G² nan where the metric slope was right
    from meanfield.analysis.mobility import authors_slope_squared, metric_slope_squared

    x = np.array([[1.0, 0.0, 0.0], [0.5, np.sqrt(0.75), 0.0], [0.0, 0.0, 1.0]])
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    masses = np.array([0.5, 0.5, 0.0])
    for slope in (metric_slope_squared, authors_slope_squared):
        np.testing.assert_allclose(slope(x, heads, beta=1024.0, weights=masses), 0.375, rtol=1e-12)
        np.testing.assert_allclose(slope(x[:2], heads, beta=1024.0), 0.375, rtol=1e-12)


def test_repeated_atoms_are_one_atom_of_their_summed_mass():
    # the first point three times: a copy's term had cancelled as another atom's, 1e30 times the slope at β = 500
    # (60-digit mpmath sum over the 8 atoms)
    from meanfield.analysis.mobility import authors_slope_squared, metric_slope_squared, mobility_field

    x = _POINTS / np.linalg.norm(_POINTS, axis=1, keepdims=True)
    repeated = np.vstack([x, x[[0, 0]]])
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    for slope in (metric_slope_squared, authors_slope_squared):
        np.testing.assert_allclose(slope(repeated, heads, beta=500.0), 1.1723159455618483285e184, rtol=1e-12)
    field = mobility_field(repeated, heads, beta=2.0)
    np.testing.assert_array_equal(field.tangent_flux[6], field.tangent_flux[0])
    np.testing.assert_allclose(field.flux, mobility_field(repeated, heads, beta=2.0, y=repeated.copy()).flux, rtol=1e-13)


def test_overflowing_rates_and_bounds_are_signed_infinities():
    # heads past float's range with opposite signs had summed inf - inf = nan; lipschitz_bound had raised OverflowError
    from meanfield.analysis.mobility import energy_time_derivative, lipschitz_bound

    x = np.array([[1.0, 0.0, 0.0], [0.5, np.sqrt(0.75), 0.0]])
    two = HeadStack(B=np.stack([np.eye(3)] * 2), V=np.stack([np.eye(3)] * 2), w=np.array([0.5, 0.5]))
    assert energy_time_derivative(x, two, np.stack([np.eye(3), -2 * np.eye(3)]), beta=1024.0) == -np.inf
    assert energy_time_derivative(x, two, np.stack([3 * np.eye(3), -2 * np.eye(3)]), beta=1024.0) == np.inf
    rate = energy_time_derivative(x, two, np.stack([np.eye(3), -2 * np.eye(3)]), beta=2.0)
    exact = -0.5 * 0.5 * np.sum(np.exp(2.0 * (x @ x.T)) * (x @ x.T)) / 4  # Σ_h w_h/2 ΣΣ a a e^{βs} s·(1 - 2)
    np.testing.assert_allclose(rate, exact, rtol=1e-14)
    assert lipschitz_bound(two, beta=1024.0) == np.inf


def test_energies_up_to_the_largest_float():
    # exp(max ℓ) had overflowed before the division by 2β: inf in a band of ln(2β) below the float limit
    from meanfield.analysis.energy import head_energies, head_log_energies

    x = np.array([[1.0, 0.0, 0.0], [0.5, np.sqrt(0.75), 0.0]])
    for exponent in (709.0, 710.5, 714.0):
        heads = HeadStack(B=(exponent / 1024.0) * np.eye(3)[None], V=np.eye(3)[None])
        exact = (0.25 * 2 * np.exp(exponent - np.log(2048.0))) * (1 + np.exp(-exponent / 2))  # (1/2β) Σ a a e^{βs}
        # (an exponent of ~710 carries ~710 ε of rounding, in the reference as in the sums)
        np.testing.assert_allclose(head_energies(x, heads, beta=1024.0), exact, rtol=4e-13)
        np.testing.assert_allclose(np.exp(head_log_energies(x, heads, beta=1024.0)), exact, rtol=4e-13)


def test_a_broken_velocity_is_not_a_token_at_rest():
    # a NaN row had been skipped as a row at rest (all NaN: 0.0), an infinite one had given nan
    from meanfield.analysis.mobility import mobility_field

    x = _POINTS / np.linalg.norm(_POINTS, axis=1, keepdims=True)
    field = mobility_field(x, HeadStack(B=np.eye(3)[None], V=np.eye(3)[None]), beta=2.0)
    a = np.full(6, 1 / 6)
    velocity = field.tangent_flux.copy()
    assert field.metric_speed_squared(velocity, a) == field.slope_squared(a) > 0
    velocity[2, 1] = np.nan
    assert np.isnan(field.metric_speed_squared(velocity, a))
    velocity[2, 1] = np.inf
    assert field.metric_speed_squared(velocity, a) == np.inf
    velocity[2, 1] = np.nan
    assert field.metric_speed_squared(velocity, np.array([1, 1, 0, 1, 1, 1]) / 5) > 0  # a tracer's row adds nothing


@pytest.mark.parametrize(("n", "d", "beta"), [(6000, 3, 8.0), (4000, 3, 64.0), (700, 8, 4.0), (30, 3, 2.0)])
def test_energy_time_derivative_from_the_kernels_row_sums_against_pair_sums(n, d, beta, monkeypatch):
    # one softmax kernel call per head (harmonic at n = 6000, local at 4000 on S²: linear in n), where the pair sums had
    # doubled a time-dependent run's cost; the reference sums every pair here, in row blocks, at each row's maximum
    from meanfield.analysis.mobility import energy_time_derivative
    from meanfield.geometry.sphere import sample_uniform

    rng = np.random.default_rng(n + d)
    x = sample_uniform(n, d, seed=4)
    sym = rng.standard_normal((2, d, d))
    B = (sym + sym.transpose(0, 2, 1)) / 4
    dB, w = rng.standard_normal((2, d, d)), np.array([0.3, 0.7])
    a = rng.uniform(0.5, 2.0, n)
    a /= a.sum()
    logs, values = [], []
    for h in range(2):
        for start in range(0, n, 500):
            z = beta * (x[start:start + 500] @ B[h] @ x.T)
            top = z.max(axis=1)
            sums = np.exp(z - top[:, None]) * ((x[start:start + 500] @ dB[h]) @ x.T) @ a
            logs.append(top)
            values.append(0.5 * w[h] * a[start:start + 500] * sums)
    top = np.concatenate(logs).max()
    exact = float(np.sum(np.concatenate(values) * np.exp(np.concatenate(logs) - top)) * np.exp(top))
    import meanfield.analysis.mobility as mobility

    calls = []

    def kernel(*args, **kwargs):  # the kernels ran, once per head, and gave their row sums
        calls.append(kwargs["row_logs"])
        return mobility_kernel(*args, **kwargs)

    mobility_kernel = mobility.attention_velocity
    monkeypatch.setattr(mobility, "attention_velocity", kernel)
    got = energy_time_derivative(x, HeadStack(B=B, V=B.copy(), w=w), dB, beta=beta, weights=a)
    np.testing.assert_allclose(got, exact, rtol=1e-11)
    assert len(calls) == 2 and all(np.isfinite(logs).all() for logs in calls)


def test_energy_time_derivative_of_nan_is_nan_and_of_no_mass_zero():
    # NaN tokens or a NaN dB had read as +inf (the slopes give nan); masses all 0 had been refused by the softmax kernel
    from meanfield.analysis.mobility import energy_time_derivative
    from meanfield.geometry.sphere import sample_uniform

    x, heads = sample_uniform(20, 3, seed=1), HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    assert np.isnan(energy_time_derivative(x, heads, np.full((1, 3, 3), np.nan), beta=2.0))
    bad = x.copy()
    bad[0] = np.nan
    assert np.isnan(energy_time_derivative(bad, heads, np.eye(3)[None], beta=2.0))
    assert energy_time_derivative(x, heads, np.eye(3)[None], beta=2.0, weights=np.zeros(20)) == 0.0


def _mp_authors_slope_squared(x: np.ndarray, heads: HeadStack, beta: float, weights: np.ndarray, dps: int = 60) -> float:
    """The documented G² = Σ_i a_i‖P⊥v_i‖² / Σ_h w_h/Z_h(x_i) summed in ``dps``-digit mpmath (the points normalised there):
    v_i = Σ_h w_h Σ_j a_j e^{βx_iᵀB_hx_j} V_hx_j / Z_h(x_i), Z_h(x_i) = Σ_j a_j e^{βx_iᵀB_hx_j}."""
    import mpmath

    with mpmath.workdps(dps):
        pts = [mpmath.matrix([mpmath.mpf(float(c)) for c in row]) for row in x]
        pts = [p / mpmath.norm(p) for p in pts]
        B = [mpmath.matrix(b.tolist()) for b in heads.B]
        V = [mpmath.matrix(v.tolist()) for v in heads.V]
        a = [mpmath.mpf(float(m)) for m in weights]
        total = mpmath.mpf(0)
        for i, xi in enumerate(pts):
            v = mpmath.matrix(x.shape[1], 1)
            mean_b = mpmath.mpf(0)
            for h in range(heads.H):
                w = mpmath.mpf(float(heads.w[h]))
                e = [a[j] * mpmath.exp(beta * (xi.T * B[h] * pts[j])[0]) for j in range(len(pts))]
                Z = mpmath.fsum(e)
                for j, xj in enumerate(pts):
                    v += (w * e[j] / Z) * (V[h] * xj)
                mean_b += w / Z
            tangent = v - (xi.T * v)[0] * xi
            total += a[i] * (tangent.T * tangent)[0] / mean_b
        return float(total)


def test_authors_slope_where_the_own_term_dominates_with_a_non_symmetric_value_matrix():
    # V = I + εA with A the upper shift (not symmetric): the own term's tangent part is ε P⊥(A x_i), and at large β it
    # is all of G².  The transpose of V's anisotropic part gives 2.5× the slope at β = 100 (mut3 M6), which V = Vᵀ hides
    from meanfield.analysis.mobility import authors_slope_squared

    x = _POINTS / np.linalg.norm(_POINTS, axis=1, keepdims=True)
    shift = np.diag([1.0, 1.0], k=1)
    V = np.eye(3) + 1e-5 * shift
    one = HeadStack(B=np.eye(3)[None], V=V[None])
    uniform = np.full(6, 1.0 / 6)
    for beta in (100.0, 300.0):
        np.testing.assert_allclose(authors_slope_squared(x, one, beta=beta), _mp_authors_slope_squared(x, one, beta, uniform),
                                   rtol=1e-9)
    two = HeadStack(B=np.stack([np.eye(3), _B2]), V=np.stack([V, np.eye(3) + 2e-5 * shift.T]), w=np.array([0.3, 0.7]))
    np.testing.assert_allclose(authors_slope_squared(x, two, beta=200.0, weights=_MASSES),
                               _mp_authors_slope_squared(x, two, 200.0, _MASSES), rtol=1e-9)


@pytest.mark.parametrize("M, beta", [(2.0, 1.5), (0.3, 4.0), (1.0, 0.0)])
def test_lipschitz_bound_is_its_documented_formula(M, beta):
    # L = 2M + βM² + (M + 2βM²) e^{βM}, M = max_h ‖B_h‖₂: the key derivatives' term had read (M + βM²) unseen (mut3 M2),
    # the bound being far from sharp for the Jacobian test
    import math

    from meanfield.analysis.mobility import lipschitz_bound

    expected = 2 * M + beta * M**2 + (M + 2 * beta * M**2) * math.exp(beta * M)
    scalar = HeadStack(B=np.stack([M * np.eye(3), -0.5 * M * np.eye(3)]), V=np.stack([np.eye(3)] * 2))
    np.testing.assert_allclose(lipschitz_bound(scalar, beta=beta), expected, rtol=1e-14)
    rng = np.random.default_rng(7)
    B = rng.standard_normal((2, 3, 3))
    B *= M / max(np.linalg.svd(b, compute_uv=False)[0] for b in B)  # the largest operator norm is M
    np.testing.assert_allclose(lipschitz_bound(HeadStack(B=B, V=B.copy()), beta=beta), expected, rtol=1e-12)
