r"""``meanfield bench --compare``: the softmax velocity against torch and JAX, checked first, timed in rotating rounds.

.. math::

    v_i=\sum_j \frac{e^{\beta\langle x_i,x_j\rangle}}{\sum_k e^{\beta\langle x_i,x_k\rangle}}\,x_j
    \qquad(\text{one head, } Q=K=V=I)

For each case :math:`(n, d)` every implementation that is installed computes the same
velocity; each result is first compared with the NumPy twin
(:func:`meanfield.kernels.attention.velocity_numpy`, float64), relative to
:math:`\max_i\|v_i\|` (float64 must agree to ``F64_AGREEMENT``, float32 to
``F32_AGREEMENT``).  Only an implementation that agrees is timed.  The timings are
taken in rotating rounds (every implementation once per round, the best of the rounds
kept), and reported as ``t_other / t_meanfield`` in the same precision: above 1 means
meanfield is faster.  meanfield and torch run on the same number of threads
(``--threads``); the NumPy twin on one, by design; JAX on the threads XLA takes (all
cores unless ``XLA_FLAGS`` says otherwise, which the environment line reports).

``meanfield`` is what ``model.backend = "auto"`` runs: on :math:`S^2` with more than 1024
tokens that can be the harmonic kernel (in float64 in either precision); the rows ``meanfield dense (fused)``
give the dense fused kernels as well (float64, and the float32 one that ``model.precision = "float32"``
runs with ``model.backend = "fused"``), for a like-for-like comparison.  Above ``d = 8`` the BLAS
kernel takes its symmetric path for :math:`B = I` (half the score GEMM and of the ``exp``);
the row ``meanfield, B not symmetric`` times the same velocity with :math:`B` a random
rotation, which costs the other implementations what :math:`B = I` costs them (its
``t_other / t_meanfield`` is its own time over meanfield's :math:`B = I` time).

The alternatives, when importable (an optional extra, never a dependency):

* **torch**: ``matmul + softmax`` (one ``n × n`` score matrix) and
  ``torch.nn.functional.scaled_dot_product_attention``, float64 and float32;
* **JAX**: a ``jit``-compiled ``lax.map`` over row blocks, float64 and float32.

The BLAS library NumPy runs on, and its kernel family (``threadpoolctl``), are reported
with the table: the dense float64 path at large ``d`` depends on it.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from meanfield.geometry.sphere import sample_uniform
from meanfield.heads import HeadStack
from meanfield.kernels.attention import FUSED_MAX_D, attention_velocity, velocity_numpy
from meanfield.kernels.fused import velocity_fused
from meanfield.kernels.fused32 import velocity_fused32
from meanfield.kernels.jit import num_threads, one_blas_thread
from meanfield.solvers.bench import BENCH_TOLERANCE, bench_head
from meanfield.solvers.timing import mean_call_time

__all__ = ["COMPARE_CASES", "F64_AGREEMENT", "F32_AGREEMENT", "blas_info", "available_frameworks", "compare_frameworks", "compare_environment", "format_comparison"]

#: the cases of the comparison table, (n, d)
COMPARE_CASES: tuple[tuple[int, int], ...] = ((4096, 3), (16384, 3), (4096, 64), (1024, 64))
#: agreement with the float64 NumPy twin (relative to max |v|) required before timing
F64_AGREEMENT = BENCH_TOLERANCE["float64"]
F32_AGREEMENT = 1e-4
#: rows per block of the JAX implementation
JAX_BLOCK = 512


def blas_info() -> list[dict[str, Any]]:
    """The BLAS libraries loaded in this process, with their kernel family and threads (``threadpoolctl``)."""
    from threadpoolctl import threadpool_info

    return [
        {key: entry.get(key) for key in ("internal_api", "version", "architecture", "num_threads", "filepath")}
        for entry in threadpool_info()
        if entry.get("user_api") == "blas"
    ]


def available_frameworks() -> list[str]:
    """The optional frameworks importable here, among ``torch`` and ``jax``: installed and imported without an error (an
    installed one that failed to import had stopped ``bench --compare`` with a traceback; it is left out with a
    warning naming the error)."""
    found = []
    for name in ("torch", "jax"):
        if importlib.util.find_spec(name) is None:
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure of a third-party import: that framework is not compared
            warnings.warn(f"{name} is installed but does not import ({type(exc).__name__}: {exc}); it is not compared",
                          RuntimeWarning, stacklevel=2)
            continue
        found.append(name)
    return found


def _ours(x: np.ndarray, heads: HeadStack, beta: float, precision: str) -> Callable[[], np.ndarray]:
    return lambda: attention_velocity(x, heads, beta=beta, kind="softmax", backend="auto", precision=precision)


def _torch_impls(x: np.ndarray, beta: float, threads: int) -> dict[tuple[str, str], Callable[[], np.ndarray]]:
    import torch

    torch.set_num_threads(threads)
    impls: dict[tuple[str, str], Callable[[], np.ndarray]] = {}
    for precision, dtype in (("float64", torch.float64), ("float32", torch.float32)):
        t = torch.from_numpy(x.astype(precision))

        def matmul_softmax(t: Any = t) -> np.ndarray:
            with torch.no_grad():
                p = torch.softmax(beta * (t @ t.T), dim=1)
                return (p @ t).numpy()

        def sdpa(t: Any = t) -> np.ndarray:
            with torch.no_grad():
                q = t[None]
                return torch.nn.functional.scaled_dot_product_attention(q, q, q, scale=beta)[0].numpy()

        impls[("torch matmul+softmax", precision)] = matmul_softmax
        impls[("torch SDPA", precision)] = sdpa
    return impls


def _jax_impls(x: np.ndarray, beta: float) -> dict[tuple[str, str], Callable[[], np.ndarray]]:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    n, d = x.shape
    block = min(JAX_BLOCK, n)
    pad = (-n) % block
    impls: dict[tuple[str, str], Callable[[], np.ndarray]] = {}
    for precision in ("float64", "float32"):
        keys = jnp.asarray(x, dtype=precision)
        queries = jnp.asarray(np.concatenate([x, np.zeros((pad, d))]).reshape(-1, block, d), dtype=precision)

        @jax.jit
        def velocity(queries: Any, keys: Any) -> Any:
            def rows(q: Any) -> Any:
                s = beta * (q @ keys.T)
                p = jnp.exp(s - s.max(axis=1, keepdims=True))
                return (p @ keys) / p.sum(axis=1, keepdims=True)

            return jax.lax.map(rows, queries).reshape(-1, d)

        def run(queries: Any = queries, keys: Any = keys, velocity: Any = velocity) -> np.ndarray:
            return np.asarray(velocity(queries, keys).block_until_ready())[:n]

        impls[("JAX jit row blocks", precision)] = run
    return impls


def compare_frameworks(
    cases: Sequence[tuple[int, int]] = COMPARE_CASES,
    *,
    beta: float = 1.0,
    rounds: int = 3,
    min_time: float = 0.1,
    threads: int | None = None,
    frameworks: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Check, then time, the softmax velocity of meanfield and of the installed frameworks.

    Parameters
    ----------
    cases : sequence of (n, d)
        Token count and dimension of each case (uniform tokens on :math:`S^{d-1}`, seed 0).
    beta : float
        Inverse temperature.
    rounds : int
        Rotating rounds; the best time of each implementation over the rounds is kept.
    min_time : float
        Each timing repeats the call until this many seconds have passed (at most 20 calls).
    threads : int, optional
        Threads of every implementation (default: the kernels' thread count).
    frameworks : sequence of str, optional
        Among ``"torch"`` and ``"jax"`` (default: those installed).

    Returns
    -------
    list of dict
        One row per case and implementation: ``n``, ``d``, ``implementation``,
        ``precision``, ``error`` (max deviation from the float64 twin over
        :math:`\\max\\|v\\|`), ``agrees``, ``seconds`` and ``ratio``
        (``t_other / t_meanfield`` in the same precision; 1 for meanfield's own rows).
    """
    threads = threads or num_threads()
    frameworks = available_frameworks() if frameworks is None else list(frameworks)
    for name in frameworks:
        if name not in ("torch", "jax"):
            raise ValueError(f"unknown framework {name!r}; choose from 'torch', 'jax'")
        if importlib.util.find_spec(name) is None:
            raise ValueError(f"{name} is not installed (pip install {name}); it is an optional extra of the comparison")
    rows: list[dict[str, Any]] = []
    for n, d in cases:
        x = sample_uniform(int(n), int(d), seed=0)
        heads = HeadStack(B=np.eye(d)[None], V=np.eye(d)[None])
        with one_blas_thread():
            reference = velocity_numpy(x, heads, beta=beta)
        impls: dict[tuple[str, str], Callable[[], np.ndarray]] = {
            ("meanfield", "float64"): _ours(x, heads, beta, "float64"),
            ("meanfield", "float32"): _ours(x, heads, beta, "float32"),
        }
        if d <= FUSED_MAX_D:  # on S² "auto" may take the harmonic kernel: the dense ones too, for like-for-like rows
            impls[("meanfield dense (fused)", "float64")] = lambda: velocity_fused(x, heads, beta=beta)
            impls[("meanfield dense (fused)", "float32")] = lambda: velocity_fused32(x, heads, beta=beta)
        references: dict[tuple[str, str], np.ndarray] = {}
        if d > FUSED_MAX_D:  # the BLAS path uses the symmetry of B = I; a rotation B (not symmetric) costs the others the same
            general = bench_head(d)  # (the attention table's head: orthogonal, not symmetric)
            with one_blas_thread():
                general_reference = velocity_numpy(x, general, beta=beta)
            for precision in ("float64", "float32"):
                key = ("meanfield, B not symmetric", precision)
                impls[key] = _ours(x, general, beta, precision)
                references[key] = general_reference
        impls[("NumPy row blocks (one thread)", "float64")] = lambda: velocity_numpy(x, heads, beta=beta)
        if "torch" in frameworks:
            impls.update(_torch_impls(x, beta, threads))
        if "jax" in frameworks:
            impls.update(_jax_impls(x, beta))
        checked: dict[tuple[str, str], dict[str, Any]] = {}
        for (name, precision), fn in impls.items():
            expected = references.get((name, precision), reference)
            scale = float(np.max(np.linalg.norm(expected, axis=1)))
            result = _on_one_blas_thread(fn) if name.startswith("NumPy") else fn()  # checked as it is timed
            error = float(np.max(np.abs(np.asarray(result, dtype=np.float64) - expected))) / scale  # also the warm-up (jit)
            bound = F64_AGREEMENT if precision == "float64" else F32_AGREEMENT
            checked[(name, precision)] = {"n": int(n), "d": int(d), "implementation": name, "precision": precision,
                                          "error": error, "agrees": error <= bound, "seconds": np.inf}
        for _ in range(max(1, rounds)):
            for key, fn in impls.items():
                if not checked[key]["agrees"]:
                    continue
                if key[0].startswith("NumPy"):
                    with one_blas_thread():
                        seconds = mean_call_time(fn, min_time=min_time, max_calls=20)
                else:
                    seconds = mean_call_time(fn, min_time=min_time, max_calls=20)
                checked[key]["seconds"] = min(checked[key]["seconds"], seconds)
        for (name, precision), row in checked.items():
            ours = checked[("meanfield", precision)]["seconds"]
            row["ratio"] = row["seconds"] / ours if row["agrees"] and np.isfinite(ours) else float("nan")
            if not row["agrees"]:
                row["seconds"] = float("nan")
            rows.append(row)
    return rows


