"""Tests for meanfield.solvers.trackers: the energy tracker against an independent NumPy energy."""
from __future__ import annotations

import numpy as np
import pytest

from meanfield.geometry.sphere import sample_uniform
from meanfield.heads import HeadStack
from meanfield.model import ConstantHeads, Model
from meanfield.solvers.trackers import EnergyTracker


@pytest.mark.parametrize("combine", ["sum", "mean"])
def test_energy_tracker_matches_numpy(rng, combine):
    n, d, H, beta = 400, 4, 3, 2.5
    x = sample_uniform(n, d, seed=3)
    B = rng.standard_normal((H, d, d)) / np.sqrt(d)
    heads = HeadStack(B=B, V=np.repeat(np.eye(d)[None], H, axis=0), w=rng.uniform(0.5, 1.5, H))
    model = Model(d=d, beta=beta, heads=ConstantHeads(heads), combine=combine)
    a = rng.uniform(0.1, 1.0, n)
    a /= a.sum()
    out = EnergyTracker(model, weights=a)(0.0, x)
    ref = np.array([a @ np.exp(beta * x @ Bh @ x.T) @ a / (2 * beta) for Bh in B])
    for h in range(H):
        np.testing.assert_allclose(out[f"energy_h{h}"], ref[h], rtol=1e-12, atol=0)
    np.testing.assert_allclose(out["energy"], ref.mean() if combine == "mean" else ref.sum(), rtol=1e-12)
    np.testing.assert_allclose(out["energy_theta"], heads.w @ ref, rtol=1e-12)
