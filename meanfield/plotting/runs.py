"""The picture and the animation of a :class:`meanfield.Run`, whatever its kind."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.normalization import token_directions
from meanfield.plotting.canvas import check_picture_path
from meanfield.plotting.density import animate_density, check_map_options, plot_grid_run
from meanfield.plotting.particles import animate_particles, plot_high_dim_run, plot_particle_run

__all__ = ["plot_run", "animate_run", "run_title"]


def run_title(run: Any) -> str:
    """One line naming the run: attention kind, the causal mask, the heads' mean and the scheme where the run has
    them, β (∞ for the zero-temperature solver), size, solver (a masked run's title had read as an unmasked one's)."""
    cfg = run.config
    if cfg is None:  # a solve() run carries its model, and the solver's kind and scheme in its info
        model = run._model  # noqa: SLF001
        if model is None:
            return ""
        kind = run.info.get("solver")
        beta = "β = ∞ (zero temperature)" if kind == "zero-temperature" else f"β = {model.beta:g}"
        options = _options(getattr(model, "mask", "none"), getattr(model, "combine", "sum"), run.info.get("norm", "post"))
        size = "" if not run.frames else (f", n = {run.shape[0]} tokens" if run.kind == "particle" else f", N = {run.shape[0]} cells")
        return f"{model.attention} attention{options}, {beta}{size}" + ("" if kind is None else f", {kind} solver")
    m, s = cfg["model"], cfg["solver"]
    beta = "β = ∞ (zero temperature)" if s["kind"] == "zero-temperature" else f"β = {m['beta']:g}"
    size = f"n = {run.shape[0]} tokens" if run.kind == "particle" and run.frames else f"N = {_cells(run, cfg)} cells"
    options = _options(m.get("mask", "none"), m.get("combine", "sum"), m.get("norm", "post"))
    return f"{m['attention']} attention{options}, {beta}, {size}, {s['kind']} solver"


def _options(mask: str, combine: str, norm: str) -> str:
    """The title's parts for what is not the default: ``, causal mask``, ``, combine = mean``, ``, norm = peri``
    (arXiv 2510.22026's schemes); empty for an unmasked Post-LN run whose heads' fields are summed."""
    parts = (f"{mask} mask" if mask != "none" else "", f"combine = {combine}" if combine != "sum" else "",
             f"norm = {norm}" if norm != "post" else "")
    return "".join(f", {part}" for part in parts if part)


def _attention(run: Any) -> str | None:
    """The run's ``model.attention`` (its config's, or a solve() run's model's); ``None`` where it has neither."""
    if run.config is not None:
        return run.config["model"].get("attention")
    model = run._model  # noqa: SLF001
    return None if model is None else model.attention


def _cells(run: Any, cfg: dict[str, Any]) -> int:
    """The mesh's cells (a graded mesh has more than grid.cells): the run's stored cell points, one per cell (no mesh
    is built for a title)."""
    points = run.static.get("points")
    return int(points.shape[0]) if points is not None else int(cfg["grid"]["cells"])


def _check_frames(run: Any) -> None:
    if run.frames == 0:
        raise ValueError("the run has no saved frame to draw yet")


#: the options of :meth:`meanfield.Run.plot` and :meth:`meanfield.Run.animate`, by kind of run
PLOT_OPTIONS = {"particle": ("snapshots", "title", "dpi"), "grid": ("snapshots", "title", "dpi", "log")}
ANIMATE_OPTIONS = {"particle": ("fps", "dpi"),
                   "grid": ("fps", "dpi", "view", "orthographic_view", "log", "cmap", "resolution", "fixed_scale")}


def _check_values(options: dict[str, Any], path: Any) -> None:
    """The values every kind shares, and a grid's map options, named when wrong before anything is drawn (``fps=0`` had
    been a ZeroDivisionError after every frame was drawn, ``dpi=0`` an IndexError, ``title=5`` and ``path=5`` stray
    TypeErrors, ``resolution=0`` a GIF of empty maps)."""
    for name in ("fps", "dpi"):
        if name in options:
            value = options[name]
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if "title" in options and not isinstance(options["title"], str):
        raise TypeError(f"title must be a string, got {type(options['title']).__name__}")
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file name (str or path), got {type(path).__name__}")
    check_map_options(options)  # a grid's view, orthographic_view, resolution, log, fixed_scale


def _check_options(options: dict[str, Any], known: tuple[str, ...], method: str, kind: str) -> None:
    """A keyword the method does not take, named against the method (it had been a TypeError of an inner function)."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"Run.{method}() of a {kind} run got unknown option{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(map(repr, unknown))}; it takes {', '.join(known)}")


def plot_run(run: Any, path: str | Path | None = None, **options: Any) -> Any:
    """:meth:`meanfield.Run.plot`: the cloud on S², in principal components (d > 3), or the grid density.

    ``snapshots`` (the number of times drawn), ``title`` and ``dpi`` for every run; ``log`` (colour scale) for grids.
    """
    _check_frames(run)
    if run.kind == "grid" and "frames" in options and "snapshots" not in options:  # the grid figure's own name for it
        options["snapshots"] = options.pop("frames")
    _check_options(options, PLOT_OPTIONS[run.kind], "plot", run.kind)
    _check_values(options, path)
    snapshots = options.get("snapshots", 1)  # checked for both kinds (a grid's had failed inside NumPy)
    if isinstance(snapshots, bool) or not isinstance(snapshots, (int, np.integer)) or snapshots < 1:
        raise ValueError(f"snapshots must be an integer ≥ 1 (the number of panels), got {snapshots!r}")
    check_picture_path(path)
    title = options.pop("title", run_title(run))
    if run.kind == "grid":
        if "snapshots" in options:
            options["frames"] = options.pop("snapshots")
        return plot_grid_run(run.mesh(), run.t, run.mass, path, diagnostics=run.diagnostics, title=title,
                             attention=_attention(run), **options)
    x = token_directions(run.x)  # the tokens r·θ of Pre-LN and Peri-LN (meanfield.normalization) by their directions θ
    weights = run.token_masses  # token masses (a run continued from a grid frame): drawn by mass
    if run.shape[1] == 3:
        return plot_particle_run(run.t, x, path, diagnostics=run.diagnostics, title=title, weights=weights,
                                 attention=_attention(run), **options)
    return plot_high_dim_run(run.t, x, path, diagnostics=run.diagnostics, title=title, weights=weights, **options)


def animate_run(run: Any, path: str | Path | None = None, **options: Any) -> Any:
    """:meth:`meanfield.Run.animate`: one frame per saved time (options: :data:`ANIMATE_OPTIONS`)."""
    _check_frames(run)
    _check_options(options, ANIMATE_OPTIONS[run.kind], "animate", run.kind)
    _check_values(options, path)
    check_picture_path(path, animation=True)
    if run.kind == "grid":
        return animate_density(run.mesh(), run.t, run.mass, path, **options)
    return animate_particles(run.t, token_directions(run.x), path, weights=run.token_masses, **options)
