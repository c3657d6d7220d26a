r"""Clustering time of ReLU against softmax attention, against :math:`d` and :math:`n` (Thm 25 of arXiv 2605.04279).

.. math::

    T_\varepsilon=\inf\{t:\min_{i\ne j}\langle x_i,x_j\rangle\ge1-\varepsilon\},\qquad
    T_{\mathrm{softmax}}=O(n),\qquad T_{\mathrm{ReLU}}=O(n\log d),

for one identity head (:math:`B=V=I`), measured with
:func:`meanfield.solvers.experiments.multihead.clustering_time_experiment` (RK4).  Thm 25 is a
statement about the linearised regime near :math:`\gamma=0`: softmax has a
constant positive drive there, ReLU has none (:math:`\mathrm{ReLU}(0)=0`) and
must grow the overlap from its initial size :math:`\gamma_0\sim d^{-1/2}`.

**Equiangular start** (``init="equiangular"``, :math:`\langle x_i,x_j\rangle=\gamma_0=d^{-1/2}`,
the typical overlap of random tokens: the theorem's regime).  Equiangularity
is preserved, :math:`\dot\gamma=r(\gamma)`, and :math:`T=\int_{\gamma_0}^{1-\varepsilon}d\gamma/r(\gamma)`:

* ReLU: :math:`r(\gamma)=\frac2n\gamma(1-\gamma)(1+(n-1)\gamma)`, so
  :math:`T=\frac n2\ln\frac{1-\varepsilon}{\gamma_0}+\frac12\ln\frac{1-\gamma_0}{\varepsilon}
  -\frac{n-1}2\ln\frac{1+(n-1)(1-\varepsilon)}{1+(n-1)\gamma_0}`
  (:func:`relu_equiangular_time`) and :math:`dT/d\ln d=\frac n4\,/\,\bigl((1-\gamma_0)(1+(n-1)\gamma_0)\bigr)\uparrow\frac n4`:
  :math:`T\approx\frac n4\ln d-\frac{n-1}2\ln n+\frac12\ln\frac1\varepsilon` once :math:`d\gg n^2`
  — the :math:`O(n\log d)` of Thm 25;
* softmax: :math:`r=` :func:`meanfield.analysis.theory.equiangular_rhs` (Thm 22 ODE, one head
  :math:`\lambda=1`), integrated by quadrature (:func:`softmax_equiangular_time`):
  :math:`r(0)>0`, so :math:`T` hardly depends on :math:`d`, and because the
  drive grows like :math:`(n-1)\gamma` the time grows only like :math:`\tfrac12\ln n`:
  :math:`O(n)` is a (loose) upper bound.

**Uniform start** (``init="uniform"``, i.i.d. tokens, several seeds): what one
meets outside the linearised regime.  Softmax always clusters, with times that
are flat in :math:`n` and :math:`d`; ReLU times are several times larger and
grow with :math:`n` and (noisily) with :math:`\log d`, but a share of the ReLU
runs never clusters: a token whose inner products with all others are negative
feels no force, and the run stalls in several clusters (reported as
``clustered_fraction``; seeds are tried until 8 runs per cell have clustered,
and times are medians over the clustered runs, with their interquartile range).

Every clustered run is rerun with the RK4 step and the interval at which the gap is
checked (and the crossing interpolated) both halved (``time_refined``).

The CSV has one row per run, with the fitted slopes :math:`dT/d\ln d` (per
init, kind and :math:`n`, through the medians) and exponents of
:math:`T\propto n^a` (per init, kind and :math:`d`), and the equiangular
prediction (``time_ode``, ``ode_slope_log_d``: :math:`dT/d\ln d` of the ODE at that
:math:`d`) and the linearised one (``linearised_slope_log_d``: :math:`n/4` for ReLU,
0 for softmax, whose constant drive at :math:`\gamma=0` makes :math:`T` independent of
:math:`d` at leading order).

Claim (what the data support): from the equiangular start the particles
follow the equiangular ODE; the ReLU time grows linearly in :math:`\log d`
with slope :math:`0<a\le n/4` (the linearised asymptote); ReLU is slower than
softmax in every cell; the softmax time is nearly independent of :math:`d`
(its :math:`\log d` slope below a fifth of ReLU's) and grows with :math:`n`
far more slowly than the :math:`O(n)` bound (exponent :math:`<1`); the ReLU
time grows with :math:`n`; every clustered time moves by less than
``REFINED_RTOL`` when the step and the check interval are halved.  From uniform
tokens every softmax run clusters and every clustered ReLU median exceeds the
softmax one.  Note (not a check): the range of the ReLU/softmax ratio of the
medians over the uniform cells.

Runtime: about 10 s with ``--quick``, 5–7 min in full (8 clustered draws per uniform cell), on one core.

Command: ``python figures/multihead_clustering_time.py [--quick] [--out DIR]``
(or ``meanfield reproduce multihead_clustering_time``).
"""
from __future__ import annotations

