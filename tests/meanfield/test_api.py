"""The Python front door: ``mf.simulate``, ``mf.load``, ``mf.solve`` and the :class:`~meanfield.Run` they all give."""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from matplotlib.figure import Figure

import meanfield as mf
from meanfield.heads import HeadStack
from meanfield.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"t_final": 0.5, "save_every": 0.25, "init.n": 24}


def test_simulate_takes_a_path_a_dict_or_a_config_with_keyword_overrides():
    by_path = mf.simulate(ROOT / "data" / "default.toml", beta=9, **SMALL)
    assert by_path.config["model"]["beta"] == 9.0 and by_path.config["solver"]["t_final"] == 0.5
    by_dict = mf.simulate({"model": {"beta": 9.0}, "solver": {"dt": 0.02}}, **SMALL)
    by_config = mf.simulate(mf.load_config(ROOT / "data" / "default.toml", beta=9, **SMALL))
    np.testing.assert_array_equal(by_path.x, by_config.x)
    np.testing.assert_array_equal(by_path.x, by_dict.x)  # the same model, tokens and step
    assert by_path.kind == "particle" and by_path.x.shape == (3, 24, 3) and by_path.t.tolist() == [0.0, 0.25, 0.5]
    assert by_path.status == "completed" and "energy" in by_path.diagnostics


def test_keyword_overrides_name_the_bad_or_ambiguous_key():
    with pytest.raises(mf.ConfigError, match="seed: ambiguous.*init.seed"):
        mf.simulate(None, seed=3)
    with pytest.raises(mf.ConfigError, match="betta"):
        mf.simulate(None, betta=3)
    with pytest.raises(mf.ConfigError, match="model.beta"):
        mf.simulate(None, beta=-1.0)
    run = mf.simulate(None, **{"init.seed": 3}, **SMALL)
    assert run.config["init"]["seed"] == 3


def test_simulate_to_a_file_equals_the_cli_and_load_gives_equal_runs(tmp_path, monkeypatch):
    config = ROOT / "data" / "default.toml"
    api = mf.simulate(config, out=tmp_path / "api.h5", **SMALL)
    sets = ["--set=solver.t_final=0.5", "--set=solver.save_every=0.25", "--set=init.n=24"]
    assert main(["simulate", str(config), "-o", str(tmp_path / "cli.h5"), "--quiet", *sets]) == 0
    loaded, cli = mf.load(tmp_path / "api.h5"), mf.load(tmp_path / "cli.h5")
    assert loaded == cli  # same config, frames, diagnostics and status, bit for bit
    assert api == loaded
    in_memory = mf.simulate(config, **SMALL)
    assert in_memory == loaded
    with h5py.File(tmp_path / "api.h5") as f, h5py.File(tmp_path / "cli.h5") as g:
        assert f.attrs["config"] == g.attrs["config"]
        assert set(f) == set(g) and set(f["diagnostics"]) == set(g["diagnostics"])


def test_a_run_prints_short_and_reads_lazily(tmp_path):
    mf.simulate(ROOT / "data" / "default.toml", out=tmp_path / "r.h5", **SMALL)
    run = mf.load(tmp_path / "r.h5")
    assert run._states is None  # noqa: SLF001 - nothing read beyond t and the diagnostics
    text = repr(run)
    assert text.startswith("Run(particle, n=24, d=3, 3 frames") and "completed" in text and len(text) < 200
    assert run._states is None  # noqa: SLF001 - the repr reads one frame, not all
    np.testing.assert_array_equal(run.frame(-1), run.x[-1])
    with pytest.raises(AttributeError, match="particle run has no 'mass'"):
        run.mass  # noqa: B018


def test_plot_and_animate_return_matplotlib_objects_and_save_on_request(tmp_path):
    from matplotlib.animation import FuncAnimation

    run = mf.simulate(ROOT / "data" / "default.toml", **SMALL)
    fig = run.plot()
    assert isinstance(fig, Figure)
    assert isinstance(run.plot(tmp_path / "run.png"), Figure) and (tmp_path / "run.png").stat().st_size > 1000
    anim = run.animate(tmp_path / "run.gif")
    assert isinstance(anim, FuncAnimation) and (tmp_path / "run.gif").read_bytes()[:3] == b"GIF"


def test_to_xarray_round_trips_and_to_dataframe_holds_the_scalars(tmp_path):
    pytest.importorskip("xarray", reason="the xarray extra is part of the test extra; this environment lacks it")
    mf.simulate(ROOT / "data" / "default.toml", out=tmp_path / "r.h5", **SMALL)
    run = mf.load(tmp_path / "r.h5")
    ds = run.to_xarray()
    assert ds["x"].dims == ("t", "token", "coord") and "diagnostics/energy" in ds
    assert mf.Run.from_xarray(ds) == run
    ds.to_netcdf(tmp_path / "r.nc")
    import xarray as xr

    with xr.open_dataset(tmp_path / "r.nc") as back:
        assert mf.Run.from_xarray(back.load()) == run
    frame = run.to_dataframe()
    assert list(frame["t"]) == [0.0, 0.25, 0.5] and "energy" in frame.columns


def test_grid_runs_expose_mass_points_and_areas(tmp_path):
    grid = {"init": {"kind": "vmf", "kappa": 2.0}, "solver": {"kind": "grid", "t_final": 0.2, "save_every": 0.1},
            "grid": {"cells": 200}}
    run = mf.simulate(grid, out=tmp_path / "g.h5")
    loaded = mf.load(tmp_path / "g.h5")
    assert loaded == run and loaded.kind == "grid"
    assert loaded.mass.shape == (3, 200) and loaded.points.shape == (200, 3) and loaded.areas.shape == (200,)
    np.testing.assert_allclose(loaded.areas.sum(), 4 * np.pi, rtol=1e-12)
    assert "grid, N=200 cells" in repr(loaded)
    assert isinstance(loaded.plot(), Figure)
    np.testing.assert_array_equal(loaded.mesh().areas, loaded.areas)
    mesh = mf.mesh(200)  # a run of mf.solve keeps its mesh: the Voronoi mesh of its centroids had areas 3 % of a cell off
    solved = mf.solve(mf.Problem(mf.Model(d=3, beta=2.0), mf.initial_mass(mesh, "vmf", kappa=2.0), mesh=mesh), mf.GridSolver(),
                      t_final=0.1)
    assert solved.mesh() is mesh
    np.testing.assert_array_equal(solved.mesh().areas, solved.areas)


