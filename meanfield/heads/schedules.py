r"""Time-dependent heads: the weight schedules of Massucco et al. (arXiv 2605.18870).

The parameters of head :math:`h` move in time, :math:`\theta^{(h)}_t`, and their
law is the empirical measure :math:`\Theta_t=\sum_h w_h\,\delta_{\theta^{(h)}_t}`
with :math:`w_h = 1/H` (the head weights ``w`` of the
:class:`~meanfield.heads.HeadStack`).  Every schedule has ``at(t) -> HeadStack``
(the :class:`~meanfield.model.HeadSchedule` protocol), is deterministic in ``t``
and reproducible from its seed.

**What moves.**  The dynamics sees a head only through its score matrix
:math:`B_h=Q_h^\top K_h` and its value :math:`V_h`, so the schedules act on
:math:`\theta_h=(B_h,V_h)` directly (a perturbation of :math:`Q_h, K_h` would
reach the dynamics only through :math:`B_h`).  They preserve the structure of
the configured heads :math:`\bar\theta_h=(\bar B_h,\bar V_h)`, which the public code of Massucco et al. (arXiv 2605.18870)
gradient-flow structure needs (symmetric, value-aligned :math:`B_\theta=V_\theta`):

* if :math:`\bar B_h` is symmetric, :math:`B_h(t)` stays symmetric (the
  perturbation acts on the :math:`d(d+1)/2` entries :math:`a\le b` and is
  mirrored); otherwise it acts on all :math:`d^2` entries;
* if :math:`\bar V_h=\bar B_h` (``V = "aligned"``), :math:`V_h(t)=B_h(t)` at all
  times; otherwise :math:`V_h` gets its own perturbation with the same rule.

"Equal" and "symmetric" are tested to a relative :math:`10^{-12}`.

Schedules (registry :data:`SCHEDULES`, config ``[weights] schedule``):

``constant``
    :class:`~meanfield.model.ConstantHeads`.
``ou`` — :class:`OUSchedule`
    Every free entry is an independent Ornstein–Uhlenbeck process
    :math:`d\theta=-\kappa(\theta-\bar\theta)\,dt+\sigma\,dW`, started at
    :math:`\bar\theta`, sampled **exactly** on the grid :math:`t_k=k\,\Delta`
    (``weights.dt``) by the Gaussian transition
    :math:`\theta_{k+1}=\bar\theta+e^{-\kappa\Delta}(\theta_k-\bar\theta)+\sigma\sqrt{(1-e^{-2\kappa\Delta})/(2\kappa)}\,\xi_k`
    (:math:`\sigma\sqrt\Delta\,\xi_k` when :math:`\kappa=0`), and interpolated
    piecewise-linearly in between, so that ``at(t)`` is a deterministic continuous
    function of ``t``.  Stationary variance of each entry: :math:`\sigma^2/(2\kappa)`.
``oscillating`` — :class:`OscillatingSchedule`
    :math:`\theta_h(t)=\bar\theta_h+A\sin(\omega t+\varphi_h)\,I`, phases
    :math:`\varphi_h=2\pi h/H` (spread over the heads; ``weights.phases`` may
    also be ``"equal"`` or ``"random"``, see :func:`oscillation_phases`).  The oscillation adds a
    multiple of the identity to :math:`B_h` (and to :math:`V_h`): for a scalar
    head :math:`\bar B_h=\lambda I` it is the head strength that oscillates,
    :math:`\lambda+A\sin(\omega t+\varphi_h)`; for :math:`A>\lambda` it changes sign.

``ou`` with ``weights.initial``, ``mean``, ``noise`` or ``integrator`` set, and ``relaxation`` — :class:`MatrixSDESchedule`
    The weight dynamics of the public code of Massucco et al., *Transformers as
    time-dependent gradient flows* (arXiv 2605.18870): one matrix :math:`D_h(t)` per
    head with :math:`B_h=V_h=D_h`, driven by
    :math:`dD=\kappa(M-D)\,dt+\sigma\,dW` (``ou``) or
    :math:`dD=r\,(F(t,\varphi_h)-D)\,dt` (``relaxation``), started at the
    configured heads or at :math:`Z+Z^\top` (``weights.initial = "random-symmetric"``, drawn from
    ``default_rng(model.seed)``, the stream of the noise's ``default_rng(weights.seed)``: equal seeds get a
    :class:`~meanfield.errors.ConfigNote`),
    and integrated on the grid :math:`t_k=k\Delta` by Euler–Maruyama (the
    authors' recursion, draw for draw) or, for ``ou``, by the exact transition.

``layers`` — :class:`LayerSchedule`
    Piecewise-constant heads, one independent draw per layer: on :math:`[k,k+1)` every
    random matrix of ``[[model.heads]]`` (``"random"`` or an ensemble of
    :mod:`meanfield.heads.ensembles`: ``"goe"``, ``"gaussian"``, ``"gpt2"``) is drawn afresh
    from ``default_rng([HEADS_STREAM, s_h, k])``, :math:`s_h` the head's seed (layer 0 is the configured
    heads, the draw of ``schedule = "constant"``); fixed matrices stay.  The particle
    integrator never steps across an integer time (:meth:`LayerSchedule.pieces`).

**Saving and replay.**  :func:`weight_path` samples a schedule on a time grid
(``t`` (T,), ``B`` (T, H, d, d), ``V`` (T, H, d, d), ``w`` (H,); a ``layers`` schedule
stores one draw per layer, ``t`` the layer starts, plus ``layers`` (T,), the layer indices, which
marks the path as piecewise constant);
:func:`weights_static` gives the same arrays under the HDF5 group ``weights/``;
:func:`schedule_from_path` builds a :class:`PathSchedule` that interpolates a
saved path linearly.  Because an OU schedule *is* the linear interpolant of its
grid values, replaying the path saved on its own grid gives the same heads at
every ``t`` (up to the rounding of the interpolation weights, ~1e-16), hence
the same run.  An oscillating schedule replays to :math:`O(\Delta^2)` between
grid points (exactly at them); rebuilding it from the stored config
(:func:`schedule_from_config`) is exact.

Examples
--------
>>> import numpy as np
>>> from meanfield.heads import HeadStack
>>> mean = HeadStack(B=np.eye(3)[None], V=np.eye(3)[None])
>>> ou = OUSchedule(mean, kappa=1.0, sigma=0.2, dt=0.01, seed=7)
>>> bool(np.array_equal(ou.at(0.5).B, OUSchedule(mean, kappa=1.0, sigma=0.2, dt=0.01, seed=7).at(0.5).B))
True
>>> osc = OscillatingSchedule(mean, amplitude=0.5, omega=2.0)
>>> float(osc.at(np.pi / 4).B[0, 0, 0])
1.5
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from meanfield.errors import ConfigError, ConfigNote
from meanfield.heads import Head, HeadStack, stack_heads
from meanfield.heads.head import NonFiniteHeads
from meanfield.model import ConstantHeads, HeadSchedule

__all__ = [
    "SCHEDULES",
    "OUSchedule",
    "OscillatingSchedule",
    "MatrixSDESchedule",
    "NOISES",
    "random_symmetric",
    "matrix_value",
    "relaxation_target",
    "check_euler_step",
    "PHASES",
    "oscillation_phases",
    "PathSchedule",
    "head_structure",
    "schedule_derivative",
    "schedule_from_config",
    "schedule_from_path",
    "weight_path",
    "weights_static",
    "path_structure",
    "default_grid",
    "schedule_step",
    "OSCILLATION_STEP",
    "LayerSchedule",
    "LAYER_SNAP",
    "sde_key",
    "unaligned_sde_error",
]

#: steps of noise drawn per block of the OU generator (block b uses the seed ``[seed, b]``)
_OU_BLOCK = 256
_REL = 1e-12


# ----------------------------------------------------------------------------- structure


@dataclass(frozen=True)
class _Structure:
    """Which entries of ``B`` and ``V`` move, per head."""

    b_symmetric: np.ndarray  # (H,) bool
    v_aligned: np.ndarray  # (H,) bool
    v_symmetric: np.ndarray  # (H,) bool


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    scale = max(1.0, float(np.max(np.abs(a))), float(np.max(np.abs(b))))
    return bool(np.max(np.abs(a - b)) <= _REL * scale)


def head_structure(stack: HeadStack) -> dict[str, np.ndarray]:
    """Per head: is ``B`` symmetric, is ``V`` equal to ``B`` (value-aligned), is ``V`` symmetric.

    Returns
    -------
    dict with boolean (H,) arrays ``b_symmetric``, ``v_aligned``, ``v_symmetric``.
    """
    s = _structure(stack)
    return {"b_symmetric": s.b_symmetric, "v_aligned": s.v_aligned, "v_symmetric": s.v_symmetric}


def path_structure(B: np.ndarray, V: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`head_structure` at every time of a weight path ``B``, ``V`` (T, H, d, d), with the same tolerance.

    Returns
    -------
    dict with boolean (T, H) arrays ``b_symmetric``, ``v_aligned``.
    """
    B, V = np.asarray(B, dtype=float), np.asarray(V, dtype=float)
    size_b = np.abs(B).max(axis=(-2, -1), initial=0.0)
    size_v = np.abs(V).max(axis=(-2, -1), initial=0.0)
    asymmetry = np.abs(B - np.swapaxes(B, -1, -2)).max(axis=(-2, -1), initial=0.0)
    misalignment = np.abs(V - B).max(axis=(-2, -1), initial=0.0)
    return {"b_symmetric": asymmetry <= _REL * np.maximum(1.0, size_b),
            "v_aligned": misalignment <= _REL * np.maximum(1.0, np.maximum(size_b, size_v))}


