"""One writer per run file: an exclusive lock taken before anything is truncated, and a test for a live writer.

The lock is a ``flock`` on a hidden file beside the run (``.OUT.h5.lock``), held
for the whole run by the process that writes ``OUT.h5``; the kernel releases it
when that process dies, however it dies.  A second writer fails at once; a
reader asks whether a writer holds it, to tell a running file from one whose
writer was killed.

The lock belongs to the file, not to the name it is given: symlinks are followed
(``link.h5 -> real.h5`` and ``real.h5`` share ``.real.h5.lock``).  A hard link is
another name of the same file that no path tells apart; the run file's own
``writer`` attribute guards it (:class:`meanfield.io.runfile.RunWriter`).
"""
from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from meanfield.errors import ConfigError

__all__ = ["WriterLock", "lock_path", "writer_alive"]


def lock_path(path: str | Path) -> Path:
    """The hidden lock file of a run file: ``dir/.name.lock`` beside the file ``path`` names, symlinks followed.

    A symlink and its target therefore share one lock (each had had its own: a second writer through the link was
    not refused).  A symlink loop, which no file is behind, keeps the name as it is given.
    """
    path = Path(path)
    try:
        path = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        path = path.absolute()
    return path.with_name(f".{path.name}.lock")


def _holder(lock: Path) -> str:
    try:
        text = lock.read_text().strip()
    except OSError:
        return ""
    return f" (pid {text})" if text else ""


class WriterLock:
    """The exclusive lock of the process that writes a run file.

    Parameters
    ----------
    path : path-like
        The run file (the lock is :func:`lock_path` of it: a symlink's target's).
    key : str
        The option named in the error (``-o``).
    """

    def __init__(self, path: str | Path, *, key: str = "-o") -> None:
        self.path = Path(path)
        self.lock = lock_path(self.path)
        self.key = key
        self.fd: int | None = None

    def acquire(self) -> WriterLock:
        """Take the lock, or raise :class:`ConfigError` when another process writes the file."""
        try:
            self.lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # a folder where no file can be made (/proc, a read-only mount): the output, not the lock
            raise ConfigError(self.key, f"cannot write {self.path}: {exc.strerror or exc} ({self.lock.parent})") from None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise ConfigError(
                    self.key, f"{self.path} is being written by another meanfield process{_holder(self.lock)}; "
                    "wait for it to finish, or write to another file"
                ) from None
            try:  # the file we locked may have been removed by a writer that was finishing: lock the current one
                if os.fstat(fd).st_ino == os.stat(self.lock).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
            fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:  # who holds it, for the message of a second writer; the flock alone is the lock
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} on {socket.gethostname()}".encode())
        except OSError:  # a full disk: the run file's own check then says so (this had been a traceback, the lock left behind)
            pass
        self.fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file and let go of the lock (in that order: a waiting writer then locks a fresh file)."""
        if self.fd is None:
            return
        try:
            os.unlink(self.lock)
        except FileNotFoundError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def writer_alive(path: str | Path) -> bool:
    """Whether some process holds the writer lock of the run file ``path`` now (symlinks followed: any name of the
    file asks the same lock)."""
    lock = lock_path(path)
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
