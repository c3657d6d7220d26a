r"""The authors' G² plateau against the number of heads on S¹ and S⁴, OU and oscillating (Massucco et al., arXiv 2605.18870).

.. math::

    \overline{G^2}(H)=\operatorname{mean}_{t\ge T/2}G^2(t)\approx a\,H^{b},\qquad
    G^2=\frac1n\sum_i\frac{\|P^\perp_{x_i}\bar v_i\|^2}{\tfrac1H\sum_h n/N_{h,i}},\qquad
    N_{h,i}=\sum_j e^{x_i^\top D_h x_j}

The S¹ (d = 2) and S^{d−1} (d = 5, the authors' default for d ≥ 4) experiments of Massucco, Del
Grande, Carioni, Brune and Schönlieb as their public code runs them (``experiments/s1_*.py`` and
``experiments/hd_*.py``), read from ``data/massucco_ou_s1.toml``, ``data/massucco_oscillating_s1.toml``,
``data/massucco_ou_d5.toml`` and ``data/massucco_oscillating_d5.toml``: clustered
tokens (five clusters at the angles :math:`2\pi k/5` on S¹, 100 tokens; the ten vertices
:math:`\pm e_i` on S⁴, 200 tokens), heads :math:`D_h(0)=Z+Z^\top` with :math:`V_h=D_h`, the mean
over heads of the per-head softmax fields, descent, :math:`\beta=1`, explicit Euler
:math:`dt=5\cdot10^{-3}`.  OU weights :math:`dD=(I-D)\,dt+\sqrt2\,dW_{\mathrm{sym}}` (the paper,
Theorem 4.16: plateau :math:`O(H^{-1})`, :math:`b\approx-1`); oscillating weights
:math:`dD=(F(t+\varphi_h)-D)\,dt` toward the authors' target for that d, with the phases
:math:`\varphi_h=2\pi h/H` their code gives the heads in every dimension (``phases = "spread"``, the
configs): the head-mean of :math:`F` is then constant for :math:`H\ge3` and, measured, the plateau
decays like OU.  With every head on the same phase (``phases = "same"``) the oscillation does not
average out and the plateau does not decay (:math:`b\approx0`, what the paper says of the
oscillating weights).  Both variants are shown on S¹ and S⁴.  Heads: ``model.seed`` :math:`=42+H`; OU noise: ``weights.seed``
:math:`=1000+H` (S¹), :math:`3000+H` (S⁴), plus :math:`1000p` for Monte-Carlo path :math:`p`.
Plateaus are averaged over paths (mean ± std) and fitted by log-log least squares
(:func:`meanfield.solvers.experiments.time_dependent.fit_power_law`).

Claim (from the CSV): the OU slopes lie in :math:`[-1.4,-0.6]` on S¹ and S⁴; the same-phase
oscillating slopes in :math:`[-0.25,0.25]`; the spread-phase slopes are below :math:`-0.5`.

Runtime: ``--quick`` (H ∈ {1, 4, 16}, T = 3, 64 tokens, one OU path, frames every 0.1) 80 s
measured on two cores at load average 10 (15 short runs; 18 since the S¹ spread phases were added); the full form (the authors' H ∈ {1, 5, 20} on S¹ and {1, 10, 100} on S⁴,
T = 20, the configs' token counts, 4 OU paths) several hours.

Command: ``python figures/time_dependent_authors_dimensions.py [--quick] [--out DIR]``
(or ``meanfield reproduce time_dependent_authors_dimensions``).
"""
from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.figures import FIGURES_DIR, script_main, write_rows

ID = "time_dependent_authors_dimensions"
PAPER = "2605.18870"
THEOREM = "long-time behaviour (OU plateau ~ 1/H, oscillating ~ H^0) on S¹ and S⁴"
DESCRIPTION = "The authors' G² plateau against H on S¹ (d = 2) and S⁴ (d = 5) in their own setups, OU and oscillating (same and spread phases), mean ± std over Monte-Carlo paths, with the log-log fit of a·H^b"

