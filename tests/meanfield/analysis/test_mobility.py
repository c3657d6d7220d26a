"""The mobility module's edge cases (its formulas are checked against direct sums in tests/solvers/test_slope_tracker.py and test_jko.py)."""
from __future__ import annotations

import numpy as np

from meanfield.heads import HeadStack


def test_energy_time_derivative_is_infinite_past_floats_range_like_the_slopes():
    # e^{β} past float's range had raised a bare OverflowError (at β ≈ 800) where the other slopes give inf
    from meanfield.analysis.mobility import energy_time_derivative

    x = np.eye(3)
    heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    np.testing.assert_allclose(energy_time_derivative(x, heads, np.eye(3)[None], beta=2.0), np.e**2 / 6, rtol=1e-14)
    assert energy_time_derivative(x, heads, np.eye(3)[None], beta=800.0) == np.inf
    assert energy_time_derivative(x, heads, -np.eye(3)[None], beta=800.0) == -np.inf