import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.figures import largest, script_main, smallest, write_rows

ID = "multihead_clustering_time"
PAPER = "2605.04279"
THEOREM = "Thm 25"
DESCRIPTION = "ReLU vs softmax clustering time against d and n, from equiangular (γ0 = d^-1/2) and uniform tokens, with fitted log-d slopes and n-exponents"

# ---- constants -----------------------------------------------------------
BETA = 1.0
EPS = 1e-3
DT = 0.2
KINDS = ("softmax", "relu")
EQUI_NS = (4, 8, 16)
EQUI_DS = (16, 64, 256, 1024)
UNIFORM_NS = (8, 16, 32)
UNIFORM_DS = (16, 64, 256, 1024)
UNIFORM_RUNS = 8               # clustered runs wanted per (n, d)
UNIFORM_MAX_DRAWS = 40         # seeds tried at most per (n, d) (ReLU clusters in 30–100 % of the draws)
QUICK_EQUI_NS = (4, 8)
QUICK_EQUI_DS = (16, 64, 256)
QUICK_UNIFORM_NS = (8, 16)
QUICK_UNIFORM_DS = (64, 512)
QUICK_UNIFORM_RUNS = 1
QUICK_UNIFORM_MAX_DRAWS = 8
CHECK_EVERY = 0.5              # the gap is checked (and the crossing interpolated) every this
REFINED = 0.5                  # every clustered run is rerun with dt and CHECK_EVERY times this
REFINED_RTOL = 1e-3            # relative change of a clustered run's time under that refinement (measured ~1e-5)
ODE_RTOL = 2e-3                # particles against the equiangular ODE time
SOFTMAX_D_SLOPE_FRACTION = 0.2 # softmax log-d slope below this fraction of ReLU's


# ---- the equiangular prediction --------------------------------------------
def relu_equiangular_time(n: float, gamma0: float, eps: float) -> float:
    r"""Exact ReLU clustering time from equiangular tokens (Thm 25 of arXiv 2605.04279).

    .. math::

        T=\int_{\gamma_0}^{1-\varepsilon}\frac{n\,d\gamma}{2\gamma(1-\gamma)(1+(n-1)\gamma)}
        =\frac n2\ln\frac{1-\varepsilon}{\gamma_0}+\frac12\ln\frac{1-\gamma_0}{\varepsilon}
        -\frac{n-1}2\ln\frac{1+(n-1)(1-\varepsilon)}{1+(n-1)\gamma_0}.
    """
    m = n - 1.0
    return (
        0.5 * n * math.log((1.0 - eps) / gamma0)
        + 0.5 * math.log((1.0 - gamma0) / eps)
        - 0.5 * m * math.log((1.0 + m * (1.0 - eps)) / (1.0 + m * gamma0))
    )


def softmax_equiangular_time(n: float, gamma0: float, eps: float, *, beta: float = BETA) -> float:
    r"""Softmax clustering time from equiangular tokens: :math:`\int_{\gamma_0}^{1-\varepsilon}d\gamma/r(\gamma)` (Thms 22, 25 of arXiv 2605.04279).

    With :math:`r` = :func:`meanfield.analysis.theory.equiangular_rhs` (one head, :math:`\lambda=1`),
    integrated in :math:`u=\ln(1-\gamma)` by :func:`scipy.integrate.quad`.
    """
    from scipy.integrate import quad

    from meanfield.analysis.theory import equiangular_rhs

    def integrand(u: float) -> float:
        gap = math.exp(u)
        return gap / float(equiangular_rhs(1.0 - gap, lambdas=[1.0], beta=beta, n=n))

    value, _ = quad(integrand, math.log(eps), math.log1p(-gamma0), epsabs=0.0, epsrel=1e-11, limit=200)
    return float(value)


