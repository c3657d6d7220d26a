"""The one-line summaries of ``meanfield info``: clusters of a grid run."""
from __future__ import annotations

import numpy as np

from meanfield.analysis.summary import grid_clusters, grid_final_line, grid_support
from meanfield.geometry.mesh import fibonacci_mesh


def test_a_near_uniform_grid_is_spread_out_and_two_caps_are_two_clusters():
    mesh = fibonacci_mesh(2000)
    uniform = mesh.areas * (1.0 + 0.01 * mesh.points[:, 2])  # near uniform: its 90 % support is one piece
    assert grid_clusters(mesh, uniform) == 1
    cover = mesh.areas[grid_support(mesh, uniform)].sum() / (4 * np.pi)
    np.testing.assert_allclose(cover, 0.9, atol=0.01)
    line = grid_final_line(mesh, uniform)
    assert line.startswith("final:     spread out, no cluster") and "cluster(s)" not in line  # it had said "1 cluster(s)"
    caps = mesh.areas * np.exp(40.0 * (np.abs(mesh.points[:, 2]) - 1.0))  # two antipodal caps of width ~0.2 rad
    line = grid_final_line(mesh, caps)
    assert line.startswith("final:     2 cluster(s)"), line
    cover = mesh.areas[grid_support(mesh, caps)].sum() / (4 * np.pi)
    assert f"on {cover:.1%} of the sphere" in line and cover < 0.1
