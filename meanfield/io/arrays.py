"""Arrays the user hands over as ``.npy`` files (initial tokens, head matrices): read, or refused with the key named."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from meanfield.errors import ConfigError

__all__ = ["load_npy"]

#: the first bytes of every file ``numpy.save`` writes
NPY_MAGIC = b"\x93NUMPY"


def load_npy(path: str | Path, key: str, *, mmap: bool = False) -> np.ndarray:
    """The array stored in ``path`` by :func:`numpy.save` (memory-mapped with ``mmap``).

    Raises
    ------
    ConfigError
        Naming ``key``: the file cannot be read, or it is not a ``.npy`` file (NumPy itself would call any other file
        "pickled data", which a text or HDF5 file is not).
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(NPY_MAGIC))
    except OSError as exc:
        raise ConfigError(key, f"cannot read {path}: {exc.strerror or exc}") from None
    if head != NPY_MAGIC:
        raise ConfigError(key, f"{path} is not a NumPy .npy file (write one with numpy.save)")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ConfigError(key, f"cannot read the array in {path}: {exc}") from None
