"""``Run.save``: a run held in memory written as a run file that ``mf.load`` and the commands read as a file of
``meanfield simulate`` (a run of ``mf.solve`` had no way to a file)."""
from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest

import meanfield as mf
from meanfield.cli import main
from meanfield.errors import ConfigError
from meanfield.noise import NoiseSchedule

B = np.diag([2.0, 1.0, 0.5])


def _same_run(saved: mf.Run, run: mf.Run) -> None:
    np.testing.assert_array_equal(saved.t, run.t)
    np.testing.assert_array_equal(saved.states, run.states)
    assert set(saved.diagnostics) == set(run.diagnostics)
    for key, series in run.diagnostics.items():
        np.testing.assert_array_equal(saved.diagnostics[key], series)
    assert (saved.status, saved.stop_reason) == (run.status, run.stop_reason)


def test_a_solved_particle_run_is_read_back_and_analysed_as_a_simulated_one(tmp_path: Path) -> None:
    model = mf.Model(d=3, beta=8.0, heads=mf.heads.HeadStack(B=B[None], V=B[None]))
    run = mf.solve(mf.Problem(model, mf.sample_uniform(64, 3, seed=0), weights=np.arange(1.0, 65.0)),
                   mf.ParticleSolver(dt=0.02), t_final=0.5, save_every=0.25)
    path = run.save(tmp_path / "solved.h5")
    saved = mf.load(path)
    _same_run(saved, run)
    np.testing.assert_array_equal(saved.token_masses, run.token_masses)
    np.testing.assert_array_equal(saved.model.heads.at(0.0).B, model.heads.at(0.0).B)  # rebuilt from the config
    np.testing.assert_array_equal(saved.model.heads.at(0.0).V, model.heads.at(0.0).V)
    assert saved.config["init"]["kind"] == "stored" and saved.config["solver"]["dt"] == 0.02
    assert saved.config["solver"]["save_every"] == 0.25 and saved.config["solver"]["t_final"] == 0.5
    np.testing.assert_array_equal(saved.concentration().curves["w2_target"], run.concentration().curves["w2_target"])
    with h5py.File(path, "r") as f:  # the layout of meanfield simulate
        assert {"t", "x", "token_masses", "diagnostics"} <= set(f) and "config" in f.attrs
    assert main(["info", str(path)]) == 0
    assert main(["concentration", str(path)]) == 0


def test_a_non_symmetric_head_and_the_run_s_own_keys_are_saved_as_they_are(tmp_path: Path) -> None:
    # B with B[0, 1] != B[1, 0] and V != B: the head tables must rebuild B itself, not its transpose
    B_ns = np.array([[1.0, 0.8, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]])
    V_ns = np.array([[1.0, 0.0, 0.3], [0.0, 0.7, 0.0], [0.0, 0.0, 1.0]])
    model = mf.Model(d=3, beta=2.0, heads=mf.heads.HeadStack(B=B_ns[None], V=V_ns[None]))
    run = mf.solve(mf.Problem(model, mf.sample_uniform(16, 3, seed=0)), mf.ParticleSolver(dt=0.05), t_final=0.1,
                   save_every=0.05, energy=False)
    saved = mf.load(run.save(tmp_path / "solved.h5"))
    np.testing.assert_allclose(saved.model.heads.at(0.0).B[0], B_ns, rtol=0, atol=1e-15)
    np.testing.assert_allclose(saved.model.heads.at(0.0).V[0], V_ns, rtol=0, atol=1e-15)
    np.testing.assert_allclose(saved.model.velocity(run.final, 0.1), model.velocity(run.final, 0.1), rtol=0,
                               atol=1e-14)
    assert saved.config["init"]["n"] == 16 == saved.shape[0]  # the number of tokens, not the dimension
    assert "energy" not in run.diagnostics and saved.config["track"]["energy"] is False


