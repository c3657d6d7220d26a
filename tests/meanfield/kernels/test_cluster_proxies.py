"""Chebyshev proxies of compact clusters: the interpolation bound, the proxy sums, and the local kernel that uses them.

The bound is checked against NumPy's own Chebyshev interpolant; the proxy sums against direct
sums over the points they stand for; the local and harmonic kernels on tight clusters (the
terminal phase at large β) against the dense NumPy twin, and with the proxies switched off.
"""
from __future__ import annotations

import numpy as np
import pytest

import meanfield.kernels.cluster_proxies as proxies_module
from meanfield.geometry.sphere import sample_uniform
from meanfield.heads import HeadStack
from meanfield.kernels.attention import attention_velocity, velocity_numpy
from meanfield.kernels.cluster_proxies import build_proxies, chebyshev_points, interpolation_error_bound
from meanfield.kernels.local import SphereSources, velocity_local
from meanfield.solvers.bench_sphere import CLUSTER_B, CLUSTER_V, cluster_tokens


def tight_clusters(n, sigma, *, seed=0):
    """Two antipodal Gaussian clusters of n/2 tokens, σ per coordinate (the terminal phase of a β = 1024 run):
    the benchmark's clusters, whose r.m.s. radius is σ√2."""
    return cluster_tokens(n, radius=sigma * np.sqrt(2.0), seed=seed)


def row_errors(v, ref):
    return np.linalg.norm(v - ref, axis=1) / np.linalg.norm(ref, axis=1)


@pytest.fixture
def built(monkeypatch):
    """Every local pass builds the proxies (no thresholds on rows or candidates); records what was built."""
    monkeypatch.setattr(proxies_module, "PROXY_MIN_ROWS", 0)
    monkeypatch.setattr(proxies_module, "PROXY_MIN_CANDIDATES", 0)
    return spy_on_builds(monkeypatch)


def spy_on_builds(monkeypatch):
    record = []
    original = SphereSources.proxies

    def proxies(self, qmax, tolerance):
        out = original(self, qmax, tolerance)
        record.append(out)
        return out

    monkeypatch.setattr(SphereSources, "proxies", proxies)
    return record


@pytest.mark.parametrize("u", [0.3, 2.0, 6.0])
@pytest.mark.parametrize("p", [3, 6, 10, 14])
def test_interpolation_bound_holds_and_is_tight(u, p):
    # NumPy interpolates at the same points (Chebyshev points of the first kind): an independent interpolant
    np.testing.assert_allclose(np.sort(chebyshev_points(p)), np.sort(np.cos((2 * np.arange(p) + 1) * np.pi / (2 * p))), rtol=0, atol=1e-15)
    coef = np.polynomial.chebyshev.chebinterpolate(lambda t: np.exp(u * t), p - 1)
    t = np.linspace(-1.0, 1.0, 4001)
    err = np.max(np.abs(np.polynomial.chebyshev.chebval(t, coef) - np.exp(u * t))) / np.exp(u)
    bound = interpolation_error_bound(u, p)
    if bound < 1e-13:  # below the rounding of the interpolant itself
        assert err < 1e-13
    else:
        assert err <= bound
        assert err >= 1e-3 * bound  # not a vacuous bound


def test_proxies_partition_the_points_and_keep_the_mass(rng):
    x = tight_clusters(20000, 5e-4)
    a = rng.random(x.shape[0]) + 0.1
    src = SphereSources(x, a)
    _, _, start, order = src.grid
    prox = build_proxies(src.y, src.wy, start, order, qmax=1024.0 * np.linalg.norm(CLUSTER_B, 2), tolerance=1e-9)
    assert prox.active and prox.cells >= 2 and prox.points > 0.9 * src.m
    # every point is either summed one by one or stands behind a proxy, once
    residual = prox.residual_order
    assert residual.size + prox.points == src.m
    assert np.unique(residual).size == residual.size
    np.testing.assert_array_equal(np.diff(prox.residual_start) <= np.diff(start), True)
    proxied = np.ones(src.m, dtype=bool)
    proxied[residual] = False
    # the weights' columns are exact moments of order 0: the mass and the first moment of the proxied points
    np.testing.assert_allclose(prox.weights.sum(axis=1), src.wy[:, proxied].sum(axis=1), rtol=1e-12)
    # nodes sit in the cells they stand for (near the clusters)
    assert np.all(np.abs(np.abs(prox.nodes[0]) - 1.0) < 1e-3)