def equiangular_time(kind: str, n: float, d: float, eps: float = EPS) -> float:
    """Predicted clustering time from ``γ0 = d^{-1/2}`` for ``kind`` ``"relu"`` or ``"softmax"``."""
    gamma0 = d**-0.5
    return relu_equiangular_time(n, gamma0, eps) if kind == "relu" else softmax_equiangular_time(n, gamma0, eps)


def equiangular_slope_log_d(kind: str, n: float, d: float) -> float:
    r""":math:`dT/d\ln d=\gamma_0/(2r(\gamma_0))` at :math:`\gamma_0=d^{-1/2}` (ReLU: :math:`\frac n4/((1-\gamma_0)(1+(n-1)\gamma_0))`)."""
    from meanfield.analysis.theory import equiangular_rhs

    g = d**-0.5
    if kind == "relu":
        return 0.25 * n / ((1.0 - g) * (1.0 + (n - 1.0) * g))
    return g / (2.0 * float(equiangular_rhs(g, lambdas=[1.0], beta=BETA, n=n)))


# ---- measurement -----------------------------------------------------------
def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.median(finite)) if finite else math.inf


def _quartiles(values: Sequence[float]) -> tuple[float, float]:
    """25th and 75th percentiles of the finite values (``nan`` if none)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return (math.nan, math.nan)
    low, high = np.percentile(finite, [25.0, 75.0])
    return (float(low), float(high))


def _fit(xs: Sequence[float], ys: Sequence[float], *, log_log: bool) -> float:
    from meanfield.analysis.theory import fit_linear, fit_power_law

    pairs = [(x, y) for x, y in zip(xs, ys) if math.isfinite(y)]
    if len(pairs) < 2 or len({x for x, _ in pairs}) < 2:
        return math.nan
    x, y = zip(*pairs)
    return (fit_power_law if log_log else fit_linear)(x, y)[0]


def add_fits(rows: list[dict[str, Any]]) -> None:
    """Add ``median``, ``q25``, ``q75`` (per cell, clustered runs), ``fit_slope_log_d`` (per init, kind, n) and
    ``fit_exponent_n`` (per init, kind, d) to every row."""
    cells: dict[tuple[str, str, int, int], float] = {}
    quartiles: dict[tuple[str, str, int, int], tuple[float, float]] = {}
    for key in dict.fromkeys((r["init"], r["attention"], r["n"], r["d"]) for r in rows):
        times = [r["time"] for r in rows if (r["init"], r["attention"], r["n"], r["d"]) == key]
        cells[key] = _median(times)
        quartiles[key] = _quartiles(times)
    for r in rows:
        init, kind, n, d = r["init"], r["attention"], r["n"], r["d"]
        by_d = sorted((dd, t) for (i, k, nn, dd), t in cells.items() if (i, k, nn) == (init, kind, n))
        by_n = sorted((nn, t) for (i, k, nn, dd), t in cells.items() if (i, k, dd) == (init, kind, d))
        r["median"] = cells[(init, kind, n, d)]
        r["q25"], r["q75"] = quartiles[(init, kind, n, d)]
        r["fit_slope_log_d"] = _fit([math.log(dd) for dd, _ in by_d], [t for _, t in by_d], log_log=False)
        r["fit_exponent_n"] = _fit([nn for nn, _ in by_n], [t for _, t in by_n], log_log=True)


def compute(*, quick: bool = False) -> list[dict[str, Any]]:
    """One row per run: ``init, attention, n, d, run, seed, time, time_refined, clustered, clustered_fraction, draws, gamma0, time_ode, …``."""
    from meanfield.solvers.experiments.multihead import clustering_time, clustering_time_experiment

    plans = (
        ("equiangular", QUICK_EQUI_NS if quick else EQUI_NS, QUICK_EQUI_DS if quick else EQUI_DS, 1, 1),
        (
            "uniform",
            QUICK_UNIFORM_NS if quick else UNIFORM_NS,
            QUICK_UNIFORM_DS if quick else UNIFORM_DS,
            QUICK_UNIFORM_RUNS if quick else UNIFORM_RUNS,
            QUICK_UNIFORM_MAX_DRAWS if quick else UNIFORM_MAX_DRAWS,
        ),
    )
    rows: list[dict[str, Any]] = []
    for init, ns, ds, runs, max_draws in plans:
        for kind in KINDS:
            out = clustering_time_experiment(kind, ns, ds, EPS, beta=BETA, runs=runs, max_draws=max_draws, init=init, dt=DT)
            for k in range(len(out["n"])):
                n, d = int(out["n"][k]), int(out["d"][k])
                equi = init == "equiangular"
                for run, time in enumerate(out["times"][k]):
                    seed = int(out["seeds"][k, run])
                    refined = math.inf
                    if math.isfinite(time):
                        refined = clustering_time(kind, n, d, beta=BETA, eps=EPS, init=init, seed=seed, dt=REFINED * DT,
                                                  check_every=REFINED * CHECK_EVERY)["time"]
                    rows.append(
                        {
                            "init": init,
                            "attention": kind,
                            "n": n,
                            "d": d,
                            "run": run,
                            "seed": seed,
                            "time": float(time),
                            "time_refined": float(refined),
                            "clustered": int(math.isfinite(time)),
                            "clustered_fraction": float(out["clustered_fraction"][k]),
                            "draws": int(out["draws"][k]),
                            "gamma0": d**-0.5 if equi else math.nan,
                            "time_ode": equiangular_time(kind, n, d) if equi else math.nan,
                            "ode_slope_log_d": equiangular_slope_log_d(kind, n, d) if equi else math.nan,
                            "linearised_slope_log_d": (0.25 * n if kind == "relu" else 0.0),
                        }
                    )
    add_fits(rows)
    return rows


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    text = ("init", "attention")
    integers = ("n", "d", "run", "seed", "clustered", "draws")
    with open(path, newline="") as f:
        return [
            {k: (v if k in text else int(v) if k in integers else float(v)) for k, v in row.items()}
            for row in csv.DictReader(f)
        ]


def _cells(rows: list[dict[str, Any]], init: str, kind: str) -> dict[tuple[int, int], float]:
    """``(n, d) -> median time`` for one init and kind (recomputed from the runs)."""
    keys = dict.fromkeys((r["n"], r["d"]) for r in rows if (r["init"], r["attention"]) == (init, kind))
    return {key: _median([r["time"] for r in rows if (r["init"], r["attention"], r["n"], r["d"]) == (init, kind, *key)]) for key in keys}


def _slope_log_d(cells: dict[tuple[int, int], float], n: int) -> float:
    by_d = sorted((d, t) for (nn, d), t in cells.items() if nn == n)
    return _fit([math.log(d) for d, _ in by_d], [t for _, t in by_d], log_log=False)


def _exponent_n(cells: dict[tuple[int, int], float], d: int) -> float:
    by_n = sorted((n, t) for (n, dd), t in cells.items() if dd == d)
    return _fit([n for n, _ in by_n], [t for _, t in by_n], log_log=True)


def claim(csv_path: str | Path) -> dict[str, dict[str, Any]]:
    """Checks of the CSV (medians and fits recomputed from the runs); see the module docstring."""
    rows = read_csv(csv_path)
    checks: dict[str, dict[str, Any]] = {}
    equi = [r for r in rows if r["init"] == "equiangular"]
    ode_err = largest(abs(r["time"] / r["time_ode"] - 1.0) for r in equi)
    checks["particles=ODE[equiangular]"] = {"ok": ode_err <= ODE_RTOL, "value": ode_err, "expected": f"max relative error <= {ODE_RTOL:g}"}
    relu, soft = _cells(rows, "equiangular", "relu"), _cells(rows, "equiangular", "softmax")
    for n in sorted({n for n, _ in relu}):
        slope = _slope_log_d(relu, n)
        checks[f"relu_slope_log_d[equiangular,n={n}]"] = {
            "ok": 0.0 < slope <= 0.25 * n, "value": slope, "expected": f"in (0, n/4 = {0.25 * n:g}]"
        }
        ratio = _slope_log_d(soft, n) / slope
        checks[f"softmax/relu_log_d_slope[equiangular,n={n}]"] = {
            "ok": abs(ratio) < SOFTMAX_D_SLOPE_FRACTION, "value": ratio, "expected": f"|ratio| < {SOFTMAX_D_SLOPE_FRACTION:g}"
        }
    for init in dict.fromkeys(r["init"] for r in rows):
        timed = [r for r in rows if r["init"] == init and math.isfinite(r["time"])]
        change = largest(abs(r["time_refined"] / r["time"] - 1.0) for r in timed)
        checks[f"step_converged[{init}]"] = {
            "ok": change <= REFINED_RTOL, "value": change,
            "expected": f"max relative change of the {len(timed)} clustered times with dt and the check interval × {REFINED:g} <= {REFINED_RTOL:g}"
        }
    ratio = smallest(relu[key] / soft[key] for key in relu)
    checks["relu>softmax[equiangular]"] = {"ok": ratio > 1.0, "value": ratio, "expected": "min T_relu / T_softmax > 1"}
    d_top = max(d for _, d in relu)
    exp_soft, exp_relu = _exponent_n(soft, d_top), _exponent_n(relu, d_top)
    checks[f"softmax_exponent_n[equiangular,d={d_top}]"] = {
        "ok": exp_soft < 1.0, "value": exp_soft, "expected": "< 1 (O(n) is an upper bound; measured ≈ 0)"
    }
    checks[f"relu_exponent_n[equiangular,d={d_top}]"] = {"ok": exp_relu > 0.0, "value": exp_relu, "expected": "> 0"}
    uniform = [r for r in rows if r["init"] == "uniform"]
    if uniform:
        fraction = smallest(r["clustered_fraction"] for r in uniform if r["attention"] == "softmax")
        checks["softmax_always_clusters[uniform]"] = {"ok": fraction == 1.0, "value": fraction, "expected": "clustered fraction = 1"}
        relu_u, soft_u = _cells(rows, "uniform", "relu"), _cells(rows, "uniform", "softmax")
        clustered = [key for key, t in relu_u.items() if math.isfinite(t)]
        ratio_u = smallest(relu_u[key] / soft_u[key] for key in clustered)
        checks["relu>softmax[uniform]"] = {
            "ok": bool(clustered) and ratio_u > 1.0, "value": ratio_u, "expected": "min over clustered cells of median T_relu / T_softmax > 1"
        }
        runs = [sum(r["clustered"] for r in uniform if (r["attention"], r["n"], r["d"]) == ("relu", *key)) for key in relu_u]
        checks["relu/softmax_range[uniform]"] = {
            "ok": None, "value": max(relu_u[key] / soft_u[key] for key in clustered) if clustered else math.nan,
            "expected": f"largest ratio of medians (smallest {ratio_u:.3g}); {min(runs)}–{max(runs)} clustered ReLU runs per cell"
        }
    return checks


# ---- figure ----------------------------------------------------------------
def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(12.0, 8.6), constrained_layout=True)
    (ax_d, ax_n), (ax_u, ax_s) = fig.subplots(2, 2)
    styles = {"relu": dict(marker="o", ls="-"), "softmax": dict(marker="s", mfc="none", ls="--")}
    all_ns = sorted({r["n"] for r in rows})
    palette = ("C1", "C2", "C4", "C5", "C6", "C7", "C8", "C9")  # not C0/C3: those mark softmax/ReLU in (b), (d)
    n_color = {n: palette[k % len(palette)] for k, n in enumerate(all_ns)}  # one colour per n in (a) and (c)

    # (a) equiangular: T against d
    equi_ns = sorted({r["n"] for r in rows if r["init"] == "equiangular"})
    equi_ds = sorted({r["d"] for r in rows if r["init"] == "equiangular"})
    d_fine = np.geomspace(max(min(equi_ds), max(equi_ns)), 2.0**20, 120)
    for n in equi_ns:
        color = n_color[n]
        for kind in KINDS:
            cells = _cells(rows, "equiangular", kind)
            ds = sorted(d for nn, d in cells if nn == n)
            ax_d.plot(ds, [cells[(n, d)] for d in ds], color=color, ls="none", marker=styles[kind]["marker"],
                      mfc=styles[kind].get("mfc", color), ms=6)
            ax_d.plot(d_fine, [equiangular_time(kind, n, d) for d in d_fine], color=color, ls=styles[kind]["ls"], lw=1.0)
        asymptote = 0.25 * n * np.log(d_fine) - 0.5 * (n - 1) * math.log(n) + 0.5 * math.log(1.0 / EPS)
        ax_d.plot(d_fine, asymptote, color=color, ls=":", lw=1.0)
        slope = _slope_log_d(_cells(rows, "equiangular", "relu"), n)
        ax_d.text(d_fine[-1], equiangular_time("relu", n, d_fine[-1]), f" n = {n}: fitted slope\n {slope:.2f} on the simulated d\n (n/4 = {n / 4:g})",
                  fontsize=7, color=color, va="center")
    ax_d.set_xscale("log", base=2)
    ax_d.set_xlim(right=2.0**24)
    ax_d.set_ylim(0.0, 1.12 * max(equiangular_time("relu", n, d_fine[-1]) for n in equi_ns))
    ax_d.set_xlabel("d   (equiangular start, γ0 = d^-1/2)")
    ax_d.set_ylabel(r"clustering time $T_\varepsilon$")
    ax_d.set_title("equiangular start: ReLU grows like (n/4) ln d, softmax hardly depends on d", fontsize=9)
    ax_d.legend(
        [Line2D([], [], color="k", marker="o", ls="none"), Line2D([], [], color="k", marker="s", mfc="none", ls="none"),
         Line2D([], [], color="k", ls="-"), Line2D([], [], color="k", ls="--"), Line2D([], [], color="k", ls=":")],
        ["ReLU, particles", "softmax, particles", "ReLU, equiangular ODE (exact)", "softmax, equiangular ODE",
         "ReLU linearised: (n/4) ln d − ((n−1)/2) ln n + ½ ln(1/ε)"],
        fontsize=7, loc="upper left",
    )

    # (b) T against n at the largest d, both inits
    for init, fill in (("equiangular", True), ("uniform", False)):
        for kind, color in (("relu", "C3"), ("softmax", "C0")):
            cells = _cells(rows, init, kind)
            if not cells:
                continue
            d_top = max(d for _, d in cells)
            ns = sorted(n for n, d in cells if d == d_top and math.isfinite(cells[(n, d)]))
            exponent = _exponent_n(cells, d_top)
            ax_n.plot(ns, [cells[(n, d_top)] for n in ns], color=color, marker="o" if fill else "^", mfc=color if fill else "none",
                      ls="-" if fill else "--", label=f"{kind}, {init}, d = {d_top}: T ∝ n^{exponent:.2f}")
    n_ref = np.array([4.0, 32.0])
    ax_n.plot(n_ref, 4.0 * n_ref / n_ref[0], color="0.5", ls=":", label="reference T ∝ n (the O(n) bound's shape)")
    ax_n.set_xscale("log", base=2)
    ax_n.set_yscale("log")
    ax_n.set_xlabel("n (tokens)")
    ax_n.set_ylabel(r"median $T_\varepsilon$")
    ax_n.set_title("against n at the largest d: fitted exponents (softmax ≈ flat, far below O(n))", fontsize=9)
    ax_n.legend(fontsize=7)

    # (c) uniform start: median T against d, with clustered fractions
    uni_ns = sorted({r["n"] for r in rows if r["init"] == "uniform"})
    for n in uni_ns:
        color = n_color[n]
        for kind in KINDS:
            group = [r for r in rows if (r["init"], r["attention"], r["n"]) == ("uniform", kind, n)]
            ds = sorted({r["d"] for r in group})
            med = [_median([r["time"] for r in group if r["d"] == d]) for d in ds]
            lo = [_quartiles([r["time"] for r in group if r["d"] == d])[0] for d in ds]
            hi = [_quartiles([r["time"] for r in group if r["d"] == d])[1] for d in ds]
            finite = [i for i, m in enumerate(med) if math.isfinite(m)]
            x = [ds[i] for i in finite]
            y = np.array([med[i] for i in finite])
            err = np.array([[y[j] - lo[i] for j, i in enumerate(finite)], [hi[i] - y[j] for j, i in enumerate(finite)]])
            ax_u.errorbar(x, y, yerr=err, color=color, marker=styles[kind]["marker"], mfc=styles[kind].get("mfc", color),
                          ls=styles[kind]["ls"], capsize=2, lw=1.0, label=f"{kind}, n = {n}")
            if kind == "relu":
                for d in ds:
                    frac = next(r["clustered_fraction"] for r in group if r["d"] == d)
                    m = _median([r["time"] for r in group if r["d"] == d])
                    if math.isfinite(m):
                        ax_u.annotate(f"{frac:.0%}", (d, m), textcoords="offset points", xytext=(4, 4), fontsize=6, color=color)
    ax_u.set_xscale("log", base=2)
    ax_u.set_ylim(bottom=0)
    ax_u.set_xlabel("d   (uniform start)")
    ax_u.set_ylabel(r"median $T_\varepsilon$ over clustered runs (bars: interquartile range)")
    ax_u.set_title("uniform start: ReLU slower; % = share of ReLU seeds that cluster (the rest stall)", fontsize=9)
    ax_u.legend(fontsize=7, ncol=2)

    # (d) fitted log-d slopes against n
    for init, marker in (("equiangular", "o"), ("uniform", "^")):
        for kind, color in (("relu", "C3"), ("softmax", "C0")):
            cells = _cells(rows, init, kind)
            ns = sorted({n for n, _ in cells})
            slopes = [_slope_log_d(cells, n) for n in ns]
            ax_s.plot(ns, slopes, color=color, marker=marker, mfc=color if init == "equiangular" else "none",
                      ls="-" if init == "equiangular" else "--", label=f"{kind}, {init} start")
    n_line = np.array(sorted({r["n"] for r in rows}), dtype=float)
    ax_s.plot(n_line, 0.25 * n_line, color="k", ls=":", label="n/4: ReLU linearised slope (d ≫ n²)")
    ax_s.axhline(0.0, color="0.5", lw=0.8)
    ax_s.set_xscale("log", base=2)
    ax_s.set_xlabel("n (tokens)")
    ax_s.set_ylabel(r"fitted slope $dT/d\ln d$")
    ax_s.set_title("fitted slope of T against ln d over the simulated d", fontsize=9)
    ax_s.legend(fontsize=7)
    for ax in (ax_d, ax_n, ax_u, ax_s):
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"Thm 25 of Pendharkar, arXiv 2605.04279: clustering time (ε = {EPS:g}) of one identity head, ReLU against softmax (β = {BETA:g})\n"
        "ReLU's (n/4) ln d shows from the equiangular start once d ≫ n²; softmax is nearly flat in n and d",
        fontsize=10,
    )
    fig.savefig(path, dpi=120)
    return path


def make(out_dir: str | Path, *, quick: bool = False) -> dict[str, Path]:
    """Compute, write ``ID.csv`` and ``ID.png`` under ``out_dir``."""
    from meanfield.kernels.jit import one_blas_thread

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with one_blas_thread():  # small matrices: threads only contend
        rows = compute(quick=quick)
    csv_path = out / f"{ID}.csv"
    write_rows(csv_path, rows)
    return {"png": plot(read_csv(csv_path), out / f"{ID}.png"), "csv": csv_path}


def main(argv: Sequence[str] | None = None) -> int:
    return script_main(make, claim, DESCRIPTION, argv)


if __name__ == "__main__":
    sys.exit(main())
