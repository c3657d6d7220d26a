"""One writer per run file, whatever name it is given; outputs and tables that are not regular files; file systems
without locks."""
from __future__ import annotations

import errno
import fcntl
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from meanfield.errors import ConfigError
from meanfield.io import lock
from meanfield.io.lock import WriterLock, lock_path, writer_alive, writer_state
from meanfield.io.output import check_output
from meanfield.io.runfile import RunReader, RunWriter
from meanfield.io.signature import file_head, is_hdf5

CONFIG = {"model": {"d": 3}, "solver": {"kind": "particle"}}
SHAPE = (4, 3)

#: a writer in another process: one committed frame, then it holds the file open until its stdin closes ("hold"), or
#: it dies without closing the file, as a killed writer does ("die")
WRITER = textwrap.dedent("""
    import os, sys
    import numpy as np
    from meanfield.io.runfile import RunWriter
    writer = RunWriter(sys.argv[1], config={"model": {"d": 3}, "solver": {"kind": "particle"}}, state_name="x",
                       state_shape=(4, 3))
    writer.append(0.0, np.zeros((4, 3)))
    if sys.argv[2] == "die":
        os._exit(0)
    print("ready", flush=True)
    sys.stdin.read()
    writer.finish("completed")
""")


def _writer(path: Path, mode: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(path), mode], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    if mode == "hold":
        assert process.stdout.readline() == "ready\n"
    else:
        assert process.wait(timeout=60) == 0
    return process


def _append(path: Path, *, resume: bool, t: float) -> None:
    writer = RunWriter(path, config=CONFIG, state_name="x", state_shape=SHAPE, resume=resume)
    writer.append(t, np.full(SHAPE, t))
    writer.finish("completed")


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_symlink_to_a_run_being_written_shares_its_lock(tmp_path):
    # the lock had been keyed on the name: through a symlink a live run read as "interrupted", and a second writer
    # (--resume -o LINK) was let in, rebuilt the live file into a copy that replaced the link, and ran on in that fork
    real, link = tmp_path / "real.h5", tmp_path / "link.h5"
    link.symlink_to(real.name)
    assert lock_path(link) == lock_path(real) == tmp_path / ".real.h5.lock"
    writer = RunWriter(real, config=CONFIG, state_name="x", state_shape=SHAPE)
    try:
        writer.append(0.0, np.ones(SHAPE))
        assert writer_alive(link) and RunReader(link).status == "running"
        for resume in (True, False):
            with pytest.raises(ConfigError, match="being written by another meanfield process") as info:
                RunWriter(link, config=CONFIG, state_name="x", state_shape=SHAPE, resume=resume, key="-o")
            assert info.value.key == "-o"  # the caller's option (the Python API's "out")
        assert link.is_symlink()
    finally:
        writer.finish("completed")
    assert RunReader(link).frames == 1


def test_resume_through_a_hard_link_of_a_live_run_is_refused(tmp_path):
    # a hard link is another name no lock on names sees: the rebuild of --resume had detached it into a copy and run
    # on in it, two runs diverging; the file's writer attribute names a live process that has the file open
    real, hard = tmp_path / "real.h5", tmp_path / "hard.h5"
    process = _writer(real, "hold")
    try:
        os.link(real, hard)
        assert RunReader(hard).status == "running"  # (it had said "interrupted")
        with pytest.raises(ConfigError, match=f"pid {process.pid} .*hard link") as info:
            RunWriter(hard, config=CONFIG, state_name="x", state_shape=SHAPE, resume=True)
        assert info.value.key == "out" and hard.samefile(real)  # the default key, the Python API's (it had named -o)
    finally:
        process.communicate("")
    assert RunReader(real).status == "completed" and hard.samefile(real)


