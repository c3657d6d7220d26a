"""Arrays the user hands over as ``.npy`` files (initial tokens, head matrices): read, or refused with the key named."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from meanfield.errors import ConfigError

__all__ = ["load_npy"]

#: the first bytes of every file ``numpy.save`` writes
NPY_MAGIC = b"\x93NUMPY"

#: the dtype kinds of real numbers (booleans, signed and unsigned integers, floats) that ``real=True`` accepts
REAL_KINDS = "biuf"


def load_npy(path: str | Path, key: str, *, mmap: bool = False, real: bool = False) -> np.ndarray:
    """The array stored in ``path`` by :func:`numpy.save` (memory-mapped with ``mmap``).

    Parameters
    ----------
    path : path
        The ``.npy`` file.
    key : str
        The config key that errors name.
    mmap : bool
        Memory-map the array instead of reading it.
    real : bool
        Refuse an array whose entries are not real numbers (booleans, integers or floats): a complex array would lose
        its imaginary part in a cast to float, and strings would fail later with a traceback.

    Raises
    ------
    ConfigError
        Naming ``key``: the file cannot be read, it is not a ``.npy`` file (NumPy itself would call any other file
        "pickled data", which a text or HDF5 file is not), or, with ``real``, its entries are not real numbers.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(NPY_MAGIC))
    except OSError as exc:
        raise ConfigError(key, f"cannot read {path}: {exc.strerror or exc}") from None
    if head != NPY_MAGIC:
        raise ConfigError(key, f"{path} is not a NumPy .npy file (write one with numpy.save)")
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ConfigError(key, f"cannot read the array in {path}: {exc}") from None
    if real and array.dtype.kind not in REAL_KINDS:
        raise ConfigError(key, f"{path} holds entries of type {array.dtype}, not real numbers")
    return array
