r"""Random weight ensembles for the head matrices :math:`Q_h, K_h, V_h`, and their laws.

.. math::

    \text{goe:}\ W=\frac{G+G^\top}{\sqrt{2d}},\quad
    W_{ab}\sim N\!\big(0,\tfrac{1+\delta_{ab}}{d}\big);\qquad
    \text{gaussian:}\ M_{ab}\sim N\!\big(0,\tfrac1d\big);\qquad
    \text{gpt2:}\ M_{ab}\sim N\!\big(0,0.02^2\big)

with :math:`G` a :math:`d\times d` matrix of independent standard normals.

``goe`` is the Gaussian orthogonal ensemble (a Wigner matrix): symmetric, with
off-diagonal variance :math:`1/d` and diagonal variance :math:`2/d`, so that as
:math:`d\to\infty` its eigenvalues fill :math:`[-2,2]` with the semicircle density
:math:`\rho(\lambda)=\sqrt{4-\lambda^2}/(2\pi)` (Wigner's law), and
:math:`\mathbb E\,\lambda_{\max}\to2` (with fluctuations of order :math:`d^{-2/3}`,
Tracy–Widom).  As a head, ``Q = "identity"``, ``K = "goe"``, ``V = "aligned"`` gives the
symmetric value-aligned head :math:`B_h=V_h=W` of the gradient-flow structure of
Pendharkar (*Gradient Flow Structure and Quantitative Dynamics of Multi-Head
Self-Attention*, arXiv 2605.04279) and of Massucco, Del Grande, Carioni, Brune and
Schönlieb (*Multi-Headed Transformer Architectures as Time-dependent Wasserstein
Gradient Flows*, arXiv 2605.18870).

``gaussian`` draws :math:`k\times d` matrices with entries :math:`N(0,1/d)` (the same
law and the same draws as ``"random"``), so ``Q = K = "gaussian"`` makes the score
matrix :math:`B=Q^\top K` a Gaussian product: :math:`\mathbb E B=0`,
:math:`\operatorname{Var}B_{ab}=k/d^2`, and :math:`\mathbb E\operatorname{tr}(B^\top B)=k`.

``gpt2`` is GPT-2's initialisation (Radford et al., 2019; the weights of its
attention projections start :math:`N(0,0.02^2)`), independent of :math:`d`.

Every sampler takes a :class:`numpy.random.Generator`, the number of rows and
:math:`d`, and draws in float64 in a fixed order, so that a seed fixes the matrix.

Examples
--------
>>> import numpy as np
>>> W = draw("goe", np.random.default_rng(0), 200, 200)
>>> bool(np.allclose(W, W.T)), round(float(np.linalg.eigvalsh(W).max()), 1)
(True, 2.0)
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["ENSEMBLES", "Ensemble", "draw", "entry_variance", "semicircle_density", "semicircle_cdf", "GPT2_STD"]

#: standard deviation of GPT-2's initial weights
GPT2_STD = 0.02


def _goe(rng: np.random.Generator, rows: int, d: int) -> np.ndarray:
    if rows != d:
        raise ValueError(f"a GOE matrix is square: d×d = {d}×{d}, asked for {rows} rows")
    G = rng.standard_normal((d, d))
    return (G + G.T) / math.sqrt(2.0 * d)


def _gaussian(rng: np.random.Generator, rows: int, d: int) -> np.ndarray:
    return rng.standard_normal((rows, d)) / np.sqrt(d)


def _gpt2(rng: np.random.Generator, rows: int, d: int) -> np.ndarray:
    return GPT2_STD * rng.standard_normal((rows, d))


@dataclass(frozen=True)
class Ensemble:
    """One random-matrix law: its sampler, whether it is square and symmetric, and its entry variances."""

    name: str
    sample: Callable[[np.random.Generator, int, int], np.ndarray]
    symmetric: bool
    law: str


#: the random-matrix laws by config name (``Q``, ``K``, ``V`` = one of these strings)
ENSEMBLES: dict[str, Ensemble] = {
    "goe": Ensemble("goe", _goe, True, "symmetric (G + Gᵀ)/√(2d): off-diagonal N(0, 1/d), diagonal N(0, 2/d); spectrum → [−2, 2]"),
    "gaussian": Ensemble("gaussian", _gaussian, False, "i.i.d. N(0, 1/d) entries, k×d (the draws of 'random')"),
    "gpt2": Ensemble("gpt2", _gpt2, False, "i.i.d. N(0, 0.02²) entries, k×d (GPT-2's initialisation)"),
}


def draw(name: str, rng: np.random.Generator, rows: int, d: int) -> np.ndarray:
    """One ``rows × d`` matrix of the ensemble ``name`` (``goe``: ``rows`` must be ``d``).

    Raises
    ------
    ValueError
        For an unknown name, or a non-square GOE request.
    """
    try:
        ensemble = ENSEMBLES[name]
    except KeyError:
        raise ValueError(f"unknown ensemble {name!r}; choose from {sorted(ENSEMBLES)}") from None
    return ensemble.sample(rng, rows, d)


def entry_variance(name: str, d: int) -> tuple[float, float]:
    r"""``(diagonal, off-diagonal)`` variance of one entry under the law ``name``.

    .. math::

        \text{goe: }(2/d,\,1/d),\qquad \text{gaussian: }(1/d,\,1/d),\qquad \text{gpt2: }(0.02^2,\,0.02^2)
    """
    if name == "goe":
        return 2.0 / d, 1.0 / d
    if name == "gaussian":
        return 1.0 / d, 1.0 / d
    if name == "gpt2":
        return GPT2_STD**2, GPT2_STD**2
    raise ValueError(f"unknown ensemble {name!r}; choose from {sorted(ENSEMBLES)}")


def semicircle_density(x: np.ndarray | float) -> np.ndarray:
    r"""Wigner's semicircle :math:`\rho(\lambda)=\frac{1}{2\pi}\sqrt{(4-\lambda^2)_+}`, the limit spectral law of ``goe``."""
    x = np.asarray(x, dtype=float)
    return np.sqrt(np.clip(4.0 - x * x, 0.0, None)) / (2.0 * math.pi)


def semicircle_cdf(x: np.ndarray | float) -> np.ndarray:
    r"""Distribution function of the semicircle on :math:`[-2,2]`.

    .. math::

        F(\lambda)=\frac12+\frac{\lambda\sqrt{4-\lambda^2}}{4\pi}+\frac{\arcsin(\lambda/2)}{\pi}
    """
    s = np.clip(np.asarray(x, dtype=float), -2.0, 2.0)
    return 0.5 + s * np.sqrt(4.0 - s * s) / (4.0 * math.pi) + np.arcsin(s / 2.0) / math.pi