@pytest.mark.parametrize("tolerance", [1e-2, 1e-6, 1e-10])
def test_proxy_sums_match_direct_sums(rng, tolerance):
    x = tight_clusters(16000, 3e-4, seed=2)
    a = rng.random(x.shape[0])
    src = SphereSources(x, a)
    _, _, start, order = src.grid
    qmax = 1024.0 * 1.5
    prox = build_proxies(src.y, src.wy, start, order, qmax=qmax, tolerance=tolerance)
    assert prox.active
    proxied = np.ones(src.m, dtype=bool)
    proxied[prox.residual_order] = False
    for _ in range(40):
        q = rng.standard_normal(3)
        q *= qmax * rng.uniform(0.2, 1.0) / np.linalg.norm(q)
        top = float(np.max(src.y[proxied] @ q))
        direct = src.wy[:, proxied] @ np.exp(src.y[proxied] @ q - top)
        approx = prox.weights @ np.exp(prox.nodes.T @ q - top)
        # relative to the sum (den); |q| up to 1536 costs ~1e-13 of rounding in the scores themselves
        assert np.max(np.abs(approx - direct)) <= max(tolerance, 1e-12) * direct[3]


@pytest.mark.parametrize("trim", [True, False])
def test_a_stray_token_beside_each_cluster_keeps_the_cluster_proxied(rng, built, monkeypatch, trim):
    # one token per cluster moved into the cluster's grid cell, as far from it as the cell allows (a token in
    # transit): it widened the cell's box past any proxy, and the split was decided on guessed quarter widths,
    # so every point of both clusters was summed one by one. The box now sheds the stray (trim), and without
    # that the split is decided on the quarters' real boxes: either keeps the clusters proxied.
    if not trim:
        monkeypatch.setattr(proxies_module, "_TRIM", np.inf)
    n = 8000
    x = tight_clusters(n, 1e-4, seed=3)
    g, side, _, _ = SphereSources(x, np.ones(n)).grid

    def cell(p):
        return np.clip(np.floor((p + 1.0) / g).astype(np.int64), 0, side - 1)

    picks = np.random.default_rng(0)
    for i in (0, n - 1):  # the first and the last token: one in each cluster
        centre = x[i].copy()
        candidates = centre + 0.6 * g * picks.standard_normal((4000, 3))
        candidates /= np.linalg.norm(candidates, axis=1, keepdims=True)
        candidates = candidates[np.all(cell(candidates) == cell(centre), axis=1)]
        x[i] = candidates[np.argmax(np.linalg.norm(candidates - centre, axis=1))]
        assert np.linalg.norm(x[i] - centre) > 0.5 * g
    a = rng.random(n) + 0.05
    H = HeadStack(B=CLUSTER_B[None], V=CLUSTER_V[None])
    tol = 1e-10
    v = velocity_local(x, H, beta=1024.0, weights=a, tolerance=tol)
    assert built and built[-1].points >= 0.99 * n
    assert np.max(row_errors(v, velocity_numpy(x, H, beta=1024.0, weights=a))) <= 4 * tol


def test_spread_points_get_no_proxies():
    x = sample_uniform(50000, 3, seed=1)
    src = SphereSources(x, np.full(x.shape[0], 1.0 / x.shape[0]))
    assert not src.proxies(1024.0 * 1.6, 1e-9).active


