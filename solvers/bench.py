r"""Throughput of the kernels, measured against their NumPy twin and the ``exp`` roofline.

For the softmax velocity (one head) at each ``(n, d)`` we time, in the same process,

* the BLAS kernel (:func:`meanfield.attention.velocity_blas`, float64 and float32),
* for ``d ≤ 8`` the fused one-pass kernel with a vectorised ``exp``
  (:func:`meanfield.fused.velocity_fused`; the default ``"auto"`` backend uses it there),
* the fused numba kernel,
* (a) the NumPy twin (:func:`meanfield.attention.velocity_numpy`: GEMM → exp → GEMM
  in row blocks, in place in one preallocated buffer, one thread with BLAS held to
  one thread too) — the best plain-NumPy method,
* (b) the ``exp`` roofline: :math:`n^2` evaluations of NumPy's vectorised ``exp``
  over row blocks spread over all cores, i.e. the cost of the exponentials alone.

Throughput is reported in pairs :math:`(i,j)` per second, with the ratios
``twin / kernel`` (speed-up) and ``kernel / roofline`` (distance from the bound), and
the peak memory that :mod:`tracemalloc` sees (NumPy reports its buffers to it).
"""
from __future__ import annotations

import importlib
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from meanfield._jit import num_threads, one_blas_thread
from meanfield.attention import BLOCK_ELEMENTS, FUSED_MAX_D, _pool, velocity_blas, velocity_numba, velocity_numpy
from meanfield.fused import velocity_fused
from meanfield.heads import HeadStack
from meanfield.sphere import sample_uniform

__all__ = ["time_call", "exp_roofline", "bench_attention", "run_benchmarks"]


def time_call(func: Callable[[], Any], *, repeat: int = 3, min_time: float = 0.2) -> float:
    """Best wall time of ``func`` over ``repeat`` rounds (after one warm-up call)."""
    func()
    best = np.inf
    for _ in range(repeat):
        calls, started = 0, time.perf_counter()
        while True:
            func()
            calls += 1
            elapsed = time.perf_counter() - started
            if elapsed >= min_time or calls >= 50:
                break
        best = min(best, elapsed / calls)
    return float(best)


def peak_memory(func: Callable[[], Any]) -> int:
    """Peak bytes allocated (tracemalloc) during one call of ``func``."""
    tracemalloc.start()
    try:
        func()
        return int(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


def exp_roofline(n: int, *, threads: int | None = None) -> Callable[[], None]:
    """A callable doing :math:`n^2` float64 ``exp`` in row blocks over ``threads`` threads."""
    threads = threads or num_threads()
    block = max(1, min(n, BLOCK_ELEMENTS // n))
    rng = np.random.default_rng(0)
    source = -rng.uniform(0.0, 8.0, (block, n))
    buffers = [np.empty_like(source) for _ in range(threads)]
    blocks = -(-n // block)

    def worker(k: int) -> None:
        out = buffers[k]
        for _ in range(k, blocks, threads):
            np.exp(source, out=out)

    def run() -> None:
        if threads == 1:
            worker(0)
        else:
            list(_pool(threads).map(worker, range(threads)))

    return run


def bench_attention(
    sizes: Sequence[int] = (1024, 4096, 16384),
    dims: Sequence[int] = (3, 64),
    *,
    numba_max_work: float = 4096**2 * 64,
    twin_max_work: float = 16384**2 * 64,
    beta: float = 4.0,
) -> list[dict[str, Any]]:
    """Softmax-velocity throughput rows (see the module docstring)."""
    rows = []
    for n in sizes:
        for d in dims:
            x = sample_uniform(n, d, seed=0)
            heads = HeadStack(B=np.eye(d)[None], V=np.eye(d)[None])
            pairs = float(n) * n
            row: dict[str, Any] = {"kernel": "softmax velocity", "n": n, "d": d, "threads": num_threads()}
            t_kernel = time_call(lambda: velocity_blas(x, heads, beta=beta))
            t_f32 = time_call(lambda: velocity_blas(x, heads, beta=beta, precision="float32"))
            t_roof = time_call(exp_roofline(n))
            row.update(
                kernel_s=t_kernel,
                kernel_pairs_per_s=pairs / t_kernel,
                float32_s=t_f32,
                float32_pairs_per_s=pairs / t_f32,
                roofline_s=t_roof,
                roofline_pairs_per_s=pairs / t_roof,
                kernel_over_roofline=t_kernel / t_roof,
                float32_over_roofline=t_f32 / t_roof,
                peak_mib=peak_memory(lambda: velocity_blas(x, heads, beta=beta)) / 2**20,
                nxn_mib=pairs * 8 / 2**20,
            )
            if d <= FUSED_MAX_D:  # the default ("auto") kernel for float64 softmax at small d
                t_fused = time_call(lambda: velocity_fused(x, heads, beta=beta))
                row.update(fused_s=t_fused, fused_pairs_per_s=pairs / t_fused, fused_over_roofline=t_fused / t_roof,
                           fused_over_kernel=t_fused / t_kernel)
            if pairs * d <= twin_max_work:
                with one_blas_thread():  # the twin is one thread, BLAS included
                    t_twin = time_call(lambda: velocity_numpy(x, heads, beta=beta), repeat=2, min_time=0.0)
                row.update(twin_s=t_twin, twin_pairs_per_s=pairs / t_twin, speedup_vs_twin=t_twin / t_kernel, float32_speedup_vs_twin=t_twin / t_f32)
                if "fused_s" in row:
                    row["fused_speedup_vs_twin"] = t_twin / row["fused_s"]
            if pairs * d <= numba_max_work:
                t_numba = time_call(lambda: velocity_numba(x, heads, beta=beta), repeat=2, min_time=0.0)
                row.update(numba_s=t_numba, numba_pairs_per_s=pairs / t_numba, numba_over_kernel=t_numba / t_kernel)
            rows.append(row)
    return rows


def _optional_rows(module: str, function: str, **kwargs: Any) -> list[dict[str, Any]]:
    """Rows from solver families that provide their own benchmark, when installed."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            return []
        raise
    func = getattr(mod, function, None)
    if func is None:
        return []
    out = func(**kwargs)
    if isinstance(out, dict) and "rows" in out:  # {"rows": [...], "<extra>": {...}}
        extra = [{"name": key, **value} for key, value in out.items() if key != "rows" and isinstance(value, dict)]
        return list(out["rows"]) + extra
    return out if isinstance(out, list) else [out]


def run_benchmarks(*, quick: bool = False) -> dict[str, list[dict[str, Any]]]:
    """All benchmark tables: attention, grid, optimal transport."""
    sizes = (1024, 4096) if quick else (1024, 4096, 16384)
    tables = {"attention": bench_attention(sizes)}
    grid = _optional_rows("solvers.grid", "bench_grid", cells_list=(2000,) if quick else (2000, 8000, 32000))
    if grid:
        tables["grid"] = grid
    transport = _optional_rows("solvers.concentration", "bench_concentration", quick=quick)
    if transport:
        tables["transport"] = transport
    return tables
