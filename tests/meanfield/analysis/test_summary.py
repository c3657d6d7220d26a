"""The one-line summaries of ``meanfield info``: clusters of a grid run, the model line."""
from __future__ import annotations

import numpy as np
import pytest

from meanfield.analysis.summary import grid_clusters, grid_final_line, grid_support, model_line
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


def test_model_line_names_mask_combine_and_norm_where_they_are_not_the_default():
    # a masked config run had read as an unmasked one, and combine = "mean" as the sum (found in review)
    model = {"d": 3, "beta": 2.0, "attention": "softmax", "direction": "ascent", "mask": "none", "combine": "sum",
             "norm": "post", "ngpt_alpha": 0.2, "backend": "auto", "precision": "float64"}
    solver = {"kind": "particle"}
    assert model_line({"model": model, "solver": solver}) == "d=3 β=2 attention=softmax direction=ascent"
    changed = dict(model, mask="causal", combine="mean", norm="ngpt", ngpt_alpha=0.3, precision="float32")
    assert model_line({"model": changed, "solver": solver}) == \
        "d=3 β=2 attention=softmax direction=ascent mask=causal combine=mean norm=ngpt α=0.3 precision=float32"


@pytest.mark.parametrize(("options", "solver", "expected"), [
    ({}, {}, "d=3 β=1 attention=softmax direction=ascent"),
    ({"mask": "causal"}, {"norm": "peri"}, "d=3 β=1 attention=softmax direction=ascent mask=causal norm=peri"),
    ({"mask": "causal", "combine": "mean"}, {"norm": "ngpt", "ngpt_alpha": 0.3},
     "d=3 β=1 attention=softmax direction=ascent mask=causal combine=mean norm=ngpt α=0.3"),
    ({"combine": "mean"}, {"norm": "pre"}, "d=3 β=1 attention=softmax direction=ascent combine=mean norm=pre"),
], ids=["default", "mask-peri", "mask-mean-ngpt", "mean-pre"])
def test_a_solve_run_s_summary_names_its_mask_combine_and_scheme(options, solver, expected):
    # mf.solve(..., ParticleSolver(norm="peri")) on a causal model had shown neither the scheme nor the mask
    import meanfield as mf

    heads = mf.heads.HeadStack(B=np.stack([np.eye(3)] * 2), V=np.stack([np.eye(3)] * 2))
    model = mf.Model(d=3, beta=1.0, heads=heads, **options)
    run = mf.solve(mf.Problem(model, mf.sample_uniform(8, 3, seed=0)), mf.ParticleSolver(dt=0.05, **solver), t_final=0.1)
    assert f"model:     {expected}\n" in run.summary()


def test_grid_support_is_the_smallest_densest_set_that_holds_the_share():
    # the cells in order of density until their mass reaches the share: one cell fewer holds less (without the last
    # cell, masses (.5, .3, .2) had kept .8 of the mass for a share of .9: mut3 S1)
    from types import SimpleNamespace

    keep = grid_support(SimpleNamespace(areas=np.ones(3)), np.array([0.5, 0.3, 0.2]), share=0.9)
    np.testing.assert_array_equal(keep, [True, True, True])
    mesh = fibonacci_mesh(500)
    mass = mesh.areas * np.exp(3.0 * mesh.points[:, 0]) * np.random.default_rng(5).uniform(0.5, 1.5, mesh.N)
    for share in (0.5, 0.9, 0.99):
        keep = grid_support(mesh, mass, share=share)
        density = mass / mesh.areas
        assert density[keep].min() >= density[~keep].max()  # the densest cells
        held = mass[keep].sum()
        lightest = mass[keep][np.argmin(density[keep])]
        assert held >= share * mass.sum() > held - lightest  # enough, and no cell more than needed


def test_the_info_of_a_jko_run_sums_the_steps_of_its_frames_and_skips_nan_ends_of_a_series():
    # each frame records the steps since the frame before; `steps:` is their sum (their largest had passed: mut3 S4),
    # here 3 frames of ceil(0.1 / 0.04) = 3 steps; a series that is NaN at its ends shows its first and last finite
    # values (mut3 S5: "nan -> nan")
    import math

    import meanfield as mf

    heads = mf.heads.HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    problem = mf.Problem(mf.Model(d=3, beta=1.0, heads=heads), mf.sample_uniform(8, 3, seed=0))
    run = mf.solve(problem, mf.JKOSolver(tau=0.04), t_final=0.3, save_every=0.1, energy=False, speed=False)
    reports = run.info["reports"]
    steps = 3 * math.ceil(0.1 / 0.04)
    assert len(reports) == steps
    iterations = sum(r.iterations for r in reports)
    run.diagnostics["authors_G2"] = np.array([np.nan, 1.5, 2.5, np.nan])
    summary = run.summary()
    assert f"steps:     {steps} JKO steps of at most τ=0.04, {iterations} inner iterations," in summary, summary
    assert "authors_G2:   1.5 -> 2.5\n" in summary, summary
