r"""Normalisation schemes as speed regulation: the velocity laws of Post-LN, Pre-LN, Peri-LN and nGPT.

Karagodin, Ge, Polyanskiy and Rigollet, *Normalization in Attention Dynamics*
(arXiv 2510.22026), write a token as :math:`x_k = r_k\theta_k` with a direction
:math:`\theta_k\in S^{d-1}` and a radius :math:`r_k>0`, and show that every
normalisation scheme moves the directions along the same field, only at another speed:

.. math::

    \dot\theta_k = s_k\,P^\perp_{\theta_k} A_k,\qquad
    A_k = \sigma\,v_k(\theta_1,\dots,\theta_n; t),\qquad
    P^\perp_\theta u = u-\langle\theta,u\rangle\theta,

where :math:`v_k` is one of the attention laws of :mod:`meanfield.kernels.attention`
evaluated at the *directions* (every scheme normalises the tokens before attention
reads them, or keeps them on the sphere) and :math:`\sigma=\pm1` the model's direction.
Each scheme is the continuous-depth limit of its residual update (LN = the radial
projection :math:`x\mapsto x/\|x\|`):

``"post"`` — :math:`x\leftarrow \mathrm{LN}(x + h\,\mathrm{Attn}(x))`, the sphere model of :class:`meanfield.Model`:

.. math::

    \dot\theta_k = P^\perp_{\theta_k}A_k,\qquad r_k\equiv1;

``"pre"`` — :math:`x\leftarrow x + h\,\mathrm{Attn}(\mathrm{LN}(x))`, i.e. :math:`\dot x_k = A_k`:

.. math::

    \dot r_k=\langle\theta_k,A_k\rangle,\qquad \dot\theta_k=\frac{1}{r_k}P^\perp_{\theta_k}A_k;

``"peri"`` — :math:`x\leftarrow x + h\,\mathrm{LN}(\mathrm{Attn}(\mathrm{LN}(x)))`, i.e. :math:`\dot x_k = A_k/\|A_k\|`:

.. math::

    \dot r_k=\frac{\langle\theta_k,A_k\rangle}{\|A_k\|},\qquad \dot\theta_k=\frac{1}{r_k\|A_k\|}P^\perp_{\theta_k}A_k;

``"ngpt"`` — :math:`x\leftarrow \mathrm{LN}\big(x + h\,\alpha(\mathrm{LN}(\mathrm{Attn}(x))-x)\big)`, a step
:math:`\alpha` along the attention output's direction:

.. math::

    \dot\theta_k=\frac{\alpha}{\|A_k\|}P^\perp_{\theta_k}A_k,\qquad r_k\equiv1;

so the speed factors are :math:`s_k = 1,\ 1/r_k,\ 1/(r_k\|A_k\|),\ \alpha/\|A_k\|`.
The radii start at :math:`r_k(0)=1` (unit initial tokens, as in the authors' public
code, ``nikitus20/simuformer``); nGPT's step :math:`\alpha` defaults to that code's 0.2.
The radial laws are those of :math:`\dot x_k = A_k` (Pre-LN) and :math:`\dot x_k=A_k/\|A_k\|`
(Peri-LN) in polar form; the public code updates the radius by :math:`r_k\sum_i (A_k)_i`
instead, which is not the polar form of its own token update, so this module follows the
equations.  Where :math:`A_k=0` (ReLU attention with no positive score) the normalised output
:math:`A_k/\|A_k\|` is taken as 0 (the limit of LayerNorm's :math:`\varepsilon`).

Examples
--------
>>> import numpy as np
>>> import meanfield as mf
>>> from meanfield.normalization import NormalizedDynamics
>>> dyn = NormalizedDynamics(mf.Model(d=3, beta=1.0), norm="pre")
>>> theta = mf.sample_uniform(5, 3, seed=0)
>>> theta_dot, r_dot = dyn.velocity(theta, np.ones(5), 0.0)
>>> theta_dot.shape, r_dot.shape
((5, 3), (5,))
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from meanfield.geometry.sphere import project_tangent

__all__ = [
    "NORMS",
    "RADIAL_NORMS",
    "DEFAULT_NGPT_ALPHA",
    "NormalizedDynamics",
    "attention_output",
    "normalized_velocity",
    "speed_factor",
    "polar",
    "cartesian",
    "token_directions",
    "check_norm_options",
]

#: the schemes, by ``model.norm`` value
NORMS = ("post", "pre", "peri", "ngpt")
#: the schemes whose tokens have a radius (stored unnormalised, :math:`x_k=r_k\theta_k`)
RADIAL_NORMS = ("pre", "peri")
#: nGPT's step :math:`\alpha` unless told otherwise (the value of the authors' public simulations)
DEFAULT_NGPT_ALPHA = 0.2


def _check_norm(norm: object) -> None:
    if not isinstance(norm, str) or norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")


def _check_alpha(alpha: object, name: str) -> None:
    """nGPT's step: a positive finite real number, not a bool (``True`` had been taken as 1, ``"0.3"`` had failed in NumPy)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)) or not (
        math.isfinite(alpha) and alpha > 0
    ):
        raise ValueError(f"{name} must be a positive finite number (nGPT's step α), got {alpha!r}")


