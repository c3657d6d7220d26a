r"""Pictures of token clouds: on the sphere for :math:`d = 3`, in principal components for :math:`d > 3`.

* :func:`plot_particle_run` — the cloud on :math:`S^2` at a few times (one view for
  all of them, chosen to face the mass; front and back hemispheres told apart) and
  the energy against time;
* :func:`plot_high_dim_run` — for :math:`d > 3` the cloud in the plane of its two
  principal components, and the histogram of the inner products
  :math:`\langle x_i,x_j\rangle` against time (one cluster: all mass at 1);
* :func:`plot_particles_sphere` — one cloud on the sphere;
* :func:`animate_particles` — an animation of either picture.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.animation import FuncAnimation

from meanfield.plotting.canvas import (
    check_frames, check_picture_path, draw_points, draw_sphere, facing_view, marker_areas, new_figure, rotation_to, save, save_animation,
)
from meanfield.plotting.curves import shown_energy

__all__ = [
    "plot_particle_run",
    "plot_high_dim_run",
    "plot_particles_sphere",
    "animate_particles",
    "inner_product_histograms",
    "principal_axes",
    "MAX_PAIR_TOKENS",
    "NO_PAIR_COLOUR",
]

#: the colour of the inner-product histogram's empty bins: a grey outside magma (the grid maps' ``NO_MASS_COLOUR``)
NO_PAIR_COLOUR = "0.85"
#: inner-product histograms use at most this many tokens (evenly spaced), i.e. ~2·10⁶ pairs
MAX_PAIR_TOKENS = 2000


def _picks(count: int, snapshots: int) -> list[int]:
    """The frames of ``snapshots`` panels spread evenly over ``count`` frames (first and last included)."""
    if isinstance(snapshots, (bool, np.bool_)) or not isinstance(snapshots, (int, np.integer)) or snapshots < 1:
        raise ValueError(f"snapshots must be an integer ≥ 1 (the number of panels), got {snapshots!r}")
    return sorted({int(k) for k in np.linspace(0, count - 1, min(snapshots, count)).round()})


def plot_particles_sphere(
    x: np.ndarray,
    path: str | Path | None = None,
    *,
    ax: Any = None,
    view: Sequence[float] | None = None,
    weights: np.ndarray | None = None,
    color: Any = None,
    size: float = 18.0,
    title: str | None = None,
    dpi: int = 120,
) -> Any:
    r"""Tokens :math:`x_i\in S^2` on the sphere seen from ``view`` (default: facing the mass).

    Parameters
    ----------
    x : (n, 3) array
    path : str or Path, optional
        Save the figure there.
    ax : matplotlib Axes, optional
        A plain 2-D axes to draw into.
    view : (3,) array, optional
        Direction towards the viewer.
    weights : (n,) array, optional
        Marker areas proportional to the weights (mean area ``size``).
    color : optional
        A colour, or one value per token (viridis, one scale for both hemispheres).

    Returns
    -------
    Figure
    """
    x = np.asarray(x, dtype=float)
    if x.ndim != 2 or x.shape[1] != 3:
        raise ValueError(f"x must have shape (n, 3), got {x.shape}")
    if weights is not None and np.shape(weights) != (x.shape[0],):
        raise ValueError(f"weights must have shape ({x.shape[0]},), got {np.shape(weights)}")
    if not np.all(np.isfinite(x)):
        raise ValueError("x holds non-finite coordinates (NaN or ±inf)")
    if weights is not None:
        _token_weights(weights, x.shape[0])  # finite masses ≥ 0 of positive total
    if ax is None:
        fig = new_figure(figsize=(4.5, 4.5))
        ax = fig.add_subplot(111)
    rotation = rotation_to(facing_view(x, weights) if view is None else view)
    draw_sphere(ax, rotation)
    draw_points(ax, x, rotation, color="C0" if color is None else color, size=size, weights=weights)
    if title:
        ax.set_title(title, fontsize=10)
    return save(ax.figure, path, dpi=dpi)


def plot_particle_run(
    t: np.ndarray,
    x: np.ndarray,
    path: str | Path | None = None,
    *,
    diagnostics: dict[str, np.ndarray] | None = None,
    snapshots: int = 4,
    weights: np.ndarray | None = None,
    title: str = "",
    dpi: int = 110,
    attention: str | None = None,
) -> Any:
    r"""The cloud on S² at ``snapshots`` times, one view for all (facing the final cloud), and the energy.

    Tokens keep their colour (their index) from panel to panel; front-hemisphere
    tokens are solid, back-hemisphere ones faint.

    Parameters
    ----------
    t : (T,) array
    x : (T, n, 3) array
    diagnostics : dict of (T,) arrays, optional
        The energy is drawn when present (:func:`~meanfield.plotting.curves.shown_energy`), else ``max_speed``.
    weights : (n,) array, optional
        Token masses: marker areas proportional to them, and the view faces the mass.
    attention : str, optional
        The run's ``model.attention``: a ``pooled`` run's energy is ``energy_theta``, :math:`\sum_hw_hE_h`.

    Returns
    -------
    Figure
    """
    x = np.asarray(x)
    if x.ndim != 3 or x.shape[2] != 3:
        raise ValueError(f"x must have shape (T, n, 3), got {x.shape}")
    check_frames(x, t, name="x")
    weights = _token_weights(weights, x.shape[1])
    picks = _picks(len(t), snapshots)
    # the energy (ln E past the largest float, β⟨x, By⟩ > 709), else the first other series with a finite value
    energy = shown_energy(diagnostics, len(t), attention=attention)
    key = energy[0] if energy else next((k for k in ("energy_theta", "rayleigh", "max_speed") if diagnostics and k in diagnostics
                                         and np.isfinite(np.asarray(diagnostics[k], dtype=float)).any()), None)
    shown = energy[1] if energy else diagnostics[key] if key else None
    cols = len(picks) + (1 if key else 0)
    fig = new_figure(figsize=(max(3.3 * cols, 7.5), 4.4))  # (room for two title lines, a panel title and the time axis)
    rotation = rotation_to(facing_view(x[picks[-1]], weights))
    colors = np.arange(x.shape[1])
    for k, index in enumerate(picks):
        ax = fig.add_subplot(1, cols, k + 1)
        draw_sphere(ax, rotation)
        draw_points(ax, x[index], rotation, color=colors, cmap="viridis", size=_marker_size(x.shape[1]), weights=weights)
        ax.set_title(f"t = {t[index]:.3g}", fontsize=10)
    if key:
        ax = fig.add_subplot(1, cols, cols)
        ax.plot(t, shown, color="C3", marker="." if len(t) < 3 else None)  # (one frame: a point, not nothing)
        labels = {"energy": "interaction energy $E$", "log_energy": r"$\ln E$ (E past the largest float)",
                  "energy_theta": r"energy $E(\mu_t, t)=\sum_h w_hE_h$",
                  "energy_sum": r"$\sum_h E_h$ (not the flow's $\sum_h w_hE_h$)",
                  "log_energy_sum": r"$\ln\sum_h E_h$ (past the largest float)",
                  "rayleigh": r"mean $x^\top S x$", "max_speed": r"largest speed $\max_i |\dot x_i|$"}
        ax.set_xlabel("time t")
        ax.set_ylabel(labels[key])
        if key == "max_speed":
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.set_box_aspect(0.9)  # (a square had pushed the time label below the canvas)
    masses = "; marker area ∝ token mass (halved on the back)" if weights is not None else ""
    fig.suptitle((title + "\n" if title else "") + f"solid: front hemisphere, faint: back; colour = token index{masses}", fontsize=9)
    return save(fig, path, dpi=dpi)


def _marker_size(n: int) -> float:
    """Marker area of one of ``n`` tokens of equal mass (smaller for more tokens)."""
    return max(4.0, 40.0 / np.sqrt(max(n, 1) / 64))


def _token_weights(weights: np.ndarray | None, n: int) -> np.ndarray | None:
    """Token masses as a float (n,) array, or ``None`` where there are none or all are equal (plain markers)."""
    if weights is None:
        return None
    w = np.asarray(weights, dtype=float)
    if w.shape != (n,):
        raise ValueError(f"weights must be {n} masses, got shape {w.shape}")
    if not (np.all(np.isfinite(w)) and np.all(w >= 0)):
        raise ValueError(f"weights must be finite masses ≥ 0, got {w[~(np.isfinite(w) & (w >= 0))][:3].tolist()} among them")
    if n and not w.sum() > 0:
        raise ValueError("weights sum to 0: no token carries mass to draw")
    return None if np.all(w == w[0]) else w


def principal_axes(x: np.ndarray, *, k: int = 2) -> np.ndarray:
    """The top ``k`` principal directions of the pooled clouds ``x`` (T, n, d) or (n, d), as rows."""
    pooled = np.asarray(x, dtype=float).reshape(-1, np.shape(x)[-1])
    centred = pooled - pooled.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return vt[:k]


def inner_product_histograms(x: np.ndarray, *, bins: int = 80, max_tokens: int = MAX_PAIR_TOKENS,
                             weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    r"""Histograms of :math:`\langle x_i,x_j\rangle`, :math:`i<j`, for every frame of ``x`` (T, n, d).

    At most ``max_tokens`` evenly spaced tokens are used (no ``n × n`` array for large ``n``); with token masses
    ``weights`` (n,), the pair :math:`(i, j)` counts :math:`a_ia_j`.

    Returns
    -------
    density : (T, bins) array
        Probability density of the inner products in each frame.
    edges : (bins + 1,) array
        Bin edges on [-1, 1].
    """
    x = np.asarray(x, dtype=float)
    n = x.shape[1]
    take = np.unique(np.linspace(0, n - 1, min(n, max_tokens)).round().astype(int))
    edges = np.linspace(-1.0, 1.0, bins + 1)
    upper = np.triu_indices(take.size, 1)
    out = np.zeros((x.shape[0], bins))
    a = None if weights is None else np.asarray(weights, dtype=float)[take]
    pair_weights = None if a is None else np.outer(a, a)[upper]
    if pair_weights is not None and not pair_weights.sum() > 0:
        return out, edges  # no pair carries mass
    for k in range(x.shape[0]):
        y = x[k, take]
        gram = np.clip(y @ y.T, -1.0, 1.0)[upper]
        if gram.size:
            out[k], _ = np.histogram(gram, bins=edges, density=True, weights=pair_weights)
    return out, edges


def plot_high_dim_run(
    t: np.ndarray,
    x: np.ndarray,
    path: str | Path | None = None,
    *,
    diagnostics: dict[str, np.ndarray] | None = None,
    snapshots: int = 3,
    weights: np.ndarray | None = None,
    title: str = "",
    dpi: int = 110,
) -> Any:
    r"""A cloud in :math:`d > 3`: its principal-component plane at a few times, and :math:`\langle x_i,x_j\rangle` over time.

    The coordinates of the first three axes are not a picture of :math:`S^{d-1}`;
    instead the tokens are projected on the two principal directions of all
    frames pooled (the unit circle marks where a token in that plane would sit),
    and the histogram of pairwise inner products shows clustering directly: it
    moves to 1 as the tokens gather.  Token masses ``weights`` (n,) scale the markers' areas and
    weigh each pair by :math:`a_ia_j`.

    Returns
    -------
    Figure
    """
    x = np.asarray(x, dtype=float)
    if x.ndim != 3:
        raise ValueError(f"x must have shape (T, n, d), got {x.shape}")
    check_frames(x, t, name="x")
    weights = _token_weights(weights, x.shape[1])
    sizes = marker_areas(12.0, weights)
    picks = _picks(len(t), snapshots)
    axes = principal_axes(x[picks])
    fig = new_figure(figsize=(3.2 * len(picks) + 5.2, 3.6))
    grid = fig.add_gridspec(1, len(picks) + 1, width_ratios=[1.0] * len(picks) + [1.7])
    colors = np.arange(x.shape[1])
    circle = np.linspace(0.0, 2.0 * np.pi, 200)
    for col, index in enumerate(picks):
        ax = fig.add_subplot(grid[0, col])
        p = x[index] @ axes.T
        ax.plot(np.cos(circle), np.sin(circle), color="0.6", lw=0.6)
        ax.scatter(p[:, 0], p[:, 1], c=colors, cmap="viridis", s=sizes, linewidths=0)
        ax.set_xlim(-1.05, 1.05)
        ax.set_ylim(-1.05, 1.05)
        ax.set_aspect("equal")
        ax.set_xlabel("principal component 1", fontsize=8)
        ax.set_ylabel("principal component 2", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_title(f"t = {t[index]:.3g}", fontsize=10)
    density, edges = inner_product_histograms(x, weights=weights)
    ax = fig.add_subplot(grid[0, -1])
    tt = np.asarray(t, dtype=float)
    t_edges = np.concatenate([[tt[0]], 0.5 * (tt[1:] + tt[:-1]), [tt[-1]]]) if tt.size > 1 else np.array([tt[0] - 0.5, tt[0] + 0.5])
    import matplotlib
    from matplotlib import colors as mcolors

    positive = density[density > 0]
    norm = mcolors.LogNorm(vmin=max(float(positive.min()), 1e-3), vmax=float(positive.max())) if positive.size else None
    # empty bins (NaN) in a grey outside the colormap: drawn as the white background they had read as magma's top, the
    # densest bins, right beside its black, the sparsest
    cmap = matplotlib.colormaps["magma"].with_extremes(bad=NO_PAIR_COLOUR)
    mesh = ax.pcolormesh(t_edges, edges, np.where(density > 0, density, np.nan).T, cmap=cmap, norm=norm, shading="flat")
    scale = " (log scale)" if norm is not None else ""  # (no pair of positive density, n = 1: a linear norm)
    empty = "; grey: no pair" if np.any(density <= 0) else ""
    fig.colorbar(mesh, ax=ax, label=("density of pairs" if weights is None else "density of pairs, by mass") + scale + empty)
    if tt.size == 1:  # one frame: one tick at its time (the column's edges t ± 0.5 had put ticks at negative times)
        ax.set_xticks([tt[0]])
    ax.set_xlabel("time t")
    ax.set_ylabel(r"inner product $\langle x_i, x_j\rangle$")
    ax.set_title("pairwise inner products (1: one cluster)", fontsize=10)
    d = x.shape[2]
    fig.suptitle((title + "\n" if title else "") + f"tokens on S^{d - 1} (d = {d}): principal-component plane and inner products", fontsize=9)
    return save(fig, path, dpi=dpi)


def animate_particles(
    t: Sequence[float], x: np.ndarray, path: str | Path | None = None, *, fps: int = 8, dpi: int = 90,
    weights: np.ndarray | None = None,
) -> FuncAnimation:
    r"""Animation of a particle run: on the sphere for :math:`d = 3` (facing the final cloud), in principal components otherwise.

    Written with :class:`~matplotlib.animation.PillowWriter` when ``path`` ends in
    ``.gif`` (any other format matplotlib's writers know otherwise).  Token masses ``weights`` (n,) scale the
    markers' areas (and the view faces the mass).

    Returns
    -------
    FuncAnimation
    """
    check_picture_path(path, animation=True)  # before any frame is drawn
    x = np.asarray(x, dtype=float)
    if x.ndim != 3 or not len(t):
        raise ValueError(f"need frames x of shape (T, n, d) with T >= 1, got {x.shape}")
    check_frames(x, t, name="x")
    weights = _token_weights(weights, x.shape[1])
    fig = new_figure(figsize=(4.2, 4.4))
    ax = fig.add_subplot(111)
    colors = np.arange(x.shape[1])
    if x.shape[2] == 3:
        rotation = rotation_to(facing_view(x[-1], weights))
        project = None
    else:
        rotation = None
        project = principal_axes(x)
    size = _marker_size(x.shape[1])
    sizes = marker_areas(size, weights)

    def draw(k: int) -> tuple[Any, ...]:
        ax.clear()
        if rotation is not None:
            draw_sphere(ax, rotation)
            draw_points(ax, x[k], rotation, color=colors, cmap="viridis", size=size, weights=weights)
        else:
            p = x[k] @ project.T
            circle = np.linspace(0.0, 2.0 * np.pi, 200)
            ax.plot(np.cos(circle), np.sin(circle), color="0.6", lw=0.6)
            ax.scatter(p[:, 0], p[:, 1], c=colors, cmap="viridis", s=sizes, linewidths=0)
            ax.set_xlim(-1.05, 1.05)
            ax.set_ylim(-1.05, 1.05)
            ax.set_aspect("equal")
            ax.set_xlabel("principal component 1")
            ax.set_ylabel("principal component 2")
        ax.set_title(f"t = {float(t[k]):.3g}", fontsize=10)
        return tuple(ax.get_children())

    anim = FuncAnimation(fig, draw, frames=len(t), blit=False)
    return save_animation(anim, path, fps=fps, dpi=dpi)
