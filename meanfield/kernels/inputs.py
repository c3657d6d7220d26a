"""What every attention kernel checks first: the kind, the tokens, their masses, and how rows are blocked."""
from __future__ import annotations

import math

import numpy as np

from meanfield.heads.head import HeadStack

__all__ = ["ATTENTION_KINDS", "MASKS", "NORMALISED_KINDS", "BLOCK_ELEMENTS", "token_masses", "check_tokens", "check_tolerance",
           "as_head_stack", "block_rows", "is_causal", "is_temperature", "masses_near_one"]

#: names of the velocity laws (see :mod:`meanfield.kernels.attention`)
ATTENTION_KINDS: tuple[str, ...] = ("softmax", "unnormalized", "relu", "pooled")
#: attention masks (config ``model.mask``): ``"none"`` (every token sees every token) or ``"causal"``
#: (token :math:`i` attends only to :math:`j\le i` in the order of the state array; Karagodin,
#: Polyanskiy and Rigollet, *Clustering in Causal Attention Masking*, arXiv 2411.04990)
MASKS: tuple[str, ...] = ("none", "causal")
#: the laws that divide by a row's sum of masses (its velocity is undefined where that sum is zero)
NORMALISED_KINDS: tuple[str, ...] = ("softmax", "pooled")
#: largest ``block × n`` score buffer per thread (elements): 4 MiB of float64 (fastest in `meanfield bench`)
BLOCK_ELEMENTS = 1 << 19


def is_temperature(beta: object) -> bool:
    """Whether ``beta`` is an inverse temperature: a finite real number ≥ 0 (a string or a bool is not)."""
    if isinstance(beta, (str, bytes, bool)):
        return False
    try:
        value = float(beta)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return bool(np.isfinite(value) and value >= 0)


def token_masses(n: int, weights: np.ndarray | None, *, positive: bool = False, kind: str | None = None, causal: bool = False) -> np.ndarray:
    r"""Token masses :math:`a_j`: :math:`1/n` by default, else checked (shape ``(n,)``, finite, ≥ 0 or > 0).

    With ``kind`` a normalised law (``"softmax"``, ``"pooled"``), every row's sum of masses must be
    positive, or its velocity is 0/0: the masses must not all be zero, and under the causal mask,
    where token :math:`i` sees only :math:`j \le i`, the first token's mass must be positive.
    """
    if weights is None:
        return np.full(n, 1.0 / n) if n > 0 else np.zeros(0)  # no tokens: no masses (every kernel returns an empty velocity)
    a = np.asarray(weights, dtype=float)
    if a.shape != (n,):
        raise ValueError(f"weights must have shape ({n},), got {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a <= 0 if positive else a < 0):
        raise ValueError(f"weights (token masses) must be finite and {'positive' if positive else 'non-negative'}")
    if kind in NORMALISED_KINDS and n > 0:
        if causal and a[0] == 0.0:
            raise ValueError(f"weights: under the causal mask the first token's mass must be positive ({kind} attention "
                             "normalises each row by the mass it sees, and the first row sees only its own)")
        if not np.any(a > 0.0):
            raise ValueError(f"weights (token masses) are all zero: {kind} attention normalises by their sum")
    return a


def check_tokens(x: np.ndarray, heads: HeadStack, kind: str, *, beta: object = None) -> np.ndarray:
    """``x`` as a contiguous float ``(n, d)`` array matching the heads; ``kind`` must be known; ``beta``, where given, an
    inverse temperature (each kernel's own entry checks it: a string had been a numba TypingError, NaN NaN velocities).

    (NaN tokens are not refused here: a run whose state turns NaN mid-step must reach its finiteness check, which
    keeps its frames and names the time.)"""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; choose from {ATTENTION_KINDS}")
    if beta is not None and not is_temperature(beta):
        raise ValueError(f"beta must be a finite number ≥ 0, got {beta!r}")
    x = np.ascontiguousarray(x, dtype=float)
    if x.ndim != 2 or x.shape[1] != heads.d:
        raise ValueError(f"x must have shape (n, {heads.d}), got {x.shape}")
    return x


def check_tolerance(tolerance: object) -> float:
    """The relative accuracy of the sphere kernels, a number in (0, 1) (NaN had looped for ever in the harmonic
    kernel's truncation, and 2.0 had been taken)."""
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float, np.integer, np.floating)) or not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be a number in (0, 1), got {tolerance!r}")
    return float(tolerance)


def as_head_stack(heads: object) -> HeadStack:
    """A :class:`HeadStack` from itself, a :class:`~meanfield.heads.head.Head` or a list of them (as :class:`meanfield.Model` takes)."""
    from meanfield.heads.head import Head, stack_heads

    if isinstance(heads, HeadStack):
        return heads
    if isinstance(heads, Head):
        return stack_heads([heads])
    if isinstance(heads, (list, tuple)) and all(isinstance(h, Head) for h in heads):
        return stack_heads(list(heads))  # (none: its ValueError, "at least one head is needed")
    raise TypeError(f"heads must be a HeadStack, a Head or a list of Heads, got {type(heads).__name__}")


def block_rows(n: int, block_elements: int | None = None) -> int:
    """Rows per block so that a ``rows × n`` buffer holds at most ``block_elements`` (default :data:`BLOCK_ELEMENTS`)."""
    limit = BLOCK_ELEMENTS if block_elements is None else block_elements
    return int(max(1, min(n, limit // max(n, 1))))


def is_causal(mask: str) -> bool:
    """``True`` for ``mask="causal"``, ``False`` for ``"none"``; any other value is a ``ValueError``."""
    if mask not in MASKS:
        raise ValueError(f"unknown attention mask {mask!r}; choose from {MASKS}")
    return mask == "causal"


def masses_near_one(weights: np.ndarray) -> tuple[np.ndarray, int]:
    r"""``(a / 2^k, k)`` with :math:`2^k` the power of two nearest the masses' total :math:`\sum_j |a_j|`, so the
    returned masses total about 1 (``k = 0`` when the total is zero or not finite).

    A power of two divides exactly, so a kernel that is linear in the masses multiplies its result by :math:`2^k`
    (or adds :math:`k\log 2` to a log row sum) and loses nothing; one that divides by the row's mass, as softmax does,
    needs nothing back.  Masses of total 1e-200 had squared to zero in the harmonic kernel's size checks, and 1e-46
    or 1e37 left float32's range.
    """
    a = np.asarray(weights, dtype=float)
    total = float(np.abs(a).sum())
    exponent = round(math.log2(total)) if 0.0 < total < math.inf else 0
    return (np.ldexp(a, -exponent) if exponent else a), exponent