def test_the_saved_first_frame_starts_a_new_run_of_the_same_flow(tmp_path: Path) -> None:
    model = mf.Model(d=3, beta=4.0)
    run = mf.solve(mf.Problem(model, mf.sample_uniform(16, 3, seed=1)), mf.ParticleSolver(dt=0.05), t_final=0.2,
                   save_every=0.1)
    path = run.save(tmp_path / "solved.h5")
    again = mf.simulate(mf.load(path).config, out=tmp_path / "again.h5", **{"init.kind": "run", "init.path": str(path),
                                                                          "init.time": 0.0})
    np.testing.assert_allclose(again.x, run.x, rtol=0, atol=1e-15)


def test_grid_jko_zero_temperature_and_noisy_runs_are_saved(tmp_path: Path) -> None:
    model = mf.Model(d=3, beta=4.0)
    mesh = mf.mesh(200)
    pooled = mf.Model(d=3, beta=1.0, attention="pooled", heads=mf.heads.identity(3))
    x0 = mf.sample_uniform(16, 3, seed=1)
    runs = {
        "grid": mf.solve(mf.Problem(model, mf.initial_mass(mesh, "vmf", kappa=2.0), mesh=mesh), mf.GridSolver(),
                         t_final=0.1, save_every=0.05),
        "jko": mf.solve(mf.Problem(pooled, x0), mf.JKOSolver(tau=0.05), t_final=0.1),
        "zero-temperature": mf.solve(mf.Problem(model, x0), mf.ZeroTemperatureSolver(), t_final=0.1),
        "noisy": mf.solve(mf.Problem(model, x0), mf.ParticleSolver(dt=0.05, method="euler", noise=NoiseSchedule(gamma=2.0)),
                          t_final=0.1),
    }
    for name, run in runs.items():
        saved = mf.load(run.save(tmp_path / f"{name}.h5"))
        _same_run(saved, run)
        assert saved.config["solver"]["kind"] == run.info["solver"]
        assert main(["info", str(tmp_path / f"{name}.h5")]) == 0
    grid = mf.load(tmp_path / "grid.h5")
    assert grid.config["grid"]["cells"] == 200 and grid.config["grid"]["order"] == 2
    np.testing.assert_array_equal(grid.mesh().areas, mesh.areas)
    assert mf.load(tmp_path / "noisy.h5").config["noise"]["gamma"] == 2.0


def test_a_simulated_run_keeps_its_config(tmp_path: Path) -> None:
    run = mf.simulate(t_final=0.2, save_every=0.1, **{"init.n": 16})
    saved = mf.load(run.save(tmp_path / "simulated.h5"))
    _same_run(saved, run)
    assert saved.config == run.config


def test_what_a_config_cannot_describe_is_refused_before_a_file_is_made(tmp_path: Path) -> None:
    from meanfield.heads.schedules import OscillatingSchedule

    x0 = mf.sample_uniform(8, 3, seed=0)
    moving = mf.Model(d=3, beta=1.0, heads=OscillatingSchedule(mf.heads.HeadStack(B=B[None], V=B[None]), amplitude=0.5, omega=1.0))
    run = mf.solve(mf.Problem(moving, x0), mf.ParticleSolver(dt=0.05), t_final=0.1)
    with pytest.raises(ValueError, match="its heads change in time"):
        run.save(tmp_path / "moving.h5")
    weighted = mf.Model(d=3, beta=1.0, attention="pooled",
                        heads=mf.heads.HeadStack(B=np.stack([B, B]), V=np.stack([B, B]), w=np.array([0.2, 0.8])))
    run = mf.solve(mf.Problem(weighted, x0), mf.ParticleSolver(dt=0.05), t_final=0.1)
    with pytest.raises(ValueError, match="head weights"):
        run.save(tmp_path / "weighted.h5")
    assert not list(tmp_path.iterdir())


