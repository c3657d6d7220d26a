r"""Interaction energies of Pendharkar (arXiv 2605.04279) for particles and weighted measures.

.. math::

    E_h(\mu) = \frac{1}{2\beta}\iint e^{\beta x^\top B_h y}\,d\mu(x)\,d\mu(y),
    \qquad E_{\mathrm{multi}} = \sum_h E_h ,

for particles :math:`E_h = \frac{1}{2\beta n^2}\sum_{ij} e^{\beta s^h_{ij}}`.  At
:math:`\beta=0` we use the limit of :math:`(E_h - E_h|_{s=0})`, i.e.
:math:`\tfrac12\iint x^\top B_h y`, which generates the same dynamics.  Massucco et al. (arXiv 2605.18870)'s
time-dependent energy is the :math:`\Theta`-average :math:`\sum_h w_h E_h`
(:func:`energy_theta`).

Sums run on the float64 flash tiles of the attention kernel without their value products, or over
row blocks on the kernels' threads, BLAS on one thread (no ``n × n`` array for large ``n``; about half
a kernel call per evaluation on the tiles, one on the row blocks).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.special import logsumexp

from meanfield.heads import HeadStack
from meanfield.kernels.blas import blas_threads, exp_scores, exp_shifted_by_mass, flash_row_sums, run_on_threads, thread_buffer
from meanfield.kernels.inputs import block_rows, token_masses
from meanfield.kernels.harmonic import sphere_head_row_logs
from meanfield.kernels.jit import one_blas_thread

__all__ = ["head_energies", "head_log_energies", "energy_row_logs", "energies_from_row_logs", "log_energies_from_row_logs",
           "log_total_energy", "energy_multi", "energy_theta", "LOG_FLOAT_MAX"]

#: scores per row block (2 MiB of float64 per thread)
_BLOCK_ELEMENTS = 1 << 18


#: the log of the largest float: e^x is a float below it
LOG_FLOAT_MAX = float(np.log(np.finfo(float).max))
#: a shifted row sum below this means the Cauchy–Schwarz shift overshot: the row is redone with its maximum
_UNDERFLOW = 1e-200


def _energy_rows(rows: slice, lhs: np.ndarray, rhs_t: np.ndarray, xb: np.ndarray, xt: np.ndarray,
                 a: np.ndarray, shift: np.ndarray, beta: float, logs: np.ndarray) -> None:
    r"""``logs[i] = log(sum_j a_j e^{beta s_ij})`` for the rows of one block, in a reused buffer.

    ``lhs @ rhs_t`` is :math:`\beta s_{ij} - c_i` (the shift is folded into the GEMM as an extra
    column, as in :mod:`meanfield.kernels.blas`).
    """
    z = thread_buffer((rows.stop - rows.start) * rhs_t.shape[1], np.float64, "energy").reshape(rows.stop - rows.start, rhs_t.shape[1])
    np.matmul(lhs[rows], rhs_t, out=z)
    exp_scores(z, deepest=2.0 * float(shift[rows].max()))  # the attention kernels' exp (the shifted scores lie in [-2c_i, 0])
    _row_logs(z @ a, shift[rows].copy(), rows, lambda idx: xb[idx], xt, a, beta, logs)


def _row_logs(total: np.ndarray, c: np.ndarray, rows: slice, xb_rows: Callable[[np.ndarray], np.ndarray], xt: np.ndarray,
              a: np.ndarray, beta: float, logs: np.ndarray) -> None:
    r"""``logs[rows] = log(total_i) + c_i`` from the shifted row sums ``total`` (shift ``c``).

    Rows whose shifted sum underflows are redone shifted by :math:`\max_j(\beta s_{ij}+\ln a_j)`, so that
    their sum is at least 1 (``xb_rows(idx)``: the rows ``idx`` of :math:`x B_h`, formed only for them).
    """
    low = total < _UNDERFLOW
    if np.any(low):
        idx = np.flatnonzero(low) + rows.start
        sub = beta * (xb_rows(idx) @ xt)
        with np.errstate(divide="ignore"):  # -inf where a_j = 0
            top = exp_shifted_by_mass(sub, np.log(a))  # the masses in the exponent: the largest term is 1
        total[low] = sub.sum(axis=1)
        c[low] = top
    logs[rows] = np.log(total) + c


def _energy_from_logs(logs: np.ndarray, beta: float) -> float:
    r""":math:`\frac{1}{2\beta}\sum_i e^{\ell_i}` from the rows' logs :math:`\ell_i`, summed shifted by their largest.

    :math:`e^{\max\ell}` is taken whole where it is a float (one rounding), else with :math:`\ln|2\beta|` taken off
    first: energies up to the largest float past :math:`\max\ell\approx709.8` (they had read ``inf`` there)."""
    top = float(logs.max())
    total = float(np.sum(np.exp(logs - top)))
    if top + np.log(total) < LOG_FLOAT_MAX:  # (total ≥ 1)
        return float(np.exp(top) * total / (2 * beta))
    with np.errstate(over="ignore"):
        return float(np.copysign(np.exp(top - np.log(abs(2 * beta))), beta) * total)


def _log_energy_from_logs(logs: np.ndarray, beta: float) -> float:
    r""":math:`\ln\big(\frac{1}{2\beta}\sum_i e^{\ell_i}\big)` (:math:`\beta>0`), finite where the energy itself overflows."""
    top = float(logs.max())
    if not np.isfinite(top):
        return top  # no mass: ln 0
    return top + float(np.log(np.sum(np.exp(logs - top)))) - float(np.log(2 * beta))


def energies_from_row_logs(row_logs: np.ndarray, *, beta: float, weights: np.ndarray | None = None) -> np.ndarray:
    r"""Per-head energies :math:`E_h` from the heads' log row sums :math:`\ell^h_i=\ln\sum_j a_j e^{\beta s^h_{ij}}`, shape ``(H,)``.

    .. math::

        E_h = \frac{1}{2\beta}\sum_i a_i e^{\ell^h_i}

    summed in the log domain.  The attention kernels fill :math:`\ell^h_i` as they compute a velocity
    (``row_logs`` of :func:`~meanfield.kernels.attention.attention_velocity`): the particle runs' energy
    tracker takes them from the speed tracker's evaluation of the same frame, at no cost.

    Parameters
    ----------
    row_logs : (H, n) array
    beta : float
        Inverse temperature, :math:`\beta>0`.
    weights : (n,) array, optional
        Masses; default :math:`1/n`.
    """
    return np.array([_energy_from_logs(logs, beta) for logs in _with_masses(row_logs, weights)])


def log_energies_from_row_logs(row_logs: np.ndarray, *, beta: float, weights: np.ndarray | None = None) -> np.ndarray:
    r""":math:`\ln E_h` from the heads' log row sums (:func:`energies_from_row_logs`; :math:`\beta>0`), shape ``(H,)``:
    finite where :math:`E_h\sim e^{\beta}` exceeds the largest float (:math:`\beta\gtrsim700` for :math:`B_h=I`)."""
    if not beta > 0:
        raise ValueError(f"the log of the energy needs beta > 0, got {beta!r}")
    return np.array([_log_energy_from_logs(logs, beta) for logs in _with_masses(row_logs, weights)])


def log_total_energy(row_logs: np.ndarray, *, beta: float, weights: np.ndarray | None = None, share: float = 1.0) -> float:
    r""":math:`\ln\big(s\sum_hE_h\big)` from the heads' log row sums (:math:`\beta>0`; ``share`` :math:`s`: 1 for the
    sum over the heads, :math:`1/H` for their mean, ``model.combine = "mean"``): the ``log_energy`` the energy tracker
    and :mod:`meanfield.analysis.diagnostics` record, a number where the energy passes the largest float."""
    return float(logsumexp(log_energies_from_row_logs(row_logs, beta=beta, weights=weights))) + math.log(share)


def _with_masses(row_logs: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    r""":math:`\ln a_i+\ell^h_i` (:math:`-\infty` where :math:`a_i=0`: the row adds nothing)."""
    row_logs = np.asarray(row_logs, dtype=float)
    n = row_logs.shape[1]
    a = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, dtype=float)
    with np.errstate(divide="ignore"):
        return np.log(a) + row_logs


def head_energies(x: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None,
                  threads: int | None = None, backend: str = "blas", tolerance: float = 1e-12, flash: bool = True) -> np.ndarray:
    r"""Per-head energies :math:`E_h`, shape ``(H,)`` (the energy of Pendharkar, arXiv 2605.04279).

    .. math::

        E_h = \frac{1}{2\beta} \sum_i a_i e^{c_i} \sum_j a_j e^{\beta s^h_{ij} - c_i},
        \qquad c_i = |\beta|\,\|B_h^\top x_i\|\max_j \|x_j\| \ge \beta s^h_{ij},

    summed in the log domain over the rows.  The kernels' thread policy applies: the flash tiles'
    row sums (``flash``), or row blocks of at most :math:`2^{18}` scores on the kernels' pool
    (:func:`~meanfield.kernels.blas.blas_threads`), BLAS held to one thread inside
    (:func:`~meanfield.kernels.jit.one_blas_thread`); so a frame's energy costs about half a
    kernel call on the tiles, one on OpenBLAS, and no :math:`n \times n` array.

    Parameters
    ----------
    x : (n, d) array
        Tokens (or cell centres).
    heads : HeadStack
    beta : float
    weights : (n,) array, optional
        Masses; default :math:`1/n`.
    threads : int, optional
        Size of the thread pool (default: the kernels' choice for :math:`n^2 H` pairs).
    backend : str
        The model's attention backend.  Where it is (or ``"auto"`` picks) ``"harmonic"`` or
        ``"local"`` on :math:`S^2`, the energies come from those kernels' certified row sums
        (:func:`meanfield.kernels.harmonic.sphere_head_row_logs`, relative accuracy
        ``tolerance``) at the cost of one velocity evaluation, instead of the dense
        :math:`O(n^2)` pass; any other value: the dense pass.  The sphere kernels take the tokens as
        unit vectors (they are used where :math:`|\|x_i\|^2-1|\le10^{-10}`): tokens :math:`\delta` off
        the sphere give relative errors of about :math:`\beta\delta` (3e-10 at :math:`\beta=1024`,
        :math:`\delta=10^{-12}`), where the dense pass sums the scores of the tokens as given.
    tolerance : float
        Relative accuracy of the sphere kernels' row sums.
    flash : bool
        The dense pass on the float64 flash tiles where they run
        (:func:`~meanfield.kernels.blas.flash_row_sums`: d ≤ 64 on AVX-512 processors, scores and
        ``exp`` for half the pairs where every :math:`B_h` is symmetric, no value products); ``False``
        keeps the OpenBLAS row blocks.  Measured (two threads, the time of one velocity evaluation as
        the unit): 0.45–0.46 at n = 4096, d = 64 (B = I / a rotation) against 1.06 / 0.63 on OpenBLAS,
        0.56–0.59 at d = 32 against 1.31 / 0.90, and 0.57 / 0.68 at n = 1024, d = 64 against 1.05 / 0.89.

    Returns
    -------
    (H,) array
        :math:`E_h`; ``inf`` where it exceeds the largest float (:math:`E_h\sim e^{\beta}/(2\beta)` for
        :math:`B_h = I`: from :math:`\beta\approx 716`), with a :class:`~meanfield.errors.MeanfieldWarning`:
        :func:`head_log_energies` gives :math:`\ln E_h` there.

    Examples
    --------
    >>> import numpy as np
    >>> from meanfield.heads import HeadStack
    >>> x = np.eye(3)
    >>> e = head_energies(x, HeadStack(B=np.eye(3)[None], V=np.eye(3)[None]), beta=1.0)
    >>> bool(np.isclose(e[0], (3 * np.e + 6) / 18))
    True
    """
    x, a = _checked(x, heads, beta, weights)
    if beta == 0:
        xt = x.T
        return np.array([0.5 * float(a @ (x @ heads.B[h] @ (xt @ a))) for h in range(heads.H)])
    logs = _checked_row_logs(x, a, heads, beta=beta, threads=threads, backend=backend, tolerance=tolerance, flash=flash)
    energies = energies_from_row_logs(logs, beta=beta, weights=a)
    if beta > 0 and np.any(np.isinf(energies)) and np.all(np.isfinite(logs)):  # (inf had come without a word)
        import warnings

        from meanfield.errors import MeanfieldWarning

        heads_over = np.flatnonzero(np.isinf(energies)).tolist()
        warnings.warn(f"the energy of head(s) {heads_over} exceeds the largest float at beta = {beta:g} (inf); "
                      "head_log_energies gives ln E_h", MeanfieldWarning, stacklevel=2)
    return energies


def head_log_energies(x: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None,
                      threads: int | None = None, backend: str = "blas", tolerance: float = 1e-12, flash: bool = True) -> np.ndarray:
    r""":math:`\ln E_h` for :math:`\beta>0`, shape ``(H,)``: the energies of :func:`head_energies` in the log domain.

    .. math::

        \ln E_h = \ln\sum_i e^{\ln a_i+\ell^h_i} - \ln 2\beta,\qquad \ell^h_i=\ln\sum_j a_j e^{\beta s^h_{ij}}

    (the energy of Pendharkar, arXiv 2605.04279).  :math:`E_h` grows like :math:`e^{\beta\max s^h_{ij}}`: past
    :math:`\beta\approx709` for :math:`B_h=I` it is ``inf`` in float64, its logarithm a number of the same rows' sums.
    Options as :func:`head_energies`.

    Examples
    --------
    >>> import numpy as np
    >>> from meanfield.heads import HeadStack
    >>> x = np.eye(3)
    >>> float(head_log_energies(x, HeadStack(B=np.eye(3)[None], V=np.eye(3)[None]), beta=1024.0)[0]) > 1000
    True
    """
    x, a = _checked(x, heads, beta, weights)
    if not beta > 0:
        raise ValueError(f"the log of the energy needs beta > 0, got {beta!r}")
    logs = _checked_row_logs(x, a, heads, beta=beta, threads=threads, backend=backend, tolerance=tolerance, flash=flash)
    return log_energies_from_row_logs(logs, beta=beta, weights=a)


def _checked(x: np.ndarray, heads: HeadStack, beta: float, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    x = np.ascontiguousarray(x, dtype=float)
    if x.ndim != 2 or x.shape[1] != heads.d:  # scalar heads (B = λI) had returned the energy of another d without a word
        raise ValueError(f"x must have shape (n, {heads.d}) for heads of dimension {heads.d}, got {x.shape}")
    if isinstance(beta, bool) or not isinstance(beta, (int, float, np.integer, np.floating)) or not np.isfinite(beta):
        raise ValueError(f"beta must be a finite number, got {beta!r}")  # (a negative β is the energy's own continuation)
    return x, np.ascontiguousarray(token_masses(x.shape[0], weights))  # the kernels' check of the masses: shape, finite, ≥ 0


def energy_row_logs(x: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None,
                    threads: int | None = None, backend: str = "blas", tolerance: float = 1e-12, flash: bool = True) -> np.ndarray:
    r"""The heads' log row sums :math:`\ell^h_i=\ln\sum_j a_je^{\beta s^h_{ij}}`, shape ``(H, n)`` (:math:`\beta\ne0`).

    What the attention kernels give as ``row_logs``: :math:`E_h=\frac1{2\beta}\sum_i a_ie^{\ell^h_i}`
    (:func:`energies_from_row_logs`, :func:`log_energies_from_row_logs`).  :func:`head_energies` documents the options
    and how the sums are made.
    """
    x, a = _checked(x, heads, beta, weights)
    return _checked_row_logs(x, a, heads, beta=beta, threads=threads, backend=backend, tolerance=tolerance, flash=flash)


def _checked_row_logs(x: np.ndarray, a: np.ndarray, heads: HeadStack, *, beta: float, threads: int | None, backend: str,
                      tolerance: float, flash: bool) -> np.ndarray:
    """:func:`energy_row_logs` of tokens and masses already checked by :func:`_checked` (a second check had cost a pass)."""
    n = x.shape[0]
    out = np.empty((heads.H, n))
    if beta > 0 and backend in ("auto", "harmonic", "local") and _sphere_rows(x, heads, beta, backend, tolerance):
        return sphere_head_row_logs(x, heads, beta=beta, weights=a, tolerance=tolerance)
    xt = np.ascontiguousarray(x.T)
    sums = flash_row_sums(x, heads, beta=beta, weights=a, threads=threads) if flash else None
    if sums is not None:  # the flash tiles' row sums, without their value products
        for h, (total, shift) in enumerate(sums):
            _row_logs(total, shift.copy(), slice(0, n), lambda idx, B=heads.B[h]: x[idx] @ B, xt, a, beta, out[h])
        return out
    rhs_t = np.ascontiguousarray(np.vstack([xt, np.ones((1, n))]))  # [x | 1]^T
    radius = float(np.sqrt(np.max(np.einsum("ij,ij->i", x, x)))) if n else 0.0
    block = block_rows(n, _BLOCK_ELEMENTS)
    jobs = [slice(s, min(n, s + block)) for s in range(0, n, block)]
    nthreads = max(1, min(threads or blas_threads(n, x.shape[1], heads.H, np.float64), len(jobs)))
    with one_blas_thread():
        for h in range(heads.H):
            xb = x @ heads.B[h]
            shift = abs(beta) * np.sqrt(np.einsum("ij,ij->i", xb, xb)) * radius
            lhs = np.ascontiguousarray(np.hstack([beta * xb, -shift[:, None]]))

            def work(rows: slice, lhs=lhs, xb=xb, shift=shift, logs=out[h]) -> None:
                _energy_rows(rows, lhs, rhs_t, xb, xt, a, shift, beta, logs)

            run_on_threads(work, jobs, nthreads)
    return out


def _sphere_rows(x: np.ndarray, heads: HeadStack, beta: float, backend: str, tolerance: float) -> bool:
    """Whether the velocity of these tokens runs on the sphere kernels (so the energy can use their row sums)."""
    from meanfield.kernels.attention import _sphere_backend

    if backend == "auto":
        return _sphere_backend(x, heads, beta, "softmax", "float64", tolerance=tolerance) in ("harmonic", "local")
    return heads.d == 3 and x.ndim == 2 and x.shape[0] > 0 and bool(np.allclose(np.einsum("ij,ij->i", x, x), 1.0, rtol=0, atol=1e-10))


def energy_multi(x: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None) -> float:
    r""":math:`E_{\mathrm{multi}}=\sum_h E_h` (Thm 11 of arXiv 2605.04279)."""
    return float(np.sum(head_energies(x, heads, beta=beta, weights=weights)))


def energy_theta(x: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None) -> float:
    r"""The energy of Massucco et al. (arXiv 2605.18870), :math:`E(\mu,t)=\int E_\theta(\mu)\,d\Theta_t(\theta)=\sum_h w_h E_h`."""
    return float(heads.w @ head_energies(x, heads, beta=beta, weights=weights))
