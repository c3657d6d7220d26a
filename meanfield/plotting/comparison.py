r"""Several runs in one figure: one tracked series (``run.diagnostics[series]``) of each run against time.

.. code-block:: python

    import meanfield as mf
    from meanfield.plotting import compare

    warm = mf.simulate("data/default.toml", beta=1, t_final=5)
    cold = mf.simulate("data/default.toml", beta=9, t_final=5)
    fig = compare([warm, cold], series="max_speed")    # legend: β = 1, β = 9; a log scale, as run.plot() draws it
    compare([warm, cold], series="energy", ax=my_ax)   # into a panel of your own figure; returns that figure

Each line is labelled by what tells its run apart from the others (the parts of :func:`~meanfield.plotting.runs.run_title`
they do not share, else the config keys whose values differ, else its place in ``runs``); what they share is the title.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from meanfield.plotting.canvas import check_figure_options, figure_and_axes, save

__all__ = ["compare", "run_labels", "SERIES_LABELS", "LOG_SERIES"]

#: the y-axis label of the series the run's own trackers record (any other is labelled by its name)
SERIES_LABELS = {
    "energy": r"interaction energy $E$",
    "log_energy": r"$\ln E$",
    "energy_theta": r"energy $E(\mu_t, t)=\sum_h w_hE_h$",
    "max_speed": r"largest speed $\max_i |\dot x_i|$",
    "sphere_error": r"sphere error $\max_i\,|\,\|x_i\|-1\,|$",
    "w2_target": r"$W_2(\rho_t,\Pi_\sharp\rho_0)$ (rad)",
    "v_eigenspace_distance": r"distance to $E_V$ (rad)",
    "e_eigenspace_distance": r"distance to $E$ (rad)",
    "mass_error": r"mass error $|\sum m(t)-\sum m(0)|$",
    "min_mass": r"smallest cell mass $\min_c m_c$",
    "rayleigh": r"mean $x^\top S x$",
}
#: series drawn on a log scale whenever all their values are > 0, as the single-run figures draw them (any other
#: positive series is too where it spans two decades or more)
LOG_SERIES = frozenset({"max_speed", "w2_target", "v_eigenspace_distance", "e_eigenspace_distance"})
#: how many decades a positive series spans before it is drawn on a log scale
LOG_DECADES = 2.0


def _series_label(series: str) -> str:
    """The y-axis label of ``series``: :data:`SERIES_LABELS`, a head's energy ``energy_h<k>`` as :math:`E_k`, else the name."""
    if series in SERIES_LABELS:
        return SERIES_LABELS[series]
    head = re.fullmatch(r"energy_h(\d+)", series)
    return rf"energy of head {head.group(1)}, $E_{{{head.group(1)}}}$" if head else series


def _check_runs(runs: Any) -> list[Any]:
    """``runs`` as a list of runs (objects with ``t`` and ``diagnostics``), each with a saved frame."""
    if hasattr(runs, "diagnostics") or isinstance(runs, (str, bytes, Mapping)) or not isinstance(runs, Sequence):
        what = "one Run: pass a list, compare([run])" if hasattr(runs, "diagnostics") else type(runs).__name__
        raise TypeError(f"runs must be a list or tuple of meanfield.Run, got {what}")
    runs = list(runs)
    if not runs:
        raise ValueError("runs is empty: give at least one meanfield.Run")
    for k, run in enumerate(runs):
        if not (hasattr(run, "diagnostics") and hasattr(run, "t")):
            raise TypeError(f"runs[{k}] must be a meanfield.Run, got {type(run).__name__}")
        if not len(run.t):
            raise ValueError(f"runs[{k}] has no saved frame to draw yet")
    return runs


def _check_labels(labels: Any, count: int) -> list[str] | None:
    if labels is None:
        return None
    if isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence):
        raise TypeError(f"labels must be a list of strings, one per run, got {type(labels).__name__}")
    bad = [k for k, label in enumerate(labels) if not isinstance(label, str)]
    if bad:
        raise TypeError(f"labels[{bad[0]}] must be a string, got {type(labels[bad[0]]).__name__}")
    if len(labels) != count:
        raise ValueError(f"labels: {len(labels)} given for {count} run{'s' if count != 1 else ''}; give one per run")
    return list(labels)