def test_solve_shares_one_shape_across_the_four_solvers():
    x0 = mf.sample_uniform(16, 3, seed=1)
    model = mf.Model(d=3, beta=4.0, heads=mf.heads.identity(3))
    particle = mf.solve(mf.Problem(model, x0), mf.ParticleSolver(dt=0.05), t_final=0.5, save_every=0.25)
    assert particle.kind == "particle" and particle.frames == 3 and "energy" in particle.diagnostics
    pooled = mf.Model(d=3, beta=4.0, attention="pooled", heads=mf.heads.identity(3))
    jko = mf.solve(mf.Problem(pooled, x0), mf.JKOSolver(tau=0.05), t_final=0.5, save_every=0.25)
    assert jko.info["jko_steps"] == 10 and "jko_residual" in jko.diagnostics
    mesh = mf.mesh(200)
    grid = mf.solve(mf.Problem(model, mf.initial_mass(mesh, "vmf", kappa=2.0), mesh=mesh), mf.GridSolver(), t_final=0.2)
    assert grid.kind == "grid" and abs(grid.final.sum() - 1.0) < 1e-12
    head = mf.heads.Head(Q=np.eye(3), K=np.eye(3), V=np.diag([1.0, 0.5, 0.25]))
    zero = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0, heads=head), x0), mf.ZeroTemperatureSolver(dt=0.1), t_final=1.0)
    assert "rayleigh" in zero.diagnostics and zero.diagnostics["rayleigh"][-1] > zero.diagnostics["rayleigh"][0]
    assert particle.config is None and repr(particle).startswith("Run(particle, n=16")
    # each run named by its solver (JKO and zero-temperature runs had read "Run(particle, …)")
    assert repr(jko).startswith("Run(jko, n=16, d=3, 3 frames") and repr(zero).startswith("Run(zero-temperature, n=16")
    assert repr(grid).startswith("Run(grid, N=200 cells")
    zero_cli = mf.simulate(ROOT / "data" / "default.toml", **{**SMALL, "solver.kind": "zero-temperature"})
    assert repr(zero_cli).startswith("Run(zero-temperature, n=24")
    summary = particle.summary()  # without a config it shows the model (it had shown the status and frame count only)
    assert "model:     d=3 β=4 attention=softmax direction=ascent" in summary and "tokens n=16" in summary
    assert "energy:" in summary and "cells N=200" in grid.summary()
    # and its solver's options and step count, as a simulate run's summary has them (it had shown neither)
    assert "solver:    particle method=rk4 dt=0.05 t_final=0.5" in summary and "steps:     10 rk4 steps" in summary
    assert "solver:    jko variant=particle τ=0.05 mobility=frozen tol=1e-10 t_final=0.5" in jko.summary()
    assert "steps:     10 JKO steps" in jko.summary()
    assert "solver:    grid 200 cells (fibonacci) method=ssprk3 cfl=0.5 order=2 t_final=0.2" in grid.summary()
    assert "solver:    zero-temperature method=rk4 dt=0.1 t_final=1" in zero.summary()
    from meanfield.noise import NoiseSchedule

    noisy = mf.solve(mf.Problem(model, x0), mf.ParticleSolver(method="euler", dt=0.05, noise=NoiseSchedule(gamma=10.0, seed=3)),
                     t_final=0.1)
    assert "noise:     γ=10 seed=3" in noisy.summary()


def test_a_run_in_memory_names_a_frame_past_its_end_and_prints_its_last_time():
    run = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0, heads=mf.heads.identity(3)), mf.sample_uniform(4, 3, seed=0)),
                   mf.ParticleSolver(dt=0.05), t_final=0.5, save_every=0.25)
    assert run.frames == 3 and "3 frames, t=0..0.5," in repr(run)
    np.testing.assert_array_equal(run.frame(-3), run.x[0])
    for index in (3, -4):  # the package's message (frame 3 had fallen through to NumPy's "index 3 is out of bounds")
        with pytest.raises(IndexError, match=f"frame {index} of a run with 3 frames"):
            run.frame(index)


def test_your_own_trackers_record_scalars_and_can_stop_a_run():
    seen = []

    def spread(t, x):
        seen.append(t)
        return {"spread": float(np.linalg.norm(x.mean(axis=0)))}

    run = mf.simulate(None, trackers=[spread], **SMALL)
    assert seen == [0.0, 0.25, 0.5] and run.diagnostics["spread"].shape == (3,)

    def stop_early(t, x):
        if t >= 0.25:
            raise mf.StopRun("enough")

    stopped = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), mf.sample_uniform(8, 3)), mf.ParticleSolver(dt=0.05),
                       t_final=1.0, save_every=0.25, trackers=[stop_early])
    assert stopped.status == "stopped" and stopped.stop_reason == "enough" and stopped.frames == 2


def test_one_callable_given_as_trackers_records_its_series():
    # the docstring's "one callable" form had to be recorded as a list of one
    def spread(t, x):
        return {"spread": float(np.linalg.norm(x.mean(axis=0)))}

    run = mf.simulate(None, trackers=spread, **SMALL)
    expected = [np.linalg.norm(run.states[k].mean(axis=0)) for k in range(run.frames)]
    np.testing.assert_allclose(run.diagnostics["spread"], expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize(("tracker", "says"), [
    (lambda t, x: 1 / 0, "raised ZeroDivisionError"),  # had been blamed on numbers out of floating-point range
    (lambda t, x: 1.0, "returned a float"),  # had been a TypeError about iteration
    (lambda t, x: {"v": "text"}, "'v' = 'text'"),
    (lambda t, x: {"energy": -1.0}, "at t=0 returns 'energy', which the run's own trackers record"),  # had replaced the energy on disk; named no time
])
def test_your_own_trackers_are_named_when_they_go_wrong(tracker, says, tmp_path):
    out = tmp_path / "r.h5"
    with pytest.raises(mf.TrackerError, match="the tracker '<lambda>'") as info:
        mf.simulate(None, trackers=[tracker], out=out, **SMALL)
    assert says in str(info.value)
    if "ZeroDivision" in says:
        assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert mf.load(out).status == "failed"
    with pytest.raises(mf.TrackerError, match=says.split(",")[0]):
        mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), mf.sample_uniform(8, 3)), mf.ParticleSolver(dt=0.05), t_final=0.1,
                 trackers=[tracker])
    with pytest.raises(TypeError, match="a tracker is a callable"):
        mf.simulate(None, trackers=[5], **SMALL)
    np.testing.assert_array_equal(mf.simulate(None, trackers=[lambda t, x: {"n": np.int64(3)}], **SMALL).diagnostics["n"], 3.0)


def test_a_tracker_that_fails_late_raises_with_the_frames_before_it(tmp_path):
    """The frames of a run without a file had been lost with the TrackerError (RunFailed and RunInterrupted carry them)."""
    def late(t, x):
        if t > 0.35:
            raise ValueError("late")

    problem = mf.Problem(mf.Model(d=3, beta=1.0), mf.sample_uniform(8, 3, seed=0))
    with pytest.raises(mf.TrackerError, match="the tracker 'late' at t=0.4 raised ValueError: late") as info:
        mf.solve(problem, mf.ParticleSolver(dt=0.05), t_final=1.0, save_every=0.1, trackers=[late])
    with pytest.raises(ValueError, match=r"^save_every = 1e-09 saves 1e\+09 frames .* limit is 1e\+06 frames"):
        mf.solve(problem, mf.ParticleSolver(dt=0.05), t_final=1.0, save_every=1e-9)
    run = info.value.run
    assert run.status == "failed" and run.t.tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3]) and isinstance(info.value.__cause__, ValueError)
    with pytest.raises(mf.TrackerError) as info:
        mf.simulate(None, trackers=[late], **{**SMALL, "save_every": 0.1, "t_final": 1.0})
    assert info.value.run.frames == 4 and info.value.run.status == "failed"


def test_an_interrupted_run_of_the_api_names_resume_true(tmp_path, interactive_sigint):
    # its message had named the command line's --resume, which mf.simulate does not take
    import os
    import signal

    def interrupt(t, x):
        if t == 0.2:
            os.kill(os.getpid(), signal.SIGINT)

    out = tmp_path / "p.h5"
    with pytest.raises(mf.RunInterrupted, match=r"interrupted by SIGINT at t = 0.2; 3 frames saved in .*p\.h5; "
                                                r"resume=True continues$") as info:
        mf.simulate(None, out=out, trackers=[interrupt], t_final=0.4, save_every=0.1, **{"init.n": 8})
    assert "--resume" not in str(info.value)
    assert mf.simulate(out=out, resume=True).frames == 5