@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize(("kind", "beta"), [("softmax", 64.0), ("softmax", 1024.0), ("pooled", 64.0), ("pooled", 1024.0),
                                            ("unnormalized", 64.0)])  # e^{1024‖B‖} overflows the unnormalized law
def test_local_kernel_with_proxies_matches_the_dense_twin(rng, built, heads, kind, beta):
    x = tight_clusters(8000, 1e-4 if beta > 100 else 2e-3, seed=heads)
    a = rng.random(x.shape[0]) + 0.05
    if heads == 1:
        H = HeadStack(B=CLUSTER_B[None], V=CLUSTER_V[None])
    else:  # random non-symmetric B and V
        H = HeadStack(B=0.5 * rng.standard_normal((3, 3, 3)) + np.eye(3), V=rng.standard_normal((3, 3, 3)),
                      w=np.array([1.0, 0.5, 2.0]))
    tol = 1e-10
    ref = velocity_numpy(x, H, beta=beta, kind=kind, weights=a)
    v = velocity_local(x, H, beta=beta, kind=kind, weights=a, tolerance=tol)
    assert any(p.active for p in built)  # the kernel did sum through proxies
    assert np.max(row_errors(v, ref)) <= 4 * tol


def test_proxies_change_the_local_sums_only_within_the_tolerance(rng, built, monkeypatch):
    x = tight_clusters(8000, 4e-4, seed=5)
    a = rng.random(x.shape[0]) + 0.05
    H = HeadStack(B=CLUSTER_B[None], V=CLUSTER_V[None])
    with_proxies = velocity_local(x, H, beta=1024.0, weights=a, tolerance=1e-3)
    assert built and built[-1].active
    without = velocity_local(x, H, beta=1024.0, weights=a, tolerance=1e-3, cluster_proxies=False)
    assert np.max(row_errors(with_proxies, without)) <= 2e-3
    # the switch does switch: with no cell heavy enough, the proxied run is the point-by-point one exactly
    monkeypatch.setattr(proxies_module, "PROXY_MIN_POINTS", 10**12)
    np.testing.assert_array_equal(velocity_local(x, H, beta=1024.0, weights=a, tolerance=1e-3), without)


def test_harmonic_backend_on_tight_clusters_matches_the_dense_twin(monkeypatch):
    # every row of the clusters fails the harmonic certificate (no mass near B^T x) and takes the local
    # path, whose balls list a whole cluster: the default thresholds build the proxies
    builds = spy_on_builds(monkeypatch)
    x = tight_clusters(16000, 2e-4, seed=7)
    H = HeadStack(B=CLUSTER_B[None], V=CLUSTER_V[None])
    ref = velocity_numpy(x, H, beta=1024.0)
    for backend in ("harmonic", "auto"):
        v = attention_velocity(x, H, beta=1024.0, backend=backend, tolerance=1e-8)
        assert np.max(row_errors(v, ref)) <= 4e-8
    assert builds and all(p.active for p in builds)


def test_no_build_where_the_points_are_cheap(monkeypatch):
    # spread-out tokens list few candidates per row: the local passes never build proxies
    builds = spy_on_builds(monkeypatch)
    x = sample_uniform(20000, 3, seed=2)
    H = HeadStack(B=CLUSTER_B[None], V=CLUSTER_V[None])
    velocity_local(x, H, beta=1024.0, tolerance=1e-8)
    assert builds == []


def test_clusters_benchmark_runs():
    from meanfield.solvers.bench_sphere import bench_clusters

    (row,) = bench_clusters(sizes=(8192,), repeat=1, point_rows=512, dense_rows=256, sample_rows=64)
    assert row["proxied_points"] > 0.9 * 8192 and 0 < row["nodes"] < row["proxied_points"]
    assert row["auto_error"] <= 4e-8 and row["local_error"] <= 4e-8
    for key in ("auto_s", "local_s", "points_s", "dense_s", "local_peak_mib"):
        assert row[key] > 0
