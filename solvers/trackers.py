"""Trackers: the only place where a run looks at itself.

Each tracker is called on every saved frame as ``tracker(t, state)`` and
returns a dict of scalars to record (or ``None``); it raises
:class:`~meanfield.solvers.loop.StopRun` to end the run.  The reason is kept in
``info["stop_reason"]`` and in the HDF5 attribute ``stop_reason``.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from meanfield.analysis.energy import energies_from_row_logs, energy_row_logs, head_energies, log_total_energy
from meanfield.analysis.mobility import authors_slope_squared, energy_time_derivative, metric_slope_squared
from meanfield.heads.schedules import schedule_derivative
from meanfield.model import Model
from meanfield.geometry.sphere import sphere_error
from meanfield.solvers.loop import StopRun

__all__ = [
    "EnergyTracker",
    "SlopeTracker",
    "SphereTracker",
    "FiniteTracker",
    "SteadyStateTracker",
    "largest_speed",
    "ProgressTracker",
    "CallbackTracker",
]


@dataclass
class EnergyTracker:
    r"""Records :math:`E_{\mathrm{multi}}` and every :math:`E_h` (Pendharkar, arXiv 2605.04279).

    Keys: ``energy`` (the sum of the :math:`E_h`; their mean when ``model.combine = "mean"``,
    the energy whose flow that velocity is) and ``energy_h0``, ``energy_h1``, …; with time-dependent
    weights also ``energy_theta`` (:math:`\sum_h w_h E_h`, Massucco et al. (arXiv 2605.18870)); for
    :math:`\beta>0` ``log_energy``, :math:`\ln` of ``energy`` from the same row sums, a number where the energy
    (:math:`\sim e^{\beta}`) exceeds the largest float (:math:`\beta\gtrsim709` for :math:`B=I`).  With
    ``points`` the state is a grid measure (cell masses at those points).

    Under ``model.mask = "causal"`` it records the same (unmasked) energy, but the causal
    flow is no gradient flow of it (Karagodin, Polyanskiy and Rigollet, *Clustering in Causal
    Attention Masking*, arXiv 2411.04990): the energy need not be monotone, and
    Thm 11 of arXiv 2605.04279 does not apply.
    """

    model: Model
    weights: np.ndarray | None = None
    points: np.ndarray | None = None
    name: str = "energy"
    #: the heads' log row sums of a velocity evaluation already made at ``(t, state)``, or ``None``
    #: (:meth:`~meanfield.solvers.particle_stepper.ParticleStepper.kept_row_logs`: the speed tracker's)
    shared: Callable[[float, np.ndarray], np.ndarray | None] | None = None

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:
        stack = self.model.heads.at(t)
        if self.points is None:  # particles: the state is the tokens
            x, weights = state, self.weights
        else:  # a grid measure: the state is the cell masses at fixed points
            x, weights = self.points, np.asarray(state, dtype=float)
        beta = self.model.beta
        # the energy from the row sums of the frame's velocity where there are some (no score pass of its own)
        logs = self.shared(t, state) if self.shared is not None and self.points is None else None
        if logs is None and beta != 0:
            logs = energy_row_logs(x, stack, beta=beta, weights=weights, backend=self.model.backend,
                                   tolerance=self.model.tolerance)
        with np.errstate(over="ignore"):
            energies = (head_energies(x, stack, beta=beta, weights=weights) if logs is None
                        else energies_from_row_logs(logs, beta=beta, weights=weights))
        mean = getattr(self.model, "combine", "sum") == "mean"
        total = float(energies.mean()) if mean else float(energies.sum())
        out = {"energy": total, "energy_theta": float(stack.w @ energies)}
        out.update({f"energy_h{h}": float(e) for h, e in enumerate(energies)})
        if beta > 0:  # ln of the energy: a number where the energy (~e^β) overflows
            out["log_energy"] = log_total_energy(logs, beta=beta, weights=weights, share=1.0 / stack.H if mean else 1.0)
        return out


@dataclass
class SlopeTracker:
    r"""Records the authors' slope diagnostic :math:`G^2` and the metric slope :math:`|\partial E|^2` (Massucco et al., arXiv 2605.18870).

    .. math::

        G^2 = \frac1n\sum_i \frac{\|P^\perp_{x_i}v_i\|^2}{\sum_h w_h\,n/N_{h,i}},\qquad
        |\partial E|^2 = \int \frac{\|P^\perp_x\,\mathrm{flux}(x)\|^2}{\hat b(x)}\,d\mu(x),\qquad
        \hat b(x_i)=\Big(\sum_h w_h Z_h(x_i)\Big)^{-1}

    with :math:`v_i` the mean over heads of the projected per-head softmax fields and
    :math:`N_{h,i}=\sum_j e^{\beta x_i^\top B_h x_j}`, as in Massucco, Del Grande, Carioni, Brune and
    Schönlieb's code (:func:`meanfield.analysis.mobility.authors_slope_squared`); the metric slope is
    that of the effective mobility :math:`\hat b` (:func:`meanfield.analysis.mobility.mobility_field`,
    value-aligned heads).  For one head the two agree.  With heterogeneous heads :math:`G^2`
    divides by the mean of the per-head mobilities, so it is neither :math:`|\partial E|^2` nor the
    dissipation of the mean-over-heads flow.

    Also ``dE_dt_explicit``, :math:`\partial_tE(\mu,t)` at fixed :math:`\mu` of :math:`E=\sum_hw_hE_h`
    (:func:`meanfield.analysis.mobility.energy_time_derivative`), the term of the energy–dissipation identity the
    other trackers leave out (the JKO scheme's own tracker had been the only one to record it): on a ``pooled`` run
    with :math:`V_h=B_h`, :math:`\tfrac{d}{dt}\,` ``energy_theta`` :math:`=\pm` ``slope2`` :math:`+` ``dE_dt_explicit``
    (+ for ascent, − for descent).  On a schedule with kinks (OU heads are piecewise linear in t, one kink every
    ``weights.dt``) the value is the derivative after the time ``t``, and a quadrature of the frames' values does not
    integrate :math:`\partial_tE`; for smooth schedules it closes the identity.

    Keys: ``authors_G2``, ``slope2`` and ``dE_dt_explicit``.  With ``points`` the state is a grid measure (cell masses
    at those points).  Added by :func:`meanfield.solvers.run.setup_run` and :func:`meanfield.solve` whenever the
    heads are time-dependent (:func:`meanfield.solvers.problem.add_slope_tracker`).
    """

    model: Model
    weights: np.ndarray | None = None
    points: np.ndarray | None = None
    name: str = "slope"
    #: whether a caller's tracker that records the same names replaces these values (True where mf.solve adds this
    #: tracker, which it had not done: a caller's own G² had then failed the run; a config's run keeps its own values,
    #: and such a caller's tracker is a TrackerError)
    yields_to_caller: bool = False

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:
        heads = self.model.heads.at(t)
        if self.points is None:  # particles: the state is the tokens
            x = np.asarray(state, dtype=float)
            a = np.full(x.shape[0], 1.0 / x.shape[0]) if self.weights is None else np.asarray(self.weights, dtype=float)
        else:  # a grid measure: cell masses at fixed points
            x, a = self.points, np.asarray(state, dtype=float)
        beta = self.model.beta
        with np.errstate(over="ignore"):
            slope2 = metric_slope_squared(x, heads, beta=beta, weights=a)
            g2 = authors_slope_squared(x, heads, beta=beta, weights=a)
            dB, _ = schedule_derivative(self.model.heads, t)
            dEdt = energy_time_derivative(x, heads, dB, beta=beta, weights=a)
        return {"authors_G2": g2, "slope2": slope2, "dE_dt_explicit": dEdt}


@dataclass
class SphereTracker:
    r"""Records :math:`\max_i|\|x_i\|-1|` and stops the run if it exceeds ``tol``."""

    tol: float = 1e-8
    name: str = "sphere"

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:
        err = sphere_error(state)
        if not err <= self.tol:
            raise StopRun(f"tokens left the sphere at t={t:.6g} (max | |x|-1 | = {err:.3g})", bad_state=True)
        return {"sphere_error": err}


@dataclass
class FiniteTracker:
    """Stops the run with a clear error at the first saved frame with NaN/Inf (that frame is not committed: the file ends
    at the frame before).  The particle steppers check the state after every step too
    (:func:`~meanfield.solvers.particle_stepper.fail_if_not_finite`), the grid stepper its velocities and masses, so a
    run of theirs stops at the step where it happened; this check is the one of every other stepper and of a frame."""

    name: str = "finite"

    def __call__(self, t: float, state: np.ndarray) -> None:
        if not np.all(np.isfinite(state)):
            bad = int(np.sum(~np.isfinite(state)))
            raise StopRun(f"NaN/Inf in the state at t={t:.6g} ({bad} entries)", bad_state=True)  # what was saved: the caller says


#: radians a fixed step may move a token: :class:`SteadyStateTracker` warns beyond it, and a phase diagram's batch fails
MAX_STEP_ANGLE = 0.5


def largest_speed(velocity: np.ndarray) -> float:
    r""":math:`\max_i\|v_i\|` of the rows of ``velocity``, finite wherever the entries are.

    The norm is taken of the rows scaled by the largest entry where that entry is beyond :math:`10^{\pm 150}` (the squares
    of ``np.linalg.norm`` overflowed: a velocity of 4.7e289 had been recorded as ``inf``, with NumPy's overflow warning
    on the command line); in range, it is ``np.linalg.norm``'s, to the bit.
    """
    v = np.asarray(velocity)
    if v.size == 0:
        return 0.0
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        top = float(np.max(np.abs(v)))
        if not math.isfinite(top) or top == 0.0 or 1e-150 < top < 1e150:
            return float(np.max(np.linalg.norm(v, axis=-1)))
        return top * float(np.max(np.linalg.norm(v / top, axis=-1)))


def _rounded_down(value: float) -> float:
    """``value`` > 0 cut to two significant digits (0.0195 to 0.019): advice below a bound stays below it (``:.2g`` had
    rounded 0.0195 up to the 0.02 in use)."""
    unit = 10.0 ** (math.floor(math.log10(value)) - 1)
    return math.floor(value / unit) * unit


@dataclass
class SteadyStateTracker:
    r"""Stops when :math:`\max_i\|\dot x_i\|` falls below ``tol`` (records the speed).

    With ``step`` (a fixed-step scheme's ``dt``) it warns once where a step would move a token by more than
    :data:`MAX_STEP_ANGLE` radians, :math:`h\max_i\|\dot x_i\|`: ``unnormalized`` attention at β = 10 had
    moved tokens tens of radians a step at dt = 0.1, the run completing as if nothing were wrong.  ``taken``, where
    given, returns the largest step :math:`h` the stepper took since it was last called (``None``: none): a frame's
    speed is then checked at the next frame, against the step taken from it (a save interval shorter than ``dt``
    shortens the steps: ``dt = 10`` with ``save_every = 0.1`` takes steps of 0.1, and had been warned of as steps of 10).
    Without it the step is ``step``.
    """

    velocity: Callable[[np.ndarray, float], np.ndarray]
    tol: float = 0.0
    name: str = "steady"
    step: float | None = None
    warned: bool = False
    taken: Callable[[], float | None] | None = None
    _before: tuple[float, float] | None = field(default=None, init=False, repr=False)  # the last frame's (t, speed)

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:
        speed = largest_speed(self.velocity(state, t))
        if self.taken is None:
            self._warn_of_step(t, speed, self.step)
        else:
            h, before = self.taken(), self._before
            if before is not None and h is not None:
                self._warn_of_step(before[0], before[1], h)
            self._before = (t, speed)
        if self.tol > 0 and speed < self.tol:
            raise StopRun(f"steady state at t={t:.6g}: max |dx/dt| = {speed:.3g} < {self.tol:g}", values={"max_speed": speed})
        return {"max_speed": speed}

    def _warn_of_step(self, t: float, speed: float, h: float | None) -> None:
        """Warn once where a step ``h`` from the frame at ``t`` moves a token by more than :data:`MAX_STEP_ANGLE`."""
        if self.step is None or h is None or self.warned or not h * speed > MAX_STEP_ANGLE:
            return
        import warnings

        from meanfield.errors import MeanfieldWarning

        self.warned = True
        step = f"solver.dt = {self.step:g}" if h == self.step else f"{h:g} (solver.dt = {self.step:g})"
        moved, advice = h * speed, MAX_STEP_ANGLE / speed
        if math.isfinite(moved) and advice > 0:
            what = (f"moves tokens by up to {moved:.3g} rad (max |dx/dt| = {speed:.3g}): far outside the Runge–Kutta step's "
                    f"accuracy; a solver.dt below {_rounded_down(advice):.2g}")
        else:  # (an infinite speed had advised "a solver.dt below 0")
            what = (f"has a field out of floating-point range (max |dx/dt| = {speed:.3g}): no step size helps "
                    "(a smaller model.beta, or normalized attention)")
        warnings.warn(f"at t = {t:.6g} a step of {step} {what}", MeanfieldWarning, stacklevel=3)


@dataclass
class ProgressTracker:
    """A tqdm bar on stderr, advanced in simulated time (``quiet`` turns it off)."""

    total: float
    initial: float = 0.0
    quiet: bool = False
    desc: str = "simulate"
    name: str = "progress"
    bar: Any = field(default=None, init=False)

    def __post_init__(self) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(
            total=self.total,
            initial=self.initial,
            disable=self.quiet,
            desc=self.desc,
            unit="t",
            bar_format="{l_bar}{bar}| t={n:.3g}/{total:.3g} [{elapsed}<{remaining}]",
        )

    def update(self, dt: float) -> None:
        self.bar.update(dt)

    def close(self) -> None:
        self.bar.close()


@dataclass
class CallbackTracker:
    """Wraps a caller's ``f(t, state) -> dict | None`` as a tracker, run after the solver's own.

    ``f`` sees the frame read-only: a tracker that edited it in place (``x -= x.mean(0)``) had changed the run,
    and at t = 0 the caller's own array, while the run ended "completed".

    Whatever ``f`` raises (but :class:`~meanfield.solvers.loop.StopRun`, which ends the run as a
    tracker may, and ``KeyboardInterrupt``) becomes a :class:`~meanfield.errors.TrackerError` naming
    the tracker and the time, with the original exception as its cause: a ``ZeroDivisionError`` of
    the caller's had been reported as numbers out of floating-point range. A result that is not a dict
    of names and real numbers is refused the same way, as is a name the run's own trackers record
    (checked by the run loop): it had replaced their series, on disk too.
    """

    func: Callable[[float, np.ndarray], dict[str, float] | None]
    name: str = "callback"
    #: the run loop refuses a name of this tracker's that the trackers before it (the run's own) recorded
    from_caller: ClassVar[bool] = True

    @classmethod
    def of(cls, tracker: Any) -> CallbackTracker:
        """``tracker`` as a :class:`CallbackTracker` (named after the function, or its ``name`` attribute)."""
        if isinstance(tracker, cls):
            return tracker
        if not callable(tracker):
            raise TypeError(f"a tracker is a callable (t, state) -> dict | None, got {type(tracker).__name__}")
        name = getattr(tracker, "name", None) or getattr(tracker, "__name__", None) or type(tracker).__name__
        return cls(tracker, name=str(name))

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float]:
        from meanfield.errors import TrackerError

        where = f"the tracker {self.name!r} at t={t:.6g}"
        view = np.asarray(state).view()
        view.flags.writeable = False  # it looks at the frame: an edit in place had changed the run in silence
        try:
            out = self.func(t, view)
        except StopRun as stop:  # its values are checked as a result is (a string had ended in NumPy's ValueError)
            stop.values = self.checked(f"{where} (its StopRun)", stop.values)
            raise
        except Exception as exc:
            raise TrackerError(f"{where} raised {type(exc).__name__}: {exc}") from exc
        return self.checked(where, out)

    @staticmethod
    def checked(where: str, out: Any) -> dict[str, float]:
        """``out`` as a dict of names and floats, or :class:`~meanfield.errors.TrackerError` naming ``where``."""
        from meanfield.errors import TrackerError

        if out is None:
            return {}
        if not isinstance(out, Mapping):
            raise TrackerError(f"{where} returned a {type(out).__name__}; a tracker returns a dict of names and numbers, or None")
        values: dict[str, float] = {}
        for key, value in out.items():
            # HDF5 reads "." (and "..") as the group itself: such a series had been dropped without a word
            if not isinstance(key, str) or key in ("", ".", "..") or "/" in key:
                raise TrackerError(f"{where} returned the name {key!r}; names are non-empty strings without '/', "
                                   "other than '.' and '..'")
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                if not (isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "iuf"):
                    raise TrackerError(f"{where} returned {key!r} = {value!r}; a tracker's values are real numbers")
            values[key] = float(value)
        return values