def test_a_callers_stoprun_values_are_checked_and_two_callers_names_are_told_apart():
    from meanfield.solvers.loop import StopRun

    problem = mf.Problem(mf.Model(d=3, beta=1.0), mf.sample_uniform(8, 3, seed=0))
    solver = mf.ParticleSolver(dt=0.05)

    def shadow(t, x):  # had replaced the run's own energy series
        raise StopRun("stop", values={"energy": -1.0})

    def text(t, x):  # had ended in NumPy's ValueError, the run lost
        raise StopRun("stop", values={"note": "hello"})

    with pytest.raises(mf.TrackerError, match="'energy', which the run's own trackers record"):
        mf.solve(problem, solver, t_final=0.5, trackers=shadow)
    with pytest.raises(mf.TrackerError, match=r"the tracker 'text' at t=0 \(its StopRun\) returned 'note' = 'hello'"):
        mf.solve(problem, solver, t_final=0.5, trackers=text)
    ok = mf.solve(problem, solver, t_final=0.5, trackers=lambda t, x: (_ for _ in ()).throw(StopRun("enough", values={"mine": 1})))
    assert ok.status == "stopped" and ok.diagnostics["mine"].tolist() == [1.0]

    def first(t, x):
        return {"a": 1.0}

    def second(t, x):
        return {"a": 2.0}

    with pytest.raises(mf.TrackerError, match="the tracker 'second' at t=0 returns 'a', which the tracker 'first' before it records"):
        mf.solve(problem, solver, t_final=0.5, trackers=[first, second])

    def stops(t, x):
        raise StopRun("enough", values={"a": 1.0})

    with pytest.raises(mf.TrackerError, match="the tracker 'second' at t=0 returns 'a', which the tracker 'stops' before it records"):
        mf.solve(problem, solver, t_final=0.5, trackers=[stops, second])  # (a KeyError had named no one)


def test_problem_takes_extreme_scales_and_names_what_is_wrong():
    """Masses of 1e308 had overflowed to zero masses, tokens of 1e300 to zero vectors and 1e-200 been "zero"; a ragged
    list had got NumPy's words, a wrong weights shape no shape."""
    model, x = mf.Model(d=3, beta=1.0), mf.sample_uniform(8, 3, seed=0)
    np.testing.assert_allclose(mf.Problem(model, x, weights=np.full(8, 1e308)).weights, 1 / 8, rtol=1e-15)
    for scale in (1e300, 1e-200):
        np.testing.assert_allclose(mf.Problem(model, x * scale).initial, x, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="^initial must be an array of numbers"):
        mf.Problem(model, [[1.0, 0.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match=r"got shape \(7,\)"):
        mf.Problem(model, x, weights=np.ones(7))


def test_a_failed_run_raises_with_its_frames(tmp_path):
    model = mf.Model(d=3, beta=1.0)

    class Poisoned:  # a model whose velocity turns NaN after t = 0.3 (trackers see the frames read-only)
        d = 3

        def __getattr__(self, name):
            return getattr(model, name)

        def velocity(self, x, t=0.0, **kw):
            v = model.velocity(x, t, **kw)
            return v * np.nan if t > 0.3 else v

    with pytest.raises(mf.RunFailed) as info:
        mf.solve(mf.Problem(Poisoned(), mf.sample_uniform(8, 3)), mf.ParticleSolver(dt=0.05),
                 t_final=1.0, save_every=0.25)
    assert info.value.run.status == "failed" and info.value.run.frames >= 2


def test_simulate_refuses_to_overwrite_and_resume_says_when_there_is_nothing_to_do(tmp_path, capsys):
    out = tmp_path / "r.h5"
    mf.simulate(None, out=out, **SMALL)
    with pytest.raises(mf.ConfigError, match="^out: .* already exists; use overwrite=True .* resume=True"):  # the API's names
        mf.simulate(None, out=out, **SMALL)
    with pytest.raises(mf.ConfigError, match="^path: file not found"):  # not the command line's OUT.h5
        mf.load(tmp_path / "nope.h5")
    for call, name in ((mf.simulate, "config"), (mf.load_config, "source")):  # not the command line's CONFIG
        with pytest.raises(mf.ConfigError, match=f"^{name}: file not found"):
            call(tmp_path / "nope.toml")
        with pytest.raises(mf.ConfigError, match=f"^{name}: expected a TOML path, a mapping or None, got int"):
            call(3)
    with pytest.raises(mf.ConfigError, match="^config: file not found"):  # by name, as the one-page interface has it
        mf.simulate(config=tmp_path / "nope.toml")
    assert main(["simulate", str(tmp_path / "nope.toml"), "-o", str(tmp_path / "n.h5"), "--quiet"]) == 2
    assert "CONFIG: file not found" in capsys.readouterr().err
    mf.simulate(None, out=out, overwrite=True, **SMALL)
    (tmp_path / "notes.txt").write_text("keep me")
    assert main(["simulate", str(ROOT / "data/default.toml"), "-o", str(tmp_path / "notes.txt"), "--quiet"]) == 2
    assert "already exists" in capsys.readouterr().err and (tmp_path / "notes.txt").read_text() == "keep me"
    cfg = str(ROOT / "data/default.toml")
    sets = ["--set", "solver.t_final=0.5", "--set", "init.n=24", "--set", "solver.save_every=0.25"]
    assert main(["simulate", cfg, "-o", str(tmp_path / "c.h5"), "--quiet", *sets]) == 0
    capsys.readouterr()
    assert main(["simulate", cfg, "-o", str(tmp_path / "c.h5"), "--quiet", "--resume", *sets]) == 0
    assert "already complete" in capsys.readouterr().out


def test_resume_without_a_source_continues_the_run_stored_in_out(tmp_path):
    # the defaults had been taken as the source, and the stored run refused for every key it had set
    settings = {"beta": 9.0, "save_every": 0.25, "init.n": 24, "init.seed": 5}
    straight = mf.simulate(None, out=tmp_path / "straight.h5", t_final=1.0, **settings)
    mf.simulate(None, out=tmp_path / "r.h5", t_final=0.5, **settings)
    extended = mf.simulate(out=tmp_path / "r.h5", resume=True, t_final=1.0)
    assert extended.config["model"]["beta"] == 9.0 and extended.frames == straight.frames == 5
    np.testing.assert_array_equal(extended.states, straight.states)
    with pytest.raises(mf.ConfigError, match="^model.beta: "):  # an override that changes the run is still refused
        mf.simulate(out=tmp_path / "r.h5", resume=True, t_final=2.0, beta=4.0)
    (tmp_path / "junk.h5").write_bytes(b"not a run")
    with pytest.raises(mf.ConfigError, match="^out: "):
        mf.simulate(out=tmp_path / "junk.h5", resume=True)


def test_a_run_stopped_at_a_steady_state_has_nothing_to_resume_and_meanfield_run_resumes(tmp_path, capsys):
    # each --resume of a run stopped at a steady state had taken one more frame; an interrupted `meanfield run` had been
    # told "--resume continues", which run did not take
    cfg = str(ROOT / "data/default.toml")
    sets = ["--set", "solver.steady_tol=0.05", "--set", "init.n=32", "--set", "solver.t_final=20"]
    out = tmp_path / "steady.h5"
    assert main(["simulate", cfg, "-o", str(out), "--quiet", *sets]) == 0
    frames = mf.load(out).frames
    capsys.readouterr()
    assert main(["simulate", cfg, "-o", str(out), "--quiet", "--resume", *sets]) == 0
    assert "stopped at t = " in capsys.readouterr().out and mf.load(out).frames == frames
    common = ["--out", str(tmp_path / "r.h5"), "--set", "init.n=24", "--quiet", "--plot", str(tmp_path / "r.png")]
    assert main(["run", *common, "--set", "solver.t_final=0.5"]) == 0
    whole = mf.load(tmp_path / "r.h5").x
    assert main(["run", *common, "--set", "solver.t_final=1.0", "--resume"]) == 0
    extended = mf.load(tmp_path / "r.h5")
    assert extended.t[-1] == 1.0 and np.array_equal(extended.x[: len(whole)], whole)


def test_the_readme_python_examples_run(tmp_path, monkeypatch):
    """Every Python block of the README's *Python* section, run in order in one namespace (from an empty folder)."""
    import re
    import shutil

    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) >= 4
    (tmp_path / "data").mkdir()
    shutil.copy(ROOT / "data" / "default.toml", tmp_path / "data" / "default.toml")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - the README's own examples
    assert isinstance(namespace["run"], mf.Run) and (tmp_path / "run.h5").is_file() and (tmp_path / "run.gif").is_file()
    assert "mean_norm" in namespace["run"].diagnostics
    shown = re.search(r"^run = (mf\.simulate\(.*?\)).*\n^run +# (Run\(.*\))$", section, flags=re.M)  # the repr it shows
    assert shown is not None and repr(eval(shown.group(1), namespace)) == shown.group(2)  # noqa: S307 - the README's own


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: mf.Model(d=3, beta=float("nan")), "beta"),
        (lambda: mf.Model(d=3, beta=-1.0), "beta"),
        (lambda: mf.Model(d=3, beta="x"), "beta"),
        (lambda: mf.Model(d=1, beta=1.0), "d"),
        (lambda: mf.Model(d=3.0, beta=1.0), "d"),
        (lambda: mf.Model(d=3, beta=1.0, tolerance=0.0), "tolerance"),
        (lambda: mf.Model(d=3, beta=1.0, precision="float16"), "precision"),
        (lambda: HeadStack(B=np.stack([np.eye(3)] * 3), V=np.stack([np.eye(3)] * 3), w=[0.5, 0.5]), "weight"),
        (lambda: HeadStack(B=np.eye(3)[None], V=np.eye(3)[None], w=[-1.0]), "weights"),
        # found in review: ZeroDivisionError in solve, a TypeError, a ZeroDivisionError, numpy's matmul error, NaN velocities,
        # and the tokens blamed for heads of another dimension
        (lambda: mf.ParticleSolver(dt=0), "dt"),
        (lambda: mf.ZeroTemperatureSolver(dt=0), "dt"),
        (lambda: mf.ParticleSolver(dt="0.1"), "dt"),
        (lambda: mf.ParticleSolver(method="leapfrog"), "leapfrog"),
        (lambda: mf.ParticleSolver(method="rk45", rtol=-1.0), "rtol"),
        (lambda: HeadStack(B=np.zeros((0, 3, 3)), V=np.zeros((0, 3, 3))), "H ≥ 1"),
        (lambda: mf.heads.Head(Q=np.eye(3), K=np.eye(2), V=np.eye(3)), "Q and K"),
        (lambda: mf.heads.Head(Q=np.eye(3), K=np.eye(3), V=np.full((3, 3), np.nan)), "finite"),
        (lambda: mf.Model(d=3, beta=1.0, heads=HeadStack(B=np.eye(4)[None], V=np.eye(4)[None])), "d = 3"),
        (lambda: mf.Model(d=3, beta=1.0, heads=HeadStack(B=np.full((1, 3, 3), np.inf), V=np.eye(3)[None])), "finite"),
    ],
)
def test_the_python_api_names_a_bad_value_when_it_is_built(build, name):
    # the config refused these; the API had accepted them and failed later (NaN, a TypeError deep in a kernel, or w read
    # past its end by the compiled kernels)
    with pytest.raises(ValueError, match=name):
        build()


