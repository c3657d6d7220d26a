r"""Safe arithmetic expressions of config values (``init.expr``, ``weights.target``).

An expression is parsed with :mod:`ast` and checked before it is compiled: only
arithmetic, comparisons, conditional expressions, real numbers, the declared
variables and calls of the NumPy functions of :data:`EXPR_NAMES` (``exp``,
``cos``, ``where``, …; ``pi`` and ``e`` are numbers) are allowed; no strings,
tuples, attributes, keywords, shifts, matrix products or builtins.  ``&`` and
``|`` join conditions only (``(t > 0) & (t < 1)``, the "and" of NumPy arrays);
``~``, ``^`` and bit operations on numbers are refused; a condition (a comparison,
or comparisons joined by ``&`` or ``|``) that is an operand of ``+ - * / // % **``
counts as 0 or 1 (``(t > 1) + (t > 2)`` is 2 at ``t = 3``); passed through a
function first (``maximum(t > 1, t > 2)``) it stays a boolean.  A power is taken in floating
point (its exponent is made a float), so ``10**10**10`` overflows at once
instead of computing an integer of ten billion digits.  It is then evaluated
with NumPy, so a variable may be an array; a value that is not a real number
or array (``where(t > 0)``, a complex ``(-1)**0.5``) is refused.

A variable given as a Python number is evaluated as a ``numpy.float64``, so that
a scalar gives what an array of it gives: IEEE arithmetic, without errors, so
``1/t`` at ``t = 0`` is ``inf`` and ``t**0.5`` at ``t = -1`` is ``nan`` (a Python
float had raised ``ZeroDivisionError`` for one and given a complex number for the
other, refused, where ``numpy.float64(0.0)`` gave ``inf``).  Non-finite values are
returned: each caller checks its own range (``noise.anneal_expr`` > 0 and finite,
``weights.target`` finite along the path).
Arithmetic of constants alone stays Python's: ``1/0`` is an error, ``(-1)**0.5``
is complex and refused.

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
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from meanfield.errors import ConfigError

__all__ = ["EXPR_ARITY", "EXPR_NAMES", "EXPR_NODES", "check_expression", "compile_expression"]

#: names usable in an expression (evaluated with NumPy, no builtins)
EXPR_NAMES: dict[str, Any] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs,
    "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "arcsin": np.arcsin, "arccos": np.arccos, "arctan": np.arctan, "arctan2": np.arctan2,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "minimum": np.minimum, "maximum": np.maximum, "where": np.where, "clip": np.clip,
    "pi": math.pi, "e": math.e,
}
#: the number of arguments each function of :data:`EXPR_NAMES` takes: a ufunc's inputs only (a further positional
#: argument is its ``out``: ``cos(t, phi)`` had written into the caller's ``phi``), three for ``where`` and ``clip``
EXPR_ARITY: dict[str, int] = {
    name: value.nin if isinstance(value, np.ufunc) else 3 for name, value in EXPR_NAMES.items() if callable(value)
}
#: syntax nodes an expression may contain
EXPR_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call, ast.Name, ast.Load,
    ast.Constant, ast.operator, ast.unaryop, ast.boolop, ast.cmpop,
)
#: operators refused although :data:`EXPR_NODES` admits ``ast.operator``: ``1 << 10**12`` builds a huge integer;
#: ``@`` and ``^`` had passed the parser and failed at evaluation (or, on integers, given a bit pattern)
_REFUSED_OPERATORS = (ast.LShift, ast.RShift, ast.MatMult, ast.BitXor, ast.Invert)
#: how a refused operator is written, for its message
_OPERATOR_SYMBOLS = {ast.LShift: "<<", ast.RShift: ">>", ast.MatMult: "@", ast.BitXor: "^", ast.Invert: "~",
                     ast.BitAnd: "&", ast.BitOr: "|"}
#: operators that join conditions only (``(t > 0) & (t < 1)``: ``and`` fails on arrays); ``3 & 1`` had given 1
_CONDITION_OPERATORS = (ast.BitAnd, ast.BitOr)


def _is_condition(node: ast.AST) -> bool:
    """Whether ``node`` is a comparison, or comparisons joined by ``&`` / ``|``."""
    if isinstance(node, ast.Compare):
        return True
    return isinstance(node, ast.BinOp) and isinstance(node.op, _CONDITION_OPERATORS) and _is_condition(node.left) and _is_condition(node.right)


class _FloatExponent(ast.NodeTransformer):
    """``a ** b`` → ``a ** (b + 0.0)``: the power of Python integers is exact and unbounded (``10**10**10`` had run
    for ever); with a float exponent it is a float power, which overflows (``OverflowError``) at once."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Pow):
            node.right = ast.BinOp(left=node.right, op=ast.Add(), right=ast.Constant(0.0))
        return node


class _NumericConditions(ast.NodeTransformer):
    """A condition used as a number (``(t > 1) + (t > 2)``, ``-(t > 1)``) → ``condition * 1.0``: NumPy's booleans
    add as "or" and refuse ``-``, so with ``t`` a NumPy number (or an array) the count had read 1 and the difference
    had failed; as operands of ``&``, ``|``, ``where`` or ``if`` the conditions stay booleans."""

    @staticmethod
    def _number(node: ast.AST) -> ast.AST:
        return ast.BinOp(left=node, op=ast.Mult(), right=ast.Constant(1.0)) if _is_condition(node) else node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, _CONDITION_OPERATORS):
            node.left, node.right = self._number(node.left), self._number(node.right)
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, (ast.USub, ast.UAdd)):
            node.operand = self._number(node.operand)
        return node


def _real(value: Any) -> bool:
    """Whether ``value`` is a real number or an array of real numbers (what an expression must give)."""
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "biuf"
    return isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))


