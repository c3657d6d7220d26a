r"""Freed memory kept for reuse: glibc's ``malloc`` tuned so that a run's arrays do not fault in fresh pages at every step.

A particle step allocates arrays of the token size (the kernel's output, the tangent field, the
stage points) and frees them a moment later.  With glibc's default, *dynamic* thresholds, an
array of a few MiB is served from the heap once a first one was freed, but the heap's top is
given back to the system as soon as more than twice that size lies free there: the four Runge–Kutta
stages of one step free that much at once.  The next step's arrays then fault in fresh, zeroed
pages, about 1.3 µs per 4 KiB page on this project's virtual machines: at n = 1024, d = 384 900 page
faults per stage, 1.2 ms next to an 11 ms kernel call.

:func:`keep_freed_memory` fixes both thresholds (``mallopt``): blocks below ``mmap_threshold`` come
from the heap, and up to ``trim_threshold`` of free memory stays at its top for the next
allocations.  The ``meanfield`` command calls it for its own process; a notebook may call it once.
It changes only how freed memory is reused, never a result.  Where the variables
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` are set, or ``GLIBC_TUNABLES`` sets a
``glibc.malloc.*`` tunable, the user's choice stands and nothing is changed; on a C library other
than glibc it does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import operator
import os
import sys

__all__ = ["keep_freed_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

#: blocks smaller than this come from the heap, where freed ones are reused (glibc's largest: 32 MiB on 64-bit systems)
MMAP_THRESHOLD = 32 << 20
#: free memory at the heap's top up to this size is kept for the next allocations
TRIM_THRESHOLD = 256 << 20

_M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
_M_MMAP_THRESHOLD = -3
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
#: the largest value ``mallopt`` takes (a C ``int``: ctypes had wrapped 2**32 to 0, every block then mmapped)
_INT_MAX = 2**31 - 1


def _users_malloc_settings() -> bool:
    """Whether the environment holds the user's own malloc thresholds: ``MALLOC_MMAP_THRESHOLD_``,
    ``MALLOC_TRIM_THRESHOLD_``, or a ``glibc.malloc.*`` tunable in ``GLIBC_TUNABLES`` (an unrelated tunable, such as
    ``glibc.cpu.hwcaps``, had turned :func:`keep_freed_memory` off too)."""
    if any(name in os.environ for name in _USER_SETTINGS[:2]):
        return True
    tunables = os.environ.get("GLIBC_TUNABLES")
    if tunables is None:
        return False
    return any(item.strip().startswith("glibc.malloc.") for item in tunables.split(":"))


def keep_freed_memory(*, mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Keep freed blocks below ``mmap_threshold`` for reuse, with up to ``trim_threshold`` bytes free at the heap's top.

    Parameters
    ----------
    mmap_threshold, trim_threshold : int
        Bytes (glibc's ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD``), from 0 to ``2**31 - 1``
        (``mallopt`` takes a C ``int``).

    Returns
    -------
    bool
        Whether the thresholds were set: ``False`` on a C library other than glibc, where glibc
        refused one, or where the user set glibc's malloc variables (``MALLOC_MMAP_THRESHOLD_``,
        ``MALLOC_TRIM_THRESHOLD_``, or ``glibc.malloc.*`` tunables in ``GLIBC_TUNABLES``) themselves.

    Raises
    ------
    ValueError
        A threshold that is not an integer from 0 to ``2**31 - 1``.

    Examples
    --------
    Once in a notebook, before long runs (every ``meanfield`` command does it):

    >>> import meanfield as mf
    >>> kept = mf.keep_freed_memory()  # False off glibc, or where MALLOC_* variables are set
    >>> isinstance(kept, bool)
    True
    """
    for name, value in (("mmap_threshold", mmap_threshold), ("trim_threshold", trim_threshold)):
        if isinstance(value, bool) or not hasattr(value, "__index__") or not 0 <= operator.index(value) <= _INT_MAX:
            raise ValueError(f"{name} must be an integer number of bytes from 0 to 2**31 - 1 (mallopt's int), got {value!r}")
    if not sys.platform.startswith("linux") or _users_malloc_settings():
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only: musl has no mallopt thresholds  # noqa: B018
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    kept_below = bool(mallopt(_M_MMAP_THRESHOLD, operator.index(mmap_threshold)))  # each setting on its own: one refused leaves the other
    kept_on_top = bool(mallopt(_M_TRIM_THRESHOLD, operator.index(trim_threshold)))
    return kept_below and kept_on_top