def _flat_config(config: Mapping[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """The scalar settings of a config as ``{"section.key": value}`` (lists such as the heads left out)."""
    out: dict[str, Any] = {}
    for key, value in (config or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat_config(value, name + "."))
        elif value is None or isinstance(value, (str, int, float, bool)):
            out[name] = value
    return out


def _config_differences(runs: Sequence[Any], *, most: int = 2) -> list[str]:
    """Per run, up to ``most`` of the config keys whose values differ between the runs, as ``"key = value"``."""
    flat = [_flat_config(getattr(run, "config", None)) for run in runs]
    keys = [key for key in flat[0] if len({repr(f.get(key)) for f in flat}) > 1]
    return [", ".join(f"{key} = {f[key]:g}" if isinstance(f.get(key), float) else f"{key} = {f.get(key)}"
                      for key in keys[:most]) for f in flat]


def run_labels(runs: Sequence[Any]) -> tuple[list[str], str]:
    """Short labels that tell ``runs`` apart, and the description they share (for the title).

    A label is the parts of the run's :func:`~meanfield.plotting.runs.run_title` that not every run has (``β = 9``);
    where two labels are alike, the config keys whose values differ are added (``init.seed = 3``), and where they are
    still alike (or empty), the run's place in ``runs`` (``run 1``).
    """
    from meanfield.plotting.runs import run_title

    parts = [[part for part in run_title(run).split(", ") if part] for run in runs]
    if len(runs) == 1:
        return [", ".join(parts[0]) or "run 0"], ""
    common = [part for part in parts[0] if all(part in other for other in parts[1:])]
    labels = [", ".join(part for part in own if part not in common) for own in parts]
    described = list(labels)
    for label in {label for label in described if described.count(label) > 1}:  # alike: the config keys that differ among them
        alike = [k for k, other in enumerate(described) if other == label]
        for k, extra in zip(alike, _config_differences([runs[k] for k in alike])):
            labels[k] = ", ".join(filter(None, (label, extra)))
    if len(set(labels)) < len(labels) or not all(labels):
        labels = [f"run {k}" + (f": {label}" if label else "") for k, label in enumerate(labels)]
    return labels, ", ".join(common)


def _series_values(runs: Sequence[Any], series: str, names: Sequence[str]) -> list[np.ndarray]:
    """Each run's ``diagnostics[series]`` as floats, one value per saved frame; unknown or missing series named."""
    if not isinstance(series, str):
        raise TypeError(f"series must be the name of a tracked series (a key of run.diagnostics), got {type(series).__name__}")
    recorded = [set(run.diagnostics) for run in runs]
    if not any(series in keys for keys in recorded):
        available = sorted(set().union(*recorded))
        raise ValueError(f"series {series!r} is not recorded by any of the runs; they record: {', '.join(available) or 'nothing'}")
    missing = [k for k, keys in enumerate(recorded) if series not in keys]
    if missing:
        shared = sorted(set.intersection(*recorded))
        which = ", ".join(f"runs[{k}] ({names[k]})" for k in missing)
        raise ValueError(f"series {series!r} is not recorded by {which}; every run records: {', '.join(shared) or 'nothing'}")
    values = []
    for k, run in enumerate(runs):
        y = np.asarray(run.diagnostics[series], dtype=float)
        if y.shape != (len(run.t),):
            raise ValueError(f"series {series!r} of runs[{k}] ({names[k]}) has shape {y.shape}, not one value per "
                             f"saved frame ({len(run.t)},)")
        if not np.isfinite(y).any():
            hint = " (the energy passed the largest float: series='log_energy' draws ln E)" if series == "energy" else ""
            raise ValueError(f"series {series!r} of runs[{k}] ({names[k]}) has no finite value to draw{hint}")
        values.append(y)
    return values


def _decades(values: Sequence[np.ndarray]) -> float:
    """How many decades the finite positive values span (0 where there are none)."""
    finite = np.concatenate([y[np.isfinite(y)] for y in values])
    positive = finite[finite > 0]
    return math.log10(float(positive.max()) / float(positive.min())) if positive.size else 0.0


def _scale(series: str, values: Sequence[np.ndarray], log: bool | None) -> str:
    """``"linear"``, ``"log"`` or ``"symlog"`` (values ≤ 0 beside positive ones spanning decades)."""
    finite = np.concatenate([y[np.isfinite(y)] for y in values])
    positive = finite[finite > 0]
    if log is False or not positive.size:
        return "linear"
    decades = _decades(values)
    if log is None and not (series in LOG_SERIES or decades >= LOG_DECADES):
        return "linear"
    if positive.size == finite.size:
        return "log"
    return "symlog" if log or decades >= LOG_DECADES else "linear"


def compare(
    runs: Sequence[Any],
    series: str = "energy",
    *,
    labels: Sequence[str] | None = None,
    ax: Axes | None = None,
    log: bool | None = None,
    title: str | None = None,
    path: str | Path | None = None,
    dpi: int = 110,
) -> Figure:
    r"""One tracked series of several runs against time, one line per run on one axes, with a legend.

    Parameters
    ----------
    runs : sequence of meanfield.Run
        The runs to overlay (from :func:`meanfield.simulate`, :func:`meanfield.solve` or :func:`meanfield.load`), in
        the order of the legend.
    series : str
        A key of ``run.diagnostics`` that every run records: ``"energy"`` (default), ``"max_speed"``, ``"w2_target"``
        (``[track] concentration = true``), ``"energy_theta"`` (a ``pooled`` run's own energy), ``"log_energy"``
        (:math:`\ln E`, where :math:`E` passed the largest float), ``"mass_error"``, your own tracker's names, …
        An unknown name is refused with the names the runs record; a run that does not record it is named.
    labels : sequence of str, optional
        The legend entry of each run; by default what tells the run apart from the others (``β = 9``; the
        description they all share is the title).
    ax : matplotlib.axes.Axes, optional
        Draw into this Axes (a panel of your own figure) instead of a new figure; its figure is returned.
    log : bool, optional
        The y scale: by default logarithmic where every value is > 0 and the values span two decades or more, and
        for ``max_speed`` and the distances of the concentration tracker (as the single-run figures draw them);
        symmetric-logarithmic (linear near 0) where values ≤ 0 sit beside positive ones spanning decades.
        ``True`` asks for a log scale (symmetric where values ≤ 0 are drawn too), ``False`` for a linear one.
    title : str, optional
        The axes' title (default: the series, how many runs, and what they share; a given ``ax`` keeps its own).
    path : str or Path, optional
        Save the figure there (the whole figure, with ``ax``).
    dpi : int
        Resolution of the saved file.

    Returns
    -------
    matplotlib.figure.Figure
        A new figure, or the one that holds ``ax``.

    Raises
    ------
    TypeError
        ``runs`` not a list of runs, ``series`` not a string, ``labels`` not strings, ``ax`` not an Axes.
    ValueError
        ``series`` recorded by no run (the names they record are listed) or not by every run (those are named);
        a run whose series has no finite value; as many ``labels`` as runs not given.

    Examples
    --------
    >>> fig = compare([warm, cold], series="max_speed")                     # doctest: +SKIP
    >>> fig = compare([r1, r2, r3], labels=["rk4", "euler", "grid"])        # doctest: +SKIP
    """
    runs = _check_runs(runs)
    given = _check_labels(labels, len(runs))
    if log is not None and not isinstance(log, (bool, np.bool_)):
        raise TypeError(f"log must be True, False or None (chosen from the values), got {log!r}")
    check_figure_options(path, title=title, dpi=dpi)  # before anything is drawn
    described, shared = run_labels(runs)
    names = given if given is not None else described
    values = _series_values(runs, series, names)
    fig, target = figure_and_axes(ax, figsize=(6.4, 4.2))
    if len(runs) <= 10:
        colors: list[Any] = [f"C{k}" for k in range(len(runs))]
    else:  # (the cycle C0…C9 would give runs 0 and 10 one colour)
        import matplotlib

        colors = [matplotlib.colormaps["viridis"](k / (len(runs) - 1)) for k in range(len(runs))]
    for run, y, name, color in zip(runs, values, names, colors):
        t = np.asarray(run.t, dtype=float)
        target.plot(t, y, color=color, label=name, marker="." if len(t) < 3 else None)  # (one frame: a point)
    scale = _scale(series, values, None if log is None else bool(log))
    if scale == "symlog":
        finite = np.concatenate([np.abs(y[np.isfinite(y)]) for y in values])
        target.set_yscale("symlog", linthresh=float(finite[finite > 0].min()))
    else:
        target.set_yscale(scale)
    if scale == "log" and _decades(values) < 1.0:  # (less than a decade: minor labels as 2.6×10⁻¹, hard to read)
        from matplotlib.ticker import FormatStrFormatter

        target.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
        target.yaxis.set_minor_formatter(FormatStrFormatter("%.3g"))
    target.set_xlabel("time t")
    target.set_ylabel(_series_label(series))
    target.grid(alpha=0.3, which="both")
    target.legend(fontsize=8)
    if title is None and not target.get_title():  # (a given panel's own title is kept)
        title = f"{series} of {len(runs)} run{'s' if len(runs) != 1 else ''}" + (f"\n{shared}" if shared else "")
    if title:
        target.set_title(title, fontsize=10)
    return save(fig, path, dpi=dpi)
