r"""Mobilities, energy gradient and metric slope of Massucco et al. (arXiv 2605.18870).

For a measure :math:`\mu=\sum_j a_j\delta_{y_j}` (particles with masses, or
grid cells with their masses at the cell centres) and heads
:math:`(B_h, w_h)` with :math:`B_h` symmetric and :math:`V_h=B_h`:

.. math::

    Z_h(x) &= \int e^{\beta x^\top B_h y}\,d\mu(y), \qquad b_h(x) = 1/Z_h(x)
        \quad\text{(per-head mobility)}\\
    \hat b(x) &= \Big(\sum_h w_h\, b_h(x)^{-1}\Big)^{-1} = \Big(\sum_h w_h Z_h(x)\Big)^{-1}
        \quad\text{(effective mobility: } \Theta\text{-weighted harmonic mean)}\\
    \nabla\frac{\delta E}{\delta\mu}(x) &= \sum_h w_h\int e^{\beta x^\top B_h y}\,B_h y\,d\mu(y)
        \quad\text{for } E(\mu,t)=\sum_h \frac{w_h}{2\beta}\iint e^{\beta x^\top B_h y}\,d\mu\,d\mu\\
    |\partial E|^2(\mu,t) &= \int \hat b\,\big\|P^\perp_x\nabla\tfrac{\delta E}{\delta\mu}\big\|^2\,d\mu
        \quad\text{(metric slope)}

(Massucco et al., arXiv 2605.18870: weighted Wasserstein geometry, effective mobility, energy-dissipation
identity).  The velocity of the transformer PDE is
:math:`\hat b\,\nabla\delta E/\delta\mu=\sum_h w_h\!\int e^{\beta x^\top B_hy}B_hy\,d\mu/\sum_h w_h Z_h`,
which is the ``pooled`` attention kind of :mod:`meanfield.kernels.attention` with :math:`V_h=B_h`
(the tests check this identity).

Everything is computed in row blocks (:math:`O(\text{block}\times m)` memory)
and in log scale: per row and head the scores are shifted by their maximum,
so :math:`\log Z_h`, :math:`\log\hat b` and the product
:math:`\hat b\,\nabla\delta E/\delta\mu` (the "flux") never overflow, even when
:math:`Z_h` itself would.

The own slope diagnostic of Massucco et al. (arXiv 2605.18870) (the authors' public code) is
:func:`authors_slope_squared`, :math:`G^2=\mathrm{mean}_i\big[\|P^\perp v_i\|^2/\mathrm{mean}_h(n/N_{h,i})\big]`.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import logsumexp

from meanfield.analysis.energy import LOG_FLOAT_MAX
from meanfield.kernels.jit import one_blas_thread
from meanfield.kernels.attention import attention_velocity
from meanfield.kernels.inputs import token_masses
from meanfield.heads import HeadStack
from meanfield.geometry.sphere import geodesic_distance, project_tangent

__all__ = [
    "MobilityField",
    "mobility_field",
    "log_partition",
    "head_mobility",
    "effective_mobility",
    "energy_gradient",
    "metric_slope_squared",
    "metric_slope",
    "authors_slope_squared",
    "energy_time_derivative",
    "weighted_transport_cost",
    "lipschitz_bound",
]

_BLOCK_ELEMENTS = 1 << 18
#: below this dimension the score GEMMs (inner size d) run on one BLAS thread:
#: threading a rank-d product costs more than it saves, ten-fold on a loaded machine
_SMALL_D = 32


def _blas_limit(d: int) -> Any:
    if d >= _SMALL_D:
        return contextlib.nullcontext()
    return one_blas_thread()


@dataclass(frozen=True)
class MobilityField:
    r"""Mobilities and the pooled flux at evaluation points :math:`x_i`.

    Attributes
    ----------
    log_Z : (H, n) array
        :math:`\log Z_h(x_i)`.
    log_b : (n,) array
        :math:`\log\hat b(x_i) = -\log\sum_h w_h Z_h(x_i)`.
    flux : (n, d) array
        :math:`\hat b(x_i)\,\nabla\frac{\delta E}{\delta\mu}(x_i)` (ambient, not projected).
    tangent_flux : (n, d) array
        :math:`P^\perp_{x_i}\text{flux}_i`, the flux's part tangent to the sphere.  Where the atoms are the evaluation
        points (``y`` not given; repeated points merged into one atom) each point's own term is projected on its own:
        its isotropic part :math:`\tfrac{\operatorname{tr}B_h}{d}x_i` is tangent-free, so it adds nothing instead of
        leaving the round-off of a difference of two numbers of the flux's size (see :func:`metric_slope_squared`).
        With ``y`` given no atom is taken as a point's own, and that round-off stays.
    """

    log_Z: np.ndarray
    log_b: np.ndarray
    flux: np.ndarray
    tangent_flux: np.ndarray

    @property
    def mobility(self) -> np.ndarray:
        r""":math:`\hat b(x_i)`, shape ``(n,)``."""
        return np.exp(self.log_b)

    def slope_squared(self, weights: np.ndarray) -> float:
        r"""The metric slope :math:`\sum_i a_i\|P^\perp\text{flux}_i\|^2/\hat b_i` of the measure with masses ``weights``.

        Summed in log scale (:func:`_log_domain_sum`): ``inf`` only where the slope itself exceeds the largest float
        (:math:`1/\hat b` can overflow, and :math:`\|P^\perp\text{flux}_i\|^2` underflow, where the sum does not), and
        no ``0 * inf`` for an atom at rest.
        """
        return self.metric_speed_squared(self.tangent_flux, weights)

    def metric_speed_squared(self, velocity: np.ndarray, weights: np.ndarray) -> float:
        r""":math:`\sum_i a_i\|v_i\|^2/\hat b_i`, the squared metric speed of a velocity field at the atoms, in log scale
        (:func:`_log_domain_sum`; for the pooled flow's own velocity it is the slope)."""
        return _log_domain_sum(weights, np.asarray(velocity, dtype=float), -self.log_b)

    @property
    def gradient(self) -> np.ndarray:
        r""":math:`\nabla\frac{\delta E}{\delta\mu}(x_i)=\text{flux}/\hat b`, shape ``(n, d)`` (may overflow for huge :math:`\beta`)."""
        return self.flux * np.exp(-self.log_b)[:, None]


def mobility_field(
    x: np.ndarray,
    heads: HeadStack,
    *,
    beta: float,
    y: np.ndarray | None = None,
    weights: np.ndarray | None = None,
) -> MobilityField:
    r"""Per-head log-partitions, effective mobility and pooled flux in one blocked pass.

    .. math::

        \log Z_h(x_i)=\log\sum_j a_j e^{\beta x_i^\top B_h y_j},\quad
        \log\hat b(x_i) = -\log\sum_h w_h Z_h(x_i),\quad
        \text{flux}_i = \frac{\sum_h w_h\sum_j a_j e^{\beta x_i^\top B_h y_j}B_h y_j}{\sum_h w_h Z_h(x_i)}

    (Massucco et al., arXiv 2605.18870: effective mobility).

    Parameters
    ----------
    x : (n, d) array
        Evaluation points.
    heads : HeadStack
        Score matrices ``B`` (value-aligned: the flux uses :math:`B_h y`, not ``V``) and weights ``w``.
    beta : float
        Inverse temperature :math:`\beta\ge0`.
    y : (m, d) array, optional
        Atoms of the measure (default ``x``: the empirical measure of the particles).
    weights : (m,) array, optional
        Masses :math:`a_j` of the atoms (default :math:`1/m`).

    Examples
    --------
    >>> import numpy as np
    >>> from meanfield.heads import HeadStack
    >>> x = np.eye(3)
    >>> f = mobility_field(x, HeadStack(B=np.eye(3)[None], V=np.eye(3)[None]), beta=1.0)
    >>> bool(np.allclose(f.mobility, 3 / (np.e + 2)))
    True
    """
    x = np.ascontiguousarray(x, dtype=float)
    if y is None:  # repeated atoms merged: each is its copies' own term (a copy had cancelled as an other atom's term)
        points, masses, copies = _merged_atoms(x, token_masses(x.shape[0], weights))
        if copies is not None:
            with _blas_limit(x.shape[1]):
                merged = _mobility_field(points, heads, beta=beta, y=None, weights=masses)
            return MobilityField(log_Z=merged.log_Z[:, copies], log_b=merged.log_b[copies], flux=merged.flux[copies],
                                 tangent_flux=merged.tangent_flux[copies])
    with _blas_limit(x.shape[1]):
        return _mobility_field(x, heads, beta=beta, y=y, weights=weights)


def _merged_atoms(x: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The distinct rows of ``x``, their summed masses, and each row's place among them (None: no row repeats)."""
    points, copies = np.unique(x, axis=0, return_inverse=True)
    if points.shape[0] == x.shape[0]:
        return x, a, None
    copies = copies.reshape(-1)
    return np.ascontiguousarray(points), np.bincount(copies, weights=a, minlength=points.shape[0]), copies


def _log_domain_sum(weights: np.ndarray, vectors: np.ndarray, log_factors: np.ndarray) -> float:
    r""":math:`\sum_i a_i\|u_i\|^2e^{f_i}`, each term in log scale: :math:`\ln a_i+2\ln\|u_i\|+f_i` with the norm taken
    of the row divided by its largest entry (:math:`\|u_i\|^2` underflows from :math:`\|u_i\|\approx10^{-154}`, and
    :math:`e^{f_i}` overflows, where their product is a float); rows with :math:`a_i\|u_i\|=0` add nothing."""
    a = np.asarray(weights, dtype=float)
    top = np.max(np.abs(vectors), axis=1) if vectors.shape[1] else np.zeros(vectors.shape[0])
    with_mass = a > 0
    if np.any(np.isnan(top[with_mass])) or np.any(np.isnan(log_factors[with_mass])):
        return math.nan  # a broken velocity is not a row at rest
    if np.any(np.isposinf(top[with_mass])):
        return math.inf
    live = with_mass & (top > 0)
    if not np.any(live):
        return 0.0
    unit = vectors[live] / top[live, None]
    log_terms = np.log(a[live]) + 2.0 * (np.log(top[live]) + 0.5 * np.log(np.einsum("ij,ij->i", unit, unit))) + log_factors[live]
    with np.errstate(over="ignore"):
        return float(np.exp(logsumexp(log_terms)))


def _without_isotropic_part(M: np.ndarray) -> np.ndarray:
    r""":math:`M-\tfrac{\operatorname{tr}M}{d}I`: the part of a map whose image of :math:`x\in S^{d-1}` has a tangent part."""
    return M - (np.trace(M) / M.shape[0]) * np.eye(M.shape[0])


def _shifted_sums(xr: np.ndarray, B: np.ndarray, yt: np.ndarray, av: np.ndarray, values: np.ndarray, *, beta: float,
                  own: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    r"""One head's sums over the atoms for a block of rows, shifted by each row's largest score :math:`c_i`:
    :math:`c_i`, :math:`\sum_j a_je^{\beta x_i^\top By_j-c_i}`, the same sum of ``values`` rows with the own terms
    (``own``: the block's rows and their own columns) left out, and those own terms' weights apart (None without)."""
    z = (beta * (xr @ B)) @ yt
    c = z.max(axis=1)
    z -= c[:, None]
    np.exp(z, out=z)
    z *= av
    den = z.sum(axis=1)
    own_weight = None
    if own is not None:  # the own terms are left out of the product and added apart
        own_weight = z[own].copy()
        z[own] = 0.0
    return c, den, z @ values, own_weight


def _mobility_field(
    x: np.ndarray, heads: HeadStack, *, beta: float, y: np.ndarray | None, weights: np.ndarray | None
) -> MobilityField:
    own = y is None  # the atoms are the evaluation points: each row has its own term
    y = x if own else np.ascontiguousarray(y, dtype=float)
    n, d = x.shape
    m = y.shape[0]
    a = token_masses(m, weights)
    live = a > 0
    if not np.any(live):
        raise ValueError("the measure has no mass")
    ys, av = y[live], a[live]
    H = heads.H
    log_w = np.log(np.where(heads.w > 0, heads.w, 1.0)) + np.where(heads.w > 0, 0.0, -np.inf)
    yt = np.ascontiguousarray(ys.T)
    keys = [np.ascontiguousarray(ys @ heads.B[h].T) for h in range(H)]  # rows B_h y_j
    if own:
        # row i's own column among the live atoms, and P^perp_{x_i} of its key less the key's isotropic part
        # (tr B_h / d) x_i, which has no tangent part on the sphere
        own_column = np.cumsum(live) - 1
        anisotropic = [_without_isotropic_part(heads.B[h]) for h in range(H)]
    log_Z = np.empty((H, n))
    log_b = np.empty(n)
    flux = np.empty((n, d))
    tangent_flux = np.empty((n, d))
    block = max(1, min(n, _BLOCK_ELEMENTS // max(ys.shape[0], 1)))
    for start in range(0, n, block):
        rows = slice(start, min(n, start + block))
        xr = x[rows]
        if own:
            with_own = np.flatnonzero(live[rows])  # rows (in the block) whose own atom has mass
            own_cols = own_column[start + with_own]
        nums, own_weights, shifts = [], [], []
        for h in range(H):
            c, den, num, own_weight = _shifted_sums(xr, heads.B[h], yt, av, keys[h], beta=beta,
                                                    own=(with_own, own_cols) if own else None)
            log_Z[h, rows] = c + np.log(den)
            own_weights.append(own_weight)
            nums.append(num)  # scaled by e^{-c}
            shifts.append(c)
        # combine heads: log sum_h w_h Z_h by log-sum-exp; flux = sum_h w_h e^{c_h} num_h / that
        log_terms = log_w[:, None] + log_Z[:, rows]
        top = log_terms.max(axis=0)
        log_total = top + np.log(np.sum(np.exp(log_terms - top), axis=0))
        others = np.zeros((rows.stop - rows.start, d))
        own_part = np.zeros((with_own.size, d)) if own else None
        own_tangent = np.zeros((with_own.size, d)) if own else None
        for h in range(H):
            scale = np.exp(log_w[h] + shifts[h] - log_total)
            others += scale[:, None] * nums[h]
            if own:
                factor = (scale[with_own] * own_weights[h])[:, None]
                xo = xr[with_own]
                own_part += factor * (xo @ heads.B[h].T)
                own_tangent += factor * project_tangent(xo, xo @ anisotropic[h].T)
        tangent = project_tangent(xr, others)
        if own:
            others[with_own] += own_part
            tangent[with_own] += own_tangent
        flux[rows] = others
        tangent_flux[rows] = tangent
        log_b[rows] = -log_total
    return MobilityField(log_Z=log_Z, log_b=log_b, flux=flux, tangent_flux=tangent_flux)


def log_partition(
    x: np.ndarray, heads: HeadStack, *, beta: float, y: np.ndarray | None = None, weights: np.ndarray | None = None
) -> np.ndarray:
    r""":math:`\log Z_h(x_i)`, shape ``(H, n)`` (see :func:`mobility_field`)."""
    return mobility_field(x, heads, beta=beta, y=y, weights=weights).log_Z


def head_mobility(
    x: np.ndarray, heads: HeadStack, *, beta: float, y: np.ndarray | None = None, weights: np.ndarray | None = None
) -> np.ndarray:
    r"""Per-head mobilities :math:`b_h(x_i)=1/Z_h(x_i)`, shape ``(H, n)`` (Massucco et al., arXiv 2605.18870)."""
    return np.exp(-log_partition(x, heads, beta=beta, y=y, weights=weights))


def effective_mobility(
    x: np.ndarray, heads: HeadStack, *, beta: float, y: np.ndarray | None = None, weights: np.ndarray | None = None
) -> np.ndarray:
    r"""Effective mobility :math:`\hat b(x_i)=(\sum_h w_h b_h(x_i)^{-1})^{-1}`, shape ``(n,)`` (Massucco et al., arXiv 2605.18870)."""
    return mobility_field(x, heads, beta=beta, y=y, weights=weights).mobility


def energy_gradient(
    x: np.ndarray, heads: HeadStack, *, beta: float, y: np.ndarray | None = None, weights: np.ndarray | None = None
) -> np.ndarray:
    r""":math:`\nabla\frac{\delta E}{\delta\mu}(x_i)=\sum_h w_h\int e^{\beta x_i^\top B_h y}B_h y\,d\mu(y)`, shape ``(n, d)`` (ambient)."""
    return mobility_field(x, heads, beta=beta, y=y, weights=weights).gradient




def metric_slope_squared(
    x: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None
) -> float:
    r"""Metric slope :math:`|\partial E|^2=\int\hat b\,\|P^\perp\nabla\frac{\delta E}{\delta\mu}\|^2d\mu` (the energy–dissipation identity of Massucco et al., arXiv 2605.18870).

    Computed as :math:`\sum_i a_i\|P^\perp\text{flux}_i\|^2/\hat b_i` (flux :math:`=\hat b\nabla\delta E/\delta\mu`).

    At large :math:`\beta` a token's own key :math:`B_hx_i` dominates its flux; the tangent part of the whole flux would
    keep :math:`\sim10^{-16}` of the flux's size only (relative errors 3e-6 at :math:`\beta=300` and 2e4 at 500, 6
    tokens on :math:`S^2`, :math:`B=I`).  The own term is therefore projected apart (:attr:`MobilityField.tangent_flux`):
    measured against 60-digit sums on tokens at least 0.38 rad apart, 2e-15 relative at :math:`\beta=100`, 3e-14 at
    300, 5e-14 at 500 (:math:`B=I`), 2.5e-13 at 500 for a general symmetric :math:`B` (the :math:`\beta\,\epsilon` of
    the scores' round-off; an independent check at 1100 digits found up to 8e-14 at 500 and 1.5e-13 at 650–700).
    Repeated atoms are merged first (one atom of their summed mass, the same measure); atoms :math:`\delta` apart keep
    a relative error of about :math:`\epsilon/\delta`, the conditioning of their difference.  The sum is taken in log
    scale: the slope, whose terms grow like :math:`e^{\beta(2\cos\theta-1)}` (:math:`\theta` the angle to the nearest
    atom), is ``inf`` only where it exceeds the largest float.

    Parameters
    ----------
    x : (n, d) array
        Atoms of :math:`\mu` (particles, or cell centres).
    weights : (n,) array, optional
        Their masses (default :math:`1/n`).
    """
    x = np.ascontiguousarray(x, dtype=float)
    x, a, _ = _merged_atoms(x, token_masses(x.shape[0], weights))  # a repeated atom: one atom of their summed mass
    return mobility_field(x, heads, beta=beta, weights=a).slope_squared(a)


def metric_slope(x: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None) -> float:
    r"""Upper gradient :math:`|\partial E|(\mu,t)` (square root of :func:`metric_slope_squared`)."""
    return math.sqrt(metric_slope_squared(x, heads, beta=beta, weights=weights))


def authors_slope_squared(
    x: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray | None = None, projected: bool = True
) -> float:
    r"""The slope diagnostic :math:`G^2` of Massucco et al. (arXiv 2605.18870), in the authors' convention.

    .. math::

        G^2 = \frac1n\sum_i \frac{\|P^\perp_{x_i} v_i\|^2}{\sum_h w_h\, n/N_{h,i}},\qquad
        v_i = \sum_h w_h \sum_j \operatorname{softmax}_j(\beta s^h_{ij})\,V_h x_j,\qquad
        N_{h,i} = \sum_j e^{\beta s^h_{ij}}

    with :math:`w_h=1/H` (heads averaged).  :math:`n/N_{h,i}=b_h(x_i)` is head
    :math:`h`'s mobility, so the denominator is the mean per-head mobility
    :math:`\bar b_i` and :math:`G^2=\mathrm{mean}_i\|P^\perp v_i\|^2/\bar b_i` is
    the metric-slope formula :math:`\int\|v\|^2/b\,d\mu` with the authors'
    velocity and mobility (it equals :func:`metric_slope_squared` for ``H = 1``).
    We read :math:`\mathrm{mean}_i\|v_i\|^2/\mathrm{mean}_h(n/N_{h,i})` as the mean
    over tokens of the per-token ratio.  With masses :math:`a_j`,
    :math:`n/N_{h,i}` becomes :math:`1/Z_h(x_i)` and the mean is :math:`\sum_i a_i`.

    Parameters
    ----------
    projected : bool
        Use :math:`P^\perp v_i` (the motion on the sphere, default) or the ambient :math:`v_i`.
    """
    x = np.ascontiguousarray(x, dtype=float)
    x, a, _ = _merged_atoms(x, token_masses(x.shape[0], weights))  # a repeated token: one of their summed mass
    scaled = HeadStack(B=heads.B, V=heads.V * heads.w[:, None, None], w=heads.w)
    # the softmax kernel's row sums are the log-partitions ln Z_h(x_i) (row_logs): one pass gives v and the mobilities,
    # where the NumPy reference and a second blocked pass for ln Z had taken 3.6-17x as long (n = 200-1000, H = 1-16)
    log_Z = np.full((heads.H, x.shape[0]), np.nan)
    v = attention_velocity(x, scaled, beta=beta, kind="softmax", weights=a, row_logs=log_Z)
    if np.isnan(log_Z).any():  # a backend that does not fill them
        log_Z = log_partition(x, heads, beta=beta, weights=a)
    if projected:
        ambient = v
        v = project_tangent(x, ambient)
        # rows where the tangent part lost digits to cancellation and the own term carries at least half a head's weight
        # (ln of its softmax weight: ln a_i + β x_i^T B_h x_i - ln Z_h(x_i)): their tangent parts with that term apart
        cancelled = np.flatnonzero(np.einsum("ij,ij->i", v, v) < _CANCELLATION**2 * np.einsum("ij,ij->i", ambient, ambient))
        xc = x[cancelled]
        with np.errstate(divide="ignore"):
            own_log_weight = np.log(a[cancelled]) + beta * np.einsum("hid,id->hi", xc @ heads.B, xc) - log_Z[:, cancelled]
        lost = cancelled[own_log_weight.max(axis=0, initial=-np.inf) > -math.log(2.0)]
        if lost.size:
            v[lost] = _softmax_tangent_rows(x, lost, scaled, beta=beta, weights=a)
    # ln Σ_h w_h / Z_h over the heads with w_h > 0, by log-sum-exp: a head of weight 0 whose Z_h underflows had given
    # 0·∞ = NaN, a tiny w_h with a huge 1/Z_h 0.0 (e^{-ln Z} overflowing where its product with w_h is finite)
    live = heads.w > 0
    log_mean_b = logsumexp(np.log(heads.w[live])[:, None] - log_Z[live], axis=0)
    return _log_domain_sum(a, v, -log_mean_b)  # (a*|v|²*e^{-ln b̄}: 0·inf for a tracer, |v|² underflowing to 0)


#: a projected velocity below this fraction of the ambient one has lost that many digits to cancellation
_CANCELLATION = 1e-3


def _softmax_tangent_rows(x: np.ndarray, rows: np.ndarray, heads: HeadStack, *, beta: float, weights: np.ndarray) -> np.ndarray:
    r"""Rows ``rows`` of :math:`P^\perp_{x_i}\sum_h\sum_j\operatorname{softmax}_j(\beta x_i^\top B_hx_j)V_hx_j`, own term apart.

    The own term :math:`p^h_{ii}V_hx_i` enters through :math:`P^\perp_{x_i}(V_h-\tfrac{\operatorname{tr}V_h}{d}I)x_i`
    only (the isotropic part of its value is normal to the sphere), and the others' sum is projected without it: no
    difference of two numbers of the size of the own term (:func:`authors_slope_squared` at large :math:`\beta`).
    """
    live = weights > 0
    xs, av = x[live], weights[live]
    xst = np.ascontiguousarray(xs.T)
    own_cols = (np.cumsum(live) - 1)[rows]
    here = np.arange(rows.size)
    xr = x[rows]
    tangent = np.zeros((rows.size, x.shape[1]))
    block = max(1, _BLOCK_ELEMENTS // max(xs.shape[0], 1))
    for h in range(heads.H):
        values = xs @ heads.V[h].T
        own_tangent = project_tangent(xr, xr @ _without_isotropic_part(heads.V[h]).T)
        for start in range(0, rows.size, block):
            part = slice(start, min(rows.size, start + block))
            _, den, num, own = _shifted_sums(xr[part], heads.B[h], xst, av, values, beta=beta,
                                             own=(here[part] - start, own_cols[part]))
            tangent[part] += (project_tangent(xr[part], num) + own[:, None] * own_tangent[part]) / den[:, None]
    return tangent


def energy_time_derivative(
    x: np.ndarray,
    heads: HeadStack,
    dB: np.ndarray,
    *,
    beta: float,
    weights: np.ndarray | None = None,
) -> float:
    r"""Explicit time derivative :math:`\partial_t E(\mu,t)` at fixed :math:`\mu` (the energy–dissipation identity of Massucco et al., arXiv 2605.18870).

    .. math::

        \partial_t E = \sum_h \frac{w_h}{2}\iint e^{\beta x^\top B_h y}\, x^\top\dot B_h y\,d\mu(x)\,d\mu(y)

    (the head weights :math:`w_h` are constant in time); at :math:`\beta=0` the
    energy :math:`\tfrac12\iint x^\top B y` gives the same formula.  Each head's inner integral is an attention
    sum, :math:`\partial_tE_h=\tfrac12\sum_ia_i\,D_h(x_i)\,x_i^\top\dot B_h\,m_h(x_i)` with
    :math:`D_h(x)=\sum_ja_je^{\beta x^\top B_hx_j}` and :math:`m_h` the softmax mean of the tokens under
    :math:`B_h`, so it is one softmax kernel call per head (:math:`V=I`, with its row sums
    :math:`\ln D_h` in log scale): linear in the tokens on :math:`S^2` (harmonic, local kernels), where the dense
    pair sum had cost a time-dependent run as much again as its steps (n = 4000).

    Parameters
    ----------
    dB : (H, d, d) array
        :math:`\dot B_h(t)` (e.g. from :func:`meanfield.heads.schedules.schedule_derivative`).
    """
    x = np.ascontiguousarray(x, dtype=float)
    n = x.shape[0]
    a = token_masses(n, weights)
    dB = np.asarray(dB, dtype=float)
    if not np.any(a > 0):  # no mass: no energy (the kernels refuse such masses for the softmax they are asked)
        return 0.0
    return _combined_heads(_kernel_head_parts(x, heads, dB, beta=beta, a=a))


def _kernel_head_parts(x: np.ndarray, heads: HeadStack, dB: np.ndarray, *, beta: float,
                       a: np.ndarray) -> list[tuple[float, float]]:
    r"""Per head ``(shift, scaled sum)`` of :math:`\partial_tE_h` from one softmax kernel call each (``backend="auto"``
    asked for ``row_logs`` takes a kernel that fills them; NaN tokens leave NaN sums, and a NaN result)."""
    n, d = x.shape
    identity = np.eye(d)[None]
    parts: list[tuple[float, float]] = []
    for h in range(heads.H):
        if heads.w[h] == 0 or not np.any(dB[h]) or n == 0:
            continue
        logs = np.full((1, n), np.nan)
        mean = attention_velocity(x, HeadStack(B=heads.B[h:h + 1], V=identity), beta=beta, kind="softmax", weights=a,
                                  row_logs=logs)
        rate = np.einsum("ij,ij->i", x @ dB[h], mean)  # x_i^T dB_h m_h(x_i)
        shift = float(logs.max())
        parts.append((shift, float(heads.w[h] * 0.5 * np.sum(a * np.exp(logs[0] - shift) * rate))))
    return parts


def _combined_heads(heads_parts: list[tuple[float, float]]) -> float:
    """The heads' ``(shift, scaled sum)`` added at their largest shift: heads past float's range with opposite signs
    had given inf - inf = nan; ±inf where the sum itself passes the floats, as the other slopes give."""
    if any(math.isnan(s) or math.isnan(c) for c, s in heads_parts):  # (NaN tokens or dB had read as ±inf)
        return math.nan
    top = max((c for c, s in heads_parts if s != 0.0), default=0.0)
    scaled = sum(s * math.exp(c - top) for c, s in heads_parts if s != 0.0)  # (a head of sum 0 may lie above top)
    if scaled == 0.0:
        return 0.0
    log_size = top + math.log(abs(scaled))
    return math.copysign(math.exp(log_size) if log_size < LOG_FLOAT_MAX else math.inf, scaled)


def weighted_transport_cost(
    x0: np.ndarray, x1: np.ndarray, log_b: np.ndarray, *, weights: np.ndarray | None = None
) -> float:
    r"""Particle transport cost :math:`\sum_i a_i\,d_S(x^0_i,x^1_i)^2/\hat b(x^0_i)` of one step.

    The cost of moving every particle along its geodesic with the mobility
    frozen at the start: the estimate of :math:`W_{m,2}^2(\mu_0,\mu_1)` that the
    particle JKO step minimises (an upper bound of the weighted distance with
    frozen mobility; equal to it to leading order for small steps, where the
    identity coupling is optimal).

    Parameters
    ----------
    x0, x1 : (n, d) arrays
    log_b : (n,) array
        :math:`\log\hat b` at the particles (frozen mobility).
    weights : (n,) array, optional
    """
    a = token_masses(np.asarray(x0).shape[0], weights)
    dist = geodesic_distance(x0, x1)
    return float(np.sum(a * dist * dist * np.exp(-np.asarray(log_b, dtype=float))))


def lipschitz_bound(heads: HeadStack, *, beta: float) -> float:
    r"""A Lipschitz constant :math:`L` of the pooled particle field, for Grönwall's estimate.

    .. math::

        L = 2M + \beta M^2 + (M + 2\beta M^2)\,e^{\beta M},\qquad M=\max_h\|B_h\|_{op}

    For particles with masses :math:`a_i` and the field
    :math:`F_i(X)=P^\perp_{x_i}\hat b\nabla\frac{\delta E}{\delta\mu}(x_i)` (value-aligned
    heads), :math:`\|F(X)-F(Y)\|_a\le L\|X-Y\|_a` in
    :math:`\|X\|_a^2=\sum_i a_i\|x_i\|^2`, hence
    :math:`W_2(\mu_t,\nu_t)\le\|X_t-Y_t\|_a\le e^{Lt}\|X_0-Y_0\|_a` (Massucco et al., arXiv 2605.18870: stability under input perturbations; chordal cost).  Derivation: the
    tangent projection adds :math:`2M` (:math:`\|v\|\le M`); the query
    derivative is :math:`\beta` times a covariance of the vectors :math:`B_hx_j`
    (:math:`\le\beta M^2`); the key derivatives have blocks
    :math:`\le\pi_{ij}(M+2\beta M^2)` with attention weights
    :math:`\pi_{ij}\le a_je^{2\beta M}` and :math:`\sum_j\pi_{ij}=1`, and Schur's
    test in the :math:`a`-weighted norm bounds that block matrix by
    :math:`(M+2\beta M^2)e^{\beta M}`.  The bound is far from sharp.
    """
    M = max(float(np.linalg.norm(heads.B[h], 2)) for h in range(heads.H))
    if beta * M > LOG_FLOAT_MAX:  # e^{βM} past the largest float (math.exp had raised OverflowError)
        return math.inf
    return 2 * M + beta * M * M + (M + 2 * beta * M * M) * math.exp(beta * M)