def test_a_path_that_is_taken_is_refused_and_only_a_run_file_replaced(tmp_path: Path) -> None:
    run = mf.simulate(t_final=0.1, **{"init.n": 8})
    path = run.save(tmp_path / "a.h5")
    with pytest.raises(ConfigError, match="already exists; use overwrite=True"):
        run.save(path)
    assert run.save(path, overwrite=True) == path
    with pytest.raises(ConfigError, match="is the file this run is read from"):
        mf.load(path).save(path, overwrite=True)
    notes = tmp_path / "notes.toml"
    notes.write_text("beta = 1\n")
    with pytest.raises(ConfigError, match="not an HDF5 file; overwrite=True replaces only a run file"):
        run.save(notes, overwrite=True)
    assert notes.read_text() == "beta = 1\n"
    with pytest.raises(ConfigError, match=r"^overwrite: expected True or False, got 'no'") as info:  # as mf.simulate's
        run.save(tmp_path / "b.h5", overwrite="no")
    assert info.value.key == "overwrite"
    with pytest.raises(ConfigError, match=r"^overwrite: expected True or False, got 'no'"):
        mf.simulate(out=tmp_path / "c.h5", overwrite="no", t_final=0.1)
    with pytest.raises(ConfigError, match="folder"):
        run.save(tmp_path)


def test_overwrite_replaces_a_damaged_run_file_as_simulate_does(tmp_path: Path) -> None:
    # a truncated or unreadable run file had been refused ("is truncated"), where simulate --overwrite replaces it
    run = mf.simulate(t_final=0.2, **{"init.n": 8})
    good = run.save(tmp_path / "good.h5")
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ConfigError, match="already exists"):
        run.save(truncated)
    assert run.save(truncated, overwrite=True) == truncated
    np.testing.assert_array_equal(mf.load(truncated).x, run.x)


def test_a_run_saved_while_it_is_written_is_stored_as_interrupted(tmp_path: Path) -> None:
    # its status "running" had been copied, and every reader called the closed copy "killed"
    from meanfield.io.lock import WriterLock

    live = mf.simulate(t_final=0.3, save_every=0.1, **{"init.n": 8}).save(tmp_path / "live.h5")
    with h5py.File(live, "r+") as f:
        f.attrs["status"] = "running"
    with WriterLock(live):  # as the process that writes it holds it
        run = mf.load(live)
        assert run.status == "running"
        saved = mf.load(run.save(tmp_path / "copy.h5"))
    assert saved.status == "interrupted"
    assert saved.stop_reason == "saved by Run.save while its run was still being written (4 frames)"
    np.testing.assert_array_equal(saved.x, run.x)


def test_a_name_too_long_for_the_hidden_files_of_a_save_is_refused_by_name(tmp_path: Path) -> None:
    # a name simulate takes had been refused with a message that named the internal ..NAME.saving.lock
    run = mf.simulate(t_final=0.1, **{"init.n": 8})
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    long = tmp_path / ("c" * (limit - 12) + ".h5")
    with pytest.raises(ConfigError, match=rf"^path: the name of {tmp_path}/c+\.h5 is too long: .* at most {limit - 14} bytes"):
        run.save(long)
    assert list(tmp_path.iterdir()) == []
    fits = tmp_path / ("c" * (limit - 17) + ".h5")
    np.testing.assert_array_equal(mf.load(run.save(fits)).x, run.x)


def test_resuming_a_saved_solve_run_says_how_to_continue_it(tmp_path: Path) -> None:
    run = mf.solve(mf.Problem(mf.Model(d=3, beta=4.0), mf.sample_uniform(8, 3, seed=0)), mf.ParticleSolver(dt=0.05),
                   t_final=0.1)
    path = run.save(tmp_path / "solved.h5")
    with pytest.raises(ConfigError, match=r"^resume: .* a run of mf.solve saved by Run.save.*t_start"):
        mf.simulate(out=path, resume=True, t_final=0.2)


@pytest.mark.parametrize("name", ["run.toml", "picture.png", "table.csv"])
def test_overwrite_replaces_only_a_run_file(tmp_path: Path, capsys, name: str) -> None:
    # simulate -o b.toml --overwrite had replaced a config by a run file (the --csv options refuse such names)
    kept = tmp_path / name
    kept.write_text("keep me\n")
    cfg = str(Path(__file__).resolve().parents[3] / "data" / "default.toml")
    assert main(["simulate", cfg, "-o", str(kept), "--overwrite", "--quiet", "--set", "solver.t_final=0.1"]) == 2
    assert "is not an HDF5 file; --overwrite replaces only a run file" in capsys.readouterr().err
    assert kept.read_text() == "keep me\n"
    empty = tmp_path / "empty.h5"
    empty.write_bytes(b"")  # (what a touch left: replaced)
    assert main(["simulate", cfg, "-o", str(empty), "--overwrite", "--quiet", "--set", "solver.t_final=0.1"]) == 0


