r"""Interaction energies of Pendharkar (arXiv 2605.04279) for particles and weighted measures.

.. math::

    E_h(\mu) = \frac{1}{2\beta}\iint e^{\beta x^\top B_h y}\,d\mu(x)\,d\mu(y),
    \qquad E_{\mathrm{multi}} = \sum_h E_h ,

for particles :math:`E_h = \frac{1}{2\beta n^2}\sum_{ij} e^{\beta s^h_{ij}}`.  At
:math:`\beta=0` we use the limit of :math:`(E_h - E_h|_{s=0})`, i.e.
:math:`\tfrac12\iint x^\top B_h y`, which generates the same dynamics.  Massucco et al. (arXiv 2605.18870)'s
time-dependent energy is the :math:`\Theta`-average :math:`\sum_h w_h E_h`
(:func:`energy_theta`).

Sums run over row blocks (no ``n × n`` array for large ``n``).
"""
from __future__ import annotations

import numpy as np

from meanfield.heads import HeadStack

__all__ = ["head_energies", "energy_multi", "energy_theta"]

_BLOCK_ELEMENTS = 1 << 18


def head_energies(x: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None) -> np.ndarray:
    r"""Per-head energies :math:`E_h`, shape ``(H,)`` (the energy of Pendharkar, arXiv 2605.04279).

    Parameters
    ----------
    x : (n, d) array
        Tokens (or cell centres).
    heads : HeadStack
    beta : float
    weights : (n,) array, optional
        Masses; default :math:`1/n`.

    Examples
    --------
    >>> import numpy as np
    >>> from meanfield.heads import HeadStack
    >>> x = np.eye(3)
    >>> e = head_energies(x, HeadStack(B=np.eye(3)[None], V=np.eye(3)[None]), beta=1.0)
    >>> bool(np.isclose(e[0], (3 * np.e + 6) / 18))
    True
    """
    x = np.ascontiguousarray(x, dtype=float)
    n = x.shape[0]
    a = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, dtype=float)
    block = max(1, min(n, _BLOCK_ELEMENTS // max(n, 1)))
    out = np.zeros(heads.H)
    xt = np.ascontiguousarray(x.T)
    buf = np.empty(block * n)
    for h in range(heads.H):
        xb = x @ heads.B[h]
        if beta == 0:
            total = 0.5 * float(a @ (xb @ (xt @ a)))
            out[h] = total
            continue
        # shift rows by c_i = max_j beta s_ij to avoid overflow; sum in scaled form
        log_terms = []
        for start in range(0, n, block):
            stop = min(n, start + block)
            z = buf[: (stop - start) * n].reshape(stop - start, n)
            np.matmul(xb[start:stop], xt, out=z)
            z *= beta
            c = z.max(axis=1)
            z -= c[:, None]
            np.exp(z, out=z)
            row = z @ a
            with np.errstate(divide="ignore"):  # empty cells contribute exp(-inf) = 0
                log_terms.append(np.log(row * a[start:stop]) + c)
        logs = np.concatenate(log_terms)
        top = logs.max()
        out[h] = np.exp(top) * np.sum(np.exp(logs - top)) / (2 * beta)
    return out


def energy_multi(x: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None) -> float:
    r""":math:`E_{\mathrm{multi}}=\sum_h E_h` (Thm 11 of arXiv 2605.04279)."""
    return float(np.sum(head_energies(x, heads, beta=beta, weights=weights)))


def energy_theta(x: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None) -> float:
    r"""The energy of Massucco et al. (arXiv 2605.18870), :math:`E(\mu,t)=\int E_\theta(\mu)\,d\Theta_t(\theta)=\sum_h w_h E_h`."""
    return float(heads.w @ head_energies(x, heads, beta=beta, weights=weights))
