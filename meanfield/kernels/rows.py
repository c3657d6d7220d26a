r"""The numba row kernel: a fused loop over rows (parallel), exact row maxima, :math:`O(n\,d)` memory.

numba's ``exp`` is a scalar libm call, so for dense attention this loses to
:mod:`~meanfield.kernels.blas` and :mod:`~meanfield.kernels.fused`; it is kept
as a second independent implementation of all four kinds (``meanfield bench`` measures it).
With ``mask="causal"`` (Karagodin, Polyanskiy and Rigollet, arXiv 2411.04990) row
:math:`i` loops over :math:`j\le i` only — half the work — and the rows are visited in
the order 0, n-1, 1, n-2, … so that the static ``prange`` chunks carry equal work.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange as numba_prange

from meanfield.heads.head import HeadStack
from meanfield.kernels.inputs import check_tokens, is_causal, masses_in_range, scale_back, token_masses
from meanfield.kernels.jit import kernel_threads, pjit

__all__ = ["velocity_numba"]


@pjit
def _numba_kernel(x, B, V, w, a, beta, mode, causal=False):  # pragma: no cover - compiled
    # mode: 0 softmax, 1 unnormalized, 2 relu, 3 pooled; causal: row i sees columns j <= i
    n, d = x.shape
    H = B.shape[0]
    out = np.zeros((n, d))
    xnorm2 = 0.0
    for j in range(n):
        s2 = 0.0
        for k in range(d):
            s2 += x[j, k] * x[j, k]
        xnorm2 = max(xnorm2, s2)
    for p in numba_prange(n):
        # causal: cheap and expensive rows alternate (0, n-1, 1, n-2, …), so that static chunks balance
        half = np.int64(p) // 2  # (prange indices are unsigned: int64 keeps the arithmetic integral)
        i = (half if p % 2 == 0 else n - 1 - half) if causal else np.int64(p)
        jend = i + 1 if causal else n
        q = np.empty(d)
        acc = np.empty(d)
        vx = np.empty(d)
        shifts = np.empty(H)
        nums = np.zeros((H, d))
        dens = np.zeros(H)
        for h in range(H):
            qn = 0.0
            for k in range(d):
                t = 0.0
                for m in range(d):
                    t += x[i, m] * B[h, m, k]
                q[k] = t
                qn += t * t
            c = beta * math.sqrt(qn * xnorm2) if mode != 2 else 0.0
            if mode != 2:
                # exact row maximum over the tokens with mass (two passes): robust for any B, and for unnormalized the
                # factor e^c back out is the true scale (the Cauchy–Schwarz bound's e^c could overflow where the sum does not)
                best = -np.inf
                for j in range(jend):
                    if a[j] > 0.0:
                        s = 0.0
                        for k in range(d):
                            s += q[k] * x[j, k]
                        if beta * s > best:
                            best = beta * s
                c = best if best > -np.inf else 0.0  # a row that sees no mass: every term is 0
            for k in range(d):
                acc[k] = 0.0
            den = 0.0
            for j in range(jend):
                if a[j] == 0.0:  # a token of mass 0 adds nothing (above the row maximum, 0·e^{βs - c} would be 0·inf)
                    continue
                s = 0.0
                for k in range(d):
                    s += q[k] * x[j, k]
                if mode == 2:
                    e = a[j] * s if s > 0.0 else 0.0
                else:
                    e = a[j] * math.exp(beta * s - c)
                den += e
                for k in range(d):
                    acc[k] += e * x[j, k]
            # apply V_h to the accumulated sum (linear): sum_j e_j V x_j = V (sum_j e_j x_j)
            for k in range(d):
                t = 0.0
                for m in range(d):
                    t += V[h, k, m] * acc[m]
                vx[k] = t
            if mode == 0:
                for k in range(d):
                    out[i, k] += vx[k] / den
            elif mode == 1:
                f = math.exp(c)
                for k in range(d):
                    out[i, k] += vx[k] * f
            elif mode == 2:
                for k in range(d):
                    out[i, k] += vx[k]
            else:
                shifts[h] = c
                dens[h] = den
                for k in range(d):
                    nums[h, k] = vx[k]
        if mode == 3:
            top = -np.inf  # the common shift over the heads that weigh (one of weight 0 may hold the top)
            for h in range(H):
                if w[h] != 0.0 and shifts[h] > top:
                    top = shifts[h]
            if top == -np.inf:
                top = shifts.max()
            total = 0.0
            for h in range(H):
                if w[h] == 0.0:
                    continue
                f = w[h] * math.exp(shifts[h] - top)
                total += f * dens[h]
                for k in range(d):
                    out[i, k] += f * nums[h, k]
            for k in range(d):
                out[i, k] /= total
    return out




_MODES = {"softmax": 0, "unnormalized": 1, "relu": 2, "pooled": 3}


def velocity_numba(
    x: np.ndarray,
    heads: HeadStack,
    *,
    beta: float,
    kind: str = "softmax",
    weights: np.ndarray | None = None,
    mask: str = "none",
) -> np.ndarray:
    r"""Fused numba kernel, parallel over rows, :math:`O(n\,d)` memory.

    Same parameters and result as :func:`velocity_numpy` (``mask="causal"``: row
    :math:`i` loops over :math:`j\le i`, half the pairs).  Softmax and pooled
    rows use the exact row maximum (two passes over the row).  Masses whose total
    leaves :math:`[2^{-60}, 2^{60}]` are divided by a power of two first
    (:func:`~meanfield.kernels.inputs.masses_in_range`, as :func:`~meanfield.kernels.attention.attention_velocity`
    does): the products :math:`a_je^{\beta s_{ij}-c_i}` of subnormal masses had lost their digits (softmax wrong by
    100 %, pooled NaN at masses of 5e-324), and masses whose sum overflows had given NaN (which
    :func:`velocity_numpy` refuses).
    """
    x = check_tokens(x, heads, kind, beta=beta)
    causal = is_causal(mask)
    a = token_masses(x.shape[0], weights, kind=kind, causal=causal, rescaled=True)
    a, _, back = masses_in_range(a, kind)
    pairs = float(x.shape[0]) ** 2 * heads.H * (0.5 if causal else 1.0)
    with kernel_threads(pairs):
        v = _numba_kernel(x, heads.B, heads.V, heads.w, np.ascontiguousarray(a), float(beta), _MODES[kind], causal)
    return scale_back(v, back)
