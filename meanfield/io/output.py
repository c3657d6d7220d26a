"""Checks on an output path, made before any work: a run never truncates a file it should not."""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

from meanfield.errors import ConfigError
from meanfield.io.lock import followed
from meanfield.io.signature import is_hdf5

__all__ = ["check_output", "check_parent", "IMAGE_FORMATS", "RUN_SIBLINGS", "SAVE_SIBLINGS"]

#: file extensions matplotlib writes still pictures to
IMAGE_FORMATS = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp")

#: the hidden files a run writes beside its file (``{}``: the file's name): the new file moved onto the name with the
#: first frame, the writer lock (:mod:`meanfield.io.lock`), and the copy ``--resume`` rebuilds a killed run in
RUN_SIBLINGS = (".{}.new", ".{}.lock", ".{}.rebuild")
#: those of :meth:`meanfield.Run.save`: the lock, the hidden copy moved onto the name once written, and that copy's
#: own new file and lock
SAVE_SIBLINGS = (".{}.lock", ".{}.saving", "..{}.saving.new", "..{}.saving.lock")

#: the longest file name where the file system cannot tell its own
NAME_MAX = 255


def check_output(path: str | Path, *, overwrite: bool = False, resume: bool = False, key: str = "-o",
                 options: tuple[str, str] = ("--overwrite", "--resume"), siblings: tuple[str, ...] = RUN_SIBLINGS) -> Path:
    """Say what is wrong with ``path`` as the output of a run, before anything is computed or written.

    A folder, a path under a file, a folder without write permission, an existing file that is not a regular one (a
    device, a pipe, a socket, a process's open file such as ``/dev/stdout``: ``overwrite`` had replaced it by a
    regular file, ``/dev/null`` too when run as root), or an existing file (unless ``overwrite``, or ``resume`` on a
    meanfield run; with ``overwrite``, one that is not empty and not HDF5: a config, a picture, a table) is a
    :class:`ConfigError` naming ``key``; ``options`` are the names the messages give the two
    switches (the Python API's ``("overwrite=True", "resume=True")``).

    A symlink is followed: the file it names is checked, and the run writes that file through the link (as the
    shell's ``>`` does; the link stays a link, see :class:`meanfield.io.runfile.RunWriter`).

    A name too long for one of the hidden files written beside the file (``siblings``, :data:`RUN_SIBLINGS` or
    :data:`SAVE_SIBLINGS`) is refused as well: the run had failed late, a killed one could not be resumed.
    """
    replace, resume_option = options
    path = Path(path)
    if path.is_dir():
        raise ConfigError(key, f"{path} is a folder; give a file name such as {path / 'run.h5'}")
    check_parent(path, key)
    if (path.exists() and not path.is_file()) or _an_open_file(path):
        raise ConfigError(key, f"{path} is not a regular file (a device, a pipe, or a process's open file such as "
                               "/dev/stdout); give the run a file of its own")
    if path.is_symlink():  # written through: the target's folder is where the file is made
        target = followed(path)
        if target is None:
            raise ConfigError(key, f"{path} is a symlink that leads to no file (a loop of links)")
        if not target.parent.is_dir():  # as the shell's > (the run had made the missing folders wherever the link led)
            raise ConfigError(key, f"{path} is a symlink to {target}, whose folder {target.parent} does not exist")
        check_parent(target, key)
    _check_sibling_names(path, key, siblings)
    if path.exists():
        if resume:
            from meanfield.io.runfile import RunReader

            RunReader(path, key=resume_option.split("=")[0])  # resuming needs a meanfield run; the reader says why not
            if not os.access(path, os.W_OK):
                raise ConfigError(key, f"{path} is read-only; cannot resume into it")
        elif not overwrite:
            raise ConfigError(key, f"{path} already exists; use {replace} to replace it (or {resume_option} to continue that run)")
        elif not os.access(path, os.W_OK):
            raise ConfigError(key, f"{path} is read-only; cannot overwrite it")
        elif os.path.getsize(path) > 0 and not is_hdf5(path):  # (-o run.toml --overwrite had replaced a config by a run)
            raise ConfigError(key, f"{path} is not an HDF5 file; {replace} replaces only a run file: give the run a "
                                   "name of its own (e.g. run.h5)")
        elif os.path.getsize(path) > 0 and _foreign_hdf5(path):  # (another program's data file had been replaced)
            raise ConfigError(key, f"{path} is an HDF5 file but not a meanfield run (no config attribute, no t); "
                                   f"{replace} replaces only a run file: give the run a name of its own")
    return path


