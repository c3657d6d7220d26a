r"""The model of MODEL.md §1–2 in one object: dimension, temperature, attention kind, heads.

.. math::

    \dot x_i = \sigma\, P^\perp_{x_i} v_i[\mu](x_i, t),\qquad
    \sigma = +1 \text{ (ascent, default)},\ -1 \text{ (descent)}

The heads may depend on time through a schedule: any object with
``at(t) -> HeadStack`` (see :mod:`meanfield.schedules`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from meanfield.attention import ATTENTION_KINDS, attention_velocity
from meanfield.heads import HeadStack
from meanfield.sphere import project_tangent

__all__ = ["HeadSchedule", "ConstantHeads", "Model", "DIRECTIONS"]

DIRECTIONS = ("ascent", "descent")


class HeadSchedule(Protocol):
    """Heads as a function of time (MODEL.md §6)."""

    def at(self, t: float) -> HeadStack: ...


@dataclass(frozen=True)
class ConstantHeads:
    """The constant schedule: the same heads at every time."""

    stack: HeadStack

    def at(self, t: float) -> HeadStack:  # noqa: ARG002 - constant in time
        return self.stack


@dataclass(frozen=True)
class Model:
    """Everything that defines the vector field, and nothing numerical.

    Parameters
    ----------
    d : int
        Ambient dimension (tokens on :math:`S^{d-1}`).
    beta : float
        Inverse temperature :math:`\\beta\\ge0`.
    attention : {"softmax", "unnormalized", "relu", "pooled"}
    heads : HeadSchedule
        ``heads.at(t)`` gives the :class:`~meanfield.heads.HeadStack` at time ``t``.
    direction : {"ascent", "descent"}
        Sign of the flow: the forward pass ascends the energy (default);
        seed 004's public code descends it.
    backend : {"auto", "blas", "fused", "numba", "numpy"}
        Kernel used by :meth:`velocity` (see :func:`meanfield.attention.attention_velocity`).
    precision : {"float64", "float32"}
        Score/exp arithmetic of the ``blas`` kernel (float32: about twice the
        throughput, relative error ~1e-6).
    """

    d: int
    beta: float
    attention: str
    heads: HeadSchedule
    direction: str = "ascent"
    backend: str = "auto"
    precision: str = "float64"

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"unknown attention kind {self.attention!r}; choose from {ATTENTION_KINDS}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")

    @property
    def sign(self) -> float:
        return 1.0 if self.direction == "ascent" else -1.0

    def ambient_velocity(self, x: np.ndarray, t: float, *, weights: np.ndarray | None = None) -> np.ndarray:
        """:math:`v_i` of MODEL.md §2 at time ``t`` (unprojected, unsigned)."""
        return attention_velocity(x, self.heads.at(t), beta=self.beta, kind=self.attention, weights=weights, backend=self.backend, precision=self.precision)

    def velocity(self, x: np.ndarray, t: float, *, weights: np.ndarray | None = None) -> np.ndarray:
        r"""Token velocity :math:`\sigma P^\perp_x v(x,t)`, shape ``(n, d)``."""
        return self.sign * project_tangent(x, self.ambient_velocity(x, t, weights=weights))
