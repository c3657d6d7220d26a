r"""Safe arithmetic expressions of config values (``init.expr``, ``weights.target``).

An expression is parsed with :mod:`ast` and checked before it is compiled: only
arithmetic, comparisons, conditional expressions, numbers, the declared
variables and the NumPy functions of :data:`EXPR_NAMES` (``exp``, ``cos``,
``where``, ``pi``, …) are allowed; no attributes, no keywords, no builtins.  It is
then evaluated with NumPy, so a variable may be an array.

Examples
--------
>>> import numpy as np
>>> f = compile_expression("2 + 1.5*cos(t + phi)", variables=("t", "phi"), key="weights.target[0][0]")
>>> float(f(t=0.0, phi=0.0))
3.5
"""
from __future__ import annotations

import ast
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from meanfield.errors import ConfigError

__all__ = ["EXPR_NAMES", "EXPR_NODES", "check_expression", "compile_expression"]

#: names usable in an expression (evaluated with NumPy, no builtins)
EXPR_NAMES: dict[str, Any] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs,
    "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "arcsin": np.arcsin, "arccos": np.arccos, "arctan": np.arctan, "arctan2": np.arctan2,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "minimum": np.minimum, "maximum": np.maximum, "where": np.where, "clip": np.clip,
    "pi": math.pi, "e": math.e,
}
#: syntax nodes an expression may contain
EXPR_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call, ast.Name, ast.Load,
    ast.Constant, ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.Tuple,
)


def check_expression(expr: Any, *, variables: Sequence[str], key: str, what: str = "an expression") -> Any:
    """Parse and check ``expr``; return its compiled code.

    Raises
    ------
    ConfigError
        Naming ``key``, for an empty or malformed expression, a forbidden
        construct, or an unknown name.
    """
    if not isinstance(expr, str) or not expr.strip():
        raise ConfigError(key, f"expected a non-empty expression in {', '.join(variables)}, got {expr!r}")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise ConfigError(key, f"cannot parse {expr!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, EXPR_NODES):
            raise ConfigError(key, f"{type(node).__name__} is not allowed in {what}")
        if isinstance(node, ast.Name) and node.id not in EXPR_NAMES and node.id not in variables:
            allowed = ", ".join(list(variables) + sorted(EXPR_NAMES))
            raise ConfigError(key, f"unknown name {node.id!r}; allowed names are {allowed}")
        if isinstance(node, ast.Call) and (not isinstance(node.func, ast.Name) or node.keywords):
            raise ConfigError(key, "only plain calls of the allowed functions are permitted")
    return compile(tree, f"<{key}>", "eval")


def compile_expression(expr: str, *, variables: Sequence[str], key: str, what: str = "an expression") -> Callable[..., Any]:
    """A checked expression as a function of its variables (keyword arguments, scalars or arrays)."""
    code = check_expression(expr, variables=variables, key=key, what=what)

    def f(**values: Any) -> Any:
        env = dict(EXPR_NAMES)
        env.update(values)
        with np.errstate(all="ignore"):
            try:
                return eval(code, {"__builtins__": {}}, env)  # noqa: S307 - checked AST, no builtins
            except Exception as exc:  # noqa: BLE001 - any evaluation failure is bad input
                raise ConfigError(key, f"cannot evaluate {expr!r}: {exc}") from None

    return f
