"""Reprs a notebook cell shows: what an object is, in a line, never its arrays (a problem of 256 tokens had printed
every coordinate, four heads of d = 64 some 6 kB, a β sweep every curve)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

import meanfield as mf
from meanfield.heads.schedules import LayerSchedule, MatrixSDESchedule, OscillatingSchedule, OUSchedule, PathSchedule


def test_heads_and_models_say_what_they_are_in_a_line() -> None:
    rng = np.random.default_rng(0)
    A = rng.normal(size=(4, 64, 64))
    D = A + np.swapaxes(A, 1, 2)
    stack = mf.heads.HeadStack(B=D, V=D)
    assert repr(stack) == "HeadStack(H=4, d=64, B symmetric, V = B, w = 1/H)"
    model = mf.Model(d=64, beta=2.0, heads=stack)
    assert len(repr(model)) < 400 and "HeadStack(H=4, d=64" in repr(model)
    general = mf.heads.HeadStack(B=A[:2], V=A[2:], w=np.array([0.25, 0.75]))
    assert repr(general) == "HeadStack(H=2, d=64, w = [0.25 0.75])"


def test_problems_show_shapes_not_coordinates() -> None:
    model = mf.Model(d=3, beta=4.0)
    tokens = mf.Problem(model, mf.sample_uniform(256, 3, seed=0))
    assert repr(tokens).endswith(", tokens (256, 3), masses uniform)") and len(repr(tokens)) < 400
    weighted = mf.Problem(model, mf.sample_uniform(4, 3, seed=0), weights=np.arange(1.0, 5.0))
    assert repr(weighted).endswith(", tokens (4, 3), masses given)")
    mesh = mf.mesh(200)
    grid = mf.Problem(model, mf.initial_mass(mesh, "uniform"), mesh=mesh)
    assert repr(grid).endswith(f", cell masses on {mesh!r})")


def test_schedules_say_their_parameters() -> None:
    stack = mf.heads.HeadStack(B=np.eye(3)[None].repeat(2, 0), V=np.eye(3)[None].repeat(2, 0))
    assert repr(OUSchedule(stack, kappa=1.0, sigma=0.5, dt=0.01, seed=3)) == "OUSchedule(H=2, d=3, kappa=1, sigma=0.5, dt=0.01, seed=3)"
    assert repr(OscillatingSchedule(stack, amplitude=0.5, omega=2.0)) == "OscillatingSchedule(H=2, d=3, amplitude=0.5, omega=2)"
    sde = MatrixSDESchedule(np.eye(3)[None].repeat(2, 0), drift="ou", dt=0.005, sigma=1.0, seed=7)
    assert repr(sde) == ("MatrixSDESchedule(H=2, d=3, drift='ou', kappa=1, sigma=1, noise='symmetric', "
                         "integrator='euler-maruyama', dt=0.005, seed=7)")
    assert repr(LayerSchedule([stack, stack])) == "LayerSchedule(2 layers)"
    path = PathSchedule(np.array([0.0, 0.5, 1.0]), np.ones((3, 2, 3, 3)), np.ones((3, 2, 3, 3)))
    assert repr(path) == "PathSchedule(H=2, d=3, 3 times in [0, 1])"


def test_a_beta_sweep_shows_its_summary() -> None:
    from meanfield.solvers.experiments.concentration import sweep_beta

    config = Path(__file__).resolve().parents[2] / "data" / "concentration.toml"
    sweep = sweep_beta(mf.load_config(config, **{"init.n": 16, "solver.t_final": 0.5}), [4.0, 16.0],
                       solver="particle")
    text = repr(sweep)
    assert text.startswith("BetaSweep(particle, β = [4.0, 16.0], W2_min = [") and "t_min = [" in text
    assert len(text) < 200