def test_a_head_takes_lists():
    head = mf.heads.Head(Q=[[1, 0, 0], [0, 1, 0]], K=[[1, 0, 0], [0, 2, 0]], V=np.eye(3))  # lists had raised AttributeError
    np.testing.assert_array_equal(head.B, np.diag([1.0, 2.0, 0.0]))


@pytest.mark.parametrize(("options", "name"), [({"t_final": "1"}, "t_final"), ({"t_final": 1.0, "save_every": 0.0}, "save_every"),
                                               ({"t_final": 1.0, "save_every": -0.5}, "save_every"), ({"t_final": float("inf")}, "t_final")])
def test_solve_names_a_bad_time(options, name):
    problem = mf.Problem(mf.Model(d=3, beta=1.0), mf.sample_uniform(8, 3))
    with pytest.raises(ValueError, match=name):
        mf.solve(problem, mf.ParticleSolver(dt=0.05), **options)


def test_solve_caps_the_steps_of_a_fixed_step_as_the_config_does():
    # dt = 1e-13 had run on until stopped by hand (the CLI caps a run at 1e8 steps)
    problem = mf.Problem(mf.Model(d=3, beta=1.0), mf.sample_uniform(8, 3))
    with pytest.raises(ValueError, match="dt"):
        mf.solve(problem, mf.ParticleSolver(dt=1e-13), t_final=1.0)


def test_solve_refuses_a_causal_mask_where_the_config_does():
    # mf.solve takes no config: the grid solver had masked by cell index, JKO and zero temperature ignored the mask
    mesh = mf.mesh(200)
    m0 = mf.initial_mass(mesh, "vmf", kappa=2.0)
    x0 = mf.sample_uniform(10, 3, seed=0)
    causal = {"d": 3, "beta": 2.0, "mask": "causal"}
    for problem, solver in (
        (mf.Problem(mf.Model(**causal), m0, mesh=mesh), mf.GridSolver()),
        (mf.Problem(mf.Model(**causal), x0), mf.ZeroTemperatureSolver()),
        (mf.Problem(mf.Model(**causal, attention="pooled"), x0), mf.JKOSolver(tau=0.1)),
        (mf.Problem(mf.Model(**causal, attention="pooled"), m0, mesh=mesh), mf.JKOSolver(tau=0.1)),
    ):
        with pytest.raises(mf.ConfigError, match="model.mask"):
            mf.solve(problem, solver, t_final=0.2)
    assert mf.solve(mf.Problem(mf.Model(**causal), x0), mf.ParticleSolver(dt=0.1), t_final=0.2).frames == 2


def test_every_name_the_readme_imports_from_meanfield_exists():
    # a block outside the Python section imported meanfield_layers from meanfield.cli.forward, where it is not
    import ast
    import importlib
    import importlib.util
    import re

    readme = (ROOT / "README.md").read_text()
    missing = []
    for block in re.findall(r"```python\n(.*?)```", readme, flags=re.S):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "meanfield":
                module = importlib.import_module(node.module)
                missing += [f"{node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)
                            and importlib.util.find_spec(f"{node.module}.{a.name}") is None]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "meanfield":
                        importlib.import_module(alias.name)
    assert not missing, missing


