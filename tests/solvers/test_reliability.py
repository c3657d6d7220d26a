"""Kills, signals, live readers, two writers and a full disk: every committed frame is kept, and --resume continues bit for bit."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

import meanfield as mf

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "MEANFIELD_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

#: one small config per solver; each runs a couple of seconds in a fresh process
SOLVERS = {
    "particle": {"init": {"n": 300}, "solver": {"kind": "particle", "dt": 0.01, "t_final": 3.0, "save_every": 0.25}},
    "grid": {"init": {"kind": "vmf", "kappa": 2.0}, "grid": {"cells": 800},
             "solver": {"kind": "grid", "t_final": 3.0, "save_every": 0.25, "cfl": 0.2}},
    "jko": {"model": {"attention": "pooled"}, "init": {"n": 64},
            "solver": {"kind": "jko", "tau": 0.05, "t_final": 3.0, "save_every": 0.25}},
    "zero-temperature": {"model": {"heads": [{"Q": "identity", "K": "identity", "V": [[1.0, 0, 0], [0, 0.5, 0], [0, 0, 0.25]]}]},
                         "init": {"n": 300}, "solver": {"kind": "zero-temperature", "dt": 0.002, "t_final": 3.0, "save_every": 0.25}},
}


def _toml(cfg: dict, path: Path) -> Path:
    def value(v):
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    lines = []
    for section, keys in cfg.items():
        if section == "model" and "heads" in keys:
            lines.append("[model]")
            lines += [f"{k} = {value(v)}" for k, v in keys.items() if k != "heads"]
            for head in keys["heads"]:
                lines.append("[[model.heads]]")
                lines += [f"{k} = {value(v)}" for k, v in head.items()]
            continue
        lines.append(f"[{section}]")
        lines += [f"{k} = {value(v)}" for k, v in keys.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _simulate(config: Path, out: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "meanfield", "simulate", str(config), "-o", str(out), "--quiet", *extra],
                          capture_output=True, text=True, env=ENV, timeout=600)
    if check:
        assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _same(a: Path, b: Path) -> None:
    ra, rb = mf.load(a), mf.load(b)
    assert ra.status == rb.status == "completed"
    np.testing.assert_array_equal(ra.t, rb.t)
    np.testing.assert_array_equal(ra.states, rb.states)  # bit for bit
    assert set(ra.diagnostics) == set(rb.diagnostics)
    for key in ra.diagnostics:
        np.testing.assert_array_equal(ra.diagnostics[key], rb.diagnostics[key])


#: frames of 48 KB: about 25 of them fill the small disk of the full-disk test
BIG_FRAMES = {"init": {"n": 2000}, "solver": {"kind": "particle", "dt": 0.05, "t_final": 5.0, "save_every": 0.1}}
#: a run of several seconds, for the tests that act on a live writer
SLOW = {"init": {"n": 600}, "solver": {"kind": "particle", "dt": 0.01, "t_final": 10.0, "save_every": 0.5}}


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("reference")
    out = {}
    for name, cfg in {**SOLVERS, "slow": SLOW, "big-frames": BIG_FRAMES}.items():
        config = _toml(cfg, folder / f"{name}.toml")
        _simulate(config, folder / f"{name}.h5")
        out[name] = (config, folder / f"{name}.h5")
    return out


#: a process that SIGKILLs itself at a chosen point of a frame: before frame K is written, or after it is
#: written and flushed but before it is counted (a kill inside the frame write)
_INJECT = """
import os, signal, sys
from meanfield.io.runfile import RunWriter
where, frame = sys.argv[1], int(sys.argv[2])
write_frame, commit = RunWriter._write_frame, RunWriter._commit
def kill_before(self, k, *a, **kw):
    if where == "before" and k == frame:
        os.kill(os.getpid(), signal.SIGKILL)
    return write_frame(self, k, *a, **kw)
def kill_commit(self, frames):
    if where == "commit" and frames == frame + 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return commit(self, frames)