def _structure(stack: HeadStack) -> _Structure:
    H = stack.H
    return _Structure(
        b_symmetric=np.array([_close(stack.B[h], stack.B[h].T) for h in range(H)]),
        v_aligned=np.array([_close(stack.V[h], stack.B[h]) for h in range(H)]),
        v_symmetric=np.array([_close(stack.V[h], stack.V[h].T) for h in range(H)]),
    )


def _symmetric_from(values: np.ndarray, d: int) -> np.ndarray:
    """Symmetric matrices from their upper triangles: ``values`` (..., d(d+1)/2) -> (..., d, d)."""
    iu = np.triu_indices(d)
    out = np.zeros((*values.shape[:-1], d, d))
    out[..., iu[0], iu[1]] = values
    out[..., iu[1], iu[0]] = values
    return out


def _free_count(symmetric: bool, d: int) -> int:
    return d * (d + 1) // 2 if symmetric else d * d


def _matrix_from(values: np.ndarray, symmetric: bool, d: int) -> np.ndarray:
    if symmetric:
        return _symmetric_from(values, d)
    return values.reshape(*values.shape[:-1], d, d)


# ----------------------------------------------------------------------------- OU


def grid_kinks(dt: float, t0: float, t1: float) -> list[float]:
    r"""The grid points :math:`k\Delta` strictly inside ``(t0, t1)``: where a path linear between them bends.

    A Runge–Kutta step across such a kink sees a field that is only Lipschitz in time, and drops to second order
    (RK4 on OU weights: error 2.95e-3 at step 0.05 against 4.6e-9 at 0.01 = Δ); the particle solver cuts its steps
    there (:meth:`meanfield.solvers.particle_stepper.ParticleStepper.advance`).  Points within the grid's snapping
    tolerance (1e-12 Δ) of ``t0`` or ``t1`` make no cut.
    """
    first, last = int(math.floor(t0 / dt)) + 1, int(math.ceil(t1 / dt)) - 1
    snap = 1e-12 * dt
    return [k * dt for k in range(first, last + 1) if t0 + snap < k * dt < t1 - snap]


