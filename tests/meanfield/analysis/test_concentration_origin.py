"""Run.concentration(origin=…): the target Π♯ρ₀ of a run continued with mf.solve(..., t_start=…).

A run continued from t = 2 had been measured against Π♯ of its own first frame, labelled Π♯ρ0, silently (W2 = 0.049
at t = 2 where the uninterrupted run has 0.269).  With ``origin`` (the run that began at t = 0, or its tokens) the
continued run's W2 is the uninterrupted run's, frame by frame; without it a MeanfieldWarning and the table's head
say what the target is.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import meanfield as mf
from meanfield.errors import MeanfieldWarning
from meanfield.run import Run

B = np.diag([2.0, 1.0, 0.5])
N_TOKENS = 128
#: the continued run's frames are the uninterrupted run's bit for bit (save times exact in binary): so are their W2
W2_RTOL = 1e-12


def _model() -> mf.Model:
    return mf.Model(d=3, beta=8.0, heads=mf.heads.HeadStack(B=B[None], V=B[None]))


def _runs(weights: np.ndarray | None = None) -> tuple[np.ndarray, Run, Run]:
    """x0, the run from t = 0 to 4, and the run continued at t = 2 from the frame of a run that stopped there."""
    model, x0 = _model(), mf.sample_uniform(N_TOKENS, 3, seed=0)
    solver = mf.ParticleSolver(dt=0.02)
    full = mf.solve(mf.Problem(model, x0, weights=weights), solver, t_final=4.0, save_every=0.5)
    half = mf.solve(mf.Problem(model, x0, weights=weights), solver, t_final=2.0, save_every=0.5)
    rest = mf.solve(mf.Problem(model, half.final, weights=weights), solver, t_start=2.0, t_final=4.0, save_every=0.5)
    return x0, full, rest


@pytest.fixture(scope="module")
def runs() -> tuple[np.ndarray, Run, Run]:
    return _runs()


def _quiet_concentration(run: Run, **options):
    """``run.concentration(**options)``, failing on any MeanfieldWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", MeanfieldWarning)
        return run.concentration(**options)


def test_a_continued_run_given_its_origin_has_the_uninterrupted_runs_w2(runs) -> None:
    x0, full, rest = runs
    np.testing.assert_allclose(rest.t, full.t[4:], rtol=0, atol=1e-12)
    expected = _quiet_concentration(full).curves["w2_target"][4:]  # t = 2 … 4
    assert expected[0] > 0.25  # the tokens are far from Π♯ρ₀ at t = 2 (0.269; the first frame's own target: 0.049)
    for origin in (full, x0, (x0, np.ones(N_TOKENS)), x0.tolist()):
        result = _quiet_concentration(rest, origin=origin)
        np.testing.assert_allclose(result.curves["w2_target"], expected, rtol=W2_RTOL, atol=0)
        assert any(note.startswith("Π♯ρ₀ is that of origin=") for note in result.notes)
        assert "W2(ρ_t,Π♯ρ0)" in result.table()
    text = str(_quiet_concentration(rest, origin=full))
    assert "the first frame (t = 0) of the particle run given (128 tokens)" in text
    assert "W2(0)" not in text and "W2(t = 2) = 0.2689" in text  # the window's words name the first frame's time


def test_origin_masses_are_used() -> None:
    masses = np.linspace(1.0, 3.0, N_TOKENS)
    x0, full, rest = _runs(weights=masses)
    expected = _quiet_concentration(full).curves["w2_target"][4:]
    for origin in (full, (x0, masses), (x0, 5.0 * masses)):  # the run's token masses; masses normalised
        np.testing.assert_allclose(_quiet_concentration(rest, origin=origin).curves["w2_target"], expected,
                                   rtol=W2_RTOL, atol=0)
    uniform = _quiet_concentration(rest, origin=x0).curves["w2_target"]  # the same tokens at mass 1/n: another target
    assert np.max(np.abs(uniform - expected)) > 1e-3


