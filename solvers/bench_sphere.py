r"""Speed and accuracy of the sphere kernels against the dense fused kernel (d = 3).

For each ``(n, beta)`` with ``n = N`` tokens uniform on :math:`S^2` (one head with a
general, non-symmetric and non-orthogonal score matrix, singular values 1.19, 1.03,
0.93) :func:`bench_sphere` reports

* the seconds of :func:`meanfield.kernels.harmonic.velocity_harmonic`,
  :func:`meanfield.kernels.local.velocity_local` and the dense fused kernel
  :func:`meanfield.kernels.fused.velocity_fused` (softmax);
* the speed-ups ``dense / harmonic`` and ``dense / local``;
* the largest error of the fast kernels on sampled rows, relative to ``max |v|`` there,
  against the exact dense sums (row maxima exact, NumPy);
* their peak memory (:mod:`tracemalloc`) and which method
  :func:`meanfield.kernels.harmonic.choose_sphere_method` picks.

Where a dense or local evaluation would take more than ``max_seconds``, it is timed on
``k`` rows only and scaled by ``n / k`` (the flag ``*_extrapolated`` says so): the dense
rows (``k = dense_rows``) go through the same numba loops as the fused kernel (score →
vectorised ``exp`` → accumulate over column chunks); the local rows go through ``rows=``,
``k`` random rows with ``k`` as large as half of ``max_seconds`` allows (at least 2048),
since the local kernel shares candidate lists among neighbouring rows and a thin sample
would be slower per row than the whole.  The non-quick run adds one row for
:math:`n = 2^{20}` at β = 64 (harmonic kernel, dense extrapolated, local omitted).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import prange

from meanfield.geometry.sphere import sample_uniform
from meanfield.heads import HeadStack
from meanfield.kernels.fused import CHUNK, _accumulate3, _score_exp3, velocity_fused
from meanfield.kernels.harmonic import choose_sphere_method, estimate_sphere_seconds, velocity_harmonic
from meanfield.kernels.jit import kernel_threads, num_threads, pjit
from meanfield.kernels.local import SphereSources, combine_head_sums, dense_head_sums, velocity_local
from meanfield.solvers.timing import best_of, peak_memory

__all__ = ["bench_sphere", "bench_clusters", "cluster_tokens", "bench_heads", "dense_rows_seconds", "format_table"]

#: the score matrix of the benchmark: general (non-symmetric, non-orthogonal), well conditioned
BENCH_B = np.array([[1.1, 0.3, -0.2], [-0.1, 0.9, 0.25], [0.15, -0.3, 1.0]])
#: its value matrix
BENCH_V = np.array([[0.9, 0.2, 0.1], [-0.3, 1.0, 0.2], [0.1, 0.1, 0.8]])


def bench_heads() -> HeadStack:
    """The one head of the benchmark."""
    return HeadStack(B=BENCH_B[None], V=BENCH_V[None])


@pjit
def _fused_rows(rows, x, xt, wx, B, V, beta, xmax, chunk):  # pragma: no cover - compiled
    """The fused kernel's loops (d = 3, one head) for the given rows only: the dense cost per row."""
    n = x.shape[0]
    out = np.zeros((rows.shape[0], 3))
    for t in prange(rows.shape[0]):
        i = rows[t]
        e = np.empty(chunk)
        acc = np.zeros(4)
        q0 = beta * (x[i, 0] * B[0, 0] + x[i, 1] * B[1, 0] + x[i, 2] * B[2, 0])
        q1 = beta * (x[i, 0] * B[0, 1] + x[i, 1] * B[1, 1] + x[i, 2] * B[2, 1])
        q2 = beta * (x[i, 0] * B[0, 2] + x[i, 1] * B[1, 2] + x[i, 2] * B[2, 2])
        c = np.sqrt(q0 * q0 + q1 * q1 + q2 * q2) * xmax
        for j0 in range(0, n, chunk):
            m = min(chunk, n - j0)
            j1 = j0 + m
            _score_exp3(q0, q1, q2, c, xt[0, j0:j1], xt[1, j0:j1], xt[2, j0:j1], m, e)
            _accumulate3(e, wx[0, j0:j1], wx[1, j0:j1], wx[2, j0:j1], wx[3, j0:j1], m, acc)
        for k in range(3):
            out[t, k] = (V[k, 0] * acc[0] + V[k, 1] * acc[1] + V[k, 2] * acc[2]) / acc[3]
    return out


