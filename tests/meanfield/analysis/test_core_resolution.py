"""Cluster cores against the grid's cells (meanfield.analysis.core_resolution), and the warning of a grid run.

The radii are checked against a computation written here from the angles by atan2, and the warning against
a run whose single cluster sits on one cell from the start.
"""
from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np

import meanfield as mf
from meanfield.analysis.core_resolution import core_resolution
from meanfield.geometry.mesh import mesh

E = np.array([1.0, 0.0, 0.0])


def _angle(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.arctan2(np.linalg.norm(np.cross(x, c), axis=-1), x @ c)


def _rotate(v: np.ndarray, alpha: float) -> np.ndarray:
    """v turned by alpha in the (e1, e2) plane."""
    r = np.array([[math.cos(alpha), -math.sin(alpha), 0.0], [math.sin(alpha), math.cos(alpha), 0.0], [0.0, 0.0, 1.0]])
    return r @ v


def test_radii_offsets_and_spacings_match_a_direct_computation():
    m = mesh(3000)
    x, areas = m.centroids, m.areas
    plus, minus = _rotate(E, 0.05), _rotate(-E, -0.02)  # two clusters, off their atoms by 0.05 and 0.02
    frames, expected = [], []
    for kappa in (20.0, 200.0):
        mass = areas * (np.exp(kappa * (x @ plus - 1)) + 0.5 * np.exp(kappa * (x @ minus - 1)))
        frames.append(mass)
        row = []
        for side in (x @ E > 0, x @ E < 0):
            w, p = mass[side], x[side]
            c = w @ p / np.linalg.norm(w @ p)
            row.append((math.sqrt(w @ _angle(p, c) ** 2 / w.sum()), math.sqrt(areas[side][np.argmin(_angle(p, c))]), c))
        expected.append(row)
    cores = core_resolution(x, areas, frames, [0.0, 1.0], E)
    for k, row in enumerate(expected):
        np.testing.assert_allclose(cores.radius[k], [r for r, _, _ in row], rtol=1e-10)
        np.testing.assert_allclose(cores.spacing[k], [h for _, h, _ in row], rtol=1e-14)
        np.testing.assert_allclose(cores.offset[k], [_angle(row[0][2], E), _angle(row[1][2], -E)], rtol=1e-9)
    # a vMF of concentration κ on S² has r.m.s. angle √(2/κ) for large κ; the cell average keeps it at κ = 200
    np.testing.assert_allclose(cores.radius[1], math.sqrt(2 / 200), rtol=0.05)
    np.testing.assert_allclose(cores.offset[1], [0.05, 0.02], atol=2e-3)
    assert not cores.unresolved.any() and math.isnan(cores.t_unresolved) and cores.describe() == ""


def test_a_cluster_on_one_cell_is_unresolved_from_that_frame():
    m = mesh(1000)
    x, areas = m.centroids, m.areas
    broad = areas * np.exp(4.0 * np.abs(x @ E))
    one_cell = np.zeros_like(areas)
    one_cell[np.argmax(x @ E)] = 1.0
    one_cell[np.argmin(x @ E)] = 1.0
    cores = core_resolution(x, areas, [broad, broad, one_cell, broad], [0.0, 0.5, 1.0, 1.5], E)
    np.testing.assert_array_equal(cores.unresolved, [False, False, True, False])
    assert cores.t_unresolved == 1.0
    np.testing.assert_allclose(cores.radius[2], 0.0, atol=1e-7)
    text = cores.describe(t_min=2.0)
    assert "from t = 1 " in text and "(1, 0, 0)" in text and "before t_min = 2" in text and "W2_min is the mesh's" in text
    assert "before t_min" not in cores.describe(t_min=0.5)


def test_a_grid_run_whose_cluster_sits_on_a_cell_warns_in_the_concentration_analysis(tmp_path):
    cfg = {"solver": {"kind": "grid", "method": "ssprk3", "t_final": 0.2, "save_every": 0.1},
           "init": {"kind": "vmf", "mean": [1.0, 0.0, 0.0], "kappa": 1e5}, "grid": {"cells": 400}}
    run = mf.simulate({**_concentration(), **cfg}, out=tmp_path / "r.h5")
    result = mf.load(tmp_path / "r.h5").concentration()
    assert result.cores is not None and result.cores.t_unresolved == 0.0
    assert any("the grid no longer resolves the core" in w and "cluster at (1, 0, 0)" in w for w in result.warnings)
    assert np.isnan(result.cores.radius[:, 1]).all()  # nothing on the other side: no cluster there
    broad = mf.simulate({**_concentration(), **cfg, "init": {"kind": "uniform"}})
    assert broad.concentration().cores.describe() == ""
    assert run.frames == 3


def _concentration() -> dict:
    return tomllib.loads((Path(__file__).resolve().parents[3] / "data" / "concentration.toml").read_text())


def test_particle_runs_have_no_core_check():
    cfg = {**_concentration(), "solver": {"kind": "particle", "t_final": 0.2, "save_every": 0.1, "dt": 0.05}}
    assert mf.simulate(cfg).concentration().cores is None


def test_cells_on_the_plane_and_negative_masses_take_no_part_in_a_cluster():
    # a cell on the plane <x, e> = 0 belongs to neither cluster, and a negative mass (second-order rounding) counts as 0:
    # either one in the + cluster had moved its centre and radius
    rng = np.random.default_rng(3)
    plus = rng.normal([1.0, 0.0, 0.0], 0.2, (6, 3))
    minus = rng.normal([-1.0, 0.0, 0.0], 0.2, (5, 3))
    plane = np.array([[0.0, 0.6, 0.8]])
    points = np.vstack([plus, minus, plane])
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    areas = np.full(points.shape[0], 0.01)
    frame = rng.random(points.shape[0]) + 0.1
    frame[2] = -0.05
    res = core_resolution(points, areas, [frame], [0.0], E)
    for j, (sign, rows) in enumerate([(1.0, np.arange(6)), (-1.0, np.arange(6, 11))]):
        m = np.clip(frame[rows], 0.0, None)
        centre = m @ points[rows]
        centre /= np.linalg.norm(centre)
        radius = math.sqrt(float(m @ _angle(points[rows], centre) ** 2) / m.sum())
        np.testing.assert_allclose(res.radius[0, j], radius, rtol=1e-12, atol=0)
        np.testing.assert_allclose(res.offset[0, j], _angle(centre, sign * E), rtol=1e-12, atol=1e-12)


def test_the_warning_names_the_cluster_furthest_below_the_spacing_when_both_are():
    from meanfield.analysis.core_resolution import CoreResolution

    radius, spacing = np.array([[0.01, 0.001]]), np.array([[0.02, 0.05]])
    cores = CoreResolution(np.array([0.0]), radius, spacing, np.zeros((1, 2)), E)
    side = int(np.argmax(spacing[0] - radius[0]))  # both below: the larger shortfall, here the cluster at -e
    assert side == 1
    text = cores.describe()
    assert "cluster at (-1, 0, 0) (0.001 rad)" in text and "centre (0.05)" in text, text
