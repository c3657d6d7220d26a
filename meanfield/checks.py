"""Checks of the arguments of the Python API: each refusal names the argument (NumPy's and Python's own errors had not).

Nothing here imports the rest of the package, so every module may use it.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["real_array", "real_number", "check_int", "check_flag", "check_seed"]


def _shown(value: Any) -> str:
    """``value``'s repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def real_array(name: str, value: Any) -> np.ndarray:
    """``value`` as a float64 array (no copy of one that is already).

    Raises
    ------
    TypeError
        ``name must be real numbers`` for complex numbers (NumPy had dropped their imaginary parts with a mere
        ``ComplexWarning``).
    ValueError
        Naming ``name`` where ``value`` is not numbers (a string, ``None``, a ragged list) or holds an integer beyond
        float64's range.
    """
    try:
        complex_input = np.iscomplexobj(value)
    except (TypeError, ValueError):  # a ragged list: refused just below
        complex_input = False
    if complex_input:
        raise TypeError(f"{name} must be real numbers, got complex ones")
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be an array of real numbers, got {_shown(value)}") from None


def real_number(name: str, value: Any, *, minimum: float | None = None, positive: bool = False) -> float:
    """``value`` as a finite float: an int, a float or a NumPy number, not a bool (an integer beyond int64, such as
    ``10**30``, too: NumPy's ``isfinite`` had refused it with a message naming nothing).

    Raises
    ------
    ValueError
        Naming ``name`` where ``value`` is no real number, not finite, below ``minimum`` or, with ``positive``, not > 0.
    """
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":  # a 0-d array is its number
        value = value.item()
    if isinstance(value, (bool, np.bool_, str, bytes, complex, np.complexfloating)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise ValueError(f"{name} must be a real number, got {_shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float64 (10**400)
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {_shown(value)}")
    if positive and not number > 0:
        raise ValueError(f"{name} must be > 0, got {_shown(value)}")
    if minimum is not None and not number >= minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, got {_shown(value)}")
    return number


def check_int(name: str, value: Any, *, minimum: int) -> int:
    """``value`` as an int, an integer (Python's or NumPy's, not a bool) ≥ ``minimum``: a ValueError naming ``name``
    otherwise."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu":  # a 0-d array is its number
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {_shown(value)}")
    return int(value)


def check_flag(name: str, value: Any) -> bool:
    """``value`` as a bool: ``True`` or ``False`` (NumPy's too), a ValueError naming ``name`` otherwise (a string such
    as ``"False"`` is true to Python, and had switched the option on)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {_shown(value)}")
    return bool(value)


def check_seed(value: Any, name: str = "seed") -> Any:
    """A random seed as NumPy's ``default_rng`` takes it: ``None`` (fresh entropy), an integer ≥ 0, a sequence of
    them, a ``SeedSequence``, a ``BitGenerator`` or a ``Generator`` (NumPy's ``SeedSequence`` errors had named
    nothing; a bool is refused)."""
    if value is None or isinstance(value, (np.random.SeedSequence, np.random.BitGenerator, np.random.Generator)):
        return value
    if isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim == 1):
        return [check_int(f"{name}[{index}]", item, minimum=0) for index, item in enumerate(value)]
    return check_int(name, value, minimum=0)
