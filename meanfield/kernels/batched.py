r"""Attention velocity of many independent small token systems in one kernel call.

For :math:`b = 1..N_{\rm sys}` independent systems of :math:`n` tokens
:math:`x^{(b)}_i\in S^{d-1}`, each with its own inverse temperature
:math:`\beta_b` and heads :math:`(B^{(b)}_h, V^{(b)}_h)` (shared by all systems, or
one set per system):

.. math::

    \text{softmax:}\quad v^{(b)}_i &= c\sum_h \frac{\sum_j e^{\beta_b s^{bh}_{ij}}\,V^{(b)}_h x^{(b)}_j}{\sum_j e^{\beta_b s^{bh}_{ij}}} \\
    \text{unnormalized:}\quad v^{(b)}_i &= \frac{c}{n}\sum_h \sum_j e^{\beta_b s^{bh}_{ij}}\,V^{(b)}_h x^{(b)}_j,
    \qquad s^{bh}_{ij} = x^{(b)\top}_i B^{(b)}_h x^{(b)}_j,

with :math:`c = 1` (heads summed) or :math:`c = 1/H` (heads averaged) — the laws of
:mod:`meanfield.kernels.attention` applied to every system at once.  These are the
self-attention dynamics of Geshkovski, Letrouit, Polyanskiy and Rigollet, *A
mathematical perspective on Transformers* (arXiv 2312.10794), whose phase diagrams
average thousands of small systems (:math:`n = 32`) over random initialisations.

:func:`velocity_batched` is one numba call over the whole batch, parallel over the
systems (``prange``), :math:`O(n\,d)` memory per system (no :math:`n\times n` score
array): per row, the scores, their exact maximum, the shifted exponentials (the
vectorisable ``exp`` of :mod:`meanfield.kernels.fused`) and the sums
:math:`\sum_j e_j (x_j, 1)`, to which :math:`V_h` is applied once.
:func:`velocity_batched_numpy` is its NumPy twin (dense :math:`(N_{\rm sys}, H, n, n)`
scores, for the small systems it is meant for), the reference of the tests.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from meanfield.kernels.fused import _accumulate, _accumulate3, exp_flushed
from meanfield.kernels.jit import kernel_threads, pjit

__all__ = ["BATCHED_KINDS", "velocity_batched", "velocity_batched_numpy", "batched_inputs"]

#: velocity laws of the batched kernel (code passed to the kernel: their index)
BATCHED_KINDS: tuple[str, ...] = ("softmax", "unnormalized")


@pjit(fastmath={"contract"})
def _batched_kernel(x, beta, B, V, kind, scale, out):  # pragma: no cover - compiled
    nsys, n, d = x.shape
    H = B.shape[1]
    step = 0 if B.shape[0] == 1 else 1  # shared heads: system 0's, else each system's own
    for b in prange(nsys):
        s = b * step
        wx = np.empty((d + 1, n))  # coordinates of the tokens by column, and a row of ones
        z = np.empty(n)
        e = np.empty(n)
        q = np.empty(d)
        acc = np.empty(d + 1)
        for j in range(n):
            for k in range(d):
                wx[k, j] = x[b, j, k]
            wx[d, j] = 1.0
        for i in range(n):
            for k in range(d):
                out[b, i, k] = 0.0
        bb = beta[b]
        for h in range(H):
            for i in range(n):
                for k in range(d):  # q = β Bᵀ x_i, so that β s_ij = q · x_j
                    tk = 0.0
                    for l in range(d):
                        tk += x[b, i, l] * B[s, h, l, k]
                    q[k] = bb * tk
                if d == 3:
                    q0, q1, q2 = q[0], q[1], q[2]
                    x0, x1, x2 = wx[0], wx[1], wx[2]
                    for j in range(n):
                        z[j] = q0 * x0[j] + q1 * x1[j] + q2 * x2[j]
                else:
                    for j in range(n):
                        z[j] = 0.0
                    for k in range(d):
                        qk = q[k]
                        for j in range(n):
                            z[j] += qk * wx[k, j]
                m = z[0]
                for j in range(1, n):
                    if z[j] > m:
                        m = z[j]
                for j in range(n):
                    e[j] = exp_flushed(z[j] - m)  # the row maximum shifts: a flushed term weighs < e^-600 of the row
                for k in range(d + 1):
                    acc[k] = 0.0
                if d == 3:
                    _accumulate3(e, wx[0], wx[1], wx[2], wx[3], n, acc)
                else:
                    _accumulate(e, wx, 0, n, acc)
                if kind == 0:
                    factor = scale / acc[d]
                else:
                    factor = scale * math.exp(m) / n
                for k in range(d):
                    vk = 0.0
                    for l in range(d):
                        vk += V[s, h, k, l] * acc[l]
                    out[b, i, k] += factor * vk


def batched_inputs(
    x: np.ndarray, B: np.ndarray, V: np.ndarray, beta: float | np.ndarray, kind: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Check and shape the inputs of the batched kernels.

    Returns ``x`` (N, n, d), ``beta`` (N,), and ``B``, ``V`` as (1, H, d, d) (shared)
    or (N, H, d, d) (one set per system), all contiguous float64.

    Raises
    ------
    ValueError
        For an unknown kind, mismatched shapes, a β of neither one value nor one per system, or a negative or
        non-finite β.
    """
    if kind not in BATCHED_KINDS:
        raise ValueError(f"the batched kernel computes {' and '.join(BATCHED_KINDS)} attention, got kind={kind!r}")
    x = np.ascontiguousarray(x, dtype=float)
    if x.ndim != 3 or x.shape[1] < 1:
        raise ValueError(f"x must have shape (systems, n, d), got {x.shape}")
    nsys, _, d = x.shape
    heads = []
    for name, M in (("B", B), ("V", V)):
        M = np.asarray(M, dtype=float)
        if M.ndim == 3:
            M = M[None]
        if M.ndim != 4 or M.shape[2:] != (d, d) or M.shape[0] not in (1, nsys) or M.shape[1] < 1:
            raise ValueError(f"{name} must have shape (H, {d}, {d}) or ({nsys}, H, {d}, {d}), got {np.shape(M)}")
        heads.append(np.ascontiguousarray(M))
    B, V = heads
    if B.shape != V.shape:
        raise ValueError(f"B and V must have the same shape, got {B.shape} and {V.shape}")
    beta = np.asarray(beta, dtype=float)
    if beta.ndim > 1 or beta.size not in (1, nsys):  # NumPy's broadcasting error had named neither
        raise ValueError(f"beta must be one number or one per system ({nsys}), got shape {beta.shape}")
    beta = np.ascontiguousarray(np.broadcast_to(beta.reshape(-1) if beta.ndim else beta, (nsys,)))
    if not np.all(np.isfinite(beta)) or np.any(beta < 0):
        raise ValueError("beta must be finite and >= 0 for every system")
    return x, beta, B, V