def test_resume_and_overwrite_through_a_symlink_write_its_target(tmp_path):
    # a killed writer's file resumed through a link had been rebuilt onto the link's name (a regular file with the
    # new frames, the target left "interrupted"); an --overwrite through it had replaced the link by a regular file
    real, link = tmp_path / "killed.h5", tmp_path / "link.h5"
    _writer(real, "die")
    link.symlink_to(real.name)
    assert RunReader(link).status == "interrupted"
    _append(link, resume=True, t=1.0)
    assert link.is_symlink() and RunReader(real).frames == 2 and RunReader(real).status == "completed"
    check_output(link, overwrite=True)
    _append(link, resume=False, t=5.0)
    assert link.is_symlink() and RunReader(real).times().tolist() == [5.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["killed.h5", "link.h5"]  # no lock, no .new left


def test_an_existing_file_that_is_not_a_regular_one_is_never_replaced(tmp_path):
    # --overwrite had replaced a FIFO, a device (as root -o /dev/null --overwrite: the machine's null device) and the
    # file behind /dev/stdout by an HDF5 file
    fifo = tmp_path / "fifo.h5"
    os.mkfifo(fifo)
    read, write = os.pipe()
    try:
        links = {}
        for name, target in (("stdout.h5", "/proc/self/fd/1"), ("pipe.h5", f"/proc/self/fd/{read}"), ("fifo-link.h5", fifo)):
            links[name] = tmp_path / name
            links[name].symlink_to(target)
        for path in (fifo, *links.values()):
            for resume in (False, True):
                with pytest.raises(ConfigError, match="not a regular file") as info:
                    check_output(path, overwrite=True, resume=resume, key="out")
                assert info.value.key == "out" and str(path) in str(info.value)
    finally:
        os.close(read)
        os.close(write)
    assert fifo.is_fifo() and all(link.is_symlink() for link in links.values())
    regular = tmp_path / "regular.h5"
    regular.write_bytes(b"")
    (tmp_path / "regular-link.h5").symlink_to(regular)
    assert check_output(tmp_path / "regular-link.h5", overwrite=True) == tmp_path / "regular-link.h5"


def test_a_pipe_is_never_opened_to_read_its_signature(tmp_path):
    # `--csv /dev/stdout | head` and a FIFO had blocked for ever in open(): is_hdf5 read any path
    from meanfield.cli import info
    from meanfield.cli.options import table_path

    fifo = tmp_path / "t.fifo"
    os.mkfifo(fifo)
    answers: list[object] = []

    def look() -> None:
        answers.append(is_hdf5(fifo))
        answers.append(table_path(str(fifo), "--csv"))
        with pytest.raises(OSError, match="not a regular file"):
            file_head(fifo)

        def missing() -> None:
            raise ConfigError("OUT.h5", f"{fifo} is not a regular file")

        with pytest.raises(ConfigError):  # refused at once, not waited for as a run about to start
            info._when_readable(str(fifo), missing, 0.01)
        answers.append("done")

    thread = threading.Thread(target=look, daemon=True)
    thread.start()
    thread.join(20)
    hung = thread.is_alive()
    if hung:  # let the blocked open go (a writer appears), so that the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert not hung and answers == [False, str(fifo), "done"]


def _no_locks(monkeypatch) -> None:
    def flock(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", flock)


def test_a_file_system_without_locks_is_named_not_a_traceback(tmp_path, monkeypatch):
    # NFS without lockd: flock's OSError had escaped (a traceback, exit 1) with the descriptor open and the lock file
    # left behind, and mf.load of a killed run had raised it too
    killed = tmp_path / "killed.h5"
    _writer(killed, "die")
    out = tmp_path / "nfs.h5"
    before = _open_descriptors()
    _no_locks(monkeypatch)
    with pytest.raises(ConfigError, match=r"cannot lock .*\.nfs\.h5\.lock on this file system \(No locks available\)") as info:
        WriterLock(out).acquire()
    assert info.value.key == "-o" and not lock_path(out).exists() and _open_descriptors() == before
    lock_path(out).write_text("")  # a lock file this writer did not make stays
    with pytest.raises(ConfigError, match="cannot lock"):
        WriterLock(out).acquire()
    assert lock_path(out).exists() and _open_descriptors() == before
    lock_path(killed).write_text("")  # (a writer killed on another machine leaves its lock file)
    assert writer_state(killed) is None and not writer_alive(killed)
    reader = RunReader(killed)
    assert reader.status == "interrupted" and "offers no locks" in reader.stop_reason


def test_errors_about_the_lock_file_name_it(tmp_path, monkeypatch):
    # they had named the run file ("cannot write d.h5: Is a directory (.)"), which did not exist
    (tmp_path / ".d.h5.lock").mkdir()
    (tmp_path / ".e.h5.lock").symlink_to(tmp_path / "nowhere" / "x")
    for name, reason in (("d.h5", "Is a directory"), ("e.h5", "a symlink to .*nowhere/x, which does not exist")):
        with pytest.raises(ConfigError, match=rf"cannot open the lock file .*\.{name}\.lock \({reason}\); remove it if no run writes {name}"):
            WriterLock(tmp_path / name).acquire()
    with pytest.raises(ConfigError, match=r"its lock file \.a+\.h5\.lock is too long"):
        WriterLock(tmp_path / ("a" * 250 + ".h5")).acquire()


def test_a_lock_file_of_another_user_is_locked_read_only(tmp_path, monkeypatch):
    # a run of another user killed in a shared folder leaves their 0644 lock file: nobody else could write the run
    # ("cannot write r.h5: Permission denied"); flock works on a descriptor opened read-only
    out = tmp_path / "r.h5"
    lock_path(out).write_text("999 on elsewhere")
    opened = os.open

    def open_as_another_user(path, flags, *args):  # (root passes every permission check)
        if Path(path) == lock_path(out) and flags & (os.O_WRONLY | os.O_RDWR) and not flags & os.O_EXCL:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return opened(path, flags, *args)

    monkeypatch.setattr(os, "open", open_as_another_user)
    with WriterLock(out):
        assert writer_alive(out)
        with pytest.raises(ConfigError, match="being written by another meanfield process"):
            WriterLock(out).acquire()
    assert not writer_alive(out)
    monkeypatch.setattr(lock.os, "unlink", lambda path: (_ for _ in ()).throw(PermissionError(errno.EPERM, "not yours")))
    with WriterLock(out):  # a lock file that cannot be removed (a sticky folder) is let go all the same
        pass
    assert not writer_alive(out)


def test_a_symlink_loop_or_a_link_into_no_folder_is_refused_by_the_command(tmp_path, capsys, monkeypatch):
    # (found in review) a loop had been a RuntimeError traceback from the command's check of its outputs; a link into a
    # missing folder had made that folder wherever the link led (the shell's > fails there)
    from meanfield.cli import main

    monkeypatch.chdir(tmp_path)
    os.symlink("loop2", "loop1")
    os.symlink("loop1", "loop2")
    config = Path(__file__).resolve().parents[3] / "data" / "default.toml"
    assert main(["simulate", str(config), "-o", "loop1", "--quiet"]) == 2
    assert "loop1 is a symlink that leads to no file (a loop of links)" in capsys.readouterr().err
    missing = tmp_path / "nowhere" / "deeper"
    os.symlink(missing / "x.h5", "bad.h5")
    assert main(["simulate", str(config), "-o", "bad.h5", "--quiet"]) == 2
    assert f"whose folder {missing} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()
