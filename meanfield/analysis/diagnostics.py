r"""Diagnostics of Pendharkar (arXiv 2605.04279) on any particle trajectory: energies, radial shadows, entropy, clusters.

For tokens :math:`x_i\in S^{d-1}` with masses :math:`a_i` (uniform :math:`1/n`),
heads :math:`(B_h,V_h)` and the attention kind of the run, write the head
outputs :math:`f^h_i` (so that :math:`v_i=\sum_h f^h_i`), the
token velocity :math:`\dot x_i=\sigma P^\perp_{x_i}v_i` (:math:`\sigma=\pm1` for
ascent/descent) and

.. math::

    E_h &= \frac{1}{2\beta}\sum_{ij}a_ia_j e^{\beta s^h_{ij}}, \qquad
    \frac{dE_h}{dt} = \frac12\sum_{ij}a_ia_j e^{\beta s^h_{ij}}\dot s^h_{ij},\qquad
    \dot s^h_{ij} = \dot x_i^\top B_h x_j + x_i^\top B_h\dot x_j ,\\
    a^h_i &= \langle f^h_i, x_i\rangle \ (\text{radial shadow}),\qquad
    g^h_i = P^\perp_{x_i} f^h_i = f^h_i - a^h_i x_i ,\\
    \Pi_h &= \sigma\sum_i a_i\Big[\|g^h_i\|^2 + \sum_{h'\ne h}\big(\langle f^h_i,f^{h'}_i\rangle
             - a^h_ia^{h'}_i\big)\Big] = \sum_i a_i\langle\dot x_i, f^h_i\rangle .

The chain-rule rate :math:`dE_h/dt` is exact for every kind (with
time-dependent heads it is the transport part, heads frozen at the frame's
time).  The *split* :math:`\Pi_h` ("head power") into tangential self-power
:math:`\|g^h\|^2`, cross terms :math:`\langle f^h,f^{h'}\rangle` and radial
shadows :math:`a^ha^{h'}` equals :math:`dE_h/dt` in the setting of Pendharkar (arXiv 2605.04279),
Thm 11 and Thms 16–17 (``unnormalized`` kind, symmetric value-aligned heads
:math:`V_h=B_h=B_h^\top`), where :math:`f^h_i=u^h_i=\sum_j a_je^{\beta s^h_{ij}}B_hx_j`;
for every kind :math:`\sum_h\Pi_h=\sum_i a_i\langle\dot x_i,v_i\rangle
=\sigma\sum_i a_i\|\dot x_i\|^2` (:math:`\sigma` times the kinetic term of Thm 11).

Radial dominance (Condition 8 of arXiv 2605.04279) is reported in its per-token form

.. math::

    \sum_{h'\ne h}|a^h_ia^{h'}_i| \le \|P^\perp_{x_i}f^h_i\|^2

(fraction of tokens where it holds, minimum margin) and in its aggregate form
(the exact sign of :math:`dE_h/dt`; the margin :math:`\sigma\,(dE_h/dt)/S_h`,
:math:`S_h=\sum_ia_i\|g^h_i\|^2`, is 1 without interference and negative when
head :math:`h`'s energy moves against the flow).

Attention entropy (Thm 27 of arXiv 2605.04279), with :math:`p^h_{ij}\propto a_je^{\beta s^h_{ij}}`:

.. math::

    \mathcal H^h_i = -\sum_j p^h_{ij}\log p^h_{ij},\qquad
    \frac{d\mathcal H^h_i}{dt} = -\beta^2\,\mathrm{Cov}_{p^h_i}\big(s^h_{i\cdot},\dot s^h_{i\cdot}\big).

The right-hand side is evaluated with the exact :math:`\dot x`; the *residual*
of the identity compares it with a central finite difference of
:math:`\mathcal H^h_i` over the saved frames (a ``fd_points``-point stencil,
weights exact for polynomials of degree ``fd_points - 1`` on the actual, possibly
uneven, frame times) at the stencil's middle frame.  For frames saved every
:math:`\Delta` by a scheme of order :math:`p` it is
:math:`O(\mathrm{d}t^{p}) + O(\Delta^{\text{fd\_points}-1})`, so with ``fd_points = 5`` and
:math:`\Delta=\mathrm{d}t` it shrinks at the integrator's order (up to RK4).
Frames without a full stencil get ``nan``.

Cluster statistics, computed from centred coordinates :math:`y_i=x_i-\bar x`
(the gap :math:`1-\langle x_i,x_j\rangle=\|x_i-x_j\|^2/2` is then resolved far
below :math:`10^{-16}`): the largest pairwise gap and the minimum inner product,
:math:`1-\gamma` with :math:`\gamma` the mean off-diagonal inner product
(:math:`=\sum_i\|y_i\|^2/(n-1)` for unit vectors), and the number of connected
components of the graph :math:`\{\langle x_i,x_j\rangle\ge 1-\mathrm{tol}\}`.

Every pass runs over row blocks of at most :data:`BLOCK_ELEMENTS` score
entries (no :math:`n\times n` array); :func:`frame_diagnostics_dense` is the
dense NumPy twin the tests compare with.

Examples
--------
>>> import numpy as np
>>> from meanfield.heads import HeadStack
>>> from meanfield.geometry.sphere import sample_uniform
>>> heads = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
>>> fr = frame_diagnostics(sample_uniform(32, 3, seed=0), heads, beta=1.0, kind="unnormalized")
>>> bool(abs(fr.scalars["dEdt"] - fr.scalars["kinetic"]) < 1e-12 * fr.scalars["kinetic"])
True
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.special import logsumexp

from meanfield.kernels.inputs import block_rows, check_tokens, token_masses
from meanfield.analysis.energy import energies_from_row_logs, energy_row_logs, head_energies, log_total_energy
from meanfield.heads import HeadStack
from meanfield.model import DIRECTIONS, ConstantHeads

__all__ = [
    "BLOCK_ELEMENTS",
    "FrameDiagnostics",
    "head_outputs",
    "head_outputs_dense",
    "token_velocity",
    "energy_rates",
    "power_split",
    "entropy_and_production",
    "cluster_statistics",
    "count_clusters",
    "fd_weights",
    "gradient_flow_setting",
    "frame_diagnostics",
    "frame_diagnostics_dense",
    "diagnose_trajectory",
    "strided_frames",
    "diagnose_run",
    "series_names",
    "verdicts",
    "Diagnosis",
    "diagnose",
]

#: largest ``rows × n`` block of scores held at once (elements); tests lower it to force blocking
BLOCK_ELEMENTS = 1 << 18


def _block_rows(n: int) -> int:
    return block_rows(n, BLOCK_ELEMENTS)  # this module's block size (tests lower it)


def _masses(n: int, weights: np.ndarray | None) -> np.ndarray:
    # ≥ 0, not all zero: a run continued from a grid frame with empty cells holds tokens of mass 0 (positive masses had
    # been required everywhere for the entropies' log a, and diagnose had failed on such a run with a traceback)
    return token_masses(n, weights, kind="softmax")


def _sign(direction: str) -> float:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    return 1.0 if direction == "ascent" else -1.0


# --------------------------------------------------------------------------- head outputs and velocity


def head_outputs(
    x: np.ndarray, heads: HeadStack, *, beta: float, kind: str, weights: np.ndarray | None = None
) -> np.ndarray:
    r"""Per-head outputs :math:`f^h_i` with :math:`v_i=\sum_h f^h_i` (Pendharkar, arXiv 2605.04279: §3).

    .. math::

        f^h_i = \begin{cases}
        \sum_j a_je^{\beta s^h_{ij}}V_hx_j \big/ \sum_j a_je^{\beta s^h_{ij}} & \text{softmax}\\
        \sum_j a_je^{\beta s^h_{ij}}V_hx_j & \text{unnormalized } (=u^h_i)\\
        \sum_j a_j\max(s^h_{ij},0)V_hx_j & \text{relu}\\
        w_h\sum_j a_je^{\beta s^h_{ij}}V_hx_j \big/ \sum_{h'}w_{h'}\sum_j a_je^{\beta s^{h'}_{ij}} & \text{pooled}
        \end{cases}

    computed over row blocks with the exact row maximum subtracted before ``exp``.

    Parameters
    ----------
    x : (n, d) array
        Tokens.
    heads : HeadStack
    beta : float
    kind : {"softmax", "unnormalized", "relu", "pooled"}
    weights : (n,) array, optional
        Token masses :math:`a_j\ge0`, not all zero (default :math:`1/n`).

    Returns
    -------
    (H, n, d) array
    """
    x = check_tokens(x, heads, kind)
    n, d = x.shape
    a = _masses(n, weights)
    H = heads.H
    out = np.empty((H, n, d))
    xt = np.ascontiguousarray(x.T)
    xb = [x @ heads.B[h] for h in range(H)]  # row i: x_i^T B_h
    values = [a[:, None] * (x @ heads.V[h].T) for h in range(H)]  # row j: a_j V_h x_j
    block = _block_rows(n)
    for start in range(0, n, block):
        rows = slice(start, min(n, start + block))
        nums: list[np.ndarray] = []
        dens: list[np.ndarray] = []
        shifts: list[np.ndarray] = []
        for h in range(H):
            z = xb[h][rows] @ xt  # scores s_ij
            if kind == "relu":
                np.maximum(z, 0.0, out=z)
                out[h, rows] = z @ values[h]
                continue
            z *= beta
            m = z.max(axis=1)
            z -= m[:, None]
            np.exp(z, out=z)
            num = z @ values[h]
            if kind == "unnormalized":
                out[h, rows] = num * np.exp(m)[:, None]
            elif kind == "softmax":
                out[h, rows] = num / (z @ a)[:, None]
            else:
                nums.append(num)
                dens.append(z @ a)
                shifts.append(m)
        if kind == "pooled":
            top = np.max(np.stack(shifts), axis=0)
            scale = [heads.w[h] * np.exp(shifts[h] - top) for h in range(H)]
            total = sum(scale[h] * dens[h] for h in range(H))
            for h in range(H):
                out[h, rows] = (scale[h] / total)[:, None] * nums[h]
    return out


def head_outputs_dense(
    x: np.ndarray, heads: HeadStack, *, beta: float, kind: str, weights: np.ndarray | None = None
) -> np.ndarray:
    r"""Dense NumPy twin of :func:`head_outputs` (full :math:`n\times n` kernels; for tests and small ``n``)."""
    x = check_tokens(x, heads, kind)
    n = x.shape[0]
    a = _masses(n, weights)
    H = heads.H
    S = np.stack([x @ heads.B[h] @ x.T for h in range(H)])  # (H, n, n)
    if kind == "relu":
        K = np.maximum(S, 0.0) * a
    else:
        with np.errstate(divide="ignore"):  # a token of mass 0: log a = -inf, a column of zeros in every kernel
            loga = np.log(a)
        logits = beta * S + loga
        if kind == "unnormalized":
            K = np.exp(logits)
        elif kind == "softmax":
            K = np.exp(logits - logits.max(axis=2, keepdims=True))
            K /= K.sum(axis=2, keepdims=True)
        else:
            wlog = logits + np.log(heads.w)[:, None, None]
            top = wlog.max(axis=(0, 2), keepdims=True)
            K = np.exp(wlog - top)
            K /= K.sum(axis=(0, 2), keepdims=True)
    return np.stack([K[h] @ x @ heads.V[h].T for h in range(H)])


def token_velocity(f: np.ndarray, x: np.ndarray, *, direction: str = "ascent") -> np.ndarray:
    r"""Token velocity :math:`\dot x_i=\sigma P^\perp_{x_i}\sum_h f^h_i` from head outputs ``f`` (H, n, d)."""
    v = f.sum(axis=0)
    radial = np.einsum("nd,nd->n", v, x)
    return _sign(direction) * (v - radial[:, None] * x)


# --------------------------------------------------------------------------- energies: chain rule


def energy_rates(
    x: np.ndarray, xdot: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None
) -> np.ndarray:
    r"""Exact per-head energy rates by the chain rule (Pendharkar, arXiv 2605.04279).

    .. math::

        \frac{dE_h}{dt} = \frac12\sum_{ij}a_ia_je^{\beta s^h_{ij}}
        \big(\dot x_i^\top B_hx_j + x_i^\top B_h\dot x_j\big),

    valid for any velocity ``xdot`` (any attention kind, any heads); at
    :math:`\beta=0` it is the rate of the limit energy :math:`\frac12\sum a_ia_js_{ij}`.
    Row blocks are summed with a running common scale, so the result overflows
    only if it does not fit in a float.

    Parameters
    ----------
    x, xdot : (n, d) arrays
        Tokens and their velocities.
    heads : HeadStack
    beta : float
    weights : (n,) array, optional

    Returns
    -------
    (H,) array
    """
    x = np.ascontiguousarray(x, dtype=float)
    xdot = np.ascontiguousarray(xdot, dtype=float)
    n = x.shape[0]
    a = _masses(n, weights)
    xt, xdt = np.ascontiguousarray(x.T), np.ascontiguousarray(xdot.T)
    block = _block_rows(n)
    out = np.empty(heads.H)
    for h in range(heads.H):
        xb, xdb = x @ heads.B[h], xdot @ heads.B[h]
        acc, scale = 0.0, -math.inf
        for start in range(0, n, block):
            rows = slice(start, min(n, start + block))
            z = xb[rows] @ xt
            z *= beta
            m = z.max(axis=1)
            z -= m[:, None]
            np.exp(z, out=z)
            z *= a
            sdot = xdb[rows] @ xt + xb[rows] @ xdt
            row = np.einsum("ij,ij->i", z, sdot) * a[rows]
            top = float(m.max())
            part = float(row @ np.exp(m - top))
            if top > scale:
                acc = acc * math.exp(scale - top) + part if scale > -math.inf else part
                scale = top
            else:
                acc += part * math.exp(top - scale)
        out[h] = _times_exp(0.5 * acc, scale)
    return out


def _times_exp(value: float, scale: float) -> float:
    r""":math:`v\,e^{s}` where it is a float, NaN where it passes the largest one.

    :math:`e^{s}` alone may pass it (:math:`s>709`) while the product does not (tokens near rest): the power of two of
    :math:`e^{s}` then goes into :func:`math.ldexp`. Past the floats the rate is NaN, as the notes say (``0.5 * acc *
    np.exp(scale)`` had been ±inf, its sign the noise of tokens at rest, or NaN where the rate was a float).
    """
    with np.errstate(over="ignore"):
        factor = float(np.exp(scale))
    if math.isfinite(factor):  # (the product as it had been computed)
        result = value * factor
        return result if math.isfinite(result) else math.nan
    if not math.isfinite(scale):
        return math.nan
    k = math.floor(scale / math.log(2.0))
    try:
        result = math.ldexp(value * math.exp(scale - k * math.log(2.0)), k)
    except OverflowError:
        return math.nan
    return result if math.isfinite(result) else math.nan


# --------------------------------------------------------------------------- the split of Thms 11, 16-17


def power_split(
    f: np.ndarray, x: np.ndarray, *, direction: str = "ascent", weights: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    r"""Split of the head powers into self-power, cross terms and radial shadows (Thms 11, 16–17 of arXiv 2605.04279).

    .. math::

        \Pi_h = \sigma\sum_i a_i\Big[\|P^\perp f^h_i\|^2
        + \sum_{h'\ne h}\big(\langle f^h_i,f^{h'}_i\rangle - a^h_ia^{h'}_i\big)\Big],
        \qquad a^h_i=\langle f^h_i,x_i\rangle,

    and radial dominance (Condition 8) per token:
    :math:`m^h_i=\|P^\perp f^h_i\|^2-\sum_{h'\ne h}|a^h_ia^{h'}_i|\ge0`.

    Parameters
    ----------
    f : (H, n, d) array
        Head outputs (:func:`head_outputs`).
    x : (n, d) array
    direction : {"ascent", "descent"}
    weights : (n,) array, optional

    Returns
    -------
    dict
        ``self`` (H,): :math:`\sum_ia_i\|P^\perp f^h_i\|^2`;
        ``cross`` (H, H): :math:`\sum_ia_i\langle f^h_i,f^{h'}_i\rangle`;
        ``shadow`` (H, H): :math:`\sum_ia_ia^h_ia^{h'}_i`;
        ``power`` (H,): :math:`\Pi_h` (tangential parts paired directly, so
        :math:`\sum_h\Pi_h=\sigma\sum_ia_i\|\dot x_i\|^2` to rounding);
        ``dominance_fraction`` (H,): fraction of tokens with :math:`m^h_i\ge0`;
        ``dominance_margin`` (H,): :math:`\min_i m^h_i`;
        ``radial`` (H, n): the shadows :math:`a^h_i`.
    """
    sigma = _sign(direction)
    H, n, _ = f.shape
    a = _masses(n, weights)
    radial = np.einsum("hnd,nd->hn", f, x)
    g = f - radial[:, :, None] * x[None]
    self_tok = np.einsum("hnd,hnd->hn", g, g)
    cross = np.einsum("hnd,gnd,n->hg", f, f, a)
    shadow = np.einsum("hn,gn,n->hg", radial, radial, a)
    tangential = np.einsum("hnd,gnd,n->hg", g, g, a)
    power = sigma * tangential.sum(axis=1)
    absr = np.abs(radial)
    others = absr * (absr.sum(axis=0)[None] - absr)  # sum_{h' != h} |a^h a^h'|
    margin_tok = self_tok - others
    return {
        "self": self_tok @ a,
        "cross": cross,
        "shadow": shadow,
        "power": power,
        "dominance_fraction": np.mean(margin_tok >= 0.0, axis=1),
        "dominance_margin": margin_tok.min(axis=1),
        "radial": radial,
    }


# --------------------------------------------------------------------------- attention entropy (Thm 27)


def entropy_and_production(
    x: np.ndarray, xdot: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    r"""Attention entropies and their exact production rates (Thm 27 of arXiv 2605.04279).

    .. math::

        \mathcal H^h_i = -\sum_jp^h_{ij}\log p^h_{ij},\quad p^h_{ij}=\frac{a_je^{\beta s^h_{ij}}}{\sum_ka_ke^{\beta s^h_{ik}}},
        \qquad \frac{d\mathcal H^h_i}{dt} = -\beta^2\,\mathrm{Cov}_{p^h_i}(s^h_{i\cdot},\dot s^h_{i\cdot})
        - \beta\,\mathrm{Cov}_{p^h_i}(\log a,\dot s^h_{i\cdot}),

    with :math:`\dot s^h_{ij}=\dot x_i^\top B_hx_j+x_i^\top B_h\dot x_j` from the
    given velocity.  For particles (uniform masses) the second term vanishes and this is
    Thm 27 exactly; it is needed for weighted measures (grid cells).  The covariance is
    formed from centred values (two passes).

    Parameters
    ----------
    x, xdot : (n, d) arrays
    heads : HeadStack
    beta : float
    weights : (n,) array, optional
        Token masses :math:`a_j\ge0`, not all zero (default :math:`1/n`); with uniform masses the
        entropy of uniform rows is :math:`\log n`.  A token of mass 0 takes no attention
        (:math:`p^h_{ij}=0`, :math:`0\log0=0`): the sums run over the tokens of positive mass, and its
        own row is computed as any other.

    Returns
    -------
    entropy, rate : (H, n) arrays
    """
    x = np.ascontiguousarray(x, dtype=float)
    xdot = np.ascontiguousarray(xdot, dtype=float)
    n = x.shape[0]
    a = _masses(n, weights)
    seen = a > 0  # a token of mass 0 takes no attention (p = 0, 0 log 0 = 0): the sums run over the others
    loga = np.log(a[seen])
    xt, xdt = np.ascontiguousarray(x[seen].T), np.ascontiguousarray(xdot[seen].T)
    block = _block_rows(n)
    ent = np.empty((heads.H, n))
    rate = np.empty((heads.H, n))
    for h in range(heads.H):
        xb, xdb = x @ heads.B[h], xdot @ heads.B[h]
        for start in range(0, n, block):
            rows = slice(start, min(n, start + block))
            s = xb[rows] @ xt
            sdot = xdb[rows] @ xt + xb[rows] @ xdt
            logit = beta * s + loga
            logit -= logit.max(axis=1, keepdims=True)
            p = np.exp(logit)
            z = p.sum(axis=1, keepdims=True)
            p /= z
            logp = logit - np.log(z)
            ent[h, rows] = -np.einsum("ij,ij->i", p, logp)
            # dH/dt = -β Cov_p(β s + log a, ṡ): the log-mass part vanishes for uniform masses
            u = beta * s + loga
            u -= np.einsum("ij,ij->i", p, u)[:, None]
            sdot -= np.einsum("ij,ij->i", p, sdot)[:, None]
            rate[h, rows] = -beta * np.einsum("ij,ij,ij->i", p, u, sdot)
    return ent, rate


# --------------------------------------------------------------------------- cluster statistics


def cluster_statistics(x: np.ndarray, *, tol: float = 1e-3) -> dict[str, float]:
    r"""Minimum pairwise inner product, :math:`1-\gamma` and the number of clusters (Thms 22, 25 of arXiv 2605.04279).

    .. math::

        1-\langle x_i,x_j\rangle = \tfrac12\|y_i-y_j\|^2,\quad y_i=x_i-\bar x;\qquad
        1-\gamma = \frac{1}{n(n-1)}\sum_{i\ne j}\big(1-\langle x_i,x_j\rangle\big) = \frac{\sum_i\|y_i\|^2}{n-1}.

    Parameters
    ----------
    x : (n, d) array
        Unit vectors.
    tol : float
        Two tokens are linked when :math:`\langle x_i,x_j\rangle\ge1-\mathrm{tol}`.

    Returns
    -------
    dict
        ``min_inner``, ``max_gap`` (:math:`=1-` ``min_inner``, accurate near 1),
        ``one_minus_gamma`` and ``n_clusters`` (connected components).
    """
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    if n < 2:
        return {"min_inner": math.nan, "max_gap": math.nan, "one_minus_gamma": math.nan, "n_clusters": float(n)}
    y = x - x.mean(axis=0)
    q = np.einsum("nd,nd->n", y, y)
    yt = np.ascontiguousarray(y.T)
    block = _block_rows(n)
    worst = 0.0
    for start in range(0, n, block):
        stop = min(n, start + block)
        gap = 0.5 * (q[start:stop, None] + q[None, :]) - y[start:stop] @ yt
        worst = max(worst, float(gap.max()))
    return {
        "min_inner": 1.0 - worst,
        "max_gap": worst,
        "one_minus_gamma": float(q.sum()) / (n - 1),
        "n_clusters": float(count_clusters(x, tol=tol)),
    }


def count_clusters(x: np.ndarray, *, tol: float = 1e-3) -> int:
    r"""Connected components of :math:`\{(i,j):\langle x_i,x_j\rangle\ge1-\mathrm{tol}\}` (Pendharkar, arXiv 2605.04279: clustering).

    For unit vectors the link is :math:`\|x_i-x_j\|\le r=\sqrt{2\,\mathrm{tol}}`.  The
    tokens are first covered greedily by balls of radius :math:`r/2` around leaders
    (a k-d tree): the tokens of one ball are pairwise linked, so a ball lies in one
    component.  Two balls join when their leaders are within :math:`r`, and
    otherwise, for leaders at most :math:`2r` apart in different components, when
    their closest tokens are (one nearest-neighbour query).  The work is
    :math:`O(n\log n)` plus the ball pairs, not :math:`O(n^2)`: a clustered state
    of :math:`10^5` tokens has a handful of leaders.  (:func:`_count_clusters_blocks`,
    the block-by-block dense count, is the reference the tests compare with.)
    """
    if not tol >= 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    if n == 0:
        return 0
    if x.shape[1] > 16:  # k-d trees lose their edge in high dimension: dense blocks
        return _count_clusters_blocks(x, tol=tol)
    from scipy.spatial import cKDTree

    radius = math.sqrt(2.0 * tol)
    tree = cKDTree(x)
    group = np.full(n, -1)
    leaders: list[int] = []
    for i in range(n):
        if group[i] >= 0:
            continue
        members = np.asarray(tree.query_ball_point(x[i], 0.5 * radius), dtype=np.intp)
        members = members[group[members] < 0]
        group[members] = len(leaders)
        group[i] = len(leaders)
        leaders.append(i)
    m = len(leaders)
    parent = np.arange(m)

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    centres = x[leaders]
    near = cKDTree(centres)
    pairs = near.query_pairs(2.0 * radius, output_type="ndarray")
    if pairs.size:
        gaps = np.linalg.norm(centres[pairs[:, 0]] - centres[pairs[:, 1]], axis=1)
        direct = pairs[gaps <= radius]
        if direct.size:  # leaders linked themselves
            graph = coo_matrix((np.ones(len(direct), dtype=np.int8), (direct[:, 0], direct[:, 1])), shape=(m, m))
            parent = connected_components(graph, directed=False)[1].astype(np.intp)
            first = np.full(parent.max() + 1, m)
            np.minimum.at(first, parent, np.arange(m))
            parent = first[parent]  # each ball points at the smallest ball of its component (a root)
            parent[first[first < m]] = first[first < m]
        order = np.argsort(group, kind="stable")
        bounds = np.searchsorted(group[order], np.arange(m + 1))
        trees: dict[int, Any] = {}
        for a, b in pairs[gaps > radius]:
            ra, rb = find(int(a)), find(int(b))
            if ra == rb:
                continue
            pa, pb = order[bounds[a]:bounds[a + 1]], order[bounds[b]:bounds[b + 1]]
            if len(pa) < len(pb):
                a, pa, pb = b, pb, pa
            if a not in trees:
                trees[a] = cKDTree(x[pa])
            if np.isfinite(trees[a].query(x[pb], k=1, distance_upper_bound=radius * (1 + 1e-12))[0]).any():
                parent[max(ra, rb)] = min(ra, rb)
    return int(len({find(a) for a in range(m)}))


def _count_clusters_blocks(x: np.ndarray, *, tol: float) -> int:
    """:func:`count_clusters` by dense blocks of rows: :math:`O(n^2)` work, one block of memory.

    The edges of one block of rows are merged with one edge per token to a
    representative of its current component, and
    :func:`scipy.sparse.csgraph.connected_components` relabels.
    """
    n = x.shape[0]
    y = x - x.mean(axis=0)
    q = np.einsum("nd,nd->n", y, y)
    yt = np.ascontiguousarray(y.T)
    block = _block_rows(n)
    nodes = np.arange(n)
    rep = nodes.copy()  # a node of each token's current component
    for start in range(0, n, block):
        stop = min(n, start + block)
        gap = 0.5 * (q[start:stop, None] + q[None, :]) - y[start:stop] @ yt
        rows, cols = np.nonzero(gap <= tol)
        if rows.size == 0:
            continue
        graph = coo_matrix(
            (np.ones(rows.size + n, dtype=np.int8), (np.concatenate([rows + start, nodes]), np.concatenate([cols, rep]))),
            shape=(n, n),
        )
        count, labels = connected_components(graph, directed=False)
        first = np.full(count, n)
        np.minimum.at(first, labels, nodes)
        rep = first[labels]
    return int(np.unique(rep).size)


# --------------------------------------------------------------------------- one frame


def gradient_flow_setting(heads: HeadStack, kind: str, *, rtol: float = 1e-12) -> bool:
    r"""Whether Pendharkar's (arXiv 2605.04279) Thm 11 applies: ``unnormalized`` kind, :math:`B_h=B_h^\top` and :math:`V_h=B_h` for all heads.

    In that setting :math:`dE_{\mathrm{multi}}/dt=\sum_ia_i\|\dot x_i\|^2` and the
    split :math:`\Pi_h` of :func:`power_split` equals :math:`dE_h/dt`.
    """
    if kind != "unnormalized":
        return False
    for B, V in zip(heads.B, heads.V):
        scale = max(float(np.max(np.abs(B))), 1e-300)
        if np.max(np.abs(B - B.T)) > rtol * scale or np.max(np.abs(V - B)) > rtol * scale:
            return False
    return True


@dataclass(frozen=True)
class FrameDiagnostics:
    """Diagnostics of one frame.

    Attributes
    ----------
    scalars : dict of float
        Named values (see :func:`series_names`).
    entropy, entropy_rate : (H, n) arrays
        :math:`\\mathcal H^h_i` and the right-hand side of Thm 27.
    xdot : (n, d) array
        The token velocity used.
    """

    scalars: dict[str, float]
    entropy: np.ndarray
    entropy_rate: np.ndarray
    xdot: np.ndarray = field(repr=False)


def series_names(H: int) -> list[str]:
    """Names of the series produced for ``H`` heads, in the order :func:`diagnose_trajectory` returns them.

    ``t``; ``energy``, ``energy_h{h}``, ``log_energy`` (:math:`\\ln` ``energy``, a number where the energy passes the
    largest float; NaN for :math:`\\beta\\le0`); ``dEdt``, ``dEdt_h{h}`` (chain rule);
    ``kinetic`` (:math:`\\sum_ia_i\\|\\dot x_i\\|^2`); ``thm11_residual``;
    ``self_power_h{h}``, ``cross_sum_h{h}``, ``shadow_sum_h{h}`` (sums over
    :math:`h'\\ne h`), ``head_power_h{h}``, ``split_residual``;
    ``cross_h{a}_h{b}``, ``shadow_h{a}_h{b}`` (:math:`a<b`); ``dominance_fraction_h{h}``,
    ``dominance_margin_h{h}``, ``aggregate_margin_h{h}``; ``entropy_mean_h{h}``,
    ``entropy_std_h{h}``, ``entropy_min_h{h}``, ``entropy_max_h{h}``,
    ``entropy_rate_h{h}`` (mean over tokens of the Thm 27 right side),
    ``entropy_residual_h{h}``, ``entropy_residual``; ``min_inner``,
    ``max_gap``, ``one_minus_gamma``, ``n_clusters``.
    """
    hs = range(H)
    names = ["t", "energy", *[f"energy_h{h}" for h in hs], "log_energy", "dEdt", *[f"dEdt_h{h}" for h in hs], "kinetic", "thm11_residual"]
    for stem in ("self_power", "cross_sum", "shadow_sum", "head_power"):
        names += [f"{stem}_h{h}" for h in hs]
    names.append("split_residual")
    pairs = [(p, q) for p in hs for q in hs if p < q]
    names += [f"cross_h{p}_h{q}" for p, q in pairs] + [f"shadow_h{p}_h{q}" for p, q in pairs]
    for stem in ("dominance_fraction", "dominance_margin", "aggregate_margin"):
        names += [f"{stem}_h{h}" for h in hs]
    for stem in ("entropy_mean", "entropy_std", "entropy_min", "entropy_max", "entropy_rate", "entropy_residual"):
        names += [f"{stem}_h{h}" for h in hs]
    names += ["entropy_residual", "min_inner", "max_gap", "one_minus_gamma", "n_clusters"]
    return names


def _ratio(num: float, den: float, *, scale: float = 0.0) -> float:
    """``num/den``, or NaN when ``den`` is at the round-off level of ``scale`` (a ratio of noise)."""
    return num / den if den > 1e3 * np.finfo(float).eps * max(scale, 0.0) and den > 0 else math.nan


def _assemble(
    *,
    energies: np.ndarray,
    log_energy: float,
    rates: np.ndarray,
    kinetic: float,
    split: Mapping[str, np.ndarray],
    entropy: np.ndarray,
    entropy_rate: np.ndarray,
    clusters: Mapping[str, float],
    sigma: float,
) -> dict[str, float]:
    H = energies.size
    s: dict[str, float] = {"energy": float(energies.sum())}
    s.update({f"energy_h{h}": float(energies[h]) for h in range(H)})
    s["log_energy"] = float(log_energy)
    s["dEdt"] = float(rates.sum())
    s.update({f"dEdt_h{h}": float(rates[h]) for h in range(H)})
    s["kinetic"] = float(kinetic)
    noise = float(np.max(np.abs(energies))) if energies.size else 0.0  # rates below eps·E are round-off
    # the chain-rule rate and the kinetic term each carry a rounding of about 15 ε·E (measured on an exact gradient flow
    # at rest): below 1e5 ε·E the ratio is that rounding over K (it had read 1.2 % at K = 5e-13, E = 2.5), so NaN there
    s["thm11_residual"] = _ratio(abs(s["dEdt"] - sigma * kinetic), abs(kinetic), scale=100.0 * noise)
    off = ~np.eye(H, dtype=bool)
    for h in range(H):
        s[f"self_power_h{h}"] = float(split["self"][h])
        s[f"cross_sum_h{h}"] = float(split["cross"][h][off[h]].sum())
        s[f"shadow_sum_h{h}"] = float(split["shadow"][h][off[h]].sum())
        s[f"head_power_h{h}"] = float(split["power"][h])
    scale = max(float(np.max(np.abs(rates))), float(np.max(split["self"])))
    s["split_residual"] = _ratio(float(np.max(np.abs(split["power"] - rates))), scale, scale=noise)
    for p in range(H):
        for q in range(p + 1, H):
            s[f"cross_h{p}_h{q}"] = float(split["cross"][p, q])
            s[f"shadow_h{p}_h{q}"] = float(split["shadow"][p, q])
    for h in range(H):
        s[f"dominance_fraction_h{h}"] = float(split["dominance_fraction"][h])
        s[f"dominance_margin_h{h}"] = float(split["dominance_margin"][h])
        s[f"aggregate_margin_h{h}"] = _ratio(sigma * float(rates[h]), float(split["self"][h]), scale=noise)
    for h in range(H):
        s[f"entropy_mean_h{h}"] = float(entropy[h].mean())
        s[f"entropy_std_h{h}"] = float(entropy[h].std())
        s[f"entropy_min_h{h}"] = float(entropy[h].min())
        s[f"entropy_max_h{h}"] = float(entropy[h].max())
        s[f"entropy_rate_h{h}"] = float(entropy_rate[h].mean())
    s.update({k: float(v) for k, v in clusters.items()})
    return s


def frame_diagnostics(
    x: np.ndarray,
    heads: HeadStack,
    *,
    beta: float,
    kind: str,
    direction: str = "ascent",
    weights: np.ndarray | None = None,
    tol: float = 1e-3,
    combine: str = "sum",
) -> FrameDiagnostics:
    r"""All diagnostics of Pendharkar (arXiv 2605.04279) of one frame, blocked over rows (Thms 11, 16–17, 27 of arXiv 2605.04279; Condition 8).

    .. math::

        \frac{dE_h}{dt}=\frac12\sum_{ij}a_ia_je^{\beta s^h_{ij}}\dot s^h_{ij},\quad
        \Pi_h=\sum_ia_i\langle\dot x_i,f^h_i\rangle,\quad
        \frac{d\mathcal H^h_i}{dt}=-\beta^2\mathrm{Cov}_{p^h_i}(s,\dot s).

    Parameters
    ----------
    x : (n, d) array
        Tokens on the sphere.
    heads : HeadStack
    beta : float
    kind : {"softmax", "unnormalized", "relu", "pooled"}
    direction : {"ascent", "descent"}
    weights : (n,) array, optional
        Token masses :math:`a_j\ge0`, not all zero (default :math:`1/n`).
    tol : float
        Cluster tolerance of :func:`count_clusters`.
    combine : {"sum", "mean"}
        How the heads' fields combine (``Model.combine``). With ``"mean"`` the velocity is
        :math:`\frac1H\sum_hf^h_i`, the flow of :math:`\frac1H\sum_hE_h`: every per-head series is then
        the head's share of that flow (:math:`f^h_i/H`, :math:`E_h/H`, :math:`\frac1H dE_h/dt`), so that
        ``energy`` is the mean the energy tracker records and the identities keep their form.

    Returns
    -------
    FrameDiagnostics
        The ``entropy_residual*`` entries are not part of one frame; see
        :func:`diagnose_trajectory`.
    """
    sigma = _sign(direction)
    x = check_tokens(x, heads, kind)
    if combine not in ("sum", "mean"):
        raise ValueError(f"combine must be 'sum' or 'mean', got {combine!r}")
    share = 1.0 / heads.H if combine == "mean" else 1.0
    f = head_outputs(x, heads, beta=beta, kind=kind, weights=weights)
    if share != 1.0:
        f *= share
    xdot = token_velocity(f, x, direction=direction)
    a = _masses(x.shape[0], weights)
    with np.errstate(over="ignore"):
        if beta > 0:  # one score pass for the energies and their log (a number where they pass the floats)
            logs = energy_row_logs(x, heads, beta=beta, weights=a)
            energies = share * energies_from_row_logs(logs, beta=beta, weights=a)
            log_energy = log_total_energy(logs, beta=beta, weights=a, share=share)
        else:
            energies = share * head_energies(x, heads, beta=beta, weights=a)
            log_energy = math.nan
    rates = share * energy_rates(x, xdot, heads, beta=beta, weights=a)
    split = power_split(f, x, direction=direction, weights=a)
    ent, ent_rate = entropy_and_production(x, xdot, heads, beta=beta, weights=a)
    kinetic = float(np.einsum("nd,nd->n", xdot, xdot) @ a)
    scalars = _assemble(
        energies=energies,
        log_energy=log_energy,
        rates=rates,
        kinetic=kinetic,
        split=split,
        entropy=ent,
        entropy_rate=ent_rate,
        clusters=cluster_statistics(x, tol=tol),
        sigma=sigma,
    )
    return FrameDiagnostics(scalars=scalars, entropy=ent, entropy_rate=ent_rate, xdot=xdot)


def frame_diagnostics_dense(
    x: np.ndarray,
    heads: HeadStack,
    *,
    beta: float,
    kind: str,
    direction: str = "ascent",
    weights: np.ndarray | None = None,
    tol: float = 1e-3,
) -> FrameDiagnostics:
    r"""Dense NumPy reference for :func:`frame_diagnostics` (full :math:`n\times n` arrays; small ``n`` only).

    Independent formulas: velocity from :func:`meanfield.kernels.attention.velocity_numpy`,
    energies as explicit double sums, the split token by token, entropies with
    :func:`scipy.special.entr` and covariances with :func:`numpy.cov`, clusters
    from the Gram matrix.
    """
    from scipy.special import entr, softmax

    from meanfield.kernels.reference import velocity_numpy

    sigma = _sign(direction)
    x = check_tokens(x, heads, kind)
    n = x.shape[0]
    a = _masses(n, weights)
    seen = a > 0  # the entropies' columns: tokens of mass 0 take no attention
    H = heads.H
    v = velocity_numpy(x, heads, beta=beta, kind=kind, weights=a)
    xdot = sigma * (v - np.sum(v * x, axis=1, keepdims=True) * x)
    f = head_outputs_dense(x, heads, beta=beta, kind=kind, weights=a)
    aa = np.outer(a, a)
    energies = np.empty(H)
    rates = np.empty(H)
    ent = np.empty((H, n))
    ent_rate = np.empty((H, n))
    for h in range(H):
        B = heads.B[h]
        S = x @ B @ x.T
        Sdot = xdot @ B @ x.T + x @ B @ xdot.T
        K = np.exp(beta * S)
        energies[h] = np.sum(aa * K) / (2 * beta) if beta > 0 else 0.5 * np.sum(aa * S)
        rates[h] = 0.5 * np.sum(aa * K * Sdot)
        P = softmax(beta * S[:, seen] + np.log(a[seen])[None, :], axis=1)  # p = 0 on tokens of mass 0 (0 log 0 = 0)
        ent[h] = entr(P).sum(axis=1)
        for i in range(n):
            cov = np.cov(beta * S[i, seen] + np.log(a[seen]), Sdot[i, seen], aweights=P[i], bias=True)[0, 1]
            ent_rate[h, i] = -beta * cov
    self_power = np.zeros(H)
    cross = np.zeros((H, H))
    shadow = np.zeros((H, H))
    power = np.zeros(H)
    margins = np.zeros((H, n))
    for i in range(n):
        Pt = np.eye(x.shape[1]) - np.outer(x[i], x[i])
        radial = np.array([f[h, i] @ x[i] for h in range(H)])
        tang = [Pt @ f[h, i] for h in range(H)]
        for h in range(H):
            self_power[h] += a[i] * tang[h] @ tang[h]
            power[h] += a[i] * (xdot[i] @ f[h, i])
            margins[h, i] = tang[h] @ tang[h] - sum(abs(radial[h] * radial[g]) for g in range(H) if g != h)
            for g in range(H):
                cross[h, g] += a[i] * f[h, i] @ f[g, i]
                shadow[h, g] += a[i] * radial[h] * radial[g]
    split = {
        "self": self_power,
        "cross": cross,
        "shadow": shadow,
        "power": power,
        "dominance_fraction": np.mean(margins >= 0, axis=1),
        "dominance_margin": margins.min(axis=1),
    }
    gram = x @ x.T
    off = ~np.eye(n, dtype=bool)
    min_inner = float(gram[off].min()) if n > 1 else math.nan
    count, _ = connected_components(gram >= 1.0 - tol, directed=False)
    clusters = {
        "min_inner": min_inner,
        "max_gap": 1.0 - min_inner,
        "one_minus_gamma": float(1.0 - gram[off].mean()) if n > 1 else math.nan,
        "n_clusters": float(count),
    }
    kinetic = float(np.sum(a * np.sum(xdot * xdot, axis=1)))
    log_energy = (float(logsumexp([logsumexp(beta * (x @ B @ x.T), b=aa) for B in heads.B])) - math.log(2 * beta)
                  if beta > 0 else math.nan)
    scalars = _assemble(
        energies=energies,
        log_energy=log_energy,
        rates=rates,
        kinetic=kinetic,
        split=split,
        entropy=ent,
        entropy_rate=ent_rate,
        clusters=clusters,
        sigma=sigma,
    )
    return FrameDiagnostics(scalars=scalars, entropy=ent, entropy_rate=ent_rate, xdot=xdot)


# --------------------------------------------------------------------------- trajectories


def fd_weights(offsets: np.ndarray) -> np.ndarray:
    r"""Finite-difference weights for :math:`f'(0)` on the nodes ``offsets`` (exact for polynomials of degree ``len - 1``).

    .. math::

        \sum_m w_m\,\tau_m^k = \delta_{k1},\qquad k=0,\dots,M-1 .

    Examples
    --------
    >>> np.round(fd_weights(np.array([-2.0, -1.0, 0.0, 1.0, 2.0])) * 12, 12).tolist()
    [1.0, -8.0, 0.0, 8.0, -1.0]
    """
    tau = np.asarray(offsets, dtype=float)
    scale = float(np.max(np.abs(tau)))
    if scale == 0 or np.unique(tau).size != tau.size:
        raise ValueError("finite-difference nodes must be distinct")
    r = tau / scale
    powers = np.arange(tau.size)
    rhs = np.zeros(tau.size)
    rhs[1] = 1.0
    return np.linalg.solve(r[None, :] ** powers[:, None], rhs) / scale


def _stack_at(heads: Any, t: float) -> HeadStack:
    return heads if isinstance(heads, HeadStack) else heads.at(float(t))


def diagnose_trajectory(
    t: np.ndarray,
    x: np.ndarray,
    heads: Any,
    *,
    beta: float,
    kind: str,
    direction: str = "ascent",
    weights: np.ndarray | None = None,
    tol: float = 1e-3,
    fd_points: int = 5,
    combine: str = "sum",
    on_frame: Callable[[], None] | None = None,
) -> dict[str, np.ndarray]:
    r"""Time series of every diagnostic along a saved trajectory (Pendharkar, arXiv 2605.04279).

    .. math::

        r^h_i(t_k) = \sum_{m=-M}^{M} w_m\,\mathcal H^h_i(t_{k+m})
        + \beta^2\,\mathrm{Cov}_{p^h_i}(s,\dot s)\big|_{t_k},\qquad 2M+1 = \texttt{fd\_points},

    is the residual of the entropy identity (``entropy_residual_h{h}`` =
    :math:`\max_i|r^h_i|`); all other series are those of :func:`frame_diagnostics`.

    Parameters
    ----------
    t : (T,) array
        Frame times, increasing.
    x : (T, n, d) array
        Frames.
    heads : HeadStack or schedule
        Constant heads, or any object with ``at(t) -> HeadStack``.
    beta : float
    kind : {"softmax", "unnormalized", "relu", "pooled"}
    direction : {"ascent", "descent"}
    weights : (n,) array, optional
    tol : float
        Cluster tolerance.
    fd_points : {3, 5, 7, ...}
        Odd stencil size of the finite difference of the entropy.
    combine : {"sum", "mean"}
        How the heads' fields combine (see :func:`frame_diagnostics`).
    on_frame : callable, optional
        Called after each frame (a progress bar's update).

    Returns
    -------
    dict of (T,) arrays
        Keys :func:`series_names`.
    """
    t = np.asarray(t, dtype=float)
    x = np.asarray(x, dtype=float)
    if x.ndim != 3 or t.shape != (x.shape[0],):
        raise ValueError(f"expected t (T,) and x (T, n, d), got {t.shape} and {x.shape}")
    if t.size > 1 and not np.all(np.diff(t) > 0):
        raise ValueError("frame times must be strictly increasing")
    if fd_points < 3 or fd_points % 2 == 0:
        raise ValueError(f"fd_points must be an odd integer >= 3, got {fd_points}")
    T = t.size
    half = fd_points // 2
    H = _stack_at(heads, t[0] if T else 0.0).H
    names = series_names(H)
    out = {name: np.full(T, math.nan) for name in names}
    out["t"] = t.copy()
    window: deque[tuple[int, np.ndarray, np.ndarray]] = deque(maxlen=fd_points)
    for k in range(T):
        frame = frame_diagnostics(
            x[k], _stack_at(heads, t[k]), beta=beta, kind=kind, direction=direction, weights=weights, tol=tol, combine=combine
        )
        for key, value in frame.scalars.items():
            out[key][k] = value
        if on_frame is not None:  # (a progress bar: the diagnostics take longer than the run they read)
            on_frame()
        window.append((k, frame.entropy, frame.entropy_rate))
        if len(window) == fd_points:
            centre, _, rate = window[half]
            w = fd_weights(t[[item[0] for item in window]] - t[centre])
            derivative = sum(wm * item[1] for wm, item in zip(w, window))
            resid = np.abs(derivative - rate)
            for h in range(H):
                out[f"entropy_residual_h{h}"][centre] = float(resid[h].max())
            out["entropy_residual"][centre] = float(resid.max())
    return out


def strided_frames(frames: int, stride: int) -> np.ndarray:
    """The frames :func:`diagnose_run` reads: every ``stride``-th, and the last ('last' and ``final_*`` had been an
    earlier frame's)."""
    keep = np.arange(0, frames, stride)
    return np.append(keep, frames - 1) if keep.size and keep[-1] != frames - 1 else keep


def diagnose_run(run: Any, *, tol: float = 1e-3, fd_points: int = 5, stride: int = 1,
                 on_frame: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
    r"""All diagnostics of a particle :class:`meanfield.Run` (Pendharkar, arXiv 2605.04279).

    The model (heads and their schedule, :math:`\beta`, attention kind,
    direction, how the heads combine) and the token masses are the run's own (the model rebuilt
    from its config for a loaded run).

    Parameters
    ----------
    run : Run
        A particle run.
    tol : float
        Cluster tolerance.
    fd_points : int
        Entropy finite-difference stencil (odd, >= 3).
    stride : int
        Use every ``stride``-th frame, and the last (the final values had described an earlier frame).

    Returns
    -------
    dict of (T,) arrays
        See :func:`series_names`.

    Raises
    ------
    ValueError
        If the run has no particle frames (grid runs store ``mass``).
    ConfigError
        A run under a causal mask, with a normalisation scheme other than post-LN, with noise, of the zero-temperature
        solver, or saved on the gradient clock: the series would describe another flow than the run's.
    """
    if run.kind != "particle":
        raise ValueError("diagnostics need a particle run (dataset 'x'); this is a grid run")
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    model = run.model
    _check_diagnosable(run, model)
    keep = strided_frames(run.frames, stride)
    t = np.asarray(run.t, dtype=float)[keep]
    x = np.asarray(run.x, dtype=float)[keep]
    return diagnose_trajectory(
        t, x, model.heads, beta=model.beta, kind=model.attention, direction=model.direction, tol=tol, fd_points=fd_points,
        weights=run.token_masses, combine=model.combine, on_frame=on_frame,
    )


def _check_diagnosable(run: Any, model: Any) -> None:
    """The diagnostics follow the deterministic flow on the sphere under full attention: noise, a causal mask or a
    normalisation scheme other than post-LN moves the tokens otherwise, and their series would describe another flow."""
    from meanfield.errors import ConfigError

    norm = run.norm
    if norm != "post":
        raise ConfigError("model.norm", f"this run has norm = {norm!r}; the diagnostics of Pendharkar (arXiv 2605.04279) "
                                        "follow the post-LN flow of the tokens on the sphere (norm = 'post')")
    gamma = ((run.config or {}).get("noise") or {}).get("gamma")
    if gamma is not None or run.info.get("noisy"):  # mf.solve runs: the solver's mark in the info
        raise ConfigError("noise.gamma", "this run has noisy tokens; the diagnostics of Pendharkar (arXiv 2605.04279) "
                                         "are identities of the deterministic flow (the drift alone would satisfy them "
                                         "while the energy falls)")
    if getattr(model, "mask", "none") != "none":
        raise ConfigError("model.mask", f"this run has mask = {model.mask!r}; the diagnostics of Pendharkar (arXiv 2605.04279) "
                                        "are those of full attention, whose flow is not the masked one")
    from meanfield.io.runfile import solver_settings  # local: h5py

    solver = solver_settings(run.config, run.info)
    if solver.get("kind", run.info.get("solver")) == "zero-temperature":
        raise ConfigError("solver.kind", "this run follows the zero-temperature flow (each token towards its top score, "
                                         "β → ∞); the diagnostics of Pendharkar (arXiv 2605.04279) are those of the flow "
                                         "at the model's finite β, which the tokens did not follow")
    if solver.get("clock", "time") != "time":
        raise ConfigError("solver.clock", f"this run saves its frames on the {solver['clock']} clock, not in physical time "
                                          "(and merges tokens that meet): the diagnostics' rates are per unit of physical "
                                          "time and their checks differentiate across frames; run it with clock = 'time'")


# --------------------------------------------------------------------------- the report of a run


def _stat(values: np.ndarray) -> tuple[float, float, float, float]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return (math.nan,) * 4
    return float(finite[0]), float(finite[-1]), float(finite.min()), float(finite.max())


def tokens_with_mass(n: int, weights: np.ndarray | None) -> int:
    """The tokens of positive mass among ``n`` (all of them without ``weights``): a row's attention entropy is at most
    the log of their number (tokens of mass 0 take no attention)."""
    return n if weights is None else int(np.count_nonzero(np.asarray(weights, dtype=float) > 0))


def verdicts(series: Mapping[str, np.ndarray], *, direction: str, H: int, n: int, gradient_flow: bool,
             weights: np.ndarray | None = None, time_dependent: bool = False) -> dict[str, Any]:
    r"""Yes/no answers of the summary (``None``, printed "n/a", where the numbers cannot decide).

    * ``heads_time_dependent``: the heads follow a schedule (Massucco et al., arXiv 2605.18870); the rates are then the
      transport parts, at the frame's heads, and Thm 11 (fixed heads) does not apply;
    * ``gradient_flow_setting``: the Thm 11 setting (:func:`gradient_flow_setting`), with fixed heads;
    * ``energy_monotone``: :math:`E_{\mathrm{multi}}` non-decreasing (ascent) or
      non-increasing (descent) between frames, up to :math:`10^{-12}\max|E|` (from ``log_energy`` where the energy
      passes the largest float; n/a with one frame);
    * ``dominance_per_token``: Condition 8 held for every token, head and frame;
    * ``dominance_aggregate``: every :math:`\sigma\,dE_h/dt\ge0` at every frame, a rate at the round-off level of the
      frame's energies (:math:`10^3\varepsilon\max_h|E_h|`, as the margins take it) counting as 0 (n/a where a rate is
      not a float);
    * ``min_aggregate_margin``, ``max_thm11_residual`` (n/a outside the Thm 11 setting, where the identity it checks
      does not hold), ``max_entropy_residual`` (n/a with moving heads: the frames' entropy also changes with them);
    * ``final_entropy_over_log_n``: the last frame's mean attention entropy over the largest value of a row's
      entropy, :math:`\log n` with :math:`n` the tokens of positive mass (tokens of mass 0 take no attention), whatever
      the masses: a row :math:`p_{ij}\propto a_je^{\beta s_{ij}}` is uniform where the scores make up for the masses
      (it had been divided by :math:`-\sum_ja_j\log a_j`, the entropy of rows equal to the masses, and read 6.46
      where the fraction is 0.66).
    """
    sigma = _sign(direction)
    energy = np.asarray(series["energy"], dtype=float)
    log_energy = np.asarray(series.get("log_energy", np.full(energy.size, math.nan)), dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):
        if energy.size > 1 and np.all(np.isfinite(energy)):
            steps = sigma * np.diff(energy)
            monotone: bool | None = bool(np.all(steps >= -1e-12 * max(float(np.max(np.abs(energy))), 1e-300)))
        elif energy.size > 1 and np.all(np.isfinite(log_energy)):  # past the floats: the same test on ln E
            # ΔE ≥ -1e-12 max E  ⇔  Δ ln E ≥ ln(1 - 1e-12 max E / E), about -1e-12 e^(ln max E - ln E)
            tolerance = 1e-12 * np.exp(float(np.max(log_energy)) - log_energy[:-1])
            monotone = bool(np.all(sigma * np.diff(log_energy) >= -tolerance))
        else:
            monotone = None
        fractions = np.stack([series[f"dominance_fraction_h{h}"] for h in range(H)])
        rates = np.stack([series[f"dEdt_h{h}"] for h in range(H)])
        energies = np.stack([series[f"energy_h{h}"] for h in range(H)])
        noise = 1e3 * np.finfo(float).eps * np.max(np.abs(energies), axis=0, keepdims=True)  # per frame, as the margins
        per_token = bool(np.all(fractions == 1.0))
        aggregate = bool(np.all(sigma * rates >= -noise)) if np.all(np.isfinite(rates)) and np.all(np.isfinite(noise)) else None
    setting = gradient_flow and not time_dependent
    margins = np.stack([series[f"aggregate_margin_h{h}"] for h in range(H)])
    finite_margins = margins[np.isfinite(margins)]
    thm11 = np.asarray(series["thm11_residual"], dtype=float)
    ent = np.asarray(series["entropy_residual"], dtype=float)
    seen = tokens_with_mass(n, weights)
    top = math.log(seen) if seen > 1 else 0.0
    return {
        "frames": int(energy.size),
        "tokens": n,
        "heads": H,
        "direction": direction,
        "heads_time_dependent": time_dependent,
        "gradient_flow_setting": setting,
        "energy_monotone": monotone,
        "dominance_per_token": per_token,
        "dominance_aggregate": aggregate,
        "min_aggregate_margin": float(finite_margins.min()) if finite_margins.size else math.nan,
        "max_thm11_residual": (float(np.nanmax(thm11)) if np.any(np.isfinite(thm11)) else math.nan) if setting else None,
        "max_entropy_residual": None if time_dependent else float(np.nanmax(ent)) if np.any(np.isfinite(ent)) else math.nan,
        "final_entropy_over_log_n": float(np.mean([series[f"entropy_mean_h{h}"][-1] for h in range(H)]) / top) if top > 0 else math.nan,
    }


#: the series that check an identity of Thm 11's setting only: NaN in a :class:`Diagnosis` outside it
_OUTSIDE_THM11 = ("thm11_residual", "split_residual")
_MOVING_HEADS_NOTE = ("entropy_residual is nan: the heads move, and the attention entropies change with them as well as "
                      "with the tokens, whose part alone Thm 27's rate gives")
_OUTSIDE_THM11_NOTE = ("thm11_residual and split_residual are nan: they check identities of Thm 11's setting only "
                      "(unnormalized attention, fixed heads with B_h symmetric and V_h = B_h), which this run is outside")


@dataclass(frozen=True)
class Diagnosis:
    r"""The diagnostics of one particle run (what ``meanfield diagnose`` prints).

    Attributes
    ----------
    series : dict of (T,) arrays
        Every series of :func:`series_names`, plus ``t``; ``thm11_residual`` and ``split_residual`` are NaN outside
        Thm 11's setting (``verdicts["gradient_flow_setting"]`` false), where they check no identity, and the
        ``entropy_residual*`` series with moving heads (``verdicts["heads_time_dependent"]``), whose own motion
        Thm 27's rate leaves out.
    verdicts : dict
        :func:`verdicts`: monotone energy (Thm 11), radial dominance (Condition 8), residuals.
    heading : str
        The run and its model in one line.
    H, n : int
        Heads and tokens.
    massive : int or None
        Tokens of positive mass, whose :math:`\log` bounds a row's attention entropy (``None``: all ``n``).
    """

    series: dict[str, np.ndarray]
    verdicts: dict[str, Any]
    heading: str
    H: int
    n: int
    massive: int | None = None

    def table(self) -> str:
        """One line per series: first, last, min and max over the finite values."""
        width = max(len(k) for k in self.series)
        lines = [f"{'series':<{width}}  {'first':>14} {'last':>14} {'min':>14} {'max':>14}"]
        for key, values in self.series.items():
            if key == "t":
                continue
            first, last, lo, hi = _stat(np.asarray(values, dtype=float))
            lines.append(f"{key:<{width}}  {first:>14.7g} {last:>14.7g} {lo:>14.7g} {hi:>14.7g}")
        return "\n".join(lines)

    def verdict_text(self) -> str:
        """The verdicts, one per line (yes/no, numbers to 6 digits)."""
        lines = []
        for key, value in self.verdicts.items():
            if isinstance(value, bool):
                text = "yes" if value else "no"
            elif value is None:
                text = "n/a"
            else:
                text = f"{value:.6g}" if isinstance(value, float) else str(value)
            lines.append(f"{key:<26}{text}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # noqa: ARG002 - IPython's hook: a notebook cell shows the text
        printer.text(self.text())

    def text(self) -> str:
        """Everything ``meanfield diagnose`` prints on standard output."""
        lines = [self.heading, "", self.table()]
        if self.verdicts.get("gradient_flow_setting") is False:
            lines.append(_OUTSIDE_THM11_NOTE)
        if self.verdicts.get("heads_time_dependent"):
            lines.append(_MOVING_HEADS_NOTE)
        return "\n".join([*lines, "", self.verdict_text()])

    def plot(self, path: Any = None) -> Any:
        """Energies, the :math:`dE_h/dt` split with its radial shadows, dominance, entropy and clusters."""
        from meanfield.plotting.curves import plot_diagnostics

        model = self.heading.split("\n")[-1]
        return plot_diagnostics(self.series, path, H=self.H, n=self.n, massive=self.massive,
                                title=" ".join(model.split()))  # (not the padding)


def diagnose(run: Any, *, tol: float = 1e-3, fd_points: int = 5, stride: int = 1,
             on_frame: Callable[[], None] | None = None, on_start: Callable[[int], None] | None = None) -> Diagnosis:
    """The :class:`Diagnosis` of a particle :class:`meanfield.Run`.

    ``on_start`` is called once, with the number of frames to read, after every check of the run has passed, and
    ``on_frame`` after each frame: a progress bar's start and update (a refused run draws no bar).

    Raises
    ------
    ValueError
        ``tol`` not a finite number ≥ 0, ``stride`` not an integer ≥ 1, or ``fd_points`` not an odd integer ≥ 3.
    ConfigError
        A grid run, a run without frames, or one without a config; a flow the diagnostics do not follow (see
        :func:`diagnose_run`).
    """
    from meanfield.checks import check_int, real_number
    from meanfield.errors import ConfigError

    # (stride=2.5 had been an IndexError of NumPy's, tol=None a TypeError of '>=', fd_points=5.0 'an integer is required')
    real_number("tol", tol, minimum=0.0)
    check_int("stride", stride, minimum=1)
    if check_int("fd_points", fd_points, minimum=3) % 2 == 0:
        raise ValueError(f"fd_points must be an odd integer >= 3, got {fd_points!r}")
    key, what = run.error_names
    if run.kind != "particle":
        raise ConfigError(key, "diagnose needs a particle run (tokens 'x'); this is a grid run")
    if run.frames == 0:
        raise ConfigError(key, "the run holds no saved frame yet")
    if run.config is None and run._model is None:  # noqa: SLF001 - a solve() run carries its model
        raise ConfigError("run", "this run has neither a config nor a model to diagnose")
    bad = np.flatnonzero(~np.isfinite(run.states.reshape(run.frames, -1)).all(axis=1))  # the states the series read anyway
    if bad.size:  # a run never commits such a frame: an altered or damaged file (the cluster statistics had raised)
        raise ConfigError(key, f"frame {bad[0]} (t = {run.t[bad[0]]:.6g}) is not finite (NaN or inf): the {what} was "
                               "altered or damaged")
    model = run.model
    _check_diagnosable(run, model)  # (before on_start: the refusals had come after a progress bar at 0 %)
    if on_start is not None:
        on_start(int(strided_frames(run.frames, stride).size))
    series = diagnose_run(run, tol=tol, fd_points=fd_points, stride=stride, on_frame=on_frame)
    heads = _stack_at(model.heads, float(run.t[0]))
    n = int(run.shape[0])
    verdict = verdicts(series, direction=model.direction, H=heads.H, n=n,
                       gradient_flow=gradient_flow_setting(heads, model.attention), weights=run.token_masses,
                       time_dependent=not isinstance(model.heads, (HeadStack, ConstantHeads)))
    if not verdict["gradient_flow_setting"]:  # (the default softmax run's had read 5.87 … 20.8: a theorem failing by 2000 %)
        for key in _OUTSIDE_THM11:
            series[key] = np.full_like(series[key], math.nan)
    if verdict["heads_time_dependent"]:  # the entropies change with the heads too: Thm 27's rate checks nothing there
        for key in [k for k in series if k.startswith("entropy_residual")]:  # (0.76 had been shown as a residual)
            series[key] = np.full_like(series[key], math.nan)
    where = f"run:        {run.path}\n" if run.path is not None else ""
    combine = getattr(model, "combine", "sum")  # (the mean of the heads had not been named)
    heading = (f"{where}model:      d={model.d} beta={model.beta:g} attention={model.attention} "
               f"direction={model.direction}{'' if combine == 'sum' else f' combine={combine}'} heads={heads.H} n={n}")
    return Diagnosis(series, verdict, heading, heads.H, n, tokens_with_mass(n, run.token_masses))
