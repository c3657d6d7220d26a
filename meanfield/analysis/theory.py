r"""Closed forms of Pendharkar (arXiv 2605.04279) (multi-head gradient-flow structure), pure NumPy/SciPy.

Nothing here runs a particle or grid solver: these are the formulas the solvers
are checked against, each with an independent numerical twin where the paper's
statement invites one.

Contents, by theorem of Pendharkar (arXiv 2605.04279):

* **Thm 19** (critical inverse temperature; scalar heads :math:`B_h=\alpha I`,
  orthogonal tokens, :math:`n\le d`): :func:`c_star`, :func:`head_cosine`,
  :func:`beta_star` and its root-finding twin :func:`beta_star_numeric`.
* **Thm 22** (heterogeneous scalar heads :math:`B_h=V_h=\lambda_h I`, softmax,
  equiangular tokens :math:`\langle x_i,x_j\rangle=\gamma`): the rate
  :func:`equiangular_rate`, the right-hand side :func:`equiangular_rhs`, the
  solvers :func:`solve_equiangular` / :func:`solve_equiangular_log_gap`, the
  early-rate function :func:`phi`, :func:`early_rate`, its inflection point
  :func:`lambda_c`, :func:`superadditivity_gain` and :func:`late_rate`.
* **Thm 25** (linearised clustering time from random initialisation in high
  dimension): the predicted scalings are

  .. math::

      T_{\mathrm{softmax}} = O(n), \qquad T_{\mathrm{ReLU}} = O(n\log d),

  because softmax attention has a positive, dimension-free drive at
  :math:`\gamma = 0` while :math:`\mathrm{ReLU}(0)=0` leaves ReLU attention only
  the :math:`O(1/\sqrt d)` fluctuations of the random inner products.
  :func:`clustering_time_scale` returns these scales (without constants);
  :func:`fit_power_law` and :func:`fit_linear` fit measured clustering times.
* **Thm 27** (attention entropy, scalar equiangular case):
  :func:`equiangular_entropy`, non-decreasing along the Thm 22 flow, with limit
  :math:`\log n`.
* **Thm 39** (approximate orthogonality :math:`\|B_{h'}B_h\|_{op}\le\delta`):
  :func:`head_overlap`, :func:`overlap_matrix` and :func:`principal_angles`.

Invalid arguments raise :class:`meanfield.errors.ConfigError` (a ``ValueError``)
whose key is the parameter name (``"n"``, ``"H"``, ``"alpha"``, ...).

All functions are written to be free of floating-point overflow and underflow
warnings (they run under ``np.seterr(all="raise")``): exponentials are only
ever taken of non-positive arguments, or inside ``np.errstate`` where the
limit is the right answer.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.integrate import solve_ivp
from scipy.linalg import subspace_angles
from scipy.optimize import brentq

from meanfield.errors import ConfigError

__all__ = [
    # Thm 19
    "c_star",
    "head_cosine",
    "beta_star",
    "beta_star_numeric",
    # Thm 22
    "equiangular_rate",
    "equiangular_rhs",
    "solve_equiangular",
    "solve_equiangular_log_gap",
    "phi",
    "early_rate",
    "equal_split_rate",
    "lambda_c",
    "superadditivity_gain",
    "late_rate",
    # Thm 25
    "clustering_time_scale",
    "fit_power_law",
    "fit_linear",
    # Thm 27
    "equiangular_entropy",
    # Thm 39
    "overlap_matrix",
    "head_overlap",
    "principal_angles",
]


# --------------------------------------------------------------------------- #
# validation helpers
# --------------------------------------------------------------------------- #
def _finite(value: float, key: str) -> float:
    if isinstance(value, (bool, np.bool_, str, bytes)):  # (True had been taken as 1, "2" as 2: float() takes both)
        raise ConfigError(key, f"must be a real number, got {value!r}")
    try:
        if np.iscomplexobj(value):  # float() of a NumPy complex had dropped the imaginary part with a warning
            raise TypeError
        x = float(value)
    except (TypeError, ValueError):
        raise ConfigError(key, f"must be a real number, got {value!r}") from None
    except OverflowError:  # an integer beyond float's range (10**400)
        raise ConfigError(key, f"must be finite (at most about 1.8e308), got an integer of {len(str(abs(int(value))))} digits") from None
    if not math.isfinite(x):
        raise ConfigError(key, f"must be finite, got {value!r}")
    return x


#: the largest H·max|λ_h| the Thm 22 functions take: their sums of head strengths stay finite
LAMBDA_SUM_LIMIT = 1e300


def _reals(value: ArrayLike, key: str) -> NDArray[np.float64]:
    """``value`` as a float array, finite: a ``ConfigError`` naming ``key`` otherwise (NumPy's own error named nothing,
    and NaN had passed through to a NaN result)."""
    try:
        if np.iscomplexobj(value):  # a complex array had lost its imaginary part with a mere ComplexWarning
            raise TypeError
        given = np.asarray(value)  # (True had been taken as 1, "2" as 2; an int past int64 is an object array: kept)
        if isinstance(value, (str, bytes)) or given.dtype.kind in "bUS" or (
                given.dtype.kind == "O" and any(isinstance(v, (str, bytes, bool, np.bool_)) for v in given.ravel())):
            raise TypeError
        x = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(key, f"must be real numbers, got {value!r}") from None
    except OverflowError:  # an integer beyond float's range (10**400)
        raise ConfigError(key, "must be finite (at most about 1.8e308), got an integer beyond float's range") from None
    if not np.all(np.isfinite(x)):
        raise ConfigError(key, f"must be finite, got {value!r}")
    return x


def _check_gammas(gamma: ArrayLike, m: float) -> NDArray[np.float64]:
    r"""Common inner products of ``m + 1`` equiangular unit tokens: finite, in :math:`[-1/m, 1]` (the Gram matrix
    :math:`(1-\gamma)I + \gamma\mathbf 1\mathbf 1^\top` is positive semi-definite there), to round-off."""
    g = _reals(gamma, "gamma")
    if np.any(g > 1.0 + 1e-12) or np.any(g < -1.0 / m - 1e-12):
        raise ConfigError("gamma", f"equiangular unit tokens have -1/(n-1) = {-1.0 / m:.6g} <= gamma <= 1, got {gamma!r}")
    return g


def _check_n(n: float) -> float:
    x = _finite(n, "n")
    if x < 2:  # (a real n is taken: the closed forms extend to it, and the figures draw them as curves in n)
        raise ConfigError("n", f"the number of tokens must be >= 2, got {n!r}")
    return x


def _check_H(H: float) -> float:
    x = _finite(H, "H")
    if x < 1:
        raise ConfigError("H", f"the number of heads must be >= 1, got {H!r}")
    return x


def _check_positive(value: float, key: str) -> float:
    x = _finite(value, key)
    if x <= 0:
        raise ConfigError(key, f"must be > 0, got {value!r}")
    return x


def _check_nonnegative(value: float, key: str) -> float:
    x = _finite(value, key)
    if x < 0:
        raise ConfigError(key, f"must be >= 0, got {value!r}")
    return x


def _check_lambdas(lambdas: ArrayLike) -> NDArray[np.float64]:
    lam = np.atleast_1d(_reals(lambdas, "lambdas"))  # real and finite, named
    if lam.ndim != 1 or lam.size == 0:
        raise ConfigError("lambdas", f"must be a non-empty 1-D list of head strengths, got shape {lam.shape}")
    if lam.size * float(np.max(np.abs(lam))) > LAMBDA_SUM_LIMIT:  # their sum (the late rate, the equal split) had overflowed
        raise ConfigError("lambdas", f"head strengths must keep their sum below {LAMBDA_SUM_LIMIT:.0e}: at most "
                                     f"{LAMBDA_SUM_LIMIT / lam.size:.3g} each for {lam.size} heads, got {float(np.max(np.abs(lam))):.3g}")
    return lam


def _out(x: NDArray[np.float64]) -> float | NDArray[np.float64]:
    """A 0-d result as a Python float, anything else unchanged."""
    return float(x) if np.ndim(x) == 0 else x


def _inv_exp_plus(x: NDArray[np.float64], m: float) -> NDArray[np.float64]:
    r""":math:`1/(e^{x}+m)` for any real ``x`` and ``m >= 0``, without overflow.

    For :math:`x>0` it is evaluated as :math:`e^{-x}/(1+m e^{-x})`.
    """
    x = np.asarray(x, dtype=float)
    with np.errstate(under="ignore"):
        e = np.exp(-np.abs(x))  # in (0, 1]
        return np.where(x > 0, e / (1.0 + m * e), 1.0 / (e + m))


# --------------------------------------------------------------------------- #
# Thm 19: critical inverse temperature
# --------------------------------------------------------------------------- #
def c_star(H: ArrayLike) -> float | NDArray[np.float64]:
    r"""Critical head/token cosine :math:`c^*(H)` (Thm 19 of arXiv 2605.04279).

    .. math::

        c^*(H) = \frac{\sqrt{(H-1)^2+4}-(H-1)}{2}
               = \frac{2}{\sqrt{(H-1)^2+4}+(H-1)},

    the positive root of :math:`c^2+(H-1)c-1=0`.  The first form is evaluated for
    :math:`H\le2` (it rounds :math:`c^*(2)` correctly) and the second for
    :math:`H>2` (no cancellation for large ``H``); both are within one ulp.  :math:`c^*(1)=1`,
    :math:`c^*(2)=1/\varphi` (golden ratio), :math:`c^*(H)\sim 1/H`.

    Parameters
    ----------
    H : float or array_like, >= 1
        Number of heads (real values are accepted).

    Returns
    -------
    float or ndarray, same shape as ``H``

    Examples
    --------
    >>> round(c_star(2), 12)
    0.61803398875
    >>> c_star(1)
    1.0
    """
    h = _reals(H, "H")
    if np.any(h < 1):
        raise ConfigError("H", f"the number of heads must be finite and >= 1, got {H!r}")
    a = h - 1.0
    r = np.hypot(a, 2.0)  # (a * a overflowed above H ≈ 1.3e154, and c* came out 0)
    # 2/(r + a) as 1/(r/2 + a/2), the same float (halving is exact): r + a overflowed above H ≈ 9e307, c* came out 0
    # and beta_star(1e308, ...) had been 'math domain error'
    half = np.hypot(a / 2.0, 1.0)
    return _out(np.where(a <= 1.0, (r - a) / 2.0, 1.0 / (half + a / 2.0)))


def head_cosine(beta: ArrayLike, *, n: float, alpha: float) -> float | NDArray[np.float64]:
    r"""Cosine between one head's output and its token (Thm 19 of arXiv 2605.04279).

    .. math::

        c(\beta) = \frac{e^{\alpha\beta}}{\sqrt{e^{2\alpha\beta}+n-1}}
                 = \bigl(1+(n-1)e^{-2\alpha\beta}\bigr)^{-1/2},

    for scalar heads :math:`B_h=V_h=\alpha I` and orthogonal tokens (:math:`n\le d`).
    It increases from :math:`1/\sqrt n` at :math:`\beta=0` to 1 as
    :math:`\beta\to\infty`.  Evaluated with the second form for
    :math:`\alpha\beta\ge0` and the first for :math:`\alpha\beta<0` (no overflow).

    Parameters
    ----------
    beta : float or array_like
        Inverse temperature(s); any real value is accepted.
    n : float, >= 2
        Number of tokens.
    alpha : float, > 0
        Common head strength.

    Returns
    -------
    float or ndarray, same shape as ``beta``

    Examples
    --------
    >>> head_cosine(0.0, n=4, alpha=1.0)
    0.5
    """
    m = _check_n(n) - 1.0
    a = _check_positive(alpha, "alpha")
    b = _reals(beta, "beta")
    x = a * b
    with np.errstate(under="ignore"):
        e = np.exp(-np.abs(x))  # in (0, 1]
        e2 = e * e
        return _out(np.where(x >= 0, 1.0 / np.sqrt(1.0 + m * e2), e / np.sqrt(e2 + m)))


def beta_star(H: float, n: float, alpha: float) -> float:
    r"""Critical inverse temperature :math:`\beta^*` in closed form (Thm 19 of arXiv 2605.04279).

    .. math::

        \beta^* = \frac{1}{2\alpha}\ln\frac{c^*(H)^2\,(n-1)}{1-c^*(H)^2}
                = \frac{1}{2\alpha}\ln\frac{c^*(H)\,(n-1)}{H-1},

    the second form using :math:`1-c^{*2}=(H-1)c^*` (evaluated: no cancellation).
    It is the solution of :math:`c(\beta)=c^*(H)` (:func:`head_cosine`).  In the
    paper's convention per-head monotonicity (radial dominance, Condition 8) holds for
    :math:`\beta<\beta^*`, i.e. while :math:`c(\beta)<c^*(H)`.

    The value is returned as is; callers interpret it:

    * ``H == 1``: :math:`c^*=1` and :math:`\beta^*=+\infty` (a single head has no
      radial shadows; its energy is monotone for all :math:`\beta`);
    * :math:`\beta^*\le 0` (when :math:`c^*(H)^2\le 1/n`, e.g. ``H=2, n=2``):
      :math:`c(\beta)\ge c(0)=1/\sqrt n\ge c^*` for every :math:`\beta\ge0`, so the
      criterion holds for no :math:`\beta>0`.

    Parameters
    ----------
    H : float, >= 1
        Number of heads.
    n : float, >= 2
        Number of (orthogonal) tokens, :math:`n\le d`.
    alpha : float, > 0
        Common scalar head strength :math:`\lambda_h=\alpha`.

    Returns
    -------
    float
        :math:`\beta^*` (may be negative, or ``inf`` for ``H == 1``).

    Examples
    --------
    >>> round(beta_star(2, 16, 1.0), 10)
    1.113419188
    >>> beta_star(1, 16, 1.0)
    inf
    """
    h = _check_H(H)
    m = _check_n(n) - 1.0
    a = _check_positive(alpha, "alpha")
    if h == 1.0:
        return math.inf
    c = float(c_star(h))
    return (math.log(c) + math.log(m) - math.log(h - 1.0)) / 2.0 / a  # 2α overflowed for α > 9e307


def beta_star_numeric(H: float, n: float, alpha: float) -> float:
    r"""Critical inverse temperature as the root of :math:`c(\beta)=c^*(H)` (Thm 19 of arXiv 2605.04279).

    .. math::

        g(\beta) = -\tfrac12\,\mathrm{logaddexp}\bigl(0,\ \ln(n-1)-2\alpha\beta\bigr)
                   - \ln c^*(H) = 0,

    i.e. :math:`\ln c(\beta)=\ln c^*(H)`, solved with :func:`scipy.optimize.brentq`
    after a doubling search for a sign change.  It uses neither the closed form
    nor the identity :math:`1-c^{*2}=(H-1)c^*`, so it is an independent check of
    :func:`beta_star`.  ``H == 1`` gives ``inf`` (:math:`g<0` for all
    :math:`\beta`).

    Parameters
    ----------
    H : float, >= 1
    n : float, >= 2
    alpha : float, > 0

    Returns
    -------
    float

    Examples
    --------
    >>> abs(beta_star_numeric(2, 16, 1.0) - beta_star(2, 16, 1.0)) < 1e-12
    True
    """
    h = _check_H(H)
    log_m = math.log(_check_n(n) - 1.0)
    a = _check_positive(alpha, "alpha")
    log_c = math.log(float(c_star(h)))
    if log_c >= 0.0:  # H == 1: c* = 1 is never reached
        return math.inf

    def g(u: float) -> float:  # in u = αβ, so that no α sends the search past the floats (α = 1e-310: ±inf, then NaN)
        return -0.5 * float(np.logaddexp(0.0, log_m - 2.0 * u)) - log_c

    lo, hi = -1.0, 1.0
    for _ in range(2100):
        if g(lo) < 0.0:
            break
        lo *= 2.0
    for _ in range(2100):
        if g(hi) > 0.0:
            break
        hi *= 2.0
    return float(brentq(g, lo, hi, xtol=1e-300, rtol=4.0 * np.finfo(float).eps, maxiter=1000)) / a  # inf past the floats


# --------------------------------------------------------------------------- #
# Thm 22: heterogeneous scalar heads, equiangular tokens
# --------------------------------------------------------------------------- #
def _rate_from_gap(eps: NDArray[np.float64], lam: NDArray[np.float64], beta: float, m: float) -> NDArray[np.float64]:
    r""":math:`A` as a function of the gap :math:`\varepsilon=1-\gamma`:
    :math:`\sum_h \lambda_h/(e^{\beta\lambda_h\varepsilon}+n-1)`."""
    eps = np.asarray(eps, dtype=float)
    x = (beta * lam) * eps[..., None]
    return np.sum(lam * _inv_exp_plus(x, m), axis=-1)


def equiangular_rate(gamma: ArrayLike, *, lambdas: ArrayLike, beta: float, n: float) -> float | NDArray[np.float64]:
    r"""Rate function :math:`A(\gamma)` of the equiangular ODE (Thm 22 of arXiv 2605.04279).

    .. math::

        A(\gamma) = \sum_{h=1}^H \frac{\lambda_h e^{\beta\lambda_h\gamma}}
                         {e^{\beta\lambda_h}+(n-1)e^{\beta\lambda_h\gamma}}
                  = \sum_{h=1}^H \frac{\lambda_h}{e^{\beta\lambda_h(1-\gamma)}+n-1}.

    The second (overflow-free) form is evaluated.  :math:`A(1)=\Lambda/n`.

    Parameters
    ----------
    gamma : float or array_like
        Common off-diagonal inner product(s) :math:`\gamma\in[-1/(n-1),1]`.
    lambdas : (H,) array_like
        Scalar head strengths :math:`\lambda_h` (:math:`B_h=V_h=\lambda_h I`).
    beta : float, >= 0
        Inverse temperature.
    n : float, >= 2
        Number of tokens (:math:`n\le d`).

    Returns
    -------
    float or ndarray, same shape as ``gamma``

    Examples
    --------
    >>> round(equiangular_rate(1.0, lambdas=[0.5, 1.5], beta=2.0, n=8), 12)
    0.25
    """
    lam = _check_lambdas(lambdas)
    b = _check_nonnegative(beta, "beta")
    m = _check_n(n) - 1.0
    g = _reals(gamma, "gamma")  # (the ODE's stages may step a hair past the domain, so only NaN and inf are refused here)
    return _out(_rate_from_gap(1.0 - g, lam, b, m))


def equiangular_rhs(gamma: ArrayLike, *, lambdas: ArrayLike, beta: float, n: float) -> float | NDArray[np.float64]:
    r"""Right-hand side of the equiangular ODE (Thm 22 of arXiv 2605.04279).

    .. math::

        \dot\gamma = 2A(\gamma)\,(1-\gamma)\,\bigl(1+(n-1)\gamma\bigr),

    with :math:`A` from :func:`equiangular_rate`.  At :math:`\gamma=0` it equals
    :func:`early_rate` exactly (same floating-point operations); its zeros are
    the fixed points :math:`\gamma=1` (one cluster) and :math:`\gamma=-1/(n-1)`
    (the regular simplex).

    Parameters
    ----------
    gamma : float or array_like
    lambdas : (H,) array_like
    beta : float, >= 0
    n : float, >= 2

    Returns
    -------
    float or ndarray, same shape as ``gamma``

    Examples
    --------
    >>> equiangular_rhs(0.0, lambdas=[1.0], beta=1.0, n=2) == early_rate([1.0], beta=1.0, n=2)
    True
    """
    lam = _check_lambdas(lambdas)
    b = _check_nonnegative(beta, "beta")
    nn = _check_n(n)
    g = _reals(gamma, "gamma")
    return _out(2.0 * _rate_from_gap(1.0 - g, lam, b, nn - 1.0) * (1.0 - g) * (1.0 + (nn - 1.0) * g))


def _check_times(t: ArrayLike) -> NDArray[np.float64]:
    tt = _reals(t, "t")
    flat = np.atleast_1d(tt).ravel()
    if flat.size == 0:
        raise ConfigError("t", "needs at least one time")
    if not np.all(np.isfinite(flat)) or np.any(flat < 0) or np.any(np.diff(flat) < 0):
        raise ConfigError("t", "times must be finite, >= 0 and non-decreasing")
    return tt


def solve_equiangular_log_gap(
    gamma0: float,
    t: ArrayLike,
    *,
    lambdas: ArrayLike,
    beta: float,
    n: float,
    rtol: float = 1e-12,
    atol: float = 1e-14,
) -> float | NDArray[np.float64]:
    r"""Log-gap :math:`u(t)=\log(1-\gamma(t))` of the equiangular ODE (Thm 22 of arXiv 2605.04279).

    .. math::

        \dot u = -2A(\gamma)\bigl(1+(n-1)\gamma\bigr)
               = -2\sum_h\frac{\lambda_h}{e^{\beta\lambda_h\varepsilon}+n-1}\,
                 \bigl(n-(n-1)\varepsilon\bigr),\qquad \varepsilon=e^{u},

    the Thm 22 ODE rewritten for :math:`u=\log\varepsilon`, :math:`\varepsilon=1-\gamma`.
    This is how :func:`solve_equiangular` integrates: late in the flow
    :math:`\varepsilon\sim Ce^{-2\Lambda t}` falls below machine precision in
    :math:`\gamma` but :math:`u\approx \log C-2\Lambda t` stays resolved
    (``rtol`` is then a relative tolerance on :math:`\log\varepsilon`).
    Integrated with :func:`scipy.integrate.solve_ivp` (``DOP853``) from
    :math:`u(0)=\log(1-\gamma_0)`.

    Parameters
    ----------
    gamma0 : float
        Initial common inner product, :math:`-1/(n-1)\le\gamma_0\le1`.
    t : float or array_like, shape (T,)
        Output times, >= 0 and non-decreasing (time 0 is the initial state).
    lambdas : (H,) array_like
    beta : float, >= 0
    n : float, >= 2
    rtol, atol : float
        Tolerances of ``solve_ivp`` (on ``u``).

    Returns
    -------
    float or ndarray, same shape as ``t``
        :math:`\log(1-\gamma(t))`; ``-inf`` throughout if :math:`\gamma_0=1`.

    Examples
    --------
    >>> u = solve_equiangular_log_gap(0.0, [0.0, 30.0], lambdas=[0.5, 1.5], beta=2.0, n=8)
    >>> bool(u[0] == 0.0), bool(u[1] < -80)
    (True, True)
    """
    lam = _check_lambdas(lambdas)
    b = _check_nonnegative(beta, "beta")
    nn = _check_n(n)
    rtol, atol = _check_positive(rtol, "rtol"), _check_positive(atol, "atol")  # NaN had hung solve_ivp
    m = nn - 1.0
    g0 = _finite(gamma0, "gamma0")
    if g0 > 1.0 or g0 < -1.0 / m:
        raise ConfigError("gamma0", f"must lie in [-1/(n-1), 1] = [{-1.0 / m:g}, 1], got {gamma0!r}")
    tt = _check_times(t)
    flat = np.atleast_1d(tt).ravel()
    if g0 == 1.0:
        return _out(np.full(tt.shape, -np.inf))

    def rhs(_t: float, u: NDArray[np.float64]) -> NDArray[np.float64]:
        eps = math.exp(min(float(u[0]), math.log(1.0 + 1.0 / m)))
        return np.array([-2.0 * float(_rate_from_gap(np.asarray(eps), lam, b, m)) * (nn - m * eps)])

    u0 = math.log1p(-g0)
    t_end = float(flat[-1])
    if t_end == 0.0:
        return _out(np.full(tt.shape, u0))
    with np.errstate(under="ignore"):  # solve_ivp's step-size floor uses nextafter(0, inf)
        sol = solve_ivp(rhs, (0.0, t_end), [u0], method="DOP853", t_eval=flat, rtol=rtol, atol=atol)
    if not sol.success:  # pragma: no cover - smooth scalar ODE
        raise RuntimeError(f"solve_ivp failed: {sol.message}")
    return _out(sol.y[0].reshape(tt.shape))


def solve_equiangular(
    gamma0: float,
    t: ArrayLike,
    *,
    lambdas: ArrayLike,
    beta: float,
    n: float,
    rtol: float = 1e-12,
    atol: float = 1e-14,
) -> float | NDArray[np.float64]:
    r"""Solve the equiangular ODE of heterogeneous scalar heads (Thm 22 of arXiv 2605.04279).

    .. math::

        \dot\gamma = 2A(\gamma)(1-\gamma)\bigl(1+(n-1)\gamma\bigr),\qquad \gamma(0)=\gamma_0,

    for softmax attention with :math:`B_h=V_h=\lambda_h I` and equiangular tokens
    (:math:`\langle x_i,x_j\rangle=\gamma` for :math:`i\ne j`, preserved by the flow,
    :math:`n\le d`).  Integrated in log-gap form (:func:`solve_equiangular_log_gap`)
    and returned as :math:`\gamma=-\mathrm{expm1}(u)`; use the log-gap solver
    directly to resolve :math:`1-\gamma` below :math:`10^{-16}`.

    Parameters
    ----------
    gamma0 : float
        :math:`-1/(n-1)\le\gamma_0\le1`.
    t : float or array_like, shape (T,)
        Output times, >= 0, non-decreasing.
    lambdas : (H,) array_like
        Head strengths.
    beta : float, >= 0
    n : float, >= 2
    rtol, atol : float
        ``solve_ivp`` tolerances (on :math:`\log(1-\gamma)`).

    Returns
    -------
    float or ndarray, same shape as ``t``

    Examples
    --------
    >>> g = solve_equiangular(0.0, [0.0, 1.0, 30.0], lambdas=[0.5, 1.5], beta=2.0, n=8)
    >>> bool(g[0] == 0.0 and 0.0 < g[1] < 1.0 and g[2] == 1.0)
    True
    """
    u = np.asarray(
        solve_equiangular_log_gap(gamma0, t, lambdas=lambdas, beta=beta, n=n, rtol=rtol, atol=atol)
    )
    with np.errstate(under="ignore"):
        return _out(-np.expm1(u))


def phi(lam: ArrayLike, *, beta: float, n: float) -> float | NDArray[np.float64]:
    r"""Early-rate contribution of one scalar head (Thm 22 of arXiv 2605.04279).

    .. math::

        \varphi(\lambda) = \frac{2\lambda}{e^{\lambda\beta}+n-1},

    so that :math:`\dot\gamma|_{\gamma=0}=\sum_h\varphi(\lambda_h)`.  With
    :math:`x=\lambda\beta`, :math:`\varphi` is concave for
    :math:`0<\lambda<\lambda_c` and convex for :math:`\lambda>\lambda_c`
    (:func:`lambda_c`).

    Parameters
    ----------
    lam : float or array_like
        Head strength(s).
    beta : float, >= 0
    n : float, >= 2

    Returns
    -------
    float or ndarray, same shape as ``lam``

    Examples
    --------
    >>> phi(1.0, beta=0.0, n=4)
    0.5
    """
    b = _check_nonnegative(beta, "beta")
    m = _check_n(n) - 1.0
    lam_a = _reals(lam, "lam")
    return _out(2.0 * lam_a * _inv_exp_plus(b * lam_a, m))


def early_rate(lambdas: ArrayLike, *, beta: float, n: float) -> float:
    r"""Early clustering rate :math:`\dot\gamma(0)` of heterogeneous heads (Thm 22 of arXiv 2605.04279).

    .. math::

        \dot\gamma\big|_{\gamma=0} = 2A(0) = \sum_{h=1}^H\varphi(\lambda_h)
        = \sum_h\frac{2\lambda_h}{e^{\lambda_h\beta}+n-1}.

    Equal, bit for bit, to ``equiangular_rhs(0.0, ...)``.

    Parameters
    ----------
    lambdas : (H,) array_like
    beta : float, >= 0
    n : float, >= 2

    Returns
    -------
    float

    Examples
    --------
    >>> round(early_rate([0.5, 1.5], beta=2.0, n=8), 10)
    0.2136590665
    """
    lam = _check_lambdas(lambdas)
    b = _check_nonnegative(beta, "beta")
    m = _check_n(n) - 1.0
    return float(2.0 * np.sum(lam * _inv_exp_plus((b * lam) * 1.0, m)))


def equal_split_rate(lambdas: ArrayLike, *, beta: float, n: float) -> float:
    r"""Early rate of :math:`H` equal heads with the same total strength (Thm 22 of arXiv 2605.04279).

    .. math::

        H\,\varphi(\Lambda/H),\qquad \Lambda=\sum_h\lambda_h.

    Parameters
    ----------
    lambdas : (H,) array_like
    beta : float, >= 0
    n : float, >= 2

    Returns
    -------
    float

    Examples
    --------
    >>> round(equal_split_rate([0.5, 1.5], beta=2.0, n=8), 10)
    0.2779890475
    """
    lam = _check_lambdas(lambdas)
    H = lam.size
    return float(H * phi(float(np.sum(lam)) / H, beta=beta, n=n))


def lambda_c(beta: float, n: float) -> float:
    r"""Inflection point :math:`\lambda_c` of :math:`\varphi` (Thm 22 of arXiv 2605.04279).

    .. math::

        \varphi''(\lambda_c)=0 \iff (x_c-2)\,e^{x_c} = (n-1)(x_c+2),
        \qquad \lambda_c = x_c/\beta .

    Derivation: with :math:`x=\lambda\beta`, :math:`D=e^x+n-1`,
    :math:`\varphi''(\lambda)=2\beta\,e^x\bigl[(x-2)e^x-(x+2)(n-1)\bigr]/D^3`.
    The map :math:`x\mapsto(x-2)e^x/(x+2)` has derivative
    :math:`e^x x^2/(x+2)^2>0`, so for :math:`n\ge2` there is exactly one root,
    :math:`x_c>2`; :math:`\varphi` is concave on :math:`(0,\lambda_c)` and convex
    on :math:`(\lambda_c,\infty)`.

    The root is found with :func:`scipy.optimize.brentq` on
    :math:`x+\ln(x-2)-\ln(x+2)-\ln(n-1)` over :math:`(2,\max(4,\ln(3(n-1))+1)]`.
    There is no closed form in the standard Lambert :math:`W`: with
    :math:`y=x_c+2` the equation is :math:`e^{y}(y-4)/y=(n-1)e^2`, a
    *generalised* Lambert equation (Mező & Baricz 2017, :math:`W(4;0;(n-1)e^2)`).
    For large :math:`n`, :math:`x_c=L+4/L+O(L^{-3})`, :math:`L=\ln(n-1)`.

    Parameters
    ----------
    beta : float, > 0
    n : float, >= 2

    Returns
    -------
    float

    Examples
    --------
    >>> x = 2.0 * lambda_c(2.0, 8)          # x_c for n = 8
    >>> bool(abs((x - 2) * np.exp(x) - 7 * (x + 2)) < 1e-10)
    True
    """
    b = _check_positive(beta, "beta")
    log_m = math.log(_check_n(n) - 1.0)

    def h(x: float) -> float:
        return x + math.log(x - 2.0) - math.log(x + 2.0) - log_m

    lo = math.nextafter(2.0, 3.0)
    hi = max(4.0, math.log(3.0) + log_m + 1.0)
    xc = brentq(h, lo, hi, xtol=1e-15, rtol=4.0 * np.finfo(float).eps, maxiter=500)
    return float(xc) / b


#: :math:`|\beta(\lambda_h-\Lambda/H)|` up to which a head's part of :func:`superadditivity_gain` is its Taylor remainder
GAIN_NEAR = 1.0


def _expm1_minus_x(u: np.ndarray) -> np.ndarray:
    r""":math:`e^u-1-u` for :math:`|u|\le 1`, from its series (no cancellation: the terms :math:`u^k/k!`, k >= 2)."""
    term = u * u / 2.0
    total = term.copy()
    for k in range(3, 30):  # |u|^29/29! < 1e-30
        term = term * u / k
        total = total + term
    return total


def _remainder(d: np.ndarray, mu: float, beta: float, m: float) -> np.ndarray:
    r"""The Taylor remainder :math:`\varphi(\mu+\delta)-\varphi(\mu)-\varphi'(\mu)\,\delta` of
    :math:`\varphi(\lambda)=2\lambda/(e^{\beta\lambda}+m)` for :math:`|\beta\delta|\le1`, without cancellation.

    With :math:`u=\beta\delta`, :math:`E=e^u-1`, :math:`D_a=e^{\beta(\mu+\delta)}+m`,
    :math:`D_\mu=e^{\beta\mu}+m` and :math:`c=e^{\beta\mu}`:

    .. math::

        \frac{2c}{D_\mu D_a}\Bigl[-\delta E-\mu\,(e^u-1-u)+\mu u\frac{c}{D_\mu}E\Bigr],

    each term of order :math:`\delta^2` (the linear parts cancel in closed form, not in floating point).
    """
    u = beta * d
    with np.errstate(over="ignore", under="ignore"):
        e_mu = math.exp(-beta * mu)
        inv_da = e_mu * np.exp(-u) / (1.0 + m * e_mu * np.exp(-u))  # 1/D_a, also where e^(beta mu) overflows
        c_over_dmu = 1.0 / (1.0 + m * e_mu)
        e_over_da = np.expm1(u) * inv_da
        return 2.0 * c_over_dmu * (-d * e_over_da - mu * _expm1_minus_x(u) * inv_da + mu * u * c_over_dmu * e_over_da)


def superadditivity_gain(lambdas: ArrayLike, *, beta: float, n: float) -> float:
    r"""Early-rate gain of heterogeneous over equal heads (Thm 22 of arXiv 2605.04279).

    .. math::

        G = \sum_{h=1}^H\varphi(\lambda_h) - H\,\varphi(\Lambda/H)
          = \sum_{h=1}^H\big[\varphi(\lambda_h)-\varphi(\mu)-\varphi'(\mu)(\lambda_h-\mu)\big],\qquad \mu=\Lambda/H.

    By Jensen, :math:`G\ge0` when all :math:`\lambda_h` lie where :math:`\varphi`
    is convex (:math:`\lambda>\lambda_c`) and :math:`G\le0` when all lie in the
    concave region :math:`(0,\lambda_c)`; Pendharkar states super-additivity for
    mean strength :math:`\bar\lambda>\lambda_c` with small enough spread.

    Computed as the sum of the heads' Taylor remainders (the second form: :math:`\sum_h(\lambda_h-\mu)=0`), not as
    :func:`early_rate` minus :func:`equal_split_rate`, whose absolute error, about :math:`10^{-16}\max(1,\beta\Lambda/H)`
    of the early rate, is all of :math:`G` at small :math:`\beta\cdot` spread (``[2.0, 2.6]`` at :math:`\beta=10^{-6}`,
    :math:`n=10^8`: 0.0, where :math:`G=-3.6\cdot10^{-23}`).  The heads with :math:`|\beta(\lambda_h-\mu)|\le`
    :data:`GAIN_NEAR` take their remainder from :func:`_remainder` (of order :math:`(\lambda_h-\mu)^2`, no cancellation);
    the others from its three terms, whose sum is not small beside them; the rounding of :math:`\mu` is taken off
    (:math:`s=\sum_h(\lambda_h-\mu)` summed exactly, :math:`H R(s/H)` subtracted).

    Accuracy (against 80-digit mpmath, 16 000 and 3000 random cases): where every :math:`|\beta(\lambda_h-\mu)|\le1`
    the absolute error is about :math:`10^{-18}` of the early rate or less, and relative to :math:`G` below
    :math:`10^{-12}` away from :math:`\lambda_c` (next to it, where :math:`\varphi''` and :math:`G` vanish, 2.3e-9 was
    measured; where :math:`G` changes sign no relative bound holds); elsewhere an absolute error below
    :math:`2\cdot10^{-15}\max(1,\beta\mu)` times the early rate, as for the difference.

    Parameters
    ----------
    lambdas : (H,) array_like
    beta : float, >= 0
    n : float, >= 2

    Returns
    -------
    float

    Examples
    --------
    >>> superadditivity_gain([2.0, 2.6], beta=2.0, n=8) > 0
    True
    >>> round(superadditivity_gain([2.0, 2.6], beta=1e-6, n=1e8) * 1e23, 6)  # the difference of the rates gives 0.0
    -3.600012
    """
    lam = _check_lambdas(lambdas)
    beta = _check_nonnegative(beta, "beta")
    m = _check_n(n) - 1.0
    heads = lam.size
    mu = math.fsum(lam.tolist()) / heads
    d = lam - mu
    near = np.abs(beta * d) <= GAIN_NEAR
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        c_over_dmu = 1.0 / (1.0 + m * math.exp(-beta * mu))  # e^{βμ}/(e^{βμ}+m)
        dphi_mu = 2.0 * float(_inv_exp_plus(beta * mu, m)) * (1.0 - beta * mu * c_over_dmu)  # φ'(μ)
        far = phi(lam, beta=beta, n=n) - phi(mu, beta=beta, n=n) - dphi_mu * d
    near_part = _remainder(np.where(near, d, 0.0), mu, beta, m)
    s = math.fsum(d.tolist())  # Σ(λ_h − μ) for the rounded μ
    rounding = heads * float(_remainder(np.array([s / heads]), mu, beta, m)[0])
    gain = float(np.sum(np.where(near, near_part, far))) - rounding
    if not math.isfinite(gain):  # β λ past the floats (0·∞ in φ'(μ)): the rates themselves are exact there
        with np.errstate(over="ignore"):
            return early_rate(lam, beta=beta, n=n) - equal_split_rate(lam, beta=beta, n=n)
    return gain


def late_rate(lambdas: ArrayLike) -> float:
    r"""Late exponential clustering rate (Thm 22 of arXiv 2605.04279).

    .. math::

        \varepsilon(t)=1-\gamma(t)\sim C e^{-2\Lambda t},\qquad
        -\frac{d}{dt}\log\varepsilon \to 2\Lambda,\quad\Lambda=\sum_h\lambda_h,

    since :math:`A(1)=\Lambda/n` and :math:`1+(n-1)\gamma\to n`.  Independent of
    :math:`\beta` and :math:`n`.

    Parameters
    ----------
    lambdas : (H,) array_like

    Returns
    -------
    float
        :math:`2\Lambda`.

    Examples
    --------
    >>> late_rate([0.5, 1.5])
    4.0

    Raises
    ------
    ConfigError
        ``lambdas`` whose sum :math:`\Lambda` is not positive: the tokens do not cluster, and :math:`2\Lambda` is no
        clustering rate (``[-1]`` had given -2).
    """
    total = float(np.sum(_check_lambdas(lambdas)))
    if not total > 0:
        raise ConfigError("lambdas", f"the late rate 2Λ is the clustering rate of heads of total strength Λ = Σ λ_h > 0; "
                                     f"got Λ = {total:g}")
    return 2.0 * total


# --------------------------------------------------------------------------- #
# Thm 25: clustering-time scalings and fits
# --------------------------------------------------------------------------- #
def clustering_time_scale(kind: str, *, n: float, d: float) -> float:
    r"""Predicted clustering-time scale, without constant (Thm 25 of arXiv 2605.04279).

    .. math::

        T_{\mathrm{softmax}} = O(n),\qquad T_{\mathrm{ReLU}} = O(n\log d),

    in the linearised regime near :math:`\gamma=0` (random initialisation in
    high dimension :math:`d`).  Returns :math:`n` or :math:`n\log d`; measured
    times should be fitted against it with :func:`fit_linear` (or their exponent
    checked with :func:`fit_power_law`).

    Parameters
    ----------
    kind : {"softmax", "relu"}
    n : float, >= 2
        Number of tokens.
    d : float, > 1
        Ambient dimension.

    Returns
    -------
    float

    Examples
    --------
    >>> clustering_time_scale("softmax", n=32, d=100)
    32.0
    """
    nn = _check_n(n)
    dd = _finite(d, "d")
    if dd <= 1:
        raise ConfigError("d", f"the dimension must be > 1, got {d!r}")
    if kind == "softmax":
        return nn
    if kind == "relu":
        return nn * math.log(dd)
    raise ConfigError("kind", f"must be 'softmax' or 'relu', got {kind!r}")


def _fit(x: NDArray[np.float64], y: NDArray[np.float64]) -> tuple[float, float, float]:
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    ss_res = float(np.sum(resid**2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else float("nan"))
    return float(slope), float(intercept), float(r2)


def _xy(xs: ArrayLike, ys: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    x, y = _reals(xs, "xs").ravel(), _reals(ys, "ys").ravel()  # each names itself (a bad ys had been blamed on xs)
    if x.shape != y.shape:
        raise ConfigError("ys", f"xs and ys differ in length ({x.size} vs {y.size})")
    if x.size < 2:
        raise ConfigError("xs", "a fit needs at least two points")
    if np.ptp(x) == 0:
        raise ConfigError("xs", "all x values are equal; the slope is undefined")
    return x, y


def fit_linear(xs: ArrayLike, ys: ArrayLike) -> tuple[float, float, float]:
    r"""Least-squares line :math:`y\approx a x+b` (for Pendharkar (arXiv 2605.04279), Thm 25).

    .. math::

        (a,b)=\arg\min\sum_k(y_k-a x_k-b)^2,\qquad
        R^2 = 1-\frac{\sum_k(y_k-a x_k-b)^2}{\sum_k(y_k-\bar y)^2}.

    Parameters
    ----------
    xs, ys : (K,) array_like, K >= 2

    Returns
    -------
    slope, intercept, r2 : float
        ``r2`` is 1 for data that are exactly fitted (also when ``ys`` is constant).

    Examples
    --------
    >>> [round(v, 12) for v in fit_linear([1, 2, 3], [3, 5, 7])]
    [2.0, 1.0, 1.0]
    """
    return _fit(*_xy(xs, ys))


def fit_power_law(xs: ArrayLike, ys: ArrayLike) -> tuple[float, float, float]:
    r"""Power-law fit :math:`y\approx e^{b}x^{a}` on log-log axes (for Pendharkar (arXiv 2605.04279), Thm 25).

    .. math::

        \log y \approx a\log x + b,

    a least-squares line through :math:`(\log x_k,\log y_k)`: :math:`a` is the
    exponent (1 for :math:`T_{\mathrm{softmax}}=O(n)`).

    Parameters
    ----------
    xs, ys : (K,) array_like of positive numbers, K >= 2

    Returns
    -------
    slope, intercept, r2 : float
        Exponent :math:`a`, log-prefactor :math:`b`, and :math:`R^2` of the log-log fit.

    Examples
    --------
    >>> [round(v, 12) for v in fit_power_law([1, 2, 4], [3, 12, 48])]
    [2.0, 1.098612288668, 1.0]
    """
    x, y = _xy(xs, ys)
    for key, values in (("xs", x), ("ys", y)):
        if np.any(values <= 0):
            raise ConfigError(key, f"a power-law fit needs positive {key}, got {values.tolist()!r}")
    return _fit(np.log(x), np.log(y))


# --------------------------------------------------------------------------- #
# Thm 27: attention entropy in the scalar equiangular case
# --------------------------------------------------------------------------- #
def equiangular_entropy(gamma: ArrayLike, *, lam: float, beta: float, n: float) -> float | NDArray[np.float64]:
    r"""Entropy of a softmax row for equiangular tokens and a scalar head (Thm 27 of arXiv 2605.04279).

    .. math::

        \mathcal H = -p\log p-(n-1)\,q\log q,\qquad
        p=\frac{e^{\beta\lambda}}{e^{\beta\lambda}+(n-1)e^{\beta\lambda\gamma}},\quad
        q=\frac{1-p}{n-1},

    (:math:`p=p_{ii}`, :math:`q=p_{ij}` for :math:`j\ne i`), evaluated with
    :math:`a=\beta\lambda(1-\gamma)` as :math:`\log p=-\log(1+(n-1)e^{-a})` and
    :math:`\log q=-a+\log p`.  For :math:`\beta\lambda>0` it increases with
    :math:`\gamma` on :math:`\gamma\le1` and equals :math:`\log n` at
    :math:`\gamma=1`, so it is non-decreasing along the Thm 22 flow and tends to
    :math:`\log n`.

    Parameters
    ----------
    gamma : float or array_like
        Common inner product(s), :math:`\le 1`.
    lam : float
        Scalar head strength :math:`\lambda` (:math:`B=\lambda I`).
    beta : float, >= 0
    n : float, >= 2

    Returns
    -------
    float or ndarray, same shape as ``gamma``
        Entropy in nats.

    Examples
    --------
    >>> bool(abs(equiangular_entropy(1.0, lam=1.0, beta=2.0, n=8) - np.log(8)) < 1e-14)
    True
    """
    lm = _finite(lam, "lam")
    b = _check_nonnegative(beta, "beta")
    m = _check_n(n) - 1.0
    with np.errstate(over="ignore"):  # past 1e300 the entropy is 0 to every digit: the clamp keeps inf·0 out of it
        a = np.minimum(b * lm * (1.0 - _check_gammas(gamma, m)), 1e300)  # past γ = 1 the formula is no entropy (1.32 at γ = 2, n = 8)
    with np.errstate(under="ignore"):
        # log(1 + m e^{-a}) for any sign of a, overflow-free
        lse = np.logaddexp(0.0, math.log(m) - a)
        log_p = -lse
        log_q = -a - lse
        p = np.exp(log_p)
        mq = m * np.exp(log_q)  # (n-1) q, accurate also when p ~ 1
    return _out(-p * log_p - mq * log_q)


# --------------------------------------------------------------------------- #
# Thm 39: approximate orthogonality of head subspaces
# --------------------------------------------------------------------------- #
def _stack(Bs: Sequence[ArrayLike] | NDArray[np.float64]) -> NDArray[np.float64]:
    try:
        complex_input = np.iscomplexobj(Bs)  # (the imaginary parts had been dropped with a mere ComplexWarning)
        B = np.asarray(Bs, dtype=float) if not complex_input else np.zeros(0)
    except (TypeError, ValueError):
        raise ConfigError("Bs", "matrices must all have the same shape") from None
    if complex_input:
        raise ConfigError("Bs", "must be real numbers, got complex ones")
    if B.ndim != 3:
        raise ConfigError("Bs", f"expected H matrices of shape (d, d), got an array of shape {B.shape}")
    if B.shape[1] != B.shape[2]:
        raise ConfigError("Bs", f"score matrices must be square (d, d), got {B.shape[1:]}")
    if not np.all(np.isfinite(B)):
        raise ConfigError("Bs", "matrices must be finite")
    return B


def overlap_matrix(Bs: Sequence[ArrayLike] | NDArray[np.float64]) -> NDArray[np.float64]:
    r"""All pairwise head overlaps :math:`O_{ab}=\|B_aB_b\|_{op}` (Thm 39 of arXiv 2605.04279).

    .. math::

        O_{ab} = \|B_a B_b\|_{2} = \sigma_{\max}(B_a B_b).

    Parameters
    ----------
    Bs : (H, d, d) array_like
        Score matrices :math:`B_h=Q_h^\top K_h`.

    Returns
    -------
    (H, H) ndarray
        Not symmetric in general (:math:`\|B_aB_b\|\ne\|B_bB_a\|` unless the
        matrices are symmetric); the diagonal holds :math:`\|B_h^2\|_{op}`.

    Examples
    --------
    >>> overlap_matrix([np.eye(2), 2 * np.eye(2)])
    array([[1., 2.],
           [2., 4.]])
    """
    B = _stack(Bs)
    prods = np.einsum("aij,bjk->abik", B, B)
    return np.linalg.norm(prods, ord=2, axis=(-2, -1))


def head_overlap(Bs: Sequence[ArrayLike] | NDArray[np.float64]) -> float:
    r"""Approximate-orthogonality constant :math:`\delta` of a set of heads (Thm 39 of arXiv 2605.04279).

    .. math::

        \delta = \max_{h\ne h'}\ \|B_{h'}B_h\|_{op},

    over ordered pairs (both :math:`B_{h'}B_h` and :math:`B_hB_{h'}`).
    :math:`\delta=0` is exact orthogonality (:math:`B_{h'}B_h=0`, Thms 16–17).

    Parameters
    ----------
    Bs : (H, d, d) array_like

    Returns
    -------
    float
        :math:`\delta`; 0.0 for a single head (no pairs).

    Examples
    --------
    >>> head_overlap([np.diag([1., 1, 0, 0]), np.diag([0., 0, 1, 1])])
    0.0
    """
    O = overlap_matrix(Bs)
    H = O.shape[0]
    if H < 2:
        return 0.0
    return float(np.max(O[~np.eye(H, dtype=bool)]))


def _range_basis(B: NDArray[np.float64], rtol: float) -> NDArray[np.float64]:
    U, s, _ = np.linalg.svd(B)
    if s.size == 0 or s[0] == 0.0:
        return U[:, :0]
    return U[:, : int(np.sum(s > rtol * s[0]))]


def principal_angles(
    Bs: Sequence[ArrayLike] | NDArray[np.float64], *, rtol: float = 1e-10
) -> dict[tuple[int, int], NDArray[np.float64]]:
    r"""Principal angles between the head subspaces :math:`\mathrm{range}(B_h)` (Thm 39 of arXiv 2605.04279).

    .. math::

        \cos\theta_k = \sigma_k(U_h^\top U_{h'}),\qquad 0\le\theta_1\le\dots\le\theta_r\le 90^\circ,

    where the columns of :math:`U_h` are an orthonormal basis of the range of
    :math:`B_h` (left singular vectors with singular value
    :math:`>\mathrm{rtol}\cdot\sigma_{\max}(B_h)`).  Computed with
    :func:`scipy.linalg.subspace_angles` (accurate also for small angles) and
    sorted increasingly.  Trained transformers show 70–85°.

    Parameters
    ----------
    Bs : (H, d, d) array_like
    rtol : float, keyword-only
        Relative rank threshold.

    Returns
    -------
    dict
        ``{(h, h2): angles}`` for ``h < h2``; ``angles`` is an ndarray of
        ``min(rank B_h, rank B_h2)`` angles in degrees, smallest first.

    Examples
    --------
    >>> principal_angles([np.diag([1., 1, 0, 0]), np.diag([0., 0, 1, 1])])[(0, 1)]
    array([90., 90.])
    """
    B = _stack(Bs)
    r = _check_positive(rtol, "rtol")
    if r >= 1.0:  # no singular value exceeds σ_max: every range was empty, and the message had blamed the matrix
        raise ConfigError("rtol", f"must be < 1 (a rank counts the singular values above rtol·σ_max), got {rtol!r}")
    bases = [_range_basis(b, r) for b in B]
    for h, U in enumerate(bases):
        if U.shape[1] == 0:
            raise ConfigError(f"Bs[{h}]", "is zero: its range (head subspace) is empty")
    out: dict[tuple[int, int], NDArray[np.float64]] = {}
    for h in range(len(bases)):
        for h2 in range(h + 1, len(bases)):
            out[(h, h2)] = np.sort(np.degrees(subspace_angles(bases[h], bases[h2])))
    return out