def _on_one_blas_thread(function: Any, *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` with BLAS held to one thread: the NumPy row's check, as its timing runs (a
    ``with`` had wrapped only the lambda's definition, so the check ran on every BLAS thread)."""
    with one_blas_thread():
        return function(*args, **kwargs)


def compare_environment() -> dict[str, Any]:
    """Threads, BLAS and framework versions of the comparison (printed above the table)."""
    versions = {}
    for name in available_frameworks():
        module = __import__(name)
        versions[name] = getattr(module, "__version__", "?")
    return {"threads": num_threads(), "blas": blas_info(), "frameworks": versions,
            "xla_flags": os.environ.get("XLA_FLAGS", "")}


def format_comparison(rows: Sequence[dict[str, Any]]) -> str:
    """The comparison as a text table: one line per case and implementation."""
    lines = [f"{'n':>6} {'d':>3}  {'implementation':<30} {'precision':<8} {'error':>9} {'seconds':>9} {'t_other/t_meanfield':>19}"]
    for r in rows:
        ratio = "not timed: disagrees" if not r["agrees"] else f"{r['ratio']:.2f}"
        seconds = "-" if not np.isfinite(r["seconds"]) else f"{r['seconds']:.3g}"
        lines.append(f"{r['n']:>6} {r['d']:>3}  {r['implementation']:<30} {r['precision']:<8} {r['error']:>9.1e} {seconds:>9} {ratio:>19}")
    return "\n".join(lines)
