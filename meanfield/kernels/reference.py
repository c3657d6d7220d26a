r"""The NumPy twin of the attention kernels: the reference every compiled kernel is tested against.

GEMM → exact row maximum → ``exp`` → GEMM, in row blocks, on one thread
(the velocity laws are in :mod:`meanfield.kernels.attention`).
"""
from __future__ import annotations

import numpy as np

from meanfield.heads.head import HeadStack
from meanfield.kernels.inputs import block_rows, check_tokens, token_masses

__all__ = ["velocity_numpy"]


def velocity_numpy(
    x: np.ndarray, heads: HeadStack, *, beta: float, kind: str = "softmax", weights: np.ndarray | None = None
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

    Returns
    -------
    (n, d) array
        The ambient velocity :math:`v_i` (not yet projected).
    """
    x = check_tokens(x, heads, kind)
    n, d = x.shape
    a = token_masses(n, weights)
    out = np.zeros((n, d))
    block = block_rows(n)
    values = [x @ heads.V[h].T for h in range(heads.H)]
    xt = np.ascontiguousarray(x.T)
    buffer = np.empty(block * n)
    for start in range(0, n, block):
        rows = slice(start, min(n, start + block))
        z = buffer[: (rows.stop - rows.start) * n].reshape(-1, n)
        if kind == "pooled":
            nums, dens, shifts = [], [], []
        for h in range(heads.H):
            np.matmul(x[rows] @ heads.B[h], xt, out=z)  # scores s_ij
            if kind == "relu":
                np.maximum(z, 0.0, out=z)
                z *= a
                out[rows] += z @ values[h]
                continue
            z *= beta
            if kind == "unnormalized":
                np.exp(z, out=z)
                z *= a
                out[rows] += z @ values[h]
                continue
            m = z.max(axis=1, keepdims=True)
            z -= m
            np.exp(z, out=z)
            z *= a
            num = z @ values[h]
            den = z.sum(axis=1, keepdims=True)
            if kind == "softmax":
                out[rows] += num / den
            else:
                nums.append(num)
                dens.append(den)
                shifts.append(m)
        if kind == "pooled":
            top = np.max(np.concatenate(shifts, axis=1), axis=1, keepdims=True)
            scale = [heads.w[h] * np.exp(shifts[h] - top) for h in range(heads.H)]
            num = sum(scale[h] * nums[h] for h in range(heads.H))
            den = sum(scale[h] * dens[h] for h in range(heads.H))
            out[rows] = num / den
    return out
