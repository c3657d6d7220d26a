"""What every attention kernel checks first: the kind, the tokens, their masses, and how rows are blocked."""
from __future__ import annotations

import math

import numpy as np

from meanfield.checks import real_array
from meanfield.heads.head import HeadStack

__all__ = ["ATTENTION_KINDS", "MASKS", "NORMALISED_KINDS", "BLOCK_ELEMENTS", "MASS_RANGE", "token_masses", "check_tokens",
           "check_tolerance", "TOLERANCE_RANGE", "check_pooled_weights", "as_head_stack", "block_rows", "is_causal", "is_temperature",
           "masses_near_one", "masses_in_range", "scale_back", "check_float32_sums", "float32_sums_bound"]

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
#: the relative accuracies the sphere kernels take (config ``model.tolerance``, :func:`check_tolerance`): below 1e-15 no
#: row's harmonic bound can pass (every row went to the exact local sums, at round-off anyway); above 1e-2 a row may be
#: off by more than a percent
TOLERANCE_RANGE: tuple[float, float] = (1e-15, 1e-2)
#: token masses whose total lies outside [2^-MASS_RANGE, 2^MASS_RANGE] are brought to a total of about 1 before a
#: kernel runs (:func:`masses_in_range`)
MASS_RANGE = 60


def is_temperature(beta: object) -> bool:
    """Whether ``beta`` is an inverse temperature: a finite real number ≥ 0 (a string or a bool, NumPy's too, is not)."""
    if isinstance(beta, (str, bytes, bool, np.bool_)) or (isinstance(beta, np.ndarray) and beta.dtype.kind == "b"):
        return False  # (np.True_ had been taken as β = 1)
    try:
        value = float(beta)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return bool(np.isfinite(value) and value >= 0)


def token_masses(n: int, weights: np.ndarray | None, *, positive: bool = False, kind: str | None = None, causal: bool = False,
                 rescaled: bool = False, precision: str = "float64") -> np.ndarray:
    r"""Token masses :math:`a_j`: :math:`1/n` by default, else checked (shape ``(n,)``, finite, ≥ 0 or > 0).

    With ``kind`` a normalised law (``"softmax"``, ``"pooled"``), every row's sum of masses must be
    positive, or its velocity is 0/0: the masses must not all be zero, and under the causal mask,
    where token :math:`i` sees only :math:`j \le i`, the first token's mass must be positive.

    With ``kind`` given (a kernel's entry), masses whose total passes the largest float are refused, unless the
    caller divides them by a power of two itself (``rescaled``, :func:`masses_in_range`): the kernels' sums had
    been NaN, or finite and wrong (:func:`~meanfield.kernels.attention.attention_velocity` rescales such masses).
    The largest float is that of the kernel's ``precision`` (3.4e38 in float32).
    """
    if weights is None:
        return np.full(n, 1.0 / n) if n > 0 else np.zeros(0)  # no tokens: no masses (every kernel returns an empty velocity)
    a = real_array("weights", weights)  # (complex masses had lost their imaginary parts with a ComplexWarning)
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
    if kind is not None and not rescaled and n > 0:
        with np.errstate(over="ignore"):
            total = float(np.sum(a))
        if not total <= float(np.finfo(precision).max):
            raise ValueError(f"weights (token masses): their total passes the largest {precision} (largest mass "
                             f"{a.max():.3g}, n = {n}); attention_velocity divides such masses by a power of two, or "
                             "divide them by a common factor")
    return a


