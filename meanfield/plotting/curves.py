r"""Curves: the concentration analysis, the β family, refinement studies and the diagnostics of a run.

Every function returns a :class:`matplotlib.figure.Figure` and saves it when given a path; the one-panel ones
(:func:`plot_concentration`, :func:`plot_convergence`) draw into a given ``ax`` instead of a new figure, and return
the figure that holds it.  Several runs in one figure: :func:`meanfield.plotting.compare`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from meanfield.plotting.canvas import check_figure_options, check_picture_path, figure_and_axes, new_figure, save

__all__ = ["plot_concentration", "plot_sweep", "plot_convergence", "plot_diagnostics", "shown_energy"]


def shown_energy(diagnostics: Mapping[str, Any] | None, frames: int, *,
                 attention: str | None = None) -> tuple[str, np.ndarray] | None:
    r"""The energy series a run's figure draws: ``("energy", E)``, or ``("log_energy", ln E)`` where E passed the floats.

    At low temperature :math:`E \sim e^{\beta}/(2\beta)` is ``inf`` from :math:`\beta \approx 709` (``B = I``),
    and the energy panel had been left out (the largest speed drawn instead); the energy tracker's ``log_energy``
    holds :math:`\ln E` from the same sums.  ``None`` where neither has a finite value over ``frames`` frames.

    On a run of ``attention = "pooled"`` the flow's energy is :math:`E(\mu,t)=\sum_hw_hE_h` (Massucco et al.,
    arXiv 2605.18870), the tracker's ``energy_theta``, while its ``energy`` is :math:`\sum_hE_h` (:math:`H` times
    it for equal weights; it had been drawn as "interaction energy E"): ``("energy_theta", E_Θ)`` where it is finite
    at every frame, else the sum under its own name, ``("energy_sum", Σ_h E_h)`` or ``("log_energy_sum", ln Σ_h E_h)``.
    """
    series = {k: np.asarray(diagnostics[k], dtype=float) for k in ("energy", "log_energy", "energy_theta")
              if diagnostics and k in diagnostics and np.shape(diagnostics[k]) == (frames,)}
    theta = series.get("energy_theta")
    if attention == "pooled" and theta is not None and np.isfinite(theta).all():
        return "energy_theta", theta
    energy, logs = series.get("energy"), series.get("log_energy")
    if energy is not None and (np.isfinite(energy).all() or logs is None or not np.isfinite(logs).any()):
        shown = ("energy", energy) if np.isfinite(energy).any() else None
    else:
        shown = ("log_energy", logs) if logs is not None and np.isfinite(logs).any() else None
    if shown is not None and attention == "pooled":  # the sum over the heads, not the flow's energy: said so
        return f"{shown[0]}_sum", shown[1]
    return shown


def plot_concentration(curves: dict[str, np.ndarray], summary: dict[str, Any], path: str | Path | None = None, *,
                       title: str = "", ax: Axes | None = None) -> Figure:
    """W2(ρ_t, Π♯ρ₀) and the distance to E_V against t (log y), window shaded, t_min marked.

    ``ax``: a matplotlib Axes to draw into (a panel of your own figure) instead of a new figure; the figure that holds
    it is returned (and saved, when ``path`` is given).
    """
    check_picture_path(path)  # (before anything is drawn into a given ax)
    fig, ax = figure_and_axes(ax, figsize=(6.4, 4.2))
    t = curves["t"]
    ax.semilogy(t, curves["w2_target"], color="C0", label=r"$W_2(\rho_t,\Pi_\sharp\rho_0)$")
    ax.semilogy(t, np.maximum(curves["v_eigenspace_distance"], 1e-16), color="C3", ls="--", label=r"dist to $E_V$ (Conj. 1)")
    if not np.isnan(summary["t_a"]) and not summary.get("open_start", False):  # (below θ from t = 0: no window)
        ax.axvspan(summary["t_a"], summary["t_b"], color="C0", alpha=0.12, label="metastable window")
    ax.plot([summary["t_min"]], [summary["w2_min"]], "o", color="C0")
    ax.set_xlabel("time t")
    ax.set_ylabel("distance on the sphere (rad)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return save(fig, path)


def _fit_label(fit: Mapping[str, float]) -> str:
    """`` (R²=…)`` of a fit through three points or more; nothing for two (a line through them: R² is 1 or undefined,
    and had read "R²=nan")."""
    return f"  (R²={fit['r2']:.3f})" if np.isfinite(fit.get("r2", math.nan)) else ""


def _log_ticks(axis: Any, values: np.ndarray) -> None:
    """A log axis over ``values`` with no minor labels, and, when its range holds no power of ten (less than a decade:
    only minor ticks would be labelled, and "5.2×10⁻¹ 5.4×10⁻¹ …" had been printed over each other), major ticks at
    up to five of the values."""
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    axis.set_minor_formatter(NullFormatter())
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size and math.floor(math.log10(v.max())) == math.floor(math.log10(v.min())) and v.max() > v.min():
        ticks = np.unique(v)
        ticks = ticks[np.unique(np.linspace(0, ticks.size - 1, min(ticks.size, 5)).round().astype(int))]
        axis.set_ticks(ticks)
        axis.set_major_formatter(FormatStrFormatter("%.3g"))


def _sweep_points(ax: Any, x: np.ndarray, y: np.ndarray, mesh_value: np.ndarray, at_end: np.ndarray, *, end_marker: str,
                  end_label: str, label: str | None = None) -> None:
    """One point per β: hollow where the cores fell below the cells before t_min (the mesh's value), ``end_marker``
    where the minimum is at the last frame (W2 still falling: a bound, not a minimum); legend entries for each kind."""
    from matplotlib.lines import Line2D

    for hollow in (False, True):
        for end in (False, True):
            pick = (mesh_value == hollow) & (at_end == end)
            if pick.any():
                ax.plot(x[pick], y[pick], end_marker if end else "o", color="C0", mfc="none" if hollow else "C0", ls="")
    kinds = [("o", "C0", label, True), ("o", "none", "cores below the cells: the mesh's", mesh_value.any()),
             (end_marker, "C0", end_label, at_end.any())]
    handles, labels = ax.get_legend_handles_labels()
    for marker, face, text, shown in kinds:
        if text and shown:
            handles.append(Line2D([], [], marker=marker, color="C0", mfc=face, ls=""))
            labels.append(text)
    ax.legend(handles, labels, fontsize=8)


def plot_sweep(sweep: Any, path: str | Path | None = None, *, title: str | None = None, dpi: int = 110) -> Figure:
    """Three panels: W2(t) per β (log–log); t_min against log β with its fit; W2_min against √(log(β+1)/β).

    ``sweep``: a :class:`~meanfield.solvers.experiments.concentration.BetaSweep` (whose ``plot()`` calls this, as
    ``meanfield concentration --sweep-beta … --plot`` does).  A refined sweep's coarser run of each β
    (``coarse_curves``) is drawn thin and dashed in the colour of its β, and each β's legend entry gives both sizes,
    each with "(under-res.)" where that run is under-resolved.  A minimum at the last frame (``min_at_end``: W2 still
    falling) is drawn as a triangle, ▷ where t_min is (at least) and ▽ where W2_min is (at most), not as a minimum; the
    fits' R² is shown for three βs or more.  ``title`` replaces the figure's title (default: what is concentrated and
    the solver); ``dpi``: the saved file's resolution.
    """
    from meanfield.analysis.projection import concentration_rate

    check_figure_options(path, title=title, dpi=dpi)  # before anything is drawn
    fig = new_figure(figsize=(13.0, 4.2))
    ax1, ax2, ax3 = (fig.add_subplot(1, 3, k) for k in (1, 2, 3))
    colors = [f"C{k % 10}" for k in range(len(sweep.betas))]
    coarse_curves = list(getattr(sweep, "coarse_curves", None) or [None] * len(sweep.betas))
    for beta, curve, coarse, s, color in zip(sweep.betas, sweep.curves, coarse_curves, sweep.summaries, colors):
        t, w = curve["t"], curve["w2_target"]
        keep = t > 0
        # each run's own warning (the coarser run's had been put on the finer, drawn curve)
        fine_under = s.get("under_resolved_fine", s["under_resolved"])
        label = f"β = {beta:g}"
        if coarse is not None:  # the other half of the convergence columns: thin, dashed, the colour of its β
            tc = np.asarray(coarse["t"])
            ax1.loglog(tc[tc > 0], np.asarray(coarse["w2_target"])[tc > 0], "--", color=color, lw=0.9)
            label += (f": n = {s['n']}" + (" (under-res.)" if fine_under else "")
                      + f", dashed n = {s['n_coarse']}" + (" (under-res.)" if s.get("under_resolved_coarse") else ""))
        elif fine_under:
            label += " (under-res.)"
        if s.get("cores"):  # the grid's cores below its cells before t_min: dotted from there on, the mesh's W2
            label += f" (cores below cells, dotted, from t = {s['t_cores_unresolved']:.3g})"
            mesh_part = keep & (t >= s["t_cores_unresolved"])
            ax1.loglog(t[mesh_part], w[mesh_part], ":", color=color, lw=1.0)
            keep = keep & (t <= s["t_cores_unresolved"])
        ax1.loglog(t[keep], w[keep], color=color, label=label)
        ax1.plot([s["t_min"]], [s["w2_min"]], ">" if s.get("min_at_end") else "o", color=color, ms=4,
                 mfc="none" if s.get("cores") else color)
    from matplotlib.ticker import NullFormatter

    ax1.xaxis.set_minor_formatter(NullFormatter())  # (less than two decades of t: the minor labels had overlapped)
    ax1.set_xlabel("time t")
    ax1.set_ylabel(r"$W_2(\rho^\beta_t,\Pi_\sharp\rho_0)$")
    ax1.grid(alpha=0.3, which="both")
    ax1.legend(fontsize=7)
    logb = np.log(sweep.betas)
    t_min = np.array([s["t_min"] for s in sweep.summaries])
    mesh_value = np.array([bool(s.get("cores")) for s in sweep.summaries])  # cores below the cells before t_min
    at_end = np.array([bool(s.get("min_at_end")) for s in sweep.summaries])  # W2 still falling at the last frame
    fit = sweep.fit_tmin
    grid = np.linspace(logb.min(), logb.max(), 50)
    sign = "−" if fit["intercept"] < 0 else "+"  # (it had read "+ -0.34")
    ax2.plot(grid, fit["slope"] * grid + fit["intercept"], color="C1",
             label=f"{fit['slope']:.3g} log β {sign} {abs(fit['intercept']):.3g}{_fit_label(fit)}")
    _sweep_points(ax2, logb, t_min, mesh_value, at_end, end_marker=">", end_label="minimum at the last frame: t_min ≥ this")
    ax2.set_xlabel(r"$\log\beta$")
    ax2.set_ylabel(r"$t_{\min}$")
    ax2.grid(alpha=0.3)
    rate = concentration_rate(sweep.betas)
    w_min = np.array([s["w2_min"] for s in sweep.summaries])
    ax3.set_xscale("log")
    ax3.set_yscale("log")
    fit = sweep.fit_w2min
    grid = np.linspace(np.log(rate.min()), np.log(rate.max()), 50)
    ax3.loglog(np.exp(grid), np.exp(fit["slope"] * grid + fit["intercept"]), color="C1",
               label=f"∝ rate^{fit['slope']:.3g}{_fit_label(fit)}")
    ax3.loglog(rate, rate, color="0.5", ls=":", label="rate")
    _sweep_points(ax3, rate, w_min, mesh_value, at_end, end_marker="v", label=r"$W_{2,\min}$",
                  end_label=r"minimum at the last frame: $W_{2,\min}$ ≤ this")
    _log_ticks(ax3.xaxis, rate)
    _log_ticks(ax3.yaxis, np.concatenate([w_min, rate]))
    ax3.set_xlabel(r"$\sqrt{\log(\beta+1)/\beta}$")
    ax3.set_ylabel(r"$W_{2,\min}$")
    ax3.grid(alpha=0.3, which="both")
    fig.suptitle(f"concentration onto Π♯ρ₀, {sweep.solver} solver" if title is None else title, fontsize=10)
    return save(fig, path, dpi=dpi)


def plot_convergence(rows: Sequence[dict[str, Any]], path: str | Path | None = None, *, title: str | None = None, dpi: int = 120,
                     ax: Axes | None = None) -> Figure:
    r"""Log–log plot of a refinement study (:func:`solvers.refinement.convergence_study`) against :math:`h`: the scheme's
    own errors (L1 and :math:`W_2` to the reference's reconstructed density on each row's cells) with a slope-2 guide,
    and :math:`W_2` between cell atoms (capped near order 1 by the quantisation) with a slope-1 guide.

    (It had drawn the cell-atom :math:`W_2` alone, beside a slope-1 line: a second-order scheme read as first order.)

    ``ax``: a matplotlib Axes to draw into (a panel of your own figure) instead of a new figure; the figure that holds
    it is returned (and saved, when ``path`` is given)."""
    check_picture_path(path)  # (before anything is drawn into a given ax)
    fig, ax = figure_and_axes(ax, figsize=(6.2, 4.6))
    plotted: set[float] = set()  # the h of the rows drawn (the reference row, all NaN, had stretched the axis)
    curves = (("l1_reference", "L1 to the reference density (the scheme's error)", "D", "C2", 2),
              ("w2_projected", "W2 to the reference density (the scheme's error)", "^", "C1", 2),
              ("w2_reference", "W2 between cell atoms (quantisation: order ≤ 1)", "o", "C0", 1),
              ("w2_particles", "W2 to particles", "s", "C3", None))
    for key, label, marker, color, order in curves:
        pts = [(r["h"], r[key]) for r in rows if np.isfinite(r.get(key, np.nan)) and r.get(key, 0) > 0]
        if not pts:
            continue
        h, e = np.array(pts).T
        plotted.update(float(v) for v in h)
        ax.loglog(h, e, marker=marker, color=color, label=label)
        if order is not None and h.size > 1:  # a guide through the coarsest point
            guide = np.array([h.min(), h.max()])
            ax.loglog(guide, e[np.argmax(h)] * (guide / h.max()) ** order, ls="--" if order == 1 else ":", color=color,
                      lw=0.8, label=f"slope {order}")
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FormatStrFormatter("%.3g"))
    ax.set_xticks(sorted(plotted))
    ax.set_xlabel("cell size h = √(4π/N)")
    ax.set_ylabel("error at t_final (W₂ geodesic; L1 of the masses)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title)
    return save(fig, path, dpi=dpi)


def plot_diagnostics(series: Mapping[str, np.ndarray], path: str | Path | None = None, *, H: int, n: int,
                     massive: int | None = None, title: str = "") -> Figure:
    """Five panels: energies; the :math:`dE_h/dt` split; dominance margins; entropy vs :math:`\\log n`; clusters.

    ``massive`` tokens of the ``n`` carry mass (``None``: all): a row's entropy is at most the log of their number.
    """
    t = np.asarray(series["t"])
    # one colour per head (beyond 10 heads the cycle C0…C9 had given heads 10 and 0 one colour)
    if H <= 10:
        colors = [f"C{h}" for h in range(H)]
    else:
        import matplotlib

        colors = [matplotlib.colormaps["turbo"](h / (H - 1)) for h in range(H)]
    fig = new_figure(figsize=(11, 13))
    axes = fig.subplots(5, 1, sharex=True)

    ax = axes[0]
    ax.plot(t, series["energy"], "k", lw=2, label=r"$E_{\rm multi}$")
    for h in range(H):
        ax.plot(t, series[f"energy_h{h}"], color=colors[h], label=f"$E_{{{h}}}$")  # ($E_10$ had read E₁0)
    ax.set_ylabel("energy")
    # the heads' colour key, for every panel (the others name only their line styles: with 10 heads a 40-entry legend
    # had covered a third of a panel); beside the panel where it would not fit inside
    if H <= 4:
        ax.legend(fontsize=8, ncol=min(H + 1, 6))
    else:
        ax.legend(fontsize=8, ncol=1 + H // 12, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="colour: head", title_fontsize=8)

    ax = axes[1]
    for h in range(H):
        c = colors[h]
        ax.plot(t, series[f"dEdt_h{h}"], color=c, lw=2, label=f"$dE_{{{h}}}/dt$")
        ax.plot(t, series[f"self_power_h{h}"], color=c, ls="-", lw=0.8, alpha=0.8, label=f"self power {h}")
        if H > 1:
            ax.plot(t, series[f"cross_sum_h{h}"], color=c, ls="--", lw=0.8, label=f"cross {h}")
            ax.plot(t, -np.asarray(series[f"shadow_sum_h{h}"]), color=c, ls=":", lw=1.2, label=f"−shadows {h}")
    ax.axhline(0.0, color="0.5", lw=0.6)
    stems = ("dEdt", "self_power", "cross_sum", "shadow_sum")
    magnitude = [np.nanmax(np.abs(series[f"{s}_h{h}"])) for s in stems for h in range(H) if np.any(np.isfinite(series[f"{s}_h{h}"]))]
    top = float(max(magnitude)) if magnitude else 0.0
    if top > 0:  # heads of very different strength: linear near 0, logarithmic beyond
        ax.set_yscale("symlog", linthresh=1e-3 * top, linscale=2.0)  # (a wider linear band: the labels ±linthresh and 0 had overlapped)
    ax.set_ylabel(r"$dE_h/dt$ split")
    from matplotlib.lines import Line2D

    styles = [(r"$dE_h/dt$", "-", 2.0), ("self power", "-", 0.8)] + ([("cross", "--", 0.8), ("−shadows", ":", 1.2)] if H > 1 else [])
    # beside the panel: inside, it had covered the curves
    ax.legend([Line2D([], [], color="0.2", ls=ls, lw=lw) for _, ls, lw in styles], [name for name, _, _ in styles],
              fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="head h: its colour" if H > 1 else None,
              title_fontsize=7)

    ax = axes[2]
    for h in range(H):
        ax.plot(t, series[f"aggregate_margin_h{h}"], color=colors[h], label=f"aggregate margin {h}")
    ax.axhline(0.0, color="0.5", lw=0.6)
    ax.set_ylabel(r"$\sigma\,(dE_h/dt)/S_h$")
    twin = ax.twinx()
    for h in range(H):
        twin.plot(t, series[f"dominance_fraction_h{h}"], color=colors[h], ls="--", lw=0.8)
    twin.set_ylabel("per-token fraction (dashed)")
    twin.set_ylim(-0.05, 1.05)
    dashed = Line2D([], [], color="0.2", ls="--", lw=0.8, label="per-token fraction (right axis)")
    if H <= 4:
        ax.legend(handles=ax.lines[:H] + [dashed], fontsize=8)
    else:
        ax.legend(handles=[dashed], fontsize=8)

    ax = axes[3]
    for h in range(H):
        mean = np.asarray(series[f"entropy_mean_h{h}"])
        std = np.asarray(series[f"entropy_std_h{h}"])
        ax.plot(t, mean, color=colors[h], label=f"$\\mathcal{{H}}^{{{h}}}$ mean")
        ax.fill_between(t, mean - std, mean + std, color=colors[h], alpha=0.2, lw=0)
    seen = n if massive is None else massive  # (tokens of mass 0 take no attention: log n had been drawn above reach)
    if seen > 1:
        ax.axhline(math.log(seen), color="k", ls="--", lw=1,
                   label=r"$\log n$" if seen == n else rf"$\log {seen}$ ({seen} of {n} tokens carry mass)")
    ax.set_ylabel("attention entropy (mean ± std)")
    if H <= 4:
        ax.legend(fontsize=8)
    elif seen > 1:
        ax.legend(handles=[ax.lines[-1]], fontsize=8)

    ax = axes[4]
    with np.errstate(invalid="ignore", divide="ignore"):
        for key, style in (("one_minus_gamma", "-"), ("max_gap", "--")):
            values = np.asarray(series[key], dtype=float)
            positive = values > 0
            if np.any(positive):
                ax.semilogy(t[positive], values[positive], "k" + style, label=key.replace("_", " "))
    ax.set_ylabel(r"$1-\gamma$, $1-\min\langle x_i,x_j\rangle$")
    ax.set_xlabel("time t")
    twin = ax.twinx()
    twin.step(t, series["n_clusters"], where="post", color="C3", lw=1)
    twin.set_ylabel("clusters", color="C3")
    ax.legend(fontsize=8, loc="lower left")
    if title:
        fig.suptitle(title)
    return save(fig, path)
