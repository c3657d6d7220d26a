r"""Figures, saving, and how the sphere is drawn: orthographic discs that face the mass.

Every picture of the package is a ``matplotlib.figure.Figure`` made without
``pyplot`` (no global state, no window, thread-safe); a Figure returned as the
last value of a Jupyter cell is shown inline, and :func:`save` writes it.

A point :math:`x\in S^2` seen from the direction :math:`e_3` is drawn at
:math:`(\langle x,e_1\rangle, \langle x,e_2\rangle)` inside the unit disc; it is on
the front hemisphere when :math:`\langle x,e_3\rangle\ge0`.  Front points are drawn
solid and on top, back points faint and small, so the two halves are told apart.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = [
    "new_figure",
    "figure_and_axes",
    "save",
    "rotation_to",
    "facing_rotation",
    "facing_view",
    "draw_sphere",
    "draw_points",
    "check_frames",
]



def new_figure(*, figsize: tuple[float, float], layout: str | None = "constrained") -> Figure:
    """A figure outside pyplot's global state (safe in threads and Dask workers)."""
    return Figure(figsize=figsize, layout=layout)


def figure_and_axes(ax: Axes | None, *, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """The Axes a one-panel picture draws into, and the Figure it returns and saves: ``ax`` and the figure that holds
    it (the top-level one where ``ax`` is in a subfigure), or, without ``ax``, a new figure (:func:`new_figure`) and
    its one Axes.

    Raises
    ------
    TypeError
        Naming ``ax`` when it is given and is not a matplotlib Axes (an array of them from ``subplots`` included).
    """
    if ax is None:
        fig = new_figure(figsize=figsize)
        return fig, fig.add_subplot(1, 1, 1)
    if not isinstance(ax, Axes):
        hint = ": pick one panel, e.g. axes[0]" if isinstance(ax, (np.ndarray, list, tuple)) else ""
        raise TypeError(f"ax must be a matplotlib Axes (e.g. fig.add_subplot()), got {type(ax).__name__}{hint}")
    fig = ax.figure
    while fig.figure is not fig:  # a subfigure's panel: its top-level figure is the one to save
        fig = fig.figure
    return fig, ax


def check_figure_options(path: str | Path | None, *, title: str | None, dpi: Any) -> None:
    """The options of a figure function checked before anything is drawn: ``title`` a string or ``None``, ``dpi`` a
    finite number > 0, ``path`` a place a picture can be written (:func:`check_picture_path`)."""
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a string, got {type(title).__name__}")
    if isinstance(dpi, bool) or not isinstance(dpi, (int, float, np.integer, np.floating)) or not (math.isfinite(dpi) and dpi > 0):
        raise ValueError(f"dpi must be a finite number > 0, got {dpi!r}")
    check_picture_path(path)


#: what an animation can be written as: a GIF always (Pillow), a video where matplotlib finds ffmpeg
ANIMATION_FORMATS = (".gif",)
VIDEO_FORMATS = (".mp4", ".mov", ".avi", ".webm", ".mkv")


def check_picture_path(path: str | Path | None, *, animation: bool = False) -> Path | None:
    """``path`` as a :class:`~pathlib.Path` a picture (or, ``animation``, an animation) can be written to, checked before
    anything is drawn: not a folder, a suffix matplotlib writes (a folder had become ``folder.png`` beside it, and
    ``x.txt`` or ``x.mp4`` without ffmpeg had failed in matplotlib after every frame was drawn), not a run file
    (``r.png`` holding a run would be replaced by its picture), in a folder that can be written.

    Raises
    ------
    ValueError
        Naming ``path`` and the formats it may take; the CLI's ``--plot`` check words it as its own option's error.
    """
    if path is None:
        return None
    from meanfield.io.output import IMAGE_FORMATS, check_parent
    from meanfield.io.signature import is_hdf5

    text = os.fspath(path)  # (before Path drops a trailing slash: "x.png/" had written the file x.png)
    example = "run.gif" if animation else "run.png"
    if not text.strip():
        raise ValueError(f"path: empty file name; give the picture's file name, e.g. {example}")
    path = Path(path)
    if text.endswith(("/", "\\")) and not path.is_dir():
        stripped = text.rstrip("/\\")
        hint = stripped if Path(stripped).suffix else str(Path(stripped) / example)
        raise ValueError(f"path: {text} names a folder (it ends in {text[-1]}); give the picture's file name, e.g. {hint}")
    if path.is_dir() or not path.suffix:
        raise ValueError(f"path: {path} is {'a folder' if path.is_dir() else 'a name without a suffix'}; give the picture's "
                         f"file name, e.g. {path / example if path.is_dir() else path.with_suffix(Path(example).suffix)}")
    check_parent(path, "path")  # a ConfigError, which is a ValueError
    suffix = path.suffix.lower()
    if animation:
        from matplotlib import animation as manimation

        video = manimation.writers.is_available("ffmpeg")
        allowed = ANIMATION_FORMATS + (VIDEO_FORMATS if video else ())
        if suffix not in allowed:
            hint = "" if video or suffix not in VIDEO_FORMATS else " (videos need ffmpeg, which matplotlib does not find here)"
            raise ValueError(f"path: cannot write an animation to {str(path)!r}{hint}: use one of {', '.join(allowed)}")
    elif suffix not in IMAGE_FORMATS:
        raise ValueError(f"path: cannot draw into {str(path)!r}: use one of {', '.join(IMAGE_FORMATS)}")
    if path.is_file() and is_hdf5(path):
        raise ValueError(f"path: {path} is a run file (HDF5): the picture would replace it; give the picture its own name")
    return path


def check_frames(frames: Any, t: Any, *, name: str, masses: bool = False) -> None:
    """Every frame of ``frames`` (T, …) finite and, ``masses``, of positive total mass; else a ``ValueError`` naming
    ``name`` and the first bad frame, before anything is drawn (a NaN frame had been a ``LinAlgError: Eigenvalues did
    not converge`` of the view facing the mass, an all-NaN map a zero-size reduction).

    ``t``: the frames' times (named with the frame; fewer than the frames is left to the caller's shape check).
    """
    data = np.asarray(frames, dtype=float)
    if data.ndim == 0 or not data.size:
        return
    flat = data.reshape(data.shape[0], -1)
    finite = np.isfinite(flat).all(axis=1)
    totals = flat.sum(axis=1) if masses else np.ones(flat.shape[0])
    bad = np.flatnonzero(~finite | ~(totals > 0) if masses else ~finite)
    if not bad.size:
        return
    k = int(bad[0])
    when = f" (t = {float(np.asarray(t, dtype=float).ravel()[k]):.4g})" if k < np.size(t) else ""
    if not finite[k]:
        raise ValueError(f"{name}: frame {k}{when} holds non-finite values (NaN or ±inf)")
    raise ValueError(f"{name}: frame {k}{when} has total mass {float(totals[k]):g}; there is no mass to draw")


def save(fig: Figure, path: str | Path | None, *, dpi: int = 110) -> Figure:
    """Write ``fig`` to ``path`` (folders created; :func:`check_picture_path`) when a path is given; return ``fig``."""
    checked = check_picture_path(path)
    if checked is not None:
        checked.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(checked, dpi=dpi)
    return fig


def save_animation(anim: Any, path: str | Path | None, *, fps: int, dpi: int) -> Any:
    """Write the :class:`~matplotlib.animation.FuncAnimation` ``anim`` to ``path`` when one is given (a GIF with Pillow,
    a video with ffmpeg); return it."""
    checked = check_picture_path(path, animation=True)
    if checked is not None:
        from matplotlib.animation import PillowWriter

        checked.parent.mkdir(parents=True, exist_ok=True)
        if checked.suffix.lower() == ".gif":
            anim.save(str(checked), writer=PillowWriter(fps=fps), dpi=dpi)
        else:
            anim.save(str(checked), writer="ffmpeg", fps=fps, dpi=dpi)
    return anim


def rotation_to(view: Any) -> np.ndarray:
    """Orthonormal rows ``(e1, e2, e3)`` with ``e3`` the viewing direction (towards the viewer) and ``e2`` as close to ``+z`` as possible."""
    e3 = np.asarray(view, dtype=float)
    e3 = e3 / np.linalg.norm(e3)
    up = np.array([0.0, 0.0, 1.0]) if abs(e3[2]) < 0.95 else np.array([0.0, 1.0, 0.0])
    e1 = np.cross(up, e3)
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(e3, e1)
    return np.stack([e1, e2, e3])


def _moments(x: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean of the mass, and its second moment's eigenvalues (largest first) and axes (columns, in that order)."""
    x = np.asarray(x, dtype=float)[:, :3]
    w = np.full(x.shape[0], 1.0 / x.shape[0]) if weights is None else np.asarray(weights, dtype=float) / np.sum(weights)
    mean = w @ x
    second = (x * w[:, None]).T @ x
    values, axes = np.linalg.eigh(second)
    return mean, values[::-1], axes[:, ::-1]


#: the variance of the mass along the second moment's top axis :math:`u_1` above which it lies in two lumps at
#: :math:`\pm u_1`: a pair of antipodal clusters has :math:`4p(1-p)\ge3/4` (the lighter holding p ≥ 1/4, a mean of
#: length ≤ 1/2), where a von Mises–Fisher bump has at most 1/3 (a uniform sphere's) and a cluster on a uniform
#: background at most 4/9
PAIR_VARIANCE = 0.6


def _layout(x: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """The mean direction to put in the middle (None for a pair of antipodal clusters: the mass lies in two lumps along
    :math:`u_1`, variance above :data:`PAIR_VARIANCE`, or there is no mean direction), and the second moment's top axes
    :math:`u_1, u_2`, turned towards the mean.

    One broad bump (mean length under 1/2) had been drawn with the pair's layout, its peak near the map's edge."""
    mean, values, axes = _moments(x, weights)
    u1, u2 = axes[:, 0], axes[:, 1]
    if mean @ u1 < 0:
        u1 = -u1
    if mean @ u2 < 0:
        u2 = -u2
    length = float(np.linalg.norm(mean))
    pair = length <= 0.5 and (float(values[0]) - float(mean @ u1) ** 2 > PAIR_VARIANCE or not length > 1e-12)
    return (None if pair else mean / length), u1, u2


def facing_view(x: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    r"""A viewing direction that shows where the mass is.

    Straight on its mean direction, unless the mass lies in two lumps along the principal axis :math:`u_1` of the
    second moment (its variance along :math:`u_1` above :data:`PAIR_VARIANCE`; a mean shorter than 1/2): then from 60°
    off :math:`u_1`, towards the second axis :math:`u_2`, so that a pair of antipodal clusters at :math:`\pm u_1` shows
    as one front and one back cluster, side by side.
    """
    centre, u1, u2 = _layout(x, weights)
    if centre is not None:
        return centre
    return 0.5 * u1 + math.sqrt(0.75) * u2


def facing_rotation(x: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    r"""A rotation ``R`` (rows: new axes) that puts the mass in the middle of a longitude–latitude map.

    Its mean direction goes to (longitude 0, latitude 0), one broad bump included; a pair of antipodal clusters along
    :math:`u_1` (as in :func:`facing_view`) goes to longitudes ±90° on the equator, far from the map's edge.
    """
    centre, u1, u2 = _layout(x, weights)
    if centre is not None:
        rows = rotation_to(centre)  # e3 = mean → map centre is +x: reorder so that the mean becomes the first axis
        return np.stack([rows[2], rows[0], rows[1]])
    return np.stack([u2, u1, np.cross(u2, u1)])


def draw_sphere(ax: Any, rotation: np.ndarray, *, grid: bool = True) -> None:
    """The outline of the sphere seen along ``rotation[2]``, with a few meridians and parallels (back ones dashed)."""
    theta = np.linspace(0.0, 2.0 * math.pi, 241)
    ax.plot(np.cos(theta), np.sin(theta), color="0.25", lw=1.0, zorder=2)
    if grid:
        curves = []
        for lat in np.radians([-60, -30, 0, 30, 60]):
            curves.append(np.stack([np.cos(lat) * np.cos(theta), np.cos(lat) * np.sin(theta), np.full_like(theta, np.sin(lat))], 1))
        for lon in np.radians(np.arange(0, 180, 30)):
            curves.append(np.stack([np.cos(theta) * np.cos(lon), np.cos(theta) * np.sin(lon), np.sin(theta)], 1))
        for curve in curves:
            p = curve @ rotation.T
            front = p[:, 2] >= 0
            for mask, style, alpha in ((front, "-", 0.35), (~front, ":", 0.18)):
                segment = np.where(mask, p[:, 0], np.nan), np.where(mask, p[:, 1], np.nan)
                ax.plot(*segment, color="0.5", lw=0.5, ls=style, alpha=alpha, zorder=1)
    ax.set_xlim(-1.05, 1.05)
    ax.set_ylim(-1.05, 1.05)
    ax.set_aspect("equal")
    ax.set_axis_off()


def _merge_coincident(p: np.ndarray, sizes: np.ndarray, colors: np.ndarray | None, tol: float, *, by_mass: bool = False):
    """Tokens that sit on one spot (a collapsed cluster) as one marker: of area mean · √count for tokens of equal mass,
    or, ``by_mass`` (areas ∝ token masses), the sum of their areas, so that the marker's area stays ∝ the cluster's
    mass (four tokens of mass 0.1 had been drawn like one token of mass 0.2)."""
    keys = np.round(p / tol).astype(np.int64)
    _, first, inverse, counts = np.unique(keys, axis=0, return_index=True, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    if counts.max() == 1:
        return p, sizes, colors
    merged_sizes = np.bincount(inverse, weights=sizes)
    if not by_mass:
        merged_sizes = merged_sizes / counts * np.sqrt(counts)
    return p[first], merged_sizes, None if colors is None else colors[first]


def marker_areas(size: float, weights: np.ndarray | None) -> float | np.ndarray:
    """Marker areas: ``size`` for tokens of equal mass, else proportional to the masses ``weights``, ``size`` on average."""
    if weights is None:
        return float(size)
    w = np.asarray(weights, dtype=float)
    return size * w / max(float(w.mean()), 1e-300)


def draw_points(
    ax: Any,
    x: np.ndarray,
    rotation: np.ndarray,
    *,
    color: Any = "C0",
    size: float = 18.0,
    weights: np.ndarray | None = None,
    cmap: str | None = None,
    norm: Any = None,
    merge_tol: float = 2e-3,
) -> Any:
    """Tokens on the sphere: front hemisphere solid and on top, back hemisphere faint, small and hollow.

    Tokens within ``merge_tol`` of each other (a collapsed cluster) are drawn as one
    marker whose area grows like the square root of their number, so a cluster shows its weight; with token masses
    ``weights`` (not all equal) its area is the sum of theirs, ∝ the cluster's mass like every other marker.
    Numeric values ``color`` (one per token) map through ``cmap`` (default viridis) and ``norm``, by default the range
    of all of them, so a token's colour does not depend on which hemisphere or which tokens are drawn (without a
    ``cmap`` each hemisphere's scatter had scaled to its own tokens).
    """
    p = np.asarray(x, dtype=float)[:, :3] @ rotation.T
    sizes = np.broadcast_to(marker_areas(size, weights), (p.shape[0],)).astype(float)
    colors = np.asarray(color) if not isinstance(color, str) and np.shape(color)[:1] == (p.shape[0],) else None
    values = colors is not None and colors.ndim == 1 and colors.size > 0 and colors.dtype.kind in "biuf"
    if values and norm is None:
        from matplotlib.colors import Normalize  # one scale for every token (both hemispheres), not one per scatter

        norm = Normalize(float(colors.min()), float(colors.max()))
    if values and cmap is None:
        cmap = "viridis"
    if merge_tol > 0:
        by_mass = weights is not None and np.size(weights) > 0 and np.ptp(np.asarray(weights, dtype=float)) > 0
        p, sizes, colors = _merge_coincident(p, sizes, colors, merge_tol, by_mass=by_mass)
    front = p[:, 2] >= 0
    artists = None
    for mask, alpha, scale, z in ((~front, 0.25, 0.5, 3), (front, 0.95, 1.0, 4)):
        if not np.any(mask):
            continue
        c = colors[mask] if colors is not None else color
        kwargs: dict[str, Any] = {"s": sizes[mask] * scale, "alpha": alpha, "zorder": z, "linewidths": 0.0}
        if cmap is not None:
            kwargs.update(cmap=cmap, norm=norm)
        artists = ax.scatter(p[mask, 0], p[mask, 1], c=c, **kwargs)
    return artists