def test_keyword_overrides_take_numpy_scalars_and_arrays():
    # values from np.arange or linspace in a notebook: np.int64 had been refused as "not an integer"
    run = mf.simulate(ROOT / "data" / "default.toml", n=np.int64(8), t_final=np.float64(0.2), save_every=np.float32(0.25))
    assert run.config["init"]["n"] == 8 and type(run.config["init"]["n"]) is int and run.frames == 2
    cfg = mf.load_config(ROOT / "data" / "default.toml", **{"model.heads": [{"Q": np.eye(3), "K": "identity", "V": "aligned"}]})
    assert cfg["model"]["heads"][0]["Q"] == np.eye(3).tolist()
    with pytest.raises(mf.ConfigError, match="init.n"):
        mf.simulate(ROOT / "data" / "default.toml", n=np.bool_(True))


def test_a_direct_model_whose_unshifted_terms_overflow_warns_once_and_a_config_only_notes():
    # mf.Model(attention="unnormalized", beta=750) returned NaN velocities without a word (the config gave a note)
    import warnings

    from meanfield.build import build_model
    from meanfield.errors import ConfigNote
    from meanfield.model import UnshiftedOverflowWarning

    B = np.diag([2.0, 1.0, 0.5])
    heads = HeadStack(B=B[None], V=np.eye(3)[None])
    with pytest.warns(UnshiftedOverflowWarning, match=r"β‖B_h‖₂ = 800"):
        model = mf.Model(d=3, beta=400.0, heads=heads, attention="unnormalized")
    with np.errstate(over="ignore", invalid="ignore"):  # what the warning announces: the top direction leaves float64
        v = model.ambient_velocity(np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]), 0.0)
    assert not np.all(np.isfinite(v))
    # 700 < 709.78: the terms stay floats, but a velocity of e^700 puts a step's tokens past the floats' squares
    with pytest.warns(UnshiftedOverflowWarning, match=r"its velocity, up to e\^\(β‖B_h‖₂\)‖V_h‖_F = e\^700\.5, passes e\^345\.4"):
        model = mf.Model(d=3, beta=350.0, heads=heads, attention="unnormalized")
    x = np.array([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0]])  # what it announces: a step there leaves the floats
    with pytest.raises(mf.RunFailed, match="tokens left the sphere|NaN/Inf"), np.errstate(over="ignore", invalid="ignore"):
        mf.solve(mf.Problem(model, x), mf.ParticleSolver(dt=0.01, method="euler"), t_final=0.01, energy=False, speed=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mf.Model(d=3, beta=170.0, heads=heads, attention="unnormalized")  # e^340 < e^345.4
        mf.Model(d=3, beta=400.0, heads=heads)  # softmax shifts its scores
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = mf.load_config(ROOT / "data" / "default.toml", **{"model.attention": "unnormalized", "model.beta": 800.0})
        build_model(cfg)  # the config's note said it already
    assert not [w for w in caught if issubclass(w.category, UnshiftedOverflowWarning)]
    assert [w for w in caught if issubclass(w.category, ConfigNote) and "unshifted" in str(w.message)]
    # the default head (no [[model.heads]] table): one message, the config's note (it had got neither, then both)
    for beta, said in ((800.0, "β‖B‖₂ = 800"), (400.0, "e^400.5, passes e^345.4")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            build_model(mf.load_config(None, **{"model.attention": "unnormalized", "model.beta": beta}))
        assert [str(w.message) for w in caught if issubclass(w.category, UnshiftedOverflowWarning)] == []
        notes = [str(w.message) for w in caught if issubclass(w.category, ConfigNote) and "unshifted" in str(w.message)]
        assert len(notes) == 1 and said in notes[0], notes


def test_a_beta_whose_scores_overflow_is_refused_and_the_largest_taken_runs():
    # β = 1e308 had run on: its scores β⟨x, By⟩ overflowed, the softmax rows went NaN and were patched over
    from meanfield.model import SCORE_BOUND_LIMIT, ScoreOverflowError

    B = np.diag([2.0, 1.0, 0.5])
    heads = HeadStack(B=B[None], V=np.eye(3)[None])
    with pytest.raises(ScoreOverflowError, match="beta = 1e"):
        mf.Model(d=3, beta=1e307, heads=heads)
    beta = SCORE_BOUND_LIMIT / np.linalg.norm(B)  # the largest β taken: every score and every difference finite
    model = mf.Model(d=3, beta=beta, heads=heads)
    x = np.random.default_rng(1).normal(size=(64, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    with np.errstate(over="raise", invalid="raise"):  # (terms below e^-745 underflow to 0, as they should)
        v = model.ambient_velocity(x, 0.0)
    # at that β each token attends to the argmax of ⟨x_i, B x_j⟩ (no ties among random points)
    expected = x[np.argmax(x @ B @ x.T, axis=1)]
    np.testing.assert_allclose(v, expected, rtol=0, atol=1e-12)
    # past 2^52 the scores' rounding passes 1/2: refused (β = 1e20 had been taken, and the kernels' rows went NaN)
    with pytest.raises(ScoreOverflowError, match=r"at most 2\^52"):
        mf.Model(d=3, beta=1e20, heads=mf.heads.identity(3))
    mf.Model(d=3, beta=1e20, heads=mf.heads.identity(3), attention="relu")  # which takes no β
    y = mf.sample_uniform(300, 3, seed=300)
    for backend in ("local", "blas", "auto"):
        top = mf.Model(d=3, beta=SCORE_BOUND_LIMIT / np.sqrt(3.0), heads=mf.heads.identity(3), backend=backend)
        assert np.all(np.isfinite(top.ambient_velocity(y, 0.0))), backend


def test_a_loaded_run_refuses_frames_of_a_file_written_over_it(tmp_path):
    # the frames were read from whatever file sat at the path: a run written over it had mixed the new tokens
    # (n = 4, d = 4) with the old times and config (d = 3)
    out = tmp_path / "s.h5"
    mf.simulate(out=out, t_final=0.5, save_every=0.1, **{"init.n": 16})
    run = mf.load(out)
    mf.simulate(out=out, overwrite=True, t_final=0.1, save_every=0.1, d=4, **{"init.n": 4})
    with pytest.raises(mf.ConfigError, match="replaced by another file since this run was loaded"):
        run.x
    assert mf.load(out).x.shape == (2, 4, 4)
    same = mf.load(out)
    mf.simulate(out=out, resume=True, t_final=0.3, d=4, save_every=0.1, **{"init.n": 4})  # extended in place: the same file, more frames
    assert same.x.shape == (2, 4, 4)


def test_resuming_to_an_earlier_t_final_from_python_names_no_cli_flag(tmp_path):
    # "--resume only extends a run" had named the CLI's flag in a notebook's mf.simulate(resume=True)
    out = tmp_path / "r.h5"
    mf.simulate(out=out, t_final=0.2, save_every=0.1, **{"init.n": 4})
    with pytest.raises(mf.ConfigError, match="^solver.t_final: .*resuming only extends a run") as error:
        mf.simulate(out=out, resume=True, t_final=0.1, save_every=0.1, **{"init.n": 4})
    assert "--" not in str(error.value)


def test_a_run_gives_the_state_saved_at_a_time_and_names_the_frames_around_another(tmp_path):
    out = tmp_path / "at.h5"
    made = mf.simulate(out=out, t_final=0.7, save_every=0.1, **{"init.n": 8, "solver.dt": 0.05})
    for run in (made, mf.load(out)):  # in memory, and read lazily from the file
        assert run.t[3] == 0.3  # the decimal save time (the sum 0.1 + 0.1 + 0.1 had been 0.30000000000000004)
        np.testing.assert_array_equal(run.at(0.3), run.x[3])
        np.testing.assert_array_equal(run.at(0), run.x[0])
        np.testing.assert_array_equal(run.at(np.float32(0.7)), run.final)
        with pytest.raises(KeyError, match=r"t = 0.35 is not a saved time .*around it: 0.3 and 0.4"):
            run.at(0.35)
        with pytest.raises(KeyError, match=r"t = 2 is not a saved time .*the nearest: 0.7"):
            run.at(2.0)
        with pytest.raises(ValueError, match="finite"):
            run.at(float("nan"))
        with pytest.raises(TypeError, match="a number"):
            run.at("0.3")
    # frames at sums of steps (files of earlier versions, other writers) are found within round-off
    summed = mf.Run.from_states(t=0.1 * np.arange(8), states=np.arange(8.0).reshape(8, 1, 1), state_name="x", diagnostics={})
    assert summed.t[3] != 0.3 and summed.at(0.3).item() == 3.0
    empty = mf.Run.from_states(t=np.zeros(0), states=np.zeros((0, 4, 3)), state_name="x", diagnostics={})
    with pytest.raises(KeyError, match="saved no frames"):
        empty.at(0.0)
    # the tolerance follows the frames: tiny times (1e-9 of 1 had taken a frame 1e-10 away) and late starts
    tiny = mf.Run.from_states(t=np.array([0.0, 1e-10, 2e-10]), states=np.zeros((3, 2, 1)), state_name="x", diagnostics={})
    with pytest.raises(KeyError, match="around it: 0 and 1e-10"):
        tiny.at(5e-11)
    late = mf.Run.from_states(t=1e8 + np.array([0.0, 0.01, 0.02]), states=np.arange(3.0).reshape(3, 1, 1), state_name="x",
                              diagnostics={})
    assert late.at(1e8 + 0.01).item() == 1.0
    with pytest.raises(KeyError, match="around it: 100000000 and 100000000.01"):
        late.at(1e8 + 0.005)


def test_a_file_without_committed_frames_still_knows_the_shape_of_its_states(tmp_path):
    import h5py

    out = tmp_path / "empty.h5"
    mf.simulate(out=out, t_final=0.2, save_every=0.1, **{"init.n": 12})
    with h5py.File(out, "a") as f:
        f["committed_frames"][0] = 0  # as a run killed before its first frame leaves it
    run = mf.load(out)
    assert run.frames == 0 and run.shape == (12, 3)  # it had been ()
    assert run.x.shape == (0, 12, 3)


def test_concentration_and_diagnosis_show_what_the_commands_print(tmp_path, capsys):
    # print(run.concentration()) and a notebook cell had shown the dataclass's repr, kilobytes of arrays
    out = tmp_path / "c.h5"
    run = mf.simulate(ROOT / "data/concentration.toml", out=out, t_final=1.0, **{"init.n": 100})
    analysis = run.concentration()
    assert str(analysis) == analysis.text() and "W2" in str(analysis)

    class Printer:  # IPython's pretty printer, as a notebook cell calls it
        def __init__(self) -> None:
            self.parts: list[str] = []

        def text(self, part: str) -> None:
            self.parts.append(part)

    for shown in (analysis, mf.simulate(ROOT / "data/default.toml", t_final=0.2, **{"init.n": 16}).diagnose()):
        printer = Printer()
        shown._repr_pretty_(printer, False)
        assert printer.parts == [shown.text()] and str(shown) == shown.text()
    assert main(["concentration", str(out)]) == 0
    printed = capsys.readouterr()
    assert analysis.text(cli=True).splitlines()[1] in printed.out  # (its warnings on stderr, not in the text)
    assert all(f"warning: {doubt}" in printed.err and doubt not in printed.out for doubt in analysis.warnings)


def test_concentration_of_a_run_of_solve_reads_the_head_from_its_model():
    # it had been refused ("this run has none", the config): the same flow through mf.simulate gives the numbers to match
    cfg = mf.load_config(ROOT / "data/concentration.toml", t_final=1.0, save_every=0.5, **{"init.n": 120})
    by_config = mf.simulate(cfg)
    solved = mf.solve(mf.Problem(by_config.model, by_config.x[0]), mf.ParticleSolver(method="rk4", dt=cfg["solver"]["dt"]),
                      t_final=1.0, save_every=0.5)
    expected, got = by_config.concentration(), solved.concentration()
    for key in ("w2_target", "v_eigenspace_distance", "e_eigenspace_distance"):
        np.testing.assert_allclose(got.curves[key], expected.curves[key], rtol=1e-12, atol=1e-14)
    assert got.summary["w2_min"] == pytest.approx(expected.summary["w2_min"], rel=1e-12)
    assert got.heading == "run: run  (particle solver, β = 16, d = 3)" and got.warnings == expected.warnings
    grid_cfg = mf.load_config(cfg, **{"solver.kind": "grid", "grid.cells": 300, "init.kind": "uniform", "model.beta": 64.0})
    grid = mf.simulate(grid_cfg)
    solved_grid = mf.solve(mf.Problem(grid.model, grid.mass[0], mesh=grid.mesh()), mf.GridSolver(), t_final=1.0, save_every=0.5)
    np.testing.assert_allclose(solved_grid.concentration().curves["w2_target"], grid.concentration().curves["w2_target"],
                               rtol=1e-12)  # the second-order grid: W2 integrates the reconstruction in both
    assert solved_grid.concentration().warnings == grid.concentration().warnings != []  # 300 cells do not resolve β = 64

    identity = mf.heads.identity(3)
    two = mf.solve(mf.Problem(mf.Model(d=3, beta=4.0, heads=[identity, identity]), by_config.x[0]), mf.ParticleSolver(dt=0.1),
                   t_final=0.2)
    with pytest.raises(mf.ConfigError, match="^model.heads: .*needs a single head, got 2"):
        two.concentration()

    class Turning:  # a time-dependent head: the note says whose Π♯ρ₀ is measured
        def at(self, t: float) -> HeadStack:
            c, s = np.cos(t), np.sin(t)
            rotation = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
            return HeadStack(B=(rotation @ np.diag([1.0, 0.5, 0.25]))[None], V=np.eye(3)[None])

    moving = mf.solve(mf.Problem(mf.Model(d=3, beta=4.0, heads=Turning()), by_config.x[0]), mf.ParticleSolver(dt=0.1),
                      t_final=0.2)
    assert any("heads change in time (schedule 'Turning')" in note for note in moving.concentration(policy="skip").notes)


def test_bad_arguments_of_the_notebook_api_are_named():
    # each of these had failed deep inside pathlib, NumPy or h5py, or been accepted and ignored
    with pytest.raises(mf.ConfigError, match="^out: expected a path"):
        mf.simulate(out=123)
    with pytest.raises(mf.ConfigError, match="^resume: .*give out=PATH"):
        mf.simulate(resume=True)
    run = mf.simulate(t_final=0.2, trackers=lambda t, x: {"mean_z": float(x[:, 2].mean())}, **{"init.n": 8})  # one callable
    np.testing.assert_allclose(run.diagnostics["mean_z"], run.x[:, :, 2].mean(axis=1), rtol=0, atol=1e-15)
    for index, error in ((1.0, TypeError), ("a", TypeError), (True, TypeError), (3, IndexError), (-4, IndexError)):
        with pytest.raises(error, match="index must be an integer|frame -?[34] of a run with 3 frames"):
            run.frame(index)
    for snapshots in (0, -2, 2.5):
        with pytest.raises(ValueError, match="snapshots must be an integer ≥ 1"):
            run.plot(snapshots=snapshots)
    for n, d, name in ((-1, 3, "n"), (2.5, 3, "n"), (4, 1, "d")):
        with pytest.raises(ValueError, match=f"^{name} must be an integer"):
            mf.sample_uniform(n, d)
    with pytest.raises(ValueError, match="unknown backend 'cuda'"):
        mf.Model(d=3, beta=1.0, backend="cuda")
    with pytest.raises(ValueError, match="works on S²"):
        mf.Model(d=4, beta=1.0, backend="harmonic")
    with pytest.raises(TypeError, match="model must be a meanfield.Model"):
        mf.Problem("model", mf.sample_uniform(4, 3))
    with pytest.raises(ValueError, match="3 times for 2 states"):
        mf.Run.from_states(t=[0.0, 1.0, 2.0], states=np.zeros((2, 4, 3)), state_name="x", diagnostics={})
    concentration = mf.simulate(ROOT / "data/concentration.toml", t_final=0.5, **{"init.n": 60})
    for threshold in (-1.0, float("nan"), "a"):
        with pytest.raises(mf.ConfigError, match="^threshold: expected a finite W2 > 0"):
            concentration.concentration(threshold=threshold)
    with pytest.raises(mf.ConfigError, match="^policy: expected one of"):
        concentration.concentration(policy="bogus")


def test_the_arrays_a_run_returns_are_read_only_views():
    # run.x -= … had changed the run itself, and with it later plots and analyses
    tokens = mf.sample_uniform(8, 3, seed=2)
    run = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), tokens, weights=np.full(8, 1 / 8)), mf.ParticleSolver(dt=0.05), t_final=0.2)
    for array in (run.x, run.final, run.frame(0), run.t, run.diagnostics["energy"], run.token_masses):
        with pytest.raises(ValueError, match="read-only"):
            array += 1.0
    assert tokens.flags.writeable  # the caller's own arrays keep their flags


def test_a_run_to_its_start_time_is_its_initial_frame_for_solve_as_for_simulate():
    # mf.simulate(t_final=0) gave the initial frame; mf.solve(t_final=0) had raised "need t_final > t_start"
    x0 = mf.sample_uniform(5, 3, seed=4)
    run = mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), x0), mf.ParticleSolver(dt=0.1), t_final=0.0)
    assert run.frames == 1 and run.status == "completed"
    np.testing.assert_array_equal(run.x[0], x0)
    assert mf.simulate(t_final=0.0, **{"init.n": 5}).frames == 1
    with pytest.raises(ValueError, match="t_final >= t_start"):
        mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), x0), mf.ParticleSolver(dt=0.1), t_final=-1.0)


