"""Timers for the benchmarks: the best of single calls, and the peak memory of one call."""
from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from typing import Any

__all__ = ["best_of", "mean_call_time", "peak_memory"]


def best_of(func: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Best wall time of ``repeat`` single calls of ``func`` (no warm-up), and the last call's value."""
    best, value = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        value = func()
        best = min(best, time.perf_counter() - started)
    return float(best), value


def mean_call_time(func: Callable[[], Any], *, min_time: float, max_calls: int = 50) -> float:
    """Mean wall time of back-to-back calls of ``func``, repeated until ``min_time`` seconds (at most ``max_calls``)."""
    calls, started = 0, time.perf_counter()
    while True:
        func()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= min_time or calls >= max_calls:
            return elapsed / calls


def peak_memory(func: Callable[[], Any]) -> int:
    """Peak bytes allocated (tracemalloc) during one call of ``func``, above what was allocated before it.

    Where tracing was already on (``PYTHONTRACEMALLOC``, a caller's own trace), its peak is reset and the bytes
    traced before the call subtracted, and tracing is left on (the earlier allocations had been counted, 392 MiB for
    a call of 1 MiB, and the caller's trace stopped)."""
    if tracemalloc.is_tracing():
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        func()
        return max(0, int(tracemalloc.get_traced_memory()[1]) - int(before))
    tracemalloc.start()
    try:
        func()
        return int(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()
