"""The zero-temperature field and its Rayleigh tracker against the formulas, written here in plain NumPy.

The head is non-symmetric and ``Q != K`` so that ``B = QᵀK`` differs from ``Bᵀ`` and ``S = VBᵀ`` from ``VB``
(the identity heads of the other tests cannot tell them apart).
"""
from __future__ import annotations

import numpy as np
import pytest

import meanfield as mf
from meanfield.solvers.zero_temperature import RayleighTracker, field_of


def _head_and_tokens(d: int = 4, n: int = 7):
    rng = np.random.default_rng(11)
    Q, K, V = (rng.standard_normal((d, d)) for _ in range(3))
    x = rng.standard_normal((n, d))
    return Q, K, V, x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("direction,sign", [("ascent", 1.0), ("descent", -1.0)])
def test_the_zero_temperature_field_is_sigma_times_the_tangent_part_of_sx_over_the_norm_of_btx(direction, sign):
    Q, K, V, x = _head_and_tokens()
    model = mf.Model(d=4, beta=2.0, heads=mf.heads.Head(Q=Q, K=K, V=V), direction=direction)
    field = field_of(model)
    B = Q.T @ K
    S = V @ B.T
    expected = []
    for xi in x:
        s = S @ xi
        expected.append(sign * (s - (xi @ s) * xi) / np.linalg.norm(B.T @ xi))
    np.testing.assert_allclose(field.velocity(x, 0.0), np.array(expected), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(field.rayleigh(x), [xi @ S @ xi for xi in x], rtol=1e-12, atol=1e-14)


def test_the_rayleigh_tracker_weighs_each_token_by_its_mass():
    Q, K, V, x = _head_and_tokens()
    field = field_of(mf.Model(d=4, beta=2.0, heads=mf.heads.Head(Q=Q, K=K, V=V)))
    w = np.arange(1.0, x.shape[0] + 1.0)
    S = V @ (Q.T @ K).T
    quotients = np.array([xi @ S @ xi for xi in x])
    np.testing.assert_allclose(RayleighTracker(field, weights=w)(0.0, x)["rayleigh"], np.sum(w * quotients) / np.sum(w),
                               rtol=1e-12)
    np.testing.assert_allclose(RayleighTracker(field)(0.0, x)["rayleigh"], quotients.mean(), rtol=1e-12)
