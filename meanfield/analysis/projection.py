r"""Low-temperature concentration of Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931): Assumption 1, the projection :math:`\Pi`, the target :math:`\Pi_\sharp\rho_0`.

.. math::

    S = V B^\top,\quad B = Q^\top K,\qquad
    \Pi(x) = \frac{P_E x}{\|P_E x\|},\qquad
    W_2\big(\rho^\beta_t, \Pi_\sharp\rho_0\big) \lesssim
        \sqrt{\tfrac{\log(\beta+1)}{\beta}}\, e^{C_1 t} + e^{-ct}

(Theorem 1 and Corollary 2 of arXiv 2605.10931).  Here :math:`E` is the
dominant eigenspace of the symmetric matrix :math:`S` (the eigenspace of its
largest eigenvalue :math:`\mu_1`) and :math:`P_E` its orthogonal projector.

Contents

* :func:`check_assumptions` — Assumption 1 (``B`` invertible, ``S`` symmetric,
  spectral gap :math:`\mu_1-\mu_2>0`) with every number in an
  :class:`AssumptionReport`; :func:`enforce_assumptions` applies the config
  policy ``model.assumptions`` (``check`` → :class:`~meanfield.errors.ConfigError`,
  ``warn``, ``skip``).
* :func:`dominant_projector`, :func:`projection_map`, :func:`pushforward_target`
  — :math:`P_E`, :math:`\Pi` and :math:`\Pi_\sharp\rho_0` (Assumption 2: tokens
  in :math:`E^\perp` are reported, never silently dropped).
* :func:`value_projector` and :func:`eigenspace_distance` — the distance to the
  dominant eigenspace of ``V`` (Conjecture 1, the terminal phase).
* :func:`zero_temperature_flow`, :func:`zero_temperature_clock`,
  :func:`zero_temperature_solution` — the closed-form flow of the
  :math:`\beta\to\infty` limit :math:`\dot x = P^\perp_x(Sx)/\|B^\top x\|`.
* :func:`resolution_warning` and :func:`concentration_rate` — when particles
  resolve the kernel width, and the rate :math:`\sqrt{\log(\beta+1)/\beta}`.

Examples
--------
>>> import numpy as np
>>> report = check_assumptions(np.eye(3), np.eye(3), np.diag([1.0, 0.5, 0.25]))
>>> report.ok, report.dim_E, float(report.gap)
(True, 1, 0.5)
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from meanfield.errors import ConfigError, MeanfieldWarning

__all__ = [
    "AssumptionReport",
    "Pushforward",
    "ASSUMPTION_POLICIES",
    "check_assumptions",
    "enforce_assumptions",
    "score_and_value",
    "dominant_eigenspace",
    "dominant_projector",
    "projection_map",
    "pushforward_target",
    "value_projector",
    "eigenspace_distance",
    "zero_temperature_flow",
    "zero_temperature_clock",
    "zero_temperature_solution",
    "concentration_rate",
    "resolution_threshold",
    "resolution_warning",
    "grid_resolution_warning",
    "run_resolution_warning",
]

#: values of ``model.assumptions``
ASSUMPTION_POLICIES: tuple[str, ...] = ("check", "warn", "skip")
#: default largest accepted condition number of ``B`` ("invertible")
COND_MAX: float = 1e12
#: eigenvalues of ``S`` closer than ``MULT_TOL·max|μ|`` count as one (multiplicity)
MULT_TOL: float = 1e-10


@dataclass(frozen=True)
class AssumptionReport:
    r"""The numbers behind Assumption 1 of Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931) for one head.

    Attributes
    ----------
    cond_B : float
        2-norm condition number of :math:`B=Q^\top K` (``inf`` when singular).
    symmetry_defect : float
        :math:`\|S-S^\top\|_F/\|S\|_F` for :math:`S=VB^\top` (0 when :math:`S=0`).
    eigenvalues : (d,) array
        Eigenvalues of the symmetric part :math:`(S+S^\top)/2`, decreasing
        (equal to those of :math:`S` when the defect is 0).
    gap : float
        :math:`\mu_1-\mu_2` between the largest eigenvalue and the next
        *distinct* one (multiplicity-aware); ``inf`` when all eigenvalues are
        equal (then :math:`E=\mathbb R^d` and :math:`\Pi` is the identity).
    dim_E : int
        Multiplicity of :math:`\mu_1` (eigenvalues within ``mult_tol·scale`` of it).
    ok : bool
        ``cond_B <= cond_max``, ``symmetry_defect <= sym_tol`` and ``gap > gap_tol·scale``.
    message : str
        One line with all the numbers and the verdict.
    failures : tuple of str
        The parts that failed (``"invertible"``, ``"symmetric"``, ``"gap"``).
    """

    cond_B: float
    symmetry_defect: float
    eigenvalues: NDArray[np.float64]
    gap: float
    dim_E: int
    ok: bool
    message: str
    failures: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        return self.message


def score_and_value(Q: ArrayLike, K: ArrayLike, V: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r""":math:`B=Q^\top K` and :math:`S=VB^\top` of one head (shapes ``(d, d)``)."""
    Qa, Ka, Va = (np.asarray(m, dtype=float) for m in (Q, K, V))
    if Qa.ndim != 2 or Ka.shape != Qa.shape or Va.ndim != 2 or Va.shape != (Qa.shape[1], Qa.shape[1]):
        raise ValueError(f"need Q, K of shape (k, d) and V of shape (d, d); got {Qa.shape}, {Ka.shape}, {Va.shape}")
    B = Qa.T @ Ka
    return B, Va @ B.T


def _below_overflow(S: NDArray[np.float64]) -> tuple[NDArray[np.float64], int]:
    r"""``(2^-k S, k)``: a matrix with entries past :math:`2^{500}` divided by a power of two (exactly), so that
    :math:`S+S^\top` and :math:`\|S\|` stay finite (V = 1e308 had overflowed them: LinAlgError); ``(S, 0)`` otherwise.
    Eigenvectors and ratios are the same; eigenvalues are multiplied back by :math:`2^k`."""
    top = float(np.max(np.abs(S))) if S.size else 0.0
    if not top > 2.0**500:
        return S, 0
    exponent = int(np.frexp(top)[1])
    return np.ldexp(S, -exponent), exponent


def _cluster_top(values: NDArray[np.float64], tol: float) -> tuple[int, float]:
    """Multiplicity of the largest of decreasing ``values`` and the gap to the next distinct one."""
    top = values[0]
    multiplicity = int(np.count_nonzero(values >= top - tol))
    gap = float(top - values[multiplicity]) if multiplicity < values.size else math.inf
    return multiplicity, gap


def check_assumptions(
    Q: ArrayLike,
    K: ArrayLike,
    V: ArrayLike,
    *,
    gap_tol: float = 1e-8,
    sym_tol: float = 1e-8,
    cond_max: float = COND_MAX,
    mult_tol: float = MULT_TOL,
) -> AssumptionReport:
    r"""Check Assumption 1 of Alcalde, Bungert, Riedl and Roith (arXiv 2605.10931) for the head :math:`(Q, K, V)`.

    .. math::

        B = Q^\top K \text{ invertible},\qquad S = VB^\top = S^\top,\qquad
        \gamma = \mu_1 - \mu_2 > 0

    (Assumption 1 of arXiv 2605.10931).  "Invertible" means
    :math:`\kappa_2(B)\le` ``cond_max``; "symmetric" means
    :math:`\|S-S^\top\|_F\le` ``sym_tol`` :math:`\|S\|_F`.  The spectrum is
    that of the symmetric part; eigenvalues within ``mult_tol·scale`` of
    :math:`\mu_1` (``scale = max|μ|``, relative to the spectrum's size) count as
    :math:`\mu_1`, so ``dim_E`` is its multiplicity and the gap is measured to
    the next distinct eigenvalue; it must exceed ``gap_tol·scale`` (a near
    degeneracy between the two tolerances fails: :math:`E` is then ill-defined).  When every eigenvalue equals :math:`\mu_1` (e.g. :math:`S=I`)
    the gap is reported as ``inf``: :math:`E=\mathbb R^d`, :math:`\Pi` is the
    identity and the assumption holds trivially.

    Parameters
    ----------
    Q, K : (k, d) array-like
    V : (d, d) array-like
    gap_tol, sym_tol : float
        Relative tolerances of the gap and of the symmetry defect.
    mult_tol : float
        Relative tolerance below which eigenvalues are equal (multiplicity).
    cond_max : float
        Largest condition number of ``B`` accepted as invertible.

    Returns
    -------
    AssumptionReport

    Raises
    ------
    ConfigError
        (key ``model.heads``) where :math:`B` or :math:`S` is not finite.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        B, S = score_and_value(Q, K, V)
    if not (np.all(np.isfinite(B)) and np.all(np.isfinite(S))):  # (V = 1e308 had been LinAlgError's traceback)
        raise ConfigError("model.heads", "B = QᵀK or S = VBᵀ is not finite (Q, K or V too large: their products pass the "
                                         f"largest float; largest entries {np.max(np.abs(Q)):.3g}, {np.max(np.abs(K)):.3g}, "
                                         f"{np.max(np.abs(V)):.3g})")
    with np.errstate(divide="ignore", invalid="ignore"):
        cond = float(np.linalg.cond(B))
    if not np.isfinite(cond):
        cond = math.inf
    S_in, exponent = _below_overflow(S)
    norm_S = float(np.linalg.norm(S_in))
    defect = float(np.linalg.norm(S_in - S_in.T) / norm_S) if norm_S > 0 else 0.0
    with np.errstate(over="ignore"):
        eigenvalues = np.ldexp(np.linalg.eigvalsh(0.5 * (S_in + S_in.T))[::-1], exponent)
    scale = float(np.max(np.abs(eigenvalues)))  # relative: S scaled by 1e-11 had been given E = R^d (an absolute floor)
    dim_E, gap = _cluster_top(eigenvalues, mult_tol * scale)
    failures = []
    if not cond <= cond_max:
        failures.append("invertible")
    if not defect <= sym_tol:
        failures.append("symmetric")
    if not gap > gap_tol * scale:
        failures.append("gap")
    ok = not failures
    spectrum = ", ".join(f"{mu:.6g}" for mu in eigenvalues)
    verdict = "holds" if ok else "fails (" + ", ".join(
        {"invertible": "B = QᵀK is not invertible", "symmetric": "S = V Bᵀ is not symmetric", "gap": "no spectral gap"}[f]
        for f in failures
    ) + ")"
    # a non-symmetric S: the numbers below are its symmetric part's (they had been labelled as S's own)
    of = "S" if "symmetric" not in failures else "(S+Sᵀ)/2"
    message = (
        f"Assumption 1 of arXiv 2605.10931 {verdict}: cond(B) = {cond:.4g} (limit {cond_max:.3g}); "
        f"‖S−Sᵀ‖/‖S‖ = {defect:.3g} (tol {sym_tol:.3g}); eigenvalues of {of} = [{spectrum}]; "
        f"gap μ1−μ2 = {gap:.6g} (tol {gap_tol * scale:.3g}); dim E = {dim_E}"
    )
    if "symmetric" in failures:
        own = np.sort_complex(np.linalg.eigvals(S))[::-1]
        message += (f". S's own eigenvalues are [{', '.join(f'{z.real:.6g}' if abs(z.imag) <= 1e-12 * scale else f'{z:.4g}' for z in own)}]: "
                    "E, Π and Π♯ρ₀ are then taken from (S+Sᵀ)/2, which is not where the zero-temperature flow "
                    "x' = P⊥(S x) goes, so W2 to Π♯ρ₀ need not fall to 0 (Theorem 1 does not apply)")
    return AssumptionReport(cond, defect, eigenvalues, gap, dim_E, ok, message, tuple(failures))


def enforce_assumptions(report: AssumptionReport, policy: str, *, key: str = "model.heads") -> AssumptionReport:
    """Apply ``model.assumptions``: ``check`` raises, ``warn`` warns, ``skip`` does nothing.

    Raises
    ------
    ConfigError
        ``policy == "check"`` and the assumption fails (the CLI exits with status 2
        and prints the numbers); ``policy`` unknown.
    """
    if policy not in ASSUMPTION_POLICIES:
        raise ConfigError("model.assumptions", f"expected one of {ASSUMPTION_POLICIES}, got {policy!r}")
    if policy == "skip" or report.ok:
        return report
    if policy == "check":
        raise ConfigError(key, f"{report.message}; set model.assumptions = \"warn\" (--force on the command line, policy=\"warn\" "
                               "in Python) to go on anyway")
    # a MeanfieldWarning (a RuntimeWarning): the CLI prints it as a warning line, where it had shown Python's own form
    warnings.warn(f"{report.message}; going on (model.assumptions = 'warn' / --force)", MeanfieldWarning, stacklevel=2)
    return report


def dominant_eigenspace(S: ArrayLike, *, tol: float = MULT_TOL) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Orthonormal basis of the eigenspace :math:`E` of the largest eigenvalue of the symmetric part of ``S``.

    .. math::

        E = \ker\big(\tfrac12(S+S^\top) - \mu_1 I\big)

    Eigenvalues within ``tol·max|μ|`` of :math:`\mu_1` are counted in
    (multiplicity-aware).

    Returns
    -------
    basis : (d, k) array
        Orthonormal columns spanning ``E``; ``k = dim E``.
    eigenvalues : (d,) array
        The spectrum of the symmetric part, decreasing.
    """
    Sa = np.asarray(S, dtype=float)
    if Sa.ndim != 2 or Sa.shape[0] != Sa.shape[1] or not np.all(np.isfinite(Sa)):
        raise ValueError(f"S must be a finite square matrix, got shape {Sa.shape}")
    S_in, exponent = _below_overflow(Sa)
    values, vectors = np.linalg.eigh(0.5 * (S_in + S_in.T))
    with np.errstate(over="ignore"):
        values, vectors = np.ldexp(values[::-1], exponent), vectors[:, ::-1]
    scale = float(np.max(np.abs(values)))  # relative to S's size (an absolute floor had merged a small S's spectrum)
    k, _ = _cluster_top(values, tol * scale)
    return vectors[:, :k].copy(), values.copy()


def dominant_projector(S: ArrayLike, *, tol: float = MULT_TOL) -> NDArray[np.float64]:
    r"""Orthogonal projector :math:`P_E = U_EU_E^\top` onto the dominant eigenspace of ``S``.

    .. math::

        P_E = \sum_{k:\ \mu_k=\mu_1} u_k u_k^\top

    (Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931: definition of :math:`\Pi`).  See :func:`dominant_eigenspace`.

    Examples
    --------
    >>> import numpy as np
    >>> dominant_projector(np.diag([2.0, 2.0, 1.0])).round(12).tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    """
    basis, _ = dominant_eigenspace(S, tol=tol)
    return basis @ basis.T


def projection_map(
    x: ArrayLike, P_E: ArrayLike, *, tol: float = 1e-12
) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
    r"""The projection :math:`\Pi(x) = P_Ex/\|P_Ex\|` onto :math:`E\cap S^{d-1}`.

    .. math::

        \Pi : S^{d-1}\setminus E^\perp \to E\cap S^{d-1},\qquad
        \Pi(x) = \frac{P_E x}{\|P_E x\|}

    (Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931: the limit of the zero-temperature flow from ``x``).  :math:`\Pi` is
    undefined on :math:`E^\perp` (Assumption 2): tokens with
    :math:`\|P_Ex\| <` ``tol`` get a row of NaN and their indices are returned.

    Parameters
    ----------
    x : (n, d) array-like
        Points on the sphere.
    P_E : (d, d) array-like
        Orthogonal projector (:func:`dominant_projector`).
    tol : float
        Tokens with :math:`\|P_Ex\|<` ``tol`` count as lying in :math:`E^\perp`.

    Returns
    -------
    points : (n, d) array
        :math:`\Pi(x_i)`; NaN rows for the tokens in :math:`E^\perp`.
    orthogonal : (m,) int array
        Indices of the tokens in :math:`E^\perp` (empty when Assumption 2 holds).
    """
    xa = np.atleast_2d(np.asarray(x, dtype=float))
    proj = xa @ np.asarray(P_E, dtype=float).T
    norms = np.linalg.norm(proj, axis=1)
    orthogonal = np.flatnonzero(norms < tol)
    out = np.full_like(proj, np.nan)
    good = norms >= tol
    out[good] = proj[good] / norms[good, None]
    return out, orthogonal


@dataclass(frozen=True)
class Pushforward:
    r"""The target measure :math:`\Pi_\sharp\rho_0=\sum_j b_j\delta_{y_j}`.

    Attributes
    ----------
    atoms : (k, d) array
        Support points on :math:`E\cap S^{d-1}` (``±e`` when ``dim E = 1``).
    weights : (k,) array
        Probability weights (sum 1).
    dim_E : int
    orthogonal : (m,) int array
        Indices of the tokens of :math:`\rho_0` in :math:`E^\perp` (Assumption 2),
        left out of the target.
    orthogonal_mass : float
        Their mass in :math:`\rho_0` (before renormalisation).
    """

    atoms: NDArray[np.float64]
    weights: NDArray[np.float64]
    dim_E: int
    orthogonal: NDArray[np.intp]
    orthogonal_mass: float


def pushforward_target(
    x0: ArrayLike, P_E: ArrayLike, weights: ArrayLike | None = None, *, tol: float = 1e-12, density: bool = False
) -> Pushforward:
    r"""The target :math:`\Pi_\sharp\rho_0` of the concentration, as atoms and weights.

    .. math::

        \dim E = 1:\quad \Pi_\sharp\rho_0 = p\,\delta_e + (1-p)\,\delta_{-e},\qquad
        p = \rho_0(\langle x, e\rangle > 0);\qquad
        \dim E > 1:\quad \Pi_\sharp\rho_0 = \sum_i a_i\,\delta_{\Pi(x_i)}

    (Theorem 1 and Corollary 2 of arXiv 2605.10931).  For ``dim E = 1`` the
    atoms are merged into the two points :math:`\pm e` (``e`` the unit vector
    spanning ``E``, oriented so that its largest entry is positive), which
    makes :math:`W_2(\rho_t,\Pi_\sharp\rho_0)` an :math:`n\times 2` problem.
    Tokens in :math:`E^\perp` (:math:`\|P_Ex\|<` ``tol``; Assumption 2) have
    no image; they are left out of the target, whose weights are renormalised
    to 1, and reported in ``orthogonal`` / ``orthogonal_mass`` (with a
    ``RuntimeWarning`` when their mass is positive).  The zero-temperature
    flow leaves :math:`E^\perp` invariant, so no atom on :math:`E` would be right for them.

    With ``density``, the points are the nodes of a quadrature of a density (a grid run's cells), which puts no
    mass on the hyperplane or subspace :math:`E^\perp`: a node that lies in it (the icosahedral meshes have
    nodes on coordinate planes) breaks no assumption and gets no warning; with ``dim E = 1`` its mass is split
    evenly between :math:`\pm e` (it stands for the cells on both sides), with ``dim E > 1`` it is left out.

    Parameters
    ----------
    x0 : (n, d) array-like
        Support of :math:`\rho_0` (particles, or grid cell centres).
    P_E : (d, d) array-like
        Projector onto the dominant eigenspace (:func:`dominant_projector`).
    weights : (n,) array-like, optional
        Masses of the points (uniform ``1/n`` by default; grid cell masses).
    tol : float
    density : bool
        The points are a density's quadrature nodes (above).

    Returns
    -------
    Pushforward

    Examples
    --------
    >>> import numpy as np
    >>> x0 = np.array([[0.6, 0.8, 0.0], [-0.6, 0.0, 0.8], [0.8, 0.0, 0.6], [0.28, 0.96, 0.0]])
    >>> target = pushforward_target(x0, np.diag([1.0, 0.0, 0.0]))
    >>> target.atoms.tolist(), target.weights.tolist(), target.orthogonal.tolist()
    ([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]], [0.75, 0.25], [])
    """
    xa = np.atleast_2d(np.asarray(x0, dtype=float))
    if xa.ndim != 2 or not np.all(np.isfinite(xa)):  # a NaN token had landed on neither side, or become a NaN atom
        raise ValueError(f"x0 must be an (n, d) array of finite points, got shape {xa.shape}"
                         + ("" if xa.ndim != 2 else f" with {int(np.count_nonzero(~np.isfinite(xa)))} non-finite entries"))
    off = float(np.max(np.abs(np.linalg.norm(xa, axis=1) - 1.0))) if xa.size else 0.0
    if off > 1e-6:
        raise ValueError(f"x0 must lie on the unit sphere (max | ||x|| - 1 | = {off:.3g})")
    n = xa.shape[0]
    a = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, dtype=float)
    if a.shape != (n,):
        raise ValueError(f"weights must have shape ({n},), got {a.shape}")
    if np.any(a < 0) or not np.all(np.isfinite(a)) or not a.sum() > 0:
        raise ValueError("weights must be finite, non-negative and not all zero")
    P = np.asarray(P_E, dtype=float)
    if P.shape != (xa.shape[1], xa.shape[1]) or not np.all(np.isfinite(P)):
        raise ValueError(f"P_E must be a finite ({xa.shape[1]}, {xa.shape[1]}) projector for points in d = {xa.shape[1]}, "
                         f"got shape {P.shape}")
    defect = max(float(np.max(np.abs(P - P.T))), float(np.max(np.abs(P @ P - P))))
    if defect > 1e-8:  # diag(2, 0, 0) had been taken as a projector, with dim E = 2 from its trace
        raise ValueError(f"P_E must be an orthogonal projector (symmetric, P_E² = P_E; off by {defect:.3g}): build it "
                         "with dominant_projector")
    dim_E = int(round(np.trace(P)))
    images, orthogonal = projection_map(xa, P, tol=tol)
    total = float(a.sum())
    orthogonal_mass = float(a[orthogonal].sum()) / total
    if orthogonal.size and orthogonal_mass > 0 and not density:
        warnings.warn(
            f"{orthogonal.size} token(s) with mass {orthogonal_mass:.3g} lie in E^⊥ (|P_E x| < {tol:g}): "
            "Π is undefined there (Assumption 2); they are left out of Π♯ρ₀",
            RuntimeWarning,
            stacklevel=2,
        )
    keep = np.ones(n, dtype=bool)
    keep[orthogonal] = False
    if not np.any(keep & (a > 0)):
        raise ValueError("every token with positive mass lies in E^⊥: Π♯ρ₀ is undefined (Assumption 2)")
    if dim_E == 1:
        w, vecs = np.linalg.eigh(P)
        e = vecs[:, -1]
        e = e if e[np.argmax(np.abs(e))] > 0 else -e
        side = xa @ e
        p = float(a[keep & (side > 0)].sum())
        q = float(a[keep & (side <= 0)].sum())
        if density:  # the nodes on the plane: half to each side
            p, q = p + orthogonal_mass * total / 2, q + orthogonal_mass * total / 2
        atoms = np.stack([e, -e]) + 0.0  # + 0.0: no negative zeros
        b = np.array([p, q]) / (p + q)
    else:
        atoms = images[keep]
        b = a[keep] / a[keep].sum()
    return Pushforward(atoms=atoms, weights=b, dim_E=dim_E, orthogonal=orthogonal, orthogonal_mass=orthogonal_mass)


def value_projector(V: ArrayLike, *, which: str = "magnitude", tol: float = 1e-6) -> NDArray[np.float64]:
    r"""Orthogonal projector onto the dominant (real) invariant subspace :math:`E_V` of ``V``.

    .. math::

        E_V = \bigoplus_{\lambda\in\sigma(V):\ |\lambda| = \max|\sigma(V)|}
              \operatorname{Re}\,\ker(V-\lambda)^{m_\lambda}

    (Conjecture 1: for fixed β and large t the mass moves toward the
    dominant eigenspace of V is that of the largest :math:`|\lambda|`).
    For a symmetric ``V`` this is the span of the eigenvectors of the
    eigenvalues of largest modulus.  For a non-symmetric ``V`` it is the real
    invariant subspace of those eigenvalues, from an ordered real Schur
    decomposition :math:`V = ZTZ^\top` (``scipy.linalg.schur`` with ``sort``):
    a complex pair contributes the plane spanned by the real and imaginary
    parts of its eigenvector, and a defective eigenvalue its whole generalised
    eigenspace; the leading Schur vectors are an orthonormal basis of it.

    ``which = "real"`` selects instead the eigenvalues of largest real part,
    the attractor of the single-cluster flow :math:`\dot x=P^\perp_xVx`; the
    two agree when the spectrum of ``V`` is positive.

    Parameters
    ----------
    V : (d, d) array-like
    which : {"magnitude", "real"}
    tol : float
        Eigenvalues within ``tol·max|λ|`` of the extreme one are included
        (looser than for ``S``: the computed eigenvalues of a defective ``V`` are
        split by :math:`O(\sqrt{\varepsilon})`).

    Returns
    -------
    (d, d) array
        The orthogonal projector onto :math:`E_V`.
    """
    from scipy.linalg import schur

    Va = np.asarray(V, dtype=float)
    if which not in ("magnitude", "real"):
        raise ValueError(f"which must be 'magnitude' or 'real', got {which!r}")
    Va, _ = _below_overflow(Va)  # (the projector is that of 2^-k V)
    if np.allclose(Va, Va.T, rtol=0, atol=1e-14 * max(1.0, float(np.abs(Va).max()))):
        values, vectors = np.linalg.eigh(0.5 * (Va + Va.T))
        key = np.abs(values) if which == "magnitude" else values
        scale = float(np.max(np.abs(values)))  # relative to V's size
        pick = key >= key.max() - tol * scale
        basis = vectors[:, pick]
        return basis @ basis.T
    values = np.linalg.eigvals(Va)
    key = np.abs(values) if which == "magnitude" else values.real
    scale = float(np.max(np.abs(values)))
    threshold = float(key.max()) - tol * scale
    if which == "magnitude":
        _, Z, sdim = schur(Va, output="real", sort=lambda re, im: math.hypot(re, im) >= threshold)
    else:
        _, Z, sdim = schur(Va, output="real", sort=lambda re, im: re >= threshold)
    basis = Z[:, :sdim]
    return basis @ basis.T


def eigenspace_distance(x: ArrayLike, P: ArrayLike, weights: ArrayLike | None = None) -> float:
    r"""Root-mean-square geodesic distance from the tokens to the great sphere :math:`E\cap S^{d-1}`.

    .. math::

        D(\mu, E) = \Big(\sum_i a_i\, d_S(x_i, E\cap S^{d-1})^2\Big)^{1/2},\qquad
        d_S(x, E\cap S^{d-1}) = \arccos\|P x\|

    It is the :math:`W_2` distance (geodesic cost) from :math:`\mu` to the set of
    measures supported on :math:`E\cap S^{d-1}`, attained by :math:`\Pi_\sharp\mu`
    (each token moved to its nearest point of the great sphere).  Used for
    the terminal phase (Conjecture 1 of arXiv 2605.10931) with ``P`` =
    :func:`value_projector`, and with ``P = P_E`` for the early phase.
    Tokens in :math:`E^\perp` are at distance :math:`\pi/2`.

    Parameters
    ----------
    x : (n, d) array-like
        Points on the sphere.
    P : (d, d) array-like
        Orthogonal projector onto ``E``.
    weights : (n,) array-like, optional
        Masses (uniform by default; normalised here).
    """
    xa = np.atleast_2d(np.asarray(x, dtype=float))
    proj = xa @ np.asarray(P, dtype=float).T
    rest = xa - proj
    norms = np.sqrt(np.einsum("ij,ij->i", proj, proj))
    residual = np.sqrt(np.einsum("ij,ij->i", rest, rest))
    angle = np.arctan2(residual, norms)  # = arccos |Px| on the sphere, accurate near 0 and π/2
    if weights is None:
        return float(np.sqrt(np.mean(angle**2)))
    a = np.asarray(weights, dtype=float)
    return float(np.sqrt(np.sum(a * angle**2) / np.sum(a)))


#: ``S`` whose largest asymmetry is within this of its largest entry is taken as its symmetric part, in closed form
SYMMETRIC_ROUNDOFF = 1e-13


def zero_temperature_flow(x0: ArrayLike, S: ArrayLike, tau: ArrayLike) -> NDArray[np.float64]:
    r"""Closed form of the zero-temperature flow in its own clock :math:`\tau`.

    .. math::

        x(\tau) = \frac{e^{\tau S}x_0}{\|e^{\tau S}x_0\|},\qquad
        \frac{dx}{d\tau} = P^\perp_x(Sx)

    (Alcalde, Bungert, Riedl and Roith, arXiv 2605.10931: zero-temperature limit, Equation 3).  Differentiating
    :math:`z=e^{\tau S}x_0` and :math:`x=z/\|z\|` gives exactly
    :math:`\dot x = Sx - \langle x, Sx\rangle x` for any square ``S``.  The
    physical equation :math:`\dot x = P^\perp_x(Sx)/\|B^\top x\|` is the same
    curve run with the per-token clock :math:`d\tau/dt = 1/\|B^\top x(t)\|`
    (:func:`zero_temperature_clock`).  For symmetric ``S`` with a gap,
    :math:`x(\tau)\to\Pi(x_0)` and :math:`\tan d_S(x(\tau),\Pi(x_0)) = O(e^{-(\mu_1-\mu_2)\tau})`.
    An ``S`` symmetric to round-off (:data:`SYMMETRIC_ROUNDOFF`) is taken as its symmetric part, in closed form from its
    eigenvectors; any other ``S`` through a matrix exponential per token.

    Parameters
    ----------
    x0 : (n, d) or (d,) array-like
        Initial points.
    S : (d, d) array-like
    tau : float or (n,) array-like
        Clock value, shared or one per token.

    Returns
    -------
    (n, d) array (or (d,) for a single point)
    """
    from scipy.linalg import expm

    xa = np.asarray(x0, dtype=float)
    single = xa.ndim == 1
    xa = np.atleast_2d(xa)
    Sa = np.asarray(S, dtype=float)
    taus = np.broadcast_to(np.asarray(tau, dtype=float), (xa.shape[0],))
    if np.max(np.abs(Sa - Sa.T), initial=0.0) <= SYMMETRIC_ROUNDOFF * np.max(np.abs(Sa), initial=0.0):
        # symmetric to round-off (S = V Bᵀ with V = B: its products round apart): its symmetric part, in closed form (a
        # matrix exponential per token had taken 17.5 s for 8 tokens in zero_temperature_solution)
        values, vectors = np.linalg.eigh(0.5 * (Sa + Sa.T))
        coords = xa @ vectors
        # each token's coordinates c_k e^{τ μ_k} scaled by its own largest, in logarithms: a shift by e^{-τ μ_max} for
        # all had underflowed every coordinate of a token in E^⊥ (NaN from τ ≈ 1500 on), and a token's small
        # coordinates underflowed the norm
        with np.errstate(divide="ignore"):
            logs = np.log(np.abs(coords)) + taus[:, None] * values[None, :]  # -inf where c_k = 0
        z = np.sign(coords) * np.exp(logs - logs.max(axis=1, keepdims=True))  # the largest entry ±1: no overflow, no underflow
        out = (z / np.linalg.norm(z, axis=1, keepdims=True)) @ vectors.T
    else:
        z = np.stack([expm(tk * Sa) @ xk for tk, xk in zip(taus, xa)])
        out = z / np.linalg.norm(z, axis=1, keepdims=True)
    return out[0] if single else out


def zero_temperature_clock(
    x0: ArrayLike, S: ArrayLike, B: ArrayLike, t: ArrayLike, *, rtol: float = 1e-12, atol: float = 1e-14
) -> NDArray[np.float64]:
    r"""Per-token clock :math:`\tau_i(t)` of the zero-temperature flow.

    .. math::

        \frac{d\tau}{dt} = \frac{1}{\|B^\top x(\tau)\|},\qquad
        x(\tau) = \frac{e^{\tau S}x_0}{\|e^{\tau S}x_0\|},\qquad \tau(0)=0

    (Equation 3 of arXiv 2605.10931: :math:`\dot x = P^\perp_x(Sx)/\|B^\top x\|`).  A
    scalar ODE per token, solved by ``scipy.integrate.solve_ivp`` (DOP853)
    with tight tolerances; with :func:`zero_temperature_flow` it gives a
    reference solution independent of the particle integrators.

    Parameters
    ----------
    x0 : (n, d) array-like
    S, B : (d, d) array-like
    t : (T,) array-like
        Increasing times, starting at or after 0.

    Returns
    -------
    (T, n) array
    """
    from scipy.integrate import solve_ivp

    xa = np.atleast_2d(np.asarray(x0, dtype=float))
    Ba = np.asarray(B, dtype=float)
    times = np.asarray(t, dtype=float)
    out = np.empty((times.size, xa.shape[0]))
    for i, xi in enumerate(xa):

        def rate(_t: float, tau: NDArray[np.float64], xi: NDArray[np.float64] = xi) -> list[float]:
            point = zero_temperature_flow(xi, S, tau[0])
            return [1.0 / float(np.linalg.norm(Ba.T @ point))]

        sol = solve_ivp(rate, (0.0, float(times[-1])), [0.0], method="DOP853", t_eval=times, rtol=rtol, atol=atol)
        if not sol.success:
            raise RuntimeError(f"zero-temperature clock failed for token {i}: {sol.message}")
        out[:, i] = sol.y[0]
    return out


def zero_temperature_solution(x0: ArrayLike, S: ArrayLike, B: ArrayLike, t: ArrayLike) -> NDArray[np.float64]:
    r"""Reference solution of :math:`\dot x = P^\perp_x(Sx)/\|B^\top x\|` at times ``t``.

    .. math::

        x(t) = \frac{e^{\tau(t)S}x_0}{\|e^{\tau(t)S}x_0\|}

    with the clock of :func:`zero_temperature_clock` (Equation 3 of arXiv 2605.10931).

    Returns
    -------
    (T, n, d) array
    """
    xa = np.atleast_2d(np.asarray(x0, dtype=float))
    taus = zero_temperature_clock(xa, S, B, t)
    return np.stack([zero_temperature_flow(xa, S, tau_row) for tau_row in taus])


def concentration_rate(beta: ArrayLike) -> NDArray[np.float64]:
    r"""The temperature factor of Theorem 1, :math:`r(\beta)=\sqrt{\log(\beta+1)/\beta}`.

    .. math::

        W_2(\rho^\beta_t,\Pi_\sharp\rho_0)\lesssim r(\beta)\,e^{C_1t}+e^{-ct}

    (Theorem 1 of arXiv 2605.10931).  Minimising the bound over ``t`` gives
    :math:`t_{\min}\approx\log(1/r)/(C_1+c)\sim\tfrac{1}{2(C_1+c)}\log\beta` and
    :math:`W_{2,\min}\sim r(\beta)^{c/(C_1+c)}`.

    Raises
    ------
    ValueError
        ``beta`` not real numbers > 0 and finite (β = -0.5 had given 1.18, β = 0 NaN, ``True`` and strings passed).
    """
    if isinstance(beta, (bool, np.bool_, str, bytes)) or np.asarray(beta).dtype.kind not in "iuf":
        raise ValueError(f"beta must be real numbers > 0 (the theorem's inverse temperatures), got {beta!r}")
    b = np.asarray(beta, dtype=float)
    if not np.all(np.isfinite(b) & (b > 0)):
        raise ValueError(f"beta must be real numbers > 0 and finite (the theorem's inverse temperatures), got {beta!r}")
    return np.sqrt(np.log1p(b) / b)


#: particles resolve the kernel when n >= RESOLUTION_FACTOR · β^{(d-1)/2}
RESOLUTION_FACTOR: float = 10.0


def resolution_threshold(beta: float, d: int, *, factor: float = RESOLUTION_FACTOR) -> float:
    r"""Smallest number of particles (or cells) that resolves the softmax kernel.

    .. math::

        n_{\min} = \text{factor}\cdot\beta^{(d-1)/2}

    The softmax kernel :math:`e^{\beta\langle x,y\rangle}` has width
    :math:`\sim\beta^{-1/2}` on :math:`S^{d-1}`, so a cap of that radius holds
    a fraction :math:`\sim\beta^{-(d-1)/2}` of the sphere: the
    empirical measure approximates the mean-field velocity only when every such
    cap holds many particles, :math:`n\gg\beta^{(d-1)/2}`.  "Many" is fixed at
    ``factor = 10``.
    """
    return float(factor * max(beta, 0.0) ** ((d - 1) / 2))


def grid_resolution_warning(cells: int, beta: float) -> str | None:
    r"""A warning text when a mesh of ``cells`` cells on :math:`S^2` is coarser than the kernel, else ``None``.

    .. math::

        h = \sqrt{4\pi/N} > \beta^{-1/2} \iff N < 4\pi\beta

    (the cells' mean spacing against the kernel width; the criterion of the grid's own note at the start of a run,
    ``about 4πβ cells``, where the particle count's :func:`resolution_warning` had been applied to cells).

    Examples
    --------
    >>> grid_resolution_warning(250, 16.0) is None
    True
    >>> print(grid_resolution_warning(40, 16.0))
    under-resolved: N = 40 cells, spacing √(4π/N) = 0.56 > β^(-1/2) = 0.25 (β = 16); the cells do not resolve the kernel width, about 202 do
    """
    need = 4.0 * math.pi * float(beta)
    if cells >= need:
        return None
    return (f"under-resolved: N = {cells} cells, spacing √(4π/N) = {math.sqrt(4 * math.pi / cells):.3g} > β^(-1/2) = "
            f"{float(beta) ** -0.5:.3g} (β = {beta:g}); the cells do not resolve the kernel width, about {math.ceil(need)} do")


def run_resolution_warning(size: int, beta: float, d: int, *, cells: bool) -> str | None:
    """The under-resolution warning of a run of ``size`` degrees of freedom: cells of a mesh on :math:`S^2` by the
    mesh's criterion (:func:`grid_resolution_warning`; ``grid.cells``, the coarse spacing of a graded mesh too),
    else particles (:func:`resolution_warning`)."""
    return grid_resolution_warning(size, beta) if cells else resolution_warning(size, beta, d)


def resolution_warning(n: int, beta: float, d: int, *, factor: float = RESOLUTION_FACTOR) -> str | None:
    r"""A warning text when ``n`` particles under-resolve the kernel, else ``None``.

    .. math::

        n < \text{factor}\cdot\beta^{(d-1)/2}

    See :func:`resolution_threshold` (on :math:`S^2` use the grid
    solver for large β).

    Examples
    --------
    >>> resolution_warning(1000, 16.0, 3) is None
    True
    >>> print(resolution_warning(100, 64.0, 3))
    under-resolved: n = 100 < 10·β^((d-1)/2) = 640 (β = 64, d = 3); particles do not resolve the kernel width β^(-1/2)
    """
    need = resolution_threshold(beta, d, factor=factor)
    if n >= need:
        return None
    return (
        f"under-resolved: n = {n} < {factor:g}·β^((d-1)/2) = {need:.4g} (β = {beta:g}, d = {d}); "
        "particles do not resolve the kernel width β^(-1/2)"
    )
