"""What a file holds, told from its first bytes: the signature every HDF5 file (every run file) starts with.

One reading of it serves the run reader (a text file named ``run.h5`` is "not an HDF5 file"), the table checks (a run
is never replaced by a table, whatever its name) and ``info --follow`` (a file that is not HDF5 is not waited for).
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["HDF5_SIGNATURE", "file_head", "is_hdf5"]

#: the first bytes of every HDF5 file (the superblock's signature, written before anything else)
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def file_head(path: str | Path) -> bytes:
    """The first ``len(HDF5_SIGNATURE)`` bytes of ``path`` (fewer for a shorter file).

    Only a regular file is read: a pipe, a terminal or a device is never opened (``--csv /dev/stdout | head`` had
    blocked for ever in ``open``, on the read side of its own pipe), and the file is opened without blocking in case
    one is put at that name meanwhile.

    Raises
    ------
    OSError
        ``path`` cannot be read, or is not a regular file.
    """
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return os.read(fd, len(HDF5_SIGNATURE))  # (a regular file returns fewer bytes only at its end)
    finally:
        os.close(fd)


def is_hdf5(path: str | Path) -> bool:
    """Whether ``path`` is a readable regular file that starts with :data:`HDF5_SIGNATURE`, whatever its name (a pipe,
    a terminal or a device is not, and is not opened)."""
    try:
        return file_head(path) == HDF5_SIGNATURE
    except OSError:
        return False
