r"""The energy–dissipation balance of Massucco et al. (arXiv 2605.18870) in the authors' setup, term by term.

.. math::

    E(\mu_T,T)-E(\mu_0,0)
    = \underbrace{\int_0^T\langle\partial_D E,\,b(D_t,t)\rangle\,dt}_{\text{drift}}
    + \underbrace{\int_0^T\tfrac12\,\partial_D^2E:\Sigma\,dt}_{\text{It\^o}}
    + \underbrace{\int_0^T\langle\partial_D E,\,\sigma\,dW_t\rangle}_{M_T}
    - \underbrace{\int_0^T-\langle\nabla_x E,\dot x\rangle\,dt}_{\text{true dissipation}}

for the energy :math:`E(x,D)=\sum_h \frac{w_h}{2\beta}\sum_{i,j}a_ia_j\,e^{\beta x_i^\top D_h x_j}`
(the authors' :math:`\frac{1}{2Hn^2}\sum_{h,i,j}e^{x_i^\top D_h x_j}` for :math:`w_h=1/H`,
:math:`a_i=1/n`, :math:`\beta=1`), the weights :math:`dD_h=b(D_h,t)\,dt+\sigma\,dW_h` of
Massucco, Del Grande, Carioni, Brune and Schönlieb and their token velocity
:math:`\dot x_i=-P^\perp_{x_i}\sum_h w_h\sum_j\operatorname{softmax}_j(\beta x_i^\top D_hx_j)\,D_hx_j`.
:math:`\Sigma` is the noise covariance per unit time,
:math:`\operatorname{Cov}(dD_{ab},dD_{cd})=\Sigma_{abcd}\,dt`; for the authors'
:math:`dW_{\mathrm{sym}}=\sqrt{dt}\,(Z+Z^\top)/2`,
:math:`\Sigma_{abcd}=\frac{\sigma^2}2(\delta_{ac}\delta_{bd}+\delta_{ad}\delta_{bc})` and the Itô term
is :math:`\frac{\sigma^2}{8}\beta\sum_h w_h\sum_{ij}a_ia_je^{\beta x_i^\top D_hx_j}(1+(x_i^\top x_j)^2)`.
The drift term plus the Itô term plus :math:`M_T` is :math:`\int\partial_tE`, the explicit time
dependence of the energy through the weights (for deterministic weights, :math:`\sigma=0`, it is
the drift term alone).

The authors' diagnostic :math:`G^2=\frac1n\sum_i\big[\|\dot x_i\|^2/\frac1H\sum_h n/N_{h,i}\big]`
divides by the mean of the per-head mobilities: it is the dissipation for one head, not for
heterogeneous heads.  :func:`energy_balance` reports the balance with either term, so the
residual with :math:`\int G^2` (which does not close) stands beside the residual with the true
dissipation (which does, up to the step).  Every integral is the left-point (Itô) sum on the
step of the explicit Euler / Euler–Maruyama recursion, so the true residual is
:math:`O(\sqrt{dt})` for noisy weights and :math:`O(dt)` without noise.

==========================================  ======================================
the balance of recorded paths                :func:`energy_balance`
the balance of a run of a config             :func:`balance_from_config`
the noise covariance :math:`\Sigma`          :func:`noise_covariance`
==========================================  ======================================

Examples
--------
>>> from meanfield.solvers.experiments.authors_balance import balance_from_config
>>> out = balance_from_config("data/massucco_ou.toml", ["solver.t_final=0.5"])  # doctest: +SKIP
>>> abs(out["residual_true"]) < 0.1 * out["dissipation"]  # doctest: +SKIP
True
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["noise_covariance", "energy_parts", "energy_balance", "balance_from_config", "TERMS"]

#: the totals of :func:`energy_balance`, in the order they are reported
TERMS = (
    "energy_change",
    "drift",
    "ito",
    "martingale",
    "time_term",
    "G2",
    "dissipation",
    "residual_G2",
    "residual_true",
    "residual_no_ito",
)


def noise_covariance(noise: str, sigma: float, d: int, *, symmetric: bool = True) -> np.ndarray:
    r"""The covariance per unit time :math:`\Sigma_{abcd}` of the weights' noise :math:`\sigma\,dW`, shape (d, d, d, d).

    .. math::

        \text{symmetric: }\Sigma_{abcd}=\tfrac{\sigma^2}{2}(\delta_{ac}\delta_{bd}+\delta_{ad}\delta_{bc}),\qquad
        \text{isotropic: }\Sigma_{abcd}=\sigma^2\delta_{ac}\delta_{bd}
        \ \ (\text{mirrored: }\sigma^2(\delta_{ac}\delta_{bd}+\delta_{ad}\delta_{bc}-\delta_{ab}\delta_{ac}\delta_{ad}))

    ``symmetric`` is the authors' :math:`dW_{\mathrm{sym}}=\sqrt{dt}\,(Z+Z^\top)/2` (Massucco et al.,
    arXiv 2605.18870); ``isotropic`` draws every entry (``symmetric=True``: the upper triangle,
    mirrored), as :class:`meanfield.heads.schedules.MatrixSDESchedule` does.
    """
    eye = np.eye(d)
    same = np.einsum("ac,bd->abcd", eye, eye)
    swap = np.einsum("ad,bc->abcd", eye, eye)
    if noise == "symmetric":
        return 0.5 * sigma**2 * (same + swap)
    if noise != "isotropic":
        raise ValueError(f"noise must be 'symmetric' or 'isotropic', got {noise!r}")
    if not symmetric:
        return sigma**2 * same
    diag = np.einsum("ab,ac,ad->abcd", eye, eye, eye)
    return sigma**2 * (same + swap - diag)


def energy_parts(
    x: np.ndarray, D: np.ndarray, *, beta: float, w: np.ndarray, a: np.ndarray | None = None, sign: float = -1.0
) -> dict[str, Any]:
    r"""The energy, its derivatives and the authors' velocity at one time.

    .. math::

        E=\sum_h\frac{w_h}{2\beta}\sum_{ij}a_ia_je^{\beta s^h_{ij}},\quad
        \partial_{D_h}E=\frac{w_h}2\sum_{ij}a_ia_je^{\beta s^h_{ij}}x_ix_j^\top,\quad
        \nabla_{x_i}E=\sum_h\frac{w_h}2 a_i\sum_j a_j\big(e^{\beta s^h_{ij}}D_hx_j+e^{\beta s^h_{ji}}D_h^\top x_j\big)

    with :math:`s^h_{ij}=x_i^\top D_hx_j` (Massucco et al., arXiv 2605.18870), and
    :math:`v_i=\pm P^\perp_{x_i}\sum_hw_h\sum_j\operatorname{softmax}_j(\beta s^h_{ij})D_hx_j`
    (``sign`` −1: descent, the authors').

    Parameters
    ----------
    x : (n, d) array
    D : (H, d, d) array
    beta : float
    w : (H,) array
        Head weights (``1/H``: the mean over heads).
    a : (n,) array, optional
        Token masses (default ``1/n``).
    sign : float

    Returns
    -------
    dict
        ``energy`` (float), ``dE_dD`` (H, d, d), ``grad_x`` (n, d), ``velocity`` (n, d),
        ``G2`` (the authors' diagnostic), ``kernel`` (H, n, n) :math:`a_ia_je^{\beta s^h_{ij}}`.
    """
    n = x.shape[0]
    a = np.full(n, 1.0 / n) if a is None else np.asarray(a, dtype=float)
    Dx = x[None] @ np.swapaxes(D, 1, 2)  # (H, n, d): rows D_h x_j
    e = np.exp(beta * (x[None] @ np.swapaxes(Dx, 1, 2)))  # (H, n, n): e^{beta x_i^T D_h x_j}
    ea = e * a[None, None, :]
    kernel = ea * a[None, :, None]
    energy = float(w @ kernel.sum(axis=(1, 2))) / (2.0 * beta)
    dE_dD = 0.5 * (x.T[None] @ kernel @ x[None]) * w[:, None, None]
    grad_x = 0.5 * np.tensordot(w, kernel @ Dx + np.swapaxes(kernel, 1, 2) @ (x[None] @ D), axes=1)
    Z = ea.sum(axis=2)  # (H, n): sum_j a_j e^{beta s_ij}
    fields = (ea @ Dx) / Z[:, :, None]
    mean_field = np.tensordot(w, fields, axes=1)
    tangent = mean_field - np.sum(mean_field * x, axis=1, keepdims=True) * x
    velocity = sign * tangent
    mean_mobility = w @ (1.0 / Z)  # sum_h w_h n/N_{h,i}, with a = 1/n
    G2 = float(np.sum(a * np.sum(tangent * tangent, axis=1) / mean_mobility))
    return {"energy": energy, "dE_dD": dE_dD, "grad_x": grad_x, "velocity": velocity, "G2": G2, "kernel": kernel}


def _ito_rate(x: np.ndarray, kernel: np.ndarray, w: np.ndarray, beta: float, C: np.ndarray) -> float:
    r""":math:`\frac12\partial_D^2E:\Sigma=\frac\beta4\sum_hw_h\sum_{ij}a_ia_je^{\beta s^h_{ij}}\,(x_i\otimes x_j)^\top\Sigma\,(x_i\otimes x_j)`."""
    d = x.shape[1]
    outer = np.einsum("ia,ic->iac", x, x).reshape(x.shape[0], d * d)  # x_i x_i^T, flattened (a, c)
    Cm = np.transpose(C, (0, 2, 1, 3)).reshape(d * d, d * d)  # [(a, c), (b, d)] = Sigma_abcd
    Q = outer @ Cm @ outer.T  # Q_ij = sum_abcd Sigma_abcd x_ia x_ic x_jb x_jd
    return 0.25 * beta * float(np.sum(w * np.sum(kernel * Q[None], axis=(1, 2))))


def energy_balance(
    t: np.ndarray,
    x: np.ndarray,
    D: np.ndarray,
    *,
    beta: float,
    w: np.ndarray | None = None,
    drift: Callable[[np.ndarray, float], np.ndarray] | None = None,
    covariance: np.ndarray | None = None,
    sign: float = -1.0,
) -> dict[str, Any]:
    r"""The energy–dissipation balance of recorded token and weight paths, with both dissipation terms.

    .. math::

        \Delta E = \sum_k\Big[\langle\partial_DE_k,b_k\rangle\Delta t
        + \tfrac12\partial_D^2E_k:\Sigma\,\Delta t + \langle\partial_DE_k,\Delta D_k-b_k\Delta t\rangle
        + \langle\nabla_xE_k,v_k\rangle\Delta t\Big] + \text{residual}

    with :math:`E_k=E(x_k,D_k)`, :math:`b_k=b(D_k,t_k)`, :math:`\Delta D_k=D_{k+1}-D_k`,
    :math:`v_k` the authors' velocity at :math:`(x_k,D_k)` (:func:`energy_parts`); the last term is
    minus the true dissipation.  The residual with the authors' :math:`G^2` puts
    :math:`-G^2_k\Delta t` in its place (Massucco, Del Grande, Carioni, Brune and Schönlieb,
    arXiv 2605.18870).

    Parameters
    ----------
    t : (K+1,) array
        The step grid (every step of the recursion).
    x : (K+1, n, d) array
        Tokens at ``t``.
    D : (K+1, H, d, d) array
        Weights at ``t``.
    beta : float
    w : (H,) array, optional
        Head weights (default ``1/H``).
    drift : callable, optional
        ``drift(D_k, t_k) -> (H, d, d)``, the drift :math:`b` of the weights; default the
        increments themselves (:math:`b_k=\Delta D_k/\Delta t`: deterministic weights, no martingale).
    covariance : (d, d, d, d) array, optional
        :math:`\Sigma` (:func:`noise_covariance`); default none (no Itô term).
    sign : float
        −1 for descent (the authors'), +1 for ascent.

    Returns
    -------
    dict
        The totals at ``T`` (:data:`TERMS`: ``energy_change``, ``drift``, ``ito``, ``martingale``,
        ``time_term`` = drift + Itô + martingale, ``G2`` (:math:`\int G^2`), ``dissipation``
        (:math:`\int-\langle\nabla E,\dot x\rangle`), ``residual_G2`` = ΔE − time_term + ∫G²,
        ``residual_true`` = ΔE − time_term + dissipation, ``residual_no_ito`` = the true residual
        without the Itô term), and each as a cumulative curve ``curve_<term>`` on ``t``; and the
        per-frame ``energy`` and ``G2_rate``, ``dissipation_rate``.
    """
    t = np.asarray(t, dtype=float)
    x = np.asarray(x, dtype=float)
    D = np.asarray(D, dtype=float)
    K = t.shape[0] - 1
    if K < 1 or x.shape[0] != K + 1 or D.shape[0] != K + 1:
        raise ValueError(f"need K+1 >= 2 frames of t, x and D alike, got {t.shape[0]}, {x.shape[0]}, {D.shape[0]}")
    H = D.shape[1]
    w = np.full(H, 1.0 / H) if w is None else np.asarray(w, dtype=float)
    energy = np.empty(K + 1)
    steps = {k: np.zeros(K) for k in ("drift", "ito", "martingale", "G2", "dissipation")}
    g2_rate = np.empty(K + 1)
    diss_rate = np.empty(K + 1)
    for k in range(K + 1):
        parts = energy_parts(x[k], D[k], beta=beta, w=w, sign=sign)
        energy[k] = parts["energy"]
        g2_rate[k] = parts["G2"]
        diss_rate[k] = -float(np.sum(parts["grad_x"] * parts["velocity"]))
        if k == K:
            break
        dt = t[k + 1] - t[k]
        dD = D[k + 1] - D[k]
        b = dD / dt if drift is None else np.asarray(drift(D[k], t[k]), dtype=float)
        steps["drift"][k] = float(np.sum(parts["dE_dD"] * b)) * dt
        steps["martingale"][k] = float(np.sum(parts["dE_dD"] * (dD - b * dt)))
        if covariance is not None:
            steps["ito"][k] = _ito_rate(x[k], parts["kernel"], w, beta, covariance) * dt
        steps["G2"][k] = g2_rate[k] * dt
        steps["dissipation"][k] = diss_rate[k] * dt
    curves = {key: np.concatenate([[0.0], np.cumsum(v)]) for key, v in steps.items()}
    curves["energy_change"] = energy - energy[0]
    curves["time_term"] = curves["drift"] + curves["ito"] + curves["martingale"]
    curves["residual_G2"] = curves["energy_change"] - curves["time_term"] + curves["G2"]
    curves["residual_true"] = curves["energy_change"] - curves["time_term"] + curves["dissipation"]
    curves["residual_no_ito"] = curves["residual_true"] + curves["ito"]
    out: dict[str, Any] = {key: float(curves[key][-1]) for key in TERMS}
    out.update({f"curve_{key}": curves[key] for key in TERMS})
    out.update(t=t, energy=energy, G2_rate=g2_rate, dissipation_rate=diss_rate)
    return out


def _check_authors_velocity(cfg: Mapping[str, Any]) -> None:
    """``ValueError`` naming the key where a config's token velocity is not the authors' that :func:`energy_parts`
    takes (post-normalised softmax attention, no mask, no token noise): its dissipation would be another velocity's,
    and the residual meaningless (pooled attention had given a residual of 0.68 of the dissipation without a word)."""
    model = cfg["model"]
    for key, value, wanted in (("model.attention", model["attention"], "softmax"), ("model.mask", model["mask"], "none"),
                               ("model.norm", model["norm"], "post")):
        if value != wanted:
            raise ValueError(f"{key}: the balance follows the authors' velocity (softmax attention, no mask, "
                             f"post-normalisation: {key} = {wanted!r}), got {value!r}")
    if (cfg.get("noise") or {}).get("gamma") is not None:
        raise ValueError(f"noise.gamma: the balance follows the authors' noiseless token velocity; this config adds "
                         f"token noise (gamma = {cfg['noise']['gamma']!r}), whose diffusion it does not count")


def balance_from_config(
    source: str | Path | Mapping[str, Any], overrides: Sequence[str] = (), *, keep_states: bool = False
) -> dict[str, Any]:
    r"""Run a config of the authors' setup and return its :func:`energy_balance`.

    .. math::

        \Delta E-\Big(\int\partial_tE\Big)+\int-\langle\nabla_xE,\dot x\rangle\,dt=\text{residual}

    For ``data/massucco_ou.toml`` or ``data/massucco_oscillating.toml`` (Massucco, Del Grande,
    Carioni, Brune and Schönlieb, arXiv 2605.18870): the run is :func:`meanfield.simulate` of the
    config with a frame at every step (``solver.save_every = solver.dt``), the weights at each
    step are the config's schedule, its drift :math:`b` is the schedule's, and :math:`\Sigma` is
    :func:`noise_covariance` of ``weights.noise`` and ``weights.sigma``.

    Parameters
    ----------
    source : path or mapping
        The config.
    overrides : sequence of str
        ``section.key=value`` assignments (``model.num_heads=10``, ``solver.t_final=5`` …).
    keep_states : bool
        Also return the frames ``x`` (K+1, n, d) and weights ``D`` (K+1, H, d, d).

    Returns
    -------
    dict
        :func:`energy_balance`, plus ``H``, ``n``, ``dt``, ``t_final``, ``sigma``, ``noise``,
        ``schedule``, and the per-frame ``G2_engine`` (``diagnostics/authors_G2`` of the run).

    Raises
    ------
    ValueError
        When the solver is not explicit Euler, the heads have no ``drift_at`` (not the authors'
        matrix SDE), or the weights' step differs from the solver's; naming the key where the run's
        velocity is not the authors' one that :func:`energy_parts` takes: ``model.attention`` other
        than ``"softmax"``, a ``model.mask``, a ``model.norm`` other than ``"post"``, or token noise
        (``noise.gamma``).
    """
    from meanfield import simulate
    from meanfield.build import build_model
    from meanfield.config import load_config

    cfg = load_config(dict(source) if isinstance(source, Mapping) else source, list(overrides))
    s, wts = cfg["solver"], cfg["weights"]
    if s.get("kind", "particle") != "particle" or s["method"] != "euler":
        raise ValueError(f"the balance follows the explicit Euler recursion: solver.method = 'euler', got {s['method']!r}")
    _check_authors_velocity(cfg)
    dt = float(s["dt"])
    if not np.isclose(float(wts.get("dt", dt)), dt, rtol=1e-12, atol=0):
        raise ValueError(f"weights.dt ({wts.get('dt')}) must equal solver.dt ({dt}): the tokens see D_k at t_k")
    cfg = load_config(cfg, [f"solver.save_every={dt!r}"])
    heads = build_model(cfg).heads
    if not hasattr(heads, "drift_at"):
        raise ValueError("the heads must follow a matrix SDE (weights.initial/noise/integrator, or schedule = 'relaxation')")
    if getattr(heads, "integrator", "euler-maruyama") != "euler-maruyama":
        raise ValueError("the balance follows the Euler–Maruyama recursion of the weights: weights.integrator = 'euler-maruyama'")
    run = simulate(cfg)
    t = np.asarray(run.t, dtype=float)
    x = np.asarray(run.x, dtype=float)
    stacks = [heads.at(float(tk)) for tk in t]
    D = np.stack([st.B for st in stacks])
    if not all(np.array_equal(st.V, st.B) for st in stacks):
        raise ValueError("the balance assumes the authors' value map V_h = D_h")
    sigma = float(getattr(heads, "sigma", 0.0))
    noise = str(getattr(heads, "noise", "symmetric"))
    C = None
    if sigma > 0:
        symmetric = bool(np.allclose(D[0], np.swapaxes(D[0], 1, 2)))
        C = noise_covariance(noise, sigma, D.shape[2], symmetric=symmetric)
    sign = 1.0 if cfg["model"]["direction"] == "ascent" else -1.0
    H = D.shape[1]
    w = np.full(H, 1.0 / H) if cfg["model"].get("combine", "sum") == "mean" else np.ones(H)  # the velocity's and energy's weights
    out = energy_balance(t, x, D, beta=float(cfg["model"]["beta"]), w=w,
                         drift=heads.drift_at, covariance=C, sign=sign)
    out.update(H=int(D.shape[1]), n=int(x.shape[1]), dt=dt, t_final=float(t[-1]), sigma=sigma, noise=noise,
               schedule=str(wts["schedule"]), G2_engine=np.asarray(run.diagnostics["authors_G2"], dtype=float))
    if keep_states:
        out.update(x=x, D=D)
    return out