def velocity_batched(
    x: np.ndarray,
    B: np.ndarray,
    V: np.ndarray,
    *,
    beta: float | np.ndarray,
    kind: str = "softmax",
    combine: str = "sum",
) -> np.ndarray:
    r"""Ambient attention velocity of every system of a batch (the laws of the module docstring).

    Parameters
    ----------
    x : (N, n, d) array
        ``N`` systems of ``n`` tokens (need not be on the sphere).
    B, V : (H, d, d) or (N, H, d, d) arrays
        Score and value matrices: shared by every system, or one set per system.
    beta : float or (N,) array
        Inverse temperature, one for all or one per system (≥ 0).
    kind : {"softmax", "unnormalized"}
    combine : {"sum", "mean"}
        Heads summed, or averaged (:math:`c = 1/H`).

    Returns
    -------
    (N, n, d) array
        :math:`v^{(b)}_i`, not projected.

    Examples
    --------
    >>> import numpy as np
    >>> from meanfield.geometry.sphere import sample_uniform
    >>> x = np.stack([sample_uniform(32, 3, seed=s) for s in range(4)])
    >>> velocity_batched(x, np.eye(3)[None], np.eye(3)[None], beta=[1.0, 2.0, 4.0, 8.0]).shape
    (4, 32, 3)
    """
    x, beta, B, V = batched_inputs(x, B, V, beta, kind)
    if combine not in ("sum", "mean"):
        raise ValueError(f"combine must be 'sum' or 'mean', got {combine!r}")
    nsys, n, d = x.shape
    H = B.shape[1]
    scale = 1.0 / H if combine == "mean" else 1.0
    out = np.empty((nsys, n, d))
    with kernel_threads(float(nsys) * n * n * H):
        _batched_kernel(x, beta, B, V, BATCHED_KINDS.index(kind), scale, out)
    return out


def velocity_batched_numpy(
    x: np.ndarray,
    B: np.ndarray,
    V: np.ndarray,
    *,
    beta: float | np.ndarray,
    kind: str = "softmax",
    combine: str = "sum",
) -> np.ndarray:
    """NumPy twin of :func:`velocity_batched`: dense scores, exact row maxima, NumPy's ``exp``.

    Same parameters and result; meant for the small systems of a phase diagram
    (it holds an ``(N, H, n, n)`` score array).
    """
    x, beta, B, V = batched_inputs(x, B, V, beta, kind)
    if combine not in ("sum", "mean"):
        raise ValueError(f"combine must be 'sum' or 'mean', got {combine!r}")
    n = x.shape[1]
    H = B.shape[1]
    Bb = np.broadcast_to(B, (x.shape[0], *B.shape[1:]))
    Vb = np.broadcast_to(V, (x.shape[0], *V.shape[1:]))
    scores = np.einsum("bik,bhkl,bjl->bhij", x, Bb, x) * beta[:, None, None, None]
    values = np.einsum("bhkl,bjl->bhjk", Vb, x)  # V_h x_j
    if kind == "softmax":
        scores -= scores.max(axis=3, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=3, keepdims=True)
    else:
        weights = np.exp(scores) / n
    out = np.einsum("bhij,bhjk->bik", weights, values)
    return out / H if combine == "mean" else out