def test_a_continued_run_without_origin_warns_and_names_its_first_frame_as_the_target(runs) -> None:
    _, _, rest = runs
    with pytest.warns(MeanfieldWarning, match=r"starts at t = 2.*Π♯ of its first frame.*origin=") as record:
        result = rest.concentration()
    assert len([w for w in record if issubclass(w.category, MeanfieldWarning)]) == 1
    assert "W2(ρ_t,Π♯ρ_2)" in result.table() and "W2(ρ_t,Π♯ρ0)" not in result.table()
    assert any("origin=" in doubt for doubt in result.warnings)
    assert "warning: this run starts at t = 2" in result.text()
    assert result.curves["w2_target"][0] < 0.1  # against its own first frame (what origin= is there to correct)


def test_a_run_from_t0_neither_warns_nor_changes_its_label(runs) -> None:
    _, full, _ = runs
    result = _quiet_concentration(full)
    assert "W2(ρ_t,Π♯ρ0)" in result.table() and not result.warnings
    np.testing.assert_allclose(_quiet_concentration(full, origin=full).curves["w2_target"], result.curves["w2_target"],
                               rtol=W2_RTOL, atol=0)


def test_tracked_w2_is_not_used_against_another_origin(runs) -> None:
    x0, full, rest = runs
    keys = ("w2_target", "v_eigenspace_distance", "e_eigenspace_distance")
    tracked = Run.from_states(t=rest.t, states=rest.states, state_name="x", diagnostics={k: np.zeros(rest.frames) for k in keys},
                              info=rest.info, model=rest.model)
    np.testing.assert_allclose(_quiet_concentration(tracked).curves["w2_target"], 0.0, atol=0)  # its tracker's, as given
    np.testing.assert_allclose(_quiet_concentration(tracked, origin=x0).curves["w2_target"],
                               _quiet_concentration(full).curves["w2_target"][4:], rtol=W2_RTOL, atol=0)


def test_a_grid_run_is_an_origin_with_its_cells_and_mesh() -> None:
    model, mesh = _model(), mf.mesh(300)
    m0 = mf.initial_mass(mesh, "vmf", kappa=2.0)
    full = mf.solve(mf.Problem(model, m0, mesh=mesh), mf.GridSolver(), t_final=1.0, save_every=0.25)
    half = mf.solve(mf.Problem(model, m0, mesh=mesh), mf.GridSolver(), t_final=0.5, save_every=0.25)
    rest = mf.solve(mf.Problem(model, half.final / half.final.sum(), mesh=mesh), mf.GridSolver(), t_start=0.5,
                    t_final=1.0, save_every=0.25)
    expected = _quiet_concentration(full).curves["w2_target"][2:]
    result = _quiet_concentration(rest, origin=full)
    np.testing.assert_allclose(result.curves["w2_target"], expected, rtol=1e-10, atol=0)
    assert "the first frame (t = 0) of the grid run given (300 cells)" in result.notes[-1]


@pytest.mark.parametrize(
    ("origin", "match"),
    [
        (lambda x0: x0[:, :2], r"origin must be tokens of shape \(n, 3\)"),
        (lambda x0: x0[0], r"origin must be tokens of shape \(n, 3\)"),
        (lambda x0: x0[:0], r"origin must be tokens of shape \(n, 3\)"),
        (lambda x0: 2.0 * x0, "origin must be tokens on the unit sphere"),
        (lambda x0: np.where(np.arange(3) == 0, np.nan, x0), "origin has non-finite coordinates"),
        (lambda x0: "x0.npy", "origin must be an array of real numbers"),
        (lambda x0: [[1.0, 0.0, 0.0], [1.0, 0.0]], "origin must be an array of real numbers"),
        (lambda x0: (x0, np.ones(5)), r"origin masses must have shape \(128,\)"),
        (lambda x0: (x0, -np.ones(128)), "origin masses must be finite and non-negative"),
        (lambda x0: (x0, np.zeros(128)), "origin masses must be finite and non-negative"),
        (lambda x0: (x0, "heavy"), "origin masses must be an array of real numbers"),
        (lambda x0: Run.from_states(t=np.zeros(0), states=np.zeros((0, 4, 3)), state_name="x", diagnostics={}),
         "origin is a run without frames"),
    ],
)
def test_a_bad_origin_is_refused_naming_it(runs, origin, match) -> None:
    x0, _, rest = runs
    with pytest.raises(ValueError, match=match):
        rest.concentration(origin=origin(x0))


def test_complex_origin_is_refused_naming_it(runs) -> None:
    x0, _, rest = runs
    with pytest.raises(TypeError, match="origin must be real numbers"):
        rest.concentration(origin=x0 + 0j)

