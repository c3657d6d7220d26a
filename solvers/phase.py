r"""Phase diagrams of self-attention dynamics over random initialisations.

For each inverse temperature :math:`\beta` of a grid and each time :math:`t`, the
statistics of :math:`S` systems of :math:`n` tokens started uniformly at random on
:math:`S^{d-1}` and moved by

.. math::

    \dot x_i = \sigma P^\perp_{x_i} v_i,\qquad
    \hat P_1(\beta,t) = \frac1S\sum_{s=1}^S \mathbf 1\{K_s(\beta,t) = 1\},\qquad
    \bar K(\beta,t) = \frac1S\sum_s K_s(\beta,t),\qquad
    \bar r(\beta,t) = \frac1S\sum_s \operatorname{rank}_\tau G_s(\beta,t),

where :math:`K_s` is the number of clusters of system :math:`s` — the connected
components of the graph linking tokens at geodesic distance
:math:`\arccos\langle x_i,x_j\rangle\le\theta` (``phase.cluster_angle``) —,
:math:`G_s = XX^\top` its Gram matrix and :math:`\operatorname{rank}_\tau` the number
of eigenvalues of :math:`G_s` above :math:`\tau` (``phase.rank_tol``).  Also
:math:`\hat p(\beta,t)`, the fraction of pairs :math:`i\ne j` within :math:`\theta` of
each other: the probability that two tokens drawn at random lie within :math:`\theta` (a cluster's tokens
need not: a chain of tokens 0.04 rad apart is one cluster, its pairs within θ a few).

This is the phase diagram of Geshkovski, Letrouit, Polyanskiy and Rigollet, *A
mathematical perspective on Transformers* (arXiv 2312.10794): their public code
(``borjanG/2023-transformers-rotf``, ``phase-diagrams.py``) runs batches of
:math:`n = 32` tokens (``d = 2`` by default), :math:`\beta` from 0.1 to 9 and
:math:`t\le 30` (softmax), and plots the fraction of pairs with
:math:`\langle x_i,x_j\rangle > 0.999` and, with ``--plotdim``, the number of
eigenvalues of :math:`XX^\top` above :math:`10^{-3}`; the defaults here are theirs
(:math:`\theta=\arccos 0.999`, :math:`\tau = 10^{-3}`).  Their explicit steps
:math:`x\leftarrow (x+\eta v)/\|x+\eta v\|` are replaced by the particle solver's
Runge–Kutta schemes (:mod:`meanfield.solvers.integrators`, default ``rk4``).

How it runs
-----------
Sample :math:`s` starts from the config's initial measure with seed
``init.seed + s``, the same for every :math:`\beta` (common random numbers: the
differences between rows are less noisy than the rows).  The :math:`|\beta|\times S`
systems are cut into batches of ``phase.batch``; a batch is one call of the batched
kernel (:func:`meanfield.kernels.batched.velocity_batched`) per Runge–Kutta stage,
every system with its own :math:`\beta` — no Python loop over the systems.  The
batches are tasks on the sweep's cluster (:class:`meanfield.solvers.sweep.TaskPool`:
in this process, a local Dask cluster, or a running scheduler); with an output folder
each finished batch is kept (``batches/<hash>-<k>.npz``), and ``resume=True`` skips them.

Examples
--------
>>> import meanfield as mf
>>> from meanfield.solvers.phase import phase_diagram
>>> diagram = phase_diagram({"init": {"n": 32}, "solver": {"dt": 0.1, "t_final": 10, "save_every": 1},
...                          "phase": {"betas": [1.0, 4.0], "samples": 64}}, workers=0)  # doctest: +SKIP
>>> diagram.one_cluster.shape  # doctest: +SKIP
(2, 11)
>>> diagram.plot("phase.png")  # doctest: +SKIP
"""
from __future__ import annotations

import copy
import csv
import io
import json
import math
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.config import SCHEMA, config_hash, load_config
from meanfield.errors import ConfigError, ConfigNote, RunFailed
from meanfield.resources import MAX_FRAMES, MAX_STEPS, memory_shortfall
from meanfield.geometry.sphere import normalize, project_tangent
from meanfield.kernels.batched import BATCHED_KINDS, velocity_batched, velocity_batched_numpy
from meanfield.kernels.jit import one_blas_thread
from meanfield.solvers.integrators import from_name
from meanfield.solvers.loop import save_times
from meanfield.solvers.signals import check
from meanfield.solvers.trackers import MAX_STEP_ANGLE

__all__ = [
    "PHASE_COLUMNS",
    "PHASE_METHODS",
    "BatchResult",
    "PhaseDiagram",
    "phase_diagram",
    "run_batch",
    "cluster_count",
    "gram_rank",
    "pair_fraction",
    "phase_times",
    "check_phase_config",
    "write_diagram",
]

#: columns of ``phase.csv``, one row per (β, t)
PHASE_COLUMNS = (
    "beta", "t", "samples", "p_one_cluster", "p_one_cluster_se", "clusters_mean", "clusters_se",
    "rank_mean", "rank_se", "p_pair", "p_pair_se",
)
#: fixed-step integrators a batch can take (``rk45``'s error control would couple the systems of a batch)
PHASE_METHODS = ("euler", "heun", "rk4")