def dense_rows_seconds(x: np.ndarray, heads: HeadStack, beta: float, rows: np.ndarray) -> float:
    """Seconds of the fused kernel's loops for ``rows`` (one head, uniform masses)."""
    n = x.shape[0]
    xt = np.ascontiguousarray(x.T)
    wx = np.ascontiguousarray(np.vstack([x.T / n, np.full((1, n), 1.0 / n)]))
    args = (np.ascontiguousarray(rows, dtype=np.int64), x, xt, wx, heads.B[0], heads.V[0], float(beta), 1.0, CHUNK)
    with kernel_threads(float(n) * n):
        _fused_rows(args[0][:2], *args[1:])  # compile / warm
        started = time.perf_counter()
        _fused_rows(*args)
        return time.perf_counter() - started


def bench_sphere(
    *,
    quick: bool = False,
    sizes: Sequence[int] | None = None,
    betas: Sequence[float] = (4.0, 64.0, 1024.0),
    max_seconds: float = 10.0,
    sample_rows: int = 256,
    dense_rows: int = 2048,
    repeat: int = 2,
    memory: bool = True,
    million: bool | None = None,
) -> list[dict[str, Any]]:
    """Rows of the sphere benchmark (see the module docstring).

    Parameters
    ----------
    quick : bool
        ``n`` in (4096, 16384) instead of (16384, 65536, 262144).
    sizes, betas : sequences, optional
        Override the grid.
    max_seconds : float
        Evaluations predicted to take longer are timed on ``sample_rows`` rows and scaled.
    sample_rows : int
        Rows for the errors.
    dense_rows : int
        Rows for the extrapolated dense timings (also timed where the whole dense run is,
        as ``dense_rows_s``, to check the extrapolation).
    repeat : int
        Best of this many timed calls (after one warm-up call per kernel).
    memory : bool
        Also measure the peak memory of the fast kernels (one more call each).
    million : bool, optional
        Add the row n = 2^20, β = 64 (harmonic only); default: when not ``quick``.

    Returns
    -------
    list of dict
        Keys: ``n, beta, threads, choice, harmonic_s, local_s, dense_s,
        local_extrapolated, dense_extrapolated, dense_over_harmonic, dense_over_local,
        harmonic_error, local_error, harmonic_peak_mib, local_peak_mib`` (the last only
        where local ran whole), ``dense_rows_s`` where the dense run was whole.
    """
    sizes = tuple(sizes) if sizes is not None else ((4096, 16384) if quick else (16384, 65536, 262144))
    heads = bench_heads()
    warm = sample_uniform(2048, 3, seed=1)
    for beta in betas:  # compile and warm every kernel outside the timings
        velocity_harmonic(warm, heads, beta=beta)
        velocity_local(warm, heads, beta=beta)
    velocity_fused(warm, heads, beta=4.0)
    rng = np.random.default_rng(0)
    rows_out = []
    dense_rate = None  # seconds per pair of the dense kernel, measured on the first size
    for n in sizes:
        x = sample_uniform(n, 3, seed=0)
        src = SphereSources(x, np.full(n, 1.0 / n))
        rows = np.sort(rng.choice(n, size=min(sample_rows, n), replace=False))
        for beta in betas:
            row: dict[str, Any] = {"n": n, "beta": float(beta), "threads": num_threads(), "choice": choose_sphere_method(n, beta, heads)}
            ref = combine_head_sums(heads, "softmax", [dense_head_sums(x[rows], heads.B[0], beta, src)])
            scale = float(np.abs(ref).max())
            t_h, v_h = best_of(lambda: velocity_harmonic(x, heads, beta=beta), repeat)
            row["harmonic_s"] = t_h
            row["harmonic_error"] = float(np.abs(v_h[rows] - ref).max() / scale)
            # local: whole if affordable (cost model), else k random rows × n / k, with k large enough
            # that the rows fill the blocks as the whole run would (the per-row cost depends on it)
            v_l = velocity_local(x, heads, beta=beta, rows=rows)
            row["local_error"] = float(np.abs(v_l - ref).max() / scale)
            predicted = estimate_sphere_seconds(n, beta, heads)["local"]
            if predicted <= max_seconds:
                row["local_s"], _ = best_of(lambda: velocity_local(x, heads, beta=beta), repeat)
                row["local_extrapolated"] = False
            else:
                k = int(np.clip(n * 0.5 * max_seconds / predicted, min(2048, n), n))
                some = np.sort(rng.choice(n, size=k, replace=False))
                t_some, _ = best_of(lambda: velocity_local(x, heads, beta=beta, rows=some), 1)
                row["local_s"] = t_some * n / k
                row["local_extrapolated"] = True
            # dense fused kernel: whole if it fits in max_seconds, else sampled rows × n / k
            predicted = dense_rate * n * n if dense_rate is not None else 0.0
            if predicted <= max_seconds:
                tries = repeat if predicted * repeat <= max_seconds else 1  # as many as the fast kernels where affordable
                row["dense_s"], _ = best_of(lambda: velocity_fused(x, heads, beta=beta), tries)
                row["dense_extrapolated"] = False
                dense_rate = row["dense_s"] / (float(n) * n) if dense_rate is None else dense_rate
            else:
                some = np.sort(rng.choice(n, size=min(n, dense_rows), replace=False))
                row["dense_s"] = dense_rows_seconds(x, heads, beta, some) * n / some.size
                row["dense_extrapolated"] = True
            if not row["dense_extrapolated"] and n > dense_rows:  # how good the extrapolation is
                some = np.sort(rng.choice(n, size=dense_rows, replace=False))
                row["dense_rows_s"] = dense_rows_seconds(x, heads, beta, some) * n / some.size
            row["dense_over_harmonic"] = row["dense_s"] / row["harmonic_s"]
            row["dense_over_local"] = row["dense_s"] / row["local_s"]
            if memory:
                row["harmonic_peak_mib"] = peak_memory(lambda: velocity_harmonic(x, heads, beta=beta)) / 2**20
                if not row["local_extrapolated"]:
                    row["local_peak_mib"] = peak_memory(lambda: velocity_local(x, heads, beta=beta)) / 2**20
            rows_out.append(row)
    if million if million is not None else not quick:
        rows_out.append(_million(heads, rng, sample_rows, dense_rows, repeat, memory))
    return rows_out