def check_norm_options(*, norm: object, ngpt_alpha: object) -> None:
    """A solver's ``norm`` and ``ngpt_alpha``, checked when the solver is made (as the config checks ``model.norm`` and
    ``model.ngpt_alpha``): a scheme of :data:`NORMS`; a positive finite ``ngpt_alpha``, which only ``norm = "ngpt"`` reads,
    so another value than :data:`DEFAULT_NGPT_ALPHA` with another scheme is refused (it had been ignored without a word).

    Raises
    ------
    ValueError
        Naming ``norm`` or ``ngpt_alpha``.
    """
    _check_norm(norm)
    _check_alpha(ngpt_alpha, "ngpt_alpha")
    if norm != "ngpt" and ngpt_alpha != DEFAULT_NGPT_ALPHA:
        raise ValueError(f"ngpt_alpha applies to norm='ngpt', got ngpt_alpha={ngpt_alpha!r} with norm={norm!r}")


def _unit_and_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(a/‖a‖, 1/‖a‖)`` row-wise, with 0 for both where ``a`` vanishes.

    Each row is first divided by its largest entry, so that no square leaves the floats: ‖a‖² had overflowed
    above ‖a‖ ≈ 1.3e154 (and underflowed below 1e-162), and such a token had been taken for A = 0 and stopped
    (unnormalized attention at β ≈ 360–420 under nGPT or Peri-LN: a completed run in which no token moved).
    """
    top = np.max(np.abs(a), axis=1) if a.size else np.zeros(a.shape[0])
    scaled = np.divide(a, top[:, None], out=np.zeros_like(a), where=top[:, None] > 0)  # largest entry ±1
    length = np.sqrt(np.einsum("ij,ij->i", scaled, scaled))  # in [1, √d] where a ≠ 0
    unit = np.divide(scaled, length[:, None], out=np.zeros_like(a), where=length[:, None] > 0)
    with np.errstate(over="ignore"):  # (1/top of a subnormal row is inf: its speed is past the floats)
        inverse = np.divide(np.divide(1.0, top, out=np.zeros_like(top), where=top > 0), length, out=np.zeros_like(top),
                            where=length > 0)
    return unit, inverse


def attention_output(model: Any, theta: np.ndarray, t: float, *, weights: np.ndarray | None = None) -> np.ndarray:
    r"""The attention output :math:`A_k=\sigma\,v_k(\theta;t)` the schemes regulate, shape ``(n, d)``.

    :math:`v_k` is :meth:`meanfield.Model.ambient_velocity` (every attention kind, backend,
    head schedule and ``combine`` of the model) at the directions ``theta``, and
    :math:`\sigma=\pm1` the model's direction (ascent, descent).
    """
    return model.sign * model.ambient_velocity(theta, t, weights=weights)


def speed_factor(r: np.ndarray, a: np.ndarray, *, norm: str, alpha: float = DEFAULT_NGPT_ALPHA) -> np.ndarray:
    r"""The speed :math:`s_k` of :math:`\dot\theta_k=s_kP^\perp_{\theta_k}A_k`: 1, :math:`1/r_k`, :math:`1/(r_k\|A_k\|)` or :math:`\alpha/\|A_k\|`.

    Parameters
    ----------
    r : (n,) array
        Radii (ignored by ``"post"`` and ``"ngpt"``).
    a : (n, d) array
        Attention outputs :math:`A_k`.
    norm : {"post", "pre", "peri", "ngpt"}
    alpha : float
        nGPT's step.

    Returns
    -------
    (n,) array
        0 where :math:`A_k=0` for the schemes that divide by :math:`\|A_k\|`.
    """
    _check_norm(norm)
    a = np.asarray(a, dtype=float)
    _, inverse = _unit_and_inverse(a)
    r = np.asarray(r, dtype=float)
    if norm == "post":
        return np.ones(a.shape[0])
    if norm == "pre":
        return 1.0 / r
    if norm == "peri":
        return inverse / r
    return alpha * inverse


def normalized_velocity(
    theta: np.ndarray, r: np.ndarray, a: np.ndarray, *, norm: str, alpha: float = DEFAULT_NGPT_ALPHA
) -> tuple[np.ndarray, np.ndarray]:
    r"""The scheme's ODE (module table): :math:`(\dot\theta_k,\dot r_k)` from the attention outputs :math:`A_k`.

    .. math::

        \text{post: } (P^\perp A,\ 0),\quad
        \text{pre: } \big(\tfrac1r P^\perp A,\ \langle\theta,A\rangle\big),\quad
        \text{peri: } \big(\tfrac{1}{r\|A\|}P^\perp A,\ \tfrac{\langle\theta,A\rangle}{\|A\|}\big),\quad
        \text{ngpt: } \big(\tfrac{\alpha}{\|A\|}P^\perp A,\ 0\big)

    Parameters
    ----------
    theta : (n, d) array
        Directions on :math:`S^{d-1}`.
    r : (n,) array
        Radii.
    a : (n, d) array
        Attention outputs :math:`A_k` at ``theta`` (:func:`attention_output`).
    norm : {"post", "pre", "peri", "ngpt"}
    alpha : float
        nGPT's step :math:`\alpha`.

    Returns
    -------
    theta_dot : (n, d) array
    r_dot : (n,) array
        Zero for ``"post"`` and ``"ngpt"``.
    """
    _check_norm(norm)
    theta = np.asarray(theta, dtype=float)
    a = np.asarray(a, dtype=float)
    r = np.asarray(r, dtype=float)
    if norm == "post":  # exactly meanfield.Model.velocity: σ P⊥ v = P⊥(σ v) for σ = ±1
        return project_tangent(theta, a), np.zeros(theta.shape[0])
    if norm == "pre":
        return project_tangent(theta, a) / r[:, None], np.einsum("ij,ij->i", theta, a)
    unit, _ = _unit_and_inverse(a)
    if norm == "peri":
        return project_tangent(theta, unit) / r[:, None], np.einsum("ij,ij->i", theta, unit)
    return alpha * project_tangent(theta, unit), np.zeros(theta.shape[0])


def polar(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Directions and radii of tokens, :math:`x_k\mapsto(\theta_k, r_k) = (x_k/\|x_k\|, \|x_k\|)`."""
    x = np.asarray(x, dtype=float)
    r = np.sqrt(np.einsum("...d,...d->...", x, x))
    return x / r[..., None], r


