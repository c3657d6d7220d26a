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


@pytest.mark.parametrize(
    "d, n, settings, shared",
    [
        (3, 64, {}, True),  # fused
        (3, 3000, {}, True),  # a sphere kernel
        (16, 300, {}, True),  # the flash tiles
        (80, 600, {}, True),  # OpenBLAS
        (3, 64, {"precision": "float32"}, False),
        (3, 64, {"mask": "causal"}, False),
    ],
    ids=["fused", "sphere", "flash", "openblas", "float32", "causal"],
)
def test_the_energy_comes_from_the_speed_trackers_evaluation_unchanged(d, n, settings, shared, monkeypatch):
    """A particle run's energy tracker takes the heads' row sums of the speed tracker's evaluation of the frame (no score
    pass of its own) where the kernel took them in float64; the energies equal the tracker's own pass to round-off."""
    import meanfield.solvers.trackers as trackers
    from meanfield.analysis.energy import head_energies
    from meanfield.solvers.loop import run_loop, save_times
    from meanfield.solvers.particle import ParticleSolver
    from meanfield.solvers.problem import Problem

    passes = []  # the tracker's own score passes
    own_pass = trackers.energy_row_logs
    monkeypatch.setattr(trackers, "energy_row_logs", lambda *args, **kw: (passes.append(1), own_pass(*args, **kw))[1])
    model = Model(d=d, beta=4.0, **settings)
    weights = np.random.default_rng(2).uniform(0.5, 1.5, n)
    problem = Problem(model, sample_uniform(n, d, seed=1), weights=weights)
    setup = ParticleSolver(method="rk4", dt=0.05).setup(problem)
    result = run_loop(setup.stepper, setup.state, save_times(0.0, 0.2, 0.1), trackers=setup.trackers, keep_states=True)
    assert len(passes) == (0 if shared else len(result.t))
    assert setup.stepper.stats["evaluations"] == 4 * setup.stepper.stats["steps"] + 1  # no evaluation for the energy either
    for k, t in enumerate(result.t):
        own = head_energies(result.states[k], model.heads.at(t), beta=4.0, weights=problem.weights, backend=model.backend)
        np.testing.assert_allclose(result.diagnostics["energy"][k], own.sum(), rtol=1e-12 if model.precision == "float64" else 0, atol=0)


def test_a_run_that_stops_well_records_every_tracker_on_its_last_frame():
    # the steady-state tracker stops the run: its own value and those of the trackers after it (the energy
    # follows the speed, whose evaluation it shares) are recorded with the frame; a failed stop skips the rest
    from meanfield.solvers.loop import StopRun, run_loop, save_times

    class Hold:  # a stepper that leaves the state as it is
        def advance(self, state, t0, t1):
            return state

    calls = []

    def stopper(failed, bad_state=False):
        def tracker(t, x):
            if t >= 0.2:
                raise StopRun("stop", failed=failed, values={"first": t}, bad_state=bad_state)
            return {"first": t}
        return tracker

    def after(t, x):
        calls.append(t)
        return {"second": 2 * t}

    for failed in (False, True):
        calls.clear()
        result = run_loop(Hold(), np.zeros((3, 3)), save_times(0.0, 1.0, 0.1), trackers=[stopper(failed), after])
        np.testing.assert_allclose(result.t, [0.0, 0.1, 0.2], rtol=0, atol=1e-12)
        np.testing.assert_allclose(result.diagnostics["first"], [0.0, 0.1, 0.2], rtol=0, atol=1e-12)
        expected = [0.0, 0.2, np.nan] if failed else [0.0, 0.2, 0.4]
        np.testing.assert_allclose(result.diagnostics["second"], expected, rtol=0, atol=1e-12)
        assert len(calls) == (2 if failed else 3)
    # a frame that fails a check of the state itself is not committed: the run keeps the frames before it
    result = run_loop(Hold(), np.zeros((3, 3)), save_times(0.0, 1.0, 0.1), trackers=[stopper(True, bad_state=True), after])
    np.testing.assert_allclose(result.t, [0.0, 0.1], rtol=0, atol=1e-12)
    assert result.info["failed"]