def _million(heads: HeadStack, rng: np.random.Generator, sample_rows: int, dense_rows: int, repeat: int, memory: bool) -> dict[str, Any]:
    """One velocity of 2^20 particles at β = 64 by the harmonic kernel."""
    n, beta = 1 << 20, 64.0
    x = sample_uniform(n, 3, seed=0)
    src = SphereSources(x, np.full(n, 1.0 / n))
    rows = np.sort(rng.choice(n, size=sample_rows, replace=False))
    ref = combine_head_sums(heads, "softmax", [dense_head_sums(x[rows], heads.B[0], beta, src)])
    row: dict[str, Any] = {"n": n, "beta": beta, "threads": num_threads(), "choice": choose_sphere_method(n, beta, heads)}
    row["harmonic_s"], v_h = best_of(lambda: velocity_harmonic(x, heads, beta=beta), repeat)
    row["harmonic_error"] = float(np.abs(v_h[rows] - ref).max() / np.abs(ref).max())
    some = np.sort(rng.choice(n, size=dense_rows, replace=False))
    row["dense_s"] = dense_rows_seconds(x, heads, beta, some) * n / some.size
    row["dense_extrapolated"] = True
    row["dense_over_harmonic"] = row["dense_s"] / row["harmonic_s"]
    if memory:
        row["harmonic_peak_mib"] = peak_memory(lambda: velocity_harmonic(x, heads, beta=beta)) / 2**20
    return row


#: the terminal-phase benchmark: two antipodal clusters of this radius around ±CLUSTER_CENTRE
CLUSTER_RADIUS = 5e-4
CLUSTER_CENTRE = (1.0, 0.0166, 0.0)
#: its head, that of data/concentration.toml (Q = I, so B = K): no mass lies near the direction of Bᵀx
CLUSTER_B = np.array([[1.25, -0.75, 0.0], [-0.375, 0.625, 0.0], [0.0, 0.0, 1.0]])
CLUSTER_V = np.array([[1.25, 0.75, 0.0], [0.75, 1.25, 0.0], [0.0, 0.0, 0.25]])