def test_messages_of_the_shared_writer_name_the_keywords_of_simulate(tmp_path):
    # from Python, a second writer had been told about "-o", the command line's option
    from meanfield.io.lock import WriterLock

    out = tmp_path / "r.h5"
    with WriterLock(out), pytest.raises(mf.ConfigError) as info:  # a writer at work on out
        mf.simulate(out=out, overwrite=True, t_final=0.1, **{"init.n": 8})
    assert info.value.key == "out" and "being written by another meanfield process" in str(info.value)


def test_wrong_types_of_the_notebook_api_are_named(tmp_path):
    # overwrite="False" had replaced the file (a string is true); a dict problem, a solver class, steady_tol=-1,
    # trackers=5, a foreign xarray dataset and Run.load(5) had failed deep inside (or not at all)
    from pathlib import PurePosixPath

    import xarray as xr

    out = tmp_path / "run.h5"
    mf.simulate(None, out=out, **{"init.n": 8, "solver.t_final": 0.1})
    before = out.read_bytes()
    for flag in ("overwrite", "resume", "progress"):
        with pytest.raises(mf.ConfigError, match=f"^{flag}: expected True or False, got 'False'"):
            mf.simulate(None, out=out, **{flag: "False", "init.n": 10, "solver.t_final": 0.1})
    with pytest.raises(mf.ConfigError, match="^trackers: expected a callable or a sequence"):
        mf.simulate(None, trackers=5, **{"init.n": 8, "solver.t_final": 0.1})
    assert out.read_bytes() == before
    problem = mf.Problem(mf.Model(d=3, beta=1.0), mf.sample("uniform", 8, 3, seed=0))
    for args, error, match in ((({}, mf.ParticleSolver()), TypeError, "^problem must be a Problem"),
                               ((problem, mf.ParticleSolver), TypeError, "got the class ParticleSolver: make one"),
                               ((problem, None), TypeError, "^solver must be a solver")):
        with pytest.raises(error, match=match):
            mf.solve(*args, t_final=0.1)
    for options, match in ((dict(steady_tol=-1.0), "^steady_tol must be a finite number ≥ 0"),
                           (dict(steady_tol="x"), "^steady_tol must be a number"), (dict(steady_tol=None), "^steady_tol must be a number"),
                           (dict(energy="no"), "^energy must be True or False")):
        with pytest.raises(ValueError, match=match):
            mf.solve(problem, mf.ParticleSolver(), t_final=0.1, **options)
    with pytest.raises(TypeError, match="^trackers must be a callable or a sequence"):
        mf.solve(problem, mf.ParticleSolver(), t_final=0.1, trackers=5)
    one = mf.solve(problem, mf.ParticleSolver(), t_final=0.1, trackers=lambda t, x: {"probe": 2.0})  # one callable, as simulate
    np.testing.assert_array_equal(one.diagnostics["probe"], [2.0, 2.0])
    with pytest.raises(ValueError, match="^initial must be an array of numbers"):
        mf.Problem(mf.Model(d=3, beta=1.0), "abc")
    with pytest.raises(mf.ConfigError, match=r"^path: expected a file path \(str or os.PathLike\), got int"):
        mf.Run.load(5)
    assert mf.load(PurePosixPath(out)).frames == 2 and mf.load_config(PurePosixPath(ROOT / "data" / "default.toml"))
    for dataset, error in (("abc", TypeError), (xr.DataArray([1.0]), TypeError), (xr.Dataset({"a": ("u", [1.0])}), ValueError)):
        with pytest.raises(error, match="^dataset"):
            mf.Run.from_xarray(dataset)
    with pytest.raises(mf.ConfigError, match="^phase.betas: 1 appears twice"):
        mf.load_config(None, **{"phase.betas": [1.0, 1.0]})


