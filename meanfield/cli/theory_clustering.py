r"""``meanfield theory clustering-time``: measured ReLU vs softmax clustering times (Thm 25 of arXiv 2605.04279).

.. math::

    T_{\mathrm{softmax}} = O(n),\qquad T_{\mathrm{ReLU}} = O(n\log d)

Usage::

    meanfield theory clustering-time --attention relu --d 8,32,128 --n 16 [--eps 1e-3]
        [--beta 1] [--runs 3] [--max-draws 30] [--init uniform|equiangular] [--dt 0.2] [--quick] [--json]

Simulates one identity head from random tokens for every :math:`(n, d)`
(:func:`meanfield.solvers.experiments.multihead.clustering_time_experiment`: seeds 0, 1, … until
``--runs`` runs reach one cluster or ``--max-draws`` seeds were tried) and
prints the median times of the clustered runs, the fraction of tried seeds that
clustered, and the fits against the predicted scale (``key = value`` lines, or
JSON with ``--json``).
``--attention both`` runs softmax and ReLU and prefixes the keys.

:mod:`meanfield.cli.theory` lists :func:`add_subparser` among its ``SUBCOMMANDS``
(imported directly: there is no plug-in mechanism); the solver is imported only
when the sub-command runs.
"""
from __future__ import annotations

import argparse
import math
from typing import Any

from meanfield.cli.options import emit, parse_float, parse_int, parse_int_list
from meanfield.errors import ConfigError

__all__ = ["add_subparser", "run"]

#: the interval between the checks of the tokens' largest gap (:func:`meanfield.solvers.experiments.multihead.clustering_time`'s
#: ``check_every``): the RK4 steps run inside it
CHECK_EVERY = 0.5


