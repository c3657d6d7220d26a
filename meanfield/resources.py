"""What a configuration will cost, checked before any work: memory against this machine, and the number of steps.

A config that cannot fit is refused with the key that makes it large, e.g.
``init.n: 1000000000 tokens need 45 GiB; this machine has 22 GiB available``,
instead of a ``MemoryError`` after the allocations start or a run that never ends.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from meanfield.errors import ConfigError

__all__ = ["available_memory", "memory_estimate", "memory_shortfall", "check_resources", "MAX_STEPS", "MAX_FRAMES", "PATH_SCHEDULES", "LAYER_SCHEDULES", "format_bytes",
           "WEIGHT_PATH_NOTE_BYTES", "weight_path_bytes", "weight_path_note"]

#: more time steps than this are refused (1e8 steps of even 10 µs each are 12 days)
MAX_STEPS = 10**8
#: more saved frames than this are refused
MAX_FRAMES = 10**6
#: float64 arrays of the token size a particle run holds at once (state, Runge–Kutta stages, velocities, trackers)
_TOKEN_COPIES = 24
#: bytes a mesh cell costs (Voronoi vertices and regions, neighbours, edges, stages of the integrator)
_CELL_BYTES = 4096


def available_memory() -> int:
    """Bytes of memory this process can still use: ``MemAvailable``, else the physical memory."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 1 << 62


