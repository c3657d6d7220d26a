"""Reading run files that are not what a finished run leaves: a cut copy of a killed run, an old config, a grid file
without its points, a path read after ``os.chdir``, a path that is not a regular file."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest

import meanfield as mf
from meanfield.errors import ConfigError
from meanfield.io.runfile import RunReader, RunWriter

CONFIG = {"model": {"d": 3}, "solver": {"kind": "particle"}}
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}


def _killed_run(path: Path, *, frames: int = 40) -> Path:
    """The file a writer killed after ``frames`` frames leaves: its bytes copied while the writer (in SWMR mode) is
    open, so the superblock keeps its SWMR flag and no process holds the copy's lock."""
    live = path.with_name("live.h5")
    with RunWriter(live, config=CONFIG, state_name="x", state_shape=(64, 3)) as writer:
        for k in range(frames):
            writer.append(0.1 * k, np.full((64, 3), float(k + 1)), {"energy": float(k)})
        path.write_bytes(live.read_bytes())
        writer.finish("completed", stop_reason="t_final")
    return path


def _superblock_eoa(path: Path) -> int:
    head = path.read_bytes()[:36]
    assert head[8] == 3 and head[9] == 8 and head[11] & 0x04  # a v3 superblock, 8-byte offsets, SWMR flag set
    return int.from_bytes(head[28:36], "little")


def test_a_cut_copy_of_a_killed_run_is_refused_as_truncated_and_never_hangs(tmp_path):
    # HDF5's SWMR reader retried the missing chunk index for ever, asleep in C code (SIGTERM and Ctrl-C ignored); at
    # 99 % it read the committed frames past the cut as zeros and info died in the summary (exit 1)
    whole = _killed_run(tmp_path / "killed.h5")
    size = whole.stat().st_size
    assert _superblock_eoa(whole) == size
    cuts = []
    for share in (50, 99):
        cut = tmp_path / f"cut{share}.h5"
        cut.write_bytes(whole.read_bytes()[: size * share // 100])
        cuts.append(cut)
    script = textwrap.dedent("""
        import sys
        import meanfield as mf
        for path in sys.argv[1:]:
            try:
                run = mf.load(path)
                print(path, "read", run.frames, run.status, float(run.final.min()))
            except mf.ConfigError as exc:
                print(path, "refused", exc)
    """)
    done = subprocess.run([sys.executable, "-c", script, str(whole), *map(str, cuts)], capture_output=True, text=True,
                          env=ENV, timeout=60)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 3, done.stderr
    assert lines[0] == f"{whole} read 40 interrupted 40.0", lines[0]  # the killed run itself reads whole
    for line, cut in zip(lines[1:], cuts):
        assert line.startswith(f"{cut} refused path: {cut} is truncated"), line


def test_the_superblock_end_of_file_address_is_read_where_hdf5_writes_it(tmp_path):
    from meanfield.io.runfile import _end_of_file_address

    whole = _killed_run(tmp_path / "killed.h5", frames=3)
    assert _end_of_file_address(whole) == _superblock_eoa(whole) == whole.stat().st_size
    with h5py.File(tmp_path / "old.h5", "w", libver="earliest") as f:  # a version 0 superblock: not told
        f["t"] = [0.0]
    assert _end_of_file_address(tmp_path / "old.h5") is None


def _particle_run(path: Path) -> Path:
    mf.simulate({"init": {"n": 8}, "solver": {"t_final": 0.5, "save_every": 0.25}}, out=path)
    return path


def test_a_file_older_than_later_config_keys_reads_with_their_defaults(tmp_path):
    # the stored config was used as it is: a file written before model.backend / tolerance / precision failed every
    # reader with a bare KeyError (exit 1)
    current = _particle_run(tmp_path / "run.h5")
    with h5py.File(current, "r") as f:
        stored = f.attrs["config"]
    now = mf.load(current)
    assert json.dumps(now.config) == json.dumps(json.loads(stored))  # a current file's config: unchanged, bit for bit
    old = tmp_path / "old.h5"
    old.write_bytes(current.read_bytes())
    with h5py.File(old, "a") as f:
        config = json.loads(f.attrs["config"])
        for key in ("backend", "tolerance", "precision"):
            del config["model"][key]
        del config["solver"]["method"]
        del config["track"]
        f.attrs["config"] = json.dumps(config)
    run = mf.load(old)
    assert run.config == now.config  # today's defaults, as a file written now holds them
    assert "backend" not in RunReader(old).config["model"]  # the stored config as it is (what --resume compares)
    assert run.model.precision == "float64"


def test_a_grid_file_without_its_points_is_refused_at_load(tmp_path):
    # every reader (summary, info, plot, concentration, mesh) had failed with a bare KeyError: 'points' (exit 1)
    out = tmp_path / "grid.h5"
    config = {"model": {"d": 3}, "solver": {"kind": "grid"}}
    with RunWriter(out, config=config, state_name="mass", state_shape=(12,), static={"areas": np.full(12, np.pi / 3)}) as writer:
        writer.append(0.0, np.full(12, 1 / 12))
        writer.finish("completed", stop_reason="t_final")
    with pytest.raises(ConfigError, match=r"grid\.h5 is damaged: a grid run needs its 'points' dataset \(N, 3\)"):
        mf.load(out)


def test_a_loaded_run_reads_its_frames_after_a_change_of_folder(tmp_path, monkeypatch):
    _particle_run(tmp_path / "run.h5")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _particle_run(elsewhere / "run.h5")  # another file of that name in the new folder
    monkeypatch.chdir(tmp_path)
    run = mf.load("run.h5")
    expected = np.array(h5py.File(tmp_path / "run.h5", "r")["x"])
    monkeypatch.chdir(elsewhere)
    np.testing.assert_array_equal(run.states, expected)  # had said "run.h5 was replaced by another file"
    assert str(run.path) == "run.h5"


def test_a_path_that_is_not_a_regular_file_is_refused_before_it_is_opened(tmp_path):
    fifo = tmp_path / "pipe.h5"
    os.mkfifo(fifo)  # open() of a pipe with no writer had blocked meanfield info for ever
    for path in (fifo, Path("/dev/null")):
        with pytest.raises(ConfigError, match=f"{path} is not a regular file"):
            mf.load(path)


def test_resuming_from_a_damaged_last_frame_names_the_time_of_the_frame_before_it(tmp_path, flip_lowest_bit):
    # the advice must continue from the intact frame before the damaged last one (t = 0.35 here, the times uneven);
    # the damaged frame's own time (0.6) had passed these tests (mut4 RU4; tests/solvers/test_reliability.py has the
    # whole --resume path)
    from meanfield.io.runfile import last_frame

    path = tmp_path / "run.h5"
    times = [0.0, 0.1, 0.35, 0.6]
    with RunWriter(path, config=CONFIG, state_name="x", state_shape=(4, 3)) as writer:
        for k, t in enumerate(times):
            writer.append(t, np.full((4, 3), float(k + 1)), {})
        writer.finish("completed", stop_reason="t_final")
    assert last_frame(path, "x")[:2] == (4, 0.6)
    flip_lowest_bit(path, 3)
    with pytest.raises(ConfigError, match=r"^--resume: .*last committed frame 3 \(t = 0.6\) does not match the checksum") as refused:
        last_frame(path, "x")
    assert str(refused.value).endswith(f"--set init.path={path.resolve()} --set init.time=0.35"), str(refused.value)
