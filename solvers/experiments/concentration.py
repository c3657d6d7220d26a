r"""Low-temperature concentration onto :math:`\Pi_\sharp\rho_0` (Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931): tracker, analysis, β sweeps, cost.

.. math::

    W_2\big(\rho^\beta_t, \Pi_\sharp\rho_0\big) \lesssim
        \sqrt{\tfrac{\log(\beta+1)}{\beta}}\; e^{C_1 t} + e^{-ct}

(Theorem 1 of arXiv 2605.10931).  The curve :math:`W_2(t)` first falls
(the zero-temperature flow concentrates the tokens on the dominant eigenspace
:math:`E` of :math:`S=VB^\top`), reaches its minimum :math:`W_{2,\min}(\beta)` at
:math:`t_{\min}(\beta)`, and then rises again as the finite-temperature error
takes over; for large ``t`` the mass drifts toward the dominant eigenspace of
``V`` (Conjecture 1, the terminal phase).

* :func:`concentration_tracker` — records ``w2_target`` = :math:`W_2(\rho_t,\Pi_\sharp\rho_0)`,
  ``v_eigenspace_distance`` (to :math:`E_V`) and ``e_eigenspace_distance``
  (to :math:`E`) at every saved frame (``[track] concentration = true``).
* :func:`concentration_summary` — :math:`t_{\min}`, :math:`W_{2,\min}` and the
  metastable window of one curve.
* :func:`sweep_beta` — the β family with the fits of :math:`t_{\min}` against
  :math:`\log\beta` and of :math:`W_{2,\min}` against :math:`\sqrt{\log(\beta+1)/\beta}`.
* :func:`tracking_share` and :func:`bench_concentration` — what the tracking costs.

The default experiment is :data:`DEFAULT_CONCENTRATION_CONFIG` (also
``data/concentration.toml``).
"""
from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from meanfield.analysis.concentration import (
    ConcentrationTracker,
    assumption_report,
    concentration_summary,
    core_check,
    linear_fit,
    open_window_note,
    r_squared_label,
    resolution_size,
    resolved_range_text,
    single_head,
    tracker_from_head,
)
from meanfield.analysis.projection import concentration_rate, eigenspace_distance, run_resolution_warning
from meanfield.config import SCHEMA, SOLVER_KEYS_USED, load_config
from meanfield.errors import ConfigError, ConfigNote

__all__ = ["DEFAULT_CONCENTRATION_CONFIG", "BetaSweep", "sweep_beta", "sweep_size", "parse_betas", "parse_spacing", "check_spacing_betas", "spacing_of", "SWEEP_SPACING", "REFINEMENT", "tracking_share", "bench_concentration"]

#: The default concentration experiment on S² (also ``data/concentration.toml``; keep them equal).
#: ``B = QᵀK = K`` and ``V`` are chosen so that ``S = V Bᵀ = diag(1, 0.5, 0.25)`` exactly
#: (``B = S V⁻¹`` with ``V⁻¹ = [[1.25, -0.75, 0], [-0.75, 1.25, 0], [0, 0, 4]]``):
#: Assumption 1 holds with gap 0.5 and ``E = span(e1)``, while the dominant
#: eigenspace of ``V`` (eigenvalue 2) is ``span((1, 1, 0)/√2)``, 45° away, so the
#: terminal phase of Conjecture 1 is visible (W2 to Π♯ρ₀ then climbs back to ≈ π/4).
DEFAULT_CONCENTRATION_CONFIG: dict[str, Any] = {
    "model": {
        "d": 3,
        "beta": 16.0,
        "attention": "softmax",
        "tolerance": 1e-8,
        "heads": [
            {
                "Q": "identity",
                "K": [[1.25, -0.75, 0.0], [-0.375, 0.625, 0.0], [0.0, 0.0, 1.0]],
                "V": [[1.25, 0.75, 0.0], [0.75, 1.25, 0.0], [0.0, 0.0, 0.25]],
            }
        ],
    },
    "init": {"kind": "fibonacci", "n": 600, "seed": 0},
    "solver": {"kind": "particle", "method": "rk4", "dt": 0.05, "t_final": 12.0, "save_every": 0.1},
    "track": {"energy": False, "concentration": True},
}


# ----------------------------------------------------------------------------- β sweeps


#: on S² the β family keeps the spacing of cells (or quasi-uniform particles) at
#: ``h = sqrt(4π/N) ≤ SWEEP_SPACING · β^{-1/2}``, a fixed fraction of the kernel width
SWEEP_SPACING = 0.5
#: the second resolution of each β has this many times the degrees of freedom (h / 2), unless ``refinement`` says otherwise
REFINEMENT = 4


