"""Sphere geometry and the initial-measure samplers."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from meanfield.errors import ConfigError
from meanfield.geometry import sphere


def test_projection_is_tangent_and_idempotent(rng):
    x = sphere.sample_uniform(50, 5, seed=1)
    u = rng.standard_normal((50, 5))
    p = sphere.project_tangent(x, u)
    np.testing.assert_allclose(np.sum(p * x, axis=1), 0.0, atol=1e-14)
    np.testing.assert_allclose(sphere.project_tangent(x, p), p, atol=1e-14)


def test_geodesic_distance_against_arccos_and_extremes(rng):
    x = sphere.sample_uniform(200, 4, seed=2)
    y = sphere.sample_uniform(200, 4, seed=3)
    np.testing.assert_allclose(sphere.geodesic_distance(x, y), np.arccos(np.clip(np.sum(x * y, 1), -1, 1)), atol=1e-7)
    np.testing.assert_allclose(sphere.geodesic_distance(x, -x), np.pi, rtol=1e-15)
    np.testing.assert_allclose(sphere.geodesic_distance(x, x), 0.0, atol=0)


def test_exp_log_are_inverse(rng):
    x = sphere.sample_uniform(30, 3, seed=4)
    y = sphere.sample_uniform(30, 3, seed=5)
    v = sphere.log_map(x, y)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), sphere.geodesic_distance(x, y), rtol=1e-12)
    np.testing.assert_allclose(sphere.exp_map(x, v), y, atol=1e-12)


def test_uniform_sampler_moments():
    x = sphere.sample_uniform(40000, 3, seed=6)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-15)
    np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=0.02)
    np.testing.assert_allclose(x.T @ x / len(x), np.eye(3) / 3, atol=0.01)


@pytest.mark.parametrize("kappa", [0.5, 4.0, 40.0])
def test_vmf_mean_resultant_length_on_s2(kappa):
    # on S² the mean cosine is coth(κ) − 1/κ (Langevin function)
    mean = np.array([1.0, 2.0, 2.0]) / 3.0
    x = sphere.sample_vmf(60000, 3, mean=mean, kappa=kappa, seed=7)
    cos = x @ mean
    np.testing.assert_allclose(cos.mean(), 1 / np.tanh(kappa) - 1 / kappa, atol=0.006)
    # the part orthogonal to the mean is isotropic
    perp = x - np.outer(cos, mean)
    np.testing.assert_allclose(perp.mean(axis=0), 0.0, atol=0.01)


def test_equiangular_and_orthogonal_gram():
    x = sphere.sample_equiangular(6, 9, gamma=0.3, seed=8)
    gram = x @ x.T
    np.testing.assert_allclose(gram, 0.7 * np.eye(6) + 0.3, atol=1e-13)
    q = sphere.sample_orthogonal(5, 7, seed=9)
    np.testing.assert_allclose(q @ q.T, np.eye(5), atol=1e-13)
    with pytest.raises(ValueError, match="n <= d"):
        sphere.sample_orthogonal(8, 7)
    with pytest.raises(ValueError, match="gamma"):
        sphere.sample_equiangular(4, 4, gamma=-0.5)


def test_load_points(tmp_path):
    path = tmp_path / "x0.npy"
    np.save(path, np.array([[2.0, 0, 0], [0, 0, 3.0]]))
    np.testing.assert_allclose(sphere.load_points(path, d=3), [[1, 0, 0], [0, 0, 1]])
    with pytest.raises(ValueError, match="d=4"):
        sphere.load_points(path, d=4)
    np.save(path, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="zero"):
        sphere.load_points(path)
    # rows whose squares leave float64: 1e-200s had been called zero, 1e200s had become 0
    rows = np.array([[3.0, 4.0, 0.0], [3e-200, 0.0, 4e-200], [0.0, 3e200, 4e200]])
    np.save(path, rows)
    np.testing.assert_allclose(sphere.load_points(path), [[0.6, 0.8, 0.0], [0.6, 0.0, 0.8], [0.0, 0.6, 0.8]], rtol=0, atol=2e-16)
    unit = sphere.sample_uniform(50, 3, seed=4)
    np.save(path, unit)
    np.testing.assert_array_equal(sphere.load_points(path), unit / np.linalg.norm(unit, axis=1, keepdims=True))  # as before
    np.save(path, unit.astype(np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a float32 file had warned of an overflow in a cast
        assert sphere.load_points(path).dtype == np.float64


def test_load_points_refuses_entries_that_are_no_real_numbers_and_no_rows(tmp_path):
    # complex tokens had lost their imaginary part, strings and (0, d) arrays had been tracebacks of the run
    path = tmp_path / "x0.npy"
    for array, words in ((np.eye(3) * (1 + 1j), "complex128, not real numbers"), (np.array([["a"] * 3] * 2), "not real numbers"),
                         (np.zeros((0, 3)), "n >= 1")):
        np.save(path, array)
        with pytest.raises(ValueError, match=words):
            sphere.load_points(path)
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))  # (NumPy: "pickled data")
    with pytest.raises(ConfigError, match="not a NumPy .npy file") as info:
        sphere.load_points(path)
    assert info.value.key == "init.path"


def test_unit_rows_neither_underflow_nor_overflow():
    x = np.array([[3.0, 4.0], [3e-200, 4e-200], [3e200, 4e200], [0.0, 0.0], [np.nan, 1.0], [1.5e308, 1.5e308]])
    units, norms = sphere.unit_rows(x)
    np.testing.assert_allclose(units[:3], [[0.6, 0.8]] * 3, rtol=0, atol=2e-16)
    np.testing.assert_allclose(norms[:3], [5.0, 5e-200, 5e200], rtol=1e-15)
    assert norms[3] == 0 and np.all(np.isnan(units[3:5])) and np.isnan(norms[4])
    assert np.isinf(norms[5]) and np.allclose(units[5], [2 ** -0.5] * 2)  # beyond float64: the direction still
    plain = np.random.default_rng(0).standard_normal((20, 5))
    np.testing.assert_array_equal(sphere.unit_rows(plain)[0], plain / np.linalg.norm(plain, axis=1, keepdims=True))


def test_sampler_registry_is_complete():
    assert set(sphere.SAMPLERS) == {"uniform", "vmf", "fibonacci", "clusters", "equiangular", "orthogonal", "file"}
    with pytest.raises(ValueError, match="unknown initial measure"):
        sphere.sample("gaussian", 3, 3)


@pytest.mark.parametrize("d", [1, 3, 384])
def test_compiled_row_passes_match_numpy(rng, d):
    """normalize, project_tangent (with its scale) and normalized_combination, compiled on (n, d) float64 rows,
    against the NumPy expressions; strided and float32 inputs take NumPy's path and agree too."""
    x = rng.standard_normal((40, d))
    u, v, w = (rng.standard_normal((40, d)) for _ in range(3))
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(sphere.normalize(x), unit, rtol=1e-15, atol=1e-16)
    tangent = u - np.sum(unit * u, axis=1, keepdims=True) * unit
    scale = max(1.0, float(np.max(np.abs(u))))
    for factor in (1.0, -1.0, 0.25):
        np.testing.assert_allclose(sphere.project_tangent(unit, u, scale=factor), factor * tangent, rtol=0, atol=1e-14 * scale)
    for k in range(1, 4):
        coefficients, vectors = [0.3, -0.2, 0.05][:k], [u, v, w][:k]
        y = unit + sum(c * vec for c, vec in zip(coefficients, vectors))
        np.testing.assert_allclose(sphere.normalized_combination(unit, coefficients, vectors), y / np.linalg.norm(y, axis=1, keepdims=True),
                                   rtol=0, atol=1e-15)
    strided = np.asfortranarray(x)  # not C-contiguous: NumPy's path
    np.testing.assert_allclose(sphere.normalize(strided), unit, rtol=1e-15, atol=1e-16)
    np.testing.assert_allclose(sphere.project_tangent(unit, np.asfortranarray(u), scale=-1.0), -tangent, rtol=0, atol=1e-14 * scale)
    np.testing.assert_allclose(sphere.normalize(x.astype(np.float32)), unit, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(sphere.project_tangent(unit[0], u[0]), tangent[0], rtol=0, atol=1e-14 * scale)  # one point, (d,)


@pytest.mark.parametrize("kappa", [1e14, 1e20, 1e28])
def test_vmf_keeps_its_spread_past_the_rounding_of_the_cosine(kappa):
    # (found in review) past κ ≈ 1e16 the points had been built from ⟨μ, x⟩ rounded to 1: every point exactly the mean,
    # where the spread √(2/κ) is representable; κ|P⊥x|²/2 follows Gamma((d-1)/2) (the tangent part is Gaussian)
    from scipy import stats

    for d in (3, 5):
        x = sphere.sample_vmf(4000, d, kappa=kappa, seed=1)
        tangent = np.sum(x[:, :-1] ** 2, axis=1)  # the mean is e_d
        assert not np.any(tangent == 0)
        assert stats.kstest(kappa * tangent / 2, stats.gamma((d - 1) / 2).cdf).pvalue > 1e-3


def test_cluster_centres_of_huge_or_tiny_entries_keep_their_direction():
    """(A centre of 1e308s had a norm of inf and became 0: the tokens were uniform, with overflow warnings.)"""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        centres = sphere.cluster_centers([[1e308, 1e308, 0.0], [0.0, 1e-200, 0.0]], 3)
        np.testing.assert_allclose(centres, [[2 ** -0.5, 2 ** -0.5, 0.0], [0.0, 1.0, 0.0]], rtol=1e-15, atol=0)
        x = sphere.sample_clusters(8, 3, centers=[[1e308, 1e308, 0.0]], spread=0.01, seed=1)
    np.testing.assert_allclose(x @ centres[0], np.ones(8), rtol=0, atol=1e-2)
    with pytest.raises(ValueError, match="center 0 is zero"):
        sphere.cluster_centers([[0.0, 0.0, 0.0]], 3)


def test_random_rotations_are_haar_distributed():
    # Haar on O(3): E[Q] = 0 and E[Q_ij^2] = 1/3; each entry's Monte-Carlo s.e. is about 1/sqrt(3 S)
    S, d = 2000, 3
    Q = np.stack([sphere.sample_orthogonal(d, d, seed=s) for s in range(1, S + 1)])
    se = 1.0 / np.sqrt(d * S)
    np.testing.assert_allclose(Q.mean(axis=0), np.zeros((d, d)), rtol=0, atol=5 * se)
    np.testing.assert_allclose((Q**2).mean(axis=0), np.full((d, d), 1.0 / d), rtol=0, atol=0.03)
