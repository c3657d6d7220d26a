"""``meanfield info OUT.h5``: summarise a run (config, frames, status, diagnostics)."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from meanfield.errors import ConfigError
from meanfield.io import read_run


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("info", help="summarise a run file", description=__doc__)
    p.add_argument("run", help="HDF5 run file")
    p.add_argument("--plot", metavar="PNG|GIF", help="also draw the run (a .gif path makes an animation)")
    p.set_defaults(func=main)


def _load(path: str | Path) -> dict:
    if not Path(path).exists():
        raise ConfigError("OUT.h5", f"file not found: {path}")
    try:
        return read_run(path)
    except (OSError, KeyError) as exc:
        raise ConfigError("OUT.h5", f"{path} is not a meanfield run: {exc}") from None


def summarise(path: str | Path) -> str:
    """A few lines describing a run file."""
    run = _load(path)
    cfg = run["config"]
    m, s = cfg["model"], cfg["solver"]
    t = run["t"]
    lines = [f"file:      {path}", f"status:    {run['status']} ({run['stop_reason'] or 'n/a'})"]
    lines.append(f"model:     d={m['d']} beta={m['beta']:g} attention={m['attention']} direction={m['direction']}")
    heads = m["heads"]
    lines.append(f"heads:     {len(heads) if isinstance(heads, list) else (heads or 1)}")
    lines.append(f"solver:    {s['kind']} method={s['method']} dt={s['dt']:g} t_final={s['t_final']:g}")
    if "x" in run:
        lines.append(f"frames:    {len(t)}  t in [{t[0]:.4g}, {t[-1]:.4g}]  tokens n={run['x'].shape[1]}")
        if len(t):
            from meanfield.diagnostics import cluster_statistics  # blocked: no n×n array

            stats = cluster_statistics(run["x"][-1])
            lines.append(f"final:     min <x_i,x_j> = {stats['min_inner']:.6f}  (1 = one cluster)")
    elif "mass" in run:
        lines.append(f"frames:    {len(t)}  t in [{t[0]:.4g}, {t[-1]:.4g}]  cells N={run['mass'].shape[1]}")
    for key, series in sorted(run.get("diagnostics", {}).items()):
        if len(series) and key in ("energy", "sphere_error", "max_speed", "w2_target", "mass_error"):
            finite = series[np.isfinite(series)]
            if finite.size:
                lines.append(f"{key + ':':<14}{finite[0]:.6g} -> {finite[-1]:.6g}")
    return "\n".join(lines)


def plot_file(path: str | Path, png: str | Path) -> Path:
    """Draw a run file: a PNG summary, or a GIF animation when ``png`` ends in ``.gif``.

    Particles: snapshots on S² and the energy; grid: density maps and diagnostics.
    """
    run = _load(path)
    if str(png).lower().endswith(".gif"):
        from meanfield.plot_sphere import animate_density, animate_particles, run_mesh

        if "x" in run:
            return animate_particles(run["t"], run["x"], png)
        return animate_density(run_mesh(run), run["t"], run["mass"], png)
    if "x" in run:
        from meanfield.plotting import plot_particle_run

        m = run["config"]["model"]
        return plot_particle_run(run["t"], run["x"], png, diagnostics=run.get("diagnostics"), title=f"{m['attention']}, β={m['beta']:g}, n={run['x'].shape[1]}")
    from meanfield.plot_sphere import plot_grid_run  # grid runs

    return plot_grid_run(run, png)


def main(args: argparse.Namespace) -> int:
    print(summarise(args.run))
    if args.plot:
        print(f"wrote {plot_file(args.run, args.plot)}")
    return 0