@dataclass(frozen=True)
class BetaSweep:
    r"""Outcome of :func:`sweep_beta`.

    Attributes
    ----------
    betas : (m,) array
    curves : list of dict
        Per β: ``t``, ``w2_target``, ``v_eigenspace_distance``, ``e_eigenspace_distance``.
    summaries : list of dict
        Per β: :func:`concentration_summary` plus ``beta``, ``n`` (``grid.cells`` or ``init.n``),
        ``cells`` (the mesh's cells, more than ``n`` on a graded mesh; particles: ``n``), ``rate``
        (:math:`\sqrt{\log(\beta+1)/\beta}`), ``ratio`` (:math:`W_{2,\min}/\text{rate}`),
        ``under_resolved`` (the warning text or ``""``: the finer run's own, else the coarser run's),
        ``under_resolved_fine`` (the finer run's own warning, the one of the curve in ``curves``, or ``""``),
        ``wall_time`` (all runs of the β); refined sweeps add ``n_coarse``, ``cells_coarse``, ``w2_min_coarse``,
        ``t_min_coarse``, ``w2_first_min_coarse``, ``t_first_min_coarse``, ``dw2_min`` (relative change of W2_min
        from the coarser run), ``dt_min`` and ``under_resolved_coarse`` (the coarser run's own warning, or ``""``).
        Grid runs with ``dim E = 1`` on S² add the core check (:func:`core_check`): ``t_cores_unresolved``, ``cores`` (the warning, or ``""``),
        and, where the cores fall below the cells before ``t_min``, ``w2_min_resolved``, ``t_min_resolved``
        and ``resolved_min_at_end`` over the frames before it; refined sweeps also ``t_cores_unresolved_coarse``.
    fit_tmin : dict
        :math:`t_{\min}\approx a\log\beta+b`: ``slope``, ``intercept``, ``r2``.  Over every β, those whose minimum
        is at the last frame (``min_at_end``: :math:`t_{\min}` only a lower bound, :math:`W_{2,\min}` an upper one)
        included, as they are; :meth:`table` names them on both fit lines.
    fit_w2min : dict
        :math:`\log W_{2,\min}\approx a\log\sqrt{\log(\beta+1)/\beta}+b`: ``slope``, ``intercept``, ``r2``.
    solver : str
    files : list of str
        HDF5 runs of ``out_dir``, written or read (empty without ``out_dir``).
    read : list of str
        Those of ``files`` that ``resume`` found finished and only read (nothing written to them).
    refinement : int
        Size of the finer run of each β over the coarser (refined sweeps).
    coarse_curves : list of dict
        Refined sweeps: the coarser run's curves, as ``curves`` (empty otherwise; ``meanfield concentration
        --sweep-beta … --out DIR`` writes them to ``DIR/curves_coarse.csv`` and draws them dashed).
    """

    betas: NDArray[np.float64]
    curves: list[dict[str, NDArray[np.float64]]]
    summaries: list[dict[str, Any]]
    fit_tmin: dict[str, float]
    fit_w2min: dict[str, float]
    solver: str
    files: list[str] = field(default_factory=list)
    refinement: int = REFINEMENT
    coarse_curves: list[dict[str, NDArray[np.float64]]] = field(default_factory=list)
    read: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        """``BetaSweep(grid, β = [4, 16, 64], W2_min = [...], t_min = [...])``: the summary, not every curve."""
        w2 = [float(item.get("w2_min", math.nan)) for item in self.summaries]
        t_min = [float(item.get("t_min", math.nan)) for item in self.summaries]
        return (f"BetaSweep({self.solver}, β = {[float(b) for b in self.betas]}, W2_min = {[round(v, 4) for v in w2]}, "
                f"t_min = {[round(v, 3) for v in t_min]})")

    @property
    def under_resolved(self) -> bool:
        """Whether a β has too few particles or cells for its kernel width, or cluster cores below its cells before t_min."""
        return any(s["under_resolved"] or s.get("cores") for s in self.summaries)

    def table(self) -> str:
        """The per-β numbers and both fits as text."""
        refined = any("dw2_min" in s for s in self.summaries)
        extra = f" {'n coarse':>8} {'ΔW2_min':>8} {'Δt_min':>7}" if refined else ""
        graded = any(s.get("cells", s["n"]) != s["n"] for s in self.summaries)
        cells = f" {'cells':>7}" if graded else ""
        lines = [f"{'beta':>8} {'n':>7}{cells} {'t_min':>8} {'W2_min':>9} {'window [t_a, t_b]':>20} {'rate':>9} {'W2min/rate':>10}{extra}  resolved"]
        for s in self.summaries:
            end = "*" if s["min_at_end"] else " "
            if math.isnan(s["t_a"]):
                window = "none"
            elif s["open_start"]:  # below the threshold from the first frame: no window (the note below says so)
                window = "none (θ ≥ W2(0))"
            else:
                window = f"[{s['t_a']:.3g}, {'≥' if s['open_end'] else ''}{s['t_b']:.3g}]"
            change = f" {s['n_coarse']:8d} {100 * s['dw2_min']:+7.2f}% {s['dt_min']:+7.3g}" if "dw2_min" in s else ""
            mesh = f" {s.get('cells', s['n']):7d}" if graded else ""
            lines.append(
                f"{s['beta']:8.4g} {s['n']:7d}{mesh} {s['t_min']:7.4g}{end} {s['w2_min']:9.4g} {window:>20} "
                f"{s['rate']:9.4g} {s['ratio']:10.4g}{change}  {'no' if s['under_resolved'] or s.get('cores') else 'yes'}"
            )
        a = self.fit_tmin
        b = self.fit_w2min
        no_r2 = "  (no R²: two βs, or the same value at every β)"
        # the βs whose minimum is at the last frame are fitted as they are: say so on the fit lines (only the row's "*"
        # and the footnote had said it, and the fits had read as fits of minima)
        at_end = [f"{s['beta']:g}" for s in self.summaries if s["min_at_end"]]

        def whose(value: str, one: str, several: str) -> str:
            if not at_end:
                return ""
            bound = f"is only {one}" if len(at_end) == 1 else f"are only {several}"
            return f"; fitted with β = {', '.join(at_end)}, whose {value} {bound} (minimum at the last frame, *)"

        lines.append(f"fit t_min = {a['slope']:.4g}·log β {_signed(a['intercept'])}{r_squared_label(a, undefined=no_r2)}"
                     f"{whose('t_min', 'a lower bound', 'lower bounds')}")
        lines.append(f"fit log W2_min = {b['slope']:.4g}·log √(log(β+1)/β) {_signed(b['intercept'])}"
                     f"{r_squared_label(b, undefined=no_r2)}{whose('W2_min', 'an upper bound', 'upper bounds')}")
        for s in self.summaries:
            if s["open_end"] or s["open_start"]:
                lines.append(f"{'' if s['open_start'] else '≥ '}β = {s['beta']:g}: {open_window_note(s)}")
            elif math.isnan(s["t_a"]):  # (as the analysis of one run says it; the table had said only "none")
                lines.append(f"β = {s['beta']:g}: window none (threshold {s['threshold']:.4g} < W2_min = {s['w2_min']:.4g})")
        for s in self.summaries:  # an earlier dip than the global minimum of the columns, as one run's analysis says it
            coarse = "t_first_min_coarse" in s and s["t_first_min_coarse"] < s["t_min_coarse"]
            if s["t_first_min"] < s["t_min"] or coarse:
                fine = (f"W2 = {s['w2_first_min']:.4g} at t = {s['t_first_min']:.4g}" if s["t_first_min"] < s["t_min"]
                        else "the global one")
                also = (f" (coarser run: W2 = {s['w2_first_min_coarse']:.4g} at t = {s['t_first_min_coarse']:.4g})"
                        if coarse else "")
                lines.append(f"β = {s['beta']:g}: first local minimum {fine}{also}, before the global minimum of the columns")
        if refined:
            lines.append(f"n: the finer run ({self.refinement}× the coarser's cells or particles, spacing "
                         f"÷{math.sqrt(self.refinement):.3g}); "
                         "ΔW2_min = (fine − coarse)/fine, Δt_min = fine − coarse: the convergence columns")
        if graded:
            lines.append("cells: the graded mesh's cells for grid.cells = n (fine caps around grid.refine_centres)")
        particles = self.solver != "grid"
        lines.append("resolved: " + ("n ≥ 10·β^((d−1)/2) particles" if particles else "N ≥ 4πβ cells and the cluster cores above the "
                     "cells up to t_min") + (", also in the coarser run" if refined else "") + "; necessary, not sufficient"
                     + (" (the convergence columns say how far from converged)" if refined else
                        " (at β = 16, 160 to 320 particles are still up to 10 % off the converged W2_min: --refinement "
                        "measures it)" if particles else " (--refinement measures how far from converged)"))
        if any(s["min_at_end"] for s in self.summaries):
            lines.append("* the minimum is at the last frame: the run is too short to see t_min (raise solver.t_final)")
        for s in self.summaries:
            if s.get("cores"):
                lines.append(f"β = {s['beta']:g}: {resolved_range_text(s)}")
        return "\n".join(lines)

    def plot(self, path: str | Path | None = None, *, title: str | None = None, dpi: int = 110) -> Any:
        r"""The figure of ``meanfield concentration --sweep-beta … --plot``: :math:`W_2(\rho^\beta_t,\Pi_\sharp\rho_0)`
        per β; :math:`t_{\min}` against :math:`\log\beta` with its fit; :math:`W_{2,\min}` against
        :math:`\sqrt{\log(\beta+1)/\beta}` (:func:`meanfield.plotting.curves.plot_sweep`); saved when ``path`` is given.

        Parameters
        ----------
        path : str or Path, optional
            Write the figure there (a ``.png``, ``.pdf``, ``.svg`` …).
        title : str, optional
            Replaces the figure's title (default: what is concentrated and the solver).
        dpi : int
            Resolution of the saved file.

        Returns
        -------
        matplotlib.figure.Figure

        Examples
        --------
        >>> sweep = sweep_beta("data/concentration.toml", [4.0, 16.0], solver="particle")  # doctest: +SKIP
        >>> fig = sweep.plot("sweep.png")                                                  # doctest: +SKIP
        """
        from meanfield.plotting.curves import plot_sweep

        return plot_sweep(self, path, title=title, dpi=dpi)


