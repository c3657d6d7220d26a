r"""Pictures of grid densities on :math:`S^2`: maps, discs, cells in 3-D, animations.

A grid measure with cell masses :math:`m_c` is drawn as its piecewise-constant
density

.. math::

    \rho(x) = m_c / A_c \quad\text{for } x\in\Omega_c ,

sampled on a raster by nearest generator (so every Voronoi cell is a flat patch
of colour), in three views: a Mollweide map of the whole sphere
(:func:`plot_density_mollweide`), an orthographic view of one hemisphere
(:func:`plot_density_orthographic`), and the Voronoi cells as coloured polygons
in 3D (:func:`plot_density_3d`).  :func:`plot_density` puts the three side by
side, :func:`animate_density` writes a GIF of a run, and
:func:`plot_particles_sphere` draws a particle cloud in 3D.

Everything works with the Agg backend: figures are made with
``matplotlib.figure.Figure`` (never ``pyplot``'s global state, never ``show``)
and written with ``savefig``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colors as mcolors
from matplotlib.animation import FuncAnimation
from matplotlib.figure import Figure

from meanfield.checks import check_flag
from meanfield.geometry.mesh import SphericalMesh
from meanfield.plotting.canvas import check_frames, check_picture_path, facing_rotation, facing_view, save, save_animation
from meanfield.plotting.curves import shown_energy

__all__ = [
    "plot_density",
    "plot_density_mollweide",
    "plot_density_orthographic",
    "plot_density_3d",
    "animate_density",
    "plot_grid_run",
    "check_map_options",
]


# ----------------------------------------------------------------------------- helpers


def _density(mesh: SphericalMesh, mass: np.ndarray) -> np.ndarray:
    mass = np.asarray(mass, dtype=float)
    if mass.shape != (mesh.N,):
        raise ValueError(f"mass must have shape ({mesh.N},), got {mass.shape}")
    if not np.all(np.isfinite(mass)):
        raise ValueError(f"mass holds {int(np.sum(~np.isfinite(mass)))} non-finite values (NaN or ±inf) of {mesh.N}")
    return mass / mesh.areas


def _norm(values: np.ndarray, *, vmin: float | None, vmax: float | None, log: bool) -> mcolors.Normalize:
    finite = values[np.isfinite(values)]
    hi = float(np.max(finite)) if vmax is None else vmax
    if log:
        pos = finite[finite > 0]
        lo = float(np.min(pos)) if vmin is None and pos.size else (vmin or hi * 1e-6)
        lo = max(lo, hi * 1e-8) if hi > 0 else 1e-12
        return mcolors.LogNorm(vmin=lo, vmax=max(hi, lo * 10))
    lo = 0.0 if vmin is None else vmin
    return mcolors.Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1.0)


#: the colour of cells without mass: a log scale had masked them, drawn transparent like the background
NO_MASS_COLOUR = "0.85"


def _colours(cmap: str) -> Any:
    """The colormap ``cmap`` with :data:`NO_MASS_COLOUR` below its range."""
    import matplotlib

    return matplotlib.colormaps[cmap].with_extremes(under=NO_MASS_COLOUR)


def _shown(rho: np.ndarray, norm: mcolors.Normalize) -> np.ndarray:
    """Densities as drawn: on a log scale, cells without mass just below its range (:data:`NO_MASS_COLOUR`), and cells
    with mass below it at its lowest colour (they had been drawn grey, as if empty)."""
    if not isinstance(norm, mcolors.LogNorm):
        return rho
    return np.where(rho > 0, np.maximum(rho, norm.vmin), 0.5 * norm.vmin)


#: the widest raster a map is drawn on (longitudes; 1440 × 720 pixels of 0.25°, or 1440² across an orthographic disc):
#: memory (the pixels' cell indices) and drawing time stay bounded whatever the mesh
MAX_RASTER = 1440


def _raster_width(mesh: SphericalMesh, *, floor: int, disc: bool = False) -> tuple[int, str]:
    r"""Pixels across a map of ``mesh`` such that a pixel is at most half the side :math:`\sqrt{A_c}` of the smallest
    cell, at least ``floor`` and at most :data:`MAX_RASTER`; and a note for the figure when the cap leaves cells smaller
    than two pixels (else ``""``).

    A fixed 240-pixel map had missed most cap cells of a graded mesh (side ≈ 0.009 rad, pixel 0.026 rad): its peak
    density, the top of the colour bar, was drawn nowhere.  ``disc``: an orthographic disc (diameter 2) rather than a
    longitude–latitude map (width :math:`2\pi`).
    """
    side = float(np.sqrt(np.min(mesh.areas)))
    span = 2.0 if disc else 2.0 * math.pi
    need = math.ceil(2.0 * span / side) if side > 0 else MAX_RASTER + 1
    width = min(max(int(floor), need), MAX_RASTER)
    if need <= MAX_RASTER:
        return width, ""
    pixel = math.degrees(span / width)
    return width, f"; map raster capped at {width} pixels ({pixel:.2g}°): cells smaller than {2 * pixel:.2g}° are not all drawn"


def _grey_caption(rho: np.ndarray, *, log: bool) -> str:
    """What the grey (:data:`NO_MASS_COLOUR`, below the colour range) of a map means, ``""`` where none is drawn: cells
    of negative mass (a linear scale starts at 0; only possible without a limiter) and, on a log scale, empty cells."""
    negative, empty = bool(np.any(rho < 0)), log and bool(np.any(rho == 0))
    if negative and empty:
        return "; grey: no mass or negative mass"
    return "; grey: negative mass" if negative else "; grey: no mass" if empty else ""


def _bar_ticks(bar: Any, norm: mcolors.Normalize) -> None:
    """Readable ticks on a horizontal log colour bar: no labels on its minor ticks (over about a decade they had been
    printed over each other, "2×10⁻³×10⁻²4×10⁻²…"), and, when its range holds fewer than two powers of ten, labelled
    ticks at its ends and their geometric middle (else at most one label)."""
    if not isinstance(norm, mcolors.LogNorm):
        return
    from matplotlib.ticker import NullFormatter

    lo, hi = float(norm.vmin), float(norm.vmax)
    if math.floor(math.log10(hi)) - math.ceil(math.log10(lo)) < 1:
        ticks = np.geomspace(lo, hi, 3)
        bar.set_ticks(ticks, labels=[f"{v:.2g}" for v in ticks])
    bar.ax.xaxis.set_minor_formatter(NullFormatter())


def _lonlat_raster(mesh: SphericalMesh, nlon: int, rotation: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cell index of every pixel of a (nlon/2, nlon) longitude–latitude raster, and the pixel edges.

    With ``rotation`` (rows: the map's axes in sphere coordinates), the map shows the sphere turned by it.
    """
    nlat = max(2, nlon // 2)
    lon_e = np.linspace(-math.pi, math.pi, nlon + 1)
    lat_e = np.linspace(-math.pi / 2, math.pi / 2, nlat + 1)
    lon_c = 0.5 * (lon_e[1:] + lon_e[:-1])
    lat_c = 0.5 * (lat_e[1:] + lat_e[:-1])
    LON, LAT = np.meshgrid(lon_c, lat_c)
    pts = np.stack([np.cos(LAT) * np.cos(LON), np.cos(LAT) * np.sin(LON), np.sin(LAT)], axis=-1).reshape(-1, 3)
    if rotation is not None:
        pts = pts @ np.asarray(rotation, dtype=float)
    return mesh.cell_of(pts).reshape(nlat, nlon), lon_e, lat_e


def check_map_options(options: dict[str, Any]) -> None:
    """The map options among ``options`` (``view``, ``orthographic_view``, ``resolution``, ``log``, ``fixed_scale``),
    each named when wrong before anything is drawn: ``orthographic_view=(1, 0)`` had been an IndexError, ``(0, 0, 0)``
    "'x' must be finite", ``resolution=0`` a GIF of empty maps, ``log="no"`` a log scale, and ``orthographic_view``
    with the Mollweide view was ignored without a word.

    Raises
    ------
    ValueError
        Naming the option and the value it got.
    """
    for name in ("log", "fixed_scale"):
        if name in options:
            check_flag(name, options[name])
    if "resolution" in options and options["resolution"] is not None:
        value = options["resolution"]
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 8:
            raise ValueError(f"resolution must be an integer ≥ 8 (pixels across the map), got {value!r}")
    if options.get("orthographic_view") is not None:
        if options.get("view", "mollweide") != "orthographic":
            raise ValueError(f"orthographic_view is the direction of view='orthographic'; the view is "
                             f"{options.get('view', 'mollweide')!r} (give view='orthographic', or drop orthographic_view)")
        value = options["orthographic_view"]
        try:
            direction = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            direction = np.zeros(0)
        if direction.shape != (3,) or not np.all(np.isfinite(direction)) or not np.any(direction):
            raise ValueError(f"orthographic_view must be 3 finite numbers, not all 0 (the direction towards the viewer), "
                             f"got {value!r}")


def _rotation_to(view: Sequence[float]) -> np.ndarray:
    """Orthonormal rows ``(e1, e2, e3)`` with ``e3`` the viewing direction (towards the viewer)."""
    e3 = np.asarray(view, dtype=float)
    e3 = e3 / np.linalg.norm(e3)
    helper = np.array([0.0, 0.0, 1.0]) if abs(e3[2]) < 0.9 else np.array([0.0, 1.0, 0.0])
    e1 = np.cross(helper, e3)
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(e3, e1)
    return np.stack([e1, e2, e3])


def _ortho_raster(mesh: SphericalMesh, view: Sequence[float], pixels: int) -> np.ma.MaskedArray:
    """Cell index of every pixel of the visible disc (masked outside)."""
    u = np.linspace(-1.0, 1.0, pixels)
    U, V = np.meshgrid(u, u)
    inside = U**2 + V**2 <= 1.0
    W = np.sqrt(np.clip(1.0 - U**2 - V**2, 0.0, None))
    rot = _rotation_to(view)
    local = np.stack([U, V, W], axis=-1)[inside]
    cells = np.zeros(U.shape, dtype=np.int64)
    cells[inside] = mesh.cell_of(local @ rot)
    return np.ma.masked_array(cells, mask=~inside)


# ----------------------------------------------------------------------------- views


def plot_density_mollweide(
    mesh: SphericalMesh,
    mass: np.ndarray,
    path: str | Path | None = None,
    *,
    ax: Any = None,
    title: str | None = None,
    cmap: str = "viridis",
    log: bool = False,
    vmin: float | None = None,
    vmax: float | None = None,
    resolution: int | None = None,
    colorbar: bool = True,
    rotation: np.ndarray | str | None = None,
    dpi: int = 120,
) -> Figure:
    r"""Mollweide map of the density :math:`\rho=m_c/A_c` (longitude :math:`\operatorname{atan2}(y,x)`, latitude :math:`\arcsin z`).

    Parameters
    ----------
    mesh : SphericalMesh
    mass : (N,) array
        Cell masses.
    path : str or Path, optional
        Write the figure there (PNG, PDF, …).
    ax : matplotlib Axes, optional
        An axes with ``projection="mollweide"`` to draw into (then ``path`` saves its figure).
    log : bool
        Logarithmic colour scale (for concentrated densities).
    resolution : int, optional
        Raster width in pixels (longitudes); by default at least 360 and fine enough for the mesh's smallest cells
        (a pixel at most half a cell's side, up to :data:`MAX_RASTER`).
    rotation : (3, 3) array or "facing", optional
        Turn the sphere before mapping it (rows: the map's axes); ``"facing"``
        puts the mass in the middle of the map, away from its edge.

    Returns
    -------
    Figure
    """
    rho = _density(mesh, mass)
    if isinstance(rotation, str) and rotation != "facing":
        raise ValueError(f"rotation must be a (3, 3) array or 'facing', got {rotation!r}")
    if isinstance(rotation, str):
        check_frames(np.asarray(mass, dtype=float)[None], [], name="mass", masses=True)  # (facing needs some mass)
        rotation = facing_rotation(mesh.points, np.asarray(mass, dtype=float))
    if ax is None:
        fig = Figure(figsize=(8, 4.5))
        ax = fig.add_subplot(111, projection="mollweide")
    fig = ax.figure
    if resolution is None:
        resolution = _raster_width(mesh, floor=360)[0]
    norm = _norm(rho, vmin=vmin, vmax=vmax, log=log)
    mappable = _draw_map(ax, _shown(rho, norm), _lonlat_raster(mesh, resolution, rotation), norm=norm, cmap=cmap)
    if title:
        ax.set_title(title)
    if colorbar:
        bar = fig.colorbar(mappable, ax=ax, orientation="horizontal", fraction=0.05, pad=0.06,
                           label="density m/A" + (" (log scale)" if log else ""))
        _bar_ticks(bar, norm)
    save(fig, path, dpi=dpi)
    return fig


def _draw_map(ax: Any, shown: np.ndarray, raster: tuple[np.ndarray, np.ndarray, np.ndarray], *, norm: mcolors.Normalize,
              cmap: str) -> Any:
    """Cell values ``shown`` on the Mollweide axes ``ax`` through the raster ``(cells, lon_e, lat_e)`` of
    :func:`_lonlat_raster`; the mappable."""
    cells, lon_e, lat_e = raster
    mappable = ax.pcolormesh(lon_e, lat_e, shown[cells], cmap=_colours(cmap), norm=norm, shading="flat", rasterized=True)
    ax.grid(True, alpha=0.3)
    ax.set_xticklabels([])
    return mappable


def plot_density_orthographic(
    mesh: SphericalMesh,
    mass: np.ndarray,
    path: str | Path | None = None,
    *,
    view: Sequence[float] = (1.0, 1.0, 1.0),
    ax: Any = None,
    title: str | None = None,
    cmap: str = "viridis",
    log: bool = False,
    vmin: float | None = None,
    vmax: float | None = None,
    pixels: int = 400,
    colorbar: bool = True,
    dpi: int = 120,
) -> Figure:
    r"""Orthographic view of the hemisphere facing ``view``: pixel :math:`(u,v)` shows
    the density at :math:`u e_1 + v e_2 + \sqrt{1-u^2-v^2}\,e_3` (:math:`e_3` = ``view``)."""
    rho = _density(mesh, mass)
    if ax is None:
        fig = Figure(figsize=(5, 5))
        ax = fig.add_subplot(111)
    fig = ax.figure
    cells = _ortho_raster(mesh, view, pixels)
    norm = _norm(rho, vmin=vmin, vmax=vmax, log=log)
    image = np.ma.masked_array(_shown(rho, norm)[cells.filled(0)], mask=cells.mask)  # (masked: off the disc)
    mappable = ax.imshow(image, origin="lower", extent=(-1, 1, -1, 1), cmap=_colours(cmap), norm=norm, interpolation="nearest")
    theta = np.linspace(0, 2 * math.pi, 200)
    ax.plot(np.cos(theta), np.sin(theta), color="k", lw=0.8)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.set_title(title or f"view {tuple(round(float(v), 2) for v in view)}")
    if colorbar:
        fig.colorbar(mappable, ax=ax, fraction=0.046, pad=0.04)
    save(fig, path, dpi=dpi)
    return fig


def plot_density_3d(
    mesh: SphericalMesh,
    mass: np.ndarray,
    path: str | Path | None = None,
    *,
    ax: Any = None,
    title: str | None = None,
    cmap: str = "viridis",
    log: bool = False,
    vmin: float | None = None,
    vmax: float | None = None,
    elev: float = 25.0,
    azim: float = 45.0,
    colorbar: bool = True,
    dpi: int = 120,
) -> Figure:
    """The Voronoi cells as 3D polygons (``Poly3DCollection``), coloured by density ``m/A``."""
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    rho = _density(mesh, mass)
    if ax is None:
        fig = Figure(figsize=(6, 6))
        ax = fig.add_subplot(111, projection="3d")
    fig = ax.figure
    norm = _norm(rho, vmin=vmin, vmax=vmax, log=log)
    polys = [mesh.vertices[reg] for reg in mesh.regions]
    import matplotlib

    cm = _colours(cmap)
    facecolors = cm(norm(np.minimum(_shown(rho, norm), norm.vmax)))
    coll = Poly3DCollection(polys, facecolors=facecolors, edgecolors="none", linewidths=0.0)
    ax.add_collection3d(coll)
    for setter in (ax.set_xlim, ax.set_ylim, ax.set_zlim):
        setter(-1, 1)
    ax.set_box_aspect((1, 1, 1), zoom=1.35)
    ax.view_init(elev=elev, azim=azim)
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    if colorbar:
        sm = matplotlib.cm.ScalarMappable(norm=norm, cmap=cm)
        sm.set_array(rho)
        fig.colorbar(sm, ax=ax, fraction=0.046, pad=0.04)
    save(fig, path, dpi=dpi)
    return fig


def plot_density(
    mesh: SphericalMesh,
    mass: np.ndarray,
    path: str | Path | None = None,
    *,
    views: Sequence[str] = ("mollweide", "orthographic", "3d"),
    title: str | None = None,
    log: bool = False,
    cmap: str = "viridis",
    dpi: int = 120,
) -> Figure:
    """The density in several views side by side (``mollweide``, ``orthographic``, ``3d``), one colour scale."""
    allowed = ("mollweide", "orthographic", "3d")
    for v in views:
        if v not in allowed:
            raise ValueError(f"unknown view {v!r}; choose from {allowed}")
    rho = _density(mesh, mass)
    norm = _norm(rho, vmin=None, vmax=None, log=log)
    widths = {"mollweide": 2.0, "orthographic": 1.0, "3d": 1.0}
    fig = Figure(figsize=(4.2 * sum(widths[v] for v in views), 4.6))
    grid = fig.add_gridspec(1, len(views), width_ratios=[widths[v] for v in views])
    common = dict(cmap=cmap, log=log, vmin=norm.vmin, vmax=norm.vmax, colorbar=False)
    for k, v in enumerate(views):
        if v == "mollweide":
            plot_density_mollweide(mesh, mass, ax=fig.add_subplot(grid[0, k], projection="mollweide"), **common)
        elif v == "orthographic":
            plot_density_orthographic(mesh, mass, ax=fig.add_subplot(grid[0, k]), **common)
        else:
            plot_density_3d(mesh, mass, ax=fig.add_subplot(grid[0, k], projection="3d"), **common)
    import matplotlib

    sm = matplotlib.cm.ScalarMappable(norm=norm, cmap=_colours(cmap))  # (as drawn: grey below the range, log when so)
    sm.set_array(rho)
    bar = fig.colorbar(sm, ax=fig.axes, orientation="horizontal", fraction=0.05, pad=0.05,
                       label="density m/A" + (" (log scale)" if log else "") + _grey_caption(rho, log=log))
    _bar_ticks(bar, norm)
    if title:
        fig.suptitle(title)
    save(fig, path, dpi=dpi)
    return fig


# ----------------------------------------------------------------------------- animation


def animate_density(
    mesh: SphericalMesh,
    t: Sequence[float],
    masses: Sequence[np.ndarray],
    path: str | Path | None = None,
    *,
    view: str = "mollweide",
    orthographic_view: Sequence[float] | None = None,
    fps: int = 8,
    log: bool = True,
    cmap: str = "viridis",
    resolution: int | None = None,
    fixed_scale: bool = True,
    dpi: int = 80,
) -> FuncAnimation:
    r"""Animation of a grid run: one frame per saved time, density :math:`m_c/A_c`, the map facing the final mass.

    Parameters
    ----------
    mesh : SphericalMesh
    t : (T,) sequence of float
    masses : sequence of (N,) arrays
    path : str or Path, optional
        Output file (a ``.gif`` is written by :class:`matplotlib.animation.PillowWriter`).
    view : {"mollweide", "orthographic"}
    orthographic_view : (3,) array, optional
        Viewing direction of the orthographic disc (default: facing the final mass).
    log : bool
        Logarithmic colour scale (default).
    resolution : int, optional
        Pixels across the map (or the disc); by default at least 240 and fine enough for the mesh's smallest cells (a
        pixel at most half a cell's side, up to :data:`MAX_RASTER`, said in the figure's title when the cap binds).
    fixed_scale : bool
        One colour scale for all frames (the overall range); otherwise per frame.

    Returns
    -------
    FuncAnimation
    """
    check_picture_path(path, animation=True)  # before any frame is drawn
    check_map_options({"view": view, "orthographic_view": orthographic_view, "resolution": resolution, "log": log,
                       "fixed_scale": fixed_scale})
    if len(t) != len(masses) or not len(t):
        raise ValueError(f"need as many times as frames (got {len(t)} and {len(masses)})")
    check_frames(masses, t, name="masses", masses=True)
    if view not in ("mollweide", "orthographic"):
        raise ValueError(f"view must be 'mollweide' or 'orthographic', got {view!r}")
    raw = [_density(mesh, m) for m in masses]
    norm = _norm(np.concatenate(raw), vmin=None, vmax=None, log=log)
    # each frame on its own scale (fixed_scale=False): its empty cells just below that scale, not the overall one
    norms = [norm if fixed_scale else _norm(r, vmin=None, vmax=None, log=log) for r in raw]
    rhos = [_shown(r, frame_norm) for r, frame_norm in zip(raw, norms)]
    cmap = _colours(cmap)
    final = np.asarray(masses[-1], dtype=float)
    note = ""
    if resolution is None:
        resolution, note = _raster_width(mesh, floor=240, disc=view == "orthographic")
    if view == "mollweide":
        fig = Figure(figsize=(7, 4.3))
        ax = fig.add_subplot(111, projection="mollweide")
        cells, lon_e, lat_e = _lonlat_raster(mesh, resolution, facing_rotation(mesh.points, final))
        artist = ax.pcolormesh(lon_e, lat_e, rhos[0][cells], cmap=cmap, norm=norms[0], shading="flat")
        ax.grid(True, alpha=0.3)
        ax.set_xticklabels([])
        ax.set_yticklabels([])

        def update_data(k: int) -> None:
            artist.set_array(rhos[k][cells].ravel())
    else:
        fig = Figure(figsize=(4.5, 4.8))
        ax = fig.add_subplot(111)
        towards = facing_view(mesh.points, final) if orthographic_view is None else orthographic_view
        ocells = _ortho_raster(mesh, towards, resolution)
        artist = ax.imshow(np.ma.masked_array(rhos[0][ocells.filled(0)], mask=ocells.mask), origin="lower",
                           extent=(-1, 1, -1, 1), cmap=cmap, norm=norms[0], interpolation="nearest")
        theta = np.linspace(0, 2 * math.pi, 200)
        ax.plot(np.cos(theta), np.sin(theta), color="k", lw=0.8)
        ax.set_axis_off()

        def update_data(k: int) -> None:
            artist.set_data(np.ma.masked_array(rhos[k][ocells.filled(0)], mask=ocells.mask))

    # grey cells explained as on the maps of plot_grid_run (the caption had been left out): cells empty in any frame
    bar = fig.colorbar(artist, ax=ax, orientation="horizontal", fraction=0.05, pad=0.06,
                       label="density m/A" + (" (log scale)" if log else "") + _grey_caption(np.concatenate(raw), log=log))
    _bar_ticks(bar, norms[0])
    if note:
        fig.suptitle(note.removeprefix("; "), fontsize=7)
    title = ax.set_title(f"t = {float(t[0]):.3g}")

    def update(k: int) -> tuple[Any, ...]:
        update_data(k)
        if not fixed_scale:
            artist.set_norm(norms[k])
            _bar_ticks(bar, norms[k])  # (a new norm resets the bar's ticks)
        title.set_text(f"t = {float(t[k]):.3g}")
        return artist, title

    anim = FuncAnimation(fig, update, frames=len(t), blit=False)
    return save_animation(anim, path, fps=fps, dpi=dpi)


# ----------------------------------------------------------------------------- runs


def plot_grid_run(
    mesh: SphericalMesh,
    t: np.ndarray,
    masses: np.ndarray,
    path: str | Path | None = None,
    *,
    diagnostics: dict[str, np.ndarray] | None = None,
    frames: int = 3,
    log: bool = True,
    title: str = "",
    dpi: int = 110,
    attention: str | None = None,
) -> Figure:
    r"""Summary figure of a grid run.

    Top row: Mollweide maps of the density :math:`m_c/A_c` at ``frames`` saved
    times (first, …, last) on one colour scale (logarithmic by default), with a
    colour bar, the sphere turned so that the final mass sits in the middle of
    the map; bottom: every recorded series of the energy, W₂ to the target, largest speed and mass error against time,
    one panel each (they had been as many as the maps: one map showed the energy alone).  ``attention``: the run's
    ``model.attention`` (a ``pooled`` run's energy is ``energy_theta``, :math:`\sum_hw_hE_h`:
    :func:`~meanfield.plotting.curves.shown_energy`).

    Returns
    -------
    Figure
    """
    t = np.asarray(t, dtype=float)
    masses = np.asarray(masses, dtype=float)
    if masses.ndim != 2 or masses.shape[1] != mesh.N or not len(t):
        raise ValueError(f"masses of shape {masses.shape}, expected (T, {mesh.N}) with T >= 1")
    check_frames(masses, t, name="masses", masses=True)
    check_map_options({"log": log})
    picks = sorted({int(round(k)) for k in np.linspace(0, len(t) - 1, min(frames, len(t)))})
    labels = {"energy": "interaction energy E", "log_energy": "ln E (E past the largest float)",
              "energy_theta": "energy E(μ_t, t) = Σ_h w_h E_h", "energy_sum": "Σ_h E_h (not the flow's Σ_h w_h E_h)",
              "log_energy_sum": "ln Σ_h E_h (past the largest float)", "w2_target": "W₂ to Π♯ρ₀",
              "max_speed": "largest speed max |X|", "mass_error": "mass error |Σm(t) − Σm(0)|"}  # (the bottom row's order)
    diagnostics = diagnostics or {}
    energy = shown_energy(diagnostics, len(t), attention=attention)  # (ln E where the energy overflowed)
    diags = dict([energy] if energy else [])
    diags.update({k: np.asarray(diagnostics[k], dtype=float) for k in ("w2_target", "max_speed", "mass_error")
                  if k in diagnostics and len(diagnostics[k]) == len(t)
                  and np.isfinite(np.asarray(diagnostics[k], dtype=float)).any()})
    rho = np.concatenate([masses[k] / mesh.areas for k in picks])
    norm = _norm(rho, vmin=None, vmax=None, log=log)
    rotation = facing_rotation(mesh.points, masses[picks[-1]])
    width, note = _raster_width(mesh, floor=240)
    raster = _lonlat_raster(mesh, width, rotation)  # (one raster for every map: they share the turn)
    rows = 2 if diags else 1
    fig = Figure(figsize=(max(4.6 * len(picks), 3.4 * len(diags)), 3.3 * rows + 0.9), layout="constrained")
    outer = fig.add_gridspec(rows, 1)
    top = outer[0].subgridspec(1, len(picks))
    maps = []
    for col, k in enumerate(picks):
        ax = fig.add_subplot(top[0, col], projection="mollweide")
        maps.append(ax)
        _draw_map(ax, _shown(masses[k] / mesh.areas, norm), raster, norm=norm, cmap="viridis")
        ax.set_title(f"t = {t[k]:.3g}")
        ax.set_yticklabels([])
    import matplotlib

    mappable = matplotlib.cm.ScalarMappable(norm=norm, cmap=_colours("viridis"))
    fig.colorbar(mappable, ax=maps, orientation="vertical", fraction=0.025, pad=0.01,
                 label="density m/A" + (" (log scale)" if log else ""))
    if diags:
        bottom = outer[1].subgridspec(1, len(diags))  # one panel per series, however many maps
        for col, (key, series) in enumerate(diags.items()):
            ax = fig.add_subplot(bottom[0, col])
            ax.plot(t, series, marker=".")
            ax.set_xlabel("time t")
            ax.set_ylabel(labels[key])
            ax.grid(alpha=0.3)
            if key == "max_speed":
                ax.set_yscale("log")
            if key == "mass_error":  # round-off: a log scale down to 1e-16 (0 below it), only as high as the errors go
                top = max(10.0 * float(np.nanmax(np.abs(series), initial=0.0)), 1e-14)
                ax.set_yscale("symlog", linthresh=1e-16)
                ax.set_ylim(0.0, top)  # (|…| ≥ 0: the symmetric axis had left half the panel below 0)
    empty = _grey_caption(rho, log=log)
    fig.suptitle((title + "\n" if title else "") + f"grid density on S², N = {mesh.N} cells; map turned to face the mass{empty}{note}",
                 fontsize=10)
    save(fig, path, dpi=dpi)
    return fig