def float32_sums_bound(a: np.ndarray, heads: HeadStack, x_norm_max: float, *, kind: str) -> float:
    r"""A bound on every sum of the float32 kernels, :math:`\sum_j|a_j|\,\max(1,\max_h\|V_h\|_F)\max(1,\max_j\|x_j\|)`
    (relu: times :math:`\max(1,\max_h\|B_h\|_F)\max(1,\max_j\|x_j\|)^2`, its scores), each term
    :math:`e^{\beta s_{ij}-\sigma_i} \le 1` up to round-off; ``x_norm_max`` is the tokens' largest norm.  May be inf."""

    def frobenius(m: np.ndarray) -> float:
        flat = m.reshape(m.shape[0], -1)
        return math.sqrt(float(np.einsum("hk,hk->h", flat, flat).max()))  # scalar math: a few µs

    radius = max(1.0, float(x_norm_max))
    with np.errstate(over="ignore"):
        bound = float(np.abs(a).sum()) * max(1.0, frobenius(heads.V)) * radius
        if kind == "relu":
            bound *= max(1.0, frobenius(heads.B)) * radius**2
    return bound


def check_float32_sums(a: np.ndarray, x_norm_max: float, heads: HeadStack, kind: str) -> None:
    r"""Refuse masses whose float32 sums may overflow: :func:`float32_sums_bound` must stay below float32's largest
    value (a total of 1e38 with V = 100 I had given inf, relu NaN); ``x_norm_max`` is the tokens' largest norm, which
    the kernels compute anyway.  :func:`~meanfield.kernels.attention.attention_velocity` brings the masses' total near
    1 first."""
    if a.size == 0:
        return
    bound = float32_sums_bound(a, heads, x_norm_max, kind=kind)
    if not bound <= float(np.finfo(np.float32).max):
        raise ValueError(f"weights (token masses): their float32 sums may pass the largest float32 (masses of total "
                         f"{float(np.abs(a).sum()):.3g}, bound {bound:.3g}); attention_velocity divides such masses by a "
                         "power of two, or divide them by a common factor, or use float64")


def check_tokens(x: np.ndarray, heads: HeadStack, kind: str, *, beta: object = None) -> np.ndarray:
    """``x`` as a contiguous float ``(n, d)`` array matching the heads; ``kind`` must be known; ``beta``, where given, an
    inverse temperature (each kernel's own entry checks it: a string had been a numba TypingError, NaN NaN velocities).

    (NaN tokens are not refused here: a run whose state turns NaN mid-step must reach its finiteness check, which
    keeps its frames and names the time.)  Complex, object or string tokens are refused (complex ones had lost their
    imaginary parts with a mere ``ComplexWarning``), and pooled attention with every head weight 0
    (:func:`check_pooled_weights`)."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; choose from {ATTENTION_KINDS}")
    if beta is not None and not is_temperature(beta):
        raise ValueError(f"beta must be a finite number ≥ 0, got {beta!r}")
    check_pooled_weights(heads, kind)
    given = np.asarray(x)
    if given.dtype.kind not in "biuf":
        raise ValueError(f"x (the tokens) must be an array of real numbers, got dtype {given.dtype}")
    x = np.ascontiguousarray(given, dtype=float)
    if x.ndim != 2 or x.shape[1] != heads.d:
        raise ValueError(f"x must have shape (n, {heads.d}), got {x.shape}")
    return x


def check_pooled_weights(heads: HeadStack, kind: str) -> None:
    r"""Refuse pooled attention whose head weights ``w`` are all 0: its velocity divides by :math:`\sum_h w_h(\dots)`,
    0/0 (the direct kernels had returned NaN, or 0, where :func:`~meanfield.kernels.attention.attention_velocity`
    refused it)."""
    if kind == "pooled" and not np.any(heads.w > 0):
        raise ValueError(f"pooled attention weighs the heads by w, and every w is 0: {heads.w.tolist()}")


def check_tolerance(tolerance: object) -> float:
    """The relative accuracy of the sphere kernels, a number in :data:`TOLERANCE_RANGE` (NaN had looped for ever in the
    harmonic kernel's truncation, and 2.0 had been taken; 0.5 and 1e-20 too, where the config refuses them)."""
    low, high = TOLERANCE_RANGE
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float, np.integer, np.floating)) or not low <= tolerance <= high:
        raise ValueError(f"tolerance must be a number in [{low:g}, {high:g}] (as model.tolerance), got {tolerance!r}")
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