def _check_sibling_names(path: Path, key: str, siblings: tuple[str, ...]) -> None:
    """Refuse ``path`` where the name of a hidden file written beside the file (``siblings``) is longer than its file
    system allows (a killed run with a name 3 bytes short of the limit had been left unresumable, a traceback)."""
    target = followed(path) or path.absolute()
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = NAME_MAX
    if limit is None or limit < 0:  # (no limit told)
        return
    longest = max(siblings, key=len)
    size = len(os.fsencode(longest.format(target.name)))
    if size > limit:
        most = limit - len(os.fsencode(longest.format("")))
        raise ConfigError(key, f"the name of {path} is too long: the hidden file {longest.format('NAME')} written beside it "
                               f"would have {size} bytes, and names have at most {limit} here; give it a name of at most "
                               f"{most} bytes")


def _foreign_hdf5(path: str | Path) -> bool:
    """Whether ``path``, an HDF5 file, opens and is plainly not a meanfield run: neither the ``config`` attribute nor the
    ``t`` dataset of one.  A file that does not open (a run damaged by a kill or a full disk) is not called foreign:
    replacing it is what ``--overwrite`` is for."""
    import h5py

    try:
        with h5py.File(path, "r", locking=False) as f:
            return "config" not in f.attrs and "t" not in f
    except (OSError, RuntimeError, ValueError):
        return False


#: the folders of a process's open files (``/dev/stdout`` is a symlink to ``/proc/self/fd/1``)
_OPEN_FILES = re.compile(r"/proc/[^/]+(/task/[^/]+)?/fd")


def _an_open_file(path: Path) -> bool:
    """Whether ``path`` is a symlink that leads through a process's open file (``/proc/PID/fd/N``): a pipe, a
    terminal, or a regular file that ``>`` redirected; in each case not a run's place (the run had replaced it)."""
    current = os.path.abspath(path)
    for _ in range(40):  # (the kernel's own bound on a chain of symlinks)
        folder = os.path.realpath(os.path.dirname(current))
        if _OPEN_FILES.fullmatch(folder):
            return True
        if not os.path.islink(current):
            return False
        try:
            current = os.path.join(folder, os.readlink(current))  # (an absolute target replaces the folder)
        except OSError:
            return False
    return False


def check_parent(path: str | Path, key: str) -> None:
    """The nearest existing folder above ``path`` must be a folder we may write into (missing ones are created later)."""
    probe = Path(path).parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ConfigError(key, f"cannot create {path}: {probe} is a file, not a folder")
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(key, f"cannot write into {probe}: permission denied")
    if probe.is_dir():  # a real try: root passes os.access on read-only and pseudo file systems (/proc had failed late)
        try:
            handle, name = tempfile.mkstemp(prefix=".meanfield-probe-", dir=probe)
        except OSError as exc:
            raise ConfigError(key, f"cannot write into {probe} (for {path}): {exc.strerror or exc}") from None
        os.close(handle)
        with contextlib.suppress(OSError):
            os.unlink(name)


def folder_path(value: str | os.PathLike[str] | None, key: str) -> str | None:
    """Check an output folder before any work: not an existing file, and somewhere it can be created (``None``: none)."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(key, f"expected a folder path (str or os.PathLike), got {type(value).__name__}")
    value = os.fspath(value)
    if not value.strip():  # (an empty --out had meant the default folder, and replaced what was there)
        raise ConfigError(key, "the folder name is empty; give a folder")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise ConfigError(key, f"{value} is a file; give a folder")
    if not path.exists():
        check_parent(path, key)
    elif not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(key, f"cannot write into {value}: permission denied")
    return value