def test_a_solve_run_read_back_from_xarray_says_it_keeps_no_model():
    # concentration() had raised a bare AttributeError from the model property
    pytest.importorskip("xarray")
    run = mf.solve(mf.Problem(mf.Model(d=3, beta=4.0), mf.sample_uniform(16, 3, seed=0)), mf.ParticleSolver(dt=0.05),
                   t_final=0.5, save_every=0.25)
    back = mf.Run.from_xarray(run.to_xarray())
    np.testing.assert_array_equal(back.x, run.x)
    with pytest.raises(mf.ConfigError, match="neither a config nor a model .*Run.from_xarray"):
        back.concentration()


def test_solver_options_and_complex_tokens_are_refused_where_they_are_given():
    # JKOSolver(tau=0) had been refused only inside solve, JKOSolver("implicit") a bare TypeError; complex tokens had
    # lost their imaginary part with a ComplexWarning
    for bad, name in ((dict(tau=0), "tau"), (dict(tau=-1.0), "tau"), (dict(tau="implicit"), "tau"),
                      (dict(mobility="lazy"), "mobility"), (dict(tol=0.0), "tol")):
        with pytest.raises(ValueError, match=f"^{name}"):
            mf.JKOSolver(**bad)
    # the options are keyword-only: a mobility given where the step goes is refused, as is any positional option
    for make, args in ((mf.JKOSolver, ("implicit",)), (mf.ParticleSolver, ("rk4", 0.1)), (mf.GridSolver, ("ssprk3",)),
                       (mf.ZeroTemperatureSolver, ("rk4",))):
        with pytest.raises(TypeError, match="positional argument"):
            make(*args)
    x0 = mf.sample_uniform(4, 3, seed=0)
    with pytest.raises(TypeError, match="complex"):
        mf.Problem(mf.Model(d=3, beta=1.0), x0.astype(complex))