# --------------------------------------------------------------------------- #
# statistics of token clouds, vectorised over any leading axes
# --------------------------------------------------------------------------- #
def _angle(angle: float, name: str = "angle") -> float:
    """A link threshold in radians, checked: a number in [0, π] (-1 had acted as +1 through the cosine, NaN had linked nothing)."""
    if isinstance(angle, bool) or not isinstance(angle, (int, float, np.integer, np.floating)) or not 0.0 <= float(angle) <= math.pi:
        raise ValueError(f"{name} must be an angle in [0, π] radians, got {angle!r}")
    return float(angle)


def _tolerance(tol: float, name: str = "tol") -> float:
    """An eigenvalue threshold, checked: a positive finite number (NaN had given rank 0 everywhere)."""
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.integer, np.floating)) or not 0.0 < float(tol) < math.inf:
        raise ValueError(f"{name} must be a positive finite number, got {tol!r}")
    return float(tol)


def _linked(x: np.ndarray, angle: float) -> np.ndarray:
    """Boolean ``(..., n, n)``: tokens at geodesic distance ≤ ``angle`` (every token linked to itself)."""
    gram = x @ np.swapaxes(x, -1, -2)
    linked = gram >= math.cos(angle)
    n = x.shape[-2]
    linked[..., np.arange(n), np.arange(n)] = True
    return linked


def cluster_count(x: np.ndarray, *, angle: float) -> np.ndarray:
    r"""Number of clusters of each token cloud: connected components of the graph :math:`\arccos\langle x_i,x_j\rangle\le` ``angle``.

    Parameters
    ----------
    x : (..., n, d) array
        Unit tokens; any leading axes (systems, times).
    angle : float
        Link threshold :math:`\theta` in radians.

    Returns
    -------
    (...) int array
        Values in ``1..n``.  Computed by the transitive closure of the link
        matrix (repeated Boolean squaring, at most :math:`\lceil\log_2 n\rceil` products);
        a component is counted at its smallest index.

    Examples
    --------
    >>> import numpy as np
    >>> caps = np.repeat(np.eye(3), 4, axis=0)  # 4 tokens at each of 3 orthogonal points
    >>> int(cluster_count(caps, angle=0.1))
    3
    """
    angle = _angle(angle)
    x = np.asarray(x, dtype=float)
    n = x.shape[-2]
    reach = _linked(x, angle).astype(np.float64)
    for _ in range(max(1, math.ceil(math.log2(max(n, 2))))):
        grown = (reach @ reach) > 0.0
        if np.array_equal(grown, reach > 0.0):
            break
        reach = grown.astype(np.float64)
    first = np.argmax(reach > 0.0, axis=-1)  # smallest index reachable from each token
    return np.sum(first == np.arange(n), axis=-1)


def gram_rank(x: np.ndarray, *, tol: float) -> np.ndarray:
    r"""Numerical rank of the Gram matrix :math:`XX^\top`: its eigenvalues above ``tol``.

    The non-zero eigenvalues of :math:`XX^\top` (``n × n``) are those of
    :math:`X^\top X` (``d × d``), which is what is diagonalised.

    Parameters
    ----------
    x : (..., n, d) array
    tol : float
        Absolute eigenvalue threshold (the eigenvalues of unit tokens sum to ``n``).

    Returns
    -------
    (...) int array
        Values in ``0..min(n, d)``.
    """
    tol = _tolerance(tol)
    x = np.asarray(x, dtype=float)
    eig = np.linalg.eigvalsh(np.einsum("...ik,...il->...kl", x, x))
    return np.sum(eig > tol, axis=-1)


def pair_fraction(x: np.ndarray, *, angle: float) -> np.ndarray:
    r"""Fraction of ordered pairs :math:`i\ne j` at geodesic distance ≤ ``angle`` (the pair statistic of Geshkovski et al., arXiv 2312.10794).

    Returns
    -------
    (...) float array in [0, 1] (``n ≥ 2``).
    """
    angle = _angle(angle)
    x = np.asarray(x, dtype=float)
    n = x.shape[-2]
    if n < 2:
        raise ValueError("pairs need n >= 2 tokens")
    return (np.sum(_linked(x, angle), axis=(-2, -1)) - n) / (n * (n - 1))


# --------------------------------------------------------------------------- #
# one batch: many systems, one kernel call per stage
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class BatchResult:
    """Statistics of a batch of systems at the requested times.

    Attributes
    ----------
    times : (T,) array
    clusters, rank : (N, T) int arrays
        Per system: :func:`cluster_count`, :func:`gram_rank`.
    pairs : (N, T) array
        Per system: :func:`pair_fraction`.
    states : (T, N, n, d) array or None
        The token clouds (only with ``keep_states=True``).
    steps : int
        Runge–Kutta steps taken (the same for every system).
    """

    times: np.ndarray
    clusters: np.ndarray
    rank: np.ndarray
    pairs: np.ndarray
    states: np.ndarray | None = None
    steps: int = 0


