"""The one place where numba compilation and the kernels' threads are configured.

Every compiled kernel of the package is decorated with :func:`jit` (serial)
or :func:`pjit` (parallel over ``numba.prange``).  Kernels are cached on disk
(``cache=True``) so that a second process pays no compilation time.

**Threads that behave on a shared machine.**

* ``MEANFIELD_NUM_THREADS`` (or ``meanfield --threads N`` / :func:`set_num_threads`)
  is the number of threads of numba's parallel kernels and of our own BLAS row-block
  pool; BLAS itself is held to one thread inside them (:func:`one_blas_thread`).
* Waiting threads sleep instead of spinning: numba's OpenMP layer is preferred and
  started with ``OMP_WAIT_POLICY=PASSIVE`` (unless you set either yourself).  A
  spinning thread that waits for a descheduled sibling burns the time slice the
  sibling needs: measured with four competing busy processes on 2 cores, that made
  a 256-token step 3× slower than one thread; passive waiting makes it 1.4×.
* Small problems run on one thread (:func:`threads_for`): below
  :data:`PARALLEL_MIN_PAIRS` score pairs per call the fork/join costs more than it
  saves once the cores are shared (measured crossover: about 400 tokens at d = 3).
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before numba starts its OpenMP threading layer
os.environ.setdefault("NUMBA_THREADING_LAYER_PRIORITY", "omp tbb workqueue")

import numba  # noqa: E402 - after the threading environment above

__all__ = [
    "jit",
    "pjit",
    "num_threads",
    "set_num_threads",
    "threads_for",
    "kernel_threads",
    "one_blas_thread",
    "bitcast",
    "PARALLEL_MIN_PAIRS",
]

#: score pairs ``n·m·H`` per call below which kernels run on one thread: under load the join of a
#: parallel region waits for a descheduled thread (measured crossover ~1.5e5 pairs on 2 cores)
PARALLEL_MIN_PAIRS = 1 << 18


def bitcast(source: Any, target: Any) -> Any:
    """A numba intrinsic reinterpreting a ``source`` scalar's bits as a ``target`` scalar of the same width.

    A register bitcast: no conversion, and loops that call it vectorise (the exponentials of
    :mod:`meanfield.kernels.fused` and :mod:`meanfield.kernels.fused32` build :math:`2^k` with it).
    """
    from numba.extending import intrinsic

    @intrinsic
    def reinterpret(typingctx: Any, value: Any) -> Any:  # pragma: no cover - compiled
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return builder.bitcast(args[0], context.get_value_type(target))

        return target(source), codegen

    return reinterpret


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
    """Threads the kernels may use: ``MEANFIELD_NUM_THREADS``, else all cores numba sees."""
    value = os.environ.get("MEANFIELD_NUM_THREADS")
    if value:
        try:
            wanted = int(value)
        except ValueError:
            wanted = 0
        if wanted >= 1:
            return min(wanted, numba.config.NUMBA_NUM_THREADS)
        warnings.warn(f"MEANFIELD_NUM_THREADS={value!r} is not a positive integer: the kernels use all "
                      f"{numba.config.NUMBA_NUM_THREADS} cores", RuntimeWarning, stacklevel=2)
    return max(1, numba.config.NUMBA_NUM_THREADS)


def set_num_threads(n: int) -> None:
    """Limit the kernels (numba and the BLAS row-block pool) to ``n`` threads.

    The CLI's ``--threads`` and sweep workers call this, so that processes ×
    threads never oversubscribe the cores.
    """
    n = max(1, int(n))
    os.environ["MEANFIELD_NUM_THREADS"] = str(n)
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


def threads_for(pairs: float) -> int:
    """Threads for a kernel call of ``pairs`` score pairs: one below :data:`PARALLEL_MIN_PAIRS`, else :func:`num_threads`."""
    return 1 if pairs < PARALLEL_MIN_PAIRS else num_threads()


@contextmanager
def kernel_threads(pairs: float) -> Iterator[int]:
    """Run the numba parallel regions inside on :func:`threads_for` ``(pairs)`` threads (restored after)."""
    threads = threads_for(pairs)
    before = numba.get_num_threads()
    if threads != before:
        numba.set_num_threads(threads)
    try:
        yield threads
    finally:
        if threads != before:
            numba.set_num_threads(before)


@lru_cache(maxsize=1)
def _blas_controller() -> Any:
    import scipy.linalg.cython_blas  # noqa: F401 - SciPy's OpenBLAS (meanfield.kernels.gemm calls it) is loaded, so the controller holds it too
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Context in which BLAS runs on one thread (threadpoolctl's controllers of the BLAS libraries).

    Our kernels thread over row blocks themselves, and the products they hand to
    BLAS are thin or small: letting OpenBLAS spread each of them over the cores
    only adds synchronisation, 10–50× slower on a loaded 2-core machine.  Only the
    libraries not already on one thread are set and restored (a nested context costs
    two reads per library): 12 µs per enter and exit against 39 µs for ``ThreadpoolController.limit``
    (under load; every kernel call enters it).
    """
    libraries = [lib for lib in _blas_controller().lib_controllers if lib.user_api == "blas"]
    before = [lib.get_num_threads() for lib in libraries]
    changed = [(lib, threads) for lib, threads in zip(libraries, before) if threads != 1]
    for lib, _ in changed:
        lib.set_num_threads(1)
    try:
        yield
    finally:
        for lib, threads in changed:
            lib.set_num_threads(threads)


def _apply_environment() -> None:
    """``MEANFIELD_NUM_THREADS`` set before the import limits numba's threads from the start."""
    value = os.environ.get("MEANFIELD_NUM_THREADS")
    if value:
        try:
            numba.set_num_threads(max(1, min(int(value), numba.config.NUMBA_NUM_THREADS)))
        except ValueError:
            pass


_apply_environment()