def format_bytes(count: float) -> str:
    """``22 GiB``, ``512 MiB`` …"""
    for unit, size in (("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{int(count)} bytes"


def memory_shortfall(need: float, *, available: int | None = None) -> str | None:
    """``None`` where ``need`` bytes fit in the memory left (``available``, default :func:`available_memory`), else the
    words for it: ``needs about 9 TiB; this machine has 22 GiB available``."""
    free = available_memory() if available is None else available
    if need <= free:
        return None
    return f"needs about {format_bytes(need)}; this machine has {format_bytes(free)} available"


def _heads(cfg: Mapping[str, Any]) -> int:
    heads, replicas = cfg["model"].get("heads"), cfg["model"].get("num_heads")
    if replicas is not None and not isinstance(heads, str):  # model.num_heads: one table stands for H heads
        return int(replicas)
    return len(heads) if isinstance(heads, list) and heads else 12 if isinstance(heads, str) else 1


#: float64 d×d matrices per head and point of a stored weight path: the path of B and V, its increments and the
#: copies written to the file (measured: 5.4, a path of 2·10⁵ points of 10 heads of 3×3 added 772 MB)
_PATH_MATRICES = 6


#: the schedules whose run stores its weight path at step ``weights.dt`` (``oscillating`` too: its record, computed
#: from the formula, had been counted by neither the step limit nor the memory check)
PATH_SCHEDULES = ("ou", "relaxation", "oscillating")

#: schedules whose run stores one point of its weight path per layer, at the integer times ``0, 1, …, ⌊t_final⌋``
#: (``layers``: a run of 2000 layers of 4 heads of 32×32 had written 131 MB, and 10⁴ layers of 8 heads of 64×64 had
#: been accepted on a machine that could not hold them, with neither the note nor the refusal of an OU path)
LAYER_SCHEDULES = ("layers",)


def _weight_path_points(cfg: Mapping[str, Any]) -> float | None:
    """Points of the weight path a schedule stores: ``t_final / weights.dt`` (``ou``, ``relaxation``, ``oscillating``)
    or ``⌊t_final⌋ + 1`` layers (``layers``); ``None`` for a schedule that stores none up front."""
    weights = cfg.get("weights") or {}
    if weights.get("schedule") in LAYER_SCHEDULES:
        return math.floor(float(cfg["solver"]["t_final"]) + 1e-9) + 1.0  # LayerSchedule.grid (its LAYER_SNAP)
    if weights.get("schedule") not in PATH_SCHEDULES:
        return None
    return float(cfg["solver"]["t_final"]) / float(weights["dt"]) + 2


def _path_key(cfg: Mapping[str, Any]) -> str:
    """The key that sets the number of points of the stored weight path: ``weights.dt``, or ``solver.t_final`` for
    ``layers`` (one point per layer)."""
    return "solver.t_final" if (cfg.get("weights") or {}).get("schedule") in LAYER_SCHEDULES else "weights.dt"


#: a stored weight path past this many bytes in the run file gets a note naming ``weights.dt`` (a path of 2·10⁵
#: points, ``weights.dt = 1e-5`` to t_final = 2, had written 117 MB and taken 29 s for an 8-token run of 9 frames)
WEIGHT_PATH_NOTE_BYTES = 100 * (1 << 20)


def weight_path_bytes(cfg: Mapping[str, Any]) -> float | None:
    """Bytes of the weight path a run stores in its file (``weights/B`` and ``weights/V``, ``T·H·d²`` doubles each, for
    ``T = t_final / weights.dt``, or ``⌊t_final⌋ + 1`` layers); ``None`` for a schedule that stores none up front."""
    if (points := _weight_path_points(cfg)) is None:
        return None
    d = int(cfg["model"]["d"])
    return 8.0 * 2 * _heads(cfg) * d * d * points


def weight_path_note(cfg: Mapping[str, Any]) -> str | None:
    """What to say of a stored weight path past :data:`WEIGHT_PATH_NOTE_BYTES` (``weights.dt`` makes it: the path is
    built in memory, then written, in full), ``None`` below it; a path past the memory left is refused by
    :func:`check_resources`."""
    size = weight_path_bytes(cfg)
    if size is None or not size > WEIGHT_PATH_NOTE_BYTES:
        return None
    weights, d = cfg["weights"], int(cfg["model"]["d"])
    if weights["schedule"] in LAYER_SCHEDULES:
        return (f"solver.t_final = {cfg['solver']['t_final']:g} stores the weight path at {_weight_path_points(cfg):.3g} "
                f"layers (weights.schedule = 'layers': one draw of B and V per integer time) for {_heads(cfg)} heads of "
                f"{d}×{d}: about {format_bytes(size)} in the run file and "
                f"{format_bytes(memory_estimate(cfg)['solver.t_final'])} of memory while it is built")
    why = ("the oscillating heads are computed from their formula at every step, and weights.dt sets only this record "
           "(a larger weights.dt keeps it small)" if weights["schedule"] == "oscillating" else
           f"it is the step of the {weights['schedule']} path of the heads itself")
    return (f"weights.dt = {weights['dt']:g} stores the weight path at {_weight_path_points(cfg):.3g} times (t_final / "
            f"weights.dt) for {_heads(cfg)} heads of {d}×{d}: about {format_bytes(size)} in the run file and "
            f"{format_bytes(memory_estimate(cfg)['weights.dt'])} of memory while it is built; {why}")


def memory_estimate(cfg: Mapping[str, Any]) -> dict[str, float]:
    """Working memory of a run, in bytes, by the key that makes it grow: ``model.d``, ``init.n``, ``grid.cells``, the
    stored weight path's ``weights.dt`` (``solver.t_final`` for the layers of ``weights.schedule = "layers"``)."""
    d, solver = int(cfg["model"]["d"]), cfg["solver"]
    on_grid = solver["kind"] == "grid" or (solver["kind"] == "jko" and solver.get("variant") == "grid")
    out = {"model.d": 8.0 * 6 * _heads(cfg) * d * d}  # Q, K, V, B and the stacked copies the kernels read
    if (points := _weight_path_points(cfg)) is not None:
        out[_path_key(cfg)] = 8.0 * _PATH_MATRICES * _heads(cfg) * d * d * points
    if on_grid:
        from meanfield.geometry.grid_config import cells_of_grid  # local: the geometry imports scipy

        out["grid.cells"] = float(_CELL_BYTES) * cells_of_grid(cfg["grid"])
    else:
        out["init.n"] = 8.0 * _TOKEN_COPIES * int(cfg["init"]["n"]) * d
    return out


def _steps(solver: Mapping[str, Any], grid: Mapping[str, Any] | None = None,
           noise: Mapping[str, Any] | None = None) -> tuple[str, float] | None:
    """The key and number of steps a fixed-step solver takes to ``t_final`` (the grid: at least t_final / grid.dt_max,
    and with noise at least :func:`_grid_diffusion_steps`)."""
    span = float(solver["t_final"])
    if solver["kind"] == "jko":
        return "solver.tau", span / float(solver["tau"])
    if solver["kind"] in ("particle", "zero-temperature") and solver["method"] != "rk45":
        return "solver.dt", span / float(solver["dt"])
    if solver["kind"] != "grid" or not grid:
        return None
    counts = [("grid.dt_max", span / float(grid["dt_max"]))] if float(grid.get("dt_max") or 0.0) > 0 else []
    if (diffusion := _grid_diffusion_steps(solver, grid, noise)) is not None:
        counts.append(diffusion)
    return max(counts, key=lambda item: item[1], default=None)


def _grid_diffusion_steps(solver: Mapping[str, Any], grid: Mapping[str, Any],
                          noise: Mapping[str, Any] | None) -> tuple[str, float] | None:
    r"""The key that sets γ and at least the steps of the grid's diffusion to ``t_final``: its step is at most about
    :math:`\mathrm{cfl}\,\gamma(t)\,h^2` (the Laplace–Beltrami term's :math:`\gamma^{-1}\sum_j\ell_{ij}/\delta_{ij}`
    in the CFL rule, about :math:`4/(\gamma h^2)` on a Fibonacci mesh; this takes a quarter of it), :math:`h^2=4\pi/N`
    of the coarse cells, so the steps are at least :math:`\int_0^T dt/\gamma(t)\,/(\mathrm{cfl}\,h^2)` (measured:
    1321 steps where this says 318, at γ = 1 on 2000 cells to t = 1).  The integral in closed form for a constant,
    linear, exponential or logarithmic γ(t); ``None`` without noise or with a γ(t) given by an expression.
    γ = 1e-300 had run to the step floor after its first frame (the integral over the least γ had refused an
    annealed run of 2113 steps)."""
    gamma = (noise or {}).get("gamma")
    if gamma is None:
        return None
    span, g0 = float(solver["t_final"]), float(gamma)
    anneal, final = noise.get("anneal", "none"), noise.get("gamma_final")
    key = "noise.gamma"
    if anneal == "none":
        integral = span / g0
    elif anneal == "linear" and final is not None and noise.get("duration") is not None:
        gf, duration = float(final), float(noise["duration"])
        reach = min(span, duration)
        fraction = reach / duration
        at = g0 * (1.0 - fraction) + gf * fraction  # (γ at the end of the anneal in the run: gf itself at fraction 1)
        integral = (reach / g0 if gf == g0 else duration * math.log(at / g0) / (gf - g0)) + max(span - duration, 0.0) / gf
        key = "noise.gamma_final" if gf < g0 else key
    elif anneal == "exponential" and final is not None and noise.get("anneal_rate") is not None:
        gf, rate = float(final), float(noise["anneal_rate"])
        integral = span / gf + math.log((gf + (g0 - gf) * math.exp(-rate * span)) / g0) / (rate * gf)
        key = "noise.gamma_final" if gf < g0 else key
    elif anneal == "logarithmic" and noise.get("anneal_rate") is not None:  # γ grows: at least T/γ(T)
        integral = span / (g0 * math.log(math.e + float(noise["anneal_rate"]) * span))
    else:
        return None
    h2 = 4.0 * math.pi / float(grid["cells"])
    return key, integral / (float(solver["cfl"]) * h2)


def check_resources(cfg: Mapping[str, Any], *, available: int | None = None) -> None:
    """Refuse a config whose memory exceeds what is available, or whose steps or frames are past a sane limit.

    Raises
    ------
    ConfigError
        Naming the key that makes the run too large, with the numbers (``grid.refine_factor`` for a graded mesh whose
        coarse mesh alone would fit: its fine caps make the count).
    """
    solver = cfg["solver"]
    frames = float(solver["t_final"]) / float(solver["save_every"])
    far = float(solver["t_final"]) >= 1e9  # an absurd horizon, rather than a small interval
    if not frames <= MAX_FRAMES:
        raise ConfigError(
            "solver.t_final" if far else "solver.save_every",
            # (it had read "solver.t_final: 0.25 saves …", the 0.25 being save_every's)
            f"save_every = {solver['save_every']:g} saves {frames:.3g} frames up to t_final = {solver['t_final']:g}; "
            f"the limit is {MAX_FRAMES:.0e} (save less often)",
        )
    steps, points = _steps(solver, cfg.get("grid"), cfg.get("noise")), _weight_path_points(cfg)
    counts = ([(*steps, " of its diffusion (each at most about cfl·γ·4π/grid.cells)" if steps[0].startswith("noise.") else "")]
              if steps is not None else []) + ([(_path_key(cfg), points, " of the weight path")] if points is not None else [])
    for key, count, what in counts:
        if not count <= MAX_STEPS:
            section, name = key.split(".")
            raise ConfigError(
                "solver.t_final" if far else key,
                f"{cfg[section][name]:g} takes {count:.3g} steps{what} to t_final = {solver['t_final']:g}; "
                f"the limit is {MAX_STEPS:.0e} steps",
            )
    estimate = memory_estimate(cfg)
    total = sum(estimate.values())
    limit = available_memory() if available is None else available
    if total > limit:
        key = max(estimate, key=estimate.__getitem__)
        section, name = key.split(".")
        value = cfg[section][name]
        what = {"model.d": f"d = {value} (heads of {value}×{value})", "init.n": f"{value} tokens in d = {cfg['model']['d']}",
                "grid.cells": f"{value} cells",
                "weights.dt": f"the weight path of {points or 0:.3g} points (t_final / weights.dt) for {_heads(cfg)} heads of "
                              f"{cfg['model']['d']}×{cfg['model']['d']}",
                "solver.t_final": f"the weight path of {points or 0:.3g} layers (weights.schedule = 'layers', one per "
                                  f"integer time to t_final = {value:g}) for {_heads(cfg)} heads of "
                                  f"{cfg['model']['d']}×{cfg['model']['d']}"}[key]
        heads = _heads(cfg)
        if (key == "model.d" and cfg["model"].get("num_heads") is not None and heads > 1
                and total - estimate[key] * (1.0 - 1.0 / heads) <= limit):  # one head fits: their number is what grows
            # (it had named model.d for model.num_heads = 1e8 heads of 3×3)
            key, what = "model.num_heads", f"{heads} heads of {value}×{value}"
        if key == "grid.cells" and cfg["grid"].get("family") == "icosahedral":
            what = f"the icosahedral mesh of grid.cells = {value} has {estimate[key] / _CELL_BYTES:.0f} cells (10·4^L + 2), which"
        if key == "grid.cells" and cfg["grid"].get("family") == "graded":  # the refinement, not grid.cells, may be what grows
            grid = cfg["grid"]
            cells = estimate[key] / _CELL_BYTES
            what = (f"the graded mesh of grid.cells = {value}, grid.refine_factor = {grid.get('refine_factor')}, "
                    f"grid.refine_radius = {grid.get('refine_radius')} and grid.grading = {grid.get('grading')} has about "
                    f"{cells:.3g} cells, which")
            if total - estimate[key] + _CELL_BYTES * float(value) <= limit:
                key = "grid.refine_factor"  # the coarse mesh alone would fit: the caps make the count (grid.cells had been named)
        raise ConfigError(key, f"{what} need about {format_bytes(total)}; this machine has {format_bytes(limit)} available")
    if not math.isfinite(total):  # pragma: no cover - guarded above
        raise ConfigError("model.d", "the memory estimate overflows")