class OUSchedule:
    r"""Ornstein–Uhlenbeck heads, exact on the grid :math:`t_k=k\Delta`, linear in between.

    .. math::

        d\theta^{(h)}_t = -\kappa\big(\theta^{(h)}_t-\bar\theta^{(h)}\big)\,dt + \sigma\,dW^{(h)}_t,
        \qquad \theta^{(h)}_0=\bar\theta^{(h)}

    (Massucco et al., arXiv 2605.18870: weights of the integrable regime), on the free
    entries of :math:`(B_h, V_h)` described in the module docstring.  The grid
    values are the exact Gaussian transition, so their law does not depend on
    :math:`\Delta`; the path is extended lazily to any requested ``t`` and is
    the same whatever order the times are asked in (the noise of steps
    :math:`[256b, 256(b+1))` comes from ``default_rng([seed, b])``).

    Parameters
    ----------
    mean : HeadStack
        The configured heads :math:`\bar\theta` (and the head weights ``w``).
    kappa : float
        Mean-reversion rate :math:`\kappa\ge0`.
    sigma : float
        Noise level :math:`\sigma\ge0`.
    dt : float
        Grid step :math:`\Delta>0`.
    seed : int
        Noise seed.
    """

    def __init__(self, mean: HeadStack, *, kappa: float, sigma: float, dt: float, seed: int = 0) -> None:
        if not (kappa >= 0 and math.isfinite(kappa)):
            raise ValueError(f"kappa must be finite and >= 0, got {kappa!r}")
        if not (sigma >= 0 and math.isfinite(sigma)):
            raise ValueError(f"sigma must be finite and >= 0, got {sigma!r}")
        if not (dt > 0 and math.isfinite(dt)):
            raise ValueError(f"dt must be positive and finite, got {dt!r}")
        self.mean = mean
        self.kappa = float(kappa)
        self.sigma = float(sigma)
        self.dt = float(dt)
        self.seed = int(seed)
        self.structure = _structure(mean)
        d = mean.d
        self._nb = [_free_count(bool(s), d) for s in self.structure.b_symmetric]
        self._nv = [
            0 if a else _free_count(bool(s), d) for a, s in zip(self.structure.v_aligned, self.structure.v_symmetric)
        ]
        self._width = int(sum(self._nb) + sum(self._nv))
        # deviations from the mean on the grid, (K+1, width); start at the mean
        self._dev = np.zeros((1, self._width))
        self._B = mean.B[None].copy()
        self._V = mean.V[None].copy()
        self._cache_block = -1
        self._cache = np.empty((0, self._width))
        if self.kappa > 0:
            self.decay = math.exp(-self.kappa * self.dt)
            self.noise = self.sigma * math.sqrt(-math.expm1(-2.0 * self.kappa * self.dt) / (2.0 * self.kappa))
        else:
            self.decay = 1.0
            self.noise = self.sigma * math.sqrt(self.dt)

    def __repr__(self) -> str:
        return (f"OUSchedule(H={self.mean.H}, d={self.mean.d}, kappa={self.kappa:g}, sigma={self.sigma:g}, dt={self.dt:g}, "
                f"seed={self.seed})")

    @property
    def stationary_variance(self) -> float:
        r""":math:`\sigma^2/(2\kappa)` (``inf`` when :math:`\kappa=0`)."""
        return self.sigma**2 / (2 * self.kappa) if self.kappa > 0 else math.inf

    def _block_noise(self, block: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, block])
        return rng.standard_normal((_OU_BLOCK, self._width))

    def _extend(self, k: int) -> None:
        """Make sure grid values ``0..k`` exist."""
        have = self._dev.shape[0] - 1
        if k <= have:
            return
        k = max(k, 2 * have, 64)  # grow geometrically: extending to K steps costs O(K)
        new = np.empty((k - have, self._width))
        prev = self._dev[-1]
        for row, step in enumerate(range(have, k)):
            block, offset = divmod(step, _OU_BLOCK)
            if self._cache_block != block:
                self._cache = self._block_noise(block)
                self._cache_block = block
            prev = self.decay * prev + self.noise * self._cache[offset]
            new[row] = prev
        self._dev = np.concatenate([self._dev, new])
        B, V = self._stack_from(new)
        self._B = np.concatenate([self._B, B])
        self._V = np.concatenate([self._V, V])

    def _stack_from(self, dev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Heads ``(B, V)`` of shape (..., H, d, d) from deviation rows (..., width)."""
        d, H = self.mean.d, self.mean.H
        lead = dev.shape[:-1]
        B = np.broadcast_to(self.mean.B, (*lead, H, d, d)).copy()
        V = np.broadcast_to(self.mean.V, (*lead, H, d, d)).copy()
        pos = 0
        for h in range(H):
            nb = self._nb[h]
            dB = _matrix_from(dev[..., pos : pos + nb], bool(self.structure.b_symmetric[h]), d)
            pos += nb
            B[..., h, :, :] += dB
            if self.structure.v_aligned[h]:
                V[..., h, :, :] = B[..., h, :, :]
            else:
                nv = self._nv[h]
                V[..., h, :, :] += _matrix_from(dev[..., pos : pos + nv], bool(self.structure.v_symmetric[h]), d)
                pos += nv
        return B, V

    def _locate(self, t: float) -> tuple[int, float]:
        if not (t >= 0 and math.isfinite(t)):
            raise ValueError(f"the OU schedule is defined for finite t >= 0, got {t!r}")
        s = t / self.dt
        k = int(math.floor(s))
        frac = s - k
        if frac > 1 - 1e-12:  # t on a grid point up to rounding
            k, frac = k + 1, 0.0
        elif frac < 1e-12:
            frac = 0.0
        return k, frac

    def deviation(self, t: float) -> np.ndarray:
        """Flat vector of the free entries' deviations :math:`\\theta_t-\\bar\\theta`, shape ``(width,)``."""
        k, frac = self._locate(t)
        self._extend(k + 1)
        return (1.0 - frac) * self._dev[k] + frac * self._dev[k + 1]

    def at(self, t: float) -> HeadStack:
        r"""Heads at time ``t``: :math:`(1-f)\theta_k+f\theta_{k+1}`, :math:`t=(k+f)\Delta`."""
        k, frac = self._locate(t)
        self._extend(k + 1)
        if frac == 0.0:
            return HeadStack(B=self._B[k], V=self._V[k], w=self.mean.w)
        B = (1.0 - frac) * self._B[k] + frac * self._B[k + 1]
        V = (1.0 - frac) * self._V[k] + frac * self._V[k + 1]
        return HeadStack(B=B, V=V, w=self.mean.w)

    def derivative(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        r"""Right derivative :math:`(\dot B,\dot V)` of the piecewise-linear path at ``t``, each (H, d, d)."""
        k, _ = self._locate(t)
        self._extend(k + 1)
        return (self._B[k + 1] - self._B[k]) / self.dt, (self._V[k + 1] - self._V[k]) / self.dt

    def grid(self, t_final: float) -> np.ndarray:
        """The schedule's own grid :math:`0,\\Delta,\\dots` up to and including the first point ``>= t_final``."""
        k = int(math.ceil(t_final / self.dt - 1e-9))
        return self.dt * np.arange(max(k, 1) + 1)

    def kinks(self, t0: float, t1: float) -> list[float]:
        """Where the piecewise-linear path bends inside ``(t0, t1)`` (:func:`grid_kinks`)."""
        return grid_kinks(self.dt, t0, t1)


# ----------------------------------------------------------------------------- oscillating

#: phase choices of the oscillating schedule (config ``weights.phases``)
PHASES = ("spread", "equal", "same", "random")


def oscillation_phases(H: int, kind: str = "spread", *, seed: int = 0) -> np.ndarray:
    r"""Phases :math:`\varphi_h` of :class:`OscillatingSchedule`, shape ``(H,)``.

    ``"spread"``: :math:`2\pi h/H` (then :math:`\sum_h\sin(\omega t+\varphi_h)=0` for
    :math:`H\ge2`: the Θ-average of the oscillation cancels at first order, and the
    :math:`k`-th moments for :math:`H>k`); ``"equal"``: all 0 (the law
    :math:`\Theta_t` oscillates as a whole; ``"same"`` is the same); ``"random"``: i.i.d. uniform on
    :math:`[0,2\pi)` from ``default_rng([seed, 1])``.
    """
    if kind == "spread":
        return 2 * np.pi * np.arange(H) / H
    if kind in ("equal", "same"):
        return np.zeros(H)
    if kind == "random":
        return np.random.default_rng([int(seed), 1]).uniform(0.0, 2 * np.pi, size=H)
    raise ValueError(f"phases must be one of {PHASES}, got {kind!r}")



class OscillatingSchedule:
    r"""Oscillating heads :math:`\theta_h(t)=\bar\theta_h+A\sin(\omega t+\varphi_h)\,I`.

    .. math::

        B_h(t) = \bar B_h + A\sin(\omega t+\varphi_h)\,I_d,\qquad
        V_h(t) = \begin{cases} B_h(t) & \bar V_h=\bar B_h\\ \bar V_h + A\sin(\omega t+\varphi_h)\,I_d & \text{otherwise}\end{cases}

    (Massucco et al., arXiv 2605.18870: the non-integrable regime: :math:`\int|\dot\Theta_t|\,dt=\infty`).

    Parameters
    ----------
    mean : HeadStack
    amplitude : float
        :math:`A\ge0`.
    omega : float
        Angular frequency :math:`\omega`.
    phases : (H,) array, optional
        :math:`\varphi_h`; default :math:`2\pi h/H`.
    """

    def __init__(
        self, mean: HeadStack, *, amplitude: float, omega: float, phases: Sequence[float] | np.ndarray | None = None
    ) -> None:
        if not (amplitude >= 0 and math.isfinite(amplitude)):
            raise ValueError(f"amplitude must be finite and >= 0, got {amplitude!r}")
        if not math.isfinite(omega):
            raise ValueError(f"omega must be finite, got {omega!r}")
        self.mean = mean
        self.amplitude = float(amplitude)
        self.omega = float(omega)
        H = mean.H
        self.phases = 2 * np.pi * np.arange(H) / H if phases is None else np.asarray(phases, dtype=float)
        if self.phases.shape != (H,):
            raise ValueError(f"phases must have shape ({H},), got {self.phases.shape}")
        self.structure = _structure(mean)

    def __repr__(self) -> str:
        return f"OscillatingSchedule(H={self.mean.H}, d={self.mean.d}, amplitude={self.amplitude:g}, omega={self.omega:g})"

    def _with(self, coef: np.ndarray, base_B: np.ndarray, base_V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        eye = np.eye(self.mean.d)
        B = base_B + coef[:, None, None] * eye
        V = np.where(self.structure.v_aligned[:, None, None], B, base_V + coef[:, None, None] * eye)
        return B, V

    def at(self, t: float) -> HeadStack:
        coef = self.amplitude * np.sin(self.omega * t + self.phases)
        B, V = self._with(coef, self.mean.B, self.mean.V)
        return HeadStack(B=B, V=V, w=self.mean.w)

    def derivative(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        r""":math:`(\dot B,\dot V)=A\omega\cos(\omega t+\varphi_h)\,I`, each (H, d, d)."""
        coef = self.amplitude * self.omega * np.cos(self.omega * t + self.phases)
        zero = np.zeros_like(self.mean.B)
        return self._with(coef, zero, zero)


# ----------------------------------------------------------------------------- matrix SDE (the authors' weights)

#: noise laws of :class:`MatrixSDESchedule` (config ``weights.noise``)
NOISES = ("isotropic", "symmetric")


def random_symmetric(H: int, d: int, *, seed: int = 0) -> np.ndarray:
    r"""Random symmetric heads :math:`D_h=Z_h+Z_h^\top`, :math:`Z_h` standard normal, shape ``(H, d, d)``.

    The initial heads of Massucco et al., *Transformers as time-dependent gradient
    flows* (arXiv 2605.18870); ``Z = default_rng(seed).standard_normal((H, d, d))``.  That is the stream of the
    weight noise of :class:`MatrixSDESchedule` with the same seed (a config with ``model.seed = weights.seed`` gets a
    :class:`~meanfield.errors.ConfigNote`).
    """
    Z = np.random.default_rng(seed).standard_normal((H, d, d))
    return Z + np.swapaxes(Z, -1, -2)


def matrix_value(value: Any, d: int, *, key: str) -> np.ndarray:
    """A ``d×d`` matrix from a config value: a list of rows, ``"identity"``, or a number λ (λ·I)."""
    from meanfield.heads.head import _matrix  # the head matrices' parser, without their random draws and files

    if isinstance(value, bool) or (isinstance(value, str) and value != "identity"):
        raise ConfigError(key, f"expected a d×d matrix, 'identity' or a number, got {value!r}")
    return _matrix(value, key=key, d=d, rows=d, rng=np.random.default_rng(0), base=None)


def relaxation_target(target: Any, d: int, *, key: str = "weights.target") -> Callable[[float, np.ndarray], np.ndarray]:
    r"""The target :math:`F(t,\varphi)` of the relaxation schedule, from a ``d×d`` table.

    Each entry is a number or an expression in ``t`` and ``phi`` (the head's
    phase), checked as safely as ``init.expr`` (:mod:`meanfield.expressions`).

    Returns
    -------
    callable
        ``F(t, phases (H,)) -> (H, d, d)``.
    """
    from meanfield.expressions import compile_expression

    if not isinstance(target, (list, tuple)) or len(target) != d:
        raise ConfigError(key, f"expected a {d}×{d} matrix (a list of {d} rows) of numbers or expressions in t, phi, got {target!r}")
    entries: list[list[Any]] = []
    for i, row in enumerate(target):
        if not isinstance(row, (list, tuple)) or len(row) != d:
            raise ConfigError(f"{key}[{i}]", f"expected a row of {d} numbers or expressions, got {row!r}")
        out_row: list[Any] = []
        for j, item in enumerate(row):
            k = f"{key}[{i}][{j}]"
            if isinstance(item, bool):
                raise ConfigError(k, f"expected a number or an expression in t, phi, got {item!r}")
            if isinstance(item, (int, float)):
                if not math.isfinite(item):
                    raise ConfigError(k, f"must be finite, got {item!r}")
                out_row.append(float(item))
            elif isinstance(item, str):
                f = compile_expression(item, variables=("t", "phi"), key=k, what="a weights.target expression")
                phases = np.zeros(3)  # evaluation errors surface now; three phases, so that a value fitting H = 2 only
                try:  # (a pair) is not taken for one per head
                    probe = np.asarray(f(t=0.0, phi=phases), dtype=float)
                except ConfigError:  # (a ValueError too) it names the entry already
                    raise
                except (TypeError, ValueError) as exc:
                    raise ConfigError(k, f"{item!r} does not give a number: {exc}") from None
                if not (probe.size == 1 or probe.shape == phases.shape):
                    raise ConfigError(k, f"{item!r} must give one number (per head), got an array of shape {probe.shape}")
                if not np.all(np.isfinite(probe)):
                    raise ConfigError(k, f"{item!r} must give a finite number at t = 0")
                out_row.append(f)
            else:
                raise ConfigError(k, f"expected a number or an expression in t, phi, got {item!r}")
        entries.append(out_row)

    def F(t: float, phases: np.ndarray) -> np.ndarray:
        phases = np.asarray(phases, dtype=float)
        out = np.empty((phases.size, d, d))
        for i in range(d):
            for j in range(d):
                e = entries[i][j]
                out[:, i, j] = e if isinstance(e, float) else np.broadcast_to(np.asarray(e(t=float(t), phi=phases), dtype=float), phases.shape)
        return out

    return F


class MatrixSDESchedule:
    r"""Heads :math:`B_h=V_h=D_h(t)` driven by a matrix SDE, on the grid :math:`t_k=k\Delta`, linear in between.

    .. math::

        dD_h = b(D_h, t)\,dt + \sigma\,dW_h,\qquad
        b(D,t)=\kappa(M_h-D)\ \ (\text{ou})\quad\text{or}\quad r\,(F(t,\varphi_h)-D)\ \ (\text{relaxation}),

    the weight dynamics of the public code of Massucco et al., *Transformers as
    time-dependent gradient flows* (arXiv 2605.18870), whose value map is
    :math:`V_h=D_h` and score matrix :math:`Q_h^\top K_h=D_h`.  Euler–Maruyama:

    .. math::

        D_{k+1} = D_k + b(D_k,t_k)\,\Delta + \sigma\sqrt\Delta\,\xi_k,

    and, for ``ou`` with ``integrator="exact"``,
    :math:`D_{k+1}=M+e^{-\kappa\Delta}(D_k-M)+\sigma\sqrt{(1-e^{-2\kappa\Delta})/(2\kappa)}\,\xi_k`.
    The noise is :math:`\xi_k=(Z_k+Z_k^\top)/2` (``"symmetric"``, the authors'
    :math:`dW_{\mathrm{sym}}=\sqrt{dt}\,(Z+Z^\top)/2`) or :math:`Z_k` on the free
    entries (``"isotropic"``: mirrored from the upper triangle when every
    :math:`D_h(0)` and :math:`M_h` is symmetric), with
    ``Z_k = rng.standard_normal((H, d, d))`` drawn once per step, in step order, from
    ``rng = default_rng(seed)`` (no draws when :math:`\sigma=0`).  Between grid
    points the heads are interpolated linearly, so an explicit Euler particle step
    of size :math:`\Delta` sees exactly :math:`D_k` at :math:`t_k`.

    Parameters
    ----------
    initial : (H, d, d) array
        :math:`D_h(0)`.
    drift : {"ou", "relaxation"}
    dt : float
        Grid step :math:`\Delta>0`.
    kappa : float
        ``ou``: rate :math:`\kappa`.
    mean : (H, d, d) array
        ``ou``: :math:`M_h`.
    rate : float
        ``relaxation``: rate :math:`r`.
    target : callable
        ``relaxation``: ``F(t, phases) -> (H, d, d)`` (see :func:`relaxation_target`).
    phases : (H,) array
        :math:`\varphi_h` passed to ``target``.
    sigma : float
        Noise level :math:`\sigma\ge0`.
    noise : {"isotropic", "symmetric"}
    integrator : {"euler-maruyama", "exact"}
        Euler–Maruyama needs :math:`\kappa\Delta\le2` (``ou``) or :math:`r\Delta\le2` (``relaxation``): past it each
        step multiplies the distance to the mean or target by :math:`1-\kappa\Delta<-1` and the heads grow
        geometrically (refused, ``ValueError``).
    seed : int
    w : (H,) array, optional
        Head weights (default :math:`1/H`).
    """

    def __init__(
        self,
        initial: np.ndarray,
        *,
        drift: str = "ou",
        dt: float,
        kappa: float = 1.0,
        mean: np.ndarray | None = None,
        rate: float = 1.0,
        target: Callable[[float, np.ndarray], np.ndarray] | None = None,
        phases: np.ndarray | None = None,
        sigma: float = 0.0,
        noise: str = "symmetric",
        integrator: str = "euler-maruyama",
        seed: int = 0,
        w: np.ndarray | None = None,
    ) -> None:
        D0 = np.array(initial, dtype=float)
        if D0.ndim != 3 or D0.shape[1] != D0.shape[2]:
            raise ValueError(f"initial heads must have shape (H, d, d), got {D0.shape}")
        H, d = D0.shape[0], D0.shape[1]
        if drift not in ("ou", "relaxation"):
            raise ValueError(f"drift must be 'ou' or 'relaxation', got {drift!r}")
        if noise not in NOISES:
            raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
        if integrator not in ("euler-maruyama", "exact"):
            raise ValueError(f"integrator must be 'euler-maruyama' or 'exact', got {integrator!r}")
        if integrator == "exact" and drift != "ou":
            raise ValueError("the exact transition exists for the OU drift only; use integrator='euler-maruyama'")
        for name, value in (("dt", dt), ("kappa", kappa), ("rate", rate), ("sigma", sigma)):
            if not (math.isfinite(value) and value >= 0) or (name == "dt" and value == 0):
                raise ValueError(f"{name} must be finite and {'> 0' if name == 'dt' else '>= 0'}, got {value!r}")
        if integrator == "euler-maruyama":  # as a config's [weights] is refused (check_euler_step)
            name, value = ("kappa", kappa) if drift == "ou" else ("rate", rate)
            if value * dt > 2.0:
                raise ValueError(f"the Euler recursion diverges: {name} × dt = {value * dt:g} > 2 (each step multiplies the "
                                 f"heads' distance to their {'mean' if drift == 'ou' else 'target'} by 1 − {value * dt:g}); "
                                 f"take dt below 2 / {name} = {2.0 / value:g}"
                                 + (" or integrator='exact', stable for any step" if drift == "ou" else ""))
        self.d, self.H = d, H
        self.drift, self.noise, self.integrator = drift, noise, integrator
        self.dt, self.kappa, self.rate, self.sigma, self.seed = float(dt), float(kappa), float(rate), float(sigma), int(seed)
        self.mean_matrix = np.broadcast_to(np.eye(d) if mean is None else np.asarray(mean, dtype=float), (H, d, d)).copy()
        if drift == "relaxation" and target is None:
            raise ValueError("the relaxation drift needs a target F(t, phases)")
        self.target = target
        self.phases = np.zeros(H) if phases is None else np.asarray(phases, dtype=float).reshape(H)
        self.w = np.full(H, 1.0 / H) if w is None else np.asarray(w, dtype=float)
        self._symmetric = bool(all(_close(m, m.T) for m in D0) and (drift != "ou" or all(_close(m, m.T) for m in self.mean_matrix)))
        self._rng = np.random.default_rng(self.seed)
        self._D = [D0]
        if self.kappa > 0:
            self._decay = math.exp(-self.kappa * self.dt)
            self._exact_noise = self.sigma * math.sqrt(-math.expm1(-2.0 * self.kappa * self.dt) / (2.0 * self.kappa))
        else:
            self._decay, self._exact_noise = 1.0, self.sigma * math.sqrt(self.dt)

    def __repr__(self) -> str:
        H, d = self.mean_matrix.shape[:2]
        rate = f"kappa={self.kappa:g}" if self.drift == "ou" else f"rate={self.rate:g}"
        return (f"MatrixSDESchedule(H={H}, d={d}, drift={self.drift!r}, {rate}, sigma={self.sigma:g}, noise={self.noise!r}, "
                f"integrator={self.integrator!r}, dt={self.dt:g}, seed={self.seed})")

    def _xi(self) -> np.ndarray:
        Z = self._rng.standard_normal((self.H, self.d, self.d))
        if self.noise == "symmetric":
            return 0.5 * (Z + np.swapaxes(Z, -1, -2))
        if self._symmetric:
            upper = np.triu(Z)
            return upper + np.swapaxes(np.triu(Z, 1), -1, -2)
        return Z

    def drift_at(self, D: np.ndarray, t: float) -> np.ndarray:
        """The drift :math:`b(D, t)`, shape (H, d, d)."""
        if self.drift == "ou":
            return self.kappa * (self.mean_matrix - D)
        return self.rate * (self.target(t, self.phases) - D)

    def _extend(self, k: int) -> None:
        while len(self._D) <= k:
            step = len(self._D) - 1
            D, t = self._D[-1], step * self.dt
            if self.integrator == "exact":
                new = self.mean_matrix + self._decay * (D - self.mean_matrix)
                if self.sigma > 0:
                    new = new + self._exact_noise * self._xi()
            else:
                new = D + self.drift_at(D, t) * self.dt
                if self.sigma > 0:
                    new = new + self.sigma * math.sqrt(self.dt) * self._xi()
            self._D.append(new)

    def _locate(self, t: float) -> tuple[int, float]:
        return OUSchedule._locate(self, t)  # type: ignore[arg-type]  # same grid snapping (uses self.dt only)

    def at(self, t: float) -> HeadStack:
        r"""Heads at ``t``: :math:`B=V=(1-f)D_k+fD_{k+1}`, :math:`t=(k+f)\Delta`."""
        k, frac = self._locate(t)
        self._extend(k + 1)
        D = self._D[k] if frac == 0.0 else (1.0 - frac) * self._D[k] + frac * self._D[k + 1]
        return HeadStack(B=D, V=D, w=self.w)

    def derivative(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        r"""Right derivative :math:`(\dot B,\dot V)` of the piecewise-linear path, each (H, d, d)."""
        k, _ = self._locate(t)
        self._extend(k + 1)
        dD = (self._D[k + 1] - self._D[k]) / self.dt
        return dD, dD.copy()

    def grid(self, t_final: float) -> np.ndarray:
        """The schedule's grid :math:`0,\\Delta,\\dots` up to and including the first point ``>= t_final``."""
        k = int(math.ceil(t_final / self.dt - 1e-9))
        return self.dt * np.arange(max(k, 1) + 1)

    def kinks(self, t0: float, t1: float) -> list[float]:
        """Where the piecewise-linear path bends inside ``(t0, t1)`` (:func:`grid_kinks`)."""
        return grid_kinks(self.dt, t0, t1)


def check_euler_step(weights: Mapping[str, Any], *, note_overshoot: bool = False) -> None:
    r"""Refuse a ``[weights]`` table whose path is drawn by explicit Euler (Euler–Maruyama) past its stability bound.

    Each Euler step multiplies the distance of :math:`D_h` to the target (``relaxation``) or to the mean
    (``ou``) by :math:`1-r\Delta`: with :math:`r\Delta>2` (``weights.rate`` or ``weights.kappa`` times
    ``weights.dt``) its modulus exceeds 1 and the heads grow geometrically whatever ``solver.t_final`` — a property
    of the config, so it is refused when the config is read rather than when the path leaves the finite numbers (a
    path still finite at ``t_final``, e.g. heads of 10⁶, had run to exit 0).  The exact OU transition is stable
    for any step.

    With ``note_overshoot`` a step with :math:`1<r\Delta\le2` gets a
    :class:`~meanfield.errors.ConfigNote`: the path is bounded but overshoots, the distance changing sign every step
    (and, at :math:`r\Delta=2`, never decaying), which the continuous schedule never does.

    Raises
    ------
    ConfigError
        Naming ``weights.rate`` (relaxation) or ``weights.kappa`` (ou with ``integrator = "euler-maruyama"``).
    """
    schedule, integrator = weights.get("schedule"), weights.get("integrator", "auto")
    key = {"relaxation": "rate", "ou": "kappa"}.get(schedule)
    if key is None or not (integrator == "euler-maruyama" or (integrator == "auto" and schedule == "relaxation")):
        return
    product = float(weights.get(key, 1.0)) * float(weights["dt"])
    if product > 2.0:
        other = " (or integrator = 'exact', stable for any step)" if schedule == "ou" else ""
        raise ConfigError(f"weights.{key}", f"the Euler recursion of the weights diverges: weights.{key} × weights.dt = "
                                            f"{product:g} > 2 (each step multiplies the heads' distance to their "
                                            f"{'target' if schedule == 'relaxation' else 'mean'} by 1 − {product:g}); "
                                            f"lower weights.dt below 2 / weights.{key} = {2.0 / float(weights[key]):g}{other}")
    if note_overshoot and product > 1.0:
        decays = "changes sign every step and never decays" if product == 2.0 else f"is multiplied by {1.0 - product:g} each step"
        warnings.warn(f"weights.{key} × weights.dt = {product:g} > 1: the Euler path of the weights overshoots — "
                      f"the heads' distance to their {'target' if schedule == 'relaxation' else 'mean'} "
                      f"{decays}; weights.dt below 1 / weights.{key} = {1.0 / float(weights[key]):g} keeps it "
                      "monotone like the continuous schedule", ConfigNote, stacklevel=3)


def sde_key(w: Mapping[str, Any]) -> str:
    """The ``[weights]`` key that makes a schedule the matrix SDE of :class:`MatrixSDESchedule`: ``weights.schedule``
    (``relaxation``), else the first of ``weights.integrator`` (``"euler-maruyama"``), ``noise``, ``mean``,
    ``initial`` set away from the classic OU's."""
    if w.get("schedule") == "relaxation":
        return "weights.schedule"
    if w.get("integrator", "auto") == "euler-maruyama":
        return "weights.integrator"
    if w.get("noise", "isotropic") != "isotropic":
        return "weights.noise"
    return "weights.mean" if w.get("mean") is not None else "weights.initial"


def unaligned_sde_error(w: Mapping[str, Any], which: str) -> tuple[str, str]:
    """The key and words of the refusal of heads that are not value-aligned under the matrix SDE from
    ``initial = "mean"``: the key named is the one that chose the SDE (:func:`sde_key`; ``weights.initial``, left
    at its default, had been named whatever the user had set)."""
    key = sde_key(w)
    value = w.get(key.split(".")[1])
    return key, (f"{key} = {value!r} moves the heads as one matrix D_h = B_h = V_h from weights.initial = 'mean' (the "
                 f"configured heads), which needs value-aligned heads ({which}: V ≠ QᵀK; set V = 'aligned', or "
                 "weights.initial = 'random-symmetric')")


def _needs_sde(w: Mapping[str, Any]) -> bool:
    """Whether ``[weights]`` asks for more than the classic OU (its defaults keep :class:`OUSchedule`)."""
    return (
        w.get("initial", "mean") != "mean"
        or w.get("mean") is not None
        or w.get("noise", "isotropic") != "isotropic"
        or w.get("integrator", "auto") == "euler-maruyama"
    )


def _sde_from_config(cfg: Mapping[str, Any], mean: HeadStack) -> MatrixSDESchedule:
    w, model = cfg["weights"], cfg["model"]
    d, H = mean.d, mean.H
    kind = w["schedule"]
    if w.get("initial", "mean") == "random-symmetric":
        D0 = random_symmetric(H, d, seed=int(model.get("seed", 0)))
    else:
        if not all(_close(mean.V[h], mean.B[h]) for h in range(H)):
            raise ConfigError(*unaligned_sde_error(w, "the heads"))
        D0 = mean.B.copy()
    check_euler_step(w)
    integrator = w.get("integrator", "auto")
    if integrator == "auto":
        integrator = "exact" if kind == "ou" else "euler-maruyama"
    if kind == "relaxation" and integrator == "exact":
        raise ConfigError("weights.integrator", "schedule = 'relaxation' has no exact transition; use 'euler-maruyama' (or 'auto')")
    M = mean.B.copy() if w.get("mean") is None else np.broadcast_to(matrix_value(w["mean"], d, key="weights.mean"), (H, d, d)).copy()
    target = None
    phases = None
    if kind == "relaxation":
        if w.get("target") is None:
            raise ConfigError("weights.target", "schedule = 'relaxation' needs target = [[…], …], a d×d matrix of numbers or expressions in t, phi")
        target = relaxation_target(w["target"], d)
        phases = oscillation_phases(H, w.get("phases", "spread"), seed=int(w["seed"]))
    return MatrixSDESchedule(
        D0,
        drift=kind,
        dt=float(w["dt"]),
        kappa=float(w["kappa"]),
        mean=M,
        rate=float(w.get("rate", 1.0)),
        target=target,
        phases=phases,
        sigma=float(w["sigma"]) if kind == "ou" else 0.0,
        noise=w.get("noise", "isotropic"),
        integrator=integrator,
        seed=int(w["seed"]),
        w=mean.w,
    )



# ----------------------------------------------------------------------------- layers

#: a time within this of an integer is on the layer boundary (save times carry round-off)
LAYER_SNAP = 1e-9


class LayerSchedule:
    r"""Piecewise-constant random heads, redrawn at integer times (one draw per layer).

    .. math::

        \theta^{(h)}_t=\theta^{(h)}_k\quad\text{for } t\in[k,k+1),\qquad
        \theta^{(h)}_k\ \text{i.i.d. in } k \text{ (the head's random law)}

    A depth-:math:`L` transformer whose layers have independent random weights, read as
    the time-dependent heads of Massucco, Del Grande, Carioni, Brune and Schönlieb
    (*Multi-Headed Transformer Architectures as Time-dependent Wasserstein Gradient
    Flows*, arXiv 2605.18870) with :math:`\Theta_t` constant on each layer.  Layer
    :math:`k` of head :math:`h` is :func:`~meanfield.heads.head_from_spec` with
    ``layer=k``: its random matrices come from ``default_rng([HEADS_STREAM, s_h, k])`` (layer 0:
    ``default_rng([HEADS_STREAM, s_h])``, the heads of ``schedule = "constant"``;
    :data:`~meanfield.heads.head.HEADS_STREAM`), so a layer depends on
    ``(model.seed, h, k)`` only, whatever times are asked in whatever order.

    A time within :data:`LAYER_SNAP` of an integer belongs to the layer that starts there.

    Parameters
    ----------
    layers : callable or sequence of HeadStack
        ``draw(k) -> HeadStack``, or the stored layers ``0..K-1`` (a replay: past the
        last one its heads are held).
    """

    #: drawn layers kept at once (the current one and its neighbours: a run asks for layer k, then k + 1, …); an
    #: older one is drawn again when asked, the same draw (every drawn layer had been kept for the whole run)
    CACHE_LAYERS = 4

    def __init__(self, layers: Callable[[int], HeadStack] | Sequence[HeadStack]) -> None:
        if callable(layers):
            self._draw: Callable[[int], HeadStack] | None = layers
            self._cache: dict[int, HeadStack] = {}
        else:
            stacks = list(layers)
            if not stacks:
                raise ValueError("a layer schedule needs at least one layer")
            self._draw = None
            self._cache = dict(enumerate(stacks))

    def __repr__(self) -> str:
        layers = "a layer drawn at every integer time" if self._draw is not None else f"{len(self._cache)} layers"
        return f"LayerSchedule({layers})"

    @classmethod
    def from_specs(cls, specs: Sequence[Mapping[str, Any]] | None, *, d: int, seed: int = 0,
                   base: Path | None = None) -> LayerSchedule:
        """Layers redrawn from the ``[[model.heads]]`` tables (after ``model.num_heads`` replication)."""
        from meanfield.heads.head import heads_from_config

        def draw(k: int) -> HeadStack:
            return stack_heads(heads_from_config(specs, d=d, seed=seed, base=base, layer=k))

        return cls(draw)

    @staticmethod
    def layer(t: float) -> int:
        r"""The layer :math:`k=\lfloor t\rfloor` of time ``t`` (snapped up within :data:`LAYER_SNAP`)."""
        if not (t >= 0 and math.isfinite(t)):
            raise ValueError(f"the layer schedule is defined for finite t >= 0, got {t!r}")
        return int(math.floor(t + LAYER_SNAP))

    def heads(self, k: int) -> HeadStack:
        """The heads of layer ``k``."""
        if k not in self._cache:
            if self._draw is None:
                return self._cache[max(self._cache)]
            while len(self._cache) >= self.CACHE_LAYERS:  # the least recently drawn or asked for goes
                del self._cache[next(iter(self._cache))]
            self._cache[k] = self._draw(k)
        elif self._draw is not None:  # the most recently asked for last
            self._cache[k] = self._cache.pop(k)
        return self._cache[k]

    def at(self, t: float) -> HeadStack:
        return self.heads(self.layer(t))

    def derivative(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Zero: the heads are constant inside a layer (the jumps at integer times are not a derivative)."""
        stack = self.at(t)
        return np.zeros_like(stack.B), np.zeros_like(stack.V)

    def pieces(self, t0: float, t1: float) -> list[tuple[float, float, HeadStack]]:
        """``[t0, t1]`` cut at the integer times inside it: ``(a, b, heads)`` per piece, the heads constant on it.

        An integer within :data:`LAYER_SNAP` of ``t0`` or ``t1`` makes no cut; each piece
        takes the layer of its midpoint.
        """
        cuts = [float(m) for m in range(int(math.floor(t0)) + 1, int(math.ceil(t1)))
                if t0 + LAYER_SNAP < m < t1 - LAYER_SNAP]
        ends = [t0, *cuts, t1]
        return [(a, b, self.heads(self.layer(0.5 * (a + b)))) for a, b in zip(ends[:-1], ends[1:])]

    def grid(self, t_final: float) -> np.ndarray:
        r"""The layer starts :math:`0,1,\dots,\lfloor T\rfloor` that a run to ``t_final`` touches."""
        return np.arange(self.layer(max(float(t_final), 0.0)) + 1, dtype=float)


# ----------------------------------------------------------------------------- replay


def _check_finite_time(t: float, what: str) -> None:
    """``ValueError`` for a time that is not a finite number (a replayed path holds its ends only for finite times)."""
    if not math.isfinite(t):
        raise ValueError(f"{what} is defined for finite t, got {t!r}")


class PathSchedule:
    r"""Heads interpolated linearly in time from a saved path (replay of a run).

    .. math::

        \theta(t) = \frac{t_{k+1}-t}{t_{k+1}-t_k}\theta_k + \frac{t-t_k}{t_{k+1}-t_k}\theta_{k+1},
        \qquad t\in[t_k,t_{k+1}]

    Outside ``[t_0, t_{T-1}]`` the end values are held (a path with one time is constant); a time that is not
    finite (NaN, ±inf) is refused with ``ValueError``, as the other schedules refuse it.

    Parameters
    ----------
    t : (T,) array
        Increasing times.
    B, V : (T, H, d, d) arrays
    w : (H,) array, optional
        Head weights (default :math:`1/H`).
    """

    def __init__(self, t: np.ndarray, B: np.ndarray, V: np.ndarray, w: np.ndarray | None = None) -> None:
        self.t = np.asarray(t, dtype=float)
        self.B = np.asarray(B, dtype=float)
        self.V = np.asarray(V, dtype=float)
        if self.t.ndim != 1 or self.B.shape[0] != self.t.size or self.B.shape != self.V.shape or self.B.ndim != 4:
            raise ValueError(f"path shapes do not match: t {self.t.shape}, B {self.B.shape}, V {self.V.shape}")
        if self.t.size > 1 and not np.all(np.diff(self.t) > 0):
            raise ValueError("path times must increase strictly")
        self.w = None if w is None else np.asarray(w, dtype=float)
        # a uniform grid is located by division, exactly like OUSchedule does
        steps = np.diff(self.t)
        self._uniform = bool(self.t.size > 1 and self.t[0] == 0 and np.allclose(steps, steps[0], rtol=1e-12, atol=0))
        self._dt = float(steps[0]) if self.t.size > 1 else 0.0

    def __repr__(self) -> str:
        H, d = self.B.shape[1:3] if self.B.ndim == 4 else ("?", "?")
        return f"PathSchedule(H={H}, d={d}, {self.t.size} times in [{self.t[0]:g}, {self.t[-1]:g}])"

    def _locate(self, t: float) -> tuple[int, float]:
        _check_finite_time(t, "a replayed weight path")  # (NaN had passed both end tests: IndexError past the path)
        T = self.t.size
        if T == 1 or t <= self.t[0]:
            return 0, 0.0
        if t >= self.t[-1]:
            return T - 2, 1.0
        if self._uniform:
            s = t / self._dt
            k = min(int(math.floor(s)), T - 2)
            frac = s - k
            if frac > 1 - 1e-12:  # same snapping as OUSchedule: replay is bit-identical
                k, frac = k + 1, 0.0
            elif frac < 1e-12:
                frac = 0.0
            if k == T - 1:
                return T - 2, 1.0
            return k, frac
        k = int(np.searchsorted(self.t, t, side="right") - 1)
        return k, (t - self.t[k]) / (self.t[k + 1] - self.t[k])

    def at(self, t: float) -> HeadStack:
        """Heads at ``t``: linear between the path's times, its end values held outside them (``t`` finite)."""
        if self.t.size == 1:
            _check_finite_time(t, "a replayed weight path")
            return HeadStack(B=self.B[0], V=self.V[0], w=self.w)
        k, frac = self._locate(t)
        B = (1.0 - frac) * self.B[k] + frac * self.B[k + 1]
        V = (1.0 - frac) * self.V[k] + frac * self.V[k + 1]
        return HeadStack(B=B, V=V, w=self.w)

    def kinks(self, t0: float, t1: float) -> list[float]:
        """The path's times strictly inside ``(t0, t1)``, where the interpolant bends (:func:`grid_kinks`)."""
        if self._uniform:
            return [k for k in grid_kinks(self._dt, t0, t1) if k < self.t[-1]]
        snap = 1e-12 * max(abs(t1 - t0), 1e-300)
        return [float(k) for k in self.t if t0 + snap < k < t1 - snap]

    def derivative(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Right derivative of the interpolant (zero outside the path; ``t`` finite)."""
        _check_finite_time(t, "a replayed weight path")
        if self.t.size == 1 or t >= self.t[-1] or t < self.t[0]:
            return np.zeros_like(self.B[0]), np.zeros_like(self.V[0])
        k, _ = self._locate(t)
        h = self.t[k + 1] - self.t[k]
        return (self.B[k + 1] - self.B[k]) / h, (self.V[k + 1] - self.V[k]) / h


def schedule_derivative(schedule: HeadSchedule, t: float) -> tuple[np.ndarray, np.ndarray]:
    r""":math:`(\dot B(t),\dot V(t))` of any schedule; zero for :class:`~meanfield.model.ConstantHeads`.

    Schedules without a ``derivative`` method are differentiated by a centred
    difference with step :math:`10^{-6}` (one-sided at ``t = 0``).
    """
    if isinstance(schedule, ConstantHeads):
        zero = np.zeros_like(schedule.stack.B)
        return zero, zero.copy()
    method = getattr(schedule, "derivative", None)
    if callable(method):
        return method(t)
    eps = 1e-6
    lo, hi = max(0.0, t - eps), t + eps
    a, b = schedule.at(lo), schedule.at(hi)
    return (b.B - a.B) / (hi - lo), (b.V - a.V) / (hi - lo)


# ----------------------------------------------------------------------------- paths on disk


def default_grid(schedule: HeadSchedule, t_final: float, *, dt: float = 0.01) -> np.ndarray:
    """Times at which a schedule's path is saved: its own grid (OU), one time (constant), else step ``dt``."""
    if isinstance(schedule, (OUSchedule, MatrixSDESchedule, LayerSchedule)):
        return schedule.grid(t_final)
    if isinstance(schedule, ConstantHeads):
        return np.zeros(1)
    if isinstance(schedule, PathSchedule):
        return schedule.t.copy()
    k = max(1, int(math.ceil(t_final / dt - 1e-9)))
    return dt * np.arange(k + 1)


#: an oscillating schedule is followed with steps of at most this over |ω| (about 63 steps per period)
OSCILLATION_STEP = 0.1


def schedule_step(schedule: HeadSchedule | None) -> float:
    r"""The longest time step that follows a schedule of heads, for solvers whose step is set otherwise (the grid's
    CFL condition): :data:`OSCILLATION_STEP`/:math:`|\omega|` for an oscillation, the path's own step for the OU,
    relaxation and stored paths (their kinks), one layer for ``layers``, ``inf`` for constant heads."""
    if isinstance(schedule, OscillatingSchedule):
        return OSCILLATION_STEP / abs(schedule.omega) if schedule.omega != 0 else math.inf
    if isinstance(schedule, (OUSchedule, MatrixSDESchedule)):
        return float(schedule.dt)
    if isinstance(schedule, PathSchedule):
        return float(np.min(np.diff(schedule.t))) if schedule.t.size > 1 else math.inf
    if isinstance(schedule, LayerSchedule):
        return 1.0
    return math.inf


def weight_path(schedule: HeadSchedule, times: Sequence[float] | np.ndarray) -> dict[str, np.ndarray]:
    """The heads of ``schedule`` at ``times``: ``t`` (T,), ``B`` (T, H, d, d), ``V`` (T, H, d, d), ``w`` (H,).

    From the first time at which the heads leave the finite numbers (:class:`~meanfield.heads.head.NonFiniteHeads`)
    on, ``B`` and ``V`` are NaN, so that the caller can name that time (a path's first time must be finite)."""
    t = np.asarray(times, dtype=float).reshape(-1)
    stacks: list[HeadStack] = []
    for s in t:
        try:
            stacks.append(schedule.at(float(s)))
        except NonFiniteHeads:
            if not stacks:
                raise
            break
    B = np.full((t.size, *stacks[0].B.shape), np.nan)
    V = np.full_like(B, np.nan)
    B[:len(stacks)] = [s.B for s in stacks]
    V[:len(stacks)] = [s.V for s in stacks]
    return {"t": t, "B": B, "V": V, "w": stacks[0].w.copy()}


def weights_static(schedule: HeadSchedule, t_final: float, *, dt: float = 0.01) -> dict[str, np.ndarray]:
    """The weight path as static HDF5 arrays ``weights/t``, ``weights/B``, ``weights/V``, ``weights/w``.

    Sampled on :func:`default_grid` (an OU schedule on its own grid, so that
    :func:`schedule_from_path` replays it exactly).  Size: ``T·H·d²`` doubles
    for each of ``B`` and ``V``.
    """
    path = weight_path(schedule, default_grid(schedule, t_final, dt=dt))
    if isinstance(schedule, LayerSchedule):  # piecewise constant: replayed layer by layer, not interpolated
        path["layers"] = path["t"].astype(np.int64)
    return {f"weights/{key}": value for key, value in path.items()}


def schedule_from_path(source: Mapping[str, Any] | str | Path) -> HeadSchedule:
    """Replay schedule from a saved path.

    Parameters
    ----------
    source : mapping or path
        A mapping with ``t``, ``B``, ``V`` (optionally ``w``) — as returned by
        :func:`weight_path`, or the ``weights`` group of
        :func:`meanfield.io.runfile.read_run` — or an HDF5 run file with a ``weights`` group.
    """
    if isinstance(source, (str, Path)):
        import h5py

        with h5py.File(source, "r") as f:
            if "weights" not in f:
                raise ValueError(f"{source} holds no weight path (group 'weights')")
            group = f["weights"]
            source = {key: group[key][()] for key in group}
    for key in ("t", "B", "V"):
        if key not in source:
            raise ValueError(f"a weight path needs '{key}'")
    w = source.get("w")
    if "layers" in source:  # a layers run: one draw per layer, held constant on [k, k+1)
        layers = np.asarray(source["layers"]).reshape(-1)
        if not np.array_equal(layers, np.arange(layers.size)):
            raise ValueError("a layer path must hold the layers 0, 1, …, K-1 in order")
        B, V = np.asarray(source["B"], dtype=float), np.asarray(source["V"], dtype=float)
        return LayerSchedule([HeadStack(B=B[k], V=V[k], w=w) for k in range(layers.size)])
    if np.asarray(source["t"]).size == 1:
        return ConstantHeads(HeadStack(B=np.asarray(source["B"])[0], V=np.asarray(source["V"])[0], w=w))
    return PathSchedule(source["t"], source["B"], source["V"], w)


# ----------------------------------------------------------------------------- from a config


def _ou(cfg: Mapping[str, Any], mean: HeadStack) -> HeadSchedule:
    w = cfg["weights"]
    if _needs_sde(w):
        return _sde_from_config(cfg, mean)
    return OUSchedule(mean, kappa=float(w["kappa"]), sigma=float(w["sigma"]), dt=float(w["dt"]), seed=int(w["seed"]))


def _oscillating(cfg: Mapping[str, Any], mean: HeadStack) -> HeadSchedule:
    w = cfg["weights"]
    kind = w.get("phases", "spread")
    if kind not in PHASES:
        raise ConfigError("weights.phases", f"expected one of {', '.join(repr(p) for p in PHASES)}, got {kind!r}")
    phases = oscillation_phases(mean.H, kind, seed=int(w["seed"]))
    if _needs_sde(w):
        raise ConfigError("weights.initial", "initial, mean, noise and integrator apply to schedule = 'ou' or 'relaxation', not 'oscillating'")
    return OscillatingSchedule(mean, amplitude=float(w["amplitude"]), omega=float(w["omega"]), phases=phases)


def _constant(cfg: Mapping[str, Any], mean: HeadStack) -> HeadSchedule:  # noqa: ARG001
    return ConstantHeads(mean)


def _layers(cfg: Mapping[str, Any], mean: HeadStack) -> HeadSchedule:  # noqa: ARG001 - redrawn from the tables
    from meanfield.heads.head import is_random, replicate_specs

    model = cfg["model"]
    specs = model["heads"]
    if isinstance(specs, str):
        raise ConfigError("weights.schedule", "'layers' redraws the random matrices of [[model.heads]] tables; a checkpoint's heads are fixed")
    specs = replicate_specs(specs, model.get("num_heads"))
    if not specs or not any(is_random(spec) for spec in specs):
        raise ConfigError("weights.schedule", "'layers' redraws random head matrices, but no head has one: set Q, K or V to "
                                              "'random', 'goe', 'gaussian' or 'gpt2' in [[model.heads]]")
    return LayerSchedule.from_specs(specs, d=int(model["d"]), seed=int(model.get("seed", 0)))


#: weight schedules by name: ``f(resolved_config, mean_heads) -> schedule``
SCHEDULES: dict[str, Callable[[Mapping[str, Any], HeadStack], HeadSchedule]] = {
    "constant": _constant,
    "ou": _ou,
    "oscillating": _oscillating,
    "relaxation": lambda cfg, mean: _sde_from_config(cfg, mean),
    "layers": _layers,
}


def schedule_from_config(cfg: Mapping[str, Any], heads: Sequence[Head] | HeadStack) -> HeadSchedule:
    """The schedule of ``[weights]`` around the configured heads (called by :func:`meanfield.build.build_schedule`).

    Raises
    ------
    ConfigError
        ``weights.schedule`` for an unknown name.
    """
    name = cfg["weights"]["schedule"]
    try:
        build = SCHEDULES[name]
    except KeyError:
        raise ConfigError("weights.schedule", f"unknown schedule {name!r}; choose from {sorted(SCHEDULES)}") from None
    mean = heads if isinstance(heads, HeadStack) else stack_heads(list(heads))
    return build(cfg, mean)
