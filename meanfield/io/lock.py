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

import contextlib
import errno
import fcntl
import os
import socket
from pathlib import Path

from meanfield.errors import ConfigError

__all__ = ["WriterLock", "followed", "lock_path", "writer_alive", "writer_state"]


def followed(path: str | Path) -> Path | None:
    """``path`` absolute, its symlinks followed (the file it names, existing or not); ``None`` for a loop of symlinks,
    behind which no file is (``resolve`` raises ``RuntimeError`` for one before Python 3.13, ``OSError`` after)."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return None


def lock_path(path: str | Path) -> Path:
    """The hidden lock file of a run file: ``dir/.name.lock`` beside the file ``path`` names, symlinks followed.

    A symlink and its target therefore share one lock (each had had its own: a second writer through the link was
    not refused).  A symlink loop, which no file is behind, keeps the name as it is given.
    """
    path = followed(path) or Path(path).absolute()
    return path.with_name(f".{path.name}.lock")


def _holder(lock: Path) -> str:
    try:
        text = lock.read_text().strip()
    except (OSError, UnicodeDecodeError):
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

    Notes
    -----
    A lock file of another user (a run of theirs killed in a shared folder) is opened read-only: ``flock`` works on
    it all the same, only the note of who holds it is not written.  A file system without ``flock`` is refused
    (:class:`ConfigError`): a run there could not be told from a second writer.
    """

    def __init__(self, path: str | Path, *, key: str = "-o") -> None:
        self.path = Path(path)
        self.lock = lock_path(self.path)
        self.key = key
        self.fd: int | None = None

    def _lock_error(self, exc: OSError) -> ConfigError:
        """What is wrong with the lock file (a folder, a dangling symlink, a name too long) or with its folder."""
        reason = exc.strerror or str(exc)
        if os.path.islink(self.lock) and not os.path.exists(self.lock):
            with contextlib.suppress(OSError):
                reason = f"a symlink to {os.readlink(self.lock)}, which does not exist"
        if exc.errno == errno.ENAMETOOLONG:
            return ConfigError(self.key, f"cannot write {self.path}: the name of its lock file {self.lock.name} is too "
                                         f"long ({reason}); give the run a shorter name")
        if os.path.lexists(self.lock):
            return ConfigError(self.key, f"cannot open the lock file {self.lock} ({reason}); remove it if no run "
                                         f"writes {self.path.name}")
        # a folder where no file can be made (/proc, a read-only mount): the output, not the lock
        return ConfigError(self.key, f"cannot write {self.path}: {reason} ({self.lock.parent})")

    def _open(self) -> tuple[int, bool]:
        """A descriptor of the lock file, and whether this call made the file."""
        self.lock.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(100):
            try:
                return os.open(self.lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
            except FileExistsError:
                pass
            try:
                return os.open(self.lock, os.O_RDWR), False
            except FileNotFoundError:
                if os.path.islink(self.lock):  # a dangling symlink: no file will appear there
                    raise
                # removed by a writer that was finishing since we looked: make it again
            except PermissionError:  # another user's lock file (or an immutable one): flock works on a read-only fd
                return os.open(self.lock, os.O_RDONLY), False
        raise OSError(errno.EAGAIN, "the lock file kept disappearing", str(self.lock))

    def acquire(self) -> WriterLock:
        """Take the lock, or raise :class:`ConfigError` when another process writes the file or it cannot be locked."""
        try:
            fd, made = self._open()
        except OSError as exc:
            raise self._lock_error(exc) from None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise ConfigError(
                    self.key, f"{self.path} is being written by another meanfield process{_holder(self.lock)}; "
                    "wait for it to finish, or write to another file"
                ) from None
            except OSError as exc:  # no flock on this file system (NFS without lockd, some FUSE/SMB mounts)
                os.close(fd)
                if made:  # (it had stayed behind, and the traceback had left the descriptor open)
                    try:
                        os.unlink(self.lock)
                    except OSError:
                        pass
                raise ConfigError(self.key, f"cannot lock {self.lock} on this file system ({exc.strerror or exc}): a "
                                            f"second writer of {self.path} could not be refused; write the run to a "
                                            "local disk") from None
            try:  # the file we locked may have been removed by a writer that was finishing: lock the current one
                if os.fstat(fd).st_ino == os.stat(self.lock).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
            try:
                fd, made = self._open()
            except OSError as exc:
                raise self._lock_error(exc) from None
        try:  # who holds it, for the message of a second writer; the flock alone is the lock
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} on {socket.gethostname()}".encode())
        except OSError:  # a full disk: the run file's own check then says so (this had been a traceback, the lock left
            pass  # behind); or a lock file opened read-only
        self.fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file and let go of the lock (in that order: a waiting writer then locks a fresh file)."""
        if self.fd is None:
            return
        try:
            os.unlink(self.lock)
        except OSError:  # gone, or another user's in a sticky folder: the flock, let go below, is the lock
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def writer_state(path: str | Path) -> bool | None:
    """Whether some process holds the writer lock of the run file ``path`` now; ``None`` where it cannot be told.

    Symlinks are followed (any name of the file asks the same lock).  ``None``: the lock file exists but its file
    system offers no ``flock`` (a run written on one machine and read over NFS on another).
    """
    lock = lock_path(path)
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # ENOLCK, EOPNOTSUPP, ENOSYS, …: had escaped as a traceback from mf.load and info
        return None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def writer_alive(path: str | Path) -> bool:
    """Whether some process holds the writer lock of the run file ``path`` now (symlinks followed).

    False also where it cannot be told (:func:`writer_state` is ``None``): no error is raised for a file system
    without ``flock``.
    """
    return writer_state(path) is True
