"""What a file holds, told from its first bytes: the signature every HDF5 file (every run file) starts with.

One reading of it serves the run reader (a text file named ``run.h5`` is "not an HDF5 file"), the table checks (a run
is never replaced by a table, whatever its name) and ``info --follow`` (a file that is not HDF5 is not waited for).
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["HDF5_SIGNATURE", "file_head", "is_hdf5"]

#: the first bytes of every HDF5 file (the superblock's signature, written before anything else)
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def file_head(path: str | Path) -> bytes:
    """The first ``len(HDF5_SIGNATURE)`` bytes of ``path`` (fewer for a shorter file).

    Raises
    ------
    OSError
        ``path`` cannot be read.
    """
    with open(path, "rb") as handle:
        return handle.read(len(HDF5_SIGNATURE))


def is_hdf5(path: str | Path) -> bool:
    """Whether ``path`` is a readable file that starts with :data:`HDF5_SIGNATURE`, whatever its name."""
    try:
        return file_head(path) == HDF5_SIGNATURE
    except OSError:
        return False
