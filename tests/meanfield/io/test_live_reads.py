"""Reading a run file while its writer changes it: a read caught mid-update is tried again, a dead file fails at once."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from meanfield.errors import ConfigError
from meanfield.io import runfile
from meanfield.io.runfile import LIVE_READ_ATTEMPTS, RunReader, RunWriter, read_run_file

CONFIG = {"model": {"d": 3}, "solver": {"kind": "particle"}}


def _finished_run(path: Path, frames: int = 3) -> Path:
    with RunWriter(path, config=CONFIG, state_name="x", state_shape=(4, 3)) as writer:
        for k in range(frames):
            writer.append(0.1 * k, np.full((4, 3), float(k)), {"energy": float(k)})
        writer.finish("completed", stop_reason="t_final")
    return path


def test_a_read_that_fails_while_the_writer_is_alive_is_tried_again(tmp_path):
    path = tmp_path / "run.h5"
    writer = RunWriter(path, config=CONFIG, state_name="x", state_shape=(4, 3))
    try:
        writer.append(0.0, np.ones((4, 3)))
        calls = []

        def flaky(f: h5py.File) -> int:  # what a half-updated root group looks like to h5py
            calls.append(1)
            if len(calls) < 3:
                raise KeyError("Unable to synchronously open object (unable to determine object type)")
            return int(f[runfile.COMMITTED][0])

        assert read_run_file(path, flaky) == 1
        assert len(calls) == 3

        def never(f: h5py.File) -> int:
            raise OSError("Can't synchronously read data (len not positive after adjustment for EOA)")

        with pytest.raises(ConfigError, match=f"being written and could not be read consistently in {LIVE_READ_ATTEMPTS} tries"):
            read_run_file(path, never)
    finally:
        writer.finish("completed")


def test_a_file_nobody_writes_fails_at_once(tmp_path):
    path = _finished_run(tmp_path / "run.h5")
    calls = []

    def broken(f: h5py.File) -> None:
        calls.append(1)
        raise KeyError("unable to determine object type")

    with pytest.raises(ConfigError, match="is damaged: HDF5 cannot read it"):  # named, not a KeyError traceback
        read_run_file(path, broken)
    assert len(calls) == 1
    with pytest.raises(ConfigError, match="file not found"):  # the opener's verdicts are not retried
        read_run_file(tmp_path / "missing.h5", broken)
    assert len(calls) == 1


def test_a_writer_that_closes_between_the_read_and_the_lock_check_is_not_called_interrupted(tmp_path, monkeypatch):
    path = _finished_run(tmp_path / "run.h5")
    header = RunReader._header
    looks = []

    def stale_first(self: RunReader, f: h5py.File) -> None:  # the first look predates the writer's last update
        header(self, f)
        looks.append(self.status)
        if len(looks) == 1:
            self.status = "running"

    monkeypatch.setattr(RunReader, "_header", stale_first)
    reader = RunReader(path)
    assert len(looks) == 2 and reader.status == "completed" and reader.stop_reason == "t_final"


def test_a_writer_that_died_running_is_interrupted(tmp_path):
    path = _finished_run(tmp_path / "run.h5")
    with h5py.File(path, "a") as f:
        f.attrs["status"] = "running"
    reader = RunReader(path)
    assert reader.status == "interrupted" and "without closing" in reader.stop_reason


#: a writer process that writes short runs back to back, each to a new file, and names the current one
WRITER = textwrap.dedent("""
    import os
    import sys
    import numpy as np
    from meanfield.io.runfile import RunWriter
    folder, runs = sys.argv[1], int(sys.argv[2])
    config = {"model": {"d": 3}, "solver": {"kind": "particle"}}
    for i in range(runs):  # until the reader has read enough (a loaded machine reads fewer per run written)
        if os.path.exists(f"{folder}/enough"):
            break
        path = f"{folder}/run{i}.h5"
        with open(f"{folder}/current.tmp", "w") as handle:
            handle.write(path)
        os.replace(f"{folder}/current.tmp", f"{folder}/current")
        with RunWriter(path, config=config, state_name="x", state_shape=(64, 3)) as writer:
            for k in range(4):
                writer.append(0.1 * k, np.full((64, 3), float(k)), {"energy": float(k), "max_speed": 1.0})
            writer.finish("completed", stop_reason="t_final", info={"steps": 4})
""")


def test_readers_of_files_written_as_fast_as_they_can_go_never_fail(tmp_path):
    """Before the retries about one read in 200 failed here (h5py's KeyError or OSError, a file caught
    closing taken for truncated), and one in 60 called a closing writer's run interrupted."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writer = subprocess.Popen([sys.executable, str(script), str(tmp_path), "5000"])
    failures: list[str] = []
    reads = 0
    try:
        deadline = time.monotonic() + 120
        while writer.poll() is None and time.monotonic() < deadline:
            current = tmp_path / "current"
            if not current.exists():
                continue
            path = Path(current.read_text())
            if not path.exists():
                continue
            try:
                reader = RunReader(path)
            except ConfigError as exc:
                if "holds no complete frame yet" not in str(exc):  # a run before its first frame: said, and right
                    failures.append(str(exc))
                continue
            except (KeyError, OSError) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            try:
                times, energy = reader.times(), reader.diagnostics()["energy"]
            except (KeyError, OSError, ConfigError) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            reads += 1
            if reads == 150:
                (tmp_path / "enough").touch()
            if reader.status not in ("running", "completed"):
                failures.append(f"status {reader.status}")
            np.testing.assert_array_equal(times, 0.1 * np.arange(reader.frames))
            np.testing.assert_array_equal(energy, np.arange(reader.frames, dtype=float))
    finally:
        writer.wait(timeout=120)
    assert writer.returncode == 0
    assert reads > 100, reads
    assert not failures, failures[:5]
