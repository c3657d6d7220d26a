"""Model.velocity against a plain NumPy transcription of the softmax law of the mean-field
dynamics:
v_i = σ P⊥_{x_i} Σ_h Σ_j a_j e^{β⟨x_i, B_h x_j⟩} V_h x_j / Σ_j a_j e^{β⟨x_i, B_h x_j⟩}, σ = +1 ascent, −1 descent;
combine = 'mean' divides the sum over heads by H."""
from __future__ import annotations

import numpy as np
import pytest

from meanfield.heads.head import HeadStack
from meanfield.model import Model


def _ambient_reference(x, B, V, beta, a):
    """Σ_h Σ_j a_j e^{β⟨x_i, B_h x_j⟩} V_h x_j / Σ_j a_j e^{β⟨x_i, B_h x_j⟩}, before the tangent projection."""
    v = np.zeros_like(x)
    for Bh, Vh in zip(B, V):
        s = beta * x @ Bh @ x.T  # s[i, j] = β⟨x_i, B_h x_j⟩
        e = a[None, :] * np.exp(s - s.max(axis=1, keepdims=True))
        v += (e / e.sum(axis=1, keepdims=True)) @ (x @ Vh.T)
    return v


def _reference(x, B, V, beta, a):
    v = _ambient_reference(x, B, V, beta, a)
    return v - np.sum(v * x, axis=1, keepdims=True) * x


def _problem():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((9, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    B = rng.standard_normal((2, 3, 3))
    V = rng.standard_normal((2, 3, 3))
    a = rng.uniform(0.5, 2.0, 9)
    return x, B, V, a / a.sum()


@pytest.mark.parametrize("backend", ["numpy", "auto"])
@pytest.mark.parametrize("direction, sign", [("ascent", 1.0), ("descent", -1.0)])
@pytest.mark.parametrize("combine, scale", [("sum", 1.0), ("mean", 0.5)])
def test_softmax_velocity_matches_the_formula(backend, direction, sign, combine, scale):
    x, B, V, a = _problem()
    model = Model(d=3, beta=1.7, heads=HeadStack(B=B, V=V), direction=direction, combine=combine, backend=backend)
    ref = sign * scale * _reference(x, B, V, 1.7, a)
    np.testing.assert_allclose(model.velocity(x, 0.0, weights=a), ref, rtol=1e-9, atol=1e-12)
    uniform = np.full(len(x), 1.0 / len(x))
    np.testing.assert_allclose(model.velocity(x, 0.0), sign * scale * _reference(x, B, V, 1.7, uniform), rtol=1e-9, atol=1e-12)


def test_ambient_velocity_is_unprojected_and_unsigned():
    x, B, V, a = _problem()
    model = Model(d=3, beta=0.8, heads=HeadStack(B=B, V=V), direction="descent", combine="mean", backend="numpy")
    np.testing.assert_allclose(model.ambient_velocity(x, 0.0, weights=a), _ambient_reference(x, B, V, 0.8, a) / 2,
                               rtol=1e-9, atol=1e-12)
    assert model.sign == -1.0 and Model(d=3, beta=1.0).sign == 1.0


def test_default_heads_are_the_identity():
    x, _, _, a = _problem()
    eye = np.eye(3)[None]
    np.testing.assert_allclose(Model(d=3, beta=2.0, backend="numpy").velocity(x, 0.0, weights=a),
                               _reference(x, eye, eye, 2.0, a), rtol=1e-9, atol=1e-12)