def test_the_front_door_s_docstring_examples_pass():
    # load_config and simulate had no example (the module's are +SKIP, as they read data/ from the repository root)
    import doctest

    import meanfield.api

    result = doctest.testmod(meanfield.api, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 5 and result.failed == 0, result
    import meanfield.run

    result = doctest.testmod(meanfield.run, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 2 and result.failed == 0, result


def test_the_examples_of_every_exported_name_pass(tmp_path, monkeypatch):
    # the front door's names: where a docstring shows an example, it runs as shown (in a scratch folder)
    import doctest
    import importlib
    import inspect

    monkeypatch.chdir(tmp_path)
    finder, runner, shown = doctest.DocTestFinder(recurse=False), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS), []
    for name in mf.__all__:
        obj = getattr(mf, name)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)) or "Examples" not in (inspect.getdoc(obj) or ""):
            continue
        shown.append(name)
        for test in finder.find(obj, name, globs=dict(vars(importlib.import_module(obj.__module__)))):
            runner.run(test)
    result = runner.summarize(verbose=False)
    assert {"solve", "load", "sample_uniform", "sample_vmf", "simulate"} <= set(shown), shown
    assert result.failed == 0 and result.attempted >= 20, result


def test_keyword_overrides_take_tuples_and_arrays_where_the_config_takes_a_list():
    # a notebook's (0, 0, 1.0) had been "init.mean: expected a list, got tuple", a tuple of heads "expected a list or a
    # string" (while np.array([0, 0, 1.0]) was taken)
    import json

    vmf = {"t_final": 0.1, "init.n": 8, "init.kind": "vmf", "init.kappa": 3.0}
    by_list = mf.simulate(**{"init.mean": [0.0, 0.0, 1.0]}, **vmf)
    for mean in ((0, 0, 1.0), np.array([0, 0, 1.0])):
        run = mf.simulate(**{"init.mean": mean}, **vmf)
        assert run.config == by_list.config and json.dumps(run.config)
        np.testing.assert_array_equal(run.x, by_list.x)
    heads = mf.load_config({"model": {"heads": ({"Q": "identity"},)}}, t_final=0.1)
    assert heads == mf.load_config({"model": {"heads": [{"Q": "identity"}]}}, t_final=0.1) and json.dumps(heads)


def test_a_key_given_bare_and_dotted_is_refused_before_anything_runs(tmp_path):
    # beta=2 with **{"model.beta": 3} had run at β = 3, the other order at β = 2
    with pytest.raises(mf.ConfigError, match=r"model\.beta: given twice, as 'beta' and 'model\.beta'"):
        mf.load_config(beta=2, **{"model.beta": 3})
    with pytest.raises(mf.ConfigError, match=r"model\.beta: given twice, as 'model\.beta' and 'beta'"):
        mf.load_config(**{"model.beta": 3}, beta=2)
    with pytest.raises(mf.ConfigError, match=r"solver\.t_final: given twice"):
        mf.simulate(out=tmp_path / "run.h5", t_final=0.1, **{"solver.t_final": 0.2})
    assert not (tmp_path / "run.h5").exists()
    # a keyword over the source's value replaces it
    assert mf.load_config({"model": {"beta": 2.0}}, beta=3)["model"]["beta"] == 3.0


def test_resuming_without_a_callers_tracker_says_which_series_stop(tmp_path):
    # its values had turned NaN without a word
    def spread(t, x):
        return {"mean_norm": float(np.linalg.norm(x.mean(axis=0)))}

    out = tmp_path / "tr.h5"
    mf.simulate(out=out, t_final=0.5, save_every=0.25, trackers=[spread], **{"init.n": 16})
    with pytest.warns(mf.MeanfieldWarning, match=r"the stored series mean_norm had no tracker in this session .* NaN from "
                                                  r"t = 0.75 on"):
        run = mf.simulate(out=out, resume=True, t_final=1.0)
    assert np.all(np.isnan(run.diagnostics["mean_norm"][3:])) and np.all(np.isfinite(run.diagnostics["mean_norm"][:3]))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", mf.MeanfieldWarning)
        mf.simulate(out=out, resume=True, t_final=1.5, trackers=[spread])  # given again: no word


def test_model_refuses_at_construction_what_the_config_refuses():
    # float32 with a sphere kernel, and a tolerance outside the config's [1e-15, 1e-2], had been taken and failed (or
    # run) at the first velocity
    for backend in ("harmonic", "local", "numpy", "numba"):
        with pytest.raises(ValueError, match="float32.*'fused', 'blas' or 'auto' only"):
            mf.Model(d=3, beta=4.0, backend=backend, precision="float32")
    mf.Model(d=3, beta=4.0, backend="blas", precision="float32")
    for tolerance in (0.5, 0.999, 0.011, 1e-16, 1e-20):
        with pytest.raises(ValueError, match=r"tolerance must be a number in \[1e-15, 0.01\]"):
            mf.Model(d=3, beta=4.0, tolerance=tolerance)
    for tolerance in (1e-15, 1e-2):
        mf.Model(d=3, beta=4.0, tolerance=tolerance)


def test_model_refuses_a_harmonic_beta_past_the_degree_limit():
    # β = 1e6 had taken 10.7 GB on 100 tokens at the first velocity
    from meanfield.build import build_model
    from meanfield.errors import ConfigError
    from meanfield.kernels.harmonic import HarmonicDegreeError

    with pytest.raises(HarmonicDegreeError, match=r"beta = 1e\+06 is too large for backend 'harmonic'"):
        mf.Model(d=3, beta=1e6, backend="harmonic")
    mf.Model(d=3, beta=1e6, backend="local")
    mf.Model(d=3, beta=1e5, backend="harmonic")
    pooled = HeadStack(B=np.stack([np.eye(3), 1e6 * np.eye(3)]), V=np.stack([np.eye(3)] * 2), w=np.array([1.0, 0.0]))
    mf.Model(d=3, beta=1.0, backend="harmonic", attention="pooled", heads=pooled)  # a head of weight 0 is not read
    with pytest.raises(ConfigError, match="model.backend"):
        build_model(mf.load_config(None, **{"model.backend": "harmonic", "model.beta": 1e6}))
