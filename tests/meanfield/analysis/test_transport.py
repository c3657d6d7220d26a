"""Tests for meanfield.analysis.transport: closed forms, cross-checks, invariants, errors."""
from __future__ import annotations

import math
import warnings

import numpy as np
import ot
import pytest
from scipy.optimize import linear_sum_assignment

from meanfield.analysis import transport
from meanfield.analysis.transport import cost_matrix, w2, w2_to_atoms

COSTS = ["geodesic", "chordal"]


def sphere(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    z = rng.standard_normal((n, d))
    return z / np.linalg.norm(z, axis=1, keepdims=True)


def circle(angles: np.ndarray, frame: np.ndarray | None = None) -> np.ndarray:
    """Points at ``angles`` on the great circle spanned by the 2 columns of ``frame``."""
    pts = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    return pts if frame is None else pts @ frame.T


def frame(rng: np.random.Generator, d: int) -> np.ndarray:
    """Random orthonormal (d, 2) frame."""
    q, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    return q


def chord(theta):
    return 2.0 * np.sin(np.asarray(theta) / 2.0)


# ----------------------------------------------------------------------------
# exact: cross-checks with scipy and with ot.emd2
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("cost", COSTS)
@pytest.mark.parametrize("d", [2, 3, 6])
def test_exact_equals_assignment(rng, cost, d):
    n = 40
    x, y = sphere(rng, n, d), sphere(rng, n, d)
    C = cost_matrix(x, y, cost=cost)
    r, c = linear_sum_assignment(C)
    expected = np.sqrt(C[r, c].mean())
    value, log = w2(x, y, cost=cost, log=True)
    np.testing.assert_allclose(value, expected, rtol=1e-12, atol=0)
    assert log["converged"] and log["solver"] == "emd2"
    np.testing.assert_allclose(log["plan"].sum(axis=1), np.full(n, 1 / n), atol=1e-15)
    np.testing.assert_allclose(log["plan"].sum(axis=0), np.full(n, 1 / n), atol=1e-15)
    np.testing.assert_allclose(np.sum(log["plan"] * C), value**2, rtol=1e-12)
    assert set(log) >= {"method", "cost", "time", "plan", "w2_squared", "converged"}
    assert log["method"] == "exact" and log["cost"] == cost


@pytest.mark.parametrize("cost", COSTS)
def test_cost_matrix_definitions(rng, cost, monkeypatch):
    x, y = sphere(rng, 30, 4), sphere(rng, 20, 4)
    g = np.clip(x @ y.T, -1, 1)
    expected = np.arccos(g) ** 2 if cost == "geodesic" else np.sum(
        (x[:, None] - y[None]) ** 2, axis=-1)
    direct = cost_matrix(x, y, cost=cost)
    np.testing.assert_allclose(direct, expected, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(cost_matrix(x, y, cost=cost, squared=False),
                               np.sqrt(expected), rtol=1e-10, atol=1e-7)
    # with every entry recomputed from exact differences the matrix agrees
    monkeypatch.setattr(transport, "_NEAR", 2.0)
    np.testing.assert_allclose(cost_matrix(x, y, cost=cost), direct, rtol=0, atol=1e-13)


def test_cost_matrix_small_angles_are_accurate():
    theta = 1e-9
    x = circle(np.array([0.0]))
    y = circle(np.array([theta]))
    np.testing.assert_allclose(cost_matrix(x, y, squared=False)[0, 0], theta, rtol=1e-6)
    np.testing.assert_allclose(cost_matrix(x, y, cost="chordal", squared=False)[0, 0],
                               chord(theta), rtol=1e-6)
    np.testing.assert_allclose(cost_matrix(x, -x, squared=False)[0, 0], np.pi, rtol=1e-15)


def _unit(z: np.ndarray) -> np.ndarray:
    """Rows normalised as a user would (unit to rounding)."""
    return z / np.sqrt(np.einsum("ij,ij->i", z, z))[:, None]


def _slow_costs(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Independent pairwise costs, one pair at a time (norms, arccos, arctan2), between the exact quotients
    x/||x||, y/||y||, without forming them: ||x/|x| -+ y/|y|||^2 = (||x -+ y||^2 - (|x| - |y|)^2) / (|x| |y|), in
    extended precision where the platform has it (a rounded quotient would be an ulp off, 1e-8 of a distance 1e-8)."""
    x, y = np.asarray(x, dtype=np.longdouble), np.asarray(y, dtype=np.longdouble)
    nx, ny = np.sqrt((x * x).sum(axis=1)), np.sqrt((y * y).sum(axis=1))
    n, m = x.shape[0], y.shape[0]
    chord2, acos, atan = np.empty((n, m)), np.empty((n, m)), np.empty((n, m))
    for i in range(n):
        for j in range(m):
            radial, scale = (nx[i] - ny[j]) ** 2, nx[i] * ny[j]
            dm = np.sqrt(max(((x[i] - y[j]) ** 2).sum() - radial, 0.0) / scale)
            dp = np.sqrt(max(((x[i] + y[j]) ** 2).sum() - radial, 0.0) / scale)
            chord2[i, j] = dm * dm
            acos[i, j] = np.arccos(np.clip(np.dot(x[i], y[j]) / scale, -1.0, 1.0))
            atan[i, j] = 2.0 * np.arctan2(dm, dp)  # stable at both ends
    return {"chordal": chord2, "arccos": acos, "geodesic": atan**2}


def _planted_clouds(rng: np.random.Generator, n: int, d: int, tiny: float = 1e-8):
    """x and y with y_i at distance ~tiny from x_i for a third of the points, antipodal
    (exactly, or within ~tiny) for a third, and random for the rest."""
    x = _unit(sphere(rng, n, d))
    y = _unit(sphere(rng, n, d))
    k = n // 3
    y[:k] = _unit(x[:k] + tiny * rng.standard_normal((k, d)))
    y[k:k + k // 2] = -x[k:k + k // 2]
    y[k + k // 2:2 * k] = _unit(-x[k + k // 2:2 * k] + tiny * rng.standard_normal((k - k // 2, d)))
    return x, y


@pytest.mark.parametrize("d", [2, 3, 7])
def test_cost_matrix_against_slow_reference(rng, d):
    x, y = _planted_clouds(rng, 45, d)
    ref = _slow_costs(x, y)
    chordal = cost_matrix(x, y, cost="chordal")
    np.testing.assert_allclose(chordal, ref["chordal"], rtol=1e-12, atol=0)
    geo = cost_matrix(x, y, cost="geodesic", squared=False)
    np.testing.assert_allclose(geo, np.sqrt(ref["geodesic"]), rtol=1e-12, atol=0)
    # np.arccos itself is only good to ~1e-8 at <x, y> = ±1
    np.testing.assert_allclose(geo, ref["arccos"], rtol=0, atol=3e-8)
    np.testing.assert_allclose(cost_matrix(x, y, cost="geodesic"), ref["geodesic"], rtol=1e-12, atol=0)
    # the planted pairs really are at ~1e-8 and at pi - ~1e-8 (or pi exactly)
    k = 15
    assert np.all(np.diag(geo)[:k] < 1e-7) and np.all(np.diag(geo)[:k] > 1e-10)
    np.testing.assert_array_equal(np.diag(geo)[k:k + k // 2], np.pi)
    assert np.all(np.pi - np.diag(geo)[k + k // 2:2 * k] < 1e-7)


@pytest.mark.parametrize("cost", COSTS)
@pytest.mark.parametrize("d", [3, 5])
def test_w2_against_assignment_with_planted_pairs(rng, cost, d):
    n = 60
    x, y = _planted_clouds(rng, n, d)
    C = _slow_costs(x, y)[cost]
    r, c = linear_sum_assignment(C)
    expected = np.sqrt(C[r, c].mean())
    value, log = w2(x, y, cost=cost, log=True)
    assert log["solver"] == "emd2" and log["converged"]
    np.testing.assert_allclose(value, expected, rtol=1e-12, atol=0)
    np.testing.assert_allclose(log["w2_squared"], np.sum(log["plan"] * C), rtol=1e-12)


@pytest.mark.parametrize("cost", COSTS)
def test_w2_of_clouds_1e8_apart_keeps_relative_accuracy(rng, cost):
    n, tiny = 50, 1e-8
    x = _unit(sphere(rng, n, 3))
    y = _unit(x + tiny * rng.standard_normal((n, 3)))
    C = _slow_costs(x, y)[cost]
    r, c = linear_sum_assignment(C)
    expected = np.sqrt(C[r, c].mean())
    assert 1e-10 < expected < 1e-7
    np.testing.assert_allclose(w2(x, y, cost=cost), expected, rtol=1e-10, atol=0)
    np.testing.assert_allclose(w2(x, -y, cost=cost), np.sqrt(_slow_costs(x, -y)[cost][
        linear_sum_assignment(_slow_costs(x, -y)[cost])].mean()), rtol=1e-12, atol=0)


@pytest.mark.parametrize("cost", COSTS)
def test_costs_of_pairs_1e8_apart_are_those_of_the_users_points_to_round_off(rng, cost):
    # points normalised the usual way (x / np.linalg.norm(x)), 1e-8 apart: their distance is fixed by them to a few
    # 1e-16 (the exact quotients x/||x|| against the floats), and renormalising them again had moved each by an ulp,
    # 7e-9 relative in the squared cost; the reference is 40-digit arithmetic on the exact quotients
    import mpmath
    mpmath.mp.dps = 40
    x = rng.standard_normal((40, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    step = rng.standard_normal((40, 3))
    step -= np.einsum("ij,ij->i", step, x)[:, None] * x
    y = np.cos(1e-8) * x + np.sin(1e-8) * step / np.linalg.norm(step, axis=1, keepdims=True)
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    got = np.diag(cost_matrix(x, y, cost=cost))

    def unit(v):
        v = [mpmath.mpf(float(c)) for c in v]
        norm = mpmath.sqrt(sum(c * c for c in v))
        return [c / norm for c in v]

    exact = []
    for u, v in zip(x, y):
        chord = mpmath.sqrt(sum((a - b) ** 2 for a, b in zip(unit(u), unit(v))))
        exact.append(float(chord**2 if cost == "chordal" else (2 * mpmath.asin(chord / 2)) ** 2))
    np.testing.assert_allclose(got, exact, rtol=2e-15, atol=0)


def test_cost_matrix_large_block_matches_reference(rng):
    """Many rows and columns (both compiled passes over several rows and threads)."""
    x, y = _planted_clouds(rng, 300, 4)
    ref_x, ref_y = x[::7], y[::5]
    full = cost_matrix(x, y, cost="geodesic")
    np.testing.assert_allclose(full[::7, ::5], _slow_costs(ref_x, ref_y)["geodesic"], rtol=1e-12, atol=0)


# ----------------------------------------------------------------------------
# closed forms on a great circle
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("theta", [1e-4, 0.3, 1.7, 3.0, np.pi])
def test_two_diracs(rng, d, theta):
    F = frame(rng, d)
    x, y = circle(np.array([0.0]), F), circle(np.array([theta]), F)
    np.testing.assert_allclose(w2(x, y), theta, rtol=1e-10)
    np.testing.assert_allclose(w2(x, y, cost="chordal"), chord(theta), rtol=1e-10)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("alpha", [1e-3, 0.02, 0.05])
def test_rotated_uniform_cloud(rng, d, alpha):
    # n evenly spaced points: a rotation by alpha <= pi/n moves each point by alpha,
    # and no cyclic re-matching is cheaper
    n = 60
    F = frame(rng, d)
    t = 2 * np.pi * np.arange(n) / n
    assert alpha <= np.pi / n
    x, y = circle(t, F), circle(t + alpha, F)
    np.testing.assert_allclose(w2(x, y), alpha, rtol=1e-9)
    np.testing.assert_allclose(w2(x, y, cost="chordal"), chord(alpha), rtol=1e-9)


@pytest.mark.parametrize("p,q", [(0.5, 0.5), (0.3, 0.7), (1.0, 0.0), (0.9, 0.2)])
def test_poles_mass_transfer(rng, p, q):
    d = 4
    e = sphere(rng, 1, d)
    atoms = np.vstack([e, -e])
    expected_geo = np.sqrt(abs(p - q)) * np.pi
    expected_ch = np.sqrt(abs(p - q)) * 2.0
    np.testing.assert_allclose(w2(atoms, atoms, [p, 1 - p], [q, 1 - q]), expected_geo,
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        w2(atoms, atoms, [p, 1 - p], [q, 1 - q], cost="chordal"), expected_ch,
        rtol=1e-12, atol=1e-15)
    # the same measure as a cloud with repeated points (merged before solving)
    n = 50
    k = int(round(p * n))
    cloud = np.vstack([np.repeat(e, k, axis=0), np.repeat(-e, n - k, axis=0)])
    # (the sum of 50 weights 1/50 is off by ~1e-16, ~3e-8 after the square root)
    np.testing.assert_allclose(w2_to_atoms(cloud, atoms, b=[q, 1 - q]), expected_geo,
                               rtol=1e-12, atol=1e-7)


# ----------------------------------------------------------------------------
# metric properties
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("cost", COSTS)
def test_zero_on_identical_measures(rng, cost):
    x = sphere(rng, 50, 3)
    a = rng.random(50)
    a /= a.sum()
    assert w2(x, x, a, a, cost=cost) == 0.0
    # the same measure with the atoms permuted
    perm = rng.permutation(50)
    np.testing.assert_allclose(w2(x, x[perm], a, a[perm], cost=cost), 0.0, atol=1e-12)


@pytest.mark.parametrize("cost", COSTS)
@pytest.mark.parametrize("seed", range(4))
def test_symmetry_and_triangle_inequality(cost, seed):
    rng = np.random.default_rng(seed)
    d = 3
    xs = [sphere(rng, n, d) for n in (25, 30, 35)]
    ws = [rng.random(len(x)) for x in xs]
    ws = [w / w.sum() for w in ws]
    D = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            D[i, j] = w2(xs[i], xs[j], ws[i], ws[j], cost=cost)
    np.testing.assert_allclose(D, D.T, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.diag(D), 0.0, atol=1e-15)
    for i, j, k in [(0, 1, 2), (1, 2, 0), (2, 0, 1)]:
        assert D[i, k] <= D[i, j] + D[j, k] + 1e-12


def test_geodesic_and_chordal_are_comparable(rng):
    # ||x - y|| <= arccos<x,y> <= (pi/2) ||x - y||  carries over to W2
    x, y = sphere(rng, 30, 3), sphere(rng, 30, 3)
    g, c = w2(x, y), w2(x, y, cost="chordal")
    assert c <= g <= np.pi / 2 * c


# ----------------------------------------------------------------------------
# weights, masses, merging
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("cost", COSTS)
def test_points_off_the_sphere_within_the_tolerance_are_renormalised(rng, cost):
    # norms 1 ± 5e-7 (accepted, |‖x‖ − 1| ≤ 1e-6) give the values of the unit points: taken as given, the Gram matrix had
    # moved the costs by about 1e-6
    x, y = sphere(rng, 9, 3), sphere(rng, 7, 3)
    xs = x * (1.0 + 5e-7 * rng.choice([-1.0, 1.0], size=(9, 1)))
    np.testing.assert_allclose(cost_matrix(xs, y, cost=cost), cost_matrix(x, y, cost=cost), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(w2(xs, y, cost=cost), w2(x, y, cost=cost), rtol=1e-12)


def test_common_total_mass_is_normalised(rng):
    x, y = sphere(rng, 10, 3), sphere(rng, 12, 3)
    a, b = rng.random(10), rng.random(12)
    b *= 3.0 / b.sum()
    a *= 3.0 / a.sum()
    np.testing.assert_allclose(w2(x, y, a, b), w2(x, y, a / 3, b / 3), rtol=1e-12)


def test_duplicates_and_zero_weights_map_back(rng):
    base = sphere(rng, 8, 3)
    x = np.vstack([base, base[:5]])              # 5 duplicated atoms
    a = rng.random(13)
    a[2] = 0.0                                   # a zero weight
    a /= a.sum()
    y = sphere(rng, 9, 3)
    v1, log1 = w2(x, y, a, log=True)
    v2, log2 = w2(x, y, a, log=True, merge_duplicates=False)
    np.testing.assert_allclose(v1, v2, rtol=1e-12)
    assert log1["merged_sizes"] == (8, 9)
    P = log1["plan"]
    assert P.shape == (13, 9)
    np.testing.assert_allclose(P.sum(axis=1), a, atol=1e-15)
    np.testing.assert_allclose(P.sum(axis=0), np.full(9, 1 / 9), atol=1e-15)
    np.testing.assert_allclose(np.sum(P * cost_matrix(x, y)), v1**2, rtol=1e-12)


def test_duplicates_on_the_second_side_split_their_merged_mass_in_proportion_to_their_weights(rng):
    # y, the smaller side, is merged first; the plan maps back to each copy of a repeated atom its own share
    base = sphere(rng, 3, 3)
    y = np.vstack([base, base[:2]])                      # atoms 0 and 1 repeated, with other weights
    b = np.array([0.05, 0.2, 0.25, 0.3, 0.2])
    x = sphere(rng, 7, 3)
    a = rng.random(7)
    a /= a.sum()
    value, info = w2(x, y, a, b, log=True)
    assert info["merged_sizes"] == (7, 3)
    C = np.arccos(np.clip(x @ y.T, -1.0, 1.0)) ** 2      # the geodesic cost, written here
    np.testing.assert_allclose(value**2, ot.emd2(a, b, C), rtol=1e-10)  # the unmerged LP
    P = info["plan"]
    np.testing.assert_allclose(P.sum(axis=0), b, rtol=0, atol=1e-14)
    np.testing.assert_allclose(P.sum(axis=1), a, rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.sum(P * C), value**2, rtol=1e-10)


def test_rows_sharing_a_coordinate_are_not_merged_and_repeats_among_them_are(rng):
    # the merge first looks for two rows with the same first coordinate: rows that share it but differ
    # elsewhere stay apart, and a repeat among them (not next to its twin once sorted by x_0) is merged
    t = np.linspace(0.3, 2.5, 6)
    ring = np.c_[np.full(6, 0.6), 0.8 * np.cos(t), 0.8 * np.sin(t)]  # six points with x_0 = 0.6
    x = np.vstack([ring, sphere(rng, 4, 3), ring[1:2]])           # ring[1] repeated at the end
    y = sphere(rng, 7, 3)
    v1, log1 = w2(x, y, log=True)
    v2, log2 = w2(x, y, log=True, merge_duplicates=False)
    assert log1["merged_sizes"] == (10, 7) and log2["merged_sizes"] == (11, 7)
    np.testing.assert_allclose(v1, v2, rtol=1e-12)
    np.testing.assert_allclose(log1["plan"].sum(axis=1), np.full(11, 1 / 11), atol=1e-15)
    z = sphere(rng, 12, 3)  # no shared first coordinate: nothing merged, the same value
    assert w2(z, y, log=True)[1]["merged_sizes"] == (12, 7)
    np.testing.assert_allclose(w2(z, y), w2(z, y, merge_duplicates=False), rtol=0, atol=0)


# ----------------------------------------------------------------------------
# few atoms: structured exact solvers
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("cost", COSTS)
def test_two_atoms_matches_emd2(rng, cost):
    n = 500
    x, atoms = sphere(rng, n, 3), sphere(rng, 2, 3)
    a, b = rng.random(n), np.array([0.37, 0.63])
    a /= a.sum()
    C = cost_matrix(x, atoms, cost=cost)
    ref = ot.emd2(a, b, C, numItermax=10**7)
    value, log = w2_to_atoms(x, atoms, a, b, cost=cost, log=True)
    assert log["solver"] == "two_atoms_greedy"
    np.testing.assert_allclose(value**2, ref, rtol=1e-12)
    np.testing.assert_allclose(log["plan"].sum(axis=1), a, atol=1e-15)
    np.testing.assert_allclose(log["plan"].sum(axis=0), b, atol=1e-14)
    assert np.all(log["plan"] >= 0)
    # the few-atoms side may be either argument
    value_t, log_t = w2(atoms, x, b, a, cost=cost, log=True)
    np.testing.assert_allclose(value_t, value, rtol=1e-14)
    np.testing.assert_allclose(log_t["plan"], log["plan"].T, atol=1e-15)


def test_one_atom_closed_form(rng):
    x, e = sphere(rng, 200, 3), sphere(rng, 1, 3)
    a = rng.random(200)
    a /= a.sum()
    np.testing.assert_allclose(w2_to_atoms(x, e, a), np.sqrt(a @ cost_matrix(x, e)[:, 0]),
                               rtol=1e-13)


def test_two_atoms_large_n_uses_no_dense_plan(rng):
    """n = 1e5 against 2 atoms: the closed form, no n×m LP (its time is in meanfield bench, not here)."""
    import tracemalloc

    x, atoms = sphere(rng, 100_000, 3), sphere(rng, 2, 3)
    tracemalloc.start()
    value = w2_to_atoms(x, atoms, b=[0.2, 0.8])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert np.isfinite(value) and 0 < value < np.pi
    assert peak < 64 * x.nbytes  # O(n) work arrays; a plan over every pair of a full LP would be far larger


@pytest.mark.parametrize("clustered", [False, True])
def test_certified_few_atoms_matches_emd2(rng, clustered):
    n, k = 20_000, 5                              # n above the certified-path threshold
    atoms = sphere(rng, k, 3)
    if clustered:                                 # tight clusters around the atoms
        x = atoms[rng.integers(0, k, n)] + 0.05 * rng.standard_normal((n, 3))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    else:
        x = sphere(rng, n, 3)
    a, b = rng.random(n), rng.random(k)
    a /= a.sum()
    b /= b.sum()
    value, log = w2_to_atoms(x, atoms, a, b, log=True)
    assert log["solver"] == "few_atoms_certified" and log["converged"]
    ref = ot.emd2(a, b, cost_matrix(x, atoms), numItermax=10**8)
    np.testing.assert_allclose(value**2, ref, rtol=1e-10)
    np.testing.assert_allclose(log["plan"].sum(axis=1), a, atol=1e-15)
    np.testing.assert_allclose(log["plan"].sum(axis=0), b, atol=1e-12)


def test_emd_non_convergence_warns(rng):
    x, y = sphere(rng, 30, 3), sphere(rng, 30, 3)
    with pytest.warns(RuntimeWarning, match="did not reach optimality"):
        _, log = w2(x, y, log=True, numItermax=2)
    assert not log["converged"]


# ----------------------------------------------------------------------------
# Sinkhorn divergence
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("cost", COSTS)
@pytest.mark.parametrize("eps", [0.05, 0.02])
def test_sinkhorn_within_stated_bias(rng, cost, eps):
    x, y = sphere(rng, 40, 3), sphere(rng, 30, 3)
    a, b = rng.random(40), rng.random(30)
    a /= a.sum()
    b /= b.sum()
    exact = w2(x, y, a, b, cost=cost)
    value, log = w2(x, y, a, b, cost=cost, method="sinkhorn", epsilon=eps, log=True)
    assert log["converged"]
    H = max(-np.sum(a * np.log(a)), -np.sum(b * np.log(b)))
    np.testing.assert_allclose(log["bias_bound"], eps * H, rtol=1e-12)
    assert abs(log["divergence"] - exact**2) <= log["bias_bound"] + 1e-8
    assert abs(value - exact) <= np.sqrt(log["bias_bound"]) + 1e-6
    assert log["epsilon"] == eps and log["method"] == "sinkhorn"


def test_sinkhorn_bias_shrinks_with_eps(rng):
    x, y = sphere(rng, 30, 3), sphere(rng, 30, 3)
    exact = w2(x, y) ** 2
    errs = [abs(w2(x, y, method="sinkhorn", epsilon=e) ** 2 - exact) for e in (0.2, 0.05)]
    assert errs[1] < errs[0]


def test_sinkhorn_zero_on_identical_measures(rng):
    x = sphere(rng, 40, 3)
    assert w2(x, x, method="sinkhorn") == 0.0
    # merging sorts the atoms, so a permuted copy is recognised as the same measure
    perm = rng.permutation(40)
    assert w2(x, x[perm], method="sinkhorn") == 0.0
    # a slightly moved copy goes through the full (non-symmetric) solver
    y = x + 0.01 * rng.standard_normal(x.shape)
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    value, log = w2(x, y, method="sinkhorn", epsilon=0.1, log=True)
    assert log["converged"]
    assert abs(log["divergence"] - w2(x, y) ** 2) <= log["bias_bound"]


def test_sinkhorn_with_zero_weights_is_the_divergence_without_those_points(rng):
    # a point of weight 0 is no part of the measure: log(0) in the log-domain updates had moved the value by 1e-6
    x, y = sphere(rng, 8, 3), sphere(rng, 6, 3)
    a = rng.random(8)
    a[[1, 4]] = 0.0
    a /= a.sum()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = w2(x, y, a, method="sinkhorn", epsilon=0.05)
    np.testing.assert_allclose(value, w2(x[a > 0], y, a[a > 0], method="sinkhorn", epsilon=0.05), rtol=1e-12)


def test_sinkhorn_non_convergence_warns(rng):
    x, y = sphere(rng, 20, 3), sphere(rng, 20, 3)
    with pytest.warns(RuntimeWarning, match="Sinkhorn did not converge"):
        _, log = w2(x, y, method="sinkhorn", log=True, numItermax=1, stopThr=1e-14)
    assert not log["converged"]


# ----------------------------------------------------------------------------
# spherical sliced Wasserstein (a different quantity from W2)
# ----------------------------------------------------------------------------
def test_sliced_equals_w2_on_the_circle(rng):
    # d = 2: every projection is an isometry of S^1, so SSW_2 = W_2 (radians)
    x, y = circle(rng.uniform(0, 2 * np.pi, 30)), circle(rng.uniform(0, 2 * np.pi, 20))
    a, b = rng.random(30), rng.random(20)
    b *= a.sum() / b.sum()
    value, log = w2(x, y, a, b, method="sliced", n_projections=4, seed=1, log=True)
    np.testing.assert_allclose(value, w2(x, y, a, b), rtol=1e-6)
    np.testing.assert_allclose(log["stderr"], 0.0, atol=1e-6)


@pytest.mark.parametrize("d", [3, 5])
def test_sliced_upper_bound(rng, d):
    # documented: SSW_2 <= (pi W_1)^(1/2) <= (pi W_2)^(1/2), SSW_2 <= pi
    for scale in (0.02, 0.3, 3.0):
        x = sphere(rng, 60, d)
        y = x + scale * rng.standard_normal(x.shape)
        y /= np.linalg.norm(y, axis=1, keepdims=True)
        W = w2(x, y)
        value, log = w2(x, y, method="sliced", n_projections=100, seed=0, log=True)
        assert log["ssw_squared"] - 4 * log["stderr_squared"] <= np.pi * W
        assert value <= np.pi
        assert value > 0


def test_sliced_zero_and_ordering(rng):
    x = sphere(rng, 40, 3)
    assert w2(x, x, method="sliced", seed=0) == pytest.approx(0.0, abs=1e-7)
    # Dirac masses at growing distance, common projections
    F = frame(rng, 3)
    o = circle(np.array([0.0]), F)
    vals = [w2(o, circle(np.array([t]), F), method="sliced", seed=3, n_projections=400)
            for t in (0.1, 0.5, 1.5, 3.0)]
    assert np.all(np.diff(vals) > 0)
    assert vals[-1] <= np.pi


def test_sliced_stderr_is_consistent(rng):
    x, y = sphere(rng, 50, 3), sphere(rng, 40, 3)
    v1, l1 = w2(x, y, method="sliced", seed=1, n_projections=200, log=True)
    v2, l2 = w2(x, y, method="sliced", seed=2, n_projections=200, log=True)
    assert l1["stderr"] > 0 and l1["n_projections"] == 200
    assert l1["projected_w2_squared"].shape == (200,)
    assert l1["projections"].shape == (200, 3, 2)
    assert abs(v1 - v2) <= 5 * np.hypot(l1["stderr"], l2["stderr"])
    # reproducible with a seed
    assert w2(x, y, method="sliced", seed=1, n_projections=200) == v1
    np.testing.assert_allclose(l1["ssw_squared"], v1**2, rtol=1e-14)



def test_sliced_stderr_is_the_spread_of_the_estimate_over_seeds():
    # (found in review: a standard error 14× too large, without its 1/√N, had passed) over 40 seeds of 50 projections
    # the estimates' standard deviation is the reported standard error (a spread from 40 draws is within about 11 % of
    # its mean: [0.6, 1.6] leaves more than 3.5 of those deviations either side; it reads 1.09)
    rng = np.random.default_rng(0)
    x, y = sphere(rng, 50, 3), sphere(rng, 40, 3)
    runs = [w2(x, y, method="sliced", seed=100 + s, n_projections=50, log=True) for s in range(40)]
    spread = np.std([value for value, _ in runs], ddof=1)
    ratio = spread / np.mean([log["stderr"] for _, log in runs])
    assert 0.6 < ratio < 1.6, ratio


# ----------------------------------------------------------------------------
# input validation
# ----------------------------------------------------------------------------
def _good(rng):
    return sphere(rng, 5, 3), sphere(rng, 4, 3)


@pytest.mark.parametrize("method", ["exact", "sinkhorn", "sliced"])
def test_errors_common(rng, method):
    x, y = _good(rng)
    with pytest.raises(ValueError, match="different dimensions"):
        w2(x, sphere(rng, 4, 4), method=method)
    with pytest.raises(ValueError, match=r"2-D array of shape \(n, d\)"):
        w2(x[0], y, method=method)
    with pytest.raises(ValueError, match=r"2-D array"):
        w2(x, y[None], method=method)
    with pytest.raises(ValueError, match="at least one point"):
        w2(np.empty((0, 3)), y, method=method)
    with pytest.raises(ValueError, match="d >= 2"):
        w2(np.ones((3, 1)), np.ones((2, 1)), method=method)
    with pytest.raises(ValueError, match=r"a must have shape \(5,\)"):
        w2(x, y, np.ones(4) / 4, method=method)
    with pytest.raises(ValueError, match="negative weights"):
        w2(x, y, [0.5, 0.5, 0.2, -0.2, 0.0], method=method)
    with pytest.raises(ValueError, match="non-finite weights"):
        w2(x, y, None, [np.nan, 0.5, 0.5, 0.0], method=method)
    with pytest.raises(ValueError, match="non-finite weights"):
        w2(x, y, None, [np.inf, 0.5, 0.5, 0.0], method=method)
    with pytest.raises(ValueError, match="zero total mass"):
        w2(x, y, np.zeros(5), np.zeros(4), method=method)
    with pytest.raises(ValueError, match="different total masses"):
        w2(x, y, np.ones(5) / 5, np.ones(4) / 2, method=method)
    with pytest.raises(ValueError, match="different total masses"):
        w2(x, y, np.full(5, 0.2 * (1 + 1e-8)), method=method)
    bad = x.copy()
    bad[3] *= 1.001
    with pytest.raises(ValueError, match=r"not on the unit sphere: row 3 .* = 0\.001 > 1e-06"):
        w2(bad, y, method=method)
    nan = x.copy()
    nan[1, 2] = np.nan
    with pytest.raises(ValueError, match="non-finite coordinates"):
        w2(nan, y, method=method)
    with pytest.raises(ValueError, match="unknown cost 'euclid'"):
        w2(x, y, cost="euclid", method=method)


def test_errors_specific(rng):
    x, y = _good(rng)
    # within tolerance: accepted (and renormalised)
    w2(x * (1 + 5e-7), y)
    w2(x, y, np.full(5, 0.2 * (1 + 1e-11)))
    with pytest.raises(ValueError, match="unknown method 'emd'"):
        w2(x, y, method="emd")
    with pytest.raises(ValueError, match="epsilon must be a positive"):
        w2(x, y, method="sinkhorn", epsilon=0.0)
    with pytest.raises(ValueError, match="n_projections must be an integer >= 2"):
        w2(x, y, method="sliced", n_projections=1)
    with pytest.raises(ValueError, match="cost='chordal' is not supported"):
        w2(x, y, method="sliced", cost="chordal")
    with pytest.raises(ValueError, match="numItermax must be a positive integer"):
        w2(x, y, numItermax=0)
    with pytest.raises(ValueError, match="numItermax must be a positive integer"):
        w2(x, y, method="sinkhorn", numItermax=2.5)
    with pytest.raises(ValueError, match="stopThr must be a positive"):
        w2(x, y, method="sinkhorn", stopThr=-1.0)
    with pytest.raises(TypeError, match=r"unexpected option\(s\) \['epsilon'\]"):
        w2(x, y, method="exact", epsilon=0.1)
    with pytest.raises(ValueError, match="different dimensions"):
        cost_matrix(x, sphere(rng, 2, 5))
    with pytest.raises(ValueError, match="unknown cost"):
        cost_matrix(x, y, cost="l1")
    with pytest.raises(ValueError, match="not on the unit sphere"):
        w2_to_atoms(x, 2 * y)


def test_complex_points_are_refused(rng):
    x = sphere(rng, 5, 3)
    with pytest.raises(ValueError, match="complex"):
        w2(x.astype(complex), x)


def test_weights_whose_total_overflows_and_non_numeric_input_are_refused_naming_the_argument():
    # a total of inf on both sides had passed the mass check (inf > inf is False): a segfault inside POT for equal
    # weights, POT's own assertion for unequal ones
    x = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match=r"^a has a total mass past the largest float"):
        w2(x, x, a=[1e308, 1e308], b=[1e308, 1e308])
    with pytest.raises(ValueError, match=r"^a has a total mass past the largest float"):
        w2(x, x, a=[1e308, 1e308], b=[1.0, 1.0])
    with pytest.raises(ValueError, match=r"^a must be an array of real numbers"):
        w2(x, x, a="ab")
    with pytest.raises(ValueError, match=r"^x must be an array of real numbers"):
        w2([[1.0, 0.0], [0.0]], x)
    np.testing.assert_allclose(w2(x, x[::-1], a=[1e300, 3e300], b=[3e300, 1e300]), 0.0, atol=1e-15)  # large but finite: fine


def test_options_and_the_projection_inputs_are_named():
    # each had failed inside NumPy or POT naming nothing, or been taken ("no" merged duplicates; a NaN token landed on
    # neither side of Π♯ρ₀; a point at 5 e₁ was projected as if on the sphere)
    from meanfield.analysis.projection import dominant_projector, pushforward_target
    from meanfield.analysis.transport import w2, w2_to_atoms
    from meanfield.geometry.sphere import sample_uniform

    x, y = sample_uniform(12, 3, seed=0), sample_uniform(12, 3, seed=1)
    for method, options, message in (("sinkhorn", {"epsilon": "a"}, "epsilon must be"), ("sinkhorn", {"stopThr": -1.0}, "stopThr must be"),
                                     ("sliced", {"seed": "abc"}, "seed must be"), ("sliced", {"seed": -1}, "seed must be"),
                                     ("exact", {"merge_duplicates": "no"}, "merge_duplicates must be")):
        with pytest.raises((ValueError, TypeError), match=message):
            w2(x, y, method=method, **options)
    with pytest.raises(ValueError, match="^atoms is not on the unit sphere"):  # it had said "y"
        w2_to_atoms(x, np.array([[2.0, 0.0, 0.0]]))
    P = dominant_projector(np.diag([1.0, 0.5, 0.25]))
    bad = x.copy()
    bad[3] = np.nan
    for points, matrix, message in ((bad, P, "x0 must be .* 3 non-finite"), (5 * x, P, "x0 must lie on the unit sphere"),
                                    (x, np.eye(2), "P_E must be a finite \\(3, 3\\) projector")):
        with pytest.raises(ValueError, match=message):
            pushforward_target(points, matrix)
    with pytest.raises(ValueError, match="S must be a finite square matrix"):
        dominant_projector(np.ones((3, 2)))


def test_a_problem_too_large_for_the_memory_is_refused_before_its_arrays(monkeypatch):
    # 200 000 points a side had failed with NumPy's MemoryError naming neither cloud (or been killed inside POT)
    import meanfield.resources
    from meanfield.geometry.sphere import sample_uniform

    monkeypatch.setattr(meanfield.resources, "available_memory", lambda: 1 << 20)  # 1 MiB left
    x, y = sample_uniform(300, 3, seed=0), sample_uniform(300, 3, seed=1)
    for method in ("exact", "sinkhorn"):
        with pytest.raises(ValueError, match=f"method='{method}' on 300 × 300 atoms needs about .* use method='sliced'"):
            w2(x, y, method=method)
    assert w2(x, y, method="sliced") > 0  # linear in n: it runs


def test_sinkhorn_holds_three_cost_sized_arrays_at_most():
    # the value had formed the plan, its mask and its log beside the cost: a peak of 5 (n, m) arrays, 7 with POT's
    # temporaries; from the potentials it needs the plan's row and column sums only
    import tracemalloc

    from meanfield.geometry.sphere import sample_uniform

    x, y = sample_uniform(500, 3, seed=0), sample_uniform(500, 3, seed=1)
    w2(x[:20], y[:20], method="sinkhorn", epsilon=0.1)  # compiled and imported before the count
    tracemalloc.start()
    value = w2(x, y, method="sinkhorn", epsilon=0.1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak <= 3.3 * 8 * 500 * 500, peak / (8 * 500 * 500)
    assert np.isfinite(value) and value > 0  # (its value: within the stated bias of the exact W2, tests above)


def test_sinkhorn_divergence_keeps_to_the_epsilons_it_can_compute():
    # (found by a fuzz) ε = 1e-18 had read 3e10 (every W2 here is at most π), ε = 1e7 had stopped at zero potentials
    # (marginals right to the tolerance for any of them: the self terms 0, the divergence 1.73 where about 0.590) and
    # ε = 1e17 had read 0, each with converged = True
    from meanfield.geometry.sphere import sample_uniform

    x, y = sample_uniform(10, 3, seed=0), sample_uniform(8, 3, seed=1)
    exact = w2(x, y)
    with pytest.warns(RuntimeWarning, match="did not converge"):  # (its plan's own marginals, recomputed: off by 6e-5)
        small = w2(x, y, method="sinkhorn", epsilon=1e-12)
    assert abs(small - exact) < 1e-4 and small <= exact
    limit = w2(x, y, method="sinkhorn", epsilon=1e5)  # the energy distance's limit, reached well before 1e6 × the cost
    np.testing.assert_allclose(w2(x, y, method="sinkhorn", epsilon=1e6), limit, rtol=1e-5)
    np.testing.assert_allclose(limit, 0.59012, rtol=1e-5)
    for eps, words in ((1e-18, "below 1e-13 of the largest cost"), (1e17, "above 1e\\+06 times the largest cost")):
        with pytest.raises(ValueError, match=f"epsilon = .* is {words}"):
            w2(x, y, method="sinkhorn", epsilon=eps)
    # the range is that of the largest cost of the three problems: a cluster's own costs of 1e-11 had refused the
    # default ε for its self term (the concentration tracker's traceback); the divergence to itself is 0 at any ε
    cluster = np.array([0.0, 0.0, 1.0]) + 1e-6 * np.random.default_rng(0).standard_normal((20, 3))
    cluster /= np.linalg.norm(cluster, axis=1, keepdims=True)
    exact = w2(cluster, y)
    assert exact - 1e-2 < w2(cluster, y, method="sinkhorn", epsilon=1e-2) <= exact
    assert w2(cluster, cluster, method="sinkhorn", epsilon=1e-2) == 0.0


def test_the_smallest_sinkhorn_epsilon_is_relative_to_the_largest_cost():
    # two antipodal points give the largest cost π² ≈ 9.87: ε = 5e-13 is above 1e-13 but below 1e-13 of that cost
    x = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    y = np.array([[0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
    np.testing.assert_allclose(cost_matrix(x, y).max(), np.pi**2, rtol=1e-14)
    with pytest.raises(ValueError, match=r"epsilon = 5e-13 is below 1e-13 of the largest cost \(9\.87\)"):
        w2(x, y, method="sinkhorn", epsilon=5e-13)


def _weighted_clouds(rng: np.random.Generator, n: int, m: int, d: int) -> tuple[np.ndarray, ...]:
    x = rng.standard_normal((n, d))
    y = rng.standard_normal((m, d))
    a, b = rng.random(n), rng.random(m)
    return x / np.linalg.norm(x, axis=1, keepdims=True), y / np.linalg.norm(y, axis=1, keepdims=True), a / a.sum(), b / b.sum()


def test_sinkhorn_is_within_its_bias_of_pot_s_exact_value_or_says_it_did_not_converge():
    # (found in review) a Newton step's line search had judged a trial point by the trial's own rounding allowance:
    # a step to potentials of 1e10 was accepted, and the updates' stopping measure then rounded to 0: W2 = 361638 on
    # S² (every W2 there is at most π), reported converged; below ε = 1e-3 a tenth of the problems had not converged
    import ot

    rng = np.random.default_rng(11)
    for _ in range(3):  # the third draw: 19 against 23 weighted points on S²
        n, m = rng.integers(10, 40, 2)
        x, y, a, b = _weighted_clouds(rng, n, m, 3)
    exact = math.sqrt(ot.emd2(a, b, np.arccos(np.clip(x @ y.T, -1.0, 1.0)) ** 2))
    for eps in (1e-5, 1e-6):
        value, log = w2(x, y, a, b, method="sinkhorn", epsilon=eps, log=True)
        assert log["converged"]
        assert abs(value - exact) <= math.sqrt(log["bias_bound"]), (eps, value, exact)
    rng = np.random.default_rng(13)
    for _ in range(25):
        n, m = rng.integers(5, 50, 2)
        x, y, a, b = _weighted_clouds(rng, n, m, int(rng.integers(2, 5)))
        squared = ot.emd2(a, b, np.arccos(np.clip(x @ y.T, -1.0, 1.0)) ** 2)
        for eps in (1e-3, 1e-5, 1e-6):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                _, log = w2(x, y, a, b, method="sinkhorn", epsilon=eps, log=True)
            if log["converged"] and not caught:  # else it says so (a RuntimeWarning)
                assert abs(log["divergence"] - squared) <= log["bias_bound"], (n, m, eps)
            else:
                assert any(issubclass(w.category, RuntimeWarning) for w in caught)
            if log["converged"]:  # warned or not, within the bias and the solver's own error estimate
                assert abs(log["divergence"] - squared) <= log["bias_bound"] + log["solver_error"], (n, m, eps)
            assert 0.0 <= log["divergence"] <= math.pi**2 + log["bias_bound"]


def test_sinkhorn_says_when_its_own_error_may_pass_the_bias_bound():
    # (found in review) at ε = 1e-8 the default stopThr leaves an error of 5e-7, 15 times the bias bound, said nowhere
    import ot

    rng = np.random.default_rng(5)
    for n in (20, 25):
        x = rng.standard_normal((n, 3))
        y = rng.standard_normal((30, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    squared = ot.emd2(np.full(25, 1 / 25), np.full(30, 1 / 30), np.arccos(np.clip(x @ y.T, -1.0, 1.0)) ** 2)
    with pytest.warns(RuntimeWarning, match=r"the solver's own error, about .* may exceed the entropic bias bound"):
        _, log = w2(x, y, method="sinkhorn", epsilon=1e-8, log=True)
    assert abs(log["divergence"] - squared) <= log["solver_error"] + log["bias_bound"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, log = w2(x, y, method="sinkhorn", epsilon=1e-4, log=True)  # at a larger ε nothing is said
    assert log["solver_error"] <= log["bias_bound"] and abs(log["divergence"] - squared) <= log["bias_bound"]


def test_float32_weights_a_generator_seed_and_a_flag_for_squared_are_taken_as_documented():
    # (found in review) float32 weights summing to 1 in float32 had been refused against float64's 1e-9, a numpy
    # Generator (documented for seed) had been refused, cost_matrix(squared="no") had returned the squared matrix
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 3))
    y = rng.standard_normal((5, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    a32 = np.full(7, 1 / 7, dtype=np.float32)
    assert abs(float(a32.astype(float).sum()) - 1.0) > 1e-9
    np.testing.assert_allclose(w2(x, y, a32), w2(x, y), rtol=1e-7)
    with pytest.raises(ValueError, match="different total masses"):  # float32 too has its tolerance
        w2(x, y, np.full(7, 1.01 / 7, dtype=np.float32))
    with pytest.raises(ValueError, match="different total masses"):  # and float64 keeps 1e-9
        w2(x, y, np.full(7, (1 + 1e-8) / 7))
    one = w2(x, y, method="sliced", seed=np.random.default_rng(4))
    np.testing.assert_allclose(one, w2(x, y, method="sliced", seed=np.random.default_rng(4)), rtol=0)
    with pytest.raises(ValueError, match="seed must be an integer >= 0, a numpy Generator or None"):
        w2(x, y, method="sliced", seed=-1)
    with pytest.raises(ValueError, match="squared"):
        cost_matrix(x, y, squared="no")
    np.testing.assert_allclose(cost_matrix(x, y, squared=False) ** 2, cost_matrix(x, y), rtol=1e-12)


def test_sinkhorn_newton_is_not_given_up_on_damped_steps():
    # (found in review) Newton gave up after 5 steps without a smaller marginal error, damped ones included: far from
    # the optimum the dual rises while the error need not fall, and after the give-up 10 000 Sinkhorn updates did not
    # converge (12 of 40 such draws of 47 against 53 weighted points on S¹ at ε = 1e-6 had warned)
    for seed in (2, 6):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((47, 2))
        y = rng.standard_normal((53, 2))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        y /= np.linalg.norm(y, axis=1, keepdims=True)
        a, b = rng.random(47), rng.random(53)
        a, b = a / a.sum(), b / b.sum()
        squared = ot.emd2(a, b, cost_matrix(x, y, cost="chordal"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # (the solver-error note: the default stopThr at 1e-6)
            _, log = w2(x, y, a, b, cost="chordal", method="sinkhorn", epsilon=1e-6, log=True)
        assert log["converged"], (seed, log["err"])
        assert abs(log["divergence"] - squared) <= log["bias_bound"] + log["solver_error"]


def test_sinkhorn_value_outside_the_possible_range_is_not_reported_converged(monkeypatch):
    # (found in review) 0 <= OT_eps <= <C, a⊗b>: a value outside (W2 = 361638 on S², where W2 <= π) had been reported
    # converged; the range is now checked whatever the marginal errors say
    from meanfield.geometry.sphere import sample_uniform

    x, y = sample_uniform(6, 3, seed=0), sample_uniform(5, 3, seed=1)
    monkeypatch.setattr(transport, "_entropic_value", lambda *args: 1e5)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        _, log = w2(x, y, method="sinkhorn", epsilon=1e-2, log=True)
    assert not log["converged"]