def test_a_damaged_frame_is_not_copied_and_the_target_is_left_as_it_was(tmp_path: Path, flip_lowest_bit) -> None:
    # a damaged frame had got a fresh checksum in the copy, and a failed save had left a partial file at the target
    source = tmp_path / "source.h5"
    mf.simulate({"init": {"n": 8}, "solver": {"t_final": 0.5, "save_every": 0.25}}, out=source)
    kept = tmp_path / "kept.h5"
    mf.simulate(t_final=0.1, out=kept, **{"init.n": 4})
    before = kept.read_bytes()
    flip_lowest_bit(source, 1)
    with pytest.raises(ConfigError, match=r"^run: .*frame 1 \(t = 0.25\) of the source does not match the checksum.*the run is not saved"):
        mf.load(source).save(kept, overwrite=True)
    assert kept.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.h5", "source.h5"]  # no hidden file, no lock left


def test_an_interrupted_save_leaves_the_target_whole(tmp_path: Path, monkeypatch) -> None:
    run = mf.simulate(t_final=0.5, save_every=0.25, **{"init.n": 8})
    target = run.save(tmp_path / "a.h5")
    before = target.read_bytes()
    calls = []

    def interrupted(index: int) -> np.ndarray:
        calls.append(index)
        if index == 2:
            raise KeyboardInterrupt
        return run.states[index]

    monkeypatch.setattr(run, "frame", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run.save(target, overwrite=True)
    assert calls == [0, 1, 2] and target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.h5"]


def test_jko_stepper_options_a_moved_source_and_an_empty_file(tmp_path: Path) -> None:
    pooled = mf.Model(d=3, beta=1.0, attention="pooled", heads=mf.heads.identity(3))
    mesh = mf.mesh(200)
    run = mf.solve(mf.Problem(pooled, mf.initial_mass(mesh, "vmf", kappa=2.0), mesh=mesh),
                   mf.JKOSolver(tau=0.05, options={"max_iter": 50}), t_final=0.05)
    with pytest.raises(ValueError, match=r"its solver option options = \{'max_iter': 50\}"):  # (they had been dropped)
        run.save(tmp_path / "jko.h5")
    moved = mf.simulate(t_final=0.1, out=tmp_path / "m.h5", **{"init.n": 4})
    other = tmp_path / "other.h5"
    mf.simulate(t_final=0.1, out=other, **{"init.n": 4})
    before = other.read_bytes()
    (tmp_path / "m.h5").rename(tmp_path / "gone.h5")
    # (samefile of a moved source had been a FileNotFoundError, and a save that failed had replaced the file by a stub)
    with pytest.raises(ConfigError, match="was removed since this run was loaded"):
        moved.save(other, overwrite=True)
    assert other.read_bytes() == before and not (tmp_path / "m.h5").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    empty = tmp_path / "empty.h5"
    empty.write_bytes(b"")
    assert mf.load(tmp_path / "gone.h5").save(empty, overwrite=True) == empty  # as simulate --overwrite replaces it


def test_a_damaged_frame_seen_before_is_still_refused(tmp_path: Path, flip_lowest_bit) -> None:
    # the damage warning comes once a file: a frame looked at before the save had been copied with a fresh checksum
    import warnings

    source = tmp_path / "source.h5"
    mf.simulate({"init": {"n": 8}, "solver": {"t_final": 0.5, "save_every": 0.25}}, out=source)
    flip_lowest_bit(source, 1)
    run = mf.load(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _ = run.x  # the warning, seen and gone
    for attempt in range(2):
        with pytest.raises(ConfigError, match=r"^run: .*frame 1 \(t = 0.25\) of the source does not match"):
            run.save(tmp_path / "copy.h5")
    assert not (tmp_path / "copy.h5").exists()


def test_a_file_made_between_the_check_and_the_lock_is_not_replaced(tmp_path: Path, monkeypatch) -> None:
    import meanfield.io.output as output

    run = mf.simulate(t_final=0.1, **{"init.n": 4})
    target = tmp_path / "late.h5"
    checked = output.check_output

    def meanwhile(*args, **kwargs):  # another process's run ends just after the check
        result = checked(*args, **kwargs)
        if kwargs.get("key") == "path":  # (Run.save's check; the run below makes its own)
            mf.simulate(t_final=0.1, out=target, **{"init.n": 4})
        return result

    monkeypatch.setattr(output, "check_output", meanwhile)
    with pytest.raises(ConfigError, match="was written by another process meanwhile"):
        run.save(target)
    assert mf.load(target).frames == 2  # the other run's file, left whole


def test_a_full_disk_names_the_target(tmp_path: Path, monkeypatch) -> None:
    from meanfield.errors import StorageFailed
    from meanfield.io.runfile import RunWriter

    run = mf.simulate(t_final=0.2, save_every=0.1, **{"init.n": 4})

    def full(self, t, state, diagnostics=None):
        raise StorageFailed(f"no space left on device for frame 0 of {self.path} (0 bytes left); the 0 committed frames "
                            "are intact: free some space and continue with --resume")

    monkeypatch.setattr(RunWriter, "append", full)
    with pytest.raises(StorageFailed) as caught:
        run.save(tmp_path / "x.h5")
    message = str(caught.value)
    assert message == (f"cannot save the run to {tmp_path / 'x.h5'}: no space left on device for frame 0 of "
                       f"{tmp_path / 'x.h5'} (0 bytes left); {tmp_path / 'x.h5'} is left as it was")
    assert list(tmp_path.iterdir()) == []


def test_overwrite_leaves_another_programs_hdf5_file(tmp_path: Path, capsys) -> None:
    # --overwrite had replaced any HDF5 file, a data file of another program too
    data = tmp_path / "data.h5"
    with h5py.File(data, "w") as f:
        f["values"] = np.arange(3.0)
    before = data.read_bytes()
    cfg = str(Path(__file__).resolve().parents[3] / "data" / "default.toml")
    assert main(["simulate", cfg, "-o", str(data), "--overwrite", "--quiet", "--set", "solver.t_final=0.1"]) == 2
    assert "is an HDF5 file but not a meanfield run" in capsys.readouterr().err and data.read_bytes() == before
    run = tmp_path / "run.h5"
    assert main(["simulate", cfg, "-o", str(run), "--quiet", "--set", "solver.t_final=0.1"]) == 0
    assert main(["simulate", cfg, "-o", str(run), "--overwrite", "--quiet", "--set", "solver.t_final=0.2"]) == 0


def test_steady_tol_is_kept_and_runs_without_a_solver_are_refused(tmp_path: Path) -> None:
    # a run that stopped at its steady state had been saved without steady_tol (a re-run went on to t_final), and a
    # Run.from_states had been saved with made-up solver options
    model = mf.Model(d=3, beta=4.0)
    run = mf.solve(mf.Problem(model, mf.sample_uniform(8, 3, seed=0)), mf.ParticleSolver(dt=0.05), t_final=0.5,
                   steady_tol=100.0)
    assert run.status == "stopped"
    assert mf.load(run.save(tmp_path / "steady.h5")).config["solver"]["steady_tol"] == 100.0
    bare = mf.Run.from_states(t=run.t, states=run.states, state_name="x", diagnostics={}, model=model)
    with pytest.raises(ValueError, match="records no solver options"):
        bare.save(tmp_path / "bare.h5")
    assert not (tmp_path / "bare.h5").exists()


def test_a_run_read_back_by_from_xarray_is_refused_by_name(tmp_path: Path) -> None:
    pytest.importorskip("xarray")
    run = mf.solve(mf.Problem(mf.Model(d=3, beta=4.0), mf.sample_uniform(8, 3, seed=0)), mf.ParticleSolver(dt=0.05),
                   t_final=0.1)
    with pytest.raises(ValueError, match=r"it keeps no model \(a Run read back by Run.from_xarray\)"):  # (AttributeError)
        mf.Run.from_xarray(run.to_xarray()).save(tmp_path / "x.h5")
