r"""Throughput of the kernels, measured against their NumPy twin and the ``exp`` roofline.

For the softmax velocity (one general head: a fixed orthogonal, not symmetric, score matrix
:math:`B` (:func:`bench_head`), so that no kernel takes the symmetric path that halves the
work for :math:`B = B^\top`; :math:`V = I`, :math:`\beta = 4`) at each ``(n, d)`` we time, in the
same process,

* the BLAS kernel (:func:`meanfield.kernels.attention.velocity_blas`, float64 and float32),
* for ``d ≤ 8`` the fused one-pass kernel with a vectorised ``exp``
  (:func:`meanfield.kernels.fused.velocity_fused`; the default ``"auto"`` backend uses it there),
* for ``d ≤ 8`` the fused float32 kernel (:func:`meanfield.kernels.fused32.velocity_fused32`;
  ``model.precision = "float32"`` uses it there), with its speed-up over the float64 one,
* the fused numba kernel,
* (a) the NumPy twin (:func:`meanfield.kernels.attention.velocity_numpy`: GEMM → exp → GEMM
  in row blocks, in place in one preallocated buffer, one thread with BLAS held to
  one thread too) — the best plain-NumPy method,
* (b) the ``exp`` roofline: :math:`n^2` evaluations of the fastest float64 ``exp`` on this
  machine (:func:`~meanfield.kernels.blas.exp_scores`: NumPy's where it is vectorised, else the
  kernels' own), on a copy of each row block, over row blocks spread over all cores: the cost
  of the exponentials alone.

Each kernel's velocity is checked against the twin's on 512 evenly spaced rows (``*_error``: the largest difference
relative to :math:`\max_i|v_i|`) before its time is reported; a row's kernels, twin and roofline are timed in
three rotating rounds (best of each), so that its ratios share the machine's load.  Throughput is in pairs
:math:`(i,j)` per second; the ratios are ``twin / kernel`` (a speed-up: above 1, the kernel is
faster) and ``kernel / roofline`` (a time ratio: above 1, the kernel takes longer than its
exponentials alone), with the peak memory of one float64 BLAS call that :mod:`tracemalloc`
sees (NumPy and numba report their buffers to it).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from meanfield.kernels.jit import num_threads, one_blas_thread
from meanfield.solvers.timing import best_of, mean_call_time, peak_memory
from meanfield.kernels.attention import BLOCK_ELEMENTS, FUSED_MAX_D, velocity_blas, velocity_numba, velocity_numpy
from meanfield.kernels.blas import _pool, release_buffers
from meanfield.kernels.fused import velocity_fused
from meanfield.kernels.fused32 import velocity_fused32
from meanfield.heads import HeadStack
from meanfield.geometry.sphere import sample_uniform

__all__ = [
    "time_call",
    "peak_memory",
    "best_of",
    "exp_roofline",
    "bench_attention",
    "bench_grid",
    "LATE_CLUSTERS",
    "bench_w2_overhead",
    "bench_run_step",
    "bench_time_split",
    "run_benchmarks",
]


def time_call(func: Callable[[], Any], *, repeat: int = 3, min_time: float = 0.2) -> float:
    """Best wall time of ``func`` over ``repeat`` rounds (after one warm-up call)."""
    func()
    return float(min(mean_call_time(func, min_time=min_time) for _ in range(repeat)))


#: traced calls of the BLAS kernel whose largest peak is reported: each thread makes its row-block buffer when it takes
#: a block, and on a loaded machine one thread may take every block (one call had read 4.2 MiB, the next 8.2)
PEAK_CALLS = 3


def _blas_peak(call: Callable[[], Any]) -> int:
    """Largest peak bytes of :data:`PEAK_CALLS` calls of the BLAS kernel, the row-block buffers it keeps between calls
    included: they are let go before each, so that the trace sees the call make them (the timing calls before had made
    them out of its sight)."""
    peaks = []
    for _ in range(PEAK_CALLS):
        release_buffers()
        peaks.append(peak_memory(call))
    return max(peaks)


#: the scores of the roofline's blocks lie in [-ROOFLINE_DEPTH, 0], as shifted softmax scores at β = 4
ROOFLINE_DEPTH = 8.0


def exp_roofline(n: int, *, threads: int | None = None) -> Callable[[], None]:
    """A callable doing :math:`n^2` float64 ``exp`` in row blocks over ``threads`` threads, by the ``exp`` the kernels
    use here (:func:`~meanfield.kernels.blas.exp_scores`, in place on a copy of the block).

    NumPy's own ``exp`` is vectorised only on AVX-512 processors; elsewhere it is the scalar libm loop, some ten
    times slower than the kernels' ``exp``, and every kernel had "beaten" a roofline built on it.
    """
    from meanfield.kernels.blas import exp_scores

    threads = threads or num_threads()
    block = max(1, min(n, BLOCK_ELEMENTS // n))
    rng = np.random.default_rng(0)
    source = -rng.uniform(0.0, ROOFLINE_DEPTH, (block, n))
    buffers = [np.empty_like(source) for _ in range(threads)]
    blocks = -(-n // block)

    def worker(k: int) -> None:
        out = buffers[k]
        for _ in range(k, blocks, threads):
            np.copyto(out, source)
            exp_scores(out, deepest=ROOFLINE_DEPTH)

    def run() -> None:
        if threads == 1:
            worker(0)
        else:
            list(_pool(threads).map(worker, range(threads)))

    return run


def bench_head(d: int) -> HeadStack:
    r"""The benchmarks' head: :math:`B` a fixed orthogonal matrix that is not symmetric (the Q factor of a seeded
    Gaussian matrix, so :math:`\|B\|_2 = 1` as for :math:`B = I`), :math:`V = I`.  With :math:`B = I` the BLAS kernel
    had taken its symmetric path (half the score products and half the ``exp``), which no trained or random head
    takes, and its ratios to the twin had read 1.4–1.8× high."""
    q, r = np.linalg.qr(np.random.default_rng(20261206).standard_normal((d, d)))
    B = q * np.sign(np.diag(r))
    return HeadStack(B=B[None], V=np.eye(d)[None])


#: largest difference to the twin's velocity, relative to max |v|, that a timed kernel may show: float64 as
#: ``bench --compare`` holds every implementation to (its ``F64_AGREEMENT``); float32 tighter than its 1e-4 (which
#: admits torch's and JAX's own float32 paths): the dense float32 kernels measured within 6e-7
BENCH_TOLERANCE = {"float64": 1e-12, "float32": 1e-5}


#: the rows of each kernel's velocity checked against the twin (evenly spaced)
CHECKED_ROWS = 512


def _checked(v: np.ndarray, reference: np.ndarray, rows: np.ndarray) -> float:
    """The error of ``v[rows]`` against the twin's velocity ``reference`` of those rows, relative to its largest row."""
    return float(np.max(np.abs(v[rows] - reference)) / max(float(np.max(np.linalg.norm(reference, axis=1))), 1e-300))