def _signed(value: float, digits: int = 4) -> str:
    """``"+ 0.2"`` or ``"− 0.34"``: a term added to a fitted line as it reads (``+ -0.34`` had been printed)."""
    return f"{'−' if value < 0 else '+'} {abs(value):.{digits}g}"


def parse_betas(betas: Sequence[float] | str) -> NDArray[np.float64]:
    """The β of a sweep, sorted: a sequence or ``"b1,b2,…"``, at least two distinct, each finite and > 0 (else ``--sweep-beta`` is named)."""
    if isinstance(betas, str):
        try:
            values = [float(item) for item in betas.split(",") if item.strip()]
        except ValueError:
            raise ConfigError("--sweep-beta", f"expected comma-separated numbers, got {betas!r}") from None
    else:
        values = [float(b) for b in betas]
    arr = np.asarray(values, dtype=float)
    if arr.size < 2 or np.unique(arr).size < 2:
        raise ConfigError("--sweep-beta", f"need at least two distinct values of β, got {values}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ConfigError("--sweep-beta", f"every β must be finite and > 0 (the fits use log β), got {values}")
    names: dict[str, float] = {}
    for beta in arr:  # a β twice would count twice in the fits, and share its run file with itself
        if (label := f"{beta:g}") in names:
            same = "is given twice" if names[label] == beta else f"and β = {names[label]!r} print alike"
            raise ConfigError("--sweep-beta", f"β = {float(beta)!r} {same} (its run is beta_{label}.h5): give distinct values")
        names[label] = float(beta)
    return np.sort(arr)


def parse_spacing(text: str | float | Mapping[float, float]) -> float | dict[float, float]:
    """The ``--spacing`` of a β sweep: one constant ``C``, or ``"B1:C1,B2:C2,…"``, a constant per β.

    Raises
    ------
    ConfigError
        Naming ``--spacing``, for anything else or a constant that is not a positive number.
    """
    if isinstance(text, Mapping):
        pairs = {float(b): float(c) for b, c in text.items()}
    elif isinstance(text, str) and ":" in text:
        pairs = {}
        for item in (part.strip() for part in text.split(",")):
            beta, sep, value = item.partition(":")
            try:
                key, constant = float(beta), float(value)
            except ValueError:
                raise ConfigError("--spacing", f"expected C or B1:C1,B2:C2,…, got {text!r}") from None
            if not (key > 0 and math.isfinite(key)):  # (nan:3 had been taken)
                raise ConfigError("--spacing", f"every β must be a finite number > 0, got {beta.strip()!r} in {text!r}")
            if any(math.isclose(key, other, rel_tol=1e-12) for other in pairs):  # (the last had won in silence)
                raise ConfigError("--spacing", f"β = {key:g} is given twice in {text!r}")
            pairs[key] = constant
    else:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise ConfigError("--spacing", f"expected C or B1:C1,B2:C2,…, got {text!r}") from None
        if not (value > 0 and math.isfinite(value)):
            raise ConfigError("--spacing", f"must be a positive number, got {text}")
        return value
    bad = {b: c for b, c in pairs.items() if not (c > 0 and math.isfinite(c))}
    if bad:
        raise ConfigError("--spacing", f"every constant must be a positive number, got {bad}")
    return pairs


def check_spacing_betas(spacing: float | Mapping[float, float], betas: Sequence[float]) -> None:
    """A ``--spacing`` per β names exactly the β of the sweep: each has its constant (:func:`spacing_of`), and a β the
    sweep does not run is refused (``4:3,8:3,99:0.01`` had announced "C = 0.01 at β = 99" for a sweep of 4 and 8)."""
    if not isinstance(spacing, Mapping):
        return
    for beta in betas:
        spacing_of(spacing, beta)
    extra = [float(b) for b in spacing if not any(math.isclose(float(b), float(beta), rel_tol=1e-12) for beta in betas)]
    if extra:
        raise ConfigError("--spacing", f"gives a constant for β = {', '.join(f'{b:g}' for b in extra)}, which --sweep-beta "
                                       f"does not run ({', '.join(f'{float(b):g}' for b in betas)})")


def spacing_of(spacing: float | Mapping[float, float], beta: float) -> float:
    """The constant :math:`c` of one β: ``spacing`` itself, or its entry for β (``--spacing`` names a missing one)."""
    if not isinstance(spacing, Mapping):
        return float(spacing)
    for key, value in spacing.items():
        if math.isclose(float(key), float(beta), rel_tol=1e-12):
            return float(value)
    raise ConfigError("--spacing", f"no constant for β = {beta:g}; it gives {', '.join(f'{float(b):g}' for b in spacing)}")


#: the fewest cells or particles of a β-sweep run whose size follows β
SWEEP_MIN_SIZE = 200


def sweep_size(beta: float, *, spacing: float = SWEEP_SPACING, minimum: int = SWEEP_MIN_SIZE) -> int:
    r"""Degrees of freedom on :math:`S^2` with spacing :math:`h=\sqrt{4\pi/N}\le c\,\beta^{-1/2}`: :math:`N=\lceil 4\pi\beta/c^2\rceil`,
    at least ``minimum``."""
    if not (spacing > 0 and math.isfinite(spacing)):
        raise ConfigError("--spacing", f"must be a positive number, got {spacing}")
    return max(int(minimum), int(math.ceil(4.0 * math.pi * float(beta) / spacing**2)))


def _spacing_used(beta: float, spacing: float, size: int) -> float:
    r"""The c of the coarser run: the one asked, or where :func:`sweep_size` raised N to its minimum, that of
    :math:`N = 4\pi\beta/c^2` with the N it ran (a smaller spacing than asked)."""
    return spacing if size == math.ceil(4.0 * math.pi * beta / spacing**2) else math.sqrt(4.0 * math.pi * beta / size)


def _with_size(cfg: dict[str, Any], size: int) -> dict[str, Any]:
    case = copy.deepcopy(cfg)
    if case["solver"]["kind"] == "grid":
        case["grid"]["cells"] = int(size)
    else:
        case["init"]["n"] = int(size)
    return case


def _check_resumable_sweep(plan: Sequence[tuple[float, int, Sequence[tuple[int, dict[str, Any], Path | None]]]],
                           out_dir: Path) -> None:
    """``--resume``: every run of the sweep already in ``out_dir`` against the config it would get, before any run
    starts (each run had been checked only when the sweep reached it: the runs of the βs before one that differed had
    been extended, and the command then stopped with exit 2); a note where ``out_dir`` holds none of them.

    The refusals of a run's state that :func:`meanfield.solvers.run.simulate_config` makes when it resumes one are
    made here too, for every stored run that would be resumed (one that is not only read, finished): a failed run
    (but for a full disk, whose frames go on), and a last committed frame that is not finite or not the bytes
    committed. The message says what to do within the sweep (a single run's remedy, another config in a new file, does
    not fit a sweep, whose βs share one config): delete or move that β's file so that it runs afresh, or, for a failed
    run, sweep with another config into a new folder.

    Raises
    ------
    ConfigError
        Naming the first key that differs (:func:`meanfield.solvers.run.simulate_config`'s check), or ``--resume`` for a
        file that is not a run, a failed run, or a last frame the run cannot continue from.
    """
    from meanfield.io.runfile import RunReader
    from meanfield.solvers.run import _check_resumable

    stored = [(beta, case, out) for beta, _, runs in plan for _, case, out in runs if out is not None and out.exists()]
    for _, case, out in stored:
        _check_resumable(RunReader(out, key="--resume").config, case, out)
    for beta, case, out in stored:  # (a failed run had been refused when the sweep reached it, after earlier βs ran)
        reader = RunReader(out, key="--resume")
        finished = reader.status == "completed" and reader.config["solver"]["t_final"] == case["solver"]["t_final"]
        if reader.frames == 0 or finished:  # started afresh, or only read
            continue
        afresh = f"delete or move {out} so that β = {beta:g} runs afresh in this sweep"
        if reader.status == "failed" and not reader.info.get("storage_failed"):  # a full disk: its frames are good, go on
            raise ConfigError("--resume", f"the run in {out} failed ({reader.stop_reason}); the same config fails again at "
                                          "the same step, and --resume takes no other (nothing of the sweep has been run or "
                                          "changed). Sweep with another config (e.g. a smaller solver.dt) into a new --out, "
                                          f"or {afresh}")
        state, intact = reader.checked_state(-1)  # (as meanfield.io.runfile.last_frame checks it when the run resumes)
        what = ("does not match the checksum written with it (its bytes changed on disk after it was committed)" if not intact
                else "is not finite" if not np.all(np.isfinite(state)) else "")
        if what:
            raise ConfigError("--resume", f"{out}: the last committed frame {what}, and the run cannot continue from it "
                                          f"(nothing of the sweep has been run or changed): {afresh}")
    if not stored:  # (a mistyped folder had started the sweep afresh without a word)
        where = "does not exist" if not out_dir.exists() else "holds none of this sweep's runs"
        warnings.warn(f"--resume: {out_dir} {where}: nothing to resume, every run starts afresh", ConfigNote, stacklevel=3)


def _run_names(beta: float, refine: bool) -> list[str]:
    """The files of one β in ``--out``: ``beta_<β>.h5``, after ``beta_<β>_coarse.h5`` when refined."""
    return ([f"beta_{beta:g}_coarse.h5"] if refine else []) + [f"beta_{beta:g}.h5"]


def sweep_beta(
    cfg: dict[str, Any] | str | Path,
    betas: Sequence[float] | str,
    *,
    solver: str | None = None,
    out_dir: str | Path | None = None,
    threshold: float | None = None,
    quiet: bool = True,
    policy: str | None = None,
    spacing: float | Mapping[float, float] | None = None,
    size: int | None = None,
    refine: bool = False,
    refinement: int = REFINEMENT,
    resume: bool = False,
) -> BetaSweep:
    r"""Run the β family of a config and fit the concentration observables.

    .. math::

        t_{\min}(\beta) \approx a\log\beta + b,\qquad
        \log W_{2,\min}(\beta) \approx a'\log\sqrt{\tfrac{\log(\beta+1)}{\beta}} + b'

    (Theorem 1 of Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931: the bound
    :math:`r(\beta)e^{C_1t}+e^{-ct}` is smallest at
    :math:`t\approx\log(1/r)/(C_1+c)`, linear in :math:`\log\beta`, where it is
    :math:`\sim r^{c/(C_1+c)}`, so the theory predicts :math:`a>0` and :math:`0<a'\le1`).
    Every run tracks ``w2_target`` (``[track] concentration = true``); each β is
    checked for under-resolution (:func:`meanfield.analysis.projection.resolution_warning`), and a grid
    run also for cluster cores below its cells before ``t_min`` (:func:`core_check`).

    **Resolution.**  By default every β runs with the config's ``init.n`` or
    ``grid.cells``.  With ``spacing = c`` the size follows β,
    :math:`N = \lceil4\pi\beta/c^2\rceil` (:func:`sweep_size`: cells, or quasi-uniform
    particles, a fixed fraction of the kernel width :math:`\beta^{-1/2}` apart); ``size``
    fixes it instead.  With ``refine`` each β runs a second time with
    ``refinement`` times the size (:data:`REFINEMENT` = 4: spacing halved), and the summary reports the
    finer run's numbers with their change from the coarser one — the convergence
    columns ``dw2_min`` (relative) and ``dt_min``.

    Parameters
    ----------
    cfg : dict or path
        Resolved config (or a TOML file); ``model.beta`` is replaced by each β.
    betas : sequence of float or "b1,b2,..."
        At least two distinct positive values.
    solver : {"particle", "grid"}, optional
        Override ``solver.kind``; ``"grid"`` (S² only) switches the method to ``ssprk3``
        unless it is already a grid method, and a quasi-uniform particle start
        (``init.kind = "fibonacci"``) to the uniform density.
    out_dir : path, optional
        Write each run to ``out_dir/beta_<β>.h5`` (the coarser run of a refined pair to
        ``beta_<β>_coarse.h5``).
    threshold : float, optional
        Metastability threshold of :func:`concentration_summary` (default 2·W2_min).
    quiet : bool
        No progress bars.
    policy : {"check", "warn", "skip"}, optional
        Assumption-1 policy (default ``model.assumptions``).
    spacing : float or mapping of β to float, optional
        The constant :math:`c` of :math:`h\le c\beta^{-1/2}` (S² only; e.g. :data:`SWEEP_SPACING`),
        one for every β or one per β (:func:`parse_spacing`; a β without one is a
        :class:`~meanfield.errors.ConfigError`).
    size : int, optional
        Cells or particles of every β (the coarser run when refining); overrides ``spacing``.
    refine : bool
        Run each β at two resolutions and report the convergence columns.
    refinement : int
        Size of the finer run over the coarser (``--refinement``, an integer ≥ 2): 4 halves
        the spacing; 2 divides it by √2, which is enough for a second-order scheme and
        halves the cost of the finer run.
    resume : bool
        Continue a sweep whose runs are in ``out_dir`` (``--resume``): a finished run is read, an
        interrupted one resumed (:func:`~meanfield.solvers.run.simulate_config`), a missing one run.
        Every stored run is checked against the config it would get before any run starts (a
        :class:`~meanfield.errors.ConfigError` naming the key that differs); an ``out_dir`` that holds none of the
        sweep's runs is said (a :class:`~meanfield.errors.ConfigNote`: nothing to resume, every run starts afresh).
        Without it, runs already in ``out_dir`` are refused before any work
        (:class:`~meanfield.errors.ConfigError` naming ``--out``), not replaced.

    Returns
    -------
    BetaSweep
    """
    from meanfield.solvers.run import simulate_config

    base = load_config(cfg) if isinstance(cfg, (str, Path)) else copy.deepcopy(cfg)
    values = parse_betas(betas)
    if not base["solver"]["t_final"] > 0:  # one frame: "t_min = 0, W2_min = W2(0)" at every β had been fitted, unflagged
        raise ConfigError("solver.t_final", f"a β family needs frames past t = 0 (t_min, W2_min and the window are read "
                                            f"off the curve W2(t)), got t_final = {base['solver']['t_final']!r}")
    if solver is not None:
        if solver not in ("particle", "grid"):
            raise ConfigError("--solver", f"expected 'particle' or 'grid', got {solver!r}")
        if solver == "grid":
            import importlib.util

            if importlib.util.find_spec("meanfield.solvers.grid") is None:
                raise ConfigError("--solver", "the grid solver (solvers/grid.py) is not available in this installation")
            if base["model"]["d"] != 3:
                raise ConfigError("--solver", f"the grid solver works on S² (d = 3), got model.d = {base['model']['d']}")
            if base["solver"]["method"] not in ("ssprk2", "ssprk3"):
                base["solver"]["method"] = "ssprk3"
            if base["init"]["kind"] == "fibonacci":
                base["init"]["kind"] = "uniform"  # the density the quasi-uniform points sample
        elif base["solver"]["method"] in ("ssprk2", "ssprk3"):
            base["solver"]["method"] = "rk4"
        base["solver"]["kind"] = solver
        used = {*SOLVER_KEYS_USED[solver], "kind", "t_final", "save_every", "steady_tol", "method"}
        for key in set(base["solver"]) - used:  # the other solver's settings (the config's particle dt …) take no part
            base["solver"][key] = copy.deepcopy(SCHEMA["solver"][key].default)
    d = base["model"]["d"]
    if spacing is not None and size is None and d != 3:
        raise ConfigError("--spacing", f"the size follows β on S² (d = 3) only, got model.d = {d}")
    constants: dict[float, float] = {}
    if spacing is not None:
        spacing = parse_spacing(spacing)
        check_spacing_betas(spacing, values)  # a missing or an extra β fails before any run
        constants = {float(beta): spacing_of(spacing, beta) for beta in values}
    if not (isinstance(refinement, (int, np.integer)) and not isinstance(refinement, bool) and refinement >= 2):
        raise ConfigError("--refinement", f"must be an integer ≥ 2 (the finer run's size over the coarser's), got {refinement!r}")
    if size is not None and not (isinstance(size, (int, np.integer)) and size >= 12):
        raise ConfigError("--cells", f"must be an integer ≥ 12, got {size!r}")
    if policy is not None:
        base["model"]["assumptions"] = policy
    report = assumption_report(base)
    if base["track"]["w2_method"] != "exact":  # as the analysis of one run says (the fits had taken it for W2)
        warnings.warn(f"track.w2_method = {base['track']['w2_method']!r}: the curves, t_min, W2_min and the fits are that "
                      "estimate's, not the exact W2 (track.w2_method = 'exact' for W2)", RuntimeWarning, stacklevel=2)
    if report.dim_E == len(report.eigenvalues):  # as the analysis of one run says
        warnings.warn("the analysis is trivial for this head: S = V Bᵀ has a single eigenvalue, so Π is the identity and "
                      "Π♯ρ₀ = ρ₀; W2 only measures how far the tokens moved, at every β", RuntimeWarning, stacklevel=2)
    if base["solver"]["kind"] == "zero-temperature":
        raise ConfigError("solver.kind", "the zero-temperature solver is the limit β → ∞, the same run for every β: "
                                         "a β family needs the particle or grid solver")
    if resume and out_dir is None:
        raise ConfigError("--resume", "continues the runs kept in --out DIR; give --out")
    if out_dir is not None and not resume:
        kept = [name for beta in values for name in _run_names(beta, refine) if (Path(out_dir) / name).exists()]
        if kept:
            raise ConfigError("--out", f"{out_dir} holds {', '.join(kept)} of an earlier sweep: --resume continues it "
                                       "(finished runs are read, interrupted ones resumed), or choose another folder")
    on_grid = base["solver"]["kind"] == "grid" and d == 3  # cells: the mesh's resolution criterion
    check_cores = on_grid and report.dim_E == 1
    base["track"]["concentration"] = True
    with warnings.catch_warnings():  # the config as the sweep runs it, checked again after the switches above (solver,
        warnings.simplefilter("ignore", ConfigNote)  # tracker): model.norm on the grid had run the Post-LN PDE under
        load_config(base)  # a norm=peri label, and Pre-LN particles had crashed in the tracker (its notes came once)
    # every run of the sweep, (β, the coarser size, [(size, config, file), …]), planned before any of them starts
    plan: list[tuple[float, int, list[tuple[int, dict[str, Any], Path | None]]]] = []
    for beta in values:
        first = int(size) if size is not None else (sweep_size(beta, spacing=constants[float(beta)]) if spacing is not None else resolution_size(base))
        sizes = [first, int(refinement) * first] if refine else [first]
        runs = []
        for k, n in enumerate(sizes):
            case = _with_size(base, n)
            case["model"]["beta"] = float(beta)
            runs.append((n, case, Path(out_dir) / _run_names(beta, refine)[k] if out_dir is not None else None))
        plan.append((float(beta), first, runs))
    if resume and out_dir is not None:
        _check_resumable_sweep(plan, Path(out_dir))
    curves: list[dict[str, NDArray[np.float64]]] = []
    coarse_curves: list[dict[str, NDArray[np.float64]]] = []
    summaries: list[dict[str, Any]] = []
    files: list[str] = []
    read: list[str] = []
    for beta, first, runs in plan:
        results = []
        for n, case, out in runs:
            if out is not None:
                files.append(str(out))
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Assumption 1", category=RuntimeWarning)  # warned once above
                # the core check reads the frames: from the file, or (without one) from memory
                result = simulate_config(case, out, quiet=quiet, keep_states=check_cores and out is None,
                                         resume=resume and out is not None and out.exists())
            if out is not None and result.info.get("already_complete"):
                read.append(str(out))
            curve = {"t": result.t, **{key: result.diagnostics[key] for key in ("w2_target", "v_eigenspace_distance", "e_eigenspace_distance")}}
            summary_k = concentration_summary(curve["t"], curve["w2_target"], threshold=threshold)
            summary_k["cells"] = int(result.info.get("cells", n))  # a graded mesh has more cells than grid.cells
            if check_cores:
                summary_k.update(core_check(result, summary_k))
            results.append((n, curve, summary_k, float(result.info["wall_time"])))
            del result  # the frames kept in memory for the core check
        n, curve, summary, wall = results[-1]
        curves.append(curve)
        rate = float(concentration_rate(beta))
        # grid.cells, the coarse spacing of a graded mesh too (its total count had passed a mesh coarser than the kernel)
        own = run_resolution_warning(n, float(beta), d, cells=on_grid) or summary.get("cores") or ""
        summary.update(
            beta=float(beta),
            n=n,
            spacing=_spacing_used(float(beta), constants[float(beta)], first) if spacing is not None and size is None else math.nan,
            rate=rate,
            ratio=summary["w2_min"] / rate,
            under_resolved=own,
            under_resolved_fine=own,  # the drawn curve's own (the plot had put the coarser run's warning on it)
            wall_time=sum(r[3] for r in results),
        )
        if refine:
            n0, coarse_curve, coarse, _ = results[0]
            coarse_curves.append(coarse_curve)
            summary.update(
                n_coarse=n0,
                cells_coarse=coarse["cells"],
                w2_min_coarse=coarse["w2_min"],
                t_min_coarse=coarse["t_min"],
                w2_first_min_coarse=coarse["w2_first_min"],
                t_first_min_coarse=coarse["t_first_min"],
                dw2_min=(summary["w2_min"] - coarse["w2_min"]) / summary["w2_min"],
                dt_min=summary["t_min"] - coarse["t_min"],
            )
            if check_cores:
                summary["t_cores_unresolved_coarse"] = coarse["t_cores_unresolved"]
            coarse_warning = run_resolution_warning(n0, float(beta), d, cells=on_grid)
            if not coarse_warning and check_cores and coarse.get("cores"):  # (a sweep had said "resolved = yes" beside it)
                coarse_warning = (f"its cluster cores fall below its cells at t = {coarse['t_cores_unresolved']:.3g}, before its "
                                  f"t_min = {coarse['t_min']:.3g}: ΔW2_min and Δt_min compare with the mesh's minimum")
            summary["under_resolved_coarse"] = coarse_warning or ""
            if not summary["under_resolved"] and coarse_warning:
                summary["under_resolved"] = f"the coarser run of the convergence column (n = {n0}): {coarse_warning}"
        summaries.append(summary)
    t_min = np.array([s["t_min"] for s in summaries])
    w_min = np.array([s["w2_min"] for s in summaries])
    fit_tmin = linear_fit(np.log(values), t_min)
    fit_w2min = linear_fit(np.log(concentration_rate(values)), np.log(np.maximum(w_min, 1e-300)))
    return BetaSweep(values, curves, summaries, fit_tmin, fit_w2min, base["solver"]["kind"], files, refinement=int(refinement),
                     coarse_curves=coarse_curves, read=read)


# ----------------------------------------------------------------------------- cost


def tracking_share(cfg: dict[str, Any] | None = None) -> dict[str, float]:
    """Run ``cfg`` (default: the default concentration experiment) and time the concentration tracking.

    Returns
    -------
    dict
        ``simulation_seconds`` (wall time of the run loop, tracking included),
        ``tracking_seconds`` (time in the concentration tracker), ``share``
        (their ratio), ``frames``, ``n``.
    """
    from meanfield.io.source_frame import start_time
    from meanfield.solvers.loop import run_loop, save_times
    from meanfield.solvers.run import setup_run

    resolved = load_config(DEFAULT_CONCENTRATION_CONFIG) if cfg is None else copy.deepcopy(cfg)
    resolved["track"]["concentration"] = True
    setup = setup_run(resolved)  # the same build as simulate_config, without a writer
    tracker = [t for t in setup.trackers if isinstance(t, ConcentrationTracker)]
    solver = resolved["solver"]
    times = save_times(start_time(resolved), solver["t_final"], solver["save_every"])
    result = run_loop(setup.stepper, setup.state, times, trackers=setup.trackers, keep_states=False)
    seconds = tracker[0].seconds
    wall = float(result.info["wall_time"])
    return {
        "simulation_seconds": wall,
        "tracking_seconds": seconds,
        "share": seconds / wall if wall > 0 else math.nan,
        "frames": float(tracker[0].calls),
        "n": float(resolution_size(resolved)),
    }


def bench_concentration(*, quick: bool = False, repeat: int = 3) -> dict[str, Any]:
    r"""Timings of the concentration diagnostics, for ``meanfield bench``.

    Rows (best of ``repeat``):

    * ``w2_target`` — exact :math:`W_2(\rho,\Pi_\sharp\rho_0)` for :math:`n=10^5`
      uniform tokens on :math:`S^2` against the two atoms :math:`\pm e`;
    * ``eigenspace_distance`` — :math:`D(\rho, E_V)` for the same cloud;
    * ``w2_exact_clouds`` — exact :math:`W_2` between two clouds of :math:`n = 2000`
      (``ot.emd2``, for comparison: the structure makes the first row cheap);
    * ``tracking_share`` — share of the default concentration experiment's
      wall time spent in the tracker (target < 10 %).

    ``quick`` divides the sizes by 10 and runs the default experiment with ``n = 200``, ``t_final = 2``.

    Returns
    -------
    dict
        ``rows``: list of ``{"name", "n", "seconds", "value"}``; ``tracking``:
        the dict of :func:`tracking_share`.
    """
    from meanfield.geometry.sphere import sample_uniform
    from meanfield.analysis.transport import w2
    from meanfield.solvers.timing import best_of

    scale = 10 if quick else 1
    n_big, n_pair = 100_000 // scale, 2000 // scale
    cfg = load_config(DEFAULT_CONCENTRATION_CONFIG)
    head = single_head(cfg)
    x = sample_uniform(n_big, 3, seed=1)
    tracker = tracker_from_head(head.Q, head.K, head.V, x, policy="skip")
    rows = []
    seconds, value = best_of(lambda: w2(x, tracker.target.atoms, None, tracker.target.weights), repeat)
    rows.append({"name": "w2_target", "n": n_big, "seconds": seconds, "value": float(value)})
    seconds, value = best_of(lambda: eigenspace_distance(x, tracker.P_V), repeat)
    rows.append({"name": "eigenspace_distance", "n": n_big, "seconds": seconds, "value": float(value)})
    y1, y2 = sample_uniform(n_pair, 3, seed=2), sample_uniform(n_pair, 3, seed=3)
    seconds, value = best_of(lambda: w2(y1, y2), 1 if not quick else repeat)
    rows.append({"name": "w2_exact_clouds", "n": n_pair, "seconds": seconds, "value": float(value)})
    if quick:
        cfg["init"]["n"] = 200
        cfg["solver"]["t_final"] = 2.0
    share = tracking_share(cfg)
    rows.append({"name": "tracking_share", "n": int(share["n"]), "seconds": share["tracking_seconds"], "value": share["share"]})
    return {"rows": rows, "tracking": share}