def test_a_callers_tracker_sees_the_frame_read_only_and_the_callers_tokens_stay_theirs():
    # a tracker doing x[0] = 0 had zeroed a token of the run (status "completed", a file of tokens off the sphere) and
    # of the caller's own x0, which Problem had kept without a copy
    import meanfield as mf
    from meanfield.errors import TrackerError

    x0 = mf.sample_uniform(10, 3, seed=0)
    keep = x0.copy()
    problem = mf.Problem(mf.Model(d=3, beta=4.0), x0)
    assert problem.initial is not x0

    def edits(t, x):
        x[0] = 0.0

    with pytest.raises(TrackerError) as failed:
        mf.solve(problem, mf.ParticleSolver(dt=0.05), t_final=1.0, save_every=0.25, trackers=[edits])
    assert "the tracker 'edits' at t=0 raised ValueError" in str(failed.value) and "read-only" in str(failed.value)
    np.testing.assert_array_equal(x0, keep)
    seen = []
    mf.solve(problem, mf.ParticleSolver(dt=0.05), t_final=0.5, save_every=0.25, trackers=[lambda t, x: seen.append(x.copy())])
    assert len(seen) == 3 and np.array_equal(seen[0], keep)  # looking still works


def test_a_fixed_step_that_moves_tokens_too_far_is_warned_of_once():
    """Unnormalized attention at β = 10 moves tokens tens of radians a step at dt = 0.1: the run had completed
    as if nothing were wrong."""
    import warnings

    import meanfield as mf

    model = mf.Model(d=3, beta=10.0, attention="unnormalized")
    problem = mf.Problem(model, mf.sample_uniform(16, 3, seed=0))
    with pytest.warns(mf.MeanfieldWarning, match=r"a step of solver.dt = 0.1 moves tokens by up to .* rad") as caught:
        mf.solve(problem, mf.ParticleSolver(dt=0.1), t_final=0.3, save_every=0.1)
    assert len([w for w in caught if "moves tokens" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", mf.MeanfieldWarning)
        mf.solve(problem, mf.ParticleSolver(dt=1e-4), t_final=0.001, save_every=0.001)


@pytest.mark.parametrize("name", [".", "..", "", "a/b"])
def test_a_scalar_named_dot_is_refused_like_an_empty_name(name, tmp_path):
    # HDF5 reads "." as the group itself: the series had never been written, and the run had completed without it
    import meanfield as mf
    from meanfield.errors import TrackerError

    problem = mf.Problem(mf.Model(d=3, beta=1.0), mf.sample_uniform(8, 3, seed=0))
    with pytest.raises(TrackerError, match="names are non-empty strings without '/', other than '.' and '..'"):
        mf.solve(problem, mf.ParticleSolver(dt=0.05), t_final=0.1, save_every=0.1, trackers=[lambda t, x: {name: 1.0}])


def test_the_speed_of_a_finite_velocity_is_finite_and_an_infinite_one_gives_no_step_advice():
    # np.linalg.norm squares the entries: a velocity of 4.7e289 (unnormalized attention, β = 705) had been recorded as
    # max_speed = inf, with NumPy's overflow warning, and the step warning had advised "a solver.dt below 0"
    import warnings

    import meanfield as mf
    from meanfield.solvers.trackers import SteadyStateTracker, largest_speed

    # (the velocity e^705 is announced: past e^345 a step's tokens leave the floats' squares, and the run fails below)
    with pytest.warns(mf.MeanfieldWarning, match=r"its velocity, up to .* = e\^705\.5, passes e\^345\.4"):
        model = mf.Model(d=3, beta=705.0, attention="unnormalized")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert largest_speed(np.full((2, 3), 1e300)) == pytest.approx(np.sqrt(3) * 1e300, rel=1e-15)
        assert largest_speed(np.full((2, 3), 1e-300)) == pytest.approx(np.sqrt(3) * 1e-300, rel=1e-15)
        v = np.random.default_rng(0).standard_normal((5, 3))
        assert largest_speed(v) == np.max(np.linalg.norm(v, axis=-1))  # in range: the same bits
        x0 = mf.sample_uniform(8, 3, seed=0)
        assert np.isfinite(model.velocity(x0, 0.0)).all()
        with pytest.raises(mf.RunFailed) as failed:
            mf.solve(mf.Problem(model, x0), mf.ParticleSolver(dt=0.02), t_final=0.1)
        assert np.isfinite(failed.value.run.diagnostics["max_speed"]).all()
    tracker = SteadyStateTracker(lambda x, t: np.full((2, 3), np.inf), step=0.1)
    with pytest.warns(mf.MeanfieldWarning, match="out of floating-point range") as caught:
        tracker(0.0, np.zeros((2, 3)))
    assert "below 0" not in str(caught[0].message)


def test_the_step_advice_is_below_the_step_in_use():
    # the bound 0.5/25.6 = 0.0195 had been printed with :.2g as "a solver.dt below 0.02", the dt in use
    import meanfield as mf
    from meanfield.solvers.trackers import SteadyStateTracker

    speed = 25.6 / np.sqrt(3.0)  # rows of norm 25.6
    tracker = SteadyStateTracker(lambda x, t: np.full((2, 3), speed), step=0.02)
    with pytest.warns(mf.MeanfieldWarning, match="moves tokens by up to 0.512 rad") as caught:
        tracker(0.0, np.zeros((2, 3)))
    assert str(caught[0].message).endswith("a solver.dt below 0.019")


def test_the_step_warning_takes_the_step_taken_not_dt():
    # dt = 10 with save_every = 0.1 takes steps of 0.1 (0.026 rad at β = 4): it had been warned of as steps of 10
    import warnings

    import meanfield as mf

    problem = mf.Problem(mf.Model(d=3, beta=4.0), mf.sample_uniform(8, 3, seed=0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", mf.MeanfieldWarning)
        mf.solve(problem, mf.ParticleSolver(dt=10.0), t_final=0.3, save_every=0.1)
    with pytest.warns(mf.MeanfieldWarning, match=r"at t = 0 a step of solver.dt = 10 moves tokens by up to 2.\d+ rad"):
        mf.solve(problem, mf.ParticleSolver(dt=10.0), t_final=20.0, save_every=10.0)


def test_the_step_warning_takes_the_speed_of_the_frame_the_step_starts_from():
    # a frame's speed is checked at the next frame, against the step taken from it: speeds 10 then 0.01 with steps of 0.1
    # move tokens by up to 0.1·10 = 1 rad from t = 0; the speed of the frame the step ends at (0.01·0.1) had kept silent
    # (mut4 T7)
    import meanfield as mf
    from meanfield.solvers.trackers import SteadyStateTracker

    speeds = iter([10.0, 0.01])
    tracker = SteadyStateTracker(lambda x, t: np.array([[next(speeds), 0.0, 0.0]]), step=0.1, taken=lambda: 0.1)
    tracker(0.0, np.zeros((1, 3)))  # the first frame: no step yet
    with pytest.warns(mf.MeanfieldWarning, match=r"^at t = 0 a step of solver.dt = 0.1 moves tokens by up to 1 rad "
                                                 r"\(max \|dx/dt\| = 10\)") as caught:
        assert tracker(0.1, np.zeros((1, 3))) == {"max_speed": 0.01}
    assert len(caught) == 1 and str(caught[0].message).endswith("a solver.dt below 0.05")  # 0.5 rad / 10


def test_a_diagnostic_that_starts_late_is_nan_on_the_frames_before_it():
    # a caller's tracker that records from t = 0.5 on: the earlier frames have no value (NaN, not 0)
    import meanfield as mf

    model = mf.Model(d=3, beta=1.0, attention="softmax", heads=mf.heads.identity(3))

    def late(t, x):
        return {"late": 7.0} if t >= 0.5 else {}

    run = mf.solve(mf.Problem(model, sample_uniform(8, 3, seed=0)), mf.ParticleSolver(dt=0.05), t_final=1.0,
                   save_every=0.25, trackers=[late])
    np.testing.assert_allclose(run.t, [0.0, 0.25, 0.5, 0.75, 1.0], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(run.diagnostics["late"], dtype=float), [np.nan, np.nan, 7.0, 7.0, 7.0])
