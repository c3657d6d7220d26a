r"""Attention velocity laws :math:`v_i`, for particles and weighted measures.

For tokens :math:`x_j` with masses :math:`a_j` (uniform :math:`1/n` for an
empirical measure, cell masses on a grid) and heads :math:`(B_h, V_h, w_h)`:

.. math::

    \text{softmax:}\quad v_i &= \sum_h \frac{\sum_j a_j e^{\beta s^h_{ij}} V_h x_j}{\sum_j a_j e^{\beta s^h_{ij}}} \\
    \text{unnormalized:}\quad v_i &= \sum_h \sum_j a_j e^{\beta s^h_{ij}} V_h x_j \\
    \text{relu:}\quad v_i &= \sum_h \sum_j a_j \max(s^h_{ij}, 0) V_h x_j \\
    \text{pooled:}\quad v_i &= \frac{\sum_h w_h \sum_j a_j e^{\beta s^h_{ij}} V_h x_j}{\sum_h w_h \sum_j a_j e^{\beta s^h_{ij}}}

with :math:`s^h_{ij}=x_i^\top B_h x_j`.  ``softmax`` is the standard multi-head
attention of Pendharkar (arXiv 2605.04279, Thms 19, 22, 27) and, with one head, of
Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931); ``unnormalized`` is Thm 11 of
arXiv 2605.04279 (an exact gradient flow), ``relu`` its Thm 25 (the score enters
without :math:`\beta`), ``pooled`` the effective-mobility form of Massucco et al.
(arXiv 2605.18870).  The tokens' velocity is :math:`\dot x_i = \pm P^\perp_{x_i} v_i`
(:class:`meanfield.Model`); this module returns the ambient :math:`v_i`.

Implementations, which the tests compare (``backend="auto"``, the default, takes
``"fused"`` for float64 softmax at ``d ≤`` :data:`FUSED_MAX_D` (and pooled on a few hundred tokens) and ``"blas"`` otherwise, and ``"blas"`` at
small ``d`` too where its flash tiles run and pay, :func:`attention_velocity`):

``"fused"`` (float64: softmax and pooled)
    :mod:`meanfield.kernels.fused`: score → exp → accumulate in one numba pass over
    column chunks, with a vectorisable ``exp`` of its own (≤ 1 ulp).
``"blas"``
    :mod:`meanfield.kernels.blas`: row blocks of scores by one GEMM, NumPy's
    ``exp`` in place, one GEMM back, blocks spread over a thread pool.
``"numba"``
    :mod:`meanfield.kernels.rows`: a fused loop, parallel over rows, with
    :math:`O(n\,d)` memory; numba's ``exp`` is scalar, so it is slower for dense attention.
``"numpy"``
    :mod:`meanfield.kernels.reference`: the plain NumPy twin, GEMM → max → exp →
    GEMM in row blocks, one thread.  It is the reference the others are tested against.
``"harmonic"`` (``d = 3``; softmax, unnormalized, pooled)
    :mod:`meanfield.kernels.harmonic`: the plane-wave (Funk–Hecke) expansion of
    :math:`e^{\beta\,u\cdot y}` in spherical harmonics, evaluated by ducc0's
    non-uniform transforms in :math:`O(n + L^2\log L)` per head, to a relative
    ``tolerance`` per row, with an exact local fallback for the rows it cannot certify.
``"local"`` (``d = 3``; same kinds)
    :mod:`meanfield.kernels.local`: exact sums over the caps where the kernel is not
    negligible (k-d tree), fast at large :math:`\beta\|B\|`.

On :math:`S^2` (``d = 3``, float64, unit tokens, an exponential law) ``"auto"`` picks
among ``"harmonic"``, ``"local"`` and the dense kernels by the measured cost models of
:func:`meanfield.kernels.harmonic.choose_sphere_method`: dense up to about a thousand
tokens, harmonic beyond, local where the caps are small (:math:`n\lesssim 45\,\beta\|B\|`).

**Causal mask** (``mask="causal"``, config ``model.mask``): Karagodin, Polyanskiy and
Rigollet, *Clustering in Causal Attention Masking* (arXiv 2411.04990).  Token :math:`i`
attends only to the tokens :math:`j\le i` in the order of the state array,

.. math::

    v_i = \sum_h \frac{\sum_{j\le i} a_j e^{\beta s^h_{ij}} V_h x_j}{\sum_{j\le i} a_j e^{\beta s^h_{ij}}}
    \quad(\text{softmax; the other laws likewise restrict }\textstyle\sum_j\text{ to } j\le i),

so the first token's softmax row is :math:`p_{11}=1` and :math:`v_1=\sum_h V_hx_1`.  The
masses :math:`a_j` are not renormalised (``unnormalized`` and ``relu`` sum
:math:`a_j` over the prefix).  Every backend computes it: the dense kernels restrict their
inner loop to :math:`j\le i` (about half the work), ``harmonic`` sums block prefixes of
its source coefficients, ``local`` lists each block's candidates in index order; ``auto``
compares the causal cost models (:func:`~meanfield.kernels.harmonic.estimate_causal_sphere_seconds`).
The system is no longer a gradient flow (the paper's point): the energy need not be monotone.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from meanfield.heads.head import HeadStack
from meanfield.kernels.blas import velocity_blas
from meanfield.kernels.flash import FLASH_CPU
from meanfield.kernels.fused import FUSED_KINDS, velocity_fused
from meanfield.kernels.fused32 import velocity_fused32
from meanfield.kernels.harmonic import choose_sphere_method, velocity_harmonic
from meanfield.kernels.inputs import (
    ATTENTION_KINDS, BLOCK_ELEMENTS, MASKS, MASS_RANGE, as_head_stack, block_rows, check_pooled_weights, check_tokens, check_tolerance,
    is_causal, is_temperature, masses_in_range, scale_back, token_masses,
)
from meanfield.kernels.reference import velocity_numpy
from meanfield.kernels.local import SPHERE_KINDS, SPHERE_TOLERANCE, velocity_local
from meanfield.kernels.rows import velocity_numba

__all__ = [
    "ATTENTION_KINDS",
    "MASKS",
    "BACKENDS",
    "FUSED_MAX_D",
    "FLASH_SMALL_D_MIN_PAIRS",
    "BLOCK_ELEMENTS",
    "MASS_RANGE",
    "attention_velocity",
    "velocity_numpy",
    "velocity_blas",
    "velocity_numba",
    "velocity_fused",
    "velocity_harmonic",
    "velocity_local",
    "SPHERE_DENSE_MAX_N",
    "DEFAULT_TOLERANCE",
    "token_masses",
    "check_tokens",
    "block_rows",
]


def _velocity_fused(
    x: np.ndarray, heads: HeadStack, *, beta: float, kind: str = "softmax", weights: np.ndarray | None = None,
    mask: str = "none", row_logs: np.ndarray | None = None,
) -> np.ndarray:
    """The fused small-``d`` kernel of :mod:`meanfield.kernels.fused` (float64: softmax and pooled)."""
    if kind not in FUSED_KINDS:
        raise ValueError(f"backend 'fused' computes the {' and '.join(FUSED_KINDS)} laws in float64, got kind={kind!r}; "
                         "use 'blas' (or precision='float32')")
    return velocity_fused(x, heads, beta=beta, kind=kind, weights=weights, mask=mask, row_logs=row_logs)


#: kernels by backend name (``"auto"`` picks one per call, see :func:`attention_velocity`)
BACKENDS: dict[str, Callable[..., np.ndarray]] = {
    "blas": velocity_blas,
    "fused": _velocity_fused,
    "harmonic": velocity_harmonic,
    "local": velocity_local,
    "numba": velocity_numba,
    "numpy": velocity_numpy,
}
#: backends whose result depends on a tolerance (the others are exact to round-off)
TOLERANCE_BACKENDS = ("harmonic", "local")
#: backends that fill ``row_logs`` (float64, no mask): the sums of their velocity, the energy at no cost
ROW_LOG_BACKENDS = ("blas", "fused", "harmonic", "local")
#: relative accuracy per row of the harmonic and local kernels unless asked otherwise
DEFAULT_TOLERANCE = 1e-12
#: up to this many tokens ``"auto"`` keeps the dense kernels on the sphere without consulting the
#: cost models (they pick dense there anyway, measured: 1–8 ms)
SPHERE_DENSE_MAX_N = 1024
#: largest dimension for which ``"auto"`` uses the fused softmax kernel (it loses to BLAS above)
FUSED_MAX_D = 8
#: ... and where the BLAS kernel runs its flash tiles (AVX-512), from this many pairs n² H on it takes them instead
FLASH_SMALL_D_MIN_PAIRS = 1 << 18
#: the fused float32 kernel's speed over the float64 one's at d = 3 (measured 3.4–3.7 at n = 4096–16384):
#: in float32 ``"auto"`` weighs the sphere kernels (float64) against the dense cost divided by this.  The flash
#: tiles that now run the dense kernel on AVX-512 processors (float64 1.23–1.54× the fused kernel, float32 2.4–3.5×,
#: at n = 2048–8192) are not counted: the harmonic kernel's model is itself pessimistic for uniform tokens (the choice
#: keeps it so for concentrated ones), and with them counted n = 4096 at β = 4 went dense at 2.3× the harmonic time
FUSED32_SPEEDUP = 3.5
#: the BLAS kernel's time over the fused one's at d = 3 where its flash tiles do not run (float64 pooled and
#: unnormalized, the causal mask, a processor without AVX-512): measured 1.66–2.02 (blas pooled, unnormalized and
#: softmax against fused softmax, n = 4096 and 8192, H = 1 and 3, one random head, best of 5 alternating calls on
#: 2 loaded cores).  ``"auto"`` had priced that kernel as the fused one on the sphere: pooled at n = 8192, β = 16 went
#: dense at 2× the local kernel's time
BLAS_SPHERE_SLOWDOWN = 1.8


#: up to this many tokens, with n·d ≤ :data:`ROWS_MAX_ND`, ``"auto"`` runs the float64 pooled, unnormalized and relu laws
#: on the numba row kernel (:mod:`meanfield.kernels.rows`) instead of BLAS, whose fixed cost per head and call (operand
#: buffers, row blocks, underflow checks: about 0.3-0.6 ms) outweighs the products there.  BLAS over rows, measured
#: (best of 5, pooled and unnormalized, H = 1, 4, 16, random heads, 2 loaded cores): 1.3-20 at d = 3 and n = 8-48 (42 at
#: n = 8, H = 16), 0.75-2 at n = 64; 1.5-12 at d = 16 and n ≤ 32, 0.7-1.4 at n = 64; 1.5-4 at d = 64 and n = 8,
#: 0.6-1.6 at n = 16; over the 48 cases the rule takes, 1.25-42, median 4.2.  The kernel takes no row sums: a call that asks for ``row_logs`` keeps BLAS, or the fused kernel for pooled (relu excepted: no
#: kernel takes its sums)
ROWS_MAX_N = 48
ROWS_MAX_ND = 512
#: up to this many tokens (above :data:`ROWS_MAX_N`, ``d ≤`` :data:`FUSED_MAX_D`) ``"auto"`` runs the float64 pooled law on
#: the fused kernel (one pass per head, :func:`meanfield.kernels.fused.velocity_fused`) instead of BLAS: BLAS over fused
#: 1.06-1.95 (median 1.36) at n = 64-384, d = 3 and 8, H = 1, 2, 4, symmetric and general heads (best of 5 alternating
#: rounds, 2 cores with other jobs); from n = 512 on they are even (0.64-1.35, BLAS's symmetric tiles halving its work)
FUSED_POOLED_MAX_N = 384


def attention_velocity(
    x: np.ndarray,
    heads: HeadStack,
    *,
    beta: float,
    kind: str = "softmax",
    weights: np.ndarray | None = None,
    backend: str = "auto",
    precision: str = "float64",
    tolerance: float = DEFAULT_TOLERANCE,
    mask: str = "none",
    row_logs: np.ndarray | None = None,
) -> np.ndarray:
    r"""Ambient attention velocity :math:`v_i` (the velocity laws of the module docstring).

    Parameters
    ----------
    x : (n, d) array
        Tokens on :math:`S^{d-1}`.
    heads : HeadStack
        Score matrices ``B`` (H, d, d), values ``V`` (H, d, d), head weights ``w`` (H,).
    beta : float
        Inverse temperature :math:`\beta\ge 0`.
    kind : {"softmax", "unnormalized", "relu", "pooled"}
    weights : (n,) array, optional
        Masses :math:`a_j` of the tokens (default :math:`1/n`): finite and ≥ 0, of any scale (a total outside
        :math:`[2^{-60}, 2^{60}]` is divided by a power of two before the kernel runs,
        :func:`~meanfield.kernels.inputs.masses_in_range`).  Softmax and pooled do not depend on it; the unnormalized
        and relu velocities scale with it, and where they leave the float range their entries are :math:`\pm\infty`.
    backend : {"auto", "blas", "fused", "harmonic", "local", "numba", "numpy"}
        ``"auto"``: on :math:`S^2` with more than :data:`SPHERE_DENSE_MAX_N` unit
        tokens and an exponential law, the fastest of ``"harmonic"``,
        ``"local"`` and dense by :func:`~meanfield.kernels.harmonic.choose_sphere_method`
        (against the cost of the dense kernel that would run: the float32 one in float32, the BLAS one for the
        laws other than softmax in float64, :data:`BLAS_SPHERE_SLOWDOWN`; a sphere kernel that wins runs in float64);
        otherwise the fused kernel (:mod:`meanfield.kernels.fused`, one pass with a
        vectorised ``exp``) for float64 softmax, float64 pooled up to :data:`FUSED_POOLED_MAX_N` tokens (1.06–1.95×
        BLAS there) and every float32 law with ``d ≤`` :data:`FUSED_MAX_D`, else ``"blas"``; on an AVX-512 processor ``"blas"`` also at
        ``d ≤`` :data:`FUSED_MAX_D` from :data:`FLASH_SMALL_D_MIN_PAIRS` pairs n²H, without a mask and for
        the exponential laws (its flash tiles: at d = 3, 1.2–1.5× the fused kernel in float64 and 1.0–1.2× in
        float32 from n = 2048, 1.1–1.2× and 1.0–1.1× at n = 600–1024); ``"numba"`` for the float64 laws other than
        softmax on up to :data:`ROWS_MAX_N` tokens with :math:`nd\le` :data:`ROWS_MAX_ND`, without a mask and
        unless ``row_logs`` is asked for, relu excepted (1.25–42× faster than BLAS there, median 4.2).  ``"fused"`` in float32 is the
        fused float32 kernel, for every law.
    precision : {"float64", "float32"}
        Arithmetic of the scores and exponentials: ``float32`` runs the fused float32
        kernel (:mod:`meanfield.kernels.fused32`, every law, float64 sums; ``"auto"``
        takes it for ``d ≤`` :data:`FUSED_MAX_D`) or the ``blas`` kernel's float32
        buffers (:func:`velocity_blas`); error within 1e-6·(1 + β‖B‖₂) of the summed terms' size
        (:math:`\max_i\sum_h\|V_h\|_2T^h_i`, :math:`T=1` for softmax and pooled; see :mod:`meanfield.kernels.fused32`). The sphere kernels are float64 only.
    tolerance : float
        Relative accuracy per row of the ``harmonic`` and ``local`` kernels, in [1e-15, 1e-2]
        (:data:`~meanfield.kernels.inputs.TOLERANCE_RANGE`, as ``model.tolerance``; default :data:`DEFAULT_TOLERANCE`;
        the dense kernels are exact to round-off).
    mask : {"none", "causal"}
        ``"causal"``: token :math:`i` attends only to :math:`j\le i` (Karagodin,
        Polyanskiy and Rigollet, arXiv 2411.04990); every backend supports it.
    row_logs : (H, n) array, optional
        Filled with every head's :math:`\ln\sum_j a_j e^{\beta s^h_{ij}}` per row where the kernel takes these
        sums anyway, in float64 and without a mask (``blas``, ``fused``, ``harmonic``, ``local``; the exponential
        laws; pooled: the heads with :math:`w_h\neq0`, and with ``blas`` and ``fused`` the others too); elsewhere left as it is
        (fill it with NaN to tell).
        The energies of :mod:`meanfield.analysis.energy` follow at no cost:
        :math:`E_h=\frac1{2\beta}\sum_i a_i e^{\ell^h_i}`.

    Returns
    -------
    (n, d) array

    Examples
    --------
    >>> import numpy as np
    >>> from meanfield.heads import HeadStack
    >>> from meanfield.geometry.sphere import sample_uniform
    >>> x = sample_uniform(64, 3, seed=1)
    >>> heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
    >>> attention_velocity(x, heads, beta=4.0).shape
    (64, 3)
    """
    is_causal(mask)  # an unknown mask is a ValueError before any work
    if np.ndim(x) != 2:  # (None had been an IndexError of its shape)
        raise ValueError(f"x (the tokens) must be an (n, d) array, got {type(x).__name__} of {np.ndim(x)} dimensions")
    if not is_temperature(beta):
        raise ValueError(f"beta must be a finite number ≥ 0, got {beta!r}")  # NaN or inf had given NaN velocities silently
    heads = as_head_stack(heads)  # a Head had failed on heads.H
    check_tolerance(tolerance)
    check_pooled_weights(heads, kind)  # (every kernel's check_tokens too; here before any choice of kernel)
    if backend in TOLERANCE_BACKENDS:
        x = _float32_tokens_on_the_sphere(x, heads, kind)
    if backend == "auto":
        dense = _dense_backend(heads, kind, precision, n=np.shape(x)[0], mask=mask, row_logs=row_logs is not None)
        # float32 tokens are normalised for the sphere kernels only: a dense kernel takes them as given, the same bits as
        # when named (they had been normalised at every n, and auto differed from "fused" by their rounding, 1e-8)
        on_sphere = _float32_tokens_on_the_sphere(x, heads, kind) if np.shape(x)[0] > SPHERE_DENSE_MAX_N else x
        backend = _sphere_backend(on_sphere, heads, beta, kind, precision, mask, tolerance=tolerance) or dense
        if backend == "dense":
            backend = dense
        elif backend in TOLERANCE_BACKENDS:
            x = on_sphere
            precision = "float64"  # a sphere kernel beats the float32 dense one here, at float64's accuracy
    try:
        kernel = BACKENDS[backend]
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}; choose from {sorted(BACKENDS)}") from None
    if precision not in ("float64", "float32"):
        raise ValueError(f"precision must be 'float64' or 'float32', got {precision!r}")
    if precision == "float32" and backend not in ("fused", "blas"):
        raise ValueError("precision='float32' is available with backend='fused', 'blas' or 'auto' only")
    weights, exponent, back = masses_in_range(weights, kind)
    if precision == "float32":
        if backend == "fused":
            v = velocity_fused32(x, heads, beta=beta, kind=kind, weights=weights, mask=mask)
        else:
            v = velocity_blas(x, heads, beta=beta, kind=kind, weights=weights, precision=precision, mask=mask)
        return scale_back(v, back)
    logs = {"row_logs": row_logs} if row_logs is not None and backend in ROW_LOG_BACKENDS else {}
    shifted = bool(exponent and logs and kind != "relu" and not is_causal(mask))
    if shifted:  # the kernels fill the log sums of the masses divided by 2^k: into a NaN buffer, to tell which heads they filled
        logs = {"row_logs": np.full(np.shape(row_logs), np.nan)}
    if backend in TOLERANCE_BACKENDS:
        v = kernel(x, heads, beta=beta, kind=kind, weights=weights, tolerance=tolerance, mask=mask, **logs)
    else:
        v = kernel(x, heads, beta=beta, kind=kind, weights=weights, mask=mask, **logs)
    if shifted:
        # k ln 2 back on every head a kernel filled (blas fills a pooled head of weight 0 too: it had been left
        # k ln 2 low, its energy off by 2^k, while not NaN); the heads left unfilled stay as the caller gave them
        scratch = logs["row_logs"]
        filled = ~np.isnan(scratch).all(axis=1)
        row_logs[filled] = scratch[filled] + exponent * math.log(2.0)
    return scale_back(v, back)


def _dense_backend(heads: HeadStack, kind: str, precision: str, *, n: int = 0, mask: str = "none",
                   row_logs: bool = False) -> str:
    """The dense kernel ``"auto"`` uses: at small ``d`` the fused one for float64 softmax, float64 pooled up to
    :data:`FUSED_POOLED_MAX_N` tokens and every float32 law, but
    the flash tiles of the BLAS kernel where they run (an AVX-512 processor, no mask, an exponential law) on at least
    :data:`FLASH_SMALL_D_MIN_PAIRS` pairs of tokens and heads; for the other float64 laws on a few tokens
    (:data:`ROWS_MAX_N`, :data:`ROWS_MAX_ND`, no mask) the numba row kernel, unless ``row_logs`` are asked for (it takes
    no row sums; relu excepted, whose sums no kernel takes); else BLAS."""
    rows_kernel = precision == "float64" and kind != "softmax" and not is_causal(mask) and 0 < n <= ROWS_MAX_N
    if rows_kernel and n * heads.d <= ROWS_MAX_ND and not (row_logs and kind != "relu"):
        return "numba"
    small = heads.d <= FUSED_MAX_D and (kind == "softmax" or precision == "float32" or (kind == "pooled" and n <= FUSED_POOLED_MAX_N))
    if small and FLASH_CPU and not is_causal(mask) and kind != "relu" and float(n) * n * heads.H >= FLASH_SMALL_D_MIN_PAIRS:
        return "blas"
    return "fused" if small else "blas"


#: float32 tokens within this of the unit sphere are taken to float64 and normalised for the sphere kernels (to choose
#: one, and where one runs; a dense kernel takes them as given): their rounding (6e-8) is far above
#: :data:`~meanfield.kernels.local.SPHERE_TOLERANCE`, and they had been refused by the harmonic and local kernels, and
#: sent by ``"auto"`` to the dense one (25× slower at n = 20 000)
FLOAT32_SPHERE_TOLERANCE = 1e-6


def _float32_tokens_on_the_sphere(x: np.ndarray, heads: HeadStack, kind: str) -> np.ndarray:
    r"""``x`` in float64 and normalised where it is float32 tokens on :math:`S^2` to their rounding (the velocity then
    differs from that of the float32 values by about their rounding times :math:`\beta\|B\|`); else ``x``."""
    x = np.asarray(x)
    if x.dtype != np.float32 or heads.d != 3 or kind not in SPHERE_KINDS or x.ndim != 2 or not x.size:
        return x
    wide = x.astype(float)
    norms = np.sqrt(np.einsum("ij,ij->i", wide, wide))
    if not float(np.max(np.abs(norms - 1.0))) <= FLOAT32_SPHERE_TOLERANCE:
        return x
    return wide / norms[:, None]


def _sphere_backend(x: np.ndarray, heads: HeadStack, beta: float, kind: str, precision: str, mask: str = "none", *,
                    tolerance: float = DEFAULT_TOLERANCE) -> str | None:
    """``"harmonic"``, ``"local"`` or ``"dense"`` where the sphere kernels apply, else ``None``."""
    x = np.asarray(x)
    if heads.d != 3 or kind not in SPHERE_KINDS or x.ndim != 2 or x.shape[0] <= SPHERE_DENSE_MAX_N:
        return None
    if not np.isfinite(beta) or beta < 0:
        return None
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    if not float(np.max(np.abs(norms - 1.0))) <= SPHERE_TOLERANCE:
        return None
    speedup = _dense_sphere_speedup(heads, kind, precision, n=x.shape[0], mask=mask)
    return choose_sphere_method(x.shape[0], float(beta), heads, mask=mask, dense_speedup=speedup, tolerance=tolerance)


def _dense_sphere_speedup(heads: HeadStack, kind: str, precision: str, *, n: int, mask: str = "none") -> float:
    """The dense kernel's speed over the fused float64 one's, which the sphere cost models price: :data:`FUSED32_SPEEDUP`
    in float32, ``1 /`` :data:`BLAS_SPHERE_SLOWDOWN` where ``"auto"`` runs the BLAS kernel without its flash tiles
    (the laws other than softmax in float64; the tiles run on an AVX-512 processor without a mask), else 1."""
    if precision == "float32":
        return FUSED32_SPEEDUP
    if _dense_backend(heads, kind, precision, n=n, mask=mask) == "blas" and not (FLASH_CPU and not is_causal(mask)):
        return 1.0 / BLAS_SPHERE_SLOWDOWN
    return 1.0