def _clean(value: Any) -> Any:
    """Arrays and numpy scalars as plain lists/floats for :func:`emit`."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, float) and math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return float(value)
    return value


def run(args: argparse.Namespace) -> int:
    """Run the experiment(s) and print the numbers."""
    from meanfield.solvers.experiments.multihead import clustering_time_experiment

    kinds = ("softmax", "relu") if args.attention == "both" else (args.attention,)
    ns = parse_int_list(args.n, "--n", minimum=2)
    ds = parse_int_list(args.d, "--d", minimum=2)
    for key, sizes in (("--n", ns), ("--d", ds)):
        if len(set(sizes)) != len(sizes):  # a size given twice ran twice, and its fits came out NaN without a word
            raise ConfigError(key, f"the sizes must be distinct, got {getattr(args, key[2:])!r}")
    eps = parse_float(args.eps, "--eps", positive=True)
    if eps >= 2.0:  # ⟨x_i, x_j⟩ ≥ -1 = 1 - 2 for every pair of unit tokens: clustered at t = 0
        raise ConfigError("--eps", f"must be < 2 (every pair of tokens has ⟨x_i, x_j⟩ ≥ 1 - 2), got {args.eps!r}")
    beta = parse_float(args.beta, "--beta", nonnegative=True)
    from meanfield.model import score_bound_limit

    limit, written = score_bound_limit()
    if "softmax" in kinds and beta * math.sqrt(max(ds)) > limit:  # (the identity head's β‖I‖_F)
        raise ConfigError("--beta", f"{args.beta} puts the scores β⟨x_i, x_j⟩ past float64's resolution at d = {max(ds)}: β√d "
                                    f"must be at most {written}")
    runs = parse_int(args.runs, "--runs", minimum=1)
    max_draws = parse_int(args.max_draws, "--max-draws", minimum=1) if args.max_draws is not None else None
    if max_draws is not None and max_draws < runs:  # it had printed runs = 5 over at most 2 runs
        raise ConfigError("--max-draws", f"{max_draws} seeds cannot give --runs {runs} clustered runs; give at least {runs}")
    dt = parse_float(args.dt, "--dt", positive=True)
    if dt > CHECK_EVERY:  # the steps run between the checks of the gap: a longer one was cut to them without a word
        raise ConfigError("--dt", f"the RK4 step must be at most {CHECK_EVERY:g}, the interval between the checks of the "
                                  f"tokens' largest gap, got {args.dt!r}")
    from meanfield.solvers.experiments.multihead import check_clustering_memory, check_clustering_steps

    check_clustering_steps(ns, ds, max(dt, 0.5) if args.quick else dt, key="--dt")
    check_clustering_memory(ns, ds, key="--d")
    if args.init == "equiangular" and min(ds) < max(ns):
        raise ConfigError("--d", f"--init equiangular needs n <= d for every pair; got n up to {max(ns)} and d down to {min(ds)}")
    values: dict[str, Any] = {}
    for kind in kinds:
        result = clustering_time_experiment(
            kind, ns, ds, eps, beta=beta, runs=runs, max_draws=max_draws, init=args.init, dt=dt, quick=args.quick
        )
        prefix = f"{kind}_" if len(kinds) > 1 else ""
        if not prefix:
            values["attention"] = kind
        if kind == "softmax":  # (ReLU attention has no temperature: a printed β had looked used)
            values[f"{prefix}beta"] = beta
        values.update(
            {
                f"{prefix}init": result["init"],
                f"{prefix}eps": result["eps"],
                f"{prefix}runs": int(result["runs"]),
                f"{prefix}n": _clean(result["n"]),
                f"{prefix}d": _clean(result["d"]),
                f"{prefix}time_median": _clean(result["median"]),
                f"{prefix}clustered_fraction": _clean(result["clustered_fraction"]),
                f"{prefix}seeds_tried": _clean(result["draws"]),
                f"{prefix}predicted_scale": _clean(result["scale"]),
                f"{prefix}fit_slope": result["slope"],
                f"{prefix}fit_intercept": result["intercept"],
                f"{prefix}fit_r2": result["r2"],
                f"{prefix}exponent_in_n": result["exponent_n"],
                f"{prefix}exponent_in_n_r2": result["r2_n"],
                f"{prefix}slope_in_log_d": result["slope_log_d"],
                f"{prefix}slope_in_log_d_r2": result["r2_log_d"],
                f"{prefix}fit_points": result["points"],
            }
        )
    emit(values, as_json=args.json)
    return 0


def add_subparser(subparsers: Any) -> None:
    """Add ``clustering-time`` to ``meanfield theory`` (called from :data:`meanfield.cli.theory.SUBCOMMANDS`)."""
    p = subparsers.add_parser(
        "clustering-time",
        help="measured ReLU vs softmax clustering times and their fits (Thm 25)",
        description=(
            "Thm 25 of Pendharkar (arXiv 2605.04279): time until every pairwise inner product exceeds 1 - eps, from random "
            "tokens, for one identity head; fits T ~ a X + b against X = n (softmax) or n log d (relu), "
            "the exponent of T in n and the slope of T in log d. Runs that stall in several clusters "
            "(frequent for relu from uniform tokens) are skipped and counted in clustered_fraction."
        ),
    )
    p.add_argument("--attention", default="relu", choices=("softmax", "relu", "both"), help="attention kind (default relu)")
    p.add_argument("--n", default="16", metavar="N1,N2,...", help="numbers of tokens (default 16)")
    p.add_argument("--d", default="8,32,128", metavar="D1,D2,...", help="dimensions (default 8,32,128)")
    p.add_argument("--eps", default="1e-3", metavar="EPS", help="clustering tolerance (default 1e-3)")
    p.add_argument("--beta", default="1", metavar="B", help="softmax inverse temperature (default 1; ReLU has none)")
    p.add_argument("--runs", default="3", metavar="S", help="clustered runs per (n, d); their median is fitted (default 3)")
    p.add_argument("--max-draws", default=None, metavar="M", help="seeds tried at most per (n, d) (default 10 x runs)")
    p.add_argument("--init", default="uniform", choices=("uniform", "equiangular"), help="uniform tokens, or equiangular with gamma0 = d^-1/2 (needs n <= d)")
    p.add_argument("--dt", default="0.2", metavar="DT", help="RK4 step, at most 0.5 (default 0.2)")
    p.add_argument("--quick", action="store_true", help="one clustered run from at most 4 seeds, dt = 0.5, eps >= 1e-2")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
