"""The local sphere kernel's own pieces: the point grid that lists candidates, the per-row caps.

The candidate lists are checked against scipy's k-d tree, the caps against the exact row sums
of NumPy, and the kernel on a late grid-like density (masses over twelve decades) row by row.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import cKDTree

import meanfield.kernels.local as local
from meanfield.geometry.sphere import sample_uniform, sample_vmf
from meanfield.heads import HeadStack
from meanfield.kernels.local import SphereSources, cap_parameters, local_head_sums
from meanfield.kernels.reference import velocity_numpy


def exact_sums(x, B, beta, y, w):
    """Shifted sums of one head by NumPy: den, num (before V) and the exact row maxima."""
    z = beta * (x @ B) @ y.T
    top = z.max(axis=1)
    e = np.exp(z - top[:, None]) * w
    return e.sum(axis=1), e @ y, top


def clustered_masses(x, *, kappa=40.0, floor=1e-12):
    """Two vMF-like clusters at ±e1 over a floor: the masses of a grid late in a clustering run."""
    a = np.exp(kappa * (np.abs(x[:, 0]) - 1.0)) + floor
    return a / a.sum()


@pytest.mark.parametrize("points", ["uniform", "clustered"])
def test_point_grid_lists_what_a_kd_tree_lists(rng, points):
    n = 5000
    y = sample_uniform(n, 3, seed=3) if points == "uniform" else sample_vmf(n, 3, kappa=30.0, seed=3)
    src = SphereSources(y, np.full(n, 1.0 / n))
    g, side, start, order = src.grid
    assert start[-1] == n and np.array_equal(np.sort(order), np.arange(n))
    tree = cKDTree(y)
    centres = sample_uniform(40, 3, seed=4)
    centres[0] = y[0]  # a ball around a point itself
    for c, R in zip(centres, rng.uniform(0.0, 2.1, centres.shape[0])):
        idx = np.empty(local._gather_bound(c[0], c[1], c[2], R, g, side, start), dtype=np.int64)
        count = local._gather(c[0], c[1], c[2], R, g, side, start, src.grid_columns[0], idx)
        assert np.array_equal(np.sort(order[idx[:count]]), np.sort(tree.query_ball_point(c, R)))


def test_caps_certify_every_row_at_once(rng, monkeypatch):
    # masses over twelve decades: rows whose direction sees only empty cells need larger caps
    n = 6000
    x = sample_uniform(n, 3, seed=7)
    a = clustered_masses(x)
    assert a.max() / a.min() > 1e10
    B = np.diag([1.0, 0.5, 0.25]) + 0.1 * rng.standard_normal((3, 3))
    beta, tol = 256.0, 1e-10
    src = SphereSources(x, a)
    q = beta * (x @ B)
    r = np.linalg.norm(q, axis=1)
    eps = 0.5 * tol
    delta = cap_parameters(q, r, src, eps)
    den, num, top = exact_sums(x, B, beta, x, a)
    # the bound of the first pass: everything Δ_i below the best point weighs at most ε D_i
    assert np.all(src.mass * np.exp(-delta) <= eps * den * (1.0 + 1e-12))
    assert delta.max() - delta.min() > 10.0  # the caps do follow the masses
    passes = []
    first = local._local_pass

    def counted(*args, **kwargs):
        passes.append(args[0].shape[0])
        return first(*args, **kwargs)

    monkeypatch.setattr(local, "_local_pass", counted)
    sums = local_head_sums(x, B, beta, src, tolerance=tol)
    assert passes == [n]  # no row needed a second pass
    scale = np.exp(sums.shift - top)
    np.testing.assert_allclose(sums.den * scale, den, rtol=tol, atol=0)
    # |y| = 1: each numerator component is bounded by the row's denominator
    assert np.all(np.abs(sums.num * scale[:, None] - num).max(axis=1) <= tol * den)


def test_equal_masses_take_one_cap_parameter(rng):
    n = 3000
    x = sample_uniform(n, 3, seed=8)
    src = SphereSources(x, np.full(n, 1.0 / n))
    q = 64.0 * x
    delta = cap_parameters(q, np.linalg.norm(q, axis=1), src, 5e-13)
    np.testing.assert_allclose(delta, np.log(n / 5e-13), rtol=1e-15)


@pytest.mark.parametrize("beta", [4.0, 256.0, 1024.0])
def test_grid_like_density_against_numpy_row_by_row(rng, beta):
    n = 4000
    x = sample_uniform(n, 3, seed=9)
    a = clustered_masses(x, kappa=60.0)
    B = np.array([[1.25, -0.75, 0.0], [-0.375, 0.625, 0.0], [0.0, 0.0, 1.0]])  # data/concentration.toml's head
    heads = HeadStack(B=B[None], V=np.eye(3)[None])
    got = local.velocity_local(x, heads, beta=beta, weights=a, tolerance=1e-12)
    den, num, _ = exact_sums(x, B, beta, x, a)
    ref = num / den[:, None]
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-11)  # every row: |y| = 1 bounds |v_i| by 1


def test_rows_stop_at_the_radius_their_bound_needs():
    # one block by hand: its candidates in rings around the centre, the outer rings' numerator columns
    # poisoned with NaN; each row must stop before them, and still match the exact sums over every point
    n, beta, R, eps = 20000, 256.0, 1.0, 5e-13
    y = sample_uniform(n, 3, seed=11)
    a = np.exp(2.0 * y[:, 0])
    a /= a.sum()
    src = SphereSources(y, a)
    g, side, start, _ = src.grid
    yts, wys = src.grid_columns
    c = np.array([0.0, 0.0, 1.0])
    cand = np.empty(local._gather_bound(c[0], c[1], c[2], R, g, side, start), dtype=np.int64)
    nc = local._gather(c[0], c[1], c[2], R, g, side, start, yts, cand)
    rings = 32
    ring_start = local._ring_sort(cand, nc, yts, c[0], c[1], c[2], rings / R**2, rings)
    t2 = np.sum((yts[:, cand[:nc]] - c[:, None]) ** 2, axis=0)
    ring = np.repeat(np.arange(rings), np.diff(ring_start))
    assert np.all(t2 >= ring * R**2 / rings * (1 - 1e-12)) and np.all(t2 <= (ring + 1) * R**2 / rings * (1 + 1e-12))
    buf = np.empty((8, nc))
    buf[:3] = yts[:, cand[:nc]]
    buf[3:7] = wys[:, cand[:nc]]
    outer = ring >= 24  # beyond chord 0.87: a row within 0.05 of the centre needs ~0.5
    buf[3:6, outer] = np.nan
    u = sample_vmf(64, 3, kappa=2000.0, seed=12)  # rows within ~0.05 of the centre
    q = beta * u
    nearest = float(np.min(np.linalg.norm(y - c, axis=1)))
    sums, shift, ok = np.zeros((64, 4)), np.zeros(64), np.zeros(64, dtype=np.bool_)
    inside = float(buf[6].sum())
    local._ring_rows(q, 0, 64, c[0], c[1], c[2], R, ring_start, buf, src.mass - inside, eps, 40.0, nearest, sums, shift, ok)
    assert ok.all() and np.isfinite(sums).all()
    den, num, top = exact_sums(u, np.eye(3), beta, y, a)
    np.testing.assert_allclose(shift, top, rtol=1e-15, atol=0)  # the exact row maxima
    np.testing.assert_allclose(sums[:, 3], den, rtol=2 * eps, atol=0)
    assert np.all(np.abs(sums[:, :3] - num).max(axis=1) <= 2 * eps * den)


@pytest.mark.parametrize("beta", [0.0, 5.0, 300.0])
def test_rows_with_zero_query_against_numpy(beta):
    # a rank-one head: r_i = β |B^T x_i| is 0 on the great circle x_0 = 0 (every score of those rows is 0)
    x = sample_uniform(3000, 3, seed=0)
    x[:10, 0] = 0.0
    x[:10] /= np.linalg.norm(x[:10], axis=1)[:, None]
    B = np.zeros((1, 3, 3))
    B[0, 0, 0] = 1.0
    heads = HeadStack(B=B, V=np.eye(3)[None])
    got = local.velocity_local(x, heads, beta=beta, tolerance=1e-12)
    np.testing.assert_allclose(got, velocity_numpy(x, heads, beta=beta), rtol=0, atol=2e-12)


def test_a_call_below_the_query_threshold_starts_no_thread(monkeypatch):
    """SciPy's k-d tree starts Python threads for every query with ``workers > 1`` (about 0.25 ms, more on a
    loaded machine): the blocks' few centres and fewer rows than QUERY_PARALLEL_POINTS are queried on one."""
    import threading

    from meanfield.kernels.jit import num_threads

    monkeypatch.setenv("MEANFIELD_NUM_THREADS", "2")
    started = []
    original = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: (started.append(self), original(self))[1])
    rng = np.random.default_rng(3)
    x = sample_uniform(2048, 3, seed=4)
    heads = HeadStack(B=(np.eye(3) + 0.3 * rng.standard_normal((3, 3)))[None], V=np.eye(3)[None])
    a = rng.uniform(0.5, 1.5, 2048)  # unequal masses: the rows' best points are queried too
    v = local.velocity_local(x, heads, beta=1024.0, weights=a)
    assert started == []
    assert local.query_workers(local.QUERY_PARALLEL_POINTS - 1) == 1
    assert local.query_workers(local.QUERY_PARALLEL_POINTS) == num_threads()
    np.testing.assert_allclose(v, velocity_numpy(x, heads, beta=1024.0, weights=a), rtol=0, atol=1e-10 * np.abs(v).max())
