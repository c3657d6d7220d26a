"""``meanfield theory``: the closed forms of Pendharkar (arXiv 2605.04279), and the simulated Thm 25 experiment.

Sub-commands: ``beta-star`` (Thm 19), ``rates`` (Thm 22) and ``clustering-time``
(Thm 25, simulated).  Output is one ``key = value`` line per quantity (floats at
full precision), or a JSON object with ``--json`` (non-finite floats as the
strings ``"inf"``, ``"-inf"``, ``"nan"``).  Bad values raise
:class:`~meanfield.errors.ConfigError` naming the option (exit status 2).
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from meanfield.cli.options import emit, parse_float, parse_float_list, parse_int
from meanfield.cli.theory_clustering import add_subparser as _add_clustering_time
from meanfield.errors import ConfigError

__all__ = ["add_parser", "SUBCOMMANDS"]

Adder = Callable[[Any], None]

#: library parameter name -> CLI option, to re-key errors raised by :mod:`meanfield.analysis.theory`
_OPTION_OF: dict[str, str] = {
    "H": "--heads",
    "n": "--n",
    "alpha": "--alpha",
    "beta": "--beta",
    "lambdas": "--lambdas",
}


# --------------------------------------------------------------------------- #
# option names
# --------------------------------------------------------------------------- #
@contextmanager
def _as_options() -> Iterator[None]:
    """Re-key a library ``ConfigError`` (``"n"``) to its CLI option (``"--n"``)."""
    try:
        yield
    except ConfigError as exc:
        if exc.key in _OPTION_OF:
            raise ConfigError(_OPTION_OF[exc.key], exc.message) from exc
        raise


# --------------------------------------------------------------------------- #
# beta-star
# --------------------------------------------------------------------------- #
def _run_beta_star(args: argparse.Namespace) -> int:
    heads = parse_int(args.heads, "--heads", minimum=1)
    n = parse_int(args.n, "--n", minimum=2)
    alpha = parse_float(args.alpha, "--alpha", positive=True)
    with _as_options():
        from meanfield.analysis import theory

        c = float(theory.c_star(heads))
        closed = theory.beta_star(heads, n, alpha)
        numeric = theory.beta_star_numeric(heads, n, alpha)
    if math.isinf(closed) and closed == numeric:
        diff = 0.0
    else:
        diff = closed - numeric
    if closed == math.inf:  # a β* < 0 past the floats is -inf: "no beta > 0" below (it had read "all finite beta")
        regime = "all beta (a single head)" if heads == 1 else "all finite beta (beta* is past the largest float)"
    elif closed <= 0:
        # Thm 19's criterion is sufficient: identical heads stay monotone at every beta (it had said they never are)
        regime = "no beta > 0 by Thm 19's sufficient criterion (c(beta) >= c*(H) at every beta; monotonicity is not excluded)"
    else:
        regime = f"0 <= beta < {closed!r}"
    emit(
        {
            "heads": heads,
            "n": n,
            "alpha": alpha,
            "c_star": c,
            "beta_star": closed,
            "beta_star_numeric": numeric,
            "difference": diff,
            "monotone_for": regime,
        },
        as_json=args.json,
    )
    return 0


def _add_beta_star(sub: Any) -> None:
    p = sub.add_parser(
        "beta-star",
        help="critical inverse temperature beta* of Thm 19 (closed form and numerical root)",
        description=(
            "Thm 19 of Pendharkar (arXiv 2605.04279) (scalar heads B_h = alpha I, orthogonal tokens, n <= d): "
            "c*(H), beta* = ln(c*^2 (n-1)/(1-c*^2))/(2 alpha) and the root of c(beta) = c*(H)."
        ),
    )
    p.add_argument("--heads", default="2", metavar="H", help="number of heads H >= 1 (default 2)")
    p.add_argument("--n", default="16", metavar="N", help="number of tokens n >= 2 (default 16)")
    p.add_argument("--alpha", default="1", metavar="A", help="scalar head strength alpha > 0 (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run_beta_star)


# --------------------------------------------------------------------------- #
# rates
# --------------------------------------------------------------------------- #
def _run_rates(args: argparse.Namespace) -> int:
    lambdas = parse_float_list(args.lambdas, "--lambdas", positive=True)
    beta = parse_float(args.beta, "--beta", nonnegative=True) + 0.0  # (-0.0 printed as 0.0)
    n = parse_int(args.n, "--n", minimum=2)
    total = sum(lambdas)
    if not math.isfinite(total * beta):  # the rates take Λ = Σ λ_h and βΛ: nan and inf had been printed, exit 0
        raise ConfigError("--lambdas", f"the total strength Σλ = {total:g} times β = {beta:g} passes the largest float")
    with _as_options():
        from meanfield.analysis import theory

        early = theory.early_rate(lambdas, beta=beta, n=n)
        equal = theory.equal_split_rate(lambdas, beta=beta, n=n)
        gain = theory.superadditivity_gain(lambdas, beta=beta, n=n)
        # at beta = 0 phi is linear, 2 lambda/n: no inflection, no convex region (as x_c/beta past the floats)
        lam_c = theory.lambda_c(beta, n) if beta > 0 else math.inf
        late = theory.late_rate(lambdas)
    mean = float(np.mean(lambdas))
    emit(
        {
            "lambdas": lambdas,
            "beta": beta,
            "n": n,
            "early_rate": early,
            "equal_split_rate": equal,
            "superadditivity_gain": gain,
            "lambda_c": lam_c,
            "mean_lambda": mean,
            "mean_in_convex_region": mean > lam_c,
            "late_rate": late,
        },
        as_json=args.json,
    )
    return 0


def _add_rates(sub: Any) -> None:
    p = sub.add_parser(
        "rates",
        help="early/late clustering rates and super-additivity of Thm 22",
        description=(
            "Thm 22 of Pendharkar (arXiv 2605.04279) (softmax, B_h = V_h = lambda_h I, equiangular tokens): early rate "
            "sum_h phi(lambda_h), phi(l) = 2 l/(e^(l beta)+n-1), the equal-split rate H phi(Lambda/H), "
            "their difference (superadditivity_gain, computed without the cancellation of the difference: "
            "where beta |lambda_h - Lambda/H| <= 1 for every head, an absolute error of about 1e-18 of the early rate, "
            "else below 2e-15 max(1, beta Lambda/H) of it), the inflection point lambda_c of phi "
            "(inf where phi has no convex region within the floats: beta = 0, where phi = 2 lambda/n is linear, "
            "or lambda_c past the largest float) and the late rate 2 Lambda."
        ),
    )
    p.add_argument("--lambdas", required=True, metavar="L1,L2,...", help="head strengths, comma-separated, > 0")
    p.add_argument("--beta", default="1", metavar="B", help="inverse temperature beta >= 0 (default 1)")
    p.add_argument("--n", default="8", metavar="N", help="number of tokens n >= 2 (default 8)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run_rates)


# --------------------------------------------------------------------------- #
# the command
# --------------------------------------------------------------------------- #
#: the sub-commands, in ``--help`` order (the only place they are registered: no entry-point group is read)
SUBCOMMANDS: tuple[Adder, ...] = (_add_beta_star, _add_rates, _add_clustering_time)


def add_parser(subparsers: Any) -> None:
    """Register ``meanfield theory`` and its sub-commands."""
    parser = subparsers.add_parser(
        "theory",
        help="closed forms of Pendharkar (arXiv 2605.04279): beta*, clustering rates, clustering time",
        description="The closed forms of Pendharkar, Gradient Flow Structure and Quantitative Dynamics of "
        "Multi-Head Self-Attention (arXiv 2605.04279): the critical inverse temperature of Thm 19, the rates "
        "of Thm 22, and the simulated clustering times of Thm 25.",
    )
    sub = parser.add_subparsers(dest="theory_command", metavar="SUBCOMMAND")

    def _usage(args: argparse.Namespace) -> int:  # noqa: ARG001
        parser.print_help(sys.stderr)
        return 2

    parser.set_defaults(func=_usage)
    for adder in SUBCOMMANDS:
        adder(sub)