#: rounds of the attention table's rotation (:func:`_interleaved`), and the least time of each callable in a round
ATTENTION_ROUNDS = 3
ROUND_TIME = 0.05


def bench_attention(
    sizes: Sequence[int] = (1024, 4096, 16384),
    dims: Sequence[int] = (3, 64),
    *,
    numba_max_work: float = 4096**2 * 64,
    twin_max_work: float = 16384**2 * 64,
    beta: float = 4.0,
) -> list[dict[str, Any]]:
    """Softmax-velocity throughput rows (see the module docstring); each kernel checked against the twin first."""
    rows = []
    for n in sizes:
        for d in dims:
            x = sample_uniform(n, d, seed=0)
            heads = bench_head(d)
            pairs = float(n) * n
            row: dict[str, Any] = {"kernel": "softmax velocity", "n": n, "d": d, "beta": beta,
                                   "head": "B orthogonal, not symmetric; V = I", "threads": num_threads()}
            rows_checked = np.unique(np.linspace(0, n - 1, min(n, CHECKED_ROWS)).astype(np.intp))
            with one_blas_thread():
                reference = velocity_numpy(x, heads, beta=beta, rows=rows_checked)

            disagree: list[str] = []  # a kernel past BENCH_TOLERANCE is not timed, its columns NaN (the whole bench
            # had stopped on a RuntimeError, a traceback, every table lost)

            def check(key: str, name: str, v: np.ndarray, precision: str = "float64") -> bool:
                row[key] = error = _checked(v, reference, rows_checked)
                if not error <= BENCH_TOLERANCE[precision]:
                    disagree.append(f"{name} ({error:.2e})")
                    return False
                return True

            blas_ok = check("kernel_error", "BLAS", velocity_blas(x, heads, beta=beta))
            f32_ok = check("float32_error", "BLAS float32", velocity_blas(x, heads, beta=beta, precision="float32"), "float32")
            if d <= FUSED_MAX_D:
                fused_ok = check("fused_error", "fused", velocity_fused(x, heads, beta=beta))
                fused32_ok = check("fused32_error", "fused float32", velocity_fused32(x, heads, beta=beta), "float32")
            numba_ok = pairs * d <= numba_max_work and check("numba_error", "numba", velocity_numba(x, heads, beta=beta))
            def twin() -> None:
                with one_blas_thread():  # the twin is one thread, BLAS included
                    velocity_numpy(x, heads, beta=beta)

            fused = d <= FUSED_MAX_D
            candidates = {"blas": (blas_ok, lambda: velocity_blas(x, heads, beta=beta)),
                          "f32": (f32_ok, lambda: velocity_blas(x, heads, beta=beta, precision="float32")),
                          "roof": (True, exp_roofline(n)),
                          "fused": (fused and fused_ok, lambda: velocity_fused(x, heads, beta=beta)),
                          "fused32": (fused and fused32_ok, lambda: velocity_fused32(x, heads, beta=beta)),
                          "twin": (pairs * d <= twin_max_work, twin),
                          "numba": (numba_ok, lambda: velocity_numba(x, heads, beta=beta))}
            # in rotating rounds; a kernel that disagrees is not timed (NaN)
            times = _interleaved({name: fn for name, (timed, fn) in candidates.items() if timed}, ATTENTION_ROUNDS,
                                 min_time=ROUND_TIME)
            t_kernel, t_f32, t_roof = (times.get(name, math.nan) for name in ("blas", "f32", "roof"))
            row.update(
                kernel_s=t_kernel,
                kernel_pairs_per_s=pairs / t_kernel,
                float32_s=t_f32,
                float32_pairs_per_s=pairs / t_f32,
                roofline_s=t_roof,
                roofline_pairs_per_s=pairs / t_roof,
                kernel_over_roofline=t_kernel / t_roof,
                float32_over_roofline=t_f32 / t_roof,
                peak_mib=_blas_peak(lambda: velocity_blas(x, heads, beta=beta)) / 2**20 if blas_ok else math.nan,
                nxn_mib=pairs * 8 / 2**20,
            )
            if disagree:
                row["not_timed"] = "disagrees with the NumPy twin: " + ", ".join(disagree)
            if fused:  # the default ("auto") kernel for float64 softmax at small d
                t_fused, t_fused32 = times.get("fused", math.nan), times.get("fused32", math.nan)
                row.update(fused_s=t_fused, fused_pairs_per_s=pairs / t_fused, fused_over_roofline=t_fused / t_roof,
                           fused_over_kernel=t_fused / t_kernel, fused32_s=t_fused32, fused32_pairs_per_s=pairs / t_fused32,
                           fused64_over_fused32=t_fused / t_fused32)
            if pairs * d <= twin_max_work:
                t_twin = times["twin"]
                row.update(twin_s=t_twin, twin_pairs_per_s=pairs / t_twin, speedup_vs_twin=t_twin / t_kernel, float32_speedup_vs_twin=t_twin / t_f32)
                if "fused_s" in row:
                    row["fused_speedup_vs_twin"] = t_twin / row["fused_s"]
            if pairs * d <= numba_max_work:
                t_numba = times.get("numba", math.nan)
                row.update(numba_s=t_numba, numba_pairs_per_s=pairs / t_numba, numba_over_kernel=t_numba / t_kernel)
            rows.append(row)
    return rows


