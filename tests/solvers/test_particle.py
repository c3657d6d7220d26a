"""Particle solver: sphere constraint, measured orders, Thm 11, Thm 22, resume and NaN handling."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from scipy.integrate import simpson

from meanfield.cli import main
from meanfield.config import load_config
from meanfield.analysis.energy import energy_multi
from meanfield.heads import Head, HeadStack, stack_heads
from meanfield.run import load
from meanfield.model import ConstantHeads, Model
from meanfield.geometry.sphere import sample_equiangular, sample_uniform
from meanfield.analysis.theory import solve_equiangular
from meanfield.solvers.integrators import INTEGRATORS
from meanfield.solvers.run import simulate_config
from meanfield.solvers.particle import ParticleSolver
from meanfield.solvers.problem import Problem, solve


def random_model(rng, *, H=2, d=3, beta=2.0, kind="softmax"):
    stack = HeadStack(B=rng.standard_normal((H, d, d)) / np.sqrt(d), V=rng.standard_normal((H, d, d)) / np.sqrt(d))
    return Model(d=d, beta=beta, attention=kind, heads=ConstantHeads(stack))


@pytest.mark.parametrize("method", sorted(INTEGRATORS))
def test_points_stay_on_the_sphere(rng, method):
    model = random_model(rng)
    result = solve(Problem(model, sample_uniform(40, 3, seed=1)), ParticleSolver(dt=0.05, method=method), t_final=2.0, save_every=0.5, energy=False, speed=False)
    for x in result.states:
        np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("method, order, dts", [("euler", 1, (0.02, 0.01, 0.005)), ("heun", 2, (0.1, 0.05, 0.025)), ("rk4", 4, (0.2, 0.1, 0.05))])
def test_measured_convergence_order(rng, method, order, dts):
    model = random_model(rng, H=2, d=4)
    x0 = sample_uniform(24, 4, seed=2)
    finals = [solve(Problem(model, x0), ParticleSolver(dt=dt, method=method), t_final=1.0, energy=False, speed=False).final for dt in dts]
    e1 = np.abs(finals[0] - finals[1]).max()
    e2 = np.abs(finals[1] - finals[2]).max()
    observed = np.log2(e1 / e2)
    np.testing.assert_allclose(observed, order, atol=0.2)


def test_rk45_meets_its_tolerance(rng):
    model = random_model(rng)
    x0 = sample_uniform(30, 3, seed=3)
    reference = solve(Problem(model, x0), ParticleSolver(dt=0.005, method="rk4"), t_final=2.0, energy=False, speed=False).final
    result = solve(Problem(model, x0), ParticleSolver(dt=0.1, method="rk45", rtol=1e-9, atol=1e-11), t_final=2.0, energy=False, speed=False)
    np.testing.assert_allclose(result.final, reference, atol=1e-7)
    assert result.info["steps"] < 400  # it adapts: far fewer steps than the fixed-step reference


def test_thm11_energy_identity_along_a_run(rng):
    # symmetric value-aligned heads, unnormalized attention: dE_multi/dt = (1/n) Σ |dx_i/dt|²
    d, n = 4, 30
    heads = []
    for _ in range(2):
        q = rng.standard_normal((d, d)) / d
        b = q.T @ q  # symmetric positive semi-definite score
        heads.append(Head(Q=np.linalg.cholesky(b + 1e-9 * np.eye(d)).T, K=np.linalg.cholesky(b + 1e-9 * np.eye(d)).T, V=np.eye(d)))
    stack = HeadStack(B=np.stack([h.B for h in heads]), V=np.stack([h.B for h in heads]))
    model = Model(d=d, beta=1.5, attention="unnormalized", heads=ConstantHeads(stack))
    result = solve(Problem(model, sample_uniform(n, d, seed=4)), ParticleSolver(dt=0.005), t_final=2.0, save_every=0.02, energy=False, speed=False)
    energy = np.array([energy_multi(x, stack, beta=1.5) for x in result.states])
    power = np.array([np.mean(np.sum(model.velocity(x, 0.0) ** 2, axis=1)) for x in result.states])
    assert np.all(np.diff(energy) >= -1e-13)  # E never decreases
    increase = energy[-1] - energy[0]
    np.testing.assert_allclose(increase, simpson(power, x=result.t), rtol=1e-6)
    # frame by frame, between consecutive saves (trapezoid error O(h^3) per interval)
    np.testing.assert_allclose(np.diff(energy), 0.5 * (power[1:] + power[:-1]) * 0.02, rtol=2e-3, atol=1e-9)


def test_thm22_equiangular_ode_matches_particles():
    lambdas, beta, n, d = [0.5, 1.5], 1.0, 4, 6
    stack = stack_heads([Head.scalar(lam, d) for lam in lambdas])
    model = Model(d=d, beta=beta, attention="softmax", heads=ConstantHeads(stack))
    x0 = sample_equiangular(n, d, gamma=0.1, seed=5)
    result = solve(Problem(model, x0), ParticleSolver(dt=0.01), t_final=3.0, save_every=0.25, energy=False, speed=False)
    gram = np.einsum("tid,tjd->tij", np.array(result.states), np.array(result.states))
    off = ~np.eye(n, dtype=bool)
    gamma_particles = gram[:, off]
    # equiangularity is preserved
    np.testing.assert_allclose(gamma_particles.std(axis=1), 0.0, atol=1e-12)
    gamma_ode = solve_equiangular(0.1, result.t, lambdas=lambdas, beta=beta, n=n)
    np.testing.assert_allclose(gamma_particles.mean(axis=1), gamma_ode, rtol=0, atol=1e-9)


def small_config(tmp_path, **solver):
    cfg = {
        "model": {"d": 3, "beta": 3.0, "attention": "softmax"},
        "init": {"kind": "uniform", "n": 64, "seed": 1},
        "solver": {"kind": "particle", "method": "rk4", "dt": 0.05, "t_final": 4.0, "save_every": 0.5, **solver},
    }
    path = tmp_path / "cfg.toml"
    lines = []
    for section, keys in cfg.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {v!r}".replace("'", '"') for k, v in keys.items()]
    path.write_text("\n".join(lines) + "\n")
    return cfg, path


def _interrupt_after(frames: int):
    """A tracker that raises KeyboardInterrupt at its call after ``frames`` calls (a run that dies mid-way)."""
    calls = {"n": 0}

    def bomb(t, state):
        calls["n"] += 1
        if calls["n"] > frames:
            raise KeyboardInterrupt
        return None

    return bomb


def test_resume_after_interrupt_equals_uninterrupted(tmp_path):
    cfg, _ = small_config(tmp_path)
    full = simulate_config(load_config(cfg), tmp_path / "full.h5", quiet=True)
    assert full.info["stop_reason"] == "t_final"
    # a run that dies after 3 frames (KeyboardInterrupt raised from inside the loop)
    resolved = load_config(cfg)
    bomb = _interrupt_after(3)

    with pytest.raises(KeyboardInterrupt):
        simulate_config(resolved, tmp_path / "part.h5", quiet=True, trackers=[bomb])
    with h5py.File(tmp_path / "part.h5", "r") as f:
        assert f["t"].shape[0] == 3
    simulate_config(resolved, tmp_path / "part.h5", resume=True, quiet=True)
    a, b = load(tmp_path / "full.h5"), load(tmp_path / "part.h5")
    np.testing.assert_array_equal(a.t, b.t)
    np.testing.assert_array_equal(a.x, b.x)  # bit for bit
    assert b.status == "completed"


def test_resume_after_sigkill_equals_uninterrupted(tmp_path):
    # 6000 steps, 120 frames: the kill lands after frame 4 (looked for every 0.05 s), and the resumed and the reference
    # runs take a second or two each (with 3000 steps, looked for every 0.3 s, a quiet machine had finished the run first)
    _, path = small_config(tmp_path, t_final=30.0, save_every=0.25, dt=0.005)
    out = tmp_path / "killed.h5"
    env = dict(os.environ, HDF5_USE_FILE_LOCKING="FALSE")
    proc = subprocess.Popen([sys.executable, "-m", "meanfield", "simulate", str(path), "-o", str(out), "--quiet"], env=env)
    deadline = time.time() + 60
    frames = 0
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
        try:
            with h5py.File(out, "r", locking=False) as f:
                frames = f["t"].shape[0]
        except (OSError, KeyError):
            continue
        if frames >= 4:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert frames >= 4, "the run should have saved frames before the kill"
    assert proc.returncode == -signal.SIGKILL, "the run had finished before the kill: nothing was resumed"
    status = main(["simulate", str(path), "-o", str(out), "--quiet", "--resume"])
    assert status == 0
    reference = tmp_path / "reference.h5"
    assert main(["simulate", str(path), "-o", str(reference), "--quiet"]) == 0
    a, b = load(reference), load(out)
    np.testing.assert_array_equal(a.t, b.t)
    np.testing.assert_array_equal(a.x[-1], b.x[-1])


@pytest.mark.parametrize("signalled_at", [0.05, 0.1])
def test_an_extension_interrupted_in_its_first_interval_resumes_to_the_uninterrupted_extension(tmp_path, monkeypatch, signalled_at,
                                                                                           interactive_sigint):
    # a run finished at t_final = 0.05 (not a save time), extended to 0.3: the extension stores t_final = 0.3 at once,
    # and a SIGINT before its first new frame (0.05) or after it (0.1) had left a file every --resume refused for
    # frames "off the save times" (it compared the last frame with the stored t_final, already the new one)
    from meanfield.errors import RunInterrupted
    from meanfield.solvers.particle_stepper import ParticleStepper

    solver = {"method": "rk4", "dt": 0.01, "save_every": 0.1}
    short = load_config({"init": {"n": 8, "seed": 1}, "solver": {**solver, "t_final": 0.05}})
    longer = load_config({"init": {"n": 8, "seed": 1}, "solver": {**solver, "t_final": 0.3}})
    for name in ("full.h5", "part.h5"):
        simulate_config(short, tmp_path / name, quiet=True)
    simulate_config(longer, tmp_path / "full.h5", resume=True, quiet=True)
    advance = ParticleStepper.advance

    def interrupted(self, state, t0, t1):  # a real SIGINT, through the run's handler, as the interval starts
        if t0 == signalled_at:
            os.kill(os.getpid(), signal.SIGINT)
        return advance(self, state, t0, t1)

    monkeypatch.setattr(ParticleStepper, "advance", interrupted)
    with pytest.raises(RunInterrupted, match="--resume continues"):
        simulate_config(longer, tmp_path / "part.h5", resume=True, quiet=True)
    monkeypatch.setattr(ParticleStepper, "advance", advance)
    assert list(load(tmp_path / "part.h5").t) == ([0.0, 0.05] if signalled_at == 0.05 else [0.0, 0.05, 0.1])
    resumed = simulate_config(longer, tmp_path / "part.h5", resume=True, quiet=True)
    assert resumed.status == "completed"
    a, b = load(tmp_path / "full.h5"), load(tmp_path / "part.h5")
    np.testing.assert_array_equal(a.t, [0.0, 0.05, 0.1, 0.2, 0.3])
    np.testing.assert_array_equal(a.t, b.t)
    np.testing.assert_array_equal(a.x, b.x)  # bit for bit
    for name, values in a.diagnostics.items():
        np.testing.assert_array_equal(values, b.diagnostics[name], err_msg=name)


def test_resume_takes_earlier_t_finals_between_the_save_times_and_refuses_a_missing_save_time():
    from meanfield.solvers.run import _remaining_times

    times = np.array([0.0, 0.1, 0.2, 0.3])
    np.testing.assert_array_equal(_remaining_times(np.array([0.0, 0.05, 0.07, 0.1]), times), [0.1, 0.2, 0.3])
    np.testing.assert_array_equal(_remaining_times(np.array([0.0, 0.05, 0.07]), times), [0.07, 0.1, 0.2, 0.3])
    np.testing.assert_array_equal(_remaining_times(np.array([0.0, 0.1 + 1e-9]), times), [0.1 + 1e-9, 0.2, 0.3])  # it replaced 0.1
    assert _remaining_times(np.array([0.0, 0.2]), times) is None  # no frame at 0.1
    assert _remaining_times(np.array([0.01, 0.1]), times) is None  # another start
    assert _remaining_times(np.array([0.0, 0.1, 0.1]), times) is None


@pytest.mark.parametrize("method", ["rk4", "rk45"])
def test_a_field_that_turns_nan_is_named_at_the_step_by_every_scheme(method):
    # rk45 had rejected its trial steps ~20 times and reported "rk45 step size fell below 1e-14"
    import dataclasses

    from meanfield.errors import RunFailed

    @dataclasses.dataclass(frozen=True)
    class TurnsNaN(Model):
        def velocity(self, x, t, **kw):
            v = super().velocity(x, t, **kw)
            return np.where(t >= 0.25, np.nan, v)

    with pytest.raises(RunFailed, match=r"after t=0.2: NaN/Inf in the state after the step to t=0.2\d* \(\d+ entries\)") as failed:
        solve(Problem(TurnsNaN(d=3, beta=2.0), sample_uniform(8, 3, seed=0)), ParticleSolver(method=method, dt=0.05),
              t_final=0.5, save_every=0.1, energy=False, speed=False)
    assert "step size" not in str(failed.value) and list(failed.value.run.t) == [0.0, 0.1, 0.2]


def test_rk45_on_a_field_too_fast_for_its_interval_fails_naming_the_steps_it_would_need(tmp_path, capsys):
    # (found in review) unnormalized attention at β = 30 reaches |dx/dt| ≈ 1e7 … 9e10: rk45's accepted steps of ~1e-12 stayed
    # above its smallest step, and the run sat at t = 0 without a word (rk4 warns of its step)
    from meanfield.errors import RunFailed

    model = Model(d=3, beta=30.0, attention="unnormalized")
    with pytest.raises(RunFailed, match=r"rk45 took 1000 steps of about .* past the limit of 1e\+08 steps \(the field "
                                        r"reaches max \|dx/dt\| = [\d.]+e\+\d+") as failed:
        solve(Problem(model, sample_uniform(8, 3, seed=0)), ParticleSolver(method="rk45", dt=0.01), t_final=1.0,
              save_every=0.5, energy=False, speed=False)
    assert list(failed.value.run.t) == [0.0]  # the first frame kept
    _, path = small_config(tmp_path, t_final=1.0)
    out = tmp_path / "fast.h5"
    assert main(["simulate", str(path), "-o", str(out), "--quiet", "--set", "model.attention='unnormalized'",
                 "--set", "model.beta=30", "--set", "solver.method='rk45'"]) == 1
    assert "past the limit of 1e+08 steps" in capsys.readouterr().err
    assert load(out).frames == 1


def test_resume_refuses_another_config(tmp_path, capsys):
    _, path = small_config(tmp_path, t_final=1.0)
    out = tmp_path / "o.h5"
    assert main(["simulate", str(path), "-o", str(out), "--quiet"]) == 0
    assert main(["simulate", str(path), "-o", str(out), "--quiet", "--resume", "--set", "model.beta=5"]) == 2
    assert "model.beta" in capsys.readouterr().err
    # extending t_final is allowed
    assert main(["simulate", str(path), "-o", str(out), "--quiet", "--resume", "--set", "solver.t_final=2.0"]) == 0
    assert load(out).t[-1] == 2.0


def test_nan_stops_the_run_keeps_frames_and_exits_1(tmp_path, capsys):
    _, path = small_config(tmp_path, t_final=2.0)
    out = tmp_path / "nan.h5"
    status = main(["simulate", str(path), "-o", str(out), "--quiet", "--set", "model.attention=unnormalized", "--set", "model.beta=900"])
    assert status == 1
    assert "NaN" in capsys.readouterr().err
    run = load(out)
    assert run.status == "failed"
    assert len(run.t) >= 1 and np.all(np.isfinite(run.x[0]))
    # the frame that failed its check is not committed: every saved frame is a state on the sphere
    with h5py.File(out, "r") as f:
        assert f["t"].shape[0] == len(run.t) or int(f["committed_frames"][0]) == len(run.t)
    x = np.asarray(run.x)
    assert np.all(np.isfinite(x)) and np.allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-9)
    from meanfield.io.runfile import _failed_its_checks

    # B = I at β = 900 overflows at the first step (t = 0.05), which the run names (the frame check had said t = 0.5)
    assert "NaN/Inf in the state after the step to t=0.05 " in run.stop_reason
    assert not _failed_its_checks(run.stop_reason, float(run.t[-1]))


@pytest.mark.parametrize("noisy", [False, True])
def test_a_state_that_goes_nan_stops_the_run_at_that_step_not_at_the_next_frame(noisy):
    # the NaN had been seen at the next saved frame only: B = I at β = 720 overflows at the first step, and the run had
    # taken 9 more steps on NaN before the frame at t = 0.25 failed its check (12 in a review's run at dt = 0.0192)
    import meanfield as mf
    from meanfield.errors import RunFailed
    from meanfield.noise import NoiseSchedule

    model = Model(d=3, beta=720.0, attention="unnormalized", backend="numpy")
    solver = ParticleSolver(method="euler" if noisy else "rk4", dt=0.025, noise=NoiseSchedule(gamma=1.0, seed=0) if noisy else None)
    with pytest.raises(RunFailed) as caught:
        mf.solve(Problem(model, sample_uniform(8, 3, seed=0)), solver, t_final=1.0, save_every=0.25)
    run = caught.value.run
    assert run.info["steps"] == 1 and run.t.tolist() == [0.0]  # one step, not 10; the frame at t = 0 kept
    assert "NaN/Inf in the state after the step to t=0.025 (" in run.stop_reason


def test_steady_state_tracker_stops(tmp_path):
    cfg, _ = small_config(tmp_path, t_final=200.0, save_every=1.0, dt=0.1, steady_tol=1e-4)
    result = simulate_config(load_config(cfg), tmp_path / "steady.h5", quiet=True)
    assert result.info["stop_reason"].startswith("steady state")
    run = load(tmp_path / "steady.h5")
    assert run.status == "stopped"
    # the frame that stopped the run has every tracker's value, those after the speed tracker included
    for key in ("max_speed", "energy"):
        assert np.all(np.isfinite(np.asarray(run.diagnostics[key]))), key


def test_solver_failures_keep_frames_and_reason(tmp_path, capsys):
    # rk45 meeting NaN: a failed run (exit 1) naming the step, not a traceback (nor a step size collapsed on the NaN)
    _, path = small_config(tmp_path, t_final=2.0, method="rk45")
    out = tmp_path / "rk45.h5"
    status = main(["simulate", str(path), "-o", str(out), "--quiet", "--set", "model.attention=unnormalized", "--set", "model.beta=900"])
    assert status == 1
    run = load(out)
    assert run.status == "failed" and "NaN/Inf in the state after the step to t=0.05 " in run.stop_reason
    assert np.all(np.isfinite(run.x[0]))
    # resuming a failed run is refused, with the reason
    status = main(["simulate", str(path), "-o", str(out), "--quiet", "--resume", "--set", "model.attention=unnormalized", "--set", "model.beta=900"])
    assert status == 2
    assert "--resume" in capsys.readouterr().err


@pytest.mark.parametrize("t_final, save_every", [(0.7, 0.1), (0.9, 0.3), (1.0, 0.3), (5.0, 0.25)])
def test_save_times_land_on_t_final(t_final, save_every):
    from meanfield.solvers.loop import save_times

    times = save_times(0.0, t_final, save_every)
    assert times[-1] == t_final
    assert np.all(np.diff(times) > 0)
    np.testing.assert_allclose(np.diff(times)[:-1], save_every, rtol=1e-12)


def test_save_times_are_the_decimals_of_t_start_and_save_every_and_a_run_stores_them(tmp_path):
    # the float sums 0.1 k had stored 0.30000000000000004, 0.6000000000000001 (and 0.8999999999999999 for 0.3 k):
    # run.t == 0.3, np.isin and labelled selections missed those frames
    from meanfield.solvers.loop import save_times

    decimals = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert save_times(0, 1, 0.1).tolist() == decimals
    assert save_times(0.0, 1.0, 0.3).tolist() == [0.0, 0.3, 0.6, 0.9, 1.0]
    assert save_times(0.05, 0.4, 0.1).tolist() == [0.05, 0.15, 0.25, 0.35, 0.4]
    assert save_times(0.0, 5e-5, 1e-5).tolist() == [0.0, 1e-5, 2e-5, 3e-5, 4e-5, 5e-5]
    # no short decimal (1/3 has 16 places): the float multiples, as before
    np.testing.assert_array_equal(save_times(0.0, 1.0, 1 / 3), [0.0, 1 / 3, 2 * (1 / 3), 1.0])
    run = solve(Problem(Model(d=3, beta=1.0), sample_uniform(8, 3, seed=0)), ParticleSolver(method="rk4", dt=0.05),
                t_final=1.0, save_every=0.1, energy=False, speed=False)
    assert run.t.tolist() == decimals and np.sum(run.t == 0.3) == 1
    cfg, _ = small_config(tmp_path, t_final=1.0, save_every=0.1)
    simulate_config(load_config(cfg), tmp_path / "run.h5", quiet=True)
    assert load(tmp_path / "run.h5").t.tolist() == decimals


def test_a_file_saved_at_the_float_sums_of_older_versions_resumes(tmp_path, monkeypatch):
    # files written before the save times were the decimals hold frames at 0.30000000000000004 etc.: --resume takes
    # them as the save times they were (within round-off) and goes on at the decimals
    import meanfield.solvers.run as run_module

    def float_sums(t_start, t_final, save_every):  # the former save_times
        count = int(np.floor((t_final - t_start) / save_every + 1e-9))
        times = np.minimum(t_start + save_every * np.arange(count + 1), t_final)
        times[-1] = t_final
        return times

    cfg, _ = small_config(tmp_path, t_final=1.0, save_every=0.1)
    full = simulate_config(load_config(cfg), tmp_path / "full.h5", quiet=True)
    assert full.info["stop_reason"] == "t_final"
    bomb = _interrupt_after(7)

    with monkeypatch.context() as patch:
        patch.setattr(run_module, "save_times", float_sums)
        with pytest.raises(KeyboardInterrupt):
            simulate_config(load_config(cfg), tmp_path / "old.h5", quiet=True, trackers=[bomb])
    with h5py.File(tmp_path / "old.h5", "r") as f:
        old_t = f["t"][:]
    assert old_t.tolist() == [0.0, 0.1, 0.2, 0.30000000000000004, 0.4, 0.5, 0.6000000000000001]  # ends off the decimals
    resumed = simulate_config(load_config(cfg), tmp_path / "old.h5", resume=True, quiet=True)
    assert resumed.status == "completed"
    a, b = load(tmp_path / "full.h5"), load(tmp_path / "old.h5")
    np.testing.assert_array_equal(b.t[:7], old_t)  # the stored frames are kept as they are
    assert b.t[7:].tolist() == [0.7, 0.8, 0.9, 1.0]
    np.testing.assert_allclose(b.x, a.x, rtol=0, atol=1e-12)  # the same run up to the round-off of the interval lengths


def test_a_float32_t_final_replaces_the_last_frame_rather_than_adding_one():
    # np.float32(0.3) is 0.30000001: solve() had saved a frame at 0.3 and another 1.2e-8 later
    import meanfield as mf
    from meanfield.solvers.loop import save_times

    for t_final, count in ((np.float32(0.3), 4), (np.float32(1.1), 12), (0.3 + 2e-7, 5)):
        times = save_times(0.0, float(t_final), 0.1)
        assert len(times) == count and times[-1] == float(t_final), (t_final, times)
    problem = mf.Problem(mf.Model(d=3, beta=4.0), mf.sample_uniform(8, 3, seed=0))
    run = mf.solve(problem, mf.ParticleSolver(method="rk4", dt=0.05), t_final=np.float32(0.3), save_every=0.1)
    np.testing.assert_allclose(run.t, [0.0, 0.1, 0.2, float(np.float32(0.3))], rtol=0, atol=1e-15)


def test_a_t_final_just_after_the_start_keeps_the_initial_frame_and_steps_to_it(tmp_path):
    # t_final = 1e-12 (or <= 1e-6 save_every) had replaced the frame at t = 0 by the initial state labelled t = 1e-12
    from meanfield.solvers.loop import save_times

    for start, t_final in ((0.0, 1e-12), (0.0, 1e-7), (2.0, 2.0 + 1e-9)):
        np.testing.assert_array_equal(save_times(start, t_final, 0.1), [start, t_final])
    np.testing.assert_array_equal(save_times(0.0, 0.0, 0.1), [0.0])
    x0 = sample_uniform(8, 3, seed=0)
    run = solve(Problem(Model(d=3, beta=4.0), x0), ParticleSolver(dt=0.05), t_final=1e-7, save_every=0.1)
    np.testing.assert_array_equal(run.t, [0.0, 1e-7])
    assert np.array_equal(run.states[0], x0) and not np.array_equal(run.states[1], x0) and run.info["steps"] == 1


@pytest.mark.parametrize("name", sorted(INTEGRATORS))
def test_tableaux_satisfy_their_order_conditions(name):
    """Butcher order conditions up to min(order, 4), and row sums c_i = Σ_j a_ij."""
    scheme = INTEGRATORS[name]
    A = np.zeros((len(scheme.c), len(scheme.c)))
    for i, row in enumerate(scheme.A):
        A[i, : len(row)] = row
    b, c = np.array(scheme.b), np.array(scheme.c)
    np.testing.assert_allclose(A.sum(axis=1), c, atol=1e-15)
    conditions = [
        (1, b.sum(), 1.0),
        (2, b @ c, 1 / 2),
        (3, b @ c**2, 1 / 3),
        (3, b @ A @ c, 1 / 6),
        (4, b @ c**3, 1 / 4),
        (4, (b * c) @ A @ c, 1 / 8),
        (4, b @ A @ c**2, 1 / 12),
        (4, b @ A @ A @ c, 1 / 24),
    ]
    for order, value, expected in conditions:
        if order <= scheme.order:
            np.testing.assert_allclose(value, expected, rtol=0, atol=1e-14)
    if name == "rk45":  # the embedded 4th-order weights too
        b_low = np.array(scheme.b_low)
        for value, expected in ((b_low.sum(), 1.0), (b_low @ c, 1 / 2), (b_low @ c**2, 1 / 3), (b_low @ A @ A @ c, 1 / 24)):
            np.testing.assert_allclose(value, expected, atol=1e-14)


def test_fixed_step_schemes_never_step_past_dt():
    # dt = 0.1 with frames every 0.25: each interval takes ceil(0.25/0.1) = 3 equal steps (h = 1/12 <= dt), 24 in all
    # (floor had taken 2 steps of 0.125 > dt, 16 in all)
    identity = stack_heads([Head(Q=np.eye(3), K=np.eye(3), V=np.eye(3))])
    model = Model(d=3, beta=4.0, attention="softmax", heads=ConstantHeads(identity))
    x0 = sample_uniform(16, 3, seed=0)
    kw = dict(t_final=2.0, save_every=0.25, energy=False, speed=False)
    run = solve(Problem(model, x0), ParticleSolver(method="euler", dt=0.1), **kw)
    assert run.info["steps"] == 8 * 3
    np.testing.assert_allclose(run.t, np.arange(9) * 0.25, rtol=0, atol=1e-12)
