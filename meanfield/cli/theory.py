"""``meanfield theory …``: evaluate the closed forms of seed 000 (:mod:`meanfield.theory`).

Sub-commands::

    meanfield theory beta-star --heads 2 --n 16 --alpha 1 [--json]
    meanfield theory rates --lambdas 0.5,1.5 --beta 2 --n 8 [--json]

Output is one ``key = value`` line per quantity (floats at full precision), or a
JSON object with ``--json`` (non-finite floats as the strings ``"inf"``,
``"-inf"``, ``"nan"``).  Bad values raise :class:`~meanfield.errors.ConfigError`
naming the option, which the CLI maps to exit status 2.

Extending: further sub-commands (e.g. ``clustering-time``) are added without
editing this file's parsers, either

* by an entry point of the group :data:`ENTRY_POINT_GROUP` (``meanfield.theory``)
  naming a module that defines ``add_subparser(subparsers) -> None`` — this is how
  ``solvers`` adds the simulated ``clustering-time`` without the model importing it, or
* by calling :func:`register` with such a function before the parser is built.

Each adder must call ``subparsers.add_parser(name, ...)`` and set
``func(args) -> int`` with ``set_defaults``.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from importlib.metadata import entry_points
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from meanfield import theory
from meanfield.errors import ConfigError

__all__ = [
    "add_parser",
    "register",
    "SUBCOMMANDS",
    "ENTRY_POINT_GROUP",
    "parse_int",
    "parse_float",
    "parse_float_list",
    "emit",
]

Adder = Callable[[Any], None]

#: entry-point group through which other packages (our ``solvers``) add ``meanfield theory``
#: sub-commands: each entry names a module with ``add_subparser(subparsers)``
ENTRY_POINT_GROUP = "meanfield.theory"

#: library parameter name -> CLI option, to re-key errors raised by :mod:`meanfield.theory`
_OPTION_OF: dict[str, str] = {
    "H": "--heads",
    "n": "--n",
    "alpha": "--alpha",
    "beta": "--beta",
    "lambdas": "--lambdas",
}


# --------------------------------------------------------------------------- #
# parsing helpers (shared with extension modules)
# --------------------------------------------------------------------------- #
def parse_int(value: str, key: str, *, minimum: int | None = None) -> int:
    """Parse an integer option; ``ConfigError(key, ...)`` when bad or below ``minimum``."""
    try:
        x = int(str(value).strip())
    except ValueError:
        raise ConfigError(key, f"expected an integer, got {value!r}") from None
    if minimum is not None and x < minimum:
        raise ConfigError(key, f"must be an integer >= {minimum}, got {value!r}")
    return x


def parse_float(value: str, key: str, *, positive: bool = False, nonnegative: bool = False) -> float:
    """Parse a finite float option; ``ConfigError(key, ...)`` when bad."""
    try:
        x = float(str(value).strip())
    except ValueError:
        raise ConfigError(key, f"expected a number, got {value!r}") from None
    if not math.isfinite(x):
        raise ConfigError(key, f"must be finite, got {value!r}")
    if positive and x <= 0:
        raise ConfigError(key, f"must be > 0, got {value!r}")
    if nonnegative and x < 0:
        raise ConfigError(key, f"must be >= 0, got {value!r}")
    return x


def parse_float_list(value: str, key: str, *, positive: bool = False) -> list[float]:
    """Parse ``"0.5,1.5"`` (commas and/or spaces) into finite floats."""
    items = [s for s in str(value).replace(",", " ").split()]
    if not items:
        raise ConfigError(key, f"expected a comma-separated list of numbers, got {value!r}")
    out: list[float] = []
    for item in items:
        try:
            x = float(item)
        except ValueError:
            raise ConfigError(key, f"cannot parse {item!r} in {value!r} as a number") from None
        if not math.isfinite(x):
            raise ConfigError(key, f"entries must be finite, got {item!r}")
        if positive and x <= 0:
            raise ConfigError(key, f"entries must be > 0, got {item!r}")
        out.append(x)
    return out


@contextmanager
def _as_options() -> Iterator[None]:
    """Re-key a library ``ConfigError`` (``"n"``) to its CLI option (``"--n"``)."""
    try:
        yield
    except ConfigError as exc:
        if exc.key in _OPTION_OF:
            raise ConfigError(_OPTION_OF[exc.key], exc.message) from exc
        raise


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ",".join(_fmt(v) for v in value)
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def emit(values: Mapping[str, Any], *, as_json: bool) -> None:
    """Print ``key = value`` lines, or one JSON object."""
    if as_json:
        print(json.dumps({k: _jsonable(v) for k, v in values.items()}, indent=2, allow_nan=False))
    else:
        for key, value in values.items():
            print(f"{key} = {_fmt(value)}")


# --------------------------------------------------------------------------- #
# beta-star
# --------------------------------------------------------------------------- #
def _run_beta_star(args: argparse.Namespace) -> int:
    heads = parse_int(args.heads, "--heads", minimum=1)
    n = parse_int(args.n, "--n", minimum=2)
    alpha = parse_float(args.alpha, "--alpha", positive=True)
    with _as_options():
        c = float(theory.c_star(heads))
        closed = theory.beta_star(heads, n, alpha)
        numeric = theory.beta_star_numeric(heads, n, alpha)
    if math.isinf(closed) and closed == numeric:
        diff = 0.0
    else:
        diff = closed - numeric
    if math.isinf(closed):
        regime = "all beta (a single head)"
    elif closed <= 0:
        regime = "no beta > 0"
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
            "Thm 19 of seed 000 (scalar heads B_h = alpha I, orthogonal tokens, n <= d): "
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
    beta = parse_float(args.beta, "--beta", positive=True)
    n = parse_int(args.n, "--n", minimum=2)
    with _as_options():
        early = theory.early_rate(lambdas, beta=beta, n=n)
        equal = theory.equal_split_rate(lambdas, beta=beta, n=n)
        gain = theory.superadditivity_gain(lambdas, beta=beta, n=n)
        lam_c = theory.lambda_c(beta, n)
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
            "Thm 22 of seed 000 (softmax, B_h = V_h = lambda_h I, equiangular tokens): early rate "
            "sum_h phi(lambda_h), phi(l) = 2 l/(e^(l beta)+n-1), the equal-split rate H phi(Lambda/H), "
            "their difference, the inflection point lambda_c of phi and the late rate 2 Lambda."
        ),
    )
    p.add_argument("--lambdas", required=True, metavar="L1,L2,...", help="head strengths, comma-separated, > 0")
    p.add_argument("--beta", default="1", metavar="B", help="inverse temperature beta > 0 (default 1)")
    p.add_argument("--n", default="8", metavar="N", help="number of tokens n >= 2 (default 8)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run_rates)


# --------------------------------------------------------------------------- #
# registry and entry point
# --------------------------------------------------------------------------- #
#: built-in sub-commands, in ``--help`` order; extensions append through :func:`register`
SUBCOMMANDS: list[Adder] = [_add_beta_star, _add_rates]


def register(adder: Adder) -> Adder:
    """Add a ``meanfield theory`` sub-command (usable as a decorator).

    ``adder(subparsers)`` must add one parser and set its ``func``.
    """
    if adder not in SUBCOMMANDS:
        SUBCOMMANDS.append(adder)
    return adder


def add_parser(subparsers: Any) -> None:
    """Register ``meanfield theory`` and its sub-commands."""
    parser = subparsers.add_parser(
        "theory",
        help="closed forms of seed 000 (beta*, clustering rates, ...)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    sub = parser.add_subparsers(dest="theory_command", metavar="SUBCOMMAND")

    def _usage(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2

    parser.set_defaults(func=_usage)
    adders = list(SUBCOMMANDS)
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        adder = getattr(importlib.import_module(entry.value), "add_subparser")
        if adder not in adders:
            adders.append(adder)
    for adder in adders:
        adder(sub)