def _once(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


#: the late density of :func:`bench_grid`: two vMF clusters (κ = 300, width about 0.06 rad, as at
#: the minimum of W2 to Π♯ρ₀ for β = 256) at ±e1 over a uniform floor of 1e-9 of the mass
LATE_CLUSTERS: tuple[dict[str, Any], ...] = (
    {"weight": 0.5, "kind": "vmf", "mean": [1.0, 0.0, 0.0], "kappa": 300.0},
    {"weight": 0.5, "kind": "vmf", "mean": [-1.0, 0.0, 0.0], "kappa": 300.0},
    {"weight": 1e-9, "kind": "uniform"},
)


def bench_grid(
    cells_list: Sequence[int] = (2000, 8000, 32000),
    *,
    beta: float = 4.0,
    attention: str = "softmax",
    backend: str = "auto",
    method: str = "ssprk3",
    family: str = "fibonacci",
    repeats: int = 1,
    order: int = 2,
    tolerance: float = 1e-12,
    density: str = "vmf",
) -> list[dict[str, Any]]:
    r"""Time the grid solver's velocity quadrature and one SSP step, and their peak memory.

    For each mesh size: one identity head, a density (``density``: ``"vmf"``, a vMF(κ=4)
    density, the start of a run; ``"clusters"``, :data:`LATE_CLUSTERS`, two tight clusters
    at :math:`\pm e_1` over a floor :math:`10^{-9}` of uniform mass, masses over some ten
    decades as late in a clustering run at large β), the scheme of ``order``
    (:class:`~meanfield.solvers.grid.GridStepper`), the harmonic and local kernels at
    ``tolerance`` where ``backend="auto"`` picks them; the best of
    ``repeats`` timings of ``model.velocity`` on the cells (``velocity_s``) and
    of one step at the CFL size (``step_s``, ``stages`` velocity evaluations
    plus the fluxes), ``cell_steps_per_s = N / step_s``, and the peak of
    :mod:`tracemalloc` over one step (``peak_bytes``, ``bytes_per_cell``; NumPy's and numba's
    allocations, not the C++ buffers of ducc0's transforms).

    Returns
    -------
    list of dict
        Keys ``cells``, ``edges``, ``beta``, ``order``, ``tolerance``, ``backend``, ``density``, ``mesh_s``,
        ``velocity_s``, ``step_s``, ``cell_steps_per_s``, ``peak_bytes``, ``bytes_per_cell``.
    """
    from meanfield.geometry.mesh import initial_mass, mesh as build_mesh, mesh_from_points
    from meanfield.model import Model
    from meanfield.solvers.grid import GridStepper

    if density not in ("vmf", "clusters"):
        raise ValueError(f"unknown density {density!r}; choose 'vmf' or 'clusters'")
    model = Model(d=3, beta=beta, attention=attention, backend=backend, tolerance=tolerance)
    rows = []
    for cells in cells_list:
        started = time.perf_counter()
        msh = build_mesh(int(cells), family)
        mesh_s = time.perf_counter() - started
        if family == "fibonacci":  # time an uncached build too
            started = time.perf_counter()
            mesh_from_points(msh.points, family=family)
            mesh_s = time.perf_counter() - started
        mass = initial_mass(msh, "mixture", components=LATE_CLUSTERS) if density == "clusters" else initial_mass(msh, "vmf", kappa=4.0)
        stepper = GridStepper(model, msh, method=method, backend=backend, order=order)
        stepper.step(mass, 0.0)  # warm-up (numba compilation, thread pool, reconstruction)
        vel_s = min(_once(lambda: stepper.velocity(mass, 0.0)) for _ in range(max(1, repeats)))
        step_s = min(_once(lambda: stepper.step(mass, 0.0)) for _ in range(max(1, repeats)))
        peak = peak_memory(lambda: stepper.step(mass, 0.0))  # (a caller's own trace kept, its allocations not counted)
        rows.append({
            "cells": msh.N,
            "edges": msh.E,
            "beta": float(beta),
            "order": order,
            "tolerance": float(tolerance),
            "backend": backend,
            "density": density,
            "mesh_s": mesh_s,
            "velocity_s": vel_s,
            "step_s": step_s,
            "cell_steps_per_s": msh.N / step_s,
            "peak_bytes": int(peak),
            "bytes_per_cell": peak / msh.N,
        })
    return rows


def _interleaved(funcs: dict[str, Callable[[], Any]], rounds: int, *, min_time: float = 0.0) -> dict[str, float]:
    """Best wall time of each callable over ``rounds`` rounds that call them in turn (after a warm-up): on a shared
    machine the load drifts, and rotating keeps the ratios fair (the attention table's kernels, timed one after
    another, had read the same roofline 0.0066 s and 0.0034 s in one run, ``blas/roof`` 0.76).  With ``min_time``
    a round takes the mean of back-to-back calls for at least that long (:func:`mean_call_time`), else one call."""
    for fn in funcs.values():
        fn()
    best = {name: np.inf for name in funcs}
    for _ in range(max(1, rounds)):
        for name, fn in funcs.items():
            best[name] = min(best[name], mean_call_time(fn, min_time=min_time) if min_time > 0 else _once(fn))
    return best


def bench_w2_overhead(n: int = 2000, *, d: int = 3, rounds: int = 5, cost: str = "geodesic") -> dict[str, Any]:
    r"""Exact :func:`meanfield.w2` between two uniform clouds against the bare ``ot.emd2`` it wraps.

    .. math::

        \text{overhead} = \frac{t(\texttt{meanfield.w2}(x, y))}{t(\texttt{ot.emd2}(a, b, C))} ,
        \qquad C_{ij} = c(x_i, y_j)^2 ,

    both measured in the same process, in rotating rounds (best of ``rounds``), on the same
    cost matrix; ``w2`` also validates, merges duplicates and builds ``C``
    (``cost_s``: that alone).  Target: at most 1.10.

    Returns
    -------
    dict
        ``name``, ``n``, ``d``, ``w2_s``, ``emd2_s``, ``cost_s``, ``w2_over_emd2``, ``value``.
    """
    import ot

    from meanfield.analysis.transport import cost_matrix, w2

    x, y = sample_uniform(n, d, seed=2), sample_uniform(n, d, seed=3)
    a = np.full(n, 1.0 / n)
    C = cost_matrix(x, y, cost=cost)
    with one_blas_thread():
        best = _interleaved({
            "w2": lambda: w2(x, y, cost=cost),
            "emd2": lambda: ot.emd2(a, a, C, numItermax=max(100_000, 100 * n * n)),
            "cost": lambda: cost_matrix(x, y, cost=cost),
        }, rounds)
    return {"name": "w2_over_emd2", "n": n, "d": d, "w2_s": best["w2"], "emd2_s": best["emd2"],
            "cost_s": best["cost"], "w2_over_emd2": best["w2"] / best["emd2"],
            "value": float(w2(x, y, cost=cost))}


def bench_time_split(n: int = 4096, d: int = 64, *, beta: float = 1.0, rounds: int = 3) -> dict[str, Any]:
    r"""Where a dense softmax call spends its time at large ``d``: the score GEMM, the ``exp``, the value GEMM.

    .. math::

        S = \beta\,(X_{\mathrm{rows}}B)X^\top,\qquad P = e^{S-m},\qquad V_{\mathrm{rows}} = P\,[XV^\top\,|\,\mathbf 1]

    timed part by part over the row blocks of the BLAS kernel's row-block path (one thread, BLAS
    held to one thread; best of ``rounds``), next to the whole :func:`velocity_blas` call
    (``kernel_s``, on the kernels' threads: on an AVX-512 processor at ``d`` ≤
    :data:`~meanfield.kernels.flash.FLASH_MAX_D64` the flash tiles of :mod:`meanfield.kernels.flash`,
    elsewhere, for this symmetric :math:`B = I`, the symmetric tile path; both do about half of the
    first two parts).
    The parts' shares say which of them a faster large-``d`` path must shorten.

    Returns
    -------
    dict
        ``name``, ``n``, ``d``, ``score_gemm_s``, ``exp_s`` (the kernel's ``exp``,
        :func:`~meanfield.kernels.blas.exp_scores`), ``exp_path`` (``"numpy"`` where that is NumPy's
        vectorised ``exp``, else ``"numba"``), ``value_gemm_s``, ``parts_s`` (the sum of the three parts),
        ``kernel_s``, ``numba_exp_s`` and ``numpy_exp_s`` (:func:`~meanfield.kernels.blas.exp_block64` and
        ``np.exp`` on the same blocks, for comparison) and the shares ``score_share``, ``exp_share``,
        ``value_share`` of ``parts_s``.
    """
    from meanfield.kernels.blas import NUMPY_EXP64, exp_block64, exp_scores
    from meanfield.kernels.inputs import block_rows

    x = sample_uniform(n, d, seed=0)
    heads = HeadStack(B=np.eye(d)[None], V=np.eye(d)[None])
    block = block_rows(n)
    xt = np.ascontiguousarray(x.T)
    values = np.hstack([x @ heads.V[0].T, np.ones((n, 1))])
    z = np.empty((block, n))
    parts = {"score": np.inf, "exp": np.inf, "value": np.inf}
    numpy_exp = numba_exp = np.inf
    with one_blas_thread():
        for _ in range(max(1, rounds)):
            spent = dict.fromkeys(parts, 0.0)
            spent_numpy = spent_numba = 0.0
            for start in range(0, n, block):
                rows = slice(start, min(n, start + block))
                buf = z[: rows.stop - rows.start]
                t0 = time.perf_counter()
                np.matmul(beta * (x[rows] @ heads.B[0]), xt, out=buf)
                t1 = time.perf_counter()
                buf -= beta
                scores = buf.copy()
                exp_times = []
                for exp in (lambda block_: np.exp(block_, out=block_), lambda block_: exp_block64(block_, -1), exp_scores):  # the kernel's own exp last
                    np.copyto(buf, scores)  # each exp on the same scores, fresh in the cache
                    t2 = time.perf_counter()
                    exp(buf)
                    exp_times.append(time.perf_counter() - t2)
                t5 = time.perf_counter()
                buf @ values
                t6 = time.perf_counter()
                spent["score"] += t1 - t0
                spent_numpy += exp_times[0]
                spent_numba += exp_times[1]
                spent["exp"] += exp_times[2]
                spent["value"] += t6 - t5
            parts = {k: min(parts[k], spent[k]) for k in parts}
            numpy_exp = min(numpy_exp, spent_numpy)
            numba_exp = min(numba_exp, spent_numba)
        kernel = min(_once(lambda: velocity_blas(x, heads, beta=beta)) for _ in range(max(1, rounds)))
    total = sum(parts.values())
    return {"name": "time_split", "n": n, "d": d, "score_gemm_s": parts["score"], "exp_s": parts["exp"],
            "exp_path": "numpy" if NUMPY_EXP64 else "numba", "numba_exp_s": numba_exp,
            "value_gemm_s": parts["value"], "parts_s": total, "kernel_s": kernel, "numpy_exp_s": numpy_exp,
            "score_share": parts["score"] / total, "exp_share": parts["exp"] / total, "value_share": parts["value"] / total}


def bench_run_step(n: int = 4096, *, d: int = 3, beta: float = 4.0, dt: float = 0.01, save_every: float = 0.1,
                   rounds: int = 3) -> dict[str, Any]:
    r"""End-to-end cost of a particle RK4 step with the default trackers against the bare kernel.

    .. math::

        \text{overhead} = \frac{t(\text{advance one save interval}) + t(\text{trackers on the frame})}
        {(\Delta t_{\mathrm{save}}/\Delta t)\cdot s\cdot t(\texttt{model.velocity})},
        \qquad s = 4 \text{ stages},

    with the trackers that :class:`~meanfield.solvers.particle.ParticleSolver` installs by default
    (finite values, sphere, energy, largest speed) and the run's thread policy (BLAS on one
    thread, :func:`~meanfield.kernels.jit.one_blas_thread`); rotating rounds, best of ``rounds``.
    ``tracker_calls`` is the trackers' cost per frame in kernel calls.  Target: at most 1.15.

    Returns
    -------
    dict
        ``name``, ``n``, ``d``, ``steps_per_frame``, ``kernel_s``, ``frame_s``, ``trackers_s``,
        ``step_over_kernel_stages``, ``tracker_calls``.
    """
    from meanfield.model import Model
    from meanfield.solvers.particle import ParticleSolver
    from meanfield.solvers.problem import Problem

    model = Model(d=d, beta=beta)
    x0 = sample_uniform(n, d, seed=0)
    setup = ParticleSolver(method="rk4", dt=dt).setup(Problem(model, x0))
    stepper, trackers = setup.stepper, list(setup.trackers)
    steps = max(1, int(np.ceil(save_every / dt - 1e-9)))
    frame: dict[str, np.ndarray] = {}

    def advance() -> None:
        frame["x"] = stepper.advance(x0, 0.0, save_every)

    def track() -> None:
        for tracker in trackers:
            tracker(save_every, frame["x"])

    with one_blas_thread():
        best = _interleaved({"kernel": lambda: model.velocity(x0, 0.0), "advance": advance, "trackers": track}, rounds)
    stages = 4
    frame_s = best["advance"] + best["trackers"]
    return {"name": "run_step_over_kernel", "n": n, "d": d, "steps_per_frame": steps, "kernel_s": best["kernel"],
            "frame_s": frame_s, "trackers_s": best["trackers"],
            "step_over_kernel_stages": frame_s / (steps * stages * best["kernel"]),
            "tracker_calls": best["trackers"] / best["kernel"]}


def run_benchmarks(*, quick: bool = False) -> dict[str, list[dict[str, Any]]]:
    """All benchmark tables: attention, the sphere kernels, grid steps, optimal transport, a run step.

    ``transport`` ends with :func:`bench_w2_overhead` (``meanfield.w2`` over the bare ``ot.emd2``
    at n = 2000) and ``run`` holds :func:`bench_run_step` (a particle RK4 step with the default
    trackers over the bare kernel × 4 stages at n = 4096).

    The ``grid`` table times the second-order scheme at β = 4 on growing meshes, and at
    β = 256 on 131 072 cells (16 384 with ``quick``) with the harmonic kernel's default
    tolerance 1e-12 and with 1e-8, the looser one being enough for a grid whose
    discretisation error is ~1e-4 and keeping rows of densities down to 1e-7 of the
    largest on the transform path; then the late clustered density (:data:`LATE_CLUSTERS`)
    at β = 256 and 1024 on 32 768 cells (8192 with ``quick``), tolerance 1e-8.  The ``clusters``
    table (:func:`~meanfield.solvers.bench_sphere.bench_clusters`) times the terminal phase at β = 1024,
    where the local kernel sums compact clusters through their Chebyshev proxies.
    """
    sizes = (1024, 4096) if quick else (1024, 4096, 16384)
    from meanfield.solvers.bench_sphere import bench_clusters, bench_sphere
    from meanfield.solvers.experiments.concentration import bench_concentration

    tables = {"attention": bench_attention(sizes)}
    tables["sphere"] = bench_sphere(quick=quick)
    tables["clusters"] = bench_clusters(quick=quick)
    grid = bench_grid(cells_list=(2000,) if quick else (2000, 8000, 32000))
    for tolerance in (1e-12, 1e-8):
        grid += bench_grid(cells_list=(16384,) if quick else (131072,), beta=256.0, tolerance=tolerance)
    for beta in (256.0, 1024.0):  # late in a run: most cells nearly empty, the exact local rows
        grid += bench_grid(cells_list=(8192,) if quick else (32768,), beta=beta, tolerance=1e-8, density="clusters")
    tables["grid"] = grid
    transport = bench_concentration(quick=quick)
    tables["transport"] = list(transport["rows"]) + [{"name": "tracking", **transport["tracking"]}]
    tables["transport"].append(bench_w2_overhead(200 if quick else 2000))
    tables["run"] = [bench_run_step(1024 if quick else 4096)]
    tables["run"] += [bench_run_step(n, d=d) for n, d in (((256, 64),) if quick else ((1024, 64), (1024, 384)))]  # the BLAS kernel
    tables["large_d"] = [bench_time_split(1024 if quick else 4096, d) for d in (32, 64)]
    return tables