def run_batch(
    x0: np.ndarray,
    beta: float | np.ndarray,
    B: np.ndarray,
    V: np.ndarray,
    *,
    times: Sequence[float],
    dt: float,
    kind: str = "softmax",
    direction: str = "ascent",
    combine: str = "sum",
    method: str = "rk4",
    cluster_angle: float = math.acos(0.999),
    rank_tol: float = 1e-3,
    backend: str = "numba",
    keep_states: bool = False,
) -> BatchResult:
    r"""Integrate ``N`` independent systems together and measure them at ``times``.

    .. math::

        \dot x^{(b)}_i = \sigma P^\perp_{x^{(b)}_i} v^{(b)}_i,\qquad b = 1..N

    with :math:`v^{(b)}` the batched attention velocity
    (:func:`meanfield.kernels.batched.velocity_batched`).  Between consecutive
    times (from :math:`t = 0`) the step is the largest :math:`h\le` ``dt`` that
    divides the interval evenly, and every stage point is put back on the sphere — the
    rule of :class:`meanfield.solvers.particle.ParticleSolver`, so that each system
    equals its own particle run to round-off.

    Parameters
    ----------
    x0 : (N, n, d) array
        Initial tokens (normalised here).
    beta : float or (N,) array
        Inverse temperature of each system.
    B, V : (H, d, d) or (N, H, d, d) arrays
        Heads, shared or one set per system.
    times : sequence of float
        Increasing times ≥ 0 at which the statistics are taken.
    dt : float
        Largest step.
    kind : {"softmax", "unnormalized"}
    direction : {"ascent", "descent"}
        Sign :math:`\sigma = \pm 1` of the flow.
    combine : {"sum", "mean"}
        Heads summed or averaged.
    method : {"euler", "heun", "rk4"}
    cluster_angle, rank_tol : float
        Thresholds of :func:`cluster_count`/:func:`pair_fraction` and :func:`gram_rank`.
    backend : {"numba", "numpy"}
        The compiled kernel or its NumPy twin.
    keep_states : bool
        Also return the token clouds at ``times``.

    Returns
    -------
    BatchResult
    """
    if method not in PHASE_METHODS:
        raise ValueError(f"a batch takes a fixed-step method ({', '.join(PHASE_METHODS)}), got {method!r}")
    if direction not in ("ascent", "descent"):
        raise ValueError(f"direction must be 'ascent' or 'descent', got {direction!r}")
    if not (dt > 0 and math.isfinite(dt)):
        raise ValueError(f"dt must be positive and finite, got {dt!r}")
    cluster_angle = _angle(cluster_angle, "cluster_angle")
    rank_tol = _tolerance(rank_tol, "rank_tol")
    kernels = {"numba": velocity_batched, "numpy": velocity_batched_numpy}
    if backend not in kernels:
        raise ValueError(f"backend must be 'numba' or 'numpy', got {backend!r}")
    times = np.asarray(times, dtype=float)
    if times.ndim != 1 or times.size == 0 or times[0] < 0 or np.any(np.diff(times) <= 0):
        raise ValueError("times must be a non-empty increasing sequence of times >= 0")
    x = np.asarray(x0, dtype=float)
    if x.ndim != 3:
        raise ValueError(f"x0 must have shape (systems, n, d), got {x.shape}")
    if not np.all(np.isfinite(x)) or not np.all(np.max(np.abs(x), axis=-1) > 0):  # (a zero token had read "a smaller dt?")
        raise ValueError("x0 must hold finite, non-zero tokens")
    x = normalize(x)
    N, d = x.shape[0], x.shape[2]
    for name, matrix in (("B", B), ("V", V)):  # (a wrong d had been named by its reshaped shape)
        shape = np.shape(matrix)
        if len(shape) not in (2, 3, 4) or shape[-2:] != (d, d) or (len(shape) == 4 and shape[0] != N):
            raise ValueError(f"{name} must be a {d}×{d} matrix or a stack (H, {d}, {d}) shared by the systems, or one stack "
                             f"per system ({N}, H, {d}, {d}) for {N} systems of tokens in d = {d}, got shape {shape}")
    B, V = (np.asarray(m, dtype=float)[None] if np.ndim(m) == 2 else m for m in (B, V))  # one matrix: one head
    velocity = kernels[backend]
    sign = 1.0 if direction == "ascent" else -1.0
    if np.ndim(beta) not in (0, 1) or np.size(beta) not in (1, x.shape[0]):  # (a raw NumPy broadcast error)
        raise ValueError(f"beta must be one number or one per system ({x.shape[0]}), got shape {np.shape(beta)}")
    betas = np.broadcast_to(np.asarray(beta, dtype=float), (x.shape[0],))

    def field(y: np.ndarray, t: float) -> np.ndarray:  # noqa: ARG001 - autonomous
        return sign * project_tangent(y, velocity(y, B, V, beta=betas, kind=kind, combine=combine))

    scheme = from_name(method)
    T = times.size
    clusters = np.empty((x.shape[0], T), dtype=np.int64)
    rank = np.empty((x.shape[0], T), dtype=np.int64)
    pairs = np.empty((x.shape[0], T))
    states = np.empty((T, *x.shape)) if keep_states else None
    steps_taken = 0
    t_prev = 0.0
    with one_blas_thread():
        for k, t_next in enumerate(times):
            if t_next > t_prev:
                steps = max(1, math.ceil((t_next - t_prev) / dt - 1e-9))
                h = (t_next - t_prev) / steps
                for m in range(steps):
                    check()
                    before = x
                    x = scheme.step(field, x, t_prev + m * h, h, retract=normalize)
                    moved = float(np.arccos(np.clip(np.min(np.einsum("...i,...i->...", before, x)), -1.0, 1.0)))
                    # a finite but meaningless step fails the batch (the particle runs' trackers warn at the same angle):
                    # unnormalized attention at β = 10, dt = 0.1 had moved tokens tens of radians a step, and the
                    # diagram had read "no clustering" where the converged count is about 2
                    if moved > MAX_STEP_ANGLE:
                        raise RunFailed(f"a step of dt = {h:.3g} at t = {t_prev + m * h:.6g} moved a token by {moved:.3g} rad "
                                        f"(β up to {float(np.max(betas)):g}): the Runge–Kutta step is far outside its "
                                        f"accuracy; a smaller solver.dt (moves below {MAX_STEP_ANGLE:g} rad)")
                steps_taken += steps
                if not np.all(np.isfinite(x)):
                    raise RunFailed(f"non-finite tokens at t = {t_next:g} (β up to {float(np.max(betas)):g}; a smaller dt?)")
                t_prev = float(t_next)
            clusters[:, k] = cluster_count(x, angle=cluster_angle)
            rank[:, k] = gram_rank(x, tol=rank_tol)
            pairs[:, k] = pair_fraction(x, angle=cluster_angle)
            if states is not None:
                states[k] = x
    return BatchResult(times, clusters, rank, pairs, states, steps_taken)