# ---- constants -----------------------------------------------------------
DATA = FIGURES_DIR.parent / "data"
#: experiment -> (config, noise seed base or None, extra overrides)
EXPERIMENTS: dict[str, tuple[Path, int | None, tuple[str, ...]]] = {
    "S1 ou": (DATA / "massucco_ou_s1.toml", 1000, ()),
    "S1 oscillating (same phase)": (DATA / "massucco_oscillating_s1.toml", None, ("weights.phases=same",)),
    "S1 oscillating (spread phases)": (DATA / "massucco_oscillating_s1.toml", None, ()),
    "S4 ou": (DATA / "massucco_ou_d5.toml", 3000, ()),
    "S4 oscillating (same phase)": (DATA / "massucco_oscillating_d5.toml", None, ("weights.phases=same",)),
    "S4 oscillating (spread phases)": (DATA / "massucco_oscillating_d5.toml", None, ()),
}
HEADS = {"S1": (1, 5, 20), "S4": (1, 10, 100)}
T_FINAL = 20.0
OU_PATHS = 4
SAVE_EVERY = 0.025
TOKENS: int | None = None          # the configs' own (100 on S¹, 200 on S⁴)
QUICK_HEADS = {"S1": (1, 4, 16), "S4": (1, 4, 16)}
QUICK_T_FINAL = 3.0
QUICK_OU_PATHS = 1
QUICK_SAVE_EVERY = 0.1
QUICK_TOKENS: int | None = 64
PATH_STRIDE = 1000
EXPECTED = {"ou": (-1.4, -0.6), "same": (-0.25, 0.25), "spread": (-np.inf, -0.5)}


def _kind(experiment: str) -> str:
    return "ou" if experiment.endswith(" ou") else ("spread" if "spread" in experiment else "same")


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """Rows ``experiment, sphere, d, H, path, weights_seed, plateau_G2, t_final, n_tokens`` (one run each)."""
    from meanfield import simulate
    from meanfield.config import load_config
    from meanfield.solvers.experiments.time_dependent import authors_plateau

    heads, t_final = (QUICK_HEADS, QUICK_T_FINAL) if quick else (HEADS, T_FINAL)
    paths, save_every, tokens = (QUICK_OU_PATHS, QUICK_SAVE_EVERY, QUICK_TOKENS) if quick else (OU_PATHS, SAVE_EVERY, TOKENS)
    rows: list[dict[str, Any]] = []
    for experiment, (config, noise_base, extra) in EXPERIMENTS.items():
        sphere = experiment.split()[0]
        for H in heads[sphere]:
            for p in range(paths if noise_base is not None else 1):
                sets = [f"model.num_heads={H}", f"model.seed={42 + H}", f"solver.t_final={t_final}",
                        f"solver.save_every={save_every}", "track.energy=false", *extra]
                seed = None if noise_base is None else noise_base + H + PATH_STRIDE * p
                if seed is not None:
                    sets.append(f"weights.seed={seed}")
                if tokens is not None:
                    sets.append(f"init.n={tokens}")
                cfg = load_config(config, sets)
                run = simulate(cfg)
                rows.append({"experiment": experiment, "sphere": sphere, "d": int(cfg["model"]["d"]), "H": H, "path": p,
                             "weights_seed": -1 if seed is None else seed,
                             "plateau_G2": authors_plateau(np.asarray(run.t), run.diagnostics["authors_G2"], t_final),
                             "t_final": t_final, "n_tokens": int(cfg["init"]["n"])})
    return rows


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: (v if k in ("experiment", "sphere") else float(v)) for k, v in row.items()} for row in csv.DictReader(f)]