RunWriter._write_frame, RunWriter._commit = kill_before, kill_commit
from meanfield.cli import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.parametrize("solver", list(SOLVERS))
@pytest.mark.parametrize(
    ("where", "frame"),
    [("before", 0), ("commit", 4), pytest.param("commit", 0, marks=pytest.mark.slow), pytest.param("before", 4, marks=pytest.mark.slow)],
)
def test_a_kill_inside_a_frame_write_loses_that_frame_only(references, tmp_path, solver, where, frame):
    config, reference = references[solver]
    out = tmp_path / "run.h5"
    done = subprocess.run([sys.executable, "-c", _INJECT, where, str(frame), "simulate", str(config), "-o", str(out), "--quiet"],
                          capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == -signal.SIGKILL
    run = mf.load(out) if out.exists() else None
    if run is not None:  # the file opens, shows the committed frames only, and knows its writer is gone
        assert run.status == "interrupted" and run.frames == frame
        assert np.all(np.isfinite(run.states))
    resumed = _simulate(config, out, "--resume")
    if frame == 0:
        assert "starting the run afresh" in resumed.stderr
    _same(out, reference)


@pytest.mark.parametrize("kills", [1, pytest.param(3, marks=pytest.mark.slow)])
@pytest.mark.parametrize("solver", list(SOLVERS))
def test_kills_at_random_moments_then_resume_equal_the_uninterrupted_run(references, tmp_path, solver, kills):
    config, reference = references[solver]
    rng = np.random.default_rng(sum(map(ord, solver)) + kills)
    out = tmp_path / "run.h5"
    for delay in rng.uniform(0.3, 3.0, size=kills):  # later kills land in the resumed runs
        proc = subprocess.Popen([sys.executable, "-m", "meanfield", "simulate", str(config), "-o", str(out), "--quiet",
                                 "--resume"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
        time.sleep(delay)
        proc.kill()
        proc.communicate()
    _simulate(config, out, "--resume")
    _same(out, reference)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_end_the_run_as_interrupted_without_a_traceback(references, tmp_path, signum, interactive_sigint):
    # (interactive_sigint: a child of an xdist worker inherits its ignored SIGINT, which the run keeps ignoring)
    config, reference = references["slow"]
    out = tmp_path / "run.h5"
    proc = subprocess.Popen([sys.executable, "-m", "meanfield", "simulate", str(config), "-o", str(out), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    _wait_for_frames(out, 2)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Traceback" not in err and "SystemError" not in err
    assert f"interrupted by {signal.Signals(signum).name}" in err and "--resume continues" in err
    run = mf.load(out)
    assert run.status == "interrupted" and run.frames >= 2
    _simulate(config, out, "--resume")
    _same(out, reference)


def _wait_for_frames(path: Path, frames: int, timeout: float = 120.0) -> mf.Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            run = mf.load(path)
            if run.frames >= frames:
                return run
        except mf.ConfigError:  # not created yet, or no frame committed yet
            pass
        time.sleep(0.05)
    raise AssertionError(f"{path} did not reach {frames} frames")


def test_a_running_file_can_be_read_and_a_second_writer_is_refused(references, tmp_path):
    config, reference = references["slow"]
    out = tmp_path / "run.h5"
    proc = subprocess.Popen([sys.executable, "-m", "meanfield", "simulate", str(config), "-o", str(out), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    first = _wait_for_frames(out, 2)
    assert first.status == "running"
    info = subprocess.run([sys.executable, "-m", "meanfield", "info", str(out)], capture_output=True, text=True, env=ENV)
    assert info.returncode == 0 and "status:    running" in info.stdout
    with h5py.File(out, "r", swmr=True) as f:  # a plain h5py reader in SWMR mode follows the file too
        assert f["committed_frames"][0] >= 2
    second = _simulate(config, out, "--overwrite", check=False)
    assert second.returncode == 2 and "being written by another meanfield process" in second.stderr
    later = _wait_for_frames(out, first.frames + 2)
    assert later.frames > first.frames
    proc.communicate(timeout=300)
    assert proc.returncode == 0
    _same(out, reference)


def test_info_follow_prints_frames_as_they_arrive(references, tmp_path):
    config, _ = references["slow"]
    out = tmp_path / "run.h5"
    proc = subprocess.Popen([sys.executable, "-m", "meanfield", "simulate", str(config), "-o", str(out), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    _wait_for_frames(out, 1)
    follow = subprocess.run([sys.executable, "-m", "meanfield", "info", str(out), "--follow", "--interval", "0.1"],
                            capture_output=True, text=True, env=ENV, timeout=300)
    proc.communicate(timeout=300)
    assert follow.returncode == 0, follow.stderr
    frames = [line for line in follow.stdout.splitlines() if line.startswith("frame ")]
    assert len(frames) >= 3 and "completed" in follow.stdout.splitlines()[-1]


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    return done.returncode == 0


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 2 MB tmpfs, unmounted afterwards (the full-disk tests need one: root or CAP_SYS_ADMIN)."""
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "2m"):
        pytest.skip("cannot mount a small tmpfs here (needs root or CAP_SYS_ADMIN); the full-disk test needs one")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _fill(filler: Path) -> None:
    """Take every free byte of the file system of ``filler`` (as another process would)."""
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass


def test_a_full_disk_keeps_every_committed_frame_and_resume_finishes_bit_for_bit(references, small_disk):
    config, reference = references["big-frames"]
    out = small_disk / "run.h5"
    done = _simulate(config, out, check=False)
    assert done.returncode == 1 and "no space left on device" in done.stderr, done.stderr
    assert "Segmentation" not in done.stderr
    kept = mf.load(out)
    assert 0 < kept.frames < mf.load(reference).frames and np.all(np.isfinite(kept.states))
    assert kept.status == "failed" and "no space left on device" in kept.stop_reason  # not "running" (then "interrupted")
    np.testing.assert_array_equal(kept.states, mf.load(reference).states[: kept.frames])
    subprocess.run(["mount", "-o", "remount,size=20m", str(small_disk)], check=True)
    _simulate(config, out, "--resume")
    _same(out, reference)


def test_a_sweep_on_a_full_disk_records_the_cases_as_failed(tmp_path, small_disk):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(textwrap.dedent(f"""
        base = "{ROOT / 'data' / 'default.toml'}"
        [set]
        "init.n" = 4000
        "solver.t_final" = 2.0
        "solver.dt" = 0.25
        [grid]
        "init.seed" = [0, 1]
    """))
    done = subprocess.run([sys.executable, "-m", "meanfield", "sweep", str(sweep), "--out", str(small_disk / "s"), "--workers", "0",
                           "--quiet"], capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "Segmentation" not in done.stderr, done.stderr
    assert "no space left on device" in done.stderr


def test_a_run_that_fails_before_its_first_frame_leaves_the_older_file_whole(tmp_path):
    from meanfield.errors import TrackerError

    # overwrite=True (--overwrite) replaces the older file once the new run commits a frame; a run that failed
    # before that had still been moved onto it, and the three good frames were lost
    out = tmp_path / "keep.h5"
    mf.simulate(ROOT / "data/default.toml", out=out, t_final=0.5, n=16)
    before = out.read_bytes()
    with pytest.raises(TrackerError):
        mf.simulate(ROOT / "data/default.toml", out=out, t_final=0.5, n=16, overwrite=True, trackers=[lambda t, x: {"v": "text"}])
    assert out.read_bytes() == before and mf.load(out).frames == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.h5"]  # no file left beside it

    def bad_first_frame(t, x):
        raise mf.StopRun("my check failed", bad_state=True)

    with pytest.raises(mf.RunFailed) as info:  # the run ends well, without a frame: the older run must not pass for it
        mf.simulate(ROOT / "data/default.toml", out=out, t_final=0.5, n=16, overwrite=True, trackers=[bad_first_frame])
    assert "no frame of this run was saved" in str(info.value) and out.read_bytes() == before
    assert info.value.run.status == "failed" and info.value.run.frames == 0 and info.value.run.stop_reason == "my check failed"
    fresh = tmp_path / "fresh.h5"  # without an older file the failed run still leaves its status behind
    with pytest.raises(TrackerError):
        mf.simulate(ROOT / "data/default.toml", out=fresh, t_final=0.5, n=16, trackers=[lambda t, x: {"v": "text"}])
    assert mf.load(fresh).status == "failed" and mf.load(fresh).frames == 0


def test_a_disk_too_full_for_the_arrays_written_once_leaves_nothing_behind(small_disk):
    # the weight path of time-dependent heads (2.9 MB here) is written when the file is made: on a full disk that
    # had been an h5py traceback, with a stray hidden file that kept the disk full
    out = small_disk / "x.h5"
    done = subprocess.run([sys.executable, "-m", "meanfield", "simulate", str(ROOT / "data/massucco_ou.toml"), "-o", str(out),
                           "--quiet"], capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "no space left on device" in done.stderr and "nothing was written" in done.stderr
    assert list(small_disk.iterdir()) == []


def test_a_write_error_while_the_file_is_made_removes_it_and_names_the_cause(tmp_path, monkeypatch):
    import errno

    from meanfield.errors import StorageFailed
    from meanfield.io.runfile import RunWriter

    real = h5py.Group.create_dataset

    def full(self, name, *args, **kwargs):
        if name == "weights/B":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", full)
    out = tmp_path / "r.h5"
    with pytest.raises(StorageFailed, match="no space left on device while creating the run file"):
        RunWriter(out, config={"model": {}, "solver": {}}, state_name="x", state_shape=(4, 3),
                  static={"weights/B": np.zeros((10, 3, 3))})
    assert list(tmp_path.iterdir()) == []  # neither the hidden new file nor the lock


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_a_resumed_run_counts_the_steps_of_every_session(tmp_path, solver):
    # `meanfield info` of a resumed run had reported the last session's steps (and evaluations, wall time, …) as the run's
    from meanfield.analysis.summary import run_summary
    from meanfield.solvers.run import ADDED_COUNTERS

    cfg = {section: dict(keys) for section, keys in SOLVERS[solver].items()}
    cfg["solver"]["t_final"] = 1.0
    whole = mf.simulate(cfg, out=tmp_path / "whole.h5")
    out = tmp_path / "resumed.h5"
    mf.simulate(cfg, out=out, **{"solver.t_final": 0.5})
    resumed = mf.simulate(cfg, out=out, resume=True)
    work = ("evaluations", "velocity_evaluations")  # a resumed session evaluates its first state once more
    counted = [key for key in ADDED_COUNTERS if key in whole.info and key not in ("wall_time", "sessions", *work)]
    assert counted and {key: resumed.info[key] for key in counted} == {key: whole.info[key] for key in counted}
    for key in set(work).intersection(whole.info):
        assert whole.info[key] <= resumed.info[key] <= whole.info[key] + 2
    assert (whole.info["sessions"], resumed.info["sessions"], mf.load(out).info["sessions"]) == (1, 2, 2)
    steps = [line for line in run_summary(mf.load(out)).splitlines() if line.startswith("steps:")]
    whole_steps = [line for line in run_summary(mf.load(tmp_path / "whole.h5")).splitlines() if line.startswith("steps:")]
    if solver == "jko":  # (its line counts the steps from the frames)
        assert steps == whole_steps
    else:  # the same count, and says over how many sessions
        assert len(steps) == 1 and steps[0].startswith(whole_steps[0] + ", over 2 sessions") and "counts again" in steps[0]


def test_whole_run_counters_add_counts_and_keep_extremes():
    from meanfield.solvers.run import whole_run_counters

    merged = whole_run_counters({"steps": 3, "jko_max_residual": 1e-9, "dt_min": 0.1, "stop_reason": "interrupted"},
                                {"steps": 4, "jko_max_residual": 1e-11, "dt_min": 0.2, "stop_reason": "t_final", "failed": False})
    assert merged == {"steps": 7, "jko_max_residual": 1e-9, "dt_min": 0.1, "stop_reason": "t_final", "failed": False}
    assert whole_run_counters({"sessions": 2}, {"sessions": 1})["sessions"] == 3
    assert whole_run_counters({}, {"steps": 4}) == {"steps": 4}  # a session killed with SIGKILL left no counters


def test_a_run_that_appears_or_grows_while_another_starts_is_left_alone(tmp_path):
    # the output was checked at start-up and the lock taken later: a run that finished in between was replaced in
    # silence (both exit 0), and a --resume appended its frames after those another writer had added meanwhile
    from meanfield.config import load_config
    from meanfield.errors import ConfigError
    from meanfield.io.runfile import RunWriter
    from meanfield.solvers.run import simulate_config

    cfg = load_config({"init": {"n": 8}, "solver": {"t_final": 0.5, "save_every": 0.25}})
    out = tmp_path / "run.h5"
    mf.simulate(cfg, out=out)  # the other run, finished after this one's check
    before = out.read_bytes()
    with pytest.raises(ConfigError, match="^-o: .*written by another run while this one started"):
        simulate_config(cfg, out, overwrite=False, out_key="-o")
    assert out.read_bytes() == before
    with pytest.raises(ConfigError, match="^--resume: .*changed while this run started .*3 committed frames, not 2"):
        RunWriter(out, config=cfg, state_name="x", state_shape=(8, 3), resume=True, resume_frames=2)
    assert out.read_bytes() == before and mf.load(out).frames == 3


def test_sessions_that_end_without_their_counters_are_each_counted(tmp_path):
    # the count had come from the session before the last only: three sessions killed in a row counted as one, and a
    # session ended by a second Ctrl-C (its status recorded, its counters not) counted as none
    cfg = {"init": {"n": 16}, "solver": {"dt": 0.05, "t_final": 2.0, "save_every": 0.25}}
    out = tmp_path / "run.h5"

    def ctrl_c_at(when: float):
        def tracker(t: float, x: np.ndarray) -> None:
            if t >= when:
                raise KeyboardInterrupt
        return tracker

    for k, when in enumerate((0.5, 1.0, 1.5)):
        with pytest.raises(KeyboardInterrupt):
            mf.simulate(cfg, out=out, resume=k > 0, trackers=[ctrl_c_at(when)])
        assert mf.load(out).info["unrecorded_sessions"] == k + 1
    resumed = mf.simulate(cfg, out=out, resume=True)
    assert (resumed.info["sessions"], resumed.info["unrecorded_sessions"]) == (1, 3)
    np.testing.assert_array_equal(resumed.x, mf.simulate(cfg).x)


def test_a_disk_filled_by_another_process_leaves_the_file_readable_and_resumable(small_disk):
    # the space check refused a frame, then finish() wrote the status onto the full disk: h5py's RuntimeError from
    # flush and close escaped, the lock stayed, and the file was left unreadable (every committed frame lost)
    from meanfield.io.lock import lock_path

    cfg = {"init": {"n": 32}, "solver": {"dt": 0.05, "t_final": 2.0, "save_every": 0.25}}
    whole_run = mf.simulate(cfg)
    whole = whole_run.x
    out, filler = small_disk / "full.h5", small_disk / "filler"

    def fill_the_disk(t: float, x: np.ndarray) -> None:
        if t >= 1.0 and not filler.exists():  # another process takes every byte: the next frame and the status find no room
            _fill(filler)

    with pytest.raises(mf.RunFailed, match="no space left on device"):
        mf.simulate(cfg, out=out, trackers=[fill_the_disk])
    assert not lock_path(out).exists()  # the lock is released
    filler.unlink()
    kept = mf.load(out)
    assert kept.frames == 4 and kept.status != "completed"  # t = 0 … 0.75: the frame at t = 1 found the disk full
    np.testing.assert_array_equal(kept.x, whole[:4])
    resumed = mf.simulate(cfg, out=out, resume=True)
    np.testing.assert_array_equal(resumed.x, whole)
    # the counters count work: the interval from t = 0.75 to 1 (5 steps), whose frame found no room, was taken twice
    # the counters sum the sessions that recorded theirs: the one that found the disk full could not, and is named
    from meanfield.analysis.summary import run_summary

    assert (resumed.info["sessions"], resumed.info["unrecorded_sessions"]) == (1, 1)
    assert resumed.info["steps"] == whole_run.info["steps"] - 15  # t = 0.75 … 2 taken by the resumed session
    steps = [line for line in run_summary(mf.load(out)).splitlines() if line.startswith("steps:")]
    assert len(steps) == 1 and "1 more session stopped without recording its counters (killed, out of disk, or a second Ctrl-C)" in steps[0]


def test_a_resume_on_a_full_disk_leaves_the_file_unchanged_and_resumable(small_disk):
    # --resume reopened the file and flushed its new attributes with no space check: on a full disk HDF5's flush and
    # close failed (a traceback, exit 1) and left the file marked open for writing, every committed frame unreadable
    from meanfield.errors import StorageFailed
    from meanfield.io.lock import lock_path

    cfg = {"init": {"n": 32}, "solver": {"dt": 0.05, "t_final": 1.0, "save_every": 0.25}}
    out, filler = small_disk / "run.h5", small_disk / "filler"
    mf.simulate(cfg, out=out)
    before = out.read_bytes()
    _fill(filler)
    with pytest.raises(StorageFailed, match="no space left on device to resume .*the file is unchanged"):
        mf.simulate(cfg, out=out, resume=True, **{"solver.t_final": 2.0})
    assert out.read_bytes() == before and not lock_path(out).exists()
    filler.unlink()
    resumed = mf.simulate(cfg, out=out, resume=True, **{"solver.t_final": 2.0})
    np.testing.assert_array_equal(resumed.x, mf.simulate(cfg, **{"solver.t_final": 2.0}).x)


def test_a_rebuild_without_room_for_its_copy_leaves_the_file_unchanged(tmp_path, monkeypatch):
    # --resume of a killed run copies its committed frames; on a nearly full disk HDF5 had dropped the copy's writes
    # and the partial copy, moved over the file, zeroed 68 of 126 frames
    from meanfield.errors import StorageFailed
    from meanfield.io import runfile

    out = tmp_path / "run.h5"
    x = mf.simulate({"init": {"n": 16}, "solver": {"t_final": 1.0, "save_every": 0.25}}, out=out).x
    before = out.read_bytes()
    # the file fits, its copy and the reserve do not
    monkeypatch.setattr(runfile, "_room", lambda path, written=None: (len(before), runfile.DISK_FULL))
    with pytest.raises(StorageFailed, match="needs .* bytes beside it .*no space left on device"):
        runfile._rebuild(runfile.RunReader(out), out)  # noqa: SLF001
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["run.h5"]
    monkeypatch.undo()
    runfile._rebuild(runfile.RunReader(out), out)  # with room: a copy that reads back equal, frame for frame
    np.testing.assert_array_equal(mf.load(out).x, x)

    def short_copy(reader, copy, frames):  # a copy that does not read back equal is never moved over the file
        raise ValueError("the copy of 'x' does not read back equal")

    before = out.read_bytes()
    monkeypatch.setattr(runfile, "_check_copy", short_copy)
    with pytest.raises(StorageFailed, match="could not rebuild .* the file is unchanged"):
        runfile._rebuild(runfile.RunReader(out), out)  # noqa: SLF001
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["run.h5"]


def test_a_rebuild_that_cannot_make_its_copy_names_why(tmp_path):
    # a run file whose name leaves no room for .rebuild (renamed so, past the output check): the cleanup of the copy
    # that could not be made had raised the same "File name too long" over the StorageFailed (a traceback)
    from meanfield.errors import StorageFailed
    from meanfield.io import runfile

    out = tmp_path / "run.h5"
    mf.simulate({"init": {"n": 8}, "solver": {"t_final": 0.2, "save_every": 0.1}}, out=out)
    long = out.rename(tmp_path / ("k" * (os.pathconf(tmp_path, "PC_NAME_MAX") - 7) + ".h5"))
    before = long.read_bytes()
    with pytest.raises(StorageFailed, match="could not rebuild .* the file is unchanged"):
        runfile._rebuild(runfile.RunReader(long), long)  # noqa: SLF001
    assert long.read_bytes() == before


def test_a_damaged_file_is_named_not_a_traceback(tmp_path, capsys):
    # bytes overwritten inside the HDF5 metadata had raised KeyError ("incorrect metadata checksum"), exit 1
    from meanfield.cli import main

    out = tmp_path / "run.h5"
    mf.simulate({"init": {"n": 8}, "solver": {"t_final": 0.5, "save_every": 0.25}}, out=out)
    good = out.read_bytes()
    named = 0
    for offset in range(512, min(len(good), 4096), 64):
        out.write_bytes(good[:offset] + b"\xff" * 16 + good[offset + 16:])
        try:
            run = mf.load(out)
            run.x, run.diagnostics  # noqa: B018 - every dataset read
        except mf.ConfigError as exc:
            named += "is damaged" in str(exc) or "not a run file" in str(exc) or "truncated" in str(exc)
        if named == 1:
            assert main(["info", str(out)]) == 2
            assert "Traceback" not in capsys.readouterr().err
            named += 1
    assert named >= 2, "no offset damaged the file: the test did not test"


def test_resume_of_a_failed_run_says_how_to_go_on_from_its_good_frames(tmp_path):
    # the message had said resuming "would continue from a bad frame"; the bad frame is never saved
    out = tmp_path / "failed.h5"
    cfg = {"init": {"n": 8}, "solver": {"t_final": 1.0, "save_every": 0.25}}

    def blow_up(t: float, x: np.ndarray) -> None:
        if t >= 0.5:
            raise mf.StopRun("NaN/Inf in the state at t=0.5", bad_state=True)

    with pytest.raises(mf.RunFailed):
        mf.simulate(cfg, out=out, trackers=[blow_up])
    with pytest.raises(mf.ConfigError, match=r"its 2 committed frames are good.*--set init.kind=run --set init.path=.*init.time=0.25"):
        mf.simulate(cfg, out=out, resume=True)


def test_info_follow_of_a_closed_file_it_cannot_read_fails_at_once(tmp_path, monkeypatch, capsys):
    # a foreign or damaged HDF5 file that no writer holds had been looked at FOLLOW_LOOKS times (50 s) before exit 2
    from meanfield.cli import info, main
    from meanfield.errors import ConfigError

    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f.create_dataset("data", data=np.zeros(3))
    sleeps = []
    monkeypatch.setattr(info.time, "sleep", sleeps.append)
    assert main(["info", str(foreign), "--follow"]) == 2
    assert "is an HDF5 file but not a meanfield run" in capsys.readouterr().err and sleeps == []
    looks = []

    def changing():  # a file that changes under the read (a writer without a lock to ask) is looked at again
        looks.append(1)
        if len(looks) < 3:
            with h5py.File(foreign, "a") as f:
                f.attrs["look"] = len(looks)
            raise ConfigError("OUT.h5", f"{foreign} is an HDF5 file but not a meanfield run")
        return "read"

    assert info._when_readable(str(foreign), changing, 0.01) == "read" and len(looks) == 3


def test_info_follow_waits_for_a_first_frame_and_stops_when_the_file_is_removed(references, tmp_path, monkeypatch):
    # before its first frame the writer holds the name but the file is not there yet: --follow had failed at once;
    # a file removed while followed had been looked for for ever
    from meanfield.cli import info
    from meanfield.errors import ConfigError
    from meanfield.io import lock

    out = tmp_path / "run.h5"
    looks = []

    def read():
        looks.append(1)
        if len(looks) < 3:
            raise ConfigError("OUT.h5", f"{out}: file not found")
        return "read"

    monkeypatch.setattr(lock, "writer_alive", lambda path: True)  # a writer holds the name
    assert info._when_readable(str(out), read, 0.01) == "read" and len(looks) == 3
    monkeypatch.undo()
    looks.clear()
    # nobody writes it: looked at for START_GRACE_SECONDS (a run started with the follower), then refused
    monkeypatch.setattr(info, "START_GRACE_SECONDS", 0.2)
    monkeypatch.setattr(info, "START_LOOK_SECONDS", 0.01)

    def missing():
        looks.append(1)
        raise ConfigError("OUT.h5", f"{out}: file not found")

    with pytest.raises(ConfigError, match="file not found.*no run made it within"):
        info._when_readable(str(out), missing, 0.01)
    assert len(looks) > 1

    config, _ = references["slow"]
    proc = subprocess.Popen([sys.executable, "-m", "meanfield", "simulate", str(config), "-o", str(out), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        _wait_for_frames(out, 1)
        follow = subprocess.Popen([sys.executable, "-m", "meanfield", "info", str(out), "--follow", "--interval", "0.05"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        line = "start"
        while line and not line.startswith("frame "):  # following: the summary and a frame are out ('' : it ended)
            line = follow.stdout.readline()
        assert line.startswith("frame "), follow.communicate(timeout=60)
        out.unlink()
        _, err = follow.communicate(timeout=120)
        assert follow.returncode == 2 and "was removed while it was followed" in err, err
    finally:
        proc.kill()
        proc.communicate()


def test_frames_whose_bytes_changed_on_disk_are_named_and_not_resumed_from(tmp_path, flip_lowest_bit):
    # a last frame altered on disk (a bit flipped: still on the sphere, still finite) had been resumed from in silence
    from meanfield.cli import main
    from meanfield.io.runfile import CHECKSUM, DamagedFrameWarning

    out = tmp_path / "run.h5"
    cfg = {"init": {"n": 8}, "solver": {"t_final": 1.0, "save_every": 0.25}}
    mf.simulate(cfg, out=out)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        intact = mf.load(out).x.copy()  # every frame matches its checksum: no warning
    flip_lowest_bit(out, 2)
    with pytest.warns(DamagedFrameWarning, match=r"frame 2 \(t = 0.5\) does not match the checksum written with it"):
        damaged = mf.load(out).x
    assert 0 < np.abs(damaged - intact).max() < 1e-15  # what no other check could have told
    flip_lowest_bit(out, 2)  # mended; now the last frame, where --resume would continue
    flip_lowest_bit(out, 4)
    before = out.read_bytes()
    longer = {**cfg, "solver": {**cfg["solver"], "t_final": 1.5}}
    with pytest.raises(mf.ConfigError, match=r"^resume: .*last committed frame 4 \(t = 1\) does not match the checksum.*"
                                             r"--set init.kind=run --set init.path=.* --set init.time=0.75") as refused:
        mf.simulate(longer, out=out, resume=True)
    # the way on it gives works as printed: an absolute path (init.path is read from a config's folder), the exact time
    hint = str(refused.value).split("--set ")[1:]
    overrides = dict(item.strip().split("=", 1) for item in hint)
    assert Path(overrides["init.path"]).is_absolute()
    cont = mf.simulate({**longer, "init": {"kind": "run", "path": overrides["init.path"], "time": float(overrides["init.time"])}})
    assert cont.t[0] == 0.75
    with pytest.raises(mf.ConfigError, match=r"^init.path: .*the frame at t = 1 does not match the checksum"):  # (had started
        mf.simulate({**longer, "init": {"kind": "run", "path": str(out), "time": 1.0}})  # from it with a warning)
    config = _toml(longer, tmp_path / "longer.toml")
    assert main(["simulate", str(config), "-o", str(out), "--resume", "--quiet"]) == 2
    assert out.read_bytes() == before  # nothing touched
    # a file written before checksums resumes as before, and its new frames get them
    flip_lowest_bit(out, 4)
    with h5py.File(out, "a") as f:
        del f[CHECKSUM]
    mf.simulate(longer, out=out, resume=True)
    with h5py.File(out, "r") as f:
        sums = f[CHECKSUM][()]
    assert list(sums[:5]) == [-1] * 5 and np.all(sums[5:] >= 0) and len(sums) == 7
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(mf.load(out).x[:5], intact)


def test_a_resume_on_another_thread_count_says_so(tmp_path, monkeypatch):
    # a resume on another count had been taken without a word, though its bits differ in the last digits
    from meanfield.config import ConfigNote

    out = tmp_path / "run.h5"
    cfg = {"init": {"n": 8}, "solver": {"t_final": 0.5, "save_every": 0.25}, "model": {"precision": "float32"}}
    monkeypatch.setenv("MEANFIELD_NUM_THREADS", "2")
    mf.simulate(cfg, out=out)
    with h5py.File(out, "r") as f:
        assert f.attrs["threads"] == 2
    longer = {**cfg, "solver": {**cfg["solver"], "t_final": 1.0}}
    monkeypatch.setenv("MEANFIELD_NUM_THREADS", "1")
    with pytest.warns(ConfigNote, match="written with 2 kernel thread.* this session runs 1.*MEANFIELD_NUM_THREADS=2 resumes it bit for bit"):
        mf.simulate(longer, out=out, resume=True)
    assert "precision=float32" in mf.load(out).summary()  # info says how the kernels ran


def _limited(size: int):
    """A ``preexec_fn`` that gives the child process a file-size limit (``ulimit -f``; Python ignores SIGXFSZ, so a
    write past it fails with EFBIG)."""
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))


def test_a_file_size_limit_is_met_before_hdf5_meets_it_and_resume_finishes_bit_for_bit(references, tmp_path):
    config, reference = references["big-frames"]
    out = tmp_path / "run.h5"
    done = subprocess.run([sys.executable, "-m", "meanfield", "simulate", str(config), "-o", str(out), "--quiet"],
                          capture_output=True, text=True, env=ENV, timeout=600, preexec_fn=_limited(3 << 19))
    assert done.returncode == 1 and "file-size limit (ulimit -f) is reached" in done.stderr, done.stderr
    assert "raise the limit and continue with --resume" in done.stderr and "Traceback" not in done.stderr
    kept = mf.load(out)
    assert 0 < kept.frames < mf.load(reference).frames and kept.status == "failed"
    np.testing.assert_array_equal(kept.states, mf.load(reference).states[: kept.frames])
    _simulate(config, out, "--resume")
    _same(out, reference)


#: a run whose room checks see no limit, so that its writes fail inside HDF5 (as under a disk quota, which the
#: file system's free space does not show)
_UNCHECKED = """
import sys
from meanfield.io import runfile
runfile._room = lambda path, written=None: (None, runfile.DISK_FULL)
from meanfield.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_write_that_fails_inside_hdf5_ends_the_run_cleanly_and_keeps_its_committed_frames(references, tmp_path):
    # HDF5's close after the failed write had flushed again, failed again, and the process died of a segmentation
    # fault (exit 139); its frames had been read as "truncated"
    config, reference = references["big-frames"]
    out = tmp_path / "run.h5"
    done = subprocess.run([sys.executable, "-c", _UNCHECKED, "simulate", str(config), "-o", str(out), "--quiet"],
                          capture_output=True, text=True, env=ENV, timeout=600, preexec_fn=_limited(1 << 20))
    assert done.returncode == 1, (done.returncode, done.stderr)  # not -11 (a segmentation fault)
    assert "file-size limit (ulimit -f) is reached while writing frame" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "Segmentation" not in done.stderr
    kept = mf.load(out)  # the file ends before the end its superblock names: read in SWMR mode
    assert 0 < kept.frames < mf.load(reference).frames
    np.testing.assert_array_equal(kept.states, mf.load(reference).states[: kept.frames])
    info = subprocess.run([sys.executable, "-m", "meanfield", "info", str(out)], capture_output=True, text=True, env=ENV)
    assert info.returncode == 0 and "truncated" not in info.stderr, info.stderr
    _simulate(config, out, "--resume")
    _same(out, reference)


def test_write_errors_name_what_ran_out():
    import errno as errnos

    from meanfield.io import runfile

    assert runfile._no_space(OSError(errnos.ENOSPC, "x")) == runfile.DISK_FULL  # noqa: SLF001
    assert runfile._no_space(OSError(errnos.EDQUOT, "x"))[0] == "disk quota exceeded"  # noqa: SLF001
    h5py_text = RuntimeError("Unable to flush file (file write failed: ..., errno = 27, error message = 'File too large')")
    assert runfile._no_space(h5py_text) == runfile.SIZE_LIMIT  # noqa: SLF001
    assert runfile._no_space(RuntimeError("errno = 5, Input/output error")) is None  # noqa: SLF001


def test_a_first_frame_that_fails_inside_hdf5_leaves_nothing_and_says_so(references, tmp_path):
    config, _ = references["big-frames"]
    out = tmp_path / "run.h5"
    done = subprocess.run([sys.executable, "-c", _UNCHECKED, "simulate", str(config), "-o", str(out), "--quiet"],
                          capture_output=True, text=True, env=ENV, timeout=600, preexec_fn=_limited(24 << 10))
    assert done.returncode == 1, (done.returncode, done.stderr)  # had been a segmentation fault, or "file not found"
    assert "no frame had been committed: raise the limit and run again" in done.stderr, done.stderr
    assert "no frame was saved" in done.stderr and "Traceback" not in done.stderr and "--resume" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_runtime_error_of_hdf5_inside_a_read_is_named_as_damage(tmp_path):
    # h5py raises RuntimeError for some bad metadata: it had been a traceback, exit 1
    from meanfield.io.runfile import read_run_file

    out = tmp_path / "run.h5"
    mf.simulate({"init": {"n": 8}, "solver": {"t_final": 0.5, "save_every": 0.25}}, out=out)

    def fails(f):
        raise RuntimeError("Can't decrement id ref count (bad object header)")

    with pytest.raises(mf.ConfigError, match="is damaged: HDF5 cannot read it"):
        read_run_file(out, fails)


def test_a_truncated_copy_of_a_closed_run_is_named_at_once(tmp_path):
    # the reader had opened it in SWMR mode and retried its missing metadata for minutes (meanfield info hung)
    out = tmp_path / "run.h5"
    mf.simulate({"init": {"n": 64}, "solver": {"t_final": 2.0, "save_every": 0.05}}, out=out)
    cut = tmp_path / "cut.h5"
    cut.write_bytes(out.read_bytes()[: out.stat().st_size // 2])
    done = subprocess.run([sys.executable, "-m", "meanfield", "info", str(cut)], capture_output=True, text=True, env=ENV,
                          timeout=60)
    assert done.returncode == 2 and "is truncated" in done.stderr, done.stderr


def test_a_signal_while_the_last_frame_is_written_is_delivered_once_the_file_is_closed(tmp_path, interactive_sigint):
    # a Ctrl-C that lands after the loop's last check (the last frame's trackers, its write) had been dropped: the run
    # ended "completed", the flag was cleared, and a script looping over runs went on with the next one
    def signal_on_the_last_frame(signum):
        def tracker(t, x):
            if t == 0.5:
                os.kill(os.getpid(), signum)

        return tracker

    small = {"init": {"n": 8}, "solver": {"t_final": 0.5, "save_every": 0.1}}
    with pytest.raises(KeyboardInterrupt):
        mf.simulate(small, trackers=[signal_on_the_last_frame(signal.SIGINT)])
    with pytest.raises(KeyboardInterrupt):
        mf.solve(mf.Problem(mf.Model(d=3, beta=1.0), mf.sample_uniform(8, 3, seed=0)), mf.ParticleSolver(dt=0.05),
                 t_final=0.5, save_every=0.1, trackers=[signal_on_the_last_frame(signal.SIGINT)])
    out, seen = tmp_path / "r.h5", []

    def caller_handler(signum, frame):  # the caller's own SIGTERM handler gets the signal, after the file was closed
        seen.append(mf.load(out).status)

    previous = signal.signal(signal.SIGTERM, caller_handler)
    try:
        run = mf.simulate(small, out=out, trackers=[signal_on_the_last_frame(signal.SIGTERM)])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == ["completed"] and run.status == "completed" and run.frames == 6


def test_a_signal_ignored_on_entry_stays_ignored_during_a_run():
    # SIGINT ignored by the parent (a job started with & in a script) had been handled during the run: a Ctrl-C meant
    # for the shell in front stopped it
    from meanfield.solvers.signals import interruptible, requested

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interruptible():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # (SIGTERM still ends the run cleanly)
            signal.raise_signal(signal.SIGINT)
            assert requested() is None
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        run = mf.simulate({"init": {"n": 8}, "solver": {"t_final": 0.3, "save_every": 0.1}},
                          trackers=[lambda t, x: os.kill(os.getpid(), signal.SIGINT)])
        assert run.status == "completed" and run.frames == 4
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_interrupt_between_the_reopened_file_and_the_loop_leaves_the_status_interrupted(tmp_path, monkeypatch):
    # a SIGTERM after --resume had reopened the file (status "running") and before the loop's handler was in place had
    # left it "running", which meanfield info reads as "killed"
    import meanfield.solvers.run as run_module

    out = tmp_path / "r.h5"
    mf.simulate({"init": {"n": 8}, "solver": {"t_final": 0.2, "save_every": 0.1}}, out=out)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "ProgressTracker", interrupted)
    with pytest.raises(KeyboardInterrupt):
        mf.simulate(out=out, resume=True, t_final=0.4)
    kept = mf.load(out)
    assert kept.status == "interrupted" and kept.frames == 3
    monkeypatch.undo()
    resumed = mf.simulate(out=out, resume=True, t_final=0.4)
    assert resumed.status == "completed" and resumed.frames == 5