# --------------------------------------------------------------------------- #
# the diagram from a config
# --------------------------------------------------------------------------- #
def phase_times(cfg: Mapping[str, Any]) -> np.ndarray:
    """The diagram's times: ``phase.times``, else ``0, solver.save_every, …, solver.t_final``."""
    given = cfg["phase"]["times"]
    if given is not None:
        return np.asarray(given, dtype=float)
    return save_times(0.0, float(cfg["solver"]["t_final"]), float(cfg["solver"]["save_every"]))


#: bytes a batch holds per system and pair of tokens while it counts clusters (measured: about 18, tracemalloc)
PHASE_BYTES_PER_PAIR = 24


def check_phase_config(cfg: Mapping[str, Any]) -> None:
    """What a phase diagram needs of a resolved config, checked before any work.

    Raises
    ------
    ConfigError
        Naming the key: attention other than softmax/unnormalized, a solver other
        than the particle one with a fixed-step method, time-dependent heads,
        noise, another normalisation than tokens on the sphere, a mask, fewer than 2 tokens, or ``phase.times`` past the
        limits of :mod:`meanfield.resources` (steps of ``solver.dt``, frames).
    """
    model, solver = cfg["model"], cfg["solver"]
    if model["attention"] not in BATCHED_KINDS:
        raise ConfigError("model.attention", f"a phase diagram runs {' or '.join(repr(k) for k in BATCHED_KINDS)} attention, got {model['attention']!r}")
    if solver["kind"] != "particle":
        raise ConfigError("solver.kind", f"a phase diagram integrates tokens: solver.kind = 'particle', got {solver['kind']!r}")
    if solver["method"] not in PHASE_METHODS:
        raise ConfigError("solver.method", f"a phase diagram takes a fixed-step method ({', '.join(PHASE_METHODS)}), got {solver['method']!r}")
    if cfg["weights"]["schedule"] != "constant":
        raise ConfigError("weights.schedule", f"a phase diagram takes constant heads, got schedule = {cfg['weights']['schedule']!r}")
    if (cfg.get("noise") or {}).get("gamma") is not None:
        raise ConfigError("noise.gamma", "a phase diagram runs the deterministic dynamics; leave [noise] out")
    if model.get("norm", "post") != "post":
        raise ConfigError("model.norm", f"a phase diagram runs tokens on the sphere (norm = 'post'), got {model['norm']!r}")
    if model.get("mask", "none") != "none":
        raise ConfigError("model.mask", f"a phase diagram runs unmasked attention, got mask = {model['mask']!r}")
    if isinstance(model["heads"], str):
        raise ConfigError("model.heads", "a phase diagram takes [[model.heads]] tables (or the default identity head), not a checkpoint")
    if cfg["init"]["n"] < 2:
        raise ConfigError("init.n", f"clusters and pairs need n >= 2 tokens, got {cfg['init']['n']}")
    if cfg["init"]["kind"] in ("file", "sentence", "orthogonal", "equiangular", "run", "fibonacci"):
        why = ("its seeds rotate one lattice, the same system for rotation-invariant heads (a spread of 0)"
               if cfg["init"]["kind"] == "fibonacci" else "does not draw them")
        raise ConfigError("init.kind", f"a phase diagram averages over random initialisations; init.kind = {cfg['init']['kind']!r}: {why}")
    if solver.get("clock", "time") != "time":
        raise ConfigError("solver.clock", "a phase diagram's times are physical times (clock = 'time'); the gradient clock "
                                          "reparametrises one run")
    if model.get("precision", "float64") != "float64":
        raise ConfigError("model.precision", "a phase diagram's batched kernel runs in float64")
    given_times = cfg["phase"]["times"]
    if given_times:  # the diagram runs to its last time, not t_final (1e20 had run for ever, its folder made)
        steps = float(max(given_times)) / float(solver["dt"])
        if not steps <= MAX_STEPS:
            raise ConfigError("phase.times", f"the last time {max(given_times):g} takes {steps:.3g} steps of solver.dt = "
                                             f"{solver['dt']:g}; the limit is {MAX_STEPS:.0e} steps")
        if len(given_times) > MAX_FRAMES:
            raise ConfigError("phase.times", f"{len(given_times)} times; the limit is {MAX_FRAMES:.0e}")
    from meanfield.model import score_bound, score_bound_limit

    top = score_bound(max(float(b) for b in cfg["phase"]["betas"]), _heads(cfg)[0])
    limit, written = score_bound_limit()
    if not top <= limit:  # (a run's model.beta is held to it; β = 1e18 had run a diagram of round-off)
        raise ConfigError("phase.betas", f"the largest β puts the scores β⟨x, B_h y⟩ past float64's resolution: β‖B_h‖_F = "
                                         f"{top:.3g}, at most {written}")
    batch = min(int(cfg["phase"]["batch"]), int(cfg["phase"]["samples"]) * len(cfg["phase"]["betas"]))
    short = memory_shortfall(PHASE_BYTES_PER_PAIR * batch * float(cfg["init"]["n"]) ** 2)  # its pair tables
    if short:  # (the memory had been read twice, for the test and for the words)
        raise ConfigError("phase.batch", f"a batch of {batch} systems of {cfg['init']['n']} tokens (its pair tables) {short}: "
                                         "take a smaller phase.batch")