def plateaus(rows: list[dict[str, Any]], experiment: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(H, mean, std)`` over the Monte-Carlo paths of one experiment."""
    sel = [r for r in rows if r["experiment"] == experiment]
    H = np.array(sorted({r["H"] for r in sel}))
    vals = [np.array([r["plateau_G2"] for r in sel if r["H"] == h]) for h in H]
    return H, np.array([v.mean() for v in vals]), np.array([v.std() for v in vals])


def slope(rows: list[dict[str, Any]], experiment: str) -> tuple[float, float]:
    """``(a, b)`` of the log-log fit of the path-mean plateau."""
    from meanfield.solvers.experiments.time_dependent import fit_power_law

    H, mean, _ = plateaus(rows, experiment)
    return fit_power_law(H, mean, method="loglog")


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Checks of the CSV: each fitted slope b in its range (OU ≈ −1, same-phase oscillating ≈ 0, spread phases < −0.5)."""
    rows = read_csv(csv_path)
    checks = {}
    for experiment in EXPERIMENTS:
        low, high = EXPECTED[_kind(experiment)]
        b = slope(rows, experiment)[1]
        checks[f"slope[{experiment}]"] = {"ok": bool(low <= b <= high), "value": b,
                                          "expected": f"in [{low:g}, {high:g}]" if np.isfinite(low) else f"< {high:g}"}
    return checks


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    fig = Figure(figsize=(11, 4.6), constrained_layout=True)
    styles = {"ou": ("C0", "o"), "same": ("C3", "s"), "spread": ("C2", "^")}
    for k, (sphere, d) in enumerate((("S1", 2), ("S4", 5))):
        ax = fig.add_subplot(1, 2, k + 1)
        for experiment in (e for e in EXPERIMENTS if e.startswith(sphere)):
            color, marker = styles[_kind(experiment)]
            sel = [r for r in rows if r["experiment"] == experiment]
            H, mean, std = plateaus(rows, experiment)
            a, b = slope(rows, experiment)
            paths = len({r["path"] for r in sel})
            ax.errorbar(H, mean, yerr=std, fmt=marker, color=color, ms=7, mfc="none", mew=1.5, capsize=3,
                        label=f"{experiment.split(' ', 1)[1]} ({paths} path{'s' if paths > 1 else ''}): b = {b:.2f}")
            Hs = np.geomspace(H.min(), H.max(), 100)
            ax.plot(Hs, a * Hs**b, "-", color=color, lw=1.1)
        Hs = np.array(sorted({r["H"] for r in rows if r["sphere"] == sphere}))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(FixedLocator(list(Hs)))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("number of heads H")
        ax.set_ylabel("plateau of G² (mean over t ≥ T/2)")
        first = next(r for r in rows if r["sphere"] == sphere)
        ax.set_title(f"$S^{d - 1}$ (d = {d}): n = {int(first['n_tokens'])}, T = {first['t_final']:g}; "
                     "lines: log-log fits a·H^b", fontsize=9)
        ax.legend(fontsize=7.5)
        ax.grid(alpha=0.3, which="both")
    paths = len({r["path"] for r in rows})
    fig.suptitle("Massucco et al., arXiv 2605.18870, in the authors' S¹ and S⁴ setups: G² plateau against H "
                 f"(paper: OU b ≈ −1, oscillating b ≈ 0)\n{paths} OU path{'s' if paths > 1 else ''} per H"
                 f"{'' if paths > 1 else ' (no spread shown)'}; the authors ran T = 20 and H up to 20 (S¹) and 100 (S⁴)",
                 fontsize=10)
    fig.savefig(path, dpi=120)
    return path


def make(out_dir: str | Path, *, quick: bool = False) -> dict[str, Path]:
    """Compute, write ``ID.csv`` and ``ID.png`` under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = compute(quick=quick)
    csv_path = out / f"{ID}.csv"
    write_rows(csv_path, rows)
    return {"png": plot(read_csv(csv_path), out / f"{ID}.png"), "csv": csv_path}


def main(argv: Sequence[str] | None = None) -> int:
    return script_main(make, claim, DESCRIPTION, argv)


if __name__ == "__main__":
    sys.exit(main())
