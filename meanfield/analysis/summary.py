"""A few lines that say what a run is and what happened in it (``meanfield info``, :meth:`meanfield.Run.summary`)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["run_summary", "solver_line", "model_line", "grid_clusters", "grid_support", "grid_final_line", "SUMMARY_SERIES"]

#: diagnostics shown as ``first -> last`` when a run recorded them
SUMMARY_SERIES = ("energy", "energy_theta", "rayleigh", "sphere_error", "max_speed", "w2_target", "mass_error", "authors_G2", "r_mean")

#: tokens with ⟨x_i, x_j⟩ ≥ 1 − CLUSTER_TOL are one cluster in the summary
CLUSTER_TOL = 1e-3
#: the cells holding this share of the mass are the support whose connected components a grid summary counts
GRID_SUPPORT_SHARE = 0.9


#: the ``[model]`` keys the model line names where they differ from their default (after ``direction``), in order
MODEL_LINE_OPTIONS = (("mask", "none"), ("combine", "sum"))
#: the kernel's keys the model line names where they differ from their default (after the scheme), in order
KERNEL_OPTIONS = (("backend", "auto"), ("precision", "float64"))


def model_line(cfg: dict[str, Any]) -> str:
    """``d, β, attention, direction``, then what is not the default: ``mask``, ``combine``, ``norm`` (with nGPT's α),
    ``backend`` and ``precision``; β = ∞ for the zero-temperature solver, which has no temperature.

    A masked run had read as an unmasked one, and ``combine = "mean"`` as the sum."""
    m, s = cfg["model"], cfg["solver"]
    beta = "∞ (zero-temperature limit)" if s["kind"] == "zero-temperature" else f"{m['beta']:g}"
    options = "".join(f" {key}={m[key]}" for key, default in MODEL_LINE_OPTIONS if m.get(key, default) != default)
    alpha = m.get("ngpt_alpha")
    norm = "" if m.get("norm", "post") == "post" else f" norm={m['norm']}" + (
        f" α={alpha:g}" if m["norm"] == "ngpt" and isinstance(alpha, (int, float)) else "")
    # the kernel's arithmetic where it is not the default (info had not said a run was float32)
    kernel = "".join(f" {key}={m[key]}" for key, default in KERNEL_OPTIONS if m.get(key, default) != default)
    return f"d={m['d']} β={beta} attention={m['attention']} direction={m['direction']}{options}{norm}{kernel}"


def _solve_model_section(run: Any, model: Any) -> dict[str, Any]:
    """The ``[model]`` and ``[solver]`` kind that :func:`model_line` reads, for a run of :func:`meanfield.solve`: from
    its :class:`~meanfield.Model` (mask, combine, kernel) and its solver (the scheme, in ``info``; nGPT's α, in the
    solver's options). Its model line had shown neither the mask nor the scheme."""
    options = run.info.get("solver_options")
    options = options if isinstance(options, dict) else {}
    section = {key: getattr(model, key, default) for key, default in (*MODEL_LINE_OPTIONS, *KERNEL_OPTIONS)}
    section.update(d=model.d, beta=model.beta, attention=model.attention, direction=model.direction,
                   norm=run.norm, ngpt_alpha=options.get("ngpt_alpha"))
    return {"model": section, "solver": {"kind": run.info.get("solver")}}


def solver_line(cfg: dict[str, Any]) -> str:
    """The numerical parameters that matter for this solver (a JKO run has τ, not an RK step)."""
    s = cfg["solver"]
    kind = s["kind"]
    if kind == "jko":
        text = f"jko variant={s['variant']} τ={s['tau']:g} mobility={s['mobility']} tol={s['tol']:g}"
    elif kind == "grid":
        grid = cfg.get("grid", {})
        text = f"grid {grid.get('cells')} cells ({grid.get('family')}) method={s['method']} cfl={s['cfl']:g}"
        if grid.get("order") is not None:
            text += f" order={grid['order']}"
    elif s["method"] == "rk45":
        text = f"{kind} method=rk45 rtol={s['rtol']:g} atol={s['atol']:g}"
    else:
        text = f"{kind} method={s['method']} dt={s['dt']:g}"
    return f"{text} t_final={s['t_final']:g}"


def noise_line(cfg: dict[str, Any]) -> str | None:
    """The ``[noise]`` of a noisy run (γ, its annealing, the seed of the particles' increments); ``None`` without noise."""
    noise = cfg.get("noise") or {}
    if noise.get("gamma") is None:
        return None
    text = f"γ={noise['gamma']:g}"
    anneal = noise.get("anneal", "none")
    if anneal != "none":
        details = {"linear": ("gamma_final", "duration"), "exponential": ("gamma_final", "anneal_rate"),
                   "logarithmic": ("anneal_rate",), "expression": ("anneal_expr",)}.get(anneal, ())
        text += f" anneal={anneal}" + "".join(f" {key}={noise[key]:g}" if isinstance(noise[key], (int, float)) else f" {key}={noise[key]!r}"
                                              for key in details if noise.get(key) is not None)
    if cfg["solver"]["kind"] == "particle":
        text += f" seed={noise.get('seed', 0)}"
    return text


def grid_support(mesh: Any, mass: np.ndarray, *, share: float = GRID_SUPPORT_SHARE) -> np.ndarray:
    """The smallest set of cells that holds ``share`` of the mass (the densest first), as a boolean mask."""
    m = np.asarray(mass, dtype=float)
    rho = m / mesh.areas
    order = np.argsort(-rho, kind="stable")
    keep_count = int(np.searchsorted(np.cumsum(m[order]), share * m.sum()) + 1)
    keep = np.zeros(m.size, dtype=bool)
    keep[order[: min(keep_count, m.size)]] = True
    return keep


def grid_clusters(mesh: Any, mass: np.ndarray, *, share: float = GRID_SUPPORT_SHARE) -> int:
    """Connected pieces of the smallest set of cells that holds ``share`` of the mass (:func:`grid_support`)."""
    return _pieces(mesh, grid_support(mesh, mass, share=share))


def _pieces(mesh: Any, keep: np.ndarray) -> int:
    """Connected pieces of the cells ``keep`` (a boolean mask) along the mesh's edges."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    i, j = mesh.edges[:, 0], mesh.edges[:, 1]
    both = keep[i] & keep[j]
    index = np.flatnonzero(keep)
    local = np.full(keep.size, -1)
    local[index] = np.arange(index.size)
    graph = coo_matrix((np.ones(int(both.sum())), (local[i[both]], local[j[both]])), shape=(index.size, index.size))
    return int(connected_components(graph, directed=False)[0])


def _jko_counts(run: Any) -> dict[str, Any]:
    """A JKO run's steps, inner iterations, fallbacks and largest residual over every saved interval: from the frames'
    diagnostics, which a resumed run (even after SIGKILL) keeps for every session, else from ``run.info``."""
    counts: dict[str, Any] = {}
    for key in ("jko_steps", "jko_iterations", "jko_fallbacks"):
        series = run.diagnostics.get(key)
        counts[key] = int(np.nansum(series)) if series is not None and np.isfinite(series).any() else run.info.get(key, 0)
    residual = run.diagnostics.get("jko_residual")
    counts["jko_max_residual"] = (float(np.nanmax(residual)) if residual is not None and np.isfinite(residual).any()
                                  else run.info.get("jko_max_residual", math.nan))
    return counts


def grid_final_line(mesh: Any, mass: np.ndarray) -> str:
    """The ``final:`` line of a grid run: its clusters, or that it has none yet.

    The cells that hold 90 % of the mass cover 90 % of the sphere under a uniform density; where they
    cover half of it or more the density is called spread out (it had been "1 cluster(s)"), and
    otherwise the connected pieces of those cells are its clusters."""
    keep = grid_support(mesh, mass)
    cover = float(mesh.areas[keep].sum() / mesh.areas.sum())
    held = f"the cells holding {GRID_SUPPORT_SHARE:.0%} of the mass"
    if cover >= 0.5:
        return (f"final:     spread out, no cluster ({held} cover {cover:.0%} of the sphere; "
                f"{GRID_SUPPORT_SHARE:.0%} under a uniform density)")
    pieces = _pieces(mesh, keep)
    return f"final:     {pieces} cluster(s) (connected pieces of {held}, on {cover:.1%} of the sphere)"


def _head_count(run: Any) -> int | None:
    """The number of heads of a run whose config names them by a string (a checkpoint's layer), from its model; None
    where the model cannot be built here (the checkpoint moved)."""
    from meanfield.errors import ConfigError

    try:
        return int(run.model.heads.at(float(run.t[0]) if run.frames else 0.0).H)
    except (ConfigError, OSError):
        return None


def _status(run: Any) -> str:
    reason = run.stop_reason or "n/a"
    return f"{run.status} ({reason})"


def _sessions_note(info: dict[str, Any]) -> str:
    """What the step count of a resumed run sums: the sessions that recorded their counters, each counting the steps
    it took, so the steps after a session's last committed frame count twice (taken again by the next session)."""
    def count(key: str) -> int:
        value = info.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    sessions, unrecorded = count("sessions"), count("unrecorded_sessions")
    note = ""
    if sessions > 1:
        note = (f", over {sessions} sessions (a resumed session takes again, and counts again, the steps after the last "
                "frame the session before it committed)")
    if unrecorded:
        sessions_were = "1 more session stopped without recording its counters (killed, out of disk, or a second Ctrl-C) and is" if unrecorded == 1 \
            else f"{unrecorded} more sessions stopped without recording their counters (killed, out of disk, or a second Ctrl-C) and are"
        note += f"; {sessions_were} not in them"
    return note


def _solve_section(run: Any) -> dict[str, Any] | None:
    """The ``[solver]``, ``[grid]`` and ``[noise]`` of a run of :func:`meanfield.solve`, from its solver's options
    (``info["solver_options"]``); ``None`` for a run with a config, or a solver that is not one of the four."""
    options = run.info.get("solver_options")
    if run.config is not None or not isinstance(options, dict):
        return None
    kind = options.get("kind")
    needed = {"particle": ("method", "dt", "rtol", "atol"), "zero-temperature": ("method", "dt", "rtol", "atol"),
              "grid": ("method", "cfl"), "jko": ("tau", "mobility", "tol", "variant")}.get(kind)
    if needed is None or any(key not in options for key in needed):
        return None
    grid = {}
    if kind == "grid":
        mesh = getattr(run, "_mesh", None)
        cells = run.static["points"].shape[0] if "points" in run.static else "?"
        grid = {"cells": cells, "family": getattr(mesh, "family", "custom"), "order": options.get("order")}
    return {"solver": options, "grid": grid, "noise": options.get("noise") or {}}


def run_summary(run: Any) -> str:
    """The lines ``meanfield info`` prints for a :class:`meanfield.Run` (a run of :func:`meanfield.solve`, which has
    no config, shows its model instead: it had shown its status and frame count only)."""
    cfg = run.config
    model = getattr(run, "_model", None) if cfg is None else None
    lines = []
    if run.path is not None:
        lines.append(f"file:      {run.path}")
    lines.append(f"status:    {_status(run)}")
    if cfg is None and model is None:
        lines.append(f"frames:    {run.frames}")
        return "\n".join(lines)
    section = cfg if cfg is not None else _solve_section(run)  # the config, or a solve() run's solver options
    if cfg is not None:
        lines.append(f"model:     {model_line(cfg)}")
        heads = cfg["model"]["heads"]
        count = len(heads) if isinstance(heads, list) and heads else (heads if isinstance(heads, str) else 1)
        if cfg["model"].get("num_heads") is not None and not isinstance(heads, str):
            count = cfg["model"]["num_heads"]
        if isinstance(heads, str):  # a checkpoint's heads: their number, and where they come from
            count = heads if (number := _head_count(run)) is None else f"{number} ({heads})"
        lines.append(f"heads:     {count}")
        lines.append(f"solver:    {solver_line(cfg)}")
        if (noisy := noise_line(cfg)) is not None:
            lines.append(f"noise:     {noisy}")
    else:
        lines.append(f"model:     {model_line(_solve_model_section(run, model))}")
        lines.append(f"heads:     {model.heads.at(float(run.t[0]) if run.frames else 0.0).H}")
        if section is not None:  # a run of meanfield.solve: its solver's options
            lines.append(f"solver:    {solver_line(section)}")
            if (noisy := noise_line(section)) is not None:
                lines.append(f"noise:     {noisy}")
    t = run.t
    span = f"t in [{t[0]:.4g}, {t[-1]:.4g}]" if run.frames else "no frame yet"
    if run.kind == "particle":
        n = run.shape[0] if run.frames else (cfg["init"]["n"] if cfg is not None else "?")
        lines.append(f"frames:    {run.frames}  {span}  tokens n={n}")
        if run.frames and not np.all(np.isfinite(run.final)):  # a run never commits such a frame: a damaged file
            lines.append("final:     the last frame is not finite (NaN or inf): the file was altered or damaged")
        elif run.frames:
            from meanfield.analysis.diagnostics import cluster_statistics

            from meanfield.normalization import token_directions  # Pre-LN and Peri-LN tokens r·θ: their directions θ

            stats = cluster_statistics(token_directions(run.final), tol=CLUSTER_TOL)
            lines.append(
                f"final:     {int(stats['n_clusters'])} cluster(s) (tokens with <x_i,x_j> >= {1 - CLUSTER_TOL:g} joined), "
                f"min <x_i,x_j> = {stats['min_inner']:.6f} (1 = one point)"
            )
    else:
        cells = run.static["points"].shape[0] if "points" in run.static else (cfg["grid"]["cells"] if cfg is not None else "?")
        lines.append(f"frames:    {run.frames}  {span}  cells N={cells}")
        if run.frames:
            lines.append(grid_final_line(run.mesh(), run.final))
    kind = section["solver"]["kind"] if section is not None else None
    if kind == "jko" and ("jko_steps" in run.info or "jko_steps" in run.diagnostics):
        halved = int(run.info.get("halvings", 0))
        # each save interval takes ceil(Δt/τ) equal steps: τ itself only where it divides the interval (it had said "of τ")
        steps = f"of at most τ={section['solver']['tau']:g}" + (f" ({halved} halved)" if halved else "")
        counts = _jko_counts(run)
        rejected = run.info.get("jko_rejected_steps", 0)
        rejected = (f" (and {run.info.get('jko_rejected_iterations', 0)} in {rejected} step(s) that missed solver.tol "
                    "and were halved)") if isinstance(rejected, int) and rejected > 0 else ""
        lines.append(f"steps:     {counts['jko_steps']} JKO steps {steps}, {counts['jko_iterations']} inner "
                     f"iterations{rejected}, {counts['jko_fallbacks']} fallbacks, largest residual {counts['jko_max_residual']:.2g}")
        frozen = run.info.get("jko_frozen_steps", 0)
        if isinstance(frozen, int) and frozen > 0:  # (their residual is the frozen problem's: nothing had said so)
            lines.append(f"           {frozen} step(s) kept the frozen mobility: the implicit iteration did not settle there")
    elif kind == "grid" and "grid_steps" in run.info:
        lines.append(f"steps:     {run.info['grid_steps']} grid steps, {run.info.get('rejections', 0)} rejected and halved")
    elif "steps" in run.info and kind in ("particle", "zero-temperature") and isinstance(run.info.get("steps"), int):
        lines.append(f"steps:     {run.info['steps']} {section['solver']['method']} steps")
    if kind != "jko" and lines[-1].startswith("steps:"):
        lines[-1] += _sessions_note(run.info)
    energy = run.diagnostics.get("energy")
    overflowed = energy is not None and bool(np.any(np.isposinf(energy)))
    for key in SUMMARY_SERIES + (("log_energy",) if overflowed else ()):  # ln E where E exceeds the floats
        series = run.diagnostics.get(key)
        if series is None or not len(series):
            continue
        finite = series[np.isfinite(series)]
        if finite.size:
            digits = 12 if key == "log_energy" else 6  # ln E ~ β: its changes are in the later digits
            lines.append(f"{key + ':':<14}{finite[0]:.{digits}g} -> {finite[-1]:.{digits}g}")
    wall = run.info.get("wall_time")
    if isinstance(wall, (int, float)) and math.isfinite(wall):
        lines.append(f"wall time: {wall:.3g} s")
    return "\n".join(lines)
