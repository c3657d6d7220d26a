"""Pictures of particle runs: snapshots of the token cloud on S² and the energy curve.

Every function writes a PNG with the Agg backend and returns its path.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_particle_run", "sphere_axes", "scatter_on_sphere"]


def _figure(**kwargs: Any) -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def sphere_axes(fig: Any, position: Any, *, title: str = "") -> Any:
    """A 3D axes with a faint wireframe unit sphere."""
    ax = fig.add_subplot(*position, projection="3d")
    u, v = np.mgrid[0 : 2 * np.pi : 25j, 0 : np.pi : 13j]
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.85", linewidth=0.4)
    ax.set_box_aspect((1, 1, 1))
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def scatter_on_sphere(ax: Any, x: np.ndarray, **kwargs: Any) -> None:
    """Scatter points of S² (first three coordinates if d > 3)."""
    kwargs.setdefault("s", 6)
    kwargs.setdefault("depthshade", True)
    ax.scatter(x[:, 0], x[:, 1], x[:, 2], **kwargs)


def plot_particle_run(
    t: np.ndarray,
    x: np.ndarray,
    path: str | Path,
    *,
    diagnostics: dict[str, np.ndarray] | None = None,
    snapshots: int = 4,
    title: str = "",
) -> Path:
    """Snapshots of the cloud at ``snapshots`` times, plus ``E_multi(t)`` when recorded.

    Parameters
    ----------
    t : (T,) array
    x : (T, n, d) array
    path : path-like
        PNG to write.
    diagnostics : dict of (T,) arrays, optional
        ``energy`` is drawn when present.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    picks: Sequence[int] = np.unique(np.linspace(0, len(t) - 1, snapshots).round().astype(int))
    has_energy = diagnostics is not None and "energy" in diagnostics
    cols = len(picks) + (1 if has_energy else 0)
    fig = _figure(figsize=(3.0 * cols, 3.2), constrained_layout=True)
    for k, index in enumerate(picks):
        ax = sphere_axes(fig, (1, cols, k + 1), title=f"t = {t[index]:.3g}")
        cloud = x[index]
        if cloud.shape[1] >= 3:
            scatter_on_sphere(ax, cloud, c=np.arange(len(cloud)), cmap="viridis")
    if has_energy:
        ax = fig.add_subplot(1, cols, cols)
        ax.plot(t, diagnostics["energy"], color="C3")
        ax.set_xlabel("t")
        ax.set_ylabel(r"$E_{\mathrm{multi}}$")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110)
    return path
