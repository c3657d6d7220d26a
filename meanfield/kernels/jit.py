"""The one place where numba compilation is configured.

Every compiled kernel of the package is decorated with :func:`jit` (serial)
or :func:`pjit` (parallel over ``numba.prange``).  Kernels are cached on disk
(``cache=True``) so that a second process pays no compilation time.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import lru_cache
from typing import Any

import numba

__all__ = ["jit", "pjit", "num_threads", "set_num_threads", "one_blas_thread"]


def jit(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``numba.njit`` with ``cache=True`` and ``fastmath=False`` by default."""
    options.setdefault("cache", True)
    options.setdefault("nogil", True)
    if func is None:
        return lambda f: numba.njit(**options)(f)
    return numba.njit(**options)(func)


def pjit(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Parallel variant of :func:`jit` (``parallel=True``)."""
    options.setdefault("parallel", True)
    return jit(func, **options)


def num_threads() -> int:
    """Threads used by the kernels: ``MEANFIELD_NUM_THREADS``, else all cores."""
    value = os.environ.get("MEANFIELD_NUM_THREADS")
    if value:
        return max(1, int(value))
    return max(1, numba.config.NUMBA_NUM_THREADS)


def set_num_threads(n: int) -> None:
    """Limit the kernels (numba and the BLAS row-block pool) to ``n`` threads.

    Sweeps call this in each worker process so that processes × threads does
    not oversubscribe the cores.
    """
    n = max(1, int(n))
    os.environ["MEANFIELD_NUM_THREADS"] = str(n)
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


@lru_cache(maxsize=1)
def _blas_controller() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def one_blas_thread() -> AbstractContextManager[Any]:
    """Context in which BLAS runs on one thread (threadpoolctl; about 10 µs to enter).

    Our kernels thread over row blocks themselves, and the products they hand to
    BLAS are thin or small: letting OpenBLAS spread each of them over the cores
    only adds synchronisation, 10–50× slower on a loaded 2-core machine.
    """
    return _blas_controller().limit(limits=1, user_api="blas")
