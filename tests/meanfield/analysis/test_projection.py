"""Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931) geometry: Assumption 1, P_E, Π, Π♯ρ₀, the distance to E_V, the zero-temperature flow."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from meanfield.errors import ConfigError
from meanfield.analysis.projection import (
    check_assumptions,
    concentration_rate,
    dominant_eigenspace,
    dominant_projector,
    eigenspace_distance,
    enforce_assumptions,
    projection_map,
    pushforward_target,
    resolution_threshold,
    resolution_warning,
    value_projector,
    zero_temperature_clock,
    zero_temperature_flow,
)
from meanfield.geometry.sphere import normalize, sample_uniform


def _rotation(rng: np.random.Generator, d: int = 3) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


# ----------------------------------------------------------------------------- Assumption 1


def test_assumptions_hold_with_hand_numbers() -> None:
    # B = QᵀK = diag(2, 1, 1), V = diag(1, 1, 0.5): S = V Bᵀ = diag(2, 1, 0.5)
    report = check_assumptions(np.eye(3), np.diag([2.0, 1.0, 1.0]), np.diag([1.0, 1.0, 0.5]))
    assert report.ok and report.failures == ()
    np.testing.assert_allclose(report.cond_B, 2.0, rtol=1e-12)
    np.testing.assert_allclose(report.eigenvalues, [2.0, 1.0, 0.5], rtol=1e-12)
    np.testing.assert_allclose(report.gap, 1.0, rtol=1e-12)
    assert report.symmetry_defect == 0.0 and report.dim_E == 1
    for number in ("cond(B) = 2", "gap μ1−μ2 = 1", "dim E = 1", "[2, 1, 0.5]", "holds"):
        assert number in report.message


def test_assumptions_multiplicity_aware(rng: np.random.Generator) -> None:
    R = _rotation(rng)
    S = R @ np.diag([3.0, 3.0, 1.0]) @ R.T  # B = I, V = S
    report = check_assumptions(np.eye(3), np.eye(3), S)
    assert report.ok and report.dim_E == 2
    np.testing.assert_allclose(report.gap, 2.0, rtol=1e-10)
    # S = I: E = R^d, no second eigenvalue, the gap is reported infinite
    trivial = check_assumptions(np.eye(3), np.eye(3), np.eye(3))
    assert trivial.ok and trivial.dim_E == 3 and math.isinf(trivial.gap)


def test_assumptions_fail_singular_nonsymmetric_nogap() -> None:
    singular = check_assumptions(np.eye(3), np.diag([1.0, 1.0, 0.0]), np.eye(3))
    assert not singular.ok and "invertible" in singular.failures
    assert math.isinf(singular.cond_B) and "cond(B) = inf" in singular.message
    shear = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    nonsym = check_assumptions(np.eye(3), np.eye(3), shear)
    assert not nonsym.ok and nonsym.failures == ("symmetric",)
    np.testing.assert_allclose(nonsym.symmetry_defect, math.sqrt(2.0) / 2.0, rtol=1e-12)  # ‖S−Sᵀ‖_F/‖S‖_F = √2/√4
    assert "0.707" in nonsym.message
    close = check_assumptions(np.eye(3), np.eye(3), np.diag([1.0, 1.0 - 1e-9, 0.5]))
    assert not close.ok and close.failures == ("gap",) and close.dim_E == 1
    np.testing.assert_allclose(close.gap, 1e-9, rtol=1e-6)


def test_enforce_assumptions_policies() -> None:
    bad = check_assumptions(np.eye(3), np.eye(3), np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]]))
    with pytest.raises(ConfigError) as info:
        enforce_assumptions(bad, "check")
    assert info.value.key == "model.heads" and "‖S−Sᵀ‖/‖S‖" in str(info.value)
    # the spectrum printed is the symmetric part's, and says so (it had been labelled S's), beside S's own
    assert "eigenvalues of (S+Sᵀ)/2 = [2, 0.5, 0]" in str(info.value) and "S's own eigenvalues are [1, 1, 0.5]" in str(info.value)
    assert "not where the zero-temperature flow" in str(info.value)
    with pytest.warns(RuntimeWarning, match="Assumption 1"):
        enforce_assumptions(bad, "warn")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert enforce_assumptions(bad, "skip") is bad
    with pytest.raises(ConfigError, match="model.assumptions"):
        enforce_assumptions(bad, "maybe")


# ----------------------------------------------------------------------------- P_E, Π, Π♯ρ₀


def test_dominant_projector_rotated(rng: np.random.Generator) -> None:
    R = _rotation(rng)
    S = R @ np.diag([2.0, 2.0, -1.0]) @ R.T
    np.testing.assert_allclose(dominant_projector(S), R[:, :2] @ R[:, :2].T, atol=1e-12)
    basis, values = dominant_eigenspace(np.diag([0.3, 1.5, 0.2]))
    np.testing.assert_allclose(np.abs(basis[:, 0]), [0.0, 1.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(values, [1.5, 0.3, 0.2], rtol=1e-15)


def test_projection_map_hand_cases() -> None:
    x = np.array([[0.6, 0.8, 0.0], [-0.28, 0.0, 0.96], [0.0, 0.6, 0.8]])
    images, orthogonal = projection_map(x, np.diag([1.0, 0.0, 0.0]))
    np.testing.assert_allclose(images[:2], [[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]], atol=0)
    assert orthogonal.tolist() == [2] and np.all(np.isnan(images[2]))
    images2, orthogonal2 = projection_map(x, np.diag([1.0, 1.0, 0.0]))
    np.testing.assert_allclose(images2, [[0.6, 0.8, 0.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], atol=1e-15)
    assert orthogonal2.size == 0


def test_pushforward_dim_one_weights_p() -> None:
    e = np.array([0.0, 0.0, 1.0])
    x0 = normalize(np.array([[0.1, 0.2, 0.9], [0.3, -0.1, 0.2], [1.0, 1.0, -0.5], [0.0, 1.0, 0.3], [-1.0, 0.0, -0.1]]))
    target = pushforward_target(x0, np.outer(e, e))
    assert target.dim_E == 1 and target.orthogonal.size == 0
    np.testing.assert_allclose(target.atoms, [e, -e], atol=0)
    np.testing.assert_allclose(target.weights, [3 / 5, 2 / 5], rtol=1e-15)
    masses = np.array([0.1, 0.2, 0.3, 0.15, 0.25])
    weighted = pushforward_target(x0, np.outer(e, e), masses)
    np.testing.assert_allclose(weighted.weights, [0.45, 0.55], rtol=1e-14)  # p = 0.1 + 0.2 + 0.15


def test_pushforward_orients_e_and_merges() -> None:
    e = normalize(np.array([-1.0, 2.0, 2.0]))  # largest entry positive: +e stays
    x0 = normalize(np.array([[-1.0, 2.0, 2.1], [1.0, -2.0, -1.9], [0.0, 0.0, 1.0]]))
    target = pushforward_target(x0, np.outer(-e, -e))
    np.testing.assert_allclose(target.atoms[0], e, atol=1e-15)
    np.testing.assert_allclose(target.weights, [2 / 3, 1 / 3], rtol=1e-15)


def test_pushforward_dim_two_and_orthogonal_tokens() -> None:
    P = np.diag([1.0, 1.0, 0.0])
    x0 = np.array([[0.6, 0.0, 0.8], [0.0, -0.6, 0.8], [0.0, 0.0, 1.0], [0.8, 0.6, 0.0]])
    masses = np.array([0.1, 0.2, 0.3, 0.4])
    with pytest.warns(RuntimeWarning, match="E\\^⊥"):
        target = pushforward_target(x0, P, masses)
    assert target.dim_E == 2
    assert target.orthogonal.tolist() == [2]
    np.testing.assert_allclose(target.orthogonal_mass, 0.3, rtol=1e-15)
    np.testing.assert_allclose(target.atoms, [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.8, 0.6, 0.0]], atol=1e-15)
    np.testing.assert_allclose(target.weights, [0.1 / 0.7, 0.2 / 0.7, 0.4 / 0.7], rtol=1e-14)


def test_a_density_s_nodes_on_the_plane_split_their_mass_and_break_no_assumption(tmp_path) -> None:
    """An icosahedral mesh has cells centred on E^⊥ = {x1 = 0}: they had been taken for tokens breaking Assumption 2
    (a raw RuntimeWarning), left out, and the exact half-space split skipped (p off by 3e-4)."""
    from meanfield.analysis.concentration import tracker_from_head
    from meanfield.geometry.mesh import initial_mass, mesh as spherical_mesh
    from meanfield.geometry.reconstruction import reconstruction_of

    x0 = np.array([[0.6, 0.8, 0.0], [0.0, 0.6, 0.8], [-0.8, 0.0, 0.6]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        target = pushforward_target(x0, np.diag([1.0, 0.0, 0.0]), np.array([0.5, 0.2, 0.3]), density=True)
    np.testing.assert_allclose(target.weights, [0.6, 0.4], rtol=1e-14)  # the node on the plane: 0.1 to each side
    mesh = spherical_mesh(642, "icosahedral")
    assert np.any(np.abs(mesh.points[:, 0]) < 1e-12)
    mass = initial_mass(mesh, "function", expr="exp(3*x+2*y)")
    e1 = np.array([1.0, 0.0, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tracker = tracker_from_head(np.eye(3), np.eye(3), np.diag([1.0, 0.5, 0.25]), mass, points=mesh.points, mesh=mesh,
                                    policy="skip")
    exact = reconstruction_of(mesh).half_space_mass(mass, e1) / mass.sum()
    np.testing.assert_allclose(tracker.target.weights, [exact, 1.0 - exact], rtol=1e-13)
    np.testing.assert_allclose(tracker.target.atoms, [e1, -e1], atol=0)


def test_w2_to_pushforward_equals_distance_to_E(rng: np.random.Generator) -> None:
    """W2(ρ, Π♯ρ) = D(ρ, E): Π maps each point to its nearest point of E∩S (a lower bound it attains)."""
    from meanfield.analysis.transport import w2

    R = _rotation(rng)
    P = dominant_projector(R @ np.diag([1.0, 0.2, 0.1]) @ R.T)
    x = sample_uniform(3000, 3, seed=5)
    target = pushforward_target(x, P)
    np.testing.assert_allclose(w2(x, target.atoms, None, target.weights), eigenspace_distance(x, P), rtol=1e-10)
    # uniform on S², E a line: E|arccos|x₁||² = ∫₀¹ arccos(u)² du = π − 2
    np.testing.assert_allclose(eigenspace_distance(x, P), math.sqrt(math.pi - 2), rtol=0.03)


# ----------------------------------------------------------------------------- E_V and distances


def test_eigenspace_distance_hand() -> None:
    theta = np.array([0.3, 1.1])
    x = np.stack([np.cos(theta), np.sin(theta), np.zeros(2)], axis=1)
    P = np.diag([1.0, 0.0, 0.0])
    np.testing.assert_allclose(eigenspace_distance(x, P), math.sqrt(np.mean(theta**2)), rtol=1e-14)
    np.testing.assert_allclose(eigenspace_distance(x, P, [3.0, 1.0]), math.sqrt((3 * 0.09 + 1.21) / 4), rtol=1e-14)
    np.testing.assert_allclose(eigenspace_distance([[0.0, 0.0, 1.0]], P), math.pi / 2, rtol=1e-15)


def test_value_projector_cases() -> None:
    V = np.array([[1.25, 0.75, 0.0], [0.75, 1.25, 0.0], [0.0, 0.0, 0.25]])
    u = np.array([1.0, 1.0, 0.0]) / math.sqrt(2)
    np.testing.assert_allclose(value_projector(V), np.outer(u, u), atol=1e-14)
    # complex pair of modulus 2 (a scaled rotation) dominates a real eigenvalue 1: the plane e1, e2
    rot = np.array([[0.0, -2.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(value_projector(rot), np.diag([1.0, 1.0, 0.0]), atol=1e-12)
    # defective eigenvalue 2 (Jordan block): its generalised eigenspace
    jordan = np.array([[2.0, 1.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(value_projector(jordan), np.diag([1.0, 1.0, 0.0]), atol=1e-7)
    # non-symmetric with real spectrum {3, 1, 0.5}: eigenvector of 3 for an upper-triangular V
    upper = np.array([[1.0, 2.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 0.5]])
    w = np.array([1.0, 1.0, 0.0]) / math.sqrt(2)  # (V − 3I) w = 0
    np.testing.assert_allclose(value_projector(upper), np.outer(w, w), atol=1e-12)
    # largest |λ| versus largest real part
    signed = np.diag([-3.0, 1.0, 2.0])
    np.testing.assert_allclose(value_projector(signed), np.diag([1.0, 0.0, 0.0]), atol=1e-15)
    np.testing.assert_allclose(value_projector(signed, which="real"), np.diag([0.0, 0.0, 1.0]), atol=1e-15)


# ----------------------------------------------------------------------------- zero temperature


def test_zero_temperature_flow_closed_forms() -> None:
    x0 = normalize(np.array([[1.0, 2.0, 3.0], [-0.5, 0.1, 2.0]]))
    s = np.array([1.0, 0.5, -0.25])
    tau = np.array([0.7, 2.0])
    expected = normalize(x0 * np.exp(np.outer(tau, s)))
    np.testing.assert_allclose(zero_temperature_flow(x0, np.diag(s), tau), expected, rtol=1e-13)
    # non-symmetric S: a rotation generator, e^{τS} is the rotation by τ about e3
    gen = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    c, si = math.cos(1.3), math.sin(1.3)
    np.testing.assert_allclose(zero_temperature_flow(x0[0], gen, 1.3), np.array([[c, -si, 0], [si, c, 0], [0, 0, 1]]) @ x0[0], atol=1e-13)


def test_zero_temperature_flow_solves_the_ode(rng: np.random.Generator) -> None:
    """d/dτ normalize(e^{τS}x0) = P⊥_x(Sx), checked by a centred difference."""
    R = _rotation(rng)
    S = R @ np.diag([1.0, 0.4, -0.3]) @ R.T
    x0 = sample_uniform(4, 3, seed=3)
    h = 1e-5
    x = zero_temperature_flow(x0, S, 0.8)
    dx = (zero_temperature_flow(x0, S, 0.8 + h) - zero_temperature_flow(x0, S, 0.8 - h)) / (2 * h)
    Sx = x @ S.T
    np.testing.assert_allclose(dx, Sx - np.sum(x * Sx, axis=1, keepdims=True) * x, atol=1e-9)


def test_zero_temperature_converges_to_projection_exponentially() -> None:
    S = np.diag([1.0, 0.5, 0.25])
    x0 = normalize(np.array([[0.3, 0.8, 0.5]]))
    pi_x0 = np.array([1.0, 0.0, 0.0])
    c = x0[0]
    for taus in (np.linspace(1.0, 5.0, 5), np.linspace(20.0, 40.0, 5)):
        x = zero_temperature_flow(np.repeat(x0, taus.size, axis=0), S, taus)
        tangent = np.linalg.norm(x[:, 1:], axis=1) / x[:, 0]  # tan d_S(x, Π(x0))
        exact = np.hypot(c[1] * np.exp(-0.5 * taus), c[2] * np.exp(-0.75 * taus)) / c[0]
        np.testing.assert_allclose(tangent, exact, rtol=1e-10)
        np.testing.assert_allclose(np.arctan(tangent), np.arccos(np.clip(x @ pi_x0, -1, 1)), atol=1e-7)
    slope = np.polyfit(taus, np.log(tangent), 1)[0]
    np.testing.assert_allclose(slope, -(1.0 - 0.5), rtol=1e-3)  # late rate = gap μ1 − μ2


def test_zero_temperature_clock_scalar_B() -> None:
    x0 = sample_uniform(3, 3, seed=0)
    t = np.array([0.0, 0.5, 2.0])
    tau = zero_temperature_clock(x0, np.diag([1.0, 0.5, 0.2]), 2.0 * np.eye(3), t)
    np.testing.assert_allclose(tau, np.outer(t / 2.0, np.ones(3)), atol=1e-12)  # |Bᵀx| = 2


# ----------------------------------------------------------------------------- rate and resolution


def test_rate_and_resolution() -> None:
    np.testing.assert_allclose(concentration_rate([1.0, 16.0]), [math.sqrt(math.log(2)), math.sqrt(math.log(17) / 16)], rtol=1e-15)
    assert resolution_threshold(16.0, 3) == 160.0
    np.testing.assert_allclose(resolution_threshold(16.0, 5), 10 * 16.0**2, rtol=1e-15)
    assert resolution_warning(160, 16.0, 3) is None
    message = resolution_warning(159, 16.0, 3)
    assert message is not None and "n = 159" in message and "160" in message


def test_zero_temperature_flow_stays_finite_at_long_clocks_and_tiny_coordinates():
    # one shift e^{-τ μ_max} for every token had underflowed a token in E^⊥ to 0/0 (NaN from τ ≈ 1500), and a
    # coordinate of 1e-200 underflowed the norm (inf, NaN); the exact points, in logarithms by hand
    from meanfield.analysis.projection import zero_temperature_flow

    S = np.diag([1.0, 0.5, 0.25])
    np.testing.assert_allclose(zero_temperature_flow([0.0, 0.6, 0.8], S, 1500.0),
                               [0.0, 1.0, np.exp(np.log(0.8 / 0.6) - 0.25 * 1500.0)], rtol=1e-12, atol=0)
    np.testing.assert_array_equal(zero_temperature_flow([0.0, 0.6, 0.8], S, 3000.0), [0.0, 1.0, 0.0])
    tiny = zero_temperature_flow([1e-200, 0.6, 0.8], S, 1500.0)  # e^{750 - 460.5} against e^{750 - 750}·0.6
    np.testing.assert_allclose(tiny, [1.0, 0.6 * np.exp(-0.5 * 1500.0 - np.log(1e-200)), 0.0], rtol=1e-10, atol=1e-280)
    x = np.array([[0.3, 0.4, np.sqrt(0.75)]])
    np.testing.assert_allclose(zero_temperature_flow(x, S, 2.0),  # a plain case against e^{τS}x/|e^{τS}x|
                               (np.exp(2.0 * np.diag(S)) * x) / np.linalg.norm(np.exp(2.0 * np.diag(S)) * x), rtol=1e-14)


@pytest.mark.parametrize("bad", [np.diag([2.0, 0.0, 0.0]), np.array([[1.0, 0.5, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])])
def test_pushforward_target_refuses_a_matrix_that_is_not_an_orthogonal_projector(bad):
    # diag(2, 0, 0) had been taken as a projector onto a plane (its trace)
    x0 = np.array([[0.6, 0.8, 0.0], [-0.6, 0.0, 0.8]])
    with pytest.raises(ValueError, match="orthogonal projector"):
        pushforward_target(x0, bad)


def test_the_assumption_check_takes_values_near_the_largest_float():
    # (found by a fuzz) V = 1e308: S + Sᵀ and ‖S‖ had overflowed, numpy's LinAlgError as a traceback; the check is
    # that of V / 2^k, its eigenvalues multiplied back
    eye = np.eye(3)
    V = np.diag([1.0, 0.5, 0.25])
    small = check_assumptions(eye, eye, V)
    large = check_assumptions(eye, eye, 1e308 * V)
    assert large.ok and large.dim_E == small.dim_E == 1
    np.testing.assert_allclose(large.eigenvalues, 1e308 * np.asarray(small.eigenvalues), rtol=1e-15)
    np.testing.assert_allclose(dominant_projector(1e308 * V), dominant_projector(V), atol=0)
    with pytest.raises(ConfigError, match=r"model\.heads: B = QᵀK or S = VBᵀ is not finite"):
        check_assumptions(1e200 * eye, 1e200 * eye, V)


def test_zero_temperature_flow_of_an_s_symmetric_to_round_off_is_the_closed_form(monkeypatch) -> None:
    # S = V Bᵀ with V = B symmetric rounds apart from its transpose: a matrix exponential per token had been taken
    import scipy.linalg

    rng = np.random.default_rng(3)
    A = rng.normal(size=(5, 5))
    B = A + A.T
    S = B @ B.T
    S[0, 1] = np.nextafter(np.nextafter(S[0, 1], np.inf), np.inf)  # two ulps apart, as V Bᵀ's products can round
    assert not np.array_equal(S, S.T)
    x0 = rng.normal(size=(6, 5))
    x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
    tau = np.linspace(0.0, 0.3, 6)
    z = np.stack([scipy.linalg.expm(t * S) @ x for t, x in zip(tau, x0)])  # the independent reference
    expected = z / np.linalg.norm(z, axis=1, keepdims=True)

    def refused(*_args, **_kwargs):
        raise AssertionError("a matrix exponential was taken for an S symmetric to round-off")

    monkeypatch.setattr(scipy.linalg, "expm", refused)
    np.testing.assert_allclose(zero_temperature_flow(x0, S, tau), expected, rtol=0, atol=1e-12)
    skew = S + 1e-6 * np.triu(np.ones((5, 5)), 1)  # a truly non-symmetric S still takes the exponential
    with pytest.raises(AssertionError, match="matrix exponential"):
        zero_temperature_flow(x0, skew, tau)


def test_the_eigenspace_is_the_same_for_a_small_s_as_for_its_multiples() -> None:
    # (found in review) the multiplicity tolerance had an absolute floor: S = 1e-11·diag(2, 1, 0.5) had been given
    # E = R³ (Π the identity, Π♯ρ₀ = ρ₀) and 1e-9·S had failed the gap check, where the relative gap is 50 %
    from meanfield.analysis.projection import check_assumptions, dominant_eigenspace, dominant_projector

    for s in (1.0, 1e-9, 1e-11, 1e-200):
        S = s * np.diag([2.0, 1.0, 0.5])
        report = check_assumptions(np.eye(3), np.eye(3), S)
        assert report.ok and report.dim_E == 1, (s, report)
        np.testing.assert_allclose(dominant_projector(S), np.diag([1.0, 0.0, 0.0]), atol=1e-15)
        assert dominant_eigenspace(S)[0].shape == (3, 1)
    report = check_assumptions(np.eye(3), np.eye(3), np.zeros((3, 3)))  # every eigenvalue equal: E = R³, as for S = I
    assert report.dim_E == 3


def test_a_density_s_unnormalised_masses_on_the_plane_split_by_their_own_size() -> None:
    # the nodes on E^⊥ give half their mass to each side: orthogonal_mass is a fraction, so it is scaled back by the
    # total; with masses summing to 1 the two agree, and the fraction alone had passed (mut3 P9: (0.722, 0.278))
    e = np.array([1.0, 0.0, 0.0])
    x0 = np.array([e, -e, [0.0, 1.0, 0.0], [0.0, 0.6, 0.8]])
    masses = np.array([3.0, 1.0, 2.0, 2.0])
    target = pushforward_target(x0, np.outer(e, e), masses, density=True)
    np.testing.assert_allclose(target.weights, [(3.0 + 2.0) / 8.0, (1.0 + 2.0) / 8.0], rtol=1e-14)
    np.testing.assert_allclose(target.orthogonal_mass, 0.5, rtol=1e-14)
    x0 = np.array([[0.6, 0.8, 0.0], [0.0, 0.6, 0.8], [-0.8, 0.0, 0.6]])  # the example above, masses ×8
    target = pushforward_target(x0, np.diag([1.0, 0.0, 0.0]), 8 * np.array([0.5, 0.2, 0.3]), density=True)
    np.testing.assert_allclose(target.weights, [0.6, 0.4], rtol=1e-14)
