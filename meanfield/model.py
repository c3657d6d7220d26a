r"""The model in one object: dimension, temperature, attention kind, heads, direction.

.. math::

    \dot x_i = \sigma\, P^\perp_{x_i} v_i[\mu](x_i, t),\qquad
    \sigma = +1 \text{ (ascent, default)},\ -1 \text{ (descent)}

with :math:`v_i` one of the velocity laws of :mod:`meanfield.kernels.attention`.
The forward pass of a transformer ascends the interaction energy (Geshkovski,
Letrouit, Polyanskiy and Rigollet; Pendharkar, arXiv 2605.04279); the public code
of Massucco et al. (arXiv 2605.18870) descends it.  The heads may depend on time
through a schedule: any object with ``at(t) -> HeadStack`` (see
:mod:`meanfield.heads.schedules`).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from meanfield.errors import MeanfieldWarning
from meanfield.geometry.sphere import project_tangent
from meanfield.heads.head import Head, HeadStack
from meanfield.kernels.attention import ATTENTION_KINDS, BACKENDS, DEFAULT_TOLERANCE, MASKS, TOLERANCE_BACKENDS, attention_velocity
from meanfield.kernels.harmonic import check_harmonic_degree
from meanfield.kernels.inputs import as_head_stack, check_tolerance, is_temperature
from meanfield.kernels.local import SPHERE_KINDS

__all__ = ["HeadSchedule", "ConstantHeads", "Model", "DIRECTIONS", "COMBINES", "SCORE_BOUND_LIMIT", "FLOAT32_SCORE_BOUND_LIMIT", "score_bound_limit", "VALUE_BOUND_LIMIT", "VELOCITY_EXPONENT_LIMIT", "value_bound", "score_bound", "unshifted_velocity_exponent", "EXP_OVERFLOW", "unshifted_exponent", "unshifted_exponents",
           "ScoreOverflowError", "UnshiftedOverflowWarning"]

DIRECTIONS = ("ascent", "descent")
#: how the heads' fields combine (``Model.combine``, config ``model.combine``)
COMBINES = ("sum", "mean")
#: the largest β‖B_h‖_F taken, 2⁵² ≈ 4.5e15: past it the rounding of the scores β⟨x, B_h y⟩ of unit tokens
#: (β‖B_h‖·2⁻⁵³) passes 1/2, so that every attention weight e^(β⟨x, B_h y⟩ − m) is round-off, and the kernels' shifts
#: give way (their rows had been NaN from β‖B_h‖ ≈ 1e19, the local kernel's from 1e20 on a single head, where 1e306
#: had been taken); every kernel is clean to 1e17
SCORE_BOUND_LIMIT = 2.0**52
#: the same limit in float32 (``precision = "float32"``), 2²³ ≈ 8.4e6, where the float32 scores' rounding
#: (β‖B_h‖·2⁻²⁴) passes 1/2 (from β‖B_h‖ ≈ 2e8 a float32 row's shifted exponents had come out above 88: NaN or
#: negative weights)
FLOAT32_SCORE_BOUND_LIMIT = 2.0**23
#: :math:`e^x` overflows float64 above this x (ln 1.8e308)
EXP_OVERFLOW = 709.78
#: the largest ‖V_h‖_F taken: the velocities (at most ‖V_h‖ for unit tokens and normalised attention), the Runge–Kutta
#: stages' sums of them and the squared norms that put a step's tokens back on the sphere stay finite in float64
#: (V = 1e308 had run to NaN after its first frame, 1e299 too; 1e150 runs, warning of its steps)
VALUE_BOUND_LIMIT = 1e150


def value_bound(V: np.ndarray) -> float:
    r""":math:`\max_h\|V_h\|_F` of ``V`` (``(H, d, d)``), computed without overflow (it is inf only past the floats)."""
    top = max((float(np.max(np.abs(v))) for v in np.asarray(V)), default=0.0)
    if top == 0.0 or not math.isfinite(top):
        return top
    return top * max(float(np.linalg.norm(np.asarray(v) / top)) for v in np.asarray(V))


#: the largest exponent of an unnormalized velocity, :math:`\ln` of :data:`VALUE_BOUND_LIMIT` (about 345): past it a
#: step's tokens x + dt·v can no longer be put back on the sphere through their squared norms
VELOCITY_EXPONENT_LIMIT = math.log(VALUE_BOUND_LIMIT)


def unshifted_velocity_exponent(beta: float, B: np.ndarray, V: np.ndarray) -> float:
    r"""The largest exponent :math:`\max_h\bigl(\beta\|B_h\|_2+\ln\max(1,\|V_h\|_F)\bigr)` of the unnormalized
    velocity :math:`\sum_j a_je^{\beta\langle x, B_h y_j\rangle}V_hy_j` where tokens reach a head's top singular
    directions; above :data:`VELOCITY_EXPONENT_LIMIT` the run stops on NaN/Inf there (β = 600 with V = I had, without a
    word: the terms themselves stay below float64's largest up to :data:`EXP_OVERFLOW`)."""
    return max(float(beta) * float(np.linalg.norm(b, 2)) + math.log(max(1.0, float(np.linalg.norm(v))))
               for b, v in zip(np.asarray(B), np.asarray(V)))


def score_bound(beta: float, B: np.ndarray) -> float:
    r""":math:`\beta\max_h\|B_h\|_F \ge \beta\max|\langle x, B_h y\rangle|` for unit tokens, the bound held to
    :data:`SCORE_BOUND_LIMIT` (a run's heads, a phase diagram's largest β).  ``B`` is ``(H, d, d)``."""
    return float(beta) * max(float(np.linalg.norm(b)) for b in np.asarray(B))


def score_bound_limit(precision: str = "float64") -> tuple[float, str]:
    """The largest :func:`score_bound` taken in ``precision``, and how a message writes it (``"2^52 = 4.5e+15"``)."""
    if precision == "float32":
        return FLOAT32_SCORE_BOUND_LIMIT, f"2^23 = {FLOAT32_SCORE_BOUND_LIMIT:.3g} in float32"
    return SCORE_BOUND_LIMIT, f"2^52 = {SCORE_BOUND_LIMIT:.3g}"


def unshifted_exponent(beta: float, B: np.ndarray) -> float:
    r"""The largest exponent :math:`\max_h \beta\|B_h\|_2 = \max_h \max_{|x|=|y|=1} \beta\langle x, B_h y\rangle` of the
    unshifted terms :math:`e^{\beta\langle x, B_h y\rangle}` (unnormalized attention, the JKO energy): above
    :data:`EXP_OVERFLOW` they leave float64 where tokens reach a head's top singular directions.  ``B`` is ``(H, d, d)``."""
    return float(beta) * max(float(np.linalg.norm(b, 2)) for b in np.asarray(B))


def unshifted_exponents(beta: float, B: np.ndarray, V: np.ndarray | None = None, *,
                        above: float = EXP_OVERFLOW) -> np.ndarray:
    r""":func:`unshifted_exponent` at each time of a weight path ``B`` ``(T, H, d, d)``: ``(T,)``; with ``V`` (the same
    shape), :func:`unshifted_velocity_exponent` at each time instead.

    Exact where it may pass ``above``; elsewhere a bound (:math:`\|B_h\|_F` for :math:`\|B_h\|_2`), itself at most
    ``above`` (the spectral norms of a long path of small heads are not computed: the bound answers for them)."""
    B = np.asarray(B, dtype=float)
    with np.errstate(over="ignore"):
        out = float(beta) * np.sqrt(np.einsum("thij,thij->th", B, B))  # (T, H): the Frobenius bounds
        shift = 0.0 if V is None else np.log(np.maximum(1.0, np.linalg.norm(np.asarray(V, dtype=float), axis=(-2, -1))))
        out = out + shift
        near = out > above
        if np.any(near):
            out[near] = float(beta) * np.linalg.norm(B[near], 2, axis=(-2, -1)) + (0.0 if V is None else shift[near])
    return out.max(axis=1) if out.size else np.zeros(B.shape[0])


def score_overflow_message(beta: float, bound: float, precision: str = "float64") -> str:
    """The message of :class:`ScoreOverflowError` for constant heads with :func:`score_bound` ``bound`` (the config's check
    and the Model's say the same)."""
    _, written = score_bound_limit(precision)
    return (f"beta = {beta!r} puts the scores β⟨x, B_h y⟩ past {precision}'s resolution: β‖B_h‖_F = {bound:.3g} (at most "
            f"{written}, where their rounding reaches 1/2 and every attention weight is round-off; at that temperature "
            "the softmax is already an argmax)")


class ScoreOverflowError(ValueError):
    r"""β so large that the attention scores :math:`\beta\langle x, B_h y\rangle` would overflow (see :data:`SCORE_BOUND_LIMIT`)."""


class UnshiftedOverflowWarning(MeanfieldWarning):
    r"""Unnormalized attention whose terms :math:`e^{\beta\langle x, B_h y\rangle}` leave float64 where tokens reach
    the top singular directions of a head (:math:`\beta\|B_h\|_2 > 709.78`): that law takes them unshifted, and its
    velocity is NaN/Inf there."""


class HeadSchedule(Protocol):
    r"""Heads as a function of time (the weights :math:`\theta^{(h)}_t` of Massucco et al., arXiv 2605.18870)."""

    def at(self, t: float) -> HeadStack: ...


@dataclass(frozen=True)
class ConstantHeads:
    """The constant schedule: the same heads at every time."""

    stack: HeadStack

    def at(self, t: float) -> HeadStack:  # noqa: ARG002 - constant in time
        return self.stack


@dataclass(frozen=True)
class Model:
    r"""Everything that defines the vector field, and nothing numerical.

    Parameters
    ----------
    d : int
        Ambient dimension (tokens on :math:`S^{d-1}`).
    beta : float
        Inverse temperature :math:`\beta\ge0`.
    attention : {"softmax", "unnormalized", "relu", "pooled"}
        The velocity law (default softmax).
    heads : HeadSchedule, HeadStack, Head or list of Head
        ``heads.at(t)`` gives the :class:`~meanfield.heads.HeadStack` at time ``t``;
        constant heads may be given directly (default: one identity head).
    direction : {"ascent", "descent"}
        Sign of the flow: the forward pass ascends the energy (default); the
        public code of Massucco et al. (arXiv 2605.18870) descends it.
    backend : {"auto", "blas", "fused", "harmonic", "local", "numba", "numpy"}
        Kernel used by :meth:`velocity` (see :func:`meanfield.kernels.attention.attention_velocity`;
        ``harmonic`` and ``local`` are the fast kernels on :math:`S^2`).  ``harmonic`` with constant heads refuses a
        β whose truncation degree passes :data:`~meanfield.kernels.harmonic.MAX_DEGREE`
        (:class:`~meanfield.kernels.harmonic.HarmonicDegreeError`; ``local`` runs it).
    precision : {"float64", "float32"}
        Score/exp arithmetic of the ``blas`` kernel (float32: about twice the
        throughput, relative error within 1e-6·(1 + β‖B‖₂)); float32 with backend ``"auto"``, ``"blas"`` or
        ``"fused"`` only (a ``ValueError`` here, as the config's).
    tolerance : float
        Relative accuracy per row of the ``harmonic`` and ``local`` kernels, in [1e-15, 1e-2] as
        ``model.tolerance`` (default 1e-12).
    mask : {"none", "causal"}
        Attention mask: ``"causal"`` lets token :math:`i` attend only to the tokens
        :math:`j\le i` in the order of the state array (Karagodin, Polyanskiy and Rigollet,
        *Clustering in Causal Attention Masking*, arXiv 2411.04990; the flow is then no
        gradient flow); default ``"none"``.
    combine : {"sum", "mean"}
        How the heads' fields combine (softmax, unnormalized, relu): their sum
        (default), or their mean,

        .. math::

            v_i = \frac1H\sum_{h=1}^H v^h_i,

        the velocity of the public code of Massucco et al., *Transformers as
        time-dependent gradient flows* (arXiv 2605.18870).  ``pooled`` already
        normalises over the heads and takes ``"sum"`` only.

    Examples
    --------
    >>> import meanfield as mf
    >>> model = mf.Model(d=3, beta=4.0, heads=mf.heads.identity(3))
    >>> model.velocity(mf.sample_uniform(8, 3, seed=0), 0.0).shape
    (8, 3)
    """

    d: int
    beta: float
    attention: str = "softmax"
    heads: HeadSchedule | HeadStack | Head | list[Head] | None = None
    direction: str = "ascent"
    backend: str = "auto"
    precision: str = "float64"
    tolerance: float = DEFAULT_TOLERANCE
    combine: str = "sum"
    mask: str = "none"

    def __post_init__(self) -> None:
        if isinstance(self.d, bool) or not isinstance(self.d, (int, np.integer)) or self.d < 2:
            raise ValueError(f"d must be an integer ≥ 2 (tokens on S^(d-1)), got {self.d!r}")
        if not is_temperature(self.beta):
            raise ValueError(f"beta must be a finite number ≥ 0, got {self.beta!r}")
        check_tolerance(self.tolerance)
        if self.precision not in ("float64", "float32"):
            raise ValueError(f"precision must be 'float64' or 'float32', got {self.precision!r}")
        if self.precision == "float32" and self.backend not in ("auto", "blas", "fused"):  # (it had failed at the first
            # velocity call, where the config refuses it)
            raise ValueError(f"precision='float32' is available with backend='fused', 'blas' or 'auto' only, got backend={self.backend!r}")
        if self.mask not in MASKS:
            raise ValueError(f"mask must be one of {MASKS}, got {self.mask!r}")
        if self.combine not in COMBINES:
            raise ValueError(f"combine must be one of {COMBINES}, got {self.combine!r}")
        if self.combine == "mean" and self.attention == "pooled":
            raise ValueError("combine='mean' applies to the softmax, unnormalized and relu laws; pooled attention already normalises over the heads")
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"unknown attention kind {self.attention!r}; choose from {ATTENTION_KINDS}")
        if self.backend != "auto" and self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose from {('auto', *BACKENDS)}")
        if self.backend in TOLERANCE_BACKENDS and self.d != 3:
            raise ValueError(f"backend {self.backend!r} works on S² (d = 3), got d = {self.d}; use 'auto'")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        heads = self.heads
        if heads is None:
            heads = HeadStack(B=np.eye(self.d)[None], V=np.eye(self.d)[None])
        if isinstance(heads, (Head, list, tuple)):
            heads = as_head_stack(heads)
        if isinstance(heads, HeadStack):  # constant heads are checked here (a schedule's, when it is asked for them)
            if heads.d != self.d:  # the later error had blamed the tokens
                raise ValueError(f"the heads act on R^{heads.d} (B and V are {heads.d}×{heads.d}), but d = {self.d}")
            if not (np.all(np.isfinite(heads.B)) and np.all(np.isfinite(heads.V))):
                raise ValueError("the heads' B and V must be finite")
            heads = ConstantHeads(heads)
        if not callable(getattr(heads, "at", None)):
            raise TypeError(f"heads must be a HeadStack, a Head, a list of Heads or a schedule with at(t), got {type(heads).__name__}")
        if isinstance(heads, ConstantHeads):  # (a time-dependent schedule is not bounded here: its heads change with t)
            bound = score_bound(self.beta, heads.at(0.0).B)
            size = value_bound(heads.at(0.0).V)
            if not size <= VALUE_BOUND_LIMIT:
                raise ValueError(f"the heads' values V_h make the velocities overflow: ‖V_h‖_F = {size:.3g} (at most "
                                 f"{VALUE_BOUND_LIMIT:.0e})")
            limit, _ = score_bound_limit(self.precision)
            if self.attention != "relu" and not bound <= limit:  # (ReLU attention takes no β)
                raise ScoreOverflowError(score_overflow_message(self.beta, bound, self.precision))
            if self.backend == "harmonic" and self.attention in SPHERE_KINDS:  # (its time and memory grow like β)
                check_harmonic_degree(heads.at(0.0), self.beta, kind=self.attention, tolerance=self.tolerance)
            if self.attention == "unnormalized":
                top = unshifted_exponent(self.beta, heads.at(0.0).B)
                if top > EXP_OVERFLOW:  # (where a config gave its own note, build_model silences this one)
                    warnings.warn(f"beta = {self.beta!r} with unnormalized attention: its terms e^(β⟨x, B_h y⟩) are taken "
                                  f"unshifted and exceed float64 above β⟨x, B_h y⟩ = 709, here up to β‖B_h‖₂ = {top:.3g}; "
                                  f"the velocity is NaN/Inf where tokens come near a head's top singular directions "
                                  f"(softmax attention shifts its scores and has no such limit)", UnshiftedOverflowWarning,
                                  stacklevel=3)
                elif (speed := unshifted_velocity_exponent(self.beta, heads.at(0.0).B, heads.at(0.0).V)) > VELOCITY_EXPONENT_LIMIT:
                    warnings.warn(f"beta = {self.beta!r} with unnormalized attention: its velocity, up to "
                                  f"e^(β‖B_h‖₂)‖V_h‖_F = e^{speed:.4g}, passes e^{VELOCITY_EXPONENT_LIMIT:.4g}, past which a "
                                  "step's tokens cannot be put back on the sphere: the run stops on NaN/Inf where tokens "
                                  "come near a head's top singular directions (scale V_h or β down)", UnshiftedOverflowWarning,
                                  stacklevel=3)
        object.__setattr__(self, "heads", heads)

    @property
    def sign(self) -> float:
        """+1 for ascent, −1 for descent."""
        return 1.0 if self.direction == "ascent" else -1.0

    def ambient_velocity(self, x: np.ndarray, t: float, *, weights: np.ndarray | None = None,
                         row_logs: np.ndarray | None = None) -> np.ndarray:
        """The velocity law :math:`v_i` at time ``t`` (unprojected, unsigned; divided by H when ``combine="mean"``);
        ``row_logs`` as in :func:`~meanfield.kernels.attention.attention_velocity`."""
        stack = self.heads.at(t)
        v = attention_velocity(
            x, stack, beta=self.beta, kind=self.attention, weights=weights, backend=self.backend, precision=self.precision,
            tolerance=self.tolerance, mask=self.mask, row_logs=row_logs,
        )
        return v / stack.H if self.combine == "mean" else v

    def velocity(self, x: np.ndarray, t: float, *, weights: np.ndarray | None = None, row_logs: np.ndarray | None = None) -> np.ndarray:
        r"""Token velocity :math:`\sigma P^\perp_x v(x,t)`, shape ``(n, d)``; ``row_logs`` (H, n), if given, is filled with
        every head's :math:`\ln\sum_j a_j e^{\beta s^h_{ij}}` where the kernel takes these sums anyway (else left as it is)."""
        return project_tangent(x, self.ambient_velocity(x, t, weights=weights, row_logs=row_logs), scale=self.sign)