def _heads(cfg: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    from meanfield.build import build_heads
    from meanfield.heads import stack_heads

    stack = stack_heads(build_heads(dict(cfg)))
    return stack.B, stack.V


def _initial(cfg: Mapping[str, Any], samples: Sequence[int]) -> np.ndarray:
    """Initial tokens of the given samples: the config's initial measure with seed ``init.seed + s``."""
    from meanfield.build import initial_tokens

    base = cfg["init"]["seed"]
    return np.stack([initial_tokens({**cfg, "init": {**cfg["init"], "seed": base + int(s)}}) for s in samples])


def _cases(cfg: Mapping[str, Any], start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """β and sample of the flattened cases ``start..stop-1`` (β-major: case c = k S + s)."""
    S = cfg["phase"]["samples"]
    betas = np.asarray(cfg["phase"]["betas"], dtype=float)
    cases = np.arange(start, stop)
    return betas[cases // S], cases % S


def _run_task(payload: Mapping[str, Any]) -> dict[str, Any]:
    """One batch (runs on a Dask worker or here): the statistics of cases ``start..stop-1``, saved when a path is given."""
    started = time.perf_counter()
    cfg = payload["config"]
    beta, samples = _cases(cfg, payload["start"], payload["stop"])
    B, V = _heads(cfg)
    model, solver, phase = cfg["model"], cfg["solver"], cfg["phase"]
    result = run_batch(
        _initial(cfg, samples), beta, B, V, times=payload["times"], dt=float(solver["dt"]), kind=model["attention"],
        direction=model["direction"], combine=model.get("combine", "sum"), method=solver["method"],
        cluster_angle=float(phase["cluster_angle"]), rank_tol=float(phase["rank_tol"]),
    )
    record = {"key": payload["key"], "clusters": result.clusters, "rank": result.rank, "pairs": result.pairs,
              "steps": result.steps, "wall_time": time.perf_counter() - started}
    if payload.get("path"):
        from meanfield.solvers.sweep import _atomic_write

        buffer = io.BytesIO()
        np.savez(buffer, **{k: np.asarray(v) for k, v in record.items()})
        _atomic_write(Path(payload["path"]), buffer.getvalue())
    return record


def _stored(path: Path, key: str) -> dict[str, Any] | None:
    """A finished batch kept under ``batches/`` (``None`` when missing, unreadable or of another diagram)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            if str(f["key"]) != key:
                return None
            return {name: f[name] for name in ("clusters", "rank", "pairs", "steps", "wall_time")}
    except Exception:  # noqa: BLE001 - a truncated or empty file (zipfile's BadZipFile, EOFError): computed again
        return None


def _mean_se(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over the samples (axis 1) and its standard error ``std(ddof=1)/√S`` (NaN for S = 1)."""
    values = np.asarray(values, dtype=float)
    S = values.shape[1]
    mean = values.mean(axis=1)
    se = values.std(axis=1, ddof=1) / math.sqrt(S) if S > 1 else np.full(mean.shape, np.nan)
    return mean, se


@dataclass(frozen=True)
class PhaseDiagram:
    r"""A phase diagram over :math:`(\beta, t)`: means over the samples and their standard errors.

    Attributes
    ----------
    betas : (K,) array
    times : (T,) array
    samples : int
        Random initialisations per :math:`\beta`.
    n, d : int
    cluster_angle, rank_tol : float
        The thresholds (radians; eigenvalue of :math:`XX^\top`).
    one_cluster, one_cluster_se : (K, T) arrays
        :math:`\hat P_1`, the fraction of samples that form one cluster, and its standard error.
    clusters, clusters_se : (K, T) arrays
        Mean number of clusters.
    rank, rank_se : (K, T) arrays
        Mean numerical rank of the Gram matrix.
    pairs, pairs_se : (K, T) arrays
        Mean fraction of pairs within ``cluster_angle``.
    counts : dict of (K, S, T) arrays
        Per sample: ``clusters``, ``rank`` (ints) and ``pairs``.
    config : dict
        The resolved config.
    info : dict
        ``batches``, ``systems``, ``steps`` (per system), ``wall_time``, ``resumed_batches``.
    """

    betas: np.ndarray
    times: np.ndarray
    samples: int
    n: int
    d: int
    cluster_angle: float
    rank_tol: float
    one_cluster: np.ndarray
    one_cluster_se: np.ndarray
    clusters: np.ndarray
    clusters_se: np.ndarray
    rank: np.ndarray
    rank_se: np.ndarray
    pairs: np.ndarray
    pairs_se: np.ndarray
    counts: dict[str, np.ndarray] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_counts(
        cls, betas: np.ndarray, times: np.ndarray, clusters: np.ndarray, rank: np.ndarray, pairs: np.ndarray, *,
        n: int, d: int, cluster_angle: float, rank_tol: float, config: dict[str, Any] | None = None,
        info: dict[str, Any] | None = None,
    ) -> PhaseDiagram:
        """The diagram of per-sample counts ``(K, S, T)``."""
        one, one_se = _mean_se(clusters == 1)
        k_mean, k_se = _mean_se(clusters)
        r_mean, r_se = _mean_se(rank)
        p_mean, p_se = _mean_se(pairs)
        return cls(
            np.asarray(betas, dtype=float), np.asarray(times, dtype=float), int(clusters.shape[1]), int(n), int(d),
            float(cluster_angle), float(rank_tol), one, one_se, k_mean, k_se, r_mean, r_se, p_mean, p_se,
            {"clusters": clusters, "rank": rank, "pairs": pairs}, dict(config or {}), dict(info or {}),
        )

    def rows(self) -> list[dict[str, Any]]:
        """The tidy table of ``phase.csv``: one row per (β, t), columns :data:`PHASE_COLUMNS`."""
        out = []
        for k, beta in enumerate(self.betas):
            for j, t in enumerate(self.times):
                out.append({
                    "beta": float(beta), "t": float(t), "samples": self.samples,
                    "p_one_cluster": float(self.one_cluster[k, j]), "p_one_cluster_se": float(self.one_cluster_se[k, j]),
                    "clusters_mean": float(self.clusters[k, j]), "clusters_se": float(self.clusters_se[k, j]),
                    "rank_mean": float(self.rank[k, j]), "rank_se": float(self.rank_se[k, j]),
                    "p_pair": float(self.pairs[k, j]), "p_pair_se": float(self.pairs_se[k, j]),
                })
        return out

    def to_csv(self, path: str | Path) -> Path:
        """Write :meth:`rows` (floats at full precision)."""
        path = Path(path)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(PHASE_COLUMNS))
            writer.writeheader()
            writer.writerows({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()} for row in self.rows())
        return path

    def plot(self, path: str | Path | None = None, *, title: str | None = None) -> Any:
        r"""Heat maps over :math:`(t, \beta)`: P(one cluster), P(two tokens within θ), mean clusters, mean Gram rank.

        Returns
        -------
        matplotlib.figure.Figure
            Saved to ``path`` when given.
        """
        from matplotlib.colors import LogNorm, Normalize

        from meanfield.plotting.canvas import new_figure, save

        fig = new_figure(figsize=(11.0, 7.6))
        axes = fig.subplots(2, 2, sharex=True, sharey=True)
        top = float(min(self.n, self.d))
        panels = [
            (self.one_cluster, "P(one cluster)", "probability", "RdBu_r", Normalize(0.0, 1.0)),
            (self.pairs, f"P(two tokens within {self.cluster_angle:.3g} rad)", "probability", "RdBu_r", Normalize(0.0, 1.0)),
            (self.clusters, "mean number of clusters", f"clusters (1 … n = {self.n})", "viridis", LogNorm(1.0, max(2.0, float(self.n)))),
            (self.rank, f"mean numerical rank of the Gram matrix (eigenvalues > {self.rank_tol:g})", f"rank (1 … {top:g})", "viridis",
             Normalize(1.0, max(top, 1.5))),
        ]
        columns, to_scale_t = _heat_cells(self.times)
        rows, to_scale_b = _heat_cells(self.betas)
        for ax, (values, title_text, label, cmap, norm) in zip(axes.flat, panels):
            mesh = ax.pcolormesh(columns, rows, values, shading="flat", cmap=cmap, norm=norm, rasterized=True)
            fig.colorbar(mesh, ax=ax, label=label)
            ax.set_title(title_text, fontsize=10)
        if not to_scale_b:
            every = max(1, math.ceil(self.betas.size / 14))
            axes[0, 0].set_yticks(np.arange(self.betas.size)[::every], [f"{b:g}" for b in self.betas[::every]])
        if not to_scale_t:
            every = max(1, math.ceil(self.times.size / 10))
            axes[0, 0].set_xticks(np.arange(self.times.size)[::every], [f"{t:g}" for t in self.times[::every]])
        for ax in axes[1]:
            ax.set_xlabel("time t" if to_scale_t else "time t (one column per time, not to scale)")
        for ax in axes[:, 0]:
            # (one label taller than its panel had run into the next: the rows' note on two lines)
            ax.set_ylabel("inverse temperature β" if to_scale_b else "inverse temperature β\n(one row per β, not to scale)")
        fig.suptitle(title or (f"Phase diagram of {self._attention()} self-attention dynamics (Geshkovski, Letrouit, Polyanskiy and "
                               f"Rigollet, arXiv 2312.10794)\n$n = {self.n}$ tokens on $S^{{{self.d - 1}}}$, {self.samples} random "
                               f"initialisations per β; heads: {self._heads_text()}"), fontsize=10)
        return save(fig, path)

    def _attention(self) -> str:
        return str(self.config.get("model", {}).get("attention", "softmax"))

    def _heads_text(self) -> str:
        """The heads in a few words: their spec, and for random ones the one draw every sample and β share."""
        model = self.config.get("model", {})
        spec = model.get("heads")
        if spec is None:
            return "the identity" if self.config else "as given"
        text = json.dumps(spec, default=str, separators=(", ", " = "))
        if len(text) > 70:
            text = text[:67] + "…"
        random = any(word in text for word in ("random", "gaussian", "goe", "gpt2"))
        return text + (f" (one draw, model.seed = {model.get('seed')}, for every sample and β)" if random else "")


def _heat_cells(values: np.ndarray) -> tuple[np.ndarray, bool]:
    """The cell edges of a heat map's axis over ``values``, and whether the axis is to scale.

    An even grid of at least two values is drawn to scale, each cell centred on its value and cut at the first and
    last value (no cell reaches a β or a time that was not computed); a single value, an uneven grid or one near the
    floats' edge gets one equal cell per value, labelled (``shading="nearest"`` had drawn a single β or time as cells
    of zero width, a blank picture, and stretched the cells of an uneven time grid over times never computed).
    """
    values = np.asarray(values, dtype=float)
    steps = np.diff(values)
    even = (values.size >= 2 and bool(np.all(steps > 0)) and bool(np.allclose(steps, steps[0], rtol=1e-6))
            and bool(values[-1] <= np.finfo(float).max - steps[-1]))  # (matplotlib's ticks overflowed past the edge)
    if not even:
        return np.arange(values.size + 1) - 0.5, False
    return np.concatenate([values[:1], values[:-1] + steps / 2, values[-1:]]), True


def _unused_at_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with the keys a phase diagram does not use at their defaults: ``model.beta`` (the rows are ``phase.betas``),
    ``model.backend`` and ``model.tolerance`` (the dense batched kernel), and beside ``phase.times`` ``solver.t_final``
    and ``solver.save_every`` (each had a note saying it is not used, yet a changed one made ``--resume`` refuse the
    folder as another configuration's)."""
    model = {**cfg["model"], **{key: SCHEMA["model"][key].default for key in ("beta", "backend", "tolerance") if key in cfg["model"]}}
    solver = dict(cfg["solver"])
    if cfg["phase"]["times"] is not None:
        solver.update({key: SCHEMA["solver"][key].default for key in ("t_final", "save_every")})
    return {**cfg, "model": model, "solver": solver}


def _payloads(cfg: dict[str, Any], times: np.ndarray, out: Path | None) -> list[dict[str, Any]]:
    lists = {key: None if cfg["phase"][key] is None else [float(v) for v in cfg["phase"][key]] for key in ("betas", "times")}
    # betas = [0.5, 4] is [0.5, 4.0]: --resume takes either
    digest = config_hash({**_unused_at_defaults(cfg), "phase": {**cfg["phase"], **lists}})
    total = len(cfg["phase"]["betas"]) * cfg["phase"]["samples"]
    size = cfg["phase"]["batch"]
    tasks = []
    for index, start in enumerate(range(0, total, size)):
        key = f"{digest}-{index}-{start}-{min(total, start + size)}"
        tasks.append({"config": cfg, "start": start, "stop": min(total, start + size), "times": times.tolist(), "key": key,
                      "path": str(out / "batches" / f"{digest}-{index:05d}.npz") if out is not None else None})
    return tasks


def phase_diagram(
    source: str | Path | Mapping[str, Any] | None = None,
    /,
    *,
    out: str | Path | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    resume: bool = False,
    quiet: bool = True,
    **overrides: Any,
) -> PhaseDiagram:
    r"""The phase diagram of a config (its ``[phase]`` section), batches run as Dask tasks.

    Parameters
    ----------
    source : path, mapping or None
        A TOML config, a mapping, or nothing (the defaults); ``[model]``,
        ``[init]`` (``n``; the initial measure, seeded ``init.seed + s``),
        ``[solver]`` (``method``, ``dt``; ``t_final`` and ``save_every`` give the
        default times) and ``[phase]`` (``betas``, ``times``, ``samples``, ``batch``,
        ``cluster_angle``, ``rank_tol``).
    out : path, optional
        Folder for ``phase.csv``, ``phase.png``, ``phase.json`` and the finished
        batches (``batches/``).
    scheduler, workers :
        Where the batches run (:class:`meanfield.solvers.sweep.TaskPool`): a running
        scheduler, or a local cluster of ``workers`` processes (default one per core;
        ``0``: in this process).
    resume : bool
        Keep the batches already in ``out``; without it, an ``out`` holding batches is refused.
    quiet : bool
        No progress bar.
    **overrides
        Config values by key (``beta`` …, ``"phase.samples"``).

    Returns
    -------
    PhaseDiagram

    Raises
    ------
    ConfigError
        Bad input (the key is named), before any work.
    RunFailed
        A batch produced non-finite tokens.
    """
    from meanfield.io.output import folder_path

    folder_path(out, "out")  # (a file had been a NotADirectoryError, and only once a local cluster had started)
    cfg = load_config(source, values=overrides)
    check_phase_config(cfg)
    unused = [f"model.{key} = {cfg['model'][key]!r}" for key in ("backend", "tolerance")
              if key in cfg["model"] and cfg["model"][key] != SCHEMA["model"][key].default]
    if unused:  # (they had been dropped without a word)
        warnings.warn(f"{' and '.join(unused)} not used: a phase diagram runs the dense batched kernel "
                      "(meanfield.kernels.batched), exact", ConfigNote, stacklevel=2)
    default_beta = SCHEMA["model"]["beta"].default
    if cfg["model"]["beta"] != default_beta:  # (a config's beta = 16 had been ignored without a word)
        warnings.warn(f"model.beta = {cfg['model']['beta']:g} is not used: a phase diagram's rows are phase.betas "
                      f"{list(cfg['phase']['betas'])}", ConfigNote, stacklevel=2)
    if cfg["phase"]["times"] is not None:  # (they had been dropped without a word)
        unused = [key for key in ("t_final", "save_every") if cfg["solver"][key] != SCHEMA["solver"][key].default]
        if unused:
            warnings.warn(f"{' and '.join('solver.' + k for k in unused)} not used: the diagram's times are phase.times "
                          f"{list(cfg['phase']['times'])}", ConfigNote, stacklevel=2)
    tracked = [f"track.{key} = {value!r}" for key, value in cfg.get("track", {}).items()
               if key in SCHEMA["track"] and value != SCHEMA["track"][key].default]
    if tracked:  # (they had been dropped without a word)
        warnings.warn(f"{' and '.join(tracked)} not used: a phase diagram records its cluster statistics only, no "
                      "run's trackers", ConfigNote, stacklevel=2)
    times = phase_times(cfg)
    folder = Path(out) if out is not None else None
    tasks = _payloads(cfg, times, folder)
    done: dict[int, dict[str, Any]] = {}
    if folder is not None:
        kept = sorted((folder / "batches").glob("*.npz")) if (folder / "batches").is_dir() else []
        if kept and not resume:
            raise ConfigError("--out", f"{folder} already holds a phase diagram ({len(kept)} batches); pass --resume to continue it, or choose another folder")
        if resume and not kept:  # (a mistyped folder had started afresh without a word)
            where = "does not exist" if not folder.exists() else "holds no batches"
            warnings.warn(f"--resume: {folder} {where}: nothing to resume, every batch runs", ConfigNote, stacklevel=2)
        if resume and kept:
            ours = {Path(task["path"]).name for task in tasks}
            foreign = [path.name for path in kept if path.name not in ours]
            if foreign:  # another config's batches: resuming had written a second diagram over the first's files
                raise ConfigError("--resume", f"{folder} holds batches of another configuration ({len(foreign)} of {len(kept)}, "
                                              f"e.g. {foreign[0]}); resume with the config and --set values it was started "
                                              "with, or write this one into another folder")
            for index, task in enumerate(tasks):
                stored = _stored(Path(task["path"]), task["key"])
                if stored is not None:
                    done[index] = stored
    todo = [index for index in range(len(tasks)) if index not in done]
    started = time.perf_counter()
    from meanfield.solvers.sweep import TaskPool

    with TaskPool(scheduler=scheduler, workers=workers, tasks=len(todo)) as pool:  # a bad scheduler fails here, before any file
        if folder is not None:
            (folder / "batches").mkdir(parents=True, exist_ok=True)
        from tqdm import tqdm

        with tqdm(total=len(tasks), initial=len(done), disable=quiet, desc="phase", unit="batch") as bar:
            for position, record in pool.map(_run_task, [tasks[i] for i in todo], name="meanfield-phase"):
                done[todo[position]] = record
                bar.update(1)
    K, S, T = len(cfg["phase"]["betas"]), cfg["phase"]["samples"], times.size
    counts = {name: np.concatenate([np.asarray(done[i][name]) for i in range(len(tasks))]) for name in ("clusters", "rank", "pairs")}
    info = {
        "batches": len(tasks), "resumed_batches": len(tasks) - len(todo), "systems": K * S,
        "steps": int(done[0]["steps"]) if tasks else 0, "wall_time": time.perf_counter() - started,
        "batch_wall_time": float(sum(float(r["wall_time"]) for r in done.values())),
    }
    diagram = PhaseDiagram.from_counts(
        cfg["phase"]["betas"], times, *(counts[name].reshape(K, S, T) for name in ("clusters", "rank", "pairs")),
        n=cfg["init"]["n"], d=cfg["model"]["d"], cluster_angle=cfg["phase"]["cluster_angle"],
        rank_tol=cfg["phase"]["rank_tol"], config=copy.deepcopy(cfg), info=info,
    )
    if folder is not None:
        write_diagram(diagram, folder)
    return diagram


def write_diagram(diagram: PhaseDiagram, folder: str | Path) -> dict[str, Path]:
    """``phase.csv`` (:data:`PHASE_COLUMNS`), ``phase.png`` and ``phase.json`` (parameters, config, info) in ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"csv": diagram.to_csv(folder / "phase.csv"), "png": folder / "phase.png", "json": folder / "phase.json"}
    diagram.plot(paths["png"])
    meta = {
        "betas": diagram.betas.tolist(), "times": diagram.times.tolist(), "samples": diagram.samples, "n": diagram.n,
        "d": diagram.d, "cluster_angle": diagram.cluster_angle, "rank_tol": diagram.rank_tol,
        "batch": diagram.config.get("phase", {}).get("batch"), "info": diagram.info, "config": diagram.config,
    }
    tmp = paths["json"].with_name(f".phase.json.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(meta, indent=1, sort_keys=True, default=float))
    os.replace(tmp, paths["json"])
    return paths
