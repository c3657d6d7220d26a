r"""Pictures of measures on :math:`S^2`: grid densities and particle clouds.

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
from matplotlib.animation import FuncAnimation, PillowWriter
from matplotlib.figure import Figure

from meanfield.mesh import SphericalMesh

__all__ = [
    "plot_density",
    "plot_density_mollweide",
    "plot_density_orthographic",
    "plot_density_3d",
    "animate_density",
    "plot_particles_sphere",
    "plot_grid_run",
    "plot_convergence",
    "animate_particles",
    "run_mesh",
]


# ----------------------------------------------------------------------------- helpers


def _density(mesh: SphericalMesh, mass: np.ndarray) -> np.ndarray:
    mass = np.asarray(mass, dtype=float)
    if mass.shape != (mesh.N,):
        raise ValueError(f"mass must have shape ({mesh.N},), got {mass.shape}")
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


def _lonlat_raster(mesh: SphericalMesh, nlon: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cell index of every pixel of a (nlon/2, nlon) longitude–latitude raster, and the pixel edges."""
    nlat = max(2, nlon // 2)
    lon_e = np.linspace(-math.pi, math.pi, nlon + 1)
    lat_e = np.linspace(-math.pi / 2, math.pi / 2, nlat + 1)
    lon_c = 0.5 * (lon_e[1:] + lon_e[:-1])
    lat_c = 0.5 * (lat_e[1:] + lat_e[:-1])
    LON, LAT = np.meshgrid(lon_c, lat_c)
    pts = np.stack([np.cos(LAT) * np.cos(LON), np.cos(LAT) * np.sin(LON), np.sin(LAT)], axis=-1).reshape(-1, 3)
    return mesh.cell_of(pts).reshape(nlat, nlon), lon_e, lat_e


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


def _save(fig: Figure, path: str | Path | None, dpi: int) -> None:
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi)


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
    resolution: int = 360,
    colorbar: bool = True,
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
    resolution : int
        Raster width in pixels (longitudes).

    Returns
    -------
    Figure
    """
    rho = _density(mesh, mass)
    if ax is None:
        fig = Figure(figsize=(8, 4.5))
        ax = fig.add_subplot(111, projection="mollweide")
    fig = ax.figure
    cells, lon_e, lat_e = _lonlat_raster(mesh, resolution)
    mappable = ax.pcolormesh(lon_e, lat_e, rho[cells], cmap=cmap, norm=_norm(rho, vmin=vmin, vmax=vmax, log=log),
                             shading="flat", rasterized=True)
    ax.grid(True, alpha=0.3)
    ax.set_xticklabels([])
    if title:
        ax.set_title(title)
    if colorbar:
        fig.colorbar(mappable, ax=ax, orientation="horizontal", fraction=0.05, pad=0.06, label="density m/A")
    _save(fig, path, dpi)
    return fig


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
    image = np.ma.masked_array(rho[cells.filled(0)], mask=cells.mask)
    mappable = ax.imshow(image, origin="lower", extent=(-1, 1, -1, 1), cmap=cmap,
                         norm=_norm(rho, vmin=vmin, vmax=vmax, log=log), interpolation="nearest")
    theta = np.linspace(0, 2 * math.pi, 200)
    ax.plot(np.cos(theta), np.sin(theta), color="k", lw=0.8)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.set_title(title or f"view {tuple(round(float(v), 2) for v in view)}")
    if colorbar:
        fig.colorbar(mappable, ax=ax, fraction=0.046, pad=0.04)
    _save(fig, path, dpi)
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

    cm = matplotlib.colormaps[cmap]
    facecolors = cm(norm(np.clip(rho, norm.vmin, norm.vmax)))
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
    _save(fig, path, dpi)
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

    sm = matplotlib.cm.ScalarMappable(norm=norm, cmap=matplotlib.colormaps[cmap])
    sm.set_array(rho)
    fig.colorbar(sm, ax=fig.axes, orientation="horizontal", fraction=0.05, pad=0.05, label="density m/A")
    if title:
        fig.suptitle(title)
    _save(fig, path, dpi)
    return fig


# ----------------------------------------------------------------------------- animation


def animate_density(
    mesh: SphericalMesh,
    t: Sequence[float],
    masses: Sequence[np.ndarray],
    path_gif: str | Path,
    *,
    view: str = "mollweide",
    orthographic_view: Sequence[float] = (1.0, 1.0, 1.0),
    fps: int = 8,
    log: bool = False,
    cmap: str = "viridis",
    resolution: int = 240,
    fixed_scale: bool = True,
    dpi: int = 80,
) -> Path:
    r"""GIF of a grid run: one frame per saved time, density :math:`m_c/A_c`.

    Parameters
    ----------
    mesh : SphericalMesh
    t : (T,) sequence of float
    masses : sequence of (N,) arrays
    path_gif : str or Path
        Output file (written by :class:`matplotlib.animation.PillowWriter`).
    view : {"mollweide", "orthographic"}
    fixed_scale : bool
        One colour scale for all frames (the overall maximum); otherwise per frame.

    Returns
    -------
    Path
    """
    if len(t) != len(masses) or not len(t):
        raise ValueError(f"need as many times as frames (got {len(t)} and {len(masses)})")
    if view not in ("mollweide", "orthographic"):
        raise ValueError(f"view must be 'mollweide' or 'orthographic', got {view!r}")
    rhos = [_density(mesh, m) for m in masses]
    overall = np.concatenate(rhos)
    norm = _norm(overall, vmin=None, vmax=None, log=log)
    if view == "mollweide":
        fig = Figure(figsize=(7, 4))
        ax = fig.add_subplot(111, projection="mollweide")
        cells, lon_e, lat_e = _lonlat_raster(mesh, resolution)
        artist = ax.pcolormesh(lon_e, lat_e, rhos[0][cells], cmap=cmap, norm=norm, shading="flat")
        ax.grid(True, alpha=0.3)
        ax.set_xticklabels([])

        def update_data(k: int) -> None:
            artist.set_array(rhos[k][cells].ravel())
    else:
        fig = Figure(figsize=(4.5, 4.5))
        ax = fig.add_subplot(111)
        ocells = _ortho_raster(mesh, orthographic_view, resolution)
        artist = ax.imshow(np.ma.masked_array(rhos[0][ocells.filled(0)], mask=ocells.mask), origin="lower",
                           extent=(-1, 1, -1, 1), cmap=cmap, norm=norm, interpolation="nearest")
        ax.set_axis_off()

        def update_data(k: int) -> None:
            artist.set_data(np.ma.masked_array(rhos[k][ocells.filled(0)], mask=ocells.mask))

    fig.colorbar(artist, ax=ax, orientation="horizontal", fraction=0.05, pad=0.06)
    title = ax.set_title(f"t = {float(t[0]):.3g}")

    def update(k: int) -> tuple[Any, ...]:
        update_data(k)
        if not fixed_scale:
            artist.set_norm(_norm(rhos[k], vmin=None, vmax=None, log=log))
        title.set_text(f"t = {float(t[k]):.3g}")
        return artist, title

    anim = FuncAnimation(fig, update, frames=len(t), blit=False)
    path = Path(path_gif)
    path.parent.mkdir(parents=True, exist_ok=True)
    anim.save(str(path), writer=PillowWriter(fps=fps), dpi=dpi)
    return path


# ----------------------------------------------------------------------------- particles


def plot_particles_sphere(
    x: np.ndarray,
    path: str | Path | None = None,
    *,
    weights: np.ndarray | None = None,
    color: Any = None,
    ax: Any = None,
    title: str | None = None,
    elev: float = 25.0,
    azim: float = 45.0,
    size: float = 6.0,
    wireframe: bool = True,
    dpi: int = 120,
) -> Figure:
    r"""3D scatter of tokens :math:`x_i\in S^2` over a faint wireframe sphere.

    Parameters
    ----------
    x : (n, 3) array
    path : str or Path, optional
    weights : (n,) array, optional
        Marker areas proportional to the weights (mean marker area ``size``).
    color : optional
        Anything ``scatter`` accepts (e.g. an (n,) array to colour by a value).
    """
    x = np.asarray(x, dtype=float)
    if x.ndim != 2 or x.shape[1] != 3:
        raise ValueError(f"x must have shape (n, 3), got {x.shape}")
    if ax is None:
        fig = Figure(figsize=(5.5, 5.5))
        ax = fig.add_subplot(111, projection="3d")
    fig = ax.figure
    if wireframe:
        u = np.linspace(0, 2 * math.pi, 37)
        v = np.linspace(0, math.pi, 19)
        ax.plot_wireframe(np.outer(np.cos(u), np.sin(v)), np.outer(np.sin(u), np.sin(v)),
                          np.outer(np.ones_like(u), np.cos(v)), color="0.8", linewidth=0.3)
    sizes: Any = size
    if weights is not None:
        w = np.asarray(weights, dtype=float)
        if w.shape != (x.shape[0],):
            raise ValueError(f"weights must have shape ({x.shape[0]},), got {w.shape}")
        sizes = size * w / max(float(w.mean()), 1e-300)
    ax.scatter(x[:, 0], x[:, 1], x[:, 2], s=sizes, c=color if color is not None else "C0", depthshade=True)
    for setter in (ax.set_xlim, ax.set_ylim, ax.set_zlim):
        setter(-1, 1)
    ax.set_box_aspect((1, 1, 1), zoom=1.25)
    ax.view_init(elev=elev, azim=azim)
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    _save(fig, path, dpi)
    return fig


# ----------------------------------------------------------------------------- runs and studies


def run_mesh(run: dict[str, Any]) -> SphericalMesh:
    """The mesh of a grid run (rebuilt from its stored generators or its config)."""
    from meanfield.mesh import mesh as build_mesh
    from meanfield.mesh import mesh_from_points

    if "points" in run:
        grid = run.get("config", {}).get("grid", {})
        family = grid.get("family", "custom")
        cells = int(np.asarray(run["points"]).shape[0])
        if family == "fibonacci" and grid.get("cells") == cells:
            return build_mesh(cells, family)  # cached, identical generators
        return mesh_from_points(np.asarray(run["points"]), family=family)
    grid = run["config"]["grid"]
    return build_mesh(grid["cells"], grid["family"])


def plot_grid_run(run: dict[str, Any], png: str | Path, *, frames: int = 3, log: bool = False, dpi: int = 110) -> Path:
    r"""Summary figure of a grid run (as read by :func:`meanfield.io.read_run`).

    Top row: Mollweide maps of the density :math:`m_c/A_c` at ``frames`` saved
    times (first, …, last) on one colour scale; bottom: the recorded
    diagnostics (energy, speed, mass error) against time, when present.
    """
    mesh = run_mesh(run)
    t = np.asarray(run["t"], dtype=float)
    masses = np.asarray(run["mass"], dtype=float)
    if masses.ndim != 2 or masses.shape[1] != mesh.N or not len(t):
        raise ValueError(f"run has masses of shape {masses.shape}, expected (T, {mesh.N}) with T >= 1")
    picks = sorted({int(round(k)) for k in np.linspace(0, len(t) - 1, min(frames, len(t)))})
    diags = {k: np.asarray(v, dtype=float) for k, v in (run.get("diagnostics") or {}).items()
             if k in ("energy", "max_speed", "mass_error", "min_mass") and len(v) == len(t)}
    rho = np.concatenate([masses[k] / mesh.areas for k in picks])
    norm = _norm(rho, vmin=None, vmax=None, log=log)
    rows = 2 if diags else 1
    fig = Figure(figsize=(4.6 * len(picks), 3.2 * rows + 0.6))
    grid = fig.add_gridspec(rows, len(picks))
    for col, k in enumerate(picks):
        ax = fig.add_subplot(grid[0, col], projection="mollweide")
        plot_density_mollweide(mesh, masses[k], ax=ax, vmin=norm.vmin, vmax=norm.vmax, log=log, colorbar=False,
                               title=f"t = {t[k]:.3g}", resolution=240)
    if diags:
        for col, (key, series) in enumerate(list(diags.items())[: len(picks)]):
            ax = fig.add_subplot(grid[1, col])
            ax.plot(t, series, marker=".")
            ax.set_xlabel("t")
            ax.set_ylabel(key)
            if key == "mass_error":
                ax.set_yscale("symlog", linthresh=1e-16)
    cfg = run.get("config", {})
    m = cfg.get("model", {})
    if m:
        fig.suptitle(f"grid N={mesh.N}: {m.get('attention')}, β={m.get('beta', float('nan')):g}, {m.get('direction')}")
    path = Path(png)
    _save(fig, path, dpi)
    return path


def plot_convergence(rows: Sequence[dict[str, Any]], png: str | Path, *, title: str | None = None, dpi: int = 120) -> Path:
    r"""Log–log plot of a refinement study (:func:`solvers.grid.convergence_study`): :math:`W_2` against :math:`h`,
    with a slope-1 guide."""
    fig = Figure(figsize=(5.5, 4.2))
    ax = fig.add_subplot(111)
    for key, label, marker in (("w2_reference", "W2 to reference grid", "o"), ("w2_particles", "W2 to particles", "s")):
        pts = [(r["h"], r[key]) for r in rows if np.isfinite(r.get(key, np.nan)) and r.get(key, 0) > 0]
        if pts:
            h, e = np.array(pts).T
            ax.loglog(h, e, marker=marker, label=label)
    hs = np.array([r["h"] for r in rows], dtype=float)
    finite = [r.get("w2_reference", np.nan) for r in rows if np.isfinite(r.get("w2_reference", np.nan))]
    if hs.size and finite:
        anchor_h = float(hs.max())
        anchor_e = float(max(finite))
        guide = np.array([hs.min(), hs.max()])
        ax.loglog(guide, anchor_e * guide / anchor_h, "k--", lw=0.8, label="slope 1")
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FormatStrFormatter("%.3g"))
    ax.set_xticks(sorted(set(float(h) for h in hs)))
    ax.set_xlabel("h = sqrt(4π/N)")
    ax.set_ylabel("W2 at t_final")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    path = Path(png)
    _save(fig, path, dpi)
    return path


def animate_particles(t: Sequence[float], x: np.ndarray, path_gif: str | Path, *, fps: int = 8, dpi: int = 90) -> Path:
    r"""GIF of a particle run on :math:`S^2` (first three coordinates), one frame per saved time.

    Parameters
    ----------
    t : (T,) array
    x : (T, n, d) array
    path_gif : path-like
    """
    from matplotlib.animation import PillowWriter

    path_gif = Path(path_gif)
    path_gif.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(4.0, 4.0))
    ax = fig.add_subplot(projection="3d")
    writer = PillowWriter(fps=fps)
    colours = np.arange(np.asarray(x).shape[1])
    with writer.saving(fig, str(path_gif), dpi=dpi):
        for k in range(len(t)):
            ax.clear()
            ax.set_box_aspect((1, 1, 1))
            ax.set_axis_off()
            ax.set_xlim(-1, 1)
            ax.set_ylim(-1, 1)
            ax.set_zlim(-1, 1)
            ax.scatter(x[k, :, 0], x[k, :, 1], x[k, :, 2], c=colours, cmap="viridis", s=6)
            ax.set_title(f"t = {t[k]:.3g}", fontsize=9)
            writer.grab_frame()
    return path_gif