def cartesian(theta: np.ndarray, r: np.ndarray) -> np.ndarray:
    r"""Tokens :math:`x_k=r_k\theta_k` from directions and radii."""
    return np.asarray(r, dtype=float)[..., None] * np.asarray(theta, dtype=float)


def token_directions(x: np.ndarray, *, tol: float = 1e-9) -> np.ndarray:
    r"""``x`` itself when every token is a unit vector (to ``tol``), else the directions :math:`x/\|x\|`.

    What the summaries and pictures show of the radial tokens of Pre-LN and Peri-LN;
    tokens on the sphere are returned unchanged, bit for bit.
    """
    x = np.asarray(x, dtype=float)
    norms = np.sqrt(np.einsum("...d,...d->...", x, x))
    if x.size == 0 or float(np.max(np.abs(norms - 1.0))) <= tol:
        return x
    return x / norms[..., None]


@dataclass(frozen=True)
class NormalizedDynamics:
    r"""A model and a normalisation scheme: the field :math:`(\dot\theta,\dot r)` of the module table.

    Parameters
    ----------
    model : Model
        Attention kind, heads, β, direction, backend (:class:`meanfield.Model`).
    norm : {"post", "pre", "peri", "ngpt"}
    alpha : float
        nGPT's step :math:`\alpha>0` (default :data:`DEFAULT_NGPT_ALPHA`).
    """

    model: Any
    norm: str = "post"
    alpha: float = DEFAULT_NGPT_ALPHA

    def __post_init__(self) -> None:
        _check_norm(self.norm)
        _check_alpha(self.alpha, "alpha")

    @property
    def radial(self) -> bool:
        """Whether the scheme has a radius (Pre-LN, Peri-LN)."""
        return self.norm in RADIAL_NORMS

    def velocity(
        self, theta: np.ndarray, r: np.ndarray, t: float, *, weights: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        r""":math:`(\dot\theta_k, \dot r_k)` at directions ``theta`` (n, d) and radii ``r`` (n,)."""
        a = attention_output(self.model, theta, t, weights=weights)
        return normalized_velocity(theta, r, a, norm=self.norm, alpha=self.alpha)

    def direction_velocity(self, x: np.ndarray, t: float, *, weights: np.ndarray | None = None) -> np.ndarray:
        r""":math:`\dot\theta_k` of tokens ``x`` (unit for post and ngpt, :math:`r_k\theta_k` for pre and peri)."""
        theta, r = polar(x) if self.radial else (np.asarray(x, dtype=float), np.ones(np.shape(x)[0]))
        return self.velocity(theta, r, t, weights=weights)[0]
