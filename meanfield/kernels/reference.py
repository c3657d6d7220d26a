r"""The NumPy twin of the attention kernels: the reference every compiled kernel is tested against.

GEMM → exact row maximum → ``exp`` → GEMM, in row blocks, on one thread
(the velocity laws are in :mod:`meanfield.kernels.attention`).  With ``mask="causal"``
the mask of Karagodin, Polyanskiy and Rigollet (*Clustering in Causal Attention
Masking*, arXiv 2411.04990) is applied explicitly to each block of scores,

.. math::

    s_{ij} \leftarrow -\infty\ (\text{exponential laws}),\qquad
    \max(s_{ij}, 0) \leftarrow 0\ (\text{relu})\qquad\text{for } j > i,

so that every law sums over :math:`j\le i` only (softmax normalises over the prefix).
"""
from __future__ import annotations

import numpy as np

from meanfield.heads.head import HeadStack
from meanfield.kernels.inputs import block_rows, check_tokens, is_causal, token_masses

__all__ = ["velocity_numpy"]


def velocity_numpy(
    x: np.ndarray,
    heads: HeadStack,
    *,
    beta: float,
    kind: str = "softmax",
    weights: np.ndarray | None = None,
    mask: str = "none",
    rows: np.ndarray | None = None,
) -> np.ndarray:
    """Reference implementation: row blocks, exact row maxima, one thread.

    Parameters
    ----------
    x : (n, d) array
        Tokens (need not be on the sphere).
    heads : HeadStack
    beta : float
        Inverse temperature.
    kind : {"softmax", "unnormalized", "relu", "pooled"}
    weights : (n,) array, optional
        Masses :math:`a_j`; default :math:`1/n`.
    mask : {"none", "causal"}
        ``"causal"``: row :math:`i` sums over :math:`j\\le i` only (the masked scores
        are set to :math:`-\\infty`, or the ReLU weights to 0, before the sums).
    rows : (k,) int array, optional
        Compute only the velocity of these tokens (default all), against every token.

    Returns
    -------
    (n, d) array, or (k, d) with ``rows``
        The ambient velocity :math:`v_i` (not yet projected).
    """
    x = check_tokens(x, heads, kind, beta=beta)
    causal = is_causal(mask)
    n, d = x.shape
    a = token_masses(n, weights, kind=kind, causal=causal)
    targets = np.arange(n) if rows is None else np.asarray(rows, dtype=np.intp).ravel()
    out = np.zeros((targets.size, d))
    block = block_rows(n)
    values = [x @ heads.V[h].T for h in range(heads.H)]
    xt = np.ascontiguousarray(x.T)
    buffer = np.empty(block * n)
    with np.errstate(divide="ignore"):
        log_a = np.log(a)  # -inf for a token of mass 0
    for start in range(0, targets.size, block):
        at = targets[start:start + block]
        here = slice(start, start + at.size)
        z = buffer[: at.size * n].reshape(-1, n)
        # the causal mask of this block: column j is hidden from row i when j > i
        hidden = np.arange(n)[None, :] > at[:, None] if causal else None
        if kind == "pooled":
            nums, dens, shifts = [], [], []
        for h in range(heads.H):
            np.matmul(x[at] @ heads.B[h], xt, out=z)  # scores s_ij
            if kind == "relu":
                np.maximum(z, 0.0, out=z)
                if causal:
                    z[hidden] = 0.0
                z *= a
                out[here] += z @ values[h]
                continue
            z *= beta
            if causal:
                z[hidden] = -np.inf
            if kind == "unnormalized":
                np.exp(z, out=z)
                z *= a
                out[here] += z @ values[h]
                continue
            # shifted by m_i = max_j (β s_ij + ln a_j): the largest term is 1 even where a token of mass 0 holds
            # the row's top score (shifted by the plain maximum, every term with mass could underflow to 0/0)
            z += log_a
            m = z.max(axis=1, keepdims=True)
            m[~np.isfinite(m)] = 0.0  # a row that sees no mass: every term e^{-inf} = 0
            z -= m
            np.exp(z, out=z)
            num = z @ values[h]
            den = z.sum(axis=1, keepdims=True)
            if kind == "softmax":
                out[here] += num / den
            else:
                nums.append(num)
                dens.append(den)
                shifts.append(m)
        if kind == "pooled":  # the common shift over the heads that weigh (a head of weight 0 may hold the top)
            top = np.max(np.concatenate([shifts[h] for h in range(heads.H) if heads.w[h] != 0] or shifts, axis=1), axis=1, keepdims=True)
            scale = [heads.w[h] * np.exp(shifts[h] - top) if heads.w[h] != 0 else np.zeros_like(top) for h in range(heads.H)]
            num = sum(scale[h] * nums[h] for h in range(heads.H))
            den = sum(scale[h] * dens[h] for h in range(heads.H))
            out[here] = num / den
    return out