def masses_near_one(weights: np.ndarray, *, keep_within: int | None = None) -> tuple[np.ndarray, int]:
    r"""``(a / 2^k, k)`` with :math:`2^k` the power of two nearest the masses' total :math:`\sum_j |a_j|`, so the
    returned masses total about 1 (``k = 0`` when the masses are all zero, or one is not finite).

    A power of two divides exactly, so a kernel that is linear in the masses multiplies its result by :math:`2^k`
    (:func:`scale_back`, or adds :math:`k\log 2` to a log row sum) and loses nothing; one that divides by the row's
    mass, as softmax does, needs nothing back.  Masses of total 1e-200 had squared to zero in the harmonic kernel's
    size checks, and 1e-46 or 1e37 left float32's range.

    The total is taken as :math:`2^e\sum_j |a_j|/2^e` with :math:`2^e` from the largest mass, which cannot overflow:
    finite masses whose sum overflows (37 masses of 1e308) had been left as they were, and every kernel's softmax
    had been NaN.  Where the masses span more than the float range (one of 1e308 beside one of 1e-300), those below
    :math:`2^{k-1074}` become 0.

    Parameters
    ----------
    weights : (n,) array
        Finite masses.
    keep_within : int, optional
        Leave masses whose total lies in :math:`[2^{-r}, 2^r]` as they are (``k = 0``), so that their velocities
        keep their bits (:func:`masses_in_range`).
    """
    a = real_array("weights", weights)  # (called before token_masses checks them: complex ones had been cast)
    size = np.abs(a)
    top = float(size.max()) if size.size else 0.0
    if not 0.0 < top < math.inf:  # all zero, or an inf or NaN mass (the kernels' check of the masses names it)
        return a, 0
    _, e = math.frexp(top)  # top = f 2^e, 1/2 ≤ f < 1: the scaled total lies in [1/2, n]
    log2_total = e + math.log2(float(np.ldexp(size, -e).sum()))
    if keep_within is not None and -keep_within <= log2_total <= keep_within:
        return a, 0
    exponent = round(log2_total)
    return (np.ldexp(a, -exponent) if exponent else a), exponent


def masses_in_range(weights: np.ndarray | None, kind: str) -> tuple[np.ndarray | None, int, int]:
    r"""Masses for the kernels, the power of two ``k`` they were divided by, and the power of two that takes their
    velocity back (:func:`scale_back`): masses whose total leaves :math:`[2^{-60}, 2^{60}]` (:data:`MASS_RANGE`) are
    brought to a total near 1 by :func:`masses_near_one` (in float32 relu's 1e-46 had given v ≡ 0 and softmax's 1e37
    NaN; in float64 the local kernel's softmax was NaN for subnormal masses, the row kernel's wrong, and every kernel's
    NaN for masses whose sum overflows).  Softmax and pooled attention do not depend on the masses' scale (0: nothing
    back); unnormalized and relu are linear in them (``k``).  Masses in the range are left as they are, so their
    velocities keep their bits."""
    if weights is None:
        return None, 0, 0
    a, exponent = masses_near_one(weights, keep_within=MASS_RANGE)
    if not exponent:
        return weights, 0, 0
    return a, exponent, (0 if kind in NORMALISED_KINDS else exponent)


def scale_back(v: np.ndarray, exponent: int) -> np.ndarray:
    r""":math:`2^k v`, exactly where it is finite: a velocity of masses divided by :math:`2^k`
    (:func:`masses_in_range`) taken back.  Where the true velocity leaves the float range (unnormalized or relu
    attention of masses near the largest float), its entries are :math:`\pm\infty`, as float arithmetic gives them
    (with NumPy's overflow warning), not NaN."""
    return np.ldexp(v, exponent) if exponent else v