def _as_numpy(value: Any) -> Any:
    """A Python or NumPy real scalar as a ``numpy.float64`` (arrays and anything else as given)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        return np.float64(value)
    return value


def check_expression(expr: Any, *, variables: Sequence[str], key: str, what: str = "an expression") -> Any:
    """Parse and check ``expr``; return its compiled code.

    The code takes every power in floating point (see the module's docstring).

    Raises
    ------
    ConfigError
        Naming ``key``, for an empty or malformed expression, a forbidden
        construct (a string or other non-number constant, a tuple, a function
        name that is not called, a call of a number or variable), or an unknown
        name.
    """
    if not isinstance(expr, str) or not expr.strip():
        raise ConfigError(key, f"expected a non-empty expression in {', '.join(variables)}, got {expr!r}")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise ConfigError(key, f"cannot parse {expr!r}: {exc.msg}") from None
    except ValueError as exc:  # (null bytes, on some Pythons)
        raise ConfigError(key, f"cannot parse {expr!r}: {exc}") from None
    except (RecursionError, MemoryError):  # too deeply nested for the parser
        raise ConfigError(key, f"cannot parse {expr!r}: it is nested too deeply") from None
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, _REFUSED_OPERATORS):
            raise ConfigError(key, f"{type(node).__name__} is not allowed in {what} ({_OPERATOR_SYMBOLS[type(node)]!r}); only "
                                   "arithmetic (+ - * / // % **), comparisons, & and | of comparisons and calls of the allowed "
                                   "functions are")
        if not isinstance(node, EXPR_NODES):
            raise ConfigError(key, f"{type(node).__name__} is not allowed in {what}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, _CONDITION_OPERATORS) and not _is_condition(node):
            symbol = _OPERATOR_SYMBOLS[type(node.op)]
            raise ConfigError(key, f"{symbol!r} joins comparisons only in {what}, e.g. (t > 0) {symbol} (t < 1); "
                                   f"it is no bit operation on numbers")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):  # str, bytes, ..., None, 1j
            raise ConfigError(key, f"{node.value!r} is not allowed in {what}; only real numbers are")
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and abs(node.value) > sys.float_info.max:
            raise ConfigError(key, f"an integer of {node.value.bit_length()} bits is past the floating-point range")
        if isinstance(node, ast.Name) and node.id not in EXPR_NAMES and node.id not in variables:
            allowed = ", ".join(list(variables) + sorted(EXPR_NAMES))
            raise ConfigError(key, f"unknown name {node.id!r}; allowed names are {allowed}")
        if isinstance(node, ast.Name):
            function = node.id not in variables and callable(EXPR_NAMES[node.id])
            if function and id(node) not in called:
                argument = variables[0] if variables else "x"
                raise ConfigError(key, f"{node.id!r} is a function; call it, e.g. {node.id}({argument})")
            if not function and id(node) in called:
                raise ConfigError(key, f"{node.id!r} is not a function; the functions are "
                                       f"{', '.join(sorted(n for n, v in EXPR_NAMES.items() if callable(v)))}")
        if isinstance(node, ast.Call) and (not isinstance(node.func, ast.Name) or node.keywords):
            raise ConfigError(key, "only plain calls of the allowed functions are permitted")
        if isinstance(node, ast.Call) and node.func.id in EXPR_ARITY and len(node.args) != EXPR_ARITY[node.func.id]:
            count = EXPR_ARITY[node.func.id]
            raise ConfigError(key, f"{node.func.id}() takes {count} argument{'s' if count > 1 else ''}, got {len(node.args)}")
    tree = ast.fix_missing_locations(_FloatExponent().visit(_NumericConditions().visit(tree)))
    try:
        return compile(tree, f"<{key}>", "eval")
    except (RecursionError, MemoryError):
        raise ConfigError(key, f"cannot compile {expr!r}: it is nested too deeply") from None


def compile_expression(expr: str, *, variables: Sequence[str], key: str, what: str = "an expression") -> Callable[..., Any]:
    """A checked expression as a function of its variables (keyword arguments, scalars or arrays).

    A scalar variable is evaluated as a ``numpy.float64`` (as an element of an array would be: ``1/t`` at
    ``t = 0`` is ``inf``, see the module's docstring); non-finite results are returned for the caller to check.
    The function raises :class:`ConfigError` naming ``key`` where the evaluation fails (an overflowing power of
    constants, ``1/0``, a call with the wrong number of arguments) or gives anything but a real number or array.
    """
    code = check_expression(expr, variables=variables, key=key, what=what)

    def f(**values: Any) -> Any:
        env = dict(EXPR_NAMES)
        env.update({name: _as_numpy(value) for name, value in values.items()})
        with np.errstate(all="ignore"):
            try:
                value = eval(code, {"__builtins__": {}}, env)  # noqa: S307 - checked AST, no builtins
            except OverflowError:  # a float power (or a huge integer) past the floating-point range
                raise ConfigError(key, f"cannot evaluate {expr!r}: it overflows the floating-point range") from None
            except Exception as exc:  # noqa: BLE001 - any evaluation failure is bad input
                raise ConfigError(key, f"cannot evaluate {expr!r}: {exc}") from None
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max:
            raise ConfigError(key, f"cannot evaluate {expr!r}: it overflows the floating-point range")
        if not _real(value):  # where(t > 0) gives a tuple, (-1)**0.5 a complex number
            kind = f"an array of {value.dtype}" if isinstance(value, np.ndarray) else f"a {type(value).__name__}"
            raise ConfigError(key, f"{expr!r} does not give a real number (it gives {kind})")
        return value

    return f
