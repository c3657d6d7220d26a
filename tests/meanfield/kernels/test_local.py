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
        count = local._gather(c[0], c[1], c[2], R, g, side, start, order, src.yt, idx)
        assert np.array_equal(np.sort(idx[:count]), np.sort(tree.query_ball_point(c, R)))


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
