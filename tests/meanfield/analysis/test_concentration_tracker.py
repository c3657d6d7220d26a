"""The concentration tracker's three distances against plain NumPy and ot.emd2, on a head whose E and E_V differ.

Q = I, K = diag(1, 3, 1), V = diag(2, 1, 0.5): S = VBᵀ = diag(2, 3, 0.5) has E = span(e₂) while V's dominant
eigenspace is E_V = span(e₁), so the two eigenspace distances cannot stand in for each other.
"""
from __future__ import annotations

import numpy as np
import ot

from meanfield.analysis.concentration import tracker_from_head

Q, K, V = np.eye(3), np.diag([1.0, 3.0, 1.0]), np.diag([2.0, 1.0, 0.5])
E1, E2 = np.eye(3)[0], np.eye(3)[1]


def _distance_to_line(x: np.ndarray, a: np.ndarray, e: np.ndarray) -> float:
    """r.m.s. geodesic distance to the great sphere {±e}: arccos |⟨x, e⟩|."""
    return float(np.sqrt(np.sum(a * np.arccos(np.clip(np.abs(x @ e), 0.0, 1.0)) ** 2)))


def test_a_grid_measure_of_any_total_mass_is_tracked_as_its_normalised_masses():
    rng = np.random.default_rng(4)
    points = rng.standard_normal((60, 3))
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    m0, m1 = rng.random(60), rng.random(60)
    tracker = tracker_from_head(Q, K, V, m0, points=points, policy="skip")
    p = m0[points @ E2 > 0].sum() / m0.sum()  # Π♯ρ₀: the mass of each side at ±e₂
    a = m1 / m1.sum()
    cost = np.arccos(np.clip(points @ np.array([E2, -E2]).T, -1.0, 1.0)) ** 2
    for scale in (1.0, 3.0):  # the cell masses of a frame need not sum to 1
        out = tracker(0.0, scale * m1)
        np.testing.assert_allclose(out["w2_target"], np.sqrt(ot.emd2(a, np.array([p, 1.0 - p]), cost)), rtol=1e-9)
        np.testing.assert_allclose(out["e_eigenspace_distance"], _distance_to_line(points, a, E2), rtol=1e-12)
        np.testing.assert_allclose(out["v_eigenspace_distance"], _distance_to_line(points, a, E1), rtol=1e-12)
    # at the start W2 to Π♯ρ₀ is the distance to E: each token moves to its nearest atom
    start = tracker(0.0, m0)
    np.testing.assert_allclose(start["w2_target"], _distance_to_line(points, m0 / m0.sum(), E2), rtol=1e-9)