def cluster_tokens(n: int, *, radius: float = CLUSTER_RADIUS, seed: int = 0) -> np.ndarray:
    """``n`` tokens in two antipodal Gaussian clusters of r.m.s. radius ``radius`` (a β = 1024 run past its exit)."""
    rng = np.random.default_rng(seed)
    centre = np.asarray(CLUSTER_CENTRE) / np.linalg.norm(CLUSTER_CENTRE)
    half = centre + radius / np.sqrt(2.0) * rng.standard_normal((n // 2, 3))
    half /= np.linalg.norm(half, axis=1, keepdims=True)
    return np.concatenate([half, -half])


def bench_clusters(
    *,
    quick: bool = False,
    sizes: Sequence[int] | None = None,
    beta: float = 1024.0,
    tolerance: float = 1e-8,
    sample_rows: int = 256,
    point_rows: int = 2048,
    dense_rows: int = 1024,
    repeat: int = 2,
) -> list[dict[str, Any]]:
    r"""The terminal phase: the local kernel with and without the proxies of :mod:`meanfield.kernels.cluster_proxies`.

    Two antipodal clusters of :math:`n/2` tokens (:func:`cluster_tokens`) and the head of
    ``data/concentration.toml``, whose rows see no mass near :math:`B^\top x`: every row fails the
    harmonic kernel's certificate and goes to the local one, whose caps reach a whole cluster.
    Reported: ``auto_s`` (the ``auto`` backend, proxies on), ``local_s`` (the local kernel with
    proxies), ``points_s`` (the same without proxies, from ``point_rows`` random rows × n / k),
    ``dense_s`` (the fused kernel's loops on ``dense_rows`` rows × n / k), the speed-ups, the
    errors of ``auto`` and ``local`` on ``sample_rows`` rows relative to their own norms against the
    exact dense sums, the proxied points and nodes, and the peak memory of ``local``.
    """
    from meanfield.kernels.attention import attention_velocity

    sizes = tuple(sizes) if sizes is not None else ((16384,) if quick else (65536, 262144, 1048576))
    heads = HeadStack(B=CLUSTER_B[None], V=CLUSTER_V[None])
    rng = np.random.default_rng(1)
    warm = cluster_tokens(4096)
    velocity_local(warm, heads, beta=beta, tolerance=tolerance)
    velocity_local(warm, heads, beta=beta, tolerance=tolerance, cluster_proxies=False)
    out = []
    for n in sizes:
        x = cluster_tokens(n)
        src = SphereSources(x, np.full(n, 1.0 / n))
        proxies = src.proxies(beta * float(np.linalg.norm(CLUSTER_B, 2)), 0.25 * tolerance)
        rows = np.sort(rng.choice(n, size=min(sample_rows, n), replace=False))
        ref = combine_head_sums(heads, "softmax", [dense_head_sums(x[rows], heads.B[0], beta, src)])
        row: dict[str, Any] = {"n": n, "beta": float(beta), "tolerance": tolerance, "threads": num_threads(),
                               "proxied_points": proxies.points, "nodes": int(proxies.nodes.shape[1])}
        row["auto_s"], v_a = best_of(lambda: attention_velocity(x, heads, beta=beta, backend="auto", tolerance=tolerance), repeat)
        row["local_s"], v_l = best_of(lambda: velocity_local(x, heads, beta=beta, tolerance=tolerance), repeat)
        some = np.sort(rng.choice(n, size=min(n, point_rows), replace=False))
        t_some, _ = best_of(lambda: velocity_local(x, heads, beta=beta, tolerance=tolerance, rows=some, cluster_proxies=False), 1)
        row["points_s"] = t_some * n / some.size
        some = np.sort(rng.choice(n, size=min(n, dense_rows), replace=False))
        row["dense_s"] = dense_rows_seconds(x, heads, beta, some) * n / some.size
        row["points_over_local"] = row["points_s"] / row["local_s"]
        row["dense_over_auto"] = row["dense_s"] / row["auto_s"]
        norms = np.linalg.norm(ref, axis=1)
        row["auto_error"] = float(np.max(np.linalg.norm(v_a[rows] - ref, axis=1) / norms))
        row["local_error"] = float(np.max(np.linalg.norm(v_l[rows] - ref, axis=1) / norms))
        row["local_peak_mib"] = peak_memory(lambda: velocity_local(x, heads, beta=beta, tolerance=tolerance)) / 2**20
        out.append(row)
    return out


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a fixed-width text table."""
    head = f"{'n':>8} {'beta':>6} {'harm s':>8} {'local s':>9} {'dense s':>9} {'d/harm':>7} {'d/loc':>7} {'err harm':>9} {'err loc':>9} {'MiB h':>6} {'MiB l':>6}  choice"
    lines = [head]
    nan = float("nan")
    for r in rows:
        local = f"{r['local_s']:>8.3f}{'*' if r['local_extrapolated'] else ' '}" if "local_s" in r else f"{'-':>9}"
        lines.append(
            f"{r['n']:>8} {r['beta']:>6g} {r['harmonic_s']:>8.3f} {local}"
            f" {r['dense_s']:>8.2f}{'*' if r['dense_extrapolated'] else ' '} {r['dense_over_harmonic']:>7.1f} {r.get('dense_over_local', nan):>7.1f}"
            f" {r['harmonic_error']:>9.1e} {r.get('local_error', nan):>9.1e} {r.get('harmonic_peak_mib', nan):>6.1f}"
            f" {r.get('local_peak_mib', nan):>6.1f}  {r['choice']}"
        )
    lines.append("* extrapolated from sampled rows (time × n / k)")
    return "\n".join(lines)
